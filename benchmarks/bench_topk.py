"""Exact top-k (NNN offsets) and log-sum-exp against the bare GEMM and faiss's flat search, in one process.

Shape: 5k targets x 100k bank x d = 512, float32 (clustered unit vectors). Peers, timed in alternating rounds in
the same process (each round runs every peer once; the table gives the median over rounds and the ratio to the
bare GEMM taken within each round):

* bare fp32 GEMM of the same shape (blocked, one reused buffer, nothing else: the physical limit), twice: torch's
  ``mm`` (MKL; the blocks of the torch kernel) and numpy's ``matmul`` (numpy's OpenBLAS; the 1024 x 2048 tiles of
  the ``"numpy"`` kernel) -- on this machine the two BLAS libraries differ by 20-30%, so each is a peer;
* faiss ``IndexFlatIP`` (add + search) and faiss ``knn_inner_product`` (the exhaustive search without an index),
  k = 128 and 512: what a user would pick instead;
* ``hubnorm.kernels.topk_similarity`` through its seam (default backend for float32 on the CPU), with
  ``backend="numpy"`` (BLAS tiles + running-threshold filter) and with ``backend="torch"`` (the hand-written kernel,
  the float64 / device path), k = 128 and 512;
* ``NearestNeighborNormalization(alpha=0.75, k=128).fit`` (the whole method) and nnn-retrieval
  ``NNNRetriever.compute_alignment_means`` (the reference implementation);
* ``hubnorm.kernels.logsumexp_similarity`` (IS / DIS / DualIS reductions, scale 1/0.05) against the same bare GEMM,
  its plain blocked form (the same GEMM blocks, each scaled and passed whole to ``torch.logsumexp``, merged by
  ``logaddexp``), one stored ``torch.exp`` of every score (in cache-sized tiles, torch's threads: a reference,
  not a floor, since the fused kernel exponentiates with a faster ``exp`` and stores nothing), and the kernel's
  loop with its GEMM blocks and its per-block passes timed apart in one call, with the current pass and with the
  previous one (until 2026-11-29: the same slabs through five separate in-cache passes, the bits of
  ``torch.logsumexp``; its whole call is the previous kernel's time), which gives each pass's cost
  over its own GEMM free of the drift between a bare GEMM and the kernel timed seconds apart (MKL's GEMM on this
  AMD CPU varied by up to 1.75x between rounds of one run).

Memory: peak RSS above the inputs (VmHWM after a reset) at 1M x 5k in a subprocess -- target < 1 GB.
"""

import argparse
import json
import shlex
import subprocess
import sys
import time

import numpy as np
import torch
from _common import Timer, blocked_gemm, exp_pass, settle, write_report

from hubnorm.kernels import block_logsumexp, block_shape, iter_blocks, numpy_topk_partition, topk_similarity


def clustered(n, d, n_centres=2000, seed=0, chunk=131072):
    """Unit vectors around random centres (structured, like embeddings), generated in chunks."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_centres, d)).astype(np.float32)
    out = np.empty((n, d), np.float32)
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        x = centres[rng.integers(0, n_centres, e - s)] + 1.5 * rng.standard_normal((e - s, d)).astype(np.float32)
        out[s:e] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def bare_numpy(a, b):
    """The GEMM of the ``"numpy"`` kernel alone: its tiles, numpy's BLAS, one reused buffer."""
    an, bn = a.numpy(), b.numpy()
    a_blocks, b_blocks = numpy_topk_partition(an.shape[0], bn.shape[0], 4, None)
    buf = np.empty(max(x1 - x0 for x0, x1 in a_blocks) * max(y1 - y0 for y0, y1 in b_blocks), np.float32)
    for a0, a1 in a_blocks:
        for b0, b1 in b_blocks:
            np.matmul(an[a0:a1], bn[b0:b1].T, out=buf[:(a1 - a0) * (b1 - b0)].reshape(a1 - a0, b1 - b0))


