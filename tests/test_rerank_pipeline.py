"""Retrieve-and-rerank pipeline, simulated cross-encoder, pair cache and cost model (offline, fast)."""

import numpy as np
import pytest

import hubnorm as hn
from hubnorm_companion.rerank_cost import CostModel
from hubnorm_companion.rerank_study import full_gallery_recall, make_cross_encoder, nnn_on_cross_encoder
from hubnorm.rerank import (
    CacheCorruptError, CrossEncoder, PairScoreCache, SimulatedCrossEncoder, combine_scores, first_stage_topk,
    nnn_bias_from_pairs, pair_noise, rerank,
)


class MatrixCE(CrossEncoder):
    """A cross-encoder that looks its scores up in a dense matrix (``direction=None``: it declares none)."""

    def __init__(self, scores, direction="t2i", cache_dir=None, model_id="matrix-ce"):
        self.S = np.asarray(scores, dtype=float)
        if direction is not None:
            self.direction = direction
        self.model_id = model_id
        super().__init__([f"q{i}" for i in range(self.S.shape[0])], [f"t{j}" for j in range(self.S.shape[1])],
                         cache_dir=cache_dir)

    def _score_uncached(self, q, t):
        return self.S[q, t]


def make_task(rng, n_img=30, cpi=3, d=16, noise=0.9):
    imgs = hn.l2_normalize(rng.standard_normal((n_img, d)).astype(np.float32))
    c2i = np.repeat(np.arange(n_img), cpi)
    caps = hn.l2_normalize(imgs[c2i] + noise * rng.standard_normal((c2i.size, d)).astype(np.float32))
    return hn.build_tasks(imgs, caps, c2i, image_bank=imgs, caption_bank=caps)


def full_final_order(first, res, i):
    """Brute force: reranked top-k followed by the first-stage order of everything else."""
    order = np.lexsort((np.arange(first.shape[1]), -first[i]))   # stable decreasing score
    top = res.final_topk[i]
    assert set(top) == set(order[:res.k])
    return np.concatenate([top, order[res.k:]])


@pytest.mark.parametrize("direction", ["t2i", "i2t"])
def test_reranks_only_topk_and_keeps_order_below_k(rng, direction):
    task = make_task(rng)[direction]
    first = task.queries @ task.targets.T
    ce = MatrixCE(rng.standard_normal(first.shape), direction)
    k = 7
    res = rerank(first, task, ce, k=k)
    assert res.pairs_scored == task.n_queries * k and res.pairs_per_query == k
    assert ce.n_pairs_computed == task.n_queries * k
    for i in range(task.n_queries):
        full = full_final_order(first, res, i)
        # the top-k is ordered by the cross-encoder score
        assert np.all(np.diff(ce.S[i, full[:k]]) <= 0)
        pos = task.positives.of(i)
        assert res.ranks[i] == np.flatnonzero(np.isin(full, pos))[0]
    assert np.array_equal(res.first_stage_ranks, hn.positive_ranks(first, task.positives))
    # R@K (K <= k) never exceeds the first stage's R@k
    for K in (1, 3, k):
        assert hn.recall_at_k(res.ranks, K) <= res.ceiling + 1e-9
    # positives beyond k keep their first-stage rank
    out = res.first_stage_ranks >= k
    assert np.array_equal(res.ranks[out], res.first_stage_ranks[out])


def test_perfect_scorer_with_k_equal_gallery_gives_r1_100(rng):
    task = make_task(rng)["t2i"]
    first = task.queries @ task.targets.T
    perfect = np.zeros(first.shape)
    perfect[task.positives.query_of_entry, task.positives.indices] = 1.0
    res = rerank(first, task, MatrixCE(perfect), k=task.n_targets)
    assert hn.summarize_ranks(res.ranks)["R@1"] == 100.0
    assert res.ceiling == 100.0
    # with a small k the perfect scorer reaches exactly the ceiling
    res5 = rerank(first, task, MatrixCE(perfect), k=5)
    assert hn.recall_at_k(res5.ranks, 1) == pytest.approx(res5.ceiling)


