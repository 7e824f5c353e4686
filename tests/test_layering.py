"""Two packages, one-way: the hubnorm library never imports the notebooks' companion package (``hubnorm_companion``).

The library is every module under ``lib/hubnorm`` (embeddings and tasks, normalizers and engines, evaluation and
hubness measures, encoders and caches, data loading): what a user calls on their own data. The companion
(``companion/hubnorm_companion``: the papers' protocols, studies, published comparisons, notebook set-up and
figures) is a distribution of its own that imports the library, never the reverse.

Two checks:

* static (:func:`companion_references`): every ``import`` / ``from ... import`` anywhere in a library module
  (module level or inside a function, relative imports resolved) and every string passed to
  ``importlib.import_module``, ``__import__`` or ``importlib.util.find_spec`` (a relative name resolved against its
  ``package=`` argument or the module's own package) must not name ``hubnorm_companion`` or a module under it;
* dynamic: in a fresh interpreter with only ``lib/`` on the path, ``import hubnorm`` and then every importable
  library module loads no ``hubnorm_companion*`` module (``sys.modules``).
"""
import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parents[1] / "lib"
PKG = LIB / "hubnorm"
COMPANION = "hubnorm_companion"
_IMPORTLIB_CALLS = {"import_module", "__import__", "find_spec"}


def _module(path: Path) -> str:
    parts = list(path.relative_to(LIB).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(relative: str, package: str) -> str:
    """``importlib.util.resolve_name`` without importing anything: ``..x`` in package ``a.b`` is ``a.x``."""
    level = len(relative) - len(relative.lstrip("."))
    base = package.split(".")
    if level > len(base):
        return relative
    base = base[:len(base) - level + 1]
    rest = relative[level:]
    return ".".join(base + ([rest] if rest else []))


def companion_references(source: str, module: str, is_package: bool = False, layer: str = COMPANION) -> list:
    """``(line, what)`` for every reference of ``source`` (the text of module ``module``) to the companion
    (or to the package ``layer``)."""
    package = module if is_package else module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = _absolute("." * node.level + (node.module or ""), package) if node.level else (node.module or "")
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in _IMPORTLIB_CALLS and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                text = node.args[0].value
                pkg = package
                for kw in node.keywords:
                    if kw.arg == "package" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                        pkg = kw.value.value
                if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and name != "__import__":
                    pkg = node.args[1].value if isinstance(node.args[1].value, str) else pkg
                targets = [_absolute(text, pkg) if text.startswith(".") else text]
        found += [(node.lineno, t) for t in targets if t == layer or t.startswith(layer + ".")]
    return found


def _core_modules():
    for path in sorted(PKG.rglob("*.py")):
        yield _module(path), path


def test_the_companion_is_a_package_of_its_own():
    core = dict(_core_modules())
    companion = LIB.parent / "companion" / "hubnorm_companion"
    assert (companion / "__init__.py").is_file() and (companion.parent / "pyproject.toml").is_file()
    left = sorted(p.name for p in (PKG / "experiments").rglob("*.py"))   # git leaves an ignored __pycache__ behind
    assert not left, f"the notebooks' machinery lives in companion/, not in the library: {left}"
    assert {"hubnorm", "hubnorm.normalizers.nnn", "hubnorm.evaluation", "hubnorm.data.cache"} <= set(core)
    moved = ("protocol", "studies", "compare", "notebook", "reporting", "parameters", "calibration", "figures",
             "rerank_study", "rerank_cost")
    for name in moved:   # the notebook and paper machinery lives in the companion only
        assert not (PKG / f"{name}.py").exists() and (companion / f"{name}.py").is_file(), name
    assert not (PKG / "rerank" / "study.py").exists() and not (PKG / "rerank" / "cost.py").exists()


def test_no_library_module_imports_the_companion():
    bad = []
    for name, path in _core_modules():
        for line, target in companion_references(path.read_text(encoding="utf-8"), name,
                                                   path.name == "__init__.py"):
            bad.append(f"{path.relative_to(LIB)}:{line} imports {target}")
    assert not bad, "the library must not import hubnorm_companion:\n" + "\n".join(bad)


def test_no_hubnorm_module_imports_the_checkouts_tooling():
    """Neither hubnorm nor the companion imports ``hubnorm_tools`` (tools/: run_all.sh's runner, its profiles, the
    kernel provisioner), which is not part of the package: ``pip install hubnorm`` works without it."""
    companion = LIB.parent / "companion"
    bad = []
    for root in (LIB, companion):   # the library and the companion: neither ships the tooling
        for path in sorted((root / ("hubnorm" if root == LIB else "hubnorm_companion")).rglob("*.py")):
            name = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
            bad += [f"{path.relative_to(root.parent)}:{line} imports {target}"
                    for line, target in companion_references(path.read_text(encoding="utf-8"), name,
                                                             path.name == "__init__.py", layer="hubnorm_tools")]
    assert not bad, "hubnorm and the companion must not import the checkout's tooling:\n" + "\n".join(bad)
    assert companion_references("def f():\n    from hubnorm_tools import runner\n", "hubnorm.cli",
                                  layer="hubnorm_tools")   # the scan sees it


@pytest.mark.parametrize("module, is_pkg, source", [
    ("hubnorm.selection", False, "import hubnorm_companion.protocol as pr\n"),
    ("hubnorm.selection", False, "def f():\n    from hubnorm_companion import protocol\n"),
    ("hubnorm.selection", False, "import importlib\nm = importlib.import_module('hubnorm_companion.studies')\n"),
    ("hubnorm.data.cli", False, "import importlib.util\nimportlib.util.find_spec('hubnorm_companion')\n"),
    ("hubnorm.media", False, "m = __import__('hubnorm_companion.compare')\n"),
], ids=["absolute", "function-level from", "importlib string", "find_spec", "__import__"])
def test_the_scan_sees_every_kind_of_import(module, is_pkg, source):
    """A test of the test: each way of importing the companion is caught."""
    assert companion_references(source, module, is_pkg), source


def test_the_scan_does_not_flag_core_imports():
    src = "from ..rerank import cost_free\nimport importlib\nimportlib.import_module('hubnorm.data.encode')\n" \
          "import hubnorm_companionx\nimportlib.import_module('hubnorm_companion_extra')\n" \
          "from . import hubnorm_companion\n"   # near misses: other names, and a submodule of hubnorm.rerank
    assert companion_references(src, "hubnorm.rerank.simulated") == []


_PROBE = r"""
import importlib, json, sys
import hubnorm
after_root = sorted(m for m in sys.modules if m == "hubnorm_companion" or m.startswith("hubnorm_companion."))
skipped = {}
for name in json.loads(sys.argv[1]):   # every core module (found on disk: pkgutil would import the packages)
    try:
        importlib.import_module(name)
    except ImportError as e:   # an optional dependency (faiss, open_clip, transformers, ...) that is not installed
        if (e.name or "").startswith("hubnorm"):
            raise
        skipped[name] = e.name
loaded = sorted(m for m in sys.modules if m == "hubnorm_companion" or m.startswith("hubnorm_companion."))
print(json.dumps({"after_root": after_root, "loaded": loaded, "skipped": skipped,
                  "core": sorted(m for m in sys.modules if m.startswith("hubnorm"))}))
"""


def test_importing_the_library_loads_no_companion_module():
    env_path = str(LIB)
    core = [name for name, _ in _core_modules() if not name.endswith("__main__")]
    out = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(core)], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "PYTHONPATH": env_path, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["after_root"] == [], f"`import hubnorm` loaded {res['after_root']}"
    assert res["loaded"] == [], f"importing the core modules loaded {res['loaded']}"
    assert len(res["core"]) > 40, res["core"]   # the probe really imported the core


