"""Mutation testing of the library with mutmut: which one-line changes to a module its tests do not notice.

    .venv/bin/pip install mutmut==3.8.1                                 # once (not in the default set-up)
    .venv/bin/python scripts/mutation.py hubness cli                   # these modules (lib/hubnorm/<name>.py)
    .venv/bin/python scripts/mutation.py hubnorm_companion.protocol   # a module of the notebooks' companion
                                                                        # (companion/hubnorm_companion/<name>.py)
    .venv/bin/python scripts/mutation.py --changed                     # the modules a change touches (vs origin/main,
                                                                        # else HEAD~1): the check before a stop
    .venv/bin/python scripts/mutation.py hubness --report benchmarks/reports/mutation   # + the report folder (a
                                                                        # module's row is written when it ends)
    .venv/bin/python scripts/mutation.py engine --sample 3             # a heavy module: about 3 mutants in 10
    .venv/bin/python scripts/mutation.py blocks --recheck --report ... # score what a stopped run left in .mutation/

mutmut (3.x) changes one thing at a time in every function of a module (an operator, a constant, an argument, a
returned value), runs the tests that call that function, and counts the mutant *killed* when a test fails,
*survived* when every test passes. A survivor is a change to a computed number or a guard that no test notices.
score = (killed + timeout) / (killed + survived + timeout + no tests): a mutant that no selected test reaches
counts as a survivor. mutmut's timeouts are rerun here in a fresh process (:func:`recheck_timeouts`): a forked
test run can hang although every test passes, and such a "timeout" is a survivor.

``--sample K`` (1-9) tests the mutants whose number ends in one of K fixed digits (every function's first mutant,
and about K in 10 of a larger function's; the same ones on every run); the others are "not checked" and left out of the score, and the report says
how many were tested. For modules whose every mutant reaches minutes of tests (the engines).

How it runs: a workspace under ``.mutation/`` (gitignored) holds a copy of the working tree with the package at
its root (``hubnorm/``, as mutmut expects), and mutmut writes the mutated copy under ``.mutation/mutants/``; the
tests import that copy (``PYTHONPATH``; the folder exists before mutmut starts, or Python would cache that it is
absent and import the editable install instead). The tests of a module: the test files that name it
(``hubnorm.<module>``, ``from hubnorm import <module>``, ``from hubnorm.<module> import``, or
``tests/test_<module>*.py``), and for a method's module (``normalizers.*``) also the tests that reach every
registered method through the registry (:data:`REGISTRY_WIDE`); a module of a subpackage also through the names its
package re-exports (``from hubnorm.index import BankIndex`` for ``index.ivf``), and a method module that registers
no method (``normalizers.plans``) through the registered methods built on its classes; ``--tests`` replaces them.
Tests run with ``HUBNORM_SHARED_DATA`` pointing at the shared data folder beside the repository when it exists (else
those tests skip, and what only they check survives).
"""

from __future__ import annotations

import argparse
import ast
import csv
import hashlib
import importlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]
LIB = REPO / "lib" / "hubnorm"
#: the notebooks' companion package (a distribution of its own); its modules are named in full:
#: ``hubnorm_companion.protocol``
COMPANION = "hubnorm_companion"
COMPANION_DIR = REPO / "companion" / COMPANION
#: each package mutated here and where it sits in the tree (the workspace puts each at its root)
PACKAGES = {"hubnorm": LIB, COMPANION: COMPANION_DIR}
WORK = REPO / ".mutation"
#: tests that read the source tree's layout (lib/hubnorm paths, imports, packaging), not a module's behaviour: they
#: do not run in the workspace, where the package sits at the root
STRUCTURAL = {"test_import_graph.py", "test_layering.py", "test_module_boundaries.py", "test_packaging.py",
              "test_method_names.py"}
#: tests that run whole notebooks, the website or run_all.sh (minutes each, for every mutant they reach): named with
#: --tests when wanted
HEAVY = {"test_notebooks.py", "test_notebook_matrix.py", "test_notebook_08.py", "test_exercises.py", "test_site.py",
         "test_run_profiles.py", "test_runner_safety.py", "test_jupyter_ipc.py"}
