"""hubnorm.experiments.score_studies, unit by unit: parameter look-up and defaults, the clamp NOTE, bank labels, the
hubness / k-curve / bank-size / tau / recall / hub tables against hand counts from the score matrices (float64
numpy, not the library's helpers), the cell skipper with a fake IPython shell, and every notebook's sims branch with
a recording run object (its tables equal the study functions called directly; its figures' plotted data, sizes,
fonts, legends and reference lines recorded through a fake seaborn).

seaborn is replaced by a recorder (:class:`_Seaborn`) and ``Figure.tight_layout`` by a no-op in every test: they were
most of the time of a notebook branch, which mutation testing reruns for every mutant of :func:`run_notebook`.

Mutants left alive on purpose (mutation run ``--sample 2``; no behaviour can change):

- ``_clamped(..., sub, False, notes)`` -> ``None`` (bank_size_table): ``_clamped`` reads ``query_aware`` only as a
  truth value (:func:`_bank_size`).
- ``np.asarray(rows, dtype=np.int64)`` -> ``np.asarray(rows)`` (bank_subset): integer rows are int64 already, and
  ``ScoreMatrix.take`` cuts float row numbers the same way (checked by hand).
- ``score_methods(params, by_dir[d], names=SHOWN)`` -> without ``names`` (run_notebook): score_methods' own order
  is SHOWN.
- ``("hubness", "histograms")`` -> ``("hubness", "HISTOGRAMS")`` (run_notebook): notebook 02's hubness section always
  runs before its histograms, so the hubness table exists when the histograms are drawn.
- ``df.groupby("direction", sort=False)`` -> ``sort=None`` (run_notebook, the k curve's raw lines): pandas treats
  None as False (checked with the directions in reverse order).
- the NNN ``bank_size_table`` call of notebook 04 without ``skipped=skipped`` (run_notebook): NNN needs only the
  bank x gallery matrix, whose presence this branch has just checked (``has_bank``), so its fit is never skipped.
"""

from __future__ import annotations

import re

import matplotlib
import numpy as np
import pandas as pd
import pytest
import torch

import hubnorm as hn
from hubnorm import provenance as pv
from hubnorm.data.sims import write_sims
from hubnorm.experiments import score_studies as ss

from test_sims import write_example

matplotlib.use("Agg")
torch.set_num_threads(1)   # before any torch op: a forked test process (mutmut) can hang in OpenMP
LABEL = "synthetic analog (sims folder example)"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("sims") / "full"
    data = write_example(path)
    return path, data


def _run(folder, directions=("t2i", "i2t")):
    return ss.load_sims_run(f"sims:{folder[0]}", directions)


def _n_k(scores, k):
    """k-occurrence from a score matrix (queries x targets), float64, by a full argsort."""
    top = np.argsort(-np.asarray(scores, dtype=np.float64), axis=1, kind="stable")[:, :k]
    return np.bincount(top.ravel(), minlength=scores.shape[1])


def _skew(x):
    x = np.asarray(x, dtype=np.float64)
    d = x - x.mean()
    return float(np.mean(d ** 3) / np.mean(d ** 2) ** 1.5)


# ---------------------------------------------------------------------------------------------- parameters
def test_param_reads_the_first_given_name_dotted_names_and_per_direction_values():
    p = {"a": None, "b": 3, "n": {"k": 7}, "t": {"t2i": 0.1, "i2t": 0.2}, "z": 0}
    assert ss._param(p, ("a", "b"), 9) == 3                 # None counts as not given
    assert ss._param(p, ("n.k",), 9) == 7
    assert ss._param(p, ("n.x", "b"), 9) == 3
    assert ss._param({"n": 5}, ("n.k", ), 9) == 9          # the outer value is not a mapping
    assert ss._param(p, ("t",), 9, "i2t") == 0.2
    assert ss._param(p, ("t",), 9) == 0.1                   # no direction: t2i
    assert ss._param({"t": {"i2t": 1}}, ("t",), 9, "t2i") == 9
    assert ss._param({}, ("q", "n.k"), 9) == 9
    assert ss._param(p, ("z", "b"), 9) == 0                 # 0 is a value
    assert ss._param(p, ("b", "n.k"), 9) == 3               # the first name wins


def _attrs(norm):
    return None if norm is None else {k: getattr(norm, k) for k in type(norm).parameters
                                      if k in ("alpha", "k", "tau", "n_iter", "beta_query", "beta_target")}


def test_score_methods_defaults_are_the_papers_fixed_parameters():
    got = ss.score_methods()
    assert list(got) == list(ss.SHOWN)
    assert {n: (None if m is None else type(m).name) for n, m in got.items()} == {n: None if n == "raw" else n
                                                                                   for n in ss.SHOWN}
    assert {n: _attrs(m) for n, m in got.items()} == {
        "raw": None, "nnn": {"alpha": 0.75, "k": 16}, "is": {"tau": 0.02}, "dis": {"tau": 0.02, "k": 1},
        "csls": {"k": 10}, "sn": {"tau": 0.01, "n_iter": 10}, "dbsn": {"tau": 0.01, "n_iter": 10},
        "dualis": {"beta_query": 50.0, "beta_target": 50.0},
        "dualdis": {"beta_query": 50.0, "beta_target": 50.0, "k": 1}}
    assert list(ss.score_methods(None, extra=False)) == ["raw", "nnn", "is", "dis", "csls", "sn"]
    assert list(ss.score_methods({}, names=("sn", "raw", "dbsn", "nope"))) == ["sn", "raw", "dbsn"]
    assert list(ss.score_methods({}, extra=False, names=("dbsn", "is"))) == ["is"]


