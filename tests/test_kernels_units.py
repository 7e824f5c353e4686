"""What the mutation run of ``hubnorm.kernels`` (``benchmarks/reports/mutation/kernels.md``) found unchecked, each
against a hand-computed value or a dense float64 form: the block sizes the kernels hand to their GEMMs and
reductions under ``block_bytes`` (exact, from ``block_rows`` / ``block_shape`` / ``numpy_topk_partition`` worked
out by hand), the order ``pack_rows`` keeps, the loading of faiss and the arguments, guards and thread setting of the
faiss kernels (the GPU one against a stand-in for faiss's GPU API, so no GPU is needed), ``k = 0`` on the torch
kernel, the device of the results (on torch's ``meta`` device), and the bounds the precision message states.

Of the 94 survivors of that run, 22 are killed by tests added to ``tests/test_kernels.py`` since (the k message, the
threshold pass and its fallback, the numpy log-sum-exp's guards and row maxima, the name and row norms of
``log_mean_exp_similarity``); the tests here kill 46 more. The other 26 change nothing a caller can observe:

* ``x__merge_topk__mutmut_21``, ``x__topk_rows__mutmut_91``: ``topk`` without ``dim=1`` reduces the last dimension,
  which is dim 1 of these 2-D tensors.
* ``x__merge_topk__mutmut_22``, ``x__topk_rows__mutmut_51``: a sorted instead of an unsorted ``topk`` selects the same
  values; every caller sorts the merged result (the order of tied indices is left free by the contract).
* ``x_pack_rows__mutmut_12``: without ``minlength`` the counts stop at the largest row present; only their maximum
  and the prefix sums at rows present are read, and the output's height is ``ra`` either way.
* ``x_pack_rows__mutmut_21``, ``x_pack_rows__mutmut_42``, ``x_topk_similarity__mutmut_91``,
  ``x__topk_rows__mutmut_141``: a scratch tensor made on the default device instead of the inputs' one; equal on the
  CPU, they fail only on a GPU (``tests/test_gpu.py`` runs the torch kernel there).
* ``xǁ_Candidatesǁ__init____mutmut_6``: float64 candidate values for float32 scores; every float32 is exact in
  float64 and the results are written back into the float32 output, so the same values and order come out.
* ``xǁ_Candidatesǁmerge_tile__mutmut_42``, ``x__topk_numpy_rows__mutmut_116``: ``take_along_axis`` without an axis
  uses the last one, axis 1 of these 2-D arrays.
* ``xǁ_Candidatesǁmerge_tile__mutmut_51``: one threshold for all rows (the smallest) instead of each row's: a lower
  threshold only lets more candidates into the buffers (they are merged by the exact ``argpartition``); the strict
  per-row thresholds of ``merge`` replace it before any candidate is dropped.
* ``xǁ_Candidatesǁappend__mutmut_22``, ``x__topk_numpy_rows__mutmut_76``: ``reshape(None)`` returns a same-shaped
  view of the (contiguous) array, and ``put`` / ``take`` without an axis address it flat, as ``reshape(-1)`` does.
* ``x__topk_numpy_rows__mutmut_31``, ``x__topk_numpy_rows__mutmut_41``, ``x__logsumexp_numpy__mutmut_92``,
  ``x__topk_rows__mutmut_32``: the GEMM / the compare writes a fresh array instead of the reused buffer: the same
  values from the same call, only an allocation per tile more (speed, not a result nor the budget).
* ``x__topk_numpy_rows__mutmut_106``: a non-stable final ``argsort`` orders only equal values differently (their
  order is left free, and already arbitrary after ``argpartition``).
* ``x__topk_rows__mutmut_12``: ``2 / G * density`` instead of ``2 * G * density`` changes only the group size ``G``
  of the max-pool filter; every group size gathers the same survivors (all values ``>= thr``), so the same results.
* ``x__topk_rows__mutmut_151``, ``x__topk_rows__mutmut_152``: the tail branch then also runs when the groups cover
  the whole block; its tail is empty and appends nothing.
* ``x__logsumexp_blocks__mutmut_76``: the cache key carries the dtype also when ``dtype`` is None; only the key of
  the same GEMM block changes (no caller reads the keys; ``normalizers.sinkhorn`` keeps its own cache).
* ``x__logsumexp_numpy__mutmut_82``: a float64 running sum for float32 tiles: the result moves by float32 rounding
  only, towards the exact value (nothing that the float32 contract, within ``PRECISION_TARGET``, pins).
* ``x_working_dtype__mutmut_1``: a default overflow of 1.0 instead of 0.0: both lie far below ``finfo.max / 16``.
"""

