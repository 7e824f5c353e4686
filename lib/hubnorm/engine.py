"""The in-process engine: runs any method's reductions (:mod:`hubnorm.blocks`) on in-memory tensors or on stored
score matrices, on the CPU or a torch device. It never knows a method's name.

:class:`LocalEngine` holds the validated inputs of one fit and answers what a method's ``fit_blocks(engine)`` asks.
Its score blocks come from one of two places, and only the engine knows which:

* **a product of embeddings** (``inputs``: ``targets``, ``query_bank``, ``target_bank``, torch tensors of one dtype
  on one device): ``reduce`` runs ``prepare``, then one call of the reduction's ``reduce_whole`` on the whole
  inputs (its fast kernel from :mod:`hubnorm.kernels`: :func:`~hubnorm.kernels.topk_similarity`,
  :func:`~hubnorm.kernels.logsumexp_similarity`, the fused Sinkhorn of ``hubnorm.normalizers.sinkhorn``; or the
  plain block loop :func:`hubnorm.blocks.reduce_blocks`). The top-k kernel is picked once, by the inputs' dtype and
  device (``backend``, :func:`hubnorm.kernels.topk_backend`: faiss's flat search for float32 on the CPU, the torch
  kernel for float64 and torch devices);
* **stored score matrices** (``matrices``: ``{(rows, cols): matrix}``, numpy arrays, ``np.load(..., mmap_mode="r")``
  memory maps, torch tensors or :class:`~hubnorm.matrices.ScoreMatrix` objects; released similarity matrices,
  :mod:`hubnorm.scores`): the reductions run through the kernels over given scores
  (:func:`~hubnorm.kernels.topk_scores`, :func:`~hubnorm.kernels.logsumexp_scores`; float32 for a float32 matrix
  where the precision rules allow) on the matrix in memory -- a native float32 / float64 array or memory map of any
  size as a zero-copy view (read strip by strip from the page cache; checked finite by the top-k kernel as it reads
  it, or by one pass that also takes its largest ``|s|``), any other (a seeded subset, float16) read once per fit
  into a copy when it fits ``resident_bytes``, a larger one streamed block by block along its contiguous axis
  (``benchmarks/reports/scores_read.md``). A matrix given for ``(a, b)`` also serves ``(b, a)`` (read transposed).

Either way the engine answers ``reduce(reduction)``, ``iterate(iteration)`` (the iteration's fused in-memory kernel
over embeddings when it has one, else step by step), ``size`` / ``has`` / ``tensor`` / ``max_norm`` /
``score_bound`` / ``base_dtype`` / ``take_rows`` (what the inputs are) and ``shared(key, nbytes)`` (a dict that
keeps score blocks across the fits of one sweep; None outside sweeps). ``plain=True`` runs every reduction by its
plain block loop (``partial``, ``merge``, ``finalize``; every block read from the matrix every time), never a
kernel: the reference every fast path is tested equal to (values; indices up to ties: ``tests/method_checks.py``,
``tests/test_fast_paths.py``, ``tests/test_scores_fast.py``). Approximate sources are engines of their own
(``hubnorm.index.IndexEngine``).
"""

from __future__ import annotations

import math
import warnings
import weakref
from dataclasses import replace
from typing import Dict, Hashable, Mapping, Optional, Tuple

import numpy as np
import torch

from .blocks import Chunk, Embeddings, Iteration, Reduction, Scores, TopKResult, block_loop, reduce_blocks
from .kernels import DEFAULT_BLOCK_BYTES, TOPK_BACKENDS, block_rows, block_shape, iter_blocks, topk_backend
from .matrices import INPUT_LABELS, Pair, ProductScores, ScoreMatrix, check_finite_block
from .provenance import fingerprint

#: Inputs an engine may hold, in the order their sizes are reported.
INPUT_NAMES = ("targets", "query_bank", "target_bank", "queries")

#: Default memory budget of one stored matrix that the fast path keeps in memory during a fit (read once) when it
#: cannot be a view.
DEFAULT_RESIDENT_BYTES = 2 * 2**30


