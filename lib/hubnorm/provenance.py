"""What a normalizer's offsets saw: fingerprints of its banks, and a no-leak certificate checkable from a saved file.

Every hubness correction fits offsets on *banks* (reference queries, reference targets). A bank that contains the
test queries (or near copies of them) makes the method query-aware (transductive): its gain is then not the gain a
deployed system gets. This module records, at fit time, what each bank was, and compares it with the test rows.

Fingerprint of a set of rows X (n x d), computed block by block (never more than a block of rows in memory):

* ``sha256``: the hash of the whole set (float32 bytes, C order, with its shape): names the bank's content;
* ``digests``: a 128-bit BLAKE2b digest per row of its float32 bytes (``-0.0`` read as ``0.0``): exact copies;
* ``signatures``: a ``bits``-bit sign sketch per row (SimHash, Charikar 2002): bit ``b`` of row ``x`` is
  ``[x . r_b > 0]`` for fixed Gaussian directions ``r_b`` (seeded; the same for every fingerprint of a dimension).
  Two rows at angle ``theta`` differ in a bit with probability ``theta / pi``, so the Hamming distance ``h`` estimates
  the cosine as ``cos(pi h / bits)``. A *near duplicate* is a pair with ``h <= bits * arccos(near_cosine) / pi``:
  estimated cosine at least ``near_cosine`` (default 0.98; with 512 bits, exact binomial figures: a pair at cosine
  0.995 is missed with probability 1.4e-4, one at 0.99 with 2.7%, one at 0.98 half the time; a pair at 0.95 is
  flagged with probability 0.14%). The sketch is a screen for copies and near copies, not a cosine measurement.

Rows of score matrices (a bank's scores against the gallery) are fingerprinted after subtracting each row's mean,
so that near duplicates are judged by the shape of their score rows. The threshold then applies to the cosine of
centred score rows, which runs higher than that of the embeddings behind them: close paraphrases (embedding
cosine about 0.97) can be flagged on score matrices, never missed copies.

:func:`certify` compares a fitted normalizer's bank fingerprints with the test queries (and the test targets with
the target bank): exact copies by digest, near duplicates by Hamming distance (faiss's binary flat index, the
field's exact Hamming search). :meth:`Certificate.save` writes it as JSON with its own sha256;
:func:`check_certificate` reads that file alone, verifies the hash, recomputes every finding from the stored
digests and signatures and raises ``ValueError`` when they disagree with the stored verdict. That is a check of
consistency (a file damaged, or edited in one place and not the others), not of authenticity: the hash is not a
signature, and someone who rewrites the whole file consistently is not detected.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
import mmap
import os
import re
import tempfile
from collections import Counter, OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

import numpy as np
import torch

from .kernels import DEFAULT_BLOCK_BYTES, block_rows, iter_blocks

FORMAT = "hubnorm-certificate/1"
#: bits of a row's sign sketch, and the seed of its directions
BITS, SEED = 512, 0
#: estimated cosine from which two rows count as near duplicates
NEAR_COSINE = 0.98
#: the comparisons a certificate makes: (bank, the test rows it is compared with)
PAIRS = (("query_bank", "queries"), ("target_bank", "targets"))


@functools.lru_cache(maxsize=2)
def _directions(dim: int, bits: int, seed: int) -> torch.Tensor:
    """The fixed Gaussian directions (dim x bits, float32) of the sign sketch: the same on every machine, made once
    per (dim, bits, seed) and kept for the next fingerprints (``dim * bits * 4`` bytes: 200 MB for the score rows of
    a 100,000-item gallery)."""
    r = torch.from_numpy(np.random.default_rng([seed, dim, bits]).standard_normal((dim, bits), dtype=np.float32))
    r.requires_grad_(False)
    return r


def _as_rows(x, name: str):
    """(n, d) array-like -> (``block(r0, r1)`` returning float32 numpy rows, n, d, whether reading is costly)."""
    if hasattr(x, "block") and hasattr(x, "shape"):          # a stored score matrix (hubnorm.scores.ScoreMatrix)
        n, d = x.shape
        return (lambda r0, r1: x.block(r0, r1, 0, d, torch.float32).cpu().numpy()), n, d, True
    if hasattr(x, "chunks") and hasattr(x, "compute") and getattr(x, "ndim", 0) == 2:   # a Dask array
        n, d = (int(v) for v in x.shape)
        return (lambda r0, r1: np.asarray(x[r0:r1].compute(), dtype=np.float32)), n, d, True
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        if not torch.is_floating_point(x):
            raise TypeError(f"{name} must hold floating-point values; got {x.dtype}")
    elif isinstance(x, np.ndarray):
        if not np.issubdtype(x.dtype, np.floating):
            raise TypeError(f"{name} must hold floating-point values; got {x.dtype}")
    else:
        raise TypeError(f"{name} must be a numpy array, a torch tensor or a score matrix of shape (n, d); "
                        f"got {type(x).__name__}")
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"{name} must be 2-D with at least one row; got shape {tuple(x.shape)}")
    n, d = x.shape
    if isinstance(x, torch.Tensor):
        return (lambda r0, r1: x[r0:r1].to(torch.float32).numpy()), n, d, False
    return (lambda r0, r1: np.asarray(x[r0:r1], dtype=np.float32)), n, d, not isinstance(x, np.ndarray) or \
        isinstance(x, np.memmap)


@dataclass
class Fingerprint:
    """What a set of rows was: its name, size, content hash, per-row digests and sign sketches (module docstring)."""

    name: str
    rows: int
    dim: int
    sha256: str
    digests: np.ndarray        # (rows, 16) uint8
    signatures: np.ndarray     # (rows, bits / 8) uint8
    kind: str = "embeddings"   # or "scores" (rows of a score matrix, each centred)
    bits: int = BITS
    #: score rows only: a weak reference to the test matrix whose gallery they are over (LocalEngine.gallery); in
    #: process only, not saved with a certificate
    over: Optional[object] = field(default=None, compare=False, repr=False)

    def summary(self) -> Dict[str, object]:
        """The short form shown beside a result: name, kind, rows and the first 12 hex digits of the content hash."""
        return {"name": self.name, "kind": self.kind, "rows": self.rows, "sha256": self.sha256[:12]}

    def to_json(self) -> Dict[str, object]:
        return {"name": self.name, "rows": self.rows, "dim": self.dim, "sha256": self.sha256, "kind": self.kind,
                "bits": self.bits, "digests": base64.b64encode(self.digests.tobytes()).decode("ascii"),
                "signatures": base64.b64encode(self.signatures.tobytes()).decode("ascii")}

    @classmethod
    def from_json(cls, d: Dict[str, object]) -> "Fingerprint":
        rows, bits = int(d["rows"]), int(d["bits"])
        dig = np.frombuffer(base64.b64decode(d["digests"]), dtype=np.uint8)
        sig = np.frombuffer(base64.b64decode(d["signatures"]), dtype=np.uint8)
        if dig.size != rows * 16 or sig.size != rows * bits // 8:
            raise ValueError(f"fingerprint {d['name']!r}: {rows} rows need {rows * 16} digest bytes and "
                             f"{rows * bits // 8} signature bytes; the file holds {dig.size} and {sig.size}")
        return cls(str(d["name"]), rows, int(d["dim"]), str(d["sha256"]), dig.reshape(rows, 16),
                   sig.reshape(rows, bits // 8), str(d["kind"]), bits)


#: fingerprints by content (the whole-set hash, kind, bits, seed): a bank fitted on again (every point of a study
#: refits on the same bank) is read once more to hash it, not sketched again; the last few sets only
_CACHE: "OrderedDict[tuple, Fingerprint]" = OrderedDict()
_CACHE_SIZE = 8


#: fingerprints of score matrices read from read-only memory maps, by the file's identity and state (device, inode,
#: size, modification time), the mapping's view (its first element's offset in the file, shape, strides, dtype: a map
#: of the same file opened again finds it) and the rows / columns a score
#: matrix selects from it: every evaluation of a study on the same stored test matrix would otherwise read and
#: sketch it again (an evaluation at 25,000 x 5,000: 2.1 s without the memo, 0.28 s with it, same run:
#: benchmarks/reports/score_certificate.md); a file rewritten since is read again
_STORED: "OrderedDict[tuple, Fingerprint]" = OrderedDict()


def _stored_key(x) -> Optional[tuple]:
    """The :data:`_STORED` key of ``x`` (without ``kind``, ``bits``, ``seed``): a score matrix over a memory map
    opened read-only (``mode="r"``: nobody writes through it); None for anything else."""
    data = getattr(x, "data", None)
    if not (hasattr(x, "block") and hasattr(x, "index") and isinstance(data, np.memmap) and data.mode == "r"
            and getattr(data, "filename", None)):
        return None
    position = _file_position(data)
    if position is None:
        return None
    st = os.stat(data.filename)
    index = tuple(None if i is None else hashlib.sha256(np.ascontiguousarray(i, dtype=np.int64)).hexdigest()
                  for i in x.index)
    return (str(data.filename), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, position,
            data.shape, data.strides, data.dtype.str, index, bool(getattr(x, "transposed", False)))


def _file_position(data: np.memmap) -> Optional[int]:
    """The byte offset in its file of a memory map's first element (a view of a map included): the same for every
    map of the file opened again, unlike the address the map lands at; None when numpy keeps no map for it."""
    mm = getattr(data, "_mmap", None)
    if mm is None:
        return None
    base = np.frombuffer(mm, np.uint8).ctypes.data
    start = data.offset - data.offset % mmap.ALLOCATIONGRANULARITY   # where numpy's map of the file begins
    return int(data.__array_interface__["data"][0] - base + start)


def fingerprint(x, name: str, *, kind: str = "embeddings", bits: int = BITS, seed: int = SEED,
                block_bytes: Optional[int] = None) -> Fingerprint:
    """The :class:`Fingerprint` of the rows of ``x`` (numpy, torch, a Dask array or a stored score matrix), block by
    block.

    ``kind="scores"``: rows of a score matrix, each centred on its mean before the sketch (the digests and the
    content hash are of the rows as given). The sketch is computed in float32: a projection within rounding of 0
    may take either sign, which moves a row by a bit or two, far inside the near-duplicate threshold."""
    if kind not in ("embeddings", "scores"):
        raise ValueError(f"kind must be 'embeddings' or 'scores'; got {kind!r}")
    if not isinstance(bits, int) or isinstance(bits, bool) or bits <= 0 or bits % 64:
        raise ValueError(f"bits must be a positive multiple of 64; got {bits!r}")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0; got {seed!r}")
    block, n, d, costly = _as_rows(x, name)
    stored = _stored_key(x)
    if stored is not None:
        stored += (kind, bits, seed)
        if stored in _STORED:
            _STORED.move_to_end(stored)
            return replace(_STORED[stored], name=name)
    size = block_rows(d + bits, 8, block_bytes)

    def blocks():
        for r0, r1 in iter_blocks(n, size):
            b = np.ascontiguousarray(block(r0, r1), dtype=np.float32)   # the rows themselves where they are float32
            if not np.isfinite(b).all():
                raise ValueError(f"{name} holds non-finite values (rows {r0}-{r1 - 1}); a fingerprint needs finite "
                                 "rows")
            zero = b == 0
            if zero.any():                        # -0.0 -> 0.0 (a copy only where a block holds a zero)
                b = np.where(zero, np.float32(0.0), b)
            yield r0, r1, b

    whole = hashlib.sha256(f"{n}x{d}:float32".encode())
    if not costly:   # rows in memory: hash first, and reuse the sketch of the same content (rows read from disk
        #              or a cluster are read once, hashed and sketched in the same pass, never reused)
        for _, _, b in blocks():
            whole.update(memoryview(b).cast("B"))   # the bytes, without a copy
        key = (whole.hexdigest(), kind, bits, seed)
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return replace(_CACHE[key], name=name)
    r = _directions(d, bits, seed)
    digests = np.empty((n, 16), dtype=np.uint8)
    signatures = np.empty((n, bits // 8), dtype=np.uint8)
    for r0, r1, b in blocks():     # rows read from disk or a cluster: one pass, hash included
        if costly:
            whole.update(memoryview(b).cast("B"))
        raw, width = memoryview(b).cast("B"), 4 * d     # each row's bytes in place, one digest call per row
        row_digests = b"".join([hashlib.blake2b(raw[o:o + width], digest_size=16).digest()
                                for o in range(0, (r1 - r0) * width, width)])
        digests[r0:r1] = np.frombuffer(row_digests, np.uint8).reshape(-1, 16)
        v = torch.from_numpy(b if b.flags.writeable else b.copy())   # the caller's read-only rows stay theirs
        if kind == "scores":
            v = v - v.mean(dim=1, keepdim=True)
        signatures[r0:r1] = np.packbits((v @ r > 0).numpy(), axis=1)
    key = (whole.hexdigest(), kind, bits, seed)
    digests.setflags(write=False)      # shared by every fingerprint of the same content (the cache)
    signatures.setflags(write=False)
    out = Fingerprint(name, n, d, key[0], digests, signatures, kind, bits)
    for memo, k in ((_CACHE, key), (_STORED, stored)):
        if k is not None:
            memo[k] = out
            while len(memo) > _CACHE_SIZE:
                memo.popitem(last=False)
    return out


def near_threshold(bits: int, near_cosine: float = NEAR_COSINE) -> int:
    """The largest Hamming distance between two ``bits``-bit sketches that counts as a near duplicate."""
    return int(math.floor(bits * math.acos(near_cosine) / math.pi + 1e-9))   # an exact integer stays itself


def compare(bank: Fingerprint, test: Fingerprint, *, near_cosine: float = NEAR_COSINE) -> Dict[str, object]:
    """Which test rows are in ``bank``: exact copies (same digest) and near duplicates (sketches within
    :func:`near_threshold`), with up to five example pairs ``(test_row, bank_row)`` of each."""
    for name, fp in (("bank", bank), ("test", test)):
        if not isinstance(fp, Fingerprint):
            raise TypeError(f"{name} must be a hubnorm.provenance.Fingerprint (from fingerprint(...)); got "
                            f"{type(fp).__name__}")
    if isinstance(near_cosine, bool) or not isinstance(near_cosine, (int, float, np.floating)) \
            or not 0.0 < near_cosine < 1.0:
        raise ValueError(f"near_cosine must be in (0, 1); got {near_cosine!r}")
    near_cosine = float(near_cosine)
    if (bank.dim, bank.bits, bank.kind) != (test.dim, test.bits, test.kind):
        raise ValueError(f"{bank.name} ({bank.kind}, dim {bank.dim}, {bank.bits} bits) and {test.name} "
                         f"({test.kind}, dim {test.dim}, {test.bits} bits) are not comparable: fingerprint both "
                         "with the same kind and bits, from rows of the same width")
    index = {}
    for i, row in enumerate(bank.digests):
        index.setdefault(row.tobytes(), i)   # a row copied twice into the bank: its first place
    exact = [(t, index[row.tobytes()]) for t, row in enumerate(test.digests) if row.tobytes() in index]
    dist, nearest = nearest_hamming(bank.signatures, test.signatures)
    limit = near_threshold(bank.bits, near_cosine)
    exact_rows = {t for t, _ in exact}
    near = [(t, int(nearest[t, 0])) for t in np.flatnonzero(dist[:, 0] <= limit).tolist() if t not in exact_rows]
    return {"bank": bank.name, "test": test.name, "test_rows": test.rows, "bank_rows": bank.rows,
            "exact": len(exact), "near": len(near), "near_cosine": near_cosine, "max_hamming": limit,
            "exact_examples": [list(p) for p in exact[:5]], "near_examples": [list(p) for p in near[:5]]}


def nearest_hamming(bank: np.ndarray, test: np.ndarray, *, backend: Optional[str] = None, device=None,
                    block_bytes: Optional[int] = None):
    """For every packed sketch of ``test`` (rows of uint8), the smallest Hamming distance to a row of ``bank`` and
    that row (the first such row on a tie): ``(dist, nearest)``, each ``(len(test), 1)``.

    Two backends, proved equal (ties included) by ``tests/test_provenance_marks.py``:

    * ``"faiss"``: faiss's exact binary flat index (bit counts of 64-bit words, on the CPU);
    * ``"torch"``: the sketches as +-1 vectors, whose inner product is ``bits - 2 * hamming``, so the nearest row
      is the largest entry of a matrix product on ``device``: the test rows a part at a time, the bank streamed
      past each part once in blocks (``block_bytes`` per score block).
      Every value is an integer of at most ``bits`` in float32: exact on any device.

    ``backend=None`` takes torch on a CUDA device when there is one (the product runs at GEMM speed there), else
    faiss when it is installed, else torch on the CPU (on 2 CPU cores about 3.5x faster than counting the bits in
    numpy and 12x slower than faiss: benchmarks/reports/hamming.md)."""
    if backend not in (None, "faiss", "torch"):
        raise ValueError(f"backend must be None, 'faiss' or 'torch'; got {backend!r}")
    bank, test = np.ascontiguousarray(bank, dtype=np.uint8), np.ascontiguousarray(test, dtype=np.uint8)
    if bank.ndim != 2 or test.ndim != 2 or bank.shape[1] != test.shape[1] or bank.shape[1] % 8 \
            or not len(bank):
        raise ValueError(f"bank and test must be packed sketches of the same multiple of 64 bits, bank non-empty; "
                         f"got shapes {bank.shape} and {test.shape}")
    from ._validation import resolve_device

    dev = resolve_device(device)      # None: CUDA when there is one
    if not len(test):
        return np.empty((0, 1), dtype=np.int64), np.empty((0, 1), dtype=np.int64)
    if backend is None:
        if dev.type != "cpu":
            backend = "torch"
        else:
            try:
                import faiss  # noqa: F401
                backend = "faiss"
            except Exception:   # faiss is optional (or a build that fails to load): torch gives the same answer
                backend = "torch"
    if backend == "faiss":
        import faiss

        flat = faiss.IndexBinaryFlat(bank.shape[1] * 8)
        flat.add(bank)
        dist, nearest = flat.search(test, 1)
        return dist.astype(np.int64), nearest.astype(np.int64)
    bits = bank.shape[1] * 8
    dist = np.empty((len(test), 1), dtype=np.int64)
    nearest = np.empty((len(test), 1), dtype=np.int64)
    budget = DEFAULT_BLOCK_BYTES if block_bytes is None else int(block_bytes)
    step_t = min(len(test), max(1, 2 * budget // bits))   # test rows unpacked at once (8 budgets of +-1 float32),
    step_b = max(1, budget // 4 // step_t)                 # so that the bank streams by once; scores <= budget
    shifts = torch.arange(7, -1, -1, dtype=torch.uint8, device=dev)   # np.packbits' bit order

    def signs(rows: np.ndarray) -> torch.Tensor:      # packed bits -> +-1 float32, unpacked on the device
        x = torch.tensor(rows, device=dev).unsqueeze(-1) >> shifts & 1   # a copy: the bytes may be read-only
        return x.reshape(len(rows), bits).to(torch.float32).mul_(2.0).sub_(1.0)

    for t0, t1 in iter_blocks(len(test), step_t):
        t = signs(test[t0:t1])
        best = torch.full((t1 - t0,), -float(bits) - 1.0, device=dev)
        arg = torch.zeros(t1 - t0, dtype=torch.int64, device=dev)
        for b0, b1 in iter_blocks(len(bank), step_b):
            v, j = (t @ signs(bank[b0:b1]).T).max(dim=1)   # max's index: the first largest entry of the block
            better = v > best                                # strictly: an earlier block keeps a tie
            best = torch.where(better, v, best)
            arg = torch.where(better, j + b0, arg)
        dist[t0:t1, 0] = ((bits - best) / 2).round().to(torch.int64).cpu().numpy()
        nearest[t0:t1, 0] = arg.cpu().numpy()
    return dist, nearest


def verdict(findings: List[Dict[str, object]], not_compared: Sequence[str] = ()) -> str:
    """One line: "no test row in any bank" (or "in the compared banks", naming what was not compared), or which
    banks hold how many test rows (query-aware)."""
    leaks = [f for f in findings if f["exact"] or f["near"]]
    if not leaks:
        if not_compared:
            return ("no test row in the compared banks; not compared: "
                    + "; ".join(str(n).split(":")[0] for n in not_compared))
        return "no test row in any bank"
    return "QUERY-AWARE: " + "; ".join(
        f"{f['exact']} of {f['test_rows']} test {f['test']} exactly and {f['near']} more as near duplicates "
        f"(cosine >= {f['near_cosine']}) in the {f['bank']}" for f in leaks)


@dataclass
class Certificate:
    """The fingerprints of the test rows and of the banks a normalizer was fitted on, what was compared, and the
    verdict. ``leak_free`` is True only when no test row is in any bank (exactly or as a near duplicate)."""

    method: str
    test: Dict[str, Fingerprint]
    banks: Dict[str, Fingerprint]
    findings: List[Dict[str, object]]
    not_compared: List[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return verdict(self.findings, self.not_compared)

    @property
    def leak_free(self) -> bool:
        return not any(f["exact"] or f["near"] for f in self.findings)

    def to_json(self) -> Dict[str, object]:
        body = {"format": FORMAT, "method": self.method, "verdict": self.verdict, "leak_free": self.leak_free,
                "findings": self.findings, "not_compared": self.not_compared,
                "test": {k: v.to_json() for k, v in self.test.items()},
                "banks": {k: v.to_json() for k, v in self.banks.items()}}
        body["sha256"] = _body_hash(body)
        return body

    def save(self, path: Union[str, os.PathLike]) -> Path:
        """Write the certificate as JSON (atomically: a temporary file renamed into place); returns the path."""
        path = Path(path)
        text = json.dumps(self.to_json(), indent=1, sort_keys=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path


def _body_hash(body: Dict[str, object]) -> str:
    return hashlib.sha256(json.dumps({k: v for k, v in body.items() if k != "sha256"}, sort_keys=True)
                          .encode()).hexdigest()


def of_engine(normalizer, engine) -> Optional[Dict[str, Fingerprint]]:
    """The fingerprints of the banks ``normalizer`` was fitted on through ``engine`` (its ``provenance_``): what
    the engine says of the banks the method uses (:meth:`hubnorm.blocks.Engine.fingerprints`: in-memory banks, a
    Dask engine's banks read a block at a time, or a query bank's stored score rows over the gallery, sketched when
    a certificate first asks); None when the engine cannot tell, or when the offsets were searched in an index
    built elsewhere (FaissNNN's ``bank_index``: its rows are not the bank this fit was given), so that
    :func:`certify` says so."""
    if getattr(normalizer, "bank_index", None) is not None:
        return None
    return engine.fingerprints([name for name in ("query_bank", "target_bank")
                                if getattr(normalizer, f"uses_{name}") != "unused"])


def _same_gallery(banks: Dict[str, Fingerprint], task) -> bool:
    """Whether the score rows among ``banks`` are over ``task``'s gallery (embeddings: always)."""
    over = [fp.over for fp in banks.values() if fp.over is not None]
    here = task.gallery()   # a task of score matrices: its test matrix; of embeddings: None
    return all(ref() is not None and here is not None and ref() is here() for ref in over)


def bank_fingerprints(normalizer) -> Dict[str, Fingerprint]:
    """The fingerprints a fitted ``normalizer`` recorded of its banks (``provenance_``); ValueError when it has none."""
    prov = getattr(normalizer, "provenance_", None)
    if prov is not None and any(callable(v) for v in prov.values()):   # deferred sketches of stored score rows
        prov = {k: v() if callable(v) else v for k, v in prov.items()}
        normalizer.provenance_ = prov
    if prov is None:
        raise ValueError(f"{type(normalizer).__name__} has no record of its banks (provenance_): fit it with "
                         "Normalizer.fit, RetrievalTask.fit (embeddings or score matrices) or "
                         "hubnorm.distributed.fit_offsets (a "
                         "normalizer fitted by a grid sweep, on a prebuilt bank index, or by hand, has none)")
    return prov


#: comparisons by content (bank and test hashes, names, kind, bits, threshold): every evaluation of a study that
#: refits on the same bank compares the same rows again, so the faiss search runs once per pair of contents
_COMPARED: "OrderedDict[tuple, Dict[str, object]]" = OrderedDict()
_COMPARED_SIZE = 64


def _sketch_hash(fp: Fingerprint) -> str:
    """A hash of ``fp``'s sign sketches: the same rows sketched with other directions (another seed) compare
    differently, so they are remembered apart."""
    return hashlib.blake2b(np.ascontiguousarray(fp.signatures).tobytes(), digest_size=16).hexdigest()


def _compare_once(bank: Fingerprint, test: Fingerprint, near_cosine: float) -> Dict[str, object]:
    """:func:`compare`, remembered by content (``_COMPARED``); a copy, so that a caller may change it."""
    key = (bank.sha256, bank.name, bank.kind, bank.bits, _sketch_hash(bank),
           test.sha256, test.name, test.kind, test.bits, _sketch_hash(test), repr(near_cosine))
    if key not in _COMPARED:
        _COMPARED[key] = compare(bank, test, near_cosine=near_cosine)
        while len(_COMPARED) > _COMPARED_SIZE:
            _COMPARED.popitem(last=False)
    _COMPARED.move_to_end(key)
    return json.loads(json.dumps(_COMPARED[key]))


def certify(normalizer, task, *, near_cosine: float = NEAR_COSINE) -> Certificate:
    """The no-leak certificate of a fitted ``normalizer`` on ``task`` (a RetrievalTask of embeddings or of scores): the
    test queries compared with the query bank, the test gallery with the target bank (module docstring)."""
    return _certify(normalizer, task, bank_fingerprints(normalizer), near_cosine)


def _certify(normalizer, task, banks: Dict[str, Fingerprint], near_cosine: float) -> Certificate:
    """:func:`certify` with the bank fingerprints given (those of a fit, or of a sweep's engine). Each bank is compared
    with the test rows of its own kind (:func:`_test_rows`): embeddings with the task's embeddings, score rows with
    its test score rows over the same gallery."""
    if not _same_gallery(banks, task):
        raise ValueError(f"{type(normalizer).__name__} was fitted on score rows over another gallery (another "
                         "score task's test matrix): its bank rows can only be compared with test rows over the "
                         "same gallery; certify it on the task it was fitted from")
    wanted = {"queries": "scores"} if task.kind == "scores" else dict.fromkeys(("queries", "targets"), "embeddings")
    wanted.update({t: banks[b].kind for b, t in PAIRS if b in banks})   # each bank's test rows, of its own kind
    for t, kind in wanted.items():
        if not _holds_rows(task, t, kind):
            raise ValueError(f"{type(normalizer).__name__} was fitted on {kind} but task holds no {t} {kind}: certify "
                             "it on a task of the kind it was fitted on")
    test = {t: _test_rows(task, t, kind) for t, kind in wanted.items()}   # each read once
    not_compared = []
    if task.kind == "scores" and normalizer.uses_target_bank != "unused" and "target_bank" not in banks:
        not_compared.append("target_bank: a score-matrix fit records the query bank's score rows only")
    findings = [_compare_once(banks[b], test[t], near_cosine) for b, t in PAIRS if b in banks]
    return Certificate(repr(normalizer), test, dict(banks), findings, not_compared)


def _holds_rows(task, name: str, kind: str) -> bool:
    """Whether the task holds test ``name`` rows of ``kind``: embeddings of them, or (``"scores"``) the test score
    rows of a task of score matrices (the queries)."""
    if kind == "embeddings":
        return getattr(task, name, None) is not None
    return name == "queries" and task.kind == "scores"


def _test_rows(task, name: str, kind: str) -> Fingerprint:
    """The fingerprint of the task's test ``name`` rows of ``kind`` (:func:`_holds_rows`)."""
    if kind == "embeddings":
        return fingerprint(getattr(task, name), name)
    return fingerprint(task.matrix("queries", "targets"), "queries", kind="scores")


def requested_certificate(normalizer, task, certificate) -> Optional[Certificate]:
    """What ``evaluate(..., certificate=...)`` adds: :func:`certify` when ``certificate`` is True, None when False;
    TypeError for a value that is not a bool, ValueError for the raw scores (``normalizer=None``: no bank)."""
    if not isinstance(certificate, (bool, np.bool_)):
        raise TypeError(f"certificate must be True or False; got {certificate!r}")
    if not certificate:
        return None
    if normalizer is None:
        raise ValueError("certificate=True certifies a fitted normalizer's banks; the raw scores (normalizer=None) "
                         "use no bank")
    return certify(normalizer, task)


# ------------------------------------------------------------------------------------------- marks of results
#: what a result's ``bank`` column says (:func:`bank_mark`): the test queries (or test targets), exactly or as near
#: duplicates, in a bank the offsets saw; no such row; no bank at all (the raw scores, or a method without one); a
#: fit with no record of its banks (a grid sweep's fit, FaissNNN on a prebuilt bank index)
QUERY_AWARE, QUERY_AGNOSTIC, NO_BANK, UNRECORDED = "QUERY-AWARE", "query-agnostic", "none", "unrecorded"
MARKS = (QUERY_AWARE, QUERY_AGNOSTIC, NO_BANK, UNRECORDED)


def bank_mark(normalizer, task, *, engine=None) -> str:
    """The mark a result of ``normalizer`` on ``task`` carries in its ``bank`` column, from the fit's record of its
    banks (not from what the caller meant to pass): :data:`QUERY_AWARE` when :func:`certify` finds a test query in
    the query bank or a test target in the target bank (exact copies or near duplicates), :data:`QUERY_AGNOSTIC`
    when it finds none, :data:`NO_BANK` for the raw scores (``None``) or a fit that used no bank, :data:`UNRECORDED`
    for a fit with no record (``provenance_`` None) and for a score matrix computed elsewhere (its banks unknown).
    Comparisons are remembered by content, so a study that evaluates many fits on the same bank compares its rows
    once. ``engine``: the engine a grid sweep fitted ``normalizer``'s settings through (a sweep's fits keep no
    record; its engine's banks are read instead).
    """
    if normalizer is None:
        return NO_BANK
    if isinstance(normalizer, (torch.Tensor, np.ndarray)):   # scores computed elsewhere: by whatever banks they saw
        return UNRECORDED
    prov = getattr(normalizer, "provenance_", None) if engine is None else of_engine(normalizer, engine)
    if prov is None:
        return UNRECORDED
    if not prov:
        return NO_BANK
    if engine is None:
        prov = bank_fingerprints(normalizer)   # deferred score rows resolved (and kept) once
    else:
        prov = {k: v() if callable(v) else v for k, v in prov.items()}
    if not _same_gallery(prov, task):   # score rows over another gallery: nothing to compare them with
        return UNRECORDED
    if not all(_holds_rows(task, t, prov[b].kind) for b, t in PAIRS if b in prov):   # no test rows of that kind
        return UNRECORDED
    return certificate_mark(_certify(normalizer, task, prov, NEAR_COSINE))


def certificate_mark(cert: "Certificate") -> str:
    """The mark a certificate gives: QUERY-AWARE when it found a test row in a bank; query-agnostic only when every
    bank the fit used was compared (a score-matrix fit's target bank is not: unrecorded); none without banks."""
    if not cert.leak_free:
        return QUERY_AWARE
    if not cert.banks:
        return NO_BANK
    return UNRECORDED if cert.not_compared else QUERY_AGNOSTIC


def rows_mark(bank, queries) -> str:
    """:func:`bank_mark` for a bank given as rows, where no normalizer keeps a record (a bias computed from a
    cross-encoder's scores of the bank rows, ``hubnorm.rerank``): :data:`QUERY_AWARE` when a row of ``queries`` is
    in ``bank`` exactly or as a near duplicate, else :data:`QUERY_AGNOSTIC`."""
    found = _compare_once(fingerprint(bank, "query_bank"), fingerprint(queries, "queries"), NEAR_COSINE)
    return QUERY_AWARE if found["exact"] or found["near"] else QUERY_AGNOSTIC


# The ledger of R@K values computed in this process (hubnorm.evaluation notes every one), and of those that came
# from a query-aware fit (hubnorm.evaluate notes them with their mark): a saved table that shows a value only a
# query-aware fit produced, in a row whose bank column does not say QUERY-AWARE, is refused (check_marked).
_RECALLS: "Counter[float]" = Counter()
_QUERY_AWARE_RECALLS: "Counter[float]" = Counter()


def note_recalls(values) -> None:
    """Record R@K values (percent) as computed (every call of :func:`hubnorm.recall_at_k` and its batch forms)."""
    _RECALLS.update(float(v) for v in values)


def note_result(result: Dict[str, object], mark: str) -> None:
    """Record an evaluation's R@K values under its ``mark`` (``hubnorm.evaluate``)."""
    if mark == QUERY_AWARE:
        _QUERY_AWARE_RECALLS.update(float(v) for k, v in result.items() if _RECALL_COLUMN.fullmatch(str(k)))


def clear_ledger() -> None:
    """Forget the recorded values (a notebook's ``setup`` starts its own ledger)."""
    _RECALLS.clear()
    _QUERY_AWARE_RECALLS.clear()


#: the columns of a saved table whose values are R@K numbers: ``R@K``, and the joined tables' ``this run`` and
#: ``normalized`` (hubnorm_companion.compare)
_RECALL_COLUMN = re.compile(r"R@\d+")
_VALUE_COLUMNS = ("this run", "normalized")


def unmarked_query_aware(table) -> List[str]:
    """The cells of ``table`` (a DataFrame with a ``bank`` column) that show an R@K value which, in this process,
    only a query-aware fit produced, in a row whose ``bank`` does not say query-aware (in any case): one line per
    cell. A value that any other computation also produced is not counted (it cannot be told apart); values rounded
    before the table was built are not recognised."""
    if "bank" not in table.columns:
        raise ValueError(f"the table has no 'bank' column; columns: {list(table.columns)}")
    out = []
    columns = [c for c in table.columns if _RECALL_COLUMN.fullmatch(str(c)) or c in _VALUE_COLUMNS]
    for i, row in enumerate(table[columns + ["bank"]].itertuples(index=False)):
        if QUERY_AWARE.lower() in str(row[-1]).lower():   # "QUERY-AWARE", or a label such as "test queries
            continue                                     # (query-aware)"
        for col, v in zip(columns, row[:-1]):
            if isinstance(v, (float, np.floating)) and only_query_aware(v):
                out.append(f"row {i}, column {col!r}: {float(v)!r} (bank {row[-1]!r})")
    return out


def only_query_aware(value) -> bool:
    """Whether ``value`` is an R@K number that, in this process, only query-aware fits produced (every time it was
    computed, it came from an evaluation marked :data:`QUERY_AWARE`)."""
    v = float(value)
    return bool(_QUERY_AWARE_RECALLS[v]) and _QUERY_AWARE_RECALLS[v] == _RECALLS[v]


def check_certificate(path: Union[str, os.PathLike]) -> Certificate:
    """Read a saved certificate, verify its hash, recompute every finding from the stored fingerprints alone, and
    return it; ValueError when the file was altered or its findings do not follow from its fingerprints."""
    path = Path(path)
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"certificate {path}: cannot be read as JSON ({e})") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise ValueError(f"certificate {path}: not a {FORMAT} file")
    if body.get("sha256") != _body_hash(body):
        raise ValueError(f"certificate {path}: its content does not match its sha256: the file was altered")
    try:
        test = {k: Fingerprint.from_json(v) for k, v in body["test"].items()}
        banks = {k: Fingerprint.from_json(v) for k, v in body["banks"].items()}
        stored, not_compared = list(body["findings"]), list(body["not_compared"])
        kinds = {fp.kind for fp in test.values()}
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        raise ValueError(f"certificate {path}: a part is missing or malformed ({type(e).__name__}: {e})") from None
    if not test or not set(test) <= {"queries", "targets"} or not kinds <= {"scores", "embeddings"} \
            or ("targets" in test and test["targets"].kind != "embeddings"):
        raise ValueError(f"certificate {path}: its test rows are {sorted(test)} of kind {sorted(kinds)}; a "
                         "certificate holds the test queries (embeddings or score rows) and may hold the test targets (embeddings)")
    cosines = {f.get("near_cosine") for f in stored}
    if len(cosines) > 1:
        raise ValueError(f"certificate {path}: its findings use different near-duplicate thresholds")
    cos = cosines.pop() if cosines else NEAR_COSINE
    redone = [compare(banks[b], test[t], near_cosine=cos) for b, t in PAIRS if b in banks and t in test]
    if json.loads(json.dumps(redone)) != stored or verdict(redone, not_compared) != body["verdict"] \
            or body.get("leak_free") is not (not any(f["exact"] or f["near"] for f in redone)):
        raise ValueError(f"certificate {path}: its findings do not follow from its fingerprints")
    return Certificate(body["method"], test, banks, redone, not_compared)
