"""Cross-domain similarity local scaling (CSLS).

Conneau et al., "Word Translation Without Parallel Data" (ICLR 2018), Eq. (6), applied to retrieval:

    CSLS(q, t) = 2 s(q, t) - r_B(t) - r_T(q)
    r_B(t) = mean of the top-k values of {s(b, t): b in the query bank}
    r_T(q) = mean of the top-k values of {s(q, t'): t' in the targets}

r_T(q) is constant along a query's row, so CSLS ranks every row like ``s - r_B / 2``: NNN with alpha = 0.5.
``offsets_ = -r_B / 2`` is that ranking offset (for vector indexes); ``score`` returns the full CSLS value.

Plain computation of the bank radius: ``(targets @ bank.T).topk(k, dim=1).values.mean(1)``, i.e. the NNN
bias with ``alpha = 1`` (:func:`hubnorm.normalizers.nnn.nnn_bias_plain`); it runs through the same kernel,
:func:`hubnorm.kernels.topk_similarity`. ``r_T(q)`` is computed plainly per query block in ``_score_block``.
Tests: ``tests/test_oracles.py`` (ranks like NNN with alpha = 1/2), ``tests/test_hardening.py``.
"""

from __future__ import annotations

from ..kernels import topk_similarity
from .._validation import check_positive_int
from .base import Normalizer


class CrossDomainSimilarityLocalScaling(Normalizer):
    """CSLS with ``k`` neighbours on both sides (10 in the original paper).

    Fitted attributes: ``bank_radius_`` (``r_B(t)``), ``offsets_ = -bank_radius_ / 2``.
    """

    name = "csls"
    uses_query_bank = "required"

    def __init__(self, k=10, *, device=None, chunk_size=None, check_normalized=True, block_bytes=None):
        self.k = k
        self.device = device
        self.chunk_size = chunk_size
        self.check_normalized = check_normalized
        self.block_bytes = block_bytes

    def _validate_params(self):
        super()._validate_params()
        check_positive_int(self.k, "k")

    def _fit(self, targets, query_bank, target_bank):
        k = check_positive_int(self.k, "k", maximum=query_bank.shape[0], max_name="the query bank size")
        check_positive_int(self.k, "k", maximum=targets.shape[0], max_name="the number of targets")
        top, _ = topk_similarity(targets, query_bank, k, block_bytes=self.block_bytes)
        self.bank_radius_ = top.mean(dim=1)
        self.offsets_ = -0.5 * self.bank_radius_

    def _score_block(self, q):
        s = q @ self.targets_.T
        r_q = s.topk(int(self.k), dim=1).values.mean(dim=1, keepdim=True)
        s.mul_(2).sub_(self.bank_radius_).sub_(r_q)
        return s
