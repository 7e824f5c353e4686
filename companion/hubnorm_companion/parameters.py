"""The notebooks' parameter rules: a small language, read from each notebook's own ``parameters`` cell.

A parameter is one line of the cell (papermill's format; ``papermill --help-notebook`` shows the comment as help)::

    name: type = default  # RULE -- help text

RULE, with the annotated type (an ``int`` parameter's bounds check integers):

- bounds: ``> 0``, ``< n_points`` (another parameter of the cell, once it has its type), ``at least 1``,
  ``at most 2``, ``in (0, 1]``; a bound checks a finite number unless ``int`` precedes it (``int at least 1``).
  No ``>=``: papermill skips a line holding two ``=``;
- a type: ``int``, ``number``, ``float``, ``str`` (not empty), ``bool``, ``list``, ``dict`` (string keys);
- alternatives: ``'float64' | 'float32'``, ``None | at least 1``, ``'auto' | published nnn model``;
- ``list of RULE``: a non-empty list of distinct values; ``, may be empty``, ``, may repeat``, ``, length 2``,
  ``, length at least 2``, ``, contains 10`` change that;
- ``{alpha: > 0, k: int at least 1}``: a dict with exactly these keys; ``subset of NAME``: a non-empty list of
  distinct values of the list parameter NAME;
- ``in NAME``: one of the values of the list parameter NAME (``tau: > 0, in taus``);
- the named types (``source``, ``real sources``, ``sources or auto``, ``sizes``, ``offset methods``, ``grids of
  methods`` (a grid for every method of ``methods``)) and
  ``published nnn|dbsn model|dataset`` (the names of the published tables, read when checked).

:func:`cell_rules` reads a cell (``ast`` and ``tokenize``), :func:`validate` checks a notebook's values (``nb.setup``
calls it first), ``python -m hubnorm_companion.parameters notebooks > docs/parameters.md`` writes the reference.
"""

from __future__ import annotations

import ast
import io
import math
import operator
import re
import tokenize
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Mapping, NamedTuple, Optional, Tuple

__all__ = ["Param", "parse", "cell_rules", "is_parameters_cell", "notebook_cell", "validate", "markdown"]

#: ``check(value, values)``: the problem of ``value`` (None: valid); ``values``: the cell's parameters, by name.
Check = Callable[[Any, Mapping[str, Any]], Optional[str]]


class TypeProblem(str):
    """A check's problem that is a wrong type (:func:`validate` raises TypeError when every problem is one)."""


