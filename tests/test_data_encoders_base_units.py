"""Unit checks of hubnorm.data.encoders.base with a tiny fake family (no model): the constructor's guards by their own
messages and at their boundaries, the family hooks' refusals, identity / spec / repr, autocast and the model dtype of
each precision, ``finish`` against a float64 reference, the one loop for texts and for image files (batches, order,
the digests read, a file changed under a run naming the file, the DataLoader's options, the progress bar's
arguments, recorded with a fake bar), the cached path (miss, hit, a corrupt entry, the old text layout, a cache that
cannot be written, each with its warning and where it points), ``cache_key`` / ``cache_entry_dir`` against keys
computed here, and :class:`CallableTextEncoder`.

Mutation run (``--tests tests/test_data_pipeline_units.py tests/test_listwise.py tests/test_data_encoders.py``
[+ this file]): 474 of 487 killed (97%; baseline without this file, ``--sample 1``: 31 killed, 22 survived, 9 reached
by no test of 62 tested, 50%). Equivalent mutants left (13):
- ``normalize(..., dim=-1)`` -> ``dim=+1`` / no ``dim`` (default 1) in ``finish``: the features are 2-D (``_checked``),
  so dim 1 is dim -1.
- ``astype(np.float32, copy=False)`` -> ``copy=True`` / ``copy=None`` / no ``copy``: the same values in an array
  nobody else holds.
- ``getattr(features, "shape", np.shape(features))`` -> ``getattr(None, "shape", ...)`` / another attribute name in
  ``_checked`` (3): ``np.shape`` reads ``.shape`` itself, so the fallback gives the same shape.
- ``t.encode("utf-8")`` -> ``t.encode("UTF-8")`` in ``_digests``: the same codec.
- ``super().__init__(name, None, device="cpu", ...)`` -> without the ``None`` in ``CallableTextEncoder``: ``pretrained``
  defaults to None.
- ``warnings.warn(..., stacklevel=2)`` -> ``stacklevel=3`` in ``encode`` (3): not observable in mutmut's runs, where
  its trampoline is one more frame between ``encode`` and the caller (level 2 is the trampoline there, level 3 the
  test); outside mutmut the warning would name pytest's frame instead of the caller's. Dropping ``stacklevel`` (level
  1, base.py itself) is checked.
"""

from __future__ import annotations

import contextlib
import hashlib
import warnings

import numpy as np
import pytest
import torch

import hubnorm
from hubnorm.data import cache as _cache
from hubnorm.data.encoders import base
from hubnorm.data.encoders.base import (MODALITIES, PRECISIONS, CallableTextEncoder, Encoder, FileChangedError,
                                        default_device, package_versions)

torch.set_num_threads(1)

TEXTS = ["a cat", "two dogs on a beach", "blue", "a man riding a bike", "tea"]


def _text_vector(t):
    return [len(t), t.count("a") + 1.0, t.count(" ") + 0.5]


def _pixels(im):
    """One RGB PIL image -> a (3, 2, 2) tensor of its mean colour (picklable: a module-level function)."""
    arr = np.asarray(im, dtype=np.float32)
    assert im.mode == "RGB" and arr.ndim == 3
    return torch.tensor(arr.mean(axis=(0, 1)) + 1.0).reshape(3, 1, 1).expand(3, 2, 2).clone()


class _Fake(Encoder):
    """A family with features computed from the inputs: texts by counting, images by their mean colour."""

    family = "fake"

    def __init__(self, pretrained=None, **kwargs):
        kwargs.setdefault("device", "cpu")
        kwargs.setdefault("progress", False)
        super().__init__("fake-model", pretrained, **kwargs)
        self.builds = 0
        self.text_calls, self.image_calls, self.modes = [], [], []

    def build(self):
        self.builds += 1
        if self._model is None:
            self._model = "the model"
        return self

    def image_transform(self):
        return _pixels

    def image_features(self, pixels):
        self.image_calls.append(tuple(pixels.shape))
        self.modes.append((torch.is_inference_mode_enabled(), torch.is_autocast_enabled("cpu")))
        return pixels.mean(dim=(2, 3)).double()

    def text_features(self, texts):
        self.text_calls.append(list(texts))
        self.modes.append((torch.is_inference_mode_enabled(), torch.is_autocast_enabled("cpu")))
        return torch.tensor([_text_vector(t) for t in texts], dtype=torch.float64)


