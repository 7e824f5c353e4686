"""One-call set-up and the few display helpers every notebook shares.

>>> from hubnorm import notebook as nb
>>> run = nb.setup("01", seed=0)          # seeds, torch threads, float64, seaborn theme, inline figures
>>> nb.show(table)                        # a rendered table (HTML in Jupyter, aligned text elsewhere)
>>> run.save_figure(fig, "recall_vs_k")   # results/figures/01_recall_vs_k.png + .pdf (and shown inline)
>>> run.save_table(table, "main")         # results/tables/01_main.csv + .md
>>> nb.check("NNN raises R@1", ours > raw, f"{raw:.2f} -> {ours:.2f}")   # PASS/DIFFERS line

Reproducibility: :func:`setup` seeds numpy and torch and pins torch to a fixed number of threads; the notebooks
compute in float64 (a ranking flips only when two scores agree to about 1e-16, so a CPU's summation order is
very unlikely to matter) and print checked numbers rounded to 2 decimals (``tests/test_notebooks.py`` runs one
under other CPU-dispatch settings).
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field
from html import escape
from typing import Optional, Sequence

import numpy as np
import pandas as pd
import torch

from .progress import progress
from .reporting import results_dir

__all__ = ["setup", "Run", "show", "key_numbers", "check", "progress"]


@dataclass
class Run:
    """What :func:`setup` returns: the notebook's number prefix, seed and dtype, and where outputs go."""

    prefix: str
    seed: int = 0
    dtype: str = "float64"
    started: float = field(default_factory=time.perf_counter)

    def save_figure(self, fig, name: str, *, caption: Optional[str] = None) -> None:
        """Save ``fig`` as ``results/figures/<prefix>_<name>.png`` (150 dpi) and ``.pdf``; it stays shown inline."""
        out = results_dir("figures")
        stem = f"{self.prefix}_{name}"
        fig.savefig(out / f"{stem}.png", dpi=150, bbox_inches="tight")
        fig.savefig(out / f"{stem}.pdf", bbox_inches="tight")
        if caption:
            (out / f"{stem}.txt").write_text(caption.strip() + "\n")

    def save_table(self, df: pd.DataFrame, name: str, *, caption: Optional[str] = None, digits: int = 2) -> None:
        """Save ``df`` as ``results/tables/<prefix>_<name>.csv`` and ``.md`` (Markdown rounded to ``digits``)."""
        out = results_dir("tables")
        stem = f"{self.prefix}_{name}"
        df.to_csv(out / f"{stem}.csv", index=False)
        md = df.to_markdown(index=False, floatfmt=f".{digits}f")
        (out / f"{stem}.md").write_text((f"{caption.strip()}\n\n" if caption else "") + md + "\n")

    def elapsed(self) -> float:
        return time.perf_counter() - self.started


def setup(prefix: str, *, seed: int = 0, dtype: str = "float64", threads: Optional[int] = None,
          style: str = "whitegrid") -> Run:
    """Seed numpy and torch, pin torch to ``threads`` threads (default: ``$HUBNORM_THREADS``, else 2), quiet
    library warnings, set the seaborn theme and show figures inline. ``prefix`` is the notebook's number
    (figures and tables are saved under it); ``dtype`` is recorded as ``run.dtype`` for the notebook to pass on
    (``hubnorm.protocol.prepare_dataset(..., dtype=run.dtype)``)."""
    if not isinstance(prefix, str) or not prefix:
        raise ValueError(f"prefix must be the notebook's number as a string, e.g. '01'; got {prefix!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an integer; got {seed!r}")
    if dtype not in ("float32", "float64"):
        raise ValueError(f"dtype must be 'float32' or 'float64'; got {dtype!r}")
    np.random.seed(int(seed))
    torch.manual_seed(int(seed))
    if threads is None:
        env = os.environ.get("HUBNORM_THREADS", "2")
        if not env.isdigit() or int(env) < 1:
            raise ValueError(f"HUBNORM_THREADS must be a positive integer; got {env!r}")
        threads = int(env)
    if threads:
        torch.set_num_threads(int(threads))
    for category in (FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category)
    warnings.filterwarnings("ignore", message="IProgress not found")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _inline_figures()
    import seaborn as sns

    sns.set_theme(style=style, context="notebook")
    import matplotlib as mpl

    mpl.rcParams.update({"figure.dpi": 90, "savefig.dpi": 150, "figure.autolayout": False})
    return Run(prefix=prefix, seed=int(seed), dtype=dtype)


def _inline_figures() -> None:
    """Inside a Jupyter kernel, show figures inline whatever MPLBACKEND says (papermill, CI)."""
    try:
        from IPython import get_ipython
    except ImportError:  # plain Python: leave the backend alone
        return
    ip = get_ipython()
    if ip is not None and getattr(ip, "kernel", None) is not None:
        ip.run_line_magic("matplotlib", "inline")


class _Table:
    """A DataFrame that renders as an HTML table in Jupyter and as aligned text elsewhere (deterministic HTML)."""

    def __init__(self, df: pd.DataFrame, digits: int, caption: Optional[str]):
        self.df, self.digits, self.caption = df, digits, caption

    def _fmt(self, x):
        return f"{x:.{self.digits}f}"

    def _repr_html_(self) -> str:
        html = self.df.to_html(index=False, float_format=self._fmt, na_rep="-", border=0, classes="dataframe")
        cap = f"<p><em>{escape(self.caption)}</em></p>" if self.caption else ""
        return cap + html

    def __repr__(self) -> str:
        with pd.option_context("display.width", 200, "display.max_columns", 50, "display.max_colwidth", 60):
            text = self.df.to_string(index=False, float_format=self._fmt, na_rep="-")
        return (f"{self.caption}\n" if self.caption else "") + text


def show(df: pd.DataFrame, columns: Optional[Sequence[str]] = None, *, digits: int = 2,
         caption: Optional[str] = None):
    """Display a table (floats rounded to ``digits``); in a notebook it renders as a table."""
    d = df if columns is None else df[list(columns)]
    try:
        from IPython.display import display
    except ImportError:
        print(repr(_Table(d, digits, caption)))
        return None
    display(_Table(d, digits, caption))
    return None


def key_numbers(df: pd.DataFrame, columns: Optional[Sequence[str]] = None, *, digits: int = 2) -> None:
    """Print the key numbers of a run as plain text (the cells nbval compares): floats rounded to ``digits``."""
    d = df if columns is None else df[list(columns)]
    with pd.option_context("display.width", 200, "display.max_columns", 50, "display.max_colwidth", 60):
        print(d.to_string(index=False, float_format=lambda x: f"{x:.{digits}f}", na_rep="-"))


def check(claim: str, ok: bool, detail: str = "") -> None:
    """Print ``PASS: claim [detail]`` or ``DIFFERS: claim [detail]``: a paper's qualitative claim, tested on
    this run's numbers (never hard-coded)."""
    print(f"{'PASS' if bool(ok) else 'DIFFERS'}: {claim}" + (f" [{detail}]" if detail else ""))
