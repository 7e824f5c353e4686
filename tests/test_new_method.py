"""A new method written in this file alone (issue 21's acceptance test): no library file changes to run it in
process, on a Dask LocalCluster and through grid_search (reference and one-pass sweep), and registering it puts it
through the whole generic check suite (``tests/method_checks.py``).

The toy is a trimmed-mean NNN: ``b(t) = alpha * mean of the top-k bank similarities of t without the ``trim``
largest`` (a robust variant of NNN Eq. 1), with its own block reduction (written here with the plain
``partial`` / ``merge`` / ``finalize`` of :class:`hubnorm.blocks.Reduction`, no fast kernel) and its own one-pass
sweep over ``(alpha, k)``.
"""

import math
import sys

import numpy as np
import pytest
import torch

import hubnorm as hn
from hubnorm.blocks import Inputs, Param, Reduction, Scores
from hubnorm.normalizers import Normalizer
from hubnorm.normalizers.base import SWEEP_COMMON
from hubnorm.registry import register, unregister
from method_checks import checks_for, problem, registered_checks

pytestmark = pytest.mark.usefixtures("single_thread_torch")

BANK_SCORES = Scores("query_bank", "targets")


class LargestScores(Reduction):
    """The ``k`` largest bank-query scores of every target, sorted: partial = a block's top-k (over its bank rows),
    merge = the top-k of two partials."""

    def __init__(self, k):
        self.source, self.axis, self.k = BANK_SCORES, 0, int(k)

    def partial(self, s, chunk):
        top = s.T.topk(min(self.k, s.shape[0]), dim=1).values
        pad = torch.full((top.shape[0], self.k - top.shape[1]), -math.inf, dtype=top.dtype, device=top.device)
        return torch.cat([top, pad], dim=1)

    def merge(self, a, b):
        return torch.cat([a, b], dim=1).topk(self.k, dim=1).values


class TrimmedNNN(Normalizer):
    """Trimmed-mean NNN: subtract ``alpha`` times the mean of each target's ``k`` nearest bank similarities after
    dropping the ``trim`` largest of them (``trim < k <= the query-bank size``)."""

    name = "trimmed-nnn"
    display_name = "trimmed NNN"
    paper_grid = {"alpha": [0.5, 1.0], "k": [4, 8]}
    inputs = Inputs(fit=(BANK_SCORES,))
    parameters = {"alpha": Param("real"), "k": Param("int", limited_by=("query_bank",)), "trim": Param("int")}
    sweep_params = frozenset({"alpha", "k"})
    sweep_fixed = SWEEP_COMMON | {"trim"}  # fit_grid honours a fixed trim
    example_params = {"alpha": 0.75, "k": 6, "trim": 1}

    def __init__(self, alpha=0.75, k=16, trim=1, *, device=None, chunk_size=None, check_normalized=True,
                 block_bytes=None):
        self.alpha, self.k, self.trim = alpha, k, trim
        self.device, self.chunk_size, self.check_normalized, self.block_bytes = (device, chunk_size, check_normalized,
                                                                                 block_bytes)

    def _validate_params(self):
        super()._validate_params()
        if int(self.trim) >= int(self.k):
            raise ValueError(f"trim must be smaller than k; got trim={self.trim}, k={self.k}")

    def _finalize(self, top):
        bias = float(self.alpha) * top[:, int(self.trim):int(self.k)].mean(dim=1)
        return {"bias_": bias, "offsets_": -bias}

    def fit_blocks(self, engine):
        return self._finalize(engine.reduce(LargestScores(self.k)))

    def plain(self, targets, query_bank=None, target_bank=None):
        return self._finalize((query_bank @ targets.T).topk(int(self.k), dim=0).values.T)

    @classmethod
    def fit_grid(cls, norms, engine):
        top = engine.reduce(LargestScores(max(int(n.k) for n in norms)))  # one top-max(k) for every point
        return [n._finalize(top) for n in norms]


@pytest.fixture
def registered():
    register(TrimmedNNN)
    yield TrimmedNNN
    unregister(TrimmedNNN.name)


