"""``hubnorm_companion.rerank_study`` in small pieces: which splits ``can_simulate``, the measured per-pair cost a
simulated cross-encoder is given (and ``None`` when the report cannot be read), ``make_cross_encoder`` for both kinds
and both directions with and without a separate query split or distractors (the BLIP one through a recorder in place
of ``BlipITMCrossEncoder.from_pretrained``: the image files and caption texts it would be built on, in order), every
refusal by its message, ``full_gallery_recall`` against a rank count by hand (its ``every`` guard at each boundary,
query blocks of about 2M pairs over a gallery of 666,667 and of 1,000,001 targets) and ``nnn_on_cross_encoder`` on a
case worked out by hand where the NNN bias over the top 16 bank scores and over the top 17 rank differently, with
``bank_query_ids`` and its guards at their boundaries.

Bug fixed (and tested here): ``nnn_on_cross_encoder`` cast ``bank_query_ids`` to int64, so float ids were truncated
silently (``0.9`` read as bank query 0), where every other index of the library is refused unless it holds integers
(``check_pair_ids``, ``Positives``); it now raises TypeError for non-integer ids.

Mutation run (``--tests tests/test_rerank_pipeline.py`` [+ this file]): 234 killed, 157 survived (60%) -> 387 of 395
killed (98%); every survivor left is one of these, judged equivalent (no test can tell them apart):
- ``make_cross_encoder``: ``target_split_name="test"`` dropped in the one-split call (``"test"`` is
  ``SimulatedCrossEncoder.from_splits``'s default).
- ``nnn_on_cross_encoder``: ``second_stage="XXnnn-on-ceXX"`` / ``"NNN-ON-CE"`` / ``None`` or the label dropped (a
  meta label of the intermediate result, of which only the ranks are used); ``cand.reshape(-2)`` and
  ``cand.reshape(None)`` (NumPy reads any negative size as "the rest", and ``nnn_bias_from_pairs`` flattens its
  input itself).
"""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pandas as pd
import pytest

import hubnorm as hn
from hubnorm_companion import rerank_cost, rerank_study
from hubnorm_companion.rerank_study import (
    CROSS_ENCODERS, can_simulate, full_gallery_recall, make_cross_encoder, nnn_on_cross_encoder,
)
from hubnorm.rerank import CrossEncoder, SimulatedCrossEncoder, rerank
from hubnorm.rerank.blip import BlipITMCrossEncoder


class MatrixCE(CrossEncoder):
    """A cross-encoder that looks its scores up in a dense matrix."""

    model_id = "matrix-ce"

    def __init__(self, scores):
        self.S = np.asarray(scores, dtype=float)
        super().__init__([f"q{i}" for i in range(self.S.shape[0])], [f"t{j}" for j in range(self.S.shape[1])])

    def _score_uncached(self, q, t):
        return self.S[q, t]


class FormulaCE:
    """A stand-in with the three members ``full_gallery_recall`` uses, scoring by a formula (no per-item keys: a
    gallery of a million targets stays cheap); records the size of every call."""

    def __init__(self, n_queries, n_targets, positive):
        self.n_queries, self.n_targets, self.positive, self.calls = n_queries, n_targets, positive, []

    def score(self, q, t):
        # the positive of query q scores q + 0.5: exactly q targets (ids 0 .. q-1, scoring 1 each) beat it
        return np.where(t == self.positive[q], q + 0.5, np.where(t < q, 1000.0, -1.0 * t / self.n_targets))

    def score_pairs(self, q, t):
        self.calls.append(q.size)
        return self.score(np.asarray(q), np.asarray(t))


@pytest.fixture(scope="module")
def synthetic():
    from hubnorm.synthetic import make_dataset

    ds = make_dataset("flickr30k", n_train_images=12, n_test_images=10, n_val_images=1, seed=5)
    other = make_dataset("coco", n_train_images=1, n_test_images=6, n_val_images=1, seed=6).split("test")
    return ds.split("test"), ds.split("train"), other


def _real(split, **kw):
    return hn.EmbeddingSplit(images=split.images, captions=split.captions, caption_to_image=split.caption_to_image,
                             **kw)


# ------------------------------------------------------------------------------------------------ can_simulate
def test_can_simulate(synthetic):
    test, _, _ = synthetic
    assert can_simulate(test) is True
    assert can_simulate(_real(test)) is False
    assert can_simulate(types.SimpleNamespace()) is False   # no extras at all
    assert can_simulate(types.SimpleNamespace(extras={"LATENT": 1, "latents": 2})) is False
    assert CROSS_ENCODERS == ("simulated", "blip")


