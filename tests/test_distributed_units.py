"""The Dask engine (``hubnorm.distributed``) in small pieces on Dask's synchronous scheduler (no cluster: seconds,
not minutes): the shard store and its integrity checks, the bank checks by their messages, and every registered
method fitted from a bank of many small chunks, with targets split into several broadcast chunks and a narrow tree
reduction, equal to the in-memory fit in float64. ``tests/test_distributed.py`` runs the same engine on a
LocalCluster (workers, retries, memory)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

da = pytest.importorskip("dask.array")
import dask  # noqa: E402

import hubnorm as hn  # noqa: E402
from hubnorm import distributed as hd  # noqa: E402
from hubnorm.registry import NORMALIZERS  # noqa: E402


def _unit(n, d=6, seed=0, dtype=np.float64):
    x = np.random.default_rng(seed).standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(dtype)


@pytest.fixture(autouse=True)
def synchronous():
    with dask.config.set(scheduler="synchronous"):
        yield


@pytest.fixture(scope="module")
def data():
    return {"targets": _unit(23, seed=1), "query_bank": _unit(70, seed=2), "target_bank": _unit(31, seed=3)}


# ------------------------------------------------------------------------------------------------ shards
def test_shards_read_across_files_and_detect_changes(tmp_path):
    x = _unit(25, seed=4, dtype=np.float32)
    paths = hd.save_bank_shards([x[:10], torch.from_numpy(x[10:17]), x[17:]], tmp_path / "b", prefix="p")
    assert [p.name for p in paths] == ["p-00000.npy", "p-00001.npy", "p-00002.npy"]
    store = hd.NpyShards(paths)
    assert store.shape == (25, 6) and len(store) == 25 and store.dtype == np.float32 and store.ndim == 2
    assert store.starts.tolist() == [0, 10, 17, 25]
    np.testing.assert_array_equal(store[8:19], x[8:19])                  # spans three shards
    np.testing.assert_array_equal(store[10:17, 2:4], x[10:17, 2:4])
    np.testing.assert_array_equal(store[:], x)
    np.testing.assert_array_equal(store[17:17], np.empty((0, 6), dtype=np.float32))
    with pytest.raises(TypeError, match="contiguous row slices only"):
        store[[1, 2]]
    with pytest.raises(TypeError, match="contiguous row slices only"):
        store[0:10:2]
    bank = hd.open_bank(tmp_path / "b", chunk_rows=4)
    assert bank.chunks[0] == (4, 4, 4, 4, 4, 4, 1)
    np.testing.assert_array_equal(bank.compute(), x)
    assert hd.open_bank(paths).shape == (25, 6)
    # a shard rewritten after opening: same shape, other values
    y = x[10:17].copy()
    y[3, 0] += 1.0
    np.save(paths[1], y)
    os.utime(paths[1], ns=(1, 1))
    with pytest.raises(RuntimeError, match=r"p-00001.npy changed after it was opened \(.*modification time.*checksum"):
        store[12:13]
    np.testing.assert_array_equal(store[0:10], x[:10])                  # the other shards still read
    os.remove(paths[2])
    with pytest.raises(RuntimeError, match="p-00002.npy can no longer be read"):
        store[20:21]


def test_file_stamp_reads_both_ends(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"a" * 100 + b"b" * 100)
    s1 = hd._file_stamp(str(p), sample=50)
    assert s1[0] == 200
    data = bytearray(p.read_bytes())
    data[-1:] = b"c"                                  # the last bytes only
    p.write_bytes(bytes(data))
    os.utime(p, ns=(s1[1], s1[1]))
    s2 = hd._file_stamp(str(p), sample=50)
    assert s2[:3] == s1[:3] and s2[3] != s1[3]
    data[100:101] = b"x"                              # the middle: outside both samples
    p.write_bytes(bytes(data))
    os.utime(p, ns=(s1[1], s1[1]))
    assert hd._file_stamp(str(p), sample=50)[3] == s2[3]
    data[0:1] = b"z"                                  # the first bytes
    p.write_bytes(bytes(data))
    os.utime(p, ns=(s1[1], s1[1]))
    assert hd._file_stamp(str(p), sample=50)[3] != s2[3]


@pytest.mark.parametrize("make, exc, message", [
    (lambda t: [], ValueError, "paths is empty"),
    (lambda t: [t / "missing.npy"], ValueError, "is not a readable .npy file"),
    (lambda t: [np.save(t / "v.npy", np.ones(3)) or t / "v.npy"], ValueError, r"has shape \(3,\); every shard must be 2-D"),
    (lambda t: [np.save(t / "i.npy", np.ones((2, 3), dtype=np.int32)) or t / "i.npy"], TypeError, "holds int32"),
    (lambda t: [np.save(t / "a.npy", np.ones((2, 3))) or t / "a.npy", np.save(t / "b.npy", np.ones((2, 4))) or t / "b.npy"],
     ValueError, r"is float64 \(.., 4\) but the first shard is float64 \(.., 3\)"),
    (lambda t: [np.save(t / "a.npy", np.ones((2, 3))) or t / "a.npy",
                np.save(t / "b.npy", np.ones((2, 3), dtype=np.float32)) or t / "b.npy"], ValueError, "share dimension and dtype"),
])
def test_bad_shards_are_refused(tmp_path, make, exc, message):
    with pytest.raises(exc, match=message):
        hd.NpyShards(make(tmp_path))


def test_open_bank_and_save_refuse(tmp_path):
    with pytest.raises(ValueError, match="is not a folder"):
        hd.open_bank(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no .npy shard: write one with hubnorm.distributed.save_bank_shards"):
        hd.open_bank(tmp_path / "empty")
    with pytest.raises(ValueError, match=r"block 1 has shape \(3,\)"):
        hd.save_bank_shards([np.ones((2, 3)), np.ones(3)], tmp_path / "s")
    with pytest.raises(ValueError, match="^blocks is empty: nothing to write$"):
        hd.save_bank_shards([], tmp_path / "s2")
    hd.save_bank_shards([np.ones((2, 3))], tmp_path / "s3")
    hd.save_bank_shards([np.ones((2, 3))], tmp_path / "s3")                 # into an existing folder
    nested = hd.save_bank_shards([torch.ones(2, 3)], tmp_path / "x" / "y" / "z")   # parents made
    assert nested[0].is_file() and np.load(nested[0]).shape == (2, 3)
    with pytest.raises(ValueError, match="chunk_rows must be >= 1"):
        hd.open_bank(tmp_path / "s3", chunk_rows=0)


def test_bank_checks(data):
    t = data["targets"]
    assert hd._as_bank(data["query_bank"], "query_bank", 6, chunk_bytes=6 * 8 * 16).chunks[0] == (16, 16, 16, 16, 6)
    assert hd._as_bank(torch.from_numpy(data["query_bank"]), "query_bank", 6).shape == (70, 6)
    rechunked = hd._as_bank(da.from_array(data["query_bank"], chunks=(10, 2)), "query_bank", 6)
    assert rechunked.chunks[1] == (6,)
    for bank, exc, message in [
        ([[1.0]], TypeError, "query_bank must be a dask.array.Array, a folder of .npy shards"),
        (da.ones(5), ValueError, r"query_bank must be 2-D \(rows, d\); got shape \(5,\)"),
        (da.ones((0, 6)), ValueError, r"query_bank is empty \(0 rows\)"),
        (da.ones((4, 6), dtype=int), TypeError, "query_bank must hold floating-point values"),
        (da.ones((4, 5)), ValueError, "query_bank has dimension 5 but the other embeddings have 6"),
    ]:
        with pytest.raises(exc, match=message):
            hd._as_bank(bank, "query_bank", 6)
    unknown = da.from_array(data["query_bank"], chunks=(10, -1))
    unknown = unknown[unknown[:, 0] > 0]
    with pytest.raises(ValueError, match="unknown chunk sizes: call query_bank.compute_chunk_sizes"):
        hd._as_bank(unknown, "query_bank", 6)
    with pytest.raises(TypeError, match="fit_offsets fits a hubnorm Normalizer"):
        hd.fit_offsets(object(), t)
    with pytest.raises(ValueError, match="split_every must be >= 2"):
        hd.fit_offsets(hn.InvertedSoftmax(), t, da.from_array(data["query_bank"]), split_every=1)


# ------------------------------------------------------------------------------------------------ every method
def _params(name):
    cls = NORMALIZERS[name]
    p = dict(getattr(cls, "example_params", {}) or {})
    if "device" in cls._param_names():
        p["device"] = "cpu"
    return p


@pytest.mark.parametrize("name", sorted(NORMALIZERS))
def test_every_method_from_many_small_chunks_equals_the_in_memory_fit(data, name):
    cls = NORMALIZERS[name]
    make = lambda: cls(**_params(name))   # noqa: E731
    ref = make().fit(data["targets"], query_bank=data["query_bank"], target_bank=data["target_bank"])
    qb = da.from_array(data["query_bank"], chunks=(9, -1))
    tb = da.from_array(data["target_bank"], chunks=(7, -1))
    got = hd.fit_offsets(make(), data["targets"], qb, tb, target_chunk_rows=5, split_every=2)
    for attr, value in vars(ref).items():
        if attr.endswith("_") and isinstance(value, torch.Tensor) and attr != "targets_":
            other = getattr(got, attr)
            if value.dtype.is_floating_point:
                torch.testing.assert_close(other.to(value.dtype), value, rtol=1e-9, atol=1e-12, msg=f"{name}.{attr}")
            else:
                assert torch.equal(other, value), (name, attr)
    assert got.device_ == torch.device("cpu") and torch.equal(got.targets_, ref.targets_)


def test_a_reopened_bank_is_a_new_dask_array_only_when_its_shards_or_chunks_changed(tmp_path):
    """The array's name (Dask's cache key) is a token of the shard paths, their stamps and the chunking: the same
    shards give the same name, a rewritten shard or another chunking a new one (a stale cached chunk is never
    reused)."""
    x = _unit(12, seed=6, dtype=np.float32)
    paths = hd.save_bank_shards([x[:5], x[5:]], tmp_path / "b")
    a, b = hd.open_bank(tmp_path / "b", chunk_rows=4), hd.open_bank(tmp_path / "b", chunk_rows=4)
    assert a.name == b.name and a.name.startswith("hubnorm-bank-")
    assert hd.open_bank(tmp_path / "b", chunk_rows=3).name != a.name
    assert hd.open_bank(paths[:1], chunk_rows=4).name != a.name
    np.save(paths[1], x[5:] * 0.5)
    c = hd.open_bank(tmp_path / "b", chunk_rows=4)
    assert c.name != a.name
    np.testing.assert_array_equal(c.compute()[5:], x[5:] * 0.5)
    assert hd.open_bank(tmp_path / "b", chunk_bytes=6 * 4 * 3).chunks[0] == (3, 3, 3, 3)   # 3 rows of 6 float32
    assert c.dtype == np.float32 and c._meta.dtype == np.float32


def test_the_change_message_names_what_changed(tmp_path):
    x = _unit(6, seed=7)
    paths = hd.save_bank_shards([x[:3], x[3:]], tmp_path / "b")
    store = hd.NpyShards(paths)
    np.save(paths[0], x[:2])                                   # truncated: size and checksum
    with pytest.raises(RuntimeError, match=r"changed after it was opened \(size, modification time, checksum differ\)"
                                           r": the bank would mix old and new rows"):
        store[0:1]


def test_dask_bank_rows_are_checked_and_cast_like_in_memory_ones(data):
    """DN's bank means on the Dask path (an Embeddings reduction over chunks): non-unit rows refused, a float32
    bank averaged in the targets' float64; a NaN row named by the bank; the column-chunk rule at its boundary."""
    t, qb = data["targets"], data["query_bank"]
    dn = lambda: hn.make_normalizer("dn", device="cpu")          # noqa: E731
    with pytest.raises(ValueError, match="query_bank rows are not L2-normalised"):
        hd.fit_offsets(dn(), t, da.from_array(2 * qb, chunks=(9, -1)), da.from_array(data["target_bank"]))
    got = hd.fit_offsets(dn(), t, da.from_array(qb.astype(np.float32), chunks=(9, -1)),
                         da.from_array(data["target_bank"], chunks=(7, -1)))
    ref = dn().fit(t, query_bank=qb.astype(np.float32).astype(np.float64), target_bank=data["target_bank"])
    np.testing.assert_allclose(got.offsets, ref.offsets, rtol=0, atol=1e-12)
    bad = qb.copy()
    bad[40, 2] = np.nan
    eng = hd.DaskEngine(torch.from_numpy(t), {"query_bank": da.from_array(bad, chunks=(9, -1))}, check=True)
    with pytest.raises(ValueError, match="^query_bank has a non-finite row \\(NaN or inf\\) in its shards"):
        eng.max_norm("query_bank")
    assert eng.max_norm("targets") == pytest.approx(1.0)
    for rows, spans in ((23, True), (22, False)):
        e = hd.DaskEngine(torch.from_numpy(t), {}, check=True, target_chunk_rows=rows)
        assert e.spans("targets") is spans and e.spans(("targets",)) is spans


