"""Synthetic video-text and text-audio presets, and retrieval tasks of any direction built on score matrices.

These presets are **synthetic analogs**: the "clustered" generator of :mod:`hubnorm.synthetic` with the sizes of
each dataset and a geometry fitted to real embeddings: the video presets build on the image preset ``flickr30k``
(fitted to real CLIP embeddings; the project holds no real video embeddings), the audio presets on
``audiocaps-clap`` (fitted to the real LAION-CLAP AudioCaps release, ``real:audiocaps-clap``: CLAP's similarity
scale and modality gap are far from CLIP's). Of each preset only the few parameters that the published raw
statistics constrain were refitted: the published model's raw R@1 in both directions (CLIP4Clip, trained on each
video set; zero-shot CLAP) and, for MSR-VTT, the raw skewness of ``N_10`` (DBSN Tables 1, 3 and 5;
``data/calibration_synthetic.md``, section "Video and audio presets"). No normalizer and no claim is part of
the fit. A "video" or "clip" is an image of the generator; its captions are captions. The presets are defined
in :mod:`hubnorm.synthetic` (:data:`MEDIA_PRESETS`) and drawn by its ``make_dataset``, so ``synthetic:msrvtt``
is a source like ``synthetic:flickr30k`` (``hubnorm.load_embeddings``, the notebooks' ``open_data``);
:func:`make_media` and :func:`load_media` read the same embeddings.

=============  =========================================  ===============================  ==========================
preset         sizes (test; bank)                         published baseline fitted        directions
=============  =========================================  ===============================  ==========================
``msrvtt``     1,000 test videos x 1 caption (1k-A);      CLIP4Clip t2v 43.9, v2t 44.7,    ``t2v``, ``v2t``
               9,000 training videos x 20 captions        raw skewness 1.87
``didemo``     1,004 test videos x 1 paragraph;           CLIP4Clip t2v 40.8, v2t 41.4     ``t2v``, ``v2t``
               8,395 training videos x 1
``audiocaps``  975 test clips x 5 captions;               CLAP t2a 40.1                    ``t2a``, ``a2t``
               49,838 training clips x 1
``clotho``     1,045 test clips x 5 captions;             CLAP t2a 15.6                    ``t2a``, ``a2t``
               3,839 development clips x 5
=============  =========================================  ===============================  ==========================

:func:`make_media` draws one preset (every array float32, labelled synthetic); :func:`media_tasks` turns test
items, captions and banks (synthetic, ``local:`` embeddings, or anything else) into :class:`hubnorm.RetrievalTask`
objects of score matrices, both directions, the same objects a ``sims:`` folder gives
(:func:`hubnorm.scores.sims_tasks`), so one
notebook runs on embeddings and on released matrices alike.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from ._env import forbid_synthetic
from ._validation import unit_rows
from .data.sims import LETTERS
from .data.sources import load_source, source_kind
from .matrices import ProductScores
from .retrieval import ITEM_NOUNS, RetrievalTask
from .scores import bank_subsets, positives_from_pairs
from .synthetic import MEDIA_PRESETS, MediaPreset, make_dataset  # noqa: F401 (MediaPreset: re-exported)


@dataclass
class MediaData:
    """Test items and captions (with the caption -> item index), and the banks, of one preset or folder."""

    name: str
    modalities: Tuple[str, str]   # ("text", "video"): the captions' modality, the items'
    items: np.ndarray
    captions: np.ndarray
    caption_to_item: np.ndarray
    bank_items: Optional[np.ndarray] = None
    bank_captions: Optional[np.ndarray] = None
    synthetic: bool = True
    meta: Dict[str, object] = field(default_factory=dict)
    item_ids: Optional[List[str]] = None        # of the test items, when the source names them
    caption_texts: Optional[List[str]] = None   # of the test captions, when the source has them

    @property
    def data_size(self) -> str:
        """The sizes a run label names: the test split and the pool of the banks, "1,000 test videos, 1,000 captions;
        banks from 9,000 training videos, 9,000 captions" (no training part: the test split alone)."""
        noun = ITEM_NOUNS[self.modalities[1]]
        test = f"{len(self.items):,} test {noun}, {len(self.captions):,} captions"
        pool = [f"{len(b):,} training {what}" for b, what in ((self.bank_items, noun),
                                                             (self.bank_captions, "captions")) if b is not None]
        return test + (f"; banks from {', '.join(pool)}" if pool else "")

    @property
    def directions(self) -> Tuple[str, str]:
        a, b = (LETTERS[m] for m in self.modalities)
        return f"{a}2{b}", f"{b}2{a}"


