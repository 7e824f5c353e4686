"""``hubnorm_tools.runner`` (run_all.sh's notebook runner) in small pieces, without running a notebook
(``tests/test_runner_safety.py``, ``tests/test_run_profiles.py`` and ``tests/test_site.py`` run real ones through
papermill and run_all.sh): the flags and their errors, the ``--source`` folder names and locks, the rehearsal scale,
parameter filling, the terminal form of TeX, the streamed and tailed output of a notebook, and :meth:`Runner.run`,
:meth:`Runner._fetch_real` and :meth:`Runner._run_notebook` with fakes for every process they start (``subprocess``
and ``time`` of the module replaced by recorders, the notebook step by a recorder), on a small profiles table built
here (:class:`~hubnorm_tools.profiles.Profiles`), so that each line printed, each command and each exit status
is checked against its hand-written form. Every test carries a 15 s ``timeout`` mark: a hang guard for the mutants
that loop forever (``parse_args``' index not moving), not a timing check (each test takes milliseconds).

Survivors judged equivalent (mutation run of this file alone, 35 of 1372 mutants; no test can tell them apart):
- ``parse_args`` / ``Runner._results_root``: ``startswith("/")`` made always false (``and False``, ``"XX/XX"``; 4):
  ``os.path.join(caller_dir, f)`` and ``caller_dir / r`` are the absolute path itself.
- ``_rehearsal_tag``: ``os.environ.get(..., "")`` -> default ``None`` or none (2): only ``if not raw`` reads it.
- ``plain_tex``: the ``_{...}`` / ``^{...}`` regex made unmatchable (1): the brace removal after it gives the same.
- ``decode("utf-8", ...)`` -> ``"UTF-8"`` in ``_Streamer._run`` and ``_tail_progress`` (3): the same codec.
- ``Runner.run``: ``results_root / profile.results if ... or True`` (1): ``results_root / ""`` is ``results_root``.
- ``Runner.run``: ``parents=True`` dropped, ``None`` or ``False`` in ``results.mkdir`` and ``out.mkdir`` (6):
  ``lock_results`` made ``results.parent`` already, and ``out``'s parent is ``results``.
- ``Runner.run``: ``params.get("source", None)`` -> no default (1); ``isinstance(params, dict)`` -> ``or True``, and
  its ``""`` else-branch -> ``"XXXX"`` (2): ``params`` is always a dict there.
- ``Runner.run``: ``ran += 1`` -> ``= 1``, ``-= 1``, ``+= 2`` (3): only ``ran == 0`` reads it.
- ``Runner._fetch_real``: ``split("release ", 1)`` -> no maxsplit or 2, and ``.split(" ")`` -> ``.split(None)`` (3):
  the first word after the first "release " is the same in fetch-real's single-spaced NOTE lines.
- ``Runner._run_notebook``: ``sys.platform.startswith("linux") or True`` (1): the tests run on Linux;
  ``getattr(self, "real_noted", False)`` -> default ``None`` (1): falsy either way; the progress tail thread's
  ``daemon=True`` dropped, ``None`` or ``False`` (3): it is joined before the method returns; ``exist_ok=True`` of the
  failed folder dropped, ``None`` or ``False`` (3): the folder was removed at the notebook's start.
- ``main``: ``argv[:1]`` -> ``argv[:2]`` (1): both are empty exactly when ``argv`` is.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from hubnorm_companion import reporting
from hubnorm_tools import runner as rn
from hubnorm_tools.profiles import NotebookNeeds, Preparation, Profile, Profiles

# a guard against hangs, not a timing check: every test here takes milliseconds (far below the limit even on a loaded
# machine), and a mutant that loops forever (parse_args' index not moving, a stream read that never ends) fails after
# 2 minutes instead of hanging until mutmut's limit
pytestmark = pytest.mark.timeout(120)


class Rec:
    """A stream that records its writes and flushes in order."""

    def __init__(self):
        self.events = []

    def write(self, s):
        self.events.append(("w", s))
        return len(s)

    def flush(self):
        self.events.append(("f",))

    @property
    def text(self):
        return "".join(e[1] for e in self.events if e[0] == "w")


# ---------------------------------------------------------------------------------------------------- _say, flags
def test_say_writes_one_flushed_line_to_stdout_or_stderr(monkeypatch):
    out, err = Rec(), Rec()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    rn._say("hello")
    assert out.events == [("w", "hello\n"), ("f",)] and err.events == []
    rn._say("oops", err=True)
    assert err.events == [("w", "oops\n"), ("f",)] and len(out.events) == 2


def test_parse_args_defaults(monkeypatch):
    monkeypatch.delenv("HUBNORM_RESULTS", raising=False)
    assert rn.parse_args([], "/c") == {"profile": "default", "keep_going": False, "only": "", "quiet": False,
                                       "site": False, "source": "", "user_params": [], "results": "",
                                       "max_notebooks": None}
    monkeypatch.setenv("HUBNORM_RESULTS", "/somewhere")
    assert rn.parse_args([], "/c")["results"] == "/somewhere"


def test_parse_args_every_flag_separate_and_inline(monkeypatch):
    monkeypatch.delenv("HUBNORM_RESULTS", raising=False)
    o = rn.parse_args(["--keep-going", "--quiet", "--site", "--profile", "p1", "--only", "03", "--source", "local:x",
                       "--results", "r", "--max-notebooks", "2", "--param", "a=1", "--params", "rel.yaml",
                       "--params", "/abs.yaml"], "/caller")
    assert o == {"profile": "p1", "keep_going": True, "only": "03", "quiet": True, "site": True, "source": "local:x",
                 "user_params": ["--param", "a=1", "--params", "/caller/rel.yaml", "--params", "/abs.yaml"],
                 "results": "r", "max_notebooks": 2}
    o = rn.parse_args(["--profile=p2", "--only=04", "--source=sims:/s", "--results=/r", "--max-notebooks=1",
                       "--param=b=2", "--params=q.yaml", "--params=/q.yaml", "--quiet"], "/c")
    assert o == {"profile": "p2", "keep_going": False, "only": "04", "quiet": True, "site": False,
                 "source": "sims:/s", "user_params": ["--param", "b=2", "--params", "/c/q.yaml", "--params", "/q.yaml"],
                 "results": "/r", "max_notebooks": 1}
    o = rn.parse_args(["--param=a=1", "--param=b=2", "--param", "c=3"], "/c")
    assert o["user_params"] == ["--param", "a=1", "--param", "b=2", "--param", "c=3"]
    # flags after a valued flag are still read (the index moves past the value)
    o = rn.parse_args(["--only", "05", "--site", "--param", "c=3", "--keep-going"], "/c")
    assert o["only"] == "05" and o["site"] and o["keep_going"] and o["user_params"] == ["--param", "c=3"]


@pytest.mark.parametrize("argv, message", [
    (["--profile"], "--profile needs a value"),
    (["--only"], "--only needs a value"),
    (["--source"], "--source needs a value"),
    (["--results"], "--results needs a folder"),
    (["--max-notebooks"], "--max-notebooks needs a number"),
    (["--param"], "--param needs NAME=VALUE"),
    (["--params"], "--params needs a file"),
    (["--profile", ""], "--profile needs a value"),
    (["--quiet", "--only", "", "--site"], "--only needs a value"),
    (["--bogus"], r"unknown argument --bogus \(see --help\)"),
    (["--keep-going=1"], r"unknown argument --keep-going=1 \(see --help\)"),
    (["--quiet", "x"], r"unknown argument x \(see --help\)"),
    (["--max-notebooks", "0"], r"--max-notebooks needs a positive number; got 0"),   # read, then refused
    (["--max-notebooks=-3"], r"--max-notebooks needs a positive number; got -3"),
    (["--max-notebooks", "two"], r"--max-notebooks needs a positive number; got 'two'"),
])
def test_parse_args_errors_name_the_flag(argv, message):
    with pytest.raises(rn.Usage, match=f"^{message}$"):
        rn.parse_args(argv, "/c")


def test_parse_args_value_at_the_end_and_one_notebook():
    assert rn.parse_args(["--quiet", "--only", "07"], "/c")["only"] == "07"
    assert rn.parse_args(["--max-notebooks", "1"], "/c")["max_notebooks"] == 1


# ---------------------------------------------------------------------------------------------------- folders, locks
@pytest.mark.parametrize("source, slug", [
    ("local:/a/my folder", "local-my-folder"),
    ("sims:/x/y/run1//", "sims-run1"),
    ("local:rel/data", "local-data"),
    ("cache:coco:ViT-B/32", "cache-coco-ViT-B-32"),
    ("synthetic:coco!!", "synthetic-coco"),
    ("local:/a/b.c_d-e", "local-b.c_d-e"),
])
def test_own_source_slug(source, slug):
    assert rn.own_source_slug(source) == slug


def test_own_results_folder_tags_a_folder_of_another_source_and_says_so(tmp_path, capsys):
    plain = tmp_path / "own-local-data"
    assert rn.own_results_folder(tmp_path, "local:/a/data") == plain          # no folder yet
    plain.mkdir()
    assert rn.own_results_folder(tmp_path, "local:/b/data") == plain          # a folder without its marker
    (plain / "SOURCE.txt").write_text("local:/a/data\n")
    assert rn.own_results_folder(tmp_path, "local:/a/data") == plain
    assert capsys.readouterr().out == ""
    tagged = rn.own_results_folder(tmp_path, "local:/b/data")
    digest = hashlib.sha256(b"local:/b/data").hexdigest()[:8]
    assert tagged == tmp_path / f"own-local-data-{digest}"
    assert capsys.readouterr().out == (f"run_all.sh: {plain} holds the results of local:/a/data; this run of "
                                       f"local:/b/data writes to {tagged}\n")
    (plain / "SOURCE.txt").unlink()
    (plain / "SOURCE.txt").mkdir()                                             # not a file: not a marker
    assert rn.own_results_folder(tmp_path, "local:/b/data") == plain


def test_lock_path_and_a_lock_that_records_the_pid(tmp_path):
    results = tmp_path / "deep" / "er" / "res"
    assert rn.lock_path(results) == tmp_path / "deep" / "er" / ".res.lock"
    held = rn.lock_results(results)
    try:
        assert held is not None and not held.closed
        assert (tmp_path / "deep" / "er" / ".res.lock").read_text() == f"{os.getpid()}\n"
        assert rn.lock_results(results) is None
    finally:
        held.close()
    (tmp_path / "deep" / "er" / ".res.lock").write_text("a much longer line than a pid\n")
    again = rn.lock_results(results)                                          # the old text is replaced, not kept
    try:
        assert (tmp_path / "deep" / "er" / ".res.lock").read_text() == f"{os.getpid()}\n"
    finally:
        again.close()


def test_die_with_parent_asks_libc_for_sigterm_and_ignores_a_missing_libc(monkeypatch):
    import ctypes

    calls = []

    class Lib:
        def __init__(self, name, **kw):
            calls.append((name, kw))

        def prctl(self, *args):
            calls.append(args)

    monkeypatch.setattr(ctypes, "CDLL", Lib)
    assert rn._die_with_parent() is None
    assert calls == [("libc.so.6", {"use_errno": True}), (1, signal.SIGTERM)]
    for exc in (OSError, AttributeError):
        def broken(*a, exc=exc, **k):
            raise exc("no libc")
        monkeypatch.setattr(ctypes, "CDLL", broken)
        assert rn._die_with_parent() is None


# ---------------------------------------------------------------------------------------------------- small helpers
def test_rehearsal_tag_reads_the_scale(monkeypatch):
    monkeypatch.delenv("HUBNORM_REHEARSAL_SCALE", raising=False)
    assert rn._rehearsal_tag() == (1.0, "seed0")
    monkeypatch.setenv("HUBNORM_REHEARSAL_SCALE", "")
    assert rn._rehearsal_tag() == (1.0, "seed0")
    monkeypatch.setenv("HUBNORM_REHEARSAL_SCALE", "0.25")
    assert rn._rehearsal_tag() == (0.25, "seed0-scale0.25")
    monkeypatch.setenv("HUBNORM_REHEARSAL_SCALE", "1")
    assert rn._rehearsal_tag() == (1.0, "seed0")
    for bad in ("0", "-0.5", "1.01", "half"):
        monkeypatch.setenv("HUBNORM_REHEARSAL_SCALE", bad)
        with pytest.raises(rn.Usage, match=rf"^HUBNORM_REHEARSAL_SCALE must be a number in \(0, 1\]; got '{bad}'$"):
            rn._rehearsal_tag()


def test_fill_replaces_fields_in_strings_lists_and_mappings():
    assert rn._fill("a {x} b {y} {x}", x=1, y="z") == "a 1 b z 1"
    assert rn._fill(["{x}", 3, {"k": "{x}-{x}", "n": None}], x="v") == ["v", 3, {"k": "v-v", "n": None}]
    assert rn._fill({"a": ["{t}"], "b": 2.5}, t="tag") == {"a": ["tag"], "b": 2.5}
    assert rn._fill("{unknown}", x=1) == "{unknown}"
    assert rn._fill(7, x=1) == 7


@pytest.mark.parametrize("text, plain", [
    ("no math here", "no math here"),
    ("cost is $5 and more", "cost is $5 and more"),
    (r"$N_{10}$ and $\alpha$ = 1", "N_10 and α = 1"),
    (r"$\mathrm{R@1}$, $\text{gain}$, $\operatorname{DBSN}$", "R@1, gain, DBSN"),
    (r"$\textrm{a}\textit{b}\mathbf{c}\mathit{d}$", "abcd"),
    (r"$x^{2} \times y$", "x^2 × y"),
    (r"$a\,b\;c\:d\!e\ f$", "a b c d e f"),
    (r"$\beta \le \gamma \geq 1 \pm 0 \to \infty \ldots$", "β ≤ γ ≥ 1 ± 0 → ∞ …"),
    (r"$50\%$ $\unknowncmd$ $\Omega$", "50% unknowncmd Omega"),
    (r"${a}_{b}$", "a_b"),
    ("$a\nb$", "$a\nb$"),
])
def test_plain_tex(text, plain):
    assert rn.plain_tex(text) == plain


def test_script_loads_a_checkout_script_under_its_own_name(tmp_path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "helper_x.py").write_text("VALUE = 41 + 1\n")
    mod = rn._script(tmp_path, "helper_x")
    assert mod.VALUE == 42 and mod.__name__ == "_hubnorm_run_all_helper_x"


# ---------------------------------------------------------------------------------------------------- the streams
def test_streamer_logs_everything_but_the_tcp_notice_and_shows_the_rest_cleaned(tmp_path, monkeypatch):
    out = Rec()
    monkeypatch.setattr(sys, "stdout", out)
    data = (b"hello $\\alpha$\n"
            b"[I] Kernel is running over TCP without encryption here\n"
            b"Input Notebook: a.ipynb\n"
            b"Output Notebook: b\n"
            b"Executing notebook with kernel\n"
            b"Working directory: x\n"
            b"Black is not installed\n"
            b"Executing Cell 3----\n"
            b"Ending Cell 3----\n"
            b"  Input Notebook: shown\n"
            b"<Figure size 640x480 with 2 Axes>\n"
            b"<Figure size 640x480 with 2 Axes> and text\n"
            b"[IPKernelApp] ERROR | KeyboardInterrupt caught in kernel.\n"
            b"[IPKernelApp] ERROR | KeyboardInterrupt caught in kernel\n"
            b"bar 10%\rbar 100%\n"
            b"Executing Cell 1\rafter a hidden part\n"
            b"trailing spaces  \n"
            b"MAX\n"
            b"NOTE: the real column leaves out x\n"
            b"SKIP this\n"
            b"\xff bad\n"
            b"last")
    log = tmp_path / "nb.log"
    s = rn._Streamer(SimpleNamespace(stdout=io.BytesIO(data)), log, "  03| ", True, skip=[b"SKIP"])
    s.join()
    assert s.thread.daemon
    assert log.read_bytes() == data.replace(b"[I] Kernel is running over TCP without encryption here\n", b"")
    shown = [e[1] for e in out.events if e[0] == "w"]
    assert shown == ["  03| hello α\n", "  03|   Input Notebook: shown\n",
                     "  03| <Figure size 640x480 with 2 Axes> and text\n", "  03| bar 10%\n", "  03| bar 100%\n",
                     "  03| after a hidden part\n", "  03| trailing spaces  \n", "  03| MAX\n",
                     "  03| NOTE: the real column leaves out x\n", "  03| \ufffd bad\n", "  03| last\n"]
    assert out.events[-1] == ("f",)
    # one flush per line read and shown (the TCP notice is neither)
    assert sum(e == ("f",) for e in out.events) == data.count(b"\n")


def test_streamer_quiet_logs_only(tmp_path, monkeypatch):
    out = Rec()
    monkeypatch.setattr(sys, "stdout", out)
    log = tmp_path / "q.log"
    rn._Streamer(SimpleNamespace(stdout=io.BytesIO(b"one\ntwo\n")), log, "> ", False).join()
    assert log.read_bytes() == b"one\ntwo\n" and out.events == []


class ScriptedDone:
    """A ``threading.Event`` stand-in: unset for as many waits as there are steps, each wait running the next."""

    def __init__(self, *steps):
        self.steps, self.k, self.waits = steps, 0, []

    def is_set(self):
        return self.k >= len(self.steps)

    def wait(self, timeout):
        self.waits.append(timeout)
        self.steps[self.k]()
        self.k += 1


def test_tail_progress_streams_appended_lines_and_the_last_partial_one(tmp_path, monkeypatch):
    out = Rec()
    monkeypatch.setattr(sys, "stdout", out)
    prog = tmp_path / "p.log"
    prog.write_bytes(b"a1\rb\xff1\n  \nc1")

    def append(b):
        return lambda: prog.write_bytes(prog.read_bytes() + b)

    done = ScriptedDone(append(b"d1\n"), append(b""), append(b"t\xffail"))
    assert rn._tail_progress(prog, "P ", done) is None
    assert out.events == [("w", "P a1\n"), ("w", "P b\ufffd1\n"), ("f",), ("w", "P c1d1\n"), ("f",),
                          ("w", "P t\ufffdail\n"), ("f",)]
    assert done.waits == [0.5, 0.5, 0.5]


def test_tail_progress_without_a_file_or_with_blank_rest_prints_nothing_more(tmp_path, monkeypatch):
    out = Rec()
    monkeypatch.setattr(sys, "stdout", out)
    rn._tail_progress(tmp_path / "absent.log", "P ", ScriptedDone())
    assert out.events == []
    (tmp_path / "b.log").write_bytes(b"x\n   ")
    rn._tail_progress(tmp_path / "b.log", "P ", ScriptedDone())
    assert out.events == [("w", "P x\n"), ("f",)]


# ---------------------------------------------------------------------------------------------------- a small world
class Clock:
    def __init__(self, t=1000.0):
        self.t = t

    def time(self):
        return self.t


def _profiles() -> Profiles:
    prep = Preparation("prep", "caption vectors", "making the things of {source} for {notebook}",
                       ("{python}", "-m", "enc", "{source}", "--for", "{notebook}", "--n", "{n}"))
    return Profiles(
        profiles={"default": Profile("default", "", {}, ("emb", "lat")),
                  "big": Profile("big", "big", {"source": "cache:x:{rehearsal_tag}", "n": 3,
                                                "tags": ["{rehearsal_tag}"]}, ("emb",), ("prep0", "prep"),
                                 ("dsA", "dsB")),
                  "nosrc": Profile("nosrc", "ns", {}, ("emb",), ("prep",))},
        needs={"emb": "needs embeddings; {offered_by} can run", "lat": "needs latents ({offered_by})"},
        preparations={"prep0": Preparation("prep0", "unused", "never shown", ("never",)), "prep": prep},
        own_source_offers={"sims": ("lat",)},
        notebooks={"02": NotebookNeeds(("emb", "lat"), ()), "03": NotebookNeeds(("emb",), ("prep",)),
                   "04": NotebookNeeds(("emb",), ("prep",))},
        rehearsal={"dsA": {}, "dsB": {}},
        default_notebook=NotebookNeeds(("emb",), ()))


NOTEBOOKS = ["01_alpha", "02_beta", "03_gamma", "04_delta"]


class World:
    def __init__(self, tmp_path, monkeypatch):
        self.tmp, self.mp = tmp_path, monkeypatch
        self.root = tmp_path / "repo"
        (self.root / "notebooks").mkdir(parents=True)
        for n in NOTEBOOKS + ["x1_no", "6_short"]:
            (self.root / "notebooks" / f"{n}.ipynb").write_text("{}")
        (self.root / "notebooks" / "05_text.py").write_text("")
        self.results = tmp_path / "res"
        self.caller = tmp_path / "caller"
        self.clock = Clock()
        self.calls = []           # (argv, kwargs) of subprocess.run
        self.rc = {}              # first word after the interpreter / "bash" -> return code
        self.cost = {}            # same key -> seconds the command takes
        self.nb_rc, self.nb_logs, self.nb_secs = {}, {}, 5
        self.ran, self.fetches, self.manifests, self.summaries = [], [], [], []
        self.runners = []
        monkeypatch.setattr(rn, "time", self.clock)
        monkeypatch.setattr(rn, "subprocess", SimpleNamespace(run=self._run, PIPE=subprocess.PIPE,
                                                              STDOUT=subprocess.STDOUT))
        monkeypatch.setattr(reporting, "write_manifest", lambda folder, **f: self.manifests.append((folder, f)))

        def summary(results, statuses, *, title):
            self.summaries.append((results, list(statuses), title))
            return results / "SUMMARY.md"
        monkeypatch.setattr(reporting, "write_summary", summary)
        monkeypatch.setattr(reporting, "run_folder_name",
                            lambda changed: "_".join(f"{k}-{v}" for k, v in sorted(changed.items())))
        for var in ("HUBNORM_REHEARSAL_SCALE", "HUBNORM_FORBID_SYNTHETIC", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
            # set, then removed: monkeypatch records the variable's state before the test (a plain delenv of an
            # absent variable records nothing, and what the runner then sets would outlive the test)
            monkeypatch.setenv(var, "")
            monkeypatch.delenv(var)
        monkeypatch.setenv("PYTHONHASHSEED", "7")
        monkeypatch.setenv("HUBNORM_RESULTS", "/unchanged")

    def _key(self, cmd):
        return cmd[1] if cmd[0] == "bash" else cmd[3] if cmd[2] == "hubnorm.data" else cmd[2]

    def _run(self, cmd, **kw):
        self.calls.append((list(cmd), kw))
        self.clock.t += self.cost.get(self._key(cmd), 0)
        return subprocess.CompletedProcess(cmd, self.rc.get(self._key(cmd), 0))

    def runner(self, *argv, **opts):
        self.close()   # an earlier run of the test has ended: its lock is released
        o = rn.parse_args(list(argv), str(self.caller))
        o["results"] = str(self.results)   # not the variable's folder (set here to check that run() replaces it)
        o.update(opts)
        r = rn.Runner(self.root, self.caller, o, _profiles())
        r.python = "/py"
        r.argv = list(argv)
        r._scripts["notebook_params"] = SimpleNamespace(merged_params=self._merge)
        self.mp.setattr(r, "_run_notebook", lambda nb, params, out: self._notebook(nb, params, out))
        self.mp.setattr(r, "_fetch_real", lambda: self.fetches.append(1))
        self.runners.append(r)
        return r

    @staticmethod
    def _merge(params, user, root):
        merged = dict(params)
        for flag, value in zip(user[::2], user[1::2]):
            k, v = value.split("=", 1)
            merged[k] = int(v) if v.isdigit() else v
        return merged

    def _notebook(self, nb, params, out):
        self.ran.append((nb, params, out))
        log = out / f"{nb.stem}.log"
        if nb.stem in self.nb_logs:
            log.write_bytes(self.nb_logs[nb.stem].encode("utf-8", "surrogateescape"))
        self.clock.t += self.nb_secs
        return self.nb_rc.get(nb.stem, 0), self.nb_secs, log

    def close(self):
        for r in self.runners:
            lock = getattr(r, "_lock", None)
            if lock is not None and not lock.closed:
                lock.close()


@pytest.fixture
def world(tmp_path, monkeypatch):
    w = World(tmp_path, monkeypatch)
    yield w
    w.close()


def _ok(name, secs=5):
    return f"{name:<40} {secs:>5}s  ok"


def test_run_default_profile_runs_every_notebook(world, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    r = world.runner("--quiet")
    assert r.run() == 0
    R = world.results
    out, err = capsys.readouterr()
    assert err == ""
    assert out.splitlines() == [f"run_all.sh: profile default -> {R}/ (4 notebooks)", *map(_ok, NOTEBOOKS),
                                "run_all.sh: total 20s", f"run_all.sh: summary of the claims and gains: {R}/SUMMARY.md",
                                f"run_all.sh: all notebooks ok (0 skipped); figures in {R}/figures, tables in "
                                f"{R}/tables"]
    assert os.environ["HF_HUB_OFFLINE"] == "0" and os.environ["TRANSFORMERS_OFFLINE"] == "1"
    assert os.environ["PYTHONHASHSEED"] == "0" and os.environ["HUBNORM_RESULTS"] == str(R)
    assert "HUBNORM_FORBID_SYNTHETIC" not in os.environ
    assert world.ran == [(world.root / "notebooks" / f"{n}.ipynb", {}, R / "notebooks") for n in NOTEBOOKS]
    assert (R / "notebooks").is_dir() and r._results == R
    assert world.fetches == [1] and r.real_noted is False and world.calls == []
    assert world.manifests == [(R, {"profile": "default", "source": None, "parameters": {}, "changed": {},
                                    "only": None, "command": ["run_all.sh", "--quiet"]})]
    assert world.summaries == [(R, [(n, "ok") for n in NOTEBOOKS], "run_all.sh (profile default)")]
    assert r._lock is not None and rn.lock_results(R) is None                # held for the run
    assert (R.parent / ".res.lock").is_file()


def test_run_keeps_a_set_offline_flag_and_a_relative_results_folder(world, capsys, monkeypatch):
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")
    r = world.runner("--only", "01", results="rel")
    assert r.run() == 0
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["TRANSFORMERS_OFFLINE"] == "0"
    assert r._results == world.caller / "rel"
    assert capsys.readouterr().out.splitlines()[0] == (f"run_all.sh: profile default -> {world.caller}/rel/ "
                                                       "(1 notebook matching --only 01)")


def test_results_root_default_absolute_and_relative(world):
    r = world.runner()
    r.opts["results"] = ""
    assert r._results_root() == world.root / "results"
    r.opts["results"] = "/abs/where"
    assert r._results_root() == Path("/abs/where")
    r.opts["results"] = "rel/where"
    assert r._results_root() == world.caller / "rel" / "where"


def test_run_unknown_profile_and_source_with_a_profile_are_usage_errors(world, capsys):
    assert world.runner("--profile", "nope").run() == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "run_all.sh: unknown profile 'nope' (big, default, nosrc)\n"
    assert world.runner("--profile", "big", "--source", "local:/d").run() == 2
    out, err = capsys.readouterr()
    assert out == "" and err == ("run_all.sh: --source runs the default profile on your data; it cannot be combined "
                                 "with --profile big\n")
    assert world.calls == [] and world.manifests == []


def test_run_a_profile_that_rehearses_prepares_and_skips(world, capsys, monkeypatch):
    monkeypatch.setenv("HUBNORM_REHEARSAL_SCALE", "0.5")
    world.cost = {"enc": 12.9}
    r = world.runner("--profile", "big")
    assert r.run() == 0
    R = world.results / "big"
    out, err = capsys.readouterr()
    assert err == ""
    params = {"source": "cache:x:seed0-scale0.5", "n": 3, "tags": ["seed0-scale0.5"]}
    assert out.splitlines() == [
        "run_all.sh: rehearsal cache for dsA (written once; 'python -m hubnorm.data rehearse --dataset dsA --force' "
        "rewrites it)",
        "run_all.sh: rehearsal cache for dsB (written once; 'python -m hubnorm.data rehearse --dataset dsB --force' "
        "rewrites it)",
        "run_all.sh: making the things of cache:x:seed0-scale0.5 for 03_gamma",
        "run_all.sh: caption vectors ready in 12s (not part of the notebook times)",
        f"run_all.sh: profile big -> {R}/ (4 notebooks)",
        _ok("01_alpha"), f"{'02_beta':<40} {'-':>5}   skipped: needs latents (notebooks 01, 03, 04)", _ok("03_gamma"),
        _ok("04_delta"),
        "run_all.sh: total 15s", f"run_all.sh: summary of the claims and gains: {R}/SUMMARY.md",
        f"run_all.sh: all notebooks ok (1 skipped); figures in {R}/figures, tables in {R}/tables"]
    assert world.calls == [
        (["/py", "-m", "hubnorm.data", "rehearse", "--dataset", "dsA", "--scale", "0.5"], {"cwd": world.root}),
        (["/py", "-m", "hubnorm.data", "rehearse", "--dataset", "dsB", "--scale", "0.5"], {"cwd": world.root}),
        (["/py", "-m", "enc", "cache:x:seed0-scale0.5", "--for", "03_gamma", "--n", "3"], {"cwd": world.root})]
    assert [nb.stem for nb, _, _ in world.ran] == ["01_alpha", "03_gamma", "04_delta"]
    assert all(p == params for _, p, _ in world.ran)
    assert world.fetches == []                                                 # the default profile's only
    assert world.summaries[0][1] == [("01_alpha", "ok"), ("02_beta", "skipped: needs latents (notebooks 01, 03, 04)"),
                                     ("03_gamma", "ok"), ("04_delta", "ok")]
    assert world.summaries[0][2] == "run_all.sh (profile big)"
    assert world.manifests[0][1]["source"] == "cache:x:seed0-scale0.5" and world.manifests[0][1]["parameters"] == params


def test_run_without_a_scale_rehearses_at_full_size_and_a_failed_rehearsal_stops(world, capsys):
    world.rc = {"rehearse": 1}
    assert world.runner("--profile", "big").run() == 1
    out, err = capsys.readouterr()
    assert err == "run_all.sh: rehearse failed\n"
    assert out.count("rehearsal cache for") == 1 and "dsB" not in out
    assert world.calls == [(["/py", "-m", "hubnorm.data", "rehearse", "--dataset", "dsA"], {"cwd": world.root})]
    assert world.ran == [] and world.manifests == []
    world.rc, world.calls = {}, []
    assert world.runner("--profile", "big", "--only", "01").run() == 0       # full size: tag seed0
    assert world.ran[0][1] == {"source": "cache:x:seed0", "n": 3, "tags": ["seed0"]}
    assert [c[0][-1] for c in world.calls] == ["dsA", "dsB"]                 # 03 not selected: nothing prepared


def test_run_a_failed_preparation_is_reported_and_the_notebooks_still_run(world, capsys):
    world.rc = {"enc": 3}
    assert world.runner("--profile", "nosrc", "--only", "3").run() == 0
    out, err = capsys.readouterr()
    assert err == "run_all.sh: the caption vectors could not be prepared (above); 03_gamma will say why\n"
    assert out.splitlines()[:2] == ["run_all.sh: making the things of  for 03_gamma",
                                    f"run_all.sh: profile nosrc -> {world.results}/ns/ (1 notebook matching --only 3)"]
    # "nosrc" sets no n: its {n} stays (check_profiles refuses such a file; these Profiles are built by hand)
    assert world.calls == [(["/py", "-m", "enc", "", "--for", "03_gamma", "--n", "{n}"], {"cwd": world.root})]
    assert [nb.stem for nb, _, _ in world.ran] == ["03_gamma"]


def test_run_own_source_relative_is_cleared_marked_and_forbids_synthetic(world, capsys):
    own = f"local:{world.caller}/data"
    folder = world.results / "own-local-data"
    folder.mkdir(parents=True)
    (folder / "SOURCE.txt").write_text(own + "\n")
    (folder / "old.csv").write_text("x")
    r = world.runner("--source", "local:data")
    assert r.run() == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert lines[:2] == [f"run_all.sh: clearing {folder} (the outputs of an earlier run on this source)",
                         f"run_all.sh: profile default -> {folder}/ (4 notebooks)"]
    assert not (folder / "old.csv").exists() and (folder / "SOURCE.txt").read_text() == own + "\n"
    assert os.environ["HUBNORM_FORBID_SYNTHETIC"] == "1" and os.environ["HUBNORM_RESULTS"] == str(folder)
    assert all(p == {"source": own, "cross_source": None} for _, p, _ in world.ran) and len(world.ran) == 4
    assert world.fetches == []
    assert world.manifests[0] == (folder, {"profile": "default", "source": own, "parameters": {"source": own,
                                                                                             "cross_source": None},
                                           "changed": {}, "only": None, "command": ["run_all.sh", "--source",
                                                                                    "local:data"]})
    assert world.summaries[0][2] == f"run_all.sh (profile default, source {own})"


def test_run_own_sims_source_skips_what_it_does_not_offer(world, capsys):
    r = world.runner("--source", "sims:/abs/x")
    assert r.run() == 0
    folder = world.results / "own-sims-x"
    out, err = capsys.readouterr()
    assert err == "" and "clearing" not in out
    why = "needs embeddings; no notebook can run"
    assert out.splitlines() == [f"run_all.sh: profile default -> {folder}/ (4 notebooks)",
                                *(f"{n:<40} {'-':>5}   skipped: {why}" for n in NOTEBOOKS),
                                "run_all.sh: total 0s",
                                f"run_all.sh: summary of the claims and gains: {folder}/SUMMARY.md",
                                f"run_all.sh: all notebooks ok (4 skipped); figures in {folder}/figures, tables in "
                                f"{folder}/tables"]
    assert (folder / "SOURCE.txt").read_text() == "sims:/abs/x\n" and world.ran == []


def test_run_user_parameters_get_a_folder_of_their_own(world, capsys):
    r = world.runner("--param", "seed=1", "--only", "01")
    assert r.run() == 0
    R = world.results / "params-seed-1"
    assert r._results == R and world.ran[0][1] == {"seed": 1}
    assert world.manifests[0][1]["changed"] == {"seed": 1} and world.manifests[0][1]["only"] == "01"
    # a parameter set to the profile's own value changes nothing: the profile's folder
    r = world.runner("--profile", "big", "--param", "n=3", "--only", "01")
    assert r.run() == 0
    assert r._results == world.results / "big" and world.manifests[-1][1]["changed"] == {}
    assert world.ran[-1][1]["n"] == 3


def test_run_own_source_with_parameters(world, capsys):
    r = world.runner("--source", "local:/d/mine", "--param", "seed=2", "--param", "source=other", "--only", "01")
    assert r.run() == 0
    folder = world.results / "own-local-mine+seed-2"
    assert r._results == folder and (folder / "SOURCE.txt").read_text() == "local:/d/mine\n"
    assert world.manifests[0][1]["changed"] == {"seed": 2}
    assert world.ran[0][1] == {"source": "other", "cross_source": None, "seed": 2}
    r = world.runner("--source", "local:/d/mine", "--param", "source=other", "--only", "01")   # source only
    assert r.run() == 0
    assert r._results == world.results / "own-local-mine" and world.manifests[-1][1]["changed"] == {}
    r = world.runner("--source", "local:/d/mine", "--param", "seed=3", "--only", "01")   # the source unchanged
    assert r.run() == 0
    assert r._results == world.results / "own-local-mine+seed-3" and world.manifests[-1][1]["changed"] == {"seed": 3}


def test_run_a_relative_sims_folder_is_under_the_callers_folder(world, capsys):
    assert world.runner("--source", "sims:rel/x").run() == 0
    assert world.manifests[0][1]["source"] == f"sims:{world.caller}/rel/x"
    assert world.runner("--source", "cache:rel/x", "--only", "01").run() == 0   # not a folder: as given
    assert world.manifests[1][1]["source"] == "cache:rel/x"


def test_notebook_params_merge_passes_the_flags_and_stops_on_the_helper_error(world, capsys):
    seen = []
    r = world.runner("--param", "a=1")
    r._scripts["notebook_params"] = SimpleNamespace(merged_params=lambda p, u, root: seen.append((p, u, root)) or
                                                    {"m": 1})
    assert r._notebook_params_merge({"x": 0}) == {"m": 1}
    assert seen == [({"x": 0}, ["--param", "a=1"], str(world.root))]

    def bad(*a):
        raise SystemExit("run_all.sh: --param zz: no notebook declares it")
    r._scripts["notebook_params"] = SimpleNamespace(merged_params=bad)
    with pytest.raises(SystemExit) as exc:
        r._notebook_params_merge({})
    assert exc.value.code == 2
    assert capsys.readouterr().err == "run_all.sh: --param zz: no notebook declares it\n"


def test_run_a_held_lock_stops_before_writing(world, capsys):
    held = rn.lock_results(world.results)
    try:
        assert world.runner().run() == 2
    finally:
        held.close()
    out, err = capsys.readouterr()
    assert out == "" and err == (f"run_all.sh: another run_all.sh is writing to {world.results} (its lock "
                                 f"{world.tmp}/.res.lock is held): wait for it to finish, or pass --results <another "
                                 "folder>\n")
    assert world.manifests == [] and not world.results.exists()


def test_run_only_matching_nothing_is_an_error_that_writes_and_fetches_nothing(world, capsys):
    """A typo in --only stops before the results folder is locked or its manifest (the provenance of the last
    real run there) is overwritten."""
    assert world.runner("--only", "zz").run() == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (f"run_all.sh: no notebook matches --only zz (the notebooks: {', '.join(NOTEBOOKS)})\n")
    assert world.summaries == [] and world.fetches == [] and world.manifests == [] and not world.results.exists()


def _with_parameters_cell(world, name, cell):
    nb = {"cells": [{"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": cell}]}
    (world.root / "notebooks" / f"{name}.ipynb").write_text(json.dumps(nb))


def test_run_checks_every_notebooks_parameters_before_the_first_runs(world, capsys):
    """A value one notebook refuses stops the run before any notebook computes (and before anything is written),
    with each notebook's problem and how to pass a valid value to run_all.sh."""
    _with_parameters_cell(world, "02_beta", "n_boot: int = 200  # at least 10\nlr: float = 0.0001  # > 0\n")
    _with_parameters_cell(world, "04_delta", "n_boot: int = 500  # at least 10\ndirections: list = ['t2i']  "
                                             "# list of 't2i' | 'i2t'\n")
    r = world.runner("--param", "n_boot=5")
    r._scripts["notebook_params"] = SimpleNamespace(merged_params=lambda params, rest, root: {**params, "n_boot": 5})
    assert r.run() == 2
    out, err = capsys.readouterr()
    assert out == "" and world.ran == [] and world.manifests == []
    assert err == ("run_all.sh: bad parameters (nothing was run):\n"
                   "notebook 02 parameter n_boot must be >= 10; got 5; expected at least 10 (pass e.g. "
                   "--param n_boot=200)\n"
                   "notebook 04 parameter n_boot must be >= 10; got 5; expected at least 10 (pass e.g. "
                   "--param n_boot=500)\n")
    r = world.runner("--param", "directions=t2v")
    r._scripts["notebook_params"] = SimpleNamespace(merged_params=lambda params, rest, root:
                                                    {**params, "directions": "t2v"})
    assert r.run() == 2
    assert "(pass e.g. --param 'directions=['t2i']')" in capsys.readouterr().err


