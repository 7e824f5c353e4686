"""Unit checks of ``hubnorm.rerank.pipeline`` in small pieces: the first-stage top-k with ties (``_block_topk``)
against a stable lexsort, in several row blocks against one block, and every guard of :func:`first_stage_topk` by
its message and at its boundary; the score combination (minmax, zscore, none, a callable) against values computed
by hand, with constant rows; ``_is_positive`` at the ends of the sorted codes; every property of
:class:`RerankResult` (ceiling, per-query costs, ``summary``, ``stage_table``, ``with_scores``, ``recombine``)
against hand values; :func:`rerank`'s guards, bookkeeping (pairs scored and computed, cache hits, meta) and final
ranks against a brute-force reference; :func:`nnn_bias_from_pairs` by hand, including no pairs at all.

Mutation run (``--tests tests/test_rerank_pipeline.py tests/test_rerank_blip.py`` [+ this file]): 471 -> 657 of 684
killed (69% -> 96%; 44 mutants reached by no test before). The 27 survivors change nothing a caller can observe:

* the NaN check of :func:`first_stage_topk` (4 mutants): ``iter_score_blocks`` refuses a non-finite block first;
* ``topk`` / ``torch.sort`` / ``argsort`` / ``take_along_axis`` without their ``axis`` / ``dim``: the last axis of a
  2-D array; ``kind="STABLE"``: numpy reads the kind case-insensitively; ``reshape(-2)``: any negative is "infer";
* ``n = ""``: overwritten before use; ``searchsorted`` without ``side="left"``: the default;
* ``chunk_size`` not handed on (2): other row blocks, the same top-k; ``_check_lambda(None)`` in :func:`rerank`:
  ``combine_scores`` checks the same lambda again with the same message;
* ``asarray`` without ``float64`` / ``int64`` in ``with_scores`` and ``nnn_bias_from_pairs`` (``int64``
  ids and float scores already; ``argsort`` of integer scores gives the same order);
* zscore's ``out=None``: differs only in the entries of a constant row, left uninitialised instead of 0; not
  reliably observable (fresh memory is often zero), so not pinned here.
"""

from __future__ import annotations

import math
import re
import time

import numpy as np
import pandas as pd
import pytest
import torch

import hubnorm as hn
from hubnorm.rerank import CrossEncoder, RerankResult, combine_scores, first_stage_topk, nnn_bias_from_pairs, rerank
from hubnorm.rerank import pipeline as pl
from test_rerank_pipeline import MatrixCE   # scores looked up in a dense matrix


class NoDirectionCE(MatrixCE):
    def __init__(self, scores):
        super().__init__(scores, direction=None)


def _task(seed=0, n_img=12, cpi=2, d=8, noise=0.9):
    rng = np.random.default_rng(seed)
    imgs = hn.l2_normalize(rng.standard_normal((n_img, d)).astype(np.float32))
    c2i = np.repeat(np.arange(n_img), cpi)
    caps = hn.l2_normalize(imgs[c2i] + noise * rng.standard_normal((c2i.size, d)).astype(np.float32))
    return hn.build_tasks(imgs, caps, c2i, image_bank=imgs, caption_bank=caps)["t2i"]


def _stable_topk(s, k):
    order = np.stack([np.lexsort((np.arange(s.shape[1]), -row)) for row in s])[:, :k]
    return np.take_along_axis(s, order, axis=1), order


# ------------------------------------------------------------------------------------------ first-stage top-k
def test_block_topk_with_ties_is_the_stable_sort():
    rng = np.random.default_rng(0)
    s = np.round(rng.random((30, 10)) * 3) / 3            # many ties
    s[0] = 1.0                                             # a whole row tied
    s[1] = np.arange(10)[::-1]                             # no ties
    for k in (1, 2, 4, 10):
        v, i = pl._block_topk(torch.from_numpy(s), k)
        ev, ei = _stable_topk(s, k)
        np.testing.assert_array_equal(i.numpy(), ei)
        np.testing.assert_array_equal(v.numpy(), ev)


