"""Tests of the synthetic dataset generator (hubnorm.synthetic). Small sizes: the whole file runs in seconds."""

import hashlib

import numpy as np
import pytest

import hubnorm as hn
from hubnorm.synthetic import GeneratorConfig, PRESETS, generate_split, geometry_stats, make_dataset, topic_relevance

SMALL = dict(n_train_images=300, n_test_images=200)


def digest(ds):
    h = hashlib.sha256()
    for name in sorted(ds.splits):
        s = ds.splits[name]
        for arr in (s.images, s.captions, s.caption_to_image, *(s.extras[k] for k in sorted(s.extras))):
            h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def small():
    return make_dataset("flickr30k", seed=0, **SMALL)


def test_same_seed_same_bytes_different_seed_different(small):
    assert digest(small) == digest(make_dataset("flickr30k", seed=0, **SMALL))
    assert digest(small) != digest(make_dataset("flickr30k", seed=1, **SMALL))


def test_splits_shapes_labels_and_provenance(small):
    assert small.name == "synthetic-flickr30k" and small.source == "synthetic"
    assert small.meta["synthetic"] is True and small.meta["config"]["n_test_images"] == 200
    assert set(small.splits) == {"train", "val", "test"}
    for name, n in (("train", 300), ("val", 200), ("test", 200)):
        s = small.split(name)
        assert s.images.shape == (n, 512) and s.captions.shape == (5 * n, 512)
        assert s.images.dtype == np.float32 and s.captions.dtype == np.float32
        np.testing.assert_array_equal(s.caption_to_image, np.arange(5 * n) // 5)
        assert np.all(np.bincount(s.caption_to_image) == 5)
        assert s.extras["topic"].shape == (n,) and s.extras["caption_topic"].shape == (5 * n,)
        np.testing.assert_array_equal(s.extras["caption_topic"], s.extras["topic"][s.caption_to_image])
        assert s.extras["topic"].max() < PRESETS["flickr30k"].n_topics


def test_unit_norm_and_finite(small):
    for s in small.splits.values():
        for x in (s.images, s.captions):
            assert np.all(np.isfinite(x))
            np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)


def test_modality_gap_and_pair_geometry(small):
    s = small.split("test")
    g = geometry_stats(s.images, s.captions, s.caption_to_image)
    assert g["modality_gap"] > 0.5            # CLIP-like: the clouds sit far apart (real ViT-B/32: 0.84)
    assert g["matched_cos"] > g["unmatched_cos"] + 0.05
    # exact formula against the brute force mean
    sims = s.captions @ s.images.T
    mask = s.caption_to_image[:, None] == np.arange(s.n_images)[None, :]
    assert g["unmatched_cos"] == pytest.approx(float(sims[~mask].mean()), abs=1e-5)
    # image-image and caption-caption similarities are higher than cross-modal ones (the gap)
    assert (s.images @ s.images.T).mean() > sims.mean() + 0.2


def test_sizes_dim_and_overrides():
    ds = make_dataset("coco", n_train_images=0, n_test_images=50, dim=128, n_val_images=20, captions_per_image=3)
    assert set(ds.splits) == {"val", "test"} and ds.name == "synthetic-coco"
    assert ds.split("test").captions.shape == (150, 128) and ds.split("val").n_images == 20
    assert ds.meta["config"]["dim"] == 128
    # val defaults to the test size when n_test_images is given
    assert make_dataset("coco", n_train_images=0, n_test_images=30).split("val").n_images == 30


def test_chunked_generation_equals_unchunked():
    a = make_dataset("flickr30k", n_train_images=700, n_test_images=100, chunk_size=256)
    b = make_dataset("flickr30k", n_train_images=700, n_test_images=100, chunk_size=100_000)
    c = make_dataset("flickr30k", n_train_images=700, n_test_images=100)
    assert digest(a) == digest(b) == digest(c)


