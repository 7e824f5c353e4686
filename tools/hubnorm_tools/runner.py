"""The runner behind ``bash run_all.sh``: execute ``notebooks/[0-9][0-9]_*.ipynb`` with papermill for a run profile.

``run_all.sh`` prints its help, runs ``scripts/bootstrap.sh`` and then ``exec``\\ s
``python -m hubnorm_tools.runner --root <checkout> --caller-dir <where it was called> <its arguments>``; the
flags, the help text and the terminal output are run_all.sh's (see its header). The profiles, their parameters,
results folders and preparations, and what each notebook needs, are data (``profiles.yaml`` beside this module,
checked by :mod:`hubnorm_tools.profiles`): this module knows no profile and no notebook by name. It is tooling of
the checkout (``tools/``), not part of the hubnorm package.

Two options for tests, not in run_all.sh's help: ``--max-notebooks N`` runs at most the first ``N`` selected
notebooks (the ones ``--only`` keeps, skipped ones not counted), and ``$HUBNORM_REHEARSAL_SCALE`` (a number in
(0, 1]) writes and reads the rehearsal caches at that fraction of the Karpathy sizes (``python -m hubnorm.data
rehearse --scale``).

A single notebook still runs without the runner: ``papermill notebooks/03_k_ablation.ipynb out.ipynb -p ...``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import List, Optional, Sequence

from .profiles import Profiles, load_profiles, offered_by_text

#: The one known line of noise, dropped from the terminal and the logs: ipykernel's "Kernel is running over TCP
#: without encryption" notice (once per notebook; the kernel listens on localhost only). Every other line passes.
TCP_NOTICE = b"Kernel is running over TCP without encryption"
#: papermill's own lines, not shown on the terminal (they stay in the log)
_PAPERMILL_LINES = re.compile(rb"^(Input Notebook|Output Notebook|Executing notebook|Working directory|Black is not|"
                              rb"Executing Cell|Ending Cell)")
#: The text form of an inline figure (its image is in the executed notebook): not a result, never on the terminal.
_FIGURE_REPR = re.compile(rb"^<Figure size [0-9.]+x[0-9.]+ with [0-9]+ Axes>$")
#: The kernel's own log line when papermill interrupts it while shutting it down after the last cell (the notebook
#: has succeeded; a failure is reported by papermill itself): kept in the log, never on the terminal.
_KERNEL_SHUTDOWN = re.compile(rb"^\[IPKernelApp\] ERROR \| KeyboardInterrupt caught in kernel\.?$")
_ERROR_LINES = re.compile(r"^[A-Za-z]*(Error|Exception)|PapermillExecutionError")


def _say(msg: str, *, err: bool = False) -> None:
    stream = sys.stderr if err else sys.stdout
    stream.write(msg + "\n")
    stream.flush()


class Usage(Exception):
    """A command-line error: printed as ``run_all.sh: <message>``, exit status 2."""


def parse_args(argv: Sequence[str], caller_dir: str) -> dict:
    """run_all.sh's flags (same spellings, same errors)."""
    opts = {"profile": "default", "keep_going": False, "only": "", "quiet": False, "site": False, "source": "",
            "user_params": [], "results": os.environ.get("HUBNORM_RESULTS", ""), "max_notebooks": None}
    argv = list(argv)
    i = 0

    def value(flag: str, what: str) -> str:
        nonlocal i
        if i + 1 >= len(argv) or argv[i + 1] == "":
            raise Usage(f"{flag} needs {what}")
        i += 2
        return argv[i - 1]

    while i < len(argv):
        a = argv[i]
        name, eq, inline = a.partition("=")
        if a == "--keep-going":
            opts["keep_going"] = True; i += 1
        elif a == "--quiet":
            opts["quiet"] = True; i += 1
        elif a == "--site":
            opts["site"] = True; i += 1
        elif name in ("--profile", "--only", "--source", "--results", "--max-notebooks") and eq:
            key = name[2:].replace("-", "_")
            opts[key] = inline; i += 1
        elif a in ("--profile", "--only", "--source", "--results", "--max-notebooks"):
            what = {"--profile": "a value", "--only": "a value", "--source": "a value", "--results": "a folder",
                    "--max-notebooks": "a number"}[a]
            opts[a[2:].replace("-", "_")] = value(a, what)
        elif name == "--param" and eq:
            opts["user_params"] += ["--param", inline]; i += 1
        elif a == "--param":
            opts["user_params"] += ["--param", value(a, "NAME=VALUE")]
        elif name == "--params":
            f = inline if eq else value(a, "a file")
            if eq:
                i += 1
            opts["user_params"] += ["--params", f if f.startswith("/") else os.path.join(caller_dir, f)]
        else:
            raise Usage(f"unknown argument {a} (see --help)")
    if opts["max_notebooks"] is not None:
        try:
            opts["max_notebooks"] = int(opts["max_notebooks"])
            assert opts["max_notebooks"] >= 1
        except (ValueError, AssertionError):
            raise Usage(f"--max-notebooks needs a positive number; got {opts['max_notebooks']!r}") from None
    return opts


