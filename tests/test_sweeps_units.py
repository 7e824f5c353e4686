"""Unit checks of hubnorm.sweeps aimed at mutants that survived tests/test_sweep_*.py (see
benchmarks/reports/mutation/sweeps.md): the guards' messages of offset_sweep_ranks and iteration_table, the dtypes
of the empty and of the code tables, the float64 working arithmetic of _sure_codes, offset_lines' tolerance and its
choice of parameter, line ranks against dense ranks when the grouping is far from a line or the candidate pass
runs in exactly two chunks, sweep_table / iteration_table numbers against dense float64 numpy ranks, their columns,
bank marks and progress bar.

Survivors judged equivalent (no observable change on a CPU run):
* every ``device=dev`` -> ``device=None`` / dropped ``device`` (``_identity_2``, ``_segment_41``,
  ``offset_sweep_ranks_31/171/176/191/231/261/321/342/346/392/451/552/632/816``, ``_position_tables_72``,
  ``iteration_table_146``): the default device is the CPU the data already lives on (observable only on an
  accelerator);
* ``offset_sweep_ranks_341`` (dtype of p0 None): the fill value _BIG is an int, so torch infers int64 anyway;
* ``_segment_31`` (unit 2.0 when big is 0 or inf): big == 0 means D == 0 and x == 0 (lam 0, residual 0 either way);
* ``offset_sweep_ranks_142/146/196`` (level 3x, 9 u X, widen minus the level): only the float slack changes, which
  moves pairs between "sure" and "counted exactly"; 196's sign flip is at most 64 u level, far inside the level;
* ``offset_sweep_ranks_152`` (a one-setting line stored with two equal ends), ``_566`` (best_e also computed for
  one positive per query, then unused), ``_721`` (``<=``: more pairs counted exactly), ``_882`` (a candidate is
  never a positive, so ``c_ == bc`` never holds), ``_521`` (cat of one tensor), ``_416`` (step 2 only when one row
  exceeds the scratch budget: other chunk size, same candidates), ``_486`` (``out=`` resizes the view to the
  index count);
* ``_flat_nonzero_2``: numpy and torch list the same indices; ``_position_buckets_16`` / ``_position_tables_36``:
  int-valued float keys hash and convert the same; ``_position_tables_21/22``: positions are clamped to [0, 1], so
  the last bucket is at most 3 M - 2 < nb - 2 and the clip never bites;
* ``_sure_codes_6`` (``.to(None)`` keeps A in wt already), ``_21`` (for float64 a Python float is exact, so the
  nextafter branch only runs for float32, whose default tensor dtype is float32), ``_62`` (posinf -> max float,
  clamped to 2 M like inf);
* ``sweep_table_56`` (``offset_lines(None, H)``: every setting alone, same exact ranks, slower);
* ``offset_sweep_ranks_76/81/82`` (queries' dim/dtype not enforced): q only feeds the bound smax (the scores come
  from ``ident.iter_scores``) and the task already checked the dimension;
* ``_evaluate_fitted_12/16/21/22/32/52/56``: the query embeddings are read by no method that is not an offset
  method (dis, dualdis, ls, mp, ... ignore ``queries``), their validation is already done by the task and
  ``ident.iter_scores``, and the blocks with chunk_size None give the same ranks;
* ``iteration_table_86`` (last 1 instead of 0: iterations start at 1), ``_121`` (the run goes on past convergence
  to n_iter; the recorded offsets are the same).

Not killed and not judged equivalent: ``offset_sweep_ranks_32`` (float64 offsets on a float32 task are not cast:
which rounding is "right" is unspecified) and ``offset_sweep_ranks_751`` (the decode of a suffix "behind" code;
the random lines here never reach a wrong count).
"""

import time

import numpy as np
import pytest
import torch

import hubnorm as hn
import hubnorm.sweeps as sw
from hubnorm.provenance import QUERY_AGNOSTIC, QUERY_AWARE
from hubnorm.sweeps import iteration_table, offset_lines, offset_sweep_ranks, sweep_table

