"""Distribution gaps between embedding sets (DBSN Sec. 3.3, Fig. 7): how far a bank is from what it normalises.

Blocked over the rows of ``a`` (never an ``len(a) x len(b)`` matrix at once).
"""

from __future__ import annotations

from typing import Dict

import numpy as np
import torch

__all__ = ["nn_gap", "centroid_distance", "embedding_statistics", "bank_statistics"]


def nn_gap(a: np.ndarray, b: np.ndarray, *, block: int = 4096) -> float:
    """Nearest-neighbour distribution gap ``1 - mean_{x in a} max_{y in b} x . y``: how far the points of ``a`` are
    from the closest point of ``b`` (0 when every point of ``a`` has a copy in ``b``). Not symmetric. The inner
    product is the cosine for unit-length rows (embeddings here are); other rows are taken as they are."""
    ta, tb = torch.as_tensor(np.asarray(a)), torch.as_tensor(np.asarray(b))
    if ta.ndim != 2 or tb.ndim != 2 or ta.shape[1] != tb.shape[1] or not len(ta) or not len(tb):
        raise ValueError(f"a and b must be non-empty 2-D arrays of the same width; got {tuple(ta.shape)} and {tuple(tb.shape)}")
    tb = tb.to(ta.dtype)
    best = [(ta[i:i + block] @ tb.T).max(dim=1).values for i in range(0, len(ta), block)]
    return float(1.0 - torch.cat(best).mean())


def centroid_distance(a: np.ndarray, b: np.ndarray) -> float:
    """``||mean(a) - mean(b)||``: a first-moment proxy of the distribution gap (the EMD of the DBSN paper)."""
    return float(np.linalg.norm(np.asarray(a, np.float64).mean(0) - np.asarray(b, np.float64).mean(0)))


def _rows(x, name: str) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(x, dtype=np.float64))
    if t.ndim != 2 or t.shape[0] < 2 or not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} must be a finite 2-D array with at least 2 rows; got shape {tuple(t.shape)}")
    return t / torch.linalg.vector_norm(t, dim=1, keepdim=True)


def _spectrum(x: torch.Tensor) -> np.ndarray:
    """Shares of the variance on each principal component (descending)."""
    ev = torch.linalg.svdvals(x - x.mean(0)).numpy() ** 2
    return ev / ev.sum()


def _knn_cos(x: torch.Tensor, k: int, block: int) -> np.ndarray:
    """Cosine of every row to its ``k``-th nearest other row (blocked; never the whole n x n matrix)."""
    out = []
    for i in range(0, len(x), block):
        g = x[i:i + block] @ x.T
        g[torch.arange(g.shape[0]), torch.arange(i, i + g.shape[0])] = -torch.inf
        out.append(g.topk(k, dim=1).values[:, -1])
    return torch.cat(out).numpy()


