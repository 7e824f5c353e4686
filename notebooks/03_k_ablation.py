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
# R@1 on the held-out `val` split over the ($\alpha$, $k$) grid, both with `hubnorm.grid_search`. NNN's bias is
# linear in $\alpha$, so the search takes every ($\alpha$, $k$) from one top-$k$ selection of the bank scores
# (identical to refitting each point; unit-tested).
#
# > Default source: synthetic embeddings — a **synthetic analog**. The published rows are CLIP on **COCO** whatever
# > `source` is (the paper has no k-ablation for Flickr30k).

# %% tags=["parameters"]
source: str = "synthetic:flickr30k"  # "synthetic:flickr30k", "synthetic:coco", "cache:<dataset>:<model>:<pretrained>", "local:<folder>" or "sims:<folder>" (score matrices: what they give, then a NOTE)
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
from hubnorm.experiments import compare, notebook as nb, protocol as pr, studies

run = nb.setup("03", seed=seed, params=globals())  # seeds numpy/torch, 2 torch threads, seaborn theme, inline figures

# %% [markdown]
# **Released score matrices.** With `source = "sims:<folder>"` (score matrices only, `hubnorm.data.sims`) the next
# cell shows what this notebook can compute from scores, says in a NOTE what needs embeddings, and skips the
# remaining cells (`hubnorm.experiments.score_studies`).

# %%
from hubnorm.experiments import score_studies

if score_studies.is_sims(source):
    sims_tables = score_studies.run_notebook("03", source, run, globals())

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
# R@K and MdR of NNN at every k (alpha fixed): hubnorm.grid_search's table (one top-k pass for the whole grid)
curve = pd.concat([hn.grid_search("nnn", test_tasks[d], pr.clamp_grid("nnn", {"alpha": [alpha], "k": ks},
                                                                      test_tasks[d])).table.assign(direction=d)
                   for d in directions], ignore_index=True)
raw = {d: hn.evaluate(test_tasks[d].fit(hn.make_normalizer("raw")), test_tasks[d])["R@1"] for d in directions}
ours = pd.concat([pd.DataFrame({"direction": directions, "R@1": [raw[d] for d in directions]}),   # raw: no k
                  curve[["direction", "k", "R@1"]]], ignore_index=True)
joined = compare.beside_published(ours, "nnn-chowdhury2024", ["A3", "A4"], on=["direction", "k"],
                                  setting_keys={"k": r"\bk=(\d+)"}, method=["raw", "nnn"], model=model,
                                  dataset="coco", label=label, source_note=f"NNN Tables A3/A4, {model}, COCO")
tableA3 = compare.wide_by(joined, "k", missing="Original")   # one column per k, the raw scores first
published_as = pr.published_label("nnn", model, "coco", joined[joined["published"].notna()])  # a NOTE when none
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
pub = joined[joined["published"].notna()]   # the paper's numbers, k read from their setting (raw: no k)
pl = pub[pub["k"].notna()].astype({"k": int})
if len(pl):
    sns.lineplot(data=pl, x="k", y="published", hue="direction", marker="o", ax=axes[1],
                 hue_order=[d for d in directions if d in set(pl["direction"])])
    for d, v in pub[pub["k"].isna()].set_index("direction")["published"].items():
        axes[1].axhline(v, ls="--", lw=1, color=sns.color_palette()[directions.index(d)], label=f"{d} raw")
    axes[1].set_xscale("log", base=2)
    axes[1].set_title(f"published: NNN Tables A3/A4 ({model}, COCO, α = 0.75)", fontsize=9)
else:
    axes[1].text(0.5, 0.5, f"no published rows:\n{published_as}", ha="center", va="center", wrap=True,
                 transform=axes[1].transAxes, fontsize=9)
    axes[1].set_title("published: NNN Tables A3/A4 (COCO)", fontsize=9)
axes[1].set_xlabel("k (log scale)")
axes[1].set_ylabel("R@1 (%)")
for ax, kk in ((axes[0], sorted(curve["k"].unique())), (axes[1], sorted(pl["k"].unique()))):
    if len(kk):
        ax.set_xticks(kk, [str(x) for x in kk])
        ax.minorticks_off()
    if ax.get_legend() is not None:
        ax.get_legend().remove()
handles, names = axes[0].get_legend_handles_labels()
fig.legend(handles, [f"{n} NNN" if n in directions else n for n in names], loc="upper center", ncol=4, fontsize=8,
           bbox_to_anchor=(0.5, 1.06), frameon=False)