def test_run_leaves_a_parameters_cell_without_rules_to_papermill(world, capsys):
    _with_parameters_cell(world, "02_beta", "seed = 0\n")          # no rule comments: not one of ours
    assert world.runner("--quiet").run() == 0


def test_run_results_that_is_a_file_is_named(world, capsys):
    world.results.parent.mkdir(parents=True, exist_ok=True)
    world.results.write_text("not a folder")
    assert world.runner().run() == 2
    assert capsys.readouterr().err == (f"run_all.sh: --results {world.results} is a file, not a folder: pass a "
                                       "folder (it is created if missing)\n")
    assert world.manifests == []


def test_run_only_matching_a_skipped_notebook_is_no_error(world, capsys):
    assert world.runner("--profile", "big", "--only", "02").run() == 0
    assert world.ran == [] and world.summaries[0][1] == [("02_beta", "skipped: needs latents (notebooks 01, 03, 04)")]


def test_run_max_notebooks_counts_runnable_ones_only(world, capsys):
    assert world.runner("--profile", "big", "--max-notebooks", "1").run() == 0
    assert [nb.stem for nb, _, _ in world.ran] == ["01_alpha"]
    assert world.summaries[-1][1] == [("01_alpha", "ok"), ("02_beta", "skipped: needs latents (notebooks 01, 03, 04)")]
    assert world.runner("--profile", "big", "--max-notebooks", "2").run() == 0
    assert [nb.stem for nb, _, _ in world.ran][1:] == ["01_alpha", "03_gamma"]
    assert [s[0] for s in world.summaries[-1][1]] == ["01_alpha", "02_beta", "03_gamma"]


