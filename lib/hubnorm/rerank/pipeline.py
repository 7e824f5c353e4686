"""Retrieve and rerank: the first stage (any fitted normalizer, or a score matrix) picks the top-k targets of
each query, a cross-encoder rescores those k pairs, and the k candidates are reordered.

Conventions (Geigle et al., docs/methods.md, "Reranking"):

* The first-stage top-k is the first k entries of a stable sort by decreasing score (ties by target index), the
  tie rule of :func:`hubnorm.positive_ranks`; candidates are kept in that order.
* ``combine=None``: rank the k candidates by the cross-encoder score ``c`` alone (the paper's choice).
  ``combine=lam`` (a float in [0, 1]): rank by ``lam * N(e) + (1 - lam) * N(c)`` with ``e`` the first-stage score
  (ADD_lambda of their Table 11, Eq. 4-6). ``lam`` weights the *first stage*: ``lam = 0`` is the cross-encoder
  order, ``lam = 1`` the first-stage order. ``N`` (``score_norm``) is applied per query over its k candidates:
  ``"minmax"`` (default; NORM_ADD: both scores mapped to [0, 1], so ``lam`` means the same whatever the scales
  of a normalizer's output, e.g. NNN-shifted or Sinkhorn-offset cosines), ``"zscore"``, or ``"none"`` (raw ADD:
  sensible only when both scores share a range, e.g. ITM probabilities and cosines). A callable
  ``combine(e, c) -> (m, k) scores`` is also accepted.
* Ties among reranked scores keep the first-stage order (stable sort), so ``lam = 1`` reproduces the first stage
  exactly.
* Items beyond k keep their first-stage order below the k reranked ones: a query whose best positive is not in
  the top-k keeps its first-stage rank, and R@K for K <= k can never exceed the first stage's R@k (the ceiling).
"""

from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import torch

from .._validation import check_positive_int
from ..evaluation import iter_score_blocks, positive_ranks, recall_at_k, summarize_ranks
from ..retrieval import Positives, RetrievalTask
from .base import CrossEncoder

__all__ = ["rerank", "RerankResult", "first_stage_topk", "combine_scores", "nnn_bias_from_pairs"]

Combine = Union[None, float, Callable[[np.ndarray, np.ndarray], np.ndarray]]
SCORE_NORMS = ("minmax", "zscore", "none")


