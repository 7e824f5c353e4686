"""The pieces of hubnorm.scores a user meets one by one, against values computed by hand or densely here: a stored
matrix's sub-matrices (transposed, chained), the hubness of a score task over many blocks, what a task holds, the
seeded bank subsets, positives from index pairs, and the guards by their whole messages."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

import hubnorm as hn
from hubnorm.scores import (ScoreEngine, ScoreMatrix, ScoreTask, bank_subsets, positives_from_pairs, sample_index)


def _rng(seed=0):
    return np.random.default_rng(seed)


def _error(kind, call, *args, **kwargs) -> str:
    """The message of the ``kind`` error that ``call(*args, **kwargs)`` raises."""
    with pytest.raises(kind) as e:
        call(*args, **kwargs)
    return str(e.value)


def _dense(m, dtype=torch.float64):
    return m.block(0, m.shape[0], 0, m.shape[1], dtype).numpy()


# ----------------------------------------------------------------------------------------------- stored matrices
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_sub_matrix_is_the_rows_and_columns_asked_for_read_straight_transposed_or_chained(dtype):
    M = _rng().standard_normal((9, 7)).astype(dtype)
    m = ScoreMatrix(M, "my scores", checked=True, bound=5.0)
    rows, cols = [1, 4, 8], [0, 2, 3, 6]
    sub = m.take(rows, cols)
    assert sub.shape == (3, 4) and np.array_equal(_dense(sub), M[rows][:, cols].astype(np.float64))
    assert (sub.label, sub.checked, sub.bound, sub.transposed) == ("my scores", True, 5.0, False)
    assert np.array_equal(_dense(m.take(rows)), M[rows]) and np.array_equal(_dense(m.take(cols=cols)), M[:, cols])
    t = m.T.take([0, 5], [2, 3, 7])                 # rows / columns of the matrix as read (7 x 9)
    assert t.shape == (2, 3) and np.array_equal(_dense(t), M.T[[0, 5]][:, [2, 3, 7]].astype(np.float64))
    assert t.transposed and t.label == "my scores"
    twice = m.take(rows=[0, 2, 3, 5, 8]).take(rows=[1, 4], cols=[6])
    assert np.array_equal(_dense(twice), M[[2, 8]][:, [6]].astype(np.float64))
    assert np.array_equal(_dense(m.T.T.take([3])), M[[3]].astype(np.float64))
    assert _dense(m, torch.float32).dtype == np.float32


def test_a_non_finite_score_is_located_in_the_matrix_not_the_block():
    M = np.ones((6, 5))
    M[4, 3] = np.nan
    m = ScoreMatrix(M, "the file x.npy")
    with pytest.raises(ValueError) as e:
        m.block(3, 6, 2, 5, torch.float64)
    assert str(e.value) == ("the file x.npy holds a non-finite score (NaN or inf) at row 4, column 3: a score matrix "
                            "must be finite; recompute it, or drop that row")
    assert ScoreMatrix(M, "checked", checked=True).block(3, 6, 2, 5, torch.float64).isnan().sum() == 1


# ----------------------------------------------------------------------------------------------- tasks
def _task(n_q=40, n_t=30, block_bytes=None, **kw):
    rng = _rng(1)
    S = rng.standard_normal((n_q, n_t))
    S[:, 3] += 1.5          # a hub
    labels = rng.integers(0, n_t, n_q)
    return S, labels, ScoreTask({("queries", "targets"): S}, hn.Positives.from_labels(labels, n_t),
                                block_bytes=block_bytes, **kw)


@pytest.mark.parametrize("block_bytes", [None, 8 * 30 * 3])     # one block, or blocks of 3 rows
@pytest.mark.parametrize("k", [1, 5])
def test_the_hubness_of_a_task_is_the_k_occurrence_of_its_whole_matrix(block_bytes, k):
    S, _, task = _task(block_bytes=block_bytes)
    n_k = np.zeros(S.shape[1])
    for row in S:
        n_k[np.argsort(-row, kind="stable")[:k]] += 1
    assert np.array_equal(task.k_occurrence(k=k), n_k)
    h = task.hubness(k=k)
    assert h["skewness"] == pytest.approx(stats.skew(n_k), abs=1e-12)
    assert h == hn.hubness_stats(n_k, k, S.shape[0])
    # of the normalised scores: a normalizer fitted on the task (query-aware IS)
    norm = hn.make_normalizer("is", tau=0.1)
    task.fit(norm, query_aware=True)
    Z = task.score(norm).numpy()
    n_z = np.zeros(S.shape[1])
    for row in Z:
        n_z[np.argsort(-row, kind="stable")[:k]] += 1
    assert np.array_equal(task.k_occurrence(norm, k=k), n_z) and not np.array_equal(n_z, n_k)


def test_what_a_task_holds_and_the_guards_of_a_task():
    S, labels, task = _task()
    bank = _rng(2).standard_normal((12, 30))
    full = ScoreTask({("queries", "targets"): S, ("query_bank", "targets"): bank},
                     hn.Positives.from_labels(labels, 30))
    assert [full.has(n) for n in ("queries", "targets", "query_bank", "target_bank")] == [True, True, True, False]
    assert [task.has(n) for n in ("queries", "targets", "query_bank", "target_bank")] == [True, True, False, False]
    assert (full.n_queries, full.n_targets, full.size("query_bank"), full.size("target_bank")) == (40, 30, 12, None)
    assert _error(ValueError, task.has, "bank") == ("a task holds the inputs queries, targets, query_bank, "
                                                     "target_bank; got 'bank'")
    assert _error(ValueError, ScoreTask, {("query_bank", "targets"): bank}, hn.Positives.from_labels(labels, 30)) == (
        "a score task needs the test score matrix (queries x targets): pass matrices={('queries', 'targets'): "
        "S_test, ...}")
    assert _error(TypeError, ScoreTask, {("queries", "targets"): S}, labels) == (
        "positives must be a hubnorm.Positives (Positives.from_labels / from_groups)")
    assert _error(ValueError, ScoreTask, {("queries", "targets"): S}, hn.Positives.from_labels(labels, 31)) == (
        "positives are 40 queries x 31 targets but the queries x targets score matrix is 40 x 30: pass the positives "
        "of this matrix's rows and columns")
    assert _error(ValueError, ScoreTask, {("queries", "targets"): S},
                  hn.Positives.from_labels(labels[:39], 30)).startswith("positives are 39 queries x 30 targets but")
    with pytest.raises(ValueError, match=r"direction must be one of t2i, i2t, .*got 'x2y'"):
        ScoreTask({("queries", "targets"): S}, hn.Positives.from_labels(labels, 30), direction="x2y")


def test_a_task_passes_its_reading_options_to_its_engine():
    S, labels, _ = _task()
    t = ScoreTask({("queries", "targets"): S.astype(np.float32)}, hn.Positives.from_labels(labels, 30),
                  dtype=torch.float32, block_bytes=4096, plain=True, resident_bytes=0, direction="t2a",
                  meta={"dataset": "d"})
    e = t.engine
    assert (e.dtype, e.block_bytes, e.plain, e.resident_bytes) == (torch.float32, 4096, True, 0)
    assert t.direction == "t2a" and t.meta == {"dataset": "d"}
    blocks = list(t.blocks(chunk_size=7))
    assert [q0 for q0, _ in blocks] == [0, 7, 14, 21, 28, 35] and blocks[0][1].dtype == torch.float32
    assert t.score().shape == (40, 30) and t.score().dtype == torch.float32


def test_ranks_and_evaluate_of_a_task_are_those_of_the_dense_matrix():
    S, labels, task = _task(block_bytes=8 * 30 * 4)
    want = np.array([(S[i] > S[i, labels[i]]).sum() for i in range(len(S))])
    assert np.array_equal(task.ranks(), want)
    r = task.evaluate(None, ks=(1, 5))
    assert r["R@1"] == pytest.approx(100 * np.mean(want < 1)) and r["R@5"] == pytest.approx(100 * np.mean(want < 5))
    norm = hn.make_normalizer("is", tau=0.05)
    task.fit(norm, query_aware=True)
    fitted = task.evaluate(norm, fit=False)
    assert fitted == task.evaluate(hn.make_normalizer("is", tau=0.05), query_aware=True)
    assert fitted != task.evaluate(None)


def test_hubnorm_evaluate_takes_a_score_task_as_task_evaluate_does():
    """One evaluate: ``hn.evaluate(normalizer, score_task)`` is what ``ScoreTask.evaluate(..., fit=False)`` returns
    (it calls it), raw scores with ``None``, bootstrap intervals and ranks of the dense matrix, chunked or not; a task
    of another type is refused by name."""
    S, labels, task = _task(block_bytes=8 * 30 * 4)
    want = np.array([(S[i] > S[i, labels[i]]).sum() for i in range(len(S))])
    raw, ranks = hn.evaluate(None, task, ks=(1, 5), return_ranks=True, chunk_size=7)
    assert np.array_equal(ranks, want) and raw == task.evaluate(None, ks=(1, 5)) and raw["bank"] == "none"
    norm = hn.make_normalizer("is", tau=0.05)
    task.fit(norm, query_aware=True)
    assert hn.evaluate(norm, task) == task.evaluate(norm, fit=False)
    boot = hn.evaluate(norm, task, ks=(1,), n_boot=50, seed=3)
    assert boot["R@1 lo"] <= boot["R@1"] <= boot["R@1 hi"] and boot == hn.evaluate(norm, task, ks=(1,), n_boot=50,
                                                                                    seed=3)
    assert _error(TypeError, hn.evaluate, norm, {"queries": S}) == (
        "task must be a hubnorm.RetrievalTask (embeddings) or a hubnorm.ScoreTask (score matrices); got dict")


# ----------------------------------------------------------------------------------------------- the engine's guards
def test_the_engine_refuses_keys_sizes_and_dtypes_it_cannot_read():
    S = np.zeros((4, 3))
    with pytest.raises(ValueError) as e:
        ScoreEngine({("queries", "queries"): S})
    assert str(e.value) == ("score matrix key ('queries', 'queries') must be a pair of two different inputs among "
                            "['queries', 'query_bank', 'target_bank', 'targets']")
    with pytest.raises(ValueError) as e:
        ScoreEngine({("queries", "targets"): S, ("query_bank", "targets"): np.zeros((2, 5))})
    assert str(e.value) == ("the query_bank x targets score matrix has 5 gallery (targets) items but the queries x "
                            "targets score matrix has 3: the matrices of one task must share their rows and columns "
                            "(same order)")
    with pytest.raises(TypeError) as e:
        ScoreEngine({("queries", "targets"): S}, dtype=torch.float16)
    assert str(e.value) == "dtype must be torch.float32 or torch.float64; got torch.float16"
    eng = ScoreEngine({("queries", "targets"): S, ("query_bank", "targets"): None},
                      hints={("targets", "target_bank"): "add bank_cols_x_test_cols"})
    assert not eng.has("query_bank") and eng.size("queries") == 4
    with pytest.raises(ValueError) as e:
        eng.matrix("target_bank", "targets")
    assert str(e.value) == ("this score task has no target bank x gallery (targets) score matrix (target_bank x "
                            "targets): add bank_cols_x_test_cols")
    with pytest.raises(ValueError) as e:
        eng.tensor("targets")
    assert str(e.value) == ("this step needs the embeddings of targets, but a score task holds only score matrices: "
                            "run it from embeddings (local:, cache: or synthetic: sources)")
    assert eng.matrix("targets", "queries").shape == (3, 4)


# ----------------------------------------------------------------------------------------------- banks and positives
def test_a_bank_subset_is_seeded_sorted_and_never_empty():
    a = sample_index(100, 10, seed=3)
    assert np.array_equal(a, np.sort(np.random.default_rng(3).choice(100, size=10, replace=False)))
    assert np.array_equal(a, np.sort(a)) and len(set(a)) == 10
    assert sample_index(100, None, 3) is None and sample_index(100, 100, 3) is None and sample_index(100, 250, 3) is None
    assert len(sample_index(100, 99, 3)) == 99 and len(sample_index(5, 1, 0)) == 1
    with pytest.raises(ValueError) as e:
        sample_index(100, 0, 3)
    assert str(e.value) == "a bank subset needs at least one item; got 0"


def test_the_bank_subsets_of_both_directions_use_four_seeds():
    got = bank_subsets(50, 40, 10, 5, seed=7)
    want = {"forward": (sample_index(50, 10, 7), sample_index(40, 5, 10)),
            "backward": (sample_index(50, 5, 9), sample_index(40, 10, 8))}
    for side in want:
        for g, w in zip(got[side], want[side]):
            assert np.array_equal(g, w)
    none = bank_subsets(None, 40, 10, None, seed=0)
    assert none["forward"][0] is None and none["backward"][1] is not None and none["forward"][1] is None


def test_positives_from_pairs_group_each_querys_targets_in_order():
    pos = positives_from_pairs([2, 0, 2, 1, 0, 3], [5, 4, 3, 0, 1, 2], 4, 6)   # unsorted pairs
    assert pos.n_queries == 4 and pos.n_targets == 6
    assert pos.indptr.tolist() == [0, 2, 3, 5, 6] and pos.indices.tolist() == [1, 4, 0, 3, 5, 2]


# ----------------------------------------------------------------------------------------------- sims folders
def test_the_tasks_of_a_sims_folder_carry_its_labels_files_and_reading_options(tmp_path):
    from hubnorm.data.sims import load_sims
    from hubnorm.scores import sims_tasks
    from test_sims import write_example

    write_example(tmp_path)
    sims = load_sims(tmp_path)
    tasks = sims_tasks(sims, block_bytes=4096, dtype=torch.float32)
    for d, t in tasks.items():
        assert t.direction == d and t.block_bytes == 4096 and t.dtype == torch.float32
        assert t.meta == {"dataset": "example", "model": None, "modalities": ("text", "video"), "source": "synthetic",
                          "folder": str(tmp_path), "flags": [], "direction": d}
        test = t.engine.matrices[("queries", "targets")]
        assert test.label == str(sims.files["test"]) and test.checked and test.bound == sims.bounds["test"]
    unscanned = sims_tasks(load_sims(tmp_path, scan=False))
    m = unscanned["t2v"].engine.matrices[("queries", "targets")]
    assert not m.checked and m.bound is None
    with pytest.raises(ValueError) as e:
        sims_tasks(sims, directions=("t2v", "t2a"))
    assert str(e.value) == (f"{tmp_path} holds the directions t2v and v2t (modalities ['text', 'video']); "
                            "got ['t2a']")
    assert list(sims_tasks(f"sims:{tmp_path}", directions=("v2t",))) == ["v2t"]


def test_a_target_bank_subset_alone_is_applied(tmp_path):
    from hubnorm.data.sims import load_sims
    from hubnorm.scores import sims_tasks
    from test_sims import write_example

    write_example(tmp_path)
    sims = load_sims(tmp_path)
    full = sims_tasks(sims)["t2v"]
    only = sims_tasks(sims, target_bank=3, seed=5)["t2v"]
    n_cols_bank = full.size("target_bank")
    keep = bank_subsets(full.size("query_bank"), n_cols_bank, None, 3, 5)["forward"][1]
    assert only.size("target_bank") == 3 and only.size("query_bank") == full.size("query_bank")
    want = _dense(full.engine.matrix("target_bank", "targets"))[keep]
    assert np.array_equal(_dense(only.engine.matrix("target_bank", "targets")), want)


# ----------------------------------------------------------------------------------------------- from embeddings
def test_product_scores_read_any_array_and_name_what_is_wrong():
    from hubnorm.scores import ProductScores, score_matrices

    rng = _rng(4)
    q, t = rng.standard_normal((5, 3)), rng.standard_normal((4, 3))
    p = ProductScores(torch.from_numpy(q).float(), t.astype(np.float32), "mine")   # a tensor and float32
    same = ProductScores(q, t, "mine")
    assert np.shares_memory(same.a, q) and np.shares_memory(same.b, t)            # float64 rows are not copied
    assert p.a.dtype == np.float64 and np.allclose(_dense(p), q.astype(np.float32).astype(np.float64) @ t.T, atol=1e-6)
    assert _error(ValueError, ProductScores, q[0], t, "mine") == ("mine: embeddings must be 2-D (items x dimensions); "
                                                                  "got shape (3,)")
    assert _error(ValueError, ProductScores, q, t[:, :2], "mine") == ("mine: rows and columns have different "
                                                                      "dimensions (3 vs 2)")
    assert _error(ValueError, ProductScores, q[:0], t, "mine") == "mine is empty (shape (0, 4))"
    assert _error(ValueError, ProductScores, q, t[:0], "mine") == "mine is empty (shape (5, 0))"
    mats = score_matrices(q, t, query_bank=q[:2], target_bank=t[:3])
    assert {k: m.label for k, m in mats.items()} == {
        ("queries", "targets"): "the test score matrix (queries x targets)",
        ("query_bank", "targets"): "the query bank x targets score matrix",
        ("query_bank", "target_bank"): "the query bank x target bank score matrix",
        ("target_bank", "targets"): "the target bank x targets score matrix"}


def test_a_query_aware_fit_keeps_the_tasks_reading_options_and_hints():
    from hubnorm.scores import fit_scores

    S, labels, _ = _task()
    bank = _rng(5).standard_normal((12, 30))
    eng = ScoreEngine({("queries", "targets"): S, ("query_bank", "targets"): bank}, block_bytes=4096, plain=True,
                      resident_bytes=0, hints={("query_bank", "target_bank"): "add bank_rows_x_bank_cols"})
    norm = fit_scores(hn.make_normalizer("is", tau=0.05), eng, query_aware=True)
    used = norm.score_engine_
    assert (used.block_bytes, used.plain, used.resident_bytes) == (4096, True, 0)
    assert used.size("query_bank") == 40                      # the test queries, not the bank of 12
    dense = S / 0.05
    want = -(np.log(np.exp(dense - dense.max(0)).mean(0)) + dense.max(0)) * 0.05   # -tau log mean_q exp(s / tau)
    assert np.allclose(norm.offsets, want)
    with pytest.raises(ValueError) as e:
        fit_scores(hn.make_normalizer("dbsn", tau=0.05), eng, query_aware=True)
    assert "which is missing" in str(e.value) and str(e.value).endswith(": add bank_rows_x_bank_cols")
