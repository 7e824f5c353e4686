"""Scores as input: fit and evaluate a method from precomputed score matrices instead of embeddings.

Video-text and text-audio retrieval work usually releases similarity matrices, not embeddings (QB-Norm publishes
pickled "training captions x test videos" and "test captions x test videos" matrices; CLIP4Clip-style code writes
a ``sim_matrix``). Every method whose fit is a function of score matrices (:mod:`hubnorm.blocks`: its
``inputs`` lists only :class:`~hubnorm.blocks.Scores`) runs here unchanged: :class:`ScoreEngine` answers the same
engine protocol as :class:`hubnorm.engine.LocalEngine`, but its score blocks are read from the given matrices
(numpy arrays, ``np.load(..., mmap_mode="r")`` memory maps, torch tensors) instead of being computed as
``rows @ cols.T``. Blocks are read along a matrix's contiguous axis, at most ``block_bytes`` at a time. The fast
path (the default) runs the reductions through the kernels of :mod:`hubnorm.kernels` (top-k, log-sum-exp over
given scores; float32 for float32 matrices where the precision rules allow) on the matrix in memory: a native
float32 / float64 array or memory map of any size as a zero-copy view (read by the kernels strip by strip from the
page cache; checked finite by the top-k kernel as it reads it, or by one pass that also takes its largest ``|s|``),
any other (a seeded subset, float16) read once per fit into a copy when it fits ``resident_bytes``; a larger one
is streamed by every reduction (``benchmarks/reports/scores_read.md``). ``plain=True`` runs every reduction by its plain
block loop (``partial`` / ``merge`` / ``finalize``), reading every block from the matrix: the reference the fast
path is tested against. Score matrices computed from embeddings (:class:`ProductScores`) are computed block by
block when read, never whole.

The matrices are named by the engine's inputs (``docs/methods.md``: ``queries``, ``targets``, ``query_bank``,
``target_bank``): ``("queries", "targets")`` is the test score matrix (test queries x gallery),
``("query_bank", "targets")`` the bank-query x gallery scores (QB-Norm's "training captions x test videos"),
``("query_bank", "target_bank")`` the bank-query x target-bank scores (DBSN's extra columns),
``("target_bank", "targets")`` the target-bank x gallery scores (DualIS's intra-modal factor). A matrix given
for ``(a, b)`` also serves ``(b, a)`` (read transposed, block by block).

What each method needs follows from its declared inputs; a method that reads embeddings (DN: bank means) or a
matrix this task lacks (DBSN: the bank-query x target-bank scores) is refused with a ``ValueError`` naming it.
With the matrices computed from embeddings, every score-only method gives the same fitted attributes and the
same normalised scores as from the embeddings (``tests/test_scores.py``: float64, 1e-12, both directions).

Use::

    task = ScoreTask({("queries", "targets"): S_test, ("query_bank", "targets"): S_bank}, positives,
                     direction="t2v")
    task.evaluate(hubnorm.InvertedSoftmax(tau=0.05))      # {"R@1": ..., "R@5": ..., ..., "MnR": ...}
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Dict, Iterator, Mapping, Optional, Tuple

import numpy as np
import torch

from .blocks import Chunk, Embeddings, Iteration, Reduction, Scores, TopKResult, concat
from .evaluation import evaluate, positive_ranks
from .hubness import hubness_stats, k_occurrence
from .kernels import DEFAULT_BLOCK_BYTES, block_rows, block_shape, iter_blocks
from .retrieval import Positives, check_direction

#: The inputs a score matrix may connect, and how errors name them.
INPUT_LABELS = {"queries": "test queries", "targets": "gallery (targets)", "query_bank": "query bank",
                "target_bank": "target bank"}

Pair = Tuple[str, str]

#: Default memory budget of one stored matrix that the fast path keeps in memory during a fit (read once).
DEFAULT_RESIDENT_BYTES = 2 * 2**30


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


class ScoreEngine:
    """The engine protocol (:class:`hubnorm.engine.LocalEngine`) over given score matrices.

    Parameters:
        matrices: ``{(rows, cols): matrix}`` with ``rows`` / ``cols`` among :data:`INPUT_LABELS`.
        dtype: the dtype score blocks are read in (float64 by default; float32 halves the memory).
        block_bytes: memory budget of one score block (None: :data:`hubnorm.kernels.DEFAULT_BLOCK_BYTES`).
        hints: ``{(rows, cols): text}`` appended to the error of a missing matrix (where to add it).
        plain: run every reduction by its plain block loop, reading each block from the matrix every time (the
            reference the fast path is tested against, ``tests/test_scores_fast.py``).
        resident_bytes: the fast path (``plain=False``, the default) runs the reductions through the kernels of
            :mod:`hubnorm.kernels` (:func:`~hubnorm.kernels.topk_scores`, :func:`~hubnorm.kernels.logsumexp_scores`;
            float32 blocks for a float32 matrix where the working-dtype rules keep the result to
            :data:`~hubnorm.kernels.PRECISION_TARGET`) on the matrix in memory. A native float32 / float64 array or
            memory map (C or Fortran order, not a subset) is a zero-copy view whatever its size (:meth:`_view`);
            another stored matrix (a subset, float16) of at most this many bytes is read once per fit into a copy
            in its own dtype, in one pass of blocks along its contiguous axis (checking it finite and taking its
            largest ``|s|`` on the way), kept until the fit ends. A larger one is streamed block by block by every
            reduction. None: :data:`DEFAULT_RESIDENT_BYTES`; 0: neither views nor copies (every reduction streams).

    ``blocks_read`` / ``largest_block``: how many blocks were read and the most cells one held (a test reads them to
    show that a matrix larger than the budget is never read in a larger block).
    """

    sweep_bytes = None

    def __init__(self, matrices: Mapping[Pair, object], *, dtype: torch.dtype = torch.float64,
                 block_bytes: Optional[int] = None, hints: Optional[Mapping[Pair, str]] = None,
                 plain: bool = False, resident_bytes: Optional[int] = None):
        if dtype not in (torch.float32, torch.float64):
            raise TypeError(f"dtype must be torch.float32 or torch.float64; got {dtype!r}")
        self.dtype, self.device, self.block_bytes = dtype, torch.device("cpu"), block_bytes
        self.plain = bool(plain)
        self.resident_bytes = DEFAULT_RESIDENT_BYTES if resident_bytes is None else int(resident_bytes)
        self._res: Dict[Pair, Optional[torch.Tensor]] = {}
        self._views: set = set()   # ids of the stored matrices kept as views (checked by _check or a kernel)
        self._checked: set = set()  # ids of the views checked finite in this fit (checked again by the next fit)
        self.hints = dict(hints or {})
        self.matrices: Dict[Pair, ScoreMatrix] = {}
        self.sizes: Dict[str, Tuple[int, str]] = {}
        for key, m in matrices.items():
            if m is None:
                continue
            if not (isinstance(key, tuple) and len(key) == 2 and all(k in INPUT_LABELS for k in key)) or key[0] == key[1]:
                raise ValueError(f"score matrix key {key!r} must be a pair of two different inputs among {sorted(INPUT_LABELS)}")
            sm = m if isinstance(m, ScoreMatrix) else ScoreMatrix(m, f"the {key[0]} x {key[1]} score matrix")
            for name, n in zip(key, sm.shape):
                seen = self.sizes.get(name)
                if seen is not None and seen[0] != n:
                    raise ValueError(f"{sm.label} has {n} {INPUT_LABELS[name]} items but {seen[1]} has {seen[0]}: "
                                     "the matrices of one task must share their rows and columns (same order)")
                self.sizes.setdefault(name, (n, sm.label))
            self.matrices[key] = sm
        self._bound: Dict[Pair, float] = {}
        self.blocks_read = 0
        self.largest_block = 0

    # ------------------------------------------------------------------ what the inputs are
    def has(self, name: str) -> bool:
        return name in self.sizes

    def size(self, name: str) -> Optional[int]:
        got = self.sizes.get(name)
        return None if got is None else got[0]

    def has_matrix(self, rows: str, cols: str) -> bool:
        return (rows, cols) in self.matrices or (cols, rows) in self.matrices

    def matrix(self, rows: str, cols: str) -> ScoreMatrix:
        """The ``rows x cols`` score matrix (a given ``cols x rows`` one is read transposed)."""
        if (rows, cols) in self.matrices:
            return self.matrices[(rows, cols)]
        if (cols, rows) in self.matrices:
            return self.matrices[(cols, rows)].T
        hint = self.hints.get((rows, cols)) or self.hints.get((cols, rows)) or ""
        raise ValueError(f"this score task has no {INPUT_LABELS[rows]} x {INPUT_LABELS[cols]} score matrix "
                         f"({rows} x {cols}){': ' + hint if hint else ''}")

    def tensor(self, names):
        names = (names,) if isinstance(names, str) else tuple(names)
        raise ValueError(f"this step needs the embeddings of {' ; '.join(names)}, but a score task holds only score "
                         "matrices: run it from embeddings (local:, cache: or synthetic: sources)")

    max_norm = tensor
    take_rows = tensor

    def to_tensor(self, value):
        return value

    def spans(self, name) -> bool:
        return True

    def shared(self, key, nbytes, budget=None):
        return None

    def score_bound(self, source: Scores) -> float:
        """The largest ``|s|`` of the score matrix ``source`` (known from a sims folder's scan, or taken while the
        matrix is read into memory, or else read once, block by block)."""
        out = 0.0
        for col in source.col_names:
            key = (source.rows, col)
            if key not in self._bound:
                stored, _ = self._stored(*key)
                if stored.bound is None:
                    self.resident(*key)                      # the fast path takes the bound in its one pass
                if stored.bound is None:
                    m = self.matrix(*key)
                    big = 0.0
                    for (r0, r1), (c0, c1) in self._tiles(m.shape[0], m.shape[1], False, m.dtype, m.rows_contiguous):
                        big = max(big, float(self._read(m, r0, r1, c0, c1, m.dtype).abs().max()))
                    stored.bound = big
                self._bound[key] = stored.bound
            out = max(out, self._bound[key])
        return out

    def base_dtype(self, source: Scores) -> torch.dtype:
        """The dtype the working-dtype rules start from (:func:`hubnorm.kernels.working_dtype`): float32 when the
        engine's dtype is, or (fast path) when every matrix of ``source`` is stored in float32, else float64."""
        if self.dtype == torch.float32:
            return torch.float32
        if self.plain:
            return self.dtype
        stored = [self._stored(source.rows, c)[0] for c in source.col_names]
        return torch.float32 if all(m.dtype == torch.float32 for m in stored) else self.dtype

    # ------------------------------------------------------------------ the fast path: one read per fit
    def _stored(self, rows: str, cols: str) -> Tuple[ScoreMatrix, bool]:
        """The given matrix behind ``rows x cols`` and whether it is read transposed."""
        if (rows, cols) in self.matrices:
            return self.matrices[(rows, cols)], False
        if (cols, rows) in self.matrices:
            return self.matrices[(cols, rows)], True
        return self.matrix(rows, cols), False  # raises, naming the matrix

    def resident(self, rows: str, cols: str, *, check: bool = True) -> Optional[torch.Tensor]:
        """The ``rows x cols`` matrix in memory (read once per fit; a view when read transposed), or None when the
        fast path does not keep it (``plain``, not viewable and larger than ``resident_bytes``, ``resident_bytes``
        0, or computed from embeddings). A view (:meth:`_view`) is checked finite first unless ``check=False`` (then the
        caller has its kernel check it, :meth:`finite_check`, or calls :meth:`_check`)."""
        if self.plain:
            return None
        key = (rows, cols) if (rows, cols) in self.matrices else (cols, rows)
        if key not in self._res:
            self._res[key] = self._load(self._stored(rows, cols)[0])
        x = self._res[key]
        if x is None:
            return None
        if check:
            self._check(self._stored(rows, cols)[0])
        return x if key == (rows, cols) else x.T

    def _load(self, m: ScoreMatrix) -> Optional[torch.Tensor]:
        """``m`` in memory: a view of its stored array when it can be one (:meth:`_view`), else read into memory in
        its stored dtype by strips of whole stored rows (contiguous on disk), checked finite and its largest
        ``|s|`` taken in the same pass; None when it is not kept."""
        if m.data is None or self.resident_bytes <= 0:
            return None
        view = self._view(m)
        if view is not None:
            return view
        item = m.data.dtype.itemsize if m.data.dtype.itemsize <= 4 else 8
        dt = m.dtype
        n_a, n_b = m.data_shape
        if n_a * n_b * torch.empty((), dtype=dt).element_size() > self.resident_bytes:
            return None
        # stored orientation, made C-ordered: a Fortran-order file is its transpose in C order
        flip = m.data.flags.f_contiguous and not m.data.flags.c_contiguous
        src = ScoreMatrix(m.data.T if flip else m.data, m.label, checked=True,
                          index=tuple(reversed(m.index)) if flip else m.index)
        if flip:
            n_a, n_b = n_b, n_a
        buf = torch.empty((n_a, n_b), dtype=dt)
        out = buf.numpy()
        big = 0.0
        visit = self.finite_check(m)
        for a0, a1 in iter_blocks(n_a, block_rows(n_b, max(4, item), self.block_bytes)):
            np.copyto(out[a0:a1], src._stored(a0, a1, 0, n_b), casting="same_kind")   # the one read of these rows
            lo, hi = visit(buf[a0:a1], a0)                        # one pass: finite (NaN / inf propagate) and |s|
            big = max(big, abs(lo), abs(hi))
        if m.bound is None:
            m.bound = big
        return buf.T if flip != m.transposed else buf

    def _view(self, m: ScoreMatrix) -> Optional[torch.Tensor]:
        """A zero-copy tensor view of ``m``'s stored array, oriented as stored under its key, when the array is
        native float32 / float64, C- or Fortran-ordered and not a subset (``index``): a memory map stays a memory
        map, so a matrix of any size is read by the kernels strip by strip along its contiguous axis from the page
        cache, never copied. It is checked finite either by the kernel that reads it first (a top-k,
        :meth:`finite_check`) or by one pass of :meth:`_check` that also takes its largest ``|s|`` (the first read
        of a cold file; the kernels' pass then finds it cached). None when the array cannot be viewed (the copy of
        :meth:`_load` or the streamed loop serve it)."""
        d = m.data
        if any(i is not None for i in m.index) or d.dtype not in (np.dtype(np.float32), np.dtype(np.float64)) \
                or not (d.flags.c_contiguous or d.flags.f_contiguous):
            return None
        t = self._quiet(d)
        self._views.add(id(m))
        return t.T if m.transposed else t

    def finite_check(self, m: ScoreMatrix):
        """``visit(strip, first_row)`` for whoever reads ``m`` by strips of its contiguous stored rows (a kernel on
        its view, :meth:`_check`, the copy of :meth:`_load`): counts the read and checks the strip finite, raising the
        ValueError that names the first non-finite cell of ``m`` as read; returns the strip's ``(min, max)``."""
        flip = m.data.flags.f_contiguous and not m.data.flags.c_contiguous   # Fortran order: strips are columns

        def visit(blk, a0):
            self.blocks_read += 1
            self.largest_block = max(self.largest_block, blk.numel())
            lo, hi = (float(v) for v in torch.aminmax(blk))
            if not (math.isfinite(lo) and math.isfinite(hi)) and not m.checked:
                if flip != m.transposed:
                    check_finite_block(blk.T, m.label, 0, a0)
                else:
                    check_finite_block(blk, m.label, a0, 0)
            return lo, hi
        return visit

    def _known_finite(self, m: ScoreMatrix) -> bool:
        """``m`` was checked finite: by whoever built it (a sims folder's scan) or in this fit."""
        return m.checked or id(m) in self._checked

    def _check(self, m: ScoreMatrix) -> None:
        """One pass over the view of ``m`` (strips along its contiguous axis) that checks it finite and takes its
        largest ``|s|``, unless both are known (a copy of :meth:`_load` checked itself while it was read). A view is
        checked once per fit: an array changed between two fits is checked again."""
        if id(m) not in self._views or (self._known_finite(m) and m.bound is not None):
            return
        t = self._quiet(m.data)
        base = t if m.data.flags.c_contiguous else t.T
        visit = self.finite_check(m)
        big = 0.0
        for a0, a1 in iter_blocks(base.shape[0], block_rows(base.shape[1], base.element_size(), self.block_bytes)):
            lo, hi = visit(base[a0:a1], a0)
            big = max(big, abs(lo), abs(hi))
        self._checked.add(id(m))
        m.bound = big

    @staticmethod
    def _quiet(d: np.ndarray) -> torch.Tensor:
        """``torch.from_numpy`` of a possibly read-only array (a memory map opened with mode "r": torch warns that
        it is not writable; nothing writes into these views)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(d)

    def release(self) -> None:
        """Drop the matrices kept in memory and what this fit checked (the end of a fit)."""
        self._res.clear()
        self._checked.clear()

    def _resident_block(self, parts, r0, r1, c0, c1, dtype, copy=True) -> torch.Tensor:
        pieces = []
        for a, b, x in parts:
            lo, hi = max(a, c0), min(b, c1)
            if lo < hi:
                pieces.append(x[r0:r1, lo - a:hi - a].to(dtype, copy=copy))
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=1)

    # ------------------------------------------------------------------ reading blocks
    def _read(self, m: ScoreMatrix, r0, r1, c0, c1, dtype) -> torch.Tensor:
        s = m.block(r0, r1, c0, c1, dtype)
        self.blocks_read += 1
        self.largest_block = max(self.largest_block, s.numel())
        return s

    def _tiles(self, n_r: int, n_c: int, whole_rows: bool, dtype: Optional[torch.dtype] = None,
               rows_contiguous: bool = True):
        item = max(4, torch.empty((), dtype=dtype or self.dtype).element_size())
        r_size, c_size = self._block_shape(n_r, n_c, item, whole_rows, rows_contiguous)
        return [(r, c) for r in iter_blocks(n_r, r_size) for c in iter_blocks(n_c, c_size)]

    def _block_shape(self, n_r: int, n_c: int, item: int, whole_rows: bool, rows_contiguous: bool):
        """Rows x columns of one block: strips of whole rows when rows are contiguous in storage (or a reduction
        needs whole rows), strips of whole columns when columns are (a C-order file read transposed), 2-D tiles
        when one line exceeds the budget."""
        budget = DEFAULT_BLOCK_BYTES if self.block_bytes is None else int(self.block_bytes)
        if whole_rows:
            return block_rows(n_c, item, self.block_bytes), n_c
        if rows_contiguous and n_c * item <= budget:
            return block_rows(n_c, item, self.block_bytes), n_c
        if not rows_contiguous and n_r * item <= budget:
            return n_r, block_rows(n_r, item, self.block_bytes)
        return block_shape(n_r, n_c, item, self.block_bytes)

    def _columns(self, source: Scores):
        """The matrices of ``source``'s column inputs, with their column offsets."""
        parts, start = [], 0
        for col in source.col_names:
            m = self.matrix(source.rows, col)
            parts.append((start, start + m.shape[1], m))
            start += m.shape[1]
        return parts, start

    def _rows_contiguous(self, source: Scores) -> bool:
        """Whether ``source``'s matrices are read fastest by strips of whole rows (else by strips of columns)."""
        parts, _ = self._columns(source)
        return not all(not m.rows_contiguous for _, _, m in parts)

    def read(self, source: Scores, r0: int, r1: int, c0: int, c1: int, dtype: torch.dtype) -> torch.Tensor:
        """Rows ``r0:r1`` and columns ``c0:c1`` of ``source`` (its column inputs concatenated)."""
        parts, _ = self._columns(source)
        pieces = []
        for a, b, m in parts:
            lo, hi = max(a, c0), min(b, c1)
            if lo < hi:
                pieces.append(self._read(m, r0, r1, lo - a, hi - a, dtype))
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=1)

    # ------------------------------------------------------------------ running reductions
    def reduce(self, red: Reduction):
        src = red.source
        if isinstance(src, Embeddings):
            self.tensor(src.name)
        red.prepare(self)
        parts, n_c = self._columns(src)
        n_r = parts[0][2].shape[0]
        n = n_r if red.axis == 0 else n_c
        if not self.plain:
            res = [self.resident(src.rows, col, check=False) for col in src.col_names]
            if all(x is not None for x in res):
                stored = [self._stored(src.rows, col)[0] for col in src.col_names]
                if len(res) == 1 and red.row_terms is None and red.col_terms is None and not red.whole_rows:
                    # an unchecked view is checked by the kernel's own pass where it can (top-k), else first
                    visit = self.finite_check(stored[0]) if id(stored[0]) in self._views and \
                        not self._known_finite(stored[0]) else None
                    out = red.reduce_scores(res[0], n, self.block_bytes, visit=visit)
                    if out is NotImplemented and visit is not None:
                        self._check(stored[0])
                        out = red.reduce_scores(res[0], n, self.block_bytes)
                    if out is not NotImplemented:
                        if visit is not None:
                            self._checked.add(id(stored[0]))
                        return self._engine_dtype(out)
                for m in stored:
                    self._check(m)
                in_mem = [(a, b, x) for (a, b, _), x in zip(parts, res)]
                rows_contig = all(x.is_contiguous() for x in res)
                copy = not getattr(red, "read_only", False)   # a partial that modifies its block gets a copy
                return self._loop(red, lambda r0, r1, c0, c1, dt: self._resident_block(in_mem, r0, r1, c0, c1, dt, copy),
                                  n_r, n_c, n, rows_contig)
        return self._loop(red, lambda r0, r1, c0, c1, dt: self.read(src, r0, r1, c0, c1, dt), n_r, n_c, n,
                          self._rows_contiguous(src))

    def _engine_dtype(self, out):
        """Top-k values found in a float32 matrix, in the engine's dtype (the same numbers)."""
        if isinstance(out, TopKResult) and out.values.dtype != self.dtype:
            return TopKResult(out.values.to(self.dtype), out.indices)
        return out

    def _loop(self, red: Reduction, read, n_r: int, n_c: int, n: int, rows_contiguous: bool):
        """The plain block loop: ``partial`` per block, ``merge`` along the reduced axis, ``finalize``."""
        dt = red.dtype or self.dtype
        rt = None if red.row_terms is None else torch.as_tensor(red.row_terms)
        ct = None if red.col_terms is None else torch.as_tensor(red.col_terms)
        item = max(4, torch.empty((), dtype=dt).element_size())
        r_size, c_size = self._block_shape(n_r, n_c, item, red.whole_rows, rows_contiguous)
        rows_b, cols_b = list(iter_blocks(n_r, r_size)), list(iter_blocks(n_c, c_size))
        kept, reduced = (cols_b, rows_b) if red.axis == 0 else (rows_b, cols_b)
        out = []
        for k0, k1 in kept:
            acc = None
            for j0, j1 in reduced:
                (r0, r1), (c0, c1) = ((j0, j1), (k0, k1)) if red.axis == 0 else ((k0, k1), (j0, j1))
                s = read(r0, r1, c0, c1, dt)
                sub = Chunk(s, None, r0, c0, None if rt is None else rt[r0:r1], None if ct is None else ct[c0:c1],
                            self.block_bytes)
                p = red.partial(s, sub)
                acc = p if acc is None else red.merge(acc, p)
            out.append(acc)
        return self._engine_dtype(red.finalize(concat(out), n))

    def iterate(self, it: Iteration):
        state = it.start(self)
        done = False
        while not done:
            state, done = it.step(self, state)
        return it.result(self, state)


