"""Hardening of the public API against the failure families of issue 11 (one section per family).

Each test would fail on the code before the fix: silent wrong results (ranks from non-finite or imprecise
offsets, truncated indices) or raw errors that never name the argument.
"""

import json

import numpy as np
import pytest
import torch
from scipy.special import logsumexp

import hubnorm as hn
from conftest import unit_rows
from hubnorm._validation import resolve_device
from hubnorm.kernels import topk_similarity
from hubnorm.normalizers.base import stable_topk
from hubnorm.normalizers.nnn import nnn_bias_fast, nnn_bias_plain

pytestmark = pytest.mark.usefixtures("single_thread_torch")

RNG = np.random.default_rng(11)
Q, T, QB, TB = (unit_rows(RNG, n, 16) for n in (40, 30, 200, 50))
ALL = sorted(hn.NORMALIZERS)


def _make(name, **kw):
    cls = hn.NORMALIZERS[name]
    for p, spec in cls.parameters.items():  # limited parameters (NNN's, CSLS's k) at small-problem values
        if spec.limited_by and p in cls.example_params:
            kw.setdefault(p, cls.example_params[p])
    kw.setdefault("device", "cpu")
    return hn.make_normalizer(name, **kw)


def _order(x):
    return np.argsort(-np.asarray(x), axis=1, kind="stable")


# ------------------------------------------------------------------ 1. parameters checked before any work
@pytest.mark.parametrize("name,params,error,match", [
    ("nnn", {"k": 0}, ValueError, "k must be >= 1"),
    ("nnn", {"k": -3}, ValueError, "k must be >= 1; got -3"),
    ("nnn", {"alpha": float("nan")}, ValueError, "alpha must be finite"),
    ("nnn", {"implementation": "turbo"}, ValueError, "implementation must be one of"),
    ("csls", {"k": 0}, ValueError, "k must be >= 1"),
    ("dis", {"k": -1}, ValueError, "k must be >= 1"),
    ("is", {"tau": float("nan")}, ValueError, "tau must be a finite number > 0"),
    ("is", {"tau": -0.02}, ValueError, "tau must be a finite number > 0"),
    ("sn", {"tau": float("nan")}, ValueError, "tau must be a finite number > 0"),
    ("dbsn", {"tau": -1.0}, ValueError, "tau must be a finite number > 0"),
    ("dualis", {"beta_query": float("nan")}, ValueError, "beta_query must be finite"),
    ("dn", {"lam": float("inf")}, ValueError, "lam must be finite"),
])
def test_check_params_rejects_invalid_settings_without_fitting(name, params, error, match):
    """``check_params`` (what a sweep calls per setting) rejects what ``fit`` rejects, with no data at all."""
    norm = _make(name, **params)
    with pytest.raises(error, match=match):
        norm.check_params()
    with pytest.raises(error, match=match):
        norm.fit(T, query_bank=QB, target_bank=TB)
    assert _make(name).check_params().get_params()  # valid defaults pass and return the normalizer


# ------------------------------------------------------------------ 2. extreme but valid temperatures
def _is_reference(tau, bank=QB, targets=T):
    S = bank.astype(np.float64) @ targets.astype(np.float64).T
    return -tau * (logsumexp(S / tau, axis=0) - np.log(len(bank)))


@pytest.mark.parametrize("tau", [1e4, 1e6, 1e-6, 1e-40])
def test_inverted_softmax_keeps_float32_rankings_at_extreme_tau(tau):
    """Before: tau = 1e6 put ~5e6-sized offsets on O(1) scores (9% of rows ranked right), tau = 1e-40 gave
    -inf. Now the centred offsets match a float64 oracle and every row ranks as in float64."""
    norm = hn.InvertedSoftmax(tau=tau, device="cpu").fit(T, query_bank=QB)
    assert norm.offsets_.dtype == torch.float32
    np.testing.assert_allclose(norm.offsets, _is_reference(tau), atol=2e-6)
    ref_scores = Q.astype(np.float64) @ T.astype(np.float64).T + _is_reference(tau)
    np.testing.assert_array_equal(_order(norm.score(Q)), _order(ref_scores))
    assert np.isfinite(hn.evaluate(norm, hn.RetrievalTask(Q, T, hn.Positives.from_labels(np.arange(40) % 30, 30)))["MnR"])


