"""``hubnorm.index.ivf`` (:class:`BankIndex`) in small pieces, against brute-force float64 references:

* the build: the argument checks by their messages, the k-means training sample (``train_size``, default
  ``min(n, 32 * nlist)`` rows drawn with ``seed``) against a faiss index trained by hand on the same rows, the
  coarse quantizer (HNSW from ``nlist = 1024``), the clustering options, the storage of each scan (rows reordered by
  list, stable, ``list_sizes``), the same storage whether built directly, in chunks or read back from faiss's lists;
* ``probes``: the exact top-``nprobe`` centroids; ``_set_nprobe``'s clamp;
* the three scans: exact top-``k`` over the probed lists (a dense float64 top-``k`` restricted to the rows of the
  probed lists), ``-inf`` / -1 where the probed lists hold fewer than ``k`` rows, many query chunks against one,
  the bfloat16 candidate stage re-ranked exactly, ``return_indices=False``;
* ``tune_nprobe``: its checks and its recall curve recomputed by hand.

The k-means is seeded, and every reference compares values with a tolerance that does not depend on summation
order (ties are avoided by random unit vectors)."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import torch

faiss = pytest.importorskip("faiss")

from hubnorm.index import BankIndex  # noqa: E402

ATOL = 2e-6


def _unit(n, d=8, seed=0):
    x = np.random.default_rng(seed).standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def bank():
    return _unit(500, seed=2)


@pytest.fixture(scope="module")
def queries():
    return _unit(30, seed=1)


@pytest.fixture(scope="module")
def idx16(bank):
    return BankIndex(bank, nlist=16, seed=0)


def _assign(index, x):
    """The list of each row: its best centroid by float64 inner product."""
    cent = index._quantizer.reconstruct_n(0, index.nlist).astype(np.float64)
    return np.argmax(x.astype(np.float64) @ cent.T, axis=1)


def _probed_top(bank, index, queries, k, nprobe):
    """Dense float64 top-k of every query over the rows of its ``nprobe`` best lists (-inf / -1 past the rows)."""
    assign = _assign(index, bank)
    cent = index._quantizer.reconstruct_n(0, index.nlist).astype(np.float64)
    s = queries.astype(np.float64) @ bank.astype(np.float64).T
    out_v = np.full((len(queries), k), -np.inf)
    out_i = np.full((len(queries), k), -1)
    for q in range(len(queries)):
        lists = np.argsort(-(queries[q].astype(np.float64) @ cent.T))[:nprobe]
        rows = np.flatnonzero(np.isin(assign, lists))
        order = rows[np.argsort(-s[q, rows], kind="stable")][:k]
        out_v[q, :len(order)] = s[q, order]
        out_i[q, :len(order)] = order
    return out_v, out_i


def _check(got, want):
    (gv, gi), (wv, wi) = got, want
    finite = np.isfinite(wv)
    np.testing.assert_array_equal(np.isfinite(gv) & (gv > -1e30), finite)
    np.testing.assert_allclose(gv[finite], wv[finite], rtol=0, atol=ATOL)
    assert gi is not None
    np.testing.assert_array_equal(gi, wi)


# ------------------------------------------------------------------------------------------------ build
@pytest.mark.parametrize("kw, error, message", [
    (dict(vectors=[[1.0]]), TypeError, r"^vectors must be a numpy array or a torch tensor of shape \(n, d\); got list$"),
    (dict(nlist=0), ValueError, r"^nlist must be >= 1; got 0$"),
    (dict(nlist=501), ValueError, r"^nlist=501 is larger than the number of rows \(500\): use nlist <= 500$"),
    (dict(seed=-1), ValueError, r"^seed must be in \[0, 2\*\*63\); got -1$"),
    (dict(niter=0), ValueError, r"^niter must be >= 1; got 0$"),
    (dict(add_chunk=0), ValueError, r"^add_chunk must be >= 1; got 0$"),
    (dict(train_size=0), ValueError, r"^train_size must be >= 1; got 0$"),
    (dict(train_size=2.0), TypeError, r"^train_size must be an integer; got float 2.0$"),
    (dict(scan="gpu"), ValueError, r"^scan must be one of \['blas', 'blas-bf16', 'faiss'\]; got 'gpu'$"),
    (dict(refine=0.5), ValueError, r"^refine \(the re-ranked candidate pool, in multiples of k\) must be >= 1"),
])
def test_the_build_checks_by_their_messages(bank, kw, error, message):
    kw = dict(kw)
    vectors = kw.pop("vectors", bank)
    with pytest.raises(error, match=message):
        BankIndex(vectors, nlist=kw.pop("nlist", 4), **kw)


def test_more_lists_than_rows_are_refused_even_for_one_row():
    with pytest.raises(ValueError, match=r"^nlist=2 is larger than the number of rows \(1\): use nlist <= 1$"):
        BankIndex(_unit(1), nlist=2)


@pytest.mark.skipif(faiss.get_num_gpus() > 0, reason="a faiss build without GPU")
def test_use_gpu_without_a_gpu_is_refused(bank):
    with pytest.raises(RuntimeError, match=r"^use_gpu=True but faiss sees no GPU"):
        BankIndex(bank, nlist=4, use_gpu=True)
    assert not BankIndex(bank, nlist=4, use_gpu=False).on_gpu


def test_the_gpu_path_copies_the_cpu_index(bank, queries, monkeypatch):
    """A GPU build simulated: faiss's GPU copy of the CPU index is used, the default scan is faiss's, and nprobe is
    set through the GPU parameter space."""
    from hubnorm.index import ivf

    calls = []

    class Space:
        def set_index_parameter(self, index, name, value):
            calls.append(("nprobe", name, value))
            index.nprobe = value
    monkeypatch.setattr(ivf, "faiss_uses_gpu", lambda use_gpu: True)
    monkeypatch.setattr(faiss, "StandardGpuResources", lambda: "resources", raising=False)
    monkeypatch.setattr(faiss, "index_cpu_to_gpu", lambda res, dev, cpu: calls.append(("copy", res, dev)) or cpu,
                        raising=False)
    monkeypatch.setattr(faiss, "GpuParameterSpace", Space, raising=False)
    monkeypatch.setattr(faiss, "index_gpu_to_cpu", lambda index: calls.append(("back", index)) or index,
                        raising=False)
    idx = BankIndex(bank, nlist=8)
    assert idx.on_gpu and idx.scan == "faiss" and idx._res == "resources" and idx.index is idx._cpu
    assert calls == [("copy", "resources", 0), ("nprobe", "nprobe", 8)] and idx.index.ntotal == 500
    _check(idx.search(queries, 5, nprobe=3), _probed_top(bank, idx, queries, 5, 3))
    assert calls[-1] == ("nprobe", "nprobe", 3)
    _check(idx.search(queries, 5, scan="blas"), _probed_top(bank, idx, queries, 5, 3))   # rows read back from the copy
    assert calls[-1] == ("back", idx.index)


def test_a_one_row_bank_takes_one_list():
    one = _unit(1)
    idx = BankIndex(one, nlist=1)
    assert idx.nlist == 1 and idx.n == 1 and idx.d == 8
    v, i = idx.search(one, 1)
    np.testing.assert_allclose(v, [[1.0]], atol=ATOL)
    np.testing.assert_array_equal(i, [[0]])


def test_the_defaults(bank):
    idx = BankIndex(bank)
    assert idx.nlist == 12 and idx.scan == "blas" and idx.refine == 2.0 and idx.nprobe == 12 and not idx.on_gpu   # min(16, 500 // 39)
    assert idx.n == 500 and idx.d == 8 and idx.list_sizes.sum() == 500 and len(idx.list_sizes) == 12
    assert isinstance(idx._quantizer, faiss.IndexFlatIP) and isinstance(idx.index, faiss.IndexIVFFlat)
    cp = idx.index.cp
    assert (cp.niter, cp.seed, cp.max_points_per_centroid, cp.min_points_per_centroid) == (10, 0, 1 << 30, 1)
    assert idx.index.nprobe == 12 and idx.index.ntotal == 0 and not idx._added      # blas: faiss holds no rows
    assert idx._rows_bf16 is None
    small = BankIndex(bank[:77])
    assert small.nlist == 1 and isinstance(small.index, faiss.IndexFlatIP) and small._quantizer is None


def test_the_clustering_options_reach_faiss(bank):
    idx = BankIndex(bank, nlist=4, seed=7, niter=3)
    assert (idx.index.cp.niter, idx.index.cp.seed) == (3, 7)
    assert idx.refine == 2.0 and BankIndex(bank, nlist=1, refine=3).refine == 3.0


def test_the_build_time_is_measured(bank):
    t0 = time.perf_counter()
    idx = BankIndex(bank, nlist=4)
    elapsed = time.perf_counter() - t0
    assert 0 < idx.build_seconds <= elapsed


def _trained_by_hand(x, nlist, rows, seed=0, niter=10):
    q = faiss.IndexFlatIP(x.shape[1])
    ivf = faiss.IndexIVFFlat(q, x.shape[1], nlist, faiss.METRIC_INNER_PRODUCT)
    ivf.cp.niter, ivf.cp.seed = niter, seed
    ivf.cp.max_points_per_centroid, ivf.cp.min_points_per_centroid = 1 << 30, 1
    ivf.train(np.ascontiguousarray(x[rows]))
    return q.reconstruct_n(0, nlist)


@pytest.mark.parametrize("nlist, train_size, seed, m", [
    (4, None, 0, 128),      # default: 32 * nlist rows of 500
    (4, 50, 3, 50),         # given
    (4, 2000, 0, 500),      # more than the bank: every row
    (16, None, 1, 500),     # 32 * 16 > 500: every row
])
def test_the_training_sample(bank, nlist, train_size, seed, m):
    idx = BankIndex(bank, nlist=nlist, train_size=train_size, seed=seed)
    rows = np.sort(np.random.default_rng(seed).choice(500, size=m, replace=False)) if m < 500 else np.arange(500)
    want = _trained_by_hand(bank, nlist, rows, seed=seed)
    np.testing.assert_allclose(idx._centroids.numpy(), want, rtol=0, atol=1e-5)


def test_the_hnsw_quantizer_from_1024_lists():
    x = _unit(1024, d=4, seed=3)
    assert isinstance(BankIndex(x, nlist=1024, niter=1)._quantizer, faiss.IndexHNSWFlat)
    assert isinstance(BankIndex(x, nlist=1023, niter=1)._quantizer, faiss.IndexFlatIP)


def _check_storage(idx, x):
    assign = _assign(idx, x)
    np.testing.assert_array_equal(idx.list_sizes, np.bincount(assign, minlength=idx.nlist))
    np.testing.assert_array_equal(idx._ptr, np.concatenate([[0], np.cumsum(idx.list_sizes)]))
    perm = idx._perm.numpy()
    np.testing.assert_array_equal(perm, np.argsort(assign, kind="stable"))     # by list, stable within a list
    np.testing.assert_array_equal(idx._rows.numpy(), x[perm])
    assert idx._perm.dtype == torch.int64 and idx._rows.dtype == torch.float32


@pytest.mark.parametrize("tensor", [False, True])
def test_the_blas_storage_is_the_bank_reordered_by_list(bank, tensor):
    x = torch.from_numpy(bank) if tensor else bank
    one = BankIndex(x, nlist=16, seed=0)
    chunked = BankIndex(x, nlist=16, seed=0, add_chunk=37)
    _check_storage(one, bank)
    _check_storage(chunked, bank)
    np.testing.assert_array_equal(chunked._perm.numpy(), one._perm.numpy())
    assert 1 <= one.list_sizes.min() and one.list_sizes.max() < 500


def test_the_faiss_storage_read_back_is_the_blas_storage(bank):
    blas = BankIndex(bank, nlist=16, seed=0)
    fa = BankIndex(bank, nlist=16, seed=0, scan="faiss", add_chunk=37)
    assert fa._added and fa.index.ntotal == 500 and fa._rows is None
    fa._ensure_blas()
    _check_storage(fa, bank)
    np.testing.assert_array_equal(fa._perm.numpy(), blas._perm.numpy())
    np.testing.assert_array_equal(fa._centroids.numpy(), blas._centroids.numpy())
    rows = fa._rows
    fa._ensure_blas()                                         # made once
    assert fa._rows is rows
    flat = BankIndex(bank, nlist=1, scan="faiss")
    flat._ensure_blas()
    np.testing.assert_array_equal(flat._rows.numpy(), bank)
    np.testing.assert_array_equal(flat._perm.numpy(), np.arange(500))
    np.testing.assert_array_equal(flat.list_sizes, [500])
    np.testing.assert_array_equal(flat._ptr, [0, 500])
    np.testing.assert_array_equal(flat._centroids.numpy(), np.zeros((1, 8), np.float32))


def test_the_bf16_copy(bank):
    idx = BankIndex(bank, nlist=4, scan="blas-bf16")
    rows = idx._rows_bf16
    assert rows is not None and rows.dtype == torch.bfloat16 and tuple(rows.shape) == (564, 8)
    np.testing.assert_array_equal(rows[:500].float().numpy(), idx._rows.to(torch.bfloat16).float().numpy())
    assert not bool(rows[500:].any())
    assert idx._bf16_rows() is rows


# ------------------------------------------------------------------------------------------------ probes, nprobe
def test_set_nprobe_clamps(idx16):
    for asked, want in [(0, 1), (-3, 1), (5, 5), (16, 16), (40, 16)]:
        idx16._set_nprobe(asked)
        assert idx16.nprobe == want and idx16.index.nprobe == want and isinstance(idx16.nprobe, int)
    flat = BankIndex(_unit(50), nlist=1)
    flat._set_nprobe(7)
    assert flat.nprobe == 1


def test_probes_are_the_exact_top_centroids(idx16, queries):
    cent = idx16._centroids.numpy().astype(np.float64)
    want = np.argsort(-(queries.astype(np.float64) @ cent.T), axis=1)
    idx16._set_nprobe(3)
    np.testing.assert_array_equal(idx16.probes(queries), want[:, :3])
    np.testing.assert_array_equal(idx16.probes(queries, 5), want[:, :5])
    np.testing.assert_array_equal(idx16.probes(torch.from_numpy(queries), 5, chunk=7), want[:, :5])
    np.testing.assert_array_equal(idx16.probes(queries, 0), want[:, :1])
    np.testing.assert_array_equal(idx16.probes(queries, 99), want)
    assert idx16.probes(queries).dtype == np.int64
    flat = BankIndex(_unit(50), nlist=1)
    p = flat.probes(queries, 4)
    np.testing.assert_array_equal(p, np.zeros((30, 1)))
    assert p.dtype == np.int64


# ------------------------------------------------------------------------------------------------ search
def test_search_checks(idx16, queries):
    with pytest.raises(ValueError, match=r"^k=501 is larger than the number of indexed rows \(500\): use k <= 500$"):
        idx16.search(queries, 501)
    with pytest.raises(ValueError, match=r"^k must be >= 1; got 0$"):
        idx16.search(queries, 0)
    with pytest.raises(ValueError, match=r"^queries has dimension 4 but the index holds vectors of dimension 8$"):
        idx16.search(queries[:, :4], 3)
    with pytest.raises(ValueError, match=r"^nprobe must be >= 1; got 0$"):
        idx16.search(queries, 3, nprobe=0)
    with pytest.raises(ValueError, match=r"^scan must be one of \['blas', 'blas-bf16', 'faiss'\]; got 'gemm'$"):
        idx16.search(queries, 3, scan="gemm")
    with pytest.raises(ValueError, match=r"^refine \(the re-ranked"):
        idx16.search(queries, 3, scan="blas-bf16", refine=0.5)


@pytest.mark.parametrize("scan", ["blas", "faiss", "blas-bf16"])
@pytest.mark.parametrize("k, nprobe", [(1, 1), (10, 1), (10, 3), (40, 5), (25, 16), (500, 16)])
def test_every_scan_is_exact_over_the_probed_lists(bank, queries, idx16, scan, k, nprobe):
    idx16._set_nprobe(16)
    got = idx16.search(queries, k, nprobe=nprobe, scan=scan, refine=1000.0)
    assert idx16.nprobe == nprobe
    _check(got, _probed_top(bank, idx16, queries, k, nprobe))
    assert got[0].dtype == np.float32 and got[1].dtype == np.int64


@pytest.mark.parametrize("scan", ["blas", "faiss", "blas-bf16"])
def test_the_scan_of_the_index_is_the_default(bank, queries, scan):
    idx = BankIndex(bank, nlist=16, scan=scan, refine=1000.0)
    assert idx.scan == scan
    idx._set_nprobe(4)
    _check(idx.search(queries, 12), _probed_top(bank, idx, queries, 12, 4))
    assert idx.nprobe == 4


def test_short_probed_lists_pad(bank, queries, idx16):
    """k above the rows of one list: -inf (blas) / -FLT_MAX (faiss) and index -1 past the rows found."""
    k = int(idx16.list_sizes.max()) + 5
    want = _probed_top(bank, idx16, queries, k, 1)
    assert np.isinf(want[0]).all(axis=1).all() or np.isinf(want[0]).any()
    for scan in ("blas", "blas-bf16"):
        v, i = idx16.search(queries, k, nprobe=1, scan=scan, refine=1000.0)
        _check((v, i), want)
        assert np.all(v[~np.isfinite(want[0])] == -np.inf)
    v, i = idx16.search(queries, k, nprobe=1, scan="faiss")
    _check((v, i), want)
    assert np.all(v[~np.isfinite(want[0])] == -np.finfo(np.float32).max)


def test_many_chunks_are_one_chunk(bank, queries, idx16):
    got = idx16.search(queries, 29, nprobe=6, scan="faiss", chunk=7)      # before any array of its shape is freed
    _check(got, _probed_top(bank, idx16, queries, 29, 6))
    k, nprobe = 30, 6
    want = _probed_top(bank, idx16, queries, k, nprobe)
    idx16._set_nprobe(1)                                     # the scans below probe the nprobe they are given
    _check(idx16._blas_search(queries, k, nprobe, block_bytes=1), want)                   # one query at a time
    _check(idx16._blas_search(queries, k, nprobe, block_bytes=k * 12 * 7), want)          # chunks of a few
    _check(idx16._refined_search(queries, k, nprobe, 20.0, block_bytes=1), want)
    _check(idx16._refined_search(queries, k, nprobe, 20.0, block_bytes=2 * 600 * 8 * 4), want)
    idx16._set_nprobe(nprobe)
    _check(idx16.search(queries, k, scan="faiss", chunk=7), want)
    _check(idx16.search(torch.from_numpy(queries), k, scan="blas"), want)


def test_values_only_and_reordered_positions(bank, queries, idx16):
    want_v, want_i = _probed_top(bank, idx16, queries, 9, 4)
    for scan in ("blas", "blas-bf16"):
        v, i = idx16.search(queries, 9, nprobe=4, scan=scan, return_indices=False, refine=1000.0)
        assert i is None
        np.testing.assert_allclose(v, want_v, rtol=0, atol=ATOL)
    v, pos = idx16._blas_search(queries, 9, 4, bank_ids=False)
    np.testing.assert_array_equal(idx16._perm.numpy()[pos], want_i)      # positions in the reordered bank
    v, i = idx16._blas_search(queries[:0], 9, 4)
    assert v.shape == (0, 9) and i.shape == (0, 9)
    v, i = idx16._blas_search(queries[:0], 9, 4, return_indices=False)
    assert v.shape == (0, 9) and i is None


def test_the_chunks_of_the_re_rank_follow_block_bytes(bank, queries, monkeypatch):
    """_refined_search re-ranks ``block_bytes // (pool * d * 4)`` queries per batched product (at least one)."""
    idx = BankIndex(bank, nlist=4, scan="blas-bf16")
    n_bmm = []
    real = torch.bmm
    monkeypatch.setattr(torch, "bmm", lambda a, b: n_bmm.append(a.shape[0]) or real(a, b))
    want = _probed_top(bank, idx, queries, 5, 4)
    for block_bytes, sizes in [(1, [1] * 30), (20 * 8 * 4 * 7, [7, 7, 7, 7, 2]), (1 << 30, [30])]:
        n_bmm.clear()
        _check(idx._refined_search(queries, 5, 4, 4.0, block_bytes=block_bytes), want)   # pool 20
        assert n_bmm == sizes


