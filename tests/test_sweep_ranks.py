"""The sweep engine's exact offset ranking (hubnorm.sweeps.offset_sweep_ranks) against the evaluator's dense ranks.

offset_sweep_ranks counts each setting only on candidate targets found at the two ends of a line of settings (NNN:
alpha at a fixed k); these tests prove the ranks equal to hubnorm.positive_ranks of the dense S + h for every
setting: ties (duplicated targets, dyadic scores and offsets that tie exactly), alpha grids that are unsorted or
contain 0 or a negative value, one and five captions per image, t2i and i2t, k clamped to a small bank, a grouping
that is not a line (the bound widens by the measured residual), and grid_search's tables (sweep = reference); the
first two on both sides of the counting seam (numpy's flatnonzero on the CPU, torch's nonzero on a device); the
per-line position counts (_sure_codes, _position_tables) against exact rational arithmetic and their definition.
"""

import itertools

import numpy as np
import pytest
import torch

import hubnorm as hn
from hubnorm.evaluation import positive_ranks
from hubnorm.sweeps import offset_lines, offset_sweep_ranks
from conftest import unit_rows

pytestmark = pytest.mark.usefixtures("single_thread_torch")


def _dense_ranks(task, H):
    s = torch.from_numpy(task.queries) @ torch.from_numpy(task.targets).T
    return np.stack([positive_ranks(s + h, task.positives) for h in H])


def _nnn_offsets(task, points):
    norms = [hn.make_normalizer("nnn", **p) for p in points]
    engine = norms[0].local_engine(task.targets, task.query_bank)
    return torch.stack([f["offsets_"] for f in type(norms[0]).fit_grid(norms, engine)])


def _task(seed, n_img, per, direction, d=128, dup=0, bank=300):
    from hubnorm.synthetic import make_dataset
    ds = make_dataset("flickr30k", n_train_images=bank, n_test_images=n_img, seed=seed, dim=d)
    tr, va = ds.splits["train"], ds.splits["val"]
    imgs, c2i = va.images, va.caption_to_image
    keep = np.concatenate([np.flatnonzero(c2i == i)[:per] for i in range(n_img)])
    caps, c2i = va.captions[keep], c2i[keep]
    if dup:  # exact ties: duplicated targets (equal scores and equal NNN offsets)
        imgs = imgs.copy()
        imgs[-dup:] = imgs[:dup]
    return hn.build_tasks(imgs, caps, c2i, caption_bank=tr.captions, image_bank=tr.images)[direction]


ALPHAS = [1.5, 0.0, 0.25, 1.0, -0.5, 0.75]  # unsorted, with 0 and a negative value


@pytest.fixture(params=["cpu side (numpy)", "device side (torch)"])
def counts_namespace(request, monkeypatch):
    """Both sides of the counting seam (hubnorm.sweeps.counts_namespace, which picks how the candidates are listed):
    numpy on the CPU, and the torch calls a torch device runs, forced here on CPU tensors."""
    import hubnorm.sweeps as sw
    assert sw.counts_namespace("cpu") is np
    if request.param == "device side (torch)":
        monkeypatch.setattr(sw, "counts_namespace", lambda device: torch)
    return request.param


@pytest.mark.parametrize("direction", ["t2i", "i2t"])
@pytest.mark.parametrize("per", [1, 5])
@pytest.mark.parametrize("chunk_rows", [None, 7])   # 7: the candidate pass in row chunks of 7 queries
def test_line_ranks_equal_dense_ranks(direction, per, chunk_rows, counts_namespace, monkeypatch):
    task = _task(1, 60, per, direction, dup=6)
    if chunk_rows:
        import hubnorm.sweeps as sw
        monkeypatch.setattr(sw, "_UNION_CHUNK_BYTES", chunk_rows * task.n_targets * 4)
    points = [{"alpha": a, "k": k} for k, a in itertools.product([1, 3, 16, 128], ALPHAS)]
    H = _nnn_offsets(task, points)
    lines = offset_lines(points, H)
    assert len(lines) == 4 and all(len(m) == len(ALPHAS) for _, _, m in lines)  # one line per k
    np.testing.assert_array_equal(offset_sweep_ranks(task, H, lines=lines), _dense_ranks(task, H))
    # and with every setting alone (the path of grids that form no line)
    np.testing.assert_array_equal(offset_sweep_ranks(task, H), _dense_ranks(task, H))


