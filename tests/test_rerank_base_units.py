"""Unit checks of hubnorm.rerank.base: ``check_pair_ids`` at its boundaries and by every message; the
``PairScoreCache`` file name (slug and digest), its byte layout read back by hand here (magic, header length, JSON
header, ``.npz`` payload), the atomic write (temporary file named beside the cache, removed when the replace fails,
nothing written when nothing changed) and every way ``_read`` refuses a file, each on its own; ``CrossEncoder``'s
keys, counters, clock, repr and ``score_pairs`` (distinct pairs scored once and in which order, cache hits and
misses mixed, items sharing a key, the shape and finiteness guard) against a dense score matrix.

Mutation run (``--tests tests/test_rerank_blip.py tests/test_rerank_pipeline.py tests/test_rerank_pipeline_units.py``
[+ this file]): 280 -> 359 of 381 killed (73% -> 94%; the baseline also had 1 mutant reached by no test). Survivors
kept as equivalent (nothing a caller can observe changes):

* ``check_pair_ids``: ``astype(np.int64, copy=None)`` (q and t): numpy reads the falsy ``None`` as ``copy=False``
  (the no-copy of int64 input is checked above);
* ``PairScoreCache.__init__`` / ``flush``: ``self._dirty = None`` (twice): only ever read as ``not self._dirty``;
* ``flush``: ``np.array(keys, dtype=str)`` with the dtype dropped or ``None`` (query and target keys, 4 mutants):
  the keys are Python strings, so numpy infers the same ``<U`` dtype (an empty key list is read back as no pairs
  either way); the scores' ``dtype=np.float64`` dropped or ``None`` (2): the values are Python floats;
* ``flush``: ``struct.pack("<i", ...)``: the same 4 bytes for every header shorter than 2 GiB (the unsigned read
  is checked with a length of 0xFFFFFFFF);
* ``_read``: ``np.load(..., allow_pickle=None)`` or the argument dropped: numpy's default is ``False`` and it reads
  ``None`` as false (``allow_pickle=True`` is killed by an object array);
* ``score_pairs``: ``np.empty(q.size, dtype=None)`` or dropped (numpy's default dtype is float64); ``miss`` /
  ``hit`` built without ``dtype=np.int64`` (4): non-empty lists of Python ints are int64 anyway, and an empty
  (float) one is skipped by the ``.size`` checks; ``.reshape(-2)`` of the reply and of ``inverse`` (numpy 2.4 reads
  any negative size as the unknown one) and ``inverse.reshape(None)`` (``inverse`` is already 1-D).
"""

import hashlib
import io
import json
import re
import struct

import numpy as np
import pytest

from hubnorm.rerank import base
from hubnorm.rerank.base import CacheCorruptError, CrossEncoder, PairScoreCache, check_pair_ids


class DenseCE(CrossEncoder):
    """Scores looked up in a matrix; every call of ``_score_uncached`` is recorded."""

    model_id = "dense-ce"

    def __init__(self, S, query_keys=None, target_keys=None, cache_dir=None, reply=None):
        self.S = np.asarray(S, dtype=np.float64)
        self.calls = []
        self.reply = reply
        qk = [f"q{i}" for i in range(self.S.shape[0])] if query_keys is None else query_keys
        tk = [f"t{j}" for j in range(self.S.shape[1])] if target_keys is None else target_keys
        super().__init__(qk, tk, cache_dir=cache_dir)

    def _score_uncached(self, q, t):
        self.calls.append((q.tolist(), t.tolist()))
        return self.S[q, t] if self.reply is None else self.reply(q, t)


def _S(m=4, n=7):
    return np.arange(m * n, dtype=np.float64).reshape(m, n) / 8.0 - 1.0


# ------------------------------------------------------------------------------------------- check_pair_ids
def test_check_pair_ids_returns_int64_and_allows_both_ends():
    q, t = check_pair_ids(np.array([0, 2], dtype=np.int32), [4, 0], 3, 5)
    assert q.dtype == np.int64 and t.dtype == np.int64 and q.tolist() == [0, 2] and t.tolist() == [4, 0]
    a = np.array([1, 0], dtype=np.int64)
    q, t = check_pair_ids(a, a, 2, 2)                                  # int64 input is not copied
    assert q is a and t is a
    q, t = check_pair_ids(np.array([]), np.array([]), 0, 0)        # no pairs: any dtype, no range to check
    assert q.dtype == np.int64 and t.dtype == np.int64 and q.size == 0 and t.size == 0


