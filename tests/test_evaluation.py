"""Evaluators: ranks, R@K, MdR, MnR, bootstrap intervals and graded NDCG against slow references."""

import numpy as np
import pytest
import torch
from sklearn.metrics import ndcg_score

import hubnorm as hn
from conftest import unit_rows

pytestmark = pytest.mark.usefixtures("single_thread_torch")


def reference_ranks(S, positive_lists):
    """Loop over queries: stable argsort of decreasing scores, position of the best positive."""
    out = []
    for i, pos in enumerate(positive_lists):
        order = np.argsort(-S[i], kind="stable")
        position = np.empty(S.shape[1], dtype=np.int64)
        position[order] = np.arange(S.shape[1])
        out.append(min(int(position[j]) for j in pos))
    return np.array(out)


def _random_positive_lists(rng, m, n, max_pos=4):
    return [list(rng.choice(n, size=rng.integers(1, max_pos + 1), replace=False)) for _ in range(m)]


@pytest.fixture(params=["numpy", "torch"])
def counts_side(request, monkeypatch):
    """Both sides of the per-row counting seam (hubnorm.evaluation.counts_namespace): numpy on the CPU by default,
    and torch (what a torch device runs), forced here on CPU tensors."""
    from hubnorm import evaluation
    assert evaluation.counts_namespace("cpu") is np
    if request.param == "torch":
        monkeypatch.setattr(evaluation, "counts_namespace", lambda device: torch)
    return request.param


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("ties", [False, True])
def test_positive_ranks_match_python_reference(seed, ties, counts_side):
    rng = np.random.default_rng(seed)
    m, n = 37, 23
    S = rng.integers(0, 4, (m, n)).astype(np.float64) if ties else rng.standard_normal((m, n))
    lists = _random_positive_lists(rng, m, n)
    pos = hn.Positives.from_lists(lists, n)
    ref = reference_ranks(S, lists)
    for chunk in (None, 1, 5, 100):
        np.testing.assert_array_equal(hn.positive_ranks(S, pos, chunk_size=chunk), ref)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):   # numpy's side takes float32/64, torch the rest
        S_d = torch.from_numpy(S).to(dtype)
        np.testing.assert_array_equal(hn.positive_ranks(S_d, pos), reference_ranks(S_d.double().numpy(), lists))
    # a transposed (non-contiguous) score matrix is read as it is
    np.testing.assert_array_equal(hn.positive_ranks(torch.from_numpy(np.ascontiguousarray(S.T)).T, pos), ref)
    # a lazily negated view (torch's negative bit: the imaginary part of a conjugate) and a tensor requiring grad
    neg = torch.complex(torch.zeros_like(torch.from_numpy(S)), -torch.from_numpy(S)).conj().imag
    assert neg.is_neg()
    np.testing.assert_array_equal(hn.positive_ranks(neg, pos), ref)
    np.testing.assert_array_equal(hn.positive_ranks(torch.from_numpy(S).requires_grad_(), pos), ref)


def test_positive_ranks_of_score_blocks_that_require_grad(counts_side):
    """A score source whose blocks require grad (a differentiable model's scores): ranked as their values."""
    rng = np.random.default_rng(3)
    S = rng.integers(0, 4, (30, 9)).astype(np.float32)
    lists = _random_positive_lists(rng, 30, 9)

    class Source:
        def iter_scores(self, queries, chunk_size=None):
            for q0 in range(0, 30, 7):
                yield q0, torch.from_numpy(S[q0:q0 + 7]).requires_grad_()

    ranks = hn.positive_ranks(Source(), hn.Positives.from_lists(lists, 9), queries=np.zeros((30, 2)))
    np.testing.assert_array_equal(ranks, reference_ranks(S, lists))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_positive_ranks_rows_with_and_without_other_ties(dtype, counts_side):
    """Blocks where most rows have no tie with their best positive and a few have several, before and after the
    best column (the numpy side counts ties only in those rows), one or several positives per query."""
    rng = np.random.default_rng(11)
    m, n = 200, 64
    S = rng.standard_normal((m, n)).astype(dtype)
    lists = _random_positive_lists(rng, m, n, max_pos=3)
    for i in range(0, m, 7):   # every 7th row: copy its best positive's score onto 1-4 other targets
        best = max(lists[i], key=lambda j: (S[i, j], -j))
        S[i, rng.choice(n, size=rng.integers(1, 5), replace=False)] = S[i, best]
    pos = hn.Positives.from_lists(lists, n)
    ref = reference_ranks(S, lists)
    for chunk in (None, 3, 64):
        np.testing.assert_array_equal(hn.positive_ranks(S, pos, chunk_size=chunk), ref)


