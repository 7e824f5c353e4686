"""Unit checks of hubnorm_companion.parameters, the rule language of the notebooks' parameters cells: each form of
a rule (types, bounds open and closed, a bound naming another parameter, alternatives, lists and their options,
dicts of fields, the named types) parsed from its text and checked at its boundaries with its whole message;
``cell_rules`` (a cell's lines, their rules and help, the errors naming a line); ``validate``'s returned
``{name: value}``, its TypeError-versus-ValueError choice and the full text of each error line; ``markdown``.

The rules are parsed here from their text, as ``nb.setup`` parses them from a notebook's cell: a changed parser
changes what these accept.
"""

from __future__ import annotations

import math

import pytest

from hubnorm_companion import parameters as P
from hubnorm_companion.parameters import cell_rules, markdown, parse, validate

SOURCE_MSG = ("must be a source string 'synthetic:<preset>', 'cache:<dataset>:<model>:<pretrained>', "
              "'local:<folder>', 'real:<release>' or 'sims:<folder>'; got {!r}")


def check(rule: str, value, ns=None, kind=None):
    return parse(rule, kind)[1](value, ns or {})


def _releases():
    from hubnorm.data.real import RELEASES

    return sorted(RELEASES)


# ------------------------------------------------------------------------------------------------ types
def test_is_int_and_is_num_reject_bools_and_non_finite_numbers():
    assert P._is_int(0) and P._is_int(-3)
    assert not P._is_int(True) and not P._is_int(1.0) and not P._is_int("1")
    assert P._is_num(0) and P._is_num(-2.5) and P._is_num(1e300)
    for bad in (True, False, float("nan"), float("inf"), -math.inf, "1", None):
        assert not P._is_num(bad), bad


def test_int_rejects_non_integers_as_wrong_types():
    for value, got in ((True, "bool True"), (2.0, "float 2.0"), ("3", "str '3'")):
        problem = check("int", value)
        assert problem == f"must be an integer; got {got}" and isinstance(problem, P.TypeProblem)
    assert check("int", -10 ** 9) is None and check("int", 10 ** 9) is None   # no bound at all


def test_number_rejects_non_numbers_by_type_and_non_finite_numbers_by_value():
    assert check("number", "3") == "must be a finite number; got str '3'"
    assert isinstance(check("float", True), P.TypeProblem)
    for bad in (float("nan"), float("inf")):
        problem = check("number", bad)
        assert problem == f"must be a finite number; got float {bad}" and not isinstance(problem, P.TypeProblem)
    assert check("number", -1e300) is None and check("float", 7) is None   # an int is a number


def test_bool_str_list_dict():
    assert check("bool", True) is None and check("bool", False) is None
    assert check("bool", 1) == "must be True or False; got int 1"
    assert check("str", "x") is None and check("str", 3) == "must be a string; got int 3"
    assert check("str", "") == "must not be empty; got ''" and not isinstance(check("str", ""), P.TypeProblem)
    assert check("list", (1,)) is None and check("list", "ab") == "must be a list; got str 'ab'"
    assert check("dict", {}) is None and check("dict", {"a": object()}) is None
    assert check("dict", {"a": 1, 2: 3}) == "must have string keys; got {'a': 1, 2: 3}"
    assert check("dict", [("a", 1)]) == "must be a dict; got list [('a', 1)]"


# ------------------------------------------------------------------------------------------------ bounds
def test_bounds_at_least_and_at_most_are_inclusive():
    assert check("int at least 2, at most 5", 2) is None and check("int at least 2, at most 5", 5) is None
    assert check("int at least 2, at most 5", 1) == "must be >= 2; got 1"
    assert check("int at least 2, at most 5", 6) == "must be <= 5; got 6"
    assert check("at least 0", 0) is None and check("at least 0", -0.0001) == "must be >= 0; got -0.0001"
    assert check("at least 0.5", 0.5) is None and check("at least 0.5", 0.25) == "must be >= 0.5; got 0.25"


def test_strict_bounds_are_open():
    assert check("> 0.5", 0.5) == "must be > 0.5; got 0.5"
    assert check("> 0.5", 0.5000001) is None and check("> 0.5", 0.25) == "must be > 0.5; got 0.25"
    assert check("< 3", 3) == "must be < 3; got 3" and check("< 3", 2.9) is None


