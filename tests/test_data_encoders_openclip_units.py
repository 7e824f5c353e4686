"""Unit checks of hubnorm.data.encoders.openclip with open_clip replaced by a recording fake (``sys.modules``; no
weights, no network): the pretrained tag read as random init, the shipped test configs registered only for
``hubnorm-`` names, the unknown-model and unknown-tag guards by their messages (hub models and checkpoint paths
exempt), the precision handed to open_clip, the seeded random init that leaves the caller's RNG alone, the offline
hint for a failed weights download (and only for it), what ``build`` stores, the feature hooks (device, dtype casts),
``options`` and ``_looks_offline`` on each phrase it looks for.

Mutation run (``--tests tests/test_data_encoders.py`` [+ this file]): 133 of 139 killed (96%; baseline without this
file, ``--sample 3``: 11 killed, 27 survived, 10 reached by no test of 48 tested, 23%). Equivalent mutants left (6):
- ``torch.random.fork_rng(devices=[])`` -> ``fork_rng(devices=None)``: on a machine without CUDA
  both fork the CPU generator only (with CUDA the mutant would also fork the GPUs' generators; the numbers are the
  same).
- ``library_versions("open_clip")`` -> ``"XXopen_clipXX"`` / ``"OPEN_CLIP"`` / ``None`` (3): ``library_versions``
  adds a field only for ``"blip"``.
- ``pixels.to(self.device, non_blocking=True)`` -> ``non_blocking=False`` / dropped (2): the same values, copied
  synchronously.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch

from hubnorm.data.cache import library_versions
from hubnorm.data.encoders import openclip
from hubnorm.data.encoders.openclip import HUBNORM_OPEN_CLIP_CONFIGS, OpenClipEncoder, _looks_offline

torch.set_num_threads(1)


class _Model:
    def __init__(self):
        self.evaluated = False
        self.images, self.tokens = [], []

    def eval(self):
        self.evaluated = True
        return self

    def encode_image(self, pixels):
        self.images.append(pixels)
        return pixels.float().flatten(1)[:, :2] + 1.0

    def encode_text(self, tokens):
        self.tokens.append(tokens)
        return tokens.float() + 1.0


class _Tokenizer:
    def __call__(self, texts):
        return torch.tensor([[len(t), 1] for t in texts])


def _fake_open_clip(models=("ViT-B-32",), tags=("openai", "laion2b"), error=None):
    """A stand-in for the open_clip module that records what the encoder asks of it."""
    oc = types.ModuleType("open_clip")
    oc.models, oc.calls, oc.draws = list(models), [], []

    def add_model_config(path):
        oc.calls.append(("add_model_config", path))
        oc.models.append("hubnorm-tiny-sigmoid")

    def list_pretrained_tags_by_model(name):
        oc.calls.append(("tags", name))
        return list(tags)

    def create_model_and_transforms(name, *, pretrained, precision, device):
        oc.calls.append(("create", name, pretrained, precision, device))
        oc.draws.append(torch.rand(2))
        if error is not None:
            raise error
        oc.model = _Model()
        return oc.model, "train-transform", "eval-transform"

    def get_tokenizer(name):
        oc.calls.append(("tokenizer", name))
        return _Tokenizer()

    oc.list_models = lambda: list(oc.models)
    oc.add_model_config = add_model_config
    oc.list_pretrained_tags_by_model = list_pretrained_tags_by_model
    oc.create_model_and_transforms = create_model_and_transforms
    oc.get_tokenizer = get_tokenizer
    return oc


@pytest.fixture
def fake(monkeypatch):
    def install(**kwargs):
        oc = _fake_open_clip(**kwargs)
        monkeypatch.setitem(sys.modules, "open_clip", oc)
        return oc
    return install


# ------------------------------------------------------------------------------------------------ __init__
@pytest.mark.parametrize("pretrained, stored", [(None, None), ("none", None), ("random", None), ("", None),
                                                ("None", None), ("openai", "openai"), ("/ckpt.pt", "/ckpt.pt")])
def test_pretrained_none_means_random_init(pretrained, stored):
    enc = OpenClipEncoder("ViT-B-32", pretrained, device="cpu", batch_size=3, seed=4)
    assert enc.pretrained == stored and enc.model_name == "ViT-B-32" and enc.batch_size == 3 and enc.seed == 4
    assert enc._preprocess is None and enc._tokenizer is None and enc._model is None
    assert enc.family == "open_clip" and enc.spec == f"open_clip:ViT-B-32:{stored or 'none'}"


def test_options_and_versions():
    assert OpenClipEncoder("ViT-B-32", None, seed=9, device="cpu").options() == {"seed": 9}
    assert OpenClipEncoder("ViT-B-32", "openai", seed=9, device="cpu").options() == {}
    versions = OpenClipEncoder("ViT-B-32", "openai", device="cpu").versions()
    assert versions == library_versions("open_clip") and set(versions) == {"torch", "open_clip", "hubnorm"}


def test_the_shipped_configs_folder():
    assert HUBNORM_OPEN_CLIP_CONFIGS == Path(openclip.__file__).resolve().parents[1] / "model_configs"
    assert (HUBNORM_OPEN_CLIP_CONFIGS / "hubnorm-tiny-sigmoid.json").is_file()


# --------------------------------------------------------------------------------------------------- build
@pytest.mark.parametrize("precision, handed", [("fp32", "fp32"), ("fp16", "fp16"), ("bf16", "bf16"),
                                               ("amp", "fp32"), ("amp_bf16", "fp32")])
def test_build_hands_open_clip_the_model_precision_and_device(fake, precision, handed):
    oc = fake()
    enc = OpenClipEncoder("ViT-B-32", "openai", device="cpu", precision=precision)
    assert enc.build() is enc
    assert oc.calls == [("tags", "ViT-B-32"), ("create", "ViT-B-32", "openai", handed, "cpu"),
                        ("tokenizer", "ViT-B-32")]
    assert enc._model is oc.model and oc.model.evaluated and enc._preprocess == "eval-transform"
    assert isinstance(enc._tokenizer, _Tokenizer)
    assert enc.build() is enc and len(oc.calls) == 3           # built once
    assert enc.image_transform() == "eval-transform"


def test_a_built_encoder_does_not_import_open_clip(monkeypatch):
    monkeypatch.setitem(sys.modules, "open_clip", None)        # importing it would fail
    enc = OpenClipEncoder("ViT-B-32", None, device="cpu")
    enc._model = "built"
    assert enc.build() is enc and enc.model == "built"


def test_the_test_configs_are_registered_for_hubnorm_names_only(fake):
    oc = fake()
    OpenClipEncoder("hubnorm-tiny-sigmoid", None, device="cpu").build()
    assert oc.calls[0] == ("add_model_config", HUBNORM_OPEN_CLIP_CONFIGS)
    assert oc.calls[1][:2] == ("create", "hubnorm-tiny-sigmoid")
    oc.calls.clear()
    OpenClipEncoder("hubnorm-tiny-sigmoid", None, device="cpu").build()      # already registered: not again
    assert [c[0] for c in oc.calls] == ["create", "tokenizer"]
    oc = fake(models=("ViT-B-32", "hubnorm-other"))
    OpenClipEncoder("ViT-B-32", None, device="cpu").build()
    OpenClipEncoder("hubnorm-other", None, device="cpu").build()
    assert [c[0] for c in oc.calls] == ["create", "tokenizer"] * 2


def test_an_unknown_model_is_refused(fake):
    oc = fake()
    for name in ("ViT-B-99", "hubnorm-missing"):            # a hubnorm- name the shipped configs lack too
        with pytest.raises(ValueError, match=rf"^unknown open_clip model '{name}'; see open_clip.list_models\(\) "
                                             r"\(OpenAI weights: use the '-quickgelu' names, e.g. ViT-B-32-quickgelu "
                                             r"with pretrained 'openai'\)$"):
            OpenClipEncoder(name, None, device="cpu").build()
    assert [c[0] for c in oc.calls] == ["add_model_config"]        # for the hubnorm- name only
    OpenClipEncoder("hf-hub:timm/ViT-B-16-SigLIP", None, device="cpu").build()   # hub models: not listed
    OpenClipEncoder("hf-hub:timm/ViT-B-16-SigLIP", "webli", device="cpu").build()  # nor their tags
    assert ("tags", "hf-hub:timm/ViT-B-16-SigLIP") not in oc.calls
    assert [c[2] for c in oc.calls if c[0] == "create"] == [None, "webli"]


def test_an_unknown_pretrained_tag_is_refused_unless_a_checkpoint_file(fake, tmp_path):
    oc = fake()
    with pytest.raises(ValueError, match=r"^model 'ViT-B-32' has no pretrained tag 'datacomp'; available: "
                                         r"\['openai', 'laion2b'\] \(or a path to a checkpoint file\)$"):
        OpenClipEncoder("ViT-B-32", "datacomp", device="cpu").build()
    assert [c[0] for c in oc.calls] == ["tags"]
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"x")
    OpenClipEncoder("ViT-B-32", str(ckpt), device="cpu").build()
    assert oc.calls[-2] == ("create", "ViT-B-32", str(ckpt), "fp32", "cpu")
    OpenClipEncoder("ViT-B-32", "laion2b", device="cpu").build()
    assert oc.calls[-2] == ("create", "ViT-B-32", "laion2b", "fp32", "cpu")


def test_random_init_is_seeded_and_leaves_the_callers_rng_alone(fake):
    oc = fake()
    torch.manual_seed(123)
    want_after = torch.rand(2)
    torch.manual_seed(3)
    want_init = torch.rand(2)
    torch.manual_seed(123)
    OpenClipEncoder("ViT-B-32", None, device="cpu", seed=3).build()
    torch.testing.assert_close(oc.draws[0], want_init)              # the model is drawn from seed 3
    torch.testing.assert_close(torch.rand(2), want_after)           # the caller's generator did not move
    OpenClipEncoder("ViT-B-32", "none", device="cpu").build()       # seed 0 by default
    torch.manual_seed(0)
    torch.testing.assert_close(oc.draws[1], torch.rand(2))


def test_pretrained_weights_are_not_seeded(fake):
    oc = fake()
    torch.manual_seed(55)
    want = torch.rand(4)
    torch.manual_seed(55)
    OpenClipEncoder("ViT-B-32", "openai", device="cpu", seed=3).build()
    torch.testing.assert_close(oc.draws[0], want[:2])              # drawn from the caller's generator ...
    torch.testing.assert_close(torch.rand(2), want[2:])            # ... which moved on


def test_an_offline_weights_download_names_the_fix(fake):
    err = ConnectionError("Max retries exceeded with url")
    fake(error=err)
    with pytest.raises(RuntimeError, match=r"^could not load the pretrained weights 'ViT-B-32'/'openai': Max "
                                           r"retries exceeded with url\. The weights are downloaded once by open_clip "
                                           r"\(Hugging Face hub cache, see HF_HOME\); this machine seems offline\. "
                                           r"Download them on a machine with network access or copy the HF cache "
                                           r"here, then "
                                           r"rerun\.$") as info:
        OpenClipEncoder("ViT-B-32", "openai", device="cpu").build()
    assert info.value.__cause__ is err


def test_other_build_errors_pass_through(fake):
    fake(error=ConnectionError("offline"))
    with pytest.raises(ConnectionError, match=r"^offline$"):           # random init downloads nothing
        OpenClipEncoder("ViT-B-32", None, device="cpu").build()
    fake(error=ValueError("size mismatch"))
    with pytest.raises(ValueError, match=r"^size mismatch$"):
        OpenClipEncoder("ViT-B-32", "openai", device="cpu").build()
    enc = OpenClipEncoder("ViT-B-32", "openai", device="cpu")
    with pytest.raises(ValueError):
        enc.build()
    assert enc._model is None and enc._tokenizer is None


# --------------------------------------------------------------------------------------------------- hooks
@pytest.mark.parametrize("precision, dtype", [("fp32", torch.float32), ("amp", torch.float32),
                                              ("amp_bf16", torch.float32), ("fp16", torch.float16),
                                              ("bf16", torch.bfloat16)])
def test_feature_hooks(fake, precision, dtype):
    oc = fake()
    enc = OpenClipEncoder("ViT-B-32", "openai", device="cpu", precision=precision).build()
    pixels = torch.arange(8, dtype=torch.float32).reshape(2, 1, 2, 2)
    out = enc.image_features(pixels)
    assert oc.model.images[0].dtype == dtype and oc.model.images[0].device.type == "cpu"
    torch.testing.assert_close(out, torch.tensor([[1.0, 2.0], [5.0, 6.0]]))
    txt = enc.text_features(["ab", "abcd"])
    torch.testing.assert_close(oc.model.tokens[0], torch.tensor([[2, 1], [4, 1]]))
    torch.testing.assert_close(txt, torch.tensor([[3.0, 2.0], [5.0, 2.0]]))


def test_feature_hooks_move_the_inputs_to_the_encoders_device(fake):
    oc = fake()
    enc = OpenClipEncoder("ViT-B-32", "openai", device="cpu").build()
    enc.device = "meta"                  # a device every torch has: the inputs must follow it
    enc.image_features(torch.ones(1, 1, 2, 2))
    enc.text_features(["ab"])
    assert oc.model.images[0].device.type == "meta" and oc.model.tokens[0].device.type == "meta"


def test_building_without_open_clip_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "open_clip", None)           # import open_clip raises ImportError
    with pytest.raises(ImportError, match=r"^encoding needs open_clip: pip install 'hubnorm\[data\]' "
                                          r"\(open_clip_torch\)$"):
        OpenClipEncoder("ViT-B-32", None, device="cpu").build()


# ------------------------------------------------------------------------------------------- _looks_offline
@pytest.mark.parametrize("exc", [
    ConnectionError("boom"), OSError("We are OFFLINE"), OSError("could not resolve host"),
    TimeoutError("read timed out"), OSError("Max retries exceeded"), OSError("Network is unreachable"),
    type("LocalEntryNotFoundError", (OSError,), {})("x"), OSError("We couldn't connect to hf.co"),
    OSError("Name or service not known")])
def test_looks_offline(exc):
    assert _looks_offline(exc) is True


@pytest.mark.parametrize("exc", [ValueError("size mismatch"), OSError("No such file"), RuntimeError("")])
def test_does_not_look_offline(exc):
    assert _looks_offline(exc) is False
