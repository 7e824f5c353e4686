"""``hubnorm_tools.jupyter_ipc`` in small pieces, without starting a kernel (``tests/test_jupyter_ipc.py`` starts
real ones): ``_prefix_in``'s shape; :func:`socket_dir` choosing the first usable parent in order (the variable, the
temporary folder, /tmp), skipping an empty, missing or too long one (the length rule at its boundary, the rejected
folder removed), cached per process (also when there is none), None without Unix sockets, its folder private and
registered for removal; ``IPCProvisioner.pre_launch`` switching a fresh TCP kernel to IPC, leaving explicit ports,
IPC and no manager alone, and warning (at its caller) when there is no folder; :func:`install_kernelspec` with
ipykernel's ``install`` replaced by a recorder (its name guard by message, the prefix default, the metadata added to
what was there, the file rewritten whole with no temporary left); :func:`main`'s arguments and help.

Survivors judged equivalent (no test can tell them apart):
- ``warnings.warn(..., stacklevel=2)`` -> ``stacklevel=3``: under mutmut a trampoline frame sits between
  ``pre_launch`` and its caller, so level 2 names the trampoline and level 3 this file; the check here (the warning
  is not attributed to the module itself) holds for both. Outside mutmut level 2 is this file.
- ``encoding="utf-8"`` dropped, ``None`` or ``"UTF-8"`` in :func:`install_kernelspec`'s two ``open`` calls (6
  mutants: the same codec, or the locale's, which is UTF-8 where the tests run; the spec is ASCII).
- :func:`main`: ``default=None`` dropped from ``--prefix`` (``None`` is argparse's default).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import stat
import sys
import tempfile
import warnings

import pytest

pytest.importorskip("jupyter_client")

from traitlets.config import Configurable  # noqa: E402

from hubnorm_tools import jupyter_ipc  # noqa: E402
from hubnorm_tools.jupyter_ipc import IPCProvisioner  # noqa: E402


@pytest.fixture
def short(monkeypatch):
    """A short folder under /tmp (removed afterwards), the module's cache cleared, at-exit removals recorded."""
    base = tempfile.mkdtemp(prefix="hnu-", dir="/tmp")
    monkeypatch.setattr(jupyter_ipc, "_socket_dir", None)
    monkeypatch.setattr(jupyter_ipc, "_socket_dir_pid", None)
    registered = []
    monkeypatch.setattr(jupyter_ipc.atexit, "register", lambda f, *a, **k: registered.append((f, a, k)))
    monkeypatch.delenv("HUBNORM_KERNEL_SOCKET_DIR", raising=False)
    made = []
    real = tempfile.mkdtemp

    def mkdtemp(*a, **k):
        made.append(real(*a, **k))
        return made[-1]
    monkeypatch.setattr(jupyter_ipc.tempfile, "mkdtemp", mkdtemp)
    yield base, registered, made
    shutil.rmtree(base, ignore_errors=True)
    for m in made:
        if m.startswith("/tmp/hnk-"):
            shutil.rmtree(m, ignore_errors=True)


def _padded(base, length):
    """A folder under ``base`` whose path has exactly ``length`` characters."""
    path = os.path.join(base, "p" * (length - len(base) - 1))
    os.mkdir(path)
    assert len(path) == length
    return path


# ---------------------------------------------------------------------------------------------------- socket paths
def test_prefix_in_is_the_folder_and_12_hex_characters():
    a, b = jupyter_ipc._prefix_in("/x/y"), jupyter_ipc._prefix_in("/x/y")
    assert a.startswith("/x/y/") and len(a) == len("/x/y/") + 12 and a != b
    int(a[5:], 16)


def test_socket_dir_uses_the_variable_first_private_cached_and_removed_at_exit(short, monkeypatch):
    base, registered, made = short
    monkeypatch.setenv("HUBNORM_KERNEL_SOCKET_DIR", base)
    folder = jupyter_ipc.socket_dir()
    assert os.path.dirname(folder) == base and os.path.basename(folder).startswith("hnk-")
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert registered == [(shutil.rmtree, (folder,), {"ignore_errors": True})]
    assert jupyter_ipc.socket_dir() == folder and made == [folder]          # cached: no second folder
    monkeypatch.setattr(jupyter_ipc.os, "getpid", lambda: -7)                # another process (a fork): its own
    other = jupyter_ipc.socket_dir()
    assert other != folder and os.path.dirname(other) == base and len(made) == 2


