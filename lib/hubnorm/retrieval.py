"""One retrieval model for every direction and for both kinds of input.

A :class:`RetrievalTask` holds the test queries, the gallery (targets), which targets are correct for each
query (:class:`Positives`, several per query allowed), and the optional reference banks, either as embeddings or
as score matrices (``scores=``: what video and audio work usually releases); fitting, scoring and every measure
run the same way on both (``task.fit``, ``task.blocks``, :func:`hubnorm.evaluate`). Text-to-image and
image-to-text tasks are both built from (image embeddings, caption embeddings, caption-to-image index) by
:func:`build_tasks`; the caption-to-image index is explicit because COCO's Karpathy test split has 10 images
with 6 captions (never assume ``caption // 5``); :func:`hubnorm.scores.sims_tasks` builds both directions of a
folder of score matrices.

Conventions (docs/methods.md): t2i queries are captions and targets images; its query bank is training captions and
its target bank training images. For i2t the roles swap.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch

from ._validation import ArrayLike, as_embeddings, check_chunk_size, check_fraction
from .blocks import Embeddings
from .engine import LocalEngine
from .kernels import block_rows, iter_blocks
from .matrices import Pair, ProductScores, ScoreMatrix

#: The image-text directions (what :func:`build_tasks` builds from images, captions and their index).
DIRECTIONS = ("t2i", "i2t")
#: The modalities and the letters that name them in a direction.
MODALITY_LETTERS = {"text": "t", "image": "i", "video": "v", "audio": "a"}
#: What the items of a modality are called in a run label's sizes ("200 test clips").
ITEM_NOUNS = {"image": "images", "video": "videos", "audio": "clips"}
#: Every direction name a task may carry (query modality first): text-image, text-video, text-audio each way,
#: then the pairs without text (a sims folder may hold video x audio scores).
DIRECTION_NAMES = ("t2i", "i2t", "t2v", "v2t", "t2a", "a2t") + tuple(
    f"{a}2{b}" for a in "iva" for b in "iva" if a != b)


def check_direction(direction) -> str:
    """``direction`` if it is one of :data:`DIRECTION_NAMES`, else a ValueError naming them."""
    if not isinstance(direction, str) or direction not in DIRECTION_NAMES:
        raise ValueError(f"direction must be one of {', '.join(DIRECTION_NAMES)} (query modality first: t2v is "
                         f"text-to-video; letters {MODALITY_LETTERS}); got {direction!r}")
    return direction


@dataclass(frozen=True)
class Positives:
    """The positive targets of every query, in CSR form: query ``i`` owns ``indices[indptr[i]:indptr[i+1]]``."""

    indptr: np.ndarray
    indices: np.ndarray
    n_targets: int

    def __post_init__(self):
        indptr = _as_int64(self.indptr, "Positives.indptr")
        indices = _as_int64(self.indices, "Positives.indices")
        if isinstance(self.n_targets, bool) or not isinstance(self.n_targets, (int, np.integer)) or self.n_targets < 1:
            raise TypeError(f"Positives.n_targets must be a positive integer; got {self.n_targets!r}")
        object.__setattr__(self, "n_targets", int(self.n_targets))
        if indptr.ndim != 1 or indptr.size < 1 or indptr[0] != 0 or np.any(np.diff(indptr) < 0) or indptr[-1] != indices.size:
            raise ValueError("Positives.indptr must start at 0, never decrease, and end at len(indices)")
        if np.any(np.diff(indptr) == 0):
            empty = int(np.flatnonzero(np.diff(indptr) == 0)[0])
            raise ValueError(f"query {empty} has no positive target: every query needs at least one")
        if indices.size and (indices.min() < 0 or indices.max() >= self.n_targets):
            raise ValueError(f"positive target indices must lie in [0, {self.n_targets}); got range [{indices.min()}, {indices.max()}]")
        object.__setattr__(self, "indptr", indptr)
        object.__setattr__(self, "indices", indices)

    @property
    def n_queries(self) -> int:
        return self.indptr.size - 1

    def __len__(self) -> int:
        return self.n_queries

    def of(self, i: int) -> np.ndarray:
        return self.indices[self.indptr[i]:self.indptr[i + 1]]

    @property
    def query_of_entry(self) -> np.ndarray:
        """For every entry of ``indices``, the query it belongs to."""
        return np.repeat(np.arange(self.n_queries), np.diff(self.indptr))

    @classmethod
    def from_labels(cls, labels: ArrayLike, n_targets: Optional[int] = None) -> "Positives":
        """One positive per query: ``labels[i]`` is the target of query ``i`` (t2i: caption -> image)."""
        labels = as_index_array(labels, "labels")
        n = int(labels.max()) + 1 if n_targets is None else int(n_targets)
        return cls(np.arange(labels.size + 1), labels, n)

    @classmethod
    def from_groups(cls, owner: ArrayLike, n_queries: int) -> "Positives":
        """Many positives per query: target ``j`` belongs to query ``owner[j]`` (i2t: caption j -> image owner[j])."""
        owner = as_index_array(owner, "owner")
        if owner.max() >= n_queries:
            raise ValueError(f"owner index {owner.max()} is out of range for {n_queries} queries")
        order = np.argsort(owner, kind="stable")
        counts = np.bincount(owner, minlength=n_queries)
        return cls(np.concatenate([[0], np.cumsum(counts)]), order, owner.size)

    @classmethod
    def from_lists(cls, lists: Sequence[Sequence[int]], n_targets: int) -> "Positives":
        lens = [len(x) for x in lists]
        indices = np.concatenate([_as_int64(np.asarray(x).reshape(-1), "lists") for x in lists]) if lists \
            else np.zeros(0, np.int64)
        return cls(np.concatenate([[0], np.cumsum(lens, dtype=np.int64)]), indices, n_targets)   # [] too

    def subset(self, queries: ArrayLike) -> "Positives":
        """The positives of a subset of queries (same targets)."""
        q = _as_int64(queries, "queries")
        if q.size and (q.min() < 0 or q.max() >= self.n_queries):
            raise ValueError(f"queries must lie in [0, {self.n_queries}); got range [{q.min()}, {q.max()}]")
        return Positives.from_lists([self.of(i) for i in q], self.n_targets)


def _as_int64(x, name: str) -> np.ndarray:
    """``x`` as an int64 array; floats are refused (never truncated: 0.9 is not target 0)."""
    arr = x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold integers; got dtype {arr.dtype}. Float indices are never truncated: "
                        f"convert exact integral values with .astype(np.int64) after checking them")
    return arr.astype(np.int64)


def as_index_array(x: ArrayLike, name: str) -> np.ndarray:
    """``x`` as a non-empty 1-D int64 array of indices >= 0 (a numpy array, a tensor or a list); floats are
    refused, never truncated. The one check of every label, owner and index array of a task's positives."""
    arr = x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array of integer indices; got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold integers; got dtype {arr.dtype}")
    if arr.min() < 0:
        raise ValueError(f"{name} must be >= 0; got {arr.min()}")
    return arr.astype(np.int64)