def test_a_split_does_not_depend_on_the_other_split_sizes():
    a = make_dataset("flickr30k", n_train_images=100, n_test_images=60)
    b = make_dataset("flickr30k", n_train_images=400, n_test_images=60)
    np.testing.assert_array_equal(a.split("test").captions, b.split("test").captions)
    np.testing.assert_array_equal(a.split("val").images, b.split("val").images)


@pytest.mark.parametrize("kwargs, match", [
    (dict(preset="imagenet"), r"unknown synthetic preset 'imagenet'; valid presets: \['audiocaps-clap', 'coco', 'coco-isotropic', 'flickr30k', 'flickr30k-isotropic'\]"),
    (dict(n_train_images=-1), "n_train_images must be an integer >= 0"),
    (dict(n_test_images=0), "n_test_images must be an integer >= 1"),
    (dict(n_test_images=2.5), "n_test_images must be an integer"),
    (dict(dim=0), "dim must be an integer >= 1"),
    (dict(dim=16), "latent_dim \\+ 2 must be <= dim"),
    (dict(seed=-3), "seed must be a non-negative integer"),
    (dict(chunk_size=0), "chunk_size must be an integer >= 1"),
    (dict(topic_weight=1.5), "topic_weight must be in"),
    (dict(caption_noise=-1.0), "caption_noise must be a finite number >= 0"),
    (dict(caption_shared=1.2), r"caption_shared must be in \[0, 1\]"),
    (dict(n_val_images=-5), "n_val_images must be a non-negative integer"),
    (dict(colour="red"), r"unknown generator option\(s\) \['colour'\]"),
])
def test_bad_arguments_rejected(kwargs, match):
    kwargs = {"preset": "flickr30k", "n_train_images": 10, "n_test_images": 10, **kwargs}
    with pytest.raises(ValueError, match=match):
        make_dataset(**kwargs)


def test_load_embeddings_routes_to_the_generator():
    ds = hn.load_embeddings("synthetic:flickr30k", **SMALL)
    assert ds.source == "synthetic" and ds.name == "synthetic-flickr30k"
    with pytest.raises(ValueError, match="valid presets"):
        hn.load_embeddings("synthetic:nope")


def test_relevance_properties(small):
    s = small.split("test")
    rel = topic_relevance(s, "t2i")
    assert rel.shape == (s.n_captions, s.n_images) and rel.dtype == np.float32
    assert rel.min() >= 0 and rel.max() <= 1
    np.testing.assert_array_equal(rel[np.arange(s.n_captions), s.caption_to_image], 1.0)
    assert np.all(rel.sum(axis=1) > 1)            # graded: more than the ground truth is relevant
    rel_i2t = topic_relevance(s, "i2t")
    np.testing.assert_allclose(rel_i2t, rel.T, atol=1e-6)
    # same-topic pairs are more relevant than cross-topic pairs
    same = s.extras["caption_topic"][:, None] == s.extras["topic"][None, :]
    gt = s.caption_to_image[:, None] == np.arange(s.n_images)[None, :]
    assert rel[same & ~gt].mean() > rel[~same].mean() + 0.1
    top = topic_relevance(s, "t2i", kind="topic", same_topic=0.4, queries=[0, 7], targets=np.arange(50))
    assert top.shape == (2, 50) and np.all(np.isin(top, np.float32([0.0, 0.4, 1.0]))) and top[0, 0] == 1 and top[1, 1] == 1
    with pytest.raises(ValueError, match="direction"):
        topic_relevance(s, "x2y")
    with pytest.raises(ValueError, match="kind"):
        topic_relevance(s, kind="bm25")


def test_relevance_survives_subset_images(small):
    sub = small.split("test").subset_images(np.arange(10, 30))
    rel = topic_relevance(sub, "t2i")
    assert rel.shape == (100, 20)
    np.testing.assert_array_equal(rel[np.arange(100), sub.caption_to_image], 1.0)


