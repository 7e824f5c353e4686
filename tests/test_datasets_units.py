"""``hubnorm.datasets.load_embeddings`` and the one table of source kinds behind it (``hubnorm.data.sources``) in
small pieces: the malformed source refused by its message (not a string, no colon), an unknown kind refused by its
message (both naming every form of the table), a ``sims:`` folder refused by ``load_embeddings`` (it holds score
matrices), ``HUBNORM_FORBID_SYNTHETIC=1`` refusing synthetic sources only (any on value of
``hubnorm._env.env_switch`` turns it on, an off value or none leaves it off, anything else is an error naming the
variable), and each kind dispatched to its loader with the text after the first colon and the
keyword arguments unchanged (the loaders replaced here by recorders); one real call of the synthetic generator.

"""

from __future__ import annotations

import importlib
import re

import numpy as np
import pytest

import hubnorm.synthetic
from hubnorm.data.sources import SOURCE_KINDS, load_source, source_kind
from hubnorm.datasets import EmbeddingDataset, load_embeddings

_FORMS = (r"'synthetic:<preset>', 'cache:<dataset>:<model>:<pretrained>', 'local:<folder>', 'real:<release>' or "
          r"'sims:<folder>'")
_SOURCE_MSG = r"source must look like " + _FORMS + "; got "


@pytest.fixture
def recorded(monkeypatch):
    """Every loader replaced by a recorder: (loader name, rest, kwargs) appended per call."""
    calls = []

    def fake(name):
        def loader(*args, **kwargs):
            calls.append((name, args, kwargs))
            return f"from {name}"
        return loader

    monkeypatch.delenv("HUBNORM_FORBID_SYNTHETIC", raising=False)
    monkeypatch.setattr(hubnorm.synthetic, "make_dataset", fake("make_dataset"))
    for module, name in (("pipeline", "load_cached_embeddings"), ("local", "load_local_embeddings"),
                         ("real", "load_real"), ("sims", "load_sims")):
        monkeypatch.setattr(importlib.import_module(f"hubnorm.data.{module}"), name, fake(name))
    return calls


@pytest.mark.parametrize("source", ["coco", "", 42, None, b"synthetic:coco"])
def test_a_source_without_a_colon_or_not_a_string_is_refused(source, recorded):
    with pytest.raises(ValueError, match="^" + _SOURCE_MSG + re.escape(repr(source)) + "$"):
        load_embeddings(source)
    assert recorded == []


def test_an_unknown_kind_is_refused(recorded):
    with pytest.raises(ValueError, match=r"^unknown source kind 'hub': use " + _FORMS + "$"):
        load_embeddings("hub:coco")
    with pytest.raises(ValueError, match=r"^unknown source kind '': use " + _FORMS + "$"):
        load_embeddings(":coco")
    with pytest.raises(ValueError, match=r"^unknown source kind 'Synthetic'"):
        load_embeddings("Synthetic:coco")
    assert recorded == []


@pytest.mark.parametrize("source, loader, rest", [
    ("synthetic:coco", "make_dataset", "coco"),
    ("synthetic:flickr30k", "make_dataset", "flickr30k"),
    ("cache:coco:ViT-B-32:openai", "load_cached_embeddings", "coco:ViT-B-32:openai"),
    ("local:/data/my:folder", "load_local_embeddings", "/data/my:folder"),
    ("real:coco500-clip-b16", "load_real", "coco500-clip-b16"),
])
def test_each_kind_goes_to_its_loader_with_the_rest_and_the_keywords(source, loader, rest, recorded):
    assert load_embeddings(source, seed=3, chunk_size=None) == f"from {loader}"
    assert recorded == [(loader, (rest,), {"seed": 3, "chunk_size": None})]


def test_forbid_synthetic_refuses_synthetic_sources_only(recorded, monkeypatch):
    monkeypatch.setenv("HUBNORM_FORBID_SYNTHETIC", "1")
    with pytest.raises(RuntimeError, match=r"^synthetic data \('synthetic:coco'\) requested while "
                                           r"HUBNORM_FORBID_SYNTHETIC is set: this run must use real data only "
                                           r"\(check the source parameters, e\.g\. cross_source\)$"):
        load_embeddings("synthetic:coco")
    assert recorded == []
    assert load_embeddings("real:coco500-clip-b16") == "from load_real"
    assert load_embeddings("cache:coco:synthetic-rehearsal:seed0") == "from load_cached_embeddings"
    assert [c[0] for c in recorded] == ["load_real", "load_cached_embeddings"]


