"""The engine whose top-``k`` reductions over a bank are searched in a :class:`~hubnorm.index.BankIndex`
(:class:`IndexEngine`; see :mod:`hubnorm.index`)."""

from __future__ import annotations

import warnings
from typing import Optional

import torch

from ..blocks import TopK, TopKResult
from ..engine import LocalEngine
from .ivf import BankIndex
from .projected import ProjectedBankIndex


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