def test_inverted_softmax_offsets_with_a_shared_cache_are_bit_identical():
    """What a tau sweep uses (one GEMM pass for every tau) gives exactly the offsets of ``fit``."""
    from hubnorm.normalizers.inverted_softmax import inverted_softmax_offsets
    cache = {}
    t, b = torch.from_numpy(T), torch.from_numpy(QB)
    for tau in (0.01, 0.05, 1e5, 0.02):  # 1e5 runs in float64: its blocks are cached separately
        shared = inverted_softmax_offsets(t, b, tau, 30 * 4 * 64, cache=cache)
        alone = hn.InvertedSoftmax(tau=tau, device="cpu", block_bytes=30 * 4 * 64).fit(T, query_bank=QB).offsets_
        assert torch.equal(shared, alone)
    assert len(cache) > 1


@pytest.mark.parametrize("beta", [1e-4, 1e-7])
def test_dualis_keeps_float32_rankings_at_tiny_beta(beta):
    norm = hn.DualInvertedSoftmax(beta_query=beta, beta_target=0.0, device="cpu").fit(T, query_bank=QB, target_bank=TB)
    ref = _is_reference(1.0 / beta)  # beta_target = 0: DualIS is IS with tau = 1 / beta_query
    np.testing.assert_allclose(norm.offsets, ref, atol=2e-6)
    np.testing.assert_array_equal(_order(norm.score(Q)), _order(Q.astype(np.float64) @ T.T.astype(np.float64) + ref))


def _sinkhorn64(bank, targets, tau, n_iter):
    S = bank.astype(np.float64) @ targets.astype(np.float64).T
    m, n = S.shape
    g = np.zeros(n)
    for _ in range(n_iter):
        f = -tau * np.log(m) - tau * logsumexp((S + g) / tau, axis=1)
        g = -tau * np.log(n) - tau * logsumexp((S + f[:, None]) / tau, axis=0)
    return g


@pytest.mark.parametrize("tau", [1e3, 1e6])
def test_sinkhorn_keeps_float32_rankings_at_large_tau(tau):
    """Before: SN at tau = 1e6 had offset errors of ~5 (the offsets are ~0.05): 9% of rows ranked right."""
    norm = hn.SinkhornNormalization(tau=tau, n_iter=5, device="cpu").fit(T, query_bank=QB)
    g = _sinkhorn64(QB, T, tau, 5)
    np.testing.assert_allclose(norm.offsets, g, atol=2e-6)
    np.testing.assert_array_equal(_order(norm.score(Q)), _order(Q.astype(np.float64) @ T.T.astype(np.float64) + g))


@pytest.mark.parametrize("name,params,match", [
    ("is", {"tau": 1e13}, "tau=1e\\+13 is too extreme"),
    ("dis", {"tau": 1e13}, "tau=1e\\+13 is too extreme"),
    ("dualis", {"beta_query": 1e-13, "beta_target": 0.0}, "beta_query=1e-13 is too extreme"),
    ("sn", {"tau": 1e13}, "tau=1e\\+13 is too extreme"),
    ("is", {"tau": 1e-310}, "too extreme"),
])
def test_temperatures_beyond_float64_are_refused_naming_the_parameter(name, params, match):
    with pytest.raises(ValueError, match=match):
        _make(name, **params).fit(T, query_bank=QB, target_bank=TB)


# ------------------------------------------------------------------ 3. non-finite scores have no rank
@pytest.mark.parametrize("bad", [np.nan, -np.inf, np.inf])
def test_evaluators_refuse_non_finite_scores(bad):
    S = RNG.standard_normal((12, 10))
    S[7, 3] = bad
    pos = hn.Positives.from_labels(np.arange(12) % 10, 10)
    with pytest.raises(ValueError, match="first in query row 7"):
        hn.positive_ranks(S, pos)
    with pytest.raises(ValueError, match="non-finite score has no rank"):
        hn.k_occurrence(torch.from_numpy(S), 3)
    with pytest.raises(ValueError, match="non-finite"):
        hn.evaluate(_FixedScores(S), hn.RetrievalTask(Q[:12, :], T[:10], pos))


class _FixedScores:
    """A stand-in scorer whose scores are given (the evaluators accept anything with ``iter_scores``)."""

    def __init__(self, S):
        self.S = torch.from_numpy(S)

    def iter_scores(self, queries, chunk_size=None):
        yield 0, self.S[:6]
        yield 6, self.S[6:]


