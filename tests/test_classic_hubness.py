"""The classic hubness reductions of the hubness literature (hubnorm.LocalScaling, hubnorm.MutualProximity) equal
dense float64 computations written from the formulas of Schnitzer et al. (JMLR 2012) with Euclidean distances and
scipy's normal distribution (never hubnorm's code path), and behave as the paper says on a planted hub.

(The generic method checks, the score-matrix path and Dask run on them through tests/test_method_checks.py and
tests/test_scores.py.)"""

import numpy as np
import pytest
from scipy.stats import norm as gaussian

import hubnorm as hn

from method_checks import unit_rows


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(11)
    q, t, qb = unit_rows(rng, 17, 8), unit_rows(rng, 13, 8), unit_rows(rng, 29, 8)
    return q, t, qb


def _dist(a, b):
    """Euclidean distances by differences (not from dot products)."""
    return np.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).sum(-1))


@pytest.mark.parametrize("k", [1, 3, 7])
def test_local_scaling_equals_the_formula(data, k):
    q, t, qb = data
    d = _dist(q, t)
    sigma_q = np.sort(d, axis=1)[:, k - 1]                   # q's k-th nearest target
    sigma_t = np.sort(_dist(t, qb), axis=1)[:, k - 1]        # t's k-th nearest bank query
    want = np.exp(-d ** 2 / (sigma_q[:, None] * sigma_t[None, :]))
    got = hn.LocalScaling(k=k).fit(t, query_bank=qb).score(q).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_mutual_proximity_equals_the_formula(data):
    q, t, qb = data
    d = 1 - q @ t.T   # the cosine distance
    dq, dt = d, 1 - qb @ t.T
    p_q = gaussian.sf(d, loc=dq.mean(1, keepdims=True), scale=dq.std(1, keepdims=True))   # P(X_q > d(q, t))
    p_t = gaussian.sf(d, loc=dt.mean(0, keepdims=True), scale=dt.std(0, keepdims=True))   # P(Y_t > d(q, t))
    got = hn.MutualProximity().fit(t, query_bank=qb).score(q).numpy()
    np.testing.assert_allclose(np.exp(got), p_q * p_t, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(got, np.log(p_q) + np.log(p_t), rtol=1e-9)


@pytest.mark.parametrize("name, params", [("ls", {"k": 5}), ("mp", {})])
def test_a_planted_hub_loses_its_queries(name, params):
    """A target moved towards the direction all queries share is the nearest neighbour of many raw; both
    reductions hand most of those queries back (Schnitzer et al.: LS and MP reduce hubness)."""
    rng = np.random.default_rng(3)
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)
    t = unit_rows(rng, 40, 10)
    u = unit(rng.standard_normal(10))   # a direction every query and bank query shares
    q = unit(t + 0.15 * rng.standard_normal(t.shape) + 1.5 * u)
    bank = unit(unit_rows(rng, 300, 10) + 1.5 * u)
    t[0] = unit(u + 0.3 * t[0])         # the planted hub lies along it
    pos = hn.Positives.from_labels(np.arange(40), 40)
    raw = hn.Identity().fit(t)
    fitted = hn.make_normalizer(name, **params).fit(t, query_bank=bank)
    wins = lambda n: int((n.topk(q, 1)[1][:, 0] == 0).sum())
    assert wins(raw) >= 10 and wins(fitted) <= wins(raw) // 3
    assert hn.recall_at_k(hn.positive_ranks(fitted, pos, q), 1) > hn.recall_at_k(hn.positive_ranks(raw, pos, q), 1)


def test_local_scaling_k_is_checked(data):
    q, t, qb = data
    with pytest.raises(ValueError, match="k"):
        hn.LocalScaling(k=0).fit(t, query_bank=qb)
    with pytest.raises(ValueError, match="k"):
        hn.LocalScaling(k=len(qb) + 1).fit(t, query_bank=qb)
