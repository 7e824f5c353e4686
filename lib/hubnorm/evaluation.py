"""Retrieval metrics: ranks, R@K, MdR, MnR, graded NDCG@K and bootstrap confidence intervals.

Conventions (CLIP / CLIP_benchmark; docs/methods.md, "Evaluation"):
- the rank of a query is the 0-based rank of its *best* positive (t2i: the caption's image; i2t: the best of
  the image's captions). Ties are broken by target index, as a stable sort by decreasing score would: the
  rank is the number of targets scoring strictly higher than the best positive plus the number of targets
  tied with it that have a smaller index. The result is deterministic and never depends on block sizes.
- R@K = 100 * share of queries with rank < K; MdR = floor(median rank) + 1; MnR = mean rank + 1.
Ranks are computed block by block from the normaliser's score blocks: the m x n matrix is never held whole.
"""

from __future__ import annotations

import math
from collections import abc
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from .kernels import block_rows, counts_namespace, iter_blocks
from ._validation import check_chunk_size, check_ks, check_positive_int
from .provenance import bank_mark, certificate_mark, note_recalls, note_result, requested_certificate
from .retrieval import Positives, RetrievalTask

ScoreSource = Union[np.ndarray, torch.Tensor, "Normalizer"]  # noqa: F821


def iter_score_blocks(scores: ScoreSource, queries=None, chunk_size: Optional[int] = None) -> Iterator[Tuple[int, torch.Tensor]]:
    """Row blocks ``(start, scores)`` of a fitted normalizer's scores (needs ``queries``), of an (m, n) matrix, or
    of a stream of such blocks (:meth:`hubnorm.RetrievalTask.blocks`: a task's test scores, from embeddings or
    from score matrices).

    The one entry point through which every evaluator (:func:`positive_ranks`, :func:`hubnorm.k_occurrence`,
    the re-ranking pipeline) reads scores, so the checks are the same everywhere: every block must be finite
    (a NaN or an infinite score has no rank: ValueError naming the first bad row), and a stream's blocks must
    follow each other row by row.
    """
    chunk_size = check_chunk_size(chunk_size)
    if isinstance(scores, abc.Iterator):
        if queries is not None:
            raise ValueError("queries are read by a normalizer; a stream of score blocks already holds the scores")
        expected, width = 0, None
        for item in scores:
            if not (isinstance(item, tuple) and len(item) == 2):
                raise TypeError(f"a stream of score blocks yields (start_row, block) pairs; got {type(item).__name__}")
            q0, s = item
            if isinstance(s, np.ndarray):
                s = torch.from_numpy(s)
            if not isinstance(s, torch.Tensor) or s.ndim != 2:
                raise ValueError(f"score block at row {q0} must be a 2-D array (queries x targets); got "
                                 f"{getattr(s, 'shape', type(s).__name__)}")
            width = s.shape[1] if width is None else width
            if s.shape[1] != width:
                raise ValueError(f"score block at row {q0} has {s.shape[1]} targets, the blocks before it {width}: "
                                 "every block of a stream covers the whole gallery")
            if q0 != expected:
                raise ValueError(f"score blocks must follow each other row by row: a block starts at row {q0}, "
                                 f"expected {expected}")
            _check_finite_block(s, q0, "scores")
            expected = q0 + s.shape[0]
            yield q0, s
        return
    if hasattr(scores, "iter_scores"):
        if queries is None:
            raise ValueError("queries are needed to score with a normalizer: pass queries=...")
        for q0, s in scores.iter_scores(queries, chunk_size):
            _check_finite_block(s, q0, f"{type(scores).__name__} scores")
            yield q0, s
        return
    if isinstance(scores, np.ndarray):
        scores = torch.from_numpy(scores)
    if not isinstance(scores, torch.Tensor):
        raise TypeError(f"scores must be a fitted normalizer or an (m, n) array; got {type(scores).__name__}")
    if scores.ndim != 2:
        raise ValueError(f"scores must be 2-D (queries x targets); got shape {tuple(scores.shape)}")
    scores = scores.detach()
    if not torch.is_floating_point(scores):
        scores = scores.double()
    size = chunk_size or block_rows(scores.shape[1], scores.element_size())
    for q0, q1 in iter_blocks(scores.shape[0], size):
        _check_finite_block(scores[q0:q1], q0, "scores")
        yield q0, scores[q0:q1]