class _TextOnly(_Fake):
    modalities = ("text",)


class _ImageOnly(_Fake):
    modalities = ("image",)


def _unit(x):
    x = np.asarray(x, dtype=np.float64)
    return x / np.sqrt((x * x).sum(axis=1, keepdims=True))


def _images(folder, n=3):
    from PIL import Image
    folder.mkdir(parents=True, exist_ok=True)
    paths, means = [], []
    for i in range(n):
        im = Image.new("RGB", (6 + i, 5), (30 * i + 10, 200 - 25 * i, 90 + 20 * i))
        im.putpixel((0, 0), (255, 0, 255))
        paths.append(folder / f"im{i}.png")
        im.save(paths[-1])
        means.append(np.asarray(im, dtype=np.float64).mean(axis=(0, 1)) + 1.0)
    return paths, np.array(means)


def _points_past_the_library(record):
    """A warning of ``encode`` names its caller's line (stacklevel 2), not base.py's own."""
    return record.filename != base.__file__


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(autouse=True)
def _no_bars(monkeypatch, tmp_path):
    monkeypatch.setenv("HUBNORM_PROGRESS", "0")
    monkeypatch.setenv("HUBNORM_CACHE", str(tmp_path / "default-cache"))


@pytest.fixture
def bars(monkeypatch):
    """The progress bars the loops ask for, recorded (the fake bar yields the iterable)."""
    calls = []

    def fake(iterable=None, **kwargs):
        calls.append(kwargs)
        return iterable

    monkeypatch.setattr(base, "_progress", fake)
    return calls


# ------------------------------------------------------------------------------------------- module helpers
def test_default_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert default_device() == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert default_device() == "cpu"


def test_package_versions():
    from importlib import metadata
    assert package_versions("numpy", "no-such-package-hubnorm", "torch") == {
        "numpy": metadata.version("numpy"), "no-such-package-hubnorm": "not installed",
        "torch": metadata.version("torch")}
    assert package_versions() == {}


def test_image_files_dataset_reads_rgb_and_the_sha256_of_the_bytes(tmp_path):
    from PIL import Image
    p = tmp_path / "grey.png"
    Image.new("L", (3, 2), 77).save(p)
    seen = []

    def transform(im):
        seen.append(im.mode)
        return np.asarray(im)

    ds = base._ImageFiles([p, p], transform)
    assert len(ds) == 2
    arr, sha = ds[1]
    assert seen == ["RGB"] and arr.shape == (2, 3, 3) and (arr == 77).all()
    assert sha == hashlib.sha256(p.read_bytes()).hexdigest()


# ------------------------------------------------------------------------------------------------ __init__
def test_constructor_stores_its_arguments(monkeypatch):
    enc = Encoder("m", "tag", device="cpu", precision="amp", batch_size=np.int64(3), num_workers=np.int32(2),
                  progress=False, seed=np.int64(7))
    assert (enc.model_name, enc.pretrained, enc.device, enc.precision) == ("m", "tag", "cpu", "amp")
    assert (enc.batch_size, enc.num_workers, enc.progress, enc.seed, enc._model) == (3, 2, False, 7, None)
    assert type(enc.batch_size) is int and type(enc.num_workers) is int and type(enc.seed) is int
    assert type(enc.device) is str
    dflt = Encoder("m")
    assert (dflt.pretrained, dflt.precision, dflt.batch_size, dflt.num_workers, dflt.progress, dflt.seed) == (
        None, "fp32", 64, 0, True, 0)
    assert Encoder("m", device=torch.device("cpu")).device == "cpu"
    monkeypatch.setattr(base, "default_device", lambda: "the-default")
    assert Encoder("m").device == "the-default"
    assert Encoder("m", device="cpu").device == "cpu"
    assert Encoder("m", batch_size=1, num_workers=0).batch_size == 1


@pytest.mark.parametrize("precision", PRECISIONS)
def test_every_precision_is_accepted(precision):
    assert PRECISIONS == ("fp32", "fp16", "bf16", "amp", "amp_bf16")
    assert Encoder("m", device="cpu", precision=precision).precision == precision


