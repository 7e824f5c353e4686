"""The sweep engine behind :func:`hubnorm.grid_search` (``engine="sweep"``): NNN App. B selection at the cost of
about one evaluation, for any method whose file states a one-pass path. Call :func:`hubnorm.grid_search`; this
module is its named fast seam. It never knows a method's name.

The plain engine refits and re-evaluates every grid point. The sweep gives *the same numbers* (bit-identical
offsets, identical ranks and metrics; ``tests/test_selection.py`` and the generic checks) far faster:

* fitting: :func:`sweep_table` builds one in-process engine (:class:`hubnorm.engine.LocalEngine`) over the
  validation task and calls the method's ``fit_grid(norms, engine)``. The engine keeps score blocks shared by
  every grid point (``engine.shared``: the similarity blocks of a temperature sweep, Sinkhorn's score blocks);
  a method whose points share more says so in its own ``fit_grid`` (NNN: every ``(alpha, k)`` from one
  top-``max(k)``; DualIS: one log-mean-exp per bank and beta).
* ranking offset methods: :func:`offset_sweep_ranks` gives the exact rank of every query under every setting
  from one computation of the raw score blocks. :func:`offset_lines` groups the settings into *lines* (settings
  that differ in one numeric parameter and whose offsets lie on a segment, measured: NNN's ``-alpha b_k`` at a
  fixed ``k``). Along a line a target's margin over a positive is linear in the position, so one pass per line
  finds the targets that can beat the positive at either end; the ends' margins decide the settings in between,
  and the few undecided (setting, target) pairs are counted with the evaluator's arithmetic (``fl(S + h)``, ties
  by target index). A float slack (unit roundoff and the measured distance from the segment) keeps every bound
  exact; ``tests/test_sweep_ranks.py`` proves the ranks equal to the dense ones (ties, unsorted grids, 0, i2t).
  ``MnR`` is in the table when ``full=True`` (the ranks are exact either way).
* ranking other methods (DIS-like gates): the raw score blocks are computed once and every point's
  ``normalize_scores`` is applied to a copy.
* :func:`iteration_table`: any method with an ``iterate_offsets`` seam (SN, DBSN) reads R@1 after ``T = 1, 3, 10,
  ...`` iterations and "to convergence" off one run continued from checkpoint to checkpoint (an iteration depends
  on the column potentials alone, so the continued run is the same computation as a fresh fit with
  ``n_iter = T``): the cost of the largest ``T`` instead of their sum.
"""

from __future__ import annotations

import math
import time
from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np
import pandas as pd
import torch

from ._validation import as_embeddings, check_positive_int
from .engine import LocalEngine
from .evaluation import positive_ranks, summarize_rank_rows, summarize_ranks
from .kernels import counts_namespace, scratch_bytes
from .normalizers.base import Identity, fit_on_engine
from .progress import progress
from .provenance import bank_mark, note_result
from .registry import NORMALIZERS, make_normalizer
from .retrieval import RetrievalTask

__all__ = ["sweep_table", "iteration_table", "offset_sweep_ranks", "offset_lines", "can_sweep", "SweepEngine",
           "SWEEP_CACHE_BYTES"]

#: The sweeps keep score blocks in memory up to this many bytes per score matrix; beyond it they are recomputed.
SWEEP_CACHE_BYTES = 2 * 2**30

_BIG = torch.iinfo(torch.int64).max


class SweepEngine(LocalEngine):
    """The in-process engine of one sweep (:func:`sweep_table`): a :class:`~hubnorm.engine.LocalEngine` over the
    same inputs that keeps score blocks across grid points (``shared``) and what every point asks again:

    * ``max_norm``: the inputs' largest row norms (every point's working-dtype rule reads them);
    * the similarity blocks of a temperature sweep (IS, DIS, DualIS): each :class:`~hubnorm.blocks.LogMeanExp`
      reads them through :func:`hubnorm.kernels.logsumexp_similarity` (``shared_blocks``), the kernel of a
      single fit, so a sweep's offsets are the bits of separate fits (``tests/test_sweep_engine.py`` and
      ``tests/test_selection.py`` check them).

    Anything else runs as in :class:`~hubnorm.engine.LocalEngine`.
    """

    def __init__(self, engine: LocalEngine):
        if engine.matrices:
            raise ValueError("a sweep's engine runs over embeddings; an engine over stored score matrices fits each "
                             "grid point on its own (RetrievalTask.fit)")
        super().__init__(engine.inputs, block_bytes=engine.block_bytes, sweep_bytes=engine.sweep_bytes,
                         plain=engine.plain, backend=engine.backend, host=engine.host)
        self._norms: Dict[object, float] = {}

    def max_norm(self, name) -> float:
        if name not in self._norms:
            self._norms[name] = super().max_norm(name)
        return self._norms[name]


