# ---
# jupyter:
#   jupytext:
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

# %% [markdown]
# # 03 · How much does NNN depend on k (and α)?
#
# *Reproduces* **NNN Tables A3 and A4** (COCO R@1 over $k$ at $\alpha = 0.75$, image and text retrieval) and
# shows the full $\alpha \times k$ grid that NNN App. B searches as a heat map.
#
# **What the paper claims.** For in-distribution reference banks with $\alpha = 0.75$, NNN "is not very sensitive
# to the choice of $k$": improvements appear already for $k$ between 1 and 8 and are similar for $k$ from 8 to 128
# (CLIP COCO t2i: 30.45 raw, 35.47 at $k=1$, 37.36 at $k=16$, 37.77 at $k=128$).
#
# **What we compute.** R@1 of NNN on the test split for every $k$ at $\alpha$ = `alpha` (both directions), and
# R@1 on the held-out `val` split over the ($\alpha$, $k$) grid. NNN's bias is linear in $\alpha$, so
# `hubnorm.protocol.nnn_grid` fits the library's normalizer once per $k$ and rescales the offsets per $\alpha$
# (identical to refitting; unit-tested).
#
# > Default source: synthetic embeddings — a **synthetic analog**. The published rows are CLIP on **COCO** whatever
# > `source` is (the paper has no k-ablation for Flickr30k).

# %% tags=["parameters"]
source: str = "synthetic:flickr30k"  # "synthetic:flickr30k", "synthetic:coco", "cache:<dataset>:<model>:<pretrained>" or "local:<folder>"
synthetic_sizes: dict = {"n_train_images": 5000}  # sizes for the synthetic generator only (ignored for real data)
source_kwargs: dict = {}  # extra arguments of the loader (e.g. {"test_fraction": 0.5} for a local: folder)
model: str = "auto"  # published rows of Tables A3/A4: "auto" follows the embeddings, or a published name
directions: list = ["t2i", "i2t"]
seed: int = 0
bank_fraction: float = 0.2
alpha: float = 0.75
ks: list = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
fast: bool = True  # True: coarser alpha grid and a t2i-only heat map
heat_directions = None  # None: ["t2i"] when fast else all directions
flat_from: int = 16  # the claim "R@1 is flat in k beyond flat_from": its R@1 range over k at or above flat_from is at most flat_tol points
flat_tol: float = 1.0

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

import hubnorm as hn
from hubnorm import compare, notebook as nb, protocol as pr, studies

run = nb.setup("03", seed=seed)  # seeds numpy/torch, 2 torch threads, seaborn theme, inline figures

# %%
ds = pr.prepare_dataset(source, seed=seed, dtype=run.dtype, synthetic_sizes=synthetic_sizes, source_kwargs=source_kwargs)
label = pr.run_label(ds)
model = pr.published_model(ds, model)
bank = pr.reference_split(ds, "train", bank_fraction, seed=seed)
test_tasks = pr.make_tasks(ds.split("test"), bank, directions=directions)
val_tasks = pr.make_tasks(ds.split("val"), bank, directions=directions)
alphas = [0.25, 0.5, 0.75, 1.0, 1.25, 1.5] if fast else [0.25 + 0.125 * i for i in range(11)]
heat_directions = heat_directions or (["t2i"] if fast else list(directions))

# %% tags=["nbval-check-output"]
print("this run:", label)
nb.show(pr.describe(ds))
print(f"reference bank: {bank.n_images} images / {bank.n_captions} captions; alpha grid {alphas}; k grid {ks}")

# %% [markdown]
# ## 1 · R@1 over k at α = 0.75 (Tables A3/A4)

# %%
def nnn_table(task, alphas, ks):
    """R@K and MdR of NNN at every (alpha, k): the table of hubnorm.grid_search (one pass for the whole grid)."""
    grid = pr.clamp_grid("nnn", {"alpha": list(alphas), "k": list(ks)}, task)
    return hn.grid_search("nnn", task, grid).table.assign(direction=task.direction)


curve = pd.concat([nnn_table(test_tasks[d], [alpha], ks) for d in directions], ignore_index=True)
raw = {d: hn.evaluate(test_tasks[d].fit(hn.make_normalizer("raw")), test_tasks[d])["R@1"] for d in directions}
wide = curve.pivot(index="direction", columns="k", values="R@1").loc[directions]
wide.insert(0, "Original", [raw[d] for d in directions])
wide = wide.reset_index()
wide.columns = [str(c) for c in wide.columns]
pub = compare.published("nnn-chowdhury2024", ["A3", "A4"], model=model, dataset="coco")
pub_wide = pub.assign(k=pub["setting"].str.extract(r"k=(\d+)")[0].fillna("Original")).pivot(
    index="direction", columns="k", values="value")
