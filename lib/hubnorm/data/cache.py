"""Embedding cache: ``.npy`` files plus a JSON manifest, written atomically and verified on every load.

Layout (``<cache root>`` = ``$HUBNORM_CACHE`` or ``<repo>/cache``)::

    <cache root>/<dataset>/<model slug>/<pretrained slug>/<split>/
        images.npy            float32 (n_images, d), L2-normalised
        captions.npy          float32 (n_captions, d), L2-normalised
        caption_to_image.npy  int64 (n_captions,)
        texts.json            {"image_files": [...], "captions": [...]}
        manifest.json         key + sha256 / rows / shape of every file (written last)

The manifest ``key`` holds dataset, split, model, pretrained tag, the encoder family (``"open_clip"`` or
``"blip"``; entries written before the field existed are open_clip entries and stay valid), precision, the sha256
fingerprint of the annotations and the library versions (torch, open_clip, hubnorm). Rehearsal entries
(``python -m hubnorm.data rehearse``) also have ``"source": "synthetic-rehearsal"`` in the key. An entry is reused only when the key matches
and every file's sha256 and row count match the manifest; anything else raises :class:`CacheError`, which the
encoder answers by re-encoding.

Content-addressed encodings (every encoder of :mod:`hubnorm.data.encoders`: open_clip, BLIP, the sentence encoder
of RSC relevance)::

    <cache root>/encodings/<encoder slug>/<key>/
        embeddings.npy   float32 (n_items, d), unit rows
        manifest.json    the key document + sha256 / shape of embeddings.npy

``key`` = sha256 of the canonical JSON of (encoder identity: family, model, weights, preprocessing options, the
library versions that change numbers; modality; the sha256 of every input: file bytes for images, UTF-8 text for
captions; options), so any list of inputs finds its entry without knowing where it came from and a changed input,
model or option is another entry. An entry is written in a temporary folder (files fsynced) that is renamed into
place in one step, so readers and concurrent writers see a whole entry or none; every read verifies the key, the
checksum of the bytes it loads (``allow_pickle=False``), the shape and the unit rows. Sentence embeddings cached
before this layout (``<cache root>/text-embeddings``) are not read: the texts are encoded again (see
:func:`legacy_text_entries`).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import errno
import os
import socket
import tempfile
import time
import uuid
from pathlib import Path
from typing import Dict, Iterable, Optional, Sequence, Tuple

import numpy as np

from .paths import PathLike, cache_root, slug

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
ARRAY_FILES = ("images.npy", "captions.npy", "caption_to_image.npy")
TEXT_FILE = "texts.json"


class CacheError(RuntimeError):
    """A cache entry is missing, stale (key mismatch) or corrupt (checksum / row count mismatch)."""

    def __init__(self, message: str, reason: str = "corrupt"):
        super().__init__(message)
        self.reason = reason  # "missing" | "stale" | "corrupt"


class CacheWarning(UserWarning):
    """A cache entry was stale or corrupt and is being encoded again."""


def library_versions(encoder_family: str = "open_clip") -> Dict[str, str]:
    """Versions of torch, open_clip and hubnorm (read from package metadata: importing open_clip is slow), plus
    transformers for the ``"blip"`` encoder family."""
    from importlib import metadata

    import torch

    from .._version import __version__ as hubnorm_version
    try:
        oc = metadata.version("open_clip_torch")
    except metadata.PackageNotFoundError:
        try:
            import open_clip
            oc = getattr(open_clip, "__version__", "unknown")
        except ImportError:  # pragma: no cover - open_clip is an optional dependency
            oc = "not installed"
    out = {"torch": torch.__version__, "open_clip": oc, "hubnorm": hubnorm_version}
    if encoder_family == "blip":
        try:
            out["transformers"] = metadata.version("transformers")
        except metadata.PackageNotFoundError:  # pragma: no cover
            out["transformers"] = "not installed"
    return out


def normalize_pretrained(pretrained: Optional[str]) -> str:
    """``None`` / ``""`` / ``"none"`` / ``"random"`` -> ``"none"`` (random initialisation)."""
    if pretrained is None or str(pretrained).strip().lower() in ("", "none", "null", "random"):
        return "none"
    return str(pretrained)


#: Value of ``key["encoder_family"]`` assumed for manifests written before the field existed (all were open_clip).
LEGACY_ENCODER_FAMILY = "open_clip"


def make_key(dataset: str, split: str, model: str, pretrained: Optional[str], *, precision: str = "fp32",
             annotations_sha256: Optional[str] = None, versions: Optional[Dict[str, str]] = None,
             encoder_family: str = "open_clip") -> dict:
    return {
        "dataset": dataset, "split": split, "model": model, "pretrained": normalize_pretrained(pretrained),
        "encoder_family": encoder_family, "precision": precision, "annotations_sha256": annotations_sha256,
        "versions": dict(versions if versions is not None else library_versions(encoder_family)),
    }


def entry_dir(dataset: str, model: str, pretrained: Optional[str], split: str,
              cache_dir: Optional[PathLike] = None) -> Path:
    return cache_root(cache_dir) / slug(dataset) / slug(model) / slug(normalize_pretrained(pretrained)) / split


def sha256_file(path: PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def umask() -> int:
    """This process's file-creation mask (read without changing it for long)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: Path, data: bytes) -> str:
    """Write ``data`` to a temporary file in ``path``'s folder, fsync, then ``os.replace``; returns its sha256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _sweep_stale(path.parent, f".{path.name}.")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{_owner_tag()}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~umask())   # mkstemp makes 0600: the file gets the permissions of any other write
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return hashlib.sha256(data).hexdigest()


def npy_bytes(arr: np.ndarray) -> bytes:
    """The bytes of ``arr`` as an ``.npy`` file (C order, no pickles)."""
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(arr), allow_pickle=False)
    return buf.getvalue()


def write_entry(folder: PathLike, key: dict, images: np.ndarray, captions: np.ndarray,
                caption_to_image: np.ndarray, image_files, caption_texts, extra: Optional[dict] = None) -> dict:
    """Write one split's embeddings into a temporary folder (manifest last) that then replaces ``folder`` in one
    rename: a crash or a concurrent writer never leaves a mixed or half entry."""
    images, captions = np.asarray(images, dtype=np.float32), np.asarray(captions, dtype=np.float32)
    with _staged(folder) as folder:
        files = {name: _npy_entry(folder, name, arr) for name, arr in (("images.npy", images),
                                                                      ("captions.npy", captions))}
        return _finish_entry(folder, key, files, caption_to_image, image_files, caption_texts, extra,
                             n_images=images.shape[0], n_captions=captions.shape[0],
                             dim=images.shape[1] if images.ndim == 2 else None)


def _npy_entry(folder: Path, name: str, arr: np.ndarray) -> dict:
    """Write ``arr`` as ``folder/name`` (atomically) and return its manifest entry."""
    data = npy_bytes(arr)
    return {"sha256": atomic_write_bytes(folder / name, data), "rows": int(arr.shape[0]), "shape": list(arr.shape),
            "dtype": str(arr.dtype), "bytes": len(data)}


def _finish_entry(folder: Path, key: dict, files: dict, caption_to_image, image_files, caption_texts,
                  extra: Optional[dict], *, n_images: int, n_captions: int, dim: Optional[int]) -> dict:
    """The end of every entry: the caption-to-image index, the texts, then the manifest (written last)."""
    files["caption_to_image.npy"] = _npy_entry(folder, "caption_to_image.npy",
                                               np.asarray(caption_to_image, dtype=np.int64))
    data = json.dumps({"image_files": list(image_files), "captions": list(caption_texts)},
                      ensure_ascii=False).encode("utf-8")
    files[TEXT_FILE] = {"sha256": atomic_write_bytes(folder / TEXT_FILE, data), "rows": len(caption_texts),
                        "bytes": len(data)}
    manifest = {"format": FORMAT_VERSION, "key": key, "files": files, "n_images": int(n_images),
                "n_captions": int(n_captions), "dim": None if dim is None else int(dim),
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **(extra or {})}
    atomic_write_bytes(folder / MANIFEST, json.dumps(manifest, indent=1, ensure_ascii=False).encode("utf-8"))
    return manifest


def write_entry_streaming(folder: PathLike, key: dict, n_images: int, n_captions: int, dim: int, chunks,
                          caption_to_image: np.ndarray, image_files, caption_texts,
                          extra: Optional[dict] = None) -> dict:
    """:func:`write_entry` for splits too large to hold in memory.

    ``chunks`` yields ``(image_row_start, images, caption_row_start, captions)`` blocks, in row order, that
    together fill the ``(n_images, dim)`` and ``(n_captions, dim)`` float32 arrays. They are appended to ``.npy``
    files under temporary names (sha256 computed while writing; renamed when complete), so peak memory is one
    chunk. The manifest is written last, in a temporary folder that replaces ``folder`` in one rename.
    """
    with _staged(folder) as folder:
        return _write_streaming_files(folder, key, n_images, n_captions, dim, chunks, caption_to_image, image_files,
                                      caption_texts, extra)


def _write_streaming_files(folder: Path, key: dict, n_images: int, n_captions: int, dim: int, chunks,
                           caption_to_image, image_files, caption_texts, extra: Optional[dict]) -> dict:
    shapes = {"images.npy": (int(n_images), int(dim)), "captions.npy": (int(n_captions), int(dim))}
    token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"   # unique per writer: concurrent writers never share a file
    tmp = {name: folder / f".{name}.{token}.partial" for name in shapes}
    handles, hashes, filled = {}, {}, {name: 0 for name in shapes}
    try:
        for name, shape in shapes.items():
            handles[name] = open(tmp[name], "wb")
            hashes[name] = hashlib.sha256()
            head = io.BytesIO()
            np.lib.format.write_array_header_1_0(head, {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
                                                        "fortran_order": False, "shape": shape})
            _write_hashed(handles[name], hashes[name], head.getvalue())
        for i0, img, j0, cap in chunks:
            for name, start, arr in (("images.npy", i0, img), ("captions.npy", j0, cap)):
                arr = np.ascontiguousarray(arr, dtype=np.float32)
                if start != filled[name] or arr.ndim != 2 or arr.shape[1] != dim:
                    raise ValueError(f"{name}: chunk of shape {arr.shape} at row {start}; expected rows from "
                                     f"{filled[name]} with {dim} columns (chunks must come in row order)")
                _write_hashed(handles[name], hashes[name], arr.tobytes())
                filled[name] += len(arr)
        if filled != {"images.npy": n_images, "captions.npy": n_captions}:
            raise ValueError(f"chunks filled {filled}, expected {n_images} images and {n_captions} captions")
        files = {}
        for name, fh in handles.items():
            fh.flush()
            os.fsync(fh.fileno())
            fh.close()
            os.replace(tmp[name], folder / name)
            files[name] = {"sha256": hashes[name].hexdigest(), "rows": shapes[name][0], "shape": list(shapes[name]),
                           "dtype": "float32", "bytes": (folder / name).stat().st_size}
    finally:
        for name, fh in handles.items():
            fh.close()
            if tmp[name].exists():
                tmp[name].unlink()
    return _finish_entry(folder, key, files, caption_to_image, image_files, caption_texts, extra,
                         n_images=n_images, n_captions=n_captions, dim=dim)


@contextlib.contextmanager
def _staged(folder: PathLike, verify=None):
    """Yield a fresh temporary folder beside ``folder``; on success it replaces ``folder`` (an existing entry is moved
    aside first: the newest write wins, unless ``verify()`` finds another writer's entry there good: it is kept), on
    failure it is removed."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = _mkdtemp(folder)
    try:
        yield tmp
        _fsync_dir(tmp)   # every file in it was written with fsync
        _publish(tmp, folder, verify)
    finally:
        if tmp.exists():
            _remove_tree(tmp)


def _write_hashed(fh, h, data: bytes) -> None:
    fh.write(data)
    h.update(data)


def read_manifest(folder: PathLike) -> dict:
    path = Path(folder) / MANIFEST
    if not path.exists():
        raise CacheError(f"no cached embeddings at {Path(folder)} (no {MANIFEST})", reason="missing")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CacheError(f"{path} is unreadable ({exc})", reason="corrupt") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_VERSION or "key" not in manifest:
        raise CacheError(f"{path} is not a hubnorm cache manifest of format {FORMAT_VERSION}", reason="stale")
    problem = manifest_problem(manifest)
    if problem:
        raise CacheError(f"{path} is malformed ({problem}): re-encode this split", reason="corrupt")
    return manifest


def manifest_problem(manifest: dict) -> Optional[str]:
    """What is wrong with a manifest's structure (None when every field the loaders read is well-formed)."""
    if not isinstance(manifest.get("key"), dict):
        return "'key' is not a mapping"
    versions = manifest["key"].get("versions")
    if versions is not None and not isinstance(versions, dict):
        return "'key.versions' is not a mapping"
    files = manifest.get("files")
    if not isinstance(files, dict):
        return "'files' is missing or not a mapping"
    for name in ARRAY_FILES + (TEXT_FILE,):
        info = files.get(name)
        if not isinstance(info, dict):
            return f"no entry for {name} in 'files'"
        if not isinstance(info.get("sha256"), str) or len(info["sha256"]) != 64:
            return f"{name} has no sha256 checksum"
        rows = info.get("rows")
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
            return f"{name} has no valid row count"
        shape = info.get("shape")
        if shape is not None and not (isinstance(shape, list) and all(isinstance(v, int) for v in shape)):
            return f"{name} has an invalid shape"
    for field in ("n_images", "n_captions"):
        v = manifest.get(field)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            return f"'{field}' is missing or not a count"
    return None


def key_differences(stored: dict, expected: dict, fields: Optional[Iterable[str]] = None) -> Dict[str, Tuple]:
    """``{field: (stored, expected)}`` for fields that differ (expected values of None are not compared)."""
    diffs = {}
    for f in (fields if fields is not None else expected.keys()):
        want = expected.get(f)
        if want is None:
            continue
        have = stored.get(f, LEGACY_ENCODER_FAMILY if f == "encoder_family" else None)
        if f == "versions" and isinstance(want, dict):
            for lib, v in want.items():
                if (have or {}).get(lib) != v:
                    diffs[f"versions.{lib}"] = ((have or {}).get(lib), v)
        elif have != want:
            diffs[f] = (have, want)
    return diffs


def read_entry(folder: PathLike, expected_key: Optional[dict] = None,
               fields: Optional[Iterable[str]] = None) -> Tuple[Dict[str, np.ndarray], dict, dict]:
    """Load and verify one entry: key, then sha256 and row count of every file.

    Returns ``(arrays, texts, manifest)``; raises :class:`CacheError` (``reason`` "missing", "stale" or "corrupt").
    A folder replaced by a writer while it is being read (its inode changed) is read again.
    """
    folder = Path(folder)
    for _ in range(10):
        before = _inode(folder)
        try:
            return _read_entry_once(folder, expected_key, fields)
        except (CacheError, FileNotFoundError) as err:   # a file can vanish between the listing and its read
            after = _inode(folder)
            if after == before:
                if isinstance(err, FileNotFoundError):
                    raise CacheError(f"{err.filename} is missing although the manifest lists it (delete {folder} "
                                     "and encode again)", reason="corrupt") from err
                raise
            if after is None:
                raise CacheError(f"no cached embeddings at {folder} (it was replaced while being read)",
                                 reason="missing") from None
    raise CacheError(f"the cached embeddings at {folder} were replaced by other writers during 10 reads in a row; "
                     "read again once they are done", reason="missing")


def _inode(folder: Path):
    try:
        st = os.stat(folder)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _read_entry_once(folder: Path, expected_key: Optional[dict], fields) -> Tuple[Dict[str, np.ndarray], dict, dict]:
    manifest = read_manifest(folder)
    if expected_key is not None:
        diffs = key_differences(manifest["key"], expected_key, fields)
        if diffs:
            detail = ", ".join(f"{k}: cached {a!r} != wanted {b!r}" for k, (a, b) in diffs.items())
            raise CacheError(f"cached embeddings at {folder} were made with a different key ({detail})",
                             reason="stale")
    arrays = {}
    for name in ARRAY_FILES + (TEXT_FILE,):
        info = manifest["files"].get(name)
        path = folder / name
        if info is None or not path.exists():
            raise CacheError(f"{path} is missing although the manifest lists it", reason="corrupt")
        digest = sha256_file(path)
        if digest != info["sha256"]:
            raise CacheError(f"{path} is corrupt: sha256 {digest[:12]}... != {info['sha256'][:12]}... in the "
                             "manifest (truncated or modified file)", reason="corrupt")
        if name == TEXT_FILE:
            try:
                texts = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise CacheError(f"{path} cannot be read ({exc})", reason="corrupt") from exc
            if not isinstance(texts, dict) or not isinstance(texts.get("captions", []), list) or \
                    not isinstance(texts.get("image_files", []), list):
                raise CacheError(f"{path} is not a texts file (a mapping with 'captions' and 'image_files' lists)",
                                 reason="corrupt")
            if len(texts.get("captions", [])) != info["rows"]:
                raise CacheError(f"{path} holds {len(texts.get('captions', []))} captions, manifest says "
                                 f"{info['rows']}", reason="corrupt")
            continue
        try:
            arr = np.load(path, allow_pickle=False)
        except Exception as exc:  # checksum matched but numpy cannot read it: treat as corrupt
            raise CacheError(f"{path} cannot be read ({exc})", reason="corrupt") from exc
        if arr.shape[0] != info["rows"] or list(arr.shape) != info.get("shape", list(arr.shape)):
            raise CacheError(f"{path} has shape {arr.shape}; the manifest says {info.get('shape')}", reason="corrupt")
        arrays[name[:-4]] = arr
    if len(arrays["caption_to_image"]) != len(arrays["captions"]) or \
            len(texts.get("image_files", [])) != len(arrays["images"]):
        raise CacheError(f"{folder}: image/caption counts disagree between files", reason="corrupt")
    return arrays, texts, manifest


# ------------------------------------------------------------------------------ content-addressed encodings
#: Format of the content-addressed entries (part of every key: a new format is a new entry).
CONTENT_FORMAT = 1
ENCODINGS_DIR = "encodings"
_CONTENT_ARRAY = "embeddings.npy"


def texts_sha256(texts: Sequence[str]) -> str:
    """sha256 of a list of texts (each UTF-8 encoded, length-prefixed, so no two lists share a digest)."""
    h = hashlib.sha256()
    for t in texts:
        b = t.encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def _canonical(doc) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def content_key(identity: dict, modality: str, content_sha256: Sequence[str],
                options: Optional[dict] = None) -> Tuple[str, dict]:
    """``(key, document)``: the document names the encoder ``identity`` (a JSON mapping), the ``modality``, the
    number of inputs and the sha256 over their digests ``content_sha256`` (one per input, in order), and the
    ``options``; ``key`` is the sha256 of its canonical JSON."""
    if not isinstance(identity, dict) or not identity:
        raise ValueError(f"identity must be a non-empty mapping naming the encoder; got {identity!r}")
    digests = list(content_sha256)
    h = hashlib.sha256()
    for d in digests:
        if not isinstance(d, str) or len(d) != 64:
            raise ValueError(f"content_sha256 must hold 64-hex sha256 digests; got {d!r}")
        h.update(d.encode("ascii"))
    doc = {"format": CONTENT_FORMAT, "encoder": identity, "modality": str(modality), "n_items": len(digests),
           "content_sha256": h.hexdigest(), "options": dict(options or {})}
    try:
        key = hashlib.sha256(_canonical(doc)).hexdigest()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"the encoder identity and options must be JSON values ({exc})") from exc
    return key, doc


