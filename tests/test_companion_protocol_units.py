"""hubnorm_companion.protocol: unit tests of the splits, banks, labels and reference protocols the notebooks print,
aimed at what its mutation run found unchecked.

- ``prepare_dataset`` with the loader replaced by a recording fake (:func:`_fake_loader`): which keyword arguments
  reach which kind of loader, the held-out validation split, the small-split NOTEs at their boundary, the float64
  unit rows and the errors that name a bad row;
- the size words of the run labels (``_split_words``, ``test_size``, ``bank_pool``, ``data_size``, ``run_label``)
  against hand-written strings, every branch;
- the published-table look-ups (``paper_ids``, ``published_names``, ``dataset_key``, ``published_dataset``,
  ``published_model``, ``published_label``) and their NOTEs and guards, by their own message text;
- ``reference_split`` (its guard, the rounding of the bank size, the seed, the NOTE at ``SMALL_BANK``),
  ``clamp_params`` at the limit, ``paper_or_fast_grid``, ``fmt_params``, ``params_for``;
- ``run_methods``, ``select_parameters`` and ``select_and_evaluate`` against a float64 reference of the raw ranks
  and skewness written here, and against ``hubnorm.evaluate`` / ``hubnorm.grid_search`` called with the arguments
  that each keyword should hand on.

Bug found and fixed (see ``test_published_model_auto_follows_published_model_name_for_open_clip_vit_b_32`` and
``test_published_model_auto_renames_for_a_paper_given_by_its_id``): ``published_model(ds, "auto")`` called every
``ViT-B-32*`` model "CLIP" (also random-init and LAION weights, which ``published_model_name`` maps to None), and
ignored the DBSN renames when the paper was given by its id (``"dbsn-pan2025"``).

Mutation run (``--sample 3``: 311 of 963 mutants before the fix, 309 of 958 after; with tests/test_own_data.py,
test_protocol.py, test_sweep_ranks.py [+ this file]): 206 killed, 96 survived, 9 reached by no test (66%) -> 306
killed, 3 survived (99%), the 3 equivalent. A run of all 958 mutants left only the equivalent ones below:
- reference_split ``choice(..., replace=None)``: numpy reads ``replace`` as a truth value, and None is false, so the
  draw is the same as with ``replace=False``.
- params_for ``params[direction].get(label, None)`` / ``.get(label, )`` and ``params.get(label, None)`` /
  ``.get(label, )`` (4): a missing label gives None instead of ``{}``, and ``None or {}`` is ``{}``.
- select_parameters ``fixed.get(label, None)`` / ``.get(label, )`` (2): the same ``... or {}``.
"""

from __future__ import annotations

import re
import time

import numpy as np
import pandas as pd
import pytest
import torch

import hubnorm as hn
from hubnorm.embeddings import EmbeddingDataset, EmbeddingSplit
from hubnorm_companion import protocol as ex
from hubnorm.provenance import NO_BANK
from hubnorm.selection import PAPER_GRIDS


def _split(rng, n_img, caps=5, d=16, noise=0.6, scale=1.0):
    imgs = hn.l2_normalize(rng.standard_normal((n_img, d)))
    c2i = np.repeat(np.arange(n_img), caps)
    capt = hn.l2_normalize(imgs[c2i] + noise * rng.standard_normal((n_img * caps, d)))
    return EmbeddingSplit(images=scale * imgs, captions=scale * capt, caption_to_image=c2i)


def _dataset(source="synthetic", name="toy", meta=None, sizes=(("train", 60), ("val", 20), ("test", 20)), caps=5,
             seed=0):
    rng = np.random.default_rng(seed)
    return EmbeddingDataset(name=name, source=source, splits={k: _split(rng, n, caps) for k, n in sizes},
                            meta=dict(meta or {}))


def re_list(items):
    """``repr(list(items))`` as a regular expression that matches it literally."""
    return re.escape(repr(list(items)))


@pytest.fixture
def ds():
    return _dataset(meta={"seed": 0})


@pytest.fixture
def small_bank_tasks(ds):
    """t2i / i2t on the 20 test images x 5 captions with a bank of 6 training images x 5 captions."""
    return ex.make_tasks(ds.split("test"), ex.reference_split(ds, "train", 0.1, note_small=False))


def _fake_loader(calls, sizes=(("train", 30), ("test", 10)), meta=None, scale=3.0, dtype=np.float32):
    """A stand-in for ``load_embeddings``: records ``(source, kwargs)`` and returns a fresh data set whose rows are
    not of unit length (``scale``) and of ``dtype``."""

    def load(source, **kwargs):
        calls.append((source, kwargs))
        rng = np.random.default_rng(42)
        splits = {}
        for name, n in sizes:
            s = _split(rng, n, caps=2, d=8, scale=scale)
            splits[name] = EmbeddingSplit(s.images.astype(dtype), s.captions.astype(dtype), s.caption_to_image)
        return EmbeddingDataset(name="fake", source="real", splits=splits, meta=dict(meta or {}))

    return load


# ------------------------------------------------------------------------------------------------ note
def test_note_prints_one_line_to_stdout(capsys):
    assert ex.note("a bank is small") is None
    captured = capsys.readouterr()
    assert captured.out == "NOTE: a bank is small\n" and captured.err == ""


# ------------------------------------------------------------------------------------------------ prepare_dataset
def test_prepare_dataset_refuses_a_source_that_is_not_a_string():
    with pytest.raises(TypeError, match=r"source must be a string such as 'synthetic:flickr30k' or 'local:/path'; "
                                        r"got \['local:x'\]"):
        ex.prepare_dataset(["local:x"])


@pytest.mark.parametrize("kind", ["local", "real"])
def test_prepare_dataset_asks_a_real_loader_for_a_val_split_and_never_passes_synthetic_sizes(kind, monkeypatch):
    calls = []
    monkeypatch.setattr(ex, "load_embeddings", _fake_loader(calls))
    given = {"test_fraction": 0.34}
    ex.prepare_dataset(f"{kind}:/data/mine", synthetic_sizes={"n_train_images": 5000}, seed=3, source_kwargs=given,
                       note_small=False)
    ex.prepare_dataset(f"{kind}:/data/mine", ensure_val=False, note_small=False)
    ex.prepare_dataset(f"{kind}:/data/mine", ensure_val=1, note_small=False)
    ex.prepare_dataset(f"{kind}:/data/mine", source_kwargs={"val": False}, note_small=False)   # the caller's wins
    assert calls == [(f"{kind}:/data/mine", {"test_fraction": 0.34, "val": True}),
                     (f"{kind}:/data/mine", {"val": False}),
                     (f"{kind}:/data/mine", {"val": True}),
                     (f"{kind}:/data/mine", {"val": False})]
    assert calls[1][1]["val"] is False and calls[2][1]["val"] is True
    assert given == {"test_fraction": 0.34}   # the caller's dict is not written into


def test_prepare_dataset_hands_sizes_and_seed_to_the_synthetic_generator_only(monkeypatch):
    calls = []
    monkeypatch.setattr(ex, "load_embeddings", _fake_loader(calls))
    sizes = {"n_train_images": 30, "n_test_images": 10}
    ex.prepare_dataset("synthetic:coco", seed=7, synthetic_sizes=sizes, source_kwargs={"d": 8}, note_small=False)
    ex.prepare_dataset("synthetic:coco", note_small=False)
    ex.prepare_dataset("synthetic:coco", seed=7, synthetic_sizes={"seed": 11}, note_small=False)   # sizes' seed wins
    ex.prepare_dataset("cache:coco:ViT-B-32:openai", seed=7, synthetic_sizes=sizes, note_small=False)
    assert calls == [("synthetic:coco", {"d": 8, "n_train_images": 30, "n_test_images": 10, "seed": 7}),
                     ("synthetic:coco", {"seed": 0}),
                     ("synthetic:coco", {"seed": 11}),
                     ("cache:coco:ViT-B-32:openai", {})]
    assert sizes == {"n_train_images": 30, "n_test_images": 10}


def test_prepare_dataset_records_the_source_string_unless_the_loader_did(monkeypatch):
    monkeypatch.setattr(ex, "load_embeddings", _fake_loader([]))
    assert ex.prepare_dataset("local:/a", note_small=False).meta["source_string"] == "local:/a"
    monkeypatch.setattr(ex, "load_embeddings", _fake_loader([], meta={"source_string": "as loaded"}))
    assert ex.prepare_dataset("local:/a", note_small=False).meta["source_string"] == "as loaded"


