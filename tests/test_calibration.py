"""The calibration of the synthetic presets (hubnorm_companion.calibration, data/calibration_synthetic.md).

- the real references recorded in the package are what the real embeddings give (when the developers' copy is
  present);
- the synthetic side of the report is recomputed here and must equal the numbers the report was written from
  (data/calibration_synthetic.csv, and per seed of the full-size test sets data/calibration_synthetic_full_seeds.csv):
  a regression check of the generator and of the statistics;
- the bands: every statistic the report calls "within" is within, and the calibrated presets match more
  statistics than the earlier isotropic ones (the reason they replaced them).
"""

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import REPO, load_script, shared_path
from hubnorm_companion import calibration as cal
from hubnorm.geometry import bank_statistics, embedding_statistics

REPORT_CSV = REPO / "data" / "calibration_synthetic.csv"
FULL_SEEDS_CSV = REPO / "data" / "calibration_synthetic_full_seeds.csv"


def _real(name, tmp_path):
    """The real reference ``name`` through its release, read from the developers' offline mirror."""
    return cal.real_arrays(name, mirror=shared_path("embeddings"), cache_dir=tmp_path / "cache")


@pytest.mark.shared_data
@pytest.mark.parametrize("name", sorted(cal.REAL_STATISTICS))
def test_recorded_real_statistics_are_what_the_real_embeddings_give(name, tmp_path):
    real = _real(name, tmp_path)
    headroom = cal.headroom_statistics(*real, splits=range(cal.HEADROOM_SPLITS["real"]))
    got = {**embedding_statistics(*real), **bank_statistics(*real),
           **{k: v for k, v in headroom.items() if k in cal.STATISTICS}}
    rec = cal.REAL_STATISTICS[name]["statistics"]
    assert set(rec) == {k for k, v in got.items() if np.isfinite(v)}
    for key, value in rec.items():
        assert got[key] == pytest.approx(value, abs=6e-5 * max(1.0, abs(value))), key


@pytest.fixture(scope="module")
def report():
    if not REPORT_CSV.exists():
        pytest.fail(f"{REPORT_CSV} is missing: run scripts/calibrate_synthetic.py")
    return pd.read_csv(REPORT_CSV)


@pytest.fixture(scope="module")
def full_seeds():
    if not FULL_SEEDS_CSV.exists():
        pytest.fail(f"{FULL_SEEDS_CSV} is missing: run scripts/calibrate_synthetic.py --full-seeds-only")
    return pd.read_csv(FULL_SEEDS_CSV)


#: The full-size seeds recomputed here, per preset kind: all of them where a seed is cheap (Flickr30k, 1,000 images x
#: 5,000 captions, under a second), seed 0 where a seed costs about 15 s (COCO, 5,000 x 25,000: all five seeds of both
#: COCO presets took about 150 s of CI). The other seeds' statistics come from the committed per-seed file, which the
#: same script writes from the same function; every seed's generator path (seeded ``generate_split``) is recomputed
#: at the real sets' sizes below.
RECOMPUTED_FULL_SEEDS = {"flickr30k": None, "coco": (0,), "audiocaps-clap": None}


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["flickr30k", "coco", "audiocaps-clap"])
def test_the_synthetic_side_of_the_report_is_recomputed(preset, report, full_seeds):
    """Recompute the synthetic numbers of the report (same seeds) and compare: a regression check. Statistics at the
    real sets' sizes: every seed. Full-size statistics (:data:`RECOMPUTED_FULL_SEEDS`): the recomputed seeds must
    equal their rows of the per-seed file, and the report's means, sds and bands are computed from that file's rows."""
    rows = report[report["preset"] == preset]
    assert len(rows), f"no rows for {preset} in {REPORT_CSV.name}"
    others = [c[: -len(" mean")] for c in rows.columns if c.endswith(" mean") and isinstance(c, str)]
    others = [p for p in others if p != preset and rows[f"{p} mean"].notna().any()]
    seeds = range(int(rows["seeds"].iloc[0]))
    full_range = list(range(int(rows["full seeds"].iloc[0])))
    recompute = RECOMPUTED_FULL_SEEDS[preset] or full_range
    full = {}
    for p in [preset] + others:
        per = full_seeds[full_seeds["preset"] == p].sort_values("seed").reset_index(drop=True)
        assert list(per["seed"]) == full_range, f"{FULL_SEEDS_CSV.name}: the seeds of {p} are not the report's"
        got = cal.full_size_statistics(p, recompute)
        kept = per[per["seed"].isin(recompute)]
        np.testing.assert_allclose(got.to_numpy(), kept[list(got.columns)].to_numpy(), rtol=1e-6, atol=1e-6,
                                   err_msg=f"{p}: the full-size statistics changed; rerun scripts/calibrate_synthetic.py")
        full[p] = per.drop(columns=["preset", "seed"])
    tab = cal.calibration_table(preset, seeds=seeds, full_seeds=full_range, compare_with=others, full=full)
    assert list(tab["statistic"]) == list(rows["statistic"])
    for p in [preset] + others:
        np.testing.assert_allclose(tab[f"{p} mean"].to_numpy(), rows[f"{p} mean"].to_numpy(), rtol=1e-6, atol=1e-6,
                                   err_msg=f"{p}: the synthetic statistics changed; rerun scripts/calibrate_synthetic.py")
        assert list(tab[f"{p} within"]) == list(rows[f"{p} within"])


def test_within_means_within_the_band(report):
    for _, r in report.iterrows():
        half, ok = cal.band(r["statistic"], r["real"], r[f"{r['preset']} mean"], r[f"{r['preset']} sd"],
                            published=r["reference"] not in cal.REAL_STATISTICS)
        assert ok == bool(r[f"{r['preset']} within"]), (r["preset"], r["statistic"])
        assert half == pytest.approx(r[f"{r['preset']} band"])


def test_the_calibrated_presets_match_more_statistics_than_the_isotropic_ones(report):
    for preset in ("flickr30k", "coco"):
        rows = report[report["preset"] == preset]
        new, old = rows[f"{preset} within"].sum(), rows[f"{preset}-isotropic within"].sum()
        assert new > old, (preset, new, old)
        # regression check, re-set after issue 42's refit added the headroom statistics (seen: flickr30k 36 of 43,
        # coco 33 of 37; the misses are listed in data/calibration_synthetic.md, among them the raw t2i R@1)
        assert new >= 0.8 * len(rows), f"{preset}: only {new} of {len(rows)} statistics within their band"


def test_what_the_report_says_of_cocos_refit_is_what_its_table_shows(report):
    """The report's prose on coco's refit: it matches the match statistics and the full-size R@1 (both
    directions), and its text-to-image headroom lies above COCO-500's, outside the band. A refit that changes any of
    these must change the sentence (scripts/calibrate_synthetic.py, preset_section)."""
    text = (REPO / "data" / "calibration_synthetic.md").read_text()
    assert "it matches the match statistics and the full-size R@1 that the first fit missed, at the price of a " \
           "text-to-image headroom above COCO-500's" in text
    rows = report[report["preset"] == "coco"]
    within = {(r["statistic"], r["reference"]): bool(r["coco within"]) for _, r in rows.iterrows()}
    coco500 = "coco-val2017-500-clip-vitb16"
    assert within[("cap_match_rho", coco500)] and within[("img_match_rho", coco500)]
    assert within[("R1_t2i", "NNN Table 1")] and within[("R1_i2t", "NNN Table 2")]
    head = rows[(rows["statistic"] == "gain_nnn_t2i") & (rows["reference"] == coco500)].iloc[0]
    assert head["coco mean"] > head["real"] and not head["coco within"]


