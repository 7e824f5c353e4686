"""The block protocol: how a method states its offsets so that any engine can compute them.

A normalizer (``hubnorm.normalizers.<method>``) declares, in its own file:

* **inputs** -- which matrices it reads (:class:`Inputs`): score matrices between two named inputs
  (:class:`Scores`: ``Scores("query_bank", "targets")`` is the bank-query x target score matrix) or embeddings
  themselves (:class:`Embeddings`, e.g. DN's bank means), at fit time and at scoring time;
* **parameters** -- one :class:`Param` per hyperparameter (validation, and the inputs whose size limits it,
  e.g. NNN's ``k`` <= the query-bank size);
* **its offsets as reductions over blocks** -- :class:`Reduction` objects (``partial`` of one block of scores,
  ``merge`` of two partials along the reduced axis, ``finalize``) that ``fit_blocks(engine)`` hands to
  ``engine.reduce``; an iterative method (Sinkhorn) states one iteration as such a reduction and hands an
  :class:`Iteration` to ``engine.iterate``.

An **engine** produces the score blocks and runs the reductions; it never knows a method's name. The engines:
:class:`hubnorm.engine.LocalEngine` (in-process, CPU or a torch device), ``hubnorm.distributed.DaskEngine``
(Dask chunks), ``hubnorm.index.IndexEngine`` (top-k from a faiss IVF index). The sweep engine of
:func:`hubnorm.grid_search` runs a method's ``fit_grid`` on a :class:`~hubnorm.engine.LocalEngine` that shares
score blocks across grid points.

Orientation: ``Scores(rows, cols)`` is the matrix ``rows @ cols.T``; a reduction with ``axis=0`` reduces over
its rows and gives one value per column (per target for ``Scores("query_bank", "targets")``), ``axis=1``
reduces over its columns and gives one value per row. ``cols`` may name several inputs, concatenated
(DBSN's Sinkhorn columns ``("targets", "target_bank")``).

The reductions every method shares live here: :class:`TopK` (NNN, CSLS, DIS activation sets), :class:`LogMeanExp`
(IS, DIS, DualIS), :class:`LogSumExp` (Sinkhorn half-steps), :class:`Mean` (DN). Each has the plain
``partial`` / ``merge`` / ``finalize`` and, optionally, ``reduce_chunk``: the fast kernel of
:mod:`hubnorm.kernels` that computes the partial of a whole in-memory chunk in one call (tested equal to the
block loop by ``tests/method_checks.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, Hashable, NamedTuple, Optional, Protocol, Sequence, Tuple, Union, runtime_checkable

import torch

from ._validation import (
    check_finite_float, check_float_dtype, check_optional_bytes, check_positive_float, check_positive_int, check_seed,
)
from .kernels import (block_rows, block_shape, iter_blocks, log_mean_exp_dtype, logsumexp_scores,
                      logsumexp_similarity, topk_scores, topk_similarity, working_dtype)

#: How the limit of a parameter names each input in its error ("k=16 is larger than the query bank size").
SIZE_NAMES = {"query_bank": "the query bank size", "targets": "the number of targets",
              "target_bank": "the target bank size", "queries": "the number of queries"}


# ================================================================================================== inputs
@dataclass(frozen=True)
class Embeddings:
    """An embedding matrix read as such (not through scores), e.g. DN's bank means or its ``q . mu_T`` term."""

    name: str
    required: bool = True

    def names(self) -> Tuple[str, ...]:
        return (self.name,)


@dataclass(frozen=True)
class Scores:
    """The score matrix ``rows @ cols.T``; ``cols`` may be a tuple of inputs concatenated along the rows."""

    rows: str
    cols: Union[str, Tuple[str, ...]]
    required: bool = True

    def __post_init__(self):
        if isinstance(self.cols, list):
            object.__setattr__(self, "cols", tuple(self.cols))

    @property
    def col_names(self) -> Tuple[str, ...]:
        return (self.cols,) if isinstance(self.cols, str) else tuple(self.cols)

    def names(self) -> Tuple[str, ...]:
        return (self.rows,) + self.col_names

    def __str__(self) -> str:
        cols = self.cols if isinstance(self.cols, str) else "[" + " ; ".join(self.cols) + "]"
        return f"{self.rows} x {cols} scores"


