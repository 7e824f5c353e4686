"""run_all.sh's runner under failure (issue 44, scope 4): a failed notebook's partial tables leave tables/, a killed
runner leaves no papermill orphan, two sources of the same folder name do not share a results folder, and two
runs on one results folder do not write into each other."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hubnorm_tools import runner as rn


def test_two_sources_of_the_same_name_get_two_folders(tmp_path):
    first = rn.own_results_folder(tmp_path, "local:/a/data")
    assert first.name == "own-local-data"
    first.mkdir()
    (first / rn.SOURCE_FILE).write_text("local:/a/data\n")
    assert rn.own_results_folder(tmp_path, "local:/a/data") == first          # the same source: the same folder
    other = rn.own_results_folder(tmp_path, "local:/b/data")
    assert other != first and other.name.startswith("own-local-data-") and len(other.name) == len(first.name) + 9


def test_one_run_at_a_time_per_results_folder(tmp_path):
    results = tmp_path / "results"
    held = rn.lock_results(results)
    assert held is not None
    assert rn.lock_results(results) is None                                    # a second run is refused
    held.close()                                                               # the first run ends (or dies)
    again = rn.lock_results(results)
    assert again is not None
    again.close()


def test_a_second_run_all_on_a_locked_folder_says_so(tmp_path):
    results = tmp_path / "res"
    held = rn.lock_results(results / "own-local-x")
    try:
        r = subprocess.run(["bash", str(Path(__file__).resolve().parents[1] / "run_all.sh"), "--source",
                            f"local:{tmp_path}/x", "--only", "03", "--quiet"], capture_output=True, text=True,
                           env={**os.environ, "HUBNORM_RESULTS": str(results), "HUBNORM_PROGRESS": "0"}, timeout=300)
    finally:
        held.close()
    assert r.returncode == 2, r.stdout + r.stderr
    assert "another run_all.sh is writing to" in r.stderr


def test_a_killed_runner_takes_its_notebook_process_with_it(tmp_path):
    """The runner starts papermill with _die_with_parent; kill -9 of the runner ends the child too."""
    script = tmp_path / "parent.py"
    pidfile = tmp_path / "child.pid"
    script.write_text(textwrap.dedent(f"""
        import subprocess, sys, time
        from hubnorm_tools.runner import _die_with_parent
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], preexec_fn=_die_with_parent)
        open({str(pidfile)!r}, "w").write(str(child.pid))
        time.sleep(120)
    """))
    parent = subprocess.Popen([sys.executable, str(script)])
    try:
        for _ in range(200):
            if pidfile.exists() and pidfile.read_text():
                break
            time.sleep(0.05)
        child = int(pidfile.read_text())
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        for _ in range(100):
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break
            try:   # reap it if it became our grandchild's zombie (it is not ours: only the check matters)
                os.waitpid(child, os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.05)
        else:
            os.kill(child, signal.SIGKILL)
            pytest.fail("the child outlived the killed runner")
    finally:
        if parent.poll() is None:
            parent.kill()


@pytest.mark.slow
def test_a_failed_notebook_moves_what_it_wrote_out_of_tables(tmp_path, monkeypatch):
    """A notebook that writes a table and then fails: its table is moved to failed/<notebook>/ (incomplete), so
    tables/ holds complete notebooks only; an earlier run's table of that notebook is gone too."""
    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    (root / "scripts").symlink_to(Path(__file__).resolve().parents[1] / "scripts")   # the runner's helpers
    cells = [{"id": "fails", "cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": [
        "import os, pathlib\n",
        "t = pathlib.Path(os.environ['HUBNORM_RESULTS']) / 'tables'\n",
        "t.mkdir(parents=True, exist_ok=True)\n",
        "(t / '98_first_half.csv').write_text('a\\n1\\n')\n",
        "raise RuntimeError('the second half fails')\n"]}]
    nb = root / "notebooks" / "98_fails.ipynb"
    nb.write_text(json.dumps({"cells": cells, "metadata": {"kernelspec": {"name": "python3", "language": "python",
                                                                           "display_name": "Python 3"}},
                              "nbformat": 4, "nbformat_minor": 5}))
    results = tmp_path / "results"
    (results / "tables").mkdir(parents=True)
    (results / "tables" / "98_from_an_earlier_run.csv").write_text("old")
    (results / "tables" / "97_other_notebook.csv").write_text("kept")
    monkeypatch.setenv("HUBNORM_RESULTS", str(results))
    r = rn.Runner(root, root, {"quiet": True}, None)
    r._results = results
    out = results / "notebooks"
    out.mkdir()
    rc, _, _ = r._run_notebook(nb, {}, out)
    assert rc != 0
    assert sorted(p.name for p in (results / "tables").iterdir()) == ["97_other_notebook.csv"]
    assert (results / "failed" / "98_fails" / "98_first_half.csv").read_text() == "a\n1\n"


