"""The pieces of hubnorm.scores a user meets one by one, against values computed by hand or densely here: a stored
matrix's sub-matrices (transposed, chained), the hubness of a score task over many blocks, what a task holds, the
seeded bank subsets, positives from index pairs, and the guards by their whole messages; then what mutation testing
found unchecked: default labels and arguments, the engine's block shapes and reading paths (plain, and the fast path's
one read of a matrix of either order) seen through a probe reduction, and the one read's finiteness check.

Survivors judged equivalent (no test can tell them apart):
- ``ScoreMatrix.block``: ``order="C"`` -> ``order="c"`` (NumPy accepts either case).
- ``LocalEngine._load`` (stored matrices): ``itemsize <= 4`` -> ``<= 5`` (float itemsizes are 2, 4 and 8);
  ``checked=True`` -> ``False``
  for the strip reader ``src`` (only its ``_stored`` is called, which checks nothing); ``check_finite_block(blk,
  m.label, a0, 0)`` with the ``0`` dropped (the default ``c0``).
- ``LocalEngine._resident_block``: default ``copy=True`` -> ``False`` (every caller passes ``copy``); ``lo < hi`` ->
  ``lo <= hi`` (an empty piece joins the concatenation: the same values).
- ``LocalEngine._reduce_stored``: ``getattr(red, "read_only", False)`` -> default ``None`` (every Reduction has
  ``read_only``).
- ``LocalEngine.cannot_read`` (was ``fit_scores``): ``engine.has_matrix(rows, col)`` -> ``has_matrix(rows, None)``
  (``engine.matrix(rows, col)`` is then asked, and returns the matrix or raises the same error).
- ``RetrievalTask.blocks`` (was ``normalized_blocks``): ``normalize_scores(s, None)`` -> ``normalize_scores(s)``
  (None is the default).
- ``sample_index``: ``replace=False`` -> ``replace=None`` (falsy as well).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

import hubnorm as hn
from hubnorm.engine import LocalEngine
from hubnorm.matrices import ScoreMatrix
from hubnorm.retrieval import RetrievalTask
from hubnorm.scores import bank_subsets, positives_from_pairs, sample_index


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
    kw.setdefault("direction", "t2v")     # a video label (the tests of score matrices)
    return S, labels, RetrievalTask(scores={("queries", "targets"): S}, positives=hn.Positives.from_labels(labels, n_t),
                                    block_bytes=block_bytes, **kw, check=False)


@pytest.mark.parametrize("block_bytes", [None, 8 * 30 * 3])     # one block, or blocks of 3 rows
@pytest.mark.parametrize("k", [1, 5])
def test_the_hubness_of_a_task_is_the_k_occurrence_of_its_whole_matrix(block_bytes, k):
    S, _, task = _task(block_bytes=block_bytes)
    n_k = np.zeros(S.shape[1])
    for row in S:
        n_k[np.argsort(-row, kind="stable")[:k]] += 1
    assert np.array_equal(hn.k_occurrence(task.blocks(), k), n_k)
    h = hn.hubness(task.blocks(), k)
    assert h["skewness"] == pytest.approx(stats.skew(n_k), abs=1e-12)
    assert h == hn.hubness_stats(n_k, k, S.shape[0])
    # of the normalised scores: a normalizer fitted on the task (query-aware IS)
    norm = hn.make_normalizer("is", tau=0.1)
    task.fit(norm, query_aware=True)
    Z = task.score(norm).numpy()
    n_z = np.zeros(S.shape[1])
    for row in Z:
        n_z[np.argsort(-row, kind="stable")[:k]] += 1
    assert np.array_equal(hn.k_occurrence(task.blocks(norm), k), n_z) and not np.array_equal(n_z, n_k)


def test_what_a_task_holds_and_the_guards_of_a_task():
    S, labels, task = _task()
    bank = _rng(2).standard_normal((12, 30))
    full = RetrievalTask(scores={("queries", "targets"): S, ("query_bank", "targets"): bank},
                         positives=hn.Positives.from_labels(labels, 30), direction="t2v", check=False)
    assert [full.has(n) for n in ("queries", "targets", "query_bank", "target_bank")] == [True, True, True, False]
    assert [task.has(n) for n in ("queries", "targets", "query_bank", "target_bank")] == [True, True, False, False]
    assert (full.n_queries, full.n_targets, full.size("query_bank"), full.size("target_bank")) == (40, 30, 12, None)
    assert _error(ValueError, task.has, "bank") == ("a task holds the inputs queries, targets, query_bank, "
                                                     "target_bank; got 'bank'")
    assert _error(ValueError, RetrievalTask, scores={("query_bank", "targets"): bank},
                  positives=hn.Positives.from_labels(labels, 30), direction="t2v") == (
        "a task given as scores needs the test score matrix (queries x targets), or the queries and targets as "
        "embeddings: pass scores={('queries', 'targets'): S_test, ...}")
    assert _error(TypeError, RetrievalTask, scores={("queries", "targets"): S}, positives=labels, direction="t2v") == (
        "positives must be a hubnorm.Positives (use Positives.from_labels / from_groups / "
        "hubnorm.positives_from_pairs); got ndarray")
    assert _error(ValueError, RetrievalTask, scores={("queries", "targets"): S},
                  positives=hn.Positives.from_labels(labels, 31), direction="t2v") == (
        "positives are 40 queries x 31 targets but the queries x targets score matrix is 40 queries x 30 targets: "
        "pass the positives of these queries and targets")
    assert _error(ValueError, RetrievalTask, scores={("queries", "targets"): S},
                  positives=hn.Positives.from_labels(labels[:39], 30), direction="t2v").startswith(
        "positives are 39 queries x 30 targets but")
    with pytest.raises(ValueError, match=r"direction must be one of t2i, i2t, .*got 'x2y'"):
        RetrievalTask(scores={("queries", "targets"): S}, positives=hn.Positives.from_labels(labels, 30),
                      direction="x2y", check=False)


def test_a_task_passes_its_reading_options_to_its_engine():
    S, labels, _ = _task()
    t = RetrievalTask(scores={("queries", "targets"): S.astype(np.float32)},
                      positives=hn.Positives.from_labels(labels, 30), dtype=torch.float32, block_bytes=4096,
                      plain=True, resident_bytes=0, direction="t2a", meta={"dataset": "d"}, check=False)
    e = t.engine
    assert (e.dtype, e.block_bytes, e.plain, e.resident_bytes) == (torch.float32, 4096, True, 0)
    assert t.direction == "t2a" and t.meta == {"dataset": "d"}
    blocks = list(t.blocks(chunk_size=7))
    assert [q0 for q0, _ in blocks] == [0, 7, 14, 21, 28, 35] and blocks[0][1].dtype == torch.float32
    assert t.score().shape == (40, 30) and t.score().dtype == torch.float32


def test_ranks_and_evaluate_of_a_task_are_those_of_the_dense_matrix():
    S, labels, task = _task(block_bytes=8 * 30 * 4)
    want = np.array([(S[i] > S[i, labels[i]]).sum() for i in range(len(S))])
    assert np.array_equal(hn.positive_ranks(task.blocks(), task.positives), want)
    r = hn.evaluate(None, task, ks=(1, 5))
    assert r["R@1"] == pytest.approx(100 * np.mean(want < 1)) and r["R@5"] == pytest.approx(100 * np.mean(want < 5))
    norm = hn.make_normalizer("is", tau=0.05)
    task.fit(norm, query_aware=True)
    fitted = hn.evaluate(norm, task)
    assert fitted == hn.evaluate(task.fit(hn.make_normalizer("is", tau=0.05), query_aware=True), task)
    assert fitted != hn.evaluate(None, task)


def test_hubnorm_evaluate_takes_a_task_of_score_matrices():
    """One evaluate: ``hn.evaluate(normalizer, task)`` of a task given as score matrices: raw scores with ``None``,
    the ranks of the dense (normalised) matrix, chunked or not, bootstrap intervals; a task of another type is refused
    by name."""
    S, labels, task = _task(block_bytes=8 * 30 * 4)
    want = np.array([(S[i] > S[i, labels[i]]).sum() for i in range(len(S))])
    raw, ranks = hn.evaluate(None, task, ks=(1, 5), return_ranks=True, chunk_size=7)
    assert np.array_equal(ranks, want) and raw == hn.evaluate(None, task, ks=(1, 5)) and raw["bank"] == "none"
    norm = hn.make_normalizer("is", tau=0.05)
    task.fit(norm, query_aware=True)
    fitted, ranks = hn.evaluate(norm, task, return_ranks=True)
    assert fitted == hn.evaluate(norm, task, chunk_size=7)
    assert np.array_equal(ranks, hn.positive_ranks(task.score(norm), task.positives))
    boot = hn.evaluate(norm, task, ks=(1,), n_boot=50, seed=3)
    assert boot["R@1 lo"] <= boot["R@1"] <= boot["R@1 hi"] and boot == hn.evaluate(norm, task, ks=(1,), n_boot=50,
                                                                                    seed=3)
    assert _error(TypeError, hn.evaluate, norm, {"queries": S}) == (
        "task must be a hubnorm.RetrievalTask (embeddings or score matrices); got dict")


# ----------------------------------------------------------------------------------------------- the engine's guards
def test_the_engine_refuses_keys_sizes_and_dtypes_it_cannot_read():
    S = np.zeros((4, 3))
    with pytest.raises(ValueError) as e:
        LocalEngine(matrices={("queries", "queries"): S})
    assert str(e.value) == ("score matrix key ('queries', 'queries') must be a pair of two different inputs among "
                            "['queries', 'query_bank', 'target_bank', 'targets']")
    with pytest.raises(ValueError) as e:
        LocalEngine(matrices={("queries", "targets"): S, ("query_bank", "targets"): np.zeros((2, 5))})
    assert str(e.value) == ("the query_bank x targets score matrix has 5 gallery (targets) items but the queries x "
                            "targets score matrix has 3: the matrices of one task must share their rows and columns "
                            "(same order)")
    with pytest.raises(TypeError) as e:
        LocalEngine(matrices={("queries", "targets"): S}, dtype=torch.float16)
    assert str(e.value) == "dtype must be torch.float32 or torch.float64; got torch.float16"
    eng = LocalEngine(matrices={("queries", "targets"): S, ("query_bank", "targets"): None},
                      hints={("targets", "target_bank"): "add bank_cols_x_test_cols"})
    assert not eng.has("query_bank") and eng.size("queries") == 4
    with pytest.raises(ValueError) as e:
        eng.matrix("target_bank", "targets")
    assert str(e.value) == ("this score task has no target bank x gallery (targets) score matrix (target_bank x "
                            "targets): add bank_cols_x_test_cols")
    with pytest.raises(ValueError) as e:
        eng.tensor("targets")
    assert str(e.value) == ("this step needs the embeddings of targets, but a score task holds only score matrices: "
                            "run it from embeddings (local:, cache: or synthetic: sources, or a sims: folder whose "
                            "manifest lists them under 'embeddings')")
    assert eng.matrix("targets", "queries").shape == (3, 4)


# ----------------------------------------------------------------------------------------------- banks and positives
def test_a_bank_subset_is_seeded_sorted_and_never_empty():
    a = sample_index(100, 10, seed=3)
    assert np.array_equal(a, np.sort(np.random.default_rng(3).choice(100, size=10, replace=False)))
    assert np.array_equal(a, np.sort(a)) and len(set(a)) == 10
    assert sample_index(100, None, 3) is None and sample_index(100, 100, 3) is None
    assert sample_index(100, 250, 3) is None
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


@pytest.mark.parametrize("args, error, message", [
    (([0.9, 1.9], [0, 1], 2, 2), TypeError, r"^query_idx must hold integers; got dtype float64$"),
    (([0, 1], [0.0, 1.0], 2, 2), TypeError, r"^target_idx must hold integers; got dtype float64$"),
    (([0, 1, 2], [0, 1], 3, 2), ValueError, r"^query_idx and target_idx are the two halves of the \(query, target\) "
                                            r"pairs and must have one length; got 3 and 2$"),
    (([0, 1, 2], [0, 1, 2], 2, 3), ValueError, r"^query_idx holds 2, out of range for n_queries=2: indices run from 0 "
                                               r"to n_queries - 1$"),
    (([0, 1, 2], [0, 1, 5], 3, 3), ValueError, r"^target_idx holds 5, out of range for n_targets=3"),
    (([0, -1], [0, 1], 2, 2), ValueError, r"^query_idx must be >= 0; got -1$"),
    (([], [], 2, 2), ValueError, r"^query_idx must be a non-empty 1-D array of integer indices; got shape \(0,\)$"),
    (([0, 1], [0, 1], 0, 2), ValueError, r"n_queries"),
    (([0, 1], [0, 1], 2, 2.5), TypeError, r"n_targets"),
])
def test_positives_from_pairs_refuses_what_would_be_truncated_or_misread(args, error, message):
    with pytest.raises(error, match=message):
        positives_from_pairs(*args)


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
    from hubnorm.matrices import ProductScores
    from hubnorm.scores import score_matrices

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
    S, labels, _ = _task()
    bank = _rng(5).standard_normal((12, 30))
    task = RetrievalTask(scores={("queries", "targets"): S, ("query_bank", "targets"): bank},
                         positives=hn.Positives.from_labels(labels, 30), direction="t2v", block_bytes=4096,
                         plain=True, resident_bytes=0,
                         hints={("query_bank", "target_bank"): "add bank_rows_x_bank_cols"}, check=False)
    norm = task.fit(hn.make_normalizer("is", tau=0.05), query_aware=True)
    used = norm.score_engine_
    assert (used.block_bytes, used.plain, used.resident_bytes) == (4096, True, 0)
    assert used.size("query_bank") == 40                      # the test queries, not the bank of 12
    dense = S / 0.05
    want = -(np.log(np.exp(dense - dense.max(0)).mean(0)) + dense.max(0)) * 0.05   # -tau log mean_q exp(s / tau)
    assert np.allclose(norm.offsets, want)
    with pytest.raises(ValueError) as e:
        task.fit(hn.make_normalizer("dbsn", tau=0.05), query_aware=True)
    assert "which is missing" in str(e.value) and str(e.value).endswith(": add bank_rows_x_bank_cols")


# ----------------------------------------------------------------------------------------------- what mutation found
# (the survivors of `scripts/mutation.py scores --sample 3`: default labels, the engine's block shapes and reading
# paths seen through a probe reduction, the fast path's one read, and the guards by their whole messages)
from hubnorm.blocks import Embeddings, Reduction, Scores, TopKResult   # noqa: E402
from hubnorm.matrices import check_finite_block   # noqa: E402
from hubnorm.matrices import ProductScores   # noqa: E402


class _Probe(Reduction):
    """Sums of the scores along ``axis`` (float64), recording every block an engine hands it: where it lies, its
    shape and dtype, its side-vector slices and budget, and the block itself. ``zero``: the partial then zeroes its
    block in place (as a partial that modifies its block may); ``whole``: what ``reduce_scores`` returns (else
    NotImplemented, the engine's own loop)."""

    def __init__(self, source, axis=0, *, dtype=None, row_terms=None, col_terms=None, whole_rows=False,
                 read_only=False, zero=False, whole=NotImplemented):
        self.source, self.axis, self.dtype = source, axis, dtype
        self.row_terms, self.col_terms, self.whole_rows, self.read_only = row_terms, col_terms, whole_rows, read_only
        self.zero, self.whole, self.seen = zero, whole, []

    def partial(self, s, chunk):
        self.seen.append({"at": (chunk.row_start, chunk.col_start), "shape": tuple(s.shape), "dtype": s.dtype,
                          "row_terms": chunk.row_terms, "col_terms": chunk.col_terms, "bytes": chunk.block_bytes,
                          "block": s})
        out = s.to(torch.float64).sum(dim=self.axis)
        if self.zero:
            s.mul_(0)
        return out

    def merge(self, a, b):
        return a + b

    def finalize(self, p, n):
        return p, n

    def reduce_scores(self, s, n, block_bytes=None, visit=None):
        if visit is not None:     # a kernel that does not check: the engine checks first, then asks again
            return NotImplemented
        return self.whole if self.whole is NotImplemented else (self.whole, n, tuple(s.shape), block_bytes)


def _S(n_q=7, n_t=5, seed=6, dtype=np.float64, order="C"):
    return np.array(_rng(seed).standard_normal((n_q, n_t)), dtype=dtype, order=order)


def test_default_labels_and_whole_messages_of_a_stored_matrix():
    assert _error(ValueError, ScoreMatrix, np.zeros((0, 3))) == "score matrix is empty (shape (0, 3))"
    assert _error(ValueError, ScoreMatrix, np.zeros((2, 0)), "f.npy") == "f.npy is empty (shape (2, 0))"
    assert _error(TypeError, ScoreMatrix, [[1.0]]) == ("score matrix must be a numpy array, a memory map or a torch "
                                                        "tensor; got list")
    assert _error(ValueError, ScoreMatrix, np.zeros(3), "v") == "v must be 2-D (rows x columns); got shape (3,)"
    assert _error(TypeError, ScoreMatrix, np.zeros((2, 2), dtype=int), "i") == ("i must hold floating-point scores; "
                                                                                 "got dtype int64")
    assert _error(ValueError, ScoreMatrix, ScoreMatrix(np.ones((2, 2))), index=([0], None)) == (
        "pass index= to ScoreMatrix.take, not to a copy of a ScoreMatrix")
    t = ScoreMatrix(torch.ones(2, 3, requires_grad=True))
    assert isinstance(t.data, np.ndarray) and t.label == "score matrix" and t.shape == (2, 3)
    assert ScoreMatrix(np.ones((2, 2), dtype=np.float16)).dtype == torch.float32
    assert _dense(ScoreMatrix(_S()).T).flags.c_contiguous


def test_a_non_finite_cell_is_named_from_the_block_origin_by_default():
    s = torch.zeros(3, 4, dtype=torch.float64)
    s[1, 2] = float("inf")
    assert _error(ValueError, check_finite_block, s, "lbl") == (
        "lbl holds a non-finite score (NaN or inf) at row 1, column 2: a score matrix must be finite; recompute it, "
        "or drop that row")
    assert "at row 11, column 22" in _error(ValueError, check_finite_block, s, "lbl", 10, 20)
    check_finite_block(torch.zeros(2, 2), "fine")           # finite: nothing raised


def test_product_scores_defaults_tensors_with_gradients_and_float32_blocks():
    rng = _rng(7)
    q, t = rng.standard_normal((4, 3)), rng.standard_normal((5, 3))
    assert _error(ValueError, ProductScores, q[:0], t) == "score matrix is empty (shape (0, 5))"
    p = ProductScores(torch.from_numpy(q).requires_grad_(True), t)      # detached, not np.asarray'd
    assert p.label == "score matrix" and p.shape == (4, 5) and p.dtype == torch.float64 and p.rows_contiguous
    blk = p.block(1, 3, 0, 5, torch.float32)
    assert blk.dtype == torch.float32 and np.allclose(blk.numpy(), (q @ t.T)[1:3], atol=1e-6)
    assert np.array_equal(_dense(p.T), t @ q.T)
    assert np.array_equal(_dense(p.take([3, 0], [4])), (q @ t.T)[[3, 0]][:, [4]])
    named = ProductScores(q, t, "the bank x gallery scores")
    assert named.take([1]).label == named.take(None, [2]).label == named.T.label == "the bank x gallery scores"


def test_the_engine_defaults_and_what_it_answers_for_a_score_task():
    S = _S()
    T = _rng(8).standard_normal((3, 5))
    eng = LocalEngine(matrices={("query_bank", "targets"): None, ("queries", "targets"): S, ("target_bank",
                      "targets"): T})
    assert eng.plain is False and eng.resident_bytes == 2 * 2**30 and eng.block_bytes is None
    assert sorted(eng.matrices) == [("queries", "targets"), ("target_bank", "targets")]   # None skipped, not the end
    assert eng.size("target_bank") == 3 and eng.size("query_bank") is None
    assert eng.has_matrix("targets", "queries") and eng.has_matrix("queries", "targets")
    assert not eng.has_matrix("query_bank", "targets")
    assert _error(ValueError, eng.matrix, "query_bank", "targets") == (
        "this score task has no query bank x gallery (targets) score matrix (query_bank x targets)")
    assert eng.spans("queries") is True and eng.shared("k", 10) is None and eng.to_tensor(S) is S
    for f in (eng.max_norm, lambda names: eng.take_rows(names, torch.zeros(1, dtype=torch.long)), eng.tensor):
        assert _error(ValueError, f, ["queries", "targets"]).startswith("this step needs the embeddings of queries ; "
                                                                         "targets, but a score task")
    for key in (frozenset({"queries", "targets"}), ("queries", "targets", "query_bank"), ("queries", "bank")):
        assert _error(ValueError, lambda m: LocalEngine(matrices=m), {key: S}).startswith(
            f"score matrix key {key!r} must be a pair")
    assert eng._stored("targets", "queries") is eng.matrices[("queries", "targets")]   # as stored, either way round
    assert eng._stored("queries", "targets") is eng.matrices[("queries", "targets")]
    assert "no query bank x gallery" in _error(ValueError, eng._stored, "query_bank", "targets")


def test_the_block_shape_rules_at_hand_computed_sizes():
    eng = LocalEngine(matrices={("queries", "targets"): _S()}, block_bytes=59996)
    assert eng._block_shape(100, 10, 8, True, True) == (749, 10)            # whole rows: 59996 // 80
    assert eng._block_shape(100, 10, 8, True, False) == (749, 10)
    assert eng._block_shape(5000, 10, 4, False, True) == (1499, 10)         # strips of rows: 59996 // 40
    assert eng._block_shape(5000, 3, 4, False, False) == (5000, 2)          # strips of columns: 59996 // 20000
    # one line over the budget: 2-D tiles (59996 // 4 = 14999 cells: 3 columns, 14999 // 3 rows)
    assert eng._block_shape(5000, 20000, 4, False, True) == (4999, 3)
    assert eng._block_shape(20000, 3, 4, False, False) == (4999, 3)
    assert LocalEngine(matrices={("queries", "targets"): _S()})._block_shape(10, 10, 8, False, True) == (2**27 // 80,
                       10)


def test_the_tiles_of_a_matrix_follow_the_dtype_and_its_contiguous_axis():
    eng = LocalEngine(matrices={("queries", "targets"): _S()}, block_bytes=40)
    assert eng._tiles(10, 5, False, torch.float32) == [((r, r + 2), (0, 5)) for r in range(0, 10, 2)]
    assert eng._tiles(10, 5, False) == [((r, r + 1), (0, 5)) for r in range(10)]     # the engine's float64
    assert eng._tiles(10, 5, False, torch.float32, False) == [((0, 10), (c, c + 1)) for c in range(5)]


def test_a_plain_engine_hands_every_block_to_a_reduction_with_its_place_terms_and_budget():
    S = _S()
    rt, ct = np.arange(7.0), np.arange(5.0) * 10
    eng = LocalEngine(matrices={("queries", "targets"): S}, plain=True, block_bytes=8 * 5 * 2)   # 2 rows a block
    red = _Probe(Scores("queries", "targets"), 0, row_terms=rt, col_terms=ct)
    (total, n) = eng.reduce(red)
    assert n == 7 and np.allclose(total.numpy(), S.sum(0), rtol=0, atol=1e-12)
    assert [b["at"] for b in red.seen] == [(0, 0), (2, 0), (4, 0), (6, 0)]
    assert [b["shape"] for b in red.seen] == [(2, 5), (2, 5), (2, 5), (1, 5)]
    for b in red.seen:
        r0 = b["at"][0]
        assert np.array_equal(b["row_terms"].numpy(), rt[r0:r0 + b["shape"][0]]) and b["bytes"] == 80
        assert np.array_equal(b["col_terms"].numpy(), ct) and b["dtype"] == torch.float64
    assert eng.blocks_read == 4 and eng.largest_block == 10
    red = _Probe(Scores("queries", "targets"), 1, dtype=torch.float32)
    (total, n) = eng.reduce(red)
    assert n == 5 and np.allclose(total.numpy(), S.sum(1), atol=1e-5)
    assert {b["dtype"] for b in red.seen} == {torch.float32} and red.seen[0]["row_terms"] is None
    # read transposed (a C-order matrix by its columns): strips of whole columns of the matrix as read
    red = _Probe(Scores("targets", "queries"), 0)
    (total, n) = eng.reduce(red)
    assert n == 5 and np.allclose(total.numpy(), S.sum(1), atol=1e-12)
    assert [b["shape"] for b in red.seen] == [(5, 2), (5, 2), (5, 2), (5, 1)]
    # whole rows on request, at the engine's budget
    red = _Probe(Scores("queries", "targets"), 1, whole_rows=True)
    eng.reduce(red)
    assert [b["shape"] for b in red.seen] == [(2, 5), (2, 5), (2, 5), (1, 5)]
    assert _error(ValueError, eng.reduce, _Probe(Embeddings("queries"))).startswith(
        "this step needs the embeddings of queries, but a score task holds only score matrices")


def test_the_fast_path_reads_a_matrix_once_and_hands_out_copies_or_views():
    S = _S()
    eng = LocalEngine(matrices={("queries", "targets"): S}, block_bytes=8 * 5 * 2)
    got = eng.reduce(_Probe(Scores("queries", "targets"), 0, whole="kernel"))
    assert got == ("kernel", 7, (7, 5), 80)                                 # one resident matrix: the kernel
    assert np.array_equal(eng.resident("queries", "targets").numpy(), S)
    assert np.array_equal(eng.resident("targets", "queries").numpy(), S.T)
    assert eng.blocks_read == 4 and eng.largest_block == 10                 # the one read, by strips of 2 rows
    red = _Probe(Scores("queries", "targets"), 0, zero=True, row_terms=np.ones(7))   # terms: the block loop
    total, n = eng.reduce(red)
    assert n == 7 and np.allclose(total.numpy(), S.sum(0)) and eng.blocks_read == 4   # nothing read again
    assert [b["shape"] for b in red.seen] == [(2, 5), (2, 5), (2, 5), (1, 5)]
    assert np.array_equal(eng.resident("queries", "targets").numpy(), S)    # the zeroed blocks were copies
    red = _Probe(Scores("queries", "targets"), 1, read_only=True, col_terms=np.ones(5))
    eng.reduce(red)
    base = eng.resident("queries", "targets").untyped_storage().data_ptr()
    assert all(b["block"].untyped_storage().data_ptr() == base for b in red.seen)   # read-only: views
    eng.release()
    assert eng._res == {}


def test_a_float32_matrix_kept_in_memory_is_read_in_the_engines_dtype():
    S = _S(dtype=np.float32)
    eng = LocalEngine(matrices={("queries", "targets"): S}, block_bytes=8 * 5 * 2)
    assert eng.resident("queries", "targets").dtype == torch.float32
    red = _Probe(Scores("queries", "targets"), 0, row_terms=np.zeros(7))
    total, _ = eng.reduce(red)
    assert {b["dtype"] for b in red.seen} == {torch.float64}
    assert np.allclose(total.numpy(), S.astype(np.float64).sum(0), atol=1e-12)
    vals = torch.tensor([[2.5]], dtype=torch.float32)
    out = eng._engine_dtype(TopKResult(vals, torch.tensor([[3]])))
    assert out.values.dtype == torch.float64 and out.indices.tolist() == [[3]] and float(out.values) == 2.5
    same = TopKResult(torch.tensor([[1.0]], dtype=torch.float64), None)
    assert eng._engine_dtype(same) is same


def test_a_matrix_is_copied_into_memory_up_to_resident_bytes_and_viewed_beyond():
    S = _S().astype(np.float16)                           # 7 x 5 float16, copied as float32: 140 bytes
    assert LocalEngine(matrices={("queries", "targets"): S}, resident_bytes=140).resident("queries",
                       "targets") is not None
    assert LocalEngine(matrices={("queries", "targets"): S}, resident_bytes=139).resident("queries", "targets") is None
    assert LocalEngine(matrices={("queries", "targets"): S}, plain=True).resident("queries", "targets") is None
    wide = _S(3, 40).astype(np.float16)                   # 480 bytes: rows / columns < 1
    assert LocalEngine(matrices={("queries", "targets"): wide}, resident_bytes=479).resident("queries",
                       "targets") is None
    assert LocalEngine(matrices={("queries", "targets"): _S()}, resident_bytes=1).resident("queries",
                       "targets") is not None


@pytest.mark.parametrize("order", ["C", "F"])
def test_the_one_read_keeps_sub_matrices_of_either_order(order):
    S = _S(8, 6, order=order)
    m = ScoreMatrix(S, "s").take([0, 2, 3, 7], [1, 4, 5])
    eng = LocalEngine(matrices={("queries", "targets"): m}, block_bytes=8 * 4 * 2)
    want = S[[0, 2, 3, 7]][:, [1, 4, 5]]
    assert np.array_equal(eng.resident("queries", "targets").numpy(), want)
    assert np.array_equal(eng.resident("targets", "queries").numpy(), want.T)
    assert m.bound == np.abs(want).max()


@pytest.mark.parametrize("order, transposed", [("C", False), ("F", False), ("C", True), ("F", True)])
def test_the_one_read_names_the_first_non_finite_cell_of_the_matrix(order, transposed):
    S = _S(8, 6, order=order)
    S[5, 3] = np.inf                                  # +inf alone: the smallest score stays finite
    m = ScoreMatrix(S, "the file s.npy")
    m = m.T if transposed else m
    eng = LocalEngine(matrices={("queries", "targets"): m}, block_bytes=8 * 8 * 2)   # strips of 2 stored lines
    row, col = (3, 5) if transposed else (5, 3)
    assert _error(ValueError, eng.resident, "queries", "targets") == (
        f"the file s.npy holds a non-finite score (NaN or inf) at row {row}, column {col}: a score matrix must be "
        "finite; recompute it, or drop that row")
    checked = ScoreMatrix(S, "c", checked=True)
    assert np.isinf(LocalEngine(matrices={("queries", "targets"): checked}).resident("queries",
                                "targets").numpy()).sum() == 1


def test_the_bound_of_a_matrix_read_block_by_block_counts_its_blocks():
    S = _S(dtype=np.float32)
    eng = LocalEngine(matrices={("queries", "targets"): S}, plain=True, block_bytes=4 * 5 * 2)
    assert eng.score_bound(Scores("queries", "targets")) == pytest.approx(np.abs(S).max())
    assert eng.blocks_read == 4 and eng.largest_block == 10
    eng.score_bound(Scores("queries", "targets"))                          # known: not read again
    assert eng.blocks_read == 4


def test_normalized_blocks_are_sized_by_the_dtype_and_budget():
    S, labels, task = _task(block_bytes=8 * 30 * 4)                         # 4 float64 rows of 30
    assert [q0 for q0, _ in task.blocks()] == list(range(0, 40, 4))
    t32 = RetrievalTask(scores={("queries", "targets"): S.astype(np.float32)},
                        positives=hn.Positives.from_labels(labels, 30), block_bytes=8 * 30 * 4, dtype=torch.float32,
                        direction="t2v", check=False)
    assert [q0 for q0, _ in t32.blocks()] == list(range(0, 40, 8))
    bad = S.copy()
    bad[13, 7] = np.nan
    t = RetrievalTask(scores={("queries", "targets"): bad}, positives=hn.Positives.from_labels(labels, 30),
                      block_bytes=8 * 30 * 4, direction="t2v", check=False)
    assert "at row 13, column 7:" in _error(ValueError, t.score)


def test_the_hubness_of_a_task_counts_the_top_10_by_default():
    S, _, task = _task()
    n_k = np.zeros(S.shape[1])
    for row in S:
        n_k[np.argsort(-row, kind="stable")[:10]] += 1
    assert np.array_equal(hn.k_occurrence(task.blocks()), n_k) and n_k.sum() == 400
    assert hn.hubness(task.blocks()) == hn.hubness_stats(n_k, 10, 40)


def test_a_method_that_reads_embeddings_is_refused_by_its_class_name():
    dn = hn.make_normalizer("dn")
    S, _, task = _task()
    msg = _error(ValueError, dn.fit_engine, LocalEngine(matrices={("queries", "targets"): S}))
    assert msg.startswith(f"{type(dn).__name__} reads the embeddings of ")
    assert "a task given as score matrices (a sims: source) cannot run it without them; add them" in msg
    assert _error(ValueError, task.fit, hn.make_normalizer("dn")) == msg


def test_a_query_aware_fit_drops_every_matrix_of_the_bank():
    S, labels, _ = _task()
    task = RetrievalTask(scores={("queries", "targets"): S,
                                 ("query_bank", "targets"): _rng(5).standard_normal((12, 30)),
                                 ("query_bank", "target_bank"): _rng(6).standard_normal((12, 4))},
                         positives=hn.Positives.from_labels(labels, 30), direction="t2v", check=False)
    norm = task.fit(hn.make_normalizer("is", tau=0.05), query_aware=True)
    used = norm.score_engine_
    assert used.size("query_bank") == 40 and ("query_bank", "target_bank") not in used.matrices
    assert used.size("target_bank") is None


def test_sims_tasks_default_seed_and_a_real_folder(tmp_path):
    from hubnorm.data.sims import write_sims
    from hubnorm.scores import sims_tasks

    rng = _rng(9)
    test, bank = rng.standard_normal((6, 3)), rng.standard_normal((8, 3))
    write_sims(tmp_path, {"test": test, "bank_rows": bank}, labels=np.array([0, 0, 1, 1, 2, 2]), dataset="r")
    tasks = sims_tasks(tmp_path, bank_queries=3)
    assert tasks["t2v"].meta["source"] == "real" and tasks["t2v"].meta["dataset"] == "r"
    keep = sample_index(8, 3, 0)
    assert np.array_equal(_dense(tasks["t2v"].engine.matrix("query_bank", "targets")), bank[keep])
    assert not np.array_equal(keep, sample_index(8, 3, 1))


@pytest.mark.parametrize("plain", [True, False])
def test_a_reduction_over_two_column_matrices_reads_them_side_by_side(plain):
    B, X = _S(6, 5, seed=10), _S(6, 3, seed=11)                              # bank x targets, bank x target bank
    mats = {("query_bank", "targets"): B, ("query_bank", "target_bank"): X, ("queries", "targets"): _S(4, 5)}
    eng = LocalEngine(matrices=mats, plain=plain, block_bytes=8 * 8 * 2)
    both = np.concatenate([B, X], axis=1)
    red = _Probe(Scores("query_bank", ("targets", "target_bank")), 1, col_terms=np.arange(8.0))
    total, n = eng.reduce(red)
    assert n == 8 and np.allclose(total.numpy(), both.sum(1), rtol=0, atol=1e-12)
    assert [b["shape"] for b in red.seen] == [(2, 8)] * 3
    assert all(np.array_equal(b["col_terms"].numpy(), np.arange(8.0)) for b in red.seen)
    red = _Probe(Scores("query_bank", ("targets", "target_bank")), 0)
    total, n = eng.reduce(red)
    assert n == 6 and np.allclose(total.numpy(), both.sum(0), rtol=0, atol=1e-12)
    assert np.array_equal(eng.read(Scores("query_bank", ("targets", "target_bank")), 1, 3, 4, 7, torch.float64).numpy(),
                          both[1:3, 4:7])


# ------------------------------------------------------------------------------------------------ score / topk
@pytest.mark.parametrize("name, params", [("is", {"tau": 0.1}), ("nnn", {"k": 3, "alpha": 0.5}),
                                          ("csls", {"k": 2}), ("sn", {"tau": 0.1})])
def test_a_normalizer_fitted_from_matrices_scores_and_ranks_raw_test_scores(name, params):
    """score / topk of a normalizer fitted by a task of score matrices take the raw test scores and give what the
    task gives."""
    rng = np.random.default_rng(4)
    S, B = rng.standard_normal((13, 9)), rng.standard_normal((40, 9))
    task = RetrievalTask(scores={("queries", "targets"): S, ("query_bank", "targets"): B},
                         positives=hn.Positives.from_labels(np.arange(13) % 9, 9), direction="t2v", check=False)
    norm = task.fit(hn.make_normalizer(name, **params))
    want = task.score(norm)
    for given in (S, torch.from_numpy(S), np.asfortranarray(S), S.tolist()):
        got = norm.score(given, chunk_size=4)                       # blocks of 4 queries
        assert torch.equal(got, want)
    v, i = norm.topk(S, 3)
    ref_v, ref_i = want.sort(dim=1, descending=True, stable=True)    # ties: the lowest target first
    assert torch.equal(i, ref_i[:, :3]) and torch.equal(v, ref_v[:, :3])
    before = S.copy()
    norm.score(S)
    assert np.array_equal(S, before)                                 # the caller's scores are never modified


def test_raw_test_scores_are_checked_and_a_refit_never_mixes_two_fits():
    rng = np.random.default_rng(5)
    S, B = rng.standard_normal((6, 4)), rng.standard_normal((20, 4))
    task = RetrievalTask(scores={("queries", "targets"): S, ("query_bank", "targets"): B},
                         positives=hn.Positives.from_labels(np.arange(6) % 4, 4), direction="t2v", check=False)
    norm = task.fit(hn.InvertedSoftmax(tau=0.1))
    with pytest.raises(ValueError, match=r"fitted from score matrices over 4 targets: score / topk take the raw test "
                                         r"scores \(queries x 4 targets.*got shape \(6, 5\)"):
        norm.score(rng.standard_normal((6, 5)))
    with pytest.raises(TypeError, match="floating-point array; got dtype int64"):
        norm.score(np.ones((2, 4), dtype=np.int64))
    bad = S.copy()
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        norm.topk(bad, 2)
    with pytest.raises(ValueError, match=r"k=5 is larger than the number of targets \(4\)"):
        norm.topk(S, 5)
    with pytest.raises(hn.NotFittedError, match="fitted from score matrices .* needs a fit on embeddings"):
        norm.augment_targets()
    # fitted on embeddings first, then from matrices: the old target embeddings are gone, not mixed in
    t = torch.nn.functional.normalize(torch.randn(4, 3, dtype=torch.float64), dim=1)
    qb = torch.nn.functional.normalize(torch.randn(20, 3, dtype=torch.float64), dim=1)
    twice = hn.InvertedSoftmax(tau=0.1).fit(t, query_bank=qb)
    assert hasattr(twice, "targets_")
    task.fit(twice)
    assert not hasattr(twice, "targets_") and torch.equal(twice.score(S), norm.score(S))
    twice.fit(t, query_bank=qb)                                      # and back: embeddings again
    assert hasattr(twice, "targets_") and not hasattr(twice, "score_engine_")
    assert twice.score(t).shape == (4, 4)
