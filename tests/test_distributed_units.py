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
