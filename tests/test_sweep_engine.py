"""The sweep engine (hubnorm.sweeps.SweepEngine) gives the bits of separate fits.

A temperature sweep's log-mean-exp over kept similarity blocks runs in cache-sized slabs with each block's row
maximum found once for every scale; these tests prove it bit-identical to the kernel it replaces
(hubnorm.kernels.logsumexp_similarity with shared blocks) and the sweep's offsets bit-identical to one fit per
grid point: blocks split along both axes (logaddexp merges), one-row blocks, odd sizes, negative scales, float32
and float64, one and two threads (a 70 x 30,001 block: slabs and blocks large enough for torch to split them
between threads).
"""

import numpy as np
import pytest
import torch

import hubnorm as hn
from hubnorm.kernels import logsumexp_similarity
from hubnorm.sweeps import SweepEngine

pytestmark = pytest.mark.usefixtures("single_thread_torch")


def _rows(rng, n, d, dtype):
    x = rng.standard_normal((n, d))
    return torch.from_numpy(x / np.linalg.norm(x, axis=1, keepdims=True)).to(dtype)


@pytest.fixture(params=[1, 2], ids=["1 thread", "2 threads"])
def threads(request):
    previous = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(previous)


def _engine(a, b, block_bytes):
    return SweepEngine(hn.make_normalizer("is", block_bytes=block_bytes).local_engine(a, b, sweep_bytes=2**30))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape, block_bytes", [((37, 1001), None), ((40, 3001), 6000 * 4), ((1, 513), None),
                                                ((9, 700), 700 * 4), ((70, 30001), None)])
def test_kept_block_log_sum_exp_is_the_kernel_bit_for_bit(threads, dtype, shape, block_bytes):
    rng = np.random.default_rng(sum(shape))
    a, b = _rows(rng, shape[0], 24, dtype), _rows(rng, shape[1], 24, dtype)
    engine, kept, own = _engine(a, b, block_bytes), {}, {}
    for scale in (200.0, 1 / 0.013, 1.0, -50.0, 1e-3, 0.0, -0.0, 3.0):   # mixed signs share one cache
        want = logsumexp_similarity(a, b, scale, block_bytes=block_bytes, dtype=dtype, shared_blocks=own)
        got = engine.log_sum_exp_kept(a, b, scale, dtype, kept)
        assert got.dtype == want.dtype and torch.equal(got, want), scale
    assert all(torch.equal(own[k], kept[k]) for k in own)   # the kernel's blocks, under the kernel's keys
    if block_bytes is not None:
        assert len(own) > 1   # the budget split the similarity matrix into several blocks


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("method, grid", [("is", {"tau": [0.005, 0.02, 0.05, 1.0]}),
                                          ("dualis", {"beta_target": [50.0, 0.0, 10.0], "beta_query": [1.0, 100.0]})])
def test_sweep_offsets_are_the_fits_offsets(dtype, method, grid):
    from hubnorm.synthetic import make_dataset
    import itertools
    ds = make_dataset("flickr30k", n_train_images=173, n_test_images=31, seed=4, dim=96)
    tr, va = ds.splits["train"], ds.splits["val"]
    task = hn.build_tasks(va.images.astype(dtype), va.captions.astype(dtype), va.caption_to_image,
                          image_bank=tr.images.astype(dtype), caption_bank=tr.captions.astype(dtype))["t2i"]
    points = [dict(zip(grid, v)) for v in itertools.product(*grid.values())]
    for block_bytes in (None, 4096):
        norms = [hn.make_normalizer(method, block_bytes=block_bytes, **p) for p in points]
        engine = SweepEngine(norms[0].local_engine(task.targets, task.query_bank, task.target_bank,
                                                   sweep_bytes=2**30))
        fitted = type(norms[0]).fit_grid(norms, engine)
        for p, f in zip(points, fitted):
            alone = task.fit(hn.make_normalizer(method, block_bytes=block_bytes, **p)).offsets_
            assert torch.equal(f["offsets_"], alone), p
