"""Sinkhorn's block form (``hubnorm.normalizers.sinkhorn``: :class:`SinkhornIteration`, :class:`SinkhornRun`) on its
own, against a dense float64 log-domain Sinkhorn written here (DBSN Alg. A1): the one-reduction iteration (blocks of
bank rows spanning every column), the two half-steps an engine uses when the columns are split across chunks, the
early stop on ``tol`` at the iteration the dense loop stops, DBSN's concatenated columns, the working-dtype rule of
the potentials at its limits, and the underflow guard of a far-away column. The fused in-process kernel is held to
the same reference by ``tests/test_sinkhorn_paths.py`` and ``tests/test_oracles.py`` (POT)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import hubnorm as hn
from hubnorm.blocks import Scores
from hubnorm.engine import LocalEngine
from hubnorm.normalizers import sinkhorn as sk


def _unit(n, d=6, seed=0):
    x = torch.from_numpy(np.random.default_rng(seed).standard_normal((n, d)))
    return x / x.norm(dim=1, keepdim=True)


def dense_sinkhorn(S, tau, n_iter, tol=None):
    """Column potentials g of log-domain Sinkhorn on S (m x n), uniform marginals, from g = 0; and iterations run."""
    m, n = S.shape
    g = torch.zeros(n, dtype=torch.float64)
    for t in range(1, n_iter + 1):
        f = tau * math.log(1 / m) - tau * torch.logsumexp((S + g) / tau, dim=1)
        g_new = tau * math.log(1 / n) - tau * torch.logsumexp((S + f[:, None]) / tau, dim=0)
        change, g = float((g_new - g).abs().max()), g_new
        if tol is not None and change < tol:
            return g, t
    return g, n_iter


class SplitEngine(LocalEngine):
    """An in-process engine that says its columns span several chunks (as a Dask engine does), so that Sinkhorn
    runs its two half-steps as separate reductions; ``plain``: no fused kernel."""

    def spans(self, name) -> bool:
        return False


@pytest.fixture(scope="module")
def data():
    return {"targets": _unit(15, seed=1), "query_bank": _unit(40, seed=2), "target_bank": _unit(9, seed=3)}


ENGINES = {
    "one reduction per iteration": lambda inputs: LocalEngine(inputs, plain=True, block_bytes=8 * 15 * 7),
    "two half-steps": lambda inputs: SplitEngine(inputs, plain=True, block_bytes=8 * 4 * 5),
    "fused": lambda inputs: LocalEngine(inputs),
}


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("tau, n_iter", [(0.05, 1), (0.05, 7), (0.5, 3), (0.01, 20)])
def test_block_sinkhorn_equals_dense(data, engine, tau, n_iter):
    S = data["query_bank"] @ data["targets"].T
    want, _ = dense_sinkhorn(S, tau, n_iter)
    run = sk.SinkhornRun(Scores("query_bank", "targets"), tau, n_iter, None, None, None)
    g, done = ENGINES[engine](dict(data)).iterate(run)
    assert done == n_iter and g.dtype == torch.float64
    torch.testing.assert_close(g, want, rtol=0, atol=1e-10)


@pytest.mark.parametrize("engine", list(ENGINES))
def test_early_stop_at_the_same_iteration_as_the_dense_loop(data, engine):
    S = data["query_bank"] @ data["targets"].T
    want, stop = dense_sinkhorn(S, 0.05, 500, tol=1e-6)
    assert 2 < stop < 500
    g, done = ENGINES[engine](dict(data)).iterate(sk.SinkhornRun(Scores("query_bank", "targets"), 0.05, 500, 1e-6,
                                                                 None, None))
    assert done == stop
    torch.testing.assert_close(g, want, rtol=0, atol=1e-10)


@pytest.mark.parametrize("engine", list(ENGINES))
def test_dbsn_columns_are_the_targets_and_the_target_bank(data, engine):
    cols = torch.cat([data["targets"], data["target_bank"]])
    want, _ = dense_sinkhorn(data["query_bank"] @ cols.T, 0.05, 6)
    norm = hn.DualBankSinkhornNormalization(tau=0.05, n_iter=6, device="cpu")
    norm.check_params()
    fitted = norm.fit_blocks(ENGINES[engine](dict(data)))
    torch.testing.assert_close(fitted["offsets_"], want[:15], rtol=0, atol=1e-10)
    torch.testing.assert_close(fitted["bank_offsets_"], want[15:], rtol=0, atol=1e-10)
    assert fitted["n_iter_"] == 6


def test_the_iteration_reduction_by_hand(data):
    """One SinkhornIteration over two row blocks merged, against the column half-step written out."""
    S = data["query_bank"] @ data["targets"].T
    tau = 0.1
    g = torch.linspace(-0.2, 0.1, 15, dtype=torch.float64)
    it = sk.SinkhornIteration(Scores("query_bank", "targets"), tau, torch.float64, g)
    assert it.whole_rows and it.read_only and it.axis == 0
    it.prepare(LocalEngine(dict(data)))
    assert it.m == 40
    from hubnorm.blocks import Chunk
    parts = [it.partial(S[a:b], Chunk(S[a:b], col_terms=g)) for a, b in ((0, 17), (17, 40))]
    new = it.finalize(it.merge(*parts), 40)
    f = tau * math.log(1 / 40) - tau * torch.logsumexp((S + g) / tau, dim=1)
    want = tau * math.log(1 / 15) - tau * torch.logsumexp((S + f[:, None]) / tau, dim=0)
    torch.testing.assert_close(new, want, rtol=0, atol=1e-12)
    assert torch.equal(S, data["query_bank"] @ data["targets"].T)       # the block was not modified


def test_a_far_away_column_is_recomputed_not_lost_to_underflow(monkeypatch):
    """A bank clustered around e1 and a target at -e1: (s - row max) / tau is about -200 on its column, so exp()
    of every entry underflows float32 and the column's sum would be lost (its potential infinite); the guard
    recomputes that column exactly. With the guard switched off the result is not finite."""
    g = torch.Generator().manual_seed(4)
    e1 = torch.zeros(4)
    e1[0] = 1.0
    bank = e1 + 0.1 * torch.randn(30, 4, generator=g)
    bank = bank / bank.norm(dim=1, keepdim=True)
    t = _unit(6, d=4, seed=5).float()
    t[5] = -e1
    S = (bank.double() @ t.double().T)
    tau = 0.01
    want, _ = dense_sinkhorn(S, tau, 3)
    run = lambda: LocalEngine({"query_bank": bank, "targets": t}, plain=True).iterate(   # noqa: E731
        sk.SinkhornRun(Scores("query_bank", "targets"), tau, 3, None, None, None))[0]
    g_guarded = run()
    assert torch.isfinite(g_guarded).all()
    torch.testing.assert_close(g_guarded.double(), want, rtol=0, atol=1e-4)
    monkeypatch.setitem(sk._UNDERFLOW, torch.float32, -1e9)        # the guard off
    assert not bool(torch.isfinite(run()).all())


def test_sinkhorn_dtype_rule_and_message():
    # magnitude tau * log(m n) + smax, float32 while eps32 * magnitude <= 2**-20 (<= 16 score units)
    assert sk.sinkhorn_dtype(torch.float32, 1.0, 100, 100, 0.01) == torch.float32
    assert sk.sinkhorn_dtype(torch.float32, 1.0, 100, 100, 2.0) == torch.float64        # 2 * 9.2 + 1 > 16
    assert sk.sinkhorn_dtype(torch.float32, 1.0, 100, 100, 1.6) == torch.float32        # 1.6 * 9.2 + 1 < 16
    assert sk.sinkhorn_dtype(torch.float32, 1.0, 1, 1, 10.0) == torch.float32           # 10 (log 2 + log 2) + 1 < 16
    assert sk.sinkhorn_dtype(torch.float32, 1.0, 1, 1, 11.5) == torch.float64           # sizes below 2 count as 2
    assert sk.sinkhorn_dtype(torch.float64, 1.0, 100, 100, 2.0) == torch.float64
    assert sk.sinkhorn_dtype(torch.float32, 1.0, 10, 10, 1e-36) == torch.float32       # 2 / tau < float32 max / 16
    assert sk.sinkhorn_dtype(torch.float32, 1.0, 10, 10, 1e-38) == torch.float64       # 2 / tau would overflow
    with pytest.raises(ValueError) as err:
        sk.sinkhorn_dtype(torch.float64, 1.0, 100, 50, 1e12)
    hi = sk.PRECISION_TARGET / (2.0 ** -53 * (math.log(100) + math.log(50)))
    assert str(err.value).startswith("tau=1e+12 is too extreme for Sinkhorn normalization with a 100 x 50 score "
                                     f"matrix: use 1e-300 < tau <= {hi:.1e}")
    assert str(err.value).endswith("(the potentials would lose all precision or overflow even in float64)")
    with pytest.raises(ValueError, match="tau=1e-310 is too extreme"):
        sk.sinkhorn_dtype(torch.float64, 1.0, 10, 10, 1e-310)
    bank, t = _unit(8).float(), _unit(3).float()
    assert sk._sinkhorn_dtype(bank, t, 0.01) == torch.float32
    assert sk._sinkhorn_dtype(bank * 100, t, 0.01) == torch.float64       # smax = 100 score units
    assert sk._sinkhorn_dtype(bank * 10, t * 10, 0.01) == torch.float64   # the product of the two largest norms
    assert sk._sinkhorn_dtype(bank, t, 5.0) == torch.float64               # 5 log(8 * 3) + 1 > 16
    assert sk._sinkhorn_dtype(bank, t, 4.5) == torch.float32               # 4.5 log(8 * 3) + 1 < 16


def test_the_run_picks_its_working_dtype_from_the_engine(data):
    run = sk.SinkhornRun(Scores("query_bank", "targets"), 3.0, 2, None, None, None)   # 3 log(40 * 15) + 1 > 16
    f32 = {k: v.float() for k, v in data.items()}
    state = run.start(LocalEngine(f32, plain=True))
    assert run.work == torch.float64 and state[0].shape == (15,) and state[1] == 0 and state[2] is False
    run = sk.SinkhornRun(Scores("query_bank", "targets"), 0.05, 2, None, None, None)
    run.start(LocalEngine(f32, plain=True))
    assert run.work == torch.float32
    g, done = LocalEngine(f32, plain=True).iterate(run)
    assert g.dtype == torch.float32 and done == 2


# ------------------------------------------------------------------------------------------------ the study seams
@pytest.mark.parametrize("cls", [hn.SinkhornNormalization, hn.DualBankSinkhornNormalization])
def test_iterate_offsets_reports_every_iteration_as_a_fit_of_that_many(data, cls):
    cols = data["targets"] if cls is hn.SinkhornNormalization else torch.cat([data["targets"], data["target_bank"]])
    S = data["query_bank"] @ cols.T
    norm = cls(tau=0.05, n_iter=6, tol=1.0, device="cpu")            # tol is ignored by the study
    seen = []
    norm.iterate_offsets(LocalEngine(dict(data)), lambda t, off, change: seen.append((t, off.clone(), change)))
    assert [t for t, _, _ in seen] == [1, 2, 3, 4, 5, 6]
    prev = torch.zeros(S.shape[1], dtype=torch.float64)
    for t, off, change in seen:
        g, _ = dense_sinkhorn(S, 0.05, t)
        torch.testing.assert_close(off, g[:15], rtol=0, atol=1e-10)
        assert off.dtype == torch.float64 and off.shape == (15,)
        assert change == pytest.approx(float((g - prev).abs().max()), abs=1e-10)   # over all columns
        prev = g
    stopped = []
    norm.iterate_offsets(LocalEngine(dict(data)), lambda t, off, change: stopped.append(t) or t == 2)
    assert stopped == [1, 2]


def test_offset_decomposition_sums_to_the_fitted_offsets(data):
    sn = hn.SinkhornNormalization(tau=0.05, n_iter=8, device="cpu").fit(data["targets"], query_bank=data["query_bank"])
    explain = sn.offset_decomposition(data["query_bank"])
    S = data["query_bank"] @ data["targets"].T
    for j in (0, 7, 14):
        w, values, terms = explain(j)
        assert float(w.sum()) == pytest.approx(1.0, abs=1e-12) and bool((w >= 0).all())
        total = float((w * values).sum()) + sum(terms.values())
        assert total == pytest.approx(float(sn.offsets_[j]), abs=1e-10)
        assert terms["-tau log n"] == pytest.approx(-0.05 * math.log(15))
        # the weights: column j of the last iteration's plan, normalised: softmax_i((S_ij + f_i) / tau) with f the
        # row potentials of the last row half-step (from the column potentials of iteration T - 1)
        g_prev, _ = dense_sinkhorn(S, 0.05, 7)
        f = 0.05 * math.log(1 / 40) - 0.05 * torch.logsumexp((S + g_prev) / 0.05, dim=1)
        plan = torch.exp((S[:, j] + f) / 0.05)
        torch.testing.assert_close(w, plan / plan.sum(), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="differ from the fitted offsets by .*: pass the same query_bank"):
        sn.offset_decomposition(data["query_bank"][:30])
    dbsn = hn.DualBankSinkhornNormalization(tau=0.05, n_iter=8, device="cpu").fit(
        data["targets"], query_bank=data["query_bank"], target_bank=data["target_bank"])
    with pytest.raises(ValueError, match="DBSN's explanation needs the target_bank it was fitted with"):
        dbsn.offset_decomposition(data["query_bank"])
    w, values, terms = dbsn.offset_decomposition(data["query_bank"], data["target_bank"])(3)
    assert float((w * values).sum()) + sum(terms.values()) == pytest.approx(float(dbsn.offsets_[3]), abs=1e-10)
    assert terms["-tau log n"] == pytest.approx(-0.05 * math.log(15 + 9))


def test_the_dense_reference_reports_its_iterations_like_the_fit(data):
    """``plain`` (the dense Alg. A1) counts the iterations it ran, one per update, stopping where the blocked fit
    stops (``delta < tol``, strictly)."""
    t, qb = data["targets"], data["query_bank"]
    for kwargs in ({"n_iter": 7}, {"n_iter": 200, "tol": 1e-7}):
        sn = hn.SinkhornNormalization(tau=0.05, device="cpu", **kwargs)
        fitted = sn.clone().fit(t, query_bank=qb)
        dense = sn.plain(torch.as_tensor(t), torch.as_tensor(qb))
        assert dense["n_iter_"] == fitted.n_iter_
        torch.testing.assert_close(dense["offsets_"], fitted.offsets_, rtol=0, atol=1e-10)
    assert hn.SinkhornNormalization(tau=0.05, n_iter=7).plain(torch.as_tensor(t), torch.as_tensor(qb))["n_iter_"] == 7
    assert 7 < fitted.n_iter_ < 200


def test_the_fit_and_its_decomposition_hand_their_settings_to_the_kernel(data, monkeypatch):
    """``cache_bytes``, ``cache_dtype`` and ``block_bytes`` reach :func:`sinkhorn_potentials` from the fit and from
    the offset decomposition; the decomposition's remainder terms carry the names the forensics tables show."""
    seen = []
    real = sk.sinkhorn_potentials

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return real(*args, **kwargs)
    monkeypatch.setattr(sk, "sinkhorn_potentials", spy)
    t, qb = data["targets"], data["query_bank"]
    sn = hn.SinkhornNormalization(tau=0.05, n_iter=5, device="cpu", cache_bytes=12345, cache_dtype=torch.float16,
                                  block_bytes=4096).fit(t, query_bank=qb)
    assert seen and all(k["cache_bytes"] == 12345 and k["cache_dtype"] == torch.float16 and k["block_bytes"] == 4096
                        for k in seen)
    seen.clear()
    w, values, terms = sn.offset_decomposition(qb)(2)
    assert seen and all(k["cache_bytes"] == 12345 and k["cache_dtype"] == torch.float16 and k["block_bytes"] == 4096
                        for k in seen)
    assert list(terms) == ["tau KL(w || uniform)", "-tau log n"]
    assert terms["-tau log n"] == pytest.approx(-0.05 * math.log(len(t)), abs=1e-15)
    assert values.dtype == torch.float64


