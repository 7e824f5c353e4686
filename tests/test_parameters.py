"""Notebook parameters: each line of a notebook's parameters cell declares its rule, checked at the notebook's top.

The notebooks are discovered by glob (``notebooks/[0-9][0-9]_*.py``), so a later notebook is covered as soon as it
exists: each of its parameters needs a rule that parses, its defaults must pass, papermill must see the type the
rule declares, and it must call the validation. The checks below read the rules from the cells themselves (a rule
loosened in a cell changes what they accept: ``test_a_loosened_rule_accepts_what_the_cell_refuses``).
"""

import json
import re
from pathlib import Path

import pytest

from conftest import REPO
from hubnorm_companion import parameters as P
from local_folders import run_notebook_source

SOURCES = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.py"))


def _cell(py: Path) -> str:
    return P.notebook_cell(py.read_text(encoding="utf-8"))


def _defaults(py: Path) -> dict:
    ns: dict = {}
    exec(compile(_cell(py), py.name, "exec"), ns)
    return {k: v for k, v in ns.items() if not k.startswith("__")}


def _validate(prefix: str, values: dict, cell=None) -> dict:
    py = next(p for p in SOURCES if p.name.startswith(prefix))
    return P.validate(prefix, _cell(py) if cell is None else cell, {**_defaults(py), **values})


@pytest.mark.parametrize("py", SOURCES, ids=lambda p: p.stem)
def test_every_parameter_has_a_rule_its_default_passes_and_the_notebook_checks_it(py):
    prefix = py.name[:2]
    defaults = _defaults(py)
    assert P.cell_rules(_cell(py), py.name).keys() == defaults.keys()   # every line declares a rule that parses
    assert P.validate(prefix, _cell(py), defaults).keys() == defaults.keys()
    src = py.read_text(encoding="utf-8")
    assert re.search(rf'nb\.setup\("{prefix}",[^\n]*params=globals\(\)[,)]', src), \
        f"{py.name} must validate its parameters: nb.setup(\"{prefix}\", ..., params=globals())"


@pytest.mark.parametrize("ipynb", sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.stem)
def test_papermill_sees_the_types_the_rules_declare(ipynb):
    """``papermill --help-notebook`` sees every parameter of the .ipynb's own cell (a rule holding two ``=`` would
    hide its line) with its rule as help, and the type papermill infers is the rule's."""
    papermill = pytest.importorskip("papermill")
    cells = json.loads(ipynb.read_text(encoding="utf-8"))["cells"]
    cell = "".join(next(c["source"] for c in cells if "parameters" in c["metadata"].get("tags", [])))
    rules = P.cell_rules(cell, ipynb.name)
    seen = papermill.inspect_notebook(str(ipynb))
    assert seen.keys() == rules.keys(), f"{ipynb.name}: papermill sees {sorted(seen)}"
    for name, info in seen.items():
        assert info["help"].startswith(rules[name].rule), (ipynb.name, name, info["help"])
        inferred = info["inferred_type_name"]
        if inferred not in ("None", "NoneType"):
            assert inferred == rules[name].kind, f"{ipynb.name}: {name} is {inferred} for papermill, " \
                                                 f"{rules[name].kind} in the rule"


def test_docs_parameters_reference_is_generated_from_the_cells():
    assert (REPO / "docs" / "parameters.md").read_text(encoding="utf-8") == P.markdown(REPO / "notebooks"), \
        "docs/parameters.md is stale: .venv/bin/python site/hubsite.py sync"


#: The probe cases of issue 23: (notebook, parameter, bad value, words the error must contain).
PROBES = [
    ("03", "flat_tol", -1, ">= 0"),
    ("04", "dbsn_seeds", [], "at least 1"),
    ("03", "heat_directions", ["x2y"], "t2i"),
    ("07", "ndcg_ks", [0], ">= 1"),
    ("00", "dims", [0], ">= 2"),
    ("00", "n_points", 1, ">= 20"),
    ("04", "sinkhorn_cache_gb", "3", "finite number"),
    ("01", "model", "NoSuchModel", "CLIP"),
    ("01", "model", "clip", "CLIP"),
    ("02", "dbsn_model", "bogus", "zs CLIP"),
    ("01", "dataset", "imagenet", "flickr30k"),
    ("01", "bank_fraction", 0.0, "(0, 1]"),
    ("01", "directions", ["t2i", "t2i"], "repeat"),
    ("05", "iterations", [1, 3], "contain [10]"),
    ("07", "is_tau", {"t2i": 0.02}, "i2t"),
    ("01", "seed", True, "integer"),
]


