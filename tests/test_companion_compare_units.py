"""compare: unit tests of the joins, guards and reshapes on a small hand-written published table.

Most tests replace ``compare.load_published`` by :func:`_fake_load` (a table whose every number is written here), so
that table order, duplicate keys and a second paper with the same table ids can be set up on purpose.

Equivalent mutants left (mutation run of this file with tests/test_compare.py, test_protocol.py,
test_provenance_marks.py):
- to_long without ``value_name="value"``: "value" is pandas' default.
- side_by_side ``"published" in out.columns`` -> ``or True`` / ``else 1``: reporting.beside_published always
  returns a ``published`` column, so the else branch is dead.
- beside_published, the ``lo``/``hi`` melts: ``id_vars=None``, no ``id_vars``, ``var_name=None``/dropped/renamed
  (12 mutants): only the ``lo``/``hi`` value column is read (``.to_numpy()``), whose order is the same.
- beside_published ``_keys_from_setting(..., None)``: ``_keys_from_setting`` never reads ``on``.
- ``sort_values(..., kind="STABLE")`` (twice): numpy reads the sort kind case-insensitively.
- ``drop_duplicates(...)`` without ``keep="first"`` (pub and ci95 rows): ``"first"`` is the default.
- merges with ``on=None`` or without ``on`` (``rows="ours"`` pub/ours merges, ci ``half`` and ``95% CI`` merges,
  ``_with_bank``'s marks, ``_difference``'s baseline): the two frames share exactly the key columns, which is what
  pandas joins on by default.
- ``rows="ours"`` final merge without ``how="left"``: every key of ours is in the outer join ``out``, and an inner
  merge keeps the left keys' order, so inner == left.
- ``_with_bank`` ``groupby(sort=None/True/default)``: the marks are merged back by key; their group order is unseen.
- ``_with_bank`` ``groupby(dropna=None)``: pandas reads None as false, i.e. as ``dropna=False``.
- wide_by ``need < set(columns)``: a valid ``joined`` also has the key ``column``, so it is always a strict superset.
- wide_by's fallback ``pd.DataFrame(columns=keys + ["run"] + labels)`` and ``if sides or True`` (6 mutants): the
  "this run" side is always appended, so ``sides`` is never empty.
- wide_by's run label ``else "XXXX"`` for an empty ``joined`` (2): an empty joined has no row to carry the label.
- wide_by's skip of the published side when no published number matched (``side == "XXpublishedXX"``/
  ``"PUBLISHED"``): without it, that side's all-NaN rows are dropped by the next filter, leaving the same result.
- wide_by ``pivot_table(dropna=None)`` / ``sort=None``, gains ``groupby(sort=None)``: pandas reads None as false.
- gains ``astype(None)``: pandas reads it as float64, the same as ``astype(float)``.
- gains ``float("NAN")`` (twice): Python parses "NAN" as NaN.
- gains ``pd.DataFrame(rows, columns=None)`` when rows exist: the dict keys are written in GAIN_COLUMNS order.
"""

import numpy as np
import pandas as pd
import pytest

from hubnorm_companion import compare

PUB_COLUMNS = ["paper", "table", "model", "dataset", "direction", "setting", "method", "metric", "value", "note"]
P = "paper-a"


def _row(table, direction, setting, method, metric, value, paper=P, model="M", dataset="D"):
    return [paper, table, model, dataset, direction, setting, method, metric, value, "n"]


def _fake_table():
    rows = [
        # another paper with the same table id and keys, listed first
        _row("T1", "t2i", "s", "nnn", "R@1", 99.0, paper="paper-b"),
        _row("T1", "t2i", "none", "raw", "R@1", 98.0, paper="paper-b"),
        # table T2 is listed in the file before T1; both report (t2i, nnn, s, R@1)
        _row("T2", "t2i", "s", "nnn", "R@1", 20.0),
        _row("T2", "t2i", "s", "nnn", "R@1 ci95", 2.0),
        _row("T1", "t2i", "s", "nnn", "R@1", 10.0),
        _row("T1", "t2i", "s", "nnn", "R@1 ci95", 1.0),
        _row("T1", "t2i", "none", "raw", "R@1", 5.0),
        _row("T1", "t2i", "s", "dn", "R@1", 7.0),          # published only: no row of ours
        _row("T1", "i2t", "s", "nnn", "R@1", 11.0),
        # settings that carry a key
        _row("K", "t2i", "k=16", "nnn", "R@1", 16.0),
        _row("K", "t2i", "none", "raw", "R@1", 1.0),
        _row("B", "t2i", "bank=coco", "nnn", "R@1", 30.0),
        _row("F", "t2i", "flag=True", "nnn", "R@1", 40.0),
    ]
    # table DUP: 30 keys, each listed twice in a row (first 1000 + i, then 2000 + i): the first row of a key wins
    for i in range(30):
        rows += [_row("DUP", "t2i", "s", f"m{i:02d}", "R@1", 1000.0 + i), _row("DUP", "t2i", "s", f"m{i:02d}", "R@1",
                                                                              2000.0 + i)]
    return pd.DataFrame(rows, columns=PUB_COLUMNS)


