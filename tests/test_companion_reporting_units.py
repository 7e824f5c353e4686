"""hubnorm_companion.reporting: unit tests of the results folder rule, run-folder names, the manifest, the
published-number loader (on the package data and on hand-written files), the join beside the published numbers and the
run summary.

Every expected value is written here by hand (the summary's Markdown line by line); folders are built under
``tmp_path``, and the project markers are replaced by a name no real folder has where "no project" must be hermetic.

Equivalent mutants left (mutation run of this file with tests/test_data_encoders.py, test_companion_protocol_units.py,
test_notebook_tools.py, test_protocol.py, test_published_dbsn.py, test_published_geigle.py):
- results_dir ``root / sub if (sub) or True``: ``root / ""`` is ``root``.
- load_published ``f.open(encoding="utf-8")`` (mode "r" is the default) and ``encoding="UTF-8"``; ``encoding=None``
  or no encoding (2) read the locale's encoding, UTF-8 here (a non-UTF-8 locale would tell them apart).
- load_published ``pd.concat(frames, ignore_index=None/False/dropped)`` (3): the frame is ``reset_index(drop=True)``
  before it is returned, and the column filters select by a mask with the same (duplicated) index.
- beside_published ``merge(on=None)`` / without ``on`` (2): the two frames share exactly the key columns.
- write_summary ``fillna`` of a misspelt "published source" (2): that column is not in SUMMARY.md, and NaN and ""
  are both written as an empty field of SUMMARY_gains.csv.
- write_summary ``to_csv(index=None)`` (2): pandas reads None as no index.
- write_summary ``groupby(..., sort=None)`` (2): pandas reads None as false.
- write_summary ``itertuples(index=None/True)`` (2): the cells are read by column name, never by position.
- write_summary's temporary name ``"XX.tmpXX"`` / ``".TMP"`` (2): it is renamed to SUMMARY.md at once.
"""

import datetime
import hashlib
import json
import subprocess
import types
import zipfile

import numpy as np
import pandas as pd
import pytest

from hubnorm._version import __version__
from hubnorm_companion import reporting

NO_MARKER = ("hubnorm-test-no-such-marker",)


# ---------------------------------------------------------------------------------------------- repository root
def _fake_module(root, folder="companion", pyproject=True, lib=True):
    path = root / folder / "hubnorm_companion" / "reporting.py"
    path.parent.mkdir(parents=True)
    path.write_text("")
    if pyproject:
        (root / "pyproject.toml").write_text("[project]\n")
    if lib:
        (root / "lib" / "hubnorm").mkdir(parents=True)
    return path


def test_repo_root_is_the_checkout_holding_the_companion_beside_lib_hubnorm(tmp_path, monkeypatch):
    root = tmp_path / "checkout"
    monkeypatch.setattr(reporting, "__file__", str(_fake_module(root)))
    assert reporting._repo_root() == root.resolve()


@pytest.mark.parametrize("folder, pyproject, lib", [("site-packages", True, True), ("companion", False, True),
                                                    ("companion", True, False)],
                         ids=["not-under-companion", "no-pyproject", "no-lib-hubnorm"])
def test_repo_root_is_none_for_an_installed_package(tmp_path, monkeypatch, folder, pyproject, lib):
    monkeypatch.setattr(reporting, "__file__", str(_fake_module(tmp_path / "x", folder, pyproject, lib)))
    assert reporting._repo_root() is None


# ---------------------------------------------------------------------------------------------- project root
@pytest.mark.parametrize("marker", ["pyproject.toml", ".git"])
def test_project_root_is_the_nearest_folder_with_a_marker(tmp_path, marker):
    outer, inner = tmp_path / "outer", tmp_path / "outer" / "inner"
    (inner / "a" / "b").mkdir(parents=True)
    (outer / "pyproject.toml").write_text("")
    (inner / marker).mkdir() if marker == ".git" else (inner / marker).write_text("")
    assert reporting.project_root(inner / "a" / "b") == inner.resolve()
    assert reporting.project_root(inner) == inner.resolve()          # the start folder itself counts
    assert reporting.project_root(str(outer)) == outer.resolve()     # a str start


