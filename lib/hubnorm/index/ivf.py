"""The IVF-Flat inner-product index over a bank (:class:`BankIndex`): build, ``tune_nprobe`` and the three scans
(see :mod:`hubnorm.index`)."""

from __future__ import annotations

import math
import time
from typing import Dict, Optional, Tuple

import numpy as np
import torch

from ..kernels import pack_rows
from .._validation import check_positive_int, check_seed
from .common import (SCANS, as_f32, check_matrix, check_refine, default_nlist, faiss_uses_gpu, import_faiss,
                     probe_curve, tuning_sample)


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
        faiss = import_faiss()
        t0 = time.perf_counter()
        x = check_matrix(vectors, "vectors")
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
            cpu.train(as_f32(x[sample]))
            self._quantizer = quantizer  # keep the quantizer alive with the index
        self.on_gpu = faiss_uses_gpu(use_gpu)
        if scan is None:
            scan = "faiss" if self.on_gpu else "blas"
        if scan not in SCANS:
            raise ValueError(f"scan must be one of {list(SCANS)}; got {scan!r}")
        self.scan = scan
        self.refine = check_refine(refine)
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
                self.index.add(as_f32(x[s:s + add_chunk]))
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
                _, a = self._quantizer.search(as_f32(x[s:s + add_chunk]), 1)
                assign[s:s + add_chunk] = a[:, 0]
            cent = self._quantizer.reconstruct_n(0, self.nlist)
        perm = np.argsort(assign, kind="stable")
        counts = np.bincount(assign, minlength=self.nlist)
        rows = torch.empty((n, self.d), dtype=torch.float32)
        for s in range(0, n, add_chunk):
            p = perm[s:s + add_chunk]
            rows[s:s + len(p)] = torch.from_numpy(as_f32(x[torch.from_numpy(p)] if isinstance(x, torch.Tensor)
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
        faiss = import_faiss()
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
                import_faiss().GpuParameterSpace().set_index_parameter(self.index, "nprobe", self.nprobe)
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
            as_f32(queries))
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
        queries = check_matrix(queries, "queries", self.d)
        if nprobe is not None:
            self._set_nprobe(check_positive_int(nprobe, "nprobe"))
        scan = self.scan if scan is None else scan
        if scan == "blas":
            self._ensure_blas()
            return self._blas_search(queries, k, self.nprobe, return_indices=return_indices)
        if scan == "blas-bf16":
            self._ensure_blas()
            refine = self.refine if refine is None else check_refine(refine)
            return self._refined_search(queries, k, self.nprobe, refine, return_indices=return_indices)
        if scan != "faiss":
            raise ValueError(f"scan must be one of {list(SCANS)}; got {scan!r}")
        self._ensure_faiss()
        q = queries
        out_d = np.empty((q.shape[0], k), np.float32)
        out_i = np.empty((q.shape[0], k), np.int64)
        for s in range(0, q.shape[0], chunk):
            out_d[s:s + chunk], out_i[s:s + chunk] = self.index.search(as_f32(q[s:s + chunk]), k)
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
            as_f32(queries))
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
            as_f32(queries))
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
        sample = tuning_sample(queries, self.d, recall_target, sample_size, seed)
        if self.nlist == 1:   # one list: every probe is the exact scan
            p, curve = 1, {1: 1.0}
        else:   # the bfloat16 scan is approximate even at nprobe = nlist: the exact top-k from an exact scan
            _, exact = self.search(sample, k, nprobe=self.nlist, scan="faiss" if self.scan == "faiss" else "blas")
            p, curve = probe_curve(self.search, sample, k, exact, self.nlist, recall_target)
        self._set_nprobe(p)
        return {"nprobe": p, "recall": curve[p], "curve": curve}
