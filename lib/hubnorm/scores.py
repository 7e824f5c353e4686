"""Scores as input: fit and evaluate a method from precomputed score matrices instead of embeddings.

Video-text and text-audio retrieval work usually releases similarity matrices, not embeddings (QB-Norm publishes
pickled "training captions x test videos" and "test captions x test videos" matrices; CLIP4Clip-style code writes
a ``sim_matrix``). Every method whose fit is a function of score matrices (:mod:`hubnorm.blocks`: its
``inputs`` lists only :class:`~hubnorm.blocks.Scores`) runs here unchanged, on the same engine as from embeddings
(:class:`hubnorm.engine.LocalEngine`, given ``matrices=`` instead of embeddings: its score blocks are then read from
the matrices -- numpy arrays, ``np.load(..., mmap_mode="r")`` memory maps, torch tensors -- instead of computed as
``rows @ cols.T``; views, copies and kernels are the engine's business, ``benchmarks/reports/scores_read.md``).
Score matrices computed from embeddings (:class:`~hubnorm.matrices.ProductScores`) are computed block by block when
read, never whole.

The matrices are named by the engine's inputs (``docs/methods.md``: ``queries``, ``targets``, ``query_bank``,
``target_bank``): ``("queries", "targets")`` is the test score matrix (test queries x gallery),
``("query_bank", "targets")`` the bank-query x gallery scores (QB-Norm's "training captions x test videos"),
``("query_bank", "target_bank")`` the bank-query x target-bank scores (DBSN's extra columns),
``("target_bank", "targets")`` the target-bank x gallery scores (DualIS's intra-modal factor). A matrix given
for ``(a, b)`` also serves ``(b, a)`` (read transposed, block by block).

What each method needs follows from its declared inputs; a method that reads embeddings (DN: bank means) or a
matrix this task lacks (DBSN: the bank-query x target-bank scores) is refused with a ``ValueError`` naming it.
With the matrices computed from embeddings, every score-only method gives the same fitted attributes and the
same normalised scores as from the embeddings (``tests/test_scores.py``: float64, 1e-12, both directions).

Use::

    task = ScoreTask({("queries", "targets"): S_test, ("query_bank", "targets"): S_bank}, positives,
                     direction="t2v")
    task.evaluate(hubnorm.InvertedSoftmax(tau=0.05))      # {"R@1": ..., "R@5": ..., ..., "MnR": ...}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterator, Mapping, Optional, Tuple

import numpy as np
import torch

from .blocks import Embeddings
from .engine import DEFAULT_RESIDENT_BYTES, LocalEngine
from .evaluation import evaluate, positive_ranks
from .hubness import hubness_stats, k_occurrence
from .kernels import block_rows, iter_blocks
from .matrices import INPUT_LABELS, Pair, ProductScores, ScoreMatrix
from .retrieval import Positives, check_direction


# ====================================================================================================== methods
def needed_matrices(normalizer) -> Tuple[Tuple[Pair, bool], ...]:
    """The score matrices ``normalizer``'s fit reads, as ``((rows, col), required)``; ValueError naming the
    embeddings when it reads embeddings (DN)."""
    out = []
    for inp in tuple(normalizer.inputs.fit) + tuple(normalizer.inputs.score):
        if isinstance(inp, Embeddings):
            raise ValueError(f"{type(normalizer).__name__} reads the embeddings of {inp.name} ({INPUT_LABELS[inp.name]}), "
                             "not only scores: a score task (sims: source) cannot run it; run it from embeddings "
                             "(local:, cache: or synthetic: sources)")
        for col in inp.col_names:
            out.append(((inp.rows, col), inp.required))
    return tuple(out)


def fit_scores(normalizer, engine: LocalEngine, *, query_aware: bool = False):
    """Fit ``normalizer`` on the score matrices of ``engine``; returns it (scored by :func:`normalized_blocks`).

    ``query_aware``: use the test queries as the query bank (the test score matrix serves as the bank's; label
    the result transductive)."""
    needed = needed_matrices(normalizer)
    if query_aware:  # the test score matrix serves as the bank's (a transductive fit)
        mats = {k: m for k, m in engine.matrices.items() if "query_bank" not in k}
        mats[("query_bank", "targets")] = engine.matrix("queries", "targets")
        engine = LocalEngine(matrices=mats, dtype=engine.dtype, block_bytes=engine.block_bytes, hints=engine.hints,
                             plain=engine.plain, resident_bytes=engine.resident_bytes)
    normalizer.check_params()
    for (rows, col), required in needed:
        if required and rows != "queries" and not engine.has_matrix(rows, col):
            try:
                engine.matrix(rows, col)
            except ValueError as e:
                raise ValueError(f"{type(normalizer).__name__} needs the {INPUT_LABELS[rows]} x {INPUT_LABELS[col]} "
                                 f"score matrix ({rows} x {col}), which is missing. {e}") from None
    try:
        normalizer.fit_engine(engine)
    finally:
        engine.release()   # the matrices read into memory for this fit
    normalizer.score_engine_ = engine
    return normalizer


def normalized_blocks(normalizer, test: ScoreMatrix, *, dtype: torch.dtype = torch.float64,
                      chunk_size: Optional[int] = None, block_bytes: Optional[int] = None
                      ) -> Iterator[Tuple[int, torch.Tensor]]:
    """``(start_row, block)`` of the normalised test scores of a :func:`fit_scores`-fitted ``normalizer`` (or of the
    raw scores when ``normalizer`` is None), read from ``test`` (test queries x gallery) block by block."""
    m, n = test.shape
    item = torch.empty((), dtype=dtype).element_size()
    size = chunk_size or block_rows(n, item, block_bytes)
    for q0, q1 in iter_blocks(m, size):
        s = test.block(q0, q1, 0, n, dtype)
        yield q0, (s if normalizer is None else normalizer.normalize_scores(s, None))


# ====================================================================================================== tasks
@dataclass
class ScoreTask:
    """One retrieval direction given as score matrices.

    ``matrices``: ``{(rows, cols): matrix}`` (see the module docstring); ``("queries", "targets")`` is required.
    ``positives``: the positive targets of each test query (:class:`hubnorm.Positives`: several captions per video
    and several videos per caption allowed). ``direction``: a label such as ``"t2v"``, ``"v2t"``, ``"t2a"``,
    ``"a2t"`` (or ``"t2i"``). ``meta``: free-form labels (dataset, source). ``hints``: where a missing matrix would
    come from (the sims loader names the manifest role).
    """

    matrices: Dict[Pair, object]
    positives: Positives
    direction: str = "t2v"
    meta: Dict[str, object] = field(default_factory=dict)
    hints: Dict[Pair, str] = field(default_factory=dict)
    block_bytes: Optional[int] = None
    dtype: torch.dtype = torch.float64
    plain: bool = False
    resident_bytes: Optional[int] = None

    def __post_init__(self):
        check_direction(self.direction)
        if ("queries", "targets") not in self.matrices:
            raise ValueError("a score task needs the test score matrix (queries x targets): pass "
                             "matrices={('queries', 'targets'): S_test, ...}")
        if not isinstance(self.positives, Positives):
            raise TypeError("positives must be a hubnorm.Positives (Positives.from_labels / from_groups)")
        self.engine = LocalEngine(matrices=self.matrices, dtype=self.dtype, block_bytes=self.block_bytes,
                                  hints=self.hints,
                                  plain=self.plain, resident_bytes=self.resident_bytes)
        m, n = self.test.shape
        if self.positives.n_queries != m or self.positives.n_targets != n:
            raise ValueError(f"positives are {self.positives.n_queries} queries x {self.positives.n_targets} targets but "
                             f"{self.test.label} is {m} x {n}: pass the positives of this matrix's rows and columns")

    @property
    def test(self) -> ScoreMatrix:
        return self.engine.matrix("queries", "targets")

    def has(self, name: str) -> bool:
        """Whether a score matrix of the input ``name`` is given (``"queries"``, ``"targets"``, ``"query_bank"``,
        ``"target_bank"``): the question :meth:`hubnorm.RetrievalTask.has` answers for embeddings."""
        if name not in ("queries", "targets", "query_bank", "target_bank"):
            raise ValueError(f"a task holds the inputs queries, targets, query_bank, target_bank; got {name!r}")
        return any(name in key for key in self.matrices)

    @property
    def n_queries(self) -> int:
        return self.test.shape[0]

    @property
    def n_targets(self) -> int:
        return self.test.shape[1]

    def size(self, name: str) -> Optional[int]:
        return self.engine.size(name)

    def fit(self, normalizer, *, query_aware: bool = False):
        """Fit ``normalizer`` from this task's matrices (``query_aware``: the test queries as the bank)."""
        return fit_scores(normalizer, self.engine, query_aware=query_aware)

    def blocks(self, normalizer=None, chunk_size: Optional[int] = None):
        return normalized_blocks(normalizer, self.test, dtype=self.dtype, chunk_size=chunk_size,
                                 block_bytes=self.block_bytes)

    def score(self, normalizer=None) -> torch.Tensor:
        """The whole normalised test score matrix (small problems; ``blocks`` otherwise)."""
        return torch.cat([s for _, s in self.blocks(normalizer)], dim=0)

    def ranks(self, normalizer=None, *, chunk_size: Optional[int] = None) -> np.ndarray:
        """0-based rank of every query's best positive (the rule of :func:`hubnorm.positive_ranks`)."""
        out = np.empty(self.n_queries, dtype=np.int64)
        for q0, s in self.blocks(normalizer, chunk_size):
            q1 = q0 + s.shape[0]
            out[q0:q1] = positive_ranks(s, self.positives.subset(np.arange(q0, q1)))
        return out

    def evaluate(self, normalizer=None, *, fit: bool = True, query_aware: bool = False,
                 ks=(1, 5, 10), certificate: bool = False) -> Dict[str, object]:
        """:func:`hubnorm.evaluate` of ``normalizer`` on this task, fitted here first unless ``fit=False`` (None: the
        raw scores): R@K, MdR, MnR, ``out["bank"]``, and with ``certificate=True`` the no-leak certificate."""
        if not isinstance(certificate, (bool, np.bool_)):   # before a fit, not after it
            raise TypeError(f"certificate must be True or False; got {certificate!r}")
        if normalizer is not None and fit:
            self.fit(normalizer, query_aware=query_aware)
        return evaluate(normalizer, self, ks=ks, certificate=certificate)

    def k_occurrence(self, normalizer=None, k: int = 10) -> np.ndarray:
        counts = None
        for _, s in self.blocks(normalizer):
            c = k_occurrence(s, k)
            counts = c if counts is None else counts + c
        return counts

    def hubness(self, normalizer=None, k: int = 10) -> Dict[str, float]:
        """Hubness of the (normalised) test scores: skewness of ``N_k`` and the rest of :func:`hubnorm.hubness`."""
        return hubness_stats(self.k_occurrence(normalizer, k), k, self.n_queries)


