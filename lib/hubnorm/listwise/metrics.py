"""NDCG@K next to R@K (Li et al. 2023, Eq. 4-6): ``DCG_K = sum_{i<=K} (2^rel_i - 1) / log2(1 + i)``, normalised by
the ideal DCG, computed by :func:`hubnorm.evaluation.ndcg_at_ks` (ties in the scores share their average gain) in
float64; ``ndcg_at_ks`` is re-exported here.

:func:`listwise_metrics` scores one matrix, :func:`evaluate_listwise` every (direction, normalizer) as a tidy
frame, :func:`metric_table` pivots that frame into the R@K | NDCG@K table of the notebooks.
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional, Sequence

import numpy as np
import pandas as pd
import torch

from ..evaluation import ndcg_at_ks, positive_ranks, recall_at_k
from ..retrieval import Positives, RetrievalTask

__all__ = ["listwise_metrics", "ndcg_at_ks", "top_candidates", "evaluate_listwise", "metric_table"]


def listwise_metrics(scores, positives: Positives, relevance, *, ndcg_ks: Sequence[int] = (5, 10, 20),
                     recall_ks: Sequence[int] = (1, 5, 10)) -> Dict[str, float]:
    """R@K (binary ground truth, %) and mean NDCG@K (graded ``relevance``, %) of one (m, n) score matrix."""
    scores = scores.detach().cpu().numpy() if isinstance(scores, torch.Tensor) else np.asarray(scores)
    relevance = np.asarray(relevance)
    if scores.shape != relevance.shape:
        raise ValueError(f"scores {scores.shape} and relevance {relevance.shape} must have the same shape")
    ranks = positive_ranks(scores, positives)
    out = {f"R@{k}": recall_at_k(ranks, k) for k in recall_ks}
    if len(ndcg_ks):
        s_top, r_top = top_candidates(scores, relevance, max(ndcg_ks))
        for k, v in ndcg_at_ks(s_top, r_top, ndcg_ks).items():
            out[f"NDCG@{k}"] = float(100.0 * v.mean())
    return out


def top_candidates(scores, relevance, k: int):
    """Shrink each row to the candidates that can matter for NDCG@K' (K' <= ``k``), for speed.

    Keeps every candidate scoring at least the row's k-th largest score (whole tie groups at the cut) and the
    ``k`` most relevant candidates (for the ideal DCG); pads rows with a score below the row minimum and relevance 0.
    :func:`hubnorm.ndcg_at_k` on the result equals it on the full matrix for every K' <= ``k``.
    """
    scores = np.asarray(scores, dtype=np.float64)
    relevance = np.asarray(relevance, dtype=np.float64)
    m, n = scores.shape
    if n <= 2 * k:
        return scores, relevance
    rows = np.arange(m)[:, None]
    kth = np.partition(scores, n - k, axis=1)[:, n - k]
    keep = scores >= kth[:, None]
    keep[rows, np.argpartition(-relevance, k - 1, axis=1)[:, :k]] = True
    counts = keep.sum(axis=1)
    width = int(counts.max())
    cols = np.argsort(~keep, axis=1, kind="stable")[:, :width]
    valid = np.arange(width)[None, :] < counts[:, None]
    fill = scores.min(axis=1, keepdims=True) - 1.0
    s_top = np.where(valid, np.take_along_axis(scores, cols, axis=1), fill)
    r_top = np.where(valid, np.take_along_axis(relevance, cols, axis=1), 0.0)
    return s_top, r_top


def evaluate_listwise(
    tasks: Mapping[str, RetrievalTask],
    relevance: Mapping[str, np.ndarray],
    methods: Mapping[str, object],
    *,
    ndcg_ks: Sequence[int] = (5, 10, 20),
    recall_ks: Sequence[int] = (1, 5, 10),
    query_aware: bool = False,
    labels: Optional[Mapping[str, object]] = None,
) -> pd.DataFrame:
    """NDCG@K and R@K of every method in every direction, as a tidy DataFrame.

    Args:
        tasks: ``{"t2i": task, "i2t": task}`` (e.g. from :meth:`EmbeddingDataset.tasks`).
        relevance: ``{"t2i": (n_captions, n_images), "i2t": (n_images, n_captions)}`` graded relevance.
        methods: display name -> an unfitted normalizer (cloned per direction), or a dict direction -> normalizer
            (e.g. NNN with k 128 for t2i and 16 for i2t, as NNN Tables A1-A2 chose).
        query_aware: fit with the test queries as the query bank (transductive; labelled in the output).
        labels: extra constant columns (e.g. ``{"source": "synthetic", "relevance": "latent"}``).
    Returns:
        columns ``direction, method, metric, K, value`` (+ ``labels``); metric is "R" or "NDCG", value in %.
    """
    rows = []
    for direction, task in tasks.items():
        if direction not in relevance:
            raise ValueError(f"no relevance matrix for direction {direction!r}")
        rel = np.asarray(relevance[direction])
        if rel.shape != (task.n_queries, task.n_targets):
            raise ValueError(f"{direction} relevance has shape {rel.shape}; the task needs "
                             f"({task.n_queries}, {task.n_targets}) (queries x targets)")
        for name, spec in methods.items():
            norm = spec.get(direction) if isinstance(spec, Mapping) else spec
            if norm is None:
                continue
            norm = norm.clone() if hasattr(norm, "clone") else norm
            fitted = task.fit(norm, query_aware=query_aware)
            scores = fitted.score(task.queries)
            res = listwise_metrics(scores, task.positives, rel, ndcg_ks=ndcg_ks, recall_ks=recall_ks)
            for key, value in res.items():
                metric, k = key.split("@")
                rows.append({"direction": direction, "method": name, "metric": metric, "K": int(k), "value": value})
    df = pd.DataFrame(rows)
    df["query_aware"] = bool(query_aware)
    for key, value in (labels or {}).items():
        df[key] = value
    return df


def metric_table(df: pd.DataFrame, recall_ks: Optional[Sequence[int]] = None,
                 ndcg_ks: Optional[Sequence[int]] = None) -> pd.DataFrame:
    """The tidy frame of :func:`evaluate_listwise` as one row per (direction, method) and the columns
    ``R@K ... NDCG@K ...`` (values in %), rows in the order they first appear.

    ``recall_ks`` / ``ndcg_ks`` pick and order the columns (default: every K present, ascending)."""
    need = {"direction", "method", "metric", "K", "value"}
    if not need <= set(df.columns):
        raise ValueError(f"df must be the frame of evaluate_listwise (columns {sorted(need)}); got {list(df.columns)}")
    if recall_ks is None:
        recall_ks = sorted(df.loc[df["metric"] == "R", "K"].unique())
    if ndcg_ks is None:
        ndcg_ks = sorted(df.loc[df["metric"] == "NDCG", "K"].unique())
    cols = [f"R@{k}" for k in recall_ks] + [f"NDCG@{k}" for k in ndcg_ks]
    out = df.assign(col=df["metric"] + "@" + df["K"].astype(str))
    out = out.pivot_table(index=["direction", "method"], columns="col", values="value", sort=False)
    missing = [c for c in cols if c not in out.columns]
    if missing:
        raise ValueError(f"df has no values for {missing}")
    out = out[cols].reset_index()
    out.columns.name = None
    return out
