"""Why the benchmarks idle before each timed peer (``_common.settle``): OpenBLAS's worker threads (numpy's BLAS)
keep spin-waiting for a while after a call, and a torch operation started in that window competes with them for
the cores.

One process, ROUNDS rounds. Each round runs 50 numpy float64 matrix-vector products (5,000 x 1,000, OpenBLAS
``gemv``: the CPU loop of float64 SN's kernel-domain iterations), then idles for a given gap (0, 0.01, 0.05, 0.1,
0.2, 0.5 s and the settle interval), then times one torch float64 GEMM (5,000 x 512 by 512 x 1,000: a query block's
scores). The last row times the same GEMM after a torch-only warm-up (no numpy call in the round). Medians over
rounds; the ratio column is to that last row.

Run: flock /tmp/hubnorm-bench.lock .venv/bin/python benchmarks/bench_blas_spin.py
"""

import os
import time

import numpy as np
import torch
from _common import SETTLE_SECONDS, write_report

ROUNDS = int(os.environ.get("HUBNORM_BENCH_ROUNDS", "3")) * 3


def main():
    rng = np.random.default_rng(0)
    a, x = rng.random((5000, 1000)), rng.random(1000)
    q = torch.from_numpy(rng.standard_normal((5000, 512)))
    t = torch.from_numpy(rng.standard_normal((1000, 512)))
    gaps = [0.0, 0.01, 0.05, 0.1, 0.2, SETTLE_SECONDS, 0.5]
    times = {g: [] for g in gaps}
    alone = []
    for _ in range(ROUNDS):
        for gap in gaps:
            for _ in range(50):
                a @ x
            if gap:
                time.sleep(gap)
            t0 = time.perf_counter()
            q @ t.T
            times[gap].append(time.perf_counter() - t0)
        time.sleep(0.5)
        q @ t.T
        t0 = time.perf_counter()
        q @ t.T
        alone.append(time.perf_counter() - t0)
    base = float(np.median(alone))
    rows = [{"run": f"torch float64 GEMM {gap:g} s after 50 numpy gemv calls"
                    + (" (the settle interval)" if gap == SETTLE_SECONDS else ""),
             "seconds (median)": float(np.median(times[gap])), "seconds (fastest)": min(times[gap]),
             "x the GEMM after torch work only": float(np.median(times[gap])) / base} for gap in gaps]
    rows.append({"run": "torch float64 GEMM after torch work only (0.5 s idle, one warm-up GEMM)",
                 "seconds (median)": base, "seconds (fastest)": min(alone), "x the GEMM after torch work only": 1.0})
    write_report("blas_spin", "OpenBLAS's spin-waiting threads and the next torch operation",
                 f"{ROUNDS} rounds in one process; each round: 50 numpy float64 gemv calls (5,000 x 1,000), an idle "
                 "gap, one timed torch float64 GEMM (5,000 x 512 by 512 x 1,000).", rows,
                 ["Command: `flock /tmp/hubnorm-bench.lock .venv/bin/python benchmarks/bench_blas_spin.py`."])


if __name__ == "__main__":
    main()
