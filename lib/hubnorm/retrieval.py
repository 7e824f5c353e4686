"""One retrieval model for every direction.

A :class:`RetrievalTask` holds the test queries, the gallery (targets), which targets are correct for each
query (:class:`Positives`, several per query allowed), and the optional reference banks. Text-to-image and
image-to-text tasks are both built from (image embeddings, caption embeddings, caption-to-image index) by
:func:`build_tasks`; the caption-to-image index is explicit because COCO's Karpathy test split has 10 images
with 6 captions (never assume ``caption // 5``).

Conventions (docs/methods.md): t2i queries are captions and targets images; its query bank is training captions and
its target bank training images. For i2t the roles swap.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Dict, Optional, Sequence

import numpy as np

from ._validation import ArrayLike, as_embeddings

#: The image-text directions (what :func:`build_tasks` builds from images, captions and their index).
DIRECTIONS = ("t2i", "i2t")
#: The modalities and the letters that name them in a direction.
MODALITY_LETTERS = {"text": "t", "image": "i", "video": "v", "audio": "a"}
#: Every direction name a task may carry (query modality first): text-image, text-video, text-audio each way,
#: then the pairs without text (a sims folder may hold video x audio scores).
DIRECTION_NAMES = ("t2i", "i2t", "t2v", "v2t", "t2a", "a2t") + tuple(
    f"{a}2{b}" for a in "iva" for b in "iva" if a != b)


def check_direction(direction) -> str:
    """``direction`` if it is one of :data:`DIRECTION_NAMES`, else a ValueError naming them."""
    if not isinstance(direction, str) or direction not in DIRECTION_NAMES:
        raise ValueError(f"direction must be one of {', '.join(DIRECTION_NAMES)} (query modality first: t2v is "
                         f"text-to-video; letters {MODALITY_LETTERS}); got {direction!r}")
    return direction


@dataclass(frozen=True)
class Positives:
    """The positive targets of every query, in CSR form: query ``i`` owns ``indices[indptr[i]:indptr[i+1]]``."""

    indptr: np.ndarray
    indices: np.ndarray
    n_targets: int

    def __post_init__(self):
        indptr = _as_int64(self.indptr, "Positives.indptr")
        indices = _as_int64(self.indices, "Positives.indices")
        if isinstance(self.n_targets, bool) or not isinstance(self.n_targets, (int, np.integer)) or self.n_targets < 1:
            raise TypeError(f"Positives.n_targets must be a positive integer; got {self.n_targets!r}")
        object.__setattr__(self, "n_targets", int(self.n_targets))
        if indptr.ndim != 1 or indptr.size < 1 or indptr[0] != 0 or np.any(np.diff(indptr) < 0) or indptr[-1] != indices.size:
            raise ValueError("Positives.indptr must start at 0, never decrease, and end at len(indices)")
        if np.any(np.diff(indptr) == 0):
            empty = int(np.flatnonzero(np.diff(indptr) == 0)[0])
            raise ValueError(f"query {empty} has no positive target: every query needs at least one")
        if indices.size and (indices.min() < 0 or indices.max() >= self.n_targets):
            raise ValueError(f"positive target indices must lie in [0, {self.n_targets}); got range [{indices.min()}, {indices.max()}]")
        object.__setattr__(self, "indptr", indptr)
        object.__setattr__(self, "indices", indices)

    @property
    def n_queries(self) -> int:
        return self.indptr.size - 1

    def __len__(self) -> int:
        return self.n_queries

    def of(self, i: int) -> np.ndarray:
        return self.indices[self.indptr[i]:self.indptr[i + 1]]

    @property
    def query_of_entry(self) -> np.ndarray:
        """For every entry of ``indices``, the query it belongs to."""
        return np.repeat(np.arange(self.n_queries), np.diff(self.indptr))

    @classmethod
    def from_labels(cls, labels: ArrayLike, n_targets: Optional[int] = None) -> "Positives":
        """One positive per query: ``labels[i]`` is the target of query ``i`` (t2i: caption -> image)."""
        labels = _as_index_array(labels, "labels")
        n = int(labels.max()) + 1 if n_targets is None else int(n_targets)
        return cls(np.arange(labels.size + 1), labels, n)

    @classmethod
    def from_groups(cls, owner: ArrayLike, n_queries: int) -> "Positives":
        """Many positives per query: target ``j`` belongs to query ``owner[j]`` (i2t: caption j -> image owner[j])."""
        owner = _as_index_array(owner, "owner")
        if owner.max() >= n_queries:
            raise ValueError(f"owner index {owner.max()} is out of range for {n_queries} queries")
        order = np.argsort(owner, kind="stable")
        counts = np.bincount(owner, minlength=n_queries)
        return cls(np.concatenate([[0], np.cumsum(counts)]), order, owner.size)

    @classmethod
    def from_lists(cls, lists: Sequence[Sequence[int]], n_targets: int) -> "Positives":
        lens = [len(x) for x in lists]
        indices = np.concatenate([_as_int64(np.asarray(x).reshape(-1), "lists") for x in lists]) if lists \
            else np.zeros(0, np.int64)
        return cls(np.concatenate([[0], np.cumsum(lens, dtype=np.int64)]), indices, n_targets)   # [] too

    def subset(self, queries: ArrayLike) -> "Positives":
        """The positives of a subset of queries (same targets)."""
        q = _as_int64(queries, "queries")
        if q.size and (q.min() < 0 or q.max() >= self.n_queries):
            raise ValueError(f"queries must lie in [0, {self.n_queries}); got range [{q.min()}, {q.max()}]")
        return Positives.from_lists([self.of(i) for i in q], self.n_targets)


def _as_int64(x, name: str) -> np.ndarray:
    """``x`` as an int64 array; floats are refused (never truncated: 0.9 is not target 0)."""
    arr = x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold integers; got dtype {arr.dtype}. Float indices are never truncated: "
                        f"convert exact integral values with .astype(np.int64) after checking them")
    return arr.astype(np.int64)


def _as_index_array(x: ArrayLike, name: str) -> np.ndarray:
    arr = x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array of integer indices; got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold integers; got dtype {arr.dtype}")
    if arr.min() < 0:
        raise ValueError(f"{name} must be >= 0; got {arr.min()}")
    return arr.astype(np.int64)


_INPUTS = ("queries", "targets", "query_bank", "target_bank")


@dataclass
class RetrievalTask:
    """Queries, targets, positives, and the reference banks of one retrieval direction.

    ``query_bank`` holds reference items of the query modality, ``target_bank`` of the target modality.
    ``direction``: any of :data:`DIRECTION_NAMES` (``t2i``, ``i2t``, ``t2v``, ``v2t``, ``t2a``, ``a2t``): the
    arithmetic is the same for every modality pair, the name labels the results.
    ``meta`` carries free-form labels (dataset, source: "synthetic" or "real", split, model).
    """

    queries: np.ndarray
    targets: np.ndarray
    positives: Positives
    query_bank: Optional[np.ndarray] = None
    target_bank: Optional[np.ndarray] = None
    direction: str = "t2i"
    meta: Dict[str, object] = field(default_factory=dict)

    def __post_init__(self):
        check_direction(self.direction)
        q = as_embeddings(self.queries, "queries", device="cpu")
        t = as_embeddings(self.targets, "targets", device="cpu", dim=q.shape[1])
        if not isinstance(self.positives, Positives):
            raise TypeError("positives must be a hubnorm.Positives (use Positives.from_labels / from_groups)")
        if self.positives.n_queries != q.shape[0]:
            raise ValueError(f"positives cover {self.positives.n_queries} queries but there are {q.shape[0]} queries")
        if self.positives.n_targets != t.shape[0]:
            raise ValueError(f"positives refer to {self.positives.n_targets} targets but there are {t.shape[0]} targets")
        for name in ("query_bank", "target_bank"):
            bank = getattr(self, name)
            if bank is not None:
                as_embeddings(bank, name, device="cpu", dim=q.shape[1])

    def has(self, name: str) -> bool:
        """Whether the task holds the input ``name`` (``"queries"``, ``"targets"``, ``"query_bank"``,
        ``"target_bank"``): a method that needs a bank asks before it fits."""
        if name not in _INPUTS:
            raise ValueError(f"a task holds the inputs {', '.join(_INPUTS)}; got {name!r}")
        return getattr(self, name) is not None

    @property
    def n_queries(self) -> int:
        return len(self.queries)

    @property
    def n_targets(self) -> int:
        return len(self.targets)

    def fit(self, normalizer, *, query_aware: bool = False):
        """Fit ``normalizer`` on this task's gallery and banks; ``query_aware=True`` uses the test queries as the
        query bank (transductive: label such results)."""
        bank = self.queries if query_aware else self.query_bank
        return normalizer.fit(self.targets, query_bank=bank, target_bank=self.target_bank)

    def with_banks(self, query_bank=None, target_bank=None) -> "RetrievalTask":
        return replace(self, query_bank=query_bank, target_bank=target_bank)

    def with_distractors(self, distractors: ArrayLike) -> "RetrievalTask":
        """The same queries, positives and banks against a larger gallery: ``distractors`` (items of the target
        modality from other data, d x dim) follow the targets and are never a positive (Geigle et al. Table 5:
        the test queries against their test gallery merged with other data sets' test items)."""
        extra = as_embeddings(distractors, "distractors", device="cpu", dim=self.targets.shape[1]).numpy()
        if extra.shape[0] == 0:
            raise ValueError("distractors must hold at least one item (an empty array adds nothing)")
        targets = np.concatenate([np.asarray(self.targets), extra.astype(np.asarray(self.targets).dtype, copy=False)])
        positives = Positives(self.positives.indptr, self.positives.indices, self.positives.n_targets + len(extra))
        return replace(self, targets=targets, positives=positives,
                       meta={**self.meta, "distractors": int(len(extra))})


def build_tasks(
    images: ArrayLike,
    captions: ArrayLike,
    caption_to_image: ArrayLike,
    *,
    image_bank: Optional[ArrayLike] = None,
    caption_bank: Optional[ArrayLike] = None,
    directions: Sequence[str] = DIRECTIONS,
    meta: Optional[Dict[str, object]] = None,
) -> Dict[str, RetrievalTask]:
    """Both retrieval tasks from paired embeddings, in one call.

    Args:
        images: (n_images, d) image embeddings.
        captions: (n_captions, d) caption embeddings.
        caption_to_image: (n_captions,) index of each caption's image.
        image_bank, caption_bank: reference banks (e.g. training images / captions), or None.
    Returns:
        ``{"t2i": task, "i2t": task}`` (or the subset named in ``directions``).
    """
    images = _to_numpy(images)
    captions = _to_numpy(captions)
    # check with the caller's argument names (the tasks below would call them queries / targets / *_bank)
    as_embeddings(images, "images", device="cpu")
    as_embeddings(captions, "captions", device="cpu", dim=images.shape[1])
    for name, bank in (("image_bank", image_bank), ("caption_bank", caption_bank)):
        if bank is not None:
            as_embeddings(_to_numpy(bank), name, device="cpu", dim=images.shape[1])
    c2i = _as_index_array(caption_to_image, "caption_to_image")
    if c2i.size != len(captions):
        raise ValueError(
            f"caption_to_image has {c2i.size} entries but there are {len(captions)} captions: "
            "pass one image index per caption"
        )
    if c2i.max() >= len(images):
        raise ValueError(f"caption_to_image refers to image {c2i.max()} but there are only {len(images)} images")
    missing = np.setdiff1d(np.arange(len(images)), c2i)
    if missing.size:
        raise ValueError(f"{missing.size} image(s) have no caption (first: {missing[0]}): drop them or add captions")
    meta = dict(meta or {})
    tasks = {}
    for d in directions:
        if d == "t2i":
            tasks[d] = RetrievalTask(captions, images, Positives.from_labels(c2i, len(images)),
                                     query_bank=_maybe_numpy(caption_bank), target_bank=_maybe_numpy(image_bank),
                                     direction="t2i", meta=meta)
        elif d == "i2t":
            tasks[d] = RetrievalTask(images, captions, Positives.from_groups(c2i, len(images)),
                                     query_bank=_maybe_numpy(image_bank), target_bank=_maybe_numpy(caption_bank),
                                     direction="i2t", meta=meta)
        else:
            raise ValueError(f"unknown direction {d!r}: use 't2i' or 'i2t'")
    return tasks


def _to_numpy(x):
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    if not isinstance(x, np.ndarray):
        raise TypeError(f"embeddings must be numpy arrays or torch tensors; got {type(x).__name__}")
    return x


def _maybe_numpy(x):
    return None if x is None else _to_numpy(x)