def _wrong_type(what: str, v) -> TypeProblem:
    return TypeProblem(f"must be {what}; got {type(v).__name__} {v!r}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))


def _number(v, ns):   # a number that is not finite has the right type and a wrong value
    a_number = isinstance(v, (int, float)) and not isinstance(v, bool)
    return None if _is_num(v) else (str if a_number else TypeProblem)(_wrong_type("a finite number", v))


TYPES: Dict[str, Check] = {
    "int": lambda v, ns: None if _is_int(v) else _wrong_type("an integer", v),
    "number": _number, "float": _number,
    "bool": lambda v, ns: None if isinstance(v, bool) else _wrong_type("True or False", v),
    "str": lambda v, ns: (_wrong_type("a string", v) if not isinstance(v, str) else
                          None if v else f"must not be empty; got {v!r}"),
    "list": lambda v, ns: None if isinstance(v, (list, tuple)) else _wrong_type("a list", v),
    "dict": lambda v, ns: (_wrong_type("a dict", v) if not isinstance(v, Mapping) else
                           None if all(isinstance(k, str) for k in v) else f"must have string keys; got {dict(v)!r}"),
}
_OPS = {">": (operator.gt, ">"), "<": (operator.lt, "<"), "at least": (operator.ge, ">="),
        "at most": (operator.le, "<=")}


def _bound(op: str, ref) -> Check:
    """``value op ref``; ``ref`` a number or the name of another parameter (skipped while that one is no number)."""
    test, sym = _OPS[op]
    def check(v, ns):
        lim = ns.get(ref) if isinstance(ref, str) else ref
        shown = f"{ref} ({lim})" if isinstance(ref, str) else lim if _is_int(lim) else f"{lim:g}"
        return None if not _is_num(lim) or test(v, lim) else f"must be {sym} {shown}; got {v!r}"
    return check


def _all(*checks: Check) -> Check:
    return lambda v, ns: next((p for p in (c(v, ns) for c in checks) if p), None)


def _list(elem: Check, *, min_len: int = 1, max_len: Optional[int] = None, unique: bool = True,
          contains: Tuple = ()) -> Check:
    def check(v, ns):
        if not isinstance(v, (list, tuple)):
            return _wrong_type("a list", v)
        if len(v) < min_len:
            return f"must hold at least {min_len} value{'s' if min_len > 1 else ''}; got {list(v)!r}"
        if max_len is not None and len(v) > max_len:
            return f"must hold at most {max_len} values; got {list(v)!r}"
        for x in v:
            problem = elem(x, ns)
            if problem:
                return f"has an invalid entry {x!r}: {problem.split('; got')[0]}"
        if unique and len({repr(x) for x in v}) != len(v):
            return f"must not repeat a value; got {list(v)!r}"
        missing = [m for m in contains if m not in v]
        return f"must contain {missing}; got {list(v)!r}" if missing else None
    return check


def _dict(fields: Mapping[str, Check], required=None) -> Check:
    """A dict of these keys only (all of them, unless ``required`` names fewer)."""
    required = list(fields) if required is None else list(required)
    def check(v, ns):
        if not isinstance(v, Mapping):
            return _wrong_type("a dict", v)
        unknown = [k for k in v if k not in fields]
        if unknown:
            return f"has unknown key(s) {unknown}; known: {sorted(fields)}"
        missing = [k for k in required if k not in v]
        if missing:
            return f"needs the key(s) {missing}"
        for k, x in v.items():
            problem = fields[k](x, ns)
            if problem:
                return type(problem)(f"[{k!r}] {problem}")   # a wrong type inside stays a wrong type
        return None
    return check


def _any(choices: list, checks: list) -> Check:
    """One of ``choices`` (literals, or a function of the names: :func:`_published`) or a value some check of
    ``checks`` passes (the last one's problem is reported)."""
    def check(v, ns):
        known = [n for c in choices for n in (c() if callable(c) else [c])]
        if (v is None or isinstance(v, str)) and v in known:
            return None
        problems = [c(v, ns) for c in checks]
        if problems:
            return None if None in problems else problems[-1]
        return f"must be one of {[n for n in known if n is not None]}; got {v!r}"
    return check


def _published(paper: str, column: str):
    """The names of ``paper``'s published tables in ``column``, read when checked (the package data)."""
    from . import protocol

    return lambda: protocol.published_names(column, paper)


def _source(v, ns):
    from hubnorm.data.sources import SOURCE_KINDS   # the kinds' one table (stdlib only: no torch here)

    kinds = [f"{k}:" for k in SOURCE_KINDS]
    if isinstance(v, str) and v.startswith(tuple(kinds)) and v not in kinds:
        return None
    forms = [repr(k.form) for k in SOURCE_KINDS.values()]
    return f"must be a source string {', '.join(forms[:-1])} or {forms[-1]}; got {v!r}"


def _real_source(v, ns):
    from hubnorm.data.real import RELEASES

    return None if isinstance(v, str) and v.startswith("real:") and v[len("real:"):] in RELEASES else \
        f"must be 'real:<release>', <release> one of {sorted(RELEASES)}; got {v!r}"


def _real_sources(v, ns):
    """['auto'] alone, or a list of real release sources (the notebook checks their modality)."""
    if isinstance(v, (list, tuple)) and "auto" in v:
        return None if list(v) == ["auto"] else \
            f"must be ['auto'] alone, or a list of 'real:<release>' strings without 'auto'; got {list(v)!r}"
    return _list(_real_source, min_len=0)(v, ns)


def _offset_methods(v, ns):
    """Offset methods by label: ``{label: [registry name, {parameter: value}]}``; a label is a non-empty string
    other than "raw" (the raw scores' rows carry that one)."""
    if not (isinstance(v, Mapping) and v and all(
            isinstance(x, (list, tuple)) and len(x) == 2 and isinstance(x[0], str) and isinstance(x[1], Mapping)
            for x in v.values())):
        return f"must be a non-empty {{label: [name, {{params}}]}}; got {v!r}"
    bad = [k for k in v if not isinstance(k, str) or not k.strip() or k.strip().lower() == "raw"]
    return None if not bad else f"has label(s) {bad}: each label is a non-empty string other than 'raw'"


def _grids_of(name: str) -> Check:
    """A ``{method name: {parameter: [values]}}`` dict with a grid for every method of the offset-methods
    parameter ``name``."""
    def check(v, ns):
        if not isinstance(v, Mapping) or not all(isinstance(k, str) and isinstance(g, Mapping) and g and all(
                isinstance(vals, (list, tuple)) and vals for vals in g.values()) for k, g in v.items()):
            return f"must be {{method name: {{parameter: [values, ...]}}}}; got {v!r}"
        methods = ns.get(name)
        missing = sorted({m[0] for m in methods.values() if m[0] not in v}) if isinstance(methods, Mapping) else []
        return None if not missing else f"has no grid for {missing}, a method of {name}: add one for each"
    return check


def _sources_or_auto(v, ns):
    """['auto'] alone, or a list (possibly empty) of source strings."""
    if isinstance(v, (list, tuple)) and "auto" in v:
        return None if list(v) == ["auto"] else f"must be ['auto'] alone, or a list of sources without 'auto'; got {list(v)!r}"
    return _list(_source, min_len=0)(v, ns)


def _subset(name: str) -> Check:
    """A non-empty list of distinct values of the list parameter ``name``."""
    return _list(lambda x, ns: None if not isinstance(ns.get(name), list) or x in ns[name] else
                 f"must be among {name} {ns[name]}")


_SIZE = {"n_train_images": 0, "n_test_images": 1, "n_val_images": 0}
#: The named types: ``(type, check)``.
NAMED: Dict[str, Tuple[str, Check]] = {
    "source": ("str", _source),
    "real sources": ("list", _real_sources),
    "sizes": ("dict", _dict({k: _all(TYPES["int"], _bound("at least", lo)) for k, lo in _SIZE.items()}, ())),
    "offset methods": ("dict", _offset_methods),
    "grids of methods": ("dict", _grids_of("methods")),
    "sources or auto": ("list", _sources_or_auto),
}


# ---------------------------------------------------------------------------------------------- the parser
def _split(text: str, sep: str) -> list:
    """``text`` split at ``sep`` outside quotes and brackets (any of ``([{`` open, ``)]}`` close: ``(0, 1]``)."""
    parts, cur, depth, quote = [], "", 0, None
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{" or ch in ")]}":
            depth += 1 if ch in "([{" else -1
        elif ch == sep and depth == 0:
            parts, cur = parts + [cur.strip()], ""
            continue
        cur += ch
    return parts + [cur.strip()]


