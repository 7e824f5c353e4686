"""``hubnorm.embeddings`` in small pieces, on tiny hand-made splits: :class:`EmbeddingSplit`'s checks by their messages
(at their boundaries, and an empty split), its sizes and ``subset_images`` against the subset written out by hand
(renumbered images, captions in order, ids, texts and extras per image or per caption); :class:`EmbeddingDataset`'s
checks, ``tasks`` without a bank, with whole banks and with a subsampled query bank (the rows drawn here from the same
seeded generator, in the order of the directions; the size rounded, at least 1), ``query_bank_fraction`` refused at
and past its bounds; ``validation_size`` at every boundary of its rule, and ``hold_out_val`` against the permutation
written out here.

Survivors judged equivalent (no test can tell them apart):
- ``subset_images``: ``dtype=np.int64`` dropped from ``-np.ones`` of ``remap`` (the float indices it then gives are
  made int64 by the new split's ``__post_init__``).
- ``tasks``: ``replace=False`` -> ``replace=None`` in ``rng.choice`` (falsy as well).
- ``tasks``: ``query_bank_fraction < 1`` -> ``<= 1`` or ``< 2`` (a fraction of 1 then draws every row, sorted: the
  same bank).
- ``hold_out_val``: ``0 < size < train.n_images`` with ``<`` -> ``<=`` on the right: :func:`validation_size` is always
  below ``n_train`` when it is not 0 (``n_test <= n_train / 2``, or ``max(1, n_train // 3) < n_train`` for
  ``n_train >= 2``).
"""

from __future__ import annotations

import numpy as np
import pytest

from hubnorm.embeddings import EmbeddingDataset, EmbeddingSplit, hold_out_val, validation_size


def _split(n_images=3, c2i=(0, 0, 1, 2, 2, 2), d=4, seed=0, **kw):
    rng = np.random.default_rng(seed)
    images, captions = rng.standard_normal((n_images, d)), rng.standard_normal((len(c2i), d))
    return EmbeddingSplit(images=images / np.linalg.norm(images, axis=1, keepdims=True),
                          captions=captions / np.linalg.norm(captions, axis=1, keepdims=True),
                          caption_to_image=np.asarray(c2i), **kw)


def _dataset(n_train=6, n_test=3, seed=0, meta=None, **splits):
    train_c2i = np.arange(n_train).repeat(2)
    test_c2i = np.arange(n_test).repeat(2)
    base = {"train": _split(n_train, train_c2i, seed=seed), "test": _split(n_test, test_c2i, seed=seed + 1)}
    base.update(splits)
    return EmbeddingDataset("toy", "synthetic", base, meta=dict(meta or {}))


# -------------------------------------------------------------------------------------------------- EmbeddingSplit
def test_split_converts_the_index_and_counts():
    s = _split(c2i=[0.0, 1.0, 2.0, 2.0])
    assert s.caption_to_image.dtype == np.int64
    np.testing.assert_array_equal(s.caption_to_image, [0, 1, 2, 2])
    assert s.n_images == 3 and s.n_captions == 4
    assert s.extras == {} and s.image_ids is None and s.caption_texts is None
    assert _split(c2i=[0]).extras is not _split(c2i=[0]).extras         # a fresh dict each time


def test_split_checks_the_index():
    with pytest.raises(ValueError, match=r"caption_to_image has 2 entries but there are 3 caption embeddings: the "
                                         r"embeddings and the annotation file do not match"):
        EmbeddingSplit(np.zeros((3, 2)), np.zeros((3, 2)), [0, 1])
    with pytest.raises(ValueError, match=r"caption_to_image has a negative image index \(-2\): every caption needs the "
                                         r"index of its image, 0 \.\. n_images - 1"):
        EmbeddingSplit(np.zeros((3, 2)), np.zeros((3, 2)), [0, -2, -1])
    with pytest.raises(ValueError, match=r"caption_to_image refers to image 3 but there are only 3 image embeddings"):
        EmbeddingSplit(np.zeros((3, 2)), np.zeros((3, 2)), [0, 3, 1])
    # the boundaries are allowed: image 0 and image n_images - 1
    s = EmbeddingSplit(np.zeros((3, 2)), np.zeros((2, 2)), [0, 2])
    np.testing.assert_array_equal(s.caption_to_image, [0, 2])
    # a split without captions has nothing to check
    s = EmbeddingSplit(np.zeros((3, 2)), np.zeros((0, 2)), [])
    assert s.n_captions == 0 and s.caption_to_image.dtype == np.int64


