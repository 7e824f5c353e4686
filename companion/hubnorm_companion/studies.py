"""Helpers of the papers' ablation studies: seeded bank subsets (reference- and query-bank size), Sinkhorn
iterations, k-occurrence tables, and the graded shift study (a bank or gallery drifting away from the test data).

The bank-size studies' loops are written out in the notebooks (fit, evaluate, hubness with the library's public
functions); these helpers return tidy :class:`pandas.DataFrame` objects ready for a seaborn plot. Temperature and
``(alpha, k)`` sweeps are :func:`hubnorm.grid_search` tables (``.table``), not separate functions.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from hubnorm._validation import as_embeddings, check_fraction, check_positive_int
from hubnorm.evaluation import evaluate
from hubnorm.hubness import hubness, hubness_stats, k_occurrence
from hubnorm.normalizers.base import EXECUTION_OPTIONS
from hubnorm.registry import DISPLAY_NAMES, NORMALIZERS, make_normalizer
from hubnorm.retrieval import RetrievalTask, fraction_size, share_rows
from hubnorm.selection import k_limit
from .protocol import note
from hubnorm.sweeps import iteration_table

__all__ = ["distinct_fractions", "subsample_rows", "sinkhorn_iterations",
           "occurrence_frame", "occurrence_stats", "SHIFT_SIDES", "shifted_rows", "shift_study", "stops_helping"]


def distinct_fractions(fractions: Sequence[float], n_rows: int, *, what: str = "fraction",
                       unit: str = "row") -> List[float]:
    """The ``fractions`` that give distinct subsample sizes of ``n_rows`` rows, in the given order: a fraction whose
    size (:func:`hubnorm.retrieval.fraction_size`, clamped to at least one row) equals that of an earlier one is
    dropped with a NOTE naming both, so two clamped values are never run, plotted or compared as if they were
    different."""
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
    """A seeded random ``fraction`` of the rows of ``x`` (:func:`hubnorm.retrieval.share_rows`: at least one row),
    in their original order."""
    return x if check_fraction(fraction, "fraction") == 1 else x[share_rows(len(x), fraction, seed)]


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
    """Long table of N_k per target for several fitted normalizers: columns ``method, target, N_k`` (a task of
    embeddings or of score matrices)."""
    frames = []
    for label, norm in fitted.items():
        n_k = k_occurrence(task.blocks(norm), k)
        frames.append(pd.DataFrame({"method": label, "target": np.arange(n_k.size), "N_k": n_k}))
    return pd.concat(frames, ignore_index=True)


def occurrence_stats(occ: pd.DataFrame, k: int, n_queries: int) -> pd.DataFrame:
    """:func:`hubnorm.hubness_stats` for every method of an :func:`occurrence_frame`."""
    return pd.DataFrame([{"method": label, **hubness_stats(g["N_k"].to_numpy(), k, n_queries)}
                         for label, g in occ.groupby("method", sort=False)])


# ================================================================================================ graded shift
#: what a shift study moves: the query bank, the target bank, or the test gallery itself
SHIFT_SIDES = ("query_bank", "target_bank", "gallery")


def shifted_rows(inside: np.ndarray, outside: np.ndarray, share: float, size: int, seed: int = 0, *,
                 aligned: bool = False) -> np.ndarray:
    """``size`` rows of which ``round(share * size)`` come from ``outside`` and the rest from ``inside``.

    Two seeded permutations fix the order in which rows are taken, so the mixtures of one seed are nested: a row
    drawn from ``outside`` at one share is drawn at every larger share, and the ``inside`` rows it replaces are
    the same. ``aligned=True`` (a gallery and its shifted copy, row ``i`` the same item): ``size`` is every row,
    and row ``i`` is ``outside[i]`` for the first ``round(share * size)`` items of one permutation, else
    ``inside[i]`` (the positives keep their meaning)."""
    inside, outside = np.asarray(inside), np.asarray(outside)
    if isinstance(share, (str, bytes, bool)) or not isinstance(share, (int, float, np.integer, np.floating)):
        raise ValueError(f"share must be in [0, 1]; got {share!r}")
    share = float(share)
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share must be in [0, 1]; got {share!r}")
    if inside.ndim != 2 or outside.ndim != 2 or inside.shape[1] != outside.shape[1]:
        raise ValueError(f"inside and outside must be 2-D with the same width; got {inside.shape} and {outside.shape}")
    rng = np.random.default_rng(seed)
    if aligned:
        if inside.shape != outside.shape:
            raise ValueError(f"an aligned shift needs the shifted copy of every row: inside is {inside.shape}, "
                             f"outside {outside.shape}")
        moved = rng.permutation(len(inside))[: int(round(share * len(inside)))]
        out = inside.copy()
        out[moved] = outside[moved]
        return out
    size = check_positive_int(size, "size")
    if size > min(len(inside), len(outside)):
        raise ValueError(f"size {size} is larger than a pool (inside {len(inside)} rows, outside {len(outside)}): "
                         "every share must be drawable without repeating a row")
    n_out = int(round(share * size))
    p_in, p_out = rng.permutation(len(inside)), rng.permutation(len(outside))
    rows = np.concatenate([outside[p_out[:n_out]], inside[p_in[n_out:size]]])
    return rows[rng.permutation(size)]


def _uses_a_bank(cls) -> bool:
    return cls.uses_query_bank != "unused" or cls.uses_target_bank != "unused"


def _methods(methods, task: RetrievalTask) -> Dict[str, dict]:
    if methods is None:   # every registered method that fits on banks, and whose required banks the task holds
        return {name: {} for name, cls in NORMALIZERS.items() if _uses_a_bank(cls)
                and not getattr(cls, "transductive", False)
                and not (cls.uses_query_bank == "required" and task.query_bank is None)
                and not (cls.uses_target_bank == "required" and task.target_bank is None)}
    if isinstance(methods, str):
        raise TypeError("methods must be a list of registry names or a {name: params} mapping; got one string "
                        f"({methods!r}): pass [{methods!r}]")
    items = methods.items() if isinstance(methods, Mapping) else ((m, {}) for m in methods)
    out = {}
    for name, params in items:
        if name not in NORMALIZERS:
            raise ValueError(f"unknown method {name!r} for a shift study; registered methods: {sorted(NORMALIZERS)}")
        if not _uses_a_bank(NORMALIZERS[name]):
            raise ValueError(f"{name} uses no bank: a shift study has nothing to shift for it (it is the baseline "
                             "every gain is measured against)")
        if getattr(NORMALIZERS[name], "transductive", False):
            raise ValueError(f"{name} is transductive (fitted on the test queries themselves): it has no bank to "
                             "shift; leave it out of a shift study")
        if not isinstance(params, Mapping):
            raise TypeError(f"the parameters of {name} must be a dict (e.g. {{'tau': 0.02}}, or {{}} for the "
                            f"defaults); got {params!r}")
        out[name] = dict(params)
    if not out:
        raise ValueError("methods is empty: name at least one registered method")
    return out


def shift_study(task: RetrievalTask, outside, *, side: str = "query_bank", methods=None,
                shares: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 1.0), size: Optional[int] = None,
                n_boot: int = 200, seed: int = 0, k: int = 10, label: str = "") -> pd.DataFrame:
    """R@1, its gain over the raw scores (paired bootstrap CI) and the hubness of every method, as one input of
    ``task`` moves from the test distribution to another in steps.

    ``side``: ``"query_bank"`` or ``"target_bank"`` (that bank is :func:`shifted_rows` of ``task``'s own bank and
    ``outside``, ``size`` rows at every share, default the smaller pool), or ``"gallery"`` (``outside`` is the
    shifted copy of every gallery row, row ``i`` the same item: the test gallery moves and the banks stay).
    ``methods``: registry names or ``{name: params}`` (default: every registered method whose required banks
    ``task`` holds, but the transductive ones, OTN, L2N and HN, which fit on the test queries and have no bank). Every point is a fit of
    its own on the shifted input; a default ``k`` larger than the shifted input allows is lowered to that size (the
    ``params`` column shows what was fitted). Columns: label, side, share, method, params, R@1, R@1 lo, R@1 hi, raw R@1, gain,
    gain lo, gain hi (95% paired bootstrap over the test queries, ``n_boot`` resamples), skewness (of N_k over
    the gallery), bank rows. :func:`stops_helping` reads where each method's gain ends."""
    if side not in SHIFT_SIDES:
        raise ValueError(f"side must be one of {SHIFT_SIDES}; got {side!r}")
    if isinstance(shares, (str, bytes)) or not hasattr(shares, "__iter__"):
        raise TypeError(f"shares must be a list of numbers in [0, 1], e.g. [0, 0.5, 1]; got {shares!r}")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0; got {seed!r}")
    k = check_positive_int(k, "k")
    if side == "gallery" and size is not None:
        raise ValueError("size does not apply to side='gallery' (every gallery row is kept, shifted or not): "
                         "leave it None")
    if not isinstance(task, RetrievalTask):
        raise TypeError(f"task must be a hubnorm.RetrievalTask; got {type(task).__name__}")
    spec = _methods(methods, task)
    n_boot = check_positive_int(n_boot, "n_boot")
    if any(isinstance(x, (str, bytes, bool)) or not isinstance(x, (int, float, np.integer, np.floating))
           for x in shares):
        raise ValueError(f"shares must be distinct numbers in [0, 1]; got {list(shares)}")
    shares = [float(s) for s in shares]
    if not shares or any(not 0.0 <= s <= 1.0 for s in shares) or len(set(shares)) != len(shares):
        raise ValueError(f"shares must be distinct numbers in [0, 1]; got {list(shares)}")
    outside = as_embeddings(outside, "outside", device="cpu", dim=task.queries.shape[1]).numpy()
    if side == "gallery":
        inside = np.asarray(task.targets)
        size = len(inside)
    else:
        inside = getattr(task, side)
        if inside is None:
            raise ValueError(f"task has no {side} to shift: build it with one (the in-distribution pool)")
        inside = np.asarray(inside)
        size = min(len(inside), len(outside)) if size is None else check_positive_int(size, "size")
    m = task.n_queries
    boot = np.random.default_rng([seed, 1]).integers(0, m, size=(n_boot, m))
    rows = []
    outside = outside.astype(inside.dtype)
    raw_hit = None
    for share in shares:
        moved = shifted_rows(inside, outside, share, size, seed, aligned=side == "gallery")
        t = dataclasses.replace(task, **{"targets" if side == "gallery" else side: moved})
        if raw_hit is None or side == "gallery":   # the raw scores move only with the gallery
            _, raw_ranks = evaluate(make_normalizer("raw").fit(t.targets), t, return_ranks=True)
            raw_hit = (raw_ranks < 1).astype(np.float64)   # ranks are 0-based
        for name, params in spec.items():
            norm = make_normalizer(name, **params)
            limit = k_limit(name, t)
            if "k" not in params and limit is not None and norm.k > limit:   # a default k larger than the bank
                note(f"shift study: {name}'s default k={norm.k} is larger than this input allows ({limit}); using "
                     f"k={limit} (the params column says so)")
                norm = norm.clone(k=limit)
            t.fit(norm)
            scores, ranks = evaluate(norm, t, return_ranks=True)
            hit = (ranks < 1).astype(np.float64)
            diff = hit - raw_hit
            r_lo, r_hi = np.quantile(hit[boot].mean(1), [0.025, 0.975]) * 100
            g_lo, g_hi = np.quantile(diff[boot].mean(1), [0.025, 0.975]) * 100
            rows.append({"label": label, "side": side, "share": share, "method": name,
                         "params": ", ".join(f"{p}={v}" for p, v in norm.get_params().items()
                                             if p in type(norm).parameters and p not in EXECUTION_OPTIONS), "R@1": hit.mean() * 100,
                         "R@1 lo": r_lo, "R@1 hi": r_hi, "raw R@1": raw_hit.mean() * 100,
                         "gain": diff.mean() * 100, "gain lo": g_lo, "gain hi": g_hi,
                         "skewness": hubness(norm, k=k, queries=t.queries)["skewness"], "bank rows": size,
                         "bank": scores["bank"]})
    return pd.DataFrame(rows)