@pytest.mark.parametrize("norm", ["minmax", "zscore", "none"])
def test_lambda_ends(rng, norm):
    task = make_task(rng)["t2i"]
    nnn = task.fit(hn.make_normalizer("nnn", alpha=0.5, k=4))
    ce = MatrixCE(rng.standard_normal((task.n_queries, task.n_targets)))
    k = 10
    ce_only = rerank(nnn, task, ce, k=k)
    lam0 = rerank(nnn, task, ce, k=k, combine=0.0, score_norm=norm)
    lam1 = rerank(nnn, task, ce, k=k, combine=1.0, score_norm=norm)
    # lambda weights the first stage: 1 = first-stage order inside the top-k, 0 = cross-encoder order
    assert np.array_equal(lam1.order, np.tile(np.arange(k), (task.n_queries, 1)))
    assert np.array_equal(lam1.ranks, lam1.first_stage_ranks)
    assert np.array_equal(lam0.final_topk, ce_only.final_topk)
    assert np.array_equal(lam0.ranks, ce_only.ranks)
    # recombine reuses the stored scores without calling the cross-encoder again
    calls = ce.n_model_calls
    again = ce_only.recombine(1.0, norm)
    assert ce.n_model_calls == calls and np.array_equal(again.ranks, lam1.ranks)
    mid = ce_only.recombine(0.5, norm)
    assert np.all(mid.ranks <= np.maximum(mid.first_stage_ranks, k))


def test_normalizer_and_matrix_first_stage_agree(rng):
    task = make_task(rng)["t2i"]
    sn = task.fit(hn.make_normalizer("sn", tau=0.05))
    ce = MatrixCE(rng.standard_normal((task.n_queries, task.n_targets)))
    a = rerank(sn, task, ce, k=5)
    b = rerank(sn.score(task.queries).numpy(), task, ce, k=5)
    assert np.array_equal(a.candidates, b.candidates) and np.array_equal(a.ranks, b.ranks)
    assert a.meta["first_stage"] == "sn"


def test_first_stage_ties_follow_positive_ranks_convention():
    # heavy ties: scores on a coarse grid
    rng = np.random.default_rng(3)
    first = np.round(rng.random((40, 12)) * 3) / 3
    pos = hn.Positives.from_labels(rng.integers(0, 12, 40), 12)
    ids, vals, ranks = first_stage_topk(first, None, 5, positives=pos)
    assert np.array_equal(ranks, hn.positive_ranks(first, pos))
    for i in range(40):
        order = np.lexsort((np.arange(12), -first[i]))
        assert np.array_equal(ids[i], order[:5])


def test_errors(rng):
    task = make_task(rng)["t2i"]
    first = task.queries @ task.targets.T
    ce = MatrixCE(np.zeros(first.shape))
    n = task.n_targets
    with pytest.raises(ValueError, match="larger than"):
        rerank(first, task, ce, k=n + 1)
    for bad_k in (0, -3):
        with pytest.raises(ValueError, match=">= 1"):
            rerank(first, task, ce, k=bad_k)
    with pytest.raises(TypeError):
        rerank(first, task, ce, k=2.5)
    for lam in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="lambda"):
            rerank(first, task, ce, k=3, combine=lam)
    for lam in ("0.5", True):
        with pytest.raises(TypeError):
            rerank(first, task, ce, k=3, combine=lam)
    with pytest.raises(ValueError, match="score_norm"):
        rerank(first, task, ce, k=3, combine=0.5, score_norm="softmax")
    # cross-encoder built on other items
    with pytest.raises(ValueError, match="same items"):
        rerank(first, task, MatrixCE(np.zeros((5, n))), k=3)
    with pytest.raises(ValueError, match="'i2t'"):
        rerank(first, task, MatrixCE(np.zeros(first.shape), direction="i2t"), k=3)
    # mismatched / out-of-range pair ids
    with pytest.raises(ValueError, match="same length"):
        ce.score_pairs([0, 1], [0])
    with pytest.raises(ValueError, match="target_ids must lie"):
        ce.score_pairs([0], [n])
    with pytest.raises(ValueError, match="query_ids must lie"):
        ce.score_pairs([-1], [0])
    with pytest.raises(TypeError):
        ce.score_pairs([0.5], [0])
    # first-stage matrix of the wrong shape, unfitted normalizer
    with pytest.raises(ValueError):
        rerank(first[:, :-1], task, ce, k=3)
    with pytest.raises(ValueError, match="not fitted"):
        rerank(hn.make_normalizer("nnn"), task, ce, k=3)
    with pytest.raises(ValueError):
        combine_scores(np.zeros((2, 3)), np.zeros((2, 4)), 0.5)