Input = Union[Embeddings, Scores]


@dataclass(frozen=True)
class Inputs:
    """What a method reads: ``fit`` while fitting, ``score`` while scoring test queries.

    Every method reads the test-query x target scores at scoring time; ``score`` lists what it reads beyond them
    (CSLS's ``r_T(q)`` is a function of those scores; DN's ``lam q . mu_T`` needs the query embeddings).
    """

    fit: Tuple[Input, ...] = ()
    score: Tuple[Input, ...] = ()

    def usage(self, name: str) -> str:
        """``"required"``, ``"optional"`` or ``"unused"``: how fitting uses the input ``name``."""
        found = [x for x in self.fit if name in x.names()]
        if not found:
            return "unused"
        return "required" if any(x.required for x in found) else "optional"


# ================================================================================================== parameters
@dataclass(frozen=True)
class Param:
    """One hyperparameter: how it is checked, and which inputs limit it (``limited_by``).

    ``kind``: ``"real"`` (finite number, optional ``minimum``), ``"positive"`` (finite number > 0), ``"int"``
    (integer >= 1), ``"seed"``, ``"bytes"`` (None or an integer >= 0), ``"dtype"`` (None or a torch float
    dtype), ``"choice"`` (one of ``choices``). ``optional``: None is allowed. ``limited_by``: inputs whose sizes
    bound the value (the value must not exceed any of them: NNN's ``k`` and the query bank).
    """

    kind: str
    minimum: Optional[float] = None
    optional: bool = False
    choices: Tuple = ()
    limited_by: Tuple[str, ...] = ()
    doc: str = ""

    def check(self, value, name: str):
        """Raise TypeError / ValueError naming ``name`` and the fix (the messages of :mod:`hubnorm._validation`)."""
        if value is None and self.optional:
            return None
        if self.kind == "real":
            return check_finite_float(value, name, minimum=self.minimum)
        if self.kind == "positive":
            return check_positive_float(value, name)
        if self.kind == "int":
            return check_positive_int(value, name)
        if self.kind == "seed":
            return check_seed(value, name)
        if self.kind == "bytes":
            return check_optional_bytes(value, name)
        if self.kind == "dtype":
            return check_float_dtype(value, name)
        if self.kind == "choice":
            if value not in self.choices:
                raise ValueError(f"{name} must be one of {sorted(self.choices)}; got {value!r}")
            return value
        raise ValueError(f"unknown parameter kind {self.kind!r}")  # pragma: no cover - a declaration error

    def invalid_values(self):
        """``(value, exception type, message pattern)`` that :meth:`check` must refuse (the generic checks)."""
        out = []
        if self.kind in ("real", "positive"):
            out += [("0.5", TypeError, "must be a number"), (True, TypeError, "must be a number"),
                    (float("nan"), ValueError, "must be"), (float("inf"), ValueError, "must be")]
            if self.kind == "positive":
                out += [(0, ValueError, "must be a finite number > 0"), (-0.01, ValueError, "must be a finite number > 0")]
            elif self.minimum is not None:
                out += [(self.minimum - 1.0, ValueError, f"must be >= {self.minimum}")]
        elif self.kind == "int":
            out += [(0, ValueError, "must be >= 1"), (-3, ValueError, "must be >= 1"), (2.5, TypeError, "must be an integer"),
                    (True, TypeError, "must be an integer")]
        elif self.kind == "seed":
            out += [("7", TypeError, "must be a non-negative integer"), (-1, ValueError, "must be in")]
        elif self.kind == "bytes":
            out += [("2GB", TypeError, "must be None or an integer"), (-1, ValueError, "must be >= 0")]
        elif self.kind == "dtype":
            out += [("float16", TypeError, "torch floating dtype")]
        elif self.kind == "choice":
            out += [("bogus-choice", ValueError, "must be one of")]
        return out