def test_check_pair_ids_shape_and_dtype_guards():
    with pytest.raises(ValueError, match=r"^query_ids must be 1-D \(one entry per pair\); got shape \(2, 1\)$"):
        check_pair_ids(np.zeros((2, 1), dtype=int), [0, 1], 3, 3)
    with pytest.raises(ValueError, match=r"^target_ids must be 1-D \(one entry per pair\); got shape \(\)$"):
        check_pair_ids([0], 0, 3, 3)
    with pytest.raises(TypeError, match=r"^query_ids must hold integer indices; got dtype float64$"):
        check_pair_ids([0.0], [0], 3, 3)
    with pytest.raises(TypeError, match=r"^target_ids must hold integer indices; got dtype <U1$"):
        check_pair_ids([0], ["a"], 3, 3)
    with pytest.raises(ValueError, match=r"^query_ids and target_ids must have the same length \(one pair per "
                                         r"position\); got 2 and 1$"):
        check_pair_ids([0, 1], [0], 3, 3)


def test_check_pair_ids_range_guards():
    with pytest.raises(ValueError, match=r"^query_ids must lie in \[0, 3\); got range \[-1, 1\]$"):
        check_pair_ids([1, -1], [0, 0], 3, 5)
    with pytest.raises(ValueError, match=r"^query_ids must lie in \[0, 3\); got range \[0, 3\]$"):
        check_pair_ids([3, 0], [0, 0], 3, 5)
    with pytest.raises(ValueError, match=r"^target_ids must lie in \[0, 5\); got range \[-2, 0\]$"):
        check_pair_ids([0, 0], [0, -2], 3, 5)
    with pytest.raises(ValueError, match=r"^target_ids must lie in \[0, 5\); got range \[1, 5\]$"):
        check_pair_ids([0, 0], [5, 1], 3, 5)


# ---------------------------------------------------------------------------------------- PairScoreCache
def test_cache_file_name_is_a_slug_and_a_digest(tmp_path):
    mid = "Org/Model name:V1 (beta)"
    c = PairScoreCache(tmp_path, mid)
    assert c.directory == tmp_path and c.model_id == mid
    assert c.path == tmp_path / f"Org_Model_name_V1_beta_-{hashlib.sha1(mid.encode()).hexdigest()[:12]}.pairs"
    long = "a.b-c_" * 20                                               # allowed characters kept, cut at 60
    assert PairScoreCache(str(tmp_path), long).path.name == long[:60] + "-" + hashlib.sha1(long.encode()).hexdigest()[
        :12] + ".pairs"
    for bad in ("", None, 3):
        with pytest.raises(ValueError, match=r"^model_id must be a non-empty string$"):
            PairScoreCache(tmp_path, bad)


def test_cache_in_memory_and_nothing_written_until_a_change(tmp_path):
    d = tmp_path / "a" / "b"
    c = PairScoreCache(d, "m")
    assert len(c) == 0 and c.get("x", "y") is None
    c.flush()                                                          # nothing changed: no folder, no file
    assert not d.exists()
    c.put_many(["x", "x"], ["y", "z"], [np.float32(0.5), 2])
    assert len(c) == 2 and c.get("x", "z") == 2.0 and type(c.get("x", "z")) is float
    assert c.get("y", "x") is None
    c.flush()                                                          # parent folders made
    assert c.path.is_file()
    c.path.unlink()
    c.flush()                                                          # written already: not again
    assert not c.path.exists()
    c.put_many([], [], [])                                             # a change, even an empty one, is written
    c.flush()
    assert PairScoreCache(d, "m").get("x", "y") == 0.5


def test_cache_file_layout_read_by_hand(tmp_path):
    c = PairScoreCache(tmp_path, "model-1")
    c.put_many(["a", "b", "a"], ["x", "y", "y"], [0.25, -1.5, 3.0])
    c.flush()
    data = c.path.read_bytes()
    assert data[:8] == b"HNPAIRS1"
    (hlen,) = struct.unpack("<I", data[8:12])
    header = json.loads(data[12:12 + hlen].decode())
    payload = data[12 + hlen:]
    assert header == {"model_id": "model-1", "n_pairs": 3, "format": 1,
                      "sha256": hashlib.sha256(payload).hexdigest()}
    with np.load(io.BytesIO(payload), allow_pickle=False) as z:
        assert sorted(z.files) == ["qkeys", "scores", "tkeys"]
        assert z["qkeys"].tolist() == ["a", "b", "a"] and z["tkeys"].tolist() == ["x", "y", "y"]
        assert z["scores"].dtype == np.float64 and z["scores"].tolist() == [0.25, -1.5, 3.0]
    again = PairScoreCache(tmp_path, "model-1")
    assert len(again) == 3 and again.get("a", "y") == 3.0 and again.get("b", "y") == -1.5
    assert all(type(k) is str for pair in again._scores for k in pair)
    assert all(type(v) is float for v in again._scores.values())
    assert not list(tmp_path.glob("*.tmp"))


