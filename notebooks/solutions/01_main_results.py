"""Solutions to the exercises of notebook 01 · Main results (NNN against DN, DualIS and DualDIS).

Each ``exercise_N()`` recomputes its answer with hubnorm on small seeded synthetic data (seconds), asserts the
claim of the answer where it is robust, and returns the numbers; its docstring is the written answer.
``tests/test_exercises.py`` runs every function. ``QUIZ`` holds the answers of the notebook's quiz and ``quiz()``
verifies each by a computation. Run this file to print the answers:

    python notebooks/solutions/01_main_results.py
"""

from __future__ import annotations

import numpy as np

import hubnorm as hn


def _tasks(n_train_images: int = 1000, n_test_images: int = 500, seed: int = 0) -> dict:
    """Small synthetic t2i and i2t tasks in float64; the reference banks are the training split."""
    data = hn.load_embeddings("synthetic:flickr30k", seed=seed, n_train_images=n_train_images,
                              n_test_images=n_test_images, n_val_images=0)
    test, train = data.split("test"), data.split("train")
    return hn.build_tasks(test.images.astype(np.float64), test.captions.astype(np.float64), test.caption_to_image,
                          image_bank=train.images.astype(np.float64), caption_bank=train.captions.astype(np.float64))


def paired_gain_ci(won_a: np.ndarray, won_b: np.ndarray, n_boot: int = 1000, seed: int = 0):
    """95% percentile interval of R@1(b) - R@1(a) when both are evaluated on the same resampled queries
    (``won_*``: one boolean per query, True when its positive is ranked first): the function of exercise 1."""
    rng = np.random.default_rng(seed)
    n = won_a.size
    diffs = np.empty(n_boot)
    for i in range(n_boot):
        idx = rng.integers(0, n, n)
        diffs[i] = 100.0 * (won_b[idx].mean() - won_a[idx].mean())
    lo, hi = np.quantile(diffs, [0.025, 0.975])
    return float(lo), float(hi)


def exercise_1(alpha: float = 0.75, k: int = 16) -> dict:
    """Overlapping confidence intervals: write a paired bootstrap of the gain (``paired_gain_ci`` above).

    Answer. Notebook 01 asks whether NNN's R@1 interval lies entirely above the raw interval. That is a
    conservative test: the two intervals each carry the full sampling noise of *which queries* were drawn, but
    both methods are evaluated on the same queries and agree on almost all of them. The right question is about
    the *paired* difference: resample queries once and compute R@1(NNN) - R@1(raw) on the same resample. Only
    the queries on which the two methods disagree (won by NNN, lost by NNN) move that difference, so its interval
    is much narrower than the marginal ones.

    Image->text has few queries (one per test image, 500 here) and a high R@1: one query is 0.2 points, a gain of
    a few points is a few dozen queries (here NNN wins 33 and loses 6: +5.4), and a marginal R@1 interval has a
    half-width of 1.96 * sqrt(p (1 - p) / m) (binomial), about 3.5 points. So the marginal intervals overlap here
    although NNN wins clearly more queries than it loses, while the paired interval lies above 0; with a smaller
    gain or fewer queries the paired interval, too, may include 0. Text->image has five times more queries. The bootstrap
    half-width matches the binomial formula (checked below), and it shrinks like 1/sqrt(m): four times more
    queries halve it. The paired interval is narrower than the marginal one (checked below) because only the
    queries on which the two methods disagree move the difference.
    """
    tasks = _tasks()
    out = {}
    for d, task in tasks.items():
        raw = hn.positive_ranks(task.fit(hn.Identity()), task.positives, task.queries) == 0
        nnn = hn.positive_ranks(task.fit(hn.NearestNeighborNormalization(alpha=alpha, k=k)), task.positives,
                                task.queries) == 0
        r = raw.astype(np.int64)
        ci_raw = hn.bootstrap_ci(np.where(raw, 0, 1), n_boot=1000, seed=0)
        ci_nnn = hn.bootstrap_ci(np.where(nnn, 0, 1), n_boot=1000, seed=0)
        p = r.mean()
        out[d] = {
            "queries": int(raw.size), "R@1 raw": float(100.0 * p), "R@1 NNN": float(100.0 * nnn.mean()),
            "raw 95% CI": ci_raw, "NNN 95% CI": ci_nnn,
            "marginal CIs separate": bool(ci_nnn[0] > ci_raw[1]),
            "paired 95% CI of the gain": paired_gain_ci(raw, nnn),
            "queries won by NNN": int((nnn & ~raw).sum()), "queries lost by NNN": int((raw & ~nnn).sum()),
            "binomial half-width of raw R@1": float(100 * 1.96 * np.sqrt(p * (1 - p) / raw.size)),
            "bootstrap half-width of raw R@1": (ci_raw[1] - ci_raw[0]) / 2,
        }
    t = out["t2i"]
    assert t["paired 95% CI of the gain"][0] > 0, t
    i = out["i2t"]   # the answer's i2t case: the marginal intervals overlap, the paired one excludes 0
    assert not i["marginal CIs separate"] and i["paired 95% CI of the gain"][0] > 0, i
    # regression check (the answer quotes these numbers of this seed: NNN wins 33, loses 6, gain +5.4)
    assert 25 <= i["queries won by NNN"] <= 40 and i["queries lost by NNN"] <= 10, i
    assert 4.0 <= i["R@1 NNN"] - i["R@1 raw"] <= 7.0, i
    for d in out.values():  # the percentile bootstrap of a proportion agrees with the binomial formula
        assert abs(d["bootstrap half-width of raw R@1"] / d["binomial half-width of raw R@1"] - 1) < 0.3, d
        # the paired interval is narrower than the raw marginal interval
        pw = d["paired 95% CI of the gain"][1] - d["paired 95% CI of the gain"][0]
        assert pw < d["raw 95% CI"][1] - d["raw 95% CI"][0], d
    return out


