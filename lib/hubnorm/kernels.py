"""Fast kernels behind the methods: blocked similarity reductions that never hold a whole score matrix.

Each normalizer module (``hubnorm.normalizers.*``) states its equation and shows its plain computation; the
functions here are the optimised implementations they call, each proven equal to the plain form by a test:

* :func:`topk_similarity` -- the k largest ``a_i . b_j`` per row of ``a`` (NNN bias, CSLS radius, DIS
  activation sets). Plain form: ``(a @ b.T).topk(k, dim=1)``. Two exact kernels behind one seam,
  :func:`topk_backend` (chosen by dtype and device): ``"faiss"`` -- faiss's exhaustive flat search
  (``knn_inner_product``: BLAS blocks and a heap / reservoir per row), the default for float32 on the CPU when
  faiss is installed (measured faster there: ``benchmarks/reports/topk.md``); ``"numpy"`` -- BLAS tiles
  (``numpy.matmul``) and a running-threshold filter (float32 / float64 on the CPU, no faiss needed);
  ``"torch"`` -- the blocked, threshold-filtered torch kernel (float64, 16-bit inputs, any torch device);
  ``"faiss-gpu"`` -- faiss's GPU brute-force search on CUDA tensors (asked for explicitly until a GPU run
  measures it). Same values (the GEMM's rounding aside), indices up to ties. Tests: ``tests/test_fast_paths.py`` (every backend = dense top-k, exact on
  integer-valued inputs), ``tests/test_hardening.py`` (plain NNN, ties), ``tests/test_gpu.py`` (CUDA).
* :func:`log_mean_exp_similarity` -- ``log mean_j exp(scale * a_i . b_j)`` per row of ``a`` (IS, DIS, DualIS),
  centred so that it stays O(1) at any temperature, in float64 when float32 would lose the result.
  Plain form: ``torch.logsumexp(scale * a @ b.T, dim=1) - log(len(b))``. Tests: ``tests/test_oracles.py``,
  ``tests/test_hardening.py``.
* :func:`logsumexp_similarity` -- the uncentred streamed log-sum-exp (with a shared GEMM cache for the sweeps).
  Tests: ``tests/test_fast_paths.py`` (dense float64 reference, -inf shifts, cache bit-identity).
* :func:`topk_scores`, :func:`logsumexp_scores` -- the same reductions over a *given* score matrix (released
  similarity matrices, :mod:`hubnorm.scores`): streamed blocks of the matrix in memory, float32 where the
  precision rules allow. Plain forms: ``s.topk(k, dim)``, ``torch.logsumexp(scale * s, dim)``. Tests:
  ``tests/test_scores_fast.py`` (equal to the plain block loop of :class:`hubnorm.engine.LocalEngine` over stored
  matrices).
* :func:`working_dtype`, :func:`log_mean_exp_dtype` -- the precision rules (float32 or float64 working dtype).
* :func:`pack_rows`, :func:`block_rows`, :func:`block_shape`, :func:`iter_blocks`, :func:`topk_partition`: block
  bookkeeping shared with :mod:`hubnorm.blocks`, ``hubnorm.index`` and the benchmarks.

The reductions of :mod:`hubnorm.blocks` call these kernels (``reduce_chunk``); the engines never call them by a
method's name. The in-process engine (:class:`hubnorm.engine.LocalEngine`) picks the top-k backend once per fit
with :func:`topk_backend`; its ``plain=True`` mode runs none of these kernels (the tests' reference).

All functions take torch tensors on one device and return tensors on that device. The block shape is derived
from a byte budget (``block_bytes``), so memory stays bounded however large the bank grows.
"""

from __future__ import annotations

import importlib
import math
import numbers
from typing import Callable, Iterator, Optional, Tuple

import numpy as np
import torch

#: Default size of one similarity block (rows x cols x itemsize), in bytes.
DEFAULT_BLOCK_BYTES = 128 * 2**20



