"""scripts/mutation.py without mutmut (CI does not install it): which tests it runs for a module, which modules a
change touches, the workspace it builds, the report it writes."""

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import load_script

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def mutation():
    return load_script("scripts/mutation.py", "mutation_script")


def test_the_tests_of_a_module_name_it_and_leave_out_structural_and_heavy_files(mutation):
    tests = mutation.tests_for("hubness")
    assert "tests/test_hubness.py" in tests and "tests/test_invariants.py" in tests   # hn.k_occurrence there
    assert not {Path(t).name for t in tests} & (mutation.STRUCTURAL | mutation.HEAVY)
    assert mutation.tests_for("cli") == ["tests/test_cli.py", "tests/test_cli_units.py", "tests/test_sims_embeddings.py"]
    assert "tests/test_mutation_script.py" not in mutation.tests_for("evaluation")
    # a method's module: also the checks that reach every registered method through the registry, naming none
    dsl = mutation.tests_for("normalizers.dissimlocal")
    assert {f"tests/{f}" for f in mutation.REGISTRY_WIDE} <= set(dsl) and "tests/test_classic_hubness.py" in dsl
    assert "tests/test_method_checks.py" not in mutation.tests_for("hubness")
    # a subpackage's module: reached through the names its package re-exports (BankIndex for index.ivf)
    assert "tests/test_fast_paths.py" in mutation.tests_for("index.ivf")
    assert "tests/test_fast_paths.py" not in mutation.tests_for("index.engine")
    # a method module's shared machinery (plans.py registers no method): reached through the methods built on it
    assert "tests/test_transport_plans.py" in mutation.tests_for("normalizers.plans")
    # names imported in parentheses over several lines (test_rerank_pipeline.py takes SimulatedCrossEncoder so from
    # the rerank package), and a test file named after the dotted module (test_rerank_simulated_units.py)
    sim = mutation.tests_for("rerank.simulated")
    assert "tests/test_rerank_pipeline.py" in sim and "tests/test_rerank_simulated_units.py" in sim
    assert "tests/test_mutation_script.py" not in sim
    assert "tests/test_rerank_pipeline.py" in mutation.tests_for("rerank.pipeline")
    with pytest.raises(SystemExit, match="no module 'nosuch'"):
        mutation.module_path("nosuch")
    assert mutation.module_path("normalizers.nnn") == REPO / "lib" / "hubnorm" / "normalizers" / "nnn.py"
    assert mutation.module_path("hubnorm_companion.protocol") == \
        REPO / "companion" / "hubnorm_companion" / "protocol.py"
    assert mutation.qualified("hubnorm_companion.protocol") == "hubnorm_companion.protocol"
    assert mutation.qualified("normalizers.nnn") == "hubnorm.normalizers.nnn"
    assert mutation.package_file("hubnorm_companion.protocol") == "hubnorm_companion/protocol.py"
    assert mutation.at_root("companion/hubnorm_companion/protocol.py") == "hubnorm_companion/protocol.py"
    assert mutation.at_root("lib/hubnorm/hubness.py") == "hubnorm/hubness.py"
    assert mutation.at_root("companion/pyproject.toml") == "companion/pyproject.toml"
    assert "tests/test_companion_protocol_units.py" in mutation.tests_for("hubnorm_companion.protocol")
    assert mutation.sample_patterns("hubnorm_companion.studies", 1) == ["hubnorm_companion.studies.*__mutmut_*1"]


def test_the_changed_modules_are_modules_of_the_library_or_the_companion(mutation, monkeypatch):
    import subprocess

    listed = "lib/hubnorm/hubness.py\nlib/hubnorm/normalizers/nnn.py\nlib/hubnorm/__init__.py\n" \
             "companion/hubnorm_companion/protocol.py\ncompanion/hubnorm_companion/__init__.py\n" \
             "lib/hubnorm/schemas/cli.schema.json\nlib/hubnorm/gone.py\n"
    real_run = subprocess.run

    def fake(cmd, *a, **k):
        if cmd[:3] == ["git", "diff", "--name-only"]:
            assert cmd[-3:] == ["--", "lib/hubnorm", "companion/hubnorm_companion"], cmd
            return subprocess.CompletedProcess(cmd, 0, stdout=listed, stderr="")
        return real_run(cmd, *a, **k)

    monkeypatch.setattr(mutation.subprocess, "run", fake)
    assert mutation.changed_modules("HEAD") == ["hubness", "normalizers.nnn", "hubnorm_companion.protocol"]


