"""The sweep engine behind :func:`hubnorm.grid_search` (``engine="sweep"``): NNN App. B selection at the cost of
about one evaluation, for any method whose file states a one-pass path. Call :func:`hubnorm.grid_search`; this
module is its named fast seam. It never knows a method's name.

The plain engine refits and re-evaluates every grid point. The sweep gives *the same numbers* (bit-identical
offsets, identical ranks and metrics; ``tests/test_selection.py`` and the generic checks) far faster:

* fitting: :func:`sweep_table` builds one in-process engine (:class:`hubnorm.engine.LocalEngine`) over the
  validation task and calls the method's ``fit_grid(norms, engine)``. The engine keeps score blocks shared by
  every grid point (``engine.shared``: the similarity blocks of a temperature sweep, Sinkhorn's score blocks);
  a method whose points share more says so in its own ``fit_grid`` (NNN: every ``(alpha, k)`` from one
  top-``max(k)``; DualIS: one log-mean-exp per bank and beta).
* ranking offset methods: :func:`offset_sweep_ranks` evaluates many offset vectors against the same queries: the
  raw score block of a query chunk is computed once; per query, its top-``C`` raw targets are the only candidates
  that can beat the positive under offsets ``h`` unless ``fl(C-th raw score + max h) >= fl(s_pos + h_pos)``
  (rounding is monotone, so this test is exact); the rare unresolved (query, setting) pairs are counted on the
  full row. Ranks are exact up to ``cap = max(ks)`` (larger ranks are reported as ``cap``), which gives R@K
  exactly and MdR whenever the median rank is below the cap (else that setting's ranks are computed in full).
  ``MnR`` needs every rank: ask for it with ``full=True`` (exact, slower: one pass per setting).
* ranking other methods (DIS-like gates): the raw score blocks are computed once and every point's
  ``normalize_scores`` is applied to a copy.
* :func:`iteration_table`: any method with an ``iterate_offsets`` seam (SN, DBSN) reads R@1 after ``T = 1, 3, 10,
  ...`` iterations and "to convergence" off one run continued from checkpoint to checkpoint (an iteration depends
  on the column potentials alone, so the continued run is the same computation as a fresh fit with
  ``n_iter = T``): the cost of the largest ``T`` instead of their sum.
"""

from __future__ import annotations

import time
from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np
import pandas as pd
import torch

from ._validation import as_embeddings, check_positive_int
from .evaluation import positive_ranks, summarize_ranks
from .normalizers.base import Identity
from .progress import progress
from .registry import NORMALIZERS, make_normalizer
from .retrieval import RetrievalTask

__all__ = ["sweep_table", "iteration_table", "offset_sweep_ranks", "can_sweep", "SWEEP_CACHE_BYTES"]

#: The sweeps keep score blocks in memory up to this many bytes per score matrix; beyond it they are recomputed.
SWEEP_CACHE_BYTES = 2 * 2**30

_BIG = torch.iinfo(torch.int64).max


class _OffsetScores:
    """Scores ``S + h`` block by block, with exactly the arithmetic of ``Normalizer._score_block``."""

    def __init__(self, ident: Identity, h: torch.Tensor):
        self.ident, self.h = ident, h

    def iter_scores(self, queries, chunk_size=None):
        for q0, s in self.ident.iter_scores(queries, chunk_size):
            yield q0, s.add_(self.h)


def _identity(task: RetrievalTask, device, check_normalized) -> Identity:
    return Identity(device=device, check_normalized=check_normalized).fit(task.targets)


