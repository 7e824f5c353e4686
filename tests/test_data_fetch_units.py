"""``hubnorm.data.fetch`` in small pieces, without any network: ``pooch.retrieve`` is replaced by fakes (serving a
local file, or raising what pooch raises), and toy resources / data sets are registered for one test. Checked: the
downloads folder, the checksum hint, ``download_file`` (the folder it makes, which URLs get the resumable
downloader, what pooch is asked, each failure's whole message, the partial kept or deleted), ``retrieve`` (unknown
names, the manual-placement text, the accepted-hash check), member and whole-archive extraction (atomic, by base
name, the marker), and ``fetch``'s choices (what, splits, members of the data set, copied files, manual images,
archives needed once each, in order).

Survivors judged equivalent (no test can tell them apart):
- ``retrieve``: ``ok = False`` -> ``ok = None``: only ``not ok`` reads it, and both are falsy.
- ``retrieve``: ``h.partition(":")`` -> ``h.rpartition(":")``: a published hash ``<alg>:<hex>`` has one colon.
- ``_extract_members``: ``n.rsplit("/", 1)[-1]`` with the maxsplit dropped or 2 (2 mutants): the last piece is the
  same whatever the number of splits.
- ``fetch``: ``target.parent.mkdir(parents=True, exist_ok=True)`` with ``parents`` dropped, None or False (3
  mutants): the parent of ``<data root>/annotations`` is the data root, which ``download_file`` has just created
  (``<data root>/downloads``), so only the last level is ever made.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import zipfile

import pooch
import pytest
import requests

from hubnorm.data import registry

fx = importlib.import_module("hubnorm.data.fetch")   # the module (hubnorm.data.fetch is also a function's name)
dl = importlib.import_module("hubnorm.data.download")

URL = "https://example.org/files/blob.zip"
MANUAL = "place it by hand"


class _Pooch:
    """Replaces ``pooch.retrieve``: records each call; answers by copying ``data`` into place or raising ``exc``."""

    def __init__(self, monkeypatch, data=b"payload", exc=None, path=None):
        self.calls, self.data, self.exc, self.path = [], data, exc, path
        monkeypatch.setattr(pooch, "retrieve", self)

    def __call__(self, url, known_hash=None, fname=None, path=None, progressbar=True, downloader=None):
        self.calls.append({"url": url, "known_hash": known_hash, "fname": fname, "path": path,
                           "progressbar": progressbar, "downloader": downloader})
        if self.exc is not None:
            raise self.exc
        if self.path is not None:
            return str(self.path)
        out = os.path.join(str(path), fname)
        with open(out, "wb") as fh:
            fh.write(self.data)
        return out


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


# ------------------------------------------------------------------ small helpers
def test_downloads_dir_is_under_the_data_root(tmp_path, monkeypatch):
    assert fx.downloads_dir(tmp_path) == tmp_path / "downloads"
    monkeypatch.setenv("HUBNORM_DATA", str(tmp_path / "env"))
    assert fx.downloads_dir() == tmp_path / "env" / "downloads"


@pytest.mark.parametrize("res, hint", [
    ({"known_hash": "md5:aa"}, "md5:aa"),
    ({"known_hash": "md5:aa", "accepted_hashes": ["md5:bb"]}, "md5:aa"),
    ({"known_hash": None, "accepted_hashes": ["md5:bb", "sha256:cc"]}, "md5:bb or sha256:cc"),
    ({"known_hash": "", "accepted_hashes": ["md5:bb"]}, "md5:bb"),
    ({"known_hash": None}, "no published checksum"),
    ({}, "no published checksum"),
    ({"accepted_hashes": []}, "no published checksum"),
])
def test_hash_hint_names_the_checksums_a_file_must_match(res, hint):
    assert fx._hash_hint(res) == hint


# ------------------------------------------------------------------ download_file
@pytest.mark.parametrize("url, resumable", [(URL, True), ("http://example.org/a.zip", True),
                                            ("HTTPS://EXAMPLE.ORG/A.ZIP", True), ("ftp://example.org/a.zip", False),
                                            ("file:///tmp/a.zip", False)])
def test_download_file_asks_pooch_with_the_resumable_downloader_for_http(tmp_path, monkeypatch, url, resumable):
    fake = _Pooch(monkeypatch)
    folder = tmp_path / "a" / "b"
    path = fx.download_file(url, str(folder), "f.zip", "md5:" + "1" * 32, progressbar=False)
    assert path == folder / "f.zip" and isinstance(path, type(tmp_path)) and path.read_bytes() == b"payload"
    (call,) = fake.calls
    downloader = call.pop("downloader")
    assert call == {"url": url, "known_hash": "md5:" + "1" * 32, "fname": "f.zip", "path": folder,
                    "progressbar": False}
    if resumable:
        assert isinstance(downloader, dl.ResumableHTTPDownloader)
        assert downloader.target == folder / "f.zip" and downloader.progressbar is False
    else:
        assert downloader is None


def test_download_file_passes_the_progressbar_on(tmp_path, monkeypatch):
    fake = _Pooch(monkeypatch)
    fx.download_file(URL, tmp_path, "f.zip", None)
    assert fake.calls[0]["progressbar"] is True and fake.calls[0]["downloader"].progressbar is True
    assert fake.calls[0]["known_hash"] is None


def test_download_file_deletes_the_partial_after_success(tmp_path, monkeypatch):
    _Pooch(monkeypatch)
    (tmp_path / "f.zip.part").write_bytes(b"old")
    (tmp_path / "f.zip.part.json").write_text("{}")
    fx.download_file(URL, tmp_path, "f.zip", None, progressbar=False)
    assert sorted(os.listdir(tmp_path)) == ["f.zip"]


@pytest.mark.parametrize("exc", [requests.exceptions.ConnectionError("refused"), requests.exceptions.Timeout("slow"),
                                 ConnectionError("reset"), TimeoutError("timed out")])
def test_download_file_turns_network_errors_into_download_error(tmp_path, monkeypatch, exc):
    _Pooch(monkeypatch, exc=exc)
    with pytest.raises(fx.DownloadError) as err:
        fx.download_file(URL, tmp_path, "f.zip", None, progressbar=False, manual=MANUAL)
    assert str(err.value) == f"could not download {URL}: {type(exc).__name__}: {exc}\n{MANUAL}"
    assert err.value.__cause__ is exc


def test_download_error_without_manual_text_ends_with_a_newline(tmp_path, monkeypatch):
    _Pooch(monkeypatch, exc=requests.exceptions.ConnectionError("refused"))
    (tmp_path / "f.zip.part.json").write_text("{}")  # metadata alone: nothing to resume
    with pytest.raises(fx.DownloadError) as err:
        fx.download_file(URL, tmp_path, "f.zip", None, progressbar=False)
    assert str(err.value) == f"could not download {URL}: ConnectionError: refused\n"


def test_download_error_says_the_partial_is_kept_for_a_resume(tmp_path, monkeypatch):
    _Pooch(monkeypatch, exc=dl.IncompleteDownload("ended after 3 of 9 bytes"))
    (tmp_path / "f.zip.part").write_bytes(b"abc")  # the bytes, without their metadata
    with pytest.raises(fx.DownloadError) as err:
        fx.download_file(URL, tmp_path, "f.zip", None, progressbar=False, manual=MANUAL)
    assert str(err.value) == (f"could not download {URL}: IncompleteDownload: ended after 3 of 9 bytes\nThe bytes "
                              f"received so far are kept in {tmp_path / 'f.zip.part'}; rerunning the same command "
                              f"resumes the download.\n{MANUAL}")
    assert sorted(os.listdir(tmp_path)) == ["f.zip.part"]


@pytest.mark.parametrize("text", ["MD5 hash of downloaded file (x) does not match the known hash", "bad HASH"])
def test_checksum_mismatch_deletes_the_partial(tmp_path, monkeypatch, text):
    exc = ValueError(text)
    _Pooch(monkeypatch, exc=exc)
    (tmp_path / "f.zip.part").write_bytes(b"abc")
    (tmp_path / "f.zip.part.json").write_text("{}")
    with pytest.raises(fx.DownloadError) as err:
        fx.download_file(URL, tmp_path, "f.zip", "md5:" + "0" * 32, progressbar=False, manual=MANUAL)
    assert str(err.value) == f"checksum mismatch for {URL}: {text}\n{MANUAL}" and err.value.__cause__ is exc
    assert os.listdir(tmp_path) == []


def test_other_value_errors_pass_through_and_keep_the_partial(tmp_path, monkeypatch):
    exc = ValueError("Algorithm 'x' not available")
    _Pooch(monkeypatch, exc=exc)
    (tmp_path / "f.zip.part").write_bytes(b"abc")
    with pytest.raises(ValueError) as err:
        fx.download_file(URL, tmp_path, "f.zip", "x", progressbar=False, manual=MANUAL)
    assert err.value is exc and os.listdir(tmp_path) == ["f.zip.part"]


# ------------------------------------------------------------------ retrieve
def _register(monkeypatch, name="toy", **res):
    entry = {"url": URL, "fname": "blob.zip", "known_hash": None, "size": "9 bytes", "kind": "images", **res}
    monkeypatch.setitem(registry.RESOURCES, name, entry)
    return entry


def test_retrieve_rejects_unknown_names(tmp_path):
    with pytest.raises(ValueError) as err:
        fx.retrieve("nope", tmp_path)
    assert str(err.value) == f"unknown resource 'nope'; known: {sorted(registry.RESOURCES)}"


def test_retrieve_downloads_into_the_downloads_folder(tmp_path, monkeypatch):
    _register(monkeypatch, known_hash="md5:" + _md5(b"payload"))
    fake = _Pooch(monkeypatch)
    path = fx.retrieve("toy", tmp_path, progressbar=False)
    assert path == tmp_path / "downloads" / "blob.zip" and path.read_bytes() == b"payload"
    assert fake.calls[0]["known_hash"] == "md5:" + _md5(b"payload") and fake.calls[0]["progressbar"] is False
    assert fake.calls[0]["path"] == tmp_path / "downloads"


def test_retrieve_shows_a_progress_bar_by_default(tmp_path, monkeypatch):
    _register(monkeypatch)
    fake = _Pooch(monkeypatch)
    fx.retrieve("toy", tmp_path)
    assert fake.calls[0]["progressbar"] is True and fake.calls[0]["downloader"].progressbar is True


def test_retrieve_failure_says_where_to_place_the_file(tmp_path, monkeypatch):
    _register(monkeypatch, known_hash="md5:" + "2" * 32)
    _Pooch(monkeypatch, exc=requests.exceptions.ConnectionError("offline"))
    with pytest.raises(fx.DownloadError) as err:
        fx.retrieve("toy", tmp_path, progressbar=False)
    target = tmp_path / "downloads" / "blob.zip"
    assert str(err.value) == (f"could not download {URL}: ConnectionError: offline\nIf this machine has no internet "
                              f"access, download\n    {URL}\n(9 bytes) elsewhere, place it at\n    {target}\n"
                              f"(checksum md5:{'2' * 32}) and rerun the same command: the file is then verified and "
                              "used without downloading.")


@pytest.mark.parametrize("alg", ["md5", "sha256"])
@pytest.mark.parametrize("position", [0, 1])
def test_retrieve_accepts_a_file_matching_any_published_hash(tmp_path, monkeypatch, position, alg):
    good = f"{alg}:" + hashlib.new(alg, b"payload").hexdigest()
    hashes = ["md5:" + "3" * 32, "md5:" + "4" * 32]
    hashes[position] = good
    _register(monkeypatch, accepted_hashes=hashes)
    fake = _Pooch(monkeypatch)
    assert fx.retrieve("toy", tmp_path, progressbar=False).read_bytes() == b"payload"
    assert fake.calls[0]["known_hash"] is None


def test_retrieve_rejects_a_file_matching_no_published_hash(tmp_path, monkeypatch):
    hashes = ["md5:" + "3" * 32, "sha256:" + "4" * 64]
    _register(monkeypatch, accepted_hashes=hashes)
    _Pooch(monkeypatch)
    with pytest.raises(fx.DownloadError) as err:
        fx.retrieve("toy", tmp_path, progressbar=False)
    path = tmp_path / "downloads" / "blob.zip"
    assert str(err.value).startswith(f"{path} matches none of the published checksums {hashes}: the file is corrupt "
                                     "or incomplete; delete it and rerun.\nIf this machine has no internet access")
    assert f"(checksum md5:{'3' * 32} or sha256:{'4' * 64})" in str(err.value)


def test_retrieve_leaves_the_check_to_pooch_when_a_known_hash_is_set(tmp_path, monkeypatch):
    _register(monkeypatch, known_hash="md5:" + _md5(b"payload"), accepted_hashes=["md5:" + "3" * 32])
    _Pooch(monkeypatch)
    assert fx.retrieve("toy", tmp_path, progressbar=False).read_bytes() == b"payload"


def test_retrieve_without_any_hash_accepts_the_file(tmp_path, monkeypatch):
    _register(monkeypatch)
    _Pooch(monkeypatch)
    assert fx.retrieve("toy", tmp_path, progressbar=False).read_bytes() == b"payload"


# ------------------------------------------------------------------ extraction
def _zip(path, members):
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            if name.endswith("/"):
                zf.writestr(zipfile.ZipInfo(name), b"")
            else:
                zf.writestr(name, data)
    return path


def test_extract_members_by_base_name_into_dest(tmp_path):
    z = _zip(tmp_path / "a.zip", {"top/": b"", "top/x.json": b"X", "top/sub/y.json": b"Y", "z.txt": b"Z"})
    dest = tmp_path / "out" / "deep"
    (dest).mkdir(parents=True)
    (dest / "x.json").write_bytes(b"old")
    out = fx._extract_members(z, ["y.json", "x.json"], dest)
    assert out == [dest / "y.json", dest / "x.json"]
    assert (dest / "x.json").read_bytes() == b"X" and (dest / "y.json").read_bytes() == b"Y"
    assert sorted(os.listdir(dest)) == ["x.json", "y.json"]  # no temporary left


def test_extract_members_creates_nested_dest(tmp_path):
    z = _zip(tmp_path / "a.zip", {"x.json": b"X"})
    assert fx._extract_members(z, ["x.json"], tmp_path / "n" / "e" / "w") == [tmp_path / "n" / "e" / "w" / "x.json"]


def test_extract_members_names_a_missing_member_and_the_first_ten_found(tmp_path):
    names = {f"d/f{i:02d}.json": b"." for i in range(12)}
    z = _zip(tmp_path / "a.zip", {"d/": b"", **names})
    with pytest.raises(fx.DownloadError) as err:
        fx._extract_members(z, ["f00.json", "missing.json"], tmp_path / "out")
    found = [f"f{i:02d}.json" for i in range(10)]
    assert str(err.value) == f"{z} has no member missing.json (found {found})"


def test_extract_all_unzips_once_and_leaves_a_marker(tmp_path, monkeypatch):
    z = _zip(tmp_path / "val2014.zip", {"val2014/": b"", "val2014/a.jpg": b"A", "val2014/b.jpg": b"B"})
    dest = tmp_path / "coco" / "images"
    bars = []
    import tqdm.auto

    def spy(it, **kwargs):  # no real bar: a drawn tqdm bar can hang a forked test process (mutmut's)
        bars.append(kwargs)
        return iter(list(it))

    monkeypatch.setattr(tqdm.auto, "tqdm", spy)
    assert fx._extract_all(z, dest, progressbar=False) == dest
    assert (dest / "val2014" / "a.jpg").read_bytes() == b"A" and (dest / "val2014" / "b.jpg").read_bytes() == b"B"
    assert (dest / ".val2014.zip.extracted").read_text() == "ok\n"
    assert bars == [{"desc": "unzip val2014.zip", "unit": "file", "disable": True}]
    (dest / "val2014" / "a.jpg").unlink()
    assert fx._extract_all(z, dest) == dest  # the marker says done: nothing extracted again
    assert not (dest / "val2014" / "a.jpg").exists() and len(bars) == 1
    fx._extract_all(_zip(tmp_path / "other.zip", {"c.jpg": b"C"}), dest, progressbar=True)
    assert bars[1]["disable"] is False and (dest / "c.jpg").read_bytes() == b"C"
    fx._extract_all(_zip(tmp_path / "third.zip", {"d.jpg": b"D"}), dest)
    assert bars[2]["disable"] is False and (dest / "d.jpg").read_bytes() == b"D"


# ------------------------------------------------------------------ fetch
@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A data set ``toy`` with a members archive (two data sets' files), a plain annotation file and image archives
    per split, served by a fake pooch from local zips."""
    src = tmp_path / "src"
    src.mkdir()
    _zip(src / "caps.zip", {"caps/dataset_toy.json": b"T", "caps/dataset_other.json": b"O"})
    (src / "extra.txt").write_bytes(b"E")
    for name in ("a", "b", "c"):
        _zip(src / f"img_{name}.zip", {f"img_{name}/{name}.jpg": name.encode()})
    res = {"toy_caps": ("caps.zip", {"members": ["dataset_toy.json", "dataset_other.json"]}),
           "toy_extra": ("extra.txt", {}), "toy_a": ("img_a.zip", {}), "toy_b": ("img_b.zip", {}),
           "toy_c": ("img_c.zip", {})}
    for name, (fname, more) in res.items():
        monkeypatch.setitem(registry.RESOURCES, name, {"url": f"https://example.org/{fname}", "fname": fname,
                                                       "known_hash": None, "size": "1 B", "kind": "x", **more})
    monkeypatch.setitem(registry.DATASETS, "toy", {
        "splits": {"train": (1, 1), "val": (1, 1), "test": (1, 1)}, "annotations": ["toy_caps", "toy_extra"],
        "images": {"test": ["toy_a"], "val": ["toy_a", "toy_b"], "train": ["toy_c", "toy_a"]}, "manual": None})
    monkeypatch.setitem(registry.DATASETS, "handmade", {
        "splits": {"train": (1, 1), "val": (1, 1), "test": (1, 1)}, "annotations": ["toy_caps"],
        "images": "manual", "manual": "put the images into {images_dir}"})
    monkeypatch.setenv("HUBNORM_DATA", str(tmp_path / "default-root"))  # must stay unused: data_dir is given
    calls = []

    def give(url, known_hash=None, fname=None, path=None, progressbar=True, downloader=None):
        assert os.path.basename(os.path.dirname(os.path.join(str(path), "x"))) == "downloads"
        assert not (tmp_path / "default-root").exists()
        calls.append((fname, progressbar))
        out = os.path.join(str(path), fname)
        with open(src / fname, "rb") as a, open(out, "wb") as b:
            b.write(a.read())
        return out

    monkeypatch.setattr(pooch, "retrieve", give)
    return calls


