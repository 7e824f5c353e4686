"""open_clip family: CLIP, SigLIP, ... (``get_encoder("open_clip:<model>:<pretrained>")``).

Model names follow open_clip (``open_clip.list_models()``); use the ``-quickgelu`` variants with OpenAI weights,
e.g. ``("ViT-B-32-quickgelu", "openai")``. ``hf-hub:org/name`` models load from the Hugging Face hub (network
needed the first time; pass ``pretrained=None``). ``pretrained=None`` gives a randomly initialised model
(seeded, so repeated runs agree): useful offline and in tests. SigLIP: ``("ViT-B-16-SigLIP", "webli")`` (weights and
tokenizer from the Hugging Face hub on first use). ``"hubnorm-tiny-sigmoid"`` is a tiny random-init test
architecture shaped like SigLIP (timm ViT with attention-pool head, non-causal text tower, learned logit bias) that
uses open_clip's bundled CLIP tokenizer, so it builds offline (``lib/hubnorm/data/model_configs``).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional

import torch

from ..cache import library_versions, normalize_pretrained
from .base import Encoder

#: open_clip model configs shipped with hubnorm (test architectures), registered on first use.
HUBNORM_OPEN_CLIP_CONFIGS = Path(__file__).resolve().parents[1] / "model_configs"


class OpenClipEncoder(Encoder):
    """Lazily built open_clip model + preprocessing + tokenizer.

    Args:
        model: open_clip model name (``"ViT-B-32-quickgelu"``, ``"hf-hub:timm/ViT-B-16-SigLIP"``, ...).
        pretrained: pretrained tag (``"openai"``, ``"laion2b_s34b_b79k"``), a checkpoint path, or None for random init.
        device, precision, batch_size, num_workers, progress, seed: see :class:`~hubnorm.data.encoders.Encoder`.
    """

    family = "open_clip"

    def __init__(self, model: str, pretrained: Optional[str] = None, **kwargs):
        tag = normalize_pretrained(pretrained)
        super().__init__(model, None if tag == "none" else pretrained, **kwargs)
        self._preprocess = self._tokenizer = None

    def build(self):
        if self._model is not None:
            return self
        try:
            import open_clip
        except ImportError as exc:  # pragma: no cover
            raise ImportError("encoding needs open_clip: pip install 'hubnorm[data]' (open_clip_torch)") from exc
        name = self.model_name
        if name.startswith("hubnorm-") and name not in open_clip.list_models():
            open_clip.add_model_config(HUBNORM_OPEN_CLIP_CONFIGS)
        if not name.startswith("hf-hub:") and name not in open_clip.list_models():
            raise ValueError(f"unknown open_clip model {name!r}; see open_clip.list_models() (OpenAI weights: use "
                             "the '-quickgelu' names, e.g. ViT-B-32-quickgelu with pretrained 'openai')")
        if self.pretrained is not None and not name.startswith("hf-hub:"):
            tags = open_clip.list_pretrained_tags_by_model(name)
            if self.pretrained not in tags and not Path(self.pretrained).exists():
                raise ValueError(f"model {name!r} has no pretrained tag {self.pretrained!r}; available: {tags} "
                                 "(or a path to a checkpoint file)")
        precision = {"amp": "fp32", "amp_bf16": "fp32"}.get(self.precision, self.precision)
        rng = torch.random.fork_rng(devices=[]) if self.pretrained is None else contextlib.nullcontext()
        try:
            with rng:
                if self.pretrained is None:
                    torch.manual_seed(self.seed)
                model, _, preprocess = open_clip.create_model_and_transforms(
                    name, pretrained=self.pretrained, precision=precision, device=self.device)
        except Exception as exc:
            if self.pretrained is not None and _looks_offline(exc):
                raise RuntimeError(
                    f"could not load the pretrained weights {name!r}/{self.pretrained!r}: {exc}. The weights are "
                    "downloaded once by open_clip (Hugging Face hub cache, see HF_HOME); this machine seems offline. "
                    "Download them on a machine with network access or copy the HF cache here, then rerun."
                ) from exc
            raise
        model.eval()
        self._model, self._preprocess = model, preprocess
        self._tokenizer = open_clip.get_tokenizer(name)
        return self

    def image_transform(self):
        return self._preprocess

    def image_features(self, pixels: torch.Tensor) -> torch.Tensor:
        pixels = pixels.to(self.device, non_blocking=True)
        if self.precision in ("fp16", "bf16"):
            pixels = pixels.to(self.model_dtype)
        return self._model.encode_image(pixels)

    def text_features(self, texts) -> torch.Tensor:
        return self._model.encode_text(self._tokenizer(texts).to(self.device))

    def options(self) -> dict:
        return {"seed": self.seed} if self.pretrained is None else {}

    def versions(self) -> dict:
        return library_versions("open_clip")


def _looks_offline(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {exc}".lower()
    return any(s in text for s in ("connection", "offline", "resolve", "timed out", "max retries", "network",
                                   "localentrynotfound", "couldn't connect", "name or service"))


__all__ = ["OpenClipEncoder", "HUBNORM_OPEN_CLIP_CONFIGS"]
