"""Unit checks of the ``hubnorm`` command (hubnorm.cli) on tiny score tasks built here: each function's numbers
against hand-computed values or a dense float64 reference written in the test, every refusal by its own sentence,
what each subcommand prints and writes, and ``main``'s exit codes (the loaders replaced by fakes, so that the whole
file runs in seconds; tests/test_cli.py runs the commands end to end on synthetic and real data).

Equivalent mutants (no behaviour change possible), left as survivors:
- ``digest``: the size of the row block (``1 >> 24`` for ``1 << 24``, other bounds): the same bytes are hashed in
  another number of updates, and the sha256 of a concatenation does not depend on how it is split.
- ``diagnose_direction``: ``summarize_ranks(ranks)`` without ``(1, 5, 10)``: that is its default.
- ``write_html``: ``plt.close(None)`` closes the current figure, which is the one just drawn.
- ``_read_files``: ``allow_pickle=None`` refuses pickles as ``False`` does.
- ``_write_faiss``: ``np.ascontiguousarray(aug)`` without ``dtype=np.float32``: faiss's ``add`` converts the rows to
  float32 itself (and ``export`` passes float32 rows).
- ``check``: ``rglob`` also on a direction that is no folder (it yields nothing there); ``json.dumps(...,
  sort_keys=None)`` before a dict comparison (key order does not matter to ``!=``).
- ``main``: ``msg.rsplit("'", 3)[-2]`` for ``rsplit("'", 2)[-2]``: the last quoted word either way.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import math
import re
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import hubnorm as hn
from hubnorm import cli
from hubnorm import RetrievalTask
from hubnorm.scores import score_matrices


def unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def direction(name="t2i", n_items=8, per=2, dim=6, bank=20, seed=0, noise=0.8, ids=True) -> cli.Direction:
    """A tiny embeddings direction: ``per`` noisy queries per item (its positive), query and target banks."""
    rng = np.random.default_rng(seed)
    items = unit(rng.standard_normal((n_items, dim)))
    labels = np.repeat(np.arange(n_items), per)
    queries = unit(items[labels] + noise * rng.standard_normal((len(labels), dim)))
    qbank, tbank = unit(rng.standard_normal((bank, dim))), unit(rng.standard_normal((bank // 2, dim)))
    task = RetrievalTask(scores=score_matrices(queries, items, qbank, tbank),
                         positives=hn.Positives.from_labels(labels, n_items), direction=name)
    bank_info = {"kind": "embeddings", "split": "train", "query_bank": {"rows": bank, "sha256": cli.digest(qbank)},
                 "target_bank": {"rows": bank // 2, "sha256": cli.digest(tbank)}}
    return cli.Direction(name, task, queries, items, qbank, tbank, [f"item-{i}" for i in range(n_items)] if ids
                         else None, bank_info)


def source(*dirs, kind="embeddings", synthetic=False, flags=(), data=None) -> cli.Source:
    dirs = dirs or (direction("t2i"), direction("i2t", seed=1))
    return cli.Source("test:tiny", kind, synthetic, "tiny data", {d.name: d for d in dirs}, list(flags), data)


def dense(d):
    return np.asarray(d.queries, dtype=np.float64) @ np.asarray(d.targets, dtype=np.float64).T


def dense_ranks(s, positives):
    """Rank of each query's best positive: the targets scoring strictly higher (no ties in random data)."""
    out = []
    for q in range(s.shape[0]):
        pos = positives.indices[positives.indptr[q]:positives.indptr[q + 1]]
        out.append(int((s[q][None, :] > s[q, pos][:, None]).sum(axis=1).min()))
    return np.array(out)


def run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# ============================================================================================== small helpers
def test_parse_options_reads_numbers_booleans_and_text_and_names_the_flag_in_errors():
    got = cli._parse_options(["a=3", " b =1.5", "c=TRUE", "d=false", "e=text", "f=1e3", "g=", "h=a=b"])
    assert got == {"a": 3, "b": 1.5, "c": True, "d": False, "e": "text", "f": 1000.0, "g": "", "h": "a=b"}
    assert type(got["a"]) is int and type(got["f"]) is float and got["c"] is True and got["d"] is False
    assert cli._parse_options(None) == {} and cli._parse_options([]) == {}
    with pytest.raises(ValueError, match=r"^--source-option 'x' must be KEY=VALUE, e\.g\. --source-option "
                                         r"n_test_images=200$"):
        cli._parse_options(["x"])
    with pytest.raises(ValueError, match=r"^--source-option ' =3' must be KEY=VALUE"):
        cli._parse_options([" =3"])
    with pytest.raises(ValueError, match=r"^--param 'k' must be KEY=VALUE, e\.g\. --param k=16$"):
        cli._parse_options(["k"], "--param", "k=16")
    with pytest.raises(ValueError, match=r"^--param k is given twice: give each key once$"):
        cli._parse_options(["k=1", " k=2"], "--param", "k=16")


def test_check_directions_keeps_the_order_asked_and_names_the_first_unknown():
    assert cli._check_directions(None, ["t2i", "i2t"], "s") == ("t2i", "i2t")
    assert cli._check_directions([], ("t2i", "i2t"), "s") == ("t2i", "i2t")
    assert cli._check_directions(["i2t", "t2i"], ("t2i", "i2t"), "s") == ("i2t", "t2i")
    with pytest.raises(ValueError, match=r"^--direction 'v2t': src:x has the directions \['t2i', 'i2t'\]$"):
        cli._check_directions(["i2t", "v2t", "t2v"], ("t2i", "i2t"), "src:x")


def test_digest_is_sha256_of_shape_dtype_and_c_order_bytes():
    def ref(a):
        return hashlib.sha256(f"{a.shape}|{a.dtype.str}|".encode() + np.ascontiguousarray(a).tobytes()).hexdigest()

    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    assert cli.digest(a) == ref(a)
    assert cli.digest(np.asfortranarray(a)) == ref(a)            # the values in row order, whatever the layout
    assert cli.digest(a.astype(np.float32)) == ref(a.astype(np.float32)) != cli.digest(a)
    assert cli.digest(a.reshape(4, 3)) != cli.digest(a)
    assert cli.digest(np.float64(2.5)) == ref(np.asarray(2.5))      # a 0-d array: its one value
    assert cli.digest(np.zeros((0, 3))) == hashlib.sha256(b"(0, 3)|<f8|").hexdigest()
    assert cli.digest([[1, 2], [3, 4]]) == ref(np.asarray([[1, 2], [3, 4]]))
    assert cli.digest(np.ones((1, 3))) == ref(np.ones((1, 3)))   # one row
    big = np.arange(3 * (1 << 21), dtype=np.float64).reshape(3, -1)   # 16 MiB rows: one row per block
    assert cli.digest(big) == ref(big)
    many = np.arange(1 << 22, dtype=np.float64).reshape(-1, 2)        # blocks of many rows, the last one partial
    assert cli.digest(many) == ref(many)


def test_null_statistics_are_the_binomial_by_hand():
    # 3 queries, 4 targets, k = 1: N_k ~ Binomial(3, 1/4)
    null = cli.null_statistics(3, 4, 1)
    assert null["skewness"] == pytest.approx(0.5 / math.sqrt(3 * 0.25 * 0.75))
    assert null["hub_share"] == pytest.approx(3 * 0.25 ** 2 * 0.75 + 0.25 ** 3)   # N_k >= ceil(2 x 0.75) = 2
    assert null["antihub_share"] == pytest.approx(0.75 ** 3)
    assert cli.null_statistics(3, 4, 1, hub_factor=3.0)["hub_share"] == pytest.approx(0.25 ** 3)   # N_k >= 3
    assert cli.null_statistics(4, 2, 1) == pytest.approx({"skewness": 0.0, "hub_share": 1 / 16,
                                                          "antihub_share": 1 / 16})
    # k = every target: N_k = queries for each, no variance
    assert cli.null_statistics(10, 5, 5) == {"skewness": 0.0, "hub_share": 0.0, "antihub_share": 0.0}
    assert all(type(v) is float for v in cli.null_statistics(3, 4, 1).values())


# ============================================================================================== diagnose
def test_diagnose_direction_matches_a_dense_computation():
    d = direction(n_items=12, per=3, noise=1.2)
    rep = cli.diagnose_direction(d, k=3, hubs=4)
    s = dense(d)
    n_k = np.bincount(np.argsort(-s, axis=1, kind="stable")[:, :3].ravel(), minlength=12)
    labels = np.repeat(np.arange(12), 3)
    top1 = s.argmax(axis=1)
    right = top1 == labels
    assert rep["direction"] == "t2i" and (rep["n_queries"], rep["n_targets"], rep["k"]) == (36, 12, 3)
    ranks = dense_ranks(s, d.task.positives)
    assert rep["raw_recall"] == pytest.approx({**{f"R@{k}": 100 * np.mean(ranks < k) for k in (1, 5, 10)},
                                               "MdR": np.median(ranks + 1), "MnR": np.mean(ranks + 1)})
    assert 0 < rep["raw_recall"]["R@1"] < 100   # some top-1 retrievals are wrong
    mean = n_k.mean()
    assert rep["hubness"]["expected"] == pytest.approx(mean) == 9.0
    assert rep["hubness"]["antihub_share"] == pytest.approx(np.mean(n_k == 0))
    order = sorted(range(12), key=lambda t: (-n_k[t], t))[:4]
    wins, wrong = np.bincount(top1, minlength=12), np.bincount(top1[~right], minlength=12)
    assert rep["hubs"] == [{"target": t, "id": f"item-{t}", "n_k": int(n_k[t]), "hub": bool(n_k[t] >= 2 * mean),
                            "top1_wins": int(wins[t]), "wrong_top1_wins": int(wrong[t])} for t in order]
    assert any(h["wrong_top1_wins"] for h in rep["hubs"]) or wrong.sum() == 0
    assert rep["n_k_counts"] == np.bincount(n_k).tolist()
    null = cli.null_statistics(36, 12, 3)
    for stat, (warn, fail, what) in cli.THRESHOLDS.items():
        v = rep["verdicts"][stat]
        assert v["value"] == rep["hubness"][stat] and v["random"] == null[stat]
        assert v["excess"] == pytest.approx(rep["hubness"][stat] - null[stat])
        assert (v["warn_from"], v["fail_from"], v["what"]) == (warn, fail, what)
        assert v["verdict"] == cli.verdict(stat, v["excess"])
    assert rep["verdict"] == max((v["verdict"] for v in rep["verdicts"].values()), key=["ok", "warn", "fail"].index)
    assert [type(h["target"]) for h in rep["hubs"]] == [int] * 4
    no_ids = cli.diagnose_direction(direction(n_items=12, per=3, noise=1.2, ids=False), k=3, hubs=2)
    assert [h["id"] for h in no_ids["hubs"]] == [None, None]
    assert len(cli.diagnose_direction(d, k=12, hubs=20)["hubs"]) == 12   # k = the gallery is allowed
    with pytest.raises(ValueError, match=r"^--k 13 exceeds the gallery size 12 of t2i: choose a smaller k$"):
        cli.diagnose_direction(d, k=13)