def test_project_root_resolves_the_start_and_defaults_to_the_working_directory(tmp_path, monkeypatch):
    proj = tmp_path / "proj"
    (proj / "a" / "b").mkdir(parents=True)
    (proj / ".git").mkdir()
    (proj / "a" / ".git").mkdir()
    # ".." is resolved first: the answer is proj/a, not the unresolved proj/a/b/..
    assert reporting.project_root(proj / "a" / "b" / "..") == (proj / "a").resolve()
    monkeypatch.chdir(proj / "a" / "b")
    assert reporting.project_root() == (proj / "a").resolve()
    assert reporting.project_root("..") == (proj / "a").resolve()


def test_project_root_is_none_without_a_marker(tmp_path, monkeypatch):
    monkeypatch.setattr(reporting, "PROJECT_MARKERS", NO_MARKER)
    (tmp_path / "pyproject.toml").write_text("")
    assert reporting.project_root(tmp_path) is None
    (tmp_path / NO_MARKER[0]).write_text("")
    assert reporting.project_root(tmp_path) == tmp_path.resolve()


# ---------------------------------------------------------------------------------------------- results folder
def test_results_dir_follows_the_environment_variable_first(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HUBNORM_RESULTS", "~/res")
    out = reporting.results_dir("a/b")
    assert out == tmp_path / "home" / "res" / "a" / "b" and out.is_dir()
    assert reporting.results_dir("a/b") == out                      # an existing folder is fine
    assert reporting.results_dir() == tmp_path / "home" / "res"


def test_results_dir_without_the_variable_is_the_project_results_else_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("HUBNORM_RESULTS", "")                       # empty: as if unset
    monkeypatch.setattr(reporting, "PROJECT_MARKERS", NO_MARKER)
    proj = tmp_path / "proj"
    (proj / "notebooks").mkdir(parents=True)
    (proj / NO_MARKER[0]).write_text("")
    monkeypatch.chdir(proj / "notebooks")
    assert reporting.results_dir("figures") == proj.resolve() / "results" / "figures"
    assert (proj / "results" / "figures").is_dir()
    loose = tmp_path / "loose"
    loose.mkdir()
    monkeypatch.chdir(loose)
    assert reporting.results_dir() == loose.resolve() / "results" and (loose / "results").is_dir()


# ---------------------------------------------------------------------------------------------- run folder names
@pytest.mark.parametrize("changed", [{}, [("seed", 1)], None], ids=["empty", "list", "none"])
def test_run_folder_name_needs_a_non_empty_mapping(changed):
    with pytest.raises(ValueError, match="changed must be a non-empty mapping of parameter names to values; got"):
        reporting.run_folder_name(changed)


@pytest.mark.parametrize("changed, name", [
    ({"seed": 1, "alpha": 0.5}, "alpha-0.5_seed-1"),
    ({"flat_tol": -1}, "flat_tol--1"),                     # the sign kept
    ({"x": 1e-05}, "x-1e-05"),
    ({"on": True, "off": False}, "off-false_on-true"),     # bools are not numbers: json text
    ({"data": "coco 5k/test"}, "data-coco-5k-test"),
    ({"s": "  a+b.c!  "}, "s-a+b.c"),                      # '.' and '+' kept, the ends stripped of '-'
    ({"s": ""}, "s-empty"),
    ({"s": "!!"}, "s-empty"),
    ({"s": "X-aX"}, "s-X-aX"),                             # only '-' is stripped
    ({"s": "café"}, "s-caf"),                              # a str is used as it is, not as json ("caf\\u00e9")
    ({"l": [1, 2]}, "l-1-2"),
    ({"d": {"b": 1, "a": 2}}, "d-a-2-b-1"),                # keys sorted
    ({"n": None}, "n-null"),
    ({"o": types.SimpleNamespace}, "o-class-types.SimpleNamespace"),   # not json: str()
])
def test_run_folder_name_of_short_mappings(changed, name):
    assert reporting.run_folder_name(changed) == name


def _digest(d):
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:8]


