"""Hubness measures: k-occurrence against a dense reference, summary statistics against scipy and hand counts."""

import numpy as np
import pytest
from scipy import stats

import hubnorm as hn
from conftest import unit_rows

pytestmark = pytest.mark.usefixtures("single_thread_torch")


def reference_k_occurrence(S, k):
    counts = np.zeros(S.shape[1], dtype=np.int64)
    for row in S:
        for j in np.argsort(-row, kind="stable")[:k]:
            counts[j] += 1
    return counts


@pytest.mark.parametrize("m,n,k", [(50, 20, 1), (50, 20, 10), (13, 40, 5), (30, 30, 30)])
def test_k_occurrence_matches_dense_reference(m, n, k):
    S = np.random.default_rng(m + n + k).standard_normal((m, n))
    ref = reference_k_occurrence(S, k)
    for chunk in (None, 1, 7):
        n_k = hn.k_occurrence(S, k, chunk_size=chunk)
        assert n_k.sum() == k * m
        np.testing.assert_array_equal(n_k, ref)


def test_k_occurrence_from_a_normalizer():
    rng = np.random.default_rng(3)
    q, t, b = unit_rows(rng, 60, 10), unit_rows(rng, 25, 10), unit_rows(rng, 40, 10)
    is_ = hn.InvertedSoftmax(tau=0.05, device="cpu").fit(t, query_bank=b)
    np.testing.assert_array_equal(hn.k_occurrence(is_, 5, q), reference_k_occurrence(is_.score(q).numpy(), 5))
    with pytest.raises(ValueError, match="queries"):
        hn.k_occurrence(is_, 5)


def test_hubness_stats_match_scipy_and_hand_counts():
    # m = 12 queries, k = 2, n = 6 targets: expected count k m / n = 4
    n_k = np.array([10, 6, 4, 2, 2, 0])
    s = hn.hubness_stats(n_k, k=2, n_queries=12)
    assert s["expected"] == 4.0
    assert s["skewness"] == pytest.approx(stats.skew(n_k.astype(float), bias=True))
    assert s["kurtosis"] == pytest.approx(stats.kurtosis(n_k.astype(float), fisher=True, bias=True))
    assert s["max"] == 10
    assert s["mad"] == pytest.approx((6 + 2 + 0 + 2 + 2 + 4) / 6)
    assert s["antihub_share"] == pytest.approx(1 / 6)
    assert s["hub_share"] == pytest.approx(1 / 6)  # only 10 >= 2 * 4
    assert s["robin_hood"] == pytest.approx(0.5 * 16 / 24)


def test_hubs_are_relative_to_the_mean_when_m_differs_from_n():
    # m = 50 queries, k = 1, n = 10 targets: mean 5, hubs need N_k >= 10 (not >= 2k = 2)
    n_k = np.array([12, 10, 9, 5, 4, 4, 3, 2, 1, 0])
    s = hn.hubness_stats(n_k, k=1, n_queries=50)
    assert s["expected"] == 5.0
    assert s["hub_share"] == pytest.approx(0.2)
    assert hn.hubness_stats(n_k, k=1, n_queries=50, hub_factor=1.5)["hub_share"] == pytest.approx(0.3)
    # fewer queries than targets: m = 5, k = 2, n = 10: mean 1, hubs need >= 2
    n_k2 = np.array([3, 2, 2, 1, 1, 1, 0, 0, 0, 0])
    s2 = hn.hubness_stats(n_k2, k=2, n_queries=5)
    assert s2["expected"] == 1.0
    assert s2["hub_share"] == pytest.approx(0.3)
    assert s2["antihub_share"] == pytest.approx(0.4)


def test_uniform_occurrence_has_no_hubness():
    s = hn.hubness_stats(np.full(8, 3), k=3, n_queries=8)
    assert s["skewness"] == 0 and s["kurtosis"] == 0 and s["robin_hood"] == 0 and s["mad"] == 0
    assert s["hub_share"] == 0 and s["antihub_share"] == 0


def test_hubness_on_random_vector_matches_scipy():
    rng = np.random.default_rng(9)
    S = rng.standard_normal((200, 40)) + 3 * rng.standard_normal(40)  # strong column effects: real hubs
    h = hn.hubness(S, k=10)
    n_k = reference_k_occurrence(S, 10).astype(float)
    assert h["skewness"] == pytest.approx(stats.skew(n_k, bias=True))
    assert h["kurtosis"] == pytest.approx(stats.kurtosis(n_k, bias=True))
    assert h["max"] == n_k.max()
    assert h["expected"] == pytest.approx(10 * 200 / 40)


