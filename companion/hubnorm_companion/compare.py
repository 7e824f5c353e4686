"""Published numbers beside ours: filter the published tables, join them with a run, say what the run was.

The published numbers ship with the package (``hubnorm_companion.reporting.load_published``): one row per number with
``paper, table, model, dataset, direction, setting, method, metric, value, note``.
"""

from __future__ import annotations

import re
from typing import Mapping, Optional, Sequence, Union

import pandas as pd
from pandas.api import types as pdt

from hubnorm.provenance import UNRECORDED
from .reporting import GAIN_COLUMNS, beside_published as _merge_published, load_published

__all__ = ["beside_published", "published", "side_by_side", "to_long", "wide_by", "gains", "GAIN_COLUMNS",
           "MIN_PUBLISHED_GAIN",
           "PAPER_TABLES", "paper_tables", "DATASET_NAMES", "paper_dataset"]

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


#: How a paper's tables name a data set where its name differs from ours (``protocol.dataset_key``: the synthetic
#: preset, the cache's or the folder's declared data set): the one place such aliases live. Geigle et al. report
#: COCO on its 1k and 5k test splits as "coco-1k" and "coco-5k"; our "coco" (preset and caches) is the 5k split.
DATASET_NAMES = {
    "rerank-geigle2021": {"coco": "coco-5k"},
}


def paper_dataset(paper: str, dataset: str) -> str:
    """The name ``paper``'s published tables give our data set ``dataset`` (:data:`DATASET_NAMES`; unchanged where
    the paper uses our name). Pass it as ``dataset=`` to :func:`beside_published`."""
    for name, value in (("paper", paper), ("dataset", dataset)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"{name} must be a non-empty string; got {value!r}")
    return DATASET_NAMES.get(paper, {}).get(dataset, dataset)


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
    out = _merge_published(ours, pub, on)
    out["run"] = label
    matched = int(out["published"].notna().sum()) if "published" in out.columns else 0
    if matched == 0:   # never an empty column that reads as if the paper had been compared
        print(f"NOTE: no published rows match this table ({source_note}): its 'published' column is empty")
        source_note = f"none ({source_note} has no matching rows)"
    out["published source"] = source_note
    return out


#: Suffix of the published rows that hold a confidence interval's half-width ("R@1 ci95": the paper's "± x").
CI_SUFFIX = " ci95"


