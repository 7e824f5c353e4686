"""Notebook parameters: one declared rule each (hubnorm.experiments.parameters), checked at the top of every notebook.

The notebooks are discovered by glob (``notebooks/[0-9][0-9]_*.py``), so a later notebook is covered as soon as it
exists: each of its parameters needs a rule, its defaults must pass, and it must call the validation.
"""

import re
from pathlib import Path

import pytest

from conftest import REPO
from hubnorm.experiments import parameters as P
from local_folders import run_notebook_source

SOURCES = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.py"))


def _parameters_cell(py: Path) -> str:
    text = py.read_text(encoding="utf-8")
    m = re.search(r'^# %% tags=\["parameters"\]\n(.*?)(?=^# %%)', text, flags=re.M | re.S)
    assert m, f"{py.name} has no parameters cell"
    return m.group(1)


def _defaults(py: Path) -> dict:
    ns: dict = {}
    exec(compile(_parameters_cell(py), py.name, "exec"), ns)
    return {k: v for k, v in ns.items() if not k.startswith("__")}


@pytest.mark.parametrize("py", SOURCES, ids=lambda p: p.stem)
def test_every_parameter_has_a_rule_its_default_passes_and_the_notebook_checks_it(py):
    prefix = py.name[:2]
    defaults = _defaults(py)
    missing = [name for name in defaults if P.rule_for(prefix, name) is None]
    assert not missing, f"{py.name}: parameters without a rule in hubnorm.experiments.parameters.SCHEMA: {missing}"
    assert P.validate(prefix, defaults).keys() == defaults.keys()
    src = py.read_text(encoding="utf-8")
    assert re.search(rf'nb\.setup\("{prefix}",[^\n]*params=globals\(\)[,)]', src), \
        f"{py.name} must validate its parameters: nb.setup(\"{prefix}\", ..., params=globals())"


@pytest.mark.parametrize("ipynb", sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.stem)
def test_papermill_sees_the_types_the_rules_declare(ipynb):
    """``papermill --help-notebook`` and the rules agree on each parameter's type."""
    papermill = pytest.importorskip("papermill")
    for name, info in papermill.inspect_notebook(str(ipynb)).items():
        rule = P.rule_for(ipynb.name[:2], name)
        assert rule is not None, f"{ipynb.name}: {name} has no rule"
        inferred = info["inferred_type_name"]
        if inferred not in ("None", "NoneType"):
            assert inferred == rule.kind, f"{ipynb.name}: {name} is {inferred} for papermill, {rule.kind} in the rule"


def test_docs_parameters_reference_is_generated_from_the_rules():
    assert (REPO / "docs" / "parameters.md").read_text(encoding="utf-8") == P.markdown(), \
        "docs/parameters.md is stale: .venv/bin/python -m hubnorm.experiments.parameters > docs/parameters.md"


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
    py = next(p for p in SOURCES if p.name.startswith(prefix))
    params = {**_defaults(py), name: value}
    with pytest.raises((ValueError, TypeError)) as err:
        P.validate(prefix, params)
    msg = str(err.value)
    assert f"notebook {prefix} parameter {name} " in msg and words in msg and "pass e.g. -p" in msg, msg


def test_cross_parameter_rules():
    with pytest.raises(ValueError, match="k must be smaller than n_points"):
        P.validate("00", {"k": 50, "n_points": 40})
    with pytest.raises(ValueError, match="heat_directions must be among directions"):
        P.validate("03", {"directions": ["t2i"], "heat_directions": ["i2t"]})


@pytest.mark.parametrize("prefix,name,value,words", [PROBES[0], PROBES[6], PROBES[8]], ids=["03", "04", "01"])
def test_the_notebook_itself_stops_at_its_top(prefix, name, value, words, tmp_path, monkeypatch):
    """The notebook runs the validation before any data is loaded (its setup cell raises)."""
    monkeypatch.setenv("HUBNORM_RESULTS", str(tmp_path))
    py = next(p for p in SOURCES if p.name.startswith(prefix))
    with pytest.raises((ValueError, TypeError), match=f"parameter {name} "):
        run_notebook_source(py, {name: value})


def test_hubnorm_threads_is_checked_where_it_is_read(monkeypatch):
    from hubnorm.experiments import notebook

    for bad in ("99999", "0", "-1", "two", ""):
        monkeypatch.setenv("HUBNORM_THREADS", bad)
        with pytest.raises(ValueError, match="HUBNORM_THREADS must be an integer from 1 to"):
            notebook.env_threads()
    monkeypatch.setenv("HUBNORM_THREADS", "1")
    assert notebook.env_threads() == 1
