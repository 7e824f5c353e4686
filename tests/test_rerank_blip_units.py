"""Unit checks of hubnorm.rerank.blip without weights: ``image_key`` / ``text_key`` against their definition (SHA-1
of mode, size and pixels; of the UTF-8 text; a resolved path), every constructor guard by its message, the stored
settings and their defaults, the query / target keys of each direction, ``from_pretrained`` and ``from_config`` with
transformers' classes replaced by recorders (the name loaded, the default config and processor, the vocabulary
check at its boundary, the seeded and isolated random init, the model id), ``_image`` (paths opened as RGB, other
modes converted) and ``itm_scores`` through a fake model whose ITM logit is a known function of the image and the
caption: the scores against a float64 sigmoid written here, pairs grouped by image, the vision tower run once per
distinct image of a batch, the tokenizer's and the encoders' arguments, dtype and device, and the progress bar.

Mutation run (``--tests tests/test_gpu.py tests/test_rerank_blip.py`` [+ this file]): 91 -> 181 of 184 killed
(49% -> 98%; the baseline had 78 survivors and 15 mutants reached by no test). Survivors kept as equivalent (nothing a caller can observe changes):

* ``text_key``: ``encode("UTF-8")``: codec names are case-insensitive;
* ``from_config``: ``config.to_json_string(use_diff=None)``: transformers takes the diff only for ``use_diff is
  True``, so ``None`` hashes the full config like ``False`` (``use_diff=True`` is killed above);
* ``from_config``: ``fork_rng(devices=None)``: on a machine without CUDA there is no device generator to fork (the
  CPU generator is forked and restored either way, checked above).
"""

import hashlib
import os
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from PIL import Image  # noqa: E402

from hubnorm.rerank import blip  # noqa: E402
from hubnorm.rerank.blip import DEFAULT_BLIP_MODEL, BlipITMCrossEncoder, image_key, text_key  # noqa: E402
from blip_fakes import Moved, Out  # noqa: E402

torch.set_num_threads(1)


def hf():
    """The ``transformers`` module a function-level ``from transformers import ...`` reads now (the module object
    in ``sys.modules`` can be replaced after this file's import, and by the first lazy attribute access)."""
    for name in ("BlipConfig", "BlipForImageTextRetrieval", "BlipProcessor"):
        getattr(sys.modules["transformers"], name)
    return sys.modules["transformers"]


# ------------------------------------------------------------------------------------------------- fakes
class FakeImageProcessor:
    """pixel_values (n, 1) = the red value of each image's top-left pixel; records each call."""

    def __init__(self, log):
        self.log = log
        self.calls = []

    def __call__(self, *, images, return_tensors):
        assert return_tensors == "pt"
        self.calls.append([(im.mode, im.getpixel((0, 0))[0]) for im in images])
        pix = torch.tensor([[float(im.getpixel((0, 0))[0])] for im in images], dtype=torch.float32)
        return {"pixel_values": Moved(pix, self.log, "pixel_values")}


class FakeTokenizer:
    """input_ids (B, 1) = the number after "c" in each caption; records the captions and the options."""

    def __init__(self, log, size=10):
        self.log = log
        self.size = size
        self.calls = []

    def __len__(self):
        return self.size

    def __call__(self, texts, **kwargs):
        self.calls.append((list(texts), kwargs))
        ids = torch.tensor([[int(t.split("c")[1])] for t in texts], dtype=torch.long)
        return {"input_ids": Moved(ids, self.log, "input_ids"),
                "attention_mask": Moved(torch.ones_like(ids), self.log, "attention_mask")}


class FakeProcessor:
    def __init__(self, log):
        self.image_processor = FakeImageProcessor(log)
        self.tokenizer = FakeTokenizer(log)


def logit(red, cap):
    """The fake ITM head's match logit (minus its non-match logit) for an image of red value ``red`` and caption
    number ``cap``."""
    return (red - 100.0) / 50.0 + 0.3 * cap - 1.0


