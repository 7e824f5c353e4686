"""Unit checks of hubnorm.listwise.metrics aimed at what its mutation run left unchecked by tests/test_listwise.py:
``listwise_metrics`` (R@K and NDCG@K in %, default K lists, torch input, no NDCG K, the shape guard by its message)
against a slow float64 reference written here; ``top_candidates`` kept columns, their order and padding by hand
(the pass-through at ``n == 2k``, the k-th score's whole tie group, the ``k`` most relevant columns); the loop of
``evaluate_listwise`` with stub normalizers (clone before fitting, one normalizer per direction, ``None`` skipped,
which bank ``query_aware`` passes, labels, the two guards); ``metric_table``'s order, column set and guards.

Mutation run (``--tests tests/test_listwise.py`` [+ this file]): 226 -> 263 of 270 killed (84% -> 97%). The
survivors change nothing a caller can observe:

* ``top_candidates_23/36/52`` (``axis=1`` dropped from ``np.partition`` / ``np.argpartition`` / ``np.argsort``) and
  ``_82/_96`` (from ``np.take_along_axis``): numpy's default axis is -1, the same axis of these 2-D arrays;
* ``top_candidates_57`` (``kind="STABLE"``): numpy reads the sort kind case-insensitively;
* ``metric_table_54`` (``pivot_table(sort=None)``): pandas reads the falsy ``None`` as ``False`` (no sorting; the
  first-appearance order is checked above).
"""

import math

import numpy as np
import pandas as pd
import pytest
import torch

import hubnorm as hn
from hubnorm.listwise import metrics
from hubnorm.retrieval import Positives, RetrievalTask


# ---------------------------------------------------------------------------------------------- references
def _ref_ndcg(s, r, k):
    """NDCG@k of one row without ties in ``s``: gains 2^r - 1 in score order over log2(1 + position)."""
    order = sorted(range(len(s)), key=lambda j: -s[j])
    gains = [2.0 ** float(r[j]) - 1.0 for j in order]
    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains[:k]))
    ideal = sum(g / math.log2(i + 2) for i, g in enumerate(sorted(gains, reverse=True)[:k]))
    return 0.0 if ideal == 0 else dcg / ideal


def _ref_recall(s, lists, k):
    """R@k in %: share of rows whose best positive has fewer than k strictly higher scores (no ties)."""
    hits = [sum(v > max(row[j] for j in pos) for v in row) < k for row, pos in zip(s, lists)]
    return 100.0 * sum(hits) / len(hits)


def _problem(seed=0, m=6, n=50):
    rng = np.random.default_rng(seed)
    s = rng.standard_normal((m, n))                              # continuous: no ties
    r = np.round(rng.random((m, n)) * 2, 2) * (rng.random((m, n)) < 0.5)
    lists = [sorted(rng.choice(n, size=1 + i % 3, replace=False).tolist()) for i in range(m)]
    return s, r, lists


# ---------------------------------------------------------------------------------------------- listwise_metrics
def test_listwise_metrics_default_ks_match_the_slow_reference():
    s, r, lists = _problem(0)
    out = metrics.listwise_metrics(s, Positives.from_lists(lists, s.shape[1]), r)
    assert list(out) == ["R@1", "R@5", "R@10", "NDCG@5", "NDCG@10", "NDCG@20"]
    for k in (1, 5, 10):
        assert out[f"R@{k}"] == pytest.approx(_ref_recall(s, lists, k), abs=1e-12)
    for k in (5, 10, 20):
        want = 100.0 * np.mean([_ref_ndcg(s[i], r[i], k) for i in range(len(s))])
        assert out[f"NDCG@{k}"] == pytest.approx(want, abs=1e-10)
        assert type(out[f"NDCG@{k}"]) is float
    # the R@K are not all 0 or 100 here, and NDCG strictly between: the numbers carry information
    assert 0 < out["R@5"] < 100 and 0 < out["NDCG@10"] < 100


