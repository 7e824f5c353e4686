"""Input checks shared by the listwise modules (public so that no module imports another's private names)."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch

from .._validation import unit_rows  # noqa: F401 (public here too: shared with the data layer's text encoder)

__all__ = ["unit_rows", "index_array", "check_tau", "check_scores", "check_relevance"]


def index_array(x, name: str, upper: Optional[int] = None) -> np.ndarray:
    """A non-empty 1-D int64 index array with values in ``[0, upper)``."""
    arr = np.asarray(x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x)
    if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must be a non-empty 1-D array of integer indices; got shape {arr.shape}, dtype {arr.dtype}")
    if arr.min() < 0 or (upper is not None and arr.max() >= upper):
        raise ValueError(f"{name} must lie in [0, {upper}); got range [{arr.min()}, {arr.max()}]")
    return arr.astype(np.int64)


def check_tau(tau) -> float:
    """A smoothing temperature: a finite number > 0."""
    if isinstance(tau, bool) or not isinstance(tau, (int, float, np.floating, np.integer)) or not math.isfinite(tau) or tau <= 0:
        raise ValueError(f"tau must be a finite number > 0; got {tau!r}")
    return float(tau)


def check_scores(scores, name: str = "scores") -> torch.Tensor:
    """A finite, non-empty 2-D floating-point tensor (numpy input becomes float64)."""
    if not isinstance(scores, torch.Tensor):
        scores = torch.as_tensor(np.asarray(scores, dtype=np.float64))
    if scores.ndim != 2 or scores.shape[0] == 0 or scores.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty 2-D (queries x candidates) matrix; got shape {tuple(scores.shape)}")
    if not torch.is_floating_point(scores):
        scores = scores.double()
    if not bool(torch.isfinite(scores).all()):
        raise ValueError(f"{name} contain NaN or Inf")
    return scores


def check_relevance(relevance, shape, like: torch.Tensor) -> torch.Tensor:
    """A finite, non-negative relevance tensor of ``shape``, on the dtype and device of ``like``."""
    if not isinstance(relevance, torch.Tensor):
        relevance = torch.as_tensor(np.asarray(relevance, dtype=np.float64))
    if tuple(relevance.shape) != tuple(shape):
        raise ValueError(f"relevance has shape {tuple(relevance.shape)} but scores have shape {tuple(shape)}")
    if not bool(torch.isfinite(relevance).all()):
        raise ValueError("relevance contains NaN or Inf")
    if bool((relevance < 0).any()):
        raise ValueError("relevance must be non-negative")
    return relevance.to(dtype=like.dtype, device=like.device)
