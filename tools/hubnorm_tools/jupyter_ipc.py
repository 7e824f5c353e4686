"""Jupyter kernels over Unix domain sockets (IPC) instead of TCP ports: many kernels started at once never collide.

Why: over TCP (jupyter_client's default) the process that starts a kernel picks the kernel's five ports by binding
port 0 and releasing it; the kernel binds them a moment later. Two processes starting kernels at the same time (two
pytest-xdist workers, each running a notebook) can be handed the same free port, and one kernel dies with "Address
already in use". Over IPC a kernel's channels are socket files whose names are unique to that kernel, in a private
folder (mode 0700) of the process that starts it: no port is picked, so there is nothing to collide on.

How it is selected: by environment, so that one setting reaches every kernel a run starts -- nbval's kernels,
papermill / nbclient kernels started in-process, and those of ``run_all.sh`` and scripts in subprocesses (they
inherit the environment) -- without a Jupyter config file (papermill, nbclient and nbval load none)::

    JUPYTER_DEFAULT_PROVISIONER_NAME=hubnorm-ipc

jupyter_client reads that variable for every kernel spec that names no provisioner of its own, and the checkout's
tooling registers the name (entry point group ``jupyter_client.kernel_provisioners`` in ``tools/pyproject.toml``). The test suite sets
it (``tests/conftest.py``). The project's own kernel spec names it too: ``scripts/bootstrap.sh`` installs the
``.venv``'s ``python3`` kernel with ``{"kernel_provisioner": {"provisioner_name": "hubnorm-ipc"}}`` in its metadata
(:func:`install_kernelspec`), so ``run_all.sh``, a direct ``papermill`` run and JupyterLab started from ``.venv``
talk to their kernels over IPC as well (over TCP ipykernel warns on every start that the channels are not
encrypted; IPC socket files in a private folder are reachable by this user only). Kernels of other environments
are left as they are, and so is a kernel spec with its own ``kernel_provisioner`` stanza, or a kernel given
explicit ports or an existing connection file.

Where IPC cannot work -- no Unix sockets (Windows), or no writable folder giving paths short enough (a socket path
holds at most 107 bytes on Linux, 103 on macOS) -- the kernel starts over TCP as before, with a warning saying why.
Set ``HUBNORM_KERNEL_SOCKET_DIR`` to a short writable folder to choose where the socket folders go (default: the
temporary folder, then /tmp).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import socket
import sys
import tempfile
import uuid
import warnings
from typing import Any, Optional

from jupyter_client.provisioning import LocalProvisioner

#: The provisioner's registered name (pyproject.toml, [project.entry-points."jupyter_client.kernel_provisioners"]).
NAME = "hubnorm-ipc"
#: The environment variable jupyter_client reads for the default provisioner.
ENV = "JUPYTER_DEFAULT_PROVISIONER_NAME"
#: Longest socket path used: below macOS's 104-byte sun_path (Linux: 108), both counting the final NUL.
MAX_SOCKET_PATH = 100

_socket_dir: Optional[str] = None   # this process's folder ("" once it is known that there is none)
_socket_dir_pid: Optional[int] = None


def _prefix_in(folder: str) -> str:
    """A kernel's socket-path prefix: the kernel's channels are ``<prefix>-1`` ... ``<prefix>-5``."""
    return os.path.join(folder, uuid.uuid4().hex[:12])


def socket_dir() -> Optional[str]:
    """This process's private folder for kernel sockets (created on first use, mode 0700, removed at exit), or None
    when Unix sockets are missing or no writable folder gives socket paths of at most ``MAX_SOCKET_PATH`` bytes."""
    global _socket_dir, _socket_dir_pid
    if _socket_dir is not None and _socket_dir_pid == os.getpid():
        return _socket_dir or None
    _socket_dir, _socket_dir_pid = "", os.getpid()
    if not hasattr(socket, "AF_UNIX"):
        return None
    for parent in (os.environ.get("HUBNORM_KERNEL_SOCKET_DIR"), tempfile.gettempdir(), "/tmp"):
        if not parent:
            continue
        try:
            folder = tempfile.mkdtemp(prefix="hnk-", dir=parent)
        except OSError:
            continue
        if len(os.fsencode(_prefix_in(folder) + "-99999")) <= MAX_SOCKET_PATH:
            _socket_dir = folder
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
            return folder
        os.rmdir(folder)
    return None


class IPCProvisioner(LocalProvisioner):
    """jupyter_client's local provisioner, with the kernel's channels on Unix domain sockets (see the module's
    docstring); falls back to TCP, with a warning, where IPC cannot work."""

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        km = self.parent
        # only a fresh kernel on the TCP default: explicit ports, a loaded connection file, a restart keep theirs
        if km is not None and km.transport == "tcp" and not any(km.ports):
            folder = socket_dir()
            if folder is None:
                warnings.warn(f"{NAME}: no Unix sockets or no writable folder with socket paths under "
                              f"{MAX_SOCKET_PATH} bytes (set HUBNORM_KERNEL_SOCKET_DIR to a short folder); "
                              "this kernel uses TCP ports", RuntimeWarning, stacklevel=2)
            else:
                km.transport = "ipc"
                km.ip = _prefix_in(folder)
        return await super().pre_launch(**kwargs)


def install_kernelspec(prefix: Optional[str] = None, name: str = "python3") -> str:
    """Install this environment's ipykernel spec ``name`` under ``prefix`` (default: this environment,
    ``sys.prefix``) with the ``hubnorm-ipc`` provisioner named in its metadata; returns the spec's folder.
    Idempotent: a second call rewrites the same file."""
    from ipykernel.kernelspec import install

    if not isinstance(name, str) or not name or os.sep in name:
        raise ValueError(f"name must be a kernel name such as 'python3'; got {name!r}")
    folder = install(prefix=prefix or sys.prefix, kernel_name=name)
    path = os.path.join(folder, "kernel.json")
    with open(path, encoding="utf-8") as f:
        spec = json.load(f)
    spec.setdefault("metadata", {})["kernel_provisioner"] = {"provisioner_name": NAME, "config": {}}
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(spec, f, indent=1)
    os.replace(tmp, path)   # atomic: a Jupyter reading the folder meanwhile sees the old spec or the new one
    return folder


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hubnorm_tools.jupyter_ipc",
                                     description="Install this environment's Jupyter kernel with its channels on "
                                                 "Unix domain sockets (the hubnorm-ipc provisioner).")
    parser.add_argument("command", choices=["install-kernelspec"])
    parser.add_argument("--prefix", default=None, help="environment prefix (default: this Python's, sys.prefix)")
    parser.add_argument("--name", default="python3", help="kernel name (default: python3)")
    args = parser.parse_args(argv)
    print(install_kernelspec(args.prefix, args.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
