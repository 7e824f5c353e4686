"""Unit checks of hubnorm.data.encoders.blip without downloads: short names resolved, every constructor guard by its
message and the settings it stores, the random-init config of each kind of name (the tiny test architecture, a local
folder's config.json, a ``blip-itm-base-*`` name, an unknown one), ``build`` on both paths (``"hf"`` through
recorders standing for transformers' classes: the name loaded, the error that names the fix, built once; ``"none"``:
weights seeded and isolated from the global generator, the offline processor sized to the config and caption length,
the vocabulary check at its boundary, dtype and eval mode), and the ITC features through a fake model: [CLS] row,
projection, L2 norm per row in float64 written here, the tokenizer's options and the dtype pixels are cast to; the
options and versions that enter the cache key.

Mutation run (``--tests tests/test_data_encoders.py`` [+ this file]): 84 -> 156 of 161 killed (52% -> 97%; the
baseline had 74 survivors and 3 mutants reached by no test). Survivors kept as equivalent (nothing a caller can
observe changes):

* ``build``: ``fork_rng(devices=None)``: on a machine without CUDA there is no device generator to fork (the CPU
  generator is forked and restored either way, checked above);
* ``image_features`` / ``text_features``: ``normalize(..., dim=+1)`` or ``dim`` dropped (4 mutants): torch's default
  ``dim=1`` is the last dimension of the 2-D projected [CLS] rows.
"""

import json
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from PIL import Image  # noqa: E402

from hubnorm.data import blip_offline  # noqa: E402
from hubnorm.data.cache import library_versions  # noqa: E402
from hubnorm.data.encoders import blip as eb  # noqa: E402
from hubnorm.data.encoders.blip import BLIP_MODELS, BLIP_TINY, BlipItcEncoder, resolve_blip_model  # noqa: E402
from blip_fakes import Moved, Out  # noqa: E402

torch.set_num_threads(1)


def hf():
    """The ``transformers`` module a function-level ``from transformers import ...`` reads now (the object in
    ``sys.modules`` can be replaced by the first lazy attribute access)."""
    for name in ("BlipConfig", "BlipForImageTextRetrieval", "BlipProcessor"):
        getattr(sys.modules["transformers"], name)
    return sys.modules["transformers"]


# --------------------------------------------------------------------------------------------- names, guards
def test_resolve_short_names_and_pass_the_rest_through():
    assert resolve_blip_model("blip-itm-base-coco") == "Salesforce/blip-itm-base-coco"
    assert resolve_blip_model("blip-itm-large-flickr") == "Salesforce/blip-itm-large-flickr"
    for name in ("Salesforce/blip-itm-base-coco", BLIP_TINY, "/some/folder", "other"):
        assert resolve_blip_model(name) == name
    assert set(BLIP_MODELS.values()) == {f"Salesforce/{k}" for k in BLIP_MODELS}


def test_constructor_guards_and_settings():
    with pytest.raises(ValueError, match=r"^BLIP pretrained must be 'hf' \(load the checkpoint's weights\) or 'none' "
                                         r"\(random init\); got 'openai'$"):
        BlipItcEncoder("blip-itm-base-coco", "openai", device="cpu")
    with pytest.raises(ValueError, match=r"^'blip-itm-tiny' is a random-init test architecture: use pretrained "
                                         r"'none'$"):
        BlipItcEncoder(BLIP_TINY, "hf", device="cpu")
    enc = BlipItcEncoder("blip-itm-base-coco", device="cpu", batch_size=3, seed=4)
    assert enc.pretrained == "hf" and enc.model_name == "blip-itm-base-coco" and enc.family == "blip"
    assert enc.max_length == 35 and enc.batch_size == 3 and enc.seed == 4 and enc.device == "cpu"
    assert enc._processor is None and enc._model is None
    for tag in (None, "none", "random", ""):
        assert BlipItcEncoder(BLIP_TINY, tag, device="cpu").pretrained == "none"
    enc = BlipItcEncoder("x", "none", device="cpu", max_length=12.0)
    assert enc.max_length == 12 and type(enc.max_length) is int
    assert enc.spec == "blip:x:none"


def test_options_and_versions_enter_the_identity():
    assert BlipItcEncoder("blip-itm-base-coco", "hf", device="cpu").options() == {"max_length": 35}
    assert BlipItcEncoder(BLIP_TINY, "none", device="cpu", seed=3, max_length=20).options() == {"max_length": 20,
                                                                                               "seed": 3}
    enc = BlipItcEncoder(BLIP_TINY, "none", device="cpu")
    assert enc.versions() == library_versions("blip") and "transformers" in enc.versions()
    ident = enc.identity()
    assert ident["family"] == "blip" and ident["options"] == {"max_length": 35, "seed": 0}
    assert ident["versions"]["transformers"] == library_versions("blip")["transformers"]


