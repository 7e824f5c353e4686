"""Hub forensics (hubnorm.forensics): the explanation of a target's offset is exact.

For NNN, IS (with hubnorm's centring constant) and SN / DBSN (the column of the transport plan with the row
potentials of the last iteration), ``sum(weights * values) + remainder`` equals the fitted offset within 1e-10 in
float64 for every target of a small seeded problem, and the weights are what the papers' equations say they are
(checked against dense formulas written independently here).
"""

import numpy as np
import pandas as pd
import pytest
import torch

import hubnorm as hn
from hubnorm import forensics as fx


@pytest.fixture(scope="module")
def task():
    ds = hn.load_embeddings("synthetic:flickr30k", seed=7, n_train_images=80, n_test_images=40, n_val_images=0)
    te, tr = ds.split("test"), ds.split("train")
    f = np.float64
    return hn.build_tasks(te.images.astype(f), te.captions.astype(f), te.caption_to_image,
                          image_bank=tr.images.astype(f), caption_bank=tr.captions.astype(f), directions=("t2i",))["t2i"]


METHODS = [hn.NearestNeighborNormalization(alpha=0.75, k=8), hn.NearestNeighborNormalization(alpha=1.1, k=1),
           hn.InvertedSoftmax(tau=0.02), hn.InvertedSoftmax(tau=0.5), hn.SinkhornNormalization(tau=0.01),
           hn.SinkhornNormalization(tau=0.05, n_iter=3), hn.SinkhornNormalization(tau=0.02, n_iter=50, tol=1e-9),
           hn.DualBankSinkhornNormalization(tau=0.02, n_iter=5)]


@pytest.mark.parametrize("norm", METHODS, ids=repr)
def test_contributions_sum_to_the_offset_of_every_target(task, norm):
    norm = task.fit(norm.clone())
    for j, e in enumerate(fx.explain_targets(norm, range(task.n_targets), query_bank=task.query_bank,
                                              target_bank=task.target_bank)):
        assert e.target == j
        assert e.identity_error < 1e-10, (j, e.identity_error)
        assert abs(e.offset - e.fitted_offset) < 1e-10
        assert np.all(e.weights >= 0)


def test_weights_are_the_papers(task):
    qb, t = torch.as_tensor(task.query_bank), torch.as_tensor(task.targets)
    S = (qb @ t.T).numpy()                                      # dense oracle (small problem)
    j = 3
    nnn = task.fit(hn.NearestNeighborNormalization(alpha=0.75, k=8))
    e = fx.explain_target(nnn, j, query_bank=task.query_bank)
    top = np.argsort(-S[:, j], kind="stable")[:8]
    assert set(np.flatnonzero(e.weights)) == set(top) and np.allclose(e.weights[top], 0.75 / 8)
    tau = 0.02
    is_ = task.fit(hn.InvertedSoftmax(tau=tau))
    e = fx.explain_target(is_, j, query_bank=task.query_bank)
    w = np.exp(S[:, j] / tau - S[:, j].max() / tau)
    assert np.allclose(e.weights, w / w.sum(), atol=1e-12)
    # SN: the weights are n times column j of the transport plan pi = diag(a) K diag(b) of a dense Sinkhorn (Alg. A1)
    sn = task.fit(hn.SinkhornNormalization(tau=tau, n_iter=10))
    e = fx.explain_target(sn, j, query_bank=task.query_bank)
    m, n = S.shape
    K = np.exp((S - S.max()) / tau)
    b = np.ones(n)
    for _ in range(10):
        a = (1 / m) / (K @ b)
        b = (1 / n) / (K.T @ a)
    plan_col = a * K[:, j] * b[j]
    assert np.allclose(plan_col.sum(), 1 / n)
    assert np.allclose(e.weights, n * plan_col, atol=1e-9)
    # the shift of K is absorbed by a, so b is DBSN's beta and the offsets are tau log beta (Eq. 9)
    assert np.allclose(sn.offsets, tau * np.log(b), atol=1e-9)


def test_wins_nk_and_rank_changes(task):
    raw = task.fit(hn.Identity())
    n1 = hn.k_occurrence(raw, 1, queries=task.queries)
    hub = int(np.argmax(n1))
    nnn = task.fit(hn.NearestNeighborNormalization(alpha=0.75, k=8))
    e = fx.explain_target(nnn, hub, query_bank=task.query_bank, queries=task.queries, positives=task.positives, k=1)
    assert e.n_k["raw"] == n1[hub] == len(e.wins["raw"])
    assert e.n_k["NNN"] == hn.k_occurrence(nnn, 1, queries=task.queries)[hub] == len(e.wins["NNN"])
    rc = e.rank_change
    assert set(rc["query"]) == set(e.wins["raw"]) | set(e.wins["NNN"])
    ranks_raw = hn.positive_ranks(raw, task.positives, task.queries)
    assert np.array_equal(rc["true-match rank raw"].to_numpy(), ranks_raw[rc["query"].to_numpy()])
    import matplotlib
    matplotlib.use("Agg")
    fx.plot_explanation(e)


