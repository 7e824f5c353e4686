"""Fast unit tests of hubnorm.experiments (the helpers behind the notebooks)."""

import numpy as np
import pandas as pd
import pytest

import hubnorm as hn
from hubnorm import experiments as ex
from hubnorm.datasets import EmbeddingDataset, EmbeddingSplit


def _split(rng, n_img, caps=5, d=16, noise=0.6):
    imgs = hn.l2_normalize(rng.standard_normal((n_img, d)))
    c2i = np.repeat(np.arange(n_img), caps)
    capt = hn.l2_normalize(imgs[c2i] + noise * rng.standard_normal((n_img * caps, d)))
    return EmbeddingSplit(images=imgs, captions=capt, caption_to_image=c2i)


@pytest.fixture
def ds():
    rng = np.random.default_rng(0)
    return EmbeddingDataset(name="toy", source="synthetic",
                            splits={"train": _split(rng, 60), "val": _split(rng, 20), "test": _split(rng, 20)},
                            meta={"seed": 0})


def test_reference_split_takes_images_with_all_their_captions(ds):
    bank = ex.reference_split(ds, "train", 0.2, seed=1)
    assert bank.n_images == 12 and bank.n_captions == 60
    again = ex.reference_split(ds, "train", 0.2, seed=1)
    np.testing.assert_array_equal(bank.images, again.images)
    assert ex.reference_split(ds, "train", 1.0) is ds.split("train")
    with pytest.raises(ValueError):
        ex.reference_split(ds, "train", 0.0)


def test_make_tasks_puts_captions_and_images_in_the_right_banks(ds):
    bank = ds.split("train")
    tasks = ex.make_tasks(ds.split("test"), bank)
    assert tasks["t2i"].query_bank is bank.captions and tasks["t2i"].target_bank is bank.images
    assert tasks["i2t"].query_bank is bank.images and tasks["i2t"].target_bank is bank.captions


def test_run_methods_matches_evaluate_and_is_tidy(ds):
    tasks = ex.make_tasks(ds.split("test"), ds.split("train"))
    df = ex.run_methods(tasks, ["raw", "nnn"], {"nnn": {"alpha": 0.5, "k": 4}}, n_boot=20, hubness_k=(5,),
                        show_progress=False, extra={"setting": "x"})
    assert list(df["direction"]) == ["t2i", "t2i", "i2t", "i2t"]
    assert {"R@1", "R@1 lo", "R@1 hi", "skewness@5", "setting", "params"} <= set(df.columns)
    direct = hn.evaluate(tasks["i2t"].fit(hn.make_normalizer("nnn", alpha=0.5, k=4)), tasks["i2t"])
    row = df[(df["direction"] == "i2t") & (df["method"] == "nnn")].iloc[0]
    assert row["R@1"] == direct["R@1"] and row["params"] == "alpha=0.5, k=4"
    assert (df["R@1 lo"] <= df["R@1"]).all() and (df["R@1"] <= df["R@1 hi"]).all()


def test_params_per_direction_and_k_clamped_to_the_bank(ds):
    tasks = ex.make_tasks(ds.split("test"), ex.reference_split(ds, "train", 0.1))  # 6 bank images
    df = ex.run_methods(tasks, ["nnn"], {"t2i": {"nnn": {"k": 2}}, "i2t": {"nnn": {"k": 512}}}, show_progress=False)
    assert list(df["params"]) == ["k=2", "k=6"]


def test_nnn_grid_equals_refitting_every_point(ds):
    task = ex.make_tasks(ds.split("val"), ds.split("train"))["t2i"]
    grid = ex.nnn_grid(task, [0.25, 1.0], [1, 4], show_progress=False)
    for _, r in grid.iterrows():
        ref = hn.evaluate(task.fit(hn.make_normalizer("nnn", alpha=r["alpha"], k=int(r["k"]))), task)
        assert r["R@1"] == pytest.approx(ref["R@1"]) and r["MnR"] == pytest.approx(ref["MnR"])


def test_select_and_evaluate_agrees_with_grid_search(ds):
    val = ex.make_tasks(ds.split("val"), ds.split("train"))
    test = ex.make_tasks(ds.split("test"), ds.split("train"))
    grids = {"nnn": {"alpha": [0.25, 0.5, 1.0], "k": [1, 2, 8]}, "dn": {"lam": [0.25, 0.75]}}
    res, sel = ex.select_and_evaluate(val, test, ["raw", "dn", "nnn", "csls"], grids, reuse={},
                                      show_progress=False)
    for d in ("t2i", "i2t"):
        for m in ("nnn", "dn"):
            gs = hn.grid_search(m, val[d], grids[m], progress=False)
            row = sel[(sel["direction"] == d) & (sel["method"] == m)].iloc[0]
            assert row["val R@1"] == pytest.approx(gs.best_score)
            assert row["chosen"] == ex.fmt_params(gs.best_params)
    assert len(res) == 8 and sel.loc[sel["method"] == "raw", "grid points"].eq(0).all()