def test_first_stage_topk_in_blocks_matches_one_block_and_positive_ranks():
    rng = np.random.default_rng(1)
    s = np.round(rng.random((23, 9)) * 4) / 4
    pos = hn.Positives.from_labels(rng.integers(0, 9, 23), 9)
    ids1, v1, r1 = first_stage_topk(s, None, 4, positives=pos)
    ids2, v2, r2 = first_stage_topk(torch.from_numpy(s), None, 4, positives=pos, chunk_size=5)
    ev, ei = _stable_topk(s, 4)
    for ids, v, r in ((ids1, v1, r1), (ids2, v2, r2)):
        np.testing.assert_array_equal(ids, ei)
        np.testing.assert_array_equal(v, ev)
        np.testing.assert_array_equal(r, hn.positive_ranks(s, pos))
        assert v.dtype == np.float64 and ids.dtype == np.int64
    ids3, v3 = first_stage_topk(s.astype(np.float32), None, 9, chunk_size=4)     # k = n, no positives
    np.testing.assert_array_equal(ids3, _stable_topk(s, 9)[1])
    assert v3.dtype == np.float64
    # several positives per query, in blocks: the rank of the best one
    multi = hn.Positives.from_lists([[0, 3], [5], [1, 2, 8]] * 7 + [[4], [6]], 9)
    np.testing.assert_array_equal(first_stage_topk(s, None, 3, positives=multi, chunk_size=4)[2],
                                  hn.positive_ranks(s, multi))


def test_first_stage_topk_from_a_normalizer():
    task = _task()
    sn = task.fit(hn.make_normalizer("raw"))
    ids, vals, ranks = first_stage_topk(sn, task.queries, 3, positives=task.positives, chunk_size=5)
    s = (task.queries.double() @ task.targets.double().T).numpy() if isinstance(task.queries, torch.Tensor) else (
        np.asarray(task.queries, np.float64) @ np.asarray(task.targets, np.float64).T)
    np.testing.assert_allclose(vals, np.sort(s, axis=1)[:, ::-1][:, :3], atol=1e-5)
    np.testing.assert_array_equal(ranks, hn.positive_ranks(sn.score(task.queries), task.positives))


def test_first_stage_topk_guards():
    s = np.random.default_rng(0).random((5, 6))
    pos = hn.Positives.from_labels(np.arange(5), 6)
    for bad in (True, 2.0, "3"):
        with pytest.raises(TypeError, match=re.escape(f"k must be an integer; got {type(bad).__name__} {bad!r}")):
            first_stage_topk(s, None, bad)
    for bad in (0, 7, -1):
        with pytest.raises(ValueError, match=re.escape(f"k must be in [1, n_targets=6]; got {bad}")):
            first_stage_topk(s, None, bad)
    assert first_stage_topk(s, None, 1)[0].shape == (5, 1) and first_stage_topk(s, None, np.int64(6))[0].shape == (5, 6)
    with pytest.raises(ValueError, match=re.escape("first-stage scores (6+ rows x 6) do not match the task "
                                                   "(5 queries x 6 targets)")):
        first_stage_topk(np.vstack([s, s[:1]]), None, 2, positives=pos)
    with pytest.raises(ValueError, match=re.escape("(5+ rows x 5) do not match the task (5 queries x 6 targets)")):
        first_stage_topk(s[:, :5], None, 2, positives=pos)
    with pytest.raises(ValueError, match=re.escape("first stage scored 4 queries but the task has 5")):
        first_stage_topk(s[:4], None, 2, positives=pos)
    with pytest.raises(ValueError, match=re.escape("(3+ rows x 6) do not match")):   # the second block overruns
        first_stage_topk(np.vstack([s, s[:1]]), None, 2, positives=hn.Positives.from_labels(np.arange(2), 6),
                         chunk_size=3)
    with pytest.raises(ValueError, match="^the first stage produced no scores$"):
        first_stage_topk(np.zeros((0, 6)), None, 2)


# ------------------------------------------------------------------------------------------ score combination
def test_check_lambda():
    for ok in (None, 0, 0.0, 1, 1.0, 0.25, np.float32(0.5), lambda e, c: c):
        pl._check_lambda(ok)
    for bad in (-1e-9, 1.0000001, float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ValueError, match=re.escape("combine (lambda, the weight of the first-stage score) must be "
                                                       f"in [0, 1]; got {bad}")):
            pl._check_lambda(bad)
    for bad in (True, False, "0.5", 1j):
        with pytest.raises(TypeError, match=re.escape("combine must be None, a float lambda in [0, 1] or a "
                                                      f"callable(e, c); got {bad!r}")):
            pl._check_lambda(bad)


