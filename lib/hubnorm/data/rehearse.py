"""Rehearsal caches: SYNTHETIC embeddings with the exact Karpathy split sizes of a dataset.

``python -m hubnorm.data rehearse --dataset flickr30k`` writes synthetic embeddings (:mod:`hubnorm.synthetic`,
the preset of the same dataset) with the image and caption counts of the real splits into a separate cache root
(default ``<cache root>/rehearsal``), in the format of the real cache, so that a paper-size run can be rehearsed
on it before any download: it measures the time and memory a real run needs on this machine and exercises the
``cache:`` loading path. Everything it writes says synthetic: the model is ``synthetic-rehearsal``, every manifest
key has ``"source": "synthetic-rehearsal"``, and loading it (``cache:<dataset>:synthetic-rehearsal:seed<seed>``)
gives an :class:`~hubnorm.datasets.EmbeddingDataset` with ``source="synthetic"``, name
``synthetic-rehearsal-<dataset>`` and ``meta["label"]`` starting with "synthetic rehearsal".

Caption counts: the generator makes ``captions_per_image`` (5) captions per image; where a real split has more
captions than 5 per image (COCO: 25,010 for 5,000 test images; 566,747 for the 113,287 train+restval images),
the split is generated with 6 captions per image and the 6th caption is kept for an evenly spread subset of the
images, so the counts are exact. Every caption has the same distribution either way. Splits are generated and
written chunk by chunk (:func:`hubnorm.synthetic.iter_split_chunks` + memory-mapped ``.npy``), so the COCO train
split (0.57M captions, 1.4 GB on disk) needs about 0.3 GB of memory to write.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from . import cache as _cache
from .paths import PathLike, cache_root

#: model name and key source of rehearsal caches (``python -m hubnorm.data rehearse``)
REHEARSAL_MODEL = "synthetic-rehearsal"
REHEARSAL_SOURCE = "synthetic-rehearsal"

#: The datasets' Karpathy split sizes (package data, section ``rehearsal``, one entry per dataset): what a rehearsal
#: cache holds.
REHEARSAL_FILE = resources.files("hubnorm.data") / "rehearsal.yaml"


def read_mapping_file(where, what: str) -> dict:
    """The YAML file ``where`` parsed (``yaml.safe_load``), which must be a mapping (``what`` says of what, for the
    error); a ValueError naming the file otherwise. Read by this module (the rehearsal sizes) and by run_all.sh's
    runner (its run profiles)."""
    try:
        import yaml
    except ImportError as exc:   # pragma: no cover - pyyaml is a dependency
        raise ImportError("reading the rehearsal sizes needs PyYAML: pip install pyyaml") from exc
    with (where if hasattr(where, "open") else Path(where)).open("r", encoding="utf-8") as fh:   # a path or package data
        try:
            data = yaml.safe_load(fh)
        except yaml.YAMLError as exc:
            raise ValueError(f"{where}: not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{where}: must be {what}")
    return data


def read_rehearsal_file(path=None) -> dict:
    """The parsed rehearsal-sizes file (``path``, default :data:`REHEARSAL_FILE`), a mapping; a clear error
    otherwise."""
    return read_mapping_file(REHEARSAL_FILE if path is None else path, "a mapping with the section rehearsal")


def _count(v, key: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{key} must be a positive integer; got {v!r}")
    return int(v)


def rehearsal_sizes(data: Optional[dict] = None) -> Dict[str, dict]:
    """The ``rehearsal`` section of the rehearsal-sizes file (or of ``data``), checked: ``{dataset: {"preset",
    "splits": {split: (images, captions)}}}`` with between 5 and 6 captions per image. An error names the key."""
    if data is None:
        return _file_sizes()
    from ..synthetic import PRESETS

    section = data.get("rehearsal")
    if not isinstance(section, dict) or not section:
        raise ValueError("rehearsal sizes: rehearsal must be a non-empty mapping of datasets to split sizes")
    out = {}
    for name, prof in section.items():
        key = f"rehearsal.{name}"
        if not isinstance(name, str) or not name:
            raise ValueError(f"rehearsal sizes: {key} must be keyed by a dataset name; got {name!r}")
        if not isinstance(prof, dict) or set(prof) != {"preset", "splits"}:
            raise ValueError(f"rehearsal sizes: {key} must have exactly the keys preset, splits; got "
                             f"{sorted(prof) if isinstance(prof, dict) else prof!r}")
        if prof["preset"] not in PRESETS:
            raise ValueError(f"rehearsal sizes: {key}.preset must be a preset of hubnorm.synthetic "
                             f"({sorted(PRESETS)}); got {prof['preset']!r}")
        splits = prof["splits"]
        if not isinstance(splits, dict) or not splits:
            raise ValueError(f"rehearsal sizes: {key}.splits must map split names to [images, captions]")
        sizes = {}
        for split, pair in splits.items():
            sk = f"{key}.splits.{split}"
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise ValueError(f"rehearsal sizes: {sk} must be [images, captions]; got {pair!r}")
            n_img, n_cap = _count(pair[0], f"rehearsal sizes: {sk}[0] (images)"), \
                _count(pair[1], f"rehearsal sizes: {sk}[1] (captions)")
            if not 5 * n_img <= n_cap <= 6 * n_img:
                raise ValueError(f"rehearsal sizes: {sk} has {n_cap} captions for {n_img} images; the generator "
                                 "makes between 5 and 6 captions per image")
            sizes[split] = (n_img, n_cap)
        out[name] = {"preset": prof["preset"], "splits": sizes}
    return out


@functools.lru_cache(maxsize=1)
def _file_sizes() -> Dict[str, dict]:
    return rehearsal_sizes(read_rehearsal_file())


def __getattr__(name):   # SIZES: read from the rehearsal-sizes file when first asked for
    if name == "SIZES":
        return rehearsal_sizes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def default_rehearsal_root(cache_dir: Optional[PathLike] = None) -> Path:
    """``cache_dir`` when given, else ``<cache root>/rehearsal`` (``$HUBNORM_CACHE`` or ``<repo>/cache``)."""
    return Path(cache_dir) if cache_dir is not None else cache_root(None) / "rehearsal"


def pretrained_tag(seed: int, scale: float = 1.0) -> str:
    return f"seed{int(seed)}" + ("" if scale == 1.0 else f"-scale{scale:g}")


def cache_spec(dataset: str, seed: int = 0, scale: float = 1.0) -> str:
    """The ``cache:`` source string of a rehearsal cache (pass ``cache_dir`` when it is not the default root)."""
    _sizes(dataset)   # a dataset with rehearsal sizes
    return f"cache:{dataset}:{REHEARSAL_MODEL}:{pretrained_tag(seed, scale)}"


def _sizes(dataset: str) -> dict:
    sizes = rehearsal_sizes()
    if dataset not in sizes:
        raise ValueError(f"unknown rehearsal dataset {dataset!r}; valid: {sorted(sizes)}")
    return sizes[dataset]


def scaled_sizes(dataset: str, scale: float = 1.0) -> Dict[str, Tuple[int, int]]:
    """(images, captions) per split, multiplied by ``scale`` (tests: e.g. 0.001). Each split keeps at least one
    image, between 5 and 6 captions per image, and the exact sizes at ``scale=1``."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale <= 1:
        raise ValueError(f"scale must be a number in (0, 1]; got {scale!r}")
    out = {}
    for split, (n_img, n_cap) in _sizes(dataset)["splits"].items():
        extra = n_cap - 5 * n_img
        if scale != 1:
            n_img = max(1, int(round(n_img * scale)))
            extra = min(n_img, int(round(extra * scale)))
        out[split] = (n_img, 5 * n_img + extra)
    return out


