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
* ranking offset methods: :func:`offset_sweep_ranks` evaluates many offset vectors against the same queries: the
  raw score block of a query chunk is computed once; per query, its top-``C`` raw targets are the only candidates
  that can beat the positive under offsets ``h`` unless ``fl(C-th raw score + max h) >= fl(s_pos + h_pos)``
  (rounding is monotone, so this test is exact); the rare unresolved (query, setting) pairs are counted on the
  full row. Ranks are exact up to ``cap = max(ks)`` (larger ranks are reported as ``cap``), which gives R@K
  exactly and MdR whenever the median rank is below the cap (else that setting's ranks are computed in full).
  ``MnR`` needs every rank: ask for it with ``full=True`` (exact, slower: one pass per setting).
* ranking other methods (DIS-like gates): the raw score blocks are computed once and every point's
  ``normalize_scores`` is applied to a copy.
* :func:`iteration_table`: any method with an ``iterate_offsets`` seam (SN, DBSN) reads R@1 after ``T = 1, 3, 10,
  ...`` iterations and "to convergence" off one run continued from checkpoint to checkpoint (an iteration depends
  on the column potentials alone, so the continued run is the same computation as a fresh fit with
  ``n_iter = T``): the cost of the largest ``T`` instead of their sum.
"""

from __future__ import annotations

import time
from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np
import pandas as pd
import torch

from ._validation import as_embeddings, check_positive_int
from .evaluation import positive_ranks, summarize_ranks
from .normalizers.base import Identity
from .progress import progress
from .registry import NORMALIZERS, make_normalizer
from .retrieval import RetrievalTask

__all__ = ["sweep_table", "iteration_table", "offset_sweep_ranks", "offset_lines", "can_sweep", "SWEEP_CACHE_BYTES"]

#: The sweeps keep score blocks in memory up to this many bytes per score matrix; beyond it they are recomputed.
SWEEP_CACHE_BYTES = 2 * 2**30

_BIG = torch.iinfo(torch.int64).max


def _identity(task: RetrievalTask, device, check_normalized) -> Identity:
    return Identity(device=device, check_normalized=check_normalized).fit(task.targets)


#: Lines of a grid (see :func:`offset_lines`) are bundled this many at a time for the dense candidate pass.
LINE_BUNDLE = 1


def _segment_residual(H: torch.Tensor, a: int, b: int, members: Sequence[int]) -> float:
    """Largest distance (max norm, float64) of the offsets ``H[g]`` of ``members`` from the segment between
    ``H[a]`` and ``H[b]``: ``max_g min_{lam in [0, 1]}``-projection residual (projection clamped to the segment)."""
    A, B = H[a].double(), H[b].double()
    D = B - A
    dd = float(D @ D)
    worst = 0.0
    for g in members:
        x = H[g].double() - A
        lam = 0.0 if dd == 0.0 else min(1.0, max(0.0, float(x @ D) / dd))
        worst = max(worst, float((x - lam * D).abs().max()))
    return worst


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
            if _segment_residual(H, a, b, members) > tol:
                break
            lines.append((a, b, members))
        else:
            if best is None or len(lines) < len(best):
                best = lines
    return best or alone


def offset_sweep_ranks(task: RetrievalTask, offsets: torch.Tensor, *, lines: Optional[Sequence[tuple]] = None,
                       chunk_size: Optional[int] = None, device=None, check_normalized: bool = True,
                       bundle: int = LINE_BUNDLE) -> np.ndarray:
    """Exact ranks (0-based, tie rule of :func:`hubnorm.evaluation.positive_ranks`) of every query of ``task`` under
    every offset vector (rows of ``offsets``, ``G x n``): a ``(G, m)`` int array equal to ``positive_ranks`` of
    ``S + offsets[g]`` for every ``g``, computed from the raw score blocks once.

    ``lines``: ``(a, b, members)`` groups of settings (:func:`offset_lines`; None: every setting alone). Along a
    line, ``h = (1 - lam) h_a + lam h_b + rho`` with ``|rho| <= r`` (measured here), so for query ``i``, positive
    ``p`` and target ``j`` the margin ``(S_ij + h_j) - (S_ip + h_p)`` is within ``2 r`` of a linear function of
    ``lam``: a target that trails the positive by more than the slack at both ends trails it at every setting of
    the line. One dense pass over the score block per bundle of lines (their ends' offsets bounded by an
    envelope: ``max_e h_e`` for the targets, ``min_e h_e`` at the positive) finds the few candidates; each line
    keeps those within the slack at one of its ends; each setting is then counted exactly on them, with the very
    arithmetic of the evaluator (``fl(S + h)``, ties by target index). A target beating the best positive beats
    every positive, so the candidates are taken against one positive per query (its best raw score). The slack
    covers float rounding: ``8 u X + 2 r`` with ``u`` the unit roundoff and ``X`` a bound of ``|S| + |h|``.
    """
    ident = _identity(task, device, check_normalized)
    t = ident.targets_
    H = offsets.to(device=t.device, dtype=t.dtype)
    if H.ndim != 2 or H.shape[1] != t.shape[0]:
        raise ValueError(f"offsets must be (settings, {t.shape[0]}); got {tuple(H.shape)}")
    G, n = H.shape
    lines = [(g, g, [g]) for g in range(G)] if lines is None else [(int(a), int(b), [int(g) for g in m])
                                                                 for a, b, m in lines]
    if sorted(g for _, _, m in lines for g in m) != list(range(G)):
        raise ValueError("lines must hold every setting exactly once")
    u = torch.finfo(t.dtype).eps  # 2 x the unit roundoff: a margin of its own
    q = as_embeddings(task.queries, "queries", device=t.device, dtype=t.dtype, dim=t.shape[1],
                      check_normalized=False)
    smax = float(torch.linalg.vector_norm(q, dim=1).max()) * float(torch.linalg.vector_norm(t, dim=1).max())
    X = 1.001 * smax + float(H.abs().max()) + 1e-30
    slack = [8 * u * X + 2 * _segment_residual(H, a, b, m) for a, b, m in lines]
    # bundles: consecutive lines of several settings share one dense pass; lone settings get a pass each
    bundles, run = [], []
    for li, (a, b, m) in enumerate(lines):
        if len(m) == 1:
            bundles.append([li])
            continue
        run.append(li)
        if len(run) == bundle:
            bundles.append(run)
            run = []
    if run:
        bundles.append(run)
    pos = task.positives
    q_of_all = pos.query_of_entry
    out = np.empty((G, pos.n_queries), dtype=np.int64)
    for q0, S in ident.iter_scores(task.queries, chunk_size):
        bq = S.shape[0]
        q1 = q0 + bq
        lo, hi = pos.indptr[q0], pos.indptr[q1]
        rows = torch.from_numpy(q_of_all[lo:hi] - q0).to(S.device)
        cols = torch.from_numpy(pos.indices[lo:hi]).to(S.device)
        s_pos = S[rows, cols]
        # the best positive of every setting, as positive_ranks finds it: fl(S + h), first column among ties
        pv = s_pos[None, :] + H[:, cols]
        r2 = rows[None, :].expand(G, -1)
        best = torch.full((G, bq), -torch.inf, dtype=S.dtype, device=S.device).scatter_reduce(1, r2, pv, "amax")
        is_best = pv == best.gather(1, r2)
        best_col = torch.full((G, bq), _BIG, dtype=torch.long, device=S.device).scatter_reduce(
            1, r2, torch.where(is_best, cols[None, :].expand(G, -1), torch.full_like(r2, _BIG)), "amin")
        # one positive per query for the candidate bounds: the best raw score
        raw_best = torch.full((bq,), -torch.inf, dtype=S.dtype, device=S.device).scatter_reduce(0, rows, s_pos, "amax")
        p0 = torch.full((bq,), _BIG, dtype=torch.long, device=S.device).scatter_reduce(
            0, rows, torch.where(s_pos == raw_best[rows], cols, torch.full_like(cols, _BIG)), "amin")
        sp0 = S.gather(1, p0[:, None])[:, 0]
        ranks = torch.zeros((G, bq), dtype=torch.long, device=S.device)
        buf = torch.empty_like(S)                 # reused: a fresh block per pass would cost its page faults
        mask, hit = (torch.empty(S.shape, dtype=torch.bool, device=S.device) for _ in range(2))
        for bundle_lines in bundles:
            d_b = 2 * max(slack[li] for li in bundle_lines)
            for end in (0, 1):
                E = H[[lines[li][end] for li in bundle_lines]]
                if end == 1 and all(lines[li][0] == lines[li][1] for li in bundle_lines):
                    break
                U, V = E.amax(dim=0), E[:, p0].amin(dim=0)
                torch.add(S, U, out=buf)
                torch.gt(buf, (sp0 + V).sub_(d_b)[:, None], out=mask if end == 0 else hit)
                if end == 1:
                    mask.logical_or_(hit)
            r, c = mask.nonzero(as_tuple=True)
            v = S[r, c]
            for li in bundle_lines:
                a, b, members = lines[li]
                sl = slack[li]
                x_end = [v + H[e, c] for e in ((a,) if a == b else (a, b))]
                if len(bundle_lines) > 1:  # the bundle's pass used an envelope: this line's own test
                    keep = None
                    for e, xe in zip((a, b), x_end):
                        d = (xe - (sp0 + H[e, p0])[r]).gt(-sl)
                        keep = d if keep is None else keep.logical_or_(d)
                    r_l, c_l, v_l, x_end = r[keep], c[keep], v[keep], [xe[keep] for xe in x_end]
                else:
                    r_l, c_l, v_l = r, c, v
                # ahead of the best positive by more than the slack at both ends: ahead at every setting of the
                # line (of every positive, by the same linear argument), counted once for all of them
                sure = None
                for e, xe in zip((a, b), x_end):
                    d = (xe - best[e][r_l]).gt(sl)
                    sure = d if sure is None else sure.logical_and_(d)
                idx = torch.tensor(members, device=S.device)
                ranks[idx] = torch.bincount(r_l[sure], minlength=bq)[None, :]
                amb = ~sure
                rl, cl, vl = r_l[amb], c_l[amb], v_l[amb]
                if rl.numel() == 0:
                    continue
                x = vl[None, :] + H[idx[:, None], cl[None, :]]             # fl(S + h): the evaluator's arithmetic
                bv, bc = best[idx[:, None], rl[None, :]], best_col[idx[:, None], rl[None, :]]
                beat = (x > bv) | ((x == bv) & (cl[None, :] < bc))
                ranks[idx] += torch.zeros((len(members), bq), dtype=torch.long, device=S.device).scatter_add_(
                    1, rl[None, :].expand(len(members), -1), beat.long())
        out[:, q0:q1] = ranks.cpu().numpy()
    return out


def _evaluate_offsets(task, H: torch.Tensor, ks, full, chunk_size, device, check_normalized, lines=None
                      ) -> List[Dict[str, float]]:
    ks = tuple(int(k) for k in ks)
    ranks = offset_sweep_ranks(task, H, lines=lines, chunk_size=chunk_size, device=device,
                               check_normalized=check_normalized)
    rows = []
    for g in range(H.shape[0]):
        res = summarize_ranks(ranks[g], ks)
        if not full:
            res.pop("MnR")
        rows.append(res)
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
    engine = ref.local_engine(task.targets, _bank(task, query_aware), task.target_bank, sweep_bytes=SWEEP_CACHE_BYTES)
    fitted = cls.fit_grid(norms, engine)
    if cls.is_offset:
        H = torch.stack([f["offsets_"] for f in fitted])
        rows = _evaluate_offsets(task, H, metric_ks, full, ref.chunk_size, engine.device, ref.check_normalized,
                                 lines=offset_lines(points, H))
    else:
        rows = _evaluate_fitted(task, norms, fitted, engine, metric_ks)
    return pd.DataFrame([{**p, **r} for p, r in zip(points, rows)])


def _evaluate_fitted(task, norms, fitted, engine, metric_ks) -> List[Dict[str, float]]:
    """Metrics of normalizers that are not offset methods: the raw score blocks once, every point's
    ``normalize_scores`` on a copy (the arithmetic of ``Normalizer._score_block``)."""
    ref = norms[0]
    ident = _identity(task, engine.device, ref.check_normalized)
    q = as_embeddings(task.queries, "queries", device=engine.device, dtype=engine.dtype,
                      dim=engine.tensor("targets").shape[1], check_normalized=ref.check_normalized)
    blocks = list(ident.iter_scores(task.queries, ref.chunk_size))
    rows = []
    for norm, f in zip(norms, fitted):
        norm.targets_, norm.device_ = engine.tensor("targets"), engine.device
        norm._set_fitted(f)
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
    fit's own (largest change of the potentials below ``tol``, same arithmetic). ``tests/test_selection.py``
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
    engine = norm.local_engine(task.targets, _bank(task, query_aware), task.target_bank)
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
    settings = [(f"T={T}", T, T, *at[T]) for T in iterations]
    if converged is not None:
        settings.append(("to convergence", converged, conv[0][1], conv[0][0], conv[0][2]))
    H = torch.stack([s[3] for s in settings])
    rows = _evaluate_offsets(task, H, metric_ks, False, norm.chunk_size, engine.device, norm.check_normalized)
    return pd.DataFrame([{"setting": s[0], "T max": int(s[1]), "iterations run": int(s[2]), **r, "fit_s": s[4]}
                         for s, r in zip(settings, rows)])


class _ReplayScores:
    """Score blocks computed once and transformed per setting (the score source of ``positive_ranks``)."""

    def __init__(self, blocks, transform):
        self.blocks, self.transform = blocks, transform

    def iter_scores(self, queries, chunk_size=None):
        for q0, s in self.blocks:
            yield q0, self.transform(q0, s)
