"""The streamed Sinkhorn of :func:`hubnorm.normalizers.sinkhorn.sinkhorn_potentials` against a dense float64
reference, over its options: streaming and partial caches, 16-bit caches, the shared-shift and rowmax block passes,
the float64 kernel-domain iterations, underflowing columns and rows, and the progress bar. (Moved out of
``test_fast_paths.py`` so that a mutation run of ``normalizers.sinkhorn`` can select these tests alone.)"""

import math

import numpy as np
import pytest
import torch
from scipy.special import logsumexp

from hubnorm.normalizers.sinkhorn import sinkhorn_potentials


def _clustered(rng, n, d, centres, spread=0.6):
    x = centres[rng.integers(0, len(centres), n)] + spread * rng.standard_normal((n, d)) / np.sqrt(d) * 4
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


# ------------------------------------------------------------------------------------------ Sinkhorn
def _dense_sinkhorn64(bank, targets, tau, n_iter):
    S = bank.astype(np.float64) @ targets.astype(np.float64).T
    m, n = S.shape
    g = np.zeros(n)
    for _ in range(n_iter):
        f = tau * np.log(1 / m) - tau * logsumexp((S + g) / tau, axis=1)
        g = tau * np.log(1 / n) - tau * logsumexp((S + f[:, None]) / tau, axis=0)
    return f, g


@pytest.fixture(scope="module")
def sinkhorn_problem():
    rng = np.random.default_rng(7)
    centres = rng.standard_normal((12, 48))
    return _clustered(rng, 1500, 48, centres), _clustered(rng, 700, 48, centres)


@pytest.mark.parametrize("tau", [0.01, 0.03])
@pytest.mark.parametrize("kwargs", [
    {"cache_bytes": 0},                              # streaming: recompute every block every iteration
    {"cache_bytes": 0, "block_bytes": 700 * 4 * 37},  # streaming, odd small chunks
    {},                                             # float32 cache
    {"block_bytes": 700 * 4 * 100, "cache_bytes": 700 * 4 * 650},  # partial cache: 6 of 15 blocks kept
])
def test_streaming_sinkhorn_equals_dense_float64(sinkhorn_problem, tau, kwargs):
    bank, targets = sinkhorn_problem
    f_ref, g_ref = _dense_sinkhorn64(bank, targets, tau, 10)
    f, g, it = sinkhorn_potentials(torch.from_numpy(bank), torch.from_numpy(targets), tau, 10, **kwargs)
    assert it == 10
    assert np.abs(g.double().numpy() - g_ref).max() < 1e-5
    assert np.abs(f.double().numpy() - f_ref).max() < 1e-5


def test_partial_cache_keeps_the_leading_blocks_and_recomputes_the_rest(sinkhorn_problem, monkeypatch):
    """cache_bytes smaller than S: the blocks that fit are computed once, the others every iteration."""
    bank, targets = sinkhorn_problem
    calls = {"mm": 0, "addmm": 0}
    real_mm, real_addmm = torch.mm, torch.addmm
    monkeypatch.setattr(torch, "mm", lambda *a, **k: calls.__setitem__("mm", calls["mm"] + 1) or real_mm(*a, **k))
    monkeypatch.setattr(torch, "addmm",
                        lambda *a, **k: calls.__setitem__("addmm", calls["addmm"] + 1) or real_addmm(*a, **k))
    sinkhorn_potentials(torch.from_numpy(bank), torch.from_numpy(targets), 0.01, 4,
                        block_bytes=700 * 4 * 100, cache_bytes=700 * 4 * 650)
    assert calls == {"mm": 6, "addmm": 4 * 9}  # 6 blocks of 100 rows cached once; 9 recomputed in 4 iterations


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 2e-5), (torch.bfloat16, 2e-4)])
def test_16bit_cache_sinkhorn_within_tolerance(sinkhorn_problem, dtype, tol):
    bank, targets = sinkhorn_problem
    _, g_ref = _dense_sinkhorn64(bank, targets, 0.01, 10)
    _, g, _ = sinkhorn_potentials(torch.from_numpy(bank), torch.from_numpy(targets), 0.01, 10, cache_dtype=dtype)
    assert np.abs(g.double().numpy() - g_ref).max() < tol