from __future__ import annotations

import math
import types

import numpy as np
import pytest
import torch

from hubnorm import kernels as K


def _unit(n, d=5, seed=0, dtype=torch.float64):
    x = torch.from_numpy(np.random.default_rng(seed).standard_normal((n, d)))
    return (x / x.norm(dim=1, keepdim=True)).to(dtype)


def _dense_topk(a, b, k):
    return (a.double() @ b.double().T).topk(k, dim=1)


def _watched(t, name):
    """``t`` as a tensor that records the shape of the first operand of every call of the torch function ``name`` it
    takes part in (the blocks a kernel hands to it); returns ``(tensor, log)``."""
    log = []

    class Watched(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", None) == name:
                log.append(tuple(args[0].shape))
            return super().__torch_function__(func, types, args, kwargs or {})
    return t.as_subclass(Watched), log


class _NumpyWatch:
    """numpy as the ``"numpy"`` kernels see it (``K.np``): records the bytes of every ``np.empty`` buffer and the shape
    of every GEMM (``np.matmul``)."""

    def __init__(self):
        self.buffers, self.gemms = [], []

    def __getattr__(self, name):
        return getattr(np, name)

    def empty(self, *args, **kwargs):
        x = np.empty(*args, **kwargs)
        self.buffers.append(x.nbytes)
        return x

    def matmul(self, *args, **kwargs):
        x = np.matmul(*args, **kwargs)
        self.gemms.append(x.shape)
        return x


# ------------------------------------------------------------------------------------------------ block sizes
def test_block_rows_counts_float32_by_default_and_block_shape_below_one_element():
    assert K.block_rows(10, block_bytes=400) == 10              # 10 columns x 4 bytes: 40 bytes a row
    assert K.block_rows(10, block_bytes=399) == 9
    # a budget of one element (or less): 1 x 1 blocks
    assert K.block_shape(1, 10, 8, 8) == (1, 1)
    assert K.block_shape(3, 10, 8, 4) == (1, 1)


def test_numpy_topk_partition_caps_by_the_bank_and_by_the_tile_rows():
    # 160 bytes of float64: 20 scores; the bank has 5 rows, so 4 rows of a per tile (not 1 row x 20 columns)
    assert K.numpy_topk_partition(10, 5, 8, 160) == ([(0, 4), (4, 8), (8, 10)], [(0, 5)])
    # the default tile: at most 1024 rows of a however few columns; 3000 rows balanced to 3 x 1000
    assert K.numpy_topk_partition(3000, 10, 4, None) == ([(0, 1000), (1000, 2000), (2000, 3000)], [(0, 10)])


def test_numpy_topk_tiles_and_buffers_fit_block_bytes(monkeypatch):
    """8192 bytes of float32 = 2048 scores: tiles of 1 row x 2048 columns (the bank's 4096 rows in two), one reused
    tile buffer of exactly 8192 bytes and a compare mask of one byte per score; the values are the dense top-k's."""
    rng = np.random.default_rng(4)
    a = torch.from_numpy(rng.standard_normal((2, 8)).astype(np.float32))
    b = torch.from_numpy(rng.standard_normal((4096, 8)).astype(np.float32))
    watch = _NumpyWatch()
    monkeypatch.setattr(K, "np", watch)
    v, i = K.topk_similarity(a, b, 3, backend="numpy", block_bytes=8192)
    monkeypatch.undo()
    assert watch.gemms == [(1, 2048)] * 4
    assert max(watch.buffers) == 8192 and sorted(watch.buffers)[-2:] == [2048, 8192]
    want = _dense_topk(a, b, 3)
    torch.testing.assert_close(v.double(), want.values, rtol=0, atol=1e-5)
    assert torch.equal(i, want.indices)


def test_numpy_logsumexp_tiles_fit_block_bytes(monkeypatch):
    rng = np.random.default_rng(5)
    a = torch.from_numpy(rng.standard_normal((2, 8)).astype(np.float32))
    b = torch.from_numpy(rng.standard_normal((4096, 8)).astype(np.float32))
    watch = _NumpyWatch()
    monkeypatch.setattr(K, "np", watch)
    got = K.logsumexp_similarity(a, b, 1.5, backend="numpy", block_bytes=8192)
    monkeypatch.undo()
    assert watch.gemms == [(1, 2048)] * 4 and max(watch.buffers) == 8192
    want = torch.logsumexp(1.5 * (a.double() @ b.double().T), dim=1)
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=0)