_LAZY_PROBE = r"""
import json, sys
import hubnorm, hubnorm.data
from hubnorm_tools import profiles
profiles.load_profiles()
light = {"torch": "torch" in sys.modules}
import hubnorm.normalizers
names = {n: type(getattr(hubnorm, n)).__name__ for n in hubnorm.__all__}
data = {n: type(getattr(hubnorm.data, n)).__name__ for n in hubnorm.data.__all__}
print(json.dumps({**light, "normalizers": hubnorm.normalizers.__all__, "names": names, "data": data,
                  "module": type(hubnorm.geometry).__name__, "dir": sorted(set(hubnorm.__all__) - set(dir(hubnorm)))}))
"""


def test_import_hubnorm_and_the_runner_profiles_load_without_torch_and_every_name_resolves():
    """``import hubnorm``, ``import hubnorm.data`` and run_all.sh's profiles load without torch (PEP 562: each public
    name is imported on first use), so the runner and the CLIs start in a fraction of a second; every name of both
    ``__all__`` lists then resolves, the root's normalizer names are exactly ``hubnorm.normalizers.__all__``, a
    submodule is reachable as an attribute and ``dir()`` lists every public name."""
    tools = LIB.parent / "tools"
    out = subprocess.run([sys.executable, "-c", _LAZY_PROBE], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "PYTHONPATH": f"{LIB}:{tools}", "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["torch"] is False, "import hubnorm / hubnorm.data / the run profiles imported torch"
    import hubnorm
    assert set(res["normalizers"]) <= set(hubnorm.__all__)
    assert {n for n, m in hubnorm._EXPORTS.items() if m == "normalizers"} == set(res["normalizers"])
    assert set(res["names"]) == set(hubnorm.__all__) and set(res["data"]) == set(hubnorm.data.__all__)
    assert res["module"] == "module" and res["dir"] == []
    import hubnorm.data.fetch
    import hubnorm.hubness
    # a function named like its submodule stays the function once the submodule is imported (as `from .x import x`)
    assert callable(hubnorm.hubness) and hubnorm.hubness is hubnorm.hubness.__globals__["hubness"]
    assert callable(hubnorm.data.fetch) and hubnorm.data.fetch.__module__ == "hubnorm.data.fetch"
    # every exported name that is also a submodule of its package (hubness, fetch, rehearse) is one of those functions
    for pkg in (hubnorm, hubnorm.data):
        subs = {p.stem for p in Path(pkg.__file__).parent.glob("*.py")} | {
            p.parent.name for p in Path(pkg.__file__).parent.glob("*/__init__.py")}
        for name in sorted(set(pkg._EXPORTS) & subs):
            importlib.import_module(f"{pkg.__name__}.{name}")
            fn = getattr(pkg, name)
            assert callable(fn) and fn.__module__ == f"{pkg.__name__}.{name}", \
                f"{pkg.__name__}.{name} is the submodule, not the exported function"
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        hubnorm.no_such_name
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        hubnorm.data.no_such_name