pytestmark = pytest.mark.usefixtures("single_thread_torch")


def _unit(rng, n, d, dtype):
    x = rng.standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(dtype)


def _task(seed=0, n_img=30, per=2, d=16, bank=40, dtype=np.float64, direction="t2i"):
    rng = np.random.default_rng(seed)
    imgs = _unit(rng, n_img, d, dtype)
    c2i = np.repeat(np.arange(n_img), per)
    caps = imgs[c2i] + 0.8 * rng.standard_normal((n_img * per, d))
    caps = (caps / np.linalg.norm(caps, axis=1, keepdims=True)).astype(dtype)
    return hn.build_tasks(imgs, caps, c2i, caption_bank=_unit(rng, bank, d, dtype),
                          image_bank=_unit(rng, bank, d, dtype))[direction]


def _dense_ranks_of_scores(s, pos):
    """Independent numpy ranks of a dense score matrix: targets above the best positive, or tied and earlier."""
    out = np.empty(pos.n_queries, dtype=np.int64)
    for i in range(pos.n_queries):
        cols = pos.indices[pos.indptr[i]:pos.indptr[i + 1]]
        v = s[i, cols]
        best = v.max()
        bc = cols[v == best].min()
        row = s[i].copy()
        row[cols] = -np.inf
        out[i] = np.count_nonzero(row > best) + np.count_nonzero(row[:bc] == best)
    return out


def _dense_ranks(task, H):
    """Dense float64 ranks of S + h for every row h of H."""
    S = task.queries.astype(np.float64) @ task.targets.astype(np.float64).T
    return np.stack([_dense_ranks_of_scores(S + h[None, :], task.positives)
                     for h in np.asarray(H, dtype=np.float64)])


def _metrics(ranks, ks):
    return {**{f"R@{k}": 100.0 * np.mean(ranks < k) for k in ks}, "MdR": np.floor(np.median(ranks)) + 1}


# ---------------------------------------------------------------- offset_sweep_ranks: guards and shapes

def test_guard_messages_of_offset_sweep_ranks():
    task = _task()
    n = task.n_targets
    with pytest.raises(TypeError, match=r"offsets must be a torch.Tensor \(settings x targets\); got list$"):
        offset_sweep_ranks(task, [[0.0] * n])
    with pytest.raises(ValueError, match=rf"^offsets must be \(settings, {n}\); got \(3, {n + 1}\)$"):
        offset_sweep_ranks(task, torch.zeros(3, n + 1))
    H = torch.zeros(2, n, dtype=torch.float64)
    H[1, 0] = float("inf")
    with pytest.raises(ValueError, match=r"^offsets must be finite: a non-finite score has no rank"):
        offset_sweep_ranks(task, H)
    with pytest.raises(ValueError, match=r"^every line \(a, b, members\) needs members and ends a, b among the 2"):
        offset_sweep_ranks(task, torch.zeros(2, n, dtype=torch.float64), lines=[(2, 0, [0, 1])])


def test_no_settings_give_an_empty_int64_array():
    task = _task()
    out = offset_sweep_ranks(task, torch.zeros(0, task.n_targets))
    assert out.shape == (0, task.positives.n_queries) and out.dtype == np.int64


def test_unnormalized_embeddings_are_refused_by_default():
    task = _task()
    scaled = _task()
    scaled.targets = task.targets * 3.0   # a task validates at construction; these rows are set afterwards
    H = torch.zeros(1, task.n_targets, dtype=torch.float64)
    with pytest.raises(ValueError, match="targets rows are not L2-normalised"):
        offset_sweep_ranks(scaled, H)
    np.testing.assert_array_equal(offset_sweep_ranks(scaled, H, check_normalized=False), _dense_ranks(scaled, H))


