"""Unit checks of hubnorm.experiments.parameters, the validation every notebook runs on its parameters at its top,
aimed at what its mutation run found unchecked: each rule factory (``_int``, ``_num``, ``_choice``, ``_bool``,
``_list``, ``_optional``, ``_either``, ``_dict``) and each source rule called directly, at its boundaries and with
its whole message; ``rule_for``'s ``"NN:name"`` override; the cross-parameter rules of notebooks 00 and 03; and
``validate``'s skipping, its returned ``{name: value}``, its TypeError-versus-ValueError choice and the full text of
each error line (``_example`` for a rule without an example), and ``markdown``.

The factories are called here, not only reached through :data:`SCHEMA`: the rules in SCHEMA are built once at import,
so a changed factory would not change them.

A bug these checks found: ``validate`` raised ValueError, not TypeError, for a bool parameter given a non-bool
(``fast=1``): its "every problem is a type" test required ``"must be a"`` in the problem, which ``_bool``'s "must be
True or False" does not contain, so its own ``"True or False"`` alternative could never count (elsewhere in the
package "must be True or False" is a TypeError). Fixed in ``validate``; checked by the ``fast`` case of
``test_validate_raises_type_error_when_every_problem_is_a_type``.

Mutation run (``--tests tests/test_parameters.py`` [+ this file]): 123 of 319 killed (39%; 7 reached by no test) ->
323 of 324 killed (the fix adds 5 mutants). Equivalent survivor kept:

- ``validate``: ``type_only = False`` -> ``type_only = None`` after a cross-parameter problem: both are falsy and
  ``type_only`` is only read as a condition afterwards.
"""

from __future__ import annotations

import math

import pytest

from hubnorm.experiments import parameters as P
from hubnorm.experiments.parameters import SCHEMA, Rule, markdown, rule_for, validate

SOURCE_MSG = ("must be a source string 'synthetic:<preset>', 'cache:<dataset>:<model>:<pretrained>', "
              "'local:<folder>', 'sims:<folder>' or 'real:<release>'; got {!r}")


def _releases():
    from hubnorm.data.real import RELEASES

    return sorted(RELEASES)


# ------------------------------------------------------------------------------------------------ type tests
def test_is_int_and_is_num_reject_bools_and_non_finite_numbers():
    assert P._is_int(0) and P._is_int(-3)
    assert not P._is_int(True) and not P._is_int(1.0) and not P._is_int("1")
    assert P._is_num(0) and P._is_num(-2.5) and P._is_num(1e300)
    for bad in (True, False, float("nan"), float("inf"), -math.inf, "1", None):
        assert not P._is_num(bad), bad


# ------------------------------------------------------------------------------------------------ _int
def test_int_rejects_non_integers_by_type_and_value():
    check = P._int()
    assert check(True) == "must be an integer; got bool True"
    assert check(2.0) == "must be an integer; got float 2.0"
    assert check("3") == "must be an integer; got str '3'"
    assert check(-10 ** 9) is None and check(10 ** 9) is None   # no bound at all


def test_int_bounds_are_inclusive():
    check = P._int(2, 5)
    assert check(2) is None and check(5) is None and check(3) is None
    assert check(1) == "must be >= 2; got 1"
    assert check(6) == "must be <= 5; got 6"
    assert P._int(0)(0) is None and P._int(0)(-1) == "must be >= 0; got -1"
    assert P._int(hi=0)(0) is None and P._int(hi=0)(1) == "must be <= 0; got 1"
    assert P._int(hi=0)(-7) is None


# ------------------------------------------------------------------------------------------------ _num
def test_num_rejects_non_finite_and_non_numbers():
    check = P._num()
    assert check("3") == "must be a finite number; got str '3'"
    assert check(True) == "must be a finite number; got bool True"
    assert check(float("nan")) == "must be a finite number; got float nan"
    assert check(float("inf")) == "must be a finite number; got float inf"
    assert check(-1e300) is None and check(7) is None


def test_num_closed_and_open_lower_bounds():
    closed = P._num(0.5)
    assert closed(0.5) is None
    assert closed(0.25) == "must be >= 0.5; got 0.25"
    opened = P._num(0.5, lo_open=True)
    assert opened(0.5) == "must be > 0.5; got 0.5"
    assert opened(0.5000001) is None
    assert opened(0.25) == "must be > 0.5; got 0.25"
    assert P._num(0)(0) is None           # closed by default
    assert P._num(0)(-0.0001) == "must be >= 0; got -0.0001"