def test_the_bf16_pool(bank, queries):
    """pool = min(n, max(k, ceil(refine * k))) candidates by the bfloat16 scan, re-ranked exactly: the values are
    the exact scores of the rows returned, and a pool of every probed row gives the exact top-k."""
    idx = BankIndex(bank, nlist=4, scan="blas-bf16")
    s = queries.astype(np.float64) @ bank.astype(np.float64).T
    seen = []
    real = idx._blas_search

    def spy(q, k, nprobe, **kw):
        seen.append(k)
        return real(q, k, nprobe, **kw)
    idx._blas_search = spy
    for refine, k, pool in [(2.0, 5, 10), (1.5, 5, 8), (1.0, 7, 7), (1000.0, 5, 500)]:
        seen.clear()
        v, i = idx.search(queries, k, nprobe=4, refine=refine)
        assert seen == [pool]
        np.testing.assert_allclose(v, np.take_along_axis(s, i, axis=1), rtol=0, atol=ATOL)
        assert np.all(np.diff(v, axis=1) <= 0)
    v, i = idx.search(queries, 5, nprobe=4, refine=1000.0)
    want_i = np.argsort(-s, axis=1, kind="stable")[:, :5]
    np.testing.assert_array_equal(i, want_i)
    idx.refine = 1000.0
    seen.clear()
    idx.search(queries, 5)
    assert seen == [500]