# --------------------------------------------------------------------------------------------- random-init config
def test_random_init_config_of_each_kind_of_name(tmp_path):
    base = hf().BlipConfig().to_json_string(use_diff=False)
    tiny = BlipItcEncoder(BLIP_TINY, "none", device="cpu")._random_init_config()
    assert tiny.to_json_string(use_diff=False) == blip_offline.small_blip_config(vocab_size=192).to_json_string(
        use_diff=False)
    assert tiny.text_config.vocab_size == 192
    for name in ("blip-itm-base-coco", "Salesforce/blip-itm-base-flickr", "blip-itm-base-anything"):
        assert BlipItcEncoder(name, "none", device="cpu")._random_init_config().to_json_string(use_diff=False) == base
    folder = tmp_path / "saved"
    folder.mkdir()
    blip_offline.small_blip_config(vocab_size=77, hidden=16).save_pretrained(str(folder))
    local = BlipItcEncoder(str(folder), "none", device="cpu")._random_init_config()
    assert local.text_config.vocab_size == 77 and local.vision_config.hidden_size == 16
    empty = tmp_path / "blip-itm-base-coco"                              # a folder without config.json: the name
    empty.mkdir()
    assert BlipItcEncoder(str(empty), "none", device="cpu")._random_init_config().to_json_string(
        use_diff=False) == base
    for name in ("blip-itm-large-coco", "Salesforce/blip-itm-large-flickr", "x/blip-itm-bas"):
        with pytest.raises(ValueError, match=rf"^random init of '{name}' needs its config: use a 'blip-itm-base-\*' "
                                             r"name, 'blip-itm-tiny', or a local folder with config.json \(or "
                                             r"pretrained 'hf'\)$"):
            BlipItcEncoder(name, "none", device="cpu")._random_init_config()


# --------------------------------------------------------------------------------------------- build
class Loader:
    """Stands for BlipForImageTextRetrieval / BlipProcessor: ``from_pretrained`` recorded, optionally failing."""

    calls = []
    fail = None

    @classmethod
    def from_pretrained(cls, name):
        Loader.calls.append((cls.__name__, name))
        if Loader.fail == cls.__name__:
            raise OSError("no such file")
        return FakeModel() if cls.__name__ == "Model" else FakeProcessor()


def patch_loaders(monkeypatch, fail=None):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")                        # never the network, should a patch miss
    Loader.calls, Loader.fail = [], fail
    monkeypatch.setattr(hf(), "BlipForImageTextRetrieval", type("Model", (Loader,), {}))
    monkeypatch.setattr(hf(), "BlipProcessor", type("Proc", (Loader,), {}))


def test_build_hf_loads_the_resolved_name_once(monkeypatch):
    patch_loaders(monkeypatch)
    enc = BlipItcEncoder("blip-itm-large-flickr", "hf", device="cpu", precision="fp16")
    assert enc.build() is enc
    assert Loader.calls == [("Model", "Salesforce/blip-itm-large-flickr"),
                            ("Proc", "Salesforce/blip-itm-large-flickr")]
    assert isinstance(enc._model, FakeModel) and enc._model.moved == [dict(device="cpu", dtype=torch.float16)]
    assert enc._model.evaluated and isinstance(enc.processor, FakeProcessor)
    assert enc.build() is enc and enc.model is enc._model and len(Loader.calls) == 2      # built once


@pytest.mark.parametrize("failing", ["Model", "Proc"])
def test_build_hf_failure_names_the_fix(monkeypatch, failing):
    patch_loaders(monkeypatch, fail=failing)
    enc = BlipItcEncoder("some/blip", "hf", device="cpu")
    with pytest.raises(RuntimeError, match=r"^could not load the BLIP checkpoint 'some/blip': no such file\. The "
                                           r"weights are downloaded once from the Hugging Face hub \(cache: HF_HOME\); "
                                           r"offline, copy the cache or a save_pretrained folder here and pass its "
                                           r"path as the model\.$") as err:
        enc.build()
    assert isinstance(err.value.__cause__, OSError) and enc._model is None and enc._processor is None