def _fake_load(paper=None, table=None):
    df = _fake_table()
    if paper is not None:
        df = df[df["paper"] == paper]
    return df.reset_index(drop=True)


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(compare, "load_published", _fake_load)


def _ours(rows, columns=("direction", "method", "setting", "R@1")):
    return pd.DataFrame(rows, columns=list(columns))


def _cell(out, column, **keys):
    sel = out
    for k, v in keys.items():
        sel = sel[sel[k].isna()] if v is None else sel[sel[k] == v]
    assert len(sel) == 1, f"expected one row for {keys}, got {len(sel)}"
    return sel.iloc[0][column]


# ------------------------------------------------------------------------------------------- paper_dataset
@pytest.mark.parametrize("paper, dataset, message", [
    ("", "coco", "^paper must be a non-empty string; got ''$"),
    (P, None, "^dataset must be a non-empty string; got None$"),
])
def test_paper_dataset_names_the_bad_argument(paper, dataset, message):
    with pytest.raises(ValueError, match=message):
        compare.paper_dataset(paper, dataset)


# ------------------------------------------------------------------------------------------- paper_tables
def test_paper_tables_one_id_per_direction_and_a_dash_where_none():
    assert compare.paper_tables("nnn-chowdhury2024", "bootstrap_ci", "coco", ["i2t", "t2i"]) == ["A11", "A10"]
    assert compare.paper_tables("nnn-chowdhury2024", "bank_fraction", "flickr30k", ["t2i", "both"]) == ["A12", "-"]
    assert compare.paper_tables("nnn-chowdhury2024", "bank_fraction", "cc3m", ["t2i"]) == ["-"]
    with pytest.raises(ValueError, match=r"^no table map for paper 'nnn-chowdhury2024', study 'k'; known: "
                                         r"\[\('nnn-chowdhury2024', 'bank_fraction'\), "):
        compare.paper_tables("nnn-chowdhury2024", "k", "coco", ["t2i"])


# --------------------------------------------------------------------------------------- published, to_long
def test_published_filters_one_paper_and_takes_a_table_id_string_whole(fake):
    one = compare.published(P, "T1")
    assert set(one["paper"]) == {P} and set(one["table"]) == {"T1"}
    assert sorted(one["value"]) == [1.0, 5.0, 7.0, 10.0, 11.0]      # paper-b's T1 (99, 98) left out
    assert list(one.index) == list(range(len(one))) and list(one.columns) == PUB_COLUMNS
    assert list(compare.published(P, ["T1"])["value"]) == list(one["value"])
    assert sorted(compare.published(P, "T1", method=["raw", "dn"])["value"]) == [5.0, 7.0]
    assert list(compare.published(P, "T1", method="raw")["value"]) == [5.0]


def test_published_names_an_unknown_column(fake):
    with pytest.raises(ValueError, match=r"published tables have no column 'k'; columns: \['paper', 'table'"):
        compare.published(P, "T1", k=16)


def test_to_long_names_the_value_column_and_keeps_only_present_metrics():
    wide = pd.DataFrame({"direction": ["t2i", "i2t"], "R@1": [1.0, 2.0], "MnR": [3.0, 4.0]})
    long = compare.to_long(wide, ["direction"])
    assert list(long.columns) == ["direction", "metric", "value"]
    assert list(zip(long["direction"], long["metric"], long["value"])) == [
        ("t2i", "R@1", 1.0), ("i2t", "R@1", 2.0), ("t2i", "MnR", 3.0), ("i2t", "MnR", 4.0)]