def make_media(preset: str = "msrvtt", *, seed: int = 0, n_train: Optional[int] = None,
               n_test: Optional[int] = None) -> MediaData:
    """The synthetic preset ``preset`` (module docstring) as test items and captions with their banks: the
    embeddings of :func:`hubnorm.synthetic.make_dataset` for this preset (``load_embeddings("synthetic:<preset>")``
    draws the same), ``n_test`` test items x ``test_captions`` captions and ``n_train`` training items (default:
    the dataset's) with ``train_captions`` captions each (0: no banks)."""
    if preset not in MEDIA_PRESETS:
        raise ValueError(f"unknown video/audio preset {preset!r}; valid: {sorted(MEDIA_PRESETS)}")
    forbid_synthetic(f"preset {preset!r}")
    p = MEDIA_PRESETS[preset]
    ds = make_dataset(preset, seed=seed, n_train_images=n_train, n_test_images=n_test)
    test = ds.splits["test"]
    out = MediaData(name=ds.name, modalities=("text", p.modality), items=test.images, captions=test.captions,
                    caption_to_item=test.caption_to_image, synthetic=True,
                    meta={"preset": preset, "seed": int(seed), "dataset": p.dataset, "model": p.model,
                          "base": p.base, "overrides": dict(p.overrides)})
    if "train" in ds.splits:
        out.bank_items, out.bank_captions = ds.splits["train"].images, ds.splits["train"].captions
    return out


def media_tasks(data: MediaData, *, bank_queries: Optional[int] = None, target_bank: Optional[int] = None,
                seed: int = 0, block_bytes: Optional[int] = None) -> Dict[str, RetrievalTask]:
    """Both directions of ``data`` as :class:`~hubnorm.RetrievalTask` objects of score matrices.

    The score matrices are :class:`~hubnorm.matrices.ProductScores` (float64 dot products computed block by block
    when a reduction reads them, never a whole bank x gallery matrix); the second direction's test matrix holds the
    first's factors swapped, and it reads the bank x bank matrix transposed (``.T``; nothing is copied). ``bank_queries`` / ``target_bank``: at
    most this many query-bank / target-bank items per direction, a seeded subset (the rule of
    :func:`hubnorm.scores.bank_subsets`, the same as for a ``sims:`` folder); ``target_bank=0``: no target banks
    (DBSN and DualIS then name the missing matrix)."""
    fwd, bwd = data.directions
    c2i = np.asarray(data.caption_to_item, dtype=np.int64)
    meta = {"dataset": data.name, "modalities": data.modalities, "source": "synthetic" if data.synthetic else "real",
            **data.meta}
    test = ProductScores(data.captions, data.items, f"the test score matrix ({data.modalities[0]} x {data.modalities[1]})")
    caps, items = data.bank_captions, data.bank_items
    use_tb = target_bank is None or int(target_bank) > 0
    sub = bank_subsets(None if caps is None else len(caps), None if items is None else len(items), bank_queries,
                       target_bank if use_tb else None, seed)
    (caps_q, items_t), (caps_t, items_q) = sub["forward"], sub["backward"]

    def pick(x, idx):
        return x if idx is None else x[idx]

    bank_bank = None
    if caps is not None and items is not None and use_tb:
        bank_bank = ProductScores(caps, items, "the bank x bank score matrix")
    back = ProductScores(test.b, test.a, f"the test score matrix ({data.modalities[1]} x {data.modalities[0]})")
    mats = {fwd: {("queries", "targets"): test}, bwd: {("queries", "targets"): back}}
    if caps is not None:
        mats[fwd][("query_bank", "targets")] = ProductScores(pick(caps, caps_q), test.b, "the query bank x targets score matrix")
        if use_tb:
            mats[bwd][("target_bank", "targets")] = ProductScores(pick(caps, caps_t), test.a, "the target bank x targets score matrix")
    if items is not None:
        mats[bwd][("query_bank", "targets")] = ProductScores(pick(items, items_q), test.a, "the query bank x targets score matrix")
        if use_tb:
            mats[fwd][("target_bank", "targets")] = ProductScores(pick(items, items_t), test.b, "the target bank x targets score matrix")
    if bank_bank is not None:
        mats[fwd][("query_bank", "target_bank")] = bank_bank.take(caps_q, items_t)
        mats[bwd][("query_bank", "target_bank")] = bank_bank.take(caps_t, items_q).T
    out = {}
    for d in (fwd, bwd):
        if d == fwd:
            pos = positives_from_pairs(np.arange(len(c2i)), c2i, len(c2i), len(data.items))
        else:
            pos = positives_from_pairs(c2i, np.arange(len(c2i)), len(data.items), len(c2i))
        out[d] = RetrievalTask(positives=pos, direction=d, meta=dict(meta, direction=d), scores=mats[d],
                               block_bytes=block_bytes, check=False)   # products of embeddings: right by construction
    return out


