"""Experiment helpers behind the notebooks (``notebooks/0*_*.ipynb``): the loops, selection and sweeps live here so
that the notebook cells stay short and the logic is unit-tested (``tests/test_experiments.py``).

Typical use in a notebook::

    ds = ex.load_dataset("synthetic:flickr30k", n_train_images=5000)
    bank = ex.reference_split(ds, "train", fraction=0.2, seed=0)          # NNN: 20% of the training data
    val, test = ex.make_tasks(ds.split("val"), bank), ex.make_tasks(ds.split("test"), bank)
    results, chosen = ex.select_and_evaluate(val, test, ["raw", "dn", "nnn"], grids)

Every helper returns a tidy :class:`pandas.DataFrame` (one row per direction x method x setting) with the
columns ``R@1, R@5, R@10, MdR, MnR`` (percent / 1-based ranks), so tables and seaborn plots are one call away.
Progress bars (tqdm) go to stderr. Nothing here prints numbers except :func:`check` and :func:`show`, which round
to 2 decimals so that re-executed notebooks are byte-identical (nbval).
"""

from __future__ import annotations

import itertools
import sys
import time
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import torch
from tqdm.std import tqdm as _std_tqdm

from .datasets import EmbeddingDataset, EmbeddingSplit, load_embeddings
from .evaluation import evaluate, positive_ranks, summarize_ranks
from .hubness import hubness_stats, k_occurrence
from .registry import DISPLAY_NAMES, make_normalizer
from .reporting import beside_published, load_published
from .retrieval import DIRECTIONS, RetrievalTask, build_tasks
from .selection import PAPER_GRIDS, grid_search, holdout_split

__all__ = [
    "setup", "progress", "load_dataset", "describe", "clamp_k", "dataset_key", "run_label", "is_synthetic", "reference_split",
    "make_tasks", "subsample_rows", "run_methods", "select_and_evaluate", "bank_fraction_sweep",
    "query_bank_sweep", "nnn_grid", "score_and_hubness", "nn_gap", "centroid_distance", "tau_sweep", "sinkhorn_iterations", "occurrence_frame",
    "occurrence_stats", "published", "side_by_side", "to_long", "check", "show", "reduced_grid", "fmt_params",
    "METRICS",
]

METRICS = ("R@1", "R@5", "R@10", "MdR", "MnR")
MethodSpec = Union[Sequence[str], Mapping[str, str]]


# ---------------------------------------------------------------------------------------------- setup
def setup(seed: int = 0, threads: Optional[int] = 2) -> None:
    """Seed numpy and torch and pin the number of torch threads (results must not depend on the machine's
    core count: a reduction split over a different number of threads sums in a different order)."""
    np.random.seed(seed)
    torch.manual_seed(seed)
    if threads:
        torch.set_num_threads(int(threads))


def progress(iterable=None, **kwargs):
    """A plain-text tqdm bar on stderr (no widgets: the notebooks run headless under papermill)."""
    kwargs.setdefault("file", sys.stderr)
    kwargs.setdefault("mininterval", 2.0)
    kwargs.setdefault("ncols", 90)
    kwargs.setdefault("leave", False)
    return _std_tqdm(iterable, **kwargs)