def test_many_bands(queries):
    """k = 1 over 64 lists: warm-up on the first probed list, then bands [1, 2), [2, 4), ..., [32, 64)."""
    x = _unit(2000, d=6, seed=9)
    idx = BankIndex(x, nlist=64, seed=0, niter=4)
    q = _unit(12, d=6, seed=4)
    for k, nprobe in [(1, 64), (3, 50), (7, 33), (64, 64)]:
        _check(idx.search(q, k, nprobe=nprobe, scan="blas"), _probed_top(x, idx, q, k, nprobe))
        _check(idx._blas_search(q, k, nprobe, block_bytes=1), _probed_top(x, idx, q, k, nprobe))


def test_a_blas_index_adds_its_rows_to_faiss_once(bank, queries):
    idx = BankIndex(bank, nlist=8)
    assert idx.index.ntotal == 0
    v, i = idx.search(queries, 6, nprobe=8, scan="faiss")
    assert idx._added and idx.index.ntotal == 500
    _check((v, i), _probed_top(bank, idx, queries, 6, 8))
    idx.search(queries, 6, scan="faiss")
    assert idx.index.ntotal == 500
    flat = BankIndex(bank, nlist=1)
    v, i = flat.search(queries, 6, scan="faiss")
    s = queries.astype(np.float64) @ bank.astype(np.float64).T
    np.testing.assert_array_equal(i, np.argsort(-s, axis=1, kind="stable")[:, :6])
    np.testing.assert_allclose(v, np.take_along_axis(s, i, axis=1), rtol=0, atol=ATOL)


