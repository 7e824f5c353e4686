"""``hubnorm.data.local`` in small pieces, on hand-made folders in ``tmp_path`` (and the same files handed over as
bytes with ``files=``): the file helpers (``_has``, ``_regular``, ``_bytes``, ``_load_npy``), ``metadata.csv``
parsing (every id column, captions optional, an empty file), the runs of equal rows computed by hand, the
per-caption layout (metadata ids in order of first appearance, runs without metadata, one row per caption or per
image, every check by its message and at its tolerance), ``model_info.json`` (every check by its message), the
stacked layout, which layout and which label ``read_local`` picks, and ``split_by_images`` against the split written
out by hand from the seeded permutation (every check of ``test_fraction`` at its boundaries).

Survivors judged equivalent (no test can tell them apart):
- ``_read_metadata``: ``io.StringIO``'s ``newline=""`` dropped (its default ``"\n"`` translates nothing either; the
  csv reader splits the lines), ``"utf-8-sig"`` written ``"UTF-8-SIG"`` (an alias).
- ``_per_caption``: ``dtype=np.int64`` dropped from ``np.asarray`` of the Python ints of ``c2i`` and from
  ``np.full`` of ``first`` (NumPy's default integer is int64 on this platform); the fill value of ``first`` (-1 ->
  +1, -2: every image has a caption, so every entry is overwritten); the backward loop starting at ``len - 2``
  instead of ``len - 1`` (the last caption is then only missed when it is its image's only caption, and the fill
  value -1 then indexes that same last row).
- ``np.load(..., allow_pickle=False)`` with the argument dropped or ``None`` (False is the default; None is falsy).
- ``_load_npy`` reading a disk file through ``_bytes`` (``files is None`` -> ``... and False``): the same bytes,
  and ``_bytes`` refuses a non-regular file through ``_regular`` as well.
- ``read_local``'s ``label = None`` -> ``""`` (``label or folder_.name`` treats both alike).
- ``_unit``: ``x.astype(np.float64)`` -> ``astype(None)`` (None is float64); ``<= NORM_TOLERANCE`` -> ``<`` (a
  row norm exactly 1 +- 1e-3 in float64 is not constructible from float32 rows); ``unit_rows``' name (used in
  errors that the checks before it rule out).
- ``pairs_at_chance``: the block size (1 << 22 rows x images, or twice / half that, or at least 2 rows: only the
  chunks of one argmax differ); ``len(rows) >= PAIR_CHECK_CAPTIONS`` (a sample of all rows without replacement,
  sorted, is all rows); ``replace=None`` (falsy, as False).
"""

from __future__ import annotations

import io
import json
import re

import numpy as np
import pytest

from hubnorm.data import local
from hubnorm.data.local import load_local_embeddings, read_local, split_by_images
from hubnorm.embeddings import EmbeddingSplit, hold_out_val


def _unit(n, d=4, seed=0):
    x = np.random.default_rng(seed).standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _npy(arr) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def _csv(header, rows) -> bytes:
    return ("\n".join([",".join(header)] + [",".join(map(str, r)) for r in rows]) + "\n").encode()


def _write(folder, files):
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


def _percap(n_img=3, per=2, seed=0):
    """(image rows repeated per caption, text rows, distinct images, caption_to_image)."""
    imgs, txt = _unit(n_img, seed=seed), _unit(n_img * per, seed=seed + 1)
    c2i = np.repeat(np.arange(n_img), per)
    return imgs[c2i], txt, imgs, c2i


# ------------------------------------------------------------------------------------------------ file helpers
def test_has_reads_the_dict_or_the_disk(tmp_path):
    (tmp_path / "a").write_bytes(b"1")
    assert local._has(tmp_path, "a", None) and not local._has(tmp_path, "b", None)
    assert local._has(tmp_path, "b", {"b": b""}) and not local._has(tmp_path, "a", {"b": b""})
    assert not local._has(tmp_path, "a", {})                     # an empty dict is not "read the disk"


def test_regular_refuses_a_folder_and_passes_a_missing_path(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(ValueError, match="d is not a regular file \\(a named pipe, a device or a folder\\): a loader "
                                         "reads files only; copy the data into a regular file"):
        local._regular(tmp_path / "d")
    assert local._regular(tmp_path / "absent") == tmp_path / "absent"
    (tmp_path / "f").write_bytes(b"")
    assert local._regular(tmp_path / "f") == tmp_path / "f"


def test_bytes_from_the_dict_never_the_disk(tmp_path):
    (tmp_path / "a").write_bytes(b"disk")
    assert local._bytes(tmp_path / "a", None) == b"disk"
    assert local._bytes(tmp_path / "a", {"a": b"dict"}) == b"dict"
    with pytest.raises(FileNotFoundError, match=r"a is not among the files handed to the loader \(\['b', 'c'\]\)"):
        local._bytes(tmp_path / "a", {"c": b"", "b": b""})


def test_load_npy_names_a_bad_file(tmp_path):
    a = np.arange(6.0).reshape(2, 3)
    (tmp_path / "a.npy").write_bytes(_npy(a))
    assert np.array_equal(local._load_npy(tmp_path / "a.npy"), a)
    assert np.array_equal(local._load_npy(tmp_path / "x.npy", {"x.npy": _npy(a)}), a)
    (tmp_path / "t.npy").write_bytes(_npy(a)[:-5])
    with pytest.raises(ValueError, match="t.npy cannot be read as a .npy array .*: the file is truncated or corrupt; "
                                         "copy or export it again"):
        local._load_npy(tmp_path / "t.npy")
    with pytest.raises(ValueError, match="e.npy cannot be read as a .npy array"):
        local._load_npy(tmp_path / "e.npy", {"e.npy": b""})
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="p.npy cannot be read as a .npy array"):       # no pickles
        local._load_npy(tmp_path / "p.npy", {"p.npy": buf.getvalue()})