def test_torch_logsumexp_blocks_fit_block_bytes_in_both_passes(monkeypatch):
    """float32 inputs computed in float64 under 240 bytes (30 float64 scores): block_shape(5, 60, 8, 240) = (5, 6),
    ten blocks; a row of +inf scores is recomputed alone (``check=True``) in blocks of block_shape(1, 60, 8, 240) =
    (1, 30)."""
    a = _unit(5, d=4, seed=1, dtype=torch.float32)
    a[2] = torch.tensor([math.inf, 0.0, 0.0, 0.0])
    b = _unit(60, d=4, seed=2, dtype=torch.float32).abs()     # positive first column: row 2 scores +inf
    seen = []
    real = K.block_logsumexp

    def spy(raw, scale, shift=None, *, check=True):
        seen.append((tuple(raw.shape), raw.dtype, check))
        return real(raw, scale, shift, check=check)
    monkeypatch.setattr(K, "block_logsumexp", spy)
    got = K.logsumexp_similarity(a, b, 3.0, block_bytes=240, dtype=torch.float64)
    assert seen == [((5, 6), torch.float64, False)] * 10 + [((1, 30), torch.float64, True)] * 2
    want = torch.logsumexp(3.0 * (a.double() @ b.double().T), dim=1)
    assert got.dtype == torch.float64 and got[2] == math.inf
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dim", [0, 1])
def test_logsumexp_scores_blocks_fit_block_bytes(dim):
    """20 x 7 scores under 168 bytes: 3 rows of 7 float64 values a block (2 left), 6 rows when computed in float32
    (each block copied once into the kernel's slab buffer)."""
    s = _unit(20, d=4, seed=3) @ _unit(7, d=4, seed=4).T
    watched, log = _watched(s, "copy_")
    got = K.logsumexp_scores(watched, 5.0, dim, block_bytes=168).as_subclass(torch.Tensor)
    assert log == [(3, 7)] * 6 + [(2, 7)]
    torch.testing.assert_close(got, torch.logsumexp(5.0 * s, dim=dim), rtol=0, atol=1e-12)
    watched, log = _watched(s, "copy_")
    got = K.logsumexp_scores(watched, 5.0, dim, dtype=torch.float32, block_bytes=168).as_subclass(torch.Tensor)
    assert log == [(6, 7)] * 3 + [(2, 7)]
    torch.testing.assert_close(got, torch.logsumexp(5.0 * s, dim=dim), rtol=0, atol=2e-5)
    slab = K.LSE_SLAB_BYTES // (7 * 8)                          # the cache-sized slab caps a larger budget
    big = _unit(slab + 5, d=4, seed=5) @ _unit(7, d=4, seed=4).T
    watched, log = _watched(big, "copy_")
    got = K.logsumexp_scores(watched, 5.0, dim).as_subclass(torch.Tensor)
    assert log == [(slab, 7), (5, 7)]
    torch.testing.assert_close(got, torch.logsumexp(5.0 * big, dim=dim), rtol=0, atol=1e-12)


def test_bank_column_blocks_fit_block_bytes():
    bank, t = _unit(37, seed=3), _unit(1, seed=4)[0]
    watched, log = _watched(bank, "matmul")
    got = K.bank_column(watched, t, block_bytes=400).as_subclass(torch.Tensor)   # 400 // (5 x 8): 10 rows a block
    assert log == [(10, 5)] * 3 + [(7, 5)]
    torch.testing.assert_close(got, bank @ t, rtol=0, atol=1e-14)
    watched, log = _watched(bank.float(), "matmul")
    K.bank_column(watched, t.float(), block_bytes=400)                            # float32: 20 rows a block
    assert log == [(20, 5), (17, 5)]