def test_subset_images_renumbers_and_keeps_captions_in_order():
    s = _split(n_images=4, c2i=(3, 0, 1, 3, 2, 0), image_ids=["a", "b", "c", "d"],
               caption_texts=["t0", "t1", "t2", "t3", "t4", "t5"],
               extras={"topic": np.array([10, 11, 12, 13]), "caption_n": np.array([0, 1, 2, 3, 4, 5])})
    sub = s.subset_images([3, 1])
    np.testing.assert_array_equal(sub.images, s.images[[3, 1]])
    # captions of images 3 and 1, in their original order (rows 0, 2, 3), renumbered: 3 -> 0, 1 -> 1
    np.testing.assert_array_equal(sub.captions, s.captions[[0, 2, 3]])
    np.testing.assert_array_equal(sub.caption_to_image, [0, 1, 0])
    assert sub.image_ids == ["d", "b"] and sub.caption_texts == ["t0", "t2", "t3"]
    np.testing.assert_array_equal(sub.extras["topic"], [13, 11])
    np.testing.assert_array_equal(sub.extras["caption_n"], [0, 2, 3])
    assert s.n_images == 4 and s.n_captions == 6                         # the original is unchanged
    sub = s.subset_images(np.array([0]))
    np.testing.assert_array_equal(sub.caption_to_image, [0, 0])
    np.testing.assert_array_equal(sub.captions, s.captions[[1, 5]])
    assert sub.image_ids == ["a"] and sub.caption_texts == ["t1", "t5"]
    none = s.subset_images([])                                          # no images: an empty split, not an error
    assert none.n_images == 0 and none.n_captions == 0 and none.caption_to_image.dtype == np.int64
    assert none.image_ids == [] and none.caption_texts == [] and len(none.extras["topic"]) == 0
    bare = _split().subset_images([2])
    assert bare.image_ids is None and bare.caption_texts is None and bare.extras == {}
    assert bare.n_captions == 3



def test_subset_captions_keeps_every_image_and_the_chosen_captions_in_order():
    s = _split(n_images=4, c2i=(3, 0, 1, 3, 2, 0), image_ids=["a", "b", "c", "d"],
               caption_texts=["t0", "t1", "t2", "t3", "t4", "t5"],
               extras={"topic": np.array([10, 11, 12, 13]), "caption_n": np.array([0, 1, 2, 3, 4, 5])})
    sub = s.subset_captions([5, 0, 2])
    np.testing.assert_array_equal(sub.images, s.images)
    np.testing.assert_array_equal(sub.captions, s.captions[[5, 0, 2]])
    np.testing.assert_array_equal(sub.caption_to_image, [0, 3, 1])      # image indices unchanged
    assert sub.image_ids == ["a", "b", "c", "d"] and sub.caption_texts == ["t5", "t0", "t2"]
    np.testing.assert_array_equal(sub.extras["topic"], [10, 11, 12, 13])
    np.testing.assert_array_equal(sub.extras["caption_n"], [5, 0, 2])
    assert s.n_captions == 6 and _split().subset_captions([1]).caption_texts is None


def test_an_extra_is_per_caption_by_its_key_not_by_its_length():
    """With as many captions as images, a per-caption extra was indexed by the image indices (its length decided):
    the kept captions of images [2, 0] are captions 0 and 2 here, whose values are [10, 12], not [12, 10]."""
    s = EmbeddingSplit(np.eye(3), np.eye(3), [2, 1, 0], extras={"caption_topic": np.array([10, 11, 12]),
                                                                 "topic": np.array([20, 21, 22])})
    sub = s.subset_images([2, 0])
    np.testing.assert_array_equal(sub.caption_to_image, [0, 1])        # caption 0 -> image 2, caption 2 -> image 0
    np.testing.assert_array_equal(sub.extras["caption_topic"], [10, 12])
    np.testing.assert_array_equal(sub.extras["topic"], [22, 20])
    with pytest.raises(ValueError, match=r"extras\['caption_topic'\] has 3 entries but the split has 6 captions"):
        EmbeddingSplit(np.eye(3), np.zeros((6, 3)), [0, 0, 1, 1, 2, 2], extras={"caption_topic": np.arange(3)})
    with pytest.raises(ValueError, match=r"extras\['topic'\] has 6 entries but the split has 3 images: an extra is "
                                         r"per image, or per caption when its key starts with 'caption_'"):
        EmbeddingSplit(np.eye(3), np.zeros((6, 3)), [0, 0, 1, 1, 2, 2], extras={"topic": np.arange(6)})