# ------------------------------------------------------------------------------------------------ metadata.csv
@pytest.mark.parametrize("column", ["image_id", "image", "image_path"])
def test_read_metadata_id_columns(tmp_path, column):
    files = {"m.csv": _csv([column, "caption"], [("a", "x"), ("b", "y"), ("a", "z")])}
    assert local._read_metadata(tmp_path / "m.csv", files) == (["a", "b", "a"], ["x", "y", "z"])


def test_read_metadata_without_captions_ids_or_rows(tmp_path):
    files = {"m.csv": _csv(["image_id"], [("a",), ("b",)]), "n.csv": _csv(["caption", "other"], [("x", 1)]),
             "e.csv": b"image_id,caption\n", "z.csv": b""}
    assert local._read_metadata(tmp_path / "m.csv", files) == (["a", "b"], None)
    assert local._read_metadata(tmp_path / "n.csv", files) == (None, ["x"])
    assert local._read_metadata(tmp_path / "e.csv", files) == (None, None)
    assert local._read_metadata(tmp_path / "z.csv", files) == (None, None)


def test_read_metadata_reads_the_first_id_column_and_refuses_an_empty_id(tmp_path):
    files = {"m.csv": _csv(["image", "image_id", "caption"], [("p", "a", "x"), ("q", "b", "y")])}
    assert local._read_metadata(tmp_path / "m.csv", files) == (["a", "b"], ["x", "y"])   # image_id first
    files = {"m.csv": _csv(["image_path", "caption"], [("p", "x"), ("q", "y")])}
    assert local._read_metadata(tmp_path / "m.csv", files) == (["p", "q"], ["x", "y"])
    files = {"m.csv": b"image_id,caption\na,x\nb\n"}         # a short row: no id missing, one caption missing
    assert local._read_metadata(tmp_path / "m.csv", files) == (["a", "b"], ["x", None])
    for text in (b"caption,image_id\nx,a\ny\n", b"image_id,caption\na,x\n ,y\n",
                 b"image_id,image,caption\na,p,x\n,q,y\n"):    # a row without its id (the other column is not read)
        with pytest.raises(ValueError, match=r"m.csv: 1 row\(s\) have no image_id \(the first is caption row 1, line 3 "
                                             r"of the file\): give every caption the id of its image$"):
            local._read_metadata(tmp_path / "m.csv", {"m.csv": text})


def test_read_metadata_refuses_a_file_without_the_columns_it_reads(tmp_path):
    for text, header in ((b"img,text\na,x\n", "['img', 'text']"), (b"image_id;caption\na;x\n", "['image_id;caption']")):
        with pytest.raises(ValueError, match=r"m.csv has neither an image id column \(image_id, image, image_path\) "
                                             rf"nor a caption column; its header reads {re.escape(header)}: name the "
                                             r"columns image_id and caption, separated by commas$"):
            local._read_metadata(tmp_path / "m.csv", {"m.csv": text})


def test_read_metadata_reads_a_byte_order_mark_and_names_another_encoding(tmp_path):
    files = {"m.csv": "image_id,caption\na,café\n".encode("utf-8-sig")}     # what a spreadsheet writes
    assert local._read_metadata(tmp_path / "m.csv", files) == (["a"], ["café"])
    files = {"m.csv": "image_id,caption\na,café\n".encode("latin-1")}
    with pytest.raises(ValueError, match=r"m.csv is not UTF-8 text \(invalid continuation byte at byte 22\): save it "
                                         r"as UTF-8 \(CSV UTF-8 in a spreadsheet program\)$"):
        local._read_metadata(tmp_path / "m.csv", files)


def test_read_metadata_is_utf8_and_keeps_quoted_newlines(tmp_path):
    files = {"m.csv": 'image_id,caption\na,"two\nlines"\nb,café\n'.encode("utf-8")}
    assert local._read_metadata(tmp_path / "m.csv", files) == (["a", "b"], ["two\nlines", "café"])


def test_read_metadata_keeps_a_carriage_return_inside_quotes(tmp_path):
    files = {"m.csv": b'image_id,caption\r\na,"one\r\ntwo"\r\nb,x\r\n'}
    assert local._read_metadata(tmp_path / "m.csv", files) == (["a", "b"], ["one\r\ntwo", "x"])


def test_runs_by_hand():
    a = np.array([[1, 0], [1, 0], [0, 1], [0, 1], [0, 1], [1, 0], [1, 1]], dtype=np.float32)
    assert local._runs(a).tolist() == [0, 0, 1, 1, 1, 2, 3]
    assert local._runs(a[:1]).tolist() == [0]
    assert local._runs(np.array([[1, 2], [1, 3]])).tolist() == [0, 1]       # one column differing is enough


