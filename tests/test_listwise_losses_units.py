"""Unit checks of hubnorm.listwise.losses aimed at what its mutation run left unchecked by tests/test_listwise.py:
smooth and hard ranks, smooth NDCG, the S-NDCG loss and the triplet loss against slow float64 loops written here
(every (i, j, k) term, the ideal DCG from the sorted gains, both directions of the loss with a non-symmetric
relevance), the default temperature and margin, rows whose ideal DCG is 0, the dtype kept, and the triplet guards
by their messages (margin 0 allowed), and ``hard_rank`` keeping a half-precision dtype.

Mutation run (``--tests tests/test_listwise.py`` [+ this file]): 168 -> 180 of 189 killed (89% -> 95%). The 9
survivors change nothing a caller can observe on a CPU:

* ``device=s.device`` -> ``None`` / dropped in ``torch.eye`` / ``torch.arange`` (``smooth_rank_16/19``,
  ``smooth_ndcg_46/50``, ``triplet_loss_19/22``): the default device is the CPU here (observable only with scores
  on an accelerator);
* ``smooth_ndcg_35`` (``torch.sort`` without ``dim=1``): the default is the last dimension, the same for 2-D;
* ``smooth_ndcg_62`` (``idcg >= 0``): a row with ideal DCG 0 has all gains 0, so its DCG is 0 and
  ``0 / tiny`` is the same 0 the ``where`` gives;
* ``triplet_loss_23`` (``torch.eye(s.shape[1])``): the batch is square (checked just above).
"""

import math

import numpy as np
import pytest
import torch

from hubnorm.listwise import losses


# ---------------------------------------------------------------------------------------------- references
def _ref_smooth_rank(s, tau):
    m, n = s.shape
    out = np.ones((m, n))
    for i in range(m):
        for j in range(n):
            out[i, j] += sum(1.0 / (1.0 + math.exp(-(s[i, k] - s[i, j]) / tau)) for k in range(n) if k != j)
    return out


def _ref_hard_rank(s):
    m, n = s.shape
    return np.array([[1.0 + sum(s[i, k] > s[i, j] for k in range(n)) + 0.5 * sum(s[i, k] == s[i, j] for k in range(n)
                                                                               if k != j) for j in range(n)]
                     for i in range(m)])


def _ref_smooth_ndcg(s, r, tau):
    ranks = _ref_smooth_rank(s, tau)
    out = []
    for i in range(s.shape[0]):
        gains = [2.0 ** r[i, j] - 1.0 for j in range(s.shape[1])]
        dcg = sum(g / math.log2(1.0 + ranks[i, j]) for j, g in enumerate(gains))
        ideal = sum(g / math.log2(p + 2.0) for p, g in enumerate(sorted(gains, reverse=True)))
        out.append(dcg / ideal if ideal > 0 else 0.0)
    return np.array(out)


def _ref_triplet(s, margin):
    n = s.shape[0]
    v2t = [max([max(0.0, margin + s[i, j] - s[i, i]) for j in range(n) if j != i] + [0.0]) for i in range(n)]
    t2v = [max([max(0.0, margin + s[i, j] - s[j, j]) for i in range(n) if i != j] + [0.0]) for j in range(n)]
    return float(np.mean(v2t) + np.mean(t2v))


def _scores(seed, m=4, n=5):
    return np.random.default_rng(seed).standard_normal((m, n)) * 0.05


# ---------------------------------------------------------------------------------------------- ranks
@pytest.mark.parametrize("tau", [0.5, 0.03])
def test_smooth_rank_matches_the_explicit_sum(tau):
    s = _scores(0)
    got = losses.smooth_rank(torch.tensor(s), tau)
    assert got.dtype == torch.float64 and got.shape == (4, 5)
    np.testing.assert_allclose(got.numpy(), _ref_smooth_rank(s, tau), rtol=0, atol=1e-12)


def test_smooth_rank_default_tau_and_numpy_input():
    s = _scores(1)
    np.testing.assert_allclose(losses.smooth_rank(s).numpy(), _ref_smooth_rank(s, 0.01), rtol=0, atol=1e-12)
    # one candidate: no other term, rank 1
    assert losses.smooth_rank(np.array([[0.3], [0.1]])).tolist() == [[1.0], [1.0]]


def test_smooth_rank_bad_tau_message():
    with pytest.raises(ValueError, match=r"^tau must be a finite number > 0; got -1$"):
        losses.smooth_rank(_scores(0), -1)


def test_hard_rank_by_hand_and_against_the_loop():
    s = torch.tensor([[0.2, 0.5, 0.2, 0.9, 0.2]], dtype=torch.float32)
    got = losses.hard_rank(s)
    assert got.dtype == torch.float32
    assert got.tolist() == [[4.0, 2.0, 4.0, 1.0, 4.0]]             # three tied at positions 3-5: mean 4
    rng = np.random.default_rng(2)
    x = rng.integers(0, 3, (6, 7)).astype(float)                   # many ties
    np.testing.assert_array_equal(losses.hard_rank(x).numpy(), _ref_hard_rank(x))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_hard_rank_keeps_a_half_precision_dtype(dtype):
    # the counts are integers: cast to the scores' dtype before the sum (not promoted to the default float32)
    s = torch.tensor([[0.25, 0.5, 0.25], [1.0, 0.0, 2.0]], dtype=dtype)
    got = losses.hard_rank(s)
    assert got.dtype == dtype
    assert got.tolist() == [[2.5, 1.0, 2.5], [2.0, 3.0, 1.0]]


