"""The evaluation protocol of the papers, as the notebooks run it.

    load (``prepare_dataset``) -> reference bank (``reference_split``) -> tasks (``make_tasks``)
    -> choose parameters on val (``select_parameters``, NNN App. B, through :func:`hubnorm.grid_search`)
    -> fit and evaluate once on test (the notebooks write ``task.fit`` / ``hubnorm.evaluate`` out; ``run_methods``
    and ``select_and_evaluate`` do both steps in one call)

Every function returns a tidy :class:`pandas.DataFrame` (one row per direction x method) with the columns
``R@1, R@5, R@10, MdR, MnR`` (percent / 1-based ranks), so tables and seaborn plots are one call away.

Own data: :func:`prepare_dataset` takes the same ``source`` string for every kind of data. Sizes meant for the
synthetic generator (``synthetic_sizes``) are used only for ``synthetic:`` sources, so a real loader never sees
them; :func:`cross_dataset_source` never pairs real embeddings with a synthetic reference bank.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd

from hubnorm._validation import check_fraction, unit_rows
from hubnorm.data.registry import cross_dataset
from hubnorm.data.sources import source_kind
from hubnorm.datasets import load_embeddings
from hubnorm.embeddings import EmbeddingDataset, EmbeddingSplit, hold_out_val
from hubnorm.evaluation import evaluate
from hubnorm.hubness import hubness_stats, k_occurrence
from hubnorm.normalizers.base import EXECUTION_OPTIONS
from hubnorm.progress import progress
from hubnorm.provenance import NO_BANK
from hubnorm.registry import DISPLAY_NAMES, make_normalizer
from hubnorm.retrieval import (DIRECTIONS, ITEM_NOUNS, RetrievalTask, bank_share, build_tasks, query_bank_share,
                               share_rows)
# clamp_grid is hubnorm.clamp_grid: used below, and by the notebooks as pr.clamp_grid
from hubnorm.selection import PAPER_GRIDS, clamp_grid, grid_search, k_limit
from hubnorm.synthetic import PRESETS

__all__ = [
    "METRICS", "prepare_dataset", "describe", "is_synthetic", "run_label", "dataset_key", "published_model",
    "published_dataset", "published_names", "published_label", "paper_ids", "UNKNOWN_DATASET",
    "cross_dataset_source",
    "reference_split", "make_tasks", "clamp_params", "clamp_grid", "paper_or_fast_grid", "fmt_params",
    "run_methods", "select_parameters", "select_and_evaluate", "note", "method_items", "params_for",
    "REAL_DEFAULTS", "real_sources", "load_real_sets", "nearest_published", "is_sims", "SimsRun", "load_sims_run",
    "RunData", "open_data",
]

METRICS = ("R@1", "R@5", "R@10", "MdR", "MnR")
MethodSpec = Union[Sequence[str], Mapping[str, str]]

#: Reference banks with fewer queries than this give noisy hubness estimates: the notebooks say so.
SMALL_BANK = 200
#: Test or validation splits with fewer images than this get a NOTE (recall moves in steps of 1/n).
SMALL_SPLIT = 100


def note(text: str) -> None:
    """A visible note in the notebook output (stdout, not a warning box): tiny banks, clamped grids, skipped rows."""
    print(f"NOTE: {text}")


# ---------------------------------------------------------------------------------------------- data
def prepare_dataset(source: str, *, seed: int = 0, dtype: Optional[str] = "float64",
                    synthetic_sizes: Optional[Mapping[str, int]] = None,
                    source_kwargs: Optional[Mapping[str, object]] = None, ensure_val: bool = True,
                    note_small: bool = True) -> EmbeddingDataset:
    """``hubnorm.load_embeddings(source)``, ready for the protocol.

    - ``synthetic_sizes`` (e.g. ``{"n_train_images": 5000}``) and ``seed`` reach the synthetic generator only;
      ``source_kwargs`` reach any loader (e.g. ``{"test_fraction": 0.34}`` for ``local:``);
    - ``ensure_val``: a dataset without a ``"val"`` split (e.g. a ``local:`` folder) gets one held out of
      ``"train"`` by the one rule of :func:`hubnorm.embeddings.validation_size` (the size of the test split when
      the training split has at least twice as many images, NNN App. B; else a third of the training split);
      ``ensure_val=False`` keeps the whole training split (a ``local:`` folder is then split into test/train only);
    - small splits (fewer than :data:`SMALL_SPLIT` images in test or val) print a NOTE with the size
      (``note_small=False`` for a data set used only for its training bank, e.g. a cross-dataset bank);
    - ``dtype`` (float64 by default) casts and re-normalises every embedding: in float64 a ranking flips only
      when two scores agree to about 1e-16, so the rounded numbers the notebooks print do not change with a
      CPU's or thread count's summation order (far less likely to flip than in float32, not invariant).
    """
    if not isinstance(source, str):
        raise TypeError(f"source must be a string such as 'synthetic:flickr30k' or 'local:/path'; got {source!r}")
    kwargs = dict(source_kwargs or {})
    kind, _ = source_kind(source)
    if kind.splits:
        kwargs.setdefault("val", bool(ensure_val))
    if kind.kind == "synthetic":
        both = sorted(set(kwargs) & set(synthetic_sizes or {}))
        if both:
            raise ValueError(f"source_kwargs and synthetic_sizes both set {both} for {source}: give the sizes of a "
                             "synthetic source in synthetic_sizes only")
        kwargs.update(synthetic_sizes or {})
        kwargs.setdefault("seed", seed)
    ds = load_embeddings(source, **kwargs)
    ds.meta.setdefault("source_string", source)
    if ensure_val:
        hold_out_val(ds, seed)
    for name in ("test", "val") if note_small else ():
        if name in ds.splits and ds.splits[name].n_images < SMALL_SPLIT:
            n = ds.splits[name].n_images
            note(f"the {name} split has only {n} images (fewer than {SMALL_SPLIT}): recalls over so small a gallery "
                 "are coarse and noisy, so differences of a few points may be sampling noise" + (
                     "; hyperparameters chosen on so small a split often tie or saturate" if name == "val" else "")
                 + (f" ({ds.meta['val_split']})" if name == "val" and ds.meta.get("val_split") else ""))
    if dtype is not None:
        np_dtype = np.dtype(dtype)
        for sname, split in ds.splits.items():   # a zero or non-finite row is an error naming it, never a NaN
            for attr in ("images", "captions"):
                setattr(split, attr, unit_rows(getattr(split, attr), f"{source} {sname} {attr}", np_dtype))
    return ds


def is_sims(source) -> bool:
    """True when ``source`` names a sims folder (``"sims:<folder>"``)."""
    try:
        return source_kind(source)[0].holds == "scores"
    except ValueError:   # not a source name at all: the loaders name the mistake
        return False


class SimsRun:
    """The two retrieval tasks of a sims folder, keyed by the folder's direction names, and how to label them.

    ``tasks``: ``{direction: RetrievalTask}`` (of score matrices) in the order of the notebook's ``directions``
    (``t2i`` is the text-query
    direction, ``i2t`` the other); ``label``: the run label; ``synthetic``: what the manifest says."""

    def __init__(self, media_source, directions: Sequence[str] = ("t2i", "i2t")):
        self.label = media_source.label
        self.synthetic = bool(media_source.synthetic)
        self.modalities = tuple(media_source.modalities)
        tasks = dict(media_source.tasks)
        names = list(tasks)
        text_query = next((d for d in names if d.startswith("t2")), names[0])
        other = next(d for d in names if d != text_query)
        alias = {"t2i": text_query, "i2t": other}
        wanted = [alias.get(d, d) for d in directions]
        unknown = [d for d in wanted if d not in tasks]
        if unknown:
            raise ValueError(f"directions {list(directions)}: this sims folder holds {names}; pass 't2i' (text "
                             f"queries, {text_query}) and/or 'i2t' ({other})")
        self.alias = {k: v for k, v in alias.items() if k in directions}
        self.tasks: Dict[str, RetrievalTask] = {d: tasks[d] for d in dict.fromkeys(wanted)}

    @property
    def directions(self) -> List[str]:
        return list(self.tasks)

    def has_bank(self, direction: str) -> bool:
        """Whether the folder gives the bank x gallery scores of ``direction``, stored or as the product of the
        embeddings it lists (a bank x bank matrix alone is not a query bank: the test queries then serve)."""
        return self.tasks[direction].can_score("query_bank", "targets")


def load_sims_run(source: str, directions: Sequence[str] = ("t2i", "i2t")) -> SimsRun:
    """Read ``"sims:<folder>"`` (checked, memory-mapped) as a :class:`SimsRun`."""
    from hubnorm.media import load_media

    if not is_sims(source):
        raise ValueError(f"source must be 'sims:<folder>'; got {source!r}")
    return SimsRun(load_media(source), directions)


@dataclass
class RunData:
    """What a notebook reads of its ``source``, for any kind of source: ``all_tasks`` (``{"t2i": task, "i2t": task}``:
    the test split against the reference bank, of embeddings or of score matrices), ``tasks`` (those of the
    notebook's ``directions``) and ``label``; for a source of embeddings also the dataset, its test split and the
    reference bank (``ds``, ``test``, ``bank``: a seeded ``bank_fraction`` of the training images with their
    captions); for released score matrices (``sims:``) these are None and the bank is the folder's own bank rows."""

    source: str
    label: str
    all_tasks: Dict[str, RetrievalTask]
    directions: Tuple[str, ...]
    ds: Optional[EmbeddingDataset] = None
    test: Optional[EmbeddingSplit] = None
    bank: Optional[EmbeddingSplit] = None
    bank_fraction: float = 1.0
    test_as_bank: Tuple[str, ...] = ()   # directions of a sims: folder without bank rows (the test queries serve)
    query_bank_fraction: float = 1.0     # the share of each query bank kept (with_query_bank_fraction)
    synthetic_scores: bool = False       # a sims: folder whose manifest says "synthetic": true

    @property
    def synthetic(self) -> bool:
        """Whether this run's data are synthetic: the generator's embeddings, or a sims: folder declared so."""
        return is_synthetic(self.ds) if self.ds is not None else self.synthetic_scores

    @property
    def tasks(self) -> Dict[str, RetrievalTask]:
        return {d: self.all_tasks[d] for d in self.directions}

    @property
    def has_embeddings(self) -> bool:
        return self.ds is not None

    @property
    def bank_words(self) -> str:
        """The reference bank in words: "1,000 images / 5,000 captions" or the folder's bank rows."""
        if self.bank is not None:
            words = f"{self.bank.n_images} images / {self.bank.n_captions} captions"
            if self.query_bank_fraction == 1:
                return words
            return words + f" ({self.query_bank_fraction:.0%} as queries: " + ", ".join(
                f"{d} {t.size('query_bank')} {'captions' if d == 't2i' else 'images'}"
                for d, t in self.all_tasks.items()) + ")"
        rows = {d: "none, the test queries serve" if d in self.test_as_bank else t.size("query_bank")
                for d, t in self.all_tasks.items()}
        return self._share() + "the folder's bank rows (" + ", ".join(f"{d}: {n}" for d, n in rows.items()) + ")"

    def _share(self) -> str:
        """"20% of " when the bank is a share of the source's, else "": of its query banks, or of a folder's banks
        (a share of training images is named as "% of train" instead; a share is never taken of a share)."""
        fraction = self.query_bank_fraction * (self.bank_fraction if self.ds is None else 1.0)
        return "" if fraction == 1 else f"{fraction:.0%} of "

    def bank_name(self, direction: str = "t2i") -> str:
        """How tables name the bank of ``direction``'s query-agnostic fits: "reference bank (20% of train)", the
        folder's bank rows, or, for a folder without them, the test queries (query-aware)."""
        share = self._share()
        if self.bank is not None:
            return (f"reference bank ({self.bank_fraction:.0%} of train"
                    + (f"; {share}its {'captions' if direction == 't2i' else 'images'} as queries)" if share else ")"))
        if direction in self.test_as_bank:
            return "test queries (query-aware: the folder has no bank rows)"
        return f"{share}the folder's bank rows"

    def describe(self) -> pd.DataFrame:
        """Images and captions per split (:func:`describe`), or the items of each direction's score matrices."""
        if self.ds is not None:
            return describe(self.ds)
        return pd.DataFrame([{"direction": d, **{n: t.size(n) for n in ("queries", "targets", "query_bank")}}
                             for d, t in self.all_tasks.items()])

    def split_tasks(self, split: str) -> Optional[Dict[str, RetrievalTask]]:
        """The tasks of another split of the embeddings (``"val"``: the held-out split) against the same reference
        bank, for the notebook's directions; None for score matrices (a sims: folder holds its test split only)."""
        if self.ds is None:
            return None
        return make_tasks(self.ds.split(split), self.bank, directions=self.directions)

    def _uncut(self, what: str) -> None:
        """A share of query banks, or of a folder's banks, is taken of the bank open_data gave, once (a share of a
        share would be named wrongly). A share of the training images is always drawn from the whole training split
        again."""
        if self.query_bank_fraction != 1 or (self.ds is None and self.bank_fraction != 1):
            raise ValueError(f"{what}: this RunData's bank is already a share of the source's; call it on the "
                             "RunData that open_data returned")

    def with_bank_fraction(self, fraction: float, seed: int = 0) -> "RunData":
        """The same test tasks with a seeded ``fraction`` of the bank: for embeddings, that share of the training
        images with their captions, both banks at once (:func:`reference_split`, as
        ``open_data(bank_fraction=fraction)`` without its small-bank NOTE); for score matrices, that share of the
        folder's bank items of each modality, both banks at once: the same bank texts are the text-query
        direction's query bank and the other direction's target bank (:func:`bank_share`). A direction whose test
        queries serve as the bank keeps them all. Of embeddings it is drawn from the whole training split each time;
        of score matrices it is taken once, of the bank ``open_data`` gave."""
        fraction = check_fraction(fraction, "fraction")
        self._uncut("with_bank_fraction")
        if self.ds is None:
            if fraction == 1:
                return self
            return replace(self, all_tasks=bank_share(self.all_tasks, fraction, seed, keep=self.test_as_bank),
                           bank_fraction=float(fraction))
        bank = reference_split(self.ds, "train", fraction, seed=seed, note_small=False)
        return replace(self, all_tasks=make_tasks(self.test, bank), bank=bank, bank_fraction=float(fraction))

    def with_query_bank_fraction(self, fraction: float, seed: int = 0) -> "RunData":
        """The same test tasks with a seeded ``fraction`` of each direction's *query* bank (at least one row; the
        target banks stay whole): bank captions for t2i, bank images for i2t, or a sims: folder's bank rows
        (:meth:`RetrievalTask.bank_subset`). The draws are those of :meth:`EmbeddingDataset.tasks`
        (``query_bank_fraction``): one seeded generator, t2i first. A direction whose test queries serve as the bank
        keeps them all."""
        fraction = check_fraction(fraction, "fraction")
        self._uncut("with_query_bank_fraction")
        if fraction == 1:
            return self
        tasks = query_bank_share(self.all_tasks, fraction, seed, keep=self.test_as_bank)
        return replace(self, all_tasks=tasks, query_bank_fraction=fraction)

    def needs_embeddings(self, what: str, *inputs: str) -> bool:
        """True for a run on embeddings, or on score matrices whose tasks also hold the embeddings of ``inputs``
        (``"query_bank"``, ``"targets"``, ...: a sims: folder whose manifest lists them); otherwise prints one NOTE
        naming ``what`` needs embeddings and returns False (the notebook's cell then shows nothing of it)."""
        held = bool(inputs) and all(getattr(t, n) is not None for t in self.tasks.values() for n in inputs)
        if self.ds is None and not held:
            some = any(getattr(t, n) is not None for t in self.tasks.values()
                       for n in ("queries", "targets", "query_bank", "target_bank"))
            note(f"{what} needs embeddings; {self.source} holds "
                 + ("a folder's score matrices and some embeddings, not a data set of them" if some else
                    "score matrices only")
                 + (f" (no embeddings of the {' and '.join(i.replace('_', ' ') for i in inputs)})" if inputs else "")
                 + ", so it is not shown")
        return self.ds is not None or held


def open_data(source: str, *, directions: Sequence[str] = DIRECTIONS, bank_fraction: float = 1.0, seed: int = 0,
              dtype: Optional[str] = "float64", synthetic_sizes: Optional[Mapping[str, int]] = None,
              source_kwargs: Optional[Mapping[str, object]] = None, ensure_val: bool = True) -> RunData:
    """The tasks of both directions on ``source``, any kind: embeddings through :func:`prepare_dataset` (the test
    split against a seeded ``bank_fraction`` of the training images with their captions, :func:`reference_split`),
    score matrices (``sims:<folder>``) through :func:`load_sims_run` with a seeded ``bank_fraction`` of the folder's
    bank rows (``t2i`` names its text-query direction, ``i2t`` the other). Either way it is the bank
    ``open_data(source).with_bank_fraction(bank_fraction, seed)`` gives. ``directions``: the ones the notebook shows
    (``RunData.tasks``); ``ensure_val=False``: no validation split is held out of a source without one (a notebook
    that selects nothing keeps the whole training split for its bank)."""
    if isinstance(directions, str) or not all(d in DIRECTIONS for d in directions) or not directions:
        raise ValueError(f"directions must be a non-empty list of {list(DIRECTIONS)} (t2i: the text-query direction of "
                         f"any source, i2t the other); got {directions!r}")
    directions = tuple(directions)
    bank_fraction = check_fraction(bank_fraction, "bank_fraction")
    if source_kind(source)[0].holds == "scores":
        if source_kwargs:
            raise ValueError(f"source_kwargs apply to embeddings sources, not to a sims: folder; got {source_kwargs!r}")
        sims = load_sims_run(source, DIRECTIONS)
        if any(sims.alias[d] != d for d in directions):   # e.g. a text-video folder: t2v, v2t
            note("directions " + ", ".join(f"{d} = {sims.alias[d]}" for d in directions) + " (the notebook's names "
                 "for the folder's text-query and item-query directions; tables and figures use the notebook's)")
        tasks, test_as_bank = {}, []
        for d in DIRECTIONS:
            task = sims.tasks[sims.alias[d]]
            if not sims.has_bank(sims.alias[d]):   # the test queries serve as the bank: transductive, marked so
                if d in directions:
                    note(f"{d}: the folder has no bank x gallery scores for this direction, so the test queries serve "
                         f"as the bank (query-aware, labelled so); for a query bank, "
                         f"{task.hints[('query_bank', 'targets')]} (or list the bank's embeddings beside the gallery's)")
                task = task.test_as_bank()
                test_as_bank.append(d)
            tasks[d] = task
        run = RunData(source, sims.label, tasks, directions, test_as_bank=tuple(test_as_bank),
                      synthetic_scores=sims.synthetic)
        # one meaning of bank_fraction: a seeded share of the source's bank (here the folder's bank rows, as
        # with_bank_fraction takes it, the whole bank at 1; a direction whose test queries serve keeps them all)
        return run.with_bank_fraction(bank_fraction, seed)
    ds = prepare_dataset(source, seed=seed, dtype=dtype, synthetic_sizes=synthetic_sizes, source_kwargs=source_kwargs,
                         ensure_val=ensure_val)
    test = ds.split("test")
    if "train" not in ds.splits or not ds.splits["train"].n_images:
        raise ValueError(f"{source} has no training images left for the reference banks"
                         + (f" (synthetic_sizes {dict(synthetic_sizes)})" if synthetic_sizes and is_synthetic(ds) else "")
                         + ": give n_train_images at least 1 (synthetic_sizes), or a source with a training split")
    bank = reference_split(ds, "train", bank_fraction, seed=seed)
    return RunData(source, run_label(ds), make_tasks(test, bank), directions, ds, test, bank, bank_fraction)


def describe(ds: EmbeddingDataset) -> pd.DataFrame:
    """Images and captions per split."""
    return pd.DataFrame([{"split": k, "images": v.n_images, "captions": v.n_captions, "dim": v.images.shape[1]}
                         for k, v in ds.splits.items()])


def is_synthetic(ds: EmbeddingDataset) -> bool:
    return ds.source == "synthetic"


def _split_words(ds: EmbeddingDataset, splits: Sequence[str], adjective: str) -> str:
    """The size of ``splits`` (added up) in words: "1,000 test images" (and "x 5 captions" when every image has the
    same number, else ", N captions"); the items of an audio release are "clips"
    (:data:`hubnorm.retrieval.ITEM_NOUNS`)."""
    n_items = sum(ds.split(s).n_images for s in splits)
    n_captions = sum(ds.split(s).n_captions for s in splits)
    per = n_captions // n_items if n_items and n_captions % n_items == 0 else None
    return (f"{n_items:,} {adjective} {ITEM_NOUNS.get(ds.meta.get('modality'), 'images')}"
            + (f" x {per} captions" if per and per > 1 else "" if per == 1 else f", {n_captions:,} captions"))


def test_size(ds: EmbeddingDataset) -> str:
    """The size of ``ds``'s test split in words, "1,000 test images" (and "x 5 captions" when every image has the
    same number): one label, one size (notebooks draw test splits of different sizes from one preset)."""
    return _split_words(ds, ["test"], "test") if "test" in ds.splits else "no test split"


def bank_pool(ds: EmbeddingDataset, bank_splits: Sequence[str] = ("train",)) -> str:
    """Where ``ds``'s reference banks come from, in words: "banks from 29,000 training images x 5 captions" (every
    reference bank of a run is drawn from the training split; a table's ``setting`` says which part, and a
    query-aware bank is the test queries), or "" when there is no training split.

    ``bank_splits``: the splits a notebook draws its banks from, when not the training split alone; every split
    but the test split reads "banks from 199 other clips, 244 captions" (their sizes added up)."""
    splits = [s for s in dict.fromkeys(bank_splits) if s in ds.splits]
    if not splits:
        return ""
    adjective = ("training" if splits == ["train"] else "other" if set(splits) == set(ds.splits) - {"test"}
                 else " + ".join(splits))
    return f"banks from {_split_words(ds, splits, adjective)}"


def data_size(ds: EmbeddingDataset, bank_splits: Sequence[str] = ("train",)) -> str:
    """The sizes a run label names: the test split (:func:`test_size`) and the pool of its banks (:func:`bank_pool`),
    "1,000 test images x 5 captions; banks from 29,000 training images x 5 captions"."""
    pool = bank_pool(ds, bank_splits)
    return test_size(ds) + (f"; {pool}" if pool else "")


def run_label(ds: EmbeddingDataset, bank_splits: Sequence[str] = ("train",)) -> str:
    """"synthetic analog (synthetic-flickr30k, seed 0, 1,000 test images x 5 captions; banks from 29,000 training
    images x 5 captions)" or "real data (coco, model, 500 test images)": in every table and caption, with the sizes
    of the test split and of the banks' pool (:func:`data_size`; ``bank_splits``: the splits the banks are drawn
    from, the training split unless a notebook says otherwise): one label, one size."""
    sizes = data_size(ds, bank_splits)
    if is_synthetic(ds):
        if ds.meta.get("rehearsal"):
            return str(ds.meta.get("label") or f"synthetic rehearsal ({ds.name}, {sizes})")
        return f"synthetic analog ({ds.name}, seed {ds.meta.get('seed', '?')}, {sizes})"
    if ds.meta.get("release") and ds.meta.get("label"):   # a real release names its data set, size and model
        return f"{ds.meta['label']} ({sizes})"
    model = ds.meta.get("model")
    return f"real data ({ds.name}" + (f", {model}" if model else "") + f", {sizes})"


#: The real embedding releases (:mod:`hubnorm.data.real`) a notebook shows beside a synthetic run by default
#: (``real_sources = ["auto"]``), by the modality of the items.
REAL_DEFAULTS = {"image": ("coco500-clip-b16", "flickr8k-100x5-clip-b32"), "audio": ("audiocaps-clap",)}


def real_sources(real: Sequence[str], source: str, *, modality: str = "image") -> List[str]:
    """The real releases named by a notebook's ``real_sources`` parameter, as ``"real:<release>"`` strings.

    ``["auto"]``: :data:`REAL_DEFAULTS` of ``modality`` when ``source`` is synthetic (a run on real data is its own
    real column: none); ``[]``: none; otherwise the ``"real:<release>"`` strings given (an unknown release is an
    error listing the known ones)."""
    from hubnorm.data.real import RELEASES

    if modality not in REAL_DEFAULTS:
        raise ValueError(f"modality must be one of {sorted(REAL_DEFAULTS)}; got {modality!r}")
    real = list(real)
    if real == ["auto"]:
        return [f"real:{r}" for r in REAL_DEFAULTS[modality]] if str(source).startswith("synthetic:") else []
    out = []
    for s in real:
        name = s[len("real:"):] if isinstance(s, str) and s.startswith("real:") else None
        if name not in RELEASES:
            raise ValueError(f"real_sources must be ['auto'], [] or 'real:<release>' strings, <release> one of "
                             f"{sorted(RELEASES)}; got {s!r}")
        if RELEASES[name].modality != modality:
            fits = sorted(n for n, r in RELEASES.items() if r.modality == modality)
            raise ValueError(f"real_sources: {s!r} holds {RELEASES[name].modality}-text embeddings, and this "
                             f"notebook's real column is {modality}-text: use one of {fits}, or ['auto']")
        out.append(f"real:{name}")
    return out


def nearest_published(ds: EmbeddingDataset) -> str:
    """The data set of the published tables a real release's results are set beside: its own when the papers report
    it (COCO, AudioCaps), else the nearest one they do (Flickr30k for Flickr8k); the release declares it
    (:mod:`hubnorm.data.real`). The published rows are of the papers' full test sets, not of the release's size."""
    near = ds.meta.get("published_dataset")
    if not near:
        raise ValueError(f"{ds.name!r} is not a real release (hubnorm.data.real): it declares no nearest published "
                         "data set; pass the notebook's dataset parameter instead")
    return str(near)


def load_real_sets(sources: Sequence[str], *, seed: int = 0, dtype: Optional[str] = "float64",
                   source_kwargs: Optional[Mapping[str, object]] = None,
                   bank_splits: Sequence[str] = ("train",)) -> Dict[str, EmbeddingDataset]:
    """The releases of ``sources`` (:func:`real_sources`) whose files are on this machine, each prepared like the
    main data (:func:`prepare_dataset`: splits, float64 unit rows), keyed by its label (:func:`run_label`, whose
    pool of banks is ``bank_splits``: e.g. ``("val", "train")`` for a notebook that draws its banks from every
    split but the test split).

    Nothing is downloaded here: ``run_all.sh`` fetches the releases once at its start (``python -m hubnorm.data
    fetch-real``); a release that is not cached is left out, and one NOTE names them all with the command."""
    from hubnorm.data.real import FETCH_COMMAND, real_status
    from .reporting import REAL_MISSING_NOTE

    out, missing = {}, []
    for src in sources:
        name = src.split(":", 1)[1]
        if real_status(name) != "cached":
            missing.append(name)
            continue
        ds = prepare_dataset(src, seed=seed, dtype=dtype, note_small=False,
                             source_kwargs={**dict(source_kwargs or {}), "download": False})
        out[run_label(ds, bank_splits)] = ds
    if missing:   # REAL_MISSING_NOTE: run_all.sh recognises the line (and says it once for the run)
        note(f"{REAL_MISSING_NOTE[len('NOTE: '):]} {', '.join(missing)}: not on this machine (fetch with "
             f"'{FETCH_COMMAND} {' '.join(missing)}', or let run_all.sh fetch it)")
    return out


#: The value of ``dataset`` when the data set of a run is not declared: no published table is compared with it.
UNKNOWN_DATASET = "unknown"


def paper_ids() -> List[str]:
    """The ids of the papers whose published tables ship with the package (e.g. ``"nnn-chowdhury2024"``)."""
    from .reporting import load_published

    return sorted(str(p) for p in load_published()["paper"].unique())


def _paper_id(paper: str) -> str:
    """A paper id from its id or its short name (the part before the first "-": ``"nnn"``, ``"dbsn"``, ...)."""
    ids = paper_ids()
    if paper in ids:
        return paper
    match = [pid for pid in ids if pid.split("-")[0] == paper]
    if len(match) != 1:
        raise ValueError(f"paper must be one of {sorted(p.split('-')[0] for p in ids)} (or a paper id {ids}); "
                         f"got {paper!r}")
    return match[0]


def published_names(column: str, paper: str = "nnn") -> List[str]:
    """The distinct values of ``column`` ("model" or "dataset") in ``paper``'s published tables (sorted)."""
    from .reporting import load_published

    if column not in ("model", "dataset"):
        raise ValueError(f"column must be 'model' or 'dataset'; got {column!r}")
    df = load_published(_paper_id(paper))
    return sorted(str(v) for v in df[column].dropna().unique())


def dataset_key(source: str, ds: Optional[EmbeddingDataset] = None) -> str:
    """The data set of a run, as the published tables name it, from what the source *declares*, never from a
    folder's name:

    - ``synthetic:<preset>``: the preset's data set (``"flickr30k"``, ``"coco"``; the run is a synthetic analog);
    - ``cache:<dataset>:<model>:<pretrained>``: ``<dataset>``;
    - ``local:<folder>``: ``dataset`` of the folder's ``model_info.json`` (``ds.meta["dataset"]``), else
      :data:`UNKNOWN_DATASET` (``"unknown"``: no published rows are shown; pass the notebook's ``dataset``
      parameter to compare with a published data set).
    """
    if not isinstance(source, str):
        raise TypeError(f"source must be a string; got {source!r}")
    kind, _, rest = source.partition(":")
    if kind == "synthetic":
        return rest.split("-")[0] or UNKNOWN_DATASET
    if kind == "cache":
        return rest.split(":")[0] or UNKNOWN_DATASET
    declared = ds.meta.get("dataset") if ds is not None else None
    return str(declared) if declared else UNKNOWN_DATASET


def published_dataset(source: str, ds: Optional[EmbeddingDataset] = None, dataset: Optional[str] = None, *,
                      paper: str = "nnn") -> str:
    """The published data set to compare a run with: ``dataset`` when given (an error listing the data sets of
    ``paper``'s tables when it names none of them), else :func:`dataset_key`. ``"unknown"`` (or a data set the
    paper does not report) gives no published rows, with a NOTE."""
    known = published_names("dataset", paper)
    if dataset is not None:
        if not isinstance(dataset, str) or (dataset not in known and dataset != UNKNOWN_DATASET):
            raise ValueError(f"dataset={dataset!r} is not a data set of the published tables ({_paper_id(paper)}); "
                             f"known: {known}, or None to read it from the source, or {UNKNOWN_DATASET!r}")
        key = dataset
    else:
        key = dataset_key(source, ds)
    if key not in known:
        how = ("the source declares no data set" if key == UNKNOWN_DATASET
               else f"the papers report no rows for the data set {key!r}")
        note(f"no published rows are compared with this run: {how} (pass dataset= one of {known} to compare "
             "anyway; a local: folder may declare it in model_info.json as \"dataset\")")
    return key


def published_model(ds: Optional[EmbeddingDataset], model: Optional[str] = "auto", *,
                    paper: str = "nnn") -> Optional[str]:
    """The ``model`` column of the published tables to show beside this run.

    ``"auto"`` follows the embeddings: synthetic data (calibrated to real zero-shot CLIP statistics) and real CLIP
    ViT-B/32 give "CLIP" ("zs CLIP" in the DBSN tables, ``paper="dbsn"``), SigLIP and BLIP caches their
    published names (:func:`hubnorm.data.models.published_model_name`); a model the papers did not report gives
    None (no published rows) and a note. Any other value must be a model of ``paper``'s published tables (an
    error lists them otherwise) and is returned as given.
    """
    if model != "auto":
        known = published_names("model", paper)
        if model is None:
            return None
        if not isinstance(model, str) or model not in known:
            raise ValueError(f"model={model!r} is not a model of the published tables ({_paper_id(paper)}); known: "
                             f"{known}, or 'auto' to follow the embeddings")
        return model
    if ds is None:   # score matrices: no encoder is known
        note("the source names no encoder (score matrices): no published numbers are shown (pass model='CLIP' or "
             "another published name to compare anyway)")
        return None
    if is_synthetic(ds):
        name = "CLIP"
    else:
        from hubnorm.data.models import published_model_name

        enc = str(ds.meta.get("model") or "")
        name = published_model_name(enc, ds.meta.get("pretrained")) if enc else None
        if name is None:
            note(f"the papers report no rows for the model {enc or '(unknown)'!r}: no published numbers are shown "
                 "(pass model='CLIP' or another published name to compare anyway; run_all.sh --param model=CLIP)")
            return None
    renames = next((v for pid, v in _MODEL_NAMES_IN_PAPER.items() if paper in (pid, pid.split("-")[0])), None)
    return name if renames is None else renames.get(name)


def published_label(paper: str, model: Optional[str], dataset: str, rows: Optional[pd.DataFrame] = None) -> str:
    """What a notebook says it compares with: ``"NNN paper, CLIP on flickr30k"``, or, when there are no such rows
    (an unreported model or data set, or ``rows`` empty), ``"none (...)"`` with the reason, and a NOTE."""
    if model is None or (rows is not None and len(rows) == 0) or dataset not in published_names("dataset", paper):
        why = ("no published model for these embeddings" if model is None
               else f"the paper reports no rows for {model} on {dataset}")
        note(f"no published column: {why}; the tables show this run only")
        return f"none ({why})"
    return f"{paper.upper()} paper, {model} on {dataset}"


#: How a paper's tables name the models we report, keyed by paper id (the DBSN tables write zero-shot CLIP as
#: "zs CLIP" and report no other model of ours); papers not listed use our names.
_MODEL_NAMES_IN_PAPER = {"dbsn-pan2025": {"CLIP": "zs CLIP"}}


def cross_dataset_source(ds: EmbeddingDataset, cross_source: Optional[str]) -> Optional[str]:
    """The reference-bank source of the cross-dataset rows (NNN Table 2), or None to skip them.

    ``"auto"``: the other synthetic preset for a synthetic run; none for real data (a real run is never paired
    with a synthetic bank; pass a real ``cache:``/``local:`` source to get those rows). An explicit synthetic
    ``cross_source`` for a real run is refused with a note.
    """
    if cross_source in (None, "", "none", "None"):
        return None
    if cross_source == "auto":
        if is_synthetic(ds):  # the registry's partner data set, same generative model ("-isotropic" kept)
            preset = str(ds.meta.get("preset") or ds.name.replace("synthetic-", ""))
            base = preset.split("-")[0]
            partner = cross_dataset(base)
            if partner is None or f"{partner}{preset[len(base):]}" not in PRESETS:
                note(f"no cross-dataset rows: the data set registry names no partner of {base!r} with a synthetic "
                     "preset (pass cross_source='synthetic:<preset>' to choose one)")
                return None
            return f"synthetic:{partner}{preset[len(base):]}"
        note("no cross-dataset rows: this run is on real data and no real cross_source was given "
             "(pass e.g. cross_source='cache:coco:ViT-B-32-quickgelu:openai')")
        return None
    if not is_synthetic(ds) and str(cross_source).startswith("synthetic:"):
        note(f"cross_source={cross_source!r} is synthetic but this run is on real data: cross-dataset rows skipped")
        return None
    return cross_source


def reference_split(ds: EmbeddingDataset, split: str = "train", fraction: float = 1.0, seed: int = 0, *,
                    note_small: bool = True) -> EmbeddingSplit:
    """A seeded random ``fraction`` of the images of ``split`` with all their captions (both banks at once:
    "all methods use 20% of the train set", NNN Tables A6/A7). Notes a bank too small for a stable estimate
    (``note_small=False``: no note, for a loop over the banks of a small real set whose size the notebook states
    once)."""
    s = ds.split(split)
    if check_fraction(fraction, "fraction") < 1:
        s = s.subset_images(share_rows(s.n_images, fraction, seed))
    if note_small and s.n_images < SMALL_BANK:
        note(f"the reference bank has only {s.n_images} images / {s.n_captions} captions "
             f"({fraction:.0%} of '{split}'): hubness estimates from so small a bank are noisy, and k is "
             "limited by its size")
    return s


def make_tasks(split: EmbeddingSplit, bank: Optional[EmbeddingSplit] = None, *, directions: Sequence[str] = DIRECTIONS,
               meta: Optional[dict] = None) -> Dict[str, RetrievalTask]:
    """t2i / i2t tasks on ``split`` whose banks are the images and captions of ``bank`` (None: no banks)."""
    return build_tasks(split.images, split.captions, split.caption_to_image,
                       image_bank=None if bank is None else bank.images,
                       caption_bank=None if bank is None else bank.captions, directions=tuple(directions),
                       meta=meta)


# ---------------------------------------------------------------------------------------------- grids
def clamp_params(name: str, params: Mapping, task: RetrievalTask, *, query_aware: bool = False) -> dict:
    """``k`` of NNN / CSLS / DIS / DualDIS limited to what the task allows (:func:`hubnorm.selection.k_limit`:
    the query-bank size for NNN, tiny real folders), with a visible note."""
    p = dict(params)
    n = k_limit(name, task, query_aware=query_aware)
    if "k" in p and n is not None and int(p["k"]) > n:
        note(f"{name} {task.direction}: k={p['k']} is larger than this task allows ({n}); using k={n}")
        p["k"] = int(n)
    return p


def paper_or_fast_grid(method: str, fast: bool, reduced: Optional[Mapping[str, Mapping[str, Sequence]]] = None) -> Dict[str, list]:
    """The paper grid of ``method`` (:data:`hubnorm.PAPER_GRIDS`) or, when ``fast``, the reduced one."""
    if fast and reduced and method in reduced:
        return {k: list(v) for k, v in reduced[method].items()}
    return {k: list(v) for k, v in PAPER_GRIDS.get(method, {}).items()}


def fmt_params(p: Mapping) -> str:
    """``{"alpha": 0.75, "k": 16}`` -> ``"alpha=0.75, k=16"`` (stable order as given; execution options such as
    ``cache_bytes`` or ``device``, which change no ranking, are left out)."""
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in p.items()
                     if k not in EXECUTION_OPTIONS)