# ====================================================================================================== methods
def needed_matrices(normalizer) -> Tuple[Tuple[Pair, bool], ...]:
    """The score matrices ``normalizer``'s fit reads, as ``((rows, col), required)``; ValueError naming the
    embeddings when it reads embeddings (DN)."""
    out = []
    for inp in tuple(normalizer.inputs.fit) + tuple(normalizer.inputs.score):
        if isinstance(inp, Embeddings):
            raise ValueError(f"{type(normalizer).__name__} reads the embeddings of {inp.name} ({INPUT_LABELS[inp.name]}), "
                             "not only scores: a score task (sims: source) cannot run it; run it from embeddings "
                             "(local:, cache: or synthetic: sources)")
        for col in inp.col_names:
            out.append(((inp.rows, col), inp.required))
    return tuple(out)


def fit_scores(normalizer, engine: ScoreEngine, *, query_aware: bool = False):
    """Fit ``normalizer`` on the score matrices of ``engine``; returns it (scored by :func:`normalized_blocks`).

    ``query_aware``: use the test queries as the query bank (the test score matrix serves as the bank's; label
    the result transductive)."""
    needed = needed_matrices(normalizer)
    if query_aware:  # the test score matrix serves as the bank's (a transductive fit)
        mats = {k: m for k, m in engine.matrices.items() if "query_bank" not in k}
        mats[("query_bank", "targets")] = engine.matrix("queries", "targets")
        engine = ScoreEngine(mats, dtype=engine.dtype, block_bytes=engine.block_bytes, hints=engine.hints,
                             plain=engine.plain, resident_bytes=engine.resident_bytes)
    normalizer.check_params()
    for (rows, col), required in needed:
        if required and rows != "queries" and not engine.has_matrix(rows, col):
            try:
                engine.matrix(rows, col)
            except ValueError as e:
                raise ValueError(f"{type(normalizer).__name__} needs the {INPUT_LABELS[rows]} x {INPUT_LABELS[col]} "
                                 f"score matrix ({rows} x {col}), which is missing. {e}") from None
    try:
        normalizer.fit_engine(engine)
    finally:
        engine.release()   # the matrices read into memory for this fit
    normalizer.score_engine_ = engine
    return normalizer