def test_score_methods_read_a_notebooks_globals_by_direction():
    params = {"nnn_params": {"alpha": 0.5, "k": 3}, "is_tau": {"t2i": 0.03, "i2t": 0.04}, "sn_tau": {"i2t": 0.07},
              "sn_iter": 5, "dual_betas": {"beta_query": 7.0, "beta_target": 8.0}}
    got = {n: _attrs(m) for n, m in ss.score_methods(params, "i2t").items()}
    assert got["nnn"] == {"alpha": 0.5, "k": 3} and got["is"] == {"tau": 0.04} and got["dis"] == {"tau": 0.04, "k": 1}
    assert got["sn"] == {"tau": 0.07, "n_iter": 5} and got["dbsn"] == {"tau": 0.07, "n_iter": 5}
    assert got["dualis"] == {"beta_query": 7.0, "beta_target": 8.0}
    t2i = {n: _attrs(m) for n, m in ss.score_methods(params).items()}
    assert t2i["is"] == {"tau": 0.03} and t2i["sn"]["tau"] == 0.01       # t2i missing from sn_tau: the default
    both = {"alpha": 0.6, "nnn_k": 5, "dualis_params": {"beta_query": 1.0, "beta_target": 2.0},
            "dual_betas": {"beta_query": 7.0, "beta_target": 8.0}}
    got = {n: _attrs(m) for n, m in ss.score_methods(both).items()}
    assert got["nnn"] == {"alpha": 0.6, "k": 5} and got["dualdis"] == {"beta_query": 1.0, "beta_target": 2.0, "k": 1}
    assert ss._param({"nnn_alpha": 0.1, "nnn_params": {"alpha": 0.2}, "alpha": 0.3},
                     ("nnn_alpha", "nnn_params.alpha", "alpha"), 0) == 0.1
    assert _attrs(ss.score_methods({"nnn_params": {"alpha": 0.2}, "alpha": 0.3})["nnn"])["alpha"] == 0.2


# ---------------------------------------------------------------------------------------------- clamp and labels
def test_clamped_cuts_k_to_the_bank_and_says_so(folder):
    task = _run(folder).tasks["t2v"]
    assert task.size("query_bank") == 60 and task.n_queries == 48
    notes = []
    assert ss._clamped(None, task, False, notes) is None and notes == []
    nnn = ss._clamped(hn.make_normalizer("nnn", k=100), task, False, notes)
    assert nnn.k == 60
    assert notes == ["nnn k=100 is larger than its limit here (60: query_bank): k=60 is used"]
    notes.clear()
    csls = ss._clamped(hn.make_normalizer("csls", k=50), task, True, notes)   # the test queries: 48; targets: 24
    assert csls.k == 24 and notes == ["csls k=50 is larger than its limit here (24: query_bank, targets): k=24 is used"]
    notes.clear()
    same = ss._clamped(hn.make_normalizer("nnn", k=48), task, True, notes)
    assert same.k == 48 and notes == []                                      # at the limit: kept
    assert ss._clamped(hn.make_normalizer("nnn", k=49), task, True, notes).k == 48


def test_bank_labels(folder):
    task = _run(folder).tasks["t2v"]
    assert ss._bank_size(task, True) == 48 and ss._bank_size(task, False) == 60
    assert ss._setting(task, True) == "test queries (query-aware)"
    assert ss._setting(task, False) == "bank (60 queries)"
    assert ss._bank_label(task, False, pv.NO_BANK) == "-" and ss._bank_label(task, True, pv.NO_BANK) == "-"
    assert ss._bank_label(task, False, pv.QUERY_AWARE) == "bank (60 queries): QUERY-AWARE (it holds test queries)"
    assert ss._bank_label(task, True, pv.QUERY_AWARE) == "test queries (query-aware)"
    assert ss._bank_label(task, False, "query-agnostic") == "bank (60 queries)"
    assert ss._without_mark({"bank": 1, "R@1": 2.0}) == {"R@1": 2.0}


# ---------------------------------------------------------------------------------------------- tables
def _raw(data, direction):
    caps, items, c2i, _, _ = data
    if direction == "t2v":
        return caps @ items.T, c2i[:, None] == np.arange(len(items))[None, :]
    return items @ caps.T, np.arange(len(items))[:, None] == c2i[None, :]


def _r_at(scores, pos, k):
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return 100 * float(np.mean(np.take_along_axis(pos, order, axis=1).any(axis=1)))


def test_hubness_table_raw_rows_equal_hand_counts(folder):
    run = _run(folder)
    table = ss.hubness_table(run, lambda d: {"raw": None, "nnn": hn.make_normalizer("nnn", k=4)}, k=5)
    assert list(table.columns) == ["run", "direction", "method", "bank", "skew N_5", "max N_5", "anti-hubs %",
                                   "hubs %", "R@1"]
    assert list(table["method"]) == ["raw", "nnn", "raw", "nnn"] and set(table["run"]) == {LABEL}
    assert list(table["bank"]) == ["-", "bank (60 queries)", "-", "bank (40 queries)"]
    for row in table[table["method"] == "raw"].to_dict("records"):
        scores, pos = _raw(folder[1], row["direction"])
        n_k = _n_k(scores, 5)
        assert row["max N_5"] == n_k.max() and row["skew N_5"] == pytest.approx(_skew(n_k), abs=1e-12)
        assert row["anti-hubs %"] == pytest.approx(100 * np.mean(n_k == 0), abs=1e-12)
        assert row["hubs %"] == pytest.approx(100 * np.mean(n_k >= 2 * 5 * scores.shape[0] / scores.shape[1]),
                                              abs=1e-12)
        assert row["R@1"] == pytest.approx(_r_at(scores, pos, 1), abs=1e-12)
    assert (table["hubs %"] > 0).any() and (table["anti-hubs %"] > 0).any()


def test_methods_table_query_aware_choice_and_hub_k(folder):
    run = _run(folder)
    notes, skipped = [], {}
    qa = ss.methods_table(run, lambda d: {"raw": None, "is": hn.make_normalizer("is", tau=0.05),
                                          "nnn": hn.make_normalizer("nnn", k=100)},
                          hub_k=3, query_aware=True, notes=notes, skipped=skipped)
    assert list(qa["bank"]) == ["-", "test queries (query-aware)", "test queries (query-aware)"] * 2
    assert notes == ["nnn k=100 is larger than its limit here (48: query_bank): k=48 is used",
                     "nnn k=100 is larger than its limit here (24: query_bank): k=24 is used"] and skipped == {}
    for row in qa[qa["method"] == "raw"].to_dict("records"):
        scores, pos = _raw(folder[1], row["direction"])
        assert row["skew N_3"] == pytest.approx(_skew(_n_k(scores, 3)), abs=1e-12)
        assert row["R@5"] == pytest.approx(_r_at(scores, pos, 5), abs=1e-12)
    bank = ss.methods_table(run, lambda d: {"is": hn.make_normalizer("is", tau=0.05)})
    assert list(bank["bank"]) == ["bank (60 queries)", "bank (40 queries)"] and "skew N_10" in bank
    forced = ss.methods_table(run, lambda d: {"is": hn.make_normalizer("is", tau=0.05)}, query_aware=False)
    assert list(forced["bank"]) == list(bank["bank"])
    want = [hn.evaluate(t.fit(hn.make_normalizer("is", tau=0.05), query_aware=True), t)["R@1"]
            for t in run.tasks.values()]
    assert list(qa[qa["method"] == "is"]["R@1"]) == pytest.approx(want, abs=1e-12)