# ------------------------------------------------------------------------------------------- beside_published
def test_the_first_listed_table_wins_and_the_note_names_the_tables(fake):
    ours = _ours([["t2i", "nnn", "s", 12.0]])
    first_t1 = compare.beside_published(ours, P, ["T1", "T2"], label="x")
    assert _cell(first_t1, "published", method="nnn", direction="t2i") == 10.0   # not paper-b's 99, listed first
    assert _cell(first_t1, "published", method="raw") == 5.0                      # not paper-b's 98
    assert set(first_t1["published source"]) == {"paper-a Tables T1, T2"}
    first_t2 = compare.beside_published(ours, P, ["T2", "T1"], label="x")
    assert _cell(first_t2, "published", method="nnn", direction="t2i") == 20.0
    one = compare.beside_published(ours, P, "T1", label="x")
    assert set(one["published source"]) == {"paper-a Table T1"}
    assert _cell(one, "published", method="raw") == 5.0


def test_within_one_table_the_row_listed_first_wins(fake):
    """Many ties in the table-order sort: it must be stable, or a key's second row may win."""
    ours = _ours([["t2i", f"m{i:02d}", "s", float(i)] for i in range(30)])
    for tables in ("DUP", ["DUP", "T1"]):   # T1, listed second, is above DUP in the file: the sort moves rows
        out = compare.beside_published(ours, P, tables, label="x")
        out = out[out["method"].str.startswith("m")]
        assert len(out) == 30
        assert list(out.sort_values("method")["published"]) == [1000.0 + i for i in range(30)]


def test_ci_half_width_from_the_first_table_and_rows_without_one_kept(fake):
    ours = pd.DataFrame({"direction": ["t2i", "t2i"], "method": ["nnn", "raw"], "setting": ["s", "none"],
                         "R@1": [12.0, 6.0], "R@1 lo": [11.0, 5.0], "R@1 hi": [14.0, 6.5]})
    out = compare.beside_published(ours, P, ["T1", "T2"], label="x", ci=True)
    assert len(out) == 3 and not out.duplicated(["direction", "method", "setting"]).any()
    assert _cell(out, "published ±", method="nnn", direction="t2i") == 1.0
    assert _cell(out, "half-width", method="nnn", direction="t2i") == 1.5
    # the raw row has no published ci95 row: it stays, with a missing published ±
    assert np.isnan(_cell(out, "published ±", method="raw")) and _cell(out, "95% CI", method="raw") == "[5.00, 6.50]"
    first_t2 = compare.beside_published(ours, P, ["T2", "T1"], label="x", ci=True)
    assert _cell(first_t2, "published ±", method="nnn", direction="t2i") == 2.0


def test_wide_results_with_a_metric_column_but_no_value_column_are_wide(fake):
    """Long results need both ``metric`` and ``value``: a stray ``metric`` column leaves them wide."""
    ours = _ours([["t2i", "nnn", "s", 12.0, "R@5"]], columns=("direction", "method", "setting", "R@1", "metric"))
    out = compare.beside_published(ours, P, "T1", label="x")
    assert _cell(out, "this run", method="nnn", direction="t2i") == 12.0


def test_names_rename_only_the_methods_they_name(fake):
    ours = _ours([["t2i", "nnn", "s", 12.0], ["t2i", "raw", "none", 6.0]])
    out = compare.beside_published(ours, P, "T1", label="x", names={"nnn": "NNN"})
    assert set(out["method"]) == {"NNN", "raw", "dn"}


def test_sort_by_one_column_is_stable(fake):
    ours = _ours([[d, f"m{i:02d}", "s", float(i)] for i in range(30) for d in ("t2i", "i2t")])
    plain = compare.beside_published(ours, P, "DUP", label="x")
    out = compare.beside_published(ours, P, "DUP", label="x", sort_by=["direction"])
    expect = [m for d in ("i2t", "t2i") for m in plain.loc[plain["direction"] == d, "method"]]
    assert list(out["method"]) == expect and list(out.index) == list(range(len(out)))