def test_run_folder_name_is_cut_past_max_len_and_ends_with_a_digest():
    exact = {"k": "X" * 62}                                 # "k-" + 62 = 64 characters: not cut
    assert reporting.run_folder_name(exact) == "k-" + "X" * 62
    long = {"k": "X" * 63}                                  # 65 characters
    name = reporting.run_folder_name(long)
    assert name == "k-" + "X" * 53 + "-" + _digest({"k": "X" * 63}) and len(name) == 64
    assert reporting.run_folder_name(long, max_len=20) == "k-" + "X" * 9 + "-" + _digest(long)
    # two mappings with the same first characters get two names
    assert reporting.run_folder_name({"k": "X" * 63 + "w"}) != name


def test_run_folder_name_cut_strips_separators_and_hashes_any_mapping():
    # not a dict, keys not in order, and a value json cannot write
    changed = types.MappingProxyType({"c": 3, "aaaa": 1, "b": object})
    # the full name is "aaaa-1_b-class-object_c-3"; max_len=16 keeps 7 characters, "aaaa-1_" -> "aaaa-1"
    name = reporting.run_folder_name(changed, max_len=16)
    assert name == "aaaa-1-" + _digest({"aaaa": 1, "b": object, "c": 3})
    # max_len=14 keeps 5 characters, "aaaa-" -> "aaaa", then "-" and the digest
    assert reporting.run_folder_name(changed, max_len=14) == "aaaa-" + _digest({"aaaa": 1, "b": object, "c": 3})


# ---------------------------------------------------------------------------------------------- manifest
def _git_repo(path):
    path.mkdir(parents=True)
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "HOME": str(path), "PATH": "/usr/bin:/bin:/usr/local/bin"}
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "commit", "-q", "--allow-empty", "-m", "x"], check=True, env=env)
    return subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_write_manifest_records_the_fields_version_commit_and_utc_time(tmp_path):
    head = _git_repo(tmp_path / "repo")
    folder = tmp_path / "repo" / "results" / "run-1"                # created, with its parents
    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    out = reporting.write_manifest(folder, seed=3, source=tmp_path / "p", changed={"b": 1, "a": 2})
    after = datetime.datetime.now(datetime.timezone.utc)
    assert out == folder / "MANIFEST.json" and reporting.MANIFEST == "MANIFEST.json"
    assert sorted(p.name for p in folder.iterdir()) == ["MANIFEST.json"]    # the temporary file is gone
    text = out.read_text()
    record = json.loads(text)
    assert set(record) == {"seed", "source", "changed", "hubnorm", "hubnorm_companion", "commit", "written"}
    assert record["seed"] == 3 and record["source"] == str(tmp_path / "p") and record["changed"] == {"a": 2, "b": 1}
    assert record["hubnorm"] == __version__ and record["commit"] == head
    assert record["hubnorm_companion"] == __import__("hubnorm_companion").__version__
    written = datetime.datetime.fromisoformat(record["written"])
    assert written.utcoffset() == datetime.timedelta(0) and written.microsecond == 0
    assert before <= written <= after
    lines = text.split("\n")
    assert lines[0] == "{" and lines[1].startswith(' "changed": {') and lines[2] == '  "a": 2,' and text[-2:] == "}\n"


def test_write_manifest_falls_back_to_the_working_directory_project(tmp_path, monkeypatch):
    head = _git_repo(tmp_path / "repo")
    monkeypatch.setattr(reporting, "PROJECT_MARKERS", (".git",))
    monkeypatch.chdir(tmp_path / "repo")
    out = reporting.write_manifest(tmp_path / "loose")              # no project above the folder itself
    assert json.loads(out.read_text())["commit"] == head


def test_write_manifest_commit_is_none_outside_a_git_project(tmp_path, monkeypatch):
    monkeypatch.setattr(reporting, "PROJECT_MARKERS", NO_MARKER + (".git",))
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / NO_MARKER[0]).write_text("")                             # a project without .git
    assert json.loads(reporting.write_manifest(proj / "r").read_text())["commit"] is None
    (proj / ".git").write_text("not a repository\n")                # git fails: empty output
    assert json.loads(reporting.write_manifest(proj / "r").read_text())["commit"] is None