def test_bank_subset_cuts_the_bank_rows_only(folder):
    task = _run(folder).tasks["t2v"]
    sub = ss.bank_subset(task, [5, 2, 9])
    assert sub.size("query_bank") == 3 and sub.n_queries == task.n_queries and sub.direction == "t2v"
    for key, m in task.engine.matrices.items():
        if "query_bank" not in key:
            assert sub.engine.matrices[key] is m                       # the other matrices are not copied
    assert {k for k in sub.engine.matrices} == {k if k[1] != "query_bank" else k[::-1] for k in task.engine.matrices}


def test_bank_size_table_rounds_fractions_and_uses_one_seed_for_the_whole_bank(folder):
    task = _run(folder).tasks["t2v"]
    notes = []
    table = ss.bank_size_table(task, [("is", {"tau": 0.05}), ("nnn", {"k": 16})], [1.0, 0.125, 0.001], seeds=[5, 6],
                               notes=notes)
    got = list(zip(table["fraction"], table["bank queries"], table["seed"], table["method"]))
    assert got == [(1.0, 60, 5, "is"), (1.0, 60, 5, "nnn"), (0.125, 8, 5, "is"), (0.125, 8, 5, "nnn"),
                   (0.125, 8, 6, "is"), (0.125, 8, 6, "nnn"), (0.001, 1, 5, "is"), (0.001, 1, 5, "nnn"),
                   (0.001, 1, 6, "is"), (0.001, 1, 6, "nnn")]
    assert list(table.columns) == ["direction", "fraction", "bank queries", "seed", "method", "R@1", "R@5", "MdR",
                                   "bank"]
    assert list(table["bank"]) == ["bank (60 queries)"] * 2 + ["bank (8 queries)"] * 4 + ["bank (1 queries)"] * 4
    assert notes == ["nnn k=16 is larger than its limit here (8: query_bank): k=8 is used"] * 2 + \
        ["nnn k=16 is larger than its limit here (1: query_bank): k=1 is used"] * 2
    whole = hn.evaluate(task.fit(hn.make_normalizer("is", tau=0.05)), task)
    assert (table["R@1"][0], table["R@5"][0], table["MdR"][0]) == pytest.approx(
        (whole["R@1"], whole["R@5"], whole["MdR"]), abs=1e-12)
    rows = np.random.default_rng(6).choice(60, 8, replace=False)
    sub = ss.bank_subset(task, rows)
    assert table["R@1"][4] == pytest.approx(hn.evaluate(sub.fit(hn.make_normalizer("is", tau=0.05)), sub)["R@1"],
                                            abs=1e-12)


def test_bank_size_table_skips_a_method_whose_matrix_is_missing(tmp_path):
    caps, items, c2i, bank_caps, _ = write_example(tmp_path / "full")
    write_sims(tmp_path / "f", {"test": caps @ items.T, "bank_rows": bank_caps @ items.T}, modalities=("text", "video"),
               dataset="example", synthetic=True, labels=c2i)
    task = ss.load_sims_run(f"sims:{tmp_path / 'f'}").tasks["t2v"]
    skipped = {}
    table = ss.bank_size_table(task, [("dbsn", {"tau": 0.05}), ("is", {"tau": 0.05})], [1.0], skipped=skipped)
    assert list(table["method"]) == ["is"] and list(skipped) == ["dbsn (t2v)"]
    assert "bank_rows_x_bank_cols" in skipped["dbsn (t2v)"]


def test_tau_sweep_and_recall_at_k(folder):
    task = _run(folder).tasks["t2v"]
    sweep = ss.tau_sweep(task, [0.01, "0.05"], ("sn", "is"), query_aware=True, sn_iter=1)
    assert list(zip(sweep["method"], sweep["tau"])) == [("sn", 0.01), ("sn", 0.05), ("is", 0.01), ("is", 0.05)]
    assert set(sweep["bank"]) == {"test queries (query-aware)"} and set(sweep["direction"]) == {"t2v"}
    for row in sweep.to_dict("records"):
        extra = {"n_iter": 1} if row["method"] == "sn" else {}
        want = hn.evaluate(task.fit(hn.make_normalizer(row["method"], tau=row["tau"], **extra), query_aware=True),
                           task)
        assert (row["R@1"], row["R@5"]) == pytest.approx((want["R@1"], want["R@5"]), abs=1e-12)
    default = ss.tau_sweep(task, [0.05])
    assert list(default["method"]) == ["is", "sn"] and set(default["bank"]) == {"bank (60 queries)"}
    want = hn.evaluate(task.fit(hn.make_normalizer("sn", tau=0.05, n_iter=10)), task)
    assert default["R@1"][1] == pytest.approx(want["R@1"], abs=1e-12)
    scores, pos = _raw(folder[1], "t2v")
    rec = ss.recall_at_k(task, {"raw": None, "is": hn.make_normalizer("is", tau=0.05)}, ["2", 7], query_aware=True)
    assert list(rec.columns) == ["direction", "method", "bank", "R@2", "R@7"]
    assert list(rec["bank"]) == ["-", "test queries (query-aware)"]
    assert [rec["R@2"][0], rec["R@7"][0]] == pytest.approx([_r_at(scores, pos, 2), _r_at(scores, pos, 7)], abs=1e-12)


def test_hub_table_orders_the_largest_raw_hubs_and_labels_the_banks(folder):
    task = _run(folder).tasks["t2v"]
    scores, _ = _raw(folder[1], "t2v")
    n_k = _n_k(scores, 10)
    top = sorted(range(n_k.size), key=lambda i: (-n_k[i], i))[:10]
    table = ss.hub_table(task, {"raw": None})
    assert list(table.columns) == ["direction", "target", "N_10 raw", "bank"]
    assert list(table["target"]) == top and list(table["N_10 raw"]) == list(n_k[top])
    assert set(table["bank"]) == {"-"} and set(table["direction"]) == {"t2v"}
    two = ss.hub_table(task, {"raw": None, "is": hn.make_normalizer("is", tau=0.05),
                              "sn": hn.make_normalizer("sn", tau=0.05)}, k=3, top=5, query_aware=True)
    n3 = _n_k(scores, 3)
    top3 = sorted(range(n3.size), key=lambda i: (-n3[i], i))[:5]
    assert list(two["target"]) == top3 and set(two["bank"]) == {"test queries (query-aware)"}
    is_nk = hn.k_occurrence(task.blocks(task.fit(hn.make_normalizer("is", tau=0.05), query_aware=True)), 3)
    assert list(two["N_3 is"]) == list(is_nk[top3])
    bank = ss.hub_table(task, {"is": hn.make_normalizer("is", tau=0.05)}, top=2)
    assert set(bank["bank"]) == {"bank (60 queries)"} and len(bank) == 2


