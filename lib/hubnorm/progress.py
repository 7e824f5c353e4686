"""Progress bars for long loops (tqdm, plain text, with the remaining-time estimate).

Where a bar goes:

- ``HUBNORM_PROGRESS=0`` (or any off value of :func:`hubnorm._env.env_switch`: false, no, off): nowhere (silenced);
- ``HUBNORM_PROGRESS_FILE=<path>``: appended to that file, never to the notebook cell. ``run_all.sh`` sets it for
  every notebook and streams the file to the terminal while the notebook runs, so the executed copies it writes
  (``results/notebooks/*.ipynb``) carry no progress lines in their cell outputs;
- otherwise: stderr, which in JupyterLab is the cell's output (plain text, never widget state).
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import Dict, TextIO

from tqdm.std import tqdm as _tqdm

from ._env import env_switch

__all__ = ["progress", "progress_stream"]

_FILES: Dict[str, TextIO] = {}


def _close_files() -> None:
    for fh in _FILES.values():
        try:
            fh.close()
        except OSError:  # pragma: no cover - closing at exit
            pass
    _FILES.clear()


atexit.register(_close_files)


def progress_stream() -> TextIO:
    """The stream progress bars write to: the file named by ``HUBNORM_PROGRESS_FILE`` (opened once, appended,
    flushed by tqdm after every update), else ``sys.stderr``."""
    path = os.environ.get("HUBNORM_PROGRESS_FILE", "")
    if not path:
        return sys.stderr
    fh = _FILES.get(path)
    if fh is None or fh.closed:
        try:
            fh = open(path, "a", encoding="utf-8")
        except OSError as err:
            raise ValueError(f"HUBNORM_PROGRESS_FILE={path!r} cannot be opened for appending ({err}): point it at a "
                             "writable file or unset it") from err
        _FILES[path] = fh
    return fh


def progress(iterable=None, *, desc: str = "", total=None, disable: bool = False, **kwargs):
    """``tqdm(iterable)``: elapsed time, rate and an estimate of the time left, updated every 2 s, on
    :func:`progress_stream` (a side file under ``run_all.sh``, else stderr)."""
    if not env_switch("HUBNORM_PROGRESS", default=True):
        disable = True
    to_file = bool(os.environ.get("HUBNORM_PROGRESS_FILE")) and "file" not in kwargs
    if not disable:
        kwargs.setdefault("file", progress_stream())
    kwargs.setdefault("mininterval", 2.0)
    kwargs.setdefault("ncols", 100)
    # in a side file the last state (100%, elapsed time) stays as a line of its own; in a cell the bar clears
    kwargs.setdefault("leave", to_file)
    kwargs.setdefault("dynamic_ncols", False)
    return _tqdm(iterable, desc=desc, total=total, disable=disable, **kwargs)
