"""The notebooks' parameters, declared once: type, range and allowed values of each, and their validation.

Every notebook's first code cell after its ``parameters`` cell calls ``nb.setup("NN", ..., params=globals())``,
which runs :func:`validate` on the notebook's parameters (the names of :data:`SCHEMA` found in its namespace):
a bad value is a :class:`ValueError` (or :class:`TypeError`) naming the notebook, the parameter, what it must
be and how to pass it, before any computation. The parameters cell keeps the defaults and the one-line help
that ``papermill --help-notebook`` shows; ``tests/test_parameters.py`` checks that every parameter of every
notebook (``notebooks/[0-9][0-9]_*``, so later notebooks are covered) has a rule here, that its default passes
and that the type papermill infers agrees, and ``docs/parameters.md`` is generated from this table
(``python -m hubnorm.experiments.parameters > docs/parameters.md``; a test checks it is current).

A rule is looked up as ``"NN:name"`` first (a notebook whose parameter of that name means something else), then
``name``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

__all__ = ["Rule", "SCHEMA", "rule_for", "validate", "markdown"]

DIRECTIONS = ("t2i", "i2t")
SOURCE_KINDS = ("synthetic:", "cache:", "local:", "sims:", "real:")


@dataclass(frozen=True)
class Rule:
    """One parameter's rule: ``kind`` is the type papermill infers for it ("int", "float", "str", "bool", "list",
    "dict" or "None"), ``text`` says what a valid value is, ``check(value)`` returns the problem or None."""

    kind: str
    text: str
    check: Callable[[Any], Optional[str]]
    example: str = ""


# ---------------------------------------------------------------------------------------------- value checks
class TypeProblem(str):
    """A check's problem that is a wrong type (:func:`validate` raises TypeError when every problem is one)."""