def own_source_slug(source: str) -> str:
    """The results folder name of a ``--source`` run: ``own-<slug>`` (``local:/a/my folder`` -> ``local-my-folder``)."""
    slug = re.sub(r"^(local|sims):.*/([^/]+)/*$", r"\1:\2", source)
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", slug)
    return re.sub(r"-+$", "", slug)


#: the file of a --source run's results folder that names its source (two sources may share a folder name)
SOURCE_FILE = "SOURCE.txt"


def own_results_folder(results_root: Path, own: str) -> Path:
    """``results_root/own-<slug>``, unless that folder holds the results of another source of the same name
    (``local:/a/data`` and ``local:/b/data``): then ``own-<slug>-<8 hex of the source>``, so that neither run
    replaces the other's outputs."""
    folder = results_root / f"own-{own_source_slug(own)}"
    marker = folder / SOURCE_FILE
    if folder.is_dir() and marker.is_file() and marker.read_text().strip() != own:
        tagged = folder.with_name(f"{folder.name}-{hashlib.sha256(own.encode()).hexdigest()[:8]}")
        _say(f"run_all.sh: {folder} holds the results of {marker.read_text().strip()}; this run of {own} writes to "
             f"{tagged}")
        return tagged
    return folder


def lock_path(results: Path) -> Path:
    return results.parent / f".{results.name}.lock"