def check_limits(params: Dict[str, Param], values: Dict[str, object], sizes: Callable[[str], Optional[int]]) -> None:
    """Each parameter with ``limited_by`` must not exceed the size of those inputs (first one named first)."""
    for name, spec in params.items():
        value = values.get(name)
        if value is None:
            continue
        for inp in spec.limited_by:
            n = sizes(inp)
            if n is not None:
                check_positive_int(value, name, maximum=n, max_name=SIZE_NAMES.get(inp, f"the size of {inp}"))


def limit_of(spec: Param, sizes: Callable[[str], Optional[int]]) -> Optional[int]:
    """The largest value ``spec`` allows given the input sizes (None: no input of ``limited_by`` is there)."""
    ns = [sizes(inp) for inp in spec.limited_by]
    ns = [n for n in ns if n is not None]
    return min(ns) if ns else None


# ================================================================================================== reductions
@dataclass
class Chunk:
    """An in-memory chunk of the inputs of one reduction, handed to :meth:`Reduction.reduce_chunk`.

    ``rows`` / ``cols``: the embeddings of the chunk's rows and columns (for an :class:`Embeddings` reduction,
    ``rows`` only); ``row_start`` / ``col_start``: their offsets in the whole matrix (for indices);
    ``row_terms`` / ``col_terms``: the slices of the reduction's side vectors; ``block_bytes``: the memory budget
    of one score block; ``cache``: a dict that keeps score blocks across calls (the sweeps), or None;
    ``backend``: the top-k kernel (:data:`hubnorm.kernels.TOPK_BACKENDS`; None: chosen by the inputs' dtype and
    device, :func:`hubnorm.kernels.topk_backend`).
    """

    rows: torch.Tensor
    cols: Optional[torch.Tensor] = None
    row_start: int = 0
    col_start: int = 0
    row_terms: Optional[torch.Tensor] = None
    col_terms: Optional[torch.Tensor] = None
    block_bytes: Optional[int] = None
    cache: Optional[dict] = None
    backend: Optional[str] = None


class Reduction:
    """A reduction of one score matrix (or embedding matrix) along one axis, written over blocks.

    ``source``: a :class:`Scores` (or :class:`Embeddings`); ``axis``: 0 reduces over the rows (one result per
    column), 1 over the columns (one result per row). Subclasses implement

    * ``partial(s, chunk)``: the partial result of one score block ``s`` (``chunk`` says where it lies and holds
      the matching slices of ``row_terms`` / ``col_terms``);
    * ``merge(a, b)``: two partials of the same kept items along the reduced axis -> one (associative);
    * ``finalize(p, n)``: the result from the merged partial (``n``: the length of the reduced axis);

    and may implement ``reduce_chunk(chunk)``, a faster kernel for the partial of a whole in-memory chunk (the
    default loops over blocks of ``block_bytes``), and ``prepare(engine)`` (decisions that need the whole inputs,
    such as a working dtype from the largest row norms; every engine calls it before the first block).
    Partials of different kept items are concatenated (:func:`concat`) by the engines.

    ``row_terms`` / ``col_terms``: optional side vectors aligned with the rows / columns (Sinkhorn's
    potentials); ``whole_rows``: the partial needs each block to span every column (a fused Sinkhorn iteration);
    ``read_only``: the partial never modifies its score block in place (an engine may then hand it a view of
    scores it keeps, instead of a copy).
    """

    source: Input
    axis: int = 0
    row_terms: Any = None
    col_terms: Any = None
    whole_rows: bool = False
    read_only: bool = False
    dtype: Optional[torch.dtype] = None  # the dtype score blocks are computed in (None: the inputs')

    def prepare(self, engine) -> None:
        pass

    def partial(self, s: torch.Tensor, chunk: Chunk):
        raise NotImplementedError

    def merge(self, a, b):
        raise NotImplementedError

    def finalize(self, p, n: int):
        return p

    def reduce_chunk(self, chunk: Chunk):
        """The partial of a whole in-memory chunk: the plain block loop (kernels override it)."""
        return reduce_blocks(self, chunk)

    def reduce_whole(self, chunk: Chunk, n: int):
        """The result when one in-memory chunk holds the whole matrix (an in-process engine): by default
        ``finalize(reduce_chunk(chunk))``."""
        return self.finalize(self.reduce_chunk(chunk), n)

    def reduce_scores(self, s: torch.Tensor, n: int, block_bytes: Optional[int] = None, visit=None):
        """The result from the whole score matrix ``s`` given in memory (:class:`hubnorm.engine.LocalEngine` over
        released score matrices): a kernel of :mod:`hubnorm.kernels`, or ``NotImplemented`` (the engine then runs
        the plain block loop over ``s``). ``visit``: ``s`` is not yet known to be finite, and the kernel calls
        ``visit(strip, first_row)`` on every strip it reads, before using it (the engine's check, see
        :func:`hubnorm.kernels.topk_scores`); a kernel that cannot returns ``NotImplemented`` when it is given
        (the engine then checks ``s`` first and asks again without it)."""
        return NotImplemented


