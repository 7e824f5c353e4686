"""``python -m hubnorm.data`` (``hubnorm.data.cli``) in small pieces, without models, downloads or pickles: each
command's library call is replaced by a recorder, so what is checked is what the command asks for (every option
passed on, the defaults, the split lists) and what it prints and returns (the lines of ``list``, ``verify``,
``fetch``, ``fetch-real``, ``encode``, ``rehearse``, ``encode-texts``, ``import-qbnorm``; the exit codes), the
parser (its defaults and choices, and the defaults its help texts state), ``--device`` checking, and the one-line
messages of a failed read or write.

Survivors judged equivalent (no test can tell them apart):
- ``build_parser``: ``argparse.ArgumentParser(add_help=False)`` -> ``add_help=None`` for the shared options: both
  are false.
- ``_cmd_list``: ``if droot.exists()`` made always true: globbing a missing folder finds nothing.
- ``_cmd_verify``: ``ok += 1`` / ``bad += 1`` -> ``+= 2`` (2 mutants): only whether each is zero is read.
- ``_check_device``: ``getattr(torch.backends, "mps", None)`` without its default: every torch this package
  supports has ``torch.backends.mps``.
"""

from __future__ import annotations

import errno
import importlib
import json
import os
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from hubnorm.data import cache as cache_mod
from hubnorm.data import cli
from hubnorm.embeddings import EmbeddingDataset, EmbeddingSplit

real = importlib.import_module("hubnorm.data.real")
fetch_mod = importlib.import_module("hubnorm.data.fetch")
pipeline = importlib.import_module("hubnorm.data.pipeline")
rehearse_mod = importlib.import_module("hubnorm.data.rehearse")
qbnorm = importlib.import_module("hubnorm.data.qbnorm")
sentence = importlib.import_module("hubnorm.data.encoders.sentence")


class Recorder:
    """Stands in for a library function: records ``(args, kwargs)``; returns ``value`` or raises ``exc``."""

    def __init__(self, value=None, exc=None):
        self.calls, self.value, self.exc = [], value, exc

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        if self.exc is not None:
            raise self.exc
        return self.value(*args, **kwargs) if callable(self.value) else self.value


def _split(n_images=2, n_captions=3, dim=4, texts=True):
    rng = np.random.default_rng(0)
    return EmbeddingSplit(images=rng.standard_normal((n_images, dim)), captions=rng.standard_normal((n_captions, dim)),
                          caption_to_image=np.arange(n_captions) % n_images,
                          caption_texts=[f"t{i}" for i in range(n_captions)] if texts else None)


# --------------------------------------------------------------------------------------------------- parser
@pytest.mark.parametrize("values, want", [(None, ["test", "val"]), ([], ["test", "val"]), (["train"], ["train"]),
                                          (["a,b", "c"], ["a", "b", "c"]), (["a,,b,"], ["a", "b"]),
                                          (["test,test", " test ", "val"], ["test", "val"])])
def test_splits_are_repeated_or_comma_separated(values, want):
    assert cli._splits(values, ("test", "val")) == want


@pytest.mark.parametrize("values", [[""], [",", " "]])
def test_a_split_option_naming_no_split_is_an_error(values):
    with pytest.raises(ValueError, match=r"^--split \[.*\] names no split: give one or more of test, val, train "
                                         r"\(comma-separated\)$"):
        cli._splits(values, ("test",))


def test_parser_defaults():
    p = cli.build_parser()
    assert p.prog == "python -m hubnorm.data"
    a = p.parse_args(["fetch", "coco"])
    assert (a.command, a.dataset, a.what, a.split, a.no_progress, a.data_dir, a.cache_dir) == \
        ("fetch", "coco", "annotations", None, False, None, None)
    a = p.parse_args(["encode", "coco", "--model", "M", "--pretrained", "P"])
    assert (a.batch_size, a.precision, a.workers, a.force, a.no_progress, a.family, a.device, a.annotations,
            a.images_root, a.split) == (64, "fp32", 0, False, False, None, None, None, None, None)
    a = p.parse_args(["verify", "coco", "--model", "M", "--pretrained", "P", "--family", "blip"])
    assert a.family == "blip" and not hasattr(a, "batch_size") and not hasattr(a, "force")
    a = p.parse_args(["encode-texts", "cache:x:y:z"])
    assert (a.device, a.batch_size, a.text_model, a.split) == ("cpu", 64, None, None)
    a = p.parse_args(["rehearse", "--dataset", "coco"])
    assert (a.seed, a.scale, a.split, a.force, a.cache_dir) == (0, 1.0, None, False, None)
    a = p.parse_args(["import-qbnorm", "--sims-test", "a", "--sims-train-test", "b", "--out", "o"])
    assert (a.modalities, a.allow_pickle, a.overwrite, a.query_masks, a.dataset, a.model) == \
        ("text,video", False, False, None, None, None)
    a = p.parse_args(["fetch-real"])
    assert (a.names, a.mirror, a.extras, a.no_download, a.optional, a.no_progress) == \
        ([], None, False, False, False, False)
    a = p.parse_args(["encode", "coco", "--model", "M", "--pretrained", "P", "--split", "test", "--split", "val",
                      "--batch-size", "8", "--workers", "2", "--precision", "amp_bf16", "--force", "--no-progress"])
    assert (a.split, a.batch_size, a.workers, a.precision, a.force, a.no_progress) == \
        (["test", "val"], 8, 2, "amp_bf16", True, True)


