"""The in-process engine: runs any method's reductions (:mod:`hubnorm.blocks`) on in-memory tensors, on the CPU or
a torch device. It never knows a method's name.

:class:`LocalEngine` holds the validated inputs of one fit (``targets``, ``query_bank``, ``target_bank``: torch
tensors of one dtype on one device) and answers what a method's ``fit_blocks(engine)`` asks:

* ``reduce(reduction)`` -- ``prepare``, then one call of the reduction's ``reduce_whole`` on the whole inputs (its
  fast kernel from :mod:`hubnorm.kernels`, or the plain block loop :func:`hubnorm.blocks.reduce_blocks`);
* ``iterate(iteration)`` -- the iteration's fused in-memory kernel when it has one, else step by step;
* ``size``, ``has``, ``tensor``, ``max_norm``, ``score_bound``, ``take_rows`` -- what the inputs are;
* ``shared(key, nbytes)`` -- a dict that keeps score blocks across the fits of one sweep (None outside sweeps).

The seam where score blocks and top-k come from is the kernels called by the reductions' ``reduce_chunk``
(:func:`hubnorm.kernels.topk_similarity`, :func:`hubnorm.kernels.logsumexp_similarity`, the fused Sinkhorn of
``hubnorm.normalizers.sinkhorn``). The engine picks the top-k kernel once, by the inputs' dtype and device
(``backend``, :func:`hubnorm.kernels.topk_backend`: faiss's flat search for float32 on the CPU, the torch kernel
for float64 and torch devices), and hands it to every chunk; ``plain=True`` runs none of them. Every fast path is
tested equal to the plain engine (values; indices up to ties: ``tests/method_checks.py``,
``tests/test_fast_paths.py``). Approximate sources are engines of their own (``hubnorm.index.IndexEngine``).
"""

from __future__ import annotations

from typing import Dict, Hashable, Optional, Tuple

import torch

from .blocks import Chunk, Embeddings, Iteration, Reduction, Scores, reduce_blocks
from .kernels import TOPK_BACKENDS, topk_backend

#: Inputs an engine may hold, in the order their sizes are reported.
INPUT_NAMES = ("targets", "query_bank", "target_bank", "queries")


class LocalEngine:
    """In-process engine over in-memory tensors (one dtype, one device).

    Parameters:
        inputs: ``{name: tensor}``; ``None`` values are absent inputs.
        block_bytes: memory budget of one score block (None: :data:`hubnorm.kernels.DEFAULT_BLOCK_BYTES`).
        sweep_bytes: when set, :meth:`shared` hands out dicts that keep score blocks across the fits of a sweep,
            for score matrices of at most this many bytes (None: a fit of its own, nothing is shared).
        plain: run every reduction by its plain block loop (:func:`hubnorm.blocks.reduce_blocks`: ``partial``,
            ``merge``, ``finalize``) and every iteration step by step, never a fast kernel: the reference the
            kernels are tested against (``tests/method_checks.py``).
        backend: the top-k kernel (:data:`hubnorm.kernels.TOPK_BACKENDS`); None: :func:`hubnorm.kernels.topk_backend`
            of the inputs' dtype and device (the attribute ``backend`` holds the choice).
        host: ``{name: rows}``, the caller's rows in host memory of an input the engine holds on a device (the same
            values): what :meth:`host_rows` reads instead of copying the device tensor back (a fit's provenance
            fingerprint of a GPU bank).
    """

    def __init__(self, inputs: Dict[str, Optional[torch.Tensor]], *, block_bytes: Optional[int] = None,
                 sweep_bytes: Optional[int] = None, plain: bool = False, backend: Optional[str] = None,
                 host: Optional[Dict[str, object]] = None):
        self.inputs = {k: v for k, v in inputs.items() if v is not None}
        self.host = {k: v for k, v in (host or {}).items() if k in self.inputs and v is not None}
        first = self.inputs.get("targets", next(iter(self.inputs.values()), None))
        self.dtype = first.dtype if first is not None else torch.float32
        self.device = first.device if first is not None else torch.device("cpu")
        self.block_bytes = block_bytes
        self.sweep_bytes = sweep_bytes
        self.plain = bool(plain)
        if backend is not None and backend not in TOPK_BACKENDS:
            raise ValueError(f"backend must be one of {list(TOPK_BACKENDS)} or None; got {backend!r}")
        self.backend = topk_backend(self.dtype, self.device) if backend is None else backend
        self._shared: Dict[Hashable, dict] = {}
        self._concat: Dict[Tuple[str, ...], torch.Tensor] = {}

    # ------------------------------------------------------------------ what the inputs are
    def has(self, name: str) -> bool:
        return name in self.inputs

    def size(self, name: str) -> Optional[int]:
        x = self.inputs.get(name)
        return None if x is None else int(x.shape[0])

    def tensor(self, names) -> torch.Tensor:
        """The input ``names`` (a name, or a tuple of names concatenated along the rows)."""
        if isinstance(names, str):
            names = (names,)
        names = tuple(names)
        missing = [n for n in names if n not in self.inputs]
        if missing:
            raise ValueError(f"this fit has no {missing[0]} (needed as {' ; '.join(names)})")
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

    def score_bound(self, source: Scores) -> float:
        """An upper bound of ``|s|`` over the score matrix ``source`` (the input of the working-dtype rules): the
        product of the largest row norms. An engine over given score matrices would answer with their largest
        magnitude."""
        return self.max_norm(source.rows) * max(self.max_norm(c) for c in source.col_names)

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

    # ------------------------------------------------------------------ running reductions
    def chunk(self, red: Reduction) -> Tuple[Chunk, int]:
        """The whole inputs of ``red`` as one in-memory :class:`~hubnorm.blocks.Chunk`, and the length of its
        reduced axis."""
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
        red.prepare(self)
        chunk, n = self.chunk(red)
        if self.plain:
            return red.finalize(reduce_blocks(red, chunk), n)
        return red.reduce_whole(chunk, n)

    def iterate(self, it: Iteration):
        out = NotImplemented if self.plain else it.fused(self)
        if out is not NotImplemented:
            return out
        state = it.start(self)
        done = False
        while not done:
            state, done = it.step(self, state)
        return it.result(self, state)
