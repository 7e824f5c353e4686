"""The Dask engine: any method's offsets over banks that do not fit one machine, computed on a Dask cluster.

Every method states its fit as reductions over blocks of score matrices (:mod:`hubnorm.blocks`, in the method's
own file); this engine runs them over Dask chunks without knowing which method it serves. A reduction over the
bank axis is one :func:`dask.array.blockwise` pass (one task per bank chunk x target chunk: the reduction's
``reduce_chunk`` on that chunk pair, fused with the task that loads the bank chunk), merged by a tree of the
reduction's ``merge`` (fan-in ``split_every``) and finalised on the client; a reduction over the target axis
(a DIS activation set, Sinkhorn's row half-step) leaves its per-bank-row result on the cluster beside the bank.

========  =====================================================  ==========================================
method    partial result of one bank chunk (x one target chunk)  merge
========  =====================================================  ==========================================
NNN/CSLS  top-k similarities per target (``TopK``)                concatenate, keep the k largest
DN        column sums of the bank (``Mean``)                     sum
IS/DIS    logsumexp_b(b . t / tau) per target (``LogMeanExp``)   logaddexp (float64)
DIS       top-k targets per bank row (activation set)            keep the k largest across target chunks
DualIS    one ``LogMeanExp`` per bank (query bank, target bank)  logaddexp (float64)
SN, DBSN  one Sinkhorn iteration (``SinkhornIteration``)         logaddexp, one reduction per iteration
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

Sinkhorn: when all targets fit one chunk, an iteration is one pass (each task computes its rows' ``f`` from ``g``
and its partial column logsumexp: one reduction per iteration). Otherwise each half-step is one reduction: ``f``
by a logaddexp over target chunks (persisted beside the bank), then ``g`` by a logaddexp over bank chunks. The
bank is re-read once per pass; nothing of the bank is persisted.

Exact: the per-chunk kernels are the in-memory ones (``reduce_chunk`` of each reduction); only the order of
floating-point merges differs (float64 merges for the logsumexps).
"""

from __future__ import annotations

import copy
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

from .blocks import Chunk, Embeddings, concat
from .engine import LocalEngine
from .provenance import fingerprint
from ._validation import as_embeddings, check_positive_int, resolve_device

__all__ = ["fit_offsets", "open_bank", "save_bank_shards", "NpyShards", "DaskEngine", "DEFAULT_CHUNK_BYTES",
           "DEFAULT_TARGET_CHUNK_BYTES"]

#: Default bytes of one bank chunk made by :func:`open_bank` (rows x d x itemsize).
DEFAULT_CHUNK_BYTES = 64 * 2**20

#: Targets (or DBSN's ``[targets ; target_bank]``) are cut into row chunks of at most this many bytes;
#: each chunk is persisted on the cluster once and fetched by each worker at most once per pass.
DEFAULT_TARGET_CHUNK_BYTES = 256 * 2**20


def is_dask_array(x) -> bool:
    """Duck-typed: an object of a ``dask`` module (no Dask import needed to ask)."""
    return type(x).__module__.split(".")[0] == "dask"


# ================================================================================================ bank stores
def _file_stamp(path: str, sample: int = 1 << 16) -> tuple:
    """(size, mtime_ns, inode, blake2b of the first and last ``sample`` bytes) of a file."""
    import hashlib

    st = os.stat(path)
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        h.update(fh.read(sample))
        if st.st_size > sample:
            fh.seek(max(sample, st.st_size - sample))
            h.update(fh.read(sample))
    return (st.st_size, st.st_mtime_ns, st.st_ino, h.hexdigest())


