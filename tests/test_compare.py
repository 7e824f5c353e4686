"""compare.beside_published: the one call that puts the published numbers beside ours (the companion package).

Rows are matched by table id, direction, method, setting and metric; a number one side lacks is missing (NaN),
never 0 and never borrowed from another table, direction, method or metric.
"""

import numpy as np
import pandas as pd
import pytest

from hubnorm_companion import compare

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


# ---- published values per key read from the setting (NNN Tables A3/A4: one column per k), compare.wide_by ----
K_OF_SETTING = {"k": r"\bk=(\d+)"}


def _per_k(rows):
    """Ours over k: the raw scores have no k (missing), NNN one row per k."""
    return pd.DataFrame(rows, columns=["direction", "k", "R@1"])


def test_setting_keys_match_published_rows_by_the_key_read_from_setting(capsys):
    ours = _per_k([["t2i", np.nan, 59.4], ["t2i", 1, 71.5], ["t2i", 2, 72.3], ["t2i", 16, 73.4],
                   ["i2t", np.nan, 77.1], ["i2t", 16, 80.8]])
    out = compare.beside_published(ours, PAPER, ["A3", "A4"], on=["direction", "k"], setting_keys=K_OF_SETTING,
                                   method=["raw", "nnn"], model="CLIP", dataset="coco", label="x")
    # Table A3 (t2i, CLIP, COCO): raw 30.45, k=1 35.47, k=16 37.36; Table A4 (i2t): raw 50.02, k=16 52.96
    assert _cell(out, "published", direction="t2i", k=1) == pytest.approx(35.47)
    assert _cell(out, "published", direction="t2i", k=16) == pytest.approx(37.36)
    assert _cell(out, "published", direction="i2t", k=16) == pytest.approx(52.96)
    raw = out[out["k"].isna()].set_index("direction")   # the raw rows (no k on either side) match each other only
    assert raw.loc["t2i", "published"] == pytest.approx(30.45) and raw.loc["t2i", "this run"] == 59.4
    assert raw.loc["i2t", "published"] == pytest.approx(50.02) and raw.loc["i2t", "this run"] == 77.1
    # the paper has no k=2: missing, never 0 and never a neighbour's value; its k=4 row has no number of ours
    assert np.isnan(_cell(out, "published", direction="t2i", k=2))
    assert _cell(out, "published", direction="t2i", k=4) == pytest.approx(36.57)
    assert np.isnan(_cell(out, "this run", direction="t2i", k=4))
    assert not (out["published"] == 0).any() and not (out["this run"] == 0).any()
    assert not out.duplicated(["direction", "k"]).any()
    assert "NOTE" not in capsys.readouterr().out


def test_setting_keys_take_the_type_of_ours():
    # nullable integers (pandas "Int64") and strings: the published value is converted to the same type
    ints = _per_k([["t2i", pd.NA, 59.4], ["t2i", 16, 73.4]]).astype({"k": "Int64"})
    out = compare.beside_published(ints, PAPER, "A3", on=["direction", "k"], setting_keys=K_OF_SETTING,
                                   method=["raw", "nnn"], model="CLIP", dataset="coco", label="x")
    assert _cell(out, "published", k=16) == pytest.approx(37.36)
    assert out.loc[out["k"].isna(), "published"].tolist() == pytest.approx([30.45])
    strs = pd.DataFrame({"direction": ["t2i"], "k": ["16"], "R@1": [73.4]})
    out = compare.beside_published(strs, PAPER, "A3", on=["direction", "k"], setting_keys=K_OF_SETTING,
                                   method="nnn", model="CLIP", dataset="coco", label="x")
    assert _cell(out, "published", k="16") == pytest.approx(37.36)


