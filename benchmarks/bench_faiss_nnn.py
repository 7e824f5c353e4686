"""Vector-index NNN at a 1M-caption bank (NNN Table A5 analogue) vs exact offsets, and nnn-retrieval's faiss path.

Data: synthetic COCO-like embeddings (hubnorm.synthetic, preset "coco", seed 0): the bank is the 1,000,000
captions of 200,000 training images, the gallery the 5,000 test images, the queries their 25,000 captions (t2i).
NNN alpha = 0.75, k = 128. Exact: NearestNeighborNormalization (blocked GEMM + top-k over the whole bank).
Fast: hubnorm.index.FaissNNN (IVF, nlist = default_nlist(N) ~ sqrt(N), nprobe tuned to recall 0.95 of the
top-k on 64 targets), with the default scan="blas" (probe-grouped GEMM over the probed lists), then an nprobe sweep
at nlist 1024 (--nprobes-1024) and, with --nlist-4096, at nlist 4096; --skip-faiss-scan skips the row of faiss's
own IVF-Flat scan (nprobe 256). Target: >= 20x faster offsets than exact, R@1 within 0.2 points.
"""

import argparse

import numpy as np
import torch
from _common import Timer, ivfpq_refine_index, write_report

import hubnorm as hn
from hubnorm.index import BankIndex, FaissNNN, IndexedRetriever
from hubnorm.synthetic import make_dataset


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-train-images", type=int, default=200_000)
    ap.add_argument("--skip-reference", action="store_true")
    ap.add_argument("--skip-faiss-scan", action="store_true")
    ap.add_argument("--nlist-4096", action="store_true")
    ap.add_argument("--nprobes-1024", type=int, nargs="+", default=[8, 16, 32, 64, 128, 256, 1024])
    ap.add_argument("--approx-only", action="store_true",
                    help="only the approximate-path curves (scope 2): exact offsets, then at nlist --approx-nlist the "
                         "float32 BLAS scan, the bfloat16 scan + exact re-rank, and faiss IVF-PQ fast-scan + "
                         "IndexRefineFlat re-rank (and HNSW with --hnsw), each over an nprobe / efSearch sweep")
    ap.add_argument("--approx-nlist", type=int, default=4096)
    ap.add_argument("--approx-nprobes", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--refines", type=float, nargs="+", default=[1.0, 2.0])
    ap.add_argument("--pq", nargs="+", default=["PQ64x4fs"], help="faiss fast-scan PQ codes of the IVF-PQ rows")
    ap.add_argument("--hnsw", action="store_true", help="also faiss IndexHNSWFlat (M=32) over the whole bank")
    ap.add_argument("--skip-blas", action="store_true", help="--approx-only without the BankIndex (BLAS scan) rows")
    ap.add_argument("--report-name", default="faiss_nnn")
    ap.add_argument("--kernel-timing", action="store_true", help="also time the index search alone (each row twice)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch and faiss threads (default: theirs); on a shared machine 1 avoids oversubscription")
    args = ap.parse_args()
    if args.threads:
        import faiss
        torch.set_num_threads(args.threads)
        faiss.omp_set_num_threads(args.threads)
    alpha, k = 0.75, 128
    with Timer() as tg:
        ds = make_dataset("coco", n_train_images=args.n_train_images, n_test_images=5000, n_val_images=1, seed=0)
    tr, te = ds.splits["train"], ds.splits["test"]
    bank = tr.captions
    del ds.splits["train"]
    task = hn.build_tasks(te.images, te.captions, te.caption_to_image, caption_bank=bank, directions=("t2i",))["t2i"]
    rows, notes = [], [f"data generated in {tg.seconds:.0f} s: bank {bank.shape}, gallery {te.images.shape}, "
                       f"queries {te.captions.shape}"]
    with Timer() as te_:
        exact = task.fit(hn.NearestNeighborNormalization(alpha=alpha, k=k))
    r_exact = hn.evaluate(exact, task)
    rows.append({"run": "exact NNN offsets (hubnorm blocked top-k)", "offsets seconds": te_.seconds,
                 "speed-up": 1.0, "R@1": r_exact["R@1"], "R@5": r_exact["R@5"]})
    print(rows[-1], flush=True)
    if args.approx_only:
        approx_curves(args, task, te.images, bank, exact, r_exact, te_.seconds, rows, notes, alpha, k)
        return
    with Timer() as tb:
        idx = BankIndex(bank)  # scan="blas" (probe-grouped GEMM) on CPU
    rows.append({"run": f"BankIndex build, scan=blas (one-off per bank: k-means on {min(idx.n, 32 * idx.nlist)} rows, "
                        f"HNSW assignment of {idx.n} rows, bank reordered by list)", "offsets seconds": tb.seconds,
                 "note": f"nlist={idx.nlist}; list sizes min/median/max {idx.list_sizes.min()}/"
                         f"{int(np.median(idx.list_sizes))}/{idx.list_sizes.max()}"})
    print(rows[-1], flush=True)
    with Timer() as tf:
        fast = task.fit(FaissNNN(alpha=alpha, k=k, bank_index=idx))
    r_fast = hn.evaluate(fast, task)
    rows.append({"run": f"FaissNNN scan=blas, nlist={idx.nlist}, nprobe={fast.nprobe_} (tuned: recall "
                        f"{fast.tuning_['recall']:.3f}), incl. tuning", "offsets seconds": tf.seconds,
                 "speed-up": te_.seconds / tf.seconds, "R@1": r_fast["R@1"], "R@5": r_fast["R@5"],
                 "R@1 - exact": r_fast["R@1"] - r_exact["R@1"],
                 "max abs offset error": float(np.abs(fast.offsets - exact.offsets).max())})
    print(rows[-1], flush=True)
    notes.append(f"nprobe tuning curve (recall of the exact top-{k} on 64 targets): {fast.tuning_['curve']}")

    def sweep(index, probes, tag):
        for p in probes:
            with Timer() as ts:  # search + bias only (the index is built)
                f = task.fit(FaissNNN(alpha=alpha, k=k, bank_index=index, nprobe=p))
            with Timer() as tk:  # the kernel alone: BankIndex.search (no fit-time validation of the 1M bank)
                index.search(te.images, k, nprobe=p, return_indices=False)
            ev = hn.evaluate(f, task)
            pr = index.probes(te.images, p)
            scanned = float(index.list_sizes[pr].sum() / (pr.shape[0] * index.n))
            rows.append({"run": f"{tag} nlist={index.nlist}, nprobe={p} (search + bias)",
                         "offsets seconds": ts.seconds, "speed-up": te_.seconds / ts.seconds, "R@1": ev["R@1"],
                         "R@5": ev["R@5"], "R@1 - exact": ev["R@1"] - r_exact["R@1"],
                         "max abs offset error": float(np.abs(f.offsets - exact.offsets).max()),
                         "fraction of bank scanned": scanned,
                         "note": f"BankIndex.search alone {tk.seconds:.2f} s"})
            print(rows[-1], flush=True)

    sweep(idx, args.nprobes_1024 if idx.nlist == 1024 else (16, 32, 64, 128, 256, idx.nlist), "FaissNNN scan=blas")
    if not args.skip_faiss_scan:
        with Timer() as ta:
            idx._ensure_faiss()
        with Timer() as ts:
            f = task.fit(FaissNNN(alpha=alpha, k=k, bank_index=idx, nprobe=256, scan="faiss"))
        b = task.fit(FaissNNN(alpha=alpha, k=k, bank_index=idx, nprobe=256, scan="blas"))
        ev = hn.evaluate(f, task)
        rows.append({"run": f"FaissNNN scan=faiss (faiss IVF-Flat scan), nlist={idx.nlist}, nprobe=256 "
                            "(search + bias)", "offsets seconds": ts.seconds, "speed-up": te_.seconds / ts.seconds,
                     "R@1": ev["R@1"], "R@5": ev["R@5"], "R@1 - exact": ev["R@1"] - r_exact["R@1"],
                     "max abs offset error": float(np.abs(f.offsets - exact.offsets).max()),
                     "note": f"faiss add {ta.seconds:.1f} s; max |offsets(faiss scan) - offsets(blas scan)| = "
                             f"{float(np.abs(f.offsets - b.offsets).max()):.2g}"})
        print(rows[-1], flush=True)
        del f, b
    if args.nlist_4096:
        del idx
        with Timer() as tb4:
            idx4 = BankIndex(bank, nlist=4096)
        rows.append({"run": f"BankIndex build, scan=blas, nlist=4096 (k-means on {min(idx4.n, 32 * 4096)} rows)",
                     "offsets seconds": tb4.seconds})
        print(rows[-1], flush=True)
        sweep(idx4, (64, 128, 256, 512), "FaissNNN scan=blas")
        idx = None
    # retrieval from the index with the augmented embeddings
    with Timer() as tr_build:
        ret = IndexedRetriever(fast)
    with Timer() as tq:
        r_ret = hn.evaluate(ret, task)
    with Timer() as tx:
        hn.evaluate(fast, task)
    rows.append({"run": f"IndexedRetriever on [t, h] (nlist={ret.index.nlist}, nprobe={ret.nprobe} tuned), "
                        f"25k queries top-10", "offsets seconds": tq.seconds,
                 "R@1": r_ret["R@1"], "R@5": r_ret["R@5"], "R@1 - exact": r_ret["R@1"] - r_exact["R@1"],
                 "note": f"build {tr_build.seconds:.2f} s; exact full-rank evaluation {tx.seconds:.2f} s"})
    print(rows[-1], flush=True)
    if not args.skip_reference:
        import faiss
        from nnn.faiss_cpu_retriever import FaissCPURetriever
        nl = 1024
        ref_index = faiss.IndexIVFFlat(faiss.IndexFlatIP(512), 512, nl, faiss.METRIC_INNER_PRODUCT)
        ret_index = faiss.IndexFlatIP(513)
        r = FaissCPURetriever(512, reference_index=ref_index, reference_nprobes=fast.nprobe_, retrieval_index=ret_index)
        r.retrieval_index = ret_index
        with Timer() as tref:
            means = r.setup_retriever(torch.from_numpy(te.images), torch.from_numpy(bank), k, 128)
        ref_off = -alpha * means[:, 0]
        rows.append({"run": f"nnn-retrieval FaissCPURetriever.setup_retriever (IVF nlist={nl}, nprobe={fast.nprobe_}, "
                            "faiss default training on all rows + flat retrieval index)",
                     "offsets seconds": tref.seconds, "speed-up": te_.seconds / tref.seconds,
                     "max abs offset error": float(np.abs(ref_off - exact.offsets).max())})
        print(rows[-1], flush=True)
    write_report("faiss_nnn", "Vector-index NNN at a 1M-caption bank (NNN Table A5 analogue)",
                 "t2i, synthetic COCO-like data (1,000,000 bank captions, 5,000 test images, 25,000 test captions), "
                 "alpha = 0.75, k = 128. 'speed-up' = exact offsets time / this time. R@K from exact full-rank "
                 "evaluation of the offsets unless the row is the IndexedRetriever.", rows, notes)


def approx_curves(args, task, gallery, bank, exact, r_exact, t_exact, rows, notes, alpha, k):
    """Scope 2 of issue 25: the speed / R@1 curve of each approximate candidate stage, the exact offsets timed in
    the same process. 'offsets seconds' = task.fit with a built index (search + bias, and the fit-time validation
    of the bank); the note gives the search kernel alone. Builds are one-off rows of their own."""
    import copy

    import faiss

    from hubnorm.normalizers.nnn import nnn_bias

    title = ("Approximate NNN offsets at a large caption bank: the speed / R@1 curve of each candidate stage "
             "(issue 25, scope 2)")
    intro = (f"t2i, synthetic COCO-like data ({bank.shape[0]:,} bank captions, {gallery.shape[0]:,} test images, "
             f"{task.n_queries:,} test captions), alpha = 0.75, k = 128, {torch.get_num_threads()} torch thread(s). "
             "'speed-up' = exact offsets seconds / this row's offsets seconds (both measured in this process; an "
             "index is built once and reused, its build is a row of its own and not in the speed-up). R@K from exact "
             "full-rank evaluation of the offsets.")

    def flush(final=False):  # the report after every row: a stopped run keeps the rows it measured
        extra = [] if final else ["PARTIAL: written while the run was in progress (the rows above are all it measured)"]
        write_report(args.report_name, title, intro, rows, list(notes) + extra)

    def row(run, seconds, offsets, extra=None):
        fitted = copy.copy(exact)
        fitted.offsets_ = torch.as_tensor(offsets, dtype=exact.offsets_.dtype)
        ev = hn.evaluate(fitted, task)
        r = {"run": run, "offsets seconds": seconds, "speed-up": t_exact / seconds, "R@1": ev["R@1"], "R@5": ev["R@5"],
             "R@1 - exact": ev["R@1"] - r_exact["R@1"],
             "max abs offset error": float(np.abs(np.asarray(offsets) - exact.offsets).max())}
        r.update(extra or {})
        rows.append(r)
        print(r, flush=True)
        flush()

    nl = args.approx_nlist
    if not args.skip_blas:  # the BankIndex rows: float32 BLAS scan, bfloat16 scan + exact re-rank
        with Timer() as tb:
            idx = BankIndex(bank, nlist=nl)
        with Timer() as tb16:
            idx._bf16_rows()
        rows.append({"run": f"BankIndex build, nlist={nl} (k-means on {min(idx.n, 32 * nl)} rows, assignment, bank "
                            "reordered by list)", "build seconds": tb.seconds,
                     "note": f"+ bfloat16 copy of the reordered bank for scan=blas-bf16: {tb16.seconds:.2f} s"})
        print(rows[-1], flush=True)
        for p in args.approx_nprobes:
            for scan, refine in [("blas", None)] + [("blas-bf16", r) for r in args.refines]:
                with Timer() as ts:
                    f = task.fit(FaissNNN(alpha=alpha, k=k, bank_index=idx, nprobe=p, scan=scan, refine=refine))
                note = {}
                if args.kernel_timing:
                    with Timer() as tk:
                        idx.search(gallery, k, nprobe=p, scan=scan, refine=refine, return_indices=False)
                    note = {"note": f"search alone {tk.seconds:.2f} s"}
                name = "float32 BLAS scan" if scan == "blas" else f"bfloat16 BLAS scan + exact re-rank of {refine:g} k"
                row(f"FaissNNN scan={scan}{'' if refine is None else f', refine={refine:g}'}: IVF nlist={nl}, "
                    f"nprobe={p}, {name}", ts.seconds, f.offsets, note)
                del f
    # faiss IVF-PQ fast-scan candidates + faiss's exact re-rank (IndexRefineFlat holds a float32 copy of the bank)
    x = np.ascontiguousarray(bank, dtype=np.float32)
    g = np.ascontiguousarray(gallery, dtype=np.float32)
    for pq in args.pq:
        with Timer() as tpq:
            ref, n_sample = ivfpq_refine_index(x, nl, pq)
        base = ref.base_index
        ivf = faiss.extract_index_ivf(base)
        rows.append({"run": f"faiss IVF{nl},{pq} + IndexRefineFlat build (k-means + PQ training on {n_sample} rows, "
                            "encoding, float32 copy for the re-rank)", "build seconds": tpq.seconds})
        print(rows[-1], flush=True)
        for p in args.approx_nprobes:
            for refine in args.refines:
                ivf.nprobe = p
                ref.k_factor = float(refine)
                with Timer() as ts:
                    D, I = ref.search(g, k)
                    off = -nnn_bias(torch.from_numpy(np.where(I >= 0, D, -np.inf)), alpha).numpy()
                note = {}
                if args.kernel_timing:
                    with Timer() as tn:
                        base.search(g, k)
                    note = {"note": f"fast-scan search alone (no re-rank) {tn.seconds:.2f} s"}
                row(f"faiss IVF{nl},{pq} + IndexRefineFlat k_factor={refine:g}, nprobe={p} (search + bias)",
                    ts.seconds, off, note)
        del ref, base
    if args.hnsw:
        with Timer() as th:
            h = faiss.IndexHNSWFlat(x.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
            h.hnsw.efConstruction = 40
            h.add(x)
        rows.append({"run": f"faiss IndexHNSWFlat(M=32, efConstruction=40) build over {x.shape[0]} rows",
                     "build seconds": th.seconds})
        print(rows[-1], flush=True)
        for ef in (128, 256, 512):
            h.hnsw.efSearch = ef
            with Timer() as ts:
                D, I = h.search(g, k)
                off = -nnn_bias(torch.from_numpy(np.where(I >= 0, D, -np.inf)), alpha).numpy()
            row(f"faiss IndexHNSWFlat efSearch={ef} (search + bias)", ts.seconds, off)
    flush(final=True)


if __name__ == "__main__":
    main()
