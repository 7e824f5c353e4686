"""Fast unit tests of the protocol, study, comparison and notebook helpers behind the notebooks."""

import numpy as np
import pandas as pd
import pytest

import hubnorm as hn
from hubnorm import geometry
from hubnorm_companion import compare, notebook, protocol as ex, studies
from hubnorm.embeddings import EmbeddingDataset, EmbeddingSplit


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


def test_reference_split_notes_a_small_bank_unless_told_not_to(ds, capsys):
    bank = ex.reference_split(ds, "train", 0.5, seed=1)
    assert "NOTE: the reference bank has only 30 images" in capsys.readouterr().out
    quiet = ex.reference_split(ds, "train", 0.5, seed=1, note_small=False)
    assert capsys.readouterr().out == ""
    np.testing.assert_array_equal(bank.images, quiet.images)


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


def test_params_per_direction_and_k_clamped_to_the_bank_with_a_note(ds, capsys):
    tasks = ex.make_tasks(ds.split("test"), ex.reference_split(ds, "train", 0.1))  # 6 bank images
    assert "NOTE: the reference bank has only 6 images" in capsys.readouterr().out
    df = ex.run_methods(tasks, ["nnn"], {"t2i": {"nnn": {"k": 2}}, "i2t": {"nnn": {"k": 512}}}, show_progress=False)
    assert list(df["params"]) == ["k=2", "k=6"]
    assert "k=512 is larger than this task allows (6); using k=6" in capsys.readouterr().out


def test_the_notebooks_clamp_grid_is_the_librarys():
    assert ex.clamp_grid is hn.clamp_grid   # tested in test_selection


def test_select_and_evaluate_agrees_with_grid_search(ds):
    val = ex.make_tasks(ds.split("val"), ds.split("train"))
    test = ex.make_tasks(ds.split("test"), ds.split("train"))
    grids = {"nnn": {"alpha": [0.25, 0.5, 1.0], "k": [1, 2, 8]}, "dn": {"lam": [0.25, 0.75]}}
    res, sel = ex.select_and_evaluate(val, test, ["raw", "dn", "nnn", "csls"], grids, reuse={},
                                      show_progress=False)
    for d in ("t2i", "i2t"):
        for m in ("nnn", "dn"):
            gs = hn.grid_search(m, val[d], grids[m], engine="reference")
            row = sel[(sel["direction"] == d) & (sel["method"] == m)].iloc[0]
            assert row["val R@1"] == pytest.approx(gs.best_score)
            assert row["chosen"] == ex.fmt_params(gs.best_params)
    assert len(res) == 8 and sel.loc[sel["method"] == "raw", "grid points"].eq(0).all()
    assert set(sel.loc[sel["method"] == "nnn", "engine"]) == {"sweep"}
    assert set(sel.loc[sel["method"] == "dn", "engine"]) == {"reference"}


def test_select_parameters_returns_what_the_notebooks_fit(ds):
    """The notebooks' select -> fit -> evaluate, written out, gives select_and_evaluate's numbers."""
    val = ex.make_tasks(ds.split("val"), ds.split("train"))
    test = ex.make_tasks(ds.split("test"), ds.split("train"))
    grids = {"nnn": {"alpha": [0.25, 1.0], "k": [1, 8]}, "x": {"alpha": [0.5, 1.0], "k": [2]}}
    sel = ex.select_parameters(val, {"raw": "raw", "nnn": "nnn", "x": "nnn"}, grids, extra={"setting": "s"},
                               show_progress=False)
    assert list(sel["normalizer"]) == ["raw", "nnn", "nnn"] * 2 and set(sel["setting"]) == {"s"}
    for d in ("t2i", "i2t"):
        row = sel[(sel["direction"] == d) & (sel["method"] == "nnn")].iloc[0]
        assert row["params"] == hn.grid_search("nnn", val[d], grids["nnn"]).best_params
    res, _ = ex.select_and_evaluate(val, test, {"raw": "raw", "nnn": "nnn", "x": "nnn"}, grids, show_progress=False)
    for r in sel.itertuples():
        task = test[r.direction]
        mine = hn.evaluate(task.fit(hn.make_normalizer(r.normalizer, **r.params)), task)
        theirs = res[(res["direction"] == r.direction) & (res["method"] == r.method)].iloc[0]
        assert mine["R@1"] == theirs["R@1"] and ex.fmt_params(r.params) == theirs["params"]


