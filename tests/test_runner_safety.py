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

from hubnorm.experiments import runner as rn


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
        from hubnorm.experiments.runner import _die_with_parent
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
    cells = [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": [
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