def test_num_upper_bound_is_inclusive():
    check = P._num(0, 2, lo_open=True)
    assert check(2) is None and check(2.0) is None
    assert check(2.5) == "must be <= 2; got 2.5"
    assert check(0) == "must be > 0; got 0"
    assert P._num(hi=1)(-5) is None and P._num(hi=1)(1.01) == "must be <= 1; got 1.01"


# ------------------------------------------------------------------------------------------------ _choice, _bool
def test_choice_accepts_only_the_strings_listed():
    check = P._choice(v for v in ("a", "b"))   # a generator: kept as a tuple, usable on every call
    assert check("a") is None and check("b") is None and check("a") is None
    assert check("c") == "must be one of ['a', 'b']; got 'c'"
    assert check(None) == "must be one of ['a', 'b']; got None"
    numbers = P._choice((1, 2))
    assert numbers(1) == "must be one of [1, 2]; got 1"   # strings only


def test_bool_accepts_only_true_and_false():
    assert P._bool(True) is None and P._bool(False) is None
    assert P._bool(1) == "must be True or False; got int 1"
    assert P._bool("True") == "must be True or False; got str 'True'"


# ------------------------------------------------------------------------------------------------ _list
def test_list_type_and_length_guards():
    check = P._list(P._int())
    assert check("ab") == "must be a list; got str 'ab'"
    assert check({1: 2}) == "must be a list; got dict {1: 2}"
    assert check([]) == "must hold at least 1 value; got []"
    assert check((4,)) is None and check([4]) is None
    two = P._list(P._int(), min_len=2, max_len=3)
    assert two([1]) == "must hold at least 2 values; got [1]"
    assert two([1, 2]) is None and two((1, 2, 3)) is None
    assert two((1, 2, 3, 4)) == "must hold at most 3 values; got [1, 2, 3, 4]"
    assert P._list(P._int(), min_len=0)([]) is None
    assert P._list(P._int())(list(range(1000))) is None   # no upper bound by default


def test_list_names_the_first_invalid_entry_without_its_got_part():
    check = P._list(P._int(1))
    assert check([1, 0, -1]) == "has an invalid entry 0: must be >= 1"
    assert check([2, "x"]) == "has an invalid entry 'x': must be an integer"
    assert check([0, 0]) == "has an invalid entry 0: must be >= 1"   # entries are checked before repeats


def test_list_repeats_and_must_contain():
    check = P._list(P._num())
    assert check([1, 2, 1]) == "must not repeat a value; got [1, 2, 1]"
    assert check([1, 1.0]) is None                 # distinct by repr
    assert P._list(P._num(), unique=False)([3, 3]) is None
    needs = P._list(P._int(1), must_contain=(10, 20))
    assert needs([10, 20, 1]) is None
    assert needs([1, 20]) == "must contain [10] (the value the paper's claim is checked at); got [1, 20]"
    assert needs((1,)) == "must contain [10, 20] (the value the paper's claim is checked at); got [1]"


# ------------------------------------------------------------------------------------------------ _optional, _either
def test_optional_passes_none_and_checks_anything_else():
    check = P._optional(P._int(1))
    assert check(None) is None and check(3) is None
    assert check(0) == "must be >= 1; got 0"


def test_either_passes_when_one_check_passes_and_reports_the_last_problem():
    check = P._either(P._choice(("auto",)), P._source)
    assert check("auto") is None
    assert check("synthetic:tiny") is None
    assert check("bogus") == SOURCE_MSG.format("bogus")
    reversed_ = P._either(P._source, P._choice(("auto",)))
    assert reversed_("bogus") == "must be one of ['auto']; got 'bogus'"
    three = P._either(P._choice(("a",)), P._choice(("b",)), P._int())
    assert three("b") is None and three(3) is None
    assert three("c") == "must be an integer; got str 'c'"


# ------------------------------------------------------------------------------------------------ _dict
def test_dict_without_fields_needs_string_keys_only():
    check = P._dict()
    assert check({}) is None and check({"a": object()}) is None
    assert check({"a": 1, 2: 3}) == "must have string keys; got {'a': 1, 2: 3}"
    assert check([("a", 1)]) == "must be a dict; got list [('a', 1)]"