def beside_published(results: pd.DataFrame, paper: str, tables: Union[str, Sequence[str]], *, label: str,
                     on: Sequence[str] = ("direction", "method", "setting"), metrics: Sequence[str] = ("R@1",),
                     source_note: Optional[str] = None, ci: bool = False, names: Optional[Mapping[str, str]] = None,
                     sort_by: Optional[Sequence[str]] = None, setting_keys: Optional[Mapping[str, str]] = None,
                     rows: str = "all", delta: Optional[Sequence[str]] = None, **equals) -> pd.DataFrame:
    r"""Our results with the published numbers of ``paper``'s ``tables`` beside them: the one call a notebook makes.

    Args:
        results: ours, wide (one column per metric, e.g. from ``hubnorm.evaluate`` rows) or long (``metric`` and
            ``value`` columns); the key columns ``on`` must be there.
        paper, tables: the paper id (``"nnn-chowdhury2024"``) and its table ids (``"-"`` matches none, see
            :func:`paper_tables`). A key reported by two tables is taken from the first one listed.
        label: what the run is (``protocol.run_label``), in the ``run`` column.
        on: the key columns besides ``metric``; published rows are matched on them and on ``metric``.
        metrics: the metrics compared (long ``results`` must hold no other metric); only published rows of these
            metrics (and of the directions ``results`` has, when ``direction`` is a key) are shown.
        ci: ``results`` has ``"<metric> lo"`` / ``"<metric> hi"`` bootstrap bounds: add ``95% CI`` (printed) and
            ``half-width``, and the published ``"<metric> ci95"`` rows as ``published ±`` (the paper's "± x").
        names: renames of the ``method`` column after the join (e.g. ``hubnorm.DISPLAY_NAMES``).
        sort_by: stable sort of the joined rows (after ``names``).
        setting_keys: key columns of ``on`` that the published tables write inside ``setting``, each with a regular
            expression whose one group is the value (``{"k": r"\bk=(\d+)"}`` reads ``k`` from ``"alpha=0.75 k=16"``);
            the value takes the type of ours (numbers for numbers). A published row whose setting does not match
            has a missing key, matched only by our rows whose key is missing too (the raw scores have no ``k``).
        rows: ``"all"`` (default): every published row of the selection and every row of ours; ``"ours"``: only
            the rows this run has a number for (a NaN in wide ``results`` is no number), in the order of
            ``results`` (wide results: metric by metric), published rows this run lacks left out.
        delta: ``(treatment, baseline)``, two values of the ``method`` column (in ``on``), named as the published
            tables name them (rename ours first): both sides become treatment minus baseline per remaining key
            and metric (a side lacking either method has a missing difference, never 0); ``method`` is then no
            longer a column of the result.
        equals: further filters of the published rows (``model=``, ``dataset=``, ``method=``: :func:`published`).

    Returns the key columns, ``metric``, ``published`` (the paper's value; NaN, shown as missing, where the paper
    has no such row: never 0), [``published ±``], ``this run`` (NaN where this run has no such row), [``95% CI``,
    ``half-width``], ``run`` and ``published source`` (``source_note``; a NOTE when no published row matches).
    """
    on, metrics = list(on), list(metrics)
    tables = [tables] if isinstance(tables, str) else list(tables)
    _check_setting_keys(setting_keys, on)
    if not isinstance(results, pd.DataFrame):
        raise TypeError(f"results must be a pandas DataFrame; got {type(results).__name__}")
    _check_join_options(on, ci, rows, delta)
    missing = [c for c in on if c not in results.columns]
    if missing:
        raise ValueError(f"results lack the key columns {missing} (on={on}); columns: {list(results.columns)}")
    long = "metric" in results.columns and "value" in results.columns
    if ci and long:
        raise ValueError("ci=True needs wide results (columns '<metric>', '<metric> lo', '<metric> hi')")
    if long:
        other = sorted(set(results["metric"]) - set(metrics))
        if other:   # never drop our numbers silently
            raise ValueError(f"results hold the metrics {other} that metrics={metrics} leaves out: pass them in "
                             "metrics= or drop those rows first")
        ours = results[on + ["metric", "value"]]
    else:
        absent = [m for m in metrics if m not in results.columns]
        if absent:
            raise ValueError(f"results have no column for the metrics {absent}; columns: {list(results.columns)}")
        ours = to_long(results, on, metrics)
    if ci:
        bounds = [f"{m} {b}" for m in metrics for b in ("lo", "hi")]
        absent = [c for c in bounds if c not in results.columns]
        if absent:
            raise ValueError(f"ci=True needs the bootstrap bounds {absent} in results "
                             "(hubnorm.evaluate(..., n_boot=...))")
        lo = results.melt(id_vars=on, value_vars=[f"{m} lo" for m in metrics], var_name="metric", value_name="lo")
        hi = results.melt(id_vars=on, value_vars=[f"{m} hi" for m in metrics], var_name="metric", value_name="hi")
        ours = ours.assign(lo=lo["lo"].to_numpy(), hi=hi["hi"].to_numpy())
        ours["95% CI"] = [f"[{a:.2f}, {b:.2f}]" for a, b in zip(ours["lo"], ours["hi"])]
        ours["half-width"] = (ours["hi"] - ours["lo"]) / 2
        ours = ours.drop(columns=["lo", "hi"])
    if rows == "ours":
        ours = ours[ours["value"].notna()]
    pub = published(paper, tables, **equals)
    if setting_keys:
        pub = _keys_from_setting(pub, setting_keys, ours, on)
    if "direction" in on:
        pub = pub[pub["direction"].isin(set(ours["direction"]))]
    pub = pub.assign(_order=pub["table"].map({t: i for i, t in enumerate(tables)}))
    pub = pub.sort_values("_order", kind="stable")
    half = pub[pub["metric"].isin([m + CI_SUFFIX for m in metrics])]
    pub = pub[pub["metric"].isin(metrics)].drop_duplicates(on + ["metric"], keep="first")
    note = source_note or f"{paper} Table{'s' if len(tables) > 1 else ''} {', '.join(tables)}"
    if delta is not None:
        ours, pub = _difference(ours, on, *delta), _difference(pub[on + ["metric", "value"]], on, *delta)
        on = [c for c in on if c != "method"]
    if rows == "ours":   # only the published rows this run has (the NOTE below then says when none matches)
        pub = pub.merge(ours[on + ["metric"]].drop_duplicates(), on=on + ["metric"])
    out = side_by_side(ours, pub, on + ["metric"], label=label, source_note=note)
    if rows == "ours":   # this run's rows, in its order
        out = ours[on + ["metric"]].merge(out, on=on + ["metric"], how="left")
    if ci:
        half = (half.assign(metric=half["metric"].str[: -len(CI_SUFFIX)])
                .drop_duplicates(on + ["metric"], keep="first")[on + ["metric", "value"]]
                .rename(columns={"value": "published ±"}))
        out = out.merge(half, on=on + ["metric"], how="left")
        out = out.merge(ours[on + ["metric", "95% CI", "half-width"]], on=on + ["metric"], how="left")
    if "bank" in results.columns and "bank" not in on:   # what each of our rows' banks were, carried beside it
        out = _with_bank(out, results if delta is None else results[results["method"] == delta[0]], on)
    if names is not None and "method" in out.columns:
        out["method"] = out["method"].map(lambda m: names.get(m, m))
    if sort_by:
        out = out.sort_values(list(sort_by), kind="stable")
    return out.reset_index(drop=True)


