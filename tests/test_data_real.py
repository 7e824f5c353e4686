"""The real: releases (hubnorm.data.real): the registry against the shared mirror, loading every release, recomputed
sanity numbers, the audio clips and their distorted galleries, and the fetch path -- cache, mirror, download --
against a local HTTP server (no network: every test points the URL base at 127.0.0.1), with tampered, truncated,
interrupted and changing files; bad inputs and the fetch-real command."""

import hashlib
import http.server
import io
import os
import pathlib
import socket
import threading
from contextlib import contextmanager

import numpy as np
import pytest

import hubnorm as hn
from conftest import shared_path, unit_rows
from hubnorm import media
from hubnorm.data import real
from hubnorm.data.cli import main

MIRROR = ("embeddings",)


def _dead_url() -> str:
    with socket.socket() as s:   # a loopback port with nothing listening: a download fails at once
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """Every test: its own cache root, no mirror from the environment, and no network."""
    monkeypatch.setenv("HUBNORM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HUBNORM_REAL_MIRROR", raising=False)
    monkeypatch.setattr(real, "URL_BASE", _dead_url())
    return tmp_path / "cache"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ----------------------------------------------------------------------------------------------- a toy release

TOY_COMMIT = "c0ffee" + "0" * 34


def _toy_bytes(seed=0, n=24, d=8) -> bytes:
    rng = np.random.default_rng(seed)
    img = unit_rows(rng, n, d)
    txt = img + 0.3 * unit_rows(rng, n, d)
    txt /= np.linalg.norm(txt, axis=1, keepdims=True)
    buf = io.BytesIO()
    np.save(buf, np.stack([img, txt]).astype(np.float32))
    return buf.getvalue()


@pytest.fixture
def toy(monkeypatch):
    """A registered one-file release (stacked pairs, 24 images) and its bytes."""
    data = _toy_bytes()
    rel = real.RealRelease(
        name="toy", label="real: toy pairs", repo="someone/toy", mirror="toy-folder", model="toy-encoder",
        dataset="toyset", published_dataset="toyset", modality="image", n_items=24, n_captions=24, dim=8, licence="none stated",
        caveats=("made up",),
        files=(real.RealFile("features_clip.npy", "deep/features_clip.npy", TOY_COMMIT, _sha(data), len(data),
                             "(2, 24, 8) pairs"),))
    monkeypatch.setitem(real.RELEASES, "toy", rel)
    return rel, data


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        st = self.server.state
        st["requests"].append(self.path)
        data = st["files"].get(self.path)
        if data is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if st["drop_after"]:
            data = data[:st["drop_after"].pop(0)]   # then close: the client sees a short body
        self.wfile.write(data)
        self.wfile.flush()
        self.close_connection = True