def test_select_and_evaluate_reuse_copies_the_choice(ds):
    val = ex.make_tasks(ds.split("val"), ds.split("train"))
    res, sel = ex.select_and_evaluate(val, val, ["dualis", "dualdis"],
                                      {"dualis": {"beta_query": [10.0, 50.0], "beta_target": [0.0]}},
                                      reuse={"dualdis": "dualis"}, show_progress=False)
    p = res.set_index(["direction", "method"])["params"]
    assert p[("t2i", "dualdis")] == p[("t2i", "dualis")]


def test_dual_bank_gap_is_smaller_than_the_test_gallery_gap(ds):
    """Notebook 04 part B's gap: DBSN's extended gallery [T ; B_t] holds each bank caption's own training image,
    so the bank is closer to it than to the test gallery (DBSN Proposition 2)."""
    task = ex.make_tasks(ds.split("test"), ds.split("train"), directions=["t2i"])["t2i"]
    bank = studies.subsample_rows(task.query_bank, 0.25, seed=1)
    assert len(bank) == 75 and len(studies.subsample_rows(task.query_bank, 1.0, seed=0)) == 300
    plain = geometry.nn_gap(bank, task.targets)
    extended = geometry.nn_gap(bank, np.concatenate([task.targets, task.target_bank]))
    assert 0 <= extended < plain and geometry.nn_gap(task.queries, bank) >= 0
    x = np.eye(3)
    assert geometry.nn_gap(x, x) == pytest.approx(0.0)
    assert geometry.centroid_distance(x, x) == pytest.approx(0.0)


def test_iteration_sweeps(ds):
    test = ds.split("test")
    task = ex.make_tasks(test, ds.split("train"), directions=["t2i"])["t2i"]
    it = studies.sinkhorn_iterations(task, ["sn"], iterations=[1, 10], converged=200, tol=1e-6, show_progress=False)
    assert list(it["setting"]) == ["T=1", "T=10", "to convergence"]
    assert it["iterations run"].iloc[-1] <= 200


def test_occurrence_frame_counts(ds):
    task = ex.make_tasks(ds.split("test"), ds.split("train"))["t2i"]
    occ = studies.occurrence_frame({"raw": task.fit(hn.make_normalizer("raw"))}, task, k=1)
    assert occ["N_k"].sum() == task.n_queries
    st = studies.occurrence_stats(occ, 1, task.n_queries)
    assert st.loc[0, "expected"] == pytest.approx(5.0)


def test_published_side_by_side_and_labels(ds, capsys, monkeypatch):
    monkeypatch.setitem(notebook._RECORD, "file", None)   # print only: not into the claims file an earlier test's
    #                                                       run set up (its temporary folder may be gone)
    pub = compare.published("nnn-chowdhury2024", ["A6"], model="CLIP", dataset="flickr30k", metric="R@1")
    assert set(pub["method"]) == {"raw", "dn", "dualis", "dualdis", "nnn"}
    assert pub.set_index("method").loc["nnn", "value"] == pytest.approx(64.60)
    ours = pd.DataFrame({"direction": ["t2i"], "method": ["nnn"], "setting": ["bank=flickr30k train 20%"],
                         "metric": ["R@1"], "value": [50.0]})
    out = compare.side_by_side(ours, pub, ["direction", "method", "setting", "metric"], label=ex.run_label(ds),
                          source_note="Table A6")
    row = out[out["method"] == "nnn"].iloc[0]
    assert row["published"] == pytest.approx(64.60) and row["this run"] == 50.0
    assert row["run"].startswith("synthetic analog")
    notebook.check("a claim", True, "1.00 -> 2.00")
    notebook.check("another", False)
    assert capsys.readouterr().out == "PASS: a claim [1.00 -> 2.00]\nDIFFERS: another\n"


