"""Unit checks of hubnorm.data.rehearse aimed at what its mutation run found unchecked: every guard of the
rehearsal section (``rehearsal_sizes``, ``_count``) and of ``read_rehearsal_file``, ``scaled_sizes`` and
``rehearse`` by its own message and at its boundary (5 and 6 captions per image accepted, one caption fewer or more
refused; a scale of exactly 1 accepted, 0 refused; seed 0 and a NumPy integer seed accepted), the scaled sizes by
hand (Python's rounding of halves, the one image a split keeps, the extra captions that cannot exceed the images),
the evenly spread images that keep a 6th caption against an independent formula (the k-th extra caption goes to
image ceil(k n / e) - 1), the tag, ``cache:`` spec and metadata texts character for character, and what
``rehearse`` writes: the manifest key, the description, the image ids and caption texts, the caption-to-image map
and the caption rows kept from the generator's 6-caption split (checked against one chunk of
``hubnorm.synthetic.iter_split_chunks`` of the same configuration, with the rows selected here), a split written in
two chunks against one chunk, the entries kept on a rerun and rewritten with ``force`` or when corrupt, and the
lines it prints.

Most checks use a tiny rehearsal section (:data:`TINY`, put in place of the rehearsal-sizes file's section through the
module's ``_file_sizes`` seam) so that writing a cache takes well under a second; the package's own file is read
by the tests of the file itself.

Mutation run (``--tests tests/test_data_cli_units.py tests/test_data_pipeline_units.py tests/test_data_rehearse.py
tests/test_own_data.py`` [+ this file], with ``PYTEST_ADDOPTS='-m "not slow"'``): 274 killed + 2 timeouts of 483
(57%) -> 465 killed of 483 (96%). The 18 survivors are equivalent mutants (no behaviour can tell them apart):
- ``read_rehearsal_file`` (4): ``where.open("r", encoding="utf-8")`` -> ``encoding=None``, no encoding,
  ``"UTF-8"``, or no mode: the same codec where the locale's encoding is UTF-8 (here: C.UTF-8); "r" is the default;
- ``scaled_sizes`` (1): ``if scale != 1`` -> ``if scale != 2``: at scale 1 the scaling branch gives the same sizes
  (``max(1, round(n))`` is n, and the extra captions never exceed the images);
- ``_six_caption_images`` (2) and ``rehearse``'s ``c2i`` (2): ``np.arange(n, dtype=np.int64)`` -> ``dtype=None`` or
  no dtype: the platform's default integer is int64, the same integers;
- ``rehearse`` (1): the default ``chunk_size=4096`` -> ``4097``, and (2) ``chunk_size=chunk_size`` -> ``None`` or
  left out in the ``iter_split_chunks`` call: the generator's output is the same for every chunk size (by design,
  checked here: two chunks against one); only the memory a write needs changes;
- ``rehearse`` (3): ``geo = None``, ``_geo=geo`` -> ``_geo=None`` or left out: the generator then computes the same
  geometry itself;
- ``rehearse`` (3): ``six = ... if extra else np.zeros(n_img, bool)`` -> ``... if extra or True ...`` (with no extra
  caption ``_six_caption_images`` gives the same all-False mask), ``np.zeros(n_img, None)`` or ``np.zeros(n_img)``
  (float zeros: the same ``np.where(six, 6, 5)``; the mask is read only when there are extra captions).
"""

from __future__ import annotations

import importlib
import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from hubnorm._version import __version__
from hubnorm.data import cache as cache_mod
from hubnorm.synthetic import PRESETS, iter_split_chunks

rh = importlib.import_module("hubnorm.data.rehearse")   # the package attribute ``hubnorm.data.rehearse`` is a function

#: a tiny rehearsal section: a train split with 100 images of 6 captions (written in two chunks of 256 + 44 images),
#: a val split with 5 captions per image and a test split with 3 of 7 images that keep a 6th caption
TINY = {"flickr30k": {"preset": "flickr30k", "splits": {"train": (300, 1600), "val": (3, 15), "test": (7, 38)}}}


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setattr(rh, "_file_sizes", lambda: TINY)
    return "flickr30k"


def _section(**splits) -> dict:
    """A rehearsal-sizes document with one dataset ``p`` (preset flickr30k)."""
    return {"rehearsal": {"p": {"preset": "flickr30k", "splits": splits}}}