def test_listwise_metrics_small_ks_use_the_shrunk_candidates_exactly():
    s, r, lists = _problem(1, m=5, n=40)
    out = metrics.listwise_metrics(s, Positives.from_lists(lists, 40), r, ndcg_ks=(3, 1), recall_ks=(2,))
    assert list(out) == ["R@2", "NDCG@3", "NDCG@1"]
    assert out["R@2"] == pytest.approx(_ref_recall(s, lists, 2), abs=1e-12)
    for k in (1, 3):
        want = 100.0 * np.mean([_ref_ndcg(s[i], r[i], k) for i in range(5)])
        assert out[f"NDCG@{k}"] == pytest.approx(want, abs=1e-10)


def test_listwise_metrics_by_hand():
    # row 0 ranks 0, 1, 2: the positive (col 1) is second; row 1 ranks 2, 1, 0: its positive (col 2) first
    s = np.array([[3.0, 2.0, 1.0], [1.0, 2.0, 3.0]])
    r = np.array([[0.0, 1.0, 2.0], [0.0, 0.0, 1.0]])
    out = metrics.listwise_metrics(s, Positives.from_lists([[1], [2]], 3), r, ndcg_ks=(1, 3), recall_ks=(1, 2))
    assert out["R@1"] == 50.0 and out["R@2"] == 100.0
    ndcg3_row0 = (1 / math.log2(3) + 3 / 2) / (3 + 1 / math.log2(3))
    assert out["NDCG@1"] == pytest.approx(100.0 * (0.0 + 1.0) / 2)
    assert out["NDCG@3"] == pytest.approx(100.0 * (ndcg3_row0 + 1.0) / 2)


def test_listwise_metrics_without_ndcg_and_from_a_grad_tensor():
    s, r, lists = _problem(2, m=4, n=12)
    pos = Positives.from_lists(lists, 12)
    assert metrics.listwise_metrics(s, pos, r, ndcg_ks=(), recall_ks=(3,)) == {"R@3": _ref_recall(s, lists, 3)}
    t = torch.tensor(s, requires_grad=True)                      # a tensor still attached to a graph
    assert metrics.listwise_metrics(t, pos, torch.tensor(r), ndcg_ks=(2,), recall_ks=(1,)) == \
        metrics.listwise_metrics(s, pos, r, ndcg_ks=(2,), recall_ks=(1,))


def test_listwise_metrics_shape_guard():
    s, r, lists = _problem(3, m=3, n=8)
    with pytest.raises(ValueError, match=r"^scores \(3, 8\) and relevance \(3, 7\) must have the same shape$"):
        metrics.listwise_metrics(s, Positives.from_lists(lists, 8), r[:, :7])


# ---------------------------------------------------------------------------------------------- top_candidates
def test_top_candidates_passes_small_rows_through_as_float64():
    s = np.arange(8, dtype=np.float32).reshape(2, 4)
    r = np.arange(1, 9, dtype=np.int64).reshape(2, 4)              # the most relevant are the top scores
    s_top, r_top = metrics.top_candidates(s, r, 2)                # n == 2k: nothing to shrink (width 2 otherwise)
    assert s_top.dtype == np.float64 and r_top.dtype == np.float64
    np.testing.assert_array_equal(s_top, s)
    np.testing.assert_array_equal(r_top, r)


def test_top_candidates_shrinks_from_one_above_twice_k():
    s = np.array([[0.1, 0.5, 0.4, 0.9, 0.2]])
    r = np.array([[0.0, 0.3, 0.0, 0.6, 0.1]])
    s_top, r_top = metrics.top_candidates(s, r, 2)                # n = 2k + 1: cols 1 and 3 only
    np.testing.assert_array_equal(s_top, [[0.5, 0.9]])
    np.testing.assert_array_equal(r_top, [[0.3, 0.6]])


