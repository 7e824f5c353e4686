"""Where results go, and the published numbers (experiments layer).

Every notebook writes its figures to ``results/figures/<name>.png`` and ``.pdf`` and its tables to
``results/tables/<name>.csv`` and ``.md`` (:meth:`hubnorm.experiments.notebook.Run.save_figure` and
``Run.save_table``, under :func:`results_dir`). The results root (:func:`results_dir`) follows one rule, the same for a
checkout, an editable and a non-editable install: ``$HUBNORM_RESULTS`` when set; else ``results/`` in the project
folder, the nearest folder at or above the working directory that holds a ``pyproject.toml`` or a ``.git`` (for
a notebook run from ``notebooks/`` of this repository: ``<repository>/results``); else ``./results``.
Published reference numbers are package data, ``hubnorm/published/*.csv`` (one row per number, with paper and
table ids), read with :mod:`importlib.resources` so they load from a wheel, an sdist or an editable install.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Optional

import pandas as pd



def _repo_root() -> Optional[Path]:
    """The checkout holding ``lib/hubnorm`` (as :func:`hubnorm.data.paths.repo_root`, without importing
    hubnorm.data), or None for an installed, non-editable package."""
    here = Path(__file__).resolve()
    if here.parents[2].name == "lib" and (here.parents[3] / "pyproject.toml").exists():
        return here.parents[3]
    return None


#: The checkout holding ``lib/hubnorm`` (None for an installed, non-editable package).
REPO_ROOT = _repo_root()
#: Package-data folder of the published numbers (an ``importlib.resources`` Traversable).
PUBLISHED_DIR = resources.files("hubnorm") / "published"

#: Columns of every file in hubnorm/published/.
PUBLISHED_COLUMNS = ["paper", "table", "model", "dataset", "direction", "setting", "method", "metric", "value", "note"]


#: Files that mark a project folder for :func:`results_dir`.
PROJECT_MARKERS = ("pyproject.toml", ".git")


def project_root(start: Optional[Path] = None) -> Optional[Path]:
    """The nearest folder at or above ``start`` (default: the working directory) holding one of
    :data:`PROJECT_MARKERS`, or None."""
    here = Path.cwd() if start is None else Path(start)
    here = here.resolve()
    for folder in (here, *here.parents):
        if any((folder / marker).exists() for marker in PROJECT_MARKERS):
            return folder
    return None


def results_dir(sub: str = "") -> Path:
    """The folder results go to (created), with ``sub`` appended. One rule for every kind of install:

    1. ``$HUBNORM_RESULTS`` when set (``run_all.sh`` sets it: ``results/`` or ``results/<profile>/``);
    2. else ``results/`` in the project folder: the nearest folder at or above the working directory that holds
       a ``pyproject.toml`` or a ``.git`` (notebooks run from ``notebooks/``, so their results land in
       ``<repository>/results`` whether hubnorm is imported from the checkout or from an installed wheel);
    3. else ``./results``.

    Where hubnorm itself is installed plays no part.
    """
    if os.environ.get("HUBNORM_RESULTS"):
        root = Path(os.environ["HUBNORM_RESULTS"]).expanduser()
    else:
        root = (project_root() or Path.cwd()) / "results"
    path = root / sub if sub else root
    path.mkdir(parents=True, exist_ok=True)
    return path


def load_published(paper: Optional[str] = None, table: Optional[str] = None) -> pd.DataFrame:
    """All published numbers (package data ``hubnorm/published/*.csv``), optionally filtered by paper and table id."""
    files = sorted((f for f in PUBLISHED_DIR.iterdir() if f.name.endswith(".csv")), key=lambda f: f.name)
    if not files:
        raise FileNotFoundError(f"no published-number files in {PUBLISHED_DIR}: the package data is missing "
                                "(reinstall hubnorm; a source checkout has them in lib/hubnorm/published/)")
    frames = []
    for f in files:
        with f.open("r", encoding="utf-8") as fh:
            frames.append(pd.read_csv(fh, dtype={"table": str}))
    df = pd.concat(frames, ignore_index=True)
    missing = set(PUBLISHED_COLUMNS) - set(df.columns)
    if missing:
        raise ValueError(f"published-number files lack columns {sorted(missing)}")
    if paper is not None:
        df = df[df["paper"] == paper]
    if table is not None:
        df = df[df["table"] == table]
    return df.reset_index(drop=True)


def beside_published(ours: pd.DataFrame, published: pd.DataFrame, on, *, value: str = "value",
                     run_label: str = "this run") -> pd.DataFrame:
    """Join our numbers (column ``value``) with the published ones on the key columns ``on``.

    The result has the key columns, ``published`` and ``this run`` side by side (NaN where one side is absent).
    """
    pub = published[list(on) + ["value"]].rename(columns={"value": "published"})
    mine = ours[list(on) + [value]].rename(columns={value: run_label})
    return pub.merge(mine, on=list(on), how="outer")