def test_config_validation():
    assert PRESETS["coco"].n_test_images == 5000 and PRESETS["flickr30k"].n_test_images == 1000
    with pytest.raises(ValueError, match="latent_dim must be a positive integer"):
        GeneratorConfig(latent_dim=0)
    cfg = PRESETS["coco"].replace(hub_scale=0.0)
    assert cfg.hub_scale == 0.0 and cfg.to_dict()["name"] == "coco"


def test_nnn_and_query_aware_sinkhorn_beat_raw_at_small_scale():
    """Qualitative calibration: hubs a bank reveals exist, so NNN (train caption bank) and query-aware SN help."""
    ds = make_dataset("flickr30k", seed=0, n_train_images=1000, n_test_images=500)
    t2i = ds.tasks("test", "train", directions=("t2i",))["t2i"]
    raw = hn.evaluate(t2i.fit(hn.Identity()), t2i)["R@1"]
    nnn = hn.evaluate(t2i.fit(hn.NearestNeighborNormalization(alpha=0.75, k=16)), t2i)["R@1"]
    sn = hn.evaluate(t2i.fit(hn.SinkhornNormalization(tau=0.01, n_iter=10), query_aware=True), t2i)["R@1"]
    assert nnn > raw + 1.5
    assert sn > raw + 1.5
    skew_raw = hn.hubness(t2i.fit(hn.Identity()), k=10, queries=t2i.queries)["skewness"]
    skew_nnn = hn.hubness(t2i.fit(hn.NearestNeighborNormalization(alpha=0.75, k=16)), k=10, queries=t2i.queries)["skewness"]
    assert skew_raw > 1.0 and skew_nnn < skew_raw


def _raw_r1(ds):
    tasks = ds.tasks("test", None)
    return {d: hn.evaluate(tasks[d].fit(hn.Identity()), tasks[d])["R@1"] for d in ("t2i", "i2t")}


def test_shared_caption_error_lowers_i2t_only():
    """caption_shared keeps each caption's marginal distribution, so t2i R@1 moves only by sampling noise (a 2-point
    regression band at 400 images) while i2t falls (the image's captions fail together): the model's claim."""
    base = dict(n_train_images=0, n_test_images=400, seed=3)
    indep = _raw_r1(make_dataset("flickr30k", caption_shared=0.0, **base))
    shared = _raw_r1(make_dataset("flickr30k", caption_shared=0.9, **base))
    assert abs(shared["t2i"] - indep["t2i"]) < 2.0
    assert shared["i2t"] < indep["i2t"] - 8.0


def test_caption_shared_zero_is_the_independent_model():
    """With caption_shared = 0 the shared draw enters with weight 0: changing only the (unused) shared stream's
    weight from 0 to a tiny value changes the captions by a tiny amount, never the images."""
    a = make_dataset("flickr30k", n_train_images=0, n_test_images=40, caption_shared=0.0).split("test")
    b = make_dataset("flickr30k", n_train_images=0, n_test_images=40, caption_shared=1e-6).split("test")
    np.testing.assert_array_equal(a.images, b.images)
    assert 0 < np.abs(a.captions - b.captions).max() < 1e-2


#: sha256 of the train/val/test images and captions of make_dataset(preset, seed=0, n_train_images=300,
#: n_test_images=40), written by the generator before the clustered model existed (commit 3a6176e)
ISOTROPIC_BYTES = {
    "flickr30k-isotropic": "c85d984c0dd2c361dbf5d3b0d4dfd27876507121dedc1404bf21141e09fe0508",
    "coco-isotropic": "4b952dd8617c2aeb4bfce91d5e098e8b19c861b5315f802f249354eaf63458f5",
}


@pytest.mark.parametrize("preset", sorted(ISOTROPIC_BYTES))
def test_the_earlier_presets_are_kept_byte_for_byte(preset):
    import hashlib

    ds = make_dataset(preset, seed=0, n_train_images=300, n_test_images=40)
    h = hashlib.sha256()
    for split in ("train", "val", "test"):
        s = ds.split(split)
        h.update(s.images.tobytes())
        h.update(s.captions.tobytes())
    assert h.hexdigest() == ISOTROPIC_BYTES[preset]