def test_the_report_summary_and_tables_are_the_csv(report):
    """The summary counts and the presets' tables of data/calibration_synthetic.md (between the presets' markers) are
    the csv's rows: a table row per statistic, bold where outside the band, and the not-fitted match line's means."""
    cs = _calibrate_script()
    text = (REPO / "data" / "calibration_synthetic.md").read_text()
    section = text[text.index(cs.PRESETS_START):text.index(cs.PRESETS_END)]
    match = next(ln for ln in section.splitlines() if "(`cap_match_rho`; synthetic mean" in ln)
    for preset, others in cs.REPORTED.items():
        rows = report[report["preset"] == preset]
        assert (f"- `{preset}`: {int(rows[f'{preset} within'].sum())} of {len(rows)} statistics within their band, "
                f"{int(rows[f'{preset} within tolerance'].sum())} within the tolerance alone") in section
        table = section[section.index(f"## Preset `{preset}`"):].split("\n\n")[1].splitlines()[2:]
        assert len(table) == len(rows)
        assert sum("| **no** (" in ln for ln in table) == int((~rows[f"{preset} within"].astype(bool)).sum())
        rho = rows[rows["statistic"] == "cap_match_rho"]
        fitted = cs.cal.fitted(preset, "cap_match_rho")
        assert len(rho) == 1 and bool(rho.iloc[0]["fitted"]) is fitted
        assert ("*(not fitted)*" in table[list(rows["statistic"]).index("cap_match_rho")]) is not fitted
        r = rho.iloc[0]
        assert (f"`{preset}` {r[f'{preset} mean']:+.2f}" + "".join(f", `{o}` {r[f'{o} mean']:+.2f}" for o in others)
                + f" against {r['real']:+.2f} ({r['reference']}; {'fitted' if fitted else 'not fitted'})") in match


def test_presets_only_rewrites_its_section_and_its_csv_rows(tmp_path, monkeypatch):
    """``--presets-only``: the text between the presets' markers and the image presets' csv rows are replaced, the
    rest of the report and the video / audio rows are kept, and the full-size seeds are the per-seed file's."""
    cs = _calibrate_script()
    out, csv = tmp_path / "r.md", tmp_path / "r.csv"
    out.write_text(f"# R\n\n{cs.PRESETS_START}\nold\n{cs.PRESETS_END}\n\n## The size of the gains\nkept\n")
    pd.DataFrame({"preset": ["flickr30k", "msrvtt"], "x": [1.0, 2.0]}).to_csv(csv, index=False)
    pd.DataFrame({"preset": ["flickr30k"] * 2, "seed": [0, 3]}).to_csv(cs.full_seeds_csv(csv), index=False)
    seen = {}

    def fake(seeds, full_seeds, per_seed):
        seen.update(seeds=list(seeds), full=full_seeds, rows=len(per_seed))
        return [cs.PRESETS_START, "new", cs.PRESETS_END], [pd.DataFrame({"preset": ["coco"], "x": [3.0]})]

    monkeypatch.setattr(cs, "preset_section", fake)
    text = cs.presets_only(out, csv, range(2))
    assert text == out.read_text() == (f"# R\n\n{cs.PRESETS_START}\nnew\n{cs.PRESETS_END}\n\n"
                                       "## The size of the gains\nkept\n")
    assert seen == {"seeds": [0, 1], "full": [0, 3], "rows": 2}
    got = pd.read_csv(csv)
    assert list(got["preset"]) == ["coco", "msrvtt"] and list(got["x"]) == [3.0, 2.0]


def test_band_rule():
    # tolerance or two seed sds, whichever is wider; relative tolerances scale with the reference
    assert cal.band("matched_mean", 0.30, 0.32, 0.001) == (pytest.approx(0.03), True)
    assert cal.band("matched_mean", 0.30, 0.34, 0.001)[1] is False
    assert cal.band("matched_mean", 0.30, 0.34, 0.03) == (pytest.approx(0.06), True)
    assert cal.band("img_participation_ratio", 40.0, 49.0, 0.0) == (pytest.approx(10.0), True)
    assert cal.band("max_N1_t2i", 100.0, 160.0, float("nan"), published=True)[1] is False


MEDIA = ["msrvtt", "didemo", "audiocaps", "clotho"]


@pytest.mark.slow
@pytest.mark.parametrize("preset", MEDIA)
def test_the_video_and_audio_rows_are_recomputed(preset, report):
    """The video / audio presets' rows of the report, recomputed (same seeds): a regression check (~5 s each)."""
    rows = report[report["preset"] == preset]
    assert len(rows), f"no rows for {preset} in {REPORT_CSV.name}: run scripts/calibrate_synthetic.py --media-only"
    tab = cal.media_calibration_table(preset, seeds=range(int(rows["seeds"].iloc[0])))
    assert list(tab["statistic"]) == list(rows["statistic"])
    np.testing.assert_allclose(tab[f"{preset} mean"].to_numpy(), rows[f"{preset} mean"].to_numpy(), rtol=1e-6,
                               atol=1e-6, err_msg=f"{preset}: rerun scripts/calibrate_synthetic.py --media-only")
    assert list(tab[f"{preset} within"]) == list(rows[f"{preset} within"])


def test_video_and_audio_presets_are_within_the_band_of_every_fitted_baseline(report):
    """Acceptance: the synthetic raw R@1 of each video / audio preset is within the band used for the image
    presets (3 points, or two seed sds) of each published baseline it was fitted to."""
    rows = report[report["preset"].isin(MEDIA)]
    assert set(rows["preset"]) == set(MEDIA)
    fitted = rows[rows["fitted"].astype(bool)]
    assert set(fitted[fitted["statistic"].str.startswith("R1_")]["statistic"]) == {"R1_t2v", "R1_v2t", "R1_t2a"}
    for _, r in fitted.iterrows():
        assert bool(r[f"{r['preset']} within"]), (r["preset"], r["statistic"], r["real"], r[f"{r['preset']} mean"])