def _check_finite_block(s: torch.Tensor, q0: int, what: str) -> None:
    # one cheap reduction first: NaN and +-inf propagate into the sum; a finite sum proves every entry finite
    # (a sum that overflows although every entry is finite falls through to the exact check, which passes)
    if math.isfinite(float(s.detach().sum())):
        return
    finite = torch.isfinite(s)
    if not bool(finite.all()):
        row = q0 + int((~finite).any(dim=1).nonzero()[0, 0])
        kind = "NaN" if bool(torch.isnan(s).any()) else "an infinite value"
        raise ValueError(f"{what} contain {kind} (first in query row {row}): a non-finite score has no rank. "
                         "Check the inputs, or the method's parameters (an extreme temperature), or mask with a "
                         "large finite negative value instead of -inf")


def positive_ranks(
    scores: ScoreSource,
    positives: Positives,
    queries=None,
    *,
    chunk_size: Optional[int] = None,
) -> np.ndarray:
    """0-based rank of every query's best positive (see module docstring for ties).

    Args:
        scores: a fitted normalizer (then pass ``queries``), a precomputed (m, n) score matrix, or the blocks of
            a task (``task.blocks(normalizer)``).
        positives: the positive targets of each query.
    """
    if not isinstance(positives, Positives):
        raise TypeError("positives must be a hubnorm.Positives")
    ranks = np.empty(positives.n_queries, dtype=np.int64)
    seen = 0
    for q0, s in iter_score_blocks(scores, queries, chunk_size):
        q1 = q0 + s.shape[0]
        if s.shape[1] != positives.n_targets:
            raise ValueError(f"scores have {s.shape[1]} targets but positives refer to {positives.n_targets}")
        if q1 > positives.n_queries:
            raise ValueError(f"scores have more rows than positives has queries ({positives.n_queries})")
        lo, hi = positives.indptr[q0], positives.indptr[q1]
        rows = torch.from_numpy(positives.query_of_entry[lo:hi] - q0).to(s.device)
        cols = torch.from_numpy(positives.indices[lo:hi]).to(s.device)
        pos_scores = s[rows, cols]
        # best positive per query (first index among equal scores)
        best = torch.full((q1 - q0,), -torch.inf, dtype=s.dtype, device=s.device)
        best = best.scatter_reduce(0, rows, pos_scores, reduce="amax")
        big = torch.iinfo(torch.int64).max
        best_col = torch.full((q1 - q0,), big, dtype=torch.long, device=s.device)
        is_best = pos_scores == best[rows]
        best_col = best_col.scatter_reduce(0, rows[is_best], cols[is_best], reduce="amin")
        ranks[q0:q1] = _count_ahead(s, best, best_col)
        seen = q1
    if seen != positives.n_queries:
        raise ValueError(f"scores have {seen} rows but positives has {positives.n_queries} queries")
    return ranks


def list_ranks(indices, positives: Positives) -> np.ndarray:
    """0-based rank of every query's best positive in its top-``k`` list (``indices``: (m, k) target indices, best
    first, as a vector index's ``search`` returns them), or ``k`` when none of its positives is in the list: a miss at
    every R@K with K <= k, and a lower bound of the rank the full scores would give."""
    if not isinstance(positives, Positives):
        raise TypeError("positives must be a hubnorm.Positives")
    idx = np.asarray(indices)
    if idx.ndim != 2 or idx.shape[0] != positives.n_queries or idx.shape[1] == 0:
        raise ValueError(f"indices must be a (queries, k) array of target indices with {positives.n_queries} rows "
                         f"and k >= 1; got shape {idx.shape}")
    depth = idx.shape[1]
    ranks = np.full(positives.n_queries, depth, dtype=np.int64)
    q_of = positives.query_of_entry
    match = idx[q_of] == positives.indices[:, None]   # (positive entries, k): where each positive sits in its list
    np.minimum.at(ranks, q_of, np.where(match.any(axis=1), match.argmax(axis=1), depth))
    return ranks


def _count_ahead(s: torch.Tensor, best: torch.Tensor, best_col: torch.Tensor) -> np.ndarray:
    """The rank rule on one score block: per row, the targets scoring above ``best`` plus those tied with it at an
    index below ``best_col``. On the numpy side of :func:`~hubnorm.kernels.counts_namespace` (float32 / float64)
    the ties are counted only in rows where a target other than the best positive itself equals ``best`` (exact
    ties are rare: one more compare of the block finds those rows, and only they are compared against
    ``best_col``)."""
    if counts_namespace(s.device) is np and s.dtype in (torch.float32, torch.float64):
        # force: a view with torch's negative bit, or a block (and so its best values) requiring grad
        sn, b = s.numpy(force=True), best.numpy(force=True)[:, None]
        ahead = np.count_nonzero(sn > b, axis=1)
        rows = np.flatnonzero(np.count_nonzero(sn == b, axis=1) != 1)   # 1: the best positive alone
        if rows.size:
            before = np.arange(sn.shape[1])[None, :] < best_col.numpy()[rows, None]
            ahead[rows] += np.count_nonzero((sn[rows] == b[rows]) & before, axis=1)
        return ahead
    greater = (s > best[:, None]).sum(dim=1)
    col_idx = torch.arange(s.shape[1], device=s.device)
    tied_before = ((s == best[:, None]) & (col_idx[None, :] < best_col[:, None])).sum(dim=1)
    return (greater + tied_before).cpu().numpy()