# ------------------------------------------------------------------------------------------------ tune_nprobe
@pytest.mark.parametrize("kw, error, message", [
    (dict(recall_target=0), ValueError, r"^recall_target must be in \(0, 1\]; got 0$"),
    (dict(recall_target=1.5), ValueError, r"^recall_target must be in \(0, 1\]; got 1.5$"),
    (dict(recall_target="x"), TypeError, r"^recall_target must be a number; got str 'x'$"),
    (dict(sample_size=0), ValueError, r"^sample_size must be >= 1; got 0$"),
    (dict(seed=-2), ValueError, r"^seed must be in \[0, 2\*\*63\); got -2$"),
])
def test_tune_nprobe_checks(idx16, queries, kw, error, message):
    with pytest.raises(error, match=message):
        idx16.tune_nprobe(queries, 5, **kw)
    with pytest.raises(ValueError, match=r"^queries has dimension 3 but the index holds vectors of dimension 8$"):
        idx16.tune_nprobe(queries[:, :3], 5)


def _curve_by_hand(bank, idx, sample, k):
    s = sample.astype(np.float64) @ bank.astype(np.float64).T
    exact = np.argsort(-s, axis=1, kind="stable")[:, :k]
    curve = {}
    for p in [1, 2, 4, 8, 16]:
        _, got = _probed_top(bank, idx, sample, k, p)
        curve[p] = sum(np.intersect1d(a, e).size for a, e in zip(got, exact)) / exact.size
    return curve