def test_build_without_transformers_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)           # ``import transformers`` raises ImportError
    want = r"^BLIP encoding needs transformers: pip install 'hubnorm\[rerank\]'$"
    with pytest.raises(ImportError, match=want) as err:
        BlipItcEncoder(BLIP_TINY, "none", device="cpu").build()
    assert isinstance(err.value.__cause__, ImportError)


@pytest.fixture(scope="module")
def tiny():
    return BlipItcEncoder(BLIP_TINY, "none", device="cpu", seed=2, max_length=9).build()


def test_build_none_seeds_the_weights_and_leaves_the_global_generator(tiny):
    state = torch.random.get_rng_state()
    enc = BlipItcEncoder(BLIP_TINY, "none", device="cpu", seed=2, max_length=9)
    enc.build()
    assert torch.equal(torch.random.get_rng_state(), state)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(2)
        ref = hf().BlipForImageTextRetrieval(blip_offline.small_blip_config(vocab_size=192))
    got, want = enc.model.state_dict(), ref.state_dict()
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    assert enc.model.config.text_config.vocab_size == 192
    assert not enc.model.training and next(enc.model.parameters()).dtype == torch.float32
    other = BlipItcEncoder(BLIP_TINY, "none", device="cpu", seed=3).build().model.state_dict()
    assert any(not torch.equal(other[k], want[k]) for k in want)


def test_build_none_offline_processor_sized_to_config_and_caption_length(tiny):
    proc = tiny.processor
    assert proc.tokenizer.model_max_length == 9
    assert proc.image_processor.size == {"height": 32, "width": 32}
    assert proc.hubnorm_fingerprint == blip_offline.offline_processor(32, max_length=9).hubnorm_fingerprint
    half = BlipItcEncoder(BLIP_TINY, "none", device="cpu", precision="bf16").build()
    assert next(half.model.parameters()).dtype == torch.bfloat16 and not half.model.training


def test_build_none_checks_the_vocabulary_against_the_config(tmp_path):
    n = len(blip_offline.offline_processor(32).tokenizer)
    for size, ok in ((n, True), (n - 1, False)):
        folder = tmp_path / f"v{size}"
        folder.mkdir()
        blip_offline.small_blip_config(vocab_size=size, hidden=8, layers=1).save_pretrained(str(folder))
        enc = BlipItcEncoder(str(folder), "none", device="cpu")
        if ok:
            assert enc.build().model.config.text_config.vocab_size == n
        else:
            with pytest.raises(ValueError, match=rf"^the offline tokenizer has {n} tokens but the config only "
                                                 rf"{n - 1}$"):
                enc.build()


# --------------------------------------------------------------------------------------------- features (fake model)
W_IMG = torch.tensor([[1.0, 0.5, -2.0], [0.0, 3.0, 1.0]], dtype=torch.float64)   # vision_proj: 2 -> 3
W_TXT = torch.tensor([[2.0, -1.0, 0.0], [1.0, 1.0, 4.0]], dtype=torch.float64)   # text_proj: 2 -> 3


class FakeModel:
    """The ITC parts of BlipForImageTextRetrieval as plain functions (float64 parameters); [CLS] = token 0, the
    other tokens are large garbage rows."""

    def __init__(self):
        self.moved, self.evaluated, self.vision_calls, self.text_calls = [], False, [], []

    def to(self, **kwargs):
        self.moved.append(kwargs)
        return self

    def eval(self):
        self.evaluated = True
        return self

    def parameters(self):
        yield W_IMG

    def vision_model(self, *, pixel_values):
        self.vision_calls.append(pixel_values)
        b = pixel_values.shape[0]
        hidden = torch.full((b, 3, 2), 1e3, dtype=pixel_values.dtype)
        hidden[:, 0, :] = pixel_values.reshape(b, -1)[:, :2]
        return Out(hidden)

    def vision_proj(self, x):
        return x @ W_IMG

    def text_encoder(self, *, input_ids, attention_mask):
        self.text_calls.append((input_ids, attention_mask))
        b = input_ids.shape[0]
        hidden = torch.full((b, 4, 2), -1e3, dtype=torch.float64)
        hidden[:, 0, 0] = input_ids[:, 0].double()
        hidden[:, 0, 1] = attention_mask.sum(1).double()
        return Out(hidden)

    def text_proj(self, x):
        return x @ W_TXT


