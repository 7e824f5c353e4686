"""The encoder interface: one class every family implements, one encoding loop, one cached path.

A family (:mod:`.openclip`, :mod:`.blip`, :mod:`.sentence`) supplies only what is its own: how the model is built
(:meth:`Encoder.build`), how one image becomes a tensor (:meth:`Encoder.image_transform`), how a batch of pixels or
texts becomes features (:meth:`Encoder.image_features`, :meth:`Encoder.text_features`), and what identifies its
numbers (:meth:`Encoder.identity`). Batching, device and precision, progress bars, output checks and the cache
(:meth:`Encoder.encode` with ``cache=True``: :func:`hubnorm.data.cache.content_key`) are written once, here.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import warnings
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch

from ..._validation import resolve_device, unit_rows
from ...progress import progress as _progress
from .. import cache as _cache

#: Precisions an encoder accepts (recorded in its identity); outputs are always float32.
PRECISIONS = ("fp32", "fp16", "bf16", "amp", "amp_bf16")
MODALITIES = ("image", "text")


def default_device() -> str:
    """CUDA when torch sees a GPU, else the CPU."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def native_bfloat16() -> bool:
    """Whether this CPU computes bfloat16 natively (AVX512-BF16 or AMX tiles), so that bfloat16 is faster than
    float32 on it (elsewhere torch emulates it, and it is slower)."""
    cpu = getattr(torch, "cpu", None)
    checks = [getattr(cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(bool(check()) for check in checks if check is not None)


def package_versions(*packages: str) -> dict:
    """``{package: version}`` from package metadata (no import); "not installed" for a missing one."""
    from importlib import metadata
    out = {}
    for p in packages:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = "not installed"
    return out


class FileChangedError(RuntimeError):
    """An input file's bytes changed between hashing it (the cache key) and encoding it."""


class _ImageFiles(torch.utils.data.Dataset):
    """Reads each file once: the sha256 of the bytes that are decoded is returned beside the tensor."""

    def __init__(self, paths: Sequence[Path], transform):
        self.paths, self.transform = list(paths), transform

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        from PIL import Image
        data = Path(self.paths[i]).read_bytes()
        with Image.open(io.BytesIO(data)) as im:
            return self.transform(im.convert("RGB")), hashlib.sha256(data).hexdigest()


class Encoder:
    """Base of every encoder family: images and/or texts -> (n, d) float32 unit rows.

    Args (shared by every family):
        device: torch device (default CUDA when available, else CPU); a device this machine lacks is a ValueError.
        precision: one of :data:`PRECISIONS`; ``"fp16"``/``"bf16"`` cast the model, ``"amp"``/``"amp_bf16"``
            autocast; outputs are float32.
        batch_size: inputs per forward pass; num_workers: image-decoding worker processes.
        progress: show progress bars (:func:`hubnorm.progress.progress`).
        seed: torch seed while building a randomly initialised model (so repeated runs agree).
    """

    #: registry name (``get_encoder("<family>:...")``)
    family: str = ""
    #: what the family encodes
    modalities: Tuple[str, ...] = MODALITIES

    def __init__(self, model: str, pretrained: Optional[str] = None, *, device: Optional[str] = None,
                 precision: str = "fp32", batch_size: int = 64, num_workers: int = 0, progress: bool = True,
                 seed: int = 0):
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}; got {precision!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer; got {batch_size!r}")
        if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)) or num_workers < 0:
            raise ValueError(f"num_workers must be a non-negative integer; got {num_workers!r}")
        self.model_name = model
        self.pretrained = pretrained
        # a bad device ("cuda" without CUDA, "cuda:7", "gpu") fails here with a ValueError naming the fix
        self.device = default_device() if device is None else str(resolve_device(device))
        self.precision = precision
        if precision in ("bf16", "amp_bf16") and self.device == "cpu" and not native_bfloat16():
            warnings.warn(f"precision={precision!r} on a CPU without native bfloat16 (AVX512-BF16 or AMX) is slower "
                          f"than 'fp32', not faster; pass precision='fp32'", RuntimeWarning, stacklevel=2)
        self.batch_size = int(batch_size)
        self.num_workers = int(num_workers)
        self.progress = progress
        self.seed = int(seed)
        self._model = None

    # ------------------------------------------------------------------------------------ family hooks
    def build(self) -> "Encoder":
        """Build the model (once); returns ``self``."""
        raise NotImplementedError

    def image_transform(self):
        """A picklable callable: one RGB PIL image -> a (C, H, W) tensor (run in the DataLoader's workers)."""
        raise TypeError(f"{type(self).__name__} does not encode images")

    def image_features(self, pixels: torch.Tensor) -> torch.Tensor:
        """A batch of preprocessed images (on the CPU) -> (B, d) features."""
        raise TypeError(f"{type(self).__name__} does not encode images")

    def text_features(self, texts: List[str]):
        """A batch of texts -> (B, d) features (tensor or array)."""
        raise TypeError(f"{type(self).__name__} does not encode texts")

    def identity(self) -> Optional[dict]:
        """What determines this encoder's numbers (JSON values): family, model, weights, preprocessing options and
        the versions of the libraries that compute them; None when unknown (then nothing is cached)."""
        return {"family": self.family, "model": self.model_name, "pretrained": self.pretrained,
                "precision": self.precision, "options": self.options(), "versions": self.versions()}

    def options(self) -> dict:
        """Preprocessing options that change the numbers (part of :meth:`identity`)."""
        return {}

    def versions(self) -> dict:
        from ..._version import __version__
        return {"torch": torch.__version__, "hubnorm": __version__}

    # ---------------------------------------------------------------------------------- shared helpers
    @property
    def spec(self) -> str:
        """``"<family>:<model>:<pretrained>"``, the string :func:`~hubnorm.data.encoders.get_encoder` reads."""
        return f"{self.family}:{self.model_name}:{_cache.normalize_pretrained(self.pretrained)}"

    @property
    def name(self) -> str:
        return self.spec

    @property
    def model(self):
        return self.build()._model

    @property
    def text_batch_size(self) -> int:
        """Texts per :meth:`text_features` call."""
        return self.batch_size

    def autocast(self):
        if self.precision in ("amp", "amp_bf16"):
            dtype = torch.bfloat16 if self.precision == "amp_bf16" else torch.float16
            return torch.autocast(device_type=torch.device(self.device).type, dtype=dtype)
        return contextlib.nullcontext()

    @property
    def model_dtype(self) -> torch.dtype:
        """The dtype the weights are cast to (fp16 / bf16 precisions), else float32."""
        return {"fp16": torch.float16, "bf16": torch.bfloat16}.get(self.precision, torch.float32)

    def finish(self, features) -> np.ndarray:
        """(B, d) features -> float32 numpy rows with unit L2 norm."""
        x = torch.nn.functional.normalize(torch.as_tensor(features).float(), dim=-1)
        return x.cpu().numpy().astype(np.float32, copy=False)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec!r}, device={self.device!r}, precision={self.precision!r})"

    # ------------------------------------------------------------------------------------- the one loop
    def encode_images(self, paths: Sequence, desc: str = "images", *,
                      expected_sha256: Optional[Sequence[str]] = None) -> np.ndarray:
        """(n, d) float32 unit rows for the image files ``paths``, in order.

        ``expected_sha256``: the digests the files had when the caller hashed them (e.g. for a cache key); a file
        whose bytes differ when read for encoding raises :class:`FileChangedError` naming it."""
        return self._encode_image_files(paths, desc, expected_sha256)[0]

    def encode_texts(self, texts: Sequence[str], desc: str = "captions", *, batch_size: Optional[int] = None
                     ) -> np.ndarray:
        """(n, d) float32 unit rows for ``texts``, in order (``batch_size``: texts per forward pass, default
        :attr:`text_batch_size`)."""
        if "text" not in self.modalities:
            raise TypeError(f"{type(self).__name__} does not encode texts")
        texts = list(texts)
        step = self.text_batch_size if batch_size is None else int(batch_size)
        self.build()
        out: List[np.ndarray] = []
        starts = range(0, len(texts), step)
        with torch.inference_mode(), self.autocast():
            for s in _progress(starts, desc=desc, total=len(starts), unit="batch",
                               disable=not self.progress or len(starts) <= 1):
                chunk = texts[s:s + step]
                out.append(self.finish(self._checked(self.text_features(chunk), len(chunk), "texts")))
        return np.concatenate(out) if out else np.zeros((0, 0), np.float32)

    def _encode_image_files(self, paths, desc, expected_sha256=None) -> Tuple[np.ndarray, List[str]]:
        if "image" not in self.modalities:
            raise TypeError(f"{type(self).__name__} does not encode images")
        paths = list(paths)
        if expected_sha256 is not None and len(expected_sha256) != len(paths):
            raise ValueError(f"expected_sha256 has {len(expected_sha256)} digests for {len(paths)} paths")
        self.build()
        loader = torch.utils.data.DataLoader(_ImageFiles(paths, self.image_transform()), batch_size=self.batch_size,
                                             shuffle=False, num_workers=self.num_workers,
                                             pin_memory=self.device.startswith("cuda"))
        out: List[np.ndarray] = []
        digests: List[str] = []
        n_batches = len(loader)
        with torch.inference_mode(), self.autocast():
            for pixels, sha in _progress(loader, desc=desc, total=n_batches, unit="batch",
                                         disable=not self.progress or n_batches <= 1):
                i0 = len(digests)
                if expected_sha256 is not None:
                    for j, d in enumerate(sha):
                        if d != expected_sha256[i0 + j]:
                            raise FileChangedError(
                                f"{paths[i0 + j]} changed while it was being encoded (sha256 {d[:12]}... now, "
                                f"{expected_sha256[i0 + j][:12]}... when hashed): rerun once the files are stable")
                digests.extend(sha)
                out.append(self.finish(self._checked(self.image_features(pixels), len(sha), "images")))
        return (np.concatenate(out) if out else np.zeros((0, 0), np.float32)), digests

    @staticmethod
    def _checked(features, n: int, what: str):
        shape = tuple(getattr(features, "shape", np.shape(features)))
        if len(shape) != 2 or shape[0] != n:
            raise ValueError(f"the encoder returned shape {shape} for {n} {what}; expected (n_{what}, d)")
        return features

    # -------------------------------------------------------------------------------- the cached path
    def encode(self, items: Sequence, modality: str, *, cache: bool = False, cache_dir=None,
               desc: Optional[str] = None, batch_size: Optional[int] = None) -> np.ndarray:
        """Encode image files (``modality="image"``) or texts (``"text"``), through the content-addressed cache
        when ``cache`` is True and the encoder has an :meth:`identity`.

        The cache key is the sha256 of (identity, modality, the sha256 of every input: file bytes / UTF-8 text), see
        :func:`hubnorm.data.cache.content_key`; an entry that is stale or corrupt is encoded again and rewritten
        (with a warning), never used; a cache that cannot be written costs a warning, not the result. Images are
        hashed before encoding and again as they are read: a file that changes in between is an error.
        """
        if modality not in MODALITIES:
            raise ValueError(f"modality must be one of {MODALITIES}; got {modality!r}")
        if modality not in self.modalities:
            raise TypeError(f"{type(self).__name__} encodes {self.modalities}, not {modality!r}")
        items = list(items)
        desc = desc or ("images" if modality == "image" else "texts")
        identity = self.identity() if cache else None
        if identity is None:
            return (self.encode_images(items, desc) if modality == "image"
                    else self.encode_texts(items, desc, batch_size=batch_size))
        digests = self._digests(items, modality)
        key, doc = _cache.content_key(identity, modality, digests)
        label = self.spec
        try:
            return _cache.read_content_entry(key, doc, label=label, cache_dir=cache_dir)
        except _cache.CacheError as err:
            if err.reason != "missing":
                warnings.warn(f"{err}; encoding again", _cache_warning(), stacklevel=2)
            elif _cache.legacy_text_entries(cache_dir) is not None and modality == "text":
                warnings.warn(f"sentence embeddings cached in the old layout ({_cache.legacy_text_entries(cache_dir)})"
                              " are no longer read; the texts are encoded once more into "
                              f"{_cache.cache_root(cache_dir) / _cache.ENCODINGS_DIR} (then delete the old folder; "
                              "`python -m hubnorm.data encode-texts <source>` refills the cache ahead of a notebook)",
                              _cache_warning(), stacklevel=2)
        if modality == "image":
            out = self.encode_images(items, desc, expected_sha256=digests)
        else:
            out = self.encode_texts(items, desc, batch_size=batch_size)
        try:
            _cache.write_content_entry(key, doc, out, label=label, cache_dir=cache_dir)
        except OSError as err:   # a read-only or full cache root costs the next run the encoding, not this result
            warnings.warn(f"the encodings could not be cached ({err}); they are returned uncached", stacklevel=2)
        return out


    def cache_key(self, items: Sequence, modality: str, identity: Optional[dict] = None) -> Tuple[str, dict]:
        """``(key, document)`` of the cache entry of ``items``: :func:`hubnorm.data.cache.content_key` of this
        encoder's identity and the sha256 of each input (file bytes for images, UTF-8 bytes for texts)."""
        identity = self.identity() if identity is None else identity
        if identity is None:
            raise ValueError(f"{self!r} has no identity: its encodings are not cached")
        return _cache.content_key(identity, modality, self._digests(items, modality))

    @staticmethod
    def _digests(items: Sequence, modality: str) -> List[str]:
        if modality == "image":
            return [_cache.sha256_file(p) for p in items]
        return [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in items]

    def cache_entry_dir(self, items: Sequence, modality: str, cache_dir=None) -> Path:
        """The folder the cached encodings of ``items`` live in (whether or not they are cached yet)."""
        return _cache.content_entry_dir(self.cache_key(list(items), modality)[0], self.spec, cache_dir)


