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

As blocks: one :class:`~hubnorm.blocks.LogMeanExp` reduction per term over the bank axis of its score matrix
(bank queries x targets, and bank targets x targets), float64 when float32 cannot hold it, ``ValueError`` naming
the beta when even float64 cannot; in process through :func:`hubnorm.kernels.logsumexp_similarity` (streamed). Tests: ``tests/test_oracles.py``,
``tests/test_hardening.py``.
(The official DBNorm function never uses the test-query matrix; we implement the formula.)

DualDIS applies each factor only to queries whose raw top-1 target is in that factor's activation set
(dynamic, as in DIS): the query-bank set is the union of the bank queries' top-k targets; the target-bank set
is the union of the bank targets' top-k test targets under the intra-modal score. A factor that is not applied
contributes nothing, i.e. ``score = s + [top1 in A_Q] h_Q + [top1 in A_R] h_R`` (rows on mixed scales).
"""

from __future__ import annotations

import math

import torch

from ..blocks import Inputs, Param, Scores, log_mean_exp
from .base import SWEEP_COMMON, Normalizer
from .dynamic_inverted_softmax import activation_blocks, activation_plain

#: The two score matrices: bank queries x targets (cross-modal) and bank targets x targets (intra-modal).
QUERY_BANK_SCORES = Scores("query_bank", "targets")
TARGET_BANK_SCORES = Scores("target_bank", "targets")
_SOURCES = {"beta_query": QUERY_BANK_SCORES, "beta_target": TARGET_BANK_SCORES}


class DualInvertedSoftmax(Normalizer):
    """DualIS: product of a query-bank and a target-bank inverted softmax.

    Parameters:
        beta_query: inverse temperature of the query-bank factor (beta_2 in NNN App. A1), >= 0.
        beta_target: inverse temperature of the target-bank factor (beta_1), >= 0; 0 turns it off (QBNorm).

    Fitted attributes: ``query_offsets_`` (h_Q), ``target_offsets_`` (h_R), ``offsets_`` (their sum), each
    centred by a constant (module docstring).
    """

    name = "dualis"
    display_name = "DualIS"
    paper_grid = {"beta_query": [10.0, 25.0, 50.0, 100.0], "beta_target": [0.0, 1.0, 10.0, 50.0]}
    inputs = Inputs(fit=(QUERY_BANK_SCORES, TARGET_BANK_SCORES))
    parameters = {"beta_query": Param("real", minimum=0.0, doc="query-bank inverse temperature"),
                  "beta_target": Param("real", minimum=0.0, doc="target-bank inverse temperature")}
    sweep_params = frozenset({"beta_query", "beta_target"})
    example_params = {"beta_query": 50.0, "beta_target": 10.0}

    def __init__(self, beta_query=50.0, beta_target=50.0, *, device=None, chunk_size=None, check_normalized=True,
                 block_bytes=None):
        self._store(locals())

    def _validate_params(self):
        super()._validate_params()
        if float(self.beta_query) + float(self.beta_target) <= 0:
            raise ValueError("beta_query + beta_target must be > 0 (both 0 would leave no normalisation): raise one of them")

    def fit_blocks(self, engine):
        return type(self).fit_grid([self], engine)[0]

    @classmethod
    def fit_grid(cls, norms, engine):
        """Both terms of every point: ``h_X = -log mean_{x in B_X} exp(beta_X s(x, t)) / (beta_q + beta_t)`` (centred,
        see the module docstring), one :class:`~hubnorm.blocks.LogMeanExp` per bank and beta.

        The centred log-mean-exp depends on the point's total beta only through the working dtype it picks; for
        float64 inputs that is always float64, so one pass per (bank, beta) serves every point (checked with the
        smallest total, the strictest precision test); float32 inputs get one pass per (bank, beta, total). A
        sweep's engine keeps each bank's similarity blocks, so every pass after the first needs no GEMM."""
        exact64 = engine.dtype == torch.float64
        memo = {}

        def term(name, beta, total):
            key = (name, beta) if exact64 else (name, beta, total)
            if key not in memo:
                unit = min(float(n.beta_query) + float(n.beta_target) for n in norms
                           if float(getattr(n, name)) == beta) if exact64 else total
                memo[key] = log_mean_exp(engine, _SOURCES[name], beta, unit=unit, name=f"{name}={beta:g}")
            return memo[key]

        out = []
        for n in norms:
            bq, bt = float(n.beta_query), float(n.beta_target)
            total = bq + bt
            hq = (-term("beta_query", bq, total) / total).to(engine.dtype)
            hr = (-term("beta_target", bt, total) / total).to(engine.dtype)
            out.append({"query_offsets_": hq, "target_offsets_": hr, "offsets_": hq + hr})
        return out

    def plain(self, targets, query_bank=None, target_bank=None):
        bq, bt = float(self.beta_query), float(self.beta_target)
        total = bq + bt

        def h(bank, beta):
            return -(torch.logsumexp(beta * (bank @ targets.T), dim=0) - math.log(bank.shape[0])) / total

        hq, hr = h(query_bank, bq), h(target_bank, bt)
        return {"query_offsets_": hq, "target_offsets_": hr, "offsets_": hq + hr}


class DualDynamicInvertedSoftmax(DualInvertedSoftmax):
    """DualDIS: DualIS whose two factors are each gated by an activation set (see module docstring).

    Parameters (beyond DualIS): ``k``, the top-k that builds both activation sets (1 by default; at most the
    number of targets). Fitted attributes: ``query_activation_``, ``target_activation_`` (bool masks over targets).
    """

    name = "dualdis"
    display_name = "DualDIS"
    inputs = Inputs(fit=(QUERY_BANK_SCORES, TARGET_BANK_SCORES), score=(Scores("queries", "targets"),))
    parameters = {**DualInvertedSoftmax.parameters,
                  "k": Param("int", limited_by=("targets",), doc="top-k of each bank item joins its activation set")}
    is_offset = False
    sweep_fixed = SWEEP_COMMON | {"k"}
    example_params = {"beta_query": 50.0, "beta_target": 10.0, "k": 1}

    def __init__(self, beta_query=50.0, beta_target=50.0, k=1, *, device=None, chunk_size=None,
                 check_normalized=True, block_bytes=None):
        self._store(locals())

    @classmethod
    def fit_grid(cls, norms, engine):
        """DualIS's terms for every point; the activation sets (same ``k`` at every point) once."""
        out = super().fit_grid(norms, engine)
        masks = {}
        for n, fitted in zip(norms, out):
            k = int(n.k)
            if k not in masks:
                masks[k] = (activation_blocks(engine, QUERY_BANK_SCORES, k),
                            activation_blocks(engine, TARGET_BANK_SCORES, k))
            fitted["query_activation_"], fitted["target_activation_"] = masks[k]
        return out

    def plain(self, targets, query_bank=None, target_bank=None):
        out = super().plain(targets, query_bank, target_bank)
        out["query_activation_"] = activation_plain(query_bank, targets, self.k)
        out["target_activation_"] = activation_plain(target_bank, targets, self.k)
        return out

    def normalize_scores(self, s, queries=None):
        top1 = s.argmax(dim=1)
        gate_q = self.query_activation_[top1].to(s.dtype)[:, None]
        gate_t = self.target_activation_[top1].to(s.dtype)[:, None]
        return s + gate_q * self.query_offsets_ + gate_t * self.target_offsets_
