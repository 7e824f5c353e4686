"""Transport-plan normalizations: rank by the plan itself (DBSN Sec. 4.5, Table 6: OTN, L2N, HN).

Pan et al. compare Sinkhorn normalization with three normalizations whose result is a *sparse* plan over the
query x target score matrix S (m x n) under the uniform marginals of their Eq. 7 (``a = 1/m``, ``b = 1/n``):
the exact optimal transport plan (OTN, Eq. 4), the L2-regularised plan (L2N, Eq. 5) and a Hungarian assignment
(HN). The normalised score of query ``i`` and target ``j`` is the plan entry ``pi_ij``: most entries are exactly
zero (the paper's "sparsity" column), and the zeros of a row tie, ordered by target index (the rank rule of
:func:`hubnorm.positive_ranks`).

These methods are **transductive**: the plan couples every query of the bank, so it exists only for the rows it
was fitted on. Fit them with the test queries as the query bank (``query_aware=True`` in
``task.fit``, from embeddings or from score matrices); scoring recognises each row by its raw scores (equal, to the
precision of the dtype, to a fitted row) and refuses a row that is not one, naming the fix. Identical rows (the
same query twice) share the mean of their plan rows.

As blocks: the plan needs the whole bank x target matrix, gathered by one :class:`~hubnorm.blocks.TopK` of the
whole bank per target (with indices), so every engine (in process, Dask, stored score matrices) runs it; the
solver then runs once in float64 on the CPU. Subclasses state ``solve(S) -> plan`` (float64 numpy, ``m x n``).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from ..blocks import Inputs, Scores, TopK
from .base import Normalizer, NotFittedError

BANK_SCORES = Scores("query_bank", "targets")

#: rows of a scored block are recognised as fitted rows within this share of the score range, per dtype
#: (float32 products computed by two kernels differ by a few units of 1e-7 on unit rows)
ROW_TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-9}

TRANSDUCTIVE_HINT = ("fit it with the test queries as the query bank (query_aware=True in task.evaluate, or "
                     "fit(targets, query_bank=queries))")


def import_pot():
    """The POT package (``ot``), which OTN and L2N solve their transport problems with (a core dependency)."""
    try:
        import ot
    except ImportError as e:   # pragma: no cover - POT is a core dependency
        raise ImportError("OTN and L2N solve transport problems with POT: pip install POT") from e
    return ot


def gather_bank_scores(engine) -> torch.Tensor:
    """The whole ``query_bank x targets`` score matrix from any engine: a :class:`~hubnorm.blocks.TopK` of the whole
    bank per target (values and bank indices), scattered back into place."""
    m, n = engine.size("query_bank"), engine.size("targets")
    top = engine.reduce(TopK(BANK_SCORES, m, axis=0, indices=True))
    values, rows = engine.to_tensor(top.values), engine.to_tensor(top.indices)    # n x m each
    S = torch.empty((m, n), dtype=values.dtype, device=values.device)
    S.scatter_(0, rows.T.to(torch.int64), values.T)
    return S


class TransportPlanNormalizer(Normalizer):
    """The shared part of OTN, L2N and HN: gather the bank scores, ``solve`` the plan (a subclass), and score the
    fitted rows by their plan rows.

    Fitted attributes: ``plan_`` (``m x n``, rows of the bank; a row sums to 1 where it holds mass) and
    ``bank_scores_`` (the raw ``m x n`` scores the rows are recognised by).
    """

    is_offset = False
    transductive: ClassVar[bool] = True
    inputs = Inputs(fit=(BANK_SCORES,), score=(Scores("queries", "targets"),))

    def __init__(self, *, device=None, chunk_size=None, check_normalized=True, block_bytes=None):
        """A plan without parameters (OTN, HN); a method with parameters (L2N) states its own constructor."""
        self._store(locals())

    def solve(self, S: np.ndarray) -> np.ndarray:
        """The plan (float64 ``m x n``) of the float64 score matrix ``S``."""
        raise NotImplementedError

    def _plan(self, S: torch.Tensor) -> torch.Tensor:
        plan = self.solve(S.detach().cpu().to(torch.float64).numpy())
        plan = np.where(plan > 0, plan, 0.0) * S.shape[0]      # a query's mass is 1 (the paper's a_i = 1/m, times m)
        return torch.from_numpy(plan).to(S.dtype)

    def fit_blocks(self, engine):
        S = gather_bank_scores(engine)
        return {"plan_": self._plan(S).to(S.device), "bank_scores_": S}

    def plain(self, targets, query_bank=None, target_bank=None):
        S = query_bank @ targets.T
        return {"plan_": self._plan(S), "bank_scores_": S}

    @property
    def sparsity(self) -> float:
        """The share of plan entries that are exactly zero (DBSN Table 6's last column); known after any fit,
        from embeddings or from score matrices."""
        if not hasattr(self, "plan_"):
            raise NotFittedError(f"{type(self).__name__} is not fitted yet: its plan (and sparsity) exist after fit")
        return float((self.plan_ == 0).double().mean())

    def _fitted_rows(self, s: torch.Tensor):
        """The fitted (bank) row of every row of the raw score block ``s`` (ValueError naming the fix when a row is
        none), and ``{row: fitted rows}`` for rows equal to several fitted rows (duplicate queries: averaged)."""
        bank = self.bank_scores_.to(s.device, s.dtype)
        scale = float(bank.abs().max()) or 1.0
        tol = ROW_TOLERANCE.get(s.dtype, 1e-9) * scale
        # a fingerprint narrows the candidates (one projection), the max-norm check decides
        r = torch.linspace(1.0, 2.0, bank.shape[1], dtype=s.dtype, device=s.device)
        fb, fs = bank @ r, s @ r
        order = torch.argsort(fb)
        fb_sorted = fb[order]
        slack = tol * float(r.sum())
        lo = torch.searchsorted(fb_sorted, fs - slack)
        hi = torch.searchsorted(fb_sorted, fs + slack, right=True)
        out = torch.empty(s.shape[0], dtype=torch.int64, device=s.device)
        duplicates = {}
        for i in range(s.shape[0]):
            cand = order[int(lo[i]):int(hi[i])]
            if cand.numel():
                cand = cand[(bank[cand] - s[i]).abs().amax(dim=1) <= tol]
            if cand.numel() == 0:
                raise ValueError(f"{type(self).__name__} is transductive: row {i} of these scores is not a query it "
                                 f"was fitted on (its plan couples the fitted queries only); {TRANSDUCTIVE_HINT}")
            if cand.numel() == 1:
                out[i] = cand[0]
            else:
                out[i] = -1
                duplicates[i] = cand
        return out, duplicates

    def normalize_scores(self, s, queries=None):
        rows, duplicates = self._fitted_rows(s)
        plan = self.plan_.to(s.device, s.dtype)
        out = plan[rows.clamp(min=0)]
        for i, cand in duplicates.items():     # the same query several times: the mean of their plan rows
            out[i] = plan[cand].mean(dim=0)
        return out