class FakeModel:
    """BlipForImageTextRetrieval's three parts as plain functions of the inputs (float64 parameters)."""

    def __init__(self):
        self.param = torch.zeros(1, dtype=torch.float64)
        self.moved_to = []
        self.evaluated = False
        self.vision_calls = []
        self.text_calls = []

    def to(self, device):
        self.moved_to.append(device)
        return self

    def eval(self):
        self.evaluated = True
        return self

    def parameters(self):
        yield self.param

    def vision_model(self, *, pixel_values):
        self.vision_calls.append(pixel_values)
        n = pixel_values.shape[0]
        hidden = torch.zeros((n, 3, 2), dtype=pixel_values.dtype)
        hidden[:, :, 0] = pixel_values[:, :1]
        hidden[:, :, 1] = torch.arange(3)
        return Out(hidden)

    def text_encoder(self, *, input_ids, attention_mask, encoder_hidden_states, encoder_attention_mask):
        self.text_calls.append(dict(input_ids=input_ids, attention_mask=attention_mask,
                                    encoder_hidden_states=encoder_hidden_states,
                                    encoder_attention_mask=encoder_attention_mask))
        b = input_ids.shape[0]
        hidden = torch.full((b, 2, 2), 1e3, dtype=torch.float64)   # token 1: garbage (only [CLS] is read)
        hidden[:, 0, 0] = encoder_hidden_states[:, 0, 0]
        hidden[:, 0, 1] = input_ids[:, 0].to(torch.float64)
        return Out(hidden)

    def itm_head(self, x):
        return torch.stack([torch.full_like(x[:, 0], 7.0), 7.0 + logit(x[:, 0], x[:, 1])], dim=1)


def rgb(red, mode="RGB"):
    im = Image.new("RGB", (3, 2), (red, 10, 20))
    return im if mode == "RGB" else im.convert(mode)


REDS = [40, 90, 160, 220]
CAPTIONS = [f"c{j}" for j in range(6)]


def make(direction="t2i", batch_size=3, images=None, captions=None, **kwargs):
    log = []
    model, proc = FakeModel(), FakeProcessor(log)
    ce = BlipITMCrossEncoder(model, proc, [rgb(r) for r in REDS] if images is None else images,
                             CAPTIONS if captions is None else captions, direction=direction, model_id="fake",
                             batch_size=batch_size, device="cpu", progress=False, **kwargs)
    return ce, model, proc, log


def reference(image_idx, caption_idx, reds=REDS):
    """softmax([7, 7 + logit])[1] = sigmoid(logit), in float64, pair by pair."""
    return np.array([1.0 / (1.0 + np.exp(-logit(float(reds[i]), float(j)))) for i, j in zip(image_idx, caption_idx)])


# ------------------------------------------------------------------------------------------------- keys
def test_image_key_of_a_pil_image_is_sha1_of_mode_size_and_pixels():
    im = rgb(77)
    h = hashlib.sha1(b"RGB:(3, 2)" + im.tobytes())
    assert image_key(im) == "img:" + h.hexdigest()[:20]
    assert len(image_key(im)) == 24
    assert image_key(rgb(77)) == image_key(im)                          # content, not identity
    assert image_key(rgb(78)) != image_key(im)
    grey = Image.new("L", (3, 2), 5)
    same_bytes = Image.new("P", (3, 2), 5)                              # same pixels and size, another mode
    assert grey.tobytes() == same_bytes.tobytes()
    assert image_key(grey) == "img:" + hashlib.sha1(b"L:(3, 2)" + grey.tobytes()).hexdigest()[:20]
    assert image_key(grey) != image_key(same_bytes)
    wide = Image.new("L", (6, 1), 5)                                    # same bytes, another size
    assert wide.tobytes() == grey.tobytes() and image_key(wide) != image_key(grey)