@pytest.mark.parametrize("precision", ["fp64", "FP32", "", None])
def test_precision_guard(precision):
    with pytest.raises(ValueError, match=r"precision must be one of \('fp32', 'fp16', 'bf16', 'amp', 'amp_bf16'\); "
                                         rf"got {precision!r}"):
        Encoder("m", device="cpu", precision=precision)


@pytest.mark.parametrize("batch_size", [0, -1, True, False, 2.0, "2", None])
def test_batch_size_guard(batch_size):
    with pytest.raises(ValueError, match=rf"batch_size must be a positive integer; got {batch_size!r}"):
        Encoder("m", device="cpu", batch_size=batch_size)


@pytest.mark.parametrize("num_workers", [-1, True, False, 1.0, "0", None])
def test_num_workers_guard(num_workers):
    with pytest.raises(ValueError, match=rf"num_workers must be a non-negative integer; got {num_workers!r}"):
        Encoder("m", device="cpu", num_workers=num_workers)


def test_a_device_this_machine_lacks_is_a_value_error():
    with pytest.raises(ValueError, match=r"device='gpu' is not a device name"):
        Encoder("m", device="gpu")


# ------------------------------------------------------------------------------------------ hooks, identity
def test_the_base_hooks_refuse():
    enc = _Fake()
    with pytest.raises(NotImplementedError):
        Encoder("m", device="cpu").build()
    for call in (lambda: Encoder.image_transform(enc), lambda: Encoder.image_features(enc, torch.zeros(1, 3, 2, 2))):
        with pytest.raises(TypeError, match=r"^_Fake does not encode images$"):
            call()
    with pytest.raises(TypeError, match=r"^_Fake does not encode texts$"):
        Encoder.text_features(enc, ["a"])


def test_identity_options_versions():
    enc = _Fake("openai", precision="bf16")
    versions = {"torch": torch.__version__, "hubnorm": hubnorm.__version__}
    assert enc.options() == {} and enc.versions() == versions
    assert enc.identity() == {"family": "fake", "model": "fake-model", "pretrained": "openai", "precision": "bf16",
                              "options": {}, "versions": versions}


def test_spec_name_repr_model():
    assert _Fake().spec == _Fake("random").spec == _Fake("None").spec == "fake:fake-model:none"
    enc = _Fake("laion2b", precision="fp16")
    assert enc.spec == enc.name == "fake:fake-model:laion2b"
    assert repr(enc) == "_Fake('fake:fake-model:laion2b', device='cpu', precision='fp16')"
    assert enc.builds == 0
    assert enc.model == "the model" and enc.builds == 1
    assert enc.text_batch_size == enc.batch_size == 64
    assert _Fake(batch_size=5).text_batch_size == 5


@pytest.mark.parametrize("precision, dtype, autocast", [
    ("fp32", torch.float32, None), ("fp16", torch.float16, None), ("bf16", torch.bfloat16, None),
    ("amp", torch.float32, torch.float16), ("amp_bf16", torch.float32, torch.bfloat16)])
def test_model_dtype_and_autocast(precision, dtype, autocast):
    enc = _Fake(precision=precision)
    assert enc.model_dtype == dtype
    ctx = enc.autocast()
    if autocast is None:
        assert isinstance(ctx, contextlib.nullcontext)
    else:
        assert isinstance(ctx, torch.autocast) and ctx.fast_dtype == autocast and ctx.device == "cpu"


def test_finish_gives_float32_unit_rows():
    x = np.array([[3.0, 4.0, 0.0], [1.0, 1.0, 1.0]])            # rows of norm 5 and sqrt(3); columns are not unit
    for features in (x, torch.tensor(x), x.tolist()):
        out = _Fake().finish(features)
        assert out.dtype == np.float32 and isinstance(out, np.ndarray) and out.shape == (2, 3)
        np.testing.assert_allclose(out, _unit(x), rtol=1e-6)


