"""Mutual proximity (MP): the Gaussian and the empirical form, both with independent sides.

Schnitzer, Flexer, Schedl and Widmer, "Local and Global Scaling Reduce Hubs in Space" (JMLR 13, 2012), mutual
proximity: the probability that ``t`` is as close to ``q`` as ``q`` finds its other neighbours *and* ``q`` as
close to ``t`` as ``t`` finds its own, each side's distances modelled as a Gaussian and the two sides as
independent ("MP-GaussI"):

    MP(q, t) = P(X_q > d(q, t)) * P(Y_t > d(q, t)),     X_q ~ N(mu_q, sigma_q^2),  Y_t ~ N(mu_t, sigma_t^2)

With the cosine distance ``d = 1 - s`` this is ``Phi(z_q) Phi(z_t)`` with the standardised scores
``z_q = (s - m_q) / v_q`` and ``z_t = (s - m_t) / v_t``, where ``m_q, v_q`` are the mean and standard deviation of
query ``q``'s scores with every target, and ``m_t, v_t`` those of target ``t``'s scores with every bank query (the
queries it will face; the cross-modal reading, as CSLS's radii). ``score`` returns ``log MP =
log Phi(z_q) + log Phi(z_t)`` (same order, no underflow far from the query).

``form="empirical"`` counts instead of fitting Gaussians:

    MP(q, t) = |{t' : s(q, t') < s(q, t)}| / n  *  |{b in bank : s(b, t) < s(q, t)}| / |bank|

(the share of targets farther from ``q`` than ``t``, times the share of bank queries farther from ``t`` than
``q``; the paper's joint count over shared objects has no meaning across two sets, hence the product). It stores
every target's sorted bank column (``n x |bank|`` values: the bank matrix itself) and ``score`` returns the product
of shares (ties are frequent: a count has few values).

Not an offset method (the query side depends on ``s``). Plain computation of the target side:
``S = bank @ targets.T``; ``m_t = S.mean(0)``, ``v_t = S.std(0, unbiased=False)`` (empirical: ``S.sort(0)``); as
blocks it is one :class:`~hubnorm.blocks.Moments` reduction over the bank axis (empirical: a
:class:`~hubnorm.blocks.TopK` of the whole bank). Standard deviations are clamped at :data:`MIN_SD` (a constant
column).
Tests: ``tests/test_classic_hubness.py`` (dense float64 oracle), the generic method checks.
"""

from __future__ import annotations

import torch

from ..blocks import Inputs, Moments, Param, Scores, TopK
from .base import Normalizer

BANK_SCORES = Scores("query_bank", "targets")
#: the smallest standard deviation of a side's scores (a constant row or column)
MIN_SD = 1e-12


#: the forms of mutual proximity
FORMS = ("gaussian", "empirical")


class MutualProximity(Normalizer):
    """Mutual proximity with independent sides, ``form="gaussian"`` (default) or ``"empirical"``.

    Blocks: the target side's mean and standard deviation are a :class:`~hubnorm.blocks.Moments` reduction over the
    bank axis of the bank x target scores (empirical: a :class:`~hubnorm.blocks.TopK` of every bank query, the
    sorted column); the query side's are read off each block of test scores (a block spans every target) at
    scoring time.

    Fitted attributes: ``target_mean_``, ``target_sd_`` (gaussian); ``target_sorted_`` (empirical: each target's bank
    scores in increasing order).
    """

    name = "mp"
    display_name = "MP"
    is_offset = False
    paper_grid = {}
    inputs = Inputs(fit=(BANK_SCORES,), score=(Scores("queries", "targets"),))
    parameters = {"form": Param("choice", choices=FORMS, doc="Gaussian or empirical distributions of each side")}
    example_params = {}

    def __init__(self, form="gaussian", *, device=None, chunk_size=None, check_normalized=True, block_bytes=None):
        self._store(locals())

    def fit_blocks(self, engine):
        if self.form == "empirical":
            top = engine.reduce(TopK(BANK_SCORES, engine.size("query_bank"), axis=0))
            return {"target_sorted_": top.values.flip(dims=(1,)).contiguous()}
        mean, sd = engine.reduce(Moments(BANK_SCORES, axis=0))
        return {"target_mean_": mean, "target_sd_": sd.clamp(min=MIN_SD)}

    def plain(self, targets, query_bank=None, target_bank=None):
        s = query_bank @ targets.T
        if self.form == "empirical":
            return {"target_sorted_": s.sort(dim=0).values.T.contiguous()}
        return {"target_mean_": s.mean(dim=0), "target_sd_": s.std(dim=0, unbiased=False).clamp(min=MIN_SD)}

    def normalize_scores(self, s, queries=None):
        if self.form == "empirical":
            n, m_bank = s.shape[1], self.target_sorted_.shape[1]
            farther_q = torch.searchsorted(s.sort(dim=1).values, s)                  # targets farther from q than t
            farther_t = torch.searchsorted(self.target_sorted_, s.T.contiguous()).T  # bank queries farther from t
            return (farther_q.to(s.dtype) / n).mul_(farther_t.to(s.dtype) / m_bank)
        m_q = s.mean(dim=1, keepdim=True)
        v_q = s.std(dim=1, unbiased=False, keepdim=True).clamp_(min=MIN_SD)
        z_t = (s - self.target_mean_) / self.target_sd_
        s.sub_(m_q).div_(v_q)
        return torch.special.log_ndtr(s).add_(torch.special.log_ndtr(z_t))