class LocalEngine:
    """In-process engine over embeddings (in-memory tensors of one dtype on one device) and/or stored score matrices.

    Parameters:
        inputs: ``{name: tensor}`` embeddings; ``None`` values are absent inputs.
        matrices: ``{(rows, cols): matrix}`` stored score matrices, ``rows`` / ``cols`` among
            :data:`~hubnorm.matrices.INPUT_LABELS` (``("query_bank", "targets")``: the bank-query x gallery scores);
            the matrices of one engine share their rows and columns (same sizes, same order).
        dtype: the dtype score blocks are read in from stored matrices (None: the embeddings' dtype, or float64
            without embeddings; float32 halves the memory).
        block_bytes: memory budget of one score block (None: :data:`hubnorm.kernels.DEFAULT_BLOCK_BYTES`).
        sweep_bytes: when set, :meth:`shared` hands out dicts that keep score blocks across the fits of a sweep,
            for score matrices of at most this many bytes (None: a fit of its own, nothing is shared).
        plain: run every reduction by its plain block loop (:func:`hubnorm.blocks.reduce_blocks`: ``partial``,
            ``merge``, ``finalize``) and every iteration step by step, never a fast kernel: the reference the
            kernels are tested against (``tests/method_checks.py``, ``tests/test_scores_fast.py``).
        backend: the top-k kernel over embeddings (:data:`hubnorm.kernels.TOPK_BACKENDS`); None:
            :func:`hubnorm.kernels.topk_backend` of the inputs' dtype and device (the attribute ``backend``).
        host: ``{name: rows}``, the caller's rows in host memory of an input the engine holds on a device (the same
            values): what :meth:`host_rows` reads instead of copying the device tensor back (a fit's provenance
            fingerprint of a GPU bank).
        hints: ``{(rows, cols): text}`` appended to the error of a missing score matrix (where to add it).
        gallery: what identifies the gallery's columns when no stored test matrix does (:meth:`gallery`).
        resident_bytes: a stored matrix that cannot be a zero-copy view (a subset, float16) of at most this many
            bytes is read once per fit into a copy in its own dtype, in one pass along its contiguous axis (checked
            finite, its largest ``|s|`` taken on the way), kept until the fit ends (:meth:`release`); a larger one is
            streamed by every reduction. None: :data:`DEFAULT_RESIDENT_BYTES`; 0: neither views nor copies.

    ``blocks_read`` / ``largest_block``: how many stored blocks were read and the most cells one held (a test reads
    them to show that a matrix larger than the budget is never read in a larger block).
    """

    def __init__(self, inputs: Optional[Dict[str, Optional[torch.Tensor]]] = None, *,
                 matrices: Optional[Mapping[Pair, object]] = None, dtype: Optional[torch.dtype] = None,
                 block_bytes: Optional[int] = None, sweep_bytes: Optional[int] = None, plain: bool = False,
                 backend: Optional[str] = None, host: Optional[Dict[str, object]] = None,
                 hints: Optional[Mapping[Pair, str]] = None, resident_bytes: Optional[int] = None,
                 gallery: object = None):
        self.inputs = {k: v for k, v in (inputs or {}).items() if v is not None}
        self.host = {k: v for k, v in (host or {}).items() if k in self.inputs and v is not None}
        first = self.inputs.get("targets", next(iter(self.inputs.values()), None))
        if dtype is not None and dtype not in (torch.float32, torch.float64):
            raise TypeError(f"dtype must be torch.float32 or torch.float64; got {dtype!r}")
        if dtype is not None and first is not None and dtype != first.dtype:
            raise ValueError(f"dtype {dtype} differs from the embeddings' {first.dtype}: dtype sets how stored matrices "
                             "are read; cast the embeddings instead (or leave dtype None)")
        self.dtype = dtype if dtype is not None else first.dtype if first is not None else \
            torch.float64 if matrices else torch.float32
        self.device = first.device if first is not None else torch.device("cpu")
        self.block_bytes = block_bytes
        self.sweep_bytes = sweep_bytes
        self.plain = bool(plain)
        if backend is not None and backend not in TOPK_BACKENDS:
            raise ValueError(f"backend must be one of {list(TOPK_BACKENDS)} or None; got {backend!r}")
        self.backend = topk_backend(self.dtype, self.device) if backend is None else backend
        self._shared: Dict[Hashable, dict] = {}
        self._concat: Dict[Tuple[str, ...], torch.Tensor] = {}
        # stored score matrices
        self.resident_bytes = DEFAULT_RESIDENT_BYTES if resident_bytes is None else int(resident_bytes)
        self._res: Dict[Pair, Optional[torch.Tensor]] = {}
        self._views: set = set()   # ids of the stored matrices kept as views (checked by _check or a kernel)
        self._checked: set = set()  # ids of the views checked finite in this fit (checked again by the next fit)
        self.hints = dict(hints or {})
        self._gallery = None if gallery is None else weakref.ref(gallery)
        self._products: Dict[Pair, ProductScores] = {}
        self.matrices: Dict[Pair, ScoreMatrix] = {}
        self.sizes: Dict[str, Tuple[int, str]] = {}
        for key, m in (matrices or {}).items():
            if m is None:
                continue
            if not (isinstance(key, tuple) and len(key) == 2 and all(k in INPUT_LABELS for k in key)) \
                    or key[0] == key[1]:
                raise ValueError(f"score matrix key {key!r} must be a pair of two different inputs among "
                                 f"{sorted(INPUT_LABELS)}")
            sm = m if isinstance(m, ScoreMatrix) else ScoreMatrix(m, f"the {key[0]} x {key[1]} score matrix")
            for name, n in zip(key, sm.shape):
                seen = self.sizes.get(name)
                if seen is not None and seen[0] != n:
                    raise ValueError(f"{sm.label} has {n} {INPUT_LABELS[name]} items but {seen[1]} has {seen[0]}: "
                                     "the matrices of one task must share their rows and columns (same order)")
                self.sizes.setdefault(name, (n, sm.label))
            self.matrices[key] = sm
        for name, x in self.inputs.items():
            seen = self.sizes.get(name)
            if seen is not None and seen[0] != x.shape[0]:
                raise ValueError(f"{seen[1]} has {seen[0]} {INPUT_LABELS[name]} items but the {name} embeddings have "
                                 f"{x.shape[0]} rows: the matrices and embeddings of one fit must share their items")
        self._bound: Dict[Pair, float] = {}
        self.blocks_read = 0
        self.largest_block = 0

    # ------------------------------------------------------------------ what the inputs are
    def has(self, name: str) -> bool:
        return name in self.inputs or name in self.sizes

    def size(self, name: str) -> Optional[int]:
        x = self.inputs.get(name)
        if x is not None:
            return int(x.shape[0])
        got = self.sizes.get(name)
        return None if got is None else got[0]

    def tensor(self, names) -> torch.Tensor:
        """The input ``names`` (a name, or a tuple of names concatenated along the rows)."""
        if isinstance(names, str):
            names = (names,)
        names = tuple(names)
        missing = [n for n in names if n not in self.inputs]
        if missing and self.matrices and not self.inputs:
            raise ValueError(f"this step needs the embeddings of {' ; '.join(names)}, but a score task holds only "
                             "score matrices: run it from embeddings (local:, cache: or synthetic: sources, or a sims: "
                             "folder whose manifest lists them under 'embeddings')")
        if missing:
            raise ValueError(f"this fit has no {missing[0]} embeddings (needed as {' ; '.join(names)})")
        if len(names) == 1:
            return self.inputs[names[0]]
        if names not in self._concat:
            self._concat[names] = torch.cat([self.inputs[n] for n in names], dim=0)
        return self._concat[names]

    def host_rows(self, name: str):
        """The rows of input ``name`` in host memory: the caller's own (``host``) when the engine holds them on a
        device, else the tensor itself."""
        return self.host.get(name, self.tensor(name))

    def max_norm(self, name: str) -> float:
        return float(torch.linalg.vector_norm(self.tensor(name), dim=1).max())

    def _product(self, source: Scores) -> bool:
        """Whether the blocks of ``source`` are products of this engine's embeddings (else read from matrices)."""
        return all(n in self.inputs for n in (source.rows, *source.col_names)) or not self.matrices

    def score_bound(self, source: Scores) -> float:
        """An upper bound of ``|s|`` over the score matrix ``source`` (the input of the working-dtype rules): the
        product of the largest row norms of embeddings, or the largest ``|s|`` of stored matrices (known from a sims
        folder's scan, or taken while the matrix is read into memory, or else read once, block by block)."""
        if self._product(source):
            return self.max_norm(source.rows) * max(self.max_norm(c) for c in source.col_names)
        out = 0.0
        for col in source.col_names:
            key = (source.rows, col)
            if key not in self._bound:
                stored = self._stored(*key)
                if stored.bound is None:
                    self.resident(*key)                      # the fast path takes the bound in its one pass
                if stored.bound is None:
                    m = self.matrix(*key)
                    big = 0.0
                    for (r0, r1), (c0, c1) in self._tiles(m.shape[0], m.shape[1], False, m.dtype, m.rows_contiguous):
                        big = max(big, float(self._read(m, r0, r1, c0, c1, m.dtype).abs().max()))
                    stored.bound = big
                self._bound[key] = stored.bound
            out = max(out, self._bound[key])
        return out

    def base_dtype(self, source: Scores) -> torch.dtype:
        """The dtype the working-dtype rules start from (:func:`hubnorm.kernels.working_dtype`): float32 when the
        engine's dtype is, or (fast path) when every matrix of ``source`` is stored in float32, else float64; for
        products of embeddings, their dtype."""
        if self._product(source):
            return self.dtype
        if self.dtype == torch.float32:
            return torch.float32
        if self.plain:
            return self.dtype
        stored = [self._stored(source.rows, c) for c in source.col_names]
        return torch.float32 if all(m.dtype == torch.float32 for m in stored) else self.dtype

    def take_rows(self, name: str, idx: torch.Tensor) -> torch.Tensor:
        x = self.tensor(name)
        return x[idx.to(x.device)]

    def to_tensor(self, value):
        return value

    def spans(self, name) -> bool:
        """Whether one block can hold every row of ``name`` (always, in memory)."""
        return True

    def shared(self, key: Hashable, nbytes: int, budget: Optional[int] = None) -> Optional[dict]:
        """A dict kept across the fits of one sweep for the score blocks identified by ``key`` (``nbytes`` of them),
        when this engine runs a sweep and they fit ``budget`` (default: the engine's ``sweep_bytes``)."""
        limit = self.sweep_bytes if budget is None else budget
        if self.sweep_bytes is None or limit is None or nbytes > limit:
            return None
        return self._shared.setdefault(key, {})

    def has_matrix(self, rows: str, cols: str) -> bool:
        return (rows, cols) in self.matrices or (cols, rows) in self.matrices

    def matrix(self, rows: str, cols: str) -> ScoreMatrix:
        """The ``rows x cols`` score matrix: the product of their embeddings when the engine holds both (computed
        block by block when read; beside stored matrices of other pairs), else the stored one (a given
        ``cols x rows`` one read transposed)."""
        if rows in self.inputs and cols in self.inputs:
            if (rows, cols) not in self._products:
                m = ProductScores(self.inputs[rows], self.inputs[cols], f"the {rows} x {cols} scores")
                m.bound = self.max_norm(rows) * self.max_norm(cols)
                self._products[(rows, cols)] = m
            return self._products[(rows, cols)]
        if (rows, cols) in self.matrices:
            return self.matrices[(rows, cols)]
        if (cols, rows) in self.matrices:
            return self.matrices[(cols, rows)].T
        hint = self.hints.get((rows, cols)) or self.hints.get((cols, rows)) or ""
        raise ValueError(f"this score task has no {INPUT_LABELS[rows]} x {INPUT_LABELS[cols]} score matrix "
                         f"({rows} x {cols}){': ' + hint if hint else ''}")

    def cannot_read(self, source) -> Optional[str]:
        """Why a method's input ``source`` (:class:`~hubnorm.blocks.Embeddings` or a required
        :class:`~hubnorm.blocks.Scores` of the fit or of scoring) cannot be read from this engine, as the end of a
        sentence that starts with the method's name; None when it can, or when it is not this engine's to give (test
        queries come at scoring time; a bank left out of an engine of embeddings is the fit's required-bank check)."""
        if isinstance(source, Embeddings):   # an optional input the task lacks altogether is simply not read
            if source.name in self.inputs or not self.matrices or not (source.required or self.has(source.name)):
                return None
            return (f"reads the embeddings of {source.name} ({INPUT_LABELS[source.name]}), not only scores: a task "
                    "given as score matrices (a sims: source) cannot run it without them; add them to the task "
                    f"(RetrievalTask(..., {source.name}=...); a sims: folder lists them under 'embeddings' in its "
                    "manifest) or run it from embeddings (local:, cache: or synthetic: sources)")
        if not source.required or source.rows == "queries" or not self.matrices:
            return None
        for col in source.col_names:
            if all(n in self.inputs for n in (source.rows, col)) or self.has_matrix(source.rows, col):
                continue
            try:
                self.matrix(source.rows, col)
            except ValueError as e:
                return (f"needs the {INPUT_LABELS[source.rows]} x {INPUT_LABELS[col]} score matrix "
                        f"({source.rows} x {col}), which is missing. {e}")
        return None

    def embeddings(self) -> Dict[str, torch.Tensor]:
        """The inputs held as whole in-memory embeddings (``{name: tensor}``; none for an engine of score matrices
        alone)."""
        return dict(self.inputs)

    def fingerprints(self, names) -> Optional[dict]:
        """The fingerprints (:func:`hubnorm.provenance.fingerprint`) of the banks among ``names`` that this engine
        holds: embeddings from their rows in host memory (beside stored matrices, only a bank whose test rows, the
        queries or the targets, are embeddings too); a query bank given as stored score rows over the gallery (or
        held as embeddings while the test queries are not: the rows the test queries can be compared with) as a
        function that sketches them when a certificate first asks (a stored matrix is read in
        the fit's own order only)."""
        test_of = {"query_bank": "queries", "target_bank": "targets"}   # the test rows each bank is compared with
        out = {name: fingerprint(self.host_rows(name), name, block_bytes=self.block_bytes) for name in names
               if name in self.inputs and (not self.matrices or test_of.get(name, name) in self.inputs)}
        product = all(n in self.inputs for n in ("query_bank", "targets"))
        if "query_bank" in names and "query_bank" not in out and (product or self.has_matrix("query_bank", "targets")):
            matrix, budget, gallery = self.matrix("query_bank", "targets"), self.block_bytes, self.gallery()

            def deferred():
                return replace(fingerprint(matrix, "query_bank", kind="scores", block_bytes=budget), over=gallery)
            out["query_bank"] = deferred
        return out

    def gallery(self):
        """What identifies the columns of this engine's stored score rows: a weak reference to its test matrix
        (queries x targets, in either orientation), so that score rows fingerprinted over one gallery are never
        compared with score rows over another of the same width; else the ``gallery`` it was given (the targets'
        embeddings of a task whose test scores are their product); None without either."""
        for key in (("queries", "targets"), ("targets", "queries")):
            if key in self.matrices:
                return weakref.ref(self.matrices[key])
        return self._gallery

    # ------------------------------------------------------------------ running reductions
    def chunk(self, red: Reduction) -> Tuple[Chunk, int]:
        """The whole embedding inputs of ``red`` as one in-memory :class:`~hubnorm.blocks.Chunk`, and the length of
        its reduced axis."""
        src = red.source
        if isinstance(src, Embeddings):
            x = self.tensor(src.name)
            return Chunk(x, block_bytes=self.block_bytes, backend=self.backend), x.shape[0]
        rows, cols = self.tensor(src.rows), self.tensor(src.cols)
        rt = None if red.row_terms is None else self.to_tensor(red.row_terms)
        ct = None if red.col_terms is None else self.to_tensor(red.col_terms)
        cache = getattr(red, "cache", None)
        n = rows.shape[0] if red.axis == 0 else cols.shape[0]
        return Chunk(rows, cols, 0, 0, rt, ct, self.block_bytes, cache, self.backend), n

    def reduce(self, red: Reduction):
        if isinstance(red.source, Scores) and not self._product(red.source):
            return self._reduce_stored(red)
        red.prepare(self)
        chunk, n = self.chunk(red)
        if self.plain:
            return red.finalize(reduce_blocks(red, chunk), n)
        return red.reduce_whole(chunk, n)

    def iterate(self, it: Iteration):
        """The iteration's fused kernel over embeddings when it has one (never over stored matrices: it computes its
        blocks from embeddings), else step by step."""
        out = NotImplemented if (self.plain or self.matrices) else it.fused(self)
        return it.run(self) if out is NotImplemented else out

    # ------------------------------------------------------------------ stored matrices: one read per fit
    def _stored(self, rows: str, cols: str) -> ScoreMatrix:
        """The given matrix behind ``rows x cols``, as stored (either way round; a product of embeddings: itself)."""
        if rows in self.inputs and cols in self.inputs:
            return self.matrix(rows, cols)
        return self.matrices.get((rows, cols)) or self.matrices.get((cols, rows)) or self.matrix(rows, cols)  # raises

    def resident(self, rows: str, cols: str, *, check: bool = True) -> Optional[torch.Tensor]:
        """The ``rows x cols`` matrix in memory (read once per fit; a view when read transposed), or None when the
        fast path does not keep it (``plain``, not viewable and larger than ``resident_bytes``, ``resident_bytes``
        0, or computed from embeddings). A view (:meth:`_view`) is checked finite first unless ``check=False`` (then the
        caller has its kernel check it, :meth:`finite_check`, or calls :meth:`_check`)."""
        if self.plain:
            return None
        key = (rows, cols) if (rows, cols) in self.matrices else (cols, rows)
        if key not in self._res:
            self._res[key] = self._load(self._stored(rows, cols))
        x = self._res[key]
        if x is None:
            return None
        if check:
            self._check(self._stored(rows, cols))
        return x if key == (rows, cols) else x.T

    def _load(self, m: ScoreMatrix) -> Optional[torch.Tensor]:
        """``m`` in memory: a view of its stored array when it can be one (:meth:`_view`), else read into memory in
        its stored dtype by strips of whole stored rows (contiguous on disk), checked finite and its largest
        ``|s|`` taken in the same pass; None when it is not kept."""
        if m.data is None or self.resident_bytes <= 0:
            return None
        view = self._view(m)
        if view is not None:
            return view
        item = m.data.dtype.itemsize if m.data.dtype.itemsize <= 4 else 8
        dt = m.dtype
        n_a, n_b = m.data_shape
        if n_a * n_b * torch.empty((), dtype=dt).element_size() > self.resident_bytes:
            return None
        # stored orientation, made C-ordered: a Fortran-order file is its transpose in C order
        flip = m.data.flags.f_contiguous and not m.data.flags.c_contiguous
        src = ScoreMatrix(m.data.T if flip else m.data, m.label, checked=True,
                          index=tuple(reversed(m.index)) if flip else m.index)
        if flip:
            n_a, n_b = n_b, n_a
        buf = torch.empty((n_a, n_b), dtype=dt)
        out = buf.numpy()
        big = 0.0
        visit = self.finite_check(m)
        for a0, a1 in iter_blocks(n_a, block_rows(n_b, max(4, item), self.block_bytes)):
            np.copyto(out[a0:a1], src._stored(a0, a1, 0, n_b), casting="same_kind")   # the one read of these rows
            lo, hi = visit(buf[a0:a1], a0)                        # one pass: finite (NaN / inf propagate) and |s|
            big = max(big, abs(lo), abs(hi))
        if m.bound is None:
            m.bound = big
        return buf.T if flip != m.transposed else buf

    def _view(self, m: ScoreMatrix) -> Optional[torch.Tensor]:
        """A zero-copy tensor view of ``m``'s stored array, oriented as stored under its key, when the array is
        native float32 / float64, C- or Fortran-ordered and not a subset (``index``): a memory map stays a memory
        map, so a matrix of any size is read by the kernels strip by strip along its contiguous axis from the page
        cache, never copied. It is checked finite either by the kernel that reads it first (a top-k,
        :meth:`finite_check`) or by one pass of :meth:`_check` that also takes its largest ``|s|`` (the first read
        of a cold file; the kernels' pass then finds it cached). None when the array cannot be viewed (the copy of
        :meth:`_load` or the streamed loop serve it)."""
        d = m.data
        if any(i is not None for i in m.index) or d.dtype not in (np.dtype(np.float32), np.dtype(np.float64)) \
                or not (d.flags.c_contiguous or d.flags.f_contiguous):
            return None
        t = self._quiet(d)
        self._views.add(id(m))
        return t.T if m.transposed else t

    def finite_check(self, m: ScoreMatrix):
        """``visit(strip, first_row)`` for whoever reads ``m`` by strips of its contiguous stored rows (a kernel on
        its view, :meth:`_check`, the copy of :meth:`_load`): counts the read and checks the strip finite, raising the
        ValueError that names the first non-finite cell of ``m`` as read; returns the strip's ``(min, max)``."""
        flip = m.data.flags.f_contiguous and not m.data.flags.c_contiguous   # Fortran order: strips are columns

        def visit(blk, a0):
            self.blocks_read += 1
            self.largest_block = max(self.largest_block, blk.numel())
            lo, hi = (float(v) for v in torch.aminmax(blk))
            if not (math.isfinite(lo) and math.isfinite(hi)) and not m.checked:
                if flip != m.transposed:
                    check_finite_block(blk.T, m.label, 0, a0)
                else:
                    check_finite_block(blk, m.label, a0, 0)
            return lo, hi
        return visit

    def _known_finite(self, m: ScoreMatrix) -> bool:
        """``m`` was checked finite: by whoever built it (a sims folder's scan) or in this fit."""
        return m.checked or id(m) in self._checked

    def _check(self, m: ScoreMatrix) -> None:
        """One pass over the view of ``m`` (strips along its contiguous axis) that checks it finite and takes its
        largest ``|s|``, unless both are known (a copy of :meth:`_load` checked itself while it was read). A view is
        checked once per fit: an array changed between two fits is checked again."""
        if id(m) not in self._views or (self._known_finite(m) and m.bound is not None):
            return
        t = self._quiet(m.data)
        base = t if m.data.flags.c_contiguous else t.T
        visit = self.finite_check(m)
        big = 0.0
        for a0, a1 in iter_blocks(base.shape[0], block_rows(base.shape[1], base.element_size(), self.block_bytes)):
            lo, hi = visit(base[a0:a1], a0)
            big = max(big, abs(lo), abs(hi))
        self._checked.add(id(m))
        m.bound = big

    @staticmethod
    def _quiet(d: np.ndarray) -> torch.Tensor:
        """``torch.from_numpy`` of a possibly read-only array (a memory map opened with mode "r": torch warns that
        it is not writable; nothing writes into these views)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(d)

    def release(self) -> None:
        """Drop the matrices kept in memory and what this fit checked (the end of a fit)."""
        self._res.clear()
        self._checked.clear()

    def _resident_block(self, parts, r0, r1, c0, c1, dtype, copy=True) -> torch.Tensor:
        pieces = []
        for a, b, x in parts:
            lo, hi = max(a, c0), min(b, c1)
            if lo < hi:
                pieces.append(x[r0:r1, lo - a:hi - a].to(dtype, copy=copy))
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=1)

    # ------------------------------------------------------------------ reading blocks
    def _read(self, m: ScoreMatrix, r0, r1, c0, c1, dtype) -> torch.Tensor:
        s = m.block(r0, r1, c0, c1, dtype)
        self.blocks_read += 1
        self.largest_block = max(self.largest_block, s.numel())
        return s

    def _tiles(self, n_r: int, n_c: int, whole_rows: bool, dtype: Optional[torch.dtype] = None,
               rows_contiguous: bool = True):
        item = max(4, torch.empty((), dtype=dtype or self.dtype).element_size())
        r_size, c_size = self._block_shape(n_r, n_c, item, whole_rows, rows_contiguous)
        return [(r, c) for r in iter_blocks(n_r, r_size) for c in iter_blocks(n_c, c_size)]

    def _block_shape(self, n_r: int, n_c: int, item: int, whole_rows: bool, rows_contiguous: bool):
        """Rows x columns of one block: strips of whole rows when rows are contiguous in storage (or a reduction
        needs whole rows), strips of whole columns when columns are (a C-order file read transposed), 2-D tiles
        when one line exceeds the budget."""
        budget = DEFAULT_BLOCK_BYTES if self.block_bytes is None else int(self.block_bytes)
        if whole_rows:
            return block_rows(n_c, item, self.block_bytes), n_c
        if rows_contiguous and n_c * item <= budget:
            return block_rows(n_c, item, self.block_bytes), n_c
        if not rows_contiguous and n_r * item <= budget:
            return n_r, block_rows(n_r, item, self.block_bytes)
        return block_shape(n_r, n_c, item, self.block_bytes)

    def _columns(self, source: Scores):
        """The matrices of ``source``'s column inputs, with their column offsets."""
        parts, start = [], 0
        for col in source.col_names:
            m = self.matrix(source.rows, col)
            parts.append((start, start + m.shape[1], m))
            start += m.shape[1]
        return parts, start

    def _rows_contiguous(self, source: Scores) -> bool:
        """Whether ``source``'s matrices are read fastest by strips of whole rows (else by strips of columns)."""
        parts, _ = self._columns(source)
        return not all(not m.rows_contiguous for _, _, m in parts)

    def read(self, source: Scores, r0: int, r1: int, c0: int, c1: int, dtype: torch.dtype) -> torch.Tensor:
        """Rows ``r0:r1`` and columns ``c0:c1`` of ``source`` (its column inputs concatenated)."""
        parts, _ = self._columns(source)
        pieces = []
        for a, b, m in parts:
            lo, hi = max(a, c0), min(b, c1)
            if lo < hi:
                pieces.append(self._read(m, r0, r1, lo - a, hi - a, dtype))
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=1)

    def _kernel_checks(self, red: Reduction) -> Optional[ScoreMatrix]:
        """The one stored matrix of ``red`` that its kernel reads whole and checks in its own pass (an unchecked
        view: :meth:`finite_check`), or None: the conditions under which :meth:`_reduce_stored` hands a kernel
        ``visit``."""
        src = red.source
        if self.plain or self._product(src) or len(src.col_names) != 1 or red.row_terms is not None \
                or red.col_terms is not None or red.whole_rows \
                or self.resident(src.rows, src.col_names[0], check=False) is None:
            return None
        m = self._stored(src.rows, src.col_names[0])
        return m if id(m) in self._views and not self._known_finite(m) else None

    def bound_in_kernel(self, red: Reduction) -> bool:
        """Whether the largest ``|s|`` of ``red``'s scores is not known yet and its kernel will take it in the one
        pass that checks the matrix (a reduction whose working dtype follows the bound, :class:`hubnorm.blocks
        .LogMeanExp`, then decides it after that pass instead of asking :meth:`score_bound`, a pass of its own)."""
        m = self._kernel_checks(red)
        return m is not None and m.bound is None and (red.source.rows, red.source.col_names[0]) not in self._bound

    def _reduce_stored(self, red: Reduction):
        """``reduce`` over stored matrices: the kernels on the matrices in memory, else the plain block loop."""
        src = red.source
        red.prepare(self)
        parts, n_c = self._columns(src)
        n_r = parts[0][2].shape[0]
        n = n_r if red.axis == 0 else n_c
        if not self.plain:
            res = [self.resident(src.rows, col, check=False) for col in src.col_names]
            if all(x is not None for x in res):
                stored = [self._stored(src.rows, col) for col in src.col_names]
                if len(res) == 1 and red.row_terms is None and red.col_terms is None and not red.whole_rows:
                    # an unchecked view is checked by the kernel's own pass where it can (top-k, log-sum-exp),
                    # else first
                    unchecked = self._kernel_checks(red)
                    visit = None if unchecked is None else self.finite_check(unchecked)
                    out = red.reduce_scores(res[0], n, self.block_bytes, visit=visit)
                    if out is NotImplemented and visit is not None:
                        self._check(stored[0])
                        out = red.reduce_scores(res[0], n, self.block_bytes)
                    if out is not NotImplemented:
                        if visit is not None:
                            self._checked.add(id(stored[0]))
                        return self._engine_dtype(out)
                for m in stored:
                    self._check(m)
                in_mem = [(a, b, x) for (a, b, _), x in zip(parts, res)]
                rows_contig = all(x.is_contiguous() for x in res)
                copy = not getattr(red, "read_only", False)   # a partial that modifies its block gets a copy
                return self._loop(red, lambda r0, r1, c0, c1, dt: self._resident_block(in_mem, r0, r1, c0, c1, dt,
                                                                                       copy), n_r, n_c, n, rows_contig)
        return self._loop(red, lambda r0, r1, c0, c1, dt: self.read(src, r0, r1, c0, c1, dt), n_r, n_c, n,
                          self._rows_contiguous(src))

    def _engine_dtype(self, out):
        """Top-k values found in a float32 matrix, in the engine's dtype (the same numbers)."""
        if isinstance(out, TopKResult) and out.values.dtype != self.dtype:
            return TopKResult(out.values.to(self.dtype), out.indices)
        return out

    def _loop(self, red: Reduction, read, n_r: int, n_c: int, n: int, rows_contiguous: bool):
        """The plain block loop: ``partial`` per block, ``merge`` along the reduced axis, ``finalize``."""
        dt = red.dtype or self.dtype
        rt = None if red.row_terms is None else torch.as_tensor(red.row_terms)
        ct = None if red.col_terms is None else torch.as_tensor(red.col_terms)
        item = max(4, torch.empty((), dtype=dt).element_size())
        r_size, c_size = self._block_shape(n_r, n_c, item, red.whole_rows, rows_contiguous)

        def block(r0, r1, c0, c1):
            s = read(r0, r1, c0, c1, dt)
            return s, Chunk(s, None, r0, c0, None if rt is None else rt[r0:r1], None if ct is None else ct[c0:c1],
                            self.block_bytes)
        out = block_loop(red, list(iter_blocks(n_r, r_size)), list(iter_blocks(n_c, c_size)), block)
        return self._engine_dtype(red.finalize(out, n))


__all__ = ["LocalEngine", "INPUT_NAMES", "DEFAULT_RESIDENT_BYTES"]
