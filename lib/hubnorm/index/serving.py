"""Serving any fitted offset normalizer from an IVF index of the augmented targets (:class:`IndexedRetriever`;
see :mod:`hubnorm.index`)."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np

from .._validation import as_embeddings, check_positive_int, check_seed
from .ivf import BankIndex


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
