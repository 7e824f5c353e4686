"""Every notebook on every kind of ``local:`` folder a researcher may bring (issue 23's matrix).

Kinds (tests/local_folders.py, generated, small): per-caption rows with caption texts and a published model;
one caption per image without metadata and an unknown model; a stacked (2, n, d) array; one image row per image
with captions grouped by ``metadata.csv``; shuffled per-caption rows grouped by ``metadata.csv`` with a declared
data set; a tiny 60-image set. Plus the real folders of ../shared/data when present (COCO-500 ViT-B/16, stacked,
no texts; Flickr8k 100x5 ViT-B/32 with its rows shuffled and the grouping in metadata; Flickr8k as it is runs in
tests/test_notebooks.py, through papermill with the notebooks' defaults).

Each notebook runs from its jupytext source in this process (tests/local_folders.py: parameters injected after
the parameters cell, as papermill does, without a kernel start) with the size parameters of ``FAST_PARAMS``.
Every notebook must complete, and a run without published rows must say so in a NOTE. Budget: about 4-5 minutes
on 2 cores (marked slow; the time of each case shows with ``--durations``). Notebooks are found by glob, so a
later notebook joins the matrix automatically.
"""

import contextlib
import csv
import io
import json
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
#: The Flickr8k folder as it is is not a case here: tests/test_notebooks.py runs every notebook on exactly that folder
#: through papermill with the notebook's own (larger) defaults and makes this test's checks on its outputs (no
#: traceback, no comparison with a missing model, the no-data-set NOTE), so a second run of each notebook on the same
#: input added time and no coverage. Its shuffled copy (grouping from metadata.csv) stays.
ALL_KINDS = list(KINDS) + [k for k in SHARED if k != "real-flickr8k-100x5"]


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
    # a figure's remaining layout problem is a NOTE here, as in a user's run on odd data (a 60-image folder); the
    # default and real-data runs check them as errors (nbval, tests/test_notebooks.py)
    monkeypatch.setenv("HUBNORM_FIGURE_CHECK", "note")
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


# ---------------------------------------------------------------------------------------------- sims: folders
#: a sims folder whose manifest says synthetic, and one that says real (its rows are videos: t2i names the
#: text-query direction, here the folder's second one)
SIMS_LABELS = {"synthetic": "synthetic analog (sims folder example)",
               "real": "real data (my-videos, released score matrices)"}


@pytest.fixture(scope="module")
def sims_folders(tmp_path_factory):
    import json

    from test_sims import write_example

    root = tmp_path_factory.mktemp("sims")
    write_example(root / "synthetic")
    write_example(root / "real", seed=1, modalities=("video", "text"))
    man = json.loads((root / "real" / "manifest.json").read_text())
    man.update(synthetic=False, dataset="my-videos", model="my-model")
    (root / "real" / "manifest.json").write_text(json.dumps(man))
    return {k: root / k for k in SIMS_LABELS}


