"""The ``hubnorm`` command (hubnorm.cli): diagnose, choose, export, check on synthetic embeddings, on a ``sims:``
folder of score matrices and on a real release (../shared/data). Numbers are checked against independent dense
float64 computations (numpy / scipy on the whole score matrix), the JSON against the shipped schema, the exported
index against the library's own top-k, and every bad input against its exit code and message."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import hubnorm as hn
from hubnorm import cli
from hubnorm.data.sims import write_sims

jsonschema = pytest.importorskip("jsonschema")

SYN = "synthetic:flickr30k"
SMALL = ["--source-option", "n_test_images=40", "--source-option", "n_train_images=120"]
REAL_MIRROR = ("embeddings",)


def run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv):
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    rep = json.loads(out)
    jsonschema.validate(rep, cli.json_schema())
    return rep


@pytest.fixture(scope="module")
def small():
    """The synthetic source of SMALL, loaded the way the command loads it (float64 unit rows)."""
    return cli.open_source(SYN, options={"n_test_images": 40, "n_train_images": 120})


def dense(d: cli.Direction):
    """The raw test scores of a direction, dense float64 from its embeddings."""
    return np.asarray(d.queries, dtype=np.float64) @ np.asarray(d.targets, dtype=np.float64).T


def dense_n_k(s: np.ndarray, k: int) -> np.ndarray:
    top = np.argsort(-s, axis=1, kind="stable")[:, :k]
    return np.bincount(top.ravel(), minlength=s.shape[1])


@pytest.fixture(scope="module")
def sims_folder(tmp_path_factory, small):
    """The same synthetic data as score matrices (text rows, image columns): a sims: folder."""
    folder = tmp_path_factory.mktemp("sims")
    t2i = small.directions["t2i"]
    test = small.data
    write_sims(folder, {"test": test.captions @ test.items.T,
                        "bank_rows": t2i.query_bank @ test.items.T,
                        "bank_cols": t2i.target_bank @ test.captions.T,
                        "bank_rows_x_bank_cols": t2i.query_bank @ t2i.target_bank.T},
               modalities=("text", "image"), labels=test.caption_to_item, dataset="synthetic-small", synthetic=True)
    return folder


# ------------------------------------------------------------------------------------------------ diagnose
def test_diagnose_matches_a_dense_float64_computation(capsys, small):
    rep = run_json(capsys, "diagnose", SYN, *SMALL, "--k", 5, "--hubs", 4)
    assert rep["synthetic"] and rep["kind"] == "embeddings" and "synthetic" in rep["data"]
    for d in rep["directions"]:
        s = dense(small.directions[d["direction"]])
        n_k = dense_n_k(s, 5)
        assert d["hubness"]["skewness"] == pytest.approx(stats.skew(n_k.astype(float)), abs=1e-9)
        assert d["hubness"]["antihub_share"] == pytest.approx(np.mean(n_k == 0))
        assert d["n_k_counts"] == np.bincount(n_k).tolist()
        order = np.lexsort((np.arange(len(n_k)), -n_k))[:4]
        assert [h["target"] for h in d["hubs"]] == order.tolist()
        assert [h["n_k"] for h in d["hubs"]] == n_k[order].tolist()
        top1 = np.argmax(s, axis=1)
        pos = small.directions[d["direction"]].task.positives
        right = np.array([top1[q] in pos.of(q) for q in range(s.shape[0])])
        wins, wrong = np.bincount(top1, minlength=s.shape[1]), np.bincount(top1[~right], minlength=s.shape[1])
        assert [h["top1_wins"] for h in d["hubs"]] == wins[order].tolist()
        assert [h["wrong_top1_wins"] for h in d["hubs"]] == wrong[order].tolist()
        assert d["raw_recall"]["R@1"] == pytest.approx(100 * right.mean())
        v = d["verdicts"]["skewness"]
        p = 5 / s.shape[1]
        null = (1 - 2 * p) / np.sqrt(s.shape[0] * p * (1 - p))   # skewness of Binomial(queries, k / targets)
        assert v["random"] == pytest.approx(null) and v["excess"] == pytest.approx(v["value"] - null)
        assert v["verdict"] == ("fail" if v["excess"] >= 3 else "warn" if v["excess"] >= 1 else "ok")
        assert [h["hub"] for h in d["hubs"]] == (n_k[order] >= 2 * n_k.mean()).tolist()
    assert rep["verdict"] == max((d["verdict"] for d in rep["directions"]), key=["ok", "warn", "fail"].index)
    assert rep["geometry"]["gap"] > 0


def test_diagnose_text_html_and_the_exit_code_of_fail_on(capsys, tmp_path):
    code, out, _ = run(capsys, "diagnose", SYN, *SMALL, "--html", tmp_path / "r.html")
    assert code == 0
    assert "[SYNTHETIC]" in out and "[warn from +1.00, fail from +3.00]" in out and "verdict:" in out
    page = (tmp_path / "r.html").read_text()
    assert page.count("data:image/png;base64,") == 2 and "skewness of N_k" in page
    rep = run_json(capsys, "diagnose", SYN, *SMALL)
    level = ["ok", "warn", "fail"].index(rep["verdict"])
    assert run(capsys, "diagnose", SYN, *SMALL, "--fail-on", "warn")[0] == (1 if level >= 1 else 0)
    assert run(capsys, "diagnose", SYN, *SMALL, "--fail-on", "fail")[0] == (1 if level >= 2 else 0)


def test_random_retrieval_is_no_hubness():
    """Scores with no structure (i.i.d. noise, positives raised): with 5 texts per item the i2t mean N_10 is 2, so
    shares of 'hubs' and 'anti-hubs' arise by chance; the verdicts are on the excess over that chance, and the
    null statistics agree with a simulation of random retrieval."""
    from scipy import stats as st

    rng = np.random.default_rng(3)
    n_items, per = 200, 5
    labels = np.repeat(np.arange(n_items), per)
    s = rng.standard_normal((n_items * per, n_items))
    s[np.arange(len(labels)), labels] += 2.0
    task = hn.RetrievalTask(scores={("queries", "targets"): s.T.copy()},
                            positives=hn.Positives.from_groups(labels, n_items), direction="i2t", check=False)
    rep = cli.diagnose_direction(cli.Direction("i2t", task), k=10)
    assert rep["hubness"]["expected"] == 2.0
    assert all(v["verdict"] == "ok" for v in rep["verdicts"].values()), rep["verdicts"]
    null = cli.null_statistics(n_items, n_items * per, 10)
    assert null["skewness"] == pytest.approx(float(st.binom.stats(n_items, 10 / (n_items * per), moments="s")))
    assert null["antihub_share"] == pytest.approx(st.binom.pmf(0, n_items, 10 / (n_items * per)))
    sim = [hn.hubness_stats(dense_n_k(rng.standard_normal((n_items, n_items * per)), 10), 10, n_items)
           for _ in range(20)]
    for key in ("skewness", "hub_share", "antihub_share"):
        assert np.mean([x[key] for x in sim]) == pytest.approx(null[key], abs=0.03)


def test_verdict_levels_at_their_thresholds():
    for stat, (warn, fail, _) in cli.THRESHOLDS.items():
        assert cli.verdict(stat, np.nextafter(warn, 0)) == "ok"
        assert cli.verdict(stat, warn) == "warn"
        assert cli.verdict(stat, np.nextafter(fail, 0)) == "warn"
        assert cli.verdict(stat, fail) == "fail"


def test_a_sims_folder_gives_the_numbers_of_its_embeddings(capsys, small, sims_folder):
    emb = run_json(capsys, "diagnose", SYN, *SMALL)
    sims = run_json(capsys, "diagnose", f"sims:{sims_folder}")
    assert sims["kind"] == "scores" and "geometry" not in sims
    for a, b in zip(emb["directions"], sims["directions"]):
        assert a["direction"] == b["direction"]
        assert a["raw_recall"] == pytest.approx(b["raw_recall"]) and a["hubness"] == pytest.approx(b["hubness"])
        assert [h["target"] for h in a["hubs"]] == [h["target"] for h in b["hubs"]]


def test_a_video_preset_runs_in_its_own_directions(capsys, tmp_path):
    rep = run_json(capsys, "diagnose", "synthetic:msrvtt", "--source-option", "n_train=200", "--direction", "v2t")
    assert [d["direction"] for d in rep["directions"]] == ["v2t"] and rep["synthetic"]
    assert "videos" in rep["data"] and "200 training videos" in rep["data"]
    man = run_json(capsys, "export", "synthetic:msrvtt", "--source-option", "n_train=200", "--method", "sn",
                   "--param", "tau=0.02", "--out", tmp_path / "exp")
    assert sorted(man["directions"]) == ["t2v", "v2t"]
    assert run(capsys, "check", tmp_path / "exp", "--source", "synthetic:msrvtt", "--source-option", "n_train=200")[0] == 0


# ------------------------------------------------------------------------------------------------ choose
def test_choose_labelled_picks_the_best_point_on_the_selection_half(capsys):
    # a gallery of 150 images, where normalizing helps (on SMALL's 40 images raw R@1 is about 90 and nothing helps)
    mid = ["--source-option", "n_test_images=150", "--source-option", "n_train_images=450"]
    rep = run_json(capsys, "choose", SYN, *mid, "--direction", "t2i", "--methods", "nnn,is", "--grid",
                   "nnn.k=2,8", "--grid", "nnn.alpha=0.5,1", "--grid", "is.tau=0.01,0.05", "--no-progress")
    d = rep["directions"][0]
    t2i = cli.open_source(SYN, options={"n_test_images": 150, "n_train_images": 450}).directions["t2i"]
    task = hn.RetrievalTask(t2i.queries, t2i.targets, t2i.task.positives, t2i.query_bank, t2i.target_bank)
    sel, est = cli.split_halves(cli.query_groups(task.positives), 0)
    raw = hn.positive_ranks(dense(t2i), task.positives)
    scored = []
    for method, params in [("nnn", {"alpha": a, "k": k}) for a in (0.5, 1.0) for k in (2, 8)] + \
                          [("is", {"tau": t}) for t in (0.01, 0.05)]:
        norm = task.fit(hn.make_normalizer(method, **params))   # the embedding path: an independent fit
        ranks = hn.positive_ranks(norm.score(task.queries), task.positives)
        scored.append((100 * np.mean(ranks[sel] == 0), method, params, ranks))
    best = max(scored, key=lambda r: r[0])   # first of equal values, as the command
    assert [r["R@1 selection half"] for r in d["table"]] == pytest.approx([r[0] for r in scored])
    assert (d["best_method"], d["best_params"]) == (best[1], best[2])
    keep_raw = best[0] <= 100 * np.mean(raw[sel] == 0)
    assert d["method"] == ("raw" if keep_raw else best[1])
    gain = 100 * (np.mean(best[3][est] == 0) - np.mean(raw[est] == 0))
    assert d["best point's gain on the estimation half"] == pytest.approx(gain)
    assert not keep_raw   # this data: a method helps (the test below covers keeping raw)
    assert d["expected gain R@1"] == pytest.approx(gain)
    lo, hi = d["expected gain 95% CI"]
    assert lo <= gain <= hi
    # a 95% interval: about the normal one of a mean over clusters (the 5 captions of an image are one cluster)
    diff = (best[3][est] == 0).astype(float) - (raw[est] == 0)
    image = task.positives.indices[task.positives.indptr[:-1]][est]
    per_image = np.array([diff[image == i].sum() for i in np.unique(image)])
    counts = np.array([np.sum(image == i) for i in np.unique(image)])
    ratio = per_image.sum() / counts.sum()
    se = np.sqrt(np.sum((per_image - ratio * counts) ** 2)) / counts.sum()
    assert (hi - lo) / 2 == pytest.approx(1.96 * 100 * se, rel=0.3)


def test_the_halves_keep_the_texts_of_one_item_together():
    t2i = cli.open_source(SYN, options={"n_test_images": 40, "n_train_images": 80}).directions["t2i"]
    groups = cli.query_groups(t2i.task.positives)
    assert np.array_equal(groups, np.repeat(np.arange(40), 5))   # 5 captions per image, in image order
    sel, est = cli.split_halves(groups, 0)
    assert not set(groups[sel]) & set(groups[est]) and len(set(groups[sel])) == 20
    assert sorted(np.concatenate([sel, est])) == list(range(200))
    assert not np.array_equal(cli.split_halves(groups, 1)[0], sel)   # the seed moves it


def test_choose_keeps_the_raw_scores_when_no_point_beats_them():
    """Queries equal to their targets: raw R@1 is 100 on every half, a method can only tie it: keep raw."""
    from hubnorm.scores import score_matrices

    rng = np.random.default_rng(0)
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
    targets, bank = unit(rng.standard_normal((30, 16))), unit(rng.standard_normal((60, 16)))
    positives = hn.Positives.from_labels(np.arange(30), 30)
    task = hn.RetrievalTask(scores=score_matrices(targets, targets, bank), positives=positives, direction="t2i",
                            check=False)
    d = cli.Direction("t2i", task, targets, targets, bank)
    rep = cli.choose_labelled(d, ["is"], {"*": {"tau": [0.05]}}, progress=False)
    assert rep["table"][0]["R@1 selection half"] == rep["raw R@1 selection half"] == 100.0
    assert rep["method"] == "raw" and rep["params"] == {} and rep["best_method"] == "is"
    assert rep["expected gain R@1"] == 0 and rep["expected gain 95% CI"] == [0, 0]
    rep = cli.choose_label_free(d, ["is"], {"*": {"tau": [0.05]}})   # every retrieval is mutual already
    assert not rep["predicted to help"] and rep["method"] == "raw" and rep["best_method"] == "is"


def test_choose_label_free_is_the_library_choice_with_its_track_record(capsys, small):
    from hubnorm.label_free import label_free_select, predict_benefit

    rep = run_json(capsys, "choose", SYN, *SMALL, "--direction", "t2i", "--methods", "is,nnn", "--label-free")
    d = rep["directions"][0]
    t2i = small.directions["t2i"]
    results = {m: label_free_select(m, t2i.targets, t2i.query_bank, queries=t2i.queries, target_bank=t2i.target_bank,
                                    grid=cli._grid(m, {}, t2i.task)) for m in ("is", "nnn")}
    winner = max(results, key=lambda m: results[m].best_value)   # the most mutual retrievals
    assert results["is"].best_value != results["nnn"].best_value
    res = results[winner]
    assert d["best_method"] == winner and d["best_params"] == res.best_params
    assert d["predicted to help"] == predict_benefit(res)
    assert d["method"] == (winner if predict_benefit(res) else "raw")
    assert d["track record"] == cli.LABEL_FREE_TRACK_RECORD
    code, out, _ = run(capsys, "choose", SYN, *SMALL, "--direction", "i2t", "--methods", "is", "--label-free")
    assert "track record" in out and "78/90" in out


def test_choose_label_free_uses_the_given_grid_and_the_target_bank_and_keeps_raw_when_no_help_is_predicted(capsys,
                                                                                                        small):
    """DBSN's label-free fit reads the target bank; ``--grid`` replaces a method's default grid; a direction whose
    best method is predicted not to help keeps the raw scores with no parameters (i2t here), one predicted to
    help takes its parameters (t2i)."""
    from hubnorm.label_free import label_free_select, predict_benefit

    rep = run_json(capsys, "choose", SYN, *SMALL, "--methods", "is,dbsn", "--grid", "is.tau=0.013,0.027",
                   "--label-free")
    seen = set()
    for d in rep["directions"]:
        dd = small.directions[d["direction"]]
        grids = {"is": {"tau": [0.013, 0.027]}, "dbsn": {p: list(v) for p, v in hn.PAPER_GRIDS["dbsn"].items()}}
        res = {m: label_free_select(m, dd.targets, dd.query_bank, queries=dd.queries, target_bank=dd.target_bank,
                                    grid=grids[m]) for m in ("is", "dbsn")}
        rows = {r["method"]: r for r in d["table"]}
        assert rows["is"]["params"]["tau"] in (0.013, 0.027)
        for m, r in res.items():
            assert rows[m]["params"] == r.best_params and rows[m]["criterion"] == r.best_value
            assert rows[m]["raw criterion"] == r.raw_value and rows[m]["predicted to help"] == predict_benefit(r)
        helps = predict_benefit(res[d["best_method"]])
        assert d["predicted to help"] == helps
        assert (d["method"], d["params"]) == ((d["best_method"], d["best_params"]) if helps else ("raw", {}))
        seen.add(helps)
    assert seen == {True, False}, "this data no longer shows both outcomes of the benefit predictor"


def test_the_track_record_is_the_one_the_report_measured():
    csv = Path(__file__).resolve().parents[1] / "benchmarks" / "reports" / "label_free.csv"
    import pandas as pd

    rows = pd.read_csv(csv)
    real = rows[rows["set"].str.startswith("real")]
    frac = lambda col: np.array([[int(x) for x in v.split("/")] for v in real[col]]).sum(axis=0)  # noqa: E731
    right, raised = frac("predictor right"), frac("raised R@1")
    tr = cli.LABEL_FREE_TRACK_RECORD
    assert (tr["predictor_right"], tr["choices"]) == tuple(right) and tr["raised_r1"] == raised[0]
    diff = real["label-free - labelled"]
    assert tr["mean_minus_labelled"] == round(diff.mean(), 2)
    assert (tr["min_minus_labelled"], tr["max_minus_labelled"]) == (diff.min(), diff.max())


def test_choose_on_a_sims_folder_and_the_label_free_refusal(capsys, sims_folder):
    rep = run_json(capsys, "choose", f"sims:{sims_folder}", "--methods", "sn", "--grid", "tau=0.01,0.05",
                   "--no-progress")
    assert [d["direction"] for d in rep["directions"]] == ["t2i", "i2t"]
    code, _, err = run(capsys, "choose", f"sims:{sims_folder}", "--label-free")
    assert code == 2 and "reads the embeddings" in err


# ------------------------------------------------------------------------------------------------ export / check
def test_export_load_back_is_bit_identical_and_the_index_serves_the_library_top_k(capsys, tmp_path, small):
    faiss = pytest.importorskip("faiss")
    out = tmp_path / "exp"
    man = run_json(capsys, "export", SYN, *SMALL, "--method", "nnn", "--param", "k=8", "--param", "alpha=0.75",
                   "--out", out, "--faiss")
    back = cli.load_export(out)
    for name, d in small.directions.items():
        norm = d.task.fit(hn.make_normalizer("nnn", k=8, alpha=0.75))
        assert np.array_equal(back["arrays"][name]["offsets"], norm.offsets)   # bit for bit
        assert man["directions"][name]["offsets_sha256"] == cli.digest(norm.offsets.astype(np.float64))
        aug = back["arrays"][name]["augmented_targets"]
        assert aug.dtype == np.float32 and aug.shape == (len(d.targets), d.targets.shape[1] + 1)
        index = faiss.deserialize_index(np.frombuffer((out / name / "index.faiss").read_bytes(), dtype=np.uint8))
        q = np.concatenate([d.queries, np.ones((len(d.queries), 1))], axis=1).astype(np.float32)
        _, got = index.search(q, 5)
        served = cli.ExportedIndex(out, name)
        assert served.index is not None and np.array_equal(served.search(d.queries, 5)[1], got)
        entry = man["directions"][name]["files"]["faiss_index"]
        assert (entry["kind"], entry["ntotal"], entry["path"]) == ("IndexFlatIP", len(d.targets), f"{name}/index.faiss")
        lib = dense(d) + norm.offsets[None, :]   # the library's normalised scores, S + h
        want = np.argsort(-lib, axis=1, kind="stable")[:, :5]
        same = got == want
        # float32 in the index: a swap is allowed only between scores equal to float32 precision
        swapped = np.take_along_axis(lib, got, 1)[~same] - np.take_along_axis(lib, want, 1)[~same]
        assert same.mean() > 0.99 and np.all(np.abs(swapped) < 1e-5)
    assert run(capsys, "check", out, "--source", SYN, *SMALL)[0] == 0


def test_an_export_without_faiss_is_served_exactly_from_its_rows(capsys, tmp_path, small):
    out = tmp_path / "exp"
    assert run(capsys, "export", SYN, *SMALL, "--direction", "i2t", "--method", "is", "--param", "tau=0.02",
               "--out", out)[0] == 0
    served = cli.ExportedIndex(out, "i2t")
    assert served.index is None
    d = small.directions["i2t"]
    norm = d.task.fit(hn.make_normalizer("is", tau=0.02))
    lib = dense(d) + norm.offsets[None, :]
    scores, idx = served.search(d.queries, 7)
    want = np.argsort(-lib, axis=1, kind="stable")[:, :7]
    assert np.mean(idx == want) > 0.99
    np.testing.assert_allclose(scores, np.take_along_axis(lib, idx, 1), atol=1e-5)
    with pytest.raises(ValueError, match="not in the export"):
        cli.ExportedIndex(out, "t2i")
    with pytest.raises(ValueError, match="larger than the number of targets"):
        served.search(d.queries, len(lib.T) + 1)
    with pytest.raises(ValueError, match="queries"):   # queries of another dimension than the exported targets
        served.search(d.queries[:, :-1], 3)


def test_check_detects_a_changed_bank_a_changed_file_and_a_changed_method(capsys, tmp_path):
    out = tmp_path / "exp"
    assert run(capsys, "export", SYN, *SMALL, "--method", "is", "--param", "tau=0.02", "--out", out)[0] == 0
    # the same test split, another training pool: the bank changed
    code, text, _ = run(capsys, "check", out, "--source", SYN, "--source-option", "n_test_images=40",
                        "--source-option", "n_train_images=100")
    assert code == 3 and "reference bank changed" in text
    man = json.loads((out / "manifest.json").read_text())
    man["params"] = {"tau": 0.05}
    (out / "manifest.json").write_text(json.dumps(man))
    code, text, _ = run(capsys, "check", out, "--source", SYN, *SMALL)
    assert code == 3 and "offsets refitted now differ" in text and "bank changed" not in text
    off = out / "t2i" / "offsets.npy"
    off.write_bytes(off.read_bytes()[:-8] + np.float64(1.0).tobytes())
    code, text, _ = run(capsys, "check", out)
    assert code == 3 and "does not match its sha256" in text
    with pytest.raises(ValueError, match="does not match its sha256"):
        cli.load_export(out)


def test_a_failed_export_leaves_the_folder_as_it_was_and_force_replaces_it_whole(capsys, tmp_path):
    out = tmp_path / "exp"
    assert run(capsys, "export", SYN, *SMALL, "--method", "nnn", "--param", "k=8", "--out", out, "--faiss")[0] == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    # i2t's query bank is 120 images: k=128 fails there, after t2i (600 captions) fitted
    code, _, err = run(capsys, "export", SYN, *SMALL, "--method", "nnn", "--param", "k=128", "--out", out, "--force")
    assert code == 2 and "i2t:" in err and "--param" in err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".exp.")]   # no temporary folder left
    code, _, err = run(capsys, "export", SYN, *SMALL, "--method", "is", "--out", out)
    assert code == 2 and "--force" in err
    man = run_json(capsys, "export", SYN, *SMALL, "--method", "is", "--out", out, "--force")
    assert man["params"]["tau"] == hn.make_normalizer("is").tau   # every parameter, the defaults too
    assert not list(out.rglob("index.faiss"))   # nothing of the old export remains
    assert run(capsys, "check", out, "--source", SYN, *SMALL)[0] == 0
    (out / "t2i" / "extra.npy").write_bytes(b"x")
    code, text, _ = run(capsys, "check", out)
    assert code == 3 and "extra.npy is not listed in the manifest" in text
    code, text, _ = run(capsys, "check", tmp_path / "nothing-here")
    assert code == 2


def test_the_one_line_form_of_a_bank():
    emb = {"kind": "embeddings", "split": "train", "query_bank": {"rows": 600, "sha256": "0123456789abcdef"},
           "target_bank": None}
    assert cli._short(emb) == "query_bank 600 rows sha256 0123456789ab"
    mats = {"kind": "score matrices", "matrices": {
        "query_bank x targets": {"file": "b.npy", "shape": [600, 40], "sha256": "fedcba9876543210"},
        "query_bank x target_bank": {"file": "c.npy", "shape": [600, 120], "sha256": "aaaabbbbccccdddd"}}}
    assert cli._short(mats) == ("query_bank x target_bank 600x120 sha256 aaaabbbbcccc, "
                                "query_bank x targets 600x40 sha256 fedcba987654")
    assert cli._short({"kind": "embeddings", "split": None}) == '{"kind": "embeddings", "split": null}'


def test_check_names_the_changed_bank_matrix_of_a_sims_folder(capsys, tmp_path, sims_folder):
    import shutil

    folder = tmp_path / "sims"
    shutil.copytree(sims_folder, folder)
    out = tmp_path / "exp"
    assert run(capsys, "export", f"sims:{folder}", "--method", "is", "--out", out)[0] == 0
    m = np.load(folder / "bank_rows.npy")
    m[0, 0] += 0.5
    np.save(folder / "bank_rows.npy", m)
    meta = json.loads((folder / "manifest.json").read_text())
    del meta["checksums"]
    (folder / "manifest.json").write_text(json.dumps(meta))
    code, text, _ = run(capsys, "check", out, "--source", f"sims:{folder}")
    assert code == 3 and "t2i: the reference bank changed" in text
    then, now = text.split("then: ")[1].split(")")[0].split("; now: ")
    import hashlib
    new_hash = hashlib.sha256((folder / "bank_rows.npy").read_bytes()).hexdigest()[:12]
    unchanged = [p for p in then.split(", ") if p.startswith("query_bank x target_bank")]
    assert unchanged and unchanged[0] in now                       # the other bank matrix: the same line
    assert f"query_bank x targets 600x40 sha256 {new_hash}" in now and new_hash not in then


def test_check_against_a_source_of_other_directions_is_a_mismatch(capsys, tmp_path):
    out = tmp_path / "exp"
    assert run(capsys, "export", SYN, *SMALL, "--method", "is", "--out", out)[0] == 0
    code, text, _ = run(capsys, "check", out, "--source", "synthetic:msrvtt", "--source-option", "n_train=50")
    assert code == 3 and "the source has no direction t2i" in text


def test_export_of_a_sims_folder_writes_offsets_only(capsys, tmp_path, sims_folder, small):
    out = tmp_path / "exp"
    man = run_json(capsys, "export", f"sims:{sims_folder}", "--method", "nnn", "--param", "k=8", "--out", out)
    assert set(man["directions"]["t2i"]["files"]) == {"offsets"}
    emb = small.directions["t2i"].task.fit(hn.make_normalizer("nnn", k=8))
    np.testing.assert_allclose(cli.load_export(out)["arrays"]["t2i"]["offsets"], emb.offsets, rtol=0, atol=1e-12)
    assert run(capsys, "check", out, "--source", f"sims:{sims_folder}")[0] == 0
    code, _, err = run(capsys, "export", f"sims:{sims_folder}", "--method", "nnn", "--out", tmp_path / "e2", "--faiss")
    assert code == 2 and "--faiss needs the target embeddings" in err


def test_the_provenance_of_a_sims_bank_is_each_bank_matrix_with_its_shape_file_and_sha256(capsys, tmp_path,
                                                                                         sims_folder):
    """The manifest's bank of a score-matrix source: every matrix but the test one, hashed (independently here by
    hashlib); a folder whose manifest lists no checksums gives the same hashes, computed from the files."""
    import hashlib
    import shutil

    def expected(folder):
        files = {("query_bank", "targets"): "bank_rows.npy", ("query_bank", "target_bank"): "bank_rows_x_bank_cols.npy"}
        return {"kind": "score matrices", "matrices": {
            f"{r} x {c}": {"file": f, "shape": list(np.load(folder / f, mmap_mode="r").shape),
                           "sha256": hashlib.sha256((folder / f).read_bytes()).hexdigest()}
            for (r, c), f in files.items()}}

    man = run_json(capsys, "export", f"sims:{sims_folder}", "--method", "is", "--out", tmp_path / "a")
    assert man["directions"]["t2i"]["bank"] == expected(sims_folder)
    bare = tmp_path / "bare"
    shutil.copytree(sims_folder, bare)
    meta = json.loads((bare / "manifest.json").read_text())
    del meta["checksums"]
    (bare / "manifest.json").write_text(json.dumps(meta))
    man = run_json(capsys, "export", f"sims:{bare}", "--method", "is", "--out", tmp_path / "b")
    assert man["directions"]["t2i"]["bank"] == expected(bare)


# ------------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("argv, message", [
    (["diagnose", "nosuchkind"], "source must look like"),
    (["diagnose", "sims:/no/such/folder"], "manifest"),
    (["diagnose", SYN, *SMALL, "--k", "0"], "--k must be a positive integer"),
    (["diagnose", SYN, *SMALL, "--k", "100"], "exceeds the gallery size"),
    (["diagnose", SYN, "--source-option", "oops"], "must be KEY=VALUE"),
    (["diagnose", SYN, *SMALL, "--direction", "t2v"], "has the directions"),
    (["choose", SYN, *SMALL, "--methods", "nnn,bogus"], "unknown method 'bogus'"),
    (["choose", SYN, *SMALL, "--methods", " , "], "--methods is empty"),
    (["choose", SYN, *SMALL, "--grid", "nnn.k"], "must be [METHOD.]PARAM=V1,V2"),
    (["choose", SYN, *SMALL, "--grid", "nnn.k=a,b"], "must be numbers"),
    (["choose", SYN, *SMALL, "--methods", "is", "--grid", "is.k=3"], "has no grid parameter 'k'"),
    (["export", SYN, *SMALL, "--method", "mp", "--out", "{tmp}/x"], "no per-target offsets"),
    (["export", SYN, *SMALL, "--method", "nnn", "--param", "k=-1", "--out", "{tmp}/x"], "k"),
    (["check", "{tmp}"], "no manifest.json"),
    (["check", "{tmp}/absent"], "does not exist"),
    (["choose", SYN, *SMALL, "--methods", "nnn", "--grid", "is.tau=0.1"], "is is not among --methods"),
    (["choose", SYN, *SMALL, "--methods", "nnn", "--grid", "foo.k=8"], "foo is not among --methods"),
    (["choose", SYN, *SMALL, "--methods", "is,sn", "--grid", "k=8"], "has no grid parameter 'k'"),
    (["choose", SYN, *SMALL, "--grid", "nnn.k=8", "--grid", "nnn.k=16"], "given twice"),
    (["export", SYN, *SMALL, "--method", "nnn", "--param", "k=8", "--param", "k=16", "--out", "{tmp}/x"],
     "--param k is given twice"),
    (["export", SYN, *SMALL, "--method", "nnn", "--param", "bogus=1", "--out", "{tmp}/x"],
     "--param bogus: nnn has no parameter 'bogus'"),
    (["export", SYN, *SMALL, "--method", "nnn", "--param", "k", "--out", "{tmp}/x"], "--param 'k' must be KEY=VALUE"),
    (["export", SYN, *SMALL, "--method", "nnn", "--out", "{tmp}/no/such/x"], "does not exist"),
    (["diagnose", SYN, *SMALL, "--html", "{tmp}"], "must name a file"),
    (["diagnose", SYN, *SMALL, "--html", "{tmp}/no/such/r.html"], "does not exist"),
    (["diagnose", SYN, "--source-option", "no_such_option=1"], "unknown generator option"),
    (["diagnose", "synthetic:msrvtt", "--source-option", "n_test_images=60"], "takes only n_train"),
])
def test_bad_input_exits_2_with_a_sentence(capsys, tmp_path, argv, message):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err and "Traceback" not in err


def test_a_bare_grid_parameter_applies_to_the_methods_that_have_it(capsys):
    rep = run_json(capsys, "choose", SYN, *SMALL, "--direction", "i2t", "--methods", "nnn,is", "--grid", "k=2,4",
                   "--grid", "nnn.alpha=0.5", "--grid", "tau=0.02", "--no-progress")
    points = [(r["method"], r["params"]) for r in rep["directions"][0]["table"]]
    assert points == [("nnn", {"alpha": 0.5, "k": 2}), ("nnn", {"alpha": 0.5, "k": 4}), ("is", {"tau": 0.02})]


def test_a_local_folder_runs_and_names_an_option_its_loader_lacks(capsys, tmp_path, small):
    data = small.data   # one row per caption: the image row repeated for each of its captions
    np.save(tmp_path / "image_embeddings.npy", data.items[data.caption_to_item].astype(np.float32))
    np.save(tmp_path / "text_embeddings.npy", data.captions.astype(np.float32))
    rep = run_json(capsys, "diagnose", f"local:{tmp_path}")
    assert rep["kind"] == "embeddings" and not rep["synthetic"] and rep["directions"][0]["n_targets"] == 20
    code, _, err = run(capsys, "diagnose", f"local:{tmp_path}", "--source-option", "no_such_option=1")
    assert code == 2 and "--source-option no_such_option: not an option of this source's loader" in err


def test_export_refuses_a_folder_of_other_files(capsys, tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    code, _, err = run(capsys, "export", SYN, *SMALL, "--method", "nnn", "--out", tmp_path)
    assert code == 2 and "not a hubnorm export" in err and (tmp_path / "keep.txt").read_text() == "mine"
    code, _, err = run(capsys, "export", SYN, *SMALL, "--method", "nnn", "--out", tmp_path / "keep.txt")
    assert code == 2 and "is a file" in err


def test_the_console_script_is_declared():
    import tomllib

    toml = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert toml["project"]["scripts"]["hubnorm"] == "hubnorm.cli:main"


# ------------------------------------------------------------------------------------------------ real data
@pytest.mark.shared_data
def test_the_three_commands_on_a_real_release(capsys, tmp_path, monkeypatch):
    from conftest import shared_path

    monkeypatch.setenv("HUBNORM_REAL_MIRROR", str(shared_path(*REAL_MIRROR)))
    monkeypatch.setenv("HUBNORM_CACHE", str(tmp_path / "cache"))
    src = "real:coco500-clip-b16"
    rep = run_json(capsys, "diagnose", src)
    assert not rep["synthetic"] and rep["directions"][0]["n_targets"] == 250
    s = cli.open_source(src)
    n_k = dense_n_k(dense(s.directions["t2i"]), 10)
    assert rep["directions"][0]["hubness"]["skewness"] == pytest.approx(stats.skew(n_k.astype(float)), abs=1e-9)
    rep = run_json(capsys, "choose", src, "--methods", "nnn,is", "--grid", "nnn.k=4,16", "--grid", "nnn.alpha=0.75",
                   "--no-progress")
    assert {d["direction"] for d in rep["directions"]} == {"t2i", "i2t"}
    out = tmp_path / "exp"
    man = run_json(capsys, "export", src, "--method", "nnn", "--param", "k=16", "--param", "alpha=0.75", "--out", out)
    # the whole training split is the bank (250 of the 500 pairs; no validation split held out of it)
    assert man["directions"]["t2i"]["bank"]["query_bank"]["rows"] == 250
    assert run(capsys, "check", out, "--source", src)[0] == 0
    code, text, _ = run(capsys, "check", out, "--source", src, "--seed", "1")   # another split: another bank
    assert code == 3 and "reference bank changed" in text


@pytest.mark.shared_data
def test_the_docs_page_shows_what_the_commands_print_now(monkeypatch, tmp_path):
    """docs/cli.md's example outputs are written by scripts/cli_examples.py; a change of the command's numbers or
    words that the page does not show fails here (run the script to rewrite the page)."""
    import importlib.util

    from conftest import shared_path

    monkeypatch.setenv("HUBNORM_REAL_MIRROR", str(shared_path(*REAL_MIRROR)))
    monkeypatch.setenv("HUBNORM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HUBNORM_PROGRESS", "0")
    path = Path(__file__).resolve().parents[1] / "scripts" / "cli_examples.py"
    spec = importlib.util.spec_from_file_location("cli_examples", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--check"]) == 0, "docs/cli.md is stale: run .venv/bin/python scripts/cli_examples.py"


@pytest.mark.parametrize("value, message", [
    ("abc", r"--source-option seed must be a non-negative integer; got str 'abc'"),
    ("-1", r"--source-option seed must be in \[0, 2\*\*63\); got -1"),
])
def test_a_bad_seed_option_is_named_as_given(capsys, value, message):
    code, _, err = run(capsys, "diagnose", "synthetic:flickr30k", *SMALL, "--source-option", f"seed={value}")
    assert code == 2 and re.search(message, err), err


def test_python_m_hubnorm_is_the_command():
    out = subprocess.run([sys.executable, "-m", "hubnorm", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("usage: hubnorm ") and "diagnose" in out.stdout