def test_dict_with_fields_unknown_missing_and_bad_values():
    check = P._dict({"b": P._int(1), "a": P._num(0)}, required=("a",))
    assert check({"a": 0, "b": 1}) is None
    assert check({"a": 0}) is None
    assert check({"a": 0, "z": 1}) == "has unknown key(s) ['z']; known: ['a', 'b']"
    assert check({"b": 1}) == "needs the key(s) ['a']"
    assert check({"a": 0, "b": 0}) == "['b'] must be >= 1; got 0"
    assert check({"a": "x", "b": 0}) == "['a'] must be a finite number; got str 'x'"
    assert check(3) == "must be a dict; got int 3"
    both = P._dict({"a": P._int(), "b": P._int()}, required=("a", "b"))
    assert both({}) == "needs the key(s) ['a', 'b']"


def test_open_dict_allows_and_ignores_unknown_keys():
    check = P._dict({"a": P._int(1)}, open_=True)
    assert check({"a": 1, "z": "anything"}) is None
    assert check({"z": 0}) is None
    assert check({"a": 0, "z": 1}) == "['a'] must be >= 1; got 0"


# ------------------------------------------------------------------------------------------------ sources
def test_source_needs_a_known_kind_and_something_after_it():
    for ok in ("synthetic:tiny", "cache:coco:ViT-B-32:openai", "local:/x", "sims:/y", "real:coco500-clip-b16"):
        assert P._source(ok) is None, ok
    for bad in ("synthetic:", "real:", "sims:", "bogus:x", "synthetic", 3, None):
        assert P._source(bad) == SOURCE_MSG.format(bad), bad


def test_real_source_must_name_a_release():
    releases = _releases()
    msg = f"must be 'real:<release>', <release> one of {releases}; got {{!r}}"
    assert P._real_source(f"real:{releases[0]}") is None
    for bad in ("real:nope", releases[0], f"local:{releases[0]}", f"real:{releases[0]}x", 5, "real:"):
        assert P._real_source(bad) == msg.format(bad), bad


def test_real_sources_auto_alone_or_release_sources():
    rel = _releases()[0]
    assert P._real_sources(["auto"]) is None and P._real_sources(("auto",)) is None
    assert P._real_sources([]) is None
    assert P._real_sources([f"real:{rel}"]) is None
    assert P._real_sources(["auto", f"real:{rel}"]) == \
        f"must be ['auto'] alone, or a list of 'real:<release>' strings without 'auto'; got ['auto', 'real:{rel}']"
    assert P._real_sources(("auto", "auto")) == \
        "must be ['auto'] alone, or a list of 'real:<release>' strings without 'auto'; got ['auto', 'auto']"
    assert P._real_sources("auto") == "must be a list; got str 'auto'"
    assert P._real_sources(["real:nope"]).startswith("has an invalid entry 'real:nope': must be 'real:<release>'")


def test_cross_source_allows_auto_none_and_sources():
    for ok in (None, "auto", "none", "local:/x"):
        assert P._cross_source(ok) is None, ok
    for bad in ("Auto", "", "nothing"):
        assert P._cross_source(bad) == SOURCE_MSG.format(bad), bad


def test_published_reads_the_named_column_and_paper_when_checked(monkeypatch):
    from hubnorm.experiments import protocol

    calls = []

    def fake(column, paper="nnn"):
        calls.append((column, paper))
        return ["Zeta", "Alpha"]

    check = P._published("dataset", "dbsn", ("auto", "unknown"))
    monkeypatch.setattr(protocol, "published_names", fake)
    assert check("Alpha") is None and check("auto") is None and check("unknown") is None
    assert check("beta") == "must be one of ['auto', 'unknown', 'Zeta', 'Alpha']; got 'beta'"
    assert check(1) == "must be one of ['auto', 'unknown', 'Zeta', 'Alpha']; got 1"
    assert calls == [("dataset", "dbsn")] * 5
    assert P._published("model", "nnn")("auto") == "must be one of ['Zeta', 'Alpha']; got 'auto'"   # no extra
    assert calls[-1] == ("model", "nnn")