def _with_bank(out: pd.DataFrame, ours: pd.DataFrame, on: Sequence[str]) -> pd.DataFrame:
    """``out`` with the ``bank`` mark of our row of the same keys (``on``); two marks under one key are joined
    with " / "; a row only the paper has gets an empty mark (it shows no number of ours)."""
    keys = [c for c in on if c in out.columns]
    marks = (ours.groupby(keys, dropna=False, sort=False)["bank"]
             .agg(lambda b: " / ".join(dict.fromkeys(str(v) for v in b))).reset_index())
    out = out.merge(marks, on=keys, how="left")
    out["bank"] = out["bank"].fillna("")
    return out


def _check_setting_keys(setting_keys, on) -> None:
    """``setting_keys`` of :func:`beside_published`: key columns of ``on`` (not ``setting``) -> one-group regex."""
    if setting_keys is None:
        return
    if not isinstance(setting_keys, Mapping) or not setting_keys:
        raise ValueError(f"setting_keys must be a non-empty mapping {{key column: regex with one group}}; "
                         f"got {setting_keys!r}")
    for col, pattern in setting_keys.items():
        if col not in on or col == "setting":
            raise ValueError(f"setting_keys names {col!r}, which is not a key column of on={list(on)} other than "
                             "'setting': add it to on=")
        try:
            groups = re.compile(pattern).groups
        except (TypeError, re.error) as err:
            raise ValueError(f"setting_keys[{col!r}] must be a regular expression; got {pattern!r} ({err})") from None
        if groups != 1:
            raise ValueError(f"setting_keys[{col!r}] = {pattern!r} has {groups} groups; it needs exactly one "
                             "(the value), e.g. r'\\bk=(\\d+)'")


def _keys_from_setting(pub: pd.DataFrame, setting_keys: Mapping[str, str], ours: pd.DataFrame,
                       on: Sequence[str]) -> pd.DataFrame:
    """The published rows with the key columns of ``setting_keys`` read from ``setting``, typed as ours."""
    pub = pub.copy()
    for col, pattern in setting_keys.items():
        if col in pub.columns:
            raise ValueError(f"setting_keys names {col!r}, a column the published tables already have")
        value = pub["setting"].astype(str).str.extract(pattern, expand=False)
        if pdt.is_numeric_dtype(ours[col]) and not pdt.is_bool_dtype(ours[col]):
            value = pd.to_numeric(value)
            if pdt.is_integer_dtype(ours[col]):
                value = value.astype("Int64")
        pub[col] = value
    return pub


