"""The graded shift study (hubnorm_companion.studies.shift_study): banks or a gallery drawn from a mixture that
moves from the test distribution to another one, every registered method refitted at every step.

Oracles: the mixtures are counted and checked for nesting by hand; the study's endpoints (share 0 and share 1) are
recomputed with the public fit and evaluate on the pure banks; the paired bootstrap CI is recomputed from the
per-query hits with the same resampled indices.
"""

import dataclasses

import numpy as np
import pandas as pd
import pytest

import hubnorm as hn
from hubnorm_companion.figures import plot_shift
from hubnorm_companion.studies import SHIFT_SIDES, shift_study, shifted_rows, stops_helping
from conftest import shared_path

D = 32


def _unit(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def world():
    rng = np.random.default_rng(3)
    hubs = _unit(rng.standard_normal((4, D)))
    images = _unit(rng.standard_normal((80, D)) + 0.8 * hubs[rng.integers(0, 4, 80)])
    captions = _unit(images.repeat(2, 0) + 0.9 * rng.standard_normal((160, D)) / np.sqrt(D) * 4)
    bank_in = _unit(images[rng.integers(0, 80, 120)] + 0.9 * rng.standard_normal((120, D)) / np.sqrt(D) * 4)
    bank_out = _unit(rng.standard_normal((100, D)))
    gallery_out = _unit(images + 0.5 * rng.standard_normal(images.shape) / np.sqrt(D) * 4)
    task = hn.build_tasks(images, captions, np.arange(160) // 2, caption_bank=bank_in,
                          image_bank=_unit(rng.standard_normal((60, D))), directions=["t2i"])["t2i"]
    return {"task": task, "bank_out": bank_out, "gallery_out": gallery_out}


def test_shifted_rows_counts_and_nesting():
    inside = np.arange(20, dtype=np.float64)[:, None] * np.ones((1, 3))
    outside = -1 - np.arange(15, dtype=np.float64)[:, None] * np.ones((1, 3))
    picks = {s: shifted_rows(inside, outside, s, 10, seed=4) for s in (0.0, 0.3, 0.5, 1.0)}
    for s, rows in picks.items():
        assert rows.shape == (10, 3)
        assert (rows[:, 0] < 0).sum() == round(10 * s)                      # from outside
        assert len(set(rows[:, 0])) == 10                                    # no row twice
    outs = {s: set(r[r[:, 0] < 0, 0]) for s, r in picks.items()}
    ins = {s: set(r[r[:, 0] >= 0, 0]) for s, r in picks.items()}
    assert outs[0.3] <= outs[0.5] <= outs[1.0] and ins[0.5] <= ins[0.3] <= ins[0.0]   # nested mixtures
    assert np.array_equal(shifted_rows(inside, outside, 0.3, 10, seed=4), picks[0.3])   # seeded
    # aligned (a gallery and its shifted copy): row i stays item i
    moved = shifted_rows(inside[:15], outside, 0.4, 15, seed=1, aligned=True)
    changed = np.flatnonzero(moved[:, 0] < 0)
    assert len(changed) == 6 and np.array_equal(moved[changed, 0], outside[changed, 0])
    assert np.array_equal(np.delete(moved, changed, 0), np.delete(inside[:15], changed, 0))


def test_shifted_rows_refuses_bad_input():
    a, b = np.zeros((5, 2)), np.zeros((4, 2))
    with pytest.raises(ValueError, match=r"share must be in \[0, 1\]"):
        shifted_rows(a, b, 1.5, 3)
    with pytest.raises(ValueError, match="same width"):
        shifted_rows(a, np.zeros((4, 3)), 0.5, 3)
    with pytest.raises(ValueError, match="size 5 is larger than a pool"):
        shifted_rows(a, b, 0.5, 5)
    with pytest.raises(ValueError, match="shifted copy of every row"):
        shifted_rows(a, b, 0.5, 4, aligned=True)
    with pytest.raises(ValueError, match="size must be"):
        shifted_rows(a, b, 0.5, 0)


def _direct(task, name, params=None, **banks):
    t = dataclasses.replace(task, **banks)
    raw = hn.evaluate(hn.make_normalizer("raw").fit(t.targets), t)["R@1"]
    return raw, hn.evaluate(t.fit(hn.make_normalizer(name, **(params or {}))), t)["R@1"]


@pytest.mark.parametrize("side", SHIFT_SIDES)
def test_endpoints_are_the_pure_inputs_and_the_ci_is_the_paired_bootstrap(world, side):
    task = world["task"]
    outside = {"query_bank": world["bank_out"], "target_bank": world["bank_out"][:60],
               "gallery": world["gallery_out"]}[side]
    methods = {"is": {}, "dualis": {}} if side == "target_bank" else {"is": {}, "nnn": {"k": 8}}
    df = shift_study(task, outside, side=side, methods=methods, shares=(0.0, 0.5, 1.0), n_boot=300, seed=2,
                     label="toy")
    assert list(df.columns) == ["label", "side", "share", "method", "params", "R@1", "R@1 lo", "R@1 hi", "raw R@1", "gain",
                                "gain lo", "gain hi", "skewness", "bank rows", "bank"]
    assert len(df) == 6 and set(df["side"]) == {side} and set(df["label"]) == {"toy"}
    assert set(df["bank"]) == {"query-agnostic"}   # no test row in any of the mixed banks
    key = "targets" if side == "gallery" else side
    pure_in = getattr(task, key)
    n = len(pure_in) if side == "gallery" else min(len(pure_in), len(outside))
    for share, rows in ((0.0, np.asarray(pure_in)[:n] if side == "gallery" else None), (1.0, outside)):
        for m in methods:
            got = df[(df["share"] == share) & (df["method"] == m)].iloc[0]
            if side != "gallery" and share == 0.0:
                # the bank at share 0: n rows of the task's own bank (a seeded subset); its fit must match
                rows = shifted_rows(np.asarray(pure_in), outside.astype(np.asarray(pure_in).dtype), 0.0, n, 2)
            raw, r1 = _direct(task, m, methods[m], **{key: rows[:n] if side != "gallery" else rows})
            assert got["R@1"] == pytest.approx(r1, abs=1e-9) and got["raw R@1"] == pytest.approx(raw, abs=1e-9)
            assert got["gain"] == pytest.approx(r1 - raw, abs=1e-9)
            assert got["gain lo"] <= got["gain"] <= got["gain hi"] and got["R@1 lo"] <= got["R@1"] <= got["R@1 hi"]
    if side != "gallery":
        assert df["raw R@1"].nunique() == 1          # the test data never moves when a bank does
    # the paired bootstrap by hand at one point: same resampled query indices for the method and the raw scores
    t = dataclasses.replace(task, **{key: outside})
    if side != "gallery":
        t = dataclasses.replace(task, **{key: shifted_rows(np.asarray(pure_in), outside.astype(np.asarray(pure_in).dtype), 1.0, n, 2)})
    _, raw_ranks = hn.evaluate(hn.make_normalizer("raw").fit(t.targets), t, return_ranks=True)
    _, ranks = hn.evaluate(t.fit(hn.make_normalizer("is")), t, return_ranks=True)
    diff = (ranks < 1).astype(float) - (raw_ranks < 1)
    boot = np.random.default_rng([2, 1]).integers(0, task.n_queries, size=(300, task.n_queries))
    lo, hi = np.quantile(diff[boot].mean(1), [0.025, 0.975]) * 100
    got = df[(df["share"] == 1.0) & (df["method"] == "is")].iloc[0]
    assert (got["gain lo"], got["gain hi"]) == pytest.approx((lo, hi), abs=1e-12)


def test_the_default_methods_are_every_registered_method_the_banks_allow(world, capsys):
    task = world["task"]
    df = shift_study(task, world["bank_out"], shares=(0.0, 1.0), n_boot=20)
    transductive = {"otn", "l2n", "hungarian"}
    assert sorted(df["method"].unique()) == sorted(n for n in hn.NORMALIZERS if n != "raw" and n not in transductive)
    assert df.set_index(["share", "method"]).loc[(1.0, "nnn"), "params"] == "alpha=0.75, k=100"   # k lowered to the bank
    assert "NOTE: shift study: nnn's default k=128 is larger than this input allows (100); using k=100" in \
        capsys.readouterr().out
    no_target = dataclasses.replace(task, target_bank=None)
    df = shift_study(no_target, world["bank_out"], shares=(1.0,), n_boot=20)
    allowed = {n for n, c in hn.NORMALIZERS.items()
               if n != "raw" and n not in transductive and c.uses_target_bank != "required"}
    assert set(df["method"]) == allowed


def test_stops_helping_reads_the_first_share_without_a_gain():
    study = pd.DataFrame({"label": "x", "side": "query_bank", "share": [1.0, 0.0, 0.5, 0.0, 0.5, 1.0, 0.0, 0.5],
                          "method": ["a", "a", "a", "b", "b", "b", "c", "c"],
                          "gain lo": [-0.2, 1.0, 0.3, 0.5, 0.0, 0.4, -1.0, 2.0]})
    got = stops_helping(study).set_index("method")
    assert got.loc["a", "stops helping at share"] == 1.0 and got.loc["a", "helps at first share"]
    assert got.loc["b", "stops helping at share"] == 0.5           # a CI touching 0 is no longer a gain
    assert np.isnan(got.loc["c", "stops helping at share"]) and not got.loc["c", "helps at first share"]
    assert got.loc["c", "verdict"] == "first above raw at share 0.5"   # below raw at 0: it never "stops"
    assert list(got["verdict"][["a", "b"]]) == ["no longer above raw from share 1",
                                                "no longer above raw from share 0.5"]
    assert np.isnan(stops_helping(study[study["method"] != "c"].assign(**{"gain lo": 1.0}))
                    .set_index("method").loc["a", "stops helping at share"])
    with pytest.raises(ValueError, match="missing columns"):
        stops_helping(study.drop(columns="gain lo"))


def test_bad_arguments_are_refused_with_their_names(world):
    task, out = world["task"], world["bank_out"]
    with pytest.raises(ValueError, match="side must be one of"):
        shift_study(task, out, side="queries")
    with pytest.raises(TypeError, match="task must be a hubnorm.RetrievalTask"):
        shift_study(object(), out)
    with pytest.raises(TypeError, match="one string"):
        shift_study(task, out, methods="nnn")
    with pytest.raises(ValueError, match="raw uses no bank"):
        shift_study(task, out, methods=["raw"])
    with pytest.raises(ValueError, match="unknown method 'nnnn'"):
        shift_study(task, out, methods=["nnnn"])
    with pytest.raises(ValueError, match="otn is transductive"):
        shift_study(task, out, methods=["otn"])
    with pytest.raises(ValueError, match="methods is empty"):
        shift_study(task, out, methods=[])
    with pytest.raises(ValueError, match="shares must be distinct numbers"):
        shift_study(task, out, methods=["is"], shares=(0.0, 0.0))
    with pytest.raises(ValueError, match="shares must be distinct numbers"):
        shift_study(task, out, methods=["is"], shares=(0.0, 2.0))
    with pytest.raises(ValueError, match="outside must be 2-D"):
        shift_study(task, out[0], methods=["is"])
    with pytest.raises(ValueError, match="task has no target_bank"):
        shift_study(dataclasses.replace(task, target_bank=None), out, side="target_bank", methods=["is"])
    with pytest.raises(ValueError, match="n_boot must be"):
        shift_study(task, out, methods=["is"], n_boot=0)


@pytest.mark.shared_data
def test_real_shift_distorted_audio_galleries(monkeypatch, tmp_path):
    """AudioCaps under LAION-CLAP: the test clips replaced step by step by their noisy re-encoding (the text queries
    and the banks of the other clips unchanged). Endpoints against direct fits; the CI brackets every gain."""
    monkeypatch.setenv("HUBNORM_REAL_MIRROR", str(shared_path("embeddings")))
    monkeypatch.setenv("HUBNORM_CACHE", str(tmp_path / "cache"))
    from hubnorm.data import real

    ds = hn.load_embeddings("real:audiocaps-clap")
    test = ds.split("test")
    other = [s for name, s in ds.splits.items() if name != "test"]
    gal = real.real_galleries("audiocaps-clap")
    noisy = gal["noisy_snr10dB"][real.clip_index(test.image_ids)].astype(np.float64)
    noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
    task = hn.RetrievalTask(test.captions, test.images, hn.Positives.from_labels(test.caption_to_image, len(test.images)),
                            query_bank=np.concatenate([o.captions for o in other]),
                            target_bank=np.concatenate([o.images for o in other]), direction="t2a")
    df = shift_study(task, noisy, side="gallery", methods=["is", "sn", "dbsn"], shares=(0.0, 0.5, 1.0), n_boot=200)
    assert len(df) == 9
    for m in ("is", "sn", "dbsn"):
        raw, r1 = _direct(task, m, targets=noisy.astype(task.targets.dtype))
        end = df[(df["share"] == 1.0) & (df["method"] == m)].iloc[0]
        assert end["R@1"] == pytest.approx(r1, abs=1e-9) and end["raw R@1"] == pytest.approx(raw, abs=1e-9)
    assert (df["gain lo"] <= df["gain"]).all() and (df["gain"] <= df["gain hi"]).all()
    assert df[df["share"] == 0.0]["raw R@1"].iloc[0] > df[df["share"] == 1.0]["raw R@1"].iloc[0]   # noise hurts raw


def test_plot_shift_draws_one_panel_per_method_with_bands_and_stars(world):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    df = shift_study(world["task"], world["bank_out"], methods={"is": {}, "nnn": {"k": 8}, "sn": {}},
                     shares=(0.0, 1.0), n_boot=20, label="a")
    df = pd.concat([df, df.assign(label="b", gain=df["gain"] + 1)], ignore_index=True)
    stars = {"nnn": pd.DataFrame({"share": [0.0, 1.0], "gain": [5.78, 4.88]})}
    fig = plot_shift(df, stars=stars, title="t")
    axes = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in axes] == ["is", "nnn", "sn"]
    for ax in axes:
        lines = [ln for ln in ax.get_lines() if ln.get_label() in ("a", "b")]
        assert [ln.get_label() for ln in lines] == ["a", "b"]
        m = ax.get_title()
        want = df[(df["method"] == m) & (df["label"] == "b")].sort_values("share")["gain"].to_numpy()
        assert np.allclose(lines[1].get_ydata(), want)
        assert len(ax.collections) == 2 + 2 * (m == "nnn")      # two CI bands, and two stars on the NNN panel
    star = [c for c in axes[1].collections if type(c).__name__ == "PathCollection"]   # scatter, not a band
    assert sorted(tuple(map(float, c.get_offsets()[0])) for c in star) == [(0.0, 5.78), (1.0, 4.88)]
    plt.close(fig)


def test_review_findings_on_the_shift_study_stay_fixed(world):
    task, out = world["task"], world["bank_out"]
    df = shift_study(task, out, methods=["is"], shares=(0.0, 1.0), n_boot=10, label=None)
    assert len(stops_helping(df)) == 1                                 # a missing label is a group too
    with pytest.raises(ValueError, match="several rows for one"):
        stops_helping(pd.concat([df, df]))
    with pytest.raises(TypeError, match="shares must be a list"):
        shift_study(task, out, methods=["is"], shares=0.5)
    with pytest.raises(TypeError, match="the parameters of is must be a dict"):
        shift_study(task, out, methods={"is": None})
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        shift_study(task, out, methods=["is"], seed=-1)
    with pytest.raises(ValueError, match="size does not apply to side='gallery'"):
        shift_study(task, world["gallery_out"], side="gallery", methods=["is"], size=10)
    with pytest.raises(ValueError, match="shares must be distinct numbers"):
        shift_study(task, out, methods=["is"], shares=("0", 1.0))
    with pytest.raises(ValueError, match=r"share must be in \[0, 1\]; got '0.5'"):
        shifted_rows(np.zeros((4, 2)), np.zeros((4, 2)), "0.5", 2)