# ------------------------------------------------------------------------------------------------ EmbeddingDataset
def test_dataset_checks_its_source_and_split_names():
    for source in ("synthetic", "real"):
        assert EmbeddingDataset("x", source, {}).source == source
    with pytest.raises(ValueError, match=r"source must be 'synthetic' or 'real'; got 'fake'"):
        EmbeddingDataset("x", "fake", {})
    ds = _dataset()
    assert ds.split("train") is ds.splits["train"] and ds.meta == {}
    with pytest.raises(ValueError, match=r"dataset 'toy' has no split 'val'; available: \['test', 'train'\]"):
        ds.split("val")


def test_tasks_without_a_bank():
    ds = _dataset(meta={"model": "m"})
    tasks = ds.tasks(bank=None)
    assert set(tasks) == {"t2i", "i2t"}
    t2i, i2t = tasks["t2i"], tasks["i2t"]
    test = ds.splits["test"]
    np.testing.assert_array_equal(t2i.queries, test.captions)
    np.testing.assert_array_equal(t2i.targets, test.images)
    np.testing.assert_array_equal(i2t.queries, test.images)
    assert t2i.query_bank is None and t2i.target_bank is None and i2t.query_bank is None
    assert t2i.meta == {"dataset": "toy", "source": "synthetic", "split": "test", "bank": None, "model": "m"}
    assert list(t2i.positives.of(4)) == [2]
    only = ds.tasks("train", bank=None, directions=("i2t",))
    assert set(only) == {"i2t"}
    np.testing.assert_array_equal(only["i2t"].queries, ds.splits["train"].images)
    assert only["i2t"].meta["split"] == "train"


def test_tasks_with_whole_banks():
    ds = _dataset()
    tasks = ds.tasks()                                                   # test split, train banks, fraction 1
    train = ds.splits["train"]
    t2i, i2t = tasks["t2i"], tasks["i2t"]
    np.testing.assert_array_equal(t2i.query_bank, train.captions)
    np.testing.assert_array_equal(t2i.target_bank, train.images)
    np.testing.assert_array_equal(i2t.query_bank, train.images)
    np.testing.assert_array_equal(i2t.target_bank, train.captions)
    np.testing.assert_array_equal(i2t.targets, ds.splits["test"].captions)
    assert t2i.meta == {"dataset": "toy", "source": "synthetic", "split": "test", "bank": "train",
                        "query_bank_fraction": 1.0}
    assert ds.tasks(query_bank_fraction=1)["t2i"].meta["query_bank_fraction"] == 1     # an int is a number
    one = ds.tasks(directions=("i2t",), query_bank_fraction=0.5)
    assert set(one) == {"i2t"} and len(one["i2t"].query_bank) == 3


@pytest.mark.parametrize("seed", [0, 5])
def test_tasks_subsample_the_query_banks_only(seed):
    ds = _dataset(n_train=6)                                             # 6 images, 12 captions
    train = ds.splits["train"]
    frac = 0.625                                          # 12 captions -> 7.5 -> 8 rows; 6 images -> 3.75 -> 4 rows
    tasks = ds.tasks(query_bank_fraction=frac, seed=seed)
    rng = np.random.default_rng(seed)                                    # the draws in the order of the directions
    cap_rows = np.sort(rng.choice(12, 8, replace=False))
    img_rows = np.sort(rng.choice(6, 4, replace=False))
    np.testing.assert_array_equal(tasks["t2i"].query_bank, train.captions[cap_rows])
    np.testing.assert_array_equal(tasks["t2i"].target_bank, train.images)            # target banks stay whole
    np.testing.assert_array_equal(tasks["i2t"].query_bank, train.images[img_rows])
    np.testing.assert_array_equal(tasks["i2t"].target_bank, train.captions)
    assert tasks["t2i"].meta["query_bank_fraction"] == frac and tasks["i2t"].meta["bank"] == "train"
    # the other order of directions draws the images first
    rev = ds.tasks(query_bank_fraction=frac, seed=seed, directions=("i2t", "t2i"))
    rng = np.random.default_rng(seed)
    img_rows = np.sort(rng.choice(6, 4, replace=False))
    cap_rows = np.sort(rng.choice(12, 8, replace=False))
    np.testing.assert_array_equal(rev["i2t"].query_bank, train.images[img_rows])
    np.testing.assert_array_equal(rev["t2i"].query_bank, train.captions[cap_rows])


