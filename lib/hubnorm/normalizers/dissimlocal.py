"""DisSimLocal (DSL): distances corrected by local centroids.

Hara, Suzuki, Kobayashi, Fukumizu and Radovanović, "Flattening the Density Gradient for Eliminating Spatial
Centrality to Reduce Hubness" (AAAI 2016), the localised centring dissimilarity:

    d_DSL(q, t) = ||q - t||^2 - ||q - c_k(q)||^2 - ||t - c_k(t)||^2

where ``c_k(x)`` is the centroid of ``x``'s ``k`` nearest neighbours. Across two modalities each side's neighbours
lie on the other side (as CSLS's radii): ``c_k(t)`` is the mean of target ``t``'s ``k`` nearest bank queries, ``c_k(q)``
the mean of query ``q``'s ``k`` nearest targets. ``score`` returns the similarity ``-d_DSL``.

On unit rows ``||q - t||^2 = 2 - 2 s(q, t)`` and ``||q - c_k(q)||^2`` is constant along a row, so a row ranks like
``s + ||t - c_k(t)||^2 / 2``: an offset method, ``offsets_ = ||t - c_k(t)||^2 / 2`` (a target far from its local
centroid, on the rim of the data rather than in a dense centre, is brought forward). Blocks: the neighbours are a
:class:`~hubnorm.blocks.TopK` reduction with indices over the bank axis; their rows are gathered
(``engine.take_rows``) and averaged. The centroid needs the bank's *embeddings*: from score matrices alone it
cannot be computed (the score path names the missing input).
Tests: ``tests/test_classic_hubness.py`` (dense float64 oracle), the generic method checks.
"""

from __future__ import annotations

import torch

from ..blocks import Embeddings, Inputs, Param, Scores, TopK
from .base import Normalizer

BANK_SCORES = Scores("query_bank", "targets")


class DisSimLocal(Normalizer):
    """DisSimLocal with ``k`` neighbours on both sides (``k`` at most the query-bank size and the number of targets).

    Fitted attributes: ``local_centroid_dist_`` (``||t - c_k(t)||^2``), ``offsets_`` (half of it).
    """

    name = "dsl"
    display_name = "DSL"
    paper_grid = {"k": [1, 2, 5, 10, 20, 50, 100]}
    inputs = Inputs(fit=(BANK_SCORES, Embeddings("query_bank"), Embeddings("targets")),
                    score=(Scores("queries", "targets"),))
    parameters = {"k": Param("int", limited_by=("query_bank", "targets"), doc="neighbours of each local centroid")}
    example_params = {"k": 4}

    def __init__(self, k=10, *, device=None, chunk_size=None, check_normalized=True, block_bytes=None):
        self._store(locals())

    @staticmethod
    def _fitted(targets, centroids):
        dist = ((targets - centroids) ** 2).sum(dim=1)
        return {"local_centroid_dist_": dist, "offsets_": 0.5 * dist}

    def fit_blocks(self, engine):
        k = int(self.k)
        idx = engine.reduce(TopK(BANK_SCORES, k, axis=0, indices=True)).indices          # (n, k) bank rows
        rows = engine.take_rows("query_bank", idx.reshape(-1).to(torch.long))
        centroids = rows.reshape(idx.shape[0], k, -1).to(engine.dtype).mean(dim=1)
        return self._fitted(engine.tensor("targets"), centroids)

    def plain(self, targets, query_bank=None, target_bank=None):
        idx = (targets @ query_bank.T).topk(int(self.k), dim=1).indices
        return self._fitted(targets, query_bank[idx].mean(dim=1))

    def normalize_scores(self, s, queries=None):
        top = s.topk(int(self.k), dim=1)
        c_q = self.targets_[top.indices].mean(dim=1)                                     # (rows, d)
        q_to_centroid = 1 - 2 * top.values.mean(dim=1, keepdim=True) + (c_q * c_q).sum(dim=1, keepdim=True)
        # -d_DSL = -(2 - 2 s) + ||q - c_q||^2 + ||t - c_t||^2
        return s.mul_(2).sub_(2).add_(q_to_centroid).add_(self.local_centroid_dist_)
