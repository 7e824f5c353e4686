"""Sinkhorn Normalization (SN) and Dual Bank Sinkhorn Normalization (DBSN).

Pan et al., "Hubness Reduction with Dual Bank Sinkhorn Normalization for Cross-Modal Retrieval", Eq. (7)-(9)
and Algorithms A1-A2. SN solves the entropic optimal-transport problem with uniform marginals on the
bank-by-target score matrix S (m x n),

    pi* = argmax_{pi 1 = a, pi^T 1 = b} <S, pi> + tau H(pi),     a = 1/m, b = 1/n,

whose solution is ``pi*_ij = exp((S_ij + hbar(q_i) + hbar(t_j)) / tau)`` (Eq. 9). The target term
``hbar(t_j) = tau log beta_j`` (Alg. A1 returns its negative and subtracts it) is the offset: rank ``S + hbar``.
The Sinkhorn-Knopp updates run in the log domain (stable in float32 for tau = 0.01, where exp(S/tau) overflows):

    f_i = tau log(1/m) - tau logsumexp_j((S_ij + g_j) / tau)      (alpha = exp(f / tau))
    g_j = tau log(1/n) - tau logsumexp_i((S_ij + f_i) / tau)      (beta  = exp(g / tau))

starting from g = 0 (beta = 1), T times. Each iteration is one pass over row blocks of S: a block's f is
computed from the previous g and immediately folded into the column logsumexp of the new g, so S is never held
whole unless it fits ``cache_bytes`` (then its blocks are kept and reused across iterations).

DBSN (Alg. A2) runs SN on the query bank against the extended targets [T ; B_t] and keeps the first n entries.
With the test queries as the bank, SN is query-aware (DBSN Table 2).
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch

from .._ops import block_rows, iter_blocks
from .._validation import check_positive_float, check_positive_int
from .base import Normalizer

#: Keep the bank x target score blocks in memory across iterations when they take at most this many bytes.
DEFAULT_CACHE_BYTES = 2 * 2**30


def sinkhorn_potentials(
    bank: torch.Tensor,
    targets: torch.Tensor,
    tau: float,
    n_iter: int = 10,
    tol: Optional[float] = None,
    *,
    block_bytes: Optional[int] = None,
    cache_bytes: Optional[int] = DEFAULT_CACHE_BYTES,
) -> Tuple[torch.Tensor, torch.Tensor, int]:
    """Log-domain Sinkhorn on ``S = bank @ targets.T`` with uniform marginals.

    Returns ``(f, g, iterations)``: the row potentials (``tau log alpha``), the column potentials
    (``tau log beta``) and the number of iterations run. Stops early when ``tol`` is given and the largest
    change of ``g`` in one iteration is below it.
    """
    m, n = bank.shape[0], targets.shape[0]
    rows = block_rows(n, bank.element_size(), block_bytes)
    blocks = list(iter_blocks(m, rows))
    keep = cache_bytes is not None and m * n * bank.element_size() <= cache_bytes
    cache = {}
    log_a, log_b = math.log(1.0 / m), math.log(1.0 / n)
    g = torch.zeros(n, dtype=bank.dtype, device=bank.device)
    f = torch.empty(m, dtype=bank.dtype, device=bank.device)
    done = 0
    for _ in range(int(n_iter)):
        acc = None
        for r0, r1 in blocks:
            s = cache.get(r0)
            if s is None:
                s = bank[r0:r1] @ targets.T
                if keep:
                    cache[r0] = s
            # row update from the previous g
            f_blk = tau * log_a - tau * torch.logsumexp((s + g) / tau, dim=1)
            f[r0:r1] = f_blk
            # this block's share of the column logsumexp for the new g
            part = torch.logsumexp((s + f_blk[:, None]) / tau, dim=0)
            acc = part if acc is None else torch.logaddexp(acc, part)
        g_new = tau * log_b - tau * acc
        done += 1
        delta = float((g_new - g).abs().max())
        g = g_new
        if tol is not None and delta < tol:
            break
    return f, g, done


class SinkhornNormalization(Normalizer):
    """SN: offsets from the Sinkhorn column scaling of the bank-by-target matrix.

    Parameters:
        tau: entropic regularisation / temperature (0.01 in the DBSN code).
        n_iter: Sinkhorn iterations T (10 in Alg. A1; the paper's main tables ran to convergence).
        tol: optional early stop on the largest change of the offsets.
        cache_bytes: keep the score blocks in memory when the bank x target matrix fits (else recompute).

    Fitted attributes: ``offsets_`` (``hbar(t) = tau log beta``), ``n_iter_`` (iterations run).
    """

    name = "sn"
    uses_query_bank = "required"

    def __init__(self, tau=0.01, n_iter=10, tol=None, *, device=None, chunk_size=None, check_normalized=True,
                 block_bytes=None, cache_bytes=DEFAULT_CACHE_BYTES):
        self.tau = tau
        self.n_iter = n_iter
        self.tol = tol
        self.device = device
        self.chunk_size = chunk_size
        self.check_normalized = check_normalized
        self.block_bytes = block_bytes
        self.cache_bytes = cache_bytes

    def _validate_params(self):
        super()._validate_params()
        check_positive_float(self.tau, "tau")
        check_positive_int(self.n_iter, "n_iter")
        if self.tol is not None:
            check_positive_float(self.tol, "tol")

    def _potentials(self, bank, targets):
        return sinkhorn_potentials(bank, targets, float(self.tau), int(self.n_iter), self.tol,
                                   block_bytes=self.block_bytes, cache_bytes=self.cache_bytes)

    def _fit(self, targets, query_bank, target_bank):
        _, g, self.n_iter_ = self._potentials(query_bank, targets)
        self.offsets_ = g


class DualBankSinkhornNormalization(SinkhornNormalization):
    """DBSN: SN of the query bank against ``[targets ; target_bank]``; the first n column potentials are the offsets.

    Use all training targets as ``target_bank`` even when the query bank is subsampled (DBSN, Sec. 4.3).
    Fitted attributes: ``offsets_``, ``bank_offsets_`` (potentials of the target-bank items), ``n_iter_``.
    """

    name = "dbsn"
    uses_target_bank = "required"

    def _fit(self, targets, query_bank, target_bank):
        extended = torch.cat([targets, target_bank], dim=0)
        _, g, self.n_iter_ = self._potentials(query_bank, extended)
        n = targets.shape[0]
        self.offsets_ = g[:n].clone()
        self.bank_offsets_ = g[n:].clone()