def test_the_hub_flag_and_the_top1_of_a_task_with_a_hub_and_ties():
    """4 queries, 3 targets: target 0 is every query's first choice, query 3 ties targets 1 and 2 second."""
    s = np.array([[0.9, 0.5, 0.1], [0.8, 0.1, 0.6], [0.7, 0.3, 0.2], [0.9, 0.4, 0.4]])
    pos = hn.Positives.from_labels(np.array([0, 2, 1, 1]), 3)
    task = RetrievalTask(scores={("queries", "targets"): s}, positives=pos, direction="t2i")
    rep = cli.diagnose_direction(cli.Direction("t2i", task), k=1, hubs=3)
    # N_1 = (4, 0, 0), mean 4/3: target 0 a hub (4 >= 8/3); every top-1 is target 0, right for query 0 only
    assert [(h["target"], h["n_k"], h["hub"], h["top1_wins"], h["wrong_top1_wins"]) for h in rep["hubs"]] == \
        [(0, 4, True, 4, 3), (1, 0, False, 0, 0), (2, 0, False, 0, 0)]
    assert rep["raw_recall"]["R@1"] == 25.0 and rep["n_k_counts"] == [2, 0, 0, 0, 1]
    assert cli._top1(task).tolist() == [0, 0, 0, 0]
    rep2 = cli.diagnose_direction(cli.Direction("t2i", task), k=2, hubs=3)
    # top 2: (0,1), (0,2), (0,1), (0,1) with the tie of query 3 to the lower index: N_2 = (4, 3, 1), mean 8/3
    assert [(h["target"], h["n_k"], h["hub"]) for h in rep2["hubs"]] == [(0, 4, False), (1, 3, False), (2, 1, False)]


def test_diagnose_adds_the_geometry_above_its_minimum_and_a_warning_for_flags():
    from hubnorm.geometry import embedding_statistics

    rng = np.random.default_rng(2)
    d = direction()
    small = SimpleNamespace(items=unit(rng.standard_normal((10, 6))), captions=unit(rng.standard_normal((11, 6))),
                            caption_to_item=np.arange(11) % 10)
    rep = cli.diagnose(source(d, data=small, synthetic=True), k=2, hubs=2)
    assert "geometry" not in rep   # 10 items: not more than GEOMETRY_MIN_ITEMS
    assert (rep["command"], rep["hubnorm"], rep["source"], rep["data"], rep["synthetic"], rep["kind"]) == \
        ("diagnose", hn.__version__, "test:tiny", "tiny data", True, "embeddings")
    assert rep["flags"] == [] and [x["direction"] for x in rep["directions"]] == ["t2i"]
    assert rep["directions"][0] == cli.diagnose_direction(d, k=2, hubs=2)
    big = SimpleNamespace(items=unit(rng.standard_normal((11, 6))), captions=unit(rng.standard_normal((22, 6))),
                          caption_to_item=np.arange(22) % 11)
    rep = cli.diagnose(source(d, data=big), k=2, hubs=2)
    g = embedding_statistics(big.items, big.captions, big.caption_to_item)
    assert rep["geometry"] == {k: float(v) for k, v in g.items() if np.isscalar(v)} and "gap" in rep["geometry"]
    assert rep["verdict"] == rep["directions"][0]["verdict"]
    flagged = cli.diagnose(source(d, kind="scores", flags=["the rows look unnormalised"]), k=2, hubs=2)
    assert flagged["flags"] == ["the rows look unnormalised"] and "geometry" not in flagged
    assert flagged["verdict"] == max(flagged["directions"][0]["verdict"], "warn", key=["ok", "warn", "fail"].index)


def _verdicts(values, k):
    out = {}
    for (stat, (warn, fail, what)), (value, random, level) in zip(cli.THRESHOLDS.items(), values):
        out[stat] = {"value": value, "random": random, "excess": value - random, "verdict": level, "warn_from": warn,
                     "fail_from": fail, "what": what}
    return out


def diag_rep():
    return {"data": "tiny data", "synthetic": True, "kind": "embeddings", "flags": ["scores look odd"],
            "source": "test:<tiny>", "verdict": "fail",
            "directions": [
                {"direction": "t2i", "n_queries": 1200, "n_targets": 40, "k": 5, "verdict": "fail",
                 "raw_recall": {"R@1": 41.256, "R@5": 70.0, "R@10": 81.004},
                 "hubness": {"expected": 150.0, "skewness": 3.456},
                 "verdicts": _verdicts([(3.456, 0.004, "fail"), (0.1, 0.0501, "warn"), (0.0, 0.0004, "ok")], 5),
                 "hubs": [{"target": 3, "id": "img-3", "n_k": 400, "hub": True, "top1_wins": 120,
                           "wrong_top1_wins": 90},
                          {"target": 17, "id": None, "n_k": 12, "hub": False, "top1_wins": 0, "wrong_top1_wins": 0}],
                 "n_k_counts": [3, 0, 1]}]}


def test_the_text_of_a_diagnosis_line_by_line():
    text = cli._diagnose_text(diag_rep())
    assert text.split("\n") == [
        "tiny data  [SYNTHETIC]",
        "",
        "WARN  input check: scores look odd",
        "t2i: 1,200 queries, 40 targets; raw R@1 41.26, R@5 70.00, R@10 81.00",
        "  FAIL  skewness of N_k (k=5): 3.46; under random retrieval 0.00; excess +3.45   [warn from +1.00, fail "
        "from +3.00]",
        "  WARN  share of targets with N_k >= 2x the mean (hubs) (k=5): 10.0%; under random retrieval 5.0%; excess "
        "+5.0%   [warn from +5.0%, fail from +15.0%]",
        "  OK    share of targets in no query's top k (anti-hubs) (k=5): 0.0%; under random retrieval 0.0%; excess "
        "+0.0%   [warn from +10.0%, fail from +30.0%]",
        "  the 2 largest N_5 (mean 150; a hub has N_k >= 300), the top-1 retrievals each wins, and how many of them "
        "are wrong:",
        "    " + "test item 3 (img-3)".ljust(50) + " N_k=400   hub  top-1 wins=120   wrong=90",
        "    " + "test item 17".ljust(50) + " N_k=12         top-1 wins=0     wrong=0",
        "geometry of the test split: skipped (it needs more than 10 test items and texts)",
        "verdict: FAIL"]
    rep = diag_rep()
    rep.update(synthetic=False, flags=[], verdict="ok")
    rep["geometry"] = {"gap": 0.81234, "centroid_cos": 0.5, "matched_mean": 0.31, "matched_sd": 0.04,
                       "random_mean": 0.1, "img_participation_ratio": 7.66, "cap_participation_ratio": 19.24}
    lines = cli._diagnose_text(rep).split("\n")
    assert lines[:2] == ["tiny data", ""] and lines[2].startswith("t2i: ")
    assert lines[-2:] == [
        "geometry of the test split (info, no verdict): modality gap ||mean item - mean text|| 0.812, cosine of the "
        "two centres 0.500, a text and its item 0.310 (sd 0.040), unmatched pairs 0.100, effective dimension 7.7 "
        "(items) / 19.2 (texts)",
        "verdict: OK"]
    assert "skipped" not in cli._diagnose_text(rep)
    del rep["geometry"]
    rep["kind"] = "scores"
    assert cli._diagnose_text(rep).split("\n")[-2].startswith("  ")   # score matrices: no geometry line


def test_the_text_never_shows_a_negative_zero():
    rep = diag_rep()
    v = rep["directions"][0]["verdicts"]
    v["skewness"].update(value=-0.001, random=0.0, excess=-0.001)
    v["hub_share"].update(value=0.0, random=0.00001, excess=-0.00001)
    text = cli._diagnose_text(rep)
    assert "(k=5): 0.00; under random retrieval 0.00; excess +0.00" in text
    assert "(k=5): 0.0%; under random retrieval 0.0%; excess +0.0%" in text and "-0.0" not in text


