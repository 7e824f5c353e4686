"""Embedding datasets: the common container every data source returns.

Sources (``load_embeddings(source, ...)``):
- ``"synthetic:coco"``, ``"synthetic:flickr30k"``: the seeded generator in :mod:`hubnorm.synthetic`
  (every output made from it is labelled "synthetic").
- ``"cache:<dataset>:<model>:<pretrained>"``: real embeddings encoded with open_clip and cached by
  :mod:`hubnorm.data` (``python -m hubnorm.data encode ...``).
- ``"local:<path>"``: a folder of precomputed real embeddings (e.g. ``../shared/data/embeddings/...``).

The containers (:class:`~hubnorm.embeddings.EmbeddingDataset`, :class:`~hubnorm.embeddings.EmbeddingSplit`)
live in the leaf module :mod:`hubnorm.embeddings`; the loaders of each source are imported when first used.
"""

from __future__ import annotations

from .embeddings import EmbeddingDataset, EmbeddingSplit

__all__ = ["load_embeddings", "EmbeddingDataset", "EmbeddingSplit"]


def load_embeddings(source: str, **kwargs) -> EmbeddingDataset:
    """Load an :class:`EmbeddingDataset` by source string (see module docstring)."""
    if not isinstance(source, str) or ":" not in source:
        raise ValueError(
            f"source must look like 'synthetic:coco', 'synthetic:flickr30k', 'cache:<dataset>:<model>:<pretrained>' "
            f"or 'local:<folder>'; got {source!r}"
        )
    kind, _, rest = source.partition(":")
    if kind == "synthetic":
        from .synthetic import make_dataset
        return make_dataset(rest, **kwargs)
    if kind == "cache":
        from .data import load_cached_embeddings
        return load_cached_embeddings(rest, **kwargs)
    if kind == "local":
        from .data import load_local_embeddings
        return load_local_embeddings(rest, **kwargs)
    raise ValueError(f"unknown source kind {kind!r}: use 'synthetic', 'cache' or 'local'")
