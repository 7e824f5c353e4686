"""Consistency checks of score matrices: the mistakes people make with released or hand-built similarity matrices.

A score matrix carries no names: a transposed square matrix, positives shifted by one row, a bank matrix from
another split or with its columns in another order, or the test queries handed in as the bank all load as
well-formed arrays and give a wrong R@1 without a word. What gives them away is that the matrices of one task
describe the same items: the statistics below are accumulated during one read of each matrix (for a ``sims:``
folder, the verifying read of each file, :func:`hubnorm.data.sims.scan_npy`; for a
:class:`hubnorm.RetrievalTask` given ``scores=``, :func:`task_findings` when it is built) and compared.

* **raw R@1 against the positives** — at chance level (at most ``CHANCE_FACTOR`` x the R@1 of random scores, plus
  three binomial standard deviations of it), the
  positives do not belong to this matrix (shifted, shuffled, another split; or the importer's test and
  train-test arguments swapped). With one label per row, the R@1 the labels of the neighbouring rows would give
  is computed too (``SHIFT_GAIN`` x as many rows matched, and ``SHIFT_ROWS`` more: the positives are shifted; with
  several captions per item a shift by one row only halves R@1), and a square matrix is read both ways
  (``TRANSPOSE_FACTOR`` x: transposed). A square matrix whose labels are the identity reads the same both ways
  up to the two directions' own difference: its transpose is caught, if at all, by the banks below.
* **the bank describes the test items** — a bank matrix shares an axis with the test matrix (``bank_rows``: the
  test columns; ``bank_cols``: the test rows as its columns); each item's mean score over the bank should rise and
  fall with its mean score over the test queries (the hubness of a target is a property of the target). A
  Pearson correlation below ``AGREEMENT`` (with at least ``MIN_BANK`` bank rows) means the bank's columns are not
  the test items in the test matrix's order. Means *equal* to rounding mean the bank *is* the test set: a
  query-aware (transductive) fit that would not be labelled as one.
* **the bank x bank matrix describes the bank items** — its row (column) means against the row means of
  ``bank_rows`` (``bank_cols``): the same bank items, scored against the other modality's items.
* **the roles of rows and columns** — one positive column per row, with several rows sharing a column, makes the
  rows the captions; a manifest that calls them video, image or audio has its modalities swapped.

Each finding names what is wrong and the fix: a :class:`~hubnorm.data.sims.SimsError` for a folder
(``load_sims(..., consistency=False)``, for an input that is right and trips a check, turns them into warnings,
recorded in the folder's ``flags`` so that the results carry them), a ``ValueError`` for a task
(``RetrievalTask(..., check=False)`` skips them). The thresholds are rules stated before looking at any folder
(the correlation was 0.988 for right folders and at most 0.23 for mismatched ones in the review that asked for
it); ``tests/test_sims_checks.py`` and ``tests/test_task_score_checks.py`` probe them with realistic mistakes.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

#: fewer test rows or columns than this: no statistic is read (too few items to tell right from wrong)
MIN_ITEMS = 20
#: fewer bank rows than this: a bank's column means are too noisy to correlate
MIN_BANK = 50
#: a bank's per-item means correlating below this with the test matrix's: the bank describes other items
AGREEMENT = 0.5
#: raw R@1 at most this multiple of chance: the positives do not match the matrix
CHANCE_FACTOR = 2.0
#: the labels of the neighbouring rows matching this many times as many rows (and SHIFT_ROWS more): shifted
SHIFT_GAIN = 1.25
SHIFT_ROWS = 10
#: a per-item mean whose two halves (even and odd rows, or columns) agree less than this (split-half reliability,
#: Spearman-Brown corrected) carries no item order to compare: the bank checks then cannot tell and say nothing
#: (centred embeddings, whose items all score about zero on average; random scores; a handful of rows)
RELIABILITY = 0.5
#: the transpose matching this many times as many rows: transposed (a right square folder's two directions can
#: differ by half again: published t2v and v2t R@1 are within a factor of 1.6 of each other)
TRANSPOSE_FACTOR = 3.0


def at_chance(r1: float, chance: float, n_rows: int) -> bool:
    """Whether a raw R@1 of ``r1`` over ``n_rows`` queries is at chance level: at most :data:`CHANCE_FACTOR` x the
    R@1 ``chance`` of random scores, plus three binomial standard deviations of it (the pairs or positives do not
    belong to the scores). The one rule of the score matrices' checks and of a local folder's pairs
    (:func:`hubnorm.data.local.read_local`)."""
    return r1 <= CHANCE_FACTOR * chance + 3.0 * np.sqrt(chance * (1.0 - chance) / n_rows)


class MatrixStats:
    """Row and column sums and maxima of one matrix, accumulated from blocks of whole rows (float64)."""

    def __init__(self, shape: Tuple[int, int]):
        rows, cols = shape
        self.shape = (rows, cols)
        self.row_sum = np.zeros(rows)
        self.row_max = np.full(rows, -np.inf)
        self.col_sum = np.zeros(cols)
        self.col_max = np.full(cols, -np.inf)
        self.row_sum_even = np.zeros(rows)   # over the even columns: the two halves of a row's mean
        self.col_sum_even = np.zeros(cols)   # over the even rows
        self.hooks = []

    def __call__(self, r0: int, x: np.ndarray) -> None:
        r1 = r0 + x.shape[0]
        self.row_sum[r0:r1] = x.sum(axis=1)
        self.row_max[r0:r1] = x.max(axis=1)
        self.row_sum_even[r0:r1] = x[:, 0::2].sum(axis=1)
        self.col_sum += x.sum(axis=0)
        self.col_sum_even += x[r0 % 2::2].sum(axis=0)
        np.maximum(self.col_max, x.max(axis=0), out=self.col_max)
        for hook in self.hooks:
            hook(r0, x)

    @property
    def row_mean(self) -> np.ndarray:
        return self.row_sum / self.shape[1]

    @property
    def col_mean(self) -> np.ndarray:
        return self.col_sum / self.shape[0]

    def halves(self, axis: str) -> Tuple[np.ndarray, np.ndarray]:
        """Each row's (``axis="rows"``) or column's mean over the even and over the odd columns (rows)."""
        if axis not in ("rows", "cols"):
            raise ValueError(f"axis must be 'rows' or 'cols'; got {axis!r}")
        n = self.shape[1] if axis == "rows" else self.shape[0]
        total, even = (self.row_sum, self.row_sum_even) if axis == "rows" else (self.col_sum, self.col_sum_even)
        return even / max((n + 1) // 2, 1), (total - even) / max(n // 2, 1)


class PositiveScores:
    """A hook of the test matrix's :class:`MatrixStats`: the best positive score of every row as given, as the
    neighbouring rows' labels would give it (one label per row), and as the transpose would (a square matrix)."""

    SHIFTS = (-1, 1)

    def __init__(self, rows: np.ndarray, cols: np.ndarray, shape: Tuple[int, int], labels: Optional[np.ndarray]):
        self.rows, self.cols, self.shape = rows, cols, shape
        n_rows, n_cols = shape
        self.best = np.full(n_rows, -np.inf)
        self.labels = labels
        self.shifted = {s: np.full(n_rows, -np.inf) for s in self.SHIFTS} if labels is not None else {}
        self._rolled = {s: np.roll(labels, -s) for s in self.shifted}   # row i takes the label of row i + s
        self.square = n_rows == n_cols
        self.best_t = np.full(n_cols, -np.inf) if self.square else None
        self.pos_row_sum, self.pos_col_sum = np.zeros(n_rows), np.zeros(n_cols)   # the positives' share of the sums
        self.pos_row_n = np.bincount(rows, minlength=n_rows).astype(np.float64)
        self.pos_col_n = np.bincount(cols, minlength=n_cols).astype(np.float64)
        # ... and of the even halves (a row's positives in even columns, a column's in even rows)
        self.pos_row_sum_even, self.pos_col_sum_even = np.zeros(n_rows), np.zeros(n_cols)
        self.pos_row_n_even = np.bincount(rows[cols % 2 == 0], minlength=n_rows).astype(np.float64)
        self.pos_col_n_even = np.bincount(cols[rows % 2 == 0], minlength=n_cols).astype(np.float64)
        self._row_order = np.argsort(rows, kind="stable")   # the pairs by row, and their rows sorted: computed once,
        self._rows_sorted = rows[self._row_order]           # searched per block
        self._col_order = np.argsort(cols, kind="stable")
        self._cols_sorted = cols[self._col_order]

    def __call__(self, r0: int, x: np.ndarray) -> None:
        r1 = r0 + x.shape[0]
        lo, hi = np.searchsorted(self._rows_sorted, (r0, r1))
        sel = self._row_order[lo:hi]
        vals = x[self.rows[sel] - r0, self.cols[sel]]
        np.maximum.at(self.best, self.rows[sel], vals)
        np.add.at(self.pos_row_sum, self.rows[sel], vals)
        np.add.at(self.pos_col_sum, self.cols[sel], vals)
        even_col, even_row = self.cols[sel] % 2 == 0, self.rows[sel] % 2 == 0
        np.add.at(self.pos_row_sum_even, self.rows[sel][even_col], vals[even_col])
        np.add.at(self.pos_col_sum_even, self.cols[sel][even_row], vals[even_row])
        for s, out in self.shifted.items():
            out[r0:r1] = x[np.arange(r1 - r0), self._rolled[s][r0:r1]]
        if self.square:   # the pairs whose column index falls in this block of rows: read as the transpose
            lo, hi = np.searchsorted(self._cols_sorted, (r0, r1))
            sel = self._col_order[lo:hi]
            np.maximum.at(self.best_t, self.rows[sel], x[self.cols[sel] - r0, self.rows[sel]])