def test_write_html_holds_the_text_and_one_histogram_per_direction(tmp_path, monkeypatch):
    import matplotlib.figure

    rep = diag_rep()
    second = json.loads(json.dumps(rep["directions"][0]))
    second.update(direction="i2t", k=3, verdict="ok", n_k_counts=[1, 4, 0, 2])
    rep["directions"].append(second)
    figs = []
    save = matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig",
                        lambda fig, *a, **kw: (figs.append(fig), save(fig, *a, **kw))[1])
    cli.write_html(rep, tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert page.startswith("<!doctype html><html><head><meta charset='utf-8'><title>hubnorm diagnose: "
                           "test:&lt;tiny&gt;</title></head><body><h1>hubnorm diagnose</h1><pre>")
    assert page.endswith("</body></html>\n")
    import html

    assert f"<pre>{html.escape(cli._diagnose_text(rep))}</pre>" in page
    assert '</pre><img alt="N_k histogram, t2i"' in page and '"><img alt="N_k histogram, i2t"' in page
    imgs = page.split('<img alt="')[1:]
    assert [i.split('"')[0] for i in imgs] == ["N_k histogram, t2i", "N_k histogram, i2t"]
    for img in imgs:
        png = base64.b64decode(img.split("data:image/png;base64,")[1].split('"')[0])
        assert png.startswith(b"\x89PNG")
    assert len(figs) == 2
    for fig, d in zip(figs, rep["directions"]):
        ax = fig.axes[0]
        assert ax.get_xlabel() == f"N_{d['k']} (times a target is in a query's top {d['k']})"
        assert ax.get_ylabel() == "targets" and ax.get_yscale() == "log"
        assert ax.get_title() == f"{d['direction']}: skewness 3.46 ({d['verdict']})"
        bars = ax.patches
        assert [b.get_height() for b in bars] == d["n_k_counts"]
        assert [b.get_x() + b.get_width() / 2 for b in bars] == list(range(len(d["n_k_counts"])))
        assert all(b.get_width() == 1.0 for b in bars)
        assert tuple(fig.get_size_inches()) == (6, 3.2)


def test_check_out_file_refuses_folders_missing_and_read_only_folders(tmp_path):
    cli._check_out_file(tmp_path / "r.html", "--html")   # fine: no error
    with pytest.raises(ValueError, match=r"^--html '.*' must name a file to write \(e\.g\. --html report\.html\)$"):
        cli._check_out_file(tmp_path, "--html")
    with pytest.raises(ValueError, match=r"^--out ' ' must name a file to write \(e\.g\. --out report\.html\)$"):
        cli._check_out_file(Path(" "), "--out")
    missing = tmp_path / "no" / "r.html"
    with pytest.raises(ValueError, match=rf"^--html {missing}: the folder {missing.parent} does not exist$"):
        cli._check_out_file(missing, "--html")
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        try:
            with pytest.raises(ValueError, match=rf"^--html {ro}/r\.html: the folder {ro} is not writable$"):
                cli._check_out_file(ro / "r.html", "--html")
        finally:
            ro.chmod(0o700)


# ============================================================================================== choose
def test_parse_grid_reads_methods_parameters_and_numbers():
    assert cli._parse_grid(None) == {} and cli._parse_grid([]) == {}
    got = cli._parse_grid(["nnn.k=8,16", "k=-2,0.5", "nnn.alpha=1", "a.b.tau=1e-2"])
    assert got == {"nnn": {"k": [8, 16], "alpha": [1]}, "*": {"k": [-2, 0.5]}, "a.b": {"tau": [0.01]}}
    assert [type(v) for v in got["nnn"]["k"] + got["*"]["k"]] == [int, int, int, float]
    for bad in ("nnn.k", "nnn.=3", "k=", ".="):
        with pytest.raises(ValueError, match=rf"^--grid '{bad}' must be \[METHOD\.\]PARAM=V1,V2,\.\.\., e\.g\. "
                                             r"--grid nnn\.k=8,16,32$"):
            cli._parse_grid([bad])
    with pytest.raises(ValueError, match=r"^--grid 'k=1,x': the values must be numbers separated by commas$"):
        cli._parse_grid(["k=1,x"])
    with pytest.raises(ValueError, match=r"^--grid nnn\.k is given twice: give each parameter's values once$"):
        cli._parse_grid(["nnn.k=1", "nnn.k=2"])
    assert cli._parse_grid(["nnn.k=1", "k=2"]) == {"nnn": {"k": [1]}, "*": {"k": [2]}}


def test_check_grids_names_the_method_or_the_parameter_at_fault():
    cli.check_grids({"nnn": {"k": [1]}, "*": {"tau": [0.1], "alpha": [1]}}, ["nnn", "is"])   # fine
    with pytest.raises(ValueError, match=r"^--grid is\.tau=\.\.\.: is is not among --methods nnn,sn: add it there or "
                                         r"drop the --grid$"):
        cli.check_grids({"is": {"tau": [0.1]}}, ["nnn", "sn"])
    with pytest.raises(ValueError, match=r"^--grid nnn\.tau=\.\.\.: nnn has no grid parameter 'tau'; the grids: "
                                         r"nnn: alpha, k; mp: none$"):
        cli.check_grids({"nnn": {"k": [1], "tau": [0.1]}}, ["nnn", "mp"])
    with pytest.raises(ValueError, match=r"^--grid nnn\.tau=\.\.\.: nnn has no grid parameter 'tau'"):
        cli.check_grids({"nnn": {"tau": [0.1]}}, ["nnn", "is"])   # is has a tau, nnn (named) has none
    with pytest.raises(ValueError, match=r"^--grid k=\.\.\.: any of is,sn has no grid parameter 'k'; the grids: "
                                         r"is: tau; sn: tau$"):
        cli.check_grids({"*": {"k": [2]}}, ["is", "sn"])


def task_sizes(queries=10, targets=4, query_bank=7, target_bank=3):
    sizes = {"queries": queries, "targets": targets, "query_bank": query_bank, "target_bank": target_bank}
    return SimpleNamespace(size=sizes.get)


def test_grid_is_the_paper_grid_with_the_overrides_within_the_task_limits():
    from hubnorm.registry import PAPER_GRIDS

    assert cli._grid("is", {}, task_sizes()) == PAPER_GRIDS["is"]
    # nnn's k is at most the query bank (7): the paper's 1, 2, 4 remain
    assert cli._grid("nnn", {}, task_sizes()) == {"alpha": PAPER_GRIDS["nnn"]["alpha"], "k": [1, 2, 4]}
    assert cli._grid("nnn", {}, task_sizes(query_bank=8))["k"] == [1, 2, 4, 8]
    assert cli._grid("csls", {}, task_sizes(targets=3, query_bank=100))["k"] == [1, 2]   # csls: targets too
    assert cli._grid("csls", {}, task_sizes(queries=3, targets=100, query_bank=5, target_bank=2))["k"] == [1, 2, 4]
    got = cli._grid("nnn", {"*": {"k": [3, 7, 8], "tau": [1.0]}, "nnn": {"alpha": [0.5]}}, task_sizes())
    assert got == {"alpha": [0.5], "k": [3, 7]}   # "*" applies where nnn has the parameter; 8 > 7 dropped
    assert cli._grid("nnn", {"*": {"k": [1]}, "nnn": {"k": [2]}}, task_sizes())["k"] == [2]   # the method's wins
    with pytest.raises(ValueError, match=r"^--grid is\.k=\.\.\.: is has no grid parameter 'k'; its grid: \['tau'\]$"):
        cli._grid("is", {"is": {"k": [1]}}, task_sizes())
    with pytest.raises(ValueError, match=r"^nnn: no k of the grid fits this task \(largest allowed: 7\)$"):
        cli._grid("nnn", {"nnn": {"k": [8, 16]}}, task_sizes())


def test_query_groups_join_the_queries_of_one_item_and_keep_lone_queries_apart():
    # 6 queries over 3 targets: first positives 2, 0, 2, -, 1, - (queries 3 and 5 have none)
    pos = SimpleNamespace(n_queries=6, n_targets=3, indptr=np.array([0, 2, 3, 4, 4, 5, 5]),
                          indices=np.array([2, 1, 0, 2, 1]))
    assert cli.query_groups(pos).tolist() == [2, 0, 2, 3, 1, 4]   # the lone queries after every target
    assert cli.query_groups(hn.Positives.from_labels(np.array([1, 1, 0]), 2)).tolist() == [1, 1, 0]


def test_split_halves_is_a_seeded_half_of_the_groups():
    groups = np.array([0, 0, 1, 2, 2, 2, 3, 4, 4])
    for seed in (0, 1, 7):
        first = set(np.random.default_rng(seed).permutation(5)[:2].tolist())
        sel, est = cli.split_halves(groups, seed)
        assert sel.tolist() == [i for i, g in enumerate(groups) if g in first]
        assert est.tolist() == [i for i, g in enumerate(groups) if g not in first]
    assert cli.split_halves(groups)[0].tolist() == cli.split_halves(groups, 0)[0].tolist()
    sel, est = cli.split_halves(np.array([], dtype=np.int64))
    assert sel.size == est.size == 0
    sel, est = cli.split_halves(np.array([0]))
    assert sel.tolist() == [] and est.tolist() == [0]


def slow_paired_ci(raw, new, groups, n_boot=1000, seed=0):
    """The percentile bootstrap of the R@1 difference over resampled groups, one resample at a time."""
    labels = sorted(set(groups.tolist()))
    members = {g: [i for i in range(len(groups)) if groups[i] == g] for g in labels}
    draws = np.random.default_rng(seed).integers(0, len(labels), (n_boot, len(labels)))
    boots = []
    for row in draws:
        idx = [i for j in row for i in members[labels[j]]]
        boots.append(100.0 * (sum(float(new[i] == 0) for i in idx) - sum(float(raw[i] == 0) for i in idx)) / len(idx))
    return tuple(float(x) for x in np.quantile(np.array(boots), [0.025, 0.975]))


def test_paired_ci_is_the_group_bootstrap_of_the_r1_difference():
    rng = np.random.default_rng(5)
    groups = np.array([3, 3, 5, 8, 8, 8, 9, 11, 11, 12])
    raw, new = rng.integers(0, 3, 10), rng.integers(0, 3, 10)
    got = cli._paired_ci(raw, new, groups)
    assert got == pytest.approx(slow_paired_ci(raw, new, groups), abs=1e-12)
    assert cli._paired_ci(raw, new, groups, n_boot=200, seed=4) == pytest.approx(
        slow_paired_ci(raw, new, groups, n_boot=200, seed=4), abs=1e-12)
    assert got != cli._paired_ci(raw, new, groups, seed=1)
    many = np.repeat(np.arange(60), np.arange(60) % 5 + 1)   # 60 groups of 1 to 5 queries: a near-continuous CI
    raw2, new2 = rng.integers(0, 2, len(many)), rng.integers(0, 2, len(many))
    assert cli._paired_ci(raw2, new2, many) == pytest.approx(slow_paired_ci(raw2, new2, many), abs=1e-12)
    assert cli._paired_ci(raw2, new2, many) != pytest.approx(slow_paired_ci(raw2, new2, many, n_boot=1001), abs=1e-12)
    assert cli._paired_ci(raw, raw, groups) == (0.0, 0.0)
    assert cli._paired_ci(np.ones(10, int), np.zeros(10, int), groups) == (100.0, 100.0)
    assert all(type(x) is float for x in got)


class FakeBar:
    def __init__(self):
        self.calls = []

    def __call__(self, iterable, *, desc="", disable=False, **kw):
        self.calls.append((desc, disable))
        return iterable


def test_choose_labelled_chooses_on_one_half_and_measures_on_the_other(monkeypatch):
    import hubnorm.progress

    bar = FakeBar()
    monkeypatch.setattr(hubnorm.progress, "progress", bar)
    d = direction(n_items=16, per=3, noise=1.5, bank=40, seed=1)
    grids = {"is": {"tau": [0.01, 0.05]}, "nnn": {"k": [2, 8], "alpha": [0.5]}}
    rep = cli.choose_labelled(d, ["nnn", "is"], grids, seed=2, progress=False)
    assert bar.calls == [("choose t2i", True)]
    cli.choose_labelled(d, ["is"], grids, seed=2)
    assert bar.calls[-1] == ("choose t2i", False)
    groups = np.repeat(np.arange(16), 3)
    sel, est = cli.split_halves(groups, 2)
    raw = dense_ranks(dense(d), d.task.positives)
    points = [("nnn", {"k": 2, "alpha": 0.5}), ("nnn", {"k": 8, "alpha": 0.5}), ("is", {"tau": 0.01}),
              ("is", {"tau": 0.05})]
    ranks = []
    for m, p in points:
        norm = d.task.fit(hn.make_normalizer(m, **p))
        s = dense(d) + norm.offsets[None, :]   # offset methods: S + h
        ranks.append(dense_ranks(s, d.task.positives))
    r1 = lambda r, idx: 100.0 * np.mean(r[idx] == 0)  # noqa: E731
    assert [(r["method"], r["params"]) for r in rep["table"]] == points
    assert [r["R@1 selection half"] for r in rep["table"]] == pytest.approx([r1(r, sel) for r in ranks])
    best = max(range(4), key=lambda i: r1(ranks[i], sel))
    assert (rep["best_method"], rep["best_params"]) == points[best]
    keep = r1(ranks[best], sel) <= r1(raw, sel)
    chosen = raw if keep else ranks[best]
    assert (rep["method"], rep["params"]) == (("raw", {}) if keep else points[best])
    assert rep["direction"] == "t2i" and rep["mode"] == "labelled"
    assert rep["raw R@1 selection half"] == pytest.approx(r1(raw, sel))
    assert rep["raw R@1 estimation half"] == pytest.approx(r1(raw, est))
    assert (rep["selection queries"], rep["estimation queries"]) == (len(sel), len(est)) == (24, 24)
    assert rep["expected gain R@1"] == pytest.approx(r1(chosen, est) - r1(raw, est))
    assert rep["best point's gain on the estimation half"] == pytest.approx(r1(ranks[best], est) - r1(raw, est))
    assert rep["expected gain 95% CI"] == pytest.approx(list(slow_paired_ci(raw[est], chosen[est], groups[est],
                                                                            seed=2)), abs=1e-12)
    assert not keep and rep["expected gain R@1"] > 0 and best == 0   # this data: nnn helps (k=2 ties k=8: the first)
    # no grid (mp has none): one point with no parameters
    rep = cli.choose_labelled(d, ["mp"], {}, progress=False)
    assert [(r["method"], r["params"]) for r in rep["table"]] == [("mp", {})]
    assert set(rep["table"][0]) == {"method", "params", "R@1 selection half"}


def test_choose_labelled_keeps_raw_on_a_tie_and_refuses_too_few_queries(monkeypatch):
    # every query equal to its target: raw R@1 is 100, a method can only tie it
    rng = np.random.default_rng(0)
    targets, bank = unit(rng.standard_normal((6, 5))), unit(rng.standard_normal((12, 5)))
    task = RetrievalTask(scores=score_matrices(targets, targets, bank),
                         positives=hn.Positives.from_labels(np.arange(6), 6), direction="t2i")
    d = cli.Direction("t2i", task, targets, targets, bank)
    rep = cli.choose_labelled(d, ["is", "sn"], {"*": {"tau": [0.05]}}, progress=False)
    assert rep["method"] == "raw" and rep["params"] == {} and rep["best_method"] == "is"   # the first of equals
    assert rep["best_params"] == {"tau": 0.05} and rep["expected gain R@1"] == 0.0
    few = RetrievalTask(scores=score_matrices(targets[:3], targets[:3], bank),
                        positives=hn.Positives.from_labels(np.arange(3), 3), direction="i2t")
    with pytest.raises(ValueError, match=r"^i2t: 3 test queries are too few to choose on one half and measure on the "
                                         r"other$"):
        cli.choose_labelled(cli.Direction("i2t", few), ["is"], {}, progress=False)
    with pytest.raises(ValueError, match="too few"):   # 2 queries: one group on each side
        cli.choose_labelled(cli.Direction("i2t", RetrievalTask(scores=score_matrices(targets[:2], targets[:2], bank),
                                                               positives=hn.Positives.from_labels(np.arange(2), 2),
                                                               direction="i2t")), ["is"], {}, progress=False)


def fake_label_free(monkeypatch, values):
    """label_free_select / predict_benefit replaced: per method (best value, raw value, helps, best params)."""
    import hubnorm.label_free as lf

    calls = []

    def select(m, targets, query_bank, *, queries, target_bank, grid):
        calls.append((m, targets, query_bank, queries, target_bank, grid))
        best, raw, helps, params = values[m]
        return SimpleNamespace(best_value=best, raw_value=raw, best_params=params, helps=helps)

    monkeypatch.setattr(lf, "label_free_select", select)
    monkeypatch.setattr(lf, "predict_benefit", lambda res: res.helps)
    return calls


def test_choose_label_free_takes_the_most_mutual_method_when_it_is_predicted_to_help(monkeypatch):
    d = direction()
    calls = fake_label_free(monkeypatch, {"is": (np.float32(0.5), 0.25, 1, {"tau": 0.01}),
                                          "sn": (0.75, 0.5, True, {"tau": 0.02}),
                                          "nnn": (0.75, 0.5, False, {"k": 1})})
    rep = cli.choose_label_free(d, ["is", "sn", "nnn"], {"sn": {"tau": [0.02]}})
    assert [c[0] for c in calls] == ["is", "sn", "nnn"]
    m, targets, qbank, queries, tbank, grid = calls[1]
    assert targets is d.targets and qbank is d.query_bank and queries is d.queries and tbank is d.target_bank
    assert grid == {"tau": [0.02]} and calls[0][5] == cli._grid("is", {}, d.task)
    assert rep["table"] == [
        {"method": "is", "params": {"tau": 0.01}, "criterion": 0.5, "raw criterion": 0.25, "predicted to help": True},
        {"method": "sn", "params": {"tau": 0.02}, "criterion": 0.75, "raw criterion": 0.5, "predicted to help": True},
        {"method": "nnn", "params": {"k": 1}, "criterion": 0.75, "raw criterion": 0.5, "predicted to help": False}]
    assert type(rep["table"][0]["criterion"]) is float and rep["table"][0]["predicted to help"] is True
    assert rep["direction"] == "t2i" and rep["mode"] == "label-free (criterion 'mutual')"
    assert (rep["method"], rep["params"], rep["best_method"], rep["best_params"]) == \
        ("sn", {"tau": 0.02}, "sn", {"tau": 0.02})   # the first of the equal best criteria
    assert rep["predicted to help"] is True
    assert rep["track record"] == cli.LABEL_FREE_TRACK_RECORD and rep["track record"] is not cli.LABEL_FREE_TRACK_RECORD


def test_choose_label_free_keeps_raw_when_no_help_is_predicted_and_refuses_scores_only(monkeypatch):
    fake_label_free(monkeypatch, {"is": (0.5, 0.4, False, {"tau": 0.01}), "sn": (0.25, 0.2, True, {"tau": 0.02})})
    rep = cli.choose_label_free(direction(), ["is", "sn"], {})
    assert (rep["method"], rep["params"], rep["best_method"], rep["best_params"]) == \
        ("raw", {}, "is", {"tau": 0.01}) and rep["predicted to help"] is False
    scores_only = cli.Direction("i2t", direction().task)
    with pytest.raises(ValueError, match=r"^i2t: a label-free choice reads the embeddings \(a sims: folder holds "
                                         r"scores only\); run choose without --label-free \(a held-out choice from "
                                         r"the folder's positives\)$"):
        cli.choose_label_free(scores_only, ["is"], {})
    d = direction()
    d.query_bank = None
    with pytest.raises(ValueError, match=r"^t2i: the source has no training split, so no reference bank to fit a "
                                         r"method with$"):
        cli.choose_label_free(d, ["is"], {})


def test_choose_checks_the_methods_and_runs_every_direction(monkeypatch):
    seen = []
    monkeypatch.setattr(cli, "choose_labelled", lambda d, methods, grids, *, seed, progress:
                        seen.append(("labelled", d.name, methods, grids, seed, progress)) or {"direction": d.name})
    monkeypatch.setattr(cli, "choose_label_free", lambda d, methods, grids:
                        seen.append(("free", d.name, methods, grids)) or {"direction": d.name, "free": True})
    src = source(synthetic=True)
    rep = cli.choose(src, methods=["NNN", "Is"], seed=4, progress=False)
    assert seen == [("labelled", "t2i", ["nnn", "is"], {}, 4, False), ("labelled", "i2t", ["nnn", "is"], {}, 4, False)]
    assert rep == {"command": "choose", "hubnorm": hn.__version__, "source": "test:tiny", "data": "tiny data",
                   "synthetic": True, "kind": "embeddings", "seed": 4,
                   "directions": [{"direction": "t2i"}, {"direction": "i2t"}]}
    seen.clear()
    rep = cli.choose(src, grids={"is": {"tau": [0.1]}}, label_free=True)
    assert seen == [("free", "t2i", list(cli.DEFAULT_METHODS), {"is": {"tau": [0.1]}}),
                    ("free", "i2t", list(cli.DEFAULT_METHODS), {"is": {"tau": [0.1]}})]
    assert rep["seed"] == 0 and rep["directions"][0]["free"]
    seen.clear()
    cli.choose(src)
    assert seen[0][4:] == (0, True)
    from hubnorm.registry import NORMALIZERS

    seen.clear()
    avail = re.escape(str(sorted(set(NORMALIZERS) - {"raw"})))
    for bad in ("bogus", "raw", "RAW"):
        with pytest.raises(ValueError, match=rf"^--methods: unknown method '{bad.lower()}'; available: {avail}$"):
            cli.choose(src, methods=["is", bad])
    with pytest.raises(ValueError, match=r"^--grid sn\.tau=\.\.\.: sn is not among --methods is"):
        cli.choose(src, methods=["is"], grids={"sn": {"tau": [0.1]}})
    assert seen == []   # refused before any direction is run
    assert cli.raw_name() == "raw"


def test_fmt_params():
    assert cli._fmt_params({}) == "-"
    assert cli._fmt_params({"k": 16, "alpha": 0.75, "tau": 1e-7, "impl": "auto"}) == \
        "k=16, alpha=0.75, tau=1e-07, impl=auto"


def test_the_text_of_a_choice_in_each_of_its_four_forms():
    labelled = {"direction": "t2i", "mode": "labelled", "method": "nnn", "params": {"k": 16, "alpha": 0.75},
                "best_method": "nnn", "best_params": {"k": 16, "alpha": 0.75}, "selection queries": 1250,
                "estimation queries": 1251, "expected gain R@1": 2.345, "expected gain 95% CI": [-0.5, 4.256],
                "raw R@1 estimation half": 40.125, "best point's gain on the estimation half": 2.345}
    kept = dict(labelled, direction="i2t", method="raw", params={}, best_method="is", best_params={"tau": 0.05},
                **{"best point's gain on the estimation half": -1.0})
    free = {"direction": "t2i", "mode": "label-free (criterion 'mutual')", "method": "is", "params": {"tau": 0.01},
            "predicted to help": True, "track record": dict(cli.LABEL_FREE_TRACK_RECORD)}
    free_kept = dict(free, direction="i2t", method="raw", params={}, **{"predicted to help": False})
    rep = {"data": "tiny data", "synthetic": False, "directions": [labelled, kept]}
    assert cli._choose_text(rep).split("\n") == [
        "tiny data", "",
        "t2i: choose nnn (k=16, alpha=0.75)   [labelled]",
        "  expected R@1 gain over raw +2.35 points, 95% CI [-0.50, +4.26] (chosen on 1,250 test queries, measured on "
        "the other 1,251; raw R@1 there 40.12)",
        "i2t: keep the raw scores   [labelled]",
        "  no grid point beat the raw scores on the 1,250 test queries of the choice (best: is tau=0.05, -1.00 R@1 "
        "points on the other 1,251)"]
    track = ("  track record of this choice on real sets (90 choices): the predictor was right 78/90, the choice "
             "raised R@1 66/90, its R@1 minus a labelled choice's +0.96 on average (from -1.18 to +2.56); no CI "
             "without labels")
    rep = {"data": "tiny data", "synthetic": True, "directions": [free, free_kept]}
    assert cli._choose_text(rep).split("\n") == [
        "tiny data  [SYNTHETIC]", "",
        "t2i: choose is (tau=0.01)   [label-free (criterion 'mutual')]",
        "  predicted to help: yes", track,
        "i2t: keep the raw scores   [label-free (criterion 'mutual')]",
        "  predicted to help: no: keep the raw scores", track]


# ============================================================================================== export / check
def test_make_offset_normalizer_checks_the_method_and_its_parameters():
    norm = cli.make_offset_normalizer("NNN", {"k": 4, "alpha": 0.5})
    from hubnorm.registry import NORMALIZERS

    assert type(norm) is NORMALIZERS["nnn"] and (norm.k, norm.alpha) == (4, 0.5)

    with pytest.raises(ValueError, match=rf"^--method 'bogus' is unknown; available: "
                                         rf"{re.escape(str(sorted(NORMALIZERS)))}$"):
        cli.make_offset_normalizer("Bogus", {})
    known = ", ".join(NORMALIZERS["is"]._param_names())
    with pytest.raises(ValueError, match=rf"^--param a: is has no parameter 'a'; its parameters: {known}$"):
        cli.make_offset_normalizer("is", {"tau": 0.1, "z": 1, "a": 2})
    mp = type(hn.make_normalizer("mp")).__name__
    with pytest.raises(ValueError, match=rf"^--method mp: {mp} normalises each query's row, it has no "
                                         r"per-target offsets an index could serve; export an offset method \(nnn, dn, "
                                         r"is, csls, dualis, sn, dbsn\)$"):
        cli.make_offset_normalizer("mp", {})
    with pytest.raises(ValueError, match="tau"):   # the method's own parameter check
        cli.make_offset_normalizer("is", {"tau": -1.0})


def test_fit_direction_names_the_direction_and_param_when_the_fit_fails():
    d = direction(bank=6)
    norm = cli.fit_direction(d, "nnn", {"k": 2})
    ref = hn.make_normalizer("nnn", k=2)
    d.task.fit(ref)
    assert np.array_equal(norm.offsets, ref.offsets)
    with pytest.raises(ValueError, match=r"^t2i: .*k.* \(set the method's parameters with --param NAME=VALUE\)$") as e:
        cli.fit_direction(d, "nnn", {"k": 7})   # more neighbours than the 6 bank queries
    assert e.value.__cause__ is None and e.value.__suppress_context__


def test_json_params_keeps_what_json_holds():
    assert cli._json_params({"a": None, "b": True, "c": 3, "d": 0.5, "e": "x", "f": [1], "g": object(),
                             "h": np.float32(1)}) == {"a": None, "b": True, "c": 3, "d": 0.5, "e": "x"}


def sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_export_writes_offsets_target_vectors_and_a_manifest_of_their_hashes(tmp_path):
    faiss = pytest.importorskip("faiss")
    t2i, i2t = direction("t2i"), direction("i2t", seed=1, n_items=5)
    src = source(t2i, i2t)
    out = tmp_path / "exp"
    man = cli.export(src, out, method="IS", params={"tau": 0.02}, faiss_index=True)
    assert json.loads((out / "manifest.json").read_text()) == man
    assert (out / "manifest.json").read_text() == json.dumps(man, indent=2, sort_keys=True) + "\n"
    params = hn.make_normalizer("is", tau=0.02).get_params()
    assert {k: man[k] for k in man if k != "directions"} == {
        "format": "hubnorm-export/1", "hubnorm": hn.__version__, "source": "test:tiny", "data": "tiny data",
        "synthetic": False, "kind": "embeddings", "method": "is",
        "params": {k: v for k, v in params.items() if v is None or isinstance(v, (bool, int, float, str))}}
    assert list(man["directions"]) == ["t2i", "i2t"]
    for d in (t2i, i2t):
        ref = hn.make_normalizer("is", tau=0.02)
        d.task.fit(ref)
        h = ref.offsets.astype(np.float64)
        e = man["directions"][d.name]
        assert np.array_equal(np.load(out / d.name / "offsets.npy"), h)
        aug = np.load(out / d.name / "augmented_targets.npy")
        assert aug.dtype == np.float32 and np.array_equal(aug, np.c_[d.targets, h].astype(np.float32))
        assert e["n_targets"] == len(d.targets) and e["bank"] == d.bank
        assert e["offsets_sha256"] == cli.digest(h) and e["targets_sha256"] == cli.digest(d.targets)
        assert e["query_side"] == "append a 1 to each unit-norm query: [q, 1]; inner product = q . t + h"
        assert e["files"]["offsets"] == {"path": f"{d.name}/offsets.npy", "sha256": sha(out / d.name / "offsets.npy"),
                                         "shape": [len(h)], "dtype": "<f8"}
        assert e["files"]["augmented_targets"] == {
            "path": f"{d.name}/augmented_targets.npy", "sha256": sha(out / d.name / "augmented_targets.npy"),
            "shape": [len(h), 7], "dtype": "<f4"}
        assert e["files"]["faiss_index"] == {"path": f"{d.name}/index.faiss",
                                             "sha256": sha(out / d.name / "index.faiss"),
                                             "kind": "IndexFlatIP", "ntotal": len(h)}
        index = faiss.read_index(str(out / d.name / "index.faiss"))
        assert index.d == 7 and index.metric_type == faiss.METRIC_INNER_PRODUCT
        assert np.array_equal(index.reconstruct_n(0, index.ntotal), aug)
    from hubnorm.data.cache import umask

    assert (out.stat().st_mode & 0o777) == (0o777 & ~umask())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp"]   # no temporary folder left beside it
    assert cli.check(out, src) == []


def test_export_of_score_matrices_writes_offsets_only(tmp_path):
    d = direction()
    scores = cli.Direction("t2i", d.task, bank={"kind": "score matrices", "matrices": {}})
    man = cli.export(source(scores, kind="scores"), tmp_path / "e", method="nnn", params={"k": 2})
    e = man["directions"]["t2i"]
    assert set(e) == {"n_targets", "bank", "offsets_sha256", "files"} and set(e["files"]) == {"offsets"}
    assert sorted(p.relative_to(tmp_path / "e").as_posix() for p in (tmp_path / "e").rglob("*")) == \
        ["manifest.json", "t2i", "t2i/offsets.npy"]
    with pytest.raises(ValueError, match=r"^--faiss needs the target embeddings; a sims: folder holds scores only "
                                         r"\(its export is the offsets: add them to the scores of the same targets\)$"):
        cli.export(source(scores, kind="scores"), tmp_path / "f", method="nnn", params={}, faiss_index=True)
    with pytest.raises(ValueError, match=r"^the export .* holds offsets only \(from score matrices\): add them to the "
                                         r"scores of the same targets instead of searching an index$"):
        cli.ExportedIndex(tmp_path / "e", "t2i")


def test_export_refuses_what_it_would_overwrite_and_replaces_an_export_whole_with_force(tmp_path, monkeypatch):
    src = source()
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=rf"^--out {tmp_path}/file is a file: name a folder \(it is created\)$"):
        cli.export(src, tmp_path / "file", method="is", params={})
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.txt").write_text("mine")
    with pytest.raises(ValueError, match=rf"^--out {other} exists and holds files that are not a hubnorm export: "
                                         r"choose an empty or new folder$"):
        cli.export(src, other, method="is", params={})
    with pytest.raises(ValueError, match=rf"^--out {tmp_path}/no/x: its parent folder {tmp_path}/no does not exist$"):
        cli.export(src, tmp_path / "no" / "x", method="is", params={})
    empty = tmp_path / "empty"
    empty.mkdir()
    cli.export(src, empty, method="is", params={"tau": 0.01}, faiss_index=True)   # an empty folder is fine
    with pytest.raises(ValueError, match=rf"^--out {empty} holds an export already: pass --force to replace it, or "
                                         r"choose another folder$"):
        cli.export(src, empty, method="is", params={})
    before = {p: p.read_bytes() for p in empty.rglob("*") if p.is_file()}
    calls = []

    def failing(out, rel, arr):   # the second direction's write fails
        calls.append(rel)
        if len(calls) == 3:
            raise OSError("disk full")
        return real(out, rel, arr)

    real = cli._write_array
    monkeypatch.setattr(cli, "_write_array", failing)
    with pytest.raises(OSError, match="disk full"):
        cli.export(src, empty, method="is", params={}, force=True)
    monkeypatch.setattr(cli, "_write_array", real)
    assert {p: p.read_bytes() for p in empty.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "file", "other"]
    man = cli.export(src, empty, method="is", params={}, force=True)
    assert not list(empty.rglob("index.faiss")) and sorted(p.name for p in tmp_path.iterdir()) == \
        ["empty", "file", "other"]
    assert man["params"]["tau"] == hn.make_normalizer("is").tau
    assert cli.check(empty, src) == []