def test_cross_encoder_counts_and_cache(tmp_path, rng):
    S = rng.standard_normal((6, 9))
    ce = MatrixCE(S, cache_dir=tmp_path)
    q, t = np.array([0, 1, 1, 5]), np.array([2, 3, 3, 8])
    s1 = ce.score_pairs(q, t)
    assert np.allclose(s1, S[q, t]) and ce.n_pairs_computed == 3 and ce.n_model_calls == 1  # duplicate pair once
    again = MatrixCE(S, cache_dir=tmp_path)
    assert np.array_equal(again.score_pairs(q, t), s1) and again.n_model_calls == 0
    again.score_pairs([0, 4], [2, 4])
    assert again.n_pairs_computed == 1
    # a different model id never reads this cache
    other = MatrixCE(S * 0, cache_dir=tmp_path, model_id="other")
    assert other.score_pairs([0], [2])[0] == 0 and other.n_model_calls == 1


@pytest.mark.parametrize("damage", ["flip", "truncate", "magic", "model"])
def test_corrupt_cache_detected(tmp_path, damage):
    c = PairScoreCache(tmp_path, "m1")
    c.put_many(["a", "b"], ["x", "y"], [0.25, 0.75])
    c.flush()
    assert PairScoreCache(tmp_path, "m1").get("b", "y") == 0.75
    assert not list(tmp_path.glob("*.tmp"))  # atomic write leaves no temporary file
    data = bytearray(c.path.read_bytes())
    if damage == "flip":
        data[-20] ^= 0xFF
    elif damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "magic":
        data[:4] = b"XXXX"
    c.path.write_bytes(bytes(data))
    if damage == "model":   # a file of another model under this model's name
        other = PairScoreCache(tmp_path, "m2")
        other.put_many(["a"], ["x"], [1.0])
        other.flush()
        other.path.replace(c.path)
    with pytest.raises(CacheCorruptError, match="corrupt"):
        PairScoreCache(tmp_path, "m1")


def test_pair_noise_is_deterministic_and_normal():
    a = np.arange(20000)
    b = np.arange(20000)[::-1]
    z = pair_noise(7, a, b)
    assert np.array_equal(z, pair_noise(7, a, b))
    assert np.array_equal(z[::-1], pair_noise(7, a[::-1], b[::-1]))
    assert abs(z.mean()) < 0.03 and abs(z.std() - 1) < 0.03
    assert not np.array_equal(z, pair_noise(8, a, b))


def test_simulated_cross_encoder_on_synthetic_data():
    from hubnorm.synthetic import make_dataset

    ds = make_dataset("flickr30k", n_train_images=256, n_test_images=200, n_val_images=1)
    test = ds.split("test")
    tasks = ds.tasks("test", "train")
    for direction in ("t2i", "i2t"):
        task = tasks[direction]
        ce = SimulatedCrossEncoder.from_split(test, direction, seed=0)
        assert ce.kind == "simulated" and "simulated" in ce.model_id
        raw = task.fit(hn.make_normalizer("raw"))
        res = rerank(raw, task, ce, k=10)
        assert hn.recall_at_k(res.ranks, 1) > hn.recall_at_k(res.first_stage_ranks, 1)
        assert hn.recall_at_k(res.ranks, 1) < 100.0 or direction == "i2t"
        # deterministic per pair: the same pair scores the same in any batch and order
        q, t = np.repeat(np.arange(5), 3), np.tile(np.arange(3), 5)
        s = ce.score_pairs(q, t)
        assert np.array_equal(s[::-1], SimulatedCrossEncoder.from_split(test, direction).score_pairs(q[::-1], t[::-1]))
        assert np.all((s > 0) & (s < 1))
    # bank queries from another split never match a test target
    bank = SimulatedCrossEncoder.from_splits(ds.split("train"), test, "t2i")
    assert not np.any(bank.query_image[:, None] == bank.target_image[None, :])


def test_nnn_bias_from_pairs():
    targets = np.array([0, 0, 0, 1, 1, 3])
    scores = np.array([0.9, 0.1, 0.5, 0.2, 0.4, 1.0])
    b = nnn_bias_from_pairs(targets, scores, 4, k=2, alpha=0.5)
    assert b[0] == pytest.approx(0.5 * 0.7) and b[1] == pytest.approx(0.5 * 0.3) and b[3] == pytest.approx(0.5)
    assert b[2] == pytest.approx(np.mean([0.7, 0.3, 1.0]) * 0.5)   # never retrieved: mean of the others


