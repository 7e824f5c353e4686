"""``hubnorm.index.nnn`` (:class:`FaissNNN`) in small pieces: every constructor argument stored as given (and the
NNN ones handed to the parent), every parameter check by its message and at its boundary, the refusal of an engine
that is not in-process, every option handed to the :class:`IndexEngine` the fit runs on, and the fitted attributes
it reads back from that engine; the offsets of an exhaustive index (``nprobe = nlist``) against the exact NNN bias
computed densely in float64 (``alpha`` times the mean of each target's top-``k`` bank similarities)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

faiss = pytest.importorskip("faiss")

from hubnorm.index import BankIndex, FaissNNN, IndexEngine, ProjectedBankIndex  # noqa: E402
from hubnorm.index import nnn as nnn_module  # noqa: E402


def _unit(n, d=8, seed=0):
    x = np.random.default_rng(seed).standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def data():
    return _unit(40, seed=1), _unit(500, seed=2)


def _exact_bias(targets, bank, alpha, k):
    """NNN Eq. (1) densely in float64: alpha * mean of the top-k of each target's column of bank @ targets.T."""
    s = bank.astype(np.float64) @ targets.astype(np.float64).T          # (bank, targets)
    top = -np.sort(-s, axis=0)[:k]
    return alpha * top.mean(axis=0)


# ------------------------------------------------------------------------------------------------ constructor
def test_every_argument_is_stored_as_given():
    idx = object()
    norm = FaissNNN(alpha=0.5, k=7, nlist=16, nprobe=3, recall_target=0.8, sample_size=9, bank_index=idx,
                    use_gpu=False, seed=4, scan="faiss", device="cpu", chunk_size=11, check_normalized=False,
                    block_bytes=4096, refine=1.5, projection_dim=6, code="SQ8")
    assert norm.get_params() == dict(alpha=0.5, k=7, nlist=16, nprobe=3, recall_target=0.8, sample_size=9,
                                     bank_index=idx, use_gpu=False, seed=4, scan="faiss", device="cpu",
                                     chunk_size=11, check_normalized=False, block_bytes=4096, refine=1.5,
                                     projection_dim=6, code="SQ8")
    assert norm.implementation == "fast" and norm.name == "nnn-faiss"


def test_the_defaults():
    norm = FaissNNN()
    assert norm.get_params() == dict(alpha=0.75, k=128, nlist=None, nprobe=None, recall_target=0.95, sample_size=64,
                                     bank_index=None, use_gpu=None, seed=0, scan=None, device=None, chunk_size=None,
                                     check_normalized=True, block_bytes=None, refine=None, projection_dim=None,
                                     code=None)
    assert norm.check_params() is norm


# ------------------------------------------------------------------------------------------------ checks
@pytest.mark.parametrize("params, error, message", [
    (dict(nlist=0), ValueError, r"^nlist must be >= 1; got 0$"),
    (dict(nlist=2.0), TypeError, r"^nlist must be an integer; got float 2.0$"),
    (dict(nprobe=0), ValueError, r"^nprobe must be >= 1; got 0$"),
    (dict(nprobe="4"), TypeError, r"^nprobe must be an integer; got str '4'$"),
    (dict(recall_target=0), ValueError, r"^recall_target must be in \(0, 1\]; got 0$"),
    (dict(recall_target=-0.5), ValueError, r"^recall_target must be in \(0, 1\]; got -0.5$"),
    (dict(recall_target=1.0001), ValueError, r"^recall_target must be in \(0, 1\]; got 1.0001$"),
    (dict(recall_target="high"), TypeError, r"^recall_target must be a number; got str 'high'$"),
    (dict(recall_target=float("nan")), ValueError, r"^recall_target must be finite; got nan$"),
    (dict(sample_size=0), ValueError, r"^sample_size must be >= 1; got 0$"),
    (dict(sample_size=None), TypeError, r"^sample_size must be an integer; got NoneType None$"),
    (dict(seed=-1), ValueError, r"^seed must be in \[0, 2\*\*63\); got -1$"),
    (dict(seed=None), TypeError, r"^seed must be a non-negative integer; got NoneType None$"),
    (dict(scan="gpu"), ValueError, r"^scan must be None or one of \['blas', 'blas-bf16', 'faiss'\]; got 'gpu'$"),
    (dict(refine=0.5), ValueError, r"^refine \(the re-ranked candidate pool, in multiples of k\) must be >= 1; "
                                   r"got 0.5$"),
    (dict(refine="2"), TypeError, r"^refine must be a number; got str '2'$"),
    (dict(projection_dim=0), ValueError, r"^projection_dim must be >= 1; got 0$"),
    (dict(projection_dim=4.0), TypeError, r"^projection_dim must be an integer; got float 4.0$"),
    (dict(projection_dim=4, scan="blas"), ValueError,
     r"^scan='blas' applies to the full-dimension IVF index; with projection_dim leave scan None \(the projected "
     r"index has one scan\)$"),
    (dict(projection_dim=4, scan="faiss"), ValueError, r"^scan='faiss' applies to the full-dimension IVF index"),
    (dict(projection_dim=4, code="PQ3"), ValueError,
     r"^code must be 'Flat', 'SQ8' or 'PQ<M>x4fs' / 'PQ<M>' with M dividing projection_dim=4; got 'PQ3'$"),
    (dict(projection_dim=6, code="PQ4x4fs"), ValueError, r"M dividing projection_dim=6; got 'PQ4x4fs'$"),
    (dict(projection_dim=4, code=8), TypeError, r"^code must be a string such as 'PQ32x4fs'; got int$"),
    (dict(projection_dim=4, use_gpu=True), ValueError,
     r"^use_gpu=True: the projected index \(projection_dim\) runs on the CPU only; leave use_gpu None / False, or "
     r"projection_dim None for the GPU IVF index$"),
    (dict(code="SQ8"), ValueError,
     r"^code sets the projected index's codes: give projection_dim too \(or leave code None\)$"),
    (dict(alpha="x"), TypeError, r"alpha"),                 # the parent's checks still run
    (dict(k=0), ValueError, r"k"),
])
def test_each_parameter_check_by_its_message(params, error, message):
    with pytest.raises(error, match=message):
        FaissNNN(**params).check_params()


