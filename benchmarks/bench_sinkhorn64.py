"""float64 SN in memory (the notebooks' default dtype): hubnorm's kernel-domain iterations against its own log-domain
reference pass and POT, in one process.

Problem: query-aware SN t2i on the held-out split of the default data (5,000 test captions x 1,000 test images,
synthetic flickr30k preset, seed 0, d = 512, float64), the setting of notebook 05's iteration study: tau = 0.01 and
0.005, T = 10 fixed iterations and T = 300 (a run towards convergence: notebook 05 caps it at 1,000; no early
stop here).

Peers, alternating in every round (ROUNDS rounds, fastest and median of each):

* hubnorm ``sinkhorn_potentials`` in float64 with the whole matrix kept: the default pass (the kernel-domain
  iterations: one exponential pass, then two matrix-vector products per iteration, the loop on numpy arrays on
  the CPU), the same loop forced onto torch tensors (the seam ``_kernel_namespace``'s device side), and
  ``block_pass="rowmax"`` (the log-domain reference pass: an exponential per score and iteration);
* POT ``ot.sinkhorn(method="sinkhorn")`` (float64 kernel-domain Sinkhorn-Knopp, the DBSN code's call) and
  ``method="sinkhorn_log"`` (POT's log-domain solver), ``numItermax=T, stopThr=0``, on the transposed problem (POT
  starts from the other marginal: the kernel solver's ``u`` starts at ``1 / n``, so after T iterations
  ``tau log u + tau log n`` is the offset; the log solver starts at ``log u = 0`` and ``tau log_u`` is the offset).
  Each POT call forms its cost matrix ``-S`` (one GEMM, as hubnorm's call does from the embeddings), inside its
  timing. POT's log-domain solver (an order of magnitude slower per iteration) is timed at T = 10 only.

Every timed peer starts after 0.3 s of idle time (``_common.settle``): OpenBLAS's threads spin-wait for a while
after a call, and a torch peer timed right after a numpy one would compete with them.

Agreement: the largest absolute difference of the offsets from a dense float64 log-domain Sinkhorn (scipy) of the
same T. Then the products alone: numpy's ``@`` (OpenBLAS gemv) against ``torch.mv``, both directions, float64 at
this problem's shape and float32 at the sweeps' kept-block shape.

Run: flock /tmp/hubnorm-bench.lock .venv/bin/python benchmarks/bench_sinkhorn64.py
"""

import os
import time

import numpy as np
import torch
from _common import dense_sinkhorn64, forced, settle, write_report

from hubnorm.normalizers import sinkhorn as sk
from hubnorm.normalizers.sinkhorn import sinkhorn_potentials
from hubnorm.synthetic import make_dataset

ROUNDS = int(os.environ.get("HUBNORM_BENCH_ROUNDS", "3"))
KERNEL = "hubnorm float64, kernel domain (default pass)"
LOG_POT = "POT ot.sinkhorn float64 (method='sinkhorn_log'), transposed"


def with_torch_loop(fn):
    """Run ``fn`` with the kernel-domain loop's array namespace forced to torch (its device side)."""
    with forced(sk, "_kernel_namespace", torch):
        return fn()


def matvec_rows():
    """The two matrix-vector products alone: numpy's ``@`` (OpenBLAS gemv, the CPU loop's) against ``torch.mv``,
    a @ x and a.T @ x, on a float64 kernel of this problem's shape and on float32 blocks of the sweeps' kept shape
    (29,000 x 1,000)."""
    rows = []
    g = torch.Generator().manual_seed(0)
    for dtype, shape in ((torch.float64, (5000, 1000)), (torch.float32, (29000, 1000))):
        a = torch.rand(*shape, generator=g, dtype=torch.float64).to(dtype)
        an = a.numpy()
        for transpose in (False, True):
            x = torch.rand(shape[0] if transpose else shape[1], generator=g, dtype=torch.float64).to(dtype)
            xn = x.numpy()
            peers = {"numpy @ (OpenBLAS gemv)": (lambda: xn @ an) if transpose else (lambda: an @ xn),
                     "torch.mv": (lambda: torch.mv(a.T, x)) if transpose else (lambda: torch.mv(a, x))}
            reps = 20
            times = {k: [] for k in peers}
            for r in range(ROUNDS * 3):
                for name in (list(peers) if r % 2 == 0 else list(reversed(peers))):
                    settle()
                    peers[name]()
                    t0 = time.perf_counter()
                    for _ in range(reps):
                        peers[name]()
                    times[name].append((time.perf_counter() - t0) / reps)
            base = float(np.median(times["numpy @ (OpenBLAS gemv)"]))
            what = f"{'a.T @ x' if transpose else 'a @ x'}, a {shape[0]:,} x {shape[1]:,} {str(dtype)[6:]}"
            for name in peers:
                rows.append({"tau": "", "T": "", "run": f"matrix-vector product {what}: {name}",
                             "seconds (fastest)": min(times[name]), "seconds (median)": float(np.median(times[name])),
                             "x the kernel-domain pass (medians)": float(np.median(times[name])) / base})
            print(rows[-2:], flush=True)
    return rows