# ------------------------------------------------------------------------------------------------ encode_texts
def test_encode_texts_in_batches_and_in_order(bars):
    enc = _Fake(batch_size=2, progress=True)
    out = enc.encode_texts(TEXTS)
    assert enc.text_calls == [TEXTS[:2], TEXTS[2:4], TEXTS[4:]]
    assert out.dtype == np.float32 and out.shape == (5, 3)
    np.testing.assert_allclose(out, _unit([_text_vector(t) for t in TEXTS]), rtol=1e-6)
    assert enc.builds == 1 and enc.modes == [(True, False)] * 3
    assert [dict(b) for b in bars] == [{"desc": "captions", "total": 3, "unit": "batch", "disable": False}]
    enc.text_calls.clear()
    again = enc.encode_texts(tuple(TEXTS), "mine", batch_size=3)
    assert enc.text_calls == [TEXTS[:3], TEXTS[3:]]
    np.testing.assert_array_equal(again, out)
    assert bars[-1] == {"desc": "mine", "total": 2, "unit": "batch", "disable": False}


def test_encode_texts_progress_is_off_for_one_batch_or_when_asked(bars):
    _Fake(batch_size=5, progress=True).encode_texts(TEXTS)
    _Fake(batch_size=4, progress=True).encode_texts(TEXTS)
    _Fake(batch_size=1, progress=False).encode_texts(TEXTS)
    assert [(b["total"], b["disable"]) for b in bars] == [(1, True), (2, False), (5, True)]


def test_encode_texts_of_nothing_and_under_autocast(bars):
    enc = _Fake()
    out = enc.encode_texts([])
    assert out.shape == (0, 0) and out.dtype == np.float32 and enc.text_calls == [] and enc.builds == 1
    amp = _Fake(precision="amp_bf16")
    amp.encode_texts(["a"])
    assert amp.modes == [(True, True)]


def test_encode_texts_of_an_image_only_family():
    with pytest.raises(TypeError, match=r"^_ImageOnly does not encode texts$"):
        _ImageOnly().encode_texts(["a"])


def test_the_features_shape_is_checked():
    enc = _Fake(batch_size=2)
    enc.text_features = lambda texts: np.ones((1, 3))
    with pytest.raises(ValueError, match=r"the encoder returned shape \(1, 3\) for 2 texts; expected \(n_texts, d\)"):
        enc.encode_texts(["a", "b"])
    enc.text_features = lambda texts: [1.0] * len(texts)
    with pytest.raises(ValueError, match=r"the encoder returned shape \(2,\) for 2 texts"):
        enc.encode_texts(["a", "b"])
    enc.text_features = lambda texts: np.ones((len(texts), 2, 2))
    with pytest.raises(ValueError, match=r"shape \(2, 2, 2\) for 2 texts"):
        enc.encode_texts(["a", "b"])
    enc.text_features = lambda texts: [[1.0, 2.0]] * len(texts)       # no .shape: read with np.shape
    np.testing.assert_allclose(enc.encode_texts(["a", "b"]), _unit([[1, 2], [1, 2]]), rtol=1e-6)
    with pytest.raises(ValueError, match=r"the encoder returned shape \(3, 1\) for 2 images; expected \(n_images, d\)"):
        Encoder._checked(np.ones((3, 1)), 2, "images")


def test_the_image_features_shape_is_checked(tmp_path):
    paths, _ = _images(tmp_path / "img")
    enc = _Fake(batch_size=4)
    enc.image_features = lambda pixels: torch.ones(len(pixels), 2, 1)
    with pytest.raises(ValueError, match=r"^the encoder returned shape \(3, 2, 1\) for 3 images; expected "
                                         r"\(n_images, d\)$"):
        enc.encode_images(paths)


# ----------------------------------------------------------------------------------------------- image files
def test_encode_images_in_batches_with_their_digests(tmp_path, bars):
    paths, means = _images(tmp_path / "img")
    enc = _Fake(batch_size=2, progress=True)
    out, digests = enc._encode_image_files(paths, "pics", [_sha(p) for p in paths])
    assert digests == [_sha(p) for p in paths]
    assert enc.image_calls == [(2, 3, 2, 2), (1, 3, 2, 2)] and enc.builds == 1
    assert out.dtype == np.float32 and out.shape == (3, 3)
    np.testing.assert_allclose(out, _unit(means), rtol=1e-5)
    assert enc.modes == [(True, False)] * 2
    assert bars == [{"desc": "pics", "total": 2, "unit": "batch", "disable": False}]
    np.testing.assert_array_equal(enc.encode_images([str(p) for p in paths]), out)
    assert bars[-1] == {"desc": "images", "total": 2, "unit": "batch", "disable": False}
    _Fake(batch_size=3, progress=True).encode_images(paths)
    _Fake(batch_size=1, progress=False).encode_images(paths)
    assert [(b["total"], b["disable"]) for b in bars[2:]] == [(1, True), (3, True)]


