"""Hub forensics: why is one gallery item a hub, and what does each method do to it?

:func:`explain_target` answers, for a *fitted* offset normalizer and one target ``j``:

1. **which bank queries make its offset**, with their weights. Every offset method here writes the offset of a
   target as a weighted sum over the bank queries plus a target-level remainder (docs/methods.md, "Explaining a
   target"), exactly, in float64 within rounding:

   ``offset_j = sum_i weight_ij * value_ij + remainder_j``

   * NNN (Eq. 1): the ``k`` bank queries nearest to ``t_j``, ``weight = alpha / k``, ``value = -s(q_i, t_j)``,
     remainder 0.
   * IS (DBSN Eq. 3, hubnorm's centred offsets ``-tau log mean_i exp(s_ij / tau)``): ``weight = softmax_i(s_ij /
     tau)`` over the whole bank, ``value = -s_ij``, remainder ``tau KL(w_j || uniform)``. This is the Gibbs
     identity ``tau LSE_i(s_i / tau) = sum_i w_i s_i + tau H(w)``; the centring constant ``tau log |B|`` is what
     turns ``-tau H`` into ``+tau KL`` (``KL = log |B| - H``).
   * SN / DBSN (DBSN Eq. 7-9): ``weight`` = the column ``j`` of the transport plan, normalised to sum 1
     (``w_ij = n pi_ij = n exp((s_ij + f_i + g_j) / tau)``, ``n`` the number of Sinkhorn columns),
     ``value = -(s_ij + f_i + tau log m)`` (the score plus the bank query's row potential, relative to its
     uniform value ``-tau log m``), remainder ``tau KL(w_j || uniform_m) - tau log n``. The same Gibbs identity
     applied to the last column half-step ``g_j = -tau log n - tau LSE_i((s_ij + f_i) / tau)``; ``f`` must be the
     row potentials of that last iteration (the ones ``g`` was computed from). The fit does not keep them, so
     this module re-runs :func:`hubnorm.normalizers.sinkhorn.sinkhorn_potentials` with the fitted parameters on
     the bank you pass, checks that its column potentials are the fitted offsets (a different bank is refused),
     and uses its ``f``.

   Each decomposition lives beside its method, as its ``offset_decomposition`` (one file per method); this module
   only checks, tabulates and plots. The bank is read in blocks of rows against one target column (``O(m d)``
   work, an ``m``-vector held); no ``m x n`` matrix is ever formed (SN's re-run is the fit's own blocked kernel).

2. **its k-occurrence and the test queries it wins** (top-1) before and after normalisation, and the rank change
   of those queries' true matches (blocked over the queries through the normalizers' ``topk`` and
   :func:`hubnorm.positive_ranks`).

:func:`plot_explanation` draws both. :func:`hub_neighbours` lists the queries that have one target among their
nearest neighbours, each marked matched or not (DBSN Figs. A10 / A11), from blocks of any score matrix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np
import pandas as pd
import torch

from ._validation import as_embeddings, check_positive_int
from .evaluation import iter_score_blocks, positive_ranks
from .registry import NORMALIZERS
from .normalizers.base import Identity, Normalizer, stable_topk
from .retrieval import Positives

__all__ = ["TargetExplanation", "explain_target", "explain_targets", "plot_explanation", "decomposable",
           "hub_neighbours", "neighbour_counts"]

#: The label of the unnormalised scores in an explanation's ``n_k`` / ``wins`` / ``rank_change`` (a label, not a method
#: dispatch).
RAW = "raw"

@dataclass
class TargetExplanation:
    """What :func:`explain_target` found for one target (arrays over the bank are float64, length ``m``).

    ``offset = sum(weights * values) + remainder`` (``identity_error`` is the absolute difference to the fitted
    offset). ``contributions``: the bank queries with the largest ``|weight * value|`` first.
    """

    method: str
    target: int
    offset: float
    fitted_offset: float
    weights: np.ndarray
    values: np.ndarray
    remainder: float
    remainder_terms: Dict[str, float]
    contributions: pd.DataFrame
    n_k: Dict[str, int] = field(default_factory=dict)
    k: Optional[int] = None
    wins: Dict[str, np.ndarray] = field(default_factory=dict)
    rank_change: Optional[pd.DataFrame] = None

    @property
    def identity_error(self) -> float:
        return abs(float(np.sum(self.weights * self.values)) + self.remainder - self.fitted_offset)


def decomposable() -> List[str]:
    """The display names of the registered methods whose offsets :func:`explain_target` decomposes (those that
    define :meth:`~hubnorm.normalizers.base.Normalizer.offset_decomposition`)."""
    return [c.display_name for c in NORMALIZERS.values()
            if c.offset_decomposition is not Normalizer.offset_decomposition]


def _query_pass(model: Normalizer, queries, k: int, positives: Optional[Positives]):
    """``N_k`` of every target, the top-1 target and the true-match rank of every query, from one scoring of the
    queries by ``model`` (the rules of :func:`hubnorm.k_occurrence`, ``model.topk`` and
    :func:`hubnorm.positive_ranks`: exact ties go to the lowest target index, so the top-1 is the first of the
    top-``k``)."""
    counts, top1, ranks, n_q = None, [], [], 0
    for q0, s in iter_score_blocks(model, queries):
        if counts is None:
            k = check_positive_int(k, "k", maximum=s.shape[1], max_name="the number of targets")
            counts = torch.zeros(s.shape[1], dtype=torch.long, device=s.device)
        idx = stable_topk(s, k)[1]
        counts += torch.bincount(idx.reshape(-1), minlength=counts.numel())
        top1.append(idx[:, 0].cpu().numpy())
        n_q = q0 + s.shape[0]
        if positives is not None:
            if n_q > positives.n_queries:
                raise ValueError(f"scores have more rows than positives has queries ({positives.n_queries})")
            ranks.append(positive_ranks(s, positives.subset(np.arange(q0, n_q))))
    if positives is not None and n_q != positives.n_queries:
        raise ValueError(f"positives has {positives.n_queries} queries but {n_q} queries were scored")
    return counts.cpu().numpy(), np.concatenate(top1), (np.concatenate(ranks) if positives is not None else None)


def explain_target(normalizer: Normalizer, target: int, **kwargs) -> TargetExplanation:
    """Why target ``target`` has its offset, and which test queries it wins before and after normalisation
    (:func:`explain_targets` for one target; see it for the arguments)."""
    return explain_targets(normalizer, [target], **kwargs)[0]


def explain_targets(
    normalizer: Normalizer,
    targets,
    *,
    query_bank,
    target_bank=None,
    queries=None,
    positives: Optional[Positives] = None,
    k: int = 10,
    top: int = 20,
    block_bytes: Optional[int] = None,
) -> List[TargetExplanation]:
    """Why each of ``targets`` has its offset, and which test queries it wins before and after normalisation.

    Args:
        normalizer: a fitted :class:`~hubnorm.NearestNeighborNormalization`, :class:`~hubnorm.InvertedSoftmax`,
            :class:`~hubnorm.SinkhornNormalization` or :class:`~hubnorm.DualBankSinkhornNormalization`.
        targets: the gallery indices to explain (what all of them share is computed once).
        query_bank: the query bank the normalizer was fitted on (``target_bank`` too for DBSN).
        queries: optional test queries: then ``n_k`` (``N_k`` of the target, raw and normalised) and ``wins``
            (the queries whose top-1 is the target, raw and normalised) are filled.
        positives: optional true matches of ``queries``: then ``rank_change`` lists, for every query won before
            or after, the 0-based rank of its true match raw and normalised.
        k: neighbourhood of ``N_k``; top: rows of ``contributions``.
    Returns:
        one :class:`TargetExplanation` per target (see the module docstring for each method's decomposition).
    """
    if not isinstance(normalizer, Normalizer):
        raise TypeError(f"normalizer must be a fitted hubnorm normalizer; got {type(normalizer).__name__}")
    normalizer._check_fitted()
    n = normalizer.targets_.shape[0]
    idx = np.atleast_1d(np.asarray(targets))
    if idx.ndim != 1 or idx.size == 0 or not np.issubdtype(idx.dtype, np.integer) or idx.min() < 0 or idx.max() >= n:
        raise ValueError(f"target must be a gallery index in [0, {n}) (or a list of them); got {targets!r}")
    k = check_positive_int(k, "k", maximum=n, max_name="the number of targets")
    top = check_positive_int(top, "top")
    t = normalizer.targets_
    chk = getattr(normalizer, "check_normalized", True)
    if query_bank is None:
        raise ValueError("explain_target needs the query_bank the normalizer was fitted on: pass query_bank=...")
    qb = as_embeddings(query_bank, "query_bank", device=t.device, dtype=t.dtype, dim=t.shape[1], check_normalized=chk)
    tb = None if target_bank is None else as_embeddings(target_bank, "target_bank", device=t.device, dtype=t.dtype,
                                                         dim=t.shape[1], check_normalized=chk)
    if type(normalizer).offset_decomposition is Normalizer.offset_decomposition:
        raise TypeError(f"explain_target decomposes the offsets of {', '.join(decomposable())}; got "
                        f"{type(normalizer).__name__}")
    decompose = normalizer.offset_decomposition(qb, tb, block_bytes=block_bytes)
    method = type(normalizer).display_name
    shared = {}
    if queries is not None:
        if positives is not None and not isinstance(positives, Positives):
            raise TypeError("positives must be a hubnorm.Positives")
        raw = Identity(device=normalizer.device_, check_normalized=chk).fit(t)
        passes = {name: _query_pass(model, queries, k, positives) for name, model in ((RAW, raw), (method, normalizer))}
        shared["n_k"] = {name: v[0] for name, v in passes.items()}
        shared["top1"] = {name: v[1] for name, v in passes.items()}
        if positives is not None:
            shared["ranks"] = {name: v[2] for name, v in passes.items()}
    out = []
    tol = 1e-6 if normalizer.offsets_.dtype == torch.float64 else 1e-3  # float32 fits round their offsets
    cache = getattr(normalizer, "cache_dtype", None)   # a fit that read its scores from a low-precision cache
    if cache is not None:                              # (SN/DBSN) rounds them: LSE is 1-Lipschitz in the scores
        tol = max(tol, 2.0 * torch.finfo(cache).eps)
    for j in (int(x) for x in idx):
        w, values, terms = decompose(j)
        remainder = float(sum(terms.values()))
        offset = float((w * values).sum()) + remainder
        fitted = float(normalizer.offsets_[j])
        if abs(offset - fitted) > tol * (abs(fitted) + 1.0):  # never explain an offset the fit did not produce
            raise ValueError(f"the explanation of target {j} gives offset {offset:.6g}, the fitted one is "
                             f"{fitted:.6g}: pass the same query_bank (and target_bank) the normalizer was fitted on")
        contrib = (w * values).cpu().numpy()
        order = np.argsort(-np.abs(contrib), kind="stable")[:top]
        table = pd.DataFrame({"bank query": order, "weight": w.cpu().numpy()[order],
                              "value": values.cpu().numpy()[order], "contribution": contrib[order]})
        e = TargetExplanation(method, j, offset, fitted, w.cpu().numpy(), values.cpu().numpy(),
                              remainder, terms, table, k=k)
        if queries is not None:
            e.n_k = {name: int(v[j]) for name, v in shared["n_k"].items()}
            e.wins = {name: np.flatnonzero(v == j) for name, v in shared["top1"].items()}
            if positives is not None:
                qs = np.union1d(e.wins["raw"], e.wins[method])
                e.rank_change = pd.DataFrame({
                    "query": qs, "won raw": np.isin(qs, e.wins["raw"]), f"won {method}": np.isin(qs, e.wins[method]),
                    "true-match rank raw": shared["ranks"]["raw"][qs],
                    f"true-match rank {method}": shared["ranks"][method][qs]})
        out.append(e)
    return out


def plot_explanation(expl: TargetExplanation, axes=None, *, top: int = 15):
    """Two panels: the largest contributions of bank queries to the offset (bars, with the remainder), and the
    true-match ranks of the queries the target wins, raw against normalised (when ``rank_change`` is there)."""
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    ax = axes[0]
    c = expl.contributions.head(top)
    labels = [f"q{int(i)}" for i in c["bank query"]] + ["remainder"]
    vals = list(c["contribution"]) + [expl.remainder]
    colors = ["tab:blue"] * len(c) + ["tab:gray"]
    ax.barh(range(len(vals))[::-1], vals, color=colors)
    ax.set_yticks(range(len(vals))[::-1], labels, fontsize=7)
    ax.axvline(0, color="k", lw=0.6)
    ax.set_xlabel("contribution to the offset (weight x value)")
    ax.set_title(f"{expl.method}: target {expl.target}, offset {expl.offset:.4f}", fontsize=10)
    ax = axes[1]
    rc = expl.rank_change
    if rc is not None and len(rc):
        cols = [col for col in rc.columns if col.startswith("true-match rank")]
        x, y = rc[cols[0]].to_numpy() + 1, rc[cols[1]].to_numpy() + 1
        ax.scatter(x, y, s=14, c=np.where(rc["won raw"], "tab:red", "tab:green"))
        hi = max(x.max(), y.max()) * 1.5
        ax.plot([1, hi], [1, hi], color="k", lw=0.6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("rank of the true match, raw (1 = top)")
        ax.set_ylabel(f"rank of the true match, {expl.method}")
        ax.set_title(f"queries won: raw {len(expl.wins.get('raw', []))} (red), "
                     f"{expl.method} {len(expl.wins.get(expl.method, []))}", fontsize=10)
    else:
        ax.set_axis_off()
        ax.text(0.5, 0.5, "no queries won (or no positives given)", ha="center", va="center")
    return axes


def hub_neighbours(blocks, target: int, positives: Positives, k: int = 10) -> pd.DataFrame:
    """The queries whose top-``k`` holds ``target``, from ``(start_row, scores)`` blocks of a (normalised) query x
    target score matrix (``normalizer.iter_scores(queries)`` or ``task.blocks(normalizer)``): one row per such
    query with its score for ``target``, the 0-based rank of ``target`` in its list (ties: lower index first, the
    rule of :func:`hubnorm.positive_ranks`) and ``matched`` (``target`` is one of its positives). Their number is
    ``N_k(target)``; sorted by decreasing score (DBSN Figs. A10 / A11 show the most retrieved item with them)."""
    k = check_positive_int(k, "k")
    if not isinstance(positives, Positives):
        raise TypeError("positives must be a hubnorm.Positives")
    if isinstance(target, bool) or not isinstance(target, (int, np.integer)) or not 0 <= target < positives.n_targets:
        raise ValueError(f"target must be an index in [0, {positives.n_targets}); got {target!r}")
    rows, scores, ranks = [], [], []
    for q0, s in blocks:
        s = torch.as_tensor(s)
        if s.shape[1] != positives.n_targets:
            raise ValueError(f"score blocks have {s.shape[1]} columns but positives refer to {positives.n_targets} "
                             "targets")
        idx = stable_topk(s, min(k, s.shape[1]))[1]
        hit = (idx == int(target))
        q = torch.nonzero(hit.any(dim=1)).flatten()
        rows.append(q.numpy() + q0)
        scores.append(s[q, int(target)].double().numpy())
        ranks.append(torch.nonzero(hit[q])[:, 1].numpy())
    rows = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    if rows.size and rows.max() >= positives.n_queries:   # before positives.of() reads past its end
        raise ValueError(f"score blocks cover more rows than positives has queries ({positives.n_queries})")
    out = pd.DataFrame({"query": rows, "score": np.concatenate(scores) if scores else np.zeros(0),
                        "rank": np.concatenate(ranks) if ranks else np.zeros(0, np.int64),
                        "matched": [int(target) in positives.of(int(q)) for q in rows]})
    return out.sort_values(["score", "query"], ascending=[False, True], kind="stable").reset_index(drop=True)


def neighbour_counts(neighbours: pd.DataFrame) -> pd.DataFrame:
    """Per ``method`` of a long table of :func:`hub_neighbours` rows (a ``method`` column added by the caller): the
    number of neighbour queries (the target's ``N_k``), how many are matched and how many mismatched, in the
    table's order of methods."""
    missing = {"method", "query", "matched"} - set(neighbours.columns)
    if missing:
        raise ValueError(f"neighbours lacks the columns {sorted(missing)}: pass hub_neighbours rows with a 'method' "
                         "column (.assign(method=name))")
    counts = (neighbours.groupby("method", sort=False)
              .agg(**{"neighbour queries": ("query", "size"), "matched": ("matched", "sum")}).reset_index())
    counts["matched"] = counts["matched"].astype(int)
    counts["mismatched"] = counts["neighbour queries"] - counts["matched"]
    return counts
