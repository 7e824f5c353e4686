"""Mutual proximity (MP), the Gaussian form with independent sides.

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

Not an offset method (the query side depends on ``s``). Plain computation of the target side:
``S = bank @ targets.T``; ``m_t = S.mean(0)``, ``v_t = S.std(0, unbiased=False)``; as blocks it is one
:class:`~hubnorm.blocks.Moments` reduction over the bank axis. Standard deviations are clamped at
:data:`MIN_SD` (a constant column). The empirical form of the paper (counts instead of Gaussians) needs every
target's whole sorted bank column and is not provided.
Tests: ``tests/test_classic_hubness.py`` (dense float64 oracle), the generic method checks.
"""

from __future__ import annotations

import torch

from ..blocks import Inputs, Moments, Scores
from .base import Normalizer

BANK_SCORES = Scores("query_bank", "targets")
#: the smallest standard deviation of a side's scores (a constant row or column)
MIN_SD = 1e-12


class MutualProximity(Normalizer):
    """Mutual proximity, Gaussian, independent sides; no parameter.

    Blocks: the target side's mean and standard deviation are a :class:`~hubnorm.blocks.Moments` reduction over the
    bank axis of the bank x target scores; the query side's are read off each block of test scores (a block spans
    every target) at scoring time.

    Fitted attributes: ``target_mean_``, ``target_sd_``.
    """

    name = "mp"
    display_name = "MP"
    is_offset = False
    paper_grid = {}
    inputs = Inputs(fit=(BANK_SCORES,), score=(Scores("queries", "targets"),))
    parameters = {}
    example_params = {}

    def __init__(self, *, device=None, chunk_size=None, check_normalized=True, block_bytes=None):
        self.device = device
        self.chunk_size = chunk_size
        self.check_normalized = check_normalized
        self.block_bytes = block_bytes

    def fit_blocks(self, engine):
        mean, sd = engine.reduce(Moments(BANK_SCORES, axis=0))
        return {"target_mean_": mean, "target_sd_": sd.clamp(min=MIN_SD)}

    def plain(self, targets, query_bank=None, target_bank=None):
        s = query_bank @ targets.T
        return {"target_mean_": s.mean(dim=0), "target_sd_": s.std(dim=0, unbiased=False).clamp(min=MIN_SD)}

    def normalize_scores(self, s, queries=None):
        m_q = s.mean(dim=1, keepdim=True)
        v_q = s.std(dim=1, unbiased=False, keepdim=True).clamp_(min=MIN_SD)
        z_t = (s - self.target_mean_) / self.target_sd_
        s.sub_(m_q).div_(v_q)
        return torch.special.log_ndtr(s).add_(torch.special.log_ndtr(z_t))