def test_run_a_failed_notebook_stops_the_run_with_its_error_lines(world, capsys):
    world.nb_rc = {"02_beta": 1}
    world.nb_logs = {"02_beta": "start\nValueError: one\nnot this\nException: two\nx PapermillExecutionError y\n"
                                "MyError: three\n  KeyError: indented\n"}
    world.nb_secs = 7
    assert world.runner("--site").run() == 1
    R = world.results
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"run_all.sh: profile default -> {R}/ (4 notebooks)", _ok("01_alpha", 7),
                                f"{'02_beta':<40} {7:>5}s  FAILED (log: {R}/notebooks/02_beta.log)",
                                "    Exception: two", "    x PapermillExecutionError y", "    MyError: three",
                                "run_all.sh: total 14s", f"run_all.sh: summary of the claims and gains: {R}/SUMMARY.md"]
    assert err == "run_all.sh: FAILED notebook(s): 02_beta\n"
    assert world.summaries[0][1] == [("01_alpha", "ok"), ("02_beta", "FAILED")]
    assert world.calls == []                                                   # no site after a failure


def test_run_keep_going_runs_past_failures_even_without_a_log(world, capsys):
    world.nb_rc = {"02_beta": 1, "04_delta": 2}
    world.nb_logs = {"04_delta": "OSError: disk \udcff full\n"}   # a byte that is not UTF-8
    assert world.runner("--keep-going").run() == 1
    out, err = capsys.readouterr()
    assert len(world.ran) == 4 and err == "run_all.sh: FAILED notebook(s): 02_beta 04_delta\n"
    lines = out.splitlines()
    i = lines.index(f"{'02_beta':<40} {5:>5}s  FAILED (log: {world.results}/notebooks/02_beta.log)")
    assert lines[i + 1] == _ok("03_gamma")                                     # no log: no error lines
    assert lines[i + 3] == "    OSError: disk \ufffd full"