pub_wide = pub_wide[["Original"] + sorted([c for c in pub_wide.columns if c != "Original"], key=int)].reset_index()
pub_wide.insert(1, "run", f"published (NNN Tables A3/A4, {model}, COCO)")
wide.insert(1, "run", f"this run: {label}")
tableA3 = pd.concat([pub_wide, wide], ignore_index=True)
k_cols = sorted([c for c in tableA3.columns if str(c).isdigit()], key=int)
tableA3 = tableA3[["direction", "run", "Original"] + k_cols]
run.save_table(tableA3, "nnn_tables_A3_A4_k", caption=f"R@1 (%) of NNN over k at alpha = {alpha}; published rows are "
           f"CLIP on COCO (Tables A3 t2i / A4 i2t); this run = {label}.")

# %% tags=["nbval-check-output"]
nb.show(tableA3)

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
sns.lineplot(data=curve, x="k", y="R@1", hue="direction", marker="o", ax=axes[0])
for i, d in enumerate(directions):
    axes[0].axhline(raw[d], ls="--", lw=1, color=sns.color_palette()[i], label=f"{d} raw")
axes[0].set_xscale("log", base=2)
axes[0].set_xlabel("k (reference queries per target, log scale)")
axes[0].set_ylabel("R@1 (%)")
axes[0].set_title(f"this run (α = {alpha}): {label}", fontsize=9)
axes[0].legend(fontsize=8)
pl = pub[pub["method"] == "nnn"].assign(k=lambda d: d["setting"].str.extract(r"k=(\d+)")[0].astype(int))
sns.lineplot(data=pl, x="k", y="value", hue="direction", marker="o", ax=axes[1])
for i, (d, v) in enumerate(pub[pub["method"] == "raw"].set_index("direction")["value"].items()):
    axes[1].axhline(v, ls="--", lw=1, color=sns.color_palette()[i], label=f"{d} raw")
axes[1].set_xscale("log", base=2)
axes[1].set_xlabel("k (log scale)")
axes[1].set_ylabel("R@1 (%)")
axes[1].set_title(f"published: NNN Tables A3/A4 ({model}, COCO, α = 0.75)", fontsize=9)
axes[1].legend(fontsize=8)
fig.tight_layout()
run.save_figure(fig, "nnn_r1_vs_k", caption=f"R@1 over k at alpha={alpha}: this run ({label}) and the NNN paper (COCO).")
plt.show()

# %% [markdown]
# **What to notice.** R@1 climbs over the first few k and then stays flat: beyond about 16 neighbours the bias
# estimate barely changes, so k is a cheap, forgiving choice. The paper's COCO curve (grey) has the same shape at a
# different height.

# %% [markdown]
# ## 2 · The α × k grid on the held-out split (what App. B searches)

# %%
heat = pd.concat([nnn_table(val_tasks[d], alphas, ks) for d in heat_directions], ignore_index=True)
best = heat.loc[heat.groupby("direction")["R@1"].idxmax(), ["direction", "alpha", "k", "R@1"]]
fig, axes = plt.subplots(1, len(heat_directions), figsize=(6.5 * len(heat_directions), 4.2), squeeze=False)
for ax, d in zip(axes[0], heat_directions):
    grid = heat[heat["direction"] == d].pivot(index="alpha", columns="k", values="R@1")
    sns.heatmap(grid, annot=True, fmt=".1f", cmap="viridis", ax=ax, cbar_kws={"label": "R@1 (%) on val"},
                annot_kws={"fontsize": 7})
    ax.set_xlabel("k")
    ax.set_ylabel("α")
    ax.set_title(f"{d}: R@1 on the held-out split", fontsize=10)
fig.suptitle(f"NNN hyperparameter grid — {label}", fontsize=10)
fig.tight_layout()
run.save_figure(fig, "nnn_alpha_k_heatmap", caption=f"R@1 on val over alpha x k; {label}.")
plt.show()

# %% [markdown]
# **What to notice.** The best cells form a ridge along alpha rather than along k: too large an alpha over-corrects
# (every target's score is pushed down by more than its hubness) and R@1 falls again. This is the grid that
# `hubnorm.grid_search` searches on the held-out split.