def _fails(data, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        rh.rehearsal_sizes(data)


# ----------------------------------------------------------------------------------------- read_rehearsal_file
def test_read_rehearsal_file_default_and_given(tmp_path):
    data = rh.read_rehearsal_file()
    assert isinstance(data, dict) and set(data) == {"rehearsal"}
    path = tmp_path / "p.yaml"
    path.write_text("rehearsal: {a: 1}\nneeds: {}\n", encoding="utf-8")
    assert rh.read_rehearsal_file(path) == {"rehearsal": {"a": 1}, "needs": {}}
    assert rh.read_rehearsal_file(str(path)) == {"rehearsal": {"a": 1}, "needs": {}}


def test_read_rehearsal_file_without_pyyaml_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "yaml", None)   # ``import yaml`` then raises ImportError
    message = "reading the rehearsal sizes needs PyYAML: pip install pyyaml"
    with pytest.raises(ImportError, match="^" + re.escape(message) + "$") as err:
        rh.read_rehearsal_file()
    assert isinstance(err.value.__cause__, ImportError)


def test_read_rehearsal_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("rehearsal: [1, 2\n", encoding="utf-8")
    with pytest.raises(ValueError, match="^" + re.escape(f"{bad}: not valid YAML (")) as err:
        rh.read_rehearsal_file(bad)
    assert err.value.__cause__ is None and err.value.__suppress_context__ and str(err.value).endswith(")")
    for text in ("- rehearsal\n- needs\n", "", "just a string\n"):
        bad.write_text(text, encoding="utf-8")
        with pytest.raises(ValueError, match="^" + re.escape(f"{bad}: must be a mapping with the section "
                                                             "rehearsal") + "$"):
            rh.read_rehearsal_file(str(bad))
    with pytest.raises(FileNotFoundError):
        rh.read_rehearsal_file(tmp_path / "missing.yaml")


# ------------------------------------------------------------------------------------------ rehearsal_sizes
def test_the_files_rehearsal_section():
    profiles = rh.rehearsal_sizes()
    assert profiles == {
        "flickr30k": {"preset": "flickr30k",
                      "splits": {"train": (29000, 145000), "val": (1014, 5070), "test": (1000, 5000)}},
        "coco": {"preset": "coco", "splits": {"train": (113287, 566747), "val": (5000, 25010), "test": (5000, 25010)}}}
    assert rh.rehearsal_sizes() is profiles   # read once
    assert rh.rehearsal_sizes(rh.read_rehearsal_file()) == profiles
    assert rh.SIZES == profiles
    assert "SIZES" in rh.__all__ and "PROFILES" not in rh.__all__


def test_module_getattr_knows_only_sizes():
    with pytest.raises(AttributeError, match=r"^module 'hubnorm\.data\.rehearse' has no attribute 'NOPE'$"):
        getattr(rh, "NOPE")
    assert not hasattr(rh, "sizes") and not hasattr(rh, "PROFILES")


def test_a_valid_section_becomes_integer_pairs():
    data = {"rehearsal": {"d": {"preset": "coco", "splits": {"a": [1, 5], "b": (10, 60), "c": [3, 16]}},
                          "e": {"preset": "flickr30k", "splits": {"test": [2, 12]}}},
            "profiles": "ignored"}
    got = rh.rehearsal_sizes(data)
    assert got == {"d": {"preset": "coco", "splits": {"a": (1, 5), "b": (10, 60), "c": (3, 16)}},
                   "e": {"preset": "flickr30k", "splits": {"test": (2, 12)}}}
    assert all(type(v) is tuple for p in got.values() for v in p["splits"].values())


@pytest.mark.parametrize("section", [None, {}, [], "p"])
def test_the_section_must_be_a_non_empty_mapping(section):
    data = {} if section is None else {"rehearsal": section}
    _fails(data, "rehearsal sizes: rehearsal must be a non-empty mapping of datasets to split sizes")


@pytest.mark.parametrize("prof, got", [
    ({"preset": "coco"}, "['preset']"),
    ({"preset": "coco", "splits": {"a": [1, 5]}, "seed": 0}, "['preset', 'seed', 'splits']"),
    ({"dataset": "p", "preset": "coco", "splits": {"a": [1, 5]}}, "['dataset', 'preset', 'splits']"),   # the key
    (["preset", "splits"], "['preset', 'splits']"),
    ("coco", "'coco'"),
])
def test_a_dataset_has_exactly_two_keys(prof, got):
    _fails({"rehearsal": {"p": prof}}, f"rehearsal sizes: rehearsal.p must have exactly the keys preset, splits; "
                                        f"got {got}")


