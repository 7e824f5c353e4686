"""Distribution gaps between embedding sets (DBSN Sec. 3.3, Fig. 7): how far a bank is from what it normalises.

Blocked over the rows of ``a`` (never an ``len(a) x len(b)`` matrix at once).
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["nn_gap", "centroid_distance"]


def nn_gap(a: np.ndarray, b: np.ndarray, *, block: int = 4096) -> float:
    """Nearest-neighbour distribution gap ``1 - mean_{x in a} max_{y in b} cos(x, y)``: how far the points of
    ``a`` are from the closest point of ``b`` (0 when every point of ``a`` has a copy in ``b``). Not symmetric."""
    ta, tb = torch.as_tensor(np.asarray(a)), torch.as_tensor(np.asarray(b))
    if ta.ndim != 2 or tb.ndim != 2 or ta.shape[1] != tb.shape[1] or not len(ta) or not len(tb):
        raise ValueError(f"a and b must be non-empty 2-D arrays of the same width; got {tuple(ta.shape)} and {tuple(tb.shape)}")
    tb = tb.to(ta.dtype)
    best = [(ta[i:i + block] @ tb.T).max(dim=1).values for i in range(0, len(ta), block)]
    return float(1.0 - torch.cat(best).mean())


def centroid_distance(a: np.ndarray, b: np.ndarray) -> float:
    """``||mean(a) - mean(b)||``: a first-moment proxy of the distribution gap (the EMD of the DBSN paper)."""
    return float(np.linalg.norm(np.asarray(a, np.float64).mean(0) - np.asarray(b, np.float64).mean(0)))