def normalized_blocks(normalizer, test: ScoreMatrix, *, dtype: torch.dtype = torch.float64,
                      chunk_size: Optional[int] = None, block_bytes: Optional[int] = None
                      ) -> Iterator[Tuple[int, torch.Tensor]]:
    """``(start_row, block)`` of the normalised test scores of a :func:`fit_scores`-fitted ``normalizer`` (or of the
    raw scores when ``normalizer`` is None), read from ``test`` (test queries x gallery) block by block."""
    m, n = test.shape
    item = torch.empty((), dtype=dtype).element_size()
    size = chunk_size or block_rows(n, item, block_bytes)
    for q0, q1 in iter_blocks(m, size):
        s = test.block(q0, q1, 0, n, dtype)
        yield q0, (s if normalizer is None else normalizer.normalize_scores(s, None))


# ====================================================================================================== tasks
@dataclass
class ScoreTask:
    """One retrieval direction given as score matrices.

    ``matrices``: ``{(rows, cols): matrix}`` (see the module docstring); ``("queries", "targets")`` is required.
    ``positives``: the positive targets of each test query (:class:`hubnorm.Positives`: several captions per video
    and several videos per caption allowed). ``direction``: a label such as ``"t2v"``, ``"v2t"``, ``"t2a"``,
    ``"a2t"`` (or ``"t2i"``). ``meta``: free-form labels (dataset, source). ``hints``: where a missing matrix would
    come from (the sims loader names the manifest role).
    """

    matrices: Dict[Pair, object]
    positives: Positives
    direction: str = "t2v"
    meta: Dict[str, object] = field(default_factory=dict)
    hints: Dict[Pair, str] = field(default_factory=dict)
    block_bytes: Optional[int] = None
    dtype: torch.dtype = torch.float64
    plain: bool = False
    resident_bytes: Optional[int] = None

    def __post_init__(self):
        check_direction(self.direction)
        if ("queries", "targets") not in self.matrices:
            raise ValueError("a score task needs the test score matrix (queries x targets): pass "
                             "matrices={('queries', 'targets'): S_test, ...}")
        if not isinstance(self.positives, Positives):
            raise TypeError("positives must be a hubnorm.Positives (Positives.from_labels / from_groups)")
        self.engine = ScoreEngine(self.matrices, dtype=self.dtype, block_bytes=self.block_bytes, hints=self.hints,
                                  plain=self.plain, resident_bytes=self.resident_bytes)
        m, n = self.test.shape
        if self.positives.n_queries != m or self.positives.n_targets != n:
            raise ValueError(f"positives are {self.positives.n_queries} queries x {self.positives.n_targets} targets but "
                             f"{self.test.label} is {m} x {n}: pass the positives of this matrix's rows and columns")

    @property
    def test(self) -> ScoreMatrix:
        return self.engine.matrix("queries", "targets")

    def has(self, name: str) -> bool:
        """Whether a score matrix of the input ``name`` is given (``"queries"``, ``"targets"``, ``"query_bank"``,
        ``"target_bank"``): the question :meth:`hubnorm.RetrievalTask.has` answers for embeddings."""
        if name not in ("queries", "targets", "query_bank", "target_bank"):
            raise ValueError(f"a task holds the inputs queries, targets, query_bank, target_bank; got {name!r}")
        return any(name in key for key in self.matrices)

    @property
    def n_queries(self) -> int:
        return self.test.shape[0]

    @property
    def n_targets(self) -> int:
        return self.test.shape[1]

    def size(self, name: str) -> Optional[int]:
        return self.engine.size(name)

    def fit(self, normalizer, *, query_aware: bool = False):
        """Fit ``normalizer`` from this task's matrices (``query_aware``: the test queries as the bank)."""
        return fit_scores(normalizer, self.engine, query_aware=query_aware)

    def blocks(self, normalizer=None, chunk_size: Optional[int] = None):
        return normalized_blocks(normalizer, self.test, dtype=self.dtype, chunk_size=chunk_size,
                                 block_bytes=self.block_bytes)

    def score(self, normalizer=None) -> torch.Tensor:
        """The whole normalised test score matrix (small problems; ``blocks`` otherwise)."""
        return torch.cat([s for _, s in self.blocks(normalizer)], dim=0)

    def ranks(self, normalizer=None, *, chunk_size: Optional[int] = None) -> np.ndarray:
        """0-based rank of every query's best positive (the rule of :func:`hubnorm.positive_ranks`)."""
        out = np.empty(self.n_queries, dtype=np.int64)
        for q0, s in self.blocks(normalizer, chunk_size):
            q1 = q0 + s.shape[0]
            out[q0:q1] = positive_ranks(s, self.positives.subset(np.arange(q0, q1)))
        return out

    def evaluate(self, normalizer=None, *, fit: bool = True, query_aware: bool = False,
                 ks=(1, 5, 10), certificate: bool = False) -> Dict[str, object]:
        """:func:`hubnorm.evaluate` of ``normalizer`` on this task, fitted here first unless ``fit=False`` (None: the
        raw scores): R@K, MdR, MnR, ``out["bank"]``, and with ``certificate=True`` the no-leak certificate."""
        if not isinstance(certificate, (bool, np.bool_)):   # before a fit, not after it
            raise TypeError(f"certificate must be True or False; got {certificate!r}")
        if normalizer is not None and fit:
            self.fit(normalizer, query_aware=query_aware)
        return evaluate(normalizer, self, ks=ks, certificate=certificate)

    def k_occurrence(self, normalizer=None, k: int = 10) -> np.ndarray:
        counts = None
        for _, s in self.blocks(normalizer):
            c = k_occurrence(s, k)
            counts = c if counts is None else counts + c
        return counts

    def hubness(self, normalizer=None, k: int = 10) -> Dict[str, float]:
        """Hubness of the (normalised) test scores: skewness of ``N_k`` and the rest of :func:`hubnorm.hubness`."""
        return hubness_stats(self.k_occurrence(normalizer, k), k, self.n_queries)


