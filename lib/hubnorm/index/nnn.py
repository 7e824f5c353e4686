"""NNN fitted on an IVF index of its bank (:class:`FaissNNN`; see :mod:`hubnorm.index`)."""

from __future__ import annotations

from .._validation import check_finite_float, check_positive_int, check_seed
from ..normalizers.nnn import NearestNeighborNormalization
from .common import SCANS, check_refine
from .projected import check_code
from .engine import IndexEngine


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
        self._store(locals())
        self.implementation = "fast"   # NNN's parameter, not this one's: its exact top-k path where one runs

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
            check_refine(self.refine)
        if self.projection_dim is not None:
            check_positive_int(self.projection_dim, "projection_dim")
            if self.scan is not None:
                raise ValueError(f"scan={self.scan!r} applies to the full-dimension IVF index; with projection_dim "
                                 "leave scan None (the projected index has one scan)")
            if self.code is not None:
                check_code(self.code, int(self.projection_dim))
            if self.use_gpu:
                raise ValueError("use_gpu=True: the projected index (projection_dim) runs on the CPU only; leave "
                                 "use_gpu None / False, or projection_dim None for the GPU IVF index")
        elif self.code is not None:
            raise ValueError("code sets the projected index's codes: give projection_dim too (or leave code None)")

    def fit_blocks(self, engine):
        held = engine.embeddings()
        if not {"targets", "query_bank"} <= set(held):
            raise TypeError("FaissNNN indexes an in-memory query bank of embeddings: load the bank (bank.compute()), "
                            "or fit NearestNeighborNormalization on Dask or on score matrices")
        index_engine = IndexEngine(held, bank_index=self.bank_index, nlist=self.nlist, nprobe=self.nprobe,
                                   recall_target=self.recall_target, sample_size=self.sample_size,
                                   use_gpu=self.use_gpu, seed=self.seed, scan=self.scan, block_bytes=engine.block_bytes,
                                   refine=self.refine, projection_dim=self.projection_dim, code=self.code)
        fitted = super().fit_blocks(index_engine)
        fitted.update(index_=index_engine.index, scan_=index_engine.scan, nprobe_=index_engine.nprobe,
                      tuning_=index_engine.tuning, incomplete_=index_engine.incomplete)
        return fitted