# ---------------------------------------------------------------------------------------------- the cell skipper
class _Shell:
    def __init__(self):
        self.input_transformers_cleanup = []


def test_skip_cell_passes_the_cells_that_restart_a_notebook(monkeypatch):
    import IPython

    shell = _Shell()
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    assert ss.skip_rest("the rest reads embeddings") is None
    ss.skip_rest("again")
    assert shell.input_transformers_cleanup == [ss._skip_cell]           # installed once
    assert ss._skip_cell(["x = 1\n", "y = 2\n"]) == [
        "pass  # skipped: this run reads a sims: folder (score matrices only); see the NOTE above\n"]
    assert ss._skip_cell(["resource = 1\n"])[0].startswith("pass")
    assert ss._skip_cell(["sources = 1\n"])[0].startswith("pass")
    assert shell.input_transformers_cleanup == [ss._skip_cell]
    for cell in (["x = 1\n", "source = 'sims:/a'\n"], ["run = nb.setup('01')\n"],
                 ["score_studies.run_notebook('01', source, run, globals())\n"]):
        shell.input_transformers_cleanup[:] = [ss._skip_cell]
        assert ss._skip_cell(cell) == cell
        assert shell.input_transformers_cleanup == []                    # uninstalled: the notebook runs again
    ss._uninstall()                                                      # not installed: nothing to remove
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    ss._uninstall()
    with pytest.raises(SystemExit):
        ss.skip_rest("no shell")


def test_skip_rest_exits_in_a_shell_without_input_transformers(monkeypatch, capsys):
    import IPython

    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    with pytest.raises(SystemExit) as stop:
        ss.skip_rest("why")
    assert stop.value.code == 0 and capsys.readouterr().out == "NOTE: why\n"


# ---------------------------------------------------------------------------------------------- run_notebook
class _Recorder:
    """The notebook ``run`` object, recording what the sims branch saves (each figure's texts, sizes and lines)."""

    def __init__(self):
        self.tables, self.figures, self.looks = {}, {}, {}

    def save_table(self, df, name, caption):
        self.tables[name] = (df.copy(), caption)

    def save_figure(self, fig, name, caption, data, bank):
        import matplotlib.pyplot as plt

        self.figures[name] = (caption, data, list(bank), [a.get_title() for a in fig.axes],
                              [a.get_xlabel() for a in fig.axes], [a.get_ylabel() for a in fig.axes],
                              [a.get_xscale() for a in fig.axes])
        self.looks[name] = {"size": tuple(fig.get_size_inches()), "axes": fig.axes,
                            "title size": [a.title.get_fontsize() for a in fig.axes],
                            "legend": [None if a.get_legend() is None else
                                       (a.get_legend().prop.get_size(), a.get_legend()._ncols,
                                        [t.get_text() for t in a.get_legend().get_texts()]) for a in fig.axes],
                            "lines": [[(list(ln.get_ydata()), ln.get_linestyle(), ln.get_linewidth(), ln.get_color())
                                       for ln in a.lines if ln.get_label().startswith("_")] for a in fig.axes],
                            "x base": [getattr(a.xaxis.get_transform(), "base", None) for a in fig.axes]}
        plt.close(fig)


PALETTE = [(0.1, 0.2, 0.3), (0.4, 0.5, 0.6), (0.7, 0.8, 0.9)]


class _Seaborn:
    """seaborn as the sims branch calls it: each plot recorded (its data and arguments), a named column that the data
    lacks refused as seaborn does, an ECDF drawn as one labelled line (for the legend). Fast: no layout."""

    def __init__(self):
        self.calls = []

    def _plot(self, kind, data, kw):
        missing = [kw[a] for a in ("x", "y", "hue") if a in kw and kw[a] not in data]
        if missing:
            raise ValueError(f"{kind}: no column {missing}")
        self.calls.append((kind, data.copy(), kw))
        for level in dict.fromkeys(data[kw["hue"]]) if "hue" in kw else ():   # the legend's entries
            kw["ax"].plot([], [], label=str(level))

    def barplot(self, data=None, **kw):
        self._plot("barplot", data, kw)

    def lineplot(self, data=None, **kw):
        self._plot("lineplot", data, kw)

    def ecdfplot(self, data, **kw):
        self.calls.append(("ecdfplot", np.asarray(data).copy(), kw))
        kw["ax"].plot([0, 1], [0, 1], label=kw.get("label"))

    def color_palette(self):
        return list(PALETTE)


@pytest.fixture(autouse=True)
def sns(monkeypatch):
    """The fake seaborn (the sims branch imports it inside :func:`run_notebook`), and no tight layout (slow, and
    nothing checked here depends on it)."""
    import sys

    import matplotlib.figure

    fake = _Seaborn()
    monkeypatch.setitem(sys.modules, "seaborn", fake)
    monkeypatch.setattr(matplotlib.figure.Figure, "tight_layout", lambda self, *a, **k: None)
    return fake


PARAMS = {"nnn_params": {"alpha": 0.5, "k": 4}, "is_tau": {"t2i": 0.05, "i2t": 0.03}, "sn_tau": 0.05, "sn_iter": 5,
          "dualis_params": {"beta_query": 20.0, "beta_target": 10.0}}


def _nb(folder, prefix, params, capsys, **kw):
    rec = _Recorder()
    tables = ss.run_notebook(prefix, f"sims:{folder[0]}", rec, params, stop=False, **kw)
    out = capsys.readouterr().out
    assert out.startswith(f"this run: {LABEL}\nNOTE: a sims: folder holds score matrices only; {ss.NEEDS[prefix]}.\n")
    assert "NOTE: directions t2i = t2v, i2t = v2t (the notebook's names for this folder's text-query and item-query " \
           "directions).\n" in out
    assert "NOTE: no validation split in a sims folder: no hyperparameter is selected; every method runs at this " \
           "notebook's fixed parameters (the papers' defaults); no published rows are compared with a sims " \
           "run.\n" in out
    assert "no bank x gallery" not in out
    assert set(rec.tables) == {f"sims_{n}" for n in tables}
    for name, df in tables.items():
        assert rec.tables[f"sims_{name}"][0].equals(df) and rec.tables[f"sims_{name}"][1].endswith(f"; {LABEL}.")
    return rec, tables, out


def _same(a, b):
    pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True), check_exact=False, atol=1e-12,
                                  rtol=0)