_INPUTS = ("queries", "targets", "query_bank", "target_bank")
#: the test score matrix of a task given as scores
TEST = ("queries", "targets")
#: How far a stored score matrix may differ from the product of embeddings the task also holds, relative to the
#: largest score (a float16 copy of a cosine matrix differs by < 5e-4; another model or order of items by far more).
#: Set from float16 rounding before any data was looked at.
AGREEMENT = 2e-3


@dataclass
class RetrievalTask:
    """Queries, targets, positives, and the reference banks of one retrieval direction, as embeddings or as score
    matrices.

    **Embeddings**: ``queries`` (m x d), ``targets`` (n x d), optional ``query_bank`` / ``target_bank``: reference
    items of the query / target modality (t2i: training captions / training images).

    **Score matrices** (``scores=``): ``{(rows, cols): matrix}`` named by those four inputs:
    ``("queries", "targets")`` is the test score matrix (required), ``("query_bank", "targets")`` the bank-query x
    gallery scores (QB-Norm's "training captions x test videos"), ``("query_bank", "target_bank")`` the bank x bank
    scores (DBSN's extra columns), ``("target_bank", "targets")`` the target-bank x gallery scores (DualIS's
    intra-modal factor); a matrix given for ``(a, b)`` also serves ``(b, a)``, read transposed block by block.
    numpy arrays, ``np.load(..., mmap_mode="r")`` memory maps, torch tensors and :class:`hubnorm.matrices
    .ScoreMatrix` / :class:`~hubnorm.matrices.ProductScores` are read block by block by one
    :class:`hubnorm.engine.LocalEngine` (``dtype``: how blocks are read; ``block_bytes``, ``resident_bytes``,
    ``plain``: its memory budget, copies and plain loops; ``hints``: what an error about a missing matrix adds).
    Every method whose fit reads only scores (:mod:`hubnorm.blocks`) fits from them; one that reads embeddings
    (DN) is refused with a ``ValueError`` naming them. ``check``: the matrices are read once as the task is built
    and refused with a ``ValueError`` when they look wrong (:mod:`hubnorm.score_checks`: a transposed square test
    matrix, shifted or shuffled positives, a bank matrix of other items (judged where the items' mean scores carry
    an order) or of the test queries themselves: the checks a ``sims:`` folder gets as it is read); ``check=False``
    skips that read (matrices already checked).

    **Both**: embeddings of some inputs beside matrices of some pairs (a folder of released scores with the
    queries' embeddings, a bank too large to embed again given as stored scores): a pair whose two inputs are held as
    embeddings is scored as their product, any other pair from its stored matrix, and a method that reads
    embeddings (DN) runs when the task holds the ones it reads. A stored matrix of a pair also held as embeddings
    must be their product: ``check`` compares 64 whole rows and every row's mean (:data:`AGREEMENT`) and refuses
    another model or order. Embeddings beside matrices are held, fitted and scored in the task's ``dtype``.
    ``positives``: the positive targets of every query (:class:`Positives`, several per query allowed).
    ``direction``: any of :data:`DIRECTION_NAMES` (``t2i``, ``i2t``, ``t2v``, ``v2t``, ``t2a``, ``a2t``): the
    arithmetic is the same for every modality pair, the name labels the results.
    ``meta`` carries free-form labels (dataset, source: "synthetic" or "real", split, model). ``block_bytes`` also
    sizes the row blocks of the raw scores of a task of embeddings (a normalizer's blocks follow its own
    ``chunk_size`` / ``block_bytes``).

    The one way through a task: ``task.fit(normalizer)`` then ``hubnorm.evaluate(normalizer, task)``;
    ``task.blocks(normalizer)`` streams the (normalised) test scores for any other measure
    (``hubnorm.k_occurrence(task.blocks(normalizer), 10)``).
    """

    queries: Optional[np.ndarray] = None
    targets: Optional[np.ndarray] = None
    positives: Optional[Positives] = None
    query_bank: Optional[np.ndarray] = None
    target_bank: Optional[np.ndarray] = None
    direction: str = "t2i"
    meta: Dict[str, object] = field(default_factory=dict)
    _: KW_ONLY
    scores: Optional[Mapping[Pair, object]] = None
    hints: Dict[Pair, str] = field(default_factory=dict)
    dtype: torch.dtype = torch.float64
    block_bytes: Optional[int] = None
    resident_bytes: Optional[int] = None
    plain: bool = False
    check: bool = True

    def __post_init__(self):
        check_direction(self.direction)
        if not isinstance(self.check, (bool, np.bool_)):
            raise TypeError(f"check must be True or False; got {self.check!r}")
        if not isinstance(self.positives, Positives):
            raise TypeError("positives must be a hubnorm.Positives (use Positives.from_labels / from_groups / "
                            f"hubnorm.positives_from_pairs); got {type(self.positives).__name__}")
        held = self._check_embeddings()
        if self.scores is not None:
            self._init_scores(held)
        elif self.queries is None or self.targets is None:
            raise ValueError("a task needs the test queries and targets as embeddings (queries=, targets=) or "
                             "the test score matrix (scores={('queries', 'targets'): S_test, ...})")
        else:
            self.engine = None
        m, n = self.n_queries, self.n_targets
        what = f"{self.matrix(*TEST).label} is" if self.engine is not None else "the embeddings are"
        if self.positives.n_queries != m or self.positives.n_targets != n:
            raise ValueError(f"positives are {self.positives.n_queries} queries x {self.positives.n_targets} targets "
                             f"but {what} {m} queries x {n} targets: pass the positives of these queries and targets")

    def _check_embeddings(self) -> Dict[str, torch.Tensor]:
        """The embeddings the task holds, checked (2-D, finite, normalised rows, one dimension), as CPU tensors."""
        held, dim = {}, None
        for name in _INPUTS:
            x = getattr(self, name)
            if x is not None:
                held[name] = as_embeddings(x, name, device="cpu", dim=dim)
                dim = held[name].shape[1]
        return held

    def _init_scores(self, held: Mapping[str, torch.Tensor]) -> None:
        if not isinstance(self.scores, Mapping):
            raise TypeError(f"scores must be a dict {{(rows, cols): matrix}}; got {type(self.scores).__name__}")
        if TEST not in self.scores and TEST[::-1] not in self.scores and not all(n in held for n in TEST):
            raise ValueError("a task given as scores needs the test score matrix (queries x targets), or the queries "
                             "and targets as embeddings: pass scores={('queries', 'targets'): S_test, ...}")
        inputs = {name: x.to(self.dtype) for name, x in held.items()}
        self.engine = LocalEngine(inputs, matrices=self.scores, dtype=self.dtype, block_bytes=self.block_bytes,
                                  hints=self.hints, plain=self.plain, resident_bytes=self.resident_bytes,
                                  gallery=self.targets)   # what identifies the gallery without a stored test matrix
        if self.check:
            self._check_agreement()
            self._check_scores()

    def disagreements(self, pairs: Optional[Sequence[Pair]] = None) -> List[Tuple[Pair, float]]:
        """The stored matrices (of ``pairs``, default all) of two inputs the task also holds as embeddings that are not
        their product (the
        product is what every fit and score then reads), each with the largest difference found: compared on up to
        64 evenly spaced whole rows (another order of the columns, another model, other normalisation) and on every
        row's mean (one pass over the matrix: another order of the rows). Matrices that agree within
        :data:`AGREEMENT` of the largest score always pass (a mean is off by at most the largest cell's error)."""
        out = []
        for (rows, cols), stored in (self.engine.matrices if self.engine is not None else {}).items():
            if not self._product(rows, cols) or (pairs is not None and (rows, cols) not in pairs):
                continue
            product = self.matrix(rows, cols)
            m, n = stored.shape
            pick = np.unique(np.linspace(0, m - 1, min(64, m)).round().astype(np.int64))
            got = stored.take(rows=pick).block(0, pick.size, 0, n, torch.float64)
            want = product.take(rows=pick).block(0, pick.size, 0, n, torch.float64)
            gap = float((got - want).abs().max())
            row_means = torch.cat([stored.block(r0, r1, 0, n, torch.float64).mean(dim=1)
                                   for r0, r1 in iter_blocks(m, block_rows(n, 8, self.block_bytes))])
            a, b = (torch.as_tensor(x, dtype=torch.float64) for x in (product.a, product.b))
            gap = max(gap, float((row_means - a @ b.mean(dim=0)).abs().max()))
            if gap > AGREEMENT * max(1.0, float(product.bound)):
                out.append(((rows, cols), gap))
        return out

    def _check_agreement(self) -> None:
        """A ValueError naming the first of :meth:`disagreements` (run as the task is built with ``check``)."""
        for (rows, cols), gap in self.disagreements():
            raise ValueError(f"scores[{(rows, cols)!r}] differs from the product of the {rows} and {cols} embeddings "
                             f"the task also holds, by up to {gap:.3g}: both must score the same items in the same "
                             "order with the same model (a transposed, shuffled or unnormalised matrix?); pass one "
                             "of the two (the product is what the task reads), or check=False if the difference "
                             "is meant")

    def _check_scores(self) -> None:
        """The consistency checks of :mod:`hubnorm.score_checks` on the test and bank score matrices (one read of
        each): a transposed square test matrix, shifted or shuffled positives, a bank matrix of other items or of the
        test queries themselves. A ValueError names what is wrong and the fix."""
        from .score_checks import TASK_ROLES, task_findings

        mats = {role: self.matrix(*pair) for role, pair in TASK_ROLES.items() if self.can_score(*pair)}
        if mats["test"].shape != (self.positives.n_queries, self.positives.n_targets):
            return   # __post_init__ names the mismatch of positives and matrix
        names = {role: mats[role].label if self._product(*pair) else f"scores[{pair!r}]"
                 if pair in self.engine.matrices else f"scores[{pair[::-1]!r}] (read transposed)"
                 for role, pair in TASK_ROLES.items() if role in mats}
        one_each = bool(np.all(np.diff(self.positives.indptr) == 1))
        pairs = (self.positives.query_of_entry, self.positives.indices)
        found = task_findings(mats, pairs, self.positives.indices if one_each else None, names=names)
        if found:
            raise ValueError(f"the score matrices of this {self.direction} task look wrong: " + "; and ".join(found)
                             + ". If they are right, build the task with check=False")

    def _product(self, rows: str, cols: str) -> bool:
        """Whether the task scores ``rows x cols`` as the product of embeddings it holds (else a stored matrix)."""
        return getattr(self, rows) is not None and getattr(self, cols) is not None

    def can_score(self, rows: str, cols: str) -> bool:
        """Whether the task can give the ``rows x cols`` scores (embeddings of both, or a stored matrix either way
        round), e.g. a bank x gallery matrix before a method that needs it is fitted."""
        return self._product(rows, cols) or (self.engine is not None and self.engine.has_matrix(rows, cols))

    @property
    def kind(self) -> str:
        """``"embeddings"`` (no stored score matrix: every score is a product of embeddings) or ``"scores"`` (stored
        score matrices, with or without embeddings beside them: read through the task's engine)."""
        return "embeddings" if self.engine is None else "scores"

    def has(self, name: str) -> bool:
        """Whether the task holds the input ``name`` (``"queries"``, ``"targets"``, ``"query_bank"``,
        ``"target_bank"``) as embeddings or in a score matrix: a method that needs a bank asks before it fits."""
        if name not in _INPUTS:
            raise ValueError(f"a task holds the inputs {', '.join(_INPUTS)}; got {name!r}")
        return getattr(self, name) is not None or (self.engine is not None and self.engine.size(name) is not None)

    def gallery(self):
        """What identifies the columns of this task's stored scores: a weak reference to its test matrix (or to its
        targets' embeddings when its test scores are their product), so that score rows fingerprinted over one gallery
        are never compared with score rows over another of the same width (:mod:`hubnorm.provenance`); None for a task
        of embeddings alone."""
        return None if self.engine is None else self.engine.gallery()

    def size(self, name: str) -> Optional[int]:
        """How many items the input ``name`` has (None when the task does not hold it)."""
        if not self.has(name):
            return None
        return len(getattr(self, name)) if self.engine is None else self.engine.size(name)

    def matrix(self, rows: str, cols: str) -> ScoreMatrix:
        """The score matrix ``rows x cols`` (``"queries"``, ``"targets"``, ``"query_bank"``, ``"target_bank"``), read
        block by block when used: the product of their embeddings when the task holds both
        (:class:`~hubnorm.matrices.ProductScores`), else the stored matrix (read transposed when given as
        ``cols x rows``)."""
        for name in (rows, cols):
            if name not in _INPUTS:
                raise ValueError(f"a task holds the inputs {', '.join(_INPUTS)}; got {name!r}")
        if self.engine is not None:
            return self.engine.matrix(rows, cols)
        for name in (rows, cols):
            if getattr(self, name) is None:
                raise ValueError(f"this task has no {name!r} embeddings; it holds "
                                 f"{[n for n in _INPUTS if getattr(self, n) is not None]}")
        return ProductScores(getattr(self, rows), getattr(self, cols), f"{rows} x {cols} scores")

    @property
    def n_queries(self) -> int:
        return self.size("queries")

    @property
    def n_targets(self) -> int:
        return self.size("targets")

    def fit(self, normalizer, *, query_aware: bool = False):
        """Fit ``normalizer`` on this task's gallery and banks and return it; ``query_aware=True`` uses the test
        queries as the query bank (transductive: label such results; from scores, the test score matrix then
        serves as the bank's). ``None`` (the raw scores, nothing to fit) returns None, so that
        ``hubnorm.evaluate(task.fit(method), task)`` reads the same for every row of a table."""
        if not isinstance(query_aware, (bool, np.bool_)):
            raise TypeError(f"query_aware must be True or False; got {query_aware!r}")
        if normalizer is None:
            return None
        if self.engine is None:
            bank = self.queries if query_aware else self.query_bank
            return normalizer.fit(self.targets, query_bank=bank, target_bank=self.target_bank)
        targets = None if self.targets is None else self.engine.tensor("targets")   # then it scores query embeddings
        return normalizer.fit_engine((self.test_as_bank() if query_aware else self).engine, targets=targets)

    def test_as_bank(self) -> "RetrievalTask":
        """This task of score matrices with its test queries as the query bank: the test scores serve as the bank's
        (and the query embeddings, when the task holds them, as its embeddings), and a matrix of the old query bank
        (a bank x bank matrix) is left out, its rows being other queries (what a query-aware fit reads; a folder
        without bank rows uses it)."""
        if self.engine is None:
            raise ValueError("test_as_bank builds a task of score matrices; a task of embeddings takes "
                             "fit(..., query_aware=True)")
        mats = {k: m for k, m in self.engine.matrices.items() if "query_bank" not in k}
        mats[("query_bank", "targets")] = self.matrix(*TEST)
        return replace(self, query_bank=self.queries, scores=mats, meta=dict(self.meta), hints=dict(self.hints),
                       check=False)

    def bank_subset(self, rows: ArrayLike, bank: str = "query_bank") -> "RetrievalTask":
        """This task with its ``bank`` ("query_bank", or "target_bank") cut to the bank rows ``rows`` (each once, any
        order; kept in sorted order): for embeddings, those rows of that bank; for score matrices, those rows of
        every matrix with that bank on an axis (a stored matrix reads only them), and of its embeddings when the task
        holds them too. The same rows give the same task of either kind."""
        if bank not in ("query_bank", "target_bank"):
            raise ValueError(f"bank must be 'query_bank' or 'target_bank'; got {bank!r}")
        n_bank = self.size(bank)
        if not n_bank:
            roles = "'bank_rows' or 'bank_cols'" if bank == "query_bank" else \
                "'bank_rows_x_bank_cols', 'bank_cols_x_test_cols' or 'bank_rows_x_test_rows'"
            raise ValueError(f"the {self.direction} task has no {bank.replace('_', ' ')} to cut (for score matrices: "
                             f"manifest role {roles})")
        given = as_index_array(rows, "rows")
        rows = np.unique(given)
        if rows.size < given.size:
            raise ValueError(f"rows must name each bank row once; got {given.size - rows.size} repeated (a sample with "
                             "replacement cannot be a bank: draw without replacement)")
        if rows[-1] >= n_bank:
            raise ValueError(f"rows must be bank rows in [0, {n_bank}); got row {rows[-1]}")
        items = getattr(self, bank)
        cut = {} if items is None else {bank: items[torch.as_tensor(rows)] if torch.is_tensor(items) else items[rows]}
        if self.engine is None:
            return replace(self, **cut)
        mats = {}
        for (r, c), m in self.engine.matrices.items():
            if r == bank:
                mats[(r, c)] = m.take(rows=rows)
            elif c == bank:
                mats[(c, r)] = m.T.take(rows=rows)
            else:
                mats[(r, c)] = m
        return replace(self, **cut, scores=mats, meta=dict(self.meta), hints=dict(self.hints), check=False)

    #: rows of the gallery compared at a time by :meth:`_check_fitted_gallery`
    GALLERY_CHECK_ROWS = 65536
    #: the largest difference of one coordinate between the fitted and the task's gallery still taken as the same
    #: row: a float16 copy of a unit vector differs from its float32 original by at most about 5e-4
    GALLERY_ATOL = 2e-3

    def _check_fitted_gallery(self, normalizer) -> None:
        """Refuse a normalizer fitted on *another* gallery of this task's size (the validation images against the
        test images, or this gallery in another order): its offsets belong to the targets it was fitted on, and
        scoring with them would rank this task's targets by another gallery's hubness without a word. Compared when
        both hold the gallery as embeddings (the normalizer's ``targets_``, the task's ``targets``), row block by
        row block, to :data:`GALLERY_ATOL` (a float16 or float32 copy of the same gallery passes)."""
        fitted = getattr(normalizer, "targets_", None)
        mine = self.targets
        if fitted is None or mine is None or fitted is mine:
            return
        n = fitted.shape[0]
        if tuple(fitted.shape) != tuple(np.shape(mine)):
            raise ValueError(f"{type(normalizer).__name__} was fitted on a gallery of shape {tuple(fitted.shape)} but "
                             f"this task's is {tuple(np.shape(mine))}: fit it on this task (task.fit(normalizer))")
        for r0 in range(0, n, self.GALLERY_CHECK_ROWS):
            r1 = min(n, r0 + self.GALLERY_CHECK_ROWS)
            a = fitted[r0:r1].detach().to("cpu", torch.float32)
            b = torch.as_tensor(np.asarray(mine[r0:r1]) if not isinstance(mine, torch.Tensor) else mine[r0:r1]
                                ).to("cpu", torch.float32)
            diff = (a - b).abs().amax(dim=1)
            bad = torch.nonzero(diff > self.GALLERY_ATOL)
            if bad.numel():
                row = r0 + int(bad[0, 0])
                raise ValueError(
                    f"{type(normalizer).__name__} was fitted on another gallery of the same size ({n} targets): its "
                    f"target row {row} differs from this task's (by up to {float(diff.max()):.3g} in one coordinate), "
                    "e.g. fitted on the validation split, or on this gallery in another order. Its offsets belong "
                    "to the gallery it was fitted on: fit it on this task (task.fit(normalizer))")

    def blocks(self, normalizer=None, chunk_size: Optional[int] = None) -> Iterator[Tuple[int, torch.Tensor]]:
        """``(start_row, block)`` of the test scores, normalised by a fitted ``normalizer`` (None: the raw scores),
        row block by row block: the queries' scores from embeddings, or the test score matrix's blocks. A
        normalizer fitted on a gallery of another size is refused, and so is one fitted on other gallery
        embeddings of the same size (:meth:`_check_fitted_gallery`): fit it on the task you score. ``normalizer`` may be any fitted scorer with ``iter_scores``
        (embeddings) or ``normalize_scores`` (score matrices); a :class:`hubnorm.Normalizer` is checked further."""
        chunk_size = check_chunk_size(chunk_size)
        is_normalizer = hasattr(normalizer, "n_fitted_targets")
        if is_normalizer:
            fitted_n = normalizer.n_fitted_targets()
            if fitted_n != self.n_targets:
                raise ValueError(f"{type(normalizer).__name__} was fitted on a gallery of {fitted_n} targets but this "
                                 f"task has {self.n_targets}: fit it on this task (task.fit(normalizer))")
            self._check_fitted_gallery(normalizer)
        if self.engine is None:
            if normalizer is not None:
                if is_normalizer and normalizer.fitted_from_scores():
                    raise ValueError(f"{type(normalizer).__name__} was fitted from score matrices; this task holds "
                                     "embeddings: fit it on this task (task.fit(normalizer)) or score a task of the "
                                     "matrices it was fitted from")
                yield from normalizer.iter_scores(self.queries, chunk_size)
                return
            q, t = (torch.as_tensor(np.asarray(x)) for x in (self.queries, self.targets))
            size = chunk_size or block_rows(t.shape[0], t.element_size(), self.block_bytes)
            for q0, q1 in iter_blocks(q.shape[0], size):
                yield q0, q[q0:q1] @ t.T
            return
        if is_normalizer:
            reads = [inp.name for inp in normalizer.inputs.score if isinstance(inp, Embeddings)
                     and getattr(self, inp.name) is None]
            if reads:
                raise ValueError(f"{type(normalizer).__name__} scores with the embeddings of {', '.join(reads)}; this "
                                 "task holds score matrices without them: pass them too (RetrievalTask(..., "
                                 f"{reads[0]}=...)) or run it on a task of embeddings")
        test = self.matrix(*TEST)
        q = None if self.queries is None else self.engine.tensor("queries")
        t = self.engine.tensor("targets") if self._product(*TEST) else None   # in the task's dtype, as a fit scores
        m, n = test.shape
        size = chunk_size or block_rows(n, torch.empty((), dtype=self.dtype).element_size(), self.block_bytes)
        for q0, q1 in iter_blocks(m, size):
            s = test.block(q0, q1, 0, n, self.dtype) if t is None else q[q0:q1] @ t.T
            yield q0, (s if normalizer is None else normalizer.normalize_scores(s, None if q is None else q[q0:q1]))

    def score(self, normalizer=None) -> torch.Tensor:
        """The whole (normalised) test score matrix, for small problems (``blocks`` otherwise)."""
        return torch.cat([s for _, s in self.blocks(normalizer)], dim=0)

    def with_banks(self, query_bank=None, target_bank=None) -> "RetrievalTask":
        self._embeddings_only("with_banks")
        return replace(self, query_bank=query_bank, target_bank=target_bank)

    def with_distractors(self, distractors: ArrayLike) -> "RetrievalTask":
        """The same queries, positives and banks against a larger gallery: ``distractors`` (items of the target
        modality from other data, d x dim) follow the targets and are never a positive (Geigle et al. Table 5:
        the test queries against their test gallery merged with other data sets' test items)."""
        self._embeddings_only("with_distractors")
        extra = as_embeddings(distractors, "distractors", device="cpu", dim=self.targets.shape[1]).numpy()
        if extra.shape[0] == 0:
            raise ValueError("distractors must hold at least one item (an empty array adds nothing)")
        targets = np.concatenate([np.asarray(self.targets), extra.astype(np.asarray(self.targets).dtype, copy=False)])
        positives = Positives(self.positives.indptr, self.positives.indices, self.positives.n_targets + len(extra))
        return replace(self, targets=targets, positives=positives,
                       meta={**self.meta, "distractors": int(len(extra))})

    def _embeddings_only(self, what: str) -> None:
        if self.engine is not None:
            raise ValueError(f"{what} changes embeddings beside stored score matrices, which would no longer match "
                             "them: build a task with the embeddings and matrices you need instead")