def exercise_2(lam: float = 0.75) -> dict:
    """DN is NNN with k = the whole bank; when can DN match or beat NNN? (the line "NNN beats DN", which DIFFERS on
    a real set)

    Answer. DN scores (q - lam mu_Q) . (t - lam mu_T) = q.t - lam q.mu_T - lam mu_Q.t + lam^2 mu_Q.mu_T. For one
    query the term -lam q.mu_T is the same for every target and does not change the ranking, and lam^2 mu_Q.mu_T
    is a constant. What is left is the per-target offset -lam mu_Q.t = -lam * mean_b s(b, t): the mean similarity
    of the target to *all* bank queries — exactly NNN's bias with alpha = lam and k = |bank|. So DN and NNN are
    the same family: DN is the "global" end (k = all), NNN with k = 16 the "local" end.

    Which end wins depends on where the hubness comes from. If a target's hubness is one global term (a pull
    towards the centre of the query cloud, shared by every query), the mean over the whole bank measures it with
    the least noise, and DN (or NNN with a large k) does at least as well as NNN with k = 16. If part of the
    hubness is local (a target is a hub for one topic's queries), a top-k mean captures it and a global mean
    averages it away: the NNN paper reports NNN ahead of DN on real CLIP embeddings. So notebook 01's "NNN beats
    DN" line is a finding about the data (the docstring of ``hubnorm.synthetic`` says how the generator makes
    hubs), not about the methods' code. On this synthetic seed NNN with k = 16 is ahead (R@1 about 77 against
    DN's 73; returned below): the generator's hubs are partly local, as its topics make them. Where the line
    DIFFERS in notebook 01 it is a tie on a 50-image real gallery, a question of a few queries.
    """
    task = _tasks()["t2i"]
    dn = task.fit(hn.DistributionNormalization(lam=lam))
    nnn_all = task.fit(hn.NearestNeighborNormalization(alpha=lam, k=len(task.query_bank)))
    diff = dn.offsets - nnn_all.offsets
    assert np.ptp(diff) < 1e-12, np.ptp(diff)   # the offsets differ by one constant: identical rankings
    r1 = {"DN": hn.evaluate(dn, task)["R@1"], "NNN k=|bank|": hn.evaluate(nnn_all, task)["R@1"],
          "NNN k=16": hn.evaluate(task.fit(hn.NearestNeighborNormalization(alpha=lam, k=16)), task)["R@1"],
          "raw": hn.evaluate(task.fit(hn.Identity()), task)["R@1"]}
    assert r1["DN"] == r1["NNN k=|bank|"], r1
    # regression check (the answer quotes these numbers of this seed: NNN k=16 about 77, DN about 73)
    assert 2.0 <= r1["NNN k=16"] - r1["DN"] <= 6.0, r1
    return {"offset difference (a constant)": float(diff.mean()), "spread of the difference": float(np.ptp(diff)),
            "R@1": r1}


