"""What the faiss indexes share: the faiss import, GPU detection, the size rule of ``nlist``, input checks."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch

from .._validation import check_finite_float, check_finite_rows, check_positive_int, check_seed


def import_faiss():
    try:
        import faiss  # noqa: F401
    except ImportError as exc:  # pragma: no cover - faiss is a dependency of the fast paths only
        raise ImportError("hubnorm.index needs faiss: pip install faiss-cpu (or faiss-gpu)") from exc
    return faiss


def faiss_uses_gpu(use_gpu: Optional[bool] = None) -> bool:
    """Whether the indexes will run on a GPU: ``use_gpu`` if given, else ``faiss.get_num_gpus() > 0``."""
    faiss = import_faiss()
    has = hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0
    if use_gpu and not has:
        raise RuntimeError("use_gpu=True but faiss sees no GPU (faiss-cpu build, or no CUDA device)")
    return has if use_gpu is None else bool(use_gpu)


#: How :class:`BankIndex` scans the probed lists (see its docstring).
SCANS = ("blas", "blas-bf16", "faiss")


def check_refine(refine) -> float:
    refine = check_finite_float(refine, "refine")
    if refine < 1:
        raise ValueError(f"refine (the re-ranked candidate pool, in multiples of k) must be >= 1; got {refine}")
    return float(refine)


def default_nlist(n: int) -> int:
    """About ``sqrt(n)`` inverted lists (a power of two), at least 1 and at most ``n // 39`` (module docstring)."""
    n = int(n)
    if n < 78:
        return 1
    nl = 2 ** int(round(math.log2(math.sqrt(n))))
    return int(max(1, min(nl, n // 39)))


def as_f32(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.ascontiguousarray(x, dtype=np.float32)


def check_matrix(x, name: str, dim: Optional[int] = None):
    """A 2-D floating numpy array or tensor with finite rows (checked in row blocks; never copied whole)."""
    if not isinstance(x, (np.ndarray, torch.Tensor)):
        raise TypeError(f"{name} must be a numpy array or a torch tensor of shape (n, d); got {type(x).__name__}")
    floating = torch.is_floating_point(x) if isinstance(x, torch.Tensor) else np.issubdtype(x.dtype, np.floating)
    if not floating:
        raise TypeError(f"{name} must hold floating-point values; got dtype {x.dtype}")
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"{name} must be 2-D (n, d) with at least one row; got shape {tuple(x.shape)}")
    if dim is not None and x.shape[1] != dim:
        raise ValueError(f"{name} has dimension {x.shape[1]} but the index holds vectors of dimension {dim}")
    check_finite_rows(x, name)
    return x


def tuning_sample(queries, dim: int, recall_target, sample_size, seed) -> np.ndarray:
    """The float32 queries an index's ``tune_nprobe`` measures recall on: ``sample_size`` rows of ``queries`` drawn
    by ``default_rng(seed)`` (all when fewer), after checking the arguments."""
    if not 0 < check_finite_float(recall_target, "recall_target") <= 1:
        raise ValueError(f"recall_target must be in (0, 1]; got {recall_target}")
    sample_size = check_positive_int(sample_size, "sample_size")
    rng = np.random.default_rng(check_seed(seed))
    queries = check_matrix(queries, "queries", dim)
    pick = np.sort(rng.choice(queries.shape[0], size=min(queries.shape[0], sample_size), replace=False))
    return as_f32(queries[pick])


def probe_curve(search, sample, k: int, exact: np.ndarray, nlist: int, recall_target: float):
    """``(nprobe, {nprobe: recall})``: recall of the exact top-``k`` (``exact``) for nprobe = 1, 2, 4, ... (capped at
    ``nlist``) until it reaches ``recall_target``; ``search(sample, k, nprobe=p)`` is the index's search."""
    curve, p = {}, 1
    while True:
        _, approx = search(sample, k, nprobe=p)
        curve[p] = sum(np.intersect1d(a, e).size for a, e in zip(approx, exact)) / exact.size
        if curve[p] >= recall_target or p >= nlist:
            return p, curve
        p = min(2 * p, nlist)
