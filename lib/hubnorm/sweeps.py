"""The one-pass engine behind :func:`hubnorm.grid_search` (``engine="sweep"``): NNN App. B selection at the cost
of about one evaluation. Call :func:`hubnorm.grid_search`; this module is its named fast seam.

The plain engine refits and re-evaluates every grid point. The sweeps give *the same numbers* (bit-identical
offsets, identical ranks and metrics; ``tests/test_selection.py``) far faster:

* :func:`nnn_grid_table` computes each target's top-``max(ks)`` bank similarities once (sorted); the top-``k`` values
  of every smaller ``k`` are its first ``k`` columns (the blocked top-k never depends on ``k``), and every
  ``(alpha, k)`` offset vector is ``-alpha * mean(top[:, :k])`` (:func:`hubnorm.kernels.nnn_bias`, a cheap
  ``n x k`` reduction).
* :func:`tau_grid_table` (IS, SN, DBSN) computes the bank x target similarity blocks once and reuses them for every
  ``tau`` (same arithmetic as one fit).
* :func:`iteration_table` (SN, DBSN) reads R@1 after ``T = 1, 3, 10, ...`` iterations and "to convergence" off one
  Sinkhorn run continued from checkpoint to checkpoint (an iteration depends on the column potentials alone, so
  the continued run is the same computation as a fresh fit with ``n_iter = T``): the cost of the largest ``T``
  instead of their sum.
* :func:`offset_sweep_ranks` evaluates many offset vectors against the same queries: the raw score block of a
  query chunk is computed once; per query, its top-``C`` raw targets are the only candidates that can beat the
  positive under offsets ``h`` unless ``fl(C-th raw score + max h) >= fl(s_pos + h_pos)`` (rounding is
  monotone, so this test is exact); the rare unresolved (query, setting) pairs are counted on the full row.
  Ranks are exact up to ``cap = max(ks)`` (larger ranks are reported as ``cap``), which gives R@K exactly and
  MdR whenever the median rank is below the cap (else that setting's ranks are computed in full). ``MnR``
  needs every rank: ask for it with ``full=True`` (exact, slower: one pass per setting).
"""

from __future__ import annotations

import itertools
import time
from typing import Dict, Iterable, List, Mapping, Optional, Sequence

import numpy as np
import pandas as pd
import torch

from .kernels import log_mean_exp_similarity, nnn_bias, topk_similarity
from ._validation import as_embeddings, check_positive_int, resolve_device
from .evaluation import positive_ranks, summarize_ranks
from .normalizers.base import Identity
from .normalizers.dynamic_inverted_softmax import activation_mask
from .normalizers.inverted_softmax import inverted_softmax_offsets
from .normalizers.sinkhorn import sinkhorn_potentials
from .progress import progress
from .registry import make_normalizer
from .retrieval import RetrievalTask

__all__ = ["nnn_grid_table", "tau_grid_table", "dual_grid_table", "iteration_table", "offset_sweep_ranks",
           "SWEEP_FIXED_PARAMS"]

_COMMON = {"device", "chunk_size", "check_normalized", "block_bytes"}
#: The fixed (non-grid) parameters each sweep honours exactly; any other fixed parameter -> the plain engine.
SWEEP_FIXED_PARAMS = {
    "nnn": set(_COMMON),
    "is": set(_COMMON),
    "sn": _COMMON | {"n_iter", "tol", "cache_bytes", "cache_dtype"},
    "dbsn": _COMMON | {"n_iter", "tol", "cache_bytes", "cache_dtype"},
    "dualis": set(_COMMON),
    "dualdis": _COMMON | {"k"},
}

#: The sweeps keep score blocks in memory up to this many bytes; beyond it grid_search uses the plain engine.
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


def _fit_inputs(task, query_aware, device, check_normalized):
    device = resolve_device(device)
    t = as_embeddings(task.targets, "targets", device=device, check_normalized=check_normalized)
    bank = task.queries if query_aware else task.query_bank
    if bank is None:
        raise ValueError("the task has no query_bank: build it with one, or pass query_aware=True (transductive)")
    qb = as_embeddings(bank, "query_bank", device=device, dtype=t.dtype, dim=t.shape[1],
                       check_normalized=check_normalized)
    return device, t, qb