# ------------------------------------------------------------------------------------------------ the engine's answers
def _engine(data, **kwargs):
    t = torch.from_numpy(data["targets"])
    banks = {"query_bank": da.from_array(data["query_bank"].astype(np.float32), chunks=(9, -1)), "target_bank": None}
    return hd.DaskEngine(t, banks, **{"check": True, **kwargs})


def test_the_engine_answers_like_the_in_memory_inputs(data):
    """Sizes, gathered banks (cast to the targets' dtype), rows taken by index, the largest row norm and the score
    bound, each equal to the value computed from the in-memory arrays."""
    from hubnorm.blocks import Scores
    eng = _engine(data)
    qb = torch.from_numpy(data["query_bank"].astype(np.float32)).double()
    t = torch.from_numpy(data["targets"])
    assert (eng.size("targets"), eng.size("query_bank"), eng.size("target_bank")) == (23, 70, None)
    assert eng.has("targets") and eng.has("query_bank") and not eng.has("target_bank")
    got = eng.tensor("query_bank")
    assert got.dtype == torch.float64 and torch.equal(got, qb)
    assert torch.equal(eng.tensor(("targets", "query_bank")), torch.cat([t, qb]))
    idx = torch.tensor([69, 0, 17, 17])
    taken = eng.take_rows("query_bank", idx)
    assert taken.dtype == torch.float64 and torch.equal(taken, qb[idx])
    assert torch.equal(eng.take_rows("targets", torch.tensor([3, 1])), t[[3, 1]])
    assert eng.max_norm("query_bank") == pytest.approx(float(qb.norm(dim=1).max()), abs=1e-7)
    assert eng.max_norm("targets") == float(torch.linalg.vector_norm(t, dim=1).max())
    # rows of norm 1 and 3: the largest *row* norm (3), not a chunk's whole-matrix norm
    scaled = data["query_bank"].copy()
    scaled[40] *= 3.0
    eng3 = hd.DaskEngine(2.0 * t, {"query_bank": da.from_array(scaled, chunks=(9, -1))}, check=False)
    assert eng3.max_norm("query_bank") == pytest.approx(3.0, abs=1e-12)
    assert eng3.max_norm("targets") == pytest.approx(2.0, abs=1e-12)
    assert eng3.score_bound(Scores("query_bank", "targets")) == pytest.approx(6.0, abs=1e-12)   # |q| |t| >= |q . t|