# ------------------------------------------------------------------------------------------------ headroom
def _oracle_gains(images, captions, c2i, split, k=16, alpha=0.75, tau=0.02, n_images=None):
    """The headroom protocol written out independently in dense float64 numpy (the papers' equations): NNN
    ``s - alpha * mean(top-k bank scores of the target)``, IS ``s - tau * logsumexp(bank scores / tau)``; R@1 as
    "the positive ranks first" (t2i: the caption's image; i2t: any caption of the image)."""
    from scipy.special import logsumexp

    img = images / np.linalg.norm(images, axis=1, keepdims=True)
    cap = captions / np.linalg.norm(captions, axis=1, keepdims=True)
    n = len(img)
    size = n if n_images is None else n_images
    perm = np.random.default_rng(split).permutation(n)[:size]
    test, ref = np.sort(perm[: size // 2]), np.sort(perm[size // 2:])
    remap = -np.ones(n, int)
    remap[test] = np.arange(len(test))
    qm = remap[c2i] >= 0
    in_ref = np.isin(c2i, ref)
    out = {}
    for d in ("t2i", "i2t"):
        if d == "t2i":
            s, bank = cap[qm] @ img[test].T, cap[in_ref] @ img[test].T
            right = lambda sc: np.mean(sc.argmax(1) == remap[c2i[qm]])
        else:
            s, bank = img[test] @ cap[qm].T, img[ref] @ cap[qm].T
            right = lambda sc: np.mean(remap[c2i[qm]][sc.argmax(1)] == np.arange(len(test)))
        kk = min(k, len(bank))
        raw = 100 * right(s)
        nnn = 100 * right(s - alpha * np.sort(bank, axis=0)[-kk:].mean(0))
        is_ = 100 * right(s - tau * logsumexp(bank / tau, axis=0))
        out.update({f"gain_nnn_{d}": nnn - raw, f"gain_is_{d}": is_ - raw, f"R1_half_{d}": raw})
    return out


def _hubby_set(seed: int, n: int, captions_per_image: int, d: int = 24):
    """``(images, captions, caption_to_image)`` with hubs: a shared direction of varying weight in every image, and
    captions that are noisy copies of their image."""
    rng = np.random.default_rng(seed)
    hub = rng.standard_normal(d)
    img = rng.standard_normal((n, d)) + rng.gamma(1.0, 1.5, (n, 1)) * hub
    c2i = np.repeat(np.arange(n), captions_per_image)
    return img, img[c2i] + 1.6 * rng.standard_normal((n * captions_per_image, d)), c2i


@pytest.mark.parametrize("captions_per_image", [1, 3])
def test_headroom_statistics_equal_an_independent_dense_oracle(captions_per_image):
    """The headroom of a fixed correction (NNN k=16, alpha=0.75; IS tau=0.02) through hubnorm's normalizers equals
    the same protocol written out in numpy, split by split, on a set with hubs (a shared direction of varying
    weight) and one or several captions per image."""
    n = 60
    img, cap, c2i = _hubby_set(7, n, captions_per_image)
    for split in range(4):
        got = cal.headroom_statistics(img, cap, c2i, splits=[split])
        want = _oracle_gains(img, cap, c2i, split)
        assert set(got) == set(want)
        for key in want:
            assert got[key] == pytest.approx(want[key], abs=1e-9), (split, key)
    # a mean over splits is the mean of the per-split values
    many = cal.headroom_statistics(img, cap, c2i, splits=range(4))
    per = [_oracle_gains(img, cap, c2i, s)["gain_nnn_t2i"] for s in range(4)]
    assert many["gain_nnn_t2i"] == pytest.approx(np.mean(per), abs=1e-9)
    assert any(abs(v) > 0 for v in per), "the oracle problem must have hubs for NNN to move"
    # a smaller set drawn from the same one: the first n_images of each split's permutation, halved; captions of
    # the images left out are in neither the queries nor the bank
    for split in range(3):
        got = cal.headroom_statistics(img, cap, c2i, splits=[split], n_images=31)
        want = _oracle_gains(img, cap, c2i, split, n_images=31)
        for key in want:
            assert got[key] == pytest.approx(want[key], abs=1e-9), (split, key)
    # the captions of the images left out are neither queries nor bank: the tasks hold exactly the drawn images'
    # captions (caught by hand, not by the oracle, which draws the same way)
    import hubnorm.retrieval as retrieval

    seen = []
    real_build = retrieval.build_tasks

    def spy(images, captions, c2i_, **kw):
        seen.append((len(images), len(captions), len(kw["image_bank"]), len(kw["caption_bank"])))
        return real_build(images, captions, c2i_, **kw)

    retrieval.build_tasks = spy
    try:
        cal.headroom_statistics(img, cap, c2i, splits=[0], n_images=31)
    finally:
        retrieval.build_tasks = real_build
    per = captions_per_image
    assert seen == [(15, 15 * per, 16, 16 * per)]
    by_size = cal.headroom_by_size(img, cap, c2i, [20, 31, n], splits=range(3))
    assert by_size["n_images"].tolist() == [20, 31, n]
    assert by_size.iloc[-1]["gain_nnn_t2i"] == pytest.approx(
        cal.headroom_statistics(img, cap, c2i, splits=range(3))["gain_nnn_t2i"], abs=1e-12)
    per_split = [_oracle_gains(img, cap, c2i, s, n_images=31)["gain_is_t2i"] for s in range(3)]
    assert by_size.iloc[1]["gain_is_t2i"] == pytest.approx(np.mean(per_split), abs=1e-9)
    assert by_size.iloc[1]["gain_is_t2i split sd"] == pytest.approx(np.std(per_split, ddof=1), abs=1e-9)


def test_headroom_statistics_refuse_what_they_cannot_split():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="at least 4 images"):
        cal.headroom_statistics(rng.standard_normal((3, 8)), rng.standard_normal((3, 8)), np.arange(3))
    with pytest.raises(ValueError, match="splits must name"):
        cal.headroom_statistics(rng.standard_normal((8, 8)), rng.standard_normal((8, 8)), np.arange(8), splits=[])
    for bad in (3, 9, 4.0, True, "8"):
        with pytest.raises(ValueError, match="n_images must be a whole number from 4 to the 8 images"):
            cal.headroom_statistics(rng.standard_normal((8, 8)), rng.standard_normal((8, 8)), np.arange(8),
                                    n_images=bad)


def test_headroom_statistics_are_in_the_table_of_statistics_with_their_tolerance():
    """The four headroom statistics are fitted statistics with a tolerance of 1.5 R@1 points (set before any fit),
    and every real reference records them."""
    for key in ("gain_nnn_t2i", "gain_is_t2i", "gain_nnn_i2t", "gain_is_i2t"):
        assert cal.STATISTICS[key][1:] == (1.5, "abs") and key not in cal.NOT_FITTED
        for ref in cal.REAL_STATISTICS.values():
            assert np.isfinite(ref["statistics"][key])
    assert cal.HEADROOM == (("nnn", {"alpha": 0.75, "k": 16}), ("is", {"tau": 0.02}))


def test_the_papers_gains_compared_out_of_sample_are_the_published_ones():
    """Every row of PAPER_GAINS names a published raw and normalized R@1 (no missing row: a typo in a table id or a
    setting would silently drop a comparison)."""
    from hubnorm.media import MEDIA_PRESETS

    for preset, d, method, params, bank, paper, table, model, setting in cal.PAPER_GAINS:
        dataset = MEDIA_PRESETS[preset].dataset if preset in MEDIA_PRESETS else preset
        raw, pub = cal._published_gain(paper, table, model, dataset, d, method, setting)
        assert np.isfinite(raw) and np.isfinite(pub), (preset, d, method, table, setting)
    methods = {(p, m) for p, _, m, *_ in cal.PAPER_GAINS}
    for preset in ("flickr30k", "coco"):
        assert {(preset, m) for m in ("nnn", "is", "sn", "dbsn")} <= methods
    assert {("msrvtt", "sn"), ("audiocaps", "sn"), ("msrvtt", "dbsn")} <= methods


def test_the_spread_statistics_are_fitted_where_the_report_says_so():
    """The four per-item spread statistics (added after the first image-text fits) carry tolerances set before any
    fit, are recorded for every real reference and are part of every preset's refit (issue 42), as the report
    says; no preset is listed as fitted without a statistic."""
    spread = {"img_centrality_sd": (0.25, "rel"), "cap_centrality_sd": (0.25, "rel"), "img_spread_cv": (0.04, "abs"),
              "cap_spread_cv": (0.04, "abs")}
    assert cal.SPREAD_STATISTICS == set(spread)
    assert cal.NOT_FITTED_FOR == {}
    for key, tol in spread.items():
        assert cal.STATISTICS[key][1:] == tol
        assert all(np.isfinite(ref["statistics"][key]) for ref in cal.REAL_STATISTICS.values())
        for preset in ("audiocaps-clap", "coco", "coco-isotropic", "flickr30k", "flickr30k-isotropic"):
            assert cal.fitted(preset, key)
    assert cal.fitted("flickr30k", "gain_nnn_t2i") and not cal.fitted("audiocaps-clap", "query_bank_gap")


def test_the_match_statistics_are_reported_and_fitted_for_every_preset():
    """How a pair's cosine follows its items' centrality (added after the first fits): the tolerance of the report's
    other Spearman correlations, recorded for every real reference, part of every preset's refit."""
    assert cal.MATCH_STATISTICS == {"cap_match_rho", "img_match_rho"}
    for key in cal.MATCH_STATISTICS:
        assert cal.STATISTICS[key][1:] == cal.STATISTICS["rho_N10_t2i"][1:] == (0.2, "abs")
        assert all(np.isfinite(ref["statistics"][key]) for ref in cal.REAL_STATISTICS.values())
        for preset in ("coco", "coco-isotropic", "flickr30k", "flickr30k-isotropic", "audiocaps-clap", "audiocaps"):
            assert cal.fitted(preset, key)
    assert cal.fitted("unknown", "cap_match_rho")   # a dataset no fit names: every statistic counts


def test_a_statistic_a_preset_was_fitted_without_is_marked_in_its_table(monkeypatch):
    """``NOT_FITTED_FOR`` (a statistic added after a preset's fit, until its refit): ``fitted`` says no for that
    preset's dataset only, and the other presets keep it."""
    monkeypatch.setattr(cal, "NOT_FITTED_FOR", {"flickr30k": cal.MATCH_STATISTICS})
    assert not cal.fitted("flickr30k", "cap_match_rho") and not cal.fitted("flickr30k-isotropic", "img_match_rho")
    assert cal.fitted("coco", "cap_match_rho") and cal.fitted("flickr30k", "img_spread_cv")


def _calibrate_script():
    return load_script("scripts/calibrate_synthetic.py", "calibrate_synthetic")


def _gains(rows):
    cols = ["notebook", "data", "direction", "method", "setting", "metric", "gain", "published gain", "ratio"]
    return pd.DataFrame([dict(zip(cols, r)) for r in rows]).assign(preset="flickr30k")


def test_the_report_shows_every_notebooks_r1_gains_only_with_the_metric_named(tmp_path, monkeypatch):
    """A median-rank row in the R@1 table read as an R@1 gain of +0.00 (notebook 08's rows in the report before):
    the section keeps the R@1 rows, names the metric, and a rerun replaces that section and nothing else."""
    script = _calibrate_script()
    gains = _gains([("08", "synthetic analog", "t2v", "is", "qa", "R@1", 9.1, 4.2, 9.1 / 4.2),
                    ("08", "synthetic analog", "t2v", "is", "qa", "MdR", 0.0, float("nan"), float("nan")),
                    ("01", "real: COCO", "t2i", "nnn", "bank", "R@1", 4.0, 5.8, 4.0 / 5.8)])
    lines = script.notebook_gains_section(pd.concat([gains, gains.assign(preset="flickr30k-isotropic")]))
    rows = [x for x in lines if x.startswith("| 0")]
    assert rows == ["| 08 | synthetic analog | t2v | is | qa | +4.20 | +9.10 | 2.17 |",
                    "| 01 | real: COCO | t2i | nnn | bank | +5.80 | +4.00 | 0.69 |"]
    assert "| published R@1 gain | R@1 gain | ratio |" in lines[5]
    assert "- synthetic analog: median ratio 2.17 over 1 gains" in "\n".join(lines)
    assert lines[0] == script.NB_GAINS_START and lines[-2] == script.NB_GAINS_END

    before = "# report\n\nintro\n\n## Every notebook's gains beside the published ones (the default run)\n\nold | MdR\n\n"
    after = "The numbers of the tables: `x.csv`.\n"
    out = tmp_path / "report.md"
    out.write_text(before + after)
    monkeypatch.setattr(script, "claims", lambda presets: (None, gains))
    first = script.notebook_gains_only(out)
    assert first.startswith("# report\n\nintro\n\n" + script.NB_GAINS_START) and first.endswith("\n\n" + after)
    assert "old | MdR" not in first and "+9.10" in first
    monkeypatch.setattr(script, "claims", lambda presets: (None, gains.assign(gain=[1.5, 0.0, 2.5])))
    second = script.notebook_gains_only(out)   # with the markers now: the section alone is replaced
    head, tail = first.split(script.NB_GAINS_START)[0], first.split(script.NB_GAINS_END)[1]
    assert second.startswith(head + script.NB_GAINS_START) and second.endswith(script.NB_GAINS_END + tail)
    assert "+1.50" in second and "+2.50" in second and "+9.10" not in second


def test_claims_only_rewrites_the_claims_and_the_notebook_gains_and_nothing_else(tmp_path, monkeypatch):
    """``--claims-only``: one run of the notebooks per claim preset; the claims table (one column per preset, the
    counts) and the notebook gains replace theirs, the rest of the report is kept; a report written before the
    claims' markers gains them, and a second run replaces the marked section alone."""
    script = _calibrate_script()
    cl = pd.DataFrame({"notebook": ["00", "00", "01", "01"], "claim": ["a", "a", "b", "b"],
                       "preset": ["flickr30k", "flickr30k-isotropic"] * 2,
                       "status": ["PASS", "DIFFERS", "DIFFERS", "DIFFERS"]})
    gains = _gains([("01", "synthetic analog", "t2i", "nnn", "bank", "R@1", 7.0, 5.8, 7.0 / 5.8)])
    seen = []
    monkeypatch.setattr(script, "claims", lambda presets: seen.append(list(presets)) or (cl, gains))
    head = "# report\n\n<!-- gains:start -->\nkept\n<!-- gains:end -->\n\n"
    old_claims = "## Which claims hold (looked at after the fit)\n\n| old | table |\n\nCounts: old\n\n"
    tail = ("<!-- notebook-gains:start -->\nold gains\n<!-- notebook-gains:end -->\n\n"
            "The numbers of the tables: `x.csv`.\n")
    out = tmp_path / "report.md"
    out.write_text(head + old_claims + tail)
    first = script.claims_only(out)
    assert seen == [script.CLAIM_PRESETS] == [["flickr30k", "flickr30k-isotropic"]]
    assert first.startswith(head + script.CLAIMS_START + "\n" + script.CLAIMS_HEADING)
    assert first.endswith(script.NB_GAINS_END + "\n\nThe numbers of the tables: `x.csv`.\n")
    assert "| 00 | a | PASS | DIFFERS |" in first and "| 01 | b | DIFFERS | DIFFERS |" in first
    assert "Counts: `flickr30k` 1 PASS / 1 DIFFERS; `flickr30k-isotropic` 0 PASS / 2 DIFFERS" in first
    assert "| old | table |" not in first and "Counts: old" not in first and "old gains" not in first
    assert "| 01 | synthetic analog | t2i | nnn | bank | +5.80 | +7.00 | 1.21 |" in first
    assert first.count(script.CLAIMS_START) == first.count(script.CLAIMS_END) == 1
    monkeypatch.setattr(script, "claims", lambda presets: (cl.assign(status="PASS"), gains.assign(gain=2.9)))
    second = script.claims_only(out)   # with the markers now: the marked sections alone are replaced
    assert second.startswith(head + script.CLAIMS_START) and second.count(script.CLAIMS_HEADING) == 1
    assert "Counts: `flickr30k` 2 PASS / 0 DIFFERS; `flickr30k-isotropic` 2 PASS / 0 DIFFERS" in second
    assert "+2.90" in second and "+7.00" not in second and out.read_text() == second


def test_the_gains_section_leaves_a_row_that_is_not_like_for_like_out_of_its_summary(tmp_path, monkeypatch):
    """The paper-size ratios' summary counts only like-for-like rows and names each row it leaves out (shown in the
    table all the same); ``--gains-only`` rewrites that section (and its csv) and nothing else, also in a report
    written before its markers."""
    script = _calibrate_script()
    cols = ["preset", "direction", "method", "params", "bank", "published", "published gain", "synthetic gain",
            "synthetic sd", "ratio", "not like for like"]
    gains = pd.DataFrame([dict(zip(cols, r)) for r in [
        ("flickr30k", "t2i", "nnn", "k=16", "b", "T1", 2.0, 3.0, float("nan"), 1.5, ""),
        ("coco", "i2t", "is", "tau=0.02", "qa", "T2", 4.0, 2.0, float("nan"), 0.5, ""),
        ("msrvtt", "t2v", "is", "tau=0.02", "qa", "T1", 1.0, 2.0, float("nan"), 2.0, ""),
        ("msrvtt", "t2v", "dbsn", "tau=0.01", "Bq=train", "T4", 1.0, 6.0, float("nan"), 6.0, "trained on it")]])
    matched = pd.DataFrame([{"preset": "coco", **{f"{k} {m}": 1.0 for k in (
        "R1_half_t2i", "gain_nnn_t2i", "gain_is_t2i", "R1_half_i2t", "gain_nnn_i2t", "gain_is_i2t")
        for m in ("mean", "sd")}}])
    monkeypatch.setattr(script.cal, "paper_size_gains", lambda seeds: gains)
    monkeypatch.setattr(script, "matched_size_gains", lambda seeds: matched)
    lines, rows = script.gain_section([0], [0], "r_gains.csv")
    text = "\n".join(lines)
    assert lines[0] == script.GAINS_START and lines[1] == script.GAINS_HEADING and lines[-1] == script.GAINS_END
    assert "- all: median ratio 1.50 over 3 published gains (range 0.50 to 2.00; 2 outside 0.67-1.5, 0 outside " \
           "0.33-3);" in text
    assert "- image-text presets: median ratio 1.00 over 2 published gains" in text
    assert "- video and audio presets: median ratio 2.00 over 1 published gains" in text
    assert "- not like for like, left out above: `msrvtt` t2v dbsn (Bq=train): ratio 6.00; trained on it." in text
    assert "| +1.00 | +6.00 (-) | 6.00 (*not like for like*) |" in text and "| 2.00 |" in text
    assert list(rows["section"]) == ["paper-size gains"] * 4 + ["matched-size headroom"]

    out, csv = tmp_path / "r.md", tmp_path / "r.csv"
    head = "# r\n\n<!-- presets:start -->\np\n<!-- presets:end -->\n\n"
    tail = script.SIZE_START + "\nsize\n" + script.SIZE_END + "\n\n" + script.MEDIA_START + "\nm\n"
    out.write_text(head + script.GAINS_HEADING + "\n\nold numbers\n\n" + tail)
    first = script.gains_only(out, csv, [0], [0])
    assert first == head + text + "\n\n" + tail and "old numbers" not in first
    assert len(pd.read_csv(tmp_path / "r_gains.csv")) == 5
    monkeypatch.setattr(script.cal, "paper_size_gains", lambda seeds: gains.assign(ratio=gains["ratio"] * 2))
    second = script.gains_only(out, csv, [0], [0])
    assert second.startswith(head + script.GAINS_START) and second.endswith(script.GAINS_END + "\n\n" + tail)
    assert "- all: median ratio 3.00 over 3" in second


def test_fit_refits_only_the_named_parameters_from_the_named_start(monkeypatch, capsys):
    """``--fit PRESET --free ... --start NAME=VALUE``: the others keep the preset's values (they go to ``fixed``)."""
    script = _calibrate_script()
    seen = {}

    def fake_fit(preset, start, fixed, maxfev, method, also_fit, diff_step):
        seen.update(preset=preset, start=start, fixed=fixed, maxfev=maxfev, method=method, diff_step=diff_step)
        return dict(start)

    monkeypatch.setattr(script, "fit", fake_fit)
    assert script.main(["--fit", "coco", "--free", "caption_noise", "caption_error_norm", "--start",
                        "caption_error_norm=0.5", "--maxfev", "7"]) == 0
    coco = script.PRESETS["coco"]
    assert seen["start"] == {"caption_noise": coco.caption_noise, "caption_error_norm": 0.5}
    assert seen["maxfev"] == 7 and seen["preset"] == "coco" and seen["method"] == "nelder-mead"
    assert "caption_noise" not in seen["fixed"] and seen["fixed"]["text_semantic"] == coco.text_semantic
    assert script.GeneratorConfig(**seen["fixed"], **seen["start"]).caption_error_norm == 0.5
    assert '"caption_error_norm": 0.5' in capsys.readouterr().out
    # without --free the fit is the committed preset's one: every fitted preset's refit freed the optional
    # parameters (FREE_EXTRA), from the preset's values; main() changes no module state, so one copy of the script
    # serves every call
    for preset in ("flickr30k", "coco"):
        assert script.main(["--fit", preset, "--maxfev", "3"]) == 0
        cfg = script.PRESETS[preset]
        assert list(seen["start"]) == [f[0] for f in script.FREE] + ["caption_error_norm", "caption_semantic_sigma"]
        assert len(seen["fixed"]) + 21 == len(cfg.to_dict())
        for name in ("caption_error_norm", "caption_semantic_sigma"):
            assert seen["start"][name] == getattr(cfg, name) != 0.0 and name not in seen["fixed"]
    assert seen["diff_step"] == script.DIFF_STEP == 0.1
    assert script.main(["--fit", "flickr30k", "--free", "caption_semantic_sigma", "--maxfev", "3"]) == 0
    assert seen["start"] == {"caption_semantic_sigma": script.PRESETS["flickr30k"].caption_semantic_sigma}
    assert "caption_semantic_sigma" not in seen["fixed"] and len(seen["fixed"]) + 1 == len(coco.to_dict())
    assert script.main(["--fit", "coco", "--maxfev", "3", "--method", "least-squares", "--diff-step", "0.3"]) == 0
    assert seen["method"] == "least-squares" and seen["diff_step"] == 0.3
    assert script.main(["--fit", "audiocaps-clap", "--maxfev", "3"]) == 0   # its geometry frees the two means too
    assert list(seen["start"]) == [f[0] for f in script.FREE] + ["image_mean", "text_mean", "caption_error_norm",
                                                                 "caption_semantic_sigma"]


def test_also_fit_adds_statistics_the_committed_preset_was_fitted_without(monkeypatch, capsys):
    """``--also-fit``: the named statistics join the objective's terms (the others not fitted stay out); a statistic
    that is already fitted, or not one, is refused by name. (Every committed preset is fitted with the match
    statistics now: flickr30k is made to be one fitted without them, as it was before its refit.)"""
    script = _calibrate_script()
    monkeypatch.setattr(script.cal, "NOT_FITTED_FOR", {"flickr30k": script.cal.MATCH_STATISTICS})
    ref = {"captions_per_image": 1, "n_images": 4,
           "statistics": {"matched_mean": 0.30, "cap_match_rho": -0.10, "img_match_rho": 0.20, "query_bank_gap": 0.5}}
    monkeypatch.setattr(script.cal, "references", lambda preset: [("real", ref, set(ref["statistics"]))])
    monkeypatch.setattr(script.cal, "config_statistics", lambda cfg, n, seeds: pd.DataFrame(
        [{"matched_mean": 0.33, "cap_match_rho": 0.30, "img_match_rho": 0.20, "query_bank_gap": 0.4}] * len(seeds)))
    monkeypatch.setattr(script, "_full_stats", lambda preset, cfg: {})
    monkeypatch.setattr(script.cal, "_published", lambda kind: {})
    assert script.residuals("flickr30k", script.PRESETS["flickr30k"]) == {"real:matched_mean": pytest.approx(1.0)}
    seen = {}
    monkeypatch.setattr(script, "fit", lambda preset, start, fixed, maxfev, method, also_fit, diff_step: seen.update(
        terms=script.residuals(preset, script.PRESETS[preset], also_fit=also_fit)) or dict(start))
    assert script.main(["--fit", "flickr30k", "--free", "caption_noise", "--also-fit", "cap_match_rho",
                        "--maxfev", "1"]) == 0
    assert seen["terms"] == {"real:matched_mean": pytest.approx(1.0), "real:cap_match_rho": pytest.approx(2.0)}
    # the statistics are an argument of this one fit: the next call without them has its own objective again
    assert script.main(["--fit", "flickr30k", "--free", "caption_noise", "--maxfev", "1"]) == 0
    assert seen["terms"] == {"real:matched_mean": pytest.approx(1.0)}
    for bad in ("matched_mean", "R1_t2i_typo"):
        with pytest.raises(SystemExit):
            _calibrate_script().main(["--fit", "flickr30k", "--also-fit", bad, "--maxfev", "1"])
        assert f"--also-fit: ['{bad}'] are not statistics flickr30k is fitted without" in capsys.readouterr().err
    with pytest.raises(SystemExit):   # coco's refit includes the match statistics: nothing to add
        _calibrate_script().main(["--fit", "coco", "--also-fit", "cap_match_rho", "--maxfev", "1"])
    assert "--also-fit: ['cap_match_rho'] are not statistics coco is fitted without" in capsys.readouterr().err


@pytest.mark.parametrize("preset", ["flickr30k", "audiocaps-clap"])
def test_every_statistic_also_fit_offers_is_measured_by_the_fit(monkeypatch, preset):
    """Each statistic that ``--also-fit`` accepts for ``preset`` (every one its committed fit was without, the bank
    statistics included) becomes a finite term of the objective: the fit measures what the report measures
    (``cal.config_statistics``), never a subset that fails on the first evaluation. Small real sizes, one seed."""
    script = _calibrate_script()
    small = [(name, {**ref, "n_images": 40}, stats) for name, ref, stats in script.cal.references(preset)]
    monkeypatch.setattr(script.cal, "references", lambda p: small)
    monkeypatch.setattr(script, "_full_stats", lambda p, cfg: {
        k: v for k, (v, _) in script.cal._published(script.cal._kind(p)).items()})
    offered = {k for k in script.cal.STATISTICS if not script.cal.fitted(preset, k)}
    measured = {k for _, ref, stats in small for k in ref["statistics"] if k in stats}
    assert {"query_bank_gap", "bank_gallery_gap"} <= offered & measured
    terms = script.residuals(preset, script.PRESETS[preset].replace(dim=32, latent_dim=8), also_fit=offered,
                             seeds=(0,))
    fitted_now = {k.split(":", 1)[1] for k in terms if not k.startswith("published:")}
    assert offered & measured <= fitted_now
    assert all(np.isfinite(v) for v in terms.values())


#: tolerances of the stand-in statistics (one per free parameter of the tests below)
_TOL = {"caption_noise": 1.0, "bias_std": 0.02, "caption_shared": 0.1}


def _quadratic_residuals(target):
    """A stand-in for ``residuals``: each free parameter's distance from ``target`` in tolerances (:data:`_TOL`),
    and one statistic far off (30 tolerances) whatever the parameters, which the cap must keep from dominating."""
    def residuals(preset, cfg, also_fit=frozenset()):
        out = {name: (getattr(cfg, name) - value) / _TOL[name] for name, value in target.items()}
        return {**out, "wild": 30.0}
    return residuals


@pytest.mark.parametrize("method", ["nelder-mead", "least-squares", "pattern"])
def test_fit_methods_find_a_known_optimum_within_the_evaluation_budget(method, monkeypatch, capsys):
    script = _calibrate_script()
    target = {"caption_noise": 3.0, "bias_std": 0.02, "caption_shared": 0.4}
    monkeypatch.setattr(script, "residuals", _quadratic_residuals(target))
    coco = script.PRESETS["coco"]
    start = {"caption_noise": 6.0, "bias_std": 0.1, "caption_shared": 0.7}
    fixed = {k: v for k, v in coco.to_dict().items() if k not in start}
    calls = []
    inner = script.residuals
    monkeypatch.setattr(script, "residuals", lambda p, c, also_fit: calls.append(1) or inner(p, c, also_fit=also_fit))
    got = script.fit("coco", start, fixed, 400, method)
    assert len(calls) <= 400
    for name, value in target.items():
        assert got[name] == pytest.approx(value, abs=0.2 * _TOL[name])   # within a fifth of a tolerance
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("objective")]
    values = [float(ln.split()[1]) for ln in lines]
    assert values == sorted(values, reverse=True) and values[-1] < values[0]   # only improvements are printed
    assert values[-1] == pytest.approx(25.0, abs=0.1)   # the wild statistic costs its cap (5 ** 2), no more


