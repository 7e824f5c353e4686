"""Checksummed downloads with pooch, and the folder layout they fill.

``<data root>`` = ``$HUBNORM_DATA`` or ``<repo>/data/raw`` (gitignored)::

    <data root>/downloads/caption_datasets.zip, val2014.zip, ...   the downloaded archives
    <data root>/annotations/dataset_coco.json, dataset_flickr30k.json, dataset_flickr8k.json
    <data root>/coco/images/val2014/COCO_val2014_*.jpg, .../train2014/COCO_train2014_*.jpg
    <data root>/flickr30k/images/<id>.jpg          (placed by hand: see ``registry.FLICKR30K_MANUAL``)
    <data root>/flickr8k/images/<name>.jpg         (placed by hand)

pooch skips a file that is already present with the right checksum, so a file downloaded elsewhere (or with
``wget -c``) and copied to ``<data root>/downloads/<name>`` is used as is. HTTP(S) downloads go through
:class:`.download.ResumableHTTPDownloader`: an interrupted download leaves ``<name>.part`` (+ ``.part.json``) and
the next call resumes it with a range request; pooch still checks the checksum of the completed file, and the
partial is deleted afterwards (also when the checksum fails, so the next try starts from scratch).
One function does that for every URL: :func:`download_file` (also used by :mod:`.real`).
"""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path
from typing import Iterable, List, Optional

from .paths import PathLike, annotations_dir, data_root, images_dir
from .registry import RESOURCES, check_split, dataset_info


class DownloadError(RuntimeError):
    """A download failed (offline, HTTP error, checksum mismatch); the message says how to place the file by hand."""


class ManualDownloadRequired(RuntimeError):
    """The data cannot be downloaded automatically (licence / request form); the message says where to put it."""


def downloads_dir(data_dir: Optional[PathLike] = None) -> Path:
    return data_root(data_dir) / "downloads"


def _hash_hint(res: dict) -> str:
    hashes = [res["known_hash"]] if res.get("known_hash") else list(res.get("accepted_hashes", []))
    return " or ".join(hashes) if hashes else "no published checksum"


def download_file(url: str, folder: Path, fname: str, known_hash: Optional[str], *, progressbar: bool = True,
                  manual: str = "") -> Path:
    """Download ``url`` to ``folder / fname`` with pooch, checked against ``known_hash`` (``"sha256:<hex>"``,
    ``"md5:<hex>"``; None: unchecked), resuming an interrupted HTTP(S) download (:mod:`.download`).

    A file already there with the right checksum is returned without a request. pooch writes to a temporary file
    in ``folder`` and moves it into place only after the checksum matched, so ``folder / fname`` never holds a
    partial or corrupt file. Raises :class:`DownloadError` (offline, HTTP error, checksum mismatch) with the URL,
    the reason and ``manual`` (how to place the file by hand), the partial deleted after a checksum mismatch.
    """
    import pooch
    import requests

    from .download import ResumableHTTPDownloader, discard_partial, partial_paths

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / fname
    downloader = None
    if url.lower().startswith(("http://", "https://")):
        downloader = ResumableHTTPDownloader(target, progressbar=progressbar)
    try:
        path = Path(pooch.retrieve(url, known_hash=known_hash, fname=fname, path=folder, progressbar=progressbar,
                                   downloader=downloader))
    except (requests.exceptions.RequestException, ConnectionError, TimeoutError) as exc:
        resume = (f"\nThe bytes received so far are kept in {partial_paths(target)[0]}; rerunning the same "
                  "command resumes the download." if partial_paths(target)[0].exists() else "")
        raise DownloadError(f"could not download {url}: {type(exc).__name__}: {exc}{resume}\n{manual}") from exc
    except ValueError as exc:  # pooch: hash mismatch
        if "hash" in str(exc).lower():
            discard_partial(target)  # never resume from corrupt bytes
            raise DownloadError(f"checksum mismatch for {url}: {exc}\n{manual}") from exc
        raise
    discard_partial(target)  # pooch verified (or, without known_hash, accepted) and moved the file into place
    return path


