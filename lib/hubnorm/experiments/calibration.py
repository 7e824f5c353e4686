"""How close the synthetic presets come to real contrastive embeddings: the statistics, the references, the bands.

The synthetic generator (:mod:`hubnorm.synthetic`) is calibrated to *statistics of the raw embeddings* that matter
for hubness, never to a paper's claim (which normalizer beats which): the claims are looked at only afterwards
(``data/calibration_synthetic.md`` says which hold on each preset).

References:

- real CLIP embeddings, measured with :func:`hubnorm.geometry.embedding_statistics` and recorded here
  (:data:`REAL_STATISTICS`, with their source): Flickr8k, 100 images x 5 captions, OpenAI CLIP ViT-B/32, and COCO
  val2017, 500 pairs (1 caption each), OpenAI CLIP ViT-B/16. A preset is compared with a set *at the same size*
  (a test split of 100 images x 5 captions, or 500 x 1), because every statistic of hubness depends on the sizes;
- published statistics of the full test sets (read from the package's published tables): raw zero-shot CLIP R@1 in both directions (NNN Tables 1 and 2), the top-10 k-occurrence skewness of
  Flickr30k t2i (DBSN Table 5), and the kurtosis and maximum of the top-1 k-occurrence (NNN Table 3).

Band rule (:func:`band`): a synthetic mean over seeds is within the band when it is within the statistic's
tolerance (:data:`STATISTICS`, :data:`PUBLISHED_TOLERANCE`) of the reference, or within twice its own standard
deviation over seeds (a single real set of that size could not be matched more closely than its sampling noise);
:func:`calibration_table` also says whether it is within the tolerance alone.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Tuple

import numpy as np
import pandas as pd

from ..geometry import bank_statistics, embedding_statistics

__all__ = ["REAL_STATISTICS", "STATISTICS", "PUBLISHED_TOLERANCE", "NOT_FITTED", "band", "preset_statistics",
           "full_size_statistics", "calibration_table"]

#: Statistic name -> (what it is, tolerance, "abs" or "rel"). Order = the report's order.
STATISTICS: Dict[str, Tuple[str, float, str]] = {
    "matched_mean": ("cosine of a caption and its image: mean", 0.03, "abs"),
    "matched_sd": ("cosine of a caption and its image: sd", 0.01, "abs"),
    "random_mean": ("cosine of an unmatched caption-image pair: mean", 0.03, "abs"),
    "random_sd": ("cosine of an unmatched caption-image pair: sd", 0.01, "abs"),
    "best_nonmatch_mean": ("cosine of a caption's best non-matching image: mean", 0.03, "abs"),
    "gap": ("modality gap ||mean image - mean caption||", 0.05, "abs"),
    "centroid_cos": ("cosine of the two modality centres", 0.05, "abs"),
    "img_participation_ratio": ("effective dimension of the images (participation ratio)", 0.25, "rel"),
    "cap_participation_ratio": ("effective dimension of the captions (participation ratio)", 0.25, "rel"),
    "img_pc1_share": ("image variance on the first principal component", 0.04, "abs"),
    "cap_pc1_share": ("caption variance on the first principal component", 0.04, "abs"),
    "img_top10_share": ("image variance on the first 10 principal components", 0.08, "abs"),
    "cap_top10_share": ("caption variance on the first 10 principal components", 0.08, "abs"),
    "joint_pc1_share": ("variance of images + captions on PC1 (the gap direction)", 0.06, "abs"),
    "joint_pc2_share": ("variance of images + captions on PC2", 0.04, "abs"),
    "img_knn_cv": ("density variation of the images (5-NN cosine: sd / mean distance)", 0.08, "abs"),
    "cap_knn_cv": ("density variation of the captions (5-NN cosine: sd / mean distance)", 0.08, "abs"),
    "img_img_cos": ("cosine of two images: mean", 0.04, "abs"),
    "cap_cap_cos": ("cosine of two captions: mean", 0.04, "abs"),
    "same_image_cap_cos": ("cosine of two captions of the same image: mean", 0.04, "abs"),
    "skew_N1_t2i": ("skewness of N_1, text -> image", 1.0, "abs"),
    "skew_N10_t2i": ("skewness of N_10, text -> image", 0.6, "abs"),
    "skew_N1_i2t": ("skewness of N_1, image -> text", 1.0, "abs"),
    "skew_N10_i2t": ("skewness of N_10, image -> text", 0.6, "abs"),
    "rho_N10_t2i": ("Spearman(N_10, centrality), text -> image", 0.2, "abs"),
    "rho_N10_i2t": ("Spearman(N_10, centrality), image -> text", 0.2, "abs"),
    "R1_t2i": ("R@1 text -> image (%)", 5.0, "abs"),
    "R1_i2t": ("R@1 image -> text (%)", 5.0, "abs"),
    "bank_gallery_gap": ("bank-to-gallery gap: 1 - mean cosine of a bank caption to its nearest gallery image", 0.03,
                         "abs"),
    "query_bank_gap": ("query-to-bank gap: 1 - mean cosine of a test caption to its nearest bank caption", 0.03,
                       "abs"),
}

#: Statistics measured and reported but not part of the fit (``scripts/calibrate_synthetic.py --fit``): how a bank
#: drawn like the test data differs from the gallery and the test queries (:func:`hubnorm.geometry.bank_statistics`).
NOT_FITTED = frozenset({"bank_gallery_gap", "query_bank_gap"})

#: Labels of the published full-size statistics.
PUBLISHED_WHAT = {"R1_t2i": "R@1 text -> image (%), full test set", "R1_i2t": "R@1 image -> text (%), full test set",
                  "skew_N10_t2i": "skewness of N_10, text -> image, full test set",
                  "kurt_N1_t2i": "excess kurtosis of N_1 (captions matched per image), full test set",
                  "max_N1_t2i": "maximum of N_1 (captions matched per image), full test set"}

#: Published statistics of the full test sets: preset -> statistic -> (value, source). ``kurt_N1_t2i`` /
#: ``max_N1_t2i``: excess kurtosis and maximum of the top-1 k-occurrence (captions matched per image).
PUBLISHED_TOLERANCE = {"R1_t2i": (3.0, "abs"), "R1_i2t": (3.0, "abs"), "skew_N10_t2i": (0.5, "abs"),
                       "kurt_N1_t2i": (0.5, "rel"), "max_N1_t2i": (0.5, "rel")}

#: Real CLIP embeddings: name -> preset, sizes (images, captions per image), source, statistics. Measured with
#: :func:`hubnorm.geometry.embedding_statistics` (``tests/test_calibration.py`` re-measures them when the
#: developers' copy of the embeddings is present).
REAL_STATISTICS: Dict[str, dict] = {
    "flickr8k-100x5-clip-vitb32": {
        "preset": "flickr30k", "n_images": 100, "captions_per_image": 5,
        "source": "Flickr8k, first 100 images x 5 captions, OpenAI CLIP ViT-B/32 (github.com/Chia213/Search-Engine, "
                  "commit 7a3fb8ba)",
        "statistics": {
            "matched_mean": 0.3253, "matched_sd": 0.0293, "random_mean": 0.1751, "random_sd": 0.0464,
            "best_nonmatch_mean": 0.2917, "gap": 0.8430, "centroid_cos": 0.3325,
            "img_participation_ratio": 30.5675, "img_pc1_share": 0.1067, "img_top10_share": 0.4535,
            "img_knn_cv": 0.2348, "img_img_cos": 0.5558, "cap_participation_ratio": 41.4012,
            "cap_pc1_share": 0.0819, "cap_top10_share": 0.3966, "cap_knn_cv": 0.2892, "cap_cap_cos": 0.5027,
            "joint_pc1_share": 0.1757, "joint_pc2_share": 0.0626, "same_image_cap_cos": 0.7714,
            "skew_N1_t2i": 1.1782, "skew_N10_t2i": 1.2504, "rho_N10_t2i": 0.8508, "skew_N1_i2t": 1.6730,
            "skew_N10_i2t": 1.9810, "rho_N10_i2t": 0.3547, "R1_t2i": 83.2000, "R1_i2t": 93.0000,
            "bank_gallery_gap": 0.7260, "query_bank_gap": 0.2580,
        },
    },
    "coco-val2017-500-clip-vitb16": {
        "preset": "coco", "n_images": 500, "captions_per_image": 1,
        "source": "COCO val2017, 500 image-caption pairs, OpenAI CLIP ViT-B/16 (github.com/Weixin-Liang/Modality-Gap, "
                  "commit 8e20cb24)",
        "statistics": {
            "matched_mean": 0.3099, "matched_sd": 0.0324, "random_mean": 0.1616, "random_sd": 0.0483,
            "best_nonmatch_mean": 0.3054, "gap": 0.8514, "centroid_cos": 0.3088,
            "img_participation_ratio": 42.7005, "img_pc1_share": 0.0968, "img_top10_share": 0.3870,
            "img_knn_cv": 0.3056, "img_img_cos": 0.5315, "cap_participation_ratio": 41.7062,
            "cap_pc1_share": 0.0993, "cap_top10_share": 0.3858, "cap_knn_cv": 0.3108, "cap_cap_cos": 0.5152,
            "joint_pc1_share": 0.2802, "joint_pc2_share": 0.0567, "skew_N1_t2i": 4.0495, "skew_N10_t2i": 2.3564,
            "rho_N10_t2i": 0.5680, "skew_N1_i2t": 3.7301, "skew_N10_i2t": 1.6455, "rho_N10_i2t": 0.4293,
            "R1_t2i": 50.6000, "R1_i2t": 55.2000, "bank_gallery_gap": 0.7026, "query_bank_gap": 0.2161,
        },
    },
}


def _published(preset: str) -> Dict[str, Tuple[float, str]]:
    from .reporting import load_published

    nnn = load_published("nnn-chowdhury2024")
    dbsn = load_published("dbsn-pan2025")

    def one(df, table, model, metric, direction="t2i", method="raw"):
        row = df[(df["table"].astype(str) == table) & (df["model"] == model) & (df["dataset"] == preset)
                 & (df["direction"] == direction) & (df["method"] == method) & (df["metric"] == metric)]
        return float(row["value"].iloc[0]) if len(row) else None

    out = {"R1_t2i": (one(nnn, "1", "CLIP", "R@1"), "NNN Table 1"),
           "R1_i2t": (one(nnn, "2", "CLIP", "R@1", "i2t"), "NNN Table 2"),
           "skew_N10_t2i": (one(dbsn, "5", "zs CLIP", "skewness"), "DBSN Table 5 (k = 10 assumed)"),
           "kurt_N1_t2i": (one(nnn, "3", "CLIP", "kurtosis"), "NNN Table 3"),
           "max_N1_t2i": (one(nnn, "3", "CLIP", "max"), "NNN Table 3")}
    return {k: v for k, v in out.items() if v[0] is not None}


#: Full test-set sizes of the published statistics: preset -> (images, captions per image).
FULL_SIZES = {"flickr30k": (1000, 5), "coco": (5000, 5)}


def _kind(preset: str) -> str:
    """The dataset a preset imitates: "flickr30k-isotropic" -> "flickr30k"."""
    return preset.split("-")[0]


def band(statistic: str, reference: float, mean: float, sd: float, *, published: bool = False) -> Tuple[float, bool]:
    """``(half-width, within)`` of the band around ``reference`` for a synthetic ``mean`` with seed ``sd``."""
    tol, kind = PUBLISHED_TOLERANCE[statistic] if published else STATISTICS[statistic][1:]
    half = tol * abs(reference) if kind == "rel" else tol
    half = max(half, 2.0 * (sd if np.isfinite(sd) else 0.0))
    return half, bool(abs(mean - reference) <= half)


def preset_statistics(preset: str, n_images: int, captions_per_image: int, seeds: Iterable[int] = range(5),
                      **overrides) -> pd.DataFrame:
    """:func:`~hubnorm.geometry.embedding_statistics` and :func:`~hubnorm.geometry.bank_statistics` of the test split
    of ``preset`` at the given size, one row per seed."""
    from ..synthetic import PRESETS, generate_split

    cfg = PRESETS[preset].replace(captions_per_image=int(captions_per_image), **overrides)
    rows = []
    for seed in seeds:
        s = generate_split(cfg, "test", int(n_images), seed=int(seed))
        rows.append({**embedding_statistics(s.images, s.captions, s.caption_to_image),
                     **bank_statistics(s.images, s.captions, s.caption_to_image)})
    return pd.DataFrame(rows)


def full_size_statistics(preset: str, seeds: Iterable[int] = (0,), **overrides) -> pd.DataFrame:
    """R@1 both directions, skewness of N_10 and kurtosis / maximum of N_1 (t2i) of the full-size test split of
    ``preset`` (the sizes of the published tables), one row per seed; scores streamed in blocks.

    The scores are computed in float64 from the float32 embeddings: these statistics count nearest neighbours, and
    in float32 near-ties among the 25,000 COCO captions resolve differently under another CPU's summation order (a
    few neighbours changed the kurtosis of N_1 by 3e-4 relative when the BLAS and ATen kernels were switched to their
    portable variants), so the committed report would not be reproducible elsewhere."""
    from scipy import stats as sps

    from ..evaluation import evaluate
    from ..hubness import hubness_stats, k_occurrence
    from ..normalizers.base import Identity
    from ..retrieval import build_tasks
    from ..synthetic import PRESETS, generate_split

    n, c = FULL_SIZES[_kind(preset)]
    cfg = PRESETS[preset].replace(captions_per_image=c, **overrides)
    rows = []
    for seed in seeds:
        s = generate_split(cfg, "test", n, seed=int(seed))
        tasks = build_tasks(s.images.astype(np.float64), s.captions.astype(np.float64), s.caption_to_image)
        row = {}
        for d, task in tasks.items():
            norm = Identity().fit(task.targets)
            row[f"R1_{d}"] = evaluate(norm, task, ks=(1,))["R@1"]
            if d == "t2i":
                n10 = k_occurrence(norm, 10, task.queries)
                n1 = k_occurrence(norm, 1, task.queries)
                row["skew_N10_t2i"] = hubness_stats(n10, 10, task.n_queries)["skewness"]
                row["kurt_N1_t2i"] = float(sps.kurtosis(n1.astype(np.float64)))
                row["max_N1_t2i"] = float(n1.max())
        rows.append(row)
    return pd.DataFrame(rows)


def calibration_table(preset: str, *, seeds: Iterable[int] = range(5), full_seeds: Iterable[int] = (0, 1),
                      real: Optional[Dict[str, dict]] = None, compare_with: Optional[List[str]] = None,
                      full: Optional[Dict[str, pd.DataFrame]] = None) -> pd.DataFrame:
    """One row per statistic: the reference (a real set of the preset's kind at its size, or a published full-size
    value), the synthetic mean and sd over ``seeds`` for ``preset`` (and for every preset in ``compare_with``),
    the band half-width and whether the mean is within it (:func:`band`).

    ``real``: the real references (default :data:`REAL_STATISTICS`; the statistics recorded there).
    ``full``: the full-size statistics of each preset, one row per seed of ``full_seeds``, as
    :func:`full_size_statistics` returns them (computed here when not given; ``scripts/calibrate_synthetic.py``
    computes them once, writes them per seed beside the report and passes them in).
    """
    real = REAL_STATISTICS if real is None else real
    seeds, full_seeds = list(seeds), list(full_seeds)
    presets = [preset] + list(compare_with or [])
    rows = []
    for name, ref in real.items():
        if ref["preset"] != _kind(preset):
            continue
        syn = {p: preset_statistics(p, ref["n_images"], ref["captions_per_image"], seeds) for p in presets}
        for stat, (what, _, _) in STATISTICS.items():
            r = ref["statistics"].get(stat)
            if r is None or not np.isfinite(r):
                continue
            row = {"statistic": stat, "what": what, "reference": name,
                   "size": f"{ref['n_images']} x {ref['captions_per_image']}", "real": r}
            for p in presets:
                mean, sd = float(syn[p][stat].mean()), float(syn[p][stat].std(ddof=1)) if len(seeds) > 1 else float("nan")
                half, ok = band(stat, r, mean, sd)
                row.update({f"{p} mean": mean, f"{p} sd": sd, f"{p} band": half, f"{p} within": ok,
                            f"{p} within tolerance": band(stat, r, mean, 0.0)[1]})
            row["fitted"] = stat not in NOT_FITTED
            rows.append(row)
    pub = _published(_kind(preset))
    if pub:
        full = {p: full[p] if full is not None else full_size_statistics(p, full_seeds) for p in presets}
        n, c = FULL_SIZES[_kind(preset)]
        for stat, (value, src) in pub.items():
            row = {"statistic": stat, "what": PUBLISHED_WHAT[stat], "reference": src, "size": f"{n} x {c}",
                   "real": value, "fitted": True}
            for p in presets:
                mean = float(full[p][stat].mean())
                sd = float(full[p][stat].std(ddof=1)) if len(full_seeds) > 1 else float("nan")
                half, ok = band(stat, value, mean, sd, published=True)
                row.update({f"{p} mean": mean, f"{p} sd": sd, f"{p} band": half, f"{p} within": ok,
                            f"{p} within tolerance": band(stat, value, mean, 0.0, published=True)[1]})
            rows.append(row)
    return pd.DataFrame(rows)


# ================================================================================== video and audio presets
#: Labels and tolerances of the published raw statistics of the video / audio presets (the image presets' rules:
#: 3 points of R@1, 0.5 of skewness).
MEDIA_WHAT = {"R1_t2v": "R@1 text -> video (%), full test set", "R1_v2t": "R@1 video -> text (%), full test set",
              "R1_t2a": "R@1 text -> audio (%), full test set", "R1_a2t": "R@1 audio -> text (%), full test set",
              "skew_N10_t2v": "skewness of N_10, text -> video, full test set",
              "skew_N10_t2a": "skewness of N_10, text -> audio, full test set"}
PUBLISHED_WHAT.update(MEDIA_WHAT)
PUBLISHED_TOLERANCE.update({"R1_t2v": (3.0, "abs"), "R1_v2t": (3.0, "abs"), "R1_t2a": (3.0, "abs"),
                            "R1_a2t": (3.0, "abs"), "skew_N10_t2v": (0.5, "abs"), "skew_N10_t2a": (0.5, "abs")})


def media_published(preset: str) -> Dict[str, Tuple[float, str, bool]]:
    """The published raw statistics of a video / audio preset's dataset: statistic -> (value, source, fitted).

    Fitted: zero-shot R@1 of the preset's model (DBSN Table 1: CLIP4Clip, reproduced; Table 3: CLAP) and the raw
    skewness of Table 5 when it is of that model (MSR-VTT: CLIP4Clip). DiDeMo's Table 5 skewness is of X-Pool, another
    model: reported beside, not fitted."""
    from ..media import MEDIA_PRESETS
    from .reporting import load_published

    p = MEDIA_PRESETS[preset]
    pub = load_published("dbsn-pan2025")
    fwd, bwd = p.directions

    def one(table, model, metric, direction, method="raw", setting="none"):
        row = pub[(pub["table"].astype(str) == table) & (pub["model"] == model) & (pub["dataset"] == p.dataset)
                  & (pub["direction"] == direction) & (pub["method"] == method) & (pub["setting"] == setting)
                  & (pub["metric"] == metric)]
        return float(row["value"].iloc[0]) if len(row) else None

    table = "1" if p.modality == "video" else "3"
    out = {}
    for d in (fwd, bwd):
        v = one(table, p.model, "R@1", d)
        if v is not None:
            out[f"R1_{d}"] = (v, f"DBSN Table {table} ({p.model}, zero-shot)", True)
    for model in (p.model, "X-Pool"):
        v = one("5", model, "skewness", fwd)
        if v is not None:
            out[f"skew_N10_{fwd}"] = (v, f"DBSN Table 5 ({model}, k = 10 assumed)", model == p.model)
            break
    return out


def media_statistics(preset: str, seeds: Iterable[int] = range(3)) -> pd.DataFrame:
    """Raw R@1 both directions and the skewness of N_10 (queries = captions) of the full-size test split of a video /
    audio preset, one row per seed (no banks are drawn)."""
    from ..media import make_media, media_tasks

    rows = []
    for seed in seeds:
        tasks = media_tasks(make_media(preset, seed=int(seed), n_train=0))
        fwd = next(iter(tasks))
        row = {f"R1_{d}": t.evaluate(None, ks=(1,))["R@1"] for d, t in tasks.items()}
        row[f"skew_N10_{fwd}"] = tasks[fwd].hubness(None, k=10)["skewness"]
        rows.append(row)
    return pd.DataFrame(rows)


def media_calibration_table(preset: str, *, seeds: Iterable[int] = range(3)) -> pd.DataFrame:
    """One row per published raw statistic of a video / audio preset: the published value, the synthetic mean and sd
    over ``seeds``, the band and whether the mean is within it (:func:`band`, the image presets' rule); the same
    columns as :func:`calibration_table`."""
    from ..media import MEDIA_PRESETS

    seeds = list(seeds)
    syn = media_statistics(preset, seeds)
    p = MEDIA_PRESETS[preset]
    rows = []
    for stat, (value, src, fitted) in media_published(preset).items():
        mean = float(syn[stat].mean())
        sd = float(syn[stat].std(ddof=1)) if len(seeds) > 1 else float("nan")
        half, ok = band(stat, value, mean, sd, published=True)
        rows.append({"statistic": stat, "what": PUBLISHED_WHAT[stat], "reference": src,
                     "size": f"{p.n_test} x {p.test_captions}", "real": value, f"{preset} mean": mean,
                     f"{preset} sd": sd, f"{preset} band": half, f"{preset} within": ok,
                     f"{preset} within tolerance": band(stat, value, mean, 0.0, published=True)[1], "fitted": fitted})
    return pd.DataFrame(rows)


__all__ += ["media_published", "media_statistics", "media_calibration_table"]
