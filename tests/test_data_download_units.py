"""``hubnorm.data.download`` in small pieces, without any network: ``requests.get`` / ``requests.head`` are replaced
by a fake that records every request and answers from a queue of hand-made responses (status, headers, body chunks,
or an exception part-way), and tqdm by a recorder. Checked: the partial's file names, ``discard_partial``, the
validators and ``Content-Range`` parsing on hand-written headers, the metadata file (read back only for the same
URL, written atomically), every branch of ``download`` (fresh, resume with each kind of ``If-Range``, 200 restart,
206 with another start / validator / total, 416 complete or not, the three-attempt limit, HTTP errors), ``_stream``
through ``read1`` and through ``iter_content`` (the bytes, the progress bar's settings, a dropped connection, a short
and a long body), and the hand-over to pooch's output (open file, hard link, the move where links fail).

Survivors judged equivalent (no test can tell them apart):
- ``_content_range``: the default of ``headers.get("Content-Range", "")`` written ``"XXXX"``: a value without a blank
  or a ``/`` fails ``int`` the same way, so both give ``(None, None)``.
- ``download``: ``meta is not None and self.part.exists()`` with ``or``: ``meta`` is None only before any partial
  exists or right after ``discard_partial``, so the partial never exists while ``meta`` is None.
- ``download``: ``meta = None`` written ``meta = ""`` after a 416 or a 206 that drops the partial (2 mutants): the
  partial is gone, so the next attempt asks from byte 0 without reading ``meta``, and a 200 replaces it.
- ``_stream``: ``next(chunks, b"")`` -> ``next(chunks, None)``: both end the loop through ``if not chunk``.
- ``_stream``: ``got > total`` -> ``got >= total`` inside ``if got != total``: the same condition there.
- ``_hand_over``: ``break`` -> ``return`` at the end of the copy loop: the next statement is ``return``.
"""

from __future__ import annotations

import importlib
import json
import os
import sys

import pytest
import requests
import urllib3

dl = importlib.import_module("hubnorm.data.download")

URL = "https://example.org/data/blob.zip"
BLOB = bytes(range(256)) * 4 + b"tail"  # 1028 bytes, every position distinguishable enough for slicing checks


# ------------------------------------------------------------------ fakes
class _Raw:
    """``response.raw``: ``read1`` (urllib3 >= 2) serving the chunks, or raising an exception at its place."""

    def __init__(self, chunks, calls):
        self._chunks = list(chunks)
        self._calls = calls

    def read1(self, n, decode_content=True):
        self._calls.append((n, decode_content))
        if not self._chunks:
            return b""
        item = self._chunks.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item


class _RawNoRead1:
    """``response.raw`` of urllib3 < 2: no ``read1``, so ``iter_content`` is used."""


class _Response:
    def __init__(self, status=200, headers=None, chunks=(), read1=True):
        self.status_code = status
        self.headers = dict(headers or {})
        self.chunks = list(chunks)
        self.read1_calls = []
        self.iter_calls = []
        self.raw = _Raw(self.chunks, self.read1_calls) if read1 else _RawNoRead1()
        self.closed = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.closed = True
        return False

    def raise_for_status(self):
        if self.status_code >= 400:
            raise requests.exceptions.HTTPError(f"{self.status_code} Error for url")

    def iter_content(self, chunk_size=1):
        self.iter_calls.append(chunk_size)

        def gen():
            for item in self.chunks:
                if isinstance(item, BaseException):
                    raise item
                yield item
        return gen()


class _Server:
    """Replaces ``requests.get``: answers with the queued responses in order and records each request."""

    def __init__(self, monkeypatch, *responses):
        self.responses = list(responses)
        self.calls = []
        monkeypatch.setattr(requests, "get", self.get)

    def get(self, url, **kwargs):
        self.calls.append({"url": url, **kwargs})
        if not self.responses:
            raise AssertionError(f"unexpected request #{len(self.calls)} to {url}")
        return self.responses.pop(0)

    def headers(self, i):
        return self.calls[i]["headers"]


