"""OTN, L2N and HN (DBSN Sec. 4.5, Table 6): each plan against an independent solver of its problem, the marginals,
the paper's handling of surplus queries in HN, the transductive contract (only fitted rows are scored), and the
same results from embeddings and from score matrices. The generic method checks (engines, Dask, dtypes, blocks)
run them too (``tests/method_checks.py``)."""

import itertools

import numpy as np
import pytest
import torch
from scipy.optimize import linear_sum_assignment, linprog, minimize

import hubnorm as hn
from conftest import unit_rows


def _scores(seed, m, n, d=8):
    rng = np.random.default_rng(seed)
    q, t = unit_rows(rng, m, d, np.float64), unit_rows(rng, n, d, np.float64)
    return q, t, q @ t.T


def _fit(name, t, bank, **params):
    return hn.make_normalizer(name, device="cpu", **params).fit(t, query_bank=bank)


def _lp_plan(S):
    """max <S, pi> over the transport polytope with uniform marginals, by HiGHS (an independent LP solver)."""
    m, n = S.shape
    A_eq = np.vstack([np.kron(np.eye(m), np.ones(n)), np.kron(np.ones(m), np.eye(n))])
    b_eq = np.concatenate([np.full(m, 1 / m), np.full(n, 1 / n)])
    res = linprog(-S.ravel(), A_eq=A_eq, b_eq=b_eq, bounds=(0, None), method="highs")
    assert res.status == 0
    return res.x.reshape(m, n)


@pytest.mark.parametrize("m, n, seed", [(7, 5, 0), (6, 6, 1), (12, 4, 2), (4, 9, 3)])
def test_otn_is_the_optimal_transport_plan(m, n, seed):
    q, t, S = _scores(seed, m, n)
    norm = _fit("otn", t, q)
    plan = norm.plan_.numpy() / m                       # back to the paper's a_i = 1/m
    np.testing.assert_allclose(plan.sum(1), 1 / m, atol=1e-14)
    np.testing.assert_allclose(plan.sum(0), 1 / n, atol=1e-14)
    ref = _lp_plan(S)
    assert np.sum(plan * S) == pytest.approx(np.sum(ref * S), abs=1e-13)    # the optimal value
    np.testing.assert_allclose(plan, ref, atol=1e-9)    # generic scores: the optimum is unique
    assert (plan > 0).sum() <= m + n - 1                # a vertex: Table 6's sparsity
    assert norm.sparsity == pytest.approx(1 - (plan > 0).sum() / (m * n))


@pytest.mark.parametrize("reg", [0.02, 0.1, 1.0])
def test_l2n_solves_the_regularised_problem(reg):
    m, n = 6, 4
    q, t, S = _scores(4, m, n)
    norm = _fit("l2n", t, q, reg=reg)
    Q = norm.plan_.numpy()                              # a query's mass is 1: the problem <S,Q>/m - reg/(2m) ||Q||^2
    np.testing.assert_allclose(Q.sum(1), 1, atol=1e-12)
    np.testing.assert_allclose(Q.sum(0), m / n, atol=1e-12)
    assert (Q >= 0).all()

    def neg(x):
        x = x.reshape(m, n)
        return -(np.sum(S * x) / m - reg / (2 * m) * np.sum(x * x))

    cons = [{"type": "eq", "fun": lambda x: x.reshape(m, n).sum(1) - 1},
            {"type": "eq", "fun": lambda x: x.reshape(m, n).sum(0)[:-1] - m / n}]
    ref = minimize(neg, np.full(m * n, 1 / n), method="SLSQP", bounds=[(0, None)] * (m * n), constraints=cons,
                   options={"ftol": 1e-15, "maxiter": 1000})
    assert ref.success
    assert -neg(Q.ravel()) >= -ref.fun - 1e-12          # at least as good as a generic QP solver
    np.testing.assert_allclose(Q, ref.x.reshape(m, n), atol=1e-5)


def test_l2n_goes_to_otn_as_reg_shrinks_and_spreads_as_it_grows():
    q, t, S = _scores(5, 10, 6)
    otn = _fit("otn", t, q)
    small, large = _fit("l2n", t, q, reg=1e-5), _fit("l2n", t, q, reg=5.0)
    np.testing.assert_allclose(small.plan_.numpy(), otn.plan_.numpy(), atol=1e-3)
    assert small.sparsity >= large.sparsity + 0.2


def _best_assignment(S):
    """Brute force: the injective assignment of the smaller side with the largest total score."""
    m, n = S.shape
    best, arg = -np.inf, None
    if m <= n:
        for cols in itertools.permutations(range(n), m):
            v = S[np.arange(m), cols].sum()
            if v > best:
                best, arg = v, (np.arange(m), np.array(cols))
    else:
        for rows in itertools.permutations(range(m), n):
            v = S[rows, np.arange(n)].sum()
            if v > best:
                best, arg = v, (np.array(rows), np.arange(n))
    return best, arg


