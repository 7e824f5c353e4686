"""Distributed offsets (hubnorm.distributed) on a 2-worker LocalCluster against the in-process fit.

Equality: float64 offsets within 1e-6 relative and identical top-10 rankings for NNN, CSLS, DN, IS, SN and DBSN
(one broadcast target chunk, and several target chunks = the two-half-step Sinkhorn). float32: both paths carry
float32 rounding, so each is compared with the float64 in-process fit at a tolerance derived from float32's
epsilon (see ``_f32_atol``). Memory: each worker's peak RSS growth while fitting stays below half the bank.
Failure: a worker killed mid-fit is survived by Dask's retry (same offsets); when the retries are exhausted the
fit raises ``KilledWorker`` and the normalizer stays unfitted.
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")
import dask  # noqa: E402

import hubnorm as hn  # noqa: E402
from hubnorm import distributed as hd  # noqa: E402
from conftest import unit_rows  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_thread_torch")

EPS32 = float(np.finfo(np.float32).eps)


def _makers(dtype_name):
    return {
        "nnn": lambda: hn.NearestNeighborNormalization(alpha=0.75, k=7, device="cpu"),
        "csls": lambda: hn.CrossDomainSimilarityLocalScaling(k=5, device="cpu"),
        "dn": lambda: hn.DistributionNormalization(lam=0.5, device="cpu"),
        "dn_sampled": lambda: hn.DistributionNormalization(lam=0.5, n_samples=50, n_repeats=3, seed=4, device="cpu"),
        "is": lambda: hn.InvertedSoftmax(tau=0.02, device="cpu"),
        "sn": lambda: hn.SinkhornNormalization(tau=0.01, n_iter=10, device="cpu"),
        "dbsn": lambda: hn.DualBankSinkhornNormalization(tau=0.01, n_iter=10, device="cpu"),
    }


METHODS = list(_makers("float64"))
ATTRS = {"nnn": ["bias_"], "csls": ["bank_radius_"], "dn": ["query_mean_", "target_mean_"],
         "dn_sampled": ["query_mean_", "target_mean_"], "is": [], "sn": ["n_iter_"], "dbsn": ["n_iter_", "bank_offsets_"]}


def _problem(dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    d = 16
    return (unit_rows(rng, 120, d, dtype), unit_rows(rng, 90, d, dtype), unit_rows(rng, 2500, d, dtype),
            unit_rows(rng, 70, d, dtype))


def _as_np(x):
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


# ------------------------------------------------------------------ without a Client (Dask's local threads)
def test_core_import_does_not_import_dask():
    code = textwrap.dedent("""
        import sys, numpy as np, hubnorm as hn
        x = hn.l2_normalize(np.random.default_rng(0).standard_normal((20, 4)).astype("float32"))
        hn.NearestNeighborNormalization(k=3, device="cpu").fit(x, query_bank=x)
        bad = sorted(m for m in sys.modules if m.split(".")[0] in ("dask", "distributed"))
        assert not bad, bad
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr


def test_threaded_scheduler_matches_in_process():
    """No Client: Dask's local threads run the same reductions (targets in a plain from_array chunk)."""
    assert hd._client() is None, "this test must run before the module's LocalCluster starts"
    queries, targets, bank, tbank = _problem()
    for name in ("nnn", "sn"):
        make = _makers("float64")[name]
        ref = make().fit(targets, query_bank=bank, target_bank=tbank)
        got = make().fit(targets, query_bank=da.from_array(bank, chunks=(600, -1)), target_bank=tbank)
        np.testing.assert_allclose(got.offsets, ref.offsets, rtol=1e-6, atol=1e-15)


def test_open_bank_reads_across_shards(tmp_path):
    rng = np.random.default_rng(1)
    x = unit_rows(rng, 1000, 8, np.float32)
    hd.save_bank_shards([x[:333], x[333:334], x[334:]], tmp_path)
    bank = hd.open_bank(tmp_path, chunk_rows=250)  # chunks straddle every shard boundary
    assert bank.chunks[0] == (250, 250, 250, 250)
    np.testing.assert_array_equal(bank.compute(scheduler="sync"), x)
    np.testing.assert_array_equal(bank[320:340].compute(scheduler="sync"), x[320:340])