#: tests in otherwise kept files that run the package in a Jupyter kernel (through run_all.sh or papermill): there the
#: mutated code cannot find mutmut's configuration (the kernel starts elsewhere), so they fail on every mutant and
#: on the unmutated code alike; deselected in every run
KERNEL_TESTS = ("tests/test_own_data.py::"
                "test_run_all_source_writes_under_hubnorm_results_into_a_cleared_folder_named_after_it",
                "tests/test_own_data.py::test_run_all_source_sims_runs_a_notebook_end_to_end_and_skips_none",
                "tests/test_notebook_tools.py::test_progress_stays_out_of_an_executed_notebook")
#: tests that reach every registered method through the registry, naming none (the generic method checks, the
#: invariants, the registry's errors): part of every ``normalizers.*`` module's tests
REGISTRY_WIDE = {"test_method_checks.py", "test_invariants.py", "test_errors.py"}
#: what scripts/bootstrap.sh installs from, in the order of its stamp's digest (cat ... | sha256sum)
INSTALL_FILES = ("requirements.txt", "pyproject.toml", "companion/pyproject.toml", "tools/pyproject.toml")
STATUSES = ("killed", "survived", "timeout", "suspicious", "no tests", "skipped", "not checked", "segfault")


def in_companion(name: str) -> bool:
    return name.startswith(COMPANION + ".")


def qualified(name: str) -> str:
    """The importable name: ``hubness`` -> hubnorm.hubness; ``hubnorm_companion.protocol`` stays."""
    return name if in_companion(name) else f"hubnorm.{name}"


def package_file(name: str) -> str:
    """The module's file relative to the workspace root, where each package sits: hubnorm/hubness.py."""
    return "/".join(qualified(name).split(".")) + ".py"


def module_path(name: str) -> Path:
    """``hubness`` -> lib/hubnorm/hubness.py; ``normalizers.nnn`` -> lib/hubnorm/normalizers/nnn.py;
    ``hubnorm_companion.protocol`` -> companion/hubnorm_companion/protocol.py."""
    package, *parts = qualified(name).split(".")
    path = PACKAGES[package].joinpath(*parts).with_suffix(".py")
    if not path.is_file():
        raise SystemExit(f"error: no module {name!r} ({path.relative_to(REPO)} does not exist); name one under "
                         f"lib/hubnorm, e.g. hubness or normalizers.nnn, or one of the companion, e.g. "
                         f"{COMPANION}.protocol")
    return path


def tests_for(name: str) -> list:
    """The test files that name module ``name``, or a name ``import hubnorm`` exports from it (``hn.hubness``)."""
    import hubnorm

    dotted, stem = qualified(name), name.rsplit(".", 1)[-1]
    parent = dotted.rsplit(".", 1)[0]
    exported = sorted(n for n, mod in hubnorm._EXPORTS.items() if mod == name)
    listed = r"(?:\([^)]*|[^\n(]*)"   # the names of an import: on its line, or in parentheses over several
    alternatives = [rf"\b{re.escape(dotted)}\b", rf"from {re.escape(parent)} import {listed}\b{re.escape(stem)}\b"]
    if exported:
        names = "|".join(map(re.escape, exported))
        alternatives += [rf"\b(?:hn|hubnorm)\.(?:{names})\b", rf"from hubnorm import {listed}\b(?:{names})\b"]
    if parent not in ("hubnorm", COMPANION) and not name.startswith("normalizers."):
        # a module of a subpackage reached through the names its package re-exports (``from hubnorm.index import
        # BankIndex`` reaches hubnorm.index.ivf)
        package = importlib.import_module(parent)
        public = sorted(n for n in getattr(package, "__all__", dir(package))
                        if getattr(getattr(package, n, None), "__module__", None) == dotted)
        if public:
            names = "|".join(map(re.escape, public))
            alternatives += [rf"from {re.escape(parent)} import {listed}\b(?:{names})\b",
                             rf"\b{re.escape(parent)}\.(?:{names})\b"]
    if name.startswith("normalizers."):   # tests reach a method by its class or its registry name ("nnn")
        source = module_path(name).read_text()
        classes = re.findall(r"^class (\w+)\(", source, re.M)
        keys = re.findall(r'^    name = "(\w+)"', source, re.M)
        # a module of shared machinery that registers no method itself (plans.py) is reached through the registered
        # methods built on its classes
        if not keys:
            from hubnorm.registry import NORMALIZERS

            built_on = {key: cls for key, cls in NORMALIZERS.items()
                        if any(c.__module__ == dotted for c in cls.__mro__[1:])}
            classes += [cls.__name__ for cls in built_on.values()]
            keys += list(built_on)
        alternatives += [rf"\b{re.escape(c)}\b" for c in classes] + [rf"""["']{re.escape(k)}["']""" for k in keys]
    pattern = re.compile("|".join(alternatives))
    out = []
    for f in sorted((REPO / "tests").glob("test_*.py")):
        if f.name in STRUCTURAL | HEAVY:
            continue
        generic = name.startswith("normalizers.") and f.name in REGISTRY_WIDE
        own = f.name.startswith((f"test_{stem}", f"test_{name.replace('.', '_')}")   # test_rerank_simulated_units.py
                                + ((f"test_companion_{stem}",) if in_companion(name) else ()))
        if generic or own or pattern.search(f.read_text()):
            out.append(f"tests/{f.name}")
    return out


