"""The faiss-index side of the library (``hubnorm.index``) in small pieces: the size rule of ``nlist`` at its
boundaries, the input checks by their messages, the index engine's choice of which reductions it searches and what
it does when the probed lists hold too few rows, and the serving class's recall against the exact top-k (an
exhaustive index, ``nlist=1``, is exact). ``tests/test_fast_paths.py`` checks the scans against faiss and the exact
kernels at scale."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

faiss = pytest.importorskip("faiss")

import hubnorm as hn  # noqa: E402
from hubnorm.blocks import LogMeanExp, Scores, TopK  # noqa: E402
from hubnorm.index import BankIndex, IndexEngine, IndexedRetriever  # noqa: E402
from hubnorm.index import common  # noqa: E402


def _unit(n, d=8, seed=0, dtype=np.float32):
    x = np.random.default_rng(seed).standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(dtype)


# ------------------------------------------------------------------------------------------------ common
# by hand: 2 ** round(log2(sqrt(n))), at most n // 39; one list below 78 rows
@pytest.mark.parametrize("n, want", [(1, 1), (77, 1), (78, 2), (155, 3), (400, 10), (1600, 32), (10_000, 128),
                                     (1_000_000, 1024)])
def test_default_nlist(n, want):
    assert common.default_nlist(n) == want
    assert common.default_nlist(str(n)) == want      # any integer-like count


def test_check_refine_and_matrix():
    assert common.check_refine(1) == 1.0 and common.check_refine(2.5) == 2.5
    with pytest.raises(ValueError, match=r"refine \(the re-ranked candidate pool, in multiples of k\) must be >= 1; got 0.5"):
        common.check_refine(0.5)
    with pytest.raises(TypeError, match="refine must be a number"):
        common.check_refine("2")
    x = _unit(5)
    assert common.check_matrix(x, "bank", dim=8) is x
    with pytest.raises(TypeError, match=r"bank must be a numpy array or a torch tensor of shape \(n, d\); got list"):
        common.check_matrix([[1.0]], "bank")
    with pytest.raises(TypeError, match="bank must hold floating-point values; got dtype int64"):
        common.check_matrix(np.ones((2, 2), dtype=np.int64), "bank")
    with pytest.raises(TypeError, match="floating-point"):
        common.check_matrix(torch.ones(2, 2, dtype=torch.int32), "bank")
    with pytest.raises(ValueError, match=r"bank must be 2-D \(n, d\) with at least one row; got shape \(0, 8\)"):
        common.check_matrix(np.zeros((0, 8), dtype=np.float32), "bank")
    with pytest.raises(ValueError, match="got shape \\(8,\\)"):
        common.check_matrix(np.zeros(8, dtype=np.float32), "bank")
    with pytest.raises(ValueError, match="bank has dimension 8 but the index holds vectors of dimension 4"):
        common.check_matrix(x, "bank", dim=4)
    bad = x.copy()
    bad[2, 3] = np.nan
    with pytest.raises(ValueError, match=r"bank contains NaN or Inf in 1 row\(s\)"):
        common.check_matrix(bad, "bank")
    f = common.as_f32(torch.from_numpy(x.astype(np.float64)).T)
    assert f.dtype == np.float32 and f.flags.c_contiguous and f.shape == (8, 5)


def test_faiss_uses_gpu(monkeypatch):
    has = hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0
    assert common.faiss_uses_gpu() == has and common.faiss_uses_gpu(False) is False

    class Fake:                       # a faiss build as seen on a machine with n GPUs (gpu: a GPU build)
        def __init__(self, n, gpu=True):
            self.n = n
            if gpu:
                self.StandardGpuResources = object

        def get_num_gpus(self):
            return self.n

    for fake, default in ((Fake(1), True), (Fake(2), True), (Fake(0), False), (Fake(3, gpu=False), False)):
        monkeypatch.setattr(common, "import_faiss", lambda fake=fake: fake)
        assert common.faiss_uses_gpu() is default and common.faiss_uses_gpu(None) is default
        assert common.faiss_uses_gpu(False) is False
        if default:
            assert common.faiss_uses_gpu(True) is True
        else:
            with pytest.raises(RuntimeError, match=r"^use_gpu=True but faiss sees no GPU \(faiss-cpu build, or no CUDA "
                                                   r"device\)$"):
                common.faiss_uses_gpu(True)


def test_import_faiss_without_faiss(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "faiss", None)
    with pytest.raises(ImportError, match=r"^hubnorm.index needs faiss: pip install faiss-cpu \(or faiss-gpu\)$"):
        common.import_faiss()


# ------------------------------------------------------------------------------------------------ the index engine
@pytest.fixture(scope="module")
def small():
    return {"targets": torch.from_numpy(_unit(40, seed=1)), "query_bank": torch.from_numpy(_unit(500, seed=2))}


def test_the_engine_searches_only_value_top_k_over_a_bank_of_targets(small, monkeypatch):
    eng = IndexEngine(dict(small), nlist=1)
    searched = []
    real = BankIndex.search
    monkeypatch.setattr(BankIndex, "search", lambda self, *a, **kw: searched.append(1) or real(self, *a, **kw))
    exact = (small["query_bank"] @ small["targets"].T).T.topk(5, dim=1).values
    got = eng.reduce(TopK(Scores("query_bank", "targets"), 5, axis=0))
    assert searched == [1] and eng.nprobe == 1 and eng.incomplete == 0 and eng.index.nlist == 1
    torch.testing.assert_close(got.values, exact, rtol=0, atol=1e-6)
    assert got.indices is None and got.values.dtype == torch.float32
    # with indices, along the other axis, or over other columns: the in-process engine computes them
    for red in (TopK(Scores("query_bank", "targets"), 5, axis=0, indices=True),
                TopK(Scores("query_bank", "targets"), 5, axis=1),
                TopK(Scores("targets", "query_bank"), 5, axis=0),
                LogMeanExp(Scores("query_bank", "targets"), 10.0)):
        searched.clear()
        eng.reduce(red)
        assert searched == [], red


def test_a_given_index_of_another_bank_is_refused(small):
    other = BankIndex(_unit(300, seed=5), nlist=1)
    eng = IndexEngine(dict(small), bank_index=other)
    with pytest.raises(ValueError, match=r"bank_index holds 300 x 8 rows but the query bank is \(500, 8\)"):
        eng.reduce(TopK(Scores("query_bank", "targets"), 5, axis=0))


def test_probed_lists_with_too_few_rows(small):
    """One probed list of 16: a target whose list holds fewer than k rows warns and pads with -inf; a fixed
    nprobe is used as given (no tuning)."""
    eng = IndexEngine(dict(small), nlist=16, nprobe=1)
    k = 60                                        # more than a typical list of 500 / 16 rows
    with pytest.warns(RuntimeWarning, match=r"nprobe=1 finds fewer than k=60 bank neighbours for \d+ of 40 targets"):
        got = eng.reduce(TopK(Scores("query_bank", "targets"), k, axis=0))
    assert eng.tuning is None and eng.nprobe == 1 and eng.incomplete > 0
    short = torch.isinf(got.values).any(dim=1)
    assert int(short.sum()) == eng.incomplete and bool(torch.all(got.values[torch.isinf(got.values)] < 0))
    # the values found are exact scores of bank rows
    exact = (small["query_bank"] @ small["targets"].T).T
    v = got.values[0][torch.isfinite(got.values[0])]
    assert float((v[:, None] - exact[0][None, :]).abs().min(dim=1).values.max()) < 1e-6
    # tuned: no target is short at the recall target of the default
    eng = IndexEngine(dict(small), nlist=16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        eng.reduce(TopK(Scores("query_bank", "targets"), 5, axis=0))
    assert eng.tuning is not None and eng.tuning["nprobe"] == eng.nprobe


def test_a_fit_on_the_index_engine_with_an_exhaustive_index_is_the_exact_fit(small):
    nnn = hn.NearestNeighborNormalization(k=8, alpha=0.75, device="cpu")
    exact = nnn.clone().fit(small["targets"], query_bank=small["query_bank"])
    eng = IndexEngine(dict(small), nlist=1)
    via = nnn.clone().fit_engine(eng, targets=small["targets"])
    np.testing.assert_allclose(via.offsets, exact.offsets, rtol=0, atol=1e-6)


# ------------------------------------------------------------------------------------------------ serving
def test_indexed_retriever_recall_and_checks():
    t, qb, q = _unit(120, seed=1), _unit(300, seed=2), _unit(50, seed=3)
    norm = hn.InvertedSoftmax(tau=0.05, device="cpu").fit(t, query_bank=qb)
    r = IndexedRetriever(norm, nlist=1)
    assert r.nprobe == 1 and r.tuning is None
    scores, idx = r.search(q, 5)
    assert r.tuning is not None
    exact_v, exact_i = norm.topk(q, 5)
    np.testing.assert_array_equal(idx, exact_i.numpy())
    np.testing.assert_allclose(scores, exact_v.numpy(), atol=1e-5)
    # R@K from the index's list: a task whose positives are the exact top-1 (R@1 = 100) and the exact rank-3 item
    labels = exact_i.numpy()[:, 0]
    task = hn.RetrievalTask(q, t, hn.Positives.from_labels(labels, 120), direction="t2i")
    got = hn.evaluate(r, task, ks=(1, 5))
    assert {k: got[k] for k in ("R@1", "R@5", "MdR")} == {"R@1": 100.0, "R@5": 100.0, "MdR": 1.0}
    assert np.isnan(got["MnR"]) and got["bank"] == hn.evaluate(norm, task)["bank"] == "query-agnostic"
    task3 = hn.RetrievalTask(q, t, hn.Positives.from_labels(exact_i.numpy()[:, 2], 120), direction="t2i")
    got = hn.evaluate(r, task3, ks=(1, 2, 3))
    assert {k: got[k] for k in ("R@1", "R@2", "R@3", "MdR")} == {"R@1": 0.0, "R@2": 0.0, "R@3": 100.0, "MdR": 3.0}
    # every positive outside the top-2 lists: R@K of a miss, and no median (the ranks beyond the lists are unknown)
    got = hn.evaluate(r, task3, ks=(1, 2))
    assert (got["R@1"], got["R@2"]) == (0.0, 0.0) and np.isnan(got["MdR"]) and np.isnan(got["MnR"])
    other = hn.RetrievalTask(q, t[:100], hn.Positives.from_labels(labels % 100, 100), direction="t2i")
    with pytest.raises(ValueError, match="the index serves a normalizer fitted on 120 targets but the task has 100"):
        hn.evaluate(r, other)
    mats = hn.RetrievalTask(scores={("queries", "targets"): q @ t.T}, positives=task.positives, check=False)
    with pytest.raises(ValueError, match="a vector index searches query embeddings"):
        hn.evaluate(r, mats)
    # a task holding the query embeddings beside stored bank scores: the index searches them
    mixed = hn.RetrievalTask(q, t, task.positives, scores={("query_bank", "targets"): qb @ t.T})
    assert hn.evaluate(r, mixed, ks=(1, 5))["R@1"] == 100.0
    fixed = IndexedRetriever(norm, nlist=4, nprobe=4)
    assert fixed.nprobe == 4 and fixed.tuning == {"nprobe": 4}
    tuned = IndexedRetriever(norm, nlist=4).tune(q, k=3)
    assert 1 <= tuned["nprobe"] <= 4
    with pytest.raises(TypeError, match="is not an offset method: a vector index cannot serve it"):
        IndexedRetriever(hn.make_normalizer("ls"))
    with pytest.raises(ValueError, match="sample_size must be >= 1"):
        IndexedRetriever(norm, sample_size=0)
    with pytest.raises(ValueError, match="seed must be in"):
        IndexedRetriever(norm, seed=-1)
    with pytest.raises(ValueError, match="queries has dimension 7"):
        r.search(_unit(3, d=7), 2)


# ------------------------------------------------------------------------------------------------ options reach the index
def _spy(monkeypatch, cls, name, log):
    real = getattr(cls, name)

    def f(self, *args, **kwargs):
        log.append((name, args, kwargs))
        return real(self, *args, **kwargs)
    monkeypatch.setattr(cls, name, f)


def test_the_engine_hands_its_options_to_the_index(small, monkeypatch):
    from hubnorm.index import ProjectedBankIndex

    log = []
    for name in ("__init__", "tune_nprobe", "search"):
        _spy(monkeypatch, BankIndex, name, log)
    eng = IndexEngine(dict(small), nlist=4, recall_target=0.9, sample_size=17, seed=3, scan="blas-bf16", refine=1.5,
                      block_bytes=4096)
    assert eng.block_bytes == 4096 and eng.tuning is None and eng.incomplete == 0
    eng.reduce(TopK(Scores("query_bank", "targets"), 5, axis=0))
    first = {name: (args, kw) for name, args, kw in reversed(log)}   # each method's first call
    (_, init), (tune_args, tune), (search_args, search) = first["__init__"], first["tune_nprobe"], \
        [(a, k) for n, a, k in log if n == "search"][-1]                  # the engine's own search: the last
    assert (init["nlist"], init["seed"], init["use_gpu"], init["scan"]) == (4, 3, None, "blas-bf16")
    assert tune_args[1] == 5 and tune == {"recall_target": 0.9, "sample_size": 17, "seed": 3}
    assert search_args[1] == 5 and search == {"scan": "blas-bf16", "return_indices": False, "refine": 1.5}
    assert eng.scan == "blas-bf16"
    defaults = IndexEngine(dict(small))
    assert (defaults.sample_size, defaults.seed, defaults.recall_target) == (64, 0, 0.95)
    # a projected index: fitted on these targets with the engine's code, refine (default 2) and seed
    plog = []
    _spy(monkeypatch, ProjectedBankIndex, "__init__", plog)
    IndexEngine(dict(small), projection_dim=4, nlist=2, seed=5, code="SQ8").reduce(
        TopK(Scores("query_bank", "targets"), 3, axis=0))
    kw = plog[0][2]
    assert (kw["dim"], kw["nlist"], kw["code"], kw["refine"], kw["seed"]) == (4, 2, "SQ8", 2.0, 5)


def test_a_target_with_no_neighbour_found_is_an_error(small, monkeypatch):
    real = BankIndex.search

    def empty_first(self, queries, k, **kw):
        v, i = real(self, queries, k, **kw)
        v = v.copy()
        v[0] = -np.inf
        v[1, 1:] = -np.finfo(np.float32).max               # faiss pads with -FLT_MAX
        return v, i
    monkeypatch.setattr(BankIndex, "search", empty_first)
    with pytest.raises(ValueError, match=r"^nprobe=1 finds no bank neighbour at all for 1 target\(s\): raise nprobe "
                                         r"\(at most nlist=1\)"):
        IndexEngine(dict(small), nlist=1).reduce(TopK(Scores("query_bank", "targets"), 3, axis=0))


def test_the_retriever_hands_its_options_to_the_index(monkeypatch):
    t, qb, q = _unit(120, seed=1), _unit(300, seed=2), _unit(50, seed=3)
    norm = hn.InvertedSoftmax(tau=0.05, device="cpu").fit(t, query_bank=qb)
    log = []
    for name in ("__init__", "tune_nprobe", "search"):
        _spy(monkeypatch, BankIndex, name, log)
    r = IndexedRetriever(norm, nlist=4, recall_target=0.8, sample_size=9, seed=2)
    r.search(q, 3)
    first = {name: (args, kw) for name, args, kw in reversed(log)}
    (_, init), (tune_args, tune) = first["__init__"], first["tune_nprobe"]
    search_args = [a for n, a, k in log if n == "search"][-1]
    assert (init["nlist"], init["seed"], init["use_gpu"]) == (4, 2, None)
    assert tune_args[1] == 3 and tune == {"recall_target": 0.8, "sample_size": 9, "seed": 2}
    assert search_args[0].dtype == np.float32 and search_args[0].shape == (50, 9)
    log.clear()
    d = IndexedRetriever(norm, nlist=4)
    assert (d.sample_size, d.seed) == (256, 0)
    d.tune(q)
    tuned = [(a, k) for n, a, k in log if n == "tune_nprobe"][-1]
    assert tuned[0][1] == 10 and tuned[1]["sample_size"] == 256           # tune's default k
    with pytest.raises(TypeError, match="^object is not an offset method"):
        IndexedRetriever(object())


def test_the_retriever_checks_queries_as_the_normalizer_does_and_counts_any_positive():
    t, qb, q = _unit(120, seed=1), _unit(300, seed=2), _unit(50, seed=3)
    strict = IndexedRetriever(hn.InvertedSoftmax(tau=0.05).fit(t, query_bank=qb), nlist=1)
    with pytest.raises(ValueError, match="queries rows are not L2-normalised"):
        strict.search(2 * q, 3)
    loose_norm = hn.InvertedSoftmax(tau=0.05, check_normalized=False).fit(t, query_bank=qb)
    loose = IndexedRetriever(loose_norm, nlist=1)
    np.testing.assert_array_equal(loose.search(2 * q, 3)[1], loose_norm.topk(2 * q, 3)[1].numpy())
    # two positives per query: the exact rank-2 item and the top-1: a hit at rank 0
    _, exact = loose_norm.topk(q, 3)
    ex = exact.numpy()
    pos = hn.Positives(np.arange(0, 101, 2), np.stack([ex[:, 2], ex[:, 0]], axis=1).ravel(), 120)
    task = hn.RetrievalTask(q, t, pos, direction="t2i")
    got = hn.evaluate(loose, task, ks=(1, 2))
    assert (got["R@1"], got["R@2"], got["MdR"]) == (100.0, 100.0, 1.0)
