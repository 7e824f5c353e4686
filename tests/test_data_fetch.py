"""Downloads never touch the network here: pooch.retrieve is replaced by fakes, or the resumable downloader talks
to a local HTTP server on 127.0.0.1."""

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

    def give(url, known_hash=None, fname=None, path=None, progressbar=False, **k):
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

    def give(url, known_hash=None, fname=None, path=None, progressbar=False, **k):
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


# ------------------------------------------------------------------ resumable downloads (local HTTP server)
import http.server
import os
import threading
from contextlib import contextmanager

import numpy as np

from hubnorm.data.fetch import retrieve

BLOB = np.random.default_rng(0).integers(0, 256, size=1_500_000, dtype=np.uint8).tobytes()


class _Handler(http.server.BaseHTTPRequestHandler):
    """GET with Range support (optional), a fixed ETag, and dropping the connection after N bytes on request."""

    def log_message(self, *a):  # quiet
        pass

    def do_HEAD(self):
        self._serve(body=False)

    def do_GET(self):
        self._serve(body=True)

    def _serve(self, body):
        st = self.server.state
        data, etag = st["data"], st["etag"]
        rng = self.headers.get("Range")
        st["requests"].append({"range": rng, "if_range": self.headers.get("If-Range")})
        start, status = 0, 200
        if rng and st["honor_range"]:
            start = int(rng.split("=")[1].split("-")[0])
            if start >= len(data):
                st["sent"].append(0)  # recorded before answering: the client may finish before this thread goes on
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        self.send_response(status)
        self.send_header("Content-Length", str(len(data) - start))
        self.send_header("ETag", etag)
        self.send_header("Accept-Ranges", "bytes" if st["honor_range"] else "none")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        if not body:
            return
        payload = data[start:]
        if st["drop_after"]:
            payload = payload[:st["drop_after"].pop(0)]  # then close: the client sees a short body
        st["sent"].append(len(payload))
        self.wfile.write(payload)
        self.wfile.flush()
        self.close_connection = True


@contextmanager
def _server(data=BLOB, etag='"v1"', honor_range=True, drop_after=()):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    srv.state = {"data": data, "etag": etag, "honor_range": honor_range, "drop_after": list(drop_after),
                 "requests": [], "sent": []}
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)
        assert not thread.is_alive()


def _resource(monkeypatch, srv, data=BLOB, known_hash="auto"):
    url = f"http://127.0.0.1:{srv.server_address[1]}/blob.zip"
    if known_hash == "auto":
        known_hash = "sha256:" + hashlib.sha256(data).hexdigest()
    monkeypatch.setitem(registry.RESOURCES, "test_blob", {
        "url": url, "fname": "blob.zip", "known_hash": known_hash, "size": "1.5 MB", "kind": "images"})
    return url


def _sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_interrupted_download_resumes_with_a_range_request(tmp_path, monkeypatch):
    cut = 400_000
    with _server(drop_after=[cut]) as srv:
        url = _resource(monkeypatch, srv)
        part = tmp_path / "downloads" / "blob.zip.part"
        with pytest.raises(DownloadError) as err:
            retrieve("test_blob", tmp_path, progressbar=False)
        assert url in str(err.value) and "resumes" in str(err.value) and str(part) in str(err.value)
        assert part.read_bytes() == BLOB[:cut] and not (tmp_path / "downloads" / "blob.zip").exists()
        meta = json.loads((tmp_path / "downloads" / "blob.zip.part.json").read_text())
        assert meta == {"url": url, "etag": '"v1"', "last_modified": None, "total": len(BLOB)}
        path = retrieve("test_blob", tmp_path, progressbar=False)
        reqs = srv.state["requests"]
    assert [r["range"] for r in reqs] == [None, f"bytes={cut}-"] and reqs[1]["if_range"] == '"v1"'
    assert srv.state["sent"] == [cut, len(BLOB) - cut]  # only the rest was sent
    assert _sha256(path) == hashlib.sha256(BLOB).hexdigest()
    assert sorted(os.listdir(tmp_path / "downloads")) == ["blob.zip"]  # partial and pooch's temp file gone
    assert retrieve("test_blob", tmp_path, progressbar=True) == path  # present and verified: no request