# ------------------------------------------------------------------------------------------------ small kernels
def test_pack_rows_keeps_each_rows_candidates_in_input_order():
    """40 candidates over 3 rows (interleaved): each row of the result lists its own in input order (a stable sort by
    row), then the padding."""
    rows = torch.from_numpy(np.random.default_rng(7).integers(0, 3, 40))
    cols = torch.arange(40) + 100
    vals = torch.arange(40, dtype=torch.float64) / 8
    v, i = K.pack_rows(rows, cols, vals, 4, -math.inf)
    counts = [int((rows == r).sum()) for r in range(4)]
    assert v.shape == i.shape == (4, max(counts)) and counts[3] == 0
    for r in range(4):
        mine = [j for j in range(40) if int(rows[j]) == r]
        pad = max(counts) - len(mine)
        assert i[r].tolist() == [100 + j for j in mine] + [0] * pad
        assert v[r].tolist() == [j / 8 for j in mine] + [-math.inf] * pad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_topk_with_k_zero_on_one_block(dtype):
    a, b = _unit(5, d=4, seed=1, dtype=dtype), _unit(300, d=4, seed=2, dtype=dtype)
    for backend in ("torch", "numpy", None):
        v, i = K.topk_similarity(a, b, 0, backend=backend)
        assert v.shape == i.shape == (5, 0) and v.dtype == dtype and i.dtype == torch.long


def test_results_stay_on_the_inputs_device():
    s = torch.empty((5, 3), device="meta")
    for dim in (0, 1):
        out = K.logsumexp_scores(s, 2.0, dim)
        assert out.device.type == "meta" and out.shape == (3 if dim == 0 else 5,) and out.dtype == torch.float64
    z = K.log_mean_exp_similarity(s, torch.empty((4, 3), device="meta"), 0.0)
    assert z.device.type == "meta" and z.shape == (5,) and z.dtype == torch.float32


def test_log_mean_exp_message_states_the_lower_bound_of_tau():
    # 1 / (max float64 / 16) = 16 / 1.797e308 = 8.9e-308
    with pytest.raises(ValueError, match=r" use 9e-308 <= tau <= 1\.2e\+09 with this bank of 1000 rows"):
        K.log_mean_exp_dtype(torch.float64, 1.0, 1000, 1e-3, 1e-12, "tau")


# ------------------------------------------------------------------------------------------------ faiss, CPU
def test_faiss_is_loaded_once_and_chosen_for_float32_on_the_cpu(monkeypatch):
    faiss = pytest.importorskip("faiss")
    monkeypatch.setattr(K, "_FAISS", None)                     # as in a fresh process
    assert K._faiss() is faiss and K._FAISS is faiss
    assert K.topk_backend(torch.float32, "cpu") == "faiss"
    calls = []
    real = K._topk_faiss
    monkeypatch.setattr(K, "_topk_faiss", lambda a, b, k, bb: calls.append(bb) or real(a, b, k, bb))
    a, b = _unit(6, d=8, seed=1, dtype=torch.float32), _unit(50, d=8, seed=2, dtype=torch.float32)
    v, i = K.topk_similarity(a, b, 4, block_bytes=4096)       # no backend named: float32 on the CPU goes to faiss
    assert calls == [4096]
    want = _dense_topk(a, b, 4)
    torch.testing.assert_close(v.double(), want.values, rtol=0, atol=1e-5)
    assert torch.equal(i, want.indices)
    K.topk_similarity(a.double(), b.double(), 4)              # float64: the torch kernel
    assert calls == [4096]


def test_a_missing_faiss_is_looked_for_once(monkeypatch):
    tries = []

    def missing(name):
        tries.append(name)
        raise ImportError(name)
    monkeypatch.setattr(K, "_FAISS", None)
    monkeypatch.setattr(K, "importlib", types.SimpleNamespace(import_module=missing))
    assert K._faiss() is None and K._faiss() is None
    assert tries == ["faiss"]
    assert K.topk_backend(torch.float32, "cpu") == "torch"


def test_faiss_refuses_mixed_dtypes_and_keeps_float32_under_a_float64_default():
    pytest.importorskip("faiss")
    a32, a64 = _unit(3, d=4, seed=1, dtype=torch.float32), _unit(3, d=4, seed=1)
    for a, b in ((a32, a64), (a64, a32)):
        with pytest.raises(ValueError, match=rf"^backend='faiss' takes float32 tensors on the CPU; got {a.dtype} on cpu "
                                             rf"and {b.dtype} on cpu \(use backend='torch'\)$"):
            K.topk_similarity(a, b, 2, backend="faiss")
    b = _unit(20, d=4, seed=2, dtype=torch.float32)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        v, i = K.topk_similarity(a32, b, 3, backend="faiss")
    finally:
        torch.set_default_dtype(old)
    assert v.dtype == torch.float32
    torch.testing.assert_close(v.double(), _dense_topk(a32, b, 3).values, rtol=0, atol=1e-6)


