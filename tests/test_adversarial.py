"""Planted hubs (hubnorm.adversarial): the budget holds, a planted hub captures queries raw, and the bank-only
detector finds it (seeded)."""

import numpy as np
import pytest

import hubnorm as hn
from hubnorm import adversarial as adv


@pytest.fixture(scope="module")
def data():
    ds = hn.load_embeddings("synthetic:flickr30k", seed=11, n_train_images=200, n_test_images=100, n_val_images=100)
    te, tr, va = ds.split("test"), ds.split("train"), ds.split("val")
    f = np.float64
    task = hn.build_tasks(te.images.astype(f), te.captions.astype(f), te.caption_to_image,
                          image_bank=tr.images.astype(f), caption_bank=tr.captions.astype(f), directions=("t2i",))["t2i"]
    return task, va.captions.astype(f)


@pytest.mark.parametrize("method", ["mean", "gradient"])
@pytest.mark.parametrize("budget", [0.1, 0.5])
def test_budget_and_unit_norm(data, method, budget):
    task, attacker = data
    p = adv.plant_hubs(task.targets, attacker, 3, budget=budget, method=method, seed=0, steps=10)
    assert np.allclose(np.linalg.norm(p.items, axis=1), 1.0)
    assert np.all(p.distance <= budget + 1e-9)  # the budget holds up to rounding
    assert np.allclose(np.linalg.norm(p.items - task.targets[p.origins], axis=1), p.distance, atol=1e-7)
    again = adv.plant_hubs(task.targets, attacker, 3, budget=budget, method=method, seed=0, steps=10)
    assert np.array_equal(p.items, again.items)  # seeded


def test_gradient_never_worse_than_its_start_on_the_surrogate(data):
    task, attacker = data
    start = adv.plant_hubs(task.targets, attacker, 2, budget=0.3, method="mean", seed=1)
    grad = adv.plant_hubs(task.targets, attacker, 2, budget=0.3, method="gradient", seed=1, steps=20)
    import torch
    a, t = torch.as_tensor(attacker), torch.as_tensor(task.targets)
    r_k = (a @ t.T).topk(10, dim=1).values[:, -1]
    sur = lambda x: torch.sigmoid((torch.as_tensor(x) @ a.T - r_k) / 0.01).sum(dim=1)
    assert torch.all(sur(grad.items) >= sur(start.items) - 1e-9)


def test_a_planted_hub_captures_queries_and_is_detected(data):
    task, attacker = data
    planted = adv.plant_hubs(task.targets, attacker, 1, budget=0.5, method="gradient", seed=3)
    rep = adv.planted_hub_report(task, planted, {"IS": hn.InvertedSoftmax(tau=0.02)}).set_index("method")
    # raw retrieval: the planted item is the top-1 of most test queries; IS (fitted on the bank) neutralises it
    assert rep.loc["raw", "captured@1 %"] > 50 and rep.loc["raw", "damage"] > 20
    assert rep.loc["IS", "captured@1 %"] < rep.loc["raw", "captured@1 %"] / 5
    att = adv.attacked_task(task, planted)
    for stat in ("bias", "n_k"):
        found = adv.detect_hubs(att.targets, att.query_bank, statistic=stat)
        assert task.n_targets in set(found["flagged"].tolist()), stat       # the planted item is flagged
        assert found["flagged"][0] == task.n_targets, stat                   # and ranked first
    sc = adv.detection_scores(adv.detect_hubs(att.targets, att.query_bank)["flagged"], [task.n_targets])
    assert sc["recall"] == 1.0 and 0 < sc["precision"] <= 1


def test_clean_gallery_detector_and_scores():
    assert adv.detection_scores([], []) == {"flagged": 0, "true positives": 0, "precision": 1.0, "recall": 1.0}
    assert adv.detection_scores([1, 2], [2, 3])["precision"] == 0.5
    z = adv.robust_z(np.array([1.0, 2.0, 3.0, 4.0, 100.0]))
    assert z[-1] > adv.Z_THRESHOLD and np.all(adv.robust_z(np.ones(4)) == 0)
    # MAD = 0 (most values equal, as N_k over a small bank): the MeanAD fallback still flags the outlier
    z = adv.robust_z(np.array([0.0] * 20 + [1.0, 40.0]))
    assert z[-1] > adv.Z_THRESHOLD and np.all(z[:20] < 0.1)