def test_tasks_draw_with_seed_0_by_default():
    ds = _dataset(n_train=6)
    rows = np.sort(np.random.default_rng(0).choice(12, 6, replace=False))
    got = ds.tasks(query_bank_fraction=0.5)["t2i"].query_bank
    np.testing.assert_array_equal(got, ds.splits["train"].captions[rows])
    other = np.sort(np.random.default_rng(1).choice(12, 6, replace=False))
    assert not np.array_equal(rows, other)                               # the seed matters in this example


def test_tasks_keep_at_least_one_bank_row():
    ds = _dataset(n_train=6)
    tasks = ds.tasks(query_bank_fraction=0.01)                           # 0.12 and 0.06 rows round to 0
    assert len(tasks["t2i"].query_bank) == 1 and len(tasks["i2t"].query_bank) == 1
    assert len(tasks["t2i"].target_bank) == 6 and len(tasks["i2t"].target_bank) == 12


@pytest.mark.parametrize("bad", [0, 0.0, -0.5, 1.5, 2, True, False, "0.5", None])
def test_tasks_refuse_a_fraction_outside_0_1(bad):
    error = TypeError if isinstance(bad, (bool, str, type(None))) else ValueError
    with pytest.raises(error, match=r"query_bank_fraction must be a number in \(0, 1\]; got " + repr(bad)):
        _dataset().tasks(query_bank_fraction=bad)


# ------------------------------------------------------------------------------------- validation_size, hold_out_val
@pytest.mark.parametrize("n_train, n_test, size", [
    (0, 5, 0), (1, 0, 0), (1, 1, 0),                     # fewer than 2 training images: no validation split
    (2, 1, 1), (10, 5, 5), (11, 5, 5), (40, 7, 7),       # at least twice the test split: the size of the test split
    (9, 5, 3), (2, 2, 1), (3, 2, 1), (5, 3, 1), (6, 4, 2),   # else a third of train, at least 1
])
def test_validation_size_follows_the_rule(n_train, n_test, size):
    got = validation_size(n_train, n_test)
    assert got == size and type(got) is int
    got = validation_size(float(n_train), float(n_test))
    assert got == size and type(got) is int


def test_hold_out_val_splits_train_by_the_seeded_permutation():
    ds = _dataset(n_train=9, n_test=3, meta={"model": "m"})
    train = ds.splits["train"]
    out = hold_out_val(ds, seed=4)
    assert out is ds
    perm = np.random.default_rng(4).permutation(9)
    val_idx, train_idx = np.sort(perm[:3]), np.sort(perm[3:])
    np.testing.assert_array_equal(ds.splits["val"].images, train.images[val_idx])
    np.testing.assert_array_equal(ds.splits["train"].images, train.images[train_idx])
    np.testing.assert_array_equal(ds.splits["val"].captions, train.captions[np.sort(np.concatenate(
        [2 * val_idx, 2 * val_idx + 1]))])
    assert ds.splits["val"].n_images == 3 and ds.splits["train"].n_images == 6
    assert ds.meta == {"model": "m", "val_split": "held out from train (3 images: the size of test; seed 4)"}


def test_hold_out_val_takes_a_third_when_train_is_small():
    ds = _dataset(n_train=7, n_test=4)
    hold_out_val(ds)
    perm = np.random.default_rng(0).permutation(7)
    np.testing.assert_array_equal(ds.splits["val"].images, _dataset(n_train=7, n_test=4).splits["train"].images[
        np.sort(perm[:2])])
    assert ds.splits["train"].n_images == 5
    assert ds.meta["val_split"] == "held out from train (2 images: a third of train (train < 2 x test); seed 0)"


def test_hold_out_val_leaves_other_datasets_alone():
    val = _split(n_images=2, c2i=(0, 1))
    ds = _dataset(val=val)
    assert hold_out_val(ds) is ds and ds.splits["val"] is val and ds.splits["train"].n_images == 6
    assert "val_split" not in ds.meta
    for missing in ("train", "test"):
        ds = _dataset()
        del ds.splits[missing]
        before = dict(ds.splits)
        assert hold_out_val(ds) is ds and ds.splits == before and ds.meta == {}
    ds = _dataset(n_train=1)                                              # one training image: nothing to hold out
    assert hold_out_val(ds) is ds and set(ds.splits) == {"train", "test"} and ds.meta == {}
