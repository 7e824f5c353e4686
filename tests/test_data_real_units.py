"""``hubnorm.data.real`` in small pieces, on hand-made toy releases registered for one test (a stacked-pairs release
with an optional control file, a per-caption release with ``metadata.csv``, an audio release with two distorted
galleries) and a fake ``download_file`` (no network: every download is served from a dict or fails offline): the
registry's records, every guard by its whole message, the sources in order (cache, mirror, download) with what each
says, the warning and where it points, the atomic install, ``real_status``, the clip grouping against a slow
breadth-first reference, the audio checks at their thresholds, the loaders' splits against the seeded permutation
written out by hand, and ``meta``.

Survivors judged equivalent (no test can tell them apart):
- ``obtain_real``: ``how = "cache" / "mirror" / "download" if data is not None else None`` with the condition forced
  true (``... or True``, 3 mutants): a ``how`` set while ``data`` is None is overwritten by the next source or never
  used (the file goes to ``reasons``).
- ``obtain_real``: ``how != "cache"`` written ``"XXcacheXX"`` / ``"CACHE"`` in the warning's condition (2 mutants): a
  cache hit has no failed source, so ``any("sha256" in w ...)`` is False either way.
- ``obtain_real``: ``stacklevel=2`` -> ``3``: under mutmut a trampoline frame sits between the caller and
  ``obtain_real``, so level 3 names the caller that level 2 names without it (the test checks that the warning does
  not point into real.py, which kills the dropped argument).
- ``group_rows``: ``np.triu(linked, 1)`` with the offset dropped (0: a row linked to itself has one root, nothing
  merges).
- ``_npy``: ``allow_pickle=False`` dropped or ``None`` (False is the default; None is falsy); ``True`` is killed.
- ``_audio_clips``: the fill value of ``first`` (-1 -> +1, -2) and its ``dtype=np.int64`` dropped or ``None`` (every
  clip has a row, so every entry is overwritten; NumPy's default integer is int64 here); ``astype(np.float64)`` of
  either factor written ``astype(None)`` (None means float64); the backward loop starting at ``len - 2`` (the last
  row is then missed only when it is its clip's only row, and the fill value -1 indexes that same last row).
- ``release_arrays`` / ``clip_index``: ``dtype=np.int64`` dropped or ``None`` in ``np.asarray`` of values that are
  int64 already (``EmbeddingSplit`` and ``group_rows`` make them int64; Python ints default to int64 here).
- ``load_real``: ``name=`` of ``load_local_embeddings`` dropped or ``None``: the loader then names the data set after
  the cache folder, ``release_folder`` = ``.../real/<release name>``, plus ``/<stem>`` of a stacked file other than
  ``features_clip.npy`` -- the very name ``load_real`` builds.
- The one timeout, ``group_rows``'s ``while parent[i] != i`` -> ``==``, is a real hang (a root never leaves the
  loop; rechecked in a fresh process), counted as killed.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import logging
import os
import re
import stat
import warnings
from pathlib import Path

import numpy as np
import pooch
import pytest

from hubnorm.data import real

fetch = importlib.import_module("hubnorm.data.fetch")   # the module (hubnorm.data.fetch is also a function's name)

COMMIT = "ab" * 20
BASE = "https://raw.githubusercontent.com"
LAYOUT = "a folder holding <release folder>/<file>, e.g. coco-val2017-500-clip-vitb16/features_clip.npy"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _npy(arr) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def _unit(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _exactly(exc, message):
    """pytest.raises on the whole message."""
    return pytest.raises(exc, match="^" + re.escape(message) + "$")


def _offline(url):
    err = fetch.DownloadError(f"could not download {url}: ConnectionError: refused\nplace it by hand")
    err.__cause__ = ConnectionError("refused")
    return err


@pytest.fixture(autouse=True)
def net(tmp_path, monkeypatch):
    """Every test: its own cache root, no mirror variable, and a fake download_file serving ``files`` (url ->
    bytes; any other url fails offline) that records each call and pooch's log level during it."""
    monkeypatch.setenv("HUBNORM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(real.MIRROR_ENV, raising=False)
    monkeypatch.setattr(real, "URL_BASE", BASE)
    state = {"files": {}, "calls": [], "levels": []}

    def download_file(url, folder, fname, known_hash, *, progressbar=True, manual=""):
        state["calls"].append((url, Path(folder), fname, known_hash, progressbar))
        state["levels"].append(pooch.get_logger().level)
        if url not in state["files"]:
            raise _offline(url)
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / fname).write_bytes(state["files"][url])
        return Path(folder) / fname

    monkeypatch.setattr(fetch, "download_file", download_file)
    return state


def _register(monkeypatch, name, contents, *, optional=(), modality="image", n_items, n_captions, dim,
              galleries=None):
    files = tuple(real.RealFile(fname, f"emb/{fname}", COMMIT, _sha(data), len(data), "toy rows",
                                optional=fname in optional) for fname, data in contents.items())
    rel = real.RealRelease(
        name=name, label=f"real: {name}", repo=f"someone/{name}", mirror=f"{name}-folder", model="toy-encoder",
        dataset="toyset", published_dataset="toypub", modality=modality, n_items=n_items, n_captions=n_captions,
        dim=dim, licence="none stated", caveats=("made up", "small"), files=files, galleries=dict(galleries or {}))
    monkeypatch.setitem(real.RELEASES, name, rel)
    return rel


def _url(rel, fname):
    return f"{BASE}/someone/{rel.name}/{COMMIT}/emb/{fname}"


def _mirror(tmp_path, rel, contents, names=None):
    root = tmp_path / "mirror"
    (root / rel.mirror).mkdir(parents=True, exist_ok=True)
    for n in names or contents:
        (root / rel.mirror / n).write_bytes(contents[n])
    return root


def _serve(net, rel, contents, names=None):
    for n in names or contents:
        net["files"][_url(rel, n)] = contents[n]


# ----------------------------------------------------------------------------------------------- the toy releases

PAIRS_IMG = _unit(np.random.default_rng(0).standard_normal((6, 4)))
PAIRS_TXT = _unit(PAIRS_IMG + 0.3 * np.random.default_rng(1).standard_normal((6, 4)))
PAIRS_RND = _unit(np.random.default_rng(2).standard_normal((2, 6, 4)).reshape(12, 4)).reshape(2, 6, 4)


@pytest.fixture
def pairs(monkeypatch):
    """Stacked pairs: 6 images x 1 caption, plus an optional random-init control file."""
    contents = {"features_clip.npy": _npy(np.stack([PAIRS_IMG, PAIRS_TXT])),
                "features_clip_random.npy": _npy(PAIRS_RND)}
    rel = _register(monkeypatch, "toy-pairs", contents, optional=("features_clip_random.npy",), n_items=6,
                    n_captions=6, dim=4)
    return rel, contents