class NpyShards:
    """Rows of several ``.npy`` files of shape ``(rows_i, d)`` seen as one read-only ``(sum rows_i, d)`` array.

    Picklable (it holds paths only); ``__getitem__`` memory-maps the shards it touches and copies out the rows
    asked for, so a Dask task that reads a chunk holds that chunk only.

    Integrity: each shard's size, modification time (ns), inode and a checksum of its first and last 64 KiB are
    recorded when it is opened and checked before every read; a shard changed (rewritten, truncated, replaced)
    after it was opened is refused with an error naming it, never read as a mix of the old and new bank.
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
        self.stamps = [_file_stamp(p) for p in self.paths]
        self.starts = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
        self.shape = (int(self.starts[-1]), int(dim))
        self.dtype = np.dtype(dtype)
        self.ndim = 2

    def __len__(self):
        return self.shape[0]

    def _verify(self, s: int) -> None:
        try:
            now = _file_stamp(self.paths[s])
        except OSError as exc:
            raise RuntimeError(f"bank shard {self.paths[s]} can no longer be read ({exc}): it was removed or moved "
                               "after open_bank(); open the bank again") from exc
        if now != self.stamps[s]:
            what = [name for name, a, b in zip(("size", "modification time", "inode", "checksum"), self.stamps[s], now)
                    if a != b]
            raise RuntimeError(f"bank shard {self.paths[s]} changed after it was opened ({', '.join(what)} differ): "
                               "the bank would mix old and new rows. Do not rewrite shards during a fit; open the bank "
                               "again (hubnorm.distributed.open_bank) once they are written")

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
                self._verify(s)
                parts.append(np.array(np.load(self.paths[s], mmap_mode="r")[a:b, cols]))
                self._verify(s)   # and unchanged while it was read
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
    name = "hubnorm-bank-" + dask.base.tokenize(store.paths, store.stamps, chunk_rows)
    # inline_array: the (small, picklable) store goes into each read task, which Dask fuses with the kernel
    # fancy=False: the store takes no index arrays (Dask reads row slices and indexes them itself)
    return da.from_array(store, chunks=(chunk_rows, store.shape[1]), name=name,
                         lock=False, asarray=True, inline_array=True, fancy=False,  # pragma: no mutate
                         meta=np.empty((0, 0), dtype=store.dtype),  # pragma: no mutate
                         )


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


# ======================================================================================= the tasks
# They run on the workers: numpy in, the reduction's own reduce_chunk inside, a partial result out (in a 1 x 1 x 1
# object array, so that any partial -- a tensor, a TopKResult -- travels through Dask's reductions).

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


def _box(p, ndim=3):
    out = np.empty((1,) * ndim, dtype=object)
    out[(0,) * ndim] = p
    return out


def _k_scores(bank_blk, cols_blk, r0, c0, *terms, red, dtype, check, name, block_bytes, has_rt, has_ct):
    """The partial of one bank chunk x one column chunk: ``red.reduce_chunk`` on them (the bank chunk is checked
    on the first pass over it). The trailing embedding axis is kept (size 1) so that Dask fuses this task with the
    one that loads the bank chunk."""
    b = _block(bank_blk, dtype, check, name)
    c = _tensor(cols_blk).to(dtype)
    it = iter(terms)
    rt = _tensor(next(it)) if has_rt else None
    ct = _tensor(next(it)) if has_ct else None
    chunk = Chunk(b, c, int(r0[0]), int(c0[0]), rt, ct, block_bytes)
    return _box(red.reduce_chunk(chunk))


def _k_rows(bank_blk, r0, *, red, dtype, check, name, block_bytes):
    """The partial of one chunk of an embedding matrix (a reduction of the embeddings themselves: DN's means)."""
    b = _block(bank_blk, dtype, check, name)
    return _box(red.reduce_chunk(Chunk(b, None, int(r0[0]), block_bytes=block_bytes)), 2)


def _keep(x, axis, keepdims):
    return x


# Dask graph metadata (``dtype``, ``meta``, ``adjust_chunks``, locking, task inlining, the tree's fan-in) is marked
# ``# pragma: no mutate``: no result depends on it (the mutation run of 2026-12-03 showed every change to it survive:
# Dask uses it to describe and shape the graph), so mutmut makes no mutant there; scripts/mutation.py counts and
# lists these lines.
# (A trailing pragma must end a line *inside* the brackets: on a statement's last line mutmut applies it to the
# statement's first line.)
def _per_block(func, index, *args):
    """``da.blockwise`` of a task that returns one object (a reduction's partial) per block of ``index``."""
    # pragma: no mutate block (func, index and args pass straight through; the rest describes the graph)
    return da.blockwise(func, index, *args, adjust_chunks=dict.fromkeys(index, 1), dtype=object,
                        meta=np.empty((0,) * len(index), dtype=object))


def _merge_tree(parts, red, axis, split_every):
    """The tree reduction of an object array of partials along ``axis`` by the reduction's own ``merge``."""
    merge = partial(_merge, red=red)
    return da.reduction(parts, _keep, merge, combine=merge, axis=axis, keepdims=True, concatenate=True,
                        split_every=split_every, dtype=object,  # pragma: no mutate
                        meta=np.empty((0,) * parts.ndim, dtype=object),  # pragma: no mutate
                        )


def _merge(x, axis, keepdims, red):
    """Merge every partial along ``axis`` of an object array into one (the reduction's own ``merge``)."""
    axis = axis[0] if isinstance(axis, tuple) else axis
    items = np.moveaxis(np.asarray(x, dtype=object), axis, 0)
    acc = None
    for p in items.reshape(items.shape[0], -1)[:, 0]:
        acc = p if acc is None else red.merge(acc, p)
    out = np.empty(items.shape[1:], dtype=object)
    out.reshape(-1)[0] = acc
    return np.expand_dims(out, axis) if keepdims else out


def _k_finalize_rows(x, *, red, n):
    """Finalise the merged partial of one bank chunk of a per-row reduction (on the worker, beside the bank)."""
    return _box(red.finalize(x.reshape(-1)[0], n))


def _k_terms(x):
    """A per-row result (a float tensor) of one bank chunk as a float64 numpy vector (side terms of a reduction)."""
    return x.reshape(-1)[0].to(torch.float64).numpy()


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


def _compute(x):
    (out,) = dask.compute(x)
    return np.array(out)  # a writable copy of a small result


class DaskRows:
    """A per-bank-row result kept on the cluster beside the bank (one object per bank chunk): hand it back to the
    engine as a reduction's ``row_terms``, or ask ``engine.to_tensor`` for it."""

    def __init__(self, parts, bank):
        self.parts, self.bank = parts, bank


class DaskEngine:
    """Runs a method's reductions (:mod:`hubnorm.blocks`) over Dask chunks; it never knows which method.

    Inputs: the targets in memory (a CPU tensor: they are broadcast to the workers in row chunks), the banks as
    Dask arrays (never gathered, except DBSN-like column inputs, which must fit the client). Reductions whose
    inputs are all in memory run on a :class:`~hubnorm.engine.LocalEngine`.
    """

    def __init__(self, targets: torch.Tensor, banks, *, check: bool, block_bytes=None, target_chunk_rows=None,
                 split_every=None):
        self.targets = targets
        self.dtype, self.device = targets.dtype, torch.device("cpu")
        self.d = targets.shape[1]
        self.banks = {name: _as_bank(x, name, self.d) for name, x in banks.items() if x is not None}
        self.check = check
        self.block_bytes = block_bytes
        self.target_chunk_rows = target_chunk_rows
        self.split_every = split_every
        self.sweep_bytes = None
        self.local = LocalEngine({"targets": targets}, block_bytes=block_bytes)
        self._checked = set()
        self._norms = {}
        self._gathered = {}
        self._broadcasts = {}

    # ------------------------------------------------------------------ what the inputs are
    def has(self, name):
        return name == "targets" or name in self.banks

    def size(self, name):
        if name == "targets":
            return int(self.targets.shape[0])
        x = self.banks.get(name)
        return None if x is None else int(x.shape[0])

    def cannot_read(self, source) -> Optional[str]:
        """Every input of a method can be read from the banks' chunks (None): see
        :meth:`hubnorm.engine.LocalEngine.cannot_read`."""
        return None

    def embeddings(self):
        """The inputs held as whole in-memory embeddings: the targets (the banks stay Dask chunks)."""
        return {"targets": self.targets}

    def release(self):
        """The end of a fit: nothing is kept in memory beyond what later fits on this engine reuse."""

    def fingerprints(self, names):
        """The fingerprints of the banks among ``names``, read a block at a time (one more pass over each)."""
        return {name: fingerprint(self.banks[name], name, block_bytes=self.block_bytes)
                for name in names if name in self.banks}

    def _gather(self, name) -> torch.Tensor:
        """A bank gathered on the client, checked (DBSN's target bank joins the Sinkhorn columns)."""
        if name == "targets":
            return self.targets
        if name not in self._gathered:
            self._gathered[name] = as_embeddings(_compute(self.banks[name]), name, device="cpu", dtype=self.dtype,
                                                 check_normalized=self.check)
        return self._gathered[name]

    def tensor(self, names):
        names = (names,) if isinstance(names, str) else tuple(names)
        parts = [self._gather(n) for n in names]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)

    def max_norm(self, name) -> float:
        if name not in self.banks:
            return float(torch.linalg.vector_norm(self._gather(name), dim=1).max())
        if name not in self._norms:
            norm = _max_norm(self.banks[name])
            if not math.isfinite(norm):   # a NaN/inf row: say so, instead of a misleading precision error later
                raise ValueError(f"{name} has a non-finite row (NaN or inf) in its shards: clean or re-export the "
                                 "embeddings (every row must be a finite, L2-normalised vector)")
            self._norms[name] = norm
        return self._norms[name]

    def score_bound(self, source) -> float:
        return self.max_norm(source.rows) * max(self.max_norm(c) for c in source.col_names)

    def take_rows(self, name, idx):
        if name not in self.banks:
            return self.local.take_rows(name, idx)
        rows = _compute(self.banks[name][idx.numpy()])
        return as_embeddings(rows, name, device="cpu", dtype=self.dtype, check_normalized=self.check)

    def _col_rows(self, n_cols) -> int:
        return _target_rows(n_cols, self.d, self.targets.element_size(), self.target_chunk_rows)

    def spans(self, names) -> bool:
        names = (names,) if isinstance(names, str) else tuple(names)
        n = sum(self.size(x) for x in names)
        return self._col_rows(n) >= n

    def shared(self, key, nbytes, budget=None):
        return None

    def to_tensor(self, value):
        if isinstance(value, DaskRows):
            parts = _compute(value.parts)
            return concat([p for p in parts.reshape(-1)])
        return value

    # ------------------------------------------------------------------ running reductions
    def _first_pass(self, name):
        """``check_normalized`` for the first pass over a bank (its chunks are checked there), None afterwards."""
        if name in self._checked:
            return None
        self._checked.add(name)
        return self.check

    def _broadcast_cols(self, names):
        if names not in self._broadcasts:
            cols = self.tensor(names).numpy()
            self._broadcasts[names] = _broadcast(cols, self._col_rows(cols.shape[0]))
        else:
            _spread(self._broadcasts[names])  # Dask may have dropped the extra copies between passes
        return self._broadcasts[names]

    def reduce(self, red):
        src = red.source
        names = src.names()
        if not any(n in self.banks for n in names):
            return self.local.reduce(red)
        red.prepare(self)
        shipped = copy.copy(red)  # what the tasks need: not the side vectors (they travel as chunks)
        shipped.row_terms = shipped.col_terms = None
        if isinstance(src, Embeddings):
            bank = self.banks[src.name]
            task = partial(_k_rows, red=shipped, dtype=self.dtype, check=self._first_pass(src.name), name=src.name,
                           block_bytes=self.block_bytes)
            parts = _per_block(task, "id", bank, "id", _starts(bank), "i")
            merged = _merge_tree(parts, shipped, 0, self.split_every)
            return red.finalize(_compute(merged).reshape(-1)[0], bank.shape[0])
        if src.rows not in self.banks:
            raise ValueError(f"the Dask engine reduces score matrices whose rows are a bank; got {src}")
        bank = self.banks[src.rows]
        cols = self._broadcast_cols(src.col_names)
        args = [bank, "id", cols, "jd", _starts(bank), "i", _starts(cols), "j"]
        has_rt, has_ct = red.row_terms is not None, red.col_terms is not None
        if has_rt:
            args += [self._row_terms(red.row_terms, bank), "i"]
        if has_ct:
            ct = red.col_terms.detach().cpu().numpy() if isinstance(red.col_terms, torch.Tensor) else red.col_terms
            args += [da.from_array(np.ascontiguousarray(ct), chunks=(cols.chunks[0],)), "j"]
        task = partial(_k_scores, red=shipped, dtype=self.dtype, check=self._first_pass(src.rows), name=src.rows,
                       block_bytes=self.block_bytes, has_rt=has_rt, has_ct=has_ct)
        parts = _per_block(task, "ijd", *args)
        merged = _merge_tree(parts, shipped, red.axis, self.split_every)
        if red.axis == 0:  # one result per column: small, finalised on the client
            p = concat(list(_compute(merged).reshape(-1)))
            return red.finalize(p, bank.shape[0])
        # one result per bank row: finalised on the workers, kept beside the bank
        n = cols.shape[0]
        rows = merged.map_blocks(partial(_k_finalize_rows, red=shipped, n=n),
                                 dtype=object, meta=np.empty((0, 0, 0), dtype=object),  # pragma: no mutate
                                 )
        return DaskRows(dask.persist(rows)[0], bank)

    def _row_terms(self, terms, bank):
        if isinstance(terms, DaskRows):
            return terms.parts.map_blocks(_k_terms, chunks=(bank.chunks[0],), drop_axis=[1, 2],
                                          dtype=np.float64, meta=np.empty((0,), dtype=np.float64),  # pragma: no mutate
                                          )
        t = terms.detach().cpu().numpy() if isinstance(terms, torch.Tensor) else np.asarray(terms)
        return da.from_array(np.ascontiguousarray(t, dtype=np.float64), chunks=(bank.chunks[0],))

    def iterate(self, it):
        return it.run(self)