def test_image_key_of_a_path_is_its_resolved_string(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert image_key("a/../b.png") == "path:" + str(tmp_path.resolve() / "b.png")
    assert image_key(Path("b.png")) == "path:" + str(tmp_path.resolve() / "b.png")

    class Custom(os.PathLike):
        def __fspath__(self):
            return "sub/c.jpg"

    assert image_key(Custom()) == "path:" + str(tmp_path.resolve() / "sub" / "c.jpg")


def test_text_key_is_sha1_of_the_utf8_text():
    for text in ("a dog", "", "café ☕"):
        assert text_key(text) == "txt:" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:20]
    assert text_key("café") == "txt:f424452a9673918c6f09"                 # sha1(b"caf\xc3\xa9"), by hand
    assert len(text_key("x")) == 24 and text_key("a") != text_key("b")


# ------------------------------------------------------------------------------------------------- constructor
def test_constructor_guards_by_message():
    model, proc, ims = FakeModel(), FakeProcessor([]), [rgb(1)]
    with pytest.raises(ValueError, match=r"^direction must be 't2i' or 'i2t'; got 'both'$"):
        BlipITMCrossEncoder(model, proc, ims, ["c0"], direction="both", model_id="m")
    for bad in (0, -1, True, 2.0, "3", None):
        with pytest.raises(ValueError, match=rf"^batch_size must be a positive integer; got {bad!r}$"):
            BlipITMCrossEncoder(model, proc, ims, ["c0"], model_id="m", batch_size=bad, device="cpu")
    with pytest.raises(TypeError, match=r"^captions must be strings$"):
        BlipITMCrossEncoder(model, proc, ims, ["c0", 1], model_id="m", device="cpu")
    with pytest.raises(ValueError, match=r"^need at least one image and one caption$"):
        BlipITMCrossEncoder(model, proc, [], ["c0"], model_id="m", device="cpu")
    with pytest.raises(ValueError, match=r"^need at least one image and one caption$"):
        BlipITMCrossEncoder(model, proc, ims, [], model_id="m", device="cpu")
    with pytest.raises(ValueError, match=r"^image_keys / caption_keys must have one entry per image / caption$"):
        BlipITMCrossEncoder(model, proc, ims, ["c0"], model_id="m", device="cpu", image_keys=["a", "b"])
    with pytest.raises(ValueError, match=r"^image_keys / caption_keys must have one entry per image / caption$"):
        BlipITMCrossEncoder(model, proc, ims, ["c0"], model_id="m", device="cpu", caption_keys=[])
    with pytest.raises(ValueError, match=r"^device='gpu' is not a device name"):
        BlipITMCrossEncoder(model, proc, ims, ["c0"], model_id="m", device="gpu")
    ce = BlipITMCrossEncoder(model, proc, ims, ["c0"], model_id="m", batch_size=1, device="cpu")
    assert ce.batch_size == 1


def test_constructor_stores_its_settings_and_defaults():
    model, proc = FakeModel(), FakeProcessor([])
    images = (rgb(1), rgb(2))
    ce = BlipITMCrossEncoder(model, proc, images, ("c0", "c1", "c2"), model_id="my-model", device="cpu")
    assert ce.images == list(images) and type(ce.images) is list
    assert ce.captions == ["c0", "c1", "c2"] and type(ce.captions) is list
    assert ce.direction == "t2i" and ce.model_id == "my-model" and ce.kind == "real"
    assert ce.batch_size == 32 and ce.progress is True and ce.max_length == 35 and ce.cache is None
    assert ce.device == torch.device("cpu") and model.moved_to == [torch.device("cpu")] and model.evaluated
    assert ce.model is model and ce.processor is proc
    assert ce.n_queries == 3 and ce.n_targets == 2
    assert ce.query_keys == [text_key(c) for c in ("c0", "c1", "c2")]
    assert ce.target_keys == [image_key(im) for im in images]
    ce = BlipITMCrossEncoder(model, proc, images, ["c0"], model_id="m", device=None, progress=False, max_length=9)
    assert ce.device == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert ce.progress is False and ce.max_length == 9


