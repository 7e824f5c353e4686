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


def test_float32_fits_are_explained_in_float64(task):
    """A float32 fit's bank scores are widened to float64 before the decomposition: weights and values equal a
    float64 computation from the float32 scores (not their float32 rounding), and the explained offset is the
    float32 fit's within float32's rounding."""
    f32 = lambda x: np.asarray(x, np.float32)   # noqa: E731
    qb, t = f32(task.query_bank), f32(task.targets)
    s = (torch.from_numpy(qb) @ torch.from_numpy(t[3])).double().numpy()      # the float32 scores, widened
    tau = 0.02
    for norm in (hn.NearestNeighborNormalization(alpha=0.75, k=8), hn.InvertedSoftmax(tau=tau)):
        fitted = norm.clone().fit(t, query_bank=qb)
        e = fx.explain_target(fitted, 3, query_bank=qb)
        assert e.weights.dtype == e.values.dtype == np.float64
        np.testing.assert_allclose(e.values, -s, rtol=0, atol=1e-7)
        if isinstance(norm, hn.InvertedSoftmax):
            w = np.exp((s - s.max()) / tau)
            np.testing.assert_allclose(e.weights, w / w.sum(), rtol=0, atol=1e-9)   # float32 weights: ~1e-7 off
        assert abs(e.offset - e.fitted_offset) < 1e-5


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
    w = w / w.sum()
    assert list(e.remainder_terms) == ["tau KL(w || uniform)"]      # the name the forensics tables show
    assert e.remainder_terms["tau KL(w || uniform)"] == pytest.approx(tau * (np.log(len(w)) + (w * np.log(w)).sum()),
                                                                      abs=1e-12)
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


# ---------------------------------------------------------------- what mutation testing found unchecked (issue 50)
def test_the_query_pass_over_many_blocks_equals_dense_counts_wins_and_ranks(task, monkeypatch):
    nnn = task.fit(hn.NearestNeighborNormalization(alpha=0.75, k=8))
    S = nnn.score(task.queries).double().numpy()
    order = np.argsort(-S, axis=1, kind="stable")
    dense_nk = np.bincount(order[:, :5].ravel(), minlength=S.shape[1])
    dense_ranks = hn.positive_ranks(nnn, task.positives, task.queries)
    blocks = fx.iter_score_blocks
    monkeypatch.setattr(fx, "iter_score_blocks", lambda m, q: blocks(m, q, chunk_size=7))   # 7 queries a block
    counts, top1, ranks = fx._query_pass(nnn, task.queries, 5, task.positives)
    assert counts.tolist() == dense_nk.tolist() and top1.tolist() == order[:, 0].tolist()
    assert ranks.tolist() == dense_ranks.tolist()
    assert fx._query_pass(nnn, task.queries, 5, None)[2] is None
    with pytest.raises(ValueError, match=r"^k=41 is larger than the number of targets \(40\): use k <= 40$"):
        fx._query_pass(nnn, task.queries, 41, None)
    fewer = task.positives.subset(np.arange(task.n_queries - 1))
    with pytest.raises(ValueError, match=rf"^scores have more rows than positives has queries \({task.n_queries - 1}\)$"):
        fx._query_pass(nnn, task.queries, 5, fewer)
    with pytest.raises(ValueError, match=rf"^positives has {task.n_queries} queries but {task.n_queries - 3} queries "
                                         r"were scored$"):
        fx._query_pass(nnn, task.queries[:-3], 5, task.positives)
    # the target whose top-1 winners NNN changes most (raw vs NNN), so that its rank-change table mixes both kinds
    raw_top1 = np.argmax(task.queries @ task.targets.T, axis=1)
    changed = [len(set(np.flatnonzero(raw_top1 == t)) ^ set(np.flatnonzero(order[:, 0] == t)))
               for t in range(S.shape[1])]
    assert max(changed) > 0
    e = fx.explain_target(nnn, int(np.argmax(changed)), query_bank=task.query_bank, queries=task.queries,
                          positives=task.positives, k=5)
    j = e.target
    assert e.n_k["NNN"] == dense_nk[j] and e.wins["NNN"].tolist() == np.flatnonzero(order[:, 0] == j).tolist()
    rc = e.rank_change
    assert rc.columns.tolist() == ["query", "won raw", "won NNN", "true-match rank raw", "true-match rank NNN"]
    assert rc["won raw"].tolist() == np.isin(rc["query"], e.wins["raw"]).tolist()
    assert rc["won NNN"].tolist() == np.isin(rc["query"], e.wins["NNN"]).tolist()
    assert rc["true-match rank NNN"].tolist() == dense_ranks[rc["query"]].tolist()
    assert rc["won raw"].any() and not rc["won raw"].all() or rc["won NNN"].any() and not rc["won NNN"].all()