def concat(parts: Sequence):
    """Concatenate partials of consecutive kept items (tensors, tuples of tensors, or None entries)."""
    first = parts[0]
    if first is None:
        return None
    if isinstance(first, torch.Tensor):
        return first if len(parts) == 1 else torch.cat(list(parts), dim=0)
    if isinstance(first, tuple):
        cols = [concat([p[i] for p in parts]) for i in range(len(first))]
        return type(first)(*cols) if hasattr(first, "_fields") else tuple(cols)
    raise TypeError(f"cannot concatenate partials of type {type(first).__name__}")  # pragma: no cover


def reduce_blocks(red: Reduction, chunk: Chunk):
    """The plain block loop: score blocks of at most ``block_bytes``, ``partial`` each, ``merge`` along the
    reduced axis, concatenate along the kept one. The definition every fast kernel is tested against."""
    rows, cols = chunk.rows, chunk.cols
    dt = red.dtype or rows.dtype
    item = max(4, torch.empty((), dtype=dt).element_size())
    if cols is None:  # an Embeddings reduction: blocks of rows
        size = block_rows(rows.shape[1], item, chunk.block_bytes)
        acc = None
        for r0, r1 in iter_blocks(rows.shape[0], size):
            sub = Chunk(rows[r0:r1], None, chunk.row_start + r0, 0, block_bytes=chunk.block_bytes)
            p = red.partial(rows[r0:r1].to(dt), sub)
            acc = p if acc is None else red.merge(acc, p)
        return acc
    n_r, n_c = rows.shape[0], cols.shape[0]
    if red.whole_rows:
        c_size = n_c
        r_size = block_rows(n_c, item, chunk.block_bytes)
    else:
        r_size, c_size = block_shape(n_r, n_c, item, chunk.block_bytes)

    def block(r0, r1, c0, c1):
        return rows[r0:r1].to(dt) @ cols[c0:c1].to(dt).T, Chunk(
            rows[r0:r1], cols[c0:c1], chunk.row_start + r0, chunk.col_start + c0,
            None if chunk.row_terms is None else chunk.row_terms[r0:r1],
            None if chunk.col_terms is None else chunk.col_terms[c0:c1], chunk.block_bytes)
    return block_loop(red, list(iter_blocks(n_r, r_size)), list(iter_blocks(n_c, c_size)), block)


def block_loop(red: Reduction, row_blocks, col_blocks, block):
    """The plain loop over a grid of score blocks, wherever they come from (:func:`reduce_blocks`: products of
    embeddings; the engine: stored matrices): ``block(r0, r1, c0, c1) -> (scores, chunk)``, ``partial`` of each,
    ``merge`` along the reduced axis, concatenated along the kept one."""
    kept, reduced = (col_blocks, row_blocks) if red.axis == 0 else (row_blocks, col_blocks)
    out = []
    for k0, k1 in kept:
        acc = None
        for j0, j1 in reduced:
            (r0, r1), (c0, c1) = ((j0, j1), (k0, k1)) if red.axis == 0 else ((k0, k1), (j0, j1))
            p = red.partial(*block(r0, r1, c0, c1))
            acc = p if acc is None else red.merge(acc, p)
        out.append(acc)
    return concat(out)