def test_top_candidates_keeps_the_cut_tie_group_and_the_most_relevant_by_hand():
    s = np.array([[0.1, 0.9, 0.5, 0.7, 0.2, 0.3, 0.0, 0.4, 0.6],     # top 2 scores: cols 1, 3
                  [0.5, 0.1, 0.8, 0.2, 0.8, 0.3, 0.8, 0.0, 0.4]])    # 2nd-largest 0.8 ties with two more: 2, 4, 6
    r = np.array([[0.0, 0.0, 0.0, 0.0, 0.0, 0.9, 0.8, 0.0, 0.1],     # most relevant: cols 5, 6
                  [0.0, 0.0, 0.0, 0.7, 0.0, 0.0, 0.3, 0.0, 0.0]])    # most relevant: 3, 6 (6 kept already)
    s_top, r_top = metrics.top_candidates(s, r, 2)
    # kept columns in their original order: row 0 {1, 3, 5, 6}; row 1 {2, 3, 4, 6}: both width 4
    np.testing.assert_array_equal(s_top, [[0.9, 0.7, 0.3, 0.0], [0.8, 0.2, 0.8, 0.8]])
    np.testing.assert_array_equal(r_top, [[0.0, 0.0, 0.9, 0.8], [0.0, 0.7, 0.0, 0.3]])


def test_top_candidates_pads_short_rows_below_the_row_minimum():
    s = np.array([[0.1, 0.9, 0.5, 0.7, 0.2, 0.3, 0.0, 0.4, 0.6],
                  [0.5, 0.1, 0.8, 0.2, 0.8, 0.3, 0.8, 3.0, -2.0]])
    r = np.array([[0.0, 1.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0],     # most relevant are the top scores: width 2
                  [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0, 0.0]])
    s_top, r_top = metrics.top_candidates(s, r, 2)
    # row 1 keeps 2, 4, 6 (tie at the cut) and 7 (top score, most relevant), maybe one more of relevance 0;
    # row 0 keeps 1, 3 and is padded with its own minimum - 1 = -1 (not the matrix's) and relevance 0
    width = s_top.shape[1]
    assert s_top.shape == r_top.shape == (2, width) and width in (4, 5)
    np.testing.assert_array_equal(s_top[0], [0.9, 0.7] + [-1.0] * (width - 2))
    np.testing.assert_array_equal(r_top[0], [1.0, 0.5] + [0.0] * (width - 2))
    np.testing.assert_array_equal(s_top[1][np.isin(s_top[1], [0.8, 3.0])], [0.8, 0.8, 0.8, 3.0])
    np.testing.assert_array_equal(r_top[1][s_top[1] == 3.0], [2.0])
    for k in (1, 2):
        np.testing.assert_allclose(hn.ndcg_at_k(s_top, r_top, k), hn.ndcg_at_k(s, r, k), atol=1e-15)


def _kept_reference(s, r, k):
    """Columns top_candidates must keep, in ascending order: score >= the k-th largest, or among the k most
    relevant (``r`` without ties)."""
    cut = sorted(s, reverse=True)[k - 1]
    top_rel = set(sorted(range(len(r)), key=lambda j: -r[j])[:k])
    return [j for j in range(len(s)) if s[j] >= cut or j in top_rel]


@pytest.mark.parametrize("k", [1, 3, 5, 20])
def test_top_candidates_keeps_exactly_the_reference_columns_in_order(k):
    rng = np.random.default_rng(k)
    for n in (2 * k + 1, 3 * k + 1, 300):
        s = np.round(rng.standard_normal((12, n)), 1)             # ties, also at the cut
        r = rng.random((12, n))                                   # no ties in relevance
        s_top, r_top = metrics.top_candidates(s, r, k)
        kept = [_kept_reference(s[i], r[i], k) for i in range(12)]
        width = max(len(c) for c in kept)
        assert s_top.shape == (12, width) and width <= n
        for i, cols in enumerate(kept):
            pad = width - len(cols)
            np.testing.assert_array_equal(s_top[i], np.r_[s[i, cols], [s[i].min() - 1.0] * pad])
            np.testing.assert_array_equal(r_top[i], np.r_[r[i, cols], [0.0] * pad])
        for kk in sorted({1, k}):
            np.testing.assert_allclose(hn.ndcg_at_k(s_top, r_top, kk), hn.ndcg_at_k(s, r, kk), atol=1e-12)


