"""Forensics scores the queries once per model and the planted-hub search computes x @ a.T once per step (and one
top-k for every capture k): the numbers equal the former computations, written out here (k_occurrence, topk and
positive_ranks called separately; the old gradient loop with its separate surrogate evaluation)."""

import numpy as np
import pytest
import torch

import hubnorm as hn
from hubnorm import adversarial as adv
from hubnorm import forensics as fx
from hubnorm.kernels import topk_similarity

from test_forensics import task  # noqa: F401  (the same small float64 t2i task, a module fixture)


@pytest.mark.parametrize("k", [1, 5])
def test_one_query_pass_equals_three(task, k):
    for norm in (hn.Identity(), hn.NearestNeighborNormalization(alpha=0.75, k=8), hn.InvertedSoftmax(tau=0.05)):
        model = task.fit(norm)
        n_k, top1, ranks = fx._query_pass(model, task.queries, k, task.positives)
        assert np.array_equal(n_k, hn.k_occurrence(model, k, queries=task.queries))
        assert np.array_equal(top1, model.topk(task.queries, 1)[1][:, 0].numpy())
        assert np.array_equal(ranks, hn.positive_ranks(model, task.positives, task.queries))


def _old_plant(gallery, attackers, n_hubs, budget, k, steps, temperature, seed):
    """The former gradient loop: x @ a.T for the gradient and again for the surrogate, every step."""
    t, a = torch.as_tensor(gallery, dtype=torch.float64), torch.as_tensor(attackers, dtype=torch.float64)
    rng = np.random.default_rng(seed)
    origins = np.sort(rng.choice(t.shape[0], n_hubs, replace=False))
    x0 = t[torch.from_numpy(origins)]
    x0 = x0 / x0.norm(dim=1, keepdim=True)
    mu = a.mean(dim=0)
    mu = mu / mu.norm()
    x = adv._slerp_towards(x0, mu.expand_as(x0), budget)
    r_k = topk_similarity(a, t, k)[0][:, -1]
    step = budget / 10.0

    def surrogate(z):
        return torch.sigmoid((z @ a.T - r_k) / temperature).sum(dim=1)

    best, best_val = x.clone(), surrogate(x)
    for _ in range(steps):
        sig = torch.sigmoid((x @ a.T - r_k) / temperature)
        grad = (sig * (1 - sig)) @ a / temperature
        grad = grad - (grad * x).sum(dim=1, keepdim=True) * x
        x = x + step * grad / grad.norm(dim=1, keepdim=True).clamp_min(1e-300)
        x = x / x.norm(dim=1, keepdim=True)
        far = (x - x0).norm(dim=1) > budget
        if bool(far.any()):
            x[far] = adv._slerp_towards(x0[far], x[far], budget)
        val = surrogate(x)
        better = val > best_val
        best[better], best_val[better] = x[better], val[better]
    return best.numpy()


def test_plant_hubs_reuses_the_step_scores(task):
    attackers = np.asarray(task.query_bank[:120])
    for budget in (0.2, 0.5):
        got = adv.plant_hubs(task.targets, attackers, 3, budget=budget, method="gradient", k=5, steps=15, seed=2)
        want = _old_plant(np.asarray(task.targets), attackers, 3, budget, 5, 15, 0.01, 2)
        assert np.array_equal(got.items, want)


def test_capture_shares_from_one_topk(task):
    planted = adv.plant_hubs(task.targets, task.query_bank[:120], 2, budget=0.5, method="gradient", seed=3, steps=10)
    att = adv.attacked_task(task, planted)
    model = att.fit(hn.InvertedSoftmax(tau=0.05))
    idx = np.arange(task.n_targets, task.n_targets + 2)
    got = adv._captured(model, att, idx, (1, 3, 10))
    for k in (1, 3, 10):
        want = float(np.isin(model.topk(att.queries, k)[1].numpy(), idx).any(axis=1).mean())
        assert got[k] == want