class FakeTokenizer:
    """input_ids: one row per text, first id = its length; attention_mask: 1 per word."""

    def __init__(self):
        self.calls, self.moves = [], []

    def __call__(self, texts, **kwargs):
        self.calls.append((texts, kwargs))
        width = max(len(t.split()) for t in texts)
        ids = torch.tensor([[len(t)] + [0] * (width - 1) for t in texts], dtype=torch.long)
        mask = torch.tensor([[1] * len(t.split()) + [0] * (width - len(t.split())) for t in texts], dtype=torch.long)
        return {"input_ids": Moved(ids, self.moves, "input_ids"), "attention_mask": Moved(mask, self.moves, "mask")}


class FakeImageProcessor:
    def __init__(self):
        self.calls = []

    def __call__(self, *, images, return_tensors):
        self.calls.append((images, return_tensors))
        assert return_tensors == "pt"
        return {"pixel_values": torch.tensor([[[float(images.size[0])], [float(images.size[1])]]])}


class FakeProcessor:
    def __init__(self):
        self.tokenizer, self.image_processor = FakeTokenizer(), FakeImageProcessor()


def faked(**kwargs):
    enc = BlipItcEncoder("fake", "none", device="cpu", **kwargs)
    enc._model, enc._processor = FakeModel(), FakeProcessor()
    return enc


def unit_rows(x):
    x = np.asarray(x, dtype=np.float64)
    return x / np.sqrt((x ** 2).sum(axis=1, keepdims=True))


def test_image_features_project_the_cls_row_and_normalise_each_row():
    enc = faked()
    pixels = torch.tensor([[[1.0, 2.0], [9.0, 9.0]], [[-3.0, 0.5], [9.0, 9.0]], [[0.0, 4.0], [1.0, 1.0]]],
                          dtype=torch.float32)
    moves = []
    got = enc.image_features(Moved(pixels, moves, "pixels"))
    assert moves == [("pixels", ("cpu",), dict(dtype=torch.float64))]
    assert got.dtype == torch.float64 and enc.model.vision_calls[0].dtype == torch.float64   # the model's dtype
    want = unit_rows(np.array([[1, 2], [-3, 0.5], [0, 4]]) @ W_IMG.numpy())
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)


def test_text_features_tokenise_project_the_cls_row_and_normalise_each_row():
    enc = faked(max_length=7)
    texts = ("a dog", "two cats on a mat", "x")
    got = enc.text_features(texts)
    [(passed, kwargs)] = enc.processor.tokenizer.calls
    assert passed == list(texts) and type(passed) is list
    assert kwargs == dict(padding="longest", truncation=True, max_length=7, return_tensors="pt")
    assert enc.processor.tokenizer.moves == [("input_ids", ("cpu",), {}), ("mask", ("cpu",), {})]
    ids, mask = enc.model.text_calls[0]
    assert ids[:, 0].tolist() == [5, 17, 1] and mask.sum(1).tolist() == [2, 5, 1]
    want = unit_rows(np.array([[5, 2], [17, 5], [1, 1]]) @ W_TXT.numpy())
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)


def test_image_transform_returns_the_first_pixel_tensor():
    enc = faked()
    im = Image.new("RGB", (7, 5))
    out = enc.image_transform()(im)
    [(images, tensors)] = enc.processor.image_processor.calls
    assert images is im and tensors == "pt"
    assert out.tolist() == [[7.0], [5.0]]
    assert eb._pixels(enc.processor.image_processor, Image.new("RGB", (2, 3))).tolist() == [[2.0], [3.0]]


def test_tiny_itc_features_are_unit_rows_of_the_model_projections(tiny):
    """The real tiny architecture: each row of image_features / text_features equals the float64 normalisation of
    the projected [CLS] state computed here from the model's parts."""
    pixels = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        img = tiny.image_features(pixels)
        cls = tiny.model.vision_proj(tiny.model.vision_model(pixel_values=pixels).last_hidden_state[:, 0, :])
        texts = ["a red dog", "two men riding bikes down a long street near the water", "blue"]
        txt = tiny.text_features(texts)
        tok = tiny.processor.tokenizer(texts, padding="longest", truncation=True, max_length=9, return_tensors="pt")
        assert tok["input_ids"].shape[1] == 9                         # the long caption is cut to max_length
        tcls = tiny.model.text_proj(tiny.model.text_encoder(input_ids=tok["input_ids"],
                                                            attention_mask=tok["attention_mask"]).last_hidden_state[
                                                                :, 0, :])
    np.testing.assert_allclose(img.numpy(), unit_rows(cls.numpy()), atol=1e-6)
    np.testing.assert_allclose(txt.numpy(), unit_rows(tcls.numpy()), atol=1e-6)
    assert json.dumps(tiny.options()) == '{"max_length": 9, "seed": 2}'