# ---------------------------------------------------------------------------------------------- running methods
def method_items(methods: MethodSpec) -> List[Tuple[str, str]]:
    if isinstance(methods, Mapping):
        return list(methods.items())
    return [(m, m) for m in methods]


def params_for(params, direction: str, label: str) -> dict:
    """``params`` is {label: {...}} or {direction: {label: {...}}}."""
    if not params:
        return {}
    if direction in params and isinstance(params[direction], Mapping) and label not in params:
        return dict(params[direction].get(label, {}) or {})
    return dict(params.get(label, {}) or {})


def run_methods(
    tasks: Mapping[str, RetrievalTask],
    methods: MethodSpec,
    params=None,
    *,
    query_aware: bool = False,
    n_boot: int = 0,
    seed: int = 0,
    hubness_k: Sequence[int] = (),
    ks: Sequence[int] = (1, 5, 10),
    extra: Optional[Mapping[str, object]] = None,
    show_progress: bool = True,
) -> pd.DataFrame:
    """Fit every method on every task and evaluate it on the task's test queries.

    Args:
        tasks: ``{"t2i": task, "i2t": task}`` (from :func:`make_tasks`).
        methods: registry names, or ``{label: registry name}`` to run one method under several labels.
        params: ``{label: {param: value}}`` or ``{direction: {label: {...}}}``.
        query_aware: use the test queries as the query bank (transductive; DBSN Table 2).
        n_boot: bootstrap resamples for 95% CIs of every R@K (columns ``"R@K lo"``, ``"R@K hi"``).
        hubness_k: also report the skewness of N_k for these k (columns ``"skewness@k"``).
        extra: constant columns added to every row (e.g. ``{"setting": "bank=train 20%"}``).
    Returns:
        one row per (direction, method) with ``direction, method, name, params, R@1 ... MnR, fit_s``.
    """
    rows = []
    pairs = [(d, lab, name) for d in tasks for lab, name in method_items(methods)]
    for direction, label, name in progress(pairs, desc="methods", disable=not show_progress):
        task = tasks[direction]
        p = clamp_params(name, params_for(params, direction, label), task, query_aware=query_aware)
        norm = make_normalizer(name, **p)
        t0 = time.perf_counter()
        task.fit(norm, query_aware=query_aware)
        fit_s = time.perf_counter() - t0
        res = evaluate(norm, task, ks=ks, n_boot=n_boot, seed=seed)
        row = {"direction": direction, "method": label, "name": DISPLAY_NAMES.get(name, name),
               "params": fmt_params(p), **res, "fit_s": fit_s}
        for k in hubness_k:
            row[f"skewness@{k}"] = hubness_stats(k_occurrence(norm, k, task.queries), k, task.n_queries)["skewness"]
        if extra:
            row.update(extra)
        rows.append(row)
    return pd.DataFrame(rows)


