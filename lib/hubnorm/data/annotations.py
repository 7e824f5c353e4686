"""Caption annotation loaders: image file names, caption texts and an explicit caption-to-image index.

Supported formats (auto-detected by :func:`read_annotations`):

- **Karpathy** ``dataset_coco.json`` / ``dataset_flickr30k.json`` / ``dataset_flickr8k.json``:
  ``{"images": [{"filename", "filepath" (COCO), "split", "sentences": [{"raw"}, ...]}, ...]}``; ``restval``
  counts as ``train``.
- **karpathy-test-val** (MacCap / ``mscoco_test.json``, ``flickr30k_test.json``): a JSON list of
  ``{"split", "image_name", ["file_path"], "captions": [...]}``.
- **CLIP_benchmark**: ``flickr*_{split}_karpathy.txt`` (header ``image,caption``, one ``name.jpg,caption`` line per
  caption) and ``coco_{split}_karpathy.json`` (COCO captions format: ``{"images": [{"id", "file_name"}],
  "annotations": [{"image_id", "caption"}]}``).
- **ALBEF-style** JSON list of ``{"image": "dir/name.jpg", "caption": [...]}``.
- **Flickr8k** ``Flickr8k.token.txt`` (``name.jpg#k<TAB>caption``) with the ``Flickr_8k.{train,dev,test}Images.txt``
  split lists beside it.

Captions keep their file order; images keep first-appearance order. The caption-to-image index is always
explicit (COCO's Karpathy test split has 10 images with 6 captions: never assume ``j // 5``).
"""

from __future__ import annotations

import hashlib
import html
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .paths import PathLike, annotations_dir
from .registry import SPLITS, check_split, dataset_info

_KARPATHY_SPLIT = {"train": "train", "restval": "train", "val": "val", "test": "test", "dev": "val"}
_COCO_NAME = re.compile(r"^COCO_(train|val|test)(\d{4})_\d+\.jpg$")


@dataclass
class CaptionSplit:
    """Captions of one split and their images.

    ``image_files[i]`` is image ``i``'s path relative to the dataset's images root (COCO: ``val2014/COCO_...jpg``);
    ``caption_to_image[j]`` is the image of caption ``j``.
    """

    dataset: str
    split: str
    image_files: List[str]
    captions: List[str]
    caption_to_image: np.ndarray
    source: str = ""

    def __post_init__(self):
        self.caption_to_image = np.asarray(self.caption_to_image, dtype=np.int64)
        if len(self.caption_to_image) != len(self.captions):
            raise ValueError(f"{len(self.captions)} captions but {len(self.caption_to_image)} caption-to-image entries")
        if len(self.captions) and (self.caption_to_image.min() < 0 or self.caption_to_image.max() >= len(self.image_files)):
            raise ValueError("caption_to_image points outside the image list")
        uncaptioned = np.setdiff1d(np.arange(len(self.image_files)), self.caption_to_image)
        if uncaptioned.size:
            raise ValueError(f"{uncaptioned.size} image(s) have no caption in {self.source or 'the annotations'} "
                             f"(first: {self.image_files[uncaptioned[0]]})")

    @property
    def n_images(self) -> int:
        return len(self.image_files)

    @property
    def n_captions(self) -> int:
        return len(self.captions)

    @property
    def image_names(self) -> List[str]:
        """Bare file names (no folder), e.g. ``COCO_val2014_000000391895.jpg``."""
        return [f.rsplit("/", 1)[-1] for f in self.image_files]

    def captions_per_image(self) -> np.ndarray:
        return np.bincount(self.caption_to_image, minlength=self.n_images)

    def image_paths(self, images_root: PathLike) -> List[Path]:
        root = Path(images_root)
        return [root / f for f in self.image_files]

    def fingerprint(self) -> str:
        """sha256 over image files, captions and the index: identifies the content independent of the file format."""
        h = hashlib.sha256()
        h.update(json.dumps([self.image_files, self.captions, self.caption_to_image.tolist()],
                            ensure_ascii=False).encode("utf-8"))
        return h.hexdigest()