def lock_results(results: Path):
    """An exclusive lock on ``results`` for this run (a file beside it, held until the process exits: the kernel
    releases it when the runner dies, also by ``kill -9``); None when another run holds it."""
    import fcntl

    path = lock_path(results)
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(path, "a+")
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        return None
    fh.seek(0)
    fh.truncate()
    fh.write(f"{os.getpid()}\n")
    fh.flush()
    return fh


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """In papermill's process: receive SIGTERM when the runner dies (Linux ``PR_SET_PDEATHSIG``), so that a
    ``kill -9`` of run_all.sh leaves no papermill writing into the results as an orphan (its kernel follows: an
    IPython kernel exits when its parent process is gone)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)   # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _rehearsal_tag() -> tuple:
    from hubnorm.data.rehearse import pretrained_tag

    raw = os.environ.get("HUBNORM_REHEARSAL_SCALE", "")
    if not raw:
        return 1.0, pretrained_tag(0)
    try:
        scale = float(raw)
        assert 0 < scale <= 1
    except (ValueError, AssertionError):
        raise Usage(f"HUBNORM_REHEARSAL_SCALE must be a number in (0, 1]; got {raw!r}") from None
    return scale, pretrained_tag(0, scale)


def _fill(value, **fields):
    if isinstance(value, str):
        for k, v in fields.items():
            value = value.replace("{" + k + "}", str(v))
        return value
    if isinstance(value, list):
        return [_fill(v, **fields) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, **fields) for k, v in value.items()}
    return value


#: TeX commands of the notebooks' "In this run" lines, as the terminal shows them (the notebook renders the TeX)
_TEX_SYMBOLS = {"alpha": "α", "beta": "β", "gamma": "γ", "tau": "τ", "lambda": "λ", "mu": "μ", "sigma": "σ",
                "pi": "π", "times": "×", "cdot": "·", "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥", "pm": "±",
                "to": "→", "rightarrow": "→", "approx": "≈", "infty": "∞", "ldots": "…", "dots": "…", "in": "∈",
                "ne": "≠", "neq": "≠", "sum": "Σ", "hbar": "ħ", "ast": "*", "%": "%"}


def plain_tex(text: str) -> str:
    """``text`` with every inline ``$...$`` written as plain text for a terminal: ``$N_{10}$`` -> ``N_10``,
    ``$\\alpha$ = 1`` -> ``α = 1``, ``\\mathrm{R@1}`` -> ``R@1``; text without math is returned as it is."""
    if "$" not in text:
        return text

    def plain(m):
        t = re.sub(r"\\(?:mathrm|text|textrm|textit|mathbf|mathit|operatorname)\{([^{}]*)\}", r"\1", m.group(1))
        t = re.sub(r"\\([A-Za-z]+|%)", lambda c: _TEX_SYMBOLS.get(c.group(1), c.group(1)), t)
        t = re.sub(r"\\[,;:! ]", " ", t)
        t = re.sub(r"([_^])\{([^{}]*)\}", r"\1\2", t)
        return t.replace("{", "").replace("}", "")

    return re.sub(r"\$([^$\n]+)\$", plain, text)


class _Streamer:
    """Copy a child's output to its log and (unless quiet) to the terminal, prefixed ``  NN| ``."""

    def __init__(self, proc, log_path: Path, prefix: str, show: bool, skip: Sequence[bytes] = ()):
        self.proc, self.log_path, self.prefix, self.show, self.skip = proc, log_path, prefix, show, tuple(skip)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        with open(self.log_path, "wb") as log:
            for line in iter(self.proc.stdout.readline, b""):
                if TCP_NOTICE in line:
                    continue
                log.write(line)
                log.flush()
                if self.show:
                    for part in line.rstrip(b"\n").split(b"\r"):
                        if (_PAPERMILL_LINES.match(part) or _FIGURE_REPR.match(part) or _KERNEL_SHUTDOWN.match(part)
                                or part.startswith(self.skip)):
                            continue
                        sys.stdout.write(self.prefix + plain_tex(part.decode("utf-8", "replace")) + "\n")
                    sys.stdout.flush()

    def join(self):
        self.thread.join()


def _tail_progress(path: Path, prefix: str, done: threading.Event):
    """Stream the notebook's progress side file until the notebook has ended and the file is read."""
    pos, buf = 0, b""
    while True:
        finished = done.is_set()
        try:
            with open(path, "rb") as fh:
                fh.seek(pos)
                chunk = fh.read()
        except OSError:
            chunk = b""
        pos += len(chunk)
        buf += chunk
        *lines, buf = buf.replace(b"\r", b"\n").split(b"\n")
        for line in lines:
            if line.strip():
                sys.stdout.write(prefix + line.decode("utf-8", "replace") + "\n")
        if lines:
            sys.stdout.flush()
        if finished:
            if buf.strip():
                sys.stdout.write(prefix + buf.decode("utf-8", "replace") + "\n")
                sys.stdout.flush()
            return
        done.wait(0.5)


