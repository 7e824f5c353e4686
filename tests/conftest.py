"""Shared fixtures: small seeded embedding problems and the location of ../shared/data; the test process's
environment: Jupyter kernels over IPC, and a results folder of its own."""

import atexit
import os
import shutil
import tempfile
from importlib.metadata import entry_points
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("HUBNORM_SHARED_DATA", REPO.parent / "shared" / "data"))

# Every Jupyter kernel of the test run -- nbval's, papermill's in this process, run_all.sh's and scripts' in
# subprocesses (they inherit the environment) -- talks over Unix domain sockets in a private folder of the process
# that starts it, not TCP ports: kernels started at the same moment by parallel test workers (run_tests.sh) could
# otherwise be handed the same free port ("Address already in use"). hubnorm_tools.jupyter_ipc; it falls back
# to TCP, with a warning, where Unix sockets cannot work.
IPC_PROVISIONER = "hubnorm-ipc"
if any(ep.name == IPC_PROVISIONER for ep in entry_points(group="jupyter_client.kernel_provisioners")):
    os.environ["JUPYTER_DEFAULT_PROVISIONER_NAME"] = IPC_PROVISIONER
elif os.environ.get("PYTEST_XDIST_WORKER"):
    raise RuntimeError(f"the Jupyter kernel provisioner '{IPC_PROVISIONER}' is not registered in this environment, "
                       "and parallel test workers need it (TCP ports of kernels started together can collide): "
                       "run bash scripts/bootstrap.sh (it installs the checkout's tooling, tools/, beside hubnorm)")

# Every test process (each parallel worker) writes notebook results -- nbval's runs of notebooks/*.ipynb, notebooks a
# test runs without its own HUBNORM_RESULTS, their subprocesses -- into a folder of its own, removed at exit: never
# into the checkout's results/ (a user's run_all.sh outputs; two workers could rewrite the same figure while a
# third reads it). A test that needs another folder still sets its own.
_RESULTS = tempfile.mkdtemp(prefix="hubnorm-test-results-")
atexit.register(shutil.rmtree, _RESULTS, ignore_errors=True)
os.environ["HUBNORM_RESULTS"] = _RESULTS
# every figure a notebook saves under the tests (nbval, the notebook matrix) must pass the layout check
# (hubnorm_companion.figures): a problem its remedies leave is an error here, a NOTE in a user's run
os.environ.setdefault("HUBNORM_FIGURE_CHECK", "error")


def shared_path(*parts) -> Path:
    """A path under ../shared/data, or skip the test with the reason when it is absent."""
    p = SHARED_DATA.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"{p} is absent: real-data checks need the shared data folder beside the repository "
                    "(set HUBNORM_SHARED_DATA to point elsewhere)")
    return p


def load_script(relative: str, name: str):
    """A script of the repository (``scripts/mutation.py``) imported as a module ``name``, for its unit tests."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