def _build(dataset, split, groups: Sequence[Tuple[str, Sequence[str]]], source, unescape_html) -> CaptionSplit:
    """CaptionSplit from ``[(image_file, [captions...]), ...]`` (images merged by file name, first-seen order)."""
    index: Dict[str, int] = {}
    files: List[str] = []
    caps: List[str] = []
    c2i: List[int] = []
    for image, captions in groups:
        i = index.get(image)
        if i is None:
            i = index[image] = len(files)
            files.append(image)
        for c in captions:
            c = str(c).strip()
            caps.append(html.unescape(c) if unescape_html else c)
            c2i.append(i)
    if not files:
        raise ValueError(f"no images of split {split!r} in {source}")
    return CaptionSplit(dataset, split, files, caps, np.asarray(c2i, dtype=np.int64), str(source))


def _coco_subdir(name: str) -> str:
    m = _COCO_NAME.match(name.rsplit("/", 1)[-1])
    return f"{m.group(1)}{m.group(2)}/" if m and "/" not in name else ""


def _guess_dataset(path: Path, default: str = "") -> str:
    n = path.name.lower()
    for key, ds in (("flickr30k", "flickr30k"), ("flickr8k", "flickr8k"), ("coco", "coco")):
        if key in n:
            return ds
    return default or "unknown"


def _split_hint(path: Path) -> Optional[str]:
    """Split named in a single-split file name (``coco_test_karpathy.json`` -> ``test``)."""
    m = re.search(r"(?:^|[_.-])(train|val|test|dev|restval)(?:[_.-]|$)", path.stem.lower())
    return _KARPATHY_SPLIT[m.group(1)] if m else None


def _check_hint(path: Path, split: str):
    hint = _split_hint(path)
    if hint is not None and hint != split:
        raise ValueError(f"{path.name} holds the {hint!r} split, not {split!r}")


# ---------------------------------------------------------------------------------------------- readers
def read_karpathy_json(path: PathLike, split: str, dataset: Optional[str] = None, *,
                       unescape_html: bool = False, data: Optional[dict] = None) -> CaptionSplit:
    """Karpathy ``dataset_*.json``: ``restval`` counts as ``train``."""
    path = Path(path)
    check_split(split)
    data = data if data is not None else _load_json(path)
    dataset = dataset or _guess_dataset(path, str(data.get("dataset", "")))
    groups = []
    for img in data["images"]:
        s = _KARPATHY_SPLIT.get(img.get("split"))
        if s is None:
            raise ValueError(f"{path.name}: image {img.get('filename')} has unknown split {img.get('split')!r}")
        if s != split:
            continue
        name = img["filename"]
        if img.get("filepath"):
            name = f"{img['filepath'].strip('/')}/{name}"
        groups.append((name, [s_["raw"] for s_ in img["sentences"]]))
    return _build(dataset, split, groups, path, unescape_html)


def read_karpathy_test_val(path: PathLike, split: str, dataset: Optional[str] = None, *,
                           unescape_html: bool = False, data: Optional[list] = None) -> CaptionSplit:
    """JSON list of ``{"split", "image_name", ["file_path"], "captions"}`` (``mscoco_test.json`` etc.)."""
    path = Path(path)
    check_split(split)
    data = data if data is not None else _load_json(path)
    found = {_KARPATHY_SPLIT.get(e.get("split"), e.get("split")) for e in data if "split" in e}
    if not found:
        _check_hint(path, split)
    elif split not in found:
        raise ValueError(f"{path.name} holds split(s) {sorted(found)}, not {split!r}")
    groups = []
    for e in data:
        if "split" in e and _KARPATHY_SPLIT.get(e["split"], e["split"]) != split:
            continue
        name = e["image_name"]
        name = f"{e['file_path'].strip('/')}/{name}" if e.get("file_path") else _coco_subdir(name) + name
        groups.append((name, e["captions"]))
    return _build(dataset or _guess_dataset(path), split, groups, path, unescape_html)


def read_albef_json(path: PathLike, split: str, dataset: Optional[str] = None, *,
                    unescape_html: bool = False, data: Optional[list] = None) -> CaptionSplit:
    """JSON list of ``{"image": "folder/name.jpg", "caption": [...] or "..."}`` (ALBEF / BLIP test files)."""
    path = Path(path)
    check_split(split)
    _check_hint(path, split)
    data = data if data is not None else _load_json(path)
    groups = []
    for e in data:
        caps = e["caption"] if isinstance(e["caption"], list) else [e["caption"]]
        name = e["image"]
        # "flickr30k-images/x.jpg" -> "x.jpg"; COCO keeps "val2014/COCO_...jpg"
        if not _COCO_NAME.match(name.rsplit("/", 1)[-1]):
            name = name.rsplit("/", 1)[-1]
        groups.append((name, caps))
    return _build(dataset or _guess_dataset(path), split, groups, path, unescape_html)