# ---------------------------------------------------------------------------------------------- data
def load_dataset(source: str, *, seed: int = 0, dtype: Optional[str] = "float64", ensure_val: bool = True,
                 **kwargs) -> EmbeddingDataset:
    """``hubnorm.load_embeddings(source, **kwargs)``, ready for the notebooks.

    - ``seed`` is passed to the synthetic generator (other sources take their own keyword arguments);
    - ``ensure_val``: a dataset without a ``"val"`` split (e.g. a ``local:`` folder) gets one carved out of
      ``"train"`` with :func:`hubnorm.holdout_split`, the size of the test split when the training split allows
      (NNN App. B: "a random subset of the training set with the same size as the test set"), else a third of it;
    - ``dtype`` (float64 by default) casts and re-normalises every embedding: float64 rankings do not depend on
      the summation order of a given CPU or thread count, so the rounded numbers the notebooks print are the same
      on every machine.
    """
    if source.startswith("synthetic:"):
        kwargs.setdefault("seed", seed)
    ds = load_embeddings(source, **kwargs)
    ds.meta.setdefault("source_string", source)
    if ensure_val and "val" not in ds.splits and "train" in ds.splits and "test" in ds.splits:
        train, n_test = ds.splits["train"], ds.split("test").n_images
        size = n_test if train.n_images >= 2 * n_test else max(1, train.n_images // 3)
        if 0 < size < train.n_images:
            held, rest = holdout_split(train.n_images, size, seed=seed)
            ds.splits["val"] = train.subset_images(held)
            ds.splits["train"] = train.subset_images(rest)
            ds.meta["val_split"] = f"held out from train ({size} images, seed {seed})"
    if dtype is not None:
        np_dtype = np.dtype(dtype)
        for split in ds.splits.values():
            for attr in ("images", "captions"):
                x = getattr(split, attr).astype(np_dtype)
                x /= np.linalg.norm(x, axis=1, keepdims=True)
                setattr(split, attr, x)
    return ds


def describe(ds: EmbeddingDataset) -> pd.DataFrame:
    """Images and captions per split."""
    return pd.DataFrame([{"split": k, "images": v.n_images, "captions": v.n_captions, "dim": v.images.shape[1]}
                         for k, v in ds.splits.items()])


def is_synthetic(ds: EmbeddingDataset) -> bool:
    return ds.source == "synthetic"


def dataset_key(source: str, ds: Optional[EmbeddingDataset] = None) -> str:
    """The published-table dataset ("flickr30k" or "coco") to compare a source with: the dataset named in the
    source string (any Flickr set is compared with Flickr30k, any COCO set with COCO 5k; the run label says which
    data it really is), else the dataset's name."""
    text = source.lower()
    if "flickr" in text:
        return "flickr30k"
    if "coco" in text:
        return "coco"
    return ds.name if ds is not None else source


def run_label(ds: EmbeddingDataset) -> str:
    """"synthetic analog (synthetic-flickr30k, seed 0)" or "real (coco, ...)": goes into every table and caption."""
    if is_synthetic(ds):
        return f"synthetic analog ({ds.name}, seed {ds.meta.get('seed', '?')})"
    model = ds.meta.get("model")
    return f"real data ({ds.name}" + (f", {model})" if model else ")")


def reference_split(ds: EmbeddingDataset, split: str = "train", fraction: float = 1.0, seed: int = 0) -> EmbeddingSplit:
    """A seeded random ``fraction`` of the images of ``split`` with all their captions (both banks at once:
    "all methods use 20% of the train set", NNN Tables A6/A7)."""
    s = ds.split(split)
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1]; got {fraction}")
    if fraction == 1:
        return s
    n = max(1, int(round(fraction * s.n_images)))
    idx = np.sort(np.random.default_rng(seed).choice(s.n_images, n, replace=False))
    return s.subset_images(idx)


def make_tasks(split: EmbeddingSplit, bank: Optional[EmbeddingSplit] = None, *, directions: Sequence[str] = DIRECTIONS,
               meta: Optional[dict] = None) -> Dict[str, RetrievalTask]:
    """t2i / i2t tasks on ``split`` whose banks are the images and captions of ``bank`` (None: no banks)."""
    return build_tasks(split.images, split.captions, split.caption_to_image,
                       image_bank=None if bank is None else bank.images,
                       caption_bank=None if bank is None else bank.captions, directions=tuple(directions),
                       meta=meta)