def test_the_contributions_table_ranks_bank_queries_by_their_share_of_the_offset(task):
    is_ = task.fit(hn.InvertedSoftmax(tau=0.05))
    e = fx.explain_target(is_, 3, query_bank=task.query_bank)
    assert (e.k, len(e.contributions), e.method) == (10, 20, "IS")          # defaults: k = 10, top = 20
    c = e.contributions
    assert c.columns.tolist() == ["bank query", "weight", "value", "contribution"]
    whole = e.weights * e.values
    want = np.argsort(-np.abs(whole), kind="stable")[:20]
    assert c["bank query"].tolist() == want.tolist()
    assert np.array_equal(c["contribution"].to_numpy(), whole[want])
    assert np.array_equal(c["weight"].to_numpy(), e.weights[want]) and np.array_equal(c["value"].to_numpy(), e.values[want])
    assert set(e.remainder_terms) and e.remainder == pytest.approx(sum(e.remainder_terms.values()))
    assert len(fx.explain_target(is_, 3, query_bank=task.query_bank, top=4).contributions) == 4
    with pytest.raises(ValueError, match=r"^top must be >= 1"):
        fx.explain_target(is_, 3, query_bank=task.query_bank, top=0)
    with pytest.raises(ValueError, match=r"^k=41 is larger than the number of targets \(40\)"):
        fx.explain_target(is_, 3, query_bank=task.query_bank, k=41)


def test_a_bank_a_little_off_is_refused_at_the_precision_of_the_fit(task):
    rng = np.random.default_rng(0)
    qb = np.asarray(task.query_bank, np.float64)
    off = qb + 2e-4 * rng.standard_normal(qb.shape)
    off /= np.linalg.norm(off, axis=1, keepdims=True)
    fit64 = hn.InvertedSoftmax(tau=0.05).fit(task.targets, query_bank=qb)
    moved = np.abs(hn.InvertedSoftmax(tau=0.05).fit(task.targets, query_bank=off).offsets - fit64.offsets)
    j = int(np.argmax(moved))
    assert 1e-5 < moved[j] < 1e-3                 # inside float32's tolerance, far outside float64's
    with pytest.raises(ValueError, match=rf"^the explanation of target {j} gives offset .*: pass the same query_bank "
                                         r"\(and target_bank\) the normalizer was fitted on$"):
        fx.explain_target(fit64, j, query_bank=off)
    f32 = lambda x: np.asarray(x, np.float32)   # noqa: E731
    fit32 = hn.InvertedSoftmax(tau=0.05).fit(f32(task.targets), query_bank=f32(qb))
    assert fx.explain_target(fit32, j, query_bank=f32(off)).identity_error < 1e-3   # float32 rounds as much
    with pytest.raises(ValueError, match="same query_bank"):
        fx.explain_target(fit32, j, query_bank=f32(task.queries))                 # another bank: refused in float32