def test_published_against_the_package_tables():
    assert P._published("model", "nnn", ("auto",))("CLIP") is None
    assert P._published("model", "dbsn")("zs CLIP") is None
    assert P._published("model", "dbsn")("CLIP") is not None
    assert P._published("dataset", "nnn")("coco") is None


# ------------------------------------------------------------------------------------------------ rules
def test_R_builds_a_rule_with_every_field():
    def check(v):
        return None

    rule = P.R("int", "an integer", check, "7")
    assert rule == Rule("int", "an integer", check, "7")
    assert (rule.kind, rule.text, rule.check, rule.example) == ("int", "an integer", check, "7")
    assert P.R("str", "t", check).example == ""


def test_rule_for_prefers_the_notebook_override():
    assert rule_for("06", "is_tau") is SCHEMA["06:is_tau"]
    assert rule_for("01", "is_tau") is SCHEMA["is_tau"]
    assert rule_for("00", "k") is SCHEMA["00:k"]
    assert rule_for("01", "k") is None
    assert rule_for("01", "no_such_parameter") is None


def test_example_per_kind():
    def rule(kind):
        return Rule(kind, "", P._bool)

    assert [P._example(rule(k)) for k in ("int", "float", "bool", "str", "list", "dict", "None", "other")] == \
        ["1", "0.5", "True", "'...'", "[...]", "'{...}'", "...", "..."]


# ------------------------------------------------------------------------------------------------ cross checks
def test_cross_checks_of_notebook_00():
    assert P._cross_checks("00", {"k": 40, "n_points": 40}) == \
        [("k", "must be smaller than n_points (40); got 40")]
    assert P._cross_checks("00", {"k": 39, "n_points": 40}) == []
    assert P._cross_checks("00", {"k": 50.0, "n_points": 40}) == []   # a wrong type is the rule's problem
    assert P._cross_checks("00", {"k": 50, "n_points": "40"}) == []
    assert P._cross_checks("00", {"k": 50}) == [] and P._cross_checks("00", {"n_points": 5}) == []
    assert P._cross_checks("01", {"k": 50, "n_points": 40}) == []


def test_cross_checks_of_notebook_03():
    assert P._cross_checks("03", {"directions": ["t2i"], "heat_directions": ["i2t", "t2i"]}) == \
        [("heat_directions", "must be among directions ['t2i']; got ['i2t']")]
    assert P._cross_checks("03", {"directions": ["t2i", "i2t"], "heat_directions": ["i2t"]}) == []
    assert P._cross_checks("03", {"directions": ["t2i"], "heat_directions": None}) == []
    assert P._cross_checks("03", {"directions": "t2i", "heat_directions": ["i2t"]}) == []
    assert P._cross_checks("03", {"heat_directions": ["i2t"]}) == []
    assert P._cross_checks("04", {"directions": ["t2i"], "heat_directions": ["i2t"]}) == []


# ------------------------------------------------------------------------------------------------ validate
def test_validate_returns_the_checked_parameters_only():
    ns = {"seed": 3, "fast": True, "_seed": -1, "__name__": "x", "np": object(), "unknown": [1]}
    assert validate("01", ns) == {"seed": 3, "fast": True}
    assert validate("01", {}) == {}


def test_validate_never_checks_a_private_name_even_when_a_rule_matches_it(monkeypatch):
    """IPython's ``_``, ``_1``, ``_i`` ... are not parameters, whatever SCHEMA holds."""
    monkeypatch.setitem(SCHEMA, "_x", SCHEMA["seed"])
    monkeypatch.setitem(SCHEMA, "01:_y", SCHEMA["seed"])
    assert validate("01", {"_x": -1, "_y": "bad", "seed": 0}) == {"seed": 0}


def test_validate_skips_private_and_unknown_names_but_goes_on():
    with pytest.raises(ValueError, match="parameter seed must be >= 0"):
        validate("01", {"_hidden": 1, "foo": 2, "seed": -1})


def test_validate_error_line_in_full():
    with pytest.raises(ValueError) as err:
        validate("01", {"seed": -1})
    assert str(err.value) == ("notebook 01 parameter seed must be >= 0; got -1; expected an integer >= 0 "
                              "(pass e.g. -p seed 1)")
    with pytest.raises(ValueError) as err:
        validate("05", {"n_boot": 9})
    # no example in the rule: the kind's example
    assert str(err.value) == ("notebook 05 parameter n_boot must be >= 10; got 9; expected an integer >= 10 "
                              "(bootstrap resamples) (pass e.g. -p n_boot 1)")