def test_line_ranks_under_exact_ties(counts_namespace):
    """Dyadic embeddings and offsets: every score S + h is exact, so targets tie with the positive and with each
    other at many settings; the evaluator's rule (ties go to the lower target index) must hold everywhere."""
    rng = np.random.default_rng(0)
    n_img, per, d = 40, 2, 16
    imgs = rng.choice([-0.25, 0.25], (n_img, d)).astype(np.float32)  # unit rows; every score a multiple of 1/16
    imgs[20:30] = imgs[0:10]
    c2i = np.repeat(np.arange(n_img), per)
    flip = rng.random((n_img * per, d)) < 0.3
    caps = np.where(flip, -imgs[c2i], imgs[c2i]).astype(np.float32)
    task = hn.RetrievalTask(caps, imgs, hn.Positives.from_labels(c2i, n_img), direction="t2i")
    m = torch.from_numpy(rng.integers(0, 8, n_img).astype(np.float32) / 8)
    alphas = [0.5, 0.0, 1.0, 0.25, 2.0]
    points = [{"alpha": a, "k": k} for k in (1, 2) for a in alphas]
    H = torch.stack([-(p["alpha"] * (m if p["k"] == 1 else m.flip(0))) for p in points])
    dense = _dense_ranks(task, H)
    s = torch.from_numpy(caps) @ torch.from_numpy(imgs).T
    assert any(bool(((s + h) == (s + h).gather(1, torch.from_numpy(c2i)[:, None])).sum() > len(c2i)) for h in H)
    got = offset_sweep_ranks(task, H, lines=offset_lines(points, H), check_normalized=False)
    np.testing.assert_array_equal(got, dense)


def test_a_grouping_that_is_not_a_line_stays_exact():
    """offset_sweep_ranks widens a line's bound by the members' measured distance from its segment: grouping
    unrelated offset vectors (IS temperatures, random vectors) gives the dense ranks too, only slower."""
    task = _task(2, 50, 5, "t2i")
    taus = [0.05, 0.005, 0.02]
    H = torch.stack([task.fit(hn.make_normalizer("is", tau=t)).offsets_ for t in taus]
                    + [torch.from_numpy(np.random.default_rng(0).normal(0, 0.05, task.n_targets).astype(np.float32))])
    assert offset_lines([{"tau": t} for t in taus] + [{"tau": 1.0}], H) == [(g, g, [g]) for g in range(4)]
    for lines in ([(1, 0, [0, 1, 2, 3])], [(3, 2, [2, 3]), (0, 1, [1, 0])]):
        np.testing.assert_array_equal(offset_sweep_ranks(task, H, lines=lines), _dense_ranks(task, H))
    with pytest.raises(ValueError, match="every setting exactly once"):
        offset_sweep_ranks(task, H, lines=[(0, 1, [0, 1])])


@pytest.mark.parametrize("direction", ["t2i", "i2t"])
def test_grid_search_sweep_equals_reference_with_clamped_k(direction):
    """The tables of the two engines (R@1/5/10, MdR and MnR of every point), with an unsorted alpha grid holding 0
    and a k grid clamped to a small query bank as the notebooks clamp it."""
    from hubnorm import clamp_grid
    task = _task(3, 50, 5, direction, dup=5, bank=40)
    grid = clamp_grid("nnn", {"alpha": ALPHAS, "k": [1, 4, 64, 100000]}, task)
    assert max(grid["k"]) <= len(task.query_bank) < 100000
    cols = ["alpha", "k", "R@1", "R@5", "R@10", "MdR", "MnR"]
    ref = hn.grid_search("nnn", task, grid, metric="MnR", engine="reference")
    fast = hn.grid_search("nnn", task, grid, metric="MnR")
    assert fast.engine == "sweep"
    np.testing.assert_array_equal(ref.table[cols].to_numpy(), fast.table[cols].to_numpy())
    ref1 = hn.grid_search("nnn", task, grid, engine="reference")
    fast1 = hn.grid_search("nnn", task, grid)
    np.testing.assert_array_equal(ref1.table[cols[:-1]].to_numpy(), fast1.table[cols[:-1]].to_numpy())
    assert fast1.best_params == ref1.best_params


