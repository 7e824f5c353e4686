"""Scores as input (hubnorm.scores): a method fitted from score matrices equals the same method fitted from the
embeddings that produced them (float64, 1e-12, both directions), including a memory-mapped bank matrix larger than
the block budget; methods whose inputs are missing are refused naming the missing matrix."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import hubnorm as hn
from hubnorm.retrieval import Positives, RetrievalTask
from hubnorm.engine import LocalEngine
from hubnorm.matrices import ScoreMatrix
from hubnorm.scores import matrices_from_embeddings

from method_checks import unit_rows

#: every method that is a function of scores, with parameters that exercise it (DIS: QBNorm's gate, k = 1 and 3)
SCORE_METHODS = [
    ("raw", {}),
    ("nnn", {"alpha": 0.75, "k": 4}),
    ("is", {"tau": 0.05}),
    ("dis", {"tau": 0.05, "k": 1}),
    ("dis", {"tau": 0.02, "k": 3}),
    ("csls", {"k": 4}),
    ("ls", {"k": 4}),
    ("mp", {}),
    ("mp", {"form": "empirical"}),
    ("sn", {"tau": 0.05, "n_iter": 10}),
    ("dbsn", {"tau": 0.05, "n_iter": 10}),
    ("dualis", {"beta_query": 20.0, "beta_target": 10.0}),
    ("dualdis", {"beta_query": 20.0, "beta_target": 10.0, "k": 1}),
]


def _video_problem(seed=0, n_videos=30, per_video=3, n_bank_videos=45, d=16):
    """Test videos with several captions each, training videos with captions (random unit rows, float64)."""
    rng = np.random.default_rng(seed)
    videos = unit_rows(rng, n_videos, d)
    caps = videos.repeat(per_video, axis=0) + 0.6 * unit_rows(rng, n_videos * per_video, d)
    caps /= np.linalg.norm(caps, axis=1, keepdims=True)
    bank_videos = unit_rows(rng, n_bank_videos, d)
    bank_caps = unit_rows(rng, 2 * n_bank_videos, d)
    c2v = np.arange(n_videos).repeat(per_video)
    return caps, videos, c2v, bank_caps, bank_videos


def _directions(seed=0):
    caps, videos, c2v, bank_caps, bank_videos = _video_problem(seed)
    return {
        "t2v": (caps, videos, bank_caps, bank_videos, Positives.from_labels(c2v, len(videos))),
        "v2t": (videos, caps, bank_videos, bank_caps, Positives.from_groups(c2v, len(videos))),
    }


@pytest.mark.parametrize("direction", ["t2v", "v2t"])
@pytest.mark.parametrize("name,params", SCORE_METHODS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(SCORE_METHODS)])
def test_scores_equal_embeddings(name, params, direction):
    q, t, qb, tb, pos = _directions()[direction]
    emb = hn.make_normalizer(name, **params).fit(t, query_bank=qb, target_bank=tb)
    want = emb.score(q).numpy()
    task = RetrievalTask(scores=matrices_from_embeddings(q, t, qb, tb), positives=pos, direction=direction,
                         block_bytes=512, check=False)
    got_norm = task.fit(hn.make_normalizer(name, **params))
    got = task.score(got_norm).numpy()
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    for key, value in vars(emb).items():
        if key.endswith("_") and isinstance(value, torch.Tensor) and key != "targets_":
            a, b = getattr(got_norm, key), value
            if a.dtype == torch.bool:
                assert torch.equal(a, b), key
            else:
                np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-12, err_msg=key)
    # the metrics agree too (same ranks)
    ranks = hn.positive_ranks(emb, pos, q)
    np.testing.assert_array_equal(hn.positive_ranks(task.blocks(got_norm), task.positives), ranks)


def test_memory_mapped_bank_larger_than_block_budget(tmp_path):
    """The bank x target matrix is a memory map 20x larger than the block budget: every read block stays within the
    budget, and the fitted offsets equal the in-memory fit (float64, 1e-12)."""
    rng = np.random.default_rng(3)
    t, qb, tb, q = (unit_rows(rng, n, 8) for n in (40, 400, 60, 50))
    mats = matrices_from_embeddings(q, t, qb, tb)
    for key, name in ((("query_bank", "targets"), "bank.npy"), (("query_bank", "target_bank"), "bank_tb.npy")):
        np.save(tmp_path / name, mats[key])
        mats[key] = np.load(tmp_path / name, mmap_mode="r")
        assert isinstance(mats[key], np.memmap)
    budget = 400 * 40 * 8 // 20
    for name, params in [("nnn", {"k": 8}), ("is", {"tau": 0.05}), ("dis", {"tau": 0.05}), ("csls", {"k": 5}),
                         ("sn", {"tau": 0.05}), ("dbsn", {"tau": 0.05})]:
        engine = LocalEngine(matrices=mats, block_bytes=budget)
        norm = hn.make_normalizer(name, **params).fit_engine(engine)
        ref = hn.make_normalizer(name, **params).fit(t, query_bank=qb, target_bank=tb)
        np.testing.assert_allclose(norm.offsets_.numpy(), ref.offsets_.numpy(), rtol=0, atol=1e-12, err_msg=name)
        assert engine.blocks_read > 1, name
        assert 0 < engine.largest_block * 8 <= budget, (name, engine.largest_block)


def test_missing_inputs_are_named():
    q, t, qb, tb, pos = _directions()["t2v"]
    mats = matrices_from_embeddings(q, t, qb, None)
    task = RetrievalTask(scores=mats, positives=pos, direction="t2v", check=False)
    with pytest.raises(ValueError,
                       match="DualBankSinkhornNormalization needs the query bank x target bank score matrix"):
        task.fit(hn.make_normalizer("dbsn"))
    with pytest.raises(ValueError, match="target bank x gallery"):
        task.fit(hn.make_normalizer("dualis"))
    with pytest.raises(ValueError, match="reads the embeddings of query_bank"):
        task.fit(hn.make_normalizer("dn"))
    bare = RetrievalTask(scores={("queries", "targets"): mats[("queries", "targets")]}, positives=pos, direction="t2v",
                         check=False)
    with pytest.raises(ValueError, match="needs the query bank x gallery"):
        bare.fit(hn.make_normalizer("is"))
    # the raw scores and the query-aware fit need only the test matrix
    assert hn.evaluate(None, bare)["R@1"] == pytest.approx(
        hn.evaluate(hn.make_normalizer("raw").fit(t), _task(q, t, pos))["R@1"])
    qa = hn.evaluate(bare.fit(hn.make_normalizer("is", tau=0.05), query_aware=True), bare)
    ref = hn.make_normalizer("is", tau=0.05).fit(t, query_bank=q)
    assert qa["R@1"] == pytest.approx(hn.evaluate(ref, _task(q, t, pos))["R@1"])


def _task(q, t, pos):
    return hn.RetrievalTask(q, t, pos)


def test_bad_matrices_are_refused():
    q, t, qb, tb, pos = _directions()["t2v"]
    mats = matrices_from_embeddings(q, t, qb, tb)
    bad = dict(mats)
    bad[("query_bank", "targets")] = mats[("query_bank", "targets")][:, :-1]
    with pytest.raises(ValueError, match="must share their rows and columns"):
        RetrievalTask(scores=bad, positives=pos, direction="t2v", check=False)
    nan = mats[("query_bank", "targets")].copy()
    nan[3, 4] = np.nan
    task = RetrievalTask(scores={**mats, ("query_bank", "targets"): ScoreMatrix(nan, "bank.npy")}, positives=pos,
                         direction="t2v", check=False)
    with pytest.raises(ValueError, match=r"bank.npy holds a non-finite score .* row 3, column 4"):
        task.fit(hn.make_normalizer("is"))
    with pytest.raises(ValueError, match="positives are"):
        RetrievalTask(scores=mats, positives=Positives.from_labels(np.arange(len(t)), len(t)), direction="t2v",
                      check=False)
    with pytest.raises(TypeError, match="floating-point"):
        ScoreMatrix(np.zeros((3, 3), dtype=np.int64))