def test_fetch_rejects_an_unknown_what(tmp_path, toy):
    with pytest.raises(ValueError) as err:
        fx.fetch("toy", "captions", data_dir=tmp_path)
    assert str(err.value) == "what must be 'annotations', 'images' or 'all'; got 'captions'"
    assert toy == []


def test_fetch_rejects_unknown_datasets_and_splits(tmp_path, toy):
    with pytest.raises(ValueError, match="unknown dataset 'nope'"):
        fx.fetch("nope", data_dir=tmp_path)
    with pytest.raises(ValueError, match="unknown split 'dev' of 'toy'"):
        fx.fetch("toy", "images", splits=["dev"], data_dir=tmp_path)
    assert toy == []


def test_fetch_annotations_extracts_the_data_sets_members_and_copies_plain_files(tmp_path, toy):
    d = tmp_path / "data"
    out = fx.fetch("toy", data_dir=d, progressbar=False)
    assert out == [d / "annotations" / "dataset_toy.json", d / "annotations" / "extra.txt"]
    assert out[0].read_bytes() == b"T" and out[1].read_bytes() == b"E"
    assert sorted(os.listdir(d / "annotations")) == ["dataset_toy.json", "extra.txt"]
    assert toy == [("caps.zip", False), ("extra.txt", False)]


