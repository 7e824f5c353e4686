"""data.models: unit tests of the map from our model names to the ``model`` column of the published NNN tables.

Every expected label is written by hand from the docstring's rules.

Equivalent mutants left (mutation run of this file with tests/test_data_encoders.py and
test_companion_protocol_units.py):
- ``model.rsplit("/", 1)[-1]`` -> ``rsplit("/")`` / ``rsplit("/", 2)`` (2): the last part after the last "/" is the
  same whatever the number of splits.
"""

import pytest

from hubnorm.data import models
from hubnorm.data.models import published_model_name


@pytest.mark.parametrize("model", ["", None, 3, b"ViT-B-32"], ids=["empty", "none", "int", "bytes"])
def test_the_model_must_be_a_non_empty_string(model):
    with pytest.raises(TypeError, match="model must be a non-empty string; got"):
        published_model_name(model)


@pytest.mark.parametrize("model, pretrained, label", [
    # the synthetic generators are calibrated to zero-shot CLIP, whatever the weights say
    ("synthetic", None, "CLIP"),
    ("synthetic-rehearsal", "none", "CLIP"),
    ("synthetic:flickr30k", "laion2b", "CLIP"),
    ("synthetic-other", None, None),
    ("xsynthetic:a", None, None),
    # OpenAI CLIP ViT-B/32
    ("ViT-B-32", None, "CLIP"),
    ("ViT-B-32", "openai", "CLIP"),
    ("ViT-B-32-quickgelu", "openai", "CLIP"),
    ("vit-b-32", "openai", "CLIP"),
    ("openai/clip-vit-base-patch32", None, "CLIP"),
    ("ViT-B-32", "laion2b_s34b_b79k", None),
    ("ViT-B-32", "none", None),
    ("ViT-B-32", "", None),                 # "" is random init too
    ("ViT-B-32", "random", None),
    ("ViT-B-16", "openai", None),
    ("ViT-B-32-256", "openai", None),
    ("openai/clip-vit-base-patch16", None, None),
    # SigLIP v1 (not v2), whatever the weights; random init only from a non-hub name
    ("ViT-B-16-SigLIP", "webli", "SigLIP"),
    ("ViT-B-16-SigLIP", None, "SigLIP"),
    ("hf-hub:timm/ViT-B-16-SigLIP", None, "SigLIP"),
    ("hf-hub:timm/ViT-B-16-SigLIP", "none", "SigLIP"),
    ("ViT-B-16-SigLIP", "none", None),
    ("ViT-B-16-SigLIP2", "webli", None),
    ("hf-hub:timm/ViT-B-16-SigLIP2", None, None),
    # BLIP retrieval checkpoints: only the base ones fine-tuned on COCO / Flickr
    ("Salesforce/blip-itm-base-coco", None, "BLIP ft. COCO"),
    ("blip-itm-base-coco", "main", "BLIP ft. COCO"),
    ("BLIP-ITM-BASE-COCO", None, "BLIP ft. COCO"),
    ("Salesforce/blip-itm-base-flickr", None, "BLIP ft. Flickr"),
    ("Salesforce/blip-itm-base-flickr", "none", None),
    ("Salesforce/blip-itm-base-coco", "random", None),
    ("Salesforce/blip-itm-large-coco", None, None),
    ("Salesforce/blip-siglip-coco", None, None),    # a BLIP name is never read as SigLIP
    ("some/blip-vit-b-32", None, None),             # nor as CLIP
    ("a/b/ViT-B-32", None, "CLIP"),                 # the last path part is the model
    ("ViT-B-32/x", None, None),
    ("RN50", "openai", None),
])
def test_published_model_name(model, pretrained, label):
    assert published_model_name(model, pretrained) == label


def test_every_label_returned_is_a_published_model_of_the_nnn_table():
    from hubnorm_companion.reporting import load_published

    nnn = set(load_published("nnn-chowdhury2024")["model"])
    assert set(models.PUBLISHED_MODELS) == {"CLIP", "SigLIP", "BLIP ft. COCO", "BLIP ft. Flickr"}
    assert set(models.PUBLISHED_MODELS) <= nnn
    assert all(isinstance(v, str) and v for v in models.PUBLISHED_MODELS.values())
    assert models.__all__ == ["published_model_name", "PUBLISHED_MODELS"]
