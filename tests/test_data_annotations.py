"""Caption loaders: real annotation files in ../shared/data (skipped when absent) and every supported format."""

import json

import numpy as np
import pytest

from conftest import shared_path
from hubnorm.data import (
    CaptionSplit, load_captions, read_annotations, read_clip_benchmark_txt, read_coco_captions_json,
)

KTV = ("annotations", "karpathy-test-val")


# ----------------------------------------------------------------------------------------- real files
@pytest.mark.shared_data
def test_real_coco_karpathy_test_has_5000_images_25010_captions():
    caps = load_captions("coco", "test", shared_path(*KTV, "mscoco_test.json"))
    assert (caps.n_images, caps.n_captions) == (5000, 25010)
    per = caps.captions_per_image()
    assert sorted(np.unique(per).tolist()) == [5, 6] and int((per == 6).sum()) == 10
    # the explicit index differs from j // 5 after the first 6-caption image
    assert not np.array_equal(caps.caption_to_image, np.arange(caps.n_captions) // 5)
    assert caps.image_files[0] == "val2014/COCO_val2014_000000391895.jpg"
    assert caps.captions[0] == "A man with a red helmet on a small moped on a dirt road."
    assert caps.caption_to_image[0] == 0 and caps.caption_to_image[-1] == 4999
    val = load_captions("coco", "val", shared_path(*KTV))  # a folder: finds mscoco_val.json
    assert (val.n_images, val.n_captions) == (5000, 25010)
    assert not set(val.image_files) & set(caps.image_files)


@pytest.mark.shared_data
def test_real_flickr30k_karpathy_test_has_1000_images_5000_captions():
    caps = load_captions("flickr30k", "test", shared_path(*KTV, "flickr30k_test.json"))
    assert (caps.n_images, caps.n_captions) == (1000, 5000)
    np.testing.assert_array_equal(caps.caption_to_image, np.arange(5000) // 5)
    assert caps.image_files[0] == "1007129816.jpg" and caps.image_files[-1] == "97234558.jpg"
    val = load_captions("flickr30k", "val", shared_path(*KTV))
    assert (val.n_images, val.n_captions) == (1014, 5070)
    # entities stay as in the file unless asked
    raw = [c for c in caps.captions + val.captions if "&amp;" in c]
    if raw:
        un = load_captions("flickr30k", "test", shared_path(*KTV, "flickr30k_test.json"), unescape_html=True)
        assert not any("&amp;" in c for c in un.captions)


@pytest.mark.shared_data
def test_real_flickr8k_token_file_and_split_lists():
    token = shared_path("annotations", "flickr8k", "Flickr8k.token.clean.txt")
    counts = {s: load_captions("flickr8k", s, token) for s in ("train", "val", "test")}
    assert {s: (c.n_images, c.n_captions) for s, c in counts.items()} == {
        "train": (6000, 30000), "val": (1000, 5000), "test": (1000, 5000)}
    assert counts["test"].image_files[-1] == "3490736665_38710f4b91.jpg"  # last Karpathy flickr8k test image
    names = [set(c.image_files) for c in counts.values()]
    assert not (names[0] & names[1] or names[0] & names[2] or names[1] & names[2])
    with pytest.raises(ValueError, match="valid splits"):
        load_captions("flickr8k", "dev", token)


@pytest.mark.shared_data
def test_real_flickr8k_captions_match_the_local_embedding_metadata():
    """The 100 Flickr8k images of the local embedding set carry the token file's captions."""
    import csv
    meta = shared_path("embeddings", "flickr8k-100x5-clip-vitb32", "metadata.csv")
    token = shared_path("annotations", "flickr8k", "Flickr8k.token.clean.txt")
    by_name = {}
    for line in token.read_text(encoding="utf-8").splitlines():
        key, _, cap = line.partition("\t")
        by_name.setdefault(key.split("#")[0], []).append(cap)
    rows = list(csv.DictReader(open(meta, newline="", encoding="utf-8")))
    assert len(rows) == 500
    for r in rows[:50]:
        assert r["caption"] in by_name[r["image_id"] + ".jpg"]


@pytest.mark.shared_data
def test_real_file_holds_one_split_only():
    with pytest.raises(ValueError, match="not 'val'"):
        read_annotations(shared_path(*KTV, "mscoco_test.json"), "val")


# ---------------------------------------------------------------------------------- synthetic formats
def _karpathy(tmp_path, name="dataset_flickr30k.json"):
    images = [
        {"filename": "1.jpg", "split": "test", "sentences": [{"raw": f"one {k}"} for k in range(5)]},
        {"filename": "2.jpg", "split": "restval", "sentences": [{"raw": f"two {k}"} for k in range(5)]},
        {"filename": "3.jpg", "split": "train", "sentences": [{"raw": f"three {k}"} for k in range(6)]},
        {"filename": "4.jpg", "split": "val", "sentences": [{"raw": "four &amp; more"}]},
    ]
    p = tmp_path / name
    p.write_text(json.dumps({"images": images, "dataset": "flickr30k"}))
    return p


def test_karpathy_json_restval_counts_as_train(tmp_path):
    p = _karpathy(tmp_path)
    train = read_annotations(p, "train")
    assert train.image_files == ["2.jpg", "3.jpg"] and train.n_captions == 11
    assert train.caption_to_image.tolist() == [0] * 5 + [1] * 6
    assert read_annotations(p, "test").captions[0] == "one 0"
    assert read_annotations(p, "val", unescape_html=True).captions == ["four & more"]
    # default lookup under <data dir>/annotations
    (tmp_path / "annotations").mkdir()
    p.rename(tmp_path / "annotations" / p.name)
    assert load_captions("flickr30k", "train", data_dir=tmp_path).n_images == 2


def test_clip_benchmark_formats(tmp_path):
    txt = tmp_path / "flickr30k_test_karpathy.txt"
    txt.write_text("image,caption\n1.jpg,a dog, running\n1.jpg,a dog\n2.jpg,a cat\n")
    caps = read_annotations(txt, "test", "flickr30k")
    assert caps.image_files == ["1.jpg", "2.jpg"] and caps.captions[0] == "a dog, running"
    assert caps.caption_to_image.tolist() == [0, 0, 1]
    with pytest.raises(ValueError, match="holds the 'test' split"):
        read_clip_benchmark_txt(txt, "val")
    coco = tmp_path / "coco_test_karpathy.json"
    coco.write_text(json.dumps({
        "images": [{"id": 7, "file_name": "COCO_val2014_000000000007.jpg"}, {"id": 3, "file_name": "COCO_val2014_000000000003.jpg"}],
        "annotations": [{"image_id": 3, "caption": "c3", "id": 1}, {"image_id": 7, "caption": "c7a", "id": 2},
                        {"image_id": 7, "caption": "c7b", "id": 3}]}))
    caps = read_coco_captions_json(coco, "test")
    assert caps.image_files == ["val2014/COCO_val2014_000000000007.jpg", "val2014/COCO_val2014_000000000003.jpg"]
    assert caps.captions == ["c7a", "c7b", "c3"] and caps.caption_to_image.tolist() == [0, 0, 1]
    assert read_annotations(coco, "test").n_captions == 3


def test_albef_and_test_val_lists(tmp_path):
    albef = tmp_path / "flickr30k_test.json"
    albef.write_text(json.dumps([{"image": "flickr30k-images/9.jpg", "caption": ["a", "b"]},
                                 {"image": "flickr30k-images/8.jpg", "caption": ["c"]}]))
    caps = read_annotations(albef, "test")
    assert caps.image_files == ["9.jpg", "8.jpg"] and caps.dataset == "flickr30k"
    tv = tmp_path / "mscoco_val.json"
    tv.write_text(json.dumps([{"split": "val", "image_name": "COCO_val2014_000000000001.jpg", "file_path": "val2014",
                               "captions": ["x"] * 6}]))
    caps = read_annotations(tv, "val")
    assert caps.image_files == ["val2014/COCO_val2014_000000000001.jpg"] and caps.n_captions == 6


def test_wrong_split_and_dataset_names_list_the_valid_ones(tmp_path):
    p = _karpathy(tmp_path)
    with pytest.raises(ValueError, match=r"valid splits: \['train', 'val', 'test'\]"):
        load_captions("flickr30k", "testing", p)
    with pytest.raises(ValueError, match="restval"):
        read_annotations(p, "restval")
    with pytest.raises(ValueError, match="known datasets"):
        load_captions("mscoco", "test", p)


def test_missing_annotations_name_the_fetch_command(tmp_path):
    with pytest.raises(FileNotFoundError, match="python -m hubnorm.data fetch coco --what annotations"):
        load_captions("coco", "test", data_dir=tmp_path)


def test_caption_split_rejects_inconsistent_index():
    with pytest.raises(ValueError, match="captions but"):
        CaptionSplit("x", "test", ["a.jpg"], ["c1", "c2"], np.array([0]))
    with pytest.raises(ValueError, match="no caption"):
        CaptionSplit("x", "test", ["a.jpg", "b.jpg"], ["c1"], np.array([0]))