# ------------------------------------------------------------------------------------------------ per-caption layout
def test_per_caption_with_metadata_ids_in_order_of_first_appearance(tmp_path):
    imgs, txt = _unit(3), _unit(5, seed=1)
    ids = ["q", "p", "q", "r", "p"]
    c2i = np.array([0, 1, 0, 2, 1])
    files = {"image_embeddings.npy": _npy(imgs[c2i]), "text_embeddings.npy": _npy(txt),
             "metadata.csv": _csv(["image_id", "caption"], [(i, f"c{j}") for j, i in enumerate(ids)])}
    images, texts, got_c2i, image_ids, captions, meta = local._per_caption(tmp_path, files)
    assert got_c2i.dtype == np.int64 and got_c2i.tolist() == c2i.tolist()
    assert image_ids == ["q", "p", "r"] and captions == [f"c{j}" for j in range(5)] and meta == {}
    assert np.array_equal(images, imgs) and np.array_equal(texts, txt)
    files["image_embeddings.npy"] = _npy(imgs)                                    # one row per image
    assert np.array_equal(local._per_caption(tmp_path, files)[0], imgs)


def test_per_caption_metadata_without_ids_uses_the_caption_count(tmp_path):
    x, txt, imgs, c2i = _percap()
    files = {"image_embeddings.npy": _npy(x), "text_embeddings.npy": _npy(txt),
             "metadata.csv": _csv(["caption"], [(f"c{j}",) for j in range(6)])}
    images, _, got, image_ids, captions, _ = local._per_caption(tmp_path, files)
    assert got.tolist() == c2i.tolist() and image_ids is None and captions[5] == "c5"
    assert np.array_equal(images, imgs)
    files["metadata.csv"] = _csv(["caption"], [(f"c{j}",) for j in range(5)])
    with pytest.raises(ValueError, match="metadata.csv has 5 rows but text_embeddings.npy has 6: the embeddings and "
                                         "the captions do not match"):
        local._per_caption(tmp_path, files)
    files["metadata.csv"] = _csv(["image_id"], [(f"i{j // 2}",) for j in range(7)])
    with pytest.raises(ValueError, match="metadata.csv has 7 rows but text_embeddings.npy has 6"):
        local._per_caption(tmp_path, files)
    files["metadata.csv"] = b"other\n1\n"                     # neither ids nor captions: named, not counted as 0
    with pytest.raises(ValueError, match="metadata.csv has neither an image id column"):
        local._per_caption(tmp_path, files)


@pytest.mark.parametrize("name", ["image_embeddings.npy", "text_embeddings.npy"])
def test_per_caption_arrays_must_be_2d_floats(tmp_path, name):
    x, txt, _, _ = _percap()
    for bad, shape, dtype in ((np.zeros(6, np.float32), r"\(6,\)", "float32"),
                              (np.zeros((6, 4, 1), np.float32), r"\(6, 4, 1\)", "float32"),
                              (np.zeros((6, 4), np.int64), r"\(6, 4\)", "int64")):
        files = {"image_embeddings.npy": _npy(x), "text_embeddings.npy": _npy(txt), name: _npy(bad)}
        with pytest.raises(ValueError, match=rf"{name}: expected a 2-D float array \(rows, d\); got shape {shape}, "
                                             rf"dtype {dtype}"):
            local._per_caption(tmp_path, files)
    files = {"image_embeddings.npy": _npy(x.astype(np.float16)), "text_embeddings.npy": _npy(txt.astype(np.float64))}
    assert local._per_caption(tmp_path, files)[2].tolist() == [0, 0, 1, 1, 2, 2]


def test_per_caption_without_metadata_follows_runs(tmp_path):
    x, txt, imgs, c2i = _percap(n_img=4, per=3)
    files = {"image_embeddings.npy": _npy(x), "text_embeddings.npy": _npy(txt)}
    images, texts, got, image_ids, captions, meta = local._per_caption(tmp_path, files)
    assert got.tolist() == c2i.tolist() and image_ids is None and captions is None and meta == {}
    assert np.array_equal(images, imgs) and np.array_equal(texts, txt)
    files["image_embeddings.npy"] = _npy(imgs)                  # one row per image and no metadata: no pairing
    with pytest.raises(ValueError, match="4 image rows for 12 caption rows and no metadata.csv to say which caption "
                                         "belongs to which image"):
        local._per_caption(tmp_path, files)


def test_per_caption_shuffled_rows_without_metadata_are_ambiguous(tmp_path):
    imgs = _unit(2)
    order = np.array([0, 1, 0, 1])
    files = {"image_embeddings.npy": _npy(imgs[order]), "text_embeddings.npy": _npy(_unit(4, seed=2))}
    with pytest.raises(ValueError, match=r"not grouped by image \(2 distinct image rows in 4 runs of equal "
                                         r"consecutive rows, e.g. shuffled rows\), and there is no metadata.csv: "
                                         r"which captions belong to one image is ambiguous. Add metadata.csv with an "
                                         r"image_id column \(row j = caption j\), or sort the rows so that each "
                                         r"image's captions are consecutive"):
        local._per_caption(tmp_path, files)