def read_coco_captions_json(path: PathLike, split: str, dataset: Optional[str] = None, *,
                            unescape_html: bool = False, data: Optional[dict] = None) -> CaptionSplit:
    """COCO captions format (CLIP_benchmark ``coco_{split}_karpathy.json``): images in file order."""
    path = Path(path)
    check_split(split)
    _check_hint(path, split)
    data = data if data is not None else _load_json(path)
    by_image: Dict[object, List[str]] = {img["id"]: [] for img in data["images"]}
    for a in data["annotations"]:
        if a["image_id"] not in by_image:
            raise ValueError(f"{path.name}: caption {a.get('id')} refers to unknown image {a['image_id']}")
        by_image[a["image_id"]].append(a["caption"])
    groups = []
    for img in data["images"]:
        name = img["file_name"]
        groups.append((_coco_subdir(name) + name, by_image[img["id"]]))
    return _build(dataset or "coco", split, groups, path, unescape_html)


def read_clip_benchmark_txt(path: PathLike, split: str, dataset: Optional[str] = None, *,
                            unescape_html: bool = False) -> CaptionSplit:
    """CLIP_benchmark ``flickr30k_{split}_karpathy.txt``: header line, then ``name.jpg,caption`` lines."""
    path = Path(path)
    check_split(split)
    _check_hint(path, split)
    groups = []
    with open(path, encoding="utf-8") as fh:
        fh.readline()
        for lineno, line in enumerate(fh, 2):
            line = line.strip()
            if not line:
                continue
            image, sep, caption = line.partition(".jpg,")
            if not sep:
                raise ValueError(f"{path.name}:{lineno}: expected 'name.jpg,caption'; got {line[:80]!r}")
            groups.append((image + ".jpg", [caption]))
    return _build(dataset or _guess_dataset(path), split, groups, path, unescape_html)


_F8K_SPLIT_FILES = {"train": "trainImages", "val": "devImages", "test": "testImages"}


def flickr8k_split_file(token_file: PathLike, split: str) -> Path:
    """``Flickr_8k.{train,dev,test}Images[.clean].txt`` beside the token file."""
    folder = Path(token_file).parent
    key = _F8K_SPLIT_FILES[check_split(split, "flickr8k")]
    for cand in (f"Flickr_8k.{key}.txt", f"Flickr_8k.{key}.clean.txt"):
        if (folder / cand).exists():
            return folder / cand
    raise FileNotFoundError(f"no Flickr_8k.{key}[.clean].txt beside {token_file}: the Flickr8k token file needs the "
                            "official split lists (Flickr_8k.trainImages.txt, devImages, testImages) in its folder")


def read_flickr8k_token(path: PathLike, split: str, split_file: Optional[PathLike] = None, *,
                        unescape_html: bool = False) -> CaptionSplit:
    """Flickr8k ``Flickr8k.token.txt`` (``name.jpg#k<TAB>caption``); images in the split list's order."""
    path = Path(path)
    check_split(split, "flickr8k")
    split_file = Path(split_file) if split_file else flickr8k_split_file(path, split)
    names = [ln.strip() for ln in split_file.read_text(encoding="utf-8").splitlines() if ln.strip()]
    caps: Dict[str, List[str]] = {n: [] for n in names}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            key, sep, caption = line.partition("\t")
            if not sep:  # some copies use a space instead of the tab
                key, _, caption = line.partition(" ")
            name = key.split("#", 1)[0]
            if name in caps:
                caps[name].append(caption)
    missing = [n for n, c in caps.items() if not c]
    if missing:
        raise ValueError(f"{len(missing)} image(s) of {split_file.name} have no caption in {path.name} "
                         f"(first: {missing[0]})")
    return _build("flickr8k", split, [(n, caps[n]) for n in names], path, unescape_html)