def test_validate_uses_the_notebook_override_in_the_message():
    with pytest.raises(TypeError) as err:
        validate("06", {"is_tau": 0.5})
    assert str(err.value) == ("notebook 06 parameter is_tau must be a dict; got float 0.5; expected "
                              "{'t2i': number > 0, 'i2t': number > 0} (pass e.g. -p is_tau '{...}')")
    assert validate("01", {"is_tau": 0.5}) == {"is_tau": 0.5}


def test_validate_lists_every_problem_one_per_line_in_order():
    with pytest.raises(ValueError) as err:
        validate("00", {"seed": -1, "dtype": "float16", "k": 5, "n_points": 5})
    lines = str(err.value).split("\n")
    assert len(lines) == 4
    assert lines[0].startswith("notebook 00 parameter seed must be >= 0; got -1")
    assert lines[1] == ("notebook 00 parameter dtype must be one of ['float64', 'float32']; got 'float16'; expected "
                        "'float64' or 'float32' (pass e.g. -p dtype '...')")
    assert lines[2].startswith("notebook 00 parameter n_points must be >= 20; got 5")
    assert lines[3] == ("notebook 00 parameter k must be smaller than n_points (5); got 5; expected an integer >= 1 "
                        "(smaller than n_points) (pass e.g. -p k 1)")


@pytest.mark.parametrize("name,value", [("seed", 1.5), ("alpha", "x"), ("dims", 3), ("nnn_params", 3), ("fast", 1),
                                        ("nnn_params", {"alpha": "x", "k": 1})])
def test_validate_raises_type_error_when_every_problem_is_a_type(name, value):
    with pytest.raises(TypeError, match=f"notebook 03 parameter {name} "):
        validate("03", {name: value})


@pytest.mark.parametrize("ns", [{"seed": -1}, {"source": "bogus"}, {"image_dir": ""}, {"dtype": "x"},
                                {"seed": -1, "fast": 1}, {"fast": 1, "seed": -1}, {"dims": [1]}])
def test_validate_raises_value_error_when_a_problem_is_not_a_type(ns):
    with pytest.raises(ValueError) as err:
        validate("03", ns)
    assert type(err.value) is ValueError


@pytest.mark.parametrize("ns", [{"alpha": float("nan")}, {"alpha": math.inf}, {"nnn_params": {"alpha": float("nan"), "k": 4}}])
def test_a_number_that_is_not_finite_is_a_value_error_not_a_type_error(ns):
    # a float NaN has the right type and a wrong value (the message is the type check's: "must be a finite number")
    with pytest.raises(ValueError, match="must be a finite number; got float") as err:
        validate("03", ns)
    assert type(err.value) is ValueError


def test_a_cross_check_makes_a_type_problem_a_value_error():
    with pytest.raises(ValueError) as err:
        validate("00", {"seed": "x", "k": 30, "n_points": 20})
    assert type(err.value) is ValueError
    assert "parameter seed must be an integer" in str(err.value) and "parameter k must be smaller" in str(err.value)


# ------------------------------------------------------------------------------------------------ markdown
def test_markdown_has_the_header_and_one_row_per_rule():
    text = markdown()
    assert text.endswith(" |\n") and not text.endswith("\n\n")
    lines = text.split("\n")[:-1]
    assert lines[:8] == [
        "# Notebook parameters", "",
        "Generated from `hubnorm.experiments.parameters.SCHEMA` (`python -m hubnorm.experiments.parameters > "
        "docs/parameters.md`): the",
        "rules every notebook checks at its top (`nb.setup(..., params=globals())`). `NN:name` is a rule of",
        "notebook NN only. Defaults and one-line help: `papermill --help-notebook notebooks/NN_name.ipynb`.", "",
        "| parameter | type | valid values |", "|---|---|---|"]
    rows = lines[8:]
    assert len(rows) == len(SCHEMA)
    assert rows[0] == f"| `source` | str | {SCHEMA['source'].text} |"
    assert "| `06:is_tau` | dict | {'t2i': number > 0, 'i2t': number > 0} |" in rows
    assert "| `seed` | int | an integer >= 0 |" in rows
    assert markdown({"01": ["seed"]}) == text