def test_bank_marks_beside_our_rows_and_empty_for_published_only_rows(fake):
    ours = pd.DataFrame({"direction": ["t2i", "t2i", "t2i"], "method": ["nnn", "raw", "csls"],
                         "setting": ["s", "none", np.nan], "R@1": [12.0, 6.0, 8.0],
                         "bank": ["coco train", "-", "f30k"]})
    out = compare.beside_published(ours, P, "T1", label="x")
    assert _cell(out, "bank", method="nnn", direction="t2i") == "coco train"
    assert _cell(out, "bank", method="raw") == "-"
    assert _cell(out, "bank", method="csls") == "f30k"            # a key with a missing setting keeps its mark
    assert _cell(out, "bank", method="dn") == ""                  # published only


def test_two_banks_under_one_key_are_joined(fake):
    ours = pd.DataFrame({"direction": ["t2i", "t2i"], "method": ["nnn", "nnn"], "setting": ["s", "s2"],
                         "R@1": [12.0, 13.0], "bank": ["b1", "b2"]})
    out = compare.beside_published(ours, P, "T1", on=["direction", "method"], label="x")
    assert set(out.loc[out["method"] == "nnn", "bank"]) == {"b1 / b2"}


def test_a_bank_key_read_from_the_setting_is_not_marked_again(fake):
    ours = pd.DataFrame({"direction": ["t2i"], "bank": ["coco"], "R@1": [31.0]})
    out = compare.beside_published(ours, P, "B", on=["direction", "bank"], setting_keys={"bank": r"bank=(\w+)"},
                                   label="x")
    assert list(out.columns) == ["direction", "bank", "metric", "published", "this run", "run", "published source"]
    assert _cell(out, "published", bank="coco") == 30.0 and _cell(out, "this run", bank="coco") == 31.0


def test_setting_keys_integer_keys_stay_integers_and_bool_keys_are_not_numbers(fake):
    ours = pd.DataFrame({"direction": ["t2i"], "k": [16], "R@1": [17.0]})
    out = compare.beside_published(ours, P, "K", on=["direction", "k"], setting_keys={"k": r"k=(\d+)"}, label="x")
    assert str(out["k"].dtype) == "Int64"
    assert _cell(out, "published", k=16) == 16.0 and _cell(out, "published", k=None) == 1.0
    flags = pd.DataFrame({"direction": ["t2i"], "flag": [True], "R@1": [41.0]})
    out = compare.beside_published(flags, P, "F", on=["direction", "flag"], setting_keys={"flag": r"flag=(\w+)"},
                                   label="x")
    assert sorted(out["published"].dropna()) == [40.0] and sorted(out["this run"].dropna()) == [41.0]


def test_delta_keeps_a_treatment_row_without_baseline_and_the_first_baseline_row(fake):
    ours = pd.DataFrame({"direction": ["t2i", "t2i", "t2i", "i2t"], "method": ["raw", "nnn", "raw", "nnn"],
                         "metric": ["R@1"] * 4, "value": [6.0, 12.0, 9.0, 13.0]})
    out = compare.beside_published(ours, P, "T1", on=["direction", "method"], delta=("nnn", "raw"), rows="ours",
                                   label="x")
    assert list(zip(out["direction"], out["metric"])) == [("t2i", "R@1"), ("i2t", "R@1")]
    assert _cell(out, "this run", direction="t2i") == 6.0         # 12 - 6: the first raw row of the key
    assert np.isnan(_cell(out, "this run", direction="i2t"))       # no raw row of ours: missing, and kept


@pytest.mark.parametrize("kwargs, message", [
    ({"results": [1]}, "^results must be a pandas DataFrame; got list$"),
    ({"ci": True, "long": True}, r"^ci=True needs wide results \(columns '<metric>', '<metric> lo', '<metric> hi'\)$"),
    ({"long": True, "metrics": ["R@5"]}, "pass them in metrics= or drop those rows first$"),
    ({"ci": True}, r"in results \(hubnorm\.evaluate\(\.\.\., n_boot=\.\.\.\)\)$"),
    ({"delta": ("nnn", 3)}, r"^delta must be \(treatment, baseline\), two different method names"),
    ({"delta": ("nnn", "")}, r"^delta must be \(treatment, baseline\), two different method names"),
    ({"delta": ("nnn", "raw"), "ci": True}, "^delta= and ci=True cannot be combined: a difference has no bootstrap"),
    ({"setting_keys": {"setting": r"(s)"}, "on": ["direction", "method", "setting"]},
     "which is not a key column of on=.* other than 'setting': add it to on=$"),
    ({"setting_keys": {"method": r"(s)(t)"}, "on": ["direction", "method", "setting"]},
     r"has 2 groups; it needs exactly one \(the value\), e\.g\. r'\\bk=\(\\d\+\)'$"),
])
def test_beside_published_guards_say_what_to_do(fake, kwargs, message):
    kwargs = dict(kwargs)
    results = _ours([["t2i", "nnn", "s", 12.0]])
    if kwargs.pop("long", False):
        results = results.melt(id_vars=["direction", "method", "setting"], var_name="metric", value_name="value")
    results = kwargs.pop("results", results)
    with pytest.raises((ValueError, TypeError), match=message):
        compare.beside_published(results, P, "T1", label="x", **kwargs)