def test_cost_model_formulas():
    cm = CostModel(pair_s=0.5, query_embed_s=0.01, topk_per_target_s=1e-6, topk_base_s=0.001, image_embed_s=0.2)
    q = cm.per_query(50_000, k=20)
    assert q["EMB"] == pytest.approx(0.01 + 0.001 + 0.05)
    assert q["Co"] == pytest.approx(q["EMB"] + 20 * 0.5)
    assert q["CE"] == pytest.approx(50_000 * 0.5)
    ev = cm.evaluation(1000, 5, k=20)
    assert ev["CE"] == pytest.approx(5000 * 1000 * 0.5)
    assert ev["EMB"] == pytest.approx(1000 * 0.2 + 5000 * (0.01 + 0.001 + 1e-3))
    t3 = cm.table3()
    assert list(t3["model"]) == ["EMB", "Co", "CE"] and "1,000,000" in t3.columns


def test_make_cross_encoder_choices_and_clear_errors(tmp_path):
    from hubnorm.synthetic import make_dataset

    test = make_dataset("flickr30k", n_train_images=1, n_test_images=40, n_val_images=1).split("test")
    ce = make_cross_encoder("simulated", test, "t2i", seed=3)
    ref = SimulatedCrossEncoder.from_split(test, "t2i", seed=3)
    q, t = np.arange(10), np.arange(10) % 4
    np.testing.assert_array_equal(ce.score_pairs(q, t), ref.score_pairs(q, t))
    real = hn.EmbeddingSplit(images=test.images, captions=test.captions, caption_to_image=test.caption_to_image)
    with pytest.raises(ValueError, match="cross_encoder='blip'"):
        make_cross_encoder("simulated", real, "t2i")
    with pytest.raises(ValueError, match="images and the caption texts"):
        make_cross_encoder("blip", real, "t2i")
    named = hn.EmbeddingSplit(images=test.images, captions=test.captions, caption_to_image=test.caption_to_image,
                              image_ids=[f"img{i}" for i in range(test.n_images)],
                              caption_texts=["a caption"] * test.n_captions)
    with pytest.raises(ValueError, match="image files: 40 of 40 are absent.*image_dir"):
        make_cross_encoder("blip", named, "t2i", image_dir=tmp_path)
    with pytest.raises(ValueError, match="cross_encoder must be one of"):
        make_cross_encoder("oscar", test, "t2i")


def test_full_gallery_recall_matches_dense_ranks(rng):
    task = make_task(rng)["t2i"]
    S = rng.standard_normal((task.n_queries, task.n_targets))
    got = full_gallery_recall(task, MatrixCE(S), every=4)
    sub = np.arange(0, task.n_queries, 4)
    ranks = hn.positive_ranks(S[sub], task.positives.subset(sub))
    assert got["R@1"] == hn.recall_at_k(ranks, 1) and got["R@5"] == hn.recall_at_k(ranks, 5)
    assert got["queries"] == sub.size and got["pairs/query"] == task.n_targets
    with pytest.raises(ValueError, match="every"):
        full_gallery_recall(task, MatrixCE(S), every=0)