def test_per_caption_rows_of_one_image_must_agree(tmp_path):
    imgs, txt = _unit(2), _unit(4, seed=1)
    rows = imgs[[0, 0, 1, 1]].copy()
    meta = _csv(["image_id"], [("a",), ("a",), ("b",), ("b",)])
    rows[1] += 5e-6                                              # within atol 1e-5: the first row is kept
    files = {"image_embeddings.npy": _npy(rows), "text_embeddings.npy": _npy(txt), "metadata.csv": meta}
    images = local._per_caption(tmp_path, files)[0]
    assert np.array_equal(images, imgs) and images.base is not None or np.array_equal(images, rows[[0, 2]])
    rows[1] += 1e-3
    rows[3] -= 1e-3
    files["image_embeddings.npy"] = _npy(rows)
    with pytest.raises(ValueError, match="image_embeddings.npy rows of the same image differ"):
        local._per_caption(tmp_path, files)
    rows = imgs[[0, 0, 1, 1]].copy()
    rows[0] += 1e-3                                              # the first row differs from the second
    files["image_embeddings.npy"] = _npy(rows)
    with pytest.raises(ValueError, match="rows of the same image differ"):
        local._per_caption(tmp_path, files)


def test_per_caption_keeps_the_first_row_of_each_image(tmp_path):
    imgs = _unit(3)
    c2i = np.array([1, 0, 1, 2, 0])
    rows = imgs[c2i].copy()
    rows[2] += 4e-6                                              # a later row of image "b", slightly different
    ids = np.array(["b", "a", "c"])[[0, 1, 0, 2, 1]]
    files = {"image_embeddings.npy": _npy(rows), "text_embeddings.npy": _npy(_unit(5, seed=1)),
             "metadata.csv": _csv(["image_id"], [(i,) for i in ids])}
    images, _, got, image_ids, _, _ = local._per_caption(tmp_path, files)
    assert image_ids == ["b", "a", "c"] and got.tolist() == [0, 1, 0, 2, 1]
    assert np.array_equal(images, rows[[0, 1, 3]])               # rows 0, 1, 3: each image's first caption row


def test_per_caption_first_row_is_not_the_last_row(tmp_path):
    """The last caption's image keeps its *first* row (here row 1), not the last one (row 4, 8e-6 away)."""
    imgs = _unit(2)
    c2i = np.array([1, 0, 1, 1, 0])
    rows = imgs[c2i].copy()
    rows[4] += 8e-6                                              # inside atol 1e-5, outside the default tolerance
    files = {"image_embeddings.npy": _npy(rows), "text_embeddings.npy": _npy(_unit(5, seed=1)),
             "metadata.csv": _csv(["image_id"], [(f"i{k}",) for k in c2i])}
    images = local._per_caption(tmp_path, files)[0]
    assert np.array_equal(images, rows[[0, 1]])
    rows[4] += 1e-5                                              # 1.8e-5 away: over the tolerance
    files["image_embeddings.npy"] = _npy(rows)
    with pytest.raises(ValueError, match="rows of the same image differ"):
        local._per_caption(tmp_path, files)


def test_per_caption_wrong_number_of_image_rows(tmp_path):
    txt = _unit(4, seed=1)
    meta = _csv(["image_id"], [("a",), ("a",), ("b",), ("b",)])
    files = {"image_embeddings.npy": _npy(_unit(3)), "text_embeddings.npy": _npy(txt), "metadata.csv": meta}
    with pytest.raises(ValueError, match=r"image_embeddings.npy has 3 rows; expected 4 \(one per caption\) or 2 "
                                         r"\(one per image\)"):
        local._per_caption(tmp_path, files)


# ------------------------------------------------------------------------------------------------ model_info.json
def test_model_info(tmp_path):
    assert local._model_info(tmp_path, {}) == {}
    assert local._model_info(tmp_path) == {}
    info = {"model_name": " ViT-B/32 ", "dataset": "flickr30k", "other": 1}
    assert local._model_info(tmp_path, {"model_info.json": json.dumps(info).encode()}) == \
        {"model": "ViT-B/32", "dataset": "flickr30k"}
    assert local._model_info(tmp_path, {"model_info.json": b'{"dataset": "coco", "model_name": null}'}) == \
        {"dataset": "coco"}
    (tmp_path / "model_info.json").write_text('{"model_name": "m"}')
    assert local._model_info(tmp_path) == {"model": "m"}


@pytest.mark.parametrize("doc, message", [
    (b"{oops", r"model_info.json is not valid JSON \(.*\): fix or remove it"),
    (b"[1, 2]", r"model_info.json must hold a JSON object such as \{\"model_name\": ..., \"dataset\": ...\}"),
    (b'"m"', "must hold a JSON object"),
    (b'{"model_name": 3}', r"model_info.json: 'model_name' must be a non-empty string; got 3"),
    (b'{"model_name": "  "}', r"'model_name' must be a non-empty string; got '  '"),
    (b'{"dataset": ""}', r"'dataset' must be a non-empty string; got ''"),
    (b'{"dataset": ["coco"]}', r"'dataset' must be a non-empty string"),
])
def test_model_info_checks(tmp_path, doc, message):
    with pytest.raises(ValueError, match=message):
        local._model_info(tmp_path, {"model_info.json": doc})


