"""compare.beside_published: the one call that puts the published numbers beside ours (experiments layer).

Rows are matched by table id, direction, method, setting and metric; a number one side lacks is missing (NaN),
never 0 and never borrowed from another table, direction, method or metric.
"""

import numpy as np
import pandas as pd
import pytest

from hubnorm.experiments import compare

PAPER = "nnn-chowdhury2024"
IN = "bank=flickr30k train 20%"


def _ours(rows):
    return pd.DataFrame(rows, columns=["direction", "method", "setting", "R@1", "R@5"])


def _cell(out, column, **keys):
    sel = out
    for k, v in keys.items():
        sel = sel[sel[k] == v]
    assert len(sel) == 1, f"expected one row for {keys}, got {len(sel)}"
    return sel.iloc[0][column]


def test_rows_matched_by_table_direction_method_and_metric(capsys):
    ours = _ours([["t2i", "nnn", IN, 70.0, 90.0], ["t2i", "raw", "none", 60.0, 80.0],
                  ["t2i", "csls", IN, 65.0, 85.0], ["i2t", "nnn", IN, 75.0, 95.0]])
    out = compare.beside_published(ours, PAPER, ["A6"], model="CLIP", dataset="flickr30k", label="synthetic analog",
                                   metrics=["R@1", "R@5"])
    # matched on every key: Table A6 (t2i, CLIP, Flickr30k) reports NNN 64.60 and the raw scores 58.82
    assert _cell(out, "published", direction="t2i", method="nnn", metric="R@1") == pytest.approx(64.60)
    assert _cell(out, "this run", direction="t2i", method="nnn", metric="R@1") == 70.0
    assert _cell(out, "published", direction="t2i", method="raw", metric="R@1") == pytest.approx(58.82)
    # a metric the table does not report, a method the paper did not run, a direction of another table: missing
    assert np.isnan(_cell(out, "published", direction="t2i", method="nnn", metric="R@5"))
    assert np.isnan(_cell(out, "published", direction="t2i", method="csls", metric="R@1"))
    assert np.isnan(_cell(out, "published", direction="i2t", method="nnn", metric="R@1"))
    # a published row this run lacks is shown with an empty 'this run', never 0
    assert np.isnan(_cell(out, "this run", direction="t2i", method="dualis", metric="R@1"))
    assert not (out["published"] == 0).any() and not (out["this run"] == 0).any()
    assert set(out["run"]) == {"synthetic analog"} and out["published source"].str.contains("A6").all()
    # the i2t table (A7) matches the i2t row and only it
    out7 = compare.beside_published(ours, PAPER, ["A7"], model="CLIP", dataset="flickr30k", label="x")
    assert _cell(out7, "published", direction="i2t", method="nnn", metric="R@1") == pytest.approx(81.2)
    assert out7.loc[out7["direction"] == "t2i", "published"].isna().all()
    assert "NOTE" not in capsys.readouterr().out


def test_a_key_reported_by_two_tables_appears_once_and_filters_apply():
    ours = _ours([["t2i", "nnn", IN, 70.0, 90.0], ["t2i", "nnn", "bank=coco train 20%", 68.0, 89.0]])
    out = compare.beside_published(ours, PAPER, ["A6", "1"], model="CLIP", dataset="flickr30k", label="x")
    assert not out.duplicated(["direction", "method", "setting", "metric"]).any()
    assert _cell(out, "published", method="nnn", setting="bank=coco train 20%") == pytest.approx(63.7)  # Table 1 only
    only_nnn = compare.beside_published(ours, PAPER, ["A6"], model="CLIP", dataset="flickr30k", method="nnn",
                                        label="x", names={"nnn": "NNN"}, sort_by=["setting"])
    assert set(only_nnn["method"]) == {"NNN"} and list(only_nnn["setting"]) == sorted(only_nnn["setting"])


def test_no_matching_table_says_so_and_leaves_published_empty(capsys):
    ours = _ours([["t2i", "nnn", IN, 70.0, 90.0]])
    out = compare.beside_published(ours, PAPER, ["-"], model="CLIP", label="x", source_note="NNN A12")
    assert out["published"].isna().all() and list(out["this run"]) == [70.0]
    assert "NOTE: no published rows match this table (NNN A12)" in capsys.readouterr().out
    assert out["published source"].iloc[0].startswith("none")


def test_ci_columns_beside_the_published_half_width():
    ours = pd.DataFrame({"direction": ["t2i"], "method": ["nnn"], "setting": ["bank=flickr30k"],
                         "R@1": [70.0], "R@1 lo": [68.0], "R@1 hi": [71.5]})
    out = compare.beside_published(ours, PAPER, ["A8"], model="CLIP", dataset="flickr30k", label="x", ci=True)
    row = out[(out["method"] == "nnn") & (out["setting"] == "bank=flickr30k")].iloc[0]
    assert row["published"] == pytest.approx(65.52) and row["published ±"] == pytest.approx(1.32)
    assert row["95% CI"] == "[68.00, 71.50]" and row["half-width"] == pytest.approx(1.75)
    raw = out[out["method"] == "raw"].iloc[0]   # published only: no interval of ours, shown as missing
    assert raw["published ±"] == pytest.approx(1.36) and np.isnan(raw["this run"]) and pd.isna(raw["95% CI"])
    assert set(out["metric"]) == {"R@1"}        # the ci95 rows are a column, never rows of their own


def test_long_results_and_bad_input():
    long = pd.DataFrame({"direction": ["t2i"], "method": ["nnn"], "setting": [IN], "metric": ["R@1"],
                         "value": [70.0]})
    out = compare.beside_published(long, PAPER, "A6", model="CLIP", dataset="flickr30k", label="x")
    assert _cell(out, "published", method="nnn") == pytest.approx(64.60)
    with pytest.raises(ValueError, match="leaves out"):   # long results: no metric of ours is dropped silently
        compare.beside_published(long.assign(metric="R@5"), PAPER, "A6", label="x")
    with pytest.raises(ValueError, match="key columns"):
        compare.beside_published(long.drop(columns=["setting"]), PAPER, "A6", label="x")
    with pytest.raises(ValueError, match="no column for the metrics"):
        compare.beside_published(_ours([]), PAPER, "A6", label="x", metrics=["R@10"])
    with pytest.raises(ValueError, match="bootstrap bounds"):
        compare.beside_published(_ours([["t2i", "nnn", IN, 1.0, 2.0]]), PAPER, "A8", label="x", ci=True)
    with pytest.raises(TypeError, match="DataFrame"):
        compare.beside_published([1, 2], PAPER, "A6", label="x")