def test_top_candidates_keeps_the_k_most_relevant_of_a_long_row():
    # a long row (n = 1000, k = 100) whose k most relevant are not all among the first k of a partition at k + 1
    rng = np.random.default_rng(237)
    r = rng.random((1, 1000))
    s = -rng.random((1, 1000)) - 2.0 * r                          # the most relevant score lowest: all kept by r
    s_top, r_top = metrics.top_candidates(s, r, 100)
    cols = _kept_reference(s[0], r[0], 100)
    assert s_top.shape == (1, len(cols))
    np.testing.assert_array_equal(s_top[0], s[0, cols])
    np.testing.assert_array_equal(r_top[0], r[0, cols])


# ---------------------------------------------------------------------------------------------- evaluate_listwise
class _Fitted:
    def __init__(self, targets, shift):
        self.targets, self.shift = targets, shift

    def score(self, queries):
        return queries @ self.targets.T + self.shift


class _Stub:
    """A normalizer stand-in: records what ``fit`` receives; ``clone`` hands out a new stub (and counts)."""

    def __init__(self, shift=0.0, clonable=True):
        self.shift, self.fits, self.clones = shift, [], []
        if clonable:
            self.clone = self._clone

    def _clone(self):
        c = _Stub(self.shift)
        self.clones.append(c)
        return c

    def fit(self, targets, query_bank=None, target_bank=None):
        self.fits.append((targets, query_bank, target_bank))
        return _Fitted(targets, self.shift)


def _tasks(seed=5, n_img=12, d=6):
    rng = np.random.default_rng(seed)
    imgs = hn.l2_normalize(rng.standard_normal((n_img, d)))
    c2i = np.repeat(np.arange(n_img), 2)
    caps = hn.l2_normalize(imgs[c2i] + 0.8 * rng.standard_normal((len(c2i), d)))
    bank_q = hn.l2_normalize(rng.standard_normal((5, d)))
    t2i = RetrievalTask(caps, imgs, Positives.from_labels(c2i, n_img), query_bank=bank_q, direction="t2i")
    i2t = RetrievalTask(imgs, caps, Positives.from_groups(c2i, n_img), direction="i2t")
    rel = {"t2i": np.round(rng.random((len(c2i), n_img)), 2), "i2t": np.round(rng.random((n_img, len(c2i))), 2)}
    return {"t2i": t2i, "i2t": i2t}, rel


def test_evaluate_listwise_rows_values_and_labels():
    tasks, rel = _tasks()
    a = _Stub()
    df = metrics.evaluate_listwise(tasks, rel, {"A": a}, ndcg_ks=(3,), recall_ks=(1, 4), labels={"src": "toy"})
    assert list(df.columns) == ["direction", "method", "metric", "K", "value", "query_aware", "src"]
    assert df[["direction", "metric", "K"]].values.tolist() == [
        ["t2i", "R", 1], ["t2i", "R", 4], ["t2i", "NDCG", 3], ["i2t", "R", 1], ["i2t", "R", 4], ["i2t", "NDCG", 3]]
    assert df["K"].map(type).eq(int).all() and set(df["method"]) == {"A"}
    assert not df["query_aware"].any() and df["query_aware"].dtype == bool and set(df["src"]) == {"toy"}
    for d, task in tasks.items():
        sc = task.queries @ task.targets.T
        lists = [task.positives.of(i).tolist() for i in range(task.n_queries)]
        got = df[df.direction == d].set_index(["metric", "K"])["value"]
        assert got[("R", 4)] == pytest.approx(_ref_recall(sc, lists, 4), abs=1e-12)
        want = 100 * np.mean([_ref_ndcg(sc[i], rel[d][i], 3) for i in range(len(sc))])
        assert got[("NDCG", 3)] == pytest.approx(want, abs=1e-10)
    # the normalizer handed in is cloned once per direction and never fitted itself
    assert a.fits == [] and len(a.clones) == 2 and all(len(c.fits) == 1 for c in a.clones)
    assert a.clones[0].fits[0][0] is tasks["t2i"].targets
    assert a.clones[0].fits[0][1] is tasks["t2i"].query_bank