def test_open_bank_rejects_bad_stores(tmp_path):
    with pytest.raises(ValueError, match="not a folder"):
        hd.open_bank(tmp_path / "missing")
    with pytest.raises(ValueError, match="no .npy shard"):
        hd.open_bank(tmp_path)
    np.save(tmp_path / "a.npy", np.zeros((3, 4), np.float32))
    np.save(tmp_path / "b.npy", np.zeros((3, 5), np.float32))
    with pytest.raises(ValueError, match="share dimension"):
        hd.open_bank(tmp_path)
    np.save(tmp_path / "c.npy", np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="must be 2-D"):
        hd.NpyShards([tmp_path / "c.npy"])
    np.save(tmp_path / "d.npy", np.zeros((3, 4), np.int32))
    with pytest.raises(TypeError, match="float32 or float64"):
        hd.NpyShards([tmp_path / "d.npy"])
    with pytest.raises(ValueError, match="nothing to write"):
        hd.save_bank_shards([], tmp_path / "out")
    with pytest.raises(ValueError, match="must be 2-D"):
        hd.save_bank_shards([np.zeros(3)], tmp_path / "out")


def test_bad_banks_are_rejected_before_any_work():
    rng = np.random.default_rng(2)
    targets = unit_rows(rng, 10, 4)
    nnn = hn.NearestNeighborNormalization(k=2, device="cpu")
    with pytest.raises(TypeError, match="query_bank must be a dask.array.Array"):
        hd.fit_offsets(nnn, targets, 5)
    with pytest.raises(TypeError, match="floating-point"):
        hd.fit_offsets(nnn, targets, da.zeros((20, 4), dtype=np.int32, chunks=5))
    with pytest.raises(ValueError, match="empty"):
        hd.fit_offsets(nnn, targets, da.zeros((0, 4), chunks=5))
    with pytest.raises(ValueError, match="unknown chunk sizes"):
        x = da.from_array(unit_rows(rng, 20, 4))
        hd.fit_offsets(nnn, targets, x[x[:, 0] > 0])
    with pytest.raises(ValueError, match="needs target_bank"):
        hd.fit_offsets(hn.DualBankSinkhornNormalization(device="cpu"), targets, da.from_array(targets))


# ------------------------------------------------------------------------------- on a 2-worker LocalCluster
@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    # allowed-failures=1: a task may lose one worker and be retried; a second loss raises KilledWorker. No memory
    # limit: a worker that imports torch holds ~0.85 GB and one above 80% of its limit is paused (the run hangs).
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, memory_limit=0,
                               dashboard_address=None, host="127.0.0.1")
        c = Client(cluster)
    yield c
    c.close()
    cluster.close()


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    queries, targets, bank, tbank = _problem()
    folder = tmp_path_factory.mktemp("bank64")
    hd.save_bank_shards(np.array_split(bank, 3), folder)
    return queries, targets, bank, tbank, folder


@pytest.mark.parametrize("target_chunk_rows", [None, 40], ids=["broadcast1", "targets3chunks"])
@pytest.mark.parametrize("name", METHODS)
def test_equals_in_process_float64(client, sharded, name, target_chunk_rows):
    queries, targets, bank, tbank, folder = sharded
    make = _makers("float64")[name]
    ref = make().fit(targets, query_bank=bank, target_bank=tbank)
    bank_da = hd.open_bank(folder, chunk_rows=300)  # 9 chunks, one of them straddles two shards
    got = hd.fit_offsets(make(), targets, bank_da, tbank, target_chunk_rows=target_chunk_rows, split_every=3)
    np.testing.assert_allclose(got.offsets, ref.offsets, rtol=1e-6, atol=1e-15)
    for attr in ATTRS[name]:
        np.testing.assert_allclose(_as_np(getattr(got, attr)), _as_np(getattr(ref, attr)), rtol=1e-6, atol=1e-15)
    np.testing.assert_array_equal(_as_np(got.topk(queries, 10)[1]), _as_np(ref.topk(queries, 10)[1]))


def _f32_atol(name, n_bank):
    """float32 bound of |offsets - float64 offsets|, from float32's epsilon (not fitted to the measurements).

    Each offset is tau times a logsumexp whose terms are S / tau with |S| <= 1 plus log-sizes, so one
    evaluation carries about ``eps32 * (1 + tau log m)`` absolute error; Sinkhorn compounds it over n_iter
    iterations. Top-k and mean methods sum d products of unit-norm rows: a few eps32. Factor 4 for the
    different merge orders of the two paths.
    """
    tau, iters = {"is": (0.02, 1), "sn": (0.01, 10), "dbsn": (0.01, 10)}.get(name, (0.0, 1))
    return 4 * iters * EPS32 * (1 + tau * np.log(n_bank))


