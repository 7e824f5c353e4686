"""Unit checks of hubnorm_companion.notebook: the set-up of a notebook run, its saved tables and figures with
their provenance, the PASS/DIFFERS record and the generated sentences, against hand-computed values.

The figure tests use a stand-in figure that records its ``savefig`` calls, with the readers of a figure
(``shown_words``, ``plotted_values``) and the layout pass (``tidy``, ``layout_problems``) of
:mod:`hubnorm_companion.figures` replaced by fakes: what ``save_figure`` does with them is checked, not
matplotlib's drawing (tests/test_provenance_marks.py and tests/test_figures.py draw real figures).

Equivalent mutants left (no behaviour can tell them apart):

- ``_Table.__repr__`` / ``key_numbers``: the values of the ``display.width`` (200), ``display.max_columns`` (50)
  and ``display.max_colwidth`` (60) options: ``DataFrame.to_string`` neither wraps, drops columns nor cuts cells
  by these options, so 201 / 51 / 61 (or None) print the same text; an option name in capitals
  (``"DISPLAY.MAX_COLWIDTH"``) names the same option (pandas matches option names case-insensitively).
- ``_Table._repr_html_``: ``to_html(index=None)`` for ``index=False``: pandas reads None as no index.
- ``check``: ``to_csv(..., index=None)`` for ``index=False`` (None reads as no index), and
  ``pd.DataFrame([row], columns=None)`` for ``columns=CLAIM_COLUMNS`` (the row dict lists the same columns in the
  same order).
- ``changes``: ``first = None`` for ``first = False`` (both falsy, only read by ``if first``).
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import types
import warnings

import numpy as np
import pandas as pd
import pytest
import torch

torch.set_num_threads(1)

from hubnorm import provenance as pv  # noqa: E402
from hubnorm_companion import figures as figures_module  # noqa: E402
from hubnorm_companion import notebook as nb  # noqa: E402
from hubnorm_companion import parameters as parameters_module  # noqa: E402
from hubnorm_companion import reporting  # noqa: E402

AWARE_NOTE = ("(QUERY-AWARE: a test query or test target, or a near copy of one, is in a bank the normalizer "
              "saw).")


@pytest.fixture(autouse=True)
def _fresh_state(tmp_path, monkeypatch):
    """Every test writes under its own results folder and starts with no checks, no record and no ledger."""
    monkeypatch.setenv("HUBNORM_RESULTS", str(tmp_path / "results"))
    saved = dict(nb._RECORD)
    nb._CHECKS.clear()
    nb._RECORD.update(file=None, prefix=None, data=None)
    pv.clear_ledger()
    yield
    nb._CHECKS.clear()
    nb._RECORD.clear()
    nb._RECORD.update(saved)
    pv.clear_ledger()


def _query_aware_only(*values):
    """Put ``values`` in the ledger as R@K numbers that only a query-aware fit produced."""
    pv.note_recalls(values)
    for v in values:
        pv.note_result({"R@1": v}, pv.QUERY_AWARE)


# ------------------------------------------------------------------------------------------------- fake figures
class FakeFigure:
    """Records what save_figure asks of a figure; its texts and numbers come from ``words`` and ``values``."""

    def __init__(self, words="", values=()):
        self.words, self.values, self.saved = words, np.asarray(values, dtype=float), []

    def savefig(self, path, **kwargs):
        self.saved.append((path.name, kwargs))
        path.write_bytes(b"figure")


@pytest.fixture
def fake_layout(monkeypatch):
    """The layout pass replaced: ``calls`` records tidy / layout_problems; ``problems`` is what the check finds."""
    state = types.SimpleNamespace(calls=[], problems=[])

    def tidy(fig):
        state.calls.append(("tidy", fig))

    def layout_problems(fig):
        state.calls.append(("problems", fig))
        return list(state.problems)

    monkeypatch.setattr(figures_module, "tidy", tidy)
    monkeypatch.setattr(figures_module, "layout_problems", layout_problems)
    monkeypatch.setattr(figures_module, "shown_words", lambda fig: fig.words)
    monkeypatch.setattr(figures_module, "plotted_values", lambda fig: fig.values)
    return state


def _figures(tmp_path):
    return tmp_path / "results" / "figures"


# -------------------------------------------------------------------------------------------------- save_figure
def test_save_figure_writes_png_pdf_caption_and_record_with_the_provenance(tmp_path, monkeypatch, fake_layout):
    monkeypatch.setenv("HUBNORM_FIGURE_CHECK", "off")
    fig = FakeFigure()
    run = nb.Run(prefix="07")
    assert run.save_figure(fig, "recall", data=["real: a", "real: b", "real: a"], bank=[" none ", "query-agnostic"],
                           caption="  R@1 per method.  ") is None
    said = "data: real: a; real: b. bank: none, query-agnostic"
    assert fig.saved == [("07_recall.png", {"dpi": 150, "bbox_inches": "tight", "metadata": {"Description": said}}),
                         ("07_recall.pdf", {"bbox_inches": "tight", "metadata": {"Subject": said}})]
    out = _figures(tmp_path)
    assert (out / "07_recall.txt").read_text() == "R@1 per method.\n"
    assert json.loads((out / "07_recall.json").read_text()) == {
        "figure": "07_recall", "data": ["real: a", "real: b"], "bank": ["none", "query-agnostic"],
        "caption": "R@1 per method."}
    assert fake_layout.calls == []                              # mode off: no layout pass
    # saved again without a caption: the earlier caption file goes, and a missing one stays missing
    run.save_figure(FakeFigure(), "recall", data="real: a", bank="none")
    assert not (out / "07_recall.txt").exists()
    run.save_figure(FakeFigure(), "recall", data="real: a", bank="none", caption="")
    assert not (out / "07_recall.txt").exists()
    assert json.loads((out / "07_recall.json").read_text())["caption"] is None


def test_save_figure_lays_out_then_notes_or_raises_what_remains(tmp_path, monkeypatch, fake_layout, capsys):
    run = nb.Run(prefix="07")
    fig = FakeFigure()
    monkeypatch.setenv("HUBNORM_FIGURE_CHECK", "note")
    run.save_figure(fig, "clean", data="real: a", bank="none")
    assert fake_layout.calls == [("tidy", fig), ("problems", fig)]
    assert capsys.readouterr().out == ""
    fake_layout.problems = [f"p{i}" for i in range(6)]
    run.save_figure(fig, "six", data="real: a", bank="none")
    assert capsys.readouterr().out == "NOTE: figure 07_six: 6 layout problem(s) remain: p0; p1; p2; p3; p4; ...\n"
    assert (_figures(tmp_path) / "07_six.png").exists()         # a note does not stop the saving
    fake_layout.problems = [f"p{i}" for i in range(5)]
    run.save_figure(fig, "five", data="real: a", bank="none")
    assert capsys.readouterr().out == "NOTE: figure 07_five: 5 layout problem(s) remain: p0; p1; p2; p3; p4\n"
    fake_layout.problems = ["text over text"]
    monkeypatch.setenv("HUBNORM_FIGURE_CHECK", "error")
    fig = FakeFigure()
    with pytest.raises(ValueError, match=r"^figure 07_bad: 1 layout problem\(s\) remain: text over text "
                                         r"\(HUBNORM_FIGURE_CHECK=error; fix the figure's code\)$"):
        run.save_figure(fig, "bad", data="real: a", bank="none")
    assert fig.saved == [] and not (_figures(tmp_path) / "07_bad.json").exists()


def test_save_figure_adds_the_marks_a_caption_lacks_outside_error_mode(tmp_path, monkeypatch, fake_layout, capsys):
    monkeypatch.setenv("HUBNORM_FIGURE_CHECK", "off")
    nb.Run(prefix="07").save_figure(FakeFigure(), "q", data="real: a", bank="QUERY-AWARE", caption="Cap.")
    caption = f"Cap. Bank marks: QUERY-AWARE {AWARE_NOTE}"
    assert (_figures(tmp_path) / "07_q.txt").read_text() == caption + "\n"
    assert json.loads((_figures(tmp_path) / "07_q.json").read_text())["caption"] == caption
    assert capsys.readouterr().out == ""


# ------------------------------------------------------------------------------------------- figure_provenance
def test_figure_provenance_reads_the_labels_and_what_the_reader_sees(fake_layout, capsys, monkeypatch):
    rec = nb.figure_provenance(FakeFigure(), "f", data="real: a", bank="none", caption="  A caption.  ", mode="error")
    assert rec == {"data": ["real: a"], "bank": ["none"], "caption": "A caption."}
    assert nb.figure_provenance(FakeFigure(), "f", data="real: a", bank="none", mode="error")["caption"] is None
    assert nb.figure_provenance(FakeFigure(), "f", data="real: a", bank="none", caption="", mode="note")[
        "caption"] is None
    # said on the figure (any case) or in the caption: nothing to add, in every mode
    for words, caption in (("IS (Query-Aware)\nsynthetic run", None), ("", "query-aware; SYNTHETIC analog.")):
        rec = nb.figure_provenance(FakeFigure(words), "f", data="Synthetic analog", bank="QUERY-AWARE",
                                   caption=caption, mode="error")
        assert rec["caption"] == caption
    assert capsys.readouterr().out == ""
    # the mode comes from the environment when not given
    monkeypatch.setenv("HUBNORM_FIGURE_CHECK", "error")
    with pytest.raises(ValueError, match="shows synthetic data but"):
        nb.figure_provenance(FakeFigure(), "f", data="synthetic analog", bank="none")
    monkeypatch.setenv("HUBNORM_FIGURE_CHECK", "note")
    assert nb.figure_provenance(FakeFigure(), "f", data="synthetic analog", bank="none")["caption"] == \
        "Data: synthetic analog."


def test_figure_provenance_checks_both_labels_under_the_figure_name(fake_layout):
    with pytest.raises(ValueError, match=r"^figure 'f': data= is required, .*Pass the data set label, e\.g\. "
                                         r"data=label$"):
        nb.figure_provenance(FakeFigure(), "f", data=None, bank="none", mode="off")
    with pytest.raises(ValueError, match=r"^figure 'f': every data label must be a non-empty string; got ''$"):
        nb.figure_provenance(FakeFigure(), "f", data=["real: a", ""], bank="none", mode="off")
    with pytest.raises(ValueError, match=r"^figure 'g': bank= is required, .*or bank='none' for a figure with no "
                                         r"normalized number$"):
        nb.figure_provenance(FakeFigure(), "g", data="real: a", bank=None, mode="off")
    with pytest.raises(ValueError, match=r"^figure 'g': every bank label must be a non-empty string; got ' '$"):
        nb.figure_provenance(FakeFigure(), "g", data="real: a", bank=["none", " "], mode="off")


def test_figure_provenance_names_what_is_unsaid_in_error_mode(fake_layout):
    with pytest.raises(ValueError, match=r"^figure 'f' shows query-aware results and synthetic data but says so "
                                         r"nowhere a reader sees \(HUBNORM_FIGURE_CHECK=error\): put 'query-aware' "
                                         r"\(the bank marks\) or the data label \(it says 'synthetic'\) in its title, "
                                         r"legend or caption$"):
        nb.figure_provenance(FakeFigure(), "f", data="synthetic analog", bank="test queries (query-aware)",
                             mode="error")
    with pytest.raises(ValueError, match=r"^figure 'g' shows query-aware results but"):
        nb.figure_provenance(FakeFigure("synthetic"), "g", data="synthetic analog", bank="QUERY-AWARE", mode="error")
    with pytest.raises(ValueError, match=r"^figure 'h' shows synthetic data but"):
        nb.figure_provenance(FakeFigure("query-aware"), "h", data="synthetic analog", bank="QUERY-AWARE",
                             mode="error")


def test_figure_provenance_completes_the_caption_and_notes_it(fake_layout, capsys):
    rec = nb.figure_provenance(FakeFigure(), "f", data=["real: a", "synthetic analog"], bank=["none", "QUERY-AWARE"],
                               caption="  Cap.  ", mode="note")
    added = f"Bank marks: none, QUERY-AWARE {AWARE_NOTE} Data: real: a; synthetic analog."
    assert rec["caption"] == "Cap. " + added
    assert capsys.readouterr().out == f"NOTE: figure f: {added}\n"
    rec = nb.figure_provenance(FakeFigure(), "f", data="synthetic analog", bank="none", mode="off")
    assert rec["caption"] == "Data: synthetic analog." and capsys.readouterr().out == ""


def test_figure_provenance_refuses_drawn_query_aware_numbers_unless_marked(fake_layout):
    _query_aware_only(25.0, 61.5, 70.25)
    pv.note_recalls([33.5])                                    # produced by a query-agnostic fit as well
    pv.note_result({"R@1": 33.5}, pv.QUERY_AWARE)
    pv.note_recalls([33.5])
    # whole numbers are never taken for an R@K; a value also produced elsewhere is not counted
    nb.figure_provenance(FakeFigure(values=[25.0, 33.5, 1.0]), "ok", data="real: a", bank="none", mode="error")
    with pytest.raises(ValueError, match=r"^figure 'f' draws R@K values only a query-aware fit of this run produced "
                                         r"\(61\.5, 70\.25\) but its bank=\['none'\] does not say query-aware: "
                                         r"pass the bank marks of what it draws$"):
        nb.figure_provenance(FakeFigure(values=[70.25, 25.0, 61.5, 33.5, 61.5]), "f", data="real: a", bank="none",
                             mode="note")
    # marked query-aware: drawn numbers are not read (and the mark is said on the figure)
    rec = nb.figure_provenance(FakeFigure("query-aware", values=[61.5]), "f", data="real: a", bank="QUERY-AWARE",
                               mode="error")
    assert rec["bank"] == ["QUERY-AWARE"]
    many = [10.5 + i for i in range(7)]
    _query_aware_only(*many)
    with pytest.raises(ValueError, match=r"\(10\.5, 11\.5, 12\.5, 13\.5, 14\.5\) but its") as err:
        nb.figure_provenance(FakeFigure(values=many), "f", data="real: a", bank="none", mode="off")
    assert "15.5" not in str(err.value)
    _query_aware_only(1.234567)
    with pytest.raises(ValueError, match=r"\(1\.235\) but"):
        nb.figure_provenance(FakeFigure(values=[1.234567]), "f", data="real: a", bank="none", mode="off")


# ------------------------------------------------------------------------------------------------------ _labels
def test_labels_are_distinct_stripped_and_checked():
    assert nb._labels("real: a", "data", "f") == ["real: a"]
    assert nb._labels([" b ", "a", "b", "a "], "bank", "f") == ["b", "a"]
    assert nb._labels(pd.Series(["x", "x"]), "bank", "f") == ["x"]
    assert nb._labels(("x", "y"), "bank", "f") == ["x", "y"]
    with pytest.raises(TypeError, match=r"^figure 'f': bank= must be a label or a sequence of labels \(one column, "
                                        r"e\.g\. table\['bank'\]\); got a dict$"):
        nb._labels({"bank": "none"}, "bank", "f")
    with pytest.raises(TypeError, match=r"^figure 'g': data= must be .*table\['data'\]\); got a DataFrame$"):
        nb._labels(pd.DataFrame({"data": ["x"]}), "data", "g")
    with pytest.raises(ValueError, match=r"^figure 'f': data= is required, a label or a sequence of labels \(e\.g\. "
                                         r"a table's 'data' column\); got None\. Pass the data set label, e\.g\. "
                                         r"data=label$"):
        nb._labels(None, "data", "f")
    with pytest.raises(ValueError, match=r"^figure 'f': bank= is required, .*got 3\. Pass the bank marks of what it "
                                         r"draws \(result\['bank'\] of hubnorm\.evaluate, a table's bank column\), or "
                                         r"bank='none' for a figure with no normalized number$"):
        nb._labels(3, "bank", "f")
    for bad in ("  ", 3, None):
        with pytest.raises(ValueError, match=rf"^figure 'f': every data label must be a non-empty string; got "
                                             rf"{repr(bad)}$"):
            nb._labels(["ok", bad], "data", "f")
    with pytest.raises(ValueError, match=r"^figure 'f': bank= has no label; pass at least one$"):
        nb._labels([], "bank", "f")


def test_marks_note_names_the_marks_only_when_one_says_query_aware():
    assert nb.marks_note(["none", "query-agnostic"]) == ""
    assert nb.marks_note("none") == ""
    assert nb.marks_note(["none", "test queries (query-aware)", "none"]) == \
        f"Bank marks: none, test queries (query-aware) {AWARE_NOTE}"
    with pytest.raises(ValueError, match=r"^figure 'marks_note': every bank label"):
        nb.marks_note(["QUERY-AWARE", ""])


# ------------------------------------------------------------------------------------------ tables and records
def test_with_provenance_adds_or_keeps_the_columns_and_checks_them():
    df = pd.DataFrame({"R@1": [60.5, 61.5]})
    out = nb.with_provenance(df, "t", data="real: a", bank="none")
    assert out.columns.tolist() == ["R@1", "data", "bank"]
    assert out["data"].tolist() == ["real: a"] * 2 and out["bank"].tolist() == ["none"] * 2
    assert df.columns.tolist() == ["R@1"]                              # the caller's table is not changed
    full = df.assign(data="d", bank="none")
    assert nb.with_provenance(full, "t") is full                       # nothing added: the same table
    run_table = df.assign(run="real: x")
    assert nb.with_provenance(run_table, "t", bank="none")["run"].tolist() == ["real: x"] * 2
    with pytest.raises(ValueError, match=r"^table 't' has no 'bank' column: every saved table says data and bank "
                                         r"\(hubnorm_companion\.notebook\.PROVENANCE_COLUMNS\); add the column or "
                                         r"pass the bank column hubnorm\.evaluate returns \(result\['bank'\]\), or "
                                         r"bank='none' for a table with no normalized number$"):
        nb.with_provenance(run_table, "t")                             # a run column stands for data only
    with pytest.raises(ValueError, match=r"^table 't' has no 'data' column: .*; add the column or pass the data set "
                                         r"label, e\.g\. data=label$"):
        nb.with_provenance(df, "t", bank="none")
    with pytest.raises(ValueError, match=r"^table 't' has a 'data' column and data='x' was also given: keep one$"):
        nb.with_provenance(run_table, "t", data="x", bank="none")
    with pytest.raises(ValueError, match=r"^table 't' has a 'bank' column and bank='none' was also given"):
        nb.with_provenance(full, "t", bank="none")
    for bad in (" ", "", 3):
        with pytest.raises(ValueError, match=rf"^bank= must be a non-empty label for every row of table 't'; got "
                                             rf"{repr(bad)}$"):
            nb.with_provenance(df, "t", data="x", bank=bad)
    with pytest.raises(TypeError, match=r"^table 't' must be a pandas DataFrame; got list$"):
        nb.with_provenance([1], "t", data="x", bank="none")


def test_with_provenance_refuses_unmarked_query_aware_numbers_listing_five():
    values = [61.5 + i for i in range(6)]
    _query_aware_only(*values)
    table = pd.DataFrame({"R@1": values, "bank": ["none"] * 6})
    with pytest.raises(ValueError) as err:
        nb.with_provenance(table, "t", data="d")
    msg = str(err.value)
    assert msg.startswith("table 't' shows numbers only a query-aware fit produced, in rows not marked "
                          "'QUERY-AWARE' in their bank column: row 0, column 'R@1': 61.5 (bank 'none'); row 1")
    assert "row 4, column 'R@1': 65.5 (bank 'none')" in msg and "row 5" not in msg
    assert msg.endswith("(bank 'none'). Carry the bank mark hubnorm.evaluate returns (result['bank']) into the row")
    marked = table.assign(bank="QUERY-AWARE")
    assert nb.with_provenance(marked, "t", data="d")["bank"].tolist() == ["QUERY-AWARE"] * 6


def test_save_table_writes_csv_and_rounded_markdown_with_its_caption(tmp_path):
    run = nb.Run(prefix="07")
    df = pd.DataFrame({"a": [1.23456]})
    assert run.save_table(df, "main", data="d", bank="none", digits=3, caption="  The caption.  ") is None
    out = tmp_path / "results" / "tables"
    assert (out / "07_main.csv").read_text() == "a,data,bank\n1.23456,d,none\n"
    assert (out / "07_main.md").read_text() == ("The caption.\n\n"
                                                "|     a | data   | bank   |\n"
                                                "|------:|:-------|:-------|\n"
                                                "| 1.235 | d      | none   |\n")
    run.save_table(df.assign(data="d", bank="none"), "plain")
    assert (out / "07_plain.md").read_text() == ("|    a | data   | bank   |\n"
                                                 "|-----:|:-------|:-------|\n"
                                                 "| 1.23 | d      | none   |\n")
    with pytest.raises(ValueError, match="has no 'bank' column"):
        run.save_table(df, "nothing", data="d")
    assert not (out / "07_nothing.csv").exists()


def test_save_gains_saves_under_a_gains_name_only(tmp_path):
    run = nb.Run(prefix="07")
    gains = pd.DataFrame({"gain": [1.5], "data": ["d"], "bank": ["none"]})
    run.save_gains(gains)
    run.save_gains(gains, "gains_i2t", caption="Gains.")
    out = tmp_path / "results" / "tables"
    assert (out / "07_gains.csv").read_text() == "gain,data,bank\n1.5,d,none\n"
    assert (out / "07_gains_i2t.md").read_text().startswith("Gains.\n\n|   gain |")
    with pytest.raises(ValueError, match=r"^name must start with 'gains' \(what run_all.sh's summary gathers\); got "
                                         r"'main_gains'$"):
        run.save_gains(gains, "main_gains")
    assert not (out / "07_main_gains.csv").exists()


def test_elapsed_counts_from_the_start(monkeypatch):
    monkeypatch.setattr(nb.time, "perf_counter", lambda: 50.0)
    assert nb.Run(prefix="07", started=12.5).elapsed() == 37.5


def test_write_json_is_indented_unicode_and_ends_with_a_newline(tmp_path):
    path = tmp_path / "r.json"
    nb._write_json(path, {"a": "é", "b": [1]})
    assert path.read_bytes().decode("utf-8") == '{\n "a": "é",\n "b": [\n  1\n ]\n}\n'


# ---------------------------------------------------------------------------------------------------------- setup
@pytest.fixture
def quiet_setup(monkeypatch):
    """setup's side effects on the process kept in: torch threads recorded (not set), rcParams, warnings and
    TOKENIZERS_PARALLELISM restored afterwards."""
    import matplotlib as mpl

    threads = []
    monkeypatch.setattr(nb.torch, "set_num_threads", threads.append)
    monkeypatch.delenv("HUBNORM_THREADS", raising=False)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "x")
    monkeypatch.delenv("TOKENIZERS_PARALLELISM")
    with mpl.rc_context(), warnings.catch_warnings():
        yield threads


def test_setup_seeds_records_and_clears_the_run(tmp_path, quiet_setup):
    results = tmp_path / "results"
    tables = results / "tables"
    tables.mkdir(parents=True)
    for stale in ("97_gains.csv", "97_gains_i2t.csv", "97_main.csv", "96_gains.csv", "97_gains.md"):
        (tables / stale).write_text("x\n")
    nb.check("an earlier line", True)
    nb.data_label("earlier data")
    _query_aware_only(61.5)
    run = nb.setup("97", seed=np.int64(5), threads=3, dtype="float32",
                   reproduces={"p": ("Table 1",)})
    assert run == nb.Run(prefix="97", seed=5, dtype="float32", started=run.started, reproduces={"p": ["Table 1"]})
    assert type(run.seed) is int
    assert sorted(p.name for p in tables.iterdir()) == ["96_gains.csv", "97_gains.md", "97_main.csv"]
    claims = results / "claims" / "97.csv"
    assert claims.read_text() == "notebook,claim,status,detail,data\n"
    assert nb._RECORD == {"file": claims, "prefix": "97", "data": None}
    assert nb.checks() == [] and not pv.only_query_aware(61.5)
    assert np.random.rand() == np.random.RandomState(5).rand()
    assert torch.equal(torch.rand(3), torch.rand(3, generator=torch.Generator().manual_seed(5)))
    assert quiet_setup == [3]
    assert nb.setup("97").seed == 0 and nb.setup("97").dtype == "float64"
    assert np.random.rand() == np.random.RandomState(0).rand()


def test_setup_threads_default_to_the_environment_and_zero_leaves_torch_alone(quiet_setup, monkeypatch):
    nb.setup("97")
    monkeypatch.setenv("HUBNORM_THREADS", "3")
    nb.setup("97")
    nb.setup("97", threads=0)
    assert quiet_setup == [2, 3]


def test_setup_quiets_library_warnings_and_sets_the_theme(quiet_setup, monkeypatch):
    import matplotlib as mpl

    warnings.simplefilter("always")
    mpl.rcParams.update({"axes.grid": True, "axes.labelsize": 7.0})   # seaborn keeps what it is not told to set
    nb.setup("97", style="ticks")
    assert mpl.rcParams["axes.grid"] is False and mpl.rcParams["axes.labelsize"] == 12
    assert (mpl.rcParams["figure.dpi"], mpl.rcParams["savefig.dpi"], mpl.rcParams["figure.autolayout"]) == \
        (90, 150, False)
    with warnings.catch_warnings(record=True) as seen:
        warnings.warn("old", FutureWarning)
        warnings.warn("older", DeprecationWarning)
        warnings.warn("IProgress not found. Please update jupyter", UserWarning)
        warnings.warn("kept", UserWarning)
        warnings.warn("kept too", RuntimeWarning)
    assert [str(w.message) for w in seen] == ["kept", "kept too"]

    assert os.environ["TOKENIZERS_PARALLELISM"] == "false"
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    nb.setup("97")
    assert os.environ["TOKENIZERS_PARALLELISM"] == "true"
    assert mpl.rcParams["axes.grid"] is True                     # the default style, whitegrid


def test_setup_refuses_bad_arguments_before_changing_anything(quiet_setup, tmp_path):
    for bad in ("", 1, None):
        with pytest.raises(ValueError, match=rf"^prefix must be the notebook's number as a string, e\.g\. '01'; got "
                                             rf"{repr(bad)}$"):
            nb.setup(bad)
    for bad in (True, 1.0, "1"):
        with pytest.raises(TypeError, match=rf"^seed must be an integer; got {repr(bad)}$"):
            nb.setup("97", seed=bad)
    with pytest.raises(ValueError, match=r"^dtype must be 'float32' or 'float64'; got 'float16'$"):
        nb.setup("97", dtype="float16")
    with pytest.raises(TypeError, match=r"reproduces must map a paper id to a non-empty list of its items, e\.g\. "
                                        r"\{'nnn-chowdhury2024': \['Table 1', 'Fig\. 2'\]\}; got \{'p': \[\]\}$"):
        nb.setup("97", reproduces={"p": []})
    assert quiet_setup == [] and not (tmp_path / "results" / "claims" / "97.csv").exists()


def test_setup_validates_the_parameters_first(quiet_setup, monkeypatch, tmp_path):
    seen = []

    def validate(prefix, cell, params):
        seen.append((prefix, cell, params))
        raise ValueError("parameter alpha is bad")

    monkeypatch.setattr(parameters_module, "validate", validate)
    nb.setup("97")
    assert seen == []
    params = {"alpha": 2, "In": ["", "alpha = 2  # > 0\n", "run = nb.setup('96', params=globals())"]}
    with pytest.raises(ValueError, match="parameter alpha is bad"):
        nb.setup("96", params=params)
    assert seen == [("96", "alpha = 2  # > 0\n", params)] and not (tmp_path / "results" / "claims" / "96.csv").exists()


def test_setup_says_how_to_call_it_without_a_parameters_cell(quiet_setup, tmp_path):
    with pytest.raises(ValueError, match=r"reads the notebook's parameters cell from IPython's In .* or from "
                                         r"__file__ \(python NN_name.py\); params has neither"):
        nb.setup("96", params={"alpha": 2})
    assert not (tmp_path / "results" / "claims" / "96.csv").exists()


PARAMS_CELL = "# the defaults\nalpha: float = 0.5  # > 0 -- NNN's alpha\nk = (\n  3)  # int at least 1\n"


def test_parameters_cell_is_the_latest_cell_run_that_declares_rules():
    edited = PARAMS_CELL.replace("> 0", "in (0, 1]")
    injected = "# Parameters\nalpha = 0.7\n"
    setup_cell = "import x  # the notebook's setup\nrun = nb.setup('07', params=globals())"
    ns = {"In": ["", PARAMS_CELL, injected, setup_cell]}
    assert nb.parameters_cell(ns) == PARAMS_CELL                    # papermill's injected cell has no rules
    assert nb.parameters_cell({"In": ["", PARAMS_CELL, "x = 1  # a later cell run first", edited, "y = 2",
                                      setup_cell]}) == edited       # the edited cell, run again
    assert nb.parameters_cell({"_ih": [PARAMS_CELL], "In": [edited]}) == PARAMS_CELL   # IPython's _ih first
    assert nb.parameters_cell({"In": [None, "alpha = (", PARAMS_CELL, "alpha = ("]}) == PARAMS_CELL


def test_parameters_cell_of_a_script_run_is_its_files_parameters_cell(tmp_path):
    py = tmp_path / "96_x.py"
    py.write_text('# %% [markdown]\n# alpha = 1  # > 0\n\n# %% tags=["parameters"]\n' + PARAMS_CELL +
                  "\n# %%\nrun = nb.setup('96', params=globals())\n")
    assert nb.parameters_cell({"__file__": str(py), "In": ["x = 1"]}) == PARAMS_CELL + "\n"
    py.write_text("alpha = 1  # > 0\n")
    with pytest.raises(ValueError, match="no `# %% tags=\\[\"parameters\"\\]` cell"):
        nb.parameters_cell({"__file__": str(py)})


# ------------------------------------------------------------------------------------- papermill's parameters
NAMESPACE = {"In": ["", None, "import x", "  # Parameters\nalpha = 0.5\nbeta, gamma = 1, 2\nseed: int = 3\nk = 2\n",
                    "# Parameters\nother = 1\n"],
             "alpha": 0.7, "beta": 1, "seed": 3}


def test_injected_parameters_reads_the_first_parameters_cell():
    assert nb.injected_parameters(NAMESPACE) == {"alpha": 0.7, "k": None}
    assert nb.injected_parameters({"In": ["# Parameters\nalpha = (\n"], "alpha": 1}) == {}
    assert nb.injected_parameters({"In": ["x = 1"], "x": 1}) == {}
    assert nb.injected_parameters({"In": None}) == {} and nb.injected_parameters({}) == {}


@pytest.fixture
def papermill_run(tmp_path, monkeypatch):
    """No $HUBNORM_RESULTS (a notebook run by papermill by hand); the project folder is tmp_path."""
    monkeypatch.delenv("HUBNORM_RESULTS")
    monkeypatch.setattr(reporting, "project_root", lambda start=None: tmp_path)
    return tmp_path / "results" / "params-alpha-0.7_k-null"


def test_a_direct_papermill_run_writes_into_a_folder_of_its_parameters(papermill_run, capsys):

    nb._direct_run_results("07", NAMESPACE)
    assert os.environ["HUBNORM_RESULTS"] == str(papermill_run)
    manifest = json.loads((papermill_run / "MANIFEST.json").read_text())
    assert {k: manifest[k] for k in ("notebook", "parameters", "changed", "command")} == {
        "notebook": "07", "parameters": {"alpha": 0.7, "k": None}, "changed": {"alpha": 0.7, "k": None},
        "command": "papermill"}
    assert capsys.readouterr().out == (f"Parameters alpha=0.7, k=None: this run's figures and tables go to "
                                       f"{papermill_run}\n")


def test_a_run_with_its_results_folder_or_without_parameters_stays_put(papermill_run, monkeypatch, tmp_path, capsys):

    nb._direct_run_results("07", {"In": ["x = 1"]})
    assert "HUBNORM_RESULTS" not in os.environ and not (tmp_path / "results").exists()
    monkeypatch.setenv("HUBNORM_RESULTS", str(tmp_path / "given"))
    nb._direct_run_results("07", NAMESPACE)
    assert os.environ["HUBNORM_RESULTS"] == str(tmp_path / "given") and not papermill_run.exists()
    assert capsys.readouterr().out == ""


def test_setup_sends_a_direct_papermill_run_to_its_own_folder(papermill_run, quiet_setup, monkeypatch):
    monkeypatch.setattr(parameters_module, "validate", lambda prefix, cell, params: None)
    nb.setup("07", params={**NAMESPACE, "In": ["alpha = 0.5  # > 0\n", *NAMESPACE["In"]]})
    assert (papermill_run / "MANIFEST.json").is_file() and (papermill_run / "claims" / "07.csv").is_file()


def test_env_threads_is_an_integer_up_to_four_per_cpu(monkeypatch):
    monkeypatch.setattr(nb.os, "cpu_count", lambda: 2)
    monkeypatch.delenv("HUBNORM_THREADS", raising=False)
    assert nb.env_threads() == 2 and nb.env_threads(5) == 5
    for good, want in ((" 8 ", 8), ("1", 1)):
        monkeypatch.setenv("HUBNORM_THREADS", good)
        assert nb.env_threads() == want
    for bad in ("9", "0", "1.5", "-1"):
        monkeypatch.setenv("HUBNORM_THREADS", bad)
        with pytest.raises(ValueError, match=rf"^HUBNORM_THREADS must be an integer from 1 to 8 \(4 x the 2 CPUs of "
                                             rf"this machine\); got '{bad}': unset it or set e\.g\. "
                                             rf"HUBNORM_THREADS=2$"):
            nb.env_threads()
    monkeypatch.setattr(nb.os, "cpu_count", lambda: None)
    monkeypatch.setenv("HUBNORM_THREADS", "4")
    assert nb.env_threads() == 4
    monkeypatch.setenv("HUBNORM_THREADS", "5")
    with pytest.raises(ValueError, match=r"from 1 to 4 \(4 x the None CPUs"):
        nb.env_threads()


# --------------------------------------------------------------------------------------------------- displays
class FakeShell:
    def __init__(self, kernel):
        self.kernel, self.magics = kernel, []

    def run_line_magic(self, *args):
        self.magics.append(args)


def test_inline_figures_only_inside_a_kernel(monkeypatch):
    import IPython

    for kernel, want in ((object(), [("matplotlib", "inline")]), (None, [])):
        shell = FakeShell(kernel)
        monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
        assert nb._inline_figures() is None and shell.magics == want
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    assert nb._inline_figures() is None
    monkeypatch.setitem(sys.modules, "IPython", None)
    assert nb._inline_figures() is None


def test_setup_shows_figures_inline_in_a_kernel(monkeypatch, quiet_setup):
    import IPython

    shell = FakeShell(object())
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    nb.setup("97")
    assert shell.magics == [("matplotlib", "inline")]


TABLE = pd.DataFrame({"m": ["a", "b"], "R@1": [1.23456, np.nan], "n": [3, 4]})


def test_a_table_renders_rounded_html_and_text():
    html = nb._Table(TABLE, 3, "Cap <x> & y")._repr_html_()
    assert html.startswith('<p><em>Cap &lt;x&gt; &amp; y</em></p><table class="dataframe dataframe">\n')
    assert "<td>1.235</td>" in html and "<td>-</td>" in html and "<td>3</td>" in html
    assert "<th>0</th>" not in html and "<th></th>" not in html            # no index
    assert nb._Table(TABLE, 2, None)._repr_html_().startswith('<table class="dataframe dataframe">')
    assert nb._Table(TABLE, 2, "")._repr_html_().startswith("<table")
    assert repr(nb._Table(TABLE, 2, "Cap")) == "Cap\nm  R@1  n\na 1.23  3\nb    -  4"
    assert repr(nb._Table(TABLE, 1, None)) == "m  R@1  n\na  1.2  3\nb    -  4"


def test_show_displays_a_table_of_the_chosen_columns(monkeypatch, capsys):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    assert nb.show(TABLE, ["R@1", "m"], digits=3, caption="Cap") is None
    (table,) = shown
    assert table.df.columns.tolist() == ["R@1", "m"] and table.digits == 3 and table.caption == "Cap"
    nb.show(TABLE)
    assert shown[1].df is TABLE and shown[1].digits == 2 and shown[1].caption is None
    monkeypatch.setitem(sys.modules, "IPython.display", None)           # plain Python: printed
    assert nb.show(TABLE, ("m",), caption="Cap") is None
    assert capsys.readouterr().out == "Cap\nm\na\nb\n"
    nb.show(TABLE)
    assert capsys.readouterr().out == "m  R@1  n\na 1.23  3\nb    -  4\n"


def test_key_numbers_prints_the_chosen_columns_rounded(capsys):
    assert nb.key_numbers(TABLE) is None
    assert capsys.readouterr().out == "m  R@1  n\na 1.23  3\nb    -  4\n"
    nb.key_numbers(TABLE, ["R@1"], digits=3)
    assert capsys.readouterr().out == "  R@1\n1.235\n    -\n"


def test_readable_rounds_every_float_to_significant_digits():
    assert nb.readable(77.60000000000001) == 77.6
    assert nb.readable(1.3877787807814457e-16) == 1.388e-16
    assert nb.readable(np.float32(0.1)) == 0.1 and type(nb.readable(np.float32(0.1))) is float
    assert nb.readable(123456.0, 2) == 120000.0
    value = {0.30000000000000004: [1.23456, (2.0000001, "x")], "k": 7, "b": True, "n": None}
    assert nb.readable(value) == {0.3: [1.235, (2.0, "x")], "k": 7, "b": True, "n": None}
    assert type(nb.readable((1.0,))) is tuple and type(nb.readable([1.0])) is list
    assert nb.readable(7) == 7 and nb.readable("0.123456") == "0.123456"
    for bad in (0, True, 1.5, "4"):
        with pytest.raises(ValueError, match=rf"^digits must be a positive integer; got {repr(bad)}$"):
            nb.readable(1.0, bad)
    assert nb.readable(1.23456, 1) == 1.0


# ----------------------------------------------------------------------------------------- the PASS/DIFFERS record
def test_check_prints_and_records_each_line(tmp_path, capsys):
    nb.check("holds", 1, "1 -> 2")
    nb.check("differs", np.bool_(False), data="real: Y")
    nb.check(3, [], "")
    assert capsys.readouterr().out == "PASS: holds [1 -> 2]\nDIFFERS (real: Y): differs\nDIFFERS: 3\n"
    assert nb.checks() == [("holds", True), ("differs (real: Y)", False), ("3", False)]
    assert all(type(ok) is bool for _, ok in nb.checks())
    assert not (tmp_path / "results" / "claims").exists()               # no setup: nothing written
    got = nb.checks()
    got.clear()
    assert len(nb.checks()) == 3                                         # a copy


def test_check_appends_rows_to_the_claims_file(tmp_path):
    claims = tmp_path / "c.csv"
    claims.write_text("notebook,claim,status,detail,data\n")
    nb._RECORD.update(file=claims, prefix="07", data=None)
    nb.check("a", True)
    nb.data_label("real: X")
    nb.check(5, False, 2.5)
    nb.check("c", True, "d", data="real: Y")
    assert claims.read_text() == ("notebook,claim,status,detail,data\n07,a,PASS,,unnamed data\n"
                                  "07,5,DIFFERS,2.5,real: X\n07,c,PASS,d,real: Y\n")


def test_data_label_is_a_non_empty_string():
    assert nb.data_label("real: X") == "real: X" and nb._RECORD["data"] == "real: X"
    for bad in ("", " ", None, 3):
        with pytest.raises(ValueError, match=rf"^label must be a non-empty string naming the data; got {repr(bad)}$"):
            nb.data_label(bad)
    assert nb._RECORD["data"] == "real: X"


def test_check_summary_counts_and_names_the_differing_lines(capsys):
    nb.check_summary()
    assert capsys.readouterr().out == ("0 of 0 PASS/DIFFERS lines of this run say PASS.\n"
                                       "No line says DIFFERS in this run.\n")
    nb.check("a", True)
    nb.check("b", False)
    nb.check("c", False, data="real: Y")
    capsys.readouterr()
    nb.check_summary()
    assert capsys.readouterr().out == ("1 of 3 PASS/DIFFERS lines of this run say PASS.\nThey say DIFFERS:\n  - b\n"
                                       "  - c (real: Y)\n")


# --------------------------------------------------------------------------------------------- generated text
def test_order_and_change_compare_as_printed_and_within_tol():
    assert nb.order_word(1.004, 1.0) == "equal to" and nb.order_word(1.006, 1.0) == "higher than"
    assert nb.order_word(1.004, 1.0, digits=None) == "higher than"
    assert nb.order_word(1.0, 1.004, digits=3) == "lower than"
    assert nb.order_word(1.0, 1.5, digits=None, tol=0.5) == "equal to"
    assert nb.order_word(1.0, 1.5, digits=None, tol=0.49) == "lower than"
    assert nb.order_word(2.0, 1.5, ("a", "b", "c"), tol=0.5) == "c"
    with pytest.raises(ValueError, match=r"^words must be three words \(a > b, a < b, a == b\); got \('a', 'b'\)$"):
        nb.order_word(1, 2, ("a", "b"))
    with pytest.raises(ValueError, match=r"^words must be three words"):
        nb.order_word(1, 2, ("a", "b", "c", "d"))
    for a, b in ((math.inf, 1.0), (1.0, -math.inf), (1.0, math.nan)):
        with pytest.raises(ValueError, match=rf"^cannot order non-finite values {re.escape(repr(a))} and "
                                             rf"{re.escape(repr(b))}$"):
            nb.order_word(a, b)


def test_change_words_the_move_with_units_and_digits():
    assert nb.change(1, 2) == "raises from 1.00 to 2.00"
    assert nb.change(2, 1, "x", unit="%", digits=1) == "lowers x from 2.0% to 1.0%"
    assert nb.change(1, 2.5, "x", digits=None) == "raises x from 1 to 2.5"
    assert nb.change(3, 3, digits=None, unit=" s") == "leaves at 3 s"
    assert nb.change(60.0, 60.4, "R@1", tol=0.5) == "leaves R@1 about unchanged (60.00 to 60.40)"
    assert nb.change(60.0, 59.6, "R@1", tol=0.5, same="keeps") == "keeps R@1 about unchanged (60.00 to 59.60)"
    assert nb.change(60.0, 60.001, "R@1", same="keeps") == "keeps R@1 at 60.00"


def test_changes_and_trends_group_the_pairs_by_direction():
    pairs = {"A": (1.0, 2.0), "B": (2.0, 1.0), "C": (1.0, 1.0), "D": (1.0, 1.001), "E": (5.0, 4.0)}
    assert nb.changes(pairs, "R@1") == ("A (1.00 to 2.00) raises R@1; B (2.00 to 1.00) and E (5.00 to 4.00) lower "
                                        "it; C (1.00 to 1.00) and D (1.00 to 1.00) leave it unchanged")
    assert nb.changes({"C": (1.0, 1.0)}, "x", same=("keeps", "keep"), unit="%", digits=0) == \
        "C (1% to 1%) keeps x unchanged"
    assert nb.changes({"A": (1.0, 1.2), "B": (1.0, 1.3)}, "x", up=("grows", "grow"), tol=0.25, digits=None) == \
        "B (1 to 1.3) grows x; A (1 to 1.2) leaves it unchanged"
    assert nb.changes({"A": (2.0, 1.0)}, "x", down=("drops", "drop")) == "A (2.00 to 1.00) drops x"
    assert nb.changes({}, "x") == ""
    assert nb.trends(pairs, "the skew") == ("the skew rises for A (1.00 to 2.00); falls for B (2.00 to 1.00) and E "
                                            "(5.00 to 4.00); stays for C (1.00 to 1.00) and D (1.00 to 1.00)")
    assert nb.trends({"A": (1.0, 1.2), "B": (1.0, 1.3)}, "s", up="climbs", same="holds", tol=0.25, digits=None,
                     unit="%") == "s climbs for B (1% to 1.3%); holds for A (1% to 1.2%)"
    assert nb.trends({"A": (2.0, 1.0)}, "s", down="sinks", digits=1) == "s sinks for A (2.0 to 1.0)"


def test_names_and_ranking_read_as_text():
    assert nb.names([]) == "none" and nb.names(["a"]) == "a" and nb.names([1, 2]) == "1 and 2"
    assert nb.names(("a", "b", "c", "d")) == "a, b, c and d"
    assert nb.ranking({}) == "none"
    assert nb.ranking({"A": 1.0}) == "A (1.00)"
    assert nb.ranking({"B": 1.0, "A": 1.5}) == "A (1.50) > B (1.00)"
    assert nb.ranking({"A": 1.001, "B": 3.0, "C": 1.0}) == "B (3.00) > A (1.00) = C (1.00)"
    assert nb.ranking({"A": 1.001, "B": 3.0, "C": 1.0}, digits=None, unit="%") == "B (3%) > A (1.001%) > C (1%)"
    assert nb.ranking({"A": 9, "B": 10}, digits=0) == "B (10) > A (9)"


def test_tally_counts_losses_wins_and_ties_in_words():
    """No loss reads "none of the N", never "0 of N ... (by -0.00 points at most)" (notebook 09's real sets)."""
    ties_and_wins = [2.8, 0.0, 0.0, 0.4, 0.0, 0.0]
    assert nb.tally(ties_and_wins, against=" to the labelled one") == \
        "loses to the labelled one in none of the 6 comparisons, wins in 2 and ties in 4"
    assert nb.tally(pd.Series([-0.4, 0.0, 1.0])) == \
        "loses in 1 of 3 comparisons (by 0.40 points), wins in 1 and ties in 1"
    assert nb.tally([-0.4, -1.2, -0.05], noun="sets", digits=1, unit="pp") == \
        "loses in 3 of 3 sets (by 1.2 pp at most), wins in none and ties in none"
    assert nb.tally([]) == "loses in none of the 0 comparisons, wins in none and ties in none"
    # compared as printed: -0.001 at 2 digits is a tie, not "a loss by 0.00 points"; a NaN is refused
    assert nb.tally([-0.001, 0.3]) == "loses in none of the 2 comparisons, wins in 1 and ties in 1"
    with pytest.raises(ValueError, match="non-finite"):
        nb.tally([float("nan")])


def test_recall_noise_is_the_binomial_half_width():
    assert nb.recall_noise(400, 50.0) == ("one point is 4 of 400 queries, and a 95% interval at 50.00% is about "
                                          "±4.90 points")
    half = 100 * 1.96 * math.sqrt(0.6 * 0.4 / 5000)                      # 1.358
    assert nb.recall_noise("5000", 60) == ("one point is 50 of 5000 queries, and a 95% interval at 60.00% is about "
                                           f"±{half:.2f} points")
    assert nb.recall_noise(250, 150.0).endswith("2.5 of 250 queries, and a 95% interval at 100.00% is about ±0.00 "
                                                "points")
    assert nb.recall_noise(1, -5.0).endswith("at 0.00% is about ±0.00 points")
    assert nb.recall_noise(1, 10.0).endswith(f"±{100 * 1.96 * math.sqrt(0.09):.2f} points")
    for bad in (0, -3):
        with pytest.raises(ValueError, match=rf"^n_queries must be a positive integer; got {bad}$"):
            nb.recall_noise(bad, 50.0)


def test_notice_joins_the_sentences_under_its_title(monkeypatch, capsys):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    assert nb.notice(" NNN raises R@1. ", "", None, "  ", "DN **lowers** it.", title="Here") is None
    (md,) = shown
    assert md._repr_markdown_() == "**Here:** NNN raises R@1. DN **lowers** it."
    assert repr(md) == "Here: NNN raises R@1. DN lowers it."
    nb.notice("x.")
    assert shown[1].text == "**In this run:** x."
    assert nb.notice("", " ") is None and nb.notice() is None and len(shown) == 2
    monkeypatch.setitem(sys.modules, "IPython.display", None)
    nb.notice("A.", "B.")
    assert capsys.readouterr().out == "In this run: A. B.\n"


def test_parameters_cell_under_nbval_is_the_tagged_cell_of_the_notebook_in_the_working_folder(tmp_path, monkeypatch):
    """nbval runs cells without history (no In), in the notebook's folder: the cell tagged "parameters" of the one
    <prefix>_*.ipynb there; a later assignment cell with a comment that is no rule is never taken for it."""
    import json

    monkeypatch.chdir(tmp_path)
    cell = {"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": PARAMS_CELL.splitlines(True)}
    (tmp_path / "96_x.ipynb").write_text(json.dumps({"cells": [{"cell_type": "markdown", "metadata": {},
                                                                "source": ["alpha = 1  # > 0"]}, cell]}))
    assert nb.parameters_cell({}, "96") == PARAMS_CELL
    assert nb.parameters_cell({"In": ["", PARAMS_CELL, "x = 1  # a later cell run first"]}) == PARAMS_CELL
    for ns, prefix in (({}, None), ({}, "95")):
        with pytest.raises(ValueError, match=r"In \(a notebook run in Jupyter or papermill\), the one "
                                             rf"{prefix or 'NN'}_\*\.ipynb in the working folder \(nbval\)"):
            nb.parameters_cell(ns, prefix)
    (tmp_path / "96_y.ipynb").write_text(json.dumps({"cells": [cell]}))   # two candidates: none is guessed
    with pytest.raises(ValueError, match="params has neither: pass the notebook's own globals\\(\\), after running "
                                         "its parameters cell$"):
        nb.parameters_cell({}, "96")
    (tmp_path / "96_y.ipynb").unlink()
    (tmp_path / "96_x.ipynb").write_text(json.dumps({"cells": [dict(cell, source=PARAMS_CELL)]}))   # source as text
    assert nb.parameters_cell({}, "96") == PARAMS_CELL
    for doc in ({}, {"cells": [{"cell_type": "code", "metadata": {}, "source": "x = 1"}]}):   # no cells, untagged
        (tmp_path / "96_x.ipynb").write_text(json.dumps(doc))
        with pytest.raises(ValueError, match="params has neither"):
            nb.parameters_cell({}, "96")