def offset_sweep_ranks(task: RetrievalTask, offsets: torch.Tensor, cap: int, *, chunk_size: Optional[int] = None,
                       device=None, check_normalized: bool = True, candidates: Optional[int] = None,
                       settings_per_pass: int = 16) -> np.ndarray:
    """Ranks (0-based, tie rule of :func:`hubnorm.evaluation.positive_ranks`) of every query of ``task`` under
    every offset vector (rows of ``offsets``, ``G x n``), capped at ``cap``: a ``(G, m)`` int array whose entries
    equal the true rank when it is below ``cap`` and ``cap`` otherwise. See the module docstring."""
    cap = check_positive_int(cap, "cap")
    ident = _identity(task, device, check_normalized)
    t = ident.targets_
    H = offsets.to(device=t.device, dtype=t.dtype)
    if H.ndim != 2 or H.shape[1] != t.shape[0]:
        raise ValueError(f"offsets must be (settings, {t.shape[0]}); got {tuple(H.shape)}")
    G, n = H.shape
    hmax = H.amax(dim=1)
    C = min(n, candidates or max(4 * cap, cap + 32))
    pos = task.positives
    q_of_all = pos.query_of_entry
    out = np.empty((G, pos.n_queries), dtype=np.int64)
    for q0, S in ident.iter_scores(task.queries, chunk_size):
        bq = S.shape[0]
        q1 = q0 + bq
        lo, hi = pos.indptr[q0], pos.indptr[q1]
        rows = torch.from_numpy(q_of_all[lo:hi] - q0).to(S.device)
        cols = torch.from_numpy(pos.indices[lo:hi]).to(S.device)
        s_pos = S[rows, cols]
        topv, topi = S.topk(C, dim=1)
        lowest = topv[:, -1]
        for g0 in range(0, G, settings_per_pass):
            Hg = H[g0:g0 + settings_per_pass]
            g = Hg.shape[0]
            pv = s_pos[None, :] + Hg[:, cols]                       # fl(S + h) at the positives
            r2 = rows[None, :].expand(g, -1)
            best = torch.full((g, bq), -torch.inf, dtype=S.dtype, device=S.device).scatter_reduce(1, r2, pv, "amax")
            is_best = pv == best.gather(1, r2)
            cand_cols = torch.where(is_best, cols[None, :].expand(g, -1), torch.full_like(r2, _BIG))
            best_col = torch.full((g, bq), _BIG, dtype=torch.long, device=S.device).scatter_reduce(
                1, r2, cand_cols, "amin")
            xc = topv[None] + Hg[:, topi]                           # (g, bq, C)
            b3 = best[..., None]
            cnt = ((xc > b3) | ((xc == b3) & (topi[None] < best_col[..., None]))).sum(dim=2)
            resolved = ((lowest[None, :] + hmax[g0:g0 + g, None]) < best) | (cnt >= cap)
            rank = cnt
            todo = (~resolved).nonzero()
            if todo.numel():
                gi, qi = todo[:, 0], todo[:, 1]
                for u0 in range(0, gi.numel(), 256):
                    gs, qs = gi[u0:u0 + 256], qi[u0:u0 + 256]
                    x = S[qs] + Hg[gs]
                    bv, bc = best[gs, qs], best_col[gs, qs]
                    col_idx = torch.arange(n, device=S.device)
                    full = (x > bv[:, None]).sum(1) + ((x == bv[:, None]) & (col_idx[None] < bc[:, None])).sum(1)
                    rank[gs, qs] = full
            out[g0:g0 + g, q0:q1] = rank.clamp_max(cap).cpu().numpy()
    return out


