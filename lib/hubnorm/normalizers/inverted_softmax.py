"""Inverted softmax (IS) and its query-bank form, QBNorm.

Smith et al. (2017) and Bogolin et al., "Cross Modal Retrieval with Querybank Normalisation" (CVPR 2022);
in the notation of Pan et al. (DBSN), Eq. (1)-(3):

    S_hat_ij = exp(S_ij / tau) / sum_{q in B} exp(s(q, t_j) / tau) = exp((S_ij + hbar(t_j)) / tau)
    hbar(t_j) = -tau * logsumexp_{q in B}(s(q, t_j) / tau)

so ranking by ``S + hbar`` equals ranking by the inverted softmax. ``B`` is a query bank (QBNorm,
query-agnostic) or the test queries themselves (query-aware IS: pass them as ``query_bank`` and label the result
transductive). QBNorm's inverse temperature ``beta`` is ``1 / tau``.

Offsets are centred: ``offsets_ = hbar + tau * log|B| = -tau * log mean_{q in B} exp(s(q, t) / tau)``. The
constant ``tau log|B|`` is shared by every target, so no ranking changes (``exp((S + offsets_) / tau) =
|B| * S_hat``), but the offsets stay within the range of the scores at any ``tau``: uncentred, ``hbar`` grows
like ``-tau log|B|`` and at ``tau = 1e4`` its float32 rounding alone exceeds every score difference.

Plain computation (what :func:`inverted_softmax_offsets` returns, up to rounding)::

    scores = bank @ targets.T                                         # (|B|, n)
    offsets = -tau * (torch.logsumexp(scores / tau, dim=0) - log(|B|))

Implementation: the kernel :func:`hubnorm.kernels.log_mean_exp_similarity` streams the bank in blocks (the
``|B| x n`` matrix is never held) and switches to float64 when float32 cannot hold the result (very large or
very small ``tau``); it refuses a ``tau`` that even float64 cannot serve, naming ``tau``. Tests:
``tests/test_oracles.py`` (dense float64 oracle), ``tests/test_hardening.py`` (extreme temperatures).
"""

from __future__ import annotations

import torch

from .._validation import check_positive_float
from ..kernels import log_mean_exp_similarity
from .base import Normalizer


def inverted_softmax_offsets(targets: torch.Tensor, bank: torch.Tensor, tau: float, block_bytes=None, *,
                             cache=None) -> torch.Tensor:
    """``-tau * log mean_{b in bank} exp(b . t / tau)`` for every target: DBSN Eq. (3) plus ``tau log|B|``.

    ``cache``: a dict reused across calls on the same targets and bank (a ``tau`` sweep): the similarity blocks
    are computed once; the offsets are bit-identical to a call without it (what ``InvertedSoftmax.fit`` runs).
    """
    tau = check_positive_float(tau, "tau")
    lme = log_mean_exp_similarity(targets, bank, 1.0 / tau, block_bytes=block_bytes, name=f"tau={tau:g}",
                                  cache=cache)
    return (-tau * lme).to(targets.dtype)


class InvertedSoftmax(Normalizer):
    """IS / QBNorm with temperature ``tau`` (0.02 for t2i and 0.01 for i2t in the DBSN code; QBNorm beta=20 is tau=0.05).

    Fitted attributes: ``offsets_`` (``hbar(t) + tau log|B|``, see the module docstring).
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
