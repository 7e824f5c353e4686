"""Scores as input at MSR-VTT full sizes: fit + evaluate from a memory-mapped float32 bank-score matrix against the
embeddings path of the same method and a bare pass over the matrix, in one process.

Shape (MSR-VTT 1k-A with its full query bank: 9,000 training videos x 20 captions): 180,000 bank queries x 1,000
test videos, float32 scores on disk (``np.save``, read with ``np.load(..., mmap_mode="r")``: 720 MB), and a
1,000 x 1,000 test score matrix; embeddings d = 512, clustered unit vectors (synthetic), from which the matrices are
computed once before the rounds. Peers, timed in alternating rounds in the same process (each round runs every
peer once; medians over rounds, ratios taken within each round):

* ``bare pass``: ``np.load(bank.npy, mmap_mode="r").sum()`` -- reading the matrix once, nothing else;
* ``scores``: ``hn.evaluate(task.fit(method), task)`` of a ``RetrievalTask(scores={test, bank})`` (the fast path: the bank matrix read once per fit,
  top-k / log-sum-exp through :mod:`hubnorm.kernels`, float32 where the precision rules allow), fit + evaluate;
* ``scores (plain)``: the same with ``plain=True`` (every reduction by its plain block loop, every block re-read
  from the memory map in the engine's float64) -- the loop the fast path replaces, timed once per method;
* ``embeddings``: ``method.fit(targets, query_bank=bank)`` + ``hubnorm.evaluate`` on the embeddings (float32,
  the in-process engine with its kernels).

For NNN (k = 128, alpha = 0.75), IS (tau = 0.02), DIS (tau = 0.02, k = 1) and SN (tau = 0.01, 10 iterations).
The page cache holds the matrix after the first pass (the machine has the memory for it): the times are of a
warm file, as a second fit on the same files would see.
"""

import argparse
import os
import shutil
import time
from pathlib import Path

import numpy as np
import torch
from _common import Timer, load_average, write_report

import hubnorm as hn