def test_intervals_open_and_closed_at_either_end():
    assert check("in (0, 1]", 1) is None and check("in (0, 1]", 1e-9) is None
    assert check("in (0, 1]", 0) == "must be > 0; got 0" and check("in (0, 1]", 1.01) == "must be <= 1; got 1.01"
    assert check("in [0, 1]", 0) is None and check("in [0, 1)", 1) == "must be < 1; got 1"
    assert check("in [0.5, 2]", 0.4) == "must be >= 0.5; got 0.4"


def test_a_bound_checks_an_int_where_the_parameter_or_the_rule_says_int():
    assert check("at least 1", 2.5) is None
    assert check("at least 1", 2.5, kind="int") == "must be an integer; got float 2.5"
    assert check("int at least 1", 2.5) == "must be an integer; got float 2.5"
    assert check("at least 1", "2") == "must be a finite number; got str '2'"   # the type comes before the bound
    assert parse("at least 1", "int")[0] == "int" and parse("at least 1", "float")[0] == "float"
    assert parse("at least 1")[0] == "float" and parse("int at least 1")[0] == "int"


def test_a_bound_naming_another_parameter():
    assert check("int at least 1, < n_points", 40, {"n_points": 40}) == "must be < n_points (40); got 40"
    assert check("int at least 1, < n_points", 39, {"n_points": 40}) is None
    assert check("int at least 1, < n_points", 0, {"n_points": 40}) == "must be >= 1; got 0"   # in order
    assert check("< n_points", 50, {}) is None and check("< n_points", 50, {"n_points": "40"}) is None


def test_rules_that_do_not_parse():
    for bad in ("", ">= 1", "at least", "int str", "int, str", "in (0 1]", "foo", "list of", "{a}"):
        with pytest.raises((ValueError, SyntaxError)):
            parse(bad)


# ------------------------------------------------------------------------------------------------ alternatives
def test_choices_are_the_strings_listed():
    rule = "'a' | 'b'"
    assert check(rule, "a") is None and check(rule, "b") is None
    assert check(rule, "c") == "must be one of ['a', 'b']; got 'c'"
    assert check(rule, None) == "must be one of ['a', 'b']; got None"
    assert parse(rule)[0] == "str"


def test_none_or_a_rule_reports_the_rule():
    assert check("None | int at least 1", None) is None and check("None | int at least 1", 3) is None
    assert check("None | int at least 1", 0) == "must be >= 1; got 0"
    assert isinstance(check("None | int at least 1", "x"), P.TypeProblem)
    assert check("None | 'float16'", "x") == "must be one of ['float16']; got 'x'"
    assert parse("None | int at least 1")[0] == "int" and parse("None")[0] == "None"


def test_alternatives_pass_when_one_passes_and_report_the_last_problem():
    rule = "'auto' | 'none' | None | source"
    for ok in (None, "auto", "none", "local:/x"):
        assert check(rule, ok) is None, ok
    for bad in ("Auto", "", "nothing"):
        assert check(rule, bad) == SOURCE_MSG.format(bad), bad
    assert check("'a' | str | number at least 5", 3) == "must be >= 5; got 3"


def test_published_names_are_read_when_checked(monkeypatch):
    from hubnorm_companion import protocol

    calls = []

    def fake(column, paper="nnn"):
        calls.append((column, paper))
        return ["Zeta", "Alpha"]

    rule = parse("None | 'auto' | published dbsn dataset")[1]
    monkeypatch.setattr(protocol, "published_names", fake)
    assert rule("Alpha", {}) is None and rule("auto", {}) is None and rule(None, {}) is None
    assert rule("beta", {}) == "must be one of ['auto', 'Zeta', 'Alpha']; got 'beta'"
    assert rule(1, {}) == "must be one of ['auto', 'Zeta', 'Alpha']; got 1"
    assert calls[-1] == ("dataset", "dbsn")
    assert check("published nnn model", "auto") == "must be one of ['Zeta', 'Alpha']; got 'auto'"   # no extra
    assert calls[-1] == ("model", "nnn")


