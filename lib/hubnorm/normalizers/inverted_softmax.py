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

As block reductions (:mod:`hubnorm.blocks`): one :class:`~hubnorm.blocks.LogMeanExp` of the bank x target
scores over the bank axis (partial: the log-sum-exp of a block of bank rows; merge: ``logaddexp``), in a working
dtype that switches to float64 when float32 cannot hold the result (very large or very small ``tau``); a ``tau``
that even float64 cannot serve is refused, naming ``tau``. In process it runs through the kernel
:func:`hubnorm.kernels.logsumexp_similarity` (the ``|B| x n`` matrix is never held); a ``tau`` sweep shares its
similarity blocks across temperatures (bit-identical offsets). Tests:
``tests/test_oracles.py`` (dense float64 oracle), ``tests/test_hardening.py`` (extreme temperatures).
"""

from __future__ import annotations

import math

import torch

from .._validation import check_positive_float
from ..blocks import Inputs, Param, Scores, log_mean_exp
from ..kernels import bank_column, gibbs, log_mean_exp_similarity
from .base import Normalizer

BANK_SCORES = Scores("query_bank", "targets")


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


def inverted_softmax_blocks(engine, tau: float, source: Scores = BANK_SCORES) -> torch.Tensor:
    """The same offsets as a :class:`~hubnorm.blocks.LogMeanExp` reduction over the bank axis of ``source``, run by
    ``engine`` (in process: the kernel of :func:`inverted_softmax_offsets`, bit-identical; on Dask: one
    log-sum-exp partial per bank chunk, merged by ``logaddexp``)."""
    tau = float(tau)
    lme = log_mean_exp(engine, source, 1.0 / tau, name=f"tau={tau:g}")
    return (-tau * lme).to(engine.dtype)


def inverted_softmax_plain(targets: torch.Tensor, bank: torch.Tensor, tau: float) -> torch.Tensor:
    """The module docstring's plain computation, dense (the tests' reference)."""
    scores = bank @ targets.T
    return -tau * (torch.logsumexp(scores / tau, dim=0) - math.log(bank.shape[0]))


class InvertedSoftmax(Normalizer):
    """IS / QBNorm with temperature ``tau`` (DBSN Sec. 4.3: 0.02 in both directions; QBNorm beta=20 is tau=0.05).

    Fitted attributes: ``offsets_`` (``hbar(t) + tau log|B|``, see the module docstring).
    """

    name = "is"
    display_name = "IS"
    paper_grid = {"tau": [0.005, 0.01, 0.015, 0.02, 0.025, 0.05]}  # around DBSN Fig. 6, plus QBNorm's 0.05
    inputs = Inputs(fit=(BANK_SCORES,))
    parameters = {"tau": Param("positive", doc="temperature")}
    sweep_params = frozenset({"tau"})
    example_params = {"tau": 0.02}

    def __init__(self, tau=0.02, *, device=None, chunk_size=None, check_normalized=True, block_bytes=None):
        self._store(locals())

    def fit_blocks(self, engine):
        return {"offsets_": inverted_softmax_blocks(engine, self.tau)}

    def plain(self, targets, query_bank=None, target_bank=None):
        return {"offsets_": inverted_softmax_plain(targets, query_bank, float(self.tau))}

    def offset_decomposition(self, query_bank, target_bank=None, *, block_bytes=None):
        """The centred offset as a sum over the bank (:mod:`hubnorm.forensics`), by the Gibbs identity
        ``tau LSE_i(s_i / tau) = sum_i w_i s_i + tau H(w)``: weights ``w = softmax_i(s_ij / tau)`` over the whole
        bank, values ``-s_ij``, remainder ``tau KL(w || uniform)`` (the centring ``tau log |B|`` turns ``-tau H``
        into ``+tau KL``)."""
        tau = float(self.tau)

        def explain(j: int):
            s = bank_column(query_bank, self.targets_[j], block_bytes=block_bytes).to(torch.float64)
            w, logw = gibbs(s / tau)
            kl = float((w * logw).sum()) + math.log(s.shape[0])   # KL(w || uniform) = log m - H(w)
            return w, -s, {"tau KL(w || uniform)": tau * kl}
        return explain