@pytest.mark.parametrize("target", [1e-9, 0.5, 0.9, 1.0])
def test_tune_nprobe_is_the_smallest_power_of_two_reaching_the_target(bank, queries, target):
    idx = BankIndex(bank, nlist=16, seed=0)
    curve = _curve_by_hand(bank, idx, queries, 10)                  # sample_size >= 30: every query
    want = next(p for p in curve if curve[p] >= target)
    out = idx.tune_nprobe(queries, 10, recall_target=target, sample_size=64)
    assert out["nprobe"] == want == idx.nprobe == idx.index.nprobe
    assert list(out["curve"]) == [p for p in curve if p <= want]
    for p, r in out["curve"].items():
        assert r == pytest.approx(curve[p], abs=1e-12)
    assert out["recall"] == out["curve"][want]


def test_tune_nprobe_samples_with_its_seed_and_stops_at_nlist(bank, queries):
    idx = BankIndex(bank, nlist=12, seed=0)                       # not a power of two: the last step is 12
    pick = np.sort(np.random.default_rng(4).choice(30, size=7, replace=False))
    sample = queries[pick]
    s = sample.astype(np.float64) @ bank.astype(np.float64).T
    exact = np.argsort(-s, axis=1, kind="stable")[:, :10]
    out = idx.tune_nprobe(queries, 10, recall_target=1.0, sample_size=7, seed=4)
    assert list(out["curve"])[-1] == out["nprobe"] and list(out["curve"]) == [1, 2, 4, 8, 12][:len(out["curve"])]
    for p, r in out["curve"].items():
        _, got = _probed_top(bank, idx, sample, 10, p)
        assert r == pytest.approx(sum(np.intersect1d(a, e).size for a, e in zip(got, exact)) / 70, abs=1e-12)
    # an unreachable target stops at nlist
    hard = BankIndex(bank, nlist=12, seed=0, scan="blas-bf16", refine=1.0)
    real = hard.search
    hard.search = lambda q, k, nprobe=None, scan=None: real(q, k, nprobe=nprobe, scan=scan) if scan else \
        (None, np.full((len(q), k), -1))
    out = hard.tune_nprobe(queries, 10, recall_target=0.5)
    assert list(out["curve"]) == [1, 2, 4, 8, 12] and out["nprobe"] == 12 == hard.nprobe
    assert all(r == 0 for r in out["curve"].values())