def test_prepare_dataset_holds_out_a_seeded_val_split_of_the_test_size(monkeypatch):
    monkeypatch.setattr(ex, "load_embeddings", _fake_loader([]))
    a = ex.prepare_dataset("local:/a", seed=5, note_small=False)
    b = ex.prepare_dataset("local:/a", seed=5, note_small=False)
    c = ex.prepare_dataset("local:/a", seed=6, note_small=False)
    whole = ex.prepare_dataset("local:/a", ensure_val=False, note_small=False)
    assert set(whole.splits) == {"train", "test"} and whole.split("train").n_images == 30
    assert {k: v.n_images for k, v in a.splits.items()} == {"train": 20, "test": 10, "val": 10}
    np.testing.assert_array_equal(a.split("val").images, b.split("val").images)
    assert not np.array_equal(a.split("val").images, c.split("val").images)   # the seed reaches the hold-out
    # the val and train images are the 30 training images, each once
    pooled = np.concatenate([a.split("val").images, a.split("train").images])
    key = lambda x: sorted(map(tuple, np.round(x, 12)))   # noqa: E731
    assert key(pooled) == key(whole.split("train").images)
    assert a.meta["val_split"] == "held out from train (10 images: the size of test; seed 5)"


def test_prepare_dataset_notes_small_test_and_val_splits(monkeypatch, capsys):
    monkeypatch.setattr(ex, "load_embeddings", _fake_loader([]))
    ex.prepare_dataset("local:/a", seed=0)
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "NOTE: the test split has only 10 images (fewer than 100): recalls over so small a gallery are coarse and "
        "noisy, so differences of a few points may be sampling noise",
        "NOTE: the val split has only 10 images (fewer than 100): recalls over so small a gallery are coarse and "
        "noisy, so differences of a few points may be sampling noise; hyperparameters chosen on so small a split "
        "often tie or saturate (held out from train (10 images: the size of test; seed 0))"]
    ex.prepare_dataset("local:/a", note_small=False)
    assert capsys.readouterr().out == ""
    # a val split the loader made (no "val_split" in meta): the note names no hold-out
    monkeypatch.setattr(ex, "load_embeddings", _fake_loader([], sizes=(("train", 30), ("val", 7), ("test", 120))))
    ex.prepare_dataset("local:/a")
    assert capsys.readouterr().out == (
        "NOTE: the val split has only 7 images (fewer than 100): recalls over so small a gallery are coarse and "
        "noisy, so differences of a few points may be sampling noise; hyperparameters chosen on so small a split "
        "often tie or saturate\n")


@pytest.mark.parametrize("n, noted", [(99, True), (100, False)])
def test_prepare_dataset_small_split_boundary(n, noted, monkeypatch, capsys):
    monkeypatch.setattr(ex, "load_embeddings", _fake_loader([], sizes=(("test", n),)))
    ex.prepare_dataset("local:/a")
    out = capsys.readouterr().out
    assert (f"NOTE: the test split has only {n} images" in out) is noted
    assert ("val split" in out) is False


def test_prepare_dataset_casts_to_unit_rows_of_the_dtype(monkeypatch):
    monkeypatch.setattr(ex, "load_embeddings", _fake_loader([]))
    raw = _fake_loader([])("local:/a")
    ds = ex.prepare_dataset("local:/a", ensure_val=False, note_small=False)
    for name in ("train", "test"):
        for attr in ("images", "captions"):
            got, x = getattr(ds.split(name), attr), getattr(raw.split(name), attr).astype(np.float64)
            assert got.dtype == np.float64
            np.testing.assert_allclose(got, x / np.sqrt((x * x).sum(axis=1, keepdims=True)), rtol=0, atol=1e-15)
    f32 = ex.prepare_dataset("local:/a", dtype="float32", ensure_val=False, note_small=False)
    assert all(getattr(s, a).dtype == np.float32 for s in f32.splits.values() for a in ("images", "captions"))
    np.testing.assert_allclose(np.linalg.norm(f32.split("test").captions, axis=1), 1.0, rtol=1e-6)
    kept = ex.prepare_dataset("local:/a", dtype=None, ensure_val=False, note_small=False)
    assert kept.split("test").images.dtype == np.float32
    np.testing.assert_array_equal(kept.split("test").images, raw.split("test").images)   # not normalised


def test_prepare_dataset_names_a_zero_row(monkeypatch):
    load = _fake_loader([])

    def zero_caption(source, **kwargs):
        ds = load(source, **kwargs)
        ds.split("test").captions[3] = 0
        return ds

    monkeypatch.setattr(ex, "load_embeddings", zero_caption)
    with pytest.raises(ValueError, match="local:/z test captions contain an all-zero row"):
        ex.prepare_dataset("local:/z", ensure_val=False, note_small=False)


# ------------------------------------------------------------------------------------------------ sizes and labels
def test_describe_lists_every_split(ds):
    expected = pd.DataFrame({"split": ["train", "val", "test"], "images": [60, 20, 20], "captions": [300, 100, 100],
                             "dim": [16, 16, 16]})
    pd.testing.assert_frame_equal(ex.describe(ds), expected)


def test_is_synthetic_reads_the_source(ds):
    assert ex.is_synthetic(ds) is True
    assert ex.is_synthetic(_dataset(source="real")) is False


def _sized(n_images, n_captions, d=2):
    c2i = np.arange(n_captions) % max(n_images, 1)
    return EmbeddingSplit(images=np.ones((n_images, d)), captions=np.ones((n_captions, d)), caption_to_image=c2i)


@pytest.mark.parametrize("n_images, n_captions, words", [
    (20, 100, "20 test images x 5 captions"),
    (20, 40, "20 test images x 2 captions"),
    (20, 20, "20 test images"),
    (1200, 2500, "1,200 test images, 2,500 captions"),
    (3, 4, "3 test images, 4 captions"),
    (0, 0, "0 test images, 0 captions"),
])
def test_test_size_in_words(n_images, n_captions, words):
    ds = EmbeddingDataset(name="x", source="real", splits={"test": _sized(n_images, n_captions)})
    assert ex.test_size(ds) == words
    assert ex.data_size(ds) == words   # no training split: no pool of banks
    assert ex.bank_pool(ds) == ""


def test_bank_pool_and_data_size_name_the_training_split():
    ds = EmbeddingDataset(name="x", source="real", splits={"train": _sized(29000, 145000), "test": _sized(10, 10)})
    assert ex.bank_pool(ds) == "banks from 29,000 training images x 5 captions"
    assert ex.data_size(ds) == "10 test images; banks from 29,000 training images x 5 captions"
    only_train = EmbeddingDataset(name="x", source="real", splits={"train": _sized(4, 5)})
    assert ex.test_size(only_train) == "no test split"
    assert ex.data_size(only_train) == "no test split; banks from 4 training images, 5 captions"


def test_an_audio_release_counts_clips_and_a_pool_of_other_splits_adds_them_up():
    """The items of an audio release are clips, never images; a notebook that draws its banks from every split but
    the test split (notebook 08: the loader's val and train splits) has them named and added up."""
    audio = EmbeddingDataset(name="x", source="real", meta={"release": "a", "label": "real: A", "modality": "audio"},
                             splits={"test": _sized(200, 253), "val": _sized(66, 78), "train": _sized(133, 166)})
    assert ex.test_size(audio) == "200 test clips, 253 captions"
    assert ex.bank_pool(audio) == "banks from 133 training clips, 166 captions"
    assert ex.bank_pool(audio, ("val", "train")) == "banks from 199 other clips, 244 captions"
    assert ex.run_label(audio, bank_splits=("val", "train")) == \
        "real: A (200 test clips, 253 captions; banks from 199 other clips, 244 captions)"
    video = EmbeddingDataset(name="x", source="real", meta={"modality": "video"}, splits={"test": _sized(4, 8)})
    assert ex.test_size(video) == "4 test videos x 2 captions"
    images = EmbeddingDataset(name="x", source="real", meta={"modality": "image"},
                              splits={"test": _sized(4, 4), "val": _sized(2, 2), "train": _sized(6, 6)})
    assert ex.bank_pool(images, ("val",)) == "banks from 2 val images"   # a part of the other splits: named
    assert ex.bank_pool(images, ("val", "train")) == "banks from 8 other images"
    assert ex.bank_pool(images, ("train", "val", "train")) == "banks from 8 other images"   # a split counts once
    assert ex.bank_pool(images, ("dev",)) == "" and ex.data_size(images, ("dev",)) == "4 test images"
    only_train = EmbeddingDataset(name="x", source="real", splits={"test": _sized(4, 4), "train": _sized(6, 6)})
    assert ex.bank_pool(only_train, ("val", "train")) == ex.bank_pool(only_train) == "banks from 6 training images"


