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
  the augmented targets; ``search`` returns the top-k normalised scores and indices; ``hubnorm.evaluate(retriever,
  task)`` gives R@K from those lists.

One module per concept: ``ivf`` (:class:`BankIndex`), ``projected`` (:class:`ProjectedBankIndex`,
:func:`query_aware_projection`), ``engine`` (:class:`IndexEngine`), ``nnn`` (:class:`FaissNNN`), ``serving``
(:class:`IndexedRetriever`), and ``common`` (the faiss import, GPU detection, :func:`default_nlist`, input checks).

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

from .common import SCANS, default_nlist, faiss_uses_gpu
from .engine import IndexEngine
from .ivf import BankIndex
from .nnn import FaissNNN
from .projected import ProjectedBankIndex, query_aware_projection
from .serving import IndexedRetriever

__all__ = ["BankIndex", "IndexEngine", "FaissNNN", "IndexedRetriever", "ProjectedBankIndex", "default_nlist",
           "faiss_uses_gpu", "query_aware_projection", "SCANS"]