fig.tight_layout()
run.save_figure(fig, "nnn_r1_vs_k", caption=f"R@1 over k at alpha={alpha}: this run ({label}) and the NNN paper (COCO).")
plt.show()

# %% [markdown]
# **What to notice.** Follow each curve from $k = 1$ to the right and compare it with its dashed raw line; then
# compare the shape of the left panel (this run) with the right one (the paper's COCO numbers: the paper reports
# R@1 rising up to about $k = 8$ and changing little from $k = 8$ to $k = 128$).

# %%
sentences = []
for d in directions:
    c = curve[curve["direction"] == d].set_index("k")["R@1"]
    tail = c[c.index >= flat_from]
    k_best = int(c.idxmax())
    head = (f"**{d}:** at $k$ = {int(c.index.min())} NNN {nb.change(raw[d], c.iloc[0], 'R@1')}; the best $k$ is "
            f"{k_best} (R@1 {c.max():.2f})")
    if len(tail) < 2:   # a small bank limits k (the grid is clamped): nothing to compare beyond flat_from
        sentences.append(head + f"; fewer than two values of $k$ reach {flat_from} on this bank.")
        continue
    k0, k1 = int(tail.index[0]), int(tail.index[-1])
    sentences.append(
        head + f"; from $k$ = {k0} to $k$ = {k1} R@1 spans {tail.min():.2f} to {tail.max():.2f} (range "
        f"{tail.max() - tail.min():.2f} points), and at $k$ = {k1} it is {tail.iloc[-1]:.2f}, "
        f"{nb.order_word(tail.iloc[-1], tail.iloc[0], ('above', 'below', 'equal to'))} its value at $k$ = {k0}.")
nb.notice(*sentences)

# %% [markdown]
# ## 2 · The α × k grid on the held-out split (what App. B searches)

# %%
# select: R@1 on the held-out split over the whole (alpha, k) grid, as hubnorm.grid_search searches it
heat = pd.concat([hn.grid_search("nnn", val_tasks[d], pr.clamp_grid("nnn", {"alpha": alphas, "k": ks}, val_tasks[d]))
                  .table.assign(direction=d) for d in heat_directions], ignore_index=True)
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
# **What to notice.** Find the brightest cells: do they form a band along the $k$ axis (a row: $\alpha$ matters, $k$
# does not) or along the $\alpha$ axis (a column)? Then read the bottom rows: an over-correcting $\alpha$ subtracts
# from every target a bias beyond its hubness. This is the grid that `hubnorm.grid_search` searches on the held-out
# split.

# %%
sentences = []
for d in heat_directions:
    grid = heat[heat["direction"] == d].pivot(index="alpha", columns="k", values="R@1")
    a_best, k_best = grid.stack().idxmax()
    near = (grid >= grid.values.max() - 0.5).to_numpy()              # the ridge: cells within 0.5 point of the best
    share_a, share_k = near.any(axis=1).mean(), near.any(axis=0).mean()
    runs = nb.order_word(share_k, share_a, ("along $k$ (a row)", "along $\\alpha$ (a column)", "along neither axis"))
    sentences.append(
        f"**{d}:** the best cell is $\\alpha$ = {a_best:g}, $k$ = {int(k_best)} (R@1 {grid.values.max():.2f} on val). "
        f"The {int(near.sum())} cells within 0.5 point of it cover {int(near.any(axis=1).sum())} of {near.shape[0]} "
        f"values of $\\alpha$ and {int(near.any(axis=0).sum())} of {near.shape[1]} values of $k$: this ridge runs "
        f"{runs}. At the largest $\\alpha$ ({grid.index.max():g}) the best R@1 is "
        f"{grid.loc[grid.index.max()].max():.2f}, "
        f"{nb.order_word(grid.loc[grid.index.max()].max(), grid.values.max(), ('above', 'below', 'equal to'))} "
        f"the best cell.")
nb.notice(*sentences)

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
# **Notes.** The heat map is computed on the held-out split (the selection data of App. B), the k-curve on the
# test split. Saved: `results/tables/03_*`, `results/figures/03_*.png`.

# %% [markdown]
# ## Try this
# * Set `alpha = 0.5` and `alpha = 1.25`: is R@1 still flat in $k$?
# * Set `ks = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000]`: what happens when $k$ reaches the whole bank?
# * Set `flat_tol = 2.0`: which PASS/DIFFERS lines change, and what does that say about the threshold?