def test_encode_images_of_nothing(bars):
    out, digests = _Fake()._encode_image_files([], "images")
    assert out.shape == (0, 0) and out.dtype == np.float32 and digests == []


def test_a_file_changed_under_a_run_is_named(tmp_path):
    paths, _ = _images(tmp_path / "img")
    good = [_sha(p) for p in paths]
    for bad_at in (0, 1, 2):                  # in the first batch and in the second one (batch_size 2)
        expected = list(good)
        expected[bad_at] = "f" * 64
        with pytest.raises(FileChangedError, match=rf"^{paths[bad_at]} changed while it was being encoded \(sha256 "
                                                   rf"{good[bad_at][:12]}\.\.\. now, ffffffffffff\.\.\. when hashed\): "
                                                   r"rerun once the files are stable$"):
            _Fake(batch_size=2).encode_images(paths, expected_sha256=expected)
    assert issubclass(FileChangedError, RuntimeError)


def test_expected_digests_must_match_the_paths(tmp_path):
    paths, _ = _images(tmp_path / "img")
    with pytest.raises(ValueError, match=r"^expected_sha256 has 2 digests for 3 paths$"):
        _Fake().encode_images(paths, expected_sha256=["a" * 64] * 2)
    with pytest.raises(TypeError, match=r"^_TextOnly does not encode images$"):
        _TextOnly().encode_images(paths)


def test_the_data_loader_options(tmp_path, monkeypatch):
    paths, _ = _images(tmp_path / "img", 2)
    seen = []
    real = torch.utils.data.DataLoader

    def loader(dataset, **kwargs):
        seen.append(kwargs)
        return real(dataset, **dict(kwargs, pin_memory=False))

    monkeypatch.setattr(torch.utils.data, "DataLoader", loader)
    enc = _Fake(batch_size=4, num_workers=0)
    enc.encode_images(paths)
    enc.device = "cuda:0"                      # pinned memory for a CUDA device (the fake computes on the CPU)
    enc.encode_images(paths)
    assert seen == [{"batch_size": 4, "shuffle": False, "num_workers": 0, "pin_memory": False},
                    {"batch_size": 4, "shuffle": False, "num_workers": 0, "pin_memory": True}]


# ------------------------------------------------------------------------------------------------ encode
def test_encode_guards():
    with pytest.raises(ValueError, match=r"^modality must be one of \('image', 'text'\); got 'audio'$"):
        _Fake().encode(["a"], "audio")
    with pytest.raises(TypeError, match=r"^_TextOnly encodes \('text',\), not 'image'$"):
        _TextOnly().encode(["a.png"], "image")
    assert MODALITIES == ("image", "text")


def test_encode_uncached(tmp_path, bars):
    paths, means = _images(tmp_path / "img")
    enc = _Fake(batch_size=2, progress=True)
    enc.identity = lambda: pytest.fail("identity is not asked for uncached encodings")
    np.testing.assert_allclose(enc.encode(iter(paths), "image", cache_dir=tmp_path / "c"), _unit(means), rtol=1e-5)
    txt = enc.encode(iter(TEXTS), "text", cache_dir=tmp_path / "c", batch_size=4)
    np.testing.assert_allclose(txt, _unit([_text_vector(t) for t in TEXTS]), rtol=1e-6)
    enc.encode(TEXTS, "text", desc="given", cache_dir=tmp_path / "c")
    enc.encode(paths, "image", desc="given images", cache_dir=tmp_path / "c")
    assert [(b["desc"], b["total"]) for b in bars] == [("images", 2), ("texts", 2), ("given", 3), ("given images", 2)]
    assert not (tmp_path / "c").exists()
    none = _Fake()
    none.identity = lambda: None                # no identity: not cached although asked
    none.encode(TEXTS, "text", cache=True, cache_dir=tmp_path / "c")
    assert not (tmp_path / "c").exists()