def fraction_size(fraction: float, n_rows: int) -> int:
    """Rows in a ``fraction`` of ``n_rows`` rows: all of them for a fraction of 1, else ``round(fraction * n_rows)``
    and at least one."""
    return int(n_rows) if fraction >= 1 else max(1, int(round(fraction * n_rows)))


def sample_rows(n_rows: int, size: int, seed=0) -> np.ndarray:
    """The sorted indices of ``size`` of ``n_rows`` rows drawn without replacement by ``default_rng(seed)`` (``seed``
    may be a running ``numpy.random.Generator``): the one draw of every subset of rows in the library."""
    return np.sort(np.random.default_rng(seed).choice(int(n_rows), int(size), replace=False))


def share_rows(n_rows: int, fraction: float, seed=0) -> np.ndarray:
    """The sorted indices of a seeded ``fraction`` of ``n_rows`` rows (:func:`fraction_size` of them,
    :func:`sample_rows`; a fraction of 1 keeps every row and draws nothing): a bank's images, its query bank, a
    study's rows."""
    fraction = check_fraction(fraction, "fraction")
    if fraction == 1:
        return np.arange(int(n_rows))
    return sample_rows(n_rows, fraction_size(fraction, n_rows), seed)


def query_bank_share(tasks: Mapping[str, RetrievalTask], fraction: float, seed: int = 0, *,
                     keep: Sequence[str] = ()) -> Dict[str, RetrievalTask]:
    """The ``tasks`` with a seeded ``fraction`` of each one's query bank (:meth:`RetrievalTask.bank_subset`; at
    least one row; the target banks stay whole): one generator (``default_rng(seed)``) draws the rows, in the order
    of ``tasks``; a direction named in ``keep`` stays whole and draws nothing. The one draw of a query-bank share
    (:meth:`hubnorm.EmbeddingDataset.tasks`, ``RunData.with_query_bank_fraction``)."""
    fraction = check_fraction(fraction, "fraction")
    rng, out = np.random.default_rng(seed), {}
    for d, task in tasks.items():
        keep_all = fraction == 1 or d in keep
        out[d] = task if keep_all else task.bank_subset(share_rows(task.size("query_bank"), fraction, rng))
    return out