# ------------------------------------------------------------------------------------------------ stacked layout
def test_stacked(tmp_path):
    arr = np.stack([_unit(5), _unit(5, seed=1)])
    images, texts, c2i, ids, caps, meta = local._stacked(tmp_path / "features_x.npy", {"features_x.npy": _npy(arr)})
    assert np.array_equal(images, arr[0]) and np.array_equal(texts, arr[1]) and c2i.tolist() == [0, 1, 2, 3, 4]
    assert ids is None and caps is None and meta == {"file": "features_x.npy"}
    for bad, shape in ((np.zeros((3, 5, 4)), r"\(3, 5, 4\), dtype float64"), (np.zeros((2, 5)), r"\(2, 5\), dtype float64"),
                       (np.zeros((2, 5, 4, 1)), r"\(2, 5, 4, 1\), dtype float64"),
                       (np.zeros((1, 5, 4)), r"\(1, 5, 4\), dtype float64"),
                       (np.zeros((2, 5, 4), np.int64), r"\(2, 5, 4\), dtype int64")):
        with pytest.raises(ValueError, match=rf"features_x.npy: expected a float array of shape \(2, n, d\) \(images, "
                                             rf"texts\); got shape {shape}$"):
            local._stacked(tmp_path / "features_x.npy", {"features_x.npy": _npy(bad)})
    with pytest.raises(ValueError, match=r"features_x.npy holds no embeddings \(shape \(2, 0, 4\)\): export them again"):
        local._stacked(tmp_path / "features_x.npy", {"features_x.npy": _npy(np.zeros((2, 0, 4)))})


def test_stacked_equal_image_rows_are_one_image(tmp_path):
    """An image repeated for each of its captions (rows 0, 2, 3 one image; 1, 4 another): each distinct row once,
    in order of first appearance, with all its copies' captions; a gallery with copies would count a copy as a
    miss."""
    img = _unit(3)
    rows = img[[1, 0, 1, 1, 0, 2]]
    txt = _unit(6, seed=1)
    images, texts, c2i, _, _, meta = local._stacked(tmp_path / "f.npy", {"f.npy": _npy(np.stack([rows, txt]))})
    assert np.array_equal(images, img[[1, 0, 2]]) and np.array_equal(texts, txt)
    assert c2i.tolist() == [0, 1, 0, 0, 1, 2] and meta == {"file": "f.npy", "grouped_image_rows": 3}


# ------------------------------------------------------------------------------------------------ read_local
def test_read_local_per_caption_folder_and_meta(tmp_path):
    x, txt, imgs, c2i = _percap()
    files = {"image_embeddings.npy": _npy(x.astype(np.float64)), "text_embeddings.npy": _npy(txt.astype(np.float64)),
             "model_info.json": b'{"model_name": "m", "dataset": "coco"}',
             "features_clip.npy": _npy(np.zeros((2, 1, 4)))}            # per-caption files win over a stacked one
    folder = _write(tmp_path / "fold", files)
    full, name, meta = read_local(folder)
    assert name == "fold" and meta == {"model": "m", "dataset": "coco", "folder": str(folder)}
    assert full.images.dtype == np.float32 and full.captions.dtype == np.float32 and full.images.flags["C_CONTIGUOUS"]
    assert np.array_equal(full.images, imgs) and np.array_equal(full.captions, txt)
    assert full.caption_to_image.tolist() == c2i.tolist() and full.image_ids is None and full.caption_texts is None
    full2, name2, meta2 = read_local(tmp_path / "elsewhere" / "fold", files=files)     # the bytes, not the disk
    assert name2 == "fold"
    assert meta2 == {"model": "m", "dataset": "coco", "folder": str(tmp_path / "elsewhere" / "fold")}
    assert np.array_equal(full2.images, full.images)


def test_read_local_stacked_labels(tmp_path):
    arr = np.stack([_unit(4), _unit(4, seed=1)])
    folder = _write(tmp_path / "coll", {"features_clip.npy": _npy(arr), "features_rand.npy": _npy(arr[::-1])})
    full, name, meta = read_local(folder)
    assert name == "coll" and meta == {"file": "features_clip.npy", "folder": str(folder)}
    assert np.array_equal(full.images, arr[0]) and full.caption_to_image.tolist() == [0, 1, 2, 3]
    full, name, meta = read_local(folder, features="features_rand.npy")
    assert name == "coll/features_rand" and meta["file"] == "features_rand.npy"
    assert np.array_equal(full.images, arr[1])
    full, name, meta = read_local(folder / "features_rand.npy")                  # a file: its folder's name + stem
    assert name == "coll/features_rand" and meta["folder"] == str(folder) and np.array_equal(full.images, arr[1])
    full, name, meta = read_local(folder / "features_clip.npy")
    assert name == "coll" and meta == {"file": "features_clip.npy", "folder": str(folder)}


def test_read_local_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="absent does not exist"):
        read_local(tmp_path / "absent")
    folder = _write(tmp_path / "f", {"image_embeddings.npy": _npy(_unit(2))})
    with pytest.raises(ValueError, match=r"f: no known embedding layout \(image_embeddings.npy \+ text_embeddings.npy, "
                                         r"or features_x.npy of shape \(2, n, d\)\)"):
        read_local(folder, features="features_x.npy")
    with pytest.raises(ValueError, match="no known embedding layout"):
        read_local(tmp_path / "absent", files={"text_embeddings.npy": b""})
    arr = np.stack([_unit(3), _unit(3)])
    folder = _write(tmp_path / "g", {"image_embeddings.npy": _npy(_unit(3)), "text_embeddings.npy": _npy(_unit(3, 5)),
                                     "features_clip.npy": _npy(arr)})
    with pytest.raises(ValueError, match="g: image dim 4 != text dim 5"):
        read_local(folder)