def test_encode_cached_miss_then_hit(tmp_path, bars):
    paths, means = _images(tmp_path / "img")
    cdir = tmp_path / "cache"
    enc = _Fake(batch_size=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first = enc.encode(paths, "image", cache=True, cache_dir=cdir)
        assert len(enc.image_calls) == 2
        assert (enc.cache_entry_dir(paths, "image", cdir) / "manifest.json").is_file()
        again = enc.encode(paths, "image", cache=True, cache_dir=cdir)
        assert len(enc.image_calls) == 2                     # read back, not encoded
        np.testing.assert_array_equal(again, first)
        np.testing.assert_allclose(first, _unit(means), rtol=1e-5)
        enc.encode(paths[:2], "image", cache=True, cache_dir=cdir, desc="two images")
        txt = enc.encode(TEXTS, "text", cache=True, cache_dir=cdir, batch_size=4, desc="t")
        assert [len(c) for c in enc.text_calls] == [4, 1]
        np.testing.assert_array_equal(enc.encode(TEXTS, "text", cache=True, cache_dir=cdir), txt)
        assert len(enc.text_calls) == 2
    assert [b["desc"] for b in bars] == ["images", "two images", "t"]


def test_encode_cached_checks_the_files_it_hashed(tmp_path):
    paths, _ = _images(tmp_path / "img")
    enc = _Fake()
    enc._digests = lambda items, modality: ["e" * 64] * len(items)      # what the files were when hashed
    with pytest.raises(FileChangedError, match=r"eeeeeeeeeeee\.\.\. when hashed"):
        enc.encode(paths, "image", cache=True, cache_dir=tmp_path / "cache")


def test_a_corrupt_entry_is_encoded_again_with_a_warning(tmp_path):
    cdir = tmp_path / "cache"
    enc = _Fake()
    first = enc.encode(TEXTS, "text", cache=True, cache_dir=cdir)
    array = enc.cache_entry_dir(TEXTS, "text", cdir) / "embeddings.npy"
    array.write_bytes(array.read_bytes()[:-8])
    with pytest.warns(_cache.CacheWarning, match=r"embeddings\.npy is corrupt: .*; encoding again$") as rec:
        again = enc.encode(TEXTS, "text", cache=True, cache_dir=cdir)
    assert len(rec) == 1 and _points_past_the_library(rec[0])
    assert len(enc.text_calls) == 2
    np.testing.assert_array_equal(again, first)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                              # rewritten: read back without a warning
        np.testing.assert_array_equal(enc.encode(TEXTS, "text", cache=True, cache_dir=cdir), first)
    assert len(enc.text_calls) == 2


def test_the_old_text_layout_is_named_once_per_miss(tmp_path):
    cdir = tmp_path / "cache"
    (cdir / "text-embeddings").mkdir(parents=True)
    paths, _ = _images(tmp_path / "img", 1)
    enc = _Fake()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        enc.encode(paths, "image", cache=True, cache_dir=cdir)          # images: nothing to say
    with pytest.warns(_cache.CacheWarning) as rec:
        enc.encode(TEXTS, "text", cache=True, cache_dir=cdir)
    assert len(rec) == 1 and _points_past_the_library(rec[0])
    assert str(rec[0].message) == (
        f"sentence embeddings cached in the old layout ({cdir / 'text-embeddings'}) are no longer read; the texts "
        f"are encoded once more into {cdir / 'encodings'} (then delete the old folder; `python -m hubnorm.data "
        "encode-texts <source>` refills the cache ahead of a notebook)")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        enc.encode(TEXTS, "text", cache=True, cache_dir=cdir)           # a hit: no warning
        enc.encode(TEXTS[:2], "text", cache=True, cache_dir=tmp_path / "fresh")   # no old folder: none


def test_a_cache_that_cannot_be_written_costs_a_warning(tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(_cache, "write_content_entry", fail)
    enc = _Fake()
    with pytest.warns(UserWarning) as rec:
        out = enc.encode(TEXTS, "text", cache=True, cache_dir=tmp_path / "cache")
    assert len(rec) == 1 and rec[0].category is UserWarning and _points_past_the_library(rec[0])
    assert str(rec[0].message) == "the encodings could not be cached (disk full); they are returned uncached"
    np.testing.assert_allclose(out, _unit([_text_vector(t) for t in TEXTS]), rtol=1e-6)


# --------------------------------------------------------------------------------------- cache_key, entry dir
def test_cache_key_and_entry_dir(tmp_path):
    paths, _ = _images(tmp_path / "img", 2)
    enc = _Fake("openai")
    text_digests = [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in ["é", "b"]]
    assert enc.cache_key(["é", "b"], "text") == _cache.content_key(enc.identity(), "text", text_digests)
    assert enc.cache_key(paths, "image") == _cache.content_key(enc.identity(), "image", [_sha(p) for p in paths])
    other = {"family": "other"}
    assert enc.cache_key(["é", "b"], "text", identity=other) == _cache.content_key(other, "text", text_digests)
    key = _cache.content_key(enc.identity(), "text", text_digests)[0]
    folder = tmp_path / "encodings" / "fake_fake-model_openai" / key            # the spec, slugged, names the folder
    assert enc.cache_entry_dir(iter(["é", "b"]), "text", tmp_path) == folder
    none = _Fake()
    none.identity = lambda: None
    with pytest.raises(ValueError, match=r"^_Fake\('fake:fake-model:none', device='cpu', precision='fp32'\) has no "
                                         r"identity: its encodings are not cached$"):
        none.cache_key(["a"], "text")


# -------------------------------------------------------------------------------------- CallableTextEncoder
class _Named:
    name = "my-encoder"

    def __call__(self, texts):
        return torch.tensor([_text_vector(t) for t in texts], dtype=torch.float64)


def test_callable_text_encoder():
    enc = CallableTextEncoder(_Named(), cache_id="mine|v1", batch_size=2, progress=False)
    assert (enc.model_name, enc.pretrained, enc.device, enc.batch_size, enc.progress) == (
        "my-encoder", None, "cpu", 2, False)
    assert enc.build() is enc and enc.modalities == ("text",) and enc.family == "callable"
    assert enc.spec == "callable:my-encoder" and enc.name == "my-encoder"
    assert enc.identity() == {"family": "callable", "cache_id": "mine|v1"}
    feats = enc.text_features(["ab", "c"])
    assert isinstance(feats, np.ndarray) and feats.dtype == np.float64
    np.testing.assert_array_equal(feats, [_text_vector("ab"), _text_vector("c")])
    np.testing.assert_allclose(enc.encode_texts(TEXTS), _unit([_text_vector(t) for t in TEXTS]), rtol=1e-6)
    grad = CallableTextEncoder(lambda texts: torch.ones(len(texts), 2, requires_grad=True))
    np.testing.assert_array_equal(grad.text_features(["a"]), [[1.0, 1.0]])     # detached before numpy
    plain = CallableTextEncoder(lambda texts: [[1.0, 2.0]] * len(texts))
    assert plain.model_name == "function" and plain.identity() is None and plain.batch_size == 4096
    assert plain.progress is True and plain.cache_id is None
    assert isinstance(plain.text_features(["a"]), np.ndarray)


def test_callable_text_encoder_runs_on_the_cpu(monkeypatch):
    monkeypatch.setattr(base, "default_device", lambda: "the-default")
    assert CallableTextEncoder(len).device == "cpu" and Encoder("m").device == "the-default"


def test_callable_text_encoder_finish_is_float64_normalised():
    x = np.array([[1e-3, 2e-3], [3.0, 4.0]], dtype=np.float64)
    out = CallableTextEncoder(len).finish(x)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, _unit(x), rtol=1e-7)
    with pytest.raises(ValueError, match=r"text embeddings contain an all-zero row"):
        CallableTextEncoder(len).finish(np.array([[0.0, 0.0], [1.0, 0.0]]))


@pytest.mark.parametrize("fn", [3, "encoder", None])
def test_callable_text_encoder_needs_a_callable(fn):
    with pytest.raises(TypeError, match=rf"^encoder must be a callable texts -> \(n, d\) array; got "
                                        rf"{type(fn).__name__}$"):
        CallableTextEncoder(fn)


@pytest.mark.parametrize("cache_id", ["", "   ", 3, b"id"])
def test_callable_text_encoder_cache_id_guard(cache_id):
    with pytest.raises(ValueError, match=r"cache_id must be a non-empty string naming the encoder and its version, "
                                         rf"or None; got {cache_id!r}"):
        CallableTextEncoder(len, cache_id=cache_id)
