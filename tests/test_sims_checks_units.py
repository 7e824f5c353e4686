"""The statistics behind a sims folder's consistency checks (hubnorm.score_checks), accumulated block by block,
against the same statistics of the whole matrix computed here; and each finding's thresholds at their edges."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from hubnorm import score_checks as sc


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


def _findings(folder, stats, pos):
    """:func:`hubnorm.score_checks.findings` as ``load_sims`` calls it: the files' names, the manifest's fix."""
    fix = (f"save it with the manifest's first modality ({folder.modalities[0]}) as rows (np.save(path, S.T)), or "
           "swap the modalities in the manifest")
    return sc.findings(stats, pos, {role: path.name for role, path in folder.files.items()}, transpose_fix=fix,
                       modalities=folder.modalities)


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
    assert _findings(_folder(), *_stats(x, labels)) == []
    small = x[:sc.MIN_ITEMS - 1, :sc.MIN_ITEMS - 1]
    assert _findings(_folder(), *_stats(np.roll(small, 1, axis=1), np.arange(sc.MIN_ITEMS - 1))) == []
    assert sc.MIN_ITEMS == 20 and sc.MIN_BANK == 50 and sc.AGREEMENT == 0.5


def test_shifted_positives_are_named_with_both_recalls():
    x, labels, _, _ = _right()
    got = _findings(_folder(), *_stats(x, np.roll(labels, 1)))     # row i given the label of row i - 1
    assert got == ["the positives look shifted: raw R@1 is 0.0 with the given labels and 97.5 when row i takes the "
                   "label of row i+1; fix the positives file so that entry i is the column of row i of test.npy"]


def test_a_transposed_square_matrix_is_named():
    x, labels, _, _ = _right()
    perm = np.random.default_rng(5).permutation(len(labels))
    shuffled = x[perm]             # caption perm[i] in row i: its item is column perm[i]
    assert _findings(_folder(), *_stats(shuffled, perm)) == []
    got = _findings(_folder(), *_stats(shuffled.T, perm))    # saved the other way round, the same positives
    assert len(got) == 1 and got[0].startswith("test.npy looks transposed: raw R@1 is ")
    assert got[0].endswith("read the other way; save it with the manifest's first modality (text) as rows "
                           "(np.save(path, S.T)), or swap the modalities in the manifest")


def test_chance_level_recall_is_named():
    x, labels, _, _ = _right()
    rng = np.random.default_rng(3)
    got = _findings(_folder(), *_stats(rng.standard_normal(x.shape), labels))
    assert got == ["raw R@1 of test.npy is " + got[0][len("raw R@1 of test.npy is "):].split(",")[0]
                   + ", at chance level (2.50 for random scores): the positives do not belong to this matrix "
                   "(shifted or shuffled rows, another split, or test and bank files swapped); check that row i of "
                   "the positives is row i of the test matrix"]


def test_a_bank_of_the_test_queries_or_of_other_items_is_named():
    x, labels, items, rng = _right(n=40)
    pull = rng.standard_normal(40)                         # items differ in their mean score (as real ones do)
    x = x + pull[None, :]
    bank_caps = items[rng.integers(0, 40, 60)] + 0.3 * rng.standard_normal((60, items.shape[1]))
    right = bank_caps @ items.T + pull[None, :]
    assert _findings(_folder(), *_stats(x, labels, {"bank_rows": right})) == []
    same = np.concatenate([x, x])                          # the test queries (twice): the same column means
    got = _findings(_folder(), *_stats(x, labels, {"bank_rows": same}))
    assert got == ["bank_rows.npy (bank_rows) holds the test queries themselves: every item's mean bank score equals "
                   "its mean test score. A bank of the test queries is a query-aware (transductive) fit: give a bank "
                   "from the training split, or fit with query_aware=True so that the results say so"]
    shuffled = right[:, rng.permutation(40)]
    got = _findings(_folder(), *_stats(x, labels, {"bank_rows": shuffled}))
    assert len(got) == 1 and got[0].startswith("bank_rows.npy (bank_rows, bank rows x test columns) does not describe "
                                               "the test items: the correlation of each item's mean bank score with "
                                               "its mean test score is ")
    few = shuffled[:sc.MIN_BANK - 1]                       # too few bank rows to judge
    assert _findings(_folder(), *_stats(x, labels, {"bank_rows": few})) == []
    # a bank whose items' mean scores carry no order (random captions: every item scores about the same on
    # average over them, as over a centred bank): its columns in any order cannot be told apart, so nothing is said
    noise = rng.standard_normal((60, items.shape[1])) @ items.T
    assert sc.reliability(_stats(x, labels, {"bank_rows": noise})[0]["bank_rows"].halves("cols")) < sc.RELIABILITY
    assert _findings(_folder(), *_stats(x, labels, {"bank_rows": noise[:, rng.permutation(40)]})) == []


def test_reliability_is_the_spearman_brown_corrected_split_half_correlation():
    rng = np.random.default_rng(3)
    a = rng.standard_normal(50)
    b = a + 0.5 * rng.standard_normal(50)
    r = np.corrcoef(a, b)[0, 1]
    assert sc.reliability((a, b)) == pytest.approx(2 * r / (1 + r), abs=1e-12)
    assert sc.reliability((a, -a)) == 0.0 and sc.reliability((a, a)) == pytest.approx(1.0)
    assert np.isnan(sc.reliability((a, np.ones(50))))
    assert sc.RELIABILITY == 0.5


@pytest.mark.parametrize("shape", [(11, 5), (12, 6)])
@pytest.mark.parametrize("r0_rows", [(0, 7), (3, 4), (0, 1)])
def test_halves_over_blocks_are_the_even_and_odd_means(r0_rows, shape):
    """Each row's mean over the even and odd columns, each column's over the even and odd rows, whatever the blocks
    (a block may start on an odd row) and the parity of the sizes."""
    n, m = shape
    x = np.random.default_rng(4).standard_normal(shape)
    st = sc.MatrixStats(x.shape)
    first, step = r0_rows
    if first:
        st(0, x[:first])
    for r0 in range(first, n, step):
        st(r0, x[r0:r0 + step])
    with pytest.raises(ValueError, match="axis must be 'rows' or 'cols'; got 'COLS'"):
        st.halves("COLS")
    even, odd = st.halves("cols")
    assert np.allclose(even, x[0::2].mean(0)) and np.allclose(odd, x[1::2].mean(0))
    even, odd = st.halves("rows")
    assert np.allclose(even, x[:, 0::2].mean(1)) and np.allclose(odd, x[:, 1::2].mean(1))
    labels = np.arange(n) % m
    pos = sc.PositiveScores(np.arange(n), labels, x.shape, labels)
    st2 = sc.MatrixStats(x.shape)
    st2.hooks.append(pos)
    for r0 in range(0, n, step):
        st2(r0, x[r0:r0 + step])
    mask = np.zeros(x.shape, bool)
    mask[np.arange(n), labels] = True
    for axis, (e, o) in (("cols", sc._ref_halves(st2, pos, "cols")), ("rows", sc._ref_halves(st2, pos, "rows"))):
        for parity, got in ((0, e), (1, o)):
            if axis == "cols":
                keep = ~mask & (np.arange(n)[:, None] % 2 == parity)
                want = (x * keep).sum(0) / np.maximum(keep.sum(0), 1)
            else:
                keep = ~mask & (np.arange(m)[None, :] % 2 == parity)
                want = (x * keep).sum(1) / np.maximum(keep.sum(1), 1)
            assert np.allclose(got, want), (axis, parity)


# ----------------------------------------------------------------------------------------------- thresholds
def _fabricated(n_rows, n_cols, *, hit_rows, per_row=1, shifted=None, best_t=None, labels=None):
    """Statistics of a test matrix whose row maxima are 1 and whose best positive reaches it in ``hit_rows`` rows
    (raw R@1 = hit_rows / n_rows); ``shifted``: {shift: rows the neighbouring labels would hit}; ``best_t``: rows
    the transpose would hit (a square matrix)."""
    def hits(k, n):
        out = np.zeros(n)
        out[:k] = 1.0
        return out

    test = SimpleNamespace(shape=(n_rows, n_cols), row_max=np.ones(n_rows), col_max=np.ones(n_cols),
                           row_sum=np.zeros(n_rows), col_sum=np.zeros(n_cols))
    pos = SimpleNamespace(rows=np.zeros(n_rows * per_row, np.int64), best=hits(hit_rows, n_rows),
                          shifted={s: hits(k, n_rows) for s, k in (shifted or {}).items()},
                          square=n_rows == n_cols, best_t=hits(best_t or 0, n_cols),
                          labels=labels, pos_row_sum=np.zeros(n_rows), pos_col_sum=np.zeros(n_cols),
                          pos_row_n=np.zeros(n_rows), pos_col_n=np.zeros(n_cols))
    return {"test": test}, pos


def test_the_shift_rule_at_its_edges():
    # 160 rows: R@1 = 40 rows, the neighbouring labels 50 rows: 1.25 x as many and 10 rows more, both exactly
    got = _findings(_folder(), *_fabricated(160, 160, hit_rows=40, shifted={1: 50}))
    assert got and got[0].startswith("the positives look shifted: raw R@1 is 25.0 with the given labels and 31.2 when "
                                     "row i takes the label of row i+1")
    assert not any("shifted" in f for f in _findings(_folder(), *_fabricated(160, 160, hit_rows=40,
                                                                               shifted={1: 49})))
    assert sc.SHIFT_GAIN == 1.25 and sc.SHIFT_ROWS == 10 and sc.CHANCE_FACTOR == 2.0


def test_the_transpose_rule_at_its_edge():
    got = _findings(_folder(), *_fabricated(40, 40, hit_rows=5, best_t=15))     # 3 x as many, exactly
    assert got[0].startswith("test.npy looks transposed: raw R@1 is 12.5 as given and 37.5 read the other way")
    assert not any("transposed" in f for f in _findings(_folder(), *_fabricated(40, 40, hit_rows=5, best_t=14)))
    assert sc.TRANSPOSE_FACTOR == 3.0


def test_the_chance_rule_at_its_edge_and_with_every_item_a_positive():
    # 1000 rows x 20 columns, two positives per row: chance = 0.1, its edge 0.2 + 3 sd = 0.2285
    assert _findings(_folder(), *_fabricated(1000, 20, hit_rows=228, per_row=2))[0].startswith(
        "raw R@1 of test.npy is 22.8, at chance level (10.00 for random scores)")
    assert _findings(_folder(), *_fabricated(1000, 20, hit_rows=229, per_row=2)) == []
    every = _findings(_folder(), *_fabricated(20, 20, hit_rows=20, per_row=20))   # every item a positive
    assert every == ["raw R@1 of test.npy is 100.0, at chance level (100.00 for random scores): the positives do not "
                     "belong to this matrix (shifted or shuffled rows, another split, or test and bank files "
                     "swapped); check that row i of the positives is row i of the test matrix"]
    assert _findings(_folder(), *_fabricated(20, 20, hit_rows=0))            # 20 items: judged
    assert _findings(_folder(), *_fabricated(19, 40, hit_rows=0)) == []      # 19: too few


def _bank_case(n=40, n_bank=60, seed=0, big_positives=True):
    """A square test matrix (captions x items, caption i of item i, raw R@1 near 100) whose items differ in how much
    they attract every caption, with (``big_positives``) positives that score far above the rest by amounts that
    differ from item to item; and a bank of other captions of the same items."""
    rng = np.random.default_rng(seed)
    items = rng.standard_normal((n, 16))
    pull = rng.standard_normal(n)                       # how much each item attracts every caption
    caps = items + 0.3 * rng.standard_normal((n, 16))
    x = caps @ items.T / 16 + 0.3 * pull[None, :]
    if big_positives:
        x[np.arange(n), np.arange(n)] += 50.0 * rng.random(n)
    bank = rng.standard_normal((n_bank, 16)) @ items.T / 16 + 0.3 * pull[None, :]
    return x, bank


def test_the_bank_rule_reads_the_items_scores_without_their_positives():
    """Positives far above the rest, by amounts that vary: an item's mean test score is read without them (with
    them, or with them counted twice, the bank would not seem to describe the test items)."""
    for seed in range(3):
        x, bank = _bank_case(seed=seed)
        assert _findings(_folder(), *_stats(x, np.arange(40), {"bank_rows": bank})) == []
    # the other side: a bank of items scored against the test captions (its columns are the test rows)
    rng = np.random.default_rng(7)
    items = rng.standard_normal((40, 16))
    caps = items + 0.3 * rng.standard_normal((40, 16))
    cpull = rng.standard_normal(40)                     # how much each caption scores every item
    x = caps @ items.T / 16 + 0.3 * cpull[:, None]
    x[np.arange(40), np.arange(40)] += 50.0 * rng.random(40)
    bank_items = rng.standard_normal((60, 16))
    bank_cols = bank_items @ caps.T / 16 + 0.3 * cpull[None, :]
    assert _findings(_folder(), *_stats(x, np.arange(40), {"bank_cols": bank_cols})) == []
    shuffled = bank_cols[:, rng.permutation(40)]
    got = _findings(_folder(), *_stats(x, np.arange(40), {"bank_cols": shuffled}))
    assert len(got) == 1 and got[0].startswith("bank_cols.npy (bank_cols, bank columns x test rows) does not "
                                               "describe the test items")


def test_a_bank_alone_on_the_second_axis_is_judged():
    x, bank = _bank_case(big_positives=False)
    rng = np.random.default_rng(4)
    cpull = rng.standard_normal(40)                     # the captions (rows) differ in their mean score too
    x = x + 0.3 * cpull[:, None]
    bank_cols = rng.standard_normal((60, 40)) / 4 + 0.3 * cpull[None, :]   # other items x the test captions
    assert _findings(_folder(), *_stats(x, np.arange(40), {"bank_cols": bank_cols})) == []
    other = bank_cols[:, rng.permutation(40)]
    got = _findings(_folder(), *_stats(x, np.arange(40), {"bank_cols": other}))
    assert len(got) == 1 and got[0].startswith("bank_cols.npy (bank_cols, bank columns x test rows) does not describe "
                                               "the test items")
    exactly = _findings(_folder(), *_stats(x, np.arange(40), {"bank_rows": other[:sc.MIN_BANK]}))
    assert len(exactly) == 1 and "bank_rows.npy (bank_rows, bank rows x test columns)" in exactly[0]   # 50 rows: judged


def test_a_bank_that_differs_from_the_test_queries_by_a_hair_is_not_the_test_queries():
    x, _ = _bank_case(big_positives=False)
    near = np.concatenate([x, x]) * (1 + 1e-7)          # relative 1e-7: not equal to rounding
    got = _findings(_folder(), *_stats(x, np.arange(40), {"bank_rows": near}))
    assert not any("holds the test queries themselves" in f for f in got)
    same = np.concatenate([x, x])
    assert any("holds the test queries themselves" in f for f in _findings(_folder(), *_stats(
        x, np.arange(40), {"bank_rows": same})))


def _captions_items(seed=0, n=40, n_bank=60):
    rng = np.random.default_rng(seed)
    items = rng.standard_normal((n, 16))
    caps = items + 0.3 * rng.standard_normal((n, 16))
    ipull, cpull = rng.standard_normal(n), rng.standard_normal(n)
    x = caps @ items.T / 16 + 0.3 * ipull[None, :] + 0.3 * cpull[:, None]
    bank_caps_pull = rng.standard_normal(n_bank)
    bank_items_pull = rng.standard_normal(n_bank)
    bank_caps, bank_items = rng.standard_normal((n_bank, 16)), rng.standard_normal((n_bank, 16))
    bank_rows = bank_caps @ items.T / 16 + 0.3 * ipull[None, :] + 0.3 * bank_caps_pull[:, None]
    bank_cols = bank_items @ caps.T / 16 + 0.3 * cpull[None, :] + 0.3 * bank_items_pull[:, None]
    bb = bank_caps @ bank_items.T / 16 + 0.3 * bank_caps_pull[:, None] + 0.3 * bank_items_pull[None, :]
    return x, bank_rows, bank_cols, bb, rng


def test_a_square_test_matrix_saved_the_other_way_is_named_by_its_banks():
    x, bank_rows, bank_cols, _, _ = _captions_items()
    assert _findings(_folder(), *_stats(x, np.arange(40), {"bank_rows": bank_rows, "bank_cols": bank_cols})) == []
    got = _findings(_folder(), *_stats(x.T.copy(), np.arange(40), {"bank_rows": bank_rows}))
    assert len(got) == 1 and got[0].startswith("test.npy looks transposed: bank_rows.npy (bank_rows) describes the "
                                               "test matrix's rows (correlation ")
    assert ", not its columns (" in got[0] and got[0].endswith("save it with the manifest's first modality "
                                                                "(text) as rows (np.save(path, S.T)), or swap the "
                                                                "modalities in the manifest")
    got = _findings(_folder(), *_stats(x.T.copy(), np.arange(40), {"bank_cols": bank_cols}))
    assert len(got) == 1 and got[0].startswith("test.npy looks transposed: bank_cols.npy (bank_cols) describes the "
                                               "test matrix's columns (correlation ")
    assert ", not its rows (" in got[0]


def test_a_bank_by_bank_matrix_of_other_items_is_named():
    x, bank_rows, bank_cols, bb, rng = _captions_items(seed=1)
    banks = {"bank_rows": bank_rows, "bank_cols": bank_cols}
    assert _findings(_folder(), *_stats(x, np.arange(40), {**banks, "bank_rows_x_bank_cols": bb})) == []
    got = _findings(_folder(), *_stats(x, np.arange(40), {**banks, "bank_rows_x_bank_cols": bb[rng.permutation(60)]}))
    assert got == [f"bb.npy (bank_rows_x_bank_cols) does not describe the bank items of bank_rows.npy (bank_rows): "
                   f"the correlation of each bank item's mean score in the two is {got[0].split('two is ')[1].split(' ')[0]} "
                   "(right folders: above 0.5). Its rows must be the rows of bank_rows.npy, in the same order (or the "
                   "whole folder is transposed and the manifest's modalities are swapped)"]
    got = _findings(_folder(), *_stats(x, np.arange(40), {**banks, "bank_rows_x_bank_cols":
                                                            bb[:, rng.permutation(60)]}))
    assert len(got) == 1 and "bank items of bank_cols.npy (bank_cols)" in got[0] and "Its cols must be" in got[0]
    few = {"bank_rows": bank_rows[:49], "bank_cols": bank_cols[:49], "bank_rows_x_bank_cols": bb[:49, :49][::-1]}
    assert _findings(_folder(), *_stats(x, np.arange(40), few)) == []


def _mean_free(m, axis):
    """``m`` with every row's (axis 1) or column's (axis 0) mean taken out: items without an order in their means."""
    return m - m.mean(axis=axis, keepdims=True)


@pytest.mark.parametrize("side", ["test", "bank"])
def test_a_bank_is_not_compared_where_either_sides_means_carry_no_order(side):
    """Each side of the comparison is gated on its own: with the test items' means (positives left out) or the bank's
    without an order, a bank of shuffled columns cannot be told from a right one, and nothing is said."""
    x, bank = _bank_case(big_positives=False)
    rng = np.random.default_rng(5)
    shuffled = bank[:, rng.permutation(40)]
    assert len(_findings(_folder(), *_stats(x, np.arange(40), {"bank_rows": shuffled}))) == 1   # both ordered: named
    if side == "test":
        x = x - x.mean(axis=0, keepdims=True) + 0.01 * rng.standard_normal(x.shape)
        st, pos = _stats(x, np.arange(40), {"bank_rows": shuffled})
        assert sc.reliability(sc._ref_halves(st["test"], pos, "cols")) < sc.RELIABILITY
        assert sc.reliability(st["bank_rows"].halves("cols")) >= sc.RELIABILITY
    else:
        shuffled = _mean_free(shuffled, 0) + 0.01 * rng.standard_normal(shuffled.shape)
        st, pos = _stats(x, np.arange(40), {"bank_rows": shuffled})
        assert sc.reliability(sc._ref_halves(st["test"], pos, "cols")) >= sc.RELIABILITY
        assert sc.reliability(st["bank_rows"].halves("cols")) < sc.RELIABILITY
        # a bank that cannot be judged does not stop the other bank's check
        cpull = rng.standard_normal(40)
        x2 = x + 0.3 * cpull[:, None]
        bank_cols = rng.standard_normal((60, 40)) / 4 + 0.3 * cpull[None, :]
        st, pos = _stats(x2, np.arange(40), {"bank_rows": shuffled, "bank_cols": bank_cols[:, rng.permutation(40)]})
        got = _findings(_folder(), st, pos)
        assert len(got) == 1 and got[0].startswith("bank_cols.npy (bank_cols, bank columns x test rows) does not")
        st, pos = _stats(x, np.arange(40), {"bank_rows": shuffled})
    assert _findings(_folder(), st, pos) == []


@pytest.mark.parametrize("side", ["bank", "bank x bank"])
def test_a_bank_by_bank_matrix_is_not_compared_where_either_sides_means_carry_no_order(side):
    x, bank_rows, bank_cols, bb, rng = _captions_items(seed=1)
    other = bb[rng.permutation(60)]
    assert len(_findings(_folder(), *_stats(x, np.arange(40), {"bank_rows": bank_rows, "bank_rows_x_bank_cols":
                                                                 other}))) == 1   # both ordered: named
    if side == "bank":
        bank_rows = _mean_free(bank_rows, 1) + 0.01 * rng.standard_normal(bank_rows.shape)
    else:
        other = _mean_free(other, 1) + 0.01 * rng.standard_normal(other.shape)
    st, pos = _stats(x, np.arange(40), {"bank_rows": bank_rows, "bank_rows_x_bank_cols": other})
    gated = st["bank_rows"].halves("rows") if side == "bank" else st["bank_rows_x_bank_cols"].halves("rows")
    assert sc.reliability(gated) < sc.RELIABILITY
    assert not any("bank_rows_x_bank_cols" in f for f in _findings(_folder(), st, pos))


def test_rows_that_share_positive_columns_are_captions_whatever_the_manifest_says():
    rng = np.random.default_rng(2)
    items = rng.standard_normal((20, 16))
    caps = items.repeat(2, axis=0) + 0.3 * rng.standard_normal((40, 16))
    x = caps @ items.T
    labels = np.arange(40) // 2
    swapped = _folder(modalities=("video", "text"))
    got = _findings(swapped, *_stats(x, labels))
    assert got == ["the manifest says the rows of test.npy are video and the columns text, but up to 2 rows share one "
                   "positive column: the rows are the captions. Swap 'modalities' in the manifest (the t2x numbers "
                   "would be labelled x2t)"]
    assert _findings(_folder(modalities=("text", "video")), *_stats(x, labels)) == []
