"""No library module outside a method's own file and the registry branches on a method's name (issue 21).

A method is one file (``lib/hubnorm/normalizers/<method>.py``) plus one registry line: engines, sweeps, selection
and the rest read what they need off the registered class. The scan (AST, every module of ``lib/hubnorm``) flags,
outside ``normalizers/`` and ``registry.py``:

* a comparison with a registry name (``method == "nnn"``, ``kind in ("sn", "dbsn")``, ``name != "raw"``);
* a ``match`` case on a registry name;
* a dict literal keyed by a registry name (a dispatch table such as ``{"nnn": ..., "is": ...}``).

Docstrings, messages and default arguments that *list* methods to run (a notebook study's ``methods=("sn",
"dbsn")``) are not branches and are not flagged. A test of the test checks that the scan catches the branches the
library had before issue 21.
"""

import ast
from pathlib import Path

import hubnorm as hn

LIB = Path(__file__).resolve().parents[1] / "lib" / "hubnorm"
#: where method names may be branched on: a method's own file, and the registry
ALLOWED = {"registry.py"} | {p.name for p in (LIB / "normalizers").glob("*.py")}


def _names_in(node, names):
    """Registry names among the string constants of ``node`` (a constant, or a tuple/list/set of constants)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value] if node.value in names else []
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [n for e in node.elts for n in _names_in(e, names)]
    return []


def branches_on_names(source: str, names) -> list:
    """``(line, what)`` for every comparison, match case or dict key on a registry name in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                found += [(node.lineno, f"compares with {n!r}") for n in _names_in(side, names)]
        elif isinstance(node, ast.match_case):
            found += [(node.pattern.lineno, f"matches {n!r}") for sub in ast.walk(node.pattern)
                      if isinstance(sub, ast.MatchValue) for n in _names_in(sub.value, names)]
        elif isinstance(node, ast.Dict):
            found += [(node.lineno, f"dispatches on {n!r}") for k in node.keys if k is not None
                      for n in _names_in(k, names)]
    return found


def test_no_module_outside_the_methods_and_registry_branches_on_a_method_name():
    names = set(hn.NORMALIZERS)
    assert {"nnn", "sn", "dbsn", "dis", "raw"} <= names
    problems = []
    files = sorted(LIB.rglob("*.py"))
    assert len(files) > 40
    for path in files:
        if path.parent == LIB / "normalizers" or path.relative_to(LIB).as_posix() in ALLOWED:
            continue
        for line, what in branches_on_names(path.read_text(encoding="utf-8"), names):
            problems.append(f"{path.relative_to(LIB.parent)}:{line}: {what}")
    assert not problems, "method names branched on outside the method files and the registry:\n" + "\n".join(problems)


def test_the_scan_catches_the_branches_of_the_old_code():
    names = set(hn.NORMALIZERS)
    old = (
        'if method == "nnn":\n    pass\n'                                      # selection.k_limit
        'elif method in ("sn", "dbsn"):\n    pass\n'                           # sweeps.tau_grid_table
        'SWEEP_FIXED_PARAMS = {"nnn": set(), "is": set()}\n'                   # sweeps
        'if kind != "dbsn":\n    pass\n'
        'match m:\n    case "dis":\n        pass\n'
    )
    found = branches_on_names(old, names)
    assert sorted(line for line, _ in found) == [1, 3, 3, 5, 5, 6, 9]
    assert branches_on_names('"""nnn, sn and dbsn"""\nx = f(methods=("sn", "dbsn"))\n', names) == []