def test_bad_inputs_are_refused(task):
    nnn = hn.NearestNeighborNormalization(alpha=0.75, k=8)
    with pytest.raises(hn.normalizers.base.NotFittedError):
        fx.explain_target(nnn, 0, query_bank=task.query_bank)
    nnn = task.fit(nnn)
    with pytest.raises(ValueError, match="target must be"):
        fx.explain_target(nnn, task.n_targets, query_bank=task.query_bank)
    with pytest.raises(ValueError, match="query_bank"):
        fx.explain_target(nnn, 0, query_bank=None)
    sn = task.fit(hn.SinkhornNormalization(tau=0.02))
    with pytest.raises(ValueError, match="same query_bank"):
        fx.explain_target(sn, 0, query_bank=task.query_bank[:-5])
    dbsn = task.fit(hn.DualBankSinkhornNormalization(tau=0.02))
    with pytest.raises(ValueError, match="target_bank"):
        fx.explain_target(dbsn, 0, query_bank=task.query_bank)
    with pytest.raises(TypeError, match="decomposes the offsets of NNN, IS, SN, DBSN; got Identity"):
        fx.explain_target(task.fit(hn.Identity()), 0, query_bank=task.query_bank)
    # a bank other than the fitted one would explain an offset the fit did not produce: refused for every method
    for fitted in (nnn, task.fit(hn.InvertedSoftmax(tau=0.05))):
        with pytest.raises(ValueError, match="same query_bank"):
            fx.explain_target(fitted, 0, query_bank=task.queries)


@pytest.mark.parametrize("cache_dtype", [torch.float16, torch.bfloat16])
def test_sn_with_a_low_precision_cache_explains_its_own_bank(cache_dtype):
    """Issue 44: an SN fitted with a 16-bit score cache refused its own bank (its offsets carry the cache's rounding,
    the decomposition uses exact scores); the tolerance is now the cache's rounding, and another bank is still
    refused."""
    rng = np.random.default_rng(5)
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)   # noqa: E731
    mu = unit(rng.standard_normal((1, 16)))
    t, qb = unit(rng.standard_normal((60, 16)) + mu), unit(rng.standard_normal((300, 16)) + mu)
    sn = hn.SinkhornNormalization(tau=0.02, cache_dtype=cache_dtype).fit(t, query_bank=qb)
    e = fx.explain_target(sn, 0, query_bank=qb)
    assert e.identity_error < 2 * torch.finfo(cache_dtype).eps
    with pytest.raises(ValueError, match="same query_bank"):
        fx.explain_target(sn, 0, query_bank=qb[:-5])


@pytest.mark.parametrize("chunk", [None, 7])
def test_hub_neighbours_against_a_dense_count(task, chunk):
    """DBSN Figs. A10 / A11: the queries with a target in their top-k, from blocks of any size, equal a dense count
    (their number is N_k of the target), with the target's rank in each list, its score and matched = positive."""
    nnn = task.fit(hn.make_normalizer("nnn", alpha=0.75, k=8))
    S = nnn.score(task.queries).double().numpy()
    k = 5
    n_k = hn.k_occurrence(nnn, k, queries=task.queries)
    for target in (int(np.argmax(n_k)), int(np.argmin(n_k)), 3):
        got = fx.hub_neighbours(nnn.iter_scores(task.queries, chunk_size=chunk), target, task.positives, k=k)
        order = np.lexsort((np.tile(np.arange(S.shape[1]), (S.shape[0], 1)), -S), axis=1)[:, :k]
        want = np.flatnonzero((order == target).any(axis=1))
        assert sorted(got["query"]) == list(want) and len(got) == n_k[target]
        for _, r in got.iterrows():
            q = int(r["query"])
            assert r["rank"] == int(np.flatnonzero(order[q] == target)[0])
            assert r["score"] == pytest.approx(S[q, target], abs=1e-6)
            assert r["matched"] == (target in task.positives.of(q))
        assert list(got["score"]) == sorted(got["score"], reverse=True)
    with pytest.raises(ValueError, match="target must be an index"):
        fx.hub_neighbours(nnn.iter_scores(task.queries), task.n_targets, task.positives)
    with pytest.raises(ValueError, match="columns"):
        fx.hub_neighbours([(0, torch.zeros(2, 3))], 0, task.positives)


def test_neighbour_counts_per_method(task):
    raw = task.fit(hn.Identity())
    rows = fx.hub_neighbours(raw.iter_scores(task.queries), 3, task.positives, k=5)
    both = pd.concat([rows.assign(method="b"), rows.head(2).assign(method="a")], ignore_index=True)
    counts = fx.neighbour_counts(both)
    assert list(counts["method"]) == ["b", "a"]
    assert counts.iloc[0].to_dict() == {"method": "b", "neighbour queries": len(rows),
                                        "matched": int(rows["matched"].sum()),
                                        "mismatched": len(rows) - int(rows["matched"].sum())}
    assert counts.iloc[1]["neighbour queries"] == 2
    with pytest.raises(ValueError, match="method"):
        fx.neighbour_counts(rows)
