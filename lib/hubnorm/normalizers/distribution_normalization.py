"""Distribution Normalization (DN).

Zhou et al., "Test-Time Distribution Normalization for Contrastively Learned Vision-Language Models" (NeurIPS
2023), as used in the NNN paper, Appendix A3: a first-order approximation of DualIS that centres both
embeddings with the bank means before the dot product, with no renormalisation:

    s_DN(q, t) = (q - lam * mu_Q) . (t - lam * mu_T)
               = q.t - lam q.mu_T - lam mu_Q.t + lam^2 mu_Q.mu_T

mu_Q is the mean of the query bank and mu_T the mean of the target bank (the gallery itself when no target
bank is given). The per-target part is the offset ``-lam mu_Q.t + lam^2 mu_Q.mu_T``; the per-query part
``-lam q.mu_T`` does not change a query's ranking but is kept so scores equal the formula. For ranking, DN is
NNN with k = all bank queries and alpha = lam. The DN code averages 5 draws of 100 random bank items
(``n_samples``, ``n_repeats``); by default the full banks are used.
"""

from __future__ import annotations

import torch

from ..blocks import Embeddings, Inputs, Mean, Param
from .base import Normalizer


class DistributionNormalization(Normalizer):
    """DN: centre queries and targets by ``lam`` times their bank means.

    Parameters:
        lam: centring weight (0.25 in the DN code, 0.5 in ``nnn-retrieval``); ``lam=0`` is the identity.
        n_samples: if set, estimate each mean from this many random bank rows, ...
        n_repeats: ... averaged over this many draws (the DN code: 100 and 5).
        seed: seed of those draws.

    Blocks: each full-bank mean is a :class:`~hubnorm.blocks.Mean` reduction over the bank's rows (DN reads
    embeddings, not scores); the seeded draws are the same ``torch.randperm`` rows on every engine.

    Fitted attributes: ``query_mean_``, ``target_mean_``, ``offsets_``.
    """

    name = "dn"
    display_name = "DN"
    paper_grid = {"lam": [0.25, 0.5, 0.75, 1.0]}
    inputs = Inputs(fit=(Embeddings("query_bank"), Embeddings("target_bank", required=False), Embeddings("targets")),
                    score=(Embeddings("queries"),))
    parameters = {"lam": Param("real", doc="centring weight"),
                  "n_samples": Param("int", optional=True, doc="rows per draw (None: the whole bank)"),
                  "n_repeats": Param("int", doc="draws averaged"),
                  "seed": Param("seed")}
    example_params = {"lam": 0.5}

    def __init__(self, lam=0.25, *, n_samples=None, n_repeats=5, seed=0, device=None, chunk_size=None,
                 check_normalized=True):
        self._store(locals())

    def _mean(self, engine, name: str, gen: torch.Generator) -> torch.Tensor:
        if self.n_samples is None:
            return engine.reduce(Mean(name))
        size = engine.size(name)
        n = min(int(self.n_samples), size)
        draws = [engine.take_rows(name, torch.randperm(size, generator=gen)[:n]).mean(dim=0)
                 for _ in range(int(self.n_repeats))]
        return torch.stack(draws).mean(dim=0)

    def fit_blocks(self, engine):
        gen = torch.Generator().manual_seed(int(self.seed))
        lam = float(self.lam)
        query_mean = self._mean(engine, "query_bank", gen)
        target_mean = self._mean(engine, "target_bank" if engine.has("target_bank") else "targets", gen)
        targets = engine.tensor("targets")
        offsets = -lam * (targets @ query_mean) + lam * lam * (query_mean @ target_mean)
        return {"query_mean_": query_mean, "target_mean_": target_mean, "offsets_": offsets}

    def plain(self, targets, query_bank=None, target_bank=None):
        if self.n_samples is not None:
            raise NotImplementedError("the plain form of DN uses the full-bank means (n_samples=None)")
        lam = float(self.lam)
        mu_q = query_bank.mean(dim=0)
        mu_t = (targets if target_bank is None else target_bank).mean(dim=0)
        return {"query_mean_": mu_q, "target_mean_": mu_t,
                "offsets_": -lam * (targets @ mu_q) + lam * lam * (mu_q @ mu_t)}

    def normalize_scores(self, s, queries=None):
        s.add_(self.offsets_)
        s.sub_(float(self.lam) * (queries @ self.target_mean_)[:, None])
        return s
