"""Offsets over banks that do not fit one machine, computed on a Dask cluster.

Every offset method is a reduction over the reference bank, so it distributes as per-block partial results
merged by a tree reduction (:func:`dask.array.reduction`, fan-in ``split_every``):

========  =====================================================  ==========================================
method    partial result of one bank block (x one target chunk)  merge
========  =====================================================  ==========================================
NNN       top-k similarities per target (NNN Eq. 1)              concatenate, keep the k largest
CSLS      top-k similarities per target (CSLS Eq. 6, r_B)        concatenate, keep the k largest
DN        column sums of the bank (mu_Q, DN / NNN App. A3)       sum (dask's own ``sum``)
IS        logsumexp_b(b . t / tau) per target (DBSN Eq. 3)       logaddexp
SN, DBSN  column logsumexp of (S + f) / tau (DBSN Eq. 7-9)       logaddexp, one reduction per half-step
========  =====================================================  ==========================================

The public call is the library's own: ``normalizer.fit(targets, query_bank=bank)`` with ``bank`` a
:class:`dask.array.Array` (for example ``open_bank(folder)`` over ``.npy`` shards, or ``dask.array.from_zarr``)
or the path of a folder of ``.npy`` shards. It runs on the active Dask scheduler: a
``distributed.Client`` when one is set up (a ``LocalCluster``, a ``dask_jobqueue.SLURMCluster`` or any
scheduler address), else Dask's local threads. The fitted attributes are those of the in-memory fit.

Memory per worker: a task holds one bank chunk (its rows x d), one target chunk (persisted on the cluster
once per fit; each worker fetches it at most once per pass), one similarity block of ``block_bytes`` and its partial
result; the bank is never gathered. Bank loading and the per-block kernel are one fused task (Dask's blockwise
fusion), so a loaded chunk never waits in memory.

Sinkhorn: the row potentials ``f`` (one per bank row) live chunked beside the bank, the column potentials
``g`` beside the targets. When all targets fit one chunk, an iteration is one pass (each task computes its
rows' ``f`` from ``g`` and its partial column logsumexp: one reduction per iteration). Otherwise each
half-step is one reduction: ``f`` by a logaddexp over target chunks (persisted beside the bank), then ``g``
by a logaddexp over bank chunks. The bank is re-read once per pass; nothing of the bank is persisted.

Exact: the per-block kernels are the in-memory ones (``topk_similarity``, ``logsumexp_similarity``,
``nnn_bias``); only the order of floating-point merges differs (float64 merges for the logsumexps).
"""

from __future__ import annotations

import math
import os
import warnings
from functools import partial
from pathlib import Path
from typing import List, Optional, Sequence, Union

import numpy as np
import torch

try:
    import dask
    import dask.array as da
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "hubnorm.distributed needs Dask: pip install 'dask[array]' distributed (the 'distributed' extra of hubnorm)"
    ) from exc

from .kernels import (
    DEFAULT_BLOCK_BYTES, PRECISION_TARGET, iter_blocks, logsumexp_similarity, nnn_bias, topk_similarity,
    working_dtype,
)
from ._validation import as_embeddings, check_positive_int, resolve_device

__all__ = ["fit_offsets", "open_bank", "save_bank_shards", "NpyShards", "SUPPORTED", "DEFAULT_CHUNK_BYTES",
           "DEFAULT_TARGET_CHUNK_BYTES"]

#: Default bytes of one bank chunk made by :func:`open_bank` (rows x d x itemsize).
DEFAULT_CHUNK_BYTES = 64 * 2**20

#: Targets (or DBSN's ``[targets ; target_bank]``) are cut into row chunks of at most this many bytes;
#: each chunk is persisted on the cluster once and fetched by each worker at most once per pass.
DEFAULT_TARGET_CHUNK_BYTES = 256 * 2**20

#: Normalizers whose offsets this module computes (registry names).
SUPPORTED = ("nnn", "csls", "dn", "is", "sn", "dbsn")


def is_dask_array(x) -> bool:
    """Duck-typed: an object of a ``dask`` module (no Dask import needed to ask)."""
    return type(x).__module__.split(".")[0] == "dask"