class _Bar:
    instances: list = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.updates = []
        self.closed = False
        _Bar.instances.append(self)

    def update(self, n):
        self.updates.append(n)

    def close(self):
        self.closed = True


@pytest.fixture
def bar(monkeypatch):
    import tqdm.auto
    _Bar.instances = []
    monkeypatch.setattr(tqdm.auto, "tqdm", _Bar)
    return _Bar.instances


def _ok(data=BLOB, etag='"v1"', last_modified=None, length="auto", chunk=300, read1=True):
    headers = {}
    if etag is not None:
        headers["ETag"] = etag
    if last_modified is not None:
        headers["Last-Modified"] = last_modified
    if length == "auto":
        headers["Content-Length"] = str(len(data))
    elif length is not None:
        headers["Content-Length"] = length
    return _Response(200, headers, [data[i:i + chunk] for i in range(0, len(data), chunk)], read1=read1)


def _partial(status, start, total, data=b"", etag='"v1"', last_modified=None, content_range="auto"):
    headers = {"Content-Length": str(len(data))}
    if etag is not None:
        headers["ETag"] = etag
    if last_modified is not None:
        headers["Last-Modified"] = last_modified
    if content_range == "auto":
        headers["Content-Range"] = f"bytes {start}-{total - 1}/{total}" if status == 206 else f"bytes */{total}"
    elif content_range is not None:
        headers["Content-Range"] = content_range
    return _Response(status, headers, [data] if data else [])


def _seed(tmp_path, data, meta, name="blob.zip"):
    """A partial download of ``tmp_path / name``: ``data`` in ``.part``, ``meta`` (dict or text) in ``.part.json``."""
    part = tmp_path / (name + ".part")
    part.write_bytes(data)
    if meta is not None:
        (tmp_path / (name + ".part.json")).write_text(meta if isinstance(meta, str) else json.dumps(meta))
    return part


def _meta(tmp_path):
    return json.loads((tmp_path / "blob.zip.part.json").read_text())


# ------------------------------------------------------------------ small helpers
def test_partial_paths_sit_next_to_the_target_with_part_suffixes(tmp_path):
    part, meta = dl.partial_paths(str(tmp_path / "sub" / "a.tar.gz"))
    assert part == tmp_path / "sub" / "a.tar.gz.part" and meta == tmp_path / "sub" / "a.tar.gz.part.json"
    assert isinstance(part, type(tmp_path)) and isinstance(meta, type(tmp_path))


@pytest.mark.parametrize("present", [("part", "json"), ("part",), ("json",), ()])
def test_discard_partial_removes_whichever_files_exist(tmp_path, present):
    target = tmp_path / "f.bin"
    names = {"part": "f.bin.part", "json": "f.bin.part.json"}
    for key in present:
        (tmp_path / names[key]).write_text("x")
    (tmp_path / "f.bin").write_text("final")  # the target itself is left alone
    dl.discard_partial(target)
    assert sorted(os.listdir(tmp_path)) == ["f.bin"]


def test_validators_read_etag_and_last_modified():
    assert dl._validators({"ETag": '"e"', "Last-Modified": "Mon"}) == {"etag": '"e"', "last_modified": "Mon"}
    assert dl._validators({}) == {"etag": None, "last_modified": None}


@pytest.mark.parametrize("meta, headers, same", [
    ({"etag": '"a"'}, {"ETag": '"a"'}, True),
    ({"etag": '"a"'}, {"ETag": '"b"'}, False),
    ({"etag": '"a"'}, {}, False),
    ({}, {"ETag": '"a"'}, False),
    ({"etag": '"a"', "last_modified": "X"}, {"ETag": '"a"', "Last-Modified": "Y"}, True),  # the ETag decides
    ({"etag": '"a"', "last_modified": "X"}, {"ETag": '"b"', "Last-Modified": "X"}, False),
    ({"last_modified": "X"}, {"Last-Modified": "X"}, True),
    ({"last_modified": "X"}, {"Last-Modified": "Y"}, False),
    ({"last_modified": "X"}, {}, False),
    ({}, {"Last-Modified": "X"}, False),
    ({"etag": None, "last_modified": None}, {}, True),  # nothing to compare: the caller compares sizes
    ({}, {}, True),
])
def test_same_file_compares_the_strongest_validator_either_side_has(meta, headers, same):
    assert dl._same_file(meta, headers) is same


