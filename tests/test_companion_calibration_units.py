"""Fast unit tests of hubnorm_companion.calibration: the band rule, the references, the published values, the
table assembly (with stand-in synthetic statistics), the headroom protocol and the full-size statistics against
independent dense float64 computations at small sizes.

Equivalent mutants left (no behaviour change possible), as seen in the ``--sample 3`` run:

- ``headroom_statistics``: ``evaluate(..., ks=(1,))`` -> ``evaluate(...)``: the default ks include 1, and only
  ``R@1`` is read.
- ``band``: ``sd if np.isfinite(sd) or True else 0.0``: ``max(half, 2 * nan)`` is ``half`` (a comparison with NaN is
  False, so ``max`` keeps its first argument).
- ``float("nan")`` -> ``float("NAN")`` (``calibration_table``, ``_published_gain``, ``paper_size_gains``): the same
  value.
- ``_paper_size_data``: ``n_val_images=0`` dropped: ``make_dataset`` draws each split from its own seeded stream
  (``generate_split(cfg, split, ...)``), so the extra val split only costs time; the returned data are the same.
"""

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from scipy.special import logsumexp

from hubnorm_companion import calibration as cal


# ------------------------------------------------------------------------------------------------ small rules
def test_kind_is_the_part_before_the_first_dash():
    assert cal._kind("flickr30k-isotropic") == "flickr30k"
    assert cal._kind("coco") == "coco"
    assert cal._kind("a-b-c") == "a"


def test_fitted_excludes_the_bank_gaps_and_what_each_committed_fit_was_without():
    assert cal.fitted("flickr30k", "matched_mean") is True
    assert cal.fitted("coco-isotropic", "gap") is True
    assert cal.fitted("coco", "bank_gallery_gap") is False
    assert cal.fitted("audiocaps", "query_bank_gap") is False
    for stat in ("img_centrality_sd", "cap_centrality_sd", "img_spread_cv", "cap_spread_cv", "cap_match_rho",
                 "img_match_rho"):   # every preset's refit (issue 42)
        for preset in ("flickr30k", "flickr30k-isotropic", "coco", "audiocaps"):
            assert cal.fitted(preset, stat) is True
    assert cal.fitted("unknown", "skew_N1_t2i") is True


def test_band_absolute_relative_and_two_seed_sds():
    assert cal.band("R1_i2t", 50.0, 55.0, 0.0) == (5.0, True)   # at the edge: within
    assert cal.band("R1_i2t", 50.0, 45.0, 0.0) == (5.0, True)
    assert cal.band("matched_mean", 0.30, 0.3299, 0.0) == (pytest.approx(0.03), True)
    assert cal.band("matched_mean", 0.30, 0.3301, 0.0)[1] is False
    assert cal.band("matched_mean", 0.30, 0.2699, 0.0)[1] is False                    # below: |mean - ref|
    assert cal.band("matched_mean", 0.30, 0.2701, 0.0)[1] is True
    half, ok = cal.band("matched_mean", 0.30, 0.35, 0.025)
    assert half == pytest.approx(0.05) and ok is True
    half, ok = cal.band("matched_mean", 0.30, 0.35, 0.024)
    assert half == pytest.approx(0.048) and ok is False
    # relative tolerance scales with |reference|
    assert cal.band("img_participation_ratio", -40.0, -50.0, 0.0) == (pytest.approx(10.0), True)
    assert cal.band("img_participation_ratio", 40.0, 50.1, 0.0)[1] is False
    # a NaN sd counts as zero (the tolerance alone)
    half, ok = cal.band("gap", 0.8, 0.86, float("nan"))
    assert half == pytest.approx(0.05) and ok is False
    # published tolerances
    assert cal.band("R1_t2i", 50.0, 53.0, 0.0, published=True) == (pytest.approx(3.0), True)
    assert cal.band("R1_t2i", 50.0, 53.0, 0.0) == (pytest.approx(5.0), True)
    assert cal.band("max_N1_t2i", 100.0, 150.0, 0.0, published=True) == (pytest.approx(50.0), True)
    assert cal.band("kurt_N1_t2i", 10.0, 16.0, 1.0, published=True) == (pytest.approx(5.0), False)
    assert cal.band("kurt_N1_t2i", 10.0, 16.0, 3.0, published=True) == (pytest.approx(6.0), True)
    assert type(cal.band("gap", 0.8, 0.8, 0.0)[1]) is bool
    with pytest.raises(KeyError):
        cal.band("kurt_N1_t2i", 1.0, 1.0, 0.0)   # not a small-size statistic


def test_json_params_formats_floats_with_g_and_others_as_they_are():
    assert cal.json_params({"alpha": 0.75, "k": 128}) == "alpha=0.75, k=128"
    assert cal.json_params({"tau": 0.01}) == "tau=0.01"
    assert cal.json_params({"x": 1e-07, "name": "a"}) == "x=1e-07, name=a"
    assert cal.json_params({"y": 2.0}) == "y=2"
    assert cal.json_params({}) == ""


def test_headroom_statistics_tuple_is_the_gain_statistics_in_order():
    assert cal.HEADROOM_STATISTICS == ("gain_nnn_t2i", "gain_is_t2i", "gain_nnn_i2t", "gain_is_i2t")
    assert cal.HEADROOM_SPLITS == {"real": 200, "synthetic": 12}


