"""Invariants: identities at zero strength, per-row shift invariance, independence from block sizes, and
float32 / float64 agreement on well-separated data."""

import inspect

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hubnorm as hn
from conftest import unit_rows

pytestmark = pytest.mark.usefixtures("single_thread_torch")

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True)

#: every registered method with small-problem parameters (each class's ``example_params``: from the registry, so a
#: newly registered method gets these invariants too)
METHODS = {name: dict(cls.example_params) for name, cls in hn.NORMALIZERS.items()}


def _data(seed, m=40, n=30, b=50, c=35, d=12, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return tuple(unit_rows(rng, x, d, dtype) for x in (m, n, b, c))


def _fit(name, t, qb, tb, **extra):
    return hn.make_normalizer(name, **METHODS[name], device="cpu", **extra).fit(t, query_bank=qb, target_bank=tb)


def _queries(name, q, qb):
    """A transductive method (OTN, L2N, HN) scores only the rows it was fitted on: its bank."""
    return qb if getattr(hn.NORMALIZERS[name], "transductive", False) else q


def _order(s):
    s = s.numpy() if isinstance(s, torch.Tensor) else s
    return np.argsort(-s, axis=1, kind="stable")


# ------------------------------------------------------------------------------ zero strength = identity
@SETTINGS
@given(seed=st.integers(0, 10_000), k=st.integers(1, 50))
def test_nnn_alpha_zero_and_dn_lam_zero_are_the_identity(seed, k):
    q, t, qb, tb = _data(seed)
    S = q @ t.T
    nnn = hn.NearestNeighborNormalization(alpha=0.0, k=k, device="cpu").fit(t, query_bank=qb)
    np.testing.assert_array_equal(nnn.offsets, 0.0)
    np.testing.assert_allclose(nnn.score(q).numpy(), S, atol=1e-12)
    dn = hn.DistributionNormalization(lam=0.0, device="cpu").fit(t, query_bank=qb, target_bank=tb)
    np.testing.assert_allclose(dn.score(q).numpy(), S, atol=1e-12)
    raw = hn.Identity(device="cpu").fit(t)
    np.testing.assert_allclose(raw.score(q).numpy(), S, atol=1e-12)


def test_nonzero_strength_changes_rankings():
    """Guard for the identity test: with alpha > 0 the rankings do move on this data."""
    q, t, qb, _ = _data(1)
    nnn = hn.NearestNeighborNormalization(alpha=1.0, k=4, device="cpu").fit(t, query_bank=qb)
    assert not np.array_equal(_order(nnn.score(q)), _order(q @ t.T))


# ------------------------------------------------------------------------------ per-row shift invariance
@SETTINGS
@given(seed=st.integers(0, 10_000), scale=st.floats(-50, 50), k=st.integers(1, 10))
def test_row_shift_does_not_change_ranks_or_k_occurrence(seed, scale, k):
    rng = np.random.default_rng(seed)
    m, n = 30, 20
    S = rng.standard_normal((m, n))
    shift = scale * rng.standard_normal((m, 1))
    pos = hn.Positives.from_lists([rng.choice(n, rng.integers(1, 4), replace=False) for _ in range(m)], n)
    np.testing.assert_array_equal(hn.positive_ranks(S + shift, pos), hn.positive_ranks(S, pos))
    np.testing.assert_array_equal(hn.k_occurrence(S + shift, k), hn.k_occurrence(S, k))


def test_column_shift_does_change_ranks():
    """Guard: a per-column shift (what the normalizers do) is not a no-op for the rank functions."""
    rng = np.random.default_rng(0)
    S = rng.standard_normal((30, 20))
    shifted = S + np.linspace(-3, 3, 20)[None, :]
    assert not np.array_equal(hn.k_occurrence(shifted, 3), hn.k_occurrence(S, 3))


@pytest.mark.parametrize("name", sorted(METHODS))
@settings(max_examples=6, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10_000), scale=st.floats(-20, 20))
def test_normalizer_rows_rank_the_same_after_a_row_shift(name, seed, scale):
    q, t, qb, tb = _data(seed, m=25, n=20, b=30, c=25)
    q = _queries(name, q, qb)
    norm = _fit(name, t, qb, tb)
    scores = norm.score(q).numpy()
    shifted = scores + scale * np.random.default_rng(seed).standard_normal((len(q), 1))
    pos = hn.Positives.from_labels(np.arange(len(q)) % 20, 20)
    np.testing.assert_array_equal(hn.positive_ranks(shifted, pos), hn.positive_ranks(scores, pos))
    np.testing.assert_array_equal(hn.positive_ranks(norm, pos, q), hn.positive_ranks(scores, pos))
    np.testing.assert_array_equal(hn.k_occurrence(shifted, 5), hn.k_occurrence(norm, 5, q))


