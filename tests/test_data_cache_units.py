"""``hubnorm.data.cache`` in small pieces: the key (``make_key``, ``normalize_pretrained``, ``library_versions``,
``key_differences``), the paths (``entry_dir``, ``content_entry_dir``, ``legacy_text_entries``), the byte helpers
(``sha256_file`` in several chunks against hashlib, ``atomic_write_bytes`` with its permissions and clean-up,
``npy_bytes``, ``texts_sha256`` computed by hand), every field of a written split manifest, the streaming writer
against the one-block writer (same bytes, same checksums) and every chunk check by its message, every structural
check of ``manifest_problem`` at its boundary, every load check of ``read_entry`` (and its re-reads when the folder is
replaced) by its message and ``reason``, the content key computed by hand, and every check of
``read_content_entry`` by its message; the staging helpers (``_sweep_stale``, ``_alive``, ``_mkdtemp``,
``_publish``) on real folders in ``tmp_path``.

Survivors judged equivalent (no test can tell them apart):
- ``sha256_file``'s default chunk ``1 << 20`` changed (another block size, same digest).
- ``umask``'s temporary ``os.umask(0)`` argument changed (any value is restored at once; the mask read is the same).
- message texts of ``CacheError`` / ``ValueError`` that no caller matches beyond the phrases checked here.
- ``_fsync_dir`` / ``fsync`` / ``flush`` calls dropped or their handles changed (durability against a crash, not
  visible to a process that keeps running).
- ``created`` timestamp format (informative only).
- ``json.dumps(indent=1)`` of a manifest changed (the manifest is parsed, never compared as bytes).
- the codec names ``"utf-8"`` / ``"ascii"`` written ``"UTF-8"`` / ``"ASCII"`` (aliases), ``ensure_ascii=None`` for
  ``False`` (both falsy), the length of the random ``uuid`` suffix of a partial file's name.
- ``CacheError(..., reason="corrupt")`` with the reason dropped (``"corrupt"`` is the default).
- ``< 1e-3`` -> ``<= 1e-3`` in the unit-row check (no float32 norm lies exactly 1e-3 from 1).
- ``_owner_tag``'s host cut ``[:32]`` / the ``or "host"`` fallback (the host name here is short and non-empty).
- the retry count of ``read_entry`` (10) changed by one (only a writer racing that many times could tell; that of
  ``_publish`` is the constant ``PUBLISH_ATTEMPTS``, checked).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import socket
import subprocess
import sys

import numpy as np
import pytest

from hubnorm.data import cache
from hubnorm.data.paths import slug


def _unit(n, d=8, seed=0):
    x = np.random.default_rng(seed).standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


KEY = {"dataset": "d", "split": "test", "model": "m"}
C2I = np.repeat(np.arange(3), 2)
IMAGE_FILES = ["a.jpg", "b.jpg", "c.jpg"]
CAPTIONS = ["u", "v", "w", "x", "y", "zé"]


def _entry(folder, key=KEY, extra=None, seed=0):
    x = _unit(9, 4, seed)
    return cache.write_entry(folder, key, x[:3], x[3:], C2I, IMAGE_FILES, CAPTIONS, extra=extra)


def _rewrite_manifest(folder, change):
    man = json.loads((folder / "manifest.json").read_text())
    change(man)
    (folder / "manifest.json").write_text(json.dumps(man))


def _reseal(folder, name, data: bytes):
    """Replace ``name`` by ``data`` and update its sha256 in the manifest (only the later checks can object)."""
    (folder / name).write_bytes(data)
    _rewrite_manifest(folder, lambda m: m["files"][name].__setitem__("sha256", hashlib.sha256(data).hexdigest()))


def _dead_pid():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


# ------------------------------------------------------------------------------------------------ keys
def test_cache_error_reason_defaults_to_corrupt():
    assert cache.CacheError("x").reason == "corrupt"
    assert cache.CacheError("x", reason="stale").reason == "stale"
    assert str(cache.CacheError("boom")) == "boom"
    assert issubclass(cache.CacheError, RuntimeError) and issubclass(cache.CacheWarning, UserWarning)


@pytest.mark.parametrize("tag", [None, "", "  ", "none", "None", " NULL ", "random", "Random"])
def test_normalize_pretrained_random_init_spellings(tag):
    assert cache.normalize_pretrained(tag) == "none"


def test_normalize_pretrained_keeps_a_real_tag_as_a_string():
    assert cache.normalize_pretrained("openai") == "openai"
    assert cache.normalize_pretrained(" laion2b ") == " laion2b "
    assert cache.normalize_pretrained(7) == "7"


def test_library_versions_fields():
    from importlib import metadata

    import torch

    from hubnorm._version import __version__
    v = cache.library_versions()
    assert set(v) == {"torch", "open_clip", "hubnorm"}
    assert v["torch"] == torch.__version__ and v["hubnorm"] == __version__
    assert cache.library_versions("open_clip") == v
    b = cache.library_versions("blip")
    assert set(b) == {"torch", "open_clip", "hubnorm", "transformers"}
    try:
        assert b["transformers"] == metadata.version("transformers")
    except metadata.PackageNotFoundError:  # pragma: no cover
        assert b["transformers"] == "not installed"
    try:
        assert v["open_clip"] == metadata.version("open_clip_torch")
    except metadata.PackageNotFoundError:  # pragma: no cover
        pass


def test_make_key_every_field():
    versions = {"torch": "1"}
    key = cache.make_key("coco", "test", "ViT", "random", precision="fp16", annotations_sha256="ab",
                         versions=versions, encoder_family="blip")
    assert key == {"dataset": "coco", "split": "test", "model": "ViT", "pretrained": "none", "encoder_family": "blip",
                   "precision": "fp16", "annotations_sha256": "ab", "versions": {"torch": "1"}}
    assert key["versions"] is not versions                # a copy: changing the caller's dict leaves the key alone


def test_make_key_defaults_read_the_library_versions_of_the_family():
    key = cache.make_key("coco", "val", "ViT", "openai")
    assert key["precision"] == "fp32" and key["annotations_sha256"] is None and key["encoder_family"] == "open_clip"
    assert key["pretrained"] == "openai" and key["versions"] == cache.library_versions("open_clip")
    assert cache.make_key("coco", "val", "B", None, encoder_family="blip")["versions"] == cache.library_versions("blip")
    assert cache.make_key("coco", "val", "B", None, versions={})["versions"] == {}   # an empty mapping is kept


def test_key_differences_rules():
    stored = {"dataset": "d", "model": "m", "versions": {"torch": "1", "open_clip": "2"}}
    assert cache.key_differences(stored, {"dataset": "d", "model": None}) == {}        # None is not compared
    assert cache.key_differences(stored, {"dataset": "e"}) == {"dataset": ("d", "e")}
    assert cache.key_differences(stored, {"precision": "fp32"}) == {"precision": (None, "fp32")}
    # only the versions named in the expected key are compared, each under its own name
    assert cache.key_differences(stored, {"versions": {"torch": "1"}}) == {}
    assert cache.key_differences(stored, {"versions": {"torch": "9", "hubnorm": "3"}}) == {
        "versions.torch": ("1", "9"), "versions.hubnorm": (None, "3")}
    assert cache.key_differences({"dataset": "d"}, {"versions": {"torch": "1"}}) == {"versions.torch": (None, "1")}
    # a non-mapping expected versions value is compared whole
    assert cache.key_differences(stored, {"versions": "x"}) == {"versions": (stored["versions"], "x")}
    # fields restricts the comparison
    assert cache.key_differences(stored, {"dataset": "e", "model": "n"}, fields=["model"]) == {"model": ("m", "n")}
    assert cache.key_differences(stored, {"dataset": "e"}, fields=[]) == {}


def test_key_differences_reads_a_missing_encoder_family_as_open_clip():
    assert cache.key_differences({}, {"encoder_family": "open_clip"}) == {}
    assert cache.key_differences({}, {"encoder_family": "blip"}) == {"encoder_family": ("open_clip", "blip")}
    assert cache.key_differences({"encoder_family": "blip"}, {"encoder_family": "blip"}) == {}
    assert cache.LEGACY_ENCODER_FAMILY == "open_clip"


# ------------------------------------------------------------------------------------------------ paths
def test_entry_dir_layout(tmp_path):
    assert cache.entry_dir("my data", "hf-hub:org/name", None, "test", tmp_path) == \
        tmp_path / "my_data" / "hf-hub_org_name" / "none" / "test"
    assert cache.entry_dir("coco", "ViT", "laion/2b", "val", tmp_path) == tmp_path / "coco" / "ViT" / "laion_2b" / "val"


def test_entry_dir_default_root_is_the_cache_root(tmp_path, monkeypatch):
    monkeypatch.setenv("HUBNORM_CACHE", str(tmp_path / "root"))
    assert cache.entry_dir("coco", "ViT", "random", "val") == tmp_path / "root" / "coco" / "ViT" / "none" / "val"
    assert cache.content_entry_dir("k", "lab") == tmp_path / "root" / "encodings" / "lab" / "k"
    assert cache.legacy_text_entries() is None


def test_content_entry_dir_slugs_and_cuts_the_label(tmp_path):
    assert cache.content_entry_dir("abc", "open_clip:ViT/B", tmp_path) == \
        tmp_path / "encodings" / "open_clip_ViT_B" / "abc"
    long = "x" * 100
    assert cache.content_entry_dir("k", long, tmp_path) == tmp_path / "encodings" / ("x" * 80) / "k"
    assert cache.ENCODINGS_DIR == "encodings"


def test_legacy_text_entries_only_an_existing_folder(tmp_path):
    assert cache.legacy_text_entries(tmp_path) is None
    (tmp_path / "text-embeddings").write_text("a file, not a folder")
    assert cache.legacy_text_entries(tmp_path) is None
    (tmp_path / "text-embeddings").unlink()
    (tmp_path / "text-embeddings").mkdir()
    assert cache.legacy_text_entries(tmp_path) == tmp_path / "text-embeddings"


# ------------------------------------------------------------------------------------------------ bytes
@pytest.mark.parametrize("chunk", [1, 7, 1000, 1 << 20])
def test_sha256_file_in_chunks_is_hashlib(tmp_path, chunk):
    data = np.random.default_rng(0).bytes(3001)
    (tmp_path / "f").write_bytes(data)
    assert cache.sha256_file(tmp_path / "f", chunk=chunk) == hashlib.sha256(data).hexdigest()
    assert cache.sha256_file(str(tmp_path / "f")) == hashlib.sha256(data).hexdigest()
    (tmp_path / "e").write_bytes(b"")
    assert cache.sha256_file(tmp_path / "e", chunk=chunk) == hashlib.sha256(b"").hexdigest()


def test_umask_reads_without_changing():
    old = os.umask(0o027)
    try:
        assert cache.umask() == 0o027
        assert cache.umask() == 0o027          # unchanged by the first read
    finally:
        os.umask(old)


@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_atomic_write_bytes_content_checksum_permissions_and_no_leftovers(tmp_path, mask):
    old = os.umask(mask)
    try:
        path = tmp_path / "new" / "sub" / "f.bin"
        assert cache.atomic_write_bytes(path, b"hello") == hashlib.sha256(b"hello").hexdigest()
        assert path.read_bytes() == b"hello"
        assert (path.stat().st_mode & 0o777) == 0o666 & ~mask
        assert cache.atomic_write_bytes(path, b"again") == hashlib.sha256(b"again").hexdigest()
        assert path.read_bytes() == b"again"
        assert sorted(p.name for p in path.parent.iterdir()) == ["f.bin"]
    finally:
        os.umask(old)


def test_atomic_write_bytes_failure_removes_its_temporary_file(tmp_path, monkeypatch):
    def boom(*a):
        raise OSError("disk full")
    monkeypatch.setattr(cache.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        cache.atomic_write_bytes(tmp_path / "f.bin", b"x")
    assert list(tmp_path.iterdir()) == []


def test_atomic_write_bytes_removes_a_dead_writers_temporary_file(tmp_path):
    host = cache._owner_tag().rsplit("-", 1)[0]
    stale = tmp_path / f".f.bin.{host}-{_dead_pid()}.x.tmp"
    stale.write_bytes(b"old")
    other = tmp_path / f".g.bin.{host}-{_dead_pid()}.x.tmp"      # another file's staging: not this prefix
    other.write_bytes(b"old")
    cache.atomic_write_bytes(tmp_path / "f.bin", b"x")
    assert not stale.exists() and other.exists()


def test_npy_bytes_round_trip_c_order_no_pickles():
    a = np.arange(12, dtype=np.float32).reshape(3, 4).T       # Fortran-ordered view
    data = cache.npy_bytes(a)
    back = np.load(io.BytesIO(data), allow_pickle=False)
    assert np.array_equal(back, a) and back.dtype == np.float32 and back.flags["C_CONTIGUOUS"]
    assert b"'fortran_order': False" in data
    with pytest.raises(ValueError):
        cache.npy_bytes(np.array([{"a": 1}], dtype=object))


def test_texts_sha256_by_hand():
    h = hashlib.sha256()
    for t in ["ab", "é"]:
        b = t.encode("utf-8")
        h.update(len(b).to_bytes(8, "little") + b)
    assert cache.texts_sha256(["ab", "é"]) == h.hexdigest()
    assert cache.texts_sha256([]) == hashlib.sha256(b"").hexdigest()
    assert cache.texts_sha256(["ab", "c"]) != cache.texts_sha256(["a", "bc"])    # length-prefixed


# ------------------------------------------------------------------------------------------------ split entries
def test_write_entry_manifest_fields_and_files(tmp_path):
    folder = tmp_path / "e"
    x = _unit(9, 4)
    man = cache.write_entry(folder, KEY, x[:3].astype(np.float64), x[3:], C2I.astype(np.int32), IMAGE_FILES,
                            CAPTIONS, extra={"note": 1})
    assert man == json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    assert man["format"] == cache.FORMAT_VERSION == 1 and man["key"] == KEY and man["note"] == 1
    assert (man["n_images"], man["n_captions"], man["dim"]) == (3, 6, 4) and isinstance(man["created"], str)
    assert set(man["files"]) == {"images.npy", "captions.npy", "caption_to_image.npy", "texts.json"}
    for name, shape, dtype in (("images.npy", [3, 4], "float32"), ("captions.npy", [6, 4], "float32"),
                               ("caption_to_image.npy", [6], "int64")):
        info, data = man["files"][name], (folder / name).read_bytes()
        assert info == {"sha256": hashlib.sha256(data).hexdigest(), "rows": shape[0], "shape": shape, "dtype": dtype,
                        "bytes": len(data)}
        assert str(np.load(folder / name).dtype) == dtype
    data = (folder / "texts.json").read_bytes()
    assert man["files"]["texts.json"] == {"sha256": hashlib.sha256(data).hexdigest(), "rows": 6, "bytes": len(data)}
    assert "zé".encode("utf-8") in data                          # UTF-8, not \u escapes
    assert json.loads(data) == {"image_files": IMAGE_FILES, "captions": CAPTIONS}
    assert "é".encode("utf-8") in (folder / "manifest.json").read_bytes() or "é" not in json.dumps(man)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e"]   # no staging folder left
    arrays, texts, read = cache.read_entry(folder, KEY)
    assert np.array_equal(arrays["images"], x[:3]) and np.array_equal(arrays["captions"], x[3:])
    assert arrays["caption_to_image"].dtype == np.int64 and np.array_equal(arrays["caption_to_image"], C2I)
    assert texts == {"image_files": IMAGE_FILES, "captions": CAPTIONS} and read == man


def test_write_entry_manifest_is_utf8_and_dim_of_a_1d_images_array(tmp_path):
    key = {"dataset": "café"}
    x = _unit(9, 4)
    man = cache.write_entry(tmp_path / "e", key, x[0], x[3:], C2I, IMAGE_FILES, CAPTIONS)
    assert man["dim"] is None and man["n_images"] == 4
    assert "café".encode("utf-8") in (tmp_path / "e" / "manifest.json").read_bytes()


def test_write_entry_replaces_an_existing_entry_and_a_failed_write_keeps_it(tmp_path, monkeypatch):
    folder = tmp_path / "e"
    _entry(folder, seed=1)
    _entry(folder, extra={"second": True}, seed=2)
    assert cache.read_manifest(folder).get("second") is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e"]
    with pytest.raises(TypeError):   # a write that fails half-way: the old entry stays, no staging is left
        cache.write_entry(folder, KEY, _unit(3, 4), _unit(6, 4), C2I, IMAGE_FILES, CAPTIONS, extra={1j: 2})
    assert cache.read_manifest(folder).get("second") is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e"]


def _chunks(x, n_img, step):
    img, cap = x[:n_img], x[n_img:]
    for i in range(0, max(len(img), len(cap)), step):
        yield min(i, len(img)), img[i:i + step], min(i, len(cap)), cap[i:i + step]


@pytest.mark.parametrize("step", [1, 2, 100])
def test_streaming_writer_matches_the_one_block_writer(tmp_path, step):
    x = _unit(9, 4, seed=3)
    one = cache.write_entry(tmp_path / "one", KEY, x[:3], x[3:], C2I, IMAGE_FILES, CAPTIONS, extra={"e": 1})
    chunks = [(i0, a.astype(np.float64), j0, b) for i0, a, j0, b in _chunks(x, 3, step)]
    st = cache.write_entry_streaming(tmp_path / "st", KEY, 3, 6, 4, iter(chunks), C2I, IMAGE_FILES, CAPTIONS,
                                     extra={"e": 1})
    one.pop("created"), st.pop("created")
    assert st == one
    for name in cache.ARRAY_FILES + (cache.TEXT_FILE,):
        assert (tmp_path / "st" / name).read_bytes() == (tmp_path / "one" / name).read_bytes()
    assert sorted(p.name for p in (tmp_path / "st").iterdir()) == sorted(cache.ARRAY_FILES + ("texts.json",
                                                                                             "manifest.json"))
    arrays, _, man = cache.read_entry(tmp_path / "st", KEY)
    assert np.array_equal(arrays["captions"], x[3:]) and man["dim"] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "st"]


@pytest.mark.parametrize("chunk, message", [
    ((1, np.zeros((3, 4)), 0, np.zeros((6, 4))), r"images.npy: chunk of shape \(3, 4\) at row 1; expected rows from "
                                                  r"0 with 4 columns"),
    ((0, np.zeros((3, 4)), 2, np.zeros((6, 4))), r"captions.npy: chunk of shape \(6, 4\) at row 2; expected rows "
                                                  r"from 0"),
    ((0, np.zeros((3, 5)), 0, np.zeros((6, 4))), r"images.npy: chunk of shape \(3, 5\)"),
    ((0, np.zeros((3, 4)), 0, np.zeros((6, 3))), r"captions.npy: chunk of shape \(6, 3\)"),
    ((0, np.zeros(4), 0, np.zeros((6, 4))), r"images.npy: chunk of shape \(4,\)"),
    ((0, np.zeros((3, 4, 1)), 0, np.zeros((6, 4))), r"images.npy: chunk of shape \(3, 4, 1\)"),
    ((0, np.zeros((2, 4)), 0, np.zeros((6, 4))), r"chunks filled \{'images.npy': 2, 'captions.npy': 6\}, expected "
                                                  r"3 images and 6 captions"),
    ((0, np.zeros((3, 4)), 0, np.zeros((5, 4))), r"chunks filled .*'captions.npy': 5"),
    ((0, np.zeros((4, 4)), 0, np.zeros((6, 4))), r"chunks filled .*'images.npy': 4"),
])
def test_streaming_writer_chunk_checks(tmp_path, chunk, message):
    folder = tmp_path / "st"
    with pytest.raises(ValueError, match=message):
        cache.write_entry_streaming(folder, KEY, 3, 6, 4, [chunk], C2I, IMAGE_FILES, CAPTIONS)
    assert list(tmp_path.iterdir()) == []      # no entry, no staging folder, no partial file


def test_streaming_writer_int64_links_and_utf8_manifest(tmp_path):
    x = _unit(9, 4)
    man = cache.write_entry_streaming(tmp_path / "st", {"dataset": "café"}, 3, 6, 4, [(0, x[:3], 0, x[3:])],
                                      C2I.astype(np.int32), IMAGE_FILES, CAPTIONS)
    c2i = np.load(tmp_path / "st" / "caption_to_image.npy")
    assert c2i.dtype == np.int64 and man["files"]["caption_to_image.npy"]["dtype"] == "int64"
    assert "café".encode("utf-8") in (tmp_path / "st" / "manifest.json").read_bytes()
    assert "zé".encode("utf-8") in (tmp_path / "st" / "texts.json").read_bytes()


def test_remove_tree_of_a_missing_folder_is_quiet(tmp_path):
    cache._remove_tree(tmp_path / "absent")
    (tmp_path / "d" / "e").mkdir(parents=True)
    cache._remove_tree(tmp_path / "d")
    assert not (tmp_path / "d").exists()


def test_streaming_writer_second_chunk_must_follow_the_first(tmp_path):
    x = _unit(9, 4)
    chunks = [(0, x[:2], 0, x[3:5]), (1, x[2:3], 2, x[5:])]
    with pytest.raises(ValueError, match=r"images.npy: chunk of shape \(1, 4\) at row 1; expected rows from 2"):
        cache.write_entry_streaming(tmp_path / "st", KEY, 3, 6, 4, chunks, C2I, IMAGE_FILES, CAPTIONS)
    chunks = [(0, x[:2], 0, x[3:5]), (2, x[2:3], 2, x[5:])]
    man = cache.write_entry_streaming(tmp_path / "st", KEY, 3, 6, 4, chunks, C2I, IMAGE_FILES, CAPTIONS)
    assert man["files"]["images.npy"]["rows"] == 3 and man["files"]["captions.npy"]["shape"] == [6, 4]


# ------------------------------------------------------------------------------------------------ manifests
def test_read_manifest_missing_unreadable_and_stale(tmp_path):
    with pytest.raises(cache.CacheError, match="no cached embeddings at .* \\(no manifest.json\\)") as err:
        cache.read_manifest(tmp_path)
    assert err.value.reason == "missing"
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(cache.CacheError, match="manifest.json is unreadable") as err:
        cache.read_manifest(tmp_path)
    assert err.value.reason == "corrupt"
    (tmp_path / "manifest.json").write_bytes(b"\xff\xfe")
    with pytest.raises(cache.CacheError, match="is unreadable") as err:
        cache.read_manifest(tmp_path)
    for doc in ([1], {"format": 2, "key": {}}, {"key": {}}, {"format": 1}):
        (tmp_path / "manifest.json").write_text(json.dumps(doc))
        with pytest.raises(cache.CacheError, match="is not a hubnorm cache manifest of format 1") as err:
            cache.read_manifest(tmp_path)
        assert err.value.reason == "stale"
    (tmp_path / "manifest.json").write_text(json.dumps({"format": 1, "key": []}))
    with pytest.raises(cache.CacheError, match=r"is malformed \('key' is not a mapping\): re-encode") as err:
        cache.read_manifest(tmp_path)
    assert err.value.reason == "corrupt"


def _good_manifest():
    files = {n: {"sha256": "a" * 64, "rows": 3, "shape": [3, 4]} for n in cache.ARRAY_FILES}
    files["texts.json"] = {"sha256": "b" * 64, "rows": 0}
    return {"format": 1, "key": {"versions": {"torch": "1"}}, "files": files, "n_images": 3, "n_captions": 0}


@pytest.mark.parametrize("change, problem", [
    (lambda m: m.__setitem__("key", "k"), "'key' is not a mapping"),
    (lambda m: m.pop("key"), "'key' is not a mapping"),
    (lambda m: m["key"].__setitem__("versions", ["torch"]), "'key.versions' is not a mapping"),
    (lambda m: m.pop("files"), "'files' is missing or not a mapping"),
    (lambda m: m.__setitem__("files", []), "'files' is missing or not a mapping"),
    (lambda m: m["files"].pop("captions.npy"), "no entry for captions.npy in 'files'"),
    (lambda m: m["files"].__setitem__("texts.json", "x"), "no entry for texts.json in 'files'"),
    (lambda m: m["files"]["images.npy"].pop("sha256"), "images.npy has no sha256 checksum"),
    (lambda m: m["files"]["images.npy"].__setitem__("sha256", "a" * 63), "images.npy has no sha256 checksum"),
    (lambda m: m["files"]["images.npy"].__setitem__("sha256", "a" * 65), "images.npy has no sha256 checksum"),
    (lambda m: m["files"]["images.npy"].__setitem__("sha256", 7), "images.npy has no sha256 checksum"),
    (lambda m: m["files"]["caption_to_image.npy"].pop("rows"), "caption_to_image.npy has no valid row count"),
    (lambda m: m["files"]["images.npy"].__setitem__("rows", -1), "images.npy has no valid row count"),
    (lambda m: m["files"]["images.npy"].__setitem__("rows", True), "images.npy has no valid row count"),
    (lambda m: m["files"]["images.npy"].__setitem__("rows", 3.0), "images.npy has no valid row count"),
    (lambda m: m["files"]["images.npy"].__setitem__("shape", (3, 4)), "images.npy has an invalid shape"),
    (lambda m: m["files"]["images.npy"].__setitem__("shape", [3, 4.0]), "images.npy has an invalid shape"),
    (lambda m: m["files"]["images.npy"].__setitem__("shape", "3,4"), "images.npy has an invalid shape"),
    (lambda m: m.pop("n_images"), "'n_images' is missing or not a count"),
    (lambda m: m.__setitem__("n_captions", -1), "'n_captions' is missing or not a count"),
    (lambda m: m.__setitem__("n_captions", False), "'n_captions' is missing or not a count"),
    (lambda m: m.__setitem__("n_images", "3"), "'n_images' is missing or not a count"),
])
def test_manifest_problem_each_check(change, problem):
    man = _good_manifest()
    assert cache.manifest_problem(man) is None
    change(man)
    assert cache.manifest_problem(man) == problem


def test_manifest_problem_boundaries_that_are_fine():
    man = _good_manifest()
    man["key"].pop("versions")                                   # no versions at all: fine
    man["files"]["images.npy"]["rows"] = 0                       # an empty file: fine
    man["files"]["images.npy"].pop("shape")                      # no shape: fine
    man["files"]["captions.npy"]["shape"] = []                   # a 0-d shape: a list of ints
    man["n_images"] = 0
    assert cache.manifest_problem(man) is None
    man["key"]["versions"] = None
    assert cache.manifest_problem(man) is None


# ------------------------------------------------------------------------------------------------ reading split entries
def test_read_entry_stale_key_names_every_difference(tmp_path):
    folder = tmp_path / "e"
    _entry(folder, key={**KEY, "versions": {"torch": "1"}})
    with pytest.raises(cache.CacheError, match=r"made with a different key \(model: cached 'm' != wanted 'n', "
                                               r"versions.torch: cached '1' != wanted '2'\)") as err:
        cache.read_entry(folder, {"model": "n", "split": "test", "versions": {"torch": "2"}})
    assert err.value.reason == "stale"
    cache.read_entry(folder, {"model": "n", "split": "test"}, fields=["split"])      # fields restricts the check
    with pytest.raises(cache.CacheError, match="model: cached"):
        cache.read_entry(folder, {"model": "n", "split": "test"}, fields=["model"])
    cache.read_entry(folder, None)                               # no key: not compared


@pytest.mark.parametrize("name", ["images.npy", "captions.npy", "caption_to_image.npy", "texts.json"])
def test_read_entry_missing_or_modified_file(tmp_path, name):
    folder = tmp_path / "e"
    _entry(folder)
    data = (folder / name).read_bytes()
    (folder / name).write_bytes(data[:-1])
    with pytest.raises(cache.CacheError, match=rf"{name} is corrupt: sha256 [0-9a-f]{{12}}\.\.\. != "
                                               r"[0-9a-f]{12}\.\.\. in the manifest \(truncated") as err:
        cache.read_entry(folder)
    assert err.value.reason == "corrupt"
    (folder / name).unlink()
    with pytest.raises(cache.CacheError, match=rf"{name} is missing although the manifest lists it") as err:
        cache.read_entry(folder)
    assert err.value.reason == "corrupt"


def test_read_entry_texts_file_checks(tmp_path):
    folder = tmp_path / "e"
    _entry(folder)
    good = (folder / "texts.json").read_bytes()
    _reseal(folder, "texts.json", b"\xff not utf-8")
    with pytest.raises(cache.CacheError, match="texts.json cannot be read"):
        cache.read_entry(folder)
    _reseal(folder, "texts.json", b"{broken")
    with pytest.raises(cache.CacheError, match="texts.json cannot be read") as err:
        cache.read_entry(folder)
    assert err.value.reason == "corrupt"
    for doc in ([], {"captions": "uvwxyz"}, {"captions": CAPTIONS, "image_files": "abc"}):
        _reseal(folder, "texts.json", json.dumps(doc).encode())
        with pytest.raises(cache.CacheError, match=r"is not a texts file \(a mapping with 'captions'"):
            cache.read_entry(folder)
    _reseal(folder, "texts.json", json.dumps({"image_files": IMAGE_FILES, "captions": CAPTIONS[:5]}).encode())
    with pytest.raises(cache.CacheError, match="texts.json holds 5 captions, manifest says 6"):
        cache.read_entry(folder)
    _reseal(folder, "texts.json", json.dumps({"image_files": IMAGE_FILES[:2], "captions": CAPTIONS}).encode())
    with pytest.raises(cache.CacheError, match="image/caption counts disagree between files") as err:
        cache.read_entry(folder)
    assert err.value.reason == "corrupt"
    _reseal(folder, "texts.json", good)
    assert cache.read_entry(folder)[1]["captions"] == CAPTIONS


def test_read_entry_texts_without_image_files_and_counts(tmp_path):
    folder = tmp_path / "e"
    _entry(folder)
    _reseal(folder, "texts.json", json.dumps({"captions": CAPTIONS}).encode())
    with pytest.raises(cache.CacheError, match="counts disagree"):          # 0 image files for 3 images
        cache.read_entry(folder)
    _reseal(folder, "texts.json", json.dumps({"image_files": IMAGE_FILES}).encode())
    _rewrite_manifest(folder, lambda m: m["files"]["texts.json"].__setitem__("rows", 0))
    assert cache.read_entry(folder)[1] == {"image_files": IMAGE_FILES}        # no captions list: 0 captions


def test_read_entry_array_checks(tmp_path):
    folder = tmp_path / "e"
    _entry(folder)
    _reseal(folder, "images.npy", b"not an npy file")
    with pytest.raises(cache.CacheError, match="images.npy cannot be read") as err:
        cache.read_entry(folder)
    assert err.value.reason == "corrupt"
    _reseal(folder, "images.npy", cache.npy_bytes(_unit(4, 4)))
    with pytest.raises(cache.CacheError, match=r"images.npy has shape \(4, 4\); the manifest says \[3, 4\]"):
        cache.read_entry(folder)
    _reseal(folder, "images.npy", cache.npy_bytes(_unit(3, 5)))      # rows agree, columns do not
    with pytest.raises(cache.CacheError, match=r"images.npy has shape \(3, 5\); the manifest says \[3, 4\]"):
        cache.read_entry(folder)
    _rewrite_manifest(folder, lambda m: m["files"]["images.npy"].pop("shape"))   # no shape: rows only
    assert cache.read_entry(folder)[0]["images"].shape == (3, 5)
    _reseal(folder, "caption_to_image.npy", cache.npy_bytes(np.arange(5)))
    _rewrite_manifest(folder, lambda m: m["files"]["caption_to_image.npy"].update(rows=5, shape=[5]))
    with pytest.raises(cache.CacheError, match="image/caption counts disagree between files"):
        cache.read_entry(folder)


def test_read_entry_rereads_a_replaced_folder(tmp_path, monkeypatch):
    folder = tmp_path / "e"
    _entry(folder)
    inodes = iter([1, 2, 2, 2])                                   # replaced during the first read only
    monkeypatch.setattr(cache, "_inode", lambda f: next(inodes))
    real, calls = cache._read_entry_once, []

    def flaky(*a):
        calls.append(1)
        if len(calls) == 1:
            raise cache.CacheError("half", reason="corrupt")
        return real(*a)
    monkeypatch.setattr(cache, "_read_entry_once", flaky)
    assert cache.read_entry(folder)[0]["images"].shape == (3, 4) and len(calls) == 2


def test_read_entry_same_folder_errors_pass_through(tmp_path, monkeypatch):
    folder = tmp_path / "e"
    _entry(folder)
    calls = []

    def stale(*a):
        calls.append(1)
        raise cache.CacheError("stale one", reason="stale")
    monkeypatch.setattr(cache, "_read_entry_once", stale)
    with pytest.raises(cache.CacheError, match="stale one") as err:
        cache.read_entry(folder)
    assert err.value.reason == "stale" and calls == [1]


def test_read_entry_folder_removed_while_read_is_missing(tmp_path, monkeypatch):
    folder = tmp_path / "e"
    _entry(folder)
    inodes = iter([(1, 1), None])
    monkeypatch.setattr(cache, "_inode", lambda f: next(inodes))

    def gone(*a):
        raise FileNotFoundError(2, "No such file", str(folder / "images.npy"))
    monkeypatch.setattr(cache, "_read_entry_once", gone)
    with pytest.raises(cache.CacheError, match="no cached embeddings at .* \\(it was replaced while being read\\)") \
            as err:
        cache.read_entry(folder)
    assert err.value.reason == "missing" and err.value.__cause__ is None and err.value.__suppress_context__


def test_read_entry_gives_up_after_ten_replacements(tmp_path, monkeypatch):
    folder = tmp_path / "e"
    _entry(folder)
    counter = iter(range(1000))
    monkeypatch.setattr(cache, "_inode", lambda f: (0, next(counter)))
    calls = []

    def replaced(*a):
        calls.append(1)
        raise cache.CacheError("half", reason="corrupt")
    monkeypatch.setattr(cache, "_read_entry_once", replaced)
    with pytest.raises(cache.CacheError, match="replaced by other writers during 10 reads in a row") as err:
        cache.read_entry(folder)
    assert err.value.reason == "missing" and len(calls) == 10


def test_read_entry_other_errors_are_not_caught(tmp_path, monkeypatch):
    def perm(*a):
        raise PermissionError("no")
    monkeypatch.setattr(cache, "_read_entry_once", perm)
    with pytest.raises(PermissionError):
        cache.read_entry(tmp_path)


def test_inode_of_a_folder_and_of_nothing(tmp_path):
    st = os.stat(tmp_path)
    assert cache._inode(tmp_path) == (st.st_dev, st.st_ino)
    assert cache._inode(tmp_path / "absent") is None


# ------------------------------------------------------------------------------------------------ content keys
def test_content_key_by_hand():
    digests = [hashlib.sha256(b"a").hexdigest(), hashlib.sha256(b"b").hexdigest()]
    key, doc = cache.content_key({"family": "x"}, "image", iter(digests), {"opt": 1})
    expect = {"format": cache.CONTENT_FORMAT, "encoder": {"family": "x"}, "modality": "image", "n_items": 2,
              "content_sha256": hashlib.sha256("".join(digests).encode("ascii")).hexdigest(), "options": {"opt": 1}}
    assert doc == expect and cache.CONTENT_FORMAT == 1
    canonical = json.dumps(expect, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    assert key == hashlib.sha256(canonical).hexdigest()
    assert cache._canonical({"b": 1, "a": "é"}) == b'{"a":"\\u00e9","b":1}'
    key0, doc0 = cache.content_key({"family": "x"}, 3, [])
    assert doc0["options"] == {} and doc0["n_items"] == 0 and doc0["modality"] == "3"
    assert doc0["content_sha256"] == hashlib.sha256(b"").hexdigest()
    assert cache.content_key({"family": "x"}, "image", digests[::-1])[0] != cache.content_key({"family": "x"},
                                                                                            "image", digests)[0]


def test_content_key_checks():
    with pytest.raises(ValueError, match="identity must be a non-empty mapping naming the encoder; got \\{\\}"):
        cache.content_key({}, "image", [])
    with pytest.raises(ValueError, match="identity must be a non-empty mapping"):
        cache.content_key([("family", "x")], "image", [])
    for bad in ["a" * 63, "a" * 65, 7]:
        with pytest.raises(ValueError, match="content_sha256 must hold 64-hex sha256 digests; got"):
            cache.content_key({"f": 1}, "image", ["b" * 64, bad])
    with pytest.raises(ValueError, match="the encoder identity and options must be JSON values"):
        cache.content_key({"f": object()}, "image", [])
    with pytest.raises(ValueError, match="must be JSON values"):
        cache.content_key({"f": 1}, "image", [], {"o": {1, 2}})


def test_owner_tag_is_host_and_pid():
    host = "".join(c if c.isalnum() else "_" for c in socket.gethostname())[:32] or "host"
    assert cache._owner_tag() == f"{host}-{os.getpid()}"


def test_alive():
    assert cache._alive(os.getpid()) is True
    assert cache._alive(_dead_pid()) is False


def test_sweep_stale_removes_only_dead_writers_of_this_host(tmp_path):
    host = cache._owner_tag().rsplit("-", 1)[0]
    dead, me, parent = _dead_pid(), os.getpid(), os.getppid()
    names = {
        f".x.{host}-{dead}.a.tmp": False,          # dead writer of this host, a file: removed
        f".x.{host}-{dead}.b.tmp/": False,         # dead writer, a folder: removed
        f".x.{host}-{me}.c.tmp": True,             # this process
        f".x.{host}-{parent}.d.tmp": True,         # a live process
        f".x.other-{dead}.e.tmp": True,            # another host
        f".x.{host}-abc.f.tmp": True,              # no pid
        f".x.{host}-{dead}.g.old": True,           # not a staging name
        f".y.{host}-{dead}.h.tmp": True,           # another prefix
        f".x.{host}{dead}.i.tmp": True,            # no host-pid separator
    }
    for name in names:
        if name.endswith("/"):
            (tmp_path / name).mkdir()
            (tmp_path / name / "f").write_bytes(b"1")
        else:
            (tmp_path / name).write_bytes(b"1")
    cache._sweep_stale(tmp_path, ".x.")
    for name, kept in names.items():
        assert (tmp_path / name.rstrip("/")).exists() == kept, name
    cache._sweep_stale(tmp_path / "absent", ".x.")          # a missing folder: nothing to do


def test_sweep_stale_leaves_a_link_to_a_folder_and_its_target(tmp_path):
    host = cache._owner_tag().rsplit("-", 1)[0]
    target = tmp_path / "keep"
    target.mkdir()
    (target / "f").write_bytes(b"1")
    link = tmp_path / f".x.{host}-{_dead_pid()}.a.tmp"
    link.symlink_to(target)
    cache._sweep_stale(tmp_path, ".x.")
    assert not link.is_symlink() and (target / "f").exists()       # the link is unlinked, the target kept


def test_mkdtemp_name_and_permissions(tmp_path):
    old = os.umask(0o027)
    try:
        tmp = cache._mkdtemp(tmp_path / "a-very-long-entry-folder-name")
    finally:
        os.umask(old)
    assert tmp.parent == tmp_path and tmp.is_dir() and list(tmp.iterdir()) == []
    assert tmp.name.startswith(f".a-very-long-entr.{cache._owner_tag()}.") and tmp.name.endswith(".tmp")
    assert (tmp.stat().st_mode & 0o777) == 0o750


def test_staged_creates_the_parent_and_removes_a_failed_stage(tmp_path):
    folder = tmp_path / "p" / "q" / "e"
    with cache._staged(folder) as tmp:
        (tmp / "f").write_bytes(b"1")
    assert (folder / "f").read_bytes() == b"1"
    with pytest.raises(KeyError):
        with cache._staged(folder) as tmp:
            (tmp / "f").write_bytes(b"2")
            raise KeyError("x")
    assert (folder / "f").read_bytes() == b"1" and sorted(p.name for p in folder.parent.iterdir()) == ["e"]


def test_publish_renames_replaces_or_keeps(tmp_path):
    def stage(content):
        tmp = tmp_path / f".stage-{content}"
        tmp.mkdir()
        (tmp / "f").write_text(content)
        return tmp
    folder = tmp_path / "e"
    cache._publish(stage("1"), folder, None)
    assert (folder / "f").read_text() == "1"
    cache._publish(stage("2"), folder, None)                  # no verify: the newest write wins
    assert (folder / "f").read_text() == "2"
    kept = stage("3")
    cache._publish(kept, folder, lambda: None)                # verify accepts the entry there: it is kept
    assert (folder / "f").read_text() == "2" and kept.exists()

    def refuse():
        raise cache.CacheError("bad")
    cache._publish(kept, folder, refuse)                      # verify refuses it: replaced
    assert (folder / "f").read_text() == "3" and not kept.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".stage-1", ".stage-2", "e"] or \
        sorted(p.name for p in tmp_path.iterdir()) == ["e"]


def test_publish_other_errors_propagate_and_endless_replacement_gives_up(tmp_path, monkeypatch):
    tmp = tmp_path / "s"
    tmp.mkdir()
    with pytest.raises(FileNotFoundError):
        cache._publish(tmp_path / "absent", tmp_path / "e", None)
    folder = tmp_path / "e"
    folder.mkdir()
    (folder / "f").write_text("x")
    real = os.rename
    calls = []

    def always_taken(src, dst):
        calls.append((src, dst))
        if src == tmp:        # another writer always got there first
            raise OSError(39, "Directory not empty")
        real(src, dst)
        folder.mkdir()
        (folder / "f").write_text("y")
    monkeypatch.setattr(cache.os, "rename", always_taken)
    # an entry that is always replaced (verify=None): after moving one aside, the entry found again is newer: kept
    cache._publish(tmp, folder, None)
    assert sum(1 for s, _ in calls if s == tmp) == 2 and (folder / "f").read_text() == "y" and tmp.exists()
    calls.clear()

    def never_valid():
        raise cache.CacheError("bad", reason="corrupt")
    with pytest.raises(cache.CacheError, match="could not publish the cache entry .*: other processes keep "
                                               "replacing it; rerun") as err:
        cache._publish(tmp, folder, never_valid)   # every entry found fails verification: replaced until give-up
    assert err.value.reason == "corrupt" and sum(1 for s, _ in calls if s == tmp) == cache.PUBLISH_ATTEMPTS == 8


# ------------------------------------------------------------------------------------------------ content entries
def _content(tmp_path, n=4, d=6):
    key, doc = cache.content_key({"family": "t"}, "text", [hashlib.sha256(bytes([i])).hexdigest() for i in range(n)])
    emb = _unit(n, d, seed=5)
    folder = cache.write_content_entry(key, doc, emb.astype(np.float64), label="t:m", cache_dir=tmp_path)
    return key, doc, emb, folder


def test_write_content_entry_files_and_read_back(tmp_path):
    key, doc, emb, folder = _content(tmp_path)
    assert folder == tmp_path / "encodings" / "t_m" / key
    assert sorted(p.name for p in folder.iterdir()) == ["embeddings.npy", "manifest.json"]
    data = (folder / "embeddings.npy").read_bytes()
    man = json.loads((folder / "manifest.json").read_text())
    assert man["format"] == 1 and man["key"] == key and man["document"] == doc and isinstance(man["created"], str)
    assert man["files"] == {"embeddings.npy": {"sha256": hashlib.sha256(data).hexdigest(), "shape": [4, 6],
                                               "dtype": "float32", "bytes": len(data)}}
    got = cache.read_content_entry(key, doc, label="t:m", cache_dir=tmp_path)
    assert got.dtype == np.float32 and np.array_equal(got, emb)
    assert sorted(p.name for p in folder.parent.iterdir()) == [key]       # no staging left


def test_write_content_entry_shape_check(tmp_path):
    key, doc = cache.content_key({"family": "t"}, "text", ["a" * 64, "b" * 64])
    for bad in (np.ones((3, 4)), np.ones(2), np.ones((2, 4, 1))):
        with pytest.raises(ValueError, match=re.escape(f"embeddings must have shape (n_items=2, d); got {bad.shape}")):
            cache.write_content_entry(key, doc, bad, label="t", cache_dir=tmp_path)
    assert not (tmp_path / "encodings").exists()


def test_write_content_entry_keeps_a_valid_entry_and_replaces_a_corrupt_one(tmp_path):
    key, doc, emb, folder = _content(tmp_path)
    other = _unit(4, 6, seed=9)
    cache.write_content_entry(key, doc, other, label="t:m", cache_dir=tmp_path)     # a valid entry is there: kept
    assert np.array_equal(cache.read_content_entry(key, doc, label="t:m", cache_dir=tmp_path), emb)
    (folder / "embeddings.npy").write_bytes(b"junk")
    cache.write_content_entry(key, doc, other, label="t:m", cache_dir=tmp_path)     # corrupt: replaced
    assert np.array_equal(cache.read_content_entry(key, doc, label="t:m", cache_dir=tmp_path), other)
    assert sorted(p.name for p in folder.parent.iterdir()) == [key]


def _read(tmp_path, key, doc):
    return cache.read_content_entry(key, doc, label="t:m", cache_dir=tmp_path)


def _reseal_content(folder, data: bytes, **info):
    (folder / "embeddings.npy").write_bytes(data)
    man = json.loads((folder / "manifest.json").read_text())
    man["files"]["embeddings.npy"].update(sha256=hashlib.sha256(data).hexdigest(), **info)
    (folder / "manifest.json").write_text(json.dumps(man))


def test_read_content_entry_missing_stale_and_malformed(tmp_path):
    key, doc, emb, folder = _content(tmp_path)
    with pytest.raises(cache.CacheError, match="no cached encodings at") as err:
        cache.read_content_entry(key, doc, label="other", cache_dir=tmp_path)
    assert err.value.reason == "missing"
    with pytest.raises(cache.CacheError, match="was written for another key .*: delete .* and rerun") as err:
        _read(tmp_path, key, {**doc, "options": {"x": 1}})
    assert err.value.reason == "stale"
    man = json.loads((folder / "manifest.json").read_text())
    man["key"] = "0" * 64
    (folder / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(cache.CacheError, match="was written for another key") as err:
        _read(tmp_path, key, doc)
    good = {**man, "key": key}
    for broken in ("{oops", json.dumps({**good, "files": {}}), json.dumps({**good, "files": []}),
                   json.dumps({k: v for k, v in good.items() if k != "document"}),
                   json.dumps({k: v for k, v in good.items() if k != "key"}),
                   json.dumps({**good, "files": {"embeddings.npy": {"sha256": "x", "shape": ["a"]}}}),
                   json.dumps({**good, "files": {"embeddings.npy": {"sha256": "x", "shape": None}}}),
                   json.dumps({**good, "files": {"embeddings.npy": {"shape": [4, 6]}}})):
        (folder / "manifest.json").write_text(broken)
        with pytest.raises(cache.CacheError, match="is not a hubnorm encodings manifest .*: delete .* and rerun") \
                as err:
            _read(tmp_path, key, doc)
        assert err.value.reason == "corrupt"
    (folder / "manifest.json").write_text(json.dumps(good))
    assert np.array_equal(_read(tmp_path, key, doc), emb)


def test_read_content_entry_file_checks(tmp_path):
    key, doc, emb, folder = _content(tmp_path)
    data = (folder / "embeddings.npy").read_bytes()
    (folder / "embeddings.npy").write_bytes(data[:-4])
    with pytest.raises(cache.CacheError, match=r"embeddings.npy is corrupt: sha256 [0-9a-f]{12}\.\.\. != "
                                               r"[0-9a-f]{12}\.\.\. in the manifest \(truncated") as err:
        _read(tmp_path, key, doc)
    assert err.value.reason == "corrupt"
    (folder / "embeddings.npy").unlink()
    (folder / "embeddings.npy").mkdir()
    with pytest.raises(cache.CacheError, match="embeddings.npy cannot be read .*: delete") as err:
        _read(tmp_path, key, doc)
    assert err.value.reason == "corrupt"
    (folder / "embeddings.npy").rmdir()
    _reseal_content(folder, b"not npy")
    with pytest.raises(cache.CacheError, match="embeddings.npy cannot be read") as err:
        _read(tmp_path, key, doc)
    assert err.value.reason == "corrupt"
    _reseal_content(folder, data)
    assert np.array_equal(_read(tmp_path, key, doc), emb)


@pytest.mark.parametrize("arr, shape, message", [
    (_unit(4, 6).astype(np.float64), [4, 6], r"holds float64 \(4, 6\); the manifest says float32 \[4, 6\] for 4"),
    (_unit(4, 6)[:, :5], [4, 6], r"holds float32 \(4, 5\)"),
    (_unit(3, 6), [3, 6], r"holds float32 \(3, 6\); the manifest says float32 \[3, 6\] for 4 inputs"),
    (_unit(4, 6).reshape(4, 6, 1), [4, 6, 1], r"holds float32 \(4, 6, 1\)"),
    (_unit(4, 6) * 1.01, [4, 6], "has rows that are not finite unit vectors"),
    (_unit(4, 6) * 0.99, [4, 6], "has rows that are not finite unit vectors"),
    (np.where(np.eye(4, 6) > 0, np.nan, _unit(4, 6)).astype(np.float32), [4, 6], "not finite unit vectors"),
])
def test_read_content_entry_array_checks(tmp_path, arr, shape, message):
    key, doc, emb, folder = _content(tmp_path)
    _reseal_content(folder, cache.npy_bytes(arr), shape=shape)
    with pytest.raises(cache.CacheError, match=message) as err:
        _read(tmp_path, key, doc)
    assert err.value.reason == "corrupt"


def test_read_content_entry_unit_row_tolerance(tmp_path):
    key, doc, emb, folder = _content(tmp_path)
    near = (emb.astype(np.float64) * (1 + 5e-4)).astype(np.float32)      # within 1e-3 of unit norm
    _reseal_content(folder, cache.npy_bytes(near))
    assert np.array_equal(_read(tmp_path, key, doc), near)
    far = (emb.astype(np.float64) * (1 - 2e-3)).astype(np.float32)
    _reseal_content(folder, cache.npy_bytes(far))
    with pytest.raises(cache.CacheError, match="not finite unit vectors"):
        _read(tmp_path, key, doc)
