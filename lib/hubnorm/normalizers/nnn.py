"""Nearest Neighbor Normalization (NNN).

Chowdhury et al., "Nearest Neighbor Normalization Improves Multimodal Retrieval", Eq. (1)-(2):

    b(t)      = alpha * (1/k) * sum_{q in D_topk(t)} s(q, t)       D_topk(t): the k bank queries most similar to t
    s_D(q, t) = s(q, t) - b(t)

so ``offsets_ = -b``. The plain computation is :func:`nnn_bias_plain` below, in a few lines.

As block reductions (:mod:`hubnorm.blocks`): the bias needs, per target, the top-``k`` of its column of the
bank-query x target score matrix, a :class:`~hubnorm.blocks.TopK` reduction over the bank axis (partial: the
top-``k`` of a block of bank rows; merge: the top-``k`` of two partials), finalised by :func:`nnn_bias`. In
process it runs through the kernel :func:`hubnorm.kernels.topk_similarity` (``implementation="fast"``: a
thresholded, blocked top-k with an exactness check; ``"plain"``: the block loop); on Dask every bank chunk is a
partial and the merges are a tree; on a faiss index (``hubnorm.index.FaissNNN``) the top-``k`` is searched.
Sweep: every ``(alpha, k)`` of a grid is read off one top-``max(k)`` (:meth:`NearestNeighborNormalization.fit_grid`;
the kernel's values never depend on ``k``). Tests: ``tests/test_hardening.py`` (plain = fast, exact ties),
``tests/test_fast_paths.py`` (kernel = dense top-k), ``tests/test_oracles.py`` (``nnn-retrieval``).
"""

from __future__ import annotations

from typing import Optional

import torch

from ..blocks import Inputs, Param, Scores, TopK
from ..kernels import bank_column, block_rows, iter_blocks, topk_similarity
from .base import Normalizer, stable_topk

#: The score matrix NNN reduces: bank queries x targets.
BANK_SCORES = Scores("query_bank", "targets")


def nnn_bias(top_values: torch.Tensor, alpha: float, *, mean: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The NNN bias ``b(t) = alpha * mean of the top-k bank similarities`` from the ``(n, k)`` top values (Eq. 1):
    the one place of the formula (every engine's fit and the sweep finalise here). An approximate engine (a vector
    index whose probed lists hold fewer than ``k`` rows) marks missing neighbours ``-inf``; the mean then runs over
    the neighbours found. ``mean``: the row means ``top_values.mean(dim=1)`` when every value is finite, computed by
    the caller (a sweep computes them once per ``k`` for every ``alpha``; same bits)."""
    if mean is not None:
        return float(alpha) * mean
    found = torch.isfinite(top_values)
    if bool(found.all()):
        return float(alpha) * top_values.mean(dim=1)
    total = torch.where(found, top_values, torch.zeros_like(top_values)).sum(dim=1)
    return float(alpha) * total / found.sum(dim=1).to(top_values.dtype)


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
        k: number of nearest bank queries per target (NNN sweeps 1 ... 512); at most the query-bank size.
        device, chunk_size, check_normalized: see :class:`~hubnorm.normalizers.base.Normalizer`.
        block_bytes: memory budget of one similarity block while computing the bias.
        implementation: ``"fast"`` (default, the top-k kernel) or ``"plain"`` (the block loop of
            :class:`~hubnorm.blocks.TopK`: the formula one block at a time; slower at scale). Same bias.

    Fitted attributes: ``bias_`` (``b(t)``, length n), ``offsets_ = -bias_``.
    """

    name = "nnn"
    display_name = "NNN"
    paper_grid = {"alpha": [0.25 + 0.125 * i for i in range(11)], "k": [2**i for i in range(10)]}  # NNN App. B1
    inputs = Inputs(fit=(BANK_SCORES,))
    parameters = {
        "alpha": Param("real", doc="weight of the bias"),
        "k": Param("int", limited_by=("query_bank",), doc="bank neighbours per target"),
        "implementation": Param("choice", choices=tuple(IMPLEMENTATIONS)),
    }
    sweep_params = frozenset({"alpha", "k"})
    example_params = {"alpha": 0.75, "k": 4}

    def __init__(self, alpha=0.75, k=128, *, device=None, chunk_size=None, check_normalized=True, block_bytes=None,
                 implementation="fast"):
        self._store(locals())

    def _top(self, k: int) -> TopK:
        return TopK(BANK_SCORES, k, axis=0, fast=getattr(self, "implementation", "fast") == "fast")

    def fit_blocks(self, engine):
        top = engine.reduce(self._top(int(self.k))).values
        return self.finalize(top)

    def finalize(self, top: torch.Tensor, mean: Optional[torch.Tensor] = None):
        """Fitted attributes from the ``(n, k)`` top bank similarities of the targets (``mean``: see :func:`nnn_bias`)."""
        bias = nnn_bias(top, self.alpha, mean=mean)
        return {"bias_": bias, "offsets_": -bias}

    def plain(self, targets, query_bank=None, target_bank=None):
        bias = float(self.alpha) * (query_bank @ targets.T).topk(int(self.k), dim=0).values.mean(dim=0)
        return {"bias_": bias, "offsets_": -bias}

    def offset_decomposition(self, query_bank, target_bank=None, *, block_bytes=None):
        """Eq. 1 as a sum over the bank (:mod:`hubnorm.forensics`): the ``k`` bank queries nearest to ``t_j`` weigh
        ``alpha / k`` each, every value is ``-s(q_i, t_j)``, no remainder."""
        k, alpha = int(self.k), float(self.alpha)

        def explain(j: int):
            s = bank_column(query_bank, self.targets_[j], block_bytes=block_bytes).to(torch.float64)
            w = torch.zeros_like(s)
            w[stable_topk(s[None, :], k)[1][0]] = alpha / k
            return w, -s, {}
        return explain

    @classmethod
    def fit_grid(cls, norms, engine):
        """Every ``(alpha, k)`` from one top-``max(k)``: the top-``k`` of a smaller ``k`` is its first ``k`` columns
        (the kernel's block partition never depends on ``k``, so the values are the bits a fit would select); the
        mean of each ``k``'s top values is computed once for every ``alpha``."""
        kmax = max(int(n.k) for n in norms)
        top = engine.reduce(norms[0]._top(kmax)).values
        tops = {}
        out = []
        for n in norms:
            k = int(n.k)
            if k not in tops:
                tk = top[:, :k].contiguous()
                tops[k] = (tk, tk.mean(dim=1) if bool(torch.isfinite(tk).all()) else None)
            out.append(n.finalize(*tops[k]))
        return out
