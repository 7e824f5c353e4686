"""Hungarian normalization (HN): a one-to-one assignment of queries to targets as the normalised scores.

Pan et al. (DBSN), Sec. 4.5 and Table 6, after Li et al. (2023b): the assignment maximising the total score,

    pi* = argmax_{pi in {0, 1}^{m x n}, pi 1 <= 1, pi^T 1 <= 1} <S, pi>,

solved by scipy's ``linear_sum_assignment`` (Kuhn 1955; float64). Every query gets one target when there are at
least as many targets as queries (``m <= n``: a permutation when ``m = n``, Table 6's MSR-VTT); with more queries
than targets (Flickr30k t2i: five captions per image) only ``n`` queries are assigned and the surplus rows are
filled with zeros, as the paper does, so those queries rank the targets by index (Table 6: R@1 16.2). The
normalised score is the 0/1 assignment. Transductive: see :mod:`hubnorm.normalizers.plans`.

Plain computation: ``rows, cols = linear_sum_assignment(S, maximize=True)``; ``pi[rows, cols] = 1``. Tests:
``tests/test_transport_plans.py`` (brute force over every assignment of a small problem; the surplus rows), the
generic method checks.
"""

from __future__ import annotations

import numpy as np

from .plans import TransportPlanNormalizer


class HungarianNormalization(TransportPlanNormalizer):
    """Hungarian normalization (no parameter): the 0/1 maximum-score assignment, surplus queries all zero.

    Fitted attributes: ``plan_``, ``bank_scores_`` (:class:`~hubnorm.normalizers.plans.TransportPlanNormalizer`).
    """

    name = "hungarian"
    display_name = "HN"
    paper_grid = {}
    parameters: dict = {}
    example_params = {}

    def solve(self, S):
        from scipy.optimize import linear_sum_assignment

        m, n = S.shape
        rows, cols = linear_sum_assignment(S, maximize=True)
        plan = np.zeros((m, n))
        plan[rows, cols] = 1.0 / m          # the shared scaling (times m) makes an assigned entry 1
        return plan