def subsample_rows(x: np.ndarray, fraction: float, seed: int = 0) -> np.ndarray:
    """A seeded random ``fraction`` of the rows of ``x`` (at least one row), in their original order."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1]; got {fraction}")
    if fraction == 1:
        return x
    n = max(1, int(round(fraction * len(x))))
    return x[np.sort(np.random.default_rng(seed).choice(len(x), n, replace=False))]


# ---------------------------------------------------------------------------------------------- running methods
def _method_items(methods: MethodSpec) -> List[Tuple[str, str]]:
    if isinstance(methods, Mapping):
        return list(methods.items())
    return [(m, m) for m in methods]


def _params_for(params, direction: str, label: str) -> dict:
    """``params`` is {label: {...}} or {direction: {label: {...}}}."""
    if not params:
        return {}
    if direction in params and isinstance(params[direction], Mapping) and label not in params:
        return dict(params[direction].get(label, {}) or {})
    return dict(params.get(label, {}) or {})


def fmt_params(p: Mapping) -> str:
    """``{"alpha": 0.75, "k": 16}`` -> ``"alpha=0.75, k=16"`` (stable order as given)."""
    def f(v):
        if isinstance(v, float):
            return f"{v:g}"
        return str(v)
    return ", ".join(f"{k}={f(v)}" for k, v in p.items())


def _hub_columns(norm, task: RetrievalTask, ks: Sequence[int]) -> dict:
    out = {}
    for k in ks:
        n_k = k_occurrence(norm, k, task.queries)
        st = hubness_stats(n_k, k, task.n_queries)
        out[f"skewness@{k}"] = st["skewness"]
    return out


def run_methods(
    tasks: Mapping[str, RetrievalTask],
    methods: MethodSpec,
    params=None,
    *,
    query_aware: bool = False,
    n_boot: int = 0,
    seed: int = 0,
    hubness_k: Sequence[int] = (),
    ks: Sequence[int] = (1, 5, 10),
    extra: Optional[Mapping[str, object]] = None,
    show_progress: bool = True,
) -> pd.DataFrame:
    """Fit every method on every task and evaluate it on the task's test queries.

    Args:
        tasks: ``{"t2i": task, "i2t": task}`` (from :func:`make_tasks`).
        methods: registry names, or ``{label: registry name}`` to run one method under several labels.
        params: ``{label: {param: value}}`` or ``{direction: {label: {...}}}``.
        query_aware: use the test queries as the query bank (transductive; DBSN Table 2).
        n_boot: bootstrap resamples for 95% CIs of every R@K (columns ``"R@K lo"``, ``"R@K hi"``).
        hubness_k: also report the skewness of N_k for these k (columns ``"skewness@k"``).
        extra: constant columns added to every row (e.g. ``{"setting": "bank=train 20%"}``).
    Returns:
        one row per (direction, method) with ``direction, method, name, params, R@1 ... MnR, fit_s``.
    """
    rows = []
    pairs = [(d, lab, name) for d in tasks for lab, name in _method_items(methods)]
    for direction, label, name in progress(pairs, desc="methods", disable=not show_progress):
        task = tasks[direction]
        p = clamp_k(name, _params_for(params, direction, label), task)
        norm = make_normalizer(name, **p)
        t0 = time.perf_counter()
        task.fit(norm, query_aware=query_aware)
        fit_s = time.perf_counter() - t0
        res = evaluate(norm, task, ks=ks, n_boot=n_boot, seed=seed)
        row = {"direction": direction, "method": label, "name": DISPLAY_NAMES.get(name, name), "params": fmt_params(p),
               **res, "fit_s": fit_s}
        row.update(_hub_columns(norm, task, hubness_k))
        if extra:
            row.update(extra)
        rows.append(row)
    return pd.DataFrame(rows)


def clamp_k(name: str, params: Mapping, task: RetrievalTask, *, query_aware: bool = False) -> dict:
    """NNN / CSLS need ``k <= `` the query-bank size: clamp ``k`` for tiny banks (e.g. small real folders)."""
    p = dict(params)
    bank = task.queries if query_aware else task.query_bank
    if name in ("nnn", "csls") and "k" in p and bank is not None and int(p["k"]) > len(bank):
        p["k"] = int(len(bank))
    return p


def _clamp_grid(name: str, grid: Mapping[str, Sequence], task: RetrievalTask) -> Dict[str, list]:
    g = {k: list(v) for k, v in grid.items()}
    if name in ("nnn", "csls") and "k" in g and task.query_bank is not None:
        n = len(task.query_bank)
        g["k"] = sorted({min(int(k), n) for k in g["k"]})
    return g


def reduced_grid(method: str, fast: bool, reduced: Optional[Mapping[str, Mapping[str, Sequence]]] = None) -> Dict[str, list]:
    """The paper grid of ``method`` (:data:`hubnorm.PAPER_GRIDS`) or, when ``fast``, the reduced one."""
    if fast and reduced and method in reduced:
        return {k: list(v) for k, v in reduced[method].items()}
    return {k: list(v) for k, v in PAPER_GRIDS.get(method, {}).items()}


def select_and_evaluate(
    val_tasks: Mapping[str, RetrievalTask],
    test_tasks: Mapping[str, RetrievalTask],
    methods: MethodSpec,
    grids: Mapping[str, Mapping[str, Sequence]],
    *,
    metric: str = "R@1",
    fixed: Optional[Mapping[str, Mapping[str, object]]] = None,
    reuse: Optional[Mapping[str, str]] = None,
    n_boot: int = 0,
    seed: int = 0,
    hubness_k: Sequence[int] = (),
    extra: Optional[Mapping[str, object]] = None,
    show_progress: bool = True,
) -> Tuple[pd.DataFrame, pd.DataFrame]:
    """NNN Appendix B: choose each method's parameters on the held-out ``val_tasks`` (by ``metric``), then
    evaluate once on ``test_tasks`` with the winners.

    ``grids`` maps a method *label* to its grid (missing or empty: no selection, ``fixed`` / default parameters).
    ``reuse`` maps a label to an earlier label whose chosen parameters it takes instead of its own search (e.g.
    ``{"dualdis": "dualis"}``: the NNN paper finds DualDIS and DualIS alike).
    Returns ``(results, selection)``: the test results (as :func:`run_methods`) and one row per (direction,
    method) with the chosen parameters, the validation score and the number of grid points tried.
    """
    fixed = fixed or {}
    chosen: Dict[str, Dict[str, dict]] = {d: {} for d in test_tasks}
    sel_rows = []
    items = _method_items(methods)
    jobs = [(d, lab, name) for d in test_tasks for lab, name in items]
    for direction, label, name in progress(jobs, desc="selection on val", disable=not show_progress):
        base = dict(fixed.get(label, {}) or {})
        grid = grids.get(label) if grids else None
        if reuse and label in reuse:
            params = {**base, **chosen[direction][reuse[label]]}
            sel_rows.append({"direction": direction, "method": label, "chosen": fmt_params(params) + f" (as {reuse[label]})",
                             f"val {metric}": np.nan, "grid points": 0, **params})
        elif grid:
            grid = _clamp_grid(name, grid, val_tasks[direction])
            if name == "nnn" and set(grid) == {"alpha", "k"} and not base:
                best, score, n_points = _select_nnn(val_tasks[direction], grid, metric)
            else:
                sel = grid_search(name, val_tasks[direction], grid, metric=metric, fixed=base, progress=False)
                best, score, n_points = sel.best_params, sel.best_score, len(sel.table)
            params = {**base, **best}
            sel_rows.append({"direction": direction, "method": label, "chosen": fmt_params(best),
                             f"val {metric}": score, "grid points": n_points, **best})
        else:
            params = base
            sel_rows.append({"direction": direction, "method": label, "chosen": fmt_params(params) or "(none)",
                             f"val {metric}": np.nan, "grid points": 0})
        chosen[direction][label] = params
    results = run_methods(test_tasks, methods, chosen, n_boot=n_boot, seed=seed, hubness_k=hubness_k, extra=extra,
                          show_progress=show_progress)
    return results, pd.DataFrame(sel_rows)


def _select_nnn(task: RetrievalTask, grid: Mapping[str, Sequence], metric: str) -> Tuple[dict, float, int]:
    """:func:`hubnorm.grid_search` for NNN through :func:`nnn_grid` (one fit per k): same winner, same tie-break
    (the first grid point in ``itertools.product(alpha, k)`` order)."""
    alphas = [float(a) for a in grid["alpha"]]
    ks = [int(k) for k in grid["k"]]
    tab = nnn_grid(task, alphas, ks, show_progress=False)
    tab["_order"] = [alphas.index(a) * len(ks) + ks.index(k) for a, k in zip(tab["alpha"], tab["k"])]
    tab = tab.sort_values("_order", kind="stable").reset_index(drop=True)
    values = tab[metric].to_numpy()
    i = int(np.argmin(values) if metric.startswith(("MdR", "MnR")) else np.argmax(values))
    alpha = grid["alpha"][alphas.index(tab.loc[i, "alpha"])]
    k = grid["k"][ks.index(tab.loc[i, "k"])]
    return {"alpha": alpha, "k": k}, float(values[i]), len(tab)


def chosen_params(selection: pd.DataFrame, direction: str, method: str, names: Sequence[str]) -> dict:
    """The parameters chosen by :func:`select_and_evaluate` for one (direction, method), as a dict."""
    row = selection[(selection["direction"] == direction) & (selection["method"] == method)].iloc[0]
    out = {}
    for n in names:
        v = row[n]
        out[n] = int(v) if float(v).is_integer() and n in ("k",) else float(v)
    return out


def score_and_hubness(norm, task: RetrievalTask, *, ks: Sequence[int] = (1, 5, 10), hubness_k: int = 10) -> dict:
    """R@K / MdR / MnR and the skewness of N_k of a fitted normalizer from *one* pass over the score matrix
    (the m x n matrix is formed once; use for the small problems of the notebooks' sweeps)."""
    s = norm.score(task.queries)
    out = summarize_ranks(positive_ranks(s, task.positives), ks)
    n_k = k_occurrence(s, hubness_k)
    out[f"skewness@{hubness_k}"] = hubness_stats(n_k, hubness_k, task.n_queries)["skewness"]
    return out


def nnn_grid(task: RetrievalTask, alphas: Sequence[float], ks: Sequence[int], *, show_progress: bool = True) -> pd.DataFrame:
    """R@1/5/10 of NNN over an (alpha, k) grid (NNN Tables A3/A4 and the alpha x k heat map), fast.

    NNN's bias is linear in alpha (Eq. 1: ``b = alpha * mean top-k``), so the library's normalizer is fitted
    once per k (with alpha = 1) and its offsets are scaled for every alpha; the raw score matrix is formed once.
    The result equals fitting ``NearestNeighborNormalization(alpha, k)`` at every grid point (unit-tested).
    """
    base = torch.as_tensor(task.queries) @ torch.as_tensor(task.targets).T
    ks = sorted({min(int(k), len(task.query_bank)) for k in ks})  # k <= bank size (tiny real folders)
    rows = []
    for k in progress(ks, desc=f"NNN k grid ({task.direction})", disable=not show_progress):
        unit = task.fit(make_normalizer("nnn", alpha=1.0, k=int(k)))
        off = unit.offsets_.to(base.dtype)
        for a in alphas:
            res = summarize_ranks(positive_ranks(base + float(a) * off, task.positives))
            rows.append({"direction": task.direction, "alpha": float(a), "k": int(k), **res})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------- bank sweeps
def bank_fraction_sweep(
    ds: EmbeddingDataset,
    test: EmbeddingSplit,
    fractions: Sequence[float],
    methods: MethodSpec,
    params=None,
    *,
    split: str = "train",
    directions: Sequence[str] = DIRECTIONS,
    seed: int = 0,
    show_progress: bool = True,
) -> pd.DataFrame:
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


def nn_gap(a: np.ndarray, b: np.ndarray, *, block: int = 4096) -> float:
    """Nearest-neighbour distribution gap ``1 - mean_{x in a} max_{y in b} cos(x, y)``: how far the points of
    ``a`` are from the closest point of ``b`` (0 when every point of ``a`` has a copy in ``b``). Not symmetric."""
    ta, tb = torch.as_tensor(np.asarray(a)), torch.as_tensor(np.asarray(b))
    tb = tb.to(ta.dtype)
    best = []
    for i in range(0, len(ta), block):
        best.append((ta[i:i + block] @ tb.T).max(dim=1).values)
    return float(1.0 - torch.cat(best).mean())


def centroid_distance(a: np.ndarray, b: np.ndarray) -> float:
    """``||mean(a) - mean(b)||``: a first-moment proxy of the distribution gap (the EMD of the DBSN paper)."""
    return float(np.linalg.norm(np.asarray(a, np.float64).mean(0) - np.asarray(b, np.float64).mean(0)))


def query_bank_sweep(
    task: RetrievalTask,
    fractions: Sequence[float],
    methods: MethodSpec,
    params=None,
    *,
    seeds: Sequence[int] = (0, 1, 2),
    hubness_k: int = 10,
    show_progress: bool = True,
) -> pd.DataFrame:
    """DBSN Fig. 7: subsample the *query* bank of ``task`` (the target bank stays whole, as in DBSN Sec. 4.3),
    ``len(seeds)`` draws per fraction, and record R@1, the skewness of N_k and two distribution gaps:

    - ``gap bank->targets``: :func:`nn_gap` of the bank queries to the targets the method balances over (the
      test gallery for IS/SN, the extended gallery ``[T ; B_t]`` for DBSN/DualIS: the bank's own training
      targets are there, which is how DBSN narrows the gap, Proposition 2);
    - ``gap test queries->bank``: :func:`nn_gap` of the test queries to the bank (how well the bank covers the
      test query distribution, Fig. 7(d)).
    """
    full = task.query_bank
    rows = []
    jobs = [(f, s) for f in fractions for s in (list(seeds)[:1] if f >= 1 else seeds)]  # the whole bank: one draw
    for frac, s in progress(jobs, desc="query-bank sweep", disable=not show_progress):
        bank = subsample_rows(full, frac, seed=s)
        t = task.with_banks(query_bank=bank, target_bank=task.target_bank)
        gap_q = nn_gap(task.queries, bank)
        gap_t_plain = nn_gap(bank, task.targets)
        gap_t_ext = nn_gap(bank, np.concatenate([task.targets, task.target_bank])) if task.target_bank is not None else np.nan
        for label, name in _method_items(methods):
            p = _params_for(params, task.direction, label)
            norm = make_normalizer(name, **p)
            t.fit(norm)
            res = score_and_hubness(norm, t, ks=(1,), hubness_k=hubness_k)
            skew = res[f"skewness@{hubness_k}"]
            dual = getattr(type(norm), "uses_target_bank", "unused") == "required"
            rows.append({"fraction": frac, "seed": s, "bank_queries": len(bank), "method": label,
                         "name": DISPLAY_NAMES.get(name, name), "R@1": res["R@1"], f"skewness@{hubness_k}": skew,
                         "gap bank->targets": gap_t_ext if dual else gap_t_plain,
                         "gap test queries->bank": gap_q})
    return pd.DataFrame(rows)


def tau_sweep(task: RetrievalTask, methods: Sequence[str], taus: Sequence[float], *, query_aware: bool,
              fixed: Optional[Mapping[str, Mapping]] = None, show_progress: bool = True) -> pd.DataFrame:
    """DBSN Fig. 6: R@1 of each method over the temperature ``tau``."""
    rows = []
    fixed = fixed or {}
    for name, tau in progress(list(itertools.product(methods, taus)), desc="tau sweep", disable=not show_progress):
        norm = make_normalizer(name, tau=float(tau), **(fixed.get(name, {}) or {}))
        task.fit(norm, query_aware=query_aware)
        res = evaluate(norm, task, ks=(1,))
        rows.append({"method": DISPLAY_NAMES.get(name, name), "tau": float(tau), "R@1": res["R@1"],
                     "bank": "test queries (query-aware)" if query_aware else "query bank"})
    return pd.DataFrame(rows)


def sinkhorn_iterations(task: RetrievalTask, methods: Sequence[str] = ("sn", "dbsn"), *, tau: float = 0.01,
                        iterations: Sequence[int] = (1, 3, 10, 30, 100), converged: int = 1000, tol: float = 1e-7,
                        query_aware: bool = False, show_progress: bool = True) -> pd.DataFrame:
    """R@1 after T Sinkhorn iterations (Alg. A1 uses T = 10) and "to convergence" (at most ``converged``
    iterations, stopping when the offsets move less than ``tol``), with the iterations actually run and the
    fit time."""
    rows = []
    jobs = [(m, T, None) for m in methods for T in iterations] + [(m, converged, tol) for m in methods]
    for name, T, stop in progress(jobs, desc="sinkhorn iterations", disable=not show_progress):
        norm = make_normalizer(name, tau=tau, n_iter=int(T), tol=stop)
        t0 = time.perf_counter()
        task.fit(norm, query_aware=query_aware)
        fit_s = time.perf_counter() - t0
        res = evaluate(norm, task, ks=(1,))
        rows.append({"method": DISPLAY_NAMES.get(name, name), "setting": "to convergence" if stop else f"T={T}",
                     "T max": int(T), "iterations run": int(norm.n_iter_), "R@1": res["R@1"], "fit_s": fit_s})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------- hubness
def occurrence_frame(fitted: Mapping[str, object], task: RetrievalTask, k: int) -> pd.DataFrame:
    """Long table of N_k per target for several fitted normalizers: columns ``method, target, N_k``."""
    frames = []
    for label, norm in fitted.items():
        n_k = k_occurrence(norm, k, task.queries)
        frames.append(pd.DataFrame({"method": label, "target": np.arange(n_k.size), "N_k": n_k}))
    return pd.concat(frames, ignore_index=True)


def occurrence_stats(occ: pd.DataFrame, k: int, n_queries: int) -> pd.DataFrame:
    """:func:`hubnorm.hubness_stats` for every method of an :func:`occurrence_frame`."""
    rows = []
    for label, g in occ.groupby("method", sort=False):
        rows.append({"method": label, **hubness_stats(g["N_k"].to_numpy(), k, n_queries)})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------- published numbers
def published(paper: str, tables: Union[str, Sequence[str]], **equals) -> pd.DataFrame:
    """Published rows of ``paper`` in ``tables`` whose columns equal the given values (a list means "any of")."""
    df = load_published(paper)
    tables = [tables] if isinstance(tables, str) else list(tables)
    df = df[df["table"].astype(str).isin(tables)]
    for col, val in equals.items():
        if isinstance(val, (list, tuple, set)):
            df = df[df[col].isin(list(val))]
        else:
            df = df[df[col] == val]
    return df.reset_index(drop=True)


def to_long(df: pd.DataFrame, id_vars: Sequence[str], metrics: Sequence[str] = METRICS) -> pd.DataFrame:
    """Wide results (one column per metric) -> long (``metric``, ``value``)."""
    metrics = [m for m in metrics if m in df.columns]
    return df.melt(id_vars=list(id_vars), value_vars=metrics, var_name="metric", value_name="value")


def side_by_side(ours: pd.DataFrame, pub: pd.DataFrame, on: Sequence[str], *, label: str,
                 source_note: str) -> pd.DataFrame:
    """:func:`hubnorm.reporting.beside_published` plus provenance: a ``published`` and a ``this run`` column, and
    a ``run`` column saying whether this run is a synthetic analog or real data (never a reproduction when
    synthetic), and ``published source`` (paper and table)."""
    out = beside_published(ours, pub, on)
    out["run"] = label
    out["published source"] = source_note
    return out


# ---------------------------------------------------------------------------------------------- printing
def show(df: pd.DataFrame, columns: Optional[Sequence[str]] = None, *, digits: int = 2) -> None:
    """Print a table with floats rounded to ``digits`` (stable text for nbval)."""
    d = df if columns is None else df[list(columns)]
    with pd.option_context("display.width", 200, "display.max_columns", 50, "display.max_colwidth", 60):
        print(d.to_string(index=False, float_format=lambda x: f"{x:.{digits}f}", na_rep="-"))


def check(claim: str, ok: bool, detail: str = "") -> None:
    """Print ``PASS: claim [detail]`` or ``DIFFERS: claim [detail]`` (returns None so that a notebook cell
    ending with a check shows only the printed line)."""
    print(f"{'PASS' if ok else 'DIFFERS'}: {claim}" + (f" [{detail}]" if detail else ""))
