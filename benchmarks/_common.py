"""Shared helpers of the performance benchmarks: timing, environment line, Markdown + CSV reports."""

from __future__ import annotations

import contextlib
import csv
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPORTS = HERE / "reports"
sys.path.insert(0, str(HERE.parent / "lib"))
sys.path.insert(1, str(HERE.parent / "companion"))   # hubnorm_companion (the notebooks' package)


def load_average() -> str:
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover
        return "n/a"


#: The load average when this module was imported, i.e. when a benchmark script started (its "at start" value;
#: reading it when the report is written would repeat the value at the end).
START_LOAD = load_average()
START_TIME = time.strftime("%Y-%m-%d %H:%M")


def environment() -> str:
    import torch
    try:
        import faiss
        fv = faiss.__version__
        gpus = faiss.get_num_gpus()
    except ImportError:  # pragma: no cover
        fv, gpus = "absent", 0
    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__} "
            f"({torch.get_num_threads()} threads), faiss {fv} ({gpus} GPUs), load average (1/5/15 min) at the start "
            f"({START_TIME}): {START_LOAD}")


#: Idle time before a timed peer (:func:`settle`): OpenBLAS's worker threads (numpy's BLAS, faiss's) keep
#: spin-waiting for 0.05-0.1 s after a call, and a torch peer timed inside that window competes with them for the
#: cores (`reports/blas_spin.md`: a torch float64 GEMM takes 1.56x its time right after numpy gemv calls, 1.03-1.09x
#: after 0.1 s or more of idle time).
SETTLE_SECONDS = 0.3


def settle():
    """Sleep :data:`SETTLE_SECONDS` (untimed), so that a peer's timing does not inherit the previous peer's
    spinning BLAS threads."""
    time.sleep(SETTLE_SECONDS)


@contextlib.contextmanager
def forced(module, seam: str, value):
    """Within the block, ``module.<seam>`` (a namespace seam such as ``_kernel_namespace``) returns ``value`` for
    every device: a benchmark times the side of a seam that another device would run."""
    real = getattr(module, seam)
    setattr(module, seam, lambda device: value)
    try:
        yield
    finally:
        setattr(module, seam, real)


def ivfpq_refine_index(x, nlist: int, pq: str = "PQ64x4fs", seed: int = 0):
    """faiss ``IVF<nlist>,<pq>`` (inner product) trained on a seeded sample of at most ``32 * nlist`` rows of ``x``
    (10 k-means iterations), wrapped in ``IndexRefineFlat`` (a float32 copy of ``x`` for the exact re-rank) and
    filled with ``x``. Returns ``(index, rows used for training)``."""
    import faiss
    import numpy as np

    base = faiss.index_factory(x.shape[1], f"IVF{nlist},{pq}", faiss.METRIC_INNER_PRODUCT)
    ivf = faiss.extract_index_ivf(base)
    ivf.cp.niter = 10
    ivf.cp.seed = seed
    ivf.cp.max_points_per_centroid = 1 << 30
    rng = np.random.default_rng(seed)
    sample = np.sort(rng.choice(x.shape[0], size=min(x.shape[0], 32 * nlist), replace=False))
    base.train(x[sample])
    ref = faiss.IndexRefineFlat(base)
    ref.add(x)
    return ref, len(sample)


def blocked_gemm(a, b, partition: str) -> None:
    """The bare GEMMs of a kernel's own blocks, written into one reused buffer and nothing else (the physical
    limit of that kernel): ``partition="topk"`` (:func:`hubnorm.kernels.topk_partition`, the exact top-k kernel)
    or ``"lse"`` (:func:`hubnorm.kernels.block_shape`, ``logsumexp_similarity``). Torch tensors on any device."""
    import torch

    from hubnorm.kernels import block_shape, iter_blocks, topk_partition

    n_a, n_b, item = a.shape[0], b.shape[0], a.element_size()
    if partition == "topk":
        a_blocks, b_blocks, _ = topk_partition(n_a, n_b, item, None)
    elif partition == "lse":
        ra, rb = block_shape(n_a, n_b, item, None)
        a_blocks, b_blocks = list(iter_blocks(n_a, ra)), list(iter_blocks(n_b, rb))
    else:
        raise ValueError(f"partition must be 'topk' or 'lse'; got {partition!r}")
    size = max(x1 - x0 for x0, x1 in a_blocks) * max(y1 - y0 for y0, y1 in b_blocks)
    buf = torch.empty(size, dtype=a.dtype, device=a.device)
    for a0, a1 in a_blocks:
        for b0, b1 in b_blocks:
            torch.mm(a[a0:a1], b[b0:b1].T, out=buf[:(a1 - a0) * (b1 - b0)].view(a1 - a0, b1 - b0))


def exp_pass(n_scores, tile=1024 * 2048):
    """One torch.exp per score, stored, over one in-cache tile of scores in [-30, 0] repeated to cover
    ``n_scores``: the cost of exponentiating every score with torch's public ``exp``. A reference, not a floor: the
    fused ``log_softmax`` kernel that :func:`hubnorm.kernels.block_logsumexp` uses exponentiates with a faster
    vectorised ``exp`` and stores nothing, and costs about as much or less per score while doing more (scaling,
    two maxima, the sum, the output; ``benchmarks/reports/topk.md``)."""
    import torch

    x = torch.rand(tile, generator=torch.Generator().manual_seed(0)) * -30.0
    y = torch.empty_like(x)
    for s in range(0, n_scores, tile):
        n = min(tile, n_scores - s)
        torch.exp(x[:n], out=y[:n])


class Timer:
    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0


def dense_sinkhorn64(S, tau, n_iter):
    """Column potentials g of Alg. A1 after ``n_iter`` log-domain iterations from g = 0, dense float64 (scipy): the
    benchmarks' reference for SN offsets."""
    import numpy as np
    from scipy.special import logsumexp
    S = np.asarray(S, dtype=np.float64)
    m, n = S.shape
    g = np.zeros(n)
    for _ in range(n_iter):
        f = tau * np.log(1 / m) - tau * logsumexp((S + g) / tau, axis=1)
        g = tau * np.log(1 / n) - tau * logsumexp((S + f[:, None]) / tau, axis=0)
    return g


def write_report(name: str, title: str, intro: str, rows, notes=(), out_dir=None, echo: bool = True):
    """``reports/<name>.md`` (intro, table, notes) and ``reports/<name>.csv`` from a list of dicts
    (``out_dir`` instead of benchmarks/reports when given); ``echo``: also print the report."""
    out = Path(out_dir) if out_dir is not None else REPORTS
    out.mkdir(parents=True, exist_ok=True)
    cols = []
    for r in rows:
        for c in r:
            if c not in cols:
                cols.append(c)
    with open(out / f"{name}.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)

    def fmt(v):
        if isinstance(v, float):
            return f"{v:.4g}" if abs(v) < 1e4 else f"{v:.0f}"
        return str(v)

    lines = [f"# {title}", "", intro, "", f"Environment: {environment()}; finished {time.strftime('%Y-%m-%d %H:%M')}, "
             f"load average at the end {load_average()}.", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in cols) + " |" for r in rows]
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    if echo:
        print("\n".join(lines))