def test_the_guards_of_the_explanation_and_of_the_neighbours_say_what_is_wrong(task):
    nnn = task.fit(hn.NearestNeighborNormalization(alpha=0.75, k=8))
    with pytest.raises(TypeError, match=r"^normalizer must be a fitted hubnorm normalizer; got str$"):
        fx.explain_target("nnn", 0, query_bank=task.query_bank)
    for bad in ([], [[0, 1]], [0.5], [-1], [40]):
        with pytest.raises(ValueError, match=r"^target must be a gallery index in \[0, 40\) \(or a list of them\)"):
            fx.explain_targets(nnn, bad, query_bank=task.query_bank)
    with pytest.raises(ValueError, match=r"^explain_target needs the query_bank the normalizer was fitted on: pass "
                                         r"query_bank=\.\.\.$"):
        fx.explain_target(nnn, 0, query_bank=None)
    with pytest.raises(ValueError, match=r"^query_bank has dimension 5 but the other embeddings have 512"):
        fx.explain_target(nnn, 0, query_bank=np.asarray(task.query_bank)[:, :5])
    dbsn = task.fit(hn.DualBankSinkhornNormalization(tau=0.02, n_iter=5))
    with pytest.raises(ValueError, match=r"^target_bank has dimension 5 but the other embeddings have 512"):
        fx.explain_target(dbsn, 0, query_bank=task.query_bank, target_bank=np.asarray(task.target_bank)[:, :5])
    with pytest.raises(TypeError, match=r"^positives must be a hubnorm\.Positives$"):
        fx.explain_target(nnn, 0, query_bank=task.query_bank, queries=task.queries, positives=np.zeros(3))
    with pytest.raises(TypeError, match=r"^positives must be a hubnorm\.Positives$"):
        fx.hub_neighbours(nnn.iter_scores(task.queries), 0, np.zeros(3))
    with pytest.raises(ValueError, match=r"^k must be >= 1"):
        fx.hub_neighbours(nnn.iter_scores(task.queries), 0, task.positives, k=0)
    for bad in (True, 1.0, -1, 40):
        with pytest.raises(ValueError, match=r"^target must be an index in \[0, 40\); got "):
            fx.hub_neighbours(nnn.iter_scores(task.queries), bad, task.positives)
    with pytest.raises(ValueError, match=r"^score blocks have 3 columns but positives refer to 40 targets$"):
        fx.hub_neighbours([(0, torch.zeros(2, 3))], 0, task.positives)
    S = nnn.score(task.queries)
    with pytest.raises(ValueError, match=rf"^score blocks cover more rows than positives has queries "
                                         rf"\({task.n_queries}\)$"):
        fx.hub_neighbours([(0, S), (task.n_queries, S[:1])], int(S[0].argmax()), task.positives)
    fx.hub_neighbours([(0, S[:-1]), (task.n_queries - 1, S[-1:])], 0, task.positives)   # the last row: accepted
    with pytest.raises(ValueError, match=r"^neighbours lacks the columns \['method'\]: pass hub_neighbours rows with "
                                         r"a 'method' column \(\.assign\(method=name\)\)$"):
        fx.neighbour_counts(pd.DataFrame({"query": [1], "matched": [True]}))


def test_hub_neighbours_ties_empty_results_and_order():
    pos = hn.Positives.from_labels(np.array([0, 1, 2, 0]), 3)
    S = torch.tensor([[0.5, 0.5, 0.1], [0.5, 0.9, 0.1], [0.2, 0.1, 0.9], [0.5, 0.4, 0.3]])
    got = fx.hub_neighbours([(0, S[:2]), (2, S[2:])], 0, pos, k=1)   # ties go to the lower index: row 0 keeps 0
    assert got.to_dict("list") == {"query": [0, 3], "score": [0.5, 0.5], "rank": [0, 0], "matched": [True, True]}
    assert got.index.tolist() == [0, 1]
    got = fx.hub_neighbours([(0, S[:2]), (2, S[2:])], 1, pos, k=2)
    assert got["query"].tolist() == [1, 0, 3] and got["rank"].tolist() == [0, 1, 1]   # by score, then query
    assert got["matched"].tolist() == [True, False, False] and got.index.tolist() == [0, 1, 2]
    assert fx.hub_neighbours([(0, S)], 2, pos).shape[0] == 4          # k = 10 by default: every query (3 targets)
    none = fx.hub_neighbours([(0, S)], 2, pos, k=1)
    assert none["query"].tolist() == [2]
    empty = fx.hub_neighbours([], 2, pos, k=1)
    assert len(empty) == 0 and empty["query"].dtype == np.int64 and empty["rank"].dtype == np.int64
    assert empty["score"].dtype == np.float64
    c = fx.neighbour_counts(pd.concat([got.assign(method="z"), none.assign(method="a")], ignore_index=True))
    assert c["method"].tolist() == ["z", "a"] and c["matched"].dtype == np.int64
    assert c["matched"].tolist() == [1, 1] and c["mismatched"].tolist() == [2, 0]


