"""Embedding datasets: the common container every embeddings source returns.

``load_embeddings(source, ...)`` loads any embeddings source by its name: ``synthetic:<preset>``,
``cache:<dataset>:<model>:<pretrained>``, ``local:<folder>``, ``real:<release>`` (the one table of source kinds and
their loaders: :mod:`hubnorm.data.sources`; a ``sims:`` folder holds score matrices, whose tasks
:func:`hubnorm.media.load_media` gives). Set ``HUBNORM_FORBID_SYNTHETIC=1`` to make any request for synthetic data an
error (a run on real data only).

The containers (:class:`~hubnorm.embeddings.EmbeddingDataset`, :class:`~hubnorm.embeddings.EmbeddingSplit`)
live in the leaf module :mod:`hubnorm.embeddings`; the loaders of each source are imported when first used.
"""

from __future__ import annotations

from .data.sources import load_source, source_kind
from .embeddings import EmbeddingDataset, EmbeddingSplit

__all__ = ["load_embeddings", "EmbeddingDataset", "EmbeddingSplit"]


def load_embeddings(source: str, **kwargs) -> EmbeddingDataset:
    """Load an :class:`EmbeddingDataset` by source string (see module docstring); a source of score matrices is
    refused with a ValueError naming the loader of its tasks."""
    if source_kind(source)[0].holds != "embeddings":
        raise ValueError(f"{source!r} holds score matrices, not embeddings: load its retrieval tasks with "
                         "hubnorm.media.load_media(source) (or hubnorm.scores.sims_tasks)")
    return load_source(source, **kwargs)
