"""Downloads never touch the network here: pooch.retrieve is replaced by fakes."""

import hashlib
import json
import zipfile

import pooch
import pytest
import requests

from hubnorm.data import DownloadError, ManualDownloadRequired, fetch, load_cached_embeddings, registry
from hubnorm.data.cli import main


@pytest.fixture
def offline(monkeypatch):
    calls = []

    def fail(url, *a, **k):
        calls.append(url)
        raise requests.exceptions.ConnectionError(f"Failed to resolve host for {url} (simulated: offline)")

    monkeypatch.setattr(pooch, "retrieve", fail)
    return calls


def test_offline_fetch_names_the_url_and_where_to_put_the_file(tmp_path, offline):
    with pytest.raises(DownloadError) as err:
        fetch("coco", "annotations", data_dir=tmp_path, progressbar=False)
    msg = str(err.value)
    res = registry.RESOURCES["karpathy_captions"]
    assert res["url"] in msg and str(tmp_path / "downloads" / "caption_datasets.zip") in msg
    assert res["known_hash"] in msg and "no internet access" in msg
    assert offline == [res["url"]]


def test_offline_cli_exits_2_with_the_message(tmp_path, offline, capsys):
    assert main(["fetch", "coco", "--what", "images", "--split", "test", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "http://images.cocodataset.org/zips/val2014.zip" in err and "val2014.zip" in err
    assert offline == ["http://images.cocodataset.org/zips/val2014.zip"]  # test split needs val2014 only


def test_checksum_mismatch_is_reported(tmp_path, monkeypatch):
    def bad_hash(url, known_hash=None, **k):
        raise ValueError(f"MD5 hash of downloaded file (x) does not match the known hash: expected {known_hash}")

    monkeypatch.setattr(pooch, "retrieve", bad_hash)
    with pytest.raises(DownloadError, match="checksum mismatch"):
        fetch("flickr30k", "annotations", data_dir=tmp_path, progressbar=False)


def test_accepted_hashes_are_checked_after_download(tmp_path, monkeypatch):
    fake = tmp_path / "train2014.zip"
    fake.write_bytes(b"not the real archive")
    seen = {}

    def give(url, known_hash=None, fname=None, path=None, progressbar=False):
        seen["known_hash"] = known_hash
        return str(fake)

    monkeypatch.setattr(pooch, "retrieve", give)
    with pytest.raises(DownloadError, match="matches none of the published checksums"):
        fetch("coco", "images", splits=["train"], data_dir=tmp_path, progressbar=False)
    assert seen["known_hash"] is None


def test_fetch_extracts_the_karpathy_json(tmp_path, monkeypatch):
    zpath = tmp_path / "caption_datasets.zip"
    payload = {"images": [{"filename": "1.jpg", "split": "test", "sentences": [{"raw": "a"}]}]}
    with zipfile.ZipFile(zpath, "w") as zf:
        for name in ("dataset_coco.json", "dataset_flickr30k.json", "dataset_flickr8k.json"):
            zf.writestr(f"caption_datasets/{name}", json.dumps(payload))
    got = {}

    def give(url, known_hash=None, fname=None, path=None, progressbar=False):
        got.update(url=url, known_hash=known_hash, fname=fname, path=path)
        return str(zpath)

    monkeypatch.setattr(pooch, "retrieve", give)
    out = fetch("flickr30k", "annotations", data_dir=tmp_path / "d", progressbar=False)
    assert [p.name for p in out] == ["dataset_flickr30k.json"]
    assert out[0].parent == tmp_path / "d" / "annotations"
    assert got["known_hash"] == "md5:4fa8c08369d22fe16e41dc124bd1adc2" and got["fname"] == "caption_datasets.zip"
    from hubnorm.data import load_captions
    assert load_captions("flickr30k", "test", data_dir=tmp_path / "d").n_captions == 1


def test_flickr_images_must_be_placed_by_hand(tmp_path, offline):
    with pytest.raises(ManualDownloadRequired) as err:
        fetch("flickr30k", "images", data_dir=tmp_path)
    assert str(tmp_path / "flickr30k" / "images") in str(err.value) and "1007129816.jpg" in str(err.value)
    assert offline == []  # no download attempted
    d = tmp_path / "flickr30k" / "images"
    d.mkdir(parents=True)
    (d / "1007129816.jpg").write_bytes(b"jpg")
    assert fetch("flickr30k", "images", data_dir=tmp_path) == [d]


def test_missing_cache_names_the_commands(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        load_cached_embeddings("coco:ViT-B-32-quickgelu:openai", cache_dir=tmp_path)
    msg = str(err.value)
    for cmd in ("python -m hubnorm.data fetch coco --what annotations",
                "python -m hubnorm.data fetch coco --what images",
                "python -m hubnorm.data encode coco --model ViT-B-32-quickgelu --pretrained openai --split test",
                "python -m hubnorm.data encode coco --model ViT-B-32-quickgelu --pretrained openai --split train"):
        assert cmd in msg
    import hubnorm as hn
    with pytest.raises(FileNotFoundError, match="--split test"):
        hn.load_embeddings("cache:flickr30k:ViT-B-32-quickgelu:openai", cache_dir=tmp_path, splits=("test",))
    with pytest.raises(ValueError, match="valid splits"):
        load_cached_embeddings("coco:ViT-B-32-quickgelu:openai", cache_dir=tmp_path, splits=("dev",))
    with pytest.raises(ValueError, match="<dataset>:<model>:<pretrained>"):
        load_cached_embeddings("coco", cache_dir=tmp_path)


def test_registry_entries_are_complete():
    for name, res in registry.RESOURCES.items():
        assert res["url"].startswith("http") and res["fname"] and res["kind"] in ("annotations", "images")
        for h in ([res["known_hash"]] if res["known_hash"] else res.get("accepted_hashes", [])):
            alg, _, digest = h.partition(":")
            assert alg in ("md5", "sha256") and len(digest) == len(hashlib.new(alg).hexdigest())
    for ds, info in registry.DATASETS.items():
        assert set(info["splits"]) == set(registry.SPLITS)
        assert info["images"] == "manual" or all(r in registry.RESOURCES for rs in info["images"].values() for r in rs)
    assert registry.DATASETS["coco"]["splits"]["test"] == (5000, 25010)
    assert registry.DATASETS["flickr30k"]["splits"]["test"] == (1000, 5000)
