"""Nearest Neighbor Normalization (NNN).

Chowdhury et al., "Nearest Neighbor Normalization Improves Multimodal Retrieval", Eq. (1)-(2):

    b(t)      = alpha * (1/k) * sum_{q in D_topk(t)} s(q, t)       D_topk(t): the k bank queries most similar to t
    s_D(q, t) = s(q, t) - b(t)

so ``offsets_ = -b``. The method is :func:`nnn_bias_plain` below, in a few lines. What runs by default
(``implementation="fast"``) is :func:`nnn_bias_fast`: the same values from the kernel
:func:`hubnorm.kernels.topk_similarity` (a thresholded, blocked top-k with warm-up and an exactness check that
falls back to plain merging), an optimisation only: ``tests/test_hardening.py`` proves both equal (values to
float tolerance, exact ties included) and ``tests/test_fast_paths.py`` proves the kernel equal to a dense top-k.
"""

from __future__ import annotations

import torch

from .._validation import check_finite_float, check_positive_int
from ..kernels import block_rows, iter_blocks, nnn_bias, topk_similarity
from .base import Normalizer


def nnn_bias_plain(targets: torch.Tensor, query_bank: torch.Tensor, alpha: float, k: int, block_bytes=None) -> torch.Tensor:
    """NNN Eq. (1) as written, one block of targets at a time (the reference for :func:`nnn_bias_fast`)."""
    bias = torch.empty(targets.shape[0], dtype=targets.dtype, device=targets.device)
    rows = block_rows(query_bank.shape[0], targets.element_size(), block_bytes)
    for t0, t1 in iter_blocks(targets.shape[0], rows):
        scores = targets[t0:t1] @ query_bank.T               # s(q, t) for every bank query q
        top = scores.topk(k, dim=1).values                   # the k nearest bank queries of each target
        bias[t0:t1] = float(alpha) * top.mean(dim=1)
    return bias


def nnn_bias_fast(targets: torch.Tensor, query_bank: torch.Tensor, alpha: float, k: int, block_bytes=None) -> torch.Tensor:
    """The same bias from the streamed top-k kernel :func:`hubnorm.kernels.topk_similarity` (never holds a
    ``targets x bank`` block larger than ``block_bytes``; about one GEMM pass plus a cheap filter)."""
    top, _ = topk_similarity(targets, query_bank, k, block_bytes=block_bytes)
    return nnn_bias(top, alpha)


#: ``implementation`` names -> bias functions (the seam between the method and its optimisation).
IMPLEMENTATIONS = {"plain": nnn_bias_plain, "fast": nnn_bias_fast}


class NearestNeighborNormalization(Normalizer):
    """NNN: subtract ``alpha`` times the mean of each target's top-``k`` bank similarities.

    Parameters:
        alpha: weight of the bias (NNN sweeps 0.25 ... 1.5; ``alpha=0`` is the identity).
        k: number of nearest bank queries per target (NNN sweeps 1 ... 512).
        device, chunk_size, check_normalized: see :class:`~hubnorm.normalizers.base.Normalizer`.
        block_bytes: memory budget of one similarity block while computing the bias.
        implementation: ``"fast"`` (default, :func:`nnn_bias_fast`) or ``"plain"`` (:func:`nnn_bias_plain`,
            the formula as written; slower at scale). Both give the same bias.

    Fitted attributes: ``bias_`` (``b(t)``, length n), ``offsets_ = -bias_``.
    """

    name = "nnn"
    uses_query_bank = "required"

    def __init__(self, alpha=0.75, k=128, *, device=None, chunk_size=None, check_normalized=True, block_bytes=None,
                 implementation="fast"):
        self.alpha = alpha
        self.k = k
        self.device = device
        self.chunk_size = chunk_size
        self.check_normalized = check_normalized
        self.block_bytes = block_bytes
        self.implementation = implementation

    def _validate_params(self):
        super()._validate_params()
        check_finite_float(self.alpha, "alpha")
        check_positive_int(self.k, "k")
        if getattr(self, "implementation", "fast") not in IMPLEMENTATIONS:
            raise ValueError(f"implementation must be one of {sorted(IMPLEMENTATIONS)}; got {self.implementation!r}")

    def _fit(self, targets, query_bank, target_bank):
        k = check_positive_int(self.k, "k", maximum=query_bank.shape[0], max_name="the query bank size")
        bias = IMPLEMENTATIONS[getattr(self, "implementation", "fast")]
        self.bias_ = bias(targets, query_bank, float(self.alpha), k, self.block_bytes)
        self.offsets_ = -self.bias_
