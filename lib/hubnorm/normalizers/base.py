"""The interface shared by every normalizer, and the protocol each method implements in its own file.

A normalizer follows scikit-learn's estimator conventions: the constructor only stores its arguments (as
given), ``fit`` looks at the gallery and the banks and sets attributes ending in ``_``, and scoring is then a
pure function of the test queries. Scoring is always blocked over queries, so memory is bounded by
``chunk_size x n_targets``.

Most methods are *offset* methods: the normalised score is ``S_ij + h_j`` with one offset ``h_j`` per target,
computed once per gallery (``offsets_``). Retrieval is then one matmul plus a vector, and a plain vector index
can serve it with the augmented embeddings of the NNN paper, Sec. 3.1 (``augment_targets`` /
``augment_queries``: ``<[q, 1], [t, h]> = q . t + h``).

**The method protocol** (docs/methods.md, "Where a new method goes"). A method's file states, on its class:

* ``name``, ``display_name``, ``paper_grid``: registry key, table label, the papers' grid (``PAPER_GRIDS``);
* ``inputs``: a :class:`hubnorm.blocks.Inputs` (the score matrices / embeddings it reads at fit and score time);
* ``parameters``: ``{name: hubnorm.blocks.Param}`` (checks, and the inputs whose sizes limit a value);
* ``fit_blocks(engine)``: the fitted attributes from reductions run by ``engine`` (:mod:`hubnorm.blocks`); the
  same code runs in process (:class:`hubnorm.engine.LocalEngine`), on Dask (``hubnorm.distributed``) and on a
  vector index (``hubnorm.index``);
* ``plain(targets, query_bank, target_bank)``: the formula as written, dense (the tests' reference);
* ``normalize_scores(s, queries)``: the normalised scores of a block of raw test scores (default ``s + h``);
* optionally ``sweep_params`` / ``sweep_fixed`` / ``fit_grid(norms, engine)``: the one-pass path over a grid
  (:func:`hubnorm.grid_search`'s sweep engine), and ``example_params``: small-problem parameters for the
  generic checks (``tests/method_checks.py``).
"""

from __future__ import annotations

import inspect
import os
from typing import ClassVar, Dict, FrozenSet, Iterator, List, Optional, Tuple

import numpy as np
import torch

from ..blocks import Inputs, Param, check_limits, limit_of
from ..engine import LocalEngine
from ..kernels import block_rows, iter_blocks
from ..provenance import of_engine
from .._validation import (
    ArrayLike, as_embeddings, check_block_bytes, check_chunk_size, check_positive_int, resolve_device,
)


def _on_host(x) -> bool:
    """Whether ``x`` is rows in this process's memory (a numpy array that is not a memory map, a CPU tensor)."""
    if isinstance(x, torch.Tensor):
        return x.device.type == "cpu"
    return isinstance(x, np.ndarray) and not isinstance(x, np.memmap)


def _on_dask(x) -> bool:
    """A Dask array (duck-typed, Dask is not imported) or a folder of ``.npy`` bank shards."""
    return type(x).__module__.split(".")[0] == "dask" or (isinstance(x, (str, os.PathLike)) and os.path.isdir(x))


#: Constructor arguments that change how a normalizer computes, never what it ranks (memory, device, blocking).
EXECUTION_OPTIONS = frozenset({"device", "chunk_size", "check_normalized", "block_bytes", "cache_bytes", "cache_dtype",
                               "implementation"})

#: The execution options every one-pass sweep honours exactly (a method adds its own in ``sweep_fixed``).
SWEEP_COMMON = frozenset({"device", "chunk_size", "check_normalized", "block_bytes"})

_REQUIRED_MESSAGES = {
    "query_bank": "needs query_bank (reference queries, e.g. training captions for t2i); pass fit(targets, query_bank=...)",
    "target_bank": "needs target_bank (reference targets, e.g. training images for t2i); "
                   "pass fit(targets, query_bank=..., target_bank=...)",
}


class NotFittedError(RuntimeError):
    """Raised when a normalizer is used before ``fit``."""


