"""Former name of :mod:`hubnorm.kernels` (kept while ``hubnorm.sweeps`` still imports from here)."""

from .kernels import (  # noqa: F401
    DEFAULT_BLOCK_BYTES, block_rows, iter_blocks, logsumexp_similarity, nnn_bias, pack_rows, topk_similarity,
)