def _identity(task: RetrievalTask, device, check_normalized) -> Identity:
    return Identity(device=device, check_normalized=check_normalized).fit(task.targets)


def _segment(H: torch.Tensor, a: int, b: int, members: Sequence[int]):
    """Where the offsets ``H[g]`` of ``members`` lie on the segment from ``H[a]`` to ``H[b]``: their positions
    ``lam`` (float64, the projection clamped to [0, 1]) and the largest distance (max norm) of a member from its
    point ``H[a] + lam (H[b] - H[a])`` on the segment."""
    A, B = H[a].double(), H[b].double()
    D = B - A
    x = H[torch.tensor(list(members), device=H.device)].double() - A
    # the products in units of a power of two near the largest entry (exact scaling): no overflow for any finite
    # offsets, and lam does not depend on the unit
    big = max(float(D.abs().max()), float(x.abs().max()) if len(members) else 0.0)
    unit = 2.0 ** math.frexp(big)[1] if 0.0 < big < math.inf else 1.0
    Du = D / unit
    dd = float(Du @ Du)
    lam = torch.zeros(len(members), dtype=torch.float64, device=H.device) if dd == 0.0 else \
        ((x / unit) @ Du / dd).clamp_(0, 1)
    worst = float(torch.addr(x, lam, D, alpha=-1.0).abs().max()) if len(members) else 0.0
    return lam.tolist(), worst


def offset_lines(points: Sequence[Mapping[str, object]], H: torch.Tensor) -> List[tuple]:
    """Group the settings of a grid into *lines*: settings that differ in one numeric parameter only and whose
    offsets lie on the segment between the two extreme values of that parameter (NNN at a fixed ``k``: ``-alpha
    b_k`` is linear in ``alpha``). Returns ``(a, b, members)`` tuples (the ends and every setting of the line);
    settings that form no line are ``(g, g, [g])``. Only a speed choice: :func:`offset_sweep_ranks` is exact for
    any grouping (it measures each line's distance from its segment and widens its bounds by it)."""
    G = H.shape[0]
    alone = [(g, g, [g]) for g in range(G)]
    if G < 3 or not points:
        return alone
    scale = float(H.abs().max()) + 1.0
    tol = 64 * torch.finfo(H.dtype).eps * scale
    best = None
    for name in points[0]:
        vals = [p.get(name) for p in points]
        if len(set(map(repr, vals))) < 3 or not all(isinstance(v, (int, float, np.integer, np.floating))
                                                    and not isinstance(v, bool) for v in vals):
            continue
        groups: Dict[str, List[int]] = {}
        for g, p in enumerate(points):
            groups.setdefault(repr(sorted((k, repr(v)) for k, v in p.items() if k != name)), []).append(g)
        lines = []
        for members in groups.values():
            a = min(members, key=lambda g: float(vals[g]))
            b = max(members, key=lambda g: float(vals[g]))
            if _segment(H, a, b, members)[1] > tol:
                break
            lines.append((a, b, members))
        else:
            if best is None or len(lines) < len(best):
                best = lines
    return best or alone