def test_fit_stops_at_maxfev_and_returns_the_best_point_seen(monkeypatch, capsys):
    script = _calibrate_script()
    monkeypatch.setattr(script, "residuals", _quadratic_residuals({"caption_noise": 3.0, "bias_std": 0.02}))
    coco = script.PRESETS["coco"]
    start = {"caption_noise": 6.0, "bias_std": 0.1}
    fixed = {k: v for k, v in coco.to_dict().items() if k not in start}
    for method in script.FIT_METHODS:
        calls = []
        inner = script.residuals
        monkeypatch.setattr(script, "residuals", lambda p, c, also_fit, inner=inner: calls.append(c) or inner(
            p, c, also_fit=also_fit))
        got = script.fit("coco", start, fixed, 5, method)
        monkeypatch.setattr(script, "residuals", inner)
        assert len(calls) == 5, method
        assert all(a != b for a, b in zip(calls, calls[1:])), method   # no point evaluated twice in a row
        last = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("objective")][-1]
        assert json.loads(last[last.index("{"):]) == {k: round(v, 4) for k, v in got.items()}


def test_the_least_squares_jacobian_steps_by_diff_step_in_logistic_coordinates(monkeypatch, capsys):
    """``diff_step`` reaches scipy as the forward-difference step of every logistic coordinate (scipy's step is
    relative to ``max(1, |x|)``, so the absolute step is ``diff_step`` whatever the start)."""
    from scipy import optimize

    script = _calibrate_script()
    monkeypatch.setattr(script, "residuals", _quadratic_residuals({"caption_noise": 3.0, "bias_std": 0.02}))
    coco = script.PRESETS["coco"]
    start = {"caption_noise": 6.0, "bias_std": 0.2}   # logistic coordinates above 1 in magnitude
    fixed = {k: v for k, v in coco.to_dict().items() if k not in start}
    seen = {}
    monkeypatch.setattr(optimize, "least_squares", lambda fun, x0, **kw: seen.update(x0=x0, **kw))
    for step in (0.1, 0.3):
        script.fit("coco", start, fixed, 5, "least-squares", diff_step=step)
        assert np.all(np.abs(seen["x0"]) > 1)
        assert seen["diff_step"] * np.maximum(1.0, np.abs(seen["x0"])) == pytest.approx(np.full(2, step))


