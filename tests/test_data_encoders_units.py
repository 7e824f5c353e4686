"""Unit checks of the package ``hubnorm.data.encoders`` (its ``__init__``): the family table behind
``encoder_class``, ``infer_family`` on names, hub / local-dir prefixes and local folders (with a readable, an
unreadable and a foreign ``config.json``), ``check_family``, ``parse_encoder_spec`` on every shape of spec and on
each malformed one by its own message, ``get_encoder``'s routing (spec string, model + pretrained, explicit family,
the sentence family without a tag) with the family classes replaced by recorders, and the lazy module attributes.

No model is built: ``get_encoder`` is checked through a recording ``encoder_class``.

Mutation run of ``data.encoders.__init__`` (``--tests tests/test_data_encoders.py tests/test_data_pipeline_units.py``
[+ this file]): 60 -> 167 of 169 killed (36% -> 99%; the baseline left 37 mutants no test reached, among them all of
``parse_encoder_spec``). Equivalent mutants left:
- ``model.rsplit("/", 1)`` -> ``model.rsplit("/", 2)`` / ``model.rsplit("/")`` in ``infer_family`` (2): the part
  after the last "/" is the same whatever the number of splits.
"""

from __future__ import annotations

import json

import pytest

import hubnorm.data.encoders as encoders
from hubnorm.data.encoders import (ENCODER_FAMILIES, check_family, encoder_class, get_encoder, infer_family,
                                   parse_encoder_spec)


# ------------------------------------------------------------------------------------------- encoder_class
def test_encoder_class_of_each_family():
    from hubnorm.data.encoders.blip import BlipItcEncoder
    from hubnorm.data.encoders.openclip import OpenClipEncoder
    from hubnorm.data.encoders.sentence import SentenceEncoder

    assert encoder_class("open_clip") is OpenClipEncoder
    assert encoder_class("blip") is BlipItcEncoder
    assert encoder_class("sentence") is SentenceEncoder


@pytest.mark.parametrize("family", ["clip", "OPEN_CLIP", "", "callable", None])
def test_encoder_class_of_an_unknown_family(family):
    with pytest.raises(ValueError, match=r"encoder family must be one of \('open_clip', 'blip', 'sentence'\); "
                                         rf"got {family!r}"):
        encoder_class(family)


# -------------------------------------------------------------------------------------------- infer_family
@pytest.mark.parametrize("model", ["", None, 3, b"blip"], ids=["empty", "none", "int", "bytes"])
def test_infer_family_needs_a_non_empty_string(model):
    with pytest.raises(TypeError, match=rf"model must be a non-empty string; got {model!r}"):
        infer_family(model)


@pytest.mark.parametrize("model, family", [
    ("blip-itm-base-coco", "blip"),
    ("Salesforce/blip-itm-base-coco", "blip"),
    ("BLIP-ITM-tiny", "blip"),                        # case-insensitive
    ("org/sub/blip-itm", "blip"),                     # only the last part counts ...
    ("blip-org/ViT-B-32", "open_clip"),               # ... not an earlier one
    ("org/blip", "blip"),
    ("xblip-itm", "open_clip"),
    ("ViT-B-32-quickgelu", "open_clip"),
    ("hubnorm-tiny-sigmoid", "open_clip"),
    ("hf-hub:Salesforce/blip-itm-base-coco", "open_clip"),   # the prefixes are open_clip's, whatever follows
    ("local-dir:/models/blip-itm", "open_clip"),
])
def test_infer_family_from_the_name(model, family):
    assert infer_family(model) == family


def _folder(tmp_path, name, config):
    folder = tmp_path / name
    folder.mkdir()
    if config is not None:
        (folder / "config.json").write_text(config)
    return str(folder)


def test_infer_family_of_local_folders_reads_their_config(tmp_path):
    # the folder's config decides, not its name
    assert infer_family(_folder(tmp_path, "my-model", json.dumps({"model_type": "blip"}))) == "blip"
    assert infer_family(_folder(tmp_path, "blip-named", json.dumps({"model_type": "clip"}))) == "open_clip"
    assert infer_family(_folder(tmp_path, "blip-untyped", json.dumps({"other": "blip"}))) == "open_clip"
    # an unreadable config is open_clip, whatever the name says
    assert infer_family(_folder(tmp_path, "blip-broken", "{not json")) == "open_clip"
    unreadable = tmp_path / "blip-dir-config"
    (unreadable / "config.json").mkdir(parents=True)          # reading a folder is an OSError
    assert infer_family(str(unreadable)) == "open_clip"
    # a folder without a config falls back to the name
    assert infer_family(_folder(tmp_path, "blip-noconfig", None)) == "blip"


# -------------------------------------------------------------------------------------------- check_family
def test_check_family():
    assert ENCODER_FAMILIES == ("open_clip", "blip")
    assert check_family("open_clip", "blip-itm-base-coco") == "open_clip"     # a given family wins over the name
    assert check_family("blip", "ViT-B-32") == "blip"
    assert check_family(None, "Salesforce/blip-itm-base-coco") == "blip"
    assert check_family(None, "ViT-B-32") == "open_clip"
    for bad in ("sentence", "clip", ""):
        with pytest.raises(ValueError, match=rf"encoder family must be one of \('open_clip', 'blip'\); got {bad!r}"):
            check_family(bad, "ViT-B-32")


