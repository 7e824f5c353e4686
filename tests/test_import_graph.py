"""The import graph of hubnorm is layered and acyclic, deferred (function-level) imports and package roots included.

How it is checked: every ``import`` / ``from ... import`` statement anywhere in a module of ``lib/hubnorm`` or of
the notebooks' companion package (``companion/hubnorm_companion``, the top layer), module level or inside a function,
that names another hubnorm module becomes an edge of a directed graph. Packages are nodes too (their ``__init__``
re-exports are edges, the lazy ones of an ``_EXPORTS`` map included), so a cycle through a package facade is caught.

Two graphs:

* the module graph (:func:`_graph`): an import of one's own *ancestor* package is not an edge;
* the strict graph (:func:`_strict_graph`): ``from <package> import <name>`` is an edge to the package whenever
  ``<name>`` is not a submodule -- it reads the package's ``__init__`` namespace, *ancestors included*
  (``from .. import __version__`` in ``hubnorm.data.cache`` is an edge to the package root ``hubnorm``, which imports
  everything: the cycle ``hubnorm -> datasets -> data -> data.cache -> hubnorm`` of issue 21);
  ``from . import cache`` is an edge to the submodule only.

The strict graph must be acyclic and respect :data:`LAYERS`: a module imports only modules of its own layer or
below (nothing in ``data/`` imports a module above ``data/``); every module must be placed in a layer.
"""

import ast
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "lib"
PKG = LIB / "hubnorm"
#: the notebooks' companion package, the layer above the library (its own distribution, companion/)
COMPANION = LIB.parent / "companion"


def _module(path: Path) -> str:
    parts = list(path.relative_to(COMPANION if path.is_relative_to(COMPANION) else LIB).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


_FILES = sorted(PKG.rglob("*.py")) + sorted((COMPANION / "hubnorm_companion").rglob("*.py"))
MODULES = {_module(p): p for p in _FILES}
PACKAGES = {_module(p) for p in _FILES if p.name == "__init__.py"}


def _resolve(here: str, is_pkg: bool, node) -> list:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.startswith("hubnorm")]
    base = here if is_pkg else here.rsplit(".", 1)[0]
    if node.level:
        for _ in range(node.level - 1):
            base = base.rsplit(".", 1)[0]
        mod = f"{base}.{node.module}" if node.module else base
    else:
        mod = node.module or ""
    if not mod.startswith("hubnorm"):
        return []
    out = [mod]
    for a in node.names:  # `from . import x` may name a submodule
        if f"{mod}.{a.name}" in MODULES:
            out.append(f"{mod}.{a.name}")
    return out