def test_run_builds_the_site_when_asked(world, capsys):
    assert world.runner("--site", "--only", "01").run() == 0
    assert world.calls == [(["bash", "scripts/build_site.sh", "--notebooks", str(world.results)], {"cwd": world.root})]
    assert capsys.readouterr().err == ""
    world.rc = {"scripts/build_site.sh": 1}
    assert world.runner("--site", "--only", "01").run() == 1
    assert capsys.readouterr().err == "run_all.sh: the site build failed\n"


# ---------------------------------------------------------------------------------------------------- _fetch_real
def _fetch_world(tmp_path, monkeypatch, completed, cost=0.0):
    clock = Clock()
    calls = []

    def run(cmd, **kw):
        calls.append((cmd, kw))
        clock.t += cost
        return completed
    monkeypatch.setattr(rn, "time", clock)
    monkeypatch.setattr(rn, "subprocess", SimpleNamespace(run=run))
    r = rn.Runner(tmp_path, tmp_path, {}, None)
    r.python = "/py"
    r.real_noted = False
    return r, calls


def test_fetch_real_lists_what_is_there_and_notes_what_is_missing(tmp_path, monkeypatch, capsys):
    done = subprocess.CompletedProcess([], 0, "coco-clip: cached at /x\n\nNOTE: real release f30k-blip v2 is absent\n"
                                              "NOTE: something else\nf30k-clip: ok\n"
                                              "NOTE: real release coco-blip needs release 3\n", "")
    r, calls = _fetch_world(tmp_path, monkeypatch, done, cost=3.7)
    r._fetch_real()
    assert calls == [(["/py", "-m", "hubnorm.data", "fetch-real", "--optional", "--no-progress"],
                      {"cwd": tmp_path, "capture_output": True, "text": True})]
    out, err = capsys.readouterr()
    assert err == ""
    assert out.splitlines() == [
        "run_all.sh: real column: coco-clip, f30k-clip (3s)",
        f"{reporting.REAL_MISSING_NOTE} f30k-blip, coco-blip: not on this machine and not downloadable now (offline?); "
        "'python -m hubnorm.data fetch-real' on a machine with internet, or set HUBNORM_REAL_MIRROR to a copy. "
        "The notebooks run without it."]
    assert r.real_noted is True


