"""The synthetic video / audio presets (hubnorm.media): sizes, labels, and the sources notebook 08 reads."""

from __future__ import annotations

import numpy as np
import pytest

import hubnorm as hn
from hubnorm import media, synthetic


def test_presets_have_the_datasets_sizes():
    p = media.MEDIA_PRESETS
    assert (p["msrvtt"].n_train, p["msrvtt"].train_captions, p["msrvtt"].n_test, p["msrvtt"].test_captions) == (9000, 20, 1000, 1)
    assert (p["audiocaps"].test_captions, p["clotho"].test_captions, p["clotho"].train_captions) == (5, 5, 5)
    assert p["msrvtt"].directions == ("t2v", "v2t") and p["clotho"].directions == ("t2a", "a2t")


def test_make_media_and_tasks():
    d = media.make_media("msrvtt", n_train=12, n_test=30)
    assert d.items.shape[0] == 30 and d.captions.shape[0] == 30 and d.bank_captions.shape[0] == 12 * 20
    assert d.bank_items.shape[0] == 12 and list(d.caption_to_item) == list(range(30))
    a = media.make_media("clotho", n_train=0, n_test=20)
    assert a.captions.shape[0] == 100 and a.bank_items is None and np.all(a.caption_to_item == np.arange(20).repeat(5))
    src = media.load_media("synthetic:msrvtt", n_train=12, bank_queries=50, target_bank=10)
    assert src.directions == ("t2v", "v2t") and src.label.startswith("synthetic analog (synthetic-msrvtt")
    t = src.tasks["t2v"]
    assert (t.size("query_bank"), t.size("target_bank")) == (50, 10)
    assert src.tasks["v2t"].size("query_bank") == 12 and src.tasks["v2t"].size("target_bank") == 10
    assert (src.dataset, src.model) == ("msr-vtt", "CLIP4Clip")


def test_synthetic_is_refused_when_forbidden(monkeypatch):
    monkeypatch.setenv("HUBNORM_FORBID_SYNTHETIC", "1")
    with pytest.raises(RuntimeError, match="HUBNORM_FORBID_SYNTHETIC"):
        media.make_media("msrvtt", n_train=0, n_test=10)


def test_bad_sources_are_named():
    with pytest.raises(ValueError, match="^source must look like 'synthetic:<preset>', "):
        media.load_media("msrvtt")
    with pytest.raises(ValueError, match="unknown video/audio preset"):
        media.make_media("youtube")
    assert media.published_dataset("MSR-VTT 1k-A") == "msr-vtt" and media.published_dataset("mine") is None


def test_a_local_folder_declares_its_data_set_never_its_name(tmp_path):
    """Notebook 08's published rows follow what a local: folder declares (model_info.json "dataset"), never words
    in the folder's name (a folder called flickr8k-... once gave the Flickr30k rows)."""
    import json
    import shutil

    from local_folders import make_folder

    folder = tmp_path / "flickr8k-msrvtt-100x5"          # names two data sets: neither is a declaration
    shutil.copytree(make_folder(tmp_path, "percap5-texts-clip"), folder)
    assert media.load_media(f"local:{folder}").dataset is None
    info = json.loads((folder / "model_info.json").read_text())
    (folder / "model_info.json").write_text(json.dumps({**info, "dataset": "MSR-VTT 1k-A"}))
    assert media.load_media(f"local:{folder}").dataset == "msr-vtt"
    assert media.load_media(f"local:{folder}", dataset="didemo").dataset == "didemo"


def test_a_sims_folder_declares_its_data_set_never_its_name(tmp_path):
    """Issue 44: a sims folder without a declared dataset got the published rows its folder's name suggested (a
    folder msrvtt_mine got CLIP4Clip's MSR-VTT numbers beside it)."""
    import json

    from test_sims import write_example

    folder = tmp_path / "msrvtt_mine"
    write_example(folder)
    man = json.loads((folder / "manifest.json").read_text())
    del man["dataset"]
    (folder / "manifest.json").write_text(json.dumps(man))
    assert media.load_media(f"sims:{folder}").dataset is None
    (folder / "manifest.json").write_text(json.dumps({**man, "dataset": "MSR-VTT 1k-A"}))
    assert media.load_media(f"sims:{folder}").dataset == "msr-vtt"