def test_reductions_of_in_memory_inputs_and_per_row_means(data):
    """A reduction of the targets alone runs in memory; a per-bank-row log-mean-exp is finalised on the workers
    with the number of columns it averages over; a score matrix whose rows are not a bank is refused by name."""
    from hubnorm.blocks import LogMeanExp, LogSumExp, Scores
    from hubnorm.engine import LocalEngine
    t, qb = torch.from_numpy(data["targets"]), torch.from_numpy(data["query_bank"])
    local = LocalEngine({"targets": t, "query_bank": qb})
    eng = hd.DaskEngine(t, {"query_bank": da.from_array(data["query_bank"], chunks=(9, -1))}, check=True,
                        target_chunk_rows=5)
    own = LogSumExp(Scores("targets", "targets"), 3.0, torch.float64, axis=1)
    torch.testing.assert_close(eng.reduce(own), torch.logsumexp(3.0 * t @ t.T, dim=1), rtol=1e-12, atol=1e-12)
    per_row = eng.to_tensor(eng.reduce(LogMeanExp(Scores("query_bank", "targets"), 4.0, axis=1)))
    want = torch.logsumexp(4.0 * qb @ t.T, dim=1) - np.log(23)
    torch.testing.assert_close(per_row, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(per_row, local.reduce(LogMeanExp(Scores("query_bank", "targets"), 4.0, axis=1)),
                               rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match=r"^the Dask engine reduces score matrices whose rows are a bank; got "
                                         r"targets x query_bank scores$"):
        eng.reduce(LogSumExp(Scores("targets", "query_bank"), 1.0, torch.float64, axis=1))


def test_bank_errors_name_the_bank_and_non_finite_rows_are_refused(data):
    t = torch.from_numpy(data["targets"])
    with pytest.raises(ValueError, match=r"^target_bank must be 2-D \(rows, d\)"):
        hd.DaskEngine(t, {"target_bank": da.ones(5)}, check=True)
    bad = data["query_bank"].copy()
    bad[33, 2] = np.nan
    eng = hd.DaskEngine(t, {"query_bank": da.from_array(bad, chunks=(9, -1))}, check=False)
    with pytest.raises(ValueError, match=r"^query_bank has a non-finite row \(NaN or inf\) in its shards: clean or "
                                         r"re-export the embeddings \(every row must be a finite, L2-normalised "
                                         r"vector\)$"):
        eng.max_norm("query_bank")
    with pytest.raises(TypeError, match="; got object$"):
        hd.fit_offsets(object(), t)


def test_taken_rows_are_checked_and_named(data):
    t = torch.from_numpy(data["targets"])
    bad = data["query_bank"] * 2.0
    eng = hd.DaskEngine(t, {"query_bank": da.from_array(bad, chunks=(9, -1))}, check=True)
    with pytest.raises(ValueError, match="query_bank rows are not L2-normalised"):
        eng.take_rows("query_bank", torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="query_bank rows are not L2-normalised"):
        eng.tensor("query_bank")
    loose = hd.DaskEngine(t, {"query_bank": da.from_array(bad, chunks=(9, -1))}, check=False)
    assert torch.equal(loose.take_rows("query_bank", torch.tensor([1, 2])), torch.from_numpy(bad[[1, 2]]))


def test_rows_are_taken_from_shards_on_disk(data, tmp_path):
    """Rows by index from an opened bank: Dask reads the chunks that hold them as row slices (the store reads
    contiguous row slices only) and picks the rows."""
    x = data["query_bank"]
    hd.save_bank_shards([x[:30], x[30:]], tmp_path / "b")
    eng = hd.DaskEngine(torch.from_numpy(data["targets"]), {"query_bank": str(tmp_path / "b")}, check=True)
    idx = torch.tensor([65, 2, 31, 29])
    assert torch.equal(eng.take_rows("query_bank", idx), torch.from_numpy(x[idx.numpy()]))


def test_the_broadcast_chunk_rule():
    """Targets per broadcast chunk: ``target_chunk_rows`` when given (checked by name), else as many rows as fit
    DEFAULT_TARGET_CHUNK_BYTES, at least 1 and at most all of them; ``spans`` says whether one chunk holds them."""
    per = hd.DEFAULT_TARGET_CHUNK_BYTES // (6 * 8)
    assert hd._target_rows(10 ** 12, 6, 8, None) == per
    assert hd._target_rows(10, 6, 8, None) == 10
    assert hd._target_rows(10 ** 12, hd.DEFAULT_TARGET_CHUNK_BYTES, 8, None) == 1
    assert hd._target_rows(10, 6, 8, 3) == 3
    with pytest.raises(ValueError, match="^target_chunk_rows must be >= 1"):
        hd._target_rows(10, 6, 8, 0)


def test_spans_and_the_targets_name_of_the_local_engine(data):
    eng = _engine(data, target_chunk_rows=5)
    assert not eng.spans("targets") and eng.spans(()) is True
    assert _engine(data).spans(("targets", "query_bank"))
    assert eng.local.has("targets") and eng.local.size("targets") == 23


def test_in_memory_side_terms_travel_with_their_chunks(data):
    """A score reduction with a row vector and a column vector given in memory (a torch tensor and a numpy array),
    over a bank of several chunks and targets of several broadcast chunks: equal to the in-memory engine's."""
    from hubnorm.blocks import LogSumExp, Scores
    from hubnorm.engine import LocalEngine
    t = torch.from_numpy(data["targets"])
    qb = data["query_bank"]
    rng = np.random.default_rng(3)
    rt, ct = torch.from_numpy(rng.standard_normal(70)), rng.standard_normal(23)
    local = LocalEngine({"targets": t, "query_bank": torch.from_numpy(qb)})
    eng = hd.DaskEngine(t, {"query_bank": da.from_array(qb, chunks=(9, -1))}, check=True, target_chunk_rows=5,
                        split_every=2)
    for axis in (0, 1):
        def red(row_terms, col_terms):
            return LogSumExp(Scores("query_bank", "targets"), 7.0, torch.float64, axis=axis, row_terms=row_terms,
                             col_terms=col_terms)
        want = local.reduce(red(rt, torch.from_numpy(ct)))
        dense = torch.logsumexp(7.0 * torch.from_numpy(qb) @ t.T + rt[:, None] + torch.from_numpy(ct)[None, :],
                                dim=axis)
        torch.testing.assert_close(want, dense, rtol=1e-12, atol=1e-12)
        for row_terms, col_terms in ((rt, torch.from_numpy(ct)), (rt.numpy(), ct)):   # tensors or numpy arrays
            got = eng.to_tensor(eng.reduce(red(row_terms, col_terms)))
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------------------------------ fit_offsets' wiring
def test_fit_offsets_passes_the_normalizers_settings_to_the_engine(data, monkeypatch):
    seen = {}
    real = hd.DaskEngine

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)
    monkeypatch.setattr(hd, "DaskEngine", spy)
    nnn = hn.make_normalizer("nnn", k=4, device="cpu", block_bytes=4096)
    hd.fit_offsets(nnn, data["targets"], da.from_array(data["query_bank"], chunks=(9, -1)), target_chunk_rows=7,
                   split_every=3)
    assert seen == {"check": True, "block_bytes": 4096, "target_chunk_rows": 7, "split_every": 3}


