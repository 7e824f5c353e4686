"""Inverted softmax (IS) and its query-bank form, QBNorm.

Smith et al. (2017) and Bogolin et al., "Cross Modal Retrieval with Querybank Normalisation" (CVPR 2022);
in the notation of Pan et al. (DBSN), Eq. (1)-(3):

    S_hat_ij = exp(S_ij / tau) / sum_{q in B} exp(s(q, t_j) / tau) = exp((S_ij + hbar(t_j)) / tau)
    hbar(t_j) = -tau * logsumexp_{q in B}(s(q, t_j) / tau)

so ranking by ``S + offsets_`` with ``offsets_ = hbar`` equals ranking by the inverted softmax. ``B`` is a
query bank (QBNorm, query-agnostic) or the test queries themselves (query-aware IS: pass them as
``query_bank`` and label the result transductive). Always computed with a streamed logsumexp:
``exp(1/0.01)`` overflows float32. QBNorm's inverse temperature ``beta`` is ``1 / tau``.
"""

from __future__ import annotations

from .._ops import logsumexp_similarity
from .._validation import check_positive_float
from .base import Normalizer


def inverted_softmax_offsets(targets, bank, tau, block_bytes=None):
    """``-tau * logsumexp_{b in bank}(b . t / tau)`` for every target (DBSN Eq. 3)."""
    return -tau * logsumexp_similarity(targets, bank, 1.0 / tau, block_bytes=block_bytes)


class InvertedSoftmax(Normalizer):
    """IS / QBNorm with temperature ``tau`` (0.02 for t2i and 0.01 for i2t in the DBSN code; QBNorm beta=20 is tau=0.05).

    Fitted attributes: ``offsets_`` (``hbar(t)``).
    """

    name = "is"
    uses_query_bank = "required"

    def __init__(self, tau=0.02, *, device=None, chunk_size=None, check_normalized=True, block_bytes=None):
        self.tau = tau
        self.device = device
        self.chunk_size = chunk_size
        self.check_normalized = check_normalized
        self.block_bytes = block_bytes

    def _validate_params(self):
        super()._validate_params()
        check_positive_float(self.tau, "tau")

    def _fit(self, targets, query_bank, target_bank):
        self.offsets_ = inverted_softmax_offsets(targets, query_bank, float(self.tau), self.block_bytes)