def _starts(arr):
    """The row indices of ``arr`` as a Dask vector chunked like its rows: a task reads its chunk's first row there
    (generated inside the task, nothing is stored)."""
    return da.arange(arr.shape[0], chunks=(arr.chunks[0],), dtype=np.int64)


def fit_offsets(normalizer, targets, query_bank=None, target_bank=None, *, target_chunk_rows: Optional[int] = None,
                split_every: Optional[int] = None):
    """Fit ``normalizer`` (any method that states its fit as block reductions: every registered method) with its
    bank reductions run by Dask.

    ``normalizer.fit(targets, query_bank=<dask array or folder>)`` calls this; call it directly to set
    ``target_chunk_rows`` (targets per broadcast chunk; default: 256 MiB worth) or ``split_every`` (fan-in of the
    tree reduction; Dask's default when None). Banks may be Dask arrays, folders of ``.npy`` shards, or in-memory
    arrays (then cut into 64 MiB chunks). Per-task arithmetic runs on the workers' CPUs; the fitted tensors are
    placed on the normalizer's ``device``. Returns the fitted normalizer.
    """
    if not hasattr(normalizer, "fit_engine"):
        raise TypeError(f"fit_offsets fits a hubnorm Normalizer (every registered method states its fit as block "
                        f"reductions); got {type(normalizer).__name__}")
    if split_every is not None:
        split_every = check_positive_int(split_every, "split_every")
        if split_every < 2:
            raise ValueError(f"split_every must be >= 2 (the fan-in of the tree reduction); got {split_every}")
    normalizer.check_params()   # before any file is read (the lifecycle checks again, with the engine)
    given = {"query_bank": query_bank, "target_bank": target_bank}
    normalizer.check_required(lambda name: given[name] is not None)
    device = resolve_device(getattr(normalizer, "device", None))
    check = bool(getattr(normalizer, "check_normalized", True))
    t = as_embeddings(targets, "targets", device="cpu", check_normalized=check)
    banks = {"query_bank": query_bank if normalizer.uses_query_bank != "unused" else None,
             "target_bank": target_bank if normalizer.uses_target_bank != "unused" else None}
    engine = DaskEngine(t, banks, check=check, block_bytes=getattr(normalizer, "block_bytes", None),
                        target_chunk_rows=target_chunk_rows, split_every=split_every)
    return normalizer.fit_engine(engine, targets=t, device=device)


def _max_norm(bank) -> float:
    """Largest row norm of a Dask bank (one cheap pass; sets the working dtype like the in-memory kernels)."""
    norms = bank.map_blocks(_k_norm_max, chunks=((1,) * len(bank.chunks[0]), (1,)),
                            dtype=np.float64, meta=np.empty((0, 0), dtype=np.float64),  # pragma: no mutate
                            )
    return float(_compute(norms.max()))


def _k_norm_max(x):
    """Largest row norm of a chunk, computed like the in-memory kernels (``torch.linalg.vector_norm``)."""
    return np.full((1, 1), float(torch.linalg.vector_norm(_tensor(x), dim=1).max()))