def recall_at_k(ranks: np.ndarray, k: int) -> float:
    """R@K in percent: the share of queries whose best positive ranks in the top ``k``."""
    value = _recall(_check_ranks(ranks), check_positive_int(k, "k"))
    note_recalls((value,))   # the ledger of computed R@K (hubnorm.provenance.unmarked_query_aware)
    return value


def _recall(ranks: np.ndarray, k: int) -> float:
    """R@K of checked ranks (the bootstrap's resamples: not numbers a table shows, so not in the ledger)."""
    return float(100.0 * np.mean(ranks < k))


def median_rank(ranks: np.ndarray) -> float:
    """MdR = floor(median of 0-based ranks) + 1."""
    return float(np.floor(np.median(_check_ranks(ranks))) + 1)


def mean_rank(ranks: np.ndarray) -> float:
    """MnR = mean of 0-based ranks + 1."""
    return float(np.mean(_check_ranks(ranks)) + 1)


def _check_ranks(ranks) -> np.ndarray:
    ranks = np.asarray(ranks)
    if ranks.ndim != 1 or ranks.size == 0:
        raise ValueError(f"ranks must be a non-empty 1-D array; got shape {ranks.shape}")
    if not np.issubdtype(ranks.dtype, np.integer) or ranks.min() < 0:
        raise ValueError("ranks must be non-negative integers (0-based ranks from positive_ranks)")
    return ranks


def summarize_ranks(ranks: np.ndarray, ks: Sequence[int] = (1, 5, 10)) -> Dict[str, float]:
    """``{"R@1": ..., "R@5": ..., "R@10": ..., "MdR": ..., "MnR": ...}``."""
    return _summaries(_check_ranks(ranks)[None, :], ks)[0]


def summarize_rank_rows(ranks: np.ndarray, ks: Sequence[int] = (1, 5, 10)) -> List[Dict[str, float]]:
    """:func:`summarize_ranks` of every row of a ``(settings, queries)`` array of 0-based ranks (a grid's ranks),
    one pass over the array per statistic. The values are those of :func:`recall_at_k`, :func:`median_rank` and
    :func:`mean_rank` on each row to the bit: the counts and rank sums are integers (exact in float64), divided by
    the number of queries as ``np.mean`` divides them (``tests/test_evaluation.py``)."""
    ranks = np.asarray(ranks)
    if ranks.ndim != 2 or ranks.shape[1] == 0:
        raise ValueError(f"ranks must be a (settings, queries) array with at least one query; got shape {ranks.shape}")
    if ranks.shape[0]:
        _check_ranks(ranks.reshape(-1))
    return _summaries(ranks, ks)


def _summaries(ranks: np.ndarray, ks: Sequence[int]) -> List[Dict[str, float]]:
    """The body of :func:`summarize_rank_rows` on a checked 2-D array of ranks."""
    ks = check_ks(ks)
    m = ranks.shape[1]
    recall = {k: 100.0 * (np.count_nonzero(ranks < k, axis=1) / m) for k in ks}
    mdr = np.floor(np.median(ranks, axis=1)) + 1
    mnr = ranks.sum(axis=1, dtype=np.float64) / m + 1
    for k in ks:
        note_recalls(recall[k])
    return [{**{f"R@{k}": float(recall[k][g]) for k in ks}, "MdR": float(mdr[g]), "MnR": float(mnr[g])}
            for g in range(ranks.shape[0])]


