"""The approximate candidate stage of large banks (:class:`ProjectedBankIndex`, :func:`query_aware_projection`;
see :mod:`hubnorm.index`)."""

from __future__ import annotations

import math
import time
from typing import Dict, Optional, Tuple

import numpy as np
import torch

from .._validation import check_positive_int, check_seed
from .common import as_f32, check_matrix, check_refine, default_nlist, import_faiss, probe_curve, tuning_sample


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
    q = check_matrix(queries, "queries")
    x = check_matrix(bank, "bank", q.shape[1])
    d = q.shape[1]
    dim = check_positive_int(dim, "dim", maximum=d, max_name="the embedding dimension")
    sample_size = check_positive_int(sample_size, "sample_size")
    seed = check_seed(seed)
    rng = np.random.default_rng(seed)
    n = x.shape[0]
    pick = np.sort(rng.choice(n, size=sample_size, replace=False)) if sample_size < n else np.arange(n)
    xs = as_f32(x[torch.from_numpy(pick)] if isinstance(x, torch.Tensor) else x[pick]).astype(np.float64)
    xs -= xs.mean(axis=0)
    sx = xs.T @ xs / xs.shape[0]
    qs = as_f32(q).astype(np.float64)
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


def check_code(code: str, dim: int) -> str:
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

    The values returned are exact inner products of the rows returned. With a ``Flat`` code, ``nprobe = nlist`` and
    a pool of at least ``n`` rows every row is re-ranked: the result is the exact top-``k``. The fast-scan codes may
    hand back fewer candidates than the pool asks for (``-1`` ids: seen for a few queries with ``PQ..x4fs`` at a pool
    of ``n``); those places stay ``-inf`` with index ``-1``, never a wrong row.

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
        faiss = import_faiss()
        t0 = time.perf_counter()
        x = check_matrix(vectors, "vectors")
        self.n, self.d = int(x.shape[0]), int(x.shape[1])
        check_matrix(queries, "queries", self.d)
        self.dim = check_positive_int(dim, "dim (FaissNNN's projection_dim)", maximum=self.d,
                                      max_name="the embedding dimension")
        self.code = check_code(f"PQ{max(1, self.dim // 2)}x4fs" if code is None else code, self.dim)
        self.refine = check_refine(refine)
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
            self._rows = torch.from_numpy(as_f32(x))  # no copy for a float32 C-contiguous bank
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
        q = check_matrix(queries, "queries", self.d)
        if nprobe is not None:
            self._set_nprobe(check_positive_int(nprobe, "nprobe"))
        refine = self.refine if refine is None else check_refine(refine)
        pool = int(min(self.n, max(k, math.ceil(refine * k))))
        faiss = import_faiss()
        qn = q.detach().to("cpu", torch.float32).numpy() if isinstance(q, torch.Tensor) else q
        qn = as_f32(qn)
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
        sample = tuning_sample(queries, self.d, recall_target, sample_size, seed)
        exact = (torch.from_numpy(sample) @ self._rows.T).topk(k, dim=1).indices.numpy()
        p, curve = probe_curve(self.search, sample, k, exact, self.nlist, recall_target)
        self._set_nprobe(p)
        return {"nprobe": p, "recall": curve[p], "curve": curve}