def offset_sweep_ranks(task: RetrievalTask, offsets: torch.Tensor, *, lines: Optional[Sequence[tuple]] = None,
                       chunk_size: Optional[int] = None, device=None, check_normalized: bool = True) -> np.ndarray:
    """Exact ranks (0-based, tie rule of :func:`hubnorm.evaluation.positive_ranks`) of every query of ``task`` under
    every offset vector (rows of ``offsets``, ``G x n``): a ``(G, m)`` int array equal to ``positive_ranks`` of
    ``S + offsets[g]`` for every ``g``, computed from the raw score blocks once.

    ``lines``: ``(a, b, members)`` groups of settings (:func:`offset_lines`; None: every setting alone). Along a
    line, ``h = (1 - lam) h_a + lam h_b + rho`` with ``|rho| <= r`` (measured here), so the margin
    ``(S_ij + h_j) - (S_ip + h_p)`` of target ``j`` over positive ``p`` is within ``2 r`` of a linear function of
    ``lam``; over the best of several positives it is concave. Per score block, for all lines together:

    1. candidates: a target whose margin over one positive ``p0`` (the best raw one) is above ``-2 s`` at an end of
       a line may beat the best positive somewhere on it; a target below it at both ends trails ``p0``, and so the
       best positive, at every setting of the line. One dense pass over the block finds the union over all lines
       (``S_ij + W[p0_i, j] > S_ip0``, ``W[p, j]`` the largest ``h_e[j] - h_e[p] + 2 s`` over the ends ``e``, one
       row per distinct ``p0``, widened by its own rounding); every line then works on that short list;
    2. per line and candidate, the margins at the two ends (over ``p0``: an upper bound; over the best positive:
       a lower bound; the same when every query has one positive) give where the margin crosses ``+-2 s``, and so
       the settings where the candidate surely beats the best positive (a prefix or a suffix of the line, read off
       a lookup table of the line's positions by :func:`_sure_codes`; counted per query by one histogram, no
       per-setting work), those where it surely does not, and the few in between (next to a crossing), which are
       counted exactly with the evaluator's arithmetic (``fl(S + h)``, ties by target index).

    Positives are never candidates (none is ever counted: the best one is the reference, the others trail it or
    tie with a larger index). The slack ``s = 8 eps X + 2 r`` (``eps``: the dtype's machine epsilon, twice its
    unit roundoff; ``X``: a bound of ``|S| + |h|``; ``r``: the line's measured distance from its segment) covers
    the rounding of the scores and of the margins; "surely" means at least ``2 s`` beyond, with the crossings
    located conservatively, so a setting decided from the ends is decided as the evaluator would decide it.
    Raises ``ValueError`` for non-finite offsets (the evaluator ranks no non-finite score) and when ``X`` is within
    a factor 2**14 of the working dtype's largest value (the scaled margins would overflow).
    """
    ident = _identity(task, device, check_normalized)
    t = ident.targets_
    if not isinstance(offsets, torch.Tensor):
        raise TypeError(f"offsets must be a torch.Tensor (settings x targets); got {type(offsets).__name__}")
    if offsets.ndim != 2 or offsets.shape[1] != t.shape[0]:
        raise ValueError(f"offsets must be (settings, {t.shape[0]}); got {tuple(offsets.shape)}")
    if not bool(torch.isfinite(offsets).all()):
        raise ValueError("offsets must be finite: a non-finite score has no rank (hubnorm.positive_ranks refuses it)")
    H = offsets.to(device=t.device, dtype=t.dtype)
    G, n = H.shape
    lines = [(g, g, [g]) for g in range(G)] if lines is None else [(int(a), int(b), [int(g) for g in m])
                                                                 for a, b, m in lines]
    if sorted(g for _, _, m in lines for g in m) != list(range(G)):
        raise ValueError("lines must hold every setting exactly once")
    if any(not m or not (0 <= a < G and 0 <= b < G) for a, b, m in lines):
        raise ValueError(f"every line (a, b, members) needs members and ends a, b among the {G} settings")
    if G == 0:
        return np.empty((0, task.positives.n_queries), dtype=np.int64)
    dev, dt = t.device, t.dtype
    u = torch.finfo(dt).eps  # 2 x the unit roundoff: a margin of its own
    q = as_embeddings(task.queries, "queries", device=dev, dtype=dt, dim=t.shape[1], check_normalized=False)
    smax = float(torch.linalg.vector_norm(q, dim=1).max()) * float(torch.linalg.vector_norm(t, dim=1).max())
    X = 1.001 * smax + float(H.abs().max()) + 1e-30
    # the margins (< 3 X) and their _sure_codes scaling (2**10) stay finite; "not <=" also refuses inf (offsets
    # beyond the working dtype)
    if not X <= torch.finfo(dt).max / 2**14:
        raise ValueError(f"scores plus offsets reach {X:.3g}, too close to the largest {dt} "
                         f"({torch.finfo(dt).max:.3g}) to rank their differences: rescale the offsets or work in "
                         "float64")
    # per line: its members sorted by position on the segment, the level 2 s, its ends' rows in HE (a, and b when it
    # has two) and its position tables (_position_tables)
    geo, ends, level_of_end = [], [], []
    tables: Dict[tuple, tuple] = {}
    for a, b, members in lines:
        lams, resid = _segment(H, a, b, members)
        order = sorted(range(len(members)), key=lambda i: lams[i])
        lam = tuple(lams[i] for i in order)
        level = 2 * (8 * u * X + 2 * resid)
        ea = len(ends)
        ends += [a] if a == b else [a, b]
        level_of_end += [level] * (len(ends) - ea)
        key = _position_buckets(lam)   # lines whose positions share their buckets share their tables
        if key not in tables:
            tables[key] = _position_tables(key, dev)
        geo.append((ea, len(ends) - 1, torch.tensor([members[i] for i in order], device=dev), len(lam), level,
                    tables[key]))
    ends_t = torch.tensor(ends, device=dev)
    HE = H.index_select(0, ends_t)                            # E x n: the offsets at the ends
    lev_e = torch.tensor(level_of_end, dtype=dt, device=dev)
    # the union test's own rounding: W and S + W are within a few roundings of their exact values (|.| <= Y)
    widen = 32 * u * (2 * X + 2 * max(level_of_end))
    pos = task.positives
    q_of_all = pos.query_of_entry
    out = np.empty((G, pos.n_queries), dtype=np.int64)
    Hf = H.reshape(-1)
    buf = mask = None
    for q0, S in ident.iter_scores(task.queries, chunk_size):
        bq = S.shape[0]
        q1 = q0 + bq
        lo, hi = pos.indptr[q0], pos.indptr[q1]
        single = hi - lo == bq   # one positive per query (every query has at least one)
        rows = torch.from_numpy(q_of_all[lo:hi] - q0).to(dev)
        cols = torch.from_numpy(pos.indices[lo:hi]).to(dev)
        s_pos = S[rows, cols]
        # the best positive of every setting, as positive_ranks finds it: fl(S + h), first column among ties
        pv = s_pos[None, :] + H[:, cols]
        if single:   # rows are 0 .. bq - 1 in order: each query's one positive is its best
            best = pv
            p0, sp0 = cols, s_pos
        else:
            r2 = rows[None, :].expand(G, -1)
            best = torch.full((G, bq), -torch.inf, dtype=dt, device=dev).scatter_reduce(1, r2, pv, "amax")
            is_best = pv == best.gather(1, r2)
            best_col = torch.full((G, bq), _BIG, dtype=torch.long, device=dev).scatter_reduce(
                1, r2, torch.where(is_best, cols[None, :].expand(G, -1), torch.full_like(r2, _BIG)), "amin")
            # one positive per query for the candidate bounds: the best raw score and its first column
            raw_best = torch.full((bq,), -torch.inf, dtype=dt, device=dev).scatter_reduce(0, rows, s_pos, "amax")
            p0 = torch.full((bq,), _BIG, dtype=torch.long, device=dev).scatter_reduce(
                0, rows, torch.where(s_pos == raw_best[rows], cols, torch.full_like(cols, _BIG)), "amin")
            sp0 = S.gather(1, p0[:, None])[:, 0]
        bestf = best.reshape(-1)
        best_colf = None if single else best_col.reshape(-1)
        # 1. the union of every line's candidates in one pass: S_ij + W[p0_i, j] > S_ip0 - widen
        P, p_of_q = torch.unique(p0, return_inverse=True)
        W = torch.full((P.numel(), n), -torch.inf, dtype=dt, device=dev)
        tmp = torch.empty_like(W)
        for e in range(HE.shape[0]):
            torch.sub(HE[e][None, :], (HE[e, P] - lev_e[e])[:, None], out=tmp)
            torch.maximum(W, tmp, out=W)
        # in row chunks of about 2 MB (the whole block off the CPU), through one scratch block (a fresh block-sized
        # temporary costs page faults)
        step = max(1, scratch_bytes(dev, _UNION_CHUNK_BYTES) // (n * S.element_size()))
        if buf is None or buf.shape[1] != n or buf.shape[0] < min(step, bq):
            buf = torch.empty((min(step, bq), n), dtype=dt, device=dev)
            mask = torch.empty(buf.shape, dtype=torch.bool, device=dev)
        thr = sp0 - widen
        bounds = torch.searchsorted(rows, torch.arange(0, bq + step, step, device=dev).clamp_(max=bq)).tolist()
        flats = []
        for j, i0 in enumerate(range(0, bq, step)):
            i1 = min(bq, i0 + step)
            sb, mb = buf[:i1 - i0], mask[:i1 - i0]
            torch.index_select(W, 0, p_of_q[i0:i1], out=sb)
            torch.gt(sb.add_(S[i0:i1]), thr[i0:i1, None], out=mb)
            p_lo, p_hi = bounds[j], bounds[j + 1]              # the positives of these rows (rows is sorted)
            mb[rows[p_lo:p_hi] - i0, cols[p_lo:p_hi]] = False  # a positive is never counted (the best is the reference)
            flats.append(_flat_nonzero(mb.view(-1)).add_(i0 * n))
        flat = torch.cat(flats) if len(flats) > 1 else flats[0]
        r = torch.div(flat, n, rounding_mode="floor")
        c = flat - r * n
        v = S.reshape(-1).index_select(0, flat)
        # the margins of the union at a line's ends (computed per line into two reused rows): over p0, F_e =
        # fl(fl(S + h_e) - fl(S_ip0 + h_e[p0])), and over the best positive when some query has several
        N = c.numel()
        F2 = torch.empty((2, N), dtype=dt, device=dev)
        G2 = None if single else torch.empty_like(F2)
        at_p0 = sp0[None, :] + HE.index_select(1, p0)         # fl(S_ip0 + h_e[p0]), ends x queries
        best_e = None if single else best.index_select(0, ends_t)
        if counts_namespace(dev) is np:   # r is sorted: a query's value repeated over its candidates (x[r])
            reps = np.bincount(r.numpy(), minlength=bq)
            at_r = lambda x: torch.from_numpy(np.repeat(x.numpy(), reps))  # noqa: E731
        else:
            at_r = lambda x: x.index_select(0, r)  # noqa: E731

        def margins(ea, eb):
            for j, e in enumerate(range(ea, eb + 1)):
                xe = torch.index_select(HE[e], 0, c, out=F2[j]).add_(v)   # fl(S + h_e)
                if G2 is not None:
                    torch.sub(xe, at_r(best_e[e]), out=G2[j])
                xe.sub_(at_r(at_p0[e]))
            last = eb - ea
            return F2[0], F2[last], (None, None) if G2 is None else (G2[0], G2[last])

        # 2. per line: how many of its positions each candidate surely beats the best positive at (a prefix or a
        #    suffix of the line) and how many it surely trails p0 at, as codes (_sure_codes); the rest are counted
        #    exactly below
        ranks = torch.empty((G, bq), dtype=torch.long, device=dev)
        undecided = []
        hist_base: Dict[int, torch.Tensor] = {}
        for ea, eb, srt, L, level, (t_ahead, t_behind) in geo:
            fA, fB, (gA, gB) = margins(ea, eb)
            if single:
                ahead, behind = _sure_codes(fA, fB, level, [(t_ahead, 1), (t_behind, -1)])
            else:
                (ahead,), (behind,) = _sure_codes(gA, gB, level, [(t_ahead, 1)]), _sure_codes(
                    fA, fB, level, [(t_behind, -1)])
            # per query, a histogram of the ahead codes gives the count at every position: a suffix of c positions
            # covers position k when c >= L - k, a prefix when c >= k + 1
            if L not in hist_base:
                hist_base[L] = r * (2 * (L + 1))
            hist = torch.bincount(hist_base[L] + ahead, minlength=bq * 2 * (L + 1))
            tail = hist.view(bq, 2, L + 1).flip(2).cumsum(2)      # tail[i, p, j]: codes of direction p >= L - j
            ranks.index_copy_(0, srt, (tail[:, 0, :L] + tail[:, 1, :L].flip(1)).T)
            if single:   # both codes of a candidate have the same direction: undecided somewhere when ahead < behind
                und = _flat_nonzero(ahead < behind)
            else:
                und = _flat_nonzero(ahead.remainder(L + 1) < behind.remainder(L + 1))
            if und.numel():   # decode the counts and whether each is a prefix
                ca, cb = ahead.index_select(0, und).long(), behind.index_select(0, und).long()
                ap, bp = ca > L, cb <= L
                ca -= ap * (L + 1)
                cb = L - cb + (~bp) * (L + 1)
                pre = torch.maximum(torch.where(ap, ca, 0), torch.where(bp, cb, 0))
                width = (L - torch.maximum(torch.where(ap, 0, ca), torch.where(bp, 0, cb)) - pre).clamp_min_(0)
                k = torch.repeat_interleave(pre - (torch.cumsum(width, 0) - width), width)
                k += torch.arange(k.numel(), device=dev)      # positions [pre, pre + width) of the line
                undecided.append((torch.repeat_interleave(und, width), srt.index_select(0, k)))
        if undecided:   # the settings in between, counted with the evaluator's arithmetic
            cu, g = (torch.cat(x) for x in zip(*undecided))
            r_, c_ = r.index_select(0, cu), c.index_select(0, cu)
            x = v.index_select(0, cu) + Hf.index_select(0, g * n + c_)     # fl(S + h)
            bv = bestf.index_select(0, g * bq + r_)
            bc = cols.index_select(0, r_) if single else best_colf.index_select(0, g * bq + r_)
            beat = (x > bv) | ((x == bv) & (c_ < bc))
            ranks.view(-1).index_add_(0, g * bq + r_, beat.long())
        out[:, q0:q1] = ranks.cpu().numpy()
    return out


def _flat_nonzero(mask: torch.Tensor) -> torch.Tensor:
    """The indices of the true entries of a 1-d bool tensor, ascending (int64): ``mask.nonzero().squeeze(1)``, by
    ``numpy.flatnonzero`` on the CPU side of :func:`~hubnorm.kernels.counts_namespace`."""
    if counts_namespace(mask.device) is np:
        return torch.from_numpy(np.flatnonzero(mask.numpy()))
    return mask.nonzero().squeeze(1)


#: Scratch bytes per row chunk of the candidate pass of :func:`offset_sweep_ranks` on the CPU (cache-sized; other
#: devices: :func:`hubnorm.kernels.scratch_bytes`). The candidates do not depend on the chunking.
_UNION_CHUNK_BYTES = 2 * 2**20

#: Buckets per unit of a line's position in :func:`_position_tables` (a power of two: scaling by it is exact).
_BUCKETS = 1024


def _position_buckets(lam: Sequence[float]) -> tuple:
    """Per position ``lam_k``, the last bucket ``b`` whose table entry counts it (:func:`_position_tables`): ``lam_k
    >= (b + 2) / M - 2`` when ``b <= floor((lam_k + 2) M) - 2``, and ``lam_k <= 2 - (b + 2) / M`` when ``b <=
    floor((2 - lam_k) M) - 2`` (up to the rounding of ``lam_k +- 2``, far inside the spare bucket). Two tuples of
    ints: the tables depend on the positions through these alone."""
    lam_np = np.asarray(lam, dtype=np.float64)
    return (tuple(np.floor((lam_np + 2) * _BUCKETS).astype(np.int64) - 2),
            tuple(np.floor((2 - lam_np) * _BUCKETS).astype(np.int64) - 2))


def _position_tables(buckets: tuple, device) -> tuple:
    """The two lookup tables of :func:`_sure_codes` for a line's sorted positions ``lam`` (in [0, 1]), given by
    their :func:`_position_buckets`. For a threshold ``x`` in bucket ``b = floor((x + 2) M)`` of ``[-2, 2]`` (``M`` =
    :data:`_BUCKETS`), let ``above[b]`` be the number of positions surely above ``x`` (``lam_k >= (b + 2) / M - 2``:
    past the next bucket, as ``x`` may be off by its rounding) and ``below[b]`` the number surely below ``-x`` (``lam_k
    <= 2 - (b + 2) / M``). Entry ``b`` of a table is for a rising margin, entry ``K + b`` (``K = 4 M + 1``) for a
    falling one; a code tells a count and its direction, as the falling entries carry ``L + 1`` more (``L = len(lam)``):

    * ``ahead``: ``above[b]`` | ``below[b] + L + 1`` (rising: a suffix above ``x``; falling: a prefix below ``-x``);
    * ``behind``, ``L`` minus the count (so that a candidate is undecided somewhere when its ahead code is the
      smaller): ``L - below[b]`` | ``L - above[b] + L + 1`` (rising: a prefix; falling: a suffix)."""
    L = len(buckets[0])
    nb = 4 * _BUCKETS + 1

    def at_least(last):   # per bucket b: how many positions have last[k] >= b
        hist = np.bincount(np.clip(last, -1, nb - 1) + 1, minlength=nb + 1)
        return np.cumsum(hist[::-1])[::-1][1:]

    last_above, last_below = (np.asarray(x, dtype=np.int64) for x in buckets)
    above, below = at_least(last_above), at_least(last_below)
    dtype = torch.uint8 if 2 * L + 1 < 256 else torch.int16 if 2 * L + 1 < 2**15 else torch.int32
    ahead = np.concatenate([above, below + L + 1])
    behind = np.concatenate([L - below, L - above + L + 1])
    return tuple(torch.from_numpy(x).to(device=device, dtype=dtype) for x in (ahead, behind))


def _sure_codes(A: torch.Tensor, B: torch.Tensor, level: float, tables: Sequence[tuple]) -> List[torch.Tensor]:
    """For margins ``A``, ``B`` at the two ends of a line (1-d, one entry per candidate) and one of the line's
    tables (:func:`_position_tables`), given as ``(table, sign)`` pairs: for ``sign = +1`` and the ``ahead`` table,
    at how many of the line's positions the margin ``A + lam (B - A)`` is surely at least ``level``; for ``sign =
    -1`` and the ``behind`` table, at how many it is surely at most ``-level``. One code per pair, the table's: a
    count and its direction (the positions are a prefix or a suffix of the line, as the margin is linear in
    ``lam``).

    The margin meets ``sign * level`` at one position. With ``x = (level - sign A) / |B - A|``, the positions of
    ``sign = +1`` are those above ``x`` when the margin rises and those below ``-x`` when it falls; ``sign = -1``
    the other way round. ``x`` is computed in float32 (float64 for a float64 line) with ``level`` rounded up, so it
    is within a few units of its roundoff of the exact crossing, and its bucket's table entry counts only
    positions past the next bucket: no position is called sure that is not. A flat margin (``B == A``) gives ``x =
    +-inf`` (no position or every position), and no position when it is exactly at the level (``0 / 0``).
    Positions within about two buckets of the crossing are left undecided; the caller counts them exactly."""
    wt = torch.float64 if A.dtype == torch.float64 else torch.float32
    A, B = A.to(wt), B.to(wt)
    lev = torch.tensor(level, dtype=wt)
    if float(lev) < level:
        lev = torch.nextafter(lev, torch.tensor(math.inf, dtype=wt))
    lev = float(lev)                                       # exact in wt: no conversion rounds it again
    M = _BUCKETS
    d = B - A
    bits = 63 if wt == torch.float64 else 31
    K = tables[0][0].numel() // 2
    falls = d.view(torch.int64 if bits == 63 else torch.int32).bitwise_right_shift(bits)   # -1 when d < 0 (or -0.0)
    falls &= K                                             # the falling half of a table
    ad = d.abs_()
    lev_m = torch.tensor(M * lev, dtype=wt)                # M level: a power of two, exact
    out = []
    for table, sign in tables:
        # M x = (M level - sign M A) / |B - A|, the same bits as M fl(x): M A and M level are exact
        x = torch.sub(lev_m, A, alpha=sign * M).div_(ad).nan_to_num_(nan=math.inf, posinf=math.inf, neginf=-math.inf)
        b = x.clamp_(-2 * M, 2 * M).add_(2 * M).to(falls.dtype)
        b += falls
        out.append(table.index_select(0, b))
    return out


def _evaluate_offsets(task, H: torch.Tensor, ks, full, chunk_size, device, check_normalized, lines=None
                      ) -> List[Dict[str, float]]:
    ranks = offset_sweep_ranks(task, H, lines=lines, chunk_size=chunk_size, device=device,
                               check_normalized=check_normalized)
    return _rank_rows(ranks, ks, full)


def _rank_rows(ranks: np.ndarray, ks, full: bool) -> List[Dict[str, float]]:
    """The metrics of each row of ``(settings, queries)`` ranks: R@K for ``ks`` and MdR (MnR too with ``full``)."""
    rows = summarize_rank_rows(ranks, tuple(int(k) for k in ks))
    if not full:
        for res in rows:
            res.pop("MnR")
    return rows


def can_sweep(method: str, grid: Mapping[str, Sequence], fixed: Mapping[str, object]) -> bool:
    """Whether ``method``'s file states a one-pass path for this grid: its grid parameters are within the class's
    ``sweep_params`` and its fixed parameters within ``sweep_fixed``."""
    cls = NORMALIZERS[method]
    return bool(cls.sweep_params) and set(grid) <= cls.sweep_params and set(fixed) <= cls.sweep_fixed


def _bank(task: RetrievalTask, query_aware: bool):
    return task.queries if query_aware else task.query_bank


def sweep_table(task: RetrievalTask, method: str, points: Sequence[Mapping[str, object]], *,
                fixed: Optional[Mapping[str, object]] = None, metric_ks: Sequence[int] = (1, 5, 10),
                full: bool = False, query_aware: bool = False) -> pd.DataFrame:
    """Every grid point of ``method`` (``points``: parameter dicts, validated by the caller) fitted by one
    ``fit_grid`` on a shared engine and evaluated on ``task``: one row per point, in order, with its parameters,
    ``R@K`` for ``metric_ks``, ``MdR`` (and ``MnR`` with ``full=True``, or always for methods that are not offset
    methods): the values of fitting ``make_normalizer(method, **fixed, **point)`` and evaluating it."""
    fixed = dict(fixed or {})
    norms = [make_normalizer(method, **fixed, **p) for p in points]
    ref = norms[0]
    cls = type(ref)
    local = ref.local_engine(task.targets, _bank(task, query_aware), task.target_bank, sweep_bytes=SWEEP_CACHE_BYTES)
    engine = SweepEngine(local)
    fit_on_engine(norms, engine, targets=engine.tensor("targets"))   # the method's fit_grid: one pass for the grid
    if cls.is_offset:
        H = torch.stack([n.offsets_ for n in norms])
        rows = _evaluate_offsets(task, H, metric_ks, full, ref.chunk_size, engine.device, ref.check_normalized,
                                 lines=offset_lines(points, H))
    else:
        rows = _evaluate_fitted(task, norms, metric_ks)
    mark = marked_rows(rows, ref, task, None)   # the fit recorded its banks
    return pd.DataFrame([{**p, **r, "bank": mark} for p, r in zip(points, rows)])


def _evaluate_fitted(task, norms, metric_ks) -> List[Dict[str, float]]:
    """Metrics of fitted normalizers that are not offset methods: the raw score blocks once, every point's
    ``normalize_scores`` on a copy (the arithmetic of ``Normalizer._score_block``)."""
    ref = norms[0]
    ident = _identity(task, ref.device_, ref.check_normalized)
    q = as_embeddings(task.queries, "queries", device=ref.device_, dtype=ref.targets_.dtype,
                      dim=ref.targets_.shape[1], check_normalized=ref.check_normalized)
    blocks = list(ident.iter_scores(task.queries, ref.chunk_size))
    rows = []
    for norm in norms:
        src = _ReplayScores(blocks, lambda q0, s, norm=norm: norm.normalize_scores(s.clone(), q[q0:q0 + s.shape[0]]))
        rows.append(summarize_ranks(positive_ranks(src, task.positives, task.queries), tuple(metric_ks)))
    return rows


def iteration_table(task: RetrievalTask, method: str, iterations: Sequence[int], *, tau: float = 0.01,
                    converged: Optional[int] = None, tol: Optional[float] = None, query_aware: bool = False,
                    fixed: Optional[Mapping[str, object]] = None, metric_ks: Sequence[int] = (1,),
                    show_progress: bool = False) -> pd.DataFrame:
    """R@K of an iterative method (SN, DBSN: any method whose class has ``iterate_offsets``) after each number of
    iterations ``T`` in ``iterations`` and, when ``converged`` is given, "to convergence" (at most ``converged``
    iterations, stopping at the first whose largest change of the potentials is below ``tol``), all read off one
    run.

    Equal to fitting ``make_normalizer(method, tau=tau, n_iter=T, **fixed)`` once per ``T`` (and once with
    ``n_iter=converged, tol=tol``): an iteration depends on the previous column potentials alone, so the potentials
    after ``T`` iterations of the longest run are those of a fit with ``n_iter=T``; the convergence test is the
    fit's own (largest change of the potentials below ``tol``, same arithmetic). The run is the fit's own, on the
    engine a fit of the task reads (its embeddings, or its stored score matrices). ``tests/test_selection.py``
    proves the offsets identical. Cost: the largest ``T`` (or the convergence point) instead of the sum of all ``T``.

    Returns one row per setting: ``setting`` ("T=10" or "to convergence"), ``T max``, ``iterations run``, the
    metrics, and ``fit_s`` (seconds from the start of the run to that setting's potentials: a fresh fit's time).
    """
    supported = [n for n, c in NORMALIZERS.items() if hasattr(c, "iterate_offsets")]
    if method not in supported:
        raise ValueError(f"iteration_table supports {' and '.join(repr(n) for n in supported)}; got method={method!r}")
    iterations = [check_positive_int(T, "iterations") for T in iterations]
    if converged is not None:
        converged = check_positive_int(converged, "converged")
        if tol is None:
            raise ValueError("converged needs tol (the early-stopping threshold on the offsets), e.g. tol=1e-6")
    if not iterations and converged is None:
        raise ValueError("iterations is empty and converged is None: give at least one number of iterations")
    fixed = dict(fixed or {})
    for name in ("tau", "n_iter", "tol"):
        if name in fixed:
            raise ValueError(f"fixed must not set {name!r}: it is an argument of iteration_table")
    total = max(iterations + [converged or 0])   # iterations of the one run (>= 1: one of the two is given)
    norm = make_normalizer(method, tau=tau, n_iter=total, tol=tol, **fixed)
    if task.kind == "embeddings":
        engine = norm.local_engine(task.targets, _bank(task, query_aware), task.target_bank)
    else:   # the stored matrices RetrievalTask.fit reads, checked as a fit checks them
        engine = (task.test_as_bank() if query_aware else task).engine
        norm.check_params()
        norm.check_inputs(engine)
    wanted = set(iterations)
    last = max(iterations) if iterations else 0
    at: Dict[int, tuple] = {}  # T -> (offsets, seconds since the start)
    conv: list = []  # [(offsets, iterations run, seconds)] of the early-stopping run
    t0 = time.perf_counter()
    bar = progress(total=total, desc=f"{method.upper()} iterations", unit="it", disable=not show_progress)

    def record(it, offsets, change):
        bar.update(1)
        if it in wanted:
            at[it] = (offsets, time.perf_counter() - t0)
        if converged is not None and not conv and (change < tol or it == converged):  # the fit's own stopping rule
            conv.append((offsets, it, time.perf_counter() - t0))
        return it >= last and (converged is None or bool(conv))  # everything recorded: stop

    try:
        norm.iterate_offsets(engine, record)
    finally:
        bar.close()
        engine.release()   # what the run read into memory (a stored matrix's resident copy), as a fit releases it
    settings = [(f"T={T}", T, T, *at[T]) for T in iterations]
    if converged is not None:
        settings.append(("to convergence", converged, conv[0][1], conv[0][0], conv[0][2]))
    H = torch.stack([s[3] for s in settings])
    if task.kind == "embeddings":
        rows = _evaluate_offsets(task, H, metric_ks, False, norm.chunk_size, engine.device, norm.check_normalized)
    else:   # each setting's offsets on the raw test blocks: the arithmetic of a fitted normalizer's scores
        rows = _rank_rows(np.stack([positive_ranks(((q0, s.add_(h)) for q0, s in task.blocks()), task.positives)
                                    for h in H]), metric_ks, full=False)
    mark = marked_rows(rows, norm, task, engine)
    return pd.DataFrame([{"setting": s[0], "T max": int(s[1]), "iterations run": int(s[2]), **r, "fit_s": s[4],
                          "bank": mark} for s, r in zip(settings, rows)])


def marked_rows(rows: Sequence[Mapping[str, float]], normalizer, task: RetrievalTask, engine) -> str:
    """The ``bank`` mark of a sweep's rows (:func:`hubnorm.provenance.bank_mark` of the banks in ``engine``),
    recorded with their R@K values as ``hubnorm.evaluate`` records its results."""
    mark = bank_mark(normalizer, task, engine=engine)
    for r in rows:
        note_result(r, mark)
    return mark


class _ReplayScores:
    """Score blocks computed once and transformed per setting (the score source of ``positive_ranks``)."""

    def __init__(self, blocks, transform):
        self.blocks, self.transform = blocks, transform

    def iter_scores(self, queries, chunk_size=None):
        for q0, s in self.blocks:
            yield q0, self.transform(q0, s)
