"""The statistics behind a sims folder's consistency checks (hubnorm.data.sims_checks), accumulated block by block,
against the same statistics of the whole matrix computed here; and each finding's thresholds at their edges."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from hubnorm.data import sims_checks as sc


def _feed(stats, x, rows_per_block):
    for r0 in range(0, x.shape[0], rows_per_block):
        stats(r0, x[r0:r0 + rows_per_block])


@pytest.mark.parametrize("rows_per_block", [1, 3, 7, 40])
def test_matrix_statistics_over_blocks_equal_those_of_the_whole_matrix(rows_per_block):
    x = np.random.default_rng(0).standard_normal((23, 9)) - 5.0      # every score negative: maxima start at -inf
    st = sc.MatrixStats(x.shape)
    seen = []
    st.hooks.append(lambda r0, b: seen.append((r0, b.shape[0])))
    _feed(st, x, rows_per_block)
    assert np.allclose(st.row_sum, x.sum(1)) and np.array_equal(st.row_max, x.max(1))
    assert np.allclose(st.col_sum, x.sum(0)) and np.array_equal(st.col_max, x.max(0))
    assert np.allclose(st.row_mean, x.mean(1)) and np.allclose(st.col_mean, x.mean(0))
    assert [r0 for r0, _ in seen] == list(range(0, 23, rows_per_block)) and sum(n for _, n in seen) == 23


@pytest.mark.parametrize("rows_per_block", [1, 4, 30])
@pytest.mark.parametrize("square", [True, False])
def test_positive_scores_over_blocks_equal_those_of_the_whole_matrix(rows_per_block, square):
    rng = np.random.default_rng(1)
    n_rows, n_cols = (12, 12) if square else (15, 6)
    x = rng.standard_normal((n_rows, n_cols))
    labels = rng.integers(0, n_cols, n_rows)
    rows, cols = np.arange(n_rows), labels.copy()
    if not square:                       # a second positive for some rows
        rows, cols = np.concatenate([rows, [2, 7]]), np.concatenate([cols, [(labels[2] + 1) % n_cols, labels[7]]])
    st = sc.MatrixStats(x.shape)
    pos = sc.PositiveScores(rows, cols, x.shape, labels)
    st.hooks.append(pos)
    _feed(st, x, rows_per_block)
    best = np.full(n_rows, -np.inf)
    for r, c in zip(rows, cols):
        best[r] = max(best[r], x[r, c])
    assert np.array_equal(pos.best, best)
    for s in (-1, 1):                    # row i scored with the label of row i + s
        assert np.array_equal(pos.shifted[s], x[np.arange(n_rows), np.roll(labels, -s)])
    row_sum, col_sum = np.zeros(n_rows), np.zeros(n_cols)
    for r, c in zip(rows, cols):
        row_sum[r] += x[r, c]
        col_sum[c] += x[r, c]
    assert np.allclose(pos.pos_row_sum, row_sum) and np.allclose(pos.pos_col_sum, col_sum)
    assert np.array_equal(pos.pos_row_n, np.bincount(rows, minlength=n_rows))
    assert np.array_equal(pos.pos_col_n, np.bincount(cols, minlength=n_cols))
    if square:                           # the positives read in the transpose: row r's pair (r, c) at x[c, r]
        best_t = np.full(n_rows, -np.inf)
        for r, c in zip(rows, cols):
            best_t[r] = max(best_t[r], x[c, r])
        assert np.array_equal(pos.best_t, best_t)
    else:
        assert pos.best_t is None
    assert sc.PositiveScores(rows, cols, x.shape, None).shifted == {}


def test_correlation_is_pearsons_and_nan_when_constant():
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(30), rng.standard_normal(30)
    assert sc._corr(a, b) == pytest.approx(np.corrcoef(a, b)[0, 1], abs=1e-12)
    assert sc._corr(a, 3 * a + 1) == pytest.approx(1.0) and np.isnan(sc._corr(a, np.ones(30)))


def _folder(names=("test.npy", "bank_rows.npy"), modalities=("text", "video")):
    return SimpleNamespace(files={"test": Path(names[0]), "bank_rows": Path(names[1]),
                                  "bank_cols": Path("bank_cols.npy"), "bank_rows_x_bank_cols": Path("bb.npy")},
                           modalities=modalities)


def _stats(x, labels, extra=None):
    st = sc.MatrixStats(x.shape)
    pos = sc.PositiveScores(np.arange(len(labels)), labels, x.shape, labels)
    st.hooks.append(pos)
    st(0, x)
    out = {"test": st}
    for role, m in (extra or {}).items():
        s = sc.MatrixStats(m.shape)
        s(0, m)
        out[role] = s
    return out, pos


def _right(n=40, d=16, seed=0):
    """Captions (rows) x items (columns) of a model that matches each caption to its own item."""
    rng = np.random.default_rng(seed)
    items = rng.standard_normal((n, d))
    caps = items + 0.3 * rng.standard_normal((n, d))
    return caps @ items.T, np.arange(n), items, rng


def test_a_right_square_folder_has_no_finding_and_too_few_items_are_not_judged():
    x, labels, _, _ = _right()
    assert sc.findings(_folder(), *_stats(x, labels)) == []
    small = x[:sc.MIN_ITEMS - 1, :sc.MIN_ITEMS - 1]
    assert sc.findings(_folder(), *_stats(np.roll(small, 1, axis=1), np.arange(sc.MIN_ITEMS - 1))) == []
    assert sc.MIN_ITEMS == 20 and sc.MIN_BANK == 50 and sc.AGREEMENT == 0.5


def test_shifted_positives_are_named_with_both_recalls():
    x, labels, _, _ = _right()
    got = sc.findings(_folder(), *_stats(x, np.roll(labels, 1)))     # row i given the label of row i - 1
    assert got == ["the positives look shifted: raw R@1 is 0.0 with the given labels and 97.5 when row i takes the "
                   "label of row i+1; fix the positives file so that entry i is the column of row i of test.npy"]


def test_a_transposed_square_matrix_is_named():
    x, labels, _, _ = _right()
    perm = np.random.default_rng(5).permutation(len(labels))
    shuffled = x[perm]             # caption perm[i] in row i: its item is column perm[i]
    assert sc.findings(_folder(), *_stats(shuffled, perm)) == []
    got = sc.findings(_folder(), *_stats(shuffled.T, perm))    # saved the other way round, the same positives
    assert len(got) == 1 and got[0].startswith("test.npy looks transposed: raw R@1 is ")
    assert got[0].endswith("read the other way; save it with the manifest's first modality (text) as rows "
                           "(np.save(path, S.T)), or swap the modalities in the manifest")


def test_chance_level_recall_is_named():
    x, labels, _, _ = _right()
    rng = np.random.default_rng(3)
    got = sc.findings(_folder(), *_stats(rng.standard_normal(x.shape), labels))
    assert got == ["raw R@1 of test.npy is " + got[0][len("raw R@1 of test.npy is "):].split(",")[0]
                   + ", at chance level (2.50 for random scores): the positives do not belong to this matrix "
                   "(shifted or shuffled rows, another split, or test and bank files swapped); check that row i of "
                   "the positives is row i of the test matrix"]


def test_a_bank_of_the_test_queries_or_of_other_items_is_named():
    x, labels, items, rng = _right(n=40)
    bank_caps = items[rng.integers(0, 40, 60)] + 0.3 * rng.standard_normal((60, items.shape[1]))
    right = bank_caps @ items.T
    assert sc.findings(_folder(), *_stats(x, labels, {"bank_rows": right})) == []
    same = np.concatenate([x, x])[:80]                     # the test queries (twice): the same column means
    got = sc.findings(_folder(), *_stats(x, labels, {"bank_rows": same}))
    assert got == ["bank_rows.npy (bank_rows) holds the test queries themselves: every item's mean bank score equals "
                   "its mean test score. A bank of the test queries is a query-aware (transductive) fit: give a bank "
                   "from the training split, or fit with query_aware=True so that the results say so"]
    shuffled = right[:, rng.permutation(40)]
    got = sc.findings(_folder(), *_stats(x, labels, {"bank_rows": shuffled}))
    assert len(got) == 1 and got[0].startswith("bank_rows.npy (bank_rows, bank rows x test columns) does not describe "
                                               "the test items: the correlation of each item's mean bank score with "
                                               "its mean test score is ")
    few = shuffled[:sc.MIN_BANK - 1]                       # too few bank rows to judge
    assert sc.findings(_folder(), *_stats(x, labels, {"bank_rows": few})) == []
