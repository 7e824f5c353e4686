"""Label-free choices: pick a method's parameters (and its bank) without a single labelled pair, and predict,
before any label is seen, whether the method will raise R@1.

**Criterion "mutual"** (the default when the unlabelled queries are given; docs/methods.md, "Label-free
selection"). Every grid point is fitted on the gallery with the whole query bank (and the target bank), exactly as
it will be used; then each unlabelled query ``q`` (the test queries' embeddings, no label) retrieves its top-1
target ``t_g(q) = argmax_t s(q, t) + h_g(t)`` under the grid point's offsets ``h_g``. The criterion is the share of
queries whose retrieval is *mutual*:

    A(g) = 1/|Q| sum_q 1[ q is among the c queries of Q that score highest with t_g(q) ],   c = max(1, round(|Q| / n)),

higher is better (``c``: the queries per target, e.g. the 5 captions of an image in t2i). The referee, each
target's ranking of the queries, is the raw one and is the same for every grid point: an offset ``h(t)`` is
constant along target ``t``'s column, so no offset method can move it. Why it tracks R@1: a caption that describes
an image is usually among that image's best captions (the match is mutual), while a hub is the top-1 of many
queries and has room for only ``c`` of them, and an over-corrected anti-hub is the top-1 of queries that do not
describe it; both too little and too much correction lower ``A``, so its maximum lies inside a grid that
brackets the right strength instead of at its edge.

**Criteria "robin_hood" and "skewness"** (the bank-only choice, when no query may be read): hold out a seeded share
``holdout`` of the query bank as pseudo-queries ``P``, fit every grid point with the rest ``B'``, and measure the
hubness of the pseudo-queries' k-occurrence ``N_k^P`` (k = 10), lower is better: the Robin Hood index
``0.5 sum_t |N_k^P(t) - k|P|/n| / (k|P|)`` or ``|skew(N_k^P)|``. Hubness alone does not see retrieval quality: a
flat ``N_k`` can also come from over-correction, and on real embeddings this criterion picks the edge of an
inverted-softmax temperature grid (``benchmarks/reports/label_free.md`` measures both criteria).

Ties: the first grid point in ``itertools.product`` order, as :func:`hubnorm.grid_search`. No positive and no label
is read by any criterion.

**Bank**: :func:`label_free_select` with ``candidate_banks`` scores every candidate bank (each with its own best
parameters) against the same queries (pseudo-queries for the bank-only criteria) and keeps the best.

**Benefit predictor** (:func:`predict_benefit`): predict that the chosen setting raises R@1 over the raw scores when
its criterion beats the raw scores' value by more than :data:`BENEFIT_THRESHOLDS`: for "mutual", when more queries
are mutual than under the raw scores (``A(chosen) - A(raw) > 0``; when no grid point beats raw, it says "does not
help" and the raw scores should be kept); for the bank-only criteria, when the chosen setting lowers the criterion
by more than 10% of its raw value (it nearly always does: any correction flattens ``N_k``, so this predictor can
hardly say "does not help"; the report measures how often it is right). The thresholds were fixed before any run:
0 for "mutual" (more mutual retrievals than raw), 0.10 for the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Mapping, Optional

import numpy as np
import pandas as pd
import torch

from ._validation import as_embeddings, check_finite_float, check_positive_int
from .hubness import hubness_stats
from .kernels import block_rows, iter_blocks
from .normalizers.base import fit_on_engine, stable_topk
from .registry import NORMALIZERS, grid_points, make_normalizer
from .sweeps import SWEEP_CACHE_BYTES

__all__ = ["LabelFreeResult", "label_free_select", "label_free_select_task", "pseudo_query_split",
           "predict_benefit", "mutual_agreement", "CRITERIA", "BENEFIT_THRESHOLDS", "DESIGN_SETS"]

#: The criteria, the default first (module docstring): "mutual" reads the unlabelled queries, the others the bank only.
CRITERIA = ("mutual", "robin_hood", "skewness")
#: Whether a larger criterion value is better.
HIGHER_IS_BETTER = {"mutual": True, "robin_hood": False, "skewness": False}
#: :func:`predict_benefit` predicts a benefit when the criterion's improvement over raw (:attr:`LabelFreeResult.gain`)
#: exceeds this, per criterion: "mutual" in share of queries (any gain), the others in share of the raw value.
BENEFIT_THRESHOLDS = {"mutual": 0.0, "robin_hood": 0.10, "skewness": 0.10}
#: The sets on which the criteria, k, the holdout share and the thresholds were looked at before the report
#: (``benchmarks/reports/label_free_design.md``, written then and kept); the report's real rows are the test.
DESIGN_SETS = ("synthetic presets flickr30k and coco as first fitted (before their refits of issue 42), "
               "seeds 100-102")
_BANK_ONLY = {"k": 10, "holdout": 0.2}


@dataclass
class LabelFreeResult:
    """What :func:`label_free_select` chose: parameters, criterion value, the raw value, the grid table, the bank."""

    method: str
    best_params: Dict[str, object]
    best_value: float
    raw_value: float
    criterion: str
    table: pd.DataFrame
    bank: Optional[str] = None

    @property
    def gain(self) -> float:
        """How much the chosen setting improves the criterion over the raw scores (the benefit predictor's
        statistic): "mutual": ``A(chosen) - A(raw)`` (share of queries); the bank-only criteria: the relative
        reduction ``(raw - chosen) / raw``."""
        if HIGHER_IS_BETTER[self.criterion]:
            return self.best_value - self.raw_value
        return (self.raw_value - self.best_value) / self.raw_value if self.raw_value > 0 else 0.0


def pseudo_query_split(n_bank: int, holdout: float = 0.2, *, seed: int = 0):
    """Indices ``(pseudo, fit)`` of a seeded split of ``n_bank`` bank rows (``holdout`` share as pseudo-queries)."""
    n_bank = check_positive_int(n_bank, "n_bank")
    if isinstance(holdout, bool) or not isinstance(holdout, (int, float)) or not 0 < holdout < 1:
        raise ValueError(f"holdout must be a share in (0, 1); got {holdout!r}")
    n_p = int(round(holdout * n_bank))
    if not 0 < n_p < n_bank:
        raise ValueError(f"holdout={holdout} of {n_bank} bank rows leaves no pseudo-query or no bank row")
    perm = np.random.default_rng(seed).permutation(n_bank)
    return np.sort(perm[:n_p]), np.sort(perm[n_p:])


def _criterion(n_k: np.ndarray, k: int, m: int, criterion: str) -> float:
    st = hubness_stats(n_k, k, m)
    return float(st["robin_hood"]) if criterion == "robin_hood" else abs(float(st["skewness"]))


def _occurrences(targets: torch.Tensor, pseudo: torch.Tensor, H: torch.Tensor, k: int) -> np.ndarray:
    """``N_k`` of the pseudo-queries for every row of offsets ``H`` (g x n), blocked over the pseudo-queries."""
    n = targets.shape[0]
    counts = torch.zeros(H.shape[0], n, dtype=torch.long)
    rows = block_rows(n, targets.element_size())
    for q0, q1 in iter_blocks(pseudo.shape[0], rows):
        s = pseudo[q0:q1] @ targets.T
        for g in range(H.shape[0]):
            idx = stable_topk(s + H[g], k)[1].reshape(-1)
            counts[g] += torch.bincount(idx.cpu(), minlength=n)
    return counts.numpy()


def mutual_agreement(targets: torch.Tensor, queries: torch.Tensor, H: torch.Tensor) -> np.ndarray:
    """The "mutual" criterion ``A`` (module docstring) for every row of offsets ``H`` (g x n): the share of
    ``queries`` whose top-1 target under ``s + H[g]`` has that query among its ``c = max(1, round(m / n))``
    highest-scoring queries (raw scores; ties broken by the lowest index, :func:`stable_topk`). Blocked: the reverse
    ranking over blocks of targets, the top-1 over blocks of queries; membership is by index, so the two products'
    rounding never disagree."""
    n, m = targets.shape[0], queries.shape[0]
    c = min(m, max(1, int(round(m / n))))
    best = torch.empty(n, c, dtype=torch.long)   # each target's c best queries (offsets cannot change them)
    for t0, t1 in iter_blocks(n, block_rows(m, targets.element_size())):
        best[t0:t1] = stable_topk(targets[t0:t1] @ queries.T, c)[1].cpu()
    hits = torch.zeros(H.shape[0], dtype=torch.long)
    for q0, q1 in iter_blocks(m, block_rows(n, targets.element_size())):
        s = queries[q0:q1] @ targets.T
        own = torch.arange(q0, q1)[:, None]
        for g in range(H.shape[0]):
            top1 = stable_topk(s + H[g], 1)[1][:, 0].cpu()
            hits[g] += (best[top1] == own).any(dim=1).sum()
    return (hits.double() / m).numpy()


def _select_one(method, names, points, fixed, targets, fit_bank, target_bank, probe, k, criterion):
    """Fit every grid point with ``fit_bank`` and score it on ``probe`` (the queries for "mutual", else the
    pseudo-queries): ``(best params, best value, raw value, table)``."""
    norms = [make_normalizer(method, **fixed, **p) for p in points]
    for nrm in norms:   # every point's parameters before the bank is read (the fit checks them again)
        nrm.check_params()
    ref = norms[0]
    if not type(ref).is_offset:
        raise ValueError(f"label-free selection runs on offset methods; {method!r} normalises each query's row")
    engine = ref.local_engine(targets, fit_bank, target_bank, sweep_bytes=SWEEP_CACHE_BYTES)
    t = engine.tensor("targets")
    fit_on_engine(norms, engine, targets=t, record=False)   # the method's fit_grid: one pass for the grid
    p = as_embeddings(probe, "queries" if criterion == "mutual" else "pseudo_queries", device=t.device,
                      dtype=t.dtype, dim=t.shape[1])
    H = torch.stack([torch.zeros_like(ref.offsets_)] + [n.offsets_ for n in norms])
    if criterion == "mutual":
        values = [float(v) for v in mutual_agreement(t, p, H)]
    else:
        values = [_criterion(c, k, p.shape[0], criterion) for c in _occurrences(t, p, H, k)]
    table = pd.DataFrame([{**pt, criterion: v} for pt, v in zip(points, values[1:])])
    best = int(np.argmax(values[1:]) if HIGHER_IS_BETTER[criterion] else np.argmin(values[1:]))
    return {n: points[best][n] for n in names}, float(values[1 + best]), float(values[0]), table


def label_free_select(method: str, targets, query_bank, *, queries=None, target_bank=None, grid=None, fixed=None,
                      criterion: Optional[str] = None, k: Optional[int] = None, holdout: Optional[float] = None,
                      seed: Optional[int] = None, candidate_banks: Optional[Mapping[str, object]] = None) -> LabelFreeResult:
    """Choose ``method``'s parameters (and, with ``candidate_banks``, its bank) from unlabelled data only.

    Args:
        method: registry name of an offset method (``"nnn"``, ``"is"``, ``"sn"``, ``"dbsn"``, ...).
        targets: the gallery; query_bank: unlabelled queries of the query modality (the bank the method is fitted
            with); target_bank: for methods that use one.
        queries: the unlabelled queries to be answered (e.g. the test queries' embeddings; never their labels):
            read by the "mutual" criterion only.
        grid: ``{param: [values]}`` (default: the paper grid); fixed: other constructor arguments.
        criterion: ``"mutual"`` (default when ``queries`` is given), ``"robin_hood"`` (default without queries) or
            ``"skewness"`` (module docstring).
        k, holdout, seed: the bank-only criteria's k of ``N_k`` (default 10) and seeded share of ``query_bank``
            held out as pseudo-queries (default 0.2, seed 0); "mutual" fits with the whole bank and refuses all
            three (a value it would ignore is an error, never silently dropped).
        candidate_banks: ``{name: bank}``: the method is fitted with each (instead of ``query_bank``, or of its
            non-held-out part) and the bank with the best criterion wins; keep the pseudo-queries (bank-only
            criteria) out of every candidate.
    Returns:
        :class:`LabelFreeResult` (``table``: every grid point's criterion; with candidate banks, a ``bank``
        column).
    """
    if not isinstance(method, str) or method.lower() not in NORMALIZERS:
        raise ValueError(f"unknown method {method!r}; available: {sorted(NORMALIZERS)}")
    method = method.lower()
    if criterion is None:
        criterion = "mutual" if queries is not None else "robin_hood"
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {CRITERIA}; got {criterion!r}")
    if query_bank is None:
        raise ValueError("label-free selection needs an unlabelled query_bank (the bank the method is fitted with)")
    if criterion == "mutual":
        if queries is None:
            raise ValueError("criterion='mutual' needs the unlabelled queries (queries=..., e.g. the test queries' "
                             "embeddings; no label is read), or choose criterion='robin_hood' for a bank-only choice")
        for name, v in (("k", k), ("holdout", holdout), ("seed", seed)):
            if v is not None:
                raise ValueError(f"{name} belongs to the bank-only criteria (robin_hood, skewness); "
                                 f"criterion='mutual' fits with the whole bank and scores the queries: drop {name}")
    elif queries is not None:
        raise ValueError(f"criterion={criterion!r} reads the bank only; queries are read by criterion='mutual': "
                         "drop queries or choose criterion='mutual'")
    k = check_positive_int(_BANK_ONLY["k"] if k is None else k, "k")
    holdout = _BANK_ONLY["holdout"] if holdout is None else holdout
    seed = 0 if seed is None else seed
    fixed = dict(fixed or {})
    points = grid_points(method, grid)
    names = list(points[0])
    qb = np.asarray(query_bank.detach().cpu() if hasattr(query_bank, "detach") else query_bank)
    n_targets = len(targets)
    if criterion == "mutual":
        probe, rest = queries, qb
    else:
        pseudo_idx, fit_idx = pseudo_query_split(len(qb), holdout, seed=seed)
        probe, rest = qb[pseudo_idx], qb[fit_idx]
        if k > n_targets:
            raise ValueError(f"k={k} exceeds the gallery size {n_targets}")
    banks = {"query bank" if criterion == "mutual" else "query bank (rest)": rest} if candidate_banks is None \
        else dict(candidate_banks)
    if not banks:
        raise ValueError("candidate_banks is empty: give at least one bank")
    results = []
    for name, bank in banks.items():
        cls = NORMALIZERS[method]
        lim = cls.limit("k", {"query_bank": len(bank), "targets": n_targets,
                              "target_bank": None if target_bank is None else len(target_bank)}.get) \
            if "k" in names else None
        pts = [p for p in points if lim is None or int(p["k"]) <= lim]
        if not pts:
            raise ValueError(f"no grid point fits bank {name!r} ({len(bank)} rows)")
        best, val, raw, table = _select_one(method, names, pts, fixed, targets, bank, target_bank, probe, k, criterion)
        results.append((val, name, best, raw, table.assign(bank=name)))
    pick = max if HIGHER_IS_BETTER[criterion] else min   # both keep the first of equal values: the banks' order
    val, name, best, raw, _ = pick(results, key=lambda r: r[0])
    table = pd.concat([r[4] for r in results], ignore_index=True)
    if candidate_banks is None:
        table = table.drop(columns="bank")
    return LabelFreeResult(method, best, val, raw, criterion, table, name)


def label_free_select_task(method: str, task, **kwargs) -> LabelFreeResult:
    """:func:`label_free_select` on a task's gallery and banks: ``task.targets``, ``task.query_bank``,
    ``task.target_bank`` and, for the "mutual" criterion (the default when the task has queries), the query
    embeddings ``task.queries``; never ``task.positives`` (any object with those attributes works)."""
    as_scores = [n for n in ("targets", "query_bank") if getattr(task, n, None) is None and getattr(task, "has", None)
                 and task.has(n)]
    if as_scores:
        raise ValueError(f"label-free selection reads embeddings of the gallery and the query bank; this task holds "
                         f"its {' and '.join(as_scores)} as score matrices only: select on a task of embeddings")
    criterion = kwargs.get("criterion")
    queries = getattr(task, "queries", None)
    if criterion in (None, "mutual") and queries is not None:
        kwargs.setdefault("queries", queries)
    return label_free_select(method, task.targets, task.query_bank, target_bank=getattr(task, "target_bank", None),
                             **kwargs)


def predict_benefit(result: LabelFreeResult, threshold: Optional[float] = None) -> bool:
    """Predict, from unlabelled statistics only, that the chosen setting raises R@1 over the raw scores:
    ``result.gain > threshold`` (default :data:`BENEFIT_THRESHOLDS` of the result's criterion). False means "keep
    the raw scores"."""
    if threshold is None:
        threshold = BENEFIT_THRESHOLDS[result.criterion]
    return result.gain > check_finite_float(threshold, "threshold")