def bank_share(tasks: Mapping[str, RetrievalTask], fraction: float, seed: int = 0, *,
               keep: Sequence[str] = ()) -> Dict[str, RetrievalTask]:
    """The ``tasks`` with a seeded ``fraction`` of each modality's bank, both banks of every task at once: the bank
    of modality ``x`` is the query bank of an ``x2y`` task and the target bank of a ``y2x`` one, and the same rows
    of it are kept in both (as a share of training images with their captions cuts both directions' banks). One
    generator (``default_rng(seed)``) draws the modalities' rows in the order they first appear in ``tasks``; a
    direction named in ``keep`` stays whole. Two tasks whose banks of one modality differ in size are refused
    (they are not the same bank)."""
    fraction = check_fraction(fraction, "fraction")
    sizes: Dict[str, int] = {}
    for d, task in tasks.items():
        if d in keep:
            continue
        for letter, bank in zip(task.direction.split("2"), ("query_bank", "target_bank")):
            n = task.size(bank)
            if n and sizes.setdefault(letter, n) != n:
                raise ValueError(f"the tasks' banks of modality {letter!r} differ in size ({sizes[letter]} and {n} "
                                 f"rows, the {d} task's {bank.replace('_', ' ')}): a share of one bank needs the "
                                 "same bank in every direction; cut each task with bank_subset instead")
    rng = np.random.default_rng(seed)
    rows = {letter: share_rows(n, fraction, rng) for letter, n in sizes.items()}
    out = {}
    for d, task in tasks.items():
        if fraction != 1 and d not in keep:
            for letter, bank in zip(task.direction.split("2"), ("query_bank", "target_bank")):
                if task.size(bank):
                    task = task.bank_subset(rows[letter], bank)
        out[d] = task
    return out


