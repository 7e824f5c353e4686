"""Listwise losses of Li et al. (2023): the Smooth-NDCG loss (Eq. 16-21) and the VSE++ hardest-negative triplet
loss (Eq. 1-3) on in-batch score matrices (torch, differentiable).

Smooth rank of candidate ``j`` for query ``i``: ``rank_ij = 1 + sum_{k != j} sigmoid((s_ik - s_ij) / tau)``.
**Sign note:** the paper's Eq. (16) prints ``sigmoid(s_ij - s_ik)``, which counts the candidates scored *below*
``j``; the official code uses ``s_ik - s_ij`` (as here). As ``tau -> 0`` the smooth rank tends to the hard rank
``1 + #{k : s_ik > s_ij}`` (ties count 1/2). The loss is ``1 - mean_i NDCG_hat_i`` over the full in-batch list,
summed over both directions (Eq. 19); the text-to-image term uses the transposed relevance.
"""

from __future__ import annotations

import math

import torch

from .validation import check_relevance, check_scores, check_tau

__all__ = ["smooth_rank", "hard_rank", "smooth_ndcg", "smooth_ndcg_loss", "triplet_loss"]


def smooth_rank(scores, tau: float = 0.01) -> torch.Tensor:
    """Smoothed 1-based ranks ``1 + sum_{k != j} sigmoid((s_ik - s_ij) / tau)`` of every candidate of every row.

    (The sign is the official code's; the paper's Eq. 16 prints the argument negated.) Differentiable in
    ``scores``; memory O(m n^2): meant for training batches.
    """
    tau = check_tau(tau)
    s = check_scores(scores)
    diff = (s[:, None, :] - s[:, :, None]) / tau          # [i, j, k] = (s_ik - s_ij) / tau
    sig = torch.sigmoid(diff)
    n = s.shape[1]
    eye = torch.eye(n, dtype=torch.bool, device=s.device)
    return 1.0 + sig.masked_fill(eye, 0.0).sum(dim=2)


def hard_rank(scores) -> torch.Tensor:
    """Exact 1-based ranks ``1 + #{k : s_ik > s_ij} + #{k != j : s_ik = s_ij} / 2`` (ties at their mean position),
    the ``tau -> 0`` limit of :func:`smooth_rank`."""
    s = check_scores(scores)
    greater = (s[:, None, :] > s[:, :, None]).sum(dim=2)
    ties = (s[:, None, :] == s[:, :, None]).sum(dim=2) - 1
    return 1.0 + greater.to(s.dtype) + 0.5 * ties.to(s.dtype)


def smooth_ndcg(scores, relevance, tau: float = 0.01) -> torch.Tensor:
    """Smooth NDCG of every row over the whole candidate list (Eq. 17-18): ``sum_j (2^r_ij - 1) / log2(1 + rank_ij)``
    with the smoothed ranks, divided by the ideal DCG. Rows whose ideal DCG is 0 get 0. Returns (m,)."""
    s = check_scores(scores)
    rel = check_relevance(relevance, s.shape, s)
    gains = torch.pow(2.0, rel) - 1.0
    dcg = (gains / torch.log2(1.0 + smooth_rank(s, tau))).sum(dim=1)
    ideal_gains = torch.sort(gains, dim=1, descending=True).values
    disc = 1.0 / torch.log2(torch.arange(2, s.shape[1] + 2, dtype=s.dtype, device=s.device))
    idcg = ideal_gains @ disc
    return torch.where(idcg > 0, dcg / idcg.clamp_min(torch.finfo(s.dtype).tiny), torch.zeros_like(dcg))


def smooth_ndcg_loss(scores, relevance, tau: float = 0.01) -> torch.Tensor:
    """S-NDCG loss of a square batch (Eq. 19-21): ``mean_i(1 - NDCG_hat(V_i)) + mean_i(1 - NDCG_hat(T_i))``.

    ``scores[i, j] = s(V_i, T_j)`` and ``relevance[i, j] = r(V_i, T_j)`` (i2t orientation); the text-to-image
    term ranks the columns with ``relevance.T``.
    """
    s = check_scores(scores)
    rel = check_relevance(relevance, s.shape, s)
    return (1.0 - smooth_ndcg(s, rel, tau)).mean() + (1.0 - smooth_ndcg(s.T, rel.T, tau)).mean()


def triplet_loss(scores, margin: float = 0.2) -> torch.Tensor:
    """VSE++ triplet loss with the hardest in-batch negative (Faghri et al.; Li et al. Eq. 1-3), both directions
    summed. ``scores[i, j] = s(V_i, T_j)``; the diagonal holds the positive pairs."""
    s = check_scores(scores)
    if s.shape[0] != s.shape[1]:
        raise ValueError(f"triplet_loss needs a square batch of positive pairs on the diagonal; got {tuple(s.shape)}")
    if not math.isfinite(margin) or margin < 0:
        raise ValueError(f"margin must be a finite number >= 0; got {margin}")
    pos = s.diagonal()
    eye = torch.eye(s.shape[0], dtype=torch.bool, device=s.device)
    cost_t = (margin + s - pos[:, None]).clamp_min(0).masked_fill(eye, 0)   # image i vs captions j (v -> t)
    cost_v = (margin + s - pos[None, :]).clamp_min(0).masked_fill(eye, 0)   # caption j vs images i (t -> v)
    return cost_t.max(dim=1).values.mean() + cost_v.max(dim=0).values.mean()


