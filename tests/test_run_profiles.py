"""Run profiles as data: the profiles file (tools/hubnorm_tools/profiles.yaml) is checked with errors naming the key,
the rehearsal sizes are the library's (hubnorm/data/rehearsal.yaml, one copy), the runner behind run_all.sh knows no notebook and no profile by name, and every
profile of ``run_all.sh --help`` starts its first notebook.

Time (2-core machine, quiet): the file checks ~2 s; ``test_every_profile_starts_its_first_notebook`` ~2-3 min in all
(default: notebook 00 in full, ~40 s; each paper profile: notebook 00 starts and stops at the missing real
embeddings, ~15 s; each rehearsal profile: tiny rehearsal caches (HUBNORM_REHEARSAL_SCALE=0.02) written by the first
of the two, then notebook 00 in full on them with the paper parameters, ~40 s).
"""

import ast
import copy
import importlib
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from hubnorm_tools import profiles as pf
from hubnorm_tools.runner import own_source_slug, parse_args, Usage

# the module itself: the attribute hubnorm.data.rehearse (so also `import hubnorm.data.rehearse as rh`) is the function
rh = importlib.import_module("hubnorm.data.rehearse")

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p.stem for p in (REPO / "notebooks").glob("[0-9][0-9]_*.py"))


def _raw() -> dict:
    """The run profiles (tools) with the library's rehearsal sizes under ``rehearsal``."""
    data = yaml.safe_load((REPO / "tools" / "hubnorm_tools" / "profiles.yaml").read_text())
    assert "rehearsal" not in data, "the rehearsal sizes live in hubnorm/data/rehearsal.yaml only"
    data.update(yaml.safe_load((REPO / "lib" / "hubnorm" / "data" / "rehearsal.yaml").read_text()))
    return data


def _check(data):
    """check_profiles of a :func:`_raw` document: the run profiles, the rehearsal sizes passed beside them."""
    data = dict(data)
    return pf.check_profiles(data, "", {"rehearsal": data.pop("rehearsal")})


def _help_profiles() -> list:
    text = subprocess.run(["bash", str(REPO / "run_all.sh"), "--help"], capture_output=True, text=True,
                          timeout=60).stdout
    first = re.search(r"--profile ([a-z0-9|-]+)\]", text)
    assert first, text
    return first.group(1).split("|")


def test_the_file_holds_every_profile_of_the_help_and_nothing_else():
    profiles = pf.load_profiles()
    assert sorted(_help_profiles()) == sorted(profiles.profiles)
    for name, prof in profiles.profiles.items():   # every results folder is the profile's own name (or the root)
        assert prof.results == ("" if name == "default" else name)


def test_rehearsal_sizes_come_from_the_librarys_file():
    raw = _raw()["rehearsal"]
    assert rh.SIZES == {k: {"preset": v["preset"], "splits": {s: tuple(n) for s, n in v["splits"].items()}}
                        for k, v in raw.items()}
    assert rh.scaled_sizes("coco")["train"] == tuple(raw["coco"]["splits"]["train"])
    src = (REPO / "lib" / "hubnorm" / "data" / "rehearse.py").read_text()
    assert "113287" not in src and "29000" not in src, "the sizes live in rehearsal.yaml only"
    run_all = (REPO / "run_all.sh").read_text()
    assert "paper-coco" not in run_all.split("set -uo pipefail", 1)[1], "run_all.sh is a thin wrapper"


def test_every_notebook_declaration_names_a_notebook_and_the_sims_declaration_agrees_with_it():
    profiles = pf.load_profiles()
    numbers = {n[:2] for n in NOTEBOOKS}
    assert set(profiles.notebooks) <= numbers, f"entries for absent notebooks: {set(profiles.notebooks) - numbers}"
    sims = set(profiles.offers("default", "sims:/x"))
    for name in NOTEBOOKS:   # a notebook runs on a sims: folder iff its `source` help offers sims:<folder>
        offers_sims = "sims:<folder>" in (REPO / "notebooks" / f"{name}.py").read_text()
        runs = set(profiles.notebook(name).needs) <= sims
        assert runs == offers_sims, (f"{name}: its source parameter {'offers' if offers_sims else 'lacks'} "
                                     f"sims:<folder> but profiles.yaml says it {'runs' if runs else 'is skipped'} "
                                     "on a sims: folder: update notebooks.\"" + name[:2] + "\".needs")


def _mutate(path, value):
    data = copy.deepcopy(_raw())
    node = data
    for k in path[:-1]:
        node = node[k]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data