def embedding_statistics(images, captions, caption_to_image, *, knn: int = 5, block: int = 2048) -> Dict[str, float]:
    """The statistics of a paired image-caption set that matter for hubness (``data/calibration_synthetic.md``).

    ``images`` (n x d), ``captions`` (m x d) and ``caption_to_image`` (m,) as in a test split; rows are
    L2-normalised here, scores are cosines ``S = captions @ images.T`` computed in float64 blocks. Returns:

    - similarity distributions: ``matched_mean``/``matched_sd`` (a caption and its image), ``random_mean`` /
      ``random_sd`` (every unmatched caption-image pair), ``best_nonmatch_mean`` (each caption's highest unmatched
      score: what a match has to beat);
    - modality gap: ``gap`` (``||mean image - mean caption||``) and ``centroid_cos``;
    - anisotropy, per modality (``img_`` / ``cap_``): ``participation_ratio`` (``(sum l)^2 / sum l^2`` of the
      covariance eigenvalues: an effective dimension), ``pc1_share`` and ``top10_share`` of the variance; of both
      modalities together: ``joint_pc1_share`` (mostly the modality gap) and ``joint_pc2_share``;
    - density, per modality: ``knn_cv``, the spread of the cosine to the ``knn``-th nearest neighbour relative to
      its mean distance, ``sd(c_knn) / mean(1 - c_knn)``: 0 when every point sits in an equally dense
      neighbourhood, large when some regions are crowded and others sparse; ``img_img_cos`` / ``cap_cap_cos``
      (mean over distinct pairs); ``same_image_cap_cos`` (captions of one image; NaN with one caption per image);
    - hubness, both directions (t2i: captions query images; i2t: images query captions): ``skew_N1_*`` and
      ``skew_N10_*`` (k-occurrence skewness, :func:`hubnorm.hubness_stats`), ``rho_N10_*`` (Spearman correlation of
      ``N_10`` with centrality, the cosine of a target with the mean query: how far one global direction explains
      the hubs);
    - per item, over the other modality: ``img_centrality_sd`` / ``cap_centrality_sd``, the spread (sd over the
      items) of an item's mean cosine to every item of the other modality (how much some items sit closer to the
      other modality than others: the per-item offset that the hubness corrections estimate), and
      ``img_spread_cv`` / ``cap_spread_cv``, how much the sd of an item's cosines to the other modality varies
      between items (sd / mean over the items: 0 when every item's scores are equally spread);
    - how a pair's cosine follows its items' centrality: ``cap_match_rho``, the Spearman correlation over the
      captions of a caption's cosine to its image with its mean cosine to the other images, and ``img_match_rho``,
      over the images with a caption, of an image's mean cosine to its captions with its mean cosine to the other
      captions (about 0 when an item's offset against the other modality does not carry over to its own pair,
      1 when it adds to it as much as to every other pair; NaN with fewer than 3 such items);
    - accuracy: ``R1_t2i`` and ``R1_i2t`` (percent; i2t counts any of an image's captions).
    """
    from .hubness import hubness_stats, k_occurrence
    from .normalizers.base import Identity

    img, cap = _rows(images, "images"), _rows(captions, "captions")
    c2i = torch.as_tensor(np.asarray(caption_to_image, dtype=np.int64))
    n, m = len(img), len(cap)
    if img.shape[1] != cap.shape[1] or c2i.shape != (m,) or int(c2i.min()) < 0 or int(c2i.max()) >= n:
        raise ValueError("images (n x d), captions (m x d) and caption_to_image (m values in [0, n)) do not fit together")
    if min(n, m) < 10:
        raise ValueError(f"embedding_statistics needs at least 10 images and 10 captions (its hubness statistics "
                         f"count N_10); got {n} images and {m} captions")
    mu_i, mu_c = img.mean(0), cap.mean(0)
    matched = (cap * img[c2i]).sum(1)
    tot = tot2 = 0.0
    best_neg, top1, cap_mean, cap_sd = [], [], [], []
    col_sum = torch.zeros(n, dtype=img.dtype)
    col_sum2 = torch.zeros(n, dtype=img.dtype)
    for i in range(0, m, block):
        s = cap[i:i + block] @ img.T
        rows = torch.arange(s.shape[0])
        tot += float(s.sum())
        tot2 += float((s * s).sum())
        cap_mean.append(s.mean(1))
        cap_sd.append(s.std(1, correction=0))
        col_sum += s.sum(0)
        col_sum2 += (s * s).sum(0)
        top1.append(s.argmax(1))
        s[rows, c2i[i:i + block]] = -torch.inf
        best_neg.append(s.max(1).values)
    pos = matched.numpy()
    n_neg = m * n - m
    rand_mean = (tot - pos.sum()) / n_neg
    rand_sd = np.sqrt(max(0.0, (tot2 - (pos ** 2).sum()) / n_neg - rand_mean ** 2))
    out = {"matched_mean": float(pos.mean()), "matched_sd": float(pos.std()), "random_mean": float(rand_mean),
           "random_sd": float(rand_sd), "best_nonmatch_mean": float(torch.cat(best_neg).mean()),
           "gap": float(torch.linalg.vector_norm(mu_i - mu_c)),
           "centroid_cos": float(mu_i @ mu_c / torch.linalg.vector_norm(mu_i) / torch.linalg.vector_norm(mu_c))}
    img_mean, cap_mean = col_sum / m, torch.cat(cap_mean)
    img_sd = (col_sum2 / m - img_mean ** 2).clamp_min(0).sqrt()
    for tag, centre, spread in (("img", img_mean, img_sd), ("cap", cap_mean, torch.cat(cap_sd))):
        out[f"{tag}_centrality_sd"] = float(centre.std(correction=0))
        out[f"{tag}_spread_cv"] = float(spread.std(correction=0) / spread.mean())
    counts = np.bincount(c2i.numpy(), minlength=n)
    own_sum = np.bincount(c2i.numpy(), weights=pos, minlength=n)
    cap_other = (cap_mean.numpy() * n - pos) / (n - 1)
    has = (counts > 0) & (counts < m)   # an image with a caption of its own and one of another image
    img_other = (col_sum.numpy()[has] - own_sum[has]) / (m - counts[has])
    for tag, own, other in (("cap", pos, cap_other), ("img", own_sum[has] / counts[has], img_other)):
        out[f"{tag}_match_rho"] = _spearman(own, other)
    for tag, x in (("img", img), ("cap", cap)):
        sh = _spectrum(x)
        out[f"{tag}_participation_ratio"] = float(1.0 / np.sum(sh ** 2))
        out[f"{tag}_pc1_share"] = float(sh[0])
        out[f"{tag}_top10_share"] = float(sh[:10].sum())
        k = min(knn, len(x) - 1)
        c_k = _knn_cos(x, k, block)
        out[f"{tag}_knn_cv"] = float(c_k.std() / (1 - c_k).mean())
        s_sum = x.sum(0)
        out[f"{tag}_{tag}_cos"] = float((s_sum @ s_sum - len(x)) / (len(x) * (len(x) - 1)))
    sh = _spectrum(torch.cat([img, cap]))
    out["joint_pc1_share"], out["joint_pc2_share"] = float(sh[0]), float(sh[1])
    # the captions of each image with more than one
    order, ends = np.argsort(c2i.numpy(), kind="stable"), np.cumsum(counts)
    groups = [torch.from_numpy(order[ends[j] - counts[j]:ends[j]]) for j in np.flatnonzero(counts > 1)]
    same = [float(((cap[g].sum(0) @ cap[g].sum(0)) - len(g)) / (len(g) * (len(g) - 1))) for g in groups]
    out["same_image_cap_cos"] = float(np.mean(same)) if same else float("nan")
    scores = {"t2i": (cap, img, mu_c), "i2t": (img, cap, mu_i)}
    for d, (q, t, mu_q) in scores.items():
        for k in (1, 10):
            n_k = k_occurrence(Identity(check_normalized=False).fit(t), k, queries=q)  # streamed in row blocks
            out[f"skew_N{k}_{d}"] = hubness_stats(n_k, k, len(q))["skewness"]
            if k == 10:
                out[f"rho_N10_{d}"] = _spearman(n_k, (t @ mu_q).numpy())
    out["R1_t2i"] = 100.0 * float((torch.cat(top1) == c2i).double().mean())
    best_cap = torch.cat([(img[i:i + block] @ cap.T).argmax(1) for i in range(0, n, block)])
    out["R1_i2t"] = 100.0 * float((c2i[best_cap] == torch.arange(n)).double().mean())
    return out