def test_normalize_by_hand():
    x = np.array([[1.0, 3.0, 2.0], [5.0, 5.0, 5.0], [-2.0, 0.0, 4.0]])
    np.testing.assert_allclose(pl._normalize(x, "minmax"), [[0, 1, 0.5], [0, 0, 0], [0, 1 / 3, 1]])
    sd = np.sqrt(2 / 3)   # population sd of (1, 3, 2)
    sd3 = np.sqrt(((np.array([-2, 0, 4]) - 2 / 3) ** 2).mean())
    np.testing.assert_allclose(pl._normalize(x, "zscore"), [[-1 / sd, 1 / sd, 0], [0, 0, 0],
                                                            (np.array([-2, 0, 4]) - 2 / 3) / sd3])
    assert pl._normalize(x, "none") is x


def test_combine_scores_by_hand():
    e = np.array([[1.0, 3.0, 2.0], [0.0, 0.0, 1.0]])
    c = np.array([[0.2, 0.1, 0.6], [4.0, 2.0, 3.0]], dtype=np.float32)
    out = combine_scores(e, c)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, c.astype(np.float64))
    lam = 0.3
    ne = np.array([[0, 1, 0.5], [0, 0, 1]])
    nc = np.array([[0.2, 0, 1], [1, 0, 0.5]])
    np.testing.assert_allclose(combine_scores(e, c, lam), lam * ne + (1 - lam) * nc, atol=1e-7)
    np.testing.assert_allclose(combine_scores(e, c, lam, "none"), lam * e + (1 - lam) * c.astype(np.float64))
    np.testing.assert_allclose(combine_scores(e, c, 0.0, "minmax"), nc, atol=1e-7)
    np.testing.assert_allclose(combine_scores(e, c, 1.0, "minmax"), ne)
    z = combine_scores(e, c, 0.5, "zscore")
    np.testing.assert_allclose(z, 0.5 * pl._normalize(e, "zscore") + 0.5 * pl._normalize(c.astype(float), "zscore"))
    np.testing.assert_allclose(combine_scores(e, c, lambda a, b: a * b), e * c.astype(np.float64))


def test_combine_scores_guards():
    e, c = np.zeros((2, 3)), np.zeros((2, 3))
    with pytest.raises(ValueError, match=re.escape("score_norm must be one of ('minmax', 'zscore', 'none'); got "
                                                   "'softmax'")):
        combine_scores(e, c, 0.5, "softmax")
    with pytest.raises(ValueError, match=re.escape("e and c must be 2-D with the same shape; got (2, 3) and (2, 4)")):
        combine_scores(e, np.zeros((2, 4)))
    with pytest.raises(ValueError, match=re.escape("e and c must be 2-D with the same shape; got (3,) and (3,)")):
        combine_scores(np.zeros(3), np.zeros(3))
    with pytest.raises(ValueError, match=re.escape("combine(e, c) must return finite scores of shape (2, 3); got "
                                                   "(3,)")):
        combine_scores(e, c, lambda a, b: np.zeros(3))
    with pytest.raises(ValueError, match=re.escape("got (2, 3)")):
        combine_scores(e, c, lambda a, b: np.full((2, 3), np.nan))
    with pytest.raises(ValueError, match="lambda"):
        combine_scores(e, c, 2.0)


def test_is_positive_at_the_ends_of_the_codes():
    pos = hn.Positives.from_lists([[0, 4], [2], [4]], 5)
    cand = np.array([[0, 1, 4], [2, 3, 4], [4, 0, 3]])
    np.testing.assert_array_equal(pl._is_positive(cand, pos), [[True, False, True], [True, False, False],
                                                                [True, False, False]])
    # a candidate beyond the last code (the last query's last target, not a positive)
    pos2 = hn.Positives.from_lists([[0], [1]], 5)
    np.testing.assert_array_equal(pl._is_positive(np.array([[0, 4], [4, 1]]), pos2), [[True, False], [False, True]])


# ------------------------------------------------------------------------------------------------ the result
def _result(**kw):
    base = dict(ranks=np.array([0, 2, 7, 1]), first_stage_ranks=np.array([1, 2, 7, 0]),
                candidates=np.arange(12).reshape(4, 3), first_stage_scores=np.zeros((4, 3)),
                ce_scores=np.zeros((4, 3)), order=np.array([[2, 0, 1]] * 4),
                is_positive=np.zeros((4, 3), bool), k=3, pairs_scored=12, pairs_computed=6,
                first_stage_seconds=2.0, ce_seconds=3.0, rerank_seconds=6.0)
    base.update(kw)
    return RerankResult(**base)


