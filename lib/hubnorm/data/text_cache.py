"""Cache of sentence embeddings (the text encoder ``g`` of RSC relevance, :mod:`hubnorm.listwise.relevance`).

Encoding the 145,000 training captions of Flickr30k with all-MiniLM-L6-v2 takes minutes on a laptop CPU, and
every run of notebook 07 needs them again. Entries are content-addressed: the key is the encoder's identity and
the sha256 of the texts themselves, so any list of captions (a cached split, a local folder) finds its entry
without knowing where it came from, and a changed caption can never reuse stale vectors.

Layout (``<cache root>`` = ``$HUBNORM_CACHE`` or ``<repo>/cache``, see :mod:`.paths`)::

    <cache root>/text-embeddings/<encoder slug>-<sha256 of the encoder id, 12 hex>/<sha256 of the texts>/
        embeddings.npy   float32 (n_texts, d), unit rows
        manifest.json    key (encoder id, texts sha256, n_texts) + sha256 / shape of embeddings.npy (written last)

Written atomically (temporary file, fsync, rename; the manifest last). Every read verifies the key, the file's
sha256, its shape and that the rows are finite with unit norm; anything else raises :class:`CacheError`, which
:func:`hubnorm.listwise.encode_texts` answers by encoding again and rewriting the entry.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from .cache import CacheError, atomic_write_bytes, key_differences, npy_bytes
from .paths import PathLike, cache_root, slug

__all__ = ["TEXT_CACHE_FORMAT", "texts_sha256", "text_entry_dir", "read_text_embeddings", "write_text_embeddings"]

TEXT_CACHE_FORMAT = 1
_ARRAY = "embeddings.npy"
_MANIFEST = "manifest.json"


def texts_sha256(texts: Sequence[str]) -> str:
    """sha256 of a list of texts (each UTF-8 encoded, length-prefixed, so no two lists share a digest)."""
    h = hashlib.sha256()
    for t in texts:
        b = t.encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def _check_encoder_id(encoder_id) -> str:
    if not isinstance(encoder_id, str) or not encoder_id.strip():
        raise ValueError(f"encoder_id must be a non-empty string naming the encoder and its version; "
                         f"got {encoder_id!r}")
    return encoder_id


def text_entry_dir(encoder_id: str, digest: str, cache_dir: Optional[PathLike] = None) -> Path:
    """Folder of the entry for texts with sha256 ``digest`` encoded by ``encoder_id``."""
    name = slug(_check_encoder_id(encoder_id))[:80]   # readable, and a hash so that long ids never share a folder
    name += "-" + hashlib.sha256(encoder_id.encode("utf-8")).hexdigest()[:12]
    return cache_root(cache_dir) / "text-embeddings" / name / digest


def read_text_embeddings(texts: Sequence[str], encoder_id: str, *, cache_dir: Optional[PathLike] = None
                         ) -> np.ndarray:
    """The cached embeddings of ``texts`` by ``encoder_id``, verified (the array is read once: the bytes that are
    checksummed are the bytes that are loaded).

    Raises :class:`CacheError` with ``reason`` "missing" (no entry), "stale" (the manifest's key differs) or
    "corrupt" (checksum, shape, or non-unit rows).
    """
    digest = texts_sha256(texts)
    folder = text_entry_dir(encoder_id, digest, cache_dir)
    path = folder / _MANIFEST
    if not path.exists():
        raise CacheError(f"no cached text embeddings at {folder}", reason="missing")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        key, info = manifest["key"], manifest["files"][_ARRAY]
        want_shape = [int(v) for v in info["shape"]]
        want_sha = str(info["sha256"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CacheError(f"{path} is not a text-embedding manifest ({exc!r})", reason="corrupt") from exc
    expected = {"format": TEXT_CACHE_FORMAT, "encoder": encoder_id, "texts_sha256": digest, "n_texts": len(texts)}
    diffs = key_differences(key if isinstance(key, dict) else {}, expected)
    if diffs:
        detail = ", ".join(f"{k}: cached {a!r} != wanted {b!r}" for k, (a, b) in diffs.items())
        raise CacheError(f"text embeddings at {folder} were made with a different key ({detail})", reason="stale")
    arr_path = folder / _ARRAY
    if not arr_path.exists():
        raise CacheError(f"{arr_path} is missing although the manifest lists it", reason="corrupt")
    data = arr_path.read_bytes()
    digest_file = hashlib.sha256(data).hexdigest()
    if digest_file != want_sha:
        raise CacheError(f"{arr_path} is corrupt: sha256 {digest_file[:12]}... != {want_sha[:12]}... in the manifest",
                         reason="corrupt")
    try:
        arr = np.load(io.BytesIO(data), allow_pickle=False)
    except Exception as exc:
        raise CacheError(f"{arr_path} cannot be read ({exc})", reason="corrupt") from exc
    if arr.dtype != np.float32 or list(arr.shape) != want_shape or arr.ndim != 2 or arr.shape[0] != len(texts):
        raise CacheError(f"{arr_path} holds {arr.dtype} {arr.shape}; the manifest says float32 {want_shape} for "
                         f"{len(texts)} texts", reason="corrupt")
    norms = np.linalg.norm(arr, axis=1)
    if not np.all(np.abs(norms - 1.0) < 1e-3):
        raise CacheError(f"{arr_path} has rows that are not finite unit vectors", reason="corrupt")
    return arr


def write_text_embeddings(texts: Sequence[str], encoder_id: str, embeddings: np.ndarray, *,
                          cache_dir: Optional[PathLike] = None) -> Path:
    """Store ``embeddings`` ((n_texts, d) unit rows) of ``texts`` by ``encoder_id``; returns the entry folder.

    The old manifest is removed first and the new one written last, so a crash never leaves a verifiable half
    entry."""
    emb = np.asarray(embeddings)
    if emb.ndim != 2 or emb.shape[0] != len(texts):
        raise ValueError(f"embeddings must have shape (n_texts={len(texts)}, d); got {emb.shape}")
    emb = np.ascontiguousarray(emb, dtype=np.float32)
    digest = texts_sha256(texts)
    folder = text_entry_dir(encoder_id, digest, cache_dir)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / _MANIFEST).unlink(missing_ok=True)
    data = npy_bytes(emb)
    files = {_ARRAY: {"sha256": atomic_write_bytes(folder / _ARRAY, data), "shape": list(emb.shape),
                      "dtype": "float32", "bytes": len(data)}}
    manifest = {"key": {"format": TEXT_CACHE_FORMAT, "encoder": encoder_id, "texts_sha256": digest,
                        "n_texts": len(texts)},
                "files": files, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    atomic_write_bytes(folder / _MANIFEST, json.dumps(manifest, indent=1).encode("utf-8"))
    return folder
