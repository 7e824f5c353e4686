"""Solutions to the exercises of notebook 04 · How large must the reference (query) bank be?

Each ``exercise_N()`` recomputes its answer with hubnorm on small seeded synthetic data (seconds), asserts the
claim of the answer where it is robust, and returns the numbers; its docstring is the written answer.
``tests/test_exercises.py`` runs every function. ``QUIZ`` holds the answers of the notebook's quiz and ``quiz()``
verifies each by a computation. Run this file to print the answers:

    python notebooks/solutions/04_query_bank_size.py
"""

from __future__ import annotations

import numpy as np

import hubnorm as hn


def _t2i(n_train_images: int = 1000, n_test_images: int = 500, seed: int = 0) -> hn.RetrievalTask:
    """A small synthetic text->image task in float64; the banks are the training captions and images."""
    data = hn.load_embeddings("synthetic:flickr30k", seed=seed, n_train_images=n_train_images,
                              n_test_images=n_test_images, n_val_images=0)
    test, train = data.split("test"), data.split("train")
    return hn.build_tasks(test.images.astype(np.float64), test.captions.astype(np.float64), test.caption_to_image,
                          image_bank=train.images.astype(np.float64), caption_bank=train.captions.astype(np.float64),
                          directions=("t2i",))["t2i"]


def _subsample(task: hn.RetrievalTask, size: int, seed: int) -> hn.RetrievalTask:
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(len(task.query_bank), size, replace=False))
    return task.with_banks(query_bank=task.query_bank[idx], target_bank=task.target_bank)


def exercise_1(sizes=(5000, 1000, 250, 64, 16, 4, 1), alpha: float = 0.75, k: int = 16) -> dict:
    """Shrink the bank until NNN stops helping.

    Answer. NNN keeps most of its gain down to a few dozen bank captions (k = min(16, bank size)) and stops
    helping only with a handful. The bias it needs is each image's pull towards the caption cloud; as far as that
    pull is shared by all captions, a few dozen random captions already reveal it (on real CLIP embeddings the
    NNN paper, too, finds the gain barely changes between 100% and 10% of the bank, Tables A12-A15).
    With very few captions the bias becomes alpha times the similarity to *those* captions: images that happen
    to resemble one of them are pushed down although they are no hubs, and with a single caption R@1 falls far
    below the raw scores. Rule of thumb: the bank must be large enough that every target's top-k bank neighbours
    are typical of the query distribution, not a few idiosyncratic sentences.
    """
    task = _t2i()
    raw = hn.evaluate(task.fit(hn.Identity()), task)["R@1"]
    r1 = {}
    for size in sizes:
        t = _subsample(task, size, seed=0)
        r1[size] = hn.evaluate(t.fit(hn.NearestNeighborNormalization(alpha=alpha, k=min(k, size))), t)["R@1"]
    helping = [s for s in sizes if r1[s] > raw]
    assert r1[sizes[0]] > raw + 2 and r1[64] > raw + 2, (raw, r1)   # large and medium banks help clearly
    assert r1[sizes[-1]] < raw, (raw, r1)                            # a one-caption bank hurts
    return {"raw": raw, "R@1 by bank size": r1, "smallest bank that still helps": min(helping)}


def exercise_2(sizes=(5000, 64), seeds=(0, 1, 2)) -> dict:
    """Why does the inverted softmax beat Sinkhorn (and DBSN) with a tiny query bank?

    Answer. Sinkhorn asks for a transport plan in which each of the m bank queries sends out mass 1/m and each
    of the n targets receives 1/n. With m much smaller than n (64 captions for 500 images) each caption must
    spread its mass over about n/m images, including images that no bank caption resembles: the column
    potentials g_j of those images grow to pull mass in, so the offsets are driven by *which* few captions were
    drawn, not by the images' hubness, and R@1 falls below IS's (about 73 against 75 here, still above the
    raw 70). IS has only the column
    normalisation — each target is normalised by its own softmax over the bank — so a small bank makes its
    estimate noisier but never forces mass onto targets. With a bank much larger than the gallery both
    constraints can be met without distortion and SN overtakes IS (checked below on this data; DBSN Fig. 7: the
    order reverses only for banks larger than the test query set). DBSN adds a target bank to the columns, which
    does not help when the *query* side is too small.
    """
    task = _t2i()
    out = {}
    for size in sizes:
        rows = {"IS": [], "SN": [], "DBSN": []}
        for seed in seeds:
            t = _subsample(task, size, seed)
            rows["IS"].append(hn.evaluate(t.fit(hn.InvertedSoftmax(tau=0.02)), t)["R@1"])
            rows["SN"].append(hn.evaluate(t.fit(hn.SinkhornNormalization(tau=0.01)), t)["R@1"])
            rows["DBSN"].append(hn.evaluate(t.fit(hn.DualBankSinkhornNormalization(tau=0.01)), t)["R@1"])
            if size == sizes[0]:
                break   # the full bank: every draw is the same bank
        out[size] = {m: float(np.mean(v)) for m, v in rows.items()}
    big, small = sizes
    assert out[small]["IS"] > out[small]["SN"] + 1 and out[small]["IS"] > out[small]["DBSN"] + 1, out
    assert out[big]["SN"] > out[big]["IS"], out   # regression check (seen: SN 78.4, IS 77.3 with the full bank)
    # regression check: the numbers the answer quotes for the small bank (SN/DBSN about 73, IS about 75, raw 70)
    assert 1.0 <= out[small]["IS"] - out[small]["SN"] <= 3.5, out
    return {"R@1 (mean over bank draws)": out, "raw": hn.evaluate(task.fit(hn.Identity()), task)["R@1"]}


