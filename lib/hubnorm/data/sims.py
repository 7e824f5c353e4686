"""``sims:<folder>``: released similarity matrices as a data source (plain ``.npy`` files and a small manifest).

Video-text and text-audio retrieval work releases score matrices rather than embeddings. A sims folder holds them as
plain ``.npy`` files (read with ``allow_pickle=False``, memory-mapped: a matrix is never read whole) and a manifest,
``manifest.json`` (or ``manifest.yaml``), that says what each file is::

    {
      "format": "hubnorm-sims", "version": 1,
      "dataset": "msrvtt-1k", "model": "CLIP4Clip",
      "modalities": ["text", "video"],              # what the rows and the columns of "test" are
      "synthetic": false,                           # true: every number is labelled synthetic
      "matrices": {
        "test": "test.npy",                         # test texts x test videos (the evaluated scores)  REQUIRED
        "bank_rows": "bank_text.npy",               # bank texts x test videos      (t2v query bank: IS, DIS, NNN, SN ...)
        "bank_cols": "bank_video.npy",              # bank videos x test texts      (v2t query bank)
        "bank_rows_x_bank_cols": "bank_bank.npy",   # bank texts x bank videos      (DBSN, both directions)
        "bank_cols_x_test_cols": "bvideo_video.npy",# bank videos x test videos     (DualIS/DualDIS, t2v)
        "bank_rows_x_test_rows": "btext_text.npy"   # bank texts x test texts       (DualIS/DualDIS, v2t)
      },
      "positives": {"labels": "caption_to_item.npy"},   # one column index per test row, or
                                                         # {"mask": "positives.npy"}: a boolean rows x columns mask
      "embeddings": {                               # optional: the embeddings of some items (L2-normalised rows)
        "test_rows": "text.npy", "test_cols": "video.npy", "bank_rows": "bank_text.npy", "bank_cols": "bank_video.npy"
      },
      "checksums": {"test.npy": "<sha256>", ...}          # optional; verified when present
    }

The same manifest may be written in YAML as ``manifest.yaml`` (or ``manifest.yml``), read with ``yaml.safe_load``
(plain data, never Python objects); a folder holds exactly one manifest::

    format: hubnorm-sims
    version: 1
    dataset: msrvtt-1k
    modalities: [text, video]
    matrices: {test: test.npy, bank_rows: bank_text.npy}
    positives: {labels: caption_to_item.npy}

Only ``test`` and ``positives`` are required; a method that needs a matrix the folder lacks is refused naming it
(:mod:`hubnorm.scores`).

``embeddings`` (optional) gives the embeddings of some of the four item sets, one row per row (or column) of the
matrices, in their order: ``test_rows`` / ``test_cols`` are the test matrix's rows / columns, ``bank_rows`` /
``bank_cols`` the bank items of the same modalities. The tasks then hold both (:class:`hubnorm.RetrievalTask`): a
pair whose two item sets are embedded is scored as their product, and a stored matrix of such a pair must equal it
(compared as the tasks are built; a shuffled, transposed or other model's file is refused naming it). A stored
matrix with embeddings on one side only could be compared with nothing, so such a folder is refused (list the other
side too); embeddings rows must be L2-normalised. The methods that read embeddings (DN, DSL) then run on the folder.

Directions are named from the modalities' first letters: text/video gives ``t2v``
(rows are queries) and ``v2t`` (columns are queries). Every problem (a missing or truncated file, a pickled
array, a bad shape, NaN, a mask that does not match) is a ``ValueError`` naming the file and the fix.

This module reads arrays only; :func:`hubnorm.scores.sims_tasks` turns a folder into retrieval tasks.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from ..retrieval import MODALITY_LETTERS
from .._validation import NORM_TOLERANCE
from .. import score_checks
from .cache import atomic_write_bytes, npy_bytes

PathLike = Union[str, os.PathLike]

FORMAT = "hubnorm-sims"
VERSION = 1
MANIFESTS = ("manifest.json", "manifest.yaml", "manifest.yml")

#: role -> (rows, columns) in terms of the test matrix's row side "R" and column side "C" ("bank" / "test")
ROLES: Dict[str, Tuple[str, str]] = {
    "test": ("test R", "test C"),
    "bank_rows": ("bank R", "test C"),
    "bank_cols": ("bank C", "test R"),
    "bank_rows_x_bank_cols": ("bank R", "bank C"),
    "bank_cols_x_test_cols": ("bank C", "test C"),
    "bank_rows_x_test_rows": ("bank R", "test R"),
}

#: modality -> the letter of direction names (t2v, a2t, ...); the one definition (hubnorm.media uses it too)
LETTERS = MODALITY_LETTERS  # the letters of the direction names (hubnorm.retrieval)

#: the keys of the manifest's optional ``embeddings`` -> the side of :data:`ROLES` whose items they embed
EMBEDDINGS: Dict[str, str] = {"test_rows": "test R", "test_cols": "test C", "bank_rows": "bank R", "bank_cols": "bank C"}

class SimsError(ValueError):
    """A problem with a sims folder (the message names the file and the fix)."""


class SimsWarning(UserWarning):
    """A consistency finding of a folder loaded with ``consistency=False`` (also kept in its ``flags``)."""


def read_manifest(folder: Path) -> Tuple[dict, Path]:
    """The manifest of ``folder`` (``manifest.json``, or ``manifest.yaml`` / ``.yml`` read with ``yaml.safe_load``:
    plain data only, never Python objects) and its path; SimsError naming the file when it is not a mapping, and
    naming both when a folder holds two manifests."""
    found = [folder / name for name in MANIFESTS if (folder / name).is_file()]
    if len(found) > 1:
        raise SimsError(f"{folder} holds {len(found)} manifests ({', '.join(p.name for p in found)}): keep one, "
                        "so that no reader has to guess which one says what the files are")
    if found:
        path = found[0]
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise SimsError(f"{path}: not UTF-8 text ({exc}); save the manifest as UTF-8") from None
        if path.suffix == ".json":
            try:
                data = json.loads(text)
            except ValueError as exc:
                raise SimsError(f"{path}: not valid JSON ({exc}); fix the manifest (see hubnorm.data.sims for its "
                                "fields)") from None
        else:
            import yaml

            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise SimsError(f"{path}: not valid YAML ({' '.join(str(exc).split())}); fix the manifest (see "
                                "hubnorm.data.sims for its fields)") from None
        if not isinstance(data, dict):
            raise SimsError(f"{path}: the manifest must be a mapping (see hubnorm.data.sims); got {type(data).__name__}")
        return data, path
    if not folder.is_dir():
        raise SimsError(f"sims folder {folder} does not exist: pass sims:<folder> with a folder of .npy score "
                        "matrices and a manifest.json (or manifest.yaml)")
    raise SimsError(f"{folder} has no manifest ({' / '.join(MANIFESTS)}): write one that says what each .npy file is "
                    "(see hubnorm.data.sims), or convert QB-Norm pickles with `python -m hubnorm.data import-qbnorm`")


def open_npy(path: Path, what: str) -> np.ndarray:
    """A memory map of ``path`` (never unpickled); SimsError naming the file when it is missing or truncated."""
    if not path.is_file():
        raise SimsError(f"{path} ({what}) is missing: put the file there or fix its name in the manifest")
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as exc:
        if "pickle" in str(exc).lower() or "python objects" in str(exc).lower():
            raise SimsError(f"{path} ({what}) holds pickled objects, which a sims folder never loads: save a plain "
                            "numeric array with np.save") from None
        raise SimsError(f"{path} ({what}) is not a readable .npy file ({exc}): it may be truncated; copy it again "
                        "or re-save it with np.save") from None
    except (OSError, EOFError) as exc:
        raise SimsError(f"{path} ({what}) is not a readable .npy file ({exc}): it may be truncated; copy it again "
                        "or re-save it with np.save") from None
    return arr


#: bytes read at a time by the verifying pass (checksum and NaN scan in one read of the file)
_SCAN_BYTES = 16 * 2**20


def scan_npy(path: Path, arr: np.ndarray, what: str, *, checksum: Optional[str] = None, scan: bool = True,
             manifest: str = "the manifest", on_rows: Optional[Callable[[int, np.ndarray], None]] = None
             ) -> Optional[float]:
    """One streaming pass over the file of the memory map ``arr``: its sha256 against ``checksum`` (when given)
    and, with ``scan``, every score finite; returns the largest ``|s|`` (None without ``scan``). SimsError naming
    the file: a checksum mismatch first (a changed file explains a NaN), then the first NaN / inf.

    ``on_rows(first_row, block)``: called with every block of whole rows (float64) of the same read, when every
    score is finite (the statistics of :mod:`hubnorm.score_checks`); a Fortran-ordered file has no rows in its
    byte order, so its blocks are read from the memory map after the pass."""
    if checksum is None and not scan:
        return None
    rows, cols = arr.shape
    fortran = arr.flags.f_contiguous and not arr.flags.c_contiguous
    item = arr.dtype.itemsize
    h = hashlib.sha256() if checksum is not None else None
    big, first_bad, done = 0.0, None, 0      # done: elements scanned
    by_rows = on_rows is not None and scan and not fortran
    with open(path, "rb") as fh:
        header = fh.read(int(arr.offset))
        if h is not None:
            h.update(header)
        step = max(item, _SCAN_BYTES // item * item)
        if by_rows:   # whole rows per read, so that each block is a block of rows
            step = max(1, _SCAN_BYTES // (cols * item)) * cols * item
        while True:
            buf = fh.read(step)
            if not buf:
                break
            if h is not None:
                h.update(buf)
            if scan:
                n = min(len(buf) // item, rows * cols - done)
                if n > 0:
                    x = np.frombuffer(buf, dtype=arr.dtype, count=n)
                    fin = np.isfinite(x)
                    if first_bad is None and not fin.all():
                        first_bad = done + int(np.argmin(fin))
                    if fin.any():
                        big = max(big, float(np.abs(x[fin]).max()) if first_bad is not None else float(np.abs(x).max()))
                    if by_rows and first_bad is None and n % cols == 0:
                        on_rows(done // cols, x.reshape(n // cols, cols).astype(np.float64))
                    done += n
    if h is not None and h.hexdigest() != checksum:
        raise SimsError(f"{path} ({what}) does not match the sha256 checksum in {manifest}: the file changed or is "
                        "truncated; copy it again (or remove its checksum if you changed it on purpose)")
    if first_bad is not None:
        r, c = (first_bad % rows, first_bad // rows) if fortran else divmod(first_bad, cols)
        raise SimsError(f"{path} ({what}) holds a non-finite score at row {r}, column {c}: a score matrix must "
                        "be finite; recompute it (or drop that row and its positives)")
    if on_rows is not None and scan and fortran:
        step = max(1, _SCAN_BYTES // (cols * item))
        for r0 in range(0, rows, step):
            on_rows(r0, np.asarray(arr[r0:r0 + step], dtype=np.float64))
    return big if scan else None


@dataclass
class SimsFolder:
    """A validated sims folder: its manifest, the matrices by role (memory maps) and the positives."""

    folder: Path
    manifest: dict
    matrices: Dict[str, np.ndarray] = field(default_factory=dict)
    files: Dict[str, Path] = field(default_factory=dict)
    bounds: Dict[str, float] = field(default_factory=dict)   # role -> largest |s| (from the scan), when scanned
    positive_pairs: Tuple[np.ndarray, np.ndarray] = None  # (row index, column index) of every positive
    embeddings: Dict[str, np.ndarray] = field(default_factory=dict)   # EMBEDDINGS key -> memory map (optional)
    embedding_files: Dict[str, Path] = field(default_factory=dict)
    flags: List[str] = field(default_factory=list)   # consistency findings accepted with consistency=False

    @property
    def modalities(self) -> Tuple[str, str]:
        return tuple(self.manifest["modalities"])

    @property
    def directions(self) -> Tuple[str, str]:
        a, b = (LETTERS[m] for m in self.modalities)
        return f"{a}2{b}", f"{b}2{a}"

    @property
    def synthetic(self) -> bool:
        return bool(self.manifest.get("synthetic", False))

    @property
    def name(self) -> str:
        return str(self.manifest.get("dataset") or self.folder.name)


def load_sims(folder: PathLike, *, verify: bool = True, scan: bool = True, consistency: bool = True) -> SimsFolder:
    """Read and check a sims folder (module docstring). ``verify``: check the manifest's sha256 checksums;
    ``scan``: scan every matrix for NaN / inf (block by block) and, in the same read, gather the statistics of the
    consistency checks (:mod:`hubnorm.score_checks`: transposed or mislabelled matrices, shifted positives, a
    bank of other items or of the test items). ``consistency=False`` turns their findings into warnings, kept in
    the folder's ``flags`` (for an input that is right and trips a check). Every file is read once; a file that
    changes while the folder is read is refused."""
    folder = Path(os.path.expanduser(str(folder)))
    man, man_path = read_manifest(folder)
    _check_manifest(man, man_path)
    mats = man["matrices"]
    checksums = man.get("checksums") or {}
    out = SimsFolder(folder, man)
    sizes: Dict[str, Tuple[int, str]] = {}
    seen_files: Dict[str, tuple] = {}
    for role, fname in mats.items():
        path = folder / str(fname)
        what = f"matrix {role!r}"
        arr = _open_floats(path, what, seen_files)
        for side, n in zip(ROLES[role], arr.shape):
            seen = sizes.get(side)
            if seen is not None and seen[0] != n:
                raise SimsError(f"{path} ({what}) has {n} {side} items but {seen[1]} has {seen[0]}: the matrices must "
                                "share their rows and columns (same items, same order); fix the file or the manifest")
            sizes.setdefault(side, (n, path.name))
        out.matrices[role], out.files[role] = arr, path
    dim = None   # (dimension, file) of the first embeddings
    for key, fname in (man.get("embeddings") or {}).items():   # the items some matrices score, embedded
        path = folder / fname
        what = f"embeddings {key!r}"
        arr = _open_floats(path, what, seen_files, " (one embedding per row)")
        side = EMBEDDINGS[key]
        seen = sizes.setdefault(side, (arr.shape[0], path.name))
        if seen[0] != arr.shape[0]:
            raise SimsError(f"{path} ({what}) has {arr.shape[0]} rows but {seen[1]} has {seen[0]} {side} items: one "
                            "embedding per item, in the matrices' order; fix the file or the manifest")
        dim = dim or (arr.shape[1], path.name)
        if dim[0] != arr.shape[1]:
            raise SimsError(f"{path} ({what}) has dimension {arr.shape[1]} but {dim[1]} has {dim[0]}: every embedding "
                            "of a folder comes from one model (one space)")
        out.embeddings[key], out.embedding_files[key] = arr, path
    embedded = {EMBEDDINGS[key]: key for key in out.embeddings}
    for role in out.matrices:   # a matrix with embeddings on one side only could not be checked against them
        sides = [side for side in ROLES[role] if side in embedded]
        if len(sides) == 1:
            other = next(side for side in ROLES[role] if side not in embedded)
            key = next(k for k, side in EMBEDDINGS.items() if side == other)
            raise SimsError(f"{man_path}: 'embeddings' lists {embedded[sides[0]]!r} but not {key!r}, so the matrix "
                            f"{role!r} ({out.files[role].name}) cannot be compared with the product of the embeddings "
                            f"of its two sides (a shuffled file would go unnoticed): list {key!r} too, or leave "
                            f"{embedded[sides[0]]!r} out")
    n_rows, n_cols = out.matrices["test"].shape
    out.positive_pairs, labels, pos_path = _positives(folder, man, man_path, n_rows, n_cols,
                                                      checksums if verify else {})
    seen_files[str(pos_path)] = _signature(pos_path)
    stats: Dict[str, score_checks.MatrixStats] = {}
    pos = None
    if scan:
        stats["test"] = score_checks.MatrixStats((n_rows, n_cols))
        pos = score_checks.PositiveScores(*out.positive_pairs, (n_rows, n_cols), labels)
        stats["test"].hooks.append(pos)
        for role in [r for r, _, _ in score_checks.BANK_AXES] + ["bank_rows_x_bank_cols"]:
            if role in out.matrices:
                stats[role] = score_checks.MatrixStats(out.matrices[role].shape)
    for role in sorted(out.matrices, key=lambda r: r != "test"):
        arr, path = out.matrices[role], out.files[role]
        expected = checksums.get(str(mats[role])) if verify else None
        bound = scan_npy(path, arr, f"matrix {role!r}", checksum=expected, scan=scan, manifest=man_path.name,
                         on_rows=stats.get(role))
        if bound is not None:
            out.bounds[role] = bound
    for key, arr in out.embeddings.items():   # sha256, finite and unit rows in one read
        expected = checksums.get(str(man["embeddings"][key])) if verify else None
        norms = []
        scan_npy(out.embedding_files[key], arr, f"embeddings {key!r}", checksum=expected, scan=scan,
                 manifest=man_path.name, on_rows=lambda r0, rows: norms.append(np.linalg.norm(rows, axis=1)))
        worst = float(np.abs(np.concatenate(norms) - 1).max()) if norms else 0.0
        if worst > NORM_TOLERANCE:
            raise SimsError(f"{out.embedding_files[key]} (embeddings {key!r}) has rows that are not L2-normalised "
                            f"(largest |norm - 1| = {worst:.3g}): save each row divided by its norm (hubnorm."
                            "l2_normalize), the embeddings whose products the matrices hold")
    for name, sig in seen_files.items():   # a file rewritten during the read would pair two versions
        if _signature(Path(name)) != sig:
            raise SimsError(f"{name} changed while the folder was read: its matrices and positives may come from "
                            "two versions; load it again once the writer has finished")
    if scan:
        names = {role: path.name for role, path in out.files.items()}
        fix = (f"save it with the manifest's first modality ({out.modalities[0]}) as rows (np.save(path, S.T)), or "
               "swap the modalities in the manifest")
        for msg in score_checks.findings(stats, pos, names, transpose_fix=fix, modalities=out.modalities):
            if consistency:
                raise SimsError(f"{folder}: {msg}. If the folder is right, load it with consistency=False (the "
                                "results then carry this as a flag)")
            warnings.warn(f"{folder}: {msg}", SimsWarning, stacklevel=2)
            out.flags.append(msg)
    return out


def _open_floats(path: Path, what: str, seen_files: Dict[str, tuple], per_row: str = "") -> np.ndarray:
    """The memory map of a non-empty 2-D float file of the folder (SimsError naming it otherwise), its signature
    noted in ``seen_files`` (a file that changes while the folder is read is refused)."""
    arr = open_npy(path, what)
    seen_files[str(path)] = _signature(path)
    if arr.ndim != 2 or arr.dtype.kind != "f" or 0 in arr.shape:
        raise SimsError(f"{path} ({what}) must be a non-empty 2-D float array{per_row}; got shape {arr.shape}, dtype "
                        f"{arr.dtype}")
    return arr


def _signature(path: Path) -> tuple:
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


def _check_manifest(man: dict, man_path: Path) -> None:
    """The manifest's fields, typed: a string is not a boolean, a number is not a name."""
    if man.get("format") != FORMAT:
        raise SimsError(f"{man_path}: 'format' must be {FORMAT!r}; got {man.get('format')!r}")
    if man.get("version") != VERSION:
        raise SimsError(f"{man_path}: 'version' must be {VERSION}; got {man.get('version')!r}")
    mods = man.get("modalities")
    if not (isinstance(mods, (list, tuple)) and len(mods) == 2 and all(m in LETTERS for m in mods) and mods[0] != mods[1]):
        raise SimsError(f"{man_path}: 'modalities' must name the test matrix's rows and columns, two of "
                        f"{sorted(LETTERS)} (e.g. [\"text\", \"video\"]); got {mods!r}")
    mats = man.get("matrices")
    if not isinstance(mats, dict) or "test" not in mats:
        raise SimsError(f"{man_path}: 'matrices' must map roles to .npy files and include 'test' (test rows x test "
                        "columns)")
    unknown = sorted(set(mats) - set(ROLES))
    if unknown:
        raise SimsError(f"{man_path}: unknown matrix role(s) {unknown}; the roles are {sorted(ROLES)}")
    bad = {role: f for role, f in mats.items() if not isinstance(f, str) or not f}
    if bad:
        raise SimsError(f"{man_path}: 'matrices' must map each role to a file name (a string); got {bad}")
    if "synthetic" in man and not isinstance(man["synthetic"], bool):
        raise SimsError(f"{man_path}: 'synthetic' must be true or false (a boolean, not {type(man['synthetic']).__name__}"
                        f" {man['synthetic']!r}): it decides whether every number is labelled synthetic")
    for key in ("dataset", "model"):
        if man.get(key) is not None and not (isinstance(man[key], str) and man[key].strip()):
            raise SimsError(f"{man_path}: '{key}' must be a non-empty string (or absent); got {man[key]!r}")
    embs = man.get("embeddings")
    if embs is not None and not (isinstance(embs, dict) and set(embs) <= set(EMBEDDINGS)
                                 and all(isinstance(f, str) and f for f in embs.values())):
        raise SimsError(f"{man_path}: 'embeddings' must map some of {list(EMBEDDINGS)} to .npy file names (the "
                        f"embeddings of the test matrix's rows / columns and of the bank items); got {embs!r}")
    sums = man.get("checksums")
    if sums is not None and not (isinstance(sums, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                                  for k, v in sums.items())):
        raise SimsError(f"{man_path}: 'checksums' must map file names to sha256 hex strings; got {sums!r}")