SIZES = "20 test images x 5 captions; banks from 60 training images x 5 captions"


@pytest.mark.parametrize("source, meta, label", [
    ("synthetic", {"seed": 3}, f"synthetic analog (toy, seed 3, {SIZES})"),
    ("synthetic", {}, f"synthetic analog (toy, seed ?, {SIZES})"),
    ("synthetic", {"rehearsal": True, "label": "rehearsal of coco"}, "rehearsal of coco"),
    ("synthetic", {"rehearsal": True}, f"synthetic rehearsal (toy, {SIZES})"),
    ("synthetic", {"rehearsal": True, "label": ""}, f"synthetic rehearsal (toy, {SIZES})"),
    ("synthetic", {"rehearsal": False, "label": "x", "seed": 1}, f"synthetic analog (toy, seed 1, {SIZES})"),
    ("real", {"release": "coco500", "label": "real: COCO"}, f"real: COCO ({SIZES})"),
    ("real", {"release": "coco500"}, f"real data (toy, {SIZES})"),
    ("real", {"label": "real: COCO"}, f"real data (toy, {SIZES})"),
    ("real", {"model": "ViT-B-32"}, f"real data (toy, ViT-B-32, {SIZES})"),
    ("real", {"model": ""}, f"real data (toy, {SIZES})"),
])
def test_run_label_every_kind(source, meta, label):
    assert ex.run_label(_dataset(source=source, meta=meta)) == label


# ------------------------------------------------------------------------------------------------ the real column
def test_real_sources_refuses_a_release_of_another_modality():
    with pytest.raises(ValueError, match=r"^real_sources: 'real:audiocaps-clap' holds audio-text embeddings, and this "
                                         r"notebook's real column is image-text: use one of \['coco500-clip-b16', "
                                         r"'flickr8k-100x5-clip-b32'\], or \['auto'\]$"):
        ex.real_sources(["real:audiocaps-clap"], "synthetic:coco")
    assert ex.real_sources(("real:audiocaps-clap",), "synthetic:coco", modality="audio") == ["real:audiocaps-clap"]
    with pytest.raises(ValueError, match=r"^real_sources must be \['auto'\], \[\] or 'real:<release>' strings, "
                                         r"<release> one of \['audiocaps-clap', .*\]; got 3$"):
        ex.real_sources([3], "synthetic:coco")
    with pytest.raises(ValueError, match=r"got 'auto'"):   # "auto" only alone
        ex.real_sources(["auto", "real:coco500-clip-b16"], "synthetic:coco")
    with pytest.raises(ValueError, match=r"^modality must be one of \['audio', 'image'\]; got 'video'$"):
        ex.real_sources([], "synthetic:coco", modality="video")
    assert ex.real_sources(("auto",), "synthetic:coco") == ["real:coco500-clip-b16", "real:flickr8k-100x5-clip-b32"]
    assert ex.real_sources(["auto"], "cache:coco:m:p") == []


def test_nearest_published_is_what_the_release_declares(ds):
    real = _dataset(source="real", name="flickr8k", meta={"published_dataset": "flickr30k"})
    assert ex.nearest_published(real) == "flickr30k"
    with pytest.raises(ValueError, match=r"^'toy' is not a real release \(hubnorm.data.real\): it declares no nearest "
                                         r"published data set; pass the notebook's dataset parameter instead$"):
        ex.nearest_published(ds)


def test_load_real_sets_prepares_the_cached_ones_and_notes_the_others(monkeypatch, capsys):
    from hubnorm.data import real
    from hubnorm_companion.reporting import REAL_MISSING_NOTE

    status = {"a-release": "cached", "b-release": "missing", "c:release": "cached", "d-release": "partial"}
    monkeypatch.setattr(real, "real_status", lambda name: status[name])
    calls = []

    def prepare(src, **kwargs):
        calls.append((src, kwargs))
        return _dataset(source="real", name=src, meta={"release": src, "label": f"label of {src}"})

    monkeypatch.setattr(ex, "prepare_dataset", prepare)
    got = ex.load_real_sets(["real:a-release", "real:b-release", "real:c:release", "real:d-release"], seed=4,
                            dtype="float32", source_kwargs={"x": 1})
    assert list(got) == [f"label of real:a-release ({SIZES})", f"label of real:c:release ({SIZES})"]
    assert got[f"label of real:c:release ({SIZES})"].name == "real:c:release"   # a name after "real:", colon and all
    want = {"seed": 4, "dtype": "float32", "note_small": False, "source_kwargs": {"x": 1, "download": False}}
    assert calls == [("real:a-release", want), ("real:c:release", want)]
    assert capsys.readouterr().out == (
        f"{REAL_MISSING_NOTE} b-release, d-release: not on this machine (fetch with 'python -m hubnorm.data "
        "fetch-real b-release d-release', or let run_all.sh fetch it)\n")
    calls.clear()
    assert list(ex.load_real_sets(["real:a-release"], bank_splits=("val", "train"))) == [
        "label of real:a-release (20 test images x 5 captions; banks from 80 other images x 5 captions)"]
    calls.clear()
    assert list(ex.load_real_sets(["real:a-release"])) == [f"label of real:a-release ({SIZES})"]
    assert calls == [("real:a-release", {"seed": 0, "dtype": "float64", "note_small": False,
                                         "source_kwargs": {"download": False}})]
    assert capsys.readouterr().out == ""   # nothing missing: no note


# ------------------------------------------------------------------------------------------------ published tables
def test_paper_ids_and_short_names():
    from hubnorm_companion.reporting import load_published

    ids = ex.paper_ids()
    assert ids == sorted(set(load_published()["paper"])) and "nnn-chowdhury2024" in ids and "dbsn-pan2025" in ids
    assert ex.published_names("dataset", "nnn-chowdhury2024") == ex.published_names("dataset", "nnn")
    shorts = sorted(p.split("-")[0] for p in ids)
    with pytest.raises(ValueError, match=rf"^paper must be one of {re_list(shorts)} \(or a paper id "
                                         rf"{re_list(ids)}\); got 'chowdhury2024'$"):
        ex.published_names("dataset", "chowdhury2024")


def test_published_names_are_the_sorted_distinct_values_of_the_column():
    from hubnorm_companion.reporting import load_published

    for paper, pid in (("nnn", "nnn-chowdhury2024"), ("dbsn", "dbsn-pan2025")):
        df = load_published()
        df = df[df["paper"] == pid]
        for column in ("model", "dataset"):
            want = sorted({str(v) for v in df[column] if isinstance(v, str)})
            assert ex.published_names(column, paper) == want
    assert "audiocaps" in ex.published_names("dataset", "dbsn") and "audiocaps" not in ex.published_names("dataset")
    with pytest.raises(ValueError, match=r"^column must be 'model' or 'dataset'; got 'method'$"):
        ex.published_names("method")


def test_dataset_key_reads_only_what_the_source_declares():
    assert ex.dataset_key("synthetic:coco-isotropic") == "coco"
    assert ex.dataset_key("synthetic:") == "unknown" and ex.dataset_key("synthetic:-x") == "unknown"
    assert ex.dataset_key("cache:flickr30k") == "flickr30k"
    assert ex.dataset_key("cache::ViT-B-32:openai") == "unknown"
    declared = _dataset(source="real", meta={"dataset": "coco"})
    assert ex.dataset_key("local:/data/flickr30k", declared) == "coco"
    assert ex.dataset_key("local:/data/flickr30k") == "unknown"
    assert ex.dataset_key("local:/data/flickr30k", _dataset(source="real")) == "unknown"
    assert ex.dataset_key("local:/x", _dataset(source="real", meta={"dataset": ""})) == "unknown"
    assert ex.dataset_key("real:coco500", _dataset(source="real", meta={"dataset": 7})) == "7"
    assert ex.dataset_key("synthetic:flickr30k", declared) == "flickr30k"   # the source's kind comes first
    with pytest.raises(TypeError, match=r"^source must be a string; got None$"):
        ex.dataset_key(None)