def test_bad_inputs(data):
    task, attacker = data
    with pytest.raises(ValueError, match="budget"):
        adv.plant_hubs(task.targets, attacker, 1, budget=3.0)
    with pytest.raises(ValueError, match="method"):
        adv.plant_hubs(task.targets, attacker, 1, method="magic")
    with pytest.raises(ValueError, match="n_hubs"):
        adv.plant_hubs(task.targets, attacker, task.n_targets + 1)
    with pytest.raises(ValueError, match="statistic"):
        adv.detect_hubs(task.targets, task.query_bank, statistic="x")
    with pytest.raises(TypeError, match="PlantedHubs"):
        adv.attacked_task(task, object())


def test_detect_hubs_refuses_duplicates_and_a_nan_threshold():
    """Issue 44: a gallery whose items are mostly one duplicated row made the bias statistic's MAD zero, and the
    fallback flagged every other item as a planted hub; a NaN threshold flagged nothing without a word."""
    rng = np.random.default_rng(0)
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)   # noqa: E731
    gallery = unit(rng.standard_normal((40, 8)))
    gallery[:25] = gallery[0]                     # 25 of 40 items are one image, saved 25 times
    bank = unit(rng.standard_normal((200, 8)))
    with pytest.raises(ValueError, match="25 of 40 values of the statistic are identical"):
        adv.detect_hubs(gallery, bank, statistic="bias", k=8)
    adv.detect_hubs(gallery, bank, statistic="n_k", k=5)       # a count: the fallback is the documented rule
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="threshold"):
            adv.detect_hubs(unit(rng.standard_normal((40, 8))), bank, threshold=bad)


# ---------------------------------------------------------------- what mutation testing found unchecked (issue 50)
def test_robust_z_by_hand_with_its_constants():
    x = np.array([1.0, 2.0, 3.0, 4.0, 100.0])                  # median 3, MAD 1
    assert adv.robust_z(x).tolist() == pytest.approx((0.6745 * (x - 3.0)).tolist(), abs=1e-15)
    x = np.array([2.0, 2.0, 2.0, 2.0, 7.0, 12.0])               # MAD 0: the mean absolute deviation, 15 / 6
    assert adv.robust_z(x).tolist() == pytest.approx(((x - 2.0) / (1.253314 * 2.5)).tolist(), abs=1e-15)
    assert adv.robust_z([4, 4, 4]).tolist() == [0.0, 0.0, 0.0]
    assert adv.robust_z(np.array([1, 2, 3], np.int64)).dtype == np.float64
    with pytest.raises(ValueError, match=r"^4 of 6 values of the statistic are identical \(duplicate gallery items\?\): "
                                         r"the robust z-score is undefined, and any item that differs would look like "
                                         r"an outlier; remove the duplicate rows from the gallery first$"):
        adv.robust_z(x, fallback=False)


def test_detection_scores_by_hand():
    assert adv.detection_scores([1, 2, 3], [3, 4]) == {"flagged": 3, "true positives": 1, "precision": 1 / 3,
                                                      "recall": 0.5}
    assert adv.detection_scores([], [3, 4]) == {"flagged": 0, "true positives": 0, "precision": 0.0, "recall": 0.0}
    assert adv.detection_scores([], []) == {"flagged": 0, "true positives": 0, "precision": 1.0, "recall": 1.0}
    assert adv.detection_scores([5], []) == {"flagged": 1, "true positives": 0, "precision": 0.0, "recall": 1.0}


def test_detect_hubs_statistics_by_hand_and_the_strict_threshold(data):
    task, _ = data
    t, b = np.asarray(task.targets), np.asarray(task.query_bank)
    S = t @ b.T                                                  # gallery x bank, dense float64
    bias = np.sort(S, axis=1)[:, ::-1][:, :16].mean(axis=1)
    out = adv.detect_hubs(t, b)                                  # statistic "bias", k = 16 by default
    assert sorted(out) == ["flagged", "statistic", "z"]
    assert out["statistic"] == pytest.approx(bias, abs=1e-12)
    assert out["z"] == pytest.approx(adv.robust_z(bias), abs=1e-9)
    order = np.argsort(-out["z"], kind="stable")
    assert out["flagged"].tolist() == [i for i in order if out["z"][i] > adv.Z_THRESHOLD]
    edge = float(np.sort(out["z"])[-3])                          # a threshold equal to the third highest z
    assert adv.detect_hubs(t, b, threshold=edge)["flagged"].tolist() == order[:2].tolist()
    n_k = adv.detect_hubs(t, b, statistic="n_k", k=5, threshold=1.0)
    top = np.argsort(-S.T, axis=1, kind="stable")[:, :5]         # each bank query's 5 best gallery items
    assert n_k["statistic"].tolist() == np.bincount(top.ravel(), minlength=len(t)).tolist()
    assert n_k["z"] == pytest.approx(adv.robust_z(n_k["statistic"]), abs=1e-12)
    assert len(n_k["flagged"]) and (n_k["z"][n_k["flagged"]] > 1.0).all()


