"""``hubnorm.data.annotations`` in small pieces, on hand-made annotation files in ``tmp_path``: ``CaptionSplit``'s
checks (each by its message, at its boundaries, an empty split), its properties and a fingerprint recomputed by hand,
the name helpers (``_coco_subdir``, ``_guess_dataset``, ``_split_hint``), every reader (images merged in
first-seen order, captions stripped and optionally unescaped, folders kept or dropped, every guard by its message),
the format detection of ``read_annotations`` (each format, each unrecognised shape, a JSON file parsed once), the
candidate file list written out by hand and ``load_captions``'s lookup (first existing candidate, the message that
lists every candidate).

Survivors judged equivalent (no test can tell them apart):
- ``captions_per_image``: ``minlength`` dropped (every image has a caption, checked in ``__post_init__``, so
  ``np.bincount`` already returns ``n_images`` counts).
- ``fingerprint``: ``ensure_ascii=None`` (falsy like False), ``"utf-8"`` -> ``"UTF-8"`` (an alias).
- ``_build``: ``dtype=np.int64`` dropped or None (Python ints give int64, and ``CaptionSplit`` converts anyway).
- ``_coco_subdir``: ``rsplit("/", 1)`` -> ``split``/``rsplit`` with another maxsplit or separator ``"XX/XX"`` (a
  name with a ``/`` gets no folder whatever matches, so only names without one reach the regex).
- ``read_karpathy_test_val``'s row filter: ``_KARPATHY_SPLIT.get(s, s)`` -> ``.get(s)`` / ``.get(s, None)`` (a split
  name outside the table never equals a valid split either way; the ``found`` set, where it shows, is tested).
- ``read_albef_json``: ``rsplit("/", 1)`` -> no maxsplit or ``2`` (the last piece is the same).
- every ``open``/``read_text``: ``encoding="utf-8"`` -> None, dropped or ``"UTF-8"`` (the locale here is C.UTF-8).
- ``read_flickr8k_token``: ``enumerate`` start (``lineno`` is unused); ``rstrip("\\n")`` -> ``rstrip(None)`` /
  ``lstrip`` (``_build`` strips captions; they differ only on a line holding a key and no caption);
  ``key.split("#", 1)`` -> no maxsplit / ``2`` (same first piece) and ``rsplit("#", 1)`` (differs only for a key
  with two ``#``, which Flickr8k never has).
- ``load_captions``: ``dataset`` not passed to ``read_annotations`` (the split was checked against it already and
  ``out.dataset`` is overwritten), ``data_dir`` not passed when a folder is searched (only the names are used).
"""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pytest

from hubnorm.data import annotations as ann
from hubnorm.data.annotations import (
    CaptionSplit, candidate_annotation_files, flickr8k_split_file, load_captions, read_albef_json,
    read_annotations, read_clip_benchmark_txt, read_coco_captions_json, read_flickr8k_token,
    read_karpathy_json, read_karpathy_test_val,
)


