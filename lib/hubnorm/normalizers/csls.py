"""Cross-domain similarity local scaling (CSLS).

Conneau et al., "Word Translation Without Parallel Data" (ICLR 2018), Eq. (6), applied to retrieval:

    CSLS(q, t) = 2 s(q, t) - r_B(t) - r_T(q)
    r_B(t) = mean of the top-k values of {s(b, t): b in the query bank}
    r_T(q) = mean of the top-k values of {s(q, t'): t' in the targets}

r_T(q) is constant along a query's row, so CSLS ranks every row like ``s - r_B / 2``: NNN with alpha = 0.5.
``offsets_ = -r_B / 2`` is that ranking offset (for vector indexes); ``score`` returns the full CSLS value.

Plain computation of the bank radius: ``(targets @ bank.T).topk(k, dim=1).values.mean(1)``, i.e. the NNN
bias with ``alpha = 1`` (:func:`hubnorm.normalizers.nnn.nnn_bias_plain`); as blocks it is the same
:class:`~hubnorm.blocks.TopK` reduction. ``r_T(q)`` is computed plainly per block of test scores in
``normalize_scores``.
Tests: ``tests/test_oracles.py`` (ranks like NNN with alpha = 1/2), ``tests/test_hardening.py``.
"""

from __future__ import annotations

from ..blocks import Inputs, Param, Scores, TopK
from .base import Normalizer

BANK_SCORES = Scores("query_bank", "targets")


class CrossDomainSimilarityLocalScaling(Normalizer):
    """CSLS with ``k`` neighbours on both sides (10 in the original paper); ``k`` at most the query-bank size and
    the number of targets.

    Blocks: ``r_B`` is the mean of a :class:`~hubnorm.blocks.TopK` reduction over the bank axis of the bank x
    target scores (as NNN's bias with alpha = 1); ``r_T(q)`` is read off each block of test scores at scoring time.

    Fitted attributes: ``bank_radius_`` (``r_B(t)``), ``offsets_ = -bank_radius_ / 2``.
    """

    name = "csls"
    display_name = "CSLS"
    paper_grid = {"k": [1, 2, 4, 8, 16, 32, 64, 128]}
    inputs = Inputs(fit=(BANK_SCORES,), score=(Scores("queries", "targets"),))
    parameters = {"k": Param("int", limited_by=("query_bank", "targets"), doc="neighbours on both sides")}
    example_params = {"k": 4}

    def __init__(self, k=10, *, device=None, chunk_size=None, check_normalized=True, block_bytes=None):
        self._store(locals())

    def fit_blocks(self, engine):
        radius = engine.reduce(TopK(BANK_SCORES, int(self.k), axis=0)).values.mean(dim=1)
        return {"bank_radius_": radius, "offsets_": -0.5 * radius}

    def plain(self, targets, query_bank=None, target_bank=None):
        radius = (query_bank @ targets.T).topk(int(self.k), dim=0).values.mean(dim=0)
        return {"bank_radius_": radius, "offsets_": -0.5 * radius}

    def normalize_scores(self, s, queries=None):
        r_q = s.topk(int(self.k), dim=1).values.mean(dim=1, keepdim=True)
        s.mul_(2).sub_(self.bank_radius_).sub_(r_q)
        return s