def _sinkhorn_columns(task: RetrievalTask, method: str, t: torch.Tensor, device, check_normalized) -> torch.Tensor:
    """The columns SN balances over: the targets, or ``[targets ; target_bank]`` for DBSN (Alg. A2)."""
    if method != "dbsn":
        return t
    if task.target_bank is None:
        raise ValueError("DBSN needs the task's target_bank (reference targets, e.g. training images)")
    tb = as_embeddings(task.target_bank, "target_bank", device=device, dtype=t.dtype, dim=t.shape[1],
                       check_normalized=check_normalized)
    return torch.cat([t, tb], dim=0)


def nnn_grid_table(task: RetrievalTask, alphas: Sequence[float], ks: Sequence[int], *,
                   metric_ks: Sequence[int] = (1, 5, 10), full: bool = False, query_aware: bool = False,
                   device=None, block_bytes: Optional[int] = None, chunk_size: Optional[int] = None,
                   check_normalized: bool = True) -> pd.DataFrame:
    """Every ``(alpha, k)`` of NNN evaluated on ``task`` in one pass (parameters validated by the caller).

    One row per point in ``itertools.product(alphas, ks)`` order with ``alpha``, ``k``, ``R@K`` for
    ``metric_ks``, ``MdR`` (and ``MnR`` with ``full=True``): the values of fitting
    ``NearestNeighborNormalization(alpha, k)`` at every point and evaluating it.
    """
    alphas, ks = list(alphas), list(ks)
    device, t, qb = _fit_inputs(task, query_aware, device, check_normalized)
    kmax = check_positive_int(max(int(k) for k in ks), "k", maximum=qb.shape[0], max_name="the query bank size")
    top, _ = topk_similarity(t, qb, kmax, block_bytes=block_bytes)
    tops = {int(k): top[:, :int(k)].contiguous() for k in set(ks)}
    H = torch.stack([-nnn_bias(tops[int(k)], float(a)) for a, k in itertools.product(alphas, ks)])
    rows = _evaluate_offsets(task, H, metric_ks, full, chunk_size, device, check_normalized)
    return pd.DataFrame([{"alpha": a, "k": k, **r} for (a, k), r in zip(itertools.product(alphas, ks), rows)])


def tau_grid_table(task: RetrievalTask, method: str, taus: Sequence[float], *,
                   fixed: Optional[Mapping[str, object]] = None, metric_ks: Sequence[int] = (1, 5, 10),
                   full: bool = False, query_aware: bool = False) -> pd.DataFrame:
    """A temperature grid of ``method`` in ``{"is", "sn", "dbsn"}`` reusing one bank x target score pass.

    IS: the raw similarity blocks are kept (up to 2 GiB) and every ``tau`` is one log-sum-exp pass over them.
    SN/DBSN: every ``tau`` runs its own Sinkhorn iterations on shared score blocks when the normalizer would
    cache them itself (``cache_bytes``); else each ``tau`` recomputes them exactly as one fit does.
    """
    fixed = dict(fixed or {})
    norms = [make_normalizer(method, tau=tau, **fixed) for tau in taus]
    ref = norms[0]
    device, t, qb = _fit_inputs(task, query_aware, ref.device, ref.check_normalized)
    H = []
    if method == "is":
        cache = {} if t.shape[0] * qb.shape[0] * t.element_size() <= 2 * 2**30 else None
        for norm in norms:
            H.append(inverted_softmax_offsets(t, qb, float(norm.tau), norm.block_bytes, cache=cache))
    elif method in ("sn", "dbsn"):
        cols = _sinkhorn_columns(task, method, t, device, ref.check_normalized)
        store = t.dtype if ref.cache_dtype is None else ref.cache_dtype
        item = torch.empty((), dtype=store).element_size()
        fits = ref.cache_bytes is not None and qb.shape[0] * cols.shape[0] * item <= ref.cache_bytes
        shared: Optional[dict] = {} if fits else None
        for norm in norms:
            _, g, _ = sinkhorn_potentials(qb, cols, float(norm.tau), int(norm.n_iter), norm.tol,
                                          block_bytes=norm.block_bytes, cache_bytes=norm.cache_bytes,
                                          cache_dtype=norm.cache_dtype, shared_blocks=shared)
            H.append(g[: t.shape[0]].clone())
    else:
        raise ValueError(f"tau_grid_table supports 'is', 'sn' and 'dbsn'; got {method!r}")
    rows = _evaluate_offsets(task, torch.stack(H), metric_ks, full, ref.chunk_size, device, ref.check_normalized)
    return pd.DataFrame([{"tau": tau, **r} for tau, r in zip(taus, rows)])