class TopKResult(NamedTuple):
    """The ``k`` largest scores per kept item, sorted in decreasing order, and (when asked) their indices."""

    values: torch.Tensor
    indices: Optional[torch.Tensor]


def _pad_topk(v: torch.Tensor, i: torch.Tensor, k: int):
    """A top-``kk`` of fewer than ``k`` reduced items padded to ``k`` columns: value -inf, index -1."""
    kk = v.shape[1]
    if kk >= k:
        return v, i
    v = torch.cat([v, torch.full((v.shape[0], k - kk), -math.inf, dtype=v.dtype, device=v.device)], 1)
    i = torch.cat([i, torch.full((i.shape[0], k - kk), -1, dtype=i.dtype, device=i.device)], 1)
    return v, i


class TopK(Reduction):
    """The ``k`` largest scores along ``axis`` (NNN's neighbours, CSLS's radius, DIS's activation sets).

    Plain form: ``S.topk(k, dim=axis)``. Partial: the top-``k`` of one block (padded with -inf when the block
    holds fewer than ``k``); merge: the top-``k`` of two partials. ``reduce_chunk``:
    :func:`hubnorm.kernels.topk_similarity` (exact; its kernel is the chunk's ``backend``: faiss's flat search for
    float32 on the CPU, the streamed torch kernel otherwise), unless ``fast=False``.
    Ties between equal scores may keep any of the tied indices (the values never change).
    """

    def __init__(self, source: Scores, k: int, *, axis: int = 0, indices: bool = False, fast: bool = True):
        self.source, self.k, self.axis, self.indices, self.fast = source, int(k), axis, indices, fast

    def partial(self, s, chunk):
        x = s if self.axis == 1 else s.T             # kept items x reduced items
        start = chunk.col_start if self.axis == 1 else chunk.row_start
        kk = min(self.k, x.shape[1])
        v, i = x.topk(kk, dim=1)
        i = i + start
        v, i = _pad_topk(v, i, self.k)
        return TopKResult(v, i if self.indices else None)

    def merge(self, a, b):
        v = torch.cat([a.values, b.values], dim=1)
        top, p = v.topk(self.k, dim=1)
        i = None if a.indices is None else torch.cat([a.indices, b.indices], dim=1).gather(1, p)
        return TopKResult(top, i)

    def finalize(self, p, n):
        return p

    def reduce_chunk(self, chunk):
        if not self.fast:
            return reduce_blocks(self, chunk)
        a, b = (chunk.cols, chunk.rows) if self.axis == 0 else (chunk.rows, chunk.cols)
        start = chunk.row_start if self.axis == 0 else chunk.col_start
        kk = min(self.k, b.shape[0])
        v, i = topk_similarity(a, b, kk, block_bytes=chunk.block_bytes, backend=chunk.backend)
        i = i + start
        v, i = _pad_topk(v, i, self.k)  # a chunk of fewer than k reduced items (a small bank chunk on Dask)
        return TopKResult(v, i if self.indices else None)

    def reduce_scores(self, s, n, block_bytes=None, visit=None):
        if not self.fast:
            return NotImplemented
        kk = min(self.k, s.shape[self.axis])
        v, i = topk_scores(s, kk, self.axis, block_bytes=block_bytes, visit=visit)
        v, i = _pad_topk(v, i, self.k)
        return TopKResult(v, i if self.indices else None)