def test_detector_and_planting_guards_say_what_is_wrong(data):
    task, attacker = data
    t, b = np.asarray(task.targets)[:30], np.asarray(task.query_bank)[:40]   # 30 items of dimension 512
    with pytest.raises(ValueError, match=r"^k=41 is larger than the query-bank size \(40\): use k <= 40$"):
        adv.detect_hubs(t, b, k=41)
    with pytest.raises(ValueError, match=r"^k=31 is larger than the gallery size \(30\): use k <= 30$"):
        adv.detect_hubs(t, b, statistic="n_k", k=31)
    with pytest.raises(ValueError, match=r"^statistic must be 'bias' or 'n_k'; got 'mean'$"):
        adv.detect_hubs(t, b, statistic="mean")
    with pytest.raises(ValueError, match=r"^threshold must be finite"):
        adv.detect_hubs(t, b, threshold=float("inf"))
    with pytest.raises(ValueError, match=r"^query_bank has dimension 5 but the other embeddings have 512"):
        adv.detect_hubs(t, b[:, :5])
    with pytest.raises(ValueError, match=r"^gallery must be 2-D"):
        adv.detect_hubs(t[0], b)
    with pytest.raises(ValueError, match=r"^n_hubs=31 is larger than the gallery size \(30\): use n_hubs <= 30$"):
        adv.plant_hubs(t, attacker, 31)
    with pytest.raises(ValueError, match=r"^k=31 is larger than the gallery size \(30\): use k <= 30$"):
        adv.plant_hubs(t, attacker, 2, k=31)
    with pytest.raises(ValueError, match=r"^budget is a chord distance between unit vectors, at most 2; got 2\.5$"):
        adv.plant_hubs(t, attacker, 2, budget=2.5)
    adv.plant_hubs(t, attacker, 1, budget=2.0, method="mean")   # 2 (any point) is allowed
    for name, kw in (("budget", {"budget": 0.0}), ("temperature", {"temperature": -1.0})):
        with pytest.raises(ValueError, match=rf"^{name} must be a finite number > 0; got "):
            adv.plant_hubs(t, attacker, 2, **kw)
    with pytest.raises(ValueError, match=r"^steps must be >= 1"):
        adv.plant_hubs(t, attacker, 2, steps=0)
    with pytest.raises(ValueError, match=r"^attacker_queries has dimension 5 but the other embeddings have 512"):
        adv.plant_hubs(t, attacker[:, :5], 2)
    with pytest.raises(ValueError, match=r"^gallery must be 2-D"):
        adv.plant_hubs(t[0], attacker, 2)
    with pytest.raises(TypeError, match=r"^task must be a hubnorm\.RetrievalTask$"):
        adv.attacked_task(None, adv.plant_hubs(t, attacker, 1, method="mean"))
    with pytest.raises(TypeError, match=r"^planted must be a PlantedHubs from plant_hubs$"):
        adv.attacked_task(task, None)


def test_plant_hubs_defaults_fields_and_the_slerp(data):
    import torch

    task, attacker = data
    t = np.asarray(task.targets)
    p = adv.plant_hubs(t, attacker, steps=5)
    q = adv.plant_hubs(t, attacker, 5, budget=0.5, method="gradient", k=10, steps=5, temperature=0.01, seed=0)
    assert np.array_equal(p.items, q.items) and p.origins.tolist() == q.origins.tolist()
    assert (p.method, p.budget, p.seed, len(p.items)) == ("gradient", 0.5, 0, 5)
    assert len(set(p.origins.tolist())) == 5 and p.origins.tolist() == np.sort(
        np.random.default_rng(0).choice(len(t), 5, replace=False)).tolist()
    assert (p.distance <= 0.5 + 1e-12).all() and (p.distance > 0.4).any()     # the budget is used, not exceeded
    assert not np.array_equal(adv.plant_hubs(t, attacker, steps=5, seed=1).origins, p.origins)
    # the slerp: towards y, exactly max_chord away when y is farther, at y when it is nearer; no NaN at y = x0
    rng = np.random.default_rng(3)
    x0 = rng.standard_normal((50, 8))
    x0 /= np.linalg.norm(x0, axis=1, keepdims=True)
    y = rng.standard_normal((50, 8))
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    x0t, yt = torch.as_tensor(x0), torch.as_tensor(y)
    moved = adv._slerp_towards(x0t, yt, 0.3).numpy()
    chord = np.linalg.norm(moved - x0, axis=1)
    far = np.linalg.norm(y - x0, axis=1) > 0.3
    assert far.all() and chord == pytest.approx(np.full(50, 0.3), abs=1e-12)
    assert (np.linalg.norm(moved - y, axis=1) < np.linalg.norm(x0 - y, axis=1)).all()
    assert np.linalg.norm(moved, axis=1) == pytest.approx(np.ones(50), abs=1e-12)
    assert adv._slerp_towards(x0t, yt, 2.0).numpy() == pytest.approx(y, abs=1e-9)   # the whole way
    over = x0 * (1 + 1e-15)                                        # |cos| rounds past 1 in float64
    assert ((over * x0).sum(axis=1) > 1).any() and ((-over * x0).sum(axis=1) < -1).any()
    same = adv._slerp_towards(x0t, torch.as_tensor(over), 0.5).numpy()
    assert np.isfinite(same).all() and same == pytest.approx(x0, abs=1e-7)
    assert np.isfinite(adv._slerp_towards(x0t, torch.as_tensor(-over), 0.5).numpy()).all()