def test_write_manifest_commit_is_none_outside_any_project(tmp_path, monkeypatch):
    monkeypatch.setattr(reporting, "PROJECT_MARKERS", NO_MARKER)
    monkeypatch.chdir(tmp_path)
    assert json.loads(reporting.write_manifest(tmp_path / "r").read_text())["commit"] is None


def test_write_manifest_asks_git_for_the_project_head(tmp_path, monkeypatch):
    calls = []

    def fake_run(cmd, **kw):
        calls.append((cmd, kw))
        return subprocess.CompletedProcess(cmd, 0, stdout=" abc123 \n", stderr="")

    (tmp_path / ".git").mkdir()
    monkeypatch.setattr(subprocess, "run", fake_run)
    out = reporting.write_manifest(tmp_path / "r")
    assert json.loads(out.read_text())["commit"] == "abc123"
    assert calls == [(["git", "-C", str(tmp_path.resolve()), "rev-parse", "HEAD"],
                      {"capture_output": True, "text": True, "timeout": 10})]


@pytest.mark.parametrize("error", [OSError("no git"), subprocess.TimeoutExpired("git", 10)], ids=["oserror", "timeout"])
def test_write_manifest_commit_is_none_when_git_cannot_run(tmp_path, monkeypatch, error):
    def fake_run(cmd, **kw):
        raise error

    (tmp_path / ".git").mkdir()
    monkeypatch.setattr(subprocess, "run", fake_run)
    assert json.loads(reporting.write_manifest(tmp_path / "r").read_text())["commit"] is None


# ---------------------------------------------------------------------------------------------- published numbers
COLS = ["paper", "table", "model", "dataset", "direction", "setting", "method", "metric", "value", "note"]


def test_published_columns_and_the_package_data():
    assert reporting.PUBLISHED_COLUMNS == COLS
    df = reporting.load_published()
    assert list(df.columns) == COLS and list(df.index) == list(range(len(df)))
    # files in name order: the first row is the first row of dbsn_pan2025.csv
    assert df.iloc[0][["paper", "table", "metric", "value"]].tolist() == ["dbsn-pan2025", "2", "R@1", 58.8]
    assert df["paper"].tolist()[-1] == "rerank-geigle2021"
    nnn = reporting.load_published("nnn-chowdhury2024", "1")
    assert len(nnn) and set(nnn["paper"]) == {"nnn-chowdhury2024"} and set(nnn["table"]) == {"1"}
    assert nnn.iloc[0][["method", "metric", "value"]].tolist() == ["raw", "R@1", 58.82]
    assert list(nnn.index) == list(range(len(nnn)))


def _write(folder, name, rows, columns=COLS):
    folder.mkdir(exist_ok=True)
    pd.DataFrame(rows, columns=columns).to_csv(folder / name, index=False)


def _r(paper, table, value, note="n"):
    return [paper, table, "M", "D", "t2i", "none", "raw", "R@1", value, note]


def test_load_published_reads_every_csv_in_name_order_and_filters(tmp_path, monkeypatch):
    pub = tmp_path / "published"
    _write(pub, "b.csv", [_r("p-b", "01", 3.0), _r("p-a", "2", 4.0)])
    _write(pub, "a.csv", [_r("p-a", "01", 1.0, note="é – note"), _r("p-a", "2", 2.0)])
    (pub / "README.md").write_text("paper,table\nnot,read\n")
    monkeypatch.setattr(reporting, "PUBLISHED_DIR", pub)
    df = reporting.load_published()
    assert df["value"].tolist() == [1.0, 2.0, 3.0, 4.0] and list(df.index) == [0, 1, 2, 3]
    assert df["table"].tolist() == ["01", "2", "01", "2"]            # ids stay text: "01" is not 1
    assert df["note"].iloc[0] == "é – note"
    assert reporting.load_published(paper="p-a")["value"].tolist() == [1.0, 2.0, 4.0]
    by_table = reporting.load_published(table="2")
    assert by_table["value"].tolist() == [2.0, 4.0] and list(by_table.index) == [0, 1]
    assert reporting.load_published("p-a", "2")["value"].tolist() == [2.0, 4.0]
    assert reporting.load_published("p-b", "2").empty