# ------------------------------------------------------------------ 4. Positives never truncate indices
def test_positives_refuse_float_indices():
    """Before: ``Positives(indptr, [0.9], n)`` silently made target 0 the positive. Floats are refused even
    when integral (1.0): the caller converts explicitly, as ``from_labels`` and ``build_tasks`` already ask."""
    with pytest.raises(TypeError, match="Positives.indices must hold integers; got dtype float64"):
        hn.Positives(np.array([0, 1]), np.array([0.9]), 3)
    with pytest.raises(TypeError, match="Positives.indices must hold integers"):
        hn.Positives(np.array([0, 1]), np.array([1.0]), 3)
    with pytest.raises(TypeError, match="Positives.indptr must hold integers"):
        hn.Positives(np.array([0.0, 1.0]), np.array([1]), 3)
    with pytest.raises(TypeError, match="lists must hold integers"):
        hn.Positives.from_lists([[0.5], [1]], 3)
    with pytest.raises(TypeError, match="n_targets must be a positive integer"):
        hn.Positives(np.array([0, 1]), np.array([1]), 2.5)
    pos = hn.Positives.from_lists([[0, 2], [1]], 3)
    with pytest.raises(TypeError, match="queries must hold integers"):
        pos.subset(np.array([0.7]))
    with pytest.raises(ValueError, match="queries must lie in \\[0, 2\\)"):
        pos.subset([2])
    assert pos.subset([1]).of(0).tolist() == [1]
    assert hn.Positives(torch.tensor([0, 1]), torch.tensor([2]), 3).indices.tolist() == [2]


# ------------------------------------------------------------------ 5. the faiss bank index refuses NaN
def test_bank_index_refuses_non_finite_rows_and_bad_options():
    index = pytest.importorskip("hubnorm.index", reason="faiss is not installed")
    bank = QB.copy()
    bank[17, 3] = np.nan
    with pytest.raises(ValueError, match="vectors contains NaN or Inf in 1 row"):
        index.BankIndex(bank)
    good = index.BankIndex(QB, nlist=1)
    bad_q = T.copy()
    bad_q[2] = np.inf
    with pytest.raises(ValueError, match="queries contains NaN or Inf in 1 row"):
        good.search(bad_q, 3)
    with pytest.raises(ValueError, match="queries has dimension 8"):
        good.search(T[:, :8], 3)
    with pytest.raises(TypeError, match="vectors must hold floating-point"):
        index.BankIndex(QB.astype(np.int64))
    with pytest.raises(TypeError, match="seed must be a non-negative integer"):
        index.BankIndex(QB, seed="0")
    with pytest.raises(ValueError, match="niter must be >= 1"):
        index.BankIndex(QB, niter=0)
    with pytest.raises(ValueError, match="recall_target must be in \\(0, 1\\]"):
        index.FaissNNN(k=4, recall_target=1.5).fit(T, query_bank=QB)
    with pytest.raises(TypeError, match="seed must be a non-negative integer"):
        index.FaissNNN(k=4, seed="1").fit(T, query_bank=QB)
    with pytest.raises(TypeError, match="sample_size must be an integer"):
        good.tune_nprobe(T, 3, sample_size="64")
    v, _ = good.search(T, 3)
    assert np.isfinite(v).all()


# ------------------------------------------------------------------ 6. devices name `device`
@pytest.mark.parametrize("device,match", [
    ("gpu", "device='gpu' is not a device name"),
    ("cpux", "device='cpux' is not a device name"),
    ("cuda:99", "cuda"),
    ("meta", "hubnorm runs on"),
])
def test_bad_devices_raise_value_errors_naming_device(device, match):
    if device == "cuda:99" and torch.cuda.is_available() and torch.cuda.device_count() > 99:  # pragma: no cover
        pytest.skip("this machine has 100 GPUs")
    with pytest.raises(ValueError, match=match):
        resolve_device(device)
    with pytest.raises(ValueError, match="device="):
        _make("nnn", device=device).check_params()


def test_cuda_and_mps_without_the_hardware_say_how_to_fix():
    if torch.cuda.is_available():
        assert resolve_device("cuda").type == "cuda"
    else:
        with pytest.raises(ValueError, match="device='cuda' but CUDA is not available.*sees no CUDA GPU.*device='cpu'"):
            resolve_device("cuda")
        with pytest.raises(ValueError, match="no CUDA GPU"):
            hn.InvertedSoftmax(device="cuda").fit(T, query_bank=QB)
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():  # pragma: no cover - Apple only
        assert resolve_device("mps").type == "mps"
    else:
        with pytest.raises(ValueError, match="device='mps' but Apple MPS is not available"):
            resolve_device("mps")
    with pytest.raises(TypeError, match="device must be None, a string"):
        resolve_device(0)
    assert resolve_device(torch.device("cpu")).type == "cpu"