def test_server_ignoring_range_still_gives_the_right_file(tmp_path, monkeypatch):
    cut = 300_000
    with _server(honor_range=False, drop_after=[cut]) as srv:
        _resource(monkeypatch, srv)
        with pytest.raises(DownloadError):
            retrieve("test_blob", tmp_path, progressbar=False)
        path = retrieve("test_blob", tmp_path, progressbar=True)  # tqdm bar on
        assert [r["range"] for r in srv.state["requests"]] == [None, f"bytes={cut}-"]
        assert srv.state["sent"] == [cut, len(BLOB)]  # a 200: everything again, written from byte 0
    assert _sha256(path) == hashlib.sha256(BLOB).hexdigest()
    assert sorted(os.listdir(tmp_path / "downloads")) == ["blob.zip"]


def test_changed_etag_restarts_from_zero(tmp_path, monkeypatch):
    cut = 500_000
    new = np.random.default_rng(1).integers(0, 256, size=1_200_000, dtype=np.uint8).tobytes()
    with _server(drop_after=[cut]) as srv:
        _resource(monkeypatch, srv)
        with pytest.raises(DownloadError):
            retrieve("test_blob", tmp_path, progressbar=False)
        srv.state.update(data=new, etag='"v2"')  # the file changed on the server (server ignores If-Range)
        _resource(monkeypatch, srv, data=new)
        path = retrieve("test_blob", tmp_path, progressbar=False)
        assert [r["range"] for r in srv.state["requests"]] == [None, f"bytes={cut}-", None]
    assert path.read_bytes() == new
    assert sorted(os.listdir(tmp_path / "downloads")) == ["blob.zip"]


def test_wrong_checksum_raises_and_deletes_the_partial(tmp_path, monkeypatch):
    cut = 600_000
    with _server(drop_after=[cut]) as srv:
        _resource(monkeypatch, srv, known_hash="sha256:" + "0" * 64)
        with pytest.raises(DownloadError):
            retrieve("test_blob", tmp_path, progressbar=False)
        assert (tmp_path / "downloads" / "blob.zip.part").stat().st_size == cut
        with pytest.raises(DownloadError, match="checksum mismatch") as err:
            retrieve("test_blob", tmp_path, progressbar=False)
        assert "sha256:" + "0" * 64 in str(err.value)
        assert os.listdir(tmp_path / "downloads") == []  # no partial, no final file, no temp file
        with pytest.raises(DownloadError, match="checksum mismatch"):  # next try starts from scratch
            retrieve("test_blob", tmp_path, progressbar=False)
        assert [r["range"] for r in srv.state["requests"]] == [None, f"bytes={cut}-", None]


def test_complete_partial_is_finished_by_a_416(tmp_path, monkeypatch):
    with _server() as srv:
        url = _resource(monkeypatch, srv)
        d = tmp_path / "downloads"
        d.mkdir()
        (d / "blob.zip.part").write_bytes(BLOB)
        (d / "blob.zip.part.json").write_text(json.dumps({"url": url, "etag": '"v1"', "total": len(BLOB)}))
        path = retrieve("test_blob", tmp_path, progressbar=False)
        assert [r["range"] for r in srv.state["requests"]] == [f"bytes={len(BLOB)}-"] and srv.state["sent"] == [0]
    assert _sha256(path) == hashlib.sha256(BLOB).hexdigest() and sorted(os.listdir(d)) == ["blob.zip"]


def test_partial_without_metadata_is_not_trusted(tmp_path, monkeypatch):
    with _server() as srv:
        _resource(monkeypatch, srv)
        d = tmp_path / "downloads"
        d.mkdir()
        (d / "blob.zip.part").write_bytes(b"garbage" * 1000)  # e.g. left by another tool
        path = retrieve("test_blob", tmp_path, progressbar=False)
        assert [r["range"] for r in srv.state["requests"]] == [None]
    assert path.read_bytes() == BLOB


def test_unreachable_server_names_the_url(tmp_path, monkeypatch):
    import socket
    with socket.socket() as s:  # a loopback port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/blob.zip"
    monkeypatch.setitem(registry.RESOURCES, "test_blob", {
        "url": url, "fname": "blob.zip", "known_hash": "md5:" + "1" * 32, "size": "1.5 MB", "kind": "images"})
    with pytest.raises(DownloadError) as err:
        retrieve("test_blob", tmp_path, progressbar=False)
    msg = str(err.value)
    assert url in msg and str(tmp_path / "downloads" / "blob.zip") in msg and "md5:" + "1" * 32 in msg
    assert "no internet access" in msg and not (tmp_path / "downloads" / "blob.zip.part").exists()
