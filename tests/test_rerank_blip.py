"""BLIP ITM backend end to end with a tiny random-init config and an offline processor (no downloads)."""

import numpy as np
import pytest

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
from PIL import Image, ImageDraw  # noqa: E402

import hubnorm as hn  # noqa: E402
from hubnorm.rerank import CacheCorruptError, rerank  # noqa: E402
from hubnorm.rerank.blip import BlipITMCrossEncoder, offline_processor, small_blip_config  # noqa: E402

COLOURS = {"red": (220, 30, 30), "green": (30, 180, 60), "blue": (40, 60, 220), "yellow": (230, 210, 40)}
SHAPES = ("circle", "square")


def drawn_images():
    images, captions, c2i = [], [], []
    for ci, (name, rgb) in enumerate(COLOURS.items()):
        for si, shape in enumerate(SHAPES):
            im = Image.new("RGB", (48, 40), (250, 250, 250))
            d = ImageDraw.Draw(im)
            box = (8 + 4 * ci, 6 + 3 * si, 36, 32)
            (d.ellipse if shape == "circle" else d.rectangle)(box, fill=rgb)
            images.append(im)
            i = len(images) - 1
            captions += [f"a {name} {shape} on white", f"one {shape} that is {name}"]
            c2i += [i, i]
    return images, captions, np.array(c2i)


@pytest.fixture(scope="module")
def setup():
    images, captions, c2i = drawn_images()
    proc = offline_processor(image_size=32)
    cfg = small_blip_config(vocab_size=len(proc.tokenizer), image_size=32)
    return images, captions, c2i, proc, cfg


def make_ce(setup, tmp_path=None, direction="t2i", batch_size=5):
    images, captions, _, proc, cfg = setup
    return BlipITMCrossEncoder.from_config(images, captions, cfg, seed=0, processor=proc, direction=direction,
                                           batch_size=batch_size, device="cpu", progress=False, cache_dir=tmp_path)


def test_scores_match_the_hf_forward(setup):
    images, captions, c2i, proc, _ = setup
    ce = make_ce(setup)
    q = np.array([0, 3, 5, 9, 2])
    t = np.array([1, 1, 7, 0, 1])
    s = ce.score_pairs(q, t)
    assert s.shape == (5,) and np.all((s > 0) & (s < 1))
    inputs = proc(images=[images[j] for j in t], text=[captions[i] for i in q], return_tensors="pt",
                  padding="longest")
    with torch.no_grad():
        ref = torch.softmax(ce.model(**inputs, use_itm_head=True).itm_score, -1)[:, 1].numpy()
    assert np.allclose(s, ref, atol=1e-5)
    # batch size and pair order never change a score
    ce2 = make_ce(setup, batch_size=2)
    assert np.allclose(ce2.score_pairs(q[::-1], t[::-1])[::-1], s, atol=1e-6)
    # the same seed gives the same weights, another seed other scores and another model id
    other = BlipITMCrossEncoder.from_config(images, captions, setup[4], seed=1, processor=proc, progress=False)
    assert other.model_id != ce.model_id and not np.allclose(other.score_pairs(q, t), s)


@pytest.mark.parametrize("direction", ["t2i", "i2t"])
def test_end_to_end_rerank_with_cache(setup, tmp_path, direction):
    images, captions, c2i, _, _ = setup
    rng = np.random.default_rng(0)
    img_emb = hn.l2_normalize(rng.standard_normal((len(images), 8)).astype(np.float32))
    cap_emb = hn.l2_normalize(img_emb[c2i] + 0.8 * rng.standard_normal((len(captions), 8)).astype(np.float32))
    task = hn.build_tasks(img_emb, cap_emb, c2i)[direction]
    k = 4
    ce = make_ce(setup, tmp_path, direction)
    res = rerank(task.fit(hn.make_normalizer("raw")), task, ce, k=k)
    assert res.pairs_scored == task.n_queries * k
    assert ce.n_model_calls == 1 and ce.n_pairs_computed == task.n_queries * k
    assert res.ce_seconds > 0 and np.isfinite(res.seconds_per_pair)
    summary = hn.summarize_ranks(res.ranks)
    assert 0 <= summary["R@1"] <= summary["R@5"] <= 100
    # top-k scores are the ITM probabilities of the candidate pairs
    direct = ce.itm_scores(*((res.candidates[0], np.repeat(0, k)) if direction == "t2i"
                             else (np.repeat(0, k), res.candidates[0])))
    assert np.allclose(res.ce_scores[0], direct, atol=1e-6)
    # rerun with a fresh encoder on the same cache: no model call, identical result
    ce2 = make_ce(setup, tmp_path, direction)
    res2 = rerank(task.fit(hn.make_normalizer("raw")), task, ce2, k=k)
    assert ce2.n_model_calls == 0 and ce2.n_pairs_computed == 0
    assert np.array_equal(res2.ranks, res.ranks) and np.array_equal(res2.ce_scores, res.ce_scores)
    # a larger k only computes the new pairs
    ce2.score_pairs(np.repeat(np.arange(task.n_queries), k + 1), rerank(
        task.queries @ task.targets.T, task, ce2, k=k + 1).candidates.reshape(-1))
    assert ce2.n_pairs_computed == task.n_queries


def test_corrupt_cache_is_detected(setup, tmp_path):
    ce = make_ce(setup, tmp_path)
    ce.score_pairs([0, 1], [0, 1])
    path = ce.cache.path
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x55
    path.write_bytes(bytes(data))
    with pytest.raises(CacheCorruptError, match="delete it"):
        make_ce(setup, tmp_path)


def test_constructor_checks(setup):
    images, captions, _, proc, cfg = setup
    with pytest.raises(ValueError, match="direction"):
        BlipITMCrossEncoder.from_config(images, captions, cfg, processor=proc, direction="x2y")
    with pytest.raises(ValueError, match="vocab_size"):
        BlipITMCrossEncoder.from_config(images, captions, small_blip_config(vocab_size=10), processor=proc)
    with pytest.raises(TypeError):
        BlipITMCrossEncoder.from_config(images, [1, 2], cfg, processor=proc)
