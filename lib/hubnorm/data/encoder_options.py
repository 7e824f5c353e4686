"""Options shared by every encoder family (a leaf module: :mod:`hubnorm.data.encode` and
:mod:`hubnorm.data.encode_blip` both import it, never each other at module level)."""

from __future__ import annotations

import torch

__all__ = ["PRECISIONS", "default_device"]

#: Precisions an encoder accepts (recorded in the cache key).
PRECISIONS = ("fp32", "fp16", "bf16", "amp", "amp_bf16")


def default_device() -> str:
    """CUDA when torch sees a GPU, else the CPU."""
    return "cuda" if torch.cuda.is_available() else "cpu"