@pytest.mark.parametrize("dataset", ["", 3, None])
def test_the_key_must_be_a_dataset_name(dataset):
    data = {"rehearsal": {dataset: {"preset": "coco", "splits": {"test": [1, 5]}}}}
    _fails(data, f"rehearsal sizes: rehearsal.{dataset} must be keyed by a dataset name; got {dataset!r}")


def test_preset_must_be_a_generator_preset():
    data = _section(test=[1, 5])
    data["rehearsal"]["p"]["preset"] = "imagenet"
    _fails(data, f"rehearsal sizes: rehearsal.p.preset must be a preset of hubnorm.synthetic ({sorted(PRESETS)}); "
                 "got 'imagenet'")


@pytest.mark.parametrize("splits", [{}, [["test", 1, 5]], None])
def test_splits_must_be_a_non_empty_mapping(splits):
    data = _section()
    data["rehearsal"]["p"]["splits"] = splits
    _fails(data, "rehearsal sizes: rehearsal.p.splits must map split names to [images, captions]")


@pytest.mark.parametrize("pair", [[1], [1, 5, 6], "15", 5, None, {1: 5}])
def test_a_split_is_a_pair(pair):
    _fails(_section(test=pair), f"rehearsal sizes: rehearsal.p.splits.test must be [images, captions]; got {pair!r}")


@pytest.mark.parametrize("bad", [0, -2, True, 2.0, "2", None])
def test_counts_are_positive_integers(bad):
    _fails(_section(val=[1, 5], test=[bad, 10]),
           f"rehearsal sizes: rehearsal.p.splits.test[0] (images) must be a positive integer; got {bad!r}")
    _fails(_section(test=[2, bad]),
           f"rehearsal sizes: rehearsal.p.splits.test[1] (captions) must be a positive integer; got {bad!r}")


def test_count_accepts_one_and_returns_an_int():
    assert rh._count(1, "k") == 1 and type(rh._count(np.int64(7).item(), "k")) is int
    with pytest.raises(ValueError, match=r"^k must be a positive integer; got 0$"):
        rh._count(0, "k")
    with pytest.raises(ValueError, match=r"^k must be a positive integer; got False$"):
        rh._count(False, "k")


@pytest.mark.parametrize("n_img, n_cap, ok", [(10, 50, True), (10, 60, True), (10, 55, True), (1, 5, True),
                                              (1, 6, True), (10, 49, False), (10, 61, False), (1, 4, False),
                                              (1, 7, False)])
def test_between_five_and_six_captions_per_image(n_img, n_cap, ok):
    data = _section(test=[n_img, n_cap])
    if ok:
        assert rh.rehearsal_sizes(data)["p"]["splits"] == {"test": (n_img, n_cap)}
    else:
        _fails(data, f"rehearsal sizes: rehearsal.p.splits.test has {n_cap} captions for {n_img} images; the generator "
                     "makes between 5 and 6 captions per image")


# ------------------------------------------------------------------------------------------ names and sizes
def test_default_rehearsal_root(tmp_path, monkeypatch):
    monkeypatch.setenv("HUBNORM_CACHE", str(tmp_path / "c"))
    assert rh.default_rehearsal_root() == tmp_path / "c" / "rehearsal"
    assert rh.default_rehearsal_root(None) == tmp_path / "c" / "rehearsal"
    assert rh.default_rehearsal_root(str(tmp_path / "x")) == tmp_path / "x"
    assert isinstance(rh.default_rehearsal_root(str(tmp_path / "x")), Path)


def test_pretrained_tag_and_cache_spec():
    assert rh.pretrained_tag(3) == "seed3"
    assert rh.pretrained_tag(3, 1) == rh.pretrained_tag(np.int64(3), 1.0) == "seed3"
    assert rh.pretrained_tag(0, 0.5) == "seed0-scale0.5"
    assert rh.pretrained_tag(12, 0.001) == "seed12-scale0.001"
    assert rh.pretrained_tag(1, 0.0001) == "seed1-scale0.0001"
    assert rh.cache_spec("coco") == "cache:coco:synthetic-rehearsal:seed0"
    assert rh.cache_spec("flickr30k", 4) == "cache:flickr30k:synthetic-rehearsal:seed4"
    assert rh.cache_spec("flickr30k", 4, 0.25) == "cache:flickr30k:synthetic-rehearsal:seed4-scale0.25"
    with pytest.raises(ValueError, match=r"^unknown rehearsal dataset 'paper-coco'; valid: \['coco', "
                                         r"'flickr30k'\]$"):
        rh.cache_spec("paper-coco")