def test_wide_by_one_column_per_key_value_published_row_first():
    ours = _per_k([["t2i", np.nan, 59.4], ["t2i", 1, 71.5], ["t2i", 2, 72.3], ["t2i", 512, 72.7]])
    joined = compare.beside_published(ours, PAPER, "A3", on=["direction", "k"], setting_keys=K_OF_SETTING,
                                      method=["raw", "nnn"], model="CLIP", dataset="coco", label="synthetic analog",
                                      source_note="NNN Table A3")
    wide = compare.wide_by(joined, "k", missing="Original")
    assert list(wide.columns) == ["direction", "run", "Original", "1", "2", "4", "8", "16", "32", "64", "128", "512"]
    assert list(wide["run"]) == ["published (NNN Table A3)", "this run: synthetic analog"]
    pub, mine = wide.iloc[0], wide.iloc[1]
    assert pub["Original"] == pytest.approx(30.45) and pub["1"] == pytest.approx(35.47)
    assert pub["128"] == pytest.approx(37.77)
    assert np.isnan(pub["2"]) and np.isnan(pub["512"])            # the paper has no such k
    assert mine["Original"] == 59.4 and mine["512"] == 72.7 and np.isnan(mine["4"])   # this run has no k=4
    # several metrics keep `metric` as a key; one metric drops it
    assert "metric" not in wide.columns


def test_wide_by_without_published_numbers_shows_this_run_only(capsys):
    ours = _per_k([["t2i", np.nan, 59.4], ["t2i", 16, 73.4]])
    joined = compare.beside_published(ours, PAPER, "A3", on=["direction", "k"], setting_keys=K_OF_SETTING,
                                      model="no such model", label="x")
    assert "NOTE: no published rows match" in capsys.readouterr().out
    wide = compare.wide_by(joined, "k")
    assert list(wide["run"]) == ["this run: x"] and list(wide.columns) == ["direction", "run", "none", "16"]


def test_setting_keys_and_wide_by_refuse_bad_arguments():
    ours = _per_k([["t2i", 16, 73.4]])
    call = dict(on=["direction", "k"], model="CLIP", dataset="coco", label="x")
    with pytest.raises(ValueError, match="setting_keys names 'alpha'.*not a key column"):
        compare.beside_published(ours, PAPER, "A3", setting_keys={"alpha": r"alpha=([\d.]+)"}, **call)
    with pytest.raises(ValueError, match=r"setting_keys\['k'\].*0 groups"):
        compare.beside_published(ours, PAPER, "A3", setting_keys={"k": r"k=\d+"}, **call)
    with pytest.raises(ValueError, match=r"setting_keys\['k'\] must be a regular expression"):
        compare.beside_published(ours, PAPER, "A3", setting_keys={"k": r"k=(\d+"}, **call)
    with pytest.raises(ValueError, match="setting_keys must be a non-empty mapping"):
        compare.beside_published(ours, PAPER, "A3", setting_keys=[("k", r"k=(\d+)")], **call)
    with pytest.raises(ValueError, match="setting_keys names 'direction'.*already have"):
        compare.beside_published(ours, PAPER, "A3", setting_keys={"direction": r"(t2i)"}, **call)
    joined = compare.beside_published(ours, PAPER, "A3", setting_keys=K_OF_SETTING, **call)
    with pytest.raises(ValueError, match="column must be a key column"):
        compare.wide_by(joined, "published")
    with pytest.raises(ValueError, match="column must be a key column"):
        compare.wide_by(joined, "alpha")
    with pytest.raises(ValueError, match="joined must be a beside_published result"):
        compare.wide_by(ours, "k")
    with pytest.raises(TypeError, match="joined must be a pandas DataFrame"):
        compare.wide_by(ours.to_dict(), "k")
    clash = pd.DataFrame({"direction": ["t2i", "t2i"], "k": [None, "none"], "R@1": [59.4, 73.4]})
    joined = compare.beside_published(clash, PAPER, "A3", setting_keys=K_OF_SETTING, **call)
    with pytest.raises(ValueError, match="missing='none' is also a value of 'k'"):
        compare.wide_by(joined, "k")


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


