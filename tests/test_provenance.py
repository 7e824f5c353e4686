"""hubnorm.provenance: what a fitted normalizer's banks were, and the no-leak certificate.

Every expected number here is built by hand: the content hash and the row digests against hashlib on the float32
bytes, the near-duplicate threshold against arccos by hand, the planted leaks at known rows and known cosines, and
the saved certificate re-read from its file alone.
"""

import hashlib
import json
import math
import os

import numpy as np
import pytest
import torch

import hubnorm as hn
from hubnorm import provenance as pv

D = 64


def _unit(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _at_cosine(x, c, rng):
    """Unit rows at cosine exactly ``c`` to the rows of ``x`` (x rotated towards a random orthogonal direction)."""
    u = rng.standard_normal(x.shape)
    u -= (u * x).sum(1, keepdims=True) * x
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    return (c * x + math.sqrt(1 - c * c) * u).astype(np.float32)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    images = _unit(rng.standard_normal((120, D)))
    captions = _unit(images.repeat(2, 0) + 0.08 * rng.standard_normal((240, D)))
    return {"images": images, "captions": captions, "c2i": np.arange(240) // 2,
            "caption_bank": _unit(rng.standard_normal((150, D))), "image_bank": _unit(rng.standard_normal((90, D))),
            "rng": rng}


def _task(data, caption_bank=None, image_bank=None, direction="t2i"):
    return hn.build_tasks(data["images"], data["captions"], data["c2i"],
                          caption_bank=data["caption_bank"] if caption_bank is None else caption_bank,
                          image_bank=data["image_bank"] if image_bank is None else image_bank,
                          directions=[direction])[direction]


def test_fingerprint_hashes_are_those_of_the_float32_rows(data):
    x = data["caption_bank"]
    fp = pv.fingerprint(x.astype(np.float64), "bank")
    whole = hashlib.sha256(f"{x.shape[0]}x{x.shape[1]}:float32".encode() + x.tobytes()).hexdigest()
    assert fp.sha256 == whole and (fp.rows, fp.dim, fp.kind, fp.bits) == (150, D, "embeddings", 512)
    assert fp.digests[3].tobytes() == hashlib.blake2b(x[3].tobytes(), digest_size=16).digest()
    assert fp.summary() == {"name": "bank", "kind": "embeddings", "rows": 150, "sha256": whole[:12]}
    # the sign sketch: bit b of row i is [x_i . r_b > 0] for the seeded directions (bit order of np.packbits)
    r = np.random.default_rng([0, D, 512]).standard_normal((D, 512), dtype=np.float32).astype(np.float64)
    bits = np.unpackbits(fp.signatures, axis=1)
    agree = (bits == (x.astype(np.float64) @ r > 0)).mean()
    assert agree > 0.999   # float32 products may flip a sign within rounding of 0, nothing more
    # -0.0 and 0.0 are the same row
    z = x[:2].copy()
    z[0, 0], z[1, 0] = 0.0, -0.0
    fz = pv.fingerprint(z, "z")
    z[1, 0] = 0.0
    assert pv.fingerprint(z[1:], "z").digests[0].tobytes() == fz.digests[1].tobytes()
    assert pv.fingerprint(z, "z").sha256 == fz.sha256   # the whole-set hash too


def test_fingerprint_of_read_only_rows_and_negative_zeros_in_some_blocks(data):
    """Rows hashed where they lie (no copy): a read-only array gives the same fingerprint as a writable copy,
    without a warning and untouched; -0.0 in one block of many hashes as 0.0 there and nowhere else."""
    import warnings

    x = np.array(data["captions"][:64], dtype=np.float32)
    x[5, 0] = 0.0
    want = pv.fingerprint(x.copy(), "w", block_bytes=4096)
    pv._CACHE.clear()
    ro = x.copy()
    ro[5, 0] = -0.0
    ro.setflags(write=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = pv.fingerprint(ro, "r", block_bytes=4096)
    assert got.sha256 == want.sha256 and np.array_equal(got.digests, want.digests)
    assert np.array_equal(got.signatures, want.signatures)
    assert np.signbit(ro[5, 0]) and not ro.flags.writeable   # the caller's rows as they were
    other = x.copy()
    other[40, -1] = 1.0                                      # a change in another block (its last value)
    assert pv.fingerprint(other, "o", block_bytes=4096).sha256 != want.sha256


def test_fingerprint_is_the_same_in_any_block_size_and_from_torch(data):
    x = data["captions"]
    one = pv.fingerprint(x, "a", bits=256, seed=3)
    pv._CACHE.clear()
    small = pv.fingerprint(torch.from_numpy(x), "b", bits=256, seed=3, block_bytes=4096)
    assert small.name == "b" and small.sha256 == one.sha256
    assert np.array_equal(small.digests, one.digests) and np.array_equal(small.signatures, one.signatures)
    assert pv.fingerprint(x, "c", bits=256, seed=4).signatures.tobytes() != one.signatures.tobytes()


def test_near_threshold_by_hand():
    assert pv.near_threshold(512) == math.floor(512 * math.acos(0.98) / math.pi) == 32
    assert pv.near_threshold(1024, 0.9) == math.floor(1024 * math.acos(0.9) / math.pi)


def test_a_clean_fit_is_certified_leak_free(data):
    task = _task(data)
    nnn = task.fit(hn.NearestNeighborNormalization(k=8, alpha=0.5))
    assert set(nnn.provenance_) == {"query_bank"}      # NNN uses no target bank: none is recorded
    assert nnn.provenance_["query_bank"].rows == 150
    out = hn.evaluate(nnn, task, certificate=True)
    cert = out["certificate"]
    assert cert.leak_free and cert.verdict == "no test row in any bank"
    assert [(f["bank"], f["test"], f["exact"], f["near"]) for f in cert.findings] == [("query_bank", "queries", 0, 0)]
    assert "certificate" not in hn.evaluate(nnn, task)
    assert {k: v for k, v in out.items() if k != "certificate"} == hn.evaluate(nnn, task)


def test_planted_exact_and_near_duplicate_leaks_are_found_and_close_rows_are_not(data):
    rng = np.random.default_rng(11)
    caps = data["captions"]
    bank = data["caption_bank"].copy()
    bank[20:23] = caps[[5, 40, 41]]                                   # exact copies
    bank[30:34] = _at_cosine(caps[[60, 61, 62, 63]], 0.997, rng)        # near duplicates
    bank[40:44] = _at_cosine(caps[[80, 81, 82, 83]], 0.93, rng)         # close, not duplicates
    task = _task(data, caption_bank=bank)
    cert = hn.evaluate(task.fit(hn.InvertedSoftmax()), task, certificate=True)["certificate"]
    (f,) = cert.findings
    assert (f["exact"], f["near"], f["test_rows"], f["bank_rows"]) == (3, 4, 240, 150)
    assert f["exact_examples"] == [[5, 20], [40, 21], [41, 22]]
    assert f["near_examples"] == [[60, 30], [61, 31], [62, 32], [63, 33]]
    assert not cert.leak_free
    assert cert.verdict == ("QUERY-AWARE: 3 of 240 test queries exactly and 4 more as near duplicates "
                            "(cosine >= 0.98) in the query_bank")


def test_a_query_aware_fit_is_marked(data):
    task = _task(data)
    cert = hn.evaluate(task.fit(hn.InvertedSoftmax(), query_aware=True), task, certificate=True)["certificate"]
    assert cert.findings[0]["exact"] == 240 and cert.verdict.startswith("QUERY-AWARE: 240 of 240 test queries")


def test_the_gallery_in_the_target_bank_is_found(data):
    images = data["image_bank"].copy()
    images[:10] = data["images"][100:110]
    task = _task(data, image_bank=images)
    cert = hn.evaluate(task.fit(hn.DualInvertedSoftmax()), task, certificate=True)["certificate"]
    by = {f["bank"]: f for f in cert.findings}
    assert set(by) == {"query_bank", "target_bank"}
    assert (by["query_bank"]["exact"], by["target_bank"]["exact"], by["target_bank"]["test"]) == (0, 10, "targets")
    assert by["target_bank"]["exact_examples"][0] == [100, 0]


def test_a_bank_changed_in_place_is_fingerprinted_again(data):
    bank = data["caption_bank"].copy()
    task = _task(data, caption_bank=bank)
    first = task.fit(hn.InvertedSoftmax()).provenance_["query_bank"].sha256
    bank[77] = data["captions"][9]      # the same array, one row changed: the content-keyed cache cannot go stale
    task = _task(data, caption_bank=bank)
    norm = task.fit(hn.InvertedSoftmax())
    assert norm.provenance_["query_bank"].sha256 != first
    assert hn.evaluate(norm, task, certificate=True)["certificate"].findings[0]["exact_examples"] == [[9, 77]]


def test_saved_certificate_is_checked_from_the_file_alone(data, tmp_path):
    bank = data["caption_bank"].copy()
    bank[0] = data["captions"][17]
    task = _task(data, caption_bank=bank)
    cert = hn.evaluate(task.fit(hn.InvertedSoftmax()), task, certificate=True)["certificate"]
    path = cert.save(tmp_path / "cert.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cert.json"]     # no temporary file left behind
    back = pv.check_certificate(path)
    assert back.verdict == cert.verdict and back.findings == cert.findings and back.method == cert.method
    body = json.loads(path.read_text())
    assert body["leak_free"] is False and body["format"] == "hubnorm-certificate/1"

    def write(b, rehash=True):
        if rehash:
            b["sha256"] = pv._body_hash(b)
        path.write_text(json.dumps(b))

    edited = dict(body, verdict="no test row in any bank")
    write(edited, rehash=False)
    with pytest.raises(ValueError, match="does not match its sha256"):
        pv.check_certificate(path)
    write(edited)                                         # re-hashed, but the verdict does not follow
    with pytest.raises(ValueError, match="do not follow from its fingerprints"):
        pv.check_certificate(path)
    hidden = json.loads(json.dumps(body))
    hidden["findings"][0].update(exact=0, exact_examples=[])
    write(hidden)
    with pytest.raises(ValueError, match="do not follow"):
        pv.check_certificate(path)
    dropped = dict(body, findings=[])
    write(dropped)
    with pytest.raises(ValueError, match="do not follow"):
        pv.check_certificate(path)
    short = json.loads(json.dumps(body))
    short["banks"]["query_bank"]["rows"] = 151
    write(short)
    with pytest.raises(ValueError, match="151 rows need"):
        pv.check_certificate(path)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="cannot be read as JSON"):
        pv.check_certificate(path)
    path.write_text(json.dumps({"format": "other"}))
    with pytest.raises(ValueError, match="not a hubnorm-certificate/1 file"):
        pv.check_certificate(path)


def test_clean_certificate_round_trip(data, tmp_path):
    task = _task(data)
    cert = hn.evaluate(task.fit(hn.DualInvertedSoftmax()), task, certificate=True)["certificate"]
    back = pv.check_certificate(cert.save(tmp_path / "c.json"))
    assert back.leak_free and back.verdict == "no test row in any bank" and len(back.findings) == 2


def test_score_matrices_are_certified_by_their_score_rows(data):
    caps, images = data["captions"], data["images"]
    pos = hn.Positives.from_labels(data["c2i"], 120)
    clean = hn.RetrievalTask(scores=hn.matrices_from_embeddings(caps, images, data["caption_bank"], data["image_bank"]),
                             positives=pos, direction="t2i", check=False)
    out = hn.evaluate(clean.fit(hn.InvertedSoftmax()), clean, certificate=True)
    assert out["certificate"].leak_free and out["certificate"].banks["query_bank"].kind == "scores"
    assert out["certificate"].not_compared == []
    assert hn.evaluate(clean.fit(hn.InvertedSoftmax(), query_aware=True), clean,
                       certificate=True)["certificate"].findings[0]["exact"] == 240
    rng = np.random.default_rng(5)
    bank = data["caption_bank"].copy()
    bank[3:5] = caps[[7, 8]]
    bank[9] = _at_cosine(caps[[70]], 0.999, rng)[0]
    leaky = hn.RetrievalTask(scores=hn.matrices_from_embeddings(caps, images, bank, data["image_bank"]), positives=pos,
                             direction="t2i", check=False)
    (f,) = hn.evaluate(leaky.fit(hn.InvertedSoftmax()), leaky, certificate=True)["certificate"].findings
    assert (f["exact"], f["near"], f["exact_examples"], f["near_examples"]) == (2, 1, [[7, 3], [8, 4]], [[70, 9]])
    dual = hn.evaluate(clean.fit(hn.DualInvertedSoftmax()), clean, certificate=True)["certificate"]
    assert dual.not_compared == ["target_bank: a score-matrix fit records the query bank's score rows only"]


def test_a_dask_bank_is_fingerprinted_block_by_block_and_a_fit_without_a_record_is_refused(data):
    pytest.importorskip("dask")
    import dask.array as da

    bank = data["caption_bank"].copy()
    bank[60] = data["captions"][33]
    task = _task(data, caption_bank=bank)
    norm = hn.InvertedSoftmax().fit(task.targets, da.from_array(bank, chunks=(40, -1)))
    local = task.fit(hn.InvertedSoftmax())
    got, want = norm.provenance_["query_bank"], local.provenance_["query_bank"]
    assert got.sha256 == want.sha256
    assert np.array_equal(got.digests, want.digests) and np.array_equal(got.signatures, want.signatures)
    assert hn.evaluate(norm, task, certificate=True)["certificate"].findings[0]["exact_examples"] == [[33, 60]]
    norm.provenance_ = None        # a normalizer without a record (fitted by a sweep, or by hand)
    with pytest.raises(ValueError, match="no record of its banks"):
        hn.evaluate(norm, task, certificate=True)


def test_bad_input_is_refused_with_its_name(data):
    x = data["caption_bank"]
    with pytest.raises(TypeError, match="bank must be a numpy array"):
        pv.fingerprint(x.tolist(), "bank")
    with pytest.raises(TypeError, match="bank must hold floating-point"):
        pv.fingerprint(x.astype(np.int32), "bank")
    with pytest.raises(TypeError, match="bank must hold floating-point"):
        pv.fingerprint(torch.zeros(3, 2, dtype=torch.int64), "bank")
    with pytest.raises(ValueError, match="bank must be 2-D with at least one row"):
        pv.fingerprint(x[:0], "bank")
    with pytest.raises(ValueError, match="bank must be 2-D"):
        pv.fingerprint(x[0], "bank")
    with pytest.raises(ValueError, match="bits must be a positive multiple of 64"):
        pv.fingerprint(x, "bank", bits=100)
    with pytest.raises(ValueError, match="kind must be"):
        pv.fingerprint(x, "bank", kind="images")
    bad = x.copy()
    bad[4, 1] = np.nan
    with pytest.raises(ValueError, match=r"bank holds non-finite values \(rows 0-149\)"):
        pv.fingerprint(bad, "bank")
    a, b = pv.fingerprint(x, "a"), pv.fingerprint(x[:, :32].copy(), "b")
    with pytest.raises(ValueError, match="not comparable"):
        pv.compare(a, b)
    with pytest.raises(ValueError, match="near_cosine must be in"):
        pv.compare(a, a, near_cosine=1.0)
    task = _task(data)
    norm = task.fit(hn.InvertedSoftmax())
    with pytest.raises(TypeError, match="certificate must be True or False"):
        hn.evaluate(norm, task, certificate="yes")
    pos = hn.Positives.from_labels(data["c2i"], 120)
    st = hn.RetrievalTask(scores=hn.matrices_from_embeddings(data["captions"], data["images"]), positives=pos,
                          direction="t2i", check=False)
    with pytest.raises(ValueError, match="use no bank"):
        hn.evaluate(None, st, certificate=True)


# ------------------------------------------------------------------ from the module's mutation survivors
def test_fingerprint_names_kinds_and_the_content_cache(data):
    pv._CACHE.clear()
    x = data["caption_bank"]
    a = pv.fingerprint(x, "a")
    b = pv.fingerprint(x.copy(), "b")                 # same content: the sketch is reused, under the new name
    assert (a.name, b.name) == ("a", "b") and b.signatures is a.signatures and b.digests is a.digests
    assert b.sha256 == a.sha256 and b.bits == 512 and b.kind == "embeddings"
    firsts = [pv.fingerprint(x + np.float32(i + 1), f"x{i}") for i in range(pv._CACHE_SIZE)]   # evicts `a`
    assert len(pv._CACHE) == pv._CACHE_SIZE
    assert pv.fingerprint(x, "c").signatures is not a.signatures            # the oldest entry went first
    assert pv.fingerprint(x + np.float32(pv._CACHE_SIZE), "d").signatures is firsts[-1].signatures


def test_fingerprint_reads_blocks_of_the_budget_it_is_given(data, monkeypatch):
    seen = []
    rows = pv.block_rows
    monkeypatch.setattr(pv, "block_rows", lambda *a: seen.append(a) or rows(*a))
    pv._CACHE.clear()
    pv.fingerprint(data["caption_bank"], "bank", bits=128, block_bytes=5000)
    assert seen == [(D + 128, 8, 5000)]
    seen.clear()
    task = _task(data)
    task.fit(hn.InvertedSoftmax(block_bytes=7000))
    assert (D + 512, 8, 7000) in seen


def test_score_rows_are_sketched_after_centring_and_zero_projections_are_zero_bits():
    rng = np.random.default_rng(3)
    row = rng.standard_normal((1, 40))
    shifted = pv.fingerprint(np.vstack([row, row + 0.3]), "s", kind="scores")
    assert np.array_equal(shifted.signatures[0], shifted.signatures[1])       # the same shape of score row
    assert not np.array_equal(shifted.digests[0], shifted.digests[1])         # not the same row
    plain = pv.fingerprint(np.vstack([row, row + 0.3]), "e")
    assert not np.array_equal(plain.signatures[0], plain.signatures[1])
    zero = pv.fingerprint(np.zeros((1, 8)), "z", bits=64)
    assert not zero.signatures.any()


def test_bits_must_be_a_positive_multiple_of_64(data):
    x = data["caption_bank"][:3]
    for bad in (0, -64, 100, True, "512", 64.0):
        with pytest.raises(ValueError, match=r"^bits must be a positive multiple of 64; got "):
            pv.fingerprint(x, "bank", bits=bad)
    assert pv.fingerprint(x, "bank", bits=64).signatures.shape == (3, 8)
    with pytest.raises(ValueError, match=r"^bank holds non-finite values \(rows 0-2\); a fingerprint needs finite rows$"):
        pv.fingerprint(np.full((3, 4), np.inf), "bank")


def _fp(sig_rows, name="f", bits=64):
    sig = np.asarray(sig_rows, dtype=np.uint8)
    n = len(sig)
    dig = np.arange(n * 16, dtype=np.uint8).reshape(n, 16) + (0 if name == "bank" else 1)
    return pv.Fingerprint(name, n, 3, "0" * 64, dig, sig, "embeddings", bits)


def test_compare_at_the_threshold_and_its_report():
    limit = pv.near_threshold(64)                                            # floor(64 acos(0.98) / pi) = 4
    assert limit == 4
    bank = _fp([[0] * 8], "bank")
    at = np.zeros(8, dtype=np.uint8)
    at[0] = 0b1111                                                           # 4 bits apart: a near duplicate
    past = np.zeros(8, dtype=np.uint8)
    past[0] = 0b11111                                                        # 5 bits apart: not one
    got = pv.compare(bank, _fp([at, past], "test"))
    assert (got["near"], got["near_examples"], got["max_hamming"], got["exact"]) == (1, [[0, 0]], 4, 0)
    assert pv.compare(bank, _fp([past], "test"), near_cosine=0.97)["near"] == 1   # a looser threshold
    with pytest.raises(ValueError, match=r"^near_cosine must be in \(0, 1\); got 0.0$"):
        pv.compare(bank, bank, near_cosine=0.0)
    with pytest.raises(ValueError, match=r"^a \(embeddings, dim 3, 64 bits\) and b \(scores, dim 3, 64 bits\) are not "
                                         r"comparable: fingerprint both with the same kind and bits, from rows of the "
                                         r"same width$"):
        pv.compare(dataclasses_replace(_fp([[0] * 8], "a")), dataclasses_replace(_fp([[0] * 8], "b"), kind="scores"))


def dataclasses_replace(fp, **kw):
    import dataclasses

    return dataclasses.replace(fp, **kw)


def test_examples_are_the_first_five(data):
    bank = data["caption_bank"].copy()
    bank[:7] = data["captions"][10:17]
    task = _task(data, caption_bank=bank)
    (f,) = hn.evaluate(task.fit(hn.InvertedSoftmax()), task, certificate=True)["certificate"].findings
    assert f["exact"] == 7 and f["exact_examples"] == [[10 + i, i] for i in range(5)]


def test_certificate_names_its_parts(data):
    task = _task(data)
    norm = task.fit(hn.DualInvertedSoftmax())
    cert = pv.certify(norm, task)
    assert cert.method == repr(norm) and cert.not_compared == []
    assert {k: (v.name, v.kind) for k, v in cert.test.items()} == {"queries": ("queries", "embeddings"),
                                                                  "targets": ("targets", "embeddings")}
    assert {k: v.name for k, v in cert.banks.items()} == {"query_bank": "query_bank", "target_bank": "target_bank"}
    pos = hn.Positives.from_labels(data["c2i"], 120)
    st = hn.RetrievalTask(scores=hn.matrices_from_embeddings(data["captions"], data["images"], data["caption_bank"]),
                          positives=pos, direction="t2i", check=False)
    sc = hn.evaluate(st.fit(hn.InvertedSoftmax()), st, certificate=True)["certificate"]
    assert (sc.test["queries"].name, sc.test["queries"].kind, sc.banks["query_bank"].name) == ("queries", "scores",
                                                                                               "query_bank")
    with pytest.raises(ValueError, match=r"^InvertedSoftmax was fitted on embeddings but task holds no queries embeddings: "
                                         r"certify "
                                         r"it on a task of the kind it was fitted on$"):
        pv.certify(task.fit(hn.InvertedSoftmax()), st)


def test_a_method_without_a_query_bank_records_none_on_scores(data):
    pos = hn.Positives.from_labels(data["c2i"], 120)
    bare = hn.RetrievalTask(scores=hn.matrices_from_embeddings(data["captions"], data["images"]), positives=pos,
                            direction="t2i", check=False)
    with_bank = hn.RetrievalTask(scores=hn.matrices_from_embeddings(data["captions"], data["images"],
                                                                    data["caption_bank"]),
                                 positives=pos, direction="t2i", check=False)
    for st in (bare, with_bank):
        raw = hn.make_normalizer("raw")
        cert = hn.evaluate(st.fit(raw), st, certificate=True)["certificate"]
        assert raw.provenance_ == {} and cert.findings == [] and cert.verdict == "no test row in any bank"


def test_refusals_say_what_to_do(data):
    task = _task(data)
    with pytest.raises(ValueError, match=r"^InvertedSoftmax has no record of its banks \(provenance_\): fit it with "
                                         r"Normalizer.fit, RetrievalTask.fit \(embeddings or score matrices\) or "
                                         r"hubnorm.distributed.fit_offsets \(a normalizer fitted by a grid sweep, on a "
                                         r"prebuilt bank index, or by hand, has none\)$"):
        pv.certify(hn.InvertedSoftmax(), task)                                 # never fitted
    pos = hn.Positives.from_labels(data["c2i"], 120)
    st = hn.RetrievalTask(scores=hn.matrices_from_embeddings(data["captions"], data["images"]), positives=pos,
                          direction="t2i", check=False)
    with pytest.raises(ValueError, match=r"^certificate=True certifies a fitted normalizer's banks; the raw scores "
                                         r"\(normalizer=None\) use no bank$"):
        hn.evaluate(None, st, certificate=True)


def test_check_certificate_recomputes_with_the_saved_threshold(data, tmp_path):
    rng = np.random.default_rng(21)
    bank = data["caption_bank"].copy()
    bank[5] = _at_cosine(data["captions"][[44]], 0.95, rng)[0]              # near at 0.9, not at 0.98
    task = _task(data, caption_bank=bank)
    norm = task.fit(hn.InvertedSoftmax())
    loose = pv.certify(norm, task, near_cosine=0.9)
    assert loose.findings[0]["near_examples"] == [[44, 5]]
    assert pv.certify(norm, task).findings[0]["near"] == 0
    back = pv.check_certificate(loose.save(tmp_path / "loose.json"))
    assert back.findings == loose.findings and back.not_compared == [] and back.method == loose.method
    assert set(back.test) == {"queries", "targets"} and set(back.banks) == {"query_bank"}
    assert np.array_equal(back.banks["query_bank"].signatures, loose.banks["query_bank"].signatures)
    text = (tmp_path / "loose.json").read_text(encoding="utf-8")
    assert text == json.dumps(json.loads(text), indent=1, sort_keys=True)   # sorted keys, one-space indent
    body = json.loads(text)
    body["findings"].append(dict(body["findings"][0], near_cosine=0.98))
    body["sha256"] = pv._body_hash(body)
    (tmp_path / "two.json").write_text(json.dumps(body))
    with pytest.raises(ValueError, match="its findings use different near-duplicate thresholds"):
        pv.check_certificate(tmp_path / "two.json")


def test_a_failed_save_leaves_no_temporary_file(data, tmp_path, monkeypatch):
    task = _task(data)
    cert = pv.certify(task.fit(hn.InvertedSoftmax()), task)

    def broken(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(pv.os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        cert.save(tmp_path / "c.json")
    assert list(tmp_path.iterdir()) == []


def test_review_findings_stay_fixed(data, tmp_path):
    """A prebuilt bank index records nothing (its rows are not the bank this fit saw); a file edited consistently in
    one field is refused; an unchecked target bank is named in the verdict; shared arrays are read-only; the
    threshold of an exact integer is that integer; an exact copy names the first place of a row copied twice."""
    pytest.importorskip("faiss")
    from hubnorm.index import BankIndex, FaissNNN

    task = _task(data)
    built = BankIndex(np.asarray(data["captions"], dtype=np.float32), nlist=4)      # built on the test queries
    clean = _unit(np.random.default_rng(4).standard_normal((240, D)))            # a clean bank of the same shape
    norm = FaissNNN(k=4, bank_index=built, nprobe=4).fit(task.targets, clean)
    assert norm.provenance_ is None
    with pytest.raises(ValueError, match="prebuilt bank index"):
        pv.certify(norm, task)

    bank = data["caption_bank"].copy()
    bank[3] = bank[8] = data["captions"][12]
    t = _task(data, caption_bank=bank)
    cert = pv.certify(t.fit(hn.InvertedSoftmax()), t)
    assert cert.findings[0]["exact_examples"] == [[12, 3]]
    path = cert.save(tmp_path / "c.json")
    body = json.loads(path.read_text())
    body["leak_free"] = True
    body["sha256"] = pv._body_hash(body)
    path.write_text(json.dumps(body))
    with pytest.raises(ValueError, match="do not follow"):
        pv.check_certificate(path)
    body = json.loads(cert.save(tmp_path / "d.json").read_text())
    body["test"] = {"q": body["test"]["queries"], "targets": body["test"]["targets"]}
    body["sha256"] = pv._body_hash(body)
    (tmp_path / "d.json").write_text(json.dumps(body))
    with pytest.raises(ValueError, match=r"its test rows are \['q', 'targets'\]"):
        pv.check_certificate(tmp_path / "d.json")
    del body["findings"]
    body["sha256"] = pv._body_hash(body)
    (tmp_path / "d.json").write_text(json.dumps(body))
    with pytest.raises(ValueError, match="a part is missing or malformed"):
        pv.check_certificate(tmp_path / "d.json")

    pos = hn.Positives.from_labels(data["c2i"], 120)
    st = hn.RetrievalTask(scores=hn.matrices_from_embeddings(data["captions"], data["images"], data["caption_bank"],
                                                             data["image_bank"]), positives=pos, direction="t2i",
                          check=False)
    dual = hn.evaluate(st.fit(hn.DualInvertedSoftmax()), st, certificate=True)["certificate"]
    assert dual.leak_free and dual.verdict == "no test row in the compared banks; not compared: target_bank"
    back = pv.check_certificate(dual.save(tmp_path / "dual.json"))
    assert back.verdict == dual.verdict

    fp = pv.fingerprint(data["caption_bank"], "bank")
    with pytest.raises(ValueError, match="read-only"):
        fp.digests[0, 0] = 1
    assert pv.near_threshold(64, math.cos(math.pi / 64)) == 1
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        pv.fingerprint(data["caption_bank"], "bank", seed=-1)
    with pytest.raises(TypeError, match="bank must be a hubnorm.provenance.Fingerprint"):
        pv.compare(object(), fp)
    with pytest.raises(ValueError, match="near_cosine must be in"):
        pv.compare(fp, fp, near_cosine="0.9")


def test_a_bank_held_on_a_device_is_fingerprinted_from_the_callers_host_rows(data, monkeypatch):
    """A fit on a GPU fingerprints the caller's host rows of a bank, not a copy of the device tensor back (2 GB at a
    1M-caption bank; bench_gpu.py's first lease): same hashes either way. Checked on the CPU with the seam itself
    (LocalEngine's ``host``), and that a CPU fit passes no host rows (its tensors are the caller's memory)."""
    from hubnorm.engine import LocalEngine
    bank = data["caption_bank"]
    nrm = hn.InvertedSoftmax()
    engine = LocalEngine({"targets": torch.from_numpy(data["images"]), "query_bank": torch.from_numpy(bank.copy())},
                         host={"query_bank": bank, "target_bank": data["image_bank"]})
    assert set(engine.host) == {"query_bank"}                        # only inputs the engine holds
    assert engine.host_rows("query_bank") is bank and engine.host_rows("targets") is engine.tensor("targets")
    from hubnorm import engine as engine_module
    seen = []
    real = pv.fingerprint
    monkeypatch.setattr(engine_module, "fingerprint", lambda x, name, **kw: seen.append(x) or real(x, name, **kw))
    fps = pv.of_engine(nrm, engine)
    assert len(seen) == 1 and seen[0] is bank and fps["query_bank"].sha256 == real(torch.from_numpy(bank), "q").sha256
    cpu = nrm.local_engine(data["images"], query_bank=bank)
    assert cpu.host == {} and cpu.host_rows("query_bank").data_ptr() == torch.from_numpy(bank).data_ptr()


def test_a_stored_score_matrix_is_sketched_once_until_its_file_changes(data, tmp_path, monkeypatch):
    """Rows of a read-only memory-mapped score matrix are fingerprinted once per file state and view
    (``provenance._STORED``): a second evaluation of the same stored test matrix reads nothing, nor does the same file
    mapped again; a view at another position in the file, another selection of
    rows or columns, another orientation, a rewritten file, or a map opened for writing is read again, and every
    fingerprint equals that of the rows held in memory."""
    from hubnorm.matrices import ScoreMatrix
    path = tmp_path / "test.npy"
    scores = (data["captions"] @ data["images"].T).astype(np.float32)
    np.save(path, scores)
    pv._STORED.clear()
    pv._CACHE.clear()
    m = ScoreMatrix(np.load(path, mmap_mode="r"), "test.npy")
    first = pv.fingerprint(m, "queries", kind="scores")
    assert first.sha256 == pv.fingerprint(scores, "q", kind="scores").sha256
    reads = []
    real_block = ScoreMatrix.block
    monkeypatch.setattr(ScoreMatrix, "block", lambda self, *a: reads.append(a) or real_block(self, *a))
    again = pv.fingerprint(m, "again", kind="scores")
    assert reads == [] and again.name == "again" and again.signatures is first.signatures
    reopened = ScoreMatrix(np.load(path, mmap_mode="r"), "test.npy")             # the same file mapped again
    assert pv.fingerprint(reopened, "re", kind="scores").signatures is first.signatures and reads == []
    shifted = ScoreMatrix(np.load(path, mmap_mode="r")[1:], "test.npy")          # another position in the file
    assert pv.fingerprint(shifted, "sh", kind="scores").sha256 == pv.fingerprint(scores[1:], "s", kind="scores").sha256
    assert len(reads) > 0
    reads.clear()
    sub = m.take(rows=np.arange(0, 240, 3))
    assert pv.fingerprint(sub, "sub", kind="scores").sha256 == pv.fingerprint(scores[::3], "s", kind="scores").sha256
    assert pv.fingerprint(m.T, "t", kind="scores").sha256 == pv.fingerprint(scores.T, "t", kind="scores").sha256
    assert pv.fingerprint(m, "e", kind="embeddings").kind == "embeddings"       # kind is part of the key
    reads.clear()
    np.save(path, scores[::-1])                                                # rewritten: read again
    os.utime(path, ns=(1, 1))
    fresh = pv.fingerprint(ScoreMatrix(np.load(path, mmap_mode="r"), "test.npy"), "queries", kind="scores")
    assert reads and fresh.sha256 == pv.fingerprint(scores[::-1], "r", kind="scores").sha256 != first.sha256
    reads.clear()
    rw = ScoreMatrix(np.load(path, mmap_mode="r+"), "test.npy")
    pv.fingerprint(rw, "rw", kind="scores")
    once = len(reads)
    pv.fingerprint(rw, "rw", kind="scores")                                    # writable: never remembered
    assert once > 0 and len(reads) == 2 * once and pv._stored_key(rw) is None
    assert pv._stored_key(scores) is None and pv._stored_key(ScoreMatrix(scores)) is None
