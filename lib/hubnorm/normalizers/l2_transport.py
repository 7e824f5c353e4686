"""L2-regularised transport normalization (L2N): the quadratically regularised plan as the normalised scores.

Pan et al. (DBSN), Eq. 5 under the marginals of Eq. 7, Sec. 4.5 and Table 6 (after Blondel, Seguy and Rolet,
"Smooth and Sparse Optimal Transport", AISTATS 2018): with uniform marginals ``a = 1/m``, ``b = 1/n``,

    pi* = argmax_{pi >= 0, pi 1 = a, pi^T 1 = b} <S, pi> - (gamma / 2) ||pi||_F^2,

whose solution is ``pi_ij = max(0, alpha_i + beta_j + S_ij) / gamma`` for the optimal dual potentials: sparse,
but less so than OTN's vertex. The paper leaves the coefficient open ("an appropriate coefficient"); here
``gamma = reg m``: with a query's mass scaled to 1 the problem reads ``<S, Q> / m - (reg / 2m) ||Q||^2``, so ``reg``
is on the scale of a score difference (a query splits its mass between two targets whose scores differ by less
than about ``reg``); default ``reg = 0.05``.

Solved in float64: POT's L-BFGS on the smooth dual (``ot.smooth.smooth_ot_dual``, ``reg_type="l2"``) as the start,
then a damped semismooth Newton method on the same dual (Newton directions on the current support, Armijo
backtracking: globally convergent on this convex, piecewise quadratic function; where the decrease Armijo asks for
is below float64 rounding of the dual's value, a step is accepted when it lowers the marginals' error) until both
marginals hold to
1e-13 of a query's mass (or float64 rounding at a tiny ``reg``), and the linear optimality conditions solved exactly on the settled support, so the plan
does not depend on where the iterations stopped. Transductive: see :mod:`hubnorm.normalizers.plans`.

Tests: ``tests/test_transport_plans.py`` (a dense oracle: the KKT conditions of the quadratic program; the
marginals; ``reg`` -> 0 approaches OTN), the generic method checks.
"""

from __future__ import annotations

import numpy as np

from ..blocks import Param
from .plans import TransportPlanNormalizer, import_pot

#: damped Newton steps on the dual after L-BFGS
NEWTON_STEPS = 200


def _dual(S, f, g, gamma, a, b):
    """The dual objective (minimised) ``G = -f.a - g.b + (1 / 2 gamma) sum [S + f + g]_+^2``, its gradient (the
    marginals' errors) and the positive part ``[S + f + g]_+``."""
    x = np.maximum(S + f[:, None] + g[None, :], 0.0)
    value = -f @ a - g @ b + 0.5 / gamma * float(np.sum(x * x))
    grad = np.concatenate([x.sum(1) / gamma - a, x.sum(0) / gamma - b])
    return value, grad, x


def _support_system(support):
    """The generalised Hessian (times gamma) of the dual on a support: ``[[diag(rows), B], [B^T, diag(cols)]]``."""
    from scipy import sparse

    m, n = support.shape
    r, c = np.nonzero(support)
    B = sparse.csr_matrix((np.ones(r.size), (r, c)), shape=(m, n))
    return sparse.bmat([[sparse.diags(np.asarray(B.sum(1)).ravel()), B],
                        [B.T, sparse.diags(np.asarray(B.sum(0)).ravel())]], format="csr")


