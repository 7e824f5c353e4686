"""L2N's solver in units (``hubnorm.normalizers.l2_transport``): the generalised Hessian of the dual, the damped
semismooth Newton method, the exact solve on a settled support, and how ``solve`` sets Newton's tolerance and names
a failure.

References, none of them the module's own code path:

* a dense float64 solution of the same L2-regularised problem: exact block-coordinate ascent on the dual (each
  potential in turn set by a sorted threshold, as in a projection on the simplex) until the support settles, then
  the linear optimality conditions on that support solved densely by least squares and accepted only as a KKT
  certificate (entries positive on the support, non-positive off it, both marginals);
* the generalised Hessian written out entry by entry;
* a 2 x 2 problem solved by hand whose optimum sits exactly on the boundary of its support;
* block-diagonal problems against each block solved as a problem of its own (the one-block form);
* the step-length arithmetic of Armijo's rule on a quadratic along an eigenvector of the Hessian.

Branches that no ordinary input reaches are reached by injecting the fault they handle: a failed Newton direction
(``spsolve`` answering zeros or NaN), a failed exact solve, a given start instead of POT's L-BFGS one. The line
search's work is observed by wrapping the module's ``_dual`` (every trial point is one call).

The 18 mutants these tests leave alive (benchmarks/reports/mutation/normalizers.l2_transport.md) are judged
equivalent: ``connected_components`` of a symmetric matrix with ``directed`` None/True/default (exact 28, 30, 31:
the same components); ``errstate(all=None)`` around a system that is never singular (exact 49); the sparse format
of an identity (newton 41, 43); ``t >= 1e-12`` for ``t`` a power of two, never equal to it (newton 60); a ridge
floor of 2 instead of 1, absorbed by the halving line search (newton 30); POT's ``reg_type`` dropped or "L2" (its
default, lowercased: solve 32, 39); POT's ``stopThr`` / ``numItermax`` defaults (only the start's quality changes;
Newton and the exact solve make the plan independent of it: solve 25, 33, 34, 41); ``np.asarray`` of POT's
float64 potentials without ``float`` (solve 80, 82, 86, 88).

From starts far from the optimum (not POT's L-BFGS starts) the dual's decrease per Newton step near the optimum is
below float64 rounding of its value, which Armijo's test alone cannot see: before the line search also judged such
steps by the marginals' error they leave, 35 of 600 far starts (5 x 4 scores of ``default_rng(0..29)``, reg 1e-3,
one potential 1e-6 to 10 below its row's support) spent their 200 steps above the tolerance (e.g. seed 5, drop 1.0:
error 8.9e-11 against 2.8e-11). ``test_newton_converges_from_every_far_start`` holds all 600 to it.
"""

import warnings

import numpy as np
import pytest
from scipy.sparse.csgraph import connected_components

from hubnorm.normalizers import l2_transport as L2
from hubnorm.normalizers.l2_transport import L2TransportNormalization

# the trial step lengths of one line search: 1, 1/2, ..., 2^-39 (the last power of two above 1e-12)
TRIALS_PER_STEP = 40


# ------------------------------------------------------------------------------------------------ references
def _scores(seed, m, n, scale=1.0):
    return scale * np.random.default_rng(seed).uniform(-1.0, 1.0, (m, n))


def _marginals(m, n):
    return np.full(m, 1.0 / m), np.full(n, 1.0 / n)


def _grad(S, f, g, gamma, a, b):
    """The marginals' errors of the plan ``[S + f + g]_+ / gamma`` (the dual's gradient), in the module's order of
    operations, so that a start can be placed at a chosen distance from the tolerance."""
    x = np.maximum(S + f[:, None] + g[None, :], 0.0)
    return np.concatenate([x.sum(1) / gamma - a, x.sum(0) / gamma - b])


def _doc_tol(S, gamma):
    """Newton's tolerance as the module documents it: 1e-13 of a query's mass, or float64 rounding of S + f + g."""
    m, n = S.shape
    return max(1e-13 / m, 64 * np.finfo(np.float64).eps * (1.0 + np.abs(S).max()) * max(m, n) / gamma)