def test_load_published_reads_package_data_from_a_zip_as_in_a_wheel(tmp_path, monkeypatch):
    """A wheel's package data is a zipfile.Path: no ordering of its own, so the files are sorted by name."""
    wheel = tmp_path / "hubnorm.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, rows in (("b.csv", [_r("p-b", "1", 2.0)]), ("a.csv", [_r("p-a", "1", 1.0, note="é")])):
            zf.writestr(f"hubnorm/published/{name}", pd.DataFrame(rows, columns=COLS).to_csv(index=False))
        zf.writestr("hubnorm/published/README.md", "x")
    monkeypatch.setattr(reporting, "PUBLISHED_DIR", zipfile.Path(wheel, "hubnorm/published/"))
    df = reporting.load_published()
    assert df["paper"].tolist() == ["p-a", "p-b"] and df["note"].tolist() == ["é", "n"]


def test_load_published_without_files_says_the_package_data_is_missing(tmp_path, monkeypatch):
    (tmp_path / "README.md").write_text("")
    (tmp_path / "x.csv.bak").write_text("")
    monkeypatch.setattr(reporting, "PUBLISHED_DIR", tmp_path)
    with pytest.raises(FileNotFoundError, match=r"no published-number files in .*: the package data is missing "
                       r"\(reinstall hubnorm; a source checkout has them in lib/hubnorm/published/\)$"):
        reporting.load_published()


def test_load_published_needs_every_column(tmp_path, monkeypatch):
    _write(tmp_path, "a.csv", [_r("p", "1", 1.0)[:8]], columns=COLS[:8])
    monkeypatch.setattr(reporting, "PUBLISHED_DIR", tmp_path)
    with pytest.raises(ValueError, match=r"published-number files lack columns \['note', 'value'\]"):
        reporting.load_published()


def test_beside_published_is_an_outer_join_on_the_keys():
    published = pd.DataFrame({"method": ["a", "b"], "metric": ["R@1", "R@1"], "value": [1.0, 2.0],
                              "note": ["x", "y"]})
    ours = pd.DataFrame({"method": ["b", "c"], "metric": ["R@1", "R@1"], "mean": [20.0, 30.0], "value": [9.0, 9.0]})
    out = reporting.beside_published(ours, published, ("method", "metric"), value="mean", run_label="mine")
    assert list(out.columns) == ["method", "metric", "published", "mine"]
    out = out.sort_values("method").reset_index(drop=True)
    assert out["method"].tolist() == ["a", "b", "c"]
    np.testing.assert_array_equal(out["published"], [1.0, 2.0, np.nan])
    np.testing.assert_array_equal(out["mine"], [np.nan, 20.0, 30.0])
    default = reporting.beside_published(ours, published, ["method"])
    assert list(default.columns) == ["method", "published", "this run"]
    assert default.set_index("method")["this run"].to_dict() == {"a": pytest.approx(np.nan, nan_ok=True), "b": 9.0,
                                                                 "c": 9.0}


# ---------------------------------------------------------------------------------------------- run summary
def test_run_summary_constants():
    assert reporting.REAL_MISSING_NOTE == "NOTE: the real column leaves out"
    assert reporting.CLAIM_COLUMNS == ["notebook", "claim", "status", "detail", "data"]
    assert reporting.SUMMARY_FILES == ("SUMMARY.md", "SUMMARY.csv", "SUMMARY_gains.csv")
    assert reporting.GAIN_COLUMNS == ["data", "direction", "method", "setting", "bank", "metric", "raw scores",
                                      "normalized", "gain", "published raw", "published", "published gain", "ratio",
                                      "published source"]