def select_parameters(
    val_tasks: Mapping[str, RetrievalTask],
    methods: MethodSpec,
    grids: Mapping[str, Mapping[str, Sequence]],
    *,
    metric: str = "R@1",
    fixed: Optional[Mapping[str, Mapping[str, object]]] = None,
    reuse: Optional[Mapping[str, str]] = None,
    extra: Optional[Mapping[str, object]] = None,
    show_progress: bool = True,
) -> pd.DataFrame:
    """NNN Appendix B: choose each method's parameters on the held-out ``val_tasks`` with
    :func:`hubnorm.grid_search` (by ``metric``); nothing is evaluated on a test split here.

    ``methods``: registry names, or ``{label: registry name}`` (one method under several labels). ``grids`` maps a
    label to its grid (missing or empty: no selection, ``fixed`` / default parameters), its ``k`` values limited to
    what the task allows (:func:`clamp_grid`, with a NOTE). ``reuse`` maps a label to an earlier label whose chosen
    parameters it takes instead of its own search (e.g. ``{"dualdis": "dualis"}``: the NNN paper finds DualDIS and
    DualIS alike). A tie at the best score prints a NOTE (``hubnorm.SelectionResult.tie_note``).

    Returns one row per (direction, method) with ``direction, method`` (the label), ``normalizer`` (the registry
    name), ``params`` (the chosen parameters, a dict for ``hubnorm.make_normalizer(normalizer, **params)``),
    ``chosen`` (the same, printed), ``val <metric>``, ``grid points``, ``engine``, ``tied``, ``bank`` (the mark of
    the fits the choice was made on, :func:`hubnorm.provenance.bank_mark`) and the ``extra`` columns.
    """
    fixed = fixed or {}
    chosen: Dict[str, Dict[str, dict]] = {d: {} for d in val_tasks}
    banks: Dict[str, Dict[str, str]] = {d: {} for d in val_tasks}   # the bank mark of each choice's fits
    rows = []
    jobs = [(d, lab, name) for d in val_tasks for lab, name in method_items(methods)]
    for direction, label, name in progress(jobs, desc="selection on val", disable=not show_progress):
        base = dict(fixed.get(label, {}) or {})
        grid = grids.get(label) if grids else None
        row = {"direction": direction, "method": label, "normalizer": name}
        if reuse and label in reuse:
            params = {**base, **chosen[direction][reuse[label]]}
            row.update({"chosen": fmt_params(params) + f" (as {reuse[label]})", f"val {metric}": np.nan,
                        "grid points": 0, "engine": "-", "tied": 0, "bank": banks[direction][reuse[label]]})
        elif grid:
            grid = clamp_grid(name, grid, val_tasks[direction])
            sel = grid_search(name, val_tasks[direction], grid, metric=metric, fixed=base)
            params = {**base, **sel.best_params}
            row.update({"chosen": fmt_params(sel.best_params), f"val {metric}": sel.best_score,
                        "grid points": len(sel.table), "engine": sel.engine, "tied": sel.n_tied,
                        "bank": " / ".join(dict.fromkeys(sel.table["bank"]))})
            if sel.tie_note:
                note(f"{label} {direction}: {sel.tie_note} ({fmt_params(sel.best_params)})")
        else:
            params = base
            row.update({"chosen": fmt_params(params) or "(none)", f"val {metric}": np.nan, "grid points": 0,
                        "engine": "-", "tied": 0, "bank": NO_BANK})   # nothing fitted to choose them
        chosen[direction][label] = params
        banks[direction][label] = row["bank"]
        row["params"] = params
        rows.append({**row, **dict(extra or {})})
    return pd.DataFrame(rows)