@pytest.mark.parametrize("m, n, seed", [(5, 6, 0), (5, 5, 1), (7, 3, 2)])
def test_hn_is_the_best_assignment_and_surplus_rows_are_zero(m, n, seed):
    q, t, S = _scores(seed, m, n)
    plan = _fit("hungarian", t, q).plan_.numpy()
    assert set(np.unique(plan)) <= {0.0, 1.0}
    best, (rows, cols) = _best_assignment(S)
    assert np.sum(plan * S) == pytest.approx(best, abs=1e-12)
    expected = np.zeros((m, n))
    expected[rows, cols] = 1
    np.testing.assert_array_equal(plan, expected)
    assert (plan.sum(1) == 0).sum() == max(0, m - n)        # the surplus queries: all-zero rows (DBSN Sec. 4.5)
    assert (plan.sum(0) <= 1).all()


@pytest.mark.parametrize("name", ["otn", "l2n", "hungarian"])
def test_transductive_scoring_refuses_other_queries_and_averages_duplicates(name):
    q, t, _ = _scores(6, 9, 5)
    norm = _fit(name, t, q)
    np.testing.assert_array_equal(norm.score(q[::-1].copy()).numpy(), norm.plan_.numpy()[::-1])  # any order of rows
    other = unit_rows(np.random.default_rng(99), 2, 8)
    with pytest.raises(ValueError, match="transductive.*query_aware=True"):
        norm.score(other)
    dup = np.vstack([q, q[:1]])                          # query 0 twice: both rows get the mean of their plan rows
    norm = _fit(name, t, dup)
    s = norm.score(dup).numpy()
    np.testing.assert_allclose(s[0], s[-1])
    np.testing.assert_allclose(s[0], norm.plan_.numpy()[[0, -1]].mean(0))


@pytest.mark.parametrize("name", ["otn", "l2n", "hungarian"])
def test_embeddings_and_score_matrices_give_the_same_query_aware_results(name):
    rng = np.random.default_rng(7)
    t = unit_rows(rng, 12, 16)
    labels = np.repeat(np.arange(12), 3)
    q = t[labels] + 0.9 * rng.standard_normal((36, 16))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    pos = hn.Positives.from_labels(labels, 12)
    task = hn.RetrievalTask(q, t, pos)
    emb = task.fit(hn.make_normalizer(name), query_aware=True)
    from_emb = hn.evaluate(emb, task)
    st = hn.RetrievalTask(scores={("queries", "targets"): q @ t.T}, positives=pos, direction="t2i")
    scores = hn.make_normalizer(name)
    with pytest.raises(hn.NotFittedError, match="not fitted"):
        scores.sparsity
    from_scores = hn.evaluate(st.fit(scores, query_aware=True), st)
    for key in ("R@1", "R@5", "R@10", "MdR", "MnR"):
        assert from_emb[key] == pytest.approx(from_scores[key], abs=1e-9), key
    assert scores.sparsity == emb.sparsity > 0.5   # Table 6's last column, from either input


def test_zero_mass_targets_rank_by_index():
    """A query whose positive got no mass ranks it after its transported targets, among the zeros by index (the
    rank rule of hubnorm.positive_ranks): HN with more queries than targets leaves whole rows at zero."""
    q, t, _ = _scores(8, 8, 4)
    norm = _fit("hungarian", t, q)
    s = norm.score(q).numpy()
    empty = np.flatnonzero(s.sum(1) == 0)
    assert empty.size == 4
    pos = hn.Positives.from_labels(np.full(8, 3), 4)     # every query's positive is the last target
    ranks = hn.positive_ranks(s, pos)
    np.testing.assert_array_equal(ranks[empty], 3)       # three targets with a smaller index tie before it


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n_images, captions", [(30, 5), (100, 5), (60, 1)])
def test_l2n_converges_on_clustered_embeddings(seed, n_images, captions):
    """The shapes where Newton's method without a line search failed to settle the support (seeds 4 and 5 of these
    sizes): both marginals now hold in float64 for every seed."""
    from hubnorm.synthetic import make_dataset

    te = make_dataset("flickr30k", seed=seed, n_train_images=0, n_val_images=0, n_test_images=n_images).splits["test"]
    caps = te.captions.reshape(n_images, 5, -1)[:, :captions].reshape(n_images * captions, -1).astype(np.float64)
    norm = _fit("l2n", te.images.astype(np.float64), caps, reg=0.05)
    Q = norm.plan_.numpy()
    np.testing.assert_allclose(Q.sum(1), 1, atol=1e-11)
    np.testing.assert_allclose(Q.sum(0), captions, atol=1e-11)