def test_scaled_sizes_by_hand(tiny):
    assert rh.scaled_sizes(tiny) == rh.scaled_sizes(tiny, 1) == {"train": (300, 1600), "val": (3, 15),
                                                                   "test": (7, 38)}
    # 7 x 0.5 = 3.5 -> 4 images, 3 extra x 0.5 = 1.5 -> 2 (halves round to even); 3 x 0.5 = 1.5 -> 2
    assert rh.scaled_sizes(tiny, 0.5) == {"train": (150, 800), "val": (2, 10), "test": (4, 22)}
    # 300 x 0.01 = 3 images with 1 extra caption; every split keeps one image
    assert rh.scaled_sizes(tiny, 0.01) == {"train": (3, 16), "val": (1, 5), "test": (1, 5)}
    assert rh.scaled_sizes(tiny, 0.25) == {"train": (75, 400), "val": (1, 5), "test": (2, 11)}
    assert rh.scaled_sizes(tiny, 1e-9) == {"train": (1, 5), "val": (1, 5), "test": (1, 5)}


def test_scaled_sizes_of_the_papers_datasets():
    assert rh.scaled_sizes("coco") == {"train": (113287, 566747), "val": (5000, 25010),
                                             "test": (5000, 25010)}
    assert rh.scaled_sizes("coco", 0.01) == {"train": (1133, 5668), "val": (50, 250), "test": (50, 250)}


def test_extra_captions_never_exceed_the_images(monkeypatch):
    """6 images of 6 captions at 0.75: 4.5 -> 4 images, but 6 x 0.75 = 4.5 -> 4 extra: at most one per image."""
    monkeypatch.setattr(rh, "_file_sizes", lambda: {"s": {"preset": "coco",
                                                             "splits": {"test": (6, 36), "val": (7, 41)}}})
    assert rh.scaled_sizes("s", 0.75) == {"test": (4, 24), "val": (5, 29)}   # val: 5.25 -> 5 images, 4.5 -> 4 extra
    assert rh.scaled_sizes("s", 0.5) == {"test": (3, 18), "val": (4, 23)}    # val: 3.5 -> 4, 3 extra


@pytest.mark.parametrize("scale", [0, 0.0, -0.5, 1.0001, 2, True, "0.5", None])
def test_scale_must_be_in_zero_one(tiny, scale):
    with pytest.raises(ValueError, match="^" + re.escape(f"scale must be a number in (0, 1]; got {scale!r}") + "$"):
        rh.scaled_sizes(tiny, scale)


# ------------------------------------------------------------------------------------------ 6th captions
def _reference_six(n: int, e: int) -> np.ndarray:
    """The k-th of e extra captions (k = 1..e) goes to image ceil(k n / e) - 1."""
    out = np.zeros(n, bool)
    for k in range(1, e + 1):
        out[math.ceil(k * n / e) - 1] = True
    return out


def test_six_caption_images_by_hand():
    assert rh._six_caption_images(5, 2).tolist() == [False, False, True, False, True]
    assert rh._six_caption_images(7, 3).tolist() == [False, False, True, False, True, False, True]
    assert rh._six_caption_images(4, 4).tolist() == [True] * 4
    assert rh._six_caption_images(4, 0).tolist() == [False] * 4
    assert rh._six_caption_images(1, 1).tolist() == [True]
    assert rh._six_caption_images(3, 1).tolist() == [False, False, True]


@pytest.mark.parametrize("n, e", [(10, 3), (13, 7), (100, 1), (100, 99), (256, 100), (1000, 2)])
def test_six_caption_images_against_an_independent_formula(n, e):
    got = rh._six_caption_images(n, e)
    assert got.dtype == bool and got.shape == (n,) and got.sum() == e
    np.testing.assert_array_equal(got, _reference_six(n, e))


