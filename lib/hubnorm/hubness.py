"""Hubness measures on the rectangular (queries x targets) retrieval problem.

The k-occurrence ``N_k(t)`` is the number of queries that have target ``t`` in their top ``k`` (k = 10 in
DBSN; k = 1 gives the NNN "captions matched per image" histograms, Fig. 2 / Table 3). With m queries and n
targets the mean of ``N_k`` is ``k m / n``, so hubs are defined relative to that mean, not as
``N_k >= 2k`` (which is only right when m = n; scikit-hubness gets this wrong for m != n).

Measures (all over every target, zeros included):
- skewness of N_k (scipy ``skew``, bias=True; DBSN Table 5),
- excess kurtosis (Fisher, bias=True; NNN Table 3 "Kurtosis"),
- max N_k (NNN Table 3 "Max"),
- mean absolute deviation from the expected count k m / n (NNN Table 3 "MAE"),
- anti-hub share: targets with N_k = 0,
- hub share: targets with N_k >= hub_factor * k m / n (hub_factor = 2 by default),
- Robin Hood index: the share of occurrences that would have to move for N_k to be uniform,
  ``0.5 * sum |N_k - mean| / sum N_k``.
"""

from __future__ import annotations

from typing import Dict, Optional

import numpy as np
import torch
from scipy import stats

from ._validation import check_positive_float, check_positive_int
from .evaluation import iter_score_blocks
from .normalizers.base import stable_topk


def k_occurrence(scores, k: int = 10, queries=None, *, chunk_size: Optional[int] = None) -> np.ndarray:
    """``N_k`` for every target: how many queries rank it in their top ``k``.

    Exact ties at the ``k``-th place go to the lowest target index (the rank rule of ``positive_ranks``).

    Args:
        scores: a fitted normalizer (then pass ``queries``), a precomputed (m, n) score matrix, or the blocks of a
            task (``task.blocks(normalizer)``: from embeddings or from score matrices alike).
        k: neighbourhood size.
    Returns:
        (n,) int64 array; it sums to ``k * m``.
    """
    counts = None
    for _, s in iter_score_blocks(scores, queries, chunk_size):
        if counts is None:
            n = s.shape[1]
            k = check_positive_int(k, "k", maximum=n, max_name="the number of targets")
            counts = torch.zeros(n, dtype=torch.long, device=s.device)
        idx = stable_topk(s, k)[1].reshape(-1)  # exact ties: lowest index first, as positive_ranks
        counts += torch.bincount(idx, minlength=counts.numel())
    if counts is None:
        raise ValueError("scores have no rows: k_occurrence needs at least one query")
    return counts.cpu().numpy()


def hubness_stats(n_k: np.ndarray, k: int, n_queries: int, *, hub_factor: float = 2.0) -> Dict[str, float]:
    """Summary statistics of a k-occurrence vector (see module docstring)."""
    n_k = np.asarray(n_k)
    if n_k.ndim != 1 or n_k.size == 0:
        raise ValueError(f"n_k must be a non-empty 1-D array; got shape {n_k.shape}")
    if n_k.min() < 0:
        raise ValueError("n_k must be non-negative counts")
    k = check_positive_int(k, "k")
    n_queries = check_positive_int(n_queries, "n_queries")
    hub_factor = check_positive_float(hub_factor, "hub_factor")
    if int(n_k.sum()) != k * n_queries:
        raise ValueError(f"n_k sums to {int(n_k.sum())}, not k * n_queries = {k * n_queries}: pass the k and n_queries used to count it")
    x = n_k.astype(np.float64)
    expected = k * n_queries / n_k.size
    constant = np.all(x == x[0])
    return {
        "k": k,
        "expected": expected,
        "skewness": 0.0 if constant else float(stats.skew(x, bias=True)),
        "kurtosis": 0.0 if constant else float(stats.kurtosis(x, fisher=True, bias=True)),
        "max": float(x.max()),
        "mad": float(np.mean(np.abs(x - expected))),
        "antihub_share": float(np.mean(x == 0)),
        "hub_share": float(np.mean(x >= hub_factor * expected)),
        "robin_hood": float(0.5 * np.abs(x - expected).sum() / x.sum()),
    }


def hubness(scores, k: int = 10, queries=None, *, chunk_size: Optional[int] = None, hub_factor: float = 2.0) -> Dict[str, float]:
    """``hubness_stats(k_occurrence(...))`` in one call."""
    n_k = k_occurrence(scores, k, queries, chunk_size=chunk_size)
    m = int(n_k.sum()) // k
    return hubness_stats(n_k, k, m, hub_factor=hub_factor)