@pytest.mark.slow
@pytest.mark.parametrize("manifest", list(SIMS_LABELS))
@pytest.mark.parametrize("py", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_notebook_completes_on_a_sims_folder(py, manifest, sims_folders, tmp_path, monkeypatch):
    """Every notebook runs on released score matrices (issue 22): it shows what the scores give, each number under
    the folder's label (synthetic only when the manifest says so), and NOTEs what needs embeddings. 1-8 s each.
    These are the runs of every notebook on a sims folder (tests/test_own_data.py runs one of them through run_all.sh
    and papermill)."""
    monkeypatch.setenv("HUBNORM_RESULTS", str(tmp_path))
    monkeypatch.setenv("HUBNORM_PROGRESS", "0")
    monkeypatch.setenv("HUBNORM_FIGURE_CHECK", "note")   # as above
    monkeypatch.setenv("HUBNORM_FORBID_SYNTHETIC", "1")   # as run_all.sh --source
    nn = py.name[:2]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        run_notebook_source(py, {"source": f"sims:{sims_folders[manifest]}", **FAST_PARAMS.get(nn, {})})
    out = buf.getvalue()
    label = SIMS_LABELS[manifest]
    assert "Traceback" not in out and f"this run: {label}" in out
    other = SIMS_LABELS["real" if manifest == "synthetic" else "synthetic"].split(" (")[0]
    assert other not in out, f"a {manifest} folder's run says {other!r}"
    if manifest == "real":   # no line calls anything synthetic (advice naming a synthetic: source string aside)
        claims = [ln for ln in out.splitlines() if "synthetic" in ln.lower() and "synthetic:" not in ln]
        assert not claims, f"a synthetic claim on real data: {claims[:3]}"
    tables = sorted((tmp_path / "tables").glob(f"{nn}_*.csv"))
    assert tables, "no table saved"
    for t in tables:   # a table that names its data names this run's, never the other kind's
        assert other not in t.read_text(), t.name


@pytest.fixture(scope="module")
def embedded_sims(tmp_path_factory):
    """The synthetic sims folder with (``both``) and without (``scores``) the embeddings of its four item sets."""
    from hubnorm.data.sims import EMBEDDINGS
    from test_sims import write_example

    root = tmp_path_factory.mktemp("embedded-sims")
    for name, embedded in (("both", tuple(EMBEDDINGS)), ("scores", ())):
        write_example(root / name, embeddings=embedded)
    return root


def _run_on(folder, nn, results, monkeypatch) -> str:
    monkeypatch.setenv("HUBNORM_PROGRESS", "0")
    monkeypatch.setenv("HUBNORM_FIGURE_CHECK", "note")
    monkeypatch.setenv("HUBNORM_RESULTS", str(results))
    py = next(p for p in NOTEBOOKS if p.name.startswith(nn))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        run_notebook_source(py, {"source": f"sims:{folder}", **FAST_PARAMS.get(nn, {})})
    out = buf.getvalue()
    assert "Traceback" not in out
    return out


@pytest.mark.slow
def test_notebook_01_runs_dn_and_dsl_on_a_sims_folder_that_lists_its_embeddings(embedded_sims, tmp_path, monkeypatch):
    """A sims folder whose manifest lists the embeddings beside the matrices (issue 43: tasks holding both) runs the
    methods that read embeddings; the same folder without them leaves them out with a NOTE. (Every notebook runs on
    it: tests/test_notebook_matrix.py's sims cases hold no embeddings, the two tests below run 00 and 09 on it.)"""
    for name in ("both", "scores"):
        out = _run_on(embedded_sims / name, "01", tmp_path / name, monkeypatch)
        main = (tmp_path / name / "tables" / "01_main_r1_vs_published.csv").read_text()
        classic = (tmp_path / name / "tables" / "01_classic_methods.csv").read_text()
        if name == "both":
            assert "DN (it subtracts" not in out and "DSL (the centroids" not in out
            assert ",DN," in main and ",DSL," in classic, (main, classic)
            assert "holds a folder's score matrices and some embeddings, not a data set of them" in out  # cross bank
        else:
            assert "NOTE: DN (it subtracts the bank means of the embeddings) needs embeddings" in out
            assert "NOTE: DSL (the centroids" in out and ",DN," not in main and ",DSL," not in classic


@pytest.mark.slow
def test_notebooks_00_and_09_on_a_sims_folder_that_lists_its_embeddings(embedded_sims, tmp_path, monkeypatch):
    """00 checks its numpy equations against the library on the mixed tasks (a product matrix has no stored dtype:
    it failed there); 09 explains the largest hub from the bank's and the gallery's embeddings the folder lists."""
    out = _run_on(embedded_sims / "both", "00", tmp_path / "00", monkeypatch)
    for name in ("NNN", "IS", "SN"):
        assert f"{name}: numpy offsets match hubnorm (max |difference|" in out and "<= 1e-09)" in out
    out = _run_on(embedded_sims / "both", "09", tmp_path / "09", monkeypatch)
    assert "largest identity error |sum w v + r - h|: below 1e-12" in out and "section 1, the offset" not in out
    assert "item" in (tmp_path / "09" / "tables" / "09_explain_hub.md").read_text()   # a video folder: no "image"
    out = _run_on(embedded_sims / "scores", "09", tmp_path / "09s", monkeypatch)
    assert "NOTE: section 1, the offset decomposition" in out and "identity error" not in out


@pytest.mark.slow
def test_notebook_00_on_a_float32_sims_folder_checks_its_equations_to_float32_rounding(tmp_path, monkeypatch):
    """Released matrices are often float32, which hubnorm reads in float32 (its fast path): notebook 00's check of
    its numpy equations against the library holds to float32 rounding there (found by review: it asserted 1e-9)."""
    from test_sims import write_example

    write_example(tmp_path / "f32", dtype=np.float32)
    monkeypatch.setenv("HUBNORM_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("HUBNORM_PROGRESS", "0")
    monkeypatch.setenv("HUBNORM_FIGURE_CHECK", "error")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        run_notebook_source(REPO / "notebooks" / "00_hubness_from_scratch.py",
                            {"source": f"sims:{tmp_path / 'f32'}", **FAST_PARAMS["00"]})
    out = buf.getvalue()
    for name in ("NNN", "IS", "SN"):
        assert f"{name}: numpy offsets match hubnorm (max |difference|" in out and "<= 1e-05)" in out


@pytest.mark.slow
def test_notebook_09_plants_what_the_gallery_holds_and_says_so(folders, tmp_path, monkeypatch):
    """Issue 44: n_planted larger than the gallery planted the whole gallery and captioned the asked number."""
    kind = next(k for k in ALL_KINDS if k in folders)
    monkeypatch.setenv("HUBNORM_RESULTS", str(tmp_path))
    monkeypatch.setenv("HUBNORM_PROGRESS", "0")
    monkeypatch.setenv("HUBNORM_FIGURE_CHECK", "note")   # as above
    monkeypatch.setenv("HUBNORM_FORBID_SYNTHETIC", "1")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        run_notebook_source(REPO / "notebooks" / "09_hub_forensics.py",
                            {"source": f"local:{folders[kind]}", "n_planted": 100000})
    out = buf.getvalue()
    assert "NOTE: n_planted = 100000 is more than the" in out
    captions = " ".join(p.read_text() for p in (tmp_path / "tables").glob("09_planted_hubs*"))
    assert captions and "100000" not in captions


@pytest.mark.slow
@pytest.mark.parametrize("py", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_notebook_on_a_folder_without_bank_rows_marks_every_figure_query_aware(py, tmp_path, monkeypatch):
    """Every notebook runs its own cells on score matrices (protocol.open_data); a folder with the test matrix only
    gives no bank, so the test queries serve as the bank: every fit is query-aware and every figure and table must say
    so (HUBNORM_FIGURE_CHECK=error and the ledger of query-aware R@K refuse one that does not); what needs embeddings
    is left out with a NOTE in place."""
    from hubnorm.data.sims import write_sims
    from test_sims import _embeddings

    caps, items, c2i, _, _ = _embeddings(0)
    write_sims(tmp_path / "f", {"test": caps @ items.T}, modalities=("text", "video"), dataset="example",
               synthetic=True, labels=c2i)
    monkeypatch.setenv("HUBNORM_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("HUBNORM_PROGRESS", "0")
    monkeypatch.setenv("HUBNORM_FIGURE_CHECK", "error")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        run_notebook_source(py, {"source": f"sims:{tmp_path / 'f'}", **FAST_PARAMS.get(py.name[:2], {})})
    out = buf.getvalue()
    assert "Traceback" not in out and "this run: synthetic analog (sims folder example)" in out
    records = [json.loads(p.read_text()) for p in (tmp_path / "results" / "figures").glob(f"{py.name[:2]}_*.json")]
    if py.name[:2] == "04":   # a study of bank sizes needs a bank: nothing to show, one NOTE
        assert not records and ("NOTE: t2i and i2t: the folder has no bank rows, so no query-bank size can be studied "
                                "there; Parts A and B leave them out") in out
    else:
        assert records, "no figure saved"
    for r in records:   # a figure of fitted methods names the query-aware bank (one of raw scores only: none)
        banks = [b for b in r["bank"] if str(b).lower() not in ("none", "-")]
        assert not banks or any("query-aware" in str(b).lower() for b in banks), (r["figure"], r["bank"])
    if py.name[:2] == "08":
        return
    for d, role in (("t2i", "bank_rows"), ("i2t", "bank_cols"))[:1 if py.name[:2] in ("00", "09") else 2]:   # t2i only
        assert (f"NOTE: {d}: the folder has no bank x gallery scores for this direction, so the test queries serve "
                f"as the bank (query-aware, labelled so); for a query bank, add the role '{role}'") in out
    if py.name[:2] == "02":
        assert "NOTE: the t-SNE map of the test embeddings (DBSN Fig. A9) needs embeddings" in out
        assert len(records) == 3 and all(any("query-aware" in b.lower() for b in r["bank"]) for r in records)


@pytest.mark.slow
def test_notebook_01_names_each_directions_bank_on_a_folder_with_bank_rows_on_one_side(tmp_path, monkeypatch):
    """A folder with bank rows for its text queries only: t2i fits on the folder's bank rows, i2t on its test queries
    (query-aware). Each direction's rows name their own bank, never the two joined."""
    import pandas as pd

    from hubnorm.data.sims import write_sims
    from test_sims import _embeddings

    caps, items, c2i, bank_caps, _ = _embeddings(0)
    write_sims(tmp_path / "f", {"test": caps @ items.T, "bank_rows": bank_caps @ items.T},
               modalities=("text", "image"), dataset="example", synthetic=True, labels=c2i)
    monkeypatch.setenv("HUBNORM_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("HUBNORM_PROGRESS", "0")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        run_notebook_source(REPO / "notebooks" / "01_main_results.py",
                            {"source": f"sims:{tmp_path / 'f'}", **FAST_PARAMS.get("01", {})})
    assert "Traceback" not in buf.getvalue()
    rows = pd.read_csv(tmp_path / "results" / "tables" / "01_main_r1_vs_published.csv")
    fitted = rows[rows["setting"] != "none"]
    assert set(fitted["direction"]) == {"t2i", "i2t"}
    # the notebook's bank_fraction (0.2) of the folder's bank rows, as of a training split's
    assert (fitted.loc[fitted["direction"] == "t2i", "setting"] == "bank=20% of the folder's bank rows").all()
    assert (fitted.loc[fitted["direction"] == "i2t", "setting"]
            == "bank=test queries (query-aware: the folder has no bank rows)").all()