def main():
    import ot

    ds = make_dataset("flickr30k", n_train_images=2000, seed=0)
    te = ds.splits["test"]
    bank = torch.from_numpy(te.captions.astype(np.float64))
    targets = torch.from_numpy(te.images.astype(np.float64))
    m, n = bank.shape[0], targets.shape[0]

    def pot_cost():
        """POT's cost matrix of the transposed problem (rows = targets), formed inside each timed POT call."""
        return -(targets @ bank.T).numpy()

    S = (bank @ targets.T).numpy()
    rows, notes = [], []
    for tau in (0.01, 0.005):
        for T in (10, 300):
            g_ref = dense_sinkhorn64(S, tau, T)
            peers = {
                KERNEL:
                    lambda: sinkhorn_potentials(bank, targets, tau, T)[1].numpy(),
                "hubnorm float64, kernel domain with the loop in torch (the seam's device side, forced)":
                    lambda: with_torch_loop(lambda: sinkhorn_potentials(bank, targets, tau, T)[1].numpy()),
                "hubnorm float64, log domain (block_pass='rowmax', the reference pass)":
                    lambda: sinkhorn_potentials(bank, targets, tau, T, block_pass="rowmax")[1].numpy(),
                "POT ot.sinkhorn float64 (kernel domain), transposed":
                    lambda: tau * np.log(ot.sinkhorn(np.full(n, 1.0 / n), np.full(m, 1.0 / m), pot_cost(), tau,
                                                     method="sinkhorn", numItermax=T, stopThr=0.0, log=True,
                                                     warn=False)[1]["u"]) + tau * np.log(n),
                LOG_POT:
                    lambda: tau * ot.sinkhorn(np.full(n, 1.0 / n), np.full(m, 1.0 / m), pot_cost(), tau,
                                              method="sinkhorn_log", numItermax=T, stopThr=0.0, log=True,
                                              warn=False)[1]["log_u"],
            }
            if T > 10:      # POT's log-domain solver: ~0.45 s per iteration here; timed at T = 10 only
                del peers[LOG_POT]
            times, out = {k: [] for k in peers}, {}
            for r in range(ROUNDS):
                order = list(peers) if r % 2 == 0 else list(reversed(peers))
                for name in order:
                    settle()
                    t0 = time.perf_counter()
                    out[name] = np.asarray(peers[name]())
                    times[name].append(time.perf_counter() - t0)
            base = np.median(times[KERNEL])
            for name in peers:
                rows.append({"tau": tau, "T": T, "run": name, "seconds (fastest)": min(times[name]),
                             "seconds (median)": float(np.median(times[name])),
                             "x the kernel-domain pass (medians)": float(np.median(times[name])) / base,
                             "max abs offset difference vs dense float64": float(np.abs(out[name] - g_ref).max())})
            print(rows[-len(peers):], flush=True)
    rows += matvec_rows()
    notes.append(f"{m:,} x {n:,} float64 scores (the matrix held whole: 40 MB); {ROUNDS} alternating rounds per "
                 "setting (the order reversed every other round); every peer starts from the embeddings (its GEMM "
                 "timed with it).")
    notes.append("The matrix-vector rows time the products alone (20 per timing, a warm-up before each, "
                 f"{3 * ROUNDS} alternating rounds); their ratio column is to numpy's product.")
    notes.append("Command: `flock /tmp/hubnorm-bench.lock .venv/bin/python benchmarks/bench_sinkhorn64.py`.")
    write_report("sinkhorn64", "float64 SN in memory: kernel-domain vs log-domain iterations, and POT",
                 "Query-aware SN on the default data's test split (5,000 captions x 1,000 images, float64), T "
                 "iterations from g = 0, no early stop: hubnorm's default float64 pass (Alg. A1's kernel form: one "
                 "exponential pass, two matrix-vector products per iteration), its log-domain reference pass, and "
                 "POT's kernel-domain and log-domain solvers, timed in alternating rounds in one process.",
                 rows, notes)


if __name__ == "__main__":
    main()