#: dataset keys of the published rows, from words in a name ("MSR-VTT 1k" -> "msr-vtt")
_DATASET_WORDS = (("msr", "msr-vtt"), ("didemo", "didemo"), ("audiocaps", "audiocaps"), ("clotho", "clotho"),
                  ("flickr", "flickr30k"), ("coco", "coco"))


def is_preset(source: str) -> bool:
    """Whether ``source`` names a synthetic video/audio preset (``"synthetic:msrvtt"``, ...): the sources that take
    ``n_train``."""
    return isinstance(source, str) and source.startswith("synthetic:") and source[len("synthetic:"):] in MEDIA_PRESETS


def published_dataset(name: Optional[str]) -> Optional[str]:
    """The ``dataset`` key of the published rows a dataset name refers to (None: not a dataset of the papers)."""
    text = (name or "").lower().replace("_", "-")
    return next((key for word, key in _DATASET_WORDS if word in text), None)


@dataclass
class MediaSource:
    """What :func:`load_media` read: the tasks of both directions and how to label them."""

    tasks: Dict[str, RetrievalTask]
    label: str
    synthetic: bool
    dataset: Optional[str]      # the published rows' dataset key (None: none)
    model: Optional[str]        # the published rows' model (None: none)
    modalities: Tuple[str, str]
    data: Optional[MediaData] = None   # the embeddings the tasks were built from (None: a sims: folder's scores)

    @property
    def directions(self) -> Tuple[str, str]:
        return tuple(self.tasks)