def test_compass_search_descends_a_staircase_that_a_jacobian_cannot_see():
    """A quadratic bowl rounded to whole units (flat between steps, as R@1 over a small set is): compass search
    reaches the bowl's bottom step, halving its step only after a sweep without a move, and stops below the smallest
    step; it never accepts a move that does not lower the objective."""
    script = _calibrate_script()
    target = np.array([1.3, -0.7, 0.4])
    seen = []

    staircase_values = {}

    def staircase(x):
        value = float(np.floor(4 * np.sum((x - target) ** 2)))
        seen.append((x.copy(), value))
        staircase_values[tuple(x)] = value
        return value

    x = script.compass_search(staircase, np.zeros(3), step=0.4, min_step=0.05)
    trace = list(seen)
    assert staircase(x) == 0.0 and np.all(np.abs(x - target) < 0.5)
    assert min(v for _, v in trace) == 0.0
    # every point tried is the current point moved along one coordinate by the current step; the steps used are
    # 0.4 halved down to 0.05 and no further, in that order
    used = []
    x_cur = np.zeros(3)
    for y, value in trace[1:]:
        (i,), = np.nonzero(y != x_cur) if np.count_nonzero(y != x_cur) == 1 else pytest.fail("not a compass move")
        used.append(round(abs(float(y[i] - x_cur[i])), 6))
        if value < staircase_values[tuple(x_cur)]:
            x_cur = y
    assert used == sorted(used, reverse=True) and set(used) == {0.4, 0.2, 0.1, 0.05}
    # with the objective flat around x0 (no step lowers it) the search only halves its step: 3 coordinates x 2
    # signs per sweep, steps 0.4, 0.2, 0.1, 0.05, then it stops
    calls = []
    script.compass_search(lambda y: calls.append(1) or 1.0, np.zeros(3), step=0.4, min_step=0.05)
    assert len(calls) == 1 + 4 * 6
    for step, min_step in ((0.4, 0.0), (0.1, 0.2), (float("inf"), 0.1), (0.4, float("nan"))):
        with pytest.raises(ValueError, match="compass_search needs 0 < min_step <= step"):
            script.compass_search(lambda y: 1.0, np.zeros(3), step=step, min_step=min_step)