def _script(root: Path, name: str):
    """The module ``scripts/<name>.py`` of the checkout ``root``, loaded in this process: run_all.sh's helpers
    (parameters, progress-line stripping) then cost no interpreter start and no papermill / nbformat import per
    notebook."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_hubnorm_run_all_{name}", root / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Runner:
    def __init__(self, root: Path, caller_dir: Path, opts: dict, profiles: Profiles):
        self.root, self.caller_dir, self.opts, self.p = root, caller_dir, opts, profiles
        self.python = sys.executable
        self._scripts = {}
        self.argv: List[str] = []   # the command line, for the results folder's manifest

    def _helper(self, name: str):
        if name not in self._scripts:
            self._scripts[name] = _script(self.root, name)
        return self._scripts[name]

    # ------------------------------------------------------------------------------------------ set-up
    def _results_root(self) -> Path:
        r = self.opts["results"]
        if not r:
            return self.root / "results"
        return Path(r) if r.startswith("/") else self.caller_dir / r

    def _notebook_params_merge(self, params: dict) -> dict:
        try:
            return self._helper("notebook_params").merged_params(params, self.opts["user_params"], str(self.root))
        except SystemExit as exc:   # the helper's error message (as its command line prints it)
            _say(str(exc.code), err=True)
            raise SystemExit(2) from None

    def run(self) -> int:
        o, p = self.opts, self.p
        profile_name, own = o["profile"], o["source"]
        results_root = self._results_root()
        os.environ["HF_HUB_OFFLINE"] = os.environ.get("HF_HUB_OFFLINE", "1")
        os.environ["TRANSFORMERS_OFFLINE"] = os.environ.get("TRANSFORMERS_OFFLINE", "1")
        os.environ["PYTHONHASHSEED"] = "0"
        if profile_name not in p.profiles:
            _say(f"run_all.sh: unknown profile '{profile_name}' ({', '.join(sorted(p.profiles))})", err=True)
            return 2
        profile = p.profiles[profile_name]
        if own and profile_name != "default":
            _say(f"run_all.sh: --source runs the default profile on your data; it cannot be combined with "
                 f"--profile {profile_name}", err=True)
            return 2
        scale, tag = _rehearsal_tag()
        for ds in profile.rehearse:   # the rehearsal caches of these datasets, written once
            _say(f"run_all.sh: rehearsal cache for {ds} (written once; 'python -m hubnorm.data rehearse --dataset "
                 f"{ds} --force' rewrites it)")
            extra = [] if scale == 1.0 else ["--scale", repr(scale)]
            if subprocess.run([self.python, "-m", "hubnorm.data", "rehearse", "--dataset", ds, *extra],
                              cwd=self.root).returncode != 0:
                _say("run_all.sh: rehearse failed", err=True)
                return 1
        params = _fill(profile.parameters, rehearsal_tag=tag)
        results = results_root / profile.results if profile.results else results_root
        if own:
            for kind in ("local:", "sims:"):   # a relative folder is relative to where run_all.sh was called from
                if own.startswith(kind) and not own[len(kind):].startswith("/"):
                    own = f"{kind}{self.caller_dir}/{own[len(kind):]}"
            params = {"source": own, "cross_source": None}
            results = own_results_folder(results_root, own)
            os.environ["HUBNORM_FORBID_SYNTHETIC"] = "1"
        if o["user_params"]:   # --param / --params override the profile's parameters
            before = dict(params)
            params = self._notebook_params_merge(params)
            changed = {k: v for k, v in params.items() if k not in before or before[k] != v}
            if own:
                changed.pop("source", None)
            if changed:   # a folder of its own, named by what changed: never mixed into the default run's
                from hubnorm_companion.reporting import run_folder_name

                name = run_folder_name(changed)
                results = (results.with_name(f"{results.name}+{name}") if own
                           else results / f"params-{name}")
        else:
            changed = {}
        notebooks = sorted((self.root / "notebooks").glob("[0-9][0-9]_*.ipynb"))
        selected = [nb for nb in notebooks if not o["only"] or o["only"] in nb.stem]
        if o["only"] and not selected:   # before the results folder is locked or its manifest written
            _say(f"run_all.sh: no notebook matches --only {o['only']} (the notebooks: "
                 f"{', '.join(nb.stem for nb in notebooks)})", err=True)
            return 2
        offers = set(p.offers(profile_name, own or None))
        runnable = [nb for nb in selected if set(p.notebook(nb.stem).needs) <= offers]
        if o["max_notebooks"] is not None:   # tests: the first N notebooks that run
            runnable = runnable[:o["max_notebooks"]]
        bad = self._check_params(runnable, params)   # every notebook's values, before the first one runs
        if bad:
            _say("run_all.sh: bad parameters (nothing was run):\n" + bad, err=True)
            return 2
        if results.exists() and not results.is_dir():
            _say(f"run_all.sh: --results {results} is a file, not a folder: pass a folder (it is created if "
                 "missing)", err=True)
            return 2
        self._lock = lock_results(results)   # before anything in the folder is cleared or written
        if self._lock is None:
            _say(f"run_all.sh: another run_all.sh is writing to {results} (its lock {lock_path(results)} is held): "
                 "wait for it to finish, or pass --results <another folder>", err=True)
            return 2
        if own and results.is_dir():   # a --source run's folder holds this run's files only
            _say(f"run_all.sh: clearing {results} (the outputs of an earlier run on this source)")
            shutil.rmtree(results)
        results.mkdir(parents=True, exist_ok=True)
        if own:
            (results / SOURCE_FILE).write_text(own + "\n")
        from hubnorm_companion.reporting import write_manifest

        write_manifest(results, profile=profile_name, source=own or params.get("source", None), parameters=params,
                       changed=changed, only=o["only"] or None, command=["run_all.sh", *self.argv])
        os.environ["HUBNORM_RESULTS"] = str(results)
        self._results = results

        source = params.get("source", "") if isinstance(params, dict) else ""
        for prep_name in profile.prepares:   # data preparation, outside the notebook timings
            users = [nb for nb in runnable if prep_name in p.notebook(nb.stem).uses]
            if not users:
                continue
            prep = p.preparations[prep_name]
            fields = {**{k: v for k, v in params.items() if isinstance(v, (str, int, float))},   # e.g. text_precision
                      "source": source, "notebook": users[0].stem, "python": self.python}
            t0 = time.time()
            _say(f"run_all.sh: {_fill(prep.start, **fields)}")
            if subprocess.run(_fill(list(prep.command), **fields), cwd=self.root).returncode == 0:
                _say(f"run_all.sh: {prep.what} ready in {int(time.time() - t0)}s (not part of the notebook times)")
            else:
                _say(f"run_all.sh: the {prep.what} could not be prepared (above); {users[0].stem} will say why",
                     err=True)

        self.real_noted = False
        if profile_name == "default" and not own and runnable:
            self._fetch_real()

        out = results / "notebooks"
        out.mkdir(parents=True, exist_ok=True)
        start_all = time.time()
        count = f"{len(selected)} notebook{'' if len(selected) == 1 else 's'}"
        _say(f"run_all.sh: profile {profile_name} -> {results}/ ({count}"
             + (f" matching --only {o['only']})" if o["only"] else ")"))
        offered_by = [nb.stem[:2] for nb in notebooks if set(p.notebook(nb.stem).needs) <= offers]
        failed, skipped, ran, statuses = [], 0, 0, []
        for nb in selected:
            name = nb.stem
            missing = [n for n in p.notebook(name).needs if n not in offers]
            if missing:
                why = p.needs[missing[0]].replace("{offered_by}", offered_by_text(offered_by))
                _say(f"{name:<40} {'-':>5}   skipped: {why}")
                statuses.append((name, f"skipped: {why}"))
                skipped += 1
                continue
            if nb not in runnable:   # past --max-notebooks
                break
            ran += 1
            rc, secs, log = self._run_notebook(nb, params, out)
            statuses.append((name, "ok" if rc == 0 else "FAILED"))
            if rc == 0:
                _say(f"{name:<40} {secs:>5}s  ok")
            else:
                _say(f"{name:<40} {secs:>5}s  FAILED (log: {log})")
                try:
                    lines = [ln for ln in log.read_text(errors="replace").splitlines() if _ERROR_LINES.search(ln)]
                except OSError:
                    lines = []
                for ln in lines[-3:]:
                    _say("    " + ln)
                failed.append(name)
                if not o["keep_going"]:
                    break
        _say(f"run_all.sh: total {int(time.time() - start_all)}s")
        if statuses:
            from hubnorm_companion.reporting import write_summary

            summary = write_summary(results, statuses, title=f"run_all.sh (profile {profile_name}"
                                    + (f", source {own}" if own else "") + ")")
            _say(f"run_all.sh: summary of the claims and gains: {summary}")
        if failed:
            _say(f"run_all.sh: FAILED notebook(s): {' '.join(failed)}", err=True)
            return 1
        _say(f"run_all.sh: all notebooks ok ({skipped} skipped); figures in {results}/figures, tables in "
             f"{results}/tables")
        if o["site"]:
            if subprocess.run(["bash", "scripts/build_site.sh", "--notebooks", str(results)],
                              cwd=self.root).returncode != 0:
                _say("run_all.sh: the site build failed", err=True)
                return 1
        return 0

    def _check_params(self, notebooks: Sequence[Path], params: dict) -> str:
        """The problems of ``params`` against the rules of each notebook's parameters cell
        (:func:`hubnorm_companion.parameters.validate`, what the notebook's own set-up checks again), with the
        other parameters at their defaults; "" when there are none. Read from the notebooks' parameters cells, so
        that a bad value stops the run before any notebook computes for minutes (or hours in the paper profiles);
        a notebook without such a cell is left to papermill."""
        import ast

        from hubnorm_companion.parameters import cell_rules, validate

        problems = []
        for nb in notebooks:
            cells = [c for c in json.loads(nb.read_text(encoding="utf-8")).get("cells", [])
                     if "parameters" in c.get("metadata", {}).get("tags", [])]
            if not cells:
                continue
            src = cells[0].get("source", "")
            cell = "".join(src) if isinstance(src, list) else src
            try:
                rules = cell_rules(cell)
            except ValueError:
                continue   # a cell without the rules' format (not one of ours): left to papermill
            values = {}
            for name, rule in rules.items():
                try:
                    values[name] = ast.literal_eval(rule.default)
                except (ValueError, SyntaxError):
                    pass   # a default that is an expression: checked by the notebook itself
            values.update({k: v for k, v in params.items() if k in values})
            try:
                validate(nb.stem[:2], cell, values)
            except (TypeError, ValueError) as exc:
                problems += [re.sub(r"\(pass e\.g\. -p (\w+) (.+)\)$", r"(pass e.g. --param \1=\2)",
                                    re.sub(r'\(pass e\.g\. -y "(\w+): (.+)"\)$', r"(pass e.g. --param '\1=\2')", line))
                             for line in str(exc).splitlines()]
        return "\n".join(problems)

    def _fetch_real(self) -> None:
        """The real embedding releases of the notebooks' real column, once per run (``python -m hubnorm.data
        fetch-real --optional``: cached, from ``$HUBNORM_REAL_MIRROR``, or downloaded by pinned commit and sha256).
        One line says which are there; those that are not get ONE NOTE for the whole run (the notebooks' own NOTE
        lines about them are then not repeated in the terminal; their executed copies keep them)."""
        from hubnorm_companion.reporting import REAL_MISSING_NOTE

        t0 = time.time()
        proc = subprocess.run([self.python, "-m", "hubnorm.data", "fetch-real", "--optional", "--no-progress"],
                              cwd=self.root, capture_output=True, text=True)
        lines = proc.stdout.splitlines()
        have = [ln.split(":")[0] for ln in lines if ln and not ln.startswith("NOTE:")]
        missing = [ln.split("release ", 1)[1].split(" ")[0] for ln in lines if ln.startswith("NOTE: real release ")]
        if proc.returncode != 0:
            _say(f"run_all.sh: fetching the real releases failed ({(proc.stderr or proc.stdout).strip()[-300:]}); the "
                 "notebooks show the releases already cached, if any", err=True)
            missing = missing or ["every release"]
        if have:
            _say(f"run_all.sh: real column: {', '.join(have)} ({int(time.time() - t0)}s)")
        if missing:
            _say(f"{REAL_MISSING_NOTE} {', '.join(missing)}: not on this machine and not downloadable now (offline?); "
                 "'python -m hubnorm.data fetch-real' on a machine with internet, or set HUBNORM_REAL_MIRROR to a "
                 "copy. The notebooks run without it.")
            self.real_noted = True

    # ------------------------------------------------------------------------------------------ one notebook
    def _outputs(self, name: str) -> List[Path]:
        """The tables and figures of notebook ``name`` in this run's results (named ``NN_...``)."""
        return [f for sub in ("tables", "figures") for f in sorted((self._results / sub).glob(f"{name[:2]}_*"))
                if f.is_file()]

    def _run_notebook(self, nb: Path, params: dict, out: Path):
        name = nb.stem
        t0 = time.time()
        log = out / f"{name}.log"
        nb_params = "{}"
        if params:   # only the parameters this notebook declares (no "unknown parameter" warnings)
            try:
                nb_params = json.dumps(self._helper("notebook_params").declared_params(str(nb), params))
            except (SystemExit, Exception) as exc:
                _say(f"run_all.sh: bad parameters ({exc})", err=True)
                raise SystemExit(2) from None
        # an earlier run's outputs of this notebook never stand beside this run's (nor reach its summary), even if
        # this run stops before it writes its own
        for stale in [self._results / "claims" / f"{name[:2]}.csv", *self._outputs(name)]:
            stale.unlink(missing_ok=True)
        shutil.rmtree(self._results / "failed" / name, ignore_errors=True)
        _say(f"{name}: running (log: {log})")
        prog = out / f"{name}.progress.log"   # the notebook's progress bars: a side file, never its cell outputs
        prog.write_bytes(b"")
        env = {**os.environ, "HUBNORM_PROGRESS_FILE": str(prog)}
        quiet = self.opts["quiet"]
        cmd = [self.python, "-m", "papermill", "-k", "python3", "--cwd", "notebooks"]
        cmd += ([] if quiet else ["--log-output"]) + ["--no-progress-bar", "-y", nb_params,
                                                       str(nb.relative_to(self.root)), str(out / f"{name}.ipynb")]
        proc = subprocess.Popen(cmd, cwd=self.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
        prefix = f"  {name[:2]}| "
        from hubnorm_companion.reporting import REAL_MISSING_NOTE

        skip = (REAL_MISSING_NOTE.encode(),) if getattr(self, "real_noted", False) else ()
        streamer = _Streamer(proc, log, prefix, show=not quiet, skip=skip)
        done = threading.Event()
        tail = None
        if not quiet:
            tail = threading.Thread(target=_tail_progress, args=(prog, prefix, done), daemon=True)
            tail.start()
        rc = proc.wait()
        streamer.join()
        if rc != 0:   # what it wrote before failing leaves tables/ and figures/: they hold complete notebooks only
            partial = self._outputs(name)
            if partial:
                dest = self._results / "failed" / name
                dest.mkdir(parents=True, exist_ok=True)
                for f in partial:
                    os.replace(f, dest / f.name)
                _say(f"run_all.sh: {name} failed: the {len(partial)} table(s)/figure(s) it wrote first are in {dest} "
                     "(incomplete), not in tables/ or figures/")
        done.set()
        if tail is not None:
            tail.join()
        # a library's own tqdm bar (not hubnorm's) would still land in a cell's stderr: drop such lines from the copy
        executed = out / f"{name}.ipynb"
        if executed.exists():
            strip = self._helper("strip_notebook_metadata")
            try:
                strip.nbformat.write(strip.drop_progress(strip.nbformat.read(str(executed), as_version=4)),
                                     str(executed))
            except Exception as exc:   # the executed copy stays as papermill wrote it
                _say(f"run_all.sh: could not strip progress lines from {executed}: {exc}", err=True)
        return rc, int(time.time() - t0), log


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    root, caller_dir = Path.cwd(), Path.cwd()
    while argv[:1] and argv[0] in ("--root", "--caller-dir"):
        if len(argv) < 2:
            _say(f"runner: {argv[0]} needs a folder", err=True)
            return 2
        if argv[0] == "--root":
            root = Path(argv[1]).resolve()
        else:
            caller_dir = Path(argv[1])
        argv = argv[2:]
    try:
        opts = parse_args(argv, str(caller_dir))
        profiles = load_profiles()
        runner = Runner(root, caller_dir, opts, profiles)
        runner.argv = list(argv)
        return runner.run()
    except Usage as exc:
        _say(f"run_all.sh: {exc}", err=True)
        return 2
    except ValueError as exc:   # the profiles file
        _say(f"run_all.sh: {exc}", err=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
