"""The sweep engine's exact offset ranking (hubnorm.sweeps.offset_sweep_ranks) against the evaluator's dense ranks.

offset_sweep_ranks counts each setting only on candidate targets found at the two ends of a line of settings (NNN:
alpha at a fixed k); these tests prove the ranks equal to hubnorm.positive_ranks of the dense S + h for every
setting: ties (duplicated targets, dyadic scores and offsets that tie exactly), alpha grids that are unsorted or
contain 0 or a negative value, one and five captions per image, t2i and i2t, k clamped to a small bank, a grouping
that is not a line (the bound widens by the measured residual), and grid_search's tables (sweep = reference); the
first two on both sides of the counting seam (numpy on the CPU, the torch loop of a torch device).
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
    """Both sides of the per-position counting seam (hubnorm.sweeps.counts_namespace): numpy on the CPU, and the
    torch loop a torch device runs, forced here on CPU tensors."""
    import hubnorm.sweeps as sw
    assert sw.counts_namespace("cpu") is np
    if request.param == "device side (torch)":
        monkeypatch.setattr(sw, "counts_namespace", lambda device: torch)
    return request.param


@pytest.mark.parametrize("direction", ["t2i", "i2t"])
@pytest.mark.parametrize("per", [1, 5])
def test_line_ranks_equal_dense_ranks(direction, per, counts_namespace):
    task = _task(1, 60, per, direction, dup=6)
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
    from hubnorm.experiments.protocol import clamp_grid
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


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("L", [5, 255, 256, 300])   # 256 and up: the int32 counters
@pytest.mark.parametrize("same", [True, False])
def test_sure_positions_both_sides_against_a_count(dtype, L, same, monkeypatch):
    """The per-position counts of one line (hubnorm.sweeps._sure_positions) on both sides of the counting seam,
    against a plain count. Dyadic margins, positions and level make every interpolation exact in both dtypes, so
    both sides (a product and a sum in numpy, a possibly fused multiply-add in torch) must give the same bits,
    exact ties with the level included (a tie is not 'above')."""
    import hubnorm.sweeps as sw
    rng = np.random.default_rng(L)
    n = 3000
    gA, gB, fA, fB = (torch.from_numpy(rng.integers(-64, 65, n) / 64).to(dtype) for _ in range(4))
    if same:
        fA, fB = gA, gB
    lam = [k * 2.0 ** -int(np.ceil(np.log2(L))) for k in range(L)]   # dyadic, sorted, in [0, 1)
    level = 3 / 128
    lam_t = torch.tensor(lam, dtype=torch.float64)[:, None]
    g_at = gA.double()[None] + lam_t * (gB - gA).double()[None]      # L x n, exact in float64
    above, below = g_at > level, (fA.double()[None] + lam_t * (fB - fA).double()[None]) < -level
    assert bool((g_at == level).any())   # exact ties occur
    want = (above.sum(0), above[0], below.sum(0), below[0])
    for side in (np, torch):
        monkeypatch.setattr(sw, "counts_namespace", lambda device, side=side: side)
        got = sw._sure_positions(gA, gB, fA, fB, same, lam, level)
        assert [x.dtype for x in got] == [torch.int64, torch.bool, torch.int64, torch.bool]
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=0, atol=0)