def test_references_of_each_preset():
    refs = cal.references("flickr30k-isotropic")
    assert [r[0] for r in refs] == ["flickr8k-100x5-clip-vitb32", "coco-val2017-500-clip-vitb16"]
    name, ref, stats = refs[0]
    assert ref is cal.REAL_STATISTICS[name]
    assert stats == [k for k in cal.STATISTICS if k in ref["statistics"]] and "R1_t2i" in stats
    assert refs[1][2] == list(cal.HEADROOM_STATISTICS)   # COCO lends Flickr30k its headroom only
    coco = cal.references("coco")
    assert [r[0] for r in coco] == ["coco-val2017-500-clip-vitb16"]
    assert coco[0][2] == [k for k in cal.STATISTICS if k != "same_image_cap_cos"]   # 1 caption per image
    assert [r[0] for r in cal.references("audiocaps-clap")] == ["audiocaps-clap"]
    assert cal.references("msrvtt") == []


def test_real_arrays_fetches_the_release_in_its_measured_layout(monkeypatch):
    import hubnorm.data.real as real

    seen = []
    monkeypatch.setattr(real, "release_arrays", lambda name, **kw: seen.append((name, kw)) or ("i", "c", "m"))
    assert cal.real_arrays("coco-val2017-500-clip-vitb16", mirror="M") == ("i", "c", "m")
    assert cal.real_arrays("flickr8k-100x5-clip-vitb32") == ("i", "c", "m")
    assert seen == [("coco500-clip-b16", {"first_caption": True, "progress": False, "mirror": "M"}),
                    ("flickr8k-100x5-clip-b32", {"first_caption": False, "progress": False})]


# ------------------------------------------------------------------------------------------------ published values
def test_published_statistics_of_the_image_and_audio_presets():
    assert cal._published("flickr30k") == {
        "R1_t2i": (58.82, "NNN Table 1"), "R1_i2t": (79.3, "NNN Table 2"),
        "skew_N10_t2i": (2.24, "DBSN Table 5 (k = 10 assumed)"), "kurt_N1_t2i": (9.0, "NNN Table 3"),
        "max_N1_t2i": (39.0, "NNN Table 3")}
    coco = cal._published("coco")
    assert coco == {"R1_t2i": (30.43, "NNN Table 1"), "R1_i2t": (50.02, "NNN Table 2"),
                    "kurt_N1_t2i": (59.8, "NNN Table 3"), "max_N1_t2i": (162.0, "NNN Table 3")}
    assert cal._published("audiocaps") == {"R1_t2i": (40.1, "DBSN Table 3 (zs CLAP, text -> audio)")}
    assert cal._published("nothing") == {}


def test_media_published_values_sources_and_fitted_flags():
    assert cal.media_published("msrvtt") == {
        "R1_t2v": (43.9, "DBSN Table 1 (CLIP4Clip, trained on msr-vtt)", True),
        "R1_v2t": (44.7, "DBSN Table 1 (CLIP4Clip, trained on msr-vtt)", True),
        "skew_N10_t2v": (1.87, "DBSN Table 5 (CLIP4Clip, k = 10 assumed)", True)}
    didemo = cal.media_published("didemo")
    assert didemo["skew_N10_t2v"] == (1.18, "DBSN Table 5 (X-Pool, k = 10 assumed)", False)
    assert didemo["R1_t2v"] == (40.8, "DBSN Table 1 (CLIP4Clip, trained on didemo)", True)
    assert cal.media_published("audiocaps") == {"R1_t2a": (40.1, "DBSN Table 3 (zs CLAP, zero-shot)", True)}


def test_published_gain_is_the_raw_and_the_method_row():
    raw, r1 = cal._published_gain("dbsn-pan2025", "2", "zs CLIP", "flickr30k", "t2i", "is", cal._QA)
    assert (raw, r1) == (58.8, 66.8)
    raw, r1 = cal._published_gain("dbsn-pan2025", "2", "zs CLIP", "flickr30k", "t2i", "no-such-method", cal._QA)
    assert raw == 58.8 and np.isnan(r1)


def test_paper_gains_rows():
    rows = cal._gain_rows()
    assert rows == cal.PAPER_GAINS and len(rows) == 27
    assert rows[0] == ("flickr30k", "t2i", "nnn", {"alpha": 0.75, "k": 128}, "train20", "nnn-chowdhury2024", "1",
                       "CLIP", "bank=flickr30k train 20%")
    assert rows[1] == ("flickr30k", "t2i", "is", {"tau": 0.02}, "qa", "dbsn-pan2025", "2", "zs CLIP", cal._QA)
    assert rows[2] == ("flickr30k", "t2i", "sn", {"tau": 0.01}, "qa", "dbsn-pan2025", "2", "zs CLIP", cal._QA)
    assert rows[3][:7] == ("flickr30k", "i2t", "nnn", {"alpha": 0.75, "k": 16}, "train20", "nnn-chowdhury2024", "2")
    assert rows[6] == ("flickr30k", "t2i", "dbsn", {"tau": 0.01}, "train", "dbsn-pan2025", "A7", "zs CLIP",
                       "Bq=train, Bt=train")
    nnn = {(r[0], r[1]): r[3]["k"] for r in rows if r[2] == "nnn"}
    assert nnn == {("flickr30k", "t2i"): 128, ("flickr30k", "i2t"): 16, ("coco", "t2i"): 256, ("coco", "i2t"): 128}
    media = [(r[0], r[1], r[2], r[6], r[7]) for r in rows[14:]]
    assert media == [("msrvtt", "t2v", "is", "1", "CLIP4Clip"), ("msrvtt", "t2v", "sn", "1", "CLIP4Clip"),
                     ("msrvtt", "v2t", "is", "1", "CLIP4Clip"), ("msrvtt", "v2t", "sn", "1", "CLIP4Clip"),
                     ("didemo", "t2v", "is", "1", "CLIP4Clip"), ("didemo", "t2v", "sn", "1", "CLIP4Clip"),
                     ("didemo", "v2t", "is", "1", "CLIP4Clip"), ("didemo", "v2t", "sn", "1", "CLIP4Clip"),
                     ("audiocaps", "t2a", "is", "3", "zs CLAP"), ("audiocaps", "t2a", "sn", "3", "zs CLAP"),
                     ("clotho", "t2a", "is", "3", "zs CLAP"), ("clotho", "t2a", "sn", "3", "zs CLAP"),
                     ("msrvtt", "t2v", "dbsn", "4", "CLIP4Clip")]
    assert rows[14][3:] == ({"tau": 0.02}, "qa", "dbsn-pan2025", "1", "CLIP4Clip", cal._QA)
    assert rows[15][3] == {"tau": 0.01}
    assert rows[-1][3:] == ({"tau": 0.01}, "train", "dbsn-pan2025", "4", "CLIP4Clip", "Bq=train, Bt=train")


