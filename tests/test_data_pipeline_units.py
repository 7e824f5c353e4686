"""``hubnorm.data.pipeline`` in small pieces, without any model: captions are built in the test, the image files
are a few bytes each (a stub encoder never decodes them), and the cache is a temporary folder. Checked: the
command texts (``encode_command``, ``fetch_commands``, ``rehearse_hint``), the missing-image message, what
``encode_split`` keys, writes and serves (cache hit, ``force``, the encoder's options and the image digests, the
legacy entries written before those fields, the warnings naming what differs, a file changed while encoded, a
wrong row count), ``_default_options``, ``verify_split``, ``_load_key``, ``_default_cache_dir``,
``parse_cache_spec``, ``load_cached_embeddings`` (missing splits and their commands, stale entries, loose
versions, the meta, rehearsal caches) and ``encode_dataset``.

Survivors judged equivalent (no test can tell them apart):
- ``parse_cache_spec``: the ``not sep`` / ``not sep2`` tests mutated (``or`` -> ``and`` around them): without the
  first colon the rest is empty and without a second one ``rpartition`` leaves the model empty, so ``not model``
  refuses both anyway.
- ``_default_options``: the model name or ``device="cpu"`` dropped from the encoder built there: ``options()``
  reads neither (building the object loads no model).
- ``load_cached_embeddings``: the field names of the second, loose read (``"dataset"`` -> ``"XXdatasetXX"``, ...):
  it follows a read whose only differences were versions, so those fields already matched (short of the entry
  being replaced between the two reads).
- ``stacklevel=2`` of the warnings dropped or made 3: the warning's reported file and line change, but under mutmut
  a trampoline sits between the caller and the function, so a test cannot check them there.
- ``_load_key``: ``versions=_cache.library_versions(family)`` -> ``versions=None`` or dropped (2 mutants):
  ``make_key`` then computes ``library_versions`` of the same family itself.
- ``load_cached_embeddings``: the split name ``"x"`` of the ``cache_dir`` meta mutated: only its ``.parent`` is kept.
- ``_split_from_entry``: ``f.rsplit("/", 1)[-1]`` with the maxsplit dropped or changed: the last piece is the same
  whatever the number of splits.
- ``encode_dataset``: ``device`` passed on to ``encode_split`` too (its ``k != "device"`` filter always true): with
  the encoder built (or given) before, ``encode_split`` never reads ``device`` (none in the 3-in-10 sample).
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings

import numpy as np
import pytest

from hubnorm.data import cache as cache_mod
from hubnorm.data import pipeline as pl
from hubnorm.data.annotations import CaptionSplit
from hubnorm.data.encoders import Encoder, FileChangedError
from hubnorm.data.registry import FLICKR30K_MANUAL

MODEL = "ViT-S-32"
FILES = ["val2014/a.jpg", "val2014/b.jpg", "val2014/c.jpg"]
CAPTIONS = ["one a", "two a", "one b", "one c", "two c"]
C2I = [0, 0, 1, 2, 2]


def _caps(dataset="coco", split="test", source="ann.json"):
    return CaptionSplit(dataset, split, list(FILES), list(CAPTIONS), np.array(C2I), source=source)


def _images(root, files=FILES):
    """Write a few distinct bytes per image file under ``root``; returns their sha256 digests (in order)."""
    out = []
    for i, f in enumerate(files):
        p = root / f
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"image-%d" % i)
        out.append(hashlib.sha256(b"image-%d" % i).hexdigest())
    return out


def _digest_of_digests(digests):
    """sha256 over a list of texts, each length-prefixed (written here, not the library's helper)."""
    h = hashlib.sha256()
    for d in digests:
        b = d.encode()
        h.update(len(b).to_bytes(8, "little") + b)
    return h.hexdigest()


def _rows(n, dim, seed):
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


class Duck:
    """A duck-typed encoder: records its calls; rows from a seeded generator (``extra`` rows added when asked)."""

    device = "cpu"

    def __init__(self, seed=0, extra_images=0, extra_texts=0, on_images=None, **attrs):
        self.seed, self.extra_images, self.extra_texts, self.on_images = seed, extra_images, extra_texts, on_images
        self.image_calls, self.text_calls = [], []
        self.__dict__.update(attrs)

    def encode_images(self, paths, desc=""):
        self.image_calls.append((list(paths), desc))
        if self.on_images is not None:
            self.on_images(paths)
        return _rows(len(paths) + self.extra_images, 8, self.seed)

    def encode_texts(self, texts, desc=""):
        self.text_calls.append((list(texts), desc))
        return _rows(len(texts) + self.extra_texts, 8, self.seed + 100)


class Typed(Encoder):
    """A real :class:`Encoder` (options, family, the expected digests) that computes nothing."""

    family = "open_clip"

    def __init__(self, opts=None, **kw):
        super().__init__(MODEL, None, device="cpu", **kw)
        self.opts = {"seed": 0} if opts is None else opts
        self.image_calls, self.text_calls = [], []

    def options(self):
        return dict(self.opts)

    def encode_images(self, paths, desc="images", *, expected_sha256=None):
        self.image_calls.append((list(paths), desc, expected_sha256))
        return _rows(len(paths), 8, 1)

    def encode_texts(self, texts, desc="captions", *, batch_size=None):
        self.text_calls.append((list(texts), desc))
        return _rows(len(texts), 8, 2)


@pytest.fixture
def tree(tmp_path):
    """``data``: a data root with the three images of :func:`_caps` under ``coco/images``; ``cache``; digests."""
    data, cache = tmp_path / "data", tmp_path / "cache"
    digests = _images(data / "coco" / "images")
    return {"data": data, "cache": cache, "digests": digests, "root": data / "coco" / "images"}


def _encode(tree, enc, model=MODEL, pretrained=None, **kw):
    kw.setdefault("captions", _caps())
    return pl.encode_split("coco", "test", model, pretrained, data_dir=tree["data"], cache_dir=tree["cache"],
                           encoder=enc, progress=False, **kw)


def _manifest(tree, model=MODEL, pretrained=None, split="test", dataset="coco"):
    folder = cache_mod.entry_dir(dataset, model, pretrained, split, tree["cache"])
    return json.loads((folder / "manifest.json").read_text()), folder


def _edit_manifest(folder, fn):
    path = folder / "manifest.json"
    man = json.loads(path.read_text())
    fn(man)
    path.write_text(json.dumps(man))


@pytest.fixture
def no_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


# --------------------------------------------------------------------------------------------- command texts
def test_rehearse_hint_names_the_dataset():
    assert pl.rehearse_hint("flickr30k") == "python -m hubnorm.data rehearse --dataset flickr30k"


def test_encode_command_normalises_pretrained_and_adds_family_only_when_not_inferred():
    assert pl.encode_command("coco", MODEL, None, "test") == \
        f"python -m hubnorm.data encode coco --model {MODEL} --pretrained none --split test"
    assert pl.encode_command("flickr30k", MODEL, "openai", "val", "open_clip") == \
        f"python -m hubnorm.data encode flickr30k --model {MODEL} --pretrained openai --split val"
    assert pl.encode_command("coco", MODEL, "", "train", "blip") == \
        f"python -m hubnorm.data encode coco --model {MODEL} --pretrained none --family blip --split train"
    assert pl.encode_command("coco", "blip-itm-base-coco", "hf", "test", "blip") == \
        "python -m hubnorm.data encode coco --model blip-itm-base-coco --pretrained hf --split test"


def test_fetch_commands_for_downloadable_and_manual_images():
    assert pl.fetch_commands("coco") == ("python -m hubnorm.data fetch coco --what annotations\n"
                                         "    python -m hubnorm.data fetch coco --what images")
    assert pl.fetch_commands("flickr8k") == (
        "python -m hubnorm.data fetch flickr8k --what annotations\n"
        "    (images: place them by hand; `python -m hubnorm.data fetch flickr8k --what images` prints where)")


# ------------------------------------------------------------------------------------------ missing images
def test_missing_images_of_coco_name_the_fetch_command(tmp_path):
    root = tmp_path / "imgs"
    _images(root, FILES[:1])
    with pytest.raises(FileNotFoundError) as err:
        pl._check_images(_caps(split="val"), root)
    assert str(err.value) == (f"2 of 3 images of coco val are missing under {root} (first: {root / FILES[1]})\n"
                              "Run:  python -m hubnorm.data fetch coco --what images --split val")


def test_missing_images_of_flickr_give_the_manual_text(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        pl._check_images(_caps(dataset="flickr30k"), tmp_path)
    assert str(err.value) == (f"3 of 3 images of flickr30k test are missing under {tmp_path} "
                              f"(first: {tmp_path / FILES[0]})\n" + FLICKR30K_MANUAL.format(images_dir=tmp_path))


def test_missing_images_of_an_unregistered_dataset_say_no_command(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        pl._check_images(_caps(dataset="mine"), tmp_path)
    assert str(err.value) == f"3 of 3 images of mine test are missing under {tmp_path} (first: {tmp_path / FILES[0]})"


def test_check_images_returns_the_paths_in_order(tree):
    assert pl._check_images(_caps(), tree["root"]) == [tree["root"] / f for f in FILES]


def test_image_digests(tree):
    assert pl._image_digests(_caps(), tree["root"]) == tree["digests"]
    (tree["root"] / FILES[2]).unlink()
    assert pl._image_digests(_caps(), tree["root"]) is None


# --------------------------------------------------------------------------------------------- encode_split
def test_encode_split_encodes_writes_the_key_and_serves_the_cache(tree, no_warnings):
    enc = Duck(precision="fp16")
    sp = _encode(tree, enc)
    paths = [tree["root"] / f for f in FILES]
    assert enc.image_calls == [(paths, "coco test images")]
    assert enc.text_calls == [(CAPTIONS, "coco test captions")]
    np.testing.assert_array_equal(sp.images, _rows(3, 8, 0))
    np.testing.assert_array_equal(sp.captions, _rows(5, 8, 100))
    assert sp.caption_to_image.tolist() == C2I
    assert sp.image_ids == ["a.jpg", "b.jpg", "c.jpg"] and sp.caption_texts == CAPTIONS

    man, folder = _manifest(tree)
    key = man["key"]
    assert (key["dataset"], key["split"], key["model"], key["pretrained"]) == ("coco", "test", MODEL, "none")
    assert key["precision"] == "fp16"   # the encoder's precision, not the argument's default
    assert key["encoder_family"] == "open_clip"
    assert key["annotations_sha256"] == _caps().fingerprint()
    assert "encoder_options" not in key   # a duck-typed encoder's options are unknown
    assert key["images_sha256"] == _digest_of_digests(tree["digests"])
    assert key["versions"] == cache_mod.library_versions("open_clip")
    assert man["annotations"] == "ann.json" and man["images_root"] == str(tree["root"])
    assert man["device"] == "cpu" and man["batch_size"] == 64

    again = _encode(tree, enc)   # a hit: nothing encoded, the same arrays and names
    assert len(enc.image_calls) == 1 and len(enc.text_calls) == 1
    np.testing.assert_array_equal(again.images, sp.images)
    np.testing.assert_array_equal(again.captions, sp.captions)
    assert again.caption_to_image.tolist() == C2I
    assert again.image_ids == ["a.jpg", "b.jpg", "c.jpg"] and again.caption_texts == CAPTIONS

    _encode(tree, enc, force=True)   # force: encoded again although the entry is valid
    assert len(enc.image_calls) == 2


def test_encode_split_batch_size_and_default_precision_are_recorded(tree):
    _encode(tree, Duck(), pretrained="openai", batch_size=5)
    man, _ = _manifest(tree, pretrained="openai")
    assert man["batch_size"] == 5 and man["key"]["precision"] == "fp32"


def test_encode_split_family_from_the_argument_the_encoder_or_the_name(tree):
    _encode(tree, Duck(), model="m1", family="blip", pretrained="hf")
    assert _manifest(tree, model="m1", pretrained="hf")[0]["key"]["encoder_family"] == "blip"
    _encode(tree, Duck(family="blip"), model="m2", pretrained="hf")
    man = _manifest(tree, model="m2", pretrained="hf")[0]
    assert man["key"]["encoder_family"] == "blip"
    assert "transformers" in man["key"]["versions"]
    _encode(tree, Duck(family="blip"), model="m3", family="open_clip")   # the argument wins over the encoder
    assert _manifest(tree, model="m3")[0]["key"]["encoder_family"] == "open_clip"
    with pytest.raises(ValueError, match="encoder family must be one of"):
        _encode(tree, Duck(), family="sentence")


def test_encode_split_reads_the_annotations_and_the_default_images_root(tree):
    ann = tree["data"] / "annotations"
    ann.mkdir()
    images = [{"filepath": "val2014", "filename": f.split("/")[1], "split": "test",
               "sentences": [{"raw": c} for c, i in zip(CAPTIONS, C2I) if i == k]} for k, f in enumerate(FILES)]
    (ann / "dataset_coco.json").write_text(json.dumps({"images": images}))
    enc = Duck()
    sp = pl.encode_split("coco", "test", MODEL, None, data_dir=tree["data"], cache_dir=tree["cache"], encoder=enc)
    assert enc.image_calls[0][0] == [tree["root"] / f for f in FILES]
    assert sp.caption_texts == CAPTIONS and sp.caption_to_image.tolist() == C2I
    man = _manifest(tree)[0]
    assert man["annotations"] == str(ann / "dataset_coco.json")
    assert man["key"]["annotations_sha256"] == _caps().fingerprint()


def test_encode_split_images_root_argument(tmp_path):
    root = tmp_path / "elsewhere"
    digests = _images(root)
    enc = Duck()
    pl.encode_split("coco", "test", MODEL, None, captions=_caps(), images_root=str(root), data_dir=tmp_path / "d",
                    cache_dir=tmp_path / "c", encoder=enc)
    assert enc.image_calls[0][0] == [root / f for f in FILES]
    man = json.loads((cache_mod.entry_dir("coco", MODEL, None, "test", tmp_path / "c") / "manifest.json").read_text())
    assert man["images_root"] == str(root) and man["key"]["images_sha256"] == _digest_of_digests(digests)


def test_encode_split_serves_the_cache_when_the_images_are_gone(tree, no_warnings):
    first = _encode(tree, Duck())
    (tree["root"] / FILES[0]).unlink()
    enc = Duck(seed=5)
    again = _encode(tree, enc)
    assert enc.image_calls == [] and enc.text_calls == []
    np.testing.assert_array_equal(again.images, first.images)


def test_changed_image_files_are_reencoded_with_a_warning(tree):
    _encode(tree, Duck())
    _, folder = _manifest(tree)
    (tree["root"] / FILES[1]).write_bytes(b"other bytes")
    enc = Duck(seed=3)
    with pytest.warns(pl.CacheWarning) as rec:
        sp = _encode(tree, enc)
    assert [str(w.message) for w in rec] == [f"re-encoding coco test: the image files differ from those cached at "
                                             f"{folder}"]
    assert len(enc.image_calls) == 1
    np.testing.assert_array_equal(sp.images, _rows(3, 8, 3))


def test_changed_encoder_options_are_reencoded_with_a_warning(tree):
    _encode(tree, Typed())
    _, folder = _manifest(tree)
    with pytest.warns(pl.CacheWarning) as rec:
        _encode(tree, Typed(opts={"seed": 1}))
    assert [str(w.message) for w in rec] == [f"re-encoding coco test: the encoder's options differ from those cached "
                                             f"at {folder}"]
    (tree["root"] / FILES[0]).write_bytes(b"new")
    with pytest.warns(pl.CacheWarning) as rec:
        _encode(tree, Typed(opts={"seed": 2}))
    assert [str(w.message) for w in rec] == [f"re-encoding coco test: the encoder's options and the image files "
                                             f"differ from those cached at {folder}"]


def test_legacy_entries_without_options_or_image_digests(tree, no_warnings):
    _encode(tree, Typed())
    _, folder = _manifest(tree)

    def drop(man):
        del man["key"]["encoder_options"], man["key"]["images_sha256"]
    _edit_manifest(folder, drop)
    enc = Typed()   # default options: the legacy entry matches (its options are taken as the defaults)
    _encode(tree, enc)
    assert enc.image_calls == []
    _edit_manifest(folder, lambda man: man["key"].update(encoder_options=None, images_sha256=None))
    _encode(tree, enc)   # stored nulls are not compared either
    assert enc.image_calls == []
    _edit_manifest(folder, drop)
    with pytest.warns(pl.CacheWarning, match="the encoder's options differ"):
        _encode(tree, Typed(opts={"seed": 4}))   # other options than the defaults: the legacy entry differs


def test_typed_encoder_gets_the_digests_and_its_options_are_keyed(tree):
    enc = Typed(opts={"seed": 7, "x": 1}, precision="bf16")
    _encode(tree, enc, precision="fp32")
    assert enc.image_calls == [([tree["root"] / f for f in FILES], "coco test images", tree["digests"])]
    assert enc.text_calls == [(CAPTIONS, "coco test captions")]
    key = _manifest(tree)[0]["key"]
    assert key["encoder_options"] == {"seed": 7, "x": 1} and key["precision"] == "bf16"


def test_a_corrupt_entry_is_reencoded_with_the_reason(tree):
    _encode(tree, Duck())
    _, folder = _manifest(tree)
    (folder / "captions.npy").write_bytes(b"junk")
    enc = Duck()
    with pytest.warns(pl.CacheWarning, match=r"^re-encoding coco test: .*captions\.npy is corrupt") as rec:
        _encode(tree, enc)
    assert len(rec) == 1 and len(enc.image_calls) == 1


def test_a_stale_entry_is_reencoded(tree):
    _encode(tree, Duck())
    with pytest.warns(pl.CacheWarning, match="^re-encoding coco test: .*different key.*precision"):
        _encode(tree, Duck(precision="fp16"))


def test_a_missing_entry_is_encoded_without_a_warning(tree, no_warnings):
    enc = Duck()
    _encode(tree, enc)
    assert len(enc.image_calls) == 1


def test_a_file_changed_while_encoding_is_an_error(tree):
    target = tree["root"] / FILES[2]
    enc = Duck(on_images=lambda paths: target.write_bytes(b"changed"))
    with pytest.raises(FileChangedError) as err:
        _encode(tree, enc)
    assert str(err.value) == (f"{target} changed while the split was being encoded: rerun once the files are "
                              "stable")
    assert not (cache_mod.entry_dir("coco", MODEL, None, "test", tree["cache"]) / "manifest.json").exists()


@pytest.mark.parametrize("extra_images, extra_texts, got", [(1, 0, "4 image / 5 caption"),
                                                            (0, -1, "3 image / 4 caption")])
def test_wrong_row_counts_are_an_error(tree, extra_images, extra_texts, got):
    with pytest.raises(RuntimeError) as err:
        _encode(tree, Duck(extra_images=extra_images, extra_texts=extra_texts))
    assert str(err.value) == f"encoder returned {got} rows for 3 / 5 inputs"


def test_missing_images_without_a_cache_entry_raise_before_encoding(tmp_path):
    enc = Duck()
    with pytest.raises(FileNotFoundError, match=r"^3 of 3 images of coco test are missing"):
        pl.encode_split("coco", "test", MODEL, None, captions=_caps(), data_dir=tmp_path, cache_dir=tmp_path / "c",
                        encoder=enc)
    assert enc.image_calls == []


def test_without_an_encoder_one_is_built_with_the_arguments(tree, monkeypatch):
    import hubnorm.data.encoders as encoders
    calls = []

    def fake(model, pretrained, **kw):
        calls.append((model, pretrained, kw))
        return Duck()
    monkeypatch.setattr(encoders, "get_encoder", fake)
    pl.encode_split("coco", "test", MODEL, None, captions=_caps(), data_dir=tree["data"], cache_dir=tree["cache"],
                    batch_size=7, device="cpu", precision="fp16", num_workers=2, progress=False)
    assert calls == [(MODEL, None, {"family": "open_clip", "device": "cpu", "precision": "fp16", "batch_size": 7,
                                    "num_workers": 2, "progress": False})]
    key = _manifest(tree)[0]["key"]
    assert key["encoder_options"] == {"seed": 0} and key["precision"] == "fp16"
    pl.encode_split("coco", "test", MODEL, None, captions=_caps(), data_dir=tree["data"], cache_dir=tree["cache"],
                    precision="fp16")
    assert len(calls) == 1   # a hit: no encoder built
    pl.encode_split("coco", "test", MODEL, "openai", captions=_caps(), data_dir=tree["data"], cache_dir=tree["cache"])
    assert calls[1] == (MODEL, "openai", {"family": "open_clip", "device": None, "precision": "fp32", "batch_size": 64,
                                          "num_workers": 0, "progress": True})   # the defaults


# ------------------------------------------------------------------------------------------ _default_options
def test_default_options():
    assert pl._default_options("open_clip", MODEL, None) == {"seed": 0}
    assert pl._default_options("open_clip", MODEL, "openai") == {}
    assert pl._default_options("blip", "blip-itm-base-coco", "hf") == {"max_length": 35}
    assert pl._default_options("blip", "blip-itm-base-coco", "weights") is None   # BlipItcEncoder refuses it
    assert pl._default_options("sentence-x", MODEL, None) is None


# ------------------------------------------------------------------------------------- verify and the keys
def test_verify_split_checks_key_versions_and_files(tree):
    _encode(tree, Duck())
    man = pl.verify_split("coco", "test", MODEL, None, cache_dir=tree["cache"])
    assert man["n_images"] == 3 and man["n_captions"] == 5
    _, folder = _manifest(tree)
    _edit_manifest(folder, lambda m: m["key"]["versions"].update(torch="0.0.1"))
    with pytest.raises(cache_mod.CacheError, match=r"versions\.torch: cached '0\.0\.1'"):
        pl.verify_split("coco", "test", MODEL, None, cache_dir=tree["cache"])
    assert pl.verify_split("coco", "test", MODEL, None, cache_dir=tree["cache"], strict_versions=False)["n_images"] \
        == 3
    with pytest.raises(cache_mod.CacheError, match="encoder_family: cached 'open_clip' != wanted 'blip'"):
        pl.verify_split("coco", "test", MODEL, None, cache_dir=tree["cache"], family="blip", strict_versions=False)
    (folder / "images.npy").write_bytes(b"x")
    with pytest.raises(cache_mod.CacheError, match="corrupt"):
        pl.verify_split("coco", "test", MODEL, None, cache_dir=tree["cache"], strict_versions=False)


def test_load_key_of_encoders_and_of_rehearsals():
    from hubnorm._version import __version__
    assert pl._load_key("coco", "val", MODEL, "openai") == {
        "dataset": "coco", "split": "val", "model": MODEL, "pretrained": "openai", "encoder_family": "open_clip",
        "precision": "fp32", "annotations_sha256": None, "versions": cache_mod.library_versions("open_clip")}
    key = pl._load_key("coco", "test", MODEL, None, "blip")
    assert key["encoder_family"] == "blip" and key["versions"] == cache_mod.library_versions("blip")
    assert pl._load_key("coco", "test", "blip-itm-base-coco", "hf")["encoder_family"] == "blip"
    reh = pl._load_key("flickr30k", "train", pl.REHEARSAL_MODEL, "seed0", "blip")
    assert reh["encoder_family"] == "synthetic-rehearsal" and reh["versions"] == {"hubnorm": __version__}
    assert (reh["dataset"], reh["split"], reh["pretrained"]) == ("flickr30k", "train", "seed0")
    with pytest.raises(ValueError, match="encoder family must be one of"):
        pl._load_key("coco", "test", MODEL, None, "nope")


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("HUBNORM_CACHE", str(tmp_path))
    assert pl._default_cache_dir(pl.REHEARSAL_MODEL, None) == tmp_path / "rehearsal"
    assert pl._default_cache_dir(pl.REHEARSAL_MODEL, "given") == "given"
    assert pl._default_cache_dir(MODEL, None) is None
    assert pl._default_cache_dir(MODEL, "given") == "given"


@pytest.mark.parametrize("spec, want", [("coco:ViT-B-32-quickgelu:openai", ("coco", "ViT-B-32-quickgelu", "openai")),
                                        ("coco:hf-hub:timm/ViT-B-16-SigLIP:none",
                                         ("coco", "hf-hub:timm/ViT-B-16-SigLIP", "none")),
                                        ("coco:m:", ("coco", "m", ""))])
def test_parse_cache_spec(spec, want):
    assert pl.parse_cache_spec(spec) == want


@pytest.mark.parametrize("spec", ["coco", "coco:model", ":m:p", "coco::p", ""])
def test_parse_cache_spec_refuses(spec):
    with pytest.raises(ValueError, match=re.escape("cache source must look like '<dataset>:<model>:<pretrained>' "
                                                   "(e.g. 'coco:ViT-B-32-quickgelu:openai'; pretrained 'none' for "
                                                   f"random init); got {spec!r}")):
        pl.parse_cache_spec(spec)


# ---------------------------------------------------------------------------------- load_cached_embeddings
def _fill(tree, splits=("test",), model=MODEL, pretrained=None, dataset="coco", **kw):
    for s in splits:
        pl.encode_split(dataset, s, model, pretrained, captions=_caps(dataset=dataset, split=s),
                        data_dir=tree["data"], images_root=tree["root"], cache_dir=tree["cache"], encoder=Duck(),
                        **kw)


def test_load_cached_embeddings_reads_splits_and_meta(tree, no_warnings):
    _fill(tree, ("test", "train"), precision="fp16")
    ds = pl.load_cached_embeddings(f"coco:{MODEL}:none", cache_dir=tree["cache"], splits=("test", "train"))
    assert ds.name == "coco" and ds.source == "real" and sorted(ds.splits) == ["test", "train"]
    sp = ds.split("train")
    np.testing.assert_array_equal(sp.images, _rows(3, 8, 0))
    assert sp.image_ids == ["a.jpg", "b.jpg", "c.jpg"] and sp.caption_texts == CAPTIONS
    assert ds.meta == {"model": MODEL, "pretrained": "none", "encoder": "open_clip", "precision": "fp16",
                       "versions": cache_mod.library_versions("open_clip"),
                       "cache_dir": str(tree["cache"] / "coco" / MODEL / "none")}
    one = pl.load_cached_embeddings(f"coco:{MODEL}:none", cache_dir=tree["cache"], splits="test")
    assert list(one.splits) == ["test"]


def test_load_cached_embeddings_legacy_family_in_meta(tree):
    _fill(tree)
    _, folder = _manifest(tree)
    _edit_manifest(folder, lambda m: m["key"].pop("encoder_family"))
    ds = pl.load_cached_embeddings(f"coco:{MODEL}:none", cache_dir=tree["cache"], splits=("test",))
    assert ds.meta["encoder"] == "open_clip"
    _fill(tree, model="m-b", pretrained="hf", family="blip")
    ds = pl.load_cached_embeddings("coco:m-b:hf", cache_dir=tree["cache"], splits=("test",), family="blip")
    assert ds.meta["encoder"] == "blip"


def test_load_cached_embeddings_checks_splits_first(tree):
    with pytest.raises(ValueError, match="unknown split 'dev' of 'coco'"):
        pl.load_cached_embeddings(f"coco:{MODEL}:none", cache_dir=tree["cache"], splits=("test", "dev"))


def test_missing_splits_name_the_fetch_and_encode_commands(tree):
    root = tree["cache"] / "coco" / MODEL / "none"
    with pytest.raises(FileNotFoundError) as err:
        pl.load_cached_embeddings(f"coco:{MODEL}:none", cache_dir=tree["cache"], splits=("test",))
    assert str(err.value) == (
        f"no cached embeddings for coco split(s) ['test'] with '{MODEL}' / 'none' under {root}.\n"
        "To create them run:\n"
        "    python -m hubnorm.data fetch coco --what annotations\n"
        "    python -m hubnorm.data fetch coco --what images\n"
        f"    python -m hubnorm.data encode coco --model {MODEL} --pretrained none --split test")
    with pytest.raises(FileNotFoundError) as err:
        pl.load_cached_embeddings(f"coco:{MODEL}:none", cache_dir=tree["cache"], splits=("val", "train"),
                                  allow_missing=True, family="blip")
    assert str(err.value).endswith(
        f"    python -m hubnorm.data encode coco --model {MODEL} --pretrained none --family blip --split val\n"
        f"    python -m hubnorm.data encode coco --model {MODEL} --pretrained none --family blip --split train\n"
        "(or pass allow_missing=True to load only the splits that exist)")


def test_missing_splits_of_flickr_name_the_manual_images(tree):
    with pytest.raises(FileNotFoundError) as err:
        pl.load_cached_embeddings(f"flickr30k:{MODEL}:openai", cache_dir=tree["cache"], splits=("val",))
    assert ("To create them run:\n    python -m hubnorm.data fetch flickr30k --what annotations\n    (images: place "
            "them by hand; `python -m hubnorm.data fetch flickr30k --what images` prints where)\n    python -m "
            "hubnorm.data encode flickr30k") in str(err.value)


def test_missing_splits_of_an_unregistered_dataset_name_only_encode(tree, monkeypatch):
    import hubnorm.data.registry as registry
    monkeypatch.setitem(registry.DATASETS, "mine", dict(registry.DATASETS["coco"]))
    with pytest.raises(FileNotFoundError) as err:
        pl.load_cached_embeddings(f"mine:{MODEL}:openai", cache_dir=tree["cache"], splits=("test",))
    assert "fetch" not in str(err.value)
    assert str(err.value).endswith("To create them run:\n    python -m hubnorm.data encode mine --model "
                                   f"{MODEL} --pretrained openai --split test")


def test_some_missing_splits(tree):
    _fill(tree)
    spec = f"coco:{MODEL}:none"
    with pytest.raises(FileNotFoundError) as err:
        pl.load_cached_embeddings(spec, cache_dir=tree["cache"], splits=("test", "val"))
    assert str(err.value).startswith("no cached embeddings for coco split(s) ['val'] with")
    assert str(err.value).endswith("--split val\n(or pass allow_missing=True to load only the splits that exist)")
    with pytest.warns(pl.CacheWarning) as rec:
        ds = pl.load_cached_embeddings(spec, cache_dir=tree["cache"], splits=("val", "test", "train"),
                                       allow_missing=True)
    assert [str(w.message) for w in rec] == ["coco: split(s) ['val', 'train'] not cached; loaded ['test']"]
    assert list(ds.splits) == ["test"]


def test_stale_entries_raise_with_the_fix_unless_only_versions_differ_and_not_strict(tree):
    _fill(tree)
    _, folder = _manifest(tree)
    spec = f"coco:{MODEL}:none"
    _edit_manifest(folder, lambda m: m["key"]["versions"].update(torch="0.0.1"))
    with pytest.raises(cache_mod.CacheError) as err:
        pl.load_cached_embeddings(spec, cache_dir=tree["cache"], splits=("test",))
    assert err.value.reason == "stale"
    assert str(err.value).endswith(f"\nRe-create it with:\n    python -m hubnorm.data encode coco --model {MODEL} "
                                   "--pretrained none --split test --force")
    assert isinstance(err.value.__cause__, cache_mod.CacheError)
    with pytest.warns(pl.CacheWarning) as rec:
        ds = pl.load_cached_embeddings(spec, cache_dir=tree["cache"], splits=("test",), strict_versions=False)
    assert len(rec) == 1 and str(rec[0].message).endswith("(loaded anyway: strict_versions=False)")
    assert "versions.torch: cached '0.0.1'" in str(rec[0].message)
    assert ds.meta["versions"]["torch"] == "0.0.1"
    np.testing.assert_array_equal(ds.split("test").images, _rows(3, 8, 0))

    _edit_manifest(folder, lambda m: m["key"].update(split="val"))   # a key field beside the versions
    with pytest.raises(cache_mod.CacheError, match="split: cached 'val' != wanted 'test'"):
        pl.load_cached_embeddings(spec, cache_dir=tree["cache"], splits=("test",), strict_versions=False)
    _edit_manifest(folder, lambda m: m["key"].update(split="test", model="other"))
    with pytest.raises(cache_mod.CacheError, match="model: cached 'other'") as err:
        pl.load_cached_embeddings(spec, cache_dir=tree["cache"], splits=("test",), strict_versions=False)
    assert "--force" in str(err.value)


def test_a_corrupt_entry_is_an_error_even_when_not_strict(tree):
    _fill(tree)
    _, folder = _manifest(tree)
    (folder / "images.npy").write_bytes(b"x")
    with pytest.raises(cache_mod.CacheError) as err:
        pl.load_cached_embeddings(f"coco:{MODEL}:none", cache_dir=tree["cache"], splits=("test",),
                                  strict_versions=False)
    assert err.value.reason == "corrupt" and "Re-create it with:" in str(err.value)


def test_only_version_diff(tree):
    _fill(tree, precision="fp16")   # the precision is not among the fields compared
    _, folder = _manifest(tree)
    key = pl._load_key("coco", "test", MODEL, None)
    assert pl._only_version_diff(folder, key) is False   # nothing differs
    _edit_manifest(folder, lambda m: m["key"]["versions"].update(torch="0.0.1", hubnorm="0.0.0"))
    assert pl._only_version_diff(folder, key) is True
    _edit_manifest(folder, lambda m: m["key"].update(split="val"))
    assert pl._only_version_diff(folder, key) is False


def test_rehearsal_caches_load_as_synthetic_and_name_the_rehearse_command(tmp_path):
    from hubnorm.data.rehearse import rehearse
    res = rehearse("coco", cache_dir=tmp_path, scale=0.001, splits=["test"])
    spec = res["spec"][len("cache:"):]
    ds = pl.load_cached_embeddings(spec, cache_dir=tmp_path, splits=("test",))
    assert ds.name == "synthetic-rehearsal-coco" and ds.source == "synthetic"
    assert ds.meta["synthetic"] is True and ds.meta["rehearsal"] is True and ds.meta["scale"] == 0.001
    assert ds.meta["model"] == pl.REHEARSAL_MODEL and ds.meta["encoder"] == "synthetic-rehearsal"
    with pytest.raises(FileNotFoundError) as err:
        pl.load_cached_embeddings(spec, cache_dir=tmp_path, splits=("val",))
    assert str(err.value) == (f"no rehearsal embeddings for coco split(s) ['val'] under "
                              f"{tmp_path / 'coco' / pl.REHEARSAL_MODEL / spec.rsplit(':', 1)[1]}.\n"
                              "To create them run:\n    python -m hubnorm.data rehearse --dataset coco --scale 0.001")
    folder = next(tmp_path.glob("coco/*/*/test"))
    _edit_manifest(folder, lambda m: m["key"].update(model="x"))
    with pytest.raises(cache_mod.CacheError) as err:
        pl.load_cached_embeddings(spec, cache_dir=tmp_path, splits=("test",))
    assert str(err.value).endswith("\nRe-create it with:\n    python -m hubnorm.data rehearse --dataset coco --scale 0.001 --force")


def test_rehearsal_caches_default_to_the_rehearsal_folder(tmp_path, monkeypatch):
    from hubnorm.data.rehearse import rehearse
    res = rehearse("coco", cache_dir=tmp_path / "rehearsal", scale=0.001, splits=["test"])
    monkeypatch.setenv("HUBNORM_CACHE", str(tmp_path))
    ds = pl.load_cached_embeddings(res["spec"][len("cache:"):], splits="test")
    assert ds.source == "synthetic" and ds.meta["cache_dir"].startswith(str(tmp_path / "rehearsal"))


# ------------------------------------------------------------------------------------------- encode_dataset
def test_encode_dataset_builds_one_encoder_for_all_splits(tree, monkeypatch):
    import hubnorm.data.encoders as encoders
    built, seen = [], []

    def fake(model, pretrained, **kw):
        built.append((model, pretrained, kw))
        return Duck()

    def fake_split(dataset, split, model, pretrained, **kw):
        seen.append((dataset, split, model, pretrained, kw))
        return pl.EmbeddingSplit(images=_rows(2, 4, 0), captions=_rows(2, 4, 1), caption_to_image=[0, 1])
    monkeypatch.setattr(encoders, "get_encoder", fake)
    monkeypatch.setattr(pl, "encode_split", fake_split)
    ds = pl.encode_dataset("coco", MODEL, "", ("test", "val"), device="cpu", precision="fp16", batch_size=3,
                           num_workers=2, progress=False, cache_dir="c", force=True)
    assert built == [(MODEL, "", {"family": "open_clip", "device": "cpu", "precision": "fp16", "batch_size": 3,
                                  "num_workers": 2, "progress": False})]
    assert [s[:4] for s in seen] == [("coco", "test", MODEL, ""), ("coco", "val", MODEL, "")]
    enc = seen[0][4].pop("encoder")
    assert isinstance(enc, Duck) and seen[1][4]["encoder"] is enc
    assert seen[0][4] == {"family": "open_clip", "precision": "fp16", "batch_size": 3, "num_workers": 2,
                          "progress": False, "cache_dir": "c", "force": True}
    assert ds.name == "coco" and ds.source == "real" and list(ds.splits) == ["test", "val"]
    assert ds.meta == {"model": MODEL, "pretrained": "none", "encoder": "open_clip"}


def test_encode_dataset_with_an_encoder_and_a_family(tree):
    enc = Duck()
    ds = pl.encode_dataset("coco", MODEL, "hf", ["test"], family="blip", encoder=enc, captions=_caps(),
                           data_dir=tree["data"], cache_dir=tree["cache"], progress=False)
    assert len(enc.image_calls) == 1 and ds.meta == {"model": MODEL, "pretrained": "hf", "encoder": "blip"}
    assert _manifest(tree, pretrained="hf")[0]["key"]["encoder_family"] == "blip"
    with pytest.raises(ValueError, match="encoder family must be one of"):
        pl.encode_dataset("coco", MODEL, "hf", ["test"], family="clip", encoder=enc)


def test_a_pretrained_tag_is_kept_in_the_meta_and_the_fix(tree):
    _fill(tree, pretrained="openai")
    spec = f"coco:{MODEL}:openai"
    assert pl.load_cached_embeddings(spec, cache_dir=tree["cache"], splits="test").meta["pretrained"] == "openai"
    _, folder = _manifest(tree, pretrained="openai")
    _edit_manifest(folder, lambda m: m["key"]["versions"].update(torch="0.0.1"))
    with pytest.raises(cache_mod.CacheError) as err:
        pl.load_cached_embeddings(spec, cache_dir=tree["cache"], splits=("test",))
    assert str(err.value).endswith(f"--model {MODEL} --pretrained openai --split test --force")


@pytest.mark.parametrize("pretrained, force, want", [
    (None, False, "python -m hubnorm.data rehearse --dataset flickr30k"),
    ("seed0", False, "python -m hubnorm.data rehearse --dataset flickr30k"),
    ("seed0-scale0.02", True, "python -m hubnorm.data rehearse --dataset flickr30k --scale 0.02 --force"),
    ("seed3", False, "python -m hubnorm.data rehearse --dataset flickr30k --seed 3"),
    ("seed3-scale0.5", False, "python -m hubnorm.data rehearse --dataset flickr30k --seed 3 --scale 0.5"),
])
def test_rehearse_hint_keeps_the_entrys_seed_and_scale(pretrained, force, want):
    assert pl.rehearse_hint("flickr30k", pretrained, force=force) == want


def test_repair_and_create_commands_and_the_entry_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HUBNORM_CACHE", str(tmp_path))
    r = pl.REHEARSAL_MODEL
    assert pl.repair_command("coco", r, "seed0-scale0.02", "test") == (
        "python -m hubnorm.data rehearse --dataset coco --scale 0.02 --force")
    assert pl.create_command("coco", r, "seed0-scale0.02", "test") == (
        "python -m hubnorm.data rehearse --dataset coco --scale 0.02")
    enc = pl.encode_command("coco", "ViT-B-32", "openai", "test")
    assert pl.repair_command("coco", "ViT-B-32", "openai", "test") == enc + " --force"
    assert pl.create_command("coco", "ViT-B-32", "openai", "test") == enc
    assert pl.entry_folder("coco", r, "seed0", "test") == tmp_path / "rehearsal" / "coco" / r / "seed0" / "test"
    assert pl.entry_folder("coco", "ViT-B-32", "openai", "test") == tmp_path / "coco" / "ViT-B-32" / "openai" / "test"
    assert pl.entry_folder("coco", r, "seed0", "test", tmp_path / "x") == tmp_path / "x" / "coco" / r / "seed0" / "test"