def test_select_and_evaluate_reuse_copies_the_choice(ds):
    val = ex.make_tasks(ds.split("val"), ds.split("train"))
    res, sel = ex.select_and_evaluate(val, val, ["dualis", "dualdis"],
                                      {"dualis": {"beta_query": [10.0, 50.0], "beta_target": [0.0]}},
                                      reuse={"dualdis": "dualis"}, show_progress=False)
    p = res.set_index(["direction", "method"])["params"]
    assert p[("t2i", "dualdis")] == p[("t2i", "dualis")]


def test_query_bank_sweep_and_gaps(ds):
    task = ex.make_tasks(ds.split("test"), ds.split("train"), directions=["t2i"])["t2i"]
    df = ex.query_bank_sweep(task, [1.0, 0.25], {"IS": "is", "DBSN": "dbsn"}, {"DBSN": {"n_iter": 3}},
                             seeds=[0, 1], hubness_k=3, show_progress=False)
    assert len(df) == 6 and set(df["bank_queries"]) == {300, 75}  # the whole bank is drawn once
    assert ((df["gap bank->targets"] >= 0) & (df["gap test queries->bank"] >= 0)).all()
    # DBSN's extended gallery contains each bank caption's own training image: a smaller gap than the test gallery
    g = df[df["fraction"] == 1.0].set_index("method")["gap bank->targets"]
    assert g["DBSN"] < g["IS"]
    x = np.eye(3)
    assert ex.nn_gap(x, x) == pytest.approx(0.0)
    assert ex.centroid_distance(x, x) == pytest.approx(0.0)


def test_bank_fraction_tau_and_iteration_sweeps(ds):
    test = ds.split("test")
    sw = ex.bank_fraction_sweep(ds, test, [1.0, 0.5], ["nnn"], {"nnn": {"k": 2}}, show_progress=False)
    assert list(sw["bank_fraction"]) == [1.0, 1.0, 0.5, 0.5]
    task = ex.make_tasks(test, ds.split("train"), directions=["t2i"])["t2i"]
    ts = ex.tau_sweep(task, ["is", "sn"], [0.01, 0.02], query_aware=True, show_progress=False)
    assert len(ts) == 4 and set(ts["bank"]) == {"test queries (query-aware)"}
    it = ex.sinkhorn_iterations(task, ["sn"], iterations=[1, 10], converged=200, tol=1e-6, show_progress=False)
    assert list(it["setting"]) == ["T=1", "T=10", "to convergence"]
    assert it["iterations run"].iloc[-1] <= 200


def test_occurrence_frame_counts(ds):
    task = ex.make_tasks(ds.split("test"), ds.split("train"))["t2i"]
    occ = ex.occurrence_frame({"raw": task.fit(hn.make_normalizer("raw"))}, task, k=1)
    assert occ["N_k"].sum() == task.n_queries
    st = ex.occurrence_stats(occ, 1, task.n_queries)
    assert st.loc[0, "expected"] == pytest.approx(5.0)


def test_published_side_by_side_and_labels(ds, capsys):
    pub = ex.published("nnn-chowdhury2024", ["A6"], model="CLIP", dataset="flickr30k", metric="R@1")
    assert set(pub["method"]) == {"raw", "dn", "dualis", "dualdis", "nnn"}
    assert pub.set_index("method").loc["nnn", "value"] == pytest.approx(64.60)
    ours = pd.DataFrame({"direction": ["t2i"], "method": ["nnn"], "setting": ["bank=flickr30k train 20%"],
                         "metric": ["R@1"], "value": [50.0]})
    out = ex.side_by_side(ours, pub, ["direction", "method", "setting", "metric"], label=ex.run_label(ds),
                          source_note="Table A6")
    row = out[out["method"] == "nnn"].iloc[0]
    assert row["published"] == pytest.approx(64.60) and row["this run"] == 50.0
    assert row["run"].startswith("synthetic analog")
    ex.check("a claim", True, "1.00 -> 2.00")
    ex.check("another", False)
    assert capsys.readouterr().out == "PASS: a claim [1.00 -> 2.00]\nDIFFERS: another\n"


def test_dataset_key():
    assert ex.dataset_key("synthetic:flickr30k") == "flickr30k"
    assert ex.dataset_key("cache:coco:ViT-B-32-quickgelu:openai") == "coco"


def test_published_files_have_the_columns():
    from hubnorm.reporting import PUBLISHED_COLUMNS, PUBLISHED_DIR
    for name in ("nnn_chowdhury2024.csv", "dbsn_pan2025.csv"):
        with (PUBLISHED_DIR / name).open("r", encoding="utf-8") as fh:   # package data (importlib.resources)
            df = pd.read_csv(fh)
        assert list(df.columns) == PUBLISHED_COLUMNS
        assert df["value"].notna().all()
        assert not df.duplicated(["paper", "table", "model", "dataset", "direction", "setting", "method", "metric"]).any()