# ------------------------------------------------------------------ 7. autograd: inputs are detached
@pytest.mark.parametrize("name", ALL)
def test_requires_grad_inputs_are_detached_in_every_method(name):
    """One behaviour for all methods: tensors that require grad are detached; no result carries a graph."""
    Qs = QB if getattr(hn.NORMALIZERS[name], "transductive", False) else Q   # a plan scores its fitted rows only
    t, qb, tb, q = (torch.from_numpy(x).requires_grad_() for x in (T, QB, TB, Qs))
    norm = _make(name).fit(t, query_bank=qb, target_bank=tb)
    scores = norm.score(q)
    assert not scores.requires_grad and scores.grad_fn is None
    assert not norm.targets_.requires_grad
    vals, idx = norm.topk(q, 3)
    assert not vals.requires_grad
    ref = _make(name).fit(T, query_bank=QB, target_bank=TB).score(Qs)
    torch.testing.assert_close(scores, ref)
    assert t.grad is None and t.requires_grad  # the caller's tensors are untouched


# ------------------------------------------------------------------ 8. execution options are validated
@pytest.mark.parametrize("name", [n for n in ALL if "block_bytes" in hn.NORMALIZERS[n]._param_names()])
def test_block_bytes_validated(name):
    with pytest.raises(TypeError, match="block_bytes must be None or an integer number of bytes"):
        _make(name, block_bytes="1MB").check_params()
    with pytest.raises(TypeError, match="block_bytes must be None or an integer"):
        _make(name, block_bytes=2.5e6).check_params()
    with pytest.raises(ValueError, match="block_bytes must be >= 1"):
        _make(name, block_bytes=0).check_params()


def test_cache_options_seeds_and_flags_validated():
    with pytest.raises(TypeError, match="cache_dtype must be None or a torch floating dtype"):
        hn.SinkhornNormalization(cache_dtype="float16").check_params()
    with pytest.raises(TypeError, match="cache_dtype"):
        hn.SinkhornNormalization(cache_dtype=torch.int8).check_params()
    with pytest.raises(TypeError, match="cache_bytes must be None or an integer"):
        hn.SinkhornNormalization(cache_bytes="2GB").check_params()
    with pytest.raises(ValueError, match="cache_bytes must be >= 0"):
        hn.SinkhornNormalization(cache_bytes=-1).check_params()
    hn.SinkhornNormalization(cache_dtype=torch.float16, cache_bytes=0).check_params()
    with pytest.raises(TypeError, match="seed must be a non-negative integer"):
        hn.DistributionNormalization(seed="7").check_params()
    with pytest.raises(ValueError, match="seed must be in \\[0, 2\\*\\*63\\)"):
        hn.DistributionNormalization(seed=-1).check_params()
    with pytest.raises(TypeError, match="check_normalized must be True or False"):
        hn.InvertedSoftmax(check_normalized="no").check_params()
    from hubnorm.synthetic import make_dataset
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        make_dataset("coco", seed="1", n_train_images=4, n_test_images=4, dim=8)


# ------------------------------------------------------------------ 9. malformed cache manifests
def _entry(tmp_path):
    from hubnorm.data import cache as c
    folder = tmp_path / "entry"
    imgs = unit_rows(RNG, 3, 4)
    caps = unit_rows(RNG, 6, 4)
    c.write_entry(folder, {"dataset": "x"}, imgs, caps, np.repeat(np.arange(3), 2), ["a", "b", "c"], list("uvwxyz"))
    return folder