def test_fit_checks_its_method_and_budget():
    script = _calibrate_script()
    with pytest.raises(ValueError, match=r"method must be one of \('nelder-mead', 'least-squares', 'pattern'\); "
                                         "got 'lm'"):
        script.fit("coco", {}, {}, 10, "lm")
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="maxfev .* must be a positive integer"):
            script.fit("coco", {}, {}, bad)
    for bad in (0, -0.1, 2.5, float("nan"), True, "0.3"):
        with pytest.raises(ValueError, match=r"diff_step \(the least-squares fit's difference step"):
            script.fit("coco", {}, {}, 10, "least-squares", diff_step=bad)
    with pytest.raises(ValueError, match=r"start: \['hub_scale'\] are not parameters a fit can free"):
        script.fit("coco", {"hub_scale": 0.1}, {}, 10)
    with pytest.raises(ValueError, match="start: no parameters to fit"):
        script.fit("coco", {}, {}, 10)


@pytest.mark.parametrize("method", ["nelder-mead", "least-squares", "pattern"])
def test_fit_hands_its_statistics_to_every_evaluation_and_refuses_an_invalid_start(method, monkeypatch):
    script = _calibrate_script()
    got = []

    def residuals(preset, cfg, also_fit=frozenset()):
        got.append(also_fit)
        return {"a": (cfg.caption_noise - 3.0) / 1.0}

    monkeypatch.setattr(script, "residuals", residuals)
    coco = script.PRESETS["coco"]
    fixed = {k: v for k, v in coco.to_dict().items() if k != "caption_noise"}
    script.fit("coco", {"caption_noise": 5.0}, fixed, 6, method, also_fit=["cap_match_rho"])
    assert got and all(a == frozenset({"cap_match_rho"}) for a in got)

    def invalid(preset, cfg, also_fit=frozenset()):
        raise ValueError("not a configuration")

    monkeypatch.setattr(script, "residuals", invalid)
    with pytest.raises(ValueError, match="start: the start point of coco's fit is not a valid generator configuration"):
        script.fit("coco", {"caption_noise": 5.0}, fixed, 6, method)


def test_capped_residuals_are_the_identity_near_zero_and_bounded_by_the_cap():
    script = _calibrate_script()
    r = np.array([-1e-3, 0.0, 0.5, 4.0, 30.0, -1e6])
    c = script.capped(r)
    assert c[:3] == pytest.approx(r[:3], rel=0.01)
    assert np.all(np.abs(c) <= script.RESIDUAL_CAP) and c[-1] == pytest.approx(-script.RESIDUAL_CAP)
    assert np.all(np.diff(script.capped(np.linspace(-50, 50, 101))) > 0)   # monotone: the order of residuals kept


def test_capped_square_sum_by_hand():
    script = _calibrate_script()
    cap2 = script.RESIDUAL_CAP ** 2
    assert script.capped_square_sum(np.array([1.0, -2.0, 0.5])) == pytest.approx(1 + 4 + 0.25)
    assert script.capped_square_sum(np.array([3.0, -100.0, script.RESIDUAL_CAP + 1e-9])) == pytest.approx(9 + 2 * cap2)
    assert script.capped_square_sum(np.array([])) == 0.0