def retrieve(name: str, data_dir: Optional[PathLike] = None, *, progressbar: bool = True) -> Path:
    """Download (or find) resource ``name`` of :data:`registry.RESOURCES` into ``<data root>/downloads``.

    Raises :class:`DownloadError` with the failed URL and the manual-placement instructions when offline.
    """
    import pooch

    if name not in RESOURCES:
        raise ValueError(f"unknown resource {name!r}; known: {sorted(RESOURCES)}")
    res = RESOURCES[name]
    folder = downloads_dir(data_dir)
    target = folder / res["fname"]
    manual = (f"If this machine has no internet access, download\n    {res['url']}\n({res['size']}) elsewhere, "
              f"place it at\n    {target}\n(checksum {_hash_hint(res)}) and rerun the same command: the file is "
              "then verified and used without downloading.")
    path = download_file(res["url"], folder, res["fname"], res.get("known_hash"), progressbar=progressbar,
                         manual=manual)
    accepted = res.get("accepted_hashes")
    if accepted and not res.get("known_hash"):
        ok = False
        for h in accepted:
            alg, _, digest = h.partition(":")
            if pooch.file_hash(str(path), alg=alg) == digest:
                ok = True
                break
        if not ok:
            raise DownloadError(f"{path} matches none of the published checksums {accepted}: the file is corrupt "
                                f"or incomplete; delete it and rerun.\n{manual}")
    return path


def _extract_members(zip_path: Path, members: Iterable[str], dest: Path) -> List[Path]:
    """Extract the named members (matched by base name) into ``dest``, atomically per file."""
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    with zipfile.ZipFile(zip_path) as zf:
        names = {n.rsplit("/", 1)[-1]: n for n in zf.namelist() if not n.endswith("/")}
        for m in members:
            if m not in names:
                raise DownloadError(f"{zip_path} has no member {m} (found {sorted(names)[:10]})")
            target = dest / m
            tmp = dest / f".{m}.tmp"
            with zf.open(names[m]) as src, open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst)
            tmp.replace(target)
            out.append(target)
    return out


def _extract_all(zip_path: Path, dest: Path, *, progressbar: bool = True) -> Path:
    """Unzip an image archive into ``dest`` (``val2014.zip`` -> ``dest/val2014/...``); a marker file records it."""
    marker = dest / f".{zip_path.name}.extracted"
    if marker.exists():
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    from tqdm.auto import tqdm
    with zipfile.ZipFile(zip_path) as zf:
        infos = zf.infolist()
        for info in tqdm(infos, desc=f"unzip {zip_path.name}", unit="file", disable=not progressbar):
            zf.extract(info, dest)
    marker.write_text("ok\n")
    return dest


def fetch(dataset: str, what: str = "annotations", *, splits: Optional[Iterable[str]] = None,
          data_dir: Optional[PathLike] = None, progressbar: bool = True) -> List[Path]:
    """Download and unpack ``dataset``'s annotations or images.

    Args:
        dataset: ``"coco"``, ``"flickr30k"`` or ``"flickr8k"``.
        what: ``"annotations"`` (Karpathy captions), ``"images"`` or ``"all"``.
        splits: image archives needed for these splits only (COCO test/val: val2014; train: train2014 + val2014).
    Returns:
        the extracted annotation files or image folders.
    Raises:
        DownloadError (offline / checksum), ManualDownloadRequired (Flickr images).
    """
    info = dataset_info(dataset)
    if what not in ("annotations", "images", "all"):
        raise ValueError(f"what must be 'annotations', 'images' or 'all'; got {what!r}")
    splits = [check_split(s, dataset) for s in (splits or ("test", "val", "train"))]
    out: List[Path] = []
    if what in ("annotations", "all"):
        for name in info["annotations"]:
            res = RESOURCES[name]
            path = retrieve(name, data_dir, progressbar=progressbar)
            if res.get("members"):
                out += _extract_members(path, [m for m in res["members"] if dataset in m] or res["members"],
                                        annotations_dir(data_dir))
            else:
                target = annotations_dir(data_dir) / res["fname"]
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
                out.append(target)
    if what in ("images", "all"):
        dest = images_dir(dataset, data_dir)
        if info["images"] == "manual":
            if dest.is_dir() and any(p.suffix.lower() in (".jpg", ".jpeg", ".png") for p in dest.iterdir()):
                return out + [dest]  # placed by hand already
            raise ManualDownloadRequired(info["manual"].format(images_dir=dest))
        needed: List[str] = []
        for s in splits:
            for r in info["images"][s]:
                if r not in needed:
                    needed.append(r)
        for name in needed:
            out.append(_extract_all(retrieve(name, data_dir, progressbar=progressbar), dest, progressbar=progressbar))
    return out


__all__ = ["fetch", "retrieve", "download_file", "downloads_dir", "DownloadError", "ManualDownloadRequired"]