CAPS_IDS = ["a", "b", "a", "c", "b"]
CAPS_C2I = np.array([0, 1, 0, 2, 1])
CAPS_IMG = _unit(np.random.default_rng(3).standard_normal((3, 4)))
CAPS_TXT = _unit(np.random.default_rng(4).standard_normal((5, 4)))


@pytest.fixture
def caps(monkeypatch):
    """Per-caption rows: 3 images, 5 captions (image ids a b a c b), metadata.csv naming them."""
    meta = "image_id,caption\n" + "".join(f"{i},caption {j}\n" for j, i in enumerate(CAPS_IDS))
    contents = {"image_embeddings.npy": _npy(CAPS_IMG[CAPS_C2I]), "text_embeddings.npy": _npy(CAPS_TXT),
                "metadata.csv": meta.encode()}
    rel = _register(monkeypatch, "toy-caps", contents, n_items=3, n_captions=5, dim=4)
    return rel, contents


AUDIO_C2CLIP = np.array([0, 1, 1, 2, 0, 3, 2])   # caption -> clip; first rows 0, 1, 3, 5 (the last row repeats)
AUDIO_FIRST = np.array([0, 1, 3, 5])


def _audio_rows(s, directions=(4, 5)):
    """Row j: clip vector e_c plus ``s`` times e_(directions[k]), k = the row's rank among its clip's rows; two rows
    of one clip then have cosine exactly 1 / (1 + s^2), rows of two clips 0."""
    x = np.zeros((7, 8))
    seen = {}
    for j, c in enumerate(AUDIO_C2CLIP):
        k = seen.setdefault(c, [])
        x[j, c] = 1.0
        x[j, directions[len(k)]] = s
        k.append(j)
    return _unit(x)


AUDIO_TXT = _unit(np.random.default_rng(5).standard_normal((7, 8)))
GALLERIES = {"clean": "audio_embeddings.npy", "original": "audio_emb_original.npy", "noisy": "audio_emb_noisy.npy"}


def _audio(monkeypatch, name="toy-audio", *, clean=None, noisy=None, n_items=4, text=None):
    contents = {"audio_embeddings.npy": _npy(_audio_rows(0.05) if clean is None else clean),
                "text_embeddings.npy": text if text is not None else _npy(AUDIO_TXT),
                "audio_emb_original.npy": _npy(_audio_rows(0.06, (6, 7))),
                "audio_emb_noisy.npy": _npy(_audio_rows(0.2) if noisy is None else noisy),
                "sim_matrix.npy": _npy(np.eye(7, dtype=np.float32))}
    rel = _register(monkeypatch, name, contents, optional=("sim_matrix.npy",), modality="audio", n_items=n_items,
                    n_captions=7, dim=8, galleries=GALLERIES)
    return rel, contents


@pytest.fixture
def audio(monkeypatch):
    return _audio(monkeypatch)


def _hand_split(n, test_fraction, seed):
    perm = np.random.default_rng(seed).permutation(n)
    k = int(round(test_fraction * n))
    return np.sort(perm[:k]), np.sort(perm[k:])


# ----------------------------------------------------------------------------------------------- the records

def test_release_file_required_and_url(pairs):
    rel, contents = pairs
    assert rel.file("features_clip_random.npy") is rel.files[1] and rel.file("features_clip.npy") is rel.files[0]
    with _exactly(ValueError, "release 'toy-pairs' has no file 'x.npy'; its files: ['features_clip.npy', "
                              "'features_clip_random.npy']"):
        rel.file("x.npy")
    assert rel.required == (rel.files[0],)
    assert rel.url(rel.files[1]) == f"{BASE}/someone/toy-pairs/{COMMIT}/emb/features_clip_random.npy"


def test_release_lookup_and_its_message():
    assert real.release("coco500-clip-b16") is real.RELEASES["coco500-clip-b16"]
    msg = ("unknown real release {!r}; valid: ['audiocaps-clap', 'coco500-clip-b16', 'flickr8k-100x5-clip-b32'] "
           "(load one with hubnorm.load_embeddings('real:<release>'))")
    with _exactly(ValueError, msg.format("nope")):
        real.release("nope")
    with _exactly(ValueError, msg.format(["coco500-clip-b16"])):   # not a string (and unhashable): the same error
        real.release(["coco500-clip-b16"])


def test_real_fetch_how_names_the_farthest_source(tmp_path):
    rel = real.RELEASES["coco500-clip-b16"]

    def how(*sources):
        return real.RealFetch(rel, tmp_path, {}, {f"f{i}": s for i, s in enumerate(sources)}).how

    assert how("cache", "cache") == "cached" and how() == "cached"
    assert how("cache", "mirror") == "fetched from mirror"
    assert how("mirror", "download", "cache") == "downloaded" and how("download") == "downloaded"


def test_unavailable_error_keeps_its_fields_and_its_note():
    one = real.RealDataUnavailable("the message", "rel-x", {"a.npy": ["long"]}, {"a.npy": ["not cached", "no mirror"]})
    assert str(one) == "the message" and isinstance(one, RuntimeError)
    assert (one.release, one.reasons, one.brief) == ("rel-x", {"a.npy": ["long"]},
                                                     {"a.npy": ["not cached", "no mirror"]})
    assert one.note == ("real release rel-x unavailable: a.npy: not cached, no mirror; get it with "
                        "`python -m hubnorm.data fetch-real rel-x` on a machine with internet, or set "
                        "HUBNORM_REAL_MIRROR")
    three = real.RealDataUnavailable("m", "rel-y", {}, {"b.npy": ["downloads off"], "c.npy": ["x"], "d.npy": ["y"]})
    assert three.note == ("real release rel-y unavailable: b.npy and 2 more files: downloads off; get it with "
                          "`python -m hubnorm.data fetch-real rel-y` on a machine with internet, or set "
                          "HUBNORM_REAL_MIRROR")
    two = real.RealDataUnavailable("m", "rel-z", {}, {"b.npy": ["p"], "c.npy": ["q"]})
    assert "b.npy and 1 more files: p;" in two.note


# ----------------------------------------------------------------------------------------------- mirror and cache

def test_mirror_root_argument_variable_and_none(tmp_path, monkeypatch):
    assert real.mirror_root() is None
    (tmp_path / "m").mkdir()
    (tmp_path / "env").mkdir()
    assert real.mirror_root(tmp_path / "m") == tmp_path / "m"
    assert real.mirror_root(str(tmp_path / "m")) == tmp_path / "m"
    monkeypatch.setenv("HOME", str(tmp_path))
    assert real.mirror_root("~/m") == tmp_path / "m"
    monkeypatch.setenv(real.MIRROR_ENV, str(tmp_path / "env"))
    assert real.mirror_root() == tmp_path / "env"
    assert real.mirror_root(tmp_path / "m") == tmp_path / "m"   # the argument wins
    monkeypatch.setenv(real.MIRROR_ENV, "~/env")
    assert real.mirror_root() == tmp_path / "env"