def test_published_against_the_package_tables():
    assert check("'auto' | published nnn model", "CLIP") is None
    assert check("published dbsn model", "zs CLIP") is None and check("published dbsn model", "CLIP") is not None
    assert check("published nnn dataset", "coco") is None


# ------------------------------------------------------------------------------------------------ lists
def test_list_type_and_length():
    rule = "list of int"
    assert check(rule, "ab") == "must be a list; got str 'ab'"
    assert check(rule, {1: 2}) == "must be a list; got dict {1: 2}"
    assert check(rule, []) == "must hold at least 1 value; got []"
    assert check(rule, (4,)) is None and check(rule, list(range(1000))) is None   # no upper bound by default
    assert check("list of int, may be empty", []) is None
    two = "list of int, length at least 2"
    assert check(two, [1]) == "must hold at least 2 values; got [1]" and check(two, [1, 2, 3]) is None
    exact = "list of int at least 2, length 2, may repeat"
    assert check(exact, [24, 16]) is None and check(exact, [3, 3]) is None
    assert check(exact, [1, 2, 3]) == "must hold at most 2 values; got [1, 2, 3]"
    assert check(exact, [2]) == "must hold at least 2 values; got [2]"


def test_list_names_the_first_invalid_entry_without_its_got_part():
    rule = "list of int at least 1"
    assert check(rule, [1, 0, -1]) == "has an invalid entry 0: must be >= 1"
    assert check(rule, [2, "x"]) == "has an invalid entry 'x': must be an integer"
    assert check(rule, [0, 0]) == "has an invalid entry 0: must be >= 1"   # entries are checked before repeats
    assert check("list of 't2i' | 'i2t'", ["x2y"]) == "has an invalid entry 'x2y': must be one of ['t2i', 'i2t']"
    assert check("list of number in (0, 2]", [2, 0]) == "has an invalid entry 0: must be > 0"


def test_list_repeats_and_contains():
    assert check("list of number", [1, 2, 1]) == "must not repeat a value; got [1, 2, 1]"
    assert check("list of number", [1, 1.0]) is None                 # distinct by repr
    assert check("list of number, may repeat", [3, 3]) is None
    needs = "list of int at least 1, contains 10, contains 20"
    assert check(needs, [10, 20, 1]) is None
    assert check(needs, [1, 20]) == "must contain [10]; got [1, 20]"
    assert check(needs, (1,)) == "must contain [10, 20]; got [1]"


def test_list_of_takes_the_rest_of_the_rule():
    rule = "None | list of 'auto' | source, may be empty"
    assert check(rule, None) is None and check(rule, []) is None and check(rule, ["auto", "local:/x"]) is None
    assert check(rule, ["bogus"]) == "has an invalid entry 'bogus': " + SOURCE_MSG.format("bogus").split("; got")[0]
    assert parse(rule)[0] == "list"


def test_subset_of_another_list_parameter():
    rule = "None | subset of directions"
    assert check(rule, ["i2t"], {"directions": ["t2i", "i2t"]}) is None and check(rule, None) is None
    assert check(rule, ["i2t", "t2i"], {"directions": ["t2i"]}) == \
        "has an invalid entry 'i2t': must be among directions ['t2i']"
    assert check(rule, [], {"directions": ["t2i"]}) == "must hold at least 1 value; got []"
    assert check(rule, ["x", "x"], {"directions": "t2i"}) == "must not repeat a value; got ['x', 'x']"
    assert check(rule, ["x"], {}) is None   # directions of the wrong type: its own rule reports it


# ------------------------------------------------------------------------------------------------ dicts
def test_dict_of_fields_needs_exactly_these_keys():
    rule = "{a: at least 0, b: int at least 1}"
    assert check(rule, {"a": 0, "b": 1}) is None
    assert check(rule, {"a": 0}) == "needs the key(s) ['b']"
    assert check(rule, {}) == "needs the key(s) ['a', 'b']"
    assert check(rule, {"a": 0, "b": 1, "z": 1}) == "has unknown key(s) ['z']; known: ['a', 'b']"
    assert check(rule, {"a": 0, "b": 0}) == "['b'] must be >= 1; got 0"
    problem = check(rule, {"a": "x", "b": 1})
    assert problem == "['a'] must be a finite number; got str 'x'" and isinstance(problem, P.TypeProblem)
    assert check(rule, 3) == "must be a dict; got int 3" and parse(rule)[0] == "dict"