def test_write_faiss_without_faiss_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)
    with pytest.raises(ValueError, match=r"^--faiss needs faiss \(pip install 'hubnorm\[faiss\]'\)$") as e:
        cli._write_faiss(tmp_path, "x/index.faiss", np.zeros((2, 3), np.float32))
    assert e.value.__suppress_context__


def test_read_manifest_refuses_what_is_not_an_export(tmp_path):
    with pytest.raises(ValueError, match=rf"^{tmp_path}/none does not exist or is not a folder: name the folder "
                                         r"hubnorm export wrote$"):
        cli.load_export(tmp_path / "none")
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="does not exist or is not a folder"):
        cli.check(tmp_path / "f")
    with pytest.raises(ValueError, match=rf"^{tmp_path} has no manifest\.json: not a hubnorm export \(write one with "
                                         r"hubnorm export\)$"):
        cli.check(tmp_path)
    (tmp_path / "manifest.json").write_text("{oops")
    with pytest.raises(ValueError, match=rf"^{tmp_path}/manifest\.json is not valid JSON \(Expecting property name "
                                         r"enclosed in double quotes: line 1 column 2 \(char 1\)\): export again$"):
        cli.check(tmp_path)
    (tmp_path / "manifest.json").write_text('{"format": "hubnorm-export/0"}')
    with pytest.raises(ValueError, match=rf"^{tmp_path}/manifest\.json: format 'hubnorm-export/0'; this hubnorm "
                                         r"reads 'hubnorm-export/1'$"):
        cli.check(tmp_path)
    (tmp_path / "manifest.json").write_text('["hubnorm-export/1"]')
    with pytest.raises(ValueError, match=r"manifest\.json: format None; this hubnorm reads 'hubnorm-export/1'$"):
        cli.check(tmp_path)