def test_positive_ranks_from_a_normalizer_equal_matrix_ranks():
    rng = np.random.default_rng(5)
    imgs, caps, bank = unit_rows(rng, 30, 12), unit_rows(rng, 90, 12), unit_rows(rng, 50, 12)
    c2i = np.repeat(np.arange(30), 3)
    task = hn.build_tasks(imgs, caps, c2i, caption_bank=bank)["t2i"]
    nnn = task.fit(hn.NearestNeighborNormalization(alpha=0.7, k=5, device="cpu"))
    S = nnn.score(caps).numpy()
    ref = reference_ranks(S, [[c2i[j]] for j in range(90)])
    np.testing.assert_array_equal(hn.positive_ranks(nnn, task.positives, caps), ref)
    res, ranks = hn.evaluate(nnn, task, return_ranks=True)
    np.testing.assert_array_equal(ranks, ref)
    assert res["R@1"] == pytest.approx(100 * np.mean(ref < 1))


def test_i2t_rank_is_best_caption():
    # image 0 has captions 0, 1, 2: caption 2 scores highest of them
    S = np.array([[0.1, 0.2, 0.9, 0.95, 0.3],
                  [0.5, 0.4, 0.3, 0.2, 0.1]])
    pos = hn.Positives.from_groups(np.array([0, 0, 0, 1, 1]), n_queries=2)
    np.testing.assert_array_equal(hn.positive_ranks(S, pos), [1, 3])


def test_ties_break_by_target_index():
    S = np.array([[1.0, 1.0, 1.0, 0.0]])
    assert hn.positive_ranks(S, hn.Positives.from_labels(np.array([2]), 4))[0] == 2
    assert hn.positive_ranks(S, hn.Positives.from_labels(np.array([0]), 4))[0] == 0
    assert hn.positive_ranks(S, hn.Positives.from_lists([[1, 2]], 4))[0] == 1


def test_recall_median_mean_rank_hand_made():
    ranks = np.array([0, 0, 1, 4, 9, 20])
    assert hn.recall_at_k(ranks, 1) == pytest.approx(100 * 2 / 6)
    assert hn.recall_at_k(ranks, 5) == pytest.approx(100 * 4 / 6)
    assert hn.recall_at_k(ranks, 10) == pytest.approx(100 * 5 / 6)
    assert hn.median_rank(ranks) == 3.0  # median 2.5 -> floor 2 -> +1
    assert hn.mean_rank(ranks) == pytest.approx(34 / 6 + 1)
    assert hn.median_rank(np.array([0, 1, 5])) == 2.0
    summary = hn.summarize_ranks(ranks, ks=(1, 10))
    assert set(summary) == {"R@1", "R@10", "MdR", "MnR"}


@pytest.mark.parametrize("m", [1, 2, 7, 5000, 5001])
def test_summaries_of_many_rows_equal_the_per_row_functions_to_the_bit(m):
    """summarize_rank_rows (a grid's ranks, one pass per statistic) against recall_at_k, median_rank and mean_rank
    on each row, compared with == (odd and even numbers of queries: the median's two middle ranks)."""
    from hubnorm.evaluation import summarize_rank_rows

    rng = np.random.default_rng(m)
    ranks = np.concatenate([rng.integers(0, 1000, (6, m)), np.zeros((1, m), dtype=np.int64),
                            rng.geometric(0.3, (3, m)) - 1])
    rows = summarize_rank_rows(ranks, (1, 5, 10, 3000))
    for r, row in zip(ranks, rows):
        want = {**{f"R@{k}": hn.recall_at_k(r, k) for k in (1, 5, 10, 3000)}, "MdR": hn.median_rank(r),
                "MnR": hn.mean_rank(r)}
        assert row == want and list(row) == list(want)
        assert hn.summarize_ranks(r, (1, 5, 10, 3000)) == want
    assert summarize_rank_rows(np.empty((0, m), dtype=np.int64)) == []
    with pytest.raises(ValueError, match="non-negative integers"):
        summarize_rank_rows(-ranks - 1)
    with pytest.raises(ValueError, match="settings, queries"):
        summarize_rank_rows(ranks[0])


def test_recall_monotone_in_k():
    ranks = np.random.default_rng(0).integers(0, 50, 200)
    rs = [hn.recall_at_k(ranks, k) for k in (1, 2, 5, 10, 50, 51)]
    assert all(a <= b for a, b in zip(rs, rs[1:]))
    assert rs[-1] == 100.0