def _task(seed=0, dtype=np.float32):
    q, t, qb, tb = problem(seed, m=90, n=45, b=150, c=40, d=16, dtype=dtype)
    return hn.RetrievalTask(q, t, hn.Positives.from_labels(np.arange(90) % 45, 45), query_bank=qb, target_bank=tb)


def test_in_process_equals_the_formula():
    task = _task(1, np.float64)
    norm = TrimmedNNN(alpha=0.5, k=7, trim=2, device="cpu", block_bytes=8 * 45 * 13).fit(task.targets,
                                                                                         query_bank=task.query_bank)
    S = task.query_bank @ task.targets.T
    ref = 0.5 * np.sort(S, axis=0)[::-1][2:7].mean(axis=0)
    np.testing.assert_allclose(norm.bias_.numpy(), ref, atol=1e-12)
    assert hn.evaluate(norm, task)["R@1"] >= 0
    with pytest.raises(ValueError, match="trim must be smaller than k"):
        TrimmedNNN(k=2, trim=2).check_params()


def test_grid_search_reference_and_one_pass_sweep(registered):
    task = _task(2)
    grid = {"alpha": [0.25, 1.0], "k": [3, 9]}
    ref = hn.grid_search("trimmed-nnn", task, grid, engine="reference")
    fast = hn.grid_search("trimmed-nnn", task, grid)
    assert fast.engine == "sweep" and ref.engine == "reference"
    cols = ["alpha", "k", "R@1", "R@5", "R@10", "MdR"]
    np.testing.assert_array_equal(ref.table[cols].to_numpy(), fast.table[cols].to_numpy())
    assert hn.grid_search("trimmed-nnn", task).best_params.keys() == {"alpha", "k"}  # its paper grid is registered
    assert hn.DISPLAY_NAMES["trimmed-nnn"] == "trimmed NNN"
    with pytest.raises(ValueError, match="largest k of 'trimmed-nnn'"):
        hn.grid_search("trimmed-nnn", task, {"k": [151]})


def test_on_a_dask_local_cluster():
    distributed = pytest.importorskip("distributed")
    da = pytest.importorskip("dask.array")
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this test file
    task = _task(3, np.float64)
    ref = TrimmedNNN(alpha=0.75, k=6, trim=1, device="cpu").fit(task.targets, query_bank=task.query_bank)
    # one worker process (the test's cost is its start-up): the toy's classes travel to another process. No memory
    # limit: a worker that imports torch holds ~0.85 GB, and a worker above 80% of its limit is paused, which
    # left a 1 GiB worker waiting forever (CI timed out here).
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=True, dashboard_address=None,
                                       host="127.0.0.1", memory_limit=0)
    try:
        with distributed.Client(cluster):
            got = TrimmedNNN(alpha=0.75, k=6, trim=1, device="cpu").fit(
                task.targets, query_bank=da.from_array(task.query_bank, chunks=(40, -1)))
    finally:
        cluster.close()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    np.testing.assert_allclose(got.offsets, ref.offsets, rtol=1e-12, atol=1e-15)


def test_registering_puts_it_through_the_whole_check_suite(registered):
    suite = [(name, check) for name, check, _ in registered_checks()]
    mine = [fn for name, check, fn in registered_checks() if name == "trimmed-nnn"]
    assert len(mine) == len({c for _, c in suite}) >= 10  # every check of the suite
    for fn in mine:
        fn()


def test_the_suite_catches_a_method_whose_blocks_disagree_with_its_formula():
    """A test of the suite: a merge that drops a block (a wrong reduction) fails plain-equals-blocked."""

    class WrongMerge(LargestScores):
        def merge(self, a, b):
            return a

    class Broken(TrimmedNNN):
        name = "broken-trimmed-nnn"

        def fit_blocks(self, engine):
            return self._finalize(engine.reduce(WrongMerge(self.k)))

    checks = dict(checks_for(Broken))
    with pytest.raises(AssertionError, match="fit vs plain"):
        checks["check_plain_equals_blocked"]()
