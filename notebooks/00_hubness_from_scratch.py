# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: tags,-all
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown] tags=[]
# # 00 · Hubness from scratch
#
# In high-dimensional spaces a few points become the nearest neighbour of a great many others — **hubs** — while
# others are nobody's neighbour — **anti-hubs**. In image–text retrieval this means a handful of gallery images
# are returned for captions that have nothing to do with them. This notebook builds the idea from random points,
# shows why it happens, finds a hub and an anti-hub in (synthetic) CLIP-like embeddings, and writes the three
# test-time fixes of this repository — NNN, the inverted softmax and Sinkhorn normalisation — in a few lines of
# plain numpy each, checked against `hubnorm`.
#
# **What you will learn**
# 1. what the k-occurrence $N_k$ is, and why its distribution becomes skewed as the dimension grows;
# 2. why: concentration of distances and the advantage of points near the data mean (Radovanović et al. 2010);
# 3. the modality gap of image and caption embeddings, and what a hub and an anti-hub look like;
# 4. what R@K, MdR, MnR and the skewness of $N_k$ measure;
# 5. the equations of NNN, the inverted softmax (IS) and Sinkhorn normalisation (SN), as code.
#
# **Prerequisites.** Linear algebra (dot products, norms), basic probability (mean, variance, skewness), nearest
# neighbours; numpy. No prior knowledge of hubness or retrieval. **Time:** about 45 minutes to read and run
# (the whole notebook computes in well under a minute on a laptop). Terms are defined in the glossary of
# `docs/teaching.md`.

# %% tags=["parameters"]
seed = 0  # int in [0, 4294967295] -- random seed for every draw in this notebook (numpy's seed range)
dims = [2, 10, 100, 1000]  # list of int at least 2 -- dimensions of the random-point toy
n_points = 2000  # int at least 20 -- points per toy cloud
k = 10  # int at least 1, < n_points -- neighbourhood size of the k-occurrence N_k
source = "synthetic:flickr30k"  # source -- image-caption embeddings: "synthetic:flickr30k" (default), "synthetic:coco", "cache:<dataset>:<model>:<pretrained>", "local:<folder>" or "sims:<folder>" (score matrices: the cells run on them; the embeddings-only ones say so in a NOTE)
synthetic_sizes = {"n_train_images": 1000, "n_test_images": 1000, "n_val_images": 0}  # sizes -- sizes for the synthetic generator only: training images (the reference bank, 5 captions each) and test images
source_kwargs = {}  # dict -- extra arguments of the loader (e.g. {"test_fraction": 0.5} for a local: folder)
# caps for large real data sets (seeded subsets): this notebook holds dense caption x image matrices
max_test_images = 1000  # int at least 2
max_bank_captions = 10000  # int at least 2
real_sources = ["auto"]  # real sources -- real embeddings beside the synthetic ones (§6.6): ["auto"] (the cached real image-text releases), [] (none) or ["real:coco500-clip-b16", ...]
# method parameters (the papers' defaults)
nnn_alpha = 0.75  # > 0
nnn_k = 16  # int at least 1
is_tau = 0.02  # > 0
sn_tau = 0.01  # > 0
sn_iter = 10  # int at least 1

# %% tags=[]
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch
from scipy import special, stats

import hubnorm as hn
from hubnorm.embeddings import EmbeddingSplit
from hubnorm_companion import notebook as nb
from hubnorm_companion import protocol as pr
from hubnorm.provenance import bank_mark

run = nb.setup("00", seed=seed, params=globals())

# %% [markdown] tags=[]
# ## 1 · Hubs in random data: the k-occurrence
#
# Take $n$ points $x_1, \dots, x_n$ and, for every point, its $k$ nearest neighbours among the others. The
# **k-occurrence** of a point counts how often it appears in those lists:
#
# $$N_k(x) = \#\{\, i : x \in \mathrm{kNN}(x_i) \,\}, \qquad \frac{1}{n}\sum_x N_k(x) = k .$$
#
# The mean is always $k$ (every list has $k$ entries). What changes is the *shape*: if every point were equally
# "popular", $N_k$ would be close to $k$ for everyone. A long right tail — a few points with $N_k \gg k$ —
# means hubs. We summarise the tail by the **skewness** of $N_k$ (the third standardised moment, 0 for a
# symmetric distribution).
#
# The toy: i.i.d. standard Gaussian points in $d$ dimensions, Euclidean distance, nothing else.

# %% tags=[]
def k_occurrence_points(x, k):
    """N_k of every point of x (n x d) among the points themselves (Euclidean, a point is not its own neighbour)."""
    sq = np.einsum("ij,ij->i", x, x)
    d2 = sq[:, None] + sq[None, :] - 2.0 * x @ x.T
    np.fill_diagonal(d2, np.inf)
    knn = np.argpartition(d2, k, axis=1)[:, :k]
    return np.bincount(knn.ravel(), minlength=len(x)), d2