def test_sizes_fields_are_optional_integers():
    assert check("sizes", {}) is None and check("sizes", {"n_train_images": 0, "n_test_images": 1}) is None
    assert check("sizes", {"n_test_images": 0}) == "['n_test_images'] must be >= 1; got 0"
    assert check("sizes", {"n_train_images": -1}) == "['n_train_images'] must be >= 0; got -1"
    assert check("sizes", {"n_train_image": 5}).startswith("has unknown key(s) ['n_train_image']")


# ------------------------------------------------------------------------------------------------ named types
def test_source_needs_a_known_kind_and_something_after_it():
    for ok in ("synthetic:coco", "cache:f:m:p", "local:/x", "sims:/y", "real:z"):
        assert check("source", ok) is None, ok
    for bad in ("synthetic:", "local:", "foo:bar", "", 3, None, "Synthetic:coco"):
        assert check("source", bad) == SOURCE_MSG.format(bad), bad


def test_real_sources_auto_alone_or_release_sources():
    rel = _releases()[0]
    assert check("real sources", ["auto"]) is None and check("real sources", ("auto",)) is None
    assert check("real sources", []) is None and check("real sources", [f"real:{rel}"]) is None
    assert check("real sources", ["auto", f"real:{rel}"]) == \
        f"must be ['auto'] alone, or a list of 'real:<release>' strings without 'auto'; got ['auto', 'real:{rel}']"
    assert check("real sources", "auto") == "must be a list; got str 'auto'"
    assert check("real sources", ["real:nope"]).startswith("has an invalid entry 'real:nope': must be 'real:<release>'")
    msg = f"must be 'real:<release>', <release> one of {_releases()}; got {{!r}}"
    for bad in ("real:nope", rel, f"local:{rel}", f"real:{rel}x", 5, "real:"):
        assert P._real_source(bad, {}) == msg.format(bad), bad


def test_offset_methods():
    assert check("offset methods", {"NNN": ("nnn", {"alpha": 1}), "IS": ["is", {}]}) is None
    for bad in ({}, {"NNN": "nnn"}, {"NNN": ("nnn",)}, {"NNN": (1, {})}, {"NNN": ("nnn", [])}, [("nnn", {})]):
        assert check("offset methods", bad) == f"must be a non-empty {{label: [name, {{params}}]}}; got {bad!r}"


# ------------------------------------------------------------------------------------------------ cells
CELL = '''# a comment line
seed: int = 0  # at least 0 -- the seed
k = 10  # int at least 1, < n_points
n_points: int = 40  # at least 20 -- points -- per cloud
grid: dict = {"a": [1,
                    2]}  # dict -- a grid
dtype = "float64"  # 'float64' | 'float32'
'''


def test_cell_rules_reads_each_line_its_rule_help_and_default():
    rules = cell_rules(CELL)
    assert list(rules) == ["seed", "k", "n_points", "grid", "dtype"]
    assert (rules["seed"].kind, rules["seed"].rule, rules["seed"].help, rules["seed"].default) == \
        ("int", "at least 0", "the seed", "0")
    assert (rules["k"].kind, rules["k"].rule, rules["k"].help) == ("int", "int at least 1, < n_points", "")
    assert rules["n_points"].help == "points -- per cloud"
    assert (rules["grid"].rule, rules["grid"].default) == ("dict", "{'a': [1, 2]}")
    assert rules["dtype"].kind == "str"
    assert [r.example for r in rules.values()] == ["0", "10", "40", "\"{'a': [1, 2]}\"", "float64"]


@pytest.mark.parametrize("line,words", [
    ("x = 1  ", "line 2 `x = 1`: every line of a parameters cell must be `name: type = default  # RULE -- help`"),
    ("x = 1  # >= 1", "line 2 `x = 1  # >= 1`: its rule '>= 1': cannot read"),
    ("import os  # dict", "line 2 `import os  # dict`: every line"),
    ("a, b = 1, 2  # dict", "line 2 `a, b = 1, 2  # dict`: every line"),
    ("x: float = 1  # int at least 1",
     "line 2 `x: float = 1  # int at least 1`: annotated float, its rule's type is int"),
])
def test_cell_rules_names_a_line_it_cannot_take(line, words):
    with pytest.raises(ValueError) as err:
        cell_rules(f"seed = 0  # int\n{line}\n", "notebook 42's parameters cell")
    assert str(err.value).startswith("notebook 42's parameters cell, ") and words in str(err.value), str(err.value)


