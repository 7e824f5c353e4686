"""BLIP family: image-text contrastive (ITC) embeddings through Hugging Face ``transformers``
(``get_encoder("blip:<model>:<hf|none>")``).

BLIP's retrieval checkpoints (``Salesforce/blip-itm-{base,large}-{coco,flickr}``, class
``BlipForImageTextRetrieval``) score a pair two ways: the ITM cross-encoder head (``use_itm_head=True``, used by
:mod:`hubnorm.rerank.blip`) and the ITC dual encoder (``use_itm_head=False``), which is what a bi-encoder
retrieval system (and NNN Table 1's BLIP rows) uses. ITC embeddings (Li et al. 2022, BLIP, Sec. 3.2 "ITC"):

* image: ``normalize(vision_proj(vision_model(pixels).last_hidden_state[:, 0]))``;
* caption: ``normalize(text_proj(text_encoder(ids, mask).last_hidden_state[:, 0]))`` (unimodal text encoder, no
  cross-attention, [CLS] token);

so ``image_embedding @ caption_embedding`` equals ``BlipForImageTextRetrieval(..., use_itm_head=False).itm_score``
(checked to 1e-5 in ``tests/test_data_encoders.py``).

Model names (``model`` argument): a Hugging Face id (``"Salesforce/blip-itm-base-coco"``), its short form
(``"blip-itm-base-coco"``, see :data:`BLIP_MODELS`), a local folder saved with ``save_pretrained`` (model +
processor), or ``"blip-itm-tiny"``: a tiny random-init test architecture (:func:`hubnorm.data.blip_offline.small_blip_config`).
``pretrained``: ``"hf"`` loads the weights (Hugging Face hub cache or the local folder; network needed the first
time), ``"none"`` builds the architecture with random weights (seeded) and an offline tokenizer
(:func:`hubnorm.data.blip_offline.offline_processor`): meaningless embeddings, for tests and timing only.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Optional, Sequence

import torch

from ..cache import library_versions, normalize_pretrained
from .base import Encoder

#: Short names of the BLIP retrieval checkpoints on the Hugging Face hub.
BLIP_MODELS = {
    "blip-itm-base-coco": "Salesforce/blip-itm-base-coco",
    "blip-itm-base-flickr": "Salesforce/blip-itm-base-flickr",
    "blip-itm-large-coco": "Salesforce/blip-itm-large-coco",
    "blip-itm-large-flickr": "Salesforce/blip-itm-large-flickr",
}
#: Test architecture (random init only).
BLIP_TINY = "blip-itm-tiny"
#: Caption length of BLIP's retrieval evaluation (``max_length=35`` in its tokenizer call).
BLIP_MAX_LENGTH = 35
PRETRAINED_TAGS = ("hf", "none")


def resolve_blip_model(model: str) -> str:
    """Short name -> Hugging Face id; ids, local folders and :data:`BLIP_TINY` are returned unchanged."""
    return BLIP_MODELS.get(model, model)


class BlipItcEncoder(Encoder):
    """BLIP ITC dual encoder.

    Args:
        model: see the module docstring.
        pretrained: ``"hf"`` (weights) or ``"none"`` / None (random init).
        device, precision, batch_size, num_workers, progress, seed: see :class:`~hubnorm.data.encoders.Encoder`.
        max_length: caption tokens (default 35, as BLIP's retrieval evaluation).
    """

    family = "blip"

    def __init__(self, model: str, pretrained: Optional[str] = "hf", *, max_length: int = BLIP_MAX_LENGTH,
                 **kwargs):
        tag = normalize_pretrained(pretrained)
        if tag not in PRETRAINED_TAGS:
            raise ValueError(f"BLIP pretrained must be 'hf' (load the checkpoint's weights) or 'none' (random "
                             f"init); got {pretrained!r}")
        if model == BLIP_TINY and tag != "none":
            raise ValueError(f"{BLIP_TINY!r} is a random-init test architecture: use pretrained 'none'")
        super().__init__(model, tag, **kwargs)
        self.max_length = int(max_length)
        self._processor = None

    def _random_init_config(self):
        from transformers import BlipConfig

        from ..blip_offline import small_blip_config
        if self.model_name == BLIP_TINY:
            return small_blip_config(vocab_size=192)
        local = Path(self.model_name)
        if (local / "config.json").exists():
            return BlipConfig.from_pretrained(str(local))
        hub_id = resolve_blip_model(self.model_name)
        if hub_id.split("/")[-1].startswith("blip-itm-base"):
            return BlipConfig()  # the transformers defaults are BLIP base (ViT-B/16 at 384 px + BERT-base)
        raise ValueError(f"random init of {self.model_name!r} needs its config: use a 'blip-itm-base-*' name, "
                         f"{BLIP_TINY!r}, or a local folder with config.json (or pretrained 'hf')")

    def build(self):
        if self._model is not None:
            return self
        try:
            from transformers import BlipForImageTextRetrieval, BlipProcessor
        except ImportError as exc:  # pragma: no cover
            raise ImportError("BLIP encoding needs transformers: pip install 'hubnorm[rerank]'") from exc
        if self.pretrained == "hf":
            name = resolve_blip_model(self.model_name)
            try:
                model = BlipForImageTextRetrieval.from_pretrained(name)
                processor = BlipProcessor.from_pretrained(name)
            except OSError as exc:
                raise RuntimeError(
                    f"could not load the BLIP checkpoint {name!r}: {exc}. The weights are downloaded once from the "
                    "Hugging Face hub (cache: HF_HOME); offline, copy the cache or a save_pretrained folder here and "
                    "pass its path as the model.") from exc
        else:
            from ..blip_offline import offline_processor
            config = self._random_init_config()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed)
                model = BlipForImageTextRetrieval(config)
            processor = offline_processor(config.vision_config.image_size, max_length=self.max_length)
            if len(processor.tokenizer) > config.text_config.vocab_size:
                raise ValueError(f"the offline tokenizer has {len(processor.tokenizer)} tokens but the config only "
                                 f"{config.text_config.vocab_size}")
        self._model = model.to(device=self.device, dtype=self.model_dtype).eval()
        self._processor = processor
        return self

    @property
    def processor(self):
        return self.build()._processor

    def image_transform(self):
        return functools.partial(_pixels, self.processor.image_processor)

    def image_features(self, pixels: torch.Tensor) -> torch.Tensor:
        """ITC image embeddings (L2-normalised, model dtype) of preprocessed pixels."""
        m = self.model
        pixels = pixels.to(self.device, dtype=next(m.parameters()).dtype)
        hidden = m.vision_model(pixel_values=pixels).last_hidden_state
        return torch.nn.functional.normalize(m.vision_proj(hidden[:, 0, :]), dim=-1)

    def text_features(self, texts: Sequence[str]) -> torch.Tensor:
        """ITC caption embeddings (L2-normalised) of captions: unimodal text encoder, [CLS] token."""
        m = self.model
        tok = self.processor.tokenizer(list(texts), padding="longest", truncation=True, max_length=self.max_length,
                                       return_tensors="pt")
        hidden = m.text_encoder(input_ids=tok["input_ids"].to(self.device),
                                attention_mask=tok["attention_mask"].to(self.device)).last_hidden_state
        return torch.nn.functional.normalize(m.text_proj(hidden[:, 0, :]), dim=-1)

    def options(self) -> dict:
        out = {"max_length": self.max_length}
        if self.pretrained == "none":
            out["seed"] = self.seed
        return out

    def versions(self) -> dict:
        return library_versions("blip")


def _pixels(image_processor, image) -> torch.Tensor:
    return image_processor(images=image, return_tensors="pt")["pixel_values"][0]


__all__ = ["BlipItcEncoder", "BLIP_MODELS", "BLIP_TINY", "BLIP_MAX_LENGTH", "resolve_blip_model"]