def test_check_and_load_export_report_missing_changed_and_unlisted_files(tmp_path):
    src = source()
    out = tmp_path / "exp"
    cli.export(src, out, method="is", params={})
    back = cli.load_export(out)
    assert set(back["arrays"]) == {"t2i", "i2t"} and set(back["arrays"]["t2i"]) == {"offsets", "augmented_targets"}
    assert back["format"] == cli.EXPORT_FORMAT
    (out / "i2t" / "offsets.npy").unlink()
    aug = out / "t2i" / "augmented_targets.npy"
    aug.write_bytes(aug.read_bytes()[:-4] + b"\0\0\0\0")
    (out / "t2i" / "sub").mkdir()
    (out / "t2i" / "sub" / "extra.npy").write_bytes(b"x")
    (out / "notes.txt").write_text("outside the directions' folders: not checked")
    assert cli.check(out) == [   # the manifest's directions in its (sorted) order
        f"{out}/i2t/offsets.npy (listed in the manifest) is missing",
        f"{aug} does not match its sha256 in the manifest: the file changed after the export",
        f"{out}/t2i/sub/extra.npy is not listed in the manifest: not part of this export"]
    with pytest.raises(ValueError, match=rf"^{out}/i2t/offsets\.npy \(listed in the manifest\) is missing; "
                                         rf"{re.escape(str(aug))} does not match its sha256 in the manifest: the "
                                         r"file changed after the export: export again$"):
        cli.load_export(out)


def test_check_against_the_source_names_each_change(tmp_path):
    t2i, i2t = direction("t2i"), direction("i2t", seed=1)
    out = tmp_path / "exp"
    cli.export(source(t2i, i2t), out, method="is", params={"tau": 0.02})
    assert cli.check(out, source(t2i, i2t)) == []
    moved = direction("t2i")
    moved.bank = dict(moved.bank, query_bank={"rows": 20, "sha256": "f" * 64})
    moved.targets = moved.targets[::-1].copy()
    other = direction("v2t", seed=2)
    then = cli._short(t2i.bank)
    assert cli.check(out, source(moved, other)) == [
        "i2t: the source has no direction i2t (it has ['t2i', 'v2t'])",
        f"t2i: the reference bank changed since the export (then: {then}; now: {cli._short(moved.bank)})",
        "t2i: the targets (gallery) changed since the export"]
    refit = direction("t2i", seed=4)   # another bank: other offsets; the bank and targets as exported
    refit.bank, refit.targets = t2i.bank, t2i.targets
    assert cli.check(out, source(refit, i2t)) == ["t2i: the offsets refitted now differ from the exported ones"]
    scores = cli.Direction("i2t", i2t.task, bank=i2t.bank)   # no targets to compare: the bank and offsets only
    assert cli.check(out, source(t2i, scores)) == []


def test_the_one_line_form_of_a_bank_with_missing_parts():
    assert cli._short({"query_bank": {"sha256": "abcdef0123456789ff"}, "target_bank": {"rows": 3, "sha256": 12}}) == \
        "query_bank None rows sha256 abcdef012345, target_bank 3 rows sha256 12"
    assert cli._short({"matrices": {"b": {"sha256": None}, "a": {"shape": [2, 3], "sha256": "0123456789abcdef"}}}) == \
        "a 2x3 sha256 0123456789ab, b  sha256 None"
    assert cli._short({"z": 1, "matrices": "none"}) == '{"matrices": "none", "z": 1}'
    assert cli._short({}) == "{}"


