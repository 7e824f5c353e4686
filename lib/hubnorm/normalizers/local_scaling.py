"""Local scaling (LS).

Zelnik-Manor and Perona, "Self-Tuning Spectral Clustering" (NIPS 2004); as a hubness reduction: Schnitzer, Flexer,
Schedl and Widmer, "Local and Global Scaling Reduce Hubs in Space" (JMLR 13, 2012), local scaling:

    LS(q, t) = exp(-d(q, t)^2 / (sigma_q sigma_t)),     d(q, t)^2 = ||q - t||^2 = 2 - 2 s(q, t)  (unit rows)

(the paper writes the distance ``1 - LS``; we return the similarity). Across two modalities each side's scale comes
from the other side, as CSLS's radii do: ``sigma_t`` is the distance of target ``t`` to its k-th nearest bank query
(the queries it will face), ``sigma_q`` the distance of query ``q`` to its k-th nearest target.

Not an offset method: ``sigma_q`` is constant along a row, so a row ranks like ``-d^2 / sigma_t``, a per-target
*scale* of the distance (targets in dense regions of the query bank, small ``sigma_t``, are pushed away).
Plain computation: ``sigma_t = sqrt(2 - 2 (targets @ bank.T).topk(k, dim=1).values[:, -1])``; as blocks it is a
:class:`~hubnorm.blocks.TopK` reduction over the bank axis (as CSLS's radius). Scales are clamped at
:data:`MIN_SCALE` (a target or query with k exact duplicates would otherwise divide by zero).
Tests: ``tests/test_classic_hubness.py`` (dense float64 oracle), the generic method checks.
"""

from __future__ import annotations

import torch

from ..blocks import Inputs, Param, Scores, TopK
from .base import Normalizer

BANK_SCORES = Scores("query_bank", "targets")
#: the smallest scale sigma (a distance on unit rows): guards k exact duplicates
MIN_SCALE = 1e-12


def scale_from_kth(s_k: torch.Tensor) -> torch.Tensor:
    """The distance ``sqrt(2 - 2 s_k)`` on unit rows from the k-th largest similarity, at least :data:`MIN_SCALE`."""
    return (2 - 2 * s_k).clamp_(min=0).sqrt_().clamp_(min=MIN_SCALE)


class LocalScaling(Normalizer):
    """Local scaling with the ``k``-th neighbour on both sides (Schnitzer et al. use k = 10; ``k`` at most the
    query-bank size and the number of targets).

    Blocks: ``sigma_t`` from the k-th value of a :class:`~hubnorm.blocks.TopK` reduction over the bank axis of the
    bank x target scores; ``sigma_q`` read off each block of test scores at scoring time.

    Fitted attributes: ``target_scale_`` (``sigma_t``).
    """

    name = "ls"
    display_name = "LS"
    is_offset = False
    paper_grid = {"k": [1, 2, 5, 10, 20, 50, 100]}   # around Schnitzer et al.'s k = 10
    inputs = Inputs(fit=(BANK_SCORES,), score=(Scores("queries", "targets"),))
    parameters = {"k": Param("int", limited_by=("query_bank", "targets"), doc="the neighbour whose distance is the scale")}
    example_params = {"k": 4}

    def __init__(self, k=10, *, device=None, chunk_size=None, check_normalized=True, block_bytes=None):
        self._store(locals())

    def fit_blocks(self, engine):
        kth = engine.reduce(TopK(BANK_SCORES, int(self.k), axis=0)).values[:, -1]
        return {"target_scale_": scale_from_kth(kth)}

    def plain(self, targets, query_bank=None, target_bank=None):
        kth = (query_bank @ targets.T).topk(int(self.k), dim=0).values[-1]
        return {"target_scale_": scale_from_kth(kth)}

    def normalize_scores(self, s, queries=None):
        sigma_q = scale_from_kth(s.topk(int(self.k), dim=1).values[:, -1:])
        s.mul_(-2).add_(2).clamp_(min=0)            # d^2
        s.div_(sigma_q).div_(self.target_scale_).neg_().exp_()
        return s
