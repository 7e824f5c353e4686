"""Captions + images -> cached embeddings -> :class:`~hubnorm.datasets.EmbeddingDataset`.

:func:`encode_split` returns a verified cache entry or encodes (and caches) the split;
:func:`load_cached_embeddings` only reads the cache and says which command to run when something is missing.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Dict, Iterable, Optional, Sequence


from ..embeddings import EmbeddingDataset, EmbeddingSplit
from . import cache as _cache
from .annotations import CaptionSplit, load_captions
from .paths import PathLike, images_dir
from .registry import check_split, dataset_info

from .rehearse import REHEARSAL_MODEL, REHEARSAL_SOURCE, rehearsal_meta  # noqa: F401 (re-exported)


def rehearse_hint(dataset: str, pretrained: Optional[str] = None, *, force: bool = False) -> str:
    """The command that (re)writes a rehearsal cache: its seed and scale read from the entry's ``pretrained`` tag
    (``seed3-scale0.02``; :func:`hubnorm.data.rehearse.pretrained_tag`), ``--force`` to replace a bad entry."""
    m = re.fullmatch(r"seed(\d+)(?:-scale([0-9.eE+-]+))?", pretrained or "")
    extra = ""
    if m and m[1] != "0":
        extra += f" --seed {m[1]}"
    if m and m[2]:
        extra += f" --scale {m[2]}"
    return f"python -m hubnorm.data rehearse --dataset {dataset}{extra}" + (" --force" if force else "")


def repair_command(dataset: str, model: str, pretrained: Optional[str], split: str,
                   family: Optional[str] = None) -> str:
    """The one command that rewrites a bad cache entry: ``rehearse ... --force`` for a rehearsal entry,
    ``encode ... --force`` for an encoded one."""
    if model == REHEARSAL_MODEL:
        return rehearse_hint(dataset, pretrained, force=True)
    return encode_command(dataset, model, pretrained, split, family) + " --force"


def create_command(dataset: str, model: str, pretrained: Optional[str], split: str,
                   family: Optional[str] = None) -> str:
    """The command that writes a missing cache entry (:func:`repair_command` without ``--force``)."""
    if model == REHEARSAL_MODEL:
        return rehearse_hint(dataset, pretrained)
    return encode_command(dataset, model, pretrained, split, family)


def entry_folder(dataset: str, model: str, pretrained: Optional[str], split: str,
                 cache_dir: Optional[PathLike] = None) -> Path:
    """Where the entry of one split lives (rehearsal entries under ``<cache root>/rehearsal`` by default)."""
    return _cache.entry_dir(dataset, model, pretrained, split, _default_cache_dir(model, cache_dir))


#: key fields compared when reading the cache without the annotations at hand
LOAD_KEY_FIELDS = ("dataset", "split", "model", "pretrained", "encoder_family", "versions")


CacheWarning = _cache.CacheWarning   # a stale or corrupt entry is being re-encoded


def encode_command(dataset: str, model: str, pretrained: Optional[str], split: str,
                   family: Optional[str] = None) -> str:
    from .encoders import infer_family
    fam = "" if family is None or family == infer_family(model) else f" --family {family}"
    return (f"python -m hubnorm.data encode {dataset} --model {model} "
            f"--pretrained {_cache.normalize_pretrained(pretrained)}{fam} --split {split}")


def fetch_commands(dataset: str) -> str:
    info = dataset_info(dataset)
    lines = [f"python -m hubnorm.data fetch {dataset} --what annotations"]
    if info["images"] == "manual":
        lines.append(f"(images: place them by hand; `python -m hubnorm.data fetch {dataset} --what images` "
                     "prints where)")
    else:
        lines.append(f"python -m hubnorm.data fetch {dataset} --what images")
    return "\n    ".join(lines)


def _split_from_entry(arrays, texts) -> EmbeddingSplit:
    files = texts["image_files"]
    return EmbeddingSplit(images=arrays["images"], captions=arrays["captions"],
                          caption_to_image=arrays["caption_to_image"],
                          image_ids=[f.rsplit("/", 1)[-1] for f in files], caption_texts=texts["captions"])


def _check_images(caps: CaptionSplit, root: Path) -> list:
    paths = caps.image_paths(root)
    missing = [p for p in paths if not p.exists()]
    if missing:
        info = dataset_info(caps.dataset) if caps.dataset in ("coco", "flickr30k", "flickr8k") else None
        how = ""
        if info is not None:
            how = (f"\nRun:  python -m hubnorm.data fetch {caps.dataset} --what images --split {caps.split}"
                   if info["images"] != "manual" else "\n" + info["manual"].format(images_dir=root))
        raise FileNotFoundError(f"{len(missing)} of {len(paths)} images of {caps.dataset} {caps.split} are missing "
                                f"under {root} (first: {missing[0]}){how}")
    return paths


def encode_split(dataset: str, split: str, model: str, pretrained: Optional[str], *,
                 annotations: Optional[PathLike] = None, images_root: Optional[PathLike] = None,
                 data_dir: Optional[PathLike] = None, cache_dir: Optional[PathLike] = None,
                 batch_size: int = 64, device: Optional[str] = None, precision: str = "fp32",
                 num_workers: int = 0, force: bool = False, progress: bool = True, encoder=None,
                 captions: Optional[CaptionSplit] = None, family: Optional[str] = None) -> EmbeddingSplit:
    """Embeddings of one split: from the cache when its key and checksums match, else encoded and cached.

    Args:
        dataset, split: e.g. ``"coco"``, ``"test"`` (any name works with ``annotations``/``captions`` given).
        model, pretrained: model name and pretrained tag (None: random init); open_clip names, or BLIP names
            (``blip-itm-base-coco``, pretrained ``hf``), see :func:`hubnorm.data.encoders.get_encoder`.
        family: ``"open_clip"`` or ``"blip"`` (default: the given encoder's, else inferred from ``model``);
            recorded in the cache key.
        annotations: caption file or folder (default: ``<data root>/annotations``); or pass ``captions``.
        images_root: folder the caption file's image paths are relative to (default
            ``<data root>/<dataset>/images``).
        force: re-encode even when a valid cache entry exists.
        encoder: an encoder (:func:`~hubnorm.data.encoders.get_encoder`) to reuse across splits.
    """
    from .encoders import Encoder, FileChangedError, check_family, get_encoder

    if captions is None:
        captions = load_captions(dataset, split, annotations, data_dir=data_dir)
    precision = getattr(encoder, "precision", precision)  # a given encoder decides the precision of the key
    family = check_family(family if family is not None else getattr(encoder, "family", None), model)
    key = _cache.make_key(dataset, split, model, pretrained, precision=precision,
                          annotations_sha256=captions.fingerprint(), encoder_family=family)
    folder = _cache.entry_dir(dataset, model, pretrained, split, cache_dir)
    root = Path(images_root) if images_root is not None else images_dir(dataset, data_dir)
    # Keyed too, when known: the encoder's options that change its numbers (BLIP's caption length, the seed of a
    # random init) and the image files' bytes (sha256 over each file's sha256, when the images are here). Entries
    # written before these fields existed are matched with the family's default options and without the images.
    late = {}
    options = encoder.options() if isinstance(encoder, Encoder) else None
    if encoder is None:
        options = _default_options(family, model, pretrained)
    if options is not None:
        late["encoder_options"] = (options, _default_options(family, model, pretrained))
    image_sha256 = _image_digests(captions, root)
    if image_sha256 is not None:
        late["images_sha256"] = (_cache.texts_sha256(image_sha256), None)
    key.update({k: v for k, (v, _) in late.items()})
    if not force:
        try:
            arrays, texts, manifest = _cache.read_entry(folder, {k: v for k, v in key.items() if k not in late})
            differ = [k for k, (want, legacy) in late.items()
                      if manifest["key"].get(k, legacy) not in (None, want)]
            if not differ:
                return _split_from_entry(arrays, texts)
            what = {"encoder_options": "the encoder's options", "images_sha256": "the image files"}
            warnings.warn(f"re-encoding {dataset} {split}: {' and '.join(what[k] for k in differ)} differ from those "
                          f"cached at {folder}", CacheWarning, stacklevel=2)
        except _cache.CacheError as exc:
            if exc.reason != "missing":
                warnings.warn(f"re-encoding {dataset} {split}: {exc}", CacheWarning, stacklevel=2)
    paths = _check_images(captions, root)
    if encoder is None:
        encoder = get_encoder(model, pretrained, family=family, device=device, precision=precision,
                              batch_size=batch_size, num_workers=num_workers, progress=progress)
    # the files are hashed again as they are read for encoding: one that changed since it was hashed is an error
    if isinstance(encoder, Encoder):
        img = encoder.encode_images(paths, desc=f"{dataset} {split} images", expected_sha256=image_sha256)
    else:   # a duck-typed encoder (e.g. a test's stub): the files are hashed again after encoding
        img = encoder.encode_images(paths, desc=f"{dataset} {split} images")
        changed = [p for p, d in zip(paths, image_sha256) if _cache.sha256_file(p) != d]
        if changed:
            raise FileChangedError(f"{changed[0]} changed while the split was being encoded: rerun once the files "
                                   "are stable")
    txt = encoder.encode_texts(captions.captions, desc=f"{dataset} {split} captions")
    if len(img) != captions.n_images or len(txt) != captions.n_captions:
        raise RuntimeError(f"encoder returned {len(img)} image / {len(txt)} caption rows for "
                           f"{captions.n_images} / {captions.n_captions} inputs")
    _cache.write_entry(folder, key, img, txt, captions.caption_to_image, captions.image_files, captions.captions,
                       extra={"annotations": captions.source, "images_root": str(root),
                              "device": getattr(encoder, "device", None), "batch_size": batch_size})
    return EmbeddingSplit(images=img, captions=txt, caption_to_image=captions.caption_to_image,
                          image_ids=captions.image_names, caption_texts=list(captions.captions))


def _default_options(family: str, model: str, pretrained) -> Optional[dict]:
    """The options an encoder of ``family`` built with its defaults records (None when it cannot be built)."""
    from .encoders import encoder_class
    try:
        return encoder_class(family)(model, pretrained, device="cpu").options()
    except (ValueError, TypeError):
        return None


def _image_digests(captions: CaptionSplit, root: Path) -> Optional[list]:
    """sha256 of each image file of the split, or None when some are missing (then only the cache can serve it)."""
    paths = captions.image_paths(root)
    if not all(p.is_file() for p in paths):
        return None
    return [_cache.sha256_file(p) for p in paths]


def verify_split(dataset: str, split: str, model: str, pretrained: Optional[str], *,
                 cache_dir: Optional[PathLike] = None, strict_versions: bool = True,
                 family: Optional[str] = None) -> dict:
    """Check one cache entry (key + checksums); returns its manifest or raises :class:`CacheError`."""
    key = _load_key(dataset, split, model, pretrained, family)
    cache_dir = _default_cache_dir(model, cache_dir)
    fields = LOAD_KEY_FIELDS if strict_versions else tuple(f for f in LOAD_KEY_FIELDS if f != "versions")
    _, _, manifest = _cache.read_entry(_cache.entry_dir(dataset, model, pretrained, split, cache_dir), key, fields)
    return manifest


def _load_key(dataset, split, model, pretrained, family=None) -> dict:
    """The key a stored entry must match to be loaded. Rehearsal entries (``python -m hubnorm.data rehearse``)
    record their own family ("synthetic-rehearsal") and are matched on it."""
    from .encoders import check_family
    if model == REHEARSAL_MODEL:
        from .._version import __version__
        return _cache.make_key(dataset, split, model, pretrained, encoder_family=REHEARSAL_MODEL,
                               versions={"hubnorm": __version__})
    family = check_family(family, model)
    return _cache.make_key(dataset, split, model, pretrained, encoder_family=family,
                           versions=_cache.library_versions(family))


def _default_cache_dir(model: str, cache_dir):
    """Rehearsal caches live under ``<cache root>/rehearsal`` unless a cache dir is given."""
    if cache_dir is None and model == REHEARSAL_MODEL:
        from .paths import cache_root
        return cache_root(None) / "rehearsal"
    return cache_dir


def parse_cache_spec(spec: str):
    """``"coco:ViT-B-32-quickgelu:openai"`` -> ``("coco", "ViT-B-32-quickgelu", "openai")``.

    The model may itself contain colons (``"coco:hf-hub:timm/ViT-B-16-SigLIP:none"``): the dataset is the first
    field and the pretrained tag the last.
    """
    dataset, sep, rest = str(spec).partition(":")
    model, sep2, pretrained = rest.rpartition(":")
    if not sep or not sep2 or not dataset or not model:
        raise ValueError(f"cache source must look like '<dataset>:<model>:<pretrained>' (e.g. "
                         f"'coco:ViT-B-32-quickgelu:openai'; pretrained 'none' for random init); got {spec!r}")
    return dataset, model, pretrained


def load_cached_embeddings(spec: str, cache_dir: Optional[PathLike] = None,
                           splits: Sequence[str] = ("test", "val", "train"), *, allow_missing: bool = False,
                           strict_versions: bool = True, family: Optional[str] = None) -> EmbeddingDataset:
    """Real embeddings from the cache filled by ``python -m hubnorm.data encode``.

    Args:
        spec: ``"<dataset>:<model>:<pretrained>"``, e.g. ``"coco:ViT-B-32-quickgelu:openai"``.
        cache_dir: cache root (default ``$HUBNORM_CACHE`` or ``<repo>/cache``).
        splits: splits to load.
        allow_missing: skip splits that were never encoded (with a warning) instead of raising.
        strict_versions: entries written under other torch / open_clip / hubnorm (/ transformers) versions are
            errors (True) or are loaded with a warning (False).
        family: encoder family (default: inferred from the model name, see
            :func:`hubnorm.data.encoders.infer_family`). Rehearsal caches (model ``synthetic-rehearsal``) load as
            ``source="synthetic"`` datasets labelled "synthetic rehearsal".
    Raises:
        FileNotFoundError naming the ``fetch`` / ``encode`` commands to run; :class:`CacheError` for stale or
        corrupt entries (rerun ``encode``, which replaces them).
    """
    dataset, model, pretrained = parse_cache_spec(spec)
    cache_dir = _default_cache_dir(model, cache_dir)
    if isinstance(splits, str):
        splits = (splits,)
    for s in splits:
        check_split(s, dataset)
    out: Dict[str, EmbeddingSplit] = {}
    missing = []
    manifests = {}
    for s in splits:
        folder = _cache.entry_dir(dataset, model, pretrained, s, cache_dir)
        key = _load_key(dataset, s, model, pretrained, family)
        try:
            arrays, texts, manifest = _cache.read_entry(folder, key, LOAD_KEY_FIELDS)
        except _cache.CacheError as exc:
            if exc.reason == "missing":
                missing.append(s)
                continue
            only_versions = exc.reason == "stale" and not strict_versions and _only_version_diff(folder, key)
            if not only_versions:
                fix = repair_command(dataset, model, pretrained, s, family)
                raise _cache.CacheError(f"{exc}\nRe-create it with:\n    {fix}", reason=exc.reason) from exc
            warnings.warn(f"{exc} (loaded anyway: strict_versions=False)", CacheWarning, stacklevel=2)
            arrays, texts, manifest = _cache.read_entry(folder, key, ("dataset", "split", "model", "pretrained",
                                                                      "encoder_family"))
        out[s] = _split_from_entry(arrays, texts)
        manifests[s] = manifest
    if missing and (not allow_missing or not out):
        root = _cache.entry_dir(dataset, model, pretrained, missing[0], cache_dir).parent
        if model == REHEARSAL_MODEL:
            raise FileNotFoundError(f"no rehearsal embeddings for {dataset} split(s) {missing} under {root}.\n"
                                    f"To create them run:\n    {rehearse_hint(dataset, pretrained)}")
        cmds = "\n    ".join(encode_command(dataset, model, pretrained, s, family) for s in missing)
        known = dataset in ("coco", "flickr30k", "flickr8k")
        raise FileNotFoundError(
            f"no cached embeddings for {dataset} split(s) {missing} with {model!r} / "
            f"{_cache.normalize_pretrained(pretrained)!r} under {root}.\nTo create them run:\n    "
            + (fetch_commands(dataset) + "\n    " if known else "") + cmds
            + ("\n(or pass allow_missing=True to load only the splits that exist)" if out or len(missing) > 1 else "")
        )
    if missing:
        warnings.warn(f"{dataset}: split(s) {missing} not cached; loaded {sorted(out)}", CacheWarning, stacklevel=2)
    first = next(iter(manifests.values()))
    fam = first["key"].get("encoder_family", _cache.LEGACY_ENCODER_FAMILY)
    meta = {"model": model, "pretrained": _cache.normalize_pretrained(pretrained), "encoder": fam,
            "precision": first["key"].get("precision"), "versions": first["key"].get("versions"),
            "cache_dir": str(_cache.entry_dir(dataset, model, pretrained, "x", cache_dir).parent)}
    if first["key"].get("source") == REHEARSAL_SOURCE:
        meta.update(rehearsal_meta(first))
        return EmbeddingDataset(name=f"synthetic-rehearsal-{dataset}", source="synthetic", splits=out, meta=meta)
    return EmbeddingDataset(name=dataset, source="real", splits=out, meta=meta)


def _only_version_diff(folder, key) -> bool:
    manifest = _cache.read_manifest(folder)
    diffs = _cache.key_differences(manifest["key"], key, LOAD_KEY_FIELDS)
    return bool(diffs) and all(k.startswith("versions.") for k in diffs)


def encode_dataset(dataset: str, model: str, pretrained: Optional[str], splits: Iterable[str] = ("test",),
                   **kwargs) -> EmbeddingDataset:
    """Encode (or load from the cache) several splits with one model instance; returns an EmbeddingDataset.

    ``family`` (keyword): ``"open_clip"`` or ``"blip"``, default inferred from ``model``."""
    from .encoders import check_family, get_encoder

    family = check_family(kwargs.pop("family", None), model)
    enc_kw = {k: kwargs.pop(k) for k in ("device", "precision", "batch_size", "num_workers", "progress")
              if k in kwargs}
    encoder = kwargs.pop("encoder", None) or get_encoder(model, pretrained, family=family, **enc_kw)
    out = {s: encode_split(dataset, s, model, pretrained, encoder=encoder, family=family,
                           **{**{k: v for k, v in enc_kw.items() if k != "device"}, **kwargs})
           for s in splits}
    return EmbeddingDataset(name=dataset, source="real", splits=out,
                            meta={"model": model, "pretrained": _cache.normalize_pretrained(pretrained),
                                  "encoder": family})


__all__ = ["encode_split", "encode_dataset", "verify_split", "load_cached_embeddings", "parse_cache_spec",
           "encode_command", "CacheWarning"]
