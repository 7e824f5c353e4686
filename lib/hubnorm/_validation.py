"""Input checks shared by every public function.

Each check raises ``TypeError`` (wrong kind of object) or ``ValueError`` (right kind, bad value) with a
message that names the argument and says how to fix it.
"""

from __future__ import annotations

import math
import numbers
from typing import Optional, Union

import numpy as np
import torch

ArrayLike = Union[np.ndarray, torch.Tensor]

#: Rows whose L2 norm is off by more than this are rejected by ``as_embeddings(check_normalized=True)``.
NORM_TOLERANCE = 1e-3


def resolve_device(device: Union[None, str, torch.device], name: str = "device") -> torch.device:
    """``None`` means CUDA when available, else CPU; anything else must name a device this machine has.

    Raises ``TypeError`` for a wrong type and ``ValueError`` (naming ``device`` and the fix) for a misspelt
    device, a CUDA / MPS device on a machine without one, or a CUDA index beyond the visible GPUs.
    """
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"{name} must be None, a string such as 'cpu' or 'cuda', or a torch.device; "
                        f"got {type(device).__name__} {device!r}")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as exc:
        raise ValueError(f"{name}={device!r} is not a device name (not a device torch knows): use 'cpu', 'cuda', "
                         f"'cuda:0' or 'mps', or pass {name}=None (CUDA when available, else CPU)") from exc
    if dev.type == "cpu":
        return dev
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{name}={device!r} but CUDA is not available (torch {torch.__version__} sees no CUDA "
                             f"GPU on this machine): pass {name}='cpu' or {name}=None, or install the CUDA build "
                             "of torch and check the driver (docs/install.md)")
        n = torch.cuda.device_count()
        if dev.index is not None and dev.index >= n:
            raise ValueError(f"{name}={device!r} but only {n} CUDA device(s) are visible (indices 0..{n - 1}): "
                             f"pass {name}='cuda' or 'cuda:0', or check CUDA_VISIBLE_DEVICES")
        return dev
    if dev.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ValueError(f"{name}={device!r} but Apple MPS is not available on this machine: pass "
                             f"{name}='cpu' or {name}=None")
        return dev
    raise ValueError(f"{name}={device!r}: hubnorm runs on (supports 'cpu', 'cuda[:N]' and 'mps') devices, not "
                     f"device type {dev.type!r}; pass {name}='cpu', 'cuda' or None")


def as_embeddings(
    x: ArrayLike,
    name: str,
    *,
    device: Union[None, str, torch.device] = None,
    dtype: Optional[torch.dtype] = None,
    check_normalized: bool = True,
    dim: Optional[int] = None,
) -> torch.Tensor:
    """Return ``x`` as a 2-D floating torch tensor after checking it.

    Checks: array type, 2-D, at least one row, finite, rows L2-normalised (unless ``check_normalized`` is
    False), and ``x.shape[1] == dim`` when ``dim`` is given.

    Autograd: a tensor that requires grad is detached (hubnorm is a test-time, inference-only library: no
    result carries an autograd graph, and the caller's graph is never touched).
    """
    if isinstance(x, np.ndarray):
        if not np.issubdtype(x.dtype, np.floating):
            raise TypeError(f"{name} must hold floating-point values; got dtype {x.dtype}. Use {name}.astype('float32').")
        t = torch.from_numpy(np.ascontiguousarray(x))
    elif isinstance(x, torch.Tensor):
        if not torch.is_floating_point(x):
            raise TypeError(f"{name} must hold floating-point values; got dtype {x.dtype}. Use {name}.float().")
        t = x.detach()
    else:
        raise TypeError(f"{name} must be a numpy array or a torch tensor of shape (n, d); got {type(x).__name__}")
    if t.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n, d); got shape {tuple(t.shape)}. Reshape it, e.g. {name}.reshape(1, -1) for one vector.")
    if t.shape[0] == 0:
        raise ValueError(f"{name} is empty (0 rows): pass at least one embedding")
    if t.shape[1] == 0:
        raise ValueError(f"{name} has 0 columns: embeddings need d >= 1")
    if dim is not None and t.shape[1] != dim:
        raise ValueError(f"{name} has dimension {t.shape[1]} but the other embeddings have {dim}: use the same encoder for both")
    if dtype is None:
        dtype = t.dtype if t.dtype in (torch.float32, torch.float64) else torch.float32
    t = t.to(device=resolve_device(device), dtype=dtype)
    if not _all_finite(t):
        bad = sum(int((~torch.isfinite(t[i:i + step])).any(dim=1).sum()) for i, step in _row_steps(t))
        raise ValueError(f"{name} contains NaN or Inf in {bad} row(s): fix or drop those embeddings")
    if check_normalized:
        norms = torch.linalg.vector_norm(t, dim=1)
        zero = torch.nonzero(norms == 0)
        if zero.numel():
            raise ValueError(f"{name} has {zero.numel()} all-zero row(s) (the first is row {int(zero[0, 0])}): an "
                             "embedding of nothing has no direction; drop those rows (and their pairs)")
        worst = float((norms - 1).abs().max())
        if worst > NORM_TOLERANCE:
            raise ValueError(
                f"{name} rows are not L2-normalised (largest |norm - 1| = {worst:.3g}): "
                f"use hubnorm.l2_normalize({name}) first (cosine retrieval; a hubnorm normalizer scoring raw dot "
                "products instead takes check_normalized=False)"
            )
    return t