@pytest.mark.parametrize("path, value, match", [
    (("profiles", "paper-coco", "offers"), ["embeddings", "pixels"], r"profiles\.paper-coco\.offers\[1\] must be one of"),
    (("profiles", "paper-coco", "results"), "a/b", r"profiles\.paper-coco\.results must be a folder name"),
    (("profiles", "paper-coco", "prepares"), ["coffee"], r"profiles\.paper-coco\.prepares\[0\]"),
    (("profiles", "rehearse-coco", "rehearse"), ["paper-imagenet"], r"profiles\.rehearse-coco\.rehearse\[0\]"),
    (("profiles", "paper-coco", "parameterz"), {}, r"profiles\.paper-coco has unknown key\(s\) \['parameterz'\]"),
    (("profiles", "paper-coco", "offers"), KeyError, r"profiles\.paper-coco lacks the key\(s\) \['offers'\]"),
    (("profiles", "default"), KeyError, r"profiles must be a mapping of profile names that includes 'default'"),
    (("profiles", "paper-coco", "parameters"), {"source": "cache:coco:synthetic-rehearsal:{rehearsal_tag}"},
     r"profiles\.paper-coco\.parameters\.source uses \{rehearsal_tag\}"),
    (("notebooks", "6"), {"needs": []}, r"notebooks\.6 must be a notebook's two-digit number"),
    (("notebooks", "06", "needs"), ["latent"], r"notebooks\.06\.needs\[1\]|notebooks\.06\.needs\[0\]"),
    (("notebooks", "07", "usez"), [], r"notebooks\.07 has unknown key"),
    (("needs", "latents"), "", r"needs\.latents must be the line printed"),
    (("preparations", "caption-embeddings", "command"), "encode", r"preparations\.caption-embeddings\.command"),
    (("own_source", "offers", "ftp"), [], r"own_source\.offers\.ftp must be a source kind"),
    (("rehearsal", "coco", "splits", "test"), [5000, 100], r"rehearsal\.coco\.splits\.test has 100 captions"),
    (("rehearsal", "coco", "preset"), "cocoa", r"rehearsal\.coco\.preset must be a preset"),
    (("rehearsal", "coco", "splits", "val"), [0, 0], r"rehearsal\.coco\.splits\.val\[0\] \(images\)"),
])
def test_a_bad_profiles_file_is_an_error_naming_the_key(path, value, match):
    with pytest.raises(ValueError, match=match):
        _check(_mutate(path, value))


def test_a_bad_profiles_file_stops_the_runner_with_the_key(tmp_path, monkeypatch):
    bad = tmp_path / "profiles.yaml"
    doc = _mutate(("profiles", "paper-coco", "offers"), ["pixels"])
    del doc["rehearsal"]
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(ValueError, match=r"profiles\.paper-coco\.offers\[0\]"):
        pf.load_profiles(bad)
    bad.write_text("profiles: [unclosed")
    with pytest.raises(ValueError, match="not valid YAML"):
        pf.load_profiles(bad)