def clustered(n, d, rng, centres, chunk=65536):
    out = np.empty((n, d), np.float32)
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        x = centres[rng.integers(0, len(centres), e - s)] + 1.5 * rng.standard_normal((e - s, d)).astype(np.float32)
        out[s:e] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def synthetic_gallery(n_test, dim, seed=0):
    """The seeded generator, 2,000 cluster centres, ``n_test`` clustered unit targets and one query per target
    (a noisy copy): what the score-matrix benchmarks compute their matrices from."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((2000, dim)).astype(np.float32)
    targets = clustered(n_test, dim, rng, centres)
    queries = targets + 8.0 * rng.standard_normal(targets.shape).astype(np.float32) / np.sqrt(dim)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    return rng, centres, targets, queries


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-bank", type=int, default=180_000)
    ap.add_argument("--n-test", type=int, default=1_000)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/hubnorm-bench-scores")
    ap.add_argument("--out-dir", default=None)
    args = ap.parse_args()
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    load_start = load_average()
    rng, centres, targets, queries = synthetic_gallery(args.n_test, args.dim)
    bank = clustered(args.n_bank, args.dim, rng, centres)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    try:
        mm = np.lib.format.open_memmap(work / "bank.npy", mode="w+", dtype=np.float32, shape=(args.n_bank, args.n_test))
        for s in range(0, args.n_bank, 16384):
            mm[s:s + 16384] = bank[s:s + 16384] @ targets.T
        mm.flush()
        del mm
        np.save(work / "test.npy", queries @ targets.T)
        pos = hn.Positives.from_labels(np.arange(args.n_test), args.n_test)
        t_q, t_t, t_b = (torch.from_numpy(x) for x in (queries, targets, bank))
        emb_task = hn.RetrievalTask(t_q, t_t, pos)

        def open_task(plain=False):
            return hn.RetrievalTask(scores={("queries", "targets"): np.load(work / "test.npy", mmap_mode="r"),
                                            ("query_bank", "targets"): np.load(work / "bank.npy", mmap_mode="r")},
                                    positives=pos, plain=plain, check=False)   # the fit is timed, not the checks

        methods = {"NNN": ("nnn", {"k": 128, "alpha": 0.75}), "IS": ("is", {"tau": 0.02}),
                   "DIS": ("dis", {"tau": 0.02, "k": 1}), "SN": ("sn", {"tau": 0.01, "n_iter": 10})}

        def bare():
            return float(np.load(work / "bank.npy", mmap_mode="r").sum(dtype=np.float64))

        results = {}

        def scores(name, params, plain=False):
            task = open_task(plain)
            return hn.evaluate(task.fit(hn.make_normalizer(name, **params)), task)

        def embeddings(name, params):
            norm = hn.make_normalizer(name, **params).fit(t_t, query_bank=t_b)
            return hn.evaluate(norm, emb_task)

        bare()  # warm-up: the file into the page cache, thread pools
        peers = [("bare pass", None, bare)]
        for label, (name, params) in methods.items():
            peers.append((f"{label} scores", label, lambda n=name, p=params: scores(n, p)))
            peers.append((f"{label} embeddings", label, lambda n=name, p=params: embeddings(n, p)))
        times = {p[0]: [] for p in peers}
        for r in range(args.rounds):
            order = peers if r % 2 == 0 else [peers[0]] + peers[:0:-1]
            for label, _, fn in order:
                with Timer() as t:
                    out = fn()
                times[label].append(t.seconds)
                if isinstance(out, dict):
                    results[label] = out
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items()), flush=True)
        plain_times = {}
        for label, (name, params) in methods.items():
            with Timer() as t:
                results[f"{label} scores (plain)"] = scores(name, params, plain=True)
            plain_times[label] = t.seconds
            print(f"{label} plain: {t.seconds:.2f}s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = []
    bare_t = np.array(times["bare pass"])
    rows.append({"method": "bare pass (np.load mmap + sum)", "path": "bare", "seconds (median)": float(np.median(bare_t)),
                 "seconds (all rounds)": ", ".join(f"{x:.2f}" for x in bare_t), "x bare": 1.0,
                 "scores / embeddings": "", "R@1": ""})
    for label in methods:
        s, e = np.array(times[f"{label} scores"]), np.array(times[f"{label} embeddings"])
        for path, arr in (("scores (fast)", s), ("embeddings", e)):
            key = f"{label} {'scores' if path.startswith('scores') else 'embeddings'}"
            rows.append({"method": label, "path": path, "seconds (median)": float(np.median(arr)),
                         "seconds (all rounds)": ", ".join(f"{x:.2f}" for x in arr),
                         "x bare": float(np.median(arr / bare_t)),
                         "scores / embeddings": float(np.median(s / e)) if path.startswith("scores") else "",
                         "R@1": results[key]["R@1"]})
        rows.append({"method": label, "path": "scores (plain, once)", "seconds (median)": plain_times[label],
                     "seconds (all rounds)": f"{plain_times[label]:.2f}",
                     "x bare": plain_times[label] / float(np.median(bare_t)), "scores / embeddings": "",
                     "R@1": results[f"{label} scores (plain)"]["R@1"]})
    write_report("scores", "Scores as input at MSR-VTT full sizes: memory-mapped score matrices vs embeddings",
                 f"{args.n_bank:,} bank queries x {args.n_test:,} test videos (float32 scores on disk, "
                 f"{args.n_bank * args.n_test * 4 / 2**20:.0f} MiB, memory-mapped) and a {args.n_test:,} x "
                 f"{args.n_test:,} test matrix, from clustered d = {args.dim} embeddings (synthetic). Fit + evaluate "
                 f"(R@1/5/10, MdR, MnR) per method; {args.rounds} rounds, each running every peer once, order "
                 f"reversed every other round, in one process; ratios within each round, medians over rounds. "
                 f"Load average (1/5/15 min) before the first round: {load_start} (2 cores, shared machine). "
                 f"`{' '.join(['python benchmarks/bench_scores.py'] + [f'--rounds {args.rounds}'])}`",
                 rows,
                 notes=["scores (fast): the task's default engine (the bank matrix read once per fit, top-k / "
                        "log-sum-exp kernels of hubnorm.kernels, float32 where the precision rules allow); "
                        "scores (plain): plain=True, every reduction's block loop re-reading the memory map in float64 "
                        "(timed once, after the rounds).",
                        "embeddings: the in-process engine from float32 embeddings (the GEMM included); its R@1 may "
                        "differ from the scores path's in the last digits (float32 GEMM vs the stored float32 scores).",
                        "x bare: seconds divided by the bare pass of the same round (the physical floor of reading "
                        "the matrix once).",
                        f"Finished {time.strftime('%Y-%m-%d %H:%M')}; load average at the end {load_average()}."],
                 out_dir=args.out_dir)


if __name__ == "__main__":
    main()