def build_tasks(
    images: ArrayLike,
    captions: ArrayLike,
    caption_to_image: ArrayLike,
    *,
    image_bank: Optional[ArrayLike] = None,
    caption_bank: Optional[ArrayLike] = None,
    directions: Sequence[str] = DIRECTIONS,
    meta: Optional[Dict[str, object]] = None,
) -> Dict[str, RetrievalTask]:
    """Both retrieval tasks from paired embeddings, in one call.

    Args:
        images: (n_images, d) image embeddings.
        captions: (n_captions, d) caption embeddings.
        caption_to_image: (n_captions,) index of each caption's image.
        image_bank, caption_bank: reference banks (e.g. training images / captions), or None.
    Returns:
        ``{"t2i": task, "i2t": task}`` (or the subset named in ``directions``).
    """
    images = _to_numpy(images)
    captions = _to_numpy(captions)
    # check with the caller's argument names (the tasks below would call them queries / targets / *_bank)
    as_embeddings(images, "images", device="cpu")
    as_embeddings(captions, "captions", device="cpu", dim=images.shape[1])
    for name, bank in (("image_bank", image_bank), ("caption_bank", caption_bank)):
        if bank is not None:
            as_embeddings(_to_numpy(bank), name, device="cpu", dim=images.shape[1])
    c2i = as_index_array(caption_to_image, "caption_to_image")
    if c2i.size != len(captions):
        raise ValueError(
            f"caption_to_image has {c2i.size} entries but there are {len(captions)} captions: "
            "pass one image index per caption"
        )
    if c2i.max() >= len(images):
        raise ValueError(f"caption_to_image refers to image {c2i.max()} but there are only {len(images)} images")
    missing = np.setdiff1d(np.arange(len(images)), c2i)
    if missing.size:
        raise ValueError(f"{missing.size} image(s) have no caption (first: {missing[0]}): drop them or add captions")
    meta = dict(meta or {})
    tasks = {}
    for d in directions:
        if d == "t2i":
            tasks[d] = RetrievalTask(captions, images, Positives.from_labels(c2i, len(images)),
                                     query_bank=_maybe_numpy(caption_bank), target_bank=_maybe_numpy(image_bank),
                                     direction="t2i", meta=meta)
        elif d == "i2t":
            tasks[d] = RetrievalTask(images, captions, Positives.from_groups(c2i, len(images)),
                                     query_bank=_maybe_numpy(image_bank), target_bank=_maybe_numpy(caption_bank),
                                     direction="i2t", meta=meta)
        else:
            raise ValueError(f"unknown direction {d!r}: use 't2i' or 'i2t'")
    return tasks


def _to_numpy(x):
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    if not isinstance(x, np.ndarray):
        raise TypeError(f"embeddings must be numpy arrays or torch tensors; got {type(x).__name__}")
    return x


def _maybe_numpy(x):
    return None if x is None else _to_numpy(x)