def test_the_workspace_puts_the_package_at_its_root_with_a_mutmut_configuration(mutation, monkeypatch, tmp_path):
    monkeypatch.setattr(mutation, "WORK", tmp_path / "ws")
    ws = mutation.workspace("hubness", ["tests/test_hubness.py"], 2)
    assert (ws / "hubnorm" / "hubness.py").read_bytes() == (REPO / "lib" / "hubnorm" / "hubness.py").read_bytes()
    assert (ws / "tests" / "test_hubness.py").is_file() and (ws / "mutants").is_dir()
    from configparser import ConfigParser

    parser = ConfigParser()
    parser.read(ws / "setup.cfg")
    config = {k: [x for x in v.split("\n") if x] for k, v in parser["mutmut"].items()}   # mutmut's own reading
    assert config["source_paths"] == ["hubnorm/hubness.py"]
    assert config["pytest_add_cli_args_test_selection"] == ["tests/test_hubness.py"]
    assert "hubnorm/" in config["also_copy"] and "tests/" in config["also_copy"]
    deselected = config["pytest_add_cli_args"][5:]
    assert config["pytest_add_cli_args"][:5] == ["-p", "no:cacheprovider", "-q", "-p", "no:xdist"]
    assert deselected[::2] == ["--deselect"] * len(mutation.KERNEL_TESTS) and deselected[1::2] == list(
        mutation.KERNEL_TESTS)
    for node in mutation.KERNEL_TESTS:   # each names a test that exists (a renamed test would run again, and fail)
        path, name = node.split("::")
        assert f"\ndef {name}(" in (REPO / path).read_text(), node
    # pyproject.toml a byte copy: bootstrap.sh in the workspace finds the environment up to date
    assert (ws / "pyproject.toml").read_bytes() == (REPO / "pyproject.toml").read_bytes()


@pytest.mark.parametrize("stamp_matches", [True, False])
def test_the_workspace_reuses_the_project_environment_only_when_it_is_up_to_date(mutation, monkeypatch, tmp_path,
                                                                                 stamp_matches, capsys):
    """A test that starts run_all.sh from the workspace ran scripts/bootstrap.sh there, which installed a whole
    environment (6.4 GB) into .mutation/: the workspace now links the project's .venv, when its stamp says it was
    installed from these requirements (else bootstrap there would reinstall into the project's environment)."""
    import hashlib

    repo = tmp_path / "repo"
    (repo / ".venv").mkdir(parents=True)
    (repo / "tools").mkdir()
    (repo / "companion").mkdir()
    for name in ("requirements.txt", "pyproject.toml", "companion/pyproject.toml", "tools/pyproject.toml"):
        (repo / name).write_text(f"{name}\n")
    digest = hashlib.sha256(b"requirements.txt\npyproject.toml\ncompanion/pyproject.toml\ntools/pyproject.toml\n"
                            ).hexdigest()
    (repo / ".venv" / ".hubnorm-installed").write_text((digest if stamp_matches else "0" * 64) + "\n")
    monkeypatch.setattr(mutation, "REPO", repo)
    folder = tmp_path / "mutants"
    folder.mkdir()
    assert mutation.venv_link(folder) is stamp_matches
    if stamp_matches:
        assert (folder / ".venv").is_symlink() and (folder / ".venv").resolve() == (repo / ".venv").resolve()
        # the digest scripts/bootstrap.sh computes: cat requirements.txt pyproject.toml companion/pyproject.toml ... | sha256sum
        want = re.search(r"want=\$\(cat ([^|]+) \|", (REPO / "scripts" / "bootstrap.sh").read_text())[1]
        assert tuple(want.split()) == mutation.INSTALL_FILES
        out = subprocess.run(f"cat {want} | sha256sum", shell=True, cwd=repo,
                             capture_output=True, text=True, check=True).stdout
        assert out.split()[0] == digest
    else:
        assert not (folder / ".venv").exists() and "run scripts/bootstrap.sh" in capsys.readouterr().err