# ------------------------------------------------------------------------------------------------ simulated
def test_simulated_gets_the_measured_pair_cost(synthetic, monkeypatch):
    test, _, _ = synthetic
    df = pd.read_csv(rerank_cost.PACKAGED_LATENCY)
    measured = float(dict(zip(df["key"], df["value"]))["pair_full_s"])
    assert make_cross_encoder("simulated", test, "t2i").cost_per_pair_s == measured
    assert make_cross_encoder("simulated", test, "t2i", cost_per_pair_s=0.25).cost_per_pair_s == 0.25
    assert make_cross_encoder("simulated", test, "t2i", cost_per_pair_s=None).cost_per_pair_s is None
    for error in (ValueError("no report"), OSError("unreadable")):
        def broken(*a, _e=error, **kw):
            raise _e
        monkeypatch.setattr(rerank_cost, "load_cost_model", broken)
        assert make_cross_encoder("simulated", test, "t2i").cost_per_pair_s is None


@pytest.mark.parametrize("direction", ["t2i", "i2t"])
def test_simulated_on_one_split_and_across_splits(synthetic, direction, tmp_path):
    test, train, other = synthetic
    ce = make_cross_encoder("simulated", test, direction)   # seed 0, the test split against itself
    ref = SimulatedCrossEncoder.from_split(test, direction, seed=0)
    np.testing.assert_array_equal(ce.query_uid, ref.query_uid)
    np.testing.assert_array_equal(ce.target_uid, ref.target_uid)
    q, t = np.repeat(np.arange(ce.n_queries), 3), np.tile(np.arange(3), ce.n_queries)
    np.testing.assert_array_equal(ce.score_pairs(q, t), ref.score_pairs(q, t))
    assert ce.direction == direction and ce.cache is None
    cached = make_cross_encoder("simulated", test, direction, cache_dir=tmp_path / "one")
    assert cached.cache.directory == tmp_path / "one"
    # training captions (or images) as reference queries against the test gallery, with distractors, seed and
    # constructor arguments passed on
    ce = make_cross_encoder("simulated", test, direction, query_split=train, distractors=other, seed=4,
                            cache_dir=tmp_path, target_bias=0.5, cost_per_pair_s=1.0)
    ref = SimulatedCrossEncoder.from_splits(train, test, direction, distractors=other, seed=4, target_bias=0.5)
    np.testing.assert_array_equal(ce.query_uid, ref.query_uid)
    np.testing.assert_array_equal(ce.target_uid, ref.target_uid)
    assert (ce.n_queries, ce.n_targets) == (ref.n_queries, ref.n_targets)
    q, t = np.repeat(np.arange(4), ce.n_targets), np.tile(np.arange(ce.n_targets), 4)
    np.testing.assert_array_equal(ce.score_pairs(q, t), ref.score_pairs(q, t))
    assert ce.seed == 4 and ce.target_bias == 0.5 and ce.cost_per_pair_s == 1.0
    assert ce.cache.directory == tmp_path and ce.cache.path.is_file()


def test_simulated_refuses_a_split_without_latent_truth(synthetic):
    test, train, other = synthetic
    msg = ("the simulated cross-encoder reads the latent truth of synthetic data, which this split does not have "
           "(real data): use cross_encoder='blip' with the image files and caption texts, or a synthetic source")
    for kw in ({"split": _real(test)}, {"split": test, "query_split": _real(train)},
               {"split": test, "distractors": _real(other)}):
        split = kw.pop("split")
        with pytest.raises(ValueError) as err:
            make_cross_encoder("simulated", split, "t2i", **kw)
        assert str(err.value) == msg


def test_kind_and_direction_guards(synthetic):
    test, _, _ = synthetic
    with pytest.raises(ValueError, match=r"^cross_encoder must be one of \('simulated', 'blip'\); got 'oscar'$"):
        make_cross_encoder("oscar", test, "t2i")
    with pytest.raises(ValueError, match=r"got 'Simulated'"):
        make_cross_encoder("Simulated", test, "t2i")
    for kind in CROSS_ENCODERS:
        with pytest.raises(ValueError, match=r"^direction must be 't2i' or 'i2t'; got 'x2y'$"):
            make_cross_encoder(kind, test, "x2y")