# ---------------------------------------------------------------- what mutation testing found unchecked (issue 50)
def test_hubness_stats_by_hand():
    st = hn.hubness_stats(np.array([0, 1, 2, 9]), 3, 4)            # sums to k m = 12; expected 3
    m2, m3, m4 = 50 / 4, 180 / 4, 1394 / 4                         # central moments of [-3, -2, -1, 6]
    assert st == pytest.approx({"k": 3, "expected": 3.0, "skewness": m3 / m2 ** 1.5, "kurtosis": m4 / m2 ** 2 - 3,
                                "max": 9.0, "mad": 3.0, "antihub_share": 0.25, "hub_share": 0.25, "robin_hood": 0.5},
                               abs=1e-12)
    edge = hn.hubness_stats(np.array([6, 0, 3, 3]), 3, 4)          # N_k = 2 x the mean exactly is a hub
    assert edge["hub_share"] == 0.25 and hn.hubness_stats(np.array([6, 0, 3, 3]), 3, 4, hub_factor=2.01)["hub_share"] == 0
    flat = hn.hubness_stats(np.array([3, 3, 3, 3]), 3, 4)
    assert (flat["skewness"], flat["kurtosis"], flat["robin_hood"], flat["hub_share"]) == (0.0, 0.0, 0.0, 0.0)


def test_hubness_guards_say_what_is_wrong():
    for bad in (np.zeros((2, 2), int), np.zeros(0, int)):
        with pytest.raises(ValueError, match=r"^n_k must be a non-empty 1-D array; got shape"):
            hn.hubness_stats(bad, 1, 1)
    with pytest.raises(ValueError, match=r"^n_k must be non-negative counts$"):
        hn.hubness_stats(np.array([-1, 3]), 1, 2)
    with pytest.raises(ValueError, match=r"^n_k sums to 3, not k \* n_queries = 4: pass the k and n_queries used to "
                                         r"count it$"):
        hn.hubness_stats(np.array([1, 2]), 2, 2)
    with pytest.raises(ValueError, match=r"^k must be >= 1"):
        hn.hubness_stats(np.array([1, 2]), 0, 3)
    with pytest.raises(ValueError, match=r"^n_queries must be >= 1"):
        hn.hubness_stats(np.array([1, 2]), 3, 0)
    with pytest.raises(ValueError, match=r"^hub_factor must be a finite number > 0"):
        hn.hubness_stats(np.array([1, 2]), 1, 3, hub_factor=0)
    with pytest.raises(ValueError, match=r"^k=4 is larger than the number of targets \(3\): use k <= 3$"):
        hn.k_occurrence(np.zeros((2, 3), np.float32), 4)
    with pytest.raises(ValueError, match=r"^scores must be 2-D"):
        hn.k_occurrence(np.zeros(3, np.float32), 1)


def test_k_occurrence_over_many_blocks_and_the_one_call_form():
    rng = np.random.default_rng(8)
    S = np.round(rng.standard_normal((23, 9)), 1).astype(np.float32)      # rounded: many exact ties
    top = np.argsort(-S, axis=1, kind="stable")[:, :4]
    dense = np.bincount(top.ravel(), minlength=9)
    for chunk in (None, 1, 5, 23):
        got = hn.k_occurrence(S, 4, chunk_size=chunk)
        assert got.tolist() == dense.tolist() and got.dtype == np.int64
    default = hn.k_occurrence(np.tile(S, (1, 2)))                          # k = 10 by default (18 targets)
    assert default.sum() == 10 * 23
    one = hn.hubness(S, 4, chunk_size=5)
    assert one == hn.hubness_stats(dense, 4, 23)
    assert hn.hubness(np.tile(S, (1, 2)))["k"] == 10
    assert hn.hubness(S, 4, hub_factor=1.5)["hub_share"] == pytest.approx(np.mean(dense >= 1.5 * 4 * 23 / 9))


def test_one_target_no_rows_a_normalizer_and_the_default_hub_factor():
    assert hn.hubness_stats(np.array([5]), 5, 1)["robin_hood"] == 0.0       # one target: every query's top-5 is it
    with pytest.raises(ValueError, match=r"^scores have no rows: k_occurrence needs at least one query$"):
        hn.k_occurrence(np.zeros((0, 3), np.float32), 1)
    rng = np.random.default_rng(2)
    t, q = unit_rows(rng, 12, 6), unit_rows(rng, 40, 6)
    raw = hn.Identity().fit(t)
    S = q @ t.T
    n_k = np.bincount(np.argsort(-S, axis=1, kind="stable")[:, :3].ravel(), minlength=12)
    assert hn.hubness(raw, 3, q, chunk_size=7) == hn.hubness_stats(n_k, 3, 40)
    S = np.eye(4, dtype=np.float32)[[0, 0, 1, 2]]                   # N_1 = [2, 1, 1, 0]: mean 1, one target at 2x
    assert hn.hubness(S, 1)["hub_share"] == 0.25                       # hub_factor 2 by default
