"""The block protocol itself (``hubnorm.blocks``), tested on its own: every shared reduction run by the plain block
loop over many small blocks equals its dense float64 form, the fast kernels equal the block loop, the partial /
merge / finalize pieces against hand-computed values, and the declarations (inputs, parameters, limits) by their
messages. The methods' tests reach these pieces only through whole fits; a wrong merge or a lost block offset
would show there only as a drift of a few ranks."""

from __future__ import annotations

import math
import typing

import pytest
import torch

from hubnorm import blocks
from hubnorm.blocks import (
    Chunk, Embeddings, Inputs, Iteration, LogMeanExp, LogSumExp, Mean, Moments, Param, Scores, TopK, TopKResult,
    check_limits, concat, limit_of, log_mean_exp, reduce_blocks,
)
from hubnorm.engine import LocalEngine


def _data(n_r=23, n_c=17, d=5, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    rows = torch.randn(n_r, d, generator=g, dtype=torch.float64)
    cols = torch.randn(n_c, d, generator=g, dtype=torch.float64)
    return rows.to(dtype), cols.to(dtype)


#: a block budget of 64 bytes: blocks of a few rows and columns, so every reduction merges many partials
TINY = 64


class _Spy(blocks.Reduction):
    """Records the blocks the plain loop hands out (their shapes and offsets)."""

    def __init__(self, axis, whole_rows=False):
        self.source, self.axis, self.whole_rows = Scores("r", "c"), axis, whole_rows
        self.seen = []

    def partial(self, s, chunk):
        self.seen.append((tuple(s.shape), chunk.row_start, chunk.col_start))
        return s.sum(dim=self.axis)

    def merge(self, a, b):
        return a + b


# ------------------------------------------------------------------------------------------------ declarations
def test_scores_names_and_text():
    s = Scores("query_bank", ["targets", "target_bank"])
    assert s.cols == ("targets", "target_bank")          # a list is stored as a tuple (hashable)
    assert s.col_names == ("targets", "target_bank")
    assert s.names() == ("query_bank", "targets", "target_bank")
    assert str(s) == "query_bank x [targets ; target_bank] scores"
    one = Scores("query_bank", "targets")
    assert one.col_names == ("targets",) and one.names() == ("query_bank", "targets")
    assert str(one) == "query_bank x targets scores"
    assert hash(s) == hash(Scores("query_bank", ("targets", "target_bank")))
    assert Embeddings("target_bank").names() == ("target_bank",)


def test_inputs_usage():
    inp = Inputs(fit=(Scores("query_bank", "targets"), Scores("target_bank", "targets", required=False),
                      Embeddings("queries", required=False)))
    assert inp.usage("query_bank") == "required"
    assert inp.usage("targets") == "required"             # required by the first, optional in the second
    assert inp.usage("target_bank") == "optional"
    assert inp.usage("queries") == "optional"
    assert inp.usage("nothing") == "unused"
    assert Inputs().usage("targets") == "unused"


@pytest.mark.parametrize("kind,good,extra", [
    ("real", 0.25, {}), ("positive", 2.0, {}), ("int", 3, {}), ("seed", 7, {}), ("bytes", 0, {}),
    ("dtype", torch.float32, {}), ("choice", "b", {"choices": ("a", "b")}), ("real", 1.5, {"minimum": 1.0}),
])
def test_param_accepts_and_refuses(kind, good, extra):
    p = Param(kind, **extra)
    assert p.check(good, "x") == good
    bad = p.invalid_values()
    assert bad, f"a {kind} parameter lists no invalid value"
    for value, exc, pattern in bad:
        with pytest.raises(exc, match=pattern) as err:
            p.check(value, "my_param")
        assert "my_param" in str(err.value), f"{kind}: the message does not name the parameter"


def test_param_optional_and_choice_message():
    assert Param("int", optional=True).check(None, "k") is None
    with pytest.raises(TypeError, match="k"):
        Param("int").check(None, "k")
    with pytest.raises(ValueError, match=r"mode must be one of \['a', 'b'\]; got 'c'"):
        Param("choice", choices=("b", "a")).check("c", "mode")
    # the real kind's minimum is enforced, and its refusal lists a value just below it
    with pytest.raises(ValueError, match=">= 1.0"):
        Param("real", minimum=1.0).check(0.5, "alpha")
    assert (0.0, ValueError, "must be >= 1.0") in Param("real", minimum=1.0).invalid_values()
    # a positive number refuses 0 and negatives; an unbounded real accepts them
    assert Param("real").check(-3.0, "alpha") == -3.0
    with pytest.raises(ValueError, match="> 0"):
        Param("positive").check(0, "tau")


def test_check_limits_and_limit_of():
    params = {"k": Param("int", limited_by=("query_bank", "targets")), "tau": Param("positive")}
    sizes = {"query_bank": 10, "targets": 6}.get
    check_limits(params, {"k": 6, "tau": 0.1}, sizes)
    with pytest.raises(ValueError, match=r"k=.*7.*the number of targets"):
        check_limits(params, {"k": 7}, sizes)
    with pytest.raises(ValueError, match="the query bank size"):
        check_limits(params, {"k": 11}, {"query_bank": 10, "targets": 60}.get)
    check_limits(params, {"k": None}, sizes)                 # an unset value is not checked
    check_limits(params, {"k": 10 ** 6}, {}.get)             # no input there: nothing limits it
    with pytest.raises(ValueError, match="the size of other"):
        check_limits({"m": Param("int", limited_by=("other",))}, {"m": 3}, {"other": 2}.get)
    assert limit_of(params["k"], sizes) == 6
    assert limit_of(params["k"], {"query_bank": 4}.get) == 4
    assert limit_of(params["k"], {}.get) is None
    assert limit_of(params["tau"], sizes) is None


def test_concat():
    a, b = torch.arange(3.0), torch.arange(3.0, 5.0)
    assert torch.equal(concat([a, b]), torch.arange(5.0))
    assert concat([a]) is a
    pair = concat([(a, a * 2), (b, b * 2)])
    assert isinstance(pair, tuple) and torch.equal(pair[1], torch.arange(5.0) * 2)
    t = concat([TopKResult(a[:, None], None), TopKResult(b[:, None], None)])
    assert isinstance(t, TopKResult) and t.indices is None and t.values.shape == (5, 1)
    assert concat([None, None]) is None


def test_iteration_defaults():
    it = Iteration()
    assert it.fused(None) is NotImplemented
    assert it.result(None, "state") == "state"
    with pytest.raises(NotImplementedError):
        it.start(None)
    with pytest.raises(NotImplementedError):
        it.step(None, None)
    red = blocks.Reduction()
    with pytest.raises(NotImplementedError):
        red.partial(None, None)
    with pytest.raises(NotImplementedError):
        red.merge(None, None)
    assert red.finalize("p", 3) == "p"
    assert red.reduce_scores(None, 3) is NotImplemented


def test_engine_members_match_the_protocol():
    hints = set(typing.get_type_hints(blocks.Engine))
    methods = {n for n, v in vars(blocks.Engine).items() if callable(v) and not n.startswith("_")}
    assert set(blocks.ENGINE_MEMBERS) == hints | methods
    rows, cols = _data()
    assert isinstance(LocalEngine({"targets": cols, "query_bank": rows}), blocks.Engine)


# ------------------------------------------------------------------------------------------------ the block loop
@pytest.mark.parametrize("axis", [0, 1])
def test_block_loop_covers_every_cell_once(axis):
    rows, cols = _data(n_r=11, n_c=9)
    spy = _Spy(axis)
    out = reduce_blocks(spy, Chunk(rows, cols, row_start=100, col_start=200, block_bytes=TINY))
    dense = (rows @ cols.T).sum(dim=axis)
    torch.testing.assert_close(out, dense, rtol=1e-12, atol=1e-12)
    assert len(spy.seen) > 4, "the budget should cut the matrix into many blocks"
    cells = sum(r * c for (r, c), _, _ in spy.seen)
    assert cells == rows.shape[0] * cols.shape[0]
    assert all(r * c * 8 <= TINY for (r, c), _, _ in spy.seen)
    starts = {(r0, c0) for _, r0, c0 in spy.seen}
    assert min(r0 for r0, _ in starts) == 100 and min(c0 for _, c0 in starts) == 200
    assert max(r0 for r0, _ in starts) > 100 and max(c0 for _, c0 in starts) > 200


def test_block_loop_whole_rows():
    rows, cols = _data(n_r=11, n_c=9)
    spy = _Spy(1, whole_rows=True)
    out = reduce_blocks(spy, Chunk(rows, cols, block_bytes=TINY * 2))
    torch.testing.assert_close(out, (rows @ cols.T).sum(dim=1), rtol=1e-12, atol=1e-12)
    assert all(c == 9 for (_, c), _, _ in spy.seen) and len(spy.seen) > 1


def test_block_loop_embeddings():
    x, _ = _data(n_r=13)
    red = Mean("target_bank")
    red.out_dtype = torch.float64
    p = reduce_blocks(red, Chunk(x, block_bytes=TINY))
    torch.testing.assert_close(red.finalize(p, x.shape[0]), x.mean(dim=0), rtol=1e-12, atol=1e-12)
    spy_starts = []

    class Starts(Mean):
        def partial(self, s, chunk):
            spy_starts.append((chunk.row_start, s.shape[0]))
            return super().partial(s, chunk)

    reduce_blocks(Starts("t"), Chunk(x, row_start=5, block_bytes=TINY))
    assert spy_starts[0][0] == 5 and len(spy_starts) > 1
    assert [a for a, _ in spy_starts] == [5 + sum(n for _, n in spy_starts[:i]) for i in range(len(spy_starts))]


def test_block_loop_side_terms_are_sliced_with_their_block():
    rows, cols = _data(n_r=10, n_c=8)
    rt = torch.linspace(-1, 1, 10, dtype=torch.float64)
    ct = torch.linspace(2, 3, 8, dtype=torch.float64)

    class Terms(_Spy):
        def partial(self, s, chunk):
            return (s + chunk.row_terms[:, None] + chunk.col_terms[None, :]).sum(dim=self.axis)

    for axis in (0, 1):
        out = reduce_blocks(Terms(axis), Chunk(rows, cols, row_terms=rt, col_terms=ct, block_bytes=TINY))
        dense = (rows @ cols.T + rt[:, None] + ct[None, :]).sum(dim=axis)
        torch.testing.assert_close(out, dense, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------------------------------ TopK
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("k", [1, 4, 30])
def test_topk_block_loop_equals_dense(axis, k):
    rows, cols = _data(n_r=23, n_c=17)
    s = rows @ cols.T
    red = TopK(Scores("query_bank", "targets"), k, axis=axis, indices=True, fast=False)
    out = red.reduce_whole(Chunk(rows, cols, block_bytes=TINY), s.shape[axis])
    x = s if axis == 1 else s.T
    kk = min(k, x.shape[1])
    v, i = x.topk(kk, dim=1)
    torch.testing.assert_close(out.values[:, :kk], v, rtol=1e-12, atol=1e-12)   # block products round apart
    assert torch.equal(out.indices[:, :kk], i)
    if k > kk:   # fewer reduced items than k: padded with -inf and index -1
        assert torch.all(out.values[:, kk:] == -math.inf) and torch.all(out.indices[:, kk:] == -1)
    # the fast kernel gives the same values and the same indices (no ties in random data)
    fast = TopK(Scores("query_bank", "targets"), k, axis=axis, indices=True).reduce_chunk(Chunk(rows, cols))
    torch.testing.assert_close(fast.values, out.values, rtol=1e-12, atol=1e-12)
    assert torch.equal(fast.indices, out.indices)
    # and from a given score matrix
    given = red.reduce_scores(s, s.shape[axis])
    assert given is NotImplemented
    given = TopK(Scores("query_bank", "targets"), k, axis=axis, indices=True).reduce_scores(s, s.shape[axis],
                                                                                           block_bytes=TINY)
    torch.testing.assert_close(given.values[:, :kk], v, rtol=0, atol=0)        # the entries themselves
    assert torch.equal(given.indices, out.indices)


def test_topk_offsets_and_no_indices():
    rows, cols = _data(n_r=9, n_c=7)
    s = rows @ cols.T
    red = TopK(Scores("a", "b"), 3, axis=0, indices=True, fast=False)
    out = reduce_blocks(red, Chunk(rows, cols, row_start=40, col_start=90, block_bytes=TINY))
    assert torch.equal(out.indices, s.T.topk(3, dim=1).indices + 40)      # axis 0: indices of rows
    red1 = TopK(Scores("a", "b"), 3, axis=1, indices=True)
    out1 = red1.reduce_chunk(Chunk(rows, cols, row_start=40, col_start=90))
    assert torch.equal(out1.indices, s.topk(3, dim=1).indices + 90)      # axis 1: indices of columns
    out0 = TopK(Scores("a", "b"), 3, axis=0, indices=True).reduce_chunk(Chunk(rows, cols, row_start=40))
    assert torch.equal(out0.indices, s.T.topk(3, dim=1).indices + 40)
    plain = TopK(Scores("a", "b"), 3, axis=1, indices=False, fast=False)
    assert reduce_blocks(plain, Chunk(rows, cols, block_bytes=TINY)).indices is None
    assert TopK(Scores("a", "b"), 3, axis=1).reduce_chunk(Chunk(rows, cols)).indices is None
    assert TopK(Scores("a", "b"), 3, axis=1).reduce_scores(s, 7).indices is None


def test_topk_merge_by_hand():
    red = TopK(Scores("a", "b"), 2, axis=1, indices=True)
    a = TopKResult(torch.tensor([[5.0, 1.0]]), torch.tensor([[0, 1]]))
    b = TopKResult(torch.tensor([[4.0, 3.0]]), torch.tensor([[7, 8]]))
    m = red.merge(a, b)
    assert m.values.tolist() == [[5.0, 4.0]] and m.indices.tolist() == [[0, 7]]
    m = red.merge(TopKResult(a.values, None), TopKResult(b.values, None))
    assert m.indices is None and m.values.tolist() == [[5.0, 4.0]]
    # a block of fewer than k reduced items is padded
    p = TopK(Scores("a", "b"), 3, axis=1, indices=True).partial(torch.tensor([[1.0, 2.0]]), Chunk(None, col_start=4))
    assert p.values.tolist() == [[2.0, 1.0, -math.inf]] and p.indices.tolist() == [[5, 4, -1]]


def test_topk_small_chunk_is_padded_by_the_kernels():
    # the padding's index is -1 whatever the chunk's offset (it was offset with the real ones: 2 for row_start=3)
    rows, cols = _data(n_r=2, n_c=6)
    s = rows @ cols.T
    out = TopK(Scores("a", "b"), 4, axis=0, indices=True).reduce_chunk(Chunk(rows, cols, row_start=3))
    assert out.values.shape == (6, 4)
    torch.testing.assert_close(out.values[:, :2], s.T.topk(2, dim=1).values, rtol=1e-12, atol=1e-12)
    assert torch.all(out.values[:, 2:] == -math.inf) and torch.all(out.indices[:, 2:] == -1)
    assert torch.equal(out.indices[:, :2], s.T.topk(2, dim=1).indices + 3)
    given = TopK(Scores("a", "b"), 4, axis=0, indices=True).reduce_scores(s, 2)
    assert torch.all(given.values[:, 2:] == -math.inf) and torch.all(given.indices[:, 2:] == -1)
    torch.testing.assert_close(given.values[:, :2], s.T.topk(2, dim=1).values, rtol=0, atol=0)


# ------------------------------------------------------------------------------------------------ LogMeanExp
def _engine(rows, cols, **kw):
    return LocalEngine({"query_bank": rows, "targets": cols}, **kw)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("scale", [0.7, -2.0, 25.0])
def test_log_mean_exp_equals_dense(axis, scale):
    rows, cols = _data(n_r=23, n_c=17)
    s = rows @ cols.T
    dense = torch.logsumexp(scale * s, dim=axis) - math.log(s.shape[axis])
    src = Scores("query_bank", "targets")
    for plain in (False, True):
        out = log_mean_exp(_engine(rows, cols, plain=plain, block_bytes=TINY), src, scale, axis=axis)
        torch.testing.assert_close(out, dense, rtol=1e-12, atol=1e-12)
    red = LogMeanExp(src, scale, axis=axis)
    red.prepare(_engine(rows, cols))
    torch.testing.assert_close(red.reduce_scores(s.clone(), s.shape[axis], block_bytes=TINY), dense,
                               rtol=1e-12, atol=1e-12)


def test_log_mean_exp_scale_zero_is_exactly_zero():
    rows, cols = _data(n_r=23, n_c=17, dtype=torch.float32)
    eng = _engine(rows, cols)
    z0 = log_mean_exp(eng, Scores("query_bank", "targets"), 0.0, axis=0)
    z1 = log_mean_exp(eng, Scores("query_bank", "targets"), 0.0, axis=1)
    assert z0.shape == (17,) and z1.shape == (23,)
    assert z0.dtype == torch.float32 and torch.all(z0 == 0) and torch.all(z1 == 0)
    z2 = log_mean_exp(LocalEngine({"query_bank": rows, "targets": cols, "target_bank": cols[:5]}),
                      Scores("query_bank", ("targets", "target_bank")), 0.0, axis=0)
    assert z2.shape == (22,)


def test_log_mean_exp_merge_finalize_by_hand():
    red = LogMeanExp(Scores("a", "b"), 1.0)
    red.work = torch.float64
    a, b = torch.tensor([0.0], dtype=torch.float32), torch.tensor([math.log(3.0)], dtype=torch.float64)
    m = red.merge(a, b)
    assert m.dtype == torch.float64
    torch.testing.assert_close(m, torch.tensor([math.log(4.0)], dtype=torch.float64))
    torch.testing.assert_close(red.finalize(m, 4), torch.tensor([0.0], dtype=torch.float64), rtol=0, atol=1e-15)
    s = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
    red2 = LogMeanExp(Scores("a", "b"), 2.0, axis=1)
    torch.testing.assert_close(red2.partial(s.clone(), None), torch.logsumexp(2 * s, dim=1))
    torch.testing.assert_close(LogMeanExp(Scores("a", "b"), 2.0, axis=0).partial(s.clone(), None),
                               torch.logsumexp(2 * s, dim=0))


def test_log_mean_exp_working_dtype_and_errors():
    rows, cols = _data(n_r=23, n_c=17, dtype=torch.float32)
    red = LogMeanExp(Scores("query_bank", "targets"), 1.0, unit=1.0)
    red.prepare(_engine(rows, cols))
    assert red.work == torch.float32 and red.dtype == torch.float32 and red.cache is None
    big = LogMeanExp(Scores("query_bank", "targets"), 1e5, unit=1.0, name="tau=1e-05")
    big.prepare(_engine(rows, cols))
    assert big.work == torch.float64            # float32 cannot hold 1e5-scaled scores to 1 score unit's precision
    with pytest.raises(ValueError, match="^scale is too extreme"):   # the default name of the parameter
        LogMeanExp(Scores("query_bank", "targets"), 1e308).prepare(_engine(rows, cols))
    assert LogMeanExp(Scores("a", "b"), -4.0).unit == 4.0
    assert LogMeanExp(Scores("a", "b"), 4.0, unit=-0.5).unit == 0.5
    with pytest.raises(ValueError, match="tau=1e-308 is too extreme"):   # scale * |s| overflows float64
        LogMeanExp(Scores("query_bank", "targets"), 1e308, name="tau=1e-308").prepare(_engine(rows, cols))
    # inside a sweep the engine hands out a cache for the similarity blocks of this score matrix
    sweep = _engine(rows, cols, sweep_bytes=10 ** 9)
    red = LogMeanExp(Scores("query_bank", "targets"), 1.0, axis=1)
    red.prepare(sweep)
    assert isinstance(red.cache, dict)
    tight = _engine(rows, cols, sweep_bytes=23 * 17 * 4 - 1)
    red.prepare(tight)
    assert red.cache is None                   # the blocks (23 x 17 float32) exceed the sweep budget


def test_log_mean_exp_function_hands_on_unit_and_name():
    """``log_mean_exp(engine, ...)`` passes ``unit`` (the precision rule's divisor) and ``name`` (the parameter its
    refusal names) to the reduction it runs."""
    rows, cols = _data(n_r=23, n_c=17, dtype=torch.float32)
    rows, cols = rows / rows.norm(dim=1, keepdim=True), cols / cols.norm(dim=1, keepdim=True)
    eng = _engine(rows, cols)
    src = Scores("query_bank", "targets")
    assert log_mean_exp(eng, src, 1e3).dtype == torch.float32                  # unit = scale: a relative error
    assert log_mean_exp(eng, src, 1e3, unit=1.0).dtype == torch.float64        # unit 1: absolute, promoted
    with pytest.raises(ValueError, match="^beta_query is too extreme"):
        log_mean_exp(eng, src, 1e3, unit=1e-20, name="beta_query")


# ------------------------------------------------------------------------------------------------ LogSumExp
@pytest.mark.parametrize("axis", [0, 1])
def test_log_sum_exp_with_terms_equals_dense(axis):
    rows, cols = _data(n_r=12, n_c=9)
    s = rows @ cols.T
    rt = torch.linspace(-1, 2, 12, dtype=torch.float64)
    ct = torch.linspace(0, 1, 9, dtype=torch.float64)
    dense = torch.logsumexp(3.0 * s + rt[:, None] + ct[None, :], dim=axis)
    red = LogSumExp(Scores("query_bank", "targets"), 3.0, torch.float64, axis=axis, row_terms=rt, col_terms=ct,
                    post=lambda x: 2 * x)
    out = _engine(rows, cols, plain=True, block_bytes=TINY).reduce(red)
    torch.testing.assert_close(out, 2 * dense, rtol=1e-12, atol=1e-12)
    bare = LogSumExp(Scores("query_bank", "targets"), 3.0, torch.float64, axis=axis)
    out = _engine(rows, cols, plain=True, block_bytes=TINY).reduce(bare)
    torch.testing.assert_close(out, torch.logsumexp(3.0 * s, dim=axis), rtol=1e-12, atol=1e-12)
    only_rows = LogSumExp(Scores("query_bank", "targets"), 3.0, torch.float64, axis=axis, row_terms=rt)
    torch.testing.assert_close(_engine(rows, cols, plain=True, block_bytes=TINY).reduce(only_rows),
                               torch.logsumexp(3.0 * s + rt[:, None], dim=axis), rtol=1e-12, atol=1e-12)
    only_cols = LogSumExp(Scores("query_bank", "targets"), 3.0, torch.float64, axis=axis, col_terms=ct)
    torch.testing.assert_close(_engine(rows, cols, plain=True, block_bytes=TINY).reduce(only_cols),
                               torch.logsumexp(3.0 * s + ct[None, :], dim=axis), rtol=1e-12, atol=1e-12)


def test_log_sum_exp_float32_work_gives_float64():
    rows, cols = _data(n_r=6, n_c=5, dtype=torch.float32)
    red = LogSumExp(Scores("query_bank", "targets"), 1.0, torch.float32, axis=1)
    out = _engine(rows, cols, plain=True).reduce(red)
    assert out.dtype == torch.float64 and red.dtype == torch.float32


# ------------------------------------------------------------------------------------------------ Moments, Mean
@pytest.mark.parametrize("axis", [0, 1])
def test_moments_equal_dense(axis):
    rows, cols = _data(n_r=23, n_c=17)
    s = rows @ cols.T
    for plain in (True, False):
        mean, sd = _engine(rows, cols, plain=plain, block_bytes=TINY).reduce(
            Moments(Scores("query_bank", "targets"), axis=axis))
        torch.testing.assert_close(mean, s.mean(dim=axis), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(sd, s.std(dim=axis, unbiased=False), rtol=1e-10, atol=1e-12)
        assert mean.dtype == torch.float64


def test_moments_by_hand():
    red = Moments(Scores("a", "b"), axis=0)
    assert red.read_only
    p = red.partial(torch.tensor([[1.0, 2.0], [3.0, 2.0]]), None)
    assert [t.tolist() for t in p] == [[4.0, 4.0], [10.0, 8.0]]
    m = red.merge(p, p)
    assert [t.tolist() for t in m] == [[8.0, 8.0], [20.0, 16.0]]
    mean, sd = red.finalize(p, 2)
    assert mean.tolist() == [2.0, 2.0] and sd.tolist() == [1.0, 0.0] and mean.dtype == torch.float32
    # rounding may make sumsq / n - mean^2 slightly negative: clamped to 0, never NaN
    mean, sd = red.finalize((torch.tensor([3.0], dtype=torch.float64),
                             torch.tensor([3.0 - 1e-15], dtype=torch.float64)), 3)
    assert sd.tolist() == [0.0]


def test_mean_equals_dense():
    x, _ = _data(n_r=23, dtype=torch.float32)
    eng = LocalEngine({"target_bank": x}, block_bytes=TINY)
    torch.testing.assert_close(eng.reduce(Mean("target_bank")), x.mean(dim=0), rtol=0, atol=0)
    plain = LocalEngine({"target_bank": x}, block_bytes=TINY, plain=True).reduce(Mean("target_bank"))
    assert plain.dtype == torch.float32
    torch.testing.assert_close(plain, x.double().mean(dim=0).float(), rtol=1e-6, atol=1e-7)
    red = Mean("t")
    assert red.source == Embeddings("t") and red.axis == 0
    assert red.partial(torch.tensor([[1.0, 2.0], [3.0, 5.0]]), None).tolist() == [4.0, 7.0]
    assert red.merge(torch.tensor([1.0]), torch.tensor([2.0])).tolist() == [3.0]
    assert red.finalize(torch.tensor([4.0, 7.0], dtype=torch.float64), 2).tolist() == [2.0, 3.5]
    assert red.finalize(torch.tensor([4.0], dtype=torch.float64), 2).dtype == torch.float32


# ------------------------------------------------------------------------------------------------ what reaches the kernels
def test_the_reductions_hand_their_settings_to_the_kernels(monkeypatch):
    """The block budget, the top-k backend, the working dtype and a sweep's block cache reach the kernels (a lost
    budget would compute one whole score matrix at once; a lost dtype would compute in the inputs' precision)."""
    seen = {}

    def spy(name, real):
        def f(*args, **kwargs):
            seen[name] = kwargs
            return real(*args, **kwargs)
        return f

    for name in ("topk_similarity", "topk_scores", "logsumexp_similarity", "logsumexp_scores"):
        monkeypatch.setattr(blocks, name, spy(name, getattr(blocks, name)))
    rows, cols = _data(n_r=23, n_c=17, dtype=torch.float32)
    s = rows @ cols.T
    TopK(Scores("a", "b"), 3).reduce_chunk(Chunk(rows, cols, block_bytes=4096, backend="numpy"))
    assert seen["topk_similarity"] == {"block_bytes": 4096, "backend": "numpy"}
    TopK(Scores("a", "b"), 3).reduce_scores(s, 23, block_bytes=2048)
    assert seen["topk_scores"] == {"block_bytes": 2048, "visit": None}
    strips = []
    TopK(Scores("a", "b"), 3).reduce_scores(s, 23, block_bytes=2048, visit=lambda b, r0: strips.append(r0))
    assert seen["topk_scores"]["visit"] is not None and strips[0] == 0 and strips == sorted(set(strips))
    assert LogMeanExp(Scores("a", "b"), 2.0).reduce_scores(s, 23, visit=lambda b, r0: None) is NotImplemented
    red = LogMeanExp(Scores("query_bank", "targets"), 1e5, unit=1.0)
    red.prepare(_engine(rows, cols))
    cache = {}
    red.reduce_chunk(Chunk(rows, cols, block_bytes=1024, cache=cache))
    assert seen["logsumexp_similarity"] == {"block_bytes": 1024, "dtype": torch.float64, "shared_blocks": cache}
    assert cache, "the sweep's cache was not filled"
    red.reduce_scores(s, 23, block_bytes=512)
    assert seen["logsumexp_scores"] == {"dtype": torch.float64, "block_bytes": 512}


def test_log_mean_exp_prepare_asks_for_the_right_sizes(monkeypatch):
    """The working dtype is chosen from the engine's base dtype, the score bound, the length of the reduced axis
    and the scale; the sweep cache is asked for by this matrix and axis with its size in the engine's dtype."""
    asked, shared = [], []

    class Fake:
        dtype = torch.float64

        def score_bound(self, source):
            return 2.5

        def size(self, name):
            return {"query_bank": 7, "targets": 5, "target_bank": 3}[name]

        def base_dtype(self, source):
            assert source == src, "base_dtype is asked about another score matrix"
            return torch.float16

        def shared(self, key, nbytes):
            shared.append((key, nbytes))
            return None

    monkeypatch.setattr(blocks, "log_mean_exp_dtype", lambda *a: asked.append(a) or torch.float64)
    src = Scores("query_bank", ("targets", "target_bank"))
    for axis, reduced in ((0, 7), (1, 8)):
        asked.clear(), shared.clear()
        red = LogMeanExp(src, -3.0, unit=0.5, name="beta", axis=axis)
        red.prepare(Fake())
        assert asked == [(torch.float16, 2.5, reduced, 3.0, 0.5, "beta")]
        assert shared == [(("similarity blocks", src, axis), 7 * 8 * 8)]    # 7 x 8 cells in the engine's float64
        assert red.work == red.dtype == torch.float64


def test_the_default_axis_is_over_the_rows():
    rows, cols = _data(n_r=23, n_c=17)
    assert LogMeanExp(Scores("a", "b"), 1.0).axis == 0 and TopK(Scores("a", "b"), 2).axis == 0
    assert Moments(Scores("a", "b")).axis == 0
    out = log_mean_exp(_engine(rows, cols), Scores("query_bank", "targets"), 2.0)
    assert out.shape == (17,)       # one value per target: the reduction over the bank's rows
    assert log_mean_exp(_engine(rows, cols), Scores("query_bank", "targets"), 0.0).shape == (17,)


def test_dtypes_of_the_results():
    rows32, cols32 = _data(n_r=5, n_c=4, dtype=torch.float32)
    # the padding of a short top-k keeps the values' dtype and the indices' integer type
    p = TopK(Scores("a", "b"), 6, axis=1, indices=True).reduce_chunk(Chunk(rows32, cols32, backend="torch"))
    assert p.values.dtype == torch.float32 and p.indices.dtype == torch.long
    # log_mean_exp at scale 0 is zero in the engine's dtype
    rows64, cols64 = _data(n_r=5, n_c=4)
    assert log_mean_exp(_engine(rows64, cols64), Scores("query_bank", "targets"), 0.0).dtype == torch.float64
    # merging float32 partials happens in float64; finalize returns the working dtype
    red = LogMeanExp(Scores("a", "b"), 1.0)
    red.work = torch.float32
    m = red.merge(torch.zeros(2, dtype=torch.float32), torch.zeros(2, dtype=torch.float32))
    assert m.dtype == torch.float64 and red.finalize(m, 2).dtype == torch.float32
    assert red.merge(torch.zeros(2, dtype=torch.float64), torch.zeros(2, dtype=torch.float32)).dtype == torch.float64
    mean, sd = Moments(Scores("a", "b")).finalize((torch.zeros(2, dtype=torch.float64),
                                                   torch.ones(2, dtype=torch.float64)), 2)
    assert mean.dtype == sd.dtype == torch.float32
    eng = LocalEngine({"target_bank": rows64}, plain=True)
    assert eng.reduce(Mean("target_bank")).dtype == torch.float64


def test_moments_and_mean_accumulate_in_float64():
    """Scores far from 0 with a small spread: float32 sums of s and s**2 would cancel to noise."""
    g = torch.Generator().manual_seed(3)
    s = (1000.0 + 0.01 * torch.randn(20000, 3, generator=g, dtype=torch.float64)).float()
    mom = Moments(Scores("a", "b"), axis=0)
    mom.out_dtype = torch.float64
    mean, sd = mom.finalize(mom.partial(s, None), s.shape[0])
    ref = s.double()
    torch.testing.assert_close(mean, ref.mean(dim=0), rtol=1e-12, atol=0)
    torch.testing.assert_close(sd, ref.std(dim=0, unbiased=False), rtol=1e-3, atol=0)   # float32 sums: > 100% off
    red = Mean("t")
    red.out_dtype = torch.float64
    torch.testing.assert_close(red.finalize(red.partial(s, None), s.shape[0]), ref.mean(dim=0), rtol=1e-12, atol=0)