def load_media(source: str, *, seed: int = 0, n_train: Optional[int] = None, bank_queries: Optional[int] = None,
               target_bank: Optional[int] = None, item_modality: str = "auto", dataset: Optional[str] = None,
               model: Optional[str] = None, source_kwargs: Optional[dict] = None,
               block_bytes: Optional[int] = None) -> MediaSource:
    """Both retrieval directions of ``source`` as score tasks, with their label.

    ``source``: ``"synthetic:<preset>"`` (a preset of :data:`MEDIA_PRESETS`), ``"sims:<folder>"`` (released score
    matrices, :mod:`hubnorm.data.sims`), or any embeddings source of :func:`hubnorm.load_embeddings`
    (``local:<folder>``, ``cache:...``, ``real:<release>``): its test split's images are the items
    (``item_modality``: "auto" = image, or the modality a ``real:`` release declares, e.g. audio for
    ``real:audiocaps-clap``; say "video" or "audio" for video or audio embeddings) and its training split the
    banks. ``n_train``: training items of a synthetic preset (any other source has its own banks: a ValueError
    names ``n_train``); ``bank_queries`` / ``target_bank``: at most this many bank queries / target-bank items per
    direction, a seeded subset, for every kind of source (:func:`hubnorm.scores.bank_subsets`). ``dataset`` /
    ``model``: the published rows to compare with (None: from the source; a ``real:`` release declares both, a
    ``local:`` folder its data set in ``model_info.json`` as ``"dataset"``, never read from the folder's name)."""
    kind, rest = source_kind(source)   # one message for every malformed source (hubnorm.data.sources)
    preset = is_preset(source)
    if n_train is not None and not preset:
        raise ValueError(f"n_train sets the training items of a synthetic video/audio preset; {source!r} has its own "
                         "banks: pass n_train=None (bank_queries / target_bank subsample them)")
    if preset:
        data = make_media(rest, seed=seed, n_train=n_train)
        p = MEDIA_PRESETS[rest]
        tasks = media_tasks(data, bank_queries=bank_queries, target_bank=target_bank, seed=seed,
                            block_bytes=block_bytes)
        return MediaSource(tasks, f"synthetic analog (synthetic-{rest}, seed {seed}, {data.data_size})", True,
                           dataset or p.dataset, model or p.model, data.modalities, data)
    if kind.holds == "scores":
        from .scores import sims_tasks

        if source_kwargs:
            raise ValueError(f"source_kwargs apply to embeddings sources, not to a sims: folder; got {source_kwargs!r}")
        sims = load_source(source)
        if item_modality not in ("auto", sims.modalities[1]):
            raise ValueError(f"item_modality={item_modality!r} contradicts {sims.folder}, whose manifest says its columns "
                             f"are {sims.modalities[1]}: pass item_modality='auto' (or fix the manifest)")
        tasks = sims_tasks(sims, bank_queries=bank_queries, target_bank=target_bank, seed=seed,
                           block_bytes=block_bytes)
        synthetic = sims.synthetic
        name = sims.name
        label = f"synthetic analog (sims folder {name})" if synthetic else f"real data ({name}, released score matrices)"
        declared = sims.manifest.get("dataset")   # declared in the manifest; the folder's name declares nothing
        return MediaSource(tasks, label, synthetic, dataset or (published_dataset(declared) if declared else None),
                           model or sims.manifest.get("model"), sims.modalities)
    from .datasets import load_embeddings

    kwargs = dict(source_kwargs or {})
    if kind.kind == "synthetic":
        kwargs.setdefault("seed", seed)
    ds = load_embeddings(source, **kwargs)
    test = ds.split("test")
    train = ds.splits.get("train")
    declared = ds.meta.get("modality") if kind.kind == "real" else None   # what a real: release says its items are
    if declared and item_modality not in ("auto", declared):
        raise ValueError(f"item_modality={item_modality!r} contradicts {source}, whose items are {declared}: pass "
                         "item_modality='auto'")
    modality = (declared or "image") if item_modality == "auto" else item_modality
    if modality not in LETTERS or modality == "text":
        raise ValueError(f"item_modality must be 'auto', 'image', 'video' or 'audio'; got {item_modality!r}")
    unit = lambda x, what: None if x is None else unit_rows(x, what, np.float64)   # noqa: E731 - the notebooks'
    data = MediaData(name=ds.name, modalities=("text", modality),                  # one rule (prepare_dataset)
                     items=unit(test.images, f"{source} test {modality} embeddings"),
                     captions=unit(test.captions, f"{source} test caption embeddings"),
                     caption_to_item=test.caption_to_image,
                     bank_items=None if train is None else unit(train.images, f"{source} training {modality} embeddings"),
                     bank_captions=None if train is None else unit(train.captions,
                                                                   f"{source} training caption embeddings"),
                     synthetic=ds.source == "synthetic", meta={"dataset": ds.name}, item_ids=test.image_ids,
                     caption_texts=test.caption_texts)
    tasks = media_tasks(data, bank_queries=bank_queries, target_bank=target_bank, seed=seed, block_bytes=block_bytes)
    if ds.source == "synthetic":
        label = f"synthetic analog ({ds.name}, seed {ds.meta.get('seed', '?')}, {data.data_size})"
    else:
        label = f"real data ({ds.name}" + (f", {ds.meta['model']}" if ds.meta.get("model") else "") + f", {data.data_size})"
    if kind.kind == "real":   # the release declares its data set and encoder; never guessed from a name
        return MediaSource(tasks, label, False, dataset or ds.meta.get("dataset"), model or ds.meta.get("model"),
                           data.modalities, data)
    if kind.kind == "local":   # a folder declares its data set in model_info.json ("dataset"), never its name
        declared = ds.meta.get("dataset")
        return MediaSource(tasks, label, ds.source == "synthetic",
                           dataset or (published_dataset(str(declared)) if declared else None),
                           model, data.modalities, data)
    return MediaSource(tasks, label, ds.source == "synthetic", dataset or published_dataset(ds.name), model,
                       data.modalities, data)


__all__ = ["load_media", "MediaSource", "published_dataset", "MediaPreset", "MEDIA_PRESETS", "MediaData", "make_media", "media_tasks", "is_preset", "LETTERS"]
