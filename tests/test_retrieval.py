"""The retrieval model: Positives, RetrievalTask, build_tasks, and offset-based vector-index augmentation."""

import numpy as np
import pytest

import hubnorm as hn
from conftest import unit_rows

pytestmark = pytest.mark.usefixtures("single_thread_torch")


def test_positives_from_labels_and_groups():
    c2i = np.array([0, 0, 1, 2, 2, 2])
    t2i = hn.Positives.from_labels(c2i, 3)
    assert t2i.n_queries == 6 and t2i.n_targets == 3
    assert [t2i.of(i).tolist() for i in range(6)] == [[0], [0], [1], [2], [2], [2]]
    i2t = hn.Positives.from_groups(c2i, n_queries=3)
    assert i2t.n_queries == 3 and i2t.n_targets == 6
    assert [sorted(i2t.of(i).tolist()) for i in range(3)] == [[0, 1], [2], [3, 4, 5]]
    np.testing.assert_array_equal(i2t.query_of_entry, [0, 0, 1, 2, 2, 2])
    sub = i2t.subset([2, 0])
    assert [sub.of(i).tolist() for i in range(2)] == [[3, 4, 5], [0, 1]]
    lists = hn.Positives.from_lists([[4, 1], [0]], 5)
    assert lists.of(0).tolist() == [4, 1] and len(lists) == 2


def test_build_tasks_uneven_captions_and_banks():
    rng = np.random.default_rng(0)
    imgs = unit_rows(rng, 4, 6)
    c2i = np.array([0, 0, 1, 1, 1, 1, 1, 1, 2, 3])  # image 1 has 6 captions (like COCO's odd ones)
    caps = unit_rows(rng, 10, 6)
    ib, cb = unit_rows(rng, 7, 6), unit_rows(rng, 9, 6)
    tasks = hn.build_tasks(imgs, caps, c2i, image_bank=ib, caption_bank=cb)
    t2i, i2t = tasks["t2i"], tasks["i2t"]
    assert t2i.direction == "t2i" and i2t.direction == "i2t"
    assert t2i.queries is caps and t2i.targets is imgs
    assert t2i.query_bank is cb and t2i.target_bank is ib
    assert i2t.query_bank is ib and i2t.target_bank is cb
    assert sorted(i2t.positives.of(1).tolist()) == [2, 3, 4, 5, 6, 7]
    only = hn.build_tasks(imgs, caps, c2i, directions=("i2t",))
    assert list(only) == ["i2t"]


def test_i2t_ranks_match_reference_on_uneven_groups():
    rng = np.random.default_rng(1)
    imgs = unit_rows(rng, 6, 8)
    c2i = np.array([0, 1, 1, 2, 3, 3, 3, 4, 5, 5])
    caps = hn.l2_normalize(imgs[c2i] + 0.8 * rng.standard_normal((10, 8)).astype(np.float32))
    task = hn.build_tasks(imgs, caps, c2i)["i2t"]
    raw = task.fit(hn.Identity(device="cpu"))
    S = imgs @ caps.T
    ref = [min(np.flatnonzero(np.argsort(-S[i], kind="stable") == j)[0] for j in np.flatnonzero(c2i == i)) for i in range(6)]
    np.testing.assert_array_equal(hn.positive_ranks(raw, task.positives, imgs), ref)


def test_query_aware_fit_uses_test_queries():
    rng = np.random.default_rng(2)
    imgs, caps = unit_rows(rng, 10, 8, np.float64), unit_rows(rng, 30, 8, np.float64)
    task = hn.build_tasks(imgs, caps, np.repeat(np.arange(10), 3), caption_bank=unit_rows(rng, 5, 8, np.float64))["t2i"]
    qa = task.fit(hn.InvertedSoftmax(tau=0.05, device="cpu"), query_aware=True)
    ref = hn.InvertedSoftmax(tau=0.05, device="cpu").fit(imgs, query_bank=caps)
    np.testing.assert_allclose(qa.offsets, ref.offsets)
    qb = task.fit(hn.InvertedSoftmax(tau=0.05, device="cpu"))
    assert not np.allclose(qb.offsets, ref.offsets)


@pytest.mark.parametrize("name", ["raw", "nnn", "dn", "is", "csls", "dualis", "sn", "dbsn"])
def test_augmented_vectors_reproduce_offset_ranking(name):
    rng = np.random.default_rng(3)
    q, t, qb, tb = (unit_rows(rng, n, 12, np.float64) for n in (40, 25, 30, 20))
    norm = hn.make_normalizer(name, **({"k": 5} if name in ("nnn", "csls") else {}), device="cpu")
    norm.fit(t, query_bank=qb, target_bank=tb)
    assert norm.is_offset
    aug = norm.augment_queries(q) @ norm.augment_targets().T
    np.testing.assert_allclose(aug, q @ t.T + norm.offsets[None, :], atol=1e-12)
    ours = norm.score(q).numpy()
    np.testing.assert_array_equal(np.argsort(-aug, axis=1, kind="stable"), np.argsort(-ours, axis=1, kind="stable"))


def test_registry_round_trip_and_params():
    for name, cls in hn.NORMALIZERS.items():
        norm = hn.make_normalizer(name.upper())
        assert isinstance(norm, cls) and norm.name == name
        clone = norm.clone()
        assert clone is not norm and clone.get_params() == norm.get_params()
    nnn = hn.make_normalizer("nnn", alpha=0.3, k=7)
    assert nnn.get_params()["alpha"] == 0.3 and nnn.clone(k=9).k == 9
    assert nnn.set_params(alpha=0.9).alpha == 0.9
    assert "alpha=0.9" in repr(nnn)


def test_query_bank_fraction_subsamples_the_query_banks_only():
    """Issue 43: ``bank_fraction`` had two meanings (notebook 01: a share of the training images with their captions;
    notebook 06: a share of the training queries); the second is ``query_bank_fraction``."""
    import hubnorm as hn

    ds = hn.load_embeddings("synthetic:coco", seed=1, n_train_images=40, n_test_images=10, n_val_images=0)
    full = ds.tasks("test", "train")
    half = ds.tasks("test", "train", query_bank_fraction=0.5, seed=3)
    for d, (nq, nt) in {"t2i": (200, 40), "i2t": (40, 200)}.items():
        assert len(full[d].query_bank) == nq and len(half[d].query_bank) == nq // 2
        assert len(half[d].target_bank) == nt   # the target banks stay whole
        assert half[d].meta["query_bank_fraction"] == 0.5
    rows = {tuple(r) for r in full["t2i"].query_bank}
    assert all(tuple(r) in rows for r in half["t2i"].query_bank)   # a subset, not new rows
    for bad, error in ((0, ValueError), (1.5, ValueError), (True, TypeError), ("0.5", TypeError)):
        with pytest.raises(error, match="query_bank_fraction"):
            ds.tasks("test", "train", query_bank_fraction=bad)
    with pytest.raises(TypeError):
        ds.tasks("test", "train", bank_fraction=0.5)