def test_published_dataset_checks_the_name_and_notes_no_rows(capsys):
    known = ex.published_names("dataset")
    assert ex.published_dataset("local:/x", None, "coco") == "coco"
    assert ex.published_dataset("synthetic:flickr30k") == "flickr30k"
    assert ex.published_dataset("synthetic:coco", paper="dbsn") == "coco"
    assert ex.published_dataset("local:/x", None, "audiocaps", paper="dbsn") == "audiocaps"
    assert capsys.readouterr().out == ""
    tail = (f" (pass dataset= one of {known} to compare anyway; a local: folder may declare it in model_info.json "
            "as \"dataset\")\n")
    assert ex.published_dataset("local:/x", None, "unknown") == "unknown"
    assert capsys.readouterr().out == ("NOTE: no published rows are compared with this run: the source declares no "
                                       "data set" + tail)
    assert ex.published_dataset("local:/x") == "unknown"
    assert capsys.readouterr().out.startswith("NOTE: no published rows are compared with this run: the source "
                                              "declares no data set (")
    assert ex.published_dataset("synthetic:audiocaps-clap") == "audiocaps"
    assert capsys.readouterr().out == ("NOTE: no published rows are compared with this run: the papers report no "
                                       "rows for the data set 'audiocaps'" + tail)
    for bad in ("imagenet", 3, "audiocaps"):
        with pytest.raises(ValueError, match=rf"^dataset={bad!r} is not a data set of the published tables "
                                             rf"\(nnn-chowdhury2024\); known: {re_list(known)}, or None to read it "
                                             rf"from the source, or 'unknown'$"):
            ex.published_dataset("synthetic:coco", None, bad)


def _real(meta):
    return EmbeddingDataset(name="x", source="real", splits={"test": _sized(2, 2)}, meta=meta)


def test_published_model_explicit_names(ds, capsys):
    assert ex.published_model(ds, None) is None
    assert ex.published_model(ds, "SigLIP") == "SigLIP"
    assert ex.published_model(ds, "zs CLIP", paper="dbsn") == "zs CLIP"
    known = ex.published_names("model")
    for bad in ("clip", 3):
        with pytest.raises(ValueError, match=rf"^model={bad!r} is not a model of the published tables "
                                             rf"\(nnn-chowdhury2024\); known: {re_list(known)}, or 'auto' to follow "
                                             rf"the embeddings$"):
            ex.published_model(ds, bad)
    with pytest.raises(ValueError, match=r"model='CLIP' is not a model of the published tables \(dbsn-pan2025\)"):
        ex.published_model(ds, "CLIP", paper="dbsn")
    assert capsys.readouterr().out == ""


def test_published_model_auto_follows_the_embeddings(ds, capsys):
    assert ex.published_model(ds) == "CLIP"
    assert ex.published_model(ds, paper="dbsn") == "zs CLIP"
    assert ex.published_model(_real({"model": "ViT-B-16-SigLIP", "pretrained": "webli"})) == "SigLIP"
    assert ex.published_model(_real({"model": "ViT-B-16-SigLIP", "pretrained": "webli"}), paper="dbsn") is None
    assert ex.published_model(_real({"model": "ViT-B-32-quickgelu", "pretrained": "openai"})) == "CLIP"
    assert ex.published_model(_real({"model": "ViT-B-32", "pretrained": "openai"}), paper="dbsn") == "zs CLIP"
    assert ex.published_model(_real({"model": "openai/CLIP-ViT-Base-Patch32"})) == "CLIP"   # the real release
    assert ex.published_model(_real({"model": "Salesforce/blip-itm-base-coco"})) == "BLIP ft. COCO"
    assert capsys.readouterr().out == ""
    assert ex.published_model(_real({})) is None
    assert capsys.readouterr().out == (
        "NOTE: the papers report no rows for the model '(unknown)': no published numbers are shown (pass "
        "model='CLIP' or another published name to compare anyway; run_all.sh --param model=CLIP)\n")
    assert ex.published_model(_real({"model": "my-model"}), paper="dbsn") is None
    assert "report no rows for the model 'my-model': no published numbers" in capsys.readouterr().out


@pytest.mark.parametrize("pretrained", ["none", "laion2b_s34b_b79k"])
def test_published_model_auto_follows_published_model_name_for_open_clip_vit_b_32(pretrained, capsys):
    """Bug fixed: a random-init or LAION-trained ViT-B-32 was called "CLIP" and set beside the published zero-shot
    OpenAI CLIP rows; ``published_model_name`` (the rule the docstring cites) gives None for both, and so does
    ``published_model`` now, with its note."""
    from hubnorm.data.models import published_model_name

    assert published_model_name("ViT-B-32", pretrained) is None
    assert ex.published_model(_real({"model": "ViT-B-32", "pretrained": pretrained})) is None
    assert "the papers report no rows for the model 'ViT-B-32'" in capsys.readouterr().out
    assert ex.published_model(_real({"model": "ViT-B-32-256", "pretrained": "datacomp_s34b_b86k"})) is None


def test_published_model_auto_renames_for_a_paper_given_by_its_id(ds):
    """Bug fixed: ``paper="dbsn-pan2025"`` (accepted everywhere else) gave "CLIP", a model the DBSN tables do not
    have (an explicit ``model="CLIP"`` is refused for that paper), instead of "zs CLIP"."""
    assert ex.published_model(ds, paper="dbsn-pan2025") == ex.published_model(ds, paper="dbsn") == "zs CLIP"
    assert ex.published_model(ds, paper="nnn-chowdhury2024") == "CLIP"
    assert ex.published_model(ds, paper="nnn-chowdhury2024") in ex.published_names("model", "nnn-chowdhury2024")
    assert ex.published_model(ds, paper="dbsn-pan2025") in ex.published_names("model", "dbsn-pan2025")


def test_published_label_says_why_there_is_no_column(capsys):
    assert ex.published_label("nnn", "CLIP", "flickr30k") == "NNN paper, CLIP on flickr30k"
    rows = pd.DataFrame({"value": [1.0]})
    assert ex.published_label("dbsn", "zs CLAP", "audiocaps", rows) == "DBSN paper, zs CLAP on audiocaps"
    assert capsys.readouterr().out == ""
    assert ex.published_label("nnn", None, "flickr30k") == "none (no published model for these embeddings)"
    assert capsys.readouterr().out == ("NOTE: no published column: no published model for these embeddings; the "
                                       "tables show this run only\n")
    no_rows = rows.iloc[:0]
    assert ex.published_label("nnn", "CLIP", "coco", no_rows) == "none (the paper reports no rows for CLIP on coco)"
    assert capsys.readouterr().out == ("NOTE: no published column: the paper reports no rows for CLIP on coco; the "
                                       "tables show this run only\n")
    assert ex.published_label("nnn", "CLIP", "audiocaps") == "none (the paper reports no rows for CLIP on audiocaps)"


# ------------------------------------------------------------------------------------------------ cross-dataset bank
@pytest.mark.parametrize("off", [None, "", "none", "None"])
def test_cross_dataset_source_off(off, ds, capsys):
    assert ex.cross_dataset_source(ds, off) is None
    assert ex.cross_dataset_source(_dataset(source="real"), off) is None
    assert capsys.readouterr().out == ""


def test_cross_dataset_source_auto_and_explicit(capsys):
    by_name = _dataset(name="synthetic-coco")
    assert ex.cross_dataset_source(by_name, "auto") == "synthetic:flickr30k"
    by_meta = _dataset(name="whatever", meta={"preset": "flickr30k-isotropic"})
    assert ex.cross_dataset_source(by_meta, "auto") == "synthetic:coco-isotropic"
    assert ex.cross_dataset_source(by_meta, "synthetic:flickr30k") == "synthetic:flickr30k"
    real = _dataset(source="real")
    cache = "cache:coco:ViT-B-32-quickgelu:openai"
    assert ex.cross_dataset_source(real, cache) == cache
    assert capsys.readouterr().out == ""
    assert ex.cross_dataset_source(_dataset(meta={"preset": "audiocaps-clap"}), "auto") is None
    assert capsys.readouterr().out == (
        "NOTE: no cross-dataset rows: the data set registry names no partner of 'audiocaps' with a synthetic preset "
        "(pass cross_source='synthetic:<preset>' to choose one)\n")
    assert ex.cross_dataset_source(_dataset(meta={"preset": "coco-wide"}), "auto") is None   # no flickr30k-wide
    assert "names no partner of 'coco' with a synthetic preset" in capsys.readouterr().out
    assert ex.cross_dataset_source(real, "auto") is None
    assert capsys.readouterr().out == (
        "NOTE: no cross-dataset rows: this run is on real data and no real cross_source was given (pass e.g. "
        "cross_source='cache:coco:ViT-B-32-quickgelu:openai')\n")
    assert ex.cross_dataset_source(real, "synthetic:coco") is None
    assert capsys.readouterr().out == ("NOTE: cross_source='synthetic:coco' is synthetic but this run is on real "
                                       "data: cross-dataset rows skipped\n")