def stops_helping(study: pd.DataFrame) -> pd.DataFrame:
    """Per (label, side, method) of a :func:`shift_study` table: whether the method helps the raw scores at the
    smallest share (the lower end of its gain's CI above 0), the first later share at which it no longer does (NaN
    when it helps at every share, and when it did not help at the smallest share: a method that never helped never
    "stops"), and a ``verdict`` in words: "never above raw" (at no share), "above raw at every share", "no longer
    above raw from share s", or "first above raw at share s" (not at the smallest share, but later)."""
    need = {"label", "side", "share", "method", "gain lo"}
    if not need <= set(study.columns):
        raise ValueError(f"study must be a shift_study table; missing columns {sorted(need - set(study.columns))}")
    keys = ["label", "side", "method", "share"]
    if study.duplicated(keys).any():
        raise ValueError("study has several rows for one (label, side, method, share): give each study of a "
                         "concatenated table its own label")
    out = []
    ordered = study.sort_values("share", kind="stable")
    for (label, side, method), part in ordered.groupby(["label", "side", "method"], sort=False, dropna=False):
        above = part["gain lo"] > 0
        first = bool(above.iloc[0])
        if first:   # helped at the smallest share: where it stops, if it does
            stop = part.loc[part["gain lo"] <= 0, "share"]
            stop_at = float(stop.iloc[0]) if len(stop) else float("nan")
            verdict = f"no longer above raw from share {stop_at:g}" if len(stop) else "above raw at every share"
        else:       # a method that never helped never "stops"
            stop_at = float("nan")
            verdict = (f"first above raw at share {part.loc[above, 'share'].iloc[0]:g}" if above.any()
                       else "never above raw")
        out.append({"label": label, "side": side, "method": method, "helps at first share": first,
                    "stops helping at share": stop_at, "verdict": verdict})
    return pd.DataFrame(out)