def test_exported_index_serves_the_top_k_of_s_plus_h_in_row_blocks(tmp_path):
    rng = np.random.default_rng(9)
    d = direction(n_items=30, per=1)
    out = tmp_path / "exp"
    cli.export(source(d), out, method="is", params={"tau": 0.05})
    served = cli.ExportedIndex(out, "t2i")
    assert served.index is None and served.direction == "t2i" and served.manifest["method"] == "is"
    aug = np.load(out / "t2i" / "augmented_targets.npy")
    assert np.array_equal(served.augmented, aug)
    q = unit(rng.standard_normal((2100, 6)))   # three blocks of 1024 rows
    scores, idx = served.search(q, 4)
    full = np.c_[q, np.ones(len(q))].astype(np.float32).astype(np.float64) @ aug.astype(np.float64).T
    want = np.argsort(-full, axis=1, kind="stable")[:, :4]
    assert idx.shape == scores.shape == (2100, 4) and np.mean(idx == want) > 0.999
    np.testing.assert_allclose(scores, np.take_along_axis(full, idx, 1), atol=1e-5)
    s1, i1 = served.search(q[1500:1501], 4)   # one row alone: the same as in its block
    assert np.array_equal(i1, idx[1500:1501]) and np.allclose(s1, scores[1500:1501], atol=1e-6)
    assert served.search(q[:3], 30)[1].shape == (3, 30)
    with pytest.raises(ValueError, match=r"^k=31 is larger than the number of targets \(30\): use k <= 30$"):
        served.search(q[:3], 31)
    with pytest.raises(ValueError, match=r"^queries has dimension 5 but the other embeddings have 6"):
        served.search(q[:3, :5], 3)
    with pytest.raises(ValueError, match=rf"^direction 'i2t' is not in the export {out} \(it has \['t2i'\]\)$"):
        cli.ExportedIndex(out, "i2t")
    pytest.importorskip("faiss")
    cli.export(source(d), out, method="is", params={"tau": 0.05}, faiss_index=True, force=True)
    fast = cli.ExportedIndex(out, "t2i")
    assert fast.index is not None and fast.index.ntotal == 30
    f_scores, f_idx = fast.search(q[:50], 4)
    assert np.mean(f_idx == idx[:50]) > 0.99
    np.testing.assert_allclose(f_scores, scores[:50], atol=1e-5)


# ============================================================================================== loading a source
def fake_media(monkeypatch, data, *, directions=("t2i", "i2t"), meta=None):
    """hubnorm.media.load_media replaced: records its arguments, returns tiny tasks with ``data``."""
    import hubnorm.media

    calls = []
    tasks = {name: SimpleNamespace(name=name, meta=dict(meta or {})) for name in directions}

    def load(source, *, seed, n_train, source_kwargs):
        calls.append((source, seed, n_train, source_kwargs))
        return SimpleNamespace(directions=directions, tasks=tasks, data=data, synthetic=True, label="fake label")

    monkeypatch.setattr(hubnorm.media, "load_media", load)
    return calls, tasks


def media_data(rng, texts=None, banks=True):
    return SimpleNamespace(captions=rng.standard_normal((6, 3)), items=rng.standard_normal((3, 3)),
                           bank_captions=rng.standard_normal((8, 3)) if banks else None,
                           bank_items=rng.standard_normal((4, 3)) if banks else None, item_ids=["a", "b", "c"],
                           caption_texts=texts)


def test_open_source_keeps_each_direction_with_its_embeddings_banks_and_names(monkeypatch):
    rng = np.random.default_rng(0)
    texts = ["short", "x" * 40, "y" * 41, "z" * 60, "", "w"]
    data = media_data(rng, texts)
    calls, tasks = fake_media(monkeypatch, data)
    src = cli.open_source("local:/some/folder", options={"test_fraction": 0.5}, seed=3)
    assert calls == [("local:/some/folder", 3, None, {"test_fraction": 0.5, "seed": 3, "val": False})]
    assert (src.source, src.kind, src.synthetic, src.label, src.flags, src.data) == \
        ("local:/some/folder", "embeddings", True, "fake label", [], data)
    assert list(src.directions) == ["t2i", "i2t"]
    t2i, i2t = src.directions["t2i"], src.directions["i2t"]
    assert (t2i.name, t2i.task) == ("t2i", tasks["t2i"]) and (i2t.name, i2t.task) == ("i2t", tasks["i2t"])
    assert t2i.queries is data.captions and t2i.targets is data.items
    assert t2i.query_bank is data.bank_captions and t2i.target_bank is data.bank_items and t2i.target_ids == ["a", "b",
                                                                                                               "c"]
    assert i2t.queries is data.items and i2t.targets is data.captions
    assert i2t.query_bank is data.bank_items and i2t.target_bank is data.bank_captions
    assert i2t.target_ids == ["short", "x" * 40, "y" * 39 + "…", "z" * 39 + "…", "", "w"]
    assert t2i.bank == {"kind": "embeddings", "split": "train",
                        "query_bank": {"rows": 8, "sha256": cli.digest(data.bank_captions)},
                        "target_bank": {"rows": 4, "sha256": cli.digest(data.bank_items)}}
    assert i2t.bank["query_bank"] == {"rows": 4, "sha256": cli.digest(data.bank_items)}
    assert type(t2i.bank["query_bank"]["rows"]) is int
    # the caller's seed / val win over the defaults; one direction asked
    calls.clear()
    src = cli.open_source("real:rel", directions=["i2t"], options={"seed": 9, "val": True})
    assert calls == [("real:rel", 0, None, {"seed": 9, "val": True})] and list(src.directions) == ["i2t"]
    calls.clear()
    cli.open_source("cache:d:m:p")   # neither a folder nor a release: no split options
    assert calls == [("cache:d:m:p", 0, None, None)]


def test_open_source_without_banks_or_texts(monkeypatch):
    data = media_data(np.random.default_rng(1), texts=None, banks=False)
    fake_media(monkeypatch, data)
    src = cli.open_source("synthetic:flickr30k", options={"n_test_images": 5}, seed=2)
    assert src.directions["i2t"].target_ids is None
    assert src.directions["t2i"].bank == {"kind": "embeddings", "split": None, "query_bank": None, "target_bank": None}


def test_open_source_of_score_matrices_reads_the_banks_and_the_input_flags(monkeypatch):
    calls, tasks = fake_media(monkeypatch, None, meta={"flags": ["rows look unnormalised"]})
    monkeypatch.setattr(cli, "_matrix_bank", lambda task: {"kind": "score matrices", "of": task.name})
    src = cli.open_source("sims:/f", directions=["i2t"], seed=4)
    assert calls == [("sims:/f", 4, None, None)]
    assert (src.kind, src.flags, src.data) == ("scores", ["rows look unnormalised"], None)
    d = src.directions["i2t"]
    assert (d.name, d.task, d.queries, d.targets, d.target_ids) == ("i2t", tasks["i2t"], None, None, None)
    assert d.bank == {"kind": "score matrices", "of": "i2t"}
    fake_media(monkeypatch, None)
    assert cli.open_source("sims:/f").flags == []


def test_open_source_refuses_options_a_source_does_not_take(monkeypatch):
    calls, _ = fake_media(monkeypatch, media_data(np.random.default_rng(2)))
    for bad in ("flickr", 5, None):
        with pytest.raises(ValueError, match=r"^source must look like 'synthetic:<preset>', 'cache:<dataset>:<model>:"
                                             r"<pretrained>', 'local:<folder>', 'real:<release>' or "
                                             rf"'sims:<folder>'; got {re.escape(repr(bad))}$"):
            cli.open_source(bad)
    with pytest.raises(ValueError, match=r"^--source-option \['a', 'b'\]: a sims: folder takes no loader options$"):
        cli.open_source("sims:/f", options={"b": 1, "a": 2})
    with pytest.raises(ValueError, match=r"^--source-option n_test: the video / audio preset synthetic:msrvtt takes "
                                         r"only n_train \(its training items; the test size is the data set's\)$"):
        cli.open_source("synthetic:msrvtt", options={"n_train": 50, "n_test": 1, "seed": 2})
    assert calls == []
    cli.open_source("synthetic:msrvtt", options={"n_train": 50}, seed=1)
    cli.open_source("synthetic:flickr30k", options={"n_train": 50})   # not a preset: the loader's to refuse
    assert calls == [("synthetic:msrvtt", 1, 50, None), ("synthetic:flickr30k", 0, None, {"n_train": 50})]
    with pytest.raises(ValueError, match=r"^--direction 'v2t': synthetic:msrvtt has the directions \['t2i', 'i2t'\]$"):
        cli.open_source("synthetic:msrvtt", directions=["v2t"])


def test_the_bank_of_a_sims_folder_is_each_bank_matrix_by_file_shape_and_sha256(tmp_path, monkeypatch):
    import shutil

    from hubnorm.data.sims import write_sims

    d = direction(n_items=5, per=2, bank=6)
    folder = tmp_path / "sims"
    write_sims(folder, {"test": dense(d), "bank_rows": d.query_bank @ d.targets.T,
                        "bank_cols": d.target_bank @ d.queries.T,
                        "bank_rows_x_bank_cols": d.query_bank @ d.target_bank.T},
               modalities=("text", "image"), labels=np.repeat(np.arange(5), 2), dataset="tiny", synthetic=True)
    files = {"query_bank x targets": "bank_rows.npy", "query_bank x target_bank": "bank_rows_x_bank_cols.npy"}

    def expected(f):
        return {"kind": "score matrices", "matrices": {
            key: {"shape": list(np.load(f / name).shape), "file": name, "sha256": sha(f / name)}
            for key, name in files.items()}}

    src = cli.open_source(f"sims:{folder}", directions=["t2i"])
    assert src.directions["t2i"].bank == expected(folder)
    assert cli._matrix_bank(src.directions["t2i"].task) == expected(folder)
    import hubnorm.data.cache

    real = hubnorm.data.cache.sha256_file
    monkeypatch.setattr(hubnorm.data.cache, "sha256_file", lambda p: pytest.fail(f"{p} hashed again"))
    assert cli._matrix_bank(src.directions["t2i"].task) == expected(folder)   # the manifest's checksums
    monkeypatch.setattr(hubnorm.data.cache, "sha256_file", real)
    bare = tmp_path / "bare"
    shutil.copytree(folder, bare)
    meta = json.loads((bare / "manifest.json").read_text())
    del meta["checksums"]   # hashed from the files
    (bare / "manifest.json").write_text(json.dumps(meta))
    assert cli.open_source(f"sims:{bare}", directions=["t2i"]).directions["t2i"].bank == expected(bare)


# ============================================================================================== the command line
def test_the_parser_defaults_types_and_choices():
    p = cli.build_parser()
    a = p.parse_args(["diagnose", "synthetic:coco"])
    assert vars(a) == {"command": "diagnose", "source": "synthetic:coco", "direction": None, "source_option": [],
                       "seed": 0, "json": False, "k": 10, "hubs": 10, "html": None, "fail_on": "never"}
    a = p.parse_args(["diagnose", "s:x", "--direction", "t2i", "--direction", "i2t", "--source-option", "a=1",
                      "--source-option", "b=2", "--seed", "3", "--json", "--k", "4", "--hubs", "2", "--html", "r.html",
                      "--fail-on", "warn"])
    assert (a.direction, a.source_option, a.seed, a.json, a.k, a.hubs, a.html, a.fail_on) == \
        (["t2i", "i2t"], ["a=1", "b=2"], 3, True, 4, 2, Path("r.html"), "warn")
    a = p.parse_args(["choose", "s:x"])
    assert (a.methods, a.grid, a.label_free, a.no_progress, a.seed, a.json) == ("nnn,is,sn,dbsn", [], False, False,
                                                                                 0, False)
    a = p.parse_args(["choose", "s:x", "--grid", "k=1", "--grid", "nnn.alpha=1", "--label-free", "--no-progress"])
    assert (a.grid, a.label_free, a.no_progress) == (["k=1", "nnn.alpha=1"], True, True)
    a = p.parse_args(["export", "s:x", "--method", "nnn", "--out", "o"])
    assert (a.method, a.param, a.out, a.faiss, a.force) == ("nnn", [], Path("o"), False, False)
    a = p.parse_args(["export", "s:x", "--method", "nnn", "--out", "o", "--param", "k=1", "--param", "alpha=1",
                      "--faiss", "--force"])
    assert (a.param, a.faiss, a.force) == (["k=1", "alpha=1"], True, True)
    a = p.parse_args(["check", "exp"])
    assert vars(a) == {"command": "check", "folder": Path("exp"), "source": None, "source_option": [], "seed": 0,
                       "json": False}
    a = p.parse_args(["check", "exp", "--source", "s:x", "--source-option", "a=1", "--seed", "2", "--json"])
    assert (a.source, a.source_option, a.seed, a.json) == ("s:x", ["a=1"], 2, True)