def _kkt_potentials(S, gamma, support):
    """The linear optimality conditions on a support (row i: sum_j in support (S_ij + f_i + g_j) = gamma / m, column
    j likewise), dense, solved by least squares (the minimum-norm potentials)."""
    m, n = S.shape
    r, c = np.nonzero(support)
    A = np.zeros((m + n, m + n))
    rhs = np.concatenate([np.full(m, gamma / m), np.full(n, gamma / n)])
    for i, j in zip(r, c):
        A[i, i] += 1
        A[m + j, m + j] += 1
        A[i, m + j] += 1
        A[m + j, i] += 1
        rhs[i] -= S[i, j]
        rhs[m + j] -= S[i, j]
    x = np.linalg.lstsq(A, rhs, rcond=None)[0]
    return x[:m], x[m:]


def _threshold(V, mass):
    """Per row of V: the t with sum_j max(V_ij + t, 0) = mass (sorted, as in a projection on the simplex)."""
    Vs = -np.sort(-V, axis=1)
    t = (mass - np.cumsum(Vs, axis=1)) / np.arange(1, V.shape[1] + 1)
    k = (Vs + t > 0).sum(1) - 1
    return t[np.arange(V.shape[0]), k]


def _reference(S, reg):
    """The optimal potentials and plan (``pi = [S + f + g]_+ / gamma``, ``gamma = reg m``) by block-coordinate ascent
    on the dual, finished by the KKT conditions on the settled support; potentials keep the ascent's shift on each
    connected part of the support (the conditions fix them only up to one shift per part)."""
    m, n = S.shape
    gamma = reg * m
    f, g = np.zeros(m), np.zeros(n)
    for _ in range(200):
        for _ in range(200):
            f = _threshold(S + g[None, :], gamma / m)
            g = _threshold((S + f[:, None]).T, gamma / n)
        support = (S + f[:, None] + g[None, :]) > 0
        fk, gk = _kkt_potentials(S, gamma, support)
        adjacency = np.block([[np.zeros((m, m)), support], [support.T, np.zeros((n, n))]])
        _, part = connected_components(adjacency, directed=False)
        for p in np.unique(part):
            rows, cols = part[:m] == p, part[m:] == p
            shift = np.mean(np.concatenate([f[rows] - fk[rows], gk[cols] - g[cols]]))
            fk[rows] += shift
            gk[cols] -= shift
        Y = S + fk[:, None] + gk[None, :]
        plan = np.where(support, Y, 0.0) / gamma
        if ((Y[support] > 0).all() and (Y[~support] <= 1e-14).all()             # the KKT certificate
                and np.abs(plan.sum(1) - 1 / m).max() <= 1e-12 and np.abs(plan.sum(0) - 1 / n).max() <= 1e-12):
            return fk, gk, plan
    raise AssertionError("the reference did not settle a support")


def _plan(S, f, g, gamma):
    return np.maximum(0.0, S + f[:, None] + g[None, :]) / gamma


def _assert_converged(S, potentials, gamma, ref, tol=None):
    """Newton's contract: potentials whose plan holds both marginals to the tolerance (the documented one unless
    given), on the reference's support and (a plan entry is at most 1/m) near the reference plan."""
    assert potentials is not None
    m, n = S.shape
    tol = tol or _doc_tol(S, gamma)
    plan = _plan(S, *potentials, gamma)
    assert np.abs(plan.sum(1) - 1 / m).max() <= tol and np.abs(plan.sum(0) - 1 / n).max() <= tol
    np.testing.assert_array_equal(plan > 0, ref > 0)
    np.testing.assert_allclose(plan, ref, rtol=0, atol=max(1e-10, 100 * tol))