def bootstrap_ci(
    ranks: np.ndarray,
    statistic: Callable[[np.ndarray], float] = lambda r: _recall(r, 1),
    *,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> Tuple[float, float]:
    """Percentile bootstrap interval of ``statistic(ranks)`` over queries (NNN Tables A8-A11 report 95%)."""
    ranks = _check_ranks(ranks)
    n_boot = check_positive_int(n_boot, "n_boot")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1); got {level}")
    rng = np.random.default_rng(seed)
    stats = np.empty(n_boot)
    for b in range(n_boot):
        stats[b] = statistic(ranks[rng.integers(0, ranks.size, ranks.size)])
    lo, hi = np.quantile(stats, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


def marked(result: Dict[str, float], normalizer, task, certificate=None) -> str:
    """The ``bank`` mark of ``result`` (:func:`hubnorm.provenance.bank_mark`; from ``certificate`` when one was
    made), recorded with its R@K values in the ledger that saved tables are checked against."""
    if certificate is not None:
        mark = certificate_mark(certificate)
    else:
        mark = bank_mark(normalizer, task)
    note_result(result, mark)
    return mark


def evaluate(
    normalizer,
    task,
    *,
    ks: Sequence[int] = (1, 5, 10),
    n_boot: int = 0,
    seed: int = 0,
    chunk_size: Optional[int] = None,
    return_ranks: bool = False,
    certificate: bool = False,
):
    """R@K, MdR and MnR of a *fitted* normalizer on ``task`` (a :class:`RetrievalTask` of embeddings or of score
    matrices; ``normalizer=None``: the raw scores; an (m, n) array: scores computed elsewhere); with ``n_boot`` > 0
    also a 95% CI per R@K.

    A vector index that serves a fitted normalizer (anything with ``search(queries, k)`` and the ``normalizer`` it
    serves: :class:`hubnorm.index.IndexedRetriever`) is evaluated from its top-``max(ks)`` lists
    (:func:`list_ranks`: a positive outside the list is a miss); MnR is then NaN, and MdR too unless more than half
    of the queries find a positive in their list (the ranks beyond it are unknown). Its bank mark is the served
    normalizer's.

    ``certificate=True`` adds ``out["certificate"]``, the no-leak certificate of the fit
    (:func:`hubnorm.provenance.certify`: the test queries and gallery compared with the banks the normalizer was
    fitted on; ``.verdict``, ``.leak_free``, ``.save(path)``, checkable later with
    :func:`hubnorm.provenance.check_certificate`).

    ``out["bank"]`` marks what the fit's banks were, read from its record of them and not from what the caller
    meant: "QUERY-AWARE" (a test query in the query bank, or a test target in the target bank, exactly or as a
    near duplicate), "query-agnostic", "none" (the raw scores, a method without a bank) or "unrecorded"
    (:func:`hubnorm.provenance.bank_mark`). Tables carry it in their ``bank`` column.

    Returns a dict (and the rank array when ``return_ranks``).
    """
    if not isinstance(task, RetrievalTask):
        raise TypeError(f"task must be a hubnorm.RetrievalTask (embeddings or score matrices); got "
                        f"{type(task).__name__}")
    ks = check_ks(ks)
    served = hasattr(normalizer, "search") and hasattr(normalizer, "normalizer")   # a vector index's top-k lists
    fitted = normalizer.normalizer if served else normalizer
    cert = requested_certificate(fitted, task, certificate)
    if normalizer is not None and not isinstance(normalizer, (np.ndarray, torch.Tensor)) and not served and not (
            hasattr(normalizer, "iter_scores") or hasattr(normalizer, "normalize_scores")):
        raise TypeError(f"normalizer must be a fitted hubnorm normalizer (task.fit(method)), a vector index serving "
                        f"one (hubnorm.index.IndexedRetriever), None (the raw scores) or an (m, n) score array; got "
                        f"{type(normalizer).__name__}")
    if isinstance(normalizer, (np.ndarray, torch.Tensor)):   # scores computed elsewhere (marked "unrecorded")
        ranks = positive_ranks(normalizer, task.positives, chunk_size=chunk_size)
    elif served:
        if task.queries is None:
            raise ValueError("a vector index searches query embeddings; this task holds the queries as score matrices "
                             "only: evaluate the fitted normalizer itself (hubnorm.evaluate(normalizer, task))")
        served_n = fitted.n_fitted_targets()
        if served_n != task.n_targets:
            raise ValueError(f"the index serves a normalizer fitted on {served_n} targets but the task has "
                             f"{task.n_targets}: build the IndexedRetriever from a normalizer fitted on this task's "
                             "gallery (task.fit(method))")
        depth = max(check_positive_int(k, "k") for k in ks)
        ranks = list_ranks(normalizer.search(task.queries, depth)[1], task.positives)
    else:
        ranks = positive_ranks(task.blocks(normalizer, chunk_size), task.positives)
    out = summarize_ranks(ranks, ks)
    if served:   # the ranks beyond the lists are unknown: no mean, and a median only when the lists hold it
        out["MnR"] = math.nan
        if np.count_nonzero(ranks < depth) < ranks.size // 2 + 1:
            out["MdR"] = math.nan
    out["bank"] = marked(out, fitted, task, cert)
    if cert is not None:
        out["certificate"] = cert
    if n_boot:
        for k in ks:
            lo, hi = bootstrap_ci(ranks, lambda r, k=k: _recall(r, k), n_boot=n_boot, seed=seed)
            out[f"R@{k} lo"], out[f"R@{k} hi"] = lo, hi
    return (out, ranks) if return_ranks else out


# ---------------------------------------------------------------------------------------------- NDCG
def ndcg_at_k(scores, relevance, k: int, *, exponential_gain: bool = True) -> np.ndarray:
    """NDCG@K per query with graded relevance.

    ``DCG_K = sum_{i=1..K} gain(rel_i) / log2(1 + i)`` with ``gain(r) = 2^r - 1`` (Li et al.; or ``r`` when
    ``exponential_gain=False``), normalised by the ideal DCG; ties in ``scores`` share their average gain (the
    expected DCG over random orders of the ties, as scikit-learn's ``ndcg_score``). Queries whose ideal DCG is 0
    get NDCG 0. :func:`ndcg_at_ks` gives several K from one sort.

    Args:
        scores: (m, n) scores, higher is better.
        relevance: (m, n) non-negative graded relevance.
    Returns:
        (m,) array of NDCG@K in [0, 1].
    """
    k = check_positive_int(k, "k")
    return ndcg_at_ks(scores, relevance, [k], exponential_gain=exponential_gain)[k]


def ndcg_at_ks(scores, relevance, ks: Sequence[int], *, exponential_gain: bool = True) -> Dict[int, np.ndarray]:
    """NDCG@K (:func:`ndcg_at_k`'s definition) per query for every K in ``ks``, from one sort of each row, vectorised
    over the queries (float64). Returns ``{K: (m,) array}``.

    Plain computation, per query: sort the candidates by score (descending); each tie group of the sorted list
    shares the mean gain of its members; ``DCG_K`` is the first ``K`` shared gains times the discounts
    ``1 / log2(1 + i)``; divide by the DCG of the gains sorted descending (0 where that is 0). Here all rows at
    once: a tie group starts at every row start and wherever the sorted score changes, and one ``add.reduceat``
    gives every group's gain sum. Tested against scikit-learn's ``ndcg_score`` and a slow enumeration of the tie
    orders (``tests/test_evaluation.py``, ``tests/test_listwise.py``).
    """
    s = scores.detach().cpu().numpy() if isinstance(scores, torch.Tensor) else scores
    r = relevance.detach().cpu().numpy() if isinstance(relevance, torch.Tensor) else relevance
    s, r = np.asarray(s, dtype=np.float64), np.asarray(r, dtype=np.float64)
    if s.ndim != 2 or s.shape != r.shape:
        raise ValueError(f"scores and relevance must be 2-D with the same shape; got {s.shape} and {r.shape}")
    if s.size == 0:
        raise ValueError(f"scores and relevance must be non-empty; got shape {s.shape}")
    if not (np.all(np.isfinite(s)) and np.all(np.isfinite(r))):
        raise ValueError("scores and relevance must be finite (no NaN/Inf)")
    if r.min() < 0:
        raise ValueError("relevance must be non-negative")
    if isinstance(ks, (int, np.integer)) or not len(ks):
        raise ValueError(f"ks must be a non-empty list of positive integers; got {ks!r}")
    ks = [check_positive_int(k, "ks") for k in ks]
    m, n = s.shape
    gains = np.power(2.0, r) - 1.0 if exponential_gain else r
    order = np.argsort(-s, axis=1, kind="stable")
    s_sorted = np.take_along_axis(s, order, axis=1)
    g_sorted = np.take_along_axis(gains, order, axis=1)
    new = np.ones((m, n), dtype=bool)                      # tie groups: every row start and every change of score
    new[:, 1:] = s_sorted[:, 1:] != s_sorted[:, :-1]
    starts = np.flatnonzero(new.ravel())
    sizes = np.diff(np.append(starts, m * n))
    shared = np.repeat(np.add.reduceat(g_sorted.ravel(), starts) / sizes, sizes).reshape(m, n)
    ideal_sorted = -np.sort(-gains, axis=1)
    out = {}
    for k in ks:
        kk = min(k, n)
        disc = 1.0 / np.log2(np.arange(2, kk + 2))
        dcg = shared[:, :kk] @ disc
        ideal = ideal_sorted[:, :kk] @ disc
        out[k] = np.where(ideal > 0, dcg / np.where(ideal > 0, ideal, 1.0), 0.0)
    return out