def _row_steps(t: torch.Tensor, elements: int = 2**22):
    """Row blocks of about ``elements`` entries: ``torch.isfinite`` on a whole bank allocates ~1.75x its size."""
    step = max(1, elements // max(1, t.shape[1]))
    return [(i, step) for i in range(0, t.shape[0], step)]


def _all_finite(t: torch.Tensor) -> bool:
    """Whether every entry of ``t`` is finite. Fast path: one sum (no temporary the size of ``t``): a NaN or an
    infinity in any entry makes the sum NaN or infinite, so a finite sum proves every entry finite (5-10x faster
    than ``isfinite`` on a large bank). A non-finite sum (a bad entry, or finite entries whose sum overflows) is
    decided entry by entry."""
    if bool(torch.isfinite(t.sum())):
        return True
    return all(bool(torch.isfinite(t[i:i + step]).all()) for i, step in _row_steps(t))


def l2_normalize(x: ArrayLike, eps: float = 1e-12) -> ArrayLike:
    """Row-wise L2 normalisation for numpy arrays or torch tensors (returns the same kind)."""
    if isinstance(x, torch.Tensor):
        return x / torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min(eps)
    if isinstance(x, np.ndarray):
        return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), eps)
    raise TypeError(f"x must be a numpy array or a torch tensor; got {type(x).__name__}")


