"""Which published rows belong to which model: our model names -> the ``model`` column of
``lib/hubnorm/published/nnn_chowdhury2024.csv`` (NNN Tables 1 and 2)."""

from __future__ import annotations

from typing import Optional

from .cache import normalize_pretrained

#: Published label -> what it is (NNN Table 1 rows that this project can encode).
PUBLISHED_MODELS = {
    "CLIP": "zero-shot OpenAI CLIP ViT-B/32 (open_clip ViT-B-32-quickgelu / openai)",
    "SigLIP": "zero-shot SigLIP (open_clip ViT-B-16-SigLIP / webli and other SigLIP v1 checkpoints)",
    "BLIP ft. COCO": "BLIP base retrieval model fine-tuned on COCO (Salesforce/blip-itm-base-coco), ITC embeddings",
    "BLIP ft. Flickr": "BLIP base retrieval model fine-tuned on Flickr30k (Salesforce/blip-itm-base-flickr), ITC",
}


def published_model_name(model: str, pretrained: Optional[str] = None) -> Optional[str]:
    """The published table's ``model`` value to show beside results of ``model`` (None: no published row).

    * ``ViT-B-32`` / ``ViT-B-32-quickgelu`` with OpenAI weights (or ``pretrained`` not given), and OpenAI's own
      transformers checkpoint ``openai/clip-vit-base-patch32`` -> ``"CLIP"``;
    * open_clip SigLIP (v1) models (``ViT-B-16-SigLIP``, ``hf-hub:timm/ViT-B-16-SigLIP``, ...) -> ``"SigLIP"``;
    * ``blip-itm-base-coco`` / ``Salesforce/blip-itm-base-coco`` -> ``"BLIP ft. COCO"``, ``...-flickr`` ->
      ``"BLIP ft. Flickr"`` (the large BLIP checkpoints have no published row here);
    * ``"synthetic"``, ``"synthetic-rehearsal"`` -> ``"CLIP"``: the generator is calibrated to zero-shot CLIP
      ViT-B/32 (the rows are then a calibration target, not a reproduction);
    * random-init models (``pretrained`` "none") and anything else -> None.
    """
    if not isinstance(model, str) or not model:
        raise TypeError(f"model must be a non-empty string; got {model!r}")
    if model in ("synthetic", "synthetic-rehearsal") or model.startswith("synthetic:"):
        return "CLIP"
    tag = None if pretrained is None else normalize_pretrained(pretrained)
    base = model.rsplit("/", 1)[-1].lower()
    if base.startswith("blip"):
        if tag == "none":
            return None
        if base.startswith("blip-itm-base-coco"):
            return "BLIP ft. COCO"
        if base.startswith("blip-itm-base-flickr"):
            return "BLIP ft. Flickr"
        return None
    if tag == "none" and not model.startswith("hf-hub:"):
        return None
    if "siglip" in base and "siglip2" not in base:
        return "SigLIP"
    if base in ("vit-b-32", "vit-b-32-quickgelu", "clip-vit-base-patch32") and tag in (None, "openai"):
        return "CLIP"
    return None


__all__ = ["published_model_name", "PUBLISHED_MODELS"]