def test_run_notebook_01_methods_per_direction_parameters(folder, capsys):
    rec, tables, out = _nb(folder, "01", dict(PARAMS, hub_k=5), capsys)
    run = _run(folder)
    by_dir = {"t2v": "t2i", "v2t": "i2t"}
    want = ss.methods_table(run, lambda d: ss.score_methods(PARAMS, by_dir[d], names=ss.SHOWN), hub_k=5)
    _same(tables["methods"], want)
    assert rec.tables["sims_methods"][1] == f"Score-only methods at fixed parameters, test scores; {LABEL}."
    cap, data, bank, titles, xl, yl, _ = rec.figures["sims_r1_by_method"]
    assert cap == f"R@1 per method; {LABEL}. " and data == LABEL and bank == list(want["bank"])
    assert titles == [f"R@1 per method, fixed parameters — {LABEL}"] and yl == ["R@1 (%)"]
    assert list(rec.figures) == ["sims_r1_by_method"]
    assert not re.search(r"NOTE: .* is not run on this folder", out)


def test_run_notebook_00_hubness(folder, capsys):
    rec, tables, out = _nb(folder, "00", {"hub_k": 3, "nnn_k": 100}, capsys)
    assert list(tables) == ["hubness"] and rec.figures == {}
    run = _run(folder)
    want = ss.hubness_table(run, lambda d: ss.score_methods({"nnn_k": 100}, "t2i", names=ss.HUBNESS_SHOWN), k=3)
    _same(tables["hubness"], want)
    assert rec.tables["sims_hubness"][1] == f"Hubness of the test scores (N_3) per method; {LABEL}."
    assert out.count("NOTE: nnn k=100 is larger than its limit here (60: query_bank): k=60 is used\n") == 1
    assert "NOTE: nnn k=100 is larger than its limit here (40: query_bank): k=40 is used\n" in out
    rec, tables, out = _nb(folder, "00", {}, capsys, hub_k=4)
    assert list(tables) == ["hubness"] and "skew N_4" in tables["hubness"] and rec.figures == {}
    _, tables, _ = _nb(folder, "00", {"hub_k": None}, capsys)
    assert "skew N_10" in tables["hubness"]


def test_run_notebook_04_bank_sizes(folder, capsys):
    params = {"nnn_params": {"alpha": 0.5, "k": 4}, "is_tau": 0.05, "sn_tau": 0.05, "nnn_fractions": [1.0, 0.5],
              "seed": 1, "dbsn_fractions": [0.25], "dbsn_seeds": [2, 3]}
    rec, tables, out = _nb(folder, "04", params, capsys)
    task = _run(folder).tasks["t2v"]
    nnn = ss.bank_size_table(task, [("nnn", {"alpha": 0.5, "k": 4})], [1.0, 0.5], [1])
    fams = ss.bank_size_table(task, [("is", {"tau": 0.05}), ("sn", {"tau": 0.05}), ("dbsn", {"tau": 0.05})], [0.25],
                              [2, 3])
    want = pd.concat([nnn.assign(part="A: NNN"), fams.assign(part="B: IS / SN / DBSN")], ignore_index=True)
    want.insert(0, "run", LABEL)
    want["raw R@1"] = hn.evaluate(None, task)["R@1"]
    _same(tables["bank_sizes"], want)
    assert rec.tables["sims_bank_sizes"][1] == f"R@1 with seeded subsets of the bank rows, t2v; {LABEL}."
    cap, data, bank, titles, _, yl, xs = rec.figures["sims_bank_sizes"]
    assert bank == ["none", *want["bank"]] and cap == f"R@1 over bank subsets; {LABEL}. " and xs == ["log"]
    assert titles == [f"t2v: R@1 over query-bank size (dashed: raw) — {LABEL}"] and yl == ["R@1 (%)"]
    _, tables, _ = _nb(folder, "04", {}, capsys)
    df = tables["bank_sizes"]
    assert sorted(set(df[df["part"] == "A: NNN"]["fraction"])) == [0.1, 0.2, 0.5, 1.0]
    assert sorted(set(df[df["part"] != "A: NNN"]["fraction"])) == [1 / 64, 1 / 16, 1 / 4] and set(df["seed"]) == {0}
    nnn_default = ss.bank_size_table(task, [("nnn", {"alpha": 0.75, "k": 16})], [0.5], [0])
    assert df[(df["part"] == "A: NNN") & (df["fraction"] == 0.5)]["R@1"].iloc[0] == pytest.approx(
        nnn_default["R@1"][0], abs=1e-12)
    is_default = ss.bank_size_table(task, [("is", {"tau": 0.02}), ("sn", {"tau": 0.01})], [0.25], [0])
    got = df[(df["part"] != "A: NNN") & (df["fraction"] == 0.25)]
    assert list(got["R@1"])[:2] == pytest.approx(list(is_default["R@1"]), abs=1e-12)


def test_run_notebook_05_query_aware_vs_bank_and_tau_sweep(folder, capsys):
    rec, tables, out = _nb(folder, "05", dict(PARAMS, taus=[0.01, 0.05]), capsys)
    qvb = tables["qa_vs_bank"]
    assert list(zip(qvb["direction"], qvb["method"], qvb["bank"])) == [
        ("t2v", "raw", "-"), ("t2v", "is", "test queries (query-aware)"), ("t2v", "sn", "test queries (query-aware)"),
        ("t2v", "is", "bank (60 queries)"), ("t2v", "sn", "bank (60 queries)"), ("t2v", "dbsn", "bank (60 queries)"),
        ("t2v", "dualis", "bank (60 queries)"),
        ("v2t", "raw", "-"), ("v2t", "is", "test queries (query-aware)"), ("v2t", "sn", "test queries (query-aware)"),
        ("v2t", "is", "bank (40 queries)"), ("v2t", "sn", "bank (40 queries)"), ("v2t", "dbsn", "bank (40 queries)"),
        ("v2t", "dualis", "bank (40 queries)")]
    run = _run(folder)
    v2t = run.tasks["v2t"]
    want = hn.evaluate(v2t.fit(hn.make_normalizer("is", tau=0.03), query_aware=True), v2t)     # i2t's temperature
    got = qvb[(qvb["direction"] == "v2t") & (qvb["method"] == "is")].iloc[0]
    assert got["R@1"] == pytest.approx(want["R@1"], abs=1e-12) and got["MnR"] == pytest.approx(want["MnR"], abs=1e-12)
    assert set(qvb["run"]) == {LABEL} and "bank" in qvb and "R@10" in qvb
    assert rec.tables["sims_qa_vs_bank"][1] == (f"IS, SN and the dual-bank methods with the test queries or the "
                                                f"folder's bank; {LABEL}.")
    _same(tables["tau_sweep"], ss.tau_sweep(run.tasks["t2v"], [0.01, 0.05], ("is", "sn")).assign(run=LABEL))
    assert rec.tables["sims_tau_sweep"][1] == f"R@1 of IS and SN over the temperature, t2v; {LABEL}."
    cap, data, bank, titles, _, yl, _ = rec.figures["sims_tau_sweep"]
    assert cap == f"R@1 over the temperature; {LABEL}. " and bank == list(tables["tau_sweep"]["bank"])
    assert titles == [f"t2v: IS vs SN over τ — {LABEL}"] and yl == ["R@1 (%)"]
    _, tables, _ = _nb(folder, "05", {}, capsys)
    assert list(tables["tau_sweep"]["tau"]) == [0.005, 0.01, 0.015, 0.02, 0.025] * 2