def test_attacked_task_and_the_report_by_hand(data):
    task, attacker = data
    f32 = hn.RetrievalTask(np.asarray(task.queries, np.float32), np.asarray(task.targets, np.float32), task.positives,
                           query_bank=task.query_bank, target_bank=task.target_bank, direction="t2i", meta={"x": 1})
    p = adv.plant_hubs(task.targets, attacker, 2, budget=0.4, method="mean")
    att = adv.attacked_task(f32, p)
    assert att.targets.dtype == np.float64 and att.queries.dtype == np.float64
    assert att.meta == {"x": 1, "planted": 2} and att.target_bank is task.target_bank and att.direction == "t2i"
    assert att.n_targets == task.n_targets + 2 and np.array_equal(att.targets[-2:], p.items)
    nnn = hn.NearestNeighborNormalization(alpha=0.75, k=8)
    rep = adv.planted_hub_report(task, p, {"NNN": nnn}, capture_k=(1, 3))
    assert rep.columns.tolist() == ["method", "R@1 clean", "R@1 attacked", "damage", "bank", "captured@1 %",
                                    "captured@3 %"]
    assert rep["method"].tolist() == ["raw", "NNN"] and rep["bank"].tolist() == ["none", "query-agnostic"]
    for name, norm in (("raw", hn.Identity()), ("NNN", nnn)):
        row = rep.set_index("method").loc[name]
        clean = hn.evaluate(task.fit(norm.clone()), task)["R@1"]
        fitted = att.fit(norm.clone())
        attacked = hn.evaluate(fitted, att)["R@1"]
        top = np.argsort(-fitted.score(att.queries).numpy(), axis=1, kind="stable")[:, :3]
        planted = top >= task.n_targets
        assert row["R@1 clean"] == pytest.approx(clean) and row["R@1 attacked"] == pytest.approx(attacked)
        assert row["damage"] == pytest.approx(clean - attacked)
        assert row["captured@1 %"] == pytest.approx(100.0 * planted[:, 0].mean())
        assert row["captured@3 %"] == pytest.approx(100.0 * planted.any(axis=1).mean())
    assert (rep["damage"] != 0).any() and (rep["captured@3 %"] > 0).any()
    given = adv.planted_hub_report(task, p, {"NNN": nnn}, capture_k=(1,), clean_r1={"NNN": 12.5})
    assert given.set_index("method").loc["NNN", "R@1 clean"] == 12.5
    assert given.set_index("method").loc["raw", "R@1 clean"] == pytest.approx(rep.set_index("method").loc["raw", "R@1 clean"])
    assert adv._captured(hn.Identity().fit(att.targets), att, np.arange(task.n_targets, att.n_targets), ()) == {}


def test_n_k_over_a_small_bank_piles_at_zero_and_takes_the_fallback(data):
    task, _ = data
    t, b = np.asarray(task.targets), np.asarray(task.query_bank)[:10]       # 10 bank queries, k = 1: mostly N_1 = 0
    out = adv.detect_hubs(t, b, statistic="n_k", k=1)
    x = out["statistic"]
    assert np.median(np.abs(x - np.median(x))) == 0                        # MAD 0: the mean-deviation fallback
    assert out["z"] == pytest.approx((x - np.median(x)) / (1.253314 * np.abs(x - np.median(x)).mean()), abs=1e-12)
