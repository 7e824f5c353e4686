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