def check_positive_int(value, name: str, *, maximum: Optional[int] = None, max_name: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer; got {type(value).__name__} {value!r}")
    value = int(value)
    if value < 1:
        raise ValueError(f"{name} must be >= 1; got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name}={value} is larger than {max_name or 'the allowed maximum'} ({maximum}): use {name} <= {maximum}")
    return value


def check_ks(ks, name: str = "ks") -> list:
    """The cut-offs ``K`` of R@K: a non-empty sequence of positive integers (one K is ``(5,)``, not ``5``)."""
    if isinstance(ks, (str, bytes)) or not hasattr(ks, "__iter__"):
        raise TypeError(f"{name} must be a sequence of positive integers such as (1, 5, 10) (one K: ({ks!r},)); "
                        f"got {type(ks).__name__} {ks!r}")
    out = [check_positive_int(k, "k") for k in ks]
    if not out:
        raise ValueError(f"{name} is empty: give at least one K, e.g. (1, 5, 10)")
    return out


def check_positive_float(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number; got {type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0; got {value}")
    return value


def check_finite_float(value, name: str, *, minimum: Optional[float] = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number; got {type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite; got {value}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {value}")
    return value


def check_fraction(value, name: str, *, below_one: bool = False) -> float:
    """A share in (0, 1] (``below_one``: in (0, 1), where both parts must keep something): a number, not a bool."""
    interval = "(0, 1)" if below_one else "(0, 1]"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number in {interval}; got {value!r}")
    share = float(value)
    if not (0 < share < 1 if below_one else 0 < share <= 1):
        raise ValueError(f"{name} must be a number in {interval}; got {value!r}")
    return share


def check_chunk_size(value, name: str = "chunk_size") -> Optional[int]:
    if value is None:
        return None
    return check_positive_int(value, name)


def check_block_bytes(value, name: str = "block_bytes") -> Optional[int]:
    """``None`` (the default budget) or a positive integer number of bytes."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be None or an integer number of bytes (e.g. 128 * 2**20); "
                        f"got {type(value).__name__} {value!r}")
    return check_positive_int(value, name)


def check_optional_bytes(value, name: str) -> Optional[int]:
    """``None`` or a non-negative integer number of bytes (0 turns a cache off)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be None or an integer number of bytes; got {type(value).__name__} {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0 bytes (0 or None turns it off); got {value}")
    return int(value)


FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_float_dtype(value, name: str, *, allow_none: bool = True) -> Optional[torch.dtype]:
    """``None`` (when allowed) or one of the torch floating dtypes in :data:`FLOAT_DTYPES`."""
    if value is None and allow_none:
        return None
    if not isinstance(value, torch.dtype) or value not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be {'None or ' if allow_none else ''}a torch floating dtype "
                        f"(torch.float16, torch.bfloat16, torch.float32 or torch.float64); got {value!r}")
    return value


def check_seed(value, name: str = "seed") -> int:
    """A non-negative integer seed (numpy and torch generators accept 0 ... 2**63 - 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be a non-negative integer; got {type(value).__name__} {value!r}")
    value = int(value)
    if not 0 <= value < 2**63:
        raise ValueError(f"{name} must be in [0, 2**63); got {value}")
    return value


def check_finite_rows(x, name: str, elements: int = 2**22) -> None:
    """ValueError naming ``name`` when a row of a 2-D numpy array or tensor holds NaN or Inf (checked in row
    blocks, so a memory-mapped bank is never copied whole)."""
    step = max(1, elements // max(1, x.shape[1] if x.ndim > 1 else 1))
    bad = 0
    for i in range(0, x.shape[0], step):
        blk = x[i:i + step]
        if isinstance(blk, torch.Tensor):
            bad += int((~torch.isfinite(blk.detach())).reshape(blk.shape[0], -1).any(dim=1).sum())
        else:
            bad += int((~np.isfinite(np.asarray(blk))).reshape(blk.shape[0], -1).any(axis=1).sum())
    if bad:
        raise ValueError(f"{name} contains NaN or Inf in {bad} row(s): fix or drop those rows")


#: rows per block of :func:`unit_rows` (its float64 temporaries are this many rows, not the whole matrix)
UNIT_ROWS_BLOCK = 16384


def unit_rows(x, name: str, dtype=np.float32) -> np.ndarray:
    """``x`` as a 2-D array of ``dtype`` with unit L2 rows (normalised in float64); errors name ``name``.

    The plain computation is ``(x64 / np.linalg.norm(x64, axis=1, keepdims=True)).astype(dtype)`` with ``x64`` the
    float64 copy of ``x``; it runs here in blocks of :data:`UNIT_ROWS_BLOCK` rows, the same arithmetic per row (so
    the same bits, ``tests/test_validation.py``), with one full-size allocation (the result) instead of five: at
    paper scale (174,000 x 512 per data set, read by every notebook) the temporaries cost seconds of page faults."""
    x = np.asarray(x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x)
    if x.dtype.kind not in "fiu":   # lists of numbers, bool, object: converted as before (or numpy's error)
        x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty 2-D array (n, d); got shape {x.shape}")
    blocks = [slice(s, s + UNIT_ROWS_BLOCK) for s in range(0, x.shape[0], UNIT_ROWS_BLOCK)]
    if x.dtype.kind == "f" and not all(np.isfinite(x[b]).all() for b in blocks):
        raise ValueError(f"{name} contain NaN or Inf")
    out = np.empty(x.shape, dtype=dtype)
    for b in blocks:
        x64 = np.asarray(x[b], dtype=np.float64)
        norms = np.linalg.norm(x64, axis=1, keepdims=True)
        if np.any(norms == 0):
            raise ValueError(f"{name} contain an all-zero row: cannot normalise")
        out[b] = x64 / norms
    return out
