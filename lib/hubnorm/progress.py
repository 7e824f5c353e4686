"""Progress bars for long loops (tqdm, plain text on stderr, with the remaining-time estimate).

Plain-text bars work the same in a terminal, under papermill (``run_all.sh`` streams them to the log) and in
JupyterLab; they never write widget state into a notebook. Set ``HUBNORM_PROGRESS=0`` to silence them.
"""

from __future__ import annotations

import os
import sys

from tqdm.std import tqdm as _tqdm

__all__ = ["progress"]


def progress(iterable=None, *, desc: str = "", total=None, disable: bool = False, **kwargs):
    """``tqdm(iterable)`` on stderr: elapsed time, rate and an estimate of the time left, updated every 2 s."""
    if os.environ.get("HUBNORM_PROGRESS", "1") == "0":
        disable = True
    kwargs.setdefault("file", sys.stderr)
    kwargs.setdefault("mininterval", 2.0)
    kwargs.setdefault("ncols", 100)
    kwargs.setdefault("leave", False)
    kwargs.setdefault("dynamic_ncols", False)
    return _tqdm(iterable, desc=desc, total=total, disable=disable, **kwargs)