def _load_json(path: Path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def read_annotations(path: PathLike, split: str = "test", dataset: Optional[str] = None, *,
                     unescape_html: bool = False) -> CaptionSplit:
    """Read one split from any supported annotation file (format detected from the content)."""
    path = Path(path)
    check_split(split, dataset or "")
    if not path.exists():
        raise FileNotFoundError(f"annotation file {path} does not exist")
    if path.suffix.lower() == ".json":
        data = _load_json(path)
        kw = dict(unescape_html=unescape_html, data=data)
        if isinstance(data, dict) and isinstance(data.get("images"), list):
            if "annotations" in data:
                return read_coco_captions_json(path, split, dataset, **kw)
            return read_karpathy_json(path, split, dataset, **kw)
        if isinstance(data, list) and data and isinstance(data[0], dict):
            if "image_name" in data[0]:
                return read_karpathy_test_val(path, split, dataset, **kw)
            if "image" in data[0] and "caption" in data[0]:
                return read_albef_json(path, split, dataset, **kw)
        raise ValueError(f"{path}: unrecognised caption JSON (expected Karpathy dataset_*.json, a list of "
                         "{image_name, captions}, a list of {image, caption} or COCO captions format)")
    with open(path, encoding="utf-8") as fh:
        first = fh.readline()
    if "\t" in first or re.match(r"^\S+\.jpg#\d", first):
        return read_flickr8k_token(path, split, unescape_html=unescape_html)
    if first.strip().lower().startswith("image") and "," in first:
        return read_clip_benchmark_txt(path, split, dataset, unescape_html=unescape_html)
    raise ValueError(f"{path}: unrecognised caption file (expected CLIP_benchmark 'image,caption' text or a "
                     "Flickr8k token file)")


# ---------------------------------------------------------------------------------------------- lookup
def candidate_annotation_files(dataset: str, split: str, data_dir: Optional[PathLike] = None) -> List[Path]:
    """Files tried (in order) when no annotation file is given, all under ``<data root>/annotations``."""
    folder = annotations_dir(data_dir)
    short = {"coco": "mscoco", "flickr30k": "flickr30k", "flickr8k": "flickr8k"}[dataset]
    cands = [folder / f"dataset_{dataset}.json", folder / f"{short}_{split}.json"]
    if dataset == "coco":
        cands += [folder / f"coco_{split}_karpathy.json", folder / f"coco_karpathy_{split}.json"]
    else:
        cands += [folder / f"{dataset}_{split}_karpathy.txt"]
    if dataset == "flickr8k":
        cands += [folder / "Flickr8k.token.txt", folder / "Flickr8k.token.clean.txt"]
    return cands


def load_captions(dataset: str, split: str = "test", annotations: Optional[PathLike] = None, *,
                  data_dir: Optional[PathLike] = None, unescape_html: bool = False) -> CaptionSplit:
    """Captions of ``dataset``'s Karpathy ``split`` (``"train"`` includes ``restval``).

    Args:
        dataset: ``"coco"``, ``"flickr30k"`` or ``"flickr8k"``.
        split: ``"train"``, ``"val"`` or ``"test"``.
        annotations: an annotation file (any supported format) or a folder to search; default: the files of
            :func:`candidate_annotation_files` under ``<data root>/annotations``.
        unescape_html: turn entities such as ``&amp;`` into characters (off: texts stay as in the file).
    """
    dataset_info(dataset)
    check_split(split, dataset)
    if annotations is not None and Path(annotations).is_file():
        out = read_annotations(annotations, split, dataset, unescape_html=unescape_html)
    else:
        if annotations is not None:
            folder = Path(annotations)
            cands = [folder / p.name for p in candidate_annotation_files(dataset, split, data_dir)]
        else:
            cands = candidate_annotation_files(dataset, split, data_dir)
        found = next((p for p in cands if p.exists()), None)
        if found is None:
            raise FileNotFoundError(
                f"no {dataset} caption annotations found; looked for:\n  " + "\n  ".join(map(str, cands)) +
                f"\nRun:  python -m hubnorm.data fetch {dataset} --what annotations\n"
                "or pass annotations=<file> (Karpathy dataset_*.json, CLIP_benchmark or mscoco_test.json-style file)."
            )
        out = read_annotations(found, split, dataset, unescape_html=unescape_html)
    out.dataset = dataset
    return out


__all__ = [
    "CaptionSplit", "SPLITS", "load_captions", "read_annotations", "read_karpathy_json", "read_karpathy_test_val",
    "read_albef_json", "read_coco_captions_json", "read_clip_benchmark_txt", "read_flickr8k_token",
    "candidate_annotation_files", "flickr8k_split_file",
]