def _ref(text: str):
    return text if text.isidentifier() else ast.literal_eval(text)


def _member(name: str) -> Check:
    """A value among those of the list parameter ``name`` (``tau: > 0, in taus``)."""
    return lambda v, ns: None if not isinstance(ns.get(name), list) or v in ns[name] else \
        f"must be one of {name} {ns[name]} (the values the notebook runs); got {v!r}"


def _bounds(text: str) -> list:
    m = re.fullmatch(r"in\s+([A-Za-z_]\w*)", text)
    if m:
        return [_member(m[1])]
    m = re.fullmatch(r"(>|<|at least|at most)\s*(\S+)", text)
    if m:
        return [_bound(m[1], _ref(m[2]))]
    m = re.fullmatch(r"in\s*([(\[])\s*(\S+?)\s*,\s*(\S+?)\s*([)\]])", text)
    if m:
        return [_bound(">" if m[1] == "(" else "at least", _ref(m[2])),
                _bound("<" if m[4] == ")" else "at most", _ref(m[3]))]
    raise ValueError(f"cannot read {text!r} (a bound: > 0, < name, at least 1, at most 2, in (0, 1])")


def _list_rule(body: str) -> Check:
    opts: Dict[str, Any] = {"contains": ()}
    elem = []
    for part in _split(body, ","):
        m = re.fullmatch(r"length (at least )?(\d+)|contains (.+)", part)
        if part in ("may be empty", "may repeat"):
            opts.update({"may be empty": {"min_len": 0}, "may repeat": {"unique": False}}[part])
        elif m and m[3]:
            opts["contains"] += (ast.literal_eval(m[3]),)
        elif m:
            opts.update(min_len=int(m[2]), max_len=None if m[1] else int(m[2]))
        else:
            elem.append(part)
    return _list(parse(", ".join(elem))[1], **opts)