def matrices_from_embeddings(queries, targets, query_bank=None, target_bank=None) -> Dict[Pair, np.ndarray]:
    """The score matrices of a task given as embeddings (float64 dot products, dense): what a released similarity
    matrix holds. ``(query_bank, target_bank)`` and ``(target_bank, targets)`` only when both are given. For large
    banks use :func:`score_matrices` (computed block by block when read, never whole)."""
    return {key: m.a @ m.b.T for key, m in score_matrices(queries, targets, query_bank, target_bank).items()}


def score_matrices(queries, targets, query_bank=None, target_bank=None) -> Dict[Pair, "ProductScores"]:
    """The score matrices of a task given as embeddings, as :class:`ProductScores` (float64 dot products computed
    block by block when a reduction reads them: no bank x gallery matrix is ever held whole). The same keys as
    :func:`matrices_from_embeddings`."""
    out = {("queries", "targets"): ProductScores(queries, targets, "the test score matrix (queries x targets)")}
    t = out[("queries", "targets")].b
    if query_bank is not None:
        qb = ProductScores(query_bank, t, "the query bank x targets score matrix")
        out[("query_bank", "targets")] = qb
        if target_bank is not None:
            out[("query_bank", "target_bank")] = ProductScores(qb.a, target_bank,
                                                               "the query bank x target bank score matrix")
    if target_bank is not None:
        out[("target_bank", "targets")] = ProductScores(target_bank, t, "the target bank x targets score matrix")
    return out


