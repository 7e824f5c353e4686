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

from .._validation import check_finite_float, check_positive_int, check_seed
from .base import Normalizer


class DistributionNormalization(Normalizer):
    """DN: centre queries and targets by ``lam`` times their bank means.

    Parameters:
        lam: centring weight (0.25 in the DN code, 0.5 in ``nnn-retrieval``); ``lam=0`` is the identity.
        n_samples: if set, estimate each mean from this many random bank rows, ...
        n_repeats: ... averaged over this many draws (the DN code: 100 and 5).
        seed: seed of those draws.

    Fitted attributes: ``query_mean_``, ``target_mean_``, ``offsets_``.
    """

    name = "dn"
    uses_query_bank = "required"
    uses_target_bank = "optional"

    def __init__(self, lam=0.25, *, n_samples=None, n_repeats=5, seed=0, device=None, chunk_size=None,
                 check_normalized=True):
        self.lam = lam
        self.n_samples = n_samples
        self.n_repeats = n_repeats
        self.seed = seed
        self.device = device
        self.chunk_size = chunk_size
        self.check_normalized = check_normalized

    def _validate_params(self):
        super()._validate_params()
        check_finite_float(self.lam, "lam")
        if self.n_samples is not None:
            check_positive_int(self.n_samples, "n_samples")
        check_positive_int(self.n_repeats, "n_repeats")
        check_seed(self.seed)

    def _mean(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        if self.n_samples is None:
            return x.mean(dim=0)
        n = min(int(self.n_samples), x.shape[0])
        draws = [x[torch.randperm(x.shape[0], generator=gen)[:n].to(x.device)].mean(dim=0) for _ in range(int(self.n_repeats))]
        return torch.stack(draws).mean(dim=0)

    def _fit(self, targets, query_bank, target_bank):
        gen = torch.Generator().manual_seed(int(self.seed))
        lam = float(self.lam)
        self.query_mean_ = self._mean(query_bank, gen)
        self.target_mean_ = self._mean(targets if target_bank is None else target_bank, gen)
        self.offsets_ = -lam * (targets @ self.query_mean_) + lam * lam * (self.query_mean_ @ self.target_mean_)

    def _score_block(self, q):
        s = super()._score_block(q)
        s.sub_(float(self.lam) * (q @ self.target_mean_)[:, None])
        return s