def test_mirror_root_guards_name_the_argument_or_the_variable(tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("x")
    with _exactly(ValueError, f"mirror={str(tmp_path / 'a-file')!r} is not a folder: pass {LAYOUT}, or mirror=None"):
        real.mirror_root(tmp_path / "a-file")
    with _exactly(ValueError, f"mirror={str(tmp_path / 'nowhere')!r} is not a folder: pass {LAYOUT}, or mirror=None"):
        real.mirror_root(str(tmp_path / "nowhere"))
    monkeypatch.setenv(real.MIRROR_ENV, " \t")
    with _exactly(ValueError, f"HUBNORM_REAL_MIRROR is set but blank: unset it, or set it to {LAYOUT}"):
        real.mirror_root()
    monkeypatch.setenv(real.MIRROR_ENV, "")
    with _exactly(ValueError, f"HUBNORM_REAL_MIRROR is set but blank: unset it, or set it to {LAYOUT}"):
        real.mirror_root()
    value = str(tmp_path / "a-file")
    monkeypatch.setenv(real.MIRROR_ENV, value)
    with _exactly(ValueError, f"HUBNORM_REAL_MIRROR={value!r} is a file, not a folder: set it to {LAYOUT}, "
                              "or unset it"):
        real.mirror_root()
    value = str(tmp_path / "absent")
    monkeypatch.setenv(real.MIRROR_ENV, value)
    with _exactly(ValueError, f"HUBNORM_REAL_MIRROR={value!r} does not exist: set it to {LAYOUT}, or unset it"):
        real.mirror_root()


def test_release_folder_under_the_cache_root(tmp_path):
    assert real.release_folder("coco500-clip-b16") == tmp_path / "cache" / "real" / "coco500-clip-b16"
    assert real.release_folder("audiocaps-clap", tmp_path / "other") == tmp_path / "other" / "real" / "audiocaps-clap"
    with pytest.raises(ValueError, match="unknown real release 'nope'"):
        real.release_folder("nope")


def test_read_checked_size_then_sha256(tmp_path):
    data = b"0123456789"
    f = real.RealFile("x.bin", "p/x.bin", COMMIT, _sha(data), len(data), "bytes")
    path = tmp_path / "x.bin"
    path.write_bytes(data)
    assert real._read_checked(path, f) == (data, "")
    path.write_bytes(data[:-1])
    assert real._read_checked(path, f) == (None, f"{path} has 9 bytes, expected 10 (truncated or another file)")
    path.write_bytes(b"0123456780")
    assert real._read_checked(path, f) == (None, f"checksum mismatch: {path} has sha256 {_sha(b'0123456780')}, "
                                                 f"expected {f.sha256}")
    assert real._read_checked(tmp_path, f) == (None, f"{tmp_path} cannot be read (Is a directory)")


def test_read_checked_names_an_error_without_strerror(tmp_path, monkeypatch):
    f = real.RealFile("x.bin", "p/x.bin", COMMIT, "0" * 64, 1, "bytes")

    def broken(self):
        raise OSError("the disk said no")

    monkeypatch.setattr(Path, "read_bytes", broken)
    assert real._read_checked(tmp_path / "x.bin", f) == (None, f"{tmp_path / 'x.bin'} cannot be read "
                                                               "(the disk said no)")


def test_install_is_atomic_readable_and_leaves_nothing_else(tmp_path, monkeypatch):
    data = b"payload" * 10
    f = real.RealFile("x.npy", "p/x.npy", COMMIT, _sha(data), len(data), "bytes")
    folder = tmp_path / "a" / "b"   # created with its parents
    renamed = []
    replace = os.replace

    def spy(src, dst):
        renamed.append((Path(src), Path(dst), Path(src).read_bytes()))
        return replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    assert real._install(folder, f, data) == folder / "x.npy"
    (src, dst, written), = renamed
    assert dst == folder / "x.npy" and written == data and src.parent == folder
    assert re.fullmatch(r"\.x\.npy\..+\.tmp", src.name), src.name
    assert sorted(p.name for p in folder.iterdir()) == ["x.npy"] and (folder / "x.npy").read_bytes() == data
    assert stat.S_IMODE((folder / "x.npy").stat().st_mode) == 0o644
    other = b"other!" * 10
    g = real.RealFile("x.npy", "p/x.npy", COMMIT, _sha(other), len(other), "bytes")
    assert real._install(folder, g, other) == folder / "x.npy"   # the folder exists: replaced in place
    assert (folder / "x.npy").read_bytes() == other and sorted(p.name for p in folder.iterdir()) == ["x.npy"]


def test_install_refuses_a_short_write_and_keeps_the_first_error(tmp_path, monkeypatch):
    data = b"payload" * 10
    f = real.RealFile("x.npy", "p/x.npy", COMMIT, _sha(data), len(data), "bytes")
    bad = real.RealFile("x.npy", "p/x.npy", COMMIT, _sha(data), len(data) + 1, "bytes")
    with pytest.raises(OSError, match=rf"^writing {re.escape(str(tmp_path / 'x.npy'))} failed: .*\.x\.npy\..*\.tmp "
                                      rf"has 70 bytes, expected 71 \(truncated or another file\)$"):
        real._install(tmp_path, bad, data)
    assert list(tmp_path.iterdir()) == []

    def vanish_then_fail(src, dst):
        os.unlink(src)
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", vanish_then_fail)
    with _exactly(OSError, "disk gone"):   # the temporary file already gone: not a FileNotFoundError
        real._install(tmp_path, f, data)
    assert list(tmp_path.iterdir()) == []


def test_quiet_pooch_silences_and_restores_the_level():
    log = pooch.get_logger()
    before = log.level
    with real._quiet_pooch(True):
        assert log.level == logging.WARNING
    assert log.level == before
    with real._quiet_pooch(False):
        assert log.level == before
    with pytest.raises(KeyError):
        with real._quiet_pooch(True):
            raise KeyError("x")
    assert log.level == before


# ----------------------------------------------------------------------------------------------- _download

def test_download_passes_the_url_staging_folder_hash_and_progress(pairs, net, tmp_path):
    rel, contents = pairs
    f = rel.files[0]
    _serve(net, rel, contents)
    folder = tmp_path / "rel"
    before = pooch.get_logger().level
    assert real._download(rel, f, folder, False) == (contents[f.name], "", "download failed its sha256")
    assert real._download(rel, f, folder, True) == (contents[f.name], "", "download failed its sha256")
    staged = (_url(rel, f.name), folder / ".download", f.name, f"sha256:{f.sha256}")
    assert net["calls"] == [staged + (False,), staged + (True,)]
    assert net["levels"] == [logging.WARNING, before] and pooch.get_logger().level == before
    assert not folder.exists() or list(folder.iterdir()) == []   # the downloaded file and the empty staging: gone


def test_download_of_other_bytes_is_refused(pairs, net, tmp_path):
    rel, contents = pairs
    f = rel.files[0]
    net["files"][_url(rel, f.name)] = contents["features_clip_random.npy"]
    path = tmp_path / "rel" / ".download" / f.name
    assert real._download(rel, f, tmp_path / "rel", False) == (
        None, f"checksum mismatch: {path} has sha256 {_sha(contents['features_clip_random.npy'])}, expected "
              f"{f.sha256}", "download failed its sha256")


@pytest.mark.parametrize("exc, long, short", [
    (ImportError("No module named 'pooch'", name="pooch"), "pooch is not installed", "download impossible (pooch "
                                                                                    "not installed)"),
    (ImportError("no pooch here"), "no pooch here is not installed", "download impossible (no pooch here not "
                                                                     "installed)"),
])
def test_download_without_pooch_says_what_to_install(pairs, monkeypatch, tmp_path, exc, long, short):
    rel, _ = pairs

    def missing(*a, **k):
        raise exc

    monkeypatch.setattr(fetch, "download_file", missing)
    url = _url(rel, "features_clip.npy")
    assert real._download(rel, rel.files[0], tmp_path, False) == (
        None, f"cannot download {url}: {long} (pip install 'hubnorm[data]')", short)


def test_download_errors_in_brief(pairs, monkeypatch, tmp_path):
    rel, _ = pairs
    raised = []

    def failing(url, folder, fname, known_hash, *, progressbar=True, manual=""):
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "partial").write_bytes(b"12")   # a resumable partial stays
        raise raised.pop(0)

    monkeypatch.setattr(fetch, "download_file", failing)
    cause = fetch.DownloadError("  could not download u: TimeoutError: slow\nplace it by hand\n")
    cause.__cause__ = TimeoutError("slow")
    raised += [cause, fetch.DownloadError("could not download u: odd\nhand"),
               fetch.DownloadError("checksum mismatch for u: hash differs\nhand")]
    assert real._download(rel, rel.files[0], tmp_path, False) == (
        None, "could not download u: TimeoutError: slow", "download failed (TimeoutError)")
    assert real._download(rel, rel.files[0], tmp_path, False) == (
        None, "could not download u: odd", "download failed (error)")
    assert real._download(rel, rel.files[0], tmp_path, False) == (
        None, "checksum mismatch for u: hash differs", "download failed its sha256")
    assert sorted(p.name for p in (tmp_path / ".download").iterdir()) == ["partial"]


