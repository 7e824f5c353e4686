"""Unit checks of hubnorm.normalizers.sinkhorn aimed at mutants that survived tests/test_sinkhorn_*.py (see
benchmarks/reports/mutation/normalizers.sinkhorn.md), against a dense float64 log-domain Sinkhorn written here
(numpy / scipy, the equations of the module docstring):

* :func:`sinkhorn_potentials` on float32 inputs whose potentials need float64 (the working dtype, the dtype of the
  returned ``f`` in the kernel-domain path, the kernel run in float64 on float32-kept blocks), the exact recompute of
  columns whose streamed sum underflows over several row blocks (and that it is not run when nothing underflows),
  the early stop on ``tol`` in the kernel domain (and ``tol = 0`` never stopping a run at an exact fixed point),
  the kernel domain taken only when the whole matrix fits ``cache_bytes`` (also with ``shared_blocks``);
* :func:`_kernel_iterations` called directly: several blocks, blocks left untouched unless ``in_place``, the stop
  on ``tol`` / ``callback``, a non-finite potential reported silently; :func:`_kernel_namespace` of both devices;
* :func:`_sinkhorn_dtype` (the bound is the product of the row norms) and :func:`sinkhorn_dtype` (its overflow
  limit and its refusal message);
* the block forms: :class:`SinkhornIteration` with rows far below the others (per-row maxima), the working dtype of
  :class:`SinkhornRun` on float32-stored score matrices (``base_dtype``), the score blocks shared through
  ``engine.shared`` in a sweep (key, budget, block rows, cache dtype);
* ``SinkhornNormalization``: its defaults, ``plain``'s iteration count, ``offset_decomposition`` (its guards,
  tolerance, labels, the fit's ``tol`` / ``cache_dtype``) and ``iterate_offsets`` with a 16-bit cache.

Survivors judged equivalent (no observable change on a CPU run):
* ``device=bank.device`` / ``device=dev`` / ``engine.device`` / ``S.device`` dropped or None (potentials 92, 96, 106,
  201; _kernel_iterations 52; SinkhornRun.start 11; plain 16): the default device is the CPU the data lives on;
* potentials 62 (``cache_bytes or 1``): a budget of 1 byte keeps no block, as 0 does; 71 (``/`` for ``//``): int()
  truncates a non-negative quotient as floor division does, and a negative budget keeps nothing either way;
* potentials 146 (``n >= 0``): with no target, :func:`_sinkhorn_dtype` fails (max of no norms) before the test;
* potentials 182 (``in_place`` dropped), 232 (``out=x`` dropped), _kernel_iterations' result unchanged: memory only;
* potentials 326 (``acc <= tiny``): a column sum exactly at 1e-25 is recomputed exactly to the same value;
* _shared_shift_rows 1 (branches swapped): a mixed-dtype add promotes to float32 and gives the same values (only
  slower); 41, SinkhornIteration.finalize 2, offset_decomposition 37 / 51, plain 12, SinkhornRun.start 7: ``.to(None)``
  is a no-op and type promotion gives the same values (``g`` is already float64; zeros are exact in any dtype);
* offset_decomposition 17 / 26 / 57 (``block_bytes`` / ``cache_bytes`` not passed): only the blocking, hence
  rounding far inside the 1e-6 gap tolerance, changes;
* iterate_offsets 37 (``None`` dropped): ``tol`` defaults to None.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from scipy.special import logsumexp

import hubnorm as hn
from hubnorm.blocks import Scores
from hubnorm.engine import LocalEngine
from hubnorm.kernels import block_rows, iter_blocks
from hubnorm.normalizers import sinkhorn as sk


def ref_sinkhorn(S, tau, n_iter, tol=None):
    """Dense float64 log-domain Sinkhorn (uniform marginals, from g = 0): (f, g, iterations run)."""
    S = np.asarray(S, dtype=np.float64)
    m, n = S.shape
    g = np.zeros(n)
    f = np.zeros(m)
    for t in range(1, n_iter + 1):
        f = tau * math.log(1 / m) - tau * logsumexp((S + g) / tau, axis=1)
        g_new = tau * math.log(1 / n) - tau * logsumexp((S + f[:, None]) / tau, axis=0)
        change, g = float(np.abs(g_new - g).max()), g_new
        if tol is not None and change < tol:
            return f, g, t
    return f, g, n_iter


def _unit(n, d=6, seed=0, dtype=torch.float64):
    x = torch.from_numpy(np.random.default_rng(seed).standard_normal((n, d)))
    return (x / x.norm(dim=1, keepdim=True)).to(dtype)


def _dyadic(n, d=4, seed=0, scale=5.0):
    """float32 rows of norm about ``scale`` on a 1/8 grid: their float32 dot products are exact."""
    x = np.random.default_rng(seed).standard_normal((n, d))
    x = scale * x / np.linalg.norm(x, axis=1, keepdims=True)
    return torch.from_numpy(np.round(x * 8) / 8).to(torch.float32)


def _dead_column_data():
    """A float32 bank and targets of norm ~5 (float64 potentials at tau = 0.01) whose last target scores far below
    every other one for every bank row: its streamed column sum underflows in the first iteration."""
    rng = np.random.default_rng(5)
    e1 = np.array([1.0, 0.0, 0.0, 0.0])
    bank = e1 + 0.3 * rng.standard_normal((12, 4))
    tgt = e1 + 0.4 * rng.standard_normal((7, 4))
    tgt[-1] = -e1
    bank = 5 * bank / np.linalg.norm(bank, axis=1, keepdims=True)
    tgt = 5 * tgt / np.linalg.norm(tgt, axis=1, keepdims=True)
    q = lambda a: torch.from_numpy(np.round(a * 8) / 8).to(torch.float32)  # noqa: E731
    return q(bank), q(tgt)


def _last_g(store):
    def cb(t, g):
        store.append(g.clone())
    return cb


# ------------------------------------------------------------------------------------------- sinkhorn_potentials
@pytest.mark.parametrize("cache_bytes", [None, sk.DEFAULT_CACHE_BYTES])
def test_underflowed_column_is_recomputed_over_several_blocks_from_float32_inputs(cache_bytes):
    bank, tgt = _dead_column_data()
    S = bank.double().numpy() @ tgt.double().numpy().T
    assert (S.max(axis=1) - S[:, -1]).min() / 0.01 > 100          # the column underflows in exp(x - rowmax)
    seen = []
    f, g, done = sk.sinkhorn_potentials(bank, tgt, 0.01, 6, block_bytes=8 * 7 * 3, cache_bytes=cache_bytes,
                                        callback=_last_g(seen))
    assert seen[-1].dtype == torch.float64 and g.dtype == f.dtype == torch.float32 and done == 6
    rf, rg, _ = ref_sinkhorn(S, 0.01, 6)
    np.testing.assert_allclose(seen[-1].numpy(), rg, rtol=0, atol=1e-9)
    np.testing.assert_allclose(f.double().numpy(), rf, rtol=0, atol=1e-5)


def test_no_exact_recompute_when_no_column_underflows(monkeypatch):
    calls = []
    real = torch.logsumexp
    monkeypatch.setattr(torch, "logsumexp", lambda *a, **k: calls.append(1) or real(*a, **k))
    bank, tgt = _unit(20, seed=1, dtype=torch.float32), _unit(9, seed=2, dtype=torch.float32)
    f, g, _ = sk.sinkhorn_potentials(bank, tgt, 0.05, 5, block_bytes=4 * 9 * 6)
    assert calls == []
    rf, rg, _ = ref_sinkhorn(bank.double().numpy() @ tgt.double().numpy().T, 0.05, 5)
    np.testing.assert_allclose(g.double().numpy(), rg, rtol=0, atol=2e-6)
    # the spy sees the recompute where a column does underflow
    sk.sinkhorn_potentials(*_dead_column_data(), 0.01, 2)
    assert calls


def test_kernel_domain_on_float32_inputs_returns_input_dtype_and_float64_precision():
    bank, tgt = _dyadic(14, seed=3), _dyadic(9, seed=4)
    S = bank.double().numpy() @ tgt.double().numpy().T
    assert (S.max() - S.min()) / 0.5 <= sk._KERNEL_MAX_RANGE
    seen = []
    f, g, done = sk.sinkhorn_potentials(bank, tgt, 0.5, 8, callback=_last_g(seen))
    assert f.dtype == torch.float32 and g.dtype == torch.float32 and done == 8
    assert seen[-1].dtype == torch.float64
    rf, rg, _ = ref_sinkhorn(S, 0.5, 8)
    np.testing.assert_allclose(seen[-1].numpy(), rg, rtol=0, atol=1e-11)
    np.testing.assert_allclose(f.double().numpy(), rf, rtol=0, atol=1e-5)


def test_kernel_domain_stops_on_tol_and_on_callback():
    bank, tgt = _unit(16, seed=6), _unit(10, seed=7)
    S = (bank @ tgt.T).numpy()
    _, rg, t_ref = ref_sinkhorn(S, 0.05, 200, tol=1e-4)
    assert 1 < t_ref < 200
    f, g, done = sk.sinkhorn_potentials(bank, tgt, 0.05, 200, 1e-4)
    assert done == t_ref
    np.testing.assert_allclose(g.numpy(), rg, rtol=0, atol=1e-12)
    f, g, done = sk.sinkhorn_potentials(bank, tgt, 0.05, 200, callback=lambda t, g: t == 3)
    assert done == 3
    np.testing.assert_allclose(g.numpy(), ref_sinkhorn(S, 0.05, 3)[1], rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tol_zero_never_stops_at_an_exact_fixed_point(dtype):
    # one bank row and one target: g = 0 after every iteration (a change of exactly 0, not below tol = 0)
    one = torch.tensor([[0.6, 0.8]], dtype=dtype)
    _, g, done = sk.sinkhorn_potentials(one, one, 0.05, 7, 0.0)
    assert done == 7 and float(g.abs().max()) == 0.0


def test_kernel_domain_only_when_the_whole_matrix_fits_cache_bytes(monkeypatch):
    calls = []
    real = sk._kernel_iterations
    monkeypatch.setattr(sk, "_kernel_iterations", lambda *a, **k: calls.append(1) or real(*a, **k))
    bank, tgt = _unit(10, seed=8), _unit(10, seed=9)
    rg = ref_sinkhorn((bank @ tgt.T).numpy(), 0.05, 6)[1]
    # shared blocks keep every block, but 10 x 10 float64 scores (800 bytes) exceed cache_bytes: the log domain
    _, g, _ = sk.sinkhorn_potentials(bank, tgt, 0.05, 6, cache_bytes=100, shared_blocks={})
    assert calls == []
    np.testing.assert_allclose(g.numpy(), rg, rtol=0, atol=1e-12)
    _, g, _ = sk.sinkhorn_potentials(bank, tgt, 0.05, 6, cache_bytes=800, shared_blocks={})
    assert calls == [1]
    np.testing.assert_allclose(g.numpy(), rg, rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------------- _kernel_iterations
def _blocks(S, cuts):
    return [torch.from_numpy(S[a:b].copy()) for a, b in zip((0,) + cuts, cuts + (S.shape[0],))]


def test_kernel_iterations_over_several_blocks_leaves_them_untouched():
    S = (_unit(11, seed=10) @ _unit(8, seed=11).T).numpy()
    blocks = _blocks(S, (3, 7))
    kept = list(blocks)
    ticks = []
    f, g, done, stopped = sk._kernel_iterations(blocks, 0.05, 9, None, None, lambda: ticks.append(1))
    assert stopped and done == 9 and len(ticks) == 9 and blocks == []
    for k, (a, b) in zip(kept, ((0, 3), (3, 7), (7, 11))):
        assert torch.equal(k, torch.from_numpy(S[a:b]))
    rf, rg, _ = ref_sinkhorn(S, 0.05, 9)
    np.testing.assert_allclose(g.numpy(), rg, rtol=0, atol=1e-12)
    np.testing.assert_allclose(f.numpy(), rf, rtol=0, atol=1e-12)


def test_kernel_iterations_tol_and_callback_stops():
    S = (_unit(9, seed=12) @ _unit(6, seed=13).T).numpy()
    _, rg, t_ref = ref_sinkhorn(S, 0.1, 100, tol=1e-5)
    assert 1 < t_ref < 100
    f, g, done, stopped = sk._kernel_iterations(_blocks(S, (4,)), 0.1, 100, 1e-5, None, lambda: None)
    assert stopped and done == t_ref
    np.testing.assert_allclose(g.numpy(), rg, rtol=0, atol=1e-12)
    f, g, done, stopped = sk._kernel_iterations(_blocks(S, (4,)), 0.1, 100, None, lambda t, g: t == 2, lambda: None)
    assert stopped and done == 2
    # an exact fixed point (one entry: g stays 0) is not "below" tol = 0
    f, g, done, stopped = sk._kernel_iterations([torch.tensor([[0.5]], dtype=torch.float64)], 0.1, 5, 0.0, None,
                                                lambda: None)
    assert stopped and done == 5


def test_kernel_iterations_reports_a_non_finite_potential_silently():
    # the second column is exp(-2000) below the first in every row: its K^T w is 0, log 0 = -inf
    S = np.array([[0.0, -20.0], [0.1, -20.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f, g, done, stopped = sk._kernel_iterations(_blocks(S, (1,)), 0.01, 4, None, None, lambda: None)
    assert not stopped and done == 0
    assert float(g.abs().max()) == 0.0        # the last finite potentials: the start


def test_kernel_namespace_of_each_device():
    assert sk._kernel_namespace("cpu") is np
    assert sk._kernel_namespace(torch.device("cpu")) is np
    assert sk._kernel_namespace("cuda") is torch        # a device name: no accelerator needed


# ------------------------------------------------------------------------------------------- working dtypes
def test_working_dtype_bound_is_the_product_of_the_row_norms():
    def work(bank, tgt):
        seen = []
        sk.sinkhorn_potentials(bank, tgt, 0.01, 1, callback=_last_g(seen))
        return seen[0].dtype
    b, t = _unit(5, seed=14, dtype=torch.float32), _unit(4, seed=15, dtype=torch.float32)
    assert work(b, t) == torch.float32
    assert work(5 * b, 5 * t) == torch.float64      # smax 25: float32 rounding of 25 exceeds the target
    assert work(20 * b, 0.05 * t) == torch.float32  # smax 1 (a ratio would say 400)


def test_sinkhorn_dtype_overflow_limit_and_refusal():
    big = torch.finfo(torch.float64).max / 16
    # 2 smax / tau just below float64's limit: float64 serves it
    assert sk.sinkhorn_dtype(torch.float32, 1.0, 10, 10, 2.5 / big) == torch.float64
    with pytest.raises(ValueError, match=r"tau=.* is too extreme .* 10 x 10 score matrix: use 1e-300 < tau <= .*"
                                         r"lose all precision or overflow even in float64\)$"):
        sk.sinkhorn_dtype(torch.float32, 1.0, 10, 10, 1.5 / big)
    with pytest.raises(ValueError, match=r"lose all precision or overflow even in float64\)$"):
        sk.sinkhorn_dtype(torch.float64, 1.0, 10, 10, 1e12)


# ------------------------------------------------------------------------------------------- block forms
def test_sinkhorn_iteration_with_rows_far_below_the_others():
    # float32, tau = 0.01: targets clustered around one direction, half the bank along it and half against it,
    # so within a block some rows score about 2 below the others (exp(-200) underflows): each row must be
    # shifted by its own maximum
    rng = np.random.default_rng(17)
    center = np.eye(6)[0]
    unit = lambda a: torch.from_numpy(a / np.linalg.norm(a, axis=1, keepdims=True)).to(torch.float32)  # noqa: E731
    t = unit(center + 0.15 * rng.standard_normal((6, 6)))
    qb = unit(np.vstack([center + 0.15 * rng.standard_normal((5, 6)), -center + 0.15 * rng.standard_normal((5, 6))]))
    S = qb.double().numpy() @ t.double().numpy().T
    assert S[:5].min() - S[5:].max() > 1.0
    norm = hn.SinkhornNormalization(tau=0.01, n_iter=5)
    norm.fit_engine(LocalEngine({"targets": t, "query_bank": qb}, plain=True, block_bytes=4 * 6 * 4))
    rg = ref_sinkhorn(S, 0.01, 5)[1]
    np.testing.assert_allclose(norm.offsets_.double().numpy(), rg, rtol=0, atol=1e-5)


def test_run_on_float32_stored_scores_works_in_float32():
    S = (_unit(30, seed=18) @ _unit(12, seed=19).T).numpy().astype(np.float32)
    norm = hn.SinkhornNormalization(tau=0.05, n_iter=6).fit_engine(LocalEngine(matrices={("query_bank",
                                                                                         "targets"): S}))
    off = norm.offsets_.to(torch.float64)
    assert torch.equal(off.to(torch.float32).to(torch.float64), off)       # potentials kept in float32
    np.testing.assert_allclose(off.numpy(), ref_sinkhorn(S, 0.05, 6)[1], rtol=0, atol=1e-5)


def _sweep_key(norm, engine, store, work):
    return ("sinkhorn blocks", norm._source, store, engine.block_bytes, work)


@pytest.mark.parametrize("cache_dtype", [None, torch.float16])
def test_sweep_fit_keeps_its_blocks_in_the_engines_shared_dict(cache_dtype):
    t, qb = _unit(15, seed=20), _unit(40, seed=21)
    norm = hn.SinkhornNormalization(tau=0.05, n_iter=4, cache_dtype=cache_dtype, block_bytes=8 * 15 * 7)
    engine = norm.local_engine(t, qb, sweep_bytes=10**9)
    norm.fit_engine(engine)
    store = torch.float64 if cache_dtype is None else cache_dtype
    blocks = engine.shared(_sweep_key(norm, engine, store, torch.float64), 0)
    starts = {r0 for r0, _ in iter_blocks(40, block_rows(15, 8, engine.block_bytes))}
    assert len(starts) > 1 and set(blocks) == starts
    again = hn.SinkhornNormalization(tau=0.05, n_iter=4, cache_dtype=cache_dtype, block_bytes=8 * 15 * 7)
    again.fit(t, query_bank=qb)
    assert torch.equal(again.offsets_, norm.offsets_)


def test_sweep_fit_shares_nothing_when_the_scores_exceed_cache_bytes():
    # 40 x 15 float64 scores take 4800 bytes > cache_bytes (40 x 6 would take 1920)
    t, qb = _unit(15, seed=20), _unit(40, seed=21)
    norm = hn.SinkhornNormalization(tau=0.05, n_iter=4, cache_bytes=3000)
    engine = norm.local_engine(t, qb, sweep_bytes=10**9)
    norm.fit_engine(engine)
    assert engine.shared(_sweep_key(norm, engine, torch.float64, torch.float64), 0) == {}
    np.testing.assert_allclose(norm.offsets_.numpy(), ref_sinkhorn((qb @ t.T).numpy(), 0.05, 4)[1], rtol=0,
                               atol=1e-12)


# ------------------------------------------------------------------------------------------- the normalizers
def test_defaults_are_tau_001_and_ten_iterations():
    t, qb = _unit(8, seed=22, dtype=torch.float32), _unit(25, seed=23, dtype=torch.float32)
    norm = hn.SinkhornNormalization().fit(t, query_bank=qb)
    assert norm.n_iter_ == 10
    rg = ref_sinkhorn(qb.double().numpy() @ t.double().numpy().T, 0.01, 10)[1]
    np.testing.assert_allclose(norm.offsets_.double().numpy(), rg, rtol=0, atol=1e-5)


def test_plain_counts_its_iterations_and_never_stops_on_tol_zero():
    t, qb = _unit(7, seed=24), _unit(20, seed=25)
    out = hn.SinkhornNormalization(tau=0.05, n_iter=6).plain(t, qb)
    assert out["n_iter_"] == 6
    np.testing.assert_allclose(out["offsets_"].numpy(), ref_sinkhorn((qb @ t.T).numpy(), 0.05, 6)[1], rtol=0,
                               atol=1e-12)
    _, _, t_ref = ref_sinkhorn((qb @ t.T).numpy(), 0.05, 100, tol=1e-4)
    assert hn.SinkhornNormalization(tau=0.05, n_iter=100, tol=1e-4).plain(t, qb)["n_iter_"] == t_ref < 100
    one = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    assert hn.SinkhornNormalization(tau=0.05, n_iter=5, tol=0.0).plain(one, one)["n_iter_"] == 5


def test_dbsn_decomposition_needs_its_target_bank():
    t, qb, tb = _unit(6, seed=26), _unit(15, seed=27), _unit(5, seed=28)
    dbsn = hn.DualBankSinkhornNormalization(tau=0.05, n_iter=4).fit(t, query_bank=qb, target_bank=tb)
    with pytest.raises(ValueError, match=r"^DBSN's explanation needs the target_bank it was fitted with: "
                                         r"pass target_bank=\.\.\.$"):
        dbsn.offset_decomposition(qb)
    dbsn.offset_decomposition(qb, tb)


def test_decomposition_sums_to_the_offset_with_its_labels():
    t, qb = _unit(6, seed=29), _unit(18, seed=30)
    sn = hn.SinkhornNormalization(tau=0.05, n_iter=5).fit(t, query_bank=qb)
    explain = sn.offset_decomposition(qb)
    for j in (0, 4):
        w, values, rest = explain(j)
        assert set(rest) == {"tau KL(w || uniform)", "-tau log n"}
        total = float((w * values).sum()) + sum(rest.values())
        assert abs(total - float(sn.offsets_[j])) < 1e-10


def test_decomposition_recomputes_with_the_fits_tol_and_cache_dtype():
    t, qb = _unit(9, seed=31, dtype=torch.float32), _unit(30, seed=32, dtype=torch.float32)
    early = hn.SinkhornNormalization(tau=0.02, n_iter=200, tol=1e-3).fit(t, query_bank=qb)
    assert early.n_iter_ < 200
    early.offset_decomposition(qb)
    half = hn.SinkhornNormalization(tau=0.05, n_iter=10, cache_dtype=torch.float16).fit(t, query_bank=qb)
    full = hn.SinkhornNormalization(tau=0.05, n_iter=10).fit(t, query_bank=qb)
    assert float((half.offsets_ - full.offsets_).abs().max()) > 1e-5     # the 16-bit cache shows
    half.offset_decomposition(qb)


def test_decomposition_gap_tolerance_scales_with_the_offsets():
    t, qb = _unit(8, seed=33), 8 * _unit(20, seed=34)       # scores up to 8: offsets of a few units
    sn = hn.SinkhornNormalization(tau=0.5, n_iter=5, check_normalized=False).fit(t, query_bank=qb)
    scale = float(sn.offsets_.abs().max()) + 1.0
    assert scale > 2.0
    base = sn.offsets_.clone()
    sn.offsets_ = base + 0.8e-6 * scale        # within 1e-6 * scale: accepted
    sn.offset_decomposition(qb)
    sn.offsets_ = base + 2e-6 * scale
    with pytest.raises(ValueError, match="differ from the fitted offsets by"):
        sn.offset_decomposition(qb)


def test_iterate_offsets_uses_the_cache_dtype():
    t, qb = _unit(9, seed=35, dtype=torch.float32), _unit(30, seed=36, dtype=torch.float32)
    norm = hn.SinkhornNormalization(tau=0.05, n_iter=6, cache_dtype=torch.float16)
    seen = []
    norm.iterate_offsets(norm.local_engine(t, qb), lambda it, off, change: seen.append(off.clone()))
    assert len(seen) == 6
    fit = hn.SinkhornNormalization(tau=0.05, n_iter=6, cache_dtype=torch.float16).fit(t, query_bank=qb)
    full = hn.SinkhornNormalization(tau=0.05, n_iter=6).fit(t, query_bank=qb)
    assert float((fit.offsets_ - full.offsets_).abs().max()) > 1e-5     # the 16-bit cache shows
    assert torch.equal(seen[-1], fit.offsets_)