@pytest.mark.parametrize("name", METHODS)
def test_float32_within_float32_rounding(client, sharded, name):
    queries, targets, bank, tbank, _ = sharded
    make = _makers("float32")[name]
    exact = make().fit(targets, query_bank=bank, target_bank=tbank).offsets
    t32, b32, tb32 = (x.astype(np.float32) for x in (targets, bank, tbank))
    single = make().fit(t32, query_bank=b32, target_bank=tb32).offsets
    got = make().fit(t32, query_bank=da.from_array(b32, chunks=(400, -1)), target_bank=tb32)
    assert got.offsets.dtype == np.float32
    atol = _f32_atol(name, len(bank))
    assert np.abs(single - exact).max() <= atol  # the bound holds for the in-process float32 fit too
    assert np.abs(got.offsets - exact).max() <= atol


def test_fit_accepts_a_folder_and_checks_inputs(client, sharded):
    queries, targets, bank, tbank, folder = sharded
    ref = hn.InvertedSoftmax(device="cpu").fit(targets, query_bank=bank)
    got = hn.InvertedSoftmax(device="cpu").fit(targets, query_bank=str(folder))
    np.testing.assert_allclose(got.offsets, ref.offsets, rtol=1e-6)
    got = hd.fit_offsets(hn.InvertedSoftmax(device="cpu"), targets, bank)  # an in-memory bank is chunked
    np.testing.assert_allclose(got.offsets, ref.offsets, rtol=1e-6)
    # issue 21: DIS (like every method written as block reductions) fits on Dask; issue 43: there is one fit
    # lifecycle (Normalizer.fit_engine), so anything that is not a Normalizer is refused by name
    got = hn.DynamicInvertedSoftmax(device="cpu").fit(targets, query_bank=da.from_array(bank), target_bank=tbank)
    ref = hn.DynamicInvertedSoftmax(device="cpu").fit(targets, query_bank=bank, target_bank=tbank)
    assert np.array_equal(_as_np(got.activation_), _as_np(ref.activation_))
    with pytest.raises(TypeError, match="fit_offsets fits a hubnorm Normalizer.*got dict"):
        hd.fit_offsets({}, targets, da.from_array(bank))
    with pytest.raises(ValueError, match="query_bank has dimension 8"):
        hn.NearestNeighborNormalization(device="cpu").fit(targets, query_bank=da.from_array(bank[:, :8]))
    with pytest.raises(ValueError, match="k=3000 is larger than|k must be <= 2500"):
        hn.NearestNeighborNormalization(k=3000, device="cpu").fit(targets, query_bank=da.from_array(bank))
    with pytest.raises(ValueError, match="query_bank rows are not L2-normalised"):  # raised on a worker
        hn.NearestNeighborNormalization(k=3, device="cpu").fit(targets, query_bank=da.from_array(2 * bank, chunks=500))
    with pytest.raises(ValueError, match="split_every must be >= 2"):
        hd.fit_offsets(hn.InvertedSoftmax(device="cpu"), targets, da.from_array(bank), split_every=1)


def _worker_peak_reset():
    with open("/proc/self/clear_refs", "w") as fh:  # resets VmHWM (peak RSS) to the current RSS
        fh.write("5")


