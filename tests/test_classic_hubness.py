"""The classic hubness reductions of the hubness literature (hubnorm.LocalScaling, hubnorm.MutualProximity,
hubnorm.DisSimLocal) equal dense float64 computations written from the formulas of Schnitzer et al. (JMLR 2012) and
Hara et al. (AAAI 2016) with Euclidean distances and scipy's normal distribution (never hubnorm's code path), and
behave as the papers say on a planted hub.

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


@pytest.mark.parametrize("name, params", [("ls", {"k": 5}), ("mp", {}), ("dsl", {"k": 5})])
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


@pytest.mark.parametrize("k", [1, 3, 7])
def test_dissimlocal_equals_the_formula(data, k):
    q, t, qb = data
    near_t = np.argsort(_dist(t, qb), axis=1, kind="stable")[:, :k]     # t's k nearest bank queries
    near_q = np.argsort(_dist(q, t), axis=1, kind="stable")[:, :k]      # q's k nearest targets
    c_t, c_q = qb[near_t].mean(1), t[near_q].mean(1)
    d_dsl = _dist(q, t) ** 2 - ((q - c_q) ** 2).sum(1)[:, None] - ((t - c_t) ** 2).sum(1)[None, :]
    fitted = hn.DisSimLocal(k=k).fit(t, query_bank=qb)
    np.testing.assert_allclose(fitted.score(q).numpy(), -d_dsl, rtol=0, atol=1e-12)
    np.testing.assert_allclose(fitted.offsets, 0.5 * ((t - c_t) ** 2).sum(1), rtol=0, atol=1e-12)


def test_dissimlocal_needs_embeddings_on_the_score_path():
    from hubnorm.scores import matrices_from_embeddings

    rng = np.random.default_rng(0)
    q, t, qb = unit_rows(rng, 12, 6), unit_rows(rng, 9, 6), unit_rows(rng, 20, 6)
    task = hn.RetrievalTask(scores=matrices_from_embeddings(q, t, qb),
                            positives=hn.Positives.from_labels(np.arange(12) % 9, 9), direction="t2i")
    with pytest.raises(ValueError, match="embedding"):
        task.fit(hn.DisSimLocal(k=3))


def test_empirical_mutual_proximity_equals_the_counts(data):
    q, t, qb = data
    d, dt = _dist(q, t), _dist(qb, t)   # Euclidean distances: the same order as the scores on unit rows
    want = np.array([[np.mean(d[i] > d[i, j]) * np.mean(dt[:, j] > d[i, j]) for j in range(len(t))]
                     for i in range(len(q))])
    got = hn.MutualProximity(form="empirical").fit(t, query_bank=qb).score(q).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="form"):
        hn.MutualProximity(form="counts").fit(t, query_bank=qb)


def test_empirical_mutual_proximity_on_dask_equals_in_process(data):
    da = pytest.importorskip("dask.array")
    from hubnorm import distributed as hd

    q, t, qb = data
    ref = hn.MutualProximity(form="empirical").fit(t, query_bank=qb)
    got = hd.fit_offsets(hn.MutualProximity(form="empirical"), t, da.from_array(qb, chunks=(7, -1)),
                         target_chunk_rows=5, split_every=2)
    # the bank scores of the Dask chunks differ from the in-memory GEMM's in the last bit
    np.testing.assert_allclose(got.target_sorted_.numpy(), ref.target_sorted_.numpy(), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(got.score(q).numpy(), ref.score(q).numpy())   # counts: no near-tie here


@pytest.mark.parametrize("name", ["ls", "dsl"])
def test_scores_equal_kiez_where_it_installs(name):
    """kiez 0.5 (a library of hubness reductions; not a dependency of this project: skipped without it). Its
    estimator checks fail on this project's scikit-learn (``__sklearn_tags__``), so the test switches
    ``check_is_fitted`` off in kiez's modules and feeds its reductions the neighbour lists directly (exact, by
    sorting Euclidean distances): kiez's source = our bank = the queries, ``n_candidates = k``. On each query's k
    candidates kiez's LS distance is ``1 -`` our LS and its DSL distance our ``-score`` up to one shift."""
    hr = pytest.importorskip("kiez.hubness_reduction")
    import types

    from kiez.hubness_reduction import dis_sim, local_scaling

    rng = np.random.default_rng(5)
    q, t = unit_rows(rng, 40, 8), unit_rows(rng, 30, 8)
    k = 6
    d_qt = _dist(q, t)
    ind = np.argsort(d_qt, axis=1, kind="stable")[:, :k]                  # each query's k nearest targets
    ind_t = np.argsort(d_qt.T, axis=1, kind="stable")[:, :k]              # each target's k nearest queries
    dist, dist_t = np.take_along_axis(d_qt, ind, 1), np.take_along_axis(d_qt.T, ind_t, 1)
    algo = types.SimpleNamespace(n_candidates=k, metric="sqeuclidean" if name == "dsl" else "euclidean", p=2)
    with pytest.MonkeyPatch.context() as mp:
        for module in (dis_sim, local_scaling):
            mp.setattr(module, "check_is_fitted", lambda *a, **kw: None)
        hub = (hr.DisSimLocal if name == "dsl" else hr.LocalScaling)(nn_algo=algo)
        power = 2 if name == "dsl" else 1   # kiez's DSL takes squared distances
        hub._fit(dist_t ** power, ind_t, q, t)
        theirs = hub.transform(dist ** power, ind, q)[0]
    ours = np.take_along_axis(hn.make_normalizer(name, k=k).fit(t, query_bank=q).score(q).numpy(), ind, 1)
    if name == "ls":
        np.testing.assert_allclose(theirs, 1 - ours, rtol=0, atol=1e-12)
    else:
        shift = theirs + ours
        np.testing.assert_allclose(shift, shift.flat[0], rtol=0, atol=1e-12)