def _positives(folder, man, man_path, n_rows, n_cols, checksums):
    """``((rows, cols), labels or None, path)``: the positive pairs, read once (the bytes hashed are the bytes
    parsed, so a file replaced during the read cannot pass the checksum with other contents)."""
    pos = man.get("positives")
    if not isinstance(pos, dict) or len(pos) != 1 or next(iter(pos)) not in ("labels", "mask"):
        raise SimsError(f"{man_path}: 'positives' must be {{\"labels\": file}} (one column index per test row) or "
                        f"{{\"mask\": file}} (a boolean test rows x test columns mask); got {pos!r}")
    kind, fname = next(iter(pos.items()))
    path = folder / str(fname)
    if not path.is_file():
        raise SimsError(f"{path} (positives) is missing (or not a regular file): put the file there or fix its name "
                        "in the manifest")
    raw = path.read_bytes()
    if str(fname) in checksums and hashlib.sha256(raw).hexdigest() != checksums[str(fname)]:
        raise SimsError(f"{path} (positives) does not match the sha256 checksum in {man_path.name}: copy it again")
    try:
        arr = np.load(io.BytesIO(raw), allow_pickle=False)
    except ValueError as exc:
        raise SimsError(f"{path} (positives) is not a plain .npy array ({exc}): save it with np.save (pickled "
                        "objects are never loaded)") from None
    except (OSError, EOFError) as exc:
        raise SimsError(f"{path} (positives) is not a readable .npy file ({exc}): copy it again") from None
    labels = None
    if kind == "labels":
        if arr.ndim != 1 or arr.shape[0] != n_rows or arr.dtype.kind not in "iu":
            raise SimsError(f"{path} (positive labels) must be {n_rows} integers, one column index per row of the test "
                            f"matrix; got shape {arr.shape}, dtype {arr.dtype}")
        if arr.size and (arr.min() < 0 or arr.max() >= n_cols):
            raise SimsError(f"{path} (positive labels) must lie in [0, {n_cols}) (the test matrix's columns); got "
                            f"[{arr.min()}, {arr.max()}]")
        labels = arr.astype(np.int64)
        rows, cols = np.arange(n_rows, dtype=np.int64), labels
    else:
        if arr.shape != (n_rows, n_cols) or arr.dtype != np.bool_:
            raise SimsError(f"{path} (positives mask) must be a boolean {n_rows} x {n_cols} array (the test matrix's "
                            f"shape); got shape {arr.shape}, dtype {arr.dtype}")
        rows, cols = np.nonzero(arr)
        rows, cols = rows.astype(np.int64), cols.astype(np.int64)
    for side, idx, n in (("row", rows, n_rows), ("column", cols, n_cols)):
        missing = np.setdiff1d(np.arange(n), idx)
        if missing.size:
            raise SimsError(f"{path}: test {side} {missing[0]} (and {missing.size - 1} more) has no positive; every test "
                            f"item needs one: drop it from the matrices or fix the positives")
    return (rows, cols), labels, path