def matrices_from_embeddings(queries, targets, query_bank=None, target_bank=None) -> Dict[Pair, np.ndarray]:
    """The score matrices of a task given as embeddings (float64 dot products, dense): what a released similarity
    matrix holds. ``(query_bank, target_bank)`` and ``(target_bank, targets)`` only when both are given. For large
    banks use :func:`score_matrices` (computed block by block when read, never whole)."""
    return {key: m.a @ m.b.T for key, m in score_matrices(queries, targets, query_bank, target_bank).items()}


def score_matrices(queries, targets, query_bank=None, target_bank=None) -> Dict[Pair, "ProductScores"]:
    """The score matrices of a task given as embeddings, as :class:`ProductScores` (float64 dot products computed
    block by block when a reduction reads them: no bank x gallery matrix is ever held whole). The same keys as
    :func:`matrices_from_embeddings`."""
    out = {("queries", "targets"): ProductScores(queries, targets, "the test score matrix (queries x targets)")}
    t = out[("queries", "targets")].b
    if query_bank is not None:
        qb = ProductScores(query_bank, t, "the query bank x targets score matrix")
        out[("query_bank", "targets")] = qb
        if target_bank is not None:
            out[("query_bank", "target_bank")] = ProductScores(qb.a, target_bank,
                                                               "the query bank x target bank score matrix")
    if target_bank is not None:
        out[("target_bank", "targets")] = ProductScores(target_bank, t, "the target bank x targets score matrix")
    return out