# ------------------------------------------------------------------------------------------------ banks and tasks
@pytest.mark.parametrize("bad", [True, False, 0, 0.0, -0.5, 1.0001, 2, "0.5", None])
def test_reference_split_refuses_a_fraction_outside_0_1(bad, ds):
    error = TypeError if isinstance(bad, (bool, str, type(None))) else ValueError
    with pytest.raises(error, match=rf"^fraction must be a number in \(0, 1\]; got {re_list([bad])[2:-2]}$"):
        ex.reference_split(ds, "train", bad)
    with pytest.raises(error, match=rf"^bank_fraction must be a number in \(0, 1\]; got {re_list([bad])[2:-2]}$"):
        ex.open_data("synthetic:flickr30k", bank_fraction=bad)   # refused before any loading


def test_reference_split_draws_round_fraction_of_the_images_with_their_captions(ds, capsys):
    train = ds.split("train")
    for fraction, seed, n in ((0.195, 3, 12), (0.2, 0, 12), (0.001, 1, 1), (0.5, 2, 30)):
        bank = ex.reference_split(ds, "train", fraction, seed, note_small=False)
        idx = np.sort(np.random.default_rng(seed).choice(60, n, replace=False))
        assert bank.n_images == n and bank.n_captions == 5 * n
        np.testing.assert_array_equal(bank.images, train.images[idx])
        keep = np.isin(train.caption_to_image, idx)
        np.testing.assert_array_equal(bank.captions, train.captions[keep])
        np.testing.assert_array_equal(idx[bank.caption_to_image], train.caption_to_image[keep])
    assert not np.array_equal(ex.reference_split(ds, "train", 0.5, 1, note_small=False).images,
                              ex.reference_split(ds, "train", 0.5, 2, note_small=False).images)
    np.testing.assert_array_equal(ex.reference_split(ds, "train", 0.5, note_small=False).images,
                                  ex.reference_split(ds, "train", 0.5, 0, note_small=False).images)   # seed 0
    assert ex.reference_split(ds, "val", 1, note_small=False) is ds.split("val")
    assert ex.reference_split(ds, note_small=False) is train
    assert capsys.readouterr().out == ""


def test_reference_split_notes_a_bank_under_200_images(capsys):
    ds = _dataset(sizes=(("train", 400),), caps=1)
    ex.reference_split(ds, "train", 0.5)              # 200 images: enough
    assert capsys.readouterr().out == ""
    ex.reference_split(ds, "train", 0.4975, seed=2)    # 199 images
    assert capsys.readouterr().out == (
        "NOTE: the reference bank has only 199 images / 199 captions (50% of 'train'): hubness estimates from so "
        "small a bank are noisy, and k is limited by its size\n")
    ex.reference_split(_dataset(), "val")
    assert capsys.readouterr().out == (
        "NOTE: the reference bank has only 20 images / 100 captions (100% of 'val'): hubness estimates from so "
        "small a bank are noisy, and k is limited by its size\n")


def test_make_tasks_directions_banks_and_meta(ds):
    test, bank = ds.split("test"), ds.split("train")
    tasks = ex.make_tasks(test, bank, directions=["i2t"], meta={"setting": "s"})
    assert list(tasks) == ["i2t"]
    t = tasks["i2t"]
    assert t.queries is test.images and t.targets is test.captions
    assert t.query_bank is bank.images and t.target_bank is bank.captions and t.meta["setting"] == "s"
    plain = ex.make_tasks(test)
    assert list(plain) == ["t2i", "i2t"]
    assert all(t.query_bank is None and t.target_bank is None for t in plain.values())
    assert plain["t2i"].queries is test.captions


# ------------------------------------------------------------------------------------------------ grids
def test_clamp_params_at_the_limit(small_bank_tasks, capsys):
    i2t = small_bank_tasks["i2t"]   # NNN's query bank: 6 bank images; query-aware: the 20 test images
    assert ex.clamp_params("nnn", {"alpha": 0.5, "k": 6}, i2t) == {"alpha": 0.5, "k": 6}
    assert capsys.readouterr().out == ""
    got = ex.clamp_params("nnn", {"alpha": 0.5, "k": "7"}, i2t)
    assert got == {"alpha": 0.5, "k": 6} and type(got["k"]) is int
    assert capsys.readouterr().out == "NOTE: nnn i2t: k=7 is larger than this task allows (6); using k=6\n"
    assert ex.clamp_params("nnn", {"k": 20}, i2t, query_aware=True) == {"k": 20}
    assert ex.clamp_params("nnn", {"k": 21}, i2t, query_aware=True) == {"k": 20}
    assert ex.clamp_params("nnn", {"k": 64}, small_bank_tasks["t2i"]) == {"k": 30}   # 6 images x 5 captions
    params = {"lam": 0.5}
    out = ex.clamp_params("dn", params, i2t)
    assert out == params and out is not params
    assert ex.clamp_params("nnn", {"alpha": 1.0}, i2t) == {"alpha": 1.0}


def test_paper_or_fast_grid():
    reduced = {"nnn": {"alpha": (1.0,), "k": range(1, 3)}}
    assert ex.paper_or_fast_grid("nnn", True, reduced) == {"alpha": [1.0], "k": [1, 2]}
    assert ex.paper_or_fast_grid("nnn", False, reduced) == PAPER_GRIDS["nnn"]
    assert ex.paper_or_fast_grid("nnn", True) == PAPER_GRIDS["nnn"]
    assert ex.paper_or_fast_grid("nnn", True, {}) == PAPER_GRIDS["nnn"]
    assert ex.paper_or_fast_grid("dn", True, reduced) == {"lam": [0.25, 0.5, 0.75, 1.0]}
    assert ex.paper_or_fast_grid("raw", False) == {}
    grid = ex.paper_or_fast_grid("nnn", False)
    grid["k"].append(10 ** 6)   # a copy
    assert 10 ** 6 not in PAPER_GRIDS["nnn"]["k"]


def test_fmt_params_formats_floats_with_g():
    assert ex.fmt_params({"alpha": 0.5, "tau": 1e-05, "beta": 1.0, "k": 16, "flag": True, "mode": "x",
                          "x": np.float64(0.125)}) == "alpha=0.5, tau=1e-05, beta=1, k=16, flag=True, mode=x, x=0.125"
    assert ex.fmt_params({}) == ""
    assert ex.fmt_params({"device": "cpu", "chunk_size": 64}) == ""


def test_method_items_and_params_for():
    assert ex.method_items(["raw", "nnn"]) == [("raw", "raw"), ("nnn", "nnn")]
    assert ex.method_items({"a": "nnn", "b": "nnn"}) == [("a", "nnn"), ("b", "nnn")]
    assert ex.params_for(None, "t2i", "nnn") == {} and ex.params_for({}, "t2i", "nnn") == {}
    flat = {"nnn": {"k": 4}, "dn": None}
    got = ex.params_for(flat, "t2i", "nnn")
    assert got == {"k": 4} and got is not flat["nnn"]
    assert ex.params_for(flat, "t2i", "dn") == {} and ex.params_for(flat, "t2i", "is") == {}
    per = {"t2i": {"nnn": {"k": 2}, "dn": None}, "i2t": {"nnn": {"k": 8}}}
    assert ex.params_for(per, "t2i", "nnn") == {"k": 2} and ex.params_for(per, "i2t", "nnn") == {"k": 8}
    assert ex.params_for(per, "t2i", "dn") == {} and ex.params_for(per, "t2i", "is") == {}
    got = ex.params_for(per, "t2i", "nnn")
    assert got is not per["t2i"]["nnn"]
    # a label that is also a direction name: the label wins; a direction entry that is not a dict is no table
    assert ex.params_for({"t2i": {"k": 3}}, "t2i", "t2i") == {"k": 3}
    assert ex.params_for({"t2i": 5, "nnn": {"k": 1}}, "t2i", "nnn") == {"k": 1}