# ------------------------------------------------------------------------------------------------ blip
@pytest.fixture
def recorded(monkeypatch):
    """``BlipITMCrossEncoder.from_pretrained`` replaced by a recorder: no weights are loaded."""
    calls = []

    def fake(cls, images, captions, **kwargs):
        calls.append({"images": images, "captions": captions, **kwargs})
        return calls[-1]

    monkeypatch.setattr(BlipITMCrossEncoder, "from_pretrained", classmethod(fake))
    return calls


def _named(split, folder, prefix, files=True, suffix=""):
    """``split`` with image ids ``<prefix><i><suffix>`` (files written into ``folder``) and caption texts."""
    ids = [f"{prefix}{i}{suffix}" for i in range(split.n_images)]
    if files:
        folder.mkdir(exist_ok=True)
        for iid in ids:
            (folder / (iid if suffix else iid + ".jpg")).write_bytes(b"jpg")
    return _real(split, image_ids=ids, caption_texts=[f"{prefix} caption {j}" for j in range(split.n_captions)])


def test_blip_on_one_split(synthetic, tmp_path, recorded):
    test, _, _ = synthetic
    named = _named(test, tmp_path / "img", "te")
    for direction in ("t2i", "i2t"):
        out = make_cross_encoder("blip", named, direction, image_dir=tmp_path / "img", cache_dir=tmp_path / "c",
                                 batch_size=3)
        assert out == {"images": [str(tmp_path / "img" / f"te{i}.jpg") for i in range(test.n_images)],
                       "captions": named.caption_texts, "direction": direction, "cache_dir": tmp_path / "c",
                       "batch_size": 3}
    assert all(type(p) is str for p in out["images"])
    # ids that are paths (no image_dir): used as they are, no suffix appended; an id with a suffix keeps it
    paths = _real(test, image_ids=[str(tmp_path / "img" / f"te{i}.jpg") for i in range(test.n_images)],
                  caption_texts=named.caption_texts)
    assert make_cross_encoder("blip", paths, "t2i")["images"] == paths.image_ids
    (tmp_path / "bare").write_bytes(b"jpg")
    bare = _real(test, image_ids=[str(tmp_path / "bare")] * test.n_images, caption_texts=named.caption_texts)
    assert make_cross_encoder("blip", bare, "t2i")["images"] == bare.image_ids
    png = _named(test, tmp_path / "png", "p", suffix=".png")
    assert make_cross_encoder("blip", png, "t2i", image_dir=str(tmp_path / "png"))["images"] == [
        str(tmp_path / "png" / f"p{i}.png") for i in range(test.n_images)]


def test_blip_with_a_query_split(synthetic, tmp_path, recorded):
    test, train, _ = synthetic
    gallery = _named(test, tmp_path, "te")
    queries = _named(train, tmp_path, "tr")
    t2i = make_cross_encoder("blip", gallery, "t2i", query_split=queries, image_dir=tmp_path)
    assert t2i["images"] == [str(tmp_path / f"te{i}.jpg") for i in range(test.n_images)]
    assert t2i["captions"] == queries.caption_texts
    i2t = make_cross_encoder("blip", gallery, "i2t", query_split=queries, image_dir=tmp_path)
    assert i2t["images"] == [str(tmp_path / f"tr{i}.jpg") for i in range(train.n_images)]
    assert i2t["captions"] == gallery.caption_texts
    textless = _real(train)   # t2i reads only the query split's caption texts
    with pytest.raises(ValueError,
                       match=r"^cross_encoder='blip' needs caption texts \(split\.caption_texts is None\)$"):
        make_cross_encoder("blip", gallery, "t2i", query_split=textless, image_dir=tmp_path)


def test_blip_with_distractors(synthetic, tmp_path, recorded):
    test, _, other = synthetic
    gallery = _named(test, tmp_path, "te")
    extra = _named(other, tmp_path, "ex")
    t2i = make_cross_encoder("blip", gallery, "t2i", distractors=extra, image_dir=tmp_path)
    assert t2i["images"] == ([str(tmp_path / f"te{i}.jpg") for i in range(test.n_images)]
                             + [str(tmp_path / f"ex{i}.jpg") for i in range(other.n_images)])
    assert t2i["captions"] == gallery.caption_texts
    i2t = make_cross_encoder("blip", gallery, "i2t", distractors=extra, image_dir=tmp_path)
    assert i2t["images"] == [str(tmp_path / f"te{i}.jpg") for i in range(test.n_images)]
    assert i2t["captions"] == gallery.caption_texts + extra.caption_texts
    with pytest.raises(ValueError, match=r"^cross_encoder='blip' needs the distractors' caption texts "
                                         r"\(distractors\.caption_texts is None\)$"):
        make_cross_encoder("blip", gallery, "i2t", distractors=_real(other), image_dir=tmp_path)