def test_read_local_expands_the_user(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    _write(tmp_path / "h", {"features_clip.npy": _npy(np.stack([_unit(3), _unit(3)]))})
    assert read_local("~/h")[1] == "h"


# ------------------------------------------------------------------------------------------------ split_by_images
def _full(n_img=10, per=2):
    imgs, caps = _unit(n_img), _unit(n_img * per, seed=1)
    return EmbeddingSplit(images=imgs, captions=caps, caption_to_image=np.repeat(np.arange(n_img), per),
                          image_ids=[f"i{k}" for k in range(n_img)],
                          caption_texts=[f"c{j}" for j in range(n_img * per)])


def test_split_by_images_by_hand():
    full = _full()
    ds = split_by_images(full, name="x", meta={"model": "m"}, test_fraction=0.36, seed=4, val=False)
    perm = np.random.default_rng(4).permutation(10)
    test_idx, train_idx = np.sort(perm[:4]), np.sort(perm[4:])               # round(3.6) = 4 test images
    assert ds.name == "x" and ds.source == "real" and sorted(ds.splits) == ["test", "train"]
    assert ds.meta == {"model": "m", "test_fraction": 0.36, "seed": 4, "n_images": 10, "n_captions": 20}
    assert ds.split("test").image_ids == [f"i{k}" for k in test_idx]
    assert ds.split("train").image_ids == [f"i{k}" for k in train_idx]
    assert np.array_equal(ds.split("test").images, full.images[test_idx])
    assert ds.split("test").caption_texts == [f"c{j}" for k in test_idx for j in (2 * k, 2 * k + 1)]


def test_split_by_images_val_is_the_hold_out_rule():
    full = _full(12)
    ds = split_by_images(full, name="x", test_fraction=0.25, seed=2)
    ref = hold_out_val(split_by_images(full, name="x", test_fraction=0.25, seed=2, val=False), 2)
    assert sorted(ds.splits) == ["test", "train", "val"]
    for s in ("test", "train", "val"):
        assert ds.split(s).image_ids == ref.split(s).image_ids
    assert ds.split("val").n_images == 3 and ds.split("train").n_images == 6 and ds.meta["n_images"] == 12
    assert "val_split" in ds.meta
    assert split_by_images(full, name="x").meta["test_fraction"] == 0.5 and \
        split_by_images(full, name="x").meta["seed"] == 0
    assert split_by_images(full, name="x", meta=None, val=False).meta == {"test_fraction": 0.5, "seed": 0,
                                                                          "n_images": 12, "n_captions": 24}


def test_split_by_images_does_not_change_the_callers_meta():
    meta = {"model": "m"}
    split_by_images(_full(), name="x", meta=meta)
    assert meta == {"model": "m"}


@pytest.mark.parametrize("bad", [0, 1, 0.0, 1.0, -0.2, 1.5, np.float32(1.0), True, False, "0.5", None])
def test_split_by_images_test_fraction_checks(bad):
    error = ValueError if isinstance(bad, (int, float, np.floating)) and not isinstance(bad, bool) else TypeError
    with pytest.raises(error, match=r"^test_fraction \(the share of images in the test split\) must be a number in "
                                    rf"\(0, 1\); got {re.escape(repr(bad))}$"):
        split_by_images(_full(), name="x", test_fraction=bad)


@pytest.mark.parametrize("n, fraction, ok", [(2, 0.5, True), (2, 0.26, True), (2, 0.25, False), (2, 0.76, False),
                                             (4, 0.125, False), (4, 0.13, True), (10, 0.94, True), (10, 0.96, False)])
def test_split_by_images_empty_split_boundaries(n, fraction, ok):
    full = _full(n)
    if ok:
        ds = split_by_images(full, name="x", test_fraction=fraction, val=False)
        assert ds.split("test").n_images == int(round(fraction * n))
    else:
        with pytest.raises(ValueError, match=f"test_fraction {fraction} leaves an empty split for {n} images"):
            split_by_images(full, name="x", test_fraction=fraction)


def test_load_local_embeddings_passes_every_option(tmp_path):
    arr = np.stack([_unit(10), _unit(10, seed=1)])
    folder = _write(tmp_path / "coll", {"features_clip.npy": _npy(arr), "features_r.npy": _npy(arr),
                                        "model_info.json": b'{"dataset": "coco"}'})
    ds = load_local_embeddings(folder, test_fraction=0.3, seed=5, val=False)
    ref = split_by_images(read_local(folder)[0], name="coll", test_fraction=0.3, seed=5, val=False)
    assert ds.name == "coll" and sorted(ds.splits) == ["test", "train"]
    assert ds.meta == {**ref.meta, "file": "features_clip.npy", "dataset": "coco", "folder": str(folder)}
    assert np.array_equal(ds.split("test").images, ref.split("test").images)
    assert load_local_embeddings(folder, features="features_r.npy", val=False).name == "coll/features_r"
    assert load_local_embeddings(folder, name="mine").name == "mine"
    assert "val" in load_local_embeddings(folder).splits
    files = {"features_clip.npy": _npy(arr)}
    got = load_local_embeddings(tmp_path / "nowhere" / "coll", files=files, test_fraction=0.3, seed=5, val=False)
    assert np.array_equal(got.split("test").images, ref.split("test").images)


# ------------------------------------------------------------------------------------ pairs and named image rows
def _paired(n_img=30, per=2, d=16, seed=0, noise=0.3):
    """One row per image and ``per`` captions each, each caption near its image (raw R@1 far above chance)."""
    rng = np.random.default_rng(seed)
    img = _unit(n_img, d, seed)
    c2i = np.repeat(np.arange(n_img), per)
    txt = img[c2i] + noise * rng.standard_normal((len(c2i), d)) / np.sqrt(d)
    return img, (txt / np.linalg.norm(txt, axis=1, keepdims=True)).astype(np.float32), c2i


def test_pairs_at_chance_by_the_score_checks_rule():
    img, txt, c2i = _paired()
    assert local.pairs_at_chance(img, txt, c2i) is None
    wrong = np.random.default_rng(1).permutation(30)[c2i]
    r1, chance = local.pairs_at_chance(img, txt, wrong)
    assert chance == pytest.approx(1 / 30) and r1 == pytest.approx(np.mean(wrong == c2i))
    assert local.pairs_at_chance(img[:19], txt[:38], c2i[:38] % 19) is None        # under MIN_ITEMS: not judged
    big_img, big_txt, big_c2i = _paired(n_img=1100, per=2, d=32)                  # a seeded sample of the captions
    assert local.pairs_at_chance(big_img, big_txt, big_c2i) is None
    assert local.pairs_at_chance(big_img, big_txt, np.roll(big_c2i, 2)) is not None


def test_one_row_per_image_in_another_order_than_the_ids_is_refused_and_images_csv_names_the_rows(tmp_path):
    """Images in row order 0..29, captions shuffled with their ids: without images.csv, row i is the i-th id in
    order of first appearance (wrong here: refused at chance level); images.csv names the rows and the same folder
    loads right."""
    img, txt, c2i = _paired()
    perm = np.random.default_rng(2).permutation(len(c2i))
    files = {"image_embeddings.npy": _npy(img), "text_embeddings.npy": _npy(txt[perm]),
             "metadata.csv": _csv(["image_id", "caption"], [(f"img{i}", f"c{j}") for j, i in enumerate(c2i[perm])])}
    folder = _write(tmp_path / "f", files)
    with pytest.raises(ValueError, match=r"f: its captions find their own image first for [0-9.]+% of them, at chance "
                                         r"level \(3.33% for random pairs\): the captions are not paired with the "
                                         r"right images\. .*add images.csv \(an image_id column, row i = image row i\); "
                                         r"a folder at chance on purpose \(a random-init control\) loads with "
                                         r"check_pairs=False \(--source-option check_pairs=false\)$"):
        read_local(folder)
    full, _, _ = read_local(folder, check_pairs=False)                         # loads, wrongly paired, when asked
    assert not np.array_equal(full.images[full.caption_to_image], img[c2i[perm]])
    (folder / "images.csv").write_bytes(_csv(["image_id"], [(f"img{i}",) for i in range(30)]))
    full, _, _ = read_local(folder)
    assert np.array_equal(full.images, img) and full.caption_to_image.tolist() == c2i[perm].tolist()
    assert full.image_ids == [f"img{i}" for i in range(30)]
    for text, msg in ((_csv(["image_id"], [(f"img{i}",) for i in range(29)]),
                       r"images.csv must have an image_id column with one row per row of image_embeddings.npy \(30\); "
                       r"got 29"),
                      (_csv(["image_id"], [(f"img{min(i, 28)}",) for i in range(30)]),
                       r"images.csv: image_id 'img28' names rows 28 and 29: give each image row its own id"),
                      (_csv(["image_id"], [(f"img{i}",) for i in range(2, 32)]),
                       rf"f: metadata.csv names 2 image_id\(s\) that images.csv does not list \(e.g. "
                       rf"'img{next(i for i in c2i[perm] if i < 2)}'\): list every image, or fix the ids$"),
                      (_csv(["caption"], [("x",) for i in range(30)]),
                       r"images.csv must have an image_id column with one row per row of image_embeddings.npy \(30\); "
                       r"got 0$")):
        (folder / "images.csv").write_bytes(text)
        with pytest.raises(ValueError, match=msg):
            read_local(folder)
    with pytest.raises(TypeError, match="^check_pairs must be True or False; got 'no'$"):
        read_local(folder, check_pairs="no")
    named = {**files, "images.csv": _csv(["image_id"], [(f"img{i}",) for i in range(30)])}   # handed over as bytes
    full, _, _ = read_local(tmp_path / "elsewhere" / "f", files=named)
    assert full.caption_to_image.tolist() == c2i[perm].tolist()
    per_caption = {**named, "image_embeddings.npy": _npy(img[c2i[perm]])}   # per-caption rows beside images.csv
    with pytest.raises(ValueError, match=r"images.csv must have an image_id column with one row per row of "
                                         r"image_embeddings.npy \(60\); got 30$"):
        read_local(tmp_path / "elsewhere" / "f", files=per_caption)


def test_the_chance_message_in_full(tmp_path):
    img, txt, c2i = _paired()
    wrong = np.roll(c2i, 2)
    wrong[::12] = c2i[::12]                      # a few right: the percentage printed is not 0
    files = {"features_clip.npy": _npy(np.stack([img[wrong], txt]))}
    full, _, _ = read_local(tmp_path / "g", files=files, check_pairs=False)
    found = local.pairs_at_chance(full.images, full.captions, full.caption_to_image)
    assert found is not None and found[0] > 0
    expected = (f"{tmp_path / 'g'}: its captions find their own image first for {100 * found[0]:.1f}% of them, at "
                f"chance level ({100 * found[1]:.2f}% for random pairs): the captions are not paired with the right "
                "images. Common causes: image rows in another order than metadata.csv's image_id (with one row per "
                "image and no images.csv naming the rows, row i is the i-th distinct image_id in order of first "
                "appearance), rows shuffled in one file only, or files of different exports. Fix the order or add "
                "images.csv (an image_id column, row i = image row i); a folder at chance on purpose (a random-init "
                "control) loads with check_pairs=False (--source-option check_pairs=false)")
    with pytest.raises(ValueError) as e:
        read_local(tmp_path / "g", files=files)
    assert str(e.value) == expected


def test_pairs_at_chance_reads_every_caption_up_to_the_sample_size_then_a_seeded_sample(monkeypatch):
    """20 images are judged (fewer are not); up to PAIR_CHECK_CAPTIONS captions all are read, beyond it a sample
    of that size drawn without replacement by default_rng(0): the R@1 returned is the sample's."""
    img, txt, c2i = _paired(n_img=20, per=3)
    wrong = np.roll(c2i, 3)
    wrong[::7] = c2i[::7]                        # 9 of 60 right: at chance, and a sample's R@1 depends on its rows
    r1, chance = local.pairs_at_chance(img, txt, wrong)
    top1 = np.argmax(txt @ img.T, axis=1)
    assert r1 == pytest.approx(np.mean(top1 == wrong)) and chance == pytest.approx(1 / 20)
    monkeypatch.setattr(local, "PAIR_CHECK_CAPTIONS", 60)                   # exactly the captions: all of them
    assert local.pairs_at_chance(img, txt, wrong)[0] == pytest.approx(np.mean(top1 == wrong))
    monkeypatch.setattr(local, "PAIR_CHECK_CAPTIONS", 25)
    rows = np.sort(np.random.default_rng(0).choice(np.arange(60), 25, replace=False))
    assert local.pairs_at_chance(img, txt, wrong)[0] == pytest.approx(np.mean(top1[rows] == wrong[rows]))
    others = [np.mean(top1[r] == wrong[r]) for r in (np.sort(np.random.default_rng(1).choice(60, 25, replace=False)),
                                                     np.sort(np.random.default_rng(0).choice(60, 25, replace=True)))]
    assert all(o != np.mean(top1[rows] == wrong[rows]) for o in others)   # the seed and the rule are what is read


def test_an_all_zero_image_row_is_named_by_its_image(tmp_path):
    img, txt, c2i = _paired()
    zero = img.copy()
    zero[3] = 0
    with pytest.raises(ValueError, match=r"g: the image embeddings have 1 all-zero row\(s\) \(the first is image 3 in "
                                         r"the folder's order\): an embedding of nothing"):
        read_local(tmp_path / "g", files={"features_clip.npy": _npy(np.stack([zero[c2i], txt]))})
    files = {"image_embeddings.npy": _npy(zero), "text_embeddings.npy": _npy(txt),
             "metadata.csv": _csv(["image_id"], [(f"img{i}",) for i in c2i])}
    with pytest.raises(ValueError, match=r"f: the image embeddings have 1 all-zero row\(s\) \(the first is image 3, "
                                         r"image_id 'img3'\): an embedding of nothing"):
        read_local(tmp_path / "f", files=files)


def test_empty_embedding_files_are_named(tmp_path):
    x, txt, _, _ = _percap()
    for name in ("image_embeddings.npy", "text_embeddings.npy"):
        files = {"image_embeddings.npy": _npy(x), "text_embeddings.npy": _npy(txt), name: _npy(np.zeros((0, 4)))}
        with pytest.raises(ValueError, match=rf"{name} holds no embeddings \(shape \(0, 4\)\): export them again$"):
            local._per_caption(tmp_path, files)


def test_rows_are_made_unit_when_they_are_not_and_kept_when_they_are(tmp_path):
    img, txt, c2i = _paired()
    files = {"image_embeddings.npy": _npy(img), "text_embeddings.npy": _npy(3.0 * txt),
             "metadata.csv": _csv(["image_id"], [(f"i{i}",) for i in c2i])}
    full, _, meta = read_local(tmp_path / "f", files=files)
    assert np.array_equal(full.images, img)                      # unit already: the same bits
    np.testing.assert_allclose(full.captions, txt, atol=1e-7)
    assert meta["normalised"] == ["text embeddings"]
    full, _, meta = read_local(tmp_path / "f", files={**files, "image_embeddings.npy": _npy(0.5 * img)})
    np.testing.assert_allclose(full.images, img, atol=1e-7)
    assert meta["normalised"] == ["image embeddings", "text embeddings"]
    files["text_embeddings.npy"] = _npy(txt)
    assert "normalised" not in read_local(tmp_path / "f", files=files)[2]
    zero = txt.copy()
    zero[4] = 0
    files["text_embeddings.npy"] = _npy(zero)
    with pytest.raises(ValueError, match=r"f: the text embeddings have 1 all-zero row\(s\) \(the first is row 4\): an "
                                         r"embedding of nothing has no direction; drop those rows \(and their pairs\)$"):
        read_local(tmp_path / "f", files=files)