def _term(text: str, kind: Optional[str]) -> Tuple[str, Check]:
    """A rule without ``|``: list, subset, named type, dict of fields, or a type and bounds."""
    if text.startswith("list of "):
        return "list", _list_rule(text[len("list of "):])
    if text.startswith("subset of ") and text[len("subset of "):].isidentifier():
        return "list", _subset(text[len("subset of "):])
    if text in NAMED:
        return NAMED[text]
    if text.startswith("{") and text.endswith("}"):
        fields = dict(f.split(":", 1) for f in _split(text[1:-1], ","))
        return "dict", _dict({k.strip().strip("'\""): parse(r.strip())[1] for k, r in fields.items()})
    word, checks = None, []
    for part in _split(text, ","):
        m = re.fullmatch(r"(?:(int|number|float|str|bool|list|dict)\b)?\s*(.*)", part)
        if m[1] and word and m[1] != word:
            raise ValueError(f"two types in {text!r}")
        word = m[1] or word
        checks += _bounds(m[2]) if m[2] else []
    if word is None and not checks:
        raise ValueError(f"cannot read {text!r}")
    word = word or ("int" if kind == "int" else "number")
    return {"number": "float"}.get(word, word), _all(TYPES[word], *checks)


def parse(rule: str, kind: Optional[str] = None) -> Tuple[str, Check]:
    """``(type, check)`` of ``rule``; ``kind``: the parameter's annotated type (its bounds check an ``int``).
    ``type`` is what papermill should infer: int, float, str, bool, list, dict, or None (the rule allows only
    None). ``list of`` takes the rest of the rule: ``None | list of 't2i' | 'i2t'``."""
    alts = _split(rule.strip(), "|")
    lst = next((i for i, a in enumerate(alts) if a.startswith("list of ")), len(alts))
    alts = alts[:lst] + ([" | ".join(alts[lst:])] if lst < len(alts) else [])
    choices, checks, kinds = [], [], []
    for alt in alts:
        m = re.fullmatch(r"published (nnn|dbsn) (model|dataset)", alt)
        if alt == "None" or alt[:1] in ("'", '"') or m:
            choices.append(_published(m[1], m[2]) if m else ast.literal_eval(alt))
            kinds += [] if alt == "None" else ["str"]
        else:
            k, check = _term(alt, kind)
            kinds.append(k)
            checks.append(check)
    return (kinds or ["None"])[0], (checks[0] if len(alts) == 1 and checks else _any(choices, checks))


# ---------------------------------------------------------------------------------------------- the cell
class Param(NamedTuple):
    """One parameter of a cell: ``kind`` (its type), ``rule``, ``help``, ``default`` (its source), ``check``."""

    name: str
    kind: str
    rule: str
    help: str
    default: str
    check: Check

    @property
    def example(self) -> str:
        """A valid value to pass with ``-p``: the default."""
        text = self.default[1:-1] if re.fullmatch(r"'[^'\\]*'", self.default) else self.default
        return text if re.fullmatch(r"[\w.:/+-]+", text) else f'"{text}"'

    @property
    def how_to_pass(self) -> str:
        """papermill's option that passes the default: ``-p name value``, or for a list or dict (``-p`` passes
        those as a string) ``-y "name: value"`` (YAML)."""
        return f'-y "{self.name}: {self.default}"' if self.kind in ("list", "dict") else f"-p {self.name} {self.example}"


def _statements(source: str) -> Iterator[Tuple[ast.stmt, Optional[str]]]:
    """Each statement of ``source`` with the comment of its last line (papermill's help)."""
    comments = {t.start[0]: t.string for t in tokenize.generate_tokens(io.StringIO(source).readline)
                if t.type == tokenize.COMMENT}
    for node in ast.parse(source).body:
        yield node, comments.get(node.end_lineno)


def _target(node: ast.stmt) -> Optional[str]:
    target = node.target if isinstance(node, ast.AnnAssign) and node.value is not None else \
        node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
    return target.id if isinstance(target, ast.Name) else None


def is_parameters_cell(source: str) -> bool:
    """Every statement is ``name = value`` (annotated or not) and one at least has a comment."""
    try:
        stmts = list(_statements(source))
    except (SyntaxError, tokenize.TokenError, ValueError):
        return False
    return bool(stmts) and all(_target(n) for n, _ in stmts) and any(c for _, c in stmts)


