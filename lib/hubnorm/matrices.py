"""Score matrices read block by block: a stored matrix (:class:`ScoreMatrix`: a numpy array, a memory map or a
torch tensor, possibly read transposed or as a seeded subset) or one computed from embeddings
(:class:`ProductScores`: ``rows @ cols.T`` block by block, never whole). The engine (:class:`hubnorm.engine.
LocalEngine`) reads its score blocks from either; :mod:`hubnorm.scores` builds tasks from them.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np
import torch

#: The inputs a score matrix may connect, and how errors name them.
INPUT_LABELS = {"queries": "test queries", "targets": "gallery (targets)", "query_bank": "query bank",
                "target_bank": "target bank"}

Pair = Tuple[str, str]


class ScoreMatrix:
    """One 2-D score matrix read block by block (a numpy array or memory map, or a torch tensor), possibly read
    transposed. ``label``: how errors name it (a file name).

    ``checked``: its scores were already verified finite (a sims folder scans each file once when it loads it),
    so blocks are not checked again; ``bound``: its largest ``|s|`` when known (from that scan), so no pass is
    spent on it. ``index``: optional sorted index arrays that select rows / columns of ``data`` (in ``data``'s own
    orientation: a seeded subset of a bank, :meth:`take`)."""

    def __init__(self, data, label: str = "score matrix", *, transposed: bool = False, checked: bool = False,
                 bound: Optional[float] = None, index=(None, None)):
        if isinstance(data, ScoreMatrix):
            if any(i is not None for i in index):
                raise ValueError("pass index= to ScoreMatrix.take, not to a copy of a ScoreMatrix")
            data, label, transposed, checked, bound, index = (data.data, data.label, data.transposed ^ transposed,
                                                              data.checked, data.bound, data.index)
        if isinstance(data, torch.Tensor):
            data = data.detach().cpu().numpy()
        if not isinstance(data, np.ndarray):
            raise TypeError(f"{label} must be a numpy array, a memory map or a torch tensor; got {type(data).__name__}")
        if data.ndim != 2:
            raise ValueError(f"{label} must be 2-D (rows x columns); got shape {data.shape}")
        if data.dtype.kind != "f":
            raise TypeError(f"{label} must hold floating-point scores; got dtype {data.dtype}")
        if 0 in data.shape:
            raise ValueError(f"{label} is empty (shape {data.shape})")
        self.data, self.label, self.transposed = data, label, bool(transposed)
        self.checked, self.bound, self.index = bool(checked), bound, tuple(index)

    @property
    def data_shape(self) -> Tuple[int, int]:
        """The shape of the stored rows x columns (after ``index``), before any transposition."""
        return tuple(len(i) if i is not None else n for i, n in zip(self.index, self.data.shape))

    @property
    def shape(self) -> Tuple[int, int]:
        r, c = self.data_shape
        return (c, r) if self.transposed else (r, c)

    @property
    def dtype(self) -> torch.dtype:
        """The torch dtype of the stored scores (float64 for anything wider than float32)."""
        return torch.float32 if self.data.dtype.itemsize <= 4 else torch.float64

    @property
    def T(self) -> "ScoreMatrix":
        return ScoreMatrix(self, transposed=True)

    @property
    def rows_contiguous(self) -> bool:
        """Whether a block of whole rows (of this matrix as read, transposed or not) is contiguous in memory or
        on disk: blocks are read along this axis (a C-order file read transposed is read by column strips)."""
        c_order = self.data.flags.c_contiguous or not self.data.flags.f_contiguous
        return c_order != self.transposed

    def take(self, rows=None, cols=None) -> "ScoreMatrix":
        """The sub-matrix of the sorted row / column indices ``rows`` / ``cols`` (of this matrix as read), read
        lazily (a memory map stays on disk)."""
        idx = list(self.index)
        for axis, sel in ((1 if self.transposed else 0, rows), (0 if self.transposed else 1, cols)):
            if sel is None:
                continue
            sel = np.asarray(sel, dtype=np.int64)
            idx[axis] = sel if idx[axis] is None else idx[axis][sel]
        return ScoreMatrix(self.data, self.label, transposed=self.transposed, checked=self.checked, bound=self.bound,
                           index=tuple(idx))

    def _stored(self, a0: int, a1: int, b0: int, b1: int) -> np.ndarray:
        """Stored rows ``a0:a1`` and columns ``b0:b1`` (after ``index``), as a numpy view or copy."""
        ia, ib = self.index
        part = self.data[a0:a1] if ia is None else self.data[ia[a0:a1]]
        return part[:, b0:b1] if ib is None else part[:, ib[b0:b1]]

    def block(self, r0: int, r1: int, c0: int, c1: int, dtype: torch.dtype) -> torch.Tensor:
        """A fresh tensor copy of rows ``r0:r1`` and columns ``c0:c1`` (reductions may modify it in place)."""
        part = self._stored(c0, c1, r0, r1).T if self.transposed else self._stored(r0, r1, c0, c1)
        out = torch.from_numpy(np.array(part, dtype=_numpy_dtype(dtype), order="C", copy=True))
        if not self.checked:
            check_finite_block(out, self.label, r0, c0)
        return out


def check_finite_block(s: torch.Tensor, label: str, r0: int = 0, c0: int = 0) -> None:
    """ValueError naming ``label`` and the cell of the first NaN / inf of the block ``s`` (whose first cell is
    ``(r0, c0)`` of the matrix)."""
    if not math.isfinite(float(s.sum())) and not bool(torch.isfinite(s).all()):  # a finite sum: all finite
        bad = (~torch.isfinite(s)).nonzero()[0]
        raise ValueError(f"{label} holds a non-finite score (NaN or inf) at row {r0 + int(bad[0])}, column "
                         f"{c0 + int(bad[1])}: a score matrix must be finite; recompute it, or drop that row")


class ProductScores(ScoreMatrix):
    """The score matrix ``rows @ cols.T`` of two embedding matrices, computed block by block in float64 when read
    (never whole): what :func:`score_matrices` gives for embeddings sources. ``.T`` swaps the factors (no
    recomputation of a transpose); ``take`` selects embedding rows."""

    def __init__(self, rows, cols, label: str = "score matrix"):
        def arr(x):
            x = x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)
            if x.ndim != 2:
                raise ValueError(f"{label}: embeddings must be 2-D (items x dimensions); got shape {x.shape}")
            return np.ascontiguousarray(x, dtype=np.float64)

        a, b = arr(rows), arr(cols)   # no copy of a float64 C-ordered array
        if a.shape[1] != b.shape[1]:
            raise ValueError(f"{label}: rows and columns have different dimensions ({a.shape[1]} vs {b.shape[1]})")
        if 0 in (a.shape[0], b.shape[0]):
            raise ValueError(f"{label} is empty (shape {(a.shape[0], b.shape[0])})")
        self.a, self.b, self.label = a, b, label
        self.data, self.transposed, self.checked, self.bound, self.index = None, False, False, None, (None, None)

    @property
    def data_shape(self) -> Tuple[int, int]:
        return (self.a.shape[0], self.b.shape[0])

    @property
    def dtype(self) -> torch.dtype:
        return torch.float64

    @property
    def rows_contiguous(self) -> bool:
        return True

    @property
    def T(self) -> "ProductScores":
        return ProductScores(self.b, self.a, self.label)

    def take(self, rows=None, cols=None) -> "ProductScores":
        return ProductScores(self.a if rows is None else self.a[np.asarray(rows)],
                             self.b if cols is None else self.b[np.asarray(cols)], self.label)

    def block(self, r0: int, r1: int, c0: int, c1: int, dtype: torch.dtype) -> torch.Tensor:
        s = torch.from_numpy(self.a[r0:r1] @ self.b[c0:c1].T)
        return s if dtype == torch.float64 else s.to(dtype)


def _numpy_dtype(dtype: torch.dtype):
    return {torch.float64: np.float64, torch.float32: np.float32}[dtype]


__all__ = ["ScoreMatrix", "ProductScores", "check_finite_block", "INPUT_LABELS", "Pair"]