def test_result_properties_by_hand():
    r = _result()
    assert r.n_queries == 4 and r.pairs_per_query == 3.0
    np.testing.assert_array_equal(r.final_topk, [[2, 0, 1], [5, 3, 4], [8, 6, 7], [11, 9, 10]])
    assert r.ceiling == pytest.approx(75.0)            # first-stage ranks 1, 2, 0 below k = 3
    assert r.wall_seconds == 8.0 and r.wall_per_query_s == 2.0 and r.seconds_per_pair == 0.5
    assert math.isnan(_result(pairs_computed=0).seconds_per_pair)
    assert r.combine is None and r.score_norm == "minmax" and r.meta == {}


def test_result_summary_and_stage_table_by_hand():
    r = _result()
    s = r.summary(ks=(1, 2))
    assert s["first-stage R@1"] == pytest.approx(25.0) and s["first-stage R@2"] == pytest.approx(50.0)
    assert s["reranked R@1"] == pytest.approx(25.0) and s["reranked R@2"] == pytest.approx(50.0)
    assert s["k"] == 3 and s["ceiling R@3"] == pytest.approx(75.0) and s["pairs/query"] == 3.0
    assert s["pairs computed"] == 6 and s["first-stage s/query"] == 0.5 and s["rerank s/query"] == 1.5
    assert s["s/pair"] == 0.5
    default = r.summary()
    assert {"first-stage R@1", "first-stage R@5", "first-stage R@10", "reranked R@10"} <= set(default)
    t = r.stage_table(ks=(1, 3))
    assert isinstance(t, pd.DataFrame) and list(t["stage"]) == ["first stage", "reranked top-3"]
    assert list(t["pairs/query"]) == [0.0, 3.0] and list(t["s/query"]) == [0.5, 2.0]
    assert list(t["ceiling R@3"]) == [75.0, 75.0]
    assert list(t["R@1"]) == [25.0, 25.0] and list(t["R@3"]) == [75.0, 75.0]
    assert "MdR" in t.columns and "R@10" in r.stage_table().columns


def test_with_scores_and_recombine():
    e = np.array([[3.0, 2.0, 1.0], [3.0, 2.0, 1.0]])
    c = np.array([[0.0, 1.0, 1.0], [0.5, 0.5, 0.9]])
    is_pos = np.array([[False, False, True], [True, False, False]])
    r = _result(ranks=np.array([0, 0]), first_stage_ranks=np.array([2, 0]), candidates=np.array([[5, 6, 7],
                                                                                                 [1, 2, 3]]),
                first_stage_scores=e, ce_scores=c, order=np.array([[0, 1, 2]] * 2), is_positive=is_pos,
                meta={"a": 1})
    w = r.with_scores(c, note="x")
    np.testing.assert_array_equal(w.order, [[1, 2, 0], [2, 0, 1]])     # ties keep the first-stage order
    np.testing.assert_array_equal(w.ranks, [1, 1])
    assert w.meta == {"a": 1, "note": "x"} and r.meta == {"a": 1}
    back = w.recombine(1.0, "none")
    np.testing.assert_array_equal(back.order, [[0, 1, 2]] * 2)
    np.testing.assert_array_equal(back.ranks, [2, 0])
    assert back.combine == 1.0 and back.score_norm == "none"
    ce_only = r.recombine()
    np.testing.assert_array_equal(ce_only.order, w.order)
    assert ce_only.combine is None and ce_only.score_norm == "minmax"
    with pytest.raises(ValueError, match=re.escape("scores must be finite with shape (2, 3); got (2, 2)")):
        r.with_scores(np.zeros((2, 2)))
    with pytest.raises(ValueError, match=re.escape("scores must be finite with shape (2, 3); got (2, 3)")):
        r.with_scores(np.full((2, 3), np.inf))