@pytest.mark.parametrize("argv, message", [
    (["--free", "hub_scale"],
     r"--free: \['hub_scale'\] are not free parameters of coco; choose from \['spectrum_decay'"),
    (["--start", "hub_scale=1"], r"--start: 'hub_scale' is not among the parameters being fitted \['spectrum_decay'"),
    (["--free", "caption_noise", "--start", "caption_noise=big"], r"--start: 'caption_noise=big' is not NAME=NUMBER"),
    (["--method", "least-squares", "--diff-step", "0"], r"--diff-step: diff_step .* must be a number in \(0, 2\]"),
    (["--diff-step", "x"], r"--diff-step: invalid float value: 'x'"),
    (["--method", "pattern", "--diff-step", "0.3"], r"--diff-step is the least-squares fit's difference step; "
                                                     r"--method pattern takes none"),
    (["--diff-step", "0.1"], r"--diff-step is the least-squares fit's difference step; --method nelder-mead takes "
                             r"none"),   # even at the default value: named beside another method, it is a mistake
])
def test_fit_options_name_the_parameter_that_is_wrong(argv, message, monkeypatch, capsys):
    script = _calibrate_script()
    monkeypatch.setattr(script, "fit", lambda *a: pytest.fail("fit must not start"))
    with pytest.raises(SystemExit):
        script.main(["--fit", "coco", *argv])
    assert re.search(message, capsys.readouterr().err)


def test_the_help_states_the_fit_defaults_it_uses(capsys):
    script = _calibrate_script()
    with pytest.raises(SystemExit):
        script.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"(default {script.DIFF_STEP}; for a step-shaped objective see --method pattern)" in text
    assert "{" not in text.split("--diff-step DIFF_STEP")[-1].split("--free")[0]   # no unformatted placeholder


def test_an_interrupted_report_write_leaves_the_old_report(tmp_path, monkeypatch):
    """The report files are replaced in one step: a write that fails midway leaves the previous file, no stray file."""
    script = _calibrate_script()
    out = tmp_path / "report.md"
    out.write_text("# the old report\n")
    script._write_text(out, "# the new report\n")
    assert out.read_text() == "# the new report\n"

    def broken(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr("os.replace", broken)
    with pytest.raises(OSError, match="disk full"):
        script._write_csv(pd.DataFrame({"a": [1]}), out)
    assert out.read_text() == "# the new report\n" and [p.name for p in tmp_path.iterdir()] == ["report.md"]


# ------------------------------------------------------------------------------------------------ headroom by size
SIZE_CSV = REPO / "data" / "calibration_synthetic_headroom_by_size.csv"


def _section_csv(path: Path, flag: str) -> pd.DataFrame:
    """The rows of one report section (a csv beside the report), or a failure naming the command that writes it."""
    if not path.exists():
        pytest.fail(f"{path} is missing: run scripts/calibrate_synthetic.py {flag}")
    return pd.read_csv(path)


@pytest.fixture(scope="module")
def by_size():
    return _section_csv(SIZE_CSV, "--headroom-by-size-only")


def test_headroom_by_size_at_the_fitted_size_is_the_main_tables(by_size, report):
    """The last size of every real set is the set itself: its real value is the recorded reference and its synthetic
    mean the main table's (the same seeds and splits), so the two sections cannot drift apart."""
    full = by_size[by_size["fitted size"]]
    assert len(full) == 4 * len({(p, r) for p, r in zip(by_size["preset"], by_size["reference"])})
    for _, row in full.iterrows():
        ref = cal.REAL_STATISTICS[row["reference"]]
        assert row["n_images"] == ref["n_images"] and row["captions per image"] == ref["captions_per_image"]
        assert row["real"] == pytest.approx(ref["statistics"][row["statistic"]], abs=5e-5)
        main = report[(report["preset"] == row["preset"]) & (report["statistic"] == row["statistic"])
                      & (report["reference"] == row["reference"])]
        assert len(main) == 1, (row["preset"], row["reference"], row["statistic"])
        assert row["synthetic mean"] == pytest.approx(main[f"{row['preset']} mean"].iloc[0], abs=1e-9)
    assert (by_size["n_images"] < by_size["reference"].map(lambda r: cal.REAL_STATISTICS[r]["n_images"])).sum() \
        == 4 * len(by_size[by_size["fitted size"]]) == len(by_size) - len(full)


def test_headroom_by_size_within_follows_the_band_rule_and_the_report_counts_it(by_size):
    for _, row in by_size.iterrows():
        half, within = cal.band(row["statistic"], row["real"], row["synthetic mean"], row["synthetic sd"])
        assert row["band"] == pytest.approx(half) and bool(row["within"]) == within
        assert bool(row["within tolerance"]) == (abs(row["synthetic mean"] - row["real"]) <= 1.5)
    text = (REPO / "data" / "calibration_synthetic.md").read_text()
    out = by_size[~by_size["fitted size"]]
    assert (f"- out of sample: {int(out['within'].sum())} of {len(out)} cells within the band (all sizes: "
            f"{int(by_size['within'].sum())} of {len(by_size)}); {int(out['within tolerance'].sum())} of {len(out)} "
            f"within the tolerance alone; the band is wider than the tolerance in {int((out['band'] > 1.5).sum())} "
            "of them;" in text)
    signs = {k: int((np.sign(g["real"]) == np.sign(g["synthetic mean"])).sum()) for k, g in out.groupby("statistic")}
    assert (f"IS, item query {signs['gain_is_i2t']} of {int((out['statistic'] == 'gain_is_i2t').sum())}" in text
            and f"NNN, text query {signs['gain_nnn_t2i']} of " in text)
    # the table: every cell is the csv's row, bold exactly where it is outside the band
    section = text[text.index("<!-- headroom-by-size:start -->"):text.index("<!-- headroom-by-size:end -->")]
    table = [ln for ln in section.splitlines() if ln.startswith("| `")]
    assert len(table) == len(by_size) // 4
    for ln, ((preset, name, size), part) in zip(table, by_size.groupby(["preset", "reference", "n_images"],
                                                                           sort=False)):
        cells = [c.strip() for c in ln.strip("|").split("|")]
        assert cells[:3] == [f"`{preset}`", name, f"{size} ({size // 2})" + (" (fitted)" if size ==
                                                                               cal.REAL_STATISTICS[name]["n_images"]
                                                                               else "")]
        for cell, stat in zip(cells[3:], cal.HEADROOM_STATISTICS):
            r = part[part["statistic"] == stat].iloc[0]
            want = f"{r['real']:+.2f} / {r['synthetic mean']:+.2f} ({r['synthetic sd']:.2f})"
            assert cell == (want if r["within"] else f"**{want}**"), (preset, name, size, stat)
    for name, part in by_size[by_size["statistic"] == "gain_nnn_t2i"].groupby("reference"):
        part = part.drop_duplicates("n_images").sort_values("n_images")
        assert (f"- `{name}` (real): NNN text-query headroom {part['real'].iloc[0]:+.2f} at "
                f"{int(part['n_images'].iloc[0])} images, {part['real'].iloc[-1]:+.2f} at "
                f"{int(part['n_images'].iloc[-1])}; one seeded split at that size gives it to within an sd of "
                f"{part['real split sd'].iloc[-1]:.2f} points" in text)


def test_headroom_by_size_synthetic_side_is_recomputed(by_size):
    """One out-of-sample cell of each default image-text preset, recomputed: the smallest COCO-500 size."""
    from hubnorm.synthetic import PRESETS, generate_split

    for preset in ("coco", "flickr30k"):
        row = by_size[(by_size["preset"] == preset) & (by_size["reference"] == "coco-val2017-500-clip-vitb16")
                      & (by_size["statistic"] == "gain_nnn_t2i")].sort_values("n_images").iloc[0]
        cfg = PRESETS[preset].replace(captions_per_image=1)
        per = [cal.headroom_statistics(*(lambda s: (s.images, s.captions, s.caption_to_image))(
            generate_split(cfg, "test", int(row["n_images"]), seed=seed)),
            splits=range(cal.HEADROOM_SPLITS["synthetic"]))["gain_nnn_t2i"] for seed in range(5)]
        assert row["synthetic mean"] == pytest.approx(np.mean(per), abs=1e-9)
        assert row["synthetic sd"] == pytest.approx(np.std(per, ddof=1), abs=1e-9)


@pytest.mark.shared_data
def test_headroom_by_size_real_side_is_what_the_real_embeddings_give(by_size, tmp_path):
    """The real curve of COCO-500 at its smallest size, recomputed from the release (200 seeded draws)."""
    rows = by_size[(by_size["reference"] == "coco-val2017-500-clip-vitb16") & (by_size["preset"] == "coco")]
    size = int(rows["n_images"].min())
    got = cal.headroom_by_size(*_real("coco-val2017-500-clip-vitb16", tmp_path), [size]).iloc[0]
    for _, row in rows[rows["n_images"] == size].iterrows():
        assert row["real"] == pytest.approx(got[row["statistic"]], abs=1e-9)
        assert row["real split sd"] == pytest.approx(got[f"{row['statistic']} split sd"], abs=1e-9)


def test_a_section_is_replaced_between_its_markers_or_inserted_before_the_named_line():
    cs = _calibrate_script()
    text = "# R\n\n<!-- a -->\nold\n<!-- b -->\n\n## Presets\n"
    assert cs.replace_section(text, ["<!-- a -->", "new", "<!-- b -->"], "<!-- a -->", "<!-- b -->", "## Presets") \
        == "# R\n\n<!-- a -->\nnew\n<!-- b -->\n\n## Presets\n"
    assert cs.replace_section("# R\n\n## Presets\n", ["<!-- a -->", "x", "<!-- b -->"], "<!-- a -->", "<!-- b -->",
                              "## Presets") == "# R\n\n<!-- a -->\nx\n<!-- b -->\n\n## Presets\n"


# ------------------------------------------------------------------------------------------------ query-aware gains
def _oracle_query_aware(images, captions, c2i, tau_is=0.02, tau_sn=0.01, n_iter=10):
    """The query-aware protocol written out in dense float64 numpy (DBSN Eq. (9), Alg. A1; IS as in
    :func:`_oracle_gains`): the bank is the test queries; SN's column potential after ``n_iter`` log-domain
    Sinkhorn-Knopp iterations from g = 0 is the offset."""
    from scipy.special import logsumexp

    img = images / np.linalg.norm(images, axis=1, keepdims=True)
    cap = captions / np.linalg.norm(captions, axis=1, keepdims=True)
    out = {}
    for d in ("t2i", "i2t"):
        if d == "t2i":
            s = cap @ img.T
            right = lambda sc: np.mean(sc.argmax(1) == c2i)
        else:
            s = img @ cap.T
            right = lambda sc: np.mean(c2i[sc.argmax(1)] == np.arange(len(img)))
        m, n = s.shape
        g = np.zeros(n)
        for _ in range(n_iter):
            f = tau_sn * np.log(1 / m) - tau_sn * logsumexp((s + g) / tau_sn, axis=1)
            g = tau_sn * np.log(1 / n) - tau_sn * logsumexp((s + f[:, None]) / tau_sn, axis=0)
        raw = 100 * right(s)
        out.update({f"R1_{d}": raw, f"qa_gain_is_{d}": 100 * right(s - tau_is * logsumexp(s / tau_is, axis=0)) - raw,
                    f"qa_gain_sn_{d}": 100 * right(s + g) - raw})
    return out


@pytest.mark.parametrize("captions_per_image", [1, 3])
def test_query_aware_gains_equal_an_independent_dense_oracle(captions_per_image):
    """IS and SN fitted on the test queries themselves, through hubnorm's normalizers, equal the dense float64
    formulas on a set with hubs (a shared direction of varying weight), one or several captions per image."""
    img, cap, c2i = _hubby_set(11, 50, captions_per_image)
    got, want = cal.query_aware_gains(img, cap, c2i), _oracle_query_aware(img, cap, c2i)
    assert set(got) == set(want)
    for k in want:
        assert got[k] == pytest.approx(want[k], abs=1e-9), k
    assert any(abs(v) > 0 for k, v in got.items() if k.startswith("qa_"))   # the corrections do change rankings


def test_query_aware_gains_refuse_what_does_not_index_the_images():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="at least 2 images"):
        cal.query_aware_gains(rng.standard_normal((1, 4)), rng.standard_normal((1, 4)), np.arange(1))
    with pytest.raises(ValueError, match="indexing all of them"):
        cal.query_aware_gains(rng.standard_normal((5, 4)), rng.standard_normal((5, 4)), np.array([0, 1, 2, 3, 3]))
    with pytest.raises(ValueError, match="one entry per caption"):
        cal.query_aware_gains(rng.standard_normal((3, 4)), rng.standard_normal((4, 4)), np.arange(3))


