"""Helpers of the papers' ablation studies: seeded bank subsets (reference- and query-bank size), Sinkhorn
iterations, k-occurrence tables.

The bank-size studies' loops are written out in the notebooks (fit, evaluate, hubness with the library's public
functions); these helpers return tidy :class:`pandas.DataFrame` objects ready for a seaborn plot. Temperature and
``(alpha, k)`` sweeps are :func:`hubnorm.grid_search` tables (``.table``), not separate functions.
"""

from __future__ import annotations

from typing import List, Mapping, Sequence

import numpy as np
import pandas as pd

from ..hubness import hubness_stats, k_occurrence
from ..registry import DISPLAY_NAMES
from ..retrieval import RetrievalTask
from ..sweeps import iteration_table

__all__ = ["distinct_fractions", "subsample_rows", "sinkhorn_iterations",
           "occurrence_frame", "occurrence_stats"]


def fraction_size(fraction: float, n_rows: int) -> int:
    """Rows kept by :func:`subsample_rows` (and :func:`hubnorm.experiments.protocol.reference_split`): all of them for a
    fraction of 1, else ``round(fraction * n_rows)`` clamped to at least one row."""
    return int(n_rows) if fraction >= 1 else max(1, int(round(fraction * n_rows)))


def distinct_fractions(fractions: Sequence[float], n_rows: int, *, what: str = "fraction",
                       unit: str = "rows") -> List[float]:
    """The ``fractions`` that give distinct subsample sizes of ``n_rows`` rows, in the given order: a fraction whose
    size (:func:`fraction_size`, clamped to at least one row) equals that of an earlier one is dropped with a
    NOTE naming both, so two clamped values are never run, plotted or compared as if they were different."""
    kept, size_of = [], {}
    for f in fractions:
        size = fraction_size(f, n_rows)
        if size in size_of:
            share = lambda x: f"1/{round(1 / x)}" if x < 1 else "1"  # noqa: E731
            print(f"NOTE: {what} {share(f)} ({f:g}) gives the same {size}-{unit} bank as {share(size_of[size])} "
                  f"({size_of[size]:g}) of {n_rows} {unit}s" + (" (clamped to at least one)" if size == 1 else "")
                  + ": it is not run and not compared as a separate size")
            continue
        size_of[size] = f
        kept.append(f)
    return kept


def subsample_rows(x: np.ndarray, fraction: float, seed: int = 0) -> np.ndarray:
    """A seeded random ``fraction`` of the rows of ``x`` (at least one row), in their original order."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise ValueError(f"fraction must be a number in (0, 1]; got {fraction!r}")
    if fraction == 1:
        return x
    n = fraction_size(fraction, len(x))
    return x[np.sort(np.random.default_rng(seed).choice(len(x), n, replace=False))]


def sinkhorn_iterations(task: RetrievalTask, methods: Sequence[str] = ("sn", "dbsn"), *, tau: float = 0.01,
                        iterations: Sequence[int] = (1, 3, 10, 30, 100), converged: int = 1000, tol: float = 1e-7,
                        query_aware: bool = False, fixed: Mapping[str, object] = None,
                        show_progress: bool = True) -> pd.DataFrame:
    """R@1 after T Sinkhorn iterations (Alg. A1 uses T = 10) and "to convergence" (at most ``converged``
    iterations, stopping when the offsets move less than ``tol``), with the iterations run and the fit time.

    Each method is one Sinkhorn run read at every ``T`` (:func:`hubnorm.sweeps.iteration_table`, equal to a fresh
    fit per ``T``); ``fit_s`` is the time a fresh fit with that ``T`` would take. ``fixed``: other normalizer
    arguments (e.g. ``cache_bytes``)."""
    frames = []
    for name in methods:
        tab = iteration_table(task, name, iterations, tau=tau, converged=converged, tol=tol, query_aware=query_aware,
                              fixed=fixed, show_progress=show_progress)
        frames.append(tab.assign(method=DISPLAY_NAMES.get(name, name)))
    cols = ["method", "setting", "T max", "iterations run", "R@1", "fit_s"]
    return pd.concat(frames, ignore_index=True)[cols]


def occurrence_frame(fitted: Mapping[str, object], task: RetrievalTask, k: int) -> pd.DataFrame:
    """Long table of N_k per target for several fitted normalizers: columns ``method, target, N_k``."""
    frames = []
    for label, norm in fitted.items():
        n_k = k_occurrence(norm, k, task.queries)
        frames.append(pd.DataFrame({"method": label, "target": np.arange(n_k.size), "N_k": n_k}))
    return pd.concat(frames, ignore_index=True)


def occurrence_stats(occ: pd.DataFrame, k: int, n_queries: int) -> pd.DataFrame:
    """:func:`hubnorm.hubness_stats` for every method of an :func:`occurrence_frame`."""
    return pd.DataFrame([{"method": label, **hubness_stats(g["N_k"].to_numpy(), k, n_queries)}
                         for label, g in occ.groupby("method", sort=False)])