@pytest.mark.parametrize("argv", [[], ["nope"], ["diagnose"], ["diagnose", "s:x", "--k", "2.5"],
                                  ["diagnose", "s:x", "--fail-on", "ok"], ["diagnose", "s:x", "--seed", "x"],
                                  ["export", "s:x", "--out", "o"], ["export", "s:x", "--method", "nnn"],
                                  ["check", "e", "--seed", "1.5"], ["check"], ["choose", "s:x", "--hubs", "3"]])
def test_the_parser_refuses_with_exit_2(capsys, argv):
    with pytest.raises(SystemExit) as e:
        cli.build_parser().parse_args(argv)
    assert e.value.code == 2
    assert capsys.readouterr().err.startswith("usage: hubnorm")


def test_the_help_the_user_reads():
    p = cli.build_parser()
    assert p.prog == "hubnorm" and p.epilog == cli.EPILOG and p.formatter_class is argparse.RawDescriptionHelpFormatter
    assert p.description == ("Test-time hubness reduction on your embeddings or score matrices: diagnose, choose a "
                             "method, export offsets for a vector index.")
    sub = p._subparsers._group_actions[0]
    assert (sub.dest, sub.metavar, sub.required) == ("command", "{diagnose,choose,export,check}", True)
    assert {a.dest: a.help for a in sub._choices_actions} == {
        "diagnose": "hubness of the raw scores, hubs, verdicts",
        "choose": "the method and parameters, with the gain to expect",
        "export": "fitted offsets and [t, h] vectors for an index",
        "check": "verify an export (and, with --source, that its bank is unchanged)"}
    assert {n: s.description for n, s in sub.choices.items()} == {
        "diagnose": "N_k statistics with verdicts (thresholds printed), the hubs and the top-1 wins they take, raw "
                    "recall, the modality gap (embeddings).",
        "choose": "Held-out choice (default): choose on half of the test queries, measure the gain on the other half "
                  "(95% paired bootstrap CI). --label-free: read no label.",
        "export": "Fit one offset method on the reference bank; write offsets.npy, augmented_targets.npy ([t, h], "
                  "float32) and with --faiss index.faiss per direction, and a manifest.json with the sha256 of every "
                  "file, of the bank and of the targets.",
        "check": None}
    common = {"source": "synthetic:<preset>, local:<folder>, real:<release>, cache:..., sims:<folder>",
              "direction": "only this direction (repeatable; default: all)",
              "source_option": "an option of the loader (e.g. n_test_images=200 for synthetic:coco, n_train=500 for a "
                               "video / audio preset such as synthetic:msrvtt, test_fraction=0.5 for local:)",
              "seed": "seed of synthetic data and of the choice's split (default 0)",
              "json": "print JSON instead of text"}
    own = {"diagnose": {"k": "k of N_k (default 10)", "hubs": "how many hubs to list (default 10)",
                        "html": "also write a small HTML report with the N_k histograms here",
                        "fail_on": "exit 1 when the overall verdict reaches this level (default never)"},
           "choose": {"methods": "methods to compare (default nnn,is,sn,dbsn)",
                      "grid": "replace a paper grid (e.g. nnn.k=8,16,32)",
                      "label_free": "choose without labels (embeddings only)", "no_progress": "no progress bar"},
           "export": {"method": "an offset method: nnn, dn, is, csls, dualis, sn, dbsn",
                      "param": "a parameter (repeatable)", "out": "the export folder",
                      "faiss": "also write an exact faiss inner-product index",
                      "force": "replace an export already in --out"}}
    for name, helps in own.items():
        got = {a.dest: a.help for a in sub.choices[name]._actions if a.dest != "help"}
        assert got == {**common, **helps}, name
    got = {a.dest: a.help for a in sub.choices["check"]._actions if a.dest != "help"}
    assert got == {"folder": "the export folder", "source_option": None, "seed": None,
                   "json": "print JSON instead of text",
                   "source": "the source it was exported from: refit and compare bank, targets, offsets"}
    metavars = {(n, a.dest): a.metavar for n, s in sub.choices.items() for a in s._actions if a.metavar}
    assert metavars == {**{(n, "source_option"): "KEY=VALUE" for n in sub.choices}, ("choose", "grid"):
                        "[METHOD.]PARAM=V1,V2", ("export", "param"): "NAME=VALUE"}
    # argparse %-formats help strings, not descriptions: a "%%" there is printed as it is
    text = " ".join(sub.choices["choose"].format_help().split())
    assert "(95% paired bootstrap CI)" in text and "%%" not in text and " --methods METHODS " in text
    assert p.format_help().rstrip().endswith(cli.EPILOG.splitlines()[-1])


def test_json_schema_is_the_shipped_file():
    from importlib.resources import files

    schema = cli.json_schema()
    assert schema == json.loads(files("hubnorm").joinpath("schemas/cli.schema.json").read_text())
    assert isinstance(schema, dict) and schema


@pytest.fixture
def opened(monkeypatch):
    """cli.open_source replaced by a tiny source; the calls it got."""
    calls = []

    def fake(name, *, directions=None, options=None, seed=0):
        calls.append((name, directions, options, seed))
        src = source()
        if directions:
            src.directions = {k: v for k, v in src.directions.items() if k in directions}
        src.source = name
        return src

    monkeypatch.setattr(cli, "open_source", fake)
    return calls


def test_main_diagnose_prints_the_text_or_the_json(capsys, opened, tmp_path):
    code, out, err = run(capsys, "diagnose", "test:x", "--direction", "t2i", "--source-option", "n=3",
                         "--source-option", "flag=true", "--seed", "5", "--k", "3", "--hubs", "2")
    assert (code, err) == (0, "") and opened == [("test:x", ["t2i"], {"n": 3, "flag": True}, 5)]
    src = source()
    src.directions.pop("i2t")
    src.source = "test:x"
    rep = cli.diagnose(src, k=3, hubs=2)
    assert out == cli._diagnose_text(rep) + "\n"
    code, out, _ = run(capsys, "diagnose", "test:x", "--json", "--k", "4")
    assert code == 0 and out == json.dumps(cli.diagnose(source(), k=4, hubs=10) | {"source": "test:x"}, indent=2,
                                           sort_keys=True) + "\n"
    assert run(capsys, "diagnose", "test:x", "--k", "1", "--hubs", "1")[0] == 0   # 1 is a positive integer
    code, _, _ = run(capsys, "diagnose", "test:x", "--html", tmp_path / "r.html", "--hubs", "1", "--k", "3")
    assert code == 0 and (tmp_path / "r.html").read_text().startswith("<!doctype html>")
    for argv, msg in ((["--k", "0"], "--k must be a positive integer; got 0"),
                      (["--hubs", "0"], "--hubs must be a positive integer; got 0"),
                      (["--hubs", "-2", "--k", "-1"], "--k must be a positive integer; got -1"),
                      (["--html", tmp_path],
                       f"--html '{tmp_path}' must name a file to write (e.g. --html report.html)"),
                      (["--k", "30"], "--k 30 exceeds the gallery size 8 of t2i: choose a smaller k")):
        code, out, err = run(capsys, "diagnose", "test:x", *argv)
        assert (code, out, err) == (2, "", f"hubnorm diagnose: error: {msg}\n")


@pytest.mark.parametrize("level, fail_on, code", [("ok", "warn", 0), ("warn", "warn", 1), ("fail", "warn", 1),
                                                  ("ok", "fail", 0), ("warn", "fail", 0), ("fail", "fail", 1),
                                                  ("ok", "never", 0), ("warn", "never", 0), ("fail", "never", 0)])
def test_main_diagnose_exit_code_of_fail_on(capsys, opened, monkeypatch, level, fail_on, code):
    rep = cli.diagnose(source(), k=2, hubs=1)
    rep["verdict"] = level
    monkeypatch.setattr(cli, "diagnose", lambda src, k, hubs: rep)
    got, out, _ = run(capsys, "diagnose", "test:x", "--fail-on", fail_on)
    assert got == code and out.endswith(f"verdict: {level.upper()}\n")
    assert run(capsys, "diagnose", "test:x")[0] == 0


def test_main_html_is_checked_before_the_diagnosis(capsys, opened, monkeypatch, tmp_path):
    monkeypatch.setattr(cli, "diagnose", lambda *a, **kw: pytest.fail("diagnosed before --html was checked"))
    code, _, err = run(capsys, "diagnose", "test:x", "--html", tmp_path / "no" / "r.html")
    assert code == 2 and "the folder" in err and "does not exist" in err


def test_main_choose_passes_its_options_and_prints_the_choice(capsys, opened, monkeypatch):
    seen = []
    rep = {"command": "choose", "data": "tiny data", "synthetic": False, "directions": [
        {"direction": "t2i", "mode": "labelled", "method": "raw", "params": {}, "best_method": "is",
         "best_params": {"tau": 0.05}, "selection queries": 8, "estimation queries": 8,
         "best point's gain on the estimation half": 0.0}]}

    def choose(src, *, methods, grids, label_free, seed, progress):
        seen.append((sorted(src.directions), methods, grids, label_free, seed, progress))
        return rep

    monkeypatch.setattr(cli, "choose", choose)
    code, out, err = run(capsys, "choose", "test:x", "--methods", " nnn, IS ,,", "--grid", "nnn.k=2,4", "--grid",
                         "tau=0.1", "--seed", "3", "--no-progress", "--label-free")
    assert (code, err) == (0, "") and out == cli._choose_text(rep) + "\n"
    assert seen == [(["i2t", "t2i"], ["nnn", "IS"], {"nnn": {"k": [2, 4]}, "*": {"tau": [0.1]}}, True, 3, False)]
    assert opened[-1] == ("test:x", None, {}, 3)
    code, out, _ = run(capsys, "choose", "test:x", "--json")
    assert code == 0 and json.loads(out) == rep and out == json.dumps(rep, indent=2, sort_keys=True) + "\n"
    assert seen[-1] == (["i2t", "t2i"], ["nnn", "is", "sn", "dbsn"], {}, False, 0, True)
    code, out, err = run(capsys, "choose", "test:x", "--methods", " , ")
    assert (code, out, err) == (2, "", "hubnorm choose: error: --methods is empty: name at least one method, e.g. "
                                       "--methods nnn,is\n")
    code, _, err = run(capsys, "choose", "test:x", "--grid", "k")
    assert code == 2 and err.startswith("hubnorm choose: error: --grid 'k' must be")