# ----------------------------------------------------------------------------------------------- obtain_real

def test_nothing_anywhere_names_every_file_and_the_fix(caps, tmp_path):
    rel, _ = caps
    folder = tmp_path / "cache" / "real" / "toy-caps"
    names = ["image_embeddings.npy", "text_embeddings.npy", "metadata.csv"]
    lines = "".join(f"  {n} ({_url(rel, n)}):\n      not cached ({folder / n})\n      no mirror "
                    f"(HUBNORM_REAL_MIRROR unset)\n      downloads are off (download=False; the file is at "
                    f"{_url(rel, n)})\n" for n in names)
    msg = (f"real release 'toy-caps' (real: toy-caps): 3 file(s) could not be obtained:\n{lines}Fix: on a machine "
           f"with internet, run\n    python -m hubnorm.data fetch-real toy-caps\n(it caches the verified files in "
           f"{folder}), or copy the release's files into <mirror>/toy-caps-folder/ and set "
           "HUBNORM_REAL_MIRROR=<mirror> (or pass mirror=).")
    with _exactly(real.RealDataUnavailable, msg) as err:
        real.obtain_real("toy-caps", download=False)
    assert err.value.release == "toy-caps" and list(err.value.reasons) == names
    assert err.value.brief == {n: ["not cached", "no mirror", "downloads off"] for n in names}
    assert err.value.reasons["metadata.csv"][0] == f"not cached ({folder / 'metadata.csv'})"
    assert not folder.exists() or list(folder.iterdir()) == []


def test_one_missing_file_of_three_is_the_only_one_named(caps, tmp_path, net):
    rel, contents = caps
    mirror = _mirror(tmp_path, rel, contents, ["image_embeddings.npy", "metadata.csv"])
    with pytest.raises(real.RealDataUnavailable) as err:
        real.obtain_real("toy-caps", mirror=mirror, progress=False)
    src = mirror / "toy-caps-folder" / "text_embeddings.npy"
    url = _url(rel, "text_embeddings.npy")
    assert err.value.reasons == {"text_embeddings.npy": [
        f"not cached ({tmp_path / 'cache' / 'real' / 'toy-caps' / 'text_embeddings.npy'})",
        f"not in the mirror ({src})", f"could not download {url}: ConnectionError: refused"]}
    assert err.value.brief == {"text_embeddings.npy": ["not cached", "not in the mirror",
                                                       "download failed (ConnectionError)"]}
    assert "1 file(s) could not be obtained" in str(err.value)
    assert [c[0] for c in net["calls"]] == [url]   # the two mirrored files were not downloaded
    # the two that came through are cached nonetheless
    assert sorted(p.name for p in (tmp_path / "cache" / "real" / "toy-caps").iterdir()) == [
        "image_embeddings.npy", "metadata.csv"]


def test_mirror_then_cache_and_the_mirror_is_resolved_once(caps, tmp_path, monkeypatch, net):
    rel, contents = caps
    mirror = _mirror(tmp_path, rel, contents)
    resolved = []
    mirror_root = real.mirror_root
    monkeypatch.setattr(real, "mirror_root", lambda m=None: resolved.append(m) or mirror_root(m))
    got = real.obtain_real("toy-caps", mirror=mirror)
    assert resolved == [mirror]
    folder = tmp_path / "cache" / "real" / "toy-caps"
    assert got.release is rel and got.folder == folder and got.how == "fetched from mirror"
    assert got.contents == contents and got.sources == dict.fromkeys(contents, "mirror")
    assert sorted(p.name for p in folder.iterdir()) == sorted(contents)
    assert all((folder / n).read_bytes() == b for n, b in contents.items())
    installs = []
    install = real._install
    monkeypatch.setattr(real, "_install", lambda *a: installs.append(a) or install(*a))
    again = real.obtain_real("toy-caps", mirror=tmp_path / "not-read")   # all cached: the mirror is never looked at
    assert resolved == [mirror] and installs == [] and net["calls"] == []
    assert again.sources == dict.fromkeys(contents, "cache") and again.how == "cached" and again.contents == contents


def test_files_and_extras_pick_what_is_obtained(pairs, tmp_path):
    rel, contents = pairs
    mirror = _mirror(tmp_path, rel, contents)
    assert list(real.obtain_real("toy-pairs", mirror=mirror).contents) == ["features_clip.npy"]
    got = real.obtain_real("toy-pairs", mirror=mirror, extras=True)
    assert got.sources == {"features_clip.npy": "cache", "features_clip_random.npy": "mirror"}
    only = real.obtain_real("toy-pairs", files=["features_clip_random.npy"], download=False)
    assert only.contents == {"features_clip_random.npy": contents["features_clip_random.npy"]}
    with pytest.raises(ValueError, match="release 'toy-pairs' has no file 'x'"):
        real.obtain_real("toy-pairs", files=["x"])