@pytest.fixture
def dual_calls(monkeypatch):
    """Counts the dual's evaluations (the start, then one per trial step) and stops a line search that runs past the
    most a Newton run can make (``1 + NEWTON_STEPS * TRIALS_PER_STEP``): a step length that never shrinks would loop
    for ever."""
    calls = []
    real = L2._dual

    def counted(S, f, g, gamma, a, b):
        calls.append(1)
        assert len(calls) <= 1 + L2.NEWTON_STEPS * TRIALS_PER_STEP, "the line search did not stop"
        return real(S, f, g, gamma, a, b)

    monkeypatch.setattr(L2, "_dual", counted)
    return calls


# ------------------------------------------------------------------------------------- the generalised Hessian
def test_support_system_is_the_dense_generalised_hessian_even_with_empty_rows_and_columns():
    """``[[diag(row counts), B], [B^T, diag(column counts)]]`` of a support, m + n square whatever the support: here
    its last query and last target hold nothing (a start far from the optimum leaves such rows)."""
    support = np.array([[1, 0, 1, 0],
                        [1, 1, 0, 0],
                        [0, 0, 0, 0]], bool)
    m, n = support.shape
    dense = np.zeros((m + n, m + n))
    for i in range(m):
        for j in range(n):
            if support[i, j]:
                dense[i, i] += 1
                dense[m + j, m + j] += 1
                dense[i, m + j] = dense[m + j, i] = 1
    K = L2._support_system(support)
    assert K.shape == (m + n, m + n)
    np.testing.assert_array_equal(K.toarray(), dense)


# ------------------------------------------------------------------------------------------------ exact solve
def test_exact_solve_recovers_the_reference_from_any_start_on_its_support():
    """From potentials off the optimum but on its support, the exact solve gives the optimal plan to rounding (the
    plan does not depend on where Newton stopped); the support of a 6 x 5 problem is connected (6 and 5 are coprime),
    so its first potential keeps its value and the rest are the reference's shifted by the same amount."""
    m, n, reg = 6, 5, 0.05
    S = _scores(4, m, n)
    gamma = reg * m
    a, b = _marginals(m, n)
    f, g, ref = _reference(S, reg)
    margin = np.abs(S + f[:, None] + g[None, :]).min()
    rng = np.random.default_rng(5)
    f0, g0 = f + rng.uniform(-0.2, 0.2, m) * margin, g + rng.uniform(-0.2, 0.2, n) * margin
    assert np.array_equal(S + f0[:, None] + g0[None, :] > 0, ref > 0)           # the start is on the support
    assert np.abs(_grad(S, f0, g0, gamma, a, b)).max() > 1e-3                  # and far from optimal
    out = L2._exact(S, f0, g0, gamma, a, b)
    assert out is not None
    f1, g1 = out
    plan = _plan(S, f1, g1, gamma)
    np.testing.assert_allclose(plan, ref, rtol=0, atol=1e-13)
    tol = _doc_tol(S, gamma)                  # the marginals to float64 rounding of S + f + g
    np.testing.assert_allclose(plan.sum(1), 1 / m, rtol=0, atol=tol)
    np.testing.assert_allclose(plan.sum(0), 1 / n, rtol=0, atol=tol)
    assert f1[0] == f0[0]
    shift = f0[0] - f[0]
    np.testing.assert_allclose(f1, f + shift, rtol=0, atol=1e-14)
    np.testing.assert_allclose(g1, g - shift, rtol=0, atol=1e-14)


def _blocks(seed, sizes, reg):
    """A square problem whose plan lives on diagonal blocks (scores in [0.8, 1] inside a block, in [-1, -0.8]
    across), with each block's plan solved as a problem of its own."""
    rng = np.random.default_rng(seed)
    m = sum(sizes)
    S = rng.uniform(-1.0, -0.8, (m, m))
    starts = np.cumsum([0] + list(sizes))
    own = []
    for lo, hi in zip(starts[:-1], starts[1:]):
        S[lo:hi, lo:hi] = rng.uniform(0.8, 1.0, (hi - lo, hi - lo))
        own.append((lo, hi, _reference(S[lo:hi, lo:hi], reg)[2]))
    return S, own


