"""Encoder families, offline: BLIP ITC (transformers, random init) against the model's own forward, a SigLIP-shaped
open_clip test architecture, CLI encode with each family into a temp cache and reading it back, the family in the
cache key (old keys = open_clip), and the published-model mapping."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import hubnorm as hn
from hubnorm.data import cache as cache_mod
from hubnorm.data import load_cached_embeddings, published_model_name
from hubnorm.data.cli import main
from hubnorm.data.encoders import OpenClipEncoder, check_family, get_encoder, infer_family
from hubnorm.data.encoders.blip import BLIP_TINY, BlipItcEncoder, resolve_blip_model
from test_data_pipeline import StubEncoder, make_tiny_coco

REPO = Path(__file__).resolve().parents[1]
TINY_SIGLIP = "hubnorm-tiny-sigmoid"


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def blip():
    return BlipItcEncoder(BLIP_TINY, "none", device="cpu", batch_size=2, progress=False)


@pytest.mark.parametrize("model, family", [
    ("blip-itm-base-coco", "blip"), ("Salesforce/blip-itm-base-flickr", "blip"), (BLIP_TINY, "blip"),
    ("ViT-B-32-quickgelu", "open_clip"), ("ViT-B-16-SigLIP", "open_clip"), ("hf-hub:timm/ViT-B-16-SigLIP", "open_clip"),
    (TINY_SIGLIP, "open_clip"),
])
def test_family_inferred_from_the_model_name(model, family):
    assert infer_family(model) == family
    assert check_family(None, model) == family


def test_family_of_a_local_blip_folder_and_bad_families(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "blip"}))
    assert infer_family(str(tmp_path)) == "blip"
    with pytest.raises(ValueError, match="encoder family must be one of"):
        check_family("albef", "x")
    with pytest.raises(TypeError, match="model must be a non-empty string"):
        infer_family("")
    with pytest.raises(ValueError, match="BLIP pretrained must be 'hf'"):
        BlipItcEncoder("blip-itm-base-coco", "openai")
    with pytest.raises(ValueError, match="random-init test architecture"):
        BlipItcEncoder(BLIP_TINY, "hf")
    with pytest.raises(ValueError, match="needs its config"):
        BlipItcEncoder("blip-itm-large-coco", "none", device="cpu").build()
    assert isinstance(get_encoder("blip-itm-base-coco", "hf"), BlipItcEncoder)
    assert isinstance(get_encoder("blip-itm-base-coco", "none", family="open_clip"), OpenClipEncoder)
    assert resolve_blip_model("blip-itm-base-coco") == "Salesforce/blip-itm-base-coco"


def _images(tmp_path, n=5):
    from PIL import Image
    paths = []
    for i in range(n):
        im = Image.new("RGB", (40 + 7 * i, 52), (30 * i, 200 - 25 * i, 90 + 20 * i))
        im.paste((255, 255, 255), (5, 5, 15 + 3 * i, 20))
        paths.append(tmp_path / f"im{i}.png")
        im.save(paths[-1])
    return paths


def test_blip_itc_equals_the_model_forward_without_itm_head(blip, tmp_path):
    """Oracle: BlipForImageTextRetrieval(..., use_itm_head=False).itm_score (transformers' own ITC similarity),
    all captions padded together in one batch; ours: batches of 2 (other padding lengths). Equal to 1e-5."""
    from PIL import Image
    paths = _images(tmp_path)
    texts = ["a red circle", "two dogs playing on the beach near the water", "blue", "a man riding a bike down "
             "the street", "an old woman holding a small black cat"]
    img, txt = blip.encode_images(paths), blip.encode_texts(texts)
    assert img.shape == (5, 16) and txt.shape == (5, 16) and img.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(img, axis=1), 1, atol=1e-6)
    pil = [Image.open(p).convert("RGB") for p in paths]
    tok = blip.processor.tokenizer(texts, padding="longest", truncation=True, max_length=35, return_tensors="pt")
    px = blip.processor.image_processor(images=pil, return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        ref = blip.model(input_ids=tok["input_ids"], attention_mask=tok["attention_mask"], pixel_values=px,
                         use_itm_head=False).itm_score.numpy()
    assert ref.shape == (5, 5)
    np.testing.assert_allclose(img @ txt.T, ref, atol=1e-5)
    assert np.abs(ref).max() > 1e-3  # not a degenerate all-zero comparison
    # seeded random init: a second encoder (one batch: other padding, hence float noise) gives the same embeddings
    again = BlipItcEncoder(BLIP_TINY, "none", device="cpu", progress=False).encode_texts(texts)
    np.testing.assert_allclose(again, txt, atol=1e-6)
    other_seed = BlipItcEncoder(BLIP_TINY, "none", device="cpu", progress=False, seed=1).encode_texts(texts)
    assert np.abs(other_seed - txt).max() > 1e-2


def test_siglip_shaped_open_clip_test_architecture(tmp_path):
    """The shipped tiny config builds offline with SigLIP's structure (CustomTextCLIP, logit bias, MAP pooling) and
    the encoder returns normalised model.encode_image / encode_text outputs; the real SigLIP names are known to
    open_clip."""
    import open_clip
    enc = OpenClipEncoder(TINY_SIGLIP, None, device="cpu", batch_size=2, progress=False)
    model = enc.model
    assert type(model).__name__ == "CustomTextCLIP" and getattr(model, "logit_bias", None) is not None
    assert "ViT-B-16-SigLIP" in open_clip.list_models() and "webli" in open_clip.list_pretrained_tags_by_model(
        "ViT-B-16-SigLIP")
    paths = _images(tmp_path, 3)
    img = enc.encode_images(paths)
    txt = enc.encode_texts(["a red circle", "blue", "a green square on white"])
    assert img.shape == (3, 192) and txt.shape == (3, 192)
    with torch.no_grad():
        from PIL import Image
        px = torch.stack([enc._preprocess(Image.open(p).convert("RGB")) for p in paths])
        ref = torch.nn.functional.normalize(model.encode_image(px), dim=-1).numpy()
    np.testing.assert_allclose(img, ref, atol=1e-6)


@pytest.mark.parametrize("model, pretrained, family, dim", [
    (BLIP_TINY, "none", "blip", 16),
    (TINY_SIGLIP, "none", "open_clip", 192),
])
def test_cli_encodes_with_each_family_and_the_cache_reads_back(tmp_path, capsys, model, pretrained, family, dim):
    data = make_tiny_coco(tmp_path / "data")
    cache = tmp_path / "cache"
    common = ["--data-dir", str(data), "--cache-dir", str(cache)]
    argv = ["encode", "coco", "--model", model, "--pretrained", pretrained, "--split", "test,train",
            "--batch-size", "4", "--device", "cpu", "--no-progress"] + common
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"coco test: 6 images, 31 captions, dim {dim}" in out
    assert f'load with: hubnorm.load_embeddings("cache:coco:{model}:{pretrained}"' in out
    man = json.loads((cache_mod.entry_dir("coco", model, pretrained, "test", cache) / "manifest.json").read_text())
    assert man["key"]["encoder_family"] == family
    assert ("transformers" in man["key"]["versions"]) == (family == "blip")
    ds = hn.load_embeddings(f"cache:coco:{model}:{pretrained}", cache_dir=cache, splits=("test", "train"))
    assert ds.source == "real" and ds.meta["encoder"] == family and ds.split("test").images.shape == (6, dim)
    t2i = ds.tasks("test", "train")["t2i"]
    res = hn.evaluate(t2i.fit(hn.NearestNeighborNormalization(alpha=0.5, k=2)), t2i)
    assert 0 <= res["R@1"] <= res["R@5"] <= 100
    assert main(["verify", "coco", "--model", model, "--pretrained", pretrained, "--split", "test"] + common) == 0
    assert "OK" in capsys.readouterr().out
    # a second encode is served by the cache
    assert main(argv) == 0


def test_old_cache_keys_without_family_are_open_clip(tmp_path):
    """Entries written before the key had encoder_family stay valid for open_clip models and are stale for BLIP."""
    data = make_tiny_coco(tmp_path / "data")
    cache = tmp_path / "cache"
    from hubnorm.data import encode_split
    for model in ("ViT-B-32-quickgelu", "blip-itm-base-coco"):
        encode_split("coco", "test", model, "openai" if model.startswith("ViT") else "hf", data_dir=data,
                     cache_dir=cache, encoder=StubEncoder(), progress=False)
    for model, tag in (("ViT-B-32-quickgelu", "openai"), ("blip-itm-base-coco", "hf")):
        path = cache_mod.entry_dir("coco", model, tag, "test", cache) / "manifest.json"
        man = json.loads(path.read_text())
        assert man["key"]["encoder_family"] == infer_family(model)
        del man["key"]["encoder_family"]
        path.write_text(json.dumps(man))
    ds = load_cached_embeddings("coco:ViT-B-32-quickgelu:openai", cache_dir=cache, splits=("test",))
    assert ds.meta["encoder"] == "open_clip"
    with pytest.raises(cache_mod.CacheError, match="encoder_family: cached 'open_clip' != wanted 'blip'"):
        load_cached_embeddings("coco:blip-itm-base-coco:hf", cache_dir=cache, splits=("test",))


def test_published_model_names_exist_in_the_published_table():
    cases = {("ViT-B-32-quickgelu", "openai"): "CLIP", ("ViT-B-32", None): "CLIP",
             ("ViT-B-16-SigLIP", "webli"): "SigLIP", ("hf-hub:timm/ViT-B-16-SigLIP", None): "SigLIP",
             ("blip-itm-base-coco", "hf"): "BLIP ft. COCO", ("Salesforce/blip-itm-base-flickr", "hf"): "BLIP ft. Flickr",
             ("synthetic", None): "CLIP", ("synthetic-rehearsal", "seed0"): "CLIP",
             ("openai/clip-vit-base-patch32", None): "CLIP", ("openai/clip-vit-base-patch32", "none"): None,
             ("openai/clip-vit-base-patch32, random initialisation", None): None,
             ("ViT-B-32-quickgelu", "none"): None, (BLIP_TINY, "none"): None, ("blip-itm-large-coco", "hf"): None,
             ("ViT-L-14", "openai"): None, ("ViT-B-16-SigLIP2", "webli"): None, (TINY_SIGLIP, "none"): None}
    for (model, tag), want in cases.items():
        assert published_model_name(model, tag) == want, (model, tag)
    from hubnorm_companion.reporting import load_published
    rows = load_published("nnn-chowdhury2024").astype(str).to_dict("records")
    for label in {v for v in cases.values() if v}:
        for direction, table in (("t2i", "1"), ("i2t", "2")):
            assert any(r["model"] == label and r["table"] == table and r["direction"] == direction
                       and r["method"] == "raw" for r in rows), (label, direction)
    with pytest.raises(TypeError):
        published_model_name(None)