@pytest.mark.parametrize("argv, message", [
    ([], "the following arguments are required: {list,fetch,fetch-real,encode,encode-texts,verify,rehearse,"
         "import-qbnorm}"),
    (["fetch", "coco", "--what", "everything"], "argument --what: invalid choice: 'everything'"),
    (["encode", "coco", "--model", "M", "--pretrained", "P", "--precision", "fp8"], "invalid choice: 'fp8'"),
    (["encode", "coco", "--model", "M", "--pretrained", "P", "--family", "sentence"], "invalid choice: 'sentence'"),
    (["encode", "coco", "--pretrained", "P"], "the following arguments are required: --model"),
    (["verify", "coco", "--model", "M"], "the following arguments are required: --pretrained"),
    (["rehearse"], "the following arguments are required: --dataset"),
    (["rehearse", "--dataset", "paper-coco"], "argument --dataset: invalid choice: 'paper-coco'"),
    (["import-qbnorm", "--sims-test", "a", "--out", "o"], "required: --sims-train-test"),
    (["list", "--split", "test"], "unrecognized arguments: --split test"),
])
def test_parser_refuses(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.build_parser().parse_args(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def _actions(parser):
    sub = next(a for a in parser._actions if a.dest == "command")
    return {name: {a.dest: a for a in p._actions} for name, p in sub.choices.items()}


def test_help_texts_state_the_defaults_the_parser_uses():
    acts = _actions(cli.build_parser())
    stated = {("fetch", "what"): r"\(default: annotations\)$",
              ("encode", "batch_size"): r"\(default 64\)$", ("encode", "workers"): r"\(default 0\)$",
              ("encode", "precision"): r"\(default fp32;", ("encode", "split"): r"default: test\)$",
              ("verify", "split"): r"default: test val train, those present\)$",
              ("encode-texts", "device"): r"\(default cpu\)$", ("encode-texts", "batch_size"): r"\(default 64\)$",
              ("encode-texts", "split"): r"default: test train\)$",
              ("rehearse", "seed"): r"\(default 0\)$", ("rehearse", "scale"): r"default 1\)$",
              ("rehearse", "split"): r"\(default: train val test\)$",
              ("import-qbnorm", "modalities"): r"\(default text,video;"}
    for (cmd, dest), pattern in stated.items():
        assert re.search(pattern, acts[cmd][dest].help), (cmd, dest, acts[cmd][dest].help)
    assert acts["encode"]["batch_size"].default == 64 and acts["encode"]["workers"].default == 0
    assert acts["rehearse"]["scale"].default == 1.0 and acts["encode-texts"]["device"].default == "cpu"
    assert acts["fetch"]["what"].choices == ("annotations", "images", "all")
    assert acts["encode"]["precision"].choices == ("fp32", "fp16", "bf16", "amp", "amp_bf16")
    assert acts["encode"]["family"].choices == ("open_clip", "blip") == acts["verify"]["family"].choices
    assert tuple(acts["rehearse"]["dataset"].choices) == tuple(rehearse_mod.rehearsal_sizes())


def test_every_option_has_help_and_every_command_a_description(capsys):
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(sub.choices) == {"list", "fetch", "fetch-real", "encode", "encode-texts", "verify", "rehearse",
                                "import-qbnorm"}
    for name, p in sub.choices.items():
        assert p.prog == f"python -m hubnorm.data {name}"
        assert p.description, name
        for a in p._actions:
            assert a.help or (name, a.dest) == ("rehearse", "dataset"), (name, a.dest)   # choices say it all
        with pytest.raises(SystemExit):
            p.parse_args(["-h"])
        out = capsys.readouterr().out
        assert out.startswith(f"usage: python -m hubnorm.data {name}")
    helps = {c.dest: c.help for c in sub._choices_actions}
    assert helps["encode"] == "encode a dataset split (open_clip or BLIP) and cache it"
    assert sub.choices["encode"].description == "encode a dataset split (open_clip or BLIP) and cache it."
    assert helps["verify"] == "check cached embeddings (key + sha256 checksums)"
    with pytest.raises(SystemExit):
        parser.parse_args(["-h"])
    out = capsys.readouterr().out
    assert "python -m hubnorm.data encode coco --model ViT-B-32-quickgelu --pretrained openai --split test" in out
    assert "{list,fetch,fetch-real,encode,encode-texts,verify,rehearse,import-qbnorm}" in out
    assert "folders: data root = $HUBNORM_DATA or <repo>/data/raw" in out


def test_real_release_names_and_mirror_variable_are_in_the_help():
    acts = _actions(cli.build_parser())
    assert acts["fetch-real"]["names"].help == f"releases (default: all): {', '.join(real.RELEASES)}"
    assert acts["fetch-real"]["mirror"].help == f"mirror folder (default: ${real.MIRROR_ENV}, when set)"


# ---------------------------------------------------------------------------------------------------- list
def test_list_prints_roots_splits_images_cache_resources_and_releases(tmp_path, capsys):
    data, cache = tmp_path / "data", tmp_path / "cache"
    (data / "annotations").mkdir(parents=True)
    (data / "annotations" / "dataset_coco.json").write_text("{}")
    (data / "annotations" / "flickr30k_test_karpathy.txt").write_text("image,caption\n")   # one split's file
    (data / "coco" / "images").mkdir(parents=True)
    (data / "coco" / "images" / "x.jpg").write_bytes(b"x")
    (data / "flickr8k" / "images").mkdir(parents=True)   # present but empty: missing
    rng = np.random.default_rng(0)
    key = cache_mod.make_key("coco", "test", "M", "openai", versions={"torch": "1"})
    cache_mod.write_entry(cache_mod.entry_dir("coco", "M", "openai", "test", cache), key,
                          rng.standard_normal((2, 3)), rng.standard_normal((3, 3)), [0, 1, 1], ["a", "b"],
                          ["x", "y", "z"])
    key = cache_mod.make_key("coco", "val", "B", "hf", versions={}, encoder_family="blip")
    cache_mod.write_entry(cache_mod.entry_dir("coco", "B", "hf", "val", cache), key,
                          rng.standard_normal((1, 5)), rng.standard_normal((2, 5)), [0, 0], ["a"], ["x", "y"])
    legacy = cache_mod.entry_dir("coco", "L", "none", "train", cache)
    key = cache_mod.make_key("coco", "train", "L", None, versions={})
    del key["encoder_family"]
    cache_mod.write_entry(legacy, key, rng.standard_normal((1, 2)), rng.standard_normal((1, 2)), [0], ["a"], ["x"])
    broken = cache_mod.entry_dir("coco", "Z", "none", "test", cache)
    broken.mkdir(parents=True)
    (broken / "manifest.json").write_text("{not json")

    assert cli.main(["list", "--data-dir", str(data), "--cache-dir", str(cache)]) == 0
    lines = capsys.readouterr().out.split("\n")
    assert lines[:3] == [f"data root:  {data}", f"cache root: {cache}", ""]
    assert lines[3] == "coco: MS-COCO 2014, Karpathy split (restval counted as train)"
    ann = data / "annotations" / "dataset_coco.json"
    assert lines[4] == f"  train 113,287 images                      annotations: {ann}"
    assert lines[5] == f"  val     5,000 images / 25,010 captions    annotations: {ann}"
    assert lines[7] == f"  images: {data / 'coco' / 'images'} (present; fetch --what images)"
    cached = [ln for ln in lines if ln.startswith("  cached: ")]
    assert cached[0] == "  cached: B / hf / val: 1 images, 2 captions, dim 5 (blip)"
    assert cached[1] == "  cached: L / none / train: 1 images, 1 captions, dim 2 (open_clip)"
    assert cached[2] == "  cached: M / openai / test: 2 images, 3 captions, dim 3 (open_clip)"
    assert cached[3].startswith(f"  cached: {broken}: unreadable ({broken / 'manifest.json'} is unreadable (")
    assert len(cached) == 4
    assert f"  images: {data / 'flickr30k' / 'images'} (missing; manual (see fetch --what images))" in lines
    assert f"  images: {data / 'flickr8k' / 'images'} (missing; manual (see fetch --what images))" in lines
    f30k = data / "annotations" / "flickr30k_test_karpathy.txt"
    assert f"  test    1,000 images / 5,000 captions     annotations: {f30k}" in lines
    assert "  val     1,014 images / 5,070 captions     annotations: missing" in lines
    i = lines.index("flickr8k: " + "Flickr8k, official/Karpathy split (6,000 train / 1,000 val / 1,000 test images, "
                                   "5 captions each)")
    assert lines[i + 1] == "  train   6,000 images / 30,000 captions    annotations: missing"
    assert lines[i + 5] == ""
    r = lines.index("resources:")
    assert lines[r + 1] == ("  karpathy_captions                https://cs.stanford.edu/people/karpathy/deepimagesent/"
                            "caption_datasets.zip  [md5:4fa8c08369d22fe16e41dc124bd1adc2]")
    assert lines[r + 3] == ("  coco_train2014                   http://images.cocodataset.org/zips/train2014.zip  "
                            "[md5:0da8c0bd3d6becc4dcb32757491aca88, md5:0da8cfa0e090c266b78f30e2d2874f1a]")
    assert any(ln.startswith("  clip_benchmark_coco_test ") and ln.endswith("  [unverified]") for ln in lines)
    k = lines.index("real releases (load_embeddings('real:<release>'); fetch-real):")
    assert lines[r - 1] == "" and lines[k - 1] == ""
    assert lines[k + 1] == "  coco500-clip-b16         real: COCO val2017, 500 pairs, CLIP ViT-B/16"
    assert lines[k + 2] == f"                           not cached: {cache / 'real' / 'coco500-clip-b16'}"


def test_list_without_a_cache_folder(tmp_path, capsys):
    assert cli.main(["list", "--data-dir", str(tmp_path / "d"), "--cache-dir", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert "  cached:" not in out and "  test    5,000 images / 25,010 captions    annotations: missing" in out
    assert f"  images: {tmp_path / 'd' / 'coco' / 'images'} (missing; fetch --what images)" in out


# ---------------------------------------------------------------------------------------------- fetch-real
class _Got:
    def __init__(self, how, n, folder):
        self.how, self.contents, self.folder = how, list(range(n)), folder


def _unavailable(name):
    return real.RealDataUnavailable(f"cannot get {name}", name, {"f.npy": ["offline"]}, {"f.npy": ["offline"]})


def test_fetch_real_passes_the_options_and_prints_one_line_per_release(monkeypatch, capsys):
    got = {"coco500-clip-b16": _Got("cache", 2, "/c/a"), "audiocaps-clap": _Got("mirror", 1, "/c/b")}
    obtain = Recorder(lambda n, **kw: got[n])
    monkeypatch.setattr(real, "obtain_real", obtain)
    rc = cli.main(["fetch-real", "coco500-clip-b16", "audiocaps-clap", "--mirror", "/m", "--cache-dir", "/c",
                   "--extras", "--no-download", "--no-progress"])
    assert rc == 0
    assert obtain.calls == [((n,), {"mirror": "/m", "cache_dir": "/c", "download": False, "progress": False,
                                    "extras": True}) for n in ("coco500-clip-b16", "audiocaps-clap")]
    assert capsys.readouterr().out == ("coco500-clip-b16: cache (2 files, sha256 checked) -> /c/a\n"
                                       "audiocaps-clap: mirror (1 file, sha256 checked) -> /c/b\n")
    obtain.calls.clear()
    got.update({n: _Got("download", 3, "/x") for n in real.RELEASES})
    assert cli.main(["fetch-real"]) == 0
    assert [c[0][0] for c in obtain.calls] == list(real.RELEASES)
    assert obtain.calls[0][1] == {"mirror": None, "cache_dir": None, "download": True, "progress": True,
                                  "extras": False}


def test_fetch_real_checks_every_name_before_fetching(monkeypatch, capsys):
    obtain = Recorder(lambda n, **kw: _Got("cache", 1, "/x"))
    monkeypatch.setattr(real, "obtain_real", obtain)
    assert cli.main(["fetch-real", "coco500-clip-b16", "nope"]) == 2
    assert obtain.calls == [] and "error: unknown real release 'nope'" in capsys.readouterr().err


def test_fetch_real_unavailable_is_an_error_or_a_note(monkeypatch, capsys):
    def obtain(n, **kw):
        if n == "coco500-clip-b16":
            raise _unavailable(n)
        return _Got("cache", 1, "/x")
    monkeypatch.setattr(real, "obtain_real", obtain)
    names = ["coco500-clip-b16", "audiocaps-clap"]
    assert cli.main(["fetch-real", *names]) == 1
    out, err = capsys.readouterr()
    assert err == "error: cannot get coco500-clip-b16\n"
    assert out == "audiocaps-clap: cache (1 file, sha256 checked) -> /x\n"
    assert cli.main(["fetch-real", "--optional", *names]) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.split("\n")[0] == f"NOTE: {_unavailable('coco500-clip-b16').note}"
    assert out.split("\n")[1].startswith("audiocaps-clap: cache")


# ------------------------------------------------------------------------------------------------- fetch
def test_fetch_passes_the_options_and_prints_the_paths(monkeypatch, capsys):
    rec = Recorder([Path("/a"), Path("/b")])
    monkeypatch.setattr(fetch_mod, "fetch", rec)
    assert cli.main(["fetch", "coco", "--what", "images", "--split", "test,val", "--data-dir", "/d",
                     "--no-progress"]) == 0
    assert rec.calls == [(("coco", "images"), {"splits": ["test", "val"], "data_dir": "/d", "progressbar": False})]
    assert capsys.readouterr().out == "ready: /a\nready: /b\n"
    assert cli.main(["fetch", "flickr8k"]) == 0
    assert rec.calls[1] == (("flickr8k", "annotations"), {"splits": ["test", "val", "train"], "data_dir": None,
                                                          "progressbar": True})


@pytest.mark.parametrize("exc", [fetch_mod.DownloadError("no network"), fetch_mod.ManualDownloadRequired("by hand"),
                                 FileNotFoundError("gone"), ValueError("bad")])
def test_known_errors_are_one_line_and_exit_2(monkeypatch, capsys, exc):
    monkeypatch.setattr(fetch_mod, "fetch", Recorder(exc=exc))
    assert cli.main(["fetch", "coco"]) == 2
    assert capsys.readouterr().err == f"error: {exc}\n"


def test_other_errors_propagate(monkeypatch):
    monkeypatch.setattr(fetch_mod, "fetch", Recorder(exc=RuntimeError("bug")))
    with pytest.raises(RuntimeError, match="bug"):
        cli.main(["fetch", "coco"])


def test_os_errors_are_one_line_and_exit_2(monkeypatch, capsys):
    monkeypatch.setattr(fetch_mod, "fetch", Recorder(exc=OSError(errno.ENOSPC, "No space left on device", "/f")))
    assert cli.main(["fetch", "coco"]) == 2
    assert capsys.readouterr().err == ("error: /f: No space left on device (the disk is full: free space, or write "
                                       "elsewhere with --cache-dir / HUBNORM_CACHE)\n")


# ------------------------------------------------------------------------------------------------ _os_error
@pytest.mark.parametrize("code, hint", [
    (errno.ENOSPC, "the disk is full: free space, or write elsewhere with --cache-dir / HUBNORM_CACHE"),
    (errno.EDQUOT, "the disk quota is exceeded: free space, or write elsewhere with --cache-dir"),
    (errno.EROFS, "the file system is read-only: write elsewhere with --cache-dir / HUBNORM_CACHE"),
    (errno.EACCES, "permission denied: write elsewhere with --cache-dir / HUBNORM_CACHE"),
    (errno.EPERM, "permission denied: write elsewhere with --cache-dir / HUBNORM_CACHE"),
])
def test_os_error_hints(code, hint):
    assert cli._os_error(OSError(code, "why", "/p/f")) == f"/p/f: why ({hint})"
    assert cli._os_error(OSError(code, "why")) == f"why ({hint})"


def test_os_error_without_a_hint_or_a_strerror():
    assert cli._os_error(OSError(errno.ENOENT, "No such file", "/x")) == "/x: No such file"
    assert cli._os_error(OSError("plain")) == "plain"


# ----------------------------------------------------------------------------------------------- _check_device
def test_check_device(monkeypatch):
    cli._check_device(None)
    cli._check_device("cpu")
    with pytest.raises(ValueError, match=r"^--device 'gpu' is not a torch device \(.*\); use cpu, cuda, cuda:0 or "
                                         r"mps$") as err:
        cli._check_device("gpu")
    assert err.value.__cause__ is None and err.value.__suppress_context__
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"^--device 'cuda:1': CUDA is not available on this machine; use --device "
                                         r"cpu$"):
        cli._check_device("cuda:1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cli._check_device("cuda")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"^--device 'mps': MPS is not available on this machine; use --device cpu$"):
        cli._check_device("mps")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    cli._check_device("mps")


def test_a_bad_device_stops_a_command_before_it_runs(monkeypatch, capsys):
    rec = Recorder(EmbeddingDataset("coco", "real", {}))
    monkeypatch.setattr(pipeline, "encode_dataset", rec)
    assert cli.main(["encode", "coco", "--model", "M", "--pretrained", "P", "--device", "gpu"]) == 2
    assert rec.calls == [] and capsys.readouterr().err.startswith("error: --device 'gpu' is not a torch device")


# ------------------------------------------------------------------------------------------------- encode
def test_encode_passes_every_option_and_prints_where(monkeypatch, capsys, tmp_path):
    ds = EmbeddingDataset("coco", "real", {"test": _split(2, 3, 4), "val": _split(5, 7, 4)})
    rec = Recorder(ds)
    monkeypatch.setattr(pipeline, "encode_dataset", rec)
    c = str(tmp_path / "c")
    assert cli.main(["encode", "coco", "--model", "M", "--pretrained", "P", "--split", "test,val", "--annotations",
                     "ann", "--images-root", "imgs", "--data-dir", "d", "--cache-dir", c, "--batch-size", "5",
                     "--device", "cpu", "--precision", "fp16", "--workers", "3", "--force", "--no-progress",
                     "--family", "blip"]) == 0
    assert rec.calls == [(("coco", "M", "P", ["test", "val"]),
                          {"annotations": "ann", "images_root": "imgs", "data_dir": "d", "cache_dir": c,
                           "batch_size": 5, "device": "cpu", "precision": "fp16", "num_workers": 3, "force": True,
                           "progress": False, "family": "blip"})]
    assert capsys.readouterr().out == (
        f"coco test: 2 images, 3 captions, dim 4 -> {cache_mod.entry_dir('coco', 'M', 'P', 'test', c)}\n"
        f"coco val: 5 images, 7 captions, dim 4 -> {cache_mod.entry_dir('coco', 'M', 'P', 'val', c)}\n"
        f"load with: hubnorm.load_embeddings(\"cache:coco:M:P\", cache_dir=\"{c}\")\n")


def test_encode_defaults(monkeypatch, capsys):
    rec = Recorder(EmbeddingDataset("coco", "real", {"test": _split()}))
    monkeypatch.setattr(pipeline, "encode_dataset", rec)
    assert cli.main(["encode", "coco", "--model", "M", "--pretrained", "none"]) == 0
    assert rec.calls == [(("coco", "M", "none", ["test"]),
                          {"annotations": None, "images_root": None, "data_dir": None, "cache_dir": None,
                           "batch_size": 64, "device": None, "precision": "fp32", "num_workers": 0, "force": False,
                           "progress": True, "family": None})]
    assert capsys.readouterr().out.endswith("\nload with: hubnorm.load_embeddings(\"cache:coco:M:none\")\n")


# ------------------------------------------------------------------------------------------------ rehearse
def test_rehearse_passes_the_options_and_labels_the_output(monkeypatch, capsys):
    rec = Recorder({"cache_dir": "/r", "spec": "cache:coco:synthetic-rehearsal:seed3"})
    monkeypatch.setattr(rehearse_mod, "rehearse", rec)
    assert cli.main(["rehearse", "--dataset", "coco", "--cache-dir", "/r", "--seed", "3", "--scale", "0.5",
                     "--split", "test", "--force"]) == 0
    assert rec.calls == [(("coco",), {"cache_dir": "/r", "seed": 3, "scale": 0.5, "splits": ["test"],
                                            "force": True})]
    assert capsys.readouterr().out == ("\nSYNTHETIC rehearsal cache (not real embeddings): /r\n"
                                       "source: cache:coco:synthetic-rehearsal:seed3   (with cache_dir='/r')\n")
    assert cli.main(["rehearse", "--dataset", "coco"]) == 0
    assert rec.calls[1] == (("coco",), {"cache_dir": None, "seed": 0, "scale": 1.0,
                                              "splits": ["train", "val", "test"], "force": False})
    assert capsys.readouterr().out.endswith("\nsource: cache:coco:synthetic-rehearsal:seed3\n")


# ------------------------------------------------------------------------------------------- import-qbnorm
def test_import_qbnorm_refuses_without_allow_pickle(monkeypatch, capsys):
    rec = Recorder()
    monkeypatch.setattr(qbnorm, "import_qbnorm", rec)
    assert cli.main(["import-qbnorm", "--sims-test", "a", "--sims-train-test", "b", "--out", "o"]) == 2
    assert rec.calls == []
    assert capsys.readouterr().err == (f"warning: {qbnorm.WARNING}\nerror: refusing to unpickle without "
                                       "--allow-pickle (a pickle runs code when loaded); rerun with --allow-pickle "
                                       "only for files you trust\n")


def test_import_qbnorm_passes_the_options(monkeypatch, capsys):
    rec = Recorder(Path("/s/msrvtt/manifest.json"))
    monkeypatch.setattr(qbnorm, "import_qbnorm", rec)
    assert cli.main(["import-qbnorm", "--sims-test", "a", "--sims-train-test", "b", "--out", "o", "--query-masks",
                     "q", "--modalities", " text , audio", "--dataset", "ds", "--model", "md", "--allow-pickle",
                     "--overwrite"]) == 0
    assert rec.calls == [(("a", "b", "o"), {"query_masks": "q", "allow_pickle": True, "modalities": ("text", "audio"),
                                            "dataset": "ds", "model": "md", "overwrite": True})]
    out, err = capsys.readouterr()
    assert err == f"warning: {qbnorm.WARNING}\n"
    assert out == ("wrote /s/msrvtt/manifest.json (sha256 of inputs and outputs recorded); use the source "
                   "sims:/s/msrvtt\n")
    assert cli.main(["import-qbnorm", "--sims-test", "a", "--sims-train-test", "b", "--out", "o",
                     "--allow-pickle"]) == 0
    assert rec.calls[1][1] == {"query_masks": None, "allow_pickle": True, "modalities": ("text", "video"),
                               "dataset": None, "model": None, "overwrite": False}


# -------------------------------------------------------------------------------------------- encode-texts
def test_load_source_dispatches_cache_and_local(monkeypatch):
    cached = Recorder("cached")
    monkeypatch.setattr(pipeline, "load_cached_embeddings", cached)
    local_mod = importlib.import_module("hubnorm.data.local")
    local = Recorder("local")
    monkeypatch.setattr(local_mod, "load_local_embeddings", local)
    assert cli._load_source("cache:coco:M:P", splits=("test",)) == "cached"
    assert cached.calls == [(("coco:M:P",), {"splits": ("test",)})]
    assert cli._load_source("local:/f:g") == "local"
    assert local.calls == [(("/f:g",), {"val": False})]
    cli._load_source("local:/f", val=True, seed=1)
    assert local.calls[1] == (("/f",), {"val": True, "seed": 1})
    with pytest.raises(ValueError, match=re.escape(
            "encode-texts reads the caption texts of a 'cache:<dataset>:<model>:<pretrained>' or 'local:<folder>' "
            "source; got 'synthetic:x' (synthetic embeddings have no caption texts)")):
        cli._load_source("synthetic:x")


class _Enc:
    name = "minilm"

    def cache_entry_dir(self, texts, modality, cache_dir):
        return Path(f"/enc/{modality}/{len(texts)}/{cache_dir}")


@pytest.fixture
def texts_env(monkeypatch):
    """encode-texts with its loader, sentence encoder and encoding replaced by recorders."""
    env = SimpleNamespace(ds=EmbeddingDataset("coco", "real", {"test": _split(2, 3, 4), "train": _split(3, 1200, 4),
                                                               "val": _split(1, 1, 4, texts=False)}))
    env.load = Recorder(lambda source, **kw: env.ds)
    env.enc = _Enc()
    env.loader = Recorder(env.enc)
    env.encode = Recorder(lambda texts, enc, **kw: np.zeros((len(texts), 6), np.float32))
    monkeypatch.setattr(cli, "_load_source", env.load)
    monkeypatch.setattr(sentence, "load_text_encoder", env.loader)
    monkeypatch.setattr(sentence, "encode_texts", env.encode)
    return env


def test_encode_texts_of_a_cache_source(texts_env, capsys):
    e = texts_env
    assert cli.main(["encode-texts", "cache:coco:M:P", "--cache-dir", "/c", "--text-model", "tm", "--device", "cpu",
                     "--batch-size", "7"]) == 0
    assert e.load.calls == [(("cache:coco:M:P",), {"splits": ("test", "train"), "cache_dir": "/c"})]
    assert e.loader.calls == [(("tm",), {"device": "cpu", "batch_size": 7, "precision": "fp32"})]
    assert [(c[0][0], c[1]) for c in e.encode.calls] == [
        (["t0", "t1", "t2"], {"cache_dir": "/c", "desc": "test captions"}),
        ([f"t{i}" for i in range(1200)], {"cache_dir": "/c", "desc": "train captions"})]
    assert all(c[0][1] is e.enc for c in e.encode.calls)
    lines = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"test: 3 captions, dim 6 \(minilm\), \d+ s -> /enc/text/3/c", lines[0])
    assert re.fullmatch(r"train: 1,200 captions, dim 6 \(minilm\), \d+ s -> /enc/text/1200/c", lines[1])


def test_encode_texts_reports_the_seconds_each_split_took(texts_env, capsys, monkeypatch):
    import time
    clock = iter([100.0, 102.6, 200.0, 200.4])
    monkeypatch.setattr(time, "perf_counter", lambda: next(clock))
    assert cli.main(["encode-texts", "cache:coco:M:P"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("test: 3 captions, dim 6 (minilm), 3 s -> ")
    assert lines[1].startswith("train: 1,200 captions, dim 6 (minilm), 0 s -> ")


def test_encode_texts_of_a_rehearsal_cache_reads_its_own_folder(texts_env):
    e = texts_env
    assert cli.main(["encode-texts", "cache:coco:synthetic-rehearsal:seed0", "--cache-dir", "/c", "--split",
                     "test"]) == 0
    assert e.load.calls == [(("cache:coco:synthetic-rehearsal:seed0",),
                             {"splits": ("test",), "cache_dir": Path("/c") / "rehearsal"})]
    assert e.loader.calls == [((None,), {"device": "cpu", "batch_size": 64, "precision": "fp32"})]
    assert e.encode.calls[0][1]["cache_dir"] == "/c"
    assert cli.main(["encode-texts", "cache:coco:synthetic-rehearsal:seed0", "--split", "test"]) == 0
    assert e.load.calls[1] == (("cache:coco:synthetic-rehearsal:seed0",), {"splits": ("test",)})


def test_encode_texts_of_a_local_source_passes_no_splits(texts_env):
    assert cli.main(["encode-texts", "local:/f", "--cache-dir", "/c"]) == 0
    assert texts_env.load.calls == [(("local:/f",), {})]


def test_encode_texts_checks_every_split_before_encoding(texts_env, capsys):
    e = texts_env
    assert cli.main(["encode-texts", "cache:coco:M:P", "--split", "test,dev"]) == 2
    assert capsys.readouterr().err == ("error: cache:coco:M:P has no split 'dev' (it has ['test', 'train', 'val']): "
                                       "pass --split\n")
    assert cli.main(["encode-texts", "cache:coco:M:P", "--split", "test", "--split", "val"]) == 2
    assert capsys.readouterr().err == "error: split 'val' of cache:coco:M:P has no caption texts: nothing to encode\n"
    assert e.loader.calls == [] and e.encode.calls == []


@pytest.mark.parametrize("size", ["0", "-3"])
def test_encode_texts_refuses_a_batch_size_below_one(texts_env, capsys, size):
    assert cli.main(["encode-texts", "cache:coco:M:P", "--batch-size", size]) == 2
    assert capsys.readouterr().err == f"error: --batch-size must be a positive integer; got {size}\n"
    assert texts_env.load.calls == []


def test_encode_texts_batch_size_one_is_accepted(texts_env):
    assert cli.main(["encode-texts", "cache:coco:M:P", "--batch-size", "1"]) == 0


# ------------------------------------------------------------------------------------------------- verify
@pytest.fixture
def verify_env(monkeypatch, tmp_path):
    """verify with ``verify_split`` replaced: ``env.state[split]`` is a manifest or a CacheError reason."""
    env = SimpleNamespace(state={}, calls=[], cache=str(tmp_path / "c"))

    def verify(dataset, split, model, pretrained, **kw):
        env.calls.append((dataset, split, model, pretrained, kw))
        got = env.state.get(split, "missing")
        if isinstance(got, str):
            raise cache_mod.CacheError(f"{split} is {got}", reason=got)
        return got
    monkeypatch.setattr(pipeline, "verify_split", verify)
    return env


def _verify(env, *extra):
    return cli.main(["verify", "coco", "--model", "M", "--pretrained", "P", "--cache-dir", env.cache, *extra])


def test_verify_reports_ok_and_absent_splits(verify_env, capsys):
    v = verify_env
    v.state["val"] = {"n_images": 4, "n_captions": 9}
    assert _verify(v, "--family", "open_clip") == 0
    assert [c[1] for c in v.calls] == ["test", "val", "train"]
    assert v.calls[0] == ("coco", "test", "M", "P", {"cache_dir": v.cache, "family": "open_clip"})
    assert capsys.readouterr().out == (
        "absent   coco test\n"
        f"OK       coco val: 4 images, 9 captions ({cache_mod.entry_dir('coco', 'M', 'P', 'val', v.cache)})\n"
        "absent   coco train\n")


def test_verify_failures_name_the_fix(verify_env, capsys):
    v = verify_env
    v.state.update(test={"n_images": 1, "n_captions": 1}, train="corrupt")
    assert _verify(v, "--family", "blip") == 1
    out = capsys.readouterr().out
    assert ("FAILED   coco train: train is corrupt\n         fix: python -m hubnorm.data encode coco --model M "
            "--pretrained P --family blip --split train --force\n") in out
    v.state["train"] = "stale"
    v.state["test"] = "corrupt"
    assert _verify(v) == 1
    out, err = capsys.readouterr()
    assert "FAILED   coco test: test is corrupt\n" in out and "OK" not in out
    assert err == ""   # failures, not "nothing to verify"


def test_verify_an_explicit_split_never_encoded_is_a_failure(verify_env, capsys):
    v = verify_env
    v.state["test"] = {"n_images": 1, "n_captions": 1}
    assert _verify(v, "--split", "test,val") == 1
    out = capsys.readouterr().out
    assert "FAILED   coco val: val is missing\n" in out and "absent" not in out


def test_verify_with_nothing_cached(verify_env, capsys):
    v = verify_env
    assert _verify(v) == 1
    out, err = capsys.readouterr()
    root = cache_mod.entry_dir("coco", "M", "P", "test", v.cache).parent
    assert err == (f"nothing to verify: no cached embeddings of coco for M / P under {root}\n"
                   "         fix: python -m hubnorm.data encode coco --model M --pretrained P --split test\n")
    assert out.count("absent") == 3


def test_verify_checks_dataset_and_splits_first(verify_env, capsys):
    v = verify_env
    assert _verify(v, "--split", "test,tset") == 2
    assert "error: unknown split 'tset' of 'coco'" in capsys.readouterr().err and v.calls == []
    assert cli.main(["verify", "cocoa", "--model", "M", "--pretrained", "P"]) == 2
    assert "error: unknown dataset 'cocoa'" in capsys.readouterr().err and v.calls == []


def test_verify_reads_a_real_entry(tmp_path, capsys):
    key = pipeline._load_key("coco", "test", "M", "P")
    rng = np.random.default_rng(0)
    cache_mod.write_entry(cache_mod.entry_dir("coco", "M", "P", "test", tmp_path), key, rng.standard_normal((2, 3)),
                          rng.standard_normal((2, 3)), [0, 1], ["a", "b"], ["x", "y"])
    assert cli.main(["verify", "coco", "--model", "M", "--pretrained", "P", "--cache-dir", str(tmp_path), "--split",
                     "test"]) == 0
    assert capsys.readouterr().out.startswith("OK       coco test: 2 images, 2 captions")


def test_main_dispatches_by_command(monkeypatch):
    seen = []
    for name in ("_cmd_list", "_cmd_fetch", "_cmd_fetch_real", "_cmd_encode", "_cmd_verify", "_cmd_encode_texts",
                 "_cmd_rehearse", "_cmd_import_qbnorm"):
        monkeypatch.setattr(cli, name, lambda args, name=name: seen.append(name) or 7)
    argvs = [["list"], ["fetch", "coco"], ["fetch-real"], ["encode", "coco", "--model", "M", "--pretrained", "P"],
             ["verify", "coco", "--model", "M", "--pretrained", "P"], ["encode-texts", "cache:a:b:c"],
             ["rehearse", "--dataset", "coco"], ["import-qbnorm", "--sims-test", "a", "--sims-train-test", "b",
                                                       "--out", "o"]]
    assert [cli.main(a) for a in argvs] == [7] * 8
    assert seen == ["_cmd_list", "_cmd_fetch", "_cmd_fetch_real", "_cmd_encode", "_cmd_verify", "_cmd_encode_texts",
                    "_cmd_rehearse", "_cmd_import_qbnorm"]


def test_main_checks_the_device_of_encode_texts(monkeypatch):
    checked = []
    monkeypatch.setattr(cli, "_check_device", checked.append)
    monkeypatch.setattr(cli, "_cmd_encode_texts", lambda args: 0)
    monkeypatch.setattr(cli, "_cmd_list", lambda args: 0)
    cli.main(["encode-texts", "cache:a:b:c", "--device", "cuda:3"])
    cli.main(["list"])
    assert checked == ["cuda:3", None]



# ------------------------------------------------------------------------------------------- help snapshot
HELP_SNAPSHOT = Path(__file__).parent / "data" / "data_cli_help.json"


def _parser_reference(parser) -> dict:
    """Every command's help, description and options (help, default, choices, required, type, nargs, metavar) as
    plain JSON values: what ``-h`` shows, independent of how a Python version's argparse lays it out."""
    sub = next(a for a in parser._actions if a.dest == "command")
    out = {"": {"prog": parser.prog, "description": parser.description, "metavar": sub.metavar,
                "required": sub.required}}
    helps = {c.dest: c.help for c in sub._choices_actions}
    for name, p in sub.choices.items():
        opts = {}
        for a in p._actions:
            if a.dest == "help":
                continue
            opts["/".join(a.option_strings) or a.dest] = {
                "dest": a.dest, "help": a.help, "default": a.default,
                "choices": list(a.choices) if a.choices is not None else None, "required": a.required,
                "type": getattr(a.type, "__name__", None), "nargs": a.nargs, "metavar": a.metavar,
                "action": type(a).__name__}
        out[name] = {"help": helps[name], "description": p.description, "options": opts}
    return out


def _snapshot_text(ref: dict) -> str:
    """JSON with one line per option (a reviewable diff)."""
    def dump(v):
        return json.dumps(v, ensure_ascii=False)
    parts = []
    for name, entry in ref.items():
        if "options" not in entry:
            parts.append(f" {dump(name)}: {dump(entry)}")
            continue
        opts = ",\n".join(f"   {dump(k)}: {dump(v)}" for k, v in entry["options"].items())
        head = f"\"help\": {dump(entry['help'])}, \"description\": {dump(entry['description'])}"
        parts.append(f" {dump(name)}: {{{head}, \"options\": {{\n{opts}\n }}}}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def test_help_texts_match_the_reviewed_snapshot():
    """The user-facing text of every command and option, as reviewed. A deliberate change to the CLI: rewrite the
    snapshot with ``HUBNORM_WRITE_HELP_SNAPSHOT=1 pytest tests/test_data_cli_units.py -k snapshot`` and review its
    diff."""
    got = _parser_reference(cli.build_parser())
    if os.environ.get("HUBNORM_WRITE_HELP_SNAPSHOT"):
        HELP_SNAPSHOT.write_text(_snapshot_text(got))
    want = json.loads(HELP_SNAPSHOT.read_text())
    for name in sorted(set(got) | set(want)):
        assert got.get(name) == want.get(name), name


def test_encode_texts_passes_the_precision(texts_env):
    assert cli.main(["encode-texts", "cache:coco:M:P", "--precision", "amp_bf16", "--split", "test"]) == 0
    assert texts_env.loader.calls[-1][1]["precision"] == "amp_bf16"
    with pytest.raises(SystemExit):   # argparse: not one of the encoders' precisions
        cli.main(["encode-texts", "cache:coco:M:P", "--precision", "float16"])


def test_the_cli_precisions_are_the_encoders():
    from hubnorm.data.encoders.base import PRECISIONS
    assert cli._PRECISIONS == PRECISIONS
