"""Scores as input: build retrieval tasks from precomputed score matrices instead of embeddings.

Video-text and text-audio retrieval work usually releases similarity matrices, not embeddings (QB-Norm publishes
pickled "training captions x test videos" and "test captions x test videos" matrices; CLIP4Clip-style code writes
a ``sim_matrix``). A :class:`hubnorm.RetrievalTask` given ``scores={(rows, cols): matrix}`` holds them; every method
whose fit is a function of score matrices (:mod:`hubnorm.blocks`: its ``inputs`` lists only
:class:`~hubnorm.blocks.Scores`) fits from them on the same engine as from embeddings
(:class:`hubnorm.engine.LocalEngine`, given ``matrices=``: its score blocks are read from the matrices -- numpy
arrays, ``np.load(..., mmap_mode="r")`` memory maps, torch tensors -- instead of computed as ``rows @ cols.T``;
views, copies and kernels are the engine's business, ``benchmarks/reports/scores_read.md``).

This module builds such tasks: :func:`sims_tasks` (both directions of a ``sims:`` folder), :func:`score_matrices`
(the matrices of embeddings, computed block by block when read: :class:`~hubnorm.matrices.ProductScores`, never
whole), :func:`positives_from_pairs` and the seeded bank subsets (:func:`sample_index`, :func:`bank_subsets`).
With the matrices computed from embeddings, every score-only method gives the same fitted attributes and the same
normalised scores as from the embeddings (``tests/test_scores.py``: float64, 1e-12, both directions).

Use::

    task = RetrievalTask(scores={("queries", "targets"): S_test, ("query_bank", "targets"): S_bank},
                         positives=positives, direction="t2v")
    hubnorm.evaluate(task.fit(hubnorm.InvertedSoftmax(tau=0.05)), task)   # {"R@1": ..., ..., "MnR": ...}
"""

from __future__ import annotations

from typing import Dict, Optional

import numpy as np
import torch

from .matrices import Pair, ProductScores, ScoreMatrix
from .retrieval import Positives, RetrievalTask, sample_rows


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
    """:class:`hubnorm.Positives` from the ``(query, target)`` index pairs of every positive: two 1-D integer
    arrays of one length (floats are refused, never truncated), queries in ``[0, n_queries)``, targets in
    ``[0, n_targets)``."""
    from ._validation import check_positive_int
    from .retrieval import as_index_array

    n_queries = check_positive_int(n_queries, "n_queries")
    n_targets = check_positive_int(n_targets, "n_targets")
    q, t = as_index_array(query_idx, "query_idx"), as_index_array(target_idx, "target_idx")
    if q.size != t.size:
        raise ValueError(f"query_idx and target_idx are the two halves of the (query, target) pairs and must have one "
                         f"length; got {q.size} and {t.size}")
    for arr, name, what in ((q, "query_idx", "n_queries"), (t, "target_idx", "n_targets")):
        n = n_queries if what == "n_queries" else n_targets
        if arr.max() >= n:
            raise ValueError(f"{name} holds {arr.max()}, out of range for {what}={n}: indices run from 0 to {what} - 1")
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


#: which embeddings of a sims folder (:data:`hubnorm.data.sims.EMBEDDINGS`) are each input, per direction side
_SIMS_EMBEDDINGS = {
    "forward": {"queries": "test_rows", "targets": "test_cols", "query_bank": "bank_rows", "target_bank": "bank_cols"},
    "backward": {"queries": "test_cols", "targets": "test_rows", "query_bank": "bank_cols", "target_bank": "bank_rows"},
}


def sample_index(n: int, size: Optional[int], seed: int) -> Optional[np.ndarray]:
    """A seeded random subset of ``range(n)`` of at most ``size`` items, sorted (None: all of them). The rule of
    every bank subset (``bank_queries`` / ``target_bank``), from embeddings and from score matrices alike."""
    if size is None or int(size) >= n:
        return None
    if int(size) < 1:
        raise ValueError(f"a bank subset needs at least one item; got {size}")
    return sample_rows(n, size, seed)


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
               seed: int = 0) -> Dict[str, RetrievalTask]:
    """Both retrieval directions of a sims folder (``hubnorm.data.sims``: a path, ``"sims:<folder>"`` or a loaded
    :class:`~hubnorm.data.sims.SimsFolder`) as :class:`~hubnorm.RetrievalTask` objects of score matrices keyed by
    direction (e.g. ``t2v``, ``v2t``).

    The test matrix's rows are the queries of the first direction and its columns those of the second; the banks
    follow (``bank_rows`` is the first direction's query bank, ``bank_cols`` the second's; the bank x bank matrix
    serves DBSN in both, read transposed for the second). ``bank_queries`` / ``target_bank``: at most this many
    query-bank / target-bank items per direction, a seeded subset (:func:`bank_subsets`; the files stay on disk).
    Embeddings the manifest lists are held beside the matrices, cut to the same subsets, and each stored matrix of
    two embedded item sets is compared with their product once (:meth:`~hubnorm.RetrievalTask.disagreements`)."""
    from .data.sims import EMBEDDINGS, ROLES, SimsError, SimsFolder, load_sims

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
    for key, x in sims.embeddings.items():   # a bank may be given as embeddings only
        bank_n.setdefault(EMBEDDINGS[key], x.shape[0])
    subsets = bank_subsets(bank_n.get("bank R"), bank_n.get("bank C"), bank_queries, target_bank, seed)
    rows, cols = sims.positive_pairs
    n_r, n_c = mats["test"].shape
    meta = {"dataset": sims.name, "model": sims.manifest.get("model"), "modalities": sims.modalities,
            "source": "synthetic" if sims.synthetic else "real", "folder": str(sims.folder),
            "flags": list(sims.flags)}
    out, checked = {}, set()   # checked: the roles compared with their embeddings' product
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
        held = {}
        for name, key in _SIMS_EMBEDDINGS[side].items():
            if key in sims.embeddings:
                cut = sel.get(EMBEDDINGS[key])
                x = sims.embeddings[key]
                held[name] = np.array(x if cut is None else x[cut])   # a copy: the memory map is read-only
        hints = {key: f"add the role {role!r} to the manifest of {sims.folder}" for key, role in roles.items()}
        pos = positives_from_pairs(rows, cols, n_r, n_c) if side == "forward" else positives_from_pairs(cols, rows, n_c, n_r)
        out[d] = RetrievalTask(positives=pos, direction=d, meta=dict(meta, direction=d), scores=given, hints=hints,
                               block_bytes=block_bytes, dtype=dtype, check=False, **held)   # load_sims checked it
        unchecked = [pair for pair, role in roles.items() if role in mats and role not in checked]
        for pair, gap in out[d].disagreements(unchecked):   # a matrix of embedded items is their product
            embs = " and ".join(sims.embedding_files[_SIMS_EMBEDDINGS[side][name]].name for name in pair)
            raise SimsError(f"{sims.files[roles[pair]]} (matrix {roles[pair]!r}) differs from the product of the "
                            f"embeddings in {embs} by up to {gap:.3g}: the three files must hold the same items in the "
                            "same order from the same model (a shuffled, transposed or other model's file?); fix the "
                            "file that differs, or leave one of the two embeddings out of the manifest")
        checked.update(roles[pair] for pair in unchecked)   # test and bank x bank: read once, not per direction
    return out


__all__ = ["sims_tasks", "sample_index", "bank_subsets", "positives_from_pairs", "matrices_from_embeddings",
           "score_matrices"]
