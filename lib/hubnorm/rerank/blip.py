"""BLIP image-text matching (ITM) as a cross-encoder, through Hugging Face ``transformers``.

Score of a (caption, image) pair = ``softmax(itm_logits)[:, 1]``, the ITM head's probability that the caption
matches the image (``BlipForImageTextRetrieval(..., use_itm_head=True)``).

* :meth:`BlipITMCrossEncoder.from_pretrained` loads ``Salesforce/blip-itm-base-coco`` (or another BLIP ITM
  checkpoint) with its processor: needs the weights locally or network access.
* :meth:`BlipITMCrossEncoder.from_config` builds the same architecture with *random* weights from a
  :class:`~transformers.BlipConfig` (``BlipConfig()`` defaults = the base model: ViT-B/16 at 384 px + BERT-base
  with cross-attention) and, unless given one, an offline processor (:func:`offline_processor`: a
  :class:`~transformers.BlipImageProcessor` with explicit sizes and a WordPiece ``BertTokenizer`` built from a
  generated vocabulary). Random weights give meaningless scores but exactly the compute of the real model:
  use it for tests and latency measurements only.

The image tower runs once per distinct image of a batch and its output is shared by every pair with that image
(exact: the ITM text encoder only reads the image features). Pairs are sorted by image first, so with i2t
reranking (one query image, k captions) the vision transformer runs once per query.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np
import torch

from .._validation import resolve_device
from ..data.blip_offline import offline_processor, small_blip_config  # noqa: F401 (re-exported: they live in data/)
from ..progress import progress
from .base import CrossEncoder

__all__ = ["BlipITMCrossEncoder", "offline_processor", "small_blip_config", "image_key", "text_key",
           "DEFAULT_BLIP_MODEL"]

DEFAULT_BLIP_MODEL = "Salesforce/blip-itm-base-coco"

def image_key(img) -> str:
    """A content key for a PIL image (SHA-1 of mode, size and pixels) or a path (its resolved string)."""
    if isinstance(img, (str, os.PathLike)):
        return "path:" + str(Path(img).resolve())
    h = hashlib.sha1(f"{img.mode}:{img.size}".encode())
    h.update(img.tobytes())
    return "img:" + h.hexdigest()[:20]


def text_key(text: str) -> str:
    """A content key for a caption (SHA-1 of its UTF-8 text)."""
    return "txt:" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:20]


class BlipITMCrossEncoder(CrossEncoder):
    """BLIP ITM over a fixed set of images and captions.

    Args:
        model: a ``BlipForImageTextRetrieval``.
        processor: a ``BlipProcessor`` (image processor + tokenizer).
        images: PIL images or image paths (opened lazily, converted to RGB).
        captions: caption strings.
        direction: ``"t2i"`` (queries = captions, targets = images) or ``"i2t"`` (queries = images).
        model_id: identifies the weights (cache key).
        image_keys / caption_keys: stable ids (default: content hashes, :func:`image_key` / :func:`text_key`).
        batch_size: pairs per forward pass. device: ``None`` = CUDA when available. progress: tqdm bar.
        cache_dir: folder of the on-disk pair-score cache (None: no cache).
    """

    kind = "real"

    def __init__(self, model, processor, images: Sequence, captions: Sequence[str], *, direction: str = "t2i",
                 model_id: str, image_keys: Optional[Sequence[str]] = None,
                 caption_keys: Optional[Sequence[str]] = None, batch_size: int = 32, device=None,
                 progress: bool = True, cache_dir: Union[None, str, os.PathLike] = None,
                 max_length: int = 35):
        if direction not in ("t2i", "i2t"):
            raise ValueError(f"direction must be 't2i' or 'i2t'; got {direction!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer; got {batch_size!r}")
        if not all(isinstance(c, str) for c in captions):
            raise TypeError("captions must be strings")
        if len(images) == 0 or len(captions) == 0:
            raise ValueError("need at least one image and one caption")
        self.images = list(images)
        self.captions = list(captions)
        self.direction = direction
        self.model_id = model_id
        self.batch_size = batch_size
        self.progress = progress
        self.max_length = max_length
        self.device = resolve_device(device)
        self.model = model.to(self.device).eval()
        self.processor = processor
        ik = [image_key(im) for im in self.images] if image_keys is None else list(image_keys)
        ck = [text_key(c) for c in self.captions] if caption_keys is None else list(caption_keys)
        if len(ik) != len(self.images) or len(ck) != len(self.captions):
            raise ValueError("image_keys / caption_keys must have one entry per image / caption")
        qk, tk = (ck, ik) if direction == "t2i" else (ik, ck)
        super().__init__(qk, tk, cache_dir=cache_dir)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_pretrained(cls, images, captions, name: str = DEFAULT_BLIP_MODEL, **kwargs) -> "BlipITMCrossEncoder":
        """Real weights and processor from the Hub or a local folder (``name``)."""
        from transformers import BlipForImageTextRetrieval, BlipProcessor

        model = BlipForImageTextRetrieval.from_pretrained(name)
        processor = BlipProcessor.from_pretrained(name)
        return cls(model, processor, images, captions, model_id=f"{name}", **kwargs)

    @classmethod
    def from_config(cls, images, captions, config=None, *, seed: int = 0, processor=None,
                    **kwargs) -> "BlipITMCrossEncoder":
        """Random weights (seeded) for ``config`` (default ``BlipConfig()`` = the base model) and, unless given,
        :func:`offline_processor` sized to the config. Scores are meaningless: tests and latency only."""
        from transformers import BlipConfig, BlipForImageTextRetrieval

        config = BlipConfig() if config is None else config
        if processor is None:
            processor = offline_processor(config.vision_config.image_size)
        if len(processor.tokenizer) > config.text_config.vocab_size:
            raise ValueError(f"the tokenizer has {len(processor.tokenizer)} tokens but the config only "
                             f"{config.text_config.vocab_size}: enlarge text_config.vocab_size")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = BlipForImageTextRetrieval(config)
        cfg_hash = hashlib.sha1(config.to_json_string(use_diff=False).encode()).hexdigest()[:12]
        proc_hash = getattr(processor, "hubnorm_fingerprint", type(processor).__name__)
        model_id = f"blip-itm-random-init:cfg={cfg_hash}:proc={proc_hash}:seed={seed}"
        return cls(model, processor, images, captions, model_id=model_id, **kwargs)

    # ------------------------------------------------------------------ scoring
    def _image(self, i: int):
        im = self.images[i]
        if isinstance(im, (str, os.PathLike)):
            from PIL import Image
            with Image.open(im) as f:
                im = f.convert("RGB")
        elif getattr(im, "mode", "RGB") != "RGB":
            im = im.convert("RGB")
        return im

    @torch.inference_mode()
    def itm_scores(self, image_idx: np.ndarray, caption_idx: np.ndarray) -> np.ndarray:
        """ITM match probabilities of (image, caption) index pairs, batched (no cache)."""
        image_idx = np.asarray(image_idx, dtype=np.int64)
        caption_idx = np.asarray(caption_idx, dtype=np.int64)
        order = np.lexsort((caption_idx, image_idx))  # group pairs by image: the vision tower runs once per image
        out = np.empty(order.size, dtype=np.float64)
        model, dev = self.model, self.device
        dtype = next(model.parameters()).dtype
        starts = range(0, order.size, self.batch_size)
        for s0 in progress(starts, desc=f"BLIP ITM ({order.size} pairs)", disable=not self.progress):
            sel = order[s0:s0 + self.batch_size]
            imgs, inv = np.unique(image_idx[sel], return_inverse=True)
            pix = self.processor.image_processor(images=[self._image(i) for i in imgs.tolist()],
                                                 return_tensors="pt")["pixel_values"].to(dev, dtype)
            img_emb = model.vision_model(pixel_values=pix).last_hidden_state
            img_emb = img_emb[torch.from_numpy(inv.reshape(-1)).to(dev)]
            tok = self.processor.tokenizer([self.captions[j] for j in caption_idx[sel].tolist()], padding="longest",
                                           truncation=True, max_length=self.max_length, return_tensors="pt")
            hidden = model.text_encoder(
                input_ids=tok["input_ids"].to(dev), attention_mask=tok["attention_mask"].to(dev),
                encoder_hidden_states=img_emb,
                encoder_attention_mask=torch.ones(img_emb.shape[:-1], dtype=torch.long, device=dev),
            ).last_hidden_state
            logits = model.itm_head(hidden[:, 0, :]).float()
            out[sel] = torch.softmax(logits, dim=-1)[:, 1].cpu().numpy()
        return out

    def _score_uncached(self, query_ids: np.ndarray, target_ids: np.ndarray) -> np.ndarray:
        if self.direction == "t2i":
            return self.itm_scores(target_ids, query_ids)
        return self.itm_scores(query_ids, target_ids)
