"""Dynamic inverted softmax (DIS), the query-bank variant of QBNorm.

Bogolin et al. (CVPR 2022), Sec. 3; Pan et al. (DBSN) Table 4/A7. An *activation set* collects likely hubs:

    A = union over bank queries b of top_k(b)        (top-k targets of b under the raw score; k = 1)

A test query whose raw top-1 target is in A is ranked by the inverted softmax row ``S_ij + hbar(t_j)``
(see :mod:`hubnorm.normalizers.inverted_softmax`); any other query keeps its raw row ``S_ij``. Rows are thus on
mixed scales: only per-row rankings are meaningful. With the test queries as the bank and k = 1 every
query's top-1 is in A, so DIS equals IS.

Plain computation of A: ``mask[(bank @ targets.T).topk(k, dim=1).indices] = True`` (:func:`activation_plain`).
As blocks: a :class:`~hubnorm.blocks.TopK` reduction over the *target* axis of the bank x target scores, with
indices (one top-``k`` per bank item), then their union (:func:`activation_blocks`); in process it runs through
:func:`hubnorm.kernels.topk_similarity` (same values; under exact ties at the k-th place it may keep a different
one of the tied targets). Offsets: the IS reduction (:mod:`hubnorm.normalizers.inverted_softmax`).
"""

from __future__ import annotations

import torch

from ..blocks import Inputs, Param, Scores, TopK
from .base import Normalizer
from .inverted_softmax import BANK_SCORES, inverted_softmax_blocks, inverted_softmax_plain


def mask_of(idx: torch.Tensor, n: int, device) -> torch.Tensor:
    """The union of the rows of ``idx`` (bank items x k target indices) as a boolean mask over ``n`` targets."""
    mask = torch.zeros(n, dtype=torch.bool, device=device)
    mask[idx.reshape(-1).to(device)] = True
    return mask


def activation_blocks(engine, source: Scores, k: int) -> torch.Tensor:
    """The activation set as blocks: a :class:`~hubnorm.blocks.TopK` of ``source`` (bank x targets) over the target
    axis with indices (one top-``k`` per bank item), then their union."""
    top = engine.to_tensor(engine.reduce(TopK(source, int(k), axis=1, indices=True)))
    idx = top.indices
    return mask_of(idx, engine.size("targets"), engine.device)


def activation_plain(bank: torch.Tensor, targets: torch.Tensor, k: int) -> torch.Tensor:
    """Plain: ``mask[(bank @ targets.T).topk(k, dim=1).indices] = True``."""
    return mask_of((bank @ targets.T).topk(int(k), dim=1).indices, targets.shape[0], targets.device)


class DynamicInvertedSoftmax(Normalizer):
    """DIS: inverted softmax only for queries whose raw top-1 target is a likely hub.

    Parameters:
        tau: inverted-softmax temperature.
        k: each bank query adds its top-``k`` targets to the activation set (1 in QBNorm); at most the number of
            targets.

    Fitted attributes: ``offsets_`` (the IS offsets), ``activation_`` (bool mask over targets).
    """

    name = "dis"
    display_name = "DIS"
    paper_grid = {"tau": [0.005, 0.01, 0.015, 0.02, 0.025, 0.05]}
    inputs = Inputs(fit=(BANK_SCORES,), score=(Scores("queries", "targets"),))
    parameters = {"tau": Param("positive", doc="temperature"),
                  "k": Param("int", limited_by=("targets",), doc="top-k of each bank item joins the activation set")}
    is_offset = False
    example_params = {"tau": 0.02, "k": 1}

    def __init__(self, tau=0.02, k=1, *, device=None, chunk_size=None, check_normalized=True, block_bytes=None):
        self._store(locals())

    def fit_blocks(self, engine):
        return {"offsets_": inverted_softmax_blocks(engine, self.tau),
                "activation_": activation_blocks(engine, BANK_SCORES, self.k)}

    def plain(self, targets, query_bank=None, target_bank=None):
        return {"offsets_": inverted_softmax_plain(targets, query_bank, float(self.tau)),
                "activation_": activation_plain(query_bank, targets, self.k)}

    def normalize_scores(self, s, queries=None):
        active = self.activation_[s.argmax(dim=1)]
        s[active] += self.offsets_
        return s