def test_fetch_annotations_extracts_every_member_when_none_names_the_data_set(tmp_path, toy, monkeypatch):
    monkeypatch.setitem(registry.DATASETS["toy"], "annotations", ["toy_caps"])
    monkeypatch.setitem(registry.DATASETS, "third", dict(registry.DATASETS["toy"]))
    out = fx.fetch("third", data_dir=tmp_path)
    assert [p.name for p in out] == ["dataset_toy.json", "dataset_other.json"]
    assert toy == [("caps.zip", True)]


def test_fetch_annotations_keep_every_resources_files_in_order(tmp_path, toy, monkeypatch):
    monkeypatch.setitem(registry.DATASETS["toy"], "annotations", ["toy_extra", "toy_caps"])
    out = fx.fetch("toy", data_dir=tmp_path, progressbar=False)
    assert out == [tmp_path / "annotations" / "extra.txt", tmp_path / "annotations" / "dataset_toy.json"]


@pytest.mark.parametrize("progressbar", [True, False])
def test_fetch_images_unzip_bar_follows_the_progressbar_flag(tmp_path, toy, monkeypatch, progressbar):
    import tqdm.auto
    bars = []

    def spy(it, **kwargs):
        bars.append(kwargs["disable"])
        return iter(list(it))

    monkeypatch.setattr(tqdm.auto, "tqdm", spy)
    fx.fetch("toy", "images", splits=["test"], data_dir=tmp_path, progressbar=progressbar)
    assert bars == [not progressbar] and toy == [("img_a.zip", progressbar)]


