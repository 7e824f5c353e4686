"""The shared input checks (``hubnorm._validation``) on their own: every check at its boundary (the value just
allowed and the one just refused), every message by the words that tell the user the fix, and the row-block
paths (NaN counts over several blocks, a bank whose finite entries overflow a sum) against their one-block forms.
Every public entry point calls these; a guard lost here is a guard lost everywhere."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hubnorm import _validation as v


def _unit(n=5, d=4, seed=0):
    x = np.random.default_rng(seed).standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


# ------------------------------------------------------------------------------------------------ devices
def test_resolve_device():
    assert v.resolve_device("cpu") == torch.device("cpu")
    assert v.resolve_device(torch.device("cpu")) == torch.device("cpu")
    assert v.resolve_device(None) == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(TypeError, match=r"device must be None, a string such as 'cpu' or 'cuda', or a torch.device; "
                                        r"got int 3"):
        v.resolve_device(3)
    with pytest.raises(ValueError, match=r"my_device='gpu0' is not a device name .* or pass my_device=None"):
        v.resolve_device("gpu0", name="my_device")
    with pytest.raises(ValueError, match="not device type 'meta'"):
        v.resolve_device("meta")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"device='cuda' but CUDA is not available .* pass device='cpu'"):
            v.resolve_device("cuda")
    else:  # pragma: no cover - a GPU machine
        with pytest.raises(ValueError, match="CUDA device"):
            v.resolve_device(f"cuda:{torch.cuda.device_count()}")
    mps = getattr(torch.backends, "mps", None)
    if mps is None or not mps.is_available():
        with pytest.raises(ValueError, match="Apple MPS is not available"):
            v.resolve_device("mps")


# ------------------------------------------------------------------------------------------------ embeddings
def test_as_embeddings_kinds_and_dtypes():
    x = _unit()
    t = v.as_embeddings(x, "targets")
    assert t.dtype == torch.float64 and torch.equal(t, torch.from_numpy(x))
    assert v.as_embeddings(x.astype(np.float32), "t").dtype == torch.float32
    assert v.as_embeddings(x.astype(np.float16), "t").dtype == torch.float32       # 16-bit: computed in float32
    assert v.as_embeddings(torch.from_numpy(x).bfloat16(), "t", check_normalized=False).dtype == torch.float32
    assert v.as_embeddings(x, "t", dtype=torch.float32).dtype == torch.float32
    assert v.as_embeddings(x[:, ::2] / np.linalg.norm(x[:, ::2], axis=1, keepdims=True), "t").is_contiguous()
    g = torch.from_numpy(x).requires_grad_(True)
    out = v.as_embeddings(g, "queries")
    assert not out.requires_grad and out.grad_fn is None


@pytest.mark.parametrize("x, exc, message", [
    (np.arange(8).reshape(2, 4), TypeError, r"bank must hold floating-point values; got dtype int64\. Use bank\.astype"),
    (torch.arange(8).reshape(2, 4), TypeError, r"bank must hold floating-point values; got dtype torch.int64\. Use bank\.float"),
    ([[1.0, 0.0]], TypeError, r"bank must be a numpy array or a torch tensor of shape \(n, d\); got list"),
    (np.ones(4) / 2, ValueError, r"bank must be 2-D \(n, d\); got shape \(4,\)\. Reshape it, e.g\. bank\.reshape"),
    (np.zeros((0, 4)), ValueError, r"bank is empty \(0 rows\)"),
    (np.zeros((3, 0)), ValueError, "bank has 0 columns"),
])
def test_as_embeddings_refuses(x, exc, message):
    with pytest.raises(exc, match=message):
        v.as_embeddings(x, "bank")


def test_as_embeddings_dimension_finiteness_and_norms():
    x = _unit(6, 4)
    with pytest.raises(ValueError, match="bank has dimension 4 but the other embeddings have 5: use the same encoder"):
        v.as_embeddings(x, "bank", dim=5)
    assert v.as_embeddings(x, "bank", dim=4).shape == (6, 4)
    bad = x.copy()
    bad[1, 2], bad[4, 0], bad[4, 1] = np.nan, np.inf, -np.inf
    with pytest.raises(ValueError, match=r"bank contains NaN or Inf in 2 row\(s\)"):
        v.as_embeddings(bad, "bank")
    with pytest.raises(ValueError, match=r"contains NaN or Inf in 2 row\(s\)"):
        v.as_embeddings(bad, "bank", check_normalized=False)
    # the norm tolerance: 1e-3 passes, a little more does not
    ok = x * (1 + 0.999e-3)
    v.as_embeddings(ok, "bank")
    with pytest.raises(ValueError, match=r"bank rows are not L2-normalised \(largest \|norm - 1\| = 0\.002\): use "
                                         r"hubnorm\.l2_normalize\(bank\) first \(cosine retrieval; a hubnorm normalizer "
                                         r"scoring raw dot products instead takes check_normalized=False\)$"):
        v.as_embeddings(x * 1.002, "bank")
    zero = x.copy()
    zero[[2, 5]] = 0
    with pytest.raises(ValueError, match=r"^bank has 2 all-zero row\(s\) \(the first is row 2\): an embedding of "
                                         r"nothing has no direction; drop those rows \(and their pairs\)$"):
        v.as_embeddings(zero, "bank")
    with pytest.raises(ValueError, match="not L2-normalised"):
        v.as_embeddings(x * 0.998, "bank")
    with pytest.raises(ValueError, match="not L2-normalised"):
        v.as_embeddings(x * (1 + 1.001e-3), "bank")             # just above the tolerance
    v.as_embeddings(x * 3, "bank", check_normalized=False)


def test_row_blocks_count_every_bad_row_and_overflowing_sums_are_finite():
    t = torch.ones(10, 3)
    assert v._row_steps(t, elements=6) == [(0, 2), (2, 2), (4, 2), (6, 2), (8, 2)]
    assert v._row_steps(torch.ones(3, 10), elements=4) == [(0, 1), (1, 1), (2, 1)]
    big = torch.full((4, 3), 3e38, dtype=torch.float32)     # finite entries whose sum overflows float32
    assert not bool(torch.isfinite(big.sum())) and v._all_finite(big)
    big[3, 1] = float("nan")
    assert not v._all_finite(big)
    assert not v._all_finite(torch.tensor([[0.0, float("inf")]]))
    assert v._all_finite(torch.zeros(2, 2))


def test_nan_rows_are_counted_across_blocks(monkeypatch):
    x = _unit(9, 4)
    x[[0, 4, 8], 1] = np.nan
    real = v._row_steps
    monkeypatch.setattr(v, "_row_steps", lambda t, elements=2**22: real(t, elements=8))   # blocks of 2 rows
    with pytest.raises(ValueError, match=r"contains NaN or Inf in 3 row\(s\)"):
        v.as_embeddings(x, "bank")


def test_l2_normalize():
    x = np.array([[3.0, 4.0], [0.0, 0.0], [0.0, 2.0]])
    np.testing.assert_array_equal(v.l2_normalize(x), [[0.6, 0.8], [0.0, 0.0], [0.0, 1.0]])   # row by row
    t = v.l2_normalize(torch.tensor([[3.0, 4.0], [0.0, 1e-13], [0.0, 2.0]]))
    torch.testing.assert_close(t, torch.tensor([[0.6, 0.8], [0.0, 0.1], [0.0, 1.0]]))   # the zero guard: eps = 1e-12
    with pytest.raises(TypeError, match="x must be a numpy array or a torch tensor; got list"):
        v.l2_normalize([[1.0]])


# ------------------------------------------------------------------------------------------------ scalars
def test_check_positive_int():
    assert v.check_positive_int(np.int64(3), "k") == 3 and type(v.check_positive_int(np.int64(3), "k")) is int
    assert v.check_positive_int(1, "k") == 1 and v.check_positive_int(5, "k", maximum=5) == 5
    with pytest.raises(TypeError, match="k must be an integer; got bool True"):
        v.check_positive_int(True, "k")
    with pytest.raises(TypeError, match="k must be an integer; got float 2.0"):
        v.check_positive_int(2.0, "k")
    with pytest.raises(ValueError, match="k must be >= 1; got 0"):
        v.check_positive_int(0, "k")
    with pytest.raises(ValueError, match=r"k=6 is larger than the bank \(5\): use k <= 5"):
        v.check_positive_int(6, "k", maximum=5, max_name="the bank")
    with pytest.raises(ValueError, match=r"k=6 is larger than the allowed maximum \(5\)"):
        v.check_positive_int(6, "k", maximum=5)


def test_check_floats():
    assert v.check_positive_float(np.float32(0.5), "tau") == 0.5 and v.check_positive_float(2, "tau") == 2.0
    assert v.check_positive_float(1e-300, "tau") == 1e-300
    for bad in (0, -1e-9, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="tau must be a finite number > 0"):
            v.check_positive_float(bad, "tau")
    for bad, kind in ((True, "bool True"), ("0.1", "str '0.1'"), (None, "NoneType None")):
        with pytest.raises(TypeError, match=f"tau must be a number; got {kind}"):
            v.check_positive_float(bad, "tau")
    assert v.check_finite_float(-2, "alpha") == -2.0 and v.check_finite_float(1.0, "alpha", minimum=1.0) == 1.0
    with pytest.raises(ValueError, match="alpha must be >= 1.0; got 0.99"):
        v.check_finite_float(0.99, "alpha", minimum=1.0)
    with pytest.raises(ValueError, match="alpha must be finite; got inf"):
        v.check_finite_float(float("inf"), "alpha")
    with pytest.raises(TypeError, match="alpha must be a number; got bool"):
        v.check_finite_float(False, "alpha")


def test_check_sizes_bytes_dtypes_seeds():
    assert v.check_chunk_size(None) is None and v.check_chunk_size(7) == 7
    with pytest.raises(ValueError, match="chunk_size must be >= 1"):
        v.check_chunk_size(0)
    assert v.check_block_bytes(None) is None and v.check_block_bytes(np.int32(4096)) == 4096
    with pytest.raises(TypeError, match=r"block_bytes must be None or an integer number of bytes \(e.g. 128 \* 2\*\*20\); "
                                        r"got float 1500000.0"):
        v.check_block_bytes(1.5e6)
    with pytest.raises(TypeError, match="block_bytes must be None or an integer"):
        v.check_block_bytes(True)
    with pytest.raises(ValueError, match="block_bytes must be >= 1"):
        v.check_block_bytes(0)
    assert v.check_optional_bytes(None, "cache_bytes") is None and v.check_optional_bytes(0, "cache_bytes") == 0
    with pytest.raises(ValueError, match=r"cache_bytes must be >= 0 bytes \(0 or None turns it off\); got -1"):
        v.check_optional_bytes(-1, "cache_bytes")
    with pytest.raises(TypeError, match="cache_bytes must be None or an integer number of bytes; got str"):
        v.check_optional_bytes("1GB", "cache_bytes")
    with pytest.raises(TypeError, match="cache_bytes must be None or an integer"):
        v.check_optional_bytes(False, "cache_bytes")
    for dt in v.FLOAT_DTYPES:
        assert v.check_float_dtype(dt, "cache_dtype") is dt
    assert v.check_float_dtype(None, "cache_dtype") is None
    with pytest.raises(TypeError, match=r"cache_dtype must be a torch floating dtype \(torch.float16"):
        v.check_float_dtype(None, "cache_dtype", allow_none=False)
    with pytest.raises(TypeError, match="cache_dtype must be None or a torch floating dtype"):
        v.check_float_dtype(torch.int8, "cache_dtype")
    with pytest.raises(TypeError, match="must be None or a torch floating dtype"):
        v.check_float_dtype("float32", "cache_dtype")
    assert v.check_seed(0) == 0 and v.check_seed(np.uint64(2**63 - 1)) == 2**63 - 1
    with pytest.raises(ValueError, match=r"seed must be in \[0, 2\*\*63\); got 9223372036854775808"):
        v.check_seed(2**63)
    with pytest.raises(ValueError, match=r"my_seed must be in \[0, 2\*\*63\); got -1"):
        v.check_seed(-1, "my_seed")
    with pytest.raises(TypeError, match="seed must be a non-negative integer; got bool"):
        v.check_seed(True)


# ------------------------------------------------------------------------------------------------ rows
@pytest.mark.parametrize("kind", ["numpy", "torch", "memmap"])
def test_check_finite_rows_counts_rows_in_blocks(kind, tmp_path):
    x = np.ones((7, 3))
    x[[0, 5, 6], [0, 2, 1]] = [np.nan, np.inf, -np.inf]       # the first row too
    if kind == "torch":
        x = torch.from_numpy(x)
    elif kind == "memmap":
        np.save(tmp_path / "x.npy", x)
        x = np.load(tmp_path / "x.npy", mmap_mode="r")
    for elements in (2**22, 3, 6):     # one block; one row per block; two rows per block
        with pytest.raises(ValueError, match=r"bank contains NaN or Inf in 3 row\(s\): fix or drop those rows"):
            v.check_finite_rows(x, "bank", elements=elements)
    v.check_finite_rows(np.ones((4, 2)), "bank", elements=2)
    v.check_finite_rows(torch.ones(5), "vector", elements=2)   # a 1-D input: one entry per row


def test_unit_rows():
    x = np.array([[3.0, 4.0], [1.0, 0.0]])
    out = v.unit_rows(x, "rows")
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, np.array([[0.6, 0.8], [1.0, 0.0]], dtype=np.float32))
    assert v.unit_rows(torch.tensor(x), "rows", dtype=np.float64).dtype == np.float64
    with pytest.raises(ValueError, match=r"rows must be a non-empty 2-D array \(n, d\); got shape \(2,\)"):
        v.unit_rows(np.ones(2), "rows")
    with pytest.raises(ValueError, match="non-empty"):
        v.unit_rows(np.ones((0, 2)), "rows")
    with pytest.raises(ValueError, match="rows contain NaN or Inf"):
        v.unit_rows(np.array([[np.nan, 1.0]]), "rows")
    tiny = v.unit_rows(np.array([[1e-30, 1e-30]], dtype=np.float32), "rows")   # normalised in float64: no underflow
    np.testing.assert_allclose(tiny, [[2 ** -0.5, 2 ** -0.5]], rtol=1e-6)
    with pytest.raises(ValueError, match="rows contain an all-zero row: cannot normalise"):
        v.unit_rows(np.array([[0.0, 0.0], [1.0, 0.0]]), "rows")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("block", [1, 3, 7, 10**6])
def test_unit_rows_in_blocks_gives_the_bits_of_the_plain_computation(monkeypatch, dtype, block):
    """The blocks of unit_rows are an optimisation (one full-size allocation): the same bits as the whole-matrix
    float64 computation, for every input dtype, block size and output dtype; and the errors come in the plain
    order (a NaN anywhere before a zero row anywhere)."""
    monkeypatch.setattr(v, "UNIT_ROWS_BLOCK", block)
    rng = np.random.default_rng(3)
    base = rng.standard_normal((11, 6)) * rng.lognormal(0, 3, size=(11, 1))
    for x in (base, base.astype(np.float32), np.round(base * 10).astype(np.int64) + 1, base.tolist(),
              torch.tensor(base, dtype=torch.float32), np.asfortranarray(base)):
        x64 = np.asarray(x.numpy() if isinstance(x, torch.Tensor) else x, dtype=np.float64)
        plain = (x64 / np.linalg.norm(x64, axis=1, keepdims=True)).astype(dtype)
        got = v.unit_rows(x, "rows", dtype=dtype)
        assert got.dtype == dtype and got.shape == plain.shape
        np.testing.assert_array_equal(got, plain)
    bad = base.copy()
    bad[1] = 0.0
    bad[9, 2] = np.inf
    with pytest.raises(ValueError, match="rows contain NaN or Inf"):   # the later NaN/Inf row wins over the zero row
        v.unit_rows(bad, "rows", dtype=dtype)
    bad[9, 2] = 1.0
    with pytest.raises(ValueError, match="rows contain an all-zero row"):
        v.unit_rows(bad, "rows", dtype=dtype)
    assert v.unit_rows(np.array([[True, False]]), "rows").tolist() == [[1.0, 0.0]]


def test_resolve_device_with_gpus_present(monkeypatch):
    """The CUDA and MPS branches on a machine that has them (simulated: this check runs on any machine)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert v.resolve_device(None) == torch.device("cuda")
    assert v.resolve_device("cuda") == torch.device("cuda")
    assert v.resolve_device("cuda:1") == torch.device("cuda:1")
    with pytest.raises(ValueError, match=r"dev='cuda:2' but only 2 CUDA device\(s\) are visible \(indices 0\.\.1\): "
                                         r"pass dev='cuda' or 'cuda:0', or check CUDA_VISIBLE_DEVICES"):
        v.resolve_device("cuda:2", name="dev")

    class MPS:
        def __init__(self, ok):
            self.ok = ok

        def is_available(self):
            return self.ok

    monkeypatch.setattr(torch.backends, "mps", MPS(True), raising=False)
    assert v.resolve_device("mps") == torch.device("mps")
    monkeypatch.setattr(torch.backends, "mps", MPS(False), raising=False)
    with pytest.raises(ValueError, match="device='mps' but Apple MPS is not available on this machine"):
        v.resolve_device("mps")
    monkeypatch.delattr(torch.backends, "mps", raising=False)
    with pytest.raises(ValueError, match="Apple MPS is not available"):
        v.resolve_device("mps")