def _lazy_exports(name: str, tree) -> set:
    """The submodules a package facade loads on first use (PEP 562): the module names of its ``_EXPORTS`` map
    (``"name": "module"`` entries and ``dict.fromkeys([...], "module")``): edges as real as an eager re-export."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in node.targets):
            for sub in ast.walk(node.value):
                if isinstance(sub, ast.Dict):
                    out.update(v.value for k, v in zip(sub.keys, sub.values)
                               if k is not None and isinstance(v, ast.Constant) and isinstance(v.value, str))
                elif isinstance(sub, ast.Call) and len(sub.args) == 2 and isinstance(sub.args[1], ast.Constant):
                    out.add(sub.args[1].value)
    return {f"{name}.{m}" for m in out if f"{name}.{m}" in MODULES}


def _graph() -> dict:
    graph = {}
    for name, path in MODULES.items():
        is_pkg = name in PACKAGES
        edges = set()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if is_pkg:
            edges |= _lazy_exports(name, tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _resolve(name, is_pkg, node):
                    ancestor = target in PACKAGES and (name + ".").startswith(target + ".")
                    if target in MODULES and target != name and not ancestor:
                        edges.add(target)
        graph[name] = edges
    return graph


def _cycle(graph: dict):
    state, stack = {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        state[n] = 2
        stack.pop()
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def _strict_graph() -> dict:
    graph = {}
    for name, path in MODULES.items():
        is_pkg = name in PACKAGES
        base = name if is_pkg else name.rsplit(".", 1)[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        edges = _lazy_exports(name, tree) if is_pkg else set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("hubnorm")]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    mod = base
                    for _ in range(node.level - 1):
                        mod = mod.rsplit(".", 1)[0]
                    mod = f"{mod}.{node.module}" if node.module else mod
                else:
                    mod = node.module or ""
                if not mod.startswith("hubnorm"):
                    continue
                targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES else mod for a in node.names]
            else:
                continue
            edges.update(t for t in targets if t in MODULES and t != name)
        graph[name] = edges
    return graph


#: Layers, lowest first: a module may import modules of its own layer or of a lower one (fnmatch patterns).
LAYERS = [
    ("leaves", ["hubnorm._version", "hubnorm._lazy", "hubnorm._env", "hubnorm._validation", "hubnorm.progress",
                "hubnorm.kernels"]),
    ("containers, the block protocol and its engines",
     ["hubnorm.retrieval", "hubnorm.embeddings", "hubnorm.synthetic", "hubnorm.evaluation", "hubnorm.blocks",
      "hubnorm.matrices", "hubnorm.score_checks", "hubnorm.engine", "hubnorm.distributed", "hubnorm.provenance"]),
    ("data", ["hubnorm.data", "hubnorm.data.*"]),
    ("methods", ["hubnorm.normalizers", "hubnorm.normalizers.*", "hubnorm.registry", "hubnorm.index", "hubnorm.index.*",
                 "hubnorm.hubness", "hubnorm.geometry", "hubnorm.scores"]),
    ("applications", ["hubnorm.datasets", "hubnorm.sweeps", "hubnorm.selection", "hubnorm.media", "hubnorm.forensics",
                      "hubnorm.adversarial", "hubnorm.label_free", "hubnorm.listwise", "hubnorm.listwise.*",
                      "hubnorm.rerank", "hubnorm.rerank.*", "hubnorm.cli", "hubnorm.__main__"]),
    ("package root", ["hubnorm"]),
    # the notebooks' companion package: the papers' protocols, studies, published comparisons, notebook set-up
    # (companion/; tests/test_layering.py)
    ("companion", ["hubnorm_companion", "hubnorm_companion.*"]),
]


def _layer(module: str):
    from fnmatch import fnmatchcase
    for rank, (_, patterns) in enumerate(LAYERS):
        if any(fnmatchcase(module, p) for p in patterns):
            return rank
    return None


def test_every_module_has_a_layer_and_imports_only_its_layer_or_below():
    graph = _strict_graph()
    unplaced = sorted(m for m in graph if _layer(m) is None)
    assert not unplaced, f"place these modules in a layer of LAYERS: {unplaced}"
    upward = sorted(f"{a} ({LAYERS[_layer(a)][0]}) -> {b} ({LAYERS[_layer(b)][0]})"
                    for a, targets in graph.items() for b in targets if _layer(b) > _layer(a))
    assert not upward, "imports of a higher layer:\n" + "\n".join(upward)


def test_no_cycle_counting_package_roots():
    cycle = _cycle(_strict_graph())
    assert cycle is None, "import cycle (package roots counted): " + " -> ".join(cycle)


def test_the_strict_scan_counts_function_level_imports_and_package_roots(tmp_path, monkeypatch):
    """A test of the test: the issue-21 edges of the old code are seen, and they do break the checks."""
    graph = _strict_graph()
    assert "hubnorm.data.encoders.sentence" in graph["hubnorm.data.cli"]  # a function-level import counts
    assert "hubnorm.data.registry" in graph["hubnorm.data.cli"] and "hubnorm.data" not in graph["hubnorm.data.cli"]
    old = dict(graph)
    old["hubnorm.data.cache"] = graph["hubnorm.data.cache"] | {"hubnorm"}  # `from .. import __version__`
    assert _cycle(old) is not None
    old["hubnorm.data.cli"] = graph["hubnorm.data.cli"] | {"hubnorm.datasets"}
    assert any(_layer(b) > _layer("hubnorm.data.cli") for b in old["hubnorm.data.cli"])


def test_version_comes_from_a_leaf_and_shims_are_gone():
    import tomllib
    import hubnorm
    from hubnorm import _version

    assert not (PKG / "_ops.py").exists(), "the _ops shim is gone: import hubnorm.kernels"
    assert not _strict_graph()["hubnorm._version"]  # a leaf
    assert hubnorm.__version__ == _version.__version__
    pyproject = tomllib.loads((LIB.parent / "pyproject.toml").read_text())
    assert _version.__version__ == pyproject["project"]["version"]


def test_the_scan_sees_the_known_edges():
    graph = _graph()
    assert "hubnorm.embeddings" in graph["hubnorm.data.local"]
    assert "hubnorm.synthetic" in graph["hubnorm.data.sources"]  # a deferred import counts
    assert "hubnorm.data.sources" in graph["hubnorm.datasets"]
    assert "hubnorm.normalizers" in graph["hubnorm.registry"]  # an import of a package facade counts
    assert "hubnorm.data.local" in graph["hubnorm.data"]  # and the facade's re-exports
    assert len(graph) > 40


def test_no_import_cycle():
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