def test_fetch_plain_file_into_a_fresh_annotations_folder(tmp_path, toy, monkeypatch):
    monkeypatch.setitem(registry.DATASETS["toy"], "annotations", ["toy_extra"])
    out = fx.fetch("toy", "annotations", data_dir=tmp_path / "x")
    assert out == [tmp_path / "x" / "annotations" / "extra.txt"] and out[0].read_bytes() == b"E"


@pytest.mark.parametrize("splits, archives", [
    (["test"], ["img_a.zip"]),
    (["val"], ["img_a.zip", "img_b.zip"]),
    (["train", "test"], ["img_c.zip", "img_a.zip"]),
    (None, ["img_a.zip", "img_b.zip", "img_c.zip"]),  # test, val, train: each archive once, in first-needed order
    ([], ["img_a.zip", "img_b.zip", "img_c.zip"]),
])
def test_fetch_images_needs_each_archive_once(tmp_path, toy, splits, archives):
    dest = tmp_path / "toy" / "images"
    out = fx.fetch("toy", "images", splits=splits, data_dir=tmp_path, progressbar=False)
    assert out == [dest] * len(archives)
    assert toy == [(a, False) for a in archives]
    assert sorted(os.listdir(tmp_path / "downloads")) == sorted(archives)
    assert not (tmp_path / "default-root").exists()
    for a in archives:
        name = a[len("img_"):-len(".zip")]
        assert (dest / f"img_{name}" / f"{name}.jpg").read_bytes() == name.encode()
        assert (dest / f".{a}.extracted").is_file()