def test_the_explanation_figure_shows_the_numbers_of_the_explanation(task):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nnn = task.fit(hn.NearestNeighborNormalization(alpha=0.75, k=8))
    raw_nk = hn.k_occurrence(task.fit(hn.Identity()), 1, queries=task.queries)
    e = fx.explain_target(nnn, int(np.argmax(raw_nk)), query_bank=task.query_bank, queries=task.queries,
                          positives=task.positives, k=1)
    axes = fx.plot_explanation(e, top=5)
    bars, scatter = axes
    heights = [p.get_width() for p in bars.patches]
    assert heights == pytest.approx(list(e.contributions["contribution"].head(5)) + [e.remainder])
    assert [t.get_text() for t in sorted(bars.get_yticklabels(), key=lambda t: -t.get_position()[1])] == \
        [f"q{int(i)}" for i in e.contributions["bank query"].head(5)] + ["remainder"]
    colors = [matplotlib.colors.to_hex(p.get_facecolor()) for p in bars.patches]
    assert colors == [matplotlib.colors.to_hex("tab:blue")] * 5 + [matplotlib.colors.to_hex("tab:gray")]
    assert bars.get_title() == f"NNN: target {e.target}, offset {e.offset:.4f}"
    assert bars.get_xlabel() == "contribution to the offset (weight x value)"
    assert scatter.get_title() == f"queries won: raw {len(e.wins['raw'])} (red), NNN {len(e.wins['NNN'])}"
    assert scatter.get_xlabel() == "rank of the true match, raw (1 = top)"
    assert scatter.get_ylabel() == "rank of the true match, NNN"
    assert scatter.get_xscale() == "log" and scatter.get_yscale() == "log"
    pts = scatter.collections[0].get_offsets()
    rc = e.rank_change
    assert np.array_equal(pts[:, 0], rc["true-match rank raw"] + 1) and np.array_equal(pts[:, 1], rc["true-match rank NNN"] + 1)
    red = matplotlib.colors.to_rgba("tab:red")
    assert [tuple(c) == red for c in scatter.collections[0].get_facecolors()] == rc["won raw"].tolist()
    line = scatter.lines[0].get_xydata()
    hi = max(pts.max(), 1) * 1.5
    assert line.tolist() == [[1, 1], [hi, hi]]
    plt.close("all")
    fig, axes = plt.subplots(1, 2)
    quiet = fx.explain_target(nnn, 0, query_bank=task.query_bank)
    fx.plot_explanation(quiet, axes)
    assert not axes[1].axison and axes[1].texts[0].get_text() == "no queries won (or no positives given)"
    assert len(axes[0].patches) == 16                                  # top = 15 by default, and the remainder
    plt.close("all")


@pytest.mark.parametrize("cache_dtype", [torch.float16, torch.bfloat16])
def test_every_target_of_a_float64_fit_with_a_16_bit_cache_is_explained(cache_dtype):
    """The cache's rounding (up to ~1e-5 of an offset here) is far above float64's tolerance (1e-6): only the
    cache-wide tolerance lets every target of its own bank be explained."""
    rng = np.random.default_rng(5)
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)   # noqa: E731
    mu = unit(rng.standard_normal((1, 16)))
    t, qb = unit(rng.standard_normal((60, 16)) + mu), unit(rng.standard_normal((300, 16)) + mu)
    sn = hn.SinkhornNormalization(tau=0.02, cache_dtype=cache_dtype).fit(t, query_bank=qb)
    rel = [e.identity_error / (abs(e.fitted_offset) + 1)
           for e in fx.explain_targets(sn, range(60), query_bank=qb)]
    assert 1e-6 < max(rel) < 2 * torch.finfo(cache_dtype).eps


