"""Approximate NNN offsets at a 1M-caption bank: graph (HNSW) and reduced-dimension candidate stages + exact re-rank.

Issue 25, scope 2, the candidates bench_faiss_nnn.py --approx-only does not cover. Same data as there (synthetic
COCO-like, preset "coco", seed 0: bank = the captions of --n-train-images training images, gallery = the 5,000 test
images, queries their 25,000 captions, t2i), NNN alpha = 0.75, k = 128; the exact offsets are timed in the same
process. Each candidate stage returns a pool of ``k_factor * k`` bank rows per gallery image; faiss's
IndexRefineFlat re-ranks the pool exactly (float32 inner products with the full 512-d rows) and the NNN offset is
-alpha * mean of the re-ranked top-k. Candidates:

* ``hnsw-rD``: faiss IndexHNSWFlat (inner product) over the bank projected to D dimensions, behind an
  IndexPreTransform. The projection is the top-D eigenvectors of the bank's *uncentred* second moment (sample of
  --train-size rows): with unit vectors, <Vq, Vx> is the best rank-D approximation of <q, x> on the bank's energy,
  and no mean is subtracted (a centred PCA adds -<mu, x> to each score and changes the ranking). D = 512 means no
  projection (plain IndexHNSWFlat).
* ``flat-rD``: exact (flat) inner-product scan of the projected bank for the pool: the bound of the projection
  alone, without a graph.
* ``ivfpq``: faiss IVF<nlist>,PQ64x4fs fast-scan + IndexRefineFlat with large pools (k_factor 8-32).
* ``--cand-*`` (issue 25, session 5): candidate stages on a projection of the bank and the queries, the pool
  re-ranked exactly with the original vectors (faiss.knn_inner_products_by_idx; own re-rank because faiss's
  IndexRefineFlat would re-rank with the transformed query). ``--cand-projections``: ``query-aware``
  (:func:`query_aware_projection`: the rank-D bilinear form closest to <q, x> over the queries' and the bank's
  distributions, an asymmetric pair of maps), ``uncentred`` (the bank's top-D eigenvectors on both sides, as
  ``hnsw-rD`` / ``flat-rD``), ``+shift`` (queries moved by mean(bank) - mean(gallery) before the candidate
  stage). Stages: ``--cand-flat`` (exhaustive scan of the projected bank), ``--cand-hnsw``, ``--cand-ivf`` (faiss
  index_factory specs, e.g. ``IVF16384,PQ32x4fs@1024,2048``).
* ``--library NLIST@NPROBES:REFINES``: the same stage as the library runs it, ``task.fit(FaissNNN(projection_dim=D,
  bank_index=ProjectedBankIndex(...)))``, timed like the exact row (validation + search + bias).

Reported per row: offsets seconds (search + re-rank + bias for the 5,000 gallery images, the index built once),
speed-up over exact, R@1 / R@5 from exact full-rank evaluation of the offsets, R@1 - exact, max abs offset error,
and the recall of the exact top-k (share of each image's exact top-k found by the approximate top-k) on 256
gallery images. Builds are rows of their own ('build seconds').
"""

import argparse
import copy

import numpy as np
import torch
from _common import Timer, ivfpq_refine_index, load_average, write_report

import hubnorm as hn
from hubnorm.index import query_aware_projection
from hubnorm.normalizers.nnn import nnn_bias
from hubnorm.synthetic import make_dataset


def projection(bank, dim, train_size, seed=0):
    """(512, dim) float32: top-``dim`` eigenvectors of the uncentred second moment of a sample of the bank."""
    rng = np.random.default_rng(seed)
    s = bank[np.sort(rng.choice(bank.shape[0], size=min(bank.shape[0], train_size), replace=False))]
    m = s.astype(np.float64).T @ s.astype(np.float64)
    w, v = np.linalg.eigh(m)
    return np.ascontiguousarray(v[:, ::-1][:, :dim], dtype=np.float32), float(w[::-1][:dim].sum() / w.sum())


def pretransform(base, v):
    """faiss IndexPreTransform applying x -> x @ v (no bias) before ``base``."""
    import faiss
    d_in, d_out = v.shape
    lt = faiss.LinearTransform(d_in, d_out, False)
    faiss.copy_array_to_vector(np.ascontiguousarray(v.T).ravel(), lt.A)
    lt.is_trained = True
    idx = faiss.IndexPreTransform(lt, base)
    idx.is_trained = True
    return idx