def test_the_kernel_loop_runs_on_numpy_on_the_cpu_and_on_torch_elsewhere():
    assert sk._kernel_namespace("cpu") is np and sk._kernel_namespace(torch.device("cpu")) is np
    assert sk._kernel_namespace("meta") is torch and sk._kernel_namespace("cuda") is torch


def test_the_iteration_study_uses_the_fits_cache_settings(data):
    """With a float16 cache the study's offsets after t iterations are those of a fit of t iterations with the same
    cache (its rounding included), not of a float32 one."""
    t32, qb32 = data["targets"].float(), data["query_bank"].float()
    norm = hn.SinkhornNormalization(tau=0.05, n_iter=4, device="cpu", cache_dtype=torch.float16)
    seen = []
    norm.iterate_offsets(LocalEngine({"targets": t32, "query_bank": qb32}),
                         lambda t, off, change: seen.append((t, off.clone())))
    for t, off in seen:
        fit = hn.SinkhornNormalization(tau=0.05, n_iter=t, device="cpu", cache_dtype=torch.float16).fit(
            t32, query_bank=qb32)
        assert torch.equal(off, fit.offsets_), t
    plain32 = hn.SinkhornNormalization(tau=0.05, n_iter=4, device="cpu").fit(t32, query_bank=qb32)
    assert not torch.equal(seen[-1][1], plain32.offsets_)             # the 16-bit rounding is visible


