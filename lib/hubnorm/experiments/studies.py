"""The ablation studies of the papers: reference-bank size, query-bank size, Sinkhorn iterations, k-occurrence.

Each study is a loop over one factor that fits the normalizers and evaluates them with the library's public
functions; each returns a tidy :class:`pandas.DataFrame` ready for a seaborn plot. Temperature and ``(alpha, k)``
sweeps are :func:`hubnorm.grid_search` tables (``.table``), not separate functions.
"""

from __future__ import annotations

from typing import List, Mapping, Sequence

import numpy as np
import pandas as pd

from ..embeddings import EmbeddingDataset, EmbeddingSplit
from ..evaluation import positive_ranks, summarize_ranks
from ..geometry import nn_gap
from ..hubness import hubness_stats, k_occurrence
from ..progress import progress
from .protocol import MethodSpec, clamp_params, make_tasks, method_items, params_for, reference_split, run_methods
from ..registry import DISPLAY_NAMES, make_normalizer
from ..retrieval import DIRECTIONS, RetrievalTask
from ..sweeps import iteration_table

__all__ = ["distinct_fractions", "subsample_rows", "score_and_hubness", "bank_fraction_sweep", "query_bank_sweep", "sinkhorn_iterations",
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


def score_and_hubness(norm, task: RetrievalTask, *, ks: Sequence[int] = (1, 5, 10), hubness_k: int = 10) -> dict:
    """R@K / MdR / MnR and the skewness of N_k of a fitted normalizer from *one* pass over the score matrix
    (the m x n matrix is formed once: for the small problems of the notebooks' sweeps)."""
    s = norm.score(task.queries)
    out = summarize_ranks(positive_ranks(s, task.positives), ks)
    out[f"skewness@{hubness_k}"] = hubness_stats(k_occurrence(s, hubness_k), hubness_k, task.n_queries)["skewness"]
    return out


def bank_fraction_sweep(ds: EmbeddingDataset, test: EmbeddingSplit, fractions: Sequence[float], methods: MethodSpec,
                        params=None, *, split: str = "train", directions: Sequence[str] = DIRECTIONS, seed: int = 0,
                        show_progress: bool = True) -> pd.DataFrame:
    """NNN Tables A12-A15: the methods with reference banks made of a ``fraction`` of the training data."""
    frames = []
    for frac in progress(list(fractions), desc="bank fractions", disable=not show_progress):
        bank = reference_split(ds, split, frac, seed)
        tasks = make_tasks(test, bank, directions=directions)
        df = run_methods(tasks, methods, params, show_progress=False)
        df.insert(2, "bank_fraction", frac)
        df.insert(3, "bank_queries", [len(tasks[d].query_bank) for d in df["direction"]])
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def query_bank_sweep(task: RetrievalTask, fractions: Sequence[float], methods: MethodSpec, params=None, *,
                     seeds: Sequence[int] = (0, 1, 2), hubness_k: int = 10, show_progress: bool = True) -> pd.DataFrame:
    """DBSN Fig. 7: subsample the *query* bank of ``task`` (the target bank stays whole, as in DBSN Sec. 4.3),
    ``len(seeds)`` draws per fraction, and record R@1, the skewness of N_k and two distribution gaps:

    - ``gap bank->targets``: :func:`hubnorm.geometry.nn_gap` of the bank queries to the targets the method
      balances over (the test gallery for IS/SN, the extended gallery ``[T ; B_t]`` for DBSN/DualIS: the bank's
      own training targets are there, which is how DBSN narrows the gap, Proposition 2);
    - ``gap test queries->bank``: how well the bank covers the test query distribution (Fig. 7(d)).
    """
    full = task.query_bank
    rows = []
    jobs = [(f, s) for f in fractions for s in (list(seeds)[:1] if f >= 1 else seeds)]  # the whole bank: one draw
    for frac, s in progress(jobs, desc="query-bank sweep", disable=not show_progress):
        bank = subsample_rows(full, frac, seed=s)
        t = task.with_banks(query_bank=bank, target_bank=task.target_bank)
        gap_q = nn_gap(task.queries, bank)
        gap_plain = nn_gap(bank, task.targets)
        gap_ext = (nn_gap(bank, np.concatenate([task.targets, task.target_bank]))
                   if task.target_bank is not None else np.nan)
        for label, name in method_items(methods):
            norm = make_normalizer(name, **clamp_params(name, params_for(params, task.direction, label), t))
            t.fit(norm)
            res = score_and_hubness(norm, t, ks=(1,), hubness_k=hubness_k)
            dual = type(norm).uses_target_bank == "required"
            rows.append({"fraction": frac, "seed": s, "bank_queries": len(bank), "method": label,
                         "name": DISPLAY_NAMES.get(name, name), "R@1": res["R@1"],
                         f"skewness@{hubness_k}": res[f"skewness@{hubness_k}"],
                         "gap bank->targets": gap_ext if dual else gap_plain, "gap test queries->bank": gap_q})
    return pd.DataFrame(rows)


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