def test_the_report_scores_killed_and_timeouts_over_every_decided_mutant_and_keeps_other_modules_rows(mutation,
                                                                                                     tmp_path):
    def row(module, killed):
        return {"module": module, "tests": 1, "test files": ["tests/test_m.py"], "mutants": 10, "killed": killed,
                "survived": 9 - killed - 1, "timeout": 1, "no tests": 1, "suspicious": 0,
                "score": (killed + 1) / 10, "seconds": 1.0, "survivors": {f"{module}.x_f__mutmut_1": "--- a\n+++ b\n-x\n+y"},
                **({"timeouts rechecked": "1 rerun: 0 survived, 0 killed, 1 timed out again"} if module == "a" else {})}

    mutation.write_report([row("m", 6)], tmp_path / "r", ["m"])
    mutation.write_report([row("a", 8)], tmp_path / "r", ["a"])
    md = (tmp_path / "r" / "summary.md").read_text()
    assert "| [m](m.md) | 1 | 10 | all | 6 | 2 | 1 | 1 | 0 | 70% | not rechecked | 0 | 1.0 |" in md
    assert "| [a](a.md) | 1 | 10 | all | 8 | 0 | 1 | 1 | 0 | 90% | 1 rerun: 0 survived, 0 killed, 1 timed out again | 0 | 1.0 |" in md
    assert md.index("[a](a.md)") < md.index("[m](m.md)")
    page = (tmp_path / "r" / "m.md").read_text()
    assert "```diff" in page and "`tests/test_m.py`" in page and "scripts/mutation.py m`" in page
    assert "Timeouts rechecked in a fresh process (see `recheck_timeouts`): not done" in page
    lines = (tmp_path / "r" / "summary.csv").read_text().splitlines()
    assert lines[2].startswith("m,1,10,,6,2,1,1,0,0.700") and len(lines) == 3
    mutation.write_report([row("m", 8)], tmp_path / "r", ["m"])     # a rerun replaces the module's row
    lines = (tmp_path / "r" / "summary.csv").read_text().splitlines()
    assert len(lines) == 3 and lines[2].startswith("m,1,10,,8,0,1,1,0,0.900")
    # the summary's percentage comes from the counts, not from the CSV's 3-digit score (0.9146 stored as 0.915)
    r = dict(row("p", 0), killed=814, survived=76, timeout=0, **{"no tests": 0}, score=814 / 890)   # 0.91461
    mutation.write_report([r], tmp_path / "r", ["p"])
    assert "| 0 | 91% |" in (tmp_path / "r" / "summary.md").read_text()


def test_lines_marked_no_mutate_are_counted_and_listed(mutation, tmp_path, monkeypatch):
    """mutmut's pragma rules: inside brackets the line itself; at a statement's end its first line; a comment line
    ``# pragma: no mutate block`` the statements after it in its block."""
    src = tmp_path / "m.py"
    src.write_text("def f(x):\n"
                   "    y = g(x,  # pragma: no mutate\n"
                   "          meta=1)\n"
                   "    z = h(y,\n"
                   "          2)  # pragma: no mutate\n"
                   "    # pragma: no mutate block (the rest)\n"
                   "    return k(z,\n"
                   "             3)\n"
                   "# pragma: no mutate\n")
    monkeypatch.setattr(mutation, "module_path", lambda name: src)
    skipped = mutation.excluded_lines("m")
    assert skipped == [(2, "y = g(x,  # pragma: no mutate"), (4, "z = h(y,"), (7, "return k(z,"), (8, "3)")]
    row = {"module": "m", "tests": 1, "test files": ["tests/test_m.py"], "mutants": 4, "killed": 4, "survived": 0,
           "timeout": 0, "no tests": 0, "suspicious": 0, "score": 1.0, "seconds": 1.0, "survivors": {},
           "excluded": skipped, "lines not mutated": len(skipped)}
    mutation.write_report([row], tmp_path / "r", ["m"])
    assert "| 100% | none | 4 | 1.0 |" in (tmp_path / "r" / "summary.md").read_text()
    page = (tmp_path / "r" / "m.md").read_text()
    assert "Lines marked `# pragma: no mutate` (no mutant is made on them; code no result depends on): 4." in page
    assert "- line 7: `return k(z,`" in page


def test_a_mutant_no_test_reaches_counts_against_the_score(mutation):
    counts = dict.fromkeys(mutation.STATUSES, 0)
    counts.update({"killed": 6, "timeout": 2, "survived": 1, "no tests": 1, "skipped": 5})
    assert mutation.mutation_score(counts) == 0.8
    assert np.isnan(mutation.mutation_score(dict.fromkeys(mutation.STATUSES, 0)))


