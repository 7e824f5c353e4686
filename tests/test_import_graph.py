"""No import cycle between hubnorm's modules, deferred (function-level) imports included.

How it is checked: every ``import`` / ``from ... import`` statement anywhere in a module of ``lib/hubnorm``
(module level or inside a function) that names another hubnorm module becomes an edge of a directed graph;
the graph must be acyclic. Packages are nodes too (their ``__init__`` re-exports are edges), so a cycle through a
package facade is caught; an import of one's own *ancestor* package (``from .. import __version__``) is not an
edge: the ancestor is already being initialised when its submodules load.
"""

import ast
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "lib"
PKG = LIB / "hubnorm"


def _module(path: Path) -> str:
    parts = list(path.relative_to(LIB).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in PKG.rglob("*.py")}
PACKAGES = {_module(p) for p in PKG.rglob("__init__.py")}


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


def _graph() -> dict:
    graph = {}
    for name, path in MODULES.items():
        is_pkg = name in PACKAGES
        edges = set()
        tree = ast.parse(path.read_text(encoding="utf-8"))
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


def test_the_scan_sees_the_known_edges():
    graph = _graph()
    assert "hubnorm.embeddings" in graph["hubnorm.data.local"]
    assert "hubnorm.synthetic" in graph["hubnorm.datasets"]  # a deferred import counts
    assert "hubnorm.data" in graph["hubnorm.datasets"]  # an import of a package facade counts
    assert "hubnorm.data.local" in graph["hubnorm.data"]  # and the facade's re-exports
    assert len(graph) > 40


def test_no_import_cycle():
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