def test_streaming_sinkhorn_handles_underflowing_columns():
    """A far-away target: its streamed column sum underflows float32 and is recomputed exactly."""
    rng = np.random.default_rng(0)
    bank = _clustered(rng, 400, 16, np.eye(16)[:2] * 3, spread=0.1)
    targets = np.concatenate([_clustered(rng, 50, 16, np.eye(16)[:2] * 3, spread=0.1),
                              -bank[:1]], axis=0)  # the last target is opposite to the bank
    _, g_ref = _dense_sinkhorn64(bank, targets, 0.005, 3)
    _, g, _ = sinkhorn_potentials(torch.from_numpy(bank), torch.from_numpy(targets), 0.005, 3, cache_bytes=0)
    assert np.isfinite(g.numpy()).all()
    assert np.abs(g.double().numpy() - g_ref).max() < 1e-5


# ------------------------------------------------------------------------------------------ Sinkhorn block passes
@pytest.mark.parametrize("tau,kwargs", [
    (0.01, {}),                                                          # float32 cache
    (0.03, {}),
    (0.01, {"cache_dtype": torch.float16}),                              # the same float16 blocks for both passes
    (0.03, {"cache_dtype": torch.float16}),
    (0.01, {"cache_dtype": torch.bfloat16}),
])   # a partial cache (both passes in one run) against float64: test_streaming_sinkhorn_equals_dense_float64
def test_shared_shift_pass_equals_the_rowmax_pass(sinkhorn_problem, tau, kwargs, tol=1e-6):
    """The fast block pass (one shift for every row) against the reference pass (each row's own maximum): the
    potentials within float32 rounding, and the same target ranking for every query of a held-out set."""
    bank, targets = (torch.from_numpy(x) for x in sinkhorn_problem)
    f_ref, g_ref, _ = sinkhorn_potentials(bank, targets, tau, 10, block_pass="rowmax", **kwargs)
    f, g, it = sinkhorn_potentials(bank, targets, tau, 10, block_pass="shared-shift", **kwargs)
    assert it == 10
    assert (g - g_ref).abs().max() < tol and (f - f_ref).abs().max() < tol
    centres = np.random.default_rng(7).standard_normal((12, 48))        # the fixture's clusters
    s = torch.from_numpy(_clustered(np.random.default_rng(8), 200, 48, centres)) @ targets.T
    top_ref = (s + g_ref).argsort(dim=1, descending=True)[:, :10]
    assert torch.equal(top_ref, (s + g).argsort(dim=1, descending=True)[:, :10])
    _, g64 = _dense_sinkhorn64(*sinkhorn_problem, tau, 10)
    assert np.abs(g.double().numpy() - g64).max() < (1e-5 if kwargs.get("cache_dtype") is None else 2e-4)


def test_shared_shift_pass_redoes_rows_far_below_the_shared_shift(monkeypatch):
    """A target opposite to the bank pulls its potential far above the others, so rows of the bank fall more than
    23 (in units of tau) below the shared shift: they are redone with their own maximum (a spy counts them) and the
    potentials still equal dense float64 and the rowmax pass."""
    rng = np.random.default_rng(0)
    bank = _clustered(rng, 400, 16, np.eye(16)[:2] * 3, spread=0.1)
    targets = np.concatenate([_clustered(rng, 50, 16, np.eye(16)[:2] * 3, spread=0.1), -bank[:1]], axis=0)
    redone = []
    real = torch.Tensor.nonzero

    def spy(self, *a, **k):
        out = real(self, *a, **k)
        if self.dtype == torch.bool and self.dim() == 1 and self.shape[0] == 400:
            redone.append(int(out.numel()))
        return out

    f_ref, g_ref, _ = sinkhorn_potentials(torch.from_numpy(bank), torch.from_numpy(targets), 0.005, 3,
                                          block_pass="rowmax")
    monkeypatch.setattr(torch.Tensor, "nonzero", spy)
    f, g, _ = sinkhorn_potentials(torch.from_numpy(bank), torch.from_numpy(targets), 0.005, 3)
    monkeypatch.undo()
    assert sum(redone) > 0                        # the low-row branch ran
    _, g64 = _dense_sinkhorn64(bank, targets, 0.005, 3)
    assert np.isfinite(g.numpy()).all() and np.abs(g.double().numpy() - g64).max() < 1e-5
    assert (g - g_ref).abs().max() < 1e-6 and (f - f_ref).abs().max() < 1e-6


