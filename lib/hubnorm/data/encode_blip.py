"""BLIP image-text contrastive (ITC) embeddings through Hugging Face ``transformers``.

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

import contextlib
from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np
import torch

from .cache import normalize_pretrained

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


class BlipItcEncoder:
    """BLIP ITC dual encoder with the interface of :class:`~hubnorm.data.encode.OpenClipEncoder`.

    Args:
        model: see the module docstring.
        pretrained: ``"hf"`` (weights) or ``"none"`` / None (random init).
        device, precision, batch_size, num_workers, progress, seed: as for ``OpenClipEncoder``.
        max_length: caption tokens (default 35, as BLIP's retrieval evaluation).
    """

    family = "blip"

    def __init__(self, model: str, pretrained: Optional[str] = "hf", *, device: Optional[str] = None,
                 precision: str = "fp32", batch_size: int = 64, num_workers: int = 0, progress: bool = True,
                 seed: int = 0, max_length: int = BLIP_MAX_LENGTH):
        from .encoder_options import PRECISIONS, default_device
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}; got {precision!r}")
        if isinstance(batch_size, bool) or int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1; got {batch_size}")
        tag = normalize_pretrained(pretrained)
        if tag not in PRETRAINED_TAGS:
            raise ValueError(f"BLIP pretrained must be 'hf' (load the checkpoint's weights) or 'none' (random "
                             f"init); got {pretrained!r}")
        if model == BLIP_TINY and tag != "none":
            raise ValueError(f"{BLIP_TINY!r} is a random-init test architecture: use pretrained 'none'")
        self.model_name = model
        self.pretrained = tag
        self.device = device or default_device()
        self.precision = precision
        self.batch_size = int(batch_size)
        self.num_workers = int(num_workers)
        self.progress = progress
        self.seed = seed
        self.max_length = int(max_length)
        self._model = self._processor = None

    # ------------------------------------------------------------------------------------------ build
    def _random_init_config(self):
        from transformers import BlipConfig

        from .blip_offline import small_blip_config
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
            from .blip_offline import offline_processor
            config = self._random_init_config()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed)
                model = BlipForImageTextRetrieval(config)
            processor = offline_processor(config.vision_config.image_size, max_length=self.max_length)
            if len(processor.tokenizer) > config.text_config.vocab_size:
                raise ValueError(f"the offline tokenizer has {len(processor.tokenizer)} tokens but the config only "
                                 f"{config.text_config.vocab_size}")
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(self.precision, torch.float32)
        self._model = model.to(device=self.device, dtype=dtype).eval()
        self._processor = processor
        return self

    @property
    def model(self):
        return self.build()._model

    @property
    def processor(self):
        return self.build()._processor

    def _autocast(self):
        if self.precision in ("amp", "amp_bf16"):
            dtype = torch.bfloat16 if self.precision == "amp_bf16" else torch.float16
            return torch.autocast(device_type=torch.device(self.device).type, dtype=dtype)
        return contextlib.nullcontext()

    # ----------------------------------------------------------------------------------------- encode
    def image_features(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """ITC image embeddings (L2-normalised, model dtype) of preprocessed pixels."""
        m = self.model
        pixel_values = pixel_values.to(self.device, dtype=next(m.parameters()).dtype)
        hidden = m.vision_model(pixel_values=pixel_values).last_hidden_state
        return torch.nn.functional.normalize(m.vision_proj(hidden[:, 0, :]), dim=-1)

    def text_features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """ITC caption embeddings (L2-normalised) of tokenised captions: unimodal text encoder, [CLS] token."""
        m = self.model
        hidden = m.text_encoder(input_ids=input_ids.to(self.device),
                                attention_mask=attention_mask.to(self.device)).last_hidden_state
        return torch.nn.functional.normalize(m.text_proj(hidden[:, 0, :]), dim=-1)

    def tokenize(self, texts: Sequence[str]):
        return self.processor.tokenizer(list(texts), padding="longest", truncation=True,
                                        max_length=self.max_length, return_tensors="pt")

    def pixels(self, images) -> torch.Tensor:
        return self.processor.image_processor(images=list(images), return_tensors="pt")["pixel_values"]

    def encode_images(self, paths: Sequence[Path], desc: str = "images") -> np.ndarray:
        """(n, d) float32, L2-normalised ITC image embeddings, in the order of ``paths``."""
        from tqdm.auto import tqdm
        from PIL import Image
        self.build()
        out: List[np.ndarray] = []
        paths = list(paths)
        with torch.inference_mode(), self._autocast(), tqdm(total=len(paths), desc=desc, unit="img",
                                                             disable=not self.progress) as bar:
            for i in range(0, len(paths), self.batch_size):
                batch = []
                for p in paths[i:i + self.batch_size]:
                    with Image.open(p) as im:
                        batch.append(im.convert("RGB"))
                out.append(_finish(self.image_features(self.pixels(batch))))
                bar.update(len(batch))
        return np.concatenate(out) if out else np.zeros((0, 0), np.float32)

    def encode_texts(self, texts: Sequence[str], desc: str = "captions") -> np.ndarray:
        """(n, d) float32, L2-normalised ITC caption embeddings."""
        from tqdm.auto import tqdm
        self.build()
        out: List[np.ndarray] = []
        texts = list(texts)
        with torch.inference_mode(), self._autocast(), tqdm(total=len(texts), desc=desc, unit="cap",
                                                             disable=not self.progress) as bar:
            for i in range(0, len(texts), self.batch_size):
                tok = self.tokenize(texts[i:i + self.batch_size])
                out.append(_finish(self.text_features(tok["input_ids"], tok["attention_mask"])))
                bar.update(len(tok["input_ids"]))
        return np.concatenate(out) if out else np.zeros((0, 0), np.float32)


def _finish(x: torch.Tensor) -> np.ndarray:
    x = torch.nn.functional.normalize(x.float(), dim=-1)
    return x.cpu().numpy().astype(np.float32, copy=False)


__all__ = ["BlipItcEncoder", "BLIP_MODELS", "BLIP_TINY", "resolve_blip_model"]