QA_CSV = REPO / "data" / "calibration_synthetic_query_aware.csv"


@pytest.fixture(scope="module")
def query_aware():
    return _section_csv(QA_CSV, "--query-aware-only")


def test_query_aware_section_is_its_csv_with_the_band_rule(query_aware):
    """Every row follows the band (1.5 points or two seed sds; R@1: the main tables' 5 points), the count line and
    every cell of the report's section are the csv's, bold exactly outside the band, R@1 shown only beside the set
    a preset imitates."""
    tab = query_aware
    for _, r in tab.iterrows():
        tol = cal.QA_TOLERANCE if r["statistic"].startswith("qa_") else cal.STATISTICS["R1_t2i"][1]
        assert r["band"] == pytest.approx(max(tol, 2 * r["synthetic sd"]))
        assert bool(r["within"]) == (abs(r["synthetic mean"] - r["real"]) <= r["band"])
    gains = tab[tab["statistic"].str.startswith("qa_")]
    assert set(gains["statistic"]) == {f"qa_gain_{m}_{d}" for m in ("is", "sn") for d in ("t2i", "i2t")}
    lent = tab[(tab["preset"] == "flickr30k") & (tab["reference"] == "coco-val2017-500-clip-vitb16")]
    assert len(lent) == 4 and not lent["statistic"].str.startswith("R1_").any()
    text = (REPO / "data" / "calibration_synthetic.md").read_text()
    section = text[text.index("<!-- query-aware:start -->"):text.index("<!-- query-aware:end -->")]
    assert (f"- {int(gains['within'].sum())} of {len(gains)} query-aware gains within the band; the synthetic gain "
            f"is larger than the real one in {int((gains['synthetic mean'] > gains['real']).sum())} of {len(gains)}."
            in section)
    table = [ln for ln in section.splitlines() if ln.startswith("| `")]
    groups = list(tab.groupby(["preset", "reference"], sort=False))
    assert len(table) == len(groups) == 5
    stats = ["R1_t2i", "qa_gain_is_t2i", "qa_gain_sn_t2i", "R1_i2t", "qa_gain_is_i2t", "qa_gain_sn_i2t"]
    for ln, ((preset, name), part) in zip(table, groups):
        cells = [c.strip() for c in ln.strip("|").split("|")]
        assert cells[:2] == [f"`{preset}`", name]
        for cell, stat in zip(cells[3:], stats):
            rows = part[part["statistic"] == stat]
            if rows.empty:
                assert cell == "-"
                continue
            r = rows.iloc[0]
            fmt = "+.2f" if stat.startswith("qa_") else ".1f"
            want = f"{r['real']:{fmt}} / {r['synthetic mean']:{fmt}} ({r['synthetic sd']:.2f})"
            assert cell == (want if r["within"] else f"**{want}**"), (preset, name, stat)


def test_query_aware_synthetic_side_is_recomputed(query_aware):
    """The coco preset at COCO-500's size, recomputed (5 seeds), and the audio preset's generator is its base
    geometry with its refitted parameters."""
    from hubnorm.media import MEDIA_PRESETS
    from hubnorm.synthetic import PRESETS, generate_split

    cs = _calibrate_script()
    assert cs._qa_config("audiocaps", 1) == PRESETS["audiocaps-clap"].replace(
        captions_per_image=1, **MEDIA_PRESETS["audiocaps"].overrides)
    rows = query_aware[(query_aware["preset"] == "coco")].set_index("statistic")
    per = pd.DataFrame([cal.query_aware_gains(*(lambda s: (s.images, s.captions, s.caption_to_image))(
        generate_split(PRESETS["coco"].replace(captions_per_image=1), "test", 500, seed=seed))) for seed in range(5)])
    for stat in per:
        assert rows.loc[stat, "synthetic mean"] == pytest.approx(per[stat].mean(), abs=1e-9), stat
        assert rows.loc[stat, "synthetic sd"] == pytest.approx(per[stat].std(ddof=1), abs=1e-9), stat


@pytest.mark.shared_data
@pytest.mark.parametrize("name", sorted(cal.REAL_STATISTICS))
def test_query_aware_real_side_is_what_the_real_embeddings_give(query_aware, name, tmp_path):
    got = cal.query_aware_gains(*_real(name, tmp_path))
    rows = query_aware[query_aware["reference"] == name]
    assert len(rows)
    for _, row in rows.iterrows():
        assert row["real"] == pytest.approx(got[row["statistic"]], abs=1e-9), row["statistic"]
