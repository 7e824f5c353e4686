"""One fit lifecycle (issue 43, scope 2): the in-memory fit, the Dask fit and the fit from stored score matrices all
end in ``Normalizer.fit_engine`` — the size limits, ``fit_blocks``, the finite check of the offsets, the fitted
attributes — so a failure in any path leaves the normalizer unfitted, and the paths agree on what they set."""
import numpy as np
import pytest
import torch

import hubnorm as hn
from hubnorm.engine import LocalEngine
from hubnorm.scores import matrices_from_embeddings
from hubnorm.normalizers.base import NotFittedError

da = pytest.importorskip("dask.array")


def _unit(rng, n, d=8):
    x = rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    return {name: _unit(rng, n) for name, n in (("queries", 30), ("targets", 40), ("query_bank", 200))}


class NaNOffsets(hn.InvertedSoftmax):
    """IS whose reductions end in one NaN offset: what a too-extreme parameter gives in a low precision."""

    def fit_blocks(self, engine):
        fitted = dict(super().fit_blocks(engine))
        fitted["offsets_"] = fitted["offsets_"].clone()
        fitted["offsets_"][3] = float("nan")
        return fitted


def _paths(data):
    t, qb = data["targets"], data["query_bank"]
    mats = matrices_from_embeddings(data["queries"], t, qb)
    return {
        "in memory": lambda norm: norm.fit(t, query_bank=qb),
        "dask": lambda norm: norm.fit(t, query_bank=da.from_array(qb, chunks=64)),
        "score matrices": lambda norm: norm.fit_engine(LocalEngine(matrices=mats)),
    }


@pytest.mark.parametrize("path", ["in memory", "dask", "score matrices"])
def test_non_finite_offsets_are_refused_and_leave_the_normalizer_unfitted(data, path):
    norm = NaNOffsets(tau=0.05, device="cpu")
    with pytest.raises(ValueError, match=r"NaNOffsets\(tau=0.05\) gives non-finite offsets in torch.float64"):
        _paths(data)[path](norm)
    for attr in ("offsets_", "targets_", "device_"):
        assert not hasattr(norm, attr), (path, attr)
    with pytest.raises(NotFittedError):
        norm.score(data["queries"])


@pytest.mark.parametrize("path", ["in memory", "dask", "score matrices"])
def test_size_limits_are_checked_on_every_path(data, path):
    with pytest.raises(ValueError, match="k"):
        _paths(data)[path](hn.NearestNeighborNormalization(k=500, device="cpu"))


def test_every_path_sets_the_same_fitted_offsets(data):
    fitted = {path: fit(hn.InvertedSoftmax(tau=0.05, device="cpu")) for path, fit in _paths(data).items()}
    ref = fitted["in memory"].offsets_.numpy()
    for path, norm in fitted.items():
        np.testing.assert_allclose(norm.offsets_.numpy(), ref, rtol=0, atol=1e-12, err_msg=path)
        assert norm.device_ == torch.device("cpu"), path
    # the embedding paths keep the gallery, so the normalizer ranks queries itself
    for path in ("in memory", "dask"):
        assert fitted[path].targets_.shape == (40, 8), path
        np.testing.assert_allclose(fitted[path].score(data["queries"]).numpy(),
                                   fitted["in memory"].score(data["queries"]).numpy(), rtol=0, atol=1e-12)


# --------------------------------------------------------------- a grid of one method: the same lifecycle
def test_a_grid_goes_through_the_lifecycle_and_equals_single_fits(data):
    """``fit_on_engine`` of several points (the sweeps' and label-free selection's path) sets on each what a fit
    of its own sets: the same offsets, gallery, device and bank record."""
    from hubnorm.normalizers.base import fit_on_engine

    t, qb = data["targets"], data["query_bank"]
    grid = [hn.NearestNeighborNormalization(k=k, alpha=a) for k, a in ((3, 0.5), (8, 0.75), (16, 1.0))]
    engine = grid[0].local_engine(t, qb)
    assert fit_on_engine(grid, engine, targets=engine.tensor("targets")) == grid
    for norm in grid:
        single = norm.clone().fit(t, query_bank=qb)
        np.testing.assert_array_equal(norm.offsets_.numpy(), single.offsets_.numpy())
        assert torch.equal(norm.targets_, single.targets_) and norm.device_ == single.device_
        assert set(norm.provenance_) == set(single.provenance_) == {"query_bank"}
        assert norm.provenance_["query_bank"] == single.provenance_["query_bank"]
        np.testing.assert_array_equal(norm.score(data["queries"]).numpy(), single.score(data["queries"]).numpy())