# -------------------------------------------------------------------------------------- parse_encoder_spec
@pytest.mark.parametrize("spec, family, model, pretrained", [
    ("open_clip:ViT-B-32-quickgelu:openai", "open_clip", "ViT-B-32-quickgelu", "openai"),
    ("open_clip:hf-hub:timm/ViT-B-16-SigLIP:none", "open_clip", "hf-hub:timm/ViT-B-16-SigLIP", "none"),
    ("blip:blip-itm-base-coco:hf", "blip", "blip-itm-base-coco", "hf"),
    ("blip:m:", "blip", "m", ""),
    ("sentence:all-MiniLM-L6-v2", "sentence", "all-MiniLM-L6-v2", None),
    ("sentence:/path/with:colon", "sentence", "/path/with:colon", None),
])
def test_parse_encoder_spec(spec, family, model, pretrained):
    assert parse_encoder_spec(spec) == {"family": family, "model": model, "pretrained": pretrained}


@pytest.mark.parametrize("spec", ["ViT-B-32", "clip:ViT-B-32:openai", "open_clip:", "sentence:", ":m:p", None, 3])
def test_parse_encoder_spec_of_a_malformed_spec(spec):
    with pytest.raises(ValueError, match=r"encoder spec must look like '<family>:<model>\[:<pretrained>\]' with a "
                                         r"family among \('open_clip', 'blip', 'sentence'\) \(e\.g\. "
                                         r"'open_clip:ViT-B-32-quickgelu:openai', 'sentence:all-MiniLM-L6-v2'\); "
                                         rf"got {spec!r}"):
        parse_encoder_spec(spec)


@pytest.mark.parametrize("spec", ["open_clip:ViT-B-32", "blip::hf", "open_clip::"])
def test_parse_encoder_spec_without_a_pretrained_tag(spec):
    with pytest.raises(ValueError, match=rf"encoder spec {spec!r} needs '<family>:<model>:<pretrained>' \(pretrained "
                                         r"'none' for a randomly initialised model\)"):
        parse_encoder_spec(spec)


# --------------------------------------------------------------------------------------------- get_encoder
@pytest.fixture
def built(monkeypatch):
    """``encoder_class`` replaced: each family's "class" records ``(family, args, kwargs)``."""
    calls = []

    def fake_class(family):
        if family not in ("open_clip", "blip", "sentence"):
            raise AssertionError(f"no family {family!r}")
        return lambda *args, **kwargs: calls.append((family, args, kwargs)) or calls[-1]

    monkeypatch.setattr(encoders, "encoder_class", fake_class)
    return calls


def test_get_encoder_from_a_spec(built):
    assert get_encoder("open_clip:hf-hub:timm/X:none", device="cpu", batch_size=3) == (
        "open_clip", ("hf-hub:timm/X", "none"), {"device": "cpu", "batch_size": 3})
    assert get_encoder("blip:blip-itm-tiny:none") == ("blip", ("blip-itm-tiny", "none"), {})
    # the sentence family takes no pretrained argument
    assert get_encoder("sentence:all-MiniLM-L6-v2", chunk=7) == ("sentence", ("all-MiniLM-L6-v2",), {"chunk": 7})
    assert len(built) == 3


def test_get_encoder_from_model_and_pretrained(built):
    assert get_encoder("ViT-B-32", "openai") == ("open_clip", ("ViT-B-32", "openai"), {})
    assert get_encoder("Salesforce/blip-itm-base-coco") == ("blip", ("Salesforce/blip-itm-base-coco", None), {})
    assert get_encoder("ViT-B-32", family="blip", seed=2) == ("blip", ("ViT-B-32", None), {"seed": 2})
    # a spec-shaped name is read as a spec only without pretrained and without family
    assert get_encoder("blip:x:y", "p") == ("blip", ("blip:x:y", "p"), {})
    assert get_encoder("open_clip:M:P", family="blip") == ("blip", ("open_clip:M:P", None), {})
    assert get_encoder("vit:b:openai") == ("open_clip", ("vit:b:openai", None), {})   # not a family: a model name


def test_get_encoder_errors(built):
    with pytest.raises(ValueError, match=r"encoder family must be one of \('open_clip', 'blip'\); got 'sentence'"):
        get_encoder("all-MiniLM-L6-v2", family="sentence")
    with pytest.raises(TypeError, match=r"model must be a non-empty string; got 3"):
        get_encoder(3)
    with pytest.raises(ValueError, match=r"encoder spec 'open_clip:ViT-B-32' needs"):
        get_encoder("open_clip:ViT-B-32")
    assert built == []


def test_get_encoder_builds_the_real_class():
    enc = get_encoder("open_clip:ViT-B-32:none", device="cpu", batch_size=5, progress=False)
    assert type(enc) is encoder_class("open_clip") and enc._model is None          # lazily built: nothing loaded
    assert (enc.model_name, enc.pretrained, enc.batch_size, enc.progress) == ("ViT-B-32", None, 5, False)


# ----------------------------------------------------------------------------------------- lazy attributes
def test_lazy_attributes():
    from hubnorm.data.encoders import sentence

    assert encoders.OpenClipEncoder is encoder_class("open_clip")
    assert encoders.BlipItcEncoder is encoder_class("blip")
    assert encoders.SentenceEncoder is encoder_class("sentence")
    assert encoders.load_text_encoder is sentence.load_text_encoder
    assert encoders.encode_texts is sentence.encode_texts
    assert encoders.DEFAULT_TEXT_ENCODER == "all-MiniLM-L6-v2"
    with pytest.raises(AttributeError, match=r"^NoSuchEncoder$"):
        encoders.NoSuchEncoder
    assert not hasattr(encoders, "sentence_encoder")