def positives_from_pairs(query_idx, target_idx, n_queries: int, n_targets: int) -> Positives:
    """:class:`hubnorm.Positives` from the ``(query, target)`` index pairs of every positive."""
    q, t = np.asarray(query_idx, dtype=np.int64), np.asarray(target_idx, dtype=np.int64)
    order = np.lexsort((t, q))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(q, minlength=n_queries))])
    return Positives(indptr, t[order], n_targets)


#: how a missing matrix of a sims task would be given: the manifest role, per direction side
_SIMS_ROLES = {
    "forward": {("queries", "targets"): "test", ("query_bank", "targets"): "bank_rows",
                ("query_bank", "target_bank"): "bank_rows_x_bank_cols", ("target_bank", "targets"): "bank_cols_x_test_cols"},
    "backward": {("queries", "targets"): "test", ("query_bank", "targets"): "bank_cols",
                 ("query_bank", "target_bank"): "bank_rows_x_bank_cols", ("target_bank", "targets"): "bank_rows_x_test_rows"},
}


def sample_index(n: int, size: Optional[int], seed: int) -> Optional[np.ndarray]:
    """A seeded random subset of ``range(n)`` of at most ``size`` items, sorted (None: all of them). The rule of
    every bank subset (``bank_queries`` / ``target_bank``), from embeddings and from score matrices alike."""
    if size is None or int(size) >= n:
        return None
    if int(size) < 1:
        raise ValueError(f"a bank subset needs at least one item; got {size}")
    return np.sort(np.random.default_rng(seed).choice(n, size=int(size), replace=False))