def iteration_table(task: RetrievalTask, method: str, iterations: Sequence[int], *, tau: float = 0.01,
                    converged: Optional[int] = None, tol: Optional[float] = None, query_aware: bool = False,
                    fixed: Optional[Mapping[str, object]] = None, metric_ks: Sequence[int] = (1,),
                    show_progress: bool = False) -> pd.DataFrame:
    """R@K of SN or DBSN after each number of Sinkhorn iterations ``T`` in ``iterations`` and, when ``converged``
    is given, "to convergence" (at most ``converged`` iterations, stopping at the first whose largest change of the
    offsets is below ``tol``), all read off one Sinkhorn run.

    Equal to fitting ``make_normalizer(method, tau=tau, n_iter=T, **fixed)`` once per ``T`` (and once with
    ``n_iter=converged, tol=tol``): an iteration depends on the previous column potentials alone, so the potentials
    after ``T`` iterations of the longest run are those of a fit with ``n_iter=T``; the convergence test is the
    fit's own (largest change of ``g`` below ``tol``, same arithmetic). ``tests/test_selection.py`` proves the
    offsets identical. Cost: the largest ``T`` (or the convergence point) instead of the sum of all ``T``.

    Returns one row per setting: ``setting`` ("T=10" or "to convergence"), ``T max``, ``iterations run``, the
    metrics, and ``fit_s`` (seconds from the start of the run to that setting's potentials: a fresh fit's time).
    """
    if method not in ("sn", "dbsn"):
        raise ValueError(f"iteration_table supports 'sn' and 'dbsn'; got method={method!r}")
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
    norm.check_params()
    device, t, qb = _fit_inputs(task, query_aware, norm.device, norm.check_normalized)
    cols = _sinkhorn_columns(task, method, t, device, norm.check_normalized)
    n = t.shape[0]
    wanted = set(iterations)
    last = max(iterations) if iterations else 0
    at: Dict[int, tuple] = {}  # T -> (offsets, seconds since the start)
    conv: list = []  # [(offsets, iterations run, seconds)] of the early-stopping run
    prev = [None]
    t0 = time.perf_counter()
    bar = progress(total=total, desc=f"{method.upper()} iterations", unit="it",
                   disable=not show_progress)

    def record(it, g):
        bar.update(1)
        if it in wanted:
            at[it] = (g[:n].to(t.dtype), time.perf_counter() - t0)
        if converged is not None and not conv:
            g_prev = torch.zeros_like(g) if prev[0] is None else prev[0]
            if float((g - g_prev).abs().max()) < tol or it == converged:  # the fit's own stopping rule
                conv.append((g[:n].to(t.dtype), it, time.perf_counter() - t0))
            prev[0] = g
        return it >= last and (converged is None or bool(conv))  # everything recorded: stop

    sinkhorn_potentials(qb, cols, float(tau), total, None, block_bytes=norm.block_bytes,
                        cache_bytes=norm.cache_bytes, cache_dtype=norm.cache_dtype, callback=record)
    bar.close()
    settings = [(f"T={T}", T, T, *at[T]) for T in iterations]
    if converged is not None:
        settings.append(("to convergence", converged, conv[0][1], conv[0][0], conv[0][2]))
    H = torch.stack([s[3] for s in settings])
    rows = _evaluate_offsets(task, H, metric_ks, False, norm.chunk_size, device, norm.check_normalized)
    return pd.DataFrame([{"setting": s[0], "T max": int(s[1]), "iterations run": int(s[2]), **r, "fit_s": s[4]}
                         for s, r in zip(settings, rows)])