@pytest.mark.parametrize("value, expected", [
    ("bytes 0-9/10", (0, 10)),
    ("bytes 5-9/10", (5, 10)),
    ("  bytes 7-9/10  ", (7, 10)),
    ("bytes */1234", (None, 1234)),
    ("bytes 5-9/*", (5, None)),
    ("bytes 5-9", (5, None)),
    ("bytes x-9/10", (None, None)),
    ("bytes 5-9/ten", (None, None)),
    ("bytes 5-9/1 0", (None, None)),  # split at the first blank: a total with a blank is malformed
    ("", (None, None)),
])
def test_content_range_parses_start_and_total(value, expected):
    assert dl._content_range({"Content-Range": value}) == expected


def test_content_range_without_the_header_is_unknown():
    assert dl._content_range({}) == (None, None)


# ------------------------------------------------------------------ construction, metadata
def test_constructor_stores_its_settings_and_the_partial_paths(tmp_path):
    d = dl.ResumableHTTPDownloader(str(tmp_path / "x.zip"), progressbar=1, chunk_size="64", timeout=7.5)
    assert d.target == tmp_path / "x.zip" and isinstance(d.target, type(tmp_path))
    assert d.part == tmp_path / "x.zip.part" and d.meta_path == tmp_path / "x.zip.part.json"
    assert d.progressbar is True and d.chunk_size == 64 and d.timeout == 7.5
    d = dl.ResumableHTTPDownloader(tmp_path / "x.zip")
    assert d.progressbar is False and d.chunk_size == dl.CHUNK_SIZE == 1 << 20
    assert d.timeout == dl.DEFAULT_TIMEOUT == 30
    d = dl.ResumableHTTPDownloader(tmp_path / "x.zip", progressbar=0)
    assert d.progressbar is False


def test_read_meta_trusts_only_a_json_object_for_the_same_url(tmp_path):
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    assert d._read_meta(URL) is None  # no file
    d.meta_path.write_text("{not json")
    assert d._read_meta(URL) is None
    d.meta_path.write_text(json.dumps([URL]))
    assert d._read_meta(URL) is None
    d.meta_path.write_text(json.dumps({"url": URL + "?v=2", "etag": '"v1"'}))
    assert d._read_meta(URL) is None
    d.meta_path.write_text(json.dumps({"etag": '"v1"'}))
    assert d._read_meta(URL) is None
    meta = {"url": URL, "etag": '"v1"', "last_modified": None, "total": 12}
    d.meta_path.write_text(json.dumps(meta))
    assert d._read_meta(URL) == meta


def test_write_meta_replaces_the_file_and_leaves_no_temporary(tmp_path):
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    d.meta_path.write_text("old")
    d._write_meta({"url": URL, "total": 3})
    assert json.loads(d.meta_path.read_text()) == {"url": URL, "total": 3}
    assert sorted(os.listdir(tmp_path)) == ["blob.zip.part.json"]


