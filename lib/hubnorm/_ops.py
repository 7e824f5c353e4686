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


#: Width (rows of ``b``) of the first block of every ``topk_similarity`` sweep: a cheap block that sets the
#: running threshold, so that the big blocks after it only need a comparison, not a top-k.
TOPK_FIRST_BLOCK = 2048

#: Above this share of a block's entries beating the running threshold, merge by a plain top-k of the block.
_TOPK_DENSE_SHARE = 0.125

#: Columns per max-pooled group in the threshold filter of ``topk_similarity``.
TOPK_GROUP = 16


def _topk_partition(n_a: int, n_b: int, itemsize: int, block_bytes: Optional[int]):
    """Row blocks of ``a`` (balanced) and column blocks of ``b`` for :func:`topk_similarity`.

    The partition never depends on ``k``: the similarity values (and so the selected values) are the same
    bits for every ``k``, which the one-pass sweeps (``hubnorm.sweeps``) rely on.
    """
    ra, rb = _block_shape(n_a, n_b, itemsize, block_bytes)
    n_ablk = -(-n_a // ra)
    ra = -(-n_a // n_ablk)  # balanced row blocks (no thin last block: a thin GEMM is slow)
    a_blocks = list(iter_blocks(n_a, ra))
    first = min(n_b, rb, TOPK_FIRST_BLOCK)
    b_blocks = [(0, first)] + [(s, min(n_b, s + rb)) for s in range(first, n_b, rb)]
    return a_blocks, b_blocks, rb


def topk_similarity(
    a: torch.Tensor, b: torch.Tensor, k: int, *, block_bytes: Optional[int] = None
) -> Tuple[torch.Tensor, torch.Tensor]:
    """For every row of ``a``, the ``k`` largest values of ``a_i . b_j`` over rows ``j`` of ``b``.

    Returns ``(values, indices)``, both ``(len(a), k)``, values sorted in decreasing order. The full
    ``len(a) x len(b)`` matrix is never formed: ``b`` is streamed in blocks and a running top-k is merged.

    Performance (the GEMM is the physical limit; everything else is kept to one cheap read of each block):
    each block's GEMM writes into one reused buffer; the block is max-pooled over groups of
    :data:`TOPK_GROUP` columns (one read pass) and only the groups whose maximum beats the running threshold
    (each row's current k-th value, a valid lower bound of the final one) are gathered and merged with the
    running top-k by one small ``topk`` on ``[running | candidates]``. A full top-k of a block is only taken
    while the threshold is loose (the first, narrow block, or when many groups beat it). The block partition
    never depends on ``k``, so the selected values are the same bits for every ``k``. Ties between equal values
    may pick any of the tied indices (the values never change).
    """
    if k > b.shape[0]:
        raise ValueError(f"k={k} is larger than the bank ({b.shape[0]} rows): use k <= {b.shape[0]}")
    n_a, n_b = a.shape[0], b.shape[0]
    out_v = torch.empty((n_a, k), dtype=a.dtype, device=a.device)
    out_i = torch.empty((n_a, k), dtype=torch.long, device=a.device)
    if n_a == 0:
        return out_v, out_i
    G = TOPK_GROUP
    a_blocks, b_blocks, rb = _topk_partition(n_a, n_b, a.element_size(), block_bytes)
    ra_max = max(a1 - a0 for a0, a1 in a_blocks)
    buf = torch.empty(ra_max * rb, dtype=a.dtype, device=a.device)
    for a0, a1 in a_blocks:
        ra = a1 - a0
        a_blk = a[a0:a1]
        run_v = run_i = thr = None  # thr: running k-th value per row, once k values are seen
        seen = 0
        for b0, b1 in b_blocks:
            w = b1 - b0
            s = torch.mm(a_blk, b[b0:b1].T, out=buf[: ra * w].view(ra, w))
            seen += w
            cand = None
            if thr is not None and w >= G:
                wg = w // G
                gmax = torch.nn.functional.max_pool1d(s[:, None, : wg * G], G, G).view(ra, wg)
                rows, grp = (gmax > thr[:, None]).nonzero(as_tuple=True)
                n_grp = rows.numel()
                tail = w - wg * G
                if n_grp == 0 and tail == 0:
                    continue
                cnt = torch.bincount(rows, minlength=ra)
                max_c = int(cnt.max()) if n_grp else 0
                if (max_c * G + tail) <= _TOPK_DENSE_SHARE * w:
                    cand = (rows, grp, cnt, max_c, wg, tail)
            if cand is None:  # dense: top-k of the whole block
                v, i = s.topk(min(k, w), dim=1, sorted=False)
                i += b0
            else:
                rows, grp, cnt, max_c, wg, tail = cand
                width = max_c * G + tail
                v = torch.full((ra, width), -torch.inf, dtype=a.dtype, device=a.device)
                i = torch.zeros((ra, width), dtype=torch.long, device=a.device)
                if max_c:
                    pos = torch.arange(rows.numel(), device=a.device) - (torch.cumsum(cnt, 0) - cnt)[rows]
                    v[:, : max_c * G].view(ra, max_c, G)[rows, pos] = s[:, : wg * G].view(ra, wg, G)[rows, grp]
                    i[:, : max_c * G].view(ra, max_c, G)[rows, pos] = (
                        (grp * G + b0)[:, None] + torch.arange(G, device=a.device)[None, :])
                if tail:
                    v[:, max_c * G:] = s[:, wg * G:]
                    i[:, max_c * G:] = torch.arange(b0 + wg * G, b1, device=a.device)
            if run_v is None:
                mv, mi = v, i
            else:
                mv, mi = torch.cat([run_v, v], dim=1), torch.cat([run_i, i], dim=1)
            if mv.shape[1] > k:
                run_v, p = mv.topk(k, dim=1, sorted=False)
                run_i = mi.gather(1, p)
            else:
                run_v, run_i = mv, mi
            if seen >= k:
                thr = run_v.amin(dim=1)
        run_v, p = run_v.sort(dim=1, descending=True)
        out_v[a0:a1], out_i[a0:a1] = run_v, run_i.gather(1, p)
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
