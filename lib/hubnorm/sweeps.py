"""One-pass hyperparameter sweeps (NNN App. B selection at the cost of about one evaluation).

:func:`hubnorm.selection.grid_search` refits and re-evaluates every grid point; it stays the simple reference.
The sweeps here give *the same numbers* (bit-identical offsets, identical ranks and metrics) far faster:

* :func:`nnn_sweep` computes each target's top-``max(ks)`` bank similarities once (sorted); the top-``k`` values
  of every smaller ``k`` are its first ``k`` columns (the blocked top-k never depends on ``k``), and every
  ``(alpha, k)`` offset vector is ``-alpha * mean(top[:, :k])`` (:func:`hubnorm._ops.nnn_bias`, a cheap
  ``n x k`` reduction).
* :func:`tau_sweep` (IS, SN, DBSN) computes the bank x target similarity blocks once and reuses them for every
  ``tau`` (same arithmetic as one fit).
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
from typing import Dict, Iterable, List, Mapping, Optional, Sequence

import numpy as np
import pandas as pd
import torch

from ._ops import logsumexp_similarity, nnn_bias, topk_similarity
from ._validation import as_embeddings, check_positive_int, resolve_device
from .evaluation import positive_ranks, summarize_ranks
from .normalizers.base import Identity
from .registry import make_normalizer
from .retrieval import RetrievalTask
from .selection import PAPER_GRIDS, SelectionResult

__all__ = ["nnn_sweep", "tau_sweep", "offset_sweep_ranks", "select_best"]

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
    if not isinstance(task, RetrievalTask):
        raise TypeError("task must be a hubnorm.RetrievalTask (a held-out split of the training data)")
    device = resolve_device(device)
    t = as_embeddings(task.targets, "targets", device=device, check_normalized=check_normalized)
    bank = task.queries if query_aware else task.query_bank
    if bank is None:
        raise ValueError("the task has no query_bank: build it with one, or pass query_aware=True (transductive)")
    qb = as_embeddings(bank, "query_bank", device=device, dtype=t.dtype, dim=t.shape[1],
                       check_normalized=check_normalized)
    return device, t, qb


def nnn_sweep(task: RetrievalTask, alphas: Optional[Sequence[float]] = None, ks: Optional[Sequence[int]] = None, *,
              metric_ks: Sequence[int] = (1, 5, 10), full: bool = False, query_aware: bool = False, device=None,
              block_bytes: Optional[int] = None, chunk_size: Optional[int] = None,
              check_normalized: bool = True) -> pd.DataFrame:
    """The NNN grid (default NNN App. B: alpha 0.25..1.5 by 0.125 x k 1..512) evaluated on ``task`` in one pass.

    Returns a DataFrame with one row per ``(alpha, k)`` in ``itertools.product(alphas, ks)`` order (as
    :func:`~hubnorm.selection.grid_search` with ``grid={"alpha": alphas, "k": ks}``) and the columns ``alpha``,
    ``k``, ``R@K`` for ``metric_ks``, ``MdR`` (and ``MnR`` with ``full=True``); the values equal grid_search's.
    """
    alphas = list(PAPER_GRIDS["nnn"]["alpha"] if alphas is None else alphas)
    ks = [int(k) for k in (PAPER_GRIDS["nnn"]["k"] if ks is None else ks)]
    if not alphas or not ks:
        raise ValueError("alphas and ks must be non-empty")
    device, t, qb = _fit_inputs(task, query_aware, device, check_normalized)
    kmax = check_positive_int(max(ks), "k", maximum=qb.shape[0], max_name="the query bank size")
    top, _ = topk_similarity(t, qb, kmax, block_bytes=block_bytes)
    tops = {k: top[:, :k].contiguous() for k in set(ks)}
    H = torch.stack([-nnn_bias(tops[k], a) for a, k in itertools.product(alphas, ks)])
    rows = _evaluate_offsets(task, H, metric_ks, full, chunk_size, device, check_normalized)
    return pd.DataFrame([{"alpha": a, "k": k, **r} for (a, k), r in zip(itertools.product(alphas, ks), rows)])


def tau_sweep(task: RetrievalTask, method: str, taus: Optional[Sequence[float]] = None, *,
              fixed: Optional[Mapping[str, object]] = None, metric_ks: Sequence[int] = (1, 5, 10),
              full: bool = False, query_aware: bool = False, device=None, chunk_size: Optional[int] = None,
              check_normalized: bool = True, cache_bytes: int = 2 * 2**30) -> pd.DataFrame:
    """A temperature sweep of ``method`` in ``{"is", "sn", "dbsn"}`` reusing one bank x target score pass.

    IS: the raw similarity blocks are kept (up to ``cache_bytes``) and every ``tau`` is one log-sum-exp pass over
    them. SN/DBSN: every ``tau`` runs its own Sinkhorn iterations on the shared score blocks (when the normalizer
    would cache them itself; else each fit recomputes them, still exact). Values equal grid_search's.
    """
    method = method.lower()
    if method not in ("is", "sn", "dbsn"):
        raise ValueError(f"tau_sweep supports 'is', 'sn' and 'dbsn'; got {method!r}")
    taus = list(PAPER_GRIDS[method]["tau"] if taus is None else taus)
    fixed = dict(fixed or {})
    H = []
    if method == "is":
        device, t, qb = _fit_inputs(task, query_aware, device, check_normalized)
        bb = fixed.get("block_bytes")
        cache = {} if t.shape[0] * qb.shape[0] * t.element_size() <= cache_bytes else None
        for tau in taus:
            tau = float(tau)
            H.append(-tau * logsumexp_similarity(t, qb, 1.0 / tau, block_bytes=bb, _cache=cache))
    else:
        shared: Dict = {}
        for tau in taus:
            norm = make_normalizer(method, tau=tau, **fixed)
            n_cols = task.n_targets + (len(task.target_bank) if method == "dbsn" and task.target_bank is not None else 0)
            bank = task.queries if query_aware else task.query_bank
            item = 2 if norm.cache_dtype in (torch.float16, torch.bfloat16) else 4
            if bank is not None and norm.cache_bytes is not None and len(bank) * n_cols * item <= norm.cache_bytes:
                norm._shared_cache = shared
            task.fit(norm, query_aware=query_aware)
            device = norm.device_
            H.append(norm.offsets_)
    H = torch.stack(H)
    rows = _evaluate_offsets(task, H, metric_ks, full, chunk_size, device, check_normalized)
    return pd.DataFrame([{"tau": tau, **r} for tau, r in zip(taus, rows)])


def select_best(method: str, table: pd.DataFrame, metric: str = "R@1") -> SelectionResult:
    """The best row of a sweep table (first one among ties, as grid_search)."""
    values = table[metric].to_numpy()
    higher = not metric.startswith(("MdR", "MnR"))
    best = int(np.argmax(values) if higher else np.argmin(values))
    params = {c: table.iloc[best][c] for c in table.columns if not c.startswith(("R@", "MdR", "MnR"))}
    params = {c: (int(v) if c == "k" else float(v)) for c, v in params.items()}
    return SelectionResult(method, params, float(values[best]), metric, table)