def positives_from_pairs(query_idx, target_idx, n_queries: int, n_targets: int) -> Positives:
    """:class:`hubnorm.Positives` from the ``(query, target)`` index pairs of every positive."""
    q, t = np.asarray(query_idx, dtype=np.int64), np.asarray(target_idx, dtype=np.int64)
    order = np.lexsort((t, q))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(q, minlength=n_queries))])
    return Positives(indptr, t[order], n_targets)


#: how a missing matrix of a sims task would be given: the manifest role, per direction side
_SIMS_ROLES = {
    "forward": {("queries", "targets"): "test", ("query_bank", "targets"): "bank_rows",
                ("query_bank", "target_bank"): "bank_rows_x_bank_cols", ("target_bank", "targets"): "bank_cols_x_test_cols"},
    "backward": {("queries", "targets"): "test", ("query_bank", "targets"): "bank_cols",
                 ("query_bank", "target_bank"): "bank_rows_x_bank_cols", ("target_bank", "targets"): "bank_rows_x_test_rows"},
}


def sample_index(n: int, size: Optional[int], seed: int) -> Optional[np.ndarray]:
    """A seeded random subset of ``range(n)`` of at most ``size`` items, sorted (None: all of them). The rule of
    every bank subset (``bank_queries`` / ``target_bank``), from embeddings and from score matrices alike."""
    if size is None or int(size) >= n:
        return None
    if int(size) < 1:
        raise ValueError(f"a bank subset needs at least one item; got {size}")
    return np.sort(np.random.default_rng(seed).choice(n, size=int(size), replace=False))