def test_a_decomposition_reruns_the_fit_to_its_own_stopping_point(data):
    """A fit stopped early by ``tol`` is explained by potentials stopped at the same iteration (with every
    iteration instead, the offsets would differ by about ``tol`` and the decomposition would be refused)."""
    t, qb = data["targets"], data["query_bank"]
    sn = hn.SinkhornNormalization(tau=0.05, n_iter=500, tol=1e-3, device="cpu").fit(t, query_bank=qb)
    assert sn.n_iter_ < 500
    w, values, terms = sn.offset_decomposition(qb)(4)
    total = float(w @ values) + sum(terms.values())
    assert total == pytest.approx(float(sn.offsets_[4]), abs=1e-12)


def test_the_float64_kernel_loop_runs_to_the_end_over_several_blocks(data, monkeypatch):
    """Kept float64 blocks of a few rows each: the kernel-domain loop runs every iteration itself (it never gives up
    to the log domain on such scores), stops at the same iteration as the log-domain loop under ``tol``, and
    agrees with it."""
    ran = []
    real = sk._kernel_iterations
    monkeypatch.setattr(sk, "_kernel_iterations", lambda *a, **k: (lambda r: ran.append(r[2:]) or r)(real(*a, **k)))
    t, qb = data["targets"].double(), data["query_bank"].double()
    for n_iter, tol in ((6, None), (300, 1e-9)):
        ran.clear()
        got = sk.sinkhorn_potentials(qb, t, 0.05, n_iter, tol, block_bytes=15 * 8 * 7)    # blocks of 7 rows
        ref = sk.sinkhorn_potentials(qb, t, 0.05, n_iter, tol, block_bytes=15 * 8 * 7, block_pass="rowmax")
        assert ran == [(got[2], True)] and got[2] == ref[2]
        assert (got[2] == 6) if tol is None else (got[2] < 300)
        torch.testing.assert_close(got[1], ref[1], rtol=0, atol=1e-12)
        torch.testing.assert_close(got[0], ref[0], rtol=0, atol=1e-12)