def test_fit_offsets_honours_check_normalized_and_names_its_inputs(data):
    t, qb = data["targets"], data["query_bank"]
    loose = 2.0 * qb
    fitted = hd.fit_offsets(hn.make_normalizer("nnn", k=4, device="cpu", check_normalized=False), t,
                            da.from_array(loose, chunks=(9, -1)))
    ref = hn.make_normalizer("nnn", k=4, device="cpu", check_normalized=False).fit(t, query_bank=loose)
    torch.testing.assert_close(fitted.offsets_, ref.offsets_, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="query_bank rows are not L2-normalised"):
        hd.fit_offsets(hn.make_normalizer("nnn", k=4, device="cpu"), t, da.from_array(loose, chunks=(9, -1)))
    with pytest.raises(ValueError, match="targets rows are not L2-normalised"):
        hd.fit_offsets(hn.make_normalizer("nnn", k=4, device="cpu"), 2.0 * t, da.from_array(qb, chunks=(9, -1)))
    with pytest.raises(ValueError, match="^split_every must be"):
        hd.fit_offsets(hn.make_normalizer("nnn", k=4, device="cpu"), t, da.from_array(qb), split_every=0)


def test_a_bank_the_method_does_not_use_is_not_read(data):
    """NNN uses no target bank: one passed anyway (even one of another dimension) is left alone, as in memory."""
    t, qb = data["targets"], data["query_bank"]
    other = da.from_array(_unit(5, d=3), chunks=(2, -1))
    got = hd.fit_offsets(hn.make_normalizer("nnn", k=4, device="cpu"), t, da.from_array(qb, chunks=(9, -1)), other)
    ref = hn.make_normalizer("nnn", k=4, device="cpu").fit(t, query_bank=qb)
    torch.testing.assert_close(got.offsets_, ref.offsets_, rtol=1e-12, atol=1e-12)
    raw = hd.fit_offsets(hn.make_normalizer("raw"), t, other, other)       # no bank at all: neither is read
    assert torch.equal(raw.offsets_, torch.zeros(23, dtype=torch.float64))