def test_exact_solve_on_a_support_of_several_parts_keeps_one_potential_per_part():
    """Two diagonal blocks: the support has two connected parts, each with its own free shift. The first node of
    each part (query 0, query 3) keeps its value and the plan is, block by block, the plan of that block as a
    problem of its own (a block holds m_k / m of the mass: ``pi = (m_k / m) pi_k``)."""
    sizes, reg = (3, 3), 0.5
    S, own = _blocks(6, sizes, reg)
    m = n = S.shape[0]
    gamma = reg * m
    a, b = _marginals(m, n)
    f, g, ref = _reference(S, reg)
    assert (ref[:3, :3] > 0).all() and (ref[3:, 3:] > 0).all() and (ref[:3, 3:] == 0).all()   # two parts
    margin = np.abs(S + f[:, None] + g[None, :]).min()
    rng = np.random.default_rng(7)
    f0, g0 = f + rng.uniform(-0.2, 0.2, m) * margin, g + rng.uniform(-0.2, 0.2, n) * margin
    assert np.array_equal(S + f0[:, None] + g0[None, :] > 0, ref > 0)
    out = L2._exact(S, f0, g0, gamma, a, b)
    assert out is not None
    f1, g1 = out
    assert f1[0] == f0[0] and f1[3] == f0[3]
    plan = _plan(S, f1, g1, gamma)
    expected = np.zeros((m, n))
    for lo, hi, p in own:
        expected[lo:hi, lo:hi] = (hi - lo) / m * p
    np.testing.assert_allclose(plan, expected, rtol=0, atol=1e-13)


def test_exact_solve_refuses_a_start_whose_support_is_not_settled():
    """From all-zero potentials the support is where S > 0; the optimality conditions on that support (solved densely
    here) put the plan's positive entries elsewhere, so the exact solve answers None (the caller keeps Newton's)."""
    m, n, reg = 5, 4, 0.05
    S = _scores(8, m, n)
    gamma = reg * m
    a, b = _marginals(m, n)
    support = S > 0
    fk, gk = _kkt_potentials(S, gamma, support)
    assert not np.array_equal(S + fk[:, None] + gk[None, :] > 0, support)
    assert L2._exact(S, np.zeros(m), np.zeros(n), gamma, a, b) is None


def test_exact_solve_at_an_optimum_on_the_boundary_of_its_support():
    """S = diag(1/2) (2 x 2), reg = 1/2 (gamma = 1): by hand, the plan [[p, 1/2 - p], [1/2 - p, p]] maximises
    p (S_11 + S_22) - (gamma / 2)(2 p^2 + 2 (1/2 - p)^2), so p = (1 + 1 / gamma) / 4 = 1/2: the off-diagonal entries
    carry no mass and their dual slack S_ij + f_i + g_j is exactly 0 at the optimum f = g = 0. Zero is outside the
    support: the exact solve returns the start unchanged (the conditions hold there), and so does a shifted start."""
    S = np.diag([0.5, 0.5])
    a, b = _marginals(2, 2)
    expected = np.diag([0.5, 0.5])
    for f0, g0 in ((np.zeros(2), np.zeros(2)), (np.full(2, 0.25), np.full(2, -0.25))):
        out = L2._exact(S, f0, g0, 1.0, a, b)
        assert out is not None
        np.testing.assert_array_equal(out[0], f0)
        np.testing.assert_array_equal(out[1], g0)
        np.testing.assert_array_equal(_plan(S, *out, 1.0), expected)
    np.testing.assert_allclose(L2TransportNormalization(reg=0.5).solve(S), expected, rtol=0, atol=1e-15)