def test_fetch_real_all_there_notes_nothing(tmp_path, monkeypatch, capsys):
    r, _ = _fetch_world(tmp_path, monkeypatch, subprocess.CompletedProcess([], 0, "a: ok\n", ""))
    r._fetch_real()
    assert capsys.readouterr() == ("run_all.sh: real column: a (0s)\n", "")
    assert r.real_noted is False
    r, _ = _fetch_world(tmp_path, monkeypatch, subprocess.CompletedProcess([], 0, "", ""))
    r._fetch_real()
    assert capsys.readouterr() == ("", "") and r.real_noted is False


def test_fetch_real_failure_says_why_and_notes_every_release(tmp_path, monkeypatch, capsys):
    stderr = "x" * 400 + "the last words\n"
    r, _ = _fetch_world(tmp_path, monkeypatch, subprocess.CompletedProcess([], 1, "", stderr))
    r._fetch_real()
    out, err = capsys.readouterr()
    assert err == (f"run_all.sh: fetching the real releases failed ({stderr.strip()[-300:]}); the notebooks show the "
                   "releases already cached, if any\n")
    assert out.startswith(f"{reporting.REAL_MISSING_NOTE} every release: not on this machine") and r.real_noted
    r, _ = _fetch_world(tmp_path, monkeypatch, subprocess.CompletedProcess(
        [], 1, "NOTE: real release r1 gone\nfell over\n", ""))
    r._fetch_real()
    out, err = capsys.readouterr()
    assert "failed (NOTE: real release r1 gone\nfell over)" in err
    assert out.splitlines()[-1].startswith(f"{reporting.REAL_MISSING_NOTE} r1: not on")
    assert out.splitlines()[0] == "run_all.sh: real column: fell over (0s)"