def test_tune_nprobe_of_one_list_and_its_exact_scan(bank, queries):
    flat = BankIndex(bank, nlist=1)
    assert flat.tune_nprobe(queries, 5) == {"nprobe": 1, "recall": 1.0, "curve": {1: 1.0}}
    with pytest.raises(ValueError, match=r"^queries has dimension 3 but the index holds vectors of dimension 8$"):
        flat.tune_nprobe(queries[:, :3], 5)
    assert flat.nprobe == 1
    # the exact reference of the bfloat16 index is the float32 blas scan at nprobe = nlist
    idx = BankIndex(bank, nlist=8, scan="blas-bf16")
    scans = []
    real = idx.search
    idx.search = lambda q, k, nprobe=None, scan=None: scans.append((nprobe, scan)) or real(q, k, nprobe=nprobe, scan=scan)
    idx.tune_nprobe(queries, 5, recall_target=1e-9)
    assert scans == [(8, "blas"), (1, None)]
    fa = BankIndex(bank, nlist=8, scan="faiss")
    scans.clear()
    real_fa = fa.search
    fa.search = lambda q, k, nprobe=None, scan=None: scans.append((nprobe, scan)) or real_fa(q, k, nprobe=nprobe,
                                                                                              scan=scan)
    fa.tune_nprobe(queries, 5, recall_target=1e-9)
    assert scans == [(8, "faiss"), (1, None)]