def test_shared_shift_pass_with_every_row_redone_equals_rowmax(sinkhorn_problem, monkeypatch):
    """With the row-sum limit at infinity every row takes the fallback: the rowmax arithmetic on every row."""
    from hubnorm.normalizers import sinkhorn as sk
    bank, targets = (torch.from_numpy(x) for x in sinkhorn_problem)
    _, g_ref, _ = sinkhorn_potentials(bank, targets, 0.01, 5, cache_dtype=torch.float16, block_pass="rowmax")
    monkeypatch.setattr(sk, "_ROW_SUM_MIN", math.inf)
    _, g, _ = sinkhorn_potentials(bank, targets, 0.01, 5, cache_dtype=torch.float16)
    assert (g - g_ref).abs().max() < 1e-6


@pytest.mark.parametrize("tau,n_iter,tol,kwargs", [
    (0.01, 10, None, {}),
    (0.005, 400, 1e-9, {}),                                   # to convergence: the same stopping iteration
    (0.03, 10, None, {"block_bytes": 700 * 8 * 100}),         # 15 row blocks
    (0.01, 10, None, {"shared_blocks": {}}),                  # a sweep's shared blocks (S stays intact)
])
def test_float64_kernel_domain_iterations_equal_the_log_domain_and_dense(sinkhorn_problem, tau, n_iter, tol, kwargs):
    """float64 with the whole matrix kept: the kernel-domain iterations (one exponential pass, then two
    matrix-vector products per iteration) against the log-domain reference pass and dense float64 Alg. A1 (scipy):
    potentials within 1e-12 (float64 rounding of O(1) potentials), the same number of iterations run, and the
    iterates read by a callback equal to the returned potentials' history."""
    from hubnorm.normalizers import sinkhorn as sk
    bank, targets = (torch.from_numpy(x).double() for x in sinkhorn_problem)
    f_ref, g_ref, it_ref = sinkhorn_potentials(bank, targets, tau, n_iter, tol, block_pass="rowmax",
                                               **{k: v for k, v in kwargs.items() if k != "shared_blocks"})
    seen, calls = [], []
    real = sk._kernel_iterations
    shared = kwargs.get("shared_blocks")

    def spy(*a, **k):
        calls.append(1)
        return real(*a, **k)

    sk._kernel_iterations = spy
    try:
        f, g, it = sinkhorn_potentials(bank, targets, tau, n_iter, tol, callback=lambda t, gt: seen.append(gt.clone()),
                                       **kwargs)
    finally:
        sk._kernel_iterations = real
    assert calls == [1]                                        # the kernel path ran
    assert it == it_ref and len(seen) == it and torch.equal(seen[-1], g)
    assert (g - g_ref).abs().max() < 1e-12 and (f - f_ref).abs().max() < 1e-12
    if tol is None:
        f64, g64 = _dense_sinkhorn64(*sinkhorn_problem, tau, n_iter)
        assert np.abs(g.numpy() - g64).max() < 1e-12 and np.abs(f.numpy() - f64).max() < 1e-12
    if shared is not None:                                     # the shared score blocks are left as they were
        S = bank @ targets.T
        assert torch.equal(torch.cat([shared[r0][0] for r0 in sorted(shared)]), S)


def test_float64_sinkhorn_takes_the_log_domain_where_the_kernel_does_not_apply(sinkhorn_problem, monkeypatch):
    """Bit-identical to the reference pass: scores spanning more than _KERNEL_MAX_RANGE units of tau, a matrix
    over cache_bytes (partial cache), and an iteration whose kernel potentials are not finite (forced by lifting
    the range limit at a tau whose kernel columns underflow: the run goes on in the log domain from g = 0)."""
    from hubnorm.normalizers import sinkhorn as sk
    bank, targets = (torch.from_numpy(x).double() for x in sinkhorn_problem)
    S = bank @ targets.T
    tau_far = float(S.max() - S.min()) / (sk._KERNEL_MAX_RANGE * 1.01)
    for tau, kwargs in ((tau_far, {}), (0.01, {"block_bytes": 700 * 8 * 100, "cache_bytes": 700 * 8 * 650})):
        a = sinkhorn_potentials(bank, targets, tau, 5, block_pass="rowmax", **kwargs)
        b = sinkhorn_potentials(bank, targets, tau, 5, **kwargs)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and a[2] == b[2]
    # a target opposite to a one-cluster bank: at tau = 0.002 its kernel column is about exp(-1000) = 0 in every row
    rng = np.random.default_rng(0)
    bank = _clustered(rng, 400, 16, np.eye(16)[:1] * 3, spread=0.1)
    targets = np.concatenate([_clustered(rng, 50, 16, np.eye(16)[:1] * 3, spread=0.1), -bank[:1]], axis=0)
    bank, targets = torch.from_numpy(bank).double(), torch.from_numpy(targets).double()
    a = sinkhorn_potentials(bank, targets, 0.002, 3, block_pass="rowmax")
    monkeypatch.setattr(sk, "_KERNEL_MAX_RANGE", math.inf)
    gave_up = []
    real = sk._kernel_iterations
    monkeypatch.setattr(sk, "_kernel_iterations", lambda *a, **k: (lambda r: gave_up.append(r[2:]) or r)(real(*a, **k)))
    b = sinkhorn_potentials(bank, targets, 0.002, 3)
    assert gave_up == [(0, False)]                             # the kernel ran and gave up at its first iteration
    assert torch.isfinite(b[1]).all()
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and a[2] == b[2] == 3