class LogMeanExp(Reduction):
    """``log mean exp(scale * s)`` along ``axis`` (IS, DIS, DualIS), centred by ``log n`` so that it stays O(1).

    Plain form: ``torch.logsumexp(scale * S, dim=axis) - log(n)``. The working dtype follows
    :func:`hubnorm.kernels.log_mean_exp_dtype` (float64 when float32 cannot hold the result divided by ``unit``;
    ``ValueError`` naming ``name`` when even float64 cannot). Partial: the block's log-sum-exp in the working
    dtype; merge: ``logaddexp`` in float64; ``reduce_chunk``: :func:`hubnorm.kernels.logsumexp_similarity`
    (with ``chunk.cache``: the similarity blocks shared across a temperature sweep, bit-identical results).
    ``scale = 0`` gives exactly 0 (use :func:`log_mean_exp`).
    """

    def __init__(self, source: Scores, scale: float, *, unit: Optional[float] = None, name: str = "scale",
                 axis: int = 0):
        self.source, self.scale, self.axis, self.name = source, float(scale), axis, name
        self.unit = abs(self.scale) if unit is None else abs(float(unit))
        self.work = None
        self.cache = None
        self._deferred = False   # prepare() left the working dtype to the kernel's pass (engine.bound_in_kernel)

    def prepare(self, engine):
        rows_name, cols = self.source.rows, self.source.col_names
        reduced = engine.size(rows_name) if self.axis == 0 else sum(engine.size(c) for c in cols)
        base = engine.base_dtype(self.source) if hasattr(engine, "base_dtype") else engine.dtype
        self._dtype_rule = lambda smax: log_mean_exp_dtype(base, smax, reduced, abs(self.scale), self.unit, self.name)
        self._base = base
        self._deferred = getattr(engine, "bound_in_kernel", None) is not None and engine.bound_in_kernel(self)
        if self._deferred:
            # one pass: the kernel that reads the unchecked stored matrix takes its bound (reduce_scores)
            self.work = self.dtype = None
        else:
            self.work = self._dtype_rule(engine.score_bound(self.source))
            self.dtype = self.work
        n_cells = engine.size(rows_name) * sum(engine.size(c) for c in cols)
        itemsize = torch.empty((), dtype=engine.dtype).element_size()
        # a sweep's engine keeps the similarity blocks of this score matrix for the next temperature
        self.cache = engine.shared(("similarity blocks", self.source, self.axis), n_cells * itemsize)

    def partial(self, s, chunk):
        return torch.logsumexp(s.mul_(self.scale), dim=self.axis)

    def merge(self, a, b):
        return torch.logaddexp(a.to(torch.float64), b.to(torch.float64))

    def finalize(self, p, n):
        return p.to(self.work) - math.log(n)

    def reduce_chunk(self, chunk):
        a, b = (chunk.cols, chunk.rows) if self.axis == 0 else (chunk.rows, chunk.cols)
        return logsumexp_similarity(a, b, self.scale, block_bytes=chunk.block_bytes, dtype=self.work,
                                    shared_blocks=chunk.cache)

    def reduce_scores(self, s, n, block_bytes=None, visit=None):
        if not self._deferred:   # prepare() took the bound
            if visit is not None:   # ... so the matrix was checked: never reached by an engine
                return NotImplemented
            return self.finalize(logsumexp_scores(s, self.scale, self.axis, dtype=self.work, block_bytes=block_bytes),
                                 n)
        if visit is None:
            raise RuntimeError("LogMeanExp: prepare() left the working dtype to the kernel's checking pass, but the "
                               "engine gave no visit (its bound_in_kernel and its kernel call disagree)")
        # The bound is taken in the kernel's own pass (visit checks each slab finite and gives its min and max):
        # computed in the cheapest dtype, then kept when the bound's rule picks that dtype -- the same numbers as the
        # two-pass path, bit for bit -- or computed again in the dtype the rule picks (the file is cached by then).
        big = [0.0]

        def take(strip, r0):
            lo, hi = visit(strip, r0)
            big[0] = max(big[0], abs(lo), abs(hi))

        first = working_dtype(self._base, 0.0)   # the cheapest dtype the rule can pick
        out = logsumexp_scores(s, self.scale, self.axis, dtype=first, block_bytes=block_bytes, visit=take)
        self._deferred = False
        self.work = self.dtype = self._dtype_rule(big[0])
        if self.work != first:
            out = logsumexp_scores(s, self.scale, self.axis, dtype=self.work, block_bytes=block_bytes)
        return self.finalize(out, n)


