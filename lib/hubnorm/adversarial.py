"""Planted hubs: crafted gallery items that capture queries, what each method does to them, and a detector.

**Construction** (docs/methods.md, "Planted hubs"). ``n_hubs`` real gallery items ``x0`` (seeded choice) are
replaced by copies moved on the unit sphere, each within a *budget* ``eps`` on the chord distance
``||x - x0|| <= eps`` (the distance between unit vectors; ``eps = 2`` allows any point). The attacker holds a
sample ``A`` of the query distribution (not the test queries):

* ``"mean"``: move ``x0`` along the great circle towards the mean direction ``mu = mean(A) / ||mean(A)||``, as far
  as the budget allows (or to ``mu``);
* ``"gradient"``: projected gradient ascent on a smooth surrogate of the item's k-occurrence against ``A``,
  ``L(x) = sum_{a in A} sigmoid((a . x - r_k(a)) / T)``, where ``r_k(a)`` is the ``k``-th best score of ``a``
  in the clean gallery (``L`` counts, softly, the attacker queries whose top ``k`` the item would enter). Each step
  moves by ``eps / 10`` along the normalised gradient, then projects back onto the sphere and onto the budget
  cap around ``x0``; it starts from the ``"mean"`` solution and keeps the best iterate.

The planted items are *appended* to the gallery (the real items stay, so no true match is removed): a planted
item damages R@1 only by displacing true matches from first place.

**Measures** (:func:`planted_hub_report`): the share of test queries whose top-1 is a planted item (captured),
R@1 on the clean and on the attacked gallery, raw and after each method (the damage is their difference).

**Detector** (:func:`detect_hubs`): a statistic of each gallery item computed from the query bank only (no test
query, no label) -- the mean of its ``k`` largest bank similarities (NNN's bias with ``alpha = 1``), or its
k-occurrence ``N_k`` over the bank queries -- and the robust z-score ``0.6745 (x - median) / MAD``; items with
``z > 3.5`` are flagged (the outlier rule of Iglewicz and Hoaglin, fixed before any run, never tuned).
Precision and recall on the planted items: :func:`detection_scores`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Mapping, Optional, Sequence

import numpy as np
import pandas as pd
import torch

from ._validation import as_embeddings, check_finite_float, check_positive_float, check_positive_int
from .evaluation import evaluate
from .hubness import k_occurrence
from .kernels import topk_similarity
from .normalizers.base import Identity, Normalizer
from .retrieval import Positives, RetrievalTask

__all__ = ["PlantedHubs", "plant_hubs", "attacked_task", "planted_hub_report", "detect_hubs", "detection_scores",
           "robust_z", "Z_THRESHOLD"]

#: The row label of the unnormalised scores in :func:`planted_hub_report` (a label, not a method dispatch).
RAW = "raw"
#: Iglewicz & Hoaglin's outlier threshold on the modified z-score (fixed a priori).
Z_THRESHOLD = 3.5
METHODS = ("mean", "gradient")


@dataclass
class PlantedHubs:
    """Crafted items (``items``, float64 rows on the unit sphere), the gallery rows they were made from
    (``origins``), their chord distance from them (``distance``), and how they were made."""

    items: np.ndarray
    origins: np.ndarray
    distance: np.ndarray
    method: str
    budget: float
    seed: int


def _slerp_towards(x0: torch.Tensor, y: torch.Tensor, max_chord: float) -> torch.Tensor:
    """Points on the great circles from the rows of ``x0`` towards ``y``, at chord distance at most ``max_chord``."""
    cos = (x0 * y).sum(dim=1).clamp(-1.0, 1.0)
    angle = torch.arccos(cos)
    cap = 2.0 * math.asin(min(1.0, max_chord / 2.0))
    a = torch.minimum(angle, torch.full_like(angle, cap))
    ortho = y - cos[:, None] * x0
    norm = ortho.norm(dim=1, keepdim=True)
    ortho = torch.where(norm > 1e-12, ortho / norm.clamp_min(1e-300), torch.zeros_like(ortho))
    return torch.cos(a)[:, None] * x0 + torch.sin(a)[:, None] * ortho


def plant_hubs(gallery, attacker_queries, n_hubs: int = 5, *, budget: float = 0.5, method: str = "gradient",
               k: int = 10, steps: int = 60, temperature: float = 0.01, seed: int = 0) -> PlantedHubs:
    """Craft ``n_hubs`` items from seeded real gallery items (module docstring); float64 throughout.

    Args:
        gallery: the clean gallery (n x d, unit rows); attacker_queries: the attacker's sample of queries.
        budget: largest chord distance ``||x - x0||`` (0 < budget <= 2).
        method: ``"mean"`` or ``"gradient"``; k, steps, temperature: the surrogate of ``"gradient"``.
    """
    t = as_embeddings(gallery, "gallery", device="cpu", dtype=torch.float64)
    a = as_embeddings(attacker_queries, "attacker_queries", device="cpu", dtype=torch.float64, dim=t.shape[1])
    n_hubs = check_positive_int(n_hubs, "n_hubs", maximum=t.shape[0], max_name="the gallery size")
    budget = check_positive_float(budget, "budget")
    if budget > 2:
        raise ValueError(f"budget is a chord distance between unit vectors, at most 2; got {budget}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}; got {method!r}")
    k = check_positive_int(k, "k", maximum=t.shape[0], max_name="the gallery size")
    steps = check_positive_int(steps, "steps")
    temperature = check_positive_float(temperature, "temperature")
    rng = np.random.default_rng(seed)
    origins = np.sort(rng.choice(t.shape[0], n_hubs, replace=False))
    x0 = t[torch.from_numpy(origins)]
    x0 = x0 / x0.norm(dim=1, keepdim=True)   # exactly unit in float64 (float32 inputs are unit to ~1e-8 only)
    mu = a.mean(dim=0)
    mu = mu / mu.norm()
    x = _slerp_towards(x0, mu.expand_as(x0), budget)
    if method == "gradient":
        r_k = topk_similarity(a, t, k)[0][:, -1]           # k-th best clean score of every attacker query
        step = budget / 10.0

        def activations(z):   # sigmoid((z . a - r_k(a)) / T) for every attacker query a: one z @ a.T per step
            return torch.sigmoid((z @ a.T - r_k) / temperature)

        sig = activations(x)
        best, best_val = x.clone(), sig.sum(dim=1)                  # the surrogate L(x)
        for _ in range(steps):
            grad = (sig * (1 - sig)) @ a / temperature
            grad = grad - (grad * x).sum(dim=1, keepdim=True) * x   # tangent to the sphere
            gn = grad.norm(dim=1, keepdim=True)
            x = x + step * grad / gn.clamp_min(1e-300)
            x = x / x.norm(dim=1, keepdim=True)
            far = (x - x0).norm(dim=1) > budget
            if bool(far.any()):
                x[far] = _slerp_towards(x0[far], x[far], budget)
            sig = activations(x)                                    # L(x) now, and the next step's gradient
            val = sig.sum(dim=1)
            better = val > best_val
            best[better], best_val[better] = x[better], val[better]
        x = best
    dist = (x - x0).norm(dim=1)
    return PlantedHubs(x.numpy(), origins, dist.numpy(), method, float(budget), int(seed))


def attacked_task(task: RetrievalTask, planted: PlantedHubs) -> RetrievalTask:
    """``task`` with the planted items appended to its gallery (indices ``n, ..., n + n_hubs - 1``); the positives
    are unchanged (a planted item is nobody's true match)."""
    if not isinstance(task, RetrievalTask):
        raise TypeError("task must be a hubnorm.RetrievalTask")
    if not isinstance(planted, PlantedHubs):
        raise TypeError("planted must be a PlantedHubs from plant_hubs")
    targets = np.concatenate([np.asarray(task.targets, dtype=np.float64), planted.items])
    pos = task.positives
    positives = Positives(pos.indptr, pos.indices, targets.shape[0])
    return RetrievalTask(np.asarray(task.queries, dtype=np.float64), targets, positives,
                         query_bank=task.query_bank, target_bank=task.target_bank, direction=task.direction,
                         meta={**task.meta, "planted": len(planted.items)})


def robust_z(x: np.ndarray, *, fallback: bool = True) -> np.ndarray:
    """The modified z-score ``0.6745 (x - median) / MAD`` (MAD: median absolute deviation).

    When more than half of ``x`` is one value (MAD = 0: e.g. N_k over a small bank, mostly 0), Iglewicz and
    Hoaglin's fallback ``(x - median) / (1.253314 MeanAD)`` (mean absolute deviation), so that outliers are still
    flagged; all zeros only when every value is the same. ``fallback=False`` (a continuous statistic, where half
    the values equal means duplicate items, not a count piled at zero): ValueError instead."""
    x = np.asarray(x, dtype=np.float64)
    med = np.median(x)
    dev = np.abs(x - med)
    mad = np.median(dev)
    if mad > 0:
        return 0.6745 * (x - med) / mad
    if not fallback:
        same = int(np.sum(dev == 0))
        raise ValueError(f"{same} of {x.size} values of the statistic are identical (duplicate gallery items?): the "
                         "robust z-score is undefined, and any item that differs would look like an outlier; remove "
                         "the duplicate rows from the gallery first")
    mean_ad = dev.mean()
    if mean_ad == 0:
        return np.zeros_like(x)
    return (x - med) / (1.253314 * mean_ad)


def detect_hubs(gallery, query_bank, *, statistic: str = "bias", k: int = 16,
                threshold: float = Z_THRESHOLD) -> Dict[str, np.ndarray]:
    """Flag gallery items whose bank statistic is an outlier (module docstring); no test query, no label.

    ``statistic="bias"``: the mean of the item's ``k`` largest query-bank similarities; ``"n_k"``: its
    k-occurrence over the bank queries (how many bank queries rank it in their top ``k``).
    Returns ``{"statistic", "z", "flagged"}`` (arrays over the gallery; ``flagged``: indices, highest z first).
    """
    t = as_embeddings(gallery, "gallery", device="cpu")
    b = as_embeddings(query_bank, "query_bank", device="cpu", dtype=t.dtype, dim=t.shape[1])
    threshold = check_finite_float(threshold, "threshold")
    if statistic == "bias":
        k = check_positive_int(k, "k", maximum=b.shape[0], max_name="the query-bank size")
        stat = topk_similarity(t, b, k)[0].mean(dim=1).double().numpy()
    elif statistic == "n_k":
        k = check_positive_int(k, "k", maximum=t.shape[0], max_name="the gallery size")
        stat = k_occurrence(Identity(device="cpu").fit(t), k, b).astype(np.float64)  # ties: lowest index
    else:
        raise ValueError(f"statistic must be 'bias' or 'n_k'; got {statistic!r}")
    z = robust_z(stat, fallback=statistic == "n_k")   # a count piles at 0 legitimately; a mean of scores does not
    flagged = np.flatnonzero(z > threshold)
    flagged = flagged[np.argsort(-z[flagged], kind="stable")]
    return {"statistic": stat, "z": z, "flagged": flagged}


def detection_scores(flagged: Sequence[int], planted: Sequence[int]) -> Dict[str, float]:
    """Precision and recall of ``flagged`` indices against the ``planted`` ones (precision is 1 when nothing is
    flagged and nothing is planted, 0 when nothing is flagged but items are planted)."""
    f, p = set(int(i) for i in flagged), set(int(i) for i in planted)
    hit = len(f & p)
    precision = hit / len(f) if f else float(not p)
    recall = hit / len(p) if p else 1.0
    return {"flagged": len(f), "true positives": hit, "precision": precision, "recall": recall}


def _captured(norm: Normalizer, task: RetrievalTask, planted_idx: np.ndarray, ks: Sequence[int]) -> Dict[int, float]:
    """Share of queries with a planted item among their top ``k``, for every ``k`` of ``ks``, from one
    top-``max(ks)``: ``Normalizer.topk`` is a stable sort (exact ties to the lowest index), so its first ``k``
    columns are exactly the top ``k``."""
    ks = [int(k) for k in ks]
    if not ks:
        return {}
    hit = np.isin(norm.topk(task.queries, max(ks))[1].cpu().numpy(), planted_idx)
    return {k: float(hit[:, :k].any(axis=1).mean()) for k in ks}


def planted_hub_report(task: RetrievalTask, planted: PlantedHubs, methods: Mapping[str, Normalizer], *,
                       capture_k: Sequence[int] = (1, 10), clean_r1: Optional[Mapping[str, float]] = None
                       ) -> pd.DataFrame:
    """One row per method (``"raw"`` added first): R@1 on the clean and the attacked gallery, the damage (clean -
    attacked, in points), and the share of test queries (percent) with a planted item in their top ``k`` for each
    ``k`` of ``capture_k``. Every method is fitted on each gallery with the task's banks; ``clean_r1`` (method ->
    R@1 on the clean gallery, e.g. from an earlier call's table) skips the clean fits."""
    att = attacked_task(task, planted)
    n = task.n_targets
    planted_idx = np.arange(n, n + len(planted.items))
    rows = []
    items = [(RAW, Identity())] + [(name, m) for name, m in methods.items() if name != RAW]
    for name, norm in items:
        if clean_r1 is not None and name in clean_r1:
            r_clean = float(clean_r1[name])
        else:
            r_clean = evaluate(task.fit(norm.clone()), task)["R@1"]
        attacked = att.fit(norm.clone())
        out = evaluate(attacked, att)
        r_att = out["R@1"]
        row = {"method": name, "R@1 clean": r_clean, "R@1 attacked": r_att, "damage": r_clean - r_att,
               "bank": out["bank"]}
        for k, share in _captured(attacked, att, planted_idx, capture_k).items():
            row[f"captured@{k} %"] = 100.0 * share
        rows.append(row)
    return pd.DataFrame(rows)