def test_dataset_key():
    assert ex.dataset_key("synthetic:flickr30k") == "flickr30k"
    assert ex.dataset_key("cache:coco:ViT-B-32-quickgelu:openai") == "coco"


def test_published_numbers_have_the_columns_and_no_duplicates():
    from hubnorm_companion.reporting import PUBLISHED_COLUMNS, load_published
    df = load_published()
    assert list(df.columns[: len(PUBLISHED_COLUMNS)]) == PUBLISHED_COLUMNS
    for paper in ("nnn-chowdhury2024", "dbsn-pan2025"):
        sub = df[df["paper"] == paper]
        assert len(sub) > 100 and sub["value"].notna().all()
        assert not sub.duplicated(["table", "model", "dataset", "direction", "setting", "method", "metric"]).any()


def test_own_data_sizes_never_reach_a_real_loader(tmp_path, capsys):
    """`synthetic_sizes` are for the generator only; a real run is never paired with a synthetic bank."""
    rng = np.random.default_rng(0)
    imgs = hn.l2_normalize(rng.standard_normal((30, 8))).astype(np.float32)
    caps = hn.l2_normalize(np.repeat(imgs, 2, axis=0) + 0.3 * rng.standard_normal((60, 8))).astype(np.float32)
    np.save(tmp_path / "image_embeddings.npy", np.repeat(imgs, 2, axis=0))  # one image row per caption
    np.save(tmp_path / "text_embeddings.npy", caps)
    ds = ex.prepare_dataset(f"local:{tmp_path}", synthetic_sizes={"n_train_images": 5000})
    assert ds.source == "real" and {"train", "val", "test"} <= set(ds.splits)
    assert ex.run_label(ds).startswith("real data")
    assert ex.cross_dataset_source(ds, "auto") is None
    assert ex.cross_dataset_source(ds, "synthetic:coco") is None
    out = capsys.readouterr().out
    assert "no cross-dataset rows" in out and "is synthetic but this run is on real data" in out
    syn = ex.prepare_dataset("synthetic:flickr30k", synthetic_sizes={"n_train_images": 60, "n_test_images": 20},
                             seed=0)
    assert ex.cross_dataset_source(syn, "auto") == "synthetic:coco"
    assert ex.run_label(syn) == ("synthetic analog (synthetic-flickr30k, seed 0, 20 test images x 5 captions; "
                                 "banks from 60 training images x 5 captions)")
    # one label, one size: the same preset at two test sizes gets two labels (issue 46, item 4)
    other = ex.prepare_dataset("synthetic:flickr30k", synthetic_sizes={"n_train_images": 60, "n_test_images": 30},
                               seed=0)
    assert ex.run_label(other) != ex.run_label(syn) and "30 test images" in ex.run_label(other)
    # ... and the same test split with another pool of banks too
    pool = ex.prepare_dataset("synthetic:flickr30k", synthetic_sizes={"n_train_images": 90, "n_test_images": 20},
                              seed=0)
    assert ex.run_label(pool) != ex.run_label(syn) and "banks from 90 training images" in ex.run_label(pool)
    assert ex.test_size(ds) == f"{ds.split('test').n_images:,} test images x 2 captions"
    assert ex.run_label(ds).endswith(f", {ex.data_size(ds)})") and ex.data_size(ds).startswith(ex.test_size(ds))


