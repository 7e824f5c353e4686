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
