"""Folders of precomputed real embeddings (``load_embeddings("local:<folder>")``).

Layouts understood:

- **per-caption rows** (e.g. ``flickr8k-100x5-clip-vitb32``): ``image_embeddings.npy`` and ``text_embeddings.npy``
  with one row per caption (image rows repeat for each of the image's captions) and optionally ``metadata.csv``
  (``image_id``, ``caption`` columns; row j = caption j; UTF-8, a spreadsheet's byte-order mark allowed).
  ``image_embeddings.npy`` may also hold one row per distinct image: ``images.csv`` (an ``image_id`` column, row
  i = image row i) then names them; without it, image row i is the i-th distinct ``image_id`` of ``metadata.csv``
  in order of first appearance. Without metadata, distinct images are runs of equal consecutive rows; rows of one
  image that are not consecutive (shuffled rows) make the grouping ambiguous and are an error (add
  ``metadata.csv`` with an ``image_id`` column), never a guess. A folder whose captions find their own images no
  more often than random scores would is refused (:func:`pairs_at_chance`): that is what a wrong order gives.
- **stacked pairs** (e.g. ``coco-val2017-500-clip-vitb16``): ``features_*.npy`` of shape (2, n, d), ``[0]`` image
  and ``[1]`` text embeddings, row i of each forming a pair; equal image rows are one image with several
  captions. ``features="features_clip_random.npy"`` (or a path to that file) picks another file of the folder.

Rows that are not unit length (raw encoder outputs) are divided by their norms, as every retrieval here is by
cosine, and ``meta["normalised"]`` says which; rows that already are keep their bits.

``model_info.json`` (optional) declares the encoder (``model_name``) and the data set (``dataset``, e.g.
``"flickr30k"``); the data set is never guessed from the folder's name (without it the run compares with no
published table).

``files=`` (file name -> bytes) hands the loader a folder's files already read, e.g. checked against published
sha256 sums (:mod:`.real`): it then reads those bytes and nothing from the disk, so what was verified is what is
loaded.

The pairs (images, with all their captions) are split by a seeded permutation into ``"test"`` and ``"train"``
(``test_fraction`` of the images go to test), so a bank never contains test items; then ``"val"`` is held out of
``"train"`` by the one rule of :func:`hubnorm.embeddings.validation_size` (``val=False``: test/train only). That
rule is :func:`split_by_images`, also used for collections that are not folders of this layout.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import List, Mapping, Optional, Tuple

import numpy as np

from .._validation import check_fraction, check_seed
from ..embeddings import EmbeddingDataset, EmbeddingSplit, hold_out_val
from .paths import PathLike


Files = Optional[Mapping[str, bytes]]   # a folder's files already read (name -> bytes), or None: read the disk


def _has(folder: Path, name: str, files: Files) -> bool:
    return name in files if files is not None else (folder / name).exists()


def _regular(path: Path) -> Path:
    """``path`` when it is a regular file; a named pipe, a device or a folder would block or mislead a read."""
    if path.exists() and not path.is_file():
        raise ValueError(f"{path} is not a regular file (a named pipe, a device or a folder): a loader reads files "
                         "only; copy the data into a regular file")
    return path


def _bytes(path: Path, files: Files) -> bytes:
    if files is None:
        return _regular(path).read_bytes()
    if path.name not in files:
        raise FileNotFoundError(f"{path} is not among the files handed to the loader ({sorted(files)})")
    return files[path.name]


def _load_npy(path: Path, files: Files = None) -> np.ndarray:
    """``np.load`` that names the file when it is truncated or not an array file (no pickles)."""
    try:
        return np.load(_regular(path) if files is None else io.BytesIO(_bytes(path, files)), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"{path} cannot be read as a .npy array ({exc}): the file is truncated or corrupt; "
                         "copy or export it again") from exc


#: the columns of ``metadata.csv`` that name a caption's image (the first present is read)
ID_COLUMNS = ("image_id", "image", "image_path")


def _read_metadata(path: Path, files: Files = None) -> Tuple[Optional[List[str]], Optional[List[str]]]:
    """``(image ids, caption texts)`` of ``metadata.csv`` (row j = caption j; None for a column it lacks): UTF-8,
    with or without the byte-order mark spreadsheet programs write. A file with neither an id nor a caption
    column, an empty id, or another encoding is an error that names the file and the fix."""
    try:
        text = _bytes(path, files).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}): save it as UTF-8 (CSV UTF-8 "
                         "in a spreadsheet program)") from exc
    with io.StringIO(text, newline="") as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
        columns = [c for c in (reader.fieldnames or []) if c is not None]
    if not rows:
        return None, None
    id_col = next((c for c in ID_COLUMNS if c in columns), None)
    if id_col is None and "caption" not in columns:
        raise ValueError(f"{path} has neither an image id column ({', '.join(ID_COLUMNS)}) nor a caption column; its "
                         f"header reads {columns}: name the columns image_id and caption, separated by commas")
    ids = None
    if id_col is not None:
        ids = [r.get(id_col) for r in rows]
        empty = [j for j, i in enumerate(ids) if i is None or not i.strip()]
        if empty:
            raise ValueError(f"{path}: {len(empty)} row(s) have no {id_col} (the first is caption row {empty[0]}, "
                             f"line {empty[0] + 2} of the file): give every caption the id of its image")
    caps = [r.get("caption") for r in rows] if "caption" in columns else None
    return ids, caps


def _runs(arr: np.ndarray) -> np.ndarray:
    """Group index of runs of identical consecutive rows."""
    new = np.ones(len(arr), dtype=bool)
    new[1:] = np.any(arr[1:] != arr[:-1], axis=1)
    return np.cumsum(new) - 1


def _per_caption(folder: Path, files: Files = None):
    img = _load_npy(folder / "image_embeddings.npy", files)
    txt = _load_npy(folder / "text_embeddings.npy", files)
    for arr, fname in ((img, "image_embeddings.npy"), (txt, "text_embeddings.npy")):
        if arr.ndim != 2 or not np.issubdtype(arr.dtype, np.floating):
            raise ValueError(f"{folder / fname}: expected a 2-D float array (rows, d); got shape {arr.shape}, "
                             f"dtype {arr.dtype}")
        if not arr.size:
            raise ValueError(f"{folder / fname} holds no embeddings (shape {arr.shape}): export them again")
    ids = texts = None
    if _has(folder, "metadata.csv", files):
        ids, texts = _read_metadata(folder / "metadata.csv", files)
        n_meta = len(ids) if ids is not None else len(texts or [])
        if n_meta != len(txt):
            raise ValueError(f"{folder}: metadata.csv has {n_meta} rows but text_embeddings.npy has {len(txt)}: "
                             "the embeddings and the captions do not match")
    if ids is not None and _has(folder, "images.csv", files):   # the image rows named: no order is assumed
        image_ids, _ = _read_metadata(folder / "images.csv", files)
        if image_ids is None or len(image_ids) != len(img):
            raise ValueError(f"{folder / 'images.csv'} must have an image_id column with one row per row of "
                             f"image_embeddings.npy ({len(img)}); got {0 if image_ids is None else len(image_ids)}")
        row_of = {}
        for r, i in enumerate(image_ids):
            if row_of.setdefault(i, r) != r:
                raise ValueError(f"{folder / 'images.csv'}: image_id {i!r} names rows {row_of[i]} and {r}: give each "
                                 "image row its own id")
        unknown = list(dict.fromkeys(i for i in ids if i not in row_of))
        if unknown:
            raise ValueError(f"{folder}: metadata.csv names {len(unknown)} image_id(s) that images.csv does not list "
                             f"(e.g. {unknown[0]!r}): list every image, or fix the ids")
        c2i = np.asarray([row_of[i] for i in ids], dtype=np.int64)
        n_img = len(img)
    elif ids is not None:
        order = {}
        c2i = np.asarray([order.setdefault(i, len(order)) for i in ids], dtype=np.int64)
        n_img = len(order)
        image_ids = list(order)
    else:
        c2i = _runs(img) if len(img) == len(txt) else None
        if c2i is None:
            raise ValueError(f"{folder}: {len(img)} image rows for {len(txt)} caption rows and no metadata.csv to "
                             "say which caption belongs to which image")
        n_distinct = len(np.unique(img, axis=0))
        if n_distinct != int(c2i.max()) + 1:
            raise ValueError(
                f"{folder}: the rows of image_embeddings.npy are not grouped by image ({n_distinct} distinct image "
                f"rows in {int(c2i.max()) + 1} runs of equal consecutive rows, e.g. shuffled rows), and there is no "
                "metadata.csv: which captions belong to one image is ambiguous. Add metadata.csv with an image_id "
                "column (row j = caption j), or sort the rows so that each image's captions are consecutive")
        n_img = int(c2i.max()) + 1
        image_ids = None
    if len(img) == len(txt) and len(img) != n_img:  # one row per caption: keep the first row of each image
        first = np.full(n_img, -1, dtype=np.int64)
        for j in range(len(c2i) - 1, -1, -1):
            first[c2i[j]] = j
        if not np.allclose(img, img[first[c2i]], atol=1e-5):
            raise ValueError(f"{folder}: image_embeddings.npy rows of the same image differ")
        images = img[first]
    elif len(img) == n_img:
        images = img
    else:
        raise ValueError(f"{folder}: image_embeddings.npy has {len(img)} rows; expected {len(txt)} (one per caption) "
                         f"or {n_img} (one per image)")
    meta = {}
    return images, txt, c2i, image_ids, texts, meta


def _model_info(folder: Path, files: Files = None) -> dict:
    """``model`` and ``dataset`` declared in ``model_info.json`` (``model_name``, ``dataset``), when present."""
    path = folder / "model_info.json"
    if not _has(folder, path.name, files):
        return {}
    try:
        info = json.loads(_bytes(path, files))
    except ValueError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc}): fix or remove it") from exc
    if not isinstance(info, dict):
        raise ValueError(f"{path} must hold a JSON object such as {{\"model_name\": ..., \"dataset\": ...}}")
    out = {}
    for key, field in (("model", "model_name"), ("dataset", "dataset")):
        value = info.get(field)
        if value is not None:
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{path}: {field!r} must be a non-empty string; got {value!r}")
            out[key] = value.strip()
    return out


def _stacked(path: Path, files: Files = None):
    """Row i of ``[0]`` and of ``[1]`` form a pair. Equal image rows are one image (an image repeated for each of
    its captions), as in the per-caption layout: each distinct row, in order of first appearance, is one image
    with the captions of all its copies (a gallery with copies of one image would count its own copy as a miss)."""
    arr = _load_npy(path, files)
    if arr.ndim != 3 or arr.shape[0] != 2 or not np.issubdtype(arr.dtype, np.floating):
        raise ValueError(f"{path}: expected a float array of shape (2, n, d) (images, texts); got shape {arr.shape}, "
                         f"dtype {arr.dtype}")
    if not arr.size:
        raise ValueError(f"{path} holds no embeddings (shape {arr.shape}): export them again")
    images, texts = arr[0], arr[1]
    _, first, inverse = np.unique(images, axis=0, return_index=True, return_inverse=True)
    meta = {"file": path.name}
    if len(first) == len(images):
        return images, texts, np.arange(len(images)), None, None, meta
    order = np.argsort(first, kind="stable")          # distinct rows in order of first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    meta["grouped_image_rows"] = int(len(images) - len(first))
    return images[np.sort(first)], texts, rank[inverse.reshape(-1)], None, None, meta


def _unit(x: np.ndarray, path: Path, what: str, meta: dict, row_name=lambda k: f"row {k}") -> np.ndarray:
    """``x`` with unit rows: unchanged (the same bits) when every row already is (within
    :data:`hubnorm._validation.NORM_TOLERANCE`), else every row divided by its norm (as every notebook and the
    command line would; raw encoder outputs are often saved unnormalised), noted in ``meta["normalised"]``
    (``what``: "image embeddings", "text embeddings"). Every retrieval here is by cosine. An all-zero row is an
    error that names the folder and the row (``row_name``)."""
    from .._validation import NORM_TOLERANCE, unit_rows

    norms = np.linalg.norm(x.astype(np.float64), axis=1)
    if np.all(np.abs(norms - 1) <= NORM_TOLERANCE):
        return x
    if np.any(norms == 0):
        raise ValueError(f"{path}: the {what} have {int(np.sum(norms == 0))} all-zero row(s) (the first is "
                         f"{row_name(int(np.argmax(norms == 0)))}): an embedding of nothing has no direction; drop "
                         "those rows (and their pairs)")
    meta.setdefault("normalised", []).append(what)
    return unit_rows(x, f"{path}: the {what}")


#: captions read by the pairing check of :func:`read_local` (a seeded sample of a larger folder)
PAIR_CHECK_CAPTIONS = 2000


def pairs_at_chance(images: np.ndarray, captions: np.ndarray, caption_to_image: np.ndarray
                    ) -> Optional[Tuple[float, float]]:
    """``(raw R@1, chance)`` when the captions find their own images no more often than random scores would
    (:func:`hubnorm.score_checks.at_chance`), else None: the pairs do not belong to these embeddings. Read on a
    seeded sample of :data:`PAIR_CHECK_CAPTIONS` captions against every image, in row blocks; folders of fewer than
    :data:`hubnorm.score_checks.MIN_ITEMS` images are not judged."""
    from ..score_checks import MIN_ITEMS, at_chance

    n_img = len(images)
    if n_img < MIN_ITEMS:
        return None
    rows = np.arange(len(captions))
    if len(rows) > PAIR_CHECK_CAPTIONS:
        rows = np.sort(np.random.default_rng(0).choice(rows, PAIR_CHECK_CAPTIONS, replace=False))
    block = max(1, (1 << 22) // n_img)
    top1 = np.concatenate([np.argmax(captions[rows[r0:r0 + block]] @ images.T, axis=1)
                           for r0 in range(0, len(rows), block)])
    r1 = float(np.mean(top1 == caption_to_image[rows]))
    chance = 1.0 / n_img
    return (r1, chance) if at_chance(r1, chance, len(rows)) else None


def read_local(folder: PathLike, *, features: str = "features_clip.npy",
               files: Files = None, check_pairs: bool = True) -> Tuple[EmbeddingSplit, str, dict]:
    """A folder's whole collection, unsplit (module docstring: the layouts): ``(full, name, meta)``, ``full`` an
    :class:`EmbeddingSplit` of every distinct image with all its captions (float32, the folder's order), ``name``
    the folder's name (with the stacked file's stem when it is not ``features_clip.npy``), ``meta`` what
    ``model_info.json`` declares and the folder. ``folder``, ``features``, ``files``, ``check_pairs``: as
    :func:`load_local_embeddings`."""
    if not isinstance(check_pairs, (bool, np.bool_)):
        raise TypeError(f"check_pairs must be True or False; got {check_pairs!r}")
    path = Path(folder).expanduser()
    if files is None and not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    label = None
    if files is None and path.is_file():
        loaded = _stacked(path)
        folder_ = path.parent
        label = f"{folder_.name}/{path.stem}" if path.name != "features_clip.npy" else None
    elif _has(path, "image_embeddings.npy", files) and _has(path, "text_embeddings.npy", files):
        loaded = _per_caption(path, files)
        folder_ = path
    elif _has(path, features, files):
        loaded = _stacked(path / features, files)
        folder_ = path
        label = f"{folder_.name}/{Path(features).stem}" if features != "features_clip.npy" else None
    else:
        raise ValueError(f"{path}: no known embedding layout (image_embeddings.npy + text_embeddings.npy, or "
                         f"{features} of shape (2, n, d))")
    images, texts, c2i, image_ids, caption_texts, meta = loaded
    meta = {**meta, **_model_info(folder_, files), "folder": str(folder_)}
    images = np.ascontiguousarray(images, dtype=np.float32)
    texts = np.ascontiguousarray(texts, dtype=np.float32)
    if images.shape[1] != texts.shape[1]:
        raise ValueError(f"{path}: image dim {images.shape[1]} != text dim {texts.shape[1]}")
    image_row = (lambda k: f"image {k}, image_id {image_ids[k]!r}") if image_ids is not None else \
        (lambda k: f"image {k} in the folder's order")
    images = _unit(images, path, "image embeddings", meta, image_row)
    texts = _unit(texts, path, "text embeddings", meta)
    full = EmbeddingSplit(images=images, captions=texts, caption_to_image=c2i, image_ids=image_ids,
                          caption_texts=caption_texts)
    if check_pairs:
        found = pairs_at_chance(images, texts, c2i)
        if found is not None:
            r1, chance = found
            raise ValueError(
                f"{path}: its captions find their own image first for {100 * r1:.1f}% of them, at chance level "
                f"({100 * chance:.2f}% for random pairs): the captions are not paired with the right images. "
                "Common causes: image rows in another order than metadata.csv's image_id (with one row per image and "
                "no images.csv naming the rows, row i is the i-th distinct image_id in order of first appearance), "
                "rows shuffled in one file only, or files of different exports. Fix the order or add images.csv "
                "(an image_id column, row i = image row i); a folder at chance on purpose (a random-init "
                "control) loads with check_pairs=False (--source-option check_pairs=false)")
    return full, label or folder_.name, meta


def load_local_embeddings(folder: PathLike, *, test_fraction: float = 0.5, seed: int = 0,
                          features: str = "features_clip.npy", name: Optional[str] = None,
                          val: bool = True, files: Files = None, check_pairs: bool = True) -> EmbeddingDataset:
    """Real embeddings from a folder (see module docstring; :func:`read_local`) split into ``"test"`` and
    ``"train"`` by images (:func:`split_by_images`).

    Args:
        folder: the folder, or a ``features_*.npy`` file.
        test_fraction: share of images (each with all its captions) in ``"test"``; the rest is ``"train"``.
        seed: seed of the permutation.
        features: which ``features_*.npy`` to read in the stacked layout.
        val: also hold a ``"val"`` split out of ``"train"`` (hyperparameter selection), sized by the one rule of
            :func:`hubnorm.embeddings.validation_size`; False keeps test/train only.
        files: the folder's files already read (file name -> bytes, e.g. verified against checksums): read these,
            and nothing from the disk; ``folder`` must then name the folder (it only labels messages and ``meta``).
        check_pairs: refuse a folder whose captions find their own images no more often than random scores would
            (:func:`pairs_at_chance`: rows in another order than the ids, files of different exports); False for a
            folder at chance on purpose (a random-init control).
    """
    full, label, meta = read_local(folder, features=features, files=files, check_pairs=check_pairs)
    return split_by_images(full, name=name or label, meta=meta, test_fraction=test_fraction, seed=seed, val=val)


def split_by_images(full: EmbeddingSplit, *, name: str, meta: Optional[dict] = None, test_fraction: float = 0.5,
                    seed: int = 0, val: bool = True) -> EmbeddingDataset:
    """THE split of a real collection (module docstring): a seeded permutation of the images (each with all its
    captions) gives ``"test"`` (``test_fraction`` of them) and ``"train"``; ``val=True`` then holds ``"val"`` out
    of ``"train"`` (:func:`hubnorm.embeddings.hold_out_val`). Returns a ``source="real"`` dataset whose ``meta``
    adds ``test_fraction``, ``seed``, ``n_images`` and ``n_captions`` (of ``full``) to ``meta``."""
    test_fraction = check_fraction(test_fraction, "test_fraction (the share of images in the test split)",
                                   below_one=True)
    seed = check_seed(seed)
    n = full.n_images
    n_test = int(round(test_fraction * n))
    if not 0 < n_test < n:
        raise ValueError(f"test_fraction {test_fraction} leaves an empty split for {n} images")
    perm = np.random.default_rng(seed).permutation(n)
    splits = {"test": full.subset_images(np.sort(perm[:n_test])), "train": full.subset_images(np.sort(perm[n_test:]))}
    meta = {**(meta or {}), "test_fraction": test_fraction, "seed": seed, "n_images": n, "n_captions": full.n_captions}
    ds = EmbeddingDataset(name=name, source="real", splits=splits, meta=meta)
    return hold_out_val(ds, seed) if val else ds


__all__ = ["load_local_embeddings", "pairs_at_chance", "read_local", "split_by_images"]
