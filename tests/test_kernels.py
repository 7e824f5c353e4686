"""The small kernels of ``hubnorm.kernels`` that the fast-path tests reach only through whole fits, each against a
dense float64 form or a hand-computed value: the block-size rules, the merge of running top-k lists, the packing of
threshold survivors, the centred log-mean-exp with its precision rule and its messages, the bank column, the
Gibbs weights, and the kernels over given score matrices along both axes. ``tests/test_fast_paths.py`` holds the
top-k and log-sum-exp kernels to their oracles at scale and on every backend."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hubnorm import kernels as K


def _unit(n, d=5, seed=0, dtype=torch.float64):
    x = torch.from_numpy(np.random.default_rng(seed).standard_normal((n, d)))
    return (x / x.norm(dim=1, keepdim=True)).to(dtype)


# ------------------------------------------------------------------------------------------------ sizes
def test_block_rules():
    assert K.block_rows(10, 8, 800) == 10 and K.block_rows(10, 8, 799) == 9 and K.block_rows(10, 8, 1) == 1
    assert K.block_rows(10, 8, 1, minimum=3) == 3
    assert K.block_rows(1024, 4) == K.DEFAULT_BLOCK_BYTES // 4096
    assert K.block_rows(0, 4, 100) == 100                       # no columns: the budget over one byte
    ra, rb = K.block_shape(100, 50, 8, 8 * 200)
    assert ra * rb * 8 <= 8 * 200 and rb == 2 and ra == 100
    assert K.block_shape(10, 10, 8, None) == (10, 10)
    assert list(K.iter_blocks(7, 3)) == [(0, 3), (3, 6), (6, 7)] and list(K.iter_blocks(0, 3)) == []
    # 8 scores per block: 1 bank row x 8 rows of a, balanced to 5 + 5 (not 8 + 2); never depends on k
    a_blocks, b_blocks, rb = K.topk_partition(10, 40, 4, 32)
    assert a_blocks == [(0, 5), (5, 10)] and rb == 1 and b_blocks == [(j, j + 1) for j in range(40)]
    assert K.topk_partition(10, 40, 4, 480) == ([(0, 10)], [(0, 12), (12, 24), (24, 36), (36, 40)], 12)
    assert K.scratch_bytes("cpu", 1234) == 1234 and K.scratch_bytes("meta", 1234) == K.DEVICE_SCRATCH_BYTES
    assert K.counts_namespace("cpu") is np and K.counts_namespace("meta") is torch


def test_merge_topk_and_pack_rows():
    v, i = K._merge_topk(None, None, torch.tensor([[3.0, 1.0]]), torch.tensor([[7, 8]]), 3)
    assert v.tolist() == [[3.0, 1.0]] and i.tolist() == [[7, 8]]      # fewer than k: kept as they are
    v, i = K._merge_topk(v, i, torch.tensor([[2.0, 5.0]]), torch.tensor([[9, 4]]), 3)
    order = v.argsort(dim=1, descending=True)
    assert v.gather(1, order).tolist() == [[5.0, 3.0, 2.0]] and i.gather(1, order).tolist() == [[4, 7, 9]]
    rows, cols, vals = torch.tensor([2, 0, 2, 2]), torch.tensor([5, 6, 7, 8]), torch.tensor([0.5, 0.6, 0.7, 0.8])
    pv, pi = K.pack_rows(rows, cols, vals, 4, -math.inf)
    assert pv.shape == (4, 3)
    assert pv[0].tolist() == [pytest.approx(0.6), -math.inf, -math.inf] and pi[0].tolist() == [6, 0, 0]
    assert pv[1].tolist() == [-math.inf] * 3 and pv[3].tolist() == [-math.inf] * 3
    assert pv[2].tolist() == pytest.approx([0.5, 0.7, 0.8]) and pi[2].tolist() == [5, 7, 8]   # input order kept
    ev, ei = K.pack_rows(torch.tensor([], dtype=torch.long), torch.tensor([], dtype=torch.long),
                         torch.tensor([]), 2, -1.0)
    assert ev.shape == (2, 0) and ei.shape == (2, 0)


# ------------------------------------------------------------------------------------------------ precision rules
def test_working_dtype_at_its_limits():
    eps32, eps64 = 2.0 ** -24, 2.0 ** -53
    lim32 = K.PRECISION_TARGET / eps32                          # 16 score units of magnitude in float32
    assert K.working_dtype(torch.float32, lim32) == torch.float32
    assert K.working_dtype(torch.float32, lim32 * 1.01) == torch.float64
    assert K.working_dtype(torch.float16, 1.0) == torch.float32
    assert K.working_dtype(torch.float64, 1.0) == torch.float64
    assert K.working_dtype(torch.float64, K.PRECISION_TARGET / eps64 * 1.01) is None
    big32 = torch.finfo(torch.float32).max / 16
    assert K.working_dtype(torch.float32, 1.0, overflow=big32 * 0.99) == torch.float32
    assert K.working_dtype(torch.float32, 1.0, overflow=big32) == torch.float64
    assert K.working_dtype(torch.float64, 1.0, overflow=torch.finfo(torch.float64).max / 16) is None


def test_log_mean_exp_dtype_rule_and_message():
    # magnitude = (log n + scale * smax) / unit: float32 while eps32 * magnitude <= 2**-20 (<= 16)
    assert K.log_mean_exp_dtype(torch.float32, 1.0, 100, 10.0, 10.0, "tau") == torch.float32      # (4.6 + 10) / 10
    assert K.log_mean_exp_dtype(torch.float32, 1.0, 100, 10.0, 0.5, "tau") == torch.float64       # 29 > 16
    assert K.log_mean_exp_dtype(torch.float32, 1.0, 1, 14.0, 1.0, "tau") == torch.float32          # log 2 + 14 < 16
    assert K.log_mean_exp_dtype(torch.float32, 1.0, 10 ** 6, 14.0, 1.0, "tau") == torch.float64    # log 1e6 + 14
    with pytest.raises(ValueError) as err:
        K.log_mean_exp_dtype(torch.float64, 1.0, 1000, 1e-3, 1e-12, "tau=1e+03")
    msg = str(err.value)
    assert msg.startswith("tau=1e+03 is too extreme to compute precisely")
    err_units = 2.0 ** -53 * (math.log(1000) + 1e-3) / 1e-12
    assert f"about {err_units:.2g} in score units" in msg
    assert f"tau <= {K.PRECISION_TARGET / (2.0 ** -53 * math.log(1000)):.1e}" in msg and "bank of 1000 rows" in msg


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("scale", [0.5, 30.0, -4.0])
def test_log_mean_exp_similarity_equals_dense(dtype, scale):
    a, b = _unit(9, seed=1, dtype=dtype), _unit(23, seed=2, dtype=dtype)
    s = a.double() @ b.double().T
    want = torch.logsumexp(scale * s, dim=1) - math.log(23)
    got = K.log_mean_exp_similarity(a, b, scale, block_bytes=64)
    tol = 1e-12 if dtype == torch.float64 else 4e-6 * max(1.0, abs(scale))
    torch.testing.assert_close(got.double(), want, rtol=0, atol=tol)
    cache = {}
    again = K.log_mean_exp_similarity(a, b, scale, block_bytes=64, cache=cache)
    assert cache and torch.equal(again, got)
    n_blocks = len(cache)
    other = K.log_mean_exp_similarity(a, b, 2 * scale, block_bytes=64, cache=cache)   # read from the filled cache
    assert len(cache) == n_blocks
    assert torch.equal(other, K.log_mean_exp_similarity(a, b, 2 * scale, block_bytes=64))
    z = K.log_mean_exp_similarity(a, b, 0.0)
    assert z.dtype == dtype and z.shape == (9,) and torch.all(z == 0)


def test_log_mean_exp_similarity_promotes_and_refuses():
    a, b = _unit(4, seed=1, dtype=torch.float32), _unit(6, seed=2, dtype=torch.float32)
    assert K.log_mean_exp_similarity(a, b, 1e3).dtype == torch.float32            # unit = scale: relative
    assert K.log_mean_exp_similarity(a, b, 1e3, unit=1.0).dtype == torch.float64  # absolute: promoted
    with pytest.raises(ValueError, match="^beta is too extreme"):
        K.log_mean_exp_similarity(a, b, 1e3, unit=1e-20, name="beta")


# ------------------------------------------------------------------------------------------------ columns and weights
def test_bank_column_and_gibbs():
    bank, t = _unit(37, seed=3), _unit(1, seed=4)[0]
    np.testing.assert_allclose(K.bank_column(bank, t, block_bytes=40).numpy(), (bank @ t).numpy(), rtol=0, atol=1e-14)
    assert K.bank_column(bank.float(), t.float()).dtype == torch.float32
    x = torch.tensor([0.0, math.log(3.0)], dtype=torch.float64)
    w, logw = K.gibbs(x)
    torch.testing.assert_close(w, torch.tensor([0.25, 0.75], dtype=torch.float64))
    torch.testing.assert_close(logw, torch.log(w))
    # the Gibbs identity: LSE(x) = sum w x + H(w)
    x = torch.randn(50, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    w, logw = K.gibbs(x)
    torch.testing.assert_close(torch.logsumexp(x, 0), (w * x).sum() - (w * logw).sum())


# ------------------------------------------------------------------------------------------------ given score matrices
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("block_bytes", [None, 48])
def test_kernels_over_given_scores(dim, block_bytes):
    s = _unit(19, seed=5) @ _unit(13, seed=6).T
    v, i = K.topk_scores(s, 4, dim, block_bytes=block_bytes)
    x = s if dim == 1 else s.T
    want = x.topk(4, dim=1)
    assert torch.equal(v, want.values) and torch.equal(i, want.indices)
    lse = K.logsumexp_scores(s, 7.0, dim, block_bytes=block_bytes)
    torch.testing.assert_close(lse, torch.logsumexp(7.0 * s, dim=dim), rtol=0, atol=1e-12)   # block merges
    assert lse.dtype == torch.float64
    s32 = s.float()
    lse32 = K.logsumexp_scores(s32, 7.0, dim, dtype=torch.float64, block_bytes=block_bytes)
    torch.testing.assert_close(lse32, torch.logsumexp(7.0 * s32.double(), dim=dim), rtol=0, atol=1e-12)
    assert torch.equal(s32, s.float())                          # the given matrix is never modified


# ------------------------------------------------------------------------------------------------ top-k, torch backend
def _dense_topk(a, b, k):
    return (a.double() @ b.double().T).topk(k, dim=1)


def test_torch_topk_one_query_row_and_the_k_message():
    b = _unit(40, d=8, seed=5, dtype=torch.float32)
    v, i = K.topk_similarity(_unit(1, d=8, seed=6, dtype=torch.float32), b, 7, backend="torch")
    want_v, want_i = _dense_topk(_unit(1, d=8, seed=6, dtype=torch.float32), b, 7)
    assert v.shape == i.shape == (1, 7)
    torch.testing.assert_close(v.double(), want_v, rtol=0, atol=1e-6)
    assert torch.equal(i, want_i)
    with pytest.raises(ValueError, match=r"^k=41 is larger than the bank \(40 rows\): use k <= 40$"):
        K.topk_similarity(_unit(3, d=8, dtype=torch.float32), b, 41)


def _record_passes(monkeypatch):
    passes = []
    real = K._topk_rows

    def spy(*args, filtered):
        v, i = real(*args, filtered=filtered)
        passes.append((filtered, v is not None))
        return v, i
    monkeypatch.setattr(K, "_topk_rows", spy)
    return passes


@pytest.mark.parametrize("bank_kind", ["random", "ties", "descending"])
def test_torch_topk_threshold_pass_and_its_fallback(monkeypatch, bank_kind):
    """The torch backend's threshold pass (:func:`hubnorm.kernels._topk_rows` with ``filtered=True``) is exact and
    complete on a random bank and on one of massive ties (small-integer scores: many values equal each row's
    threshold, and they count towards its k); on a bank sorted by decreasing score the warm-up blocks set a
    threshold that fewer than k values reach (the 90 kept from the warm-up, none later), and the row block is redone
    by plain merging (``filtered=False``)."""
    rng = np.random.default_rng(9)
    k, n_b, d = 100, 3000, 6     # threshold after 900 of 3000 columns: the 90th best seen (q = 3 k 900 / 3000)
    a = torch.from_numpy(rng.standard_normal((5, d)).astype(np.float32))
    if bank_kind == "ties":
        a = torch.from_numpy(rng.integers(0, 3, (5, d)).astype(np.float32))
        b = torch.from_numpy(rng.integers(0, 3, (n_b, d)).astype(np.float32))
    else:
        b = torch.from_numpy(rng.standard_normal((n_b, d)).astype(np.float32))
        if bank_kind == "descending":       # sorted for the first query: its best values all come first
            b = b[(b @ a[0]).argsort(descending=True)]
    passes = _record_passes(monkeypatch)
    v, i = K.topk_similarity(a, b, k, backend="torch", block_bytes=5 * 4 * 300)   # 10 column blocks of 300
    want_v, _ = _dense_topk(a, b, k)
    assert passes == ([(True, True)] if bank_kind != "descending" else [(True, False), (False, True)])
    torch.testing.assert_close(v.double(), want_v, rtol=0, atol=1e-5)
    got = (a.double()[:, None, :] * b.double()[i]).sum(-1)       # each index's own score is its value
    torch.testing.assert_close(got, v.double(), rtol=0, atol=1e-5)
    assert all(len(set(row.tolist())) == k for row in i)          # k distinct bank rows per query
    if bank_kind == "ties":
        assert torch.equal(v.double(), want_v)                    # small integers: every product is exact


def test_torch_topk_counts_later_values_equal_to_the_threshold(monkeypatch):
    """One query whose warm-up (the first 900 of 3,000 columns) holds 90 scores of 5 and the rest of the bank 10
    more: the threshold is 5 (the 90th best seen), and the 10 later values *equal* to it complete the k = 100; the
    threshold pass is exact without the fallback."""
    rng = np.random.default_rng(2)
    score = rng.integers(0, 5, 3000).astype(np.float32)
    score[rng.choice(900, 90, replace=False)] = 5.0
    score[900 + rng.choice(2100, 10, replace=False)] = 5.0
    b = torch.from_numpy(np.stack([score, np.zeros(3000, np.float32)], axis=1))
    a = torch.tensor([[1.0, 0.0]])
    passes = _record_passes(monkeypatch)
    v, i = K.topk_similarity(a, b, 100, backend="torch", block_bytes=1 * 4 * 300)
    assert passes == [(True, True)]
    assert torch.equal(v, torch.full((1, 100), 5.0)) and sorted(i[0].tolist()) == np.flatnonzero(score == 5).tolist()


# ------------------------------------------------------------------------------------------------ log-sum-exp, numpy
def test_numpy_logsumexp_keeps_each_rows_own_maximum_and_casts_both_inputs():
    """Rows whose scores lie thousands of units apart (after ``scale``) each keep their own running maximum: one
    shared maximum would underflow the low rows to -inf. ``b`` is cast to the computing dtype like ``a``."""
    a = _unit(6, d=8, seed=7, dtype=torch.float64)
    a[3:] *= 1e-3
    b = _unit(50, d=8, seed=8, dtype=torch.float64)
    want = torch.logsumexp(3000.0 * (a @ b.T), dim=1)
    assert K.numpy_topk_partition(6, 50, 8, None) == ([(0, 6)], [(0, 50)])
    assert K.numpy_topk_partition(6, 50, 8, 128)[1] == [(0, 16), (16, 32), (32, 48), (48, 50)]
    for block_bytes in (None, 128):       # one tile of every row; rows one at a time over four column tiles
        got = K.logsumexp_similarity(a, b, 3000.0, backend="numpy", block_bytes=block_bytes)
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-9)
    a32 = a.float()
    mixed = K.logsumexp_similarity(a32, b, 2.0, backend="numpy")
    same = K.logsumexp_similarity(a32, b.float(), 2.0, backend="numpy")
    assert mixed.dtype == torch.float32 and torch.equal(mixed, same)


def test_numpy_logsumexp_refuses_what_it_cannot_compute():
    a, b = _unit(3, seed=1, dtype=torch.float32), _unit(4, seed=2, dtype=torch.float32)
    for kwargs, said in (({"dtype": torch.float16}, "dtype=torch.float16, shared_blocks None"),
                         ({"shared_blocks": {}}, "dtype=None, shared_blocks given")):
        with pytest.raises(ValueError, match=r"^backend='numpy' takes CPU tensors .*" + said + r" \(use backend='torch'\)$"):
            K.logsumexp_similarity(a, b, 1.0, backend="numpy", **kwargs)
    with pytest.raises(ValueError, match="float16 on cpu"):
        K.logsumexp_similarity(a.half(), b.half(), 1.0, backend="numpy")


def test_log_mean_exp_names_scale_by_default_and_sizes_by_row_norms():
    """The refusal names ``scale`` unless told another name; the precision rule reads the largest *row* norm (unit
    rows: scores within [-1, 1]), not the norm of the whole matrix, so 2,000 unit rows stay in float32."""
    a, b = _unit(2000, seed=1, dtype=torch.float32), _unit(2000, seed=2, dtype=torch.float32)
    assert K.log_mean_exp_similarity(a, b, 50.0).dtype == torch.float32
    with pytest.raises(ValueError, match="^scale is too extreme"):
        K.log_mean_exp_similarity(a[:4], b[:6], 1e3, unit=1e-20)


def _topk_cases():
    g = torch.Generator().manual_seed(3)
    rand = torch.randn(400, 23, generator=g, dtype=torch.float64)
    ties = torch.randint(0, 5, (400, 23), generator=g).double()              # many equal scores
    rising = torch.arange(400, dtype=torch.float64)[:, None].repeat(1, 23)    # every later block beats the running
    falling = rising.flip(0)                                                  # no later block has a candidate
    mixed = rand.clone()
    mixed[300:, 4] += 10.0                                                    # one column's winners come late
    neg = rand.clone()
    neg[:, 7] = -math.inf                                                     # a column of -inf (fewer than k finite)
    neg[11, 7] = 0.5
    return {"random": rand, "ties": ties, "rising": rising, "falling": falling, "late column": mixed, "-inf": neg}


@pytest.mark.parametrize("case", list(_topk_cases()))
@pytest.mark.parametrize("k", [1, 6, 40])
@pytest.mark.parametrize("block_rows", [3, 17, 400])
def test_topk_of_given_scores_over_rows_equals_dense_topk(case, k, block_rows):
    """dim 0: the running top-k of the first block and the above-threshold candidates of later blocks (or a block's
    own top-k when a quarter of it passes) equal the dense top-k: same values, indices of those values."""
    s = _topk_cases()[case]
    for x in (s, s.float()):
        v, i = K.topk_scores(x, k, 0, block_bytes=block_rows * 23 * x.element_size())
        want = x.T.topk(k, dim=1).values
        assert torch.equal(v, want), case
        assert torch.equal(x.T.gather(1, i), v) and bool((i >= 0).all())
        rows_per_col = [set(r.tolist()) for r in i]
        assert all(len(r) == k for r in rows_per_col)                          # k distinct rows per column


@pytest.mark.parametrize("dim", [0, 1])
def test_kernels_stream_a_transposed_view_along_its_stored_rows(dim, monkeypatch):
    stored = _unit(31, seed=8) @ _unit(9, seed=9).T                           # C order: rows are contiguous
    s = stored.T                                                               # as read: a transposed view
    v, i = K.topk_scores(s, 3, dim, block_bytes=64)
    want = (s if dim == 1 else s.T).topk(3, dim=1)
    assert torch.equal(v, want.values) and torch.equal(i, want.indices)
    lse = K.logsumexp_scores(s, 5.0, dim, block_bytes=64)
    torch.testing.assert_close(lse, torch.logsumexp(5.0 * s, dim=dim), rtol=0, atol=1e-12)
    seen = []
    real = torch.Tensor.topk
    monkeypatch.setattr(torch.Tensor, "topk", lambda self, *a, **kw: (seen.append(self.is_contiguous()),
                                                                       real(self, *a, **kw))[1])
    K.topk_scores(s, 3, dim, block_bytes=64)
    assert seen and seen[0]                                                    # blocks of stored rows, contiguous


@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_logsumexp_of_given_scores_subtracts_the_maximum(dim, dtype):
    """At a scale where exp overflows (1000 * s up to 1000) the slab kernel still equals torch.logsumexp: it
    exponentiates x - max, never x."""
    s = _unit(23, seed=1) @ _unit(11, seed=2).T
    got = K.logsumexp_scores(s.to(dtype), 1000.0, dim, dtype=dtype, block_bytes=64 * 11)
    want = torch.logsumexp(1000.0 * s.to(dtype).double(), dim=dim)
    assert bool(torch.isfinite(got).all())
    torch.testing.assert_close(got, want, rtol=0, atol=1e-9 if dtype == torch.float64 else 2e-3)