def cell_rules(source: str, where: str = "the parameters cell") -> Dict[str, Param]:
    """``{name: Param}`` of a parameters cell: each line ``name: type = default  # RULE -- help``. A statement
    that is no parameter, a parameter without a rule comment or a rule that does not parse: ValueError naming the
    line."""
    out = {}
    for node, comment in _statements(source):
        name, line = _target(node), source.splitlines()[node.lineno - 1].strip()
        if name is None or not comment:
            raise ValueError(f"{where}, line {node.lineno} `{line}`: every line of a parameters cell must be "
                             "`name: type = default  # RULE -- help` (see hubnorm_companion.parameters)")
        rule, _, help_ = comment[1:].partition(" -- ")
        ann = ast.unparse(node.annotation) if isinstance(node, ast.AnnAssign) else None
        try:
            kind, check = parse(rule, ann)
        except (ValueError, SyntaxError) as exc:
            raise ValueError(f"{where}, line {node.lineno} `{line}`: its rule {rule.strip()!r}: {exc}") from None
        if ann is not None and kind != ann:
            raise ValueError(f"{where}, line {node.lineno} `{line}`: annotated {ann}, its rule's type is {kind}")
        out[name] = Param(name, kind, rule.strip(), help_.strip(), ast.unparse(node.value), check)
    return out


def notebook_cell(text: str) -> str:
    """The ``parameters`` cell of a jupytext percent source (``notebooks/NN_name.py``)."""
    m = re.search(r'^# %%[^\n]*"parameters"[^\n]*\n(.*?)(?=^# %%|\Z)', text, flags=re.M | re.S)
    if not m:
        raise ValueError('no `# %% tags=["parameters"]` cell')
    return m[1]


def validate(prefix: str, cell: str, values: Mapping[str, Any]) -> Dict[str, Any]:
    """Check the values (``values``: a notebook's ``globals()``) of the parameters that the cell ``cell`` of
    notebook ``prefix`` declares. Raises ValueError (TypeError when every problem is a wrong type) naming each bad
    parameter, its rule and a valid value; returns ``{name: value}`` of the parameters checked."""
    rules = cell_rules(cell, f"notebook {prefix}'s parameters cell")
    checked = {name: values[name] for name in rules if name in values}
    alone = {name: rules[name].check(v, {}) for name, v in checked.items()}   # no rule naming another yet
    known = {name: v for name, v in checked.items() if not isinstance(alone[name], TypeProblem)}
    problems = [(name, p) for name, v in checked.items() for p in [alone[name] or rules[name].check(v, known)] if p]
    if problems:
        lines = [f"notebook {prefix} parameter {name} {problem}; expected {rules[name].rule} "
                 f"(pass e.g. {rules[name].how_to_pass})" for name, problem in problems]
        raise (TypeError if all(isinstance(p, TypeProblem) for _, p in problems) else ValueError)("\n".join(lines))
    return checked


def markdown(folder) -> str:
    """The parameter reference (``docs/parameters.md``): a table per notebook ``folder/NN_*.py``."""
    cell = lambda text: text.replace("|", "\\|")  # noqa: E731
    lines = ["# Notebook parameters", "",
             "Generated from the notebooks' parameters cells (`python site/hubsite.py sync` writes it with the other "
             "generated files):", "each line `name: type = default  # RULE -- help` declares a parameter and "
             "its rule, which the notebook checks", "at its top (`nb.setup(\"NN\", ..., params=globals())`). The "
             "rule language (`hubnorm_companion.parameters`):", ""]
    lines += __doc__.split("RULE, with")[1].split(":func:")[0].strip().split("\n")[2:]
    for py in sorted(Path(folder).glob("[0-9][0-9]_*.py")):
        lines += ["", f"## {py.stem}", "", "| parameter | type | default | rule | help |", "|---|---|---|---|---|"]
        for p in cell_rules(notebook_cell(py.read_text(encoding="utf-8")), py.name).values():
            lines.append(f"| `{p.name}` | {p.kind} | `{cell(p.default)}` | `{cell(p.rule)}` | {cell(p.help)} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover - the docs generator
    print(markdown((__import__("sys").argv[1:] or ["notebooks"])[0]), end="")