def _cache_warning():
    return _cache.CacheWarning


class CallableTextEncoder(Encoder):
    """Any callable ``texts -> (n, d)`` behind the interface (e.g. a user's own sentence encoder).

    ``cache_id`` (the callable's ``cache_id`` attribute by default): a string naming the encoder and its version;
    its outputs are cached under it. None: never cached. Rows are re-normalised (in float64)."""

    family = "callable"
    modalities = ("text",)

    def __init__(self, fn, *, cache_id: Optional[str] = None, batch_size: int = 4096, progress: bool = True):
        if not callable(fn):
            raise TypeError(f"encoder must be a callable texts -> (n, d) array; got {type(fn).__name__}")
        if cache_id is not None and (not isinstance(cache_id, str) or not cache_id.strip()):
            raise ValueError(f"cache_id must be a non-empty string naming the encoder and its version, or None; "
                             f"got {cache_id!r}")
        super().__init__(getattr(fn, "name", type(fn).__name__), None, device="cpu", batch_size=batch_size,
                         progress=progress)
        self.fn, self.cache_id = fn, cache_id

    def build(self):
        return self

    def text_features(self, texts):
        emb = self.fn(texts)
        return emb.detach().cpu().numpy() if isinstance(emb, torch.Tensor) else np.asarray(emb)

    def finish(self, features) -> np.ndarray:
        return unit_rows(features, "text embeddings")

    def identity(self) -> Optional[dict]:
        return None if self.cache_id is None else {"family": self.family, "cache_id": self.cache_id}

    @property
    def spec(self) -> str:
        return f"{self.family}:{self.model_name}"

    @property
    def name(self) -> str:
        return self.model_name


__all__ = ["Encoder", "CallableTextEncoder", "FileChangedError", "PRECISIONS", "MODALITIES", "default_device",
           "package_versions"]