# ------------------------------------------------------------------------------------------------ running methods
def _raw_reference(task, ks):
    """R@K / MdR / MnR of the raw cosine ranking, float64, written out: the rank of a query's first positive."""
    s = np.asarray(task.queries, np.float64) @ np.asarray(task.targets, np.float64).T
    ranks = []
    for i in range(len(s)):
        pos = task.positives.indices[task.positives.indptr[i]:task.positives.indptr[i + 1]]
        best = s[i, pos].max()
        ranks.append(1 + int((s[i] > best).sum()))
    ranks = np.array(ranks, float)
    out = {f"R@{k}": 100.0 * np.mean(ranks <= k) for k in ks}
    return {**out, "MdR": float(np.median(ranks)), "MnR": float(ranks.mean())}


def _raw_skewness(task, k):
    """Skewness (population) of N_k of the raw cosine top-k, float64."""
    s = np.asarray(task.queries, np.float64) @ np.asarray(task.targets, np.float64).T
    top = np.argsort(-s, axis=1, kind="stable")[:, :k]
    n_k = np.bincount(top.ravel(), minlength=s.shape[1]).astype(float)
    d = n_k - n_k.mean()
    return float(np.mean(d ** 3) / np.mean(d ** 2) ** 1.5)


def test_run_methods_against_a_float64_reference_of_the_raw_ranks(ds, monkeypatch):
    tasks = ex.make_tasks(ds.split("test"), ds.split("train"))
    monkeypatch.delitem(ex.DISPLAY_NAMES, "raw")   # no display name: the registry name is shown
    t0 = time.perf_counter()
    df = ex.run_methods(tasks, {"plain": "raw", "n": "nnn"}, {"n": {"alpha": 0.5, "k": 4}}, ks=(2, 3),
                        hubness_k=(1, 3), show_progress=False)
    elapsed = time.perf_counter() - t0
    assert list(df["direction"]) == ["t2i", "t2i", "i2t", "i2t"] and list(df["method"]) == ["plain", "n"] * 2
    assert list(df["name"]) == ["raw", "NNN"] * 2
    assert list(df["params"]) == ["", "alpha=0.5, k=4"] * 2
    assert "R@1" not in df.columns and "R@5" not in df.columns
    assert not [c for c in df.columns if c.endswith((" lo", " hi"))]   # no bootstrap unless asked
    for d in ("t2i", "i2t"):
        row = df[(df["direction"] == d) & (df["method"] == "plain")].iloc[0]
        ref = _raw_reference(tasks[d], (2, 3))
        for col, v in ref.items():
            assert row[col] == pytest.approx(v, abs=1e-9), (d, col)
        for k in (1, 3):
            assert row[f"skewness@{k}"] == pytest.approx(_raw_skewness(tasks[d], k), abs=1e-9)
    assert ((df["fit_s"] >= 0) & (df["fit_s"] <= elapsed)).all()


def test_run_methods_hands_on_the_bootstrap_and_query_aware(small_bank_tasks):
    tasks = small_bank_tasks
    df = ex.run_methods(tasks, ["nnn"], {"nnn": {"alpha": 1.0, "k": 10}}, n_boot=25, seed=9, query_aware=True,
                        extra={"setting": "qa", "bank": "x"}, show_progress=False)
    assert list(df["params"]) == ["alpha=1, k=10"] * 2   # k=10 fits the query-aware banks (100 / 20 queries)
    assert set(df["setting"]) == {"qa"} and set(df["bank"]) == {"x"}
    for d, row in zip(df["direction"], df.itertuples()):
        task = tasks[d]
        norm = task.fit(hn.make_normalizer("nnn", alpha=1.0, k=10), query_aware=True)
        direct = hn.evaluate(norm, task, n_boot=25, seed=9)
        for col in ("R@1", "R@5", "R@1 lo", "R@1 hi", "R@10 lo", "MnR"):
            assert df.loc[row.Index, col] == direct[col], (d, col)
    other = ex.run_methods(tasks, ["nnn"], {"nnn": {"alpha": 1.0, "k": 10}}, n_boot=25, seed=10, query_aware=True,
                           show_progress=False)
    assert not np.array_equal(other[["R@1 lo", "R@1 hi", "R@5 lo", "R@5 hi"]].to_numpy(),
                              df[["R@1 lo", "R@1 hi", "R@5 lo", "R@5 hi"]].to_numpy())
    default_seed = ex.run_methods(tasks, ["raw"], n_boot=25, show_progress=False)
    direct = hn.evaluate(tasks["t2i"].fit(hn.make_normalizer("raw")), tasks["t2i"], n_boot=25, seed=0)
    assert (default_seed.loc[0, "R@1 lo"], default_seed.loc[0, "R@5 hi"]) == (direct["R@1 lo"], direct["R@5 hi"])
    agnostic = ex.run_methods(tasks, ["nnn"], {"nnn": {"alpha": 1.0, "k": 10}}, show_progress=False)
    assert list(agnostic["params"]) == ["alpha=1, k=10", "alpha=1, k=6"]
    assert "extra" not in agnostic.columns and "setting" not in agnostic.columns


def _val_test(ds, directions=("t2i", "i2t")):
    bank = ds.split("train")
    return (ex.make_tasks(ds.split("val"), bank, directions=directions),
            ex.make_tasks(ds.split("test"), bank, directions=directions))


def test_select_parameters_by_metric_with_fixed_parameters(ds):
    val, _ = _val_test(ds)
    grids = {"n": {"alpha": [0.25, 1.0, 1.5], "k": [1, 8]}, "d": {"lam": [0.25, 1.0]}}
    sel = ex.select_parameters(val, {"n": "nnn", "d": "dn", "r": "raw"}, grids, metric="MnR",
                               fixed={"d": {"chunk_size": 32}, "r": {"chunk_size": 7}}, show_progress=False)
    assert "val MnR" in sel.columns and "val R@1" not in sel.columns
    for d in ("t2i", "i2t"):
        rows = sel[sel["direction"] == d].set_index("method")
        gs = hn.grid_search("nnn", val[d], grids["n"], metric="MnR")
        assert rows.loc["n", "params"] == gs.best_params and rows.loc["n", "val MnR"] == gs.best_score
        assert rows.loc["n", "chosen"] == ex.fmt_params(gs.best_params)
        assert rows.loc["n", "grid points"] == 6 and rows.loc["n", "engine"] == gs.engine
        assert rows.loc["n", "tied"] == gs.n_tied
        assert rows.loc["n", "bank"] == " / ".join(dict.fromkeys(gs.table["bank"])) == "query-agnostic"
        gd = hn.grid_search("dn", val[d], grids["d"], metric="MnR", fixed={"chunk_size": 32})
        assert rows.loc["d", "params"] == {"chunk_size": 32, **gd.best_params}
        assert rows.loc["d", "chosen"] == ex.fmt_params(gd.best_params) and rows.loc["d", "grid points"] == 2
        assert rows.loc["r", "params"] == {"chunk_size": 7} and rows.loc["r", "chosen"] == "(none)"
        assert np.isnan(rows.loc["r", "val MnR"]) and rows.loc["r", "grid points"] == 0
        assert rows.loc["r", "engine"] == "-" and rows.loc["r", "tied"] == 0 and rows.loc["r", "bank"] == NO_BANK
        assert rows.loc["r", "normalizer"] == "raw" and rows.loc["d", "normalizer"] == "dn"
    assert list(sel.columns) == ["direction", "method", "normalizer", "chosen", "val MnR", "grid points", "engine",
                                 "tied", "bank", "params"]