# ------------------------------------------------------------------------------------------------ gains
def _joined(ours_raw=60.0, ours_nnn=66.0, pub_raw=58.8, pub_nnn=64.6, run="synthetic analog (x, seed 0)"):
    return pd.DataFrame({"direction": ["t2i", "t2i", "t2i"], "method": ["Original", "NNN", "DN"],
                         "setting": ["none", "bank", "bank"], "metric": ["R@1"] * 3,
                         "published": [pub_raw, pub_nnn, 58.9], "this run": [ours_raw, ours_nnn, 61.0],
                         "run": [run] * 3, "published source": ["NNN Table 1"] * 3})


def test_gains_are_differences_to_the_raw_row_on_each_side_and_their_ratio():
    g = compare.gains(_joined(), raw="Original")
    assert list(g.columns) == compare.GAIN_COLUMNS
    nnn = g.set_index("method").loc["NNN"]
    assert nnn["raw scores"] == 60.0 and nnn["normalized"] == 66.0 and nnn["gain"] == pytest.approx(6.0)
    assert nnn["published gain"] == pytest.approx(64.6 - 58.8)
    assert nnn["ratio"] == pytest.approx(6.0 / 5.8)
    assert nnn["data"] == "synthetic analog (x, seed 0)" and nnn["setting"] == "bank"
    # a published gain under MIN_PUBLISHED_GAIN (DN: +0.1) gets no ratio, never a huge number
    dn = g.set_index("method").loc["DN"]
    assert dn["gain"] == pytest.approx(1.0) and np.isnan(dn["ratio"])
    assert "Original" not in set(g["method"])
    assert compare.gains(_joined(), raw="Original", data="real: X")["data"].eq("real: X").all()


def test_gains_leave_missing_what_a_side_lacks():
    j = _joined()
    j.loc[j["method"] == "Original", "published"] = np.nan   # the paper prints no raw row
    g = compare.gains(j, raw="Original").set_index("method")
    assert np.isnan(g.loc["NNN", "published gain"]) and np.isnan(g.loc["NNN", "ratio"])
    assert g.loc["NNN", "gain"] == pytest.approx(6.0)
    j = _joined()
    j.loc[j["method"] == "NNN", "this run"] = np.nan   # this run has no NNN row
    g = compare.gains(j, raw="Original").set_index("method")
    assert np.isnan(g.loc["NNN", "gain"]) and np.isnan(g.loc["NNN", "ratio"])


def test_gains_name_the_argument_and_the_fix():
    with pytest.raises(ValueError, match="raw='raw' is not a method of joined"):
        compare.gains(_joined(), raw="raw")
    with pytest.raises(ValueError, match="beside_published result"):
        compare.gains(_joined().drop(columns="published"), raw="Original")
    with pytest.raises(TypeError, match="DataFrame"):
        compare.gains([1, 2], raw="Original")


def test_gains_take_the_raw_row_of_setting_none_when_a_table_also_cites_one():
    """DBSN Table 1 lists a raw row cited from the literature beside its own ("none"): the gain is against its own."""
    j = _joined()
    cited = j[j["method"] == "Original"].assign(setting="literature (cited paper)", published=43.1,
                                                **{"this run": np.nan})
    g = compare.gains(pd.concat([cited, j], ignore_index=True), raw="Original").set_index("method")
    assert g.loc["NNN", "published raw"] == 58.8 and g.loc["NNN", "published gain"] == pytest.approx(5.8)
    two = pd.concat([j, j[j["method"] == "Original"].assign(published=43.1)], ignore_index=True)
    with pytest.raises(ValueError, match="2 different raw values on the 'published' side"):
        compare.gains(two, raw="Original")


def test_a_published_gain_of_exactly_the_minimum_gets_a_ratio():
    g = compare.gains(_joined(pub_raw=60.0, pub_nnn=60.0 + compare.MIN_PUBLISHED_GAIN), raw="Original")
    assert g.set_index("method").loc["NNN", "ratio"] == pytest.approx(6.0 / compare.MIN_PUBLISHED_GAIN)
    g = compare.gains(_joined(pub_raw=60.0, pub_nnn=60.0 + 0.99 * compare.MIN_PUBLISHED_GAIN), raw="Original")
    assert np.isnan(g.set_index("method").loc["NNN", "ratio"])