def test_is_parameters_cell():
    assert P.is_parameters_cell(CELL)
    for not_one in ("# Parameters\nalpha = 0.7\n", "x = 1\nimport os  # comment", "", "# only a comment",
                    "alpha = (", "f(x)  # call", "x = '''\n"):
        assert not P.is_parameters_cell(not_one), not_one


def test_notebook_cell_is_the_tagged_percent_cell():
    text = '# %% [markdown]\n# x = 1  # int\n\n# %% tags=["parameters"]\nx = 1  # int\n\n# %%\ny = 2\n'
    assert P.notebook_cell(text) == "x = 1  # int\n\n"
    assert P.notebook_cell('# %% tags=["parameters"]\nx = 1  # int\n') == "x = 1  # int\n"
    with pytest.raises(ValueError, match="no `# %% tags="):
        P.notebook_cell("# %%\nx = 1  # int\n")


# ------------------------------------------------------------------------------------------------ validate
def test_validate_returns_the_checked_parameters_only():
    ns = {"seed": 3, "dtype": "float32", "_seed": -1, "__name__": "x", "np": object(), "unknown": [1]}
    assert validate("01", CELL, ns) == {"seed": 3, "dtype": "float32"}
    assert validate("01", CELL, {}) == {}


def test_validate_error_line_in_full():
    with pytest.raises(ValueError) as err:
        validate("01", CELL, {"seed": -1})
    assert str(err.value) == \
        "notebook 01 parameter seed must be >= 0; got -1; expected at least 0 (pass e.g. -p seed 0)"
    with pytest.raises(TypeError) as err:
        validate("06", CELL, {"grid": 0.5})
    assert str(err.value) == ("notebook 06 parameter grid must be a dict; got float 0.5; expected dict "
                              "(pass e.g. -y \"grid: {'a': [1, 2]}\")")


def test_validate_lists_every_problem_one_per_line_in_order():
    with pytest.raises(ValueError) as err:
        validate("00", CELL, {"seed": -1, "dtype": "float16", "k": 5, "n_points": 5})
    lines = str(err.value).split("\n")
    assert lines == [
        "notebook 00 parameter seed must be >= 0; got -1; expected at least 0 (pass e.g. -p seed 0)",
        "notebook 00 parameter k must be < n_points (5); got 5; expected int at least 1, < n_points "
        "(pass e.g. -p k 10)",
        "notebook 00 parameter n_points must be >= 20; got 5; expected at least 20 (pass e.g. -p n_points 40)",
        "notebook 00 parameter dtype must be one of ['float64', 'float32']; got 'float16'; expected "
        "'float64' | 'float32' (pass e.g. -p dtype float64)"]


@pytest.mark.parametrize("ns", [{"seed": 1.5}, {"n_points": "x"}, {"grid": 3}, {"seed": True, "grid": [1]},
                                {"k": 5.0, "n_points": 5.0}])
def test_validate_raises_type_error_when_every_problem_is_a_type(ns):
    with pytest.raises(TypeError, match=f"notebook 03 parameter {next(iter(ns))} "):
        validate("03", CELL, ns)


@pytest.mark.parametrize("ns", [{"seed": -1}, {"dtype": "x"}, {"seed": -1, "grid": 1}, {"grid": 1, "seed": -1},
                                {"k": 50, "n_points": 40}, {"seed": "x", "k": 50, "n_points": 20}])
def test_validate_raises_value_error_when_a_problem_is_not_a_type(ns):
    with pytest.raises(ValueError) as err:
        validate("03", CELL, ns)
    assert type(err.value) is ValueError


def test_a_bound_naming_a_parameter_of_the_wrong_type_is_left_to_that_ones_rule():
    with pytest.raises(TypeError) as err:   # not also "k must be < n_points (2.0)": a value problem
        validate("00", CELL, {"k": 10, "n_points": 2.0})
    assert str(err.value).count("\n") == 0
    with pytest.raises(ValueError, match=r"parameter k must be < n_points \(5\)"):   # n_points' value is wrong
        validate("00", CELL, {"k": 10, "n_points": 5})