# ------------------------------------------------------------------------------------------------------ Newton
def test_newton_returns_a_start_that_meets_the_tolerance_and_spends_at_most_its_step_budget(monkeypatch):
    """The tolerance is inclusive: a start whose largest marginal error equals it comes back as it is, without a
    step. With a budget of NEWTON_STEPS = 0 steps the start is accepted exactly when it meets the tolerance; with one
    step a start near the optimum converges."""
    m, n, reg = 5, 4, 0.05
    S = _scores(2, m, n)
    gamma = reg * m
    a, b = _marginals(m, n)
    f, g, ref = _reference(S, reg)
    rng = np.random.default_rng(3)
    f0, g0 = f + rng.uniform(-1e-4, 1e-4, m), g + rng.uniform(-1e-4, 1e-4, n)
    err = float(np.abs(_grad(S, f0, g0, gamma, a, b)).max())
    out = L2._newton(S, f0, g0, gamma, a, b, err)
    assert out is not None and out[0] is f0 and out[1] is g0
    monkeypatch.setattr(L2, "NEWTON_STEPS", 0)
    out = L2._newton(S, f0, g0, gamma, a, b, err)
    assert out is not None and out[0] is f0 and out[1] is g0
    assert L2._newton(S, f0, g0, gamma, a, b, np.nextafter(err, 0)) is None
    monkeypatch.setattr(L2, "NEWTON_STEPS", 1)
    _assert_converged(S, L2._newton(S, f0, g0, gamma, a, b, _doc_tol(S, gamma)), gamma, ref)


def test_newton_takes_the_full_step_near_the_optimum(dual_calls, monkeypatch):
    """On the optimal support the dual is quadratic and the unit Newton step meets Armijo's condition, so the line
    search accepts its first trial: one dual evaluation per step (plus the start's)."""
    steps = []
    real = L2._support_system
    monkeypatch.setattr(L2, "_support_system", lambda support: steps.append(1) or real(support))
    m, n, reg = 5, 4, 0.05
    S = _scores(2, m, n)
    gamma = reg * m
    a, b = _marginals(m, n)
    f, g, ref = _reference(S, reg)
    rng = np.random.default_rng(4)
    f0, g0 = f + rng.uniform(-1e-5, 1e-5, m), g + rng.uniform(-1e-5, 1e-5, n)
    _assert_converged(S, L2._newton(S, f0, g0, gamma, a, b, _doc_tol(S, gamma)), gamma, ref)
    assert len(steps) >= 1
    assert len(dual_calls) == 1 + len(steps)


@pytest.mark.parametrize("drop, tol", [(1e-6, None), (0.1, None), (1.0, None), (10.0, None)])
def test_newton_brings_back_a_query_that_holds_no_mass(drop, tol, dual_calls):
    """A start whose third query's potential sits ``drop`` below the point where its row first carries mass (so its
    row of the plan is empty and its Hessian rows are zero): the ridge keeps the Newton system defined, the line search
    shortens the long step that follows, and the method converges to the reference, to the documented tolerance."""
    m, n, reg = 5, 4, 1e-3
    S = _scores(0, m, n)
    gamma = reg * m
    a, b = _marginals(m, n)
    f, g, ref = _reference(S, reg)
    f0 = f.copy()
    f0[2] -= (S[2] + f[2] + g).max() + drop
    assert not (S[2] + f0[2] + g > 0).any()
    _assert_converged(S, L2._newton(S, f0, g.copy(), gamma, a, b, tol or _doc_tol(S, gamma)), gamma, ref, tol)


def _eigen_start():
    """A 2 x 2 problem with gamma = 1 and a full support, started at the optimum moved by delta (1, -1) in the query
    potentials: an eigenvector of the generalised Hessian (eigenvalue 2), so along the gradient the dual is the
    parabola q(t) = q(0) - 8 delta^2 t + 8 delta^2 t^2: t = 1 returns to q(0), t = 1/2 is the optimum."""
    S = np.array([[0.1, 0.0], [0.0, 0.0]])
    a, b = _marginals(2, 2)
    f, g, ref = _reference(S, 0.5)
    assert (ref > 0.2).all()
    delta = 0.01
    return S, a, b, f + delta * np.array([1.0, -1.0]), g.copy(), ref


