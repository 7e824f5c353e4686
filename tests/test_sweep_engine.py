"""The sweep engine (hubnorm.sweeps.SweepEngine) gives the bits of separate fits.

A temperature sweep's log-mean-exp reads similarity blocks kept across grid points through the kernel of a single
fit (hubnorm.kernels.logsumexp_similarity with shared blocks); these tests prove the sweep's offsets bit-identical
to one fit per grid point: blocks split along both axes (logaddexp merges), odd sizes, zero scales (DualIS with a
beta of 0), float32 and float64, one and two threads.
"""

import numpy as np
import pytest
import torch

import hubnorm as hn
from hubnorm.sweeps import SweepEngine

pytestmark = pytest.mark.usefixtures("single_thread_torch")


@pytest.fixture(params=[1, 2], ids=["1 thread", "2 threads"])
def threads(request):
    previous = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(previous)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("method, grid", [("is", {"tau": [0.005, 0.02, 0.05, 1.0]}),
                                          ("dualis", {"beta_target": [50.0, 0.0, 10.0], "beta_query": [1.0, 100.0]})])
def test_sweep_offsets_are_the_fits_offsets(threads, dtype, method, grid):
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