@pytest.mark.parametrize("value", ["1", "true", "TRUE", "yes", "on", " 1", "1\n"])
def test_forbid_synthetic_takes_every_on_value(value, recorded, monkeypatch):
    monkeypatch.setenv("HUBNORM_FORBID_SYNTHETIC", value)
    with pytest.raises(RuntimeError, match="HUBNORM_FORBID_SYNTHETIC is set"):
        load_embeddings("synthetic:coco")
    assert recorded == []


@pytest.mark.parametrize("value", ["0", "", "  ", "false", "No", "off"])
def test_forbid_synthetic_off_values_load(value, recorded, monkeypatch):
    monkeypatch.setenv("HUBNORM_FORBID_SYNTHETIC", value)
    assert load_embeddings("synthetic:coco") == "from make_dataset"
    assert recorded == [("make_dataset", ("coco",), {})]


@pytest.mark.parametrize("value", ["11", "ture", "2", "enabled"])
def test_forbid_synthetic_refuses_a_value_that_is_no_switch(value, recorded, monkeypatch):
    monkeypatch.setenv("HUBNORM_FORBID_SYNTHETIC", value)
    with pytest.raises(ValueError, match=rf"^environment variable HUBNORM_FORBID_SYNTHETIC={value!r} is not an on/off "
                                         r"switch: set it to 1 \(or true, yes, on\) or 0 \(or false, no, off\), or "
                                         r"unset it$"):
        load_embeddings("synthetic:coco")
    assert recorded == []


def test_a_real_synthetic_dataset_comes_back(monkeypatch):
    monkeypatch.delenv("HUBNORM_FORBID_SYNTHETIC", raising=False)
    ds = load_embeddings("synthetic:coco", seed=1, n_train_images=4, n_test_images=3, dim=70)
    assert isinstance(ds, EmbeddingDataset) and ds.source == "synthetic"
    test, train = ds.splits["test"], ds.splits["train"]
    assert test.n_images == 3 and train.n_images == 4 and test.images.shape[1] == 70
    again = hubnorm.synthetic.make_dataset("coco", seed=1, n_train_images=4, n_test_images=3, dim=70)
    np.testing.assert_array_equal(ds.splits["test"].captions, again.splits["test"].captions)


def test_a_sims_folder_is_a_source_of_scores_not_of_embeddings(recorded):
    with pytest.raises(ValueError, match=r"^'sims:/x' holds score matrices, not embeddings: load its retrieval tasks "
                                         r"with hubnorm\.media\.load_media\(source\)"):
        load_embeddings("sims:/x")
    assert recorded == []
    assert load_source("sims:/x", verify=False) == "from load_sims"
    assert recorded == [("load_sims", ("/x",), {"verify": False})]


def test_the_table_of_kinds():
    """What each kind holds and whether its loader splits the data (seed / val): the rules the loaders' callers
    (load_media, the hubnorm command, the notebooks' prepare_dataset) read instead of source prefixes."""
    assert {k: (v.holds, v.splits) for k, v in SOURCE_KINDS.items()} == {
        "synthetic": ("embeddings", False), "cache": ("embeddings", False), "local": ("embeddings", True),
        "real": ("embeddings", True), "sims": ("scores", False)}
    assert all(v.form.startswith(k + ":") for k, v in SOURCE_KINDS.items())
    kind, rest = source_kind("local:/a:b")
    assert kind is SOURCE_KINDS["local"] and rest == "/a:b"


@pytest.mark.parametrize("source, form", [("local:", "local:<folder>"), ("sims: ", "sims:<folder>"),
                                          ("synthetic:", "synthetic:<preset>")])
def test_a_kind_with_nothing_after_its_colon_is_refused_before_any_loader(source, form, recorded):
    """'local:' would have read the working directory."""
    with pytest.raises(ValueError, match=f"^source {source!r} names no {source.split(':')[0]} source after the colon: "
                                         f"use {form}$"):
        load_source(source)
    assert recorded == []
