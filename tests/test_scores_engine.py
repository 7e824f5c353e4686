"""The engine over stored score matrices (``hubnorm.engine.LocalEngine`` given ``matrices=``) on its own: each shared
reduction along
both axes against the dense float64 form, on every read path (resident in memory, streamed in blocks, the plain
loop; a matrix given in the other orientation and read transposed), the guards of a stored matrix at a single bad
cell, the resident budget at its boundary, and what ``Normalizer.fit_engine`` / a ``RetrievalTask`` of score matrices
pass on. The survivors of the mutation run of ``hubnorm.scores`` (benchmarks/reports/mutation/scores.md) pointed to
each of these."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import hubnorm as hn
from hubnorm.blocks import LogMeanExp, LogSumExp, Moments, Scores, TopK
from hubnorm.engine import LocalEngine
from hubnorm.matrices import ScoreMatrix
from hubnorm.scores import matrices_from_embeddings

PATHS = {"resident": {}, "streamed": {"resident_bytes": 0, "block_bytes": 256},
         "plain": {"plain": True, "block_bytes": 256}}


def _unit(n, d=6, seed=0):
    x = np.random.default_rng(seed).standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def emb():
    return {"queries": _unit(11, seed=1), "targets": _unit(13, seed=2), "query_bank": _unit(29, seed=3),
            "target_bank": _unit(17, seed=4)}


@pytest.fixture(scope="module")
def S(emb):
    return emb["query_bank"] @ emb["targets"].T        # 29 x 13: bank queries x targets


def _engines(S, **extra):
    """The bank x targets matrix given as such and given transposed (read transposed)."""
    for path, kw in PATHS.items():
        yield f"{path}", LocalEngine(matrices={("query_bank", "targets"): S}, **kw, **extra)
        yield f"{path} transposed", LocalEngine(matrices={("targets", "query_bank"): np.ascontiguousarray(S.T)}, **kw,
                                                **extra)


# ------------------------------------------------------------------------------------------------ reductions
@pytest.mark.parametrize("axis", [0, 1])
def test_every_reduction_on_every_read_path_equals_the_dense_form(S, axis):
    src = Scores("query_bank", "targets")
    lme = torch.logsumexp(torch.from_numpy(20.0 * S), dim=axis) - math.log(S.shape[axis])
    rt = torch.linspace(-1.0, 1.0, S.shape[0], dtype=torch.float64)
    ct = torch.linspace(0.0, 2.0, S.shape[1], dtype=torch.float64)
    lse = torch.logsumexp(torch.from_numpy(5.0 * S) + rt[:, None] + ct[None, :], dim=axis)
    top = torch.from_numpy(S if axis == 1 else S.T).topk(4, dim=1)
    for name, eng in _engines(S):
        got = eng.reduce(LogMeanExp(src, 20.0, axis=axis))
        torch.testing.assert_close(got, lme, rtol=1e-12, atol=1e-12, msg=name)
        got = eng.reduce(LogSumExp(src, 5.0, torch.float64, axis=axis, row_terms=rt, col_terms=ct))
        torch.testing.assert_close(got, lse, rtol=1e-12, atol=1e-12, msg=name)
        got = eng.reduce(TopK(src, 4, axis=axis, indices=True))
        torch.testing.assert_close(got.values, top.values, rtol=0, atol=1e-15, msg=name)
        assert torch.equal(got.indices, top.indices), name
        mean, sd = eng.reduce(Moments(src, axis=axis))
        torch.testing.assert_close(mean, torch.from_numpy(S.mean(axis=axis)), rtol=1e-12, atol=1e-14, msg=name)
        torch.testing.assert_close(sd, torch.from_numpy(S.std(axis=axis)), rtol=1e-10, atol=1e-14, msg=name)
        eng.release()


def test_concatenated_columns(emb):
    """``cols`` of two inputs (DBSN's extra columns): the stored matrices side by side."""
    qb, t, tb = emb["query_bank"], emb["targets"], emb["target_bank"]
    full = np.concatenate([qb @ t.T, qb @ tb.T], axis=1)
    src = Scores("query_bank", ("targets", "target_bank"))
    want = torch.logsumexp(torch.from_numpy(7.0 * full), dim=1) - math.log(full.shape[1])
    for kw in PATHS.values():
        eng = LocalEngine(matrices={("query_bank", "targets"): qb @ t.T, ("target_bank", "query_bank"): tb @ qb.T},
                          **kw)
        torch.testing.assert_close(eng.reduce(LogMeanExp(src, 7.0, axis=1)), want, rtol=1e-12, atol=1e-12)
        m0 = eng.reduce(Moments(src, axis=0))[0]
        torch.testing.assert_close(m0, torch.from_numpy(full.mean(axis=0)), rtol=1e-12, atol=1e-14)


def test_float32_matrices_give_values_in_the_engines_dtype(S):
    s32 = S.astype(np.float32)
    for dtype in (torch.float64, torch.float32):
        for kw in PATHS.values():
            eng = LocalEngine(matrices={("query_bank", "targets"): s32}, dtype=dtype, **kw)
            top = eng.reduce(TopK(Scores("query_bank", "targets"), 3, axis=0, indices=True))
            assert top.values.dtype == dtype
            want = torch.from_numpy(s32.T).topk(3, dim=1)
            torch.testing.assert_close(top.values, want.values.to(dtype), rtol=0, atol=0)
            assert torch.equal(top.indices, want.indices)


# ------------------------------------------------------------------------------------------------ the matrices
def test_a_matrix_given_in_the_other_orientation_serves_both(S):
    eng = LocalEngine(matrices={("targets", "query_bank"): S.T})
    assert eng.has_matrix("query_bank", "targets") and eng.has_matrix("targets", "query_bank")
    assert not eng.has_matrix("query_bank", "target_bank")
    assert eng.matrix("query_bank", "targets").shape == S.shape
    np.testing.assert_array_equal(eng.resident("query_bank", "targets").numpy(), S)
    np.testing.assert_array_equal(eng.resident("targets", "query_bank").numpy(), S.T)
    assert eng.size("query_bank") == 29 and eng.size("targets") == 13 and eng.size("queries") is None
    with pytest.raises(ValueError, match=r"no query bank x target bank score matrix \(query_bank x target_bank\)$"):
        eng.matrix("query_bank", "target_bank")
    hinted = LocalEngine(matrices={("targets", "query_bank"): S.T}, hints={("target_bank",
                         "query_bank"): "add bank_cols.npy"})
    with pytest.raises(ValueError, match=r"\(query_bank x target_bank\): add bank_cols.npy"):
        hinted.matrix("query_bank", "target_bank")
    assert LocalEngine(matrices={("query_bank", "targets"): S}).plain is False


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
@pytest.mark.parametrize("orientation", ["stored", "transposed", "fortran"])
@pytest.mark.parametrize("path", ["resident", "streamed"])
def test_a_single_non_finite_cell_is_refused_with_its_position(S, value, orientation, path):
    bad = S.copy()
    bad[21, 5] = value
    key, data = ("query_bank", "targets"), bad
    if orientation == "transposed":
        key, data = ("targets", "query_bank"), np.ascontiguousarray(bad.T)
    elif orientation == "fortran":
        data = np.asfortranarray(bad)
    eng = LocalEngine(matrices={key: ScoreMatrix(data, "bank.npy")}, **PATHS[path])
    with pytest.raises(ValueError, match="bank.npy holds a non-finite score"):
        hn.InvertedSoftmax(tau=0.05).fit_engine(eng)
    if path == "resident":   # the one read of the fast path names the stored cell
        stored = (5, 21) if orientation == "transposed" else (21, 5)
        eng = LocalEngine(matrices={key: ScoreMatrix(data, "bank.npy")})
        with pytest.raises(ValueError, match=rf"at row {stored[0]}, column {stored[1]}:"):
            eng.resident("query_bank", "targets")


def test_the_copy_budget_at_its_boundary_and_views_at_any_size(S):
    key = ("query_bank", "targets")
    half = S.astype(np.float16)                               # not viewable: read into a float32 copy
    nbytes = S.size * 4
    kept = LocalEngine(matrices={key: half}, resident_bytes=nbytes).resident(*key)
    assert kept.dtype == torch.float32 and torch.equal(kept, torch.from_numpy(half.astype(np.float32)))
    assert LocalEngine(matrices={key: half}, resident_bytes=nbytes - 1).resident(*key) is None
    wide = np.ascontiguousarray(np.tile(half, (1, 3)))       # 29 x 39: a budget of n_a / n_b would keep it
    assert LocalEngine(matrices={key: wide}, resident_bytes=wide.size * 4 // 2).resident(*key) is None
    subset = ScoreMatrix(S).take(rows=np.arange(0, 29, 2))   # an indexed subset: copied, within the budget
    assert LocalEngine(matrices={key: subset}, resident_bytes=15 * 13 * 8 - 1).resident(*key) is None
    assert torch.equal(LocalEngine(matrices={key: subset}).resident(*key), torch.from_numpy(S[::2]))
    # a native float32 / float64 array (a memory map too) is a view at any budget but 0, never a copy
    for arr in (S, S.astype(np.float32), np.asfortranarray(S)):
        view = LocalEngine(matrices={key: arr}, resident_bytes=1).resident(*key)
        assert np.shares_memory(view.numpy(), arr) and view.dtype == torch.from_numpy(arr).dtype
        assert torch.equal(view, torch.from_numpy(np.ascontiguousarray(arr)))
    back = LocalEngine(matrices={key[::-1]: S}).resident(*key)         # given the other way round: the transposed view
    assert np.shares_memory(back.numpy(), S) and torch.equal(back, torch.from_numpy(S).T)
    assert LocalEngine(matrices={key: S}, resident_bytes=0).resident(*key) is None
    assert LocalEngine(matrices={key: S}, plain=True).resident(*key) is None


def test_a_view_is_checked_once_and_names_the_stored_cell(S):
    key = ("query_bank", "targets")
    data = S.copy()
    m = ScoreMatrix(data, "bank.npy")
    eng = LocalEngine(matrices={key: m}, block_bytes=13 * 8 * 5)
    eng.resident(*key)
    assert eng.blocks_read == 6 and m.bound == float(np.abs(S).max())   # one pass: 29 rows by 5
    eng.resident(*key)
    assert eng.blocks_read == 6                               # checked in this fit: no second pass
    eng.release()                                             # the end of a fit
    data[20, 1] = np.inf                                      # the array changed between two fits
    with pytest.raises(ValueError, match=r"bank.npy holds a non-finite score .* at row 20, column 1:"):
        eng.resident(*key)
    trusted = ScoreMatrix(S, "bank.npy", checked=True, bound=9.0)   # a sims folder's scan: never read again
    eng = LocalEngine(matrices={key: trusted})
    eng.resident(*key)
    assert eng.blocks_read == 0
    for order, transposed, cell in (("C", False, (7, 3)), ("F", False, (7, 3)), ("C", True, (3, 7)),
                                    ("F", True, (3, 7))):
        bad = np.array(S, order=order)
        bad[7, 3] = np.nan
        eng = LocalEngine(matrices={key: ScoreMatrix(bad, "bank.npy", transposed=transposed)})
        with pytest.raises(ValueError, match=rf"bank.npy holds a non-finite score .* at row {cell[0]}, column "
                                             rf"{cell[1]}:"):
            eng.resident(*key)


def test_blocks_read_counts_every_read(S):
    eng = LocalEngine(matrices={("query_bank", "targets"): S}, resident_bytes=0, block_bytes=13 * 8 * 5)
    eng.reduce(Moments(Scores("query_bank", "targets"), axis=0))
    assert eng.blocks_read == 6 and eng.largest_block == 5 * 13       # 29 rows in strips of 5
    eng.reduce(Moments(Scores("query_bank", "targets"), axis=0))
    assert eng.blocks_read == 12


# ------------------------------------------------------------------------------------------------ fits and tasks
def test_query_aware_fit_uses_the_test_scores_as_the_bank(emb):
    q, t, qb = emb["queries"], emb["targets"], emb["query_bank"]
    mats = matrices_from_embeddings(q, t, qb)
    task = hn.RetrievalTask(scores=mats, positives=hn.Positives.from_labels(np.arange(11) % 13, 13), direction="t2v")
    aware = task.fit(hn.InvertedSoftmax(tau=0.05), query_aware=True)
    want = hn.InvertedSoftmax(tau=0.05).fit(t, query_bank=q)
    np.testing.assert_allclose(aware.offsets, want.offsets, rtol=0, atol=1e-12)
    agnostic = hn.InvertedSoftmax(tau=0.05).fit_engine(LocalEngine(matrices=mats))
    assert np.abs(agnostic.offsets - aware.offsets).max() > 1e-3
    with pytest.raises(ValueError, match=r"needs the query bank x gallery \(targets\) score matrix"):
        hn.InvertedSoftmax(tau=0.05).fit_engine(LocalEngine(matrices={("queries", "targets"): mats[("queries",
                                                                                                   "targets")]}))


def test_task_defaults_and_ks(emb):
    q, t, qb = emb["queries"], emb["targets"], emb["query_bank"]
    mats = matrices_from_embeddings(q, t, qb)
    pos = hn.Positives.from_labels(np.arange(11) % 13, 13)
    task = hn.RetrievalTask(scores=mats, positives=pos, direction="t2i")
    assert set(hn.evaluate(None, task, ks=(1, 3))) >= {"R@1", "R@3"} and "R@5" not in hn.evaluate(None, task, ks=(1, 3))
    np.testing.assert_array_equal(hn.k_occurrence(task.blocks()), hn.k_occurrence(task.blocks(), k=10))
    assert hn.hubness(task.blocks()) == hn.hubness(task.blocks(), k=10)
    assert not np.array_equal(hn.k_occurrence(task.blocks(), k=10), hn.k_occurrence(task.blocks(), k=11))


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_top_k_fit_checks_a_view_in_its_own_pass(tmp_path, order, transposed, bad):
    """NNN's top-k reads an unchecked memory map once: its strips are checked as the kernel reads them (no pass of
    its own before), and a non-finite score deep in the matrix is named by its cell as the task reads it."""
    rng = np.random.default_rng(2)
    S = np.array(rng.standard_normal((61, 7)), order=order)
    path = tmp_path / "bank.npy"
    np.save(path, S.T if transposed else S)                   # stored as given: read back transposed or not
    stored = np.load(path, mmap_mode="r")
    m = ScoreMatrix(stored, "bank.npy", transposed=transposed)
    key = ("query_bank", "targets")
    eng = LocalEngine(matrices={key: m}, block_bytes=7 * 8 * 4)
    hn.NearestNeighborNormalization(k=3, alpha=0.5).fit_engine(eng)
    one_pass = LocalEngine(matrices={key: ScoreMatrix(stored, "bank.npy", transposed=transposed)},
                           block_bytes=7 * 8 * 4)
    one_pass.resident(*key)                                     # the checking pass alone
    assert eng.blocks_read == one_pass.blocks_read > 1           # checked while read once, not read twice
    S2 = S.copy()
    S2[53, 4] = bad
    np.save(path, S2.T if transposed else S2)
    eng = LocalEngine(matrices={key: ScoreMatrix(np.load(path, mmap_mode="r"), "bank.npy", transposed=transposed)},
                      block_bytes=7 * 8 * 4)
    with pytest.raises(ValueError, match=r"bank.npy holds a non-finite score \(NaN or inf\) at row 53, column 4:"):
        hn.NearestNeighborNormalization(k=3, alpha=0.5).fit_engine(eng)