# ------------------------------------------------------------------------------------------ mutation-test survivors
@pytest.mark.filterwarnings("ignore:numItermax reached")
def test_otn_says_when_the_network_simplex_stops_early(monkeypatch):
    """POT stops the simplex after numItermax pivots and reports it in its log: OTN refuses that plan, naming POT's
    warning (with its own cap lowered to 5 pivots, which a 12 x 9 problem needs more than)."""
    from hubnorm.normalizers import optimal_transport as otm

    q, t, _ = _scores(3, 12, 9)
    monkeypatch.setattr(otm, "MAX_ITER", 5)
    with pytest.raises(RuntimeError, match=r"OTN: the network simplex did not finish \(numItermax reached"):
        _fit("otn", t, q)


def test_pot_missing_is_named_with_the_install_command(monkeypatch):
    import builtins

    from hubnorm.normalizers.plans import import_pot

    real_import = builtins.__import__

    def no_pot(name, *args, **kwargs):
        if name == "ot" or name.startswith("ot."):
            raise ImportError("No module named 'ot'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pot)
    with pytest.raises(ImportError) as info:
        import_pot()
    assert str(info.value) == "OTN and L2N solve transport problems with POT: pip install POT"


def test_a_bank_larger_and_smaller_than_the_gallery_gathers_its_scores_by_row():
    for m, n in ((7, 4), (4, 7)):
        q, t, S = _scores(5, m, n)
        norm = _fit("otn", t, q)
        np.testing.assert_allclose(norm.bank_scores_.numpy(), S, rtol=0, atol=1e-14)
        np.testing.assert_allclose(norm.plan_.numpy(), _lp_plan(S) * m, atol=1e-9)


def test_rows_are_recognised_within_a_tolerance_relative_to_the_score_scale():
    """A row is a fitted one when every entry is within ROW_TOLERANCE[dtype] * max|bank| of it: scaled scores keep
    the same relative tolerance, an all-zero bank uses an absolute one, and a dtype without a tolerance of its own
    (float16) is matched at float64's (1e-9): its fitted rows only."""
    from hubnorm.normalizers.plans import ROW_TOLERANCE

    _, _, S = _scores(8, 6, 5)
    for scale in (1e3, 1e-3):
        norm = hn.make_normalizer("otn")
        norm.bank_scores_ = torch.from_numpy(S * scale)
        tol = ROW_TOLERANCE[torch.float64] * float(np.abs(S * scale).max())
        near = torch.from_numpy(S[[2]] * scale) + 0.9 * tol        # every entry moved by 0.9 tol, the same way
        rows, dup = norm._fitted_rows(near)
        assert rows.tolist() == [2] and dup == {}
        far = torch.from_numpy(S[[2]] * scale)
        far[0, 1] += 1.5 * tol
        with pytest.raises(ValueError, match="OptimalTransportNormalization is transductive: row 0 of these scores"):
            norm._fitted_rows(far)
    norm = hn.make_normalizer("otn")
    norm.bank_scores_ = torch.zeros(3, 4, dtype=torch.float64)
    norm.bank_scores_[1, 0] = 0.0
    assert norm._fitted_rows(torch.full((1, 4), 0.5e-9, dtype=torch.float64))[0].tolist() in ([0], [-1])
    with pytest.raises(ValueError, match="is transductive"):
        norm._fitted_rows(torch.full((1, 4), 1.5e-9, dtype=torch.float64))
    norm = hn.make_normalizer("otn")
    norm.bank_scores_ = torch.from_numpy(S)
    half = torch.from_numpy(S[[4, 1]]).to(torch.float16)
    assert norm._fitted_rows(half)[0].tolist() == [4, 1]
    with pytest.raises(ValueError, match="is transductive"):
        norm._fitted_rows(half + torch.tensor(0.01, dtype=torch.float16))


def test_duplicate_rows_are_marked_and_scores_keep_the_input_dtype():
    q, t, S = _scores(4, 6, 5)
    dup = np.vstack([q, q[:1]])
    norm = _fit("otn", t, dup)
    rows, duplicates = norm._fitted_rows(norm.bank_scores_[[0, 3]].clone())
    assert rows.tolist() == [-1, 3] and sorted(duplicates[0].tolist()) == [0, 6]
    norm32 = _fit("otn", t.astype(np.float32), q.astype(np.float32))
    out = norm32.normalize_scores(norm32.bank_scores_.clone())
    assert out.dtype == torch.float32
    np.testing.assert_array_equal(out.numpy(), norm32.plan_.numpy())