def changed_modules(base: str | None) -> list:
    """Modules of the library and of the companion that differ from ``base`` (default: origin/main when it exists,
    else HEAD~1), committed or not; the companion's named in full (``hubnorm_companion.protocol``)."""
    if base is None:
        has_origin = subprocess.run(["git", "rev-parse", "--verify", "-q", "origin/main"], cwd=REPO,
                                    capture_output=True).returncode == 0
        base = "origin/main" if has_origin else "HEAD~1"
    diff = subprocess.run(["git", "diff", "--name-only", base, "--", "lib/hubnorm", f"companion/{COMPANION}"],
                          cwd=REPO, capture_output=True, text=True)
    if diff.returncode:
        raise SystemExit(f"error: git diff {base} failed: {diff.stderr.strip()}")
    names = []
    for line in diff.stdout.split():
        p = REPO / line
        if p.suffix != ".py" or not p.is_file() or p.name == "__init__.py":
            continue
        for package, folder in PACKAGES.items():
            if p.is_relative_to(folder):
                dotted = ".".join((package, *p.relative_to(folder).with_suffix("").parts))
                names.append(dotted.removeprefix("hubnorm."))   # the library's modules by their short name
    return names


def at_root(rel: str) -> str:
    """Where a file of the tree goes in the workspace: each package at its root (lib/hubnorm/x.py -> hubnorm/x.py,
    companion/hubnorm_companion/x.py -> hubnorm_companion/x.py), everything else where it is."""
    for folder in PACKAGES.values():
        if (REPO / rel).is_relative_to(folder):
            return (REPO / rel).relative_to(folder.parent).as_posix()
    return rel


def workspace(name: str, tests: list, jobs: int) -> Path:
    """A fresh copy of the working tree with the package at its root and a mutmut configuration for ``name``."""
    if WORK.exists():
        shutil.rmtree(WORK)
    WORK.mkdir()
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split("\n")
    top = set()
    for rel in filter(None, files):
        src = REPO / rel
        if not src.is_file():
            continue
        at = at_root(rel)
        dst = WORK / at
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
        top.add(Path(at).parts[0])
    target = package_file(name)
    # the configuration goes into setup.cfg (mutmut reads it when pyproject.toml has no [tool.mutmut]): pyproject.toml
    # stays a byte copy, so that scripts/bootstrap.sh, run by the tests that start run_all.sh, finds the environment
    # up to date (see venv_link) instead of installing a new one into the workspace (6.4 GB, measured)
    options = {"source_paths": [target],
               "also_copy": [t + ("/" if (WORK / t).is_dir() else "") for t in sorted(top)],
               "pytest_add_cli_args_test_selection": list(tests),
               "pytest_add_cli_args": ["-p", "no:cacheprovider", "-q", "-p", "no:xdist",
                                       *(a for t in KERNEL_TESTS for a in ("--deselect", t))]}
    (WORK / "setup.cfg").write_text("[mutmut]\n" + "".join(
        f"{key} =\n" + "".join(f"    {v}\n" for v in values) for key, values in options.items()))
    (WORK / "mutants").mkdir()   # exists before the interpreter starts: see the module docstring
    venv_link(WORK / "mutants")
    return WORK