class Normalizer:
    """Base class of every method (see the module docstring for the protocol a subclass implements).

    Class attributes:
        name: registry key (e.g. ``"nnn"``); display_name: its label in tables (``"NNN"``).
        inputs: what ``fit`` and scoring read (:class:`hubnorm.blocks.Inputs`).
        uses_query_bank / uses_target_bank: which banks ``fit`` needs (``"required"``, ``"optional"`` or
            ``"unused"``), derived from ``inputs``.
        parameters: the method's hyperparameters (:class:`hubnorm.blocks.Param`).
        is_offset: ``True`` when scores are ``S + offsets_`` (one offset per target).
    """

    name: ClassVar[str] = "base"
    display_name: ClassVar[Optional[str]] = None
    paper_grid: ClassVar[Optional[Dict[str, list]]] = None
    inputs: ClassVar[Inputs] = Inputs()
    uses_query_bank: ClassVar[str] = "unused"
    uses_target_bank: ClassVar[str] = "unused"
    parameters: ClassVar[Dict[str, Param]] = {}
    is_offset: ClassVar[bool] = True
    sweep_params: ClassVar[FrozenSet[str]] = frozenset()
    sweep_fixed: ClassVar[FrozenSet[str]] = SWEEP_COMMON
    example_params: ClassVar[Dict[str, object]] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "inputs" in cls.__dict__:  # one source of truth: the declared inputs
            cls.uses_query_bank = cls.inputs.usage("query_bank")
            cls.uses_target_bank = cls.inputs.usage("target_bank")

    # ------------------------------------------------------------------ scikit-learn style parameters
    def _store(self, arguments: Dict[str, object]) -> None:
        """Store every constructor argument, as given, under its own name (a constructor's only work: scikit-learn's
        rule); a method's ``__init__`` calls ``self._store(locals())``."""
        for name in self._param_names():
            setattr(self, name, arguments[name])

    @classmethod
    def _param_names(cls):
        return [p for p in inspect.signature(cls.__init__).parameters if p != "self"]

    def get_params(self) -> Dict[str, object]:
        """Constructor arguments, as given."""
        return {p: getattr(self, p) for p in self._param_names()}

    def set_params(self, **params) -> "Normalizer":
        valid = set(self._param_names())
        for key, value in params.items():
            if key not in valid:
                raise ValueError(f"{type(self).__name__} has no parameter {key!r}; valid parameters: {sorted(valid)}")
            setattr(self, key, value)
        return self

    def clone(self, **overrides) -> "Normalizer":
        """A new, unfitted normalizer with the same parameters (``overrides`` replace some)."""
        params = self.get_params()
        params.update(overrides)
        return type(self)(**params)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    @classmethod
    def limit(cls, param: str, sizes) -> Optional[int]:
        """The largest value of ``param`` that inputs of these sizes allow (``sizes(name) -> int or None``), or
        None when ``param`` is not limited by an input (or none of its limiting inputs is there)."""
        spec = cls.parameters.get(param)
        return None if spec is None else limit_of(spec, sizes)

    # ------------------------------------------------------------------ fitting
    def fit(
        self,
        targets: ArrayLike,
        query_bank: Optional[ArrayLike] = None,
        target_bank: Optional[ArrayLike] = None,
    ) -> "Normalizer":
        """Fit on the gallery ``targets`` (n x d) and the reference banks.

        ``query_bank`` (b x d) holds reference queries of the query modality (e.g. training captions for
        text-to-image); passing the test queries themselves makes the method query-aware (transductive).
        ``target_bank`` (c x d) holds reference items of the target modality (e.g. training images).
        A bank that is a Dask array or a folder of ``.npy`` shards is reduced on the active Dask scheduler
        (``hubnorm.distributed``, every method written as block reductions) with the same fitted attributes.
        """
        if (_on_dask(query_bank) and self.uses_query_bank != "unused") or (
                _on_dask(target_bank) and self.uses_target_bank != "unused"):
            from ..distributed import fit_offsets  # imports Dask, only for a Dask (or sharded-folder) bank

            return fit_offsets(self, targets, query_bank, target_bank)
        engine = self.local_engine(targets, query_bank, target_bank)
        return self.fit_engine(engine, targets=engine.tensor("targets"))

    def fit_engine(self, engine, *, targets: Optional[torch.Tensor] = None,
                   device: Optional[torch.device] = None) -> "Normalizer":
        """Fit on ``engine``'s inputs through the one fit lifecycle (:func:`fit_on_engine`; in memory, Dask, stored
        score matrices, a faiss index). ``targets`` (the gallery embeddings, when the engine has them) makes the
        normalizer score and rank queries itself; without them it scores raw test scores
        (:meth:`fitted_from_scores`). Returns ``self``."""
        fit_on_engine([self], engine, targets=targets, device=device)
        return self

    def n_fitted_targets(self) -> int:
        """The size of the gallery this normalizer was fitted on (NotFittedError before a fit)."""
        if self.fitted_from_scores():
            return self.score_engine_.size("targets")
        self._check_fitted()
        return self.targets_.shape[0]

    def local_engine(self, targets, query_bank=None, target_bank=None, *, sweep_bytes: Optional[int] = None
                     ) -> LocalEngine:
        """Check the parameters and the inputs (as ``fit`` does) and return the in-process engine over them.

        The sweeps of :func:`hubnorm.grid_search` call it with ``sweep_bytes`` so that every grid point sees the
        same tensors as a fit of its own."""
        self.check_params()
        device = resolve_device(getattr(self, "device", None))
        check_normalized = getattr(self, "check_normalized", True)
        given = {"targets": targets, "query_bank": query_bank, "target_bank": target_bank}
        self.check_required(lambda name: given[name] is not None)   # before any bank is read
        t = as_embeddings(targets, "targets", device=device, check_normalized=check_normalized)
        dtype = t.dtype
        qb = tb = None
        if query_bank is not None and self.uses_query_bank != "unused":
            qb = as_embeddings(query_bank, "query_bank", device=device, dtype=dtype, dim=t.shape[1],
                               check_normalized=check_normalized)
        if target_bank is not None and self.uses_target_bank != "unused":
            tb = as_embeddings(target_bank, "target_bank", device=device, dtype=dtype, dim=t.shape[1],
                               check_normalized=check_normalized)
        host = {k: v for k, v in given.items() if t.device.type != "cpu" and _on_host(v)}   # read for provenance
        engine = LocalEngine({"targets": t, "query_bank": qb, "target_bank": tb}, host=host,
                             block_bytes=getattr(self, "block_bytes", None), sweep_bytes=sweep_bytes)
        self.check_inputs(engine)
        return engine

    def check_inputs(self, engine) -> None:
        """ValueError naming what this method reads and ``engine`` cannot give (the fit lifecycle asks it before
        any reduction): an input the engine cannot read (:meth:`hubnorm.blocks.Engine.cannot_read`: the embeddings
        DN reads, a score matrix a task lacks), a required bank that is absent, a parameter larger than its
        inputs allow (NNN's ``k`` <= the query-bank size)."""
        for inp in tuple(self.inputs.fit) + tuple(self.inputs.score):
            why = engine.cannot_read(inp)
            if why:
                raise ValueError(f"{type(self).__name__} {why}")
        self.check_required(engine.has)
        check_limits(self.parameters, {p: getattr(self, p, None) for p in self.parameters}, engine.size)

    def check_required(self, present) -> None:
        """ValueError naming a bank this method needs that ``present(name)`` says is absent: the fit lifecycle asks
        its engine (:meth:`check_inputs`); the engine builders (:meth:`local_engine`, the Dask fit) ask the caller's
        arguments first, before any bank is read."""
        for name, usage in (("query_bank", self.uses_query_bank), ("target_bank", self.uses_target_bank)):
            if usage == "required" and not present(name):
                raise ValueError(f"{type(self).__name__} {_REQUIRED_MESSAGES[name]}")

    def non_finite_error(self, dtype) -> ValueError:
        """The error of a fit whose offsets are not finite (a parameter too extreme for the precision)."""
        return ValueError(f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self._strength_params().items())}) "
                f"gives non-finite offsets in {dtype}: a parameter is too extreme for this precision "
                "(see the method's docstring for the usable range), or pass float64 embeddings")

    def fit_blocks(self, engine) -> Dict[str, object]:
        """The fitted attributes (``offsets_`` and the method's own), computed from reductions run by ``engine``."""
        raise NotImplementedError(f"{type(self).__name__} does not state its fit as block reductions (fit_blocks)")

    def offset_decomposition(self, query_bank: torch.Tensor, target_bank: Optional[torch.Tensor] = None, *,
                             block_bytes: Optional[int] = None):
        """The fitted offsets written as a weighted sum over the bank queries (:func:`hubnorm.forensics.explain_target`):
        a function ``j -> (weights, values, remainder_terms)`` with ``offset_j = sum(weights * values) +
        sum(remainder_terms.values())`` (float64 ``m``-vectors over the bank rows), for the ``query_bank`` (and
        ``target_bank``) given as validated tensors. A method without such a form does not override it."""
        raise TypeError(f"{type(self).__name__} does not write its offsets as a sum over the bank queries "
                        "(offset_decomposition)")

    def plain(self, targets: torch.Tensor, query_bank: Optional[torch.Tensor] = None,
              target_bank: Optional[torch.Tensor] = None) -> Dict[str, torch.Tensor]:
        """The method's formula as written, on dense tensors (the reference of the tests; small problems only)."""
        raise NotImplementedError(f"{type(self).__name__} has no plain form")

    @classmethod
    def fit_grid(cls, norms: List["Normalizer"], engine) -> List[Dict[str, object]]:
        """Fitted attributes of every normalizer of a grid on the same inputs (the sweep engine calls it when the
        grid and the fixed parameters are within ``sweep_params`` / ``sweep_fixed``). Default: one
        ``fit_blocks`` per point; the engine's :meth:`~hubnorm.engine.LocalEngine.shared` caches let them share
        score blocks. A method overrides it when its points share more (NNN: one top-``max(k)``)."""
        return [n.fit_blocks(engine) for n in norms]

    def check_params(self) -> "Normalizer":
        """Check the constructor arguments now (``fit`` does it too); returns ``self``.

        Raises ``TypeError`` / ``ValueError`` naming the argument and the fix. Sweeps and grid searches call it
        for every setting before computing anything, so no setting is ever scored with an invalid parameter.
        """
        self._validate_params()
        return self

    def _strength_params(self) -> Dict[str, object]:
        """The method parameters (all constructor arguments except the execution options)."""
        return {k: v for k, v in self.get_params().items() if k not in EXECUTION_OPTIONS}

    def _validate_params(self) -> None:
        """Check constructor arguments: the execution options, then every declared :attr:`parameters` entry.
        A subclass extends it for checks across parameters (called by :meth:`check_params` and ``fit``)."""
        check_chunk_size(getattr(self, "chunk_size", None))
        check_block_bytes(getattr(self, "block_bytes", None))
        resolve_device(getattr(self, "device", None))
        check_normalized = getattr(self, "check_normalized", True)
        if not isinstance(check_normalized, (bool, np.bool_)):
            raise TypeError(f"check_normalized must be True or False; got {check_normalized!r}")
        for name, spec in self.parameters.items():
            spec.check(getattr(self, name), name)

    def _check_fitted(self) -> None:
        """NotFittedError unless fitted on embeddings (the target embeddings are kept for scoring)."""
        if not hasattr(self, "targets_"):
            if hasattr(self, "score_engine_"):
                raise NotFittedError(f"{type(self).__name__} was fitted from score matrices (RetrievalTask.fit): it "
                                     "holds "
                                     "no target embeddings; score / topk take the raw test scores, anything else "
                                     "needs a fit on embeddings (fit(targets, query_bank, ...))")
            raise NotFittedError(f"{type(self).__name__} is not fitted yet: call fit(targets, query_bank, ...) first")

    def fitted_from_scores(self) -> bool:
        """Whether the last fit read score matrices (:meth:`hubnorm.RetrievalTask.fit` of a task of score matrices),
        not embeddings: ``score`` / ``topk`` then take raw test scores (queries x targets) instead of query
        embeddings."""
        return hasattr(self, "score_engine_") and not hasattr(self, "targets_")

    def _test_scores(self, scores) -> torch.Tensor:
        """Raw test scores given to a normalizer fitted from score matrices, checked: floating point, 2-D, one
        column per target of the fit, finite; in the fit's dtype (the caller's array is never modified)."""
        name, n = type(self).__name__, self.score_engine_.size("targets")
        t = scores.detach().cpu() if isinstance(scores, torch.Tensor) else None
        if t is None:
            arr = np.asarray(scores)
            if arr.dtype.kind != "f":
                raise TypeError(f"{name} was fitted from score matrices: score / topk take the raw test scores as a "
                                f"floating-point array; got dtype {arr.dtype}")
            t = torch.from_numpy(arr)
        if not torch.is_floating_point(t):
            raise TypeError(f"{name} was fitted from score matrices: score / topk take the raw test scores as a "
                            f"floating-point array; got dtype {t.dtype}")
        if t.ndim != 2 or t.shape[1] != n:
            raise ValueError(f"{name} was fitted from score matrices over {n} targets: score / topk take the raw test "
                             f"scores (queries x {n} targets, as a task of score matrices holds them), not query "
                             f"embeddings; got "
                             f"shape {tuple(t.shape)}")
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"the raw test scores given to {name}.score / topk hold a non-finite value (NaN or inf)")
        return t.to(self.score_engine_.dtype)

    # ------------------------------------------------------------------ scoring
    def _as_queries(self, queries: ArrayLike) -> torch.Tensor:
        self._check_fitted()
        return as_embeddings(queries, "queries", device=self.device_, dtype=self.targets_.dtype,
                             dim=self.targets_.shape[1], check_normalized=getattr(self, "check_normalized", True))

    def _score_block(self, q: torch.Tensor) -> torch.Tensor:
        """Normalised scores of a block of (validated) queries against all targets: the raw scores, then
        :meth:`normalize_scores`."""
        return self.normalize_scores(q @ self.targets_.T, q)

    def normalize_scores(self, s: torch.Tensor, queries: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The normalised scores of a block of raw test scores ``s`` (queries x all targets), in place when it can.
        ``queries``: the block's query embeddings (only methods whose ``inputs.score`` lists them read them)."""
        s.add_(self.offsets_)
        return s

    def iter_scores(self, queries: ArrayLike, chunk_size: Optional[int] = None) -> Iterator[Tuple[int, torch.Tensor]]:
        """Yield ``(start_row, scores)`` blocks of the normalised ``m x n`` score matrix. ``queries``: the query
        embeddings, or for a normalizer fitted from score matrices (:meth:`hubnorm.RetrievalTask.fit` of a task of
        score matrices) the raw test scores (``m x n``), normalised as :meth:`hubnorm.RetrievalTask.blocks` does."""
        if self.fitted_from_scores():
            s = self._test_scores(queries)
            size = check_chunk_size(chunk_size) or getattr(self, "chunk_size", None) or \
                block_rows(s.shape[1], s.element_size())
            for q0, q1 in iter_blocks(s.shape[0], size):
                yield q0, self.normalize_scores(s[q0:q1].clone(), None)
            return
        q = self._as_queries(queries)
        size = check_chunk_size(chunk_size) or getattr(self, "chunk_size", None) or block_rows(self.targets_.shape[0], q.element_size())
        for q0, q1 in iter_blocks(q.shape[0], size):
            yield q0, self._score_block(q[q0:q1])

    def score(self, queries: ArrayLike, chunk_size: Optional[int] = None) -> torch.Tensor:
        """The full normalised ``m x n`` score matrix (for small problems; use ``topk`` or ``iter_scores`` at scale).
        ``queries``: the query embeddings, or the raw test scores for a normalizer fitted from score matrices.

        Rows are comparable within a row only: a row's ranking is what the method defines.
        """
        blocks = [s for _, s in self.iter_scores(queries, chunk_size)]
        return torch.cat(blocks, dim=0)

    def topk(self, queries: ArrayLike, k: int, chunk_size: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """Top-``k`` normalised scores and target indices per query, blocked over queries.

        Exact ties are broken by the lowest target index first, as in :func:`hubnorm.positive_ranks` (a stable
        sort by decreasing score): ``topk(q, k)[1][i, r]`` is the target of rank ``r`` of query ``i``. ``queries``:
        the query embeddings, or the raw test scores for a normalizer fitted from score matrices.
        """
        if not self.fitted_from_scores():
            self._check_fitted()
        n = self.score_engine_.size("targets") if self.fitted_from_scores() else self.targets_.shape[0]
        k = check_positive_int(k, "k", maximum=n, max_name="the number of targets")
        vals, idx = [], []
        for _, s in self.iter_scores(queries, chunk_size):
            v, i = stable_topk(s, k)
            vals.append(v)
            idx.append(i)
        return torch.cat(vals), torch.cat(idx)

    # ------------------------------------------------------------------ offsets and vector indexes
    @property
    def offsets(self) -> np.ndarray:
        """Per-target additive offsets ``h`` (score = ``S + h``) as a float numpy array (also of a normalizer fitted
        from score matrices, :meth:`hubnorm.RetrievalTask.fit` of a task of score matrices, which holds no target
        embeddings)."""
        if not hasattr(self, "offsets_"):
            self._check_fitted()
        if not self.is_offset:
            raise AttributeError(f"{type(self).__name__} is not an offset method: its rows are normalised per query")
        return self.offsets_.detach().cpu().numpy()

    def augment_targets(self) -> np.ndarray:
        """Targets with the offset appended, ``[t, h]`` (n x (d+1)), for an inner-product vector index."""
        self._check_fitted()
        t = self.targets_.detach().cpu().numpy()
        return np.concatenate([t, self.offsets[:, None].astype(t.dtype)], axis=1)

    @staticmethod
    def augment_queries(queries: ArrayLike) -> np.ndarray:
        """Queries with a 1 appended, ``[q, 1]``, so that ``<[q,1],[t,h]> = q.t + h`` (NNN paper, Sec. 3.1)."""
        q = queries.detach().cpu().numpy() if isinstance(queries, torch.Tensor) else np.asarray(queries)
        if q.ndim != 2:
            raise ValueError(f"queries must be 2-D (m, d); got shape {q.shape}")
        return np.concatenate([q, np.ones((q.shape[0], 1), dtype=q.dtype)], axis=1)


def fit_on_engine(norms: List[Normalizer], engine, *, targets: Optional[torch.Tensor] = None,
                  device: Optional[torch.device] = None, record: bool = True) -> List[Normalizer]:
    """The one fit lifecycle, for one normalizer or the points of a grid of one method on the same inputs:

    1. every normalizer's parameters and what it reads (:meth:`Normalizer.check_params`,
       :meth:`Normalizer.check_inputs`), before any reduction;
    2. the fitted attributes from ``engine``'s reductions: ``fit_blocks`` for one normalizer, the method's
       ``fit_grid`` for several (one pass shared by the points, :func:`hubnorm.grid_search`);
    3. the finite check of every point's offsets, and the banks' fingerprints (``provenance_``,
       :func:`hubnorm.provenance.of_engine`; ``record=False``: none, one pass over the banks less, for fits whose
       normalizers are thrown away, as label-free selection's);
    4. the fitted attributes set on each normalizer, tensors placed on ``device`` (default: the engine's), with
       ``targets_`` (the gallery embeddings, when given: the normalizer then scores queries) or ``score_engine_``
       (a fit from score matrices: it scores raw test scores).

    Every fit ends here: :meth:`Normalizer.fit` (in memory), ``hubnorm.distributed.fit_offsets`` (Dask),
    :meth:`hubnorm.RetrievalTask.fit` (embeddings or stored score matrices), the grid sweeps of
    :mod:`hubnorm.sweeps` and :mod:`hubnorm.label_free`. (:func:`hubnorm.sweeps.iteration_table` is a study, not a
    fit: it reads the potentials along the fit's own Sinkhorn run, on the engine a fit of the task reads, and sets
    nothing on a normalizer.) Nothing is set on any
    normalizer unless every point succeeds. Returns ``norms``."""
    norms = list(norms)
    if not norms:
        raise ValueError("fit_on_engine needs at least one normalizer")
    cls = type(norms[0])
    if any(type(n) is not cls for n in norms):
        raise TypeError(f"the normalizers of one fit_on_engine call are points of one method; got "
                        f"{sorted({type(n).__name__ for n in norms})}")
    for norm in norms:
        norm.check_params()
        norm.check_inputs(engine)
    try:
        fitted = [norms[0].fit_blocks(engine)] if len(norms) == 1 else cls.fit_grid(norms, engine)
    finally:
        engine.release()   # what the fit read into memory (a stored matrix's resident copy)
    for norm, f in zip(norms, fitted):
        offsets = f.get("offsets_")
        if offsets is not None and not bool(torch.isfinite(offsets).all()):
            raise norm.non_finite_error(offsets.dtype)
    seen = {}   # what the offsets saw (hubnorm.provenance.certify); none for offsets from an index built elsewhere
    for norm in norms:
        key = getattr(norm, "bank_index", None) is None
        if key not in seen:
            seen[key] = of_engine(norm, engine) if record else None
    device = engine.device if device is None else device
    for norm, f in zip(norms, fitted):
        provenance = seen[getattr(norm, "bank_index", None) is None]
        for stale in ("targets_", "score_engine_"):   # what an earlier fit on other inputs left: never mixed in
            norm.__dict__.pop(stale, None)
        for key, value in f.items():
            setattr(norm, key, value.to(device) if isinstance(value, torch.Tensor) else value)
        if targets is not None:
            norm.targets_ = targets.to(device)
        else:
            norm.score_engine_ = engine
        norm.device_ = device
        norm.provenance_ = None if provenance is None else dict(provenance)
    return norms


def stable_topk(s: torch.Tensor, k: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """``torch.topk`` of every row with exact ties broken by the lowest column index first.

    The same order as a stable sort by decreasing value (the rank rule of :func:`hubnorm.positive_ranks`).
    ``torch.topk`` does not specify which of tied columns it returns, so one ``topk`` of ``k + 1`` values finds
    the rows where a tie touches the top ``k`` (two equal values among them, or the ``k``-th value equal to the
    ``(k+1)``-th); only those rows are redone with a stable sort. Other rows have distinct top values, whose
    order is unique.
    """
    n = s.shape[1]
    v, i = s.topk(min(k + 1, n), dim=1)
    tied = (v[:, 1:] == v[:, :-1]).any(dim=1)  # includes the k-th == (k+1)-th boundary tie
    v, i = v[:, :k], i[:, :k]
    if bool(tied.any()):
        rows = tied.nonzero().squeeze(1)
        sv, si = torch.sort(s[rows], dim=1, descending=True, stable=True)
        v[rows], i[rows] = sv[:, :k], si[:, :k]
    return v, i


class Identity(Normalizer):
    """No normalisation: the raw cosine score ``S = Q T^T`` (the "Original" column of every table)."""

    name = "raw"
    display_name = "Original"
    inputs = Inputs()

    def __init__(self, *, device=None, chunk_size=None, check_normalized=True):
        self._store(locals())

    def fit_blocks(self, engine):
        return {"offsets_": torch.zeros(engine.size("targets"), dtype=engine.dtype, device=engine.device)}

    def plain(self, targets, query_bank=None, target_bank=None):
        return {"offsets_": torch.zeros(targets.shape[0], dtype=targets.dtype, device=targets.device)}