def test_run_notebook_06_07_recall_and_09_hubs(folder, capsys):
    run = _run(folder)
    rec, tables, out = _nb(folder, "06", dict(PARAMS, k_values=[3], recall_ks=[7]), capsys)
    assert rec.tables["sims_first_stage_recall"][1] == (f"R@k of the first stages (the reranking ceiling), test "
                                                        f"scores; {LABEL}.")
    assert re.search(r"^ *run +direction +bank +method +R@1 +R@3 +R@5 +R@10$", out, flags=re.M)   # the shown columns
    by_dir = {"t2v": "t2i", "v2t": "i2t"}
    parts = [ss.recall_at_k(t, {m: ss._clamped(n, t, False, []) for m, n in
                                ss.score_methods(PARAMS, by_dir[d], names=ss.HUBNESS_SHOWN).items()}, [1, 3, 5, 10])
             .assign(run=LABEL) for d, t in run.tasks.items()]
    _same(tables["first_stage_recall"], pd.concat(parts, ignore_index=True))
    _, tables, _ = _nb(folder, "07", {"recall_ks": [7, 5]}, capsys)
    assert [c for c in tables["first_stage_recall"] if c.startswith("R@")] == ["R@1", "R@5", "R@7", "R@10"]
    rec, tables, out = _nb(folder, "09", dict(PARAMS, hub_k=4), capsys)
    t2v = run.tasks["t2v"]
    want = ss.hub_table(t2v, {m: ss._clamped(n, t2v, False, []) for m, n in
                              ss.score_methods(PARAMS, "t2i", names=ss.HUBNESS_SHOWN).items()}, k=4)
    want.insert(0, "run", LABEL)
    _same(tables["raw_hubs"], want)
    assert rec.tables["sims_raw_hubs"][1] == f"The largest N_4 of the raw scores and after each method, t2v; {LABEL}."


def test_run_notebook_one_direction_a_folder_without_banks_and_the_stop(tmp_path, folder, capsys):
    rec = _Recorder()
    tables = ss.run_notebook("09", f"sims:{folder[0]}", rec, {"directions": ["i2t"], "hub_k": 3}, stop=False)
    out = capsys.readouterr().out
    assert "NOTE: directions i2t = v2t (" in out and set(tables["raw_hubs"]["direction"]) == {"v2t"}
    caps, items, c2i, _, _ = folder[1]
    write_sims(tmp_path / "f", {"test": caps @ items.T}, modalities=("text", "video"), dataset="example",
               synthetic=True, labels=c2i)
    with pytest.raises(SystemExit) as stop:
        ss.run_notebook("04", f"sims:{tmp_path / 'f'}", _Recorder(), {"directions": ["t2v"]})
    out = capsys.readouterr().out
    assert stop.value.code == 0
    assert "NOTE: directions" not in out
    assert ("NOTE: t2v: the folder has no bank x gallery scores for this direction, so the test queries serve as the "
            "bank (query-aware, labelled so); for a query bank, ") in out
    assert "NOTE: t2v: the folder has no bank x gallery scores, so no query-bank size can be studied.\n" in out
    assert out.endswith("NOTE: the remaining cells of this notebook read embeddings, so they are skipped in this sims: "
                        "run (re-run the parameters cell with another source to run them)\n")
    rec = _Recorder()
    ss.run_notebook("01", f"sims:{tmp_path / 'f'}", rec, {}, stop=False)
    out = capsys.readouterr().out
    assert "NOTE: dbsn (t2v) is not run on this folder: " in out
    assert "NOTE: dualis (v2t) is not run on this folder: " in out
    assert rec.figures["sims_r1_by_method"][0].startswith(f"R@1 per method; {LABEL}. Bank marks: ")
    with pytest.raises(ValueError, match=r"notebook '08' has no sims branch; known: \['00', '01'"):
        ss.run_notebook("08", f"sims:{folder[0]}", rec, {})


# ---------------------------------------------------------------------------------------------- the figures, drawn
def test_run_notebook_01_draws_r1_bars_per_direction_and_method(folder, capsys, sns):
    rec, tables, _ = _nb(folder, "01", PARAMS, capsys)
    [(kind, data, kw)] = sns.calls
    ax = rec.looks["sims_r1_by_method"]["axes"][0]
    assert kind == "barplot" and data.equals(tables["methods"])
    assert kw == {"x": "direction", "y": "R@1", "hue": "method", "ax": ax}
    looks = rec.looks["sims_r1_by_method"]
    assert looks["size"] == (7, 3.6) and looks["title size"] == [9]
    assert looks["legend"] == [(7, 5, list(ss.SHOWN))]
    assert "skew N_10" in tables["methods"]                                # hub_k: the default 10