def _wrong_type(what: str, v) -> TypeProblem:
    return TypeProblem(f"must be {what}; got {type(v).__name__} {v!r}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))


def _int(lo: Optional[int] = None, hi: Optional[int] = None):
    def check(v):
        if not _is_int(v):
            return _wrong_type("an integer", v)
        if lo is not None and v < lo:
            return f"must be >= {lo}; got {v}"
        if hi is not None and v > hi:
            return f"must be <= {hi}; got {v}"
        return None
    return check


def _num(lo: Optional[float] = None, hi: Optional[float] = None, *, lo_open: bool = False):
    def check(v):
        if not _is_num(v):   # a number that is not finite has the right type and a wrong value
            problem = _wrong_type("a finite number", v)
            return str(problem) if isinstance(v, (int, float)) and not isinstance(v, bool) else problem
        if lo is not None and (v <= lo if lo_open else v < lo):
            return f"must be {'>' if lo_open else '>='} {lo:g}; got {v!r}"
        if hi is not None and v > hi:
            return f"must be <= {hi:g}; got {v!r}"
        return None
    return check


def _choice(values: Iterable[Any]):
    values = tuple(values)

    def check(v):
        return None if isinstance(v, str) and v in values else f"must be one of {list(values)}; got {v!r}"
    return check


def _bool(v):
    return None if isinstance(v, bool) else _wrong_type("True or False", v)


def _list(elem, *, min_len: int = 1, max_len: Optional[int] = None, unique: bool = True,
          must_contain: Sequence = ()):
    def check(v):
        if not isinstance(v, (list, tuple)):
            return _wrong_type("a list", v)
        if len(v) < min_len:
            return f"must hold at least {min_len} value{'s' if min_len > 1 else ''}; got {list(v)!r}"
        if max_len is not None and len(v) > max_len:
            return f"must hold at most {max_len} values; got {list(v)!r}"
        for x in v:
            problem = elem(x)
            if problem:
                return f"has an invalid entry {x!r}: {problem.split('; got')[0]}"
        if unique and len({repr(x) for x in v}) != len(v):
            return f"must not repeat a value; got {list(v)!r}"
        missing = [m for m in must_contain if m not in v]
        if missing:
            return f"must contain {missing} (the value the paper's claim is checked at); got {list(v)!r}"
        return None
    return check


def _optional(inner):
    def check(v):
        return None if v is None else inner(v)
    return check


def _either(*checks):
    def check(v):
        problems = [c(v) for c in checks]
        return None if any(p is None for p in problems) else problems[-1]
    return check


def _dict(fields: Optional[Mapping[str, Callable]] = None, *, required: Sequence[str] = (), open_: bool = False):
    def check(v):
        if not isinstance(v, Mapping):
            return _wrong_type("a dict", v)
        if fields is None:
            return None if all(isinstance(k, str) for k in v) else f"must have string keys; got {dict(v)!r}"
        unknown = [k for k in v if k not in fields]
        if unknown and not open_:
            return f"has unknown key(s) {unknown}; known: {sorted(fields)}"
        missing = [k for k in required if k not in v]
        if missing:
            return f"needs the key(s) {missing}"
        for k, x in v.items():
            if k in fields:
                problem = fields[k](x)
                if problem:
                    return type(problem)(f"[{k!r}] {problem}")   # a wrong type inside stays a wrong type
        return None
    return check


def _source(v):
    if not isinstance(v, str) or not v.startswith(SOURCE_KINDS) or v in SOURCE_KINDS:
        return ("must be a source string 'synthetic:<preset>', 'cache:<dataset>:<model>:<pretrained>', "
                f"'local:<folder>', 'sims:<folder>' or 'real:<release>'; got {v!r}")
    return None


def _real_source(v):
    from ..data.real import RELEASES

    if isinstance(v, str) and v.startswith("real:") and v[len("real:"):] in RELEASES:
        return None
    return f"must be 'real:<release>', <release> one of {sorted(RELEASES)}; got {v!r}"


def _real_sources(v):
    """['auto'] alone, or a list of real release sources (the notebook checks their modality)."""
    if isinstance(v, (list, tuple)) and list(v) == ["auto"]:
        return None
    if isinstance(v, (list, tuple)) and "auto" in v:
        return f"must be ['auto'] alone, or a list of 'real:<release>' strings without 'auto'; got {list(v)!r}"
    return _list(_real_source, min_len=0)(v)


def _cross_source(v):
    if v is None or v in ("auto", "none"):
        return None
    return _source(v)


def _published(column: str, paper: str, extra: Sequence[str] = ()):
    """A name of the published tables (read when checked: the package data)."""
    def check(v):
        from .protocol import published_names

        known = list(extra) + published_names(column, paper)
        return None if isinstance(v, str) and v in known else f"must be one of {known}; got {v!r}"
    return check


_SIZES = _dict({"n_train_images": _int(0), "n_test_images": _int(1), "n_val_images": _int(0)})
_POS = _num(0, lo_open=True)
_TAU_BY_DIRECTION = _dict({d: _POS for d in DIRECTIONS}, required=DIRECTIONS)
_FRACTION = _num(0, 1, lo_open=True)


def R(kind: str, text: str, check: Callable, example: str = "") -> Rule:
    return Rule(kind, text, check, example)


#: The rule of every notebook parameter (``"NN:name"`` overrides ``name`` for notebook NN).
SCHEMA: Dict[str, Rule] = {
    # data
    "source": R("str", "'synthetic:<preset>', 'cache:<dataset>:<model>:<pretrained>', 'local:<folder>', "
                "'real:<release>' or 'sims:<folder>' (score matrices: what they give, the rest named in a NOTE; "
                "README 'Your own data')",
                _source,
                "local:/data/my-embeddings"),
    "synthetic_sizes": R("dict", "{'n_train_images': int >= 0, 'n_test_images': int >= 1, 'n_val_images': int >= 0}",
                         _SIZES, "{n_train_images: 2000}"),
    "source_kwargs": R("dict", "keyword arguments of the loader (e.g. {'test_fraction': 0.5} for local:)", _dict()),
    "cross_source": R("str", "'auto', 'none', None or a source string", _cross_source),
    "real_sources": R("list", "['auto'] (the real releases beside a synthetic run: none for a real run), [] or a "
                      "list of 'real:<release>' strings (python -m hubnorm.data list)", _real_sources,
                      "[real:coco500-clip-b16]"),
    "cross_sizes": R("dict", "sizes of a synthetic cross-dataset source (as synthetic_sizes)", _SIZES),
    "cross_seed": R("int", "an integer >= 0", _int(0)),
    "cross_kwargs": R("dict", "keyword arguments of the cross-dataset loader", _dict()),
    "other_video_source": R("str", "'auto', 'none', None or a source string (the other video data set of DBSN Tables "
                            "A9 / A10)", _cross_source),
    "distractor_source": R("str", "'auto', 'none', None or a source string (the same model's embeddings of "
                           "another data set: its test split joins the gallery)", _cross_source),
    "distractor_sizes": R("dict", "sizes of a synthetic distractor source (as synthetic_sizes; its test split is "
                          "used)", _SIZES),
    "seed": R("int", "an integer >= 0", _int(0), "1"),
    "dtype": R("str", "'float64' or 'float32'", _choice(("float64", "float32"))),
    # published rows
    "model": R("str", "'auto' or a model of the NNN paper's tables", _published("model", "nnn", ("auto",)), "CLIP"),
    "02:dbsn_model": R("str", "'auto' or a model of the DBSN paper's tables", _published("model", "dbsn", ("auto",))),
    "05:model": R("str", "'auto' or a model of the DBSN paper's tables", _published("model", "dbsn", ("auto",))),
    "dataset": R("None", "None (declared by the source) or a data set of the published tables",
                 _optional(_published("dataset", "nnn", ("unknown",))), "flickr30k"),
    "05:dataset": R("None", "None (declared by the source) or a data set of the DBSN tables",
                    _optional(_published("dataset", "dbsn", ("unknown",)))),
    # protocol
    "directions": R("list", "a non-empty list of 't2i' and/or 'i2t'", _list(_choice(DIRECTIONS)), "[t2i]"),
    "bank_fraction": R("float", "a number in (0, 1]: the share of the training split in the reference bank "
                       "(1.0 = the whole training part)", _FRACTION, "1.0"),
    "query_bank_fraction": R("float", "a number in (0, 1]: the share of the training *queries* in the reference query "
                             "banks, all training targets kept (1.0 = every training query)", _FRACTION, "1.0"),
    "fast": R("bool", "True or False", _bool),
    "n_boot": R("int", "an integer >= 10 (bootstrap resamples)", _int(10)),
    "hub_k": R("int", "an integer >= 1", _int(1)),
    # methods
    "nnn_params": R("dict", "{'alpha': number > 0, 'k': int >= 1}",
                    _dict({"alpha": _POS, "k": _int(1)}, required=("alpha", "k"))),
    "nnn_alpha": R("float", "a number > 0", _POS),
    "nnn_k": R("int", "an integer >= 1", _int(1)),
    "is_tau": R("float", "a temperature > 0", _POS),
    "06:is_tau": R("dict", "{'t2i': number > 0, 'i2t': number > 0}", _TAU_BY_DIRECTION),
    "07:is_tau": R("dict", "{'t2i': number > 0, 'i2t': number > 0}", _TAU_BY_DIRECTION),
    "sn_tau": R("float", "a temperature > 0", _POS),
    "sn_iter": R("int", "an integer >= 1", _int(1)),
    "dualis_params": R("dict", "{'beta_query': number >= 0, 'beta_target': number >= 0}",
                       _dict({"beta_query": _num(0), "beta_target": _num(0)}, required=("beta_query", "beta_target"))),
    "sinkhorn_cache_gb": R("float", "a number of GB >= 0", _num(0)),
    "l2n_reg": R("float", "a number > 0 (L2N's coefficient, on the scale of a score difference)", _POS),
    # 00
    "00:k": R("int", "an integer >= 1 (smaller than n_points)", _int(1)),
    "dims": R("list", "a non-empty list of dimensions >= 2", _list(_int(2)), "[2, 10]"),
    "n_points": R("int", "an integer >= 20 (points per toy cloud)", _int(20)),
    "max_test_images": R("int", "an integer >= 2", _int(2)),
    "max_bank_captions": R("int", "an integer >= 2", _int(2)),
    # 03
    "alpha": R("float", "a number > 0", _POS),
    "ks": R("list", "a non-empty list of distinct integers >= 1", _list(_int(1))),
    "heat_directions": R("None", "None or a non-empty list of 't2i' and/or 'i2t'", _optional(_list(_choice(DIRECTIONS)))),
    "index_k": R("int", "an integer >= 1 (NNN's k of the Table A5 timing; at most the bank size is used)", _int(1)),
    "flat_from": R("int", "an integer >= 1", _int(1)),
    "flat_tol": R("float", "a number of points >= 0", _num(0), "1.0"),
    # 04
    "nnn_fractions": R("list", "a non-empty list of distinct numbers in (0, 1]", _list(_FRACTION)),
    "dbsn_fractions": R("list", "a non-empty list of distinct numbers in (0, 1]", _list(_FRACTION)),
    "dbsn_seeds": R("list", "a non-empty list of distinct integers >= 0", _list(_int(0)), "[0, 1]"),
    "shift_shares": R("list", "a list of at least two distinct numbers in [0, 1] (the share of the bank drawn from "
                      "the other distribution at each step)", _list(_num(0, 1), min_len=2), "[0, 0.5, 1]"),
    "shift_size": R("None", "None or an integer >= 1 (query-bank rows at every share; at most the smaller pool)",
                    _optional(_int(1)), "5000"),
    "shift_boot": R("int", "an integer >= 1 (bootstrap resamples of each gain's CI)", _int(1), "100"),
    # 05
    "taus": R("None", "None or a non-empty list of distinct temperatures > 0", _optional(_list(_POS))),
    "07:taus": R("list", "a non-empty list of distinct temperatures > 0", _list(_POS)),
    "iterations": R("list", "a list of distinct integers >= 1 that contains 10 (Alg. A1's T)",
                    _list(_int(1), must_contain=(10,))),
    "converged_max": R("int", "an integer >= 10", _int(10)),
    "converged_tol": R("float", "a number > 0", _POS),
    "train_iteration_methods": R("list", "a list of 'sn' and/or 'dbsn' (may be empty)",
                                 _list(_choice(("sn", "dbsn")), min_len=0)),
    "plan_size": R("list", "[bank captions, test images], two integers >= 2", _list(_int(2), min_len=2, max_len=2,
                                                                                   unique=False)),
    # 06
    "cross_encoder": R("str", "'simulated' or 'blip'", _choice(("simulated", "blip"))),
    "image_dir": R("None", "None or a folder of the test images (for 'blip')", _optional(
        lambda v: None if isinstance(v, str) and v else f"must be a folder path; got {v!r}")),
    "k_values": R("list", "a non-empty list of distinct integers >= 1", _list(_int(1))),
    "lambdas": R("list", "a non-empty list of distinct numbers in [0, 1]", _list(_num(0, 1))),
    "ce_nnn_alphas": R("list", "a non-empty list of distinct numbers >= 0", _list(_num(0))),
    "ce_full_every": R("int", "an integer >= 1", _int(1)),
    # 08
    "audio_sources": R("list", "['auto'], [] or a list of source strings", _list(_either(_choice(("auto",)), _source),
                                                                              min_len=0)),
    "n_train": R("int", "an integer >= 1 (training items of a synthetic preset)", _int(1)),
    "bank_queries": R("int", "None or an integer >= 1", _optional(_int(1))),
    "target_bank": R("int", "None or an integer >= 1", _optional(_int(1))),
    "item_modality": R("str", "'auto', 'video', 'audio' or 'image'", _choice(("auto", "video", "audio", "image"))),
    "08:model": R("str", "'auto' or a model of the DBSN paper's tables", _published("model", "dbsn", ("auto",))),
    "dual_betas": R("dict", "{'beta_query': number >= 0, 'beta_target': number >= 0}",
                    _dict({"beta_query": _num(0), "beta_target": _num(0)}, required=("beta_query", "beta_target"))),
    # 09
    "09:methods": R("dict", "{label: [registry name, {parameter: value}]} of offset methods (NNN, IS, SN, DBSN)",
                    lambda v: None if isinstance(v, Mapping) and v and all(
                        isinstance(x, (list, tuple)) and len(x) == 2 and isinstance(x[0], str) and isinstance(x[1], Mapping)
                        for x in v.values()) else f"must be a non-empty {{label: [name, {{params}}]}}; got {v!r}"),
    "n_planted": R("int", "an integer >= 1 (planted items)", _int(1)),
    "budgets": R("list", "a non-empty list of distinct chord distances in (0, 2]", _list(_num(0, 2, lo_open=True))),
    "sinkhorn_cache_dtype": R("None", "None (the embeddings' dtype) or 'float16'", _optional(_choice(("float16",))),
                              "float16"),
    "text_precision": R("str", "'fp32', 'fp16', 'bf16', 'amp' or 'amp_bf16'",
                        _choice(("fp32", "fp16", "bf16", "amp", "amp_bf16"))),
    "construction": R("str", "'gradient' or 'mean'", _choice(("gradient", "mean"))),
    "label_free_grids": R("dict", "{registry name: {parameter: [values]}} for every method of `methods`", _dict()),
    # 07
    "ndcg_ks": R("list", "a non-empty list of distinct integers >= 1", _list(_int(1)), "[5, 10]"),
    "recall_ks": R("list", "a non-empty list of distinct integers >= 1", _list(_int(1))),
    "tau": R("float", "a temperature > 0", _POS),
    "margin": R("float", "a number >= 0", _num(0)),
    "steps": R("int", "an integer >= 1", _int(1)),
    "batch_size": R("int", "an integer >= 2", _int(2)),
    "lr": R("float", "a number > 0", _POS),
    "log_every": R("int", "an integer >= 1", _int(1)),
}


def rule_for(prefix: str, name: str) -> Optional[Rule]:
    """The rule of parameter ``name`` in notebook ``prefix`` (None: not a notebook parameter)."""
    return SCHEMA.get(f"{prefix}:{name}") or SCHEMA.get(name)


def _cross_checks(prefix: str, values: Mapping[str, Any]) -> List[Tuple[str, str]]:
    """Rules that tie two parameters of one notebook together."""
    out = []
    if prefix == "00" and _is_int(values.get("k")) and _is_int(values.get("n_points")) \
            and values["k"] >= values["n_points"]:
        out.append(("k", f"must be smaller than n_points ({values['n_points']}); got {values['k']}"))
    if prefix == "03" and isinstance(values.get("heat_directions"), list) and isinstance(values.get("directions"), list):
        extra = [d for d in values["heat_directions"] if d not in values["directions"]]
        if extra:
            out.append(("heat_directions", f"must be among directions {values['directions']}; got {extra}"))
    return out


def validate(prefix: str, namespace: Mapping[str, Any]) -> Dict[str, Any]:
    """Check every parameter of notebook ``prefix`` found in ``namespace`` (a notebook's ``globals()``).

    Raises ValueError (TypeError when every problem is a wrong type) naming each bad parameter, its rule and
    how to pass a valid value; returns ``{name: value}`` of the parameters checked."""
    checked, problems, type_only = {}, [], True
    for name, value in namespace.items():
        if name.startswith("_"):
            continue
        rule = rule_for(prefix, name)
        if rule is None:
            continue
        checked[name] = value
        problem = rule.check(value)
        if problem:
            type_only &= isinstance(problem, TypeProblem)
            problems.append((name, problem))
    for name, problem in _cross_checks(prefix, checked):
        type_only = False
        problems.append((name, problem))
    if problems:
        lines = [f"notebook {prefix} parameter {name} {problem}; expected {rule_for(prefix, name).text} "
                 f"(pass e.g. -p {name} {rule_for(prefix, name).example or _example(rule_for(prefix, name))})"
                 for name, problem in problems]
        raise (TypeError if type_only else ValueError)("\n".join(lines))
    return checked


def _example(rule: Rule) -> str:
    return {"int": "1", "float": "0.5", "bool": "True", "str": "'...'", "list": "[...]", "dict": "'{...}'"}.get(
        rule.kind, "...")


def markdown(names_by_notebook: Optional[Mapping[str, Sequence[str]]] = None) -> str:
    """The parameter reference (``docs/parameters.md``): one row per rule."""
    lines = ["# Notebook parameters", "",
             "Generated from `hubnorm.experiments.parameters.SCHEMA` (`python -m hubnorm.experiments.parameters > docs/parameters.md`): the",
             "rules every notebook checks at its top (`nb.setup(..., params=globals())`). `NN:name` is a rule of",
             "notebook NN only. Defaults and one-line help: `papermill --help-notebook notebooks/NN_name.ipynb`.", "",
             "| parameter | type | valid values |", "|---|---|---|"]
    for key, rule in SCHEMA.items():
        lines.append(f"| `{key}` | {rule.kind} | {rule.text} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover - the docs generator
    print(markdown(), end="")