def test_socket_dir_skips_an_empty_or_missing_variable_for_the_temporary_folder(short, monkeypatch):
    base, registered, made = short
    monkeypatch.setattr(tempfile, "tempdir", base)
    for value in ("", os.path.join(base, "missing")):
        monkeypatch.setattr(jupyter_ipc, "_socket_dir", None)
        monkeypatch.setenv("HUBNORM_KERNEL_SOCKET_DIR", value)
        folder = jupyter_ipc.socket_dir()
        assert os.path.dirname(folder) == base
    monkeypatch.setattr(jupyter_ipc, "_socket_dir", None)
    monkeypatch.delenv("HUBNORM_KERNEL_SOCKET_DIR")
    assert os.path.dirname(jupyter_ipc.socket_dir()) == base


def test_socket_dir_length_rule_at_its_boundary(short, monkeypatch):
    # socket path: parent + "/hnk-" + 8 characters + "/" + 12 hex + "-99999" = len(parent) + 32 <= 100
    base, registered, made = short
    ok, long = _padded(base, 68), _padded(base, 69)
    monkeypatch.setattr(tempfile, "tempdir", ok)
    monkeypatch.setenv("HUBNORM_KERNEL_SOCKET_DIR", long)
    folder = jupyter_ipc.socket_dir()
    assert os.path.dirname(folder) == ok and len(jupyter_ipc._prefix_in(folder) + "-99999") == 100
    assert len(made) == 2 and os.path.dirname(made[0]) == long and not os.path.exists(made[0])   # tried, removed
    assert os.listdir(long) == [] and len(registered) == 1


def test_socket_dir_falls_back_to_tmp_then_to_none(short, monkeypatch):
    base, registered, made = short
    long = _padded(base, 90)
    monkeypatch.setattr(tempfile, "tempdir", long)
    monkeypatch.setenv("HUBNORM_KERNEL_SOCKET_DIR", long)
    folder = jupyter_ipc.socket_dir()
    assert os.path.dirname(folder) == "/tmp" and len(made) == 3 and os.listdir(long) == []
    monkeypatch.setattr(jupyter_ipc, "_socket_dir", None)
    monkeypatch.setattr(jupyter_ipc, "MAX_SOCKET_PATH", 20)
    assert jupyter_ipc.socket_dir() is None
    assert len(made) == 6 and not any(os.path.exists(m) for m in made[3:]) and len(registered) == 1
    assert jupyter_ipc.socket_dir() is None and len(made) == 6                # known to be none: not tried again


def test_socket_dir_is_none_without_unix_sockets(short, monkeypatch):
    base, registered, made = short
    monkeypatch.setenv("HUBNORM_KERNEL_SOCKET_DIR", base)
    monkeypatch.delattr(socket, "AF_UNIX", raising=False)
    assert jupyter_ipc.socket_dir() is None and made == [] and registered == []


# --------------------------------------------------------------------------------------------------- the provisioner
class _Manager(Configurable):
    def __init__(self, transport="tcp", ports=(0, 0, 0, 0, 0)):
        super().__init__()
        self.transport, self.ip, self.ports = transport, "127.0.0.1", list(ports)


@pytest.fixture
def launch(monkeypatch):
    """pre_launch run from a coroutine of this file, LocalProvisioner's own pre_launch replaced by a recorder."""
    calls = []

    async def base_pre_launch(self, **kwargs):
        calls.append(kwargs)
        return {"launched": True}
    monkeypatch.setattr(jupyter_ipc.LocalProvisioner, "pre_launch", base_pre_launch)

    def run(km):
        prov = IPCProvisioner(kernel_id="k", kernel_spec=None, parent=km)

        async def go():
            return await prov.pre_launch(cmd=["x"])
        assert asyncio.run(go()) == {"launched": True}
        assert calls[-1] == {"cmd": ["x"]}
    return run


def test_a_fresh_tcp_kernel_goes_to_ipc(launch, monkeypatch):
    monkeypatch.setattr(jupyter_ipc, "socket_dir", lambda: "/s/d")
    km = _Manager()
    launch(km)
    assert km.transport == "ipc" and km.ip.startswith("/s/d/") and len(km.ip) == len("/s/d/") + 12


@pytest.mark.parametrize("transport, ports", [("tcp", (5000, 0, 0, 0, 0)), ("tcp", (0, 0, 0, 0, 1)),
                                              ("ipc", (0, 0, 0, 0, 0))])
def test_explicit_ports_or_ipc_are_left_alone(transport, ports, launch, monkeypatch):
    monkeypatch.setattr(jupyter_ipc, "socket_dir", lambda: pytest.fail("socket_dir consulted"))
    km = _Manager(transport, ports)
    launch(km)
    assert (km.transport, km.ip, km.ports) == (transport, "127.0.0.1", list(ports))


def test_no_manager_just_launches(launch, monkeypatch):
    monkeypatch.setattr(jupyter_ipc, "socket_dir", lambda: pytest.fail("socket_dir consulted"))
    launch(None)