def select_and_evaluate(
    val_tasks: Mapping[str, RetrievalTask],
    test_tasks: Mapping[str, RetrievalTask],
    methods: MethodSpec,
    grids: Mapping[str, Mapping[str, Sequence]],
    *,
    metric: str = "R@1",
    fixed: Optional[Mapping[str, Mapping[str, object]]] = None,
    reuse: Optional[Mapping[str, str]] = None,
    n_boot: int = 0,
    seed: int = 0,
    hubness_k: Sequence[int] = (),
    extra: Optional[Mapping[str, object]] = None,
    show_progress: bool = True,
) -> Tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`select_parameters` on ``val_tasks``, then :func:`run_methods` once on ``test_tasks`` with the
    winners (NNN Appendix B in one call; the notebooks write the two steps out).

    Returns ``(results, selection)``: the test results (as :func:`run_methods`) and the selection table (as
    :func:`select_parameters`, without ``extra``).
    """
    selection = select_parameters({d: val_tasks[d] for d in test_tasks}, methods, grids, metric=metric, fixed=fixed,
                                  reuse=reuse, show_progress=show_progress)
    chosen: Dict[str, Dict[str, dict]] = {d: {} for d in test_tasks}
    for d, label, params in zip(selection["direction"], selection["method"], selection["params"]):
        chosen[d][label] = params
    results = run_methods(test_tasks, methods, chosen, n_boot=n_boot, seed=seed, hubness_k=hubness_k, extra=extra,
                          show_progress=show_progress)
    return results, selection
