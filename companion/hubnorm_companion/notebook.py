"""One-call set-up and the few display helpers every notebook shares.

>>> from hubnorm_companion import notebook as nb
>>> run = nb.setup("01", seed=0)          # seeds, torch threads, float64, seaborn theme, inline figures
>>> nb.show(table)                        # a rendered table (HTML in Jupyter, aligned text elsewhere)
>>> run.save_figure(fig, "recall_vs_k", data=label, bank=table["bank"])   # results/figures/01_recall_vs_k.png,
>>>                                       # .pdf and .json (what it was drawn from), and shown inline
>>> run.save_table(table, "main")         # results/tables/01_main.csv + .md
>>> nb.check("NNN raises R@1", ours > raw, f"{raw:.2f} -> {ours:.2f}")   # PASS/DIFFERS line
>>> nb.notice(f"NNN {nb.change(raw, ours, 'R@1')}.")    # "NNN raises R@1 from 60.04 to 66.42." (words from numbers)

Sentences a notebook states about its own results are generated (:func:`notice` with :func:`change`,
:func:`order_word`, :func:`changes`): every number and every order word (raises / lowers, beats, longer /
shorter, ...) is picked from the run's values, so the text stays true on any data. Fixed Markdown says what to
look at, or what a paper reports (attributed); ``tests/test_notebooks.py`` checks that.

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
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import pandas as pd
import torch

from hubnorm.progress import progress
from hubnorm.provenance import QUERY_AWARE, clear_ledger, unmarked_query_aware
from .reporting import CLAIM_COLUMNS, results_dir

__all__ = ["setup", "Run", "show", "key_numbers", "check", "checks", "check_summary", "data_label", "CLAIM_COLUMNS",
           "marks_note", "parameters_cell",
           "notice", "order_word",
           "change", "changes", "trends", "names", "ranking", "tally", "recall_noise", "progress"]

#: The PASS/DIFFERS lines printed since the last :func:`setup`: (claim, passed).
_CHECKS: List[Tuple[str, bool]] = []

#: Where :func:`check` records its lines (set by :func:`setup`), and the label of the data they are about
#: (:func:`data_label`).
_RECORD: Dict[str, object] = {"file": None, "prefix": None, "data": None}


@dataclass
class Run:
    """What :func:`setup` returns: the notebook's number prefix, seed and dtype, and where outputs go."""

    prefix: str
    seed: int = 0
    dtype: str = "float64"
    started: float = field(default_factory=time.perf_counter)
    #: the papers' numbered tables and figures this notebook reproduces, ``{paper id: ["Table 1", "Fig. 2", ...]}``
    #: (its own declaration: README's coverage table is generated from it, ``site/hubsite.py sync``)
    reproduces: Dict[str, List[str]] = field(default_factory=dict)

    def save_figure(self, fig, name: str, *, caption: Optional[str] = None, data=None, bank=None) -> None:
        """Save ``fig`` as ``results/figures/<prefix>_<name>.png`` (150 dpi) and ``.pdf``; it stays shown inline.

        Every saved figure says what its numbers saw, as every saved table does: ``data``, the data it was drawn
        from, and ``bank``, the marks of its normalizers' banks (:func:`hubnorm.provenance.bank_mark`); each a label
        or a sequence of them (a table's ``data`` / ``bank`` column, e.g. ``bank=table["bank"]``). They are written
        beside the figure (``<stem>.json``, with the caption) and into the PNG's and PDF's metadata, and checked
        (:func:`figure_provenance`): a figure with a query-aware result must say "query-aware" where a reader sees
        it (on the figure or in its caption) and one drawn from synthetic data must say "synthetic" (an error
        under ``HUBNORM_FIGURE_CHECK=error``, the test suite's setting; otherwise the caption gets the marks it
        lacks and a NOTE says so); one that draws an R@K value only a query-aware fit of this run produced must be
        marked query-aware (a ValueError in every mode, naming the fix).

        Then the figure is tidied and its layout checked (:mod:`hubnorm_companion.figures`: a legend over data
        moves beside the axes, zero bars get a mark, overlapping texts are laid out again); a problem that remains
        (text over text, a legend over data, an invisible bar) is printed as a NOTE, or raised with
        ``HUBNORM_FIGURE_CHECK=error`` (the test suite's setting)."""
        from .figures import CHECK_ENV, check_mode, layout_problems, tidy

        record = figure_provenance(fig, name, data=data, bank=bank, caption=caption)
        caption = record["caption"]   # with the marks it lacked, outside the test suite's error mode
        out = results_dir("figures")
        stem = f"{self.prefix}_{name}"
        mode = check_mode()
        if mode != "off":
            tidy(fig)
            problems = layout_problems(fig)
            if problems:
                msg = (f"figure {stem}: {len(problems)} layout problem(s) remain: " + "; ".join(problems[:5])
                       + ("; ..." if len(problems) > 5 else ""))
                if mode == "error":
                    raise ValueError(f"{msg} ({CHECK_ENV}=error; fix the figure's code)")
                print(f"NOTE: {msg}")
        said = f"data: {'; '.join(record['data'])}. bank: {', '.join(record['bank'])}"
        fig.savefig(out / f"{stem}.png", dpi=150, bbox_inches="tight", metadata={"Description": said})
        fig.savefig(out / f"{stem}.pdf", bbox_inches="tight", metadata={"Subject": said})
        caption_file = out / f"{stem}.txt"
        if caption:
            caption_file.write_text(caption.strip() + "\n")
        elif caption_file.exists():   # an earlier run's caption is not this figure's
            caption_file.unlink()
        _write_json(out / f"{stem}.json", {"figure": stem, **record})

    def save_table(self, df: pd.DataFrame, name: str, *, caption: Optional[str] = None, digits: int = 2,
                   data: Optional[str] = None, bank: Optional[str] = None) -> None:
        """Save ``df`` as ``results/tables/<prefix>_<name>.csv`` and ``.md`` (Markdown rounded to ``digits``).

        Every saved table says what its numbers saw (:data:`PROVENANCE_COLUMNS`): ``data``, the data they were
        computed on (a ``data`` column, or the ``run`` column of a :mod:`~hubnorm_companion.compare` table, or
        the ``data=`` label for all rows), and ``bank``, what the normalizer's banks were: the marks of
        :func:`hubnorm.provenance.bank_mark` that ``hubnorm.evaluate`` returns (a ``bank`` column, or ``bank=`` for
        all rows, e.g. "none" for a table of raw scores or timings). ValueError when either is missing, and when a
        row shows an R@K value that only a query-aware fit of this run produced without "QUERY-AWARE" in its
        ``bank`` (:func:`hubnorm.provenance.unmarked_query_aware`)."""
        df = with_provenance(df, name, data=data, bank=bank)
        out = results_dir("tables")
        stem = f"{self.prefix}_{name}"
        df.to_csv(out / f"{stem}.csv", index=False)
        md = df.to_markdown(index=False, floatfmt=f".{digits}f")
        (out / f"{stem}.md").write_text((f"{caption.strip()}\n\n" if caption else "") + md + "\n")

    def save_gains(self, gains: pd.DataFrame, name: str = "gains", *, caption: Optional[str] = None) -> None:
        """Save a :func:`hubnorm_companion.compare.gains` table as ``results/tables/<prefix>_<name>.csv`` / ``.md``
        (``name`` starts with "gains"): ``run_all.sh`` gathers every such table into ``results/SUMMARY.md``."""
        if not name.startswith("gains"):
            raise ValueError(f"name must start with 'gains' (what run_all.sh's summary gathers); got {name!r}")
        self.save_table(gains, name, caption=caption)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started


