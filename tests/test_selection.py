"""Hyperparameter selection: grid_search picks what a manual loop picks; holdout_split is seeded and disjoint."""

import itertools

import numpy as np
import pytest

import hubnorm as hn
from conftest import unit_rows

pytestmark = pytest.mark.usefixtures("single_thread_torch")


def _hubby_task(seed=0, n_img=40, per=3, d=16):
    rng = np.random.default_rng(seed)
    imgs = unit_rows(rng, n_img, d)
    hub_dir = unit_rows(rng, 1, d)[0]
    imgs = hn.l2_normalize(imgs + rng.uniform(0, 1.2, (n_img, 1)).astype(np.float32) * hub_dir)  # varying hubness
    c2i = np.repeat(np.arange(n_img), per)
    caps = hn.l2_normalize(imgs[c2i] + 1.0 * rng.standard_normal((n_img * per, d)).astype(np.float32) + 0.5 * hub_dir)
    bank = hn.l2_normalize(imgs[rng.integers(0, n_img, 200)] + 1.0 * rng.standard_normal((200, d)).astype(np.float32)
                           + 0.5 * hub_dir)
    return hn.build_tasks(imgs, caps, c2i, caption_bank=bank)["t2i"]


@pytest.mark.parametrize("metric", ["R@1", "MnR"])
def test_grid_search_picks_the_best_point(metric):
    task = _hubby_task()
    grid = {"alpha": [0.0, 0.5, 1.0, 1.5], "k": [1, 8, 64]}
    res = hn.grid_search("nnn", task, grid, metric=metric, progress=False)
    manual = []
    for alpha, k in itertools.product(grid["alpha"], grid["k"]):
        norm = hn.NearestNeighborNormalization(alpha=alpha, k=k)
        manual.append(((alpha, k), hn.evaluate(task.fit(norm), task)[metric]))
    values = np.array([v for _, v in manual])
    best = int(np.argmax(values) if metric == "R@1" else np.argmin(values))
    assert res.best_params == dict(zip(["alpha", "k"], manual[best][0]))
    assert res.best_score == pytest.approx(values[best])
    assert len(res.table) == 12
    np.testing.assert_allclose(res.table[metric].to_numpy(), values)
    assert len(set(values.tolist())) > 1  # the grid matters on this problem, so the choice is not trivial


def test_grid_search_fixed_params_and_ties():
    task = _hubby_task(1)
    # fixed parameters reach every grid point
    res = hn.grid_search("dn", task, {"lam": [0.5]}, fixed={"n_samples": 10, "seed": 3}, progress=False)
    ref = hn.evaluate(task.fit(hn.DistributionNormalization(lam=0.5, n_samples=10, seed=3)), task)
    assert res.best_score == pytest.approx(ref["R@1"])
    # ties go to the first grid point: alpha = 0 with any k is the identity
    res = hn.grid_search("nnn", task, {"alpha": [0.0], "k": [4, 2, 1]}, progress=False)
    assert res.best_params == {"alpha": 0.0, "k": 4}


def test_holdout_split_seeded_and_disjoint():
    a, b = hn.holdout_split(100, 30, seed=5)
    assert len(a) == 30 and len(b) == 70
    assert np.intersect1d(a, b).size == 0
    np.testing.assert_array_equal(np.union1d(a, b), np.arange(100))
    a2, b2 = hn.holdout_split(100, 30, seed=5)
    np.testing.assert_array_equal(a, a2)
    np.testing.assert_array_equal(b, b2)
    a3, _ = hn.holdout_split(100, 30, seed=6)
    assert not np.array_equal(a, a3)
    assert np.all(np.diff(a) > 0)