# ------------------------------------------------------------------------------ block-size independence
#: (block_bytes, chunk_size) pairs; block_bytes=8 is one row x one column per block (hundreds of blocks)
SIZES = [(8, 1), (8, None), (200, 3), (4096, 17), (10**6, 1000), (None, 5)]


@pytest.mark.parametrize("name", sorted(METHODS))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_offsets_and_ranks_do_not_depend_on_block_sizes(name, dtype):
    q, t, qb, tb = _data(7, m=33, n=29, b=41, c=23, dtype=dtype)
    q = _queries(name, q, qb)
    pos = hn.Positives.from_labels(np.arange(len(q)) % 29, 29)
    ref = _fit(name, t, qb, tb)
    fitted = lambda n: {k: v.numpy() for k, v in vars(n).items()   # every fitted tensor (offsets, scales, moments)
                        if k.endswith("_") and k != "targets_" and isinstance(v, torch.Tensor) and v.is_floating_point()}
    ref_fit = fitted(ref)
    assert ref_fit, f"{name}: no fitted tensor"
    ref_ranks = hn.positive_ranks(ref, pos, q)
    ref_nk = hn.k_occurrence(ref, 5, q)
    tol = 1e-12 if dtype == np.float64 else 2e-6
    for bb, chunk in SIZES:
        takes = inspect.signature(hn.NORMALIZERS[name].__init__).parameters
        extra = {"block_bytes": bb} if (bb is not None and "block_bytes" in takes) else {}  # raw, DN: no blocks
        if "cache_bytes" in takes:  # SN, DBSN
            extra["cache_bytes"] = None if bb == 8 else hn.normalizers.sinkhorn.DEFAULT_CACHE_BYTES
        norm = _fit(name, t, qb, tb, chunk_size=chunk, **extra)
        for key, value in fitted(norm).items():
            np.testing.assert_allclose(value, ref_fit[key], atol=tol, rtol=0, err_msg=key)
        np.testing.assert_array_equal(hn.positive_ranks(norm, pos, q), ref_ranks)
        np.testing.assert_array_equal(hn.k_occurrence(norm, 5, q), ref_nk)
        for c in (1, 7):
            np.testing.assert_array_equal(hn.positive_ranks(norm, pos, q, chunk_size=c), ref_ranks)


def test_topk_selection_identical_across_blocks():
    """The streamed top-k selects the same bank items whatever the block shape (values up to float32 rounding of
    the block matmul), including blocks narrower than k."""
    from hubnorm.kernels import topk_similarity

    _, t, qb, _ = _data(8, n=57, b=131, dtype=np.float32)
    t, qb = torch.from_numpy(t), torch.from_numpy(qb)
    dense = t @ qb.T
    ref_v, ref_i = dense.topk(9, dim=1)
    for bb in (None, 8, 36, 1000, 5000):
        v, i = topk_similarity(t, qb, 9, block_bytes=bb)
        np.testing.assert_array_equal(i.numpy(), ref_i.numpy())
        np.testing.assert_allclose(v.numpy(), ref_v.numpy(), rtol=0, atol=5e-7)
        got = hn.NearestNeighborNormalization(alpha=1.0, k=9, device="cpu", block_bytes=bb).fit(t, query_bank=qb).offsets
        np.testing.assert_allclose(got, -ref_v.mean(dim=1).numpy(), rtol=0, atol=5e-7)


# ------------------------------------------------------------------------------ float32 vs float64
@pytest.mark.parametrize("name", sorted(METHODS))
def test_float32_and_float64_rankings_agree_on_well_separated_data(name):
    # few targets far apart (d = 64, 15 targets), so neighbouring scores differ by far more than float32 error
    q, t, qb, tb = _data(9, m=60, n=15, b=80, c=40, d=64)
    q = _queries(name, q, qb)
    f64 = _fit(name, t, qb, tb)
    f32 = _fit(name, *(x.astype(np.float32) for x in (t, qb, tb)))
    s64 = f64.score(q).numpy()
    s32 = f32.score(q.astype(np.float32)).numpy()
    assert s32.dtype == np.float32
    if getattr(hn.NORMALIZERS[name], "transductive", False):   # a plan: its zeros tie (by index) in both dtypes
        np.testing.assert_array_equal(_order(s32), _order(s64))
        return
    gaps = -np.diff(np.sort(s64, axis=1)[:, ::-1], axis=1)
    separated = gaps.min(axis=1) > 1e-4  # rows whose whole ranking is well separated in float64
    assert separated.mean() > 0.8
    np.testing.assert_array_equal(_order(s32)[separated], _order(s64)[separated])
    pos = hn.Positives.from_labels(np.arange(len(q)) % 15, 15)
    r64, r32 = hn.positive_ranks(s64[separated], pos.subset(np.flatnonzero(separated))), \
        hn.positive_ranks(s32[separated], pos.subset(np.flatnonzero(separated)))
    np.testing.assert_array_equal(r32, r64)