def log_mean_exp(engine, source: Scores, scale: float, *, unit: Optional[float] = None, name: str = "scale",
                 axis: int = 0) -> torch.Tensor:
    """:class:`LogMeanExp` run by ``engine``; exactly 0 for ``scale = 0`` (in the inputs' dtype)."""
    if float(scale) == 0.0:
        n = engine.size(source.rows) if axis == 1 else sum(engine.size(c) for c in source.col_names)
        return torch.zeros(n, dtype=engine.dtype, device=engine.device)
    return engine.reduce(LogMeanExp(source, scale, unit=unit, name=name, axis=axis))


class LogSumExp(Reduction):
    """``logsumexp(scale * s + terms)`` along ``axis`` in a given working dtype, float64 result: one half-step of
    log-domain Sinkhorn (``row_terms`` / ``col_terms``: the other side's potentials, already divided by tau).

    Plain form: ``torch.logsumexp(scale * S + row_terms[:, None] + col_terms[None, :], dim=axis)``.
    ``finalize`` applies ``post`` (a function of the float64 result), e.g. ``f = tau log a - tau * lse``.
    """

    def __init__(self, source: Scores, scale: float, work: torch.dtype, *, axis: int, row_terms=None,
                 col_terms=None, post: Optional[Callable[[torch.Tensor], torch.Tensor]] = None):
        self.source, self.scale, self.axis = source, float(scale), axis
        self.work = self.dtype = work
        self.row_terms, self.col_terms, self.post = row_terms, col_terms, post

    def partial(self, s, chunk):
        x = s.mul_(self.scale)
        if chunk.row_terms is not None:
            x.add_(chunk.row_terms.to(x.dtype)[:, None])
        if chunk.col_terms is not None:
            x.add_(chunk.col_terms.to(x.dtype)[None, :])
        return torch.logsumexp(x, dim=self.axis).to(torch.float64)

    def merge(self, a, b):
        return torch.logaddexp(a, b)

    def finalize(self, p, n):
        return p if self.post is None else self.post(p)


class Moments(Reduction):
    """The mean and the (population) standard deviation of the scores along ``axis`` (mutual proximity's Gaussian
    of a target's scores with the bank). Plain form: ``S.mean(dim=axis), S.std(dim=axis, unbiased=False)``.
    Partial: the float64 sums of ``s`` and ``s**2``; merge: add; finalize: ``mean = sum / n``,
    ``sd = sqrt(max(0, sumsq / n - mean**2))``, in the engine's dtype."""

    read_only = True

    def __init__(self, source: Scores, *, axis: int = 0):
        self.source, self.axis = source, axis
        self.out_dtype = None

    def prepare(self, engine):
        self.out_dtype = engine.dtype

    def partial(self, s, chunk):
        x = s.to(torch.float64)
        return x.sum(dim=self.axis), (x * x).sum(dim=self.axis)

    def merge(self, a, b):
        return a[0] + b[0], a[1] + b[1]

    def finalize(self, p, n):
        mean = p[0] / n
        sd = (p[1] / n - mean * mean).clamp_(min=0).sqrt_()
        dt = self.out_dtype or torch.float32
        return mean.to(dt), sd.to(dt)


class Mean(Reduction):
    """The mean row of an embedding matrix (DN's bank means). Partial: the float64 column sum of a block; merge:
    add; finalize: divide by the number of rows, in the input dtype. A whole in-memory matrix:
    ``x.mean(dim=0)`` in its own dtype (what the in-memory fit has always computed)."""

    def __init__(self, name: str):
        self.source = Embeddings(name)
        self.axis = 0
        self.out_dtype = None

    def prepare(self, engine):
        self.out_dtype = engine.dtype

    def partial(self, s, chunk):
        return s.to(torch.float64).sum(dim=0)

    def merge(self, a, b):
        return a + b

    def finalize(self, p, n):
        return (p / n).to(self.out_dtype or torch.float32)

    def reduce_whole(self, chunk, n):
        return chunk.rows.mean(dim=0)