def test_no_folder_warns_at_the_caller_and_stays_on_tcp(launch, monkeypatch):
    monkeypatch.setattr(jupyter_ipc, "socket_dir", lambda: None)
    km = _Manager()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        launch(km)
    assert (km.transport, km.ip) == ("tcp", "127.0.0.1")
    assert [w.category for w in caught] == [RuntimeWarning]
    assert str(caught[0].message) == ("hubnorm-ipc: no Unix sockets or no writable folder with socket paths under 100 "
                                      "bytes (set HUBNORM_KERNEL_SOCKET_DIR to a short folder); this kernel uses TCP "
                                      "ports")
    # stacklevel=2: the awaiting code (this file; under mutmut, its trampoline in between), not the module itself
    assert os.path.basename(caught[0].filename) != "jupyter_ipc.py"


# ------------------------------------------------------------------------------------------------- the kernel spec
@pytest.fixture
def installs(monkeypatch, tmp_path):
    """ipykernel's install replaced: writes a kernel.json (with ``spec_metadata``) and records its arguments."""
    import ipykernel.kernelspec
    calls = []
    state = {"metadata": None}

    def install(prefix=None, kernel_name=None):
        calls.append((prefix, kernel_name))
        folder = tmp_path / "share" / kernel_name
        folder.mkdir(parents=True, exist_ok=True)
        spec = {"argv": ["python", "-m", "ipykernel"], "display_name": "Python 3", "language": "python"}
        if state["metadata"] is not None:
            spec["metadata"] = dict(state["metadata"])
        (folder / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
        return str(folder)
    monkeypatch.setattr(ipykernel.kernelspec, "install", install)
    return calls, state


@pytest.mark.parametrize("name", ["", 3, None, f"a{os.sep}b"])
def test_install_kernelspec_refuses_a_bad_name(name, installs):
    with pytest.raises(ValueError, match=r"^name must be a kernel name such as 'python3'; got "):
        jupyter_ipc.install_kernelspec(name=name)
    assert installs[0] == []


def test_install_kernelspec_names_the_provisioner(installs):
    calls, state = installs
    folder = jupyter_ipc.install_kernelspec()
    assert calls == [(sys.prefix, "python3")]
    assert os.listdir(folder) == ["kernel.json"]                                 # no temporary left
    text = open(os.path.join(folder, "kernel.json"), encoding="utf-8").read()
    spec = json.loads(text)
    assert spec == {"argv": ["python", "-m", "ipykernel"], "display_name": "Python 3", "language": "python",
                    "metadata": {"kernel_provisioner": {"provisioner_name": "hubnorm-ipc", "config": {}}}}
    assert text == json.dumps(spec, indent=1)
    assert jupyter_ipc.install_kernelspec("", "python3") == folder and calls[-1] == (sys.prefix, "python3")


def test_install_kernelspec_keeps_other_metadata_and_the_given_prefix(installs, tmp_path):
    calls, state = installs
    state["metadata"] = {"debugger": True, "kernel_provisioner": {"provisioner_name": "other"}}
    folder = jupyter_ipc.install_kernelspec(str(tmp_path / "env"), "hub")
    assert calls == [(str(tmp_path / "env"), "hub")] and folder.endswith(os.sep + "hub")
    spec = json.load(open(os.path.join(folder, "kernel.json"), encoding="utf-8"))
    assert spec["metadata"] == {"debugger": True,
                                "kernel_provisioner": {"provisioner_name": "hubnorm-ipc", "config": {}}}


# ----------------------------------------------------------------------------------------------------------- main
def test_main_passes_its_arguments(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(jupyter_ipc, "install_kernelspec", lambda prefix, name: calls.append((prefix, name)) or "/k")
    assert jupyter_ipc.main(["install-kernelspec"]) == 0
    assert jupyter_ipc.main(["install-kernelspec", "--prefix", "/env", "--name", "hub"]) == 0
    assert calls == [(None, "python3"), ("/env", "hub")]
    assert capsys.readouterr().out == "/k\n/k\n"


def test_main_refuses_another_command_and_explains_itself(capsys):
    with pytest.raises(SystemExit) as e:
        jupyter_ipc.main([])
    assert e.value.code == 2 and "the following arguments are required: command" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        jupyter_ipc.main(["install"])
    assert e.value.code == 2 and "invalid choice: 'install'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        jupyter_ipc.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("usage: python -m hubnorm_tools.jupyter_ipc [-h]")
    for text in ["Install this environment's Jupyter kernel with its channels on Unix domain sockets (the "
                 "hubnorm-ipc provisioner).", "{install-kernelspec}",
                 "--prefix PREFIX environment prefix (default: this Python's, sys.prefix)",
                 "--name NAME kernel name (default: python3)"]:
        assert text in out
