"""GPU paths against the CPU result, and clear errors for a device that is not there.

The ``gpu`` tests run unchanged on the first CUDA machine (``pytest -m gpu``; ``bash run_tests.sh`` runs them too)
and are skipped here with the reason when ``torch.cuda.is_available()`` is False:

* every registered normalizer (``hubnorm.NORMALIZERS``) fitted on ``cuda`` vs ``cpu``: equal top-10 rankings in
  float64 (rounding cannot reorder), scores/offsets within float32 tolerance;
* the exact top-k and log-sum-exp kernels on ``cuda`` against their plain forms on the same device, and every
  method's fit on the plain engine (block loops) against its fast kernels there, and the one-pass sweeps against
  the reference loop;
* ``hubnorm.index`` with GPU faiss (``faiss_uses_gpu``) against exact search / exact NNN offsets;
* the open_clip encoder (random-init ``ViT-S-32``) and the BLIP ITM cross-encoder (random-init small config) on
  ``cuda`` vs ``cpu``.

Tolerances were set before any GPU run (the first, on an NVIDIA H200 on 2026-12-04, passed them all:
benchmarks/reports/gpu_tests.log): float32 scores 1e-4 (sums of 128 products of unit
vectors); encoders 1e-3 cosine / 2e-3 absolute, because cuDNN convolutions default to TF32
(``torch.backends.cudnn.allow_tf32``) and attention kernels differ between devices.

``HUBNORM_GPU_TEST_DEVICE=cpu`` lifts the skip and runs the same comparisons cpu-vs-cpu (use_gpu=False for faiss):
a dry run of the test logic on a machine without a GPU, not a GPU check.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import hubnorm as hn
from hubnorm._validation import resolve_device

DEV = os.environ.get("HUBNORM_GPU_TEST_DEVICE", "cuda")
DRY = DEV == "cpu"
CUDA_REASON = (f"CUDA not available: torch {torch.__version__} (CUDA build {torch.version.cuda}) reports "
               f"torch.cuda.is_available() = False; run on an NVIDIA GPU with the requirements-gpu.txt environment")
needs_cuda = pytest.mark.skipif(not DRY and not torch.cuda.is_available(), reason=CUDA_REASON)
gpu = [pytest.mark.gpu, needs_cuda]


# ------------------------------------------------------------------------------------------ device errors (CPU)

def _bank():
    g = np.random.default_rng(0)
    x = g.normal(size=(30, 8))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


BAD = [
    pytest.param("cuda", "CUDA is not available", marks=pytest.mark.skipif(
        torch.cuda.is_available(), reason="CUDA is available here, so 'cuda' is a valid device"), id="cuda"),
    pytest.param("mps", "MPS is not available", marks=pytest.mark.skipif(
        torch.backends.mps.is_available(), reason="MPS is available here"), id="mps"),
    pytest.param("cuda:7", "CUDA", marks=pytest.mark.skipif(
        torch.cuda.device_count() > 7, reason="this machine has more than 7 CUDA devices"), id="cuda:7"),
    pytest.param("gpu", "not a device torch knows", id="gpu"),
    pytest.param("meta", "supports 'cpu', 'cuda", id="meta"),
]


@pytest.mark.parametrize("device,why", BAD)
@pytest.mark.parametrize("name", sorted(hn.NORMALIZERS))
def test_bad_device_is_a_value_error_naming_device_and_fix(name, device, why):
    x = _bank()
    with pytest.raises(ValueError, match=rf"device='{device}'.*{why}.*(pass device=|use 'cpu')"):
        hn.make_normalizer(name, device=device).fit(x, query_bank=x, target_bank=x)


@pytest.mark.parametrize("device,why", BAD)
def test_bad_device_in_encoders(device, why):
    with pytest.raises(ValueError, match=rf"device='{device}'.*{why}"):
        resolve_device(device)
    pytest.importorskip("open_clip")
    from hubnorm.data.encoders import OpenClipEncoder
    with pytest.raises(ValueError, match=rf"device='{device}'"):
        OpenClipEncoder("ViT-S-32", None, device=device)


def test_non_string_device_is_a_type_error():
    """3.5 is the wrong type, not a wrong value: TypeError (as tests/test_errors.py requires for 3)."""
    x = _bank()
    with pytest.raises(TypeError, match="device must be None, a string such as 'cpu' or 'cuda', or a torch.device"):
        hn.make_normalizer("nnn", device=3.5).fit(x, query_bank=x)


def test_good_devices_resolve():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")
    assert resolve_device(None).type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_gpu_tests_skip_with_the_reason():
    if torch.cuda.is_available() or DRY:
        pytest.skip("CUDA is available (or the dry run is on): the gpu tests run here")
    assert needs_cuda.kwargs["reason"].startswith("CUDA not available: ")


# ------------------------------------------------------------------------------------------ normalizers on GPU

@pytest.fixture(scope="module")
def task():
    from hubnorm.synthetic import make_dataset
    ds = make_dataset("flickr30k", n_test_images=150, n_train_images=400, dim=128, seed=0)
    return ds.tasks()["t2i"]


def _fit(task, name, device, dtype):
    t = task
    cast = (lambda a: None if a is None else np.asarray(a, dtype=dtype))
    nrm = hn.make_normalizer(name, device=device)
    nrm.fit(cast(t.targets), query_bank=cast(t.query_bank), target_bank=cast(t.target_bank))
    return nrm


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("name", sorted(hn.NORMALIZERS))
def test_normalizer_on_gpu_matches_cpu(task, name):
    transductive = getattr(hn.NORMALIZERS[name], "transductive", False)   # OTN, L2N, HN score their fitted rows only
    q64 = np.asarray(task.query_bank if transductive else task.queries, dtype=np.float64)
    cpu64, dev64 = _fit(task, name, "cpu", np.float64), _fit(task, name, DEV, np.float64)
    assert dev64.device_.type == torch.device(DEV).type
    _, i_cpu = cpu64.topk(q64, 10)
    _, i_dev = dev64.topk(q64, 10)
    assert torch.equal(i_cpu.cpu(), i_dev.cpu()), f"{name}: top-10 rankings differ between cpu and {DEV}"
    cpu32, dev32 = _fit(task, name, "cpu", np.float32), _fit(task, name, DEV, np.float32)
    q32 = q64.astype(np.float32)
    s_cpu, s_dev = cpu32.score(q32).cpu().numpy(), dev32.score(q32).cpu().numpy()
    np.testing.assert_allclose(s_dev, s_cpu, atol=1e-4, rtol=1e-4, err_msg=f"{name}: scores differ")
    if cpu32.is_offset:
        np.testing.assert_allclose(dev32.offsets, cpu32.offsets, atol=1e-4, rtol=1e-4)
        np.testing.assert_allclose(dev64.offsets, cpu64.offsets, atol=1e-10, rtol=1e-10)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("name", sorted(hn.NORMALIZERS))
def test_plain_engine_on_gpu_equals_the_fast_kernels(task, name):
    """Every method's fit through the plain engine (block loops, no fast kernel: the path of stepped iterations)
    on the device equals its fit through the fast kernels there, in float64 at small blocks."""
    from hubnorm.engine import LocalEngine
    cls = hn.NORMALIZERS[name]
    nrm = cls(**{**cls.example_params, "device": DEV})
    cast = (lambda a: None if a is None else np.asarray(a, dtype=np.float64))
    engine = nrm.local_engine(cast(task.targets), cast(task.query_bank), cast(task.target_bank))
    assert engine.device.type == torch.device(DEV).type
    fast = nrm.fit_blocks(engine)
    for block_bytes in (None, 8 * 40 * 7):
        plain = nrm.fit_blocks(LocalEngine(engine.inputs, block_bytes=block_bytes, plain=True))
        for key, want in fast.items():
            if isinstance(want, torch.Tensor) and want.dtype != torch.bool:
                got = plain[key]
                assert got.device.type == want.device.type, (name, key)
                np.testing.assert_allclose(got.double().cpu().numpy(), want.double().cpu().numpy(), rtol=0,
                                           atol=1e-10, err_msg=f"{name}: {key}, block_bytes={block_bytes}")


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("method, grid", [("nnn", {"alpha": [0.25, 0.5, 0.75], "k": [1, 16]}),
                                          ("is", {"tau": [0.01, 0.05]}), ("sn", {"tau": [0.01, 0.02]})])
def test_sweeps_on_gpu_equal_the_reference_loop(task, method, grid):
    """grid_search on the device (float64): the one-pass sweep's table (its candidate pass in whole-block chunks
    there) equals the reference loop's on the same device, and the CPU sweep's."""
    import dataclasses
    t64 = dataclasses.replace(task, **{k: np.asarray(getattr(task, k), dtype=np.float64)
                                       for k in ("queries", "targets", "query_bank", "target_bank")
                                       if getattr(task, k) is not None})
    import pandas as pd
    tables = {label: hn.grid_search(method, t64, grid, fixed={"device": dev}, metric="MnR", engine=engine).table
              for label, dev, engine in (("device sweep", DEV, "sweep"), ("device reference", DEV, "reference"),
                                         ("cpu sweep", "cpu", "sweep"))}
    for label, table in tables.items():
        pd.testing.assert_frame_equal(table, tables["device sweep"], check_exact=True, obj=label)


# ------------------------------------------------------------------------------------------ kernels on GPU

@pytest.mark.gpu
@needs_cuda
def test_kernels_on_gpu_match_the_plain_forms(monkeypatch):
    """The fast paths on the device against their plain forms on the same device: topk_similarity (the torch
    kernel, the device default) against ``(a @ b.T).topk``: values within float32 GEMM rounding, the returned
    indices' own scores equal to the values (indices up to ties); logsumexp_similarity with a shift against
    ``torch.logsumexp`` of the whole matrix; block_logsumexp with +-inf / NaN scores against torch.logsumexp (the
    same NaN rows, the same infinities, finite rows within a few ulp), one slab per block (the device default)
    bit-equal to 3-row slabs. Tolerances set before any GPU run: 1e-5 absolute on unit-vector scores."""
    from hubnorm import kernels
    g = torch.Generator().manual_seed(0)
    a = torch.nn.functional.normalize(torch.randn(300, 64, generator=g), dim=1).to(DEV)
    b = torch.nn.functional.normalize(torch.randn(5000, 64, generator=g), dim=1).to(DEV)
    s = a @ b.T
    for k in (1, 16, 128):
        v, i = kernels.topk_similarity(a, b, k, block_bytes=2**20)
        assert v.device.type == i.device.type == torch.device(DEV).type
        ev, _ = s.topk(k, dim=1)
        torch.testing.assert_close(v, ev, atol=1e-5, rtol=0)
        torch.testing.assert_close(s.gather(1, i), v, atol=1e-5, rtol=0)
    shift = torch.randn(5000, generator=g).to(DEV)
    got = kernels.logsumexp_similarity(a, b, 20.0, b_shift=shift, block_bytes=2**20)
    torch.testing.assert_close(got, torch.logsumexp(20.0 * s + shift, dim=1), atol=2e-5, rtol=1e-6)
    raw = (s[:40] * 1.0).contiguous()
    raw[3] = -float("inf")
    raw[5, 7] = float("inf")
    raw[9, 100] = float("nan")
    for scale, sh in ((20.0, None), (-2.0, shift)):
        x = raw * scale if sh is None else raw * scale + sh
        want, got = torch.logsumexp(x, dim=1), kernels.block_logsumexp(raw, scale, sh)
        assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())
        fin = torch.isfinite(want)
        torch.testing.assert_close(got[fin], want[fin], atol=1e-5, rtol=1e-6)
        with monkeypatch.context() as m:
            for name in ("LSE_SLAB_BYTES", "DEVICE_SCRATCH_BYTES"):
                m.setattr(kernels, name, 3 * raw.shape[1] * raw.element_size())
            assert torch.equal(kernels.block_logsumexp(raw, scale, sh).nan_to_num(), got.nan_to_num())


@pytest.mark.gpu
@needs_cuda
def test_hamming_search_on_gpu_equals_the_cpu():
    """The near-duplicate search of the query-aware certificate (``provenance.nearest_hamming``, the default on a
    CUDA machine) on the device against a brute-force count of differing bits on the CPU, ties included (the first
    bank row wins), in one block and in parts of 2 test rows x blocks of 75 bank rows. Exact: every value is an
    integer <= 512."""
    from hubnorm.provenance import nearest_hamming
    rng = np.random.default_rng(1)
    bank = rng.integers(0, 256, size=(3000, 64), dtype=np.uint8)
    bank[2500] = bank[7]
    test = rng.integers(0, 256, size=(200, 64), dtype=np.uint8)
    test[:2] = bank[[7, 2999]]
    bits = np.unpackbits(bank, axis=1).astype(np.int16)
    brute = np.array([np.abs(bits - b).sum(1) for b in np.unpackbits(test, axis=1).astype(np.int16)])
    for kw in ({}, {"block_bytes": 4 * 150}):
        d, i = nearest_hamming(bank, test, backend="torch", device=DEV, **kw)
        assert d[:, 0].tolist() == brute.min(1).tolist() and i[:, 0].tolist() == brute.argmin(1).tolist()
    assert i[:2, 0].tolist() == [7, 2999]


@pytest.mark.gpu
@needs_cuda
def test_provenance_of_a_fit_on_gpu_is_that_of_the_cpu_fit(task):
    """The fingerprints a fit records (hashes, per-row digests, sketches) are the same on the device as on the CPU:
    a bank held on the GPU is fingerprinted from the caller's host rows (``LocalEngine.host``), and the host rows
    are those the device holds."""
    fits = [hn.InvertedSoftmax(device=d).fit(task.targets, query_bank=task.query_bank) for d in ("cpu", DEV)]
    a, b = (f.provenance_["query_bank"] for f in fits)
    assert a.sha256 == b.sha256 and np.array_equal(a.digests, b.digests) and np.array_equal(a.signatures, b.signatures)
    assert hn.provenance.fingerprint(torch.from_numpy(np.asarray(task.query_bank)).to(DEV), "q").sha256 == a.sha256


# ------------------------------------------------------------------------------------------ faiss on GPU

@pytest.fixture(scope="module")
def faiss_gpu():
    faiss = pytest.importorskip("faiss", reason="faiss not installed: pip install -r requirements-gpu.txt")
    from hubnorm.index import faiss_uses_gpu
    if DRY:
        return False
    if not faiss_uses_gpu():
        pytest.skip(f"faiss {faiss.__version__} sees no GPU (faiss-cpu build?): pip install -r requirements-gpu.txt")
    return True


@pytest.mark.gpu
@needs_cuda
def test_faiss_gpu_index_matches_exact(faiss_gpu, task):
    from hubnorm.index import BankIndex, FaissNNN
    bank = np.asarray(task.query_bank, dtype=np.float32)
    targets = np.asarray(task.targets, dtype=np.float32)
    idx = BankIndex(bank, nlist=16, seed=0, use_gpu=faiss_gpu)
    assert idx.on_gpu == faiss_gpu
    idx._set_nprobe(16)                                     # nprobe = nlist: exhaustive, so exact
    vals, ids = idx.search(targets, 10, scan="faiss")
    exact = torch.from_numpy(targets) @ torch.from_numpy(bank).T
    ev, ei = exact.topk(10, dim=1)
    np.testing.assert_allclose(vals, ev.numpy(), atol=1e-5)
    assert (np.asarray(ids) == ei.numpy()).mean() > 0.999   # ties in float32 may swap a pair
    nnn = FaissNNN(alpha=0.75, k=16, nlist=16, nprobe=16, use_gpu=faiss_gpu, scan="faiss", device="cpu")
    nnn.fit(targets, query_bank=bank)
    ref = hn.make_normalizer("nnn", alpha=0.75, k=16, device="cpu").fit(targets, query_bank=bank)
    np.testing.assert_allclose(nnn.offsets, ref.offsets, atol=1e-5)
    # approximate (nprobe tuned to 95% recall of the bank top-k) stays close to exact: R@1 within 2 points
    # (bound set a priori, before any GPU run; the NNN paper reports <= 0.2 at 1M-caption scale)
    approx = FaissNNN(alpha=0.75, k=16, nlist=16, use_gpu=faiss_gpu, device="cpu").fit(targets, query_bank=bank)
    r1 = [hn.evaluate(n, task)["R@1"] for n in (approx, ref)]
    assert abs(r1[0] - r1[1]) <= 2.0, r1


# ------------------------------------------------------------------------------------------ encoders on GPU

@pytest.mark.gpu
@needs_cuda
def test_open_clip_encoder_on_gpu_matches_cpu(tmp_path):
    pytest.importorskip("open_clip")
    from PIL import Image, ImageDraw

    from hubnorm.data.encoders import OpenClipEncoder
    paths = []
    for i, rgb in enumerate([(220, 30, 30), (30, 180, 60), (40, 60, 220)]):
        im = Image.new("RGB", (64, 64), (245, 245, 245))
        ImageDraw.Draw(im).ellipse((8 + 4 * i, 8, 56, 56), fill=rgb)
        paths.append(tmp_path / f"{i}.png")
        im.save(paths[-1])
    texts = ["a red circle", "a green circle", "a blue circle on white"]
    out = {}
    for dev in ("cpu", DEV):
        enc = OpenClipEncoder("ViT-S-32", None, device=dev, batch_size=2, progress=False, seed=0)
        out[dev] = (enc.encode_images(paths), enc.encode_texts(texts))
        assert enc.device.startswith(torch.device(DEV).type if dev == DEV else "cpu")
    for a, b in zip(out["cpu"], out[DEV]):
        assert a.dtype == b.dtype == np.float32 and a.shape == b.shape
        assert np.all(np.sum(a * b, axis=1) > 1 - 1e-3)
        np.testing.assert_allclose(b, a, atol=2e-3)


@pytest.mark.gpu
@needs_cuda
def test_blip_itm_on_gpu_matches_cpu():
    pytest.importorskip("transformers")
    from PIL import Image, ImageDraw

    from hubnorm.rerank.blip import BlipITMCrossEncoder, offline_processor, small_blip_config
    images, captions = [], []
    for i, (name, rgb) in enumerate({"red": (220, 30, 30), "blue": (40, 60, 220)}.items()):
        im = Image.new("RGB", (48, 40), (250, 250, 250))
        ImageDraw.Draw(im).ellipse((8 + 4 * i, 6, 36, 32), fill=rgb)
        images.append(im)
        captions += [f"a {name} circle", f"one circle that is {name}"]
    proc = offline_processor(image_size=32)
    cfg = small_blip_config(vocab_size=len(proc.tokenizer), image_size=32)
    q, t = np.array([0, 1, 2, 3, 0]), np.array([0, 0, 1, 1, 1])
    scores = {}
    for dev in ("cpu", DEV):
        ce = BlipITMCrossEncoder.from_config(images, captions, cfg, seed=0, processor=proc, direction="t2i",
                                             batch_size=3, device=dev, progress=False)
        assert ce.device.type == torch.device(dev).type
        assert next(ce.model.parameters()).device.type == torch.device(dev).type
        scores[dev] = ce.score_pairs(q, t)
    np.testing.assert_allclose(scores[DEV], scores["cpu"], atol=1e-3)