def test_cache_dir_argument_is_the_cache(pairs, tmp_path):
    rel, contents = pairs
    mirror = _mirror(tmp_path, rel, contents)
    assert real.obtain_real("toy-pairs", mirror=mirror, cache_dir=tmp_path / "c2").folder == tmp_path / "c2" / "real" \
        / "toy-pairs"
    assert (tmp_path / "c2" / "real" / "toy-pairs" / "features_clip.npy").exists()
    assert not (tmp_path / "cache").exists()


def test_mirror_from_the_variable(pairs, tmp_path, monkeypatch):
    rel, contents = pairs
    monkeypatch.setenv(real.MIRROR_ENV, str(_mirror(tmp_path, rel, contents)))
    assert real.obtain_real("toy-pairs", download=False).sources == {"features_clip.npy": "mirror"}


def test_a_download_is_installed_and_progress_reaches_it(pairs, net, tmp_path):
    rel, contents = pairs
    _serve(net, rel, contents)
    got = real.obtain_real("toy-pairs")
    assert got.sources == {"features_clip.npy": "download"} and got.how == "downloaded"
    assert got.contents == {"features_clip.npy": contents["features_clip.npy"]}
    assert [c[-1] for c in net["calls"]] == [True]
    folder = tmp_path / "cache" / "real" / "toy-pairs"
    assert sorted(p.name for p in folder.iterdir()) == ["features_clip.npy"]
    real.obtain_real("toy-pairs", files=["features_clip_random.npy"], progress=False)
    assert [c[-1] for c in net["calls"]] == [True, False]


def test_a_bad_cached_copy_is_replaced_with_a_warning_that_points_at_the_caller(pairs, net, tmp_path):
    rel, contents = pairs
    data = contents["features_clip.npy"]
    folder = tmp_path / "cache" / "real" / "toy-pairs"
    folder.mkdir(parents=True)
    cached = folder / "features_clip.npy"
    cached.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    mirror = _mirror(tmp_path, rel, contents, ["features_clip_random.npy"])   # not the wanted file
    _serve(net, rel, contents)
    bad_sha = _sha(cached.read_bytes())
    with pytest.warns(RuntimeWarning) as record:
        got = real.obtain_real("toy-pairs", mirror=mirror, progress=False)
    assert got.sources == {"features_clip.npy": "download"} and cached.read_bytes() == data
    (w,) = record.list
    assert str(w.message) == (
        f"real release toy-pairs: features_clip.npy taken from the download because the cached copy fails: "
        f"checksum mismatch: {cached} has sha256 {bad_sha}, expected {rel.files[0].sha256}; not in the mirror "
        f"({mirror / 'toy-pairs-folder' / 'features_clip.npy'})")
    assert Path(w.filename).name != "real.py"   # stacklevel 2: the caller (under mutmut, its trampoline)


def test_a_bad_cached_copy_with_no_other_source(pairs, tmp_path):
    rel, contents = pairs
    folder = tmp_path / "cache" / "real" / "toy-pairs"
    folder.mkdir(parents=True)
    (folder / "features_clip.npy").write_bytes(b"short")
    with pytest.raises(real.RealDataUnavailable) as err:
        real.obtain_real("toy-pairs", download=False)
    assert err.value.reasons["features_clip.npy"][0] == (
        f"the cached copy fails: {folder / 'features_clip.npy'} has 5 bytes, expected "
        f"{len(contents['features_clip.npy'])} (truncated or another file)")
    assert err.value.brief == {"features_clip.npy": ["cached copy failed its sha256", "no mirror", "downloads off"]}


def test_a_bad_mirror_copy_falls_through_to_the_download_with_a_warning(pairs, net, tmp_path):
    rel, contents = pairs
    root = tmp_path / "mirror"
    (root / rel.mirror).mkdir(parents=True)
    src = root / rel.mirror / "features_clip.npy"
    src.write_bytes(contents["features_clip_random.npy"])   # same size, other bytes
    with pytest.raises(real.RealDataUnavailable) as err:
        real.obtain_real("toy-pairs", mirror=root, download=False)
    assert err.value.reasons["features_clip.npy"][1] == (
        f"checksum mismatch: {src} has sha256 {_sha(src.read_bytes())}, expected {rel.files[0].sha256}")
    assert err.value.brief["features_clip.npy"][1] == f"mirror copy {src} failed its sha256"
    _serve(net, rel, contents)
    with pytest.warns(RuntimeWarning, match="^real release toy-pairs: features_clip.npy taken from the download "
                                            "because not cached .*; checksum mismatch: "):
        assert real.obtain_real("toy-pairs", mirror=root).sources == {"features_clip.npy": "download"}


def test_no_warning_when_nothing_failed_its_checksum(pairs, net, tmp_path):
    rel, contents = pairs
    mirror = _mirror(tmp_path, rel, contents)
    _serve(net, rel, contents)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert real.obtain_real("toy-pairs", mirror=mirror).sources == {"features_clip.npy": "mirror"}
        assert real.obtain_real("toy-pairs", files=["features_clip_random.npy"]).sources == {
            "features_clip_random.npy": "download"}
        assert real.obtain_real("toy-pairs", extras=True).how == "cached"


def test_fetch_real_passes_every_argument(pairs, net, tmp_path):
    rel, contents = pairs
    mirror = _mirror(tmp_path, rel, contents)
    folder = real.fetch_real("toy-pairs", mirror=mirror, cache_dir=tmp_path / "c", download=False, progress=False,
                             extras=True)
    assert folder == tmp_path / "c" / "real" / "toy-pairs"
    assert sorted(p.name for p in folder.iterdir()) == ["features_clip.npy", "features_clip_random.npy"]
    _serve(net, rel, contents)
    assert real.fetch_real("toy-pairs", progress=False) == tmp_path / "cache" / "real" / "toy-pairs"
    assert [c[-1] for c in net["calls"]] == [False]
    with pytest.raises(real.RealDataUnavailable, match="downloads are off"):
        real.fetch_real("toy-pairs", download=False, extras=True)


def test_fetch_real_defaults_required_files_with_progress(pairs, net, tmp_path):
    rel, contents = pairs
    _serve(net, rel, contents)
    folder = real.fetch_real("toy-pairs")
    assert sorted(p.name for p in folder.iterdir()) == ["features_clip.npy"]
    assert [(c[0], c[-1]) for c in net["calls"]] == [(_url(rel, "features_clip.npy"), True)]


