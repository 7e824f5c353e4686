"""Shared fixtures: small seeded embedding problems and the location of ../shared/data."""

import os
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("HUBNORM_SHARED_DATA", REPO.parent / "shared" / "data"))


def shared_path(*parts) -> Path:
    """A path under ../shared/data, or skip the test with the reason when it is absent."""
    p = SHARED_DATA.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"{p} is absent: real-data checks need the shared data folder beside the repository "
                    "(set HUBNORM_SHARED_DATA to point elsewhere)")
    return p


def unit_rows(rng, n, d, dtype=np.float32):
    x = rng.standard_normal((n, d)).astype(dtype)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(scope="module")
def single_thread_torch():
    """Run a module's many tiny torch ops on one thread (intra-op threads only add contention on small
    matrices, ~10x slower on a loaded machine); the previous setting is restored afterwards."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