def test_a_float32_bank_is_cast_on_every_pass(data):
    """Sinkhorn passes over the bank ten times: the first pass checks each chunk and casts it to the targets'
    float64, the later ones cast without checking; the fit equals the in-memory one on the same float32 rows."""
    t = data["targets"]
    qb32 = data["query_bank"].astype(np.float32)
    got = hd.fit_offsets(hn.make_normalizer("sn", tau=0.05, device="cpu"), t, da.from_array(qb32, chunks=(9, -1)))
    ref = hn.make_normalizer("sn", tau=0.05, device="cpu").fit(t, query_bank=qb32.astype(np.float64))
    torch.testing.assert_close(got.offsets_, ref.offsets_, rtol=1e-9, atol=1e-12)


# ------------------------------------------------------------------------------------------------ store details
def test_store_reads_and_messages(tmp_path):
    x = _unit(7, d=4, seed=11)
    paths = hd.save_bank_shards([x[:3], x[3:]], tmp_path / "b")
    store = hd.NpyShards(paths)
    np.testing.assert_array_equal(store[()], x)
    np.testing.assert_array_equal(store[3:5, 1:3], x[3:5, 1:3])
    empty = store[5:5]
    assert empty.shape == (0, 4) and empty.dtype == x.dtype
    for key in (4, slice(0, 4, 2), [0, 1]):
        with pytest.raises(TypeError, match="^NpyShards supports contiguous row slices only$"):
            store[key]
    with pytest.raises(ValueError, match="^paths is empty: pass at least one .npy shard$"):
        hd.NpyShards([])
    with pytest.raises(TypeError, match="; got list$"):
        hd._as_bank([[1.0]], "query_bank", 1)
    with pytest.raises(ValueError, match="dimension 5 but the other embeddings have 6: use the same encoder for both$"):
        hd._as_bank(da.ones((4, 5)), "query_bank", 6)
    with pytest.raises(ValueError, match=r"must be 2-D \(rows, d\)"):
        hd._as_bank(np.ones(5), "query_bank", 5)
    assert hd._as_bank(str(tmp_path / "b"), "query_bank", 4).shape == (7, 4)
    assert hd._as_bank(da.from_array(x, chunks=(3, 2)), "query_bank", 4).chunks[1] == (4,)   # two column chunks
    assert hd._as_bank(x, "query_bank", 4, chunk_bytes=1).chunks[0] == (1,) * 7              # at least one row
    assert hd.open_bank(tmp_path / "b", chunk_bytes=1).chunks[0] == (1,) * 7
    os.remove(paths[1])
    with pytest.raises(RuntimeError, match=r"can no longer be read \(.*\): it was removed or moved after open_bank\(\); "
                                           r"open the bank again$"):
        store[4:5]


