"""Jupyter kernels over Unix domain sockets (hubnorm_tools.jupyter_ipc), as the test run starts them.

Parallel test workers start notebook kernels at the same moment; over TCP two of them could be handed the same free
port. tests/conftest.py selects the ``hubnorm-ipc`` provisioner for every kernel of the run (environment variable,
inherited by subprocesses). Checked here: kernels started at the same moment by several processes, one through each
way the suite starts kernels (nbval's kernel start, papermill in-process, the papermill command line as run_all.sh calls
it, a plain jupyter_client manager; 4 kernels in the suite, 8 and more with ``start_kernels_together``), all run a
cell and report IPC from inside the kernel, on distinct socket paths;
each process's socket folder is private and removed at exit; the TCP fallback and the cases left alone.
"""

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("jupyter_client")
pytest.importorskip("papermill")
pytest.importorskip("nbval")

from hubnorm_tools import jupyter_ipc  # noqa: E402

#: a cell that prints what the kernel itself was started with
PROBE = ("import json, ipykernel.connect\ninfo = json.loads(ipykernel.connect.get_connection_info())\n"
         "print('PROBE', info['transport'], info['ip'], info['shell_port'])")

WORKER = textwrap.dedent('''
    import json, os, subprocess, sys, time
    kind, start, nb, out = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
    probe = {probe!r}
    while time.time() < start:          # every process starts its kernel at the same moment
        time.sleep(0.005)
    if kind == "nbval":                 # nbval's own kernel start (pytest --nbval)
        from nbval.kernel import start_new_kernel
        km, kc = start_new_kernel(kernel_name="python3", startup_timeout=120)
    elif kind == "jupyter_client":
        from jupyter_client.manager import start_new_kernel
        km, kc = start_new_kernel(kernel_name="python3", startup_timeout=120)
    if kind in ("nbval", "jupyter_client"):
        lines = []
        kc.execute_interactive(probe, timeout=120, output_hook=lambda m: lines.append(m["content"].get("text", "")))
        text = "".join(lines)
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    else:
        if kind == "papermill":         # in this process (nbclient), as tests/test_notebooks.py does
            import papermill
            papermill.execute_notebook(nb, out, kernel_name="python3", progress_bar=False)
        else:                           # the command line, in a subprocess, as run_all.sh's runner does
            subprocess.run([sys.executable, "-m", "papermill", "-k", "python3", "--no-progress-bar", nb, out],
                           check=True, capture_output=True, timeout=300)
        import nbformat
        text = "".join(o.get("text", "") for o in nbformat.read(out, as_version=4).cells[0].outputs)
    print(json.dumps({{"kind": kind, "probe": text.strip()}}))
''').format(probe=PROBE)

KINDS = ("nbval", "papermill", "papermill-cli", "jupyter_client")


def start_kernels_together(folder: Path, n: int, delay: float = 3.0) -> list:
    """``n`` processes (kinds in turn) each start one kernel at the same moment and run the probe cell in it;
    returns ``(kind, returncode, stdout, stderr)`` per process."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(PROBE)]
    nb_path = folder / "probe.ipynb"
    nbformat.write(nb, nb_path)
    script = folder / "worker.py"
    script.write_text(WORKER)
    start = time.time() + delay
    procs = [(KINDS[i % len(KINDS)], subprocess.Popen(
        [sys.executable, str(script), KINDS[i % len(KINDS)], str(start), str(nb_path), str(folder / f"out{i}.ipynb")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=folder)) for i in range(n)]
    results = []
    for kind, p in procs:
        try:
            out, err = p.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        results.append((kind, p.returncode, out, err))
    return results


def test_the_test_run_selects_the_ipc_provisioner():
    """conftest.py's setting reaches jupyter_client: a kernel spec without its own provisioner gets hubnorm-ipc."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.provisioning import KernelProvisionerFactory

    assert os.environ.get(jupyter_ipc.ENV) == jupyter_ipc.NAME
    spec = KernelSpecManager().get_kernel_spec("python3")
    cfg = KernelProvisionerFactory.instance()._get_provisioner_config(spec)
    assert cfg["provisioner_name"] == jupyter_ipc.NAME or "kernel_provisioner" in spec.metadata


