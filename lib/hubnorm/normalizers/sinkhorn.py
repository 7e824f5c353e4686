"""Sinkhorn Normalization (SN) and Dual Bank Sinkhorn Normalization (DBSN).

Pan et al., "Hubness Reduction with Dual Bank Sinkhorn Normalization for Cross-Modal Retrieval", Eq. (7)-(9)
and Algorithms A1-A2. SN solves the entropic optimal-transport problem with uniform marginals on the
bank-by-target score matrix S (m x n),

    pi* = argmax_{pi 1 = a, pi^T 1 = b} <S, pi> + tau H(pi),     a = 1/m, b = 1/n,

whose solution is ``pi*_ij = exp((S_ij + hbar(q_i) + hbar(t_j)) / tau)`` (Eq. 9). The target term
``hbar(t_j) = tau log beta_j`` (Alg. A1 returns its negative and subtracts it) is the offset: rank ``S + hbar``.
The Sinkhorn-Knopp updates run in the log domain (stable in float32 for tau = 0.01, where exp(S/tau) overflows;
at a large tau, where float32 rounding of the ``tau log(m n)``-sized potentials would swamp the offsets, they run
in float64, and a tau even float64 cannot serve is refused, naming tau):

    f_i = tau log(1/m) - tau logsumexp_j((S_ij + g_j) / tau)      (alpha = exp(f / tau))
    g_j = tau log(1/n) - tau logsumexp_i((S_ij + f_i) / tau)      (beta  = exp(g / tau))

starting from g = 0 (beta = 1), T times. Each iteration is one pass over row blocks of S: a block's f is
computed from the previous g and immediately folded into the column logsumexp of the new g, so S is never held
whole unless it fits ``cache_bytes`` (then its blocks are kept and reused across iterations).

DBSN (Alg. A2) runs SN on the query bank against the extended targets [T ; B_t] and keeps the first n entries.
With the test queries as the bank, SN is query-aware (DBSN Table 2).

As block reductions (:mod:`hubnorm.blocks`): one iteration is one reduction over blocks of bank rows that span
every column (:class:`SinkhornIteration`: each block's ``f`` is local to its rows, its partial of the column
log-sum-exp is merged by ``logaddexp``); when the columns are cut into chunks (Dask) the two half-steps are two
:class:`~hubnorm.blocks.LogSumExp` reductions. :class:`SinkhornRun` states the loop; an in-process engine runs it
as the fused kernel :func:`sinkhorn_potentials` below. The plain dense form is
``SinkhornNormalization.plain``. Tests: ``tests/test_oracles.py`` (POT, Alg. A1), ``tests/test_sinkhorn_paths.py``
(streaming, 16-bit caches, the two block passes of the kernel), ``tests/test_distributed.py`` and
``tests/method_checks.py`` (blocks).
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Tuple

import numpy as np
import torch

from ..blocks import Inputs, Iteration, LogSumExp, Param, Reduction, Scores
from ..kernels import PRECISION_TARGET, bank_column, block_rows, gibbs, iter_blocks, working_dtype
from ..progress import progress
from .base import SWEEP_COMMON, Normalizer

#: Keep the bank x target score blocks in memory across iterations when they take at most this many bytes.
DEFAULT_CACHE_BYTES = 2 * 2**30

#: Columns whose streamed column sum falls below this are recomputed exactly (exp underflow guard; the
#: "shared-shift" pass uses :data:`_TINY_COLUMN_SHARED`).
_TINY_COLUMN = 1e-25
_TINY_COLUMN_SHARED = 1e-20
#: The per-block passes of :func:`sinkhorn_potentials` over kept (cached) score blocks (``block_pass``):
#: ``"rowmax"`` -- the reference: ``x = (S + g) / tau``, its exact row maximum, ``exp(x - rowmax)``;
#: ``"shared-shift"`` (default) -- one shift for every row, ``c = max_j g_j / tau`` (an upper bound of every row's
#: maximum, since kept blocks are stored relative to their row maxima), so the row-maximum pass and the subtraction
#: disappear; a row whose sum then falls below :data:`_ROW_SUM_MIN` is redone with its own maximum.
BLOCK_PASSES = ("rowmax", "shared-shift")
_ROW_SUM_MIN = 1e-10
#: float64 runs whose kept score blocks span at most this many units of tau ((max S - min S) / tau) iterate in the
#: kernel domain (:func:`_kernel_iterations`): every scaling, kernel entry and sum then stays within exp(-+(this +
#: log(m n))) of 1, far inside float64's range (exp(-708) is its smallest normal number)
_KERNEL_MAX_RANGE = 600.0
#: fits with at least this many score entries over all iterations (m * n * n_iter; about 20 s on 2 CPU cores)
#: show a progress bar with the time left (``HUBNORM_PROGRESS=0`` silences it)
PROGRESS_ENTRIES = 2 * 10**10


def sinkhorn_potentials(
    bank: torch.Tensor,
    targets: torch.Tensor,
    tau: float,
    n_iter: int = 10,
    tol: Optional[float] = None,
    *,
    block_bytes: Optional[int] = None,
    cache_bytes: Optional[int] = DEFAULT_CACHE_BYTES,
    cache_dtype: Optional[torch.dtype] = None,
    shared_blocks: Optional[dict] = None,
    callback: Optional[Callable[[int, torch.Tensor], Optional[bool]]] = None,
    block_pass: str = "shared-shift",
) -> Tuple[torch.Tensor, torch.Tensor, int]:
    """Log-domain Sinkhorn on ``S = bank @ targets.T`` with uniform marginals.

    Returns ``(f, g, iterations)``: the row potentials (``tau log alpha``), the column potentials
    (``tau log beta``) and the number of iterations run. Stops early when ``tol`` is given and the largest
    change of ``g`` in one iteration is below it.

    ``callback(t, g)``: called after iteration ``t`` (1-based) with that iteration's column potentials (in the
    working dtype; do not modify them); returning True stops the run there. The iteration study
    (:func:`hubnorm.sweeps.iteration_table`) reads every ``T`` and the convergence point off one run with it.

    Memory: one row block of S (``block_bytes``) in float32 at a time, recomputed by a GEMM every iteration,
    except the blocks kept in a cache of at most ``cache_bytes`` in ``cache_dtype`` (default: the input dtype):
    the whole S when it fits, else as many leading row blocks as fit (a partial cache saves that share of the
    GEMMs; ``cache_bytes=None`` or 0 keeps nothing). ``cache_dtype=torch.float16`` (or ``bfloat16``) halves
    the cache; each row is stored relative to its
    maximum (the entries that dominate a log-sum-exp are the ones near 0, where 16-bit floats are finest) and
    all arithmetic stays in float32, but the offsets then carry the storage rounding (about 1e-5 to 1e-4 for
    float16 at tau = 0.01, 8x more for bfloat16): use it when the float32 GEMM per iteration is too slow.
    ``shared_blocks``: a dict kept across calls on the same bank and targets (the temperature sweeps of
    :func:`hubnorm.grid_search`): the blocks are always kept there and reused, with results bit-identical to a
    call that caches them itself.

    Per block and iteration (one pass): ``x = (S + g) / tau`` (fused into the GEMM), ``E = exp(x - rowmax)``;
    the row sums give ``f``, and since ``exp((S_ij + f_i) / tau) = E_ij w_i exp(-g_j / tau)`` with
    ``w_i = (1/m) / rowsum_i``, the column log-sum-exp for the new ``g`` is one matrix-vector product ``w @ E``
    (a second exponential pass is never needed). Columns whose sum underflows are recomputed exactly.

    ``block_pass`` (:data:`BLOCK_PASSES`): how a *kept* block is swept; blocks recomputed by a GEMM every
    iteration always take the reference pass. ``"rowmax"`` is the reference above. In float64, ``"shared-shift"``
    (default) runs the iterations in the kernel domain (Alg. A1's own form, :func:`_kernel_iterations`: one
    exponential pass in all, then two matrix-vector products per iteration, 4x faster than an exponential per
    score and iteration) when the whole matrix fits ``cache_bytes`` and its scores span at most
    :data:`_KERNEL_MAX_RANGE` units of ``tau``; otherwise (and should a kernel iteration ever give a non-finite
    potential, from the last finite one) it takes the reference pass.
    ``"shared-shift"`` (default, float32)
    keeps every block relative to its row maxima (``S - rowmax(S)``, also in float32) and shifts all rows by one
    constant, ``c = max_j g_j / tau``: then ``x - c <= 0`` everywhere (no overflow), so the row-maximum pass and the
    subtraction go, and a 16-bit block is converted into the float32 buffer by a plain copy (a mixed-dtype add is
    about 5x slower). Per row ``E = exp(x - c)`` is the row's softmax times a constant, so ``f`` and the column
    partial ``w @ E`` keep their meaning exactly (each row contributes ``a softmax_i``). Underflow guard: a row
    whose sum falls below ``1e-10`` (its maximum more than 23 below ``c``) is redone with its own maximum, so
    entries lost to float32 underflow (``< 1.2e-38`` each, weight ``a / rowsum <= 1e10 a``) carry at most
    ``1.2e-28`` of any column's mass, and columns below ``1e-20`` are recomputed exactly: a relative error of at
    most ``1.2e-8`` on every column sum. Tested equal to ``"rowmax"`` and to dense float64
    (``tests/test_sinkhorn_paths.py``); speed: ``benchmarks/reports/sinkhorn.md``.
    """
    if block_pass not in BLOCK_PASSES:
        raise ValueError(f"block_pass must be one of {list(BLOCK_PASSES)}; got {block_pass!r}")
    m, n = bank.shape[0], targets.shape[0]
    tau = float(tau)
    work = _sinkhorn_dtype(bank, targets, tau)
    fast = block_pass == "shared-shift" and work == torch.float32   # float64 keeps the reference pass
    rows = block_rows(n, max(4, torch.empty((), dtype=work).element_size()), block_bytes)
    blocks = list(iter_blocks(m, rows))
    store = bank.dtype if cache_dtype is None else cache_dtype
    item = torch.empty((), dtype=store).element_size()
    cache = {} if shared_blocks is None else shared_blocks
    # blocks kept across iterations: all of them with shared_blocks, else as many leading blocks as cache_bytes holds
    # (a partial cache: the rest are recomputed by a GEMM each iteration)
    budget = cache_bytes or 0
    if shared_blocks is not None or m * n * item <= budget:
        n_keep = len(blocks)
    else:
        n_keep = int(budget // (rows * n * item))
    # kept blocks are stored relative to their row maxima: always in 16 bits (finest near 0), and in float32 for the
    # shared-shift pass (which needs every kept row's maximum to be 0)
    shifted = store in (torch.float16, torch.bfloat16) or (fast and store == work)
    log_a, log_b = math.log(1.0 / m), math.log(1.0 / n)
    g = torch.zeros(n, dtype=work, device=bank.device)
    f = torch.empty(m, dtype=work, device=bank.device)
    buf = torch.empty(rows * n, dtype=work, device=bank.device)
    targets_t = targets.T
    done = 0
    # a bar with the time left for fits that take more than seconds (the full COCO training banks: an hour on a CPU);
    # with tol or a callback the run may stop early, so its total (and time left) is an upper bound
    bar = progress(total=int(n_iter) * len(blocks), desc=f"Sinkhorn {m:,} x {n:,}", unit="block",
                   disable=m * n * int(n_iter) < PROGRESS_ENTRIES)
    try:
        if (block_pass == "shared-shift" and work == torch.float64 and not shifted and n_keep == len(blocks)
                and m * n * 8 <= budget and m > 0 and n > 0):
            for r0, r1 in blocks:       # the GEMMs of the first iteration, kept as the reference pass keeps them
                if r0 not in cache:
                    cache[r0] = (torch.mm(bank[r0:r1], targets_t), None)
            lo = min(float(cache[r0][0].min()) for r0, _ in blocks)
            hi = max(float(cache[r0][0].max()) for r0, _ in blocks)
            if (hi - lo) / tau <= _KERNEL_MAX_RANGE:
                kept = [cache[r0][0] for r0, _ in blocks]
                if shared_blocks is None:   # its own cache: the kernel takes the blocks over (in place in float64)
                    cache.clear()
                f, g, done, stop = _kernel_iterations(kept, tau, int(n_iter), tol, callback,
                                                      lambda: bar.update(len(blocks)), in_place=shared_blocks is None)
                if stop:
                    return f.to(bank.dtype), g.to(bank.dtype), done
        for _ in range(int(n_iter) - done):
            g_tau = g / tau
            c = float(g_tau.max())
            g_c = g_tau - c          # shared-shift pass: x - c = S / tau + (g - max g) / tau <= 0 on kept blocks
            acc = torch.zeros(n, dtype=torch.float64, device=bank.device)
            tiny_limit = _TINY_COLUMN
            for b, (r0, r1) in enumerate(blocks):
                r = r1 - r0
                x = buf[: r * n].view(r, n)
                hit = cache.get(r0)
                shift = None
                if hit is None:
                    if b < n_keep:
                        if shifted and store != work and bank.dtype == work and targets.dtype == work:
                            # only the 16-bit copy is kept: the product goes to the reused buffer (a fresh 128 MB
                            # block per GEMM costs about 9% of the GEMM in page faults)
                            s = torch.mm(bank[r0:r1], targets_t, out=x)
                        else:
                            s = torch.mm(bank[r0:r1], targets_t)
                        if shifted:
                            shift = s.amax(dim=1)
                            cache[r0] = (s.sub_(shift[:, None]).to(store), shift)
                        else:
                            cache[r0] = (s, None)
                        hit = cache[r0]
                    else:
                        torch.addmm(g_tau, bank[r0:r1].to(work), targets_t.to(work), beta=1.0, alpha=1.0 / tau, out=x)
                if hit is not None and fast and hit[1] is not None:
                    s, shift = hit
                    rs, lse = _shared_shift_rows(x, s, g_tau, g_c, c, tau)
                    tiny_limit = _TINY_COLUMN_SHARED
                else:
                    if hit is not None:
                        s, shift = hit
                        torch.add(g_tau, s, alpha=1.0 / tau, out=x)
                    # rows: f from the previous g
                    mx = x.amax(dim=1)
                    x.sub_(mx[:, None]).exp_()
                    rs = x.sum(dim=1)
                    lse = mx + rs.log()
                if shift is not None:
                    lse += shift / tau
                f[r0:r1] = tau * log_a - tau * lse
                # columns: sum_i exp((S_ij + f_i)/tau) = exp(-g_j/tau) * (w @ E)_j, w_i = (1/m) / rs_i
                w = (1.0 / m) / rs
                acc += torch.mv(x.T, w).to(torch.float64)
                bar.update(1)
            tiny = acc < tiny_limit
            lse_col = acc.clamp_min(1e-300).log().to(work) - g_tau
            if bool(tiny.any()):  # exact column log-sum-exp for the few columns whose streamed sum underflowed
                cols = tiny.nonzero().squeeze(1)
                part = None
                for r0, r1 in blocks:
                    z = (bank[r0:r1].to(work) @ targets[cols].to(work).T + f[r0:r1, None]) / tau
                    blk = torch.logsumexp(z, dim=0)
                    part = blk if part is None else torch.logaddexp(part, blk)
                lse_col[cols] = part
            g_new = tau * log_b - tau * lse_col
            done += 1
            delta = float((g_new - g).abs().max())
            g = g_new
            if callback is not None and callback(done, g):
                break
            if tol is not None and delta < tol:
                break
    finally:
        bar.close()
    return f.to(bank.dtype), g.to(bank.dtype), done


def _kernel_iterations(blocks, tau, n_iter, tol, callback, tick, *, in_place=False):
    """Sinkhorn-Knopp in the kernel domain (DBSN Alg. A1 with scalings ``alpha = exp(f / tau)`` and
    ``beta = exp(g / tau)``) on kept float64 score blocks, from ``g = 0``: the same iterates as the log-domain
    updates of :func:`sinkhorn_potentials` up to float64 rounding.

    Each row is shifted by its maximum once: ``K_ij = exp((S_ij - r_i) / tau)`` with ``r_i = max_j S_ij`` (one
    exponential pass in all). An iteration, with ``v = exp(g / tau - c)``, ``c = max_j g_j / tau``, is two
    matrix-vector products (``a = 1/m``, ``b = 1/n``):

        f_i / tau = log a - c - r_i / tau - log (K v)_i
        g_j / tau = log b - log a + c - log (K^T w)_j,     w = 1 / (K v)

    (the second because ``(S_ij + f_i) / tau = log K_ij + log a - c - log (K v)_i``). Range (``R = (max S - min S)
    / tau <= _KERNEL_MAX_RANGE``, checked by the caller): ``K`` lies in ``[exp(-R), 1]`` with a 1 in every row, and
    the spread of ``g / tau`` over the columns is at most ``R`` (two columns' log-sum-exps differ by at most the
    largest difference of their scores), so ``v`` lies in ``[exp(-R), 1]``, ``K v`` in ``[exp(-R), n]``, ``w`` in
    ``[1/n, exp(R)]`` and ``K^T w`` in ``[exp(-R) / n, m exp(R)]``: no sum under- or overflows. Returns ``(f, g,
    iterations run, stopped)`` as torch tensors (the loop itself runs on :func:`_kernel_namespace`'s arrays);
    ``stopped`` is False when an iteration gave a non-finite potential (never seen; the caller then continues in
    the log domain from the returned ``g``, the last finite one). ``in_place``: ``blocks`` (a list, emptied here)
    may be overwritten by the kernel, so that the score matrix is held once."""
    m, n, dev = sum(b.shape[0] for b in blocks), blocks[0].shape[1], blocks[0].device
    log_a, log_b = math.log(1.0 / m), math.log(1.0 / n)
    kern, r_tau = [], []
    while blocks:
        s = blocks.pop(0).to(torch.float64)
        r = s.amax(dim=1)
        kern.append((s.sub_(r[:, None]) if in_place else torch.sub(s, r[:, None])).div_(tau).exp_())
        r_tau.append(r / tau)
    r_tau = torch.cat(r_tau)
    xp = _kernel_namespace(dev)
    if xp is np:        # zero-copy views: the loop below then runs on numpy arrays only
        kern, r_tau = [k.numpy() for k in kern], r_tau.numpy()
    as_torch = torch.from_numpy if xp is np else (lambda x: x)
    zeros = np.zeros if xp is np else (lambda size: torch.zeros(size, dtype=torch.float64, device=dev))
    f, g = zeros(m), zeros(n)
    done = 0
    with np.errstate(all="ignore"):     # a non-finite potential is detected below, not warned about
        for _ in range(n_iter):
            g_tau = g / tau
            c = float(g_tau.max())
            v = xp.exp(g_tau - c)
            kv = xp.concatenate([k @ v for k in kern])
            w = 1.0 / kv
            kw, r0 = None, 0
            for k in kern:
                part = w[r0:r0 + k.shape[0]] @ k
                kw = part if kw is None else kw + part
                r0 += k.shape[0]
            f_new = tau * (log_a - c) - tau * (r_tau + xp.log(kv))
            g_new = tau * (log_b - log_a + c) - tau * xp.log(kw)
            if not (bool(xp.isfinite(g_new).all()) and bool(xp.isfinite(f_new).all())):
                return as_torch(f), as_torch(g), done, False
            tick()
            done += 1
            delta = float(xp.abs(g_new - g).max())
            f, g = f_new, g_new
            if callback is not None and callback(done, as_torch(g)):
                break
            if tol is not None and delta < tol:
                break
    return as_torch(f), as_torch(g), done, True


def _kernel_namespace(device):
    """The array library of :func:`_kernel_iterations`' loop (a named seam, tested equal both ways in
    ``tests/test_sinkhorn_paths.py``): numpy on the CPU, torch on a torch device. Its work per iteration is two
    matrix-vector products and a few vector operations; on the CPU numpy's OpenBLAS ``gemv`` is 1.4-2.4x faster than
    ``torch.mv`` on the same matrix, and a loop that alternates the two libraries' thread pools is slower than
    either alone (both spin-wait on the same cores): `benchmarks/reports/sinkhorn64.md`."""
    return np if torch.device(device).type == "cpu" else torch


def _shared_shift_rows(x, s, g_tau, g_c, c, tau):
    """The shared-shift pass of one kept block ``s`` (stored relative to its row maxima, any float dtype) into the
    float32/64 buffer ``x``: ``x = exp(s / tau + g_c)`` with ``g_c = g / tau - c``; returns the row sums and row
    log-sum-exps (without the stored row shift). Rows whose sum falls below :data:`_ROW_SUM_MIN` are redone with
    their own maximum (their ``x`` rows then hold ``exp(x - rowmax)``, as in the rowmax pass)."""
    if s.dtype == x.dtype:
        torch.add(g_c, s, alpha=1.0 / tau, out=x)
    else:   # a plain dtype copy, then a float32 add (one mixed-dtype add is several times slower)
        x.copy_(s)
        torch.add(g_c, x, alpha=1.0 / tau, out=x)
    x.exp_()
    rs = x.sum(dim=1)
    lse = rs.log().add_(c)
    low = rs < _ROW_SUM_MIN
    if bool(low.any()):
        idx = low.nonzero().squeeze(1)
        xb = torch.add(g_tau, s[idx].to(x.dtype), alpha=1.0 / tau)
        mb = xb.amax(dim=1)
        xb.sub_(mb[:, None]).exp_()
        x[idx] = xb
        rs[idx] = xb.sum(dim=1)
        lse[idx] = mb + rs[idx].log()
    return rs, lse


def _sinkhorn_dtype(bank: torch.Tensor, targets: torch.Tensor, tau: float) -> torch.dtype:
    """:func:`sinkhorn_dtype` of two in-memory matrices."""
    smax = float(torch.linalg.vector_norm(bank, dim=1).max()) * float(torch.linalg.vector_norm(targets, dim=1).max())
    return sinkhorn_dtype(bank.dtype, smax, bank.shape[0], targets.shape[0], tau)


def sinkhorn_dtype(dtype: torch.dtype, smax: float, m: int, n: int, tau: float) -> torch.dtype:
    """float32 unless the potentials' rounding would exceed :data:`~hubnorm.kernels.PRECISION_TARGET`.

    The row potentials ``f`` are about ``-tau log(m n)`` and the column update subtracts two terms of about
    ``tau log n``: their float32 rounding (``eps tau log(m n)``) swamps the O(1) offsets at large ``tau``
    (``tau = 1e6``: errors of order 1). Then the iterations run in float64; a ``tau`` that even float64
    cannot serve (or so small that ``S / tau`` overflows) is refused with a ``ValueError`` naming ``tau``.
    ``smax``: the largest score magnitude (product of the largest row norms) of the ``m x n`` matrix.
    """
    log_mn = math.log(max(2, m)) + math.log(max(2, n))
    dt = working_dtype(dtype, tau * log_mn + smax, 2 * smax / tau)
    if dt is None:
        hi = PRECISION_TARGET / (2.0 ** -53 * log_mn)
        raise ValueError(f"tau={tau:g} is too extreme for Sinkhorn normalization with a {m} x "
                         f"{n} score matrix: use 1e-300 < tau <= {hi:.1e} (the potentials would "
                         "lose all precision or overflow even in float64)")
    return dt


#: below this, exp() of a column's largest entry risks losing the column's sum (float32: exp(-60) = 9e-27, far above
#: the smallest normal number even after summing; float64: exp(-600))
_UNDERFLOW = {torch.float32: -60.0, torch.float64: -600.0}


# ============================================================================== Sinkhorn as block reductions
class SinkhornIteration(Reduction):
    """One Sinkhorn iteration as one reduction over blocks of bank rows that span every column (DBSN Eq. 7-9).

    With ``x = (S + g) / tau`` (``g``: the previous column potentials, ``col_terms``): a block's row potentials
    ``f_i = tau log a - tau LSE_j x_ij`` are local to its rows (the row half-step), and its partial of the column
    half-step is ``LSE_{i in block}(x_ij + f_i / tau)`` (float64); merge: ``logaddexp``; finalize: the new
    ``g_j = tau log b - tau (LSE_i(x_ij + f_i / tau) - g_j / tau)``.
    """

    whole_rows = True
    read_only = True   # partial never modifies its score block (an engine may hand it a view of stored scores)

    def __init__(self, source: Scores, tau: float, work: torch.dtype, g: torch.Tensor):
        self.source, self.axis, self.tau = source, 0, float(tau)
        self.dtype = work
        self.col_terms = g

    def partial(self, s, chunk):
        # one exponential pass (as the fused kernel, :func:`sinkhorn_potentials`): with E = exp(x - rowmax) and
        # rs its row sums, x_ij + f_i / tau = log(E_ij) + log(w_i), w_i = a / rs_i, so the column log-sum-exp is
        # log (w @ E)_j. A column whose sum falls below w_min exp(-60) (float32; exp(-600) in float64) may have
        # lost entries to underflow: it is computed exactly from ``s``, which is never modified (read_only).
        g_tau = chunk.col_terms.to(s.dtype) / self.tau
        x = torch.add(g_tau, s, alpha=1.0 / self.tau)
        mx = x.amax(dim=1, keepdim=True)
        rs = x.sub_(mx).exp_().sum(dim=1)
        w = (1.0 / self.m) / rs
        col = torch.mv(x.T, w)
        low = col < float(w.min()) * math.exp(_UNDERFLOW[x.dtype])
        out = col.to(torch.float64).log_()
        if bool(low.any()):
            x_low = torch.add(g_tau[low], s[:, low], alpha=1.0 / self.tau).sub_(mx).add_(w.log()[:, None])
            out[low] = torch.logsumexp(x_low, dim=0).to(torch.float64)
        return out

    def prepare(self, engine):
        self.m = engine.size(self.source.rows)

    def merge(self, a, b):
        return torch.logaddexp(a, b)

    def finalize(self, p, n):
        g = self.col_terms.to(torch.float64)
        lse_col = p - g / self.tau
        return self.tau * math.log(1.0 / g.shape[0]) - self.tau * lse_col


class SinkhornRun(Iteration):
    """Log-domain Sinkhorn on ``source`` (bank rows x columns) for ``n_iter`` iterations (or until the largest change
    of ``g`` is below ``tol``), from ``g = 0``. In process: :func:`sinkhorn_potentials` (one fused pass per
    iteration with a score-block cache). Elsewhere: per iteration one :class:`SinkhornIteration` when a block
    can span every column, else the two half-steps as :class:`~hubnorm.blocks.LogSumExp` reductions (``f`` over
    the columns, kept beside the bank rows; then ``g`` over the rows). Result: ``(g, iterations run)``."""

    def __init__(self, source: Scores, tau: float, n_iter: int, tol, cache_bytes, cache_dtype, callback=None):
        self.source, self.tau, self.n_iter = source, float(tau), int(n_iter)
        self.tol = None if tol is None else float(tol)
        self.cache_bytes, self.cache_dtype = cache_bytes, cache_dtype
        self.callback = callback   # callback(t, g) after iteration t (float64 potentials); True stops the run

    def _work(self, engine) -> torch.dtype:
        rows, cols = self.source.rows, self.source.col_names
        smax = engine.score_bound(self.source)
        base = engine.base_dtype(self.source) if hasattr(engine, "base_dtype") else engine.dtype
        return sinkhorn_dtype(base, smax, engine.size(rows), sum(engine.size(c) for c in cols), self.tau)

    def fused(self, engine):
        bank, cols = engine.tensor(self.source.rows), engine.tensor(self.source.cols)
        shared = None
        if engine.sweep_bytes is not None and self.cache_bytes is not None:
            store = bank.dtype if self.cache_dtype is None else self.cache_dtype
            nbytes = bank.shape[0] * cols.shape[0] * torch.empty((), dtype=store).element_size()
            key = ("sinkhorn blocks", self.source, store, engine.block_bytes, self._work(engine))
            shared = engine.shared(key, nbytes, budget=self.cache_bytes)
        _, g, done = sinkhorn_potentials(bank, cols, self.tau, self.n_iter, self.tol, block_bytes=engine.block_bytes,
                                         cache_bytes=self.cache_bytes, cache_dtype=self.cache_dtype,
                                         shared_blocks=shared, callback=self.callback)
        return g, done

    def start(self, engine):
        self.work = self._work(engine)
        n = sum(engine.size(c) for c in self.source.col_names)
        return torch.zeros(n, dtype=torch.float64, device=engine.device), 0, False

    def step(self, engine, state):
        g, done, _ = state
        tau = self.tau
        if engine.spans(self.source.col_names):
            g_new = engine.reduce(SinkhornIteration(self.source, tau, self.work, g))
        else:
            m = engine.size(self.source.rows)
            log_a, log_b = math.log(1.0 / m), math.log(1.0 / g.shape[0])
            f_tau = engine.reduce(LogSumExp(self.source, 1.0 / tau, self.work, axis=1, col_terms=g / tau,
                                            post=lambda lse: log_a - lse))          # f / tau, beside the bank rows
            lse_col = engine.reduce(LogSumExp(self.source, 1.0 / tau, self.work, axis=0, row_terms=f_tau))
            g_new = tau * log_b - tau * lse_col
        g_new = g_new.to(self.work).to(torch.float64)   # the potentials live in the working dtype, as in process
        done += 1
        stop = done >= self.n_iter
        if self.tol is not None and float((g_new - g).abs().max()) < self.tol:
            stop = True
        if self.callback is not None and self.callback(done, g_new):
            stop = True
        return (g_new, done, stop), stop

    def result(self, engine, state):
        g, done, _ = state
        return g.to(engine.dtype), done


class SinkhornNormalization(Normalizer):
    """SN: offsets from the Sinkhorn column scaling of the bank-by-target matrix.

    Parameters:
        tau: entropic regularisation / temperature (0.01 in the DBSN code).
        n_iter: Sinkhorn iterations T (10 in Alg. A1; the paper does not say whether its tables ran to convergence).
        tol: optional early stop on the largest change of the offsets.
        cache_bytes: keep the bank x target score blocks in memory up to this many bytes (the whole matrix when it
            fits, else a leading share of its row blocks; the rest are recomputed every iteration).
        cache_dtype: dtype of that cache (None: the input dtype; ``torch.float16`` halves it, see
            :func:`sinkhorn_potentials` for its precision).

    Fitted attributes: ``offsets_`` (``hbar(t) = tau log beta``), ``n_iter_`` (iterations run).
    """

    name = "sn"
    display_name = "SN"
    paper_grid = {"tau": [0.005, 0.01, 0.015, 0.02, 0.025]}  # DBSN Fig. 6 range
    #: the Sinkhorn columns (DBSN: the targets and the target bank)
    columns = ("targets",)
    inputs = Inputs(fit=(Scores("query_bank", "targets"),))
    parameters = {"tau": Param("positive", doc="temperature"),
                  "n_iter": Param("int", doc="Sinkhorn iterations"),
                  "tol": Param("positive", optional=True, doc="early stop on the change of the offsets"),
                  "cache_bytes": Param("bytes"),
                  "cache_dtype": Param("dtype")}
    sweep_params = frozenset({"tau"})
    sweep_fixed = SWEEP_COMMON | {"n_iter", "tol", "cache_bytes", "cache_dtype"}
    example_params = {"tau": 0.02, "n_iter": 10}

    def __init__(self, tau=0.01, n_iter=10, tol=None, *, device=None, chunk_size=None, check_normalized=True,
                 block_bytes=None, cache_bytes=DEFAULT_CACHE_BYTES, cache_dtype=None):
        self._store(locals())

    @property
    def _source(self) -> Scores:
        return Scores("query_bank", self.columns if len(self.columns) > 1 else self.columns[0])

    def fit_blocks(self, engine):
        run = SinkhornRun(self._source, self.tau, self.n_iter, self.tol, self.cache_bytes, self.cache_dtype)
        g, done = engine.iterate(run)
        return self._fitted(g, done, engine.size("targets"))

    def _fitted(self, g, done, n):
        return {"offsets_": g[:n].clone(), "n_iter_": done}

    def plain(self, targets, query_bank=None, target_bank=None):
        """DBSN Alg. A1 in the log domain, dense: ``T`` alternating row and column log-sum-exp updates."""
        cols = targets if len(self.columns) == 1 else torch.cat([targets, target_bank])
        S, tau = query_bank @ cols.T, float(self.tau)
        m, n = S.shape
        g = torch.zeros(n, dtype=S.dtype, device=S.device)
        done = 0
        for _ in range(int(self.n_iter)):
            f = tau * math.log(1 / m) - tau * torch.logsumexp((S + g) / tau, dim=1)
            g_new = tau * math.log(1 / n) - tau * torch.logsumexp((S + f[:, None]) / tau, dim=0)
            done += 1
            delta, g = float((g_new - g).abs().max()), g_new
            if self.tol is not None and delta < float(self.tol):
                break
        return self._fitted(g, done, targets.shape[0])

    def offset_decomposition(self, query_bank, target_bank=None, *, block_bytes=None):
        """The column potential as a sum over the bank (:mod:`hubnorm.forensics`; DBSN Eq. 7-9): the Gibbs
        identity applied to the last column half-step ``g_j = -tau log n - tau LSE_i((s_ij + f_i) / tau)``, with
        weights the plan's column ``j`` normalised to 1 (``n pi_ij``), values ``-(s_ij + f_i + tau log m)`` and
        remainder ``tau KL(w || uniform_m) - tau log n``. The fit does not keep the row potentials ``f``, so they
        are recomputed here on the bank given; a bank whose column potentials are not the fitted offsets is
        refused (the explanation would be of another fit)."""
        t = self.targets_
        if len(self.columns) > 1:
            if target_bank is None:
                raise ValueError(f"{self.display_name}'s explanation needs the target_bank it was fitted with: "
                                 "pass target_bank=...")
            cols = torch.cat([t, target_bank])
        else:
            cols = t
        f, g, _ = sinkhorn_potentials(query_bank, cols, float(self.tau), int(self.n_iter), self.tol,
                                      block_bytes=self.block_bytes, cache_bytes=self.cache_bytes,
                                      cache_dtype=self.cache_dtype)
        scale = float(self.offsets_.abs().max()) + 1.0
        gap = float((g[:t.shape[0]].to(torch.float64) - self.offsets_.to(torch.float64)).abs().max())
        if gap > 1e-6 * scale:
            raise ValueError(f"the Sinkhorn potentials recomputed on this query_bank differ from the fitted offsets "
                             f"by {gap:.2e}: pass the same query_bank (and target_bank) the normalizer was fitted on")
        f, tau = f.to(torch.float64), float(self.tau)
        m, n = query_bank.shape[0], cols.shape[0]

        def explain(j: int):
            s = bank_column(query_bank, cols[j], block_bytes=block_bytes).to(torch.float64)
            w, logw = gibbs((s + f) / tau)
            kl = float((w * logw).sum()) + math.log(m)
            return w, -(s + f + tau * math.log(m)), {"tau KL(w || uniform)": tau * kl, "-tau log n": -tau * math.log(n)}
        return explain

    def iterate_offsets(self, engine, callback) -> None:
        """The iteration study's seam (:func:`hubnorm.sweeps.iteration_table`): the fit's own run on ``engine``
        (embeddings or stored score matrices) for ``n_iter`` iterations (``tol`` is ignored), calling
        ``callback(t, offsets, change)`` after iteration ``t`` with that iteration's target offsets (input dtype) and
        the largest change of all column potentials (the fit's own stopping test); the callback returns True to
        stop. The potentials after ``t`` iterations are those of a fit with ``n_iter = t``."""
        n = engine.size("targets")
        prev = [None]

        def record(it, g):
            g_prev = torch.zeros_like(g) if prev[0] is None else prev[0]
            change = float((g - g_prev).abs().max())
            prev[0] = g
            return callback(it, g[:n].to(engine.dtype), change)

        engine.iterate(SinkhornRun(self._source, self.tau, self.n_iter, None, self.cache_bytes, self.cache_dtype,
                                   callback=record))


class DualBankSinkhornNormalization(SinkhornNormalization):
    """DBSN: SN of the query bank against ``[targets ; target_bank]``; the first n column potentials are the offsets.

    Use all training targets as ``target_bank`` even when the query bank is subsampled (DBSN, Sec. 4.3).
    Fitted attributes: ``offsets_``, ``bank_offsets_`` (potentials of the target-bank items), ``n_iter_``.
    """

    name = "dbsn"
    display_name = "DBSN"
    columns = ("targets", "target_bank")
    inputs = Inputs(fit=(Scores("query_bank", ("targets", "target_bank")),))

    def _fitted(self, g, done, n):
        return {"offsets_": g[:n].clone(), "bank_offsets_": g[n:].clone(), "n_iter_": done}
