"""Optimal transport normalization (OTN): the exact transport plan as the normalised scores.

Pan et al. (DBSN), Eq. 4 under the marginals of Eq. 7, Sec. 4.5 and Table 6: with uniform marginals
``a = 1/m`` (queries) and ``b = 1/n`` (targets),

    pi* = argmax_{pi >= 0, pi 1 = a, pi^T 1 = b} <S, pi>,

the unregularised limit (tau -> 0) of Sinkhorn normalization's Eq. 7. An optimal vertex has at most ``m + n - 1``
non-zero entries, so nearly every entry of the normalised matrix is 0 (Table 6: sparsity 0.9988 on Flickr30k t2i)
and a query's ranking beyond its few transported targets is by target index (ties). Solved by POT's network
simplex (``ot.emd`` on the cost ``-S``, float64). Transductive: see :mod:`hubnorm.normalizers.plans`.

Plain computation: ``ot.emd(ones(m) / m, ones(n) / n, -S) * m`` (a query's mass is 1; entries are multiples of
``1 / n``, snapped to them). Tests:
``tests/test_transport_plans.py`` (a dense linear-programming oracle, scipy's ``linprog``; marginals; Table 6's
sparsity bound), the generic method checks.
"""

from __future__ import annotations

import numpy as np

from .plans import TransportPlanNormalizer, import_pot

#: network-simplex iterations allowed (POT's default, 100000, is too few for 5000 x 1000 problems)
MAX_ITER = 10**8


class OptimalTransportNormalization(TransportPlanNormalizer):
    """Exact optimal transport normalization (no parameter): the plan of Eq. 4 with both uniform marginals.

    Fitted attributes: ``plan_``, ``bank_scores_`` (:class:`~hubnorm.normalizers.plans.TransportPlanNormalizer`).
    """

    name = "otn"
    display_name = "OTN"
    paper_grid = {}
    parameters: dict = {}
    example_params = {}

    def solve(self, S):
        ot = import_pot()
        m, n = S.shape
        plan, log = ot.emd(np.full(m, 1.0 / m), np.full(n, 1.0 / n), np.ascontiguousarray(-S), numItermax=MAX_ITER,
                           log=True)
        if log.get("warning"):
            raise RuntimeError(f"OTN: the network simplex did not finish ({log['warning']})")
        # a vertex of these marginals is a multiple of 1 / (m n): snapped to it, two equal masses stay exactly equal
        # (they tie, by target index) whatever the solver's rounding
        return np.round(plan * (m * n)) / (m * n)