def _exact_sure(A, B, lam, level):
    """Exact (fractions) per candidate and position: the margin A + lam (B - A) >= level, and <= -level."""
    from fractions import Fraction
    lev = Fraction(level)
    ahead = np.zeros((len(A), len(lam)), dtype=bool)
    behind = np.zeros_like(ahead)
    for i, (a, b) in enumerate(zip(A.tolist(), B.tolist())):
        a, d = Fraction(a), Fraction(b) - Fraction(a)
        for k, lk in enumerate(lam):
            m = a + Fraction(lk) * d
            ahead[i, k], behind[i, k] = m >= lev, m <= -lev
    return ahead, behind


@pytest.mark.parametrize("lam", [(0.0,), (0.0, 0.5, 0.5, 1.0), tuple(np.linspace(0, 1, 11)),
                                 tuple(np.sort(np.random.default_rng(1).random(300)))])
def test_position_tables_match_their_definition(lam):
    """hubnorm.sweeps._position_tables against its docstring, by brute force over every bucket: above[b] counts
    lam_k >= (b + 2) / M - 2 (one spare bucket past the threshold's own) and below[b] counts lam_k <= 2 - (b + 2) / M;
    the ahead and behind codes and their dtype (uint8 up to 2 L + 1 < 256)."""
    import hubnorm.sweeps as sw
    M, L = sw._BUCKETS, len(lam)
    edges = (np.arange(4 * M + 1) + 2) / M - 2
    above = (np.asarray(lam)[None] >= edges[:, None]).sum(1)
    below = (np.asarray(lam)[None] <= -edges[:, None]).sum(1)
    t_ahead, t_behind = sw._position_tables(sw._position_buckets(lam), "cpu")
    np.testing.assert_array_equal(t_ahead.numpy(), np.concatenate([above, below + L + 1]))
    np.testing.assert_array_equal(t_behind.numpy(), np.concatenate([L - below, L - above + L + 1]))
    assert t_ahead.dtype == (torch.uint8 if 2 * L + 1 < 256 else torch.int16)


def _decode(code, L, ahead):
    """A code of hubnorm.sweeps._sure_codes as a (candidates x positions) bool mask of its positions."""
    code = code.long().numpy()
    hi = code > L
    count = code - hi * (L + 1)
    if not ahead:
        count = L - count
    prefix = hi if ahead else ~hi
    k = np.arange(L)[None, :]
    return np.where(prefix[:, None], k < count[:, None], k >= L - count[:, None])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("L", [1, 5, 127, 128, 300])   # 128 and up: int16 codes