def _worker_rss():
    with open("/proc/self/status") as fh:
        fields = dict(line.split(":", 1) for line in fh if ":" in line)
    return {k: int(fields[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM")}


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="peak-RSS reset needs Linux /proc")
def test_workers_never_hold_the_bank(client, tmp_path):
    """Each worker's peak RSS growth while fitting NNN and SN stays under half the bank's bytes.

    The bank (128 MB on disk, 64 chunks of 2 MB, similarity blocks of 4 MB) is read chunk by chunk inside fused
    tasks; a worker that gathered the bank (or half of it) would exceed the bound.
    """
    rng = np.random.default_rng(3)
    d, rows, shards = 32, 1 << 20, 4
    for i in range(shards):
        np.save(tmp_path / f"bank-{i:02d}.npy", unit_rows(rng, rows // shards, d, np.float32))
    bank_bytes = rows * d * 4
    bank = hd.open_bank(tmp_path, chunk_bytes=bank_bytes // 64)
    assert len(bank.chunks[0]) == 64 and max(bank.chunks[0]) * d * 4 <= bank_bytes // 64
    targets = unit_rows(rng, 64, d, np.float32)
    blk = 4 * 2**20
    for warm in (hn.NearestNeighborNormalization(k=16, device="cpu"), hn.SinkhornNormalization(n_iter=1, device="cpu")):
        warm.fit(targets, query_bank=bank[:65536])  # warm-up: imports and first allocations on both workers
    client.run(_worker_peak_reset)
    before = client.run(_worker_rss)
    nnn = hn.NearestNeighborNormalization(k=16, device="cpu", block_bytes=blk).fit(targets, query_bank=bank)
    sn = hn.SinkhornNormalization(n_iter=3, device="cpu", block_bytes=blk).fit(targets, query_bank=bank)
    after = client.run(_worker_rss)
    growth = {w: after[w]["VmHWM"] - before[w]["VmRSS"] for w in after}
    assert max(growth.values()) < bank_bytes / 2, growth
    # control: the measurement does see a worker that gathers the bank into one chunk
    client.run(_worker_peak_reset)
    before = client.run(_worker_rss)
    dask.compute(bank.rechunk({0: -1}).sum())
    after = client.run(_worker_rss)
    assert max(after[w]["VmHWM"] - before[w]["VmRSS"] for w in after) > bank_bytes / 2
    full = np.concatenate([np.load(tmp_path / f"bank-{i:02d}.npy") for i in range(shards)])
    np.testing.assert_allclose(nnn.offsets, hn.NearestNeighborNormalization(k=16, device="cpu")
                               .fit(targets, query_bank=full).offsets, rtol=1e-6)
    np.testing.assert_allclose(sn.offsets, hn.SinkhornNormalization(n_iter=3, device="cpu")
                               .fit(targets, query_bank=full).offsets, rtol=1e-5, atol=_f32_atol("sn", rows))


def _dying_bank(bank, flag, always):
    """``bank`` whose 3rd chunk kills its worker process (os._exit) the first time (or every time)."""

    def load(x, block_info=None):
        if block_info[0]["chunk-location"][0] == 2 and (always or not os.path.exists(flag)):
            open(flag, "w").close()
            os._exit(1)
        return x

    return da.from_array(bank, chunks=(400, -1)).map_blocks(load, dtype=bank.dtype)


def test_killed_worker_is_retried(client, sharded, tmp_path):
    queries, targets, bank, tbank, _ = sharded
    flag = str(tmp_path / "died")
    ref = hn.NearestNeighborNormalization(k=7, device="cpu").fit(targets, query_bank=bank)
    got = hn.NearestNeighborNormalization(k=7, device="cpu").fit(targets, query_bank=_dying_bank(bank, flag, False))
    assert os.path.exists(flag)  # a worker did die mid-fit ...
    np.testing.assert_allclose(got.offsets, ref.offsets, rtol=1e-6)  # ... and the retried result is complete
    client.wait_for_workers(2, timeout=120)


def test_exhausted_retries_raise_and_leave_unfitted(client, sharded, tmp_path):
    queries, targets, bank, tbank, _ = sharded
    nnn = hn.NearestNeighborNormalization(k=7, device="cpu")
    with pytest.raises(distributed.KilledWorker):
        nnn.fit(targets, query_bank=_dying_bank(bank, str(tmp_path / "died"), True))
    assert not hasattr(nnn, "offsets_")
    with pytest.raises(hn.NotFittedError):
        nnn.topk(targets, 3)
    client.wait_for_workers(2, timeout=120)


def test_sinkhorn_early_stop_matches_in_process(client, sharded):
    """``tol``: the distributed loop stops at the same iteration with the same offsets."""
    queries, targets, bank, tbank, folder = sharded
    make = lambda: hn.SinkhornNormalization(tau=0.01, n_iter=200, tol=1e-3, device="cpu")  # noqa: E731
    ref = make().fit(targets, query_bank=bank)
    got = make().fit(targets, query_bank=hd.open_bank(folder, chunk_rows=500))
    assert 1 < ref.n_iter_ < 200 and got.n_iter_ == ref.n_iter_
    np.testing.assert_allclose(got.offsets, ref.offsets, rtol=1e-6, atol=1e-15)


@pytest.mark.parametrize("make", [lambda: hn.InvertedSoftmax(tau=1e4, device="cpu"),
                                  lambda: hn.SinkhornNormalization(tau=1e3, n_iter=5, device="cpu")],
                         ids=["is-tau1e4", "sn-tau1e3"])
def test_extreme_tau_uses_the_in_process_working_dtype(client, sharded, make):
    """At a large tau the in-memory kernels switch float32 inputs to float64 arithmetic; so does the cluster."""
    queries, targets, bank, tbank, _ = sharded
    t32, b32 = targets.astype(np.float32), bank.astype(np.float32)
    ref = make().fit(t32, query_bank=b32)
    got = make().fit(t32, query_bank=da.from_array(b32, chunks=(400, -1)))
    assert got.offsets.dtype == np.float32
    np.testing.assert_allclose(got.offsets, ref.offsets, rtol=1e-6, atol=2 * EPS32 * np.abs(ref.offsets).max())
    np.testing.assert_array_equal(_as_np(got.topk(queries.astype(np.float32), 10)[1]),
                                  _as_np(ref.topk(queries.astype(np.float32), 10)[1]))