def test_final_ranks_by_hand_and_its_consistency_check():
    order = np.array([[2, 0, 1], [0, 1, 2], [1, 2, 0]])
    is_pos = np.array([[True, False, False], [False, False, False], [False, True, True]])
    ranks = pl._final_ranks(order, is_pos, np.array([0, 5, 1]), 3)
    np.testing.assert_array_equal(ranks, [1, 5, 0])
    assert ranks.dtype == np.int64
    with pytest.raises(AssertionError, match="^internal error: top-k candidates disagree with the first-stage ranks"):
        pl._final_ranks(order, is_pos, np.array([0, 2, 1]), 3)
    with pytest.raises(AssertionError, match="internal error"):
        pl._final_ranks(order, is_pos, np.array([3, 5, 1]), 3)


# ------------------------------------------------------------------------------------------------------ rerank
def _brute_ranks(first, ce, pos_lists, k, combine=None, score_norm="minmax"):
    out = []
    m = first.shape[0]
    cand = np.stack([np.lexsort((np.arange(first.shape[1]), -first[i])) for i in range(m)])[:, :k]
    e = np.take_along_axis(first, cand, axis=1)
    c = np.take_along_axis(ce, cand, axis=1)
    sc = combine_scores(e, c, combine, score_norm)
    for i in range(m):
        full = np.lexsort((np.arange(first.shape[1]), -first[i]))
        order = np.concatenate([cand[i][np.argsort(-sc[i], kind="stable")], full[k:]])
        out.append(min(int(np.where(order == p)[0][0]) for p in pos_lists[i]))
    return np.array(out)


@pytest.mark.parametrize("k, combine, norm", [(1, None, "minmax"), (4, None, "minmax"), (4, 0.4, "zscore"),
                                              (6, 0.7, "none"), (12, 0.5, "minmax")])
def test_rerank_against_brute_force(k, combine, norm):
    task = _task()
    rng = np.random.default_rng(2)
    first = np.round(rng.random((task.n_queries, task.n_targets)) * 5) / 5
    S = rng.standard_normal(first.shape)
    ce = MatrixCE(S)
    res = rerank(first, task, ce, k=k, combine=combine, score_norm=norm, chunk_size=7)
    pos_lists = [task.positives.indices[task.positives.indptr[i]:task.positives.indptr[i + 1]]
                 for i in range(task.n_queries)]
    np.testing.assert_array_equal(res.ranks, _brute_ranks(first, S, pos_lists, k, combine, norm))
    np.testing.assert_array_equal(res.first_stage_ranks, hn.positive_ranks(first, task.positives))
    np.testing.assert_array_equal(res.ce_scores, np.take_along_axis(S, res.candidates, axis=1))
    np.testing.assert_array_equal(res.first_stage_scores, np.take_along_axis(first, res.candidates, axis=1))
    np.testing.assert_array_equal(res.is_positive, pl._is_positive(res.candidates, task.positives))
    assert res.k == k and res.combine == combine and res.score_norm == norm
    assert res.pairs_scored == task.n_queries * k and res.pairs_computed == task.n_queries * k
    assert ce.n_pairs_computed == task.n_queries * k
    assert res.meta["direction"] == "t2i" and res.meta["cross_encoder"] == "matrix-ce"
    assert res.meta["ce_kind"] == "real" and res.meta["first_stage"] == "matrix"
    for key, value in task.meta.items():
        assert res.meta[key] == value
    assert res.ce_seconds >= 0 and res.first_stage_seconds >= 0 and res.rerank_seconds >= 0


def test_rerank_counts_only_computed_pairs_with_a_cache(tmp_path):
    task = _task()
    first = np.asarray(task.queries, np.float64) @ np.asarray(task.targets, np.float64).T
    S = np.random.default_rng(3).standard_normal(first.shape)
    ce = MatrixCE(S, cache_dir=tmp_path)
    a = rerank(first, task, ce, k=3)
    assert a.pairs_computed == 3 * task.n_queries
    b = rerank(first, task, ce, k=5)
    assert b.pairs_computed == 2 * task.n_queries and b.pairs_scored == 5 * task.n_queries
    c = rerank(first, task, ce, k=5)
    assert c.pairs_computed == 0 and c.ce_seconds == 0.0 and math.isnan(c.seconds_per_pair)
    np.testing.assert_array_equal(b.ranks, c.ranks)
    sn = task.fit(hn.make_normalizer("raw"))
    assert rerank(sn, task, ce, k=2).meta["first_stage"] == sn.name