def exercise_3(bank_size: int = 500, seed: int = 0) -> dict:
    """A check that cannot fail: the nearest-neighbour gap of a growing target set, and a measure that can tell.

    Answer. gap(A -> B) = 1 - mean_a max_{b in B} cos(a, b). For every a, the maximum over a larger set B u C is
    at least the maximum over B (the maximum of a superset is never smaller), so the mean of the maxima can only
    grow and gap(A -> B u C) <= gap(A -> B), whatever B and C hold. The line "DBSN narrows the bank -> targets gap
    at every bank size" compares exactly these two quantities (the bank against the test gallery for IS/SN,
    against the gallery plus the training images for DBSN): it is true by construction and says nothing about
    Proposition 2; read it as a check of the code. A measure that can tell "more targets" from "better matched
    targets" compares sets of the same role: the gap from the bank to the target bank alone against the gap
    from the bank to the test gallery alone (is the target bank closer to the query bank than the gallery is?),
    or a first-moment distance between the bank and each set (``hubnorm.geometry.centroid_distance``). Either can
    come out either way (computed below; on data whose training and test splits are drawn alike, the two are
    close).
    """
    from hubnorm.geometry import centroid_distance, nn_gap

    rng = np.random.default_rng(seed)
    for _ in range(20):   # the inequality on random sets
        a, b, c = (rng.standard_normal((n, 8)) for n in (15, 10, 5))
        assert nn_gap(a, np.concatenate([b, c])) <= nn_gap(a, b) + 1e-12
    task = _t2i()
    bank = _subsample(task, bank_size, seed).query_bank
    gallery, target_bank = task.targets, task.target_bank
    out = {"gap bank -> gallery": nn_gap(bank, gallery),
           "gap bank -> gallery + target bank": nn_gap(bank, np.concatenate([gallery, target_bank])),
           "gap bank -> target bank": nn_gap(bank, target_bank),
           "centroid distance bank - gallery": centroid_distance(bank, gallery),
           "centroid distance bank - target bank": centroid_distance(bank, target_bank)}
    assert out["gap bank -> gallery + target bank"] <= min(out["gap bank -> gallery"], out["gap bank -> target bank"])
    return out


#: Answers of the notebook's quiz, keyed by question number; ``quiz()`` checks each by a computation.
QUIZ = {1: 18125, 2: "b", 3: "b", 4: "b", 5: "a", 6: "a"}


def quiz() -> dict:
    """Verify every answer of ``QUIZ`` by a computation; returns the answers."""
    from hubnorm_companion import protocol as pr
    from hubnorm.geometry import nn_gap
    from hubnorm.normalizers.sinkhorn import sinkhorn_potentials
    import torch

    assert 145_000 // 8 == QUIZ[1]
    # 2: after the row update every bank query sends out exactly 1/m
    rng = np.random.default_rng(0)
    bank, targets = rng.standard_normal((30, 8)), rng.standard_normal((20, 8))
    bank /= np.linalg.norm(bank, axis=1, keepdims=True)
    targets /= np.linalg.norm(targets, axis=1, keepdims=True)
    tau = 0.05
    g = hn.SinkhornNormalization(tau=tau, n_iter=20).fit(targets, query_bank=bank).offsets
    s = bank @ targets.T
    from scipy.special import logsumexp
    f = tau * np.log(1 / 30) - tau * logsumexp((s + g[None, :]) / tau, axis=1)
    rows = np.exp((s + f[:, None] + g[None, :]) / tau).sum(axis=1)
    assert np.allclose(rows, 1 / 30) and QUIZ[2] == "b"
    # 3: DBSN = SN over the gallery with the target bank appended as extra columns (its first n potentials)
    task = _t2i(n_train_images=60, n_test_images=40)
    dbsn = task.fit(hn.DualBankSinkhornNormalization(tau=0.05, n_iter=5)).offsets
    ext = np.concatenate([task.targets, task.target_bank])
    _, g_ext, _ = sinkhorn_potentials(torch.from_numpy(task.query_bank), torch.from_numpy(ext), 0.05, n_iter=5)
    assert np.allclose(dbsn - dbsn.mean(), (g_ext.numpy()[:40] - g_ext.numpy()[:40].mean()), atol=1e-8) and QUIZ[3] == "b"
    # 4: k is clamped to the bank size, with a note
    tiny = _subsample(task, 4, 0)
    assert pr.clamp_params("nnn", {"alpha": 0.75, "k": 16}, tiny)["k"] == 4 and QUIZ[4] == "b"
    # 5: a superset can only shrink the nearest-neighbour gap
    a, b, c = rng.standard_normal((3, 12, 8))
    assert nn_gap(a, np.concatenate([b, c])) <= nn_gap(a, b) and QUIZ[5] == "a"
    # 6: different draws of a small bank give different R@1; a fit on the same draw is deterministic
    r = [hn.evaluate(t.fit(hn.InvertedSoftmax(tau=0.02)), t)["R@1"] for t in (_subsample(task, 16, 0),
                                                                            _subsample(task, 16, 1),
                                                                            _subsample(task, 16, 0))]
    assert r[0] == r[2] and r[0] != r[1] and QUIZ[6] == "a", r
    return dict(QUIZ)


if __name__ == "__main__":
    from hubnorm_companion.notebook import readable

    for fn in (exercise_1, exercise_2, exercise_3):
        print(f"== {fn.__name__}\n{fn.__doc__}\n-> {readable(fn())}\n")
    print("quiz answers (verified):", readable(quiz()))