def test_keys_of_each_direction_and_given_keys(tmp_path):
    model, proc = FakeModel(), FakeProcessor([])
    images, caps = [rgb(1), rgb(2)], ["c0", "c1", "c2"]
    t2i = BlipITMCrossEncoder(model, proc, images, caps, model_id="m", device="cpu", image_keys=["i0", "i1"],
                              caption_keys=("k0", "k1", "k2"))
    assert t2i.query_keys == ["k0", "k1", "k2"] and t2i.target_keys == ["i0", "i1"]
    i2t = BlipITMCrossEncoder(model, proc, images, caps, model_id="m", device="cpu", direction="i2t",
                              caption_keys=["k0", "k1", "k2"])
    assert i2t.direction == "i2t"
    assert i2t.query_keys == [image_key(im) for im in images] and i2t.target_keys == ["k0", "k1", "k2"]
    cached = BlipITMCrossEncoder(model, proc, images, caps, model_id="m", device="cpu", cache_dir=tmp_path)
    assert cached.cache is not None and cached.cache.directory == tmp_path and cached.cache.model_id == "m"


# ------------------------------------------------------------------------------------------------- constructors
class Recorder:
    calls = []

    @classmethod
    def from_pretrained(cls, name):
        cls.calls.append((cls.__name__, name))
        return FakeModel() if cls.__name__ == "Model" else FakeProcessor([])