def test_run_notebook_04_draws_r1_over_bank_queries(folder, capsys, sns):
    params = {"nnn_fractions": [1.0, 0.5], "dbsn_fractions": [0.5], "dbsn_seeds": [4], "nnn_params": {"k": 40}}
    rec, tables, out = _nb(folder, "04", params, capsys)
    assert "NOTE: nnn k=40 is larger than its limit here (30: query_bank): k=30 is used\n" in out   # the half bank
    [(kind, data, kw)] = sns.calls
    looks = rec.looks["sims_bank_sizes"]
    assert kind == "lineplot" and data.equals(tables["bank_sizes"])
    assert kw == {"x": "bank queries", "y": "R@1", "hue": "method", "marker": "o", "errorbar": None,
                  "ax": looks["axes"][0]}
    raw = hn.evaluate(None, _run(folder).tasks["t2v"])["R@1"]
    assert looks["lines"] == [[([raw, raw], "--", 1, "k")]]
    assert looks["x base"] == [10] and looks["size"] == (6.5, 3.8) and looks["title size"] == [9]
    df = tables["bank_sizes"]
    assert list(tables) == ["bank_sizes"] and list(df.index) == list(range(5))
    assert list(df.columns) == ["run", "direction", "fraction", "bank queries", "seed", "method", "R@1", "R@5", "MdR",
                                "bank", "part", "raw R@1"]
    assert list(zip(df["part"], df["method"], df["bank queries"], df["seed"])) == [
        ("A: NNN", "nnn", 60, 0), ("A: NNN", "nnn", 30, 0), ("B: IS / SN / DBSN", "is", 30, 4),
        ("B: IS / SN / DBSN", "sn", 30, 4), ("B: IS / SN / DBSN", "dbsn", 30, 4)]
    task = _run(folder).tasks["t2v"]
    want = ss.bank_size_table(task, [("is", {"tau": 0.02}), ("sn", {"tau": 0.01}), ("dbsn", {"tau": 0.01})], [0.5],
                              [4])
    assert list(df["R@1"][2:]) == pytest.approx(list(want["R@1"]), abs=1e-12)


def test_run_notebook_05_draws_r1_over_the_temperature(folder, capsys, sns):
    rec, tables, _ = _nb(folder, "05", {"taus": [0.01, 0.05]}, capsys)
    [(kind, data, kw)] = sns.calls
    looks = rec.looks["sims_tau_sweep"]
    assert kind == "lineplot" and data.equals(tables["tau_sweep"])
    assert kw == {"x": "tau", "y": "R@1", "hue": "method", "marker": "o", "ax": looks["axes"][0]}
    assert looks["size"] == (6.5, 3.8) and looks["title size"] == [9] and looks["lines"] == [[]]
    assert list(tables) == ["qa_vs_bank", "tau_sweep"]


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "3"])
def test_run_notebook_refuses_a_hub_k_that_is_not_a_positive_integer(folder, bad):
    with pytest.raises(ValueError, match=re.escape(f"hub_k (the k of N_k) must be a positive integer; got {bad!r}")):
        ss.run_notebook("00", f"sims:{folder[0]}", _Recorder(), {}, stop=False, hub_k=bad)
    with pytest.raises(ValueError, match=re.escape(f"must be a positive integer; got {bad!r}")):
        ss.run_notebook("00", f"sims:{folder[0]}", _Recorder(), {"hub_k": bad}, stop=False)


def test_run_notebook_takes_a_numpy_hub_k_as_an_int(folder, capsys):
    tables = ss.run_notebook("00", f"sims:{folder[0]}", _Recorder(), {"hub_k": np.int64(2)}, stop=False)
    assert "skew N_2" in tables["hubness"] and type(tables["hubness"]["max N_2"][0]) is not str
    tables = ss.run_notebook("00", f"sims:{folder[0]}", _Recorder(), {"hub_k": 2}, stop=False, hub_k=np.int32(1))
    assert "skew N_1" in tables["hubness"]


# ---------------------------------------------------------------------------------------------- study functions, more
def _dense(m):
    return m.block(0, m.shape[0], 0, m.shape[1], torch.float64).numpy()


@pytest.fixture(scope="module")
def handed_in(tmp_path_factory, folder):
    """A sims folder whose bank rows are the test rows (a bank that holds the test queries), and one with the test
    matrix only (no bank)."""
    caps, items, c2i, _, _ = folder[1]
    base = tmp_path_factory.mktemp("sims_more")
    write_sims(base / "copy", {"test": caps @ items.T, "bank_rows": caps @ items.T}, modalities=("text", "video"),
               dataset="example", synthetic=True, labels=c2i)
    write_sims(base / "test_only", {"test": caps @ items.T}, modalities=("text", "video"), dataset="example",
               synthetic=True, labels=c2i)
    return base


def test_hubness_table_defaults_a_folder_without_bank_and_the_skipped_methods(folder, handed_in):
    run = _run(folder)
    table = ss.hubness_table(run, lambda d: {"raw": None})
    assert [c for c in table.columns if "N_" in c] == ["skew N_10", "max N_10"]
    scores, _ = _raw(folder[1], "t2v")
    assert table["max N_10"][0] == _n_k(scores, 10).max()
    bare = ss.load_sims_run(f"sims:{handed_in / 'test_only'}")
    skipped = {}
    table = ss.hubness_table(bare, lambda d: {"is": hn.make_normalizer("is", tau=0.05),
                                              "dbsn": hn.make_normalizer("dbsn", tau=0.05)}, k=3, skipped=skipped)
    assert list(table["method"]) == ["is", "is"] and list(table["bank"]) == ["test queries (query-aware)"] * 2
    assert list(skipped) == ["dbsn (t2v)", "dbsn (v2t)"]
    task = bare.tasks["t2v"]
    want = hn.hubness(task.blocks(task.fit(hn.make_normalizer("is", tau=0.05), query_aware=True)), k=3)
    assert table["skew N_3"][0] == pytest.approx(want["skewness"], abs=1e-12)
    assert list(ss.hubness_table(bare, lambda d: {"dbsn": hn.make_normalizer("dbsn")})) == []   # no rows, no error


def test_the_tables_fit_each_method_once(folder, monkeypatch):
    run = _run(folder)
    fits = []
    for d, task in run.tasks.items():
        fit = task.fit
        monkeypatch.setattr(task, "fit", lambda norm, _fit=fit, _d=d, **kw: fits.append(_d) or _fit(norm, **kw))
    ss.hubness_table(run, lambda d: {"raw": None, "is": hn.make_normalizer("is", tau=0.05)})
    assert fits == ["t2v", "v2t"]
    fits.clear()
    ss.methods_table(run, lambda d: {"raw": None, "is": hn.make_normalizer("is", tau=0.05)})
    assert fits == ["t2v", "v2t"]


def test_bank_subset_cuts_a_bank_given_as_columns_and_keeps_the_hints(folder):
    caps, items, c2i, bank_caps, _ = folder[1]
    task = _run(folder).tasks["t2v"]
    sub = ss.bank_subset(task, [5, 2, 9])
    assert sub.hints == task.hints and sub.meta == task.meta and sub.hints is not task.hints
    want = bank_caps[[2, 5, 9]] @ items.T
    np.testing.assert_allclose(_dense(sub.engine.matrices[("query_bank", "targets")]), want, rtol=0, atol=1e-6)
    cols = hn.RetrievalTask(scores={("queries", "targets"): caps @ items.T,
                                    ("targets", "query_bank"): items @ bank_caps.T},
                            positives=task.positives, direction="t2v")
    cut = ss.bank_subset(cols, np.array([9, 5, 2]))
    assert set(cut.engine.matrices) == {("queries", "targets"), ("query_bank", "targets")}
    np.testing.assert_allclose(_dense(cut.engine.matrices[("query_bank", "targets")]), want, rtol=0, atol=1e-12)
    assert cut.size("query_bank") == 3