def test_real_status_reads_the_required_files_of_the_cache(pairs, caps, tmp_path):
    rel, contents = caps
    assert real.real_status("toy-caps") == "not cached"
    folder = tmp_path / "c" / "real" / "toy-caps"
    folder.mkdir(parents=True)
    (folder / "metadata.csv").write_bytes(contents["metadata.csv"])
    assert real.real_status("toy-caps", tmp_path / "c") == "incomplete: image_embeddings.npy missing, " \
                                                           "text_embeddings.npy missing"
    (folder / "text_embeddings.npy").write_bytes(contents["image_embeddings.npy"])   # same size, other bytes
    assert real.real_status("toy-caps", tmp_path / "c") == "incomplete: image_embeddings.npy missing, " \
                                                           "text_embeddings.npy fails its sha256"
    (folder / "image_embeddings.npy").write_bytes(contents["image_embeddings.npy"])
    assert real.real_status("toy-caps", tmp_path / "c") == "incomplete: text_embeddings.npy fails its sha256"
    (folder / "text_embeddings.npy").write_bytes(contents["text_embeddings.npy"])
    assert real.real_status("toy-caps", tmp_path / "c") == "cached"
    assert real.real_status("toy-caps") == "not cached"   # the default cache root is another folder
    prel, pcontents = pairs   # the optional file is not needed
    real.obtain_real("toy-pairs", mirror=_mirror(tmp_path, prel, pcontents))
    assert real.real_status("toy-pairs") == "cached"


# ----------------------------------------------------------------------------------------------- group_rows

def _bfs_groups(x, min_cos):
    """Independent reference: breadth-first components of cos >= min_cos (float64), numbered by first row."""
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    label = [-1] * n
    nxt = 0
    for s in range(n):
        if label[s] >= 0:
            continue
        label[s], queue = nxt, [s]
        while queue:
            i = queue.pop()
            for j in range(n):
                if label[j] < 0 and float(np.dot(x[i], x[j])) >= min_cos:
                    label[j] = nxt
                    queue.append(j)
        nxt += 1
    return np.array(label)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("min_cos", [0.9, 0.95, 0.98])