def test_an_interrupted_metadata_write_keeps_the_old_file(tmp_path, monkeypatch):
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    d.meta_path.write_text("old")

    def crash(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        d._write_meta({"url": URL})
    assert d.meta_path.read_text() == "old"
    assert json.loads((tmp_path / "blob.zip.part.json.tmp").read_text()) == {"url": URL}


# ------------------------------------------------------------------ download: fresh and restarted
def test_fresh_download_writes_part_and_metadata(tmp_path, monkeypatch, bar):
    srv = _Server(monkeypatch, _ok(last_modified="Tue, 01 Jan 2030 00:00:00 GMT"))
    d = dl.ResumableHTTPDownloader(tmp_path / "sub" / "dir" / "blob.zip", chunk_size=100, timeout=4)
    assert d.download(URL) == tmp_path / "sub" / "dir" / "blob.zip.part"
    assert d.part.read_bytes() == BLOB
    assert json.loads(d.meta_path.read_text()) == {"url": URL, "etag": '"v1"',
                                                   "last_modified": "Tue, 01 Jan 2030 00:00:00 GMT",
                                                   "total": len(BLOB)}
    assert srv.calls == [{"url": URL, "headers": {"Accept-Encoding": "identity"}, "stream": True, "timeout": 4}]
    assert sorted(os.listdir(tmp_path / "sub" / "dir")) == ["blob.zip.part", "blob.zip.part.json"]
    (b,) = bar
    assert b.kwargs == {"total": len(BLOB), "initial": 0, "unit": "B", "unit_scale": True, "unit_divisor": 1024,
                        "ncols": 79, "ascii": sys.platform == "win32", "desc": "blob.zip", "disable": True}
    assert b.updates == [300, 300, 300, 128] and b.closed


def test_progressbar_flag_enables_the_bar(tmp_path, monkeypatch, bar):
    _Server(monkeypatch, _ok())
    dl.ResumableHTTPDownloader(tmp_path / "blob.zip", progressbar=True).download(URL)
    assert bar[0].kwargs["disable"] is False


def test_the_bar_is_ascii_on_windows(tmp_path, monkeypatch, bar):
    _Server(monkeypatch, _ok())
    monkeypatch.setattr(sys, "platform", "win32")
    dl.ResumableHTTPDownloader(tmp_path / "blob.zip").download(URL)
    monkeypatch.undo()
    assert bar[0].kwargs["ascii"] is True


def test_the_folder_may_exist_already(tmp_path, monkeypatch, bar):
    _Server(monkeypatch, _ok())
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    d.download(URL)
    assert d.part.read_bytes() == BLOB


@pytest.mark.parametrize("length", [None, "12ab", ""])
def test_fresh_download_without_a_usable_length_has_no_total(tmp_path, monkeypatch, bar, length):
    _Server(monkeypatch, _ok(length=length, etag=None))
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    d.download(URL)
    assert d.part.read_bytes() == BLOB
    assert _meta(tmp_path) == {"url": URL, "etag": None, "last_modified": None, "total": None}
    assert bar[0].kwargs["total"] is None


def test_partial_without_metadata_is_discarded_and_downloaded_again(tmp_path, monkeypatch, bar):
    _seed(tmp_path, b"garbage", None)
    srv = _Server(monkeypatch, _ok())
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    d.download(URL)
    assert srv.headers(0) == {"Accept-Encoding": "identity"} and d.part.read_bytes() == BLOB


@pytest.mark.parametrize("meta", [{"url": URL + "/other", "etag": '"v1"', "total": len(BLOB)}, "[]", "{broken"])
def test_partial_with_foreign_or_broken_metadata_is_discarded(tmp_path, monkeypatch, bar, meta):
    _seed(tmp_path, BLOB[:100], meta)
    srv = _Server(monkeypatch, _ok())
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    d.download(URL)
    assert srv.headers(0) == {"Accept-Encoding": "identity"} and d.part.read_bytes() == BLOB
    assert _meta(tmp_path)["url"] == URL


def test_metadata_without_a_partial_is_removed_before_downloading(tmp_path, monkeypatch, bar):
    (tmp_path / "blob.zip.part.json").write_text(json.dumps({"url": URL, "etag": '"v1"', "total": 5}))
    srv = _Server(monkeypatch, _Response(500))
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    with pytest.raises(requests.exceptions.HTTPError, match="500 Error"):
        d.download(URL)
    assert os.listdir(tmp_path) == [] and len(srv.calls) == 1


def test_a_416_to_a_request_without_range_is_an_http_error(tmp_path, monkeypatch, bar):
    srv = _Server(monkeypatch, _partial(416, None, 0))
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    with pytest.raises(requests.exceptions.HTTPError, match="416 Error"):
        d.download(URL)
    assert len(srv.calls) == 1 and os.listdir(tmp_path) == []


def test_http_error_is_raised_and_an_existing_partial_kept(tmp_path, monkeypatch, bar):
    meta = {"url": URL, "etag": '"v1"', "last_modified": None, "total": len(BLOB)}
    _seed(tmp_path, BLOB[:100], meta)
    srv = _Server(monkeypatch, _Response(404, {"ETag": '"v1"'}))
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    with pytest.raises(requests.exceptions.HTTPError, match="404 Error"):
        d.download(URL)
    assert d.part.read_bytes() == BLOB[:100] and _meta(tmp_path) == meta and len(srv.calls) == 1
    assert bar == []  # nothing streamed


# ------------------------------------------------------------------ download: resuming
def test_resume_appends_the_rest_after_a_matching_206(tmp_path, monkeypatch, bar):
    cut = 400
    meta = {"url": URL, "etag": '"v1"', "last_modified": "Mon", "total": len(BLOB)}
    _seed(tmp_path, BLOB[:cut], meta)
    srv = _Server(monkeypatch, _partial(206, cut, len(BLOB), BLOB[cut:]))
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip", timeout=9)
    assert d.download(URL) == d.part
    assert d.part.read_bytes() == BLOB
    assert srv.calls == [{"url": URL, "headers": {"Accept-Encoding": "identity", "Range": f"bytes={cut}-",
                                                  "If-Range": '"v1"'}, "stream": True, "timeout": 9}]
    assert _meta(tmp_path) == meta  # unchanged
    assert bar[0].kwargs["initial"] == cut and bar[0].kwargs["total"] == len(BLOB)
    assert bar[0].updates == [len(BLOB) - cut]


@pytest.mark.parametrize("etag, last_modified, if_range", [
    ('W/"weak"', "Mon, 02 Feb 2026", "Mon, 02 Feb 2026"),  # a weak ETag may not be used in If-Range
    (None, "Mon, 02 Feb 2026", "Mon, 02 Feb 2026"),
    ("", "Mon, 02 Feb 2026", "Mon, 02 Feb 2026"),
    ('W/"weak"', None, None),
    (None, None, None),
    ('"strong"', None, '"strong"'),
])
def test_if_range_uses_a_strong_etag_else_last_modified(tmp_path, monkeypatch, bar, etag, last_modified, if_range):
    cut = 10
    _seed(tmp_path, BLOB[:cut], {"url": URL, "etag": etag, "last_modified": last_modified, "total": len(BLOB)})
    srv = _Server(monkeypatch, _partial(206, cut, len(BLOB), BLOB[cut:], etag=etag, last_modified=last_modified))
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    d.download(URL)
    expected = {"Accept-Encoding": "identity", "Range": f"bytes={cut}-"}
    if if_range is not None:
        expected["If-Range"] = if_range
    assert srv.headers(0) == expected
    assert d.part.read_bytes() == BLOB


def test_resume_with_unknown_total_accepts_any_total(tmp_path, monkeypatch, bar):
    cut = 50
    _seed(tmp_path, BLOB[:cut], {"url": URL, "etag": '"v1"', "last_modified": None, "total": None})
    srv = _Server(monkeypatch, _partial(206, cut, len(BLOB), BLOB[cut:]))
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    d.download(URL)
    assert d.part.read_bytes() == BLOB and len(srv.calls) == 1
    assert bar[0].kwargs["total"] is None  # the metadata's total, not the header's


def test_a_200_to_a_range_request_restarts_from_byte_zero(tmp_path, monkeypatch, bar):
    cut = 300
    _seed(tmp_path, b"X" * cut, {"url": URL, "etag": '"v1"', "last_modified": None, "total": len(BLOB)})
    new = BLOB[::-1]
    srv = _Server(monkeypatch, _ok(new, etag='"v2"'))
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    d.download(URL)
    assert srv.headers(0)["Range"] == f"bytes={cut}-"
    assert d.part.read_bytes() == new  # written from 0, not appended
    assert _meta(tmp_path) == {"url": URL, "etag": '"v2"', "last_modified": None, "total": len(new)}
    assert bar[0].kwargs["initial"] == 0


@pytest.mark.parametrize("case", ["start", "etag", "total", "no-range"])
def test_a_206_for_another_range_or_file_drops_the_partial_and_asks_again(tmp_path, monkeypatch, bar, case):
    cut = 200
    _seed(tmp_path, BLOB[:cut], {"url": URL, "etag": '"v1"', "last_modified": None, "total": len(BLOB)})
    wrong = {"start": _partial(206, cut - 1, len(BLOB), BLOB[cut - 1:]),
             "etag": _partial(206, cut, len(BLOB), BLOB[cut:], etag='"v2"'),
             "total": _partial(206, cut, len(BLOB) + 1, BLOB[cut:] + b"!"),
             "no-range": _partial(206, cut, len(BLOB), BLOB[cut:], content_range=None)}[case]
    srv = _Server(monkeypatch, wrong, _ok())
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    d.download(URL)
    assert [c["headers"].get("Range") for c in srv.calls] == [f"bytes={cut}-", None]
    assert d.part.read_bytes() == BLOB and len(bar) == 1


def test_a_206_without_a_range_request_is_not_trusted(tmp_path, monkeypatch, bar):
    _seed(tmp_path, b"", {"url": URL, "etag": '"v1"', "last_modified": None, "total": len(BLOB)})  # empty partial
    srv = _Server(monkeypatch, _partial(206, 0, len(BLOB), BLOB), _ok())
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    d.download(URL)
    assert [c["headers"] for c in srv.calls] == [{"Accept-Encoding": "identity"}] * 2
    assert d.part.read_bytes() == BLOB


def test_three_answers_for_another_range_give_up(tmp_path, monkeypatch, bar):
    cut = 200
    _seed(tmp_path, BLOB[:cut], {"url": URL, "etag": '"v1"', "last_modified": None, "total": len(BLOB)})
    srv = _Server(monkeypatch, *[_partial(206, 0, len(BLOB), BLOB) for _ in range(4)])
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    with pytest.raises(dl.IncompleteDownload, match=r"^could not resume https://example\.org/data/blob\.zip: "
                       r"the server kept answering with another file or range$"):
        d.download(URL)
    assert len(srv.calls) == 3 and os.listdir(tmp_path) == [] and bar == []


def test_incomplete_download_is_a_requests_connection_error():
    assert issubclass(dl.IncompleteDownload, requests.exceptions.ConnectionError)


@pytest.mark.parametrize("total", [len(BLOB), None])
def test_a_416_for_the_exact_size_means_the_partial_is_complete(tmp_path, monkeypatch, bar, total):
    meta = {"url": URL, "etag": '"v1"', "last_modified": None, "total": total}
    _seed(tmp_path, BLOB, meta)
    srv = _Server(monkeypatch, _partial(416, None, len(BLOB)))
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    assert d.download(URL) == d.part
    assert d.part.read_bytes() == BLOB and _meta(tmp_path) == meta and len(srv.calls) == 1 and bar == []


@pytest.mark.parametrize("case", ["server-larger", "server-smaller", "meta-total", "no-total", "no-header"])
def test_a_416_for_another_size_drops_the_partial_and_downloads_again(tmp_path, monkeypatch, bar, case):
    size = len(BLOB)
    meta_total = size + 5 if case == "meta-total" else size
    _seed(tmp_path, BLOB, {"url": URL, "etag": '"v1"', "last_modified": None, "total": meta_total})
    answer = {"server-larger": _partial(416, None, size + 1), "server-smaller": _partial(416, None, size - 1),
              "meta-total": _partial(416, None, size), "no-total": _partial(416, None, size, content_range="bytes */*"),
              "no-header": _partial(416, None, size, content_range=None)}[case]
    srv = _Server(monkeypatch, answer, _ok())
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    d.download(URL)
    assert [c["headers"].get("Range") for c in srv.calls] == [f"bytes={size}-", None]
    assert d.part.read_bytes() == BLOB and len(bar) == 1


def test_a_one_byte_partial_is_resumed(tmp_path, monkeypatch, bar):
    _seed(tmp_path, BLOB[:1], {"url": URL, "etag": '"v1"', "last_modified": None, "total": len(BLOB)})
    srv = _Server(monkeypatch, _partial(206, 1, len(BLOB), BLOB[1:]))
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    d.download(URL)
    assert srv.headers(0) == {"Accept-Encoding": "identity", "Range": "bytes=1-", "If-Range": '"v1"'}
    assert d.part.read_bytes() == BLOB


def test_a_complete_one_byte_partial_is_finished_by_a_416(tmp_path, monkeypatch, bar):
    _seed(tmp_path, b"a", {"url": URL, "etag": '"v1"', "last_modified": None, "total": 1})
    srv = _Server(monkeypatch, _partial(416, None, 1))
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    assert d.download(URL) == d.part and d.part.read_bytes() == b"a" and len(srv.calls) == 1


# ------------------------------------------------------------------ _stream
def test_read1_is_asked_for_chunk_size_raw_bytes(tmp_path, monkeypatch, bar):
    resp = _ok(chunk=100)
    _Server(monkeypatch, resp)
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip", chunk_size=77)
    d.download(URL)
    assert resp.read1_calls == [(77, False)] * (len(resp.chunks) + 1) and resp.iter_calls == []
    assert d.part.read_bytes() == BLOB


def test_iter_content_is_used_without_read1(tmp_path, monkeypatch, bar):
    resp = _ok(chunk=100, read1=False)
    _Server(monkeypatch, resp)
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip", chunk_size=55)
    d.download(URL)
    assert resp.iter_calls == [55] and d.part.read_bytes() == BLOB
    assert bar[0].updates == [100] * 10 + [28]


@pytest.mark.parametrize("exc", [requests.exceptions.ChunkedEncodingError("reset by peer"),
                                 urllib3.exceptions.ProtocolError("reset by peer"), OSError("reset by peer")])
@pytest.mark.parametrize("read1", [True, False])
def test_a_dropped_connection_keeps_the_bytes_read_so_far(tmp_path, monkeypatch, bar, exc, read1):
    resp = _Response(200, {"ETag": '"v1"', "Content-Length": str(len(BLOB))}, [BLOB[:300], BLOB[300:500], exc],
                     read1=read1)
    _Server(monkeypatch, resp)
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    with pytest.raises(dl.IncompleteDownload) as err:
        d.download(URL)
    assert str(err.value) == (f"connection to {URL} ended after 500 of {len(BLOB)} bytes (reset by peer); "
                              f"{d.part} is kept, so a rerun resumes")
    assert err.value.__cause__ is exc
    assert d.part.read_bytes() == BLOB[:500] and _meta(tmp_path)["total"] == len(BLOB)
    assert bar[0].closed and bar[0].updates == [300, 200]


def test_a_dropped_connection_after_a_resume_counts_from_the_offset(tmp_path, monkeypatch, bar):
    cut = 100
    _seed(tmp_path, BLOB[:cut], {"url": URL, "etag": None, "last_modified": None, "total": None})
    resp = _Response(206, {"Content-Range": f"bytes {cut}-{len(BLOB) - 1}/{len(BLOB)}"},
                     [BLOB[cut:250], OSError("gone")])
    _Server(monkeypatch, resp)
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    with pytest.raises(dl.IncompleteDownload, match=r"ended after 250 of \? bytes \(gone\)"):
        d.download(URL)
    assert d.part.read_bytes() == BLOB[:250]


def test_a_short_body_raises_and_keeps_the_partial(tmp_path, monkeypatch, bar):
    resp = _Response(200, {"ETag": '"v1"', "Content-Length": str(len(BLOB))}, [BLOB[:600]])
    _Server(monkeypatch, resp)
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    with pytest.raises(dl.IncompleteDownload) as err:
        d.download(URL)
    assert str(err.value) == (f"connection to {URL} ended after 600 of {len(BLOB)} bytes; {d.part} is kept, so a "
                              f"rerun resumes")
    assert d.part.read_bytes() == BLOB[:600] and _meta(tmp_path)["total"] == len(BLOB)
    assert bar[0].closed


def test_a_body_longer_than_announced_discards_the_partial(tmp_path, monkeypatch, bar):
    resp = _Response(200, {"ETag": '"v1"', "Content-Length": "1000"}, [BLOB[:1001]])
    _Server(monkeypatch, resp)
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    with pytest.raises(dl.IncompleteDownload, match=r"ended after 1001 of 1000 bytes; "):
        d.download(URL)
    assert os.listdir(tmp_path) == []


def test_exact_length_body_passes_the_size_check(tmp_path, monkeypatch, bar):
    _Server(monkeypatch, _Response(200, {"Content-Length": "1"}, [b"a"]))
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    assert d.download(URL) == d.part and d.part.read_bytes() == b"a"


# ------------------------------------------------------------------ hand-over and the pooch protocol
def test_hand_over_to_an_open_file_copies_every_block(tmp_path):
    import io
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip", chunk_size=100)
    d.part.write_bytes(BLOB)
    out = io.BytesIO()
    writes = []
    orig = out.write
    out.write = lambda b: (writes.append(len(b)), orig(b))[1]
    d._hand_over(out)
    assert out.getvalue() == BLOB and writes == [100] * 10 + [28]
    assert d.part.read_bytes() == BLOB  # kept until pooch has verified it


def test_hand_over_to_a_path_hard_links_and_keeps_the_partial(tmp_path):
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    d.part.write_bytes(BLOB)
    d.meta_path.write_text("{}")
    out = tmp_path / "tmpXYZ"
    out.write_bytes(b"")  # pooch's temporary file exists already
    d._hand_over(str(out))
    assert out.read_bytes() == BLOB and os.path.samefile(out, d.part)
    assert sorted(os.listdir(tmp_path)) == ["blob.zip.part", "blob.zip.part.json", "tmpXYZ"]


@pytest.mark.parametrize("stale_link, meta", [(True, True), (False, True), (False, False)])
def test_hand_over_moves_the_partial_where_links_fail(tmp_path, monkeypatch, stale_link, meta):
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    d.part.write_bytes(BLOB)
    if meta:
        d.meta_path.write_text("{}")
    out = tmp_path / "tmpXYZ"
    if stale_link:
        (tmp_path / "tmpXYZ.link").write_bytes(b"old")  # os.link fails: the name is taken
    else:
        def no_links(src, dst):
            raise OSError("links not supported")
        monkeypatch.setattr(os, "link", no_links)
    d._hand_over(out)
    assert out.read_bytes() == BLOB and sorted(os.listdir(tmp_path)) == ["tmpXYZ"]


def test_call_downloads_and_hands_over(tmp_path, monkeypatch, bar):
    srv = _Server(monkeypatch, _ok())
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip")
    out = tmp_path / "pooch-tmp"
    assert d(URL, str(out), None) is None
    assert out.read_bytes() == BLOB and len(srv.calls) == 1 and d.part.exists()


@pytest.mark.parametrize("status, ok", [(200, True), (404, False), (206, False)])
def test_check_only_asks_with_head(tmp_path, monkeypatch, status, ok):
    calls = []

    def head(url, **kwargs):
        calls.append((url, kwargs))
        return _Response(status)

    monkeypatch.setattr(requests, "head", head)
    monkeypatch.setattr(requests, "get", lambda *a, **k: pytest.fail("check_only must not GET"))
    d = dl.ResumableHTTPDownloader(tmp_path / "blob.zip", timeout=3)
    assert d(URL, tmp_path / "out", None, check_only=True) is ok
    assert calls == [(URL, {"timeout": 3, "allow_redirects": True})] and os.listdir(tmp_path) == []


def test_module_exports():
    assert sorted(dl.__all__) == ["IncompleteDownload", "ResumableHTTPDownloader", "discard_partial",
                                  "partial_paths"]
