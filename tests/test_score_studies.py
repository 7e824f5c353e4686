"""hubnorm.score_studies: what the notebooks compute from a sims: folder equals the embeddings path (float64, 1e-12)
where both exist; directions, labels, a folder without banks, and the skip of the remaining cells."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import hubnorm as hn
from hubnorm import provenance as pv
from hubnorm.experiments import score_studies as ss
from hubnorm.data.sims import write_sims
from hubnorm.evaluation import summarize_ranks
from hubnorm.retrieval import Positives

from test_sims import write_example

PARAMS = {"nnn_k": 4, "nnn_alpha": 0.75, "is_tau": 0.05, "sn_tau": 0.05, "sn_iter": 10,
          "dualis_params": {"beta_query": 20.0, "beta_target": 10.0}}
TOL = 1e-12


def _side(data, direction, bank_rows=None):
    """(queries, targets, query bank, target bank, positives) of one direction, from the embeddings."""
    caps, items, c2i, bank_caps, bank_items = data
    if direction == "t2v":
        q, t, qb, tb, pos = caps, items, bank_caps, bank_items, Positives.from_labels(c2i, len(items))
    else:
        q, t, qb, tb, pos = items, caps, bank_items, bank_caps, Positives.from_groups(c2i, len(items))
    if bank_rows is not None:
        qb = qb[np.sort(bank_rows)]
    return q, t, qb, tb, pos


def _oracle(data, direction, name, params, *, k=10, bank_rows=None):
    """Metrics, skewness of N_k and N_k of ``name`` fitted from the embeddings (hubnorm's embeddings path)."""
    q, t, qb, tb, pos = _side(data, direction, bank_rows)
    if name == "raw":
        scores, queries = torch.from_numpy(q @ t.T), None
    else:
        scores, queries = hn.make_normalizer(name, **params).fit(t, query_bank=qb, target_bank=tb), q
    ranks = hn.positive_ranks(scores, pos, queries)
    n_k = hn.k_occurrence(scores, k, queries)
    return summarize_ranks(ranks, (1, 5, 10)), hn.hubness(scores, k, queries)["skewness"], n_k, ranks


def _method_params(name):
    return {"raw": {}, "nnn": {"alpha": 0.75, "k": 4}, "is": {"tau": 0.05}, "dis": {"tau": 0.05, "k": 1},
            "csls": {"k": 10}, "sn": {"tau": 0.05, "n_iter": 10}, "dbsn": {"tau": 0.05, "n_iter": 10},
            "dualis": {"beta_query": 20.0, "beta_target": 10.0},
            "dualdis": {"beta_query": 20.0, "beta_target": 10.0}}[name]


def test_methods_and_hubness_tables_equal_the_embeddings_path(tmp_path):
    data = write_example(tmp_path)
    run = ss.load_sims_run(f"sims:{tmp_path}")
    table = ss.methods_table(run, lambda d: ss.score_methods(PARAMS, "t2i"), hub_k=10)
    assert set(table["method"]) == {"raw", "nnn", "is", "dis", "csls", "sn", "dbsn", "dualis", "dualdis"}
    assert set(table["direction"]) == {"t2v", "v2t"} and set(table["run"]) == {"synthetic analog (sims folder example)"}
    for row in table.to_dict("records"):
        want, skew, _, _ = _oracle(data, row["direction"], row["method"], _method_params(row["method"]))
        for m in ("R@1", "R@5", "R@10", "MdR", "MnR"):
            assert row[m] == pytest.approx(want[m], abs=TOL), (row["direction"], row["method"], m)
        assert row["skew N_10"] == pytest.approx(skew, abs=TOL), (row["direction"], row["method"])
    hub = ss.hubness_table(run, lambda d: {m: n for m, n in ss.score_methods(PARAMS, "t2i", extra=False).items()
                                           if m in ("raw", "nnn", "sn")}, k=5)
    for row in hub.to_dict("records"):
        _, skew, n_k, _ = _oracle(data, row["direction"], row["method"], _method_params(row["method"]), k=5)
        assert row["skew N_5"] == pytest.approx(skew, abs=TOL)
        assert row["max N_5"] == n_k.max() and row["anti-hubs %"] == pytest.approx(100 * np.mean(n_k == 0), abs=TOL)


def test_bank_subsets_equal_the_embeddings_path_on_the_same_rows(tmp_path):
    data = write_example(tmp_path)
    task = ss.load_sims_run(f"sims:{tmp_path}").tasks["t2v"]
    fams = [("nnn", {"alpha": 0.75, "k": 4}), ("is", {"tau": 0.05}), ("sn", {"tau": 0.05}), ("dbsn", {"tau": 0.05})]
    notes = []
    table = ss.bank_size_table(task, fams, [1.0, 0.5, 0.1, 0.05], seeds=[3, 4], notes=notes)
    n_bank = task.size("query_bank")
    assert n_bank == 60 and set(table["bank queries"]) == {60, 30, 6, 3}
    assert notes and all("nnn k=4 is larger than its limit here (3" in n for n in notes)   # k cut to the 3-row subset
    assert len(table[table["fraction"] == 1.0]) == 4          # the whole bank: one seed only
    for row in table.to_dict("records"):
        rows = None if row["fraction"] == 1.0 else np.random.default_rng(row["seed"]).choice(
            n_bank, row["bank queries"], replace=False)
        p = dict(_method_params(row["method"]), **({"k": min(4, row["bank queries"])} if "k" in
                                                    _method_params(row["method"]) else {}))
        want, _, _, _ = _oracle(data, "t2v", row["method"], p, bank_rows=rows)
        assert (row["R@1"], row["R@5"], row["MdR"]) == pytest.approx((want["R@1"], want["R@5"], want["MdR"]), abs=TOL)
    # the v2t side cuts the transposed bank x bank matrix the same way (DBSN reads it)
    v2t = ss.load_sims_run(f"sims:{tmp_path}").tasks["v2t"]
    rows = np.array([3, 1, 7, 20, 11])
    sub = ss.bank_subset(v2t, rows)
    got = hn.evaluate(sub.fit(hn.make_normalizer("dbsn", tau=0.05)), sub)
    want, _, _, _ = _oracle(data, "v2t", "dbsn", {"tau": 0.05}, bank_rows=rows)
    assert got.pop("bank") == "unrecorded"   # DBSN on scores: its target bank is not compared, so not "query-agnostic"
    assert got == pytest.approx(want, abs=TOL)


def test_tau_sweep_recall_and_hubs_equal_the_embeddings_path(tmp_path):
    data = write_example(tmp_path)
    run = ss.load_sims_run(f"sims:{tmp_path}")
    sweep = ss.tau_sweep(run.tasks["t2v"], [0.01, 0.05], ("is", "sn"))
    for row in sweep.to_dict("records"):
        want, _, _, _ = _oracle(data, "t2v", row["method"], {"tau": row["tau"]})
        assert row["R@1"] == pytest.approx(want["R@1"], abs=TOL)
    methods = {"raw": None, "is": hn.make_normalizer("is", tau=0.05)}
    rec = ss.recall_at_k(run.tasks["t2v"], methods, [1, 2, 3])
    for row in rec.to_dict("records"):
        _, _, _, ranks = _oracle(data, "t2v", row["method"], _method_params(row["method"]))
        assert [row[f"R@{k}"] for k in (1, 2, 3)] == pytest.approx([100 * np.mean(ranks < k) for k in (1, 2, 3)], abs=TOL)
        # in the ledger of computed R@K values, so a saved table's query-aware check can tell them apart
        assert all(pv._RECALLS[row[f"R@{k}"]] for k in (1, 2, 3))
    hubs = ss.hub_table(run.tasks["t2v"], {"raw": None, "sn": hn.make_normalizer("sn", tau=0.05)}, k=5, top=4)
    _, _, raw_nk, _ = _oracle(data, "t2v", "raw", {}, k=5)
    _, _, sn_nk, _ = _oracle(data, "t2v", "sn", {"tau": 0.05}, k=5)
    top = np.lexsort((np.arange(raw_nk.size), -raw_nk))[:4]
    assert list(hubs["target"]) == list(top)
    assert list(hubs["N_5 raw"]) == list(raw_nk[top]) and list(hubs["N_5 sn"]) == list(sn_nk[top])


def test_directions_labels_and_a_folder_without_banks(tmp_path):
    caps, items, c2i, bank_caps, bank_items = write_example(tmp_path / "full")
    # a real folder, modalities (video, text): t2i names the text-query direction whichever side it is on
    write_sims(tmp_path / "real", {"test": items @ caps.T}, modalities=("video", "text"),
               mask=np.arange(len(items))[:, None] == c2i[None, :], dataset="my-videos", synthetic=False)
    run = ss.load_sims_run(f"sims:{tmp_path / 'real'}", ["t2i", "i2t"])
    assert run.alias == {"t2i": "t2v", "i2t": "v2t"} and run.directions == ["t2v", "v2t"]
    assert run.label == "real data (my-videos, released score matrices)" and not run.synthetic
    assert not run.has_bank("t2v")
    skipped = {}
    table = ss.methods_table(run, lambda d: ss.score_methods(PARAMS, "t2i"), skipped=skipped)
    assert set(table["bank"]) == {"-", "test queries (query-aware)"}
    assert {"dbsn (t2v)", "dualis (t2v)", "dualdis (v2t)"} <= set(skipped) and "dbsn" not in set(table["method"])
    assert "add the role 'bank_rows_x_bank_cols'" in skipped["dbsn (t2v)"]        # the missing matrix, by its role
    # this folder's rows are the videos: t2v reads its columns' side (bank_rows_x_test_rows), v2t its rows' side
    assert "add the role 'bank_rows_x_test_rows'" in skipped["dualis (t2v)"]
    assert "add the role 'bank_cols_x_test_cols'" in skipped["dualis (v2t)"]
    with pytest.raises(ValueError, match="no query bank"):
        ss.bank_size_table(run.tasks["t2v"], [("is", {})], [0.5])
    with pytest.raises(ValueError, match="pass 't2i'"):
        ss.load_sims_run(f"sims:{tmp_path / 'real'}", ["a2t"])
    with pytest.raises(ValueError, match="sims:<folder>"):
        ss.load_sims_run(f"local:{tmp_path / 'real'}")
    assert ss.is_sims("sims:/x") and not ss.is_sims("local:/x") and not ss.is_sims(None)


def test_skip_rest_ends_a_plain_python_run_cleanly(capsys):
    with pytest.raises(SystemExit) as stop:
        ss.skip_rest("the rest reads embeddings")
    assert stop.value.code == 0
    assert "NOTE: the rest reads embeddings" in capsys.readouterr().out


def test_every_notebook_with_a_sims_cell_has_its_note():
    from conftest import REPO

    for py in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.py")):
        text = py.read_text(encoding="utf-8")
        if py.name[:2] in ("02", "03", "08"):   # own cells on score matrices (protocol.open_data / load_media)
            assert "sims_tables" not in text and py.name[:2] not in ss.NEEDS and py.name[:2] not in ss.SECTIONS
            continue
        assert f'score_studies.run_notebook("{py.name[:2]}", source, run, globals()' in text, py.name
        assert py.name[:2] in ss.NEEDS and py.name[:2] in ss.SECTIONS


@pytest.mark.parametrize("bad", [0, -3, 2.5, "10", True])
def test_run_notebook_refuses_a_bad_hub_k(bad):
    """hub_k (the k of N_k; notebook 00 passes its ``k``) is checked before any file is read."""
    with pytest.raises(ValueError, match="hub_k"):
        ss.run_notebook("00", "sims:/nonexistent-folder", None, {}, hub_k=bad)


@pytest.mark.parametrize("prefix", ["01", "05"])
def test_a_folder_with_the_test_matrix_only_runs_and_says_query_aware(tmp_path, monkeypatch, prefix):
    """No bank matrix: the test queries serve as the bank, so every figure of the run is query-aware and must say so
    (the suite's HUBNORM_FIGURE_CHECK=error refuses one that does not)."""
    import json

    import matplotlib
    matplotlib.use("Agg")
    from hubnorm.experiments import notebook as nb
    from test_sims import _embeddings

    caps, items, c2i, _, _ = _embeddings(0)
    write_sims(tmp_path / "f", {"test": caps @ items.T}, modalities=("text", "video"), dataset="example",
               synthetic=True, labels=c2i)
    monkeypatch.setenv("HUBNORM_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("HUBNORM_FIGURE_CHECK", "error")
    run = nb.setup(prefix, seed=0)
    ss.run_notebook(prefix, f"sims:{tmp_path / 'f'}", run, {}, stop=False)
    records = [json.loads(p.read_text()) for p in (tmp_path / "results" / "figures").glob(f"{prefix}_*.json")]
    assert records and all(any("query-aware" in b.lower() for b in r["bank"]) for r in records)
    assert all("QUERY-AWARE" in r["caption"] for r in records)
