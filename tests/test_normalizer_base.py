"""The shared machinery of every normalizer (``hubnorm.normalizers.base``), tested on its own: the scikit-learn
parameter interface, the input checks of ``fit`` (banks a method needs or ignores, dtypes, dimensions), the one fit
lifecycle (device placement, nothing set on failure), blocked scoring against one dense product, the tie rule of
``topk`` against a stable sort, and the offsets / augmented vectors of the vector-index form (NNN paper, Sec. 3.1:
``<[q, 1], [t, h]> = q . t + h``). The methods' own files are tested elsewhere; here a small method with known
offsets (``h_j = -mean_b s(b, t_j)``) stands in for them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import hubnorm as hn
from hubnorm.blocks import Inputs, Mean, Param, Scores
from hubnorm.engine import LocalEngine
from hubnorm.normalizers.base import (
    EXECUTION_OPTIONS, Identity, Normalizer, NotFittedError, _on_dask, stable_topk,
)


def _unit(n, d=6, seed=0, dtype=np.float64):
    x = np.random.default_rng(seed).standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(dtype)


class MeanShift(Normalizer):
    """A stand-in method: ``h_j = -scale * mean_b q_b . t_j`` (a bank-mean offset), ``k`` limited by the bank."""

    name = "mean-shift-test"
    inputs = Inputs(fit=(Scores("query_bank", "targets"),))
    parameters = {"scale": Param("positive"), "k": Param("int", limited_by=("query_bank",))}

    def __init__(self, scale=1.0, k=1, *, device=None, chunk_size=None, check_normalized=True, block_bytes=None):
        self.scale, self.k = scale, k
        self.device, self.chunk_size, self.check_normalized, self.block_bytes = (device, chunk_size, check_normalized,
                                                                                 block_bytes)

    def fit_blocks(self, engine):
        mu = engine.reduce(Mean("query_bank"))
        return {"offsets_": -self.scale * (engine.tensor("targets") @ mu), "bank_rows_": engine.size("query_bank")}


class NeedsTargetBank(MeanShift):
    inputs = Inputs(fit=(Scores("query_bank", "targets"), Scores("target_bank", "targets")))


@pytest.fixture(scope="module")
def data():
    return {"queries": _unit(9, seed=1), "targets": _unit(7, seed=2), "query_bank": _unit(30, seed=3)}


def _dense(data, scale=1.0):
    t, qb = data["targets"], data["query_bank"]
    return data["queries"] @ t.T - scale * (t @ qb.mean(axis=0))[None, :]


# ------------------------------------------------------------------------------------------------ parameters
def test_get_set_clone_and_repr():
    m = MeanShift(scale=2.0, k=3, chunk_size=4)
    assert m.get_params() == {"scale": 2.0, "k": 3, "device": None, "chunk_size": 4, "check_normalized": True,
                              "block_bytes": None}
    assert m.set_params(scale=0.5) is m and m.scale == 0.5
    with pytest.raises(ValueError, match=r"MeanShift has no parameter 'tau'; valid parameters: \['block_bytes', "
                                         r"'check_normalized', 'chunk_size', 'device', 'k', 'scale'\]"):
        m.set_params(tau=1.0)
    c = m.clone(k=5)
    assert type(c) is MeanShift and c.get_params() == {**m.get_params(), "k": 5} and m.k == 3
    assert repr(MeanShift(scale=2.0)) == ("MeanShift(scale=2.0, k=1, device=None, chunk_size=None, "
                                          "check_normalized=True, block_bytes=None)")
    assert m._strength_params() == {"scale": 0.5, "k": 3}
    assert {"device", "chunk_size", "check_normalized", "block_bytes"} <= EXECUTION_OPTIONS


def test_declared_inputs_decide_the_banks_a_method_uses():
    assert MeanShift.uses_query_bank == "required" and MeanShift.uses_target_bank == "unused"
    assert NeedsTargetBank.uses_target_bank == "required"
    assert Normalizer.uses_query_bank == "unused" and Identity.uses_query_bank == "unused"


def test_limit_of_a_parameter():
    sizes = {"query_bank": 30, "targets": 7}.get
    assert MeanShift.limit("k", sizes) == 30
    assert MeanShift.limit("scale", sizes) is None
    assert MeanShift.limit("nothing", sizes) is None
    assert MeanShift.limit("k", {}.get) is None


@pytest.mark.parametrize("kwargs, exc, pattern", [
    ({"scale": 0.0}, ValueError, "scale"), ({"k": 0}, ValueError, "k must be >= 1"),
    ({"chunk_size": 0}, ValueError, "chunk_size"), ({"block_bytes": -1}, ValueError, "block_bytes"),
    ({"device": "no-such-device"}, (ValueError, RuntimeError), "device"),
    ({"check_normalized": "yes"}, TypeError, "check_normalized must be True or False; got 'yes'"),
])
def test_bad_parameters_are_refused_before_anything_is_computed(data, kwargs, exc, pattern):
    m = MeanShift(**kwargs)
    with pytest.raises(exc, match=pattern):
        m.check_params()
    with pytest.raises(exc, match=pattern):
        m.fit(data["targets"], query_bank=data["query_bank"])
    assert not hasattr(m, "offsets_")
    ok = MeanShift(check_normalized=np.bool_(False))
    assert ok.check_params() is ok


# ------------------------------------------------------------------------------------------------ fit
def test_fit_checks_the_banks_it_needs_and_ignores_the_others(data):
    with pytest.raises(ValueError, match=r"MeanShift needs query_bank \(reference queries"):
        MeanShift().fit(data["targets"])
    with pytest.raises(ValueError, match=r"NeedsTargetBank needs target_bank \(reference targets"):
        NeedsTargetBank().fit(data["targets"], query_bank=data["query_bank"])
    # a bank a method does not read is not validated (nor copied): even a bank of another dimension passes
    m = MeanShift().fit(data["targets"], query_bank=data["query_bank"], target_bank=np.zeros((3, 2)))
    assert m.bank_rows_ == 30
    with pytest.raises(ValueError, match="query_bank"):        # a bank it reads: its dimension is checked
        MeanShift().fit(data["targets"], query_bank=_unit(30, d=5))
    with pytest.raises(ValueError, match="not L2-normalised|normali"):
        MeanShift().fit(data["targets"], query_bank=data["query_bank"] * 2)
    MeanShift(check_normalized=False).fit(data["targets"], query_bank=data["query_bank"] * 2)
    with pytest.raises(ValueError, match="k=31 .*query bank size"):
        MeanShift(k=31).fit(data["targets"], query_bank=data["query_bank"])


def test_the_banks_take_the_targets_dtype(data):
    m = MeanShift().fit(data["targets"].astype(np.float32), query_bank=data["query_bank"])
    assert m.offsets_.dtype == torch.float32 and m.targets_.dtype == torch.float32
    eng = MeanShift().local_engine(data["targets"], data["query_bank"].astype(np.float32), np.zeros((2, 2)))
    assert eng.tensor("query_bank").dtype == torch.float64 and not eng.has("target_bank")
    assert eng.size("targets") == 7 and eng.sweep_bytes is None
    assert MeanShift(block_bytes=4096).local_engine(data["targets"], data["query_bank"], sweep_bytes=10).block_bytes \
        == 4096
    assert MeanShift().local_engine(data["targets"], data["query_bank"], sweep_bytes=10).sweep_bytes == 10


def test_fit_engine_sets_every_fitted_attribute_on_the_device_and_nothing_on_failure(data):
    t, qb = torch.from_numpy(data["targets"]), torch.from_numpy(data["query_bank"])
    eng = LocalEngine({"targets": t, "query_bank": qb})
    m = MeanShift(scale=0.5).fit_engine(eng, targets=t, device=torch.device("meta"))
    assert m.offsets_.device.type == "meta" and m.targets_.device.type == "meta" and m.device_.type == "meta"
    assert m.bank_rows_ == 30
    m = MeanShift(scale=0.5).fit_engine(eng)
    assert not hasattr(m, "targets_") and m.device_ == torch.device("cpu")
    np.testing.assert_allclose(m.offsets, -0.5 * data["targets"] @ data["query_bank"].mean(axis=0), rtol=0,
                               atol=1e-15)
    with pytest.raises(ValueError, match="k=40"):
        MeanShift(k=40).fit_engine(eng)

    class Inf(MeanShift):
        def fit_blocks(self, engine):
            out = super().fit_blocks(engine)
            out["offsets_"][0] = float("inf")
            return out

    bad = Inf(scale=2.0)
    with pytest.raises(ValueError, match=r"Inf\(scale=2.0, k=1\) gives non-finite offsets in torch.float64"):
        bad.fit_engine(eng, targets=t)
    assert not any(hasattr(bad, a) for a in ("offsets_", "targets_", "device_", "bank_rows_"))


def test_a_method_without_fit_blocks_or_plain_form_says_so(data):
    class Bare(Normalizer):
        def __init__(self):
            pass

    with pytest.raises(NotImplementedError, match="Bare does not state its fit as block reductions"):
        Bare().fit(data["targets"])
    with pytest.raises(NotImplementedError, match="Bare has no plain form"):
        Bare().plain(torch.zeros(1, 1))
    with pytest.raises(TypeError, match="Bare does not write its offsets as a sum over the bank queries"):
        Bare().offset_decomposition(torch.zeros(1, 1))


def test_fit_grid_default_is_one_fit_per_point(data):
    t, qb = torch.from_numpy(data["targets"]), torch.from_numpy(data["query_bank"])
    eng = LocalEngine({"targets": t, "query_bank": qb})
    out = MeanShift.fit_grid([MeanShift(scale=1.0), MeanShift(scale=3.0)], eng)
    torch.testing.assert_close(out[1]["offsets_"], 3.0 * out[0]["offsets_"], rtol=1e-14, atol=0)


# ------------------------------------------------------------------------------------------------ scoring
@pytest.mark.parametrize("chunk_size", [None, 1, 4, 100])
def test_scores_in_blocks_equal_one_dense_product(data, chunk_size):
    m = MeanShift(scale=1.5).fit(data["targets"], query_bank=data["query_bank"])
    want = _dense(data, 1.5)
    np.testing.assert_allclose(m.score(data["queries"], chunk_size=chunk_size).numpy(), want, rtol=0, atol=1e-14)
    starts = [q0 for q0, _ in m.iter_scores(data["queries"], chunk_size)]
    assert starts == list(range(0, 9, chunk_size or 9))
    # the constructor's chunk_size applies when the call gives none; the call's wins
    m2 = MeanShift(scale=1.5, chunk_size=2).fit(data["targets"], query_bank=data["query_bank"])
    assert [q0 for q0, _ in m2.iter_scores(data["queries"])] == [0, 2, 4, 6, 8]
    assert [q0 for q0, _ in m2.iter_scores(data["queries"], chunk_size=5)] == [0, 5]
    with pytest.raises(ValueError, match="chunk_size"):
        list(m2.iter_scores(data["queries"], chunk_size=0))


def test_queries_are_checked_against_the_fitted_targets(data):
    m = MeanShift().fit(data["targets"], query_bank=data["query_bank"])
    with pytest.raises(ValueError, match="queries"):
        m.score(_unit(3, d=5))
    got = m.score(data["queries"].astype(np.float32))       # cast to the targets' dtype
    assert got.dtype == torch.float64
    with pytest.raises(NotFittedError, match=r"MeanShift is not fitted yet: call fit\(targets, query_bank"):
        MeanShift().score(data["queries"])
    with pytest.raises(NotFittedError):
        MeanShift().topk(data["queries"], 2)


def test_topk_breaks_ties_by_the_lowest_target_index(data):
    m = MeanShift().fit(data["targets"], query_bank=data["query_bank"])
    full = m.score(data["queries"]).numpy()
    v, i = m.topk(data["queries"], 3, chunk_size=2)
    want = np.argsort(-full, axis=1, kind="stable")[:, :3]
    assert np.array_equal(i.numpy(), want)
    np.testing.assert_allclose(v.numpy(), np.take_along_axis(full, want, 1), rtol=0, atol=1e-14)  # other GEMM blocks
    with pytest.raises(ValueError, match="k=8 .*the number of targets"):
        m.topk(data["queries"], 8)
    # duplicated targets: every tie is resolved to the lower index, in every block
    t = np.repeat(data["targets"][:3], 3, axis=0)
    m = MeanShift().fit(t, query_bank=data["query_bank"])
    full = m.score(data["queries"], chunk_size=4).numpy()       # the same blocks: the copies' scores are the same bits
    _, i = m.topk(data["queries"], 5, chunk_size=4)
    assert np.array_equal(i.numpy(), np.argsort(-full, axis=1, kind="stable")[:, :5])


def test_stable_topk_against_a_stable_sort():
    s = torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0],       # a three-way tie at the top
                      [5.0, 4.0, 3.0, 2.0, 1.0],       # no tie
                      [0.0, 1.0, 2.0, 2.0, 0.5],       # a tie across the k-th / (k+1)-th boundary
                      [7.0, 7.0, 7.0, 7.0, 7.0]])
    for k in (1, 2, 3, 5):
        v, i = stable_topk(s, k)
        si = torch.sort(s, dim=1, descending=True, stable=True).indices[:, :k]
        assert torch.equal(i, si), k
        assert torch.equal(v, s.gather(1, si))
    v, i = stable_topk(s[1:2], 2)
    assert i.tolist() == [[0, 1]] and v.tolist() == [[5.0, 4.0]]


# ------------------------------------------------------------------------------------------------ offsets and vector index
def test_offsets_and_the_augmented_vectors(data):
    m = MeanShift(scale=0.25).fit(data["targets"], query_bank=data["query_bank"])
    h = -0.25 * data["targets"] @ data["query_bank"].mean(axis=0)
    assert isinstance(m.offsets, np.ndarray)
    np.testing.assert_allclose(m.offsets, h, rtol=0, atol=1e-15)
    aug_t, aug_q = m.augment_targets(), Normalizer.augment_queries(data["queries"])
    assert aug_t.shape == (7, 7) and aug_q.shape == (9, 7)
    np.testing.assert_array_equal(aug_t[:, :6], data["targets"])
    np.testing.assert_array_equal(aug_q[:, -1], np.ones(9))
    np.testing.assert_allclose(aug_q @ aug_t.T, _dense(data, 0.25), rtol=0, atol=1e-14)
    aug_q32 = Normalizer.augment_queries(torch.from_numpy(data["queries"]).float())
    assert aug_q32.dtype == np.float32 and aug_q32.shape == (9, 7)
    with pytest.raises(ValueError, match=r"queries must be 2-D \(m, d\); got shape \(6,\)"):
        Normalizer.augment_queries(data["queries"][0])
    with pytest.raises(NotFittedError):
        MeanShift().offsets
    with pytest.raises(NotFittedError):
        MeanShift().augment_targets()


def test_a_non_offset_method_has_no_offsets(data):
    class PerQuery(MeanShift):
        is_offset = False

    m = PerQuery().fit(data["targets"], query_bank=data["query_bank"])
    with pytest.raises(AttributeError, match="PerQuery is not an offset method"):
        m.offsets


def test_identity_is_the_raw_scores(data):
    m = Identity().fit(data["targets"].astype(np.float32))
    assert m.offsets_.dtype == torch.float32 and torch.all(m.offsets_ == 0) and m.offsets_.shape == (7,)
    np.testing.assert_allclose(m.score(data["queries"]).numpy(), data["queries"] @ data["targets"].T, atol=1e-6)
    p = Identity().plain(torch.from_numpy(data["targets"]))["offsets_"]
    assert p.dtype == torch.float64 and torch.all(p == 0) and p.shape == (7,)
    assert hn.make_normalizer("raw").__class__ is Identity


def test_on_dask(tmp_path):
    assert not _on_dask(np.zeros((2, 2))) and not _on_dask(None) and not _on_dask(str(tmp_path / "missing"))
    assert _on_dask(tmp_path) and _on_dask(str(tmp_path))
    da = pytest.importorskip("dask.array")
    assert _on_dask(da.zeros((2, 2)))


def test_a_subclass_takes_its_bank_usage_from_the_inputs_it_declares():
    """Classes made here, inside the test (the rule runs when a class is created)."""
    class Reads(Normalizer):
        inputs = Inputs(fit=(Scores("query_bank", "targets"), Scores("target_bank", "targets", required=False)))

    class Inherits(Reads):
        pass

    class Nothing(Normalizer):
        inputs = Inputs()

    assert (Reads.uses_query_bank, Reads.uses_target_bank) == ("required", "optional")
    assert (Inherits.uses_query_bank, Inherits.uses_target_bank) == ("required", "optional")
    assert (Nothing.uses_query_bank, Nothing.uses_target_bank) == ("unused", "unused")


def test_topk_limits(data, monkeypatch):
    # k may be as large as the gallery (7 targets of dimension 6)
    m = MeanShift().fit(data["targets"], query_bank=data["query_bank"])
    assert m.topk(data["queries"], 7)[1].shape == (9, 7)
    seen = []
    real = MeanShift.iter_scores
    monkeypatch.setattr(MeanShift, "iter_scores", lambda self, q, c=None: seen.append(c) or real(self, q, c))
    m.topk(data["queries"], 2, chunk_size=3)
    assert seen == [3]
    t32 = data["targets"].astype(np.float32)
    aug = MeanShift().fit(t32, query_bank=data["query_bank"]).augment_targets()
    assert aug.dtype == np.float32


def test_identity_keeps_its_arguments_and_the_engine_dtype(data):
    ident = Identity(device="cpu", chunk_size=3, check_normalized=False)
    assert ident.get_params() == {"device": "cpu", "chunk_size": 3, "check_normalized": False}
    m = Identity().fit(data["targets"])
    assert m.offsets_.dtype == torch.float64


def test_fit_sends_only_a_dask_bank_the_method_reads_to_the_dask_path(data, monkeypatch):
    from hubnorm import distributed

    da = pytest.importorskip("dask.array")
    calls = []
    real = distributed.fit_offsets
    monkeypatch.setattr(distributed, "fit_offsets", lambda *a, **k: calls.append(a) or real(*a, **k))
    MeanShift().fit(data["targets"], query_bank=data["query_bank"], target_bank=data["query_bank"][:4])
    assert calls == []                                               # in memory: never the Dask path
    MeanShift().fit(data["targets"], query_bank=data["query_bank"], target_bank=da.from_array(data["query_bank"]))
    assert calls == []                                               # a Dask bank it does not read
    qb = da.from_array(data["query_bank"], chunks=(7, -1))
    m = MeanShift().fit(data["targets"], query_bank=qb)
    assert len(calls) == 1 and calls[0][2] is qb
    np.testing.assert_allclose(m.offsets, MeanShift().fit(data["targets"], query_bank=data["query_bank"]).offsets,
                               rtol=0, atol=1e-12)
    tb = da.from_array(data["query_bank"][:11], chunks=(5, -1))
    NeedsTargetBank().fit(data["targets"], query_bank=data["query_bank"], target_bank=tb)
    assert len(calls) == 2 and calls[1][3] is tb                     # a Dask target bank it reads, passed on


def test_an_optional_bank_may_be_left_out_and_a_read_bank_takes_the_targets_dtype(data):
    class Optional_(Normalizer):
        inputs = Inputs(fit=(Scores("query_bank", "targets", required=False),
                             Scores("target_bank", "targets", required=False)))

        def __init__(self):
            pass

        def fit_blocks(self, engine):
            return {"offsets_": torch.zeros(engine.size("targets"), dtype=engine.dtype),
                    "has_": (engine.has("query_bank"), engine.has("target_bank"))}

    assert Optional_().fit(data["targets"]).has_ == (False, False)
    eng = Optional_().local_engine(data["targets"], None, data["query_bank"][:5].astype(np.float32))
    assert not eng.has("query_bank") and eng.tensor("target_bank").dtype == torch.float64


def test_a_method_without_check_normalized_checks_its_inputs_and_one_that_turns_it_off_does_not(data):
    class NoOption(MeanShift):
        def __init__(self):
            self.scale, self.k = 1.0, 1

    with pytest.raises(ValueError, match="targets rows are not L2-normalised"):
        NoOption().fit(data["targets"] * 2, query_bank=data["query_bank"])
    m = NoOption().fit(data["targets"], query_bank=data["query_bank"])
    with pytest.raises(ValueError, match="queries rows are not L2-normalised"):
        m.score(data["queries"] * 2)
    loose = MeanShift(check_normalized=False).fit(data["targets"], query_bank=data["query_bank"])
    np.testing.assert_allclose(loose.score(data["queries"] * 2).numpy(),
                               2 * data["queries"] @ data["targets"].T + loose.offsets[None, :], rtol=0, atol=1e-14)


def test_scoring_hands_each_block_its_queries(data):
    class QueryTerm(MeanShift):
        def normalize_scores(self, s, queries=None):
            return super().normalize_scores(s, queries).add_(queries[:, :1])   # a term of the query (as DN's)

    m = QueryTerm().fit(data["targets"], query_bank=data["query_bank"])
    want = data["queries"] @ data["targets"].T + m.offsets[None, :] + data["queries"][:, :1]
    np.testing.assert_allclose(m.score(data["queries"], chunk_size=4).numpy(), want, rtol=0, atol=1e-14)