@pytest.mark.parametrize("answer", ["zeros", "nan"])
def test_newton_falls_back_to_gradient_steps_where_the_direction_fails(answer, dual_calls, monkeypatch):
    """Where the Newton system's solution is no descent direction (zero: slope 0; NaN: no slope), the step is the
    negative gradient with Armijo's rule: on the parabola above the unit step only returns to the same dual value
    (no sufficient decrease) and is halved; the half step lands on the optimum. Three evaluations: start, t = 1,
    t = 1/2."""
    import scipy.sparse.linalg

    monkeypatch.setattr(scipy.sparse.linalg, "spsolve",
                        lambda A, rhs: np.zeros_like(rhs) if answer == "zeros" else np.full_like(rhs, np.nan))
    S, a, b, f0, g0, ref = _eigen_start()
    out = L2._newton(S, f0, g0, 1.0, a, b, 1e-14)
    assert out is not None
    np.testing.assert_allclose(_plan(S, *out, 1.0), ref, rtol=0, atol=1e-15)
    assert len(dual_calls) == 3


# --------------------------------------------------------------------------------------------------------- solve
@pytest.mark.parametrize("m, n, reg, seed", [(5, 4, 0.05, 0), (7, 3, 0.01, 1), (4, 9, 0.2, 2), (6, 5, 1.0, 3)])
def test_solve_is_the_reference_plan(m, n, reg, seed):
    S = _scores(seed, m, n)
    plan = L2TransportNormalization(reg=reg).solve(S)
    _, _, ref = _reference(S, reg)
    np.testing.assert_array_equal(plan > 0, ref > 0)
    # to the tolerance the module documents (1e-13 / m was tighter than that at a small reg: on another CPU's
    # summation order (ATEN_CPU_CAPABILITY=default, MKL_CBWR=COMPATIBLE) m=7, reg=0.01 differed by 1.5e-14)
    np.testing.assert_allclose(plan, ref, rtol=0, atol=_doc_tol(S, reg * m))


def test_solve_of_a_block_diagonal_problem_is_its_blocks_solved_alone():
    """Three diagonal blocks of sizes 2, 3 and 4 (square, so each block's rows and columns hold the same share of
    the mass): the plan of the whole, in a query's mass, is each block's own plan."""
    sizes, reg = (2, 3, 4), 0.05
    S, own = _blocks(9, sizes, reg)
    m = S.shape[0]
    Q = L2TransportNormalization(reg=reg).solve(S) * m
    expected = np.zeros_like(S)
    for lo, hi, p in own:
        expected[lo:hi, lo:hi] = p * (hi - lo)
        Qk = L2TransportNormalization(reg=reg).solve(S[lo:hi, lo:hi]) * (hi - lo)
        np.testing.assert_allclose(Q[lo:hi, lo:hi], Qk, rtol=0, atol=1e-13)
    np.testing.assert_allclose(Q, expected, rtol=0, atol=1e-13)


def _start_at(S, reg, ratio, monkeypatch):
    """POT's start replaced by the reference potentials with one query's potential raised until the largest marginal
    error is ``ratio`` times the documented tolerance, and the exact solve made to fail, so the plan is
    ``[alpha + beta + S]_+ / gamma`` at Newton's answer: the start itself when Newton took no step."""
    import ot

    m, n = S.shape
    gamma = reg * m
    a, b = _marginals(m, n)
    f, g, _ = _reference(S, reg)
    tol = _doc_tol(S, gamma)
    i = 0
    count = int((S[i] + f[i] + g > 0).sum())
    step = ratio * tol * gamma / count
    for _ in range(8):                              # the error is linear in the raise; settle it to a few ulps
        f0 = f.copy()
        f0[i] += step
        err = np.abs(_grad(S, f0, g, gamma, a, b)).max()
        step *= ratio * tol / err
    assert abs(err / tol - ratio) < 2e-3 * ratio, err / tol
    monkeypatch.setattr(ot.smooth, "smooth_ot_dual", lambda *args, **kwargs: (None, {"alpha": f0, "beta": g}))
    monkeypatch.setattr(L2, "_exact", lambda *args: None)
    start = np.maximum(0.0, f0[:, None] + g[None, :] + S) / gamma
    return start, tol