def _json(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


def _text(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------- CaptionSplit
def test_caption_split_converts_the_index_to_int64_and_counts():
    cs = CaptionSplit("d", "test", ["a/b/x.jpg", "y.jpg"], ["c0", "c1", "c2"], np.array([1, 0, 1], dtype=np.int32))
    assert cs.caption_to_image.dtype == np.int64 and cs.caption_to_image.tolist() == [1, 0, 1]
    assert (cs.n_images, cs.n_captions) == (2, 3)
    assert cs.image_names == ["x.jpg", "y.jpg"]
    assert cs.captions_per_image().tolist() == [1, 2]
    assert cs.image_paths("/root/imgs") == [ann.Path("/root/imgs/a/b/x.jpg"), ann.Path("/root/imgs/y.jpg")]
    assert cs.source == ""


def test_caption_split_image_names_split_on_slash_only():
    cs = CaptionSplit("d", "test", ["val2014/my photo.jpg"], ["c"], [0])
    assert cs.image_names == ["my photo.jpg"]


def test_caption_split_guards_by_message():
    with pytest.raises(ValueError, match=r"^2 captions but 1 caption-to-image entries$"):
        CaptionSplit("x", "test", ["a.jpg"], ["c1", "c2"], np.array([0]))
    with pytest.raises(ValueError, match=r"^caption_to_image points outside the image list$"):
        CaptionSplit("x", "test", ["a.jpg"], ["c1"], np.array([-1]))
    with pytest.raises(ValueError, match=r"^caption_to_image points outside the image list$"):
        CaptionSplit("x", "test", ["a.jpg"], ["c1", "c2"], np.array([0, 1]))
    with pytest.raises(ValueError, match=re.escape("2 image(s) have no caption in the annotations (first: b.jpg)")):
        CaptionSplit("x", "test", ["a.jpg", "b.jpg", "c.jpg"], ["c1"], np.array([0]))
    with pytest.raises(ValueError, match=re.escape("1 image(s) have no caption in f.json (first: a.jpg)")):
        CaptionSplit("x", "test", ["a.jpg", "b.jpg"], ["c1"], np.array([1]), source="f.json")


def test_caption_split_boundaries_are_accepted():
    # the largest valid index and index 0 both pass; an empty split has nothing to check
    cs = CaptionSplit("x", "test", ["a.jpg", "b.jpg"], ["c1", "c2"], [0, 1])
    assert cs.caption_to_image.tolist() == [0, 1]
    empty = CaptionSplit("x", "test", [], [], [])
    assert (empty.n_images, empty.n_captions) == (0, 0) and empty.caption_to_image.dtype == np.int64


def test_fingerprint_is_sha256_of_the_json_content():
    cs = CaptionSplit("x", "test", ["a.jpg", "b.jpg"], ["caf\u00e9", "b"], [0, 1], source="s")
    ref = hashlib.sha256(
        '[["a.jpg", "b.jpg"], ["caf\u00e9", "b"], [0, 1]]'.encode("utf-8")).hexdigest()
    assert cs.fingerprint() == ref
    # format-independent: dataset, split and source do not enter; the index does
    assert CaptionSplit("y", "val", ["a.jpg", "b.jpg"], ["caf\u00e9", "b"], [0, 1]).fingerprint() == ref
    assert CaptionSplit("x", "test", ["a.jpg", "b.jpg"], ["caf\u00e9", "b"], [1, 0]).fingerprint() != ref


# ------------------------------------------------------------------------------------------- name helpers
def test_coco_subdir():
    assert ann._coco_subdir("COCO_val2014_000000000001.jpg") == "val2014/"
    assert ann._coco_subdir("COCO_train2014_000000000001.jpg") == "train2014/"
    assert ann._coco_subdir("COCO_test2015_12.jpg") == "test2015/"
    assert ann._coco_subdir("val2014/COCO_val2014_000000000001.jpg") == ""  # already in a folder
    assert ann._coco_subdir("1007129816.jpg") == ""
    assert ann._coco_subdir("COCO_val2014_1.jpg.bak") == "" and ann._coco_subdir("xCOCO_val2014_1.jpg") == ""
    assert ann._coco_subdir("COCO_val14_1.jpg") == ""
    assert ann._coco_subdir("my COCO_val2014_1.jpg") == ""  # the whole name must match, not its last word


def test_guess_dataset():
    g = ann._guess_dataset
    assert g(ann.Path("/x/flickr30k_test.json")) == "flickr30k"
    assert g(ann.Path("Flickr8k.token.txt")) == "flickr8k"
    assert g(ann.Path("dataset_flickr8k.json"), "coco") == "flickr8k"
    assert g(ann.Path("MSCOCO_test.json")) == "coco"
    assert g(ann.Path("/coco/captions.json")) == "unknown"  # the folder does not count
    assert g(ann.Path("captions.json"), "mine") == "mine"


def test_split_hint():
    h = ann._split_hint
    assert h(ann.Path("coco_test_karpathy.json")) == "test"
    assert h(ann.Path("COCO_VAL_karpathy.json")) == "val"
    assert h(ann.Path("mscoco-dev.json")) == "val"
    assert h(ann.Path("x.restval.json")) == "train"
    assert h(ann.Path("train.json")) == "train"
    assert h(ann.Path("dataset_coco.json")) is None
    assert h(ann.Path("contest_x.json")) is None and h(ann.Path("x_testing.json")) is None
    assert h(ann.Path("/test/x.json")) is None  # the folder does not count


# ------------------------------------------------------------------------------------------- Karpathy json
def _karpathy_data(**extra):
    images = [
        {"filename": "1.jpg", "split": "test", "sentences": [{"raw": " one &amp; a "}, {"raw": "one b"}]},
        {"filename": "2.jpg", "filepath": "/val2014/", "split": "restval", "sentences": [{"raw": "two"}]},
        {"filename": "3.jpg", "filepath": "", "split": "train", "sentences": [{"raw": "three"}]},
        {"filename": "4.jpg", "split": "val", "sentences": [{"raw": "four"}]},
        {"filename": "5.jpg", "filepath": "/X/", "split": "train", "sentences": [{"raw": "five"}]},
    ]
    return dict(images=images, **extra)


def test_karpathy_json_reads_a_split_with_folders_and_restval(tmp_path):
    p = _json(tmp_path / "dataset_flickr30k.json", _karpathy_data())
    train = read_karpathy_json(p, "train")
    assert train.image_files == ["val2014/2.jpg", "3.jpg", "X/5.jpg"] and train.captions == ["two", "three", "five"]
    assert train.caption_to_image.tolist() == [0, 1, 2]
    assert (train.dataset, train.split, train.source) == ("flickr30k", "train", str(p))
    test = read_karpathy_json(p, "test")
    assert test.captions == ["one &amp; a", "one b"]
    assert read_karpathy_json(p, "test", unescape_html=True).captions == ["one & a", "one b"]
    assert read_karpathy_json(p, "test", "mine").dataset == "mine"


def test_karpathy_json_dataset_from_the_name_then_the_file(tmp_path):
    p = _json(tmp_path / "captions.json", _karpathy_data(dataset="flickr8k"))
    assert read_karpathy_json(p, "val").dataset == "flickr8k"
    q = _json(tmp_path / "dataset_coco.json", _karpathy_data(dataset="flickr8k"))
    assert read_karpathy_json(q, "val").dataset == "coco"
    r = _json(tmp_path / "plain.json", _karpathy_data())
    assert read_karpathy_json(r, "val").dataset == "unknown"


def test_karpathy_json_uses_given_data_without_reading(tmp_path):
    caps = read_karpathy_json(tmp_path / "absent_flickr30k.json", "val", data=_karpathy_data())
    assert caps.image_files == ["4.jpg"] and caps.dataset == "flickr30k"


def test_karpathy_json_guards(tmp_path):
    data = _karpathy_data()
    data["images"].append({"filename": "5.jpg", "split": "extra", "sentences": [{"raw": "x"}]})
    p = _json(tmp_path / "k.json", data)
    with pytest.raises(ValueError, match=re.escape("k.json: image 5.jpg has unknown split 'extra'")):
        read_karpathy_json(p, "test")
    q = _json(tmp_path / "q.json", {"images": [{"filename": "6.jpg", "sentences": []}]})
    with pytest.raises(ValueError, match=re.escape("q.json: image 6.jpg has unknown split None")):
        read_karpathy_json(q, "test")
    with pytest.raises(ValueError, match=r"^unknown split 'restval'; valid splits"):
        read_karpathy_json(p, "restval", data=_karpathy_data())
    only_test = {"images": [_karpathy_data()["images"][0]]}
    with pytest.raises(ValueError, match=re.escape(f"no images of split 'val' in {tmp_path / 'o.json'}")):
        read_karpathy_json(tmp_path / "o.json", "val", data=only_test)


# ------------------------------------------------------------------------------------------- karpathy-test-val
def test_karpathy_test_val_selects_the_split_and_places_coco_images(tmp_path):
    data = [
        {"split": "val", "image_name": "COCO_val2014_000000000001.jpg", "captions": ["a", " b "]},
        {"split": "test", "image_name": "COCO_val2014_000000000002.jpg", "captions": ["c"]},
        {"split": "val", "image_name": "9.jpg", "file_path": "/X/", "captions": ["d"]},
        {"split": "val", "image_name": "8.jpg", "captions": ["e &lt;"]},
        {"split": "val", "image_name": "COCO_val2014_000000000001.jpg", "captions": ["f"]},
    ]
    p = _json(tmp_path / "mixed.json", data)
    val = read_karpathy_test_val(p, "val")
    assert val.image_files == ["val2014/COCO_val2014_000000000001.jpg", "X/9.jpg", "8.jpg"]
    assert val.captions == ["a", "b", "d", "e &lt;", "f"] and val.caption_to_image.tolist() == [0, 0, 1, 2, 0]
    assert (val.dataset, val.split) == ("unknown", "val")
    assert read_karpathy_test_val(p, "val", unescape_html=True).captions[3] == "e <"
    test = read_karpathy_test_val(p, "test", "coco")
    assert test.image_files == ["val2014/COCO_val2014_000000000002.jpg"] and test.dataset == "coco"


def test_karpathy_test_val_restval_and_dev_names(tmp_path):
    data = [{"split": "restval", "image_name": "1.jpg", "captions": ["a"]},
            {"split": "train", "image_name": "2.jpg", "captions": ["b"]},
            {"split": "dev", "image_name": "3.jpg", "captions": ["c"]}]
    p = _json(tmp_path / "f30k.json", data)
    assert read_karpathy_test_val(p, "train").image_files == ["1.jpg", "2.jpg"]
    assert read_karpathy_test_val(p, "val").image_files == ["3.jpg"]


def test_karpathy_test_val_guards(tmp_path):
    p = _json(tmp_path / "flickr30k_all.json", [{"split": "test", "image_name": "1.jpg", "captions": ["a"]},
                                                 {"split": "train", "image_name": "2.jpg", "captions": ["b"]}])
    with pytest.raises(ValueError, match=re.escape("flickr30k_all.json holds split(s) ['test', 'train'], not 'val'")):
        read_karpathy_test_val(p, "val")
    e = _json(tmp_path / "extra.json", [{"split": "extra", "image_name": "1.jpg", "captions": ["a"]}])
    with pytest.raises(ValueError, match=re.escape("extra.json holds split(s) ['extra'], not 'test'")):
        read_karpathy_test_val(e, "test")  # a split name the loaders do not know is shown as written
    # without split fields the file name decides
    q = _json(tmp_path / "flickr30k_test.json", [{"image_name": "1.jpg", "captions": ["a"]}])
    assert read_karpathy_test_val(q, "test").dataset == "flickr30k"
    with pytest.raises(ValueError, match=re.escape("flickr30k_test.json holds the 'test' split, not 'val'")):
        read_karpathy_test_val(q, "val")
    with pytest.raises(ValueError, match=r"^unknown split 'dev'"):
        read_karpathy_test_val(q, "dev")
    r = _json(tmp_path / "nosplit.json", [{"image_name": "1.jpg", "captions": ["a"]}])
    assert read_karpathy_test_val(r, "val").image_files == ["1.jpg"]
    assert read_karpathy_test_val(tmp_path / "absent.json", "val", data=[{"image_name": "5.jpg", "captions": ["z"]}]
                                  ).image_files == ["5.jpg"]


# ------------------------------------------------------------------------------------------- ALBEF
def test_albef_json_folders_and_caption_forms(tmp_path):
    data = [{"image": "flickr30k-images/9.jpg", "caption": ["a &amp; b", "c"]},
            {"image": "val2014/COCO_val2014_000000000001.jpg", "caption": "one string"},
            {"image": "COCO_val2014_000000000002.jpg", "caption": [7]},
            {"image": "x/y/8.jpg", "caption": "d"},
            {"image": "coco/val2014/COCO_val2014_000000000003.jpg", "caption": "e"}]
    p = _json(tmp_path / "captions.json", data)
    caps = read_albef_json(p, "val")
    assert caps.image_files == ["9.jpg", "val2014/COCO_val2014_000000000001.jpg",
                                "COCO_val2014_000000000002.jpg", "8.jpg", "coco/val2014/COCO_val2014_000000000003.jpg"]
    assert caps.source == str(p)
    assert caps.captions == ["a &amp; b", "c", "one string", "7", "d", "e"]
    assert caps.caption_to_image.tolist() == [0, 0, 1, 2, 3, 4]
    assert (caps.dataset, caps.split) == ("unknown", "val")
    assert read_albef_json(p, "val", unescape_html=True).captions[0] == "a & b"
    assert read_albef_json(p, "val", "coco").dataset == "coco"
    assert read_albef_json(tmp_path / "coco_karpathy_test.json", "test", data=data).dataset == "coco"


def test_albef_json_guards(tmp_path):
    p = _json(tmp_path / "flickr30k_test.json", [{"image": "1.jpg", "caption": "a"}])
    with pytest.raises(ValueError, match=re.escape("flickr30k_test.json holds the 'test' split, not 'train'")):
        read_albef_json(p, "train")
    with pytest.raises(ValueError, match=r"^unknown split 'restval'"):
        read_albef_json(tmp_path / "x.json", "restval", data=[{"image": "1.jpg", "caption": "a"}])


# ------------------------------------------------------------------------------------------- COCO captions
def test_coco_captions_json_keeps_image_order_and_caption_order(tmp_path):
    data = {"images": [{"id": 7, "file_name": "COCO_val2014_000000000007.jpg"}, {"id": 3, "file_name": "3.jpg"}],
            "annotations": [{"image_id": 3, "caption": "c3 &amp;", "id": 1},
                            {"image_id": 7, "caption": " c7a", "id": 2},
                            {"image_id": 7, "caption": "c7b", "id": 3}]}
    p = _json(tmp_path / "caps.json", data)
    caps = read_coco_captions_json(p, "val")
    assert caps.image_files == ["val2014/COCO_val2014_000000000007.jpg", "3.jpg"]
    assert caps.captions == ["c7a", "c7b", "c3 &amp;"] and caps.caption_to_image.tolist() == [0, 0, 1]
    assert (caps.dataset, caps.split, caps.source) == ("coco", "val", str(p))
    assert read_coco_captions_json(p, "val", "flickr30k", unescape_html=True).captions[2] == "c3 &"
    assert read_coco_captions_json(p, "val", "flickr30k").dataset == "flickr30k"
    assert read_coco_captions_json(tmp_path / "absent.json", "test", data=data).n_captions == 3


def test_coco_captions_json_guards(tmp_path):
    data = {"images": [{"id": 1, "file_name": "1.jpg"}], "annotations": [{"image_id": 99, "caption": "x", "id": 5}]}
    p = _json(tmp_path / "caps.json", data)
    with pytest.raises(ValueError, match=re.escape("caps.json: caption 5 refers to unknown image 99")):
        read_coco_captions_json(p, "test")
    q = _json(tmp_path / "coco_val_karpathy.json", {"images": [], "annotations": []})
    with pytest.raises(ValueError, match=re.escape("coco_val_karpathy.json holds the 'val' split, not 'test'")):
        read_coco_captions_json(q, "test")
    with pytest.raises(ValueError, match=re.escape(f"no images of split 'val' in {q}")):
        read_coco_captions_json(q, "val")
    with pytest.raises(ValueError, match=r"^unknown split 'restval'"):
        read_coco_captions_json(tmp_path / "x.json", "restval", data={"images": [], "annotations": []})


# ------------------------------------------------------------------------------------------- CLIP_benchmark txt
def test_clip_benchmark_txt_reads_lines_and_skips_the_header_and_blanks(tmp_path):
    p = _text(tmp_path / "flickr30k_test_karpathy.txt",
              "image,caption\n1.jpg,a dog, running\n\n  \n2.jpg, a cat &amp; \n1.jpg,b as in b.jpg, c\n")
    caps = read_clip_benchmark_txt(p, "test")
    assert caps.image_files == ["1.jpg", "2.jpg"]
    assert caps.captions == ["a dog, running", "a cat &amp;", "b as in b.jpg, c"]
    assert caps.caption_to_image.tolist() == [0, 1, 0]
    assert (caps.dataset, caps.split, caps.source) == ("flickr30k", "test", str(p))
    assert read_clip_benchmark_txt(p, "test", unescape_html=True).captions[1] == "a cat &"
    assert read_clip_benchmark_txt(p, "test", "coco").dataset == "coco"
    # the first line is a header whatever it holds
    q = _text(tmp_path / "any.txt", "0.jpg,not a caption\n3.jpg,c\n")
    assert read_clip_benchmark_txt(q, "val").image_files == ["3.jpg"]


def test_clip_benchmark_txt_guards(tmp_path):
    long = "x" * 100
    p = _text(tmp_path / "f.txt", f"image,caption\n1.jpg,a\n\n{long}\n")
    with pytest.raises(ValueError, match=re.escape(f"f.txt:4: expected 'name.jpg,caption'; got {'x' * 80!r}")):
        read_clip_benchmark_txt(p, "test")
    q = _text(tmp_path / "flickr30k_val_karpathy.txt", "image,caption\n1.jpg,a\n")
    with pytest.raises(ValueError, match=re.escape("flickr30k_val_karpathy.txt holds the 'val' split, not 'test'")):
        read_clip_benchmark_txt(q, "test")
    with pytest.raises(ValueError, match=r"^unknown split 'restval'"):
        read_clip_benchmark_txt(tmp_path / "f.txt", "restval")
    e = _text(tmp_path / "e.txt", "image,caption\n")
    with pytest.raises(ValueError, match=re.escape(f"no images of split 'test' in {e}")):
        read_clip_benchmark_txt(e, "test")


# ------------------------------------------------------------------------------------------- Flickr8k
def _f8k(folder, clean=False, token_name="Flickr8k.token.txt", sep="\t"):
    suffix = ".clean.txt" if clean else ".txt"
    _text(folder / f"Flickr_8k.testImages{suffix}", "b.jpg\n\n a.jpg \n")
    _text(folder / f"Flickr_8k.devImages{suffix}", "c.jpg\n")
    _text(folder / f"Flickr_8k.trainImages{suffix}", "d.jpg\n")
    lines = [f"a.jpg#0{sep}a zero", f"b.jpg#0{sep}b zero &amp;", "", f"a.jpg#1{sep}a one", f"c.jpg#0{sep}c zero",
             f"d.jpg#0{sep}d zero X", f"z.jpg#0{sep}not listed", f"b.jpg#1{sep}b #one"]
    return _text(folder / token_name, "\n".join(lines) + "\n")


def test_flickr8k_split_file_prefers_the_plain_list(tmp_path):
    _f8k(tmp_path, clean=True)
    tok = tmp_path / "Flickr8k.token.txt"
    assert flickr8k_split_file(tok, "test") == tmp_path / "Flickr_8k.testImages.clean.txt"
    assert flickr8k_split_file(tok, "val") == tmp_path / "Flickr_8k.devImages.clean.txt"
    _f8k(tmp_path)
    assert flickr8k_split_file(tok, "test") == tmp_path / "Flickr_8k.testImages.txt"
    assert flickr8k_split_file(tok, "train") == tmp_path / "Flickr_8k.trainImages.txt"


def test_flickr8k_split_file_guards(tmp_path):
    tok = tmp_path / "Flickr8k.token.txt"
    with pytest.raises(FileNotFoundError, match=re.escape(
            f"no Flickr_8k.devImages[.clean].txt beside {tok}: the Flickr8k token file needs the official split "
            "lists (Flickr_8k.trainImages.txt, devImages, testImages) in its folder")):
        flickr8k_split_file(tok, "val")
    with pytest.raises(ValueError, match=r"^unknown split 'dev' of 'flickr8k'"):
        flickr8k_split_file(tok, "dev")


def test_flickr8k_token_reads_the_split_list_order(tmp_path):
    tok = _f8k(tmp_path)
    caps = read_flickr8k_token(tok, "test")
    assert caps.image_files == ["b.jpg", "a.jpg"]
    assert caps.captions == ["b zero &amp;", "b #one", "a zero", "a one"]  # grouped by image
    assert caps.caption_to_image.tolist() == [0, 0, 1, 1]
    assert (caps.dataset, caps.split, caps.source) == ("flickr8k", "test", str(tok))
    assert read_flickr8k_token(tok, "test", unescape_html=True).captions[0] == "b zero &"
    assert read_flickr8k_token(tok, "val").captions == ["c zero"]
    assert read_flickr8k_token(tok, "train").captions == ["d zero X"]
    tabs = _text(tmp_path / "tabs" / "t.txt", "a.jpg#0\ta\tb\n")
    assert read_flickr8k_token(tabs, "test", _text(tmp_path / "tabs" / "l.txt", "a.jpg\n")).captions == ["a\tb"]
    # an explicit split list anywhere
    other = _text(tmp_path / "lists" / "mine.txt", "d.jpg\nc.jpg\n")
    assert read_flickr8k_token(tok, "train", other).image_files == ["d.jpg", "c.jpg"]
    assert read_flickr8k_token(tok, "train", other).captions == ["d zero X", "c zero"]


def test_flickr8k_token_with_spaces_instead_of_tabs(tmp_path):
    tok = _f8k(tmp_path, sep=" ")
    caps = read_flickr8k_token(tok, "test")
    assert caps.captions == ["b zero &amp;", "b #one", "a zero", "a one"]


def test_flickr8k_token_guards(tmp_path):
    tok = _f8k(tmp_path)
    lst = _text(tmp_path / "l.txt", "a.jpg\nq.jpg\nr.jpg\n")
    with pytest.raises(ValueError, match=re.escape("2 image(s) of l.txt have no caption in Flickr8k.token.txt "
                                                   "(first: q.jpg)")):
        read_flickr8k_token(tok, "test", lst)
    with pytest.raises(ValueError, match=r"^unknown split 'dev' of 'flickr8k'"):
        read_flickr8k_token(tok, "dev", lst)


# ------------------------------------------------------------------------------------------- read_annotations
def test_read_annotations_detects_every_json_format(tmp_path):
    k = _json(tmp_path / "dataset_flickr30k.json", _karpathy_data())
    caps = read_annotations(k, "test", unescape_html=True)
    assert caps.captions == ["one & a", "one b"] and caps.dataset == "flickr30k"
    assert read_annotations(k, "test", "coco").dataset == "coco"
    c = _json(tmp_path / "cc.json", {"images": [{"id": 1, "file_name": "1.jpg"}],
                                    "annotations": [{"image_id": 1, "caption": "&amp;", "id": 1}]})
    caps = read_annotations(c, "test", "flickr8k", unescape_html=True)
    assert caps.captions == ["&"] and caps.dataset == "flickr8k"
    assert read_annotations(c, "test").dataset == "coco"
    t = _json(tmp_path / "tv.json", [{"image_name": "1.jpg", "captions": ["&amp;"]}])
    caps = read_annotations(t, "val", "coco", unescape_html=True)
    assert caps.captions == ["&"] and caps.dataset == "coco" and caps.split == "val"
    a = _json(tmp_path / "al.json", [{"image": "i/1.jpg", "caption": "&amp;"}])
    caps = read_annotations(a, "train", "flickr30k", unescape_html=True)
    assert caps.captions == ["&"] and caps.image_files == ["1.jpg"] and caps.dataset == "flickr30k"
    upper = _json(tmp_path / "AL.JSON", [{"image": "i/1.jpg", "caption": "x"}])
    assert read_annotations(upper, "test").captions == ["x"]
    # the default split is "test"
    assert read_annotations(k).captions == ["one &amp; a", "one b"]


def test_read_annotations_parses_a_json_file_once(tmp_path, monkeypatch):
    files = [_json(tmp_path / "dataset_x.json", _karpathy_data()),
             _json(tmp_path / "cc.json", {"images": [{"id": 1, "file_name": "1.jpg"}],
                                          "annotations": [{"image_id": 1, "caption": "c", "id": 1}]}),
             _json(tmp_path / "tv.json", [{"image_name": "1.jpg", "captions": ["c"]}]),
             _json(tmp_path / "al.json", [{"image": "1.jpg", "caption": "c"}])]
    calls = []
    load = ann._load_json
    monkeypatch.setattr(ann, "_load_json", lambda p: calls.append(p) or load(p))
    for f in files:
        read_annotations(f, "test")
    assert calls == files


@pytest.mark.parametrize("obj", [
    {"images": {"1": "1.jpg"}}, {"annotations": []}, [], [1, 2], [{"image": "1.jpg"}], [{"caption": "c"}],
    [{"file": "1.jpg", "captions": ["c"]}], "text",
])
def test_read_annotations_rejects_unrecognised_json(tmp_path, obj):
    p = _json(tmp_path / "x.json", obj)
    with pytest.raises(ValueError, match=re.escape(
            f"{p}: unrecognised caption JSON (expected Karpathy dataset_*.json, a list of {{image_name, captions}}, "
            "a list of {image, caption} or COCO captions format)")):
        read_annotations(p, "test")


def test_read_annotations_detects_text_formats(tmp_path):
    tab = _f8k(tmp_path / "tab", token_name="captions.txt")
    assert read_annotations(tab, "test", unescape_html=True).captions[0] == "b zero &"
    png = _text(tmp_path / "tab" / "png.txt", "z.png#0\tnot listed\n" + tab.read_text())
    assert read_annotations(png, "test").image_files == ["b.jpg", "a.jpg"]  # a tab is enough
    space = _f8k(tmp_path / "space", token_name="captions.txt", sep=" ")
    caps = read_annotations(space, "test", "coco")
    assert caps.image_files == ["b.jpg", "a.jpg"] and caps.dataset == "flickr8k"
    clip = _text(tmp_path / "c.txt", "  Image,Caption\n1.jpg,&amp; x\n")
    caps = read_annotations(clip, "val", "coco", unescape_html=True)
    assert caps.captions == ["& x"] and caps.dataset == "coco" and caps.split == "val"


@pytest.mark.parametrize("first", ["image caption\n", "name,caption\n", "x.jpg#a b\n", "\n", "photo,image\n"])
def test_read_annotations_rejects_unrecognised_text(tmp_path, first):
    p = _text(tmp_path / "x.txt", first + "1.jpg,c\n")
    with pytest.raises(ValueError, match=re.escape(
            f"{p}: unrecognised caption file (expected CLIP_benchmark 'image,caption' text or a Flickr8k token file)")):
        read_annotations(p, "test")


def test_read_annotations_guards(tmp_path):
    p = tmp_path / "absent.json"
    with pytest.raises(FileNotFoundError, match=re.escape(f"annotation file {p} does not exist")):
        read_annotations(p, "test")
    with pytest.raises(ValueError, match=r"^unknown split 'x' of 'coco'; valid splits"):
        read_annotations(p, "x", "coco")
    with pytest.raises(ValueError, match=r"^unknown split 'x'; valid splits"):
        read_annotations(p, "x")


# ------------------------------------------------------------------------------------------- lookup
def test_candidate_annotation_files_written_out(tmp_path):
    a = tmp_path / "annotations"
    assert candidate_annotation_files("coco", "val", tmp_path) == [
        a / "dataset_coco.json", a / "mscoco_val.json", a / "coco_val_karpathy.json", a / "coco_karpathy_val.json"]
    assert candidate_annotation_files("flickr30k", "test", tmp_path) == [
        a / "dataset_flickr30k.json", a / "flickr30k_test.json", a / "flickr30k_test_karpathy.txt"]
    assert candidate_annotation_files("flickr8k", "train", tmp_path) == [
        a / "dataset_flickr8k.json", a / "flickr8k_train.json", a / "flickr8k_train_karpathy.txt",
        a / "Flickr8k.token.txt", a / "Flickr8k.token.clean.txt"]


def test_load_captions_from_a_file_sets_the_dataset(tmp_path):
    tok = _f8k(tmp_path)
    caps = load_captions("flickr30k", "test", tok)  # the reader names it flickr8k; the caller's name wins
    assert caps.dataset == "flickr30k" and caps.image_files == ["b.jpg", "a.jpg"]
    assert load_captions("flickr30k", "test", str(tok), unescape_html=True).captions[0] == "b zero &"
    assert load_captions("flickr30k", "test", tok).captions[0] == "b zero &amp;"
    assert load_captions("flickr8k", annotations=tok).split == "test"


def test_load_captions_searches_a_folder_in_candidate_order(tmp_path):
    folder = tmp_path / "mine"
    _json(folder / "flickr30k_test.json", [{"image_name": "t.jpg", "captions": ["t &amp;"]}])
    caps = load_captions("flickr30k", "test", folder, unescape_html=True)
    assert caps.image_files == ["t.jpg"] and caps.captions == ["t &"]
    assert caps.source == str(folder / "flickr30k_test.json")
    _json(folder / "dataset_flickr30k.json", _karpathy_data())
    caps = load_captions("flickr30k", "test", folder)
    assert caps.image_files == ["1.jpg"] and caps.source == str(folder / "dataset_flickr30k.json")
    # the data dir is not searched when a folder is given
    _json(tmp_path / "data" / "annotations" / "flickr30k_val.json", [{"image_name": "v.jpg", "captions": ["v"]}])
    with pytest.raises(FileNotFoundError, match="no flickr30k caption annotations found"):
        load_captions("flickr30k", "val", tmp_path / "empty", data_dir=tmp_path / "data")
    caps = load_captions("flickr30k", "val", data_dir=tmp_path / "data", unescape_html=True)
    assert caps.image_files == ["v.jpg"] and caps.dataset == "flickr30k"
    _json(tmp_path / "amp" / "annotations" / "flickr30k_val.json", [{"image_name": "v.jpg", "captions": ["&amp;"]}])
    assert load_captions("flickr30k", "val", data_dir=tmp_path / "amp").captions == ["&amp;"]


def test_load_captions_missing_lists_every_candidate(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    expected = ("no coco caption annotations found; looked for:\n"
                f"  {folder / 'dataset_coco.json'}\n  {folder / 'mscoco_test.json'}\n"
                f"  {folder / 'coco_test_karpathy.json'}\n  {folder / 'coco_karpathy_test.json'}\n"
                "Run:  python -m hubnorm.data fetch coco --what annotations\n"
                "or pass annotations=<file> (Karpathy dataset_*.json, CLIP_benchmark or mscoco_test.json-style file).")
    with pytest.raises(FileNotFoundError) as err:
        load_captions("coco", "test", folder)
    assert str(err.value) == expected
    a = tmp_path / "annotations"
    with pytest.raises(FileNotFoundError) as err:
        load_captions("flickr8k", "val", data_dir=tmp_path)
    assert str(err.value).startswith("no flickr8k caption annotations found; looked for:\n"
                                     f"  {a / 'dataset_flickr8k.json'}\n  {a / 'flickr8k_val.json'}\n")


def test_load_captions_guards(tmp_path):
    with pytest.raises(ValueError, match=r"^unknown dataset 'mscoco'; known datasets"):
        load_captions("mscoco", "test", tmp_path)
    with pytest.raises(ValueError, match=r"^unknown split 'dev' of 'coco'; valid splits"):
        load_captions("coco", "dev", tmp_path)