# ---------------------------------------------------------------------------------------------------- one notebook
class FakePopen:
    """papermill's process: its output, its return code, and what it writes while it runs (``on_start``)."""
    made = []

    def __init__(self, cmd, **kw):
        self.cmd, self.kw = cmd, kw
        self.stdout = io.BytesIO(FakePopen.output)
        FakePopen.made.append(self)
        FakePopen.on_start(self)

    def wait(self):
        return FakePopen.rc


@pytest.fixture
def nbworld(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    nb = root / "notebooks" / "03_gamma.ipynb"
    nb.write_text("{}")
    results = tmp_path / "res"
    out = results / "notebooks"
    out.mkdir(parents=True)
    clock = Clock()
    FakePopen.made, FakePopen.output, FakePopen.rc = [], b"", 0
    FakePopen.on_start = lambda proc: None
    monkeypatch.setattr(rn, "time", clock)
    monkeypatch.setattr(rn, "subprocess", SimpleNamespace(Popen=FakePopen, PIPE=subprocess.PIPE,
                                                          STDOUT=subprocess.STDOUT))
    monkeypatch.setenv("HUBNORM_PROGRESS_FILE", "/outer")
    stripped = []

    class NbFormat:
        @staticmethod
        def read(path, as_version):
            return {"read": Path(path).read_text(), "as_version": as_version}

        @staticmethod
        def write(nb, path):
            stripped.append(path)
            Path(path).write_text(json.dumps(nb))

    def drop_progress(nb):
        return {**nb, "dropped": True}

    r = rn.Runner(root, root, {"quiet": True}, None)
    r.python = "/py"
    r._results = results
    declared = []
    r._scripts["notebook_params"] = SimpleNamespace(
        declared_params=lambda path, params: declared.append((path, params)) or {"kept": params["kept"]})
    r._scripts["strip_notebook_metadata"] = SimpleNamespace(nbformat=NbFormat, drop_progress=drop_progress)
    return SimpleNamespace(root=root, nb=nb, results=results, out=out, clock=clock, runner=r, stripped=stripped,
                           declared=declared)


def test_run_notebook_quiet_command_and_executed_copy(nbworld, capsys):
    w = nbworld

    def start(proc):
        w.clock.t += 42.9
        (w.out / "03_gamma.ipynb").write_text("executed")
    FakePopen.on_start = start
    FakePopen.output = b"a line\n"
    rc, secs, log = w.runner._run_notebook(w.nb, {}, w.out)
    assert (rc, secs, log) == (0, 42, w.out / "03_gamma.log")
    (proc,) = FakePopen.made
    assert proc.cmd == ["/py", "-m", "papermill", "-k", "python3", "--cwd", "notebooks", "--no-progress-bar", "-y",
                        "{}", "notebooks/03_gamma.ipynb", str(w.out / "03_gamma.ipynb")]
    assert proc.kw["cwd"] == w.root and proc.kw["stdout"] == subprocess.PIPE and proc.kw["stderr"] == subprocess.STDOUT
    assert proc.kw["preexec_fn"] is rn._die_with_parent
    prog = w.out / "03_gamma.progress.log"
    assert proc.kw["env"]["HUBNORM_PROGRESS_FILE"] == str(prog) and prog.read_bytes() == b""
    assert proc.kw["env"]["PATH"] == os.environ["PATH"]
    assert capsys.readouterr().out == f"03_gamma: running (log: {log})\n"
    assert log.read_bytes() == b"a line\n"
    assert w.declared == []                                                    # no parameters: none asked for
    assert w.stripped == [str(w.out / "03_gamma.ipynb")]
    assert json.loads((w.out / "03_gamma.ipynb").read_text()) == {"read": "executed", "as_version": 4,
                                                                  "dropped": True}


def test_run_notebook_shows_output_and_progress_and_passes_declared_parameters(nbworld, capsys):
    w = nbworld
    w.runner.opts["quiet"] = False
    w.runner.real_noted = True
    prog = w.out / "03_gamma.progress.log"
    FakePopen.on_start = lambda proc: prog.write_bytes(b"bar 50%\rbar 100%\n")
    FakePopen.output = b"result $\\beta$\nNOTE: the real column leaves out x\nInput Notebook: n\n"
    rc, secs, log = w.runner._run_notebook(w.nb, {"kept": 1, "other": 2}, w.out)
    assert rc == 0 and secs == 0
    (proc,) = FakePopen.made
    assert proc.cmd[7:10] == ["--log-output", "--no-progress-bar", "-y"] and proc.cmd[10] == '{"kept": 1}'
    assert w.declared == [(str(w.nb), {"kept": 1, "other": 2})]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"03_gamma: running (log: {log})"
    assert sorted(lines[1:]) == sorted(["  03| result β", "  03| bar 50%", "  03| bar 100%"])
    assert w.stripped == []                                                    # papermill wrote no executed copy


def test_run_notebook_shows_the_real_note_unless_the_run_noted_it_once(nbworld, capsys):
    w = nbworld
    w.runner.opts["quiet"] = False
    FakePopen.output = b"NOTE: the real column leaves out x\n"
    w.runner._run_notebook(w.nb, {}, w.out)                                   # no _fetch_real ran: shown
    assert capsys.readouterr().out.splitlines()[1:] == ["  03| NOTE: the real column leaves out x"]
    w.runner.real_noted = False
    w.runner._run_notebook(w.nb, {}, w.out)
    assert capsys.readouterr().out.splitlines()[1:] == ["  03| NOTE: the real column leaves out x"]


def test_run_notebook_bad_parameters_stop_the_run(nbworld, capsys):
    w = nbworld

    def bad(path, params):
        raise ValueError("not a mapping")
    w.runner._scripts["notebook_params"] = SimpleNamespace(declared_params=bad)
    with pytest.raises(SystemExit) as exc:
        w.runner._run_notebook(w.nb, {"a": 1}, w.out)
    assert exc.value.code == 2 and FakePopen.made == []
    assert capsys.readouterr().err == "run_all.sh: bad parameters (not a mapping)\n"

    def exits(path, params):
        raise SystemExit("notebook_params.py: boom")
    w.runner._scripts["notebook_params"] = SimpleNamespace(declared_params=exits)
    with pytest.raises(SystemExit) as exc:
        w.runner._run_notebook(w.nb, {"a": 1}, w.out)
    assert exc.value.code == 2
    assert capsys.readouterr().err == "run_all.sh: bad parameters (notebook_params.py: boom)\n"


def test_run_notebook_removes_stale_outputs_and_moves_a_failed_ones_tables(nbworld, capsys):
    w = nbworld
    R = w.results
    for rel in ("claims/03.csv", "claims/04.csv", "tables/03_old.csv", "figures/03_old.png", "tables/04_other.csv",
                "failed/03_gamma/stale.csv"):
        (R / rel).parent.mkdir(parents=True, exist_ok=True)
        (R / rel).write_text("old")
    (R / "tables" / "03_dir").mkdir()                                          # a folder is not an output

    def start(proc):
        assert not (R / "claims" / "03.csv").exists() and not (R / "tables" / "03_old.csv").exists()
        assert not (R / "figures" / "03_old.png").exists() and not (R / "failed" / "03_gamma").exists()
        (R / "tables" / "03_half.csv").write_text("half")
        (R / "figures" / "03_fig.png").write_text("fig")
    FakePopen.on_start = start
    FakePopen.rc = 3
    rc, _, log = w.runner._run_notebook(w.nb, {}, w.out)
    assert rc == 3
    dest = R / "failed" / "03_gamma"
    assert sorted(p.name for p in dest.iterdir()) == ["03_fig.png", "03_half.csv"]
    assert (dest / "03_half.csv").read_text() == "half"
    assert sorted(p.name for p in (R / "tables").iterdir()) == ["03_dir", "04_other.csv"]
    assert (R / "claims" / "04.csv").exists() and not (R / "claims" / "03.csv").exists()
    assert capsys.readouterr().out.splitlines() == [
        f"03_gamma: running (log: {log})",
        f"run_all.sh: 03_gamma failed: the 2 table(s)/figure(s) it wrote first are in {dest} (incomplete), not in "
        "tables/ or figures/"]


def test_run_notebook_failed_with_one_table_makes_the_failed_folder(nbworld, capsys):
    w = nbworld
    FakePopen.rc = 1
    table = w.results / "tables" / "03_t.csv"
    FakePopen.on_start = lambda proc: (table.parent.mkdir(), table.write_text("t"))
    rc, _, log = w.runner._run_notebook(w.nb, {}, w.out)
    dest = w.results / "failed" / "03_gamma"
    assert rc == 1 and [p.name for p in dest.iterdir()] == ["03_t.csv"] and not table.exists()
    assert capsys.readouterr().out.splitlines()[-1] == (f"run_all.sh: 03_gamma failed: the 1 table(s)/figure(s) it "
                                                        f"wrote first are in {dest} (incomplete), not in tables/ or "
                                                        "figures/")


def test_run_notebook_failed_without_outputs_and_an_unstrippable_copy(nbworld, capsys):
    w = nbworld
    FakePopen.rc = 1
    FakePopen.on_start = lambda proc: (w.out / "03_gamma.ipynb").write_text("partial")

    def broken(nb):
        raise RuntimeError("bad json")
    w.runner._scripts["strip_notebook_metadata"].drop_progress = broken
    rc, _, log = w.runner._run_notebook(w.nb, {}, w.out)
    assert rc == 1 and not (w.results / "failed").exists()
    out, err = capsys.readouterr()
    assert out == f"03_gamma: running (log: {log})\n"
    assert err == f"run_all.sh: could not strip progress lines from {w.out / '03_gamma.ipynb'}: bad json\n"
    assert (w.out / "03_gamma.ipynb").read_text() == "partial"


def test_outputs_are_the_notebooks_files_in_tables_and_figures(nbworld):
    w = nbworld
    for rel in ("tables/03_b.csv", "tables/03_a.csv", "figures/03_z.png", "tables/30_x.csv", "tables/04_y.csv"):
        (w.results / rel).parent.mkdir(parents=True, exist_ok=True)
        (w.results / rel).write_text("")
    (w.results / "figures" / "03_sub").mkdir()
    assert w.runner._outputs("03_gamma") == [w.results / "tables" / "03_a.csv", w.results / "tables" / "03_b.csv",
                                             w.results / "figures" / "03_z.png"]


# ---------------------------------------------------------------------------------------------------- Runner, main
def test_runner_helper_loads_each_script_once(tmp_path, monkeypatch):
    loads = []
    monkeypatch.setattr(rn, "_script", lambda root, name: loads.append((root, name)) or object())
    r = rn.Runner(tmp_path, tmp_path / "c", {"o": 1}, "P")
    assert (r.root, r.caller_dir, r.opts, r.p, r.python, r.argv) == (tmp_path, tmp_path / "c", {"o": 1}, "P",
                                                                     sys.executable, [])
    a = r._helper("x")
    assert r._helper("x") is a and loads == [(tmp_path, "x")]
    r._helper("y")
    assert loads == [(tmp_path, "x"), (tmp_path, "y")]


@pytest.fixture
def fake_runner(monkeypatch):
    made = []

    class FakeRunner:
        def __init__(self, root, caller_dir, opts, profiles):
            self.args = (root, caller_dir, opts, profiles)
            made.append(self)

        def run(self):
            return 7

    monkeypatch.setattr(rn, "Runner", FakeRunner)
    monkeypatch.setattr(rn, "load_profiles", lambda: "PROFILES")
    return made


def test_main_reads_root_and_caller_dir_then_the_flags(tmp_path, monkeypatch, fake_runner):
    monkeypatch.delenv("HUBNORM_RESULTS", raising=False)
    assert rn.main(["--root", str(tmp_path / "x" / ".."), "--caller-dir", "call", "--quiet", "--params", "p.yaml"]) == 7
    (r,) = fake_runner
    root, caller, opts, profiles = r.args
    assert root == tmp_path and caller == Path("call") and profiles == "PROFILES"
    assert opts["quiet"] and opts["user_params"] == ["--params", "call/p.yaml"]
    assert r.argv == ["--quiet", "--params", "p.yaml"]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["runner", "--caller-dir", "/elsewhere", "--site"])
    assert rn.main() == 7
    assert fake_runner[1].args[:2] == (tmp_path, Path("/elsewhere")) and fake_runner[1].argv == ["--site"]
    assert rn.main(["--root", str(tmp_path / "r")]) == 7 and fake_runner[-1].args[0] == tmp_path / "r"
    assert rn.main(["--caller-dir", "/cd"]) == 7 and fake_runner[-1].args[1] == Path("/cd")
    monkeypatch.setattr(sys, "argv", ["runner"])
    assert rn.main() == 7 and fake_runner[-1].args[:2] == (tmp_path, tmp_path) and fake_runner[-1].argv == []


def test_main_errors(tmp_path, monkeypatch, capsys, fake_runner):
    assert rn.main(["--root"]) == 2
    assert capsys.readouterr().err == "runner: --root needs a folder\n"
    assert rn.main(["--root", str(tmp_path), "--caller-dir"]) == 2
    assert capsys.readouterr().err == "runner: --caller-dir needs a folder\n"
    assert rn.main(["--bogus"]) == 2
    assert capsys.readouterr().err == "run_all.sh: unknown argument --bogus (see --help)\n"

    def bad():
        raise ValueError("profiles file: profiles.x lacks the key(s) ['offers']")
    monkeypatch.setattr(rn, "load_profiles", bad)
    assert rn.main([]) == 2
    assert capsys.readouterr().err == "run_all.sh: profiles file: profiles.x lacks the key(s) ['offers']\n"
    assert fake_runner == []