def test_unnormalised_rows_are_explained_when_the_fit_allowed_them(task):
    scale = lambda x: 3.0 * np.asarray(x)   # noqa: E731   rows of norm 3: refused unless check_normalized=False
    nnn = hn.NearestNeighborNormalization(alpha=0.75, k=8, check_normalized=False).fit(
        scale(task.targets), query_bank=scale(task.query_bank))
    e = fx.explain_target(nnn, 2, query_bank=scale(task.query_bank), queries=scale(task.queries),
                          positives=task.positives)
    assert e.identity_error < 1e-9 and sum(e.n_k.values()) > 0
    strict = task.fit(hn.NearestNeighborNormalization(alpha=0.75, k=8))
    with pytest.raises(ValueError, match=r"^query_bank rows are not L2-normalised"):
        fx.explain_target(strict, 2, query_bank=scale(task.query_bank))


def test_banks_are_read_in_the_fits_dtype_and_checked_like_the_fit(task, monkeypatch):
    """A float32 fit explained from float64 banks (as a user holds them): the banks are cast to the fit's dtype;
    a DBSN target bank is checked for unit rows like the query bank; the block budget reaches the decomposition."""
    f32 = lambda x: np.asarray(x, dtype=np.float32)   # noqa: E731
    sn = hn.SinkhornNormalization(tau=0.02).fit(f32(task.targets), query_bank=f32(task.query_bank))
    e = fx.explain_target(sn, 4, query_bank=np.asarray(task.query_bank, dtype=np.float64))
    assert e.identity_error < 1e-3 and e.weights.dtype == np.float64
    dbsn = hn.DualBankSinkhornNormalization(tau=0.02, n_iter=5).fit(
        f32(task.targets), query_bank=f32(task.query_bank), target_bank=f32(task.target_bank))
    e = fx.explain_target(dbsn, 4, query_bank=np.asarray(task.query_bank), target_bank=np.asarray(task.target_bank))
    assert abs(e.offset - e.fitted_offset) < 1e-3 * (abs(e.fitted_offset) + 1)
    with pytest.raises(ValueError, match=r"^target_bank rows are not L2-normalised"):
        fx.explain_target(dbsn, 4, query_bank=task.query_bank, target_bank=3.0 * np.asarray(task.target_bank))
    seen = []
    real = type(sn).offset_decomposition
    monkeypatch.setattr(type(sn), "offset_decomposition",
                        lambda self, qb, tb=None, *, block_bytes=None: seen.append(block_bytes) or real(self, qb, tb,
                                                                                                      block_bytes=block_bytes))
    fx.explain_target(sn, 4, query_bank=task.query_bank, block_bytes=4096)
    assert seen == [4096]


def test_tied_contributions_keep_the_bank_order(task):
    """A bank of 4 distinct rows repeated 10 times: IS gives each copy the same weight and value, so the table lists
    tied copies in bank order (the stable rule of every ranking in the library)."""
    qb = np.repeat(np.asarray(task.query_bank)[:4], 10, axis=0)
    is_ = hn.InvertedSoftmax(tau=0.05).fit(task.targets, query_bank=qb)
    e = fx.explain_target(is_, 0, query_bank=qb, top=40)
    c = e.contributions
    for _, grp in c.groupby("contribution", sort=False):
        assert list(grp["bank query"]) == sorted(grp["bank query"]) and len(grp) == 10


def test_hub_neighbours_default_k_is_10(task):
    raw = task.fit(hn.Identity())
    n_k = hn.k_occurrence(raw, 10, queries=task.queries)
    j = int(np.argmax(n_k))
    assert len(fx.hub_neighbours(raw.iter_scores(task.queries), j, task.positives)) == n_k[j]