def block_rows(n_cols: int, itemsize: int = 4, block_bytes: Optional[int] = None, minimum: int = 1) -> int:
    """How many rows of an ``(rows, n_cols)`` block fit in ``block_bytes``."""
    budget = DEFAULT_BLOCK_BYTES if block_bytes is None else int(block_bytes)
    return max(minimum, budget // max(1, n_cols * itemsize))


def block_shape(n_a: int, n_b: int, itemsize: int, block_bytes: Optional[int]) -> Tuple[int, int]:
    """Rows of ``a`` and rows of ``b`` per block so that one ``a_blk @ b_blk.T`` fits the budget."""
    budget = DEFAULT_BLOCK_BYTES if block_bytes is None else int(block_bytes)
    elems = max(1, budget // itemsize)
    rb = min(n_b, max(1, elems // max(1, min(n_a, 4096))))
    ra = min(n_a, max(1, elems // rb))
    return ra, rb


def iter_blocks(n: int, size: int) -> Iterator[Tuple[int, int]]:
    for start in range(0, n, size):
        yield start, min(n, start + size)


#: Most columns per max-pooled group in the threshold filter of ``topk_similarity`` (fewer when the expected
#: share of survivors is high: about one group in ten should pass).
TOPK_GROUP = 32

#: ``topk_similarity`` filters the bulk of the bank with an estimated threshold: the ``q``-th largest value seen
#: in the first (warm-up) blocks with ``q = MARGIN * k * seen / n_b`` (about ``MARGIN * k`` survivors per row in
#: the whole bank) once ``q >= _TOPK_MIN_Q`` (the estimate is then > 5 sigma safe); a row for which fewer than ``k``
#: values reach it is detected and its block of rows is recomputed exactly.
_TOPK_MARGIN = 3
_TOPK_MIN_Q = 64


def topk_partition(n_a: int, n_b: int, itemsize: int, block_bytes: Optional[int]):
    """Row blocks of ``a`` (balanced) and column blocks of ``b`` for :func:`topk_similarity`.

    The partition never depends on ``k``: the similarity values (and so the selected values) are the same
    bits for every ``k``, which the one-pass sweeps (``hubnorm.sweeps``) rely on.
    """
    ra, rb = block_shape(n_a, n_b, itemsize, block_bytes)
    n_ablk = -(-n_a // ra)
    ra = -(-n_a // n_ablk)  # balanced row blocks (no thin last block: a thin GEMM is slow)
    return list(iter_blocks(n_a, ra)), list(iter_blocks(n_b, rb)), rb


def _merge_topk(run_v, run_i, v, i, k):
    if run_v is None:
        mv, mi = v, i
    else:
        mv, mi = torch.cat([run_v, v], dim=1), torch.cat([run_i, i], dim=1)
    if mv.shape[1] <= k:
        return mv, mi
    top, p = mv.topk(k, dim=1, sorted=False)
    return top, mi.gather(1, p)


def pack_rows(rows, cols, vals, ra, fill):
    """Candidates ``(row, col, val)`` -> padded ``(ra, max_count)`` value and column matrices.

    Row ``r`` of the result holds that row's candidates (in input order), padded with ``fill`` and column 0;
    used to merge threshold-filter survivors into a running top-k (here and in ``hubnorm.index``).
    """
    order = torch.argsort(rows, stable=True)
    rows, cols, vals = rows[order], cols[order], vals[order]
    cnt = torch.bincount(rows, minlength=ra)
    width = int(cnt.max()) if rows.numel() else 0
    pos = torch.arange(rows.numel(), device=rows.device) - (torch.cumsum(cnt, 0) - cnt)[rows]
    v = torch.full((ra, width), fill, dtype=vals.dtype, device=vals.device)
    i = torch.zeros((ra, width), dtype=torch.long, device=vals.device)
    v[rows, pos] = vals
    i[rows, pos] = cols
    return v, i


#: The exact top-k kernels of :func:`topk_similarity` (see :func:`topk_backend`).
TOPK_BACKENDS = ("torch", "faiss", "numpy", "faiss-gpu")

_FAISS = None


def _faiss():
    """The faiss module, or None when it is not installed.

    faiss is an optional extra (``pip install "hubnorm[faiss]"``), so this core module never imports it statically:
    it is loaded here on the first float32 CPU top-k (never by ``import hubnorm``), and without it the torch kernel
    runs (``tests/test_packaging.py`` checks that core modules import base packages only)."""
    global _FAISS
    if _FAISS is None:
        try:
            _FAISS = importlib.import_module("faiss")
        except ImportError:
            _FAISS = False
    return _FAISS or None


def counts_namespace(device):
    """The array library of per-row counts over score blocks (a named seam): numpy on the CPU, torch on a torch
    device. Counting the entries of a block that pass a per-row test is a compare and a reduction per entry, where
    numpy's loops beat torch's boolean sums on the CPU (`benchmarks/reports/ranks.md` and `sweeps.md` time both
    sides in the same rounds). Used by :func:`hubnorm.positive_ranks` and :func:`hubnorm.sweeps.offset_sweep_ranks`,
    which import it: each module looks it up under its own name, so a test or a benchmark forces one side by
    patching ``hubnorm.evaluation.counts_namespace`` or ``hubnorm.sweeps.counts_namespace``
    (``tests/test_evaluation.py`` and ``tests/test_sweep_ranks.py`` prove both sides equal)."""
    return np if torch.device(device).type == "cpu" else torch


def topk_backend(dtype: torch.dtype, device) -> str:
    """The top-k kernel for inputs of ``dtype`` on ``device``: the one place where it is chosen.

    ``"faiss"`` for float32 on the CPU when faiss is installed (its flat search, measured faster than the torch
    kernel there: ``benchmarks/reports/topk.md``), else ``"torch"``: float64 (faiss computes in float32 only),
    16-bit inputs and torch devices. ``"faiss-gpu"`` is never chosen by default: no GPU run has measured it
    against the torch kernel yet (``benchmarks/bench_gpu.py`` does); ask for it with ``backend="faiss-gpu"``.
    """
    if torch.device(device).type == "cpu" and dtype == torch.float32 and _faiss() is not None:
        return "faiss"
    return "torch"


def topk_similarity(
    a: torch.Tensor, b: torch.Tensor, k: int, *, block_bytes: Optional[int] = None, backend: Optional[str] = None
) -> Tuple[torch.Tensor, torch.Tensor]:
    """For every row of ``a``, the ``k`` largest values of ``a_i . b_j`` over rows ``j`` of ``b``.

    Returns ``(values, indices)``, both ``(len(a), k)``, values sorted in decreasing order. The full
    ``len(a) x len(b)`` matrix is never formed. ``backend``: ``"torch"``, ``"faiss"``, ``"numpy"`` or ``"faiss-gpu"`` (None:
    :func:`topk_backend` of the inputs' dtype and device); every backend is exact: the values are those of the
    plain ``(a @ b.T).topk(k)`` up to the GEMM's own rounding (equal on inputs whose products are exact), and
    ties between equal values may keep any of the tied indices (callers that need indices under exact ties use
    the values only (NNN, CSLS) or a union of top-k sets (DIS)). Within one backend the block partition never
    depends on ``k``, so the values are the same bits for every ``k`` (the one-pass sweeps rely on it).

    ``"faiss"`` (float32, CPU): faiss's exhaustive inner-product search (BLAS blocks of 4096 x 1024 scores, a
    heap or a reservoir per row); ``a`` is passed in chunks of rows when ``block_bytes`` is smaller than faiss's
    block, so memory stays within the budget; faiss runs on ``torch.get_num_threads()`` threads.

    ``"torch"``: ``b`` is streamed in blocks and a running top-k is merged. Performance (the GEMM is the physical
    limit; the rest is kept to about one cheap read of each block): each block's GEMM writes into one reused
    buffer. Warm-up blocks are merged by a plain top-k until enough of the bank is seen to estimate, per row, a
    threshold that about ``4 k`` values of the whole bank reach. The bulk is then max-pooled over groups of
    :data:`TOPK_GROUP` columns (one read pass) and only the groups whose maximum reaches the threshold are
    gathered; the survivors are merged once at the end. Every row is checked (at least ``k`` values reached its
    threshold, else its row block is recomputed by plain merging), so the result is exact.

    ``"numpy"`` (float32 or float64, CPU): tiles of at most 1024 x 2048 scores (:func:`numpy_topk_partition`,
    smaller under ``block_bytes``), each one BLAS GEMM (``numpy.matmul``, numpy's BLAS and its threads) into one
    reused buffer, then one vectorised compare per tile against each row's current ``k``-th best value; the few
    entries above it are buffered per row and merged by ``argpartition`` when a buffer fills (the threshold then
    rises). The values are the tile's scores themselves: bit-equal to the plain top-k of the same BLAS product;
    against another GEMM (torch's, a float64 reference) they differ by that GEMM's rounding only (float32: a few
    ulps, ``<= d * 2**-24 * |a_i| |b_j|``; tested on several tile shapes in ``tests/test_fast_paths.py``).

    ``"faiss-gpu"`` (CUDA tensors, float32 or float16; ``k <= 2048``): faiss's GPU brute-force search
    (``faiss.knn_gpu``), needs a GPU build of faiss.
    """
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 0:
        raise ValueError(f"k must be a non-negative integer; got {k!r}")
    k = int(k)
    if k > b.shape[0]:
        raise ValueError(f"k={k} is larger than the bank ({b.shape[0]} rows): use k <= {b.shape[0]}")
    if backend is None:
        backend = topk_backend(a.dtype, a.device)
    elif backend not in TOPK_BACKENDS:
        raise ValueError(f"backend must be one of {list(TOPK_BACKENDS)} or None; got {backend!r}")
    if k == 0:   # nothing to find: the same empty result from every backend, whatever the bank's size
        return (torch.empty((a.shape[0], 0), dtype=a.dtype, device=a.device),
                torch.empty((a.shape[0], 0), dtype=torch.long, device=a.device))
    if backend == "faiss":
        return _topk_faiss(a, b, k, block_bytes)
    if backend == "numpy":
        return _topk_numpy(a, b, k, block_bytes)
    if backend == "faiss-gpu":  # pragma: no cover - needs a GPU build of faiss
        return _topk_faiss_gpu(a, b, k)
    n_a, n_b = a.shape[0], b.shape[0]
    out_v = torch.empty((n_a, k), dtype=a.dtype, device=a.device)
    out_i = torch.empty((n_a, k), dtype=torch.long, device=a.device)
    if n_a == 0:
        return out_v, out_i
    a_blocks, b_blocks, rb = topk_partition(n_a, n_b, a.element_size(), block_bytes)
    ra_max = max(a1 - a0 for a0, a1 in a_blocks)
    buf = torch.empty(ra_max * rb, dtype=a.dtype, device=a.device)
    for a0, a1 in a_blocks:
        v, i = _topk_rows(a[a0:a1], b, k, b_blocks, buf, filtered=True)
        if v is None:  # a row's estimated threshold was too high: redo this row block by plain merging
            v, i = _topk_rows(a[a0:a1], b, k, b_blocks, buf, filtered=False)
        out_v[a0:a1], out_i[a0:a1] = v, i
    return out_v, out_i


#: faiss's exhaustive search scores one block of (up to 4096 rows of ``a``) x (1024 rows of ``b``) at a time
#: (``faiss.cvar.distance_compute_blas_database_bs``).
_FAISS_DB_BLOCK = 1024


def _topk_faiss(a: torch.Tensor, b: torch.Tensor, k: int, block_bytes: Optional[int]):
    """:func:`topk_similarity` by faiss's flat search (float32 CPU tensors; no copy of ``a`` or ``b`` when they are
    contiguous). ``a`` goes in chunks of rows so that faiss's score block stays within ``block_bytes``."""
    faiss = _faiss()
    if faiss is None:
        raise ValueError("backend='faiss' needs faiss: pip install faiss-cpu (or use backend='torch')")
    if a.device.type != "cpu" or b.device.type != "cpu" or a.dtype != torch.float32 or b.dtype != torch.float32:
        raise ValueError(f"backend='faiss' takes float32 tensors on the CPU; got {a.dtype} on {a.device} and "
                         f"{b.dtype} on {b.device} (use backend='torch')")
    n_a, n_b, d = a.shape[0], b.shape[0], a.shape[1]
    out_v = torch.empty((n_a, k), dtype=torch.float32)
    out_i = torch.empty((n_a, k), dtype=torch.long)
    if n_a == 0:
        return out_v, out_i
    an, bn = a.detach().contiguous().numpy(), b.detach().contiguous().numpy()
    vn, inn = out_v.numpy(), out_i.numpy()
    budget = DEFAULT_BLOCK_BYTES if block_bytes is None else int(block_bytes)
    rows = max(1, budget // (4 * min(n_b, _FAISS_DB_BLOCK)))
    threads = torch.get_num_threads()
    if faiss.omp_get_max_threads() != threads:  # follow torch's thread setting
        faiss.omp_set_num_threads(threads)
    ptr = faiss.swig_ptr
    for a0 in range(0, n_a, rows):
        a1 = min(n_a, a0 + rows)
        faiss.knn_inner_product(ptr(an[a0:a1]), ptr(bn), d, a1 - a0, n_b, k, ptr(vn[a0:a1]), ptr(inn[a0:a1]))
    return out_v, out_i


_GPU_RESOURCES = {}


def _topk_faiss_gpu(a: torch.Tensor, b: torch.Tensor, k: int):  # pragma: no cover - needs a GPU build of faiss
    """:func:`topk_similarity` by ``faiss.knn_gpu`` on CUDA tensors (float32 or float16), ``k <= 2048``."""
    faiss = _faiss()
    if faiss is None or not hasattr(faiss, "knn_gpu") or faiss.get_num_gpus() == 0:
        raise ValueError("backend='faiss-gpu' needs a GPU build of faiss that sees a GPU (pip install faiss-gpu); "
                         "use backend='torch'")
    if a.device.type != "cuda" or b.device != a.device:
        raise ValueError(f"backend='faiss-gpu' takes CUDA tensors on one device; got {a.device} and {b.device}")
    if k > 2048:
        raise ValueError(f"backend='faiss-gpu' searches at most k=2048 neighbours; got k={k} (use backend='torch')")
    importlib.import_module("faiss.contrib.torch_utils")  # lets faiss.knn_gpu take torch tensors
    dev = a.device.index if a.device.index is not None else torch.cuda.current_device()
    res = _GPU_RESOURCES.get(dev)
    if res is None:
        res = _GPU_RESOURCES[dev] = faiss.StandardGpuResources()
    v, i = faiss.knn_gpu(res, a.contiguous(), b.contiguous(), k, metric=faiss.METRIC_INNER_PRODUCT, device=dev)
    return v.to(a.dtype), i.long()


#: Score tile of the ``"numpy"`` top-k kernel: rows of ``a`` x rows of ``b`` per GEMM (8 MB of float32 scores, so
#: the tile is still in the last-level cache when the threshold filter reads it right after the GEMM wrote it).
NUMPY_TILE_ROWS, NUMPY_TILE_COLS = 1024, 2048


def numpy_topk_partition(n_a: int, n_b: int, itemsize: int, block_bytes: Optional[int]):
    """Row blocks of ``a`` (balanced) and column blocks of ``b`` of the ``"numpy"`` top-k kernel: tiles of at most
    :data:`NUMPY_TILE_ROWS` x :data:`NUMPY_TILE_COLS` scores, fewer when ``block_bytes`` is smaller. Never depends on
    ``k`` (the selected values are the same bits for every ``k``)."""
    budget = NUMPY_TILE_ROWS * NUMPY_TILE_COLS * itemsize
    budget = budget if block_bytes is None else min(budget, int(block_bytes))
    cols = max(1, min(n_b, NUMPY_TILE_COLS, budget // itemsize))
    rows = max(1, min(n_a, NUMPY_TILE_ROWS, budget // (itemsize * cols)))
    n_ablk = -(-n_a // rows)
    rows = -(-n_a // n_ablk)  # balanced row blocks (no thin last block: a thin GEMM is slow)
    return list(iter_blocks(n_a, rows)), list(iter_blocks(n_b, cols))


def _topk_numpy(a: torch.Tensor, b: torch.Tensor, k: int, block_bytes: Optional[int]):
    """:func:`topk_similarity` by BLAS tiles and a running-threshold filter (float32 / float64 CPU tensors).

    For each block of rows of ``a``: every tile ``a_blk @ b_blk.T`` is one BLAS GEMM (numpy's ``matmul``) into one
    reused buffer; one vectorised compare against the row's current ``k``-th best value finds the few entries that
    can still enter its top-``k``; they are appended to a per-row candidate buffer, and when a row's buffer is full
    the buffer is merged (``argpartition``: the ``k`` best of each row stay, the threshold rises). Nothing is sorted
    per element: after the first tiles the threshold is high and the compare pass is the only per-score work.
    """
    if a.device.type != "cpu" or b.device.type != "cpu" or a.dtype not in (torch.float32, torch.float64) \
            or b.dtype != a.dtype:
        raise ValueError(f"backend='numpy' takes float32 or float64 tensors of one dtype on the CPU; got {a.dtype} on "
                         f"{a.device} and {b.dtype} on {b.device} (use backend='torch')")
    n_a, n_b = a.shape[0], b.shape[0]
    an, bn = a.detach().contiguous().numpy(), b.detach().contiguous().numpy()
    out_v = np.empty((n_a, k), dtype=an.dtype)
    out_i = np.empty((n_a, k), dtype=np.int64)
    if n_a and k:
        a_blocks, b_blocks = numpy_topk_partition(n_a, n_b, an.itemsize, block_bytes)
        ra = max(a1 - a0 for a0, a1 in a_blocks)
        tile_cols = max(b1 - b0 for b0, b1 in b_blocks)
        tile = np.empty(ra * tile_cols, dtype=an.dtype)
        mask = np.empty(ra * tile_cols, dtype=np.bool_)
        for a0, a1 in a_blocks:
            out_v[a0:a1], out_i[a0:a1] = _topk_numpy_rows(an[a0:a1], bn, k, b_blocks, tile, mask)
    return torch.from_numpy(out_v), torch.from_numpy(out_i)


class _Candidates:
    """Per row: the ``k`` best values seen (columns ``[0, k)``) and a buffer of newer candidates (``[k, k + room)``)."""

    def __init__(self, ra: int, k: int, room: int, dtype):
        self.k, self.room, self.width = k, room, k + room
        self.vals = np.full((ra, self.width), -np.inf, dtype=dtype)
        self.cols = np.zeros((ra, self.width), dtype=np.int64)
        self.fill = np.zeros(ra, dtype=np.int64)  # candidates in each row's buffer

    def merge(self) -> np.ndarray:
        """Keep the ``k`` best of each row, empty the buffers; returns the new thresholds (``k``-th best, ``(ra, 1)``)."""
        k, w = self.k, self.width
        p = np.argpartition(self.vals, w - k, axis=1)[:, w - k:]
        v, c = np.take_along_axis(self.vals, p, 1), np.take_along_axis(self.cols, p, 1)
        self.vals[:, :k], self.cols[:, :k] = v, c
        self.vals[:, k:] = -np.inf
        self.fill[:] = 0
        return v.min(axis=1, keepdims=True)

    def merge_tile(self, s: np.ndarray, b0: int) -> np.ndarray:
        """Merge a whole score tile (the first tiles, when their survivors do not fit a buffer)."""
        k = self.k
        v = np.concatenate([self.vals[:, :k], s], axis=1)
        c = np.concatenate([self.cols[:, :k], np.broadcast_to(np.arange(b0, b0 + s.shape[1]), s.shape)], axis=1)
        p = np.argpartition(v, v.shape[1] - k, axis=1)[:, v.shape[1] - k:]
        self.vals[:, :k], self.cols[:, :k] = np.take_along_axis(v, p, 1), np.take_along_axis(c, p, 1)
        return self.vals[:, :k].min(axis=1, keepdims=True)

    def append(self, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, counts: np.ndarray):
        """Append candidates given in row-major order (``rows`` non-decreasing; ``counts`` per row)."""
        first = np.cumsum(counts) - counts  # index of each row's first candidate in ``rows``
        pos = rows * self.width + self.k + self.fill[rows] + (np.arange(rows.size) - first[rows])
        self.vals.reshape(-1).put(pos, vals)
        self.cols.reshape(-1).put(pos, cols)
        self.fill += counts


def _topk_numpy_rows(x: np.ndarray, bn: np.ndarray, k: int, b_blocks, tile: np.ndarray, mask: np.ndarray):
    ra = x.shape[0]
    cand = _Candidates(ra, k, 2 * k, x.dtype)
    thr = np.full((ra, 1), -np.inf, dtype=x.dtype)  # each row's k-th best value so far (-inf until k are seen)
    for b0, b1 in b_blocks:
        w = b1 - b0
        s = np.matmul(x, bn[b0:b1].T, out=tile[: ra * w].reshape(ra, w))
        # only values above the k-th best so far can change the top-k values (an equal value cannot)
        flat = np.flatnonzero(np.greater(s, thr, out=mask[: ra * w].reshape(ra, w)))
        if not flat.size:
            continue
        rows, cols = np.divmod(flat, w)
        counts = np.bincount(rows, minlength=ra)
        if int((cand.fill + counts).max()) > cand.room:
            thr = cand.merge()
            if int(counts.max()) > cand.room:  # the first tiles: more survivors than a buffer holds
                thr = cand.merge_tile(s, b0)
                continue
            keep = s.reshape(-1).take(flat) > thr[rows, 0]
            flat, rows, cols = flat[keep], rows[keep], cols[keep]
            counts = np.bincount(rows, minlength=ra)
        cand.append(rows, cols + b0, s.reshape(-1).take(flat), counts)
    cand.merge()
    order = np.argsort(-cand.vals[:, :k], axis=1, kind="stable")
    return np.take_along_axis(cand.vals[:, :k], order, 1), np.take_along_axis(cand.cols[:, :k], order, 1)


def _topk_rows(a_blk, b, k, b_blocks, buf, filtered):
    ra, n_b = a_blk.shape[0], b.shape[0]
    density = _TOPK_MARGIN * k / n_b  # expected share of values that reach the threshold
    G = 1
    while G < TOPK_GROUP and 2 * G * density <= 0.1:
        G *= 2
    dev = a_blk.device
    run_v = run_i = thr = None
    cand = []  # survivors of the threshold filter: (rows, cols, vals)
    seen = 0
    for b0, b1 in b_blocks:
        w = b1 - b0
        s = torch.mm(a_blk, b[b0:b1].T, out=buf[: ra * w].view(ra, w))
        if thr is None:  # warm-up: plain merge
            top, idx = s.topk(min(k, w), dim=1, sorted=False)
            run_v, run_i = _merge_topk(run_v, run_i, top, idx + b0, k)
            seen += w
            if filtered and seen >= k and seen < n_b:
                q = min(k, -(-_TOPK_MARGIN * k * seen // n_b))
                if q >= min(k, _TOPK_MIN_Q):
                    thr = run_v.topk(q, dim=1).values[:, -1].contiguous() if q < k else run_v.amin(dim=1)
            continue
        wg = w // G
        if wg and G == 1:
            rows, cols = (s >= thr[:, None]).nonzero(as_tuple=True)
            if rows.numel():
                cand.append((rows, cols + b0, s[rows, cols]))
        elif wg:
            gmax = torch.nn.functional.max_pool1d(s[:, None, : wg * G], G, G).view(ra, wg)
            rows, grp = (gmax >= thr[:, None]).nonzero(as_tuple=True)
            if rows.numel():
                vals = s[:, : wg * G].view(ra, wg, G)[rows, grp]
                keep = vals >= thr[rows, None]
                cols = (grp * G + b0)[:, None] + torch.arange(G, device=dev)[None, :]
                cand.append((rows[:, None].expand(-1, G)[keep], cols[keep], vals[keep]))
        if wg * G < w:
            tail = s[:, wg * G:]
            r, c = (tail >= thr[:, None]).nonzero(as_tuple=True)
            if r.numel():
                cand.append((r, c + b0 + wg * G, tail[r, c]))
    if thr is not None:
        # exactness check: at least k values of every row reached its threshold
        n_ge = (run_v >= thr[:, None]).sum(dim=1)
        if cand:
            rows = torch.cat([c[0] for c in cand])
            n_ge += torch.bincount(rows, minlength=ra)
            cv, ci = pack_rows(rows, torch.cat([c[1] for c in cand]), torch.cat([c[2] for c in cand]), ra,
                                -torch.inf)
            run_v, run_i = _merge_topk(run_v, run_i, cv, ci, k)
        if bool((n_ge < k).any()):
            return None, None
    run_v, p = run_v.sort(dim=1, descending=True)
    return run_v, run_i.gather(1, p)


def logsumexp_similarity(
    a: torch.Tensor,
    b: torch.Tensor,
    scale: float,
    *,
    b_shift: Optional[torch.Tensor] = None,
    block_bytes: Optional[int] = None,
    dtype: Optional[torch.dtype] = None,
    shared_blocks: Optional[dict] = None,
    backend: str = "torch",
) -> torch.Tensor:
    """``out_i = logsumexp_j(scale * a_i . b_j + b_shift_j)`` for every row of ``a``, streamed over ``b``.

    ``b_shift`` (length ``len(b)``) is an optional additive term per column, already in log units.
    Stable for any ``scale`` (it never exponentiates a score without subtracting the running maximum), but its
    magnitude ``~ log(len(b))`` limits the absolute precision: see :func:`log_mean_exp_similarity`.
    ``dtype``: compute every block in this dtype (each block of ``a`` and ``b`` is cast; default the input's).
    ``shared_blocks``: a dict that keeps the raw similarity blocks across calls (the temperature sweeps of
    :func:`hubnorm.grid_search`), so that
    several scales reuse one GEMM pass with bit-identical results.
    ``backend``: ``"torch"`` (GEMM blocks into one reused buffer, each block's log-sum-exp by
    :func:`block_logsumexp`: torch's fused ``log_softmax`` kernel per cache-sized slab on the CPU, one slab per
    block on a GPU; rows whose result is +inf or NaN, from a +inf or NaN score, are found once per call and
    recomputed with ``torch.logsumexp``'s handling of infinities; speed against the bare GEMM:
    ``benchmarks/reports/topk.md``) or ``"numpy"`` (float32 / float64 CPU
    tensors, no ``shared_blocks``: the tiles of the ``"numpy"`` top-k kernel, one BLAS GEMM each into a reused
    buffer, then one in-place pass: scale, running row maximum, ``exp`` and row sums; same value up to rounding).
    """
    if backend not in ("torch", "numpy"):
        raise ValueError(f"backend must be 'torch' or 'numpy'; got {backend!r}")
    if backend == "numpy":
        return _logsumexp_numpy(a, b, scale, b_shift, block_bytes, dtype, shared_blocks)
    out = _logsumexp_blocks(a, b, scale, b_shift, block_bytes, dtype, shared_blocks, check=False)
    bad = torch.isnan(out) | (out == math.inf)
    if bool(bad.any()):   # a +inf or NaN score: those rows again, each block with block_logsumexp's own fallback
        rows = bad.nonzero()[:, 0]
        out[rows] = _logsumexp_blocks(a[rows], b, scale, b_shift, block_bytes, dtype, None, check=True)
    return out


def _logsumexp_blocks(a, b, scale, b_shift, block_bytes, dtype, shared_blocks, check):
    """The loop of :func:`logsumexp_similarity` (``backend="torch"``): GEMM blocks, each block's log-sum-exp by
    :func:`block_logsumexp` (``check``: with its fallback for +inf / NaN rows; without it, as the first pass of
    every call, such rows come out +inf or NaN and the caller recomputes them: one synchronisation a call on a
    GPU), merged across column blocks by ``logaddexp``. A finite row has the same bits either way."""
    n_a, n_b = a.shape[0], b.shape[0]
    dt = a.dtype if dtype is None else dtype
    itemsize = torch.empty((), dtype=dt).element_size()
    ra, rb = block_shape(n_a, n_b, itemsize, block_bytes)
    out = torch.empty(n_a, dtype=dt, device=a.device)
    buf = None
    for a0, a1 in iter_blocks(n_a, ra):
        acc = None
        for b0, b1 in iter_blocks(n_b, rb):
            if shared_blocks is None:
                if buf is None:   # one reused block: a fresh one per GEMM costs page faults
                    buf = torch.empty(min(ra, n_a) * min(rb, n_b), dtype=dt, device=a.device)
                raw = torch.mm(a[a0:a1].to(dt), b[b0:b1].to(dt).T, out=buf[:(a1 - a0) * (b1 - b0)].view(
                    a1 - a0, b1 - b0))
            else:
                key = (a0, b0) if dtype is None else (a0, b0, dt)
                raw = shared_blocks.get(key)
                if raw is None:
                    raw = shared_blocks[key] = a[a0:a1].to(dt) @ b[b0:b1].to(dt).T
            part = block_logsumexp(raw, scale, None if b_shift is None else b_shift[b0:b1], check=check)
            acc = part if acc is None else torch.logaddexp(acc, part)
        out[a0:a1] = acc
    return out


#: :func:`block_logsumexp` works through slabs of about this many bytes: rows of a score block that stay in the
#: cores' caches while they are scaled, shifted, exponentiated and summed (one read of the block from memory). 4 MB
#: (2 MB of L2 per core on this project's 2-core machine) was the fastest of 1-16 MB in a development A/B there.
LSE_SLAB_BYTES = 2**22

#: Scratch chunks on devices other than the CPU (a GPU; :func:`scratch_bytes`): there a pass over a score block
#: is bound by kernel launches and synchronisations, not by a cache, so a block of the default size is one chunk.
DEVICE_SCRATCH_BYTES = 2**30


def scratch_bytes(device, cpu_bytes: int) -> int:
    """The bytes of one chunk of a pass over a score block: ``cpu_bytes`` (sized for the cores' caches) on the CPU,
    :data:`DEVICE_SCRATCH_BYTES` on any other device. No result depends on it, only the speed."""
    return cpu_bytes if torch.device(device).type == "cpu" else DEVICE_SCRATCH_BYTES

#: :func:`block_logsumexp` sums each row in segments of this many columns (and a shorter last one): torch's fused
#: ``log_softmax`` accumulates a row's terms in one vector register, so its rounding error grows with the row's
#: length (a 70,001-column row of equal terms came out 60 units in the last place off, against 3 for
#: ``torch.logsumexp``); segments of 1024 keep it at that of ``torch.logsumexp``. The segments are contiguous
#: rows of the slab buffer, so they cost a few percent of the pass (a 1024-column segment read from a strided
#: sub-block cost a third more).
LSE_SEGMENT_COLS = 1024


def _fallback_rows(x: torch.Tensor) -> torch.Tensor:
    """The log-sum-exp of rows whose result is +inf or NaN: ``torch.logsumexp`` itself, with its handling of
    infinities."""
    return torch.logsumexp(x, dim=1)


def _segments_logsumexp(x: torch.Tensor) -> torch.Tensor:
    """``logsumexp`` of every row of a contiguous slab, destroying it: the row maxima ``m``, torch's fused
    ``log_softmax`` in place (each row is read, maximum and exp-sum, before it is written), and ``m - max(out)``.
    A row of only ``-inf`` gives ``-inf``; +inf or NaN give NaN (the caller's fallback)."""
    m = x.amax(dim=1)
    torch.log_softmax(x, dim=1, out=x)
    lse = m - x.amax(dim=1)
    return lse.masked_fill_(m == -math.inf, -math.inf)


def block_logsumexp(raw: torch.Tensor, scale: float, shift: Optional[torch.Tensor] = None, *,
                    check: bool = True) -> torch.Tensor:
    """``logsumexp_j(raw_ij * scale + shift_j)`` of every row of one score block (on the CPU without block-sized
    temporaries).

    The block is read once, through slabs of rows of about :data:`LSE_SLAB_BYTES` (on the CPU; on another device
    :data:`DEVICE_SCRATCH_BYTES`, so a default-sized block is one slab): ``x = fl(raw * scale)
    (+ shift)`` is formed in a reused buffer whose rows are cut into contiguous segments of
    :data:`LSE_SEGMENT_COLS` columns (and a shorter last one), and every segment row goes in place through torch's
    fused ``log_softmax`` kernel (a row-maximum pass, one pass for ``exp(x - m)`` and its sum ``s``, then
    ``out = (x - m) - log s``). The output's row maximum is ``-log s`` exactly (at a maximum ``x - m = 0``;
    elsewhere ``x - m <= 0`` and rounding is monotone), so a segment's log-sum-exp is ``m - max(out) = m + log s``
    with one rounding, the formula of ``torch.logsumexp``; the segments of a row are combined by one
    ``torch.logsumexp``. ``torch.logsumexp`` of the whole block does this arithmetic in five separate passes with
    two block-sized temporaries, and those five passes through cache-sized slabs are slower than the fused kernel
    (``benchmarks/reports/topk.md``). The results agree to a few units in the last place of ``max(|m|, |result|)``;
    ``tests/test_fast_paths.py`` holds this one to an extended-precision oracle as closely as ``torch.logsumexp``.

    A row is computed from that row alone (on the CPU each segment by one thread), so its bits do not depend on the
    thread count, the slab size or the other rows of the block. Rows whose result is +inf or NaN (a +inf or NaN score)
    take ``torch.logsumexp`` itself, with its handling of infinities (one check for the whole block);
    ``check=False`` leaves them +inf or NaN without that check (no synchronisation on a GPU: the caller finds and
    recomputes them, as :func:`logsumexp_similarity` does). Rows of only ``-inf`` give ``-inf``. ``raw`` is never
    modified."""
    scale = float(scale)
    rows, cols = raw.shape
    if rows == 0 or cols == 0:
        return torch.logsumexp(raw * scale, dim=1)
    seg = min(cols, LSE_SEGMENT_COLS)
    n_full, tail = divmod(cols, seg)
    main = n_full * seg
    slab = max(1, min(rows, scratch_bytes(raw.device, LSE_SLAB_BYTES) // (cols * raw.element_size())))
    buf = torch.empty(slab * cols, dtype=raw.dtype, device=raw.device)
    out = torch.empty(rows, dtype=raw.dtype, device=raw.device)
    for i0 in range(0, rows, slab):
        i1 = min(rows, i0 + slab)
        r = i1 - i0
        x_main = buf[: r * main].view(r, main)           # contiguous: its rows cut into full segments by a view
        torch.mul(raw[i0:i1, :main], scale, out=x_main)
        if shift is not None:
            x_main.add_(shift[:main])
        parts = _segments_logsumexp(x_main.view(r * n_full, seg)).view(r, n_full)
        if tail:
            x_tail = buf[r * main: r * cols].view(r, tail)
            torch.mul(raw[i0:i1, main:], scale, out=x_tail)
            if shift is not None:
                x_tail.add_(shift[main:])
            parts = torch.cat([parts, _segments_logsumexp(x_tail)[:, None]], dim=1)
        if parts.shape[1] == 1:
            out[i0:i1].copy_(parts[:, 0])
        else:
            torch.logsumexp(parts, dim=1, out=out[i0:i1])
    if not check:
        return out
    bad = torch.isnan(out) | (out == math.inf)
    if bool(bad.any()):   # a +inf or NaN score: torch's own handling, on the rows formed again
        rows_bad = raw[bad] * scale
        out[bad] = _fallback_rows(rows_bad if shift is None else rows_bad + shift.to(raw.dtype))
    return out


def _logsumexp_numpy(a, b, scale, b_shift, block_bytes, dtype, shared_blocks):
    """:func:`logsumexp_similarity` over the BLAS tiles of :func:`numpy_topk_partition` (float32 / float64 CPU)."""
    dt = a.dtype if dtype is None else dtype
    if a.device.type != "cpu" or b.device.type != "cpu" or dt not in (torch.float32, torch.float64) \
            or shared_blocks is not None:
        raise ValueError(f"backend='numpy' takes CPU tensors computed in float32 or float64 and no shared_blocks; got "
                         f"{a.dtype} on {a.device}, dtype={dtype}, shared_blocks "
                         f"{'given' if shared_blocks is not None else 'None'} (use backend='torch')")
    npdt = np.float32 if dt == torch.float32 else np.float64
    an = a.detach().to(dt).contiguous().numpy()
    bn = b.detach().to(dt).contiguous().numpy()
    shift = None if b_shift is None else b_shift.detach().to(dt).contiguous().numpy()
    n_a, n_b = an.shape[0], bn.shape[0]
    out = np.empty(n_a, dtype=npdt)
    if n_a == 0:
        return torch.from_numpy(out)
    a_blocks, b_blocks = numpy_topk_partition(n_a, n_b, an.itemsize, block_bytes)
    ra = max(a1 - a0 for a0, a1 in a_blocks)
    tile = np.empty(ra * max(b1 - b0 for b0, b1 in b_blocks), dtype=npdt)
    for a0, a1 in a_blocks:
        x, r = an[a0:a1], a1 - a0
        run_max = np.full((r, 1), -np.inf, dtype=npdt)
        run_sum = np.zeros((r, 1), dtype=npdt)
        for b0, b1 in b_blocks:
            s = np.matmul(x, bn[b0:b1].T, out=tile[: r * (b1 - b0)].reshape(r, b1 - b0))
            s *= npdt(scale)
            if shift is not None:
                s += shift[b0:b1]
            new_max = np.maximum(run_max, s.max(axis=1, keepdims=True))
            safe = np.where(np.isfinite(new_max), new_max, 0)  # rows still all -inf: nothing to shift
            run_sum *= np.exp(run_max - safe)
            s -= safe
            np.exp(s, out=s)
            run_sum += s.sum(axis=1, keepdims=True)
            run_max = new_max
        with np.errstate(divide="ignore"):
            out[a0:a1] = (np.where(np.isfinite(run_max), run_max, 0) + np.log(run_sum))[:, 0]
    return torch.from_numpy(out)


#: Bytes of one strip of a given score matrix that :func:`topk_scores` filters at a time (a cache-sized slice of
#: its block, so the filter's passes after the first read find it in cache).
TOPK_FILTER_BYTES = 8 * 2**20


def topk_scores(s: torch.Tensor, k: int, dim: int, *, block_bytes: Optional[int] = None,
                visit: Optional[Callable[[torch.Tensor, int], None]] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest entries of a *given* score matrix ``s`` along ``dim`` (0: per column, over the rows; 1: per
    row), as ``(values, indices)`` of shape ``(kept items, k)``, sorted in decreasing order; the values are the
    entries themselves (exact in the input dtype). Plain form: ``s.topk(k, dim=dim)`` (transposed for ``dim=0``).
    Ties may keep any of the tied indices.

    ``dim=1``: blocks of whole rows of at most ``block_bytes``, each a full top-``k``. ``dim=0``: the first block of
    rows gives every column its top-``k``; the rest is read in strips of at most :data:`TOPK_FILTER_BYTES`, and a
    strip contributes only its entries above the column's running k-th largest (``strip - threshold`` into a reused
    buffer, its row maxima, then the few rows with a positive one): those are exactly the entries that can change
    the top-``k`` (an entry equal to the threshold is a tie). The survivors are packed per column and merged into the
    running top-``k`` of their columns. A strip where a quarter or more survive (rows sorted ascending) takes its own
    top-``k`` instead; a -inf among a column's top-``k`` turns the filter off (its padding could not be told apart).

    ``visit``: when given, ``visit(strip, first_row)`` is called on every block (``dim=1``) or strip (``dim=0``)
    before it is used, in order (an engine checks it finite there, raising on a non-finite score, and counts its
    reads). Without it ``s`` must be finite where it is not -inf (the engines check it): a NaN after the first block
    is never a candidate. A transposed view (``s.T`` contiguous, e.g. a memory map read transposed) is streamed
    along its stored rows, and ``visit`` receives strips of those."""
    if not s.is_contiguous() and s.T.is_contiguous():
        return topk_scores(s.T, k, 1 - dim, block_bytes=block_bytes, visit=visit)
    x = s if dim == 1 else s.T
    n_keep, n_red = x.shape
    k = int(k)

    def check(blk, r0):
        if visit is not None:
            visit(blk, r0)

    if dim == 1:   # whole rows are in memory: blocks of kept rows, each a full top-k
        rows = block_rows(n_red, s.element_size(), block_bytes)
        vals, idx = [], []
        for a0, a1 in iter_blocks(n_keep, rows):
            check(x[a0:a1], a0)
            v, i = x[a0:a1].topk(k, dim=1)
            vals.append(v)
            idx.append(i)
        return torch.cat(vals), torch.cat(idx)
    first = min(n_red, max(k, block_rows(n_keep, s.element_size(), block_bytes)))
    check(s[:first], 0)
    v, i = s[:first].topk(min(k, first), dim=0)
    run_v, run_i = v.T.contiguous(), i.T.contiguous()
    strip = max(1, min(first, block_rows(n_keep, s.element_size(), TOPK_FILTER_BYTES)))
    thr = buf = None
    for r0, r1 in iter_blocks(n_red - first, strip):
        r0, r1 = r0 + first, r1 + first
        blk = s[r0:r1]
        if thr is None and run_v.shape[1] == k:
            thr = run_v.amin(dim=1)
            if not bool(torch.isfinite(thr).all()):   # a -inf among the top-k: no filter
                thr = False
        if thr is None or thr is False:
            check(blk, r0)
            v, i = blk.topk(min(k, r1 - r0), dim=0)
            run_v, run_i = _merge_topk(run_v, run_i, v.T, i.T + r0, k)
            continue
        if buf is None:
            buf = torch.empty((strip, n_keep), dtype=s.dtype, device=s.device)
        check(blk, r0)
        d = torch.sub(blk, thr, out=buf[:r1 - r0])
        cand = (d.amax(dim=1) > 0).nonzero().squeeze(1)
        if cand.numel() == 0:
            continue
        rr, cc = (d[cand] > 0).nonzero(as_tuple=True)
        if 4 * rr.numel() >= blk.numel():
            v, i = blk.topk(min(k, r1 - r0), dim=0)
            run_v, run_i = _merge_topk(run_v, run_i, v.T, i.T + r0, k)
            thr = run_v.amin(dim=1)
            continue
        rr = cand[rr]
        cols, slot = torch.unique(cc, return_inverse=True)
        cv, ci = pack_rows(slot, rr + r0, blk[rr, cc], cols.numel(), -torch.inf)
        mv, mi = _merge_topk(run_v[cols], run_i[cols], cv, ci, k)
        run_v[cols], run_i[cols] = mv, mi
        thr[cols] = mv.amin(dim=1)
    run_v, p = run_v.sort(dim=1, descending=True)   # fewer than k rows in all: the caller pads
    return run_v, run_i.gather(1, p)


def logsumexp_scores(s: torch.Tensor, scale: float, dim: int, *, dtype: Optional[torch.dtype] = None,
                     block_bytes: Optional[int] = None,
                     visit: Optional[Callable[[torch.Tensor, int], object]] = None) -> torch.Tensor:
    """``logsumexp(scale * s, dim)`` of a *given* score matrix ``s``, in float64, its blocks computed in ``dtype``
    (default: ``s``'s; the caller picks it with :func:`log_mean_exp_dtype`). ``s`` is read in slabs of whole rows
    of at most ``block_bytes`` and :data:`LSE_SLAB_BYTES` (cache-sized), each copied into one reused buffer in
    ``dtype`` and scaled there, then ``max + log(sum(exp(x - max)))`` in place along ``dim`` (the formula of
    ``torch.logsumexp``, without its block-sized temporaries); for ``dim=0`` the slabs' partials are merged with
    ``logaddexp`` in float64. ``s`` must be finite (the engines check it). Plain form:
    ``torch.logsumexp(scale * s.double(), dim=dim)``. A transposed view (``s.T`` contiguous) is streamed along its
    stored rows. ``visit``: as in :func:`topk_scores`, ``visit(slab, first_row)`` on every slab of stored rows
    before it is used (an engine checks it finite there and takes its largest ``|s|``)."""
    if not s.is_contiguous() and s.T.is_contiguous():
        return logsumexp_scores(s.T, scale, 1 - dim, dtype=dtype, block_bytes=block_bytes, visit=visit)
    dt = s.dtype if dtype is None else dtype
    item = max(4, torch.empty((), dtype=dt).element_size())
    n_r, n_c = s.shape
    size = min(block_rows(n_c, item, block_bytes), block_rows(n_c, item, LSE_SLAB_BYTES))
    buf = torch.empty((min(size, n_r), n_c), dtype=dt, device=s.device)   # one reused slab: no fresh memory
    out = torch.empty(n_r, dtype=torch.float64, device=s.device) if dim == 1 else None
    acc = None
    for r0, r1 in iter_blocks(n_r, size):
        x = buf[:r1 - r0]
        if visit is not None:
            visit(s[r0:r1], r0)
        x.copy_(s[r0:r1]).mul_(scale)                       # converted first, then scaled in dt
        m = x.amax(dim=dim, keepdim=True)
        part = (torch.log(x.sub_(m).exp_().sum(dim=dim, keepdim=True)).add_(m)).squeeze(dim).to(torch.float64)
        if dim == 1:
            out[r0:r1] = part
        else:
            acc = part if acc is None else torch.logaddexp(acc, part)
    return out if dim == 1 else acc


#: A kernel result is accepted when its rounding error, in score units, is predicted below this.
PRECISION_TARGET = 2.0 ** -20
_EPS = {torch.float32: 2.0 ** -24, torch.float64: 2.0 ** -53}


def log_mean_exp_similarity(
    a: torch.Tensor,
    b: torch.Tensor,
    scale: float,
    *,
    block_bytes: Optional[int] = None,
    unit: Optional[float] = None,
    name: str = "scale",
    cache: Optional[dict] = None,
) -> torch.Tensor:
    """``out_i = log mean_j exp(scale * a_i . b_j)`` for every row of ``a``, streamed over ``b``.

    Centred: the constant ``log(len(b))`` is removed, so ``out / scale`` stays within the range of the scores
    whatever ``scale`` is (the uncentred log-sum-exp grows like ``log(len(b)) / scale``, which at a small
    ``scale`` -- a large temperature -- swamps the O(1) score differences in float32).

    Precision: the result divided by ``unit`` (the divisor the caller applies, default ``scale``: IS uses
    ``tau = 1 / scale``, DualIS ``beta_q + beta_t``) has a rounding error of about
    ``eps * (log(len(b)) + scale * max|s|) / unit``. When that exceeds :data:`PRECISION_TARGET` in float32 (or
    ``scale * max|s|`` would overflow float32), the blocks are computed in float64; when even float64 cannot
    reach it, ``ValueError`` names the parameter (``name``) and its usable range. Returns float64 when
    promoted, else the input dtype. ``scale = 0`` gives exactly 0. ``cache``: a dict kept across calls on the
    same ``a`` and ``b`` (and block size) that holds the raw similarity blocks, so that several scales (a
    temperature sweep) share one GEMM pass with results bit-identical to separate calls.
    """
    n_b = b.shape[0]
    scale = float(scale)
    if scale == 0.0:
        return torch.zeros(a.shape[0], dtype=a.dtype, device=a.device)
    smax = float(torch.linalg.vector_norm(a, dim=1).max()) * float(torch.linalg.vector_norm(b, dim=1).max())
    work = log_mean_exp_dtype(a.dtype, smax, n_b, abs(scale), abs(scale) if unit is None else abs(float(unit)), name)
    lse = logsumexp_similarity(a, b, scale, block_bytes=block_bytes, dtype=work, shared_blocks=cache)
    return lse - math.log(n_b)


def working_dtype(dtype: torch.dtype, magnitude: float, overflow: float = 0.0) -> Optional[torch.dtype]:
    """The cheapest of ``dtype`` (float32 for 16-bit inputs) and float64 that keeps a result precise.

    ``magnitude``: the largest intermediate value, in score units, whose rounding ends up in the result (its
    rounding error ``eps * magnitude`` must stay below :data:`PRECISION_TARGET`); ``overflow``: the largest value
    the computation exponentiates or scales to (must stay below the dtype's maximum / 16). None when even
    float64 fails: the caller refuses the parameter.
    """
    for dt in ((torch.float64,) if dtype == torch.float64 else (torch.float32, torch.float64)):
        if _EPS[dt] * magnitude <= PRECISION_TARGET and overflow < torch.finfo(dt).max / 16:
            return dt
    return None


def log_mean_exp_dtype(dtype: torch.dtype, smax: float, n_b: int, scale: float, unit: float, name: str) -> torch.dtype:
    """The working dtype of a centred log-mean-exp over ``n_b`` items whose scores are at most ``smax`` in magnitude
    (the product of the largest row norms): float32 (for 16/32-bit inputs) when its rounding of the result divided
    by ``unit`` stays below :data:`PRECISION_TARGET`, else float64; ``ValueError`` naming ``name`` (e.g.
    ``"tau=1e+13"``) with the usable range when even float64 cannot."""
    log_n = math.log(max(2, n_b))
    dt = working_dtype(dtype, (log_n + scale * smax) / unit, scale * smax)
    if dt is not None:
        return dt
    err = _EPS[torch.float64] * (log_n + scale * smax) / unit
    raise ValueError(
        f"{name} is too extreme to compute precisely: the offsets would carry a rounding error of about "
        f"{err:.2g} in score units even in float64 (or overflow). For a temperature tau = 1 / beta use "
        f"{1.0 / (torch.finfo(torch.float64).max / 16):.0e} <= tau <= {PRECISION_TARGET / (_EPS[torch.float64] * log_n):.1e} "
        f"with this bank of {n_b} rows (beyond the upper end the method ranks like DN / NNN with k = all)"
    )


def bank_column(bank: torch.Tensor, target: torch.Tensor, *, block_bytes: Optional[int] = None) -> torch.Tensor:
    """``s(q_i, t) = q_i . t`` for every bank row (an ``m``-vector), in blocks of bank rows: one column of the bank x
    target score matrix, without forming the matrix (the offset decompositions of :mod:`hubnorm.forensics`)."""
    out = torch.empty(bank.shape[0], dtype=bank.dtype, device=bank.device)
    rows = block_rows(bank.shape[1], bank.element_size(), block_bytes)
    for r0, r1 in iter_blocks(bank.shape[0], rows):
        out[r0:r1] = bank[r0:r1] @ target
    return out


def gibbs(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(w, log w)`` of ``w = softmax(x)`` over a vector, and ``tau KL(w || uniform) / tau = sum w log w + log m``
    is what the decompositions add: the Gibbs identity ``LSE(x) = sum_i w_i x_i + H(w)``."""
    logw = x - torch.logsumexp(x, dim=0)
    return logw.exp(), logw