class _ReplayScores:
    """Score blocks computed once and transformed per setting (the score source of ``positive_ranks``)."""

    def __init__(self, blocks, transform):
        self.blocks, self.transform = blocks, transform

    def iter_scores(self, queries, chunk_size=None):
        for q0, s in self.blocks:
            yield q0, self.transform(s)


def dual_grid_table(task: RetrievalTask, method: str, betas_query: Sequence[float], betas_target: Sequence[float], *,
                    fixed: Optional[Mapping[str, object]] = None, metric_ks: Sequence[int] = (1, 5, 10),
                    full: bool = False, query_aware: bool = False) -> pd.DataFrame:
    """DualIS / DualDIS over ``product(betas_query, betas_target)``: the similarity blocks of each bank are
    computed once (one GEMM pass per bank instead of one per point) and every point's two centred log-mean-exp
    terms are formed from them exactly as one fit does (``DualInvertedSoftmax._term``).
    DualDIS (not an offset method) ranks every point on the same raw score blocks with its gates."""
    fixed = dict(fixed or {})
    points = list(itertools.product(betas_query, betas_target))
    norms = [make_normalizer(method, beta_query=bq, beta_target=bt, **fixed) for bq, bt in points]
    ref = norms[0]
    device, t, qb = _fit_inputs(task, query_aware, ref.device, ref.check_normalized)
    if task.target_bank is None:
        raise ValueError(f"{method} needs the task's target_bank (reference targets, e.g. training images)")
    tb = as_embeddings(task.target_bank, "target_bank", device=device, dtype=t.dtype, dim=t.shape[1],
                       check_normalized=ref.check_normalized)
    item = t.element_size()
    cq = {} if t.shape[0] * qb.shape[0] * item <= SWEEP_CACHE_BYTES else None
    ct = {} if t.shape[0] * tb.shape[0] * item <= SWEEP_CACHE_BYTES else None
    # exactly DualInvertedSoftmax._term for every point, on similarity blocks shared by every point. The centred
    # log-mean-exp depends on the point's total beta only through the working dtype it picks; for float64 inputs
    # that is always float64, so one pass per (bank, beta) serves every point (checked with the smallest total,
    # the strictest precision test); float32 inputs get one pass per (bank, beta, total).
    exact64 = t.dtype == torch.float64
    memo = {}

    def lme(bank, beta, total, cache, name):
        key = (name, beta) if exact64 else (name, beta, total)
        if key not in memo:
            unit = min(float(n.beta_query) + float(n.beta_target) for n in norms
                       if float(getattr(n, name)) == beta) if exact64 else total
            memo[key] = log_mean_exp_similarity(t, bank, beta, block_bytes=ref.block_bytes, unit=unit,
                                                name=f"{name}={beta:g}", cache=cache)
        return memo[key]

    hq, hr = [], []
    for n in norms:
        bq, bt = float(n.beta_query), float(n.beta_target)
        total = bq + bt
        hq.append((-lme(qb, bq, total, cq, "beta_query") / total).to(t.dtype))
        hr.append((-lme(tb, bt, total, ct, "beta_target") / total).to(t.dtype))
    if method == "dualis":
        rows = _evaluate_offsets(task, torch.stack([a + b for a, b in zip(hq, hr)]), metric_ks, full, ref.chunk_size,
                                 device, ref.check_normalized)
    else:
        k = int(ref.k)
        mask_q = activation_mask(qb, t, k, ref.block_bytes)
        mask_t = activation_mask(tb, t, k, ref.block_bytes)
        ident = _identity(task, device, ref.check_normalized)
        blocks = []
        for q0, s in ident.iter_scores(task.queries, ref.chunk_size):
            top1 = s.argmax(dim=1)
            blocks.append((q0, (s, mask_q[top1].to(s.dtype)[:, None], mask_t[top1].to(s.dtype)[:, None])))
        rows = []
        for a, b in zip(hq, hr):
            src = _ReplayScores(blocks, lambda blk, a=a, b=b: blk[0] + blk[1] * a + blk[2] * b)
            rows.append(summarize_ranks(positive_ranks(src, task.positives, task.queries), tuple(metric_ks)))
    return pd.DataFrame([{"beta_query": bq, "beta_target": bt, **r} for (bq, bt), r in zip(points, rows)])