def test_bootstrap_ci_seeded_contains_point_and_narrows():
    rng = np.random.default_rng(1)
    small = rng.integers(0, 4, 100)
    large = rng.integers(0, 4, 5000)
    lo, hi = hn.bootstrap_ci(small, n_boot=500, seed=3)
    assert (lo, hi) == hn.bootstrap_ci(small, n_boot=500, seed=3)
    assert (lo, hi) != hn.bootstrap_ci(small, n_boot=500, seed=4)
    assert lo <= hn.recall_at_k(small, 1) <= hi
    lo2, hi2 = hn.bootstrap_ci(large, n_boot=500, seed=3)
    assert lo2 <= hn.recall_at_k(large, 1) <= hi2
    assert hi2 - lo2 < 0.5 * (hi - lo)
    # other statistics
    lo_m, hi_m = hn.bootstrap_ci(small, hn.mean_rank, n_boot=300, seed=0)
    assert lo_m <= hn.mean_rank(small) <= hi_m
    # a wider level gives a wider interval
    lo9, hi9 = hn.bootstrap_ci(small, n_boot=500, seed=3, level=0.5)
    assert hi9 - lo9 < hi - lo


def test_evaluate_with_bootstrap_reports_intervals():
    rng = np.random.default_rng(2)
    imgs = unit_rows(rng, 20, 8)
    caps = hn.l2_normalize(imgs.repeat(3, axis=0) + 0.6 * rng.standard_normal((60, 8)).astype(np.float32))
    task = hn.build_tasks(imgs, caps, np.repeat(np.arange(20), 3))["t2i"]
    raw = task.fit(hn.Identity(device="cpu"))
    res = hn.evaluate(raw, task, n_boot=200, seed=0)
    for k in (1, 5, 10):
        assert res[f"R@{k} lo"] <= res[f"R@{k}"] <= res[f"R@{k} hi"]


# ---------------------------------------------------------------------------------------------- NDCG
def _sk_ndcg_rows(scores, rel, k, exponential):
    y_true = np.power(2.0, rel) - 1 if exponential else rel
    return np.array([ndcg_score(y_true[i:i + 1], scores[i:i + 1], k=k, ignore_ties=False) for i in range(len(scores))])


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("k", [1, 3, 10, 40])
def test_ndcg_matches_sklearn_random(seed, k):
    rng = np.random.default_rng(seed)
    scores = rng.standard_normal((12, 25))
    rel = rng.uniform(0, 1, (12, 25)) * (rng.uniform(size=(12, 25)) < 0.4)
    for exponential in (True, False):
        np.testing.assert_allclose(hn.ndcg_at_k(scores, rel, k, exponential_gain=exponential),
                                   _sk_ndcg_rows(scores, rel, k, exponential), atol=1e-12)


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_ndcg_matches_sklearn_with_ties_and_graded_gains(k):
    rng = np.random.default_rng(7)
    scores = rng.integers(0, 3, (15, 8)).astype(float)  # many ties
    rel = rng.integers(0, 4, (15, 8)).astype(float)       # graded 0..3
    rel[0] = 0  # a query with no relevant item gets NDCG 0
    for exponential in (True, False):
        ours = hn.ndcg_at_k(scores, rel, k, exponential_gain=exponential)
        np.testing.assert_allclose(ours, _sk_ndcg_rows(scores, rel, k, exponential), atol=1e-12)
        assert ours[0] == 0.0


def test_ndcg_hand_made():
    # perfect order -> 1; reversed order of gains (3, 1) -> known value
    rel = np.array([[3.0, 1.0, 0.0]])
    assert hn.ndcg_at_k(np.array([[3.0, 2.0, 1.0]]), rel, 3)[0] == pytest.approx(1.0)
    dcg = 0 / np.log2(2) + (2**1 - 1) / np.log2(3) + (2**3 - 1) / np.log2(4)  # order: items 2, 1, 0
    idcg = (2**3 - 1) / np.log2(2) + (2**1 - 1) / np.log2(3)
    assert hn.ndcg_at_k(np.array([[0.0, 1.0, 2.0]]), rel, 3)[0] == pytest.approx(dcg / idcg)
    # a full tie over both relevant items: each gets the average gain (7 + 1) / 2 at positions 1 and 2
    tied = ((8 / 2) / np.log2(2) + (8 / 2) / np.log2(3)) / idcg
    assert hn.ndcg_at_k(np.array([[1.0, 1.0, 0.0]]), rel, 2)[0] == pytest.approx(tied)
    assert tied < 1.0
    # linear gain
    lin = (1 / np.log2(3) + 3 / np.log2(4)) / (3 / np.log2(2) + 1 / np.log2(3))
    assert hn.ndcg_at_k(np.array([[0.0, 1.0, 2.0]]), rel, 3, exponential_gain=False)[0] == pytest.approx(lin)