@contextmanager
def _server(monkeypatch, files, drop_after=()):
    """Serve ``files`` ({url path: bytes}) on 127.0.0.1 and point real.URL_BASE at it."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    srv.state = {"files": files, "requests": [], "drop_after": list(drop_after)}
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    monkeypatch.setattr(real, "URL_BASE", f"http://127.0.0.1:{srv.server_address[1]}")
    try:
        yield srv.state
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)


def _toy_path(rel):
    f = rel.files[0]
    return f"/{rel.repo}/{f.commit}/{f.path}"


def _listing(folder: pathlib.Path):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


# ----------------------------------------------------------------------------------------------- the registry

@pytest.mark.shared_data
def test_registry_sha256_and_sizes_equal_the_mirror_files():
    root = shared_path(*MIRROR)
    seen = 0
    for rel in real.RELEASES.values():
        assert rel.modality in ("image", "audio") and rel.licence and rel.caveats and rel.required
        for f in rel.files:
            data = (root / rel.mirror / f.name).read_bytes()
            assert (len(data), _sha(data)) == (f.size, f.sha256), f"{rel.name}/{f.name}"
            assert len(f.commit) == 40 and int(f.commit, 16) >= 0
            assert rel.url(f) == f"{real.URL_BASE}/{rel.repo}/{f.commit}/{f.path}"
            seen += 1
    assert seen == 2 + 4 + 8
    assert 'URL_BASE = "https://raw.githubusercontent.com"' in pathlib.Path(real.__file__).read_text()
    se = real.RELEASES["flickr8k-100x5-clip-b32"]
    assert [se.file(n).commit[:7] for n in ("image_embeddings.npy", "text_embeddings.npy", "metadata.csv",
                                           "model_info.json")] == ["7a3fb8b", "7a3fb8b", "9bdaa42", "72b07e8"]
    assert real.RELEASES["audiocaps-clap"].url(real.RELEASES["audiocaps-clap"].file("text_embeddings.npy")).endswith(
        "/qianshuguo/audio-text-clap/4a0d568541b2f8989ff165c730595d66335538a2/outputs/embeddings/text_embeddings.npy")


# ----------------------------------------------------------------------------------------------- loading

EXPECTED = {   # name: (model, dataset, modality, n_images, n_captions, items of the test split at 0.5)
    "coco500-clip-b16": ("OpenAI CLIP ViT-B/16", "coco", "image", 500, 500, 250),
    "flickr8k-100x5-clip-b32": ("openai/clip-vit-base-patch32", "flickr8k", "image", 100, 500, 50),
    "audiocaps-clap": ("LAION-CLAP", "audiocaps", "audio", 399, 497, 200),
}


@pytest.mark.shared_data
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_release_loads_from_the_mirror_and_then_from_the_cache(name, monkeypatch, _isolated):
    monkeypatch.setenv("HUBNORM_REAL_MIRROR", str(shared_path(*MIRROR)))
    ds = hn.load_embeddings(f"real:{name}")
    model, dataset, modality, n_img, n_cap, n_test = EXPECTED[name]
    rel = real.RELEASES[name]
    assert ds.source == "real" and ds.name == name and set(ds.splits) == {"test", "val", "train"}
    assert sum(s.n_images for s in ds.splits.values()) == n_img
    assert sum(s.n_captions for s in ds.splits.values()) == n_cap and ds.split("test").n_images == n_test
    assert ds.split("test").images.shape[1] == 512 and ds.split("test").images.dtype == np.float32
    m = ds.meta
    assert (m["release"], m["model"], m["dataset"], m["modality"], m["n_images"], m["n_captions"]) == \
        (name, model, dataset, modality, n_img, n_cap)
    assert m["label"] == rel.label and m["label"].startswith("real: ") and m["licence"] == rel.licence
    assert set(m["urls"]) == set(m["commits"]) == {f.name for f in rel.required}
    assert all(u.endswith(rel.file(n).path) and rel.file(n).commit in u for n, u in m["urls"].items())
    assert set(m["sources"].values()) == {"mirror"}
    folder = _isolated / "real" / name
    assert sorted(p.name for p in folder.iterdir()) == sorted(f.name for f in rel.required)
    monkeypatch.delenv("HUBNORM_REAL_MIRROR")
    again = hn.load_embeddings(f"real:{name}", seed=3, test_fraction=0.3, val=False)
    assert set(again.meta["sources"].values()) == {"cache"} and set(again.splits) == {"test", "train"}
    assert again.split("test").n_images == round(0.3 * n_img)
    assert real.real_status(name) == "cached"


def _merged(ds):
    """The whole collection again (every split), with the caption -> image index."""
    imgs, caps, c2i = [], [], []
    for s in ds.splits.values():
        c2i.append(s.caption_to_image + sum(len(x) for x in imgs))
        imgs.append(s.images)
        caps.append(s.captions)
    return np.concatenate(imgs), np.concatenate(caps), np.concatenate(c2i)


def _r1(ds):
    tasks = hn.build_tasks(*_merged(ds))
    return {d: round(hn.evaluate(t.fit(hn.make_normalizer("raw")), t)["R@1"], 1) for d, t in tasks.items()}


@pytest.mark.shared_data
def test_recomputed_recall_at_1_of_every_release(monkeypatch):
    """R@1 over each whole collection, from the loaded embeddings (the READMEs' numbers, checked here)."""
    monkeypatch.setenv("HUBNORM_REAL_MIRROR", str(shared_path(*MIRROR)))
    assert _r1(hn.load_embeddings("real:coco500-clip-b16")) == {"t2i": 50.6, "i2t": 55.2}
    assert _r1(hn.load_embeddings("real:flickr8k-100x5-clip-b32")) == {"t2i": 83.2, "i2t": 93.0}
    # text -> audio over the 399 clips (35.4 over the 404 items of a grouping at 0.9999, which splits 5 clips)
    assert _r1(hn.load_embeddings("real:audiocaps-clap"))["t2i"] == 35.6
    ctrl = hn.load_embeddings("real:coco500-clip-b16", features="features_clip_random.npy")
    assert _r1(ctrl)["t2i"] < 2 and ctrl.name == "coco500-clip-b16/features_clip_random"
    assert "random" in ctrl.meta["model"] and "control" in ctrl.meta["label"]


@pytest.mark.shared_data
def test_audio_rows_group_into_399_clips_in_every_encoding():
    folder = shared_path(*MIRROR, "audiocaps-500-laion-clap")
    rel = real.RELEASES["audiocaps-clap"]
    enc = {c: np.load(folder / f) for c, f in rel.galleries.items()}
    clips = real.group_rows(enc["clean"], real.AUDIO_GROUP_COS)
    assert clips.max() + 1 == 399 and clips[0] == 0
    assert np.bincount(np.bincount(clips))[1:].tolist() == [311, 79, 8, 1]
    for cond, x in enc.items():   # every encoding gives the same partition at its own margin
        assert np.array_equal(real.group_rows(x, 0.95 if cond == "noisy_snr10dB" else 0.99), clips), cond
    # a grouping at 0.9999 gives 404 items (320 / 76 / 7 / 1): it splits 5 clips whose rows agree to >= 0.99982
    fine = real.group_rows(enc["clean"], 0.9999)
    assert np.bincount(np.bincount(fine))[1:].tolist() == [320, 76, 7, 1]
    split = [c for c in range(399) if len(set(fine[clips == c])) > 1]
    assert len(split) == 5
    x = enc["clean"].astype(np.float64)
    same, other = clips[:, None] == clips[None, :], clips[:, None] != clips[None, :]
    assert (x @ x.T)[same].min() > 0.9998 and (x @ x.T)[other].max() < 0.95


@pytest.mark.shared_data
def test_audio_dataset_and_distorted_galleries_are_aligned_by_clip(monkeypatch):
    monkeypatch.setenv("HUBNORM_REAL_MIRROR", str(shared_path(*MIRROR)))
    ds = hn.load_embeddings("real:audiocaps-clap")
    gal = real.real_galleries("audiocaps-clap")
    assert list(gal) == ["clean", "original", "highpass_1000Hz", "lowpass_4000Hz", "noisy_snr10dB", "pitch_shift"]
    assert all(g.shape == (399, 512) and g.dtype == np.float32 for g in gal.values())
    rows = {}
    for s in ds.splits.values():
        idx = real.clip_index(s.image_ids)
        assert np.array_equal(s.images, gal["clean"][idx])
        for j, c in enumerate(s.caption_to_image):
            rows.setdefault(int(idx[c]), []).append(j)
    assert sorted(rows) == list(range(399))
    # row c of every gallery is clip c: the second clean encoding agrees row by row, the distortions move away
    cos = {k: np.sum(g * gal["clean"], axis=1) for k, g in gal.items()}
    assert cos["original"].min() > 0.99
    assert all(np.median(cos[k]) < np.median(cos["original"]) for k in gal if k not in ("clean", "original"))
    # text -> audio on a distorted gallery loses recall (the captions stay)
    imgs, caps, c2i = _merged(ds)
    order = np.concatenate([real.clip_index(s.image_ids) for s in ds.splits.values()])
    r1 = {k: np.mean((caps @ g[order].T).argmax(1) == c2i) for k, g in gal.items()}
    assert r1["clean"] == pytest.approx(0.356, abs=5e-4) and r1["highpass_1000Hz"] < r1["clean"] - 0.1


@pytest.mark.shared_data
def test_load_media_labels_the_audio_release(monkeypatch):
    monkeypatch.setenv("HUBNORM_REAL_MIRROR", str(shared_path(*MIRROR)))
    monkeypatch.setenv("HUBNORM_FORBID_SYNTHETIC", "1")   # a real source is fine
    for modality in ("audio", "auto"):
        src = media.load_media("real:audiocaps-clap", item_modality=modality)
        assert (src.synthetic, src.dataset, src.model, src.modalities) == \
            (False, "audiocaps", "LAION-CLAP", ("text", "audio"))
        assert src.data.modalities == ("text", "audio") and src.data.bank_items.shape[0] == 133   # the embeddings
        assert src.directions == ("t2a", "a2t") and src.label == ("real data (audiocaps-clap, LAION-CLAP, 200 test clips, 253 captions; banks from "
                                                             "133 training clips, 166 training captions)")
    with pytest.raises(ValueError, match="item_modality='image' contradicts real:audiocaps-clap"):
        media.load_media("real:audiocaps-clap", item_modality="image")
    img = media.load_media("real:coco500-clip-b16")
    assert img.directions == ("t2i", "i2t") and (img.dataset, img.model) == ("coco", "OpenAI CLIP ViT-B/16")


# ----------------------------------------------------------------------------------------------- the fetch path

def test_download_is_checked_cached_and_then_read_from_the_cache(toy, monkeypatch, _isolated):
    rel, data = toy
    with _server(monkeypatch, {_toy_path(rel): data}) as st:
        got = real.obtain_real("toy", progress=False)
        assert got.sources == {"features_clip.npy": "download"} and got.how == "downloaded"
        assert got.contents["features_clip.npy"] == data and st["requests"] == [_toy_path(rel)]
        folder = real.fetch_real("toy", progress=False)   # cached now: no second request
        assert st["requests"] == [_toy_path(rel)]
    assert folder == _isolated / "real" / "toy" and _listing(folder) == ["features_clip.npy"]
    assert (folder / "features_clip.npy").read_bytes() == data
    ds = hn.load_embeddings("real:toy")   # offline again: the cache alone
    assert ds.meta["sources"] == {"features_clip.npy": "cache"} and ds.meta["model"] == "toy-encoder"
    assert ds.meta["urls"]["features_clip.npy"] == f"{real.URL_BASE}/someone/toy/{TOY_COMMIT}/deep/features_clip.npy"
    assert sum(s.n_images for s in ds.splits.values()) == 24


def test_a_tampered_download_is_refused_and_not_cached(toy, monkeypatch, _isolated):
    rel, data = toy
    bad = bytearray(data)
    bad[-5] ^= 0x01   # one flipped bit in the last row
    with _server(monkeypatch, {_toy_path(rel): bytes(bad)}):
        with pytest.raises(real.RealDataUnavailable) as err:
            real.fetch_real("toy", progress=False)
    msg = str(err.value)
    assert "checksum mismatch" in msg and rel.url(rel.files[0]) in msg and rel.files[0].sha256 in msg
    assert err.value.brief == {"features_clip.npy": ["not cached", "no mirror", "download failed its sha256"]}
    assert _listing(_isolated / "real" / "toy") == []   # no file, no temporary file, no partial


def test_an_interrupted_download_leaves_no_cache_entry_and_a_rerun_completes(toy, monkeypatch, _isolated):
    rel, data = toy
    with _server(monkeypatch, {_toy_path(rel): data}, drop_after=[len(data) // 3]) as st:
        with pytest.raises(real.RealDataUnavailable, match="could not download"):
            real.fetch_real("toy", progress=False)
        folder = _isolated / "real" / "toy"
        assert not (folder / "features_clip.npy").exists()
        assert all(p.startswith(".download") for p in _listing(folder))   # only the resumable partial
        assert real.obtain_real("toy", progress=False).sources == {"features_clip.npy": "download"}
        assert len(st["requests"]) == 2
    assert _listing(folder) == ["features_clip.npy"] and (folder / "features_clip.npy").read_bytes() == data


def test_a_write_killed_before_the_rename_leaves_the_old_state(toy, monkeypatch, _isolated):
    rel, data = toy
    mirror = _isolated.parent / "mirror"
    (mirror / rel.mirror).mkdir(parents=True)
    (mirror / rel.mirror / "features_clip.npy").write_bytes(data)

    def killed(*a, **k):
        raise KeyboardInterrupt   # the process dies between writing the temporary file and the rename

    replace = os.replace
    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        real.fetch_real("toy", mirror=mirror)
    monkeypatch.setattr(os, "replace", replace)
    assert _listing(_isolated / "real" / "toy") == []   # no partial, no temporary file
    assert real.obtain_real("toy", mirror=mirror).sources == {"features_clip.npy": "mirror"}


def test_a_corrupt_write_is_never_renamed_into_place(toy, monkeypatch, _isolated):
    rel, data = toy
    mirror = _isolated.parent / "mirror"
    (mirror / rel.mirror).mkdir(parents=True)
    (mirror / rel.mirror / "features_clip.npy").write_bytes(data)
    real_fdopen = os.fdopen

    class Lossy(io.BufferedWriter):   # the disk keeps all but the last byte
        def write(self, b):
            return super().write(b[:-1])

    def fdopen(fd, mode="r", *a, **k):
        return Lossy(io.FileIO(fd, "wb")) if mode == "wb" else real_fdopen(fd, mode, *a, **k)

    monkeypatch.setattr(os, "fdopen", fdopen)
    with pytest.raises(OSError, match=f"writing .*features_clip.npy failed: .* has {len(data) - 1} bytes"):
        real.fetch_real("toy", mirror=mirror)
    assert _listing(_isolated / "real" / "toy") == []


def test_a_cached_file_corrupted_later_is_fetched_again(toy, monkeypatch, _isolated):
    rel, data = toy
    with _server(monkeypatch, {_toy_path(rel): data}) as st:
        cached = real.fetch_real("toy", progress=False) / "features_clip.npy"
        cached.write_bytes(data[:100] + b"\0" + data[101:])   # same size, one byte changed
        assert real.real_status("toy") == "incomplete: features_clip.npy fails its sha256"
        with pytest.warns(RuntimeWarning, match="cached copy fails: checksum mismatch"):
            got = real.obtain_real("toy", progress=False)
        assert got.sources == {"features_clip.npy": "download"} and len(st["requests"]) == 2
    assert cached.read_bytes() == data and real.real_status("toy") == "cached"
    cached.write_bytes(data[:-10])   # truncated, and nothing to fetch it from
    with pytest.raises(real.RealDataUnavailable) as err:
        real.obtain_real("toy", download=False)
    assert "the cached copy fails" in str(err.value) and f"has {len(data) - 10} bytes" in str(err.value)


def test_the_bytes_checked_are_the_bytes_loaded(toy, monkeypatch, _isolated):
    """Each file is read once, and what was hashed is what is loaded: a writer that changes the file right after
    the read does not reach the data set; the next load reads the changed file and refuses it."""
    rel, data = toy
    mirror = _isolated.parent / "mirror"
    (mirror / rel.mirror).mkdir(parents=True)
    (mirror / rel.mirror / "features_clip.npy").write_bytes(data)
    real.fetch_real("toy", mirror=mirror)
    cached = _isolated / "real" / "toy" / "features_clip.npy"
    reads = []
    original = pathlib.Path.read_bytes
    other = _toy_bytes(seed=1)

    def read_then_change(self):
        out = original(self)
        reads.append(self.name)
        if self == cached:
            self.write_bytes(other)   # a concurrent writer, just after our read
        return out

    monkeypatch.setattr(pathlib.Path, "read_bytes", read_then_change)
    np_load = np.load
    monkeypatch.setattr(np, "load", lambda f, *a, **k: np_load(f, *a, **k) if isinstance(f, io.BytesIO)
                        else pytest.fail(f"np.load read {f} from the disk"))
    ds = hn.load_embeddings("real:toy", val=False)
    assert reads == ["features_clip.npy"]
    want = np_load(io.BytesIO(data))
    assert np.array_equal(np.sort(np.concatenate([s.images for s in ds.splits.values()]), axis=0),
                          np.sort(want[0], axis=0))
    assert original(cached) == other
    monkeypatch.setattr(pathlib.Path, "read_bytes", original)
    with pytest.raises(real.RealDataUnavailable, match=f"the cached copy fails: checksum mismatch: {cached}"):
        real.obtain_real("toy", download=False)


# ----------------------------------------------------------------------------------------------- bad inputs

def test_unknown_release_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown real release 'nope'; valid: \['audiocaps-clap', 'coco500"):
        hn.load_embeddings("real:nope")
    with pytest.raises(ValueError, match="'local:<folder>', 'real:<release>' or 'sims:<folder>'"):
        hn.load_embeddings("coco500-clip-b16")
    with pytest.raises(ValueError, match="^unknown source kind 'remote': use 'synthetic:<preset>', "):
        hn.load_embeddings("remote:coco500-clip-b16")
    assert main(["fetch-real", "nope"]) == 2


def test_bad_mirror_settings_name_the_variable_and_the_fix(toy, monkeypatch, tmp_path):
    monkeypatch.setenv("HUBNORM_REAL_MIRROR", "  ")
    with pytest.raises(ValueError, match="HUBNORM_REAL_MIRROR is set but blank: unset it"):
        real.fetch_real("toy")
    (tmp_path / "a-file").write_text("x")
    monkeypatch.setenv("HUBNORM_REAL_MIRROR", str(tmp_path / "a-file"))
    with pytest.raises(ValueError, match="HUBNORM_REAL_MIRROR=.*a-file' is a file, not a folder: set it to a folder"):
        hn.load_embeddings("real:toy")
    monkeypatch.setenv("HUBNORM_REAL_MIRROR", str(tmp_path / "absent"))
    with pytest.raises(ValueError, match="absent' does not exist"):
        real.fetch_real("toy")
    with pytest.raises(ValueError, match="mirror=.*a-file' is not a folder"):   # the argument wins, and is checked
        real.fetch_real("toy", mirror=tmp_path / "a-file")


def test_a_wrong_mirror_file_is_named(toy, monkeypatch, tmp_path, _isolated):
    rel, data = toy
    (tmp_path / "m" / rel.mirror).mkdir(parents=True)
    wrong = tmp_path / "m" / rel.mirror / "features_clip.npy"
    wrong.write_bytes(_toy_bytes(seed=2))
    monkeypatch.setenv("HUBNORM_REAL_MIRROR", str(tmp_path / "m"))
    with pytest.raises(real.RealDataUnavailable) as err:
        real.fetch_real("toy", download=False)
    assert f"checksum mismatch: {wrong} has sha256 {_sha(wrong.read_bytes())}, expected {rel.files[0].sha256}" \
        in str(err.value)
    assert f"mirror copy {wrong} failed its sha256" in err.value.note
    with _server(monkeypatch, {_toy_path(rel): data}):   # a good download replaces it, with a warning
        with pytest.warns(RuntimeWarning, match="taken from the download because .*checksum mismatch"):
            assert real.obtain_real("toy", progress=False).sources == {"features_clip.npy": "download"}
    assert _listing(_isolated / "real" / "toy") == ["features_clip.npy"]


def test_nothing_available_says_how_to_fetch(toy):
    rel, _ = toy
    with pytest.raises(real.RealDataUnavailable) as err:
        hn.load_embeddings("real:toy")
    msg = str(err.value)
    for part in ("'toy'", rel.url(rel.files[0]), "not cached", "no mirror (HUBNORM_REAL_MIRROR unset)",
                 "could not download", "python -m hubnorm.data fetch-real toy", "HUBNORM_REAL_MIRROR=<mirror>",
                 "<mirror>/toy-folder/"):
        assert part in msg, part
    assert isinstance(err.value, RuntimeError) and err.value.release == "toy"
    with pytest.raises(ValueError, match="features='x.npy' is not a stacked file of 'toy'; valid: "
                                         r"\['features_clip.npy'\]"):
        hn.load_embeddings("real:toy", features="x.npy")
    with pytest.raises(ValueError, match="features= picks a stacked file"):
        hn.load_embeddings("real:audiocaps-clap", features="features_clip.npy")
    with pytest.raises(ValueError, match="has no distorted galleries"):
        real.real_galleries("coco500-clip-b16")
    with pytest.raises(ValueError, match="clip ids such as 'clip017'"):
        real.clip_index(["img3"])


def test_fetch_real_optional_prints_one_note_per_release_when_offline(capsys, _isolated):
    assert main(["fetch-real", "--optional", "--no-progress"]) == 0
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    assert len(lines) == len(real.RELEASES) and all(ln.startswith("NOTE: real release ") for ln in lines)
    assert [ln.split()[3] for ln in lines] == list(real.RELEASES)
    assert all("download failed (ConnectionError)" in ln and "fetch-real" in ln for ln in lines)
    assert main(["fetch-real", "coco500-clip-b16", "--no-progress"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: real release 'coco500-clip-b16'") and "fetch-real" in err
    assert not (_isolated / "real" / "coco500-clip-b16" / "features_clip.npy").exists()


@pytest.mark.shared_data
def test_fetch_real_and_list_with_a_mirror(capsys, _isolated):
    mirror = str(shared_path(*MIRROR))
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    status = [ln.strip().split(":")[0] for ln in out.split("real releases")[1].splitlines()[2::2]]
    assert status == ["not cached"] * 3
    assert main(["fetch-real", "--mirror", mirror, "--no-progress", "coco500-clip-b16", "audiocaps-clap"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"coco500-clip-b16: fetched from mirror (1 file, sha256 checked) -> "
                   f"{_isolated / 'real' / 'coco500-clip-b16'}",
                   f"audiocaps-clap: fetched from mirror (7 files, sha256 checked) -> "
                   f"{_isolated / 'real' / 'audiocaps-clap'}"]
    assert main(["fetch-real", "--no-progress", "--extras", "--mirror", mirror, "coco500-clip-b16"]) == 0
    assert capsys.readouterr().out.startswith("coco500-clip-b16: fetched from mirror (2 files")
    assert main(["fetch-real", "--no-progress", "--no-download", "coco500-clip-b16"]) == 0
    assert capsys.readouterr().out.startswith("coco500-clip-b16: cached (1 file,")
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    status = [ln.strip().split(":")[0] for ln in out.split("real releases")[1].splitlines()[2::2]]
    assert status == ["cached", "not cached", "cached"]


def test_load_local_embeddings_reads_the_files_it_is_handed(tmp_path):
    """files=: the bytes given, not the folder's (here the folder holds other bytes, or nothing)."""
    from hubnorm.data import load_local_embeddings

    data = _toy_bytes()
    (tmp_path / "features_clip.npy").write_bytes(_toy_bytes(seed=5))
    ds = load_local_embeddings(tmp_path, files={"features_clip.npy": data}, val=False)
    want = np.load(io.BytesIO(data))[0]
    got = np.concatenate([s.images for s in ds.splits.values()])
    assert np.array_equal(np.sort(got, axis=0), np.sort(want, axis=0))
    with pytest.raises(ValueError, match="no known embedding layout"):
        load_local_embeddings(tmp_path, files={})
    assert load_local_embeddings(tmp_path / "nowhere", files={"features_clip.npy": data}).meta["n_images"] == 24


@pytest.mark.shared_data
@pytest.mark.parametrize("name, shapes, first_shapes", [
    ("coco500-clip-b16", (500, 500), (500, 500)),
    ("flickr8k-100x5-clip-b32", (100, 500), (100, 100)),
    ("audiocaps-clap", (399, 497), (399, 399)),
])
def test_release_arrays_give_the_whole_release_unsplit(name, shapes, first_shapes):
    """What the calibration measures: every distinct item once, every caption (or the first of each item)."""
    mirror = shared_path("embeddings")
    items, caps, c2i = real.release_arrays(name, mirror=mirror, progress=False)
    assert (len(items), len(caps)) == shapes and len(c2i) == len(caps)
    assert set(np.unique(c2i)) == set(range(len(items)))
    # the item of each caption is its own row: the matched cosine beats the mean cosine
    matched = np.einsum("ij,ij->i", caps, items[c2i])
    assert matched.mean() > (caps @ items.T).mean() + 0.1
    i1, c1, k1 = real.release_arrays(name, mirror=mirror, progress=False, first_caption=True)
    assert (len(i1), len(c1)) == first_shapes and np.array_equal(k1, np.arange(len(i1)))
    assert np.array_equal(i1, items)
    first = np.asarray([np.flatnonzero(c2i == i)[0] for i in range(len(items))])
    assert np.array_equal(c1, caps[first])


@pytest.mark.shared_data
def test_a_bad_mirror_variable_does_not_break_a_cached_release(monkeypatch):
    """The mirror is read only for a file the cache lacks: with every file cached, a blank or wrong
    HUBNORM_REAL_MIRROR changes nothing (the notebooks' real column keeps working); for a missing file it is the
    clear error naming the variable."""
    real.fetch_real("coco500-clip-b16", mirror=shared_path("embeddings"), progress=False)
    monkeypatch.setenv("HUBNORM_REAL_MIRROR", "   ")
    ds = hn.load_embeddings("real:coco500-clip-b16", download=False)
    assert ds.meta["n_images"] == 500
    with pytest.raises(ValueError, match="HUBNORM_REAL_MIRROR"):
        real.obtain_real("flickr8k-100x5-clip-b32", download=False)