def _check_join_options(on: list, ci: bool, rows, delta) -> None:
    """The arguments of :func:`beside_published`'s ``rows`` and ``delta`` options, checked."""
    if rows not in ("all", "ours"):
        raise ValueError(f"rows must be 'all' (every published and every own row) or 'ours' (this run's rows, in "
                         f"its order); got {rows!r}")
    if delta is not None:
        if (not isinstance(delta, (tuple, list)) or len(delta) != 2
                or not all(isinstance(m, str) and m for m in delta) or delta[0] == delta[1]):
            raise ValueError(f"delta must be (treatment, baseline), two different method names; got {delta!r}")
        if "method" not in on:
            raise ValueError(f"delta={tuple(delta)} compares two methods: 'method' must be in on={on}")
        if ci:
            raise ValueError("delta= and ci=True cannot be combined: a difference has no bootstrap interval here")


def _difference(long: pd.DataFrame, on: list, treatment: str, baseline: str) -> pd.DataFrame:
    """Long rows (``on`` keys with ``method``, ``metric``, ``value``) -> treatment minus baseline per remaining key
    and metric, in the order of the treatment's rows (NaN where the baseline has no such row)."""
    keys = [c for c in on if c != "method"] + ["metric"]
    treat = long[long["method"] == treatment].drop(columns="method")
    base = long.loc[long["method"] == baseline, keys + ["value"]].drop_duplicates(keys)
    out = treat.merge(base.rename(columns={"value": "_baseline"}), on=keys, how="left")
    return out.assign(value=out["value"] - out["_baseline"]).drop(columns="_baseline")


