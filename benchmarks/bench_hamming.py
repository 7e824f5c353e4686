"""The near-duplicate search of the query-aware certificate (``hubnorm.provenance.nearest_hamming``): for every
test sketch (512-bit SimHash, packed) the nearest bank sketch by Hamming distance, exactly.

    python benchmarks/bench_hamming.py [--bank 100000] [--test 2000] [--reps 3]

Peers timed in the same run on the same random sketches: faiss's exact binary flat index (``backend="faiss"``),
the +-1 matrix product in torch (``backend="torch"``, on the CPU and, where there is one, on CUDA), and a plain
numpy count of the set bits of the XOR of 64-bit words (``np.bitwise_count``, the search this project used before
2026-12-04). Every peer must return the same distances and rows (checked here). Writes ``reports/hamming.md`` and
``.csv``; the seconds scale with bank x test rows (the report states the pairs per second).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from _common import Timer, write_report

from hubnorm.provenance import nearest_hamming


def numpy_popcount(bank: np.ndarray, test: np.ndarray):
    """The plain search: bit counts of the XOR of 64-bit words, 256 test x 4096 bank rows per block."""
    wb, wt = bank.view(np.uint64), test.view(np.uint64)
    dist = np.empty(len(test), dtype=np.int64)
    arg = np.empty(len(test), dtype=np.int64)
    for t0 in range(0, len(test), 256):
        t = wt[t0:t0 + 256]
        best = np.full(len(t), np.iinfo(np.int64).max)
        at = np.zeros(len(t), dtype=np.int64)
        for b0 in range(0, len(bank), 4096):
            d = np.bitwise_count(t[:, None, :] ^ wb[None, b0:b0 + 4096, :]).sum(axis=2, dtype=np.int64)
            j = d.argmin(axis=1)
            dj = d[np.arange(len(t)), j]
            better = dj < best
            best[better], at[better] = dj[better], b0 + j[better]
        dist[t0:t0 + len(t)], arg[t0:t0 + len(t)] = best, at
    return dist[:, None], arg[:, None]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bank", type=int, default=100_000)
    ap.add_argument("--test", type=int, default=2000)
    ap.add_argument("--bits", type=int, default=512)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out-dir", default=None)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    bank = rng.integers(0, 256, size=(args.bank, args.bits // 8), dtype=np.uint8)
    test = rng.integers(0, 256, size=(args.test, args.bits // 8), dtype=np.uint8)
    test[: args.test // 10] = bank[rng.choice(args.bank, args.test // 10, replace=False)]   # some exact copies
    peers = []
    try:
        import faiss  # noqa: F401
        peers.append(("faiss IndexBinaryFlat (backend='faiss', CPU)", lambda: nearest_hamming(bank, test,
                                                                                             backend="faiss")))
    except ImportError:
        pass
    peers.append(("+-1 matrix product in torch (backend='torch', CPU)",
                  lambda: nearest_hamming(bank, test, backend="torch", device="cpu")))
    if torch.cuda.is_available():
        peers.append(("+-1 matrix product in torch (backend='torch', CUDA)",
                      lambda: nearest_hamming(bank, test, backend="torch", device="cuda")))
    peers.append(("numpy bit count of XOR words (the search before 2026-12-04)", lambda: numpy_popcount(bank, test)))
    rows, ref = [], None
    for name, fn in peers:
        best = float("inf")
        for _ in range(args.reps):
            with Timer() as t:
                out = fn()
            best = min(best, t.seconds)
        if ref is None:
            ref = out
        same = bool(np.array_equal(out[0], ref[0]) and np.array_equal(out[1], ref[1]))
        rows.append({"search": name, "seconds": best, "pairs per second": args.bank * args.test / best,
                     "same answer as the first row": same})
        print(rows[-1], flush=True)
    base = rows[0]["seconds"]
    for r in rows:
        r["x the first row"] = r["seconds"] / base
    write_report("hamming", "Near-duplicate search of the certificate: nearest 512-bit sketch by Hamming distance",
                 f"{args.test:,} test sketches x {args.bank:,} bank sketches, {args.bits} bits, random (a tenth of "
                 f"the test rows copied from the bank); minimum of {args.reps} runs per peer, all in this run.",
                 rows, out_dir=args.out_dir)
    return 0 if all(r["same answer as the first row"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