# ================================================================================================== iterations
class Iteration:
    """An iterative computation stated as one reduction per step (Sinkhorn: one iteration per bank pass).

    ``start(engine)`` -> state; ``step(engine, state)`` -> ``(state, done)``, each step running reductions with
    ``engine.reduce``; ``result(engine, state)`` -> the output. ``fused(engine)``: optionally the whole run as one
    in-memory kernel (``NotImplemented`` when there is none); an in-process engine uses it, the others loop.
    """

    def fused(self, engine):
        return NotImplemented

    def start(self, engine):
        raise NotImplementedError

    def step(self, engine, state):
        raise NotImplementedError

    def result(self, engine, state):
        return state

    def run(self, engine):
        """The plain loop every engine runs (without a fused kernel): start, step until done, result."""
        state, done = self.start(engine), False
        while not done:
            state, done = self.step(engine, state)
        return self.result(engine, state)


@runtime_checkable
class Engine(Protocol):
    """What a method's ``fit_blocks`` may ask of the engine that runs it: the interface every engine implements
    (in process :class:`hubnorm.engine.LocalEngine` over embeddings or stored score matrices, and its sweep and
    faiss-index forms, :class:`hubnorm.distributed.DaskEngine`). Where the blocks come from and where they are
    reduced is the engine's business; a method sees only this. ``tests/test_engine_protocol.py`` checks
    that every engine implements it and that no module outside the engines' own uses anything else (``base_dtype``,
    the dtype a stored matrix was written in, and ``bound_in_kernel`` are optional and asked with ``getattr``).

    Beyond the blocks, the fit lifecycle (:func:`hubnorm.normalizers.base.fit_on_engine`) asks ``cannot_read`` (a
    sentence saying why an input a method declares cannot be read, e.g. embeddings from an engine of score matrices;
    None when it can) and ``fingerprints`` (the banks' fingerprints for :mod:`hubnorm.provenance`; None when the
    engine cannot tell); a method that needs the vectors themselves (a faiss index of the bank) reads
    ``embeddings``."""

    dtype: torch.dtype              # the working dtype of the inputs
    device: torch.device            # where fitted tensors are returned
    block_bytes: Optional[int]      # the block budget of the reductions
    sweep_bytes: Optional[int]      # the cache budget of a sweep (None outside sweeps)

    def has(self, name: str) -> bool: ...                          # is the input there?
    def size(self, name: str) -> Optional[int]: ...                # its number of rows (None when absent)
    def tensor(self, names) -> torch.Tensor: ...                   # the input(s), whole (small inputs only)
    def take_rows(self, name: str, idx: torch.Tensor) -> torch.Tensor: ...
    def to_tensor(self, value): ...                                # an engine's result as an in-memory tensor
    def spans(self, name) -> bool: ...                             # does the input span several chunks?
    def shared(self, key: Hashable, nbytes: int, budget: Optional[int] = None) -> Optional[dict]: ...
    def score_bound(self, source: Scores) -> float: ...            # a bound on |scores| of a score matrix
    def reduce(self, red: Reduction): ...                          # run one reduction
    def iterate(self, it: Iteration): ...                          # run an iteration of reductions
    def cannot_read(self, source: Input) -> Optional[str]: ...     # why a method's input cannot be read here
    def embeddings(self) -> Dict[str, torch.Tensor]: ...           # the inputs held as whole in-memory embeddings
    def fingerprints(self, names: Sequence[str]) -> Optional[dict]: ...   # what the banks were (a fit's provenance)
    def release(self) -> None: ...                                 # the end of a fit: drop what it kept in memory


#: The members of :class:`Engine` (what a method's file may read off an engine).
ENGINE_MEMBERS = ("dtype", "device", "block_bytes", "sweep_bytes", "has", "size", "tensor", "take_rows", "to_tensor",
                  "spans", "shared", "score_bound", "reduce", "iterate", "cannot_read", "embeddings", "fingerprints",
                  "release")


__all__ = ["Embeddings", "Scores", "Inputs", "Param", "Chunk", "Reduction", "TopK", "TopKResult", "LogMeanExp", "Moments",
           "LogSumExp", "Mean", "Iteration", "check_limits", "limit_of", "log_mean_exp", "reduce_blocks", "block_loop", "concat",
           "SIZE_NAMES", "Engine", "ENGINE_MEMBERS"]