# %% [markdown]
# ## Exercises
# 1. [predict-run-explain] **Change k and predict.** Predict text→image R@1 of NNN ($\alpha = 0.75$) for $k = 1$,
#    $k = 16$ and $k$ = the whole bank, relative to the raw scores. Why does $k = 1$ already help, why does
#    averaging help more, and which method is NNN with $k$ = the whole bank? Solution: `solutions/03_k_ablation.py`,
#    `exercise_1()`.
# 2. [predict-run-explain] **Can this data test "flat in k"?** For image→text, count how many queries one R@1
#    point is, how many queries change outcome between $k = 16$ and the largest $k$ (and in which direction), and
#    the paired bootstrap noise of the difference. Is a fixed "range ≤ 1 point" threshold testing NNN, the sample
#    size, or a real drift towards DN at large $k$? Solution: `solutions/03_k_ablation.py`, `exercise_2()`.
# 3. [write a function] **One fit per k.** NNN's offset is $-\alpha$ times the mean of a target's $k$ largest bank
#    similarities. Write `nnn_offsets(bank_scores, alphas, k)` that computes the offsets for *every* $\alpha$ from one
#    top-$k$ selection (`np.partition`), check it against `hubnorm.NearestNeighborNormalization` for two values of
#    $\alpha$, and say how many top-$k$ passes the $\alpha \times k$ grid of this notebook needs. Solution:
#    `solutions/03_k_ablation.py`, `exercise_3()`.

# %% [markdown]
# ## Quiz
# Answers, each checked by a computation: `QUIZ` in `solutions/03_k_ablation.py` (`quiz()` verifies them).
#
# 1. NNN with $k = 1$ subtracts from a target $\alpha$ times: (a) its mean similarity to the bank; (b) its
#    similarity to its single most similar bank query; (c) its similarity to the mean query.
# 2. NNN with $k$ = the whole bank ranks like: (a) DN with $\lambda = \alpha$; (b) the raw scores; (c) IS.
# 3. Doubling $\alpha$ doubles: (a) every target's NNN offset; (b) R@1; (c) the number of hubs.
# 4. Image→text with 1,000 test images: how many queries is one R@1 point? (a number)
# 5. The $\alpha \times k$ heat map is computed on: (a) the test split; (b) the held-out validation split;
#    (c) the training split.
# 6. At an $\alpha$ far above its best value, NNN: (a) turns the least central targets into new hubs;
#    (b) changes nothing; (c) always returns the raw ranking.

# %% [markdown]
# ## Appendix · The DIFFERS lines of this run (read after the exercises)
# The status of every line, as this run computed it, and the noise yardstick of each direction:

# %%
nb.check_summary()
for d in directions:
    print(f"{d}: {nb.recall_noise(test_tasks[d].n_queries, raw[d])}; the reference bank holds "
          f"{len(test_tasks[d].query_bank)} queries, so the largest k ({max(ks)}) is "
          f"{100 * min(max(ks), len(test_tasks[d].query_bank)) / len(test_tasks[d].query_bank):.0f}% of it")

# %% [markdown]
# **Why can a DIFFERS line appear here?** Each paragraph below discusses one claim; read those whose line says
# DIFFERS in the list above (the status is computed from the run, the discussion is not). A DIFFERS line is a
# finding about this run (its size, the data, sampling noise), to be read with the question it raises; the
# synthetic generator is not tuned to make any line pass.
#
# *"R@1 is flat in k beyond 16"* and *"k in [8, 128] gives similar R@1".* Two causes can add up. Noise: the
# threshold `flat_tol` is a fixed number of points, and the yardstick above says how many queries that is; when
# it is a handful of queries, the outcome of that many queries can change between two values of $k$ by chance.
# Drift: when the largest $k$ is a large share of the reference bank (printed above), NNN's top-$k$ mean nears the
# global mean of DN, and hubness that is local to a topic (a target close to many queries of one topic) is averaged
# away. *Discussion:* is the change at large $k$ larger than the paired noise of R@1($k$ = largest) − R@1($k$ = 16)
# (exercise 2)? Does it move with `bank_fraction = 1.0`? What should a flatness threshold depend on (number of
# queries, R@1 level, bank size) to test NNN rather than the sample?
#
# *"a small k already beats the raw scores".* With $k \le 8$ the bias of a target rests on a few bank queries; if
# this line says DIFFERS, compare the curve with the raw line at every $k$: is there a gain to find at all on this
# data (the heat map's best cell), or only at larger $k$?

# %%
print(f"notebook compute time: {run.elapsed():.0f} s")