def test_sure_codes_are_sound_and_tight(dtype, L):
    """The per-line position counts of the sweep ranking (hubnorm.sweeps._sure_codes) against exact rational
    arithmetic: every position it calls surely ahead (margin >= level) or surely behind (<= -level) is so, and it
    leaves undecided only positions within three buckets of the crossing. Most crossings lie within 1e-9..1e-6 of
    a position on a bucket edge (a table that counted positions in the crossing's own bucket fails); flat margins
    (B == A, at the level exactly: 0 / 0), a -0.0 slope and margins that never or always clear the level are
    included."""
    import hubnorm.sweeps as sw
    rng = np.random.default_rng(L)
    M = sw._BUCKETS
    lam = sorted(set([0.0, 1.0][:L] + [int(x) / 64 for x in rng.integers(0, 65, max(L - 2, 0))]))
    lam = (lam + sorted(rng.random(L)))[:L] if len(lam) < L else lam[:L]
    lam = sorted(lam)
    level = 3 / 1024
    n = 600
    d = rng.choice([-1, 1], n) * 10.0 ** rng.uniform(-4, 0, n)
    t = np.asarray(lam)[rng.integers(0, L, n)] + rng.choice([-1, 1], n) * 10.0 ** rng.uniform(-9, -6, n)
    t[: n // 4] = rng.uniform(-0.5, 1.5, n // 4)
    A = np.where(rng.random(n) < 0.5, level, -level) - t * d      # crossing of +-level at t
    B = A + d
    A[:6] = B[:6] = [level, -level, 0.0, 1.0, -1.0, level * (1 + 2 ** -20)]   # flat margins
    A[6], B[6] = 0.25, -0.0
    At, Bt = torch.from_numpy(A).to(dtype), torch.from_numpy(B).to(dtype)
    ahead_true, behind_true = _exact_sure(At.double().numpy(), Bt.double().numpy(), lam, level)
    t_ahead, t_behind = sw._position_tables(sw._position_buckets(lam), "cpu")
    code_a, code_b = sw._sure_codes(At, Bt, level, [(t_ahead, 1), (t_behind, -1)])
    assert [c.dtype for c in (code_a, code_b)] == [t_ahead.dtype] * 2
    (alone,) = sw._sure_codes(At, Bt, level, [(t_behind, -1)])
    assert torch.equal(alone, code_b)
    got_a = _decode(code_a, L, True)
    got_b = _decode(code_b, L, False)
    assert not (got_a & ~ahead_true).any() and not (got_b & ~behind_true).any()       # sound
    a64, d64 = At.double().numpy(), (Bt.double() - At.double()).numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        for want, got, lev in ((ahead_true, got_a, level), (behind_true, got_b, -level)):
            cross = (lev - a64) / d64                                  # where the margin meets the level
            near = np.abs(np.asarray(lam)[None, :] - cross[:, None]) <= 3 / M
            assert not (want & ~got & ~near)[d64 != 0].any()          # tight: misses only near the crossing
    # white box: away from bucket edges, each code is the table entry of the exact threshold's bucket and direction
    K = t_ahead.numel() // 2
    for table, sign, code in ((t_ahead, 1, code_a), (t_behind, -1, code_b)):
        with np.errstate(divide="ignore", invalid="ignore"):
            y = (np.clip((level - sign * a64) / np.abs(d64), -2, 2) + 2) * M
        clear = (d64 != 0) & (np.abs(y - np.round(y)) > 0.01)
        want = table.numpy()[np.floor(y[clear]).astype(int) + K * (d64[clear] < 0)]
        np.testing.assert_array_equal(code.numpy()[clear], want)
    assert got_a[:6].tolist() == [[False] * L, [False] * L, [False] * L, [True] * L, [False] * L, [True] * L]
    assert got_b[:6].tolist() == [[False] * L, [False] * L, [False] * L, [False] * L, [True] * L, [False] * L]
    assert got_a[6, 0] == (L > 0)   # 0.25 at lam = 0 is ahead
    assert (ahead_true & ~got_a).any() and (behind_true & ~got_b).any()   # the test reaches the undecided band


def test_offsets_that_cannot_be_ranked_are_refused():
    """Non-finite offsets (the evaluator ranks no non-finite score) and offsets so large that the margins would
    overflow the working dtype raise a ValueError naming the problem, instead of ranking wrong."""
    task = _task(0, 12, 1, "t2i", d=128, bank=40)
    H = torch.zeros(2, 12)
    H[1, 3] = float("nan")
    with pytest.raises(ValueError, match="offsets must be finite"):
        offset_sweep_ranks(task, H)
    H[1, 3] = 3e35
    with pytest.raises(ValueError, match="too close to the largest"):
        offset_sweep_ranks(task, H)
    H[1, 3] = 1e30   # large but rankable: equal to the dense ranks
    np.testing.assert_array_equal(offset_sweep_ranks(task, H), _dense_ranks(task, H))
    with pytest.raises(ValueError, match="too close to the largest"):   # finite, but not once cast to float32
        offset_sweep_ranks(task, H.double() * 1e10)
    for lines in ([(0, 0, [0]), (1, 1, []), (1, 1, [1])], [(0, 5, [0, 1])]):
        with pytest.raises(ValueError, match="needs members and ends"):
            offset_sweep_ranks(task, torch.zeros(2, 12), lines=lines)
    with pytest.raises(TypeError, match="torch.Tensor"):
        offset_sweep_ranks(task, np.zeros((2, 12)))
    assert offset_sweep_ranks(task, torch.zeros(0, 12)).shape == (0, task.positives.n_queries)


@pytest.mark.parametrize("scale", [1e160, 1e300])
def test_line_ranks_with_huge_float64_offsets(scale):
    """Offsets near the float64 range on a line: the segment positions are computed in units of a power of two
    (the dot products of the raw offsets would overflow to inf and give NaN positions, ranking every query first)."""
    t, q = np.eye(2), np.array([[1.0, 0.0]])
    task = hn.RetrievalTask(q, t, hn.Positives.from_labels([0], 2), direction="t2i")
    H = torch.tensor([[0.0, 0.0], [0.0, 1.0], [0.0, 2.0]], dtype=torch.float64) * scale
    got = offset_sweep_ranks(task, H, lines=[(0, 2, [0, 1, 2])])
    np.testing.assert_array_equal(got, [[0], [1], [1]])
    np.testing.assert_array_equal(got, _dense_ranks(task, H))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_line_ranks_in_both_dtypes_without_candidates_and_with_one_target(dtype):
    """Edge inputs of offset_sweep_ranks against the dense ranks: a task where no target ever beats a positive (an
    empty candidate list), a single target, and a random three-caption task on a line of nine settings, each in
    float32 and float64 (the crossing codes then run in float64)."""
    tdt = torch.from_numpy(np.zeros(1, dtype=dtype)).dtype
    eye = np.eye(8, dtype=dtype)
    task = hn.RetrievalTask(eye.copy(), eye, hn.Positives.from_labels(np.arange(8), 8), direction="t2i")
    H = torch.zeros(5, 8, dtype=tdt)
    H[:, 0] = torch.linspace(0, 0.1, 5, dtype=tdt)
    for lines in (None, [(0, 4, [0, 1, 2, 3, 4])]):
        assert (offset_sweep_ranks(task, H, lines=lines) == 0).all()
    one = hn.RetrievalTask(np.full((3, 4), 0.5, dtype=dtype), np.full((1, 4), 0.5, dtype=dtype),
                           hn.Positives.from_labels(np.zeros(3, dtype=int), 1), direction="t2i")
    assert (offset_sweep_ranks(one, torch.zeros(3, 1, dtype=tdt), lines=[(0, 2, [0, 1, 2])]) == 0).all()
    rng = np.random.default_rng(0)
    t = rng.normal(size=(50, 16)).astype(dtype)
    t /= np.linalg.norm(t, axis=1, keepdims=True)
    q = t[np.repeat(np.arange(50), 3)] + rng.normal(0, 0.3, (150, 16)).astype(dtype)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    task = hn.RetrievalTask(q, t, hn.Positives.from_labels(np.repeat(np.arange(50), 3), 50), direction="t2i")
    b = torch.from_numpy(rng.random(50)).to(tdt)
    alphas = np.linspace(0, 2, 9)
    H = torch.stack([-a * b for a in alphas])
    lines = offset_lines([{"alpha": a} for a in alphas], H)
    assert lines == [(0, 8, list(range(9)))]
    s = torch.from_numpy(q) @ torch.from_numpy(t).T
    dense = np.stack([positive_ranks(s + h, task.positives) for h in H])
    assert dense.max() > 0
    np.testing.assert_array_equal(offset_sweep_ranks(task, H, lines=lines), dense)