def write_sims(folder: PathLike, matrices: Dict[str, np.ndarray], *, modalities=("text", "video"),
               labels: Optional[np.ndarray] = None, mask: Optional[np.ndarray] = None, dataset: Optional[str] = None,
               model: Optional[str] = None, synthetic: bool = False, extra: Optional[dict] = None,
               embeddings: Optional[Dict[str, np.ndarray]] = None) -> Path:
    """Write a sims folder (``.npy`` per role, and per key of ``embeddings`` (:data:`EMBEDDINGS`), + ``manifest.json``
    with sha256 checksums); returns its manifest path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if (labels is None) == (mask is None):
        raise ValueError("pass exactly one of labels= (one column index per test row) or mask= (boolean rows x columns)")
    names, checksums = {}, {}
    for role, arr in matrices.items():
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; the roles are {sorted(ROLES)}")
        names[role] = f"{role}.npy"
        checksums[names[role]] = atomic_write_bytes(folder / names[role], npy_bytes(np.asarray(arr)))
    emb_names = {}
    for key, arr in (embeddings or {}).items():
        if key not in EMBEDDINGS:
            raise ValueError(f"unknown embeddings key {key!r}; the keys are {list(EMBEDDINGS)}")
        emb_names[key] = f"embeddings_{key}.npy"
        checksums[emb_names[key]] = atomic_write_bytes(folder / emb_names[key], npy_bytes(np.asarray(arr)))
    pos_file = "positives_labels.npy" if labels is not None else "positives_mask.npy"
    checksums[pos_file] = atomic_write_bytes(folder / pos_file, npy_bytes(np.asarray(labels if labels is not None
                                                                                     else mask)))
    man = {"format": FORMAT, "version": VERSION, "dataset": dataset, "model": model, "modalities": list(modalities),
           "synthetic": bool(synthetic), "matrices": names,
           "positives": {"labels" if labels is not None else "mask": pos_file}}
    if emb_names:
        man["embeddings"] = emb_names
    man.update(extra or {})
    man["checksums"] = checksums
    path = folder / "manifest.json"
    atomic_write_bytes(path, (json.dumps(man, indent=2) + "\n").encode("utf-8"))  # last: a folder is whole or absent
    return path


__all__ = ["SimsError", "SimsWarning", "SimsFolder", "load_sims", "write_sims", "ROLES", "EMBEDDINGS", "LETTERS",
           "scan_npy"]