def test_a_grid_with_one_bad_point_sets_nothing_on_any_point(data):
    from hubnorm.normalizers.base import fit_on_engine

    engine = hn.NearestNeighborNormalization().local_engine(data["targets"], data["query_bank"])
    grid = [hn.NearestNeighborNormalization(k=4), hn.NearestNeighborNormalization(k=500)]   # 500 > the bank's 200
    with pytest.raises(ValueError, match="k=500"):
        fit_on_engine(grid, engine, targets=engine.tensor("targets"))
    bad = [hn.InvertedSoftmax(tau=0.05), NaNOffsets(tau=0.05)]
    with pytest.raises(TypeError, match="points of one method"):
        fit_on_engine(bad, engine)
    nan = [NaNOffsets(tau=0.05), NaNOffsets(tau=0.1)]
    with pytest.raises(ValueError, match="non-finite offsets"):
        fit_on_engine(nan, engine)
    with pytest.raises(ValueError, match="at least one normalizer"):
        fit_on_engine([], engine)
    for norm in grid + bad + nan:
        assert not any(hasattr(norm, a) for a in ("offsets_", "targets_", "device_", "provenance_")), norm


def test_a_sweep_refuses_non_finite_offsets_like_a_fit(data):
    """A grid point whose offsets are not finite fails the sweep with the fit's error, instead of ranking by NaN."""
    from hubnorm import sweeps
    from hubnorm.registry import NORMALIZERS

    pos = hn.Positives.from_labels(np.arange(30) % 40, 40)
    task = hn.RetrievalTask(data["queries"], data["targets"], pos, query_bank=data["query_bank"])
    real = NORMALIZERS["is"]
    NORMALIZERS["is"] = NaNOffsets
    try:
        with pytest.raises(ValueError, match=r"NaNOffsets\(tau=0.1\) gives non-finite offsets"):
            sweeps.sweep_table(task, "is", [{"tau": 0.1}, {"tau": 0.05}])
    finally:
        NORMALIZERS["is"] = real


# --------------------------------------------------------------- one task model: any direction name, task.has
@pytest.mark.parametrize("direction", ["t2i", "i2t", "t2v", "v2t", "t2a", "a2t"])
def test_tasks_carry_every_direction_name(data, direction):
    pos = hn.Positives.from_labels(np.arange(30) % 40, 40)
    task = hn.RetrievalTask(data["queries"], data["targets"], pos, query_bank=data["query_bank"], direction=direction)
    assert task.has("query_bank") and not task.has("target_bank") and task.has("queries")
    mats = matrices_from_embeddings(data["queries"], data["targets"], data["query_bank"])
    st = hn.RetrievalTask(scores=mats, positives=pos, direction=direction, check=False)
    assert st.has("query_bank") and not st.has("target_bank")
    # the same fit and the same ranks from embeddings and from matrices, whatever the label
    emb = task.fit(hn.InvertedSoftmax(tau=0.05))
    mat = hn.InvertedSoftmax(tau=0.05).fit_engine(st.engine)
    np.testing.assert_allclose(mat.offsets_.numpy(), emb.offsets_.numpy(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("bad", ["t2x", "T2I", "text-to-image", 3, None])
def test_an_unknown_direction_is_refused_by_both_task_kinds(data, bad):
    pos = hn.Positives.from_labels(np.arange(30) % 40, 40)
    with pytest.raises(ValueError, match="direction must be one of t2i, i2t, t2v, v2t, t2a, a2t"):
        hn.RetrievalTask(data["queries"], data["targets"], pos, direction=bad)
    mats = matrices_from_embeddings(data["queries"], data["targets"])
    with pytest.raises(ValueError, match="direction must be one of"):
        hn.RetrievalTask(scores=mats, positives=pos, direction=bad, check=False)
    task = hn.RetrievalTask(data["queries"], data["targets"], pos)
    with pytest.raises(ValueError, match="a task holds the inputs"):
        task.has("bank")


def test_the_builders_check_parameters_and_required_banks_before_reading_any_bank(data, tmp_path):
    """The lifecycle checks everything with its engine; the engine builders (in memory, Dask) check what they can
    from the caller's arguments first, so a bad parameter or a missing bank is named before a bank of the wrong
    shape, or a folder of shards, is read."""
    from hubnorm.distributed import fit_offsets

    t = data["targets"]
    wrong = np.ones((5, 3))   # a bank of another dimension: reading it would fail first
    with pytest.raises(ValueError, match=r"^DualInvertedSoftmax needs query_bank"):
        hn.DualInvertedSoftmax().fit(t, None, target_bank=wrong)
    with pytest.raises(ValueError, match="k"):
        fit_offsets(hn.NearestNeighborNormalization(k=0), t, query_bank=da.from_array(wrong, chunks=2))
    with pytest.raises(ValueError, match=r"^DualInvertedSoftmax needs query_bank"):
        fit_offsets(hn.DualInvertedSoftmax(), t, None, target_bank=da.from_array(wrong, chunks=2))
    empty = tmp_path / "shards"
    empty.mkdir()   # a folder of no shards: opening it would fail first
    with pytest.raises(ValueError, match="k"):
        hn.NearestNeighborNormalization(k=0).fit(t, query_bank=empty)