@pytest.mark.parametrize("breakage", [
    lambda m: m.pop("files"),
    lambda m: m["files"]["captions.npy"].pop("sha256"),
    lambda m: m.__setitem__("key", None),
    lambda m: m["files"].__setitem__("images.npy", "abc"),
    lambda m: m["key"].__setitem__("versions", "torch 2"),
    lambda m: m["files"]["texts.json"].__setitem__("rows", "6"),
    lambda m: m.pop("n_images"),
])
def test_malformed_manifest_is_a_cache_error(tmp_path, breakage):
    from hubnorm.data import cache as c
    folder = _entry(tmp_path)
    c.read_entry(folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    breakage(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(c.CacheError, match="malformed") as info:
        c.read_entry(folder, {"dataset": "x", "versions": {"torch": "2"}})
    assert info.value.reason == "corrupt"


def test_malformed_texts_file_is_a_cache_error(tmp_path):
    from hubnorm.data import cache as c
    folder = _entry(tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "texts.json").write_text("[1, 2]")
    manifest["files"]["texts.json"]["sha256"] = c.sha256_file(folder / "texts.json")
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(c.CacheError, match="is not a texts file"):
        c.read_entry(folder)


def test_encode_reencodes_over_a_malformed_manifest(tmp_path):
    from test_data_pipeline import StubEncoder, make_tiny_coco
    from hubnorm.data import CacheWarning, encode_split
    from hubnorm.data import cache as c
    data, cache = make_tiny_coco(tmp_path / "data"), tmp_path / "cache"
    stub = StubEncoder()

    def encode():
        return encode_split("coco", "test", "M", None, data_dir=data, cache_dir=cache, encoder=stub, progress=False)

    encode()
    assert stub.calls == 1
    folder = c.entry_dir("coco", "M", None, "test", cache)
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["files"]["images.npy"]["sha256"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.warns(CacheWarning, match="malformed"):
        encode()
    assert stub.calls == 2
    encode()  # the rewritten entry is valid again
    assert stub.calls == 2


# ------------------------------------------------------------------ 10. truncated local .npy files
def test_truncated_local_npy_names_the_file(tmp_path):
    from hubnorm.data import load_local_embeddings
    folder = tmp_path / "emb"
    folder.mkdir()
    np.save(folder / "image_embeddings.npy", unit_rows(RNG, 6, 4))
    np.save(folder / "text_embeddings.npy", unit_rows(RNG, 6, 4))
    raw = (folder / "text_embeddings.npy").read_bytes()
    (folder / "text_embeddings.npy").write_bytes(raw[: len(raw) - 20])
    with pytest.raises(ValueError, match="text_embeddings.npy cannot be read as a .npy array.*truncated"):
        load_local_embeddings(folder)
    np.save(folder / "text_embeddings.npy", np.ones(6, np.float32))
    with pytest.raises(ValueError, match="text_embeddings.npy: expected a 2-D float array"):
        load_local_embeddings(folder)
    stacked = tmp_path / "features_clip.npy"
    stacked.write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(ValueError, match="features_clip.npy cannot be read"):
        load_local_embeddings(stacked)


# ------------------------------------------------------------------ 11. CLI verify exit codes
def test_cli_verify_fails_when_nothing_is_cached_or_the_dataset_is_unknown(tmp_path, capsys):
    from hubnorm.data.cli import main
    common = ["--model", "ViT-B-32-quickgelu", "--pretrained", "openai", "--cache-dir", str(tmp_path)]
    assert main(["verify", "coco"] + common) == 1
    err = capsys.readouterr().err
    assert "nothing to verify: no cached embeddings of coco" in err and "python -m hubnorm.data encode coco" in err
    assert main(["verify", "cocoa"] + common) == 2
    assert "unknown dataset 'cocoa'" in capsys.readouterr().err
    assert main(["verify", "coco", "--split", "tset"] + common) == 2
    assert "unknown split 'tset'" in capsys.readouterr().err


# ------------------------------------------------------------------ 12. top-k ties: lowest index first
def test_topk_breaks_exact_ties_by_lowest_index_like_positive_ranks():
    """Duplicate targets score exactly alike; ``topk`` must list them lowest index first, the order
    ``positive_ranks`` counts (rank = #higher + #tied with a smaller index)."""
    base = unit_rows(RNG, 6, 8)
    targets = np.concatenate([base, base, base])[np.random.default_rng(3).permutation(18)]
    queries = unit_rows(RNG, 25, 8)
    norm = hn.Identity(device="cpu").fit(targets)
    vals, idx = norm.topk(queries, 18)
    S = torch.from_numpy(queries) @ torch.from_numpy(targets).T
    ref = torch.sort(S, dim=1, descending=True, stable=True)
    torch.testing.assert_close(vals, ref.values)
    assert torch.equal(idx, ref.indices)
    for k in (1, 2, 4):  # a tie straddling the k-th place keeps the lowest index
        assert torch.equal(norm.topk(queries, k)[1], ref.indices[:, :k])
    # k_occurrence counts the same top-k sets
    n_k = hn.k_occurrence(norm, 2, queries)
    np.testing.assert_array_equal(n_k, np.bincount(ref.indices[:, :2].reshape(-1).numpy(), minlength=18))
    # positive_ranks agrees: the rank of target idx[i, r] is r
    for r in (0, 1, 5):
        pos = hn.Positives.from_labels(idx[:, r].numpy(), 18)
        assert (hn.positive_ranks(norm, pos, queries) == r).all()


def test_stable_topk_on_integer_valued_scores():
    g = torch.Generator().manual_seed(0)
    s = torch.randint(0, 4, (300, 40), generator=g).float()
    for k in (1, 3, 17, 40):
        v, i = stable_topk(s.clone(), k)
        ref = torch.sort(s, dim=1, descending=True, stable=True)
        assert torch.equal(v, ref.values[:, :k]) and torch.equal(i, ref.indices[:, :k])


# ------------------------------------------------------------------ 13. NNN: the method and its kernel
@pytest.mark.parametrize("block_bytes", [None, 30 * 4 * 64, 4 * 1000])
def test_nnn_fast_bias_equals_the_plain_formula(block_bytes):
    rng = np.random.default_rng(5)
    targets = torch.from_numpy(unit_rows(rng, 300, 24))
    bank = torch.from_numpy(unit_rows(rng, 5000, 24))
    for alpha, k in ((0.75, 1), (0.5, 16), (1.25, 128)):
        fast = nnn_bias_fast(targets, bank, alpha, k, block_bytes)
        plain = nnn_bias_plain(targets, bank, alpha, k, block_bytes)
        torch.testing.assert_close(fast, plain, rtol=0, atol=1e-6)
        dense = alpha * (targets.double() @ bank.double().T).topk(k, dim=1).values.mean(1)
        torch.testing.assert_close(plain.double(), dense, rtol=0, atol=1e-6)


def test_nnn_fast_and_plain_agree_under_exact_ties():
    """A bank of repeated rows: every target has many exactly tied neighbours at the k-th place; the values
    (all the bias needs) are the same whichever tied row is kept, in both implementations."""
    rng = np.random.default_rng(6)
    base = torch.from_numpy(unit_rows(rng, 40, 16))
    bank = base.repeat(50, 1)[torch.from_numpy(rng.permutation(2000))]
    targets = torch.from_numpy(unit_rows(rng, 64, 16))
    for k in (3, 50, 75, 130):
        fast = nnn_bias_fast(targets, bank, 1.0, k, 64 * 4 * 256)
        plain = nnn_bias_plain(targets, bank, 1.0, k)
        torch.testing.assert_close(fast, plain, rtol=0, atol=1e-6)
        v, i = topk_similarity(targets, bank, k, block_bytes=64 * 4 * 256)
        torch.testing.assert_close((targets[:, None, :] * bank[i]).sum(-1), v, rtol=0, atol=1e-6)


def test_nnn_implementations_give_the_same_normalizer():
    fast = hn.NearestNeighborNormalization(alpha=0.6, k=8, device="cpu").fit(T, query_bank=QB)
    plain = hn.NearestNeighborNormalization(alpha=0.6, k=8, device="cpu", implementation="plain").fit(T, query_bank=QB)
    np.testing.assert_allclose(fast.offsets, plain.offsets, atol=1e-6)
    np.testing.assert_array_equal(_order(fast.score(Q)), _order(plain.score(Q)))


def test_faiss_nnn_with_too_few_probed_neighbours_is_never_silently_wrong():
    """IVF lists holding fewer than k rows: the bias averages the neighbours found, with a warning (it used to
    average -FLT_MAX padding into the bias)."""
    pytest.importorskip("faiss")
    from hubnorm import index
    g = np.random.default_rng(3)
    bank = g.normal(size=(400, 16)).astype(np.float32)
    bank /= np.linalg.norm(bank, axis=1, keepdims=True)
    targets = bank[:50] + 0.1 * g.normal(size=(50, 16)).astype(np.float32)
    targets /= np.linalg.norm(targets, axis=1, keepdims=True)
    idx = index.BankIndex(bank, nlist=64, seed=0, use_gpu=False, scan="faiss")
    with pytest.warns(RuntimeWarning, match="fewer than k=32 bank neighbours"):
        f = index.FaissNNN(alpha=1.0, k=32, bank_index=idx, nprobe=1, scan="faiss", use_gpu=False).fit(
            targets, query_bank=bank)
    assert f.incomplete_ > 0 and np.isfinite(f.offsets).all()
    assert (f.offsets >= -1.0).all() and (f.offsets <= 1.0).all()  # an average of cosines, not of padding