def venv_link(folder: Path) -> bool:
    """Link ``folder/.venv`` to the project's environment when that environment is installed from this tree's
    :data:`INSTALL_FILES` (its stamp, written by scripts/bootstrap.sh, matches them): the tests that
    start run_all.sh from the workspace then reuse it, with the mutated package first on PYTHONPATH. Without a
    matching stamp no link is made (bootstrap there would reinstall into the project's environment) and those tests
    would set up an environment of their own: a warning says so. Returns whether the link was made."""
    venv = REPO / ".venv"
    stamp = venv / ".hubnorm-installed"
    want = hashlib.sha256(b"".join((REPO / f).read_bytes() for f in INSTALL_FILES)).hexdigest()
    if not stamp.is_file() or stamp.read_text().strip() != want:
        print(f"warning: {venv} is missing or older than {' / '.join(INSTALL_FILES)} (run scripts/bootstrap.sh): "
              "tests that start run_all.sh would install an environment into the workspace", file=sys.stderr)
        return False
    (folder / ".venv").symlink_to(venv, target_is_directory=True)
    return True


def excluded_lines(name: str) -> list:
    """``(line number, text)`` of the module's code lines on which mutmut makes no mutant because of a ``# pragma: no
    mutate`` (kept for code no result depends on, such as Dask graph metadata; each listed on the module's page).

    mutmut's rules (3.8, ``mutmut.mutation.pragma_handling``), reproduced here without importing it (CI does not
    install it): a pragma ending a line inside brackets covers that line; one ending a statement covers the
    statement's *first* line; a comment line ``# pragma: no mutate block`` covers the statements after it in the
    same block."""
    lines = module_path(name).read_text().splitlines()
    tree = ast.parse("\n".join(lines))
    marked = set()
    ends = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and not hasattr(node, "body"):
            ends[node.end_lineno] = node.lineno
    for i, line in enumerate(lines, 1):
        code, hash_, comment = line.partition("#")
        if "pragma: no mutate" not in hash_ + comment or not code.strip():
            continue
        marked.add(ends.get(i, i))          # a statement's trailing pragma covers its first line
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if not isinstance(body, list) or not body or not isinstance(body[0], ast.stmt):
                continue
            prev_end = body[0].lineno - 1
            for k, stmt in enumerate(body):
                gap = lines[prev_end:stmt.lineno - 1] if k else lines[max(0, stmt.lineno - 2):stmt.lineno - 1]
                if any(g.strip().startswith("#") and "pragma: no mutate block" in g for g in gap):
                    for later in body[k:]:
                        marked.update(range(later.lineno, later.end_lineno + 1))
                    break
                prev_end = stmt.end_lineno
    return [(i, lines[i - 1].strip()) for i in sorted(marked) if not lines[i - 1].strip().startswith("#")]


def mutation_score(counts: dict) -> float:
    """(killed + timeout) / (killed + survived + timeout + no tests): a mutant that no selected test reaches is a
    change nobody notices, counted against the score like a survivor; NaN when no mutant was decided."""
    scored = counts["killed"] + counts["survived"] + counts["timeout"] + counts["no tests"]
    return (counts["killed"] + counts["timeout"]) / scored if scored else float("nan")


def _row_score(row: dict) -> float:
    """A summary row's score from its counts (the CSV's score column is rounded to 3 digits: 0.9146 is stored as
    0.915, which would print as 92% beside a run that printed 91%); the stored score where a count is missing."""
    try:
        return mutation_score({k: int(row[k]) for k in ("killed", "survived", "timeout", "no tests")})
    except (KeyError, TypeError, ValueError):
        return float(row["score"])


