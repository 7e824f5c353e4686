"""Hyperparameter selection as in NNN Appendix B.

Pick the parameters on a held-out split of the *training* data the size of the test set (Flickr30k: 1,000
images / 5,000 captions; COCO: 5,000 / 25,000), optimising R@1, then evaluate once on test with the winner.
The grids of the papers are in :data:`PAPER_GRIDS`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Dict, Mapping, Optional, Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from .evaluation import evaluate
from .registry import make_normalizer
from .retrieval import RetrievalTask

#: NNN App. B1 grid, and tau grids around the DBSN defaults (DBSN Fig. 6 sweeps 0.005 ... 0.025).
PAPER_GRIDS: Dict[str, Dict[str, Sequence]] = {
    "nnn": {"alpha": [0.25 + 0.125 * i for i in range(11)], "k": [2**i for i in range(10)]},
    "dn": {"lam": [0.25, 0.5, 0.75, 1.0]},
    "is": {"tau": [0.005, 0.01, 0.015, 0.02, 0.025, 0.05]},
    "dis": {"tau": [0.005, 0.01, 0.015, 0.02, 0.025, 0.05]},
    "csls": {"k": [1, 2, 4, 8, 16, 32, 64, 128]},
    "dualis": {"beta_query": [10.0, 25.0, 50.0, 100.0], "beta_target": [0.0, 1.0, 10.0, 50.0]},
    "dualdis": {"beta_query": [10.0, 25.0, 50.0, 100.0], "beta_target": [0.0, 1.0, 10.0, 50.0]},
    "sn": {"tau": [0.005, 0.01, 0.015, 0.02, 0.025]},
    "dbsn": {"tau": [0.005, 0.01, 0.015, 0.02, 0.025]},
}


@dataclass
class SelectionResult:
    method: str
    best_params: Dict[str, object]
    best_score: float
    metric: str
    table: pd.DataFrame  # one row per grid point: parameters and metrics


def grid_search(
    method: str,
    validation: RetrievalTask,
    grid: Optional[Mapping[str, Sequence]] = None,
    *,
    metric: str = "R@1",
    fixed: Optional[Mapping[str, object]] = None,
    progress: bool = True,
) -> SelectionResult:
    """Evaluate every point of ``grid`` on the held-out ``validation`` task and pick the best by ``metric``.

    Ties are broken by the first grid point in iteration order (deterministic).
    """
    if not isinstance(validation, RetrievalTask):
        raise TypeError("validation must be a hubnorm.RetrievalTask (a held-out split of the training data)")
    if grid is None and method not in PAPER_GRIDS:
        make_normalizer(method)  # raises "unknown normalizer ..." for a bad name
        raise ValueError(f"no default grid for method {method!r}: pass grid={{...}}")
    grid = dict(PAPER_GRIDS[method] if grid is None else grid)
    if not grid:
        grid = {}
    names = list(grid)
    for name in names:
        if len(grid[name]) == 0:
            raise ValueError(f"grid[{name!r}] is empty: give at least one value")
    points = [dict(zip(names, vals)) for vals in itertools.product(*(grid[n] for n in names))] or [{}]
    rows = []
    for params in tqdm(points, desc=f"{method} grid", disable=not progress, leave=False):
        norm = make_normalizer(method, **{**(fixed or {}), **params})
        validation.fit(norm)
        res = evaluate(norm, validation)
        if metric not in res:
            raise ValueError(f"unknown metric {metric!r}; available: {sorted(res)}")
        rows.append({**params, **res})
    table = pd.DataFrame(rows)
    higher_is_better = not metric.startswith(("MdR", "MnR"))
    values = table[metric].to_numpy()
    best = int(np.argmax(values) if higher_is_better else np.argmin(values))
    best_params = {n: points[best][n] for n in names}
    return SelectionResult(method, best_params, float(values[best]), metric, table)


def holdout_split(n_items: int, size: int, *, seed: int = 0):
    """Indices ``(heldout, rest)`` of a seeded random split of ``n_items`` items (e.g. training images)."""
    rng = np.random.default_rng(seed)
    if not 0 < size < n_items:
        raise ValueError(f"size must be in (0, {n_items}); got {size}")
    perm = rng.permutation(n_items)
    return np.sort(perm[:size]), np.sort(perm[size:])