def test_main_export_and_check_print_what_they_did(capsys, opened, tmp_path):
    out = tmp_path / "exp"
    code, text, err = run(capsys, "export", "test:x", "--method", "is", "--param", "tau=0.02", "--out", out)
    assert (code, err) == (0, "")
    assert text == f"exported is (tau=0.02) of tiny data to {out}: t2i: 2 files, i2t: 2 files\n"
    code, text, err = run(capsys, "export", "test:x", "--direction", "i2t", "--method", "nnn", "--param", "k=2",
                          "--out", out, "--force", "--json")
    assert (code, err) == (0, "") and json.loads(text) == json.loads((out / "manifest.json").read_text())
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"
    code, text, _ = run(capsys, "export", "test:x", "--method", "is", "--out", out, "--force")
    assert code == 0 and text == f"exported is (-) of tiny data to {out}: t2i: 2 files, i2t: 2 files\n"
    code, text, err = run(capsys, "export", "test:x", "--method", "is", "--param", "tau", "--out", out, "--force")
    assert (code, text) == (2, "") and err == ("hubnorm export: error: --param 'tau' must be KEY=VALUE, e.g. --param "
                                               "k=16\n")
    opened.clear()
    code, text, err = run(capsys, "check", out)
    assert (code, text, err) == (0, f"{out}: every file matches the manifest\n", "") and opened == []
    code, text, _ = run(capsys, "check", out, "--source", "test:x", "--source-option", "a=1", "--seed", "2")
    assert (code, text) == (0, f"{out}: every file matches the manifest; bank, targets and offsets match test:x\n")
    assert opened == [("test:x", None, {"a": 1}, 2)]
    code, text, _ = run(capsys, "check", out, "--json")
    assert code == 0 and json.loads(text) == {"command": "check", "folder": str(out), "source": None, "problems": [],
                                              "ok": True}
    (out / "t2i" / "a.npy").write_bytes(b"")
    (out / "t2i" / "b.npy").write_bytes(b"")
    code, text, _ = run(capsys, "check", out, "--source", "test:x")
    assert code == 3 and text == (f"{out}/t2i/a.npy is not listed in the manifest: not part of this export\n"
                                  f"{out}/t2i/b.npy is not listed in the manifest: not part of this export\n")
    code, text, _ = run(capsys, "check", out, "--json")
    rep = json.loads(text)
    assert code == 3 and rep["ok"] is False and len(rep["problems"]) == 2
    code, text, err = run(capsys, "check", tmp_path / "none")
    assert (code, text) == (2, "") and err == (f"hubnorm check: error: {tmp_path}/none does not exist or is not a "
                                               "folder: name the folder hubnorm export wrote\n")


def failing_source(monkeypatch, exc):
    def fake(*a, **kw):
        raise exc

    monkeypatch.setattr(cli, "open_source", fake)


@pytest.mark.parametrize("exc, message", [
    (TypeError("load_local() got an unexpected keyword argument 'colour'"),
     "--source-option colour: not an option of this source's loader (load_local); see docs/cli.md for each "
     "source's options"),
    (TypeError("f(x) got an unexpected keyword argument"),
     "--source-option f(x) got an unexpected keyword argument: not an option of this source's loader (f); see "
     "docs/cli.md for each source's options"),
    (TypeError("an 'odd' type"), "an 'odd' type"),
    (ValueError("bad value"), "bad value"),
    (FileNotFoundError("no such file: x.npy"), "no such file: x.npy"),
    (PermissionError(13, "Permission denied", "/data/x.npy"), "/data/x.npy Permission denied"),
    (OSError("disk on fire"), " disk on fire"),
    (OSError(28, "No space left on device"), " No space left on device"),
])
def test_main_turns_errors_into_a_sentence_and_exit_2(capsys, monkeypatch, exc, message):
    failing_source(monkeypatch, exc)
    for command in ("diagnose", "export"):
        extra = ["--method", "is", "--out", "o"] if command == "export" else []
        code, out, err = run(capsys, command, "test:x", *extra)
        assert (code, out, err) == (2, "", f"hubnorm {command}: error: {message}\n")


def test_main_ends_quietly_when_the_reader_goes_away(monkeypatch):
    failing_source(monkeypatch, BrokenPipeError())
    stderr = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    assert cli.main(["choose", "test:x"]) == 0 and stderr.closed


def test_main_lets_other_errors_through(monkeypatch):
    failing_source(monkeypatch, RuntimeError("a bug"))
    with pytest.raises(RuntimeError, match="a bug"):
        cli.main(["diagnose", "test:x"])


# ============================================================================================== more edges
def test_verdict_levels_at_their_thresholds():
    for stat, (warn, fail, _) in cli.THRESHOLDS.items():
        assert [cli.verdict(stat, x) for x in (np.nextafter(warn, 0), warn, np.nextafter(fail, 0), fail, fail + 9)] \
            == ["ok", "warn", "warn", "fail", "fail"]


def test_top1_of_normalised_scores():
    d = direction(n_items=12, per=3, noise=1.5)
    norm = d.task.fit(hn.make_normalizer("is", tau=0.01))
    assert cli._top1(d.task, norm).tolist() == (dense(d) + norm.offsets[None, :]).argmax(axis=1).tolist()
    assert cli._top1(d.task, norm).tolist() != cli._top1(d.task).tolist()   # the offsets move some top-1


def test_the_hub_factor_is_two():
    """6 queries, 3 targets, k = 1: N_1 = (5, 1, 0), mean 2: target 0 is a hub (5 >= 4), though not 3x the mean."""
    s = np.array([[0.9, 0.1, 0.0]] * 5 + [[0.1, 0.9, 0.0]])
    task = RetrievalTask(scores={("queries", "targets"): s}, positives=hn.Positives.from_labels(np.zeros(6, int), 3),
                         direction="t2i")
    rep = cli.diagnose_direction(cli.Direction("t2i", task), k=1, hubs=2)
    assert [(h["target"], h["n_k"], h["hub"]) for h in rep["hubs"]] == [(0, 5, True), (1, 1, False)]


def test_the_defaults_of_diagnose_are_k_10_and_10_hubs():
    d = direction(n_items=14, per=1)
    rep = cli.diagnose_direction(d)
    assert rep["k"] == 10 and len(rep["hubs"]) == 10
    rep = cli.diagnose(source(d))
    assert rep["directions"][0]["k"] == 10 and len(rep["directions"][0]["hubs"]) == 10


def test_the_overall_verdict_is_the_worst_level_not_the_last_word(monkeypatch):
    levels = {"skewness": "fail", "hub_share": "warn", "antihub_share": "ok"}
    monkeypatch.setattr(cli, "verdict", lambda stat, excess: levels[stat])
    assert cli.diagnose_direction(direction(), k=2)["verdict"] == "fail"   # "warn" > "fail" as words
    levels.update(skewness="ok", hub_share="ok", antihub_share="warn")
    assert cli.diagnose_direction(direction(), k=2)["verdict"] == "warn"
    by_name = {"t2i": "fail", "i2t": "warn"}
    monkeypatch.setattr(cli, "diagnose_direction", lambda d, k, hubs: {"verdict": by_name[d.name]})
    assert cli.diagnose(source())["verdict"] == "fail"
    by_name.update(t2i="ok", i2t="ok")
    assert cli.diagnose(source())["verdict"] == "ok"
    assert cli.diagnose(source(flags=["odd"]))["verdict"] == "warn"


def test_the_histogram_image_is_6_by_3_2_inches_at_110_dpi(tmp_path):
    cli.write_html(diag_rep(), tmp_path / "r.html")
    png = base64.b64decode((tmp_path / "r.html").read_text().split("base64,")[1].split('"')[0])
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (660, 352)


def test_choose_labelled_keeps_raw_with_no_gain_although_the_best_point_differs_on_the_other_half():
    d = direction(n_items=16, per=3, noise=1.0, bank=40, seed=9)
    rep = cli.choose_labelled(d, ["nnn", "is"], {"is": {"tau": [0.01, 0.05]}, "nnn": {"k": [2, 8], "alpha": [0.5]}},
                              seed=2, progress=False)
    assert rep["method"] == "raw" and rep["expected gain R@1"] == 0.0 and rep["expected gain 95% CI"] == [0.0, 0.0]
    assert rep["best point's gain on the estimation half"] != 0.0


def test_choose_labelled_passes_its_seed_and_the_chosen_ranks_to_the_interval(monkeypatch):
    calls = []
    monkeypatch.setattr(cli, "_paired_ci", lambda raw, new, groups, *, seed: calls.append((raw, new, groups, seed))
                        or (-1.0, 2.0))
    d = direction(n_items=16, per=3, noise=1.5, bank=40, seed=1)
    rep = cli.choose_labelled(d, ["nnn"], {"nnn": {"k": [2], "alpha": [0.5]}}, seed=2, progress=False)
    assert rep["expected gain 95% CI"] == [-1.0, 2.0] and rep["method"] == "nnn"
    raw, new, groups, seed = calls[0]
    sel, est = cli.split_halves(np.repeat(np.arange(16), 3), 2)
    norm = d.task.fit(hn.make_normalizer("nnn", k=2, alpha=0.5))
    assert seed == 2 and groups.tolist() == np.repeat(np.arange(16), 3)[est].tolist()
    assert raw.tolist() == dense_ranks(dense(d), d.task.positives)[est].tolist()
    assert new.tolist() == dense_ranks(dense(d) + norm.offsets[None, :], d.task.positives)[est].tolist()
    default = cli.choose_labelled(d, ["nnn"], {"nnn": {"k": [2], "alpha": [0.5]}}, progress=False)
    assert calls[-1][3] == 0 and default["selection queries"] == len(cli.split_halves(np.repeat(np.arange(16), 3),
                                                                                     0)[0])


def test_choose_labelled_needs_two_groups_on_each_side_and_no_more():
    rng = np.random.default_rng(0)
    targets, bank = unit(rng.standard_normal((4, 5))), unit(rng.standard_normal((12, 5)))
    task = RetrievalTask(scores=score_matrices(targets, targets, bank),
                         positives=hn.Positives.from_labels(np.arange(4), 4), direction="t2i")
    rep = cli.choose_labelled(cli.Direction("t2i", task), ["is"], {}, progress=False)
    assert (rep["selection queries"], rep["estimation queries"]) == (2, 2)


def test_export_writes_beside_out_and_removes_the_old_export_last(tmp_path, monkeypatch):
    import shutil

    src = source()
    out = tmp_path / "exp"
    cli.export(src, out, method="is", params={})
    folders, removed = [], []
    real_write, real_rmtree = cli._write_array, shutil.rmtree

    def write(folder, rel, arr):
        folders.append(folder)
        assert (out / "manifest.json").is_file()   # the old export is still there while the new one is written
        return real_write(folder, rel, arr)

    def rmtree(path, *a, **kw):
        removed.append(Path(path))
        return real_rmtree(path, *a, **kw)

    monkeypatch.setattr(cli, "_write_array", write)
    monkeypatch.setattr(shutil, "rmtree", rmtree)
    cli.export(src, out, method="is", params={"tau": 0.01}, force=True)
    tmp = folders[0]
    assert set(folders) == {tmp} and tmp.parent == tmp_path
    assert tmp.name.startswith(".exp.") and tmp.name.endswith(".tmp")
    assert len(removed) == 1 and removed[0].parent == tmp_path
    assert removed[0].name.startswith(".exp.") and removed[0].name.endswith(".old")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp"]


def test_write_faiss_stores_float32_rows(tmp_path):
    faiss = pytest.importorskip("faiss")
    aug = np.random.default_rng(0).standard_normal((4, 3))   # float64 given: stored as float32
    entry = cli._write_faiss(tmp_path, "d/index.faiss", aug)
    index = faiss.read_index(str(tmp_path / "d" / "index.faiss"))
    assert np.array_equal(index.reconstruct_n(0, 4), aug.astype(np.float32))
    assert entry == {"path": "d/index.faiss", "sha256": sha(tmp_path / "d" / "index.faiss"), "kind": "IndexFlatIP",
                     "ntotal": 4}


def test_main_export_writes_the_faiss_index_when_asked(capsys, opened, tmp_path):
    pytest.importorskip("faiss")
    code, text, _ = run(capsys, "export", "test:x", "--method", "is", "--out", tmp_path / "e", "--faiss")
    assert code == 0 and text.endswith("t2i: 3 files, i2t: 3 files\n")
    assert (tmp_path / "e" / "t2i" / "index.faiss").is_file()