@pytest.mark.parametrize("value", [float("nan"), math.inf])
def test_a_number_that_is_not_finite_is_a_value_error_not_a_type_error(value):
    with pytest.raises(ValueError, match="must be a finite number; got float") as err:
        validate("03", "alpha = 0.5  # > 0\n", {"alpha": value})
    assert type(err.value) is ValueError


# ------------------------------------------------------------------------------------------------ markdown
def test_markdown_has_the_header_and_a_table_per_notebook(tmp_path):
    (tmp_path / "01_b.py").write_text('# %% tags=["parameters"]\n' + CELL + "\n# %%\nx = 1\n")
    (tmp_path / "00_a.py").write_text('# %% tags=["parameters"]\nalpha = 0.5  # > 0 -- a | b\n')
    (tmp_path / "x_c.py").write_text("not a notebook")
    text = markdown(tmp_path)
    assert text.startswith("# Notebook parameters\n\nGenerated from the notebooks' parameters cells") and \
        text.endswith(" |\n")
    assert "- ``list of RULE``: a non-empty list of distinct values;" in text   # the language, from the docstring
    lines = text.split("\n")
    a, b = lines.index("## 00_a"), lines.index("## 01_b")
    assert a < b and lines[a + 2:a + 5] == ["| parameter | type | default | rule | help |", "|---|---|---|---|---|",
                                            "| `alpha` | float | `0.5` | `> 0` | a \\| b |"]
    assert "| `dtype` | str | `'float64'` | `'float64' \\| 'float32'` |  |" in lines
    assert len([ln for ln in lines[b:] if ln.startswith("| `")]) == 5


# ------------------------------------------------------------------------------ the rule reader's edges (mutation run)
def test_the_splitter_keeps_quoted_and_bracketed_separators():
    assert P._split("'a|b' | 'c'", "|") == ["'a|b'", "'c'"]
    assert P._split('"x,y", (0, 1], {a: 1, b: 2}', ",") == ['"x,y"', "(0, 1]", "{a: 1, b: 2}"]
    assert P._split("[(1, 2), 3], 4", ",") == ["[(1, 2), 3]", "4"]
    kind, check = P.parse("'a|b' | 'c'")
    assert kind == "str" and check("a|b", {}) is None and check("a", {}) is not None


def test_rule_reader_edges():
    assert P.parse("at least 1000000", "int")[1](5, {}) == "must be >= 1000000; got 5"   # an int shown as written
    assert P.parse("{alpha: > 0, k: int at least 1}")[1]({"alpha": 1}, {}) == "needs the key(s) ['k']"
    sizes = P.parse("sizes")[1]   # a named dict whose keys are each optional
    assert sizes({"n_train_images": 5}, {}) is None and sizes({}, {}) is None
    either = P.parse("at least 1 | dict")[1]
    assert either(3, {}) is None and either({}, {}) is None and either("x", {}) == "must be a dict; got str 'x'"
    assert P.parse("int, int at least 2")[1](1, {}) == "must be >= 2; got 1"   # one type, said twice
    for bad, message in (("{a: > 0", "cannot read '{a: > 0' (a bound: > 0, < name, at least 1, at most 2, in (0, 1])"),
                         ("int, str", "two types in 'int, str'"), ("", "cannot read ''")):
        with pytest.raises(ValueError) as e:
            P.parse(bad)
        assert str(e.value) == message
    mode = P.parse("{mode: 'a:b' | 'c'}")[1]   # a field's rule may hold a colon
    assert mode({"mode": "a:b"}, {}) is None and mode({"mode": "a"}, {}) is not None
    assert P.parse("{'alpha': > 0}")[1]({"alpha": 0}, {}) == "['alpha'] must be > 0; got 0"   # a quoted key
    assert P.parse('"a" | "b"')[1]("a", {}) is None
    assert P.parse("at least 1 | 'a'")[0] == "float" and P.parse("None | 'a'")[0] == "str"
    rules = P.cell_rules("x = 1  #> 0 -- h\n")   # no space after '#'
    assert rules["x"].check(0, {}) == "must be > 0; got 0" and rules["x"].check(1, {}) is None