def _param_notebook(root: Path) -> None:
    """notebooks/98_params.ipynb: a parameters cell (seed = 0) and a cell writing the seed into a table."""
    (root / "notebooks").mkdir(parents=True)
    (root / "scripts").symlink_to(Path(__file__).resolve().parents[1] / "scripts")   # the runner's helpers
    cells = [{"id": "parameters", "cell_type": "code", "metadata": {"tags": ["parameters"]}, "execution_count": None,
              "outputs": [], "source": ["seed = 0\n"]},
             {"id": "table", "cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": [
                 "import os, pathlib\n",
                 "t = pathlib.Path(os.environ['HUBNORM_RESULTS']) / 'tables'\n",
                 "t.mkdir(parents=True, exist_ok=True)\n",
                 "(t / '98_seed.csv').write_text(f'seed\\n{seed}\\n')\n"]}]
    (root / "notebooks" / "98_params.ipynb").write_text(json.dumps(
        {"cells": cells, "metadata": {"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}},
         "nbformat": 4, "nbformat_minor": 5}))


@pytest.mark.slow
def test_runs_with_other_parameters_get_folders_of_their_own_with_a_manifest(tmp_path, monkeypatch):
    """Issue 46 (item 2): the default run and two runs with other parameters leave three complete result folders,
    each with a manifest of its parameters; none writes into another's."""
    root = tmp_path / "repo"
    _param_notebook(root)
    results = tmp_path / "results"
    monkeypatch.setenv("HUBNORM_RESULTS", str(results))
    monkeypatch.setenv("HUBNORM_PROGRESS", "0")
    monkeypatch.setattr(rn.Runner, "_fetch_real", lambda self: None)
    base = ["--root", str(root), "--caller-dir", str(root), "--quiet"]

    def run_all(*extra):   # each run_all.sh is a process of its own: the runner's HUBNORM_RESULTS does not carry over
        monkeypatch.setenv("HUBNORM_RESULTS", str(results))
        return rn.main(base + list(extra))

    assert run_all() == 0
    assert run_all("--param", "seed=1") == 0
    assert run_all("--param", "seed=2") == 0
    assert run_all("--param", "seed=1") == 0          # the same parameters again: the same folder
    folders = {results: "0", results / "params-seed-1": "1", results / "params-seed-2": "2"}
    assert sorted(p.name for p in results.iterdir() if p.is_dir() and p.name.startswith("params-")) == \
        ["params-seed-1", "params-seed-2"]
    for folder, seed in folders.items():
        assert (folder / "tables" / "98_seed.csv").read_text() == f"seed\n{seed}\n", folder
        assert (folder / "notebooks" / "98_params.ipynb").is_file()
        manifest = json.loads((folder / "MANIFEST.json").read_text())
        assert manifest["changed"] == ({} if seed == "0" else {"seed": int(seed)}), manifest
        assert manifest["profile"] == "default" and manifest["hubnorm"]
        if seed != "0":
            assert manifest["parameters"]["seed"] == int(seed) and manifest["command"][-2:] == ["--param", f"seed={seed}"]


def test_run_folder_names_are_readable_sorted_and_never_shared():
    from hubnorm_companion.reporting import run_folder_name

    assert run_folder_name({"seed": 1, "alpha": 0.5}) == "alpha-0.5_seed-1"
    assert run_folder_name({"source": "synthetic:coco"}) == "source-synthetic-coco"
    assert run_folder_name({"ks": [1, 4, 16]}) == "ks-1-4-16"
    assert run_folder_name({"flat_tol": -1}) == "flat_tol--1" != run_folder_name({"flat_tol": 1})
    long_a = run_folder_name({"methods": ["nnn", "is", "sn", "dbsn", "dis", "csls", "qb-norm", "mp"] * 2})
    long_b = run_folder_name({"methods": ["nnn", "is", "sn", "dbsn", "dis", "csls", "qb-norm", "mp"] * 3})
    assert len(long_a) == 64 and len(long_b) == 64 and long_a != long_b and long_a[:55] == long_b[:55]
    with pytest.raises(ValueError, match="changed must be a non-empty mapping"):
        run_folder_name({})


def test_a_direct_papermill_run_with_parameters_writes_beside_not_into_the_default_results(tmp_path, monkeypatch,
                                                                                          capsys):
    from hubnorm_companion import notebook as nb

    (tmp_path / "pyproject.toml").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HUBNORM_RESULTS", raising=False)
    namespace = {"In": ["", "seed = 0\nalpha = 0.75\n", "# Parameters\nalpha = 0.5\nseed = 1\n"], "alpha": 0.5,
                 "seed": 1}
    assert nb.injected_parameters(namespace) == {"alpha": 0.5, "seed": 1}
    assert nb.injected_parameters({"In": ["x = 1"]}) == {}
    nb._direct_run_results("03", namespace)
    folder = tmp_path / "results" / "params-alpha-0.5_seed-1"
    assert os.environ["HUBNORM_RESULTS"] == str(folder)
    manifest = json.loads((folder / "MANIFEST.json").read_text())
    assert manifest["notebook"] == "03" and manifest["changed"] == {"alpha": 0.5, "seed": 1}
    assert "this run's figures and tables go to" in capsys.readouterr().out
    nb._direct_run_results("03", {**namespace, "seed": 2})   # run_all.sh set the folder already: left alone
    assert os.environ["HUBNORM_RESULTS"] == str(folder)