def test_notebook_setup_and_outputs(tmp_path, monkeypatch):
    monkeypatch.setenv("HUBNORM_RESULTS", str(tmp_path))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch
    before = torch.get_num_threads()
    run = notebook.setup("07", seed=3, threads=before)
    assert run.prefix == "07" and run.seed == 3
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    assert run.save_figure(fig, "line", data="d", bank="none") is None
    run.save_table(pd.DataFrame({"a": [1.234]}), "tab", data="d", bank="none")
    assert (tmp_path / "figures" / "07_line.png").exists() and (tmp_path / "figures" / "07_line.pdf").exists()
    assert (tmp_path / "tables" / "07_tab.md").read_text().strip().endswith("1.23 | d      | none   |")
    assert pd.read_csv(tmp_path / "tables" / "07_tab.csv").columns.tolist() == ["a", "data", "bank"]
    with pytest.raises(ValueError, match="prefix"):
        notebook.setup("")
    with pytest.raises(TypeError, match="seed"):
        notebook.setup("01", seed="0")
    monkeypatch.setenv("HUBNORM_THREADS", "many")
    with pytest.raises(ValueError, match="HUBNORM_THREADS"):
        notebook.setup("01")


def test_published_files_have_the_columns():
    from hubnorm_companion.reporting import PUBLISHED_COLUMNS, PUBLISHED_DIR
    for name in ("nnn_chowdhury2024.csv", "dbsn_pan2025.csv"):
        with (PUBLISHED_DIR / name).open("r", encoding="utf-8") as fh:   # package data (importlib.resources)
            df = pd.read_csv(fh)
        assert list(df.columns) == PUBLISHED_COLUMNS
        assert df["value"].notna().all()
        assert not df.duplicated(["paper", "table", "model", "dataset", "direction", "setting", "method", "metric"]).any()


def test_published_model_follows_the_embeddings(ds, capsys):
    assert ex.published_model(ds, "auto") == "CLIP"                 # synthetic: calibrated to CLIP ViT-B/32
    assert ex.published_model(ds, "auto", paper="dbsn") == "zs CLIP"
    assert ex.published_model(ds, "SigLIP") == "SigLIP"             # an explicit name is kept
    real = EmbeddingDataset(name="x", source="real", splits=ds.splits, meta={"model": "ViT-B-16-SigLIP",
                                                                           "pretrained": "webli"})
    assert ex.published_model(real, "auto") == "SigLIP"
    real.meta = {"model": "openai/clip-vit-base-patch32"}
    assert ex.published_model(real, "auto") == "CLIP"
    real.meta = {"model": "my-own-model"}
    assert ex.published_model(real, "auto") is None
    assert "report no rows for the model 'my-own-model'" in capsys.readouterr().out


def test_fmt_params_leaves_out_execution_options():
    """The params column of a table names what changes rankings, not memory or device settings."""
    from hubnorm_companion.protocol import fmt_params
    assert fmt_params({"tau": 0.01, "cache_bytes": 2**31, "device": "cpu", "n_iter": 10}) == "tau=0.01, n_iter=10"


def test_cross_dataset_partner_comes_from_the_registry(monkeypatch, capsys):
    """"auto" pairs a synthetic run with the synthetic preset of the registry's ``cross_dataset`` partner, keeping
    the generator family; no partner (or no preset for it) means no cross-dataset rows, said in a NOTE."""
    from hubnorm.data import registry

    for name, info in registry.DATASETS.items():   # every declared partner is a data set the loaders know
        partner = info.get("cross_dataset")
        assert partner is None or (partner in registry.DATASETS and partner != name)
    assert registry.cross_dataset("flickr30k") == "coco" and registry.cross_dataset("coco") == "flickr30k"
    assert registry.cross_dataset("flickr8k") is None and registry.cross_dataset("no-such-set") is None
    syn = ex.prepare_dataset("synthetic:coco-isotropic", seed=0,
                             synthetic_sizes={"n_train_images": 40, "n_val_images": 10, "n_test_images": 10})
    assert ex.cross_dataset_source(syn, "auto") == "synthetic:flickr30k-isotropic"
    monkeypatch.setitem(registry.DATASETS, "coco", {**registry.DATASETS["coco"], "cross_dataset": "flickr8k"})
    capsys.readouterr()
    assert ex.cross_dataset_source(syn, "auto") is None   # no synthetic flickr8k preset
    assert "names no partner of 'coco' with a synthetic preset" in capsys.readouterr().out
    assert ex.cross_dataset_source(syn, "synthetic:flickr30k") == "synthetic:flickr30k"   # explicit is kept