def test_clustered_model_validation():
    with pytest.raises(ValueError, match="model must be one of"):
        GeneratorConfig(model="gaussian")
    with pytest.raises(ValueError, match="image_style_share must be in"):
        GeneratorConfig(image_style_share=1.5)
    with pytest.raises(ValueError, match="topic_spread must be a finite number >= 0"):
        GeneratorConfig(topic_spread=-1.0)
    with pytest.raises(ValueError, match="n_styles must be a positive integer"):
        GeneratorConfig(n_styles=0)


@pytest.mark.xfail(strict=True, reason="issue 42's headroom refit of flickr30k (image_noise_sigma 0.545 -> 0.360) moved "
                   "the full-size raw R@1 to t2i 64.7 / i2t 74.0, 5.9 / 5.3 points off the published 58.82 / 79.3: "
                   "a refit that keeps both the headroom and the raw-R@1 bands is open (strict: passes again -> "
                   "remove this mark)")
def test_presets_match_published_raw_r1_in_both_directions():
    """Paper bands (issue 13): raw R@1 of the Flickr30k preset's full 1k test split within 3 points of zero-shot CLIP
    ViT-B/32, t2i 58.82 (NNN Table 1) and i2t 79.3 (NNN Table 2). The COCO preset (5k test) is checked by
    scripts/calibrate_synthetic.py (data/calibration_synthetic.md): too slow for a unit test."""
    r = _raw_r1(make_dataset("flickr30k", seed=0, n_train_images=0))
    assert abs(r["t2i"] - 58.82) <= 3.0, r
    assert abs(r["i2t"] - 79.3) <= 3.0, r


def test_nnn_helps_image_to_text_at_small_scale():
    """Regression check (threshold set after seeing +2.8 points at full scale): caption-side hubs a bank of train
    images reveals exist, so NNN improves i2t R@1 (published Flickr30k gain +1.9, NNN Table 2)."""
    ds = make_dataset("flickr30k", seed=0, n_train_images=2000, n_test_images=500)
    i2t = ds.tasks("test", "train", directions=("i2t",))["i2t"]
    raw = hn.evaluate(i2t.fit(hn.Identity()), i2t)["R@1"]
    nnn = hn.evaluate(i2t.fit(hn.NearestNeighborNormalization(alpha=0.5, k=16)), i2t)["R@1"]
    assert nnn > raw + 0.5


def test_caption_semantic_sigma_makes_specific_and_generic_captions():
    """A caption whose semantic part is longer is closer to its image and, after normalisation, further from the
    other images; a shorter one the reverse: with the semantic length free of the error (caption_error_norm = 1),
    caption_semantic_sigma spreads the captions' mean cosine to the other images and makes it fall as their cosine to
    their own image rises (cap_match_rho goes down). Default 0: the preset's bytes."""
    from hubnorm.geometry import embedding_statistics

    base = PRESETS["flickr30k"].replace(captions_per_image=1, caption_error_norm=1.0)
    stats = {}
    for sigma in (0.0, 0.6):
        s = generate_split(base.replace(caption_semantic_sigma=sigma), "test", 300, seed=3)
        stats[sigma] = embedding_statistics(s.images, s.captions, s.caption_to_image)
    # regression check of the direction (seen on this seed: rho -0.19 -> -0.42, sd 0.009 -> 0.033; margins set after)
    assert stats[0.6]["cap_match_rho"] < stats[0.0]["cap_match_rho"] - 0.1
    assert stats[0.6]["cap_centrality_sd"] > 1.5 * stats[0.0]["cap_centrality_sd"]
    plain = generate_split(PRESETS["flickr30k"], "test", 20, seed=3)   # 0 keeps the bytes: the float64 reference test
    moved = generate_split(PRESETS["flickr30k"].replace(caption_semantic_sigma=0.3), "test", 20, seed=3)
    np.testing.assert_array_equal(plain.images, moved.images)   # its own stream: the images keep their bytes
    assert not np.array_equal(plain.captions, moved.captions)