# ---------------------------------------------------------------------------------------------- smooth NDCG
@pytest.mark.parametrize("tau", [0.2, 0.02])
def test_smooth_ndcg_matches_the_explicit_loop(tau):
    s = _scores(3, 5, 6)
    r = np.round(np.random.default_rng(4).random((5, 6)) * 2, 2)
    r[2] = 0.0                                                      # ideal DCG 0: NDCG 0, not NaN
    got = losses.smooth_ndcg(torch.tensor(s), torch.tensor(r), tau)
    assert got.shape == (5,) and got.dtype == torch.float64
    np.testing.assert_allclose(got.numpy(), _ref_smooth_ndcg(s, r, tau), rtol=0, atol=1e-12)
    assert got[2] == 0.0


def test_smooth_ndcg_default_tau_and_dtype_kept():
    s = _scores(5, 3, 4)
    r = np.array([[0.0, 1.0, 0.5, 0.0], [2.0, 0.0, 0.0, 0.0], [0.3, 0.3, 0.3, 0.3]])
    np.testing.assert_allclose(losses.smooth_ndcg(s, r).numpy(), _ref_smooth_ndcg(s, r, 0.01), rtol=0, atol=1e-12)
    got32 = losses.smooth_ndcg(torch.tensor(s, dtype=torch.float32), torch.tensor(r, dtype=torch.float32), 0.1)
    assert got32.dtype == torch.float32
    np.testing.assert_allclose(got32.numpy(), _ref_smooth_ndcg(s, r, 0.1), rtol=0, atol=1e-5)


def test_smooth_ndcg_of_a_perfect_and_a_reversed_order_at_small_tau():
    s = torch.tensor([[3.0, 2.0, 1.0], [1.0, 2.0, 3.0]], dtype=torch.float64)
    r = torch.tensor([[2.0, 1.0, 0.0], [2.0, 1.0, 0.0]], dtype=torch.float64)
    got = losses.smooth_ndcg(s, r, 1e-3)
    ideal = 3.0 + 1.0 / math.log2(3.0)
    assert got.tolist() == pytest.approx([1.0, (1.0 / math.log2(3.0) + 3.0 / 2.0) / ideal], abs=1e-12)


# ---------------------------------------------------------------------------------------------- S-NDCG loss
@pytest.mark.parametrize("tau", [0.1, 0.01])
def test_smooth_ndcg_loss_sums_both_directions(tau):
    s = _scores(6, 5, 5)
    rng = np.random.default_rng(7)
    r = np.round(rng.random((5, 5)), 2) + 2.0 * np.eye(5)          # not symmetric: the transposed term differs
    want = np.mean(1.0 - _ref_smooth_ndcg(s, r, tau)) + np.mean(1.0 - _ref_smooth_ndcg(s.T, r.T, tau))
    assert float(losses.smooth_ndcg_loss(torch.tensor(s), torch.tensor(r), tau)) == pytest.approx(want, abs=1e-12)
    # with the default temperature
    if tau == 0.01:
        assert float(losses.smooth_ndcg_loss(s, r)) == pytest.approx(want, abs=1e-12)
    # a non-square batch: the text-to-image term ranks the columns
    s2, r2 = _scores(8, 3, 4), np.round(rng.random((3, 4)), 2)
    want2 = np.mean(1.0 - _ref_smooth_ndcg(s2, r2, tau)) + np.mean(1.0 - _ref_smooth_ndcg(s2.T, r2.T, tau))
    assert float(losses.smooth_ndcg_loss(s2, r2, tau)) == pytest.approx(want2, abs=1e-12)


def test_smooth_ndcg_loss_guards_the_relevance_shape():
    with pytest.raises(ValueError, match=r"^relevance has shape \(3, 2\) but scores have shape \(2, 3\)$"):
        losses.smooth_ndcg_loss(np.zeros((2, 3)), np.zeros((3, 2)))


# ---------------------------------------------------------------------------------------------- triplet
@pytest.mark.parametrize("margin", [0.0, 0.05, 0.3])
def test_triplet_loss_matches_the_explicit_loop(margin):
    s = np.random.default_rng(9).random((5, 5)) * 0.4
    got = losses.triplet_loss(torch.tensor(s), margin)
    assert got.dtype == torch.float64 and got.ndim == 0
    assert float(got) == pytest.approx(_ref_triplet(s, margin), abs=1e-12)


def test_triplet_loss_default_margin_and_directions_differ():
    # rows (v -> t) and columns (t -> v) give different hardest negatives: both counted
    s = np.array([[0.9, 0.85, 0.1], [0.0, 0.5, 0.2], [0.3, 0.1, 0.95]])
    want = _ref_triplet(s, 0.2)
    assert float(losses.triplet_loss(s)) == pytest.approx(want, abs=1e-12)
    # v->t: 0.15, 0, 0.2+0.3-0.95<0 -> 0; t->v: 0, 0.2+0.85-0.5=0.55, 0.2+0.2-0.95<0 -> 0
    assert want == pytest.approx(0.15 / 3 + 0.55 / 3)
    # negatives far below the positives: no cost (the diagonal itself never counts)
    assert float(losses.triplet_loss(np.eye(3))) == 0.0


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf")])
def test_triplet_loss_margin_guard(bad):
    with pytest.raises(ValueError, match=r"^margin must be a finite number >= 0; got " + re_escape(bad) + "$"):
        losses.triplet_loss(np.eye(3), bad)


def re_escape(x):
    import re
    return re.escape(str(x))


def test_triplet_loss_square_guard():
    with pytest.raises(ValueError, match=r"^triplet_loss needs a square batch of positive pairs on the diagonal; "
                                         r"got \(2, 3\)$"):
        losses.triplet_loss(np.zeros((2, 3)))