def test_select_parameters_without_grids_and_with_reuse(ds, capsys):
    val, _ = _val_test(ds, ("t2i",))
    sel = ex.select_parameters(val, ["nnn", "csls"], None, fixed={"nnn": {"alpha": 0.5, "k": 2}},
                               extra={"setting": "s"}, show_progress=False)
    assert list(sel["chosen"]) == ["alpha=0.5, k=2", "(none)"] and list(sel["params"]) == [{"alpha": 0.5, "k": 2}, {}]
    assert set(sel["setting"]) == {"s"} and list(sel["grid points"]) == [0, 0]
    grids = {"dualis": {"beta_query": [10.0, 50.0], "beta_target": [0.0]}}
    sel = ex.select_parameters(val, ["dualis", "dualdis"], grids, fixed={"dualdis": {"chunk_size": 16}},
                               reuse={"dualdis": "dualis"}, show_progress=False)
    first, second = sel.iloc[0], sel.iloc[1]
    assert second["params"] == {"chunk_size": 16, **first["params"]}
    assert second["chosen"] == f"{ex.fmt_params(first['params'])} (as dualis)"
    assert np.isnan(second["val R@1"]) and second["grid points"] == 0 and second["engine"] == "-"
    assert second["tied"] == 0 and second["bank"] == first["bank"] == "query-agnostic"
    assert sel.loc[sel["method"] == "dualdis", "normalizer"].item() == "dualdis"


def test_select_parameters_clamps_the_grid_and_notes_ties(capsys):
    ds = _dataset(sizes=(("train", 4), ("val", 12)), caps=1)
    # captions equal to their images: every grid point finds every image (a tie at 100)
    for s in ds.splits.values():
        s.captions = s.images.copy()
    val = ex.make_tasks(ds.split("val"), ds.split("train"), directions=["i2t"])
    sel = ex.select_parameters(val, ["nnn"], {"nnn": {"alpha": [0.0, 0.5], "k": [1, 4, 8]}}, show_progress=False)
    gs = hn.grid_search("nnn", val["i2t"], {"alpha": [0.0, 0.5], "k": [1, 4]})
    assert gs.n_tied == 4 and gs.tie_note
    out = capsys.readouterr().out
    assert out == ("NOTE: nnn i2t: grid k values [8] exceed what this task allows (4); searching k in [1, 4]\n"
                   f"NOTE: nnn i2t: {gs.tie_note} (alpha=0, k=1)\n")
    row = sel.iloc[0]
    assert row["grid points"] == 4 and row["tied"] == 4 and row["params"] == {"alpha": 0.0, "k": 1}


def test_select_and_evaluate_hands_every_option_on(ds):
    val, test = _val_test(ds)
    test_i2t = {"i2t": test["i2t"]}
    grids = {"nnn": {"alpha": [0.25, 1.0]}, "dualis": {"beta_query": [10.0, 50.0], "beta_target": [0.0]}}
    res, sel = ex.select_and_evaluate(val, test_i2t, ["nnn", "dualis", "dualdis"], grids, metric="R@5",
                                      fixed={"nnn": {"k": 2}}, reuse={"dualdis": "dualis"}, n_boot=15, seed=4,
                                      hubness_k=(2,), extra={"setting": "e"}, show_progress=False)
    assert list(sel["direction"]) == ["i2t"] * 3 and list(res["direction"]) == ["i2t"] * 3
    assert "val R@5" in sel.columns and "setting" not in sel.columns and set(res["setting"]) == {"e"}
    gs = hn.grid_search("nnn", val["i2t"], grids["nnn"], metric="R@5", fixed={"k": 2})
    params = sel.set_index("method")["params"]
    assert params["nnn"] == {"k": 2, **gs.best_params} and params["dualdis"] == params["dualis"]
    want = ex.run_methods(test_i2t, ["nnn", "dualis", "dualdis"], params.to_dict(), n_boot=15,
                          seed=4, hubness_k=(2,), extra={"setting": "e"}, show_progress=False)
    cols = ["method", "params", "R@1", "R@5", "R@10", "MdR", "MnR", "R@1 lo", "R@5 hi", "skewness@2", "setting"]
    pd.testing.assert_frame_equal(res[cols], want[cols])


def test_progress_bars_only_when_asked(ds, monkeypatch, capsys):
    """The bars are on by default (on stderr) and off with ``show_progress=False``, in both steps of
    ``select_and_evaluate`` too."""
    monkeypatch.setenv("HUBNORM_PROGRESS", "1")
    monkeypatch.delenv("HUBNORM_PROGRESS_FILE", raising=False)
    val, test = _val_test(ds, ("t2i",))
    capsys.readouterr()
    ex.run_methods(test, ["raw"], show_progress=False)
    ex.select_parameters(val, ["raw"], None, show_progress=False)
    ex.select_and_evaluate(val, test, ["raw"], None, show_progress=False)
    assert capsys.readouterr().err == ""
    ex.run_methods(test, ["raw"])
    err = capsys.readouterr().err
    assert "methods: " in err and "selection on val" not in err
    ex.select_parameters(val, ["raw"], None)
    err = capsys.readouterr().err
    assert "selection on val: " in err and "methods" not in err
    ex.select_and_evaluate(val, test, ["raw"], None)
    err = capsys.readouterr().err
    assert "selection on val: " in err and "methods: " in err


def test_select_and_evaluate_defaults_no_bootstrap_and_seed_0(ds):
    val, test = _val_test(ds, ("t2i",))
    res, _ = ex.select_and_evaluate(val, test, ["raw"], None, show_progress=False)
    assert not [c for c in res.columns if c.endswith((" lo", " hi"))]
    res, _ = ex.select_and_evaluate(val, test, ["raw"], None, n_boot=25, show_progress=False)
    want = ex.run_methods(test, ["raw"], n_boot=25, seed=0, show_progress=False)
    assert (res.loc[0, "R@1 lo"], res.loc[0, "R@10 hi"]) == (want.loc[0, "R@1 lo"], want.loc[0, "R@10 hi"])


def test_select_parameters_joins_the_bank_marks_of_the_grid(ds, monkeypatch):
    """A grid whose fits had different banks (here a stand-in ``grid_search``) names each mark once, in order."""
    from hubnorm.selection import SelectionResult

    calls = []

    def fake_grid_search(name, task, grid, *, metric, fixed):
        calls.append((name, grid, metric, fixed))
        table = pd.DataFrame({"k": [1, 2, 3], "R@1": [1.0, 2.0, 2.0],
                              "bank": ["query-agnostic", "QUERY-AWARE", "query-agnostic"]})
        return SelectionResult(name, {"k": 2}, 2.0, metric, table, engine="fake", n_tied=2)

    monkeypatch.setattr(ex, "grid_search", fake_grid_search)
    val, _ = _val_test(ds, ("t2i",))
    sel = ex.select_parameters(val, ["nnn"], {"nnn": {"k": [1, 2, 3]}}, fixed={"nnn": {"alpha": 0.5}},
                               show_progress=False)
    assert calls == [("nnn", {"k": [1, 2, 3]}, "R@1", {"alpha": 0.5})]
    row = sel.iloc[0]
    assert row["bank"] == "query-agnostic / QUERY-AWARE" and row["engine"] == "fake" and row["tied"] == 2
    assert row["params"] == {"alpha": 0.5, "k": 2} and row["chosen"] == "k=2" and row["grid points"] == 3


# ---------------------------------------------------------------------------------------------- open_data
def test_open_data_on_embeddings_is_prepare_dataset_and_make_tasks(capsys):
    src = ex.open_data("synthetic:flickr30k", directions=["i2t"], bank_fraction=0.5, seed=1,
                       synthetic_sizes={"n_train_images": 40, "n_test_images": 30, "n_val_images": 0, "dim": 96})
    ds = ex.prepare_dataset("synthetic:flickr30k", seed=1, synthetic_sizes={"n_train_images": 40, "n_test_images": 30,
                                                                           "n_val_images": 0, "dim": 96})
    bank = ex.reference_split(ds, "train", 0.5, seed=1)
    want = ex.make_tasks(ds.split("test"), bank)
    assert list(src.tasks) == ["i2t"] and list(src.all_tasks) == ["t2i", "i2t"] and src.has_embeddings
    for d in ("t2i", "i2t"):
        for name in ("queries", "targets", "query_bank", "target_bank"):
            np.testing.assert_array_equal(getattr(src.all_tasks[d], name), getattr(want[d], name))
    assert src.label == ex.run_label(ds) and src.bank_words == "14 images / 70 captions" == \
        f"{bank.n_images} images / {bank.n_captions} captions"   # half of the 27 training images left beside val
    assert src.bank_name("i2t") == "reference bank (50% of train)"
    pd.testing.assert_frame_equal(src.describe(), ex.describe(ds))
    capsys.readouterr()
    assert src.needs_embeddings("a map") and capsys.readouterr().out == ""