def test_huge_norms_below_the_overflow_limit_are_ranked():
    """X = 1.001 max|q| max|t| + max|h| must stay under finfo.max / 2**14 (2.08e34 in float32): norms whose product
    is 1.5e34 pass (a bound of 2.001 smax, or one from the Frobenius norm of all queries, would refuse them)."""
    big = _task(dtype=np.float32, n_img=12, per=1)
    q = (big.queries.astype(np.float64) * 1e17).astype(np.float32)
    t = (big.targets.astype(np.float64) * 1.5e17).astype(np.float32)
    big.queries, big.targets = q, t   # a task validates at construction; these rows are set afterwards
    rng = np.random.default_rng(3)
    H = torch.from_numpy(np.stack([np.zeros(len(t)), rng.normal(0, 1e33, len(t))]).astype(np.float32))
    got = offset_sweep_ranks(big, H, check_normalized=False)
    S = torch.from_numpy(q) @ torch.from_numpy(t).T
    want = np.stack([hn.positive_ranks(S + h, big.positives) for h in H])
    np.testing.assert_array_equal(got, want)
    assert len(set(map(tuple, want))) == 2


# ---------------------------------------------------------------- offset_sweep_ranks: exact ranks on lines

def test_a_far_from_line_grouping_with_a_large_residual_stays_exact():
    """Unrelated offsets of size ~3 grouped as one line: the residual (> 1) must widen the level (2 (8 u X + 2 r)),
    never shrink it."""
    task = _task(seed=5, n_img=40, per=2)
    rng = np.random.default_rng(7)
    H = torch.from_numpy(rng.normal(0, 3.0, (5, task.n_targets)))
    lines = [(0, 1, [0, 1, 2, 3, 4])]
    np.testing.assert_array_equal(offset_sweep_ranks(task, H, lines=lines), _dense_ranks(task, H))