#: the last digits of the mutant numbers ``--sample K`` tests: the first K (spread over 0-9; mutmut numbers a function's
#: mutants from 1, so every function's first mutant is in every sample)
SAMPLE_DIGITS = "1627384950"


def sample_patterns(name: str, k: Optional[int]) -> list:
    """mutmut's name patterns of the mutants of module ``name`` that ``--sample k`` tests (all of them: [])."""
    if k is None:
        return []
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 9:
        raise SystemExit(f"error: --sample must be a whole number from 1 to 9 (tenths of the mutants); got {k!r}")
    return [f"{qualified(name)}.*__mutmut_*{d}" for d in SAMPLE_DIGITS[:k]]


#: a timed-out mutant's tests are rerun in a fresh process for at most this long plus ``RECHECK_FACTOR`` times their
#: measured duration
RECHECK_SECONDS, RECHECK_FACTOR = 60, 4


def recheck_timeouts(ws: Path, env: dict, mutants: list, jobs: int, run=None) -> dict:
    """Each mutant mutmut reported as a timeout, rerun outside its fork server: ``{mutant: "killed" | "survived" |
    "timeout"}``.

    mutmut runs a mutant's tests in a child forked from a warmed-up pytest process and calls a child that has not
    finished within half its CPU limit a timeout, which it scores as a kill. Some children hang although every test
    passes (a forked process that starts a Dask cluster, for one): checked by hand on blocks.py, such "timeouts"
    were mutants whose tests all pass. So each one is run again here in a fresh interpreter (``MUTANT_UNDER_TEST``
    selects it in mutmut's trampoline; the tests mutmut recorded as calling the mutated function, with ``-x``), and
    classified by the exit code: 0 survived, a failed test (or a crash) killed, and still running after
    :data:`RECHECK_SECONDS` + :data:`RECHECK_FACTOR` x the tests' measured time, a real timeout."""
    if not mutants:
        return {}
    stats = json.loads((ws / "mutants" / "mutmut-stats.json").read_text())
    by_function, durations = stats["tests_by_mangled_function_name"], stats["duration_by_test"]

    def default_run(mutant: str) -> str:
        tests = sorted(by_function.get(mutant.rsplit("__mutmut_", 1)[0], ()))
        if not tests:
            return "timeout"
        limit = RECHECK_SECONDS + RECHECK_FACTOR * sum(durations.get(t, 0.0) for t in tests)
        proc = subprocess.Popen([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                                 "-p", "no:randomly", *tests], cwd=ws / "mutants",
                                env=dict(env, MUTANT_UNDER_TEST=mutant), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            code = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            return "timeout"
        return "survived" if code == 0 else "killed"

    run = run or default_run
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        return dict(zip(mutants, pool.map(run, mutants)))


def mutation_env(ws: Path) -> dict:
    """The environment of mutmut and of the rechecks. mutmut forks each mutant's test run from a process that has run
    the tests once, and a thread pool started before a fork is dead in the child: one BLAS / OpenMP thread (an
    OpenMP pool hangs the child), and Dask's synchronous scheduler (a forked child that computes on the threaded
    scheduler's pool waits forever: every mutant whose tests fit a Dask bank "timed out"). ``OMP_THREAD_LIMIT=1``
    as well: a test that asks torch for several threads (``torch.set_num_threads(3)``) has the parent start an OpenMP
    pool, and a forked child that asks again spins forever in that dead pool; with the limit the pool never grows
    past the calling thread, while ``torch.get_num_threads()`` still reports the number asked for."""
    env = dict(os.environ, PYTHONPATH=str(ws / "mutants"), HUBNORM_PROGRESS="0", MPLBACKEND="Agg",
               HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", OMP_THREAD_LIMIT="1", MKL_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1", DASK_SCHEDULER="synchronous")
    shared = REPO.parent / "shared" / "data"
    if "HUBNORM_SHARED_DATA" not in env and shared.is_dir():
        env["HUBNORM_SHARED_DATA"] = str(shared)
    return env


def run_module(name: str, tests: list, jobs: int, log: Path, sample: Optional[int] = None, *,
               reuse: bool = False) -> dict:
    """Mutate module ``name`` and score it; ``reuse``: do not run mutmut again, read the results a run (stopped or
    not) left in the workspace for this module and recheck its timeouts (``--recheck``)."""
    if reuse:
        ws = WORK
        cfg = ws / "setup.cfg"
        target = package_file(name)
        if not cfg.is_file() or f"source_paths =\n    {target}\n" not in cfg.read_text():
            raise SystemExit(f"error: --recheck {name}: the workspace {WORK} holds no mutmut run of {name}")
    else:
        ws = workspace(name, tests, jobs)
    env = mutation_env(ws)
    mutmut = Path(sys.executable).with_name("mutmut")
    t0 = time.perf_counter()
    if reuse:
        proc = subprocess.CompletedProcess([], 0)
    else:
        with open(log, "w") as fh:
            proc = subprocess.run([str(mutmut), "run", "--max-children", str(jobs), *sample_patterns(name, sample)],
                                  cwd=ws, env=env, stdout=fh, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - t0
    res = subprocess.run([str(mutmut), "results", "--all", "true"], cwd=ws, env=env, capture_output=True, text=True)
    counts = dict.fromkeys(STATUSES, 0)
    survivors, timeouts = [], []
    for line in res.stdout.splitlines():
        mutant, _, status = line.strip().rpartition(": ")
        if status in counts:
            counts[status] += 1
            if status == "survived":
                survivors.append(mutant)
            elif status == "timeout":
                timeouts.append(mutant)
    total = sum(counts.values())
    if proc.returncode and not total - counts["not checked"]:   # e.g. the tests failed before any mutant ran
        raise SystemExit(f"error: mutmut failed on {name} (exit {proc.returncode}); its output: {log}")
    rechecked = recheck_timeouts(ws, env, timeouts, jobs)
    for m, status in rechecked.items():
        counts["timeout"] -= 1
        counts[status] += 1
        if status == "survived":
            survivors.append(m)
    def show(m: str) -> str:
        return subprocess.run([str(mutmut), "show", m], cwd=ws, env=env, capture_output=True, text=True).stdout

    with ThreadPoolExecutor(max(1, jobs)) as pool:   # one mutmut process per survivor: ~1 s each
        diffs = dict(zip(survivors, pool.map(show, survivors)))
    tested = total - counts["not checked"]
    sample_text = "all" if sample is None else f"{tested} of {total} ({sample} in 10)"
    if proc.returncode:   # mutmut stopped early: the untested mutants are "not checked" like a sample's others
        print(f"warning: mutmut exited {proc.returncode} on {name} after testing {tested} of {total} mutants; its "
              f"output: {log}", file=sys.stderr)
        sample_text = f"{tested} of {total} (mutmut stopped: exit {proc.returncode})"
    summary = Counter(rechecked.values())
    skipped = excluded_lines(name)
    recheck_text = (f"{len(rechecked)} rerun: {summary['survived']} survived, {summary['killed']} killed, "
                    f"{summary['timeout']} timed out again") if rechecked else "none"
    return {"module": name, "tests": len(tests), "test files": list(tests), "mutants": total, **counts,
            "sample": sample_text, "timeouts rechecked": recheck_text,
            "score": mutation_score(counts), "excluded": skipped, "lines not mutated": len(skipped),
            "seconds": round(seconds, 1), "survivors": diffs}


COLUMNS = ["module", "tests", "mutants", "sample", "killed", "survived", "timeout", "no tests", "suspicious", "score",
           "timeouts rechecked", "lines not mutated", "seconds", "date", "test files"]


def write_report(rows: list, folder: Path, argv: list) -> None:
    """``<folder>/summary.csv`` and ``summary.md``: one row per module, this run's rows replacing a module's earlier
    row (modules are mutated one run at a time, over days); ``<folder>/<module>.md``: that module's survivors, each
    with its diff and the command that reproduces the row."""
    from hubnorm.data.cache import atomic_write_bytes

    def write(path: Path, text: str) -> None:
        atomic_write_bytes(path, text.encode("utf-8"))

    folder.mkdir(parents=True, exist_ok=True)
    old = {}
    if (folder / "summary.csv").is_file():
        with open(folder / "summary.csv", newline="") as fh:
            old = {r["module"]: r for r in csv.DictReader(fh)}
    today = time.strftime("%Y-%m-%d")
    for r in rows:
        old[r["module"]] = {**{c: r.get(c, "") for c in COLUMNS}, "score": f"{r['score']:.3f}",
                            "date": r.get("date", today), "test files": " ".join(r.get("test files", []))}
    merged = [old[m] for m in sorted(old)]
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, COLUMNS, extrasaction="ignore")
    w.writeheader()
    w.writerows(merged)
    write(folder / "summary.csv", buf.getvalue())   # read back and merged by the next run: whole or not at all
    shown = [c for c in COLUMNS if c != "test files"]
    lines = ["# Mutation score per module (mutmut)", "",
             "Written by `scripts/mutation.py` (see its docstring); each module's row is from its last run, on the "
             "date shown, with the tests its own page names. score = (killed + timeout) / (killed + survived + "
             "timeout + no tests): a survivor is a one-line change no test noticed (listed with its diff on the "
             "module's page), and a mutant in code no selected test reaches counts as one. mutmut's timeouts are "
             "rerun in a fresh process (`recheck_timeouts`): a forked test run can hang although every test passes, "
             "so an unchecked timeout may be a survivor; rows whose timeouts were \"not rechecked\" predate that. "
             "\"lines not mutated\": lines marked `# pragma: no mutate` (code no result depends on, such as Dask "
             "graph metadata), listed on the module's page.",
             "", "| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    for r in merged:
        cells = [f"{_row_score(r):.0%}" if c == "score" else str(r.get(c, "")) for c in shown]
        cells[shown.index("sample")] = cells[shown.index("sample")] or "all"   # rows of runs before --sample
        i = shown.index("timeouts rechecked")
        cells[i] = cells[i] or ("not rechecked" if int(r.get("timeout") or 0) else "none")
        i = shown.index("lines not mutated")
        cells[i] = cells[i] or "0"
        cells[0] = f"[{r['module']}]({r['module']}.md)"
        lines.append("| " + " | ".join(cells) + " |")
    write(folder / "summary.md", "\n".join(lines) + "\n")
    for r in rows:
        page = [f"# Mutation testing of `{qualified(r['module'])}`", "",
                f"Command: `.venv/bin/python scripts/mutation.py {' '.join(argv)}`; {old[r['module']]['date']}.",
                "", f"Tests run: {', '.join(f'`{t}`' for t in r.get('test files', []))}.", "",
                f"{r['mutants']} mutants (tested: {r.get('sample', 'all')}): {r['killed']} killed, {r['survived']} "
                f"survived, {r['timeout']} timeouts, {r['no tests']} reached by no test; score {r['score']:.0%}.", "",
                f"Timeouts rechecked in a fresh process (see `recheck_timeouts`): {r.get('timeouts rechecked') or 'not done (a run before the recheck existed)'}.", ""]
        skipped = r.get("excluded") or []
        if skipped:
            page += [f"Lines marked `# pragma: no mutate` (no mutant is made on them; code no result depends on): "
                     f"{len(skipped)}.", ""] + [f"- line {i}: `{text}`" for i, text in skipped] + [""]
        if r["survivors"]:
            page += ["## Survivors", ""]
            for diff in r["survivors"].values():
                page += ["```diff", diff.strip(), "```", ""]
        write(folder / f"{r['module']}.md", "\n".join(page) + "\n")


def module_command(name: str, args) -> list:
    """The arguments of ``scripts/mutation.py`` that measure module ``name`` alone as this run did."""
    out = [name]
    if args.tests:
        out += ["--tests", *args.tests]
    if args.sample is not None:
        out += ["--sample", str(args.sample)]
    return out + ["--report", str(args.report)]


def test_file(name: str) -> str:
    """A ``--tests`` entry as the path mutmut is given: ``tests/test_x.py``, ``test_x.py`` and ``test_x`` all name
    ``tests/test_x.py``; a file that does not exist stops the run with its name."""
    stem = Path(name).name
    stem = stem if stem.endswith(".py") else stem + ".py"
    if not (REPO / "tests" / stem).is_file():
        raise SystemExit(f"error: --tests {name}: no test file tests/{stem}; name files under tests/ "
                         "(e.g. --tests test_hubness or tests/test_hubness.py)")
    return f"tests/{stem}"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description="Mutation testing of hubnorm modules with mutmut (see the docstring).")
    p.add_argument("modules", nargs="*", help="modules under lib/hubnorm (hubness, cli, normalizers.nnn, ...) or of "
                                              "the companion (hubnorm_companion.protocol, ...)")
    p.add_argument("--changed", nargs="?", const="", default=None, metavar="BASE",
                   help="the library and companion modules changed since BASE (default origin/main, else "
                        "HEAD~1)")
    p.add_argument("--tests", nargs="+", help="test files to run instead of the ones that name the module")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="mutants tested at once (default: cores)")
    p.add_argument("--report", type=Path, help="a folder: update <REPORT>/summary.md/.csv and write <module>.md")
    p.add_argument("--min-score", type=float, default=None, help="exit 1 when a module scores below this (0-1)")
    p.add_argument("--recheck", action="store_true",
                   help="score the run a stopped scripts/mutation.py left in the workspace (.mutation/) for the one "
                        "module named, without running mutmut again, rechecking its timeouts (a run that ends removes "
                        "the workspace)")
    p.add_argument("--sample", type=int, default=None, metavar="K", choices=range(1, 10),
                   help="test about K in 10 of the mutants (1-9; the same ones every run): for heavy modules")
    args = p.parse_args(argv)
    if args.tests:
        args.tests = [test_file(t) for t in args.tests]
    if shutil.which("mutmut", path=str(Path(sys.executable).parent)) is None:
        print("error: mutmut is not installed in this environment: .venv/bin/pip install mutmut==3.8.1",
              file=sys.stderr)
        return 2
    names = list(args.modules)
    if args.changed is not None:
        names += changed_modules(args.changed or None)
    if args.recheck and len(names) != 1:
        raise SystemExit("error: --recheck scores the one module whose run is in the workspace: name exactly one")
    if not names:
        print("nothing to mutate: name modules, or --changed found no changed library or companion module")
        return 0
    rows = []
    for name in dict.fromkeys(names):
        module_path(name)
        tests = args.tests or tests_for(name)
        if not tests:
            print(f"{name}: no test file names it: every mutant would survive; name tests with --tests")
            continue
        log = REPO / ".mutation.log"
        print(f"{name}: mutating with {len(tests)} test files ({', '.join(t[6:] for t in tests[:6])}"
              f"{', ...' if len(tests) > 6 else ''}) ...", flush=True)
        r = run_module(name, tests, args.jobs, log, args.sample, reuse=args.recheck)
        rows.append(r)
        print(f"{name}: {r['mutants']} mutants (tested: {r['sample']}), {r['killed']} killed, {r['survived']} survived, {r['timeout']} timeouts, "
              f"{r['no tests']} not reached by a test: score {r['score']:.0%} ({r['seconds']:.0f} s)", flush=True)
        for diff in r["survivors"].values():
            print("  " + "\n  ".join(diff.strip().splitlines()[:12]))
        if args.report:   # each module's row as soon as it is measured (a long run stopped later keeps it)
            write_report([r], args.report, module_command(name, args))
            print(f"updated {args.report / 'summary.md'} and .csv", flush=True)
    if WORK.exists():
        shutil.rmtree(WORK)
    if args.min_score is not None and any(r["score"] < args.min_score for r in rows):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