@pytest.mark.parametrize("tau,n_iter,tol", [(0.01, 10, None), (0.005, 400, 1e-9)])
def test_kernel_iterations_numpy_and_torch_namespaces_agree(sinkhorn_problem, monkeypatch, tau, n_iter, tol):
    """The seam of the kernel-domain loop: numpy on the CPU (the default there), torch on a torch device (forced
    here on the CPU): potentials within 1e-12, the same iterations run, torch tensors out of both; on CUDA too when
    present."""
    from hubnorm.normalizers import sinkhorn as sk
    bank, targets = (torch.from_numpy(x).double() for x in sinkhorn_problem)
    assert sk._kernel_namespace("cpu") is np
    f_np, g_np, it_np = sinkhorn_potentials(bank, targets, tau, n_iter, tol)
    monkeypatch.setattr(sk, "_kernel_namespace", lambda device: torch)
    f_t, g_t, it_t = sinkhorn_potentials(bank, targets, tau, n_iter, tol)
    assert isinstance(g_np, torch.Tensor) and isinstance(f_np, torch.Tensor) and it_np == it_t
    assert (g_np - g_t).abs().max() < 1e-12 and (f_np - f_t).abs().max() < 1e-12
    if torch.cuda.is_available():    # pragma: no cover - needs a GPU
        monkeypatch.undo()
        f_c, g_c, it_c = sinkhorn_potentials(bank.cuda(), targets.cuda(), tau, n_iter, tol)
        assert it_c == it_np and (g_c.cpu() - g_np).abs().max() < 1e-12


def test_sinkhorn_block_pass_is_checked(sinkhorn_problem):
    bank, targets = (torch.from_numpy(x) for x in sinkhorn_problem)
    with pytest.raises(ValueError, match="block_pass must be one of"):
        sinkhorn_potentials(bank, targets, 0.01, 2, block_pass="fast")




def test_long_sinkhorn_fits_show_progress_and_the_bar_changes_nothing(monkeypatch, capsys):
    """A fit above PROGRESS_ENTRIES shows a bar with the time left on stderr (the DBSN fit on the full COCO training
    banks runs for an hour on a CPU); a regression guard that the bar stays outside the arithmetic: the potentials
    are bit-identical with and without it."""
    from hubnorm.normalizers import sinkhorn as sk
    rng = np.random.default_rng(4)
    bank = torch.from_numpy(rng.standard_normal((300, 16)).astype(np.float32))
    targets = torch.from_numpy(rng.standard_normal((40, 16)).astype(np.float32))
    monkeypatch.setenv("HUBNORM_PROGRESS", "1")
    quiet = sk.sinkhorn_potentials(bank, targets, 0.05, n_iter=4, block_bytes=40 * 4 * 64)
    assert "Sinkhorn" not in capsys.readouterr().err           # small: no bar
    monkeypatch.setattr(sk, "PROGRESS_ENTRIES", 1)
    shown = sk.sinkhorn_potentials(bank, targets, 0.05, n_iter=4, block_bytes=40 * 4 * 64)
    err = capsys.readouterr().err
    assert "Sinkhorn 300 x 40" in err and "block" in err
    for a, b in zip(quiet[:2], shown[:2]):
        assert torch.equal(a, b)
    assert quiet[2] == shown[2] == 4