def exercise_3(fractions=(0.2, 0.05, 0.01), alpha: float = 0.75, k: int = 16, seed: int = 0) -> dict:
    """A smaller reference bank: how much of NNN's text->image gain survives?

    Answer. NNN's bias of an image is the mean similarity of its k nearest bank captions. A bank of 20% of the
    training captions holds, for every image, enough captions near it that the top-16 mean barely changes when
    the bank shrinks to 5%; at 1% the bank is a few dozen captions, the top-16 mean of an image then includes
    captions that are far from it, and the bias becomes a noisier, flatter estimate: the gain over the raw
    scores shrinks but rarely vanishes while k stays small against the bank. (k is clamped to the bank size.)
    The NNN paper reports the same robustness on real data (Tables A12-A15, notebook 04).
    """
    data = hn.load_embeddings("synthetic:flickr30k", seed=seed, n_train_images=2000, n_test_images=500,
                              n_val_images=0)
    test, train = data.split("test"), data.split("train")
    queries, targets = test.captions.astype(np.float64), test.images.astype(np.float64)
    rng = np.random.default_rng(seed)
    raw = hn.evaluate(hn.Identity().fit(targets), hn.build_tasks(targets, queries, test.caption_to_image,
                                                                    directions=("t2i",))["t2i"])["R@1"]
    out = {"raw R@1": raw}
    for frac in fractions:
        n = max(1, int(round(frac * train.n_images)))
        imgs = np.sort(rng.choice(train.n_images, n, replace=False))
        bank = train.subset_images(imgs).captions.astype(np.float64)
        task = hn.build_tasks(targets, queries, test.caption_to_image, caption_bank=bank, directions=("t2i",))["t2i"]
        r1 = hn.evaluate(task.fit(hn.NearestNeighborNormalization(alpha=alpha, k=min(k, len(bank)))), task)["R@1"]
        out[f"bank {frac:.0%} ({len(bank)} captions)"] = {"R@1": r1, "gain": r1 - raw}
    gains = [v["gain"] for key, v in out.items() if key.startswith("bank")]
    assert gains[0] > 0, out                       # the default bank helps
    return out


#: Answers of the notebook's quiz, keyed by question number; ``quiz()`` checks each by a computation.
QUIZ = {1: "b", 2: "b", 3: "b", 4: "b", 5: "b", 6: "a"}


def quiz() -> dict:
    """Verify every answer of ``QUIZ`` by a computation; returns the answers."""
    rng = np.random.default_rng(0)
    # 1: the best of 20 equally good settings, picked on the data it is scored on, looks better than it is
    m, p, n_settings = 1000, 0.6, 20
    picked_on_test = np.mean([rng.binomial(m, p, n_settings).max() / m for _ in range(200)])
    assert picked_on_test > p + 0.01 and QUIZ[1] == "b", picked_on_test
    # 2, 3: full width of a binomial 95% interval at 80% over 1,000 queries, and with 4x the queries
    width = lambda m: 2 * 100 * 1.96 * np.sqrt(0.8 * 0.2 / m)
    assert {0.5: "a", 5: "b", 15: "c"}[min((0.5, 5, 15), key=lambda w: abs(w - width(1000)))] == QUIZ[2]
    assert {0.25: "a", 0.5: "b", 1.0: "c"}[round(width(4000) / width(1000), 2)] == QUIZ[3]
    # 4: on the same queries the paired interval of the difference is narrower than a marginal interval
    a = rng.random(1000) < 0.8
    b = a.copy()
    flip = rng.choice(1000, 40, replace=False)
    b[flip] = ~b[flip]
    lo, hi = paired_gain_ci(a, b, n_boot=500)
    ci_a = hn.bootstrap_ci(np.where(a, 0, 1), n_boot=500, seed=0)
    assert hi - lo < ci_a[1] - ci_a[0] and QUIZ[4] == "b"
    # 5: DN's offsets equal NNN's with alpha = lambda and k = the whole bank (up to one constant)
    task = _tasks(n_train_images=200, n_test_images=100)["t2i"]
    diff = (task.fit(hn.DistributionNormalization(lam=0.5)).offsets
            - task.fit(hn.NearestNeighborNormalization(alpha=0.5, k=len(task.query_bank))).offsets)
    assert np.ptp(diff) < 1e-12 and QUIZ[5] == "b"
    # 6: text->image: the queries are captions, so the (query) reference bank is training captions
    data = hn.load_embeddings("synthetic:flickr30k", seed=0, n_train_images=50, n_test_images=20, n_val_images=0)
    t = hn.build_tasks(data.split("test").images, data.split("test").captions, data.split("test").caption_to_image,
                       caption_bank=data.split("train").captions, directions=("t2i",))["t2i"]
    assert np.allclose(t.query_bank, data.split("train").captions) and QUIZ[6] == "a"
    return dict(QUIZ)


if __name__ == "__main__":
    from hubnorm_companion.notebook import readable

    for fn in (exercise_1, exercise_2, exercise_3):
        print(f"== {fn.__name__}\n{fn.__doc__}\n-> {readable(fn())}\n")
    print("quiz answers (verified):", readable(quiz()))