# -------------------------------------------------------------------------------------------------- wide_by
def _joined_k(rows, metric="R@1"):
    """A hand-written beside_published result keyed by direction and k: rows of (direction, k, published, ours)."""
    return pd.DataFrame({"direction": [r[0] for r in rows], "k": [r[1] for r in rows],
                         "metric": [r[4] if len(r) > 4 else metric for r in rows],
                         "published": [r[2] for r in rows], "this run": [r[3] for r in rows],
                         "run": "synthetic", "published source": "P T1"})


def test_wide_by_keeps_first_appearance_order_and_one_side_only_rows():
    joined = _joined_k([["t2i", 16.0, 1.0, 2.0], ["t2i", np.nan, 0.5, 0.7], ["i2t", 16.0, np.nan, 3.0],
                        ["both", 16.0, 4.0, np.nan]])
    wide = compare.wide_by(joined, "k")
    assert list(wide.columns) == ["direction", "run", "none", "16"] and wide.columns.name is None
    assert list(wide.index) == list(range(len(wide)))
    pub = wide[wide["run"] == "published (P T1)"]
    mine = wide[wide["run"] == "this run: synthetic"]
    # published side: no row for i2t (only ours has it); this run: a row for "both" (only the paper has it)
    assert list(pub["direction"]) == ["t2i", "both"]
    assert list(mine["direction"]) == ["t2i", "i2t", "both"]
    assert mine["16"].tolist()[:2] == [2.0, 3.0] and np.isnan(mine["16"].tolist()[2])
    assert pub["none"].tolist()[0] == 0.5 and mine["none"].tolist()[0] == 0.7
    assert str(wide["16"].dtype) == "float64"


def test_wide_by_takes_the_first_of_duplicate_cells_and_keeps_missing_keys():
    joined = _joined_k([["t2i", 16.0, 1.0, 2.0], ["t2i", 16.0, 5.0, 8.0]])
    joined.insert(1, "setting", [np.nan, np.nan])
    wide = compare.wide_by(joined, "k")
    assert list(wide["16"]) == [1.0, 2.0] and wide["setting"].isna().all()


def test_wide_by_keeps_metric_as_a_key_when_there_are_two():
    joined = _joined_k([["t2i", 16.0, 1.0, 2.0, "R@1"], ["t2i", 16.0, 3.0, 4.0, "R@5"]])
    wide = compare.wide_by(joined, "k")
    assert list(wide.columns) == ["direction", "metric", "run", "16"]
    assert list(zip(wide["metric"], wide["16"])) == [("R@1", 1.0), ("R@5", 3.0), ("R@1", 2.0), ("R@5", 4.0)]


def test_wide_by_works_on_one_row_and_without_a_metric_column():
    one = _joined_k([["t2i", 16.0, 1.0, 2.0]])
    wide = compare.wide_by(one, "k")
    assert list(wide["run"]) == ["published (P T1)", "this run: synthetic"] and list(wide["16"]) == [1.0, 2.0]
    wide = compare.wide_by(one.drop(columns="metric"), "k")
    assert list(wide.columns) == ["direction", "run", "16"]
    nothing = _joined_k([["t2i", 16.0, np.nan, 2.0]])
    wide = compare.wide_by(nothing, "k")
    assert list(wide["run"]) == ["this run: synthetic"] and str(wide["16"].dtype) == "float64"