def test_group_rows_equals_a_breadth_first_reference(seed, min_cos):
    x = np.random.default_rng(seed).standard_normal((30, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    got = real.group_rows(x, min_cos)
    assert got.dtype == np.int64 and np.array_equal(got, _bfs_groups(x, min_cos))
    assert len(np.unique(got)) > 1 and np.bincount(got).max() > 1   # neither all apart nor all one group


def test_group_rows_by_hand():
    # rows 0 and 3 are one group only through row 2 (a chain); rows 1 and 4 are one group; row 5 is alone
    a = np.array([1.0, 0.0, 0.0])
    rows = np.array([a, [0, 1, 0], [np.cos(0.1), np.sin(0.1), 0], [np.cos(0.2), np.sin(0.2), 0], [0, 1, 0.01],
                     [0, 0, 1]])
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    cos01 = float(np.cos(0.1))
    assert real.group_rows(rows, cos01 - 1e-9).tolist() == [0, 1, 0, 0, 1, 2]
    assert real.group_rows(rows, 1.0 + 1e-9).tolist() == [0, 1, 2, 3, 4, 5]
    # the threshold itself links (cosine >= min_cos): 0.6 is exact in float64 for these rows
    pair = np.array([[1.0, 0.0], [0.6, 0.8]])
    assert pair[0] @ pair[1] == 0.6
    assert real.group_rows(pair, 0.6).tolist() == [0, 0]
    assert real.group_rows(pair, np.nextafter(0.6, 1)).tolist() == [0, 1]
    # only the pair (0, 1) is linked: the links next to the diagonal count
    assert real.group_rows(np.array([[1.0, 0], [1.0, 0], [0, 1.0]]), 0.9).tolist() == [0, 0, 1]


def test_group_rows_compares_in_float64():
    """float32 rows whose float32 product rounds below the float64 one: linked at the float64 cosine."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        x = _unit(rng.standard_normal((2, 64)))
        x64 = x.astype(np.float64)
        f32, f64 = float((x @ x.T)[0, 1]), float(x64[0] @ x64[1])
        if f64 - f32 > 1e-9:
            break
    threshold = (f32 + f64) / 2   # float32 arithmetic falls short of it, float64 (error ~1e-16) does not
    assert f32 < threshold < f64 - 1e-10
    assert real.group_rows(x, threshold).tolist() == [0, 0]
    assert real.group_rows(x64, f64 + 1e-10).tolist() == [0, 1]


# ----------------------------------------------------------------------------------------------- the audio release

def test_audio_arrays_take_the_first_row_of_each_clip(audio, tmp_path):
    rel, contents = audio
    mirror = _mirror(tmp_path, rel, contents)
    items, captions, c2i = real.release_arrays("toy-audio", mirror=mirror)
    clean = _audio_rows(0.05)
    assert items.dtype == np.float32 and np.array_equal(items, clean[AUDIO_FIRST])
    assert np.array_equal(captions, AUDIO_TXT) and c2i.dtype == np.int64 and c2i.tolist() == AUDIO_C2CLIP.tolist()
    i1, c1, k1 = real.release_arrays("toy-audio", mirror=mirror, first_caption=True)
    assert np.array_equal(i1, items) and np.array_equal(c1, AUDIO_TXT[AUDIO_FIRST]) and k1.tolist() == [0, 1, 2, 3]


def test_real_galleries_row_c_is_clip_c_in_every_condition(audio, tmp_path, net):
    rel, contents = audio
    _serve(net, rel, contents)
    gal = real.real_galleries("toy-audio")
    assert list(gal) == ["clean", "original", "noisy"]
    want = {"clean": _audio_rows(0.05), "original": _audio_rows(0.06, (6, 7)), "noisy": _audio_rows(0.2)}
    for k, g in gal.items():
        assert g.dtype == np.float32 and g.flags["C_CONTIGUOUS"] and np.array_equal(g, want[k][AUDIO_FIRST]), k
    assert {c[-1] for c in net["calls"]} == {False}   # progress off unless asked
    real.real_galleries("toy-audio", cache_dir=tmp_path / "c2", progress=True)
    assert net["calls"][-1][-1] is True
    with _exactly(ValueError, "release 'coco500-clip-b16' has no distorted galleries; the audio release has: "
                              "['audiocaps-clap', 'toy-audio']"):
        real.real_galleries("coco500-clip-b16")
    with pytest.raises(real.RealDataUnavailable) as err:   # the default release: the real audio one
        real.real_galleries(download=False)
    assert err.value.release == "audiocaps-clap" and sorted(err.value.brief) == [
        "audio_emb_highpass_1000Hz.npy", "audio_emb_lowpass_4000Hz.npy", "audio_emb_noisy_snr10dB.npy",
        "audio_emb_original.npy", "audio_emb_pitch_shift.npy", "audio_embeddings.npy", "text_embeddings.npy"]


def test_audio_checks_shapes_dtypes_and_the_clip_count(monkeypatch, tmp_path):
    cases = [
        (dict(noisy=_audio_rows(0.2)[:5]), "audio_emb_noisy.npy: expected float32 (7, 8); got float32 (5, 8)"),
        (dict(noisy=_audio_rows(0.2).astype(np.float64)),
         "audio_emb_noisy.npy: expected float32 (7, 8); got float64 (7, 8)"),
        (dict(clean=_audio_rows(0.05).reshape(8, 7)),
         "audio_embeddings.npy: expected float32 (7, 8); got float32 (8, 7)"),
        (dict(n_items=5), "toy-bad: grouping the audio rows at cosine >= 0.99 gives 4 clips, the registry says 5"),
    ]
    for i, (kwargs, msg) in enumerate(cases):
        rel, contents = _audio(monkeypatch, "toy-bad", **kwargs)
        with _exactly(ValueError, msg):
            real.real_galleries("toy-bad", mirror=_mirror(tmp_path / str(i), rel, contents),
                                cache_dir=tmp_path / str(i))


def test_audio_rows_of_a_clip_must_agree_in_every_encoding(monkeypatch, tmp_path):
    # clean: a chain v+0.1e, v, v-0.1e: linked at 0.995, but its ends agree only to 0.99 / 1.01
    chain = np.zeros((7, 8))
    chain[:, 0:4] = np.eye(4)[[0, 0, 0, 1, 2, 3, 3]]
    chain[0, 4], chain[2, 4] = 0.1, -0.1
    rel, contents = _audio(monkeypatch, "toy-chain", clean=_unit(chain))
    with _exactly(ValueError, "toy-chain: in audio_embeddings.npy two rows of one clip have cosine 0.9802 < 0.99: "
                              "the clips are not the same in every encoding"):
        real.real_galleries("toy-chain", mirror=_mirror(tmp_path / "a", rel, contents))
    # a distorted encoding is held to 0.95: 1 / 1.09 = 0.9174 fails, 1 / 1.04 = 0.9615 passes (0.99 would fail)
    rel, contents = _audio(monkeypatch, "toy-far", noisy=_audio_rows(0.3))
    with _exactly(ValueError, "toy-far: in audio_emb_noisy.npy two rows of one clip have cosine 0.9174 < 0.95: the "
                              "clips are not the same in every encoding"):
        real.real_galleries("toy-far", mirror=_mirror(tmp_path / "b", rel, contents))
    rel, contents = _audio(monkeypatch, "toy-near")
    mirror = _mirror(tmp_path / "c", rel, contents)
    assert len(real.real_galleries("toy-near", mirror=mirror)["noisy"]) == 4
    # at the floor itself the rows pass (low < floor fails)
    x = _audio_rows(0.2).astype(np.float64)
    low = (x @ x.T)[AUDIO_C2CLIP[:, None] == AUDIO_C2CLIP[None, :]].min()
    monkeypatch.setattr(real, "DISTORTED_GROUP_COS", float(low))
    assert len(real.real_galleries("toy-near", mirror=mirror)["noisy"]) == 4
    monkeypatch.setattr(real, "DISTORTED_GROUP_COS", float(np.nextafter(low, 1)))
    with pytest.raises(ValueError, match="in audio_emb_noisy.npy two rows of one clip have cosine 0.9615 < 0.96"):
        real.real_galleries("toy-near", mirror=mirror)


def test_audio_text_file_is_never_unpickled(monkeypatch, tmp_path):
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}] * 7, dtype=object), allow_pickle=True)
    rel, contents = _audio(monkeypatch, "toy-pickle", text=buf.getvalue())
    with pytest.raises(ValueError, match=r"text_embeddings\.npy cannot be read as a \.npy array \(.*allow_pickle"):
        real.load_real("toy-pickle", mirror=_mirror(tmp_path, rel, contents))


def test_load_real_audio_split_and_meta(audio, tmp_path):
    rel, contents = audio
    mirror = _mirror(tmp_path, rel, contents)
    ds = real.load_real("toy-audio", test_fraction=0.25, seed=3, val=False, mirror=mirror)
    assert ds.name == "toy-audio" and ds.source == "real" and set(ds.splits) == {"test", "train"}
    items = _audio_rows(0.05)[AUDIO_FIRST]
    test_idx, train_idx = _hand_split(4, 0.25, 3)
    assert not np.array_equal(test_idx, _hand_split(4, 0.25, 0)[0])   # the seed matters here
    for split, idx in (("test", test_idx), ("train", train_idx)):
        s = ds.split(split)
        assert np.array_equal(s.images, items[idx]) and s.image_ids == [f"clip{c:03d}" for c in idx]
        assert np.array_equal(s.captions, AUDIO_TXT[np.isin(AUDIO_C2CLIP, idx)])
        assert np.array_equal(idx[s.caption_to_image], AUDIO_C2CLIP[np.isin(AUDIO_C2CLIP, idx)])
    folder = tmp_path / "cache" / "real" / "toy-audio"
    names = sorted(GALLERIES.values()) + ["text_embeddings.npy"]
    names.sort()
    expected = {"release": "toy-audio", "label": "real: toy-audio", "model": "toy-encoder", "dataset": "toyset",
                "published_dataset": "toypub", "modality": "audio", "repo": "github.com/someone/toy-audio",
                "urls": {n: _url(rel, n) for n in names}, "commits": dict.fromkeys(names, COMMIT),
                "sha256": {n: _sha(contents[n]) for n in names}, "sources": dict.fromkeys(
                    ["audio_embeddings.npy", "text_embeddings.npy", "audio_emb_original.npy", "audio_emb_noisy.npy"],
                    "mirror"), "licence": "none stated", "caveats": ["made up", "small"], "folder": str(folder),
                "n_clips": 4, "group_cos": 0.99, "galleries": ["clean", "original", "noisy"], "test_fraction": 0.25,
                "seed": 3, "n_images": 4, "n_captions": 7}
    assert ds.meta == expected
    assert list(ds.meta["urls"]) == names
    default = real.load_real("toy-audio")
    assert set(default.splits) == {"test", "val", "train"} and default.meta["test_fraction"] == 0.5
    assert default.meta["seed"] == 0 and default.meta["sources"] == dict.fromkeys(expected["sources"], "cache")
    with _exactly(ValueError, "features= picks a stacked file of an image-text release; 'toy-audio' has none (its "
                              "distorted galleries: hubnorm.data.real_galleries)"):
        real.load_real("toy-audio", features="features_clip.npy")


def test_clip_index_reads_the_numbers():
    assert real.clip_index(["clip000", "clip123", "clip7"]).tolist() == [0, 123, 7]
    assert real.clip_index(("clip017",)).dtype == np.int64
    msg = ("image_ids must be clip ids such as 'clip017' (the image_ids of a split of the audio release); "
           "got {}")
    with _exactly(ValueError, msg.format("[]")):
        real.clip_index([])
    with _exactly(ValueError, msg.format("[]")):
        real.clip_index(None)
    with _exactly(ValueError, msg.format("['Clip001', 'clipx', 5]")):
        real.clip_index(["clip001", "Clip001", "clipx", 5, "img17"])
    with _exactly(ValueError, msg.format("['clip']")):
        real.clip_index(["clip"])


# ----------------------------------------------------------------------------------------------- image releases

def test_load_real_pairs_split_and_meta(pairs, tmp_path):
    rel, contents = pairs
    mirror = _mirror(tmp_path, rel, contents)
    ds = real.load_real("toy-pairs", test_fraction=1 / 3, seed=5, val=False, mirror=mirror, cache_dir=tmp_path / "c")
    assert ds.name == "toy-pairs" and ds.source == "real" and set(ds.splits) == {"test", "train"}
    test_idx, train_idx = _hand_split(6, 1 / 3, 5)
    assert not np.array_equal(test_idx, _hand_split(6, 1 / 3, 0)[0])
    for split, idx in (("test", test_idx), ("train", train_idx)):
        assert np.array_equal(ds.split(split).images, PAIRS_IMG[idx])
        assert np.array_equal(ds.split(split).captions, PAIRS_TXT[idx])
    folder = tmp_path / "c" / "real" / "toy-pairs"
    n = "features_clip.npy"
    want = {"release": "toy-pairs", "label": "real: toy-pairs", "model": "toy-encoder", "dataset": "toyset",
            "published_dataset": "toypub", "modality": "image", "repo": "github.com/someone/toy-pairs",
            "urls": {n: _url(rel, n)}, "commits": {n: COMMIT}, "sha256": {n: _sha(contents[n])},
            "sources": {n: "mirror"}, "licence": "none stated", "caveats": ["made up", "small"],
            "folder": str(folder), "test_fraction": 1 / 3, "seed": 5, "n_images": 6, "n_captions": 6}
    assert {k: ds.meta.get(k) for k in want} == want
    assert sorted(p.name for p in folder.iterdir()) == [n]
    same = real.load_real("toy-pairs", features="features_clip.npy", cache_dir=tmp_path / "c", val=False,
                          test_fraction=1 / 3, seed=5)
    assert same.name == "toy-pairs" and same.meta["model"] == "toy-encoder" and same.meta["sources"] == {n: "cache"}
    assert np.array_equal(same.split("test").images, ds.split("test").images)


def test_load_real_control_file(pairs, tmp_path, net):
    rel, contents = pairs
    _serve(net, rel, contents)
    ds = real.load_real("toy-pairs", features="features_clip_random.npy", val=False)
    assert ds.name == "toy-pairs/features_clip_random"
    assert ds.meta["model"] == "toy-encoder, random initialisation"
    assert ds.meta["label"] == "real: toy-pairs (random-init control)"
    assert list(ds.meta["urls"]) == ["features_clip_random.npy"]
    assert [c[0] for c in net["calls"]] == [_url(rel, "features_clip_random.npy")] and net["calls"][0][-1] is False
    idx, _ = _hand_split(6, 0.5, 0)
    assert np.array_equal(ds.split("test").images, PAIRS_RND[0][idx])
    with _exactly(ValueError, "features='x.npy' is not a stacked file of 'toy-pairs'; valid: ['features_clip.npy', "
                              "'features_clip_random.npy']"):
        real.load_real("toy-pairs", features="x.npy")


def test_load_real_per_caption_release(caps, tmp_path):
    rel, contents = caps
    mirror = _mirror(tmp_path, rel, contents)
    ds = real.load_real("toy-caps", mirror=mirror, val=False, test_fraction=1 / 3, seed=1)
    assert ds.name == "toy-caps" and ds.meta["n_images"] == 3 and ds.meta["n_captions"] == 5
    assert set(ds.meta["urls"]) == set(contents)
    test_idx, _ = _hand_split(3, 1 / 3, 1)
    assert np.array_equal(ds.split("test").images, CAPS_IMG[test_idx])
    assert np.array_equal(ds.split("test").captions, CAPS_TXT[np.isin(CAPS_C2I, test_idx)])
    with _exactly(ValueError, "features='x.npy' is not a stacked file of 'toy-caps'; valid: none"):
        real.load_real("toy-caps", features="x.npy")


def test_load_real_download_false_never_downloads(pairs, audio, net):
    for name in ("toy-pairs", "toy-audio"):
        with pytest.raises(real.RealDataUnavailable) as err:
            real.load_real(name, download=False)
        assert all(b[-1] == "downloads off" for b in err.value.brief.values())
    assert net["calls"] == []


def test_load_real_checks_the_registry_counts(monkeypatch, tmp_path):
    data = _npy(np.stack([PAIRS_IMG, PAIRS_TXT]))
    rel = _register(monkeypatch, "toy-count", {"features_clip.npy": data}, n_items=7, n_captions=6, dim=4)
    mirror = _mirror(tmp_path, rel, {"features_clip.npy": data})
    with _exactly(ValueError, "toy-count: the loader found 6 images / 6 captions; the registry says 7 / 6"):
        real.load_real("toy-count", mirror=mirror)
    rel = _register(monkeypatch, "toy-count2", {"features_clip.npy": data}, n_items=6, n_captions=5, dim=4)
    with _exactly(ValueError, "toy-count2: the loader found 6 images / 6 captions; the registry says 6 / 5"):
        real.load_real("toy-count2", mirror=_mirror(tmp_path, rel, {"features_clip.npy": data}))


def test_release_arrays_of_image_releases(caps, pairs, tmp_path, monkeypatch):
    rel, contents = caps
    mirror = _mirror(tmp_path, rel, contents)
    np_load = np.load   # the verified bytes are what is read, never the disk
    monkeypatch.setattr(np, "load", lambda f, *a, **k: np_load(f, *a, **k) if isinstance(f, io.BytesIO)
                        else pytest.fail(f"np.load read {f} from the disk"))
    items, captions, c2i = real.release_arrays("toy-caps", mirror=mirror)
    assert np.array_equal(items, CAPS_IMG) and np.array_equal(captions, CAPS_TXT)
    assert c2i.dtype == np.int64 and c2i.tolist() == CAPS_C2I.tolist()
    i1, c1, k1 = real.release_arrays("toy-caps", mirror=mirror, first_caption=True)
    assert np.array_equal(i1, CAPS_IMG) and np.array_equal(c1, CAPS_TXT[[0, 1, 3]]) and k1.tolist() == [0, 1, 2]
    prel, pcontents = pairs
    pmirror = _mirror(tmp_path, prel, pcontents, ["features_clip.npy"])   # the optional file is not there
    items, captions, c2i = real.release_arrays("toy-pairs", mirror=pmirror, extras=True, download=False)
    assert np.array_equal(items, PAIRS_IMG) and np.array_equal(captions, PAIRS_TXT) and c2i.tolist() == list(range(6))