def test_open_data_hands_its_loader_arguments_to_prepare_dataset(monkeypatch):
    calls = []

    class Stop(Exception):
        pass

    def fake(source, **kw):
        calls.append((source, kw))
        raise Stop

    monkeypatch.setattr(ex, "prepare_dataset", fake)
    with pytest.raises(Stop):
        ex.open_data("local:/x", seed=4, dtype="float32", synthetic_sizes={"n_test_images": 5},
                     source_kwargs={"val": False}, ensure_val=False)
    assert calls == [("local:/x", {"seed": 4, "dtype": "float32", "synthetic_sizes": {"n_test_images": 5},
                                   "source_kwargs": {"val": False}, "ensure_val": False})]
    with pytest.raises(Stop):
        ex.open_data("local:/x")   # the defaults: seed 0, float64, no sizes or loader arguments, a val split
    assert calls[1] == ("local:/x", {"seed": 0, "dtype": "float64", "synthetic_sizes": None, "source_kwargs": None,
                                     "ensure_val": True})


def _sims_folder(path, with_bank):
    from hubnorm.data.sims import write_sims

    rng = np.random.default_rng(0)
    caps, items, bank = (rng.standard_normal((n, 8)) for n in (12, 6, 20))
    mats = {"test": caps @ items.T, **({"bank_rows": bank @ items.T} if with_bank else {})}
    write_sims(path, mats, modalities=("text", "video"), dataset="example", synthetic=True,
               labels=np.arange(12) % 6)
    return mats


def test_open_data_on_score_matrices_keeps_the_folders_bank(tmp_path, capsys):
    mats = _sims_folder(tmp_path / "f", with_bank=True)
    src = ex.open_data(f"sims:{tmp_path / 'f'}", directions=["t2i", "i2t"])
    out = capsys.readouterr().out
    assert "bank_fraction" not in out
    assert "no bank x gallery scores for this direction" in out and "i2t:" in out and "t2i: the folder" not in out
    assert ("NOTE: directions t2i = t2v, i2t = v2t (the notebook's names for the folder's text-query and item-query "
            "directions; tables and figures use the notebook's)") in out   # said once, by open_data
    ex.open_data(f"sims:{tmp_path / 'f'}", directions=["i2t"])
    assert "NOTE: directions i2t = v2t (" in capsys.readouterr().out
    assert not src.has_embeddings and src.ds is None and src.test is None and src.bank is None
    t2i, i2t = src.all_tasks["t2i"], src.all_tasks["i2t"]
    assert (t2i.direction, i2t.direction) == ("t2v", "v2t") and t2i.kind == "scores"
    np.testing.assert_allclose(t2i.matrix("query_bank", "targets").block(0, 20, 0, 6, torch.float64).numpy(),
                               mats["bank_rows"])
    # the video-query direction has no bank rows: its test queries serve as the bank, and its name says so
    np.testing.assert_allclose(i2t.matrix("query_bank", "targets").block(0, 6, 0, 12, torch.float64).numpy(),
                               mats["test"].T)
    assert src.test_as_bank == ("i2t",)
    assert src.bank_name("t2i") == "the folder's bank rows"
    assert src.bank_name("i2t") == "test queries (query-aware: the folder has no bank rows)"
    assert src.bank_words == "the folder's bank rows (t2i: 20, i2t: none, the test queries serve)"
    # bank_fraction: a seeded share of the folder's bank rows, as with_bank_fraction takes it (one meaning)
    part = ex.open_data(f"sims:{tmp_path / 'f'}", directions=["t2i", "i2t"], bank_fraction=0.2, seed=3)
    assert "bank_fraction" not in capsys.readouterr().out
    want = src.with_bank_fraction(0.2, seed=3)
    rows = np.sort(np.random.default_rng(3).choice(20, 4, replace=False))
    for run in (part, want):
        got = run.all_tasks["t2i"].matrix("query_bank", "targets").block(0, 4, 0, 6, torch.float64).numpy()
        np.testing.assert_allclose(np.sort(got, axis=0), np.sort(mats["bank_rows"][rows], axis=0))
    assert part.bank_words == want.bank_words == \
        "20% of the folder's bank rows (t2i: 4, i2t: none, the test queries serve)"
    assert part.bank_name("t2i") == "20% of the folder's bank rows"
    assert part.all_tasks["i2t"].size("query_bank") == src.all_tasks["i2t"].size("query_bank") == 6   # all serve
    with pytest.raises(ValueError, match="already a share of the source's"):
        part.with_bank_fraction(0.5)
    assert list(src.describe()["query_bank"]) == [20, 6]
    assert list(src.describe().columns) == ["direction", "queries", "targets", "query_bank"]
    assert hn.evaluate(i2t.fit(hn.InvertedSoftmax(tau=0.1)), i2t)["bank"] == "QUERY-AWARE"
    assert not src.needs_embeddings("the t-SNE map")
    assert capsys.readouterr().out == (f"NOTE: the t-SNE map needs embeddings; sims:{tmp_path / 'f'} holds score "
                                       "matrices only, so it is not shown\n")
    with pytest.raises(ValueError, match=r"^source_kwargs apply to embeddings sources, not to a sims: folder"):
        ex.open_data(f"sims:{tmp_path / 'f'}", source_kwargs={"val": False})


def test_published_model_of_a_run_without_embeddings_is_none_with_a_note(capsys):
    assert ex.published_model(None) is None
    assert capsys.readouterr().out == ("NOTE: the source names no encoder (score matrices): no published numbers are "
                                       "shown (pass model='CLIP' or another published name to compare anyway)\n")
    assert ex.published_model(None, "CLIP") == "CLIP"


def test_a_bank_x_bank_matrix_alone_is_no_query_bank_and_directions_are_checked(tmp_path, capsys):
    """Found by the pre-stop review: a folder with the bank x bank scores but no bank x gallery scores of one
    direction counted as having its bank, so its methods were skipped instead of fitted query-aware."""
    from hubnorm.data.sims import write_sims

    rng = np.random.default_rng(1)
    caps, items, bank_c, bank_i = (rng.standard_normal((n, 8)) for n in (12, 6, 20, 9))
    write_sims(tmp_path / "f", {"test": caps @ items.T, "bank_rows": bank_c @ items.T,
                                "bank_rows_x_bank_cols": bank_c @ bank_i.T},
               modalities=("text", "video"), dataset="example", synthetic=True, labels=np.arange(12) % 6)
    sims = ex.load_sims_run(f"sims:{tmp_path / 'f'}")
    assert sims.has_bank("t2v") and not sims.has_bank("v2t")
    src = ex.open_data(f"sims:{tmp_path / 'f'}")
    assert src.test_as_bank == ("i2t",) and src.bank_name("i2t").startswith("test queries (query-aware")
    assert "NOTE: i2t: the folder has no bank x gallery scores" in capsys.readouterr().out
    assert hn.evaluate(src.tasks["i2t"].fit(hn.InvertedSoftmax(tau=0.1)), src.tasks["i2t"])["bank"] == "QUERY-AWARE"
    for bad in (["x"], "t2i", [], ["t2v"]):
        with pytest.raises(ValueError, match=r"^directions must be a non-empty list of \['t2i', 'i2t'\]"):
            ex.open_data(f"sims:{tmp_path / 'f'}", directions=bad)


def test_open_data_names_sizes_that_clash_or_leave_no_bank():
    with pytest.raises(ValueError, match=r"^source_kwargs and synthetic_sizes both set \['n_train_images'\] for "
                                         r"synthetic:flickr30k: give the sizes of a synthetic source in "
                                         r"synthetic_sizes only$"):
        ex.open_data("synthetic:flickr30k", synthetic_sizes={"n_train_images": 50, "n_test_images": 20},
                     source_kwargs={"n_train_images": 5})
    with pytest.raises(ValueError, match=r"^synthetic:flickr30k has no training images left for the reference banks "
                                         r"\(synthetic_sizes \{'n_train_images': 0, 'n_test_images': 20\}\): give "
                                         r"n_train_images at least 1 \(synthetic_sizes\), or a source with a training "
                                         r"split$"):
        ex.open_data("synthetic:flickr30k", synthetic_sizes={"n_train_images": 0, "n_test_images": 20})
    run = ex.open_data("synthetic:flickr30k", synthetic_sizes={"n_train_images": 30, "n_test_images": 20},
                       source_kwargs={"dim": 128})   # other loader options beside the sizes: fine
    assert run.test.n_images == 20