def test_read_run_tables_gathers_the_files_of_the_named_notebooks(tmp_path):
    (tmp_path / "tables").mkdir()
    (tmp_path / "claims").mkdir()
    pd.DataFrame({"x": [1]}).to_csv(tmp_path / "tables" / "01_gains.csv", index=False)
    pd.DataFrame({"x": [2, 3]}).to_csv(tmp_path / "tables" / "01_gains_b.csv", index=False)
    pd.DataFrame({"x": [9]}).to_csv(tmp_path / "tables" / "01_other.csv", index=False)
    pd.DataFrame({"x": [9]}).to_csv(tmp_path / "tables" / "03_gains.csv", index=False)   # not asked for
    pd.DataFrame({"x": [], "zzz": []}).to_csv(tmp_path / "tables" / "02_gains.csv", index=False)   # empty: left out
    pd.DataFrame({"x": [4]}).to_csv(tmp_path / "tables" / "02_gains_c.csv", index=False)
    pd.DataFrame({"y": [5]}).to_csv(tmp_path / "claims" / "02.csv", index=False)
    gains = reporting.read_run_tables(tmp_path, ["01", "02"], "gains")
    assert list(gains.columns) == ["x", "notebook"] and list(gains.index) == [0, 1, 2, 3]
    assert gains["x"].tolist() == [1, 2, 3, 4] and gains["notebook"].tolist() == ["01", "01", "01", "02"]
    claims = reporting.read_run_tables(str(tmp_path), ["01", "02"], "claims")
    assert claims.to_dict("list") == {"y": [5], "notebook": ["02"]}
    other = reporting.read_run_tables(tmp_path, ["01"], "other")
    assert other.to_dict("list") == {"x": [9], "notebook": ["01"]}
    empty = reporting.read_run_tables(tmp_path, ["05"], "claims")
    assert isinstance(empty, pd.DataFrame) and empty.empty and list(empty.columns) == []


def _claims(folder, prefix, rows):
    (folder / "claims").mkdir(exist_ok=True)
    pd.DataFrame(rows, columns=reporting.CLAIM_COLUMNS).to_csv(folder / "claims" / f"{prefix}.csv", index=False)


def _gain(data, method, setting, metric, raw, norm, pub_gain, ratio, source="S", bank="bank"):
    return [data, "t2i", method, setting, bank, metric, raw, norm, norm - raw, 50.0, 50.0 + (pub_gain or 0),
            pub_gain, ratio, source]