def _metrics_from_capped(ranks: np.ndarray, cap: int, ks: Sequence[int]) -> Optional[Dict[str, float]]:
    """R@K and MdR from capped ranks, or None when the median is not below the cap."""
    out = {f"R@{k}": float(100.0 * np.mean(ranks < k)) for k in ks}
    srt = np.sort(ranks)
    m = srt.size
    mid = srt[[(m - 1) // 2, m // 2]]
    if mid.max() >= cap:
        return None
    out["MdR"] = float(np.floor(np.median(ranks)) + 1)
    return out


def _evaluate_offsets(task, H: torch.Tensor, ks, full, chunk_size, device, check_normalized) -> List[Dict[str, float]]:
    ks = tuple(int(k) for k in ks)
    if full:
        ident = _identity(task, device, check_normalized)
        return [summarize_ranks(positive_ranks(_OffsetScores(ident, h.to(ident.targets_.dtype)), task.positives,
                                               task.queries, chunk_size=chunk_size), ks) for h in H]
    cap = max(ks)
    capped = offset_sweep_ranks(task, H, cap, chunk_size=chunk_size, device=device, check_normalized=check_normalized)
    rows = []
    ident = None
    for g in range(H.shape[0]):
        res = _metrics_from_capped(capped[g], cap, ks)
        if res is None:  # median rank beyond the cap: this setting's ranks in full
            ident = ident or _identity(task, device, check_normalized)
            ranks = positive_ranks(_OffsetScores(ident, H[g].to(ident.targets_.dtype)), task.positives, task.queries,
                                   chunk_size=chunk_size)
            res = {k: v for k, v in summarize_ranks(ranks, ks).items() if k != "MnR"}
        rows.append(res)
    return rows


def can_sweep(method: str, grid: Mapping[str, Sequence], fixed: Mapping[str, object]) -> bool:
    """Whether ``method``'s file states a one-pass path for this grid: its grid parameters are within the class's
    ``sweep_params`` and its fixed parameters within ``sweep_fixed``."""
    cls = NORMALIZERS[method]
    return bool(cls.sweep_params) and set(grid) <= cls.sweep_params and set(fixed) <= cls.sweep_fixed


def _bank(task: RetrievalTask, query_aware: bool):
    return task.queries if query_aware else task.query_bank


def sweep_table(task: RetrievalTask, method: str, points: Sequence[Mapping[str, object]], *,
                fixed: Optional[Mapping[str, object]] = None, metric_ks: Sequence[int] = (1, 5, 10),
                full: bool = False, query_aware: bool = False) -> pd.DataFrame:
    """Every grid point of ``method`` (``points``: parameter dicts, validated by the caller) fitted by one
    ``fit_grid`` on a shared engine and evaluated on ``task``: one row per point, in order, with its parameters,
    ``R@K`` for ``metric_ks``, ``MdR`` (and ``MnR`` with ``full=True``, or always for methods that are not offset
    methods): the values of fitting ``make_normalizer(method, **fixed, **point)`` and evaluating it."""
    fixed = dict(fixed or {})
    norms = [make_normalizer(method, **fixed, **p) for p in points]
    ref = norms[0]
    cls = type(ref)
    engine = ref.local_engine(task.targets, _bank(task, query_aware), task.target_bank, sweep_bytes=SWEEP_CACHE_BYTES)
    fitted = cls.fit_grid(norms, engine)
    if cls.is_offset:
        H = torch.stack([f["offsets_"] for f in fitted])
        rows = _evaluate_offsets(task, H, metric_ks, full, ref.chunk_size, engine.device, ref.check_normalized)
    else:
        rows = _evaluate_fitted(task, norms, fitted, engine, metric_ks)
    return pd.DataFrame([{**p, **r} for p, r in zip(points, rows)])


def _evaluate_fitted(task, norms, fitted, engine, metric_ks) -> List[Dict[str, float]]:
    """Metrics of normalizers that are not offset methods: the raw score blocks once, every point's
    ``normalize_scores`` on a copy (the arithmetic of ``Normalizer._score_block``)."""
    ref = norms[0]
    ident = _identity(task, engine.device, ref.check_normalized)
    q = as_embeddings(task.queries, "queries", device=engine.device, dtype=engine.dtype,
                      dim=engine.tensor("targets").shape[1], check_normalized=ref.check_normalized)
    blocks = list(ident.iter_scores(task.queries, ref.chunk_size))
    rows = []
    for norm, f in zip(norms, fitted):
        norm.targets_, norm.device_ = engine.tensor("targets"), engine.device
        norm._set_fitted(f)
        src = _ReplayScores(blocks, lambda q0, s, norm=norm: norm.normalize_scores(s.clone(), q[q0:q0 + s.shape[0]]))
        rows.append(summarize_ranks(positive_ranks(src, task.positives, task.queries), tuple(metric_ks)))
    return rows


def iteration_table(task: RetrievalTask, method: str, iterations: Sequence[int], *, tau: float = 0.01,
                    converged: Optional[int] = None, tol: Optional[float] = None, query_aware: bool = False,
                    fixed: Optional[Mapping[str, object]] = None, metric_ks: Sequence[int] = (1,),
                    show_progress: bool = False) -> pd.DataFrame:
    """R@K of an iterative method (SN, DBSN: any method whose class has ``iterate_offsets``) after each number of
    iterations ``T`` in ``iterations`` and, when ``converged`` is given, "to convergence" (at most ``converged``
    iterations, stopping at the first whose largest change of the potentials is below ``tol``), all read off one
    run.

    Equal to fitting ``make_normalizer(method, tau=tau, n_iter=T, **fixed)`` once per ``T`` (and once with
    ``n_iter=converged, tol=tol``): an iteration depends on the previous column potentials alone, so the potentials
    after ``T`` iterations of the longest run are those of a fit with ``n_iter=T``; the convergence test is the
    fit's own (largest change of the potentials below ``tol``, same arithmetic). ``tests/test_selection.py``
    proves the offsets identical. Cost: the largest ``T`` (or the convergence point) instead of the sum of all ``T``.

    Returns one row per setting: ``setting`` ("T=10" or "to convergence"), ``T max``, ``iterations run``, the
    metrics, and ``fit_s`` (seconds from the start of the run to that setting's potentials: a fresh fit's time).
    """
    supported = [n for n, c in NORMALIZERS.items() if hasattr(c, "iterate_offsets")]
    if method not in supported:
        raise ValueError(f"iteration_table supports {' and '.join(repr(n) for n in supported)}; got method={method!r}")
    iterations = [check_positive_int(T, "iterations") for T in iterations]
    if converged is not None:
        converged = check_positive_int(converged, "converged")
        if tol is None:
            raise ValueError("converged needs tol (the early-stopping threshold on the offsets), e.g. tol=1e-6")
    if not iterations and converged is None:
        raise ValueError("iterations is empty and converged is None: give at least one number of iterations")
    fixed = dict(fixed or {})
    for name in ("tau", "n_iter", "tol"):
        if name in fixed:
            raise ValueError(f"fixed must not set {name!r}: it is an argument of iteration_table")
    total = max(iterations + [converged or 0])   # iterations of the one run (>= 1: one of the two is given)
    norm = make_normalizer(method, tau=tau, n_iter=total, tol=tol, **fixed)
    engine = norm.local_engine(task.targets, _bank(task, query_aware), task.target_bank)
    wanted = set(iterations)
    last = max(iterations) if iterations else 0
    at: Dict[int, tuple] = {}  # T -> (offsets, seconds since the start)
    conv: list = []  # [(offsets, iterations run, seconds)] of the early-stopping run
    t0 = time.perf_counter()
    bar = progress(total=total, desc=f"{method.upper()} iterations", unit="it", disable=not show_progress)

    def record(it, offsets, change):
        bar.update(1)
        if it in wanted:
            at[it] = (offsets, time.perf_counter() - t0)
        if converged is not None and not conv and (change < tol or it == converged):  # the fit's own stopping rule
            conv.append((offsets, it, time.perf_counter() - t0))
        return it >= last and (converged is None or bool(conv))  # everything recorded: stop

    try:
        norm.iterate_offsets(engine, record)
    finally:
        bar.close()
    settings = [(f"T={T}", T, T, *at[T]) for T in iterations]
    if converged is not None:
        settings.append(("to convergence", converged, conv[0][1], conv[0][0], conv[0][2]))
    H = torch.stack([s[3] for s in settings])
    rows = _evaluate_offsets(task, H, metric_ks, False, norm.chunk_size, engine.device, norm.check_normalized)
    return pd.DataFrame([{"setting": s[0], "T max": int(s[1]), "iterations run": int(s[2]), **r, "fit_s": s[4]}
                         for s, r in zip(settings, rows)])


class _ReplayScores:
    """Score blocks computed once and transformed per setting (the score source of ``positive_ranks``)."""

    def __init__(self, blocks, transform):
        self.blocks, self.transform = blocks, transform

    def iter_scores(self, queries, chunk_size=None):
        for q0, s in self.blocks:
            yield q0, self.transform(q0, s)
