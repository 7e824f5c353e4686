"""The pieces of the retrieve-and-rerank study (notebook 06) that are more than a loop: choosing and building the
cross-encoder for a split, the cross-encoder alone over the whole gallery, and NNN on cross-encoder scores.

- :func:`make_cross_encoder`: ``"simulated"`` (needs the latent truth of a :mod:`hubnorm.synthetic` split) or
  ``"blip"`` (needs the image files and the caption texts of real data); a clear error says which is missing;
- :func:`can_simulate`: whether a split carries that latent truth;
- :func:`full_gallery_recall`: R@K of the cross-encoder scoring every target (Geigle et al.'s "CE" row) on a
  strided subset of the queries (it costs ``n_targets`` pairs per query);
- :func:`nnn_on_cross_encoder`: NNN (Eq. 3 of the NNN paper) applied to cross-encoder scores, with the bias
  estimated from reference queries' *top-k* candidates only (:func:`~hubnorm.rerank.nnn_bias_from_pairs`;
  NNN App. F).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np
import pandas as pd

from hubnorm.embeddings import EmbeddingSplit
from hubnorm.evaluation import positive_ranks, recall_at_k
from hubnorm.retrieval import RetrievalTask
from hubnorm.rerank.base import CrossEncoder
from hubnorm.rerank.pipeline import RerankResult, first_stage_topk, nnn_bias_from_pairs
from hubnorm.rerank.simulated import SimulatedCrossEncoder

__all__ = ["CROSS_ENCODERS", "can_simulate", "make_cross_encoder", "full_gallery_recall", "nnn_on_cross_encoder"]

CROSS_ENCODERS = ("simulated", "blip")


def _measured_pair_cost() -> Optional[float]:
    try:
        from .rerank_cost import load_cost_model
        return load_cost_model().pair_s
    except (ValueError, OSError):
        return None


def can_simulate(split: EmbeddingSplit) -> bool:
    """True when ``split`` keeps the latent truth the simulated cross-encoder reads (splits of hubnorm.synthetic)."""
    return "latent" in getattr(split, "extras", {})


def _image_files(split: EmbeddingSplit, image_dir: Union[None, str, os.PathLike]) -> list:
    if split.image_ids is None or split.caption_texts is None:
        raise ValueError("cross_encoder='blip' needs the images and the caption texts of the data (split.image_ids "
                         "and split.caption_texts); this split has "
                         + ("neither" if split.image_ids is None and split.caption_texts is None else
                            "no image ids" if split.image_ids is None else "no caption texts")
                         + ": use real data loaded from a folder with a metadata.csv")
    root = None if image_dir is None else Path(image_dir)
    files = []
    for iid in split.image_ids:
        p = Path(iid) if root is None else root / iid
        if not p.suffix and root is not None:
            p = p.with_suffix(".jpg")
        files.append(p)
    missing = [p for p in files if not p.is_file()]
    if missing:
        raise ValueError(f"cross_encoder='blip' needs the image files: {len(missing)} of {len(files)} are absent "
                         f"(e.g. image id {missing[0].name!r}); pass image_dir=<folder with the images>")
    return [str(p) for p in files]


def make_cross_encoder(kind: str, split: EmbeddingSplit, direction: str, *, query_split: Optional[EmbeddingSplit] = None,
                       distractors: Optional[EmbeddingSplit] = None,
                       seed: int = 0, image_dir: Union[None, str, os.PathLike] = None,
                       cache_dir: Union[None, str, os.PathLike] = None, **kwargs) -> CrossEncoder:
    """The cross-encoder over the items of ``split`` for ``direction`` ("t2i": captions -> images).

    Args:
        kind: ``"simulated"`` (:class:`SimulatedCrossEncoder`, synthetic splits only) or ``"blip"``
            (:class:`~hubnorm.rerank.BlipITMCrossEncoder` with real BLIP ITM weights; needs the image files and
            caption texts).
        query_split: the split the queries come from when it is not ``split`` (e.g. training captions used as
            NNN reference queries against the test gallery); its items never match ``split``'s.
        distractors: a split (of other data) whose items of the target modality follow ``split``'s in the
            gallery (:meth:`hubnorm.RetrievalTask.with_distractors`); they never match a query.
        image_dir: folder of the image files when ``split.image_ids`` are bare ids (".jpg" is appended to ids
            without a suffix).
        kwargs: passed to the cross-encoder's constructor (e.g. ``target_bias`` of the simulated one).
    """
    if kind not in CROSS_ENCODERS:
        raise ValueError(f"cross_encoder must be one of {CROSS_ENCODERS}; got {kind!r}")
    if direction not in ("t2i", "i2t"):
        raise ValueError(f"direction must be 't2i' or 'i2t'; got {direction!r}")
    if kind == "simulated":
        for s in (split, query_split, distractors):
            if s is not None and not can_simulate(s):
                raise ValueError("the simulated cross-encoder reads the latent truth of synthetic data, which this "
                                 "split does not have (real data): use cross_encoder='blip' with the image files and "
                                 "caption texts, or a synthetic source")
        if "cost_per_pair_s" not in kwargs:   # the measured per-pair cost of the real BLIP ITM architecture
            kwargs["cost_per_pair_s"] = _measured_pair_cost()
        if query_split is None:
            return SimulatedCrossEncoder.from_splits(split, split, direction, query_split_name="test",
                                                     target_split_name="test", distractors=distractors, seed=seed,
                                                     cache_dir=cache_dir, **kwargs)
        return SimulatedCrossEncoder.from_splits(query_split, split, direction, distractors=distractors, seed=seed,
                                                 cache_dir=cache_dir, **kwargs)
    images = _image_files(split, image_dir)
    captions = (query_split if query_split is not None and direction == "t2i" else split).caption_texts
    if query_split is not None and direction == "i2t":
        images = _image_files(query_split, image_dir)
        captions = split.caption_texts
    if captions is None:
        raise ValueError("cross_encoder='blip' needs caption texts (split.caption_texts is None)")
    if distractors is not None:   # the gallery's extra items follow its own (the targets' modality)
        if direction == "t2i":
            images = images + _image_files(distractors, image_dir)
        elif distractors.caption_texts is None:
            raise ValueError("cross_encoder='blip' needs the distractors' caption texts (distractors.caption_texts "
                             "is None)")
        else:
            captions = list(captions) + list(distractors.caption_texts)
    from hubnorm.rerank.blip import BlipITMCrossEncoder   # transformers: imported only when used

    return BlipITMCrossEncoder.from_pretrained(images, captions, direction=direction, cache_dir=cache_dir, **kwargs)


def full_gallery_recall(task: RetrievalTask, cross_encoder: CrossEncoder, *, every: int = 5,
                        ks: Sequence[int] = (1, 5, 10)) -> dict:
    """R@K (%) of ``cross_encoder`` scoring *every* target for every ``every``-th query (no first stage).

    Returns ``{"R@1": ..., ..., "queries": number of queries used, "pairs/query": n_targets}``.
    """
    if isinstance(every, bool) or not isinstance(every, (int, np.integer)) or every < 1:
        raise ValueError(f"every must be a positive integer; got {every!r}")
    if (cross_encoder.n_queries, cross_encoder.n_targets) != (task.n_queries, task.n_targets):
        raise ValueError(f"the cross-encoder covers {cross_encoder.n_queries} x {cross_encoder.n_targets} items but "
                         f"the task has {task.n_queries} x {task.n_targets}")
    sub = np.arange(0, task.n_queries, int(every))
    n = task.n_targets
    rows = []
    for q0 in range(0, sub.size, max(1, 2_000_000 // n)):       # blocks of about 2M pairs
        q = sub[q0:q0 + max(1, 2_000_000 // n)]
        rows.append(cross_encoder.score_pairs(np.repeat(q, n), np.tile(np.arange(n), q.size)).reshape(q.size, n))
    ranks = positive_ranks(np.concatenate(rows), task.positives.subset(sub))
    return {**{f"R@{k}": recall_at_k(ranks, k) for k in ks}, "queries": int(sub.size), "pairs/query": float(n)}


def nnn_on_cross_encoder(base: RerankResult, first_stage, bank_queries, bank_ce: CrossEncoder, *,
                         alphas: Sequence[float] = (0.25, 0.5, 1.0), k: int = 16,
                         bank_query_ids: Optional[np.ndarray] = None) -> pd.DataFrame:
    """NNN on cross-encoder scores over the top-k (NNN App. F): rerank ``base``'s candidates by ``c - b(t)``.

    The reference queries ``bank_queries`` go through the same first stage (their top-``base.k``), ``bank_ce``
    scores those pairs (its query ``bank_query_ids[i]`` is bank query ``i``; default ``arange``), and each
    target's bias is ``alpha`` times the mean of the top-``k`` cross-encoder scores it received
    (:func:`nnn_bias_from_pairs`). Cost: ``len(bank_queries) * base.k`` extra pairs, once per gallery.

    Returns one row per variant (``"CE only"`` first, then one per ``alpha``) with ``R@1, R@5, gain R@1`` and the
    number of extra pairs.
    """
    bank_queries = np.asarray(bank_queries)
    ids = np.arange(len(bank_queries)) if bank_query_ids is None else np.asarray(bank_query_ids)
    if ids.size and not np.issubdtype(ids.dtype, np.integer):   # never truncated (0.9 is not query 0)
        raise TypeError(f"bank_query_ids must hold integer indices; got dtype {ids.dtype}")
    if ids.shape != (len(bank_queries),):
        raise ValueError(f"bank_query_ids needs one id per bank query ({len(bank_queries)}); got shape {ids.shape}")
    kc = base.k
    cand, _ = first_stage_topk(first_stage, bank_queries, kc)
    if cand.max() >= bank_ce.n_targets or ids.max() >= bank_ce.n_queries or ids.min() < 0:
        raise ValueError(f"bank_ce covers {bank_ce.n_queries} queries x {bank_ce.n_targets} targets: it must score "
                         "the bank queries (bank_query_ids) against the first stage's gallery")
    c = bank_ce.score_pairs(np.repeat(ids, kc), cand.reshape(-1))
    n_targets = bank_ce.n_targets
    rows = [{"variant": "CE only", "alpha": 0.0, "R@1": recall_at_k(base.ranks, 1), "R@5": recall_at_k(base.ranks, 5)}]
    for a in alphas:
        bias = nnn_bias_from_pairs(cand.reshape(-1), c, n_targets, k=k, alpha=a)
        r = base.with_scores(base.ce_scores - bias[base.candidates], second_stage="nnn-on-ce")
        rows.append({"variant": "NNN on CE scores", "alpha": float(a), "R@1": recall_at_k(r.ranks, 1),
                     "R@5": recall_at_k(r.ranks, 5)})
    out = pd.DataFrame(rows)
    out["gain R@1"] = out["R@1"] - out["R@1"].iloc[0]
    out["extra pairs"] = int(c.size)
    return out