def plain_logsumexp(a, b, scale):
    """The plain blocked form of logsumexp_similarity (its kernel before block_logsumexp): the same GEMM blocks,
    each scaled and passed to torch.logsumexp whole, merged by logaddexp."""
    ra, rb = block_shape(a.shape[0], b.shape[0], 4, None)
    for a0, a1 in iter_blocks(a.shape[0], ra):
        acc = None
        for b0, b1 in iter_blocks(b.shape[0], rb):
            part = torch.logsumexp((a[a0:a1] @ b[b0:b1].T).mul_(scale), dim=1)
            acc = part if acc is None else torch.logaddexp(acc, part)


def five_pass_block_logsumexp(raw, scale, slab_bytes=2**21):
    """The kernel's per-block pass until 2026-11-29 (no infinities handled; finite scores only): x = raw * scale
    per slab of ``slab_bytes`` in one reused buffer, then the row maximum, the subtraction, exp, the row sum and
    log + maximum as separate in-cache passes -- the bits of torch.logsumexp."""
    rows, cols = raw.shape
    slab = max(2, slab_bytes // (cols * raw.element_size()))
    out = torch.empty(rows, dtype=raw.dtype)
    buf = torch.empty(min(rows, slab + 1) * cols, dtype=raw.dtype)
    i0 = 0
    while i0 < rows:
        i1 = rows if rows - i0 <= slab + 1 else i0 + slab
        x = buf[: (i1 - i0) * cols].view(i1 - i0, cols)
        torch.mul(raw[i0:i1], scale, out=x)
        m = x.amax(dim=1)
        x.sub_(m[:, None]).exp_()
        torch.sum(x, dim=1, out=out[i0:i1])
        out[i0:i1].log_().add_(m)
        i0 = i1
    return out


def split_logsumexp(a, b, scale, block_pass):
    """logsumexp_similarity's loop (the same GEMM blocks into one reused buffer, the same logaddexp merges) with
    its two parts timed apart: returns {"gemm": seconds in torch.mm, "pass": seconds in ``block_pass`` and the
    merges}. Their ratio is the kernel's cost over its own GEMM, free of the round-to-round drift of a separately
    timed bare GEMM."""
    ra, rb = block_shape(a.shape[0], b.shape[0], 4, None)
    buf = torch.empty(min(ra, a.shape[0]) * min(rb, b.shape[0]), dtype=a.dtype)
    gemm = rest = 0.0
    for a0, a1 in iter_blocks(a.shape[0], ra):
        acc = None
        for b0, b1 in iter_blocks(b.shape[0], rb):
            t0 = time.perf_counter()
            raw = torch.mm(a[a0:a1], b[b0:b1].T, out=buf[:(a1 - a0) * (b1 - b0)].view(a1 - a0, b1 - b0))
            t1 = time.perf_counter()
            part = block_pass(raw, scale)
            acc = part if acc is None else torch.logaddexp(acc, part)
            t2 = time.perf_counter()
            gemm, rest = gemm + t1 - t0, rest + t2 - t1
    return {"gemm": gemm, "pass": rest}


def child(spec):
    def status(key):
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
    b = torch.from_numpy(clustered(spec["n_bank"], 512, seed=1))
    a = torch.from_numpy(clustered(spec["n_targets"], 512, seed=2))
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    base = status("VmRSS")
    t0 = time.perf_counter()
    topk_similarity(a, b, spec["k"], backend=spec.get("backend"))
    secs = time.perf_counter() - t0
    print(json.dumps({"extra_bytes": status("VmHWM") - base, "inputs_bytes": base, "seconds": secs}))


def peers(a, b):
    import faiss

    import hubnorm as hn
    from hubnorm.kernels import logsumexp_similarity
    from nnn.nnn_retriever import NNNRetriever

    an, bn = a.numpy(), b.numpy()

    def flat(k):
        index = faiss.IndexFlatIP(bn.shape[1])
        index.add(bn)
        index.search(an, k)

    return {
        "bare": lambda: blocked_gemm(a, b, "topk"),
        "bare numpy": lambda: bare_numpy(a, b),
        "faiss IndexFlatIP k=128": lambda: flat(128),
        "faiss IndexFlatIP k=512": lambda: flat(512),
        "faiss knn_inner_product k=128": lambda: faiss.knn(an, bn, 128, metric=faiss.METRIC_INNER_PRODUCT),
        "faiss knn_inner_product k=512": lambda: faiss.knn(an, bn, 512, metric=faiss.METRIC_INNER_PRODUCT),
        "hubnorm topk_similarity k=128 (seam default)": lambda: topk_similarity(a, b, 128),
        "hubnorm topk_similarity k=512 (seam default)": lambda: topk_similarity(a, b, 512),
        "hubnorm topk_similarity k=128 backend=numpy": lambda: topk_similarity(a, b, 128, backend="numpy"),
        "hubnorm topk_similarity k=512 backend=numpy": lambda: topk_similarity(a, b, 512, backend="numpy"),
        "hubnorm topk_similarity k=128 backend=torch": lambda: topk_similarity(a, b, 128, backend="torch"),
        "hubnorm topk_similarity k=512 backend=torch": lambda: topk_similarity(a, b, 512, backend="torch"),
        "hubnorm NearestNeighborNormalization(alpha=0.75, k=128).fit": lambda: hn.NearestNeighborNormalization(
            alpha=0.75, k=128, device="cpu").fit(a, query_bank=b),
        "nnn-retrieval NNNRetriever.compute_alignment_means k=128, batch 128": lambda: NNNRetriever(
            512).compute_alignment_means(a, b, 128, 128),
        "hubnorm logsumexp_similarity (scale 20)": lambda: logsumexp_similarity(a, b, 20.0),
        "reference: torch.exp of every score, stored (in-cache tiles)": lambda: exp_pass(a.shape[0] * b.shape[0]),
        "plain: torch.logsumexp on whole GEMM blocks (scale 20)": lambda: plain_logsumexp(a, b, 20.0),
        "split: logsumexp_similarity's GEMM blocks and per-block passes timed apart (scale 20)":
            lambda: split_logsumexp(a, b, 20.0, block_logsumexp),
        "split: the same with the previous five-pass kernel (scale 20)": lambda: split_logsumexp(
            a, b, 20.0, five_pass_block_logsumexp),
        "hubnorm logsumexp_similarity (scale 20) backend=numpy": lambda: logsumexp_similarity(a, b, 20.0,
                                                                                            backend="numpy"),
    }


TARGETS = {"hubnorm topk_similarity k=128 (seam default)": "<= 1.1x bare, <= faiss",
           "hubnorm topk_similarity k=512 (seam default)": "<= 1.2x bare, <= faiss",
           "hubnorm topk_similarity k=128 backend=numpy": "<= 1.1x bare, <= faiss",
           "hubnorm topk_similarity k=512 backend=numpy": "<= 1.2x bare, <= faiss",
           "hubnorm NearestNeighborNormalization(alpha=0.75, k=128).fit": "<= 1.1x bare"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--n-targets", type=int, default=5000, help="smaller sizes for development runs")
    ap.add_argument("--n-bank", type=int, default=100000)
    ap.add_argument("--out-dir", default=None, help="write the report here instead of benchmarks/reports")
    ap.add_argument("--focus", action="store_true",
                    help="only the two bare GEMMs, faiss knn, the 'numpy' kernels and the log-sum-exp kernels (short "
                         "rounds: less drift of a shared machine's load within a round); writes topk_focus.md/.csv")
    args = ap.parse_args()
    if args.child:
        return child(json.loads(args.child))
    from _common import load_average

    from hubnorm.kernels import topk_backend
    load_start = load_average()
    a = torch.from_numpy(clustered(args.n_targets, 512, seed=2))
    b = torch.from_numpy(clustered(args.n_bank, 512, seed=1))
    fns = peers(a, b)
    if args.focus:
        focus = ("bare", "faiss knn", "hubnorm logsumexp", "reference", "plain", "split")
        fns = {n: f for n, f in fns.items() if n.startswith(focus)
               or "backend=numpy" in n}
    fns["bare"]()  # warm-up (thread pools, allocator) outside the timed rounds
    times = {name: [] for name in fns}
    parts = {name: [] for name in fns}   # the split peers' GEMM / per-block-pass seconds, per round
    ratios = {name: [] for name in fns}
    ratios_np = {name: [] for name in fns}
    for r in range(args.reps):
        for name, fn in fns.items():
            settle()   # OpenBLAS's threads (numpy's GEMM, faiss) spin-wait after a call: not into the next peer
            with Timer() as t:
                res = fn()
            times[name].append(t.seconds)
            if name.startswith("split"):
                parts[name].append(res)
            del res   # no peer's result stays alive through the next peer's timing
        for name in fns:
            ratios[name].append(times[name][-1] / times["bare"][-1])
            ratios_np[name].append(times[name][-1] / times["bare numpy"][-1])
        print(f"round {r + 1}:", {k: round(v[-1], 3) for k, v in times.items()}, flush=True)
    rows = []
    for name in fns:
        label = {"bare": f"bare fp32 GEMM, {len(a)} x {len(b)} x 512 (torch.mm = MKL, blocked, reused buffer)",
                 "bare numpy": f"bare fp32 GEMM, {len(a)} x {len(b)} x 512 (numpy.matmul = OpenBLAS, 1024 x 2048 "
                               "tiles, reused buffer)"}.get(name, name)
        rows.append({"run": label, "seconds (median)": float(np.median(times[name])),
                     "seconds (all rounds)": ", ".join(f"{x:.2f}" for x in times[name]),
                     "x bare (median of rounds)": float(np.median(ratios[name])),
                     "x bare (each round)": ", ".join(f"{x:.3f}" for x in ratios[name]),
                     "x bare numpy (median of rounds)": float(np.median(ratios_np[name])),
                     "x bare numpy (each round)": ", ".join(f"{x:.3f}" for x in ratios_np[name]),
                     "target": TARGETS.get(name, "")})
    med = {name: float(np.median(ratios[name])) for name in fns}
    med_np = {name: float(np.median(ratios_np[name])) for name in fns}
    notes = [] if args.focus else [f"seam default for float32 on the CPU: backend={topk_backend(torch.float32, 'cpu')!r}"]
    for k in () if args.focus else (128, 512):
        ours, fl, kn = (med[f"hubnorm topk_similarity k={k} (seam default)"], med[f"faiss IndexFlatIP k={k}"],
                        med[f"faiss knn_inner_product k={k}"])
        per_round = np.array(times[f"hubnorm topk_similarity k={k} (seam default)"]) / np.minimum(
            np.array(times[f"faiss IndexFlatIP k={k}"]), np.array(times[f"faiss knn_inner_product k={k}"]))
        notes.append(f"k={k}: hubnorm seam {ours:.3f}x bare, faiss IndexFlatIP {fl:.3f}x, faiss knn {kn:.3f}x "
                     f"(hubnorm / best faiss = {ours / min(fl, kn):.3f}; median of the per-round ratios to the "
                     f"round's faster faiss peer {float(np.median(per_round)):.3f}, each round "
                     f"{', '.join(f'{x:.3f}' for x in per_round)}); torch kernel "
                     f"{med[f'hubnorm topk_similarity k={k} backend=torch']:.3f}x")
        nk = f"hubnorm topk_similarity k={k} backend=numpy"
        notes.append(f"k={k}: backend='numpy' {med[nk]:.3f}x bare (torch.mm) = {med_np[nk]:.3f}x bare numpy.matmul; "
                     f"/ best faiss = {med[nk] / min(fl, kn):.3f}; faiss knn = {med_np[f'faiss knn_inner_product k={k}']:.3f}x "
                     f"bare numpy.matmul; bare numpy.matmul = {med['bare numpy']:.3f}x bare torch.mm")
    ln = "hubnorm logsumexp_similarity (scale 20)"
    fl_ = "reference: torch.exp of every score, stored (in-cache tiles)"
    pl = "plain: torch.logsumexp on whole GEMM blocks (scale 20)"
    pv = "split: the same with the previous five-pass kernel (scale 20)"   # as a whole: the previous kernel

    def with_exp(gemm):   # the GEMM + one stored torch.exp per score, over that GEMM, per round
        return float(np.median((np.array(times[gemm]) + np.array(times[fl_])) / np.array(times[gemm])))
    notes.append(f"log-sum-exp: torch kernel {med[ln]:.3f}x bare torch.mm = {med_np[ln]:.3f}x bare numpy.matmul "
                 f"(the plain blocked torch.logsumexp {med[pl]:.3f}x; plain / kernel, median of the per-round ratios "
                 f"{float(np.median(np.array(times[pl]) / np.array(times[ln]))):.3f}; the previous five-pass kernel "
                 f"{med[pv]:.3f}x, previous / kernel "
                 f"{float(np.median(np.array(times[pv]) / np.array(times[ln]))):.3f}; "
                 f"backend='numpy' "
                 f"{med[ln + ' backend=numpy']:.3f}x bare torch.mm = {med_np[ln + ' backend=numpy']:.3f}x bare "
                 f"numpy.matmul); "
                 f"a bare GEMM + one stored torch.exp per score (median of the rounds' sums; a reference, not a "
                 f"floor): {with_exp('bare'):.3f}x bare torch.mm, {with_exp('bare numpy'):.3f}x bare numpy.matmul")
    split_peers = (("split: logsumexp_similarity's GEMM blocks and per-block passes timed apart (scale 20)",
                    "the kernel"),
                   ("split: the same with the previous five-pass kernel (scale 20)", "the previous five-pass kernel"))
    for sp, what in split_peers:
        own = np.array([(p["gemm"] + p["pass"]) / p["gemm"] for p in parts[sp]])
        notes.append(f"{what} over its own GEMM blocks (the blocks and the per-block passes timed apart in one call; "
                     f"(GEMM + passes) / GEMM): median {float(np.median(own)):.3f}x, each round "
                     f"{', '.join(f'{x:.3f}' for x in own)}; the passes alone "
                     f"{float(np.median([p['pass'] for p in parts[sp]])):.3f} s (median)")
    if args.focus:
        for k in (128, 512):
            nk, fk = f"hubnorm topk_similarity k={k} backend=numpy", f"faiss knn_inner_product k={k}"
            notes.append(f"k={k}: backend='numpy' {med[nk]:.3f}x bare torch.mm, {med_np[nk]:.3f}x bare numpy.matmul; "
                         f"faiss knn {med[fk]:.3f}x / {med_np[fk]:.3f}x; numpy / faiss (median of per-round ratios) "
                         f"{float(np.median(np.array(times[nk]) / np.array(times[fk]))):.3f}")
    if not args.skip_memory:
        for k, backend in ((128, None), (512, None), (128, "numpy"), (512, "numpy")):
            spec = {"n_bank": 1_000_000, "n_targets": 5000, "k": k, "backend": backend}
            out = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True,
                                 text=True, check=True)
            res = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append({"run": f"memory: 1,000,000 bank x 5000 targets x 512, k={k}, "
                                f"{'seam default' if backend is None else 'backend=' + backend} (subprocess)",
                         "seconds (median)": res["seconds"], "peak extra GB": res["extra_bytes"] / 2**30,
                         "inputs GB": res["inputs_bytes"] / 2**30, "target": "< 1 GB extra"})
            print(rows[-1], flush=True)
    name = ("topk_focus" if args.focus else "topk") if args.out_dir is None else "topk_dev"
    command = " ".join(["benchmarks/bench_topk.py", *map(shlex.quote, sys.argv[1:])])
    write_report(name, "Exact top-k and log-sum-exp: hubnorm vs faiss's flat search vs the bare GEMM",
                 f"Targets are {len(a)} and the bank {len(b)} unit vectors of d = 512 drawn around 2000 random centres "
                 f"(clustered, seed 1/2; synthetic), float32. {args.reps} rounds; each round runs every peer once "
                 f"in this order, each after 0.3 s idle (`_common.settle`), in one process; ratios are taken within "
                 f"each round (median over rounds). The GEMM "
                 f"is the physical limit. Load average (1/5/15 min) before the first round: {load_start} (2 cores, "
                 f"shared). Command: `flock /tmp/hubnorm-bench.lock .venv/bin/python {command}`.", rows, notes,
                 out_dir=args.out_dir)


if __name__ == "__main__":
    main()