def test_blip_refuses_missing_ids_texts_and_files(synthetic, tmp_path, recorded):
    test, _, _ = synthetic
    texts = [f"c{j}" for j in range(test.n_captions)]
    ids = [f"img{i}" for i in range(test.n_images)]
    head = ("cross_encoder='blip' needs the images and the caption texts of the data (split.image_ids and "
            "split.caption_texts); this split has ")
    tail = ": use real data loaded from a folder with a metadata.csv"
    for split, what in ((_real(test), "neither"), (_real(test, caption_texts=texts), "no image ids"),
                        (_real(test, image_ids=ids), "no caption texts")):
        with pytest.raises(ValueError) as err:
            make_cross_encoder("blip", split, "t2i", image_dir=tmp_path)
        assert str(err.value) == head + what + tail
    for i in (0, 1, 2, 3, 5, 6, 7, 8, 9):   # img4 and img7 ... only img4 is absent, then img4 and img9
        if i != 4:
            (tmp_path / f"img{i}.jpg").write_bytes(b"jpg")
    split = _real(test, image_ids=ids, caption_texts=texts)
    with pytest.raises(ValueError) as err:
        make_cross_encoder("blip", split, "t2i", image_dir=tmp_path)
    assert str(err.value) == ("cross_encoder='blip' needs the image files: 1 of 10 are absent (e.g. image id "
                              "'img4.jpg'); pass image_dir=<folder with the images>")
    (tmp_path / "img9.jpg").unlink()
    with pytest.raises(ValueError, match=r": 2 of 10 are absent \(e\.g\. image id 'img4\.jpg'\)"):
        make_cross_encoder("blip", split, "t2i", image_dir=tmp_path)
    assert recorded == []


# ------------------------------------------------------------------------------------------------ full_gallery_recall
def _task(n_queries, n_targets, positive):
    return hn.RetrievalTask(queries=np.ones((n_queries, 1), np.float32), targets=np.ones((n_targets, 1), np.float32),
                            positives=hn.Positives.from_labels(np.asarray(positive), n_targets))


def _recall_by_hand(S, positive, rows, k):
    hits = [int((S[q] > S[q, positive[q]]).sum() < k) for q in rows]   # continuous scores: no ties
    return 100.0 * sum(hits) / len(hits)


@pytest.mark.parametrize("every, rows", [(1, range(13)), (4, [0, 4, 8, 12]), (np.int64(6), [0, 6, 12]),
                                         (13, [0]), (20, [0])])
def test_full_gallery_recall_against_a_rank_count(rng, every, rows):
    S = rng.standard_normal((13, 9))
    positive = rng.integers(0, 9, 13)
    got = full_gallery_recall(_task(13, 9, positive), MatrixCE(S), every=every)
    assert list(got) == ["R@1", "R@5", "R@10", "queries", "pairs/query"]
    for k in (1, 5, 10):
        assert got[f"R@{k}"] == pytest.approx(_recall_by_hand(S, positive, rows, k))
    assert got["queries"] == len(rows) and type(got["queries"]) is int
    assert got["pairs/query"] == 9.0 and type(got["pairs/query"]) is float
    got = full_gallery_recall(_task(13, 9, positive), MatrixCE(S), every=every, ks=(2, 3))
    assert list(got)[:2] == ["R@2", "R@3"]
    assert got["R@3"] == pytest.approx(_recall_by_hand(S, positive, rows, 3))


def test_full_gallery_recall_default_every_is_five(rng):
    S = rng.standard_normal((12, 6))
    positive = rng.integers(0, 6, 12)
    got = full_gallery_recall(_task(12, 6, positive), MatrixCE(S))
    assert got["queries"] == 3   # queries 0, 5, 10
    assert got["R@1"] == pytest.approx(_recall_by_hand(S, positive, [0, 5, 10], 1))


