"""Where results go, and the published numbers (the companion package).

Every notebook writes its figures to ``results/figures/<name>.png`` and ``.pdf`` and its tables to
``results/tables/<name>.csv`` and ``.md`` (:meth:`hubnorm_companion.notebook.Run.save_figure` and
``Run.save_table``, under :func:`results_dir`). The results root (:func:`results_dir`) follows one rule, the same for a
checkout, an editable and a non-editable install: ``$HUBNORM_RESULTS`` when set; else ``results/`` in the project
folder, the nearest folder at or above the working directory that holds a ``pyproject.toml`` or a ``.git`` (for
a notebook run from ``notebooks/`` of this repository: ``<repository>/results``); else ``./results``.
Published reference numbers are package data, ``hubnorm/published/*.csv`` (one row per number, with paper and
table ids), read with :mod:`importlib.resources` so they load from a wheel, an sdist or an editable install.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from importlib import resources
from pathlib import Path
from typing import Mapping, Optional

import pandas as pd



def _repo_root() -> Optional[Path]:
    """The checkout holding this package as ``companion/hubnorm_companion`` beside ``lib/hubnorm`` (the checkout
    :func:`hubnorm.data.paths.repo_root` finds), or None for an installed, non-editable package."""
    here = Path(__file__).resolve()
    root = here.parents[2]
    beside_lib = (root / "pyproject.toml").exists() and (root / "lib" / "hubnorm").is_dir()
    if here.parents[1].name == "companion" and beside_lib:
        return root
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


def run_folder_name(changed: Mapping[str, object], max_len: int = 64) -> str:
    """The results folder of a run whose parameters differ from its profile's (or notebook's) defaults: the
    changed ``name-value`` pairs, sorted, joined by ``_`` (``{"seed": 1, "alpha": 0.5}`` -> ``alpha-0.5_seed-1``);
    past ``max_len`` characters, cut and ended by 8 hex digits of the full mapping, so two runs never share one."""
    if not isinstance(changed, Mapping) or not changed:
        raise ValueError(f"changed must be a non-empty mapping of parameter names to values; got {changed!r}")

    def slug(v) -> str:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return repr(v)   # its sign kept: flat_tol=-1 and flat_tol=1 are two runs
        text = v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)
        return re.sub(r"[^A-Za-z0-9.+]+", "-", text).strip("-") or "empty"

    name = "_".join(f"{k}-{slug(v)}" for k, v in sorted(changed.items()))
    if len(name) > max_len:
        digest = hashlib.sha256(json.dumps(dict(changed), sort_keys=True, default=str).encode()).hexdigest()[:8]
        name = f"{name[:max_len - 9].rstrip('-_')}-{digest}"
    return name


#: The file of a results folder that records how its run was made (parameters, source, profile, code version).
MANIFEST = "MANIFEST.json"


def write_manifest(folder: Path, **fields) -> Path:
    """Write ``folder/MANIFEST.json`` atomically: ``fields`` (parameters, changed, profile, source, ...) with the
    versions of hubnorm and of this package, the git commit of the project when there is one, and the time (UTC)."""
    import datetime
    import subprocess

    from hubnorm._version import __version__

    commit = None
    root = project_root(folder) or project_root()
    if root is not None and (root / ".git").exists():
        try:
            commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                    timeout=10).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            commit = None
    from . import __version__ as companion_version

    record = {**fields, "hubnorm": __version__, "hubnorm_companion": companion_version, "commit": commit,
              "written": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True, default=str) + "\n")
    os.replace(tmp, folder / MANIFEST)
    return folder / MANIFEST


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


# ---------------------------------------------------------------------------------------------- run summary
#: How a notebook's NOTE about real releases missing from this machine begins
#: (:func:`hubnorm_companion.protocol.load_real_sets`); ``run_all.sh`` says it once for the whole run instead.
REAL_MISSING_NOTE = "NOTE: the real column leaves out"

#: Columns of ``results/claims/<prefix>.csv``: every PASS/DIFFERS line of a notebook's run, with the data it
#: was computed on (written by :func:`hubnorm_companion.notebook.check`, gathered by :func:`write_summary`).
CLAIM_COLUMNS = ["notebook", "claim", "status", "detail", "data"]

#: Columns of :func:`hubnorm_companion.compare.gains` (and of every ``results/tables/<prefix>_gains*.csv`` that
#: :func:`write_summary` gathers into ``results/SUMMARY.md``).
GAIN_COLUMNS = ["data", "direction", "method", "setting", "bank", "metric", "raw scores", "normalized", "gain",
                "published raw", "published", "published gain", "ratio", "published source"]

#: What :func:`write_summary` writes into the results folder of a run.
SUMMARY_FILES = ("SUMMARY.md", "SUMMARY.csv", "SUMMARY_gains.csv")


def read_run_tables(results: Path, prefixes, kind: str) -> pd.DataFrame:
    """What the notebooks ``prefixes`` wrote in this run: ``kind="claims"``, their PASS/DIFFERS lines
    (``results/claims/<prefix>.csv``); ``kind="gains"``, their gain tables (``results/tables/<prefix>_gains*.csv``);
    concatenated with a ``notebook`` column (the notebook's number)."""
    frames = []
    for prefix in prefixes:
        pattern = f"claims/{prefix}.csv" if kind == "claims" else f"tables/{prefix}_{kind}*.csv"
        for f in sorted(Path(results).glob(pattern)):
            df = pd.read_csv(f)
            if len(df):
                frames.append(df.assign(notebook=prefix))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def write_summary(results: Path, notebooks, *, title: str = "run_all.sh") -> Path:
    """``results/SUMMARY.md`` (+ ``SUMMARY.csv``: every PASS/DIFFERS line; ``SUMMARY_gains.csv``: every gain
    beside its published gain) of one run: ``notebooks`` is ``[(name, status), ...]`` in run order, ``status`` "ok",
    "FAILED" or "skipped: <why>". Only the claims and gains of the notebooks that ran are gathered (each notebook
    rewrites its own at its start), each line with the data it was computed on."""
    results = Path(results)
    ran = [(name, status) for name, status in notebooks if not str(status).startswith("skipped")]
    prefixes = [name[:2] for name, _ in ran]
    claims = read_run_tables(results, prefixes, "claims")
    if claims.empty:
        claims = pd.DataFrame(columns=CLAIM_COLUMNS)
    claims = claims[CLAIM_COLUMNS].fillna({"detail": "", "data": ""})
    gains = read_run_tables(results, prefixes, "gains")
    gains = pd.DataFrame(columns=["notebook"] + GAIN_COLUMNS) if gains.empty else gains[["notebook"] + GAIN_COLUMNS]
    gains = gains.fillna({"setting": "", "bank": "", "published source": ""})
    claims.to_csv(results / "SUMMARY.csv", index=False)
    gains.to_csv(results / "SUMMARY_gains.csv", index=False)

    def counts(df):
        return f"{int((df['status'] == 'PASS').sum())} PASS / {int((df['status'] == 'DIFFERS').sum())} DIFFERS"

    lines = ["# Summary of this run", "",
             f"Written by {title} from the notebooks' own outputs (`SUMMARY.csv`: every PASS/DIFFERS line; "
             "`SUMMARY_gains.csv`: every gain over the raw scores beside the paper's). A PASS/DIFFERS line tests a "
             "paper's qualitative claim on the numbers of the data named beside it; 'synthetic analog' data are "
             "not a reproduction.", "", "## Notebooks", "", "| notebook | status | claims |", "|---|---|---|"]
    for name, status in notebooks:
        mine = claims[claims["notebook"].astype(str) == name[:2]]
        lines.append(f"| {name} | {status} | {counts(mine) if len(mine) else '-'} |")
    lines += ["", f"All lines: {counts(claims)}.", ""]
    if len(claims):
        lines += ["By data:", ""] + [f"- {data}: {counts(part)}" for data, part in claims.groupby("data", sort=False)]
        lines += ["", "## Claims", "", "| notebook | status | claim | data | detail |", "|---|---|---|---|---|"]
        for r in claims.itertuples(index=False):
            cells = [str(r.notebook), r.status, str(r.claim), str(r.data), str(r.detail)]
            lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    lines += ["", "## Gains beside the published gains", ""]
    if len(gains):
        lines += ["`ratio` = our gain / the published gain (1: the size the paper reports; a published gain comes "
                  "from the paper's full-size test set, ours from the data named in the row).", "",
                  "| notebook | data | direction | method | setting | bank | metric | raw | normalized | gain "
                  "| published gain | ratio |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for _, r in gains.iterrows():
            cells = [str(r["notebook"]), str(r["data"]), str(r["direction"]), str(r["method"]), str(r["setting"]),
                     str(r["bank"]), str(r["metric"]), *(f"{v:.2f}" if pd.notna(v) else "-" for v in (
                         r["raw scores"], r["normalized"], r["gain"], r["published gain"], r["ratio"]))]
            lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
        lines += ["", "Median ratio per data and metric:", ""]
        for (data, metric), part in gains.groupby(["data", "metric"], sort=False):
            ratio = part["ratio"].dropna()
            lines.append(f"- {data}, {metric}: " + (f"{ratio.median():.2f} over {len(ratio)} gains" if len(ratio)
                                                    else "no published gain to compare"))
    else:
        lines.append("No notebook of this run compared a gain with a paper.")
    out = results / "SUMMARY.md"
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, out)
    return out