def test_errors_name_the_notebook_and_the_file(tmp_path):
    with pytest.raises(ValueError) as e:
        P.validate("07", "x = 1\n", {})
    assert str(e.value).startswith("notebook 07's parameters cell, line 1 `x = 1`: every line of a parameters cell")
    with pytest.raises(ValueError) as e:
        P.notebook_cell("x = 1")
    assert str(e.value) == 'no `# %% tags=["parameters"]` cell'
    (tmp_path / "96_x.py").write_text('# %% tags=["parameters"]\nx = 1\n\n# %%\nrun = 1\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"^96_x\.py, line 1 `x = 1`: every line"):
        P.markdown(tmp_path)


def test_a_source_kind_is_one_entry_of_the_librarys_table(monkeypatch):
    """The notebooks' source check reads hubnorm.data.sources.SOURCE_KINDS: a kind added there is accepted and
    named, with no second list to edit."""
    from hubnorm.data import sources

    assert check("source", "demo:x") == SOURCE_MSG.format("demo:x")
    kind = sources.SourceKind("demo", "demo:<thing>", "embeddings", lambda rest, **kw: None)
    monkeypatch.setitem(sources.SOURCE_KINDS, "demo", kind)
    assert check("source", "demo:x") is None
    assert check("source", "demo:") == SOURCE_MSG.format("demo:").replace(" or 'sims:<folder>'",
                                                                          ", 'sims:<folder>' or 'demo:<thing>'")


# ---------------------------------------------------------------------------------------------- cross-parameter rules
def test_in_name_is_membership_of_another_list_parameter():
    ns = {"taus": [0.1, 0.01]}
    assert check("> 0, in taus", 0.01, ns) is None
    assert check("> 0, in taus", 0.05, ns) == ("must be one of taus [0.1, 0.01] (the values the notebook runs); "
                                               "got 0.05")
    assert check("> 0, in taus", -1.0, ns) == "must be > 0; got -1.0"
    assert check("> 0, in taus", 0.05, {}) is None           # taus not known (a wrong type of its own): no verdict


def test_seed_range_rule():
    assert check("int in [0, 4294967295]", 4294967295, kind="int") is None
    assert check("int in [0, 4294967295]", 4294967296, kind="int") == "must be <= 4294967295; got 4294967296"
    assert check("int in [0, 4294967295]", -1, kind="int") == "must be >= 0; got -1"


def test_sources_or_auto():
    assert check("sources or auto", ["auto"]) is None and check("sources or auto", []) is None
    assert check("sources or auto", ["synthetic:clotho", "local:/x"]) is None
    assert check("sources or auto", ["auto", "synthetic:clotho"]) == (
        "must be ['auto'] alone, or a list of sources without 'auto'; got ['auto', 'synthetic:clotho']")
    assert "must be a source string" in check("sources or auto", ["clotho"])


def test_offset_methods_labels_and_grids_of_methods():
    methods = {"NNN": ("nnn", {"k": 16}), "SN": ("sn", {"tau": 0.01})}
    assert check("offset methods", methods) is None
    assert check("offset methods", {"raw": ("nnn", {})}) == ("has label(s) ['raw']: each label is a non-empty string "
                                                             "other than 'raw'")
    assert check("offset methods", {1: ("nnn", {})}) == ("has label(s) [1]: each label is a non-empty string other "
                                                         "than 'raw'")
    grids = {"nnn": {"k": [1, 16]}, "sn": {"tau": [0.01]}}
    assert check("grids of methods", grids, {"methods": methods}) is None
    assert check("grids of methods", {"nnn": {"k": [1]}}, {"methods": methods}) == (
        "has no grid for ['sn'], a method of methods: add one for each")
    assert check("grids of methods", {}, {"methods": methods}) == (
        "has no grid for ['nnn', 'sn'], a method of methods: add one for each")
    for bad in ({"nnn": {"k": []}}, {"nnn": {}}, {"nnn": [1]}, ["nnn"]):
        assert check("grids of methods", bad, {"methods": methods}).startswith(
            "must be {method name: {parameter: [values, ...]}}")