def bank_subsets(n_rows_bank: Optional[int], n_cols_bank: Optional[int], bank_queries: Optional[int],
                 target_bank: Optional[int], seed: int):
    """The seeded bank subsets of both directions: ``{"forward": (rows bank, cols bank), "backward": (...)}`` as
    index arrays (None: all). The first direction's query bank is the row-side bank (seed), its target bank the
    column-side bank (seed + 3); the second's query bank the column-side bank (seed + 1), its target bank the
    row-side bank (seed + 2)."""
    def pick(n, size, s):
        return None if n is None else sample_index(n, size, s)

    return {"forward": (pick(n_rows_bank, bank_queries, seed), pick(n_cols_bank, target_bank, seed + 3)),
            "backward": (pick(n_rows_bank, target_bank, seed + 2), pick(n_cols_bank, bank_queries, seed + 1))}


def sims_tasks(source, *, directions=None, block_bytes: Optional[int] = None, dtype: torch.dtype = torch.float64,
               bank_queries: Optional[int] = None, target_bank: Optional[int] = None,
               seed: int = 0) -> Dict[str, "ScoreTask"]:
    """Both retrieval directions of a sims folder (``hubnorm.data.sims``: a path, ``"sims:<folder>"`` or a loaded
    :class:`~hubnorm.data.sims.SimsFolder`) as :class:`ScoreTask` objects keyed by direction (e.g. ``t2v``, ``v2t``).

    The test matrix's rows are the queries of the first direction and its columns those of the second; the banks
    follow (``bank_rows`` is the first direction's query bank, ``bank_cols`` the second's; the bank x bank matrix
    serves DBSN in both, read transposed for the second). ``bank_queries`` / ``target_bank``: at most this many
    query-bank / target-bank items per direction, a seeded subset (:func:`bank_subsets`; the files stay on disk)."""
    from .data.sims import ROLES, SimsFolder, load_sims

    if isinstance(source, str) and source.startswith("sims:"):
        source = source[len("sims:"):]
    sims = source if isinstance(source, SimsFolder) else load_sims(source)
    fwd, bwd = sims.directions
    wanted = tuple(directions or (fwd, bwd))
    unknown = [d for d in wanted if d not in (fwd, bwd)]
    if unknown:
        raise ValueError(f"{sims.folder} holds the directions {fwd} and {bwd} (modalities {list(sims.modalities)}); "
                         f"got {unknown}")
    mats = {role: ScoreMatrix(arr, str(sims.files[role]), checked=role in sims.bounds, bound=sims.bounds.get(role))
            for role, arr in sims.matrices.items()}
    bank_n = {}
    for role, m in mats.items():
        for side, n in zip(ROLES[role], m.shape):
            bank_n.setdefault(side, n)
    subsets = bank_subsets(bank_n.get("bank R"), bank_n.get("bank C"), bank_queries, target_bank, seed)
    rows, cols = sims.positive_pairs
    n_r, n_c = mats["test"].shape
    meta = {"dataset": sims.name, "model": sims.manifest.get("model"), "modalities": sims.modalities,
            "source": "synthetic" if sims.synthetic else "real", "folder": str(sims.folder),
            "flags": list(sims.flags)}
    out = {}
    for d in wanted:
        side = "forward" if d == fwd else "backward"
        sel = dict(zip(("bank R", "bank C"), subsets[side]))
        roles = _SIMS_ROLES[side]
        given = {}
        for key, role in roles.items():
            if role in mats:
                r_side, c_side = ROLES[role]
                m = mats[role]
                if sel.get(r_side) is not None or sel.get(c_side) is not None:
                    m = m.take(sel.get(r_side), sel.get(c_side))
                transposed = side == "backward" and role in ("test", "bank_rows_x_bank_cols")
                given[key] = m.T if transposed else m
        hints = {key: f"add the role {role!r} to the manifest of {sims.folder}" for key, role in roles.items()}
        pos = positives_from_pairs(rows, cols, n_r, n_c) if side == "forward" else positives_from_pairs(cols, rows, n_c, n_r)
        out[d] = ScoreTask(given, pos, direction=d, meta=dict(meta, direction=d), hints=hints,
                           block_bytes=block_bytes, dtype=dtype)
    return out


__all__ = ["sims_tasks", "sample_index", "bank_subsets", "positives_from_pairs", "ScoreMatrix", "ScoreTask",
           "fit_scores", "normalized_blocks", "needed_matrices",
           "matrices_from_embeddings", "score_matrices", "ProductScores", "INPUT_LABELS", "DEFAULT_RESIDENT_BYTES"]