def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's correlation of ``a`` and ``b``; NaN with fewer than 3 values or a constant one (no warning)."""
    from scipy import stats as sps

    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(sps.spearmanr(a, b)[0])


def bank_statistics(images, captions, caption_to_image, *, seed: int = 0) -> Dict[str, float]:
    """How far a query bank drawn like the test data is from a gallery and from test queries (DBSN Sec. 3.3).

    The images are split in two seeded halves: the captions of one half are a query bank, the images and captions
    of the other a gallery and its test queries. Returns ``bank_gallery_gap`` (:func:`nn_gap` of the bank captions
    to the gallery images: how far a bank query is from its nearest gallery item, the query-target gap that DBSN's
    target bank narrows) and ``query_bank_gap`` (:func:`nn_gap` of the test captions to the bank captions).
    """
    c2i = np.asarray(caption_to_image, dtype=np.int64)
    n = int(c2i.max()) + 1
    if len(images) != n or n < 4:
        raise ValueError("bank_statistics needs at least 4 images and caption_to_image indexing all of them")
    perm = np.random.default_rng(seed).permutation(n)
    bank_img = np.zeros(n, bool)
    bank_img[perm[: n // 2]] = True
    caps = np.asarray(captions, np.float64)
    bank_caps, test_caps = caps[bank_img[c2i]], caps[~bank_img[c2i]]
    gallery = np.asarray(images, np.float64)[~bank_img]
    return {"bank_gallery_gap": nn_gap(bank_caps, gallery), "query_bank_gap": nn_gap(test_caps, bank_caps)}