@pytest.mark.parametrize("params", [
    dict(nlist=1), dict(nprobe=1), dict(recall_target=1), dict(recall_target=1e-9), dict(sample_size=1),
    dict(seed=2**63 - 1), dict(scan="blas"), dict(scan="blas-bf16"), dict(scan="faiss"), dict(refine=1),
    dict(projection_dim=1), dict(projection_dim=4, code="Flat"), dict(projection_dim=4, code="PQ2x4fs"),
    dict(projection_dim=4, code="PQ4"), dict(projection_dim=4, use_gpu=False), dict(projection_dim=4, use_gpu=None),
    dict(nlist=None, nprobe=None, refine=None, projection_dim=None, code=None, scan=None),
])
def test_the_boundaries_are_accepted(params):
    norm = FaissNNN(**params)
    assert norm.check_params() is norm


def test_a_dask_engine_and_score_matrices_are_refused_by_the_message():
    from hubnorm.engine import LocalEngine

    class NotLocal:   # what a Dask engine holds in memory: the targets alone (its bank is chunks)
        block_bytes = None

        def embeddings(self):
            return {"targets": torch.zeros(3, 2)}
    assert not isinstance(NotLocal(), LocalEngine)
    message = (r"^FaissNNN indexes an in-memory query bank of embeddings: load the bank \(bank.compute\(\)\), or fit "
               r"NearestNeighborNormalization on Dask or on score matrices$")
    with pytest.raises(TypeError, match=message):
        FaissNNN(k=3).fit_blocks(NotLocal())
    stored = LocalEngine(matrices={("query_bank", "targets"): np.ones((4, 3))})   # a LocalEngine over score matrices
    with pytest.raises(TypeError, match=message):
        FaissNNN(k=3).fit_blocks(stored)


# ------------------------------------------------------------------------------------------------ the fit
def test_every_option_is_handed_to_the_index_engine(data, monkeypatch):
    targets, bank = data
    seen = []

    class Recording(IndexEngine):
        def __init__(self, inputs, **kw):
            seen.append((inputs, kw))
            super().__init__(inputs, **kw)
    monkeypatch.setattr(nnn_module, "IndexEngine", Recording)
    built = BankIndex(bank, nlist=4, seed=0)
    norm = FaissNNN(alpha=0.5, k=5, nlist=4, nprobe=2, recall_target=0.7, sample_size=13, bank_index=built,
                    use_gpu=False, seed=9, scan="blas-bf16", block_bytes=1 << 20, refine=3.0,
                    device="cpu").fit(targets, query_bank=bank)
    (inputs, kw), = seen
    assert set(inputs) >= {"targets", "query_bank"}
    np.testing.assert_array_equal(inputs["query_bank"].numpy(), bank)
    assert kw == dict(bank_index=built, nlist=4, nprobe=2, recall_target=0.7, sample_size=13, use_gpu=False, seed=9,
                      scan="blas-bf16", block_bytes=1 << 20, refine=3.0, projection_dim=None, code=None)
    assert norm.index_ is built and norm.scan_ == "blas-bf16" and norm.nprobe_ == 2 and norm.tuning_ is None
    assert norm.incomplete_ == 0
    seen.clear()
    FaissNNN(k=3, projection_dim=4, code="SQ8", nlist=2, device="cpu").fit(targets, query_bank=bank)
    assert seen[0][1]["projection_dim"] == 4 and seen[0][1]["code"] == "SQ8"
    assert seen[0][1]["block_bytes"] is None                      # the engine's default budget