# %% tags=["nbval-check-output"]
print("best (alpha, k) on the held-out split:")
nb.show(best)

# %% [markdown]
# ## 3 · Does the run show the paper's finding?

# %% tags=["nbval-check-output"]
for d in directions:
    c = curve[curve["direction"] == d].set_index("k")["R@1"]
    tail = c[c.index >= flat_from]
    nb.check(f"{d}: R@1 is flat in k beyond {flat_from} at alpha {alpha} (range <= {flat_tol} points)",
             tail.max() - tail.min() <= flat_tol, f"range {tail.max() - tail.min():.2f} over k {list(tail.index)}")
    k_small = max([k for k in c.index if k <= 8])
    nb.check(f"{d}: a small k (k={k_small}) already beats the raw scores", c[k_small] > raw[d],
             f"raw {raw[d]:.2f}, k={k_small} {c[k_small]:.2f}")
    nb.check(f"{d}: k in [8, 128] gives similar R@1 (within {flat_tol} point(s) of each other)",
             c[(c.index >= 8) & (c.index <= 128)].max() - c[(c.index >= 8) & (c.index <= 128)].min() <= flat_tol,
             f"range {c[(c.index >= 8) & (c.index <= 128)].max() - c[(c.index >= 8) & (c.index <= 128)].min():.2f}")

# %% [markdown]
# **Why can a DIFFERS line appear here?** A DIFFERS line is a finding about this run (its size, the synthetic
# generator, sampling noise), to be read with the question it raises; the generator is not tuned to make any line
# pass. Here image→text has 1,000 queries: one R@1 point is 10 queries, and a 95% interval is about ±2.5 points at
# 80%.
#
# *"i2t: R@1 is flat in k beyond 16".* Two causes add up. Noise: the 1-point threshold is 10 queries, about as many
# as change outcome between two values of $k$. Drift: the i2t bank holds 1,000 training images, so $k$ = 256 or 512
# is a quarter to a half of it and NNN nears a global mean (DN); caption targets get no pull of their own in the
# generator, so their hubness is local (near many images of one topic), and a mean over half the bank averages it
# away. *Discussion:* is the fall at large $k$ larger than the paired noise of R@1($k$=512) − R@1($k$=16)? Does it
# move with `bank_fraction = 1.0`? (Solution: `solutions/03_k_ablation.py`, `exercise_2()`.)
#
# *"i2t: k in [8, 128] gives similar R@1".* The same two causes over a narrower range: the 1-point band is 10
# queries, and $k$ = 128 is already an eighth of the 1,000-image bank, where the drift towards a global mean can
# begin. Text→image, with 5,000 queries and image targets whose hubness is one global pull, has neither problem.
# *Discussion:* with `flat_tol = 2.0` (Try this) the line may pass; what should a flatness threshold depend on
# (number of queries, R@1 level, bank size) to test NNN rather than the sample?

# %% [markdown]
# **Notes.** The heat map is computed on the held-out split (the selection data of App. B), the k-curve on the
# test split. Saved: `results/tables/03_*`, `results/figures/03_*.png`.

# %% [markdown]
# ## Try this
# * Set `alpha = 0.5` and `alpha = 1.25`: is R@1 still flat in $k$?
# * Set `ks = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000]`: what happens when $k$ reaches the whole bank?
# * Set `flat_tol = 2.0`: which PASS/DIFFERS lines change, and what does that say about the threshold?

# %% [markdown]
# ## Exercises
# 1. **Change k and predict.** Predict text→image R@1 of NNN ($\alpha = 0.75$) for $k = 1$, $k = 16$ and $k$ = the
#    whole bank, relative to the raw scores. Why does $k = 1$ already help, why does averaging help more, and
#    which method is NNN with $k$ = the whole bank? Solution: `solutions/03_k_ablation.py`, `exercise_1()`.
# 2. **Can this data test "flat in k"?** The image→text line "R@1 is flat in k beyond 16" can say DIFFERS.
#    Count how many queries one R@1 point is, how many queries change outcome between two values of $k$ (and in
#    which direction), and the paired bootstrap noise of the difference. Is the threshold testing NNN, the
#    sample size, or a real drift towards DN at large $k$? Solution: `solutions/03_k_ablation.py`, `exercise_2()`.

# %%
print(f"notebook compute time: {run.elapsed():.0f} s")
