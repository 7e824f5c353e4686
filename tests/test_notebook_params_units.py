"""``scripts/notebook_params.py``: how run_all.sh reads ``--param NAME=VALUE`` and ``--params FILE`` values (YAML
with YAML 1.2's numbers and booleans: no octal, no sexagesimal, exponents are numbers, only true/false booleans)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("notebook_params", REPO / "scripts" / "notebook_params.py")
notebook_params = importlib.util.module_from_spec(spec)
spec.loader.exec_module(notebook_params)


@pytest.mark.parametrize("text, value", [
    ("010", 10), ("0100", 100), ("-2", -2), ("+3", 3), ("0", 0),            # decimal, never octal
    ("1e-3", 0.001), ("1E+2", 100.0), ("0.5", 0.5), ("3.", 3.0), (".5", 0.5), ("-1.5e-2", -0.015),
    (".inf", float("inf")), ("-.inf", float("-inf")),
    ("true", True), ("False", False), ("null", None),
    ("1:30", "1:30"), ("yes", "yes"), ("on", "on"), ("0x10", "0x10"), ("1_000", "1_000"), ("CLIP", "CLIP"),
    ("[t2i, i2t]", ["t2i", "i2t"]), ("[1, 010]", [1, 10]), ("{alpha: 1e-1, k: 08}", {"alpha": 0.1, "k": 8}),
    ("'010'", "010"),
])
def test_param_values_read_with_yaml_1_2_numbers(text, value):
    assert notebook_params._mapping(f"v: {text}", "x")["v"] == value
    got = notebook_params.merged_params({}, ["--param", f"seed={text}"], str(REPO))["seed"]
    assert got == value and type(got) is type(value)


def test_nan_is_a_float():
    v = notebook_params._mapping("v: .nan", "x")["v"]
    assert isinstance(v, float) and v != v


def test_a_params_file_is_read_the_same_way(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("seed: 010\nlr: 1e-3\nfast: yes\n")
    assert notebook_params.merged_params({}, ["--params", str(f)], str(REPO)) == {"seed": 10, "lr": 0.001,
                                                                                  "fast": "yes"}
