"""Every notebook on every kind of ``local:`` folder a researcher may bring (issue 23's matrix).

Kinds (tests/local_folders.py, generated, small): per-caption rows with caption texts and a published model;
one caption per image without metadata and an unknown model; a stacked (2, n, d) array; one image row per image
with captions grouped by ``metadata.csv``; shuffled per-caption rows grouped by ``metadata.csv`` with a declared
data set; a tiny 60-image set. Plus the real folders of ../shared/data when present (Flickr8k 100x5 ViT-B/32 with
texts; COCO-500 ViT-B/16, stacked, no texts; Flickr8k with its rows shuffled and the grouping in metadata).

Each notebook runs from its jupytext source in this process (tests/local_folders.py: parameters injected after
the parameters cell, as papermill does, without a kernel start) with the size parameters of ``FAST_PARAMS``.
Every notebook must complete, and a run without published rows must say so in a NOTE. Budget: about 4-5 minutes
on 2 cores (marked slow; the time of each case shows with ``--durations``). Notebooks are found by glob, so a
later notebook joins the matrix automatically.
"""

import contextlib
import csv
import io
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, SHARED_DATA
from local_folders import FAST_PARAMS, KINDS, make_folder, run_notebook_source

NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.py"))
SHARED = {
    "real-flickr8k-100x5": ("embeddings", "flickr8k-100x5-clip-vitb32"),
    "real-coco500-vitb16": ("embeddings", "coco-val2017-500-clip-vitb16"),
    "real-flickr8k-shuffled-meta": None,   # built from the Flickr8k folder below
}
ALL_KINDS = list(KINDS) + list(SHARED)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("own-data")
    out = {k: make_folder(root, k) for k in KINDS}
    f8k = SHARED_DATA.joinpath(*SHARED["real-flickr8k-100x5"])
    if f8k.exists():
        out["real-flickr8k-100x5"] = f8k
        shuffled = root / "real-flickr8k-shuffled-meta"
        shuffled.mkdir()
        perm = np.random.default_rng(0).permutation(500)
        for name in ("image_embeddings.npy", "text_embeddings.npy"):
            np.save(shuffled / name, np.load(f8k / name)[perm])
        with open(f8k / "metadata.csv", newline="", encoding="utf-8") as fh:
            rows = list(csv.reader(fh))
        with open(shuffled / "metadata.csv", "w", newline="", encoding="utf-8") as fh:
            csv.writer(fh).writerows([rows[0]] + [rows[1 + j] for j in perm])
        shutil.copy(f8k / "model_info.json", shuffled / "model_info.json")
        out["real-flickr8k-shuffled-meta"] = shuffled
    coco = SHARED_DATA.joinpath(*SHARED["real-coco500-vitb16"])
    if coco.exists():
        out["real-coco500-vitb16"] = coco
    return out


@pytest.mark.slow
@pytest.mark.parametrize("kind", ALL_KINDS)
@pytest.mark.parametrize("py", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_notebook_completes_on_every_kind_of_own_data(py, kind, folders, tmp_path, monkeypatch):
    if kind not in folders:
        pytest.skip(f"{kind}: the shared real-embedding folder is absent (HUBNORM_SHARED_DATA)")
    monkeypatch.setenv("HUBNORM_RESULTS", str(tmp_path))
    monkeypatch.setenv("HUBNORM_PROGRESS", "0")
    monkeypatch.setenv("HUBNORM_FORBID_SYNTHETIC", "1")   # as run_all.sh --source: no synthetic data mixed in
    params = {"source": f"local:{folders[kind]}", **FAST_PARAMS.get(py.name[:2], {})}
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        run_notebook_source(py, params)
    out = buf.getvalue()
    assert "Traceback" not in out
    for line in out.splitlines():    # nothing claims a comparison that is not there
        assert "published rows shown beside it: NNN paper, None" not in line
    if py.name[:2] in ("01", "02", "04") and KINDS.get(kind, {}).get("dataset") is None:
        assert "NOTE: no published rows are compared with this run" in out, "a run with no data set says so"
