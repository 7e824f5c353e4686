"""Encoders of every family behind one interface (:class:`Encoder`) and one cache.

==============  =======================================  ==============================================
family          encodes                                  class
==============  =======================================  ==============================================
``open_clip``   images + captions (CLIP, SigLIP, ...)    :class:`~.openclip.OpenClipEncoder`
``blip``        images + captions (BLIP ITC)             :class:`~.blip.BlipItcEncoder`
``sentence``    texts (RSC relevance's ``g``)            :class:`~.sentence.SentenceEncoder`
==============  =======================================  ==============================================

One way to get one::

    get_encoder("open_clip:ViT-B-32-quickgelu:openai")
    get_encoder("blip:blip-itm-base-coco:hf")
    get_encoder("sentence:all-MiniLM-L6-v2")
    get_encoder("ViT-B-32-quickgelu", "openai")      # model + pretrained: the family inferred from the name

and one way to encode, cached or not: ``enc.encode(items, "image" | "text", cache=True)`` (content-addressed:
:mod:`hubnorm.data.cache`). Every family's outputs are (n, d) float32 rows with unit L2 norm.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, Optional, Type

from .base import PRECISIONS, CallableTextEncoder, Encoder, FileChangedError, default_device

#: Image-text families (what ``python -m hubnorm.data encode`` accepts as ``--family``).
ENCODER_FAMILIES = ("open_clip", "blip")
#: Every family with its module and class (imported when first used: open_clip and transformers are heavy).
_FAMILIES = {"open_clip": ("openclip", "OpenClipEncoder"), "blip": ("blip", "BlipItcEncoder"),
             "sentence": ("sentence", "SentenceEncoder")}


def encoder_class(family: str) -> Type[Encoder]:
    """The :class:`Encoder` subclass of ``family``."""
    if family not in _FAMILIES:
        raise ValueError(f"encoder family must be one of {tuple(_FAMILIES)}; got {family!r}")
    import importlib
    module, cls = _FAMILIES[family]
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)


def infer_family(model: str) -> str:
    """``"blip"`` for BLIP names (``blip-itm-base-coco``, ``Salesforce/blip-itm-base-coco``, ``blip-itm-tiny``) and
    local folders whose ``config.json`` says ``model_type: blip``; ``"open_clip"`` otherwise."""
    if not isinstance(model, str) or not model:
        raise TypeError(f"model must be a non-empty string; got {model!r}")
    if model.startswith(("hf-hub:", "local-dir:")):
        return "open_clip"
    local = Path(model) / "config.json"
    if local.exists():
        try:
            return "blip" if json.loads(local.read_text()).get("model_type") == "blip" else "open_clip"
        except (OSError, ValueError):
            return "open_clip"
    return "blip" if model.rsplit("/", 1)[-1].lower().startswith("blip") else "open_clip"


def check_family(family: Optional[str], model: str) -> str:
    """An image-text ``family`` validated, or inferred from ``model`` when None."""
    if family is None:
        return infer_family(model)
    if family not in ENCODER_FAMILIES:
        raise ValueError(f"encoder family must be one of {ENCODER_FAMILIES}; got {family!r}")
    return family


def parse_encoder_spec(spec: str) -> Dict[str, Optional[str]]:
    """``"open_clip:ViT-B-32-quickgelu:openai"`` -> family, model, pretrained. The model may contain colons
    (``"open_clip:hf-hub:timm/ViT-B-16-SigLIP:none"``): the family is the first field, the pretrained tag the last;
    the sentence family has no tag (``"sentence:all-MiniLM-L6-v2"``, ``"sentence:/path/to/folder"``)."""
    family, sep, rest = str(spec).partition(":")
    if not sep or family not in _FAMILIES or not rest:
        raise ValueError(f"encoder spec must look like '<family>:<model>[:<pretrained>]' with a family among "
                         f"{tuple(_FAMILIES)} (e.g. 'open_clip:ViT-B-32-quickgelu:openai', "
                         f"'sentence:all-MiniLM-L6-v2'); got {spec!r}")
    if family == "sentence":
        return {"family": family, "model": rest, "pretrained": None}
    model, sep, pretrained = rest.rpartition(":")
    if not sep or not model:
        raise ValueError(f"encoder spec {spec!r} needs '<family>:<model>:<pretrained>' (pretrained 'none' for a "
                         "randomly initialised model)")
    return {"family": family, "model": model, "pretrained": pretrained}


def get_encoder(model: str, pretrained: Optional[str] = None, *, family: Optional[str] = None, **kwargs) -> Encoder:
    """An encoder: ``get_encoder("<family>:<model>[:<pretrained>]")`` or ``get_encoder(model, pretrained,
    family=None)`` (image-text families; ``family`` defaults to :func:`infer_family`). ``kwargs`` go to the
    encoder (device, precision, batch_size, num_workers, progress, seed; max_length for BLIP; chunk for sentence)."""
    head = model.partition(":")[0] if isinstance(model, str) else None
    if head in _FAMILIES and pretrained is None and family is None:
        parsed = parse_encoder_spec(model)
        family, model, pretrained = parsed["family"], parsed["model"], parsed["pretrained"]
        if family == "sentence":
            return encoder_class(family)(model, **kwargs)
    else:
        family = check_family(family, model)
    return encoder_class(family)(model, pretrained, **kwargs)


def __getattr__(name):  # the family classes import torch-heavy open_clip / transformers lazily
    lazy = {"OpenClipEncoder": "open_clip", "BlipItcEncoder": "blip", "SentenceEncoder": "sentence"}
    if name in lazy:
        return encoder_class(lazy[name])
    if name in ("load_text_encoder", "DEFAULT_TEXT_ENCODER", "encode_texts"):
        from . import sentence
        return getattr(sentence, name)
    raise AttributeError(name)


__all__ = ["Encoder", "CallableTextEncoder", "FileChangedError", "PRECISIONS", "ENCODER_FAMILIES", "default_device",
           "encoder_class", "infer_family", "check_family", "parse_encoder_spec", "get_encoder", "OpenClipEncoder",
           "BlipItcEncoder", "SentenceEncoder", "load_text_encoder", "DEFAULT_TEXT_ENCODER", "encode_texts"]
