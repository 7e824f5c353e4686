"""``hubnorm_companion.studies`` in small pieces, on a small seeded task: ``fraction_size`` and
``distinct_fractions`` at their boundaries (every NOTE written out), ``subsample_rows`` against the seeded draw
written out by hand (every guard by its message), ``sinkhorn_iterations`` against ``iteration_table`` with every
argument passed on, ``occurrence_frame`` / ``occurrence_stats`` against a top-k count by hand, ``shifted_rows``
against the two seeded permutations written out by hand, the methods a shift study accepts (each refusal by its
message), one shift study recomputed point by point (fit, paired bootstrap CIs of R@1 and of the gain, hubness at
the study's ``k``, params, bank rows) and ``stops_helping`` at its boundaries. ``distinct_fractions``'s default
``unit`` was ``"rows"`` (its NOTE read "1-rows bank ... of 250 rowss"); it is ``"row"`` now, tested here.

Survivors judged equivalent (no test can tell them apart):
- ``fraction_size``: ``fraction >= 1`` -> ``> 1`` (at 1, ``round(1 * n)`` is ``n`` as well).
- ``subsample_rows``: ``replace=None`` (falsy: the same draw as ``replace=False``).
- ``occurrence_stats`` / ``stops_helping``: ``groupby(sort=None)`` and ``dropna=None`` (pandas reads None as False);
  ``sort_values(kind="STABLE")`` (NumPy accepts the upper-case name); ``float("NAN")`` (the same NaN).
- ``_methods``: ``getattr(cls, "transductive", None)`` (None is falsy like False).
- ``shift_study``: ``as_embeddings(..., device=None)`` or the device dropped (None means CPU on a machine without
  CUDA, as here; on a CUDA machine ``.numpy()`` of a CUDA tensor fails and every shift study test kills it);
  ``integers(m, size=...)`` (one bound means ``[0, m)``, the same draw); ``make_normalizer("RAW")`` (names are
  case-insensitive); ``.astype(None)`` of the hit vectors (float64 either way).
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pandas as pd
import pytest

import hubnorm as hn
from hubnorm_companion import studies
from hubnorm_companion.studies import (
    SHIFT_SIDES, distinct_fractions, fraction_size, occurrence_frame, occurrence_stats, shift_study, shifted_rows,
    sinkhorn_iterations, stops_helping, subsample_rows,
)
from hubnorm.sweeps import iteration_table

D = 16


def _exact(message):
    """A pattern for the whole message (``match`` searches, so a changed start or end would pass otherwise)."""
    return "^" + re.escape(message) + "$"


def _unit(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def world():
    rng = np.random.default_rng(11)
    hubs = _unit(rng.standard_normal((3, D)))
    images = _unit(rng.standard_normal((30, D)) + 0.9 * hubs[rng.integers(0, 3, 30)])
    captions = _unit(images.repeat(2, 0) + 0.8 * rng.standard_normal((60, D)))
    bank_in = _unit(images[rng.integers(0, 30, 140)] + 0.8 * rng.standard_normal((140, D)))
    bank_out = _unit(rng.standard_normal((140, D)))
    task = hn.build_tasks(images, captions, np.arange(60) // 2, caption_bank=bank_in,
                          image_bank=_unit(rng.standard_normal((40, D))), directions=["t2i"])["t2i"]
    return {"task": task, "bank_out": bank_out, "gallery_out": _unit(images + 0.7 * rng.standard_normal(images.shape))}


# ------------------------------------------------------------------------------------------- fractions
def test_fraction_size():
    assert fraction_size(1.0, 250) == 250 and fraction_size(1.5, 7) == 7
    assert isinstance(fraction_size(1, np.int64(9)), int)
    assert fraction_size(0.5, 7) == 4 and fraction_size(0.5, 5) == 2      # round half to even: 3.5 -> 4, 2.5 -> 2
    assert fraction_size(0.3, 10) == 3 and fraction_size(0.99, 10) == 10
    assert fraction_size(1 / 1024, 250) == 1 and fraction_size(0.004, 250) == 1   # 0.98 rounds to 1; 0 is clamped


def test_distinct_fractions_notes_every_dropped_fraction(capsys):
    kept = distinct_fractions([1 / 4, 1 / 256, 1 / 512, 0.25, 1 / 1024], 250, what="bank share", unit="caption")
    assert kept == [1 / 4, 1 / 256]
    assert capsys.readouterr().out.splitlines() == [
        "NOTE: bank share 1/512 (0.00195312) gives the same 1-caption bank as 1/256 (0.00390625) of 250 captions "
        "(clamped to at least one): it is not run and not compared as a separate size",
        "NOTE: bank share 1/4 (0.25) gives the same 62-caption bank as 1/4 (0.25) of 250 captions: it is not run "
        "and not compared as a separate size",
        "NOTE: bank share 1/1024 (0.000976562) gives the same 1-caption bank as 1/256 (0.00390625) of 250 captions "
        "(clamped to at least one): it is not run and not compared as a separate size"]
    assert distinct_fractions([1.0, 1.5, 0.5], 10, unit="image") == [1.0, 0.5]
    assert capsys.readouterr().out == ("NOTE: fraction 1 (1.5) gives the same 10-image bank as 1 (1) of 10 images: "
                                       "it is not run and not compared as a separate size\n")
    assert distinct_fractions([0.5, 0.2, 0.1], 10) == [0.5, 0.2, 0.1] and capsys.readouterr().out == ""
    # the defaults read as words: "1-row bank ... of 250 rows" (not "1-rows bank ... of 250 rowss")
    assert distinct_fractions([1 / 256, 1 / 512], 250) == [1 / 256]
    assert capsys.readouterr().out == ("NOTE: fraction 1/512 (0.00195312) gives the same 1-row bank as 1/256 "
                                       "(0.00390625) of 250 rows (clamped to at least one): it is not run and not "
                                       "compared as a separate size\n")
    assert distinct_fractions([], 10) == []


def test_subsample_rows_is_the_seeded_sorted_draw():
    x = np.arange(40, dtype=np.float64).reshape(20, 2)
    for seed, frac in ((0, 0.25), (5, 0.5), (3, 0.01)):
        n = max(1, int(round(frac * 20)))
        want = np.sort(np.random.default_rng(seed).choice(20, n, replace=False))
        got = subsample_rows(x, frac, seed=seed)
        np.testing.assert_array_equal(got, x[want])
        assert len(got) == n and np.all(np.diff(got[:, 0]) > 0)     # original order, no row twice
    np.testing.assert_array_equal(subsample_rows(x, 0.25), subsample_rows(x, 0.25, seed=0))   # default seed 0
    assert subsample_rows(x, 1.0) is x and subsample_rows(x, 1, seed=3) is x


@pytest.mark.parametrize("bad", [True, 0, 0.0, -0.5, 1.01, "0.5", None])
def test_subsample_rows_refuses_bad_fractions(bad):
    error = TypeError if isinstance(bad, (bool, str, type(None))) else ValueError
    with pytest.raises(error, match=_exact(f"fraction must be a number in (0, 1]; got {bad!r}")):
        subsample_rows(np.zeros((4, 2)), bad)


# ------------------------------------------------------------------------------------------- iterations
def test_sinkhorn_iterations_pass_every_argument_on(world):
    task = world["task"]
    kw = dict(tau=0.05, iterations=[1, 4], converged=50, tol=1e-5, query_aware=True, fixed={"cache_bytes": 1 << 20})
    got = sinkhorn_iterations(task, ["sn", "dbsn"], show_progress=False, **kw)
    assert list(got.columns) == ["method", "setting", "T max", "iterations run", "R@1", "fit_s"]
    assert list(got["method"]) == [hn.DISPLAY_NAMES["sn"]] * 3 + [hn.DISPLAY_NAMES["dbsn"]] * 3
    assert list(got.index) == list(range(6))
    cols = ["setting", "T max", "iterations run", "R@1"]
    for i, name in enumerate(["sn", "dbsn"]):
        want = iteration_table(task, name, kw["iterations"], **{k: v for k, v in kw.items() if k != "iterations"})
        pd.testing.assert_frame_equal(got.iloc[3 * i:3 * i + 3][cols].reset_index(drop=True),
                                      want[cols].reset_index(drop=True))
    plain = sinkhorn_iterations(task, ["sn"], **{**kw, "query_aware": False}, show_progress=False)
    assert not np.allclose(plain["R@1"], got["R@1"].iloc[:3]) or \
        list(plain["iterations run"]) != list(got["iterations run"].iloc[:3])


def test_sinkhorn_iterations_defaults_reach_iteration_table(world, monkeypatch):
    calls = []

    def spy(task, name, iterations, **kw):
        calls.append((name, tuple(iterations), kw))
        return pd.DataFrame({"setting": ["T=1"], "T max": [1], "iterations run": [1], "R@1": [50.0], "fit_s": [0.1]})

    monkeypatch.setattr(studies, "iteration_table", spy)
    got = sinkhorn_iterations(world["task"])
    defaults = dict(tau=0.01, converged=1000, tol=1e-7, query_aware=False, fixed=None, show_progress=True)
    assert calls == [("sn", (1, 3, 10, 30, 100), defaults), ("dbsn", (1, 3, 10, 30, 100), defaults)]
    assert list(got["method"]) == [hn.DISPLAY_NAMES["sn"], hn.DISPLAY_NAMES["dbsn"]]
    calls.clear()
    got = sinkhorn_iterations(world["task"], ["custom"], show_progress=False)
    assert list(got["method"]) == ["custom"] and calls[0][2]["show_progress"] is False   # no display name: as given
    calls.clear()
    sinkhorn_iterations(world["task"], ["sn"], tau=0.2, iterations=[2], converged=7, tol=0.5, query_aware=True,
                        fixed={"n_iter_max": 3}, show_progress=False)
    assert calls == [("sn", (2,), dict(tau=0.2, converged=7, tol=0.5, query_aware=True, fixed={"n_iter_max": 3},
                                       show_progress=False))]


# ------------------------------------------------------------------------------------------- k-occurrence
def _n_k_by_hand(queries, targets, k):
    s = np.asarray(queries, dtype=np.float64) @ np.asarray(targets, dtype=np.float64).T
    top = np.argsort(-s, axis=1, kind="stable")[:, :k]
    return np.bincount(top.ravel(), minlength=len(targets))


def test_occurrence_frame_and_stats(world):
    task = world["task"]
    raw = task.fit(hn.make_normalizer("raw"))
    fitted = {"zeta": raw, "alpha": task.fit(hn.make_normalizer("is"))}
    occ = occurrence_frame(fitted, task, 3)
    assert list(occ.columns) == ["method", "target", "N_k"] and list(occ.index) == list(range(2 * task.n_targets))
    assert list(occ["method"]) == ["zeta"] * task.n_targets + ["alpha"] * task.n_targets
    assert list(occ["target"]) == list(range(task.n_targets)) * 2
    np.testing.assert_array_equal(occ["N_k"].iloc[:task.n_targets], _n_k_by_hand(task.queries, task.targets, 3))
    assert occ.groupby("method")["N_k"].sum().tolist() == [3 * task.n_queries] * 2
    st = occurrence_stats(occ, 3, task.n_queries)
    assert list(st["method"]) == ["zeta", "alpha"]                     # first-appearance order, not sorted
    n_k = _n_k_by_hand(task.queries, task.targets, 3).astype(np.float64)
    expected = 3 * task.n_queries / task.n_targets
    assert st.loc[0, "expected"] == pytest.approx(expected) and st.loc[0, "k"] == 3
    assert st.loc[0, "max"] == n_k.max()
    assert st.loc[0, "skewness"] == pytest.approx(np.mean((n_k - n_k.mean()) ** 3) / n_k.std() ** 3)
    assert st.loc[1, "skewness"] == pytest.approx(hn.hubness_stats(occ["N_k"].iloc[task.n_targets:].to_numpy(), 3,
                                                                     task.n_queries)["skewness"])


# ------------------------------------------------------------------------------------------- shifted rows
def _mix_by_hand(inside, outside, share, size, seed):
    rng = np.random.default_rng(seed)
    n_out = int(round(share * size))
    p_in, p_out = rng.permutation(len(inside)), rng.permutation(len(outside))
    rows = list(outside[p_out[:n_out]]) + list(inside[p_in[n_out:size]])
    return np.array(rows)[rng.permutation(size)]


def test_shifted_rows_is_the_seeded_mixture_written_out():
    inside = np.arange(24, dtype=np.float64).reshape(12, 2)
    outside = -1 - np.arange(20, dtype=np.float64).reshape(10, 2)
    for share, size, seed in ((0.0, 10, 0), (0.35, 10, 3), (0.5, 7, 1), (1.0, 10, 2), (0.25, 1, 0)):
        got = shifted_rows(inside, outside, share, size, seed)
        np.testing.assert_array_equal(got, _mix_by_hand(inside, outside, share, size, seed))
    np.testing.assert_array_equal(shifted_rows(inside, outside, 0.35, 10), shifted_rows(inside, outside, 0.35, 10, 0))
    # number types other than float
    np.testing.assert_array_equal(shifted_rows(inside, outside, np.float32(0.5), np.int64(6), 4),
                                  _mix_by_hand(inside, outside, 0.5, 6, 4))
    np.testing.assert_array_equal(shifted_rows(inside, outside, np.int64(1), 6, 4),
                                  _mix_by_hand(inside, outside, 1, 6, 4))
    np.testing.assert_array_equal(shifted_rows(inside, outside, 0, 6, 4), _mix_by_hand(inside, outside, 0, 6, 4))
    np.testing.assert_array_equal(shifted_rows(inside.tolist(), outside.tolist(), 0.5, 6, 4),
                                  _mix_by_hand(inside, outside, 0.5, 6, 4))


def test_shifted_rows_aligned_written_out():
    inside = np.arange(20, dtype=np.float64).reshape(10, 2)
    outside = -inside - 1
    for share, seed in ((0.0, 0), (0.3, 5), (0.55, 1), (1.0, 2)):
        moved = np.random.default_rng(seed).permutation(10)[: int(round(share * 10))]
        want = inside.copy()
        want[moved] = outside[moved]
        got = shifted_rows(inside, outside, share, 3, seed, aligned=True)   # size is every row
        np.testing.assert_array_equal(got, want)
    assert inside[0, 0] == 0.0                                           # the input is not changed
    np.testing.assert_array_equal(shifted_rows(inside, outside, 0.3, None, aligned=True),
                                  shifted_rows(inside, outside, 0.3, 3, 0, aligned=True))


def test_shifted_rows_guards_by_message():
    a, b = np.zeros((5, 2)), np.zeros((4, 2))
    for bad in (1.5, -0.01, "0.5", b"1", True, None, [0.5]):
        with pytest.raises(ValueError, match=_exact(f"share must be in [0, 1]; got {bad!r}")):
            shifted_rows(a, b, bad, 3)
    with pytest.raises(ValueError, match=_exact(
            "inside and outside must be 2-D with the same width; got (5, 2) and (4, 3)")):
        shifted_rows(a, np.zeros((4, 3)), 0.5, 3)
    with pytest.raises(ValueError, match=re.escape("inside and outside must be 2-D with the same width; got (5,) and")):
        shifted_rows(np.zeros(5), b, 0.5, 3)
    with pytest.raises(ValueError, match=re.escape("got (5, 2) and (4,)")):
        shifted_rows(a, np.zeros(4), 0.5, 3)
    with pytest.raises(ValueError, match=_exact(
            "size 5 is larger than a pool (inside 5 rows, outside 4): every share must be drawable without repeating "
            "a row")):
        shifted_rows(a, b, 0.5, 5)
    with pytest.raises(ValueError, match=re.escape("size 5 is larger than a pool (inside 4 rows, outside 5)")):
        shifted_rows(b, a, 0.5, 5)
    assert shifted_rows(a, b, 0.5, 4).shape == (4, 2)                   # the smaller pool's size is allowed
    with pytest.raises(ValueError, match=_exact(
            "an aligned shift needs the shifted copy of every row: inside is (5, 2), outside (4, 2)")):
        shifted_rows(a, b, 0.5, 4, aligned=True)
    with pytest.raises(ValueError, match=r"^size must be >= 1; got 0$"):
        shifted_rows(a, b, 0.5, 0)


# ------------------------------------------------------------------------------------------- methods
def test_methods_of_a_shift_study(world):
    task = world["task"]
    banked = {n for n, c in hn.NORMALIZERS.items()
              if (c.uses_query_bank != "unused" or c.uses_target_bank != "unused")
              and not getattr(c, "transductive", False)}
    assert set(studies._methods(None, task)) == banked and all(v == {} for v in studies._methods(None, task).values())
    no_query = dataclasses.replace(task, query_bank=None)
    assert set(studies._methods(None, no_query)) == {
        n for n in banked if hn.NORMALIZERS[n].uses_query_bank != "required"}
    assert set(studies._methods(None, no_query)) != banked
    no_target = dataclasses.replace(task, target_bank=None)
    assert set(studies._methods(None, no_target)) == {
        n for n in banked if hn.NORMALIZERS[n].uses_target_bank != "required"}
    params = {"k": 8}
    got = studies._methods({"nnn": params, "is": {}}, task)
    assert got == {"nnn": {"k": 8}, "is": {}} and got["nnn"] is not params
    assert studies._methods(("is", "nnn"), task) == {"is": {}, "nnn": {}}


def test_methods_guards_by_message(world):
    task = world["task"]
    m = studies._methods
    with pytest.raises(TypeError, match=_exact(
            "methods must be a list of registry names or a {name: params} mapping; got one string ('nnn'): pass "
            "['nnn']")):
        m("nnn", task)
    with pytest.raises(ValueError, match=_exact(
            f"unknown method 'nnnn' for a shift study; registered methods: {sorted(hn.NORMALIZERS)}")):
        m(["is", "nnnn"], task)
    with pytest.raises(ValueError, match=_exact(
            "raw uses no bank: a shift study has nothing to shift for it (it is the baseline every gain is measured "
            "against)")):
        m(["raw"], task)
    with pytest.raises(ValueError, match=_exact(
            "otn is transductive (fitted on the test queries themselves): it has no bank to shift; leave it out of "
            "a shift study")):
        m({"otn": {}}, task)
    with pytest.raises(TypeError, match=_exact(
            "the parameters of is must be a dict (e.g. {'tau': 0.02}, or {} for the defaults); got ['tau']")):
        m({"is": ["tau"]}, task)
    with pytest.raises(ValueError, match=r"^methods is empty: name at least one registered method$"):
        m({}, task)


# ------------------------------------------------------------------------------------------- shift study
def test_shift_study_recomputed_point_by_point(world):
    task, out = world["task"], world["bank_out"]
    df = shift_study(task, out, side="query_bank", methods={"is": {}}, shares=(0.0, 0.5, 1.0), size=50, n_boot=40,
                     seed=3, k=4, label="L")
    assert list(df["share"]) == [0.0, 0.5, 1.0] and set(df["bank rows"]) == {50}
    m = task.n_queries
    boot = np.random.default_rng([3, 1]).integers(0, m, size=(40, m))
    inside = np.asarray(task.query_bank)
    _, raw_ranks = hn.evaluate(hn.make_normalizer("raw").fit(task.targets), task, return_ranks=True)
    raw_hit = (raw_ranks < 1).astype(np.float64)
    for i, share in enumerate((0.0, 0.5, 1.0)):
        bank = _mix_by_hand(inside, out.astype(inside.dtype), share, 50, 3)
        t = dataclasses.replace(task, query_bank=bank)
        norm = t.fit(hn.make_normalizer("is"))
        scores, ranks = hn.evaluate(norm, t, return_ranks=True)
        hit = (ranks < 1).astype(np.float64)
        row = df.iloc[i]
        assert (row["label"], row["side"], row["method"]) == ("L", "query_bank", "is")
        assert row["R@1"] == pytest.approx(hit.mean() * 100, abs=1e-9)
        assert row["raw R@1"] == pytest.approx(raw_hit.mean() * 100, abs=1e-9)
        assert row["gain"] == pytest.approx((hit - raw_hit).mean() * 100, abs=1e-9)
        lo, hi = np.quantile(hit[boot].mean(1), [0.025, 0.975]) * 100
        assert (row["R@1 lo"], row["R@1 hi"]) == pytest.approx((lo, hi), abs=1e-9)
        lo, hi = np.quantile((hit - raw_hit)[boot].mean(1), [0.025, 0.975]) * 100
        assert (row["gain lo"], row["gain hi"]) == pytest.approx((lo, hi), abs=1e-9)
        assert row["skewness"] == pytest.approx(hn.hubness(norm, k=4, queries=t.queries)["skewness"], abs=1e-9)
        assert row["bank"] == scores["bank"]
        want = ", ".join(f"{p}={v}" for p, v in norm.get_params().items()
                         if p in type(norm).parameters and p not in studies.EXECUTION_OPTIONS)
        assert row["params"] == want and "cache_bytes" not in row["params"]
    # k decides the hubness column
    assert df.iloc[2]["skewness"] != pytest.approx(hn.hubness(norm, k=10, queries=task.queries)["skewness"], abs=1e-6)


def test_shift_study_defaults_and_the_target_bank(world):
    task, out = world["task"], world["bank_out"]
    df = shift_study(task, out[:40], side="target_bank", methods=["dualis"], shares=(1.0,), n_boot=10)
    assert set(df["bank rows"]) == {40} and list(df["label"]) == [""]   # the smaller pool; no label
    t = dataclasses.replace(task, target_bank=_mix_by_hand(np.asarray(task.target_bank), out[:40], 1.0, 40, 0))
    _, ranks = hn.evaluate(t.fit(hn.make_normalizer("dualis")), t, return_ranks=True)
    assert df.iloc[0]["R@1"] == pytest.approx((ranks < 1).mean() * 100, abs=1e-9)
    norm = t.fit(hn.make_normalizer("dualis"))
    assert df.iloc[0]["skewness"] == pytest.approx(hn.hubness(norm, k=10, queries=t.queries)["skewness"], abs=1e-9)
    q = shift_study(task, out, methods=["is"], shares=(1.0,))
    assert set(q["bank rows"]) == {140} and q.iloc[0]["side"] == "query_bank"
    t = dataclasses.replace(task, query_bank=_mix_by_hand(np.asarray(task.query_bank), out, 1.0, 140, 0))
    _, ranks = hn.evaluate(t.fit(hn.make_normalizer("is")), t, return_ranks=True)
    boot = np.random.default_rng([0, 1]).integers(0, task.n_queries, size=(200, task.n_queries))   # the defaults
    lo, hi = np.quantile((ranks < 1).astype(np.float64)[boot].mean(1), [0.025, 0.975]) * 100
    assert (q.iloc[0]["R@1 lo"], q.iloc[0]["R@1 hi"]) == pytest.approx((lo, hi), abs=1e-9)
    g = shift_study(task, world["gallery_out"], side="gallery", methods=["is"], shares=(0.0, 1.0), n_boot=10)
    assert set(g["bank rows"]) == {task.n_targets}
    assert g.iloc[0]["raw R@1"] != g.iloc[1]["raw R@1"]                  # the raw scores move with the gallery


def test_shift_study_mixes_banks_of_the_task_dtype(world, monkeypatch):
    task = world["task"]
    seen = []

    def spy(inside, outside, *args, **kw):
        seen.append((inside.dtype, outside.dtype))
        return shifted_rows(inside, outside, *args, **kw)

    monkeypatch.setattr(studies, "shifted_rows", spy)
    shift_study(task, world["bank_out"].astype(np.float64), methods=["is"], shares=(0.5,), n_boot=5)
    assert seen == [(np.asarray(task.query_bank).dtype, np.asarray(task.query_bank).dtype)]


def test_shift_study_lowers_a_default_k_only_above_the_limit(world, capsys):
    task, out = world["task"], world["bank_out"]
    df = shift_study(task, out, methods=["nnn"], shares=(0.0,), size=128, n_boot=10)
    assert df.iloc[0]["params"] == "alpha=0.75, k=128" and "NOTE" not in capsys.readouterr().out
    df = shift_study(task, out, methods=["nnn"], shares=(0.0,), size=127, n_boot=10)
    assert df.iloc[0]["params"] == "alpha=0.75, k=127"
    assert capsys.readouterr().out == ("NOTE: shift study: nnn's default k=128 is larger than this input allows "
                                       "(127); using k=127 (the params column says so)\n")
    df = shift_study(task, out, methods={"nnn": {"k": 5}}, shares=(0.0,), size=127, n_boot=10)
    assert df.iloc[0]["params"] == "alpha=0.75, k=5" and capsys.readouterr().out == ""
    with pytest.raises(ValueError, match="k"):
        shift_study(task, out, methods={"nnn": {"k": 128}}, shares=(0.0,), size=127, n_boot=10)


def test_shift_study_guards_by_message(world):
    task, out = world["task"], world["bank_out"]
    with pytest.raises(ValueError, match=_exact(f"side must be one of {SHIFT_SIDES}; got 'queries'")):
        shift_study(task, out, side="queries")
    for bad in ("0.5", b"0", 0.5, None):
        with pytest.raises(TypeError, match=_exact(
                f"shares must be a list of numbers in [0, 1], e.g. [0, 0.5, 1]; got {bad!r}")):
            shift_study(task, out, methods=["is"], shares=bad)
    for bad in (-1, 1.0, True, "0"):
        with pytest.raises(ValueError, match=_exact(f"seed must be an integer >= 0; got {bad!r}")):
            shift_study(task, out, methods=["is"], seed=bad)
    with pytest.raises(ValueError, match=r"^k must be >= 1; got 0$"):
        shift_study(task, out, methods=["is"], k=0)
    with pytest.raises(ValueError, match=_exact(
            "size does not apply to side='gallery' (every gallery row is kept, shifted or not): leave it None")):
        shift_study(task, world["gallery_out"], side="gallery", methods=["is"], size=10)
    with pytest.raises(TypeError, match=r"^task must be a hubnorm.RetrievalTask; got dict$"):
        shift_study({}, out)
    with pytest.raises(ValueError, match=r"^n_boot must be >= 1; got 0$"):
        shift_study(task, out, methods=["is"], n_boot=0)
    for bad in ((0.0, "1"), (True,), (0.5, None), (), (0.0, -0.1), (1.01,), (0.5, 0.5)):
        with pytest.raises(ValueError, match=_exact(f"shares must be distinct numbers in [0, 1]; got {list(bad)}")):
            shift_study(task, out, methods=["is"], shares=bad)
    with pytest.raises(ValueError, match=_exact(
            "task has no query_bank to shift: build it with one (the in-distribution pool)")):
        shift_study(dataclasses.replace(task, query_bank=None), out, methods=["dualis"])
    with pytest.raises(ValueError, match=r"^size must be >= 1; got 0$"):
        shift_study(task, out, methods=["is"], size=0)
    with pytest.raises(ValueError, match=_exact(
            f"outside has dimension 4 but the other embeddings have {D}: use the same encoder for both")):
        shift_study(task, out[:, :4], methods=["is"])
    # shares of NumPy number types and the boundaries 0 and 1 are accepted
    df = shift_study(task, out, methods=["is"], shares=[np.float32(0.0), np.int64(1)], n_boot=5, seed=0)
    assert list(df["share"]) == [0.0, 1.0]


# ------------------------------------------------------------------------------------------- stops_helping
def test_stops_helping_boundaries():
    study = pd.DataFrame({"label": ["x"] * 4 + ["y"] * 2, "side": "query_bank",
                          "share": [0.5, 0.0, 1.0, 0.25, 0.0, 1.0], "method": ["a"] * 4 + ["a"] * 2,
                          "gain lo": [0.1, 0.0, -1.0, 0.2, 1e-9, 2.0]})
    got = stops_helping(study)
    assert list(got.columns) == ["label", "side", "method", "helps at first share", "stops helping at share",
                                 "verdict"]
    assert got.to_dict("records") == [   # x: a gain CI touching 0 at share 0, above it at 0.25 and 0.5
        {"label": "x", "side": "query_bank", "method": "a", "helps at first share": False,
         "stops helping at share": pytest.approx(np.nan, nan_ok=True), "verdict": "first above raw at share 0.25"},
        {"label": "y", "side": "query_bank", "method": "a", "helps at first share": True,
         "stops helping at share": pytest.approx(np.nan, nan_ok=True), "verdict": "above raw at every share"}]
    assert type(got.loc[0, "helps at first share"]) in (bool, np.bool_)
    later = study.assign(**{"gain lo": [0.1, 0.3, 0.0, 0.2, 1.0, 1.0]})
    assert stops_helping(later).loc[0, "stops helping at share"] == 1.0
    assert stops_helping(later).loc[0, "verdict"] == "no longer above raw from share 1"


def test_stops_helping_says_never_when_a_method_never_beat_raw():
    """A method below raw at the undistorted share never helped: no share at which it "stops" (notebook 08 once
    listed every such method as "stops helping at share 0.00")."""
    study = pd.DataFrame({"label": "x", "side": "gallery", "share": [0.0, 0.5, 1.0] * 2,
                          "method": ["a"] * 3 + ["b"] * 3, "gain lo": [0.0, -1.0, -2.0, -0.5, 0.25, -0.1]})
    got = stops_helping(study).set_index("method")
    assert not got.loc["a", "helps at first share"] and np.isnan(got.loc["a", "stops helping at share"])
    assert got.loc["a", "verdict"] == "never above raw"
    assert not got.loc["b", "helps at first share"] and np.isnan(got.loc["b", "stops helping at share"])
    assert got.loc["b", "verdict"] == "first above raw at share 0.5"


def test_stops_helping_guards_by_message():
    study = pd.DataFrame({"label": "x", "side": "s", "share": [0.0, 0.0], "method": "a", "gain lo": [1.0, 2.0]})
    with pytest.raises(ValueError, match=_exact(
            "study must be a shift_study table; missing columns ['gain lo', 'share']")):
        stops_helping(study.drop(columns=["share", "gain lo"]))
    with pytest.raises(ValueError, match=_exact(
            "study has several rows for one (label, side, method, share): give each study of a concatenated table "
            "its own label")):
        stops_helping(study)
    assert len(stops_helping(study.assign(side=["s", "t"]))) == 2
    assert len(stops_helping(study.assign(method=["a", "b"]))) == 2
    assert len(stops_helping(study.assign(label=["x", "z"]))) == 2
    assert len(stops_helping(study.assign(share=[0.0, 1.0]))) == 1


def test_stops_helping_keeps_the_groups_in_order_of_appearance():
    # 24 groups given in reverse name order, each with its shares shuffled: the output follows the input's groups
    rng = np.random.default_rng(0)
    names = [f"m{i:02d}" for i in range(24)][::-1]
    rows = []
    for i, m in enumerate(names):
        for share in rng.permutation([0.0, 0.5, 1.0]):
            rows.append({"label": "z" if i % 2 else "a", "side": "query_bank", "share": float(share), "method": m,
                         "gain lo": 1.0 if share < 0.5 or i % 3 else -1.0})
    got = stops_helping(pd.DataFrame(rows))
    assert list(got["method"]) == names
    assert list(got["label"]) == ["z" if i % 2 else "a" for i in range(24)]
    assert list(got["stops helping at share"].fillna(-1)) == [-1.0 if i % 3 else 0.5 for i in range(24)]
