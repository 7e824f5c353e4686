"""Embedding datasets: the common container every data source returns.

Sources (``load_embeddings(source, ...)``):
- ``"synthetic:coco"``, ``"synthetic:flickr30k"``: the seeded generator in :mod:`hubnorm.synthetic`
  (every output made from it is labelled "synthetic").
- ``"cache:<dataset>:<model>:<pretrained>"``: real embeddings encoded (open_clip: CLIP, SigLIP; transformers:
  BLIP ITC) and cached by :mod:`hubnorm.data` (``python -m hubnorm.data encode ...``); with model
  ``synthetic-rehearsal`` (``cache:coco:synthetic-rehearsal:seed0``), the SYNTHETIC rehearsal cache of
  ``python -m hubnorm.data rehearse`` (``source="synthetic"``).
- ``"local:<path>"``: a folder of precomputed real embeddings (``.npy`` files, see :mod:`hubnorm.data.local`).
- ``"real:<release>"``: a small public release of real embeddings (``coco500-clip-b16``,
  ``flickr8k-100x5-clip-b32``, ``audiocaps-clap``), fetched by pinned commit and checked by sha256
  (:mod:`hubnorm.data.real`; ``python -m hubnorm.data fetch-real``).

Set ``HUBNORM_FORBID_SYNTHETIC=1`` to make any request for synthetic data an error: a run that must use real
data only (e.g. a notebook run on your own folder) then cannot silently mix in generated embeddings.

The containers (:class:`~hubnorm.embeddings.EmbeddingDataset`, :class:`~hubnorm.embeddings.EmbeddingSplit`)
live in the leaf module :mod:`hubnorm.embeddings`; the loaders of each source are imported when first used.
"""

from __future__ import annotations

import os

from .embeddings import EmbeddingDataset, EmbeddingSplit

__all__ = ["load_embeddings", "EmbeddingDataset", "EmbeddingSplit"]


def load_embeddings(source: str, **kwargs) -> EmbeddingDataset:
    """Load an :class:`EmbeddingDataset` by source string (see module docstring)."""
    if not isinstance(source, str) or ":" not in source:
        raise ValueError(
            f"source must look like 'synthetic:coco', 'synthetic:flickr30k', 'cache:<dataset>:<model>:<pretrained>', "
            f"'local:<folder>' or 'real:<release>'; got {source!r}"
        )
    kind, _, rest = source.partition(":")
    if kind == "synthetic" and os.environ.get("HUBNORM_FORBID_SYNTHETIC", "0") == "1":
        raise RuntimeError(f"synthetic data ({source!r}) requested while HUBNORM_FORBID_SYNTHETIC=1: this run must "
                           "use real embeddings only (check the source parameters, e.g. cross_source)")
    if kind == "synthetic":
        from .synthetic import make_dataset
        return make_dataset(rest, **kwargs)
    if kind == "cache":
        from .data import load_cached_embeddings
        return load_cached_embeddings(rest, **kwargs)
    if kind == "local":
        from .data import load_local_embeddings
        return load_local_embeddings(rest, **kwargs)
    if kind == "real":
        from .data import load_real
        return load_real(rest, **kwargs)
    raise ValueError(f"unknown source kind {kind!r}: use 'synthetic', 'cache', 'local' or 'real'")