def test_nnn_on_cross_encoder_against_dense_oracle(rng):
    """A cross-encoder with a per-target popularity bias (hubs): NNN on its scores, computed from the bank's
    top-k pairs, equals a dense re-implementation and removes most of the bias."""
    task = make_task(rng, n_img=40, noise=0.5)["t2i"]
    first = task.fit(hn.make_normalizer("raw"))
    n = task.n_targets
    truth = np.zeros((task.n_queries, n))
    for i in range(task.n_queries):
        truth[i, task.positives.of(i)] = 1.0
    pop = np.zeros(n)
    pop[rng.choice(n, 4, replace=False)] = 2.0                      # four hub images
    S = 1.5 * truth + 0.3 * rng.standard_normal(truth.shape) + pop
    bank = task.query_bank
    B = 0.3 * rng.standard_normal((len(bank), n)) + pop             # bank captions: no positives, same hubs
    base = rerank(first, task, MatrixCE(S), k=10)
    out = nnn_on_cross_encoder(base, first, bank, MatrixCE(B), alphas=(0.5, 1.0), k=3)
    assert list(out["variant"]) == ["CE only", "NNN on CE scores", "NNN on CE scores"]
    assert out["extra pairs"].iloc[0] == len(bank) * 10
    # dense oracle of the bias
    cand, _ = first_stage_topk(first, bank, 10)
    got_scores = {j: sorted(B[q, j] for q in range(len(bank)) if j in cand[q]) for j in range(n)}
    bias = np.array([np.mean(v[-3:]) if v else np.nan for v in got_scores.values()])
    bias[np.isnan(bias)] = np.nanmean(bias)
    for i, a in enumerate((0.5, 1.0), start=1):
        r = base.with_scores(base.ce_scores - a * bias[base.candidates])
        assert out["R@1"].iloc[i] == pytest.approx(hn.recall_at_k(r.ranks, 1))
        assert out["R@5"].iloc[i] == pytest.approx(hn.recall_at_k(r.ranks, 5))
    assert out["gain R@1"].iloc[-1] > 0                              # the hubs were the errors
    with pytest.raises(ValueError, match="bank_query_ids"):
        nnn_on_cross_encoder(base, first, bank, MatrixCE(B), bank_query_ids=np.arange(3))


@pytest.mark.parametrize("direction", ["t2i", "i2t"])
def test_distractors_enlarge_the_gallery_and_never_match(direction):
    """Geigle et al. Table 5: the task with distractors keeps queries, positives and banks; the cross-encoder over
    the enlarged gallery scores the original targets as before and never matches a distractor."""
    from hubnorm.synthetic import make_dataset

    ds = make_dataset("flickr30k", n_train_images=64, n_test_images=30, n_val_images=1)
    other = make_dataset("coco", n_train_images=1, n_test_images=12, n_val_images=1).split("test")
    test, task = ds.split("test"), ds.tasks("test", "train")[direction]
    extra = other.images if direction == "t2i" else other.captions
    big = task.with_distractors(extra)
    assert big.n_targets == task.n_targets + len(extra) and big.meta["distractors"] == len(extra)
    np.testing.assert_array_equal(big.targets[: task.n_targets], task.targets)
    np.testing.assert_array_equal(big.targets[task.n_targets:], extra.astype(big.targets.dtype))
    assert big.positives.n_targets == big.n_targets
    np.testing.assert_array_equal(big.positives.indices, task.positives.indices)
    assert big.query_bank is task.query_bank and big.queries is task.queries
    # raw ranks (dense oracle): each distractor scoring above a query's best positive pushes it down one place; a
    # tie does not (a distractor's index is above every test target's: the lower index ranks first)
    S = np.asarray(big.queries, np.float64) @ np.asarray(big.targets, np.float64).T
    ranks = hn.positive_ranks(S, big.positives)
    small = hn.positive_ranks(S[:, : task.n_targets], task.positives)
    best = np.array([S[q, task.positives.of(q)].max() for q in range(task.n_queries)])
    np.testing.assert_array_equal(ranks, small + (S[:, task.n_targets:] > best[:, None]).sum(axis=1))
    ce = make_cross_encoder("simulated", test, direction, distractors=other, seed=2)
    ref = make_cross_encoder("simulated", test, direction, seed=2)
    q = np.repeat(np.arange(4), task.n_targets)
    t = np.tile(np.arange(task.n_targets), 4)
    np.testing.assert_array_equal(ce.score_pairs(q, t), ref.score_pairs(q, t))
    assert ce.n_targets == big.n_targets
    assert not np.isin(ce.target_image[task.n_targets:], ce.query_image).any()
    res = rerank(big.fit(hn.make_normalizer("raw")), big, ce, k=10)
    assert res.ranks.shape == (task.n_queries,)
    with pytest.raises(ValueError, match="distractors"):
        task.with_distractors(np.zeros((0, task.targets.shape[1])))
    with pytest.raises(ValueError, match="distractors"):
        task.with_distractors(extra[:, :5])
    real = hn.EmbeddingSplit(images=other.images, captions=other.captions, caption_to_image=other.caption_to_image)
    with pytest.raises(ValueError, match="cross_encoder='blip'"):
        make_cross_encoder("simulated", test, direction, distractors=real)
