"""Nearest Neighbor Normalization (NNN).

Chowdhury et al., "Nearest Neighbor Normalization Improves Multimodal Retrieval", Eq. (1)-(2):

    b(t)      = alpha * (1/k) * sum_{q in D_topk(t)} s(q, t)       D_topk(t): the k bank queries most similar to t
    s_D(q, t) = s(q, t) - b(t)

so ``offsets_ = -b``. The bias needs only the k nearest bank queries of each target: it is computed by a
blocked top-k over the bank (``hubnorm.kernels.topk_similarity``), never the full bank x target matrix.
"""

from __future__ import annotations

from ..kernels import nnn_bias, topk_similarity
from .._validation import check_finite_float, check_positive_int
from .base import Normalizer


class NearestNeighborNormalization(Normalizer):
    """NNN: subtract ``alpha`` times the mean of each target's top-``k`` bank similarities.

    Parameters:
        alpha: weight of the bias (NNN sweeps 0.25 ... 1.5; ``alpha=0`` is the identity).
        k: number of nearest bank queries per target (NNN sweeps 1 ... 512).
        device, chunk_size, check_normalized: see :class:`~hubnorm.normalizers.base.Normalizer`.
        block_bytes: memory budget of one similarity block while computing the bias.

    Fitted attributes: ``bias_`` (``b(t)``, length n), ``offsets_ = -bias_``.
    """

    name = "nnn"
    uses_query_bank = "required"

    def __init__(self, alpha=0.75, k=128, *, device=None, chunk_size=None, check_normalized=True, block_bytes=None):
        self.alpha = alpha
        self.k = k
        self.device = device
        self.chunk_size = chunk_size
        self.check_normalized = check_normalized
        self.block_bytes = block_bytes

    def _validate_params(self):
        super()._validate_params()
        check_finite_float(self.alpha, "alpha")
        check_positive_int(self.k, "k")

    def _fit(self, targets, query_bank, target_bank):
        k = check_positive_int(self.k, "k", maximum=query_bank.shape[0], max_name="the query bank size")
        top, _ = topk_similarity(targets, query_bank, k, block_bytes=self.block_bytes)
        self.bias_ = nnn_bias(top, self.alpha)
        self.offsets_ = -self.bias_