def test_local_embeddings_are_normalised_and_checked_as_in_every_notebook(tmp_path):
    """Issue 44: notebook 08 took local: embeddings as they were (changing vector lengths dropped IS R@1 from 100
    to 66.7; a zero vector was accepted); now the rule of prepare_dataset: unit rows, a zero row an error."""
    import shutil

    import numpy as np

    from local_folders import make_folder

    folder = tmp_path / "mine"
    shutil.copytree(make_folder(tmp_path, "percap5-texts-clip"), folder)
    ref = media.load_media(f"local:{folder}")
    caps = np.load(folder / "text_embeddings.npy")
    scale = np.random.default_rng(0).uniform(0.2, 5.0, size=(len(caps), 1)).astype(caps.dtype)
    np.save(folder / "text_embeddings.npy", caps * scale)     # another exporter's vector lengths
    scaled = media.load_media(f"local:{folder}")
    for d in ref.tasks:
        assert hn.evaluate(None, scaled.tasks[d]) == pytest.approx(hn.evaluate(None, ref.tasks[d]), abs=1e-9)
    caps[3] = 0
    np.save(folder / "text_embeddings.npy", caps)
    with pytest.raises(ValueError, match="all-zero row"):
        media.load_media(f"local:{folder}")


# ---------------------------------------------------------------- what mutation testing found unchecked (issue 50)
def _dense(task, rows, cols):
    m = task.engine.matrix(rows, cols)
    return m.block(0, m.shape[0], 0, m.shape[1], __import__("torch").float64).numpy()


def test_media_tasks_read_every_matrix_of_both_directions_against_dense_products():
    from hubnorm.scores import bank_subsets

    d = media.make_media("msrvtt", n_train=12, n_test=30)
    tasks = media.media_tasks(d, bank_queries=50, target_bank=5, seed=2)
    fwd, bwd = tasks["t2v"], tasks["v2t"]
    sub = bank_subsets(len(d.bank_captions), len(d.bank_items), 50, 5, 2)
    (cq, it), (ct, iq) = sub["forward"], sub["backward"]
    f64 = lambda x: np.asarray(x, np.float64)   # noqa: E731   the products are float64
    caps, items, qs, ts = f64(d.bank_captions), f64(d.bank_items), f64(d.captions), f64(d.items)
    pick = lambda x, idx: x if idx is None else x[idx]   # noqa: E731   None: the whole bank
    assert iq is None and cq is not None                                   # 12 videos < 50: the whole bank
    assert _dense(fwd, "queries", "targets") == pytest.approx(qs @ ts.T, abs=1e-12)
    assert _dense(bwd, "queries", "targets") == pytest.approx(ts @ qs.T, abs=1e-12)
    assert _dense(fwd, "query_bank", "targets") == pytest.approx(pick(caps, cq) @ ts.T, abs=1e-12)
    assert _dense(fwd, "target_bank", "targets") == pytest.approx(pick(items, it) @ ts.T, abs=1e-12)
    assert _dense(bwd, "query_bank", "targets") == pytest.approx(pick(items, iq) @ qs.T, abs=1e-12)
    assert _dense(bwd, "target_bank", "targets") == pytest.approx(pick(caps, ct) @ qs.T, abs=1e-12)
    assert _dense(fwd, "query_bank", "target_bank") == pytest.approx(pick(caps, cq) @ pick(items, it).T, abs=1e-12)
    assert _dense(bwd, "query_bank", "target_bank") == pytest.approx(pick(items, iq) @ pick(caps, ct).T, abs=1e-12)
    c2i = d.caption_to_item
    assert [fwd.positives.of(q).tolist() for q in range(30)] == [[c] for c in c2i]
    assert [bwd.positives.of(v).tolist() for v in range(30)] == [np.flatnonzero(c2i == v).tolist() for v in range(30)]
    assert fwd.meta["source"] == "synthetic" and fwd.meta["direction"] == "t2v" and bwd.meta["direction"] == "v2t"
    assert fwd.meta["modalities"] == ("text", "video") and fwd.meta["preset"] == "msrvtt"
    none = media.media_tasks(d, target_bank=0)
    assert not none["t2v"].has("target_bank") and not none["v2t"].has("target_bank")
    assert none["t2v"].size("query_bank") == 12 * 20 and none["v2t"].size("query_bank") == 12
    alone = media.make_media("audiocaps", n_train=0, n_test=8)
    only = media.media_tasks(alone)
    assert not only["t2a"].has("query_bank") and only["t2a"].n_queries == 40 and only["a2t"].n_queries == 8