@pytest.mark.parametrize("scan", ["blas", "faiss", "blas-bf16"])
def test_an_exhaustive_index_gives_the_exact_offsets(data, scan):
    targets, bank = data
    norm = FaissNNN(alpha=0.5, k=6, nlist=8, nprobe=8, scan=scan, refine=100.0, device="cpu").fit(
        targets, query_bank=bank)
    want = _exact_bias(targets, bank, 0.5, 6)
    np.testing.assert_allclose(norm.bias_.numpy(), want, rtol=0, atol=2e-6)
    np.testing.assert_allclose(norm.offsets_.numpy(), -want, rtol=0, atol=2e-6)
    assert isinstance(norm.index_, BankIndex) and norm.index_.nlist == 8 and norm.index_.n == 500
    assert norm.nprobe_ == 8 and norm.scan_ == scan and norm.tuning_ is None and norm.incomplete_ == 0


def test_the_fitted_index_is_built_with_the_given_seed(data):
    targets, bank = data
    norm = FaissNNN(k=4, nlist=8, nprobe=8, seed=5, device="cpu").fit(targets, query_bank=bank)
    same = BankIndex(bank, nlist=8, seed=5)
    other = BankIndex(bank, nlist=8, seed=0)
    np.testing.assert_array_equal(norm.index_.list_sizes, same.list_sizes)
    assert not np.array_equal(same.list_sizes, other.list_sizes)       # the seed matters for this bank


def test_a_prebuilt_index_is_reused_and_its_scan_is_the_default(data):
    targets, bank = data
    built = BankIndex(bank, nlist=4, scan="faiss")
    norm = FaissNNN(k=5, bank_index=built, nprobe=4, device="cpu").fit(targets, query_bank=bank)
    assert norm.index_ is built and norm.scan_ == "faiss" and norm.nprobe_ == 4
    np.testing.assert_allclose(norm.bias_.numpy(), _exact_bias(targets, bank, 0.75, 5), rtol=0, atol=2e-6)
    with pytest.raises(ValueError, match=r"^bank_index holds 500 x 8 rows but the query bank is \(300, 8\)$"):
        FaissNNN(k=5, bank_index=built, device="cpu").fit(targets, query_bank=bank[:300])


def test_nprobe_tuned_to_the_recall_target(data):
    targets, bank = data
    norm = FaissNNN(k=5, nlist=16, recall_target=1.0, sample_size=40, device="cpu").fit(targets, query_bank=bank)
    tuning = norm.tuning_
    assert tuning is not None and norm.nprobe_ == tuning["nprobe"] == norm.index_.nprobe
    assert tuning["recall"] == 1.0 and max(tuning["curve"]) == tuning["nprobe"]
    assert all(r < 1.0 for p, r in tuning["curve"].items() if p < tuning["nprobe"])
    # recall 1 on all 40 targets (the sample is all of them): the exact offsets
    np.testing.assert_allclose(norm.bias_.numpy(), _exact_bias(targets, bank, 0.75, 5), rtol=0, atol=2e-6)


def test_short_probed_lists_are_counted(data):
    targets, bank = data
    with pytest.warns(RuntimeWarning, match=r"nprobe=1 finds fewer than k=60 bank neighbours"):
        norm = FaissNNN(k=60, nlist=16, nprobe=1, device="cpu").fit(targets, query_bank=bank)
    assert norm.incomplete_ > 0 and norm.nprobe_ == 1
    assert norm.incomplete_ == int((norm.index_.list_sizes[norm.index_.probes(targets, 1)[:, 0]] < 60).sum())


def test_the_projected_index(data):
    targets, bank = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        norm = FaissNNN(k=4, projection_dim=4, code="Flat", nlist=2, nprobe=2, refine=200.0, device="cpu").fit(
            targets, query_bank=bank)
        default = FaissNNN(k=4, projection_dim=4, nlist=16, device="cpu").fit(targets, query_bank=bank)
    assert isinstance(norm.index_, ProjectedBankIndex) and norm.tuning_ is None and norm.scan_ == norm.index_.scan
    assert norm.index_.nlist == 2 and norm.nprobe_ == 2 and norm.index_.dim == 4
    # every list probed and a pool of 800 > 500 rows re-ranked exactly: the exact offsets
    np.testing.assert_allclose(norm.bias_.numpy(), _exact_bias(targets, bank, 0.75, 4), rtol=0, atol=2e-6)
    # no nprobe: the projected index's own (nlist / 8), not tuned
    assert default.tuning_ is None and default.nprobe_ == 2
