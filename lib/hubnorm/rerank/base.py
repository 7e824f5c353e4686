"""The cross-encoder interface and its on-disk pair-score cache.

A cross-encoder scores (query, target) *pairs* jointly (cross-attention over both inputs), unlike a bi-encoder
that embeds each side once. It is constructed over a fixed query collection and a fixed target collection and
scores pairs of integer indices into them::

    scores = ce.score_pairs(query_ids, target_ids)     # (p,) float64, higher = more relevant

Every item has a stable string key (``query_keys`` / ``target_keys``: an image file name, a content hash, a
caption id ...) and the encoder has a ``model_id``; a :class:`PairScoreCache` stores scores under
``(model_id, query key, target key)`` so that a rerun (another notebook run, another ``k``, another first stage
that retrieves the same candidates) never recomputes a pair. Subclasses implement only ``_score_uncached``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import struct
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple, Union

import numpy as np

from ..data.cache import atomic_write_bytes

__all__ = ["CrossEncoder", "PairScoreCache", "CacheCorruptError", "check_pair_ids"]

#: File magic and format version of the cache files.
_MAGIC = b"HNPAIRS1"


class CacheCorruptError(RuntimeError):
    """A pair-score cache file failed verification (truncated, edited, wrong model, bad checksum)."""


def check_pair_ids(query_ids, target_ids, n_queries: int, n_targets: int) -> Tuple[np.ndarray, np.ndarray]:
    """Validate two parallel 1-D integer index arrays (one pair per position); returns them as int64."""
    q = np.asarray(query_ids)
    t = np.asarray(target_ids)
    for name, a in (("query_ids", q), ("target_ids", t)):
        if a.ndim != 1:
            raise ValueError(f"{name} must be 1-D (one entry per pair); got shape {a.shape}")
        if a.size and not np.issubdtype(a.dtype, np.integer):
            raise TypeError(f"{name} must hold integer indices; got dtype {a.dtype}")
    if q.shape != t.shape:
        raise ValueError(f"query_ids and target_ids must have the same length (one pair per position); "
                         f"got {q.size} and {t.size}")
    q = q.astype(np.int64, copy=False)
    t = t.astype(np.int64, copy=False)
    if q.size:
        if q.min() < 0 or q.max() >= n_queries:
            raise ValueError(f"query_ids must lie in [0, {n_queries}); got range [{q.min()}, {q.max()}]")
        if t.min() < 0 or t.max() >= n_targets:
            raise ValueError(f"target_ids must lie in [0, {n_targets}); got range [{t.min()}, {t.max()}]")
    return q, t


class PairScoreCache:
    """Pair scores of one model on disk: ``<directory>/<model slug>-<sha1(model_id)[:12]>.pairs``.

    File layout: ``HNPAIRS1`` magic, a 4-byte little-endian header length, a JSON header (model id, number of
    pairs, SHA-256 of the payload) and the payload (an ``.npz`` of the query keys, target keys and float64
    scores, no pickles). Writes go to a temporary file in the same folder, are flushed and fsynced, and replace
    the old file atomically (``os.replace``), so a crash never leaves a half-written cache. Loading verifies the
    magic, the header, the model id, the checksum and the array lengths and raises :class:`CacheCorruptError`
    on any mismatch (delete the file named in the message to start over).
    """

    def __init__(self, directory: Union[str, os.PathLike], model_id: str):
        if not isinstance(model_id, str) or not model_id:
            raise ValueError("model_id must be a non-empty string")
        self.directory = Path(directory)
        self.model_id = model_id
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model_id)[:60]
        digest = hashlib.sha1(model_id.encode()).hexdigest()[:12]
        self.path = self.directory / f"{slug}-{digest}.pairs"
        self._scores: Dict[Tuple[str, str], float] = {}
        self._dirty = False
        if self.path.exists():
            self._scores = self._read(self.path, model_id)

    def __len__(self) -> int:
        return len(self._scores)

    def get(self, qkey: str, tkey: str) -> Optional[float]:
        return self._scores.get((qkey, tkey))

    def put_many(self, qkeys: Sequence[str], tkeys: Sequence[str], scores: Sequence[float]) -> None:
        for a, b, s in zip(qkeys, tkeys, scores):
            self._scores[(a, b)] = float(s)
        self._dirty = True

    # ------------------------------------------------------------------ file format
    def flush(self) -> None:
        """Write the cache atomically if it changed since the last write."""
        if not self._dirty:
            return
        keys = list(self._scores)
        buf = io.BytesIO()
        np.savez(buf, qkeys=np.array([k[0] for k in keys], dtype=str), tkeys=np.array([k[1] for k in keys], dtype=str),
                 scores=np.array([self._scores[k] for k in keys], dtype=np.float64))
        payload = buf.getvalue()
        header = json.dumps({"model_id": self.model_id, "n_pairs": len(keys), "format": 1,
                             "sha256": hashlib.sha256(payload).hexdigest()}).encode()
        atomic_write_bytes(self.path, _MAGIC + struct.pack("<I", len(header)) + header + payload)
        self._dirty = False

    @staticmethod
    def _read(path: Path, model_id: str) -> Dict[Tuple[str, str], float]:
        def bad(why):
            return CacheCorruptError(f"pair-score cache {path} is corrupt ({why}); delete it to recompute the scores")

        data = path.read_bytes()
        if len(data) < len(_MAGIC) + 4 or data[:len(_MAGIC)] != _MAGIC:
            raise bad("wrong magic bytes: not a hubnorm pair cache or truncated")
        (hlen,) = struct.unpack("<I", data[len(_MAGIC):len(_MAGIC) + 4])
        start = len(_MAGIC) + 4
        try:
            header = json.loads(data[start:start + hlen].decode())
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise bad("unreadable header") from None
        payload = data[start + hlen:]
        if header.get("model_id") != model_id:
            raise bad(f"it belongs to model {header.get('model_id')!r}, not {model_id!r}")
        if hashlib.sha256(payload).hexdigest() != header.get("sha256"):
            raise bad("checksum mismatch")
        try:
            with np.load(io.BytesIO(payload), allow_pickle=False) as z:
                qk, tk, sc = z["qkeys"], z["tkeys"], z["scores"]
        except Exception as exc:  # noqa: BLE001 - any decoding failure means corruption
            raise bad(f"payload unreadable: {exc}") from None
        if not (len(qk) == len(tk) == len(sc) == header.get("n_pairs")):
            raise bad("array lengths disagree with the header")
        if not np.all(np.isfinite(sc)):
            raise bad("non-finite scores")
        return {(str(a), str(b)): float(s) for a, b, s in zip(qk.tolist(), tk.tolist(), sc.tolist())}


class CrossEncoder(ABC):
    """Scores (query, target) pairs given as index arrays into fixed query and target collections.

    Attributes set by subclasses:
        model_id: identifies the scoring function (weights, config, seed); part of every cache key.
        query_keys / target_keys: a stable string key per item (used by the cache). Two items with the same key
            are taken to be the same item (content keys such as a caption's text hash may repeat).
        kind: ``"real"`` for a neural model, ``"simulated"`` for a synthetic stand-in (label results with it).
        cost_per_pair_s: measured seconds per pair on the reference machine when known (cost models), else None.
    Counters: ``n_pairs_requested`` (all pairs asked for), ``n_pairs_computed`` (cache misses actually run
    through the model), ``n_model_calls`` (calls of ``_score_uncached``), ``compute_seconds``.
    """

    model_id: str = "cross-encoder"
    kind: str = "real"
    cost_per_pair_s: Optional[float] = None

    def __init__(self, query_keys: Sequence[str], target_keys: Sequence[str], *,
                 cache_dir: Union[None, str, os.PathLike] = None):
        self.query_keys = [str(k) for k in query_keys]
        self.target_keys = [str(k) for k in target_keys]
        self.cache = None if cache_dir is None else PairScoreCache(cache_dir, self.model_id)
        self.n_pairs_requested = 0
        self.n_pairs_computed = 0
        self.n_model_calls = 0
        self.compute_seconds = 0.0

    @property
    def n_queries(self) -> int:
        return len(self.query_keys)

    @property
    def n_targets(self) -> int:
        return len(self.target_keys)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model_id={self.model_id!r}, {self.n_queries} queries x {self.n_targets} targets)"

    def score_pairs(self, query_ids, target_ids) -> np.ndarray:
        """Scores of the pairs ``(query_ids[p], target_ids[p])`` as a float64 array (cached pairs are not rerun)."""
        q, t = check_pair_ids(query_ids, target_ids, self.n_queries, self.n_targets)
        self.n_pairs_requested += q.size
        out = np.empty(q.size, dtype=np.float64)
        if q.size == 0:
            return out
        if self.cache is None:
            miss = np.arange(q.size)
        else:
            qk, tk = self.query_keys, self.target_keys
            got = [self.cache.get(qk[a], tk[b]) for a, b in zip(q.tolist(), t.tolist())]
            miss = np.array([i for i, g in enumerate(got) if g is None], dtype=np.int64)
            hit = np.array([i for i, g in enumerate(got) if g is not None], dtype=np.int64)
            if hit.size:
                out[hit] = [got[i] for i in hit.tolist()]
        if miss.size:
            # score each distinct pair once
            codes = q[miss] * np.int64(self.n_targets) + t[miss]
            ucodes, inverse = np.unique(codes, return_inverse=True)
            uniq = np.stack([ucodes // self.n_targets, ucodes % self.n_targets], axis=1)
            t0 = time.perf_counter()
            s = np.asarray(self._score_uncached(uniq[:, 0], uniq[:, 1]), dtype=np.float64).reshape(-1)
            self.compute_seconds += time.perf_counter() - t0
            self.n_model_calls += 1
            if s.shape != (len(uniq),) or not np.all(np.isfinite(s)):
                raise RuntimeError(f"{type(self).__name__}._score_uncached returned {s.shape} scores (need "
                                   f"{len(uniq)} finite values)")
            self.n_pairs_computed += len(uniq)
            out[miss] = s[inverse.reshape(-1)]
            if self.cache is not None:
                self.cache.put_many([self.query_keys[a] for a in uniq[:, 0]],
                                    [self.target_keys[b] for b in uniq[:, 1]], s)
                self.cache.flush()
        return out

    @abstractmethod
    def _score_uncached(self, query_ids: np.ndarray, target_ids: np.ndarray) -> np.ndarray:
        """Scores of distinct, validated pairs (subclasses implement this)."""