def test_rerank_guards():
    task = _task()
    first = np.asarray(task.queries, np.float64) @ np.asarray(task.targets, np.float64).T
    ce = MatrixCE(np.zeros(first.shape))
    n = task.n_targets
    with pytest.raises(TypeError, match="^task must be a hubnorm.RetrievalTask; got dict$"):
        rerank(first, {}, ce)
    with pytest.raises(TypeError, match="^cross_encoder must be a hubnorm.rerank.CrossEncoder; got ndarray$"):
        rerank(first, task, first)
    with pytest.raises(ValueError, match=re.escape(f"k={n + 1} is larger than the number of targets ({n})")):
        rerank(first, task, ce, k=n + 1)
    assert rerank(first, task, ce, k=n).k == n
    with pytest.raises(ValueError, match="lambda"):
        rerank(first, task, ce, k=3, combine=1.5)
    with pytest.raises(ValueError, match=re.escape("score_norm must be one of ('minmax', 'zscore', 'none'); got 'x'")):
        rerank(first, task, ce, k=3, score_norm="x")
    with pytest.raises(ValueError, match=re.escape(f"the cross-encoder covers 5 queries x {n} targets but the task "
                                                   f"has {task.n_queries} x {n}: build it on the same items")):
        rerank(first, task, MatrixCE(np.zeros((5, n))), k=3)
    with pytest.raises(ValueError, match=re.escape(f"covers {task.n_queries} queries x {n - 1} targets")):
        rerank(first, task, MatrixCE(np.zeros((task.n_queries, n - 1))), k=3)
    with pytest.raises(ValueError, match=re.escape("the cross-encoder is for 'i2t' but the task is 't2i'")):
        rerank(first, task, MatrixCE(np.zeros(first.shape), direction="i2t"), k=3)
    assert rerank(first, task, NoDirectionCE(np.zeros(first.shape)), k=3).k == 3   # no direction: not checked
    with pytest.raises(ValueError, match="^the first-stage normalizer is not fitted: use task.fit"):
        rerank(hn.make_normalizer("raw"), task, ce, k=3)


# ---------------------------------------------------------------------------------------------- nnn_bias_from_pairs
def test_nnn_bias_from_pairs_by_hand():
    targets = np.array([[2, 0], [2, 2], [0, 4]])            # any shape: flattened
    scores = np.array([[0.1, 0.9], [0.5, 0.7], [0.3, -1.0]])
    b = nnn_bias_from_pairs(targets, scores, 5, k=2, alpha=2.0)
    expect = np.array([0.6, np.nan, 0.6, np.nan, -1.0])   # target 2: top-2 of (0.1, 0.5, 0.7)
    mean = np.nanmean(expect)
    expect[[1, 3]] = mean
    np.testing.assert_allclose(b, 2.0 * expect)
    np.testing.assert_allclose(nnn_bias_from_pairs(targets, scores, 5, k=1),
                               [0.9, 0.2, 0.7, 0.2, -1.0])   # default alpha 1; unseen = mean(0.9, 0.7, -1.0)
    np.testing.assert_allclose(nnn_bias_from_pairs(targets, scores, 5, k=16)[2], 1.3 / 3)
    np.testing.assert_array_equal(nnn_bias_from_pairs([], [], 3), [0.0, 0.0, 0.0])     # no pairs: 0
    with pytest.raises(ValueError, match="^targets and scores must have the same length$"):
        nnn_bias_from_pairs([0, 1], [0.5], 3)
    with pytest.raises(ValueError, match="^k must be >= 1; got 0$"):
        nnn_bias_from_pairs([0], [0.5], 3, k=0)


# ------------------------------------------------------------------------------------------------ defaults, ties
def test_the_defaults():
    rng = np.random.default_rng(5)
    s = rng.random((4, 25))
    assert first_stage_topk(s)[0].shape == (4, 20)                        # k = 20
    task = _task(n_img=24, cpi=1)
    first = rng.random((task.n_queries, task.n_targets))
    res = rerank(first, task, MatrixCE(rng.random(first.shape)))
    assert res.k == 20 and res.combine is None and res.score_norm == "minmax"
    e, c = rng.random((3, 5)), rng.random((3, 5))
    np.testing.assert_array_equal(combine_scores(e, c, 0.3), combine_scores(e, c, 0.3, "minmax"))
    r = rerank(first, task, MatrixCE(rng.random(first.shape)), k=4)
    a, b = r.recombine(0.3), r.recombine(0.3, "minmax")
    np.testing.assert_array_equal(a.order, b.order)
    assert a.score_norm == "minmax"
    targets = np.repeat([0, 1], 20)
    scores = np.r_[np.arange(20.0), -np.arange(20.0)]
    np.testing.assert_allclose(nnn_bias_from_pairs(targets, scores, 2),                   # k = 16, alpha = 1
                               [np.arange(4.0, 20).mean(), -np.arange(16.0).mean()])


