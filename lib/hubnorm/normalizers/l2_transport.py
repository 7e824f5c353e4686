"""L2-regularised transport normalization (L2N): the quadratically regularised plan as the normalised scores.

Pan et al. (DBSN), Eq. 5 under the marginals of Eq. 7, Sec. 4.5 and Table 6 (after Blondel, Seguy and Rolet,
"Smooth and Sparse Optimal Transport", AISTATS 2018): with uniform marginals ``a = 1/m``, ``b = 1/n``,

    pi* = argmax_{pi >= 0, pi 1 = a, pi^T 1 = b} <S, pi> - (gamma / 2) ||pi||_F^2,

whose solution is ``pi_ij = max(0, alpha_i + beta_j + S_ij) / gamma`` for the optimal dual potentials: sparse,
but less so than OTN's vertex. The paper leaves the coefficient open ("an appropriate coefficient"); here
``gamma = reg m``: with a query's mass scaled to 1 the problem reads ``<S, Q> / m - (reg / 2m) ||Q||^2``, so ``reg``
is on the scale of a score difference (a query splits its mass between two targets whose scores differ by less
than about ``reg``); default ``reg = 0.05``.

Solved in float64: POT's L-BFGS on the smooth dual (``ot.smooth.smooth_ot_dual``, ``reg_type="l2"``), then the
exact optimality conditions on the support it found (one sparse linear solve per update of the support, until the
support no longer changes), so the plan satisfies both marginals to rounding and does not depend on where the
iterations stopped. Transductive: see :mod:`hubnorm.normalizers.plans`.

Tests: ``tests/test_transport_plans.py`` (a dense oracle: the KKT conditions of the quadratic program; the
marginals; ``reg`` -> 0 approaches OTN), the generic method checks.
"""

from __future__ import annotations

import numpy as np

from ..blocks import Param
from .optimal_transport import _pot
from .plans import TransportPlanNormalizer

#: support updates of the exact polish after L-BFGS
POLISH_STEPS = 50


def _polish(S, alpha, beta, gamma, a, b):
    """Exact duals on the support ``alpha_i + beta_j + S_ij > 0`` (semismooth Newton on the KKT system: solve the
    linear conditions on the support, update the support, repeat); ``None`` if a step cannot be solved.

    On the support the conditions are linear: ``sum_j (alpha_i + beta_j + S_ij) = gamma a_i`` per query and
    ``sum_i (...) = gamma b_j`` per target. The potentials of each connected part of the support are defined up to
    ``alpha + t, beta - t``: one potential per part keeps its value and one (redundant) equation is dropped."""
    from scipy import sparse
    from scipy.sparse.csgraph import connected_components
    from scipy.sparse.linalg import spsolve

    m, n = S.shape
    support = None
    for _ in range(POLISH_STEPS):
        new = (alpha[:, None] + beta[None, :] + S) > 0
        if support is not None and np.array_equal(new, support):
            return alpha, beta
        support = new
        r, c = np.nonzero(support)
        if np.any(np.bincount(r, minlength=m) == 0) or np.any(np.bincount(c, minlength=n) == 0):
            return None
        B = sparse.csr_matrix((np.ones(r.size), (r, c)), shape=(m, n))
        K = sparse.bmat([[sparse.diags(np.asarray(B.sum(1)).ravel()), B],
                         [B.T, sparse.diags(np.asarray(B.sum(0)).ravel())]], format="csr")
        Sb = sparse.csr_matrix((S[r, c], (r, c)), shape=(m, n))
        rhs = np.concatenate([gamma * a - np.asarray(Sb.sum(1)).ravel(), gamma * b - np.asarray(Sb.sum(0)).ravel()])
        x = np.concatenate([alpha, beta])
        _, part = connected_components(K, directed=False)
        fixed = np.zeros(m + n, bool)
        fixed[np.unique(part, return_index=True)[1]] = True       # the first node of every part keeps its value
        free = ~fixed
        Kf = K[free]
        x_new = x.copy()
        x_new[free] = spsolve(Kf[:, free].tocsc(), rhs[free] - Kf[:, fixed] @ x[fixed])
        if not np.all(np.isfinite(x_new)):
            return None
        alpha, beta = x_new[:m], x_new[m:]
    return None


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
        self.reg = reg
        self.device = device
        self.chunk_size = chunk_size
        self.check_normalized = check_normalized
        self.block_bytes = block_bytes

    def solve(self, S):
        ot = _pot()
        m, n = S.shape
        a, b = np.full(m, 1.0 / m), np.full(n, 1.0 / n)
        gamma = float(self.reg) * m
        _, log = ot.smooth.smooth_ot_dual(a, b, np.ascontiguousarray(-S), gamma, reg_type="l2", stopThr=1e-12,
                                          numItermax=5000, log=True)
        duals = _polish(S, np.asarray(log["alpha"], float), np.asarray(log["beta"], float), gamma, a, b)
        if duals is None:
            raise RuntimeError(f"L2N(reg={self.reg!r}): the support of the plan could not be settled; try another reg")
        alpha, beta = duals
        return np.maximum(0.0, alpha[:, None] + beta[None, :] + S) / gamma
