"""Vector-index (faiss IVF) fast paths: NNN bias search over large banks, and retrieval with any offset method.

NNN paper, Sec. 3.1 and Table A5: NNN needs only each target's k nearest bank queries, so an inverted-file index
over the query bank replaces the exhaustive bank x target search; retrieval with any per-target offset ``h``
is a plain inner-product search with the augmented embeddings ``<[q, 1], [t, h]> = q . t + h``.

* :class:`BankIndex` -- an IVF-Flat inner-product index over a bank, with the documented size rules below and
  :meth:`BankIndex.tune_nprobe` (smallest power-of-two ``nprobe`` reaching a recall target on a sample). Two scans
  of the probed lists: ``scan="blas"`` (default on CPU) -- probe-grouped GEMM: the bank is stored reordered by
  list, and each list is scanned by one GEMM of [the targets that probe it] x [its rows] with a running-threshold
  top-k (:meth:`BankIndex._blas_search`); ``scan="faiss"`` (default with GPU faiss) -- faiss's IVF-Flat search,
  whose CPU scan does not use BLAS. Same quantizer, same probed lists, same results. A third,
  ``scan="blas-bf16"``: the same probe-grouped scan over a bfloat16 copy of the bank as a candidate stage, keeping
  each query's ``refine * k`` best rows, then an exact float32 re-rank of that pool (faiss's IndexRefine pattern;
  :meth:`BankIndex._refined_search`): the values are exact inner products, and the result is the exact top-k of the
  probed lists wherever the pool holds it.
* :class:`IndexEngine` -- the in-process engine of :mod:`hubnorm.engine` whose top-``k`` reductions over a bank
  are searched in a :class:`BankIndex`: one more engine over the block protocol (:mod:`hubnorm.blocks`), so a
  method's own file is all it runs. :class:`FaissNNN` is :class:`~hubnorm.normalizers.nnn.NearestNeighborNormalization`
  fitted on it (same bias formula, :func:`hubnorm.normalizers.nnn.nnn_bias`). With ``nprobe = nlist`` the search
  is exhaustive and the offsets equal the exact ones (float rounding aside).
* :class:`ProjectedBankIndex` -- the approximate candidate stage of large banks (issue 25): a faiss IVF index
  (product-quantised fast-scan codes by default) over the bank projected to a few dimensions by
  :func:`query_aware_projection`, a pool of candidates per target, and an exact float32 re-rank of the pool.
  The projection is fitted on the targets themselves (the queries of the bank search): with a modality gap the
  image targets and the caption bank vary along different directions, and the bank's own principal directions
  keep the bank's variance, not the variation of the targets' scores. ``FaissNNN(projection_dim=...)`` uses it.
* :class:`IndexedRetriever` -- serves any fitted offset normalizer (NNN, IS, SN, DBSN, ...) from an IVF index on
  the augmented targets; ``search`` returns the top-k normalised scores and indices, ``evaluate`` R@K.

Rules (the defaults; every one can be overridden):

* ``nlist = default_nlist(N) = clip(2 ** round(log2(sqrt(N))), 1, N // 39)``: about ``sqrt(N)`` lists. The usual
  faiss advice of 4-16 sqrt(N) lists optimises the search of *many* queries; here the searches are few (one per
  target) and adding the bank costs ``N x nlist`` dot products, so ``sqrt(N)`` lists keep the one-off build at
  a fraction of one exhaustive pass while a search still scans only ``nprobe / nlist`` of the bank.
* k-means training on ``min(N, 32 * nlist)`` bank rows sampled with ``seed``, 10 iterations (faiss warns below
  39 points per centroid; 32 is enough for an IVF partition and halves the training time).
* the coarse quantizer is an HNSW graph over the centroids when ``nlist >= 1024`` (cheap assignment of a large
  bank), exact otherwise.
* ``nprobe = tune_nprobe(...)``: the smallest power of two whose recall of the exact top-k on ``sample_size``
  (default 64) held search vectors is at least ``recall_target`` (default 0.95); the exact top-k of the sample is
  one brute-force pass over the bank for 64 rows. NNN averages the top-k values, so missing a few of the k
  neighbours (replaced by the next best) changes the bias very little.
* the BLAS scan processes the targets in chunks (warm-up candidate buffer <= 256 MB) and stores one float32
  copy of the bank (reordered by list); the faiss index then holds the quantizer only, until a faiss scan is asked.
* GPU faiss is used when present (``faiss.get_num_gpus() > 0``: ``index_cpu_to_gpu``), CPU otherwise;
  ``use_gpu=False`` forces the CPU.
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
import torch

from .blocks import TopK, TopKResult
from .engine import LocalEngine
from .kernels import pack_rows
from ._validation import as_embeddings, check_finite_float, check_finite_rows, check_positive_int, check_seed
from .normalizers.nnn import NearestNeighborNormalization

__all__ = ["BankIndex", "IndexEngine", "FaissNNN", "IndexedRetriever", "ProjectedBankIndex", "default_nlist",
           "faiss_uses_gpu", "query_aware_projection"]


def _faiss():
    try:
        import faiss  # noqa: F401
    except ImportError as exc:  # pragma: no cover - faiss is a dependency of the fast paths only
        raise ImportError("hubnorm.index needs faiss: pip install faiss-cpu (or faiss-gpu)") from exc
    return faiss


def faiss_uses_gpu(use_gpu: Optional[bool] = None) -> bool:
    """Whether the indexes will run on a GPU: ``use_gpu`` if given, else ``faiss.get_num_gpus() > 0``."""
    faiss = _faiss()
    has = hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0
    if use_gpu and not has:
        raise RuntimeError("use_gpu=True but faiss sees no GPU (faiss-cpu build, or no CUDA device)")
    return has if use_gpu is None else bool(use_gpu)


#: How :class:`BankIndex` scans the probed lists (see its docstring).
SCANS = ("blas", "blas-bf16", "faiss")


def _check_refine(refine) -> float:
    refine = check_finite_float(refine, "refine")
    if refine < 1:
        raise ValueError(f"refine (the re-ranked candidate pool, in multiples of k) must be >= 1; got {refine}")
    return float(refine)


def default_nlist(n: int) -> int:
    """About ``sqrt(n)`` inverted lists (a power of two), at least 1 and at most ``n // 39`` (module docstring)."""
    n = int(n)
    if n < 78:
        return 1
    nl = 2 ** int(round(math.log2(math.sqrt(n))))
    return int(max(1, min(nl, n // 39)))


def _as_f32(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.ascontiguousarray(x, dtype=np.float32)


def _check_matrix(x, name: str, dim: Optional[int] = None):
    """A 2-D floating numpy array or tensor with finite rows (checked in row blocks; never copied whole)."""
    if not isinstance(x, (np.ndarray, torch.Tensor)):
        raise TypeError(f"{name} must be a numpy array or a torch tensor of shape (n, d); got {type(x).__name__}")
    floating = torch.is_floating_point(x) if isinstance(x, torch.Tensor) else np.issubdtype(x.dtype, np.floating)
    if not floating:
        raise TypeError(f"{name} must hold floating-point values; got dtype {x.dtype}")
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"{name} must be 2-D (n, d) with at least one row; got shape {tuple(x.shape)}")
    if dim is not None and x.shape[1] != dim:
        raise ValueError(f"{name} has dimension {x.shape[1]} but the index holds vectors of dimension {dim}")
    check_finite_rows(x, name)
    return x


class BankIndex:
    """An IVF inner-product index over ``vectors`` (n x d), built once and searched many times.

    Parameters:
        vectors: the rows to index (the query bank for NNN; augmented targets for retrieval).
        nlist: inverted lists (default :func:`default_nlist`). ``nlist=1`` (or a bank of fewer than 78 rows)
            gives one list: an exhaustive search.
        train_size: k-means training rows (default ``min(n, 32 * nlist)``), sampled with ``seed``.
        use_gpu: None = GPU when faiss sees one; False = CPU.
        scan: how the probed lists are scanned. ``"blas"`` (the default on CPU): probe-grouped GEMM
            (:meth:`_blas_search`): the bank is stored reordered by list (each list one contiguous block), every
            list is scanned by one GEMM of [the targets that probe it] x [its rows], at the BLAS rate.
            ``"faiss"`` (the default with GPU faiss): faiss's own IVF-Flat search (its CPU scan does not use
            BLAS). Both assign the rows with the same quantizer. The BLAS scan probes the exact top-``nprobe``
            centroids (:meth:`probes`); faiss probes the quantizer's top lists: the same for ``nlist < 1024``
            (flat quantizer), approximate (HNSW) above, so that only the BLAS scan is exact at ``nprobe =
            nlist`` there. The other scan's storage is built lazily on first use.
            ``"blas-bf16"``: the BLAS scan in bfloat16 as a candidate stage + an exact float32 re-rank of each
            query's ``ceil(refine * k)`` best candidates (:meth:`_refined_search`; one more bfloat16 copy of the
            bank, half the size of the float32 one).
        refine: the re-ranked candidate pool of ``scan="blas-bf16"`` in multiples of ``k`` (>= 1; default 2).

    Attributes: ``index`` (the faiss index: coarse quantizer + lists; its rows are added only when the faiss scan
    is used), ``nlist``, ``nprobe``, ``scan``, ``refine``, ``build_seconds``, ``on_gpu``, ``list_sizes``.
    """

    def __init__(self, vectors, *, nlist: Optional[int] = None, train_size: Optional[int] = None, seed: int = 0,
                 niter: int = 10, use_gpu: Optional[bool] = None, add_chunk: int = 262144,
                 scan: Optional[str] = None, refine: float = 2.0):
        faiss = _faiss()
        t0 = time.perf_counter()
        x = _check_matrix(vectors, "vectors")
        seed = check_seed(seed)
        niter = check_positive_int(niter, "niter")
        add_chunk = check_positive_int(add_chunk, "add_chunk")
        if train_size is not None:
            train_size = check_positive_int(train_size, "train_size")
        n, d = x.shape
        self.n, self.d = int(n), int(d)
        self.nlist = default_nlist(n) if nlist is None else check_positive_int(nlist, "nlist", maximum=max(1, n),
                                                                              max_name="the number of rows")
        self._quantizer = None
        if self.nlist == 1:
            cpu = faiss.IndexFlatIP(d)
        else:
            quantizer = faiss.IndexHNSWFlat(d, 32, faiss.METRIC_INNER_PRODUCT) if self.nlist >= 1024 \
                else faiss.IndexFlatIP(d)
            cpu = faiss.IndexIVFFlat(quantizer, d, self.nlist, faiss.METRIC_INNER_PRODUCT)
            cpu.cp.niter = int(niter)
            cpu.cp.seed = int(seed)
            cpu.cp.max_points_per_centroid = 1 << 30  # we subsample ourselves
            cpu.cp.min_points_per_centroid = 1
            m = min(n, 32 * self.nlist if train_size is None else int(train_size))
            rng = np.random.default_rng(seed)
            sample = np.sort(rng.choice(n, size=m, replace=False)) if m < n else np.arange(n)
            cpu.train(_as_f32(x[sample]))
            self._quantizer = quantizer  # keep the quantizer alive with the index
        self.on_gpu = faiss_uses_gpu(use_gpu)
        if scan is None:
            scan = "faiss" if self.on_gpu else "blas"
        if scan not in SCANS:
            raise ValueError(f"scan must be one of {list(SCANS)}; got {scan!r}")
        self.scan = scan
        self.refine = _check_refine(refine)
        self._rows_bf16 = None  # the bfloat16 copy of the reordered rows (scan="blas-bf16"), made on first use
        self._cpu = cpu
        self._added = False
        self._rows = None  # blas storage: rows reordered by list (torch, n x d), list offsets, permutation
        if self.on_gpu:  # pragma: no cover - needs a GPU build of faiss
            self._res = faiss.StandardGpuResources()
            self.index = faiss.index_cpu_to_gpu(self._res, 0, cpu)
        else:
            self.index = cpu
        if scan == "faiss":
            for s in range(0, n, add_chunk):  # chunked: the bank may be a memory map or a large tensor
                self.index.add(_as_f32(x[s:s + add_chunk]))
            self._added = True
        else:
            self._build_blas(x, add_chunk)
        if scan == "blas-bf16":
            self._bf16_rows()
        self.nprobe = self.nlist
        self._set_nprobe(self.nlist)
        self.build_seconds = time.perf_counter() - t0

    # ----------------------------------------------------------------------------------- storage of each scan
    def _build_blas(self, x, add_chunk: int) -> None:
        """Assign every row to its list with the coarse quantizer (as faiss's ``add`` does) and store the bank
        reordered by list (stable within a list), so that list ``l`` is rows ``ptr[l]:ptr[l+1]``."""
        n = self.n
        if self.nlist == 1:
            assign = np.zeros(n, np.int64)
            cent = np.zeros((1, self.d), np.float32)
        else:
            assign = np.empty(n, np.int64)
            for s in range(0, n, add_chunk):
                _, a = self._quantizer.search(_as_f32(x[s:s + add_chunk]), 1)
                assign[s:s + add_chunk] = a[:, 0]
            cent = self._quantizer.reconstruct_n(0, self.nlist)
        perm = np.argsort(assign, kind="stable")
        counts = np.bincount(assign, minlength=self.nlist)
        rows = torch.empty((n, self.d), dtype=torch.float32)
        for s in range(0, n, add_chunk):
            p = perm[s:s + add_chunk]
            rows[s:s + len(p)] = torch.from_numpy(_as_f32(x[torch.from_numpy(p)] if isinstance(x, torch.Tensor)
                                                          else x[p]))
        self._set_blas(rows, perm, counts, cent)

    def _set_blas(self, rows, perm, counts, cent) -> None:
        self._rows = rows
        self._perm = torch.from_numpy(np.ascontiguousarray(perm, dtype=np.int64))
        self.list_sizes = np.asarray(counts, dtype=np.int64)
        self._ptr = np.concatenate([[0], np.cumsum(self.list_sizes)]).astype(np.int64)
        self._centroids = torch.from_numpy(np.ascontiguousarray(cent, dtype=np.float32))

    def _ensure_blas(self) -> None:
        """Blas storage from a faiss-scan index (the rows are read back from the inverted lists)."""
        if self._rows is not None:
            return
        faiss = _faiss()
        cpu = faiss.index_gpu_to_cpu(self.index) if self.on_gpu else self.index  # pragma: no branch
        if self.nlist == 1:
            rows = torch.from_numpy(cpu.reconstruct_n(0, self.n))
            self._set_blas(rows, np.arange(self.n), np.array([self.n]), np.zeros((1, self.d), np.float32))
            return
        from faiss.contrib.inspect_tools import get_invlist
        ivf = faiss.extract_index_ivf(cpu)
        rows = torch.empty((self.n, self.d), dtype=torch.float32)
        perm = np.empty(self.n, np.int64)
        counts = np.zeros(self.nlist, np.int64)
        s = 0
        for l in range(self.nlist):
            ids, codes = get_invlist(ivf.invlists, l)
            order = np.argsort(ids, kind="stable")
            c = len(ids)
            rows[s:s + c] = torch.from_numpy(codes.view(np.float32).reshape(c, self.d)[order])
            perm[s:s + c] = ids[order]
            counts[l] = c
            s += c
        self._set_blas(rows, perm, counts, self._quantizer.reconstruct_n(0, self.nlist))

    def _ensure_faiss(self) -> None:
        """Faiss-scan storage from a blas-scan index (rows added with their ids; same quantizer, same lists)."""
        if self._added:
            return
        chunk = 262144
        for s in range(0, self.n, chunk):
            xs = self._rows[s:s + chunk].numpy()
            if self.nlist == 1:  # flat index: the permutation is the identity
                self.index.add(xs)
            else:
                self.index.add_with_ids(xs, self._perm[s:s + chunk].numpy())
        self._added = True

    def _set_nprobe(self, nprobe: int) -> None:
        self.nprobe = int(min(max(1, nprobe), self.nlist))
        if self.nlist > 1:
            if self.on_gpu:  # pragma: no cover
                _faiss().GpuParameterSpace().set_index_parameter(self.index, "nprobe", self.nprobe)
            else:
                self.index.nprobe = self.nprobe

    # ----------------------------------------------------------------------------------- search
    def probes(self, queries, nprobe: Optional[int] = None, chunk: int = 8192) -> np.ndarray:
        """The lists probed by the BLAS scan for each query, (m, nprobe), best first: the exact top-``nprobe``
        centroids by inner product (one small GEMM per chunk of queries). For ``nlist < 1024`` (flat quantizer)
        these are the lists faiss's scan probes; above, faiss probes the HNSW quantizer's approximate top lists
        (the HNSW graph serves only the one-off assignment of the bank rows here)."""
        p = self.nprobe if nprobe is None else int(min(max(1, nprobe), self.nlist))
        m = queries.shape[0]
        if self.nlist == 1:
            return np.zeros((m, 1), np.int64)
        self._ensure_blas()
        q = queries.detach().cpu().float() if isinstance(queries, torch.Tensor) else torch.from_numpy(
            _as_f32(queries))
        out = np.empty((m, p), np.int64)
        for s in range(0, m, chunk):
            out[s:s + chunk] = torch.mm(q[s:s + chunk], self._centroids.T).topk(p, dim=1).indices.numpy()
        return out

    def search(self, queries, k: int, nprobe: Optional[int] = None, chunk: int = 16384,
               scan: Optional[str] = None, return_indices: bool = True,
               refine: Optional[float] = None) -> Tuple[np.ndarray, np.ndarray]:
        """Top-``k`` inner products and row indices of every query (``nprobe`` lists scanned; default the current;
        ``scan``: one of :data:`SCANS`, default :attr:`scan`; ``refine``: the candidate pool of ``"blas-bf16"``
        in multiples of ``k``, default :attr:`refine`). Where the probed lists hold fewer than ``k`` rows, the
        missing entries are ``-inf`` (blas) or ``-FLT_MAX`` (faiss) with index -1.
        ``return_indices=False`` (blas only) skips the indices (returns None): the NNN bias needs the values."""
        k = check_positive_int(k, "k", maximum=self.n, max_name="the number of indexed rows")
        queries = _check_matrix(queries, "queries", self.d)
        if nprobe is not None:
            self._set_nprobe(check_positive_int(nprobe, "nprobe"))
        scan = self.scan if scan is None else scan
        if scan == "blas":
            self._ensure_blas()
            return self._blas_search(queries, k, self.nprobe, return_indices=return_indices)
        if scan == "blas-bf16":
            self._ensure_blas()
            refine = self.refine if refine is None else _check_refine(refine)
            return self._refined_search(queries, k, self.nprobe, refine, return_indices=return_indices)
        if scan != "faiss":
            raise ValueError(f"scan must be one of {list(SCANS)}; got {scan!r}")
        self._ensure_faiss()
        q = queries
        out_d = np.empty((q.shape[0], k), np.float32)
        out_i = np.empty((q.shape[0], k), np.int64)
        for s in range(0, q.shape[0], chunk):
            out_d[s:s + chunk], out_i[s:s + chunk] = self.index.search(_as_f32(q[s:s + chunk]), k)
        return out_d, out_i

    def _bf16_rows(self) -> torch.Tensor:
        """The bfloat16 copy of the reordered rows, the candidate stage of ``scan="blas-bf16"`` (made once)."""
        if self._rows_bf16 is None:
            self._ensure_blas()
            padded = torch.zeros((self.n + 64, self.d), dtype=torch.bfloat16)  # 64 zero rows: see _blas_search
            padded[:self.n] = self._rows
            self._rows_bf16 = padded
        return self._rows_bf16

    def _refined_search(self, queries, k: int, nprobe: int, refine: float, *, return_indices: bool = True,
                        block_bytes: int = 64 * 2**20):
        """``scan="blas-bf16"``: a bfloat16 candidate stage and an exact float32 re-rank (faiss's IndexRefine
        pattern, with the BLAS scan as the coarse stage).

        1. candidates: the probe-grouped GEMM scan (:meth:`_blas_search`) of the probed lists in bfloat16 (a
           bfloat16 copy of the reordered bank, queries rounded to bfloat16; products accumulated in float32,
           the scores rounded to bfloat16) keeps each query's ``pool = ceil(refine * k)`` best rows;
        2. re-rank: the float32 inner products of each query with its ``pool`` candidate rows (gathered from the
           float32 reordered bank, one batched matrix-vector product per chunk of queries), and their top-``k``.

        The values returned are exact float32 inner products of the rows returned. The result equals the exact
        top-``k`` over the probed lists whenever the pool holds that top-``k`` (always when ``pool`` is at least
        the number of rows probed); otherwise a row whose bfloat16 score fell outside the pool is replaced by the
        next best candidate.
        """
        qt = queries.detach().cpu().float() if isinstance(queries, torch.Tensor) else torch.from_numpy(
            _as_f32(queries))
        qt = qt.contiguous()
        m, d = qt.shape
        pool = int(min(self.n, max(k, math.ceil(refine * k))))
        _, cand = self._blas_search(qt, pool, nprobe, rows=self._bf16_rows(), bank_ids=False)
        cand = torch.from_numpy(cand)
        out_v = torch.empty((m, k), dtype=torch.float32)
        out_i = torch.empty((m, k), dtype=torch.long)
        c = int(max(1, min(m, block_bytes // max(1, pool * d * 4))))
        for s in range(0, m, c):
            j = cand[s:s + c]
            rows = self._rows.index_select(0, j.clamp_min(0).reshape(-1)).view(j.shape[0], pool, d)
            sc = torch.bmm(rows, qt[s:s + c, :, None])[:, :, 0].masked_fill_(j < 0, -torch.inf)
            v, p = sc.topk(k, dim=1)
            out_v[s:s + c] = v
            if return_indices:
                jj = j.gather(1, p)
                out_i[s:s + c] = torch.where(jj >= 0, self._perm[jj.clamp_min(0)], -1)
        return out_v.numpy(), (out_i.numpy() if return_indices else None)

    def _blas_search(self, queries, k: int, nprobe: int, *, return_indices: bool = True,
                     block_bytes: int = 256 * 2**20, rows: Optional[torch.Tensor] = None, bank_ids: bool = True):
        """Probe-grouped GEMM IVF search (exact over the probed lists).

        1. probes: the quantizer's top-``nprobe`` lists of every query (the same lists faiss probes);
        2. inverted: for each list, the queries that probe it (one stable argsort of the probe table);
        3. warm-up: each query's first ``r`` probed lists (``r`` lists hold about ``4 k`` rows on average): for
           each list, one GEMM ``[queries probing it first] x [its rows]`` (contiguous in the reordered bank) and a
           top-``k``; the ``k``-th best value over them is the query's threshold ``thr`` (a lower bound of its
           final ``k``-th value: a subset's ``k``-th best never exceeds the whole set's);
        4. bulk, in bands of probe ranks ``[r, 2r), [2r, 4r), ...``: for each list, one GEMM of the queries that
           probe it at a rank in the band; only values ``>= thr`` are kept (one compare pass), merged into the
           running top-``k`` after the band, and ``thr`` tightens to its ``k``-th value. Every discarded value is
           below a running ``k``-th value, so the result is exact over the probed lists;
        5. the running top-``k``, sorted.

        Exact (equal to a full top-``k``) when ``nprobe = nlist``. Queries are processed in chunks of at most
        ``block_bytes`` of warm-up candidates.
        """
        qt = queries.detach().cpu().float() if isinstance(queries, torch.Tensor) else torch.from_numpy(
            _as_f32(queries))
        qt = qt.contiguous()
        m = qt.shape[0]
        P = int(min(max(1, nprobe), self.nlist))
        avg = max(1.0, self.n / self.nlist)
        r = int(min(P, max(1, math.ceil(4 * k / avg))))  # warm-up probe ranks
        kk = int(min(k, self.list_sizes.max()))  # candidates kept per (query, warm-up list)
        out_v = torch.empty((m, k), dtype=torch.float32)
        out_i = torch.empty((m, k), dtype=torch.long)
        if m == 0:
            return out_v.numpy(), (out_i.numpy() if return_indices else None)
        probes = torch.from_numpy(np.ascontiguousarray(self.probes(qt.numpy(), P), dtype=np.int64))
        cm = int(max(1, min(m, block_bytes // max(1, r * kk * 12), 8192)))
        rows = self._rows if rows is None else rows  # the stored rows (float32), or a bfloat16 copy of them
        low = rows.dtype != torch.float32
        qt = qt.to(rows.dtype)
        ptr, sizes, nl = self._ptr, self.list_sizes, self.nlist

        def scores(qc, t, l):
            """float32 scores of the queries ``qc[t]`` with list ``l``. In bfloat16 the GEMM's shape is rounded up
            (queries to a multiple of 32 by repeating one, rows to a multiple of 64 by reading on into the next list
            or the zero rows padding the bfloat16 copy) and the result cut back: oneDNN builds one kernel per shape,
            which for lists of varying sizes costs more than the product itself."""
            a, size = int(ptr[l]), int(sizes[l])
            if not low:
                return torch.mm(qc[t], rows[a:a + size].T)
            nt = t.numel()
            tp, sp = -(-nt // 32) * 32, -(-size // 64) * 64
            tt = t if tp == nt else torch.cat([t, t[:1].expand(tp - nt)])
            return torch.mm(qc[tt], rows[a:a + sp].T)[:nt, :size].float()
        for c0 in range(0, m, cm):
            c1 = min(m, c0 + cm)
            n_c = c1 - c0
            pr = probes[c0:c1]
            qc = qt[c0:c1]
            # bands of probe ranks: [0, r), [r, 2r), [2r, 4r), ...; key = band * (nlist + 1) + list
            ranks = torch.arange(P)
            band = torch.where(ranks < r, 0, torch.floor(torch.log2(ranks.clamp_min(r).double() / r)).long() + 1)
            nb = int(band.max()) + 1
            lst = torch.where(pr >= 0, pr, nl)
            key = (band[None, :] * (nl + 1) + lst).reshape(-1)
            order = torch.argsort(key, stable=True)
            t_of, slot_of = order // P, order % P
            cnt = torch.bincount(key, minlength=nb * (nl + 1)).numpy()
            starts = np.concatenate([[0], np.cumsum(cnt)])
            # warm-up band: a top-k of each (query, list)
            vals = torch.full((n_c, r, kk), -torch.inf, dtype=torch.float32)
            idx = torch.full((n_c, r, kk), -1, dtype=torch.long)
            for l in np.flatnonzero(cnt[:nl]):
                size = int(sizes[l])
                if size == 0:
                    continue
                s, e = int(starts[l]), int(starts[l + 1])
                t, sl = t_of[s:e], slot_of[s:e]
                sc = scores(qc, t, l)
                if size > kk:
                    v, i = sc.topk(kk, dim=1, sorted=False)
                    vals[t, sl] = v
                    idx[t, sl] = i + int(ptr[l])
                else:
                    vals[t, sl, :size] = sc
                    idx[t, sl, :size] = torch.arange(int(ptr[l]), int(ptr[l]) + size)
            run_v, p = vals.view(n_c, r * kk).topk(min(k, r * kk), dim=1, sorted=False)
            run_i = idx.view(n_c, r * kk).gather(1, p)
            del vals, idx
            # later bands: keep the values that reach the running threshold, then tighten it
            for bi in range(1, nb):
                thr = run_v.amin(dim=1) if run_v.shape[1] >= k else torch.full((n_c,), -torch.inf)
                cand_r, cand_c, cand_v = [], [], []
                base = bi * (nl + 1)
                for l in np.flatnonzero(cnt[base:base + nl]):
                    size = int(sizes[l])
                    if size == 0:
                        continue
                    s, e = int(starts[base + l]), int(starts[base + l + 1])
                    t = t_of[s:e]
                    sc = scores(qc, t, l)
                    rr, cc = (sc >= thr[t][:, None]).nonzero(as_tuple=True)
                    if rr.numel():
                        cand_r.append(t[rr])
                        cand_c.append(cc + int(ptr[l]))
                        cand_v.append(sc[rr, cc])
                if cand_r:
                    cv, ci = pack_rows(torch.cat(cand_r), torch.cat(cand_c), torch.cat(cand_v), n_c, -torch.inf)
                    run_v, run_i = torch.cat([run_v, cv], 1), torch.cat([run_i, ci], 1)
                    if run_v.shape[1] > k:
                        run_v, p = run_v.topk(k, dim=1, sorted=False)
                        run_i = run_i.gather(1, p)
            if run_v.shape[1] < k:  # fewer than k rows in all probed lists
                pad = k - run_v.shape[1]
                run_v = torch.cat([run_v, torch.full((n_c, pad), -torch.inf)], 1)
                run_i = torch.cat([run_i, torch.full((n_c, pad), -1, dtype=torch.long)], 1)
            v, p = run_v.topk(k, dim=1)
            out_v[c0:c1] = v
            if return_indices:
                j = run_i.gather(1, p)
                out_i[c0:c1] = torch.where(j >= 0, self._perm[j.clamp_min(0)], -1) if bank_ids else j
        return out_v.numpy(), (out_i.numpy() if return_indices else None)

    def tune_nprobe(self, queries, k: int, *, recall_target: float = 0.95, sample_size: int = 64,
                    seed: int = 0) -> Dict[str, object]:
        """Set ``nprobe`` to the smallest power of two reaching ``recall_target`` (recall of the exact top-``k``)
        on ``sample_size`` rows of ``queries``; returns ``{"nprobe", "recall", "curve": {nprobe: recall}}``."""
        if not 0 < check_finite_float(recall_target, "recall_target") <= 1:
            raise ValueError(f"recall_target must be in (0, 1]; got {recall_target}")
        sample_size = check_positive_int(sample_size, "sample_size")
        seed = check_seed(seed)
        queries = _check_matrix(queries, "queries", self.d)
        if self.nlist == 1:
            self._set_nprobe(1)
            return {"nprobe": 1, "recall": 1.0, "curve": {1: 1.0}}
        rng = np.random.default_rng(seed)
        m = queries.shape[0]
        pick = np.sort(rng.choice(m, size=min(m, int(sample_size)), replace=False))
        sample = _as_f32(queries[pick])
        exact_scan = "faiss" if self.scan == "faiss" else "blas"  # the bfloat16 scan is approximate at nprobe=nlist
        _, exact = self.search(sample, k, nprobe=self.nlist, scan=exact_scan)
        curve = {}
        p = 1
        while True:
            _, approx = self.search(sample, k, nprobe=p)
            hits = sum(np.intersect1d(a, e).size for a, e in zip(approx, exact))
            curve[p] = hits / exact.size
            if curve[p] >= recall_target or p >= self.nlist:
                break
            p = min(2 * p, self.nlist)
        self._set_nprobe(p)
        return {"nprobe": p, "recall": curve[p], "curve": curve}


def query_aware_projection(queries, bank, dim: int, *, sample_size: int = 131072,
                           seed: int = 0) -> Tuple[np.ndarray, np.ndarray, float]:
    """The rank-``dim`` bilinear form closest to the inner product over the queries' and the bank's distributions.

    Returns ``(left, right, captured)``, ``(d, dim)`` float32 each, such that ``<q @ left, x @ right>``
    approximates ``<q, x>`` with the smallest mean square error ``E (q^T (I - left right^T) (x - mu))^2`` over the
    rows of ``queries`` and a sample of ``sample_size`` rows of ``bank`` (``mu`` the bank mean: centring the bank
    changes every score of one query by the same amount, so not its ranking). With ``Cq`` the queries' second
    moment and ``Sx`` the bank's covariance, whitening both sides makes this the truncated SVD (Eckart-Young) of
    ``M = Cq^(1/2) Sx^(1/2) = U S V^T``: ``left = Sx^(1/2) V_D S_D^(-1/2)``, ``right = Cq^(1/2) U_D S_D^(-1/2)``
    (no inverse needed; ``left @ right.T = I`` at full rank). ``captured`` = sum of ``S_D^2`` / sum of ``S^2``,
    the share of the score variance kept. The bank's own principal directions keep the bank's variance; these
    keep the variation of the *queries'* scores, which is what a candidate stage must rank (images searching a
    caption bank vary along other directions than the captions)."""
    q = _check_matrix(queries, "queries")
    x = _check_matrix(bank, "bank", q.shape[1])
    d = q.shape[1]
    dim = check_positive_int(dim, "dim", maximum=d, max_name="the embedding dimension")
    sample_size = check_positive_int(sample_size, "sample_size")
    seed = check_seed(seed)
    rng = np.random.default_rng(seed)
    n = x.shape[0]
    pick = np.sort(rng.choice(n, size=sample_size, replace=False)) if sample_size < n else np.arange(n)
    xs = _as_f32(x[torch.from_numpy(pick)] if isinstance(x, torch.Tensor) else x[pick]).astype(np.float64)
    xs -= xs.mean(axis=0)
    sx = xs.T @ xs / xs.shape[0]
    qs = _as_f32(q).astype(np.float64)
    cq = qs.T @ qs / qs.shape[0]

    def sqrtm(c):
        w, v = np.linalg.eigh(c)
        return (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T
    cq12, sx12 = sqrtm(cq), sqrtm(sx)
    u, sv, vt = np.linalg.svd(cq12 @ sx12)
    if sv[dim - 1] <= sv[0] * 1e-12:
        raise ValueError(f"dim={dim} exceeds the rank of the query / bank covariances ({int((sv > sv[0] * 1e-12).sum())}"
                         "): lower dim")
    left = (sx12 @ vt[:dim].T) / np.sqrt(sv[:dim])
    right = (cq12 @ u[:, :dim]) / np.sqrt(sv[:dim])
    return (np.ascontiguousarray(left, dtype=np.float32), np.ascontiguousarray(right, dtype=np.float32),
            float((sv[:dim] ** 2).sum() / (sv ** 2).sum()))


def _check_code(code: str, dim: int) -> str:
    """A faiss code of the projected rows: "Flat", "SQ8", or "PQ<M>x4fs" / "PQ<M>" with ``M`` dividing ``dim``."""
    import re
    if not isinstance(code, str):
        raise TypeError(f"code must be a string such as 'PQ32x4fs'; got {type(code).__name__}")
    if code in ("Flat", "SQ8"):
        return code
    m = re.fullmatch(r"PQ(\d+)(x4fs)?", code)
    if m is None or int(m.group(1)) == 0 or dim % int(m.group(1)):
        raise ValueError(f"code must be 'Flat', 'SQ8' or 'PQ<M>x4fs' / 'PQ<M>' with M dividing projection_dim={dim}; "
                         f"got {code!r}")
    return code


class ProjectedBankIndex:
    """Approximate top-``k`` inner products over a bank: a candidate stage on a query-aware projection, then an
    exact float32 re-rank (faiss's IndexRefine pattern, with an asymmetric transform faiss does not offer).

    1. projection (:func:`query_aware_projection`, fitted on ``queries``, the rows that will search the bank, and
       on a sample of the bank): bank rows ``x @ right``, queries ``q @ left``, ``dim`` columns each;
    2. candidates: a faiss ``IVF<nlist>,<code>`` inner-product index over the projected bank (k-means on
       ``train_size`` projected rows, ``niter`` iterations, ``seed``); a search probes ``nprobe`` lists and keeps
       each query's ``pool = ceil(refine * k)`` best projected scores;
    3. re-rank: the float32 inner products ``<q, x>`` of each query with its pool's rows (the bank itself, not a
       copy, when it is float32 numpy) and their top-``k``.

    The values returned are exact inner products of the rows returned. With ``nprobe = nlist`` and a pool of at
    least ``n`` rows every row is re-ranked: the result is the exact top-``k``.

    Parameters:
        vectors: the bank (n x d). queries: the rows the projection is fitted on (m x d; for NNN the targets).
        dim: projected dimension (default 64). nlist: inverted lists (default :func:`default_nlist` x 4: the
            projected rows are cheap to scan, finer lists scan fewer of them). code: faiss code of the projected
            rows (default ``"PQ<dim/2>x4fs"``: 4-bit fast-scan product quantisation, 2 dimensions per code).
        refine: the pool in multiples of ``k`` (>= 1; default 2). nprobe: lists probed (default: nlist / 8).
        train_size: k-means / code training rows (default ``min(n, 32 * nlist, 262144)``).
        sample_size: bank rows of the projection's covariance (default 131,072).

    Attributes: ``left``, ``right``, ``captured`` (the projection), ``index`` (faiss), ``nlist``, ``nprobe``,
    ``refine``, ``scan`` (``"projected"``), ``build_seconds``. CPU only.
    """

    scan = "projected"

    def __init__(self, vectors, queries, *, dim: int = 64, nlist: Optional[int] = None, code: Optional[str] = None,
                 refine: float = 2.0, nprobe: Optional[int] = None, train_size: Optional[int] = None,
                 sample_size: int = 131072, seed: int = 0, niter: int = 10, add_chunk: int = 262144):
        faiss = _faiss()
        t0 = time.perf_counter()
        x = _check_matrix(vectors, "vectors")
        self.n, self.d = int(x.shape[0]), int(x.shape[1])
        _check_matrix(queries, "queries", self.d)
        self.dim = check_positive_int(dim, "dim (FaissNNN's projection_dim)", maximum=self.d,
                                      max_name="the embedding dimension")
        self.code = _check_code(f"PQ{max(1, self.dim // 2)}x4fs" if code is None else code, self.dim)
        self.refine = _check_refine(refine)
        seed, niter = check_seed(seed), check_positive_int(niter, "niter")
        add_chunk = check_positive_int(add_chunk, "add_chunk")
        self.nlist = min(4 * default_nlist(self.n), max(1, self.n // 39)) if nlist is None else check_positive_int(
            nlist, "nlist", maximum=self.n, max_name="the number of rows")
        m = min(self.n, 32 * self.nlist, 262144) if train_size is None else min(
            self.n, check_positive_int(train_size, "train_size"))
        if m < self.nlist:
            raise ValueError(f"train_size={m} is below nlist={self.nlist}: k-means needs a row per list")
        self.left, self.right, self.captured = query_aware_projection(queries, x, self.dim, sample_size=sample_size,
                                                                      seed=seed)
        rt = torch.from_numpy(self.right)
        if isinstance(x, torch.Tensor):
            self._rows = x.detach().to("cpu", torch.float32).contiguous()
        else:
            self._rows = torch.from_numpy(_as_f32(x))  # no copy for a float32 C-contiguous bank
        proj = np.empty((self.n, self.dim), np.float32)
        for s in range(0, self.n, add_chunk):
            proj[s:s + add_chunk] = (self._rows[s:s + add_chunk] @ rt).numpy()
        self.index = faiss.index_factory(self.dim, f"IVF{self.nlist},{self.code}", faiss.METRIC_INNER_PRODUCT)
        ivf = faiss.extract_index_ivf(self.index)
        ivf.cp.niter, ivf.cp.seed = int(niter), int(seed)
        ivf.cp.max_points_per_centroid = 1 << 30  # we subsample ourselves
        ivf.cp.min_points_per_centroid = 1
        rng = np.random.default_rng(seed)
        pick = np.sort(rng.choice(self.n, size=m, replace=False)) if m < self.n else np.arange(self.n)
        self.index.train(proj[pick])
        self.index.add(proj)
        self._ivf = ivf
        self._set_nprobe(max(1, self.nlist // 8) if nprobe is None else check_positive_int(nprobe, "nprobe"))
        self.build_seconds = time.perf_counter() - t0

    def _set_nprobe(self, nprobe: int) -> None:
        self.nprobe = int(min(max(1, nprobe), self.nlist))
        self._ivf.nprobe = self.nprobe

    def search(self, queries, k: int, nprobe: Optional[int] = None, scan: Optional[str] = None,
               return_indices: bool = True, refine: Optional[float] = None, chunk: int = 4096):
        """Top-``k`` exact inner products and bank row indices of every query, (m, k) each, from the re-ranked
        pool of ``ceil(refine * k)`` candidates of ``nprobe`` lists (defaults: :attr:`refine`, :attr:`nprobe`).
        Missing entries (fewer candidates than ``k``) are ``-inf`` with index -1. ``scan``: None or
        ``"projected"`` (the one scan of this index; the argument mirrors :meth:`BankIndex.search`)."""
        k = check_positive_int(k, "k", maximum=self.n, max_name="the number of indexed rows")
        if scan not in (None, self.scan):
            raise ValueError(f"scan of a ProjectedBankIndex must be None or {self.scan!r}; got {scan!r}")
        q = _check_matrix(queries, "queries", self.d)
        if nprobe is not None:
            self._set_nprobe(check_positive_int(nprobe, "nprobe"))
        refine = self.refine if refine is None else _check_refine(refine)
        pool = int(min(self.n, max(k, math.ceil(refine * k))))
        faiss = _faiss()
        qn = q.detach().to("cpu", torch.float32).numpy() if isinstance(q, torch.Tensor) else q
        qn = _as_f32(qn)
        m = qn.shape[0]
        out_v = np.empty((m, k), np.float32)
        out_i = np.empty((m, k), np.int64)
        rows = self._rows.numpy()
        for s in range(0, m, chunk):
            qc = np.ascontiguousarray(qn[s:s + chunk])
            _, cand = self.index.search(np.ascontiguousarray(qc @ self.left), pool)  # ids -1 only at a row's end
            v, i = out_v[s:s + chunk], out_i[s:s + chunk]
            # the exact re-rank: float32 inner products of each query with its pool's rows, top-k (faiss's
            # knn_inner_products_by_idx reads the rows in place: no gathered copy of the pool)
            faiss.knn_inner_products_by_idx(faiss.swig_ptr(qc), faiss.swig_ptr(rows), faiss.swig_ptr(cand), self.d,
                                            qc.shape[0], self.n, pool, k, faiss.swig_ptr(v), faiss.swig_ptr(i), pool)
        out_v[out_i < 0] = -np.inf
        return out_v, (out_i if return_indices else None)

    def tune_nprobe(self, queries, k: int, *, recall_target: float = 0.95, sample_size: int = 64,
                    seed: int = 0) -> Dict[str, object]:
        """As :meth:`BankIndex.tune_nprobe`: the smallest power-of-two ``nprobe`` whose re-ranked top-``k`` holds
        ``recall_target`` of the exact top-``k`` (one float32 pass over the bank) on ``sample_size`` queries."""
        if not 0 < check_finite_float(recall_target, "recall_target") <= 1:
            raise ValueError(f"recall_target must be in (0, 1]; got {recall_target}")
        sample_size = check_positive_int(sample_size, "sample_size")
        queries = _check_matrix(queries, "queries", self.d)
        rng = np.random.default_rng(check_seed(seed))
        pick = np.sort(rng.choice(queries.shape[0], size=min(queries.shape[0], sample_size), replace=False))
        sample = torch.from_numpy(_as_f32(queries[pick]))
        exact = (sample @ self._rows.T).topk(k, dim=1).indices.numpy()
        curve, p = {}, 1
        while True:
            _, approx = self.search(sample, k, nprobe=p)
            curve[p] = sum(np.intersect1d(a, e).size for a, e in zip(approx, exact)) / exact.size
            if curve[p] >= recall_target or p >= self.nlist:
                break
            p = min(2 * p, self.nlist)
        self._set_nprobe(p)
        return {"nprobe": p, "recall": curve[p], "curve": curve}


class IndexEngine(LocalEngine):
    """The in-process engine with one difference: a top-``k`` over the rows of a bank (a :class:`~hubnorm.blocks.TopK`
    over axis 0 of ``bank x targets`` scores, values only) is searched in a :class:`BankIndex` of that bank
    (approximate unless ``nprobe = nlist``) instead of scanned exhaustively. Every other reduction runs as in
    :class:`~hubnorm.engine.LocalEngine`. With ``projection_dim`` (and no ``bank_index``) the index is a
    :class:`ProjectedBankIndex` whose projection is fitted on the targets of this fit. It knows reductions, not methods: any method whose fit reads such a top-k
    (NNN; CSLS's radius) runs on it unchanged.

    Where the probed lists hold fewer than ``k`` rows, the missing entries are ``-inf`` and a ``RuntimeWarning``
    says how many targets are short (NNN's bias then averages the neighbours found); a target with no neighbour at
    all is an error. After a search: ``index`` (the :class:`BankIndex`), ``tuning`` (the recall curve when
    ``nprobe`` was tuned), ``nprobe``, ``scan``, ``incomplete`` (targets with fewer than ``k`` neighbours).
    """

    def __init__(self, inputs, *, bank_index: Optional[BankIndex] = None, nlist=None, nprobe=None,
                 recall_target: float = 0.95, sample_size: int = 64, use_gpu=None, seed: int = 0, scan=None,
                 block_bytes=None, refine=None, projection_dim=None, code=None):
        super().__init__(inputs, block_bytes=block_bytes)
        self.refine_option = refine
        self.projection_dim, self.code = projection_dim, code
        self.index, self.options = bank_index, dict(nlist=nlist, seed=seed, use_gpu=use_gpu, scan=scan)
        self.nprobe_option, self.recall_target, self.sample_size, self.seed = nprobe, recall_target, sample_size, seed
        self.scan_option = scan
        self.tuning = self.nprobe = self.scan = None
        self.incomplete = 0

    def reduce(self, red):
        searchable = isinstance(red, TopK) and red.axis == 0 and not red.indices and red.source.cols == "targets"
        if not searchable:
            return super().reduce(red)
        bank, targets = self.tensor(red.source.rows), self.tensor("targets")
        k = int(red.k)
        idx = self.index
        if idx is None and self.projection_dim is not None:  # the projection is fitted on these targets
            idx = ProjectedBankIndex(bank, targets, dim=self.projection_dim, nlist=self.options["nlist"],
                                     code=self.code, refine=2.0 if self.refine_option is None else self.refine_option,
                                     seed=self.options["seed"])
        elif idx is None:
            idx = BankIndex(bank, **self.options)
        elif idx.n != bank.shape[0] or idx.d != bank.shape[1]:
            raise ValueError(f"bank_index holds {idx.n} x {idx.d} rows but the query bank is {tuple(bank.shape)}")
        self.tuning = None
        if self.nprobe_option is None and isinstance(idx, ProjectedBankIndex):
            pass  # its own nprobe (default nlist / 8): the recall rule below does not fit a re-ranked pool (below)
        elif self.nprobe_option is None:
            self.tuning = idx.tune_nprobe(targets, k, recall_target=float(self.recall_target),
                                          sample_size=int(self.sample_size), seed=int(self.seed))
        else:
            idx._set_nprobe(int(self.nprobe_option))
        self.scan = idx.scan if self.scan_option is None else self.scan_option
        top, _ = idx.search(targets, k, scan=self.scan, return_indices=False, refine=self.refine_option)
        self.index, self.nprobe = idx, idx.nprobe
        top = torch.from_numpy(top).to(device=targets.device, dtype=targets.dtype)
        found = top > -1e30  # probed lists with fewer than k rows pad with -inf (blas) or -FLT_MAX (faiss)
        n_found = found.sum(dim=1)
        self.incomplete = int((n_found < k).sum())
        if self.incomplete:
            if bool((n_found == 0).any()):
                raise ValueError(f"nprobe={self.nprobe} finds no bank neighbour at all for {int((n_found == 0).sum())} "
                                 f"target(s): raise nprobe (at most nlist={idx.nlist}) or leave it None to tune it")
            warnings.warn(f"nprobe={self.nprobe} finds fewer than k={k} bank neighbours for {self.incomplete} of "
                          f"{top.shape[0]} targets: their bias averages the neighbours found (raise nprobe for the "
                          "full top-k)", RuntimeWarning, stacklevel=4)
            top = torch.where(found, top, torch.full_like(top, -torch.inf))
        return TopKResult(top, None)


class FaissNNN(NearestNeighborNormalization):
    """NNN fitted on an :class:`IndexEngine`: the bias's top-``k`` bank similarities come from a faiss IVF index over
    the query bank (NNN Sec. 3.1, Table A5). The method is NNN's own file; this class only carries the index options.

    Same interface and fitted attributes as :class:`~hubnorm.normalizers.nnn.NearestNeighborNormalization`
    (``bias_``, ``offsets_``) plus ``index_`` (the :class:`BankIndex`, reusable across fits on the same bank:
    pass it as ``bank_index``), ``nprobe_``, ``scan_``, ``incomplete_`` and ``tuning_`` (the recall curve when
    ``nprobe`` was tuned).

    Parameters (beyond NNN's ``alpha``, ``k``):
        nlist: inverted lists (default :func:`default_nlist` of the bank size).
        nprobe: lists scanned per target; default: tuned to ``recall_target`` on ``sample_size`` targets
            (with ``projection_dim``: the index's, ``nlist / 8`` unless built otherwise; its re-ranked pool holds
            0.5-0.7 of the exact top-k at R@1 within 0.2 of exact in the 1M benchmark, so a recall target would
            only scan more). ``nprobe = nlist`` is an exhaustive (exact) search.
        recall_target, sample_size: the tuning rule (see :meth:`BankIndex.tune_nprobe`).
        bank_index: a prebuilt :class:`BankIndex` of this query bank (the build is the one-off cost).
        use_gpu: None = GPU faiss when present, False = CPU.
        scan: ``"blas"`` (probe-grouped GEMM; the default on CPU), ``"blas-bf16"`` (that scan in bfloat16 as a
            candidate stage + exact float32 re-rank of ``refine * k`` candidates) or ``"faiss"`` (faiss's IVF-Flat
            scan; the default with GPU faiss); None = the index's :attr:`BankIndex.scan`. See :class:`BankIndex`.
        refine: the candidate pool of ``scan="blas-bf16"`` (or of the projected index) in multiples of ``k``
            (None = the index's, default 2). With ``nprobe = nlist`` and ``refine * k`` >= the bank size the offsets
            are the exact ones.
        projection_dim: None (default: the IVF index above, full dimension) or the dimension of the approximate
            candidate stage of :class:`ProjectedBankIndex`: a query-aware projection fitted in ``fit`` on the
            targets and the bank (:func:`query_aware_projection`), an IVF index of ``code`` over the projected
            bank (``nlist``: default 4 x :func:`default_nlist`), a pool of ``refine * k`` candidates re-ranked
            exactly. ``scan`` must then be None. Large banks (issue 25's 1M-caption benchmark: 35x the exact
            offsets at R@1 -0.10 with nprobe 256, benchmarks/reports/faiss_nnn_library.md; the curve against
            faiss's own index types: faiss_nnn_qa.md, faiss_nnn_graph.md).
        code: the faiss code of the projected rows (default ``"PQ<projection_dim/2>x4fs"``; ``"Flat"``, ``"SQ8"``,
            ``"PQ<M>x4fs"``); only with ``projection_dim``.
    """

    name = "nnn-faiss"

    def __init__(self, alpha=0.75, k=128, *, nlist=None, nprobe=None, recall_target=0.95, sample_size=64,
                 bank_index=None, use_gpu=None, seed=0, scan=None, device=None, chunk_size=None,
                 check_normalized=True, block_bytes=None, refine=None, projection_dim=None, code=None):
        super().__init__(alpha=alpha, k=k, device=device, chunk_size=chunk_size, check_normalized=check_normalized,
                         block_bytes=block_bytes)
        self.nlist = nlist
        self.nprobe = nprobe
        self.recall_target = recall_target
        self.sample_size = sample_size
        self.bank_index = bank_index
        self.use_gpu = use_gpu
        self.seed = seed
        self.scan = scan
        self.refine = refine
        self.projection_dim = projection_dim
        self.code = code

    def _validate_params(self):
        super()._validate_params()
        if self.nlist is not None:
            check_positive_int(self.nlist, "nlist")
        if self.nprobe is not None:
            check_positive_int(self.nprobe, "nprobe")
        if not 0 < check_finite_float(self.recall_target, "recall_target") <= 1:
            raise ValueError(f"recall_target must be in (0, 1]; got {self.recall_target}")
        check_positive_int(self.sample_size, "sample_size")
        check_seed(self.seed)
        if self.scan is not None and self.scan not in SCANS:
            raise ValueError(f"scan must be None or one of {list(SCANS)}; got {self.scan!r}")
        if self.refine is not None:
            _check_refine(self.refine)
        if self.projection_dim is not None:
            check_positive_int(self.projection_dim, "projection_dim")
            if self.scan is not None:
                raise ValueError(f"scan={self.scan!r} applies to the full-dimension IVF index; with projection_dim "
                                 "leave scan None (the projected index has one scan)")
            if self.code is not None:
                _check_code(self.code, int(self.projection_dim))
            if self.use_gpu:
                raise ValueError("use_gpu=True: the projected index (projection_dim) runs on the CPU only; leave "
                                 "use_gpu None / False, or projection_dim None for the GPU IVF index")
        elif self.code is not None:
            raise ValueError("code sets the projected index's codes: give projection_dim too (or leave code None)")

    def fit_blocks(self, engine):
        if not isinstance(engine, LocalEngine):
            raise TypeError("FaissNNN indexes an in-memory query bank: load the bank (bank.compute()) or fit "
                            "NearestNeighborNormalization on Dask")
        index_engine = IndexEngine(engine.inputs, bank_index=self.bank_index, nlist=self.nlist, nprobe=self.nprobe,
                                   recall_target=self.recall_target, sample_size=self.sample_size,
                                   use_gpu=self.use_gpu, seed=self.seed, scan=self.scan, block_bytes=engine.block_bytes,
                                   refine=self.refine, projection_dim=self.projection_dim, code=self.code)
        fitted = super().fit_blocks(index_engine)
        fitted.update(index_=index_engine.index, scan_=index_engine.scan, nprobe_=index_engine.nprobe,
                      tuning_=index_engine.tuning, incomplete_=index_engine.incomplete)
        return fitted


class IndexedRetriever:
    """Retrieval with any fitted *offset* normalizer from a faiss index on the augmented targets ``[t, h]``.

    ``<[q, 1], [t, h]> = q . t + h`` (NNN paper, Sec. 3.1), so the index serves ``S + offsets`` directly.

    Parameters:
        normalizer: a fitted normalizer with ``is_offset`` (NNN, DN, IS, CSLS, DualIS, SN, DBSN, FaissNNN, ...).
        nlist: inverted lists (default :func:`default_nlist` of the gallery size); 1 = exhaustive.
        nprobe: lists scanned per query; default: tuned at the first :meth:`search` to ``recall_target`` of the
            top-``k`` on ``sample_size`` queries (or call :meth:`tune`).
    """

    def __init__(self, normalizer, *, nlist: Optional[int] = None, nprobe: Optional[int] = None,
                 recall_target: float = 0.95, sample_size: int = 256, use_gpu: Optional[bool] = None, seed: int = 0):
        if not getattr(normalizer, "is_offset", False):
            raise TypeError(f"{type(normalizer).__name__} is not an offset method: a vector index cannot serve it")
        self.normalizer = normalizer
        aug = normalizer.augment_targets()
        self.recall_target = float(recall_target)
        self.sample_size = check_positive_int(sample_size, "sample_size")
        self.seed = check_seed(seed)
        self.index = BankIndex(aug, nlist=nlist, seed=seed, use_gpu=use_gpu)
        self.tuning = None
        if nprobe is not None:
            self.index._set_nprobe(nprobe)
            self.tuning = {"nprobe": self.index.nprobe}

    @property
    def nprobe(self) -> int:
        return self.index.nprobe

    def _augment(self, queries) -> np.ndarray:
        norm = self.normalizer
        q = as_embeddings(queries, "queries", device="cpu", dim=norm.targets_.shape[1],
                          check_normalized=getattr(norm, "check_normalized", True))
        return norm.augment_queries(q).astype(np.float32)

    def tune(self, queries, k: int = 10) -> Dict[str, object]:
        """Pick ``nprobe`` for these queries (recall of the exact top-``k``; :meth:`BankIndex.tune_nprobe`)."""
        self.tuning = self.index.tune_nprobe(self._augment(queries), k, recall_target=self.recall_target,
                                             sample_size=self.sample_size, seed=self.seed)
        return self.tuning

    def search(self, queries, k: int) -> Tuple[np.ndarray, np.ndarray]:
        """Top-``k`` normalised scores ``S + h`` and target indices per query, (m, k) each."""
        q = self._augment(queries)
        if self.tuning is None:
            self.tuning = self.index.tune_nprobe(q, k, recall_target=self.recall_target,
                                                 sample_size=self.sample_size, seed=self.seed)
        return self.index.search(q, k)

    def evaluate(self, task, ks: Sequence[int] = (1, 5, 10)) -> Dict[str, float]:
        """R@K of ``task`` from the index's top-``max(ks)`` (a positive outside it counts as a miss)."""
        kmax = int(max(ks))
        _, idx = self.search(task.queries, kmax)
        pos = task.positives
        hit_rank = np.full(pos.n_queries, kmax, dtype=np.int64)
        q_of = pos.query_of_entry
        # the first position in the returned list that holds one of the query's positives
        match = idx[q_of] == pos.indices[:, None]
        first = np.where(match.any(axis=1), match.argmax(axis=1), kmax)
        np.minimum.at(hit_rank, q_of, first)
        return {f"R@{k}": float(100.0 * np.mean(hit_rank < k)) for k in ks}