# ------------------------------------------------------------------------------------------------ headroom
def _dense_headroom(img, cap, c2i, split, k=16, alpha=0.75, tau=0.02):
    """The headroom protocol in dense float64 numpy, written out here (one split)."""
    img = img / np.linalg.norm(img, axis=1, keepdims=True)
    cap = cap / np.linalg.norm(cap, axis=1, keepdims=True)
    n = len(img)
    perm = np.random.default_rng(split).permutation(n)
    test, ref = np.sort(perm[: n // 2]), np.sort(perm[n // 2:])
    pos = {int(i): j for j, i in enumerate(test)}
    q = np.array([int(i) in pos for i in c2i])
    want = np.array([pos.get(int(i), -1) for i in c2i])[q]
    out = {}
    for d in ("t2i", "i2t"):
        if d == "t2i":
            s, bank = cap[q] @ img[test].T, cap[~q] @ img[test].T
            hit = lambda sc: 100.0 * np.mean(sc.argmax(1) == want)
        else:
            s, bank = img[test] @ cap[q].T, img[ref] @ cap[q].T
            hit = lambda sc: 100.0 * np.mean(want[sc.argmax(1)] == np.arange(len(test)))
        kk = min(k, len(bank))
        raw = hit(s)
        out[f"R1_half_{d}"] = raw
        out[f"gain_nnn_{d}"] = hit(s - alpha * np.sort(bank, axis=0)[-kk:].mean(0)) - raw
        out[f"gain_is_{d}"] = hit(s - tau * logsumexp(bank / tau, axis=0)) - raw
    return out


def _hub_set(n=24, d=12, c=2, seed=3):
    rng = np.random.default_rng(seed)
    hub = rng.standard_normal(d)
    img = rng.standard_normal((n, d)) + rng.gamma(1.0, 1.5, (n, 1)) * hub
    c2i = np.repeat(np.arange(n), c)
    cap = img[c2i] + 1.4 * rng.standard_normal((n * c, d))
    return img, cap, c2i


def test_headroom_statistics_match_the_dense_protocol_and_average_over_splits():
    img, cap, c2i = _hub_set()
    per = [_dense_headroom(img, cap, c2i, s) for s in (0, 1, 2)]
    got = cal.headroom_statistics(img, cap, c2i, splits=(0, 1, 2))
    assert set(got) == set(per[0])
    for key in per[0]:
        assert got[key] == pytest.approx(np.mean([p[key] for p in per]), abs=1e-9), key
    assert any(p[k] != 0 for p in per for k in p if k.startswith("gain_")), "the set must move some R@1"
    # NNN's k limited to a bank smaller than 16: 10 images, 5 in the bank
    small = _hub_set(n=10, d=6, c=1, seed=5)
    for s in (0, 1):
        g, w = cal.headroom_statistics(*small, splits=[s]), _dense_headroom(*small, s)
        for key in w:
            assert g[key] == pytest.approx(w[key], abs=1e-9), (s, key)
    # one direction only; the default splits are range(12)
    one = cal.headroom_statistics(img, cap, c2i, splits=[1], directions=("i2t",))
    assert set(one) == {"R1_half_i2t", "gain_nnn_i2t", "gain_is_i2t"}
    assert one["gain_is_i2t"] == pytest.approx(per[1]["gain_is_i2t"], abs=1e-9)
    assert cal.HEADROOM == (("nnn", {"alpha": 0.75, "k": 16}), ("is", {"tau": 0.02}))


def test_headroom_statistics_default_splits_are_twelve():
    img, cap, c2i = _hub_set(n=8, d=6, c=1, seed=1)
    got = cal.headroom_statistics(img, cap, c2i, directions=("t2i",))
    want = [_dense_headroom(img, cap, c2i, s)["R1_half_t2i"] for s in range(12)]
    assert got["R1_half_t2i"] == pytest.approx(np.mean(want), abs=1e-9)


def test_headroom_statistics_guards():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"at least 4 images and caption_to_image indexing all of them; "
                                         r"got 3 images and 3 indexed"):
        cal.headroom_statistics(rng.standard_normal((3, 5)), rng.standard_normal((3, 5)), np.arange(3))
    with pytest.raises(ValueError, match=r"got 5 images and 4 indexed"):
        cal.headroom_statistics(rng.standard_normal((5, 5)), rng.standard_normal((4, 5)), np.arange(4))
    with pytest.raises(ValueError, match=r"got 4 images and 5 indexed"):
        cal.headroom_statistics(rng.standard_normal((4, 5)), rng.standard_normal((5, 5)), np.arange(5))
    with pytest.raises(ValueError, match="splits must name at least one seeded split"):
        cal.headroom_statistics(rng.standard_normal((4, 5)), rng.standard_normal((4, 5)), np.arange(4), splits=[])
    # four images are enough
    got = cal.headroom_statistics(rng.standard_normal((4, 5)), rng.standard_normal((4, 5)), np.arange(4), splits=[0])
    assert set(got) >= {"R1_half_t2i", "R1_half_i2t"}


# ------------------------------------------------------------------------------------------------ statistics
def test_preset_statistics_are_the_generator_split_statistics(monkeypatch):
    from hubnorm.geometry import bank_statistics, embedding_statistics
    from hubnorm.synthetic import PRESETS, generate_split

    seen = []
    real = cal.headroom_statistics
    monkeypatch.setattr(cal, "headroom_statistics",
                        lambda *a, splits: seen.append(list(splits)) or real(*a, splits=[0]))
    got = cal.preset_statistics("coco", 12, 2, seeds=[3, 4], dim=16, latent_dim=8)
    assert seen == [list(range(12))] * 2 and len(got) == 2
    cfg = PRESETS["coco"].replace(captions_per_image=2, dim=16, latent_dim=8)
    for row, seed in zip(got.to_dict("records"), (3, 4)):
        s = generate_split(cfg, "test", 12, seed=seed)
        assert s.captions.shape == (24, 16)
        want = {**embedding_statistics(s.images, s.captions, s.caption_to_image),
                **bank_statistics(s.images, s.captions, s.caption_to_image),
                **real(s.images, s.captions, s.caption_to_image, splits=[0])}
        assert set(row) == set(want)
        for key, value in want.items():
            assert row[key] == pytest.approx(value, nan_ok=True), key


def test_full_size_statistics_against_a_dense_oracle(monkeypatch):
    from hubnorm.synthetic import PRESETS, generate_split

    monkeypatch.setitem(cal.FULL_SIZES, "flickr30k", (30, 3))
    got = cal.full_size_statistics("flickr30k-isotropic", seeds=[0, 2], dim=16, latent_dim=8)
    assert list(got.columns) == ["R1_t2i", "skew_N10_t2i", "kurt_N1_t2i", "max_N1_t2i", "R1_i2t"]
    assert len(got) == 2
    cfg = PRESETS["flickr30k-isotropic"].replace(captions_per_image=3, dim=16, latent_dim=8)
    for i, seed in enumerate((0, 2)):
        s = generate_split(cfg, "test", 30, seed=seed)
        img, cap, c2i = (s.images.astype(np.float64), s.captions.astype(np.float64), s.caption_to_image)
        sc = cap @ img.T
        assert got["R1_t2i"][i] == pytest.approx(100.0 * np.mean(sc.argmax(1) == c2i), abs=1e-9)
        assert got["R1_i2t"][i] == pytest.approx(100.0 * np.mean(c2i[sc.T.argmax(1)] == np.arange(30)), abs=1e-9)
        n1 = np.bincount(sc.argmax(1), minlength=30).astype(np.float64)
        top10 = np.argsort(-sc, axis=1, kind="stable")[:, :10]
        n10 = np.bincount(top10.ravel(), minlength=30).astype(np.float64)
        assert got["kurt_N1_t2i"][i] == pytest.approx(sps.kurtosis(n1), abs=1e-9)
        assert got["max_N1_t2i"][i] == n1.max()
        assert got["skew_N10_t2i"][i] == pytest.approx(sps.skew(n10), abs=1e-9)
        assert n1.max() > 1


# ------------------------------------------------------------------------------------------------ tables
def _fake_preset_statistics(values):
    """A stand-in for preset_statistics: preset -> statistic -> list of per-seed values; records its calls."""
    calls = []

    def fake(preset, n_images, captions_per_image, seeds):
        seeds = list(seeds)
        calls.append((preset, n_images, captions_per_image, seeds))
        return pd.DataFrame({k: v[: len(seeds)] for k, v in values[preset].items()})
    return fake, calls


def test_calibration_table_with_given_references_and_full_size_rows(monkeypatch):
    real = {"mine": {"preset": "flickr30k", "n_images": 7, "captions_per_image": 3,
                     "statistics": {"matched_mean": 0.30, "gap": float("nan"), "img_participation_ratio": 40.0,
                                    "R1_i2t": 50.0, "matched_sd": None}},
            "other": {"preset": "coco", "n_images": 9, "captions_per_image": 1, "statistics": {"matched_mean": 0.1}}}
    vals = {"flickr30k-x": {"matched_mean": [0.31, 0.35, 0.33], "img_participation_ratio": [49.0, 51.0, 53.0],
                            "R1_i2t": [40.0, 42.0, 44.0], "gap": [1.0, 1.0, 1.0], "matched_sd": [0.1] * 3},
            "coco": {"matched_mean": [0.30, 0.30, 0.30], "img_participation_ratio": [40.0, 40.0, 40.0],
                     "R1_i2t": [50.0, 50.0, 50.0], "gap": [1.0] * 3, "matched_sd": [0.1] * 3}}
    fake, calls = _fake_preset_statistics(vals)
    monkeypatch.setattr(cal, "preset_statistics", fake)
    monkeypatch.setattr(cal, "full_size_statistics", lambda *a, **k: pytest.fail("full was given"))
    full = {"flickr30k-x": pd.DataFrame({"R1_t2i": [55.0, 57.0], "R1_i2t": [80.0, 80.0], "skew_N10_t2i": [2.0, 2.4],
                                         "kurt_N1_t2i": [9.0, 15.0], "max_N1_t2i": [40.0, 40.0]}),
            "coco": pd.DataFrame({"R1_t2i": [58.82, 58.82], "R1_i2t": [70.0, 70.0], "skew_N10_t2i": [2.24, 2.24],
                                  "kurt_N1_t2i": [9.0, 9.0], "max_N1_t2i": [39.0, 39.0]})}
    tab = cal.calibration_table("flickr30k-x", seeds=range(3), full_seeds=[0, 1], real=real, compare_with=["coco"],
                                full=full)
    assert calls == [("flickr30k-x", 7, 3, [0, 1, 2]), ("coco", 7, 3, [0, 1, 2])]
    assert list(tab["statistic"]) == ["matched_mean", "img_participation_ratio", "R1_i2t",
                                      "R1_t2i", "R1_i2t", "skew_N10_t2i", "kurt_N1_t2i", "max_N1_t2i"]
    r = tab.iloc[0]
    assert (r["what"], r["reference"], r["size"], r["real"]) == (cal.STATISTICS["matched_mean"][0], "mine", "7 x 3",
                                                                  0.30)
    assert r["flickr30k-x mean"] == pytest.approx(0.33) and r["flickr30k-x sd"] == pytest.approx(0.02)
    assert r["flickr30k-x band"] == pytest.approx(0.04) and bool(r["flickr30k-x within"]) is True
    assert bool(r["flickr30k-x within tolerance"]) is False
    assert r["coco mean"] == pytest.approx(0.30) and r["coco sd"] == pytest.approx(0.0)
    assert bool(r["coco within"]) is True and bool(r["coco within tolerance"]) is True
    assert bool(r["fitted"]) is True
    r = tab.iloc[1]   # relative tolerance 0.25 x 40 = 10
    assert r["flickr30k-x band"] == pytest.approx(10.0) and bool(r["flickr30k-x within"]) is False
    assert r["flickr30k-x mean"] == pytest.approx(51.0)
    r = tab.iloc[2]
    assert r["flickr30k-x band"] == pytest.approx(5.0) and bool(r["flickr30k-x within"]) is False
    # the full-size rows: published references, the published tolerance, sd over the full seeds
    pub = tab.iloc[3:]
    assert list(pub["reference"]) == ["NNN Table 1", "NNN Table 2", "DBSN Table 5 (k = 10 assumed)", "NNN Table 3",
                                      "NNN Table 3"]
    assert set(pub["size"]) == {"1000 x 5"} and list(pub["fitted"]) == [True] * 5
    assert list(pub["what"]) == [cal.PUBLISHED_WHAT[s] for s in pub["statistic"]]
    r = tab.iloc[3]
    assert r["real"] == 58.82 and r["flickr30k-x mean"] == pytest.approx(56.0)
    assert r["flickr30k-x sd"] == pytest.approx(np.sqrt(2.0)) and r["flickr30k-x band"] == pytest.approx(3.0)
    assert bool(r["flickr30k-x within"]) is True and bool(r["flickr30k-x within tolerance"]) is True
    r = tab.iloc[4]
    assert r["flickr30k-x mean"] == pytest.approx(80.0) and r["coco mean"] == pytest.approx(70.0)
    assert bool(r["coco within"]) is False and bool(r["flickr30k-x within"]) is True
    r = tab.iloc[6]   # kurtosis: relative 0.5 x 9 = 4.5 vs 2 sd = 2 x 4.24
    assert r["flickr30k-x mean"] == pytest.approx(12.0)
    assert r["flickr30k-x band"] == pytest.approx(2 * np.std([9.0, 15.0], ddof=1))
    assert bool(r["flickr30k-x within"]) is True and bool(r["flickr30k-x within tolerance"]) is True
    assert r["coco sd"] == 0.0


def test_calibration_table_one_seed_has_nan_sds_and_the_not_fitted_flag(monkeypatch):
    real = {"mine": {"preset": "flickr30k", "n_images": 5, "captions_per_image": 1,
                     "statistics": {"img_spread_cv": 0.20, "bank_gallery_gap": 0.70}}}
    fake, calls = _fake_preset_statistics({"flickr30k": {"img_spread_cv": [0.23], "bank_gallery_gap": [0.80]}})
    monkeypatch.setattr(cal, "preset_statistics", fake)
    # a statistic added after the preset's fit (none is now): marked not fitted, as the bank gap always is
    monkeypatch.setattr(cal, "NOT_FITTED_FOR", {"flickr30k": cal.SPREAD_STATISTICS})
    full = {"flickr30k": pd.DataFrame({"R1_t2i": [60.0], "R1_i2t": [79.0], "skew_N10_t2i": [3.0],
                                       "kurt_N1_t2i": [9.0], "max_N1_t2i": [39.0]})}
    tab = cal.calibration_table("flickr30k", seeds=[4], full_seeds=[0], real=real, full=full)
    assert calls == [("flickr30k", 5, 1, [4])]
    assert list(tab["statistic"])[:2] == ["img_spread_cv", "bank_gallery_gap"]
    assert list(tab["fitted"])[:2] == [False, False]
    assert tab["flickr30k sd"].isna().all()
    assert tab["flickr30k band"].iloc[0] == pytest.approx(0.04) and bool(tab["flickr30k within"].iloc[0]) is True
    assert bool(tab["flickr30k within"].iloc[1]) is False
    r = tab.iloc[4]
    assert r["statistic"] == "skew_N10_t2i" and r["flickr30k band"] == pytest.approx(0.5)
    assert bool(r["flickr30k within"]) is False


def test_calibration_table_default_references_and_computed_full_rows(monkeypatch):
    names = []

    def fake(preset, n_images, captions_per_image, seeds):
        names.append((n_images, captions_per_image))
        return pd.DataFrame({k: [1.0, 1.0] for k in cal.STATISTICS})

    full_calls = []

    def fake_full(preset, seeds):
        full_calls.append((preset, list(seeds)))
        return pd.DataFrame({"R1_t2i": [30.0, 31.0], "R1_i2t": [50.0, 51.0], "kurt_N1_t2i": [60.0, 60.0],
                             "max_N1_t2i": [160.0, 170.0]})

    monkeypatch.setattr(cal, "preset_statistics", fake)
    monkeypatch.setattr(cal, "full_size_statistics", fake_full)
    tab = cal.calibration_table("coco-isotropic", seeds=range(2))
    assert names == [(500, 1)] and full_calls == [("coco-isotropic", [0, 1])]
    coco = cal.REAL_STATISTICS["coco-val2017-500-clip-vitb16"]["statistics"]
    small = tab[tab["reference"] == "coco-val2017-500-clip-vitb16"]
    assert list(small["statistic"]) == [k for k in cal.STATISTICS if k in coco]
    assert list(tab["statistic"])[len(small):] == ["R1_t2i", "R1_i2t", "kurt_N1_t2i", "max_N1_t2i"]
    assert set(tab["size"].iloc[len(small):]) == {"5000 x 5"}
    # headroom lent by COCO to the Flickr30k presets; audio has no headroom reference
    names.clear()
    monkeypatch.setattr(cal, "_published", lambda kind: {})
    tab = cal.calibration_table("flickr30k", seeds=range(2))
    assert names == [(100, 5), (500, 1)]
    assert list(tab[tab["reference"] == "coco-val2017-500-clip-vitb16"]["statistic"]) == list(cal.HEADROOM_STATISTICS)


def test_media_calibration_table_from_stand_in_statistics(monkeypatch):
    from hubnorm.media import MEDIA_PRESETS

    seen = []

    def fake(preset, seeds):
        seen.append((preset, list(seeds)))
        return pd.DataFrame({"R1_t2v": [40.0, 44.0], "R1_v2t": [50.0, 50.0], "skew_N10_t2v": [1.0, 1.2]})

    monkeypatch.setattr(cal, "media_statistics", fake)
    tab = cal.media_calibration_table("didemo", seeds=range(2))
    assert seen == [("didemo", [0, 1])]
    p = MEDIA_PRESETS["didemo"]
    assert list(tab["statistic"]) == ["R1_t2v", "R1_v2t", "skew_N10_t2v"]
    assert set(tab["size"]) == {f"{p.n_test} x {p.test_captions}"}
    assert list(tab["fitted"]) == [True, True, False]
    assert list(tab["what"]) == [cal.PUBLISHED_WHAT[s] for s in tab["statistic"]]
    assert list(tab["real"]) == [40.8, 41.4, 1.18]
    assert tab["reference"].iloc[2] == "DBSN Table 5 (X-Pool, k = 10 assumed)"
    r = tab.iloc[0]
    assert r["didemo mean"] == pytest.approx(42.0) and r["didemo sd"] == pytest.approx(np.sqrt(8.0))
    assert r["didemo band"] == pytest.approx(2 * np.sqrt(8.0))
    assert bool(r["didemo within"]) is True and bool(r["didemo within tolerance"]) is True
    r = tab.iloc[1]
    assert r["didemo band"] == pytest.approx(3.0) and bool(r["didemo within"]) is False
    r = tab.iloc[2]
    assert r["didemo band"] == pytest.approx(0.5) and bool(r["didemo within"]) is True
    one = cal.media_calibration_table("didemo", seeds=[5])
    assert seen[-1] == ("didemo", [5]) and one["didemo sd"].isna().all()


# ------------------------------------------------------------------------------------------------ media and paper sizes
class _FakeTask:
    """A stand-in RetrievalTask: R@1 of the raw scores ``raw``, of a normalizer ``(method, params)``
    ``gain[method]`` more; with :func:`_fake_metrics` (``hubnorm.evaluate`` / ``hubnorm.hubness`` replaced) records
    every call: ``("evaluate", norm, ks, query_aware)`` of the norm fitted by ``task.fit(norm, query_aware=...)``,
    ``("hubness", norm, k)`` of ``task.blocks(norm)``."""

    def __init__(self, raw, gain, calls, skew=0.0):
        self.raw, self.gain, self.calls, self.skew = raw, gain, calls, skew

    def fit(self, norm, *, query_aware=False):
        return None if norm is None else _Fitted(norm, query_aware, self)

    def blocks(self, norm=None):
        return _Blocks(self, norm)


class _Fitted:
    """What ``_FakeTask.fit`` returns: the normalizer, the bank it was fitted with, and the task it was fitted on."""

    def __init__(self, norm, query_aware, task):
        self.norm, self.query_aware, self.task = norm, query_aware, task


class _Blocks:
    def __init__(self, task, norm):
        self.task, self.norm = task, norm


def _fake_metrics(monkeypatch):
    """``hubnorm.evaluation.evaluate`` and ``hubnorm.hubness.hubness`` replaced by recorders of ``_FakeTask`` calls."""
    import importlib

    def evaluate(norm, task, *, ks=(1, 5, 10)):
        assert norm is None or norm.task is task                  # fitted on the task it is evaluated on
        base, qa = (None, False) if norm is None else (norm.norm, norm.query_aware)
        task.calls.append(("evaluate", base, tuple(ks), qa))
        return {"R@1": task.raw if base is None else task.raw + task.gain[base[0]]}

    def hubness(blocks, k):
        blocks.task.calls.append(("hubness", blocks.norm, k))
        return {"skewness": blocks.task.skew}

    monkeypatch.setattr(importlib.import_module("hubnorm.evaluation"), "evaluate", evaluate)
    monkeypatch.setattr(importlib.import_module("hubnorm.hubness"), "hubness", hubness)


def test_media_statistics_reads_r1_and_the_forward_skewness(monkeypatch):
    import hubnorm.media as media

    made, calls = [], []
    _fake_metrics(monkeypatch)
    monkeypatch.setattr(media, "make_media", lambda preset, seed, n_train: made.append((preset, seed, n_train)) or seed)
    monkeypatch.setattr(media, "media_tasks", lambda data: {"t2a": _FakeTask(10.0 + data, {}, calls, skew=data / 2),
                                                            "a2t": _FakeTask(20.0 + data, {}, calls)})
    got = cal.media_statistics("clotho", seeds=[1, 4])
    assert made == [("clotho", 1, 0), ("clotho", 4, 0)]
    assert got.to_dict("list") == {"R1_t2a": [11.0, 14.0], "R1_a2t": [21.0, 24.0], "skew_N10_t2a": [0.5, 2.0]}
    assert ("hubness", None, 10) in calls and ("evaluate", None, (1,), False) in calls


def test_paper_size_gains_from_stand_in_tasks(monkeypatch):
    import hubnorm.media as media
    import hubnorm.registry as registry

    built, calls = [], []
    _fake_metrics(monkeypatch)
    monkeypatch.setattr(cal, "_paper_size_data", lambda preset, seed, bank: (preset, seed, bank))
    monkeypatch.setattr(registry, "make_normalizer", lambda method, **params: (method, params))

    def tasks(data, seed, **limits):
        built.append((data, seed, limits))
        g = {"is": 1.0 + data[1], "sn": 2.0, "nnn": 3.0, "dbsn": 4.0}
        return {d: _FakeTask(50.0, g, calls) for d in ("t2i", "i2t", "t2v", "v2t", "t2a")}

    monkeypatch.setattr(media, "media_tasks", tasks)
    got = cal.paper_size_gains(["flickr30k", "msrvtt"], seeds=[0, 2])
    assert built == [(("flickr30k", 0, "train20"), 0, {}), (("flickr30k", 2, "train20"), 2, {}),
                     (("flickr30k", 0, "qa"), 0, {}), (("flickr30k", 2, "qa"), 2, {}),
                     (("flickr30k", 0, "train"), 0, cal.PAPER_BANK_LIMITS),
                     (("flickr30k", 2, "train"), 2, cal.PAPER_BANK_LIMITS),
                     (("msrvtt", 0, "qa"), 0, {}), (("msrvtt", 2, "qa"), 2, {}),
                     (("msrvtt", 0, "train"), 0, cal.PAPER_BANK_LIMITS),
                     (("msrvtt", 2, "train"), 2, cal.PAPER_BANK_LIMITS)]
    assert ("evaluate", ("is", {"tau": 0.02}), (1,), True) in calls
    assert ("evaluate", ("nnn", {"alpha": 0.75, "k": 128}), (1,), False) in calls
    assert ("evaluate", ("dbsn", {"tau": 0.01}), (1,), False) in calls
    assert len(got) == 7 + 5 and set(got["seeds"]) == {2}
    r = got[(got["preset"] == "flickr30k") & (got["direction"] == "t2i") & (got["method"] == "is")].iloc[0]
    assert r["params"] == "tau=0.02" and r["bank"] == cal._QA and r["published"] == "dbsn-pan2025 Table 2 (zs CLIP)"
    assert (r["published raw"], r["published gain"]) == (58.8, pytest.approx(8.0))
    assert r["synthetic gain"] == pytest.approx(2.0) and r["synthetic sd"] == pytest.approx(np.sqrt(2.0))
    assert r["ratio"] == pytest.approx(2.0 / 8.0)
    r = got[(got["preset"] == "flickr30k") & (got["method"] == "nnn")].iloc[0]
    assert r["params"] == "alpha=0.75, k=128" and r["synthetic gain"] == pytest.approx(3.0)
    assert r["synthetic sd"] == 0.0
    r = got[(got["preset"] == "msrvtt") & (got["method"] == "dbsn")].iloc[0]
    assert r["published"] == "dbsn-pan2025 Table 4 (CLIP4Clip)" and r["bank"] == "Bq=train, Bt=train"
    assert np.isfinite(r["published raw"])
    # CLIP4Clip was trained on MSR-VTT's training split: its training-bank row alone is not like for like
    assert r["not like for like"].startswith("CLIP4Clip was trained on msr-vtt's training split")
    assert (got["not like for like"] != "").sum() == 1
    one = cal.paper_size_gains(["msrvtt"], seeds=[0])
    assert one["synthetic sd"].isna().all() and set(one["seeds"]) == {1}
    # a published gain below MIN_PUBLISHED_GAIN has no ratio
    monkeypatch.setattr(cal, "_published_gain", lambda *a: (50.0, 50.0 + 0.999 * cal.MIN_PUBLISHED_GAIN))
    small = cal.paper_size_gains(["clotho"], seeds=[0])
    assert small["ratio"].isna().all() and len(small) == 2
    monkeypatch.setattr(cal, "_published_gain", lambda *a: (50.0, 50.0 - cal.MIN_PUBLISHED_GAIN))
    assert cal.paper_size_gains(["clotho"], seeds=[0])["ratio"].iloc[0] == pytest.approx(-1.0 / cal.MIN_PUBLISHED_GAIN)


def test_not_like_for_like_only_for_a_bank_from_the_split_the_model_was_trained_on():
    from hubnorm.media import MEDIA_PRESETS

    assert {p: MEDIA_PRESETS[p].trained_on_dataset for p in MEDIA_PRESETS} == {
        "msrvtt": True, "didemo": True, "audiocaps": False, "clotho": False}
    assert MEDIA_PRESETS["msrvtt"].model_label == "CLIP4Clip, trained on msr-vtt"
    assert MEDIA_PRESETS["clotho"].model_label == "zs CLAP, zero-shot"
    for bank in ("train", "train20"):
        assert "trained on didemo's training split" in cal.not_like_for_like("didemo", bank)
        assert cal.not_like_for_like("audiocaps", bank) == cal.not_like_for_like("flickr30k", bank) == ""
    assert cal.not_like_for_like("msrvtt", "qa") == ""   # the test queries as the bank: no training data
    flagged = [r[:3] for r in cal.PAPER_GAINS if cal.not_like_for_like(r[0], r[4])]
    assert flagged == [("msrvtt", "t2v", "dbsn")]
    assert cal.media_published("msrvtt")["R1_t2v"][1] == "DBSN Table 1 (CLIP4Clip, trained on msr-vtt)"
    assert cal.media_published("audiocaps")["R1_t2a"][1] == "DBSN Table 3 (zs CLAP, zero-shot)"


def test_paper_size_data_of_an_image_preset(monkeypatch):
    import hubnorm.media as media

    monkeypatch.setitem(cal.FULL_SIZES, "flickr30k", (6, 5))
    monkeypatch.setitem(cal.PAPER_TRAIN, "flickr30k", 10)
    qa = cal._paper_size_data("flickr30k", 1, "qa")
    assert isinstance(qa, media.MediaData) and qa.items.shape[0] == 6 and qa.captions.shape[0] == 30
    assert qa.modalities == ("text", "image") and qa.synthetic and qa.meta == {"preset": "flickr30k", "seed": 1}
    assert list(qa.caption_to_item) == list(np.repeat(np.arange(6), 5))
    assert qa.bank_items is None or len(qa.bank_items) == 0
    full = cal._paper_size_data("flickr30k", 1, "train")
    np.testing.assert_array_equal(full.items, qa.items)
    assert full.bank_items.shape[0] == 10 and full.bank_captions.shape[0] == 50
    part = cal._paper_size_data("flickr30k", 1, "train20")
    assert part.bank_items.shape[0] == 2 and part.bank_captions.shape[0] == 10
    keep = np.sort(np.random.default_rng(1).permutation(10)[:2])
    np.testing.assert_array_equal(part.bank_items, full.bank_items[keep])
    seen = []
    monkeypatch.setattr(media, "make_media", lambda preset, seed, n_train: seen.append((preset, seed, n_train)))
    cal._paper_size_data("msrvtt", 3, "qa")
    cal._paper_size_data("msrvtt", 3, "train")
    assert seen == [("msrvtt", 3, 0), ("msrvtt", 3, None)]


def test_paper_size_data_draws_the_papers_captions_per_image(monkeypatch):
    # the paper's test split's captions per image (FULL_SIZES), not the preset's default (5 for both today)
    monkeypatch.setitem(cal.FULL_SIZES, "coco", (4, 2))
    monkeypatch.setitem(cal.PAPER_TRAIN, "coco", 3)
    data = cal._paper_size_data("coco", 0, "train")
    assert data.items.shape[0] == 4 and data.captions.shape[0] == 8
    assert list(data.caption_to_item) == [0, 0, 1, 1, 2, 2, 3, 3] and data.bank_captions.shape[0] == 6


def _with_decoy_paper(monkeypatch):
    """load_published with a decoy paper listed first whose rows copy every other paper's keys (value 999): a
    reader that does not filter by paper picks the decoy's values."""
    from hubnorm_companion import reporting

    original = reporting.load_published
    everything = original(None)
    decoy = everything.assign(paper="decoy", value=999.0)
    both = pd.concat([decoy, everything], ignore_index=True)
    monkeypatch.setattr(reporting, "load_published",
                        lambda paper=None, table=None: both if paper is None else both[both["paper"] == paper])
    return everything


def test_published_values_are_read_from_the_named_paper_only(monkeypatch):
    _with_decoy_paper(monkeypatch)
    assert cal._published("flickr30k")["R1_t2i"] == (58.82, "NNN Table 1")
    assert cal._published("flickr30k")["skew_N10_t2i"] == (2.24, "DBSN Table 5 (k = 10 assumed)")
    assert cal._published_gain("dbsn-pan2025", "2", "zs CLIP", "flickr30k", "t2i", "is", cal._QA) == (58.8, 66.8)


def test_published_gain_of_every_paper_row_against_an_independent_filter():
    from hubnorm_companion.reporting import load_published
    from hubnorm.media import MEDIA_PRESETS

    first = {}   # the first published value of every key, in the files' order
    for r in load_published().to_dict("records"):
        first.setdefault((r["paper"], str(r["table"]), r["model"], r["dataset"], r["direction"], r["metric"],
                          r["method"], r["setting"]), float(r["value"]))
    for preset, d, method, params, bank, paper, table, model, setting in cal.PAPER_GAINS:
        dataset = MEDIA_PRESETS[preset].dataset if preset in MEDIA_PRESETS else preset

        def pick(meth, sett):
            return first[(paper, table, model, dataset, d, "R@1", meth, sett)]

        assert cal._published_gain(paper, table, model, dataset, d, method, setting) == (
            pick("raw", "none"), pick(method, setting)), (preset, d, method)


def test_paper_size_gains_of_every_preset_and_no_warning_for_one_seed(monkeypatch):
    import warnings

    import hubnorm.media as media
    import hubnorm.registry as registry

    _fake_metrics(monkeypatch)
    monkeypatch.setattr(cal, "_paper_size_data", lambda preset, seed, bank: (preset, seed, bank))
    monkeypatch.setattr(registry, "make_normalizer", lambda method, **params: (method, params))
    monkeypatch.setattr(media, "media_tasks", lambda data, seed, **limits: {
        d: _FakeTask(40.0, {"is": 1.0, "sn": 2.0, "nnn": 3.0, "dbsn": 4.0}, [])
        for d in ("t2i", "i2t", "t2v", "v2t", "t2a")})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = cal.paper_size_gains(seeds=[0])
    assert len(got) == len(cal.PAPER_GAINS) and got["synthetic sd"].isna().all()
    assert list(zip(got["preset"], got["direction"], got["method"])) == [r[:3] for r in cal.PAPER_GAINS]