@pytest.mark.parametrize("per", [1, 3])
def test_candidate_pass_in_exactly_two_chunks(per, monkeypatch):
    task = _task(seed=2, n_img=40, per=per, d=12)
    bq = task.positives.n_queries
    monkeypatch.setattr(sw, "_UNION_CHUNK_BYTES", ((bq + 1) // 2) * task.n_targets * 8)
    points = [{"alpha": a, "k": k} for k in (1, 4) for a in (0.0, 0.5, 1.0, 2.0, -0.5)]
    norms = [hn.make_normalizer("nnn", **p) for p in points]
    engine = norms[0].local_engine(task.targets, task.query_bank)
    H = torch.stack([f["offsets_"] for f in type(norms[0]).fit_grid(norms, engine)])
    lines = offset_lines(points, H)
    assert len(lines) == 2
    dense = _dense_ranks(task, H)
    np.testing.assert_array_equal(offset_sweep_ranks(task, H, lines=lines), dense)
    # random offsets along exact lines reach the decoding of suffix codes and the exact count in between
    rng = np.random.default_rng(per)
    A, B = rng.normal(0, 0.3, (2, task.n_targets))
    lam = [0.0, 0.1, 0.35, 0.5, 0.8, 1.0]
    H2 = torch.from_numpy(np.stack([A + t * (B - A) for t in lam]))
    np.testing.assert_array_equal(offset_sweep_ranks(task, H2, lines=[(0, 5, list(range(6)))]),
                                  _dense_ranks(task, H2))


# ---------------------------------------------------------------- offset_lines

def test_three_settings_form_a_line():
    H = torch.tensor([[0.0, 1.0], [0.5, 1.5], [1.0, 2.0]], dtype=torch.float64)
    points = [{"alpha": a} for a in (0.0, 0.5, 1.0)]
    assert offset_lines(points, H) == [(0, 2, [0, 1, 2])]


def test_line_tolerance_is_64_eps_times_max_plus_one():
    """A middle member 64.5 eps off a flat segment (max |H| ~ 0): outside tol = 64 eps (max|H| + 1)."""
    eps = torch.finfo(torch.float64).eps
    r = 64.5 * eps
    H = torch.tensor([[0.0, 0.0], [r, 0.0], [0.0, 0.0]], dtype=torch.float64)
    points = [{"alpha": a} for a in (0.0, 1.0, 2.0)]
    assert offset_lines(points, H) == [(0, 0, [0]), (1, 1, [1]), (2, 2, [2])]
    H[1, 0] = 63.5 * eps
    assert offset_lines(points, H) == [(0, 2, [0, 1, 2])]


def test_non_numeric_parameters_never_form_lines():
    H = torch.tensor([[0.0], [1.0], [2.0]], dtype=torch.float64)
    points = [{"name": s, "alpha": a} for s, a in (("x", 0.0), ("y", 1.0), ("z", 2.0))]
    assert offset_lines(points, H) == [(0, 0, [0]), (1, 1, [1]), (2, 2, [2])]   # alpha: one setting per name
    # a numeric parameter with two values is no line either
    points = [{"alpha": a, "k": k} for a, k in ((0.0, 1), (1.0, 1), (0.0, 2))]
    assert offset_lines(points, H) == [(0, 0, [0]), (1, 1, [1]), (2, 2, [2])]


# ---------------------------------------------------------------- position tables and sure codes

@pytest.mark.parametrize("L, dtype", [(127, torch.uint8), (128, torch.int16), (16383, torch.int16),
                                      (16384, torch.int32)])
def test_position_table_dtypes(L, dtype):
    lam = tuple(np.linspace(0.0, 1.0, L))
    t_ahead, t_behind = sw._position_tables(sw._position_buckets(lam), "cpu")
    assert t_ahead.dtype == t_behind.dtype == dtype
    assert int(t_ahead.max()) <= 2 * L + 1


def test_sure_codes_work_in_float64_with_the_exact_level():
    """A flat margin just above a float64 level whose float32 rounding is above it: ahead at every position (a
    level or working precision rounded to float32 would call it nowhere)."""
    level = 0.1                                     # float32(0.1) > 0.1
    assert float(np.float32(level)) > level
    A = torch.tensor([level + 2 ** -40, level - 2 ** -40], dtype=torch.float64)
    lam = (0.0, 0.5, 1.0)
    L = len(lam)
    t_ahead, t_behind = sw._position_tables(sw._position_buckets(lam), "cpu")
    (code,) = sw._sure_codes(A, A.clone(), level, [(t_ahead, 1)])
    c = code.long().tolist()
    # code > L: a prefix; its count is code - (L + 1): all L positions for the first, none for the second
    assert [x - (L + 1) if x > L else x for x in c] == [L, 0]


# ---------------------------------------------------------------- sweep_table

def test_sweep_table_offset_method_numbers_columns_and_marks():
    task = _task(seed=1)
    points = [{"alpha": a, "k": 3} for a in (0.0, 0.5, 1.0)]
    table = sweep_table(task, "nnn", points, metric_ks=(1, 5))
    assert list(table.columns) == ["alpha", "k", "R@1", "R@5", "MdR", "bank"]
    H = torch.stack([task.fit(hn.make_normalizer("nnn", **p)).offsets_ for p in points])
    for row, ranks in zip(table.to_dict("records"), _dense_ranks(task, H)):
        for key, want in _metrics(ranks, (1, 5)).items():
            assert row[key] == pytest.approx(want), key
    assert set(table["bank"]) == {QUERY_AGNOSTIC}
    aware = sweep_table(task, "nnn", points, metric_ks=(1,), query_aware=True, full=True)
    assert "MnR" in aware.columns and set(aware["bank"]) == {QUERY_AWARE}


def test_sweep_table_with_unnormalized_embeddings_and_check_off():
    task = _task(seed=4)
    scaled = _task(seed=4)
    scaled.queries, scaled.targets = task.queries * 2.0, task.targets * 0.5   # set after the task's validation
    points = [{"alpha": a, "k": 2} for a in (0.0, 1.0, 2.0)]
    table = sweep_table(scaled, "nnn", points, fixed={"check_normalized": False}, metric_ks=(1,))
    H = torch.stack([scaled.fit(hn.make_normalizer("nnn", check_normalized=False, **p)).offsets_ for p in points])
    for row, ranks in zip(table.to_dict("records"), _dense_ranks(scaled, H)):
        assert row["R@1"] == pytest.approx(_metrics(ranks, (1,))["R@1"])


def test_sweep_table_of_a_gate_method_with_one_point():
    """dis is not an offset method (_evaluate_fitted): one point, its own metric_ks, equal to the reference."""
    task = _task(seed=3)
    table = sweep_table(task, "dis", [{"tau": 0.05, "k": 1}], metric_ks=(2,))
    assert [c for c in table.columns if c.startswith("R@")] == ["R@2"]
    norm = task.fit(hn.make_normalizer("dis", tau=0.05, k=1))
    S = task.queries.astype(np.float64) @ task.targets.astype(np.float64).T
    active = norm.activation_.cpu().numpy()[S.argmax(1)]           # dis: gated rows get the offsets
    h = norm.offsets_.cpu().numpy().astype(np.float64)
    gated = np.where(active[:, None], S + h[None, :], S)
    ranks = _dense_ranks_of_scores(gated, task.positives)
    for key, want in _metrics(ranks, (2,)).items():
        assert table[key].iloc[0] == pytest.approx(want), key


# ---------------------------------------------------------------- iteration_table

def test_iteration_table_guard_messages():
    task = _task()
    with pytest.raises(TypeError, match=r"^iterations must be an integer"):
        iteration_table(task, "sn", [2.5])
    with pytest.raises(ValueError, match=r"^iterations must be >= 1"):
        iteration_table(task, "sn", [0])
    with pytest.raises(ValueError, match=r"^converged must be >= 1"):
        iteration_table(task, "sn", [1], converged=0, tol=1e-6)
    with pytest.raises(ValueError, match=r"^iterations is empty and converged is None: give at least one"):
        iteration_table(task, "sn", [])
    for name in ("tau", "n_iter", "tol"):
        with pytest.raises(ValueError, match=rf"^fixed must not set '{name}': it is an argument of iteration_table"):
            iteration_table(task, "sn", [1], fixed={name: 1})


def test_iteration_table_numbers_columns_and_times():
    task = _task(seed=6)
    t0 = time.perf_counter()
    table = iteration_table(task, "sn", [1, 3], converged=50, tol=1e-4, metric_ks=(1, 5))
    elapsed = time.perf_counter() - t0
    assert list(table.columns) == ["setting", "T max", "iterations run", "R@1", "R@5", "MdR", "fit_s", "bank"]
    assert list(table["setting"]) == ["T=1", "T=3", "to convergence"]
    assert list(table["T max"]) == [1, 3, 50]
    assert ((table["fit_s"] >= 0) & (table["fit_s"] <= elapsed)).all()
    assert set(table["bank"]) == {QUERY_AGNOSTIC}
    n_conv = int(table["iterations run"].iloc[2])
    fits = [hn.make_normalizer("sn", tau=0.01, n_iter=T) for T in (1, 3)]
    fits.append(hn.make_normalizer("sn", tau=0.01, n_iter=50, tol=1e-4))
    H = torch.stack([task.fit(f).offsets_ for f in fits])
    for row, ranks in zip(table.to_dict("records"), _dense_ranks(task, H)):
        for key, want in _metrics(ranks, (1, 5)).items():
            assert row[key] == pytest.approx(want), (row["setting"], key)
    assert 1 <= n_conv <= 50


def test_iteration_table_progress_bar(tmp_path, monkeypatch):
    task = _task(seed=6)
    monkeypatch.delenv("HUBNORM_PROGRESS", raising=False)
    quiet = tmp_path / "quiet.txt"
    monkeypatch.setenv("HUBNORM_PROGRESS_FILE", str(quiet))
    iteration_table(task, "sn", [4])
    assert not quiet.exists() or quiet.read_text() == ""
    shown = tmp_path / "shown.txt"
    monkeypatch.setenv("HUBNORM_PROGRESS_FILE", str(shown))
    iteration_table(task, "sn", [4], show_progress=True)
    sw_text = shown.read_text()
    assert "SN iterations" in sw_text and "4/4" in sw_text
    assert "it/s" in sw_text or "s/it" in sw_text

