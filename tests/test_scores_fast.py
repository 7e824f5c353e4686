"""The fast score path (hubnorm.engine.LocalEngine over stored matrices, plain=False): a stored matrix read once per
fit, its reductions
through the kernels of hubnorm.kernels (topk_scores, logsumexp_scores), float32 where the precision rules allow.
Tested equal to the plain block loop (plain=True): float64 matrices to 1e-12 (top-k values exactly, indices up to
ties), float32 matrices to the kernels' precision target."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import hubnorm as hn
from hubnorm.kernels import PRECISION_TARGET, logsumexp_scores, topk_scores
from hubnorm.engine import LocalEngine
from hubnorm.matrices import ScoreMatrix
from hubnorm.scores import matrices_from_embeddings

from method_checks import unit_rows

METHODS = [("nnn", {"k": 5}), ("is", {"tau": 0.05}), ("dis", {"tau": 0.05, "k": 2}), ("csls", {"k": 4}),
           ("sn", {"tau": 0.05}), ("dbsn", {"tau": 0.05}), ("dualis", {"beta_query": 20.0, "beta_target": 8.0}),
           ("dualdis", {"beta_query": 20.0, "beta_target": 8.0})]


@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kernels_equal_dense(dim, dtype):
    g = torch.Generator().manual_seed(0)
    s = torch.randn(203, 37, generator=g, dtype=torch.float64).to(dtype)
    for k in (1, 7):
        v, i = topk_scores(s, k, dim, block_bytes=37 * 4 * 16)     # many blocks along the reduced axis
        ref_v, _ = (s if dim == 1 else s.T).topk(k, dim=1)
        assert torch.equal(v, ref_v)
        x = s if dim == 1 else s.T
        assert torch.equal(x.gather(1, i), v)                         # the indices point at those values
    for scale in (0.5, 20.0):
        got = logsumexp_scores(s, scale, dim, dtype=torch.float64, block_bytes=37 * 8 * 10)
        want = torch.logsumexp(scale * s.double(), dim=dim)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def _mats(tmp_path, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    t, qb, tb, q = (unit_rows(rng, n, 12) for n in (30, 500, 70, 40))
    mats = matrices_from_embeddings(q, t, qb, tb)
    out = {}
    for key, m in mats.items():
        path = tmp_path / f"{'_'.join(key)}.npy"
        if key == ("query_bank", "target_bank"):       # stored the other way round: read transposed
            np.save(path, np.ascontiguousarray(m.T, dtype=dtype))
            out[(key[1], key[0])] = np.load(path, mmap_mode="r")
        else:
            np.save(path, m.astype(dtype))
            out[key] = np.load(path, mmap_mode="r")
    return out


def _fit(mats, name, params, **kw):
    engine = LocalEngine(matrices=mats, block_bytes=30 * 8 * 64, **kw)
    return hn.make_normalizer(name, **params).fit_engine(engine), engine


@pytest.mark.parametrize("name,params", METHODS)
def test_fast_equals_plain_float64(tmp_path, name, params):
    mats = _mats(tmp_path)
    fast, e_fast = _fit(mats, name, params)
    plain, e_plain = _fit(mats, name, params, plain=True)
    np.testing.assert_allclose(fast.offsets_.numpy(), plain.offsets_.numpy(), rtol=0, atol=1e-12, err_msg=name)
    if hasattr(plain, "activation_"):
        assert torch.equal(fast.activation_, plain.activation_)
    # read once per fit: one pass per matrix, whatever the number of reductions / iterations
    n_read = {("query_bank", "targets"): 500, ("target_bank", "query_bank"): 70, ("target_bank", "targets"): 70}
    strips = sum(math.ceil(n / (30 * 8 * 64 // (8 * m.shape[1]))) for key, m in mats.items() if key in n_read
                 for n in [n_read[key]] if _uses(name, key))
    assert e_fast.blocks_read == strips, (name, e_fast.blocks_read, strips)
    assert e_plain.blocks_read >= e_fast.blocks_read


def _uses(name, key):
    need = {"nnn": {("query_bank", "targets")}, "is": {("query_bank", "targets")}, "dis": {("query_bank", "targets")},
            "csls": {("query_bank", "targets")}, "sn": {("query_bank", "targets")},
            "dbsn": {("query_bank", "targets"), ("target_bank", "query_bank")},
            "dualis": {("query_bank", "targets"), ("target_bank", "targets")},
            "dualdis": {("query_bank", "targets"), ("target_bank", "targets")}}
    return key in need[name]


@pytest.mark.parametrize("name,params", METHODS)
def test_fast_float32_within_precision_target(tmp_path, name, params):
    """A float32 matrix: top-k values exact; log-sum-exp and Sinkhorn in float32 where the working-dtype rules keep
    the offsets to the precision target (a loose multiple of it: the bound is per operation)."""
    mats = _mats(tmp_path, np.float32)
    fast, _ = _fit(mats, name, params)
    plain, _ = _fit(mats, name, params, plain=True)
    atol = 0.0 if name in ("nnn", "csls") else 16 * PRECISION_TARGET
    np.testing.assert_allclose(fast.offsets_.double().numpy(), plain.offsets_.double().numpy(), rtol=0, atol=atol,
                               err_msg=name)


def test_larger_than_resident_budget_is_streamed(tmp_path):
    mats = _mats(tmp_path)
    budget = 30 * 8 * 64
    for name, params in METHODS[:5]:
        engine = LocalEngine(matrices=mats, block_bytes=budget, resident_bytes=0)
        got = hn.make_normalizer(name, **params).fit_engine(engine)
        want, _ = _fit(mats, name, params, plain=True)
        np.testing.assert_allclose(got.offsets_.numpy(), want.offsets_.numpy(), rtol=0, atol=1e-12, err_msg=name)
        assert 0 < engine.largest_block * 8 <= budget and not engine._res


def test_resident_read_checks_nan_and_bounds(tmp_path):
    mats = _mats(tmp_path)
    bank = np.array(mats[("query_bank", "targets")])
    bank[123, 7] = np.nan
    engine = LocalEngine(matrices={**mats, ("query_bank", "targets"): ScoreMatrix(bank, "bank.npy")},
                         block_bytes=30 * 8 * 64)
    with pytest.raises(ValueError, match=r"bank.npy holds a non-finite score .* row 123, column 7"):
        hn.make_normalizer("is", tau=0.05).fit_engine(engine)
    t = ScoreMatrix(np.asfortranarray(mats[("target_bank", "query_bank")]), "tb.npy").T   # Fortran order, transposed
    e = LocalEngine(matrices={**mats, ("query_bank", "target_bank"): t}, block_bytes=30 * 8 * 64)
    x = e.resident("query_bank", "target_bank")
    assert torch.equal(x, torch.from_numpy(np.asarray(mats[("target_bank", "query_bank")]).T.copy()))
    assert e.score_bound(hn.blocks.Scores("query_bank", "target_bank")) == float(np.abs(x.numpy()).max())


@pytest.mark.parametrize("plain", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sinkhorn_blocks_handle_underflowing_columns(plain, dtype):
    """SN's block iteration (one exponential pass, w @ E) on a target opposite to the bank: that column's sum
    underflows in every block and is computed exactly; offsets = a dense float64 Sinkhorn."""
    from scipy.special import logsumexp

    rng = np.random.default_rng(0)
    bank = unit_rows(rng, 400, 16) * 0.1 + np.eye(16)[0]
    bank /= np.linalg.norm(bank, axis=1, keepdims=True)
    targets = np.concatenate([unit_rows(rng, 50, 16) * 0.1 + np.eye(16)[0], -bank[:1]])
    targets /= np.linalg.norm(targets, axis=1, keepdims=True)
    S = bank @ targets.T
    tau, m, n = 0.005, *S.shape
    g = np.zeros(n)
    for _ in range(3):
        f = tau * np.log(1 / m) - tau * logsumexp((S + g) / tau, axis=1)
        g = tau * np.log(1 / n) - tau * logsumexp((S + f[:, None]) / tau, axis=0)
    engine = LocalEngine(matrices={("query_bank", "targets"): S.astype(dtype)}, block_bytes=n * 8 * 64, plain=plain)
    got = hn.make_normalizer("sn", tau=tau, n_iter=3).fit_engine(engine).offsets_.double().numpy()
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, g, rtol=0, atol=1e-9 if dtype == np.float64 else 1e-5)


@pytest.mark.parametrize("dtype,scale_up", [(np.float32, 1.0), (np.float32, 100.0), (np.float64, 1.0)])
@pytest.mark.parametrize("name,params", [("is", {"tau": 0.05}), ("dis", {"tau": 0.05, "k": 2})])
def test_log_sum_exp_takes_the_bound_in_its_checking_pass(tmp_path, monkeypatch, dtype, scale_up, name, params):
    """IS / DIS on an unchecked memory map read it once: the kernel's pass checks it finite and takes its bound
    (score_bound is never asked), and the offsets equal, bit for bit, those of the two-pass path (the bound taken
    first). Scores 100x larger need float64 for a float32 matrix: computed again in float64, still equal."""
    mats = {key: np.asarray(m) * scale_up for key, m in _mats(tmp_path, dtype).items()}
    path = tmp_path / "bank_big.npy"
    np.save(path, mats[("query_bank", "targets")].astype(dtype))
    mats[("query_bank", "targets")] = np.load(path, mmap_mode="r")

    def engine():
        return LocalEngine(matrices=mats, block_bytes=30 * 8 * 64)

    two_pass = engine()
    two_pass.score_bound(hn.blocks.Scores("query_bank", ("targets",)))   # the bound known: prepare picks the dtype
    want = hn.make_normalizer(name, **params).fit_engine(two_pass)
    one_pass = engine()
    monkeypatch.setattr(LocalEngine, "score_bound", lambda self, source: pytest.fail("a pass of its own"))
    got = hn.make_normalizer(name, **params).fit_engine(one_pass)
    assert got.offsets_.dtype == want.offsets_.dtype
    assert torch.equal(got.offsets_, want.offsets_)
    n_strips = math.ceil(500 / (30 * 8 * 64 // (np.dtype(dtype).itemsize * 30)))
    assert one_pass.blocks_read == n_strips   # one checking pass, within the kernel's


def test_log_sum_exp_checking_pass_refuses_a_non_finite_score(tmp_path):
    mats = _mats(tmp_path, np.float32)
    bank = np.array(mats[("query_bank", "targets")])
    bank[321, 4] = -np.inf                       # exp(-inf) = 0: the log-sum-exp alone would not notice
    path = tmp_path / "bank_inf.npy"
    np.save(path, bank)
    engine = LocalEngine(matrices={**mats, ("query_bank", "targets"): np.load(path, mmap_mode="r")},
                         block_bytes=30 * 8 * 64)
    assert engine.bound_in_kernel(hn.blocks.LogMeanExp(hn.blocks.Scores("query_bank", ("targets",)), 20.0))
    with pytest.raises(ValueError, match=r"non-finite score .* row 321, column 4"):
        hn.make_normalizer("is", tau=0.05).fit_engine(engine)


def test_a_deferred_log_mean_exp_needs_the_engines_visit():
    red = hn.blocks.LogMeanExp(hn.blocks.Scores("query_bank", ("targets",)), 20.0)
    s = torch.zeros(4, 3)
    assert red.reduce_scores(s, 4, visit=lambda b, r0: (0.0, 0.0)) is NotImplemented   # not prepared: not deferred
    red._deferred = True
    with pytest.raises(RuntimeError, match="the engine gave no visit"):
        red.reduce_scores(s, 4)