# ------------------------------------------------------------------------------------------ options, by their effect
def _small(seed=5, m=90, n=40, d=12, dtype=torch.float32):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((4, d))
    return (torch.from_numpy(_clustered(rng, m, d, centres)).to(dtype),
            torch.from_numpy(_clustered(rng, n, d, centres)).to(dtype))


def test_ten_iterations_by_default_and_the_callback_sees_each_iterate():
    """The default n_iter is 10 (DBSN's setting); ``callback(t, g)`` gets the 1-based iteration and that iteration's g,
    equal to a run of t iterations (the float32 log-domain loop and the float64 kernel loop alike)."""
    for dtype in (torch.float32, torch.float64):
        bank, targets = _small(dtype=dtype)
        seen = []
        f, g, done = sinkhorn_potentials(bank, targets, 0.05, callback=lambda t, g: seen.append((t, g.clone())))
        assert done == 10 and [t for t, _ in seen] == list(range(1, 11))
        for t in (1, 4, 10):
            g_t = sinkhorn_potentials(bank, targets, 0.05, t)[1]
            assert torch.allclose(seen[t - 1][1].to(dtype), g_t, rtol=0, atol=1e-12), (dtype, t)
        assert torch.equal(seen[-1][1].to(dtype), g)
        stopped = sinkhorn_potentials(bank, targets, 0.05, 10, callback=lambda t, g: t == 3)
        assert stopped[2] == 3 and torch.allclose(stopped[1], seen[2][1].to(dtype), rtol=0, atol=1e-12)


@pytest.mark.parametrize("cache_dtype, block_pass, shifted", [
    (None, "shared-shift", True),              # float32 shared-shift pass: kept relative to the row maxima
    (None, "rowmax", False),                   # the reference pass keeps the raw scores
    (torch.float16, "rowmax", True),           # 16 bits: always relative to the row maxima (finest near 0)
    (torch.bfloat16, "shared-shift", True),
])
def test_kept_blocks_are_stored_as_documented(cache_dtype, block_pass, shifted):
    """What ``shared_blocks`` holds after a run: every row block of S once, in the cache dtype, either raw (shift
    None) or minus its row maxima (the shift kept beside it): the block plus its shift is S again."""
    bank, targets = _small()
    S = bank.double() @ targets.double().T
    shared = {}
    sinkhorn_potentials(bank, targets, 0.05, 3, block_bytes=40 * 4 * 32, cache_dtype=cache_dtype, shared_blocks=shared,
                        block_pass=block_pass)
    assert sorted(shared) == [0, 32, 64]
    store = torch.float32 if cache_dtype is None else cache_dtype
    for r0, (s, shift) in shared.items():
        r1 = min(r0 + 32, 90)
        assert s.dtype == store and s.shape == (r1 - r0, 40)
        if shifted:
            assert shift is not None and torch.equal(s.double().amax(dim=1), torch.zeros(r1 - r0, dtype=torch.float64))
            back = s.double() + shift.double()[:, None]
        else:
            assert shift is None
            back = s.double()
        assert (back - S[r0:r1]).abs().max() < (1e-6 if store == torch.float32 else 2e-2)