def test_write_summary_writes_the_whole_markdown_and_the_two_csvs(tmp_path):
    _claims(tmp_path, "01", [["01", "NNN raises R@1", "PASS", "1 -> 2", "syn"],
                             ["01", "a | b", "DIFFERS", None, "real"],
                             ["01", "third", "PASS", "x", "syn"]])
    _claims(tmp_path, "02", [["02", "skipped one", "PASS", "", "syn"]])         # 02 was skipped: not gathered
    _claims(tmp_path, "03", [["03", "c3", "DIFFERS", "d", None]])                 # data not given
    (tmp_path / "tables").mkdir()
    pd.DataFrame([_gain("syn", "nnn", None, "R@1", 60.0, 66.0, 5.0, 1.2),
                  _gain("syn", "dn", "s|t", "R@5", 70.0, 71.5, None, None, source=None, bank=None),
                  _gain("real", "nnn", "s", "R@1", 40.0, 41.0, 2.0, 0.5),
                  _gain("syn", "qb", "s", "R@1", 61.0, 63.0, 2.0, 1.0)],
                 columns=reporting.GAIN_COLUMNS).assign(extra=1).to_csv(tmp_path / "tables" / "01_gains.csv",
                                                                        index=False)
    notebooks = [("01_main", "ok"), ("02_img", "skipped: needs images"), ("03_k", "FAILED"), ("04_z", "ok")]
    out = reporting.write_summary(tmp_path, notebooks, title="a test")
    assert out == tmp_path / "SUMMARY.md"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["SUMMARY.csv", "SUMMARY.md", "SUMMARY_gains.csv", "claims",
                                                          "tables"]
    expected = [
        "# Summary of this run", "",
        "Written by a test from the notebooks' own outputs (`SUMMARY.csv`: every PASS/DIFFERS line; "
        "`SUMMARY_gains.csv`: every gain over the raw scores beside the paper's). A PASS/DIFFERS line tests a "
        "paper's qualitative claim on the numbers of the data named beside it; 'synthetic analog' data are "
        "not a reproduction.", "",
        "## Notebooks", "",
        "| notebook | status | claims |", "|---|---|---|",
        "| 01_main | ok | 2 PASS / 1 DIFFERS |",
        "| 02_img | skipped: needs images | - |",
        "| 03_k | FAILED | 0 PASS / 1 DIFFERS |",
        "| 04_z | ok | - |",
        "", "All lines: 2 PASS / 2 DIFFERS.", "",
        "By data:", "",
        "- syn: 2 PASS / 0 DIFFERS",
        "- real: 0 PASS / 1 DIFFERS",
        "- : 0 PASS / 1 DIFFERS",
        "", "## Claims", "",
        "| notebook | status | claim | data | detail |", "|---|---|---|---|---|",
        "| 01 | PASS | NNN raises R@1 | syn | 1 -> 2 |",
        "| 01 | DIFFERS | a / b | real |  |",
        "| 01 | PASS | third | syn | x |",
        "| 03 | DIFFERS | c3 |  | d |",
        "", "## Gains beside the published gains", "",
        "`ratio` = our gain / the published gain (1: the size the paper reports; a published gain comes "
        "from the paper's full-size test set, ours from the data named in the row).", "",
        "| notebook | data | direction | method | setting | bank | metric | raw | normalized | gain "
        "| published gain | ratio |", "|---|---|---|---|---|---|---|---|---|---|---|---|",
        "| 01 | syn | t2i | nnn |  | bank | R@1 | 60.00 | 66.00 | 6.00 | 5.00 | 1.20 |",
        "| 01 | syn | t2i | dn | s/t |  | R@5 | 70.00 | 71.50 | 1.50 | - | - |",
        "| 01 | real | t2i | nnn | s | bank | R@1 | 40.00 | 41.00 | 1.00 | 2.00 | 0.50 |",
        "| 01 | syn | t2i | qb | s | bank | R@1 | 61.00 | 63.00 | 2.00 | 2.00 | 1.00 |",
        "", "Median ratio per data and metric:", "",
        "- syn, R@1: 1.10 over 2 gains",
        "- syn, R@5: no published gain to compare",
        "- real, R@1: 0.50 over 1 gains",
        "",
    ]
    assert out.read_text().split("\n") == expected
    claims = pd.read_csv(tmp_path / "SUMMARY.csv", dtype=str, keep_default_na=False)
    assert list(claims.columns) == reporting.CLAIM_COLUMNS
    assert claims["notebook"].tolist() == ["01", "01", "01", "03"] and claims["detail"].tolist()[1] == ""
    gains = pd.read_csv(tmp_path / "SUMMARY_gains.csv", dtype=str, keep_default_na=False)
    assert list(gains.columns) == ["notebook"] + reporting.GAIN_COLUMNS            # "extra" left out
    assert gains["setting"].tolist() == ["", "s|t", "s", "s"] and gains["ratio"].tolist()[1] == ""
    assert gains["bank"].tolist()[1] == "" and gains["published source"].tolist() == ["S", "", "S", "S"]


def test_write_summary_of_a_run_without_claims_or_gains(tmp_path):
    out = reporting.write_summary(str(tmp_path), [("05_x", "skipped: no data")])
    text = out.read_text()
    assert text.endswith("\n") and not text.endswith("\n\n\n")
    assert text.split("\n")[2].startswith("Written by run_all.sh from the notebooks' own outputs")
    assert text.split("\n")[8:] == ["| 05_x | skipped: no data | - |", "", "All lines: 0 PASS / 0 DIFFERS.", "",
                                     "", "## Gains beside the published gains", "",
                                     "No notebook of this run compared a gain with a paper.", ""]
    claims = pd.read_csv(tmp_path / "SUMMARY.csv")
    assert list(claims.columns) == reporting.CLAIM_COLUMNS and claims.empty
    gains = pd.read_csv(tmp_path / "SUMMARY_gains.csv")
    assert list(gains.columns) == ["notebook"] + reporting.GAIN_COLUMNS and gains.empty
    assert not (tmp_path / "SUMMARY.md.tmp").exists()
