"""The containers every data source returns: :class:`EmbeddingSplit` and :class:`EmbeddingDataset`.

A leaf module (it imports only :mod:`hubnorm.retrieval`), so that the loaders (:mod:`hubnorm.datasets`,
:mod:`hubnorm.data`, :mod:`hubnorm.synthetic`) can all return these types without importing each other.

A dataset has named splits (``"test"``, ``"val"``, ``"train"``); a split holds image embeddings, caption
embeddings and the caption-to-image index. :meth:`EmbeddingDataset.tasks` turns a split plus reference banks
into the t2i and i2t :class:`~hubnorm.retrieval.RetrievalTask` objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from ._validation import check_fraction
from .retrieval import RetrievalTask, build_tasks, query_bank_share

__all__ = ["EmbeddingSplit", "EmbeddingDataset", "CAPTION_EXTRA"]

#: The prefix of the keys of :attr:`EmbeddingSplit.extras` that hold one entry per caption (the others: per image).
CAPTION_EXTRA = "caption_"


@dataclass
class EmbeddingSplit:
    """Paired embeddings of one split. ``caption_to_image[j]`` is the image of caption ``j``."""

    images: np.ndarray
    captions: np.ndarray
    caption_to_image: np.ndarray
    image_ids: Optional[List[str]] = None
    caption_texts: Optional[List[str]] = None
    #: optional latent info for synthetic data: one entry per image (``"topic"``, ``"latent"``), or per caption under
    #: a key that starts with :data:`CAPTION_EXTRA` (``"caption_topic"``); the key, not the length, says which
    extras: Dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self):
        self.caption_to_image = np.asarray(self.caption_to_image, dtype=np.int64)
        if len(self.caption_to_image) != len(self.captions):
            raise ValueError(
                f"caption_to_image has {len(self.caption_to_image)} entries but there are {len(self.captions)} "
                "caption embeddings: the embeddings and the annotation file do not match"
            )
        if len(self.caption_to_image) and self.caption_to_image.min() < 0:
            raise ValueError(f"caption_to_image has a negative image index ({self.caption_to_image.min()}): every "
                             "caption needs the index of its image, 0 .. n_images - 1")
        if len(self.caption_to_image) and self.caption_to_image.max() >= len(self.images):
            raise ValueError(
                f"caption_to_image refers to image {self.caption_to_image.max()} but there are only "
                f"{len(self.images)} image embeddings"
            )
        for key, value in self.extras.items():
            per, n = ("caption", self.n_captions) if self._per_caption(key) else ("image", self.n_images)
            if len(value) != n:
                raise ValueError(f"extras[{key!r}] has {len(value)} entries but the split has {n} {per}s: an extra is "
                                 f"per image, or per caption when its key starts with {CAPTION_EXTRA!r}")

    @staticmethod
    def _per_caption(key: str) -> bool:
        return str(key).startswith(CAPTION_EXTRA)

    @property
    def n_images(self) -> int:
        return len(self.images)

    @property
    def n_captions(self) -> int:
        return len(self.captions)

    def subset_images(self, image_idx) -> "EmbeddingSplit":
        """The split restricted to some images and all their captions (indices renumbered)."""
        image_idx = np.asarray(image_idx, dtype=np.int64)
        remap = -np.ones(self.n_images, dtype=np.int64)
        remap[image_idx] = np.arange(image_idx.size)
        keep = np.flatnonzero(remap[self.caption_to_image] >= 0)
        return EmbeddingSplit(
            images=self.images[image_idx],
            captions=self.captions[keep],
            caption_to_image=remap[self.caption_to_image[keep]],
            image_ids=None if self.image_ids is None else [self.image_ids[i] for i in image_idx],
            caption_texts=None if self.caption_texts is None else [self.caption_texts[j] for j in keep],
            extras={k: (v[keep] if self._per_caption(k) else v[image_idx]) for k, v in self.extras.items()},
        )

    def subset_captions(self, caption_idx) -> "EmbeddingSplit":
        """The split with only the captions ``caption_idx`` (in that order; every image kept, its index unchanged)."""
        keep = np.asarray(caption_idx, dtype=np.int64)
        return EmbeddingSplit(
            images=self.images,
            captions=self.captions[keep],
            caption_to_image=self.caption_to_image[keep],
            image_ids=self.image_ids,
            caption_texts=None if self.caption_texts is None else [self.caption_texts[j] for j in keep],
            extras={k: (v[keep] if self._per_caption(k) else v) for k, v in self.extras.items()},
        )


@dataclass
class EmbeddingDataset:
    """Named splits of paired embeddings plus provenance (``source`` is "synthetic" or "real")."""

    name: str
    source: str
    splits: Dict[str, EmbeddingSplit]
    meta: Dict[str, object] = field(default_factory=dict)

    def __post_init__(self):
        if self.source not in ("synthetic", "real"):
            raise ValueError(f"source must be 'synthetic' or 'real'; got {self.source!r}")

    def split(self, name: str) -> EmbeddingSplit:
        if name not in self.splits:
            raise ValueError(f"dataset {self.name!r} has no split {name!r}; available: {sorted(self.splits)}")
        return self.splits[name]

    def tasks(self, split: str = "test", bank: Optional[str] = "train", *, query_bank_fraction: float = 1.0,
              seed: int = 0, directions=("t2i", "i2t")) -> Dict[str, RetrievalTask]:
        """t2i and i2t tasks on ``split`` with reference banks drawn from split ``bank``.

        ``query_bank_fraction`` < 1 subsamples the *query* banks (captions for t2i, images for i2t) with ``seed``;
        the target banks stay whole (DBSN uses all training targets even when the query bank is subsampled). (The
        notebooks' ``bank_fraction`` is another thing: a share of the training *images* with all their captions,
        both banks at once, :func:`hubnorm_companion.protocol.reference_split`.)
        """
        test = self.split(split)
        meta = {"dataset": self.name, "source": self.source, "split": split, "bank": bank, **self.meta}
        if bank is None:
            return build_tasks(test.images, test.captions, test.caption_to_image, directions=directions, meta=meta)
        ref = self.split(bank)
        caption_bank, image_bank = ref.captions, ref.images
        query_bank_fraction = check_fraction(query_bank_fraction, "query_bank_fraction")
        tasks = build_tasks(test.images, test.captions, test.caption_to_image, image_bank=image_bank,
                            caption_bank=caption_bank, directions=directions,
                            meta={**meta, "query_bank_fraction": query_bank_fraction})
        return query_bank_share(tasks, query_bank_fraction, seed)


def validation_size(n_train: int, n_test: int) -> int:
    """THE rule for a validation split held out of the training split (a ``local:`` folder, a cache without
    "val"), stated once and followed everywhere: the size of the test split when the training split has at least
    twice as many images (NNN App. B: "a random subset of the training set with the same size as the test set"),
    else a third of the training split (at least 1 image), so that a reference bank remains. 0 when the training
    split has fewer than 2 images."""
    n_train, n_test = int(n_train), int(n_test)
    if n_train < 2:
        return 0
    return n_test if n_train >= 2 * n_test else max(1, n_train // 3)


def hold_out_val(ds: "EmbeddingDataset", seed: int = 0) -> "EmbeddingDataset":
    """Give ``ds`` a ``"val"`` split of :func:`validation_size` images held out of ``"train"`` (seeded; in place,
    also returned). A dataset that has a "val" split, or lacks "train" or "test", is returned unchanged."""
    if "val" in ds.splits or "train" not in ds.splits or "test" not in ds.splits:
        return ds
    train = ds.splits["train"]
    size = validation_size(train.n_images, ds.splits["test"].n_images)
    if 0 < size < train.n_images:
        perm = np.random.default_rng(seed).permutation(train.n_images)
        ds.splits["val"] = train.subset_images(np.sort(perm[:size]))
        ds.splits["train"] = train.subset_images(np.sort(perm[size:]))
        rule = "the size of test" if size == ds.splits["test"].n_images else "a third of train (train < 2 x test)"
        ds.meta["val_split"] = f"held out from train ({size} images: {rule}; seed {seed})"
    return ds
