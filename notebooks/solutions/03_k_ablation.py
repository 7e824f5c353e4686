"""Solutions to the exercises of notebook 03 · How much does NNN depend on k (and alpha)?

Each ``exercise_N()`` recomputes its answer with hubnorm on small seeded synthetic data (seconds), asserts the
claim of the answer where it is robust, and returns the numbers; its docstring is the written answer.
``tests/test_exercises.py`` runs every function. ``QUIZ`` holds the answers of the notebook's quiz and ``quiz()``
verifies each by a computation. Run this file to print the answers:

    python notebooks/solutions/03_k_ablation.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import hubnorm as hn


def _tasks(n_train_images: int = 1000, n_test_images: int = 500, seed: int = 0) -> dict:
    """Small synthetic t2i and i2t tasks in float64; the reference banks are the training split."""
    data = hn.load_embeddings("synthetic:flickr30k", seed=seed, n_train_images=n_train_images,
                              n_test_images=n_test_images, n_val_images=0)
    test, train = data.split("test"), data.split("train")
    return hn.build_tasks(test.images.astype(np.float64), test.captions.astype(np.float64), test.caption_to_image,
                          image_bank=train.images.astype(np.float64), caption_bank=train.captions.astype(np.float64))


def exercise_1(ks=(1, 16, 5000), alpha: float = 0.75) -> dict:
    """Change k: predict R@1 for k = 1, 16 and the whole bank (text->image).

    Answer. With k = 1 the bias of an image is alpha times its similarity to the *single* most similar bank
    caption: it already points the right way (hubs are close to many captions, so also to the closest one), and R@1
    rises over the raw scores, but one caption is a noisy estimate — an ordinary image that happens to have one
    near-duplicate caption in the bank is punished like a hub. Averaging over k = 16 captions reduces that noise
    and R@1 rises further. With k = the whole bank NNN becomes distribution normalisation (the mean similarity to
    all bank captions, see notebook 01's exercise 2): when an image's hubness is mostly one pull towards the
    caption centre shared by all captions, the global mean is about as good as the local one; when part of it is
    local to a theme (an image close to many captions of one theme), the top-k mean wins. On this synthetic data
    it wins clearly (checked below: by more than 2 points; seen: about 4), as the NNN paper finds against DN on
    real CLIP embeddings. The paper finds R@1 flat for k from about 16 to 128 on real data and picks k on held-out
    data.
    """
    task = _tasks()["t2i"]
    raw = hn.evaluate(task.fit(hn.Identity()), task)["R@1"]
    r1 = {k: hn.evaluate(task.fit(hn.NearestNeighborNormalization(alpha=alpha, k=k)), task)["R@1"] for k in ks}
    k1, k16, k_all = ks
    assert raw < r1[k1] < r1[k16], (raw, r1)
    assert r1[k16] > r1[k_all] + 2.0, r1   # regression check (threshold set after seeing 8 points; now about 4)
    assert 3.0 <= r1[k16] - r1[k_all] <= 5.0, r1   # regression check: the "seen: about 4" of the answer
    return {"raw": raw, "R@1 by k": r1}


def exercise_2(ks=(16, 32, 64, 128, 256, 512), alpha: float = 0.75, n_boot: int = 500) -> dict:
    """Is "R@1 is flat in k" a claim this data can test for image->text? (the DIFFERS line of notebook 03)

    Answer. Image->text has one query per test image (1000 in notebook 03, 500 here), so one query is 0.1 (0.2)
    R@1 points. Between two values of k a few dozen queries change outcome, and the R@1 range over k is a few
    dozen queries: compare it with the paired bootstrap noise of the difference between two k values (computed
    below). Two things can add up: sampling noise (a fixed "range <= 1 point" threshold is 10 queries in notebook
    03), and a real drift: if the captions' hubness is partly *local* (it follows a caption's nearest images, not
    the bank as a whole), then with a large k the mean covers much of a small bank, NNN approaches DN and loses
    queries it won at k = 16 (the outcome then changes mostly in one direction: compare the queries won and lost,
    returned below). Text->image has five times more queries. To tell noise from drift, compare the range with
    the paired noise, repeat over seeds, or enlarge the bank (bank_fraction = 1.0).
    """
    task = _tasks()["i2t"]
    won = {k: hn.positive_ranks(task.fit(hn.NearestNeighborNormalization(alpha=alpha, k=k)), task.positives,
                                task.queries) == 0 for k in ks}
    r1 = {k: 100.0 * float(w.mean()) for k, w in won.items()}
    changed = {k: int((won[k] != won[ks[0]]).sum()) for k in ks[1:]}
    won_lost = {k: (int((won[k] & ~won[ks[0]]).sum()), int((~won[k] & won[ks[0]]).sum())) for k in ks[1:]}
    rng = np.random.default_rng(0)
    a, b = won[ks[0]], won[ks[-1]]
    diffs = []
    for _ in range(n_boot):
        idx = rng.integers(0, a.size, a.size)
        diffs.append(100.0 * (b[idx].mean() - a[idx].mean()))
    out = {"queries": int(task.n_queries), "one query in R@1 points": 100.0 / task.n_queries, "R@1 by k": r1,
           "R@1 range over k": max(r1.values()) - min(r1.values()),
           f"queries whose outcome differs from k={ks[0]}": changed,
           f"queries won, lost against k={ks[0]}": won_lost,
           f"paired bootstrap sd of R@1(k={ks[-1]}) - R@1(k={ks[0]})": float(np.std(diffs))}
    # regression check: on this data the whole k-range stays within 6 points (threshold set after seeing the
    # numbers: 5.2 on the refitted flickr30k of issue 42, under 5 before; a range near 0 or above 6 means the
    # generator changed)
    assert out["R@1 range over k"] < 6.0, out
    return out


def nnn_offsets(bank_scores: np.ndarray, alphas, k: int) -> dict:
    """NNN offsets of every target for every alpha from one top-k selection (the function of exercise 3):
    ``-alpha * mean of the k largest bank similarities`` of each target (column)."""
    top = np.partition(bank_scores, -k, axis=0)[-k:]     # each column's k largest entries, in any order
    bias = top.mean(axis=0)
    return {a: -a * bias for a in alphas}


def exercise_3(alphas=(0.5, 1.25), k: int = 16) -> dict:
    """One fit per k: NNN's offsets for every alpha from one top-k selection.

    Answer. The offset -alpha * b(t) is linear in alpha, and only b(t), the mean of the k largest bank similarities
    of target t, needs the bank: ``nnn_offsets`` above selects each target's top k once (``np.partition`` along the
    bank axis) and scales the same mean by every alpha. It matches hubnorm's NearestNeighborNormalization exactly
    for each alpha. So the alpha x k grid of notebook 03 needs one top-k pass per value of k (10 in the default
    grid), not one per cell (60): ``hubnorm.grid_search`` does the same for NNN. k changes *which* similarities are
    averaged and needs its own pass; a pass for the largest k also gives every smaller k after sorting its rows.
    """
    task = _tasks()["t2i"]
    bank_scores = task.query_bank @ task.targets.T
    ours = nnn_offsets(bank_scores, alphas, k)
    for a in alphas:
        lib = task.fit(hn.NearestNeighborNormalization(alpha=a, k=k)).offsets
        np.testing.assert_allclose(ours[a], lib, rtol=0, atol=1e-12)
    return {"max |ours - hubnorm| per alpha": {a: float(np.abs(ours[a] - task.fit(
        hn.NearestNeighborNormalization(alpha=a, k=k)).offsets).max()) for a in alphas},
            "top-k passes for a 6 x 10 grid": 10}


#: Answers of the notebook's quiz, keyed by question number; ``quiz()`` checks each by a computation.
QUIZ = {1: "b", 2: "a", 3: "a", 4: 10.0, 5: "b", 6: "a"}


def quiz() -> dict:
    """Verify every answer of ``QUIZ`` by a computation; returns the answers."""
    task = _tasks(n_train_images=200, n_test_images=100)["t2i"]
    s = task.query_bank @ task.targets.T
    # 1: k = 1 subtracts alpha times the single largest bank similarity
    assert np.allclose(task.fit(hn.NearestNeighborNormalization(alpha=0.5, k=1)).offsets, -0.5 * s.max(axis=0))
    assert QUIZ[1] == "b"
    # 2: k = the whole bank ranks like DN with lambda = alpha (offsets equal up to a constant)
    diff = (task.fit(hn.NearestNeighborNormalization(alpha=0.5, k=len(s))).offsets
            - task.fit(hn.DistributionNormalization(lam=0.5)).offsets)
    assert np.ptp(diff) < 1e-12 and QUIZ[2] == "a"
    # 3: the offsets are linear in alpha
    o1 = task.fit(hn.NearestNeighborNormalization(alpha=0.5, k=16)).offsets
    o2 = task.fit(hn.NearestNeighborNormalization(alpha=1.0, k=16)).offsets
    assert np.allclose(o2, 2 * o1) and QUIZ[3] == "a"
    # 4: one query per test image; one point of 1,000 queries is 10 queries
    assert 1000 / 100 == QUIZ[4]
    # 5: the notebook builds the heat map from val_tasks (the held-out split); the k-curve from test_tasks
    src = (Path(__file__).resolve().parents[1] / "03_k_ablation.py").read_text()
    assert 'hn.grid_search("nnn", val_tasks[d]' in src and "heat_directions" in src and QUIZ[5] == "b"
    # 6: far too large an alpha: the most retrieved targets are among the least central (smallest bias)
    m = task.fit(hn.NearestNeighborNormalization(alpha=5.0, k=16))
    n1 = hn.k_occurrence(m, 1, queries=task.queries)
    bias = -m.offsets / 5.0
    assert bias[np.argmax(n1)] < np.median(bias) and QUIZ[6] == "a"
    return dict(QUIZ)


if __name__ == "__main__":
    from hubnorm_companion.notebook import readable

    for fn in (exercise_1, exercise_2, exercise_3):
        print(f"== {fn.__name__}\n{fn.__doc__}\n-> {readable(fn())}\n")
    print("quiz answers (verified):", readable(quiz()))