def test_read_only_chunks_become_tensors_without_a_warning(monkeypatch):
    """Dask hands the tasks read-only arrays; torch warns about those (once per process, so the warning is raised
    here by a stand-in for torch.from_numpy) and ``_tensor`` silences that warning, and only that one."""
    import warnings
    real = torch.from_numpy

    def from_numpy(x):
        if not x.flags.writeable:
            warnings.warn("The given NumPy array is not writable, and PyTorch does not support non-writable tensors.",
                          UserWarning)
        return real(x)
    monkeypatch.setattr(torch, "from_numpy", from_numpy)
    frozen = np.ones((2, 2))
    frozen.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(hd._tensor(frozen), torch.ones(2, 2, dtype=torch.float64))
    monkeypatch.setattr(torch, "from_numpy", lambda x: warnings.warn("another warning", UserWarning) or real(x))
    with pytest.warns(UserWarning, match="another warning"):
        hd._tensor(frozen)


def test_a_replaced_shard_is_named_by_its_inode(tmp_path):
    """Same bytes, same size and modification time, another file (copied over): only the inode differs."""
    import shutil
    x = _unit(6, seed=12)
    paths = hd.save_bank_shards([x], tmp_path / "b")
    store = hd.NpyShards(paths)
    st = os.stat(paths[0])
    copy = tmp_path / "copy.npy"
    shutil.copyfile(paths[0], copy)
    os.replace(copy, paths[0])
    os.utime(paths[0], ns=(st.st_atime_ns, st.st_mtime_ns))
    # (the copy is made while the original exists, so it has another inode on every file system)
    with pytest.raises(RuntimeError, match=r"\(inode differ\): the bank would mix old and new rows\. Do not rewrite "
                                           r"shards during a fit; open the bank again "
                                           r"\(hubnorm\.distributed\.open_bank\) once they are written$"):
        store[0:2]
