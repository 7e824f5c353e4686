"""benchmarks/bench_gpu.py: the CPU-side logic runs (``--device cpu --tiny``, a dry run at toy sizes) and, without
CUDA, the real run refuses with a clear message and exit status 0. The GPU numbers themselves come from
``bash benchmarks/run_gpu.sh`` on a GPU machine (not from this test)."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _run(*args, out_dir=None):
    cmd = [sys.executable, "bench_gpu.py", *args] + (["--out-dir", str(out_dir)] if out_dir else [])
    return subprocess.run(cmd, cwd=BENCH, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_tiny_dry_run_writes_every_section(tmp_path):
    pytest.importorskip("faiss")
    out = _run("--device", "cpu", "--tiny", "--reps", "1", out_dir=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    md = (tmp_path / "gpu_tiny.md").read_text()
    csv = (tmp_path / "gpu_tiny.csv").read_text()
    for section in ("1 exact NNN", "2 faiss IVF", "3 DBSN"):
        assert section in csv, section
    assert "bare float32 GEMMs" in md and "TINY DRY RUN" in md and "vs CPU dense float64" in md
    assert "logsumexp_similarity scale 20" in md and "log-sum-exp blocks" in md and "hn.evaluate of that fit" in md
    assert "PARTIAL" not in md and "bench_gpu: section 1 (exact NNN)" in out.stdout
    assert "matrix (one pass; the peer)" in md and "one bare GEMM pass over the same matrix, same run" in md
    assert not (BENCH / "reports" / "gpu_tiny.md").exists(), "the dry run must not write into benchmarks/reports"


def test_refuses_without_cuda(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("CUDA is available: the real benchmark would run (use benchmarks/run_gpu.sh)")
    out = _run(out_dir=tmp_path)
    assert out.returncode == 0
    assert "CUDA is not available" in out.stdout and "nothing measured" in out.stdout
    assert not list(tmp_path.iterdir())


def test_cpu_without_tiny_is_refused(tmp_path):
    out = _run("--device", "cpu", out_dir=tmp_path)
    assert out.returncode == 2 and "--tiny" in out.stderr


def _run_gpu_sh(*args, env=None):
    import os
    return subprocess.run(["bash", str(BENCH / "run_gpu.sh"), *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})


@pytest.mark.slow
def test_run_gpu_sh_dry_run_writes_the_test_log_and_the_report(tmp_path):
    """The one GPU command, as a dry run on the CPU: the gpu tests run (HUBNORM_GPU_TEST_DEVICE=cpu) and pass, their
    log and the toy report land in HUBNORM_GPU_OUT, and nothing is written into benchmarks/reports."""
    pytest.importorskip("faiss")
    out = tmp_path / "gpu"
    proc = _run_gpu_sh("--dry-run", "--reps", "1", env={"HUBNORM_GPU_OUT": str(out), "HUBNORM_GPU_RUN_ALL": "0"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = (out / "gpu_tests.log").read_text().strip().splitlines()[-1]   # pytest's "N passed, M deselected in"
    assert " passed" in summary and "failed" not in summary and "error" not in summary, summary
    assert "TINY DRY RUN" in (out / "gpu_tiny.md").read_text()
    assert "run_gpu.sh: 1/2 gpu tests" in proc.stdout and "run_gpu.sh: 2/2 bench_gpu.py" in proc.stdout
    assert not (BENCH / "reports" / "gpu_tiny.md").exists()


@pytest.mark.parametrize("env, why", [
    ({"HUBNORM_GPU_RUN_ALL": "yes"}, "HUBNORM_GPU_RUN_ALL must be 0 or 1; got 'yes'"),
    ({"PYTHON": "/nonexistent/python"}, "PYTHON='/nonexistent/python' is not an interpreter"),
    ({"HUBNORM_GPU_OUT": "__file__"}, "exists and is not a folder"),
])
def test_run_gpu_sh_refuses_bad_settings(tmp_path, env, why):
    if env.get("HUBNORM_GPU_OUT") == "__file__":
        (tmp_path / "f").write_text("")
        env = {"HUBNORM_GPU_OUT": str(tmp_path / "f")}
    proc = _run_gpu_sh("--dry-run", env=env)
    assert proc.returncode == 2 and why in proc.stderr, proc.stderr