def test_evaluate_listwise_query_aware_fits_on_the_test_queries():
    tasks, rel = _tasks()
    a = _Stub(clonable=False)                                     # no clone: used as given
    df = metrics.evaluate_listwise(tasks, rel, {"A": a}, ndcg_ks=(2,), recall_ks=(1,), query_aware=True)
    assert [f[1] is t.queries for f, t in zip(a.fits, tasks.values())] == [True, True]
    assert df["query_aware"].all()


def test_evaluate_listwise_per_direction_methods():
    tasks, rel = _tasks()
    per = {"t2i": _Stub(shift=0.0), "i2t": None}                  # a method for one direction only
    df = metrics.evaluate_listwise(tasks, rel, {"B": per, "C": _Stub()}, ndcg_ks=(2,), recall_ks=(1,))
    assert df[["direction", "method"]].drop_duplicates().values.tolist() == [["t2i", "B"], ["t2i", "C"],
                                                                                ["i2t", "C"]]
    assert len(per["t2i"].clones) == 1


def test_evaluate_listwise_guards():
    tasks, rel = _tasks()
    with pytest.raises(ValueError, match=r"^no relevance matrix for direction 'i2t'$"):
        metrics.evaluate_listwise(tasks, {"t2i": rel["t2i"]}, {"A": _Stub()})
    with pytest.raises(ValueError, match=r"^i2t relevance has shape \(24, 12\); the task needs \(12, 24\) "
                                         r"\(queries x targets\)$"):
        metrics.evaluate_listwise(tasks, {"t2i": rel["t2i"], "i2t": rel["t2i"]}, {"A": _Stub()})


# ---------------------------------------------------------------------------------------------- metric_table
def _frame():
    rows = []
    for d in ("t2i", "i2t"):
        for mi, m in enumerate(("zeta", "alpha")):                # not alphabetical: first-appearance order kept
            for metric, k in (("NDCG", 10), ("R", 5), ("R", 1), ("NDCG", 5)):
                rows.append({"direction": d, "method": m, "metric": metric, "K": k,
                             "value": 10.0 * mi + k + (0.5 if metric == "R" else 0.0) + (100 if d == "i2t" else 0)})
    return pd.DataFrame(rows)


def test_metric_table_order_and_values():
    t = metrics.metric_table(_frame())
    assert list(t.columns) == ["direction", "method", "R@1", "R@5", "NDCG@5", "NDCG@10"]
    assert t.columns.name is None
    assert t[["direction", "method"]].values.tolist() == [["t2i", "zeta"], ["t2i", "alpha"], ["i2t", "zeta"],
                                                          ["i2t", "alpha"]]
    assert t.loc[3, ["R@1", "R@5", "NDCG@5", "NDCG@10"]].tolist() == [111.5, 115.5, 115.0, 120.0]
    t2 = metrics.metric_table(_frame(), recall_ks=[5], ndcg_ks=[10, 5])
    assert list(t2.columns) == ["direction", "method", "R@5", "NDCG@10", "NDCG@5"]
    assert list(metrics.metric_table(_frame(), recall_ks=[], ndcg_ks=[5]).columns) == ["direction", "method", "NDCG@5"]


def test_metric_table_guards():
    with pytest.raises(ValueError, match=r"^df must be the frame of evaluate_listwise \(columns \['K', 'direction', "
                                         r"'method', 'metric', 'value'\]\); got \['direction', 'method', 'metric', "
                                         r"'K'\]$"):
        metrics.metric_table(_frame().drop(columns="value"))
    with pytest.raises(ValueError, match=r"^df has no values for \['R@10', 'NDCG@1'\]$"):
        metrics.metric_table(_frame(), recall_ks=[1, 10], ndcg_ks=[1])
