"""``hubnorm.datasets.load_embeddings`` in small pieces: the malformed source refused by its message (not a string, no
colon), an unknown kind refused by its message, ``HUBNORM_FORBID_SYNTHETIC=1`` refusing synthetic sources only (and
only for the exact value ``"1"``), and each kind dispatched to its loader with the text after the first colon and the
keyword arguments unchanged (the loaders replaced here by recorders); one real call of the synthetic generator.

Survivors judged equivalent (no test can tell them apart):
- ``os.environ.get("HUBNORM_FORBID_SYNTHETIC", "0")``: the default ``"0"`` -> ``"XX0XX"``, ``None`` or dropped (3
  mutants: an unset variable is then still not ``"1"``).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import hubnorm.data
import hubnorm.synthetic
from hubnorm.datasets import EmbeddingDataset, load_embeddings

_SOURCE_MSG = (r"source must look like 'synthetic:coco', 'synthetic:flickr30k', "
               r"'cache:<dataset>:<model>:<pretrained>', 'local:<folder>' or 'real:<release>'; got ")


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
    for name in ("load_cached_embeddings", "load_local_embeddings", "load_real"):
        monkeypatch.setattr(hubnorm.data, name, fake(name))
    return calls


@pytest.mark.parametrize("source", ["coco", "", 42, None, b"synthetic:coco"])
def test_a_source_without_a_colon_or_not_a_string_is_refused(source, recorded):
    with pytest.raises(ValueError, match="^" + _SOURCE_MSG + re.escape(repr(source)) + "$"):
        load_embeddings(source)
    assert recorded == []


def test_an_unknown_kind_is_refused(recorded):
    with pytest.raises(ValueError, match=r"^unknown source kind 'hub': use 'synthetic', 'cache', 'local' or 'real'$"):
        load_embeddings("hub:coco")
    with pytest.raises(ValueError, match=r"^unknown source kind '': use 'synthetic', 'cache', 'local' or 'real'$"):
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
    ("real:", "load_real", ""),
])
def test_each_kind_goes_to_its_loader_with_the_rest_and_the_keywords(source, loader, rest, recorded):
    assert load_embeddings(source, seed=3, chunk_size=None) == f"from {loader}"
    assert recorded == [(loader, (rest,), {"seed": 3, "chunk_size": None})]


def test_forbid_synthetic_refuses_synthetic_sources_only(recorded, monkeypatch):
    monkeypatch.setenv("HUBNORM_FORBID_SYNTHETIC", "1")
    with pytest.raises(RuntimeError, match=r"^synthetic data \('synthetic:coco'\) requested while "
                                           r"HUBNORM_FORBID_SYNTHETIC=1: this run must use real embeddings only "
                                           r"\(check the source parameters, e\.g\. cross_source\)$"):
        load_embeddings("synthetic:coco")
    assert recorded == []
    assert load_embeddings("real:coco500-clip-b16") == "from load_real"
    assert load_embeddings("cache:coco:synthetic-rehearsal:seed0") == "from load_cached_embeddings"
    assert [c[0] for c in recorded] == ["load_real", "load_cached_embeddings"]


@pytest.mark.parametrize("value", ["0", "", "true", "yes", " 1", "11"])
def test_forbid_synthetic_takes_only_the_value_1(value, recorded, monkeypatch):
    monkeypatch.setenv("HUBNORM_FORBID_SYNTHETIC", value)
    assert load_embeddings("synthetic:coco") == "from make_dataset"
    assert recorded == [("make_dataset", ("coco",), {})]


def test_a_real_synthetic_dataset_comes_back(monkeypatch):
    monkeypatch.delenv("HUBNORM_FORBID_SYNTHETIC", raising=False)
    ds = load_embeddings("synthetic:coco", seed=1, n_train_images=4, n_test_images=3, dim=70)
    assert isinstance(ds, EmbeddingDataset) and ds.source == "synthetic"
    test, train = ds.splits["test"], ds.splits["train"]
    assert test.n_images == 3 and train.n_images == 4 and test.images.shape[1] == 70
    again = hubnorm.synthetic.make_dataset("coco", seed=1, n_train_images=4, n_test_images=3, dim=70)
    np.testing.assert_array_equal(ds.splits["test"].captions, again.splits["test"].captions)
