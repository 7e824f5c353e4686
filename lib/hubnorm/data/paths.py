"""Where downloaded data and cached embeddings live (never inside git: both default folders are gitignored).

- data root (annotations, image zips, extracted images): ``$HUBNORM_DATA`` or ``<repo>/data/raw``
- cache root (encoded embeddings + manifests): ``$HUBNORM_CACHE`` or ``<repo>/cache``

``<repo>`` is the checkout holding ``lib/hubnorm``; for an installed (non-editable) package, where there is no
checkout, both fall back to ``~/.cache/hubnorm/{data,embeddings}``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional, Union

PathLike = Union[str, os.PathLike]


def repo_root() -> Optional[Path]:
    """The checkout that holds this package (``<repo>/lib/hubnorm/data``), or None for an installed package."""
    here = Path(__file__).resolve()
    repo = here.parents[3]
    if here.parents[2].name == "lib" and (repo / "pyproject.toml").exists():
        return repo
    return None


def _env_folder(var: str) -> Path:
    """The folder named by environment variable ``var``, checked where it is read: not blank, not a file."""
    value = os.environ[var]
    if not value.strip():
        raise ValueError(f"{var} is set but blank: unset it or set it to a folder")
    path = Path(value).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"{var}={value!r} is a file, not a folder: point it at a folder (created when missing)")
    return path


def data_root(data_dir: Optional[PathLike] = None) -> Path:
    """Root of downloaded annotations and images (argument > ``$HUBNORM_DATA`` > ``<repo>/data/raw``)."""
    if data_dir is not None:
        return Path(data_dir).expanduser()
    if os.environ.get("HUBNORM_DATA"):
        return _env_folder("HUBNORM_DATA")
    repo = repo_root()
    return repo / "data" / "raw" if repo else Path.home() / ".cache" / "hubnorm" / "data"


def cache_root(cache_dir: Optional[PathLike] = None) -> Path:
    """Root of the embedding cache (argument > ``$HUBNORM_CACHE`` > ``<repo>/cache``)."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    if os.environ.get("HUBNORM_CACHE"):
        return _env_folder("HUBNORM_CACHE")
    repo = repo_root()
    return repo / "cache" if repo else Path.home() / ".cache" / "hubnorm" / "embeddings"


def annotations_dir(data_dir: Optional[PathLike] = None) -> Path:
    """``<data root>/annotations``: Karpathy ``dataset_*.json`` and other caption files."""
    return data_root(data_dir) / "annotations"


def images_dir(dataset: str, data_dir: Optional[PathLike] = None) -> Path:
    """``<data root>/<dataset>/images``: the images root of a dataset (COCO: holds ``val2014/``, ``train2014/``)."""
    return data_root(data_dir) / dataset / "images"


def slug(text: str) -> str:
    """A file-name-safe version of a model or tag name (``hf-hub:org/name`` -> ``hf-hub_org_name``)."""
    out = re.sub(r"[^A-Za-z0-9._@+-]+", "_", str(text)).strip("_")
    return out or "none"
