"""Blocked similarity kernels: never hold more than one (rows x cols) block of a score matrix.

All functions take L2-normalised torch tensors on one device and return tensors on that device. The block
shape is derived from a byte budget (``block_bytes``), so memory stays bounded however large the bank grows.
"""

from __future__ import annotations

from typing import Iterator, Optional, Tuple

import torch

#: Default size of one similarity block (rows x cols x itemsize), in bytes.
DEFAULT_BLOCK_BYTES = 128 * 2**20


def block_rows(n_cols: int, itemsize: int = 4, block_bytes: Optional[int] = None, minimum: int = 1) -> int:
    """How many rows of an ``(rows, n_cols)`` block fit in ``block_bytes``."""
    budget = DEFAULT_BLOCK_BYTES if block_bytes is None else int(block_bytes)
    return max(minimum, budget // max(1, n_cols * itemsize))


def _block_shape(n_a: int, n_b: int, itemsize: int, block_bytes: Optional[int]) -> Tuple[int, int]:
    """Rows of ``a`` and rows of ``b`` per block so that one ``a_blk @ b_blk.T`` fits the budget."""
    budget = DEFAULT_BLOCK_BYTES if block_bytes is None else int(block_bytes)
    elems = max(1, budget // itemsize)
    rb = min(n_b, max(1, elems // max(1, min(n_a, 4096))))
    ra = min(n_a, max(1, elems // rb))
    return ra, rb


def iter_blocks(n: int, size: int) -> Iterator[Tuple[int, int]]:
    for start in range(0, n, size):
        yield start, min(n, start + size)


def topk_similarity(
    a: torch.Tensor, b: torch.Tensor, k: int, *, block_bytes: Optional[int] = None
) -> Tuple[torch.Tensor, torch.Tensor]:
    """For every row of ``a``, the ``k`` largest values of ``a_i . b_j`` over rows ``j`` of ``b``.

    Returns ``(values, indices)``, both ``(len(a), k)``, values sorted in decreasing order. The full
    ``len(a) x len(b)`` matrix is never formed: ``b`` is streamed in blocks and a running top-k is merged.
    """
    if k > b.shape[0]:
        raise ValueError(f"k={k} is larger than the bank ({b.shape[0]} rows): use k <= {b.shape[0]}")
    n_a, n_b = a.shape[0], b.shape[0]
    ra, rb = _block_shape(n_a, n_b, a.element_size(), block_bytes)
    out_v = torch.empty((n_a, k), dtype=a.dtype, device=a.device)
    out_i = torch.empty((n_a, k), dtype=torch.long, device=a.device)
    for a0, a1 in iter_blocks(n_a, ra):
        run_v = run_i = None
        for b0, b1 in iter_blocks(n_b, rb):
            s = a[a0:a1] @ b[b0:b1].T
            v, i = s.topk(min(k, b1 - b0), dim=1)
            i += b0
            if run_v is None:
                run_v, run_i = v, i
            else:
                v = torch.cat([run_v, v], dim=1)
                i = torch.cat([run_i, i], dim=1)
                run_v, pos = v.topk(k, dim=1)
                run_i = i.gather(1, pos)
        out_v[a0:a1], out_i[a0:a1] = run_v, run_i
    return out_v, out_i


def logsumexp_similarity(
    a: torch.Tensor,
    b: torch.Tensor,
    scale: float,
    *,
    b_shift: Optional[torch.Tensor] = None,
    block_bytes: Optional[int] = None,
) -> torch.Tensor:
    """``out_i = logsumexp_j(scale * a_i . b_j + b_shift_j)`` for every row of ``a``, streamed over ``b``.

    ``b_shift`` (length ``len(b)``) is an optional additive term per column, already in log units.
    Stable for any ``scale`` (it never exponentiates a score without subtracting the running maximum).
    """
    n_a, n_b = a.shape[0], b.shape[0]
    ra, rb = _block_shape(n_a, n_b, a.element_size(), block_bytes)
    out = torch.empty(n_a, dtype=a.dtype, device=a.device)
    for a0, a1 in iter_blocks(n_a, ra):
        acc = None
        for b0, b1 in iter_blocks(n_b, rb):
            s = a[a0:a1] @ b[b0:b1].T
            s.mul_(scale)
            if b_shift is not None:
                s.add_(b_shift[b0:b1])
            part = torch.logsumexp(s, dim=1)
            acc = part if acc is None else torch.logaddexp(acc, part)
        out[a0:a1] = acc
    return out


def mean_similarity(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``mean_j a_i . b_j`` for every row of ``a`` without any block: it equals ``a @ mean(b)``."""
    return a @ b.mean(dim=0)