def _corr(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a - a.mean(), b - b.mean()
    den = float(np.sqrt((a * a).sum() * (b * b).sum()))
    return float((a * b).sum() / den) if den > 0 else float("nan")


def reliability(halves: Tuple[np.ndarray, np.ndarray]) -> float:
    """Split-half reliability of a per-item mean: the correlation of its two halves, Spearman-Brown corrected
    (``2 r / (1 + r)``; 0 when they do not agree at all, nan when constant)."""
    r = _corr(*halves)
    return 2.0 * r / (1.0 + r) if r > 0 else (0.0 if r <= 0 else float("nan"))


def _ref_mean(test: MatrixStats, pos: PositiveScores, axis: str) -> np.ndarray:
    """The test items' per-item mean over the queries they do not match (``axis="cols"``: each column over its
    non-positive rows; ``"rows"``: each row over its non-positive columns): what a bank's items are compared with."""
    n_rows, n_cols = test.shape
    if axis == "cols":
        return (test.col_sum - pos.pos_col_sum) / np.maximum(n_rows - pos.pos_col_n, 1)
    return (test.row_sum - pos.pos_row_sum) / np.maximum(n_cols - pos.pos_row_n, 1)


def _ref_halves(test: MatrixStats, pos: PositiveScores, axis: str) -> Tuple[np.ndarray, np.ndarray]:
    """The test items' per-item mean over the queries they do not match (``axis="cols"``: each column over its
    non-positive rows; ``"rows"``: each row over its non-positive columns), split into its even and odd halves."""
    n_rows, n_cols = test.shape
    if axis == "cols":
        tot, even, ptot, peven = test.col_sum, test.col_sum_even, pos.pos_col_sum, pos.pos_col_sum_even
        n_even, n_odd, pn, pn_even = (n_rows + 1) // 2, n_rows // 2, pos.pos_col_n, pos.pos_col_n_even
    else:
        tot, even, ptot, peven = test.row_sum, test.row_sum_even, pos.pos_row_sum, pos.pos_row_sum_even
        n_even, n_odd, pn, pn_even = (n_cols + 1) // 2, n_cols // 2, pos.pos_row_n, pos.pos_row_n_even
    return ((even - peven) / np.maximum(n_even - pn_even, 1),
            (tot - even - (ptot - peven)) / np.maximum(n_odd - (pn - pn_even), 1))


#: (bank role, the test axis it shares: "cols" = its columns are the test columns, "rows" = its columns are the
#: test rows); what the message calls the bank
BANK_AXES = (("bank_rows", "cols", "bank rows x test columns"), ("bank_cols", "rows", "bank columns x test rows"))


def findings(stats: Dict[str, MatrixStats], pos: PositiveScores, names: Mapping[str, str], *, transpose_fix: str,
             modalities: Optional[Sequence[str]] = None, kind: str = "folder") -> List[str]:
    """What is wrong with the matrices of ``stats`` (roles ``test``, ``bank_rows``, ``bank_cols``,
    ``bank_rows_x_bank_cols``; ``names``: how a message names each), messages naming the matrix and the fix
    (``transpose_fix``: how to give a transposed test matrix the right way; ``modalities``: of a folder's rows and
    columns, for the roles check; ``kind``: ``"folder"`` (files and a manifest) or ``"task"`` (matrices in a
    ``RetrievalTask``), for the words of the messages); empty when nothing is. A bank whose per-item means, or the
    test matrix's, are not reliable (:data:`RELIABILITY`) is not compared: nothing can be told from them."""
    out: List[str] = []
    folder = kind == "folder"
    test = stats["test"]
    n_rows, n_cols = test.shape
    if min(n_rows, n_cols) < MIN_ITEMS:
        return out
    name = names["test"]
    per_row = len(pos.rows) / n_rows
    chance = min(1.0, per_row / n_cols)
    r1 = float(np.mean(pos.best >= test.row_max))
    for s, scores in pos.shifted.items():
        alt = float(np.mean(scores >= test.row_max))
        if alt >= SHIFT_GAIN * r1 and (alt - r1) * n_rows >= SHIFT_ROWS and alt > CHANCE_FACTOR * chance:
            out.append(f"the positives look shifted: raw R@1 is {100 * r1:.1f} with the given labels and "
                       f"{100 * alt:.1f} when row i takes the label of row i{s:+d}; fix the positives"
                       f"{' file' if folder else ''} so that entry i is the column of row i of {name}")
            return out
    if pos.square:
        alt = float(np.mean(pos.best_t >= test.col_max))
        if alt >= TRANSPOSE_FACTOR * r1 and alt > CHANCE_FACTOR * chance:
            out.append(f"{name} looks transposed: raw R@1 is {100 * r1:.1f} as given and {100 * alt:.1f} read the "
                       f"other way; {transpose_fix}")
            return out
    if at_chance(r1, chance, n_rows):
        out.append(f"raw R@1 of {name} is {100 * r1:.1f}, at chance level ({100 * chance:.2f} for random scores): "
                   "the positives do not belong to this matrix (shifted or shuffled rows, another split, or test and "
                   f"bank {'files' if folder else 'matrices'} swapped); check that row i of the positives is row i of "
                   "the test matrix")
    right = "right folders" if folder else "right matrices"
    for role, axis, what in BANK_AXES:
        bank = stats.get(role)
        if bank is None or bank.shape[0] < MIN_BANK:
            continue
        bname, tag = names[role], (f" ({role})" if folder else "")
        halves = _ref_halves(test, pos, axis)   # the test items' mean score over the queries they do not match
        ref = _ref_mean(test, pos, axis)
        full = test.col_mean if axis == "cols" else test.row_mean
        got = bank.col_mean
        if got.shape == full.shape and np.allclose(got, full, rtol=0, atol=1e-9 * max(1.0, float(np.abs(full).max()))):
            out.append(f"{bname}{tag} holds the test queries themselves: every item's mean bank score equals its "
                       "mean test score. A bank of the test queries is a query-aware (transductive) fit: give a bank "
                       "from the training split, or fit with query_aware=True so that the results say so")
            continue
        if not (reliability(halves) >= RELIABILITY and reliability(bank.halves("cols")) >= RELIABILITY):
            continue   # the items' means carry no order to compare (centred scores, noise): nothing to tell
        c = _corr(got, ref)
        if not c >= AGREEMENT and pos.square:   # a square test matrix may be the transpose of the bank's items
            other = _ref_mean(test, pos, "rows" if axis == "cols" else "cols")
            c_t = _corr(got, other)
            if c_t >= AGREEMENT:
                out.append(f"{name} looks transposed: {bname}{tag} describes the test matrix's "
                           f"{'rows' if axis == 'cols' else 'columns'} (correlation {c_t:.2f}), not its "
                           f"{'columns' if axis == 'cols' else 'rows'} ({c:.2f}); {transpose_fix}")
                return out
        if not c >= AGREEMENT:
            out.append(f"{bname}{f' ({role}, {what})' if folder else ''} does not describe the test items: the "
                       f"correlation of each item's mean bank score with its mean test score is {c:.2f} ({right}: "
                       f"above {AGREEMENT}). Its columns must be the test matrix's items in the same order, scored by "
                       f"the same model: fix the order or {'export' if folder else 'score'} the bank again")
    bb = stats.get("bank_rows_x_bank_cols")
    for role, axis in (("bank_rows", "rows"), ("bank_cols", "cols")) if bb is not None else ():
        bank = stats.get(role)   # the bank items' mean scores over the test items and over the other bank
        if bank is None or bank.shape[0] < MIN_BANK:
            continue
        if not (reliability(bank.halves("rows")) >= RELIABILITY and reliability(bb.halves(axis)) >= RELIABILITY):
            continue
        c = _corr(bank.row_mean, bb.row_mean if axis == "rows" else bb.col_mean)
        if not c >= AGREEMENT:
            bname = names["bank_rows_x_bank_cols"]
            tags = (" (bank_rows_x_bank_cols)", f" ({role})") if folder else ("", "")
            out.append(f"{bname}{tags[0]} does not describe the bank items of {names[role]}{tags[1]}: the "
                       f"correlation of each bank item's mean score in the two is {c:.2f} ({right}: above "
                       f"{AGREEMENT}). Its {axis} must be the rows of {names[role]}, in the same order"
                       + (" (or the whole folder is transposed and the manifest's modalities are swapped)" if folder
                          else ""))
    if (modalities is not None and pos.labels is not None and n_rows > n_cols and modalities[1] == "text"
            and modalities[0] != "text"):
        shared = np.bincount(pos.labels, minlength=n_cols).max()
        if shared > 1:
            out.append(f"the manifest says the rows of {name} are {modalities[0]} and the columns text, but up "
                       f"to {shared} rows share one positive column: the rows are the captions. Swap 'modalities' "
                       "in the manifest (the t2x numbers would be labelled x2t)")
    return out


#: a task's score matrices by the roles of :func:`findings`: the test matrix, the query bank x targets matrix (its
#: columns are the test columns) and the query bank x target bank matrix (its rows are the query bank's)
TASK_ROLES = {"test": ("queries", "targets"), "bank_rows": ("query_bank", "targets"),
              "bank_rows_x_bank_cols": ("query_bank", "target_bank")}


def task_findings(matrices: Mapping[str, object], pairs: Tuple[np.ndarray, np.ndarray],
                  labels: Optional[np.ndarray], *, names: Optional[Mapping[str, str]] = None,
                  rows_per_block: Optional[int] = None) -> List[str]:
    """:func:`findings` of a task's score matrices (``matrices``: role of :data:`TASK_ROLES` -> a
    :class:`hubnorm.matrices.ScoreMatrix`, read once in blocks of whole rows, float64), named by ``names`` (the
    keys the user gave in ``RetrievalTask(scores=...)``; default: the roles' keys); ``pairs``: the (row, column)
    of every positive; ``labels``: each row's one positive column (None when a row has several: the shift check
    needs one label per row). A non-finite score stops the read (the matrix's own check)."""
    import torch

    stats: Dict[str, MatrixStats] = {}
    pos = None
    for role, m in matrices.items():
        n_rows, n_cols = m.shape
        stats[role] = MatrixStats((n_rows, n_cols))
        if role == "test":
            pos = PositiveScores(*pairs, (n_rows, n_cols), labels)
            stats[role].hooks.append(pos)
        step = rows_per_block or max(1, (1 << 22) // max(1, n_cols))
        for r0 in range(0, n_rows, step):
            stats[role](r0, m.block(r0, min(n_rows, r0 + step), 0, n_cols, torch.float64).numpy())
    names = names or {role: f"scores[{TASK_ROLES[role]!r}]" for role in matrices}
    return findings(stats, pos, names, kind="task", transpose_fix="give it the other way round (S.T under its key, or "
                    "S under the swapped key): the test matrix's rows must be the queries and its columns the targets")


__all__ = ["MatrixStats", "PositiveScores", "findings", "task_findings", "TASK_ROLES", "MIN_ITEMS", "MIN_BANK",
           "AGREEMENT", "CHANCE_FACTOR", "SHIFT_GAIN", "SHIFT_ROWS", "TRANSPOSE_FACTOR", "BANK_AXES"]
