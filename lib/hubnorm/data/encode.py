"""Encoders: images and captions -> L2-normalised float32 embeddings. Families: ``"open_clip"`` (CLIP, SigLIP,
... through open_clip: :class:`OpenClipEncoder`) and ``"blip"`` (BLIP ITC through transformers:
:class:`~hubnorm.data.encode_blip.BlipItcEncoder`); :func:`get_encoder` picks one from the model name.

open_clip:

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
from typing import List, Optional, Sequence

import numpy as np
import torch

from .._validation import resolve_device
from .cache import normalize_pretrained
from .encoder_options import PRECISIONS, default_device  # noqa: F401 (re-exported)

ENCODER_FAMILIES = ("open_clip", "blip")
#: open_clip model configs shipped with hubnorm (test architectures), registered on first use.
HUBNORM_OPEN_CLIP_CONFIGS = Path(__file__).resolve().parent / "model_configs"


def infer_family(model: str) -> str:
    """``"blip"`` for BLIP names (``blip-itm-base-coco``, ``Salesforce/blip-itm-base-coco``, ``blip-itm-tiny``) and
    local folders whose ``config.json`` says ``model_type: blip``; ``"open_clip"`` otherwise."""
    if not isinstance(model, str) or not model:
        raise TypeError(f"model must be a non-empty string; got {model!r}")
    if model.startswith(("hf-hub:", "local-dir:")):
        return "open_clip"
    local = Path(model) / "config.json"
    if local.exists():
        import json
        try:
            return "blip" if json.loads(local.read_text()).get("model_type") == "blip" else "open_clip"
        except (OSError, ValueError):
            return "open_clip"
    return "blip" if model.rsplit("/", 1)[-1].lower().startswith("blip") else "open_clip"


def check_family(family: Optional[str], model: str) -> str:
    """``family`` validated, or inferred from ``model`` when None."""
    if family is None:
        return infer_family(model)
    if family not in ENCODER_FAMILIES:
        raise ValueError(f"encoder family must be one of {ENCODER_FAMILIES}; got {family!r}")
    return family


def get_encoder(model: str, pretrained: Optional[str] = None, *, family: Optional[str] = None, **kwargs):
    """An encoder for ``model``: :class:`OpenClipEncoder` or :class:`~hubnorm.data.encode_blip.BlipItcEncoder`.

    ``family`` (``"open_clip"`` / ``"blip"``) defaults to :func:`infer_family`; ``kwargs`` go to the encoder
    (device, precision, batch_size, num_workers, progress, seed)."""
    family = check_family(family, model)
    if family == "blip":
        from .encode_blip import BlipItcEncoder
        return BlipItcEncoder(model, pretrained, **kwargs)
    return OpenClipEncoder(model, pretrained, **kwargs)


def _register_hubnorm_configs(open_clip, name: str) -> None:
    if name.startswith("hubnorm-") and name not in open_clip.list_models():
        open_clip.add_model_config(HUBNORM_OPEN_CLIP_CONFIGS)


class _ImageFiles(torch.utils.data.Dataset):
    def __init__(self, paths: Sequence[Path], transform):
        self.paths, self.transform = list(paths), transform

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        from PIL import Image
        with Image.open(self.paths[i]) as im:
            return self.transform(im.convert("RGB"))


class OpenClipEncoder:
    """Lazily built open_clip model + preprocessing + tokenizer.

    Args:
        model: open_clip model name (``"ViT-B-32-quickgelu"``, ``"hf-hub:timm/ViT-B-16-SigLIP"``, ...).
        pretrained: pretrained tag (``"openai"``, ``"laion2b_s34b_b79k"``) or None for random init.
        device: ``"cuda"`` when available, else ``"cpu"``.
        precision: ``"fp32"`` (default), ``"fp16"``, ``"bf16"``, ``"amp"``; outputs are always float32.
        batch_size, num_workers: DataLoader settings for images (texts use ``batch_size`` too).
        progress: show tqdm progress bars.
        seed: torch seed used while building a randomly initialised model.
    """

    family = "open_clip"

    def __init__(self, model: str, pretrained: Optional[str] = None, *, device: Optional[str] = None,
                 precision: str = "fp32", batch_size: int = 64, num_workers: int = 0, progress: bool = True,
                 seed: int = 0):
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}; got {precision!r}")
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1; got {batch_size}")
        self.model_name = model
        self.pretrained = None if normalize_pretrained(pretrained) == "none" else pretrained
        # a bad device ("cuda" without CUDA, "cuda:7", "gpu") fails here with a ValueError naming the fix
        self.device = default_device() if device is None else str(resolve_device(device))
        self.precision = precision
        self.batch_size = int(batch_size)
        self.num_workers = int(num_workers)
        self.progress = progress
        self.seed = seed
        self._model = self._preprocess = self._tokenizer = None

    # ------------------------------------------------------------------------------------------ build
    def build(self):
        if self._model is not None:
            return self
        try:
            import open_clip
        except ImportError as exc:  # pragma: no cover
            raise ImportError("encoding needs open_clip: pip install 'hubnorm[data]' (open_clip_torch)") from exc
        name = self.model_name
        _register_hubnorm_configs(open_clip, name)
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

    @property
    def model(self):
        return self.build()._model

    def _autocast(self):
        if self.precision in ("amp", "amp_bf16"):
            dtype = torch.bfloat16 if self.precision == "amp_bf16" else torch.float16
            return torch.autocast(device_type=torch.device(self.device).type, dtype=dtype)
        return contextlib.nullcontext()

    # ----------------------------------------------------------------------------------------- encode
    def encode_images(self, paths: Sequence[Path], desc: str = "images") -> np.ndarray:
        """(n, d) float32, L2-normalised image embeddings, in the order of ``paths``."""
        self.build()
        from tqdm.auto import tqdm
        loader = torch.utils.data.DataLoader(_ImageFiles(paths, self._preprocess), batch_size=self.batch_size,
                                             shuffle=False, num_workers=self.num_workers,
                                             pin_memory=self.device.startswith("cuda"))
        out: List[np.ndarray] = []
        with torch.inference_mode(), self._autocast(), tqdm(total=len(paths), desc=desc, unit="img",
                                                             disable=not self.progress) as bar:
            for batch in loader:
                batch = batch.to(self.device, non_blocking=True)
                if self.precision in ("fp16", "bf16"):
                    batch = batch.to({"fp16": torch.float16, "bf16": torch.bfloat16}[self.precision])
                out.append(self._finish(self._model.encode_image(batch)))
                bar.update(len(batch))
        return np.concatenate(out) if out else np.zeros((0, 0), np.float32)

    def encode_texts(self, texts: Sequence[str], desc: str = "captions") -> np.ndarray:
        """(n, d) float32, L2-normalised caption embeddings."""
        self.build()
        from tqdm.auto import tqdm
        out: List[np.ndarray] = []
        texts = list(texts)
        with torch.inference_mode(), self._autocast(), tqdm(total=len(texts), desc=desc, unit="cap",
                                                             disable=not self.progress) as bar:
            for i in range(0, len(texts), self.batch_size):
                chunk = texts[i:i + self.batch_size]
                tokens = self._tokenizer(chunk).to(self.device)
                out.append(self._finish(self._model.encode_text(tokens)))
                bar.update(len(chunk))
        return np.concatenate(out) if out else np.zeros((0, 0), np.float32)

    @staticmethod
    def _finish(x: torch.Tensor) -> np.ndarray:
        x = torch.nn.functional.normalize(x.float(), dim=-1)
        return x.cpu().numpy().astype(np.float32, copy=False)


def _looks_offline(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {exc}".lower()
    return any(s in text for s in ("connection", "offline", "resolve", "timed out", "max retries", "network",
                                   "localentrynotfound", "couldn't connect", "name or service"))


__all__ = ["OpenClipEncoder", "default_device", "PRECISIONS", "ENCODER_FAMILIES", "infer_family", "check_family",
           "get_encoder"]
