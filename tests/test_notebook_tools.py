"""The tools around the notebooks: generated "In this run" sentences, the record of PASS/DIFFERS lines, where
results go, where progress bars go, and the refresh script's guard against wiping an edit made in an .ipynb."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest

from hubnorm_companion import notebook as nb
from hubnorm import progress as progress_module
from hubnorm_companion import reporting

REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------- generated text
def test_generated_wording_flips_when_the_numbers_flip():
    assert nb.change(60.04, 66.42, "R@1") == "raises R@1 from 60.04 to 66.42"
    assert nb.change(66.42, 60.04, "R@1") == "lowers R@1 from 66.42 to 60.04"
    assert nb.change(60.04, 60.04, "R@1") == "leaves R@1 at 60.04"
    # compared as printed: a difference below the printed precision is no change
    assert nb.change(60.041, 60.044, "R@1") == "leaves R@1 at 60.04"
    assert nb.change(1.0, 2.0, up="grows", down="shrinks") == "grows from 1.00 to 2.00"
    assert nb.change(2.0, 1.0, up="grows", down="shrinks") == "shrinks from 2.00 to 1.00"
    words = ("beats", "trails", "ties with")
    assert nb.order_word(67.3, 66.4, words) == "beats"
    assert nb.order_word(66.4, 67.3, words) == "trails"
    assert nb.order_word(66.4, 66.4, words) == "ties with"
    assert nb.order_word(66.4, 66.9, words, tol=1.0) == "ties with"
    assert nb.order_word(0.091, 0.089, ("longer", "shorter", "as long as"), digits=3) == "longer"
    with pytest.raises(ValueError, match="three words"):
        nb.order_word(1, 2, ("more", "less"))
    with pytest.raises(ValueError, match="non-finite"):
        nb.order_word(np.nan, 1.0)


def test_grouped_changes_pick_verb_and_number_from_the_values():
    up = nb.changes({"NNN": (60.0, 66.0), "IS": (60.0, 67.0)}, "R@1")
    assert up == "NNN (60.00 to 66.00) and IS (60.00 to 67.00) raise R@1"
    mixed = nb.changes({"NNN": (79.7, 82.1), "DN": (79.7, 79.5)}, "R@1")
    assert mixed == "NNN (79.70 to 82.10) raises R@1; DN (79.70 to 79.50) lowers it"
    flipped = nb.changes({"NNN": (82.1, 79.7), "DN": (79.5, 79.7)}, "R@1")
    assert flipped == "DN (79.50 to 79.70) raises R@1; NNN (82.10 to 79.70) lowers it"
    assert nb.changes({"A": (1, 1)}, "x") == "A (1.00 to 1.00) leaves x unchanged"
    assert nb.trends({"IS": (1.6, 0.4), "DBSN": (0.1, 0.2)}, "the skewness") == \
        "the skewness rises for DBSN (0.10 to 0.20); falls for IS (1.60 to 0.40)"
    assert nb.trends({"IS": (0.4, 1.6)}, "the skewness") == "the skewness rises for IS (0.40 to 1.60)"
    assert nb.ranking({"DN": 67.26, "NNN": 66.42, "IS": 66.42}) == "DN (67.26) > NNN (66.42) = IS (66.42)"
    assert nb.ranking({"DN": 66.42, "NNN": 67.26}) == "NNN (67.26) > DN (66.42)"
    assert nb.names([]) == "none" and nb.names(["a", "b", "c"]) == "a, b and c"
    assert "50 of 5000 queries" in nb.recall_noise(5000, 60.0) and "±1.36" in nb.recall_noise(5000, 60.0)


def test_notice_renders_markdown_and_checks_are_recorded(capsys):
    md = nb._Markdown("**In this run:** NNN raises R@1.")
    assert md._repr_markdown_() == "**In this run:** NNN raises R@1." and repr(md) == "In this run: NNN raises R@1."
    nb.setup("99", seed=0, threads=1)
    nb.check("a claim that holds", True, "1 -> 2")
    nb.check("a claim that does not", False)
    assert nb.checks() == [("a claim that holds", True), ("a claim that does not", False)]
    capsys.readouterr()
    nb.check_summary()
    out = capsys.readouterr().out
    assert "1 of 2 PASS/DIFFERS lines of this run say PASS" in out and "  - a claim that does not" in out
    nb.setup("99", seed=0, threads=1)
    assert nb.checks() == []


def test_every_check_is_recorded_with_its_data_and_a_new_run_starts_afresh(tmp_path, monkeypatch, capsys):
    import pandas as pd

    monkeypatch.setenv("HUBNORM_RESULTS", str(tmp_path))
    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / "98_gains.csv").write_text("stale\n")      # an earlier run's gains of this notebook
    (tables / "97_gains.csv").write_text("other\n")      # another notebook's: untouched
    nb.setup("98", seed=0, threads=1)
    assert not (tables / "98_gains.csv").exists() and (tables / "97_gains.csv").exists()
    nb.check("before any label", True)
    assert nb.data_label("synthetic analog (x, seed 0)") == "synthetic analog (x, seed 0)"
    nb.check("holds on the main data", True, "1 -> 2")
    nb.check("differs on a real set", False, "3 -> 3", data="real: Y")
    rows = pd.read_csv(tmp_path / "claims" / "98.csv")
    assert list(rows.columns) == reporting.CLAIM_COLUMNS
    assert rows["claim"].tolist() == ["before any label", "holds on the main data", "differs on a real set"]
    assert rows["detail"].fillna("").tolist() == ["", "1 -> 2", "3 -> 3"]
    assert rows["status"].tolist() == ["PASS", "PASS", "DIFFERS"]
    assert rows["data"].tolist() == ["unnamed data", "synthetic analog (x, seed 0)", "real: Y"]
    nb.setup("98", seed=0, threads=1)   # a rerun: its lines only
    assert len(pd.read_csv(tmp_path / "claims" / "98.csv")) == 0
    with pytest.raises(ValueError, match="label must be a non-empty string"):
        nb.data_label("  ")
    run = nb.Run("98")
    with pytest.raises(ValueError, match="start with 'gains'"):
        run.save_gains(pd.DataFrame({"a": [1]}), "main")


def test_the_run_summary_gathers_the_claims_and_gains_of_the_notebooks_that_ran(tmp_path):
    import pandas as pd

    from hubnorm_companion import compare

    tables, claims_dir = tmp_path / "tables", tmp_path / "claims"
    tables.mkdir()
    claims_dir.mkdir()
    pd.DataFrame([["01", "NNN raises R@1", "PASS", "1 -> 2", "synthetic analog (a)"],
                  ["01", "NNN raises R@1", "DIFFERS", "3 -> 3", "real: B"]],
                 columns=reporting.CLAIM_COLUMNS).to_csv(claims_dir / "01.csv", index=False)
    pd.DataFrame([["03", "a | claim", "PASS", "", "synthetic analog (a)"]],
                 columns=reporting.CLAIM_COLUMNS).to_csv(claims_dir / "03.csv", index=False)
    pd.DataFrame([["04", "left over", "PASS", "", "x"]],   # a notebook this run did not run: not gathered
                 columns=reporting.CLAIM_COLUMNS).to_csv(claims_dir / "04.csv", index=False)
    g = pd.DataFrame([["synthetic analog (a)", "t2i", "NNN", "bank", "query-agnostic", "R@1", 60.0, 66.0, 6.0, 58.8,
                       64.6, 5.8, 6.0 / 5.8, "NNN Table 1"],
                      ["real: B", "t2i", "NNN", "bank", "QUERY-AWARE", "R@1", 57.0, 60.0, 3.0, 58.8, 64.6, 5.8, 3.0 / 5.8,
                       "NNN Table 1"]], columns=compare.GAIN_COLUMNS)
    g.to_csv(tables / "01_gains.csv", index=False)
    out = reporting.write_summary(tmp_path, [("01_main", "ok"), ("02_hist", "skipped: needs images"),
                                             ("03_k", "FAILED")], title="a test")
    text = out.read_text()
    assert out == tmp_path / "SUMMARY.md"
    assert "| 01_main | ok | 1 PASS / 1 DIFFERS |" in text and "| 02_hist | skipped: needs images | - |" in text
    assert "| 03_k | FAILED | 1 PASS / 0 DIFFERS |" in text
    assert "All lines: 2 PASS / 1 DIFFERS." in text
    assert "- synthetic analog (a): 2 PASS / 0 DIFFERS" in text and "- real: B: 0 PASS / 1 DIFFERS" in text
    assert "a / claim" in text and "left over" not in text   # table cells escaped; 04 did not run
    assert ("| 01 | synthetic analog (a) | t2i | NNN | bank | query-agnostic | R@1 | 60.00 | 66.00 | 6.00 | 5.80 | 1.03 |"
            in text) and "| NNN | bank | QUERY-AWARE | R@1 | 57.00 |" in text
    assert "- real: B, R@1: 0.52 over 1 gains" in text
    claims = pd.read_csv(tmp_path / "SUMMARY.csv")
    assert len(claims) == 3 and set(claims["notebook"].astype(str).str.zfill(2)) == {"01", "03"}
    gains = pd.read_csv(tmp_path / "SUMMARY_gains.csv")
    assert list(gains.columns) == ["notebook"] + compare.GAIN_COLUMNS and len(gains) == 2


# ---------------------------------------------------------------------------------------------- results folder
@pytest.mark.parametrize("repo_root", ["checkout", None], ids=["editable", "non-editable"])
def test_results_go_to_one_documented_folder_for_every_install(tmp_path, monkeypatch, repo_root):
    """$HUBNORM_RESULTS, else <project>/results (the nearest folder with pyproject.toml or .git at or above the
    working directory: notebooks run from notebooks/), else ./results; where hubnorm is installed plays no part."""
    monkeypatch.setattr(reporting, "REPO_ROOT", REPO if repo_root else None)
    monkeypatch.delenv("HUBNORM_RESULTS", raising=False)
    project = tmp_path / "project"
    (project / "notebooks").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    monkeypatch.chdir(project / "notebooks")
    assert reporting.results_dir("figures") == project / "results" / "figures"
    assert (project / "results" / "figures").is_dir()
    loose = tmp_path / "loose"
    loose.mkdir()
    monkeypatch.chdir(loose)
    if reporting.project_root() is None:   # no marker above tmp_path on this machine
        assert reporting.results_dir() == loose / "results"
    monkeypatch.setenv("HUBNORM_RESULTS", str(tmp_path / "elsewhere"))
    assert reporting.results_dir("tables") == tmp_path / "elsewhere" / "tables"


# ---------------------------------------------------------------------------------------------- progress bars
def test_progress_bars_go_to_the_side_file_not_the_cell(tmp_path, monkeypatch, capsys):
    side = tmp_path / "progress.log"
    monkeypatch.setenv("HUBNORM_PROGRESS", "1")
    monkeypatch.setenv("HUBNORM_PROGRESS_FILE", str(side))
    for _ in progress_module.progress(range(5), desc="demo loop", mininterval=0):
        pass
    assert capsys.readouterr().err == ""
    text = side.read_text()
    assert "demo loop" in text and "100%" in text and "5/5" in text
    monkeypatch.delenv("HUBNORM_PROGRESS_FILE")
    for _ in progress_module.progress(range(3), desc="on stderr", mininterval=0):
        pass
    assert "on stderr" in capsys.readouterr().err
    monkeypatch.setenv("HUBNORM_PROGRESS_FILE", str(tmp_path / "missing-folder" / "p.log"))
    with pytest.raises(ValueError, match="HUBNORM_PROGRESS_FILE"):
        progress_module.progress(range(2))


def test_strip_progress_only_removes_progress_lines():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import strip_notebook_metadata as strip
    finally:
        sys.path.pop(0)
    cell = nbformat.v4.new_code_cell("x = 1")
    cell.outputs = [
        nbformat.v4.new_output("stream", name="stderr", text="fit:  40%|####      | 4/10 [00:02<00:03,  1.9it/s]\r"
                                                             "fit: 100%|##########| 10/10 [00:05<00:00,  2.0it/s]\n"),
        nbformat.v4.new_output("stream", name="stderr", text="UserWarning: something worth seeing\n"),
        nbformat.v4.new_output("stream", name="stdout", text="PASS: a claim\n"),
    ]
    out = strip.drop_progress(nbformat.v4.new_notebook(cells=[cell])).cells[0].outputs
    assert [o["text"] for o in out] == ["UserWarning: something worth seeing\n", "PASS: a claim\n"]


@pytest.mark.slow
def test_progress_stays_out_of_an_executed_notebook(tmp_path):
    """End to end in a Jupyter kernel (what run_all.sh does): a hubnorm bar writes to HUBNORM_PROGRESS_FILE, and the
    executed notebook carries no progress line in its outputs."""
    papermill = pytest.importorskip("papermill")
    src = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "from hubnorm.progress import progress\n"
        "for _ in progress(range(4), desc='side-file bar', mininterval=0):\n    pass\nprint('done')")])
    src.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(src, tmp_path / "in.ipynb")
    side = tmp_path / "bars.log"
    env_before = dict(os.environ)
    os.environ.update({"HUBNORM_PROGRESS": "1", "HUBNORM_PROGRESS_FILE": str(side)})
    try:
        papermill.execute_notebook(str(tmp_path / "in.ipynb"), str(tmp_path / "out.ipynb"), kernel_name="python3",
                                   progress_bar=False, cwd=str(tmp_path))
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    outputs = nbformat.read(tmp_path / "out.ipynb", as_version=4).cells[0].outputs
    assert [o.get("text") for o in outputs] == ["done\n"]
    assert "side-file bar" in side.read_text() and "4/4" in side.read_text()


# ---------------------------------------------------------------------------------------------- refresh guard
def _pair_repo(tmp_path: Path) -> Path:
    """A copy of what refresh_notebooks.sh needs, with one tiny notebook pair refreshed and stamped."""
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    (root / "notebooks").mkdir()
    for name in ("refresh_notebooks.sh", "bootstrap.sh", "notebook_pair.py", "strip_notebook_metadata.py"):
        shutil.copy2(REPO / "scripts" / name, root / "scripts" / name)
    (root / "tools").mkdir()
    (root / "companion").mkdir()
    for name in ("requirements.txt", "pyproject.toml", "companion/pyproject.toml", "tools/pyproject.toml"):
        shutil.copy2(REPO / name, root / name)
    os.symlink(REPO / ".venv", root / ".venv")   # bootstrap.sh finds its stamp and returns at once
    py = root / "notebooks" / "99_demo.py"
    py.write_text("# %% [markdown]\n# # 99 · Demo\n\n# %%\nx = 1\nprint(x)\n")
    jupytext = REPO / ".venv" / "bin" / "jupytext"
    subprocess.run([str(jupytext), "--quiet", "--set-formats", "ipynb,py:percent", str(py)], check=True)
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import notebook_pair
    finally:
        sys.path.pop(0)
    notebook_pair.stamp(py.with_suffix(".ipynb"))
    return root


def _guard(root: Path) -> int:
    """scripts/notebook_pair.py check, in this process (the refresh script runs it as a command)."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import notebook_pair
    finally:
        sys.path.pop(0)
    nbdir = root / "notebooks"
    return notebook_pair.check(nbdir / "99_demo.py", nbdir / "99_demo.ipynb")