def content_entry_dir(key: str, label: str, cache_dir: Optional[PathLike] = None) -> Path:
    """Folder of the content-addressed entry ``key``; ``label`` (the encoder's name) keeps the tree readable."""
    return cache_root(cache_dir) / ENCODINGS_DIR / slug(label)[:80] / key


def _owner_tag() -> str:
    """``<host>-<pid>`` of this process: what a staging name carries so that a later writer can tell a dead
    writer's leftovers from a live writer's work."""
    host = "".join(c if c.isalnum() else "_" for c in socket.gethostname())[:32] or "host"
    return f"{host}-{os.getpid()}"


def _sweep_stale(parent: Path, prefix: str) -> None:
    """Remove the staging entries ``<prefix><host>-<pid>.*.tmp`` in ``parent`` left by a writer of this host that
    is no longer running (a killed write: ``kill -9`` runs no clean-up). Entries of other hosts, of live
    processes, and names that do not parse are left alone."""
    host = _owner_tag().rsplit("-", 1)[0]
    try:
        entries = list(parent.iterdir())
    except OSError:
        return
    for entry in entries:
        name = entry.name
        if not (name.startswith(prefix) and name.endswith(".tmp")):
            continue
        tag = name[len(prefix):].split(".", 1)[0]
        owner, _, pid = tag.rpartition("-")
        if owner != host or not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
            continue
        if entry.is_dir() and not entry.is_symlink():
            _remove_tree(entry)
        else:
            try:
                entry.unlink()
            except OSError:
                pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # another user's process: alive
        return True
    return True