def _six_caption_images(n_img: int, extra: int) -> np.ndarray:
    """Boolean mask of the ``extra`` images (evenly spread) that keep a 6th caption."""
    i = np.arange(n_img, dtype=np.int64)
    return (i + 1) * extra // n_img != i * extra // n_img


def rehearse(dataset: str, *, cache_dir: Optional[PathLike] = None, seed: int = 0, scale: float = 1.0,
             splits: Sequence[str] = ("train", "val", "test"), chunk_size: int = 4096, progress: bool = True,
             force: bool = False) -> dict:
    """Write the rehearsal cache of ``dataset``; returns ``{"spec", "cache_dir", "splits": {split: manifest}}``.

    Entries whose manifest already matches (same dataset, preset, seed, scale, hubnorm version, checksums) are kept
    unless ``force``.
    """
    from .._version import __version__ as hubnorm_version
    from ..synthetic import PRESETS, generator_geometry, iter_split_chunks

    prof = _sizes(dataset)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer; got {seed!r}")
    sizes = scaled_sizes(dataset, scale)
    for s in splits:
        if s not in sizes:
            raise ValueError(f"unknown split {s!r}; valid: {sorted(sizes)}")
    root = default_rehearsal_root(cache_dir)
    tag = pretrained_tag(seed, scale)
    base = PRESETS[prof["preset"]]
    out = {}
    for split in splits:
        n_img, n_cap = sizes[split]
        extra = n_cap - 5 * n_img
        cfg = base.replace(captions_per_image=6 if extra else 5)
        key = _cache.make_key(dataset, split, REHEARSAL_MODEL, tag, encoder_family=REHEARSAL_MODEL,
                              versions={"hubnorm": hubnorm_version})
        key.update({"source": REHEARSAL_SOURCE, "preset": prof["preset"], "seed": int(seed),
                    "scale": float(scale), "generator": cfg.to_dict()})
        folder = _cache.entry_dir(dataset, REHEARSAL_MODEL, tag, split, root)
        if not force:
            try:
                _, _, manifest = _cache.read_entry(folder, key)
                out[split] = manifest
                if progress:
                    print(f"kept     {dataset} {split}: {n_img} images / {n_cap} captions (synthetic) -> {folder}")
                continue
            except _cache.CacheError:
                pass
        six = _six_caption_images(n_img, extra) if extra else np.zeros(n_img, bool)
        per_image = np.where(six, 6, 5)
        c2i = np.repeat(np.arange(n_img, dtype=np.int64), per_image)
        cap_start = np.concatenate([[0], np.cumsum(per_image)])
        geo = generator_geometry(cfg, int(seed))
        c = cfg.captions_per_image

        def chunks():
            for i0, i1, img, cap, *_ in iter_split_chunks(cfg, split, n_img, seed=int(seed), chunk_size=chunk_size,
                                                          _geo=geo):
                if extra:
                    keep = np.ones((i1 - i0, c), bool)
                    keep[:, 5] = six[i0:i1]
                    cap = cap[keep.ravel()]
                yield i0, img, int(cap_start[i0]), cap

        manifest = _cache.write_entry_streaming(
            folder, key, n_img, n_cap, cfg.dim, chunks(), c2i,
            [f"synthetic-rehearsal/{split}/{i:06d}" for i in range(n_img)],
            [f"synthetic caption {j} (image {i})" for j, i in enumerate(c2i.tolist())],
            extra={"description": f"SYNTHETIC rehearsal data (hubnorm.synthetic preset {prof['preset']!r}, seed "
                                  f"{seed}) with the {dataset} Karpathy {split} split sizes"
                                  + ("" if scale == 1 else f" x {scale:g}") + "; not real embeddings"})
        out[split] = manifest
        if progress:
            print(f"wrote    {dataset} {split}: {n_img} images / {n_cap} captions (synthetic) -> {folder}")
    return {"spec": cache_spec(dataset, seed, scale), "cache_dir": str(root), "splits": out}


def rehearsal_meta(manifest: dict) -> dict:
    """``EmbeddingDataset.meta`` entries of a loaded rehearsal cache (from one split's manifest)."""
    key = manifest["key"]
    scale = key.get("scale", 1.0)
    label = (f"synthetic rehearsal ({key.get('dataset')} Karpathy sizes" + ("" if scale == 1 else f" x {scale:g}")
             + f", preset {key.get('preset')}, seed {key.get('seed')})")
    return {"synthetic": True, "rehearsal": True, "label": label, "preset": key.get("preset"), "seed": key.get("seed"), "scale": scale, "config": key.get("generator"),
            "description": manifest.get("description", "SYNTHETIC rehearsal data; not real embeddings")}


__all__ = ["SIZES", "REHEARSAL_FILE", "read_rehearsal_file", "read_mapping_file", "rehearsal_sizes", "rehearse", "cache_spec",
           "scaled_sizes", "default_rehearsal_root", "rehearsal_meta", "pretrained_tag"]