def test_a_sample_is_the_same_tenths_of_every_functions_mutants_and_the_report_says_so(mutation, tmp_path):
    import fnmatch

    pats = mutation.sample_patterns("engine", 3)
    assert pats == ["hubnorm.engine.*__mutmut_*1", "hubnorm.engine.*__mutmut_*6", "hubnorm.engine.*__mutmut_*2"]
    names = [f"hubnorm.engine.x_f__mutmut_{i}" for i in range(1, 101)] + \
        [f"hubnorm.engine.xǁLocalEngineǁsize__mutmut_{i}" for i in range(1, 21)]
    chosen = [n for n in names if any(fnmatch.fnmatch(n, p) for p in pats)]
    assert len(chosen) == 30 + 6 and all(n[-1] in "162" for n in chosen)
    assert fnmatch.fnmatch("hubnorm.engine.x_g__mutmut_1", mutation.sample_patterns("engine", 1)[0])   # one mutant
    assert mutation.sample_patterns("engine", None) == []
    for bad in (0, 10, True, 2.5):
        with pytest.raises(SystemExit, match="--sample must be a whole number from 1 to 9"):
            mutation.sample_patterns("engine", bad)
    row = {"module": "engine", "tests": 2, "test files": ["tests/test_a.py"], "mutants": 100, "killed": 27,
           "survived": 3, "timeout": 0, "no tests": 0, "suspicious": 0, "not checked": 70, "score": 0.9,
           "seconds": 5.0, "sample": "30 of 100 (3 in 10)", "survivors": {}}
    mutation.write_report([row], tmp_path / "r", ["engine", "--sample", "3"])
    assert "| [engine](engine.md) | 2 | 100 | 30 of 100 (3 in 10) | 27 | 3 |" in (tmp_path / "r" / "summary.md").read_text()
    page = (tmp_path / "r" / "engine.md").read_text()
    assert "100 mutants (tested: 30 of 100 (3 in 10)): 27 killed, 3 survived" in page
    assert "scripts/mutation.py engine --sample 3`" in page


def test_each_module_is_reported_as_soon_as_it_is_measured_with_its_own_command(mutation, tmp_path, monkeypatch):
    """A run over several modules writes a module's row and page when that module ends: stopping the run later (or
    a failure on the next module) keeps what was measured; the page names the command for that module alone."""
    def fake_run(name, tests, jobs, log, sample=None, reuse=False):
        if name == "selection":
            raise RuntimeError("stopped during the second module")
        counts = dict.fromkeys(mutation.STATUSES, 0)
        counts.update(killed=9, survived=1)
        return {"module": name, "tests": len(tests), "test files": tests, "mutants": 10, **counts, "sample": "all",
                "score": mutation.mutation_score(counts), "seconds": 2.0, "survivors": {}}

    monkeypatch.setattr(mutation, "run_module", fake_run)
    monkeypatch.setattr(mutation.shutil, "which", lambda *a, **k: "/usr/bin/mutmut")
    with pytest.raises(RuntimeError, match="second module"):
        mutation.main(["hubness", "selection", "--tests", "tests/test_hubness.py", "--report", str(tmp_path / "r")])
    md = (tmp_path / "r" / "summary.md").read_text()
    assert "| [hubness](hubness.md) | 1 | 10 | all | 9 | 1 |" in md and "selection" not in md
    page = (tmp_path / "r" / "hubness.md").read_text()
    assert f"scripts/mutation.py hubness --tests tests/test_hubness.py --report {tmp_path / 'r'}`" in page


def test_tests_are_named_with_or_without_their_folder_and_suffix_and_a_missing_one_stops_the_run(mutation):
    assert mutation.test_file("test_hubness") == "tests/test_hubness.py"
    assert mutation.test_file("test_hubness.py") == "tests/test_hubness.py"
    assert mutation.test_file("tests/test_hubness.py") == "tests/test_hubness.py"
    with pytest.raises(SystemExit, match="no test file tests/test_nothing_here.py"):
        mutation.test_file("test_nothing_here")
    with pytest.raises(SystemExit, match="--tests test_nothing_here"):
        mutation.main(["hubness", "--tests", "test_nothing_here"])


def test_timeouts_are_rerun_in_a_fresh_process_and_classified_by_their_exit(mutation, tmp_path, monkeypatch):
    """A fake workspace whose one test passes for mutant ``..._1``, fails for ``..._2`` and hangs for ``..._3``
    (read from MUTANT_UNDER_TEST, as mutmut's trampoline does); a mutant no test calls stays a timeout."""
    import json
    import os

    (tmp_path / "mutants" / "tests").mkdir(parents=True)
    (tmp_path / "mutants" / "tests" / "test_fake.py").write_text(
        "import os, time\n"
        "def test_it():\n"
        "    name = os.environ['MUTANT_UNDER_TEST']\n"
        "    if name.endswith('_2'):\n"
        "        raise AssertionError('killed')\n"
        "    if name.endswith('_3'):\n"
        "        time.sleep(600)\n")
    (tmp_path / "mutants" / "mutmut-stats.json").write_text(json.dumps({
        "tests_by_mangled_function_name": {"hubnorm.fake.x_f": ["tests/test_fake.py::test_it"]},
        "duration_by_test": {"tests/test_fake.py::test_it": 0.01}}))
    monkeypatch.setattr(mutation, "RECHECK_SECONDS", 20)
    names = ["hubnorm.fake.x_f__mutmut_1", "hubnorm.fake.x_f__mutmut_2", "hubnorm.fake.x_f__mutmut_3",
             "hubnorm.fake.x_g__mutmut_1"]
    got = mutation.recheck_timeouts(tmp_path, dict(os.environ), names, 2)
    assert got == {names[0]: "survived", names[1]: "killed", names[2]: "timeout", names[3]: "timeout"}
    assert mutation.recheck_timeouts(tmp_path, {}, [], 2) == {}
    assert mutation.recheck_timeouts(tmp_path, {}, ["a", "b"], 1, run=lambda m: "killed") == {"a": "killed",
                                                                                             "b": "killed"}