# ------------------------------------------------------------------------------------------------ the real column
def test_real_sources_resolve_the_parameter():
    assert ex.real_sources(["auto"], "synthetic:flickr30k") == ["real:coco500-clip-b16", "real:flickr8k-100x5-clip-b32"]
    assert ex.real_sources(["auto"], "synthetic:msrvtt", modality="audio") == ["real:audiocaps-clap"]
    assert ex.real_sources(["auto"], "local:/data/mine") == []   # a real run is its own real column
    assert ex.real_sources([], "synthetic:coco") == []
    assert ex.real_sources(["real:coco500-clip-b16"], "local:/x") == ["real:coco500-clip-b16"]
    with pytest.raises(ValueError, match="real_sources must be .*coco500-clip-b16"):
        ex.real_sources(["real:nope"], "synthetic:coco")
    with pytest.raises(ValueError, match="real_sources must be"):
        ex.real_sources(["coco500-clip-b16"], "synthetic:coco")
    with pytest.raises(ValueError, match="modality must be one of"):
        ex.real_sources(["auto"], "synthetic:coco", modality="video")


def test_the_real_column_reads_only_the_cache_and_says_once_what_is_missing(tmp_path, monkeypatch, capsys):
    """Nothing is downloaded inside a notebook: without the cached files, no data set and one NOTE naming the
    missing releases and the command that fetches them."""
    from hubnorm_companion.reporting import REAL_MISSING_NOTE

    monkeypatch.setenv("HUBNORM_CACHE", str(tmp_path / "empty"))
    monkeypatch.setattr("hubnorm.data.real.URL_BASE", "http://127.0.0.1:9")   # any download attempt fails loudly
    got = ex.load_real_sets(["real:coco500-clip-b16", "real:flickr8k-100x5-clip-b32"])
    out = capsys.readouterr().out
    assert got == {}
    notes = [ln for ln in out.splitlines() if ln.startswith("NOTE:")]
    assert len(notes) == 1 and notes[0].startswith(REAL_MISSING_NOTE), out
    assert "coco500-clip-b16, flickr8k-100x5-clip-b32" in notes[0] and "python -m hubnorm.data fetch-real" in notes[0]


@pytest.mark.shared_data
def test_the_real_column_loads_cached_releases_under_their_labels(tmp_path, monkeypatch, capsys):
    from conftest import shared_path
    from hubnorm.data.real import fetch_real

    mirror = shared_path("embeddings")
    monkeypatch.setenv("HUBNORM_CACHE", str(tmp_path / "cache"))
    fetch_real("coco500-clip-b16", mirror=mirror, progress=False)
    got = ex.load_real_sets(["real:coco500-clip-b16", "real:flickr8k-100x5-clip-b32"], seed=0)
    label = "real: COCO val2017, 500 pairs, CLIP ViT-B/16 (250 test images; banks from 167 training images)"
    assert list(got) == [label]   # the other one is not cached: a NOTE
    assert "flickr8k-100x5-clip-b32" in capsys.readouterr().out
    ds = got[label]
    assert ds.source == "real" and {s: ds.split(s).n_images for s in ds.splits} == {"test": 250, "val": 83, "train": 167}
    x = ds.split("test").images
    assert x.dtype == np.float64 and np.allclose(np.linalg.norm(x, axis=1), 1.0)
    assert ex.run_label(ds) == label   # the release's own label, with the sizes of this run's split