def _mkdtemp(folder: Path) -> Path:
    """A new empty folder beside ``folder`` with the permissions of ``mkdir`` (mkdtemp's are owner-only), named
    with this writer's host and pid; a dead writer's staging folder for the same entry is removed first."""
    prefix = f".{folder.name[:16]}."
    _sweep_stale(folder.parent, prefix)
    tmp = Path(tempfile.mkdtemp(prefix=f"{prefix}{_owner_tag()}.", suffix=".tmp", dir=folder.parent))
    os.chmod(tmp, 0o777 & ~umask())
    return tmp


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def write_content_entry(key: str, document: dict, embeddings: np.ndarray, *, label: str,
                        cache_dir: Optional[PathLike] = None) -> Path:
    """Store ``embeddings`` ((n_items, d) float32 unit rows) under ``key``; returns the entry folder.

    Both files are written (and fsynced) in a temporary folder beside the entry, which is then renamed into place:
    a reader sees the whole entry or none. When another writer got there first, its entry is kept if it verifies
    (the same key means the same inputs and encoder) and replaced otherwise."""
    emb = np.ascontiguousarray(embeddings, dtype=np.float32)
    if emb.ndim != 2 or emb.shape[0] != document.get("n_items"):
        raise ValueError(f"embeddings must have shape (n_items={document.get('n_items')}, d); got {emb.shape}")
    folder = content_entry_dir(key, label, cache_dir)
    with _staged(folder, lambda: read_content_entry(key, document, label=label, cache_dir=cache_dir)) as tmp:
        data = npy_bytes(emb)
        files = {_CONTENT_ARRAY: {"sha256": atomic_write_bytes(tmp / _CONTENT_ARRAY, data), "shape": list(emb.shape),
                                  "dtype": "float32", "bytes": len(data)}}
        manifest = {"format": CONTENT_FORMAT, "key": key, "document": document, "files": files,
                    "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        atomic_write_bytes(tmp / MANIFEST, json.dumps(manifest, indent=1).encode("utf-8"))
    return folder


#: attempts at publishing an entry that other processes keep replacing. No pause between them: a pause after moving
#: another writer's entry aside is the window in which that writer publishes its next one (a random back-off
#: there made two writers of one split entry lose every attempt)
PUBLISH_ATTEMPTS = 8


def _publish(tmp: Path, folder: Path, verify) -> None:
    """Rename the complete folder ``tmp`` to ``folder`` in one step. An existing ``folder`` that ``verify()`` accepts
    wins (a concurrent writer of the same key); one that fails verification is moved aside and replaced.

    ``verify=None`` (an entry that is always replaced, last writer wins): once this call has moved an entry aside, an
    entry found in its place again was published by another writer after ours was complete, so it is the newer one
    and ours is dropped (two writers replacing each other's entries would otherwise take turns without end)."""
    replaced = False
    for _ in range(PUBLISH_ATTEMPTS):
        try:
            os.rename(tmp, folder)
            _fsync_dir(folder.parent)
            return
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            if not folder.exists():
                continue    # another writer moved the entry aside meanwhile: try to rename ours again
        if verify is None and replaced:
            return          # a newer entry than ours (see above): ours is dropped by the caller
        try:
            if verify is None:
                raise CacheError("replace", reason="stale")
            verify()
            return          # a valid entry is there already: ours is dropped by the caller
        except CacheError:
            trash = folder.parent / f".{folder.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.old"
            try:
                os.rename(folder, trash)
            except FileNotFoundError:
                continue    # another writer moved it: try to rename ours again
            _remove_tree(trash)
            replaced = True
    raise CacheError(f"could not publish the cache entry {folder}: other processes keep replacing it; rerun",
                     reason="corrupt")


def _remove_tree(path: Path) -> None:
    import shutil
    shutil.rmtree(path, ignore_errors=True)


def read_content_entry(key: str, document: dict, *, label: str, cache_dir: Optional[PathLike] = None
                       ) -> np.ndarray:
    """The verified embeddings of entry ``key`` (the bytes that are checksummed are the bytes that are loaded).

    Raises :class:`CacheError`: ``reason`` "missing" (no entry), "stale" (the stored document differs from
    ``document``) or "corrupt" (checksum, shape, dtype or non-unit rows); the message names the file and the fix."""
    folder = content_entry_dir(key, label, cache_dir)
    path = folder / MANIFEST
    fix = f"delete {folder} and rerun: the inputs are encoded again"
    if not path.exists():
        raise CacheError(f"no cached encodings at {folder}", reason="missing")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        info = manifest["files"][_CONTENT_ARRAY]
        want_shape, want_sha = [int(v) for v in info["shape"]], str(info["sha256"])
        stored_key, stored_doc = manifest["key"], manifest["document"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CacheError(f"{path} is not a hubnorm encodings manifest ({exc!r}): {fix}", reason="corrupt") from exc
    if stored_key != key or stored_doc != document:
        raise CacheError(f"{path} was written for another key (format, encoder, inputs or options differ): {fix}",
                         reason="stale")
    arr_path = folder / _CONTENT_ARRAY
    try:
        data = arr_path.read_bytes()
    except OSError as exc:
        raise CacheError(f"{arr_path} cannot be read ({exc}): {fix}", reason="corrupt") from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != want_sha:
        raise CacheError(f"{arr_path} is corrupt: sha256 {digest[:12]}... != {want_sha[:12]}... in the manifest "
                         f"(truncated or modified file): {fix}", reason="corrupt")
    try:
        arr = np.load(io.BytesIO(data), allow_pickle=False)
    except Exception as exc:
        raise CacheError(f"{arr_path} cannot be read ({exc}): {fix}", reason="corrupt") from exc
    n = document.get("n_items")
    if arr.dtype != np.float32 or arr.ndim != 2 or list(arr.shape) != want_shape or arr.shape[0] != n:
        raise CacheError(f"{arr_path} holds {arr.dtype} {arr.shape}; the manifest says float32 {want_shape} for {n} "
                         f"inputs: {fix}", reason="corrupt")
    if not np.all(np.abs(np.linalg.norm(arr, axis=1) - 1.0) < 1e-3):
        raise CacheError(f"{arr_path} has rows that are not finite unit vectors: {fix}", reason="corrupt")
    return arr


def legacy_text_entries(cache_dir: Optional[PathLike] = None) -> Optional[Path]:
    """The folder of sentence embeddings cached before the content-addressed layout (``<cache root>/text-embeddings``),
    when it exists: it is no longer read (texts are encoded again, once, into ``<cache root>/encodings``)."""
    old = cache_root(cache_dir) / "text-embeddings"
    return old if old.is_dir() else None


__all__ = ["CacheError", "CacheWarning", "FORMAT_VERSION", "entry_dir", "make_key", "read_entry", "write_entry",
           "write_entry_streaming", "read_manifest", "LEGACY_ENCODER_FAMILY", "manifest_problem",
           "library_versions", "normalize_pretrained", "sha256_file", "atomic_write_bytes", "npy_bytes",
           "key_differences", "texts_sha256", "content_key", "content_entry_dir", "write_content_entry",
           "read_content_entry", "legacy_text_entries", "CONTENT_FORMAT"]
