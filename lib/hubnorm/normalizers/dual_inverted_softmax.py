"""DualIS and DualDIS (DBNorm), from the formula rather than the official code.

Wang et al., "Balance Act: Mitigating Hubness in Cross-Modal Retrieval with Query and Gallery Banks" (EMNLP
2023), as written in the NNN paper, Appendix A1, Eq. (3)-(5):

    s_hat(q, t) = s_hat^R(q, t) * s_hat^Q(q, t)
    s_hat^R(q, t) = exp(beta_t s(q, t)) / sum_{r in B_t} exp(beta_t s(r, t))      (target bank, intra-modal)
    s_hat^Q(q, t) = exp(beta_q s(q, t)) / sum_{b in B_q} exp(beta_q s(b, t))      (query bank, cross-modal)

Taking logs and dividing by ``beta_q + beta_t`` (monotone, so rankings are unchanged):

    score(q, t) = s(q, t) + h_Q(t) + h_R(t),   h_X(t) = -logsumexp_{x in B_X}(beta_X s(x, t)) / (beta_q + beta_t)

so DualIS is an offset method with ``offsets_ = h_Q + h_R``. beta_t = 0 gives QBNorm (IS with tau = 1/beta_q).

As for IS (:mod:`hubnorm.normalizers.inverted_softmax`), each term is centred by a constant shared by all
targets, ``log|B_X| / (beta_q + beta_t)``, so that it stays within the range of the scores at any beta (no
ranking changes). Plain computation of one term::

    h_X = -(torch.logsumexp(beta_X * (bank_X @ targets.T), dim=0) - log(|B_X|)) / (beta_q + beta_t)

computed by the kernel :func:`hubnorm.kernels.log_mean_exp_similarity` (streamed, float64 when float32 cannot
hold it, ``ValueError`` naming the beta when even float64 cannot). Tests: ``tests/test_oracles.py``,
``tests/test_hardening.py``.
(The official DBNorm function never uses the test-query matrix; we implement the formula.)

DualDIS applies each factor only to queries whose raw top-1 target is in that factor's activation set
(dynamic, as in DIS): the query-bank set is the union of the bank queries' top-k targets; the target-bank set
is the union of the bank targets' top-k test targets under the intra-modal score. A factor that is not applied
contributes nothing, i.e. ``score = s + [top1 in A_Q] h_Q + [top1 in A_R] h_R`` (rows on mixed scales).
"""

from __future__ import annotations

import torch

from ..kernels import log_mean_exp_similarity
from .._validation import check_finite_float, check_positive_int
from .base import Normalizer
from .dynamic_inverted_softmax import activation_mask


class DualInvertedSoftmax(Normalizer):
    """DualIS: product of a query-bank and a target-bank inverted softmax.

    Parameters:
        beta_query: inverse temperature of the query-bank factor (beta_2 in NNN App. A1).
        beta_target: inverse temperature of the target-bank factor (beta_1); 0 turns it off (QBNorm).

    Fitted attributes: ``query_offsets_`` (h_Q), ``target_offsets_`` (h_R), ``offsets_`` (their sum), each
    centred by a constant (module docstring).
    """

    name = "dualis"
    uses_query_bank = "required"
    uses_target_bank = "required"

    def __init__(self, beta_query=50.0, beta_target=50.0, *, device=None, chunk_size=None, check_normalized=True,
                 block_bytes=None):
        self.beta_query = beta_query
        self.beta_target = beta_target
        self.device = device
        self.chunk_size = chunk_size
        self.check_normalized = check_normalized
        self.block_bytes = block_bytes

    def _validate_params(self):
        super()._validate_params()
        bq = check_finite_float(self.beta_query, "beta_query", minimum=0.0)
        bt = check_finite_float(self.beta_target, "beta_target", minimum=0.0)
        if bq + bt <= 0:
            raise ValueError("beta_query + beta_target must be > 0 (both 0 would leave no normalisation): raise one of them")

    def _fit(self, targets, query_bank, target_bank):
        bq, bt = float(self.beta_query), float(self.beta_target)
        total = bq + bt
        self.query_offsets_ = self._term(targets, query_bank, bq, total, "beta_query")
        self.target_offsets_ = self._term(targets, target_bank, bt, total, "beta_target")
        self.offsets_ = self.query_offsets_ + self.target_offsets_


    def _term(self, targets, bank, beta, total, name):
        """``h_X = -log mean_{x in bank} exp(beta s(x, t)) / (beta_q + beta_t)`` (centred, see module docstring)."""
        lme = log_mean_exp_similarity(targets, bank, beta, block_bytes=self.block_bytes, unit=total,
                                      name=f"{name}={beta:g}")
        return (-lme / total).to(targets.dtype)


class DualDynamicInvertedSoftmax(DualInvertedSoftmax):
    """DualDIS: DualIS whose two factors are each gated by an activation set (see module docstring).

    Parameters (beyond DualIS): ``k``, the top-k that builds both activation sets (1 by default).
    Fitted attributes: ``query_activation_``, ``target_activation_`` (bool masks over targets).
    """

    name = "dualdis"
    is_offset = False

    def __init__(self, beta_query=50.0, beta_target=50.0, k=1, *, device=None, chunk_size=None,
                 check_normalized=True, block_bytes=None):
        super().__init__(beta_query, beta_target, device=device, chunk_size=chunk_size,
                         check_normalized=check_normalized, block_bytes=block_bytes)
        self.k = k

    def _validate_params(self):
        super()._validate_params()
        check_positive_int(self.k, "k")

    def _fit(self, targets, query_bank, target_bank):
        super()._fit(targets, query_bank, target_bank)
        self.query_activation_ = activation_mask(query_bank, targets, self.k, self.block_bytes)
        self.target_activation_ = activation_mask(target_bank, targets, self.k, self.block_bytes)

    def _score_block(self, q):
        s = q @ self.targets_.T
        top1 = s.argmax(dim=1)
        gate_q = self.query_activation_[top1].to(s.dtype)[:, None]
        gate_t = self.target_activation_[top1].to(s.dtype)[:, None]
        return s + gate_q * self.query_offsets_ + gate_t * self.target_offsets_