def test_the_runner_has_no_notebook_or_profile_specific_branch():
    """The runner's code names no notebook number, no profile and no dataset: those are data."""
    src = (REPO / "tools" / "hubnorm_tools" / "runner.py").read_text()
    tree = ast.parse(src)
    docs = {id(node.body[0].value) for node in ast.walk(tree)   # every docstring (prose, e.g. "$N_{10}$"), not code
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
               and id(n) not in docs]
    profiles = pf.load_profiles()
    names = set(profiles.profiles) - {"default"} | {n[:2] for n in NOTEBOOKS} | {"coco", "flickr30k"} | \
        set(profiles.needs) | set(profiles.preparations)
    hits = sorted({(s, n) for s in strings for n in names if re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", s)})
    assert not hits, f"the runner names notebooks/profiles/needs in its code: {hits}"


def test_flags_parse_as_run_all_did():
    o = parse_args(["--profile=paper-coco", "--only", "03", "--quiet", "--param", "a=1", "--params", "p.yaml",
                    "--keep-going", "--results", "r", "--site"], "/caller")
    assert o["profile"] == "paper-coco" and o["only"] == "03" and o["quiet"] and o["keep_going"] and o["site"]
    assert o["user_params"] == ["--param", "a=1", "--params", "/caller/p.yaml"] and o["results"] == "r"
    for bad, msg in ((["--bogus"], "unknown argument --bogus (see --help)"), (["--profile"], "--profile needs"),
                     (["--max-notebooks", "0"], "--max-notebooks needs a positive number")):
        with pytest.raises(Usage, match=re.escape(msg)):
            parse_args(bad, "/caller")
    assert own_source_slug("local:/a/b/my folder/") == "local-my-folder"
    assert own_source_slug("cache:coco:ViT-B-32-quickgelu:openai") == "cache-coco-ViT-B-32-quickgelu-openai"


def _run_all(*args, env, timeout=600):
    return subprocess.run(["bash", str(REPO / "run_all.sh"), *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "HUBNORM_PROGRESS": "0", **env}, timeout=timeout)


@pytest.fixture(scope="module")
def rehearsal_cache(tmp_path_factory):
    """One cache root for both rehearsal profiles: each needs the same two tiny rehearsal caches (paper-coco and
    paper-flickr30k at scale 0.02); the first profile's run writes them, the second finds and verifies them."""
    return tmp_path_factory.mktemp("rehearsal-cache")


@pytest.mark.slow
@pytest.mark.parametrize("profile", _help_profiles())
def test_every_profile_starts_its_first_notebook(profile, tmp_path, rehearsal_cache):
    """run_all.sh --profile P --max-notebooks 1: the first notebook really starts with the profile's parameters. The
    paper profiles have no real embeddings here (an empty cache root): notebook 00 starts and stops at the loader's
    error, which names the commands that make them. The rehearsal profiles write tiny rehearsal caches first (into
    a cache root the two share: written once)."""
    first = NOTEBOOKS[0]
    cache = rehearsal_cache if profile.startswith("rehearse-") else tmp_path / "cache"
    env = {"HUBNORM_RESULTS": str(tmp_path / "results"), "HUBNORM_CACHE": str(cache),
           "HUBNORM_REHEARSAL_SCALE": "0.02"}
    r = _run_all("--profile", profile, "--max-notebooks", "1", "--quiet", env=env)
    out = r.stdout + r.stderr
    results = tmp_path / "results" / ("" if profile == "default" else profile)
    assert f"run_all.sh: profile {profile} -> {results}/" in out, out
    assert f"{first}: running" in out, out
    executed = results / "notebooks" / f"{first}.ipynb"
    assert executed.exists(), out
    log = (results / "notebooks" / f"{first}.log").read_text()
    assert "Kernel is running over TCP" not in log
    ran = [ln for ln in r.stdout.splitlines() if re.match(r"^\d\d_\w+ +(\d+s|-) ", ln)]
    assert len(ran) == 1 and ran[0].startswith(first), out   # --max-notebooks 1: one notebook, nothing after it
    if profile.startswith("paper-"):
        assert r.returncode == 1 and "FAILED" in out, out
        assert "python -m hubnorm.data" in log, log[-3000:]   # the loader's error names the commands
    else:
        assert r.returncode == 0 and f"{first}" in out and " ok" in out, out
        summary = (results / "SUMMARY.md").read_text()   # every run writes its summary of claims and gains
        assert f"| {first} | ok |" in summary and (results / "SUMMARY.csv").exists(), summary
        text = executed.read_text()
        if profile.startswith("rehearse-"):
            ds = profile.split("-", 1)[1]
            assert f"cache:{ds}:synthetic-rehearsal:seed0-scale0.02" in text   # the profile's source reached it
            assert "synthetic rehearsal" in text


@pytest.mark.parametrize("args, line", [
    (["--profile", "paper-coco", "--only", "06"],
     "06_cross_encoder_reranking                   -   skipped: the simulated cross-encoder needs synthetic latents "
     "and the BLIP one needs the image files; run it by hand with -p cross_encoder blip once images are in place "
     "(see data/README.md)"),
], ids=["paper-06"])
def test_skips_come_from_the_notebooks_needs_with_the_old_lines(args, line, tmp_path):
    """The lines run_all.sh printed when its bash branches skipped a notebook, now from profiles.yaml."""
    r = _run_all(*args, "--quiet", env={"HUBNORM_RESULTS": str(tmp_path / "res")}, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert line in r.stdout.splitlines(), r.stdout
    assert "run_all.sh: all notebooks ok (1 skipped)" in r.stdout and ": running" not in r.stdout
    assert "(1 notebook matching --only 06)" in r.stdout, r.stdout   # the count of this run, not of the folder


def test_the_real_column_is_fetched_once_and_a_missing_release_is_one_note(monkeypatch, capsys, tmp_path):
    """run_all.sh fetches the real releases once (``fetch-real --optional``); what it cannot get is ONE NOTE for the
    whole run, and the notebooks' own NOTE lines about it are then not streamed again."""
    from hubnorm_tools import runner as rn
    from hubnorm_companion.reporting import REAL_MISSING_NOTE

    lines = ("coco500-clip-b16: cached (1 file, sha256 checked) -> /x\n"
             "NOTE: real release flickr8k-100x5-clip-b32 unavailable: offline\n"
             "NOTE: real release audiocaps-clap unavailable: offline\n")
    monkeypatch.setattr(rn.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, lines, ""))
    r = rn.Runner.__new__(rn.Runner)
    r.root, r.python = tmp_path, "python"
    r._fetch_real()
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("run_all.sh: real column: coco500-clip-b16")
    assert len([ln for ln in out if ln.startswith("NOTE:")]) == 1 and r.real_noted
    assert out[1].startswith(f"{REAL_MISSING_NOTE} flickr8k-100x5-clip-b32, audiocaps-clap:")

    import io

    class Proc:   # a notebook's output: its NOTE about the same releases is not shown again, nor a figure's repr
        stdout = io.BytesIO(f"{REAL_MISSING_NOTE} audiocaps-clap: not on this machine\nR@1 60.00\n"
                            "<Figure size 1008x427.5 with 2 Axes>\n<Figure of R@1> stays\n".encode())
    st = rn._Streamer(Proc, tmp_path / "log", "  08| ", True, skip=(REAL_MISSING_NOTE.encode(),))
    st.join()
    shown = capsys.readouterr().out
    assert "R@1 60.00" in shown and REAL_MISSING_NOTE not in shown
    assert "<Figure size" not in shown and "<Figure of R@1> stays" in shown
    assert REAL_MISSING_NOTE in (tmp_path / "log").read_text()   # the log keeps it