def rerank(bank, queries, ids, k):
    """Exact float32 re-rank of a candidate pool (faiss search output: ids -1 only at the end of a row): the inner
    products of each query with its pool's bank rows, read in place by faiss.knn_inner_products_by_idx, and their
    top-``k``; returns (values, bank ids), (m, k) each, missing entries -inf / -1."""
    import faiss
    m, pool = ids.shape
    out_v = np.empty((m, k), np.float32)
    out_i = np.empty((m, k), np.int64)
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    faiss.knn_inner_products_by_idx(faiss.swig_ptr(queries), faiss.swig_ptr(bank), faiss.swig_ptr(ids),
                                    bank.shape[1], m, bank.shape[0], pool, k, faiss.swig_ptr(out_v),
                                    faiss.swig_ptr(out_i), pool)
    out_v[out_i < 0] = -np.inf
    return out_v, out_i


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-train-images", type=int, default=200_000)
    ap.add_argument("--threads", type=int, default=1, help="torch and faiss threads for the searches")
    ap.add_argument("--build-threads", type=int, default=None, help="faiss threads for index builds (default --threads)")
    ap.add_argument("--train-size", type=int, default=131_072)
    ap.add_argument("--hnsw-dims", type=int, nargs="*", default=[64])
    ap.add_argument("--hnsw-m", type=int, default=32)
    ap.add_argument("--ef-construction", type=int, default=40)
    ap.add_argument("--efs", type=int, nargs="+", default=[256, 512])
    ap.add_argument("--k-factors", type=float, nargs="+", default=[2, 4])
    ap.add_argument("--flat-dims", type=int, nargs="*", default=[])
    ap.add_argument("--flat-k-factors", type=float, nargs="+", default=[2])
    ap.add_argument("--ivfpq-nlist", type=int, default=0, help="> 0: also IVF<nlist>,PQ64x4fs + refine rows")
    ap.add_argument("--ivfpq-nprobes", type=int, nargs="+", default=[512, 1024])
    ap.add_argument("--ivfpq-k-factors", type=float, nargs="+", default=[8, 16])
    ap.add_argument("--cand-projections", nargs="+", default=["query-aware"],
                    choices=["query-aware", "uncentred", "query-aware+shift", "uncentred+shift"],
                    help="projections of the --cand-* rows, each run in turn: the query-aware pair (L, R) of "
                         "query_aware_projection, or the bank's uncentred top-D eigenvectors on both sides; '+shift': "
                         "the candidate stage searched with normalize(q + mean(bank) - mean(gallery)) (the exact "
                         "re-rank uses q). --cand-flat rows for each; --cand-hnsw / --cand-ivf rows for the first only")
    ap.add_argument("--cand-queries", choices=["gallery", "train-images"], default="gallery",
                    help="the query sample the query-aware projection is fitted on: the gallery images themselves "
                         "(the targets a fit sees) or 20,000 training images (held-out queries of the same kind)")
    ap.add_argument("--cand-dim", type=int, default=64)
    ap.add_argument("--cand-flat", action="store_true", help="--cand-* rows: exhaustive scan of the projected bank")
    ap.add_argument("--cand-flat-k-factors", type=float, nargs="+", default=[2])
    ap.add_argument("--cand-hnsw", action="store_true", help="--cand-* rows: IndexHNSWFlat over the projected bank")
    ap.add_argument("--cand-ivf", nargs="*", default=[],
                    help="--cand-* rows: faiss index_factory IVF specs over the projected bank, each with its nprobes "
                         "after '@' (default --cand-nprobes), e.g. IVF4096,PQ32x4fs@256,512")
    ap.add_argument("--cand-nprobes", type=int, nargs="+", default=[256, 512])
    ap.add_argument("--cand-k-factors", type=float, nargs="+", default=[2, 4])
    ap.add_argument("--cand-train-max", type=int, default=262_144,
                    help="k-means / PQ training rows of the --cand-ivf indexes: min(n, 32 * nlist, this)")
    ap.add_argument("--library", nargs="*", default=[],
                    help="rows of the library path: FaissNNN(projection_dim=--cand-dim, bank_index=a prebuilt "
                         "hubnorm.index.ProjectedBankIndex) fitted by task.fit, timed like the exact offsets; each "
                         "spec NLIST@NPROBE,...:REFINE,..., e.g. 4096@256,512:2,4")
    ap.add_argument("--library-rounds", type=int, default=1,
                    help="> 1: after the --library rows, this many alternating rounds of the exact fit and every "
                         "library setting (the speed-up column then gives the median of the per-round ratios)")
    ap.add_argument("--recall-images", type=int, default=256)
    ap.add_argument("--report-name", default="faiss_nnn_graph")
    ap.add_argument("--out-dir", default=None)
    args = ap.parse_args()
    import faiss
    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    build_threads = args.build_threads or args.threads
    alpha, k = 0.75, 128
    load_start = load_average()
    with Timer() as tg:
        ds = make_dataset("coco", n_train_images=args.n_train_images, n_test_images=5000, n_val_images=1, seed=0)
    tr, te = ds.splits["train"], ds.splits["test"]
    bank = np.ascontiguousarray(tr.captions, dtype=np.float32)
    del ds.splits["train"]
    task = hn.build_tasks(te.images, te.captions, te.caption_to_image, caption_bank=bank, directions=("t2i",))["t2i"]
    g = np.ascontiguousarray(te.images, dtype=np.float32)
    rows, notes = [], [f"data generated in {tg.seconds:.0f} s: bank {bank.shape}, gallery {g.shape}, queries "
                       f"{te.captions.shape}"]
    with Timer() as te_:
        exact = task.fit(hn.NearestNeighborNormalization(alpha=alpha, k=k))
    r_exact = hn.evaluate(exact, task)
    t_exact = te_.seconds
    rows.append({"run": "exact NNN offsets (hubnorm blocked top-k)", "offsets seconds": t_exact, "speed-up": 1.0,
                 "R@1": r_exact["R@1"], "R@5": r_exact["R@5"]})
    print(rows[-1], flush=True)
    # exact top-k of a sample of gallery images, for the recall column
    sub = np.random.default_rng(1).choice(g.shape[0], size=min(args.recall_images, g.shape[0]), replace=False)
    _, exact_ids = torch.topk(torch.from_numpy(g[sub]) @ torch.from_numpy(bank).T, k, dim=1)
    exact_ids = exact_ids.numpy()

    title = ("Approximate NNN offsets at a large caption bank: graph (HNSW) and reduced-dimension candidate stages "
             "+ exact re-rank (issue 25, scope 2)")
    intro = (f"t2i, synthetic COCO-like data ({bank.shape[0]:,} bank captions, {g.shape[0]:,} test images, "
             f"{task.n_queries:,} test captions), alpha = 0.75, k = 128, {args.threads} thread(s) for the searches "
             f"and the exact offsets, {build_threads} for the builds. 'speed-up' = exact offsets seconds / this row's "
             "offsets seconds (same process; the index is built once, its build is a row of its own). "
             "'recall@k' = share of the exact top-128 found, on 256 gallery images.")

    def flush(final=False):
        extra = [] if final else ["PARTIAL: written while the run was in progress (the rows above are all it measured)"]
        write_report(args.report_name, title, intro, rows, list(notes) + extra, out_dir=args.out_dir)

    def row(run, seconds, D, I, extra=None):
        off = -nnn_bias(torch.from_numpy(np.where(I >= 0, D, -np.inf)), alpha).numpy()
        fitted = copy.copy(exact)
        fitted.offsets_ = torch.as_tensor(off, dtype=exact.offsets_.dtype)
        ev = hn.evaluate(fitted, task)
        rec = float(np.mean([np.intersect1d(I[i], exact_ids[j]).size / k for j, i in enumerate(sub)]))
        r = {"run": run, "offsets seconds": seconds, "speed-up": t_exact / seconds, "R@1": ev["R@1"],
             "R@5": ev["R@5"], "R@1 - exact": ev["R@1"] - r_exact["R@1"],
             "max abs offset error": float(np.abs(off - exact.offsets).max()), "recall@k": rec}
        r.update(extra or {})
        rows.append(r)
        print(r, flush=True)
        flush()

    def timed_search(index, kf):
        with Timer() as ts:
            D, I = index.search(g, k)
            nnn_bias(torch.from_numpy(np.where(I >= 0, D, -np.inf)), alpha)  # the bias is in the timing
        return ts.seconds, D, I

    projections = {}
    for dim in sorted(set(args.hnsw_dims) | set(args.flat_dims)):
        if dim < bank.shape[1]:
            with Timer() as tp:
                projections[dim] = projection(bank, dim, args.train_size)
            notes.append(f"projection to {dim} dims: eigendecomposition of the uncentred second moment of "
                         f"{min(bank.shape[0], args.train_size)} bank rows in {tp.seconds:.1f} s; it keeps "
                         f"{projections[dim][1]:.3f} of the bank's energy")

    def wrap(base, dim):
        return base if dim >= bank.shape[1] else pretransform(base, projections[dim][0])

    for dim in args.flat_dims:
        d = min(dim, bank.shape[1])
        with Timer() as tb:
            ref = faiss.IndexRefineFlat(wrap(faiss.IndexFlatIP(d), dim))
            ref.add(bank)
        rows.append({"run": f"flat-r{d} build (projection + float32 copy for the re-rank)", "build seconds": tb.seconds})
        flush()
        for kf in args.flat_k_factors:
            ref.k_factor = float(kf)
            s, D, I = timed_search(ref, kf)
            row(f"flat-r{d}: exact inner-product scan at {d} dims, pool {int(kf * k)}, exact re-rank", s, D, I)
        del ref

    for dim in args.hnsw_dims:
        d = min(dim, bank.shape[1])
        h = faiss.IndexHNSWFlat(d, args.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        h.hnsw.efConstruction = args.ef_construction
        faiss.omp_set_num_threads(build_threads)
        with Timer() as tb:
            ref = faiss.IndexRefineFlat(wrap(h, dim))
            ref.add(bank)
        faiss.omp_set_num_threads(args.threads)
        rows.append({"run": f"hnsw-r{d} build: IndexHNSWFlat(M={args.hnsw_m}, efConstruction={args.ef_construction}) "
                            f"over {bank.shape[0]} rows at {d} dims + float32 copy for the re-rank",
                     "build seconds": tb.seconds, "note": f"{build_threads} thread(s)"})
        flush()
        for kf in args.k_factors:
            for ef in args.efs:
                if ef < kf * k:
                    continue
                h.hnsw.efSearch = ef
                ref.k_factor = float(kf)
                s, D, I = timed_search(ref, kf)
                with Timer() as tg_:  # the graph stage alone (projection + HNSW search for the pool)
                    ref.base_index.search(g, int(kf * k))
                row(f"hnsw-r{d}: HNSW efSearch={ef}, pool {int(kf * k)}, exact re-rank", s, D, I,
                    {"note": f"graph search alone {tg_.seconds:.2f} s"})
        del ref, h

    if args.ivfpq_nlist > 0:
        nl = args.ivfpq_nlist
        faiss.omp_set_num_threads(build_threads)
        with Timer() as tpq:
            ref, n_sample = ivfpq_refine_index(bank, nl, "PQ64x4fs")
        ivf = faiss.extract_index_ivf(ref.base_index)
        faiss.omp_set_num_threads(args.threads)
        rows.append({"run": f"ivfpq build: IVF{nl},PQ64x4fs + IndexRefineFlat (training on {n_sample} rows)",
                     "build seconds": tpq.seconds, "note": f"{build_threads} thread(s)"})
        flush()
        for p in args.ivfpq_nprobes:
            for kf in args.ivfpq_k_factors:
                ivf.nprobe = p
                ref.k_factor = float(kf)
                s, D, I = timed_search(ref, kf)
                row(f"ivfpq: IVF{nl},PQ64x4fs nprobe={p}, pool {int(kf * k)}, exact re-rank", s, D, I)
        del ref, ivf
    for spec in args.library:
        library_rows(args, spec, task, bank, g, k, alpha, exact, r_exact, t_exact, build_threads, rows, flush)
    for i, proj in enumerate(args.cand_projections):
        cand_rows(args, proj, i == 0, bank, g, tr.images, k, alpha, build_threads, rows, notes, row, flush)
    notes.append(f"load average (1/5/15 min) at the start of the script: {load_start}")
    flush(final=True)


def library_rows(args, spec, task, bank, g, k, alpha, exact, r_exact, t_exact, build_threads, rows, flush):
    """hubnorm.index.FaissNNN(projection_dim=...) on a prebuilt ProjectedBankIndex: what a user runs. The offsets
    seconds are task.fit's (validation of the bank, the search, the bias), as for the exact row."""
    import faiss

    from hubnorm.index import FaissNNN, ProjectedBankIndex
    nl, _, rest = spec.partition("@")
    probes, _, refines = rest.partition(":")
    faiss.omp_set_num_threads(build_threads)
    torch.set_num_threads(build_threads)
    with Timer() as tb:
        idx = ProjectedBankIndex(bank, g, dim=args.cand_dim, nlist=int(nl), train_size=min(bank.shape[0], 32 * int(nl),
                                                                                          args.cand_train_max))
    faiss.omp_set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    rows.append({"run": f"library: ProjectedBankIndex build (dim {args.cand_dim}, nlist {idx.nlist}, {idx.code}; "
                        f"query-aware projection fitted on the gallery keeps {idx.captured:.3f} of the score variance)",
                 "build seconds": tb.seconds, "note": f"{build_threads} thread(s)"})
    flush()
    sub = np.random.default_rng(1).choice(g.shape[0], size=min(args.recall_images, g.shape[0]), replace=False)
    _, exact_ids = torch.topk(torch.from_numpy(g[sub]) @ torch.from_numpy(bank).T, k, dim=1)
    exact_ids = exact_ids.numpy()
    for p in (int(x) for x in probes.split(",")):
        for r in (float(x) for x in refines.split(",")):
            with Timer() as ts:
                f = task.fit(FaissNNN(alpha=alpha, k=k, bank_index=idx, nprobe=p, refine=r, projection_dim=args.cand_dim))
            ev = hn.evaluate(f, task)
            _, I = idx.search(g[sub], k, nprobe=p, refine=r)
            rec = float(np.mean([np.intersect1d(I[j], exact_ids[j]).size / k for j in range(len(sub))]))
            rows.append({"run": f"library: FaissNNN(projection_dim={args.cand_dim}, nprobe={p}, refine={r:g}) on the "
                                f"prebuilt index (task.fit)", "offsets seconds": ts.seconds,
                         "speed-up": t_exact / ts.seconds, "R@1": ev["R@1"], "R@5": ev["R@5"],
                         "R@1 - exact": ev["R@1"] - r_exact["R@1"],
                         "max abs offset error": float(np.abs(f.offsets - exact.offsets).max()), "recall@k": rec})
            print(rows[-1], flush=True)
            flush()
    settings = [(int(x), float(y)) for x in probes.split(",") for y in refines.split(",")]
    if args.library_rounds > 1:   # alternating rounds: the exact fit, then every setting, N times
        per_round = {st: [] for st in settings}
        for rnd in range(args.library_rounds):
            with Timer() as te_:
                task.fit(hn.NearestNeighborNormalization(alpha=alpha, k=k))
            for p, r in settings:
                with Timer() as ts:
                    task.fit(FaissNNN(alpha=alpha, k=k, bank_index=idx, nprobe=p, refine=r,
                                      projection_dim=args.cand_dim))
                per_round[(p, r)].append((te_.seconds, ts.seconds))
            print(f"library round {rnd + 1}: exact {te_.seconds:.2f} s", flush=True)
        for row_ in rows:
            for (p, r), pairs in per_round.items():
                if row_["run"].startswith(f"library: FaissNNN(projection_dim={args.cand_dim}, nprobe={p}, refine={r:g})"):
                    ratios = [e / x for e, x in pairs]
                    row_["speed-up (median of rounds)"] = float(np.median(ratios))
                    row_["rounds: exact s / this s"] = ", ".join(f"{e:.1f} / {x:.2f}" for e, x in pairs)
        flush()
    del idx


def cand_rows(args, proj, first, bank, g, train_images, k, alpha, build_threads, rows, notes, row, flush):
    """The --cand-* rows: candidate stages on a (possibly asymmetric) projection, the pool re-ranked exactly with
    the original gallery vectors (own re-rank: IndexRefineFlat would re-rank with the transformed query)."""
    import faiss
    if not (args.cand_flat or args.cand_hnsw or args.cand_ivf):
        return
    dim = args.cand_dim
    qs = g if args.cand_queries == "gallery" else np.ascontiguousarray(train_images[:20_000], dtype=np.float32)
    kind, shift = proj.split("+")[0], proj.endswith("+shift")
    with Timer() as tp:
        if kind == "query-aware":
            left, right, kept = query_aware_projection(qs, bank, dim, sample_size=args.train_size)
            what = f"query-aware projection to {dim} dims fitted on {qs.shape[0]} {args.cand_queries} rows"
        else:
            left, kept = projection(bank, dim, args.train_size)
            right = left
            what = f"uncentred bank projection to {dim} dims"
        gq = g
        if shift:
            gq = g + (bank.mean(0) - g.mean(0))[None, :]
            gq = gq / np.linalg.norm(gq, axis=1, keepdims=True)
            what += ", queries shifted by mean(bank) - mean(gallery) before the candidate stage"
        xb = np.ascontiguousarray(bank @ right)
        xq = np.ascontiguousarray(gq @ left, dtype=np.float32)
    tag = f"{proj}-r{dim}"
    notes.append(f"{tag}: {what}; {kept:.3f} of the {'score' if kind == 'query-aware' else 'bank'} "
                 f"variance kept; fit + projecting the bank {tp.seconds:.1f} s (a build cost)")

    def timed(index, pool, extra=None):
        with Timer() as ts:
            _, cand = index.search(xq, pool)
            D, I = rerank(bank, g, cand, k)
            nnn_bias(torch.from_numpy(np.where(I >= 0, D, -np.inf)), alpha)
        return ts.seconds, D, I

    if args.cand_flat:
        base = faiss.IndexFlatIP(dim)
        base.add(xb)
        for kf in args.cand_flat_k_factors:
            s, D, I = timed(base, int(kf * k))
            row(f"{tag} flat: exact scan of the projected bank, pool {int(kf * k)}, exact re-rank", s, D, I)
        del base
    if not first:
        return
    if args.cand_hnsw:
        h = faiss.IndexHNSWFlat(dim, args.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        h.hnsw.efConstruction = args.ef_construction
        faiss.omp_set_num_threads(build_threads)
        with Timer() as tb:
            h.add(xb)
        faiss.omp_set_num_threads(args.threads)
        rows.append({"run": f"{tag} hnsw build: IndexHNSWFlat(M={args.hnsw_m}, efConstruction={args.ef_construction})",
                     "build seconds": tb.seconds + tp.seconds, "note": f"{build_threads} thread(s)"})
        flush()
        for kf in args.k_factors:
            for ef in args.efs:
                if ef < kf * k:
                    continue
                h.hnsw.efSearch = ef
                s, D, I = timed(h, int(kf * k))
                row(f"{tag} hnsw: efSearch={ef}, pool {int(kf * k)}, exact re-rank", s, D, I)
        del h
    for spec_probes in args.cand_ivf:
        spec, _, probes = spec_probes.partition("@")
        nprobes = [int(p) for p in probes.split(",")] if probes else args.cand_nprobes
        index = faiss.index_factory(dim, spec, faiss.METRIC_INNER_PRODUCT)
        ivf = faiss.extract_index_ivf(index)
        ivf.cp.niter = 10
        ivf.cp.seed = 0
        ivf.cp.max_points_per_centroid = 1 << 30
        n_train = min(xb.shape[0], 32 * ivf.nlist, args.cand_train_max)
        sample = np.sort(np.random.default_rng(0).choice(xb.shape[0], size=n_train, replace=False))
        faiss.omp_set_num_threads(build_threads)
        with Timer() as tt:
            index.train(xb[sample])
        with Timer() as ta:
            index.add(xb)
        faiss.omp_set_num_threads(args.threads)
        rows.append({"run": f"{tag} {spec} build (k-means{' + PQ' if 'PQ' in spec else ''} training on {n_train} "
                            "projected rows, adding the bank)", "build seconds": tp.seconds + tt.seconds + ta.seconds,
                     "note": f"projection {tp.seconds:.1f} s, training {tt.seconds:.1f} s, add {ta.seconds:.1f} s; "
                             f"{build_threads} thread(s)"})
        flush()
        for p in nprobes:
            ivf.nprobe = p
            for kf in args.cand_k_factors:
                s, D, I = timed(index, int(kf * k))
                row(f"{tag} {spec}: nprobe={p} ({p / ivf.nlist:.3g} of the lists), pool {int(kf * k)}, exact re-rank",
                    s, D, I)
        del index


if __name__ == "__main__":
    main()