def test_make_media_keeps_the_first_captions_of_each_item_and_labels_the_data():
    d = media.make_media("msrvtt", n_train=3, n_test=4, seed=1)   # 20 training captions per video, 1 per test video
    per = max(media.MEDIA_PRESETS["msrvtt"].train_captions, media.MEDIA_PRESETS["msrvtt"].test_captions)
    assert synthetic._first(4, per, 1).tolist() == [0, 20, 40, 60]
    assert synthetic._first(2, 5, 3).tolist() == [0, 1, 2, 5, 6, 7]
    p = media.MEDIA_PRESETS["msrvtt"]
    assert d.name == "synthetic-msrvtt" and d.modalities == ("text", "video") and d.synthetic
    assert d.meta == {"preset": "msrvtt", "seed": 1, "dataset": p.dataset, "model": p.model, "base": p.base,
                      "overrides": dict(p.overrides)}
    full = media.make_media("msrvtt", n_train=0, seed=1)
    assert (len(full.items), full.bank_items) == (p.n_test, None)          # the dataset's test size by default
    assert not np.array_equal(media.make_media("msrvtt", n_train=0, n_test=4, seed=2).items, d.items)


def test_load_media_guards_say_what_is_wrong(tmp_path):
    import shutil

    from local_folders import make_folder

    for bad in ("msrvtt", 3, None):
        with pytest.raises(ValueError, match=r"^source must look like 'synthetic:<preset>', 'cache:<dataset>:<model>:"
                                             r"<pretrained>', 'local:<folder>', 'real:<release>' or 'sims:<folder>'; "
                                             r"got "):
            media.load_media(bad)
    folder = tmp_path / "f"
    shutil.copytree(make_folder(tmp_path, "percap5-texts-clip"), folder)
    with pytest.raises(ValueError, match=rf"^n_train sets the training items of a synthetic video/audio preset; "
                                         rf"'local:{folder}' has its own banks: pass n_train=None \(bank_queries / "
                                         r"target_bank subsample them\)$"):
        media.load_media(f"local:{folder}", n_train=5)
    for bad in ("text", "smell"):
        with pytest.raises(ValueError, match=rf"^item_modality must be 'auto', 'image', 'video' or 'audio'; got "
                                             rf"'{bad}'$"):
            media.load_media(f"local:{folder}", item_modality=bad)
    src = media.load_media(f"local:{folder}", item_modality="video")
    assert src.modalities == ("text", "video") and src.directions == ("t2v", "v2t")
    assert src.label.startswith("real data (") and not src.synthetic and src.data is not None
    assert media.is_preset("synthetic:msrvtt") and not media.is_preset("synthetic:flickr30k")
    assert not media.is_preset(None) and not media.is_preset("msrvtt")
    assert media.published_dataset("Clotho v2") == "clotho" and media.published_dataset(None) is None


def test_media_tasks_subsample_both_banks_of_both_directions():
    from hubnorm.scores import bank_subsets

    d = media.make_media("msrvtt", n_train=12, n_test=30)
    tasks = media.media_tasks(d, bank_queries=5, target_bank=1, seed=4)
    sub = bank_subsets(len(d.bank_captions), len(d.bank_items), 5, 1, 4)
    (cq, it), (ct, iq) = sub["forward"], sub["backward"]
    assert all(i is not None for i in (cq, it, ct, iq))
    f64 = lambda x: np.asarray(x, np.float64)   # noqa: E731
    caps, items, qs = f64(d.bank_captions), f64(d.bank_items), f64(d.captions)
    fwd, bwd = tasks["t2v"], tasks["v2t"]
    assert (fwd.direction, bwd.direction) == ("t2v", "v2t")
    assert (fwd.size("query_bank"), fwd.size("target_bank"), bwd.size("query_bank"), bwd.size("target_bank")) == \
        (5, 1, 5, 1)                                                        # target_bank=1 keeps one, 0 keeps none
    assert _dense(bwd, "query_bank", "targets") == pytest.approx(items[iq] @ qs.T, abs=1e-12)
    assert _dense(bwd, "query_bank", "target_bank") == pytest.approx(items[iq] @ caps[ct].T, abs=1e-12)
    assert _dense(fwd, "query_bank", "target_bank") == pytest.approx(caps[cq] @ items[it].T, abs=1e-12)
    real = media.MediaData(name="x", modalities=("text", "audio"), items=d.items, captions=d.captions,
                           caption_to_item=d.caption_to_item, synthetic=False, meta={})
    assert media.media_tasks(real)["t2a"].meta["source"] == "real"