def test_fetch_all_gets_annotations_then_images(tmp_path, toy):
    out = fx.fetch("toy", "all", splits=("test",), data_dir=tmp_path)
    assert out == [tmp_path / "annotations" / "dataset_toy.json", tmp_path / "annotations" / "extra.txt",
                   tmp_path / "toy" / "images"]
    assert toy == [("caps.zip", True), ("extra.txt", True), ("img_a.zip", True)]


def test_fetch_manual_images_raise_until_placed(tmp_path, toy):
    dest = tmp_path / "handmade" / "images"
    with pytest.raises(fx.ManualDownloadRequired) as err:
        fx.fetch("handmade", "images", data_dir=tmp_path)
    assert str(err.value) == f"put the images into {dest}"
    dest.mkdir(parents=True)
    (dest / "notes.txt").write_text("not an image")
    with pytest.raises(fx.ManualDownloadRequired):
        fx.fetch("handmade", "images", data_dir=tmp_path)
    assert toy == []
    for suffix in (".JPG", ".jpeg", ".png"):
        for p in dest.iterdir():
            if p.suffix != ".txt":
                p.unlink()
        (dest / f"1{suffix}").write_bytes(b"img")
        assert fx.fetch("handmade", "images", data_dir=tmp_path) == [dest]
    out = fx.fetch("handmade", "all", data_dir=tmp_path)
    assert out == [tmp_path / "annotations" / "dataset_toy.json", tmp_path / "annotations" / "dataset_other.json",
                   dest]


def test_module_exports():
    assert sorted(fx.__all__) == ["DownloadError", "ManualDownloadRequired", "download_file", "downloads_dir",
                                  "fetch", "retrieve"]
    assert issubclass(fx.DownloadError, RuntimeError) and issubclass(fx.ManualDownloadRequired, RuntimeError)