def test_a_sweep_computes_the_score_blocks_once_for_every_temperature(data, monkeypatch):
    """On a sweep's engine (``sweep_bytes`` set) the runs of several temperatures share the kept score blocks: the
    GEMMs run once, for the first temperature, and each run equals a fit of its own. Without ``cache_bytes`` (or
    without a sweep) nothing is shared; blocks of another cache dtype are kept apart."""
    calls = {"mm": 0}
    real_mm = torch.mm
    monkeypatch.setattr(torch, "mm", lambda *a, **k: calls.__setitem__("mm", calls["mm"] + 1) or real_mm(*a, **k))
    block = 15 * 8 * 7                                                   # 40 bank rows: 6 blocks of 7 rows

    def runs(engine, cache_bytes=10 ** 9, cache_dtype=None, taus=(0.05, 0.02, 0.1)):
        calls["mm"] = 0
        out = [engine.iterate(sk.SinkhornRun(Scores("query_bank", "targets"), tau, 4, None, cache_bytes, cache_dtype))
               for tau in taus]
        return out, calls["mm"]

    sweep = LocalEngine(dict(data), block_bytes=block, sweep_bytes=10 ** 9)
    shared, n_mm = runs(sweep)
    assert n_mm == 6
    alone, n_alone = runs(LocalEngine(dict(data), block_bytes=block))
    assert n_alone == 18
    for (g, done), (g1, done1) in zip(shared, alone):
        assert torch.equal(g, g1) and done == done1 == 4
    assert runs(LocalEngine(dict(data), block_bytes=block, sweep_bytes=10 ** 9), cache_bytes=None)[1] == 0
    assert runs(sweep, cache_dtype=torch.float16, taus=(0.05,))[1] == 6      # its own 16-bit blocks
    assert runs(sweep, cache_dtype=torch.float16, taus=(0.02,))[1] == 0
    assert runs(sweep, taus=(0.3,))[1] == 0                                  # the first blocks are still there
    small = LocalEngine(dict(data), block_bytes=block, sweep_bytes=10 ** 9)
    # S one byte over cache_bytes: not shared; each run keeps the 5 leading blocks that fit (the 6th by addmm)
    assert runs(small, cache_bytes=40 * 15 * 8 - 1, taus=(0.05, 0.02))[1] == 2 * 5