@pytest.mark.parametrize("n_b, block_bytes, chunks", [
    (50, 4 * 50, [1] * 7),                  # one row of 50 float32 scores a chunk
    (50, 4 * 50 * 3, [3, 3, 1]),
    (50, None, [7]),
    (2000, 4 * 1024 * 2, [2, 2, 2, 1]),     # faiss scores 1024 bank rows at a time: 2 rows of a fit
])
def test_faiss_passes_a_in_chunks_within_block_bytes(monkeypatch, n_b, block_bytes, chunks):
    faiss = pytest.importorskip("faiss")
    sizes = []
    real = faiss.knn_inner_product

    def spy(*args):
        sizes.append(args[3])                # nx: the rows of a in this call
        return real(*args)
    monkeypatch.setattr(faiss, "knn_inner_product", spy)
    a, b = _unit(7, d=4, seed=1, dtype=torch.float32), _unit(n_b, d=4, seed=2, dtype=torch.float32)
    v, i = K.topk_similarity(a, b, 3, backend="faiss", block_bytes=block_bytes)
    assert sizes == chunks
    want = _dense_topk(a, b, 3)
    torch.testing.assert_close(v.double(), want.values, rtol=0, atol=1e-6)
    assert torch.equal(i, want.indices)


def test_faiss_follows_torchs_thread_count(monkeypatch):
    """Where faiss and torch share one OpenMP runtime (as here) their thread counts are one setting; where faiss has
    its own (a stand-in for its getter reports another count), the kernel sets faiss's to torch's before it searches,
    and leaves it alone when they agree."""
    faiss = pytest.importorskip("faiss")
    threads, told = torch.get_num_threads(), []
    monkeypatch.setattr(faiss, "omp_set_num_threads", told.append)
    a, b = _unit(3, d=4, dtype=torch.float32), _unit(9, d=4, seed=1, dtype=torch.float32)
    monkeypatch.setattr(faiss, "omp_get_max_threads", lambda: threads)
    K.topk_similarity(a, b, 2, backend="faiss")
    assert told == []
    monkeypatch.setattr(faiss, "omp_get_max_threads", lambda: threads + 1)
    v, _ = K.topk_similarity(a, b, 2, backend="faiss")
    assert told == [threads]
    torch.testing.assert_close(v.double(), _dense_topk(a, b, 2).values, rtol=0, atol=1e-6)


# ------------------------------------------------------------------------------------------------ faiss, GPU stand-in
class _OnCuda:
    """A tensor as ``_topk_faiss_gpu`` sees one on a GPU: a CPU tensor under a CUDA device name (no GPU needed)."""

    def __init__(self, t, index):
        self.t, self.device, self.dtype, self.shape = t, torch.device("cuda", index), t.dtype, t.shape

    def contiguous(self):
        return self


class _FaissGpu:
    """faiss's GPU API as ``_topk_faiss_gpu`` calls it: ``knn_gpu`` records its arguments and returns the dense top-k
    (float32 values, int32 indices: the kernel casts them to the input dtype and to long)."""

    METRIC_INNER_PRODUCT, METRIC_L2 = 0, 1

    def __init__(self, n_gpus=1):
        self.n_gpus, self.resources, self.calls = n_gpus, [], []

    def get_num_gpus(self):
        return self.n_gpus

    def StandardGpuResources(self):
        self.resources.append(object())
        return self.resources[-1]

    def knn_gpu(self, res, xq, xb, k, D=None, I=None, metric=METRIC_L2, device=-1):
        self.calls.append({"res": res, "xq": xq, "xb": xb, "k": k, "metric": metric, "device": device})
        top = (xq.t.double() @ xb.t.double().T).topk(k, dim=1)
        return top.values.float(), top.indices.int()


@pytest.fixture
def faiss_gpu(monkeypatch):
    fake = _FaissGpu()
    fake.imported = []
    monkeypatch.setattr(K, "_faiss", lambda: fake)
    monkeypatch.setattr(K, "importlib", types.SimpleNamespace(import_module=fake.imported.append))
    monkeypatch.setattr(K, "_GPU_RESOURCES", {})
    return fake