#: the columns every saved table carries (:meth:`Run.save_table`)
PROVENANCE_COLUMNS = ("data", "bank")


def with_provenance(df: pd.DataFrame, name: str, *, data: Optional[str] = None,
                    bank: Optional[str] = None) -> pd.DataFrame:
    """``df`` with its provenance columns (:meth:`Run.save_table`'s rules), checked; a copy when one is added."""
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"table {name!r} must be a pandas DataFrame; got {type(df).__name__}")
    for col, value in (("data", data), ("bank", bank)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ValueError(f"{col}= must be a non-empty label for every row of table {name!r}; got {value!r}")
        has = col in df.columns or (col == "data" and "run" in df.columns)
        if has and value is not None:
            raise ValueError(f"table {name!r} has a {col!r} column and {col}={value!r} was also given: keep one")
        if not has and value is None:
            hint = ("the data set label, e.g. data=label" if col == "data" else
                    "the bank column hubnorm.evaluate returns (result['bank']), or bank='none' for a table with "
                    "no normalized number")
            raise ValueError(f"table {name!r} has no {col!r} column: every saved table says {' and '.join(PROVENANCE_COLUMNS)} "
                             f"(hubnorm_companion.notebook.PROVENANCE_COLUMNS); add the column or pass {hint}")
        if value is not None:
            df = df.assign(**{col: value})
    unmarked = unmarked_query_aware(df)
    if unmarked:
        raise ValueError(f"table {name!r} shows numbers only a query-aware fit produced, in rows not marked "
                         f"{QUERY_AWARE!r} in their bank column: " + "; ".join(unmarked[:5])
                         + ". Carry the bank mark hubnorm.evaluate returns (result['bank']) into the row")
    return df


def _labels(value, what: str, name: str) -> List[str]:
    """A label or a sequence of labels (a table column) as its distinct labels, in first-seen order."""
    if isinstance(value, str):
        value = [value]
    elif isinstance(value, (pd.DataFrame, Mapping)):
        raise TypeError(f"figure {name!r}: {what}= must be a label or a sequence of labels (one column, e.g. "
                        f"table[{what!r}]); got a {type(value).__name__}")
    elif value is None or not hasattr(value, "__iter__"):
        raise ValueError(f"figure {name!r}: {what}= is required, a label or a sequence of labels (e.g. a table's "
                         f"{what!r} column); got {value!r}. " + (
                             "Pass the data set label, e.g. data=label" if what == "data" else
                             "Pass the bank marks of what it draws (result['bank'] of hubnorm.evaluate, a table's "
                             "bank column), or bank='none' for a figure with no normalized number"))
    labels = []
    for v in value:
        if not isinstance(v, str) or not v.strip():
            raise ValueError(f"figure {name!r}: every {what} label must be a non-empty string; got {v!r}")
        if v.strip() not in labels:
            labels.append(v.strip())
    if not labels:
        raise ValueError(f"figure {name!r}: {what}= has no label; pass at least one")
    return labels


def marks_note(bank) -> str:
    """A sentence for a caption naming the bank marks of what a figure or table shows, when one says query-aware
    (else ""): ``caption=f"...; {label}. " + nb.marks_note(table["bank"])``."""
    labels = _labels(bank, "bank", "marks_note")
    if not any(QUERY_AWARE.lower() in b.lower() for b in labels):
        return ""
    return (f"Bank marks: {', '.join(labels)} (QUERY-AWARE: a test query or test target, or a near copy of one, is "
            "in a bank the normalizer saw).")


def figure_provenance(fig, name: str, *, data, bank, caption: Optional[str] = None,
                      mode: Optional[str] = None) -> Dict[str, object]:
    """The provenance record of a figure (:meth:`Run.save_figure`), checked: ``{"data": [...], "bank": [...],
    "caption": ...}``. ValueError when ``data`` or ``bank`` is missing, and when the figure draws an R@K value only
    a query-aware fit of this run produced while no bank says query-aware
    (:func:`hubnorm.provenance.only_query_aware`). When a bank says query-aware (or a data label says synthetic)
    and neither the figure's texts nor the caption say so, ``mode`` (default ``$HUBNORM_FIGURE_CHECK``) decides:
    "error" raises (the test suite's setting: the notebooks' own figures must say it); otherwise the caption gets
    the marks it lacks, and "note" prints a NOTE under the figure, so data that turns out query-aware (a near copy
    of a test caption in a user's bank) never stops a notebook and never goes unsaid."""
    from hubnorm.provenance import only_query_aware
    from .figures import CHECK_ENV, check_mode, plotted_values, shown_words

    mode = check_mode() if mode is None else mode
    data, bank = _labels(data, "data", name), _labels(bank, "bank", name)
    seen = (shown_words(fig) + "\n" + (caption or "")).lower()
    aware = any(QUERY_AWARE.lower() in b.lower() for b in bank)
    aware_unsaid = aware and QUERY_AWARE.lower() not in seen
    synthetic_unsaid = any("synthetic" in d.lower() for d in data) and "synthetic" not in seen
    unsaid = ([marks_note(bank)] if aware_unsaid else []) + ([f"Data: {'; '.join(data)}."] if synthetic_unsaid else [])
    if unsaid:
        if mode == "error":
            what = " and ".join(w for w, u in (("query-aware results", aware_unsaid),
                                               ("synthetic data", synthetic_unsaid)) if u)
            raise ValueError(f"figure {name!r} shows {what} but says so nowhere a reader sees ({CHECK_ENV}=error): "
                             "put 'query-aware' (the bank marks) or the data label (it says 'synthetic') in its "
                             "title, legend or caption")
        caption = " ".join(([caption.strip()] if caption else []) + unsaid)
        if mode == "note":
            print(f"NOTE: figure {name}: " + " ".join(unsaid))
    if not aware:
        # whole numbers are left out: bin counts, tick positions and axes-fraction extents are whole, and a whole
        # R@K is rare enough that it cannot be told from them
        drawn = [v for v in np.unique(plotted_values(fig)) if v != np.round(v) and only_query_aware(v)]
        if drawn:
            raise ValueError(f"figure {name!r} draws R@K values only a query-aware fit of this run produced "
                             f"({', '.join(f'{v:.4g}' for v in drawn[:5])}) but its bank={bank} does not say "
                             "query-aware: pass the bank marks of what it draws")
    return {"data": data, "bank": bank, "caption": caption.strip() if caption else None}


def _write_json(path, record) -> None:
    """Write ``record`` as JSON to ``path`` atomically (:func:`hubnorm.data.cache.atomic_write_bytes`)."""
    import json

    from hubnorm.data.cache import atomic_write_bytes

    atomic_write_bytes(path, (json.dumps(record, indent=1, ensure_ascii=False) + "\n").encode("utf-8"))


def setup(prefix: str, *, seed: int = 0, dtype: str = "float64", threads: Optional[int] = None,
          style: str = "whitegrid", params: Optional[Mapping[str, object]] = None,
          reproduces: Optional[Mapping[str, Sequence[str]]] = None) -> Run:
    """Seed numpy and torch, pin torch to ``threads`` threads (default: ``$HUBNORM_THREADS``, else 2), quiet
    library warnings, set the seaborn theme and show figures inline. ``prefix`` is the notebook's number
    (figures and tables are saved under it); ``dtype`` is recorded as ``run.dtype`` for the notebook to pass on
    (``hubnorm_companion.protocol.prepare_dataset(..., dtype=run.dtype)``). ``params`` (the notebook's ``globals()``):
    every parameter of the notebook's parameters cell (:func:`parameters_cell`) is checked first against the rule its
    line declares (:mod:`hubnorm_companion.parameters`), so a bad value stops the notebook at its top with an error
    naming the parameter and the fix. ``reproduces``: the
    papers' numbered tables and figures the notebook computes, ``{paper id: ["Table 1", "Fig. 2", ...]}`` (the
    notebook's declaration, read by ``site/hubsite.py sync`` for README's coverage table)."""
    if not isinstance(prefix, str) or not prefix:
        raise ValueError(f"prefix must be the notebook's number as a string, e.g. '01'; got {prefix!r}")
    reproduces = {} if reproduces is None else reproduces
    if not isinstance(reproduces, Mapping) or not all(
            isinstance(k, str) and isinstance(v, (list, tuple)) and v and all(isinstance(i, str) for i in v)
            for k, v in reproduces.items()):
        raise TypeError("reproduces must map a paper id to a non-empty list of its items, e.g. "
                        f"{{'nnn-chowdhury2024': ['Table 1', 'Fig. 2']}}; got {reproduces!r}")
    if params is not None:
        from .parameters import validate

        validate(prefix, parameters_cell(params, prefix), params)
        _direct_run_results(prefix, params)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an integer; got {seed!r}")
    if dtype not in ("float32", "float64"):
        raise ValueError(f"dtype must be 'float32' or 'float64'; got {dtype!r}")
    np.random.seed(int(seed))
    torch.manual_seed(int(seed))
    _CHECKS.clear()
    clear_ledger()   # this notebook's query-aware results only (hubnorm.provenance.unmarked_query_aware)
    for stale in results_dir("tables").glob(f"{prefix}_gains*.csv"):   # this run's gains only (save_gains writes
        stale.unlink()                                                   # them again)
    claims = results_dir("claims") / f"{prefix}.csv"   # this run's lines only: an earlier run's go
    pd.DataFrame(columns=CLAIM_COLUMNS).to_csv(claims, index=False)
    _RECORD.update(file=claims, prefix=prefix, data=None)
    if threads is None:
        threads = env_threads()
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
    return Run(prefix=prefix, seed=int(seed), dtype=dtype, reproduces={k: list(v) for k, v in reproduces.items()})


def parameters_cell(namespace: Mapping[str, object], prefix: Optional[str] = None) -> str:
    """The source of the parameters cell of the notebook whose ``globals()`` is ``namespace`` (notebook ``prefix``).

    In an IPython kernel (papermill, JupyterLab, Colab) ``_ih`` (also ``In``) holds the source of every cell run so
    far: the parameters cell is the most recent one whose statements all assign a name and whose comments declare
    rules that parse (papermill's injected ``# Parameters`` cell has none and follows it; a cell edited and run again
    is the more recent). Outside IPython (``python NN_name.py``) it is the ``# %% tags=["parameters"]`` cell of
    ``namespace["__file__"]``. nbval runs cells without history (``store_history=False``), in the notebook's folder:
    there it is the cell tagged ``parameters`` of the one ``<prefix>_*.ipynb`` in the working folder. None of these:
    ValueError saying how to call ``nb.setup``."""
    import json
    from pathlib import Path

    from .parameters import cell_rules, is_parameters_cell, notebook_cell

    def declares(src) -> bool:
        if not isinstance(src, str) or not is_parameters_cell(src):
            return False
        try:
            return bool(cell_rules(src))
        except ValueError:
            return False

    cells = namespace.get("_ih") or namespace.get("In") or []
    found = next((src for src in reversed(cells) if declares(src)), None)
    if found is not None:
        return found
    if namespace.get("__file__"):
        return notebook_cell(Path(str(namespace["__file__"])).read_text(encoding="utf-8"))
    hits = sorted(Path.cwd().glob(f"{prefix}_*.ipynb")) if prefix else []
    if len(hits) == 1:
        cells = json.loads(hits[0].read_text(encoding="utf-8")).get("cells", [])
        tagged = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
        if tagged:
            src = tagged[0].get("source", "")
            return "".join(src) if isinstance(src, list) else src
    raise ValueError("nb.setup(..., params=globals()) reads the notebook's parameters cell from IPython's In (a "
                     f"notebook run in Jupyter or papermill), the one {prefix or 'NN'}_*.ipynb in the working folder "
                     "(nbval) or from __file__ (python NN_name.py); params has neither: pass the notebook's own "
                     "globals(), after running its parameters cell")


def injected_parameters(namespace: Mapping[str, object]) -> Dict[str, object]:
    """The parameters papermill injected into this kernel (its cell starting "# Parameters" among the cells run so
    far, IPython's ``In``), with their values now; {} outside papermill."""
    import ast

    for src in namespace.get("In") or []:
        if isinstance(src, str) and src.lstrip().startswith("# Parameters"):
            try:
                tree = ast.parse(src)
            except SyntaxError:
                return {}
            names = [t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                     if isinstance(t, ast.Name)]
            return {n: namespace.get(n) for n in names}
    return {}


def _direct_run_results(prefix: str, namespace: Mapping[str, object]) -> None:
    """A notebook run by papermill with parameters, outside ``run_all.sh`` (no ``$HUBNORM_RESULTS``), writes into
    ``results/params-<changed parameters>/`` with a manifest, never beside the default run's outputs."""
    injected = injected_parameters(namespace)
    if not injected or os.environ.get("HUBNORM_RESULTS"):
        return
    from .reporting import results_dir, run_folder_name, write_manifest

    folder = results_dir() / f"params-{run_folder_name(injected)}"
    write_manifest(folder, notebook=prefix, parameters=injected, changed=injected, command="papermill")
    os.environ["HUBNORM_RESULTS"] = str(folder)
    print(f"Parameters {', '.join(f'{k}={v!r}' for k, v in injected.items())}: this run's figures and tables go "
          f"to {folder}")


def env_threads(default: int = 2) -> int:
    """``$HUBNORM_THREADS`` (default ``default``), checked where it is read: an integer from 1 to 4 x the CPUs of
    this machine (more threads than that only oversubscribe the cores)."""
    env = os.environ.get("HUBNORM_THREADS", str(default)).strip()
    limit = 4 * (os.cpu_count() or 1)
    if not env.isdigit() or not 1 <= int(env) <= limit:
        raise ValueError(f"HUBNORM_THREADS must be an integer from 1 to {limit} (4 x the {os.cpu_count()} CPUs of "
                         f"this machine); got {env!r}: unset it or set e.g. HUBNORM_THREADS=2")
    return int(env)


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


def readable(value, digits: int = 4):
    """``value`` (numbers, or dicts / lists / tuples of them, nested) with every float given to ``digits`` significant
    digits, for printing: ``77.60000000000001`` -> ``77.6``, ``1.3877787807814457e-16`` -> ``1.388e-16``. Ints,
    bools, strings and other objects are kept; dict keys are rounded too (a parameter grid's 0.30000000000000004)."""
    if isinstance(digits, bool) or not isinstance(digits, int) or digits < 1:
        raise ValueError(f"digits must be a positive integer; got {digits!r}")
    if isinstance(value, (float, np.floating)):
        return float(f"{float(value):.{digits}g}")
    if isinstance(value, dict):
        return {readable(k, digits): readable(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(readable(v, digits) for v in value)
    return value


def key_numbers(df: pd.DataFrame, columns: Optional[Sequence[str]] = None, *, digits: int = 2) -> None:
    """Print the key numbers of a run as plain text (the cells nbval compares): floats rounded to ``digits``."""
    d = df if columns is None else df[list(columns)]
    with pd.option_context("display.width", 200, "display.max_columns", 50, "display.max_colwidth", 60):
        print(d.to_string(index=False, float_format=lambda x: f"{x:.{digits}f}", na_rep="-"))


def data_label(label: str) -> str:
    """Name the data the following :func:`check` lines are computed on (``protocol.run_label``: e.g. "synthetic
    analog (synthetic-flickr30k, seed 0)" or "real: COCO val2017, 500 pairs, CLIP ViT-B/16"); returns it."""
    if not isinstance(label, str) or not label.strip():
        raise ValueError(f"label must be a non-empty string naming the data; got {label!r}")
    _RECORD["data"] = label
    return label


def check(claim: str, ok: bool, detail: str = "", *, data: Optional[str] = None) -> None:
    """Print ``PASS: claim [detail]`` or ``DIFFERS: claim [detail]``: a paper's qualitative claim, tested on
    this run's numbers (never hard-coded). ``data`` names other data than the notebook's main run (a real set of
    the real column): the line then says so, ``PASS (real: ...): claim``. The line is also recorded for
    :func:`checks` and, with the data it was computed on (``data``, else the last :func:`data_label`), in
    ``results/claims/<prefix>.csv``."""
    _CHECKS.append((str(claim) if data is None else f"{claim} ({data})", bool(ok)))
    status = "PASS" if bool(ok) else "DIFFERS"
    print(f"{status}" + (f" ({data})" if data is not None else "") + f": {claim}" + (f" [{detail}]" if detail else ""))
    if _RECORD["file"] is not None:
        row = {"notebook": _RECORD["prefix"], "claim": str(claim), "status": status, "detail": str(detail),
               "data": data if data is not None else (_RECORD["data"] or "unnamed data")}
        pd.DataFrame([row], columns=CLAIM_COLUMNS).to_csv(_RECORD["file"], mode="a", header=False, index=False)


def checks() -> List[Tuple[str, bool]]:
    """The PASS/DIFFERS lines of this run so far, as ``(claim, passed)`` (reset by :func:`setup`)."""
    return list(_CHECKS)


def check_summary() -> None:
    """Print how many lines of this run say PASS and name the ones that say DIFFERS (for the discussion cells,
    which refer to the lines by this computed status instead of asserting it)."""
    lines = checks()
    differs = [claim for claim, ok in lines if not ok]
    print(f"{len(lines) - len(differs)} of {len(lines)} PASS/DIFFERS lines of this run say PASS.")
    if differs:
        print("They say DIFFERS:")
        for claim in differs:
            print(f"  - {claim}")
    else:
        print("No line says DIFFERS in this run.")


# ---------------------------------------------------------------------------------------------- generated text
def _cmp(a: float, b: float, digits: Optional[int], tol: float) -> int:
    """+1 when a > b, -1 when a < b, 0 when equal: compared as printed (rounded to ``digits``) and beyond ``tol``,
    so a sentence never says "raises from 60.04 to 60.04"."""
    a, b = float(a), float(b)
    if not (np.isfinite(a) and np.isfinite(b)):
        raise ValueError(f"cannot order non-finite values {a!r} and {b!r}")
    if digits is not None:
        a, b = round(a, digits), round(b, digits)
    d = a - b
    return 0 if abs(d) <= tol else (1 if d > 0 else -1)


def order_word(a: float, b: float, words: Sequence[str] = ("higher than", "lower than", "equal to"), *,
               digits: Optional[int] = 2, tol: float = 0.0) -> str:
    """The word for how ``a`` compares with ``b``: ``words[0]`` if ``a > b``, ``words[1]`` if ``a < b``,
    ``words[2]`` if they are equal (as printed with ``digits`` decimals, or within ``tol``).

    >>> order_word(67.3, 66.4, ("beats", "trails", "ties with"))
    'beats'
    """
    if len(words) != 3:
        raise ValueError(f"words must be three words (a > b, a < b, a == b); got {words!r}")
    return words[{1: 0, -1: 1, 0: 2}[_cmp(a, b, digits, tol)]]


def _num(x: float, digits: Optional[int], unit: str) -> str:
    return (f"{x:.{digits}f}" if digits is not None else f"{x:g}") + unit


def change(old: float, new: float, what: str = "", *, up: str = "raises", down: str = "lowers",
           same: str = "leaves", digits: Optional[int] = 2, unit: str = "", tol: float = 0.0) -> str:
    """A verb phrase for a change from ``old`` to ``new``, the verb picked from the numbers:
    ``"raises R@1 from 60.04 to 66.42"``, ``"lowers R@1 from 79.70 to 79.50"`` or ``"leaves R@1 at 79.70"``."""
    what = f" {what}" if what else ""
    c = _cmp(new, old, digits, tol)
    if c == 0:
        if _num(old, digits, unit) == _num(new, digits, unit):
            return f"{same}{what} at {_num(new, digits, unit)}"
        return f"{same}{what} about unchanged ({_num(old, digits, unit)} to {_num(new, digits, unit)})"
    verb = up if c > 0 else down
    return f"{verb}{what} from {_num(old, digits, unit)} to {_num(new, digits, unit)}"


def names(items: Sequence[str]) -> str:
    """``["A"]`` -> "A", ``["A", "B"]`` -> "A and B", ``["A", "B", "C"]`` -> "A, B and C"."""
    items = [str(i) for i in items]
    if not items:
        return "none"
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def changes(pairs: Mapping[str, Tuple[float, float]], what: str, *, up: Tuple[str, str] = ("raises", "raise"),
            down: Tuple[str, str] = ("lowers", "lower"), same: Tuple[str, str] = ("leaves", "leave"),
            digits: Optional[int] = 2, unit: str = "", tol: float = 0.0) -> str:
    """One clause per direction of change for several named ``(old, new)`` pairs, the verbs (singular, plural)
    picked from the numbers: ``"NNN (60.04 to 66.42) and IS (60.04 to 67.14) raise R@1; DN lowers it (79.70 to
    79.50)"``."""
    groups: Dict[int, List[str]] = {1: [], -1: [], 0: []}
    for name, (old, new) in pairs.items():
        groups[_cmp(new, old, digits, tol)].append(f"{name} ({_num(old, digits, unit)} to {_num(new, digits, unit)})")
    clauses, first = [], True
    for c, verbs in ((1, up), (-1, down), (0, same)):
        members = groups[c]
        if not members:
            continue
        verb = verbs[0] if len(members) == 1 else verbs[1]
        obj = what if first else "it"
        clauses.append(f"{names(members)} {verb} {obj}" + (" unchanged" if c == 0 else ""))
        first = False
    return "; ".join(clauses)


def ranking(values: Mapping[str, float], *, digits: Optional[int] = 2, unit: str = "") -> str:
    """Names ordered by value, highest first, joined by ">" (or "=" where the printed values tie):
    ``"DN (67.26) > DualIS (67.06) = NNN (67.06)"``."""
    items = sorted(values.items(), key=lambda kv: -float(kv[1]))
    if not items:
        return "none"
    out = f"{items[0][0]} ({_num(items[0][1], digits, unit)})"
    for (_, prev), (name, v) in zip(items, items[1:]):
        out += (" = " if _cmp(prev, v, digits, 0.0) == 0 else " > ") + f"{name} ({_num(v, digits, unit)})"
    return out


def tally(differences: Sequence[float], *, against: str = "", noun: str = "comparisons", digits: int = 2,
          unit: str = "points") -> str:
    """How many ``differences`` (one per comparison, ours minus the other's) are losses, wins and ties, in words:
    ``"loses in none of the 6 comparisons, wins in 2 and ties in 4"``, ``"loses in 1 of 6 comparisons (by 0.40
    points), ..."``, ``"loses in 2 of 6 comparisons (by 1.20 points at most), ..."``; ``against`` follows "loses"
    (e.g. " to the labelled one"). Each difference is compared with 0 as printed (``digits``), as :func:`order_word`
    compares."""
    d = np.asarray(list(differences), dtype=float)
    count = lambda k: "none" if k == 0 else str(k)   # noqa: E731
    side = np.array([_cmp(x, 0.0, digits, 0.0) for x in d], dtype=int)   # as printed: -0.001 is a tie
    lose, n_win = d[side < 0], int((side > 0).sum())
    if not len(lose):
        out = f"loses{against} in none of the {len(d)} {noun}"
    else:
        out = (f"loses{against} in {len(lose)} of {len(d)} {noun} (by {-lose.min():.{digits}f} {unit}"
               + (" at most)" if len(lose) > 1 else ")"))
    return out + f", wins in {count(n_win)} and ties in {count(len(d) - len(lose) - n_win)}"


def recall_noise(n_queries: int, recall: float) -> str:
    """The sampling-noise yardstick of a recall over ``n_queries`` queries (``recall`` in percent): how many queries
    one point is, and the half-width of a binomial 95% interval, ``1.96 * sqrt(p (1 - p) / m)``."""
    n_queries = int(n_queries)
    if n_queries < 1:
        raise ValueError(f"n_queries must be a positive integer; got {n_queries!r}")
    p = min(max(float(recall) / 100.0, 0.0), 1.0)
    half = 100.0 * 1.96 * np.sqrt(p * (1.0 - p) / n_queries)
    return (f"one point is {n_queries / 100:g} of {n_queries} queries, and a 95% interval at {100 * p:.2f}% is about "
            f"±{half:.2f} points")


def trends(pairs: Mapping[str, Tuple[float, float]], subject: str, *, up: str = "rises", down: str = "falls",
           same: str = "stays", digits: Optional[int] = 2, unit: str = "", tol: float = 0.0) -> str:
    """How one quantity moves for several named ``(before, after)`` pairs, the verbs picked from the numbers:
    ``"the skewness rises for DBSN (0.10 to 0.20); falls for IS (1.62 to 0.35) and SN (1.62 to 0.37)"``."""
    groups: Dict[int, List[str]] = {1: [], -1: [], 0: []}
    for name, (old, new) in pairs.items():
        groups[_cmp(new, old, digits, tol)].append(f"{name} ({_num(old, digits, unit)} to {_num(new, digits, unit)})")
    clauses = [f"{verb} for {names(groups[c])}" for c, verb in ((1, up), (-1, down), (0, same)) if groups[c]]
    return f"{subject} " + "; ".join(clauses)


class _Markdown:
    """Markdown that renders in Jupyter and prints as plain text elsewhere (and in a text/plain mime bundle)."""

    def __init__(self, text: str):
        self.text = text

    def _repr_markdown_(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text.replace("**", "")


def notice(*sentences: str, title: str = "In this run") -> None:
    """Show generated sentences about this run's results as one Markdown paragraph, headed ``title``.

    Build every sentence from the run's values (:func:`change`, :func:`changes`, :func:`order_word`, f-strings of
    computed numbers), never from expectations: it then stays true on any data. Empty sentences are dropped."""
    text = " ".join(s.strip() for s in sentences if s and s.strip())
    if not text:
        return None
    md = _Markdown(f"**{title}:** {text}")
    try:
        from IPython.display import display
    except ImportError:
        print(repr(md))
        return None
    display(md)
    return None