def test_bank_size_table_needs_a_bank_and_cuts_k_without_a_notes_list(folder, handed_in):
    bare = ss.load_sims_run(f"sims:{handed_in / 'test_only'}").tasks["t2v"]
    with pytest.raises(ValueError, match=re.escape(
            "the t2v task has no query bank (bank x gallery scores): the query-bank study needs the manifest role "
            "'bank_rows' (text queries) or 'bank_cols' (item queries)")):
        ss.bank_size_table(bare, [("is", {})], [1.0])
    task = _run(folder).tasks["t2v"]
    table = ss.bank_size_table(task, [("nnn", {"k": 16})], [0.1], seeds=[1])      # 6 rows: k=6, no notes list given
    sub = ss.bank_subset(task, np.random.default_rng(1).choice(60, 6, replace=False))
    want = hn.evaluate(sub.fit(hn.make_normalizer("nnn", k=6)), sub)
    assert list(table["bank queries"]) == [6] and table["R@1"][0] == pytest.approx(want["R@1"], abs=1e-12)


def test_tau_sweep_labels_a_bank_that_holds_the_test_queries(handed_in):
    task = ss.load_sims_run(f"sims:{handed_in / 'copy'}").tasks["t2v"]
    sweep = ss.tau_sweep(task, [0.05], ("is",))
    assert list(sweep["bank"]) == ["bank (48 queries): QUERY-AWARE (it holds test queries)"]


# ---------------------------------------------------------------------------------------------- the run
def test_is_sims_and_load_sims_run_refuse_other_sources(folder):
    assert ss.is_sims(f"sims:{folder[0]}") and not ss.is_sims("emb:x") and not ss.is_sims(None)
    assert not ss.is_sims(["sims:x"])
    with pytest.raises(ValueError, match=re.escape("source must be 'sims:<folder>'; got 'emb:x'")):
        ss.load_sims_run("emb:x")


def test_sims_run_names_the_text_query_direction_whatever_the_folder_order(tmp_path):
    write_example(tmp_path / "vt", modalities=("video", "text"))
    run = ss.load_sims_run(f"sims:{tmp_path / 'vt'}")
    assert run.directions == ["t2v", "v2t"] and run.alias == {"t2i": "t2v", "i2t": "v2t"}
    assert run.label == LABEL and run.synthetic is True and run.modalities == ("video", "text")
    assert run.has_bank("t2v") and run.has_bank("v2t")
    assert ss.load_sims_run(f"sims:{tmp_path / 'vt'}", ["i2t"]).directions == ["v2t"]
    one = ss.load_sims_run(f"sims:{tmp_path / 'vt'}", ["v2t", "t2i"])
    assert one.directions == ["v2t", "t2v"] and one.alias == {"t2i": "t2v"}
    with pytest.raises(ValueError, match=re.escape("directions ['x2y']: this sims folder holds ['v2t', 't2v']; pass "
                                                   "'t2i' (text queries, t2v) and/or 'i2t' (v2t)")):
        ss.load_sims_run(f"sims:{tmp_path / 'vt'}", ["x2y"])


def test_sims_run_has_bank_per_direction(folder, handed_in):
    bare = ss.load_sims_run(f"sims:{handed_in / 'test_only'}")
    assert not bare.has_bank("t2v") and not bare.has_bank("v2t")
    copy = ss.load_sims_run(f"sims:{handed_in / 'copy'}")
    assert copy.has_bank("t2v") and not copy.has_bank("v2t")


def test_run_notebook_00_reads_per_direction_temperatures(folder, capsys):
    params = {"is_tau": {"t2i": 0.01, "i2t": 1.0}, "hub_k": 3}
    _, tables, _ = _nb(folder, "00", params, capsys)
    df = tables["hubness"]
    run = _run(folder)
    for d, tau, other in (("t2v", 0.01, 1.0), ("v2t", 1.0, 0.01)):
        task = run.tasks[d]
        got = df[(df["direction"] == d) & (df["method"] == "is")]["skew N_3"].iloc[0]
        want, wrong = (hn.hubness(task.blocks(task.fit(hn.make_normalizer("is", tau=t))), k=3)["skewness"]
                       for t in (tau, other))
        assert got == pytest.approx(want, abs=1e-12) and got != pytest.approx(wrong, abs=1e-6)


def test_run_notebook_on_a_folder_without_bank_or_with_some_bank_matrices(handed_in, capsys):
    bare = f"sims:{handed_in / 'test_only'}"
    tables = ss.run_notebook("05", bare, _Recorder(), {"taus": [0.05]}, stop=False)
    qa = "test queries (query-aware)"
    assert list(zip(tables["qa_vs_bank"]["direction"], tables["qa_vs_bank"]["method"], tables["qa_vs_bank"]["bank"])) \
        == [(d, m, "-" if m == "raw" else qa) for d in ("t2v", "v2t") for m in ("raw", "is", "sn")]
    assert list(tables["tau_sweep"]["bank"]) == [qa, qa]
    tables = ss.run_notebook("06", bare, _Recorder(), {"nnn_params": {"k": 100}}, stop=False)
    out = capsys.readouterr().out
    assert "NOTE: nnn k=100 is larger than its limit here (48: query_bank): k=48 is used\n" in out
    assert set(tables["first_stage_recall"]["bank"]) == {"-", qa}
    tables = ss.run_notebook("09", bare, _Recorder(), {"hub_k": 2}, stop=False)
    assert set(tables["raw_hubs"]["bank"]) == {qa}
    tables = ss.run_notebook("05", f"sims:{handed_in / 'copy'}", _Recorder(), {"taus": [0.05]}, stop=False)
    out = capsys.readouterr().out
    assert "NOTE: dbsn (t2v) is not run on this folder: " in out
    assert "NOTE: dualis (t2v) is not run on this folder: " in out
    qvb = tables["qa_vs_bank"]
    assert list(qvb[qvb["direction"] == "t2v"]["method"]) == ["raw", "is", "sn", "is", "sn"]
    assert list(qvb[qvb["direction"] == "t2v"]["bank"])[3:] == [
        "bank (48 queries): QUERY-AWARE (it holds test queries)"] * 2
