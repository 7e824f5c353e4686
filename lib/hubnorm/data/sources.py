"""Every data source by one name, ``<kind>:<rest>``, and the one table of the loaders behind them.

Kinds (:data:`SOURCE_KINDS`; :func:`load_source` runs the kind's loader on ``<rest>``):

- ``synthetic:<preset>``: the seeded generator (:mod:`hubnorm.synthetic`: the image-text presets ``coco``,
  ``flickr30k``, ... and the video / audio presets ``msrvtt``, ``didemo``, ``audiocaps``, ``clotho``; every output
  made from it is labelled "synthetic");
- ``cache:<dataset>:<model>:<pretrained>``: embeddings encoded and cached by this package
  (``python -m hubnorm.data encode ...``; model ``synthetic-rehearsal``: the SYNTHETIC rehearsal cache);
- ``local:<folder>``: a folder of precomputed embeddings (:mod:`.local`);
- ``real:<release>``: a small public release of real embeddings, pinned commit and sha256 (:mod:`.real`);
- ``sims:<folder>``: released score matrices, and the embeddings of some items when its manifest lists them
  (:mod:`.sims`).

The embedding kinds give an :class:`~hubnorm.embeddings.EmbeddingDataset` (``hubnorm.load_embeddings``), a
``sims:`` folder a :class:`~hubnorm.data.sims.SimsFolder`; :func:`hubnorm.media.load_media` gives the retrieval
tasks of both directions of any kind. A new kind of source is one entry of :data:`SOURCE_KINDS` and its loader.

``HUBNORM_FORBID_SYNTHETIC=1`` makes any request for synthetic data an error: a run that must use real data only
(e.g. a notebook run on your own folder) then cannot silently mix in generated embeddings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Tuple

from .._env import forbid_synthetic

__all__ = ["SOURCE_KINDS", "SourceKind", "source_kind", "load_source"]


def _synthetic(rest: str, **kwargs):
    from ..synthetic import make_dataset
    return make_dataset(rest, **kwargs)


def _cache(rest: str, **kwargs):
    from .pipeline import load_cached_embeddings
    return load_cached_embeddings(rest, **kwargs)


def _local(rest: str, **kwargs):
    from .local import load_local_embeddings
    return load_local_embeddings(rest, **kwargs)


def _real(rest: str, **kwargs):
    from .real import load_real
    return load_real(rest, **kwargs)


def _sims(rest: str, **kwargs):
    from .sims import load_sims
    return load_sims(rest, **kwargs)


@dataclass(frozen=True)
class SourceKind:
    """One kind of data source: how a source of it is written (``form``), what it holds (``"embeddings"`` or
    ``"scores"``), whether its loader splits the data itself (``splits``: a folder or release cut into test /
    train by a seeded rule, so it takes ``seed`` and ``val``), and its loader (``load(rest, **options)``)."""

    kind: str
    form: str
    holds: str
    load: Callable
    splits: bool = False


#: The one table of source kinds (module docstring).
SOURCE_KINDS: Dict[str, SourceKind] = {k.kind: k for k in (
    SourceKind("synthetic", "synthetic:<preset>", "embeddings", _synthetic),
    SourceKind("cache", "cache:<dataset>:<model>:<pretrained>", "embeddings", _cache),
    SourceKind("local", "local:<folder>", "embeddings", _local, splits=True),
    SourceKind("real", "real:<release>", "embeddings", _real, splits=True),
    SourceKind("sims", "sims:<folder>", "scores", _sims),
)}


def _forms() -> str:
    forms = [f"'{k.form}'" for k in SOURCE_KINDS.values()]
    return ", ".join(forms[:-1]) + " or " + forms[-1]


def source_kind(source) -> Tuple[SourceKind, str]:
    """The kind of ``source`` and the text after its first colon; a ValueError naming every form for a value that
    is not ``<kind>:<rest>`` or names no kind of :data:`SOURCE_KINDS`."""
    if not isinstance(source, str) or ":" not in source:
        raise ValueError(f"source must look like {_forms()}; got {source!r}")
    kind, _, rest = source.partition(":")
    if kind not in SOURCE_KINDS:
        raise ValueError(f"unknown source kind {kind!r}: use {_forms()}")
    if not rest.strip():   # 'local:' would read the working directory
        raise ValueError(f"source {source!r} names no {kind} source after the colon: use {SOURCE_KINDS[kind].form}")
    return SOURCE_KINDS[kind], rest


def load_source(source: str, **kwargs):
    """What ``source``'s loader gives (an :class:`~hubnorm.embeddings.EmbeddingDataset`, or a
    :class:`~hubnorm.data.sims.SimsFolder` for ``sims:``), ``kwargs`` passed to it unchanged."""
    kind, rest = source_kind(source)
    if kind.kind == "synthetic":
        forbid_synthetic(repr(source))
    return kind.load(rest, **kwargs)