def test_rerank_ties_among_many_candidates_keep_the_first_stage_order():
    """More than 16 candidates with tied cross-encoder scores: a stable sort (an unstable one reorders them)."""
    task = _task(n_img=40, cpi=1)
    rng = np.random.default_rng(6)
    first = rng.random((task.n_queries, task.n_targets))
    S = np.round(rng.random(first.shape) * 2) / 2                         # three values only
    res = rerank(first, task, MatrixCE(S), k=40)
    cand = np.stack([np.argsort(-row, kind="stable") for row in first])
    expect = np.stack([np.argsort(-np.take(S[i], cand[i]), kind="stable") for i in range(task.n_queries)])
    np.testing.assert_array_equal(res.order, expect)
    pos_lists = [task.positives.indices[task.positives.indptr[i]:task.positives.indptr[i + 1]]
                 for i in range(task.n_queries)]
    np.testing.assert_array_equal(res.ranks, _brute_ranks(first, S, pos_lists, 40))
    w = res.with_scores(np.take_along_axis(S, res.candidates, axis=1)[:, ::-1].copy())
    np.testing.assert_array_equal(w.order, np.argsort(-np.take_along_axis(S, res.candidates, axis=1)[:, ::-1],
                                                      axis=1, kind="stable"))
    v, i = pl._block_topk(torch.from_numpy(S), 30)
    ev, ei = _stable_topk(S, 30)
    np.testing.assert_array_equal(i.numpy(), ei)


def test_rerank_counts_and_seconds_are_differences_of_the_encoder_counters():
    task = _task()
    first = np.random.default_rng(7).random((task.n_queries, task.n_targets))
    ce = MatrixCE(np.random.default_rng(8).random(first.shape))
    ce.n_pairs_computed, ce.compute_seconds = 10**6, 1000.0                # counters of earlier work
    t0 = time.perf_counter()
    res = rerank(first, task, ce, k=3)
    elapsed = time.perf_counter() - t0
    assert res.pairs_computed == 3 * task.n_queries and ce.n_pairs_computed == 10**6 + 3 * task.n_queries
    assert 0 <= res.ce_seconds <= elapsed and isinstance(res.ce_seconds, float)
    assert 0 <= res.first_stage_seconds <= elapsed and 0 <= res.rerank_seconds <= elapsed
    assert res.first_stage_seconds + res.rerank_seconds <= elapsed
    assert res.first_stage_seconds > 0 and res.rerank_seconds > 0          # measured, not the defaults


def test_integer_scores_and_a_recombined_score_norm():
    e, c = np.array([[3, 1, 2], [0, 0, 5]]), np.array([[1, 2, 2], [7, 1, 0]])
    np.testing.assert_allclose(combine_scores(e, c, 0.5), 0.5 * pl._normalize(e.astype(float), "minmax")
                               + 0.5 * pl._normalize(c.astype(float), "minmax"))
    np.testing.assert_allclose(combine_scores(e, c, 0.5, "zscore"), 0.5 * pl._normalize(e.astype(float), "zscore")
                               + 0.5 * pl._normalize(c.astype(float), "zscore"))
    out = combine_scores(e, c, lambda a, b: (a > 1).astype(int))
    assert out.dtype == np.float64
    # recombine hands score_norm on: "none" and "minmax" order these candidates differently at lambda 0.5
    r = _result(ranks=np.array([0]), first_stage_ranks=np.array([0]), candidates=np.array([[0, 1, 2]]),
                first_stage_scores=np.array([[100.0, 50.0, 0.0]]), ce_scores=np.array([[0.0, 0.6, 1.0]]),
                order=np.array([[0, 1, 2]]), is_positive=np.array([[True, False, False]]))
    np.testing.assert_array_equal(r.recombine(0.5, "none").order, [[0, 1, 2]])
    np.testing.assert_array_equal(r.recombine(0.5, "minmax").order, [[1, 0, 2]])
