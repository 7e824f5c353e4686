"""CLI: help texts, list, encode (served from a cache written with a stub encoder) and verify."""

import pytest

from hubnorm.data import cache as cache_mod
from hubnorm.data.cli import build_parser, main
from test_data_pipeline import StubEncoder, make_tiny_coco


def test_help_texts(capsys):
    for argv in ([], ["fetch"], ["encode"], ["verify"], ["list"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(argv + ["-h"])
        out = capsys.readouterr().out
        assert "usage: python -m hubnorm.data" in out
    with pytest.raises(SystemExit):
        build_parser().parse_args(["encode", "coco"])  # --model and --pretrained are required


def test_list_encode_verify(tmp_path, capsys, monkeypatch):
    data = make_tiny_coco(tmp_path / "data")
    cache = tmp_path / "cache"
    # fill the cache through the library with a stub encoder, then let the CLI find it (no model is built)
    from hubnorm.data import encode_split
    for s in ("test", "train"):
        encode_split("coco", s, "ViT-B-32-quickgelu", "openai", data_dir=data, cache_dir=cache,
                     encoder=StubEncoder(), progress=False)
    from hubnorm.data.encoders import OpenClipEncoder
    monkeypatch.setattr(OpenClipEncoder, "build", lambda self: pytest.fail("cache should have been used"))
    common = ["--data-dir", str(data), "--cache-dir", str(cache)]
    assert main(["encode", "coco", "--model", "ViT-B-32-quickgelu", "--pretrained", "openai", "--split",
                 "test,train", "--no-progress"] + common) == 0
    out = capsys.readouterr().out
    assert "coco test: 6 images, 31 captions, dim 16" in out and "coco train: 4 images, 20 captions" in out

    assert main(["list"] + common) == 0
    out = capsys.readouterr().out
    assert "cached: ViT-B-32-quickgelu / openai / test: 6 images, 31 captions" in out
    assert str(data / "annotations" / "dataset_coco.json") in out

    assert main(["verify", "coco", "--model", "ViT-B-32-quickgelu", "--pretrained", "openai"] + common) == 0
    out = capsys.readouterr().out
    assert "OK       coco test" in out and "absent   coco val" in out
    # truncate one file: verify fails and names the fix
    f = cache_mod.entry_dir("coco", "ViT-B-32-quickgelu", "openai", "train", cache) / "captions.npy"
    f.write_bytes(f.read_bytes()[:-64])
    assert main(["verify", "coco", "--model", "ViT-B-32-quickgelu", "--pretrained", "openai"] + common) == 1
    out = capsys.readouterr().out
    assert "FAILED   coco train" in out and "--split train --force" in out
    # an explicitly requested split that was never encoded is a failure
    assert main(["verify", "coco", "--model", "ViT-B-32-quickgelu", "--pretrained", "openai", "--split",
                 "val"] + common) == 1


def test_encode_errors_exit_2(tmp_path, capsys):
    assert main(["encode", "coco", "--model", "ViT-B-32-quickgelu", "--pretrained", "openai",
                 "--data-dir", str(tmp_path), "--cache-dir", str(tmp_path / "c")]) == 2
    assert "fetch coco --what annotations" in capsys.readouterr().err
    assert main(["encode", "coco", "--model", "ViT-B-32-quickgelu", "--pretrained", "openai", "--split", "dev",
                 "--data-dir", str(tmp_path)]) == 2
    assert "valid splits" in capsys.readouterr().err
