"""What the course notebooks compute from a ``sims:`` folder (released score matrices, no embeddings).

A ``sims:<folder>`` (:mod:`hubnorm.data.sims`) holds score matrices only: test queries x gallery, and where given
the bank x gallery, bank x bank and bank x test matrices. Every method that is a function of scores (raw, NNN, IS,
DIS, CSLS, SN; DBSN, DualIS and DualDIS when the folder has their extra matrices) fits and evaluates from them
(:mod:`hubnorm.scores`, equal to the embeddings path to 1e-12). What needs embeddings or texts cannot run: DN (bank
means of embeddings), a cross-dataset bank (another data set's embeddings), the geometry pictures (modality gap,
hub and anti-hub images), the cross-encoder (images or latents), graded relevance from caption texts, planted hubs.

Each notebook 00-07 and 09 has one cell that, for a ``sims:`` source, calls :func:`run_notebook`: it prints a NOTE
naming what this notebook cannot compute from scores (:data:`NEEDS`), shows what it can (the study functions
below: method tables, hubness, the k ablation, query-bank sizes, IS vs SN over temperatures, first-stage recall,
the hubs of the raw scores), saves the tables and figures under the notebook's prefix (``NN_sims_*``), and then
stops the notebook: the remaining cells read embeddings, so they are skipped (:func:`skip_rest`), never run on
made-up data.

Rules of a sims run (each said in a NOTE where it applies):

- **labels**: every table has a ``run`` column and every figure title the run's label (``"synthetic analog (sims
  folder NAME)"`` when the manifest says ``"synthetic": true``, else ``"real data (NAME, released score
  matrices)"``, :func:`hubnorm.media.load_media`);
- **no validation split**: a sims folder holds test and bank matrices only, so no hyperparameter is *selected*:
  every method runs at the notebook's fixed parameters (the papers' defaults), and a study that needs a held-out
  split (NNN's alpha x k grid) is skipped;
- **the bank**: the folder's query bank (``bank_rows`` for the row-side queries, ``bank_cols`` for the
  column-side ones); without one, the test queries serve as the bank (query-aware, labelled so);
- **directions**: the notebooks' ``t2i`` / ``i2t`` name the text-query and the item-query directions of the folder
  (``t2v`` / ``v2t`` for a text-video folder); the tables use the folder's names;
- **query-bank sizes**: seeded subsets of the bank rows (the rows of a subset are read into memory; the whole
  bank is read block by block);
- no published rows are shown beside a sims run (the folder's model and data set are not those of the tables).

The study functions are plain (a task in, a DataFrame out) and equal the embeddings path where both exist
(``tests/test_score_studies.py``).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import pandas as pd

from ..blocks import limit_of
from ..evaluation import evaluate, positive_ranks, recall_at_k as ranks_recall
from ..hubness import hubness, k_occurrence
from ..provenance import NO_BANK, QUERY_AWARE, bank_mark
from ..registry import make_normalizer
from ..matrices import ScoreMatrix
from ..retrieval import RetrievalTask
from .protocol import SimsRun, is_sims, load_sims_run

__all__ = ["NEEDS", "is_sims", "SimsRun", "load_sims_run", "score_methods", "methods_table", "hubness_table",
           "bank_subset", "bank_size_table", "tau_sweep", "recall_at_k", "hub_table", "run_notebook",
           "skip_rest"]

#: What each notebook cannot compute from score matrices, and why (the NOTE of a sims run). Notebooks 02, 03 and 08
#: run their own cells on score matrices (``protocol.open_data``) and have no entry.
NEEDS: Dict[str, str] = {
    "00": "skipped: sections 3-4 (the modality gap, the caption cloud's centre, the hub and anti-hub pictures) and "
          "DN of section 6 need embeddings; shown: the hubness of the test scores, raw and after NNN, IS, CSLS and SN "
          "(sections 1-2, random points, do not read the source)",
    "01": "skipped: DN (it needs the bank means of embeddings), the cross-dataset bank of NNN Table 2 (another data "
          "set's embeddings), the hyperparameter selection on a held-out split and its bootstrap intervals (a sims "
          "folder has no validation split); shown: every score-only method at fixed parameters, both directions",
    "04": "skipped: the published rows (NNN Tables A12-A15); shown: NNN, IS, SN and DBSN with seeded subsets of the "
          "folder's bank rows (all from scores)",
    "05": "skipped: the transport-plan picture, the Sinkhorn iteration study and the validation-bank rows of Table 4 "
          "/ A7 (a sims folder has no validation split); shown: IS, SN and the dual-bank methods with the test "
          "queries or the folder's bank, and R@1 over the temperature",
    "06": "skipped: the cross-encoder (Tables 8, 11, 3-4, the reranking grid, NNN on its scores) needs the images "
          "(BLIP) or the embeddings' latents (the simulated one); shown: R@k of the first stages (the reranking "
          "ceiling) from scores",
    "07": "skipped: graded relevance, NDCG and the Smooth-NDCG adapter need the caption texts and the embeddings; "
          "shown: R@K of the first stages from scores",
    "09": "skipped: offset forensics, planted hubs and the bank-only detector need embeddings; shown: the largest "
          "hubs of the raw test scores and their k-occurrence after each offset method",
}

SECTIONS: Dict[str, Sequence[str]] = {
    "00": ("hubness",), "01": ("methods",),
    "04": ("bank_size",), "05": ("qa_vs_bank", "tau_sweep"), "06": ("recall",), "07": ("recall",), "09": ("hubs",),
}


# ---------------------------------------------------------------------------------------------- methods
def _param(params: Mapping, names: Sequence[str], default, direction_key: Optional[str] = None):
    """The first of ``names`` in ``params`` (a notebook's globals); ``{"t2i": x, "i2t": y}`` by direction."""
    for name in names:
        if "." in name:
            outer, inner = name.split(".")
            if isinstance(params.get(outer), Mapping) and inner in params[outer]:
                return params[outer][inner]
        elif params.get(name) is not None:
            v = params[name]
            if isinstance(v, Mapping):
                return v.get(direction_key or "t2i", default)
            return v
    return default


#: the methods of a sims run's tables (registry names; the dual-bank ones run when the folder has their matrices)
SHOWN = ("raw", "nnn", "is", "dis", "csls", "sn", "dbsn", "dualis", "dualdis")
#: the methods of the hubness, recall and hub tables
HUBNESS_SHOWN = ("raw", "nnn", "is", "csls", "sn")
#: the methods of notebook 05's query-aware vs bank table
SINKHORN_SHOWN = ("raw", "is", "sn", "dbsn", "dualis")


def score_methods(params: Mapping = (), direction_key: str = "t2i", *, extra: bool = True,
                  names: Optional[Sequence[str]] = None) -> Dict[str, object]:
    """The score-only methods at a notebook's fixed parameters (``params``: its globals; the papers' defaults
    otherwise): raw, NNN, IS, DIS, CSLS, SN, and with ``extra`` DBSN, DualIS, DualDIS (run only when the folder
    has their matrices). ``direction_key``: ``"t2i"`` or ``"i2t"`` for a per-direction parameter (``is_tau``);
    ``names``: only these methods (in this order). The raw scores are ``None``."""
    params = dict(params or {})
    alpha = _param(params, ("nnn_alpha", "nnn_params.alpha", "alpha"), 0.75)
    k = _param(params, ("nnn_k", "nnn_params.k"), 16)
    is_tau = _param(params, ("is_tau",), 0.02, direction_key)
    sn_tau = _param(params, ("sn_tau",), 0.01, direction_key)
    sn_iter = _param(params, ("sn_iter",), 10)
    dual = params.get("dualis_params") or params.get("dual_betas") or {"beta_query": 50.0, "beta_target": 50.0}
    spec = [("raw", None), ("nnn", {"alpha": alpha, "k": k}), ("is", {"tau": is_tau}), ("dis", {"tau": is_tau, "k": 1}),
            ("csls", {"k": 10}), ("sn", {"tau": sn_tau, "n_iter": sn_iter})]
    if extra:
        spec += [("dbsn", {"tau": sn_tau, "n_iter": sn_iter}), ("dualis", dict(dual)), ("dualdis", dict(dual))]
    made = {name: None if p is None else make_normalizer(name, **p) for name, p in spec}
    return {name: made[name] for name in (names or made) if name in made}


def _bank_size(task: RetrievalTask, query_aware: bool) -> int:
    return task.n_queries if query_aware else (task.size("query_bank") or 0)


def _clamped(norm, task: RetrievalTask, query_aware: bool, notes: List[str]):
    """``norm`` with every parameter limited by an input size (NNN's and CSLS's ``k``: the bank) at most that size
    (a NOTE when one is cut)."""
    if norm is None:
        return norm

    def size(inp):
        return _bank_size(task, query_aware) if inp == "query_bank" else task.size(inp)

    for pname, spec in type(norm).parameters.items():
        n, v = limit_of(spec, size), getattr(norm, pname, None)
        if n and isinstance(v, int) and v > n:
            notes.append(f"{type(norm).name} {pname}={v} is larger than its limit here ({n}: "
                         f"{', '.join(spec.limited_by)}): {pname}={n} is used")
            setattr(norm, pname, n)
    return norm


def _fit_or_skip(task: RetrievalTask, name: str, norm, query_aware: bool, skipped: Dict[str, str]) -> bool:
    if norm is None:
        return True
    try:
        task.fit(norm, query_aware=query_aware)
        return True
    except ValueError as exc:   # a matrix the folder lacks (named in the message)
        skipped[f"{name} ({task.direction})"] = str(exc)
        return False


def _setting(task: RetrievalTask, query_aware: bool) -> str:
    return "test queries (query-aware)" if query_aware else f"bank ({task.size('query_bank')} queries)"


def _bank_label(task: RetrievalTask, query_aware: bool, mark: str) -> str:
    """A row's ``bank``: the bank it was meant to use (:func:`_setting`), and QUERY-AWARE where the fit's record
    says that bank holds test queries (``mark``, :func:`hubnorm.provenance.bank_mark`); "-" for the raw scores."""
    if mark == NO_BANK:
        return "-"
    if mark == QUERY_AWARE and not query_aware:
        return f"{_setting(task, query_aware)}: QUERY-AWARE (it holds test queries)"
    return _setting(task, query_aware)


def _without_mark(res: Mapping[str, object]) -> Dict[str, object]:
    return {k: v for k, v in res.items() if k != "bank"}


def methods_table(run: SimsRun, methods: Callable[[str], Mapping[str, object]], *, hub_k: int = 10,
                  query_aware: Optional[bool] = None, notes: Optional[List[str]] = None,
                  skipped: Optional[Dict[str, str]] = None) -> pd.DataFrame:
    """R@1, R@5, R@10, MdR, MnR and the skewness of ``N_{hub_k}`` of every method, both directions.

    ``methods(direction)``: ``{name: normalizer or None}``; ``query_aware``: None uses the folder's bank when it
    has one, else the test queries. A method whose matrix is missing is left out and named in ``skipped``."""
    notes = [] if notes is None else notes
    skipped = {} if skipped is None else skipped
    rows = []
    for d, task in run.tasks.items():
        qa = (not run.has_bank(d)) if query_aware is None else query_aware
        for name, norm in methods(d).items():
            norm = _clamped(norm, task, qa, notes)
            if not _fit_or_skip(task, name, norm, qa, skipped):
                continue
            res = evaluate(norm, task)
            rows.append({"run": run.label, "direction": d, "method": name, "bank": _bank_label(task, qa, res["bank"]),
                         **_without_mark(res), f"skew N_{hub_k}": hubness(task.blocks(norm), k=hub_k)["skewness"]})
    return pd.DataFrame(rows)


def hubness_table(run: SimsRun, methods: Callable[[str], Mapping[str, object]], *, k: int = 10,
                  notes: Optional[List[str]] = None, skipped: Optional[Dict[str, str]] = None) -> pd.DataFrame:
    """Hubness of the (normalised) test scores per direction and method: skewness of ``N_k``, its largest value,
    the share of anti-hubs (``N_k = 0``) and of hubs (``N_k`` at least twice its mean,
    :func:`hubnorm.hubness.hubness_stats`), R@1 beside them."""
    notes = [] if notes is None else notes
    skipped = {} if skipped is None else skipped
    rows = []
    for d, task in run.tasks.items():
        qa = not run.has_bank(d)
        for name, norm in methods(d).items():
            norm = _clamped(norm, task, qa, notes)
            if not _fit_or_skip(task, name, norm, qa, skipped):
                continue
            h = hubness(task.blocks(norm), k=k)
            res = evaluate(norm, task)
            rows.append({"run": run.label, "direction": d, "method": name, "bank": _bank_label(task, qa, res["bank"]),
                         f"skew N_{k}": h["skewness"], f"max N_{k}": h["max"], "anti-hubs %": 100 * h["antihub_share"],
                         "hubs %": 100 * h["hub_share"], "R@1": res["R@1"]})
    return pd.DataFrame(rows)


def _take_rows(m: ScoreMatrix, rows: np.ndarray) -> ScoreMatrix:
    """The rows ``rows`` (sorted) of ``m`` (:meth:`ScoreMatrix.take`: read lazily, only those rows; a matrix that is
    already a subset, or computed from embeddings, is cut correctly)."""
    return m.take(rows=rows)


def bank_subset(task: RetrievalTask, rows) -> RetrievalTask:
    """``task`` with its query bank cut to the bank rows ``rows`` (every matrix with the query bank among its axes
    is cut the same way)."""
    rows = np.sort(np.asarray(rows, dtype=np.int64))
    mats = {}
    for (r, c), m in task.engine.matrices.items():
        if r == "query_bank":
            mats[(r, c)] = _take_rows(m, rows)
        elif c == "query_bank":
            mats[(c, r)] = _take_rows(m.T, rows)
        else:
            mats[(r, c)] = m
    return replace(task, scores=mats, meta=dict(task.meta), hints=dict(task.hints))


def bank_size_table(task: RetrievalTask, methods: Sequence[Tuple[str, Mapping]], fractions: Sequence[float],
                    seeds: Sequence[int] = (0,), *, skipped: Optional[Dict[str, str]] = None,
                    notes: Optional[List[str]] = None) -> pd.DataFrame:
    """R@1 of each method with a seeded subset of ``fraction`` of the bank rows (at least 1 row), per seed.
    ``methods``: ``[(registry name, parameters), ...]`` (a fresh normalizer per fit). A fraction of 1.0 is the
    whole bank; a parameter limited by the bank (NNN's ``k``) is cut to the subset's size (a NOTE in ``notes``)."""
    skipped = {} if skipped is None else skipped
    notes = [] if notes is None else notes
    n_bank = task.size("query_bank")
    if not n_bank:
        raise ValueError(f"the {task.direction} task has no query bank (bank x gallery scores): the query-bank study "
                         "needs the manifest role 'bank_rows' (text queries) or 'bank_cols' (item queries)")
    rows = []
    for frac in fractions:
        size = max(1, int(round(float(frac) * n_bank)))
        for seed in (seeds if size < n_bank else seeds[:1]):
            sub = task if size >= n_bank else bank_subset(
                task, np.random.default_rng(seed).choice(n_bank, size, replace=False))
            for name, p in methods:
                norm = _clamped(make_normalizer(name, **p), sub, False, notes)
                if not _fit_or_skip(sub, name, norm, False, skipped):
                    continue
                res = evaluate(norm, sub)
                rows.append({"direction": task.direction, "fraction": float(frac), "bank queries": size,
                             "seed": seed, "method": name, "R@1": res["R@1"], "R@5": res["R@5"], "MdR": res["MdR"],
                             "bank": _bank_label(sub, False, res["bank"])})
    return pd.DataFrame(rows)


def tau_sweep(task: RetrievalTask, taus: Sequence[float], names: Sequence[str] = ("is", "sn"), *,
              query_aware: bool = False, sn_iter: int = 10) -> pd.DataFrame:
    """R@1 of IS and SN (and DBSN when named and its matrix is given) over the temperatures ``taus``."""
    rows = []
    for name in names:
        for tau in taus:
            norm = make_normalizer(name, tau=float(tau))
            if "n_iter" in type(norm).parameters:
                norm.n_iter = int(sn_iter)
            res = evaluate(task.fit(norm, query_aware=query_aware), task)
            rows.append({"direction": task.direction, "method": name, "tau": float(tau), "R@1": res["R@1"],
                         "R@5": res["R@5"], "bank": _bank_label(task, query_aware, res["bank"])})
    return pd.DataFrame(rows)


def recall_at_k(task: RetrievalTask, methods: Mapping[str, object], ks: Sequence[int], *,
                query_aware: bool = False) -> pd.DataFrame:
    """R@k (%) of each method's normalised test scores for every k of ``ks`` (the reranking ceiling of a first
    stage: the share of queries whose positive is among its top k)."""
    rows = []
    for name, norm in methods.items():
        if norm is not None:
            task.fit(norm, query_aware=query_aware)
        ranks = positive_ranks(task.blocks(norm), task.positives)
        rows.append({"direction": task.direction, "method": name,
                     "bank": _bank_label(task, query_aware, bank_mark(norm, task)),
                     **{f"R@{k}": ranks_recall(ranks, int(k)) for k in ks}})   # (in the ledger of R@K values)
    return pd.DataFrame(rows)


def hub_table(task: RetrievalTask, methods: Mapping[str, object], *, k: int = 10, top: int = 10,
              query_aware: bool = False) -> pd.DataFrame:
    """The ``top`` targets with the largest ``N_k`` of the raw test scores, and their ``N_k`` after each method."""
    counts = {name: k_occurrence(task.blocks(task.fit(norm, query_aware=query_aware)), k)
              for name, norm in methods.items()}
    raw = k_occurrence(task.blocks(), k)
    order = np.lexsort((np.arange(raw.size), -raw))[:top]     # largest N_k first, ties by index
    out = pd.DataFrame({"target": order, **{f"N_{k} {name}": counts[name][order] for name in counts}})
    out.insert(0, "direction", task.direction)
    marks = [_bank_label(task, query_aware, bank_mark(norm, task)) for norm in methods.values() if norm is not None]
    out["bank"] = " / ".join(dict.fromkeys(marks)) or "-"   # the banks of the methods' columns
    return out


# ---------------------------------------------------------------------------------------------- the notebook cell
def _skip_cell(lines):
    text = "".join(lines)
    if "score_studies.run_notebook(" in text or "nb.setup(" in text or re.search(r"^source\b", text, flags=re.M):
        _uninstall()         # the parameters, setup or sims cell run again: the notebook runs normally
        return lines
    return ["pass  # skipped: this run reads a sims: folder (score matrices only); see the NOTE above\n"]


def _uninstall():
    try:
        from IPython import get_ipython
    except ImportError:
        return
    ip = get_ipython()
    if ip is not None and _skip_cell in ip.input_transformers_cleanup:
        ip.input_transformers_cleanup.remove(_skip_cell)


def skip_rest(reason: str) -> None:
    """Print ``NOTE: reason`` and skip the remaining cells of this notebook (they read embeddings).

    In a Jupyter kernel (papermill, run_all.sh) the next cells run as ``pass`` (their outputs stay empty) until the
    parameters, setup or sims cell runs again; in a plain Python run of the notebook's ``.py`` it exits
    (``SystemExit(0)``: a clean end)."""
    print(f"NOTE: {reason}")
    try:
        from IPython import get_ipython
        ip = get_ipython()
    except ImportError:
        ip = None
    if ip is not None and hasattr(ip, "input_transformers_cleanup"):
        if _skip_cell not in ip.input_transformers_cleanup:
            ip.input_transformers_cleanup.append(_skip_cell)
        return
    raise SystemExit(0)


def _fig_title(ax, text: str, label: str) -> None:
    ax.set_title(f"{text} — {label}", fontsize=9)


def run_notebook(prefix: str, source: str, run, params: Mapping, *, stop: bool = True,
                 hub_k: Optional[int] = None) -> Dict[str, pd.DataFrame]:
    """The sims branch of notebook ``prefix``: NOTE what needs embeddings (:data:`NEEDS`), compute and show what
    the scores give (:data:`SECTIONS`), save its tables / figures as ``<prefix>_sims_*``, then (``stop``) skip the
    notebook's remaining cells (:func:`skip_rest`). ``run``: the notebook's ``nb.setup`` object; ``params``: its
    ``globals()`` (the fixed method parameters are read from it); ``hub_k``: the k of N_k in the hubness tables
    (default: the notebook's ``hub_k`` parameter, else 10). Returns the tables by name."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    from .notebook import marks_note, show

    if prefix not in SECTIONS:
        raise ValueError(f"notebook {prefix!r} has no sims branch; known: {sorted(SECTIONS)}")
    params = dict(params)
    directions = params.get("directions") or ["t2i", "i2t"]
    if hub_k is None:
        hub_k = params.get("hub_k")
        hub_k = 10 if hub_k is None else hub_k
    if isinstance(hub_k, bool) or not isinstance(hub_k, (int, np.integer)) or hub_k < 1:
        raise ValueError(f"hub_k (the k of N_k) must be a positive integer; got {hub_k!r}")
    hub_k = int(hub_k)
    sims = load_sims_run(source, directions)
    label = sims.label
    print("this run:", label)
    print(f"NOTE: a sims: folder holds score matrices only; {NEEDS[prefix]}.")
    if sims.alias and any(k != v for k, v in sims.alias.items()):
        print("NOTE: directions " + ", ".join(f"{k} = {v}" for k, v in sims.alias.items())
              + " (the notebook's names for this folder's text-query and item-query directions).")
    print("NOTE: no validation split in a sims folder: no hyperparameter is selected; every method runs at this "
          "notebook's fixed parameters (the papers' defaults); no published rows are compared with a sims run.")
    for d, t in sims.tasks.items():
        if not sims.has_bank(d):
            print(f"NOTE: {d}: the folder has no bank x gallery scores for this direction, so the test queries serve "
                  f"as the bank (query-aware, labelled so); for a query bank, {t.hints[('query_bank', 'targets')]}.")
    notes: List[str] = []
    skipped: Dict[str, str] = {}
    tables: Dict[str, pd.DataFrame] = {}
    by_dir = {d: next((k for k, v in sims.alias.items() if v == d), "t2i") for d in sims.tasks}
    methods = lambda d: score_methods(params, by_dir[d], names=SHOWN)  # noqa: E731
    first = sims.directions[0]
    task0 = sims.tasks[first]

    def save(df, name, caption):
        run.save_table(df, f"sims_{name}", caption=f"{caption}; {label}.")
        tables[name] = df

    for section in SECTIONS[prefix]:
        if section == "methods":
            df = methods_table(sims, methods, hub_k=hub_k, notes=notes, skipped=skipped)
            save(df, "methods", "Score-only methods at fixed parameters, test scores")
            show(df, ["run", "direction", "method", "bank", "R@1", "R@5", "R@10", "MdR", "MnR", f"skew N_{hub_k}"])
            fig, ax = plt.subplots(figsize=(7, 3.6))
            sns.barplot(data=df, x="direction", y="R@1", hue="method", ax=ax)
            ax.set_ylabel("R@1 (%)")
            ax.legend(fontsize=7, ncol=5)
            _fig_title(ax, "R@1 per method, fixed parameters", label)
            fig.tight_layout()
            run.save_figure(fig, "sims_r1_by_method", caption=f"R@1 per method; {label}. {marks_note(df['bank'])}",
                            data=label, bank=df["bank"])
            plt.show()
        elif section == "hubness":
            keep = lambda d: score_methods(params, by_dir[d], names=HUBNESS_SHOWN)  # noqa: E731
            df = hubness_table(sims, keep, k=hub_k, notes=notes, skipped=skipped)
            save(df, "hubness", f"Hubness of the test scores (N_{hub_k}) per method")
            show(df, ["run", "direction", "method", f"skew N_{hub_k}", f"max N_{hub_k}", "anti-hubs %", "hubs %",
                      "R@1"])
        if section == "bank_size":
            parts = []
            if sims.has_bank(first):
                alpha = _param(params, ("nnn_params.alpha",), 0.75)
                k = _param(params, ("nnn_params.k",), 16)
                is_tau = _param(params, ("is_tau",), 0.02)
                sn_tau = _param(params, ("sn_tau",), 0.01)
                nnn = bank_size_table(task0, [("nnn", {"alpha": alpha, "k": k})],
                                      params.get("nnn_fractions") or [1.0, 0.5, 0.2, 0.1], [int(params.get("seed", 0))],
                                      skipped=skipped, notes=notes)
                fams = [("is", {"tau": is_tau}), ("sn", {"tau": sn_tau}), ("dbsn", {"tau": sn_tau})]
                fig7 = bank_size_table(task0, fams, params.get("dbsn_fractions") or [1 / 4, 1 / 16, 1 / 64],
                                       params.get("dbsn_seeds") or [0], skipped=skipped, notes=notes)
                df = pd.concat([nnn.assign(part="A: NNN"), fig7.assign(part="B: IS / SN / DBSN")], ignore_index=True)
                df.insert(0, "run", label)
                df["raw R@1"] = evaluate(None, task0)["R@1"]
                save(df, "bank_sizes", f"R@1 with seeded subsets of the bank rows, {first}")
                keys = ["part", "method", "fraction", "bank queries"]
                mean = df.groupby(keys, as_index=False)[["R@1", "R@5", "MdR"]].mean()   # over the seeds
                show(mean.assign(run=label), ["run", "part", "method", "fraction", "bank queries", "R@1", "R@5", "MdR"])
                fig, ax = plt.subplots(figsize=(6.5, 3.8))
                sns.lineplot(data=df, x="bank queries", y="R@1", hue="method", marker="o", errorbar=None, ax=ax)
                ax.axhline(float(df["raw R@1"].iloc[0]), ls="--", lw=1, color="k")
                ax.set_xscale("log")
                ax.set_ylabel("R@1 (%)")
                _fig_title(ax, f"{first}: R@1 over query-bank size (dashed: raw)", label)
                fig.tight_layout()
                run.save_figure(fig, "sims_bank_sizes", caption=f"R@1 over bank subsets; {label}. {marks_note(df['bank'])}",
                                data=label, bank=["none", *df["bank"]])
                plt.show()
            else:
                print(f"NOTE: {first}: the folder has no bank x gallery scores, so no query-bank size can be studied.")
        if section == "qa_vs_bank":
            rows = []
            for d, task in sims.tasks.items():
                for qa in ([True, False] if sims.has_bank(d) else [True]):
                    for name, norm in score_methods(params, by_dir[d], extra=not qa, names=SINKHORN_SHOWN).items():
                        if not _fit_or_skip(task, name, norm, qa, skipped):
                            continue
                        res = evaluate(norm, task)
                        rows.append({"run": label, "direction": d, "method": name,
                                     "bank": _bank_label(task, qa, res["bank"]), **_without_mark(res)})
            df = pd.DataFrame(rows).drop_duplicates(["direction", "method", "bank"])
            save(df, "qa_vs_bank", "IS, SN and the dual-bank methods with the test queries or the folder's bank")
            show(df, ["run", "direction", "bank", "method", "R@1", "R@5", "R@10", "MdR", "MnR"])
        if section == "tau_sweep":
            taus = params.get("taus") or [0.005, 0.01, 0.015, 0.02, 0.025]
            qa = not sims.has_bank(first)
            df = tau_sweep(task0, taus, ("is", "sn"), query_aware=qa).assign(run=label)
            save(df, "tau_sweep", f"R@1 of IS and SN over the temperature, {first}")
            show(df, ["run", "direction", "bank", "method", "tau", "R@1", "R@5"])
            fig, ax = plt.subplots(figsize=(6.5, 3.8))
            sns.lineplot(data=df, x="tau", y="R@1", hue="method", marker="o", ax=ax)
            ax.set_ylabel("R@1 (%)")
            _fig_title(ax, f"{first}: IS vs SN over τ", label)
            fig.tight_layout()
            run.save_figure(fig, "sims_tau_sweep", caption=f"R@1 over the temperature; {label}. {marks_note(df['bank'])}",
                            data=label, bank=df["bank"])
            plt.show()
        if section == "recall":
            ks = sorted({1, 5, 10, *[int(k) for k in (params.get("k_values") or params.get("recall_ks") or [])]})
            parts = []
            for d, task in sims.tasks.items():
                qa = not sims.has_bank(d)
                ms = {m: _clamped(n, task, qa, notes) for m, n in
                      score_methods(params, by_dir[d], names=HUBNESS_SHOWN).items()}
                parts.append(recall_at_k(task, ms, ks, query_aware=qa).assign(run=label))
            df = pd.concat(parts, ignore_index=True)
            save(df, "first_stage_recall", "R@k of the first stages (the reranking ceiling), test scores")
            show(df, ["run", "direction", "bank", "method"] + [f"R@{k}" for k in ks])
        if section == "hubs":
            qa = not sims.has_bank(first)
            ms = {m: _clamped(n, task0, qa, notes)
                  for m, n in score_methods(params, "t2i", names=HUBNESS_SHOWN).items()}
            df = hub_table(task0, ms, k=hub_k, query_aware=qa)
            df.insert(0, "run", label)
            save(df, "raw_hubs", f"The largest N_{hub_k} of the raw scores and after each method, {first}")
            show(df)
    for n in dict.fromkeys(notes):
        print(f"NOTE: {n}")
    for name, why in skipped.items():
        print(f"NOTE: {name} is not run on this folder: {why}")
    if stop:
        skip_rest("the remaining cells of this notebook read embeddings, so they are skipped in this sims: run "
                  "(re-run the parameters cell with another source to run them)")
    return tables
