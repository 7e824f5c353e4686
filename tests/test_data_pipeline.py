"""End to end, offline: PIL-drawn images + Karpathy captions -> open_clip (random init) -> cache -> NNN -> recall."""

import json
import shutil

import numpy as np
import pytest

import hubnorm as hn
from hubnorm.data import CacheError, CacheWarning, encode_split, load_cached_embeddings, verify_split
from hubnorm.data import cache as cache_mod
from hubnorm.data.encoders import OpenClipEncoder

MODEL = "ViT-S-32"  # smallest standard open_clip architecture: ~0.3 s to build on CPU, ~1 s to encode this set
COLOURS = {"red": (220, 30, 30), "green": (30, 180, 60), "blue": (40, 60, 220), "yellow": (230, 210, 20)}
SHAPES = ("circle", "square", "triangle")


def _draw(path, colour, shape, size=64):
    from PIL import Image, ImageDraw
    im = Image.new("RGB", (size, size), (245, 245, 245))
    d = ImageDraw.Draw(im)
    box = (12, 12, size - 12, size - 12)
    if shape == "circle":
        d.ellipse(box, fill=COLOURS[colour])
    elif shape == "square":
        d.rectangle(box, fill=COLOURS[colour])
    else:
        d.polygon([(size // 2, 10), (size - 10, size - 10), (10, size - 10)], fill=COLOURS[colour])
    im.save(path, quality=95)


def make_tiny_coco(root):
    """``root`` = data dir: annotations/dataset_coco.json + coco/images/val2014/*.jpg (6 test, 4 train images)."""
    img_dir = root / "coco" / "images" / "val2014"
    img_dir.mkdir(parents=True)
    images = []
    combos = [(c, s) for c in COLOURS for s in SHAPES]
    splits = ["test"] * 6 + ["train", "restval", "train", "restval"]
    for i, ((colour, shape), split) in enumerate(zip(combos, splits)):
        name = f"COCO_val2014_{i:012d}.jpg"
        _draw(img_dir / name, colour, shape)
        sents = [f"a {colour} {shape}", f"a {shape} that is {colour}", f"{colour} {shape} on white",
                 f"one {colour} {shape}", f"a picture of a {colour} {shape}"]
        if i == 2:
            sents.append(f"a sixth caption: {colour} {shape}")  # COCO has images with 6 captions
        images.append({"filepath": "val2014", "filename": name, "split": split, "cocoid": i,
                       "sentences": [{"raw": s, "tokens": s.split()} for s in sents]})
    (root / "annotations").mkdir()
    (root / "annotations" / "dataset_coco.json").write_text(json.dumps({"images": images, "dataset": "coco"}))
    return root


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = make_tiny_coco(tmp_path_factory.mktemp("data"))
    return {"data_dir": root, "cache_dir": tmp_path_factory.mktemp("cache")}


@pytest.fixture(scope="module")
def encoder():
    """One randomly initialised open_clip model for the module (built lazily on first use)."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the CI box is shared: one thread is faster than two contended ones
    yield OpenClipEncoder(MODEL, None, device="cpu", batch_size=8, progress=False)
    torch.set_num_threads(threads)


@pytest.fixture
def counted(monkeypatch):
    """Count calls of the real open_clip image/text encoders."""
    calls = {"images": 0, "texts": 0}
    orig_i, orig_t = OpenClipEncoder.encode_images, OpenClipEncoder.encode_texts

    def enc_i(self, *a, **k):
        calls["images"] += 1
        return orig_i(self, *a, **k)

    def enc_t(self, *a, **k):
        calls["texts"] += 1
        return orig_t(self, *a, **k)

    monkeypatch.setattr(OpenClipEncoder, "encode_images", enc_i)
    monkeypatch.setattr(OpenClipEncoder, "encode_texts", enc_t)
    return calls


def _encode(tiny, encoder, split, **kw):
    return encode_split("coco", split, MODEL, None, data_dir=tiny["data_dir"], cache_dir=tiny["cache_dir"],
                        encoder=encoder, progress=False, **kw)


def test_end_to_end_encode_cache_nnn_recall(tiny, encoder, counted):
    test = _encode(tiny, encoder, "test")
    train = _encode(tiny, encoder, "train")  # restval folded into train
    assert counted == {"images": 2, "texts": 2}
    assert (test.n_images, test.n_captions) == (6, 31)
    assert (train.n_images, train.n_captions) == (4, 20)
    assert np.bincount(test.caption_to_image).tolist() == [5, 5, 6, 5, 5, 5]  # explicit index, not j // 5
    for x in (test.images, test.captions, train.images):
        assert x.dtype == np.float32 and np.allclose(np.linalg.norm(x, axis=1), 1, atol=1e-5)
    assert test.image_ids[0] == "COCO_val2014_000000000000.jpg" and test.caption_texts[0] == "a red circle"

    # rerun: cache hit, the encoder is not called again
    again = _encode(tiny, encoder, "test")
    assert counted == {"images": 2, "texts": 2}
    np.testing.assert_array_equal(again.images, test.images)

    ds = load_cached_embeddings(f"coco:{MODEL}:none", cache_dir=tiny["cache_dir"], splits=("test", "train"))
    assert ds.source == "real" and ds.meta["model"] == MODEL and ds.meta["pretrained"] == "none"
    assert hn.load_embeddings(f"cache:coco:{MODEL}:none", cache_dir=tiny["cache_dir"],
                              splits=("test",)).split("test").n_captions == 31
    tasks = ds.tasks("test", bank="train")
    for d, task in tasks.items():
        nnn = task.fit(hn.NearestNeighborNormalization(alpha=0.5, k=2))
        res = hn.evaluate(nnn, task)
        assert 0 <= res["R@1"] <= res["R@5"] <= res["R@10"] == 100.0  # 6 images / 31 captions: R@10 is 100 for t2i
        assert res["MnR"] >= 1
    assert counted == {"images": 2, "texts": 2}


def test_corrupt_cache_is_detected_and_reencoded(tiny, encoder, counted):
    first = _encode(tiny, encoder, "test")
    folder = cache_mod.entry_dir("coco", MODEL, None, "test", tiny["cache_dir"])
    base = counted["images"]
    # flip bytes in the middle of the image embeddings (same size: only the checksum can tell)
    path = folder / "images.npy"
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2: len(raw) // 2 + 8] = bytes(8)
    path.write_bytes(bytes(raw))
    with pytest.raises(CacheError, match="corrupt"):
        verify_split("coco", "test", MODEL, None, cache_dir=tiny["cache_dir"])
    with pytest.raises(CacheError, match="--force"):  # load-only path: a clear error naming the fix
        load_cached_embeddings(f"coco:{MODEL}:none", cache_dir=tiny["cache_dir"], splits=("test",))
    with pytest.warns(CacheWarning, match="corrupt"):
        fixed = _encode(tiny, encoder, "test")
    assert counted["images"] == base + 1
    np.testing.assert_allclose(fixed.images, first.images, atol=1e-6)  # same model: same embeddings
    verify_split("coco", "test", MODEL, None, cache_dir=tiny["cache_dir"])

    # truncation
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.warns(CacheWarning, match="corrupt"):
        _encode(tiny, encoder, "test")
    assert counted["images"] == base + 2
    # a deleted file
    (folder / "captions.npy").unlink()
    with pytest.warns(CacheWarning):
        _encode(tiny, encoder, "test")
    assert counted["images"] == base + 3
    _encode(tiny, encoder, "test")
    assert counted["images"] == base + 3


class StubEncoder:
    """Stands in for open_clip where only the cache logic is under test."""

    def __init__(self, dim=16, seed=1):
        self.calls, self.rng, self.dim, self.device = 0, np.random.default_rng(seed), dim, "cpu"

    def _rows(self, n):
        x = self.rng.standard_normal((n, self.dim)).astype(np.float32)
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    def encode_images(self, paths, desc=""):
        self.calls += 1
        return self._rows(len(paths))

    def encode_texts(self, texts, desc=""):
        return self._rows(len(texts))


def test_changed_key_is_not_reused(tiny):
    stub = StubEncoder()
    kw = dict(data_dir=tiny["data_dir"], cache_dir=tiny["cache_dir"], progress=False, encoder=stub)
    a = encode_split("coco", "test", "ViT-S-32-alt", None, **kw)  # other model name: own entry, encoded
    assert stub.calls == 1
    encode_split("coco", "test", "ViT-S-32-alt", None, **kw)
    assert stub.calls == 1
    encode_split("coco", "test", "ViT-S-32-alt", "openai", **kw)  # other pretrained tag
    assert stub.calls == 2
    with pytest.warns(CacheWarning, match="precision"):
        encode_split("coco", "test", "ViT-S-32-alt", None, precision="fp16", **kw)  # other precision
    assert stub.calls == 3

    # an entry whose manifest names another model (e.g. copied by hand) is stale
    folder = cache_mod.entry_dir("coco", "ViT-S-32-alt", None, "test", tiny["cache_dir"])
    man = json.loads((folder / "manifest.json").read_text())
    man["key"]["model"] = "ViT-B-16"
    (folder / "manifest.json").write_text(json.dumps(man))
    with pytest.warns(CacheWarning, match="different key"):
        encode_split("coco", "test", "ViT-S-32-alt", None, **kw)
    assert stub.calls == 4
    # other library versions: stale for the encoder; load_cached_embeddings refuses unless strict_versions=False
    man = json.loads((folder / "manifest.json").read_text())
    man["key"]["versions"]["torch"] = "0.0.1"
    (folder / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(CacheError, match="versions.torch"):
        load_cached_embeddings("coco:ViT-S-32-alt:none", cache_dir=tiny["cache_dir"], splits=("test",))
    with pytest.warns(CacheWarning):
        ds = load_cached_embeddings("coco:ViT-S-32-alt:none", cache_dir=tiny["cache_dir"], splits=("test",),
                                    strict_versions=False)
    assert ds.split("test").n_images == a.n_images
    with pytest.warns(CacheWarning):
        encode_split("coco", "test", "ViT-S-32-alt", None, **kw)
    assert stub.calls == 5

    # changed annotations (same split name, other content) are re-encoded too
    other = tiny["data_dir"].parent / "other_ann"
    other.mkdir(exist_ok=True)
    data = json.loads((tiny["data_dir"] / "annotations" / "dataset_coco.json").read_text())
    data["images"][0]["sentences"][0]["raw"] = "a crimson disc"
    (other / "dataset_coco.json").write_text(json.dumps(data))
    with pytest.warns(CacheWarning, match="annotations_sha256"):
        encode_split("coco", "test", "ViT-S-32-alt", None, annotations=other, **kw)
    assert stub.calls == 6
    shutil.rmtree(other)


def test_missing_images_name_the_fetch_command(tiny, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"python -m hubnorm.data fetch coco --what images"):
        encode_split("coco", "test", MODEL, None, data_dir=tiny["data_dir"], images_root=tmp_path,
                     cache_dir=tmp_path / "c", encoder=StubEncoder(), progress=False)