def _newton(S, f, g, gamma, a, b, tol):
    """Damped semismooth Newton on the dual (a convex, piecewise quadratic function): Newton directions on the
    current support (a small ridge keeps them defined), Armijo backtracking (below the value's rounding: the
    marginals' error decides); globally convergent. Returns the potentials when the marginals' error is below
    ``tol``, else None."""
    from scipy import sparse
    from scipy.sparse.linalg import spsolve

    m, n = S.shape
    value, grad, x = _dual(S, f, g, gamma, a, b)
    for _ in range(NEWTON_STEPS):
        if np.abs(grad).max() <= tol:
            return f, g
        H = _support_system(x > 0) / gamma
        ridge = 1e-10 * max(1.0, float(H.diagonal().max()))
        d = -spsolve((H + ridge * sparse.identity(m + n, format="csr")).tocsc(), grad)
        slope = float(grad @ d)
        if not np.isfinite(slope) or slope >= 0:
            d, slope = -grad, -float(grad @ grad)           # a gradient step where the direction fails
        t = 1.0
        rounding = 64 * np.finfo(float).eps * max(1.0, abs(value))   # what float64 can resolve of the dual's value
        while t > 1e-12:
            f_new, g_new = f + t * d[:m], g + t * d[m:]
            v_new, grad_new, x_new = _dual(S, f_new, g_new, gamma, a, b)
            if v_new <= value + 1e-4 * t * slope:
                break
            # near the optimum the decrease Armijo asks for is below the rounding of the value: there the step is
            # judged by the marginals' error it leaves (the gradient), which float64 still resolves
            if -1e-4 * t * slope <= rounding and v_new <= value + rounding \
                    and np.abs(grad_new).max() < np.abs(grad).max():
                break
            t *= 0.5
        else:
            return None
        f, g, value, grad, x = f_new, g_new, v_new, grad_new, x_new
    return (f, g) if np.abs(grad).max() <= tol else None


def _exact(S, f, g, gamma, a, b):
    """The exact potentials on a settled support: the linear optimality conditions of each connected part of the
    support solved (one potential per part keeps its value, one redundant equation dropped); None if the support
    changes or the system is singular."""
    from scipy.sparse.csgraph import connected_components
    from scipy.sparse.linalg import spsolve

    m, n = S.shape
    support = (S + f[:, None] + g[None, :]) > 0
    K = _support_system(support)
    r, c = np.nonzero(support)
    Sb = np.zeros((m, n))
    Sb[r, c] = S[r, c]
    rhs = np.concatenate([gamma * a - Sb.sum(1), gamma * b - Sb.sum(0)])
    x = np.concatenate([f, g])
    _, part = connected_components(K, directed=False)
    fixed = np.zeros(m + n, bool)
    fixed[np.unique(part, return_index=True)[1]] = True        # the first node of every part keeps its value
    free = ~fixed
    Kf = K[free]
    with np.errstate(all="ignore"):
        x_new = x.copy()
        x_new[free] = spsolve(Kf[:, free].tocsc(), rhs[free] - Kf[:, fixed] @ x[fixed])
    if not np.all(np.isfinite(x_new)):
        return None
    f_new, g_new = x_new[:m], x_new[m:]
    return (f_new, g_new) if np.array_equal((S + f_new[:, None] + g_new[None, :]) > 0, support) else None


class L2TransportNormalization(TransportPlanNormalizer):
    """L2-regularised transport normalization with coefficient ``reg`` (> 0; smaller: sparser, towards OTN).

    Fitted attributes: ``plan_``, ``bank_scores_`` (:class:`~hubnorm.normalizers.plans.TransportPlanNormalizer`).
    """

    name = "l2n"
    display_name = "L2N"
    paper_grid = {"reg": [0.01, 0.02, 0.05, 0.1, 0.2, 0.5]}
    parameters = {"reg": Param("positive", doc="the L2 coefficient, on the scale of one score")}
    example_params = {"reg": 0.05}

    def __init__(self, reg=0.05, *, device=None, chunk_size=None, check_normalized=True, block_bytes=None):
        self._store(locals())

    def solve(self, S):
        ot = import_pot()
        m, n = S.shape
        a, b = np.full(m, 1.0 / m), np.full(n, 1.0 / n)
        gamma = float(self.reg) * m
        _, log = ot.smooth.smooth_ot_dual(a, b, np.ascontiguousarray(-S), gamma, reg_type="l2", stopThr=1e-12,
                                          numItermax=5000, log=True)
        # the marginals to 1e-13 of a query's mass, or to what float64 rounding of S + f + g allows at this gamma
        tol = max(1e-13 / m, 64 * np.finfo(float).eps * (1.0 + float(np.abs(S).max())) * max(m, n) / gamma)
        duals = _newton(S, np.asarray(log["alpha"], float), np.asarray(log["beta"], float), gamma, a, b, tol)
        if duals is None:
            raise RuntimeError(f"L2N(reg={self.reg!r}): Newton's method on the dual did not converge; try another reg")
        alpha, beta = _exact(S, *duals, gamma, a, b) or duals
        return np.maximum(0.0, alpha[:, None] + beta[None, :] + S) / gamma