def test_recheck_names_one_module_whose_run_is_in_the_workspace(mutation, tmp_path, monkeypatch):
    monkeypatch.setattr(mutation, "WORK", tmp_path / "ws")
    monkeypatch.setattr(mutation.shutil, "which", lambda *a, **k: "mutmut")
    with pytest.raises(SystemExit, match="name exactly one"):
        mutation.main(["hubness", "selection", "--recheck"])
    with pytest.raises(SystemExit, match="holds no mutmut run of hubness"):
        mutation.main(["hubness", "--recheck"])
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "setup.cfg").write_text("[mutmut]\nsource_paths =\n    hubnorm/selection.py\n")
    with pytest.raises(SystemExit, match="holds no mutmut run of hubness"):
        mutation.main(["hubness", "--recheck"])


def test_the_mutation_environment_has_no_thread_pool_a_fork_would_kill(mutation, tmp_path):
    """A Dask computation on the threaded scheduler in a forked child hangs (measured: the child never returns);
    the environment of the mutants' runs makes Dask compute synchronously and BLAS single-threaded."""
    env = mutation.mutation_env(tmp_path)
    assert env["DASK_SCHEDULER"] == "synchronous" and env["OMP_NUM_THREADS"] == "1"
    assert env["PYTHONPATH"] == str(tmp_path / "mutants")
    code = ("import dask; from dask.base import get_scheduler; from dask.local import get_sync; "
            "assert get_scheduler() is get_sync, get_scheduler()")
    import subprocess
    import sys
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True).returncode == 0


_FORK_AFTER_THREADS = """
import os, sys, torch
torch.set_num_threads(3)
a = torch.randn(300, 300, dtype=torch.float64)
(a @ a).sum()
torch.set_num_threads(1)
pid = os.fork()
if pid == 0:
    torch.set_num_threads(3)
    assert torch.get_num_threads() == 3
    (a @ a).sum()
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_the_mutation_environment_lets_a_forked_child_ask_torch_for_threads(mutation, tmp_path):
    """A parent that has run torch on 3 threads, then a forked child that asks for 3 again (as
    tests/test_listwise_adapter_units.py's thread-pinning test does in mutmut's forks): without OMP_THREAD_LIMIT the
    child spins forever in the parent's dead OpenMP pool (measured: killed after 20 s); with it the child finishes
    and still reads back the 3 threads it asked for."""
    pytest.importorskip("torch")
    import subprocess
    import sys
    env = mutation.mutation_env(tmp_path)
    assert env["OMP_THREAD_LIMIT"] == "1"
    env.pop("PYTHONPATH")
    proc = subprocess.run([sys.executable, "-c", _FORK_AFTER_THREADS], env=env, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()


def test_every_library_module_that_defines_a_function_has_a_row_in_the_mutation_report():
    """The README says so: a new module of the library or the companion (or one that gains its first function) gets
    measured before it lands."""
    import ast
    import csv

    wanted = set()
    # the library's modules by their name under hubnorm, the companion's in full (hubnorm_companion.protocol)
    for root, prefix in ((REPO / "lib" / "hubnorm", ()), (REPO / "companion" / "hubnorm_companion",
                                                          ("hubnorm_companion",))):
        for path in root.rglob("*.py"):
            tree = ast.parse(path.read_text())
            if any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in ast.walk(tree)):
                wanted.add(".".join(prefix + path.relative_to(root).with_suffix("").parts))
    with open(REPO / "benchmarks" / "reports" / "mutation" / "summary.csv", newline="") as fh:
        rows = {r["module"] for r in csv.DictReader(fh)}
    assert len(wanted) > 80
    assert sorted(wanted - rows) == []