# ------------------------------------------------------------------------------------------ rehearse
def _generated(cfg, split: str, n_img: int, seed: int):
    """The generator's images and captions of a split, in one chunk (``generate_split``'s arrays without its
    split object, whose checks take seconds at 300 images)."""
    (i0, i1, images, captions, *_), = iter_split_chunks(cfg, split, n_img, seed=seed, chunk_size=n_img)
    assert (i0, i1) == (0, n_img)
    return images, captions


def _read(folder: Path):
    arrays, texts, manifest = cache_mod.read_entry(folder)
    return arrays, texts, manifest


def test_rehearse_writes_each_split_with_its_sizes_key_and_texts(tiny, tmp_path, capsys):
    root = tmp_path / "r"
    res = rh.rehearse(tiny, cache_dir=root, seed=3, chunk_size=256)
    assert set(res) == {"spec", "cache_dir", "splits"}
    assert res["spec"] == "cache:flickr30k:synthetic-rehearsal:seed3" and res["cache_dir"] == str(root)
    assert list(res["splits"]) == ["train", "val", "test"]
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"wrote    flickr30k {s}: {n} images / {c} captions (synthetic) -> "
                     f"{root / 'flickr30k' / 'synthetic-rehearsal' / 'seed3' / s}"
                     for s, (n, c) in TINY["flickr30k"]["splits"].items()]
    for split, (n_img, n_cap) in TINY["flickr30k"]["splits"].items():
        folder = root / "flickr30k" / "synthetic-rehearsal" / "seed3" / split
        arrays, texts, manifest = _read(folder)
        assert manifest == res["splits"][split]
        six = n_cap > 5 * n_img
        cfg = PRESETS["flickr30k"].replace(captions_per_image=6 if six else 5)
        assert manifest["key"] == {
            "dataset": "flickr30k", "split": split, "model": "synthetic-rehearsal", "pretrained": "seed3",
            "encoder_family": "synthetic-rehearsal", "precision": "fp32", "annotations_sha256": None,
            "versions": {"hubnorm": __version__}, "source": "synthetic-rehearsal",
            "preset": "flickr30k", "seed": 3, "scale": 1.0, "generator": json.loads(json.dumps(cfg.to_dict()))}
        assert manifest["key"]["generator"]["captions_per_image"] == (6 if six else 5)
        assert manifest["description"] == ("SYNTHETIC rehearsal data (hubnorm.synthetic preset 'flickr30k', seed 3) "
                                           f"with the flickr30k Karpathy {split} split sizes; not real embeddings")
        assert (manifest["n_images"], manifest["n_captions"], manifest["dim"]) == (n_img, n_cap, cfg.dim)
        assert arrays["images"].shape == (n_img, cfg.dim) and arrays["captions"].shape == (n_cap, cfg.dim)
        per_image = np.where(_reference_six(n_img, n_cap - 5 * n_img), 6, 5)
        np.testing.assert_array_equal(arrays["caption_to_image"], np.repeat(np.arange(n_img), per_image))
        assert texts["image_files"] == [f"synthetic-rehearsal/{split}/{i:06d}" for i in range(n_img)]
        c2i = arrays["caption_to_image"].tolist()
        assert texts["captions"] == [f"synthetic caption {j} (image {c2i[j]})" for j in range(n_cap)]


@pytest.mark.parametrize("split", ["train", "test", "val"])
def test_rehearse_keeps_the_generators_rows(tiny, tmp_path, split):
    """The images are the generator's; the captions are its 6-caption split (5-caption where no image has a 6th)
    without the 6th caption of the images that do not keep one (rows selected here, image by image)."""
    n_img, n_cap = TINY["flickr30k"]["splits"][split]
    res = rh.rehearse(tiny, cache_dir=tmp_path, seed=1, splits=[split], chunk_size=256, progress=False)
    arrays, _, _ = _read(Path(res["cache_dir"]) / "flickr30k" / "synthetic-rehearsal" / "seed1" / split)
    c = 6 if n_cap > 5 * n_img else 5
    images, captions = _generated(PRESETS["flickr30k"].replace(captions_per_image=c), split, n_img, 1)
    keep = _reference_six(n_img, n_cap - 5 * n_img)
    rows = [i * c + j for i in range(n_img) for j in range(c) if j < 5 or keep[i]]
    np.testing.assert_array_equal(arrays["images"], images)
    np.testing.assert_array_equal(arrays["captions"], captions[rows])


