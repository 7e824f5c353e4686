"""Dynamic inverted softmax (DIS), the query-bank variant of QBNorm.

Bogolin et al. (CVPR 2022), Sec. 3; Pan et al. (DBSN) Table 4/A7. An *activation set* collects likely hubs:

    A = union over bank queries b of top_k(b)        (top-k targets of b under the raw score; k = 1)

A test query whose raw top-1 target is in A is ranked by the inverted softmax row ``S_ij + hbar(t_j)``
(see :mod:`hubnorm.normalizers.inverted_softmax`); any other query keeps its raw row ``S_ij``. Rows are thus on
mixed scales: only per-row rankings are meaningful. With the test queries as the bank and k = 1 every
query's top-1 is in A, so DIS equals IS.

Plain computation of A: ``mask[(bank @ targets.T).topk(k, dim=1).indices] = True``; the top-k runs through the
kernel :func:`hubnorm.kernels.topk_similarity` (same values; under exact ties at the k-th place it may keep a
different one of the tied targets). Offsets: :func:`hubnorm.normalizers.inverted_softmax.inverted_softmax_offsets`.
"""

from __future__ import annotations

import torch

from ..kernels import topk_similarity
from .._validation import check_positive_float, check_positive_int
from .base import Normalizer
from .inverted_softmax import inverted_softmax_offsets


def activation_mask(bank, targets, k, block_bytes=None):
    """Boolean mask over targets: ``True`` for every target in some bank item's raw top-``k``."""
    k = check_positive_int(k, "k", maximum=targets.shape[0], max_name="the number of targets")
    _, idx = topk_similarity(bank, targets, k, block_bytes=block_bytes)
    mask = torch.zeros(targets.shape[0], dtype=torch.bool, device=targets.device)
    mask[idx.reshape(-1)] = True
    return mask


class DynamicInvertedSoftmax(Normalizer):
    """DIS: inverted softmax only for queries whose raw top-1 target is a likely hub.

    Parameters:
        tau: inverted-softmax temperature.
        k: each bank query adds its top-``k`` targets to the activation set (1 in QBNorm).

    Fitted attributes: ``offsets_`` (the IS offsets), ``activation_`` (bool mask over targets).
    """

    name = "dis"
    uses_query_bank = "required"
    is_offset = False

    def __init__(self, tau=0.02, k=1, *, device=None, chunk_size=None, check_normalized=True, block_bytes=None):
        self.tau = tau
        self.k = k
        self.device = device
        self.chunk_size = chunk_size
        self.check_normalized = check_normalized
        self.block_bytes = block_bytes

    def _validate_params(self):
        super()._validate_params()
        check_positive_float(self.tau, "tau")
        check_positive_int(self.k, "k")

    def _fit(self, targets, query_bank, target_bank):
        self.offsets_ = inverted_softmax_offsets(targets, query_bank, float(self.tau), self.block_bytes)
        self.activation_ = activation_mask(query_bank, targets, self.k, self.block_bytes)

    def _score_block(self, q):
        s = q @ self.targets_.T
        active = self.activation_[s.argmax(dim=1)]
        s[active] += self.offsets_
        return s