@pytest.mark.parametrize("prefix,name,value,words", PROBES, ids=[f"{p[0]}-{p[1]}-{p[2]!r}" for p in PROBES])
def test_bad_parameter_values_are_named_errors(prefix, name, value, words):
    with pytest.raises((ValueError, TypeError)) as err:
        _validate(prefix, {name: value})
    msg = str(err.value)
    assert f"notebook {prefix} parameter {name} " in msg and words in msg, msg
    # papermill's -p passes a list or dict as a string: those are shown with -y (YAML)
    how = f'pass e.g. -y "{name}: ' if isinstance(value, (list, dict)) else f"pass e.g. -p {name} "
    assert how in msg, msg


def test_cross_parameter_rules():
    with pytest.raises(ValueError, match=r"k must be < n_points \(40\); got 50"):
        _validate("00", {"k": 50, "n_points": 40})
    with pytest.raises(ValueError, match=r"heat_directions has an invalid entry 'i2t': must be among directions"):
        _validate("03", {"directions": ["t2i"], "heat_directions": ["i2t"]})
    assert _validate("03", {"directions": ["i2t"], "heat_directions": ["i2t"]})["heat_directions"] == ["i2t"]


#: (notebook, its rule, a looser rule, a value only the looser one accepts, words of the refusal).
LOOSENED = [("00", "int at least 20 -- points", "int at least 0 -- points", {"n_points": 15}, ">= 20"),
            ("00", "int at least 1, < n_points", "int at least 1", {"k": 2000}, "< n_points (2000)"),
            ("01", "bank_fraction: float = 0.2  # in (0, 1]", "bank_fraction: float = 0.2  # in [0, 1]",
             {"bank_fraction": 0.0}, "> 0"),
            ("03", "None | subset of directions", "None | list", {"heat_directions": ["x2y"]}, "among directions"),
            ("04", "dbsn_seeds: list = [0, 1, 2]  # list of int at least 0",
             "dbsn_seeds: list = [0, 1, 2]  # list of int at least 0, may be empty", {"dbsn_seeds": []}, "at least 1"),
            ("05", "contains 10", "may repeat", {"iterations": [1, 3]}, "contain [10]"),
            ("06", "{t2i: > 0, i2t: > 0}", "dict", {"is_tau": {"t2i": 0.02}}, "needs the key(s) ['i2t']"),
            ("09", "'gradient' | 'mean'", "str", {"construction": "random"}, "'gradient'")]


@pytest.mark.parametrize("prefix,rule,looser,values,words", LOOSENED, ids=[c[0] + "-" + c[2] for c in LOOSENED])
def test_a_loosened_rule_accepts_what_the_cell_refuses(prefix, rule, looser, values, words):
    """The checks are the cell's: the same cell with one rule loosened accepts the value its own rule refuses."""
    cell = _cell(next(p for p in SOURCES if p.name.startswith(prefix)))
    assert cell.count(rule) == 1, f"notebook {prefix}'s cell no longer holds {rule!r}: update this case"
    with pytest.raises(ValueError, match=re.escape(words)):
        _validate(prefix, values)
    assert _validate(prefix, values, cell.replace(rule, looser)).items() >= values.items()


@pytest.mark.parametrize("py", SOURCES[:2] + SOURCES[-1:], ids=lambda p: p.stem)
def test_a_line_without_its_rule_is_an_error_naming_it(py):
    cell = _cell(py)
    line = next(ln for ln in cell.splitlines() if re.match(r"seed\b", ln))
    with pytest.raises(ValueError, match=rf"{py.name}, line \d+ `seed(: int)? = 0`: every line of a parameters "
                                         r"cell must be `name: type = default  # RULE -- help`"):
        P.cell_rules(cell.replace(line, line.split("#")[0].rstrip()), py.name)


@pytest.mark.parametrize("prefix,name,value,words", [PROBES[0], PROBES[6], PROBES[8]], ids=["03", "04", "01"])
def test_the_notebook_itself_stops_at_its_top(prefix, name, value, words, tmp_path, monkeypatch):
    """The notebook runs the validation before any data is loaded (its setup cell raises)."""
    monkeypatch.setenv("HUBNORM_RESULTS", str(tmp_path))
    py = next(p for p in SOURCES if p.name.startswith(prefix))
    with pytest.raises((ValueError, TypeError), match=f"parameter {name} "):
        run_notebook_source(py, {name: value})


def test_hubnorm_threads_is_checked_where_it_is_read(monkeypatch):
    from hubnorm_companion import notebook

    for bad in ("99999", "0", "-1", "two", ""):
        monkeypatch.setenv("HUBNORM_THREADS", bad)
        with pytest.raises(ValueError, match="HUBNORM_THREADS must be an integer from 1 to"):
            notebook.env_threads()
    monkeypatch.setenv("HUBNORM_THREADS", "1")
    assert notebook.env_threads() == 1