rng = np.random.default_rng(seed)
toy = {}
for d in dims:
    x = rng.standard_normal((n_points, d))
    n_k, d2 = k_occurrence_points(x, k)
    dist = np.sqrt(np.maximum(d2[np.triu_indices(n_points, 1)], 0.0))
    # keep an evenly spaced sample of 20000 distances: enough for the statistics and the density plot
    dist = dist[:: max(1, dist.size // 20000)]
    to_mean = np.linalg.norm(x - x.mean(axis=0), axis=1)
    toy[d] = {"n_k": n_k, "dist": dist, "to_mean": to_mean}

toy_table = pd.DataFrame({
    "d": dims,
    "skewness of N_k": [stats.skew(toy[d]["n_k"].astype(np.float64)) for d in dims],
    "max N_k": [int(toy[d]["n_k"].max()) for d in dims],
    "anti-hubs (N_k = 0) %": [100.0 * np.mean(toy[d]["n_k"] == 0) for d in dims],
    "distance sd / mean": [toy[d]["dist"].std() / toy[d]["dist"].mean() for d in dims],
    "Spearman(N_k, distance to mean)": [stats.spearmanr(toy[d]["n_k"], toy[d]["to_mean"])[0] for d in dims],
})
nb.show(toy_table)

# %% tags=[]
fig, axes = plt.subplots(1, len(dims), figsize=(3.4 * len(dims), 3.0), sharey=True)
for ax, d in zip(np.atleast_1d(axes), dims):
    n_k = toy[d]["n_k"]
    ax.hist(n_k, bins=np.arange(0, n_k.max() + 2) - 0.5 if n_k.max() < 60 else 40, color=sns.color_palette()[0])
    ax.set_yscale("log")
    ax.axvline(k, color="black", lw=1, ls="--")
    ax.set_title(f"d = {d}: skewness {stats.skew(n_k.astype(np.float64)):.2f}", fontsize=10)
    ax.set_xlabel(f"$N_{{{k}}}$ (how often a point is a {k}-NN)")
axes[0].set_ylabel("number of points (log scale)")
fig.suptitle(f"k-occurrence of {n_points} i.i.d. Gaussian points (dashed: the mean, k = {k})", fontsize=11)
fig.tight_layout()
run.save_figure(fig, "toy_k_occurrence", data="toy: i.i.d. Gaussian points", bank="none")
plt.show()

# %% [markdown] tags=[]
# **What to notice.** Read the panels from left to right: how far the histogram reaches to the right of the
# dashed mean (hubs), how tall the bar at $N_k = 0$ is (anti-hubs: in no list at all), and the skewness in each
# title. Nothing about the data changes between the panels except the dimension. The cell below states what
# this run shows.

# %% tags=[]
sk_toy = [float(stats.skew(toy[d]["n_k"].astype(np.float64))) for d in dims]
steps = np.diff(sk_toy)
trend = ("with every step in $d$" if np.all(steps > 0) else "" if np.all(steps < 0)
         else "though not at every step in $d$")
nb.notice(
    f"From $d$ = {dims[0]} to $d$ = {dims[-1]} the skewness of $N_{{{k}}}$ "
    f"{nb.change(sk_toy[0], sk_toy[-1], up='rises', down='falls', same='stays')}" + (f", {trend}" if trend else "") + ".",
    f"The largest $N_{{{k}}}$ {nb.change(toy[dims[0]]['n_k'].max(), toy[dims[-1]]['n_k'].max(), up='grows', down='shrinks', same='stays', digits=0)}"
    f" ({toy[dims[-1]]['n_k'].max() / k:.1f} times the mean $k$ at $d$ = {dims[-1]}), and the share of anti-hubs "
    f"{nb.change(100 * np.mean(toy[dims[0]]['n_k'] == 0), 100 * np.mean(toy[dims[-1]]['n_k'] == 0), up='grows', down='shrinks', same='stays', digits=1, unit='%')}.",
)

# %% [markdown] tags=[]
# ## 2 · Why: concentration of distances, and the advantage of being central
#
# **Distances concentrate.** For two independent points $x, y \sim \mathcal N(0, I_d)$,
# $\|x - y\|^2 = \sum_{l=1}^d (x_l - y_l)^2$ is a sum of $d$ i.i.d. terms with mean 2 and variance 8, so
#
# $$\mathbb E\,\|x-y\|^2 = 2d, \qquad \frac{\mathrm{sd}\,\|x-y\|^2}{\mathbb E\,\|x-y\|^2} = \frac{\sqrt{8d}}{2d} = \sqrt{2/d} \;\to\; 0 .$$
#
# The table's column "distance sd / mean" is of the distance $\|x-y\|$ itself, not of its square. The square
# root halves a small relative spread ($\sqrt{1+\varepsilon} \approx 1 + \varepsilon/2$), so for large $d$
#
# $$\frac{\mathrm{sd}\,\|x-y\|}{\mathbb E\,\|x-y\|} \approx \tfrac12\sqrt{2/d} = \frac{1}{\sqrt{2d}} ,$$
#
# about 0.07 at $d = 100$ and 0.02 at $d = 1000$, as the column shows (at $d = 2$ the approximation does not hold).
# In high dimension all pairwise distances are nearly equal: which points count as "nearest" is decided by small
# differences.
#
# **A per-point offset decides those differences.** Expand the distance a query $y$ uses to rank a candidate $x$:
#
# $$\|x - y\|^2 = \underbrace{\|x\|^2}_{\text{same for every query}} - \; 2\, x^\top y \;+\; \|y\|^2 .$$
#
# For a fixed query $\|y\|^2$ does not change the ranking, so candidates are ranked by $\|x\|^2 - 2x^\top y$.
# The first term is a **per-candidate offset** shared by *all* queries: a candidate with a small $\|x\|$ — one
# close to the data mean — starts ahead in every query's race. In 2-D this hardly matters, because only the few
# candidates in the query's immediate surroundings compete and they all have about the same $\|x\|$. In high
# dimension there are no "immediate surroundings" (all distances are alike), every candidate competes with every
# other, and the spread of $\|x\|^2$ across candidates (sd $\sqrt{2d}$) is of the same order as the spread of
# $2x^\top y$ (sd $2\sqrt d$). The central points win far more races than their share: they become hubs, and
# the points far from the mean become anti-hubs. This is the explanation of Radovanović, Nanopoulos and
# Ivanović, *Hubs in Space* (JMLR 2010).
#
# Keep the structure "score = shared per-candidate offset + query-specific part" in mind: every method in §6
# estimates that offset and removes it.

# %% tags=[]
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
for d in dims:
    dist = toy[d]["dist"]
    sns.kdeplot(dist / dist.mean(), ax=axes[0], label=f"d = {d}", fill=False, bw_adjust=1.5, cut=0)
axes[0].set_xlabel("pairwise distance / mean pairwise distance")
axes[0].set_title("(a) distances concentrate as d grows", fontsize=10)
axes[0].legend(fontsize=8)
d_hi = dims[-1]
axes[1].scatter(toy[d_hi]["to_mean"], toy[d_hi]["n_k"], s=4, alpha=0.4)
axes[1].set_xlabel("distance of the point to the data mean")
axes[1].set_ylabel(f"$N_{{{k}}}$")
rho = stats.spearmanr(toy[d_hi]["n_k"], toy[d_hi]["to_mean"])[0]
axes[1].set_title(f"(b) d = {d_hi}: central points are hubs (Spearman {rho:.2f})", fontsize=10)
fig.tight_layout()
run.save_figure(fig, "toy_concentration", data="toy: i.i.d. Gaussian points", bank="none")
plt.show()

# %% [markdown] tags=[]
# **What to notice.** (a) Compare the width of the curves: the relative spread of the distances is the column
# "distance sd / mean" of the table. (b) Each dot is one point of the last dimension in `dims`: read $N_k$ against its
# distance to the data mean, left (central) to right (outlying). The last column of the table gives the same
# correlation for every dimension.

# %% tags=[]
spread = [float(toy[d]["dist"].std() / toy[d]["dist"].mean()) for d in dims]
rhos = [float(stats.spearmanr(toy[d]["n_k"], toy[d]["to_mean"])[0]) for d in dims]
central = toy[d_hi]["to_mean"] <= np.quantile(toy[d_hi]["to_mean"], 0.1)
outlying = toy[d_hi]["to_mean"] >= np.quantile(toy[d_hi]["to_mean"], 0.9)
nb.notice(
    f"(a) The relative spread of the pairwise distances "
    f"{nb.change(spread[0], spread[-1], up='grows', down='shrinks', same='stays', digits=3)} from $d$ = {dims[0]} "
    f"to $d$ = {dims[-1]}.",
    f"(b) At $d$ = {d_hi} the tenth of the points closest to the mean have a mean $N_{{{k}}}$ of "
    f"{toy[d_hi]['n_k'][central].mean():.1f}, the tenth farthest from it {toy[d_hi]['n_k'][outlying].mean():.1f} "
    f"(the mean over all points is {k}); Spearman($N_{{{k}}}$, distance to the mean) is "
    + ", ".join(f"{r:.2f} at $d$ = {d}" for d, r in zip(dims, rhos)) + ".",
)

# %% [markdown] tags=[]
# ## 3 · Image–text embeddings: the modality gap
#
# Retrieval with a dual encoder such as CLIP embeds queries and targets separately, L2-normalises them and ranks
# by the cosine $s(q, t) = q^\top t$. The normalisation puts every point on the unit sphere, so $\|x\|$ no longer
# differs — but the data do not fill the sphere: images sit in one narrow cone and captions in another (the
# **modality gap**, Liang et al. 2022). What plays the role of "close to the data mean" is now "close to the
# centre of the *query* cloud": for text→image retrieval, an image that leans towards the caption cloud's centre
# $\mu_C$ scores a little higher against *every* caption,
#
# $$\frac{1}{m}\sum_{i=1}^m s(q_i, t) = \mu_C^\top t ,$$
#
# and becomes a hub. By default we use the synthetic data of this repository (`hubnorm.synthetic`: seeded
# embeddings calibrated to zero-shot CLIP ViT-B/32 on Flickr30k; **synthetic, not real data**): test images and
# their 5 captions each, and the training captions as a *reference bank* for §6. Set `source` to run the same
# cells on real embeddings or on released score matrices (see `notebooks/README.md` and the next paragraph); large
# real sets are cut to `max_test_images` test images and `max_bank_captions` bank captions (seeded subsets).

# %% [markdown] tags=[]
# **Any source.** The cells below read the test split and the reference bank of `source`: embeddings, or with
# `source = "sims:<folder>"` released score matrices (`hubnorm.data.sims`: the folder's text-query direction and its
# own bank rows; a folder without bank rows lets its test queries serve as the bank, query-aware and marked so).
# Where a cell uses the embeddings only to form scores it reads the scores instead, and an image's centrality
# $\mu_C^\top t$ is then the mean of its column of raw scores (the equation above); what truly needs embeddings
# (the centres of the two clouds and their PCA picture) says so in a NOTE. A folder's test matrix is read whole
# (`max_test_images` does not cut it); `max_bank_captions` caps its bank rows (a seeded subset).

# %% tags=[]
def dense(task, rows="queries"):
    """The raw (rows x gallery) scores of `task` as one numpy array (small data only), read whole from
    `task.matrix`: the product of the embeddings (captions @ images.T for the test queries) or the folder's
    stored matrix, whichever the task holds."""
    m = task.matrix(rows, "targets")
    return m.block(0, m.shape[0], 0, m.shape[1], torch.float64).numpy()


if pr.is_sims(source):   # score matrices: the folder's text-query direction against its bank rows
    src = pr.open_data(source, directions=["t2i"], seed=seed, dtype=run.dtype)
    n_bank = src.tasks["t2i"].size("query_bank")
    if "t2i" not in src.test_as_bank and n_bank > max_bank_captions:   # a seeded subset of the bank rows
        src = src.with_bank_fraction(max_bank_captions / n_bank, seed=seed)
    task = src.tasks["t2i"]
    images = captions = caption_bank = None   # no embeddings: every cell below reads the scores
    scores = dense(task)
    positives = task.positives
    if np.all(np.diff(positives.indptr) == 1):   # one positive per text query: its image
        caption_to_image = positives.indices
    else:   # several: the best-scoring positive stands for "its image" in sections 3-4
        is_positive = np.zeros(scores.shape, dtype=bool)
        is_positive[positives.query_of_entry, positives.indices] = True
        caption_to_image = np.where(is_positive, scores, -np.inf).argmax(axis=1)
        pr.note("some test queries have several positives: sections 3-4 take each query's best-scoring one as its "
                "image (its other positives count among the non-matches there); R@K in section 6 counts any positive")
else:   # embeddings: the test split, and the training captions as the reference bank (no validation split)
    data = pr.prepare_dataset(source, seed=seed, dtype=run.dtype, synthetic_sizes=synthetic_sizes,
                              source_kwargs=source_kwargs, ensure_val=False)
    test, bank = data.split("test"), data.split("train")
    subset_rng = np.random.default_rng(seed)
    if test.n_images > max_test_images:
        test = test.subset_images(np.sort(subset_rng.choice(test.n_images, max_test_images, replace=False)))
    if bank.n_captions > max_bank_captions:
        keep = np.sort(subset_rng.choice(bank.n_captions, max_bank_captions, replace=False))
        bank = EmbeddingSplit(bank.images, bank.captions[keep], bank.caption_to_image[keep])
    data.splits.update(test=test, train=bank)   # the run label then names the sizes used here (after the caps)
    images, captions, caption_to_image, caption_bank = test.images, test.captions, test.caption_to_image, bank.captions
    task = hn.build_tasks(images, captions, caption_to_image, caption_bank=caption_bank, directions=("t2i",))["t2i"]
    src = pr.RunData(source=source, label=pr.run_label(data), all_tasks={"t2i": task}, directions=("t2i",), ds=data,
                     test=test, bank=bank)
    scores = captions @ images.T   # the raw text->image scores s(q, t) = q^T t: one row per caption
n_queries, n_targets = scores.shape
label = nb.data_label(src.label)  # names the data of every PASS/DIFFERS line below
print(f"this run: {label}")
if src.has_embeddings:
    print(f"test split: {len(images)} images, {len(captions)} captions (dim {images.shape[1]}); "
          f"reference bank: {len(caption_bank)} training captions")
else:
    print(f"test scores: {n_queries} text queries x {n_targets} gallery items; reference bank: "
          f"{task.size('query_bank')} rows, {src.bank_name('t2i')}")
    if n_targets > max_test_images:
        pr.note(f"max_test_images = {max_test_images} does not cut a sims: folder: its whole test matrix "
                f"({n_queries} x {n_targets}) is read into memory")

# %% tags=[]
word = "cosine" if src.has_embeddings else "score"   # a folder's scores need not be cosines
matched = scores[np.arange(n_queries), caption_to_image]   # s(caption, its own image)
unmatched = scores[caption_to_image[:, None] != np.arange(n_targets)[None, :]]
centres = []
if src.needs_embeddings("the geometry of the two clouds (their centres: the first rows of this table; their PCA: "
                        "panel (a) below)"):
    mu_img, mu_cap = images.mean(axis=0), captions.mean(axis=0)
    centres = [("cos(mean image direction, mean caption direction)",
                mu_img @ mu_cap / np.linalg.norm(mu_img) / np.linalg.norm(mu_cap)),
               ("distance between the two centres", np.linalg.norm(mu_img - mu_cap))]
geometry = pd.DataFrame(centres + [(f"mean {word}, matched caption-image pairs", matched.mean()),
                                   (f"mean {word}, unmatched pairs", unmatched.mean()),
                                   (f"sd of {word}s, unmatched pairs", unmatched.std())], columns=["quantity", "value"])
nb.show(geometry, digits=3)

# %% tags=[]
fig, axes = plt.subplots(1, 2 if src.has_embeddings else 1, figsize=(11 if src.has_embeddings else 5.5, 4.2),
                         squeeze=False)
axes = axes[0]
if src.has_embeddings:   # (a): the PCA of the embeddings
    n_sub = min(300, len(images))
    sub = np.random.default_rng(seed).choice(len(images), n_sub, replace=False)
    first_caption = np.unique(caption_to_image, return_index=True)[1]  # the first caption of every image
    both = np.concatenate([images[sub], captions[first_caption[sub]]])
    centred = both - both.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    xy = centred @ vt[:2].T
    ax = axes[0]
    ax.scatter(*xy[:n_sub].T, s=8, label="images", color=sns.color_palette()[0])
    ax.scatter(*xy[n_sub:].T, s=8, label="captions", color=sns.color_palette()[1])
    for i in range(0, n_sub, 15):
        ax.plot([xy[i, 0], xy[n_sub + i, 0]], [xy[i, 1], xy[n_sub + i, 1]], color="0.6", lw=0.6)
    ax.set_xlabel("principal component 1")
    ax.set_ylabel("principal component 2")
    ax.set_title("(a) PCA of images and captions (grey: matched pairs)", fontsize=10)
    ax.legend(fontsize=8)
ax = axes[-1]   # (b): the scores alone
pb = "(b) " if src.has_embeddings else ""   # the panel's letter when (a) is drawn beside it
sns.kdeplot(unmatched[:: max(1, unmatched.size // 20000)], ax=ax, label="unmatched caption-image", fill=True)
sns.kdeplot(matched, ax=ax, label="matched caption-image", fill=True)
ax.set_xlabel(f"{word} similarity")
ax.set_title(f"{pb}{word} of matched and of unmatched caption-image pairs", fontsize=10)
ax.legend(fontsize=8)
fig.tight_layout()
run.save_figure(fig, "modality_gap", caption=f"The modality gap; {label}.", data=label, bank="none")
plt.show()

# %% [markdown] tags=[]
# **What to notice.** (a) Look at where the two clouds sit along the first principal component and at the direction of
# the grey lines that join an image to its caption. (b) Compare the gap between the two densities with the width
# of the unmatched one. The cell below measures both (from score matrices, panel (a) is not drawn).

# %% tags=[]
gap_a = []
if src.has_embeddings:   # (a) reads the PCA and the caption embeddings
    pc1 = xy[:, 0]
    img_side = np.sign(pc1[:n_sub].mean() - pc1[n_sub:].mean())   # +1 when images sit right of captions
    mid = (pc1[:n_sub].mean() + pc1[n_sub:].mean()) / 2
    own_side = 100 * np.mean(np.concatenate([img_side * (pc1[:n_sub] - mid) > 0,
                                             img_side * (pc1[n_sub:] - mid) < 0]))
    same_way = 100 * np.mean(np.sign(pc1[:n_sub] - pc1[n_sub:]) == img_side)
    cap_sub = captions[first_caption[sub]]
    cap_cap = (cap_sub @ cap_sub.T)[~np.eye(n_sub, dtype=bool)].mean()
    gap_a = [
        f"(a) Along principal component 1, {own_side:.1f}% of the points lie on their own modality's side of the "
        f"midpoint between the two centres, and {same_way:.1f}% of the matched pairs run the same way across it. "
        f"A caption's mean cosine with the captions of other images is {cap_cap:.3f}, "
        f"{nb.order_word(cap_cap, matched.mean(), ('higher than', 'lower than', 'equal to'), digits=3)} its mean "
        f"cosine with its own image ({matched.mean():.3f})."]
separation = (matched.mean() - unmatched.mean()) / unmatched.std()
nb.notice(
    *gap_a,
    f"{pb}The mean {word} of matched pairs ({matched.mean():.3f}) is "
    f"{nb.order_word(matched.mean(), unmatched.mean(), digits=3)} that of unmatched pairs ({unmatched.mean():.3f}); "
    f"the difference is {abs(separation):.1f} standard deviations of the unmatched scores ({unmatched.std():.3f}). "
    f"Every caption, "
    f"however, meets {n_targets - 1} non-matching images: the next figure puts its true image against the best "
    f"of them.",
)

# %% [markdown] tags=[]
# ### 3.1 · The true match against the best non-match
# Retrieval does not compare a match with a *typical* non-match but with the *best* of all of them: a caption
# retrieves its image first (rank 0) only if $s(q, t_{\text{true}}) > \max_{t \ne t_{\text{true}}} s(q, t)$. The
# margin $s(q, t_{\text{true}}) - \max_{t \ne t_{\text{true}}} s(q, t)$ is negative exactly for the captions that
# miss R@1.

# %% tags=[]
rows_all = np.arange(n_queries)
best_other = np.where(np.arange(n_targets)[None, :] == caption_to_image[:, None], -np.inf, scores).max(axis=1)
true_score = scores[rows_all, caption_to_image]
margin = true_score - best_other
fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
ax = axes[0]
miss = margin < 0
ax.scatter(best_other[~miss], true_score[~miss], s=4, alpha=0.4, label="true image first (margin > 0)")
ax.scatter(best_other[miss], true_score[miss], s=4, alpha=0.4, label="a non-match first (margin < 0)",
           color=sns.color_palette()[3])
lim = [min(best_other.min(), true_score.min()), max(best_other.max(), true_score.max())]
ax.plot(lim, lim, color="black", lw=1)
ax.set_xlabel(f"{word} with the best non-matching image")
ax.set_ylabel(f"{word} with the true image")
ax.set_title("(a) one dot per caption (line: equal scores)", fontsize=10)
ax.legend(fontsize=8, markerscale=3)
ax = axes[1]
edges = np.histogram_bin_edges(margin, bins=60)
ax.hist(margin[margin >= 0], bins=edges, color=sns.color_palette()[0], label="true image first")
ax.hist(margin[margin < 0], bins=edges, color=sns.color_palette()[3], label="a non-match first")
ax.legend(fontsize=8)
ax.axvline(0, color="black", lw=1)
ax.set_xlabel(f"margin: true-image {word} minus best non-match {word}")
ax.set_ylabel("captions")
ax.set_title("(b) the margin per caption (left of the line: R@1 missed)", fontsize=10)
fig.tight_layout()
run.save_figure(fig, "match_vs_best_nonmatch", caption=f"Raw {word} margins per caption; {label}.", data=label,
                bank="none")
plt.show()

# %% [markdown] tags=[]
# **What to notice.** (a) Dots under the line are captions whose true image loses to some other image. (b) The
# share of the histogram left of zero is the share of captions that miss R@1; its median tells how narrowly the
# typical caption wins or loses.

# %% tags=[]
nb.notice(
    f"For {100 * miss.mean():.1f}% of the {n_queries} captions the best non-matching image scores higher than the "
    f"true one: raw text→image R@1 is {100 * (1 - miss.mean()):.2f}%. The median margin is {np.median(margin):+.3f}, "
    f"against an average gap of {matched.mean() - unmatched.mean():+.3f} between matched and unmatched pairs (§3). "
    f"The median best non-match scores higher than {stats.percentileofscore(unmatched, np.median(best_other)):.1f}% "
    f"of all unmatched pairs: what a caption has to beat is the far right tail of the unmatched density, so a "
    f"per-image offset the size of the median margin ({abs(np.median(margin)):.3f}) can change who comes first.",
)

# %% [markdown] tags=[]
# ## 4 · A hub and an anti-hub, concretely
#
# Text→image: the captions are the queries, the images the targets. $N_k(t)$ is the number of test captions
# whose top-$k$ images contain image $t$; its mean is $k m / n$ ($5k$ with 5 captions per image). We call an
# image's similarity to the caption centre, $\mu_C^\top t$, its **centrality** (from score matrices: the mean of
# its column of raw scores, the same number by §3). The **hub** below is the image with the largest $N_k$, the
# **anti-hub** the one with the smallest (larger real galleries have many images with $N_k = 0$).

# %% tags=[]
n_1_raw = hn.k_occurrence(scores, 1)
n_k_raw = hn.k_occurrence(scores, k)
# mu_C^T t, or the column means of the scores: (1/m) sum_i s(q_i, t) = mu_C^T t (§3)
centrality = images @ mu_cap if src.has_embeddings else scores.mean(axis=0)
hub = int(np.argmax(n_k_raw))
# the anti-hub: the image with the smallest N_k (ties: the least central one)
anti = int(np.lexsort((centrality, n_k_raw))[0])
centrality_rank = stats.rankdata(-centrality, method="ordinal").astype(int)


def own_caption_ranks(image):
    """0-based rank of `image` in the result list of each of its own captions."""
    own = np.flatnonzero(caption_to_image == image)
    return [int((scores[c] > scores[c, image]).sum()) for c in own]


profile = pd.DataFrame({
    "image": ["hub", "anti-hub"],
    "index": [hub, anti],
    "N_1": [int(n_1_raw[hub]), int(n_1_raw[anti])],
    f"N_{k}": [int(n_k_raw[hub]), int(n_k_raw[anti])],
    f"expected N_{k}": [k * n_queries / n_targets] * 2,
    "centrality rank (1 = most central)": [int(centrality_rank[hub]), int(centrality_rank[anti])],
    "ranks of it by its own captions": [str(own_caption_ranks(hub)), str(own_caption_ranks(anti))],
})
nb.show(profile)

won = np.flatnonzero(scores.argmax(axis=1) == hub)
won = won[caption_to_image[won] != hub][:6]
stolen = pd.DataFrame({
    "caption": won,
    "its true image": caption_to_image[won],
    "score with the hub": scores[won, hub],
    "score with its true image": scores[won, caption_to_image[won]],
    "rank of its true image": [int((scores[c] > scores[c, caption_to_image[c]]).sum()) for c in won],
})
nb.show(stolen, digits=3, caption="Captions of other images that retrieve the hub first")

# %% tags=[]
fig, ax = plt.subplots(figsize=(6.5, 4.2))
ax.scatter(centrality, n_k_raw, s=7, alpha=0.5)
ax.scatter(centrality[[hub]], n_k_raw[[hub]], s=80, facecolor="none", edgecolor="red", lw=2, label="hub")
ax.scatter(centrality[[anti]], n_k_raw[[anti]], s=80, facecolor="none", edgecolor="black", lw=2, label="anti-hub")
ax.axhline(k * n_queries / n_targets, color="0.4", ls="--", lw=1, label=f"expected $N_{{{k}}}$")
ax.set_xlabel(r"centrality $\mu_C^\top t$ = the mean raw score of t")
ax.set_ylabel(f"$N_{{{k}}}$ of the image")
ax.set_title(f"text→image, {label}: Spearman {stats.spearmanr(n_k_raw, centrality)[0]:.2f}",
             fontsize=9)
ax.legend(fontsize=8)
fig.tight_layout()
run.save_figure(fig, "hub_vs_centrality", data=label, bank="none")
plt.show()

# %% [markdown] tags=[]
# **What to notice.** Find the two circled images on the centrality axis and compare their $N_k$ with the dashed
# expected count; in the table of stolen captions, compare the score with the hub against the score with the true
# image. The spread of the cloud around its trend is the query-specific part of the score, which centrality does
# not explain.

# %% tags=[]
expected_k = k * n_queries / n_targets
gap_stolen = (stolen["score with the hub"] - stolen["score with its true image"]).to_numpy()
anti_ranks = own_caption_ranks(anti)
nb.notice(
    f"The hub (image {hub}) is in the top {k} of {int(n_k_raw[hub])} captions, "
    f"{n_k_raw[hub] / expected_k:.1f} times the expected {expected_k:.1f}; its centrality rank is "
    f"{int(centrality_rank[hub])} of {n_targets}.",
    (f"The captions it steals in the table score it {gap_stolen.min():.3f} to {gap_stolen.max():.3f} above their "
     f"own image." if len(gap_stolen) else "No caption of another image retrieves it first."),
    f"The anti-hub (image {anti}) has $N_{{{k}}}$ = {int(n_k_raw[anti])} and centrality rank "
    f"{int(centrality_rank[anti])}; its own captions rank it at {anti_ranks} (0 = first).",
    f"Spearman($N_{{{k}}}$, centrality) over all images is {stats.spearmanr(n_k_raw, centrality)[0]:.2f}.",
)

# %% [markdown] tags=[]
# ## 5 · What the metrics measure
#
# For each query, let $r$ be the 0-based **rank** of its best positive target (0 = retrieved first).
#
# * **R@K** (recall at K) $= 100 \cdot \frac{1}{m}\#\{\text{queries with } r < K\}$: the percentage of queries
#   whose positive is in the top K. Higher is better. R@1 is the headline number of the papers.
# * **MdR** (median rank) $= \lfloor \mathrm{median}(r) \rfloor + 1$ and **MnR** (mean rank)
#   $= \mathrm{mean}(r) + 1$: 1-based, lower is better. MnR is sensitive to the few queries whose positive is
#   ranked very low.
# * **Skewness of $N_k$** $= \frac{\frac1n\sum_t (N_k(t) - \bar N)^3}{\left(\frac1n\sum_t (N_k(t) - \bar N)^2\right)^{3/2}}$:
#   about 0 when targets are retrieved evenly, large and positive when a few hubs take many queries. It
#   measures the *shape* of the distribution, not accuracy.
#
# A worked example with five queries and six targets:

# %% tags=[]
ranks = np.array([0, 2, 0, 7, 1])
print("ranks:", ranks.tolist())
print(f"R@1 = 100 * 2/5 = {hn.recall_at_k(ranks, 1):.0f};  R@5 = 100 * 4/5 = {hn.recall_at_k(ranks, 5):.0f}")
print(f"MdR = floor(median {np.median(ranks):.0f}) + 1 = {hn.median_rank(ranks):.0f};  "
      f"MnR = mean {ranks.mean():.0f} + 1 = {hn.mean_rank(ranks):.0f}")
n_k_even = np.array([2, 2, 2, 2, 2, 2])
n_k_hub = np.array([7, 1, 1, 1, 1, 1])
print(f"N_2 of six targets for six queries: even {n_k_even.tolist()} -> skewness "
      f"{hn.hubness_stats(n_k_even, 2, 6)['skewness']:.2f}; one hub {n_k_hub.tolist()} -> skewness "
      f"{hn.hubness_stats(n_k_hub, 2, 6)['skewness']:.2f}")

# %% [markdown] tags=[]
# ## 6 · Three ways to remove the offset
#
# All three methods keep the cosine and add **one offset per target**: $\tilde s(q, t_j) = s(q, t_j) + h_j$.
# They estimate $h_j$ from a **reference bank** $B$ of queries that are not the test queries (here the
# training captions, or a folder's bank rows: a *query bank*); passing the test queries themselves as the bank makes
# a method *query-aware* (transductive). Ranking is then still one matrix product plus a vector.
#
# ### 6.1 Nearest Neighbor Normalization (NNN; Chowdhury et al. 2024, Eq. 1–2)
# Subtract $\alpha$ times the mean similarity of the target's $k$ most similar bank queries:
#
# $$b(t) = \alpha \cdot \frac1k \sum_{q \in \mathrm{top}_k^B(t)} s(q, t), \qquad \tilde s(q, t) = s(q, t) - b(t).$$
#
# A hub is close to many bank captions, so its $b(t)$ is large.

# %% tags=[]
bank_scores = dense(task, "query_bank")   # (bank queries x targets): caption_bank @ images.T or a folder's matrix
nnn_k = min(nnn_k, len(bank_scores))                         # k cannot exceed the bank
top_k = np.partition(bank_scores, -nnn_k, axis=0)[-nnn_k:]   # each target's k largest bank similarities
h_nnn = -nnn_alpha * top_k.mean(axis=0)

# %% [markdown] tags=[]
# ### 6.2 Inverted softmax (IS / QBNorm; Bogolin et al. 2022; DBSN Eq. 1–3)
# Normalise every target's scores by a softmax over the *bank* (a column softmax, hence "inverted"):
#
# $$\hat S_{ij} = \frac{\exp(S_{ij}/\tau)}{\sum_{b \in B} \exp(s(b, t_j)/\tau)} = \exp\!\big((S_{ij} + h_j)/\tau\big),
# \qquad h_j = -\tau \log \sum_{b \in B} \exp\!\big(s(b, t_j)/\tau\big).$$
#
# $\exp$ is monotone, so ranking by $\hat S$ is ranking by $S + h$. The temperature $\tau$ sets how many bank
# queries count: $\tau \to 0$ gives $h_j \to -\max_b s(b, t_j)$ (only the closest bank query), a large $\tau$ the
# mean similarity (minus a constant). `scipy.special.logsumexp` keeps $\exp(S/\tau)$ from overflowing.

# %% tags=[]
h_is = -is_tau * special.logsumexp(bank_scores / is_tau, axis=0)

# %% [markdown] tags=[]
# ### 6.3 Sinkhorn normalisation (SN; Pan et al., DBSN Eq. 7–9, Alg. A1)
# IS balances the targets only. SN asks for a transport plan $\pi$ between the $m$ bank queries and the $n$
# targets in which *every* query sends out $1/m$ and *every* target receives $1/n$, maximising score plus
# entropy:
#
# $$\pi^\star = \arg\max_{\pi \mathbf 1 = \frac1m\mathbf 1,\ \pi^\top \mathbf 1 = \frac1n\mathbf 1} \langle S, \pi\rangle + \tau H(\pi),
# \qquad \pi^\star_{ij} = \exp\!\big((S_{ij} + f_i + g_j)/\tau\big).$$
#
# The potentials come from alternating the two marginal constraints (Sinkhorn–Knopp, in the log domain), starting
# from $g = 0$, for $T$ iterations:
#
# $$f_i = \tau \log\tfrac1m - \tau \log\sum_j \exp\!\big((S_{ij} + g_j)/\tau\big), \qquad
#   g_j = \tau \log\tfrac1n - \tau \log\sum_i \exp\!\big((S_{ij} + f_i)/\tau\big).$$
#
# The target potential $g_j$ is the offset $h_j$. The $g$-update with all $f_i$ equal is exactly IS (plus a
# constant): SN is IS with the bank queries reweighted so that each of them is also "used" equally.

# %% tags=[]
m_bank, n_targets = bank_scores.shape
g = np.zeros(n_targets)
for _ in range(sn_iter):
    f = sn_tau * np.log(1 / m_bank) - sn_tau * special.logsumexp((bank_scores + g[None, :]) / sn_tau, axis=1)
    g = sn_tau * np.log(1 / n_targets) - sn_tau * special.logsumexp((bank_scores + f[:, None]) / sn_tau, axis=0)
h_sn = g

# %% [markdown] tags=[]
# ### 6.4 The same with `hubnorm`
# The library computes the same offsets without ever holding the bank × target matrix (it streams blocks), on
# CPU or GPU. `task.fit(method)` estimates them from the task's gallery and query bank (for embeddings it calls
# `method.fit(targets, query_bank=...)`; for score matrices it reads the bank x gallery scores); `.offsets` returns
# them. One convention differs: hubnorm stores the inverted-softmax offset *centred*, $h_j + \tau \log |B|$ (a
# log-*mean*-exp instead of a log-sum-exp), so that the offsets stay of the size of the scores at any temperature.
# A constant added to every target changes no ranking, so we add it to our numpy version before comparing.

# %% tags=[]
nnn = task.fit(hn.NearestNeighborNormalization(alpha=nnn_alpha, k=nnn_k))
inv = task.fit(hn.InvertedSoftmax(tau=is_tau))
snn = task.fit(hn.SinkhornNormalization(tau=sn_tau, n_iter=sn_iter))
centring = is_tau * np.log(m_bank)  # hubnorm's constant for IS (see above)
# agreement to the rounding of the stored scores: float64 embeddings, or a folder's matrices, which hubnorm reads in
# float32 when they are stored so (its fast path; our numpy copy is float64)
float32_scores = task.matrix("query_bank", "targets").dtype == torch.float32   # stored so (a product: float64)
atol = 1e-5 if float32_scores else 1e-9
for name, ours, lib in (("NNN", h_nnn, nnn), ("IS", h_is + centring, inv), ("SN", h_sn, snn)):
    np.testing.assert_allclose(ours, lib.offsets, rtol=0, atol=atol)
    print(f"{name}: numpy offsets match hubnorm (max |difference| {np.abs(ours - lib.offsets).max():.0e} <= {atol:.0e})")
g_is = sn_tau * np.log(1 / n_targets) - sn_tau * special.logsumexp(bank_scores / sn_tau, axis=0)
h_is_at_sn_tau = task.fit(hn.InvertedSoftmax(tau=sn_tau)).offsets
np.testing.assert_allclose(g_is - sn_tau * np.log(1 / n_targets) + sn_tau * np.log(m_bank), h_is_at_sn_tau,
                           rtol=0, atol=atol)
print("SN's first g-update with equal f is IS at the same tau (plus a constant): checked")

# %% [markdown] tags=[]
# ### 6.5 What the offsets do to the scores
# Every method is evaluated on the same test task (text→image, captions as queries). At scale you would call
# `hn.evaluate(method, task)` and `hn.k_occurrence(task.blocks(method), k)`, which stream the scores in blocks;
# this gallery is small enough to score once and reuse the matrix. The `bank` column says what each method's bank
# was (`hubnorm.provenance.bank_mark`: QUERY-AWARE when it holds test queries).

# %% tags=[]
raw_name = "raw cosine" if src.has_embeddings else "raw scores"
methods = {raw_name: task.fit(hn.Identity()), "NNN": nnn, "IS": inv, "SN": snn}
rows, n_k_of = [], {}
for name, method in methods.items():
    normalised = task.score(method)  # the (captions x images) matrix S + h: small enough to hold here
    metrics = hn.summarize_ranks(hn.positive_ranks(normalised, task.positives))
    n_1 = hn.k_occurrence(normalised, 1)
    n_k_of[name] = hn.k_occurrence(normalised, k)
    st = hn.hubness_stats(n_k_of[name], k, n_queries)
    rows.append({"method": name, "R@1": metrics["R@1"], "R@5": metrics["R@5"], "MdR": metrics["MdR"],
                 "MnR": metrics["MnR"], "max N_1": int(n_1.max()), f"skewness N_{k}": st["skewness"],
                 f"max N_{k}": int(st["max"]), "never retrieved first (N_1 = 0) %": 100.0 * np.mean(n_1 == 0),
                 "bank": bank_mark(method, task)})
effect = pd.DataFrame(rows)
run.save_table(effect, "methods_effect", caption=f"R@K and the hubness of N_1 and N_{k} of the test scores (t2i), raw "
               f"and after NNN, IS and SN at fixed parameters; {label}. " + nb.marks_note(effect["bank"]), data=label)
nb.show(effect, caption=f"Text→image test scores, raw and after each method; {label}")

# %% tags=[]
fig, axes = plt.subplots(1, 2, figsize=(11.5, 4.0))
ax = axes[0]
bins = np.arange(0, max(int(v.max()) for v in n_k_of.values()) + 4, 3)
for name, n_k_m in n_k_of.items():
    ax.hist(n_k_m, bins=bins, histtype="step", lw=1.6, label=name)
ax.set_yscale("log")
ax.set_xlabel(f"$N_{{{k}}}$ per image")
ax.set_ylabel("images (log scale)")
ax.set_title(f"(a) k-occurrence before and after (t2i, k = {k})", fontsize=10)
ax.legend(fontsize=8)
ax = axes[1]
for name, h in (("NNN", h_nnn), ("IS", h_is), ("SN", h_sn)):
    ax.scatter(centrality, h - h.mean(), s=5, alpha=0.5, label=name)
ax.set_xlabel(r"centrality $\mu_C^\top t$")
ax.set_ylabel("offset $h_t$ (minus its mean)")
ax.set_title("(b) each method's offset against the image's centrality", fontsize=10)
ax.legend(fontsize=8, markerscale=3)
fig.tight_layout()
run.save_figure(fig, "methods_effect", caption=f"N_{k} and offsets of NNN, IS and SN; {label}. "
                + nb.marks_note(effect["bank"]), data=label, bank=effect["bank"])   # what each method's bank was
plt.show()

# %% [markdown] tags=[]
# **What to notice.** (a) Compare where each histogram ends on the right and how it gathers around the expected
# count. (b) Read each method's offset against centrality: an offset that goes down as centrality goes up takes
# the shared per-image term of §2 out of the scores, learned from the bank alone (without the test queries, unless
# the `bank` column says QUERY-AWARE). The table above has R@1 and the tail statistics; the cell below compares them
# with the raw scores.

# %% tags=[]
e0 = effect.set_index("method").loc[raw_name]
e_all = effect.set_index("method")
meth = ["NNN", "IS", "SN"]
rho_h = {name: stats.spearmanr(h, centrality)[0] for name, h in (("NNN", h_nnn), ("IS", h_is), ("SN", h_sn))}
nb.notice(
    nb.changes({m: (e0["R@1"], e_all.loc[m, "R@1"]) for m in meth}, "R@1") + ".",
    nb.changes({m: (e0[f"max N_{k}"], e_all.loc[m, f"max N_{k}"]) for m in meth}, f"the largest $N_{{{k}}}$",
               up=("raises", "raise"), down=("lowers", "lower"), digits=0) + ";",
    nb.changes({m: (e0[f"skewness N_{k}"], e_all.loc[m, f"skewness N_{k}"]) for m in meth},
               f"the skewness of $N_{{{k}}}$") + ".",
    "Spearman(offset, centrality): " + ", ".join(f"{m} {r:.2f}" for m, r in rho_h.items()) + ".",
    f"The three methods' R@1 lie within {e_all.loc[meth, 'R@1'].max() - e_all.loc[meth, 'R@1'].min():.2f} points "
    f"of each other.",
)

# %% [markdown] tags=[]
# ### 6.6 · Real embeddings beside the synthetic ones
# The same measurements on two small public releases of *real* CLIP embeddings (`real_sources`;
# `hubnorm.data.real`, read from the local cache, never downloaded inside a notebook): 500 COCO val2017 images with
# one caption each (CLIP ViT-B/16) and 100 Flickr8k images with five captions each (CLIP ViT-B/32). Each release is
# split by images; what is measured here is its test half (250 COCO images, 50 Flickr8k images), with the captions
# of its training part as the reference bank. Their galleries differ in size from the synthetic one, so the table
# and the figure put $N_k$ against its expected count $km/n$; with 50 images, a top-10 list already holds a fifth
# of the gallery. By default they stand beside a synthetic run only (a run on real data or on a folder is its own
# real column: the table then has its row alone); from score matrices the centres' cosine is left empty.

# %% tags=[]
reals = pr.load_real_sets(pr.real_sources(real_sources, source), seed=seed, dtype=run.dtype)
sets = {label: (task, caption_to_image, methods)}   # the main data: its task and the methods fitted in §6.4-§6.5
for name, r in reals.items():   # each real set: its test split, the same methods fitted on its training captions
    t, bank_c = r.split("test"), r.split("train").captions
    r_task = hn.build_tasks(t.images, t.captions, t.caption_to_image, caption_bank=bank_c, directions=("t2i",))["t2i"]
    sets[name] = (r_task, t.caption_to_image, {
        raw_name: r_task.fit(hn.Identity()),
        "NNN": r_task.fit(hn.NearestNeighborNormalization(alpha=nnn_alpha, k=min(nnn_k, len(bank_c)))),
        "IS": r_task.fit(hn.InvertedSoftmax(tau=is_tau)),
        "SN": r_task.fit(hn.SinkhornNormalization(tau=sn_tau, n_iter=sn_iter))})
data_rows, method_rows, ratio_of = [], [], {}
for name, (set_task, c2i, fitted) in sets.items():   # §3, §4 and §6.5 on each data set, with the same calls
    sc = dense(set_task)
    n_cap, n_img = sc.shape
    pos = sc[np.arange(n_cap), c2i]
    expected = k * n_cap / n_img
    n_k_data = hn.k_occurrence(sc, k)
    if set_task.kind == "embeddings":   # the two centres: embeddings only
        img, cap = set_task.targets, set_task.queries
        mu_i, mu_c = img.mean(axis=0), cap.mean(axis=0)
        cos_centres, central = mu_i @ mu_c / np.linalg.norm(mu_i) / np.linalg.norm(mu_c), img @ mu_c
    else:   # score matrices: no centres; the centrality is the column mean of the scores (§4)
        cos_centres, central = np.nan, sc.mean(axis=0)
    data_rows.append({
        "data": name, "test images": n_img, "captions": n_cap, "bank captions": set_task.size("query_bank"),
        "cos(mean image, mean caption)": cos_centres,
        "matched - unmatched cosine": pos.mean() - (sc.sum() - pos.sum()) / (sc.size - n_cap),
        f"skewness N_{k}": hn.hubness_stats(n_k_data, k, n_cap)["skewness"],
        f"max N_{k} / expected": n_k_data.max() / expected,
        f"anti-hubs (N_{k} = 0) %": 100.0 * np.mean(n_k_data == 0),
        "Spearman(N_k, centrality)": stats.spearmanr(n_k_data, central)[0]})
    for mname, method in fitted.items():
        normalised = set_task.score(method)
        n_k_m = hn.k_occurrence(normalised, k)
        ratio_of[(name, mname)] = n_k_m / expected
        method_rows.append({"data": name, "method": mname,
                            "R@1": hn.summarize_ranks(hn.positive_ranks(normalised, set_task.positives))["R@1"],
                            f"skewness N_{k}": hn.hubness_stats(n_k_m, k, n_cap)["skewness"],
                            f"max N_{k} / expected": n_k_m.max() / expected, "bank": bank_mark(method, set_task)})
by_data, by_method = pd.DataFrame(data_rows), pd.DataFrame(method_rows)
nb.show(by_data, digits=2, caption="Raw text→image scores, one row per data set")
nb.show(by_method, digits=2, caption=f"{raw_name.capitalize()} and the three methods, per data set")

# %% tags=[]
fig, axes = plt.subplots(1, len(sets), figsize=(4.2 * len(sets), 3.8), squeeze=False, sharex=True, sharey=True)
edges = np.linspace(0, max(v.max() for v in ratio_of.values()) + 1e-9, 30)   # one scale for every data set
for ax, name in zip(axes[0], sets):
    for mname in (raw_name, "NNN", "IS", "SN"):
        ax.hist(ratio_of[(name, mname)], bins=edges, histtype="step", lw=1.5, label=mname)
    ax.set_yscale("log")
    ax.axvline(1.0, color="black", lw=1, ls="--")
    ax.set_xlabel(f"$N_{{{k}}}$ / expected count")
    n_img = int(by_data.set_index("data").loc[name, "test images"])
    ax.set_title(name.replace(", CLIP", "\nCLIP").replace(" (", "\n(") + f" · {n_img} images", fontsize=8)
axes[0][0].set_ylabel("images (log scale)")
fig.legend(*axes[0][0].get_legend_handles_labels(), loc="upper center", ncol=4, fontsize=8, frameon=False,
           bbox_to_anchor=(0.5, 1.02))
fig.tight_layout(rect=(0, 0, 1, 0.93))
run.save_figure(fig, "real_k_occurrence", caption=f"N_{k} / expected count of every test image, raw and after "
                "NNN / IS / SN (text→image), for the main data and each real release. "
                + nb.marks_note(by_method["bank"]), data=list(sets), bank=sorted(set(by_method["bank"])))
plt.show()

# %% [markdown] tags=[]
# **What to notice.** In the first table, compare the real rows with the synthetic one column by column: the
# cosine of the two modality centres, the skewness of $N_k$ and the Spearman correlation with centrality. In the
# figure, compare how far right each raw histogram reaches past the dashed line (the expected count) and where the
# three methods end. The cell below states what this run shows, then the PASS/DIFFERS lines of each real set under
# its name.

# %% tags=[]
bd, bm = by_data.set_index("data"), by_method.set_index(["data", "method"])
nb.notice(*[
    f"**{name}:** raw skewness of $N_{{{k}}}$ {bd.loc[name, f'skewness N_{k}']:.2f}, largest $N_{{{k}}}$ "
    f"{bd.loc[name, f'max N_{k} / expected']:.1f} times the expected count, Spearman($N_{{{k}}}$, centrality) "
    f"{bd.loc[name, 'Spearman(N_k, centrality)']:.2f}; "
    + nb.changes({m: (bm.loc[(name, raw_name), f'skewness N_{k}'], bm.loc[(name, m), f'skewness N_{k}'])
                  for m in ("NNN", "IS", "SN")}, f"the skewness of $N_{{{k}}}$") + "; "
    + nb.changes({m: (bm.loc[(name, raw_name), 'R@1'], bm.loc[(name, m), 'R@1']) for m in ("NNN", "IS", "SN")},
                 "R@1") + "."
    for name in sets])
for name in reals:
    print(f"{name}:")
    rho_r = bd.loc[name, "Spearman(N_k, centrality)"]
    nb.check("t2i: central images are hubs (Spearman(N_k, centrality) > 0.5)", rho_r > 0.5, f"{rho_r:.2f}",
             data=name)
    for m in ("NNN", "IS", "SN"):
        r0, r1, s0, s1 = (bm.loc[(name, mm), c] for c in ("R@1", f"skewness N_{k}") for mm in (raw_name, m))
        nb.check(f"{m} raises R@1 and lowers the skewness of N_{k}", r1 > r0 and s1 < s0,
                 f"R@1 {r0:.2f} -> {r1:.2f}, skewness {s0:.2f} -> {s1:.2f}", data=name)

# %% [markdown] tags=[]
# ## 7 · Key numbers of this run

# %% tags=["nbval-check-output"]
print("toy (i.i.d. Gaussian):", ", ".join(f"d={d}: skewness {stats.skew(toy[d]['n_k'].astype(np.float64)):.2f}"
                                          for d in dims))
skews = [stats.skew(toy[d]["n_k"].astype(np.float64)) for d in dims]
nb.check("toy: the skewness of N_k grows from the lowest to the highest dimension", skews[-1] > skews[0],
         f"{skews[0]:.2f} -> {skews[-1]:.2f}")
rho_hi = stats.spearmanr(toy[dims[-1]]["n_k"], toy[dims[-1]]["to_mean"])[0]
nb.check(f"toy, d={dims[-1]}: points near the data mean are hubs (Spearman < -0.5)", rho_hi < -0.5, f"{rho_hi:.2f}")
print(f"t2i: hub N_{k} = {int(n_k_raw[hub])}, anti-hub N_{k} = {int(n_k_raw[anti])}, "
      f"expected {k * n_queries / n_targets:.2f}")
rho_c = stats.spearmanr(n_k_raw, centrality)[0]
nb.check("t2i: central images are hubs (Spearman(N_k, centrality) > 0.5)", rho_c > 0.5, f"{rho_c:.2f}")
nb.key_numbers(effect)
e = effect.set_index("method")
for name in ("NNN", "IS", "SN"):
    nb.check(f"{name} raises R@1 and lowers the skewness of N_{k}",
             e.loc[name, "R@1"] > e.loc[raw_name, "R@1"]
             and e.loc[name, f"skewness N_{k}"] < e.loc[raw_name, f"skewness N_{k}"],
             f"R@1 {e.loc[raw_name, 'R@1']:.2f} -> {e.loc[name, 'R@1']:.2f}, skewness "
             f"{e.loc[raw_name, f'skewness N_{k}']:.2f} -> {e.loc[name, f'skewness N_{k}']:.2f}")

# %% [markdown] tags=[]
# ## Try this
#
# Change a parameter in the first code cell and run the notebook again (or pass it to papermill with `-p`):
# * `dims = [2, 5, 20, 50]`: where does the skewness start to grow?
# * `k = 1` or `k = 50`: is hubness a property of the neighbourhood size?
# * `nnn_alpha = 2.0`: what happens to the hub — and to the anti-hub?
# * `is_tau = 0.002`: the inverted softmax now listens to one bank caption per image. Watch R@1.
#
# ## Exercises
#
# Each exercise says what kind it is: *predict-run-explain* (write your prediction down first), *derive* (pen and
# paper, then check numerically), *write a function* (code it, then compare with `hubnorm`) or *change the
# method*.
#
# 1. [predict-run-explain] **Is hubness about the sphere or about the mean?** L2-normalise the toy points of §1
#    (so every point has the same norm) and recompute the skewness of $N_{10}$ at $d = 100$. Then put the points
#    in a *cone*, like CLIP's embeddings: first scale them to about unit length, $x/\sqrt d$, then add the same
#    unit vector $u$ to every point, then normalise. Predict both results from §2 before you run them. Finally,
#    add $u$ to the *unscaled* points ($x + u$, then normalise): what is the typical cosine between a point and
#    $u$ now, and why does the scale of the points decide whether the hubs come back? Solution:
#    `solutions/00_hubness_from_scratch.py`, `exercise_1()`.
# 2. [predict-run-explain] **Change $\alpha$ and predict.** For NNN with $k = 16$, predict how the largest $N_1$
#    and R@1 change when $\alpha$ goes 0 → 0.75 → 3. Why can a too-large $\alpha$ create *new* hubs? Solution:
#    `solutions/00_hubness_from_scratch.py`, `exercise_2()`.
# 3. [derive] **The two limits of the inverted softmax.** Starting from
#    $h(t) = -\tau \log \sum_{b} \exp(s(b, t)/\tau)$, show by hand that $|h(t) + \max_b s(b, t)| \le \tau \log |B|$
#    (so $h(t) \to -\max_b s(b, t)$ as $\tau \to 0$) and that
#    $h(t) = -\tau \log |B| - \mathrm{mean}_b\, s(b, t) + O(1/\tau)$ as $\tau \to \infty$. Which other method is
#    IS at large $\tau$? Check both limits numerically with `hubnorm.InvertedSoftmax`, and explain why IS degrades
#    at a very small $\tau$. Solution: `solutions/00_hubness_from_scratch.py`, `exercise_3()`.
# 4. [write a function] **$N_k$ and its skewness, by hand.** Write `k_occurrence(scores, k)` for a
#    (queries × targets) score matrix with `np.argpartition` and `np.bincount`, and `skewness(n_k)` from the formula
#    of §5. Check both against `hubnorm.k_occurrence` and `hubnorm.hubness_stats` on this notebook's `scores`.
#    Solution: `solutions/00_hubness_from_scratch.py`, `exercise_4()`.
#
# Solutions are in `notebooks/solutions/` (one file per notebook; run one with
# `python notebooks/solutions/00_hubness_from_scratch.py`). Try each exercise before you open it.

# %% [markdown] tags=[]
# ## Quiz
#
# Five minutes, no code. The answers, each checked by a computation, are `QUIZ` in
# `solutions/00_hubness_from_scratch.py` (`quiz()` verifies them).
#
# 1. With $m$ queries, $n$ targets and top-$k$ lists, the mean of $N_k$ over the targets is: (a) $k$; (b) $km/n$;
#    (c) $m/n$; (d) it depends on how many hubs there are.
# 2. For independent $x, y \sim \mathcal N(0, I_d)$ with $d = 50$, what is $\mathbb E\,\|x - y\|^2$? (a number)
# 3. In raw text→image retrieval, which images tend to become hubs? (a) those least similar to the mean caption;
#    (b) those most similar to the mean caption $\mu_C$; (c) none in particular, hubs are random.
# 4. The 0-based ranks of the positives of four queries are [0, 3, 1, 0]. Give R@1 (in %), MdR and MnR.
# 5. Which change to one query's scores can never change its ranking? (a) adding a different number to each
#    target; (b) adding the same number to every target; (c) doubling one target's score.
# 6. As $\tau \to 0$ the inverted-softmax offset $h(t)$ tends to: (a) minus the mean bank similarity of $t$;
#    (b) minus the largest bank similarity of $t$; (c) zero.
# 7. The $N_k$ counts of a gallery have skewness 0. Then: (a) no target is a hub in any sense; (b) the counts are
#    spread symmetrically around their mean; (c) every target has $N_k = k$.