def _label(value) -> str:
    """A column name for a key value: ``16`` for 16 and 16.0, ``0.5`` for 0.5."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


#: Columns of a :func:`beside_published` result that are not keys.
_VALUE_COLUMNS = ("published", "published ±", "this run", "95% CI", "half-width", "run", "published source")


def wide_by(joined: pd.DataFrame, column: str, *, missing: str = "none") -> pd.DataFrame:
    """A :func:`beside_published` result with one column per value of the key ``column`` (e.g. one per ``k``):
    one row per remaining key and side, ``run`` saying which (``"published (<source>)"`` / ``"this run: <run>"``).

    Values are sorted, the rows without a value of ``column`` (e.g. the raw scores, which have no ``k``) first, in
    a column named ``missing``. A cell one side lacks stays missing (NaN), never 0. The published rows are left
    out when no published number matched (:func:`beside_published` then printed a NOTE). Several metrics: ``metric``
    stays a key column; one metric: it is dropped.
    """
    if not isinstance(joined, pd.DataFrame):
        raise TypeError(f"joined must be a pandas DataFrame (a beside_published result); got {type(joined).__name__}")
    need = {"published", "this run", "run", "published source"}
    if not need <= set(joined.columns):
        raise ValueError(f"joined must be a beside_published result (columns {sorted(need)}); columns: "
                         f"{list(joined.columns)}")
    if column not in joined.columns or column in _VALUE_COLUMNS or column == "metric":
        raise ValueError(f"column must be a key column of joined; got {column!r}; keys: "
                         f"{[c for c in joined.columns if c not in _VALUE_COLUMNS]}")
    if not isinstance(missing, str):
        raise ValueError(f"missing must be a column name (str); got {missing!r}")
    keys = [c for c in joined.columns if c not in _VALUE_COLUMNS and c != column]
    if "metric" in keys and joined["metric"].nunique() <= 1:
        keys.remove("metric")
    values = [_label(v) for v in sorted(joined[column].dropna().unique())]
    has_missing = bool(joined[column].isna().any())
    if has_missing and missing in values:
        raise ValueError(f"missing={missing!r} is also a value of {column!r}: pick another name")
    labels = [missing] * has_missing + values
    label_of = joined[column].map(lambda v: missing if pd.isna(v) else _label(v))
    sides = []
    for side, run in (("published", f"published ({joined['published source'].iloc[0]})" if len(joined) else ""),
                      ("this run", f"this run: {joined['run'].iloc[0]}" if len(joined) else "")):
        if side == "published" and not joined["published"].notna().any():
            continue
        cells = joined.assign(_column=label_of).pivot_table(index=keys, columns="_column", values=side,
                                                            aggfunc="first", dropna=False, sort=False)
        cells = cells.reindex(columns=labels)
        cells = cells[cells.notna().any(axis=1)] if side == "published" else cells
        cells.columns.name = None
        cells = cells.reset_index()
        cells.insert(len(keys), "run", run)
        sides.append(cells)
    return pd.concat(sides, ignore_index=True) if sides else pd.DataFrame(columns=keys + ["run"] + labels)


#: A published gain smaller than this (in absolute value, in the metric's units: R@1 points, or a hubness statistic)
#: gets no ratio: the papers print R@1 to one or two decimals and a gain of a fraction of a point is within their
#: rounding and sampling noise, so a ratio to it says nothing (a gain of 3 points against a published -0.02 would
#: read "-150x").
MIN_PUBLISHED_GAIN = 1.0



def gains(joined: pd.DataFrame, *, raw: str = "raw", data: Optional[str] = None) -> pd.DataFrame:
    """Gains over the raw scores, ours beside the paper's: one row per normalized method of a
    :func:`beside_published` result (wide results joined on ``direction`` and ``method``, and ``setting`` when
    there is one).

    For each direction and metric, ``raw`` names the method of the raw scores (after ``names=``: e.g. "Original");
    ``gain = normalized - raw`` on each side, and ``ratio = gain / published gain``: 1 when this run gains what the
    paper reports, about 3 when a gain is three times too large. A side without its raw row, or a published gain
    under :data:`MIN_PUBLISHED_GAIN`, leaves the gain or the ratio missing (NaN), never 0. Where a table lists
    several raw rows of a direction (DBSN Table 1 cites raw numbers from the literature beside its own), the one of
    setting "none" is the raw scores. ``data`` labels the rows (default: the ``run`` column: "synthetic analog
    (...)" or "real: ..."). Columns :data:`GAIN_COLUMNS`.
    """
    if not isinstance(joined, pd.DataFrame):
        raise TypeError(f"joined must be a pandas DataFrame (a beside_published result); got {type(joined).__name__}")
    need = {"direction", "method", "metric", "published", "this run", "run", "published source"}
    if not need <= set(joined.columns):
        raise ValueError(f"joined must be a beside_published result joined on direction and method (and setting) "
                         f"(columns {sorted(need)}); columns: {list(joined.columns)}")
    if not isinstance(raw, str) or raw not in set(joined["method"]):
        raise ValueError(f"raw={raw!r} is not a method of joined ({sorted(set(map(str, joined['method'])))}): name "
                         "the raw scores' method as the table writes it (e.g. 'Original' after names=DISPLAY_NAMES)")
    def one_raw(base, side):
        """The raw scores' value on one side: the row of setting "none" where there is one (a published table may
        also list a raw row cited from the literature), else the only row; two different values are an error."""
        vals = base.dropna(subset=[side])
        if "setting" in vals.columns and (vals["setting"] == "none").any():
            vals = vals[vals["setting"] == "none"]
        values = sorted(set(vals[side].astype(float)))
        if len(values) > 1:
            raise ValueError(f"joined holds {len(values)} different raw values on the {side!r} side for one direction "
                             f"and metric ({values}, settings {sorted(set(map(str, vals.get('setting', []))))}): "
                             "filter the published rows to one raw setting (setting=[...] of beside_published)")
        return values[0] if values else float("nan")

    rows = []
    for (direction, metric), part in joined.groupby(["direction", "metric"], sort=False):
        base = part[part["method"] == raw]
        r_ours, r_pub = one_raw(base, "this run"), one_raw(base, "published")
        for _, row in part[part["method"] != raw].iterrows():
            ours, pub = float(row["this run"]), float(row["published"])
            gain, pub_gain = ours - r_ours, pub - r_pub
            rows.append({"data": data if data is not None else row["run"], "direction": direction,
                         "method": row["method"], "setting": row.get("setting", ""),
                         "bank": row["bank"] if "bank" in part.columns else UNRECORDED, "metric": metric,
                         "raw scores": r_ours,
                         "normalized": ours, "gain": gain, "published raw": r_pub, "published": pub,
                         "published gain": pub_gain,
                         "ratio": gain / pub_gain if pd.notna(gain) and pd.notna(pub_gain)
                         and abs(pub_gain) >= MIN_PUBLISHED_GAIN else float("nan"),
                         "published source": row["published source"]})
    return pd.DataFrame(rows, columns=GAIN_COLUMNS)