# ================================================================================================ bank stores
class NpyShards:
    """Rows of several ``.npy`` files of shape ``(rows_i, d)`` seen as one read-only ``(sum rows_i, d)`` array.

    Picklable (it holds paths only); ``__getitem__`` memory-maps the shards it touches and copies out the rows
    asked for, so a Dask task that reads a chunk holds that chunk only.
    """

    def __init__(self, paths: Sequence[Union[str, os.PathLike]]):
        self.paths = [str(p) for p in paths]
        if not self.paths:
            raise ValueError("paths is empty: pass at least one .npy shard")
        rows, dim, dtype = [], None, None
        for p in self.paths:
            try:
                mm = np.load(p, mmap_mode="r")
            except (OSError, ValueError) as exc:
                raise ValueError(f"bank shard {p} is not a readable .npy file: {exc}") from exc
            if mm.ndim != 2:
                raise ValueError(f"bank shard {p} has shape {mm.shape}; every shard must be 2-D (rows, d)")
            if not np.issubdtype(mm.dtype, np.floating):
                raise TypeError(f"bank shard {p} holds {mm.dtype}; save float32 or float64 embeddings")
            if dim is None:
                dim, dtype = mm.shape[1], mm.dtype
            elif mm.shape[1] != dim or mm.dtype != dtype:
                raise ValueError(f"bank shard {p} is {mm.dtype} (.., {mm.shape[1]}) but the first shard is "
                                 f"{dtype} (.., {dim}): all shards must share dimension and dtype")
            rows.append(mm.shape[0])
        self.starts = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
        self.shape = (int(self.starts[-1]), int(dim))
        self.dtype = np.dtype(dtype)
        self.ndim = 2

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, key):
        if not isinstance(key, tuple):
            key = (key,)
        rows = key[0] if key else slice(None)
        cols = key[1] if len(key) > 1 else slice(None)
        if not isinstance(rows, slice) or rows.step not in (None, 1):
            raise TypeError("NpyShards supports contiguous row slices only")
        r0, r1, _ = rows.indices(self.shape[0])
        parts = []
        first = int(np.searchsorted(self.starts, r0, side="right")) - 1
        for s in range(max(first, 0), len(self.paths)):
            s0, s1 = int(self.starts[s]), int(self.starts[s + 1])
            if s0 >= r1:
                break
            a, b = max(r0, s0) - s0, min(r1, s1) - s0
            if b > a:
                parts.append(np.array(np.load(self.paths[s], mmap_mode="r")[a:b, cols]))
        if not parts:
            return np.empty((0, self.shape[1]), dtype=self.dtype)[:, cols]
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)