def test_two_chunks_write_what_one_chunk_writes(tiny, tmp_path):
    a = rh.rehearse(tiny, cache_dir=tmp_path / "a", seed=2, splits=("train",), chunk_size=256, progress=False)
    b = rh.rehearse(tiny, cache_dir=tmp_path / "b", seed=2, splits=("train",), progress=False)
    for name in ("images.npy", "captions.npy", "caption_to_image.npy", "texts.json"):
        assert a["splits"]["train"]["files"][name]["sha256"] == b["splits"]["train"]["files"][name]["sha256"]


def test_seeds_are_different_caches(tiny, tmp_path):
    a = rh.rehearse(tiny, cache_dir=tmp_path, seed=0, splits=("val",), progress=False)
    b = rh.rehearse(tiny, cache_dir=tmp_path, seed=np.int64(5), splits=("val",), progress=False)
    assert a["spec"].endswith(":seed0") and b["spec"].endswith(":seed5")
    assert b["splits"]["val"]["key"]["seed"] == 5 and type(b["splits"]["val"]["key"]["seed"]) is int
    assert a["splits"]["val"]["files"]["images.npy"]["sha256"] != b["splits"]["val"]["files"]["images.npy"]["sha256"]
    arrays, _, _ = _read(tmp_path / "flickr30k" / "synthetic-rehearsal" / "seed5" / "val")
    np.testing.assert_array_equal(arrays["images"], _generated(PRESETS["flickr30k"], "val", 3, 5)[0])


def test_a_scaled_rehearsal_says_so(tiny, tmp_path, capsys):
    res = rh.rehearse(tiny, cache_dir=tmp_path, scale=0.5, splits=("test",))
    assert res["spec"] == "cache:flickr30k:synthetic-rehearsal:seed0-scale0.5"
    man = res["splits"]["test"]
    assert (man["n_images"], man["n_captions"]) == (4, 22)
    assert man["key"]["scale"] == 0.5 and man["key"]["pretrained"] == "seed0-scale0.5" and man["key"]["seed"] == 0
    assert man["description"] == ("SYNTHETIC rehearsal data (hubnorm.synthetic preset 'flickr30k', seed 0) with the "
                                  "flickr30k Karpathy test split sizes x 0.5; not real embeddings")
    folder = tmp_path / "flickr30k" / "synthetic-rehearsal" / "seed0-scale0.5" / "test"
    assert capsys.readouterr().out == f"wrote    flickr30k test: 4 images / 22 captions (synthetic) -> {folder}\n"
    assert type(rh.rehearse(tiny, cache_dir=tmp_path, scale=1, splits=("val",), progress=False)
                ["splits"]["val"]["key"]["scale"]) is float


def test_rerun_keeps_entries_force_and_damage_rewrite_them(tiny, tmp_path, capsys):
    first = rh.rehearse(tiny, cache_dir=tmp_path, splits=("val",))
    capsys.readouterr()
    # a rerun of two splits: the first kept, the second (new) written
    again = rh.rehearse(tiny, cache_dir=tmp_path, splits=("val", "test"))
    folder = tmp_path / "flickr30k" / "synthetic-rehearsal" / "seed0"
    assert capsys.readouterr().out.splitlines() == [
        f"kept     flickr30k val: 3 images / 15 captions (synthetic) -> {folder / 'val'}",
        f"wrote    flickr30k test: 7 images / 38 captions (synthetic) -> {folder / 'test'}"]
    assert again["splits"]["val"] == first["splits"]["val"] and list(again["splits"]) == ["val", "test"]
    kept = rh.rehearse(tiny, cache_dir=tmp_path, splits=("val", "test"), progress=False)
    assert capsys.readouterr().out == ""
    assert kept["splits"] == again["splits"]
    # force: written again (a new manifest object, the same files)
    (folder / "val" / "manifest.json").write_text(json.dumps({**first["splits"]["val"], "created": "then"}))
    forced = rh.rehearse(tiny, cache_dir=tmp_path, splits=("val",), force=True)
    assert capsys.readouterr().out.startswith("wrote    flickr30k val:")
    assert forced["splits"]["val"]["created"] != "then"
    assert forced["splits"]["val"]["files"] == first["splits"]["val"]["files"]
    # a damaged entry is written again without force
    images = folder / "test" / "images.npy"
    images.write_bytes(images.read_bytes()[:-16])
    fixed = rh.rehearse(tiny, cache_dir=tmp_path, splits=("test",))
    assert capsys.readouterr().out.startswith("wrote    flickr30k test:")
    assert fixed["splits"]["test"]["files"] == again["splits"]["test"]["files"]
    _read(folder / "test")
    # an entry of another generator version is stale: written again
    man = json.loads((folder / "val" / "manifest.json").read_text())
    man["key"]["versions"] = {"hubnorm": "0.0.0"}
    (folder / "val" / "manifest.json").write_text(json.dumps(man))
    rh.rehearse(tiny, cache_dir=tmp_path, splits=("val",))
    assert capsys.readouterr().out.startswith("wrote    flickr30k val:")