@pytest.mark.skipif(not (REPO / ".venv" / "bin" / "jupytext").exists(), reason="needs the project's .venv")
def test_refresh_refuses_to_wipe_an_edit_made_only_in_the_ipynb(tmp_path):
    root = _pair_repo(tmp_path)
    ipynb = root / "notebooks" / "99_demo.ipynb"
    assert _guard(root) == 0                      # in sync
    py = root / "notebooks" / "99_demo.py"
    py.write_text(py.read_text().replace("x = 1", "x = 2"))  # an edit in the .py only: the refresh takes it
    assert _guard(root) == 0
    nb_ = nbformat.read(ipynb, as_version=4)                 # an edit in the .ipynb only, e.g. in Jupyter
    nb_.cells[1].source = "x = 3\nprint(x)"
    nbformat.write(nb_, ipynb)
    before = ipynb.read_bytes()
    res = subprocess.run(["bash", str(root / "scripts" / "refresh_notebooks.sh"), "99"], cwd=root,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "notebooks/99_demo.ipynb holds cell changes that notebooks/99_demo.py does not" in res.stderr
    assert "cell 1" in res.stderr and "nothing was executed" in res.stderr
    assert ipynb.read_bytes() == before                      # the edit survives
    # an .ipynb without a stamp and outside git cannot be told apart from an edit: refused too
    nb_.metadata.pop("hubnorm", None)
    nbformat.write(nb_, ipynb)
    assert _guard(root) == 1
    # taking the edit into the .py (as the message says) makes the pair agree again
    subprocess.run([str(REPO / ".venv" / "bin" / "jupytext"), "--quiet", "--to", "py:percent", str(ipynb)],
                   check=True)
    assert _guard(root) == 0


def test_setup_records_the_declared_items_and_refuses_other_shapes(tmp_path, monkeypatch):
    monkeypatch.setenv("HUBNORM_RESULTS", str(tmp_path))
    run = nb.setup("97", seed=0, threads=1, reproduces={"nnn-chowdhury2024": ("Table 1", "Fig. 2")})
    assert run.reproduces == {"nnn-chowdhury2024": ["Table 1", "Fig. 2"]}
    assert nb.setup("97", seed=0, threads=1).reproduces == {}
    for bad in (["Table 1"], {"nnn-chowdhury2024": "Table 1"}, {"nnn-chowdhury2024": []}, {1: ["Table 1"]},
                {"nnn-chowdhury2024": [1]}):
        with pytest.raises(TypeError, match="reproduces must map a paper id"):
            nb.setup("97", seed=0, threads=1, reproduces=bad)