def test_tune_nprobe_stops_where_the_recall_equals_the_target(bank, queries):
    idx = BankIndex(bank, nlist=16, seed=0)
    curve = _curve_by_hand(bank, idx, queries, 10)
    assert curve[1] < curve[2] < curve[4]                    # a target met exactly at nprobe 2, not before
    out = idx.tune_nprobe(queries, 10, recall_target=curve[2], sample_size=30)
    assert out["nprobe"] == 2 and out["recall"] == curve[2]


def test_tune_nprobe_defaults(bank):
    """64 of 100 queries drawn with seed 0, recall target 0.95."""
    many = _unit(100, seed=6)
    idx = BankIndex(bank, nlist=16, seed=0)
    sample = many[np.sort(np.random.default_rng(0).choice(100, size=64, replace=False))]
    curve = _curve_by_hand(bank, idx, sample, 10)
    want = next(p for p in curve if curve[p] >= 0.95)
    out = idx.tune_nprobe(many, 10)
    assert out["nprobe"] == want and list(out["curve"]) == [p for p in curve if p <= want]
    for p, r in out["curve"].items():
        assert r == pytest.approx(curve[p], abs=1e-12)


def test_the_bf16_scan_of_a_list_probed_by_66_queries(bank):
    """nlist=2, every list in every query's warm-up: each GEMM has 66 query rows (padded to 96 in bfloat16)."""
    q = _unit(66, seed=8)
    idx = BankIndex(bank, nlist=2, seed=0, scan="blas-bf16")
    _check(idx.search(q, 70, nprobe=2, refine=10.0), _probed_top(bank, idx, q, 70, 2))


def test_reordered_positions_past_the_rows_found_are_minus_one(bank, queries, idx16):
    k = int(idx16.list_sizes.max()) + 5
    v, pos = idx16._blas_search(queries, k, 1, bank_ids=False)
    want_v, want_i = _probed_top(bank, idx16, queries, k, 1)
    missing = ~np.isfinite(want_v)
    assert missing.any() and np.all(v[missing] == -np.inf) and np.all(pos[missing] == -1)
    np.testing.assert_array_equal(idx16._perm.numpy()[pos[~missing]], want_i[~missing])
