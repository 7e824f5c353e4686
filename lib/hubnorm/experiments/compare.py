"""Published numbers beside ours: filter the published tables, join them with a run, say what the run was.

The published numbers ship with the package (``hubnorm.experiments.reporting.load_published``): one row per number with
``paper, table, model, dataset, direction, setting, method, metric, value, note``.
"""

from __future__ import annotations

from typing import Sequence, Union

import pandas as pd

from .reporting import beside_published, load_published

__all__ = ["published", "side_by_side", "to_long", "PAPER_TABLES", "paper_tables"]

METRICS = ("R@1", "R@5", "R@10", "MdR", "MnR")

#: Which table of a paper reports a study, per (dataset, direction): the one place the notebooks look it up.
PAPER_TABLES = {
    # NNN paper: R@K with bootstrap 95% CIs (notebook 01)
    ("nnn-chowdhury2024", "bootstrap_ci"): {("flickr30k", "t2i"): "A8", ("flickr30k", "i2t"): "A9",
                                            ("coco", "t2i"): "A10", ("coco", "i2t"): "A11"},
    # NNN paper: a fraction of the training data as reference bank (notebook 04)
    ("nnn-chowdhury2024", "bank_fraction"): {("flickr30k", "t2i"): "A12", ("flickr30k", "i2t"): "A13",
                                             ("coco", "t2i"): "A14", ("coco", "i2t"): "A15"},
}


def paper_tables(paper: str, study: str, dataset: str, directions: Sequence[str]) -> list:
    """The table ids of ``paper`` that report ``study`` on ``dataset``, one per direction (``"-"`` where the paper
    has none: :func:`published` then matches no row, and :func:`side_by_side` says so)."""
    if (paper, study) not in PAPER_TABLES:
        raise ValueError(f"no table map for paper {paper!r}, study {study!r}; known: {sorted(PAPER_TABLES)}")
    tables = PAPER_TABLES[(paper, study)]
    return [tables.get((dataset, d), "-") for d in directions]


def published(paper: str, tables: Union[str, Sequence[str]], **equals) -> pd.DataFrame:
    """Published rows of ``paper`` in ``tables`` whose columns equal the given values (a list means "any of")."""
    df = load_published(paper)
    tables = [tables] if isinstance(tables, str) else list(tables)
    df = df[df["table"].astype(str).isin(tables)]
    for col, val in equals.items():
        if col not in df.columns:
            raise ValueError(f"published tables have no column {col!r}; columns: {list(df.columns)}")
        df = df[df[col].isin(list(val))] if isinstance(val, (list, tuple, set)) else df[df[col] == val]
    return df.reset_index(drop=True)


def to_long(df: pd.DataFrame, id_vars: Sequence[str], metrics: Sequence[str] = METRICS) -> pd.DataFrame:
    """Wide results (one column per metric) -> long (``metric``, ``value``)."""
    metrics = [m for m in metrics if m in df.columns]
    return df.melt(id_vars=list(id_vars), value_vars=metrics, var_name="metric", value_name="value")


def side_by_side(ours: pd.DataFrame, pub: pd.DataFrame, on: Sequence[str], *, label: str,
                 source_note: str) -> pd.DataFrame:
    """``published`` and ``this run`` columns side by side on the key columns ``on``, plus ``run`` (synthetic
    analog or real data: a synthetic run is never a reproduction) and ``published source`` (paper and table)."""
    out = beside_published(ours, pub, on)
    out["run"] = label
    matched = int(out["published"].notna().sum()) if "published" in out.columns else 0
    if matched == 0:   # never an empty column that reads as if the paper had been compared
        print(f"NOTE: no published rows match this table ({source_note}): its 'published' column is empty")
        source_note = f"none ({source_note} has no matching rows)"
    out["published source"] = source_note
    return out