def open_bank(path: Union[str, os.PathLike, Sequence], *, chunk_rows: Optional[int] = None,
              chunk_bytes: int = DEFAULT_CHUNK_BYTES):
    """A lazy Dask array over a folder of ``.npy`` shards (sorted by name) or a list of shard paths.

    Chunks hold ``chunk_rows`` rows (default: ``chunk_bytes`` worth, 64 MiB); a chunk may span shards. Nothing is
    read until a task needs its chunk. For Zarr stores use ``dask.array.from_zarr(path)`` directly: any 2-D Dask
    array is a bank.
    """
    if isinstance(path, (str, os.PathLike)):
        folder = Path(path)
        if not folder.is_dir():
            raise ValueError(f"path {folder} is not a folder: pass a folder of .npy shards (or a list of .npy files)")
        paths = sorted(folder.glob("*.npy"))
        if not paths:
            raise ValueError(f"folder {folder} holds no .npy shard: "
                             "write one with hubnorm.distributed.save_bank_shards")
    else:
        paths = list(path)
    store = NpyShards(paths)
    if chunk_rows is None:
        chunk_rows = max(1, int(chunk_bytes) // (store.shape[1] * store.dtype.itemsize))
    chunk_rows = check_positive_int(chunk_rows, "chunk_rows")
    stamp = [(p, os.path.getsize(p), os.path.getmtime(p)) for p in store.paths]
    name = "hubnorm-bank-" + dask.base.tokenize(stamp, chunk_rows)
    # inline_array: the (small, picklable) store goes into each read task, which Dask fuses with the kernel
    return da.from_array(store, chunks=(chunk_rows, store.shape[1]), name=name, lock=False, asarray=True,
                         inline_array=True, fancy=False, meta=np.empty((0, 0), dtype=store.dtype))


def save_bank_shards(blocks, folder: Union[str, os.PathLike], *, prefix: str = "bank") -> List[Path]:
    """Write an iterable of ``(rows, d)`` arrays as ``folder/prefix-00000.npy``, ... (one shard each)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i, blk in enumerate(blocks):
        arr = blk.detach().cpu().numpy() if isinstance(blk, torch.Tensor) else np.asarray(blk)
        if arr.ndim != 2:
            raise ValueError(f"block {i} has shape {arr.shape}: every block must be 2-D (rows, d)")
        p = folder / f"{prefix}-{i:05d}.npy"
        np.save(p, arr)
        out.append(p)
    if not out:
        raise ValueError("blocks is empty: nothing to write")
    return out


# ======================================================================================= per-block kernels
# They run on the workers: numpy in, numpy out, the in-memory kernels of hubnorm._ops inside.

def _tensor(x):
    """A tensor view of a worker-side array (Dask hands out read-only arrays; the kernels never write to them)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(np.ascontiguousarray(x))


def _block(x, dtype, check, name):
    t = _tensor(x)
    if check is None:
        return t.to(dtype)
    return as_embeddings(t, name, device="cpu", dtype=dtype, check_normalized=check)


def _k_topk(bank_blk, t_blk, *, k, dtype, check, block_bytes):
    """Top-``k`` similarities of the chunk's targets over this bank block: ``(1, n_t, k, 1)``, -inf padded.

    The kernels keep a trailing axis of size 1 for the embedding axis: a blockwise call without a contracted
    index is fused by Dask with the task that loads the bank chunk (so a chunk never waits in memory).
    """
    b = _block(bank_blk, dtype, check, "query_bank")
    t = _tensor(t_blk)
    kk = min(k, b.shape[0])
    v, _ = topk_similarity(t, b, kk, block_bytes=block_bytes)
    if kk < k:
        v = torch.cat([v, torch.full((v.shape[0], k - kk), -math.inf, dtype=v.dtype)], dim=1)
    return v.numpy()[None, :, :, None]


def _topk_merge(x, axis, keepdims, k, final=False):
    """Keep the ``k`` largest of the concatenated partials along the bank axis (0), sorted decreasing."""
    x = np.asarray(x)[..., 0]
    flat = _tensor(np.moveaxis(x, 0, 1).reshape(x.shape[1], -1))
    v = flat.topk(k, dim=1, sorted=True).values.numpy()[:, :, None]
    return v[None] if keepdims else v


def _keep(x, axis, keepdims):
    return x


def _lse_merge(x, axis, keepdims):
    return np.logaddexp.reduce(np.asarray(x, dtype=np.float64), axis=axis, keepdims=keepdims)


def _k_lse(bank_blk, t_blk, *, scale, dtype, work, check, block_bytes):
    """``logsumexp_b(scale * b . t)`` over this bank block per target, computed in ``work``: ``(1, n_t, 1)``
    float64 (IS)."""
    b = _block(bank_blk, dtype, check, "query_bank")
    t = _tensor(t_blk)
    lse = logsumexp_similarity(t, b, scale, block_bytes=block_bytes, dtype=work)
    return lse.to(torch.float64).numpy()[None, :, None]


def _sub_rows(n_cols, itemsize, block_bytes):
    budget = DEFAULT_BLOCK_BYTES if block_bytes is None else int(block_bytes)
    return max(1, budget // max(1, n_cols * max(4, itemsize)))


def _k_sn_fused(bank_blk, t_blk, g, *, tau, log_a, dtype, check, block_bytes):
    """One Sinkhorn pass over a bank block when all columns are in ``t_blk``.

    With ``x = (S + g) / tau``: ``f_i = tau log a - tau LSE_j x_ij`` (row half-step, local to the block) and the
    partial ``LSE_i (x_ij + f_i / tau)`` of the column half-step, ``(1, n)`` float64; the caller subtracts
    ``g / tau``: ``LSE_i((S_ij + f_i) / tau) = LSE_i(x_ij + f_i / tau) - g_j / tau``.
    """
    b = _block(bank_blk, dtype, check, "query_bank")
    t = _tensor(t_blk).to(dtype)
    g_tau = _tensor(g).to(dtype) / tau
    acc = None
    for r0, r1 in iter_blocks(b.shape[0], _sub_rows(t.shape[0], t.element_size(), block_bytes)):
        x = torch.addmm(g_tau, b[r0:r1], t.T, beta=1.0, alpha=1.0 / tau)
        mx = x.amax(dim=1, keepdim=True)
        x.sub_(mx)
        log_rs = torch.logsumexp(x, dim=1, keepdim=True)  # x_ij + f_i / tau = x_ij - mx_i - log_rs_i + log a
        x.add_(log_a - log_rs)
        part = torch.logsumexp(x, dim=0).to(torch.float64)
        acc = part if acc is None else torch.logaddexp(acc, part)
    return acc.numpy()[None, :, None]


def _k_sn_rows(bank_blk, t_blk, g, *, tau, dtype, check, block_bytes):
    """Row half-step partial: ``LSE_{j in chunk}((S_ij + g_j) / tau)`` per bank row, ``(rows, 1)`` float64."""
    b = _block(bank_blk, dtype, check, "query_bank")
    t = _tensor(t_blk).to(dtype)
    g_tau = _tensor(g).to(dtype) / tau
    out = np.empty((b.shape[0], 1, 1), dtype=np.float64)
    for r0, r1 in iter_blocks(b.shape[0], _sub_rows(t.shape[0], t.element_size(), block_bytes)):
        x = torch.addmm(g_tau, b[r0:r1], t.T, beta=1.0, alpha=1.0 / tau)
        out[r0:r1, 0, 0] = torch.logsumexp(x, dim=1).to(torch.float64).numpy()
    return out


def _k_sn_cols(bank_blk, f, t_blk, *, tau, dtype, block_bytes):
    """Column half-step partial: ``LSE_{i in block}((S_ij + f_i) / tau)`` per target, ``(1, n_t)`` float64."""
    b = _block(bank_blk, dtype, None, "query_bank")
    t = _tensor(t_blk).to(dtype)
    f_tau = (_tensor(f).to(dtype) / tau)[:, None]
    acc = None
    for r0, r1 in iter_blocks(b.shape[0], _sub_rows(t.shape[0], t.element_size(), block_bytes)):
        x = torch.addmm(f_tau[r0:r1], b[r0:r1], t.T, beta=1.0, alpha=1.0 / tau)
        part = torch.logsumexp(x, dim=0).to(torch.float64)
        acc = part if acc is None else torch.logaddexp(acc, part)
    return acc.numpy()[None, :, None]


# ============================================================================================ the driver
def _client():
    try:
        from distributed import default_client
    except ImportError:
        return None
    try:
        return default_client()
    except ValueError:
        return None


def _as_bank(x, name, dim, chunk_bytes=DEFAULT_CHUNK_BYTES):
    """A 2-D floating Dask array with one chunk along the embedding axis."""
    if isinstance(x, (str, os.PathLike)):
        x = open_bank(x)
    elif isinstance(x, (np.ndarray, torch.Tensor)):
        arr = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x
        rows = max(1, int(chunk_bytes) // max(1, arr.shape[-1] * arr.dtype.itemsize)) if arr.ndim == 2 else 1
        x = da.from_array(arr, chunks=(rows, -1) if arr.ndim == 2 else -1)
    elif not is_dask_array(x) or not hasattr(x, "chunks"):
        raise TypeError(f"{name} must be a dask.array.Array, a folder of .npy shards, a numpy array or a torch "
                        f"tensor; got {type(x).__name__}")
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D (rows, d); got shape {x.shape}")
    if any(math.isnan(s) for s in x.shape):
        raise ValueError(f"{name} has unknown chunk sizes: call {name}.compute_chunk_sizes() first")
    if x.shape[0] == 0:
        raise ValueError(f"{name} is empty (0 rows): pass at least one embedding")
    if not np.issubdtype(x.dtype, np.floating):
        raise TypeError(f"{name} must hold floating-point values; got dtype {x.dtype}. Use {name}.astype('float32').")
    if x.shape[1] != dim:
        raise ValueError(f"{name} has dimension {x.shape[1]} but the other embeddings have {dim}: "
                         "use the same encoder for both")
    if len(x.chunks[1]) > 1:
        x = x.rechunk({1: -1})
    return x


def _broadcast(t: np.ndarray, rows: int):
    """Targets as a Dask array of row chunks, placed on the cluster once (persisted when a Client is active).

    Persisted rather than scattered: a persisted chunk keeps its lineage, so if every worker holding it dies
    the scheduler recomputes it (scattered data would be lost and the fit cancelled). Each worker fetches a
    chunk from a peer at most once per pass over the bank.
    """
    arr = da.from_array(np.ascontiguousarray(t), chunks=(rows, t.shape[1]))
    client = _client()
    if client is None:
        return arr
    arr = client.persist(arr)
    _spread(arr)
    return arr


def _spread(arr):
    """Copy a persisted array's chunks to every worker (else the scheduler, seeing that every task needs the
    chunk, would run them all where it happens to live)."""
    client = _client()
    if client is not None:
        from distributed import futures_of, wait

        futs = futures_of(arr)
        wait(futs)
        client.replicate(futs)


def _target_rows(n_cols, d, itemsize, target_chunk_rows):
    if target_chunk_rows is not None:
        return check_positive_int(target_chunk_rows, "target_chunk_rows")
    return max(1, min(n_cols, DEFAULT_TARGET_CHUNK_BYTES // (d * itemsize)))


def _np_dtype(dtype: torch.dtype):
    return np.float64 if dtype == torch.float64 else np.float32


def _topk(bank, tcols, k, dtype, check, block_bytes, split_every):
    parts = da.blockwise(
        partial(_k_topk, k=k, dtype=dtype, check=check, block_bytes=block_bytes), "ijkd",
        bank, "id", tcols, "jd", new_axes={"k": k}, adjust_chunks={"i": 1, "d": 1},
        dtype=_np_dtype(dtype), meta=np.empty((0, 0, 0, 0), dtype=_np_dtype(dtype)))
    return da.reduction(parts, _keep, partial(_topk_merge, k=k), combine=partial(_topk_merge, k=k), axis=0,
                        keepdims=False, dtype=parts.dtype, split_every=split_every, concatenate=True,
                        meta=np.empty((0, 0, 0), dtype=parts.dtype))[:, :, 0]


def _lse_over_bank(parts, split_every):
    """Tree logaddexp of ``(bank blocks, n, 1)`` partials over the bank axis: ``(n,)``."""
    return da.reduction(parts, _keep, _lse_merge, combine=_lse_merge, axis=0, keepdims=False, dtype=np.float64,
                        split_every=split_every, concatenate=True, meta=np.empty((0, 0), dtype=np.float64))[:, 0]


def _compute(x):
    (out,) = dask.compute(x)
    return np.array(out)  # a writable copy of a small result


def _sinkhorn(norm, bank, cols_np, tcol_rows, dtype, check, block_bytes, split_every):
    """Log-domain Sinkhorn (DBSN Eq. 7-9, Alg. A1) of ``S = bank @ cols.T``; returns ``(g, iterations)``."""
    tau, n_iter = float(norm.tau), int(norm.n_iter)
    tol = None if norm.tol is None else float(norm.tol)
    m, n = bank.shape[0], cols_np.shape[0]
    log_a, log_b = math.log(1.0 / m), math.log(1.0 / n)
    tcols = _broadcast(cols_np, tcol_rows)
    fused = len(tcols.chunks[0]) == 1
    npdt = _np_dtype(dtype)
    g = dask.persist(da.zeros(n, dtype=np.float64, chunks=(tcols.chunks[0],)))[0]
    done = 0
    for it in range(n_iter):
        chk = check if it == 0 else None
        if it:
            _spread(tcols)  # Dask may have dropped the extra copies between passes
        if fused:
            parts = da.blockwise(
                partial(_k_sn_fused, tau=tau, log_a=log_a, dtype=dtype, check=chk, block_bytes=block_bytes), "ijd",
                bank, "id", tcols, "jd", g, "j", adjust_chunks={"i": 1, "d": 1}, dtype=np.float64,
                meta=np.empty((0, 0, 0), dtype=np.float64))
            lse_col = _lse_over_bank(parts, split_every) - g / tau
        else:
            rows = da.blockwise(
                partial(_k_sn_rows, tau=tau, dtype=dtype, check=chk, block_bytes=block_bytes), "ijd",
                bank, "id", tcols, "jd", g, "j", adjust_chunks={"j": 1, "d": 1}, dtype=np.float64,
                meta=np.empty((0, 0, 0), dtype=np.float64))
            lse_row = da.reduction(rows, _keep, _lse_merge, combine=_lse_merge, axis=1, keepdims=False,
                                   dtype=np.float64, split_every=split_every, concatenate=True,
                                   meta=np.empty((0, 0), dtype=np.float64))[:, 0]
            f = dask.persist(tau * log_a - tau * lse_row)[0]  # row potentials, chunked beside the bank
            parts = da.blockwise(
                partial(_k_sn_cols, tau=tau, dtype=dtype, block_bytes=block_bytes), "ijd",
                bank, "id", f, "i", tcols, "jd", adjust_chunks={"i": 1, "d": 1}, dtype=np.float64,
                meta=np.empty((0, 0, 0), dtype=np.float64))
            lse_col = _lse_over_bank(parts, split_every)
        g_new = (tau * log_b - tau * lse_col).astype(npdt).astype(np.float64)
        g_new = dask.persist(g_new)[0]
        done += 1
        if tol is not None:
            delta = float(_compute(abs(g_new - g).max()))
            g = g_new
            if delta < tol:
                break
        else:
            g = g_new
    return _compute(g).astype(npdt), done


def fit_offsets(normalizer, targets, query_bank=None, target_bank=None, *, target_chunk_rows: Optional[int] = None,
                split_every: Optional[int] = None):
    """Fit ``normalizer`` (NNN, CSLS, DN, IS, SN or DBSN) with its bank reductions run by Dask.

    ``normalizer.fit(targets, query_bank=<dask array or folder>)`` calls this; call it directly to set
    ``target_chunk_rows`` (targets per broadcast chunk; default: 256 MiB worth) or ``split_every`` (fan-in of the
    tree reduction; Dask's default when None). Banks may be Dask arrays, folders of ``.npy`` shards, or in-memory
    arrays (then cut into 64 MiB chunks). Per-task arithmetic runs on the workers' CPUs; the fitted tensors are
    placed on the normalizer's ``device``. Returns the fitted normalizer.
    """
    # dispatch on the registry name of hubnorm's own classes (no import of hubnorm.normalizers here: that
    # package's base class is what calls this function); subclasses elsewhere may change _fit, so they are refused
    cls = type(normalizer)
    own = cls.__module__.startswith("hubnorm.normalizers.")
    kind = getattr(cls, "name", None) if own and getattr(cls, "name", None) in SUPPORTED else None
    if kind is None:
        raise TypeError(f"distributed fitting supports {', '.join(SUPPORTED)} (NearestNeighborNormalization, "
                        "CrossDomainSimilarityLocalScaling, DistributionNormalization, InvertedSoftmax, "
                        f"SinkhornNormalization, DualBankSinkhornNormalization); got {type(normalizer).__name__}: "
                        "load the bank into memory (bank.compute()) and fit as usual")
    if split_every is not None:
        split_every = check_positive_int(split_every, "split_every")
        if split_every < 2:
            raise ValueError(f"split_every must be >= 2 (the fan-in of the tree reduction); got {split_every}")
    normalizer.check_params()
    device = resolve_device(getattr(normalizer, "device", None))
    check = bool(getattr(normalizer, "check_normalized", True))
    t = as_embeddings(targets, "targets", device="cpu", check_normalized=check)
    dtype, d = t.dtype, t.shape[1]
    if query_bank is None:
        raise ValueError(f"{type(normalizer).__name__} needs query_bank (reference queries, e.g. training captions "
                         "for t2i); pass fit(targets, query_bank=...)")
    if kind == "dbsn" and target_bank is None:
        raise ValueError(f"{type(normalizer).__name__} needs target_bank (reference targets, e.g. training images "
                         "for t2i); pass fit(targets, query_bank=..., target_bank=...)")
    qb = _as_bank(query_bank, "query_bank", d)
    block_bytes = getattr(normalizer, "block_bytes", None)
    t_np = t.numpy()
    trows = _target_rows(t.shape[0], d, t.element_size(), target_chunk_rows)
    fitted = {}
    if kind in ("nnn", "csls"):
        k = check_positive_int(normalizer.k, "k", maximum=qb.shape[0], max_name="the query bank size")
        if kind == "csls":
            check_positive_int(normalizer.k, "k", maximum=t.shape[0], max_name="the number of targets")
        top = torch.from_numpy(_compute(_topk(qb, _broadcast(t_np, trows), k, dtype, check, block_bytes,
                                              split_every)))
        if kind == "nnn":
            fitted["bias_"] = nnn_bias(top, normalizer.alpha)
            fitted["offsets_"] = -fitted["bias_"]
        else:
            fitted["bank_radius_"] = top.mean(dim=1)
            fitted["offsets_"] = -0.5 * fitted["bank_radius_"]
    elif kind == "is":
        # centred offsets -tau log mean_b exp(b.t / tau) (inverted_softmax_offsets), in the working dtype that
        # kernels.log_mean_exp_similarity would choose for the whole bank
        tau = float(normalizer.tau)
        smax = _max_norm(qb) * float(torch.linalg.vector_norm(t, dim=1).max())
        log_m = math.log(max(2, qb.shape[0]))
        work = working_dtype(dtype, (log_m + smax / tau) * tau, smax / tau)
        if work is None:
            raise ValueError(f"tau={tau:g} is too extreme to compute precisely with a bank of {qb.shape[0]} rows "
                             f"(rounding or overflow even in float64): use tau <= "
                             f"{PRECISION_TARGET / (2.0 ** -53 * log_m):.1e} and 1/tau below float64's range")
        parts = da.blockwise(
            partial(_k_lse, scale=1.0 / tau, dtype=dtype, work=work, check=check, block_bytes=block_bytes), "ijd",
            qb, "id", _broadcast(t_np, trows), "jd", adjust_chunks={"i": 1, "d": 1}, dtype=np.float64,
            meta=np.empty((0, 0, 0), dtype=np.float64))
        lse = torch.from_numpy(_compute(_lse_over_bank(parts, split_every))).to(work)
        fitted["offsets_"] = (-tau * (lse - math.log(qb.shape[0]))).to(dtype)
    elif kind == "dn":
        fitted.update(_dn(normalizer, t, qb, target_bank, d, check))
    else:
        cols = t_np
        if kind == "dbsn":
            tb = _as_bank(target_bank, "target_bank", d)
            tb_np = _compute(tb)  # the Sinkhorn columns [targets ; target_bank] are gathered: they must fit a client
            tb_t = as_embeddings(tb_np, "target_bank", device="cpu", dtype=dtype, check_normalized=check)
            cols = np.concatenate([t_np, tb_t.numpy()], axis=0)
        crows = _target_rows(cols.shape[0], d, t.element_size(), target_chunk_rows)
        # working dtype as in normalizers.sinkhorn._sinkhorn_dtype (float64 when float32 rounding of the
        # ~tau log(m n) potentials would swamp the offsets)
        tau = float(normalizer.tau)
        smax = _max_norm(qb) * float(np.linalg.norm(cols, axis=1).max())
        log_mn = math.log(max(2, qb.shape[0])) + math.log(max(2, cols.shape[0]))
        work = working_dtype(dtype, tau * log_mn + smax, 2 * smax / tau)
        if work is None:
            raise ValueError(f"tau={tau:g} is too extreme for Sinkhorn normalization with a {qb.shape[0]} x "
                             f"{cols.shape[0]} score matrix: use 1e-300 < tau <= "
                             f"{PRECISION_TARGET / (2.0 ** -53 * log_mn):.1e} (the potentials would lose all "
                             "precision or overflow even in float64)")
        g, done = _sinkhorn(normalizer, qb, cols, crows, work, check, block_bytes, split_every)
        g = torch.from_numpy(g).to(dtype)
        fitted["n_iter_"] = done
        n = t.shape[0]
        fitted["offsets_"] = g[:n].clone()
        if kind == "dbsn":
            fitted["bank_offsets_"] = g[n:].clone()
    offsets = fitted["offsets_"]
    if not bool(torch.isfinite(offsets).all()):
        raise ValueError(f"{type(normalizer).__name__} gives non-finite offsets in {dtype}: a parameter is too "
                         "extreme for this precision (see the method's docstring), or pass float64 embeddings")
    normalizer.targets_ = t.to(device)
    normalizer.device_ = device
    for key, value in fitted.items():
        setattr(normalizer, key, value.to(device) if isinstance(value, torch.Tensor) else value)
    return normalizer


def _dn(norm, t, qb, target_bank, d, check):
    """DN means (DN / NNN App. A3): full-bank means by Dask's tree ``sum``, or the seeded draws of the in-memory fit."""
    dtype = t.dtype
    gen = torch.Generator().manual_seed(int(norm.seed))
    lam = float(norm.lam)

    def mean(x, name):
        if not is_dask_array(x):  # in memory (the targets): the in-memory code, same draws
            return norm._mean(x, gen)
        if norm.n_samples is None:
            if check:
                _compute(x.map_blocks(partial(_check_block, check=check, name=name), dtype=np.int8,
                                      meta=np.empty((0, 0), dtype=np.int8), chunks=((1,) * len(x.chunks[0]), (1,))))
            s = _compute(x.astype(np.float64).sum(axis=0))
            return torch.from_numpy(s / x.shape[0]).to(dtype)
        n = min(int(norm.n_samples), x.shape[0])
        draws = []
        for _ in range(int(norm.n_repeats)):
            idx = torch.randperm(x.shape[0], generator=gen)[:n].numpy()
            rows = as_embeddings(_compute(x[idx]), name, device="cpu", dtype=dtype, check_normalized=check)
            draws.append(rows.mean(dim=0))
        return torch.stack(draws).mean(dim=0)

    query_mean = mean(qb, "query_bank")
    if target_bank is None:
        target_mean = mean(t, "targets")
    else:
        target_mean = mean(_as_bank(target_bank, "target_bank", d), "target_bank")
    offsets = -lam * (t @ query_mean) + lam * lam * (query_mean @ target_mean)
    return {"query_mean_": query_mean, "target_mean_": target_mean, "offsets_": offsets}


def _max_norm(bank) -> float:
    """Largest row norm of a Dask bank (one cheap pass; sets the working dtype like the in-memory kernels)."""
    norms = bank.map_blocks(_k_norm_max, dtype=np.float64, chunks=((1,) * len(bank.chunks[0]), (1,)),
                            meta=np.empty((0, 0), dtype=np.float64))
    return float(_compute(norms.max()))


def _k_norm_max(x):
    """Largest row norm of a chunk, computed like the in-memory kernels (``torch.linalg.vector_norm``)."""
    return np.full((1, 1), float(torch.linalg.vector_norm(_tensor(x), dim=1).max()))


def _check_block(x, check, name):
    as_embeddings(_tensor(x), name, device="cpu", check_normalized=check)
    return np.zeros((1, 1), dtype=np.int8)