def test_faiss_gpu_searches_with_one_resource_per_device(faiss_gpu):
    a, b = _unit(6, d=8, seed=1, dtype=torch.float32), _unit(40, d=8, seed=2, dtype=torch.float32)
    want = _dense_topk(a, b, 5)
    for _ in range(2):
        v, i = K.topk_similarity(_OnCuda(a, 1), _OnCuda(b, 1), 5, backend="faiss-gpu")
        assert v.dtype == torch.float32 and i.dtype == torch.long
        torch.testing.assert_close(v.double(), want.values, rtol=0, atol=1e-6)
        assert torch.equal(i, want.indices)
    v, _ = K.topk_similarity(_OnCuda(a.half(), 1), _OnCuda(b.half(), 1), 5, backend="faiss-gpu")
    assert v.dtype == torch.float16
    assert faiss_gpu.imported == ["faiss.contrib.torch_utils"] * 3
    assert len(faiss_gpu.resources) == 1 and K._GPU_RESOURCES == {1: faiss_gpu.resources[0]}
    assert len(faiss_gpu.calls) == 3
    for call in faiss_gpu.calls:
        assert call["res"] is faiss_gpu.resources[0] and call["k"] == 5 and call["device"] == 1
        assert call["metric"] == _FaissGpu.METRIC_INNER_PRODUCT
    assert faiss_gpu.calls[0]["xq"].t is a and faiss_gpu.calls[0]["xb"].t is b


def test_faiss_gpu_guards(monkeypatch, faiss_gpu):
    a, b = _unit(3, d=4, seed=1, dtype=torch.float32), _unit(2100, d=4, seed=2, dtype=torch.float32)
    no_build = r"^backend='faiss-gpu' needs a GPU build of faiss that sees a GPU \(pip install faiss-gpu\); " \
               r"use backend='torch'$"
    for stand_in in (None, types.SimpleNamespace(get_num_gpus=lambda: 1), _FaissGpu(n_gpus=0)):
        with monkeypatch.context() as m:
            m.setattr(K, "_faiss", lambda: stand_in)
            with pytest.raises(ValueError, match=no_build):
                K.topk_similarity(_OnCuda(a, 0), _OnCuda(b, 0), 2, backend="faiss-gpu")
    with pytest.raises(ValueError, match=r"^backend='faiss-gpu' takes CUDA tensors on one device; got cpu and cpu$"):
        K.topk_similarity(a, b, 2, backend="faiss-gpu")
    with pytest.raises(ValueError, match=r"^backend='faiss-gpu' takes CUDA tensors on one device; got cuda:1 and "
                                         r"cuda:0$"):
        K.topk_similarity(_OnCuda(a, 1), _OnCuda(b, 0), 2, backend="faiss-gpu")
    with pytest.raises(ValueError, match=r"^backend='faiss-gpu' searches at most k=2048 neighbours; got k=2049 "
                                         r"\(use backend='torch'\)$"):
        K.topk_similarity(_OnCuda(a, 0), _OnCuda(b, 0), 2049, backend="faiss-gpu")
    assert faiss_gpu.calls == []
    v, i = K.topk_similarity(_OnCuda(a, 0), _OnCuda(b, 0), 2048, backend="faiss-gpu")   # the largest k it takes
    assert v.shape == i.shape == (3, 2048) and faiss_gpu.calls[0]["device"] == 0


@pytest.mark.parametrize("backend", ["torch", "numpy", "faiss"])
@pytest.mark.parametrize("n_b", [0, 300])
def test_k_zero_is_an_empty_result_on_every_backend_and_bank(backend, n_b):
    """k = 0 passes the guard: every backend returns (n_a, 0), also when the bank spans several column blocks
    (the torch top-k once took a row minimum of an empty block) and when the bank is empty (a block size of 0)."""
    if backend == "faiss":
        pytest.importorskip("faiss")
    a = torch.randn(5, 8, generator=torch.Generator().manual_seed(0))
    b = torch.randn(n_b, 8, generator=torch.Generator().manual_seed(1))
    v, i = K.topk_similarity(a, b, 0, backend=backend, block_bytes=600)
    assert tuple(v.shape) == (5, 0) and tuple(i.shape) == (5, 0)
    assert v.dtype == a.dtype and i.dtype == torch.long