def test_rehearse_defaults_write_all_splits_under_the_default_root(tiny, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HUBNORM_CACHE", str(tmp_path / "cache"))
    res = rh.rehearse(tiny)
    assert res["cache_dir"] == str(tmp_path / "cache" / "rehearsal")
    assert res["spec"] == "cache:flickr30k:synthetic-rehearsal:seed0"
    assert list(res["splits"]) == ["train", "val", "test"]
    assert [line.split(":")[0] for line in capsys.readouterr().out.splitlines()] == [
        "wrote    flickr30k train", "wrote    flickr30k val", "wrote    flickr30k test"]
    assert all(m["key"]["scale"] == 1.0 and m["key"]["seed"] == 0 for m in res["splits"].values())


@pytest.mark.parametrize("kwargs, message", [
    (dict(dataset="paper-x"), "unknown rehearsal dataset 'paper-x'; valid: ['flickr30k']"),
    (dict(dataset="paper-x", seed=-1), "unknown rehearsal dataset 'paper-x'; valid: ['flickr30k']"),
    (dict(seed=-1), "seed must be a non-negative integer; got -1"),
    (dict(seed=True), "seed must be a non-negative integer; got True"),
    (dict(seed=1.0), "seed must be a non-negative integer; got 1.0"),
    (dict(seed="1"), "seed must be a non-negative integer; got '1'"),
    (dict(seed=-1, scale=0), "seed must be a non-negative integer; got -1"),
    (dict(scale=0, splits=("dev",)), "scale must be a number in (0, 1]; got 0"),
    (dict(splits=("test", "dev")), "unknown split 'dev'; valid: ['test', 'train', 'val']"),
])
def test_rehearse_guards(tiny, tmp_path, kwargs, message):
    kwargs = {"dataset": tiny, **kwargs}
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        rh.rehearse(cache_dir=tmp_path, progress=False, **kwargs)
    assert not tmp_path.joinpath("flickr30k").exists()   # nothing written before the checks


# ------------------------------------------------------------------------------------------ rehearsal_meta
def test_rehearsal_meta_of_a_scaled_manifest():
    gen = {"dim": 8}
    man = {"key": {"dataset": "coco", "preset": "coco-isotropic", "seed": 2, "scale": 0.25, "generator": gen},
           "description": "D"}
    assert rh.rehearsal_meta(man) == {
        "synthetic": True, "rehearsal": True,
        "label": "synthetic rehearsal (coco Karpathy sizes x 0.25, preset coco-isotropic, seed 2)",
        "preset": "coco-isotropic", "seed": 2, "scale": 0.25, "config": gen,
        "description": "D"}


def test_rehearsal_meta_defaults():
    meta = rh.rehearsal_meta({"key": {"dataset": "flickr30k", "preset": "flickr30k", "seed": 0}})
    assert meta == {"synthetic": True, "rehearsal": True,
                    "label": "synthetic rehearsal (flickr30k Karpathy sizes, preset flickr30k, seed 0)",
                    "preset": "flickr30k", "seed": 0, "scale": 1.0, "config": None,
                    "description": "SYNTHETIC rehearsal data; not real embeddings"}
    assert rh.rehearsal_meta({"key": {"scale": 1}})["label"] == \
        "synthetic rehearsal (None Karpathy sizes, preset None, seed None)"


def test_rehearsal_meta_of_a_written_cache(tiny, tmp_path):
    res = rh.rehearse(tiny, cache_dir=tmp_path, seed=4, scale=0.5, splits=("val",), progress=False)
    meta = rh.rehearsal_meta(res["splits"]["val"])
    assert meta["label"] == "synthetic rehearsal (flickr30k Karpathy sizes x 0.5, preset flickr30k, seed 4)"
    assert meta["description"] == res["splits"]["val"]["description"]
    assert meta["config"] == res["splits"]["val"]["key"]["generator"] and "profile" not in meta