def test_the_cache_budget_is_inclusive_and_counts_the_cache_dtype(monkeypatch):
    """S kept whole when ``m n itemsize <= cache_bytes`` (a GEMM per block once); one byte less keeps only the
    leading blocks that fit (``cache_bytes // block bytes``); a float16 cache counts 2 bytes an entry."""
    bank, targets = _small()
    calls = {"mm": 0, "addmm": 0}
    real_mm, real_addmm = torch.mm, torch.addmm
    monkeypatch.setattr(torch, "mm", lambda *a, **k: calls.__setitem__("mm", calls["mm"] + 1) or real_mm(*a, **k))
    monkeypatch.setattr(torch, "addmm",
                        lambda *a, **k: calls.__setitem__("addmm", calls["addmm"] + 1) or real_addmm(*a, **k))

    def run(cache_bytes, cache_dtype=None):
        calls.update(mm=0, addmm=0)
        sinkhorn_potentials(bank, targets, 0.05, 4, block_bytes=40 * 4 * 30, cache_bytes=cache_bytes,
                            cache_dtype=cache_dtype)
        return dict(calls)

    assert run(90 * 40 * 4) == {"mm": 3, "addmm": 0}                 # 3 blocks of 30 rows, all kept
    assert run(90 * 40 * 4 - 1) == {"mm": 2, "addmm": 4}             # 2 blocks fit; the third every iteration
    assert run(30 * 40 * 4 - 1) == {"mm": 0, "addmm": 12}            # not one block fits
    assert run(0) == run(None) == {"mm": 0, "addmm": 12}
    assert run(90 * 40 * 2, torch.float16) == {"mm": 3, "addmm": 0}  # 2 bytes an entry
    assert run(60 * 40 * 2, torch.float16) == {"mm": 2, "addmm": 4}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_the_progress_bar_counts_one_step_per_block_and_iteration(monkeypatch, dtype):
    """The bar's total is n_iter x the number of row blocks (rows per block from ``block_bytes`` at 4 bytes an entry
    for inputs of 32 bits or fewer: float16 inputs are computed in float32), its label names the matrix, and it is
    shown from PROGRESS_ENTRIES score entries."""
    from hubnorm.normalizers import sinkhorn as sk
    bank, targets = _small()
    bank, targets = bank.to(dtype), targets.to(dtype)
    made = []

    class Bar:
        def __init__(self, **kwargs):
            made.append(kwargs)
            self.n = 0

        def update(self, k):
            self.n += k

        def close(self):
            made[-1]["steps"] = self.n

    monkeypatch.setattr(sk, "progress", Bar)
    sk.sinkhorn_potentials(bank, targets, 0.05, 6, block_bytes=40 * 4 * 25)         # 25 rows a block: 4 blocks
    assert made[-1] == {"total": 24, "desc": "Sinkhorn 90 x 40", "unit": "block", "disable": True, "steps": 24}
    monkeypatch.setattr(sk, "PROGRESS_ENTRIES", 90 * 40 * 6)
    sk.sinkhorn_potentials(bank, targets, 0.05, 6, block_bytes=40 * 4 * 25)
    assert made[-1]["disable"] is False                                              # exactly at the threshold
    monkeypatch.setattr(sk, "PROGRESS_ENTRIES", 90 * 40 * 6 + 1)
    sk.sinkhorn_potentials(bank, targets, 0.05, 6, block_bytes=40 * 4 * 25)
    assert made[-1]["disable"] is True


def test_float64_kernel_path_budget_and_a_shared_cache_left_intact(monkeypatch):
    """The float64 kernel-domain loop runs when S fits ``cache_bytes`` exactly (8 bytes an entry), also for a single
    target, and not one byte below; with ``shared_blocks`` it works on copies: the kept blocks still hold S, and a
    second temperature on the same cache gives what a fresh run gives, bit for bit."""
    from hubnorm.normalizers import sinkhorn as sk
    ran = []
    real = sk._kernel_iterations
    monkeypatch.setattr(sk, "_kernel_iterations", lambda *a, **k: ran.append(1) or real(*a, **k))
    bank, targets = _small(dtype=torch.float64)
    for n_targets, cache_bytes, want in ((40, 90 * 40 * 8, True), (40, 90 * 40 * 8 - 1, False), (1, 90 * 8, True)):
        ran.clear()
        t = targets[:n_targets]
        got = sinkhorn_potentials(bank, t, 0.05, 5, cache_bytes=cache_bytes)
        ref = sinkhorn_potentials(bank, t, 0.05, 5, cache_bytes=cache_bytes, block_pass="rowmax")
        assert bool(ran) is want, (n_targets, cache_bytes)
        assert ref[0].dtype == got[0].dtype == got[1].dtype == torch.float64
        assert torch.allclose(got[1], ref[1], rtol=0, atol=1e-12) and torch.allclose(got[0], ref[0], rtol=0, atol=1e-12)
    S = bank @ targets.T
    shared = {}
    first = sinkhorn_potentials(bank, targets, 0.05, 5, shared_blocks=shared)
    kept = shared[0][0].clone()
    assert len(shared) == 1 and shared[0][1] is None
    torch.testing.assert_close(kept, S, rtol=0, atol=1e-14)
    second = sinkhorn_potentials(bank, targets, 0.02, 5, shared_blocks=shared)
    assert torch.equal(shared[0][0], kept)                   # left intact by the first run and by the second
    for got, tau in ((first, 0.05), (second, 0.02)):
        fresh = sinkhorn_potentials(bank, targets, tau, 5)
        assert torch.equal(got[0], fresh[0]) and torch.equal(got[1], fresh[1]) and got[2] == fresh[2] == 5
