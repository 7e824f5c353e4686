"""load_local_embeddings on the real embedding folders (skipped when absent) and on small hand-made folders."""

import csv

import numpy as np
import pytest

import hubnorm as hn
from conftest import shared_path, unit_rows
from hubnorm.data import load_local_embeddings

F8K = ("embeddings", "flickr8k-100x5-clip-vitb32")
COCO500 = ("embeddings", "coco-val2017-500-clip-vitb16")


@pytest.mark.shared_data
def test_flickr8k_folder_split_by_images_with_texts():
    folder = shared_path(*F8K)
    ds = hn.load_embeddings(f"local:{folder}")
    assert ds.source == "real" and set(ds.splits) == {"test", "val", "train"}
    test, train, val = ds.split("test"), ds.split("train"), ds.split("val")
    # val by the one rule (hubnorm.embeddings.validation_size): train 50 < 2 x test 50, so a third of train
    assert (test.n_images, test.n_captions, val.n_images, train.n_images, train.n_captions) == (50, 250, 16, 34, 170)
    assert not set(test.image_ids) & set(train.image_ids) and not set(val.image_ids) & set(train.image_ids)
    assert set(load_local_embeddings(folder, val=False).splits) == {"test", "train"}
    assert len(test.caption_texts) == 250 and isinstance(test.caption_texts[0], str)
    # distinct image embeddings = image_embeddings[::5]
    img = np.load(folder / "image_embeddings.npy")
    rows = {tuple(r) for r in img[::5].round(5)}
    assert all(tuple(r) in rows for r in test.images.round(5))
    # real CLIP: the paired image wins most of the time (README: R@1 0.832 over 100 images)
    task = ds.tasks("test", bank="train")["t2i"]
    res = hn.evaluate(task.fit(hn.make_normalizer("nnn", k=8)), task)
    assert res["R@1"] > 70
    # seeded and reproducible; another seed gives another split
    again = load_local_embeddings(folder)
    assert again.split("test").image_ids == test.image_ids
    assert load_local_embeddings(folder, seed=1).split("test").image_ids != test.image_ids
    assert load_local_embeddings(folder, test_fraction=0.2).split("test").n_images == 20


@pytest.mark.shared_data
def test_coco500_folder_and_random_control():
    folder = shared_path(*COCO500)
    ds = load_local_embeddings(folder)
    assert (ds.split("test").n_images, ds.split("test").n_captions, ds.split("val").n_images,
            ds.split("train").n_images) == (250, 250, 83, 167)
    assert ds.split("test").caption_texts is None
    task = ds.tasks("test", bank=None)["t2i"]
    real = hn.evaluate(task.fit(hn.make_normalizer("raw")), task)
    with pytest.raises(ValueError, match=r"features_clip_random.npy: its captions find their own image first for "
                                         r"0.2% of them, at chance level \(0.20% for random pairs\)"):
        load_local_embeddings(folder / "features_clip_random.npy")
    ctrl = load_local_embeddings(folder / "features_clip_random.npy", check_pairs=False)   # at chance on purpose
    assert ctrl.name.endswith("features_clip_random")
    t2 = ctrl.tasks("test", bank=None)["t2i"]
    rand = hn.evaluate(t2.fit(hn.make_normalizer("raw")), t2)
    assert real["R@1"] > 40 > 10 > rand["R@1"]


def _per_caption_folder(tmp_path, n_img=4, per=3, n_meta=None, d=8):
    rng = np.random.default_rng(0)
    imgs = unit_rows(rng, n_img, d)
    np.save(tmp_path / "image_embeddings.npy", np.repeat(imgs, per, axis=0))
    np.save(tmp_path / "text_embeddings.npy", unit_rows(rng, n_img * per, d))
    n_meta = n_img * per if n_meta is None else n_meta
    with open(tmp_path / "metadata.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["image_id", "image_path", "caption"])
        for j in range(n_meta):
            w.writerow([f"img{j // per}", f"x/img{j // per}.jpg", f"caption {j}"])
    return imgs


def test_mismatched_counts_raise(tmp_path):
    _per_caption_folder(tmp_path, n_meta=11)
    with pytest.raises(ValueError, match="metadata.csv has 11 rows but text_embeddings.npy has 12"):
        load_local_embeddings(tmp_path)
    _per_caption_folder(tmp_path)
    np.save(tmp_path / "image_embeddings.npy", np.zeros((5, 8), np.float32))
    with pytest.raises(ValueError, match="image_embeddings.npy has 5 rows"):
        load_local_embeddings(tmp_path)
    np.save(tmp_path / "features_clip.npy", np.zeros((3, 4, 8), np.float32))
    with pytest.raises(ValueError, match=r"expected a float array of shape \(2, n, d\)"):
        load_local_embeddings(tmp_path / "features_clip.npy")


def test_per_caption_layout_and_per_image_rows(tmp_path):
    imgs = _per_caption_folder(tmp_path)
    ds = load_local_embeddings(tmp_path, test_fraction=0.5, seed=3)
    sp = ds.split("test")
    assert sp.n_images == 2 and sp.n_captions == 6
    assert np.bincount(sp.caption_to_image).tolist() == [3, 3]
    assert all(t.startswith("caption") for t in sp.caption_texts)
    # one image row per image is also accepted
    np.save(tmp_path / "image_embeddings.npy", imgs)
    assert load_local_embeddings(tmp_path, val=False).split("train").n_images == 2
    # no metadata: runs of equal image rows define the images
    (tmp_path / "metadata.csv").unlink()
    np.save(tmp_path / "image_embeddings.npy", np.repeat(imgs, 3, axis=0))
    assert load_local_embeddings(tmp_path).split("test").n_captions == 6
    with pytest.raises(ValueError, match="test_fraction"):
        load_local_embeddings(tmp_path, test_fraction=1.0)
    with pytest.raises(FileNotFoundError):
        load_local_embeddings(tmp_path / "nope")


@pytest.mark.parametrize("name", ["text_embeddings.npy", "metadata.csv"])
def test_a_named_pipe_is_refused_not_read(tmp_path, name):
    """Issue 44: a file that is a named pipe made load_embeddings("local:...") wait forever for a writer."""
    import os
    _per_caption_folder(tmp_path)
    (tmp_path / name).unlink()
    os.mkfifo(tmp_path / name)
    with pytest.raises(ValueError, match=f"{name} is not a regular file"):
        load_local_embeddings(tmp_path)