@pytest.mark.parametrize("reg, where", [(1e-3, "float64 rounding of S + f + g"), (5.0, "1e-13 of a query's mass")])
def test_newton_stops_at_the_documented_tolerance(reg, where, monkeypatch):
    """tol = max(1e-13 / m, 64 eps (1 + max|S|) max(m, n) / gamma): the second term at a small reg, the first at a
    large one (scores up to 3 in magnitude, 5 x 4). A start 0.5% inside it is the answer as it is; a start 1% outside
    it is not (Newton steps from it, or says it cannot)."""
    S = _scores(11, 5, 4, scale=3.0)
    S[0, 0] = 3.0
    inside, tol = _start_at(S, reg, 0.995, monkeypatch)
    np.testing.assert_array_equal(L2TransportNormalization(reg=reg).solve(S), inside)
    outside, tol = _start_at(S, reg, 1.01, monkeypatch)
    try:
        plan = L2TransportNormalization(reg=reg).solve(S)
    except RuntimeError as e:
        assert "did not converge" in str(e)
    else:
        assert not np.array_equal(plan, outside)
        m, n = S.shape
        assert np.abs(plan.sum(1) - 1 / m).max() <= tol and np.abs(plan.sum(0) - 1 / n).max() <= tol


def test_solve_names_a_newton_failure(monkeypatch):
    """Without Newton steps POT's L-BFGS start does not hold the marginals to 1e-13: the failure names the method,
    its reg and the remedy."""
    monkeypatch.setattr(L2, "NEWTON_STEPS", 0)
    with pytest.raises(RuntimeError, match=r"^L2N\(reg=0\.05\): Newton's method on the dual did not converge; "
                                           r"try another reg$"):
        L2TransportNormalization(reg=0.05).solve(_scores(1, 6, 5))


def test_default_reg_is_the_papers_middle_value():
    """reg = 0.05 by default (the module's and the method's documented default, within DBSN's Table 6 grid)."""
    S = _scores(12, 6, 5)
    default = L2TransportNormalization()
    assert default.reg == 0.05 == L2TransportNormalization.example_params["reg"]
    assert 0.05 in L2TransportNormalization.paper_grid["reg"]
    np.testing.assert_array_equal(default.solve(S), L2TransportNormalization(reg=0.05).solve(S))


def test_solve_warns_about_nothing_of_its_own():
    """The solver's own calls raise no warning (numpy deprecations included: they become errors in later releases);
    POT's L-BFGS may warn about SciPy's options, which is POT's to fix."""
    S = _scores(13, 7, 5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = L2TransportNormalization(reg=0.05).solve(S)
    assert [str(w.message) for w in caught if w.filename == L2.__file__] == []
    assert np.abs(plan.sum(1) - 1 / 7).max() <= _doc_tol(S, 0.05 * 7)


def test_newton_converges_from_every_far_start():
    """600 far starts (module docstring): each query's potential in turn put 1e-6 to 10 below its row's support, on
    thirty 5 x 4 problems at reg 1e-3; every one converges to the documented tolerance and to the reference plan."""
    m, n, reg = 5, 4, 1e-3
    gamma = reg * m
    a, b = _marginals(m, n)
    for seed in range(30):
        S = _scores(seed, m, n)
        f, g, ref = _reference(S, reg)
        for drop in (1e-6, 0.1, 1.0, 10.0):
            for row in range(m):
                f0 = f.copy()
                f0[row] -= (S[row] + f[row] + g).max() + drop
                out = L2._newton(S, f0, g.copy(), gamma, a, b, _doc_tol(S, gamma))
                assert out is not None, (seed, drop, row)
                _assert_converged(S, out, gamma, ref)
