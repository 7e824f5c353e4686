"""No hubnorm module uses another hubnorm module's private names.

The rule (checked by an AST scan of every file under ``lib/hubnorm``, nothing skipped):

* a name that starts with one underscore (``_score_blocks``, ``_pack_rows``) is private to the module that
  defines it: no other hubnorm module may import it (``from .evaluation import _score_blocks``) or reach it
  through an imported module (``from . import cache as c; c._helper``);
* dunder names (``__version__``) are public;
* private *modules* with public names are fine: ``_validation`` is shared on purpose, so
  ``from ._validation import check_positive_int`` is allowed (the underscore marks the module as not part of the
  user-facing API, not its functions as private to it).

A test of the test checks that the scan does catch both kinds of violation.
"""

import ast
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "lib" / "hubnorm"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_name(path: Path) -> str:
    rel = path.relative_to(LIB.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _resolve(node: ast.ImportFrom, here: str, is_package: bool) -> str:
    """Absolute dotted name of the module an ImportFrom reads from."""
    if node.level == 0:
        return node.module or ""
    base = here.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def violations(source: str, here: str, is_package: bool = False):
    """``(line, description)`` for every cross-module use of a private hubnorm name in ``source``."""
    tree = ast.parse(source)
    found, module_aliases = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            src = _resolve(node, here, is_package)
            if not (src == "hubnorm" or src.startswith("hubnorm.")):
                continue
            for alias in node.names:
                if _private(alias.name) and src != here:
                    found.append((node.lineno, f"from {src} import {alias.name}"))
                # `from . import cache as _cache` binds a module: remember it for attribute checks
                module_aliases.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "hubnorm" or alias.name.startswith("hubnorm."):
                    module_aliases.add((alias.asname or alias.name).split(".")[0])
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name) \
                and node.value.id in module_aliases:
            found.append((node.lineno, f"{node.value.id}.{node.attr}"))
    return found


def test_the_scan_catches_violations():
    bad = (
        "from .evaluation import _score_blocks\n"
        "from hubnorm.kernels import _block_shape\n"
        "from . import cache as c\n"
        "x = c._helper\n"
        "from ._validation import check_positive_int\n"   # allowed: public name of a private module
        "from .. import __version__\n"                      # allowed: dunder
        "def _local():\n    return _local\n"                # allowed: own private name
    )
    found = violations(bad, "hubnorm.hubness")
    assert [d for _, d in found] == ["from hubnorm.evaluation import _score_blocks",
                                     "from hubnorm.kernels import _block_shape", "c._helper"]


def test_no_module_imports_another_modules_private_names():
    files = sorted(LIB.rglob("*.py"))
    assert len(files) > 20
    problems = []
    for path in files:
        here = _module_name(path)
        for line, what in violations(path.read_text(encoding="utf-8"), here, path.name == "__init__.py"):
            problems.append(f"{path.relative_to(LIB.parent)}:{line}: {what}")
    assert not problems, "private names used across modules (make them public or move them):\n" + "\n".join(problems)