# ---------------------------------------------------------------------------------------------- helpers
def _block_topk(s: torch.Tensor, k: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Top-k (values, indices) of each row, ordered by decreasing value and then increasing index."""
    v, _ = s.topk(k, dim=1)
    thr = v[:, -1:]
    gt = s > thr
    eq = s == thr
    need = k - gt.sum(dim=1, keepdim=True)
    take = gt | (eq & (eq.cumsum(dim=1) <= need))
    idx = take.nonzero()[:, 1].view(s.shape[0], k)          # increasing index within each row
    vals = s.gather(1, idx)
    order = torch.sort(vals, dim=1, descending=True, stable=True).indices
    return vals.gather(1, order), idx.gather(1, order)


def first_stage_topk(first_stage, queries=None, k: int = 20, *, positives: Optional[Positives] = None,
                     chunk_size: Optional[int] = None):
    """Top-``k`` target ids and scores per query from a fitted normalizer (pass ``queries``) or an (m, n) matrix.

    Returns ``(ids, scores)`` as (m, k) numpy arrays, and the first-stage 0-based ranks of the best positive as
    a third element when ``positives`` is given (same tie rule as :func:`hubnorm.positive_ranks`).
    """
    ids, vals, ranks = [], [], []
    n = None
    for q0, s in iter_score_blocks(first_stage, queries, chunk_size):
        n = s.shape[1]
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
            raise TypeError(f"k must be an integer; got {type(k).__name__} {k!r}")
        if not 1 <= k <= n:
            raise ValueError(f"k must be in [1, n_targets={n}]; got {k}")
        if torch.isnan(s).any():
            raise ValueError("first-stage scores contain NaN")
        v, i = _block_topk(s, int(k))
        ids.append(i.cpu().numpy())
        vals.append(v.double().cpu().numpy())
        if positives is not None:
            q1 = q0 + s.shape[0]
            if q1 > positives.n_queries or n != positives.n_targets:
                raise ValueError(f"first-stage scores ({q1}+ rows x {n}) do not match the task "
                                 f"({positives.n_queries} queries x {positives.n_targets} targets)")
            lo, hi = positives.indptr[q0], positives.indptr[q1]
            sub = Positives(positives.indptr[q0:q1 + 1] - lo, positives.indices[lo:hi], n)
            ranks.append(positive_ranks(s, sub))
    if not ids:
        raise ValueError("the first stage produced no scores")
    out = (np.concatenate(ids), np.concatenate(vals))
    if positives is not None:
        r = np.concatenate(ranks)
        if r.size != positives.n_queries:
            raise ValueError(f"first stage scored {r.size} queries but the task has {positives.n_queries}")
        out = out + (r,)
    return out


def _check_lambda(combine) -> None:
    if combine is None or callable(combine):
        return
    if isinstance(combine, bool) or not isinstance(combine, numbers.Real):
        raise TypeError(f"combine must be None, a float lambda in [0, 1] or a callable(e, c); got {combine!r}")
    lam = float(combine)
    if not math.isfinite(lam) or not 0.0 <= lam <= 1.0:
        raise ValueError(f"combine (lambda, the weight of the first-stage score) must be in [0, 1]; got {combine}")


def _normalize(x: np.ndarray, how: str) -> np.ndarray:
    if how == "none":
        return x
    if how == "minmax":
        lo = x.min(axis=1, keepdims=True)
        span = x.max(axis=1, keepdims=True) - lo
        return np.divide(x - lo, span, out=np.zeros_like(x), where=span > 0)
    mu = x.mean(axis=1, keepdims=True)
    sd = x.std(axis=1, keepdims=True)
    return np.divide(x - mu, sd, out=np.zeros_like(x), where=sd > 0)


def combine_scores(e: np.ndarray, c: np.ndarray, combine: Combine = None, score_norm: str = "minmax") -> np.ndarray:
    """The second-stage ranking score of each candidate (see module docstring); rows are queries."""
    _check_lambda(combine)
    if score_norm not in SCORE_NORMS:
        raise ValueError(f"score_norm must be one of {SCORE_NORMS}; got {score_norm!r}")
    e = np.asarray(e, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    if e.shape != c.shape or e.ndim != 2:
        raise ValueError(f"e and c must be 2-D with the same shape; got {e.shape} and {c.shape}")
    if combine is None:
        return c
    if callable(combine):
        out = np.asarray(combine(e, c), dtype=np.float64)
        if out.shape != c.shape or not np.all(np.isfinite(out)):
            raise ValueError(f"combine(e, c) must return finite scores of shape {c.shape}; got {out.shape}")
        return out
    lam = float(combine)
    return lam * _normalize(e, score_norm) + (1.0 - lam) * _normalize(c, score_norm)


def _is_positive(candidates: np.ndarray, positives: Positives) -> np.ndarray:
    """(m, k) bool: is candidate ``candidates[i, r]`` a positive of query ``i``."""
    n = positives.n_targets
    codes = np.sort(positives.query_of_entry * n + positives.indices)
    cand = np.arange(candidates.shape[0])[:, None] * n + candidates
    pos = np.searchsorted(codes, cand)
    pos = np.minimum(pos, codes.size - 1)
    return codes[pos] == cand


# ---------------------------------------------------------------------------------------------- result
@dataclass
class RerankResult:
    """Final ranks and bookkeeping of one retrieve-and-rerank run.

    ``ranks`` are 0-based ranks of each query's best positive after reranking (feed them to
    :func:`hubnorm.summarize_ranks`); ``first_stage_ranks`` the same before reranking. ``candidates`` (m, k) are the
    first-stage top-k in first-stage order, ``first_stage_scores`` / ``ce_scores`` their scores, ``order`` the
    reranked permutation of each row (``candidates[i, order[i]]`` is the final top-k).
    """

    ranks: np.ndarray
    first_stage_ranks: np.ndarray
    candidates: np.ndarray
    first_stage_scores: np.ndarray
    ce_scores: np.ndarray
    order: np.ndarray
    is_positive: np.ndarray
    k: int
    combine: Combine = None
    score_norm: str = "minmax"
    pairs_scored: int = 0
    pairs_computed: int = 0
    first_stage_seconds: float = 0.0
    ce_seconds: float = 0.0
    rerank_seconds: float = 0.0
    meta: Dict[str, object] = field(default_factory=dict)

    @property
    def n_queries(self) -> int:
        return int(self.ranks.size)

    @property
    def final_topk(self) -> np.ndarray:
        return np.take_along_axis(self.candidates, self.order, axis=1)

    @property
    def pairs_per_query(self) -> float:
        return self.pairs_scored / self.n_queries

    @property
    def ceiling(self) -> float:
        """First-stage R@k: the best R@K (K <= k) reranking can reach."""
        return recall_at_k(self.first_stage_ranks, self.k)

    @property
    def wall_seconds(self) -> float:
        return self.first_stage_seconds + self.rerank_seconds

    @property
    def wall_per_query_s(self) -> float:
        return self.wall_seconds / self.n_queries

    @property
    def seconds_per_pair(self) -> float:
        """Cross-encoder seconds per pair actually computed (cache misses); NaN when all pairs were cached."""
        return self.ce_seconds / self.pairs_computed if self.pairs_computed else float("nan")

    def summary(self, ks: Sequence[int] = (1, 5, 10)) -> Dict[str, float]:
        """R@K of both stages, the ceiling, pairs per query and wall times, as one flat dict."""
        out = {f"first-stage R@{k}": recall_at_k(self.first_stage_ranks, k) for k in ks}
        out.update({f"reranked {key}": v for key, v in summarize_ranks(self.ranks, ks).items()})
        out.update({"k": self.k, f"ceiling R@{self.k}": self.ceiling, "pairs/query": self.pairs_per_query,
                    "pairs computed": self.pairs_computed, "first-stage s/query": self.first_stage_seconds / self.n_queries,
                    "rerank s/query": self.rerank_seconds / self.n_queries, "s/pair": self.seconds_per_pair})
        return out

    def stage_table(self, ks: Sequence[int] = (1, 5, 10)) -> pd.DataFrame:
        """One row per stage: R@K, MdR, MnR, ceiling, pairs per query, seconds per query."""
        rows = []
        for stage, r, pairs, secs in (("first stage", self.first_stage_ranks, 0.0, self.first_stage_seconds),
                                      (f"reranked top-{self.k}", self.ranks, self.pairs_per_query,
                                       self.first_stage_seconds + self.rerank_seconds)):
            row = {"stage": stage, **summarize_ranks(r, ks), f"ceiling R@{self.k}": self.ceiling,
                   "pairs/query": pairs, "s/query": secs / self.n_queries}
            rows.append(row)
        return pd.DataFrame(rows)

    def with_scores(self, scores: np.ndarray, **meta) -> "RerankResult":
        """The same candidates reordered by new second-stage ``scores`` (m, k), e.g. NNN-corrected CE scores.

        No cross-encoder call; ties keep the first-stage order."""
        scores = np.asarray(scores, dtype=np.float64)
        if scores.shape != self.candidates.shape or not np.all(np.isfinite(scores)):
            raise ValueError(f"scores must be finite with shape {self.candidates.shape}; got {scores.shape}")
        order = np.argsort(-scores, axis=1, kind="stable")
        ranks = _final_ranks(order, self.is_positive, self.first_stage_ranks, self.k)
        return replace(self, ranks=ranks, order=order, meta={**self.meta, **meta})

    def recombine(self, combine: Combine = None, score_norm: str = "minmax") -> "RerankResult":
        """Another score combination of the stored first-stage and cross-encoder scores (no new CE calls)."""
        out = self.with_scores(combine_scores(self.first_stage_scores, self.ce_scores, combine, score_norm))
        return replace(out, combine=combine, score_norm=score_norm)


def _final_ranks(order: np.ndarray, is_positive: np.ndarray, first_ranks: np.ndarray, k: int) -> np.ndarray:
    hit = np.take_along_axis(is_positive, order, axis=1)
    any_hit = hit.any(axis=1)
    if not np.array_equal(any_hit, first_ranks < k):
        raise AssertionError("internal error: top-k candidates disagree with the first-stage ranks")
    return np.where(any_hit, hit.argmax(axis=1), first_ranks).astype(np.int64)


# ---------------------------------------------------------------------------------------------- pipeline
def rerank(first_stage, task: RetrievalTask, cross_encoder: CrossEncoder, k: int = 20, combine: Combine = None,
           *, score_norm: str = "minmax", chunk_size: Optional[int] = None) -> RerankResult:
    """Retrieve the top-``k`` with ``first_stage`` and rerank them with ``cross_encoder``.

    Args:
        first_stage: a *fitted* normalizer from the registry (``task.fit(make_normalizer("nnn", ...))``), or a
            precomputed (m, n) first-stage score matrix (numpy / torch).
        task: the :class:`~hubnorm.RetrievalTask` (queries, targets, positives).
        cross_encoder: a :class:`~hubnorm.rerank.CrossEncoder` over the same queries and targets (same counts,
            same direction).
        k: candidates reranked per query, ``1 <= k <= n_targets`` (k = 20 in the paper).
        combine: ``None`` (cross-encoder score only), a lambda in [0, 1] weighting the first-stage score, or a
            callable ``(e, c) -> scores``; see the module docstring. ``score_norm``: ``"minmax"``, ``"zscore"``
            or ``"none"`` (used with a lambda).
    Returns:
        a :class:`RerankResult` (``.ranks`` for :func:`hubnorm.summarize_ranks`, ``.summary()``, timings).
    """
    if not isinstance(task, RetrievalTask):
        raise TypeError(f"task must be a hubnorm.RetrievalTask; got {type(task).__name__}")
    if not isinstance(cross_encoder, CrossEncoder):
        raise TypeError(f"cross_encoder must be a hubnorm.rerank.CrossEncoder; got {type(cross_encoder).__name__}")
    k = check_positive_int(k, "k", maximum=task.n_targets, max_name="the number of targets")
    _check_lambda(combine)
    if score_norm not in SCORE_NORMS:
        raise ValueError(f"score_norm must be one of {SCORE_NORMS}; got {score_norm!r}")
    if (cross_encoder.n_queries, cross_encoder.n_targets) != (task.n_queries, task.n_targets):
        raise ValueError(f"the cross-encoder covers {cross_encoder.n_queries} queries x {cross_encoder.n_targets} "
                         f"targets but the task has {task.n_queries} x {task.n_targets}: build it on the same items")
    ce_dir = getattr(cross_encoder, "direction", None)
    if ce_dir is not None and ce_dir != task.direction:
        raise ValueError(f"the cross-encoder is for {ce_dir!r} but the task is {task.direction!r}")
    if hasattr(first_stage, "iter_scores") and not hasattr(first_stage, "targets_"):
        raise ValueError("the first-stage normalizer is not fitted: use task.fit(normalizer) first")

    t0 = time.perf_counter()
    cand, e, first_ranks = first_stage_topk(first_stage, task.queries, k, positives=task.positives,
                                            chunk_size=chunk_size)
    t1 = time.perf_counter()
    m = cand.shape[0]
    before = (cross_encoder.n_pairs_computed, cross_encoder.compute_seconds)
    c = cross_encoder.score_pairs(np.repeat(np.arange(m), k), cand.reshape(-1)).reshape(m, k)
    computed = cross_encoder.n_pairs_computed - before[0]
    ce_secs = cross_encoder.compute_seconds - before[1]
    scores = combine_scores(e, c, combine, score_norm)
    order = np.argsort(-scores, axis=1, kind="stable")
    is_pos = _is_positive(cand, task.positives)
    ranks = _final_ranks(order, is_pos, first_ranks, k)
    t2 = time.perf_counter()
    meta = {"direction": task.direction, "cross_encoder": cross_encoder.model_id, "ce_kind": cross_encoder.kind,
            "first_stage": getattr(first_stage, "name", "matrix"), **task.meta}
    return RerankResult(ranks=ranks, first_stage_ranks=first_ranks, candidates=cand, first_stage_scores=e,
                        ce_scores=c, order=order, is_positive=is_pos, k=k, combine=combine, score_norm=score_norm,
                        pairs_scored=m * k, pairs_computed=int(computed), first_stage_seconds=t1 - t0,
                        ce_seconds=float(ce_secs), rerank_seconds=t2 - t1, meta=meta)


def nnn_bias_from_pairs(targets: np.ndarray, scores: np.ndarray, n_targets: int, *, k: int = 16,
                        alpha: float = 1.0) -> np.ndarray:
    """NNN bias ``b(t) = alpha * mean of the top-k scores s(q, t) over reference queries q``, from a *sparse* set of
    scored pairs: ``targets[p]`` received score ``scores[p]`` from some reference query.

    For a cross-encoder the full bank x gallery matrix is unaffordable, so the bank queries go through the same
    retrieve-and-rerank pipeline and only their top-k candidates are scored; a target's bias uses the scores it
    received there (fewer than ``k`` -> the mean of those). Targets no bank query retrieved get the mean bias of
    the others (they rarely appear in a test query's top-k either).
    """
    targets = np.asarray(targets, dtype=np.int64).reshape(-1)
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    if targets.shape != scores.shape:
        raise ValueError("targets and scores must have the same length")
    k = check_positive_int(k, "k")
    order = np.lexsort((-scores, targets))          # by target, then decreasing score
    t_sorted, s_sorted = targets[order], scores[order]
    starts = np.searchsorted(t_sorted, np.arange(n_targets), side="left")
    ends = np.searchsorted(t_sorted, np.arange(n_targets), side="right")
    bias = np.full(n_targets, np.nan)
    csum = np.concatenate([[0.0], np.cumsum(s_sorted)])
    take = np.minimum(ends - starts, k)
    has = take > 0
    bias[has] = (csum[starts[has] + take[has]] - csum[starts[has]]) / take[has]
    fill = np.nanmean(bias) if has.any() else 0.0
    bias[~has] = fill
    return float(alpha) * bias
