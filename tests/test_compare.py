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


# -------------------------------------------------------- rows=, delta=, and setting_keys= as notebook 06 uses it
RERANK = "rerank-geigle2021"


K_IN_SETTING = {"k": r"^k=(\d+)$"}   # Geigle et al. Table 8 states k in the setting: "k=20"


def test_setting_keys_match_the_k_of_table8_as_text_or_integer():
    for k_values in (["10", "20", "100"], [10, 20, 100]):
        ours = pd.DataFrame({"direction": "t2i", "k": k_values, "R@1": [60.0, 61.0, 62.0]})
        out = compare.beside_published(ours, RERANK, "8", on=["direction", "k"], setting_keys=K_IN_SETTING,
                                       label="x", model="SEP+Co-OSCAR", dataset="flickr30k")
        # SEP+Co-OSCAR, flickr30k, t2i, k=20
        assert _cell(out, "published", k=k_values[1]) == pytest.approx(76.0)
        assert _cell(out, "this run", k=k_values[1]) == 61.0
        assert np.isnan(_cell(out, "published", k=k_values[2]))                # the paper has no k=100: missing
        fifty = 50 if isinstance(k_values[0], int) else "50"   # published only: an empty 'this run'
        assert _cell(out, "published", k=fifty) == pytest.approx(75.9)
        assert np.isnan(_cell(out, "this run", k=fifty))
        assert not (out["published"] == 0).any()
    # a setting that states no k (Table 1's first stages: "none") matches no k of ours, and the run says so
    ours = pd.DataFrame({"direction": ["t2i"], "k": ["20"], "R@1": [61.0]})
    out = compare.beside_published(ours, RERANK, "1", on=["direction", "k"], setting_keys=K_IN_SETTING,
                                   label="x", model="EMB-OSCAR", dataset="coco-5k", rows="ours")
    assert np.isnan(_cell(out, "published", k="20")) and list(out["this run"]) == [61.0]
    assert out["published source"].iloc[0].startswith("none")


def test_rows_ours_keeps_our_rows_in_our_order_and_only_them():
    ours = pd.DataFrame({"direction": ["i2t", "t2i", "t2i"], "k": ["50", "20", "10"], "R@1": [1.0, 2.0, np.nan],
                         "R@5": [4.0, 5.0, 6.0]})
    out = compare.beside_published(ours, RERANK, "8", on=["direction", "k"], setting_keys=K_IN_SETTING,
                                   rows="ours", metrics=["R@1", "R@5"], label="x", model="SEP+Co-OSCAR",
                                   dataset="flickr30k")
    # metric by metric, rows in our order; our NaN (t2i, k=10, R@1) is no row of ours; no published-only rows
    assert list(zip(out["direction"], out["k"], out["metric"])) == [
        ("i2t", "50", "R@1"), ("t2i", "20", "R@1"), ("i2t", "50", "R@5"), ("t2i", "20", "R@5"), ("t2i", "10", "R@5")]
    assert list(out["this run"]) == [1.0, 2.0, 4.0, 5.0, 6.0]
    assert list(out["published"]) == pytest.approx([88.9, 76.0, 98.4, 93.0, 92.2])
    assert list(out.columns) == ["direction", "k", "metric", "published", "this run", "run", "published source"]


def test_delta_puts_the_published_improvement_beside_ours():
    """Li et al. Table V: (triplet + S-NDCG) minus triplet, per direction and metric, beside ours."""
    ours = pd.DataFrame({"direction": ["t2i", "t2i", "i2t", "i2t", "both", "both"],
                         "method": ["triplet", "triplet+sndcg"] * 3,
                         "R@1": [50.0, 52.5, 70.0, 69.0, np.nan, np.nan], "NDCG@10": [40.0, 41.0, 30.0, 30.5,
                                                                                        np.nan, np.nan],
                         "RSUM": [np.nan, np.nan, np.nan, np.nan, 400.0, 403.0]})
    out = compare.beside_published(ours, "listwise-li2023", "V", on=["direction", "method"], rows="ours",
                                   delta=("triplet+sndcg", "triplet"), metrics=["R@1", "NDCG@10", "RSUM"], label="x")
    assert "method" not in out.columns
    assert list(zip(out["direction"], out["metric"])) == [("t2i", "R@1"), ("i2t", "R@1"), ("t2i", "NDCG@10"),
                                                          ("i2t", "NDCG@10"), ("both", "RSUM")]
    assert _cell(out, "published", direction="t2i", metric="R@1") == pytest.approx(53.0 - 51.6)
    assert _cell(out, "published", direction="i2t", metric="R@1") == pytest.approx(70.6 - 70.4)
    assert _cell(out, "published", direction="both", metric="RSUM") == pytest.approx(477.7 - 472.7)
    assert _cell(out, "this run", direction="i2t", metric="R@1") == pytest.approx(-1.0)
    assert _cell(out, "this run", direction="both", metric="RSUM") == pytest.approx(3.0)
    assert out.loc[out["metric"] == "NDCG@10", "published"].isna().all()     # the paper reports no NDCG: missing
    # a baseline this run lacks: its difference is missing, never 0 and never the treatment's value
    no_base = compare.beside_published(ours[ours["method"] != "triplet"], "listwise-li2023", "V",
                                       on=["direction", "method"], delta=("triplet+sndcg", "triplet"),
                                       metrics=["R@1"], label="x")
    assert no_base["this run"].isna().all() and no_base["published"].notna().any()


def test_paper_dataset_names_our_data_set_as_the_paper_does():
    assert compare.paper_dataset(RERANK, "coco") == "coco-5k"
    assert compare.paper_dataset(RERANK, "flickr30k") == "flickr30k"
    assert compare.paper_dataset(PAPER, "coco") == "coco"          # no alias for that paper: our name
    for bad in ({"paper": None, "dataset": "coco"}, {"paper": RERANK, "dataset": ""}):
        with pytest.raises(ValueError, match="paper" if bad["paper"] is None else "dataset"):
            compare.paper_dataset(**bad)


@pytest.mark.parametrize("kwargs, word", [
    ({"rows": "mine"}, "rows"),
    ({"setting_keys": {"k": r"^k=(\d+)$"}}, "setting_keys"),                   # k is no key column of on
    ({"setting_keys": {"k": r"^k=\d+$"}, "on": ["direction", "k"]}, "setting_keys"),   # no group for the value
    ({"delta": ("nnn",)}, "delta"),
    ({"delta": ("nnn", "nnn")}, "delta"),
    ({"delta": ("nnn", "raw"), "on": ["direction", "setting"]}, "delta"),      # method is no key
    ({"delta": ("nnn", "raw"), "ci": True}, "delta"),
])
def test_bad_join_options_name_the_argument(kwargs, word):
    ours = pd.DataFrame({"direction": ["t2i"], "method": ["nnn"], "setting": [IN], "k": ["20"], "R@1": [70.0]})
    with pytest.raises(ValueError, match=word):
        compare.beside_published(ours, PAPER, "A6", label="x", **kwargs)