def bank_subsets(n_rows_bank: Optional[int], n_cols_bank: Optional[int], bank_queries: Optional[int],
                 target_bank: Optional[int], seed: int):
    """The seeded bank subsets of both directions: ``{"forward": (rows bank, cols bank), "backward": (...)}`` as
    index arrays (None: all). The first direction's query bank is the row-side bank (seed), its target bank the
    column-side bank (seed + 3); the second's query bank the column-side bank (seed + 1), its target bank the
    row-side bank (seed + 2)."""
    def pick(n, size, s):
        return None if n is None else sample_index(n, size, s)

    return {"forward": (pick(n_rows_bank, bank_queries, seed), pick(n_cols_bank, target_bank, seed + 3)),
            "backward": (pick(n_rows_bank, target_bank, seed + 2), pick(n_cols_bank, bank_queries, seed + 1))}


def sims_tasks(source, *, directions=None, block_bytes: Optional[int] = None, dtype: torch.dtype = torch.float64,
               bank_queries: Optional[int] = None, target_bank: Optional[int] = None,
               seed: int = 0) -> Dict[str, "ScoreTask"]:
    """Both retrieval directions of a sims folder (``hubnorm.data.sims``: a path, ``"sims:<folder>"`` or a loaded
    :class:`~hubnorm.data.sims.SimsFolder`) as :class:`ScoreTask` objects keyed by direction (e.g. ``t2v``, ``v2t``).

    The test matrix's rows are the queries of the first direction and its columns those of the second; the banks
    follow (``bank_rows`` is the first direction's query bank, ``bank_cols`` the second's; the bank x bank matrix
    serves DBSN in both, read transposed for the second). ``bank_queries`` / ``target_bank``: at most this many
    query-bank / target-bank items per direction, a seeded subset (:func:`bank_subsets`; the files stay on disk)."""
    from .data.sims import ROLES, SimsFolder, load_sims

    if isinstance(source, str) and source.startswith("sims:"):
        source = source[len("sims:"):]
    sims = source if isinstance(source, SimsFolder) else load_sims(source)
    fwd, bwd = sims.directions
    wanted = tuple(directions or (fwd, bwd))
    unknown = [d for d in wanted if d not in (fwd, bwd)]
    if unknown:
        raise ValueError(f"{sims.folder} holds the directions {fwd} and {bwd} (modalities {list(sims.modalities)}); "
                         f"got {unknown}")
    mats = {role: ScoreMatrix(arr, str(sims.files[role]), checked=role in sims.bounds, bound=sims.bounds.get(role))
            for role, arr in sims.matrices.items()}
    bank_n = {}
    for role, m in mats.items():
        for side, n in zip(ROLES[role], m.shape):
            bank_n.setdefault(side, n)
    subsets = bank_subsets(bank_n.get("bank R"), bank_n.get("bank C"), bank_queries, target_bank, seed)
    rows, cols = sims.positive_pairs
    n_r, n_c = mats["test"].shape
    meta = {"dataset": sims.name, "model": sims.manifest.get("model"), "modalities": sims.modalities,
            "source": "synthetic" if sims.synthetic else "real", "folder": str(sims.folder),
            "flags": list(sims.flags)}
    out = {}
    for d in wanted:
        side = "forward" if d == fwd else "backward"
        sel = dict(zip(("bank R", "bank C"), subsets[side]))
        roles = _SIMS_ROLES[side]
        given = {}
        for key, role in roles.items():
            if role in mats:
                r_side, c_side = ROLES[role]
                m = mats[role]
                if sel.get(r_side) is not None or sel.get(c_side) is not None:
                    m = m.take(sel.get(r_side), sel.get(c_side))
                transposed = side == "backward" and role in ("test", "bank_rows_x_bank_cols")
                given[key] = m.T if transposed else m
        hints = {key: f"add the role {role!r} to the manifest of {sims.folder}" for key, role in roles.items()}
        pos = positives_from_pairs(rows, cols, n_r, n_c) if side == "forward" else positives_from_pairs(cols, rows, n_c, n_r)
        out[d] = ScoreTask(given, pos, direction=d, meta=dict(meta, direction=d), hints=hints,
                           block_bytes=block_bytes, dtype=dtype)
    return out


__all__ = ["sims_tasks", "sample_index", "bank_subsets", "positives_from_pairs", "ScoreMatrix", "ScoreEngine", "ScoreTask", "fit_scores", "normalized_blocks", "needed_matrices",
           "matrices_from_embeddings", "score_matrices", "ProductScores", "INPUT_LABELS", "DEFAULT_RESIDENT_BYTES"]