def test_full_gallery_recall_guards(rng):
    task = _task(4, 3, [0, 1, 2, 0])
    ce = MatrixCE(rng.standard_normal((4, 3)))
    for bad in (0, -1, True, 2.0, "2", None):
        with pytest.raises(ValueError, match=rf"^every must be a positive integer; got {bad!r}$"):
            full_gallery_recall(task, ce, every=bad)
    for shape in ((4, 2), (3, 3)):
        with pytest.raises(ValueError, match=rf"^the cross-encoder covers {shape[0]} x {shape[1]} items but the task "
                                             r"has 4 x 3$"):
            full_gallery_recall(task, MatrixCE(np.zeros(shape)), every=1)


@pytest.mark.parametrize("n_targets, block", [(666_667, 2), (1_000_001, 1)])
def test_full_gallery_recall_blocks_of_about_2m_pairs(n_targets, block):
    """Query blocks of ``2,000,000 // n`` queries (at least one): 2 for 666,667 targets (3 would be 2,000,001
    pairs), 1 for more than a million; every query scored once against every target."""
    positive = np.array([5, n_targets - 1, 7])
    task = _task(3, n_targets, positive)
    ce = FormulaCE(3, n_targets, positive)
    got = full_gallery_recall(task, ce, every=1, ks=(1, 2, 3))
    sizes = [block] * (3 // block) + ([3 % block] if 3 % block else [])
    assert ce.calls == [b * n_targets for b in sizes]
    assert got["R@1"] == pytest.approx(100 / 3) and got["R@2"] == pytest.approx(200 / 3) and got["R@3"] == 100.0
    assert got["queries"] == 3 and got["pairs/query"] == float(n_targets)


# ------------------------------------------------------------------------------------------------ nnn_on_cross_encoder
def _hub_case():
    """Six targets; target 0 is a hub. Three test queries, top-2 candidates each: query 0 (positive 1) gets {0, 1},
    query 1 (positive 2) gets {0, 2}, query 2 (positive 5) gets {0, 1} and keeps its positive at first-stage rank 5
    (in R@6, not in R@5). 17 bank queries all retrieve {0, 1}; the bank cross-encoder gives target 0 sixteen scores
    of 1 and one of 0 (bias over the top 16: 1, over the top 17: 16/17), target 1 always 0.5; targets 2 to 5, never
    retrieved, get the mean bias of 0 and 1."""
    task = _task(3, 6, [1, 2, 5])
    first = np.array([[0.9, 0.8, 0.1, 0.0, 0.0, 0.0], [0.9, 0.1, 0.8, 0.0, 0.0, 0.0], [0.9, 0.8, 0.5, 0.4, 0.3, 0.0]])
    S = np.array([[1.5, 1.03, 0.0, 0.0, 0.0, 0.0], [1.5, 0.0, 0.9, 0.0, 0.0, 0.0], [1.0, 0.5, 0.0, 0.0, 0.0, 0.0]])
    base = rerank(first, task, MatrixCE(S), k=2)
    bank_first = np.tile([0.9, 0.8, 0.0, 0.0, 0.0, 0.0], (17, 1))
    B = np.zeros((17, 6))
    B[:16, 0], B[:, 1] = 1.0, 0.5
    return base, bank_first, B


def test_nnn_on_cross_encoder_by_hand():
    """alpha = 1 with the bias over the top 16: query 0 -> target 0: 1.5 - 1 = 0.5, target 1: 1.03 - 0.5 = 0.53
    (a hit); query 1 -> target 0: 0.5, target 2: 0.9 - 0.75 = 0.15 (a miss). alpha 0.5 and 0.25 fix neither.
    Over the top 17, target 0 keeps 1.5 - 16/17 = 0.559 > 0.53: no hit. Query 2 is never a hit; R@5 counts queries 0
    and 1 only."""
    base, bank_first, B = _hub_case()
    out = nnn_on_cross_encoder(base, bank_first, np.zeros((17, 1)), MatrixCE(B))   # alphas .25, .5, 1 and k 16
    assert list(out.columns) == ["variant", "alpha", "R@1", "R@5", "gain R@1", "extra pairs"]
    assert list(out["variant"]) == ["CE only"] + ["NNN on CE scores"] * 3
    assert list(out["alpha"]) == [0.0, 0.25, 0.5, 1.0] and all(type(a) is float for a in out["alpha"])
    third = 100 / 3
    assert out["R@1"].tolist() == pytest.approx([0.0, 0.0, 0.0, third])
    assert out["R@5"].tolist() == pytest.approx([2 * third] * 4)
    assert out["gain R@1"].tolist() == pytest.approx([0.0, 0.0, 0.0, third])
    assert list(out["extra pairs"]) == [34] * 4
    assert list(nnn_on_cross_encoder(base, bank_first, np.zeros((17, 1)), MatrixCE(B), alphas=(1.0,),
                                     k=17)["R@1"]) == [0.0, 0.0]
    # a hit before NNN that NNN keeps: the gain is measured from the CE-only row
    S2 = base.ce_scores.copy()
    S2[1] = [0.5, 0.9]   # query 1: target 2 above the hub already
    base2 = dataclasses.replace(base, ce_scores=S2).with_scores(S2)
    out = nnn_on_cross_encoder(base2, bank_first, np.zeros((17, 1)), MatrixCE(B), alphas=(1.0,))
    assert out["R@1"].tolist() == pytest.approx([third, 2 * third])
    assert out["gain R@1"].tolist() == pytest.approx([0.0, third])


def test_nnn_on_cross_encoder_bank_query_ids():
    """``bank_ce`` covering more queries than the bank: bank query ``i`` is its query ``ids[i]``; the other rows
    (which would hide the hub) are never read."""
    base, bank_first, B = _hub_case()
    big = np.full((30, 6), 0.0)
    big[:, 1] = 5.0
    ids = np.arange(29, 12, -1)   # 17 ids, 29 down to 13
    big[ids] = B
    want = nnn_on_cross_encoder(base, bank_first, np.zeros((17, 1)), MatrixCE(B), alphas=(1.0,))
    got = nnn_on_cross_encoder(base, bank_first, np.zeros((17, 1)), MatrixCE(big), alphas=(1.0,),
                               bank_query_ids=list(ids))
    pd.testing.assert_frame_equal(got, want)
    assert got["R@1"].tolist() == pytest.approx([0.0, 100 / 3])
    got = nnn_on_cross_encoder(base, bank_first, np.zeros((17, 1)), MatrixCE(big), alphas=(1.0,),
                               bank_query_ids=ids.astype(np.int32))
    pd.testing.assert_frame_equal(got, want)


def test_nnn_on_cross_encoder_guards():
    base, bank_first, B = _hub_case()
    bank = np.zeros((17, 1))
    with pytest.raises(ValueError, match=r"^bank_query_ids needs one id per bank query \(17\); got shape \(16,\)$"):
        nnn_on_cross_encoder(base, bank_first, bank, MatrixCE(B), bank_query_ids=np.arange(16))
    with pytest.raises(ValueError, match=r"got shape \(17, 1\)$"):
        nnn_on_cross_encoder(base, bank_first, bank, MatrixCE(B), bank_query_ids=np.arange(17)[:, None])
    with pytest.raises(ValueError, match=r"got shape \(0,\)$"):
        nnn_on_cross_encoder(base, bank_first, bank, MatrixCE(B), bank_query_ids=[])
    # ids are never truncated: 0.9 is not query 0 (the bug: they were cast to int64)
    with pytest.raises(TypeError, match=r"^bank_query_ids must hold integer indices; got dtype float64$"):
        nnn_on_cross_encoder(base, bank_first, bank, MatrixCE(B), bank_query_ids=np.arange(17) + 0.9)
    msg = (r"^bank_ce covers {} queries x {} targets: it must score the bank queries \(bank_query_ids\) against the "
           r"first stage's gallery$")
    with pytest.raises(ValueError, match=msg.format(17, 1)):   # the bank's candidates reach target 1
        nnn_on_cross_encoder(base, bank_first, bank, MatrixCE(B[:, :1]))
    with pytest.raises(ValueError, match=msg.format(17, 6)):   # id 17 of 17 queries
        nnn_on_cross_encoder(base, bank_first, bank, MatrixCE(B), bank_query_ids=np.arange(1, 18))
    with pytest.raises(ValueError, match=msg.format(17, 6)):
        nnn_on_cross_encoder(base, bank_first, bank, MatrixCE(B), bank_query_ids=np.arange(-1, 16))
    # the boundaries themselves are fine: ids 0 .. 16 of 17 queries, candidates up to target 1 of 2 targets
    out = nnn_on_cross_encoder(base, bank_first, bank, MatrixCE(B[:, :2]), bank_query_ids=np.arange(17), alphas=())
    assert list(out["variant"]) == ["CE only"]
