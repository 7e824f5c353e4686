"""Hyperparameter selection as in NNN Appendix B: the one public way to choose a method's parameters.

Pick the parameters on a held-out split of the *training* data the size of the test set (Flickr30k: 1,000
images / 5,000 captions; COCO: 5,000 / 25,000), optimising R@1, then evaluate once on test with the winner.
The grids of the papers are in :data:`PAPER_GRIDS`.

:func:`grid_search` has two engines behind one call (the ``engine`` argument is the seam):

* ``"reference"`` - the plain loop: build the normalizer of every grid point, fit it, evaluate it;
* ``"sweep"`` - the one-pass engine of :mod:`hubnorm.sweeps`: the method's own ``fit_grid`` fits every point on
  one shared engine (NNN: every ``(alpha, k)`` from one top-``max(k)``; IS/SN/DBSN: one bank x target score pass
  across ``tau``; DualIS/DualDIS: one log-sum-exp per bank and beta), and all settings are ranked against one pass
  over the query scores. Same numbers as the reference loop (``tests/test_selection.py`` proves it), tens of
  times faster on the paper grids.

``engine="auto"`` (the default) takes the sweep when the method's class states one for the grid's parameters
(``sweep_params``) and the fixed ones (``sweep_fixed``), else the reference loop. Nothing here knows a method's
name: grids, limits and sweeps are read off the registered class. Every grid point is validated by the
normalizer's own constructor checks before anything is computed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from .evaluation import evaluate
from .registry import NORMALIZERS, PAPER_GRIDS, check_grid, grid_points, make_normalizer
from .retrieval import RetrievalTask
from .sweeps import can_sweep, sweep_table
from .progress import progress as _progress_bar

# PAPER_GRIDS (NNN App. B1 grid, and tau grids around the DBSN defaults: DBSN Fig. 6 sweeps 0.005 ... 0.025) is the
# registry's dict of each method's ``paper_grid``, so a registered method's grid is there too.

ENGINES = ("auto", "sweep", "reference")


@dataclass
class SelectionResult:
    """What :func:`grid_search` found: the winner, its score, and the whole grid as a table."""

    method: str
    best_params: Dict[str, object]
    best_score: float
    metric: str
    table: pd.DataFrame  # one row per grid point, in itertools.product order: parameters, then metrics
    engine: str = "reference"
    #: grid points whose score equals the best one (1: a unique winner); ties go to the first in grid order
    n_tied: int = 1

    #: the rule that breaks ties, as the notebooks report it
    TIE_RULE = "the first tied grid point in grid order (itertools.product of the grid as given)"

    @property
    def tie_note(self) -> str:
        """"" when the winner is unique; else which points tied and the rule that chose among them."""
        if self.n_tied <= 1:
            return ""
        share = self.n_tied / max(len(self.table), 1)
        return (f"{self.n_tied} of {len(self.table)} grid points tie at {self.metric} {self.best_score:.2f} on the "
                f"validation split{' (saturated)' if share == 1 or self.best_score >= 100 else ''}; chosen by the "
                f"tie rule: {self.TIE_RULE}")


def _metric_ks(metric: str, ks: Sequence[int]) -> tuple:
    ks = tuple(ks)
    if not ks or any(isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1 for k in ks):
        raise ValueError(f"ks must be a non-empty list of positive integers (the R@K columns); got {ks!r}")
    ks = tuple(sorted(set(int(k) for k in ks)))
    if metric in ("MdR", "MnR"):
        return ks
    if not (isinstance(metric, str) and metric.startswith("R@") and metric[2:].isdigit() and int(metric[2:]) > 0):
        raise ValueError(f"unknown metric {metric!r}: use 'R@K' (K a positive integer), 'MdR' or 'MnR'")
    k = int(metric[2:])
    return ks if k in ks else tuple(sorted(set(ks) | {k}))


def _sizes(task: RetrievalTask, query_aware: bool):
    """The sizes of ``task``'s inputs (embeddings or score matrices alike); query-aware, the queries are the bank."""
    sizes = {name: task.size(name) for name in ("queries", "targets", "query_bank", "target_bank")}
    if query_aware:
        sizes["query_bank"] = sizes["queries"]
    return sizes.get


def param_limit(method: str, param: str, task: RetrievalTask, *, query_aware: bool = False) -> Optional[int]:
    """The largest valid value of ``param`` of ``method`` on ``task`` (the inputs its class says limit it, e.g. NNN's
    ``k`` and the query bank), or None when nothing limits it."""
    cls = NORMALIZERS.get(method)
    return None if cls is None else cls.limit(param, _sizes(task, query_aware))


def k_limit(method: str, task: RetrievalTask, *, query_aware: bool = False) -> Optional[int]:
    """The largest valid ``k`` of ``method`` on ``task``: NNN's top-k runs over the query bank, CSLS's over the
    query bank and the targets, DIS/DualDIS's activation sets over the targets; None when ``k`` is not a
    parameter of the method (each class states it: ``parameters["k"].limited_by``)."""
    return param_limit(method, "k", task, query_aware=query_aware)


def clamp_grid(method: str, grid: Mapping[str, Sequence], task: RetrievalTask, *,
               query_aware: bool = False) -> Dict[str, list]:
    """``grid`` without the ``k`` values ``task`` cannot take (:func:`k_limit`), with a printed NOTE of what was
    dropped; when every value is too large, the limit itself is searched. A grid without ``k``, or a method
    without it, comes back unchanged (as lists). :func:`grid_search` refuses such values instead."""
    g = {k: list(v) for k, v in grid.items()}
    n = k_limit(method, task, query_aware=query_aware)
    if "k" in g and n is not None:
        keep = [k for k in g["k"] if int(k) <= n]
        dropped = [k for k in g["k"] if int(k) > n]
        if dropped:
            keep = keep or [n]
            print(f"NOTE: {method} {task.direction}: grid k values {dropped} exceed what this task allows ({n}); "
                  f"searching k in {keep}")
            g["k"] = keep
    return g