@pytest.mark.slow
def test_kernels_started_at_the_same_moment_by_several_processes_all_run_over_ipc(tmp_path):
    """The failure this prevents (two workers' kernels on one TCP port) needs kernels started together: 4
    processes, through nbval's, papermill's (in-process and command line) and jupyter_client's kernel start, all
    at the same moment; every kernel runs its cell and reports IPC on its own socket path, in a private folder
    that is gone when its process exits. (4, not more: each kernel costs ~2 s of CPU; the 8-kernel stress runs of
    start_kernels_together are in the issue's report.)"""
    results = start_kernels_together(tmp_path, n=len(KINDS))
    failed = [(kind, rc, err[-3000:]) for kind, rc, _, err in results if rc != 0]
    assert not failed, failed
    probes = [json.loads(out.strip().splitlines()[-1]) for _, _, out, _ in results]
    assert sorted(p["kind"] for p in probes) == sorted(KINDS)
    fields = [p["probe"].split() for p in probes]
    assert all(f[0] == "PROBE" and f[1] == "ipc" for f in fields), probes
    prefixes = [f[2] for f in fields]
    assert len(set(prefixes)) == len(prefixes), prefixes
    for prefix in prefixes:
        folder = Path(prefix).parent
        assert Path(prefix).name and folder.name.startswith("hnk-"), prefix
        assert len(os.fsencode(prefix + "-99999")) <= jupyter_ipc.MAX_SOCKET_PATH
        assert not folder.exists(), f"{folder}: the socket folder outlived its process"


def test_socket_folder_is_private_short_and_one_per_process():
    folder = jupyter_ipc.socket_dir()
    assert folder is not None and jupyter_ipc.socket_dir() == folder
    assert os.stat(folder).st_mode & 0o777 == 0o700
    assert Path(folder).name.startswith("hnk-")


def test_no_short_writable_folder_means_tcp_with_a_warning(monkeypatch, tmp_path):
    """Socket paths over the limit (a long temporary folder, no short one) -> the kernel keeps TCP, and says so."""
    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    monkeypatch.setattr(jupyter_ipc, "_socket_dir", None)
    monkeypatch.setenv("HUBNORM_KERNEL_SOCKET_DIR", str(deep))
    monkeypatch.setattr(jupyter_ipc.tempfile, "gettempdir", lambda: str(deep))
    monkeypatch.setattr(jupyter_ipc, "MAX_SOCKET_PATH", 10)   # /tmp, the last candidate, is too long as well
    assert jupyter_ipc.socket_dir() is None
    assert list(deep.iterdir()) == [], "a rejected folder must not be left behind"

    km = _manager()
    with pytest.warns(RuntimeWarning, match="uses TCP ports"):
        asyncio.run(_pre_launch(km))
    assert km.transport == "tcp"


def test_explicit_ports_and_other_transports_are_left_alone():
    """A kernel given its ports (a connection file loaded, a user's settings) keeps its transport and address."""
    km = _manager()
    km.shell_port, km.iopub_port, km.stdin_port, km.hb_port, km.control_port = 50001, 50002, 50003, 50004, 50005
    ip = km.ip
    asyncio.run(_pre_launch(km))
    assert km.transport == "tcp" and km.ip == ip


def _manager():
    from jupyter_client.manager import KernelManager

    return KernelManager(kernel_name="python3")


async def _pre_launch(km):
    """The provisioner's preparation only (connection file written, no kernel started)."""
    prov = jupyter_ipc.IPCProvisioner(kernel_id="probe", kernel_spec=km.kernel_spec, parent=km)
    await prov.pre_launch()
    km.cleanup_connection_file()


def test_the_projects_kernelspec_names_the_provisioner_and_a_direct_papermill_run_is_quiet(tmp_path):
    """scripts/bootstrap.sh installs the .venv's kernel with install_kernelspec: a papermill command run outside the
    test suite's setting (no JUPYTER_DEFAULT_PROVISIONER_NAME) then talks to its kernel over IPC, and ipykernel's
    warning about unencrypted TCP never reaches the terminal (it did, on every direct papermill run)."""
    import nbformat

    folder = jupyter_ipc.install_kernelspec(str(tmp_path / "env"), "python3")
    spec = json.loads((Path(folder) / "kernel.json").read_text())
    assert spec["metadata"]["kernel_provisioner"] == {"provisioner_name": jupyter_ipc.NAME, "config": {}}
    assert spec["argv"][0] == sys.executable
    assert jupyter_ipc.install_kernelspec(str(tmp_path / "env"), "python3") == folder   # idempotent
    with pytest.raises(ValueError, match="name must be a kernel name"):
        jupyter_ipc.install_kernelspec(str(tmp_path / "env"), "a/b")
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(PROBE)]
    nbformat.write(nb, tmp_path / "probe.ipynb")
    env = {k: v for k, v in os.environ.items() if k != jupyter_ipc.ENV}
    env["JUPYTER_PATH"] = str(tmp_path / "env" / "share" / "jupyter")   # this spec before any other python3
    run = subprocess.run([sys.executable, "-m", "papermill", "probe.ipynb", "out.ipynb"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "without encryption" not in run.stderr and "WARNING" not in run.stderr, run.stderr[-3000:]
    out = nbformat.read(tmp_path / "out.ipynb", as_version=4).cells[0].outputs[0]["text"]
    assert out.startswith("PROBE ipc "), out
