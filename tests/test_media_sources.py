"""hubnorm.media.load_media on every kind of source it reads (a synthetic video/audio preset, another synthetic
embeddings preset, a local: folder, a sims: folder, synthetic or real): the label and flags a notebook prints, the
arguments each kind honours (seed, bank subsets, block size), the matrices and their names, and the guards by their
whole messages. The real: releases are in tests/test_data_real.py (they need the offline mirror)."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

import hubnorm as hn
from hubnorm import media
from hubnorm.data.sims import load_sims, write_sims
from hubnorm.scores import bank_subsets, sims_tasks
from hubnorm.synthetic import make_dataset

from test_media import _dense

BLOCK = 1 << 20
KEYS = [("queries", "targets"), ("query_bank", "targets"), ("target_bank", "targets"), ("query_bank", "target_bank")]




def _float64(d):
    """The embeddings of ``d`` in float64 (the matrices are float64 products of them)."""
    import dataclasses

    return dataclasses.replace(d, **{k: np.asarray(getattr(d, k), np.float64)
                                     for k in ("items", "captions", "bank_items", "bank_captions")})


def _unit(x):
    x = np.asarray(x, np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


# ----------------------------------------------------------------------------------------------- synthetic presets
def test_a_preset_is_drawn_with_the_seed_and_banks_asked_for():
    src = media.load_media("synthetic:audiocaps", seed=3, n_train=7, bank_queries=5, target_bank=4, block_bytes=BLOCK)
    want = media.make_media("audiocaps", seed=3, n_train=7)
    assert src.synthetic is True and (src.dataset, src.model) == ("audiocaps", "zs CLAP")
    assert src.modalities == ("text", "audio") and src.directions == ("t2a", "a2t")
    assert src.label == f"synthetic analog (synthetic-audiocaps, seed 3, {want.data_size})"
    assert src.label == ("synthetic analog (synthetic-audiocaps, seed 3, 975 test clips, 4,875 captions; banks from "
                         "7 training clips, 7 training captions)")
    assert np.array_equal(src.data.items, want.items) and np.array_equal(src.data.bank_captions, want.bank_captions)
    assert not np.array_equal(src.data.items, media.make_media("audiocaps", seed=0, n_train=0).items)
    t, a = src.tasks["t2a"], src.tasks["a2t"]
    assert (t.size("query_bank"), t.size("target_bank"), a.size("query_bank"), a.size("target_bank")) == (5, 4, 5, 4)
    assert t.block_bytes == a.block_bytes == BLOCK
    # the bank subsets are the seeded rule of every source kind (hubnorm.scores.bank_subsets) with this seed
    sub = bank_subsets(7, 7, 5, 4, 3)
    (caps_q, items_t), (caps_t, items_q) = sub["forward"], sub["backward"]
    d = _float64(src.data)
    assert np.allclose(_dense(t, "query_bank", "targets"), d.bank_captions[caps_q] @ d.items.T)
    assert np.allclose(_dense(t, "target_bank", "targets"), d.bank_items[items_t] @ d.items.T)
    assert np.allclose(_dense(a, "query_bank", "targets"), d.bank_items[items_q] @ d.captions.T)
    assert np.allclose(_dense(a, "target_bank", "targets"), d.bank_captions[caps_t] @ d.captions.T)
    assert np.allclose(_dense(a, "query_bank", "target_bank"), d.bank_items[items_q] @ d.bank_captions[caps_t].T)
    # what the published rows are compared with can be overridden
    other = media.load_media("synthetic:audiocaps", n_train=0, dataset="clotho", model="mine")
    assert (other.dataset, other.model) == ("clotho", "mine")


def test_make_media_is_the_base_geometry_with_the_preset_overrides():
    p = media.MEDIA_PRESETS["didemo"]
    d = media.make_media("didemo", seed=2, n_test=12)            # default n_train: the data set's training size
    ds = make_dataset(p.base, seed=2, n_train_images=p.n_train, n_test_images=12, n_val_images=0,
                      captions_per_image=1, **p.overrides)
    assert np.array_equal(d.items, ds.splits["test"].images) and np.array_equal(d.bank_items, ds.splits["train"].images)
    assert len(d.bank_items) == p.n_train == 8395 and d.synthetic is True
    assert d.meta == {"preset": "didemo", "seed": 2, "dataset": "didemo", "model": "CLIP4Clip", "base": "flickr30k",
                      "overrides": dict(p.overrides)}


def test_the_matrices_of_both_directions_are_named_for_the_user():
    tasks = media.media_tasks(media.make_media("msrvtt", n_train=6, n_test=10), block_bytes=BLOCK)
    labels = {d: {k: t.engine.matrix(*k).label for k in KEYS} for d, t in tasks.items()}
    assert labels["t2v"] == {("queries", "targets"): "the test score matrix (text x video)",
                             ("query_bank", "targets"): "the query bank x targets score matrix",
                             ("target_bank", "targets"): "the target bank x targets score matrix",
                             ("query_bank", "target_bank"): "the bank x bank score matrix"}
    assert labels["v2t"] == {("queries", "targets"): "the test score matrix (video x text)",
                             ("query_bank", "targets"): "the query bank x targets score matrix",
                             ("target_bank", "targets"): "the target bank x targets score matrix",
                             ("query_bank", "target_bank"): "the bank x bank score matrix"}
    assert all(t.block_bytes == BLOCK and t.direction == d for d, t in tasks.items())
    assert tasks["t2v"].meta == {"dataset": "synthetic-msrvtt", "modalities": ("text", "video"), "source": "synthetic",
                                 "direction": "t2v", **media.make_media("msrvtt", n_train=0, n_test=2).meta}


def test_media_tasks_take_labels_of_any_integer_type():
    d = media.make_media("clotho", n_train=3, n_test=8)
    d.caption_to_item = d.caption_to_item.astype(np.int32)
    tasks = media.media_tasks(d)
    ranks = hn.positive_ranks(tasks["t2a"].blocks(), tasks["t2a"].positives)
    s = d.captions.astype(np.float64) @ d.items.astype(np.float64).T
    want = [(s[i] > s[i, d.caption_to_item[i]]).sum() for i in range(len(s))]
    assert ranks.tolist() == want


def test_another_synthetic_embeddings_preset_keeps_its_seed():
    kw = dict(n_train_images=20, n_test_images=10, n_val_images=0)
    src = media.load_media("synthetic:flickr30k", seed=2, source_kwargs=kw, block_bytes=BLOCK)
    assert src.label == ("synthetic analog (synthetic-flickr30k, seed 2, 10 test images, 50 captions; banks from 20 "
                         "training images, 100 training captions)")
    assert src.synthetic is True and src.dataset == "flickr30k" and src.model is None
    assert np.allclose(src.data.items, _unit(make_dataset("flickr30k", seed=2, **kw).splits["test"].images))
    assert src.tasks["t2i"].block_bytes == BLOCK
    # a seed in source_kwargs wins over the seed argument (which also draws the bank subsets)
    own = media.load_media("synthetic:flickr30k", seed=2, source_kwargs={**kw, "seed": 5})
    assert np.allclose(own.data.items, _unit(make_dataset("flickr30k", seed=5, **kw).splits["test"].images))


# ----------------------------------------------------------------------------------------------- local folders
@pytest.fixture
def local_folder(tmp_path):
    from local_folders import make_folder

    folder = tmp_path / "run:2"           # a colon in the path: only the first one separates the kind
    shutil.copytree(make_folder(tmp_path, "percap5-texts-clip"), folder)
    for name in ("image_embeddings.npy", "text_embeddings.npy"):   # rows of any length: normalised on reading
        np.save(folder / name, 3.0 * np.load(folder / name))
    return folder


def test_a_local_folder_is_read_normalised_with_its_ids_texts_and_banks(local_folder):
    from hubnorm import load_embeddings

    src = media.load_media(f"local:{local_folder}", item_modality="video", bank_queries=20, target_bank=10,
                           seed=4, block_bytes=BLOCK)
    ds = load_embeddings(f"local:{local_folder}")
    test, train = ds.split("test"), ds.split("train")
    d = src.data
    assert src.synthetic is False and d.synthetic is False and src.modalities == ("text", "video")
    assert src.directions == ("t2v", "v2t") and (src.dataset, src.model) == (None, None)
    assert src.label == (f"real data ({ds.name}, openai/clip-vit-base-patch32, 45 test videos, 225 captions; banks "
                         "from 30 training videos, 150 training captions)")
    assert d.name == ds.name and d.meta == {"dataset": ds.name}
    assert d.item_ids == list(test.image_ids) and d.caption_texts == list(test.caption_texts)
    for got, raw in ((d.items, test.images), (d.captions, test.captions), (d.bank_items, train.images),
                     (d.bank_captions, train.captions)):
        assert got.dtype == np.float64 and np.allclose(got, _unit(raw))
    t = src.tasks["t2v"]
    assert (t.size("query_bank"), t.size("target_bank"), t.block_bytes) == (20, 10, BLOCK)
    caps_q = bank_subsets(150, 30, 20, 10, 4)["forward"][0]
    assert np.allclose(_dense(t, "query_bank", "targets"), d.bank_captions[caps_q] @ d.items.T)
    assert media.load_media(f"local:{local_folder}", model="m").model == "m"


def test_a_local_folder_refuses_what_it_cannot_honour(local_folder):
    with pytest.raises(ValueError) as e:
        media.load_media(f"local:{local_folder}", n_train=10)
    assert str(e.value) == (f"n_train sets the training items of a synthetic video/audio preset; "
                            f"'local:{local_folder}' has its own banks: pass n_train=None (bank_queries / target_bank "
                            "subsample them)")
    with pytest.raises(ValueError) as e:
        media.load_media(f"local:{local_folder}", item_modality="text")
    assert str(e.value) == "item_modality must be 'auto', 'image', 'video' or 'audio'; got 'text'"
    with pytest.raises(ValueError, match=re.escape("item_modality must be 'auto', 'image', 'video' or 'audio'; "
                                                   "got 'sound'")):
        media.load_media(f"local:{local_folder}", item_modality="sound")
    bare = str(local_folder.parent / "percap5-texts-clip")   # a folder without its kind
    with pytest.raises(ValueError) as e:
        media.load_media(bare)
    assert str(e.value) == (f"source must look like 'synthetic:<preset>', 'cache:<dataset>:<model>:<pretrained>', "
                            f"'local:<folder>', 'real:<release>' or 'sims:<folder>'; got {bare!r}")
    with pytest.raises(ValueError, match="source must look like"):
        media.load_media(None)


def test_a_local_folder_without_a_model_is_labelled_without_one(tmp_path):
    from hubnorm import load_embeddings
    from local_folders import make_folder

    folder = make_folder(tmp_path, "stacked1")          # no model_info.json
    src = media.load_media(f"local:{folder}")
    ds = load_embeddings(f"local:{folder}")
    n_test, n_train = len(ds.split("test").images), len(ds.split("train").images)
    assert src.label == (f"real data (stacked1, {n_test} test images, {n_test} captions; banks from {n_train} training "
                         f"images, {n_train} training captions)")


@pytest.mark.parametrize("split", ["test", "train"])
def test_a_row_that_cannot_be_normalised_is_named_with_its_folder_and_image(local_folder, split):
    from hubnorm import load_embeddings

    ds = load_embeddings(f"local:{local_folder}")
    first = ds.split(split).image_ids[0]
    images = np.load(local_folder / "image_embeddings.npy")
    ids = [row.split(",")[0] for row in (local_folder / "metadata.csv").read_text().splitlines()[1:]]
    images[[i for i, x in enumerate(ids) if x == first]] = 0.0   # every copy of that image's row
    np.save(local_folder / "image_embeddings.npy", images)
    with pytest.raises(ValueError) as e:
        media.load_media(f"local:{local_folder}", item_modality="video")
    assert re.fullmatch(rf"{re.escape(str(local_folder))}: the image embeddings have 1 all-zero row\(s\) \(the first "
                        rf"is image \d+, image_id {re.escape(repr(first))}\): an embedding of nothing has no "
                        r"direction; drop those rows \(and their pairs\)", str(e.value)), str(e.value)


# ----------------------------------------------------------------------------------------------- sims folders
def _sims(folder, *, synthetic, model="my-model", dataset="MSR-VTT 1k-A"):
    rng = np.random.default_rng(0)
    caps, items = _unit(rng.standard_normal((24, 8))), _unit(rng.standard_normal((12, 8)))
    bank_caps, bank_items = _unit(rng.standard_normal((30, 8))), _unit(rng.standard_normal((16, 8)))
    mats = {"test": caps @ items.T, "bank_rows": bank_caps @ items.T, "bank_cols": bank_items @ caps.T,
            "bank_rows_x_bank_cols": bank_caps @ bank_items.T, "bank_cols_x_test_cols": bank_items @ items.T,
            "bank_rows_x_test_rows": bank_caps @ caps.T}
    write_sims(folder, mats, modalities=("text", "video"), labels=np.arange(24) // 2, dataset=dataset, model=model,
               synthetic=synthetic)
    return folder


@pytest.mark.parametrize("synthetic", [True, False])
def test_a_sims_folder_is_labelled_by_its_manifest(tmp_path, synthetic):
    folder = _sims(tmp_path / "mine:v1", synthetic=synthetic)
    src = media.load_media(f"sims:{folder}", bank_queries=9, target_bank=5, seed=2, block_bytes=BLOCK)
    name = load_sims(folder).name   # the manifest's data set name
    assert name == "MSR-VTT 1k-A"
    assert src.label == (f"synthetic analog (sims folder {name})" if synthetic
                         else f"real data ({name}, released score matrices)")
    assert src.synthetic is synthetic and src.data is None
    assert (src.dataset, src.model, src.modalities) == ("msr-vtt", "my-model", ("text", "video"))
    want = sims_tasks(folder, bank_queries=9, target_bank=5, seed=2)
    other = sims_tasks(folder, bank_queries=9, target_bank=5, seed=3)
    for d, t in src.tasks.items():
        assert t.block_bytes == BLOCK and (t.size("query_bank"), t.size("target_bank")) == (9, 5)
        for key in KEYS:
            assert np.array_equal(_dense(t, *key), _dense(want[d], *key)), (d, key)
        assert any(not np.array_equal(_dense(t, *k), _dense(other[d], *k)) for k in KEYS[1:])
    assert media.load_media(f"sims:{folder}", model="theirs", dataset="didemo").model == "theirs"


def test_a_sims_folder_refuses_what_it_cannot_honour(tmp_path):
    folder = _sims(tmp_path / "s", synthetic=False)
    with pytest.raises(ValueError) as e:
        media.load_media(f"sims:{folder}", source_kwargs={"seed": 1})
    assert str(e.value) == "source_kwargs apply to embeddings sources, not to a sims: folder; got {'seed': 1}"
    with pytest.raises(ValueError) as e:
        media.load_media(f"sims:{folder}", item_modality="audio")
    assert str(e.value) == (f"item_modality='audio' contradicts {folder}, whose manifest says its columns are video: "
                            "pass item_modality='auto' (or fix the manifest)")
    assert media.load_media(f"sims:{folder}", item_modality="video").modalities == ("text", "video")


def test_a_video_or_audio_preset_is_a_synthetic_source_like_any_other():
    """One loader: ``synthetic:<video/audio preset>`` is drawn by the synthetic kind's loader (make_dataset), as
    embeddings with the preset's captions per item, the data make_media and load_media use; the image-text
    notebooks' open_data reads it too."""
    from hubnorm.data.sources import load_source
    from hubnorm_companion import protocol as pr

    ds = load_source("synthetic:msrvtt", n_train_images=3, n_test_images=4, seed=1)
    d = media.make_media("msrvtt", n_train=3, n_test=4, seed=1)
    test, train = ds.split("test"), ds.split("train")
    assert ds.name == d.name == "synthetic-msrvtt" and ds.source == "synthetic" and "val" not in ds.splits
    assert (test.n_images, test.n_captions, train.n_images, train.n_captions) == (4, 4, 3, 60)   # 1 and 20 per video
    assert np.array_equal(test.images, d.items) and np.array_equal(test.captions, d.captions)
    assert np.array_equal(train.captions, d.bank_captions) and np.array_equal(test.caption_to_image, d.caption_to_item)
    assert train.caption_to_image.tolist() == np.arange(3).repeat(20).tolist()
    assert len(train.extras["caption_topic"]) == 60 and len(train.extras["topic"]) == 3
    assert {k: ds.meta[k] for k in ("preset", "modality", "dataset", "model", "base")} == \
        {"preset": "msrvtt", "modality": "video", "dataset": "msr-vtt", "model": "CLIP4Clip", "base": "flickr30k"}
    assert ds.meta["description"].endswith("calibrated to the raw numbers of CLIP4Clip, trained on msr-vtt); not "
                                           "real data")
    for bad in ({"captions_per_image": 2}, {"n_val_images": 5}, {"caption_noise": 1.0}):
        with pytest.raises(ValueError, match=r"set by the 'msrvtt' preset"):
            load_source("synthetic:msrvtt", n_train_images=3, n_test_images=4, **bad)
    run = pr.open_data("synthetic:audiocaps", synthetic_sizes={"n_train_images": 40, "n_test_images": 10})
    assert run.all_tasks["t2i"].n_queries == 50 and run.all_tasks["i2t"].n_queries == 10   # 5 captions per clip
    assert "synthetic-audiocaps" in run.label and run.synthetic