def grid_search(
    method: str,
    validation: RetrievalTask,
    grid: Optional[Mapping[str, Sequence]] = None,
    *,
    metric: str = "R@1",
    fixed: Optional[Mapping[str, object]] = None,
    query_aware: bool = False,
    ks: Sequence[int] = (1, 5, 10),
    engine: str = "auto",
    progress: bool = False,
) -> SelectionResult:
    """Evaluate every point of ``grid`` on the held-out ``validation`` task and pick the best by ``metric``.

    Args:
        method: registry name (``"nnn"``, ``"is"``, ``"sn"``, ... see :data:`hubnorm.NORMALIZERS`).
        validation: a :class:`~hubnorm.RetrievalTask` on held-out training data (never the test split).
        grid: ``{parameter: [values]}``; None takes :data:`PAPER_GRIDS` ``[method]``.
        metric: ``"R@K"`` (higher is better), ``"MdR"`` or ``"MnR"`` (lower is better).
        fixed: parameters passed to every grid point (e.g. ``{"n_iter": 10}``).
        query_aware: fit with the validation queries as the query bank (transductive).
        ks: the R@K columns of the table.
        engine: ``"auto"`` (sweep when possible; a task of score matrices: the plain loop), ``"sweep"`` (require
            it) or ``"reference"`` (plain loop).
        progress: show a progress bar over grid points (reference engine).

    Returns:
        :class:`SelectionResult`; ``table`` has one row per grid point in ``itertools.product`` order with the
        parameters, ``R@K`` for ``ks``, ``MdR`` and (reference engine, or ``metric="MnR"``) ``MnR``. Ties are
        broken by the first grid point in that order (deterministic); ``n_tied`` and ``tie_note`` report them.
    """
    if not isinstance(method, str):
        raise TypeError(f"method must be a registry name (str); got {type(method).__name__}")
    method = method.lower()
    if method not in NORMALIZERS:
        raise ValueError(f"unknown method {method!r}; available: {sorted(NORMALIZERS)}")
    if not isinstance(validation, RetrievalTask):
        raise TypeError("validation must be a hubnorm.RetrievalTask (a held-out split of the training data)")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}; got {engine!r}")
    grid = check_grid(method, grid)
    fixed = dict(fixed or {})
    clash = set(fixed) & set(grid)
    if clash:
        raise ValueError(f"parameters {sorted(clash)} are both in grid and in fixed: keep each in one place")
    ks = _metric_ks(metric, ks)
    names, points = list(grid), grid_points(method, grid)
    # validate every point with the normalizer's own checks before computing anything
    for params in points:
        make_normalizer(method, **fixed, **params).check_params()
    has_bank = validation.has("queries" if query_aware else "query_bank")
    uses_bank = NORMALIZERS[method].uses_query_bank
    if uses_bank == "required" and not has_bank:
        raise ValueError(f"{method!r} needs a query bank: build the validation task with one, or query_aware=True")
    for param in names:
        limit = param_limit(method, param, validation, query_aware=query_aware)
        too_big = sorted({int(p[param]) for p in points if limit is not None and int(p[param]) > limit})
        if too_big:
            raise ValueError(f"grid[{param!r}] has {too_big} > {limit}, the largest {param} of {method!r} on this "
                             "task: drop those values (hubnorm.clamp_grid does it and reports what it dropped)")

    on_scores = validation.kind == "scores"   # a task of score matrices: one fit per point (no sweep engine)
    sweep = engine != "reference" and not on_scores and can_sweep(method, grid, fixed)
    if engine == "sweep" and not sweep:
        why = "a task holding score matrices fits every point on its own" if on_scores else \
            f"no one-pass sweep for method {method!r} with grid {sorted(grid)} and fixed {sorted(fixed)}"
        raise ValueError(f"{why}: use engine='auto' or 'reference'")
    full = metric == "MnR"
    if sweep:
        table = sweep_table(validation, method, points, fixed=fixed, metric_ks=ks, full=full, query_aware=query_aware)
        used = "sweep"
    else:
        rows: List[dict] = []
        for params in _progress_bar(points, desc=f"{method} grid", disable=not progress):
            norm = make_normalizer(method, **fixed, **params)
            validation.fit(norm, query_aware=query_aware)
            rows.append({**params, **evaluate(norm, validation, ks=ks)})
        table = pd.DataFrame(rows)
        used = "reference"
    if metric not in table.columns:
        raise ValueError(f"metric {metric!r} is not in the table columns {list(table.columns)}")
    values = table[metric].to_numpy(dtype=float)
    if not np.all(np.isfinite(values)):
        raise ValueError(f"the {metric} column has non-finite values: a grid point produced invalid scores")
    higher_is_better = metric.startswith("R@")
    best = int(np.argmax(values) if higher_is_better else np.argmin(values))
    best_params = {n: points[best][n] for n in names}
    n_tied = int(np.sum(np.abs(values - values[best]) <= 1e-9))
    return SelectionResult(method, best_params, float(values[best]), metric, table, used, n_tied)


def holdout_split(n_items: int, size: int, *, seed: int = 0):
    """Indices ``(heldout, rest)`` of a seeded random split of ``n_items`` items (e.g. training images)."""
    for name, v in (("n_items", n_items), ("size", size), ("seed", seed)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an integer; got {v!r}")
    if not 0 < size < n_items:
        raise ValueError(f"size must be in (0, n_items={n_items}); got {size}")
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n_items)
    return np.sort(perm[:size]), np.sort(perm[size:])