def test_cache_write_goes_through_a_temporary_file_that_a_failed_replace_removes(tmp_path, monkeypatch):
    c = PairScoreCache(tmp_path, "m")
    c.put_many(["a"], ["b"], [1.0])
    seen = []
    from hubnorm.data import cache as cache_io   # the one atomic writer of the library

    real_replace = cache_io.os.replace

    def replace(src, dst):
        seen.append((src, dst, open(src, "rb").read()[:8]))
        real_replace(src, dst)

    monkeypatch.setattr(cache_io.os, "replace", replace)
    c.flush()
    (src, dst, head), = seen
    src = type(tmp_path)(src)
    assert dst == c.path and head == b"HNPAIRS1" and src.parent == tmp_path
    assert src.name.startswith("." + c.path.name + ".") and src.name.endswith(".tmp") and not src.exists()

    def fail(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(cache_io.os, "replace", fail)
    c.put_many(["a"], ["c"], [2.0])
    with pytest.raises(OSError, match="^disk full$"):
        c.flush()
    assert sorted(p.name for p in tmp_path.iterdir()) == [c.path.name]  # the temporary file is gone
    assert c._dirty                                                     # still to be written
    monkeypatch.setattr(cache_io.os, "replace", real_replace)
    c.flush()
    assert PairScoreCache(tmp_path, "m").get("a", "c") == 2.0


def _npz(**arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _write(path, payload, model_id="m", n_pairs=1, sha=None, header=None):
    if header is None:
        header = {"model_id": model_id, "n_pairs": n_pairs, "format": 1,
                  "sha256": hashlib.sha256(payload).hexdigest() if sha is None else sha}
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(b"HNPAIRS1" + struct.pack("<I", len(raw)) + raw + payload)


def _good_payload(n=1, scores=None):
    return _npz(qkeys=np.array(["a"] * n), tkeys=np.array(["b"] * n),
                scores=np.zeros(n) if scores is None else np.asarray(scores, dtype=np.float64))


def _refused(tmp_path, why):
    p = tmp_path / f"m-{hashlib.sha1(b'm').hexdigest()[:12]}.pairs"
    msg = f"pair-score cache {p} is corrupt ({why}); delete it to recompute the scores"
    return pytest.raises(CacheCorruptError, match="^" + re.escape(msg) + "$")


def test_read_refuses_each_damage_by_its_message(tmp_path):
    p = tmp_path / f"m-{hashlib.sha1(b'm').hexdigest()[:12]}.pairs"
    assert PairScoreCache(tmp_path, "m").path == p
    magic = "wrong magic bytes: not a hubnorm pair cache or truncated"
    for raw in (b"", b"HNPAIRS1\x00\x00\x00", b"HNPAIRS2\x00\x00\x00\x00{}"):
        p.write_bytes(raw)
        with _refused(tmp_path, magic):
            PairScoreCache(tmp_path, "m")
    p.write_bytes(b"HNPAIRS1\x00\x00\x00\x00")                         # 12 bytes: magic and length, empty header
    with _refused(tmp_path, "unreadable header"):
        PairScoreCache(tmp_path, "m")
    _write(p, _good_payload(), header=b"\xff\xfe")                     # not UTF-8
    with _refused(tmp_path, "unreadable header"):
        PairScoreCache(tmp_path, "m")
    _write(p, _good_payload(), header=b"{not json")
    with _refused(tmp_path, "unreadable header"):
        PairScoreCache(tmp_path, "m")
    p.write_bytes(b"HNPAIRS1\xff\xff\xff\xff" + json.dumps({"model_id": "other"}).encode())
    with _refused(tmp_path, "it belongs to model 'other', not 'm'"):  # an unsigned length: the rest of the file
        PairScoreCache(tmp_path, "m")
    _write(p, _good_payload(), model_id="other")
    with _refused(tmp_path, "it belongs to model 'other', not 'm'"):
        PairScoreCache(tmp_path, "m")
    _write(p, _good_payload(), header={"n_pairs": 1})
    with _refused(tmp_path, "it belongs to model None, not 'm'"):
        PairScoreCache(tmp_path, "m")
    _write(p, _good_payload(), sha="0" * 64)
    with _refused(tmp_path, "checksum mismatch"):
        PairScoreCache(tmp_path, "m")


def test_read_refuses_an_unreadable_or_inconsistent_payload(tmp_path):
    p = tmp_path / f"m-{hashlib.sha1(b'm').hexdigest()[:12]}.pairs"
    _write(p, b"not an npz")
    with pytest.raises(CacheCorruptError, match=r"\(payload unreadable: .+\); delete it"):
        PairScoreCache(tmp_path, "m")
    _write(p, _npz(qkeys=np.array(["a"]), scores=np.zeros(1)))        # no target keys
    with pytest.raises(CacheCorruptError, match=r"\(payload unreadable: .*tkeys.*\); delete it"):
        PairScoreCache(tmp_path, "m")
    objects = np.array(["a"], dtype=object)                             # needs pickle: refused
    _write(p, _npz(qkeys=objects, tkeys=objects, scores=np.zeros(1)))
    with pytest.raises(CacheCorruptError, match=r"\(payload unreadable: .*pickle.*\); delete it"):
        PairScoreCache(tmp_path, "m")
    for payload, n in ((_good_payload(2), 3), (_good_payload(2), 1), (_good_payload(2), None),
                       (_npz(qkeys=np.array(["a", "b"]), tkeys=np.array(["b"]), scores=np.zeros(2)), 2),
                       (_npz(qkeys=np.array(["a"]), tkeys=np.array(["b"]), scores=np.zeros(2)), 1),
                       (_npz(qkeys=np.array(["a"]), tkeys=np.array(["b", "c"]), scores=np.zeros(1)), 1)):
        _write(p, payload, n_pairs=n)
        with _refused(tmp_path, "array lengths disagree with the header"):
            PairScoreCache(tmp_path, "m")
    for bad in (np.nan, np.inf, -np.inf):
        _write(p, _good_payload(2, [0.5, bad]), n_pairs=2)
        with _refused(tmp_path, "non-finite scores"):
            PairScoreCache(tmp_path, "m")
    _write(p, _npz(qkeys=np.array(["a", "a"]), tkeys=np.array(["b", "c"]), scores=np.array([0.5, -2.0])), n_pairs=2)
    c = PairScoreCache(tmp_path, "m")
    assert c._scores == {("a", "b"): 0.5, ("a", "c"): -2.0} and not c._dirty


# ------------------------------------------------------------------------------------------- CrossEncoder
def test_cross_encoder_attributes_counters_and_repr(tmp_path):
    assert (CrossEncoder.model_id, CrossEncoder.kind, CrossEncoder.cost_per_pair_s) == ("cross-encoder", "real", None)
    ce = DenseCE(np.zeros((2, 3)), query_keys=[1, 2], target_keys=["a", 3, None])
    assert ce.query_keys == ["1", "2"] and ce.target_keys == ["a", "3", "None"]
    assert ce.cache is None and (ce.n_queries, ce.n_targets) == (2, 3)
    assert (ce.n_pairs_requested, ce.n_pairs_computed, ce.n_model_calls) == (0, 0, 0)
    assert ce.compute_seconds == 0.0 and type(ce.compute_seconds) is float
    assert repr(ce) == "DenseCE(model_id='dense-ce', 2 queries x 3 targets)"
    cached = DenseCE(np.zeros((2, 3)), cache_dir=tmp_path / "c")
    assert isinstance(cached.cache, PairScoreCache) and cached.cache.model_id == "dense-ce"
    assert cached.cache.directory == tmp_path / "c"
    with pytest.raises(TypeError):
        CrossEncoder(["a"], ["b"])                                     # abstract: _score_uncached


def test_score_pairs_without_cache_scores_each_distinct_pair_once_in_code_order():
    S = _S()
    ce = DenseCE(S)
    q = np.array([3, 0, 3, 1, 0, 3])
    t = np.array([6, 5, 6, 0, 5, 2])
    out = ce.score_pairs(q, t)
    assert out.dtype == np.float64 and out.tolist() == S[q, t].tolist()
    assert ce.calls == [([0, 1, 3, 3], [5, 0, 2, 6])]                   # sorted by (query, target)
    assert (ce.n_pairs_requested, ce.n_pairs_computed, ce.n_model_calls) == (6, 4, 1)
    ce.score_pairs([2], [1])
    assert (ce.n_pairs_requested, ce.n_pairs_computed, ce.n_model_calls) == (7, 5, 2)
    empty = ce.score_pairs([], [])
    assert empty.shape == (0,) and empty.dtype == np.float64
    assert (ce.n_pairs_requested, ce.n_pairs_computed, ce.n_model_calls) == (7, 5, 2) and len(ce.calls) == 2


def test_score_pairs_reads_any_array_like_reply_as_float64():
    S = _S(2, 3)
    ce = DenseCE(S, reply=lambda q, t: S[q, t].astype(np.float32)[:, None].tolist())   # a column of lists
    out = ce.score_pairs([1, 0], [2, 0])
    assert out.dtype == np.float64 and out.tolist() == [S[1, 2], S[0, 0]]


def test_score_pairs_refuses_a_missing_score_in_the_reply():
    ce = DenseCE(_S(), reply=lambda q, t: [0.5, None, 1.0])           # None reads as NaN: not a finite value
    with pytest.raises(RuntimeError, match=r"^DenseCE\._score_uncached returned \(3,\) scores \(need 3 finite "
                                           r"values\)$"):
        ce.score_pairs([0, 1, 2], [0, 0, 0])


def test_score_pairs_times_the_model_calls(monkeypatch):
    clock = iter([10.0, 12.5, 20.0, 20.25])

    class FakeTime:
        @staticmethod
        def perf_counter():
            return next(clock)

    monkeypatch.setattr(base, "time", FakeTime)
    ce = DenseCE(_S())
    ce.score_pairs([0], [1])
    assert ce.compute_seconds == 2.5
    ce.score_pairs([1], [1])
    assert ce.compute_seconds == 2.75


def test_score_pairs_refuses_a_reply_of_the_wrong_shape_or_not_finite():
    ce = DenseCE(_S(), reply=lambda q, t: np.zeros(len(q) - 1))
    with pytest.raises(RuntimeError, match=r"^DenseCE\._score_uncached returned \(2,\) scores \(need 3 finite "
                                           r"values\)$"):
        ce.score_pairs([0, 1, 2], [0, 0, 0])
    assert ce.n_pairs_computed == 0 and ce.n_model_calls == 1
    for bad in (np.nan, np.inf):
        ce = DenseCE(_S(), reply=lambda q, t: np.where(q == 1, bad, 0.0))
        with pytest.raises(RuntimeError, match=r"^DenseCE\._score_uncached returned \(3,\) scores \(need 3 finite "
                                               r"values\)$"):
            ce.score_pairs([0, 1, 2], [0, 0, 0])


def test_score_pairs_with_cache_mixes_hits_and_misses(tmp_path):
    S = _S()
    ce = DenseCE(S, cache_dir=tmp_path)
    ce.score_pairs([0, 2], [1, 3])
    assert ce.calls == [([0, 2], [1, 3])]
    again = DenseCE(S, cache_dir=tmp_path)                             # a new instance reads the flushed file
    assert len(again.cache) == 2
    q, t = np.array([2, 1, 0, 1, 3]), np.array([3, 4, 1, 4, 6])
    out = again.score_pairs(q, t)
    assert out.tolist() == S[q, t].tolist()
    assert again.calls == [([1, 3], [4, 6])]                            # only the distinct misses
    assert (again.n_pairs_requested, again.n_pairs_computed, again.n_model_calls) == (5, 2, 1)
    all_hits = again.score_pairs(q[::-1], t[::-1])
    assert all_hits.tolist() == S[q, t][::-1].tolist() and again.n_model_calls == 1
    assert again.n_pairs_requested == 10
    third = DenseCE(S * 0, cache_dir=tmp_path)
    assert len(third.cache) == 4 and third.cache.get("q3", "t6") == S[3, 6]


def test_items_sharing_a_key_share_cached_scores(tmp_path):
    S = _S(3, 2)
    ce = DenseCE(S, query_keys=["a", "a", "b"], target_keys=["x", "y"], cache_dir=tmp_path)
    first = ce.score_pairs([0], [1])
    out = ce.score_pairs([1, 2], [1, 0])                               # query 1 has query 0's key: a cache hit
    assert out.tolist() == [first[0], S[2, 0]] and ce.calls == [([0], [1]), ([2], [0])]