def test_wide_by_on_an_empty_result():
    empty = _joined_k([]).astype({"k": float, "published": float, "this run": float})
    wide = compare.wide_by(empty, "k")
    assert len(wide) == 0 and "run" in wide.columns


@pytest.mark.parametrize("call, error, message", [
    (lambda j: compare.wide_by(j.to_dict(), "k"), TypeError,
     r"^joined must be a pandas DataFrame \(a beside_published result\); got dict$"),
    (lambda j: compare.wide_by(j, "metric"), ValueError,
     r"^column must be a key column of joined; got 'metric'; keys: \['direction', 'k', 'metric'\]$"),
    (lambda j: compare.wide_by(j, "k", missing=0), ValueError, r"^missing must be a column name \(str\); got 0$"),
])
def test_wide_by_guards(call, error, message):
    with pytest.raises(error, match=message):
        call(_joined_k([["t2i", 16.0, 1.0, 2.0]]))


# ---------------------------------------------------------------------------------------------------- gains
def _joined_gains(directions=("t2i", "i2t"), setting=True):
    rows = []
    for j, d in enumerate(directions):
        rows += [[d, "raw", "none", "R@1", 50.0 + j, 60.0 + j], [d, "nnn", "s", "R@1", 55.0 + j, 63.0 + j]]
    df = pd.DataFrame(rows, columns=["direction", "method", "setting", "metric", "published", "this run"])
    df = df.assign(run="real: X", **{"published source": "P T1"})
    return df if setting else df.drop(columns="setting")


def test_gains_rows_in_order_of_appearance_with_every_column_filled():
    g = compare.gains(_joined_gains(), raw="raw")
    assert list(g.columns) == compare.GAIN_COLUMNS
    assert list(g["direction"]) == ["t2i", "i2t"] and list(g["metric"]) == ["R@1", "R@1"]
    assert list(g["published"]) == [55.0, 56.0] and list(g["published raw"]) == [50.0, 51.0]
    assert list(g["published source"]) == ["P T1", "P T1"] and list(g["data"]) == ["real: X", "real: X"]
    assert list(g["gain"]) == [3.0, 3.0] and list(g["ratio"]) == [pytest.approx(0.6)] * 2


def test_gains_without_a_setting_column_and_with_exactly_the_needed_columns():
    g = compare.gains(_joined_gains(directions=("t2i",), setting=False), raw="raw")
    assert list(g["setting"]) == [""] and list(g["gain"]) == [3.0] and list(g["published gain"]) == [5.0]


def test_gains_of_raw_rows_only_is_an_empty_table_with_the_gain_columns():
    g = compare.gains(_joined_gains()[lambda d: d["method"] == "raw"], raw="raw")
    assert len(g) == 0 and list(g.columns) == compare.GAIN_COLUMNS


def test_gains_raw_row_of_setting_none_is_taken_over_another_setting():
    j = _joined_gains(directions=("t2i",))
    cited = j[j["method"] == "raw"].assign(setting="cited", published=40.0, **{"this run": 45.0})
    g = compare.gains(pd.concat([j, cited], ignore_index=True), raw="raw")
    assert list(g["published raw"]) == [50.0] and list(g["raw scores"]) == [60.0]


@pytest.mark.parametrize("setting", [True, False])
def test_gains_two_raw_values_name_the_settings_and_the_fix(setting):
    j = _joined_gains(directions=("t2i",), setting=setting)
    other = j[j["method"] == "raw"].assign(published=40.0)
    if setting:
        j["setting"] = ["a", "s"]
        other = other.assign(setting="b")
    names = r"\['a', 'b'\]" if setting else r"\[\]"
    with pytest.raises(ValueError, match=rf"settings {names}\): filter the published rows to one raw setting "
                                         r"\(setting=\[\.\.\.\] of beside_published\)$"):
        compare.gains(pd.concat([j, other], ignore_index=True), raw="raw")


@pytest.mark.parametrize("joined, message, error", [
    ([1], r"^joined must be a pandas DataFrame \(a beside_published result\); got list$", TypeError),
    (None, r"name the raw scores' method as the table writes it \(e\.g\. 'Original' after names=DISPLAY_NAMES\)$",
     ValueError),
])
def test_gains_guards(joined, message, error):
    with pytest.raises(error, match=message):
        compare.gains(_joined_gains() if joined is None else joined, raw="Original")