def test_from_pretrained_loads_model_and_processor_by_name(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")                        # never the network, should a patch miss
    model_cls = type("Model", (Recorder,), {})
    proc_cls = type("Proc", (Recorder,), {})
    Recorder.calls = []
    monkeypatch.setattr(hf(), "BlipForImageTextRetrieval", model_cls)
    monkeypatch.setattr(hf(), "BlipProcessor", proc_cls)
    assert DEFAULT_BLIP_MODEL == "Salesforce/blip-itm-base-coco"
    ce = BlipITMCrossEncoder.from_pretrained([rgb(1)], ["c0"], device="cpu")
    assert Recorder.calls == [("Model", DEFAULT_BLIP_MODEL), ("Proc", DEFAULT_BLIP_MODEL)]
    assert ce.model_id == DEFAULT_BLIP_MODEL and isinstance(ce.model, FakeModel)
    assert isinstance(ce.processor, FakeProcessor) and ce.direction == "t2i"
    Recorder.calls = []
    ce = BlipITMCrossEncoder.from_pretrained([rgb(1)], ["c0"], "some/folder", direction="i2t", batch_size=4,
                                             device="cpu")
    assert Recorder.calls == [("Model", "some/folder"), ("Proc", "some/folder")]
    assert ce.model_id == "some/folder" and ce.direction == "i2t" and ce.batch_size == 4


class RandomModel(FakeModel):
    """Stands for BlipForImageTextRetrieval(config): its "weights" are drawn from torch's global generator."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.weights = torch.rand(4)


def fake_processor(n_tokens, fingerprint=None):
    proc = FakeProcessor([])
    proc.tokenizer.size = n_tokens
    if fingerprint is not None:
        proc.hubnorm_fingerprint = fingerprint
    return proc


def cfg_hash(config):
    return hashlib.sha1(config.to_json_string(use_diff=False).encode()).hexdigest()[:12]


def test_from_config_defaults_to_the_base_config_and_an_offline_processor(monkeypatch):
    made = []

    def offline(image_size):
        made.append(image_size)
        return fake_processor(30524, "fp-1")

    monkeypatch.setattr(hf(), "BlipForImageTextRetrieval", RandomModel)
    monkeypatch.setattr(blip, "offline_processor", offline)
    ce = BlipITMCrossEncoder.from_config([rgb(1)], ["c0"], device="cpu", progress=False)
    base = hf().BlipConfig()
    assert made == [384] and isinstance(ce.model.config, hf().BlipConfig)
    assert ce.model.config.to_json_string(use_diff=False) == base.to_json_string(use_diff=False)
    assert ce.model_id == f"blip-itm-random-init:cfg={cfg_hash(base)}:proc=fp-1:seed=0"
    assert torch.equal(ce.model.weights, torch.rand(4, generator=torch.Generator().manual_seed(0)))
    assert ce.progress is False and ce.processor.tokenizer.size == 30524


def test_from_config_seed_isolation_vocab_check_and_model_id(monkeypatch):
    monkeypatch.setattr(hf(), "BlipForImageTextRetrieval", RandomModel)
    monkeypatch.setattr(blip, "offline_processor", lambda image_size: pytest.fail("a processor was given"))
    config = blip.small_blip_config(vocab_size=12, image_size=16)
    state = torch.random.get_rng_state()
    ce = BlipITMCrossEncoder.from_config([rgb(1)], ["c0"], config, seed=5, processor=fake_processor(12),
                                         direction="i2t", device="cpu")
    assert torch.equal(torch.random.get_rng_state(), state)           # the global generator is left as it was
    assert torch.equal(ce.model.weights, torch.rand(4, generator=torch.Generator().manual_seed(5)))
    assert ce.model.config is config and ce.direction == "i2t"
    assert ce.model_id == f"blip-itm-random-init:cfg={cfg_hash(config)}:proc=FakeProcessor:seed=5"
    assert cfg_hash(config) != hashlib.sha1(config.to_json_string(use_diff=True).encode()).hexdigest()[:12]
    with pytest.raises(ValueError, match=r"^the tokenizer has 13 tokens but the config only 12: enlarge "
                                         r"text_config.vocab_size$"):
        BlipITMCrossEncoder.from_config([rgb(1)], ["c0"], config, processor=fake_processor(13), device="cpu")


# ------------------------------------------------------------------------------------------------- images
def test_image_opens_paths_as_rgb_and_converts_other_modes(tmp_path):
    grey = Image.new("L", (4, 3), 120)
    grey.save(tmp_path / "g.png")
    Image.new("RGB", (4, 3), (1, 2, 3)).save(tmp_path / "c.png")
    rgba = Image.new("RGBA", (2, 2), (9, 8, 7, 6))
    plain = rgb(50)

    class NoMode:
        pass

    odd = NoMode()
    ce, *_ = make(images=[str(tmp_path / "g.png"), tmp_path / "c.png", rgba, plain, odd],
                  image_keys=list("abcde"))
    a, b, c, d, e = (ce._image(i) for i in range(5))
    assert a.mode == "RGB" and a.size == (4, 3) and a.getpixel((1, 1)) == (120, 120, 120)
    assert b.mode == "RGB" and b.getpixel((0, 0)) == (1, 2, 3)
    assert c.mode == "RGB" and c.getpixel((0, 0)) == (9, 8, 7) and rgba.mode == "RGBA"
    assert d is plain and e is odd


# ------------------------------------------------------------------------------------------------- itm_scores
def test_itm_scores_equal_a_float64_reference_in_any_batching():
    img = np.array([2, 0, 3, 2, 1, 0, 2, 3])
    cap = np.array([5, 1, 0, 2, 4, 3, 1, 5])
    want = reference(img, cap)
    assert want.min() < 0.2 and want.max() > 0.8                       # spread: no saturated comparison
    for bs in (1, 2, 3, 8, 50):
        ce, *_ = make(batch_size=bs)
        got = ce.itm_scores(img, cap)
        assert got.dtype == np.float64 and got.shape == (8,)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    ce, *_ = make()
    np.testing.assert_allclose(ce.itm_scores(img.astype(float), cap.astype(np.float32)), want, rtol=1e-6)
    np.testing.assert_allclose(ce.itm_scores(img.tolist(), cap.tolist()), want, rtol=1e-6)
    assert ce.itm_scores(np.array([], dtype=int), np.array([], dtype=int)).shape == (0,)


def test_itm_scores_group_pairs_by_image_and_run_the_vision_tower_once_per_image():
    ce, model, proc, _ = make(batch_size=3)
    img = np.array([2, 0, 3, 2, 0, 0, 2])
    cap = np.array([5, 1, 0, 2, 4, 3, 1])
    ce.itm_scores(img, cap)
    # sorted by image then caption: (0,1) (0,3) (0,4) | (2,1) (2,2) (2,5) | (3,0)
    r = [REDS[i] for i in range(4)]
    assert proc.image_processor.calls == [[("RGB", r[0])], [("RGB", r[2])], [("RGB", r[3])]]
    assert [c[0] for c in proc.tokenizer.calls] == [["c1", "c3", "c4"], ["c1", "c2", "c5"], ["c0"]]
    assert [tuple(p.shape) for p in model.vision_calls] == [(1, 1), (1, 1), (1, 1)]
    ce, model, proc, _ = make(batch_size=4)
    ce.itm_scores(np.array([3, 1, 3, 1, 0]), np.array([0, 1, 2, 3, 4]))
    # batches (0,4) (1,1) (1,3) (3,0) | (3,2): distinct images 0, 1, 3 then 3; each text row reads its own image
    assert proc.image_processor.calls == [[("RGB", r[0]), ("RGB", r[1]), ("RGB", r[3])], [("RGB", r[3])]]
    states = [c["encoder_hidden_states"][:, 0, 0].tolist() for c in model.text_calls]
    assert states == [[r[0], r[1], r[1], r[3]], [r[3]]]


def test_itm_scores_pass_the_tokenizer_and_encoders_their_arguments():
    ce, model, proc, log = make(batch_size=2, max_length=7)
    ce.itm_scores(np.array([1, 1, 0]), np.array([3, 0, 2]))
    assert [kw for _, kw in proc.tokenizer.calls] == [dict(padding="longest", truncation=True, max_length=7,
                                                           return_tensors="pt")] * 2
    cpu = torch.device("cpu")
    assert log == [("pixel_values", (cpu, torch.float64), {}), ("input_ids", (cpu,), {}),
                   ("attention_mask", (cpu,), {})] * 2
    assert all(p.dtype == torch.float64 for p in model.vision_calls)   # pixels in the model's dtype
    first = model.text_calls[0]
    assert first["input_ids"].tolist() == [[2], [0]] and first["attention_mask"].tolist() == [[1], [1]]
    mask = first["encoder_attention_mask"]
    assert mask.dtype == torch.long and mask.tolist() == [[1, 1, 1], [1, 1, 1]]
    assert tuple(first["encoder_hidden_states"].shape) == (2, 3, 2)
    assert first["encoder_hidden_states"][:, :, 1].tolist() == [[0, 1, 2], [0, 1, 2]]


def test_itm_scores_progress_bar(monkeypatch):
    bars = []

    def fake_progress(iterable, *, desc, disable):
        bars.append((list(iterable), desc, disable))
        return iter(bars[-1][0])

    monkeypatch.setattr(blip, "progress", fake_progress)
    ce, *_ = make(batch_size=2)
    ce.itm_scores(np.array([0, 1, 2, 3, 0]), np.array([0, 1, 2, 3, 4]))
    assert bars == [([0, 2, 4], "BLIP ITM (5 pairs)", True)]
    ce.progress = True
    ce.itm_scores(np.array([0]), np.array([1]))
    assert bars[-1] == ([0], "BLIP ITM (1 pairs)", False)


@pytest.mark.parametrize("direction", ["t2i", "i2t"])
def test_score_pairs_map_queries_and_targets_to_images_and_captions(direction):
    ce, model, proc, _ = make(direction=direction, batch_size=16)
    q = np.array([1, 0, 3, 2]) if direction == "i2t" else np.array([5, 0, 3, 2])
    t = np.array([4, 2, 0, 5]) if direction == "i2t" else np.array([1, 0, 3, 2])
    img, cap = (q, t) if direction == "i2t" else (t, q)
    np.testing.assert_allclose(ce.score_pairs(q, t), reference(img, cap), rtol=1e-6)
    assert sorted(c for c in proc.tokenizer.calls[0][0]) == sorted(f"c{j}" for j in cap)
    assert ce.n_model_calls == 1 and ce.n_pairs_computed == 4
