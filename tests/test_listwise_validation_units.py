"""Unit checks of hubnorm.listwise.validation, the input checks the listwise modules share: ``index_array``,
``check_tau``, ``check_scores`` and ``check_relevance`` at their boundaries (the value just allowed and the one just
refused), each way of failing on its own (so that no ``or`` of two conditions can stand in for the other), every
message by its full text, and what each returns (dtype, identity, device) on numpy, list and torch input.

Mutation run: the default selection (``tests/test_validation.py``, which tests ``hubnorm._validation``) reaches
no function of this module: mutmut stops with "no test case for any mutant" (0 of 92 killed). With
``--tests tests/test_validation.py`` + this file: 92 of 92 killed (100%); no survivor, so none is listed as
equivalent. The dtype of ``np.asarray(..., dtype=np.float64)`` in ``check_scores`` / ``check_relevance`` is pinned
by float32 and longdouble numpy input (torch reads no longdouble), the device of ``like`` by a ``meta`` tensor.
"""

import numpy as np
import pytest
import torch

from hubnorm.listwise import validation as v


# --------------------------------------------------------------------------------------------- index_array
def test_index_array_returns_int64_copies_of_numpy_lists_and_tensors():
    out = v.index_array(np.array([2, 0, 1], dtype=np.int32), "idx", 3)
    assert out.dtype == np.int64 and out.tolist() == [2, 0, 1]
    assert v.index_array([0, 4, 4], "idx").tolist() == [0, 4, 4]
    t = torch.tensor([1, 0], dtype=torch.int16)
    out = v.index_array(t, "idx", 2)
    assert isinstance(out, np.ndarray) and out.dtype == np.int64 and out.tolist() == [1, 0]
    big = v.index_array(np.array([0, 10 ** 12]), "idx")            # no upper: any non-negative index
    assert big.tolist() == [0, 10 ** 12]
    assert v.index_array(np.array([0]), "idx", 1).tolist() == [0]  # 0 and upper - 1 are both allowed


def test_index_array_reads_a_tensor_that_requires_grad_before_refusing_its_dtype():
    t = torch.tensor([0.0, 1.0], requires_grad=True)                # numpy() alone would raise a RuntimeError
    with pytest.raises(ValueError, match=r"^idx must be a non-empty 1-D array of integer indices; got shape \(2,\), "
                                         r"dtype float32$"):
        v.index_array(t, "idx", 3)


@pytest.mark.parametrize("bad, shape, dtype", [
    (np.zeros((2, 2), dtype=np.int64), "(2, 2)", "int64"),          # 2-D
    (np.int64(3), "()", "int64"),                                   # 0-D
    (np.zeros(0, dtype=np.int64), "(0,)", "int64"),                 # empty
    (np.array([0.0, 1.0]), "(2,)", "float64"),                      # floating point
    (np.array([True, False]), "(2,)", "bool"),                      # booleans are not indices
])
def test_index_array_refuses_what_is_not_a_non_empty_1d_integer_array(bad, shape, dtype):
    msg = f"my_idx must be a non-empty 1-D array of integer indices; got shape {shape}, dtype {dtype}"
    with pytest.raises(ValueError, match="^" + msg.replace("(", r"\(").replace(")", r"\)") + "$"):
        v.index_array(bad, "my_idx", 5)


def test_index_array_range_guard_at_both_ends():
    with pytest.raises(ValueError, match=r"^c2i must lie in \[0, 3\); got range \[-1, 2\]$"):
        v.index_array(np.array([2, -1]), "c2i", 3)
    with pytest.raises(ValueError, match=r"^c2i must lie in \[0, 3\); got range \[0, 3\]$"):
        v.index_array(np.array([3, 0]), "c2i", 3)
    with pytest.raises(ValueError, match=r"^c2i must lie in \[0, None\); got range \[-2, 7\]$"):
        v.index_array(np.array([7, -2]), "c2i")
    assert v.index_array(np.array([2, 0]), "c2i", 3).tolist() == [2, 0]


# ----------------------------------------------------------------------------------------------- check_tau
@pytest.mark.parametrize("tau, want", [(1, 1.0), (0.01, 0.01), (np.float32(0.5), 0.5), (np.int64(2), 2.0),
                                       (1e-300, 1e-300), (1e300, 1e300)])
def test_check_tau_accepts_finite_positive_numbers_as_python_floats(tau, want):
    out = v.check_tau(tau)
    assert type(out) is float and out == want


@pytest.mark.parametrize("tau, shown", [(0, "0"), (0.0, "0.0"), (-0.5, "-0.5"), (True, "True"), (False, "False"),
                                        (float("nan"), "nan"), (float("inf"), "inf"), (np.float64("-inf"), "-inf"),
                                        ("0.1", "'0.1'"), (None, "None"), (np.array(0.1), "array(0.1)")])
def test_check_tau_refuses_everything_else_by_its_message(tau, shown):
    with pytest.raises(ValueError) as info:
        v.check_tau(tau)
    assert str(info.value) in (f"tau must be a finite number > 0; got {shown}",
                               f"tau must be a finite number > 0; got np.float64({shown})")


# -------------------------------------------------------------------------------------------- check_scores
def test_check_scores_numpy_and_lists_become_float64():
    for x in ([[1, 2, 3]], np.array([[1, 2]], dtype=np.int32), np.array([[0.5, 0.25]], dtype=np.float32),
              np.array([[0.5, 1.5]], dtype=np.longdouble)):
        out = v.check_scores(x)
        assert isinstance(out, torch.Tensor) and out.dtype == torch.float64
        np.testing.assert_array_equal(out.numpy(), np.asarray(x, dtype=np.float64))


def test_check_scores_floating_tensors_pass_through_and_integer_tensors_become_float64():
    t = torch.tensor([[0.5, -1.0]], dtype=torch.float32)
    assert v.check_scores(t) is t
    h = torch.tensor([[0.5, 2.0]], dtype=torch.float16)
    assert v.check_scores(h) is h
    out = v.check_scores(torch.tensor([[1, 2], [3, 4]]))
    assert out.dtype == torch.float64 and out.tolist() == [[1.0, 2.0], [3.0, 4.0]]


@pytest.mark.parametrize("shape", [(3,), (0, 3), (3, 0), (2, 2, 2), ()])
def test_check_scores_refuses_what_is_not_a_non_empty_matrix(shape):
    msg = (r"^S must be a non-empty 2-D \(queries x candidates\) matrix; got shape "
           + str(tuple(shape)).replace("(", r"\(").replace(")", r"\)") + "$")
    with pytest.raises(ValueError, match=msg):
        v.check_scores(np.zeros(shape), "S")
    with pytest.raises(ValueError, match=msg):
        v.check_scores(torch.zeros(shape), "S")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_check_scores_refuses_nan_and_inf_named(bad):
    x = np.zeros((2, 3))
    x[1, 2] = bad
    with pytest.raises(ValueError, match=r"^scores contain NaN or Inf$"):
        v.check_scores(x)
    with pytest.raises(ValueError, match=r"^bank scores contain NaN or Inf$"):
        v.check_scores(torch.tensor(x, dtype=torch.float32), name="bank scores")


# ----------------------------------------------------------------------------------------- check_relevance
def test_check_relevance_takes_the_dtype_and_device_of_like():
    like32 = torch.zeros(2, 3, dtype=torch.float32)
    rel = [[0, 1, 2], [0.5, 0, 3]]
    out = v.check_relevance(rel, (2, 3), like32)
    assert out.dtype == torch.float32 and out.tolist() == [[0.0, 1.0, 2.0], [0.5, 0.0, 3.0]]
    out = v.check_relevance(np.array(rel, dtype=np.float32), torch.Size([2, 3]), torch.zeros(2, 3, dtype=torch.float64))
    assert out.dtype == torch.float64
    np.testing.assert_array_equal(out.numpy(), np.array(rel, dtype=np.float32).astype(np.float64))
    t = torch.tensor(rel, dtype=torch.float64)
    out = v.check_relevance(t, [2, 3], like32)
    assert out.dtype == torch.float32 and out.tolist() == [[0.0, 1.0, 2.0], [0.5, 0.0, 3.0]]
    meta = torch.empty(2, 3, dtype=torch.float32, device="meta")    # a device other than the relevance's
    out = v.check_relevance(rel, (2, 3), meta)
    assert out.device.type == "meta" and out.dtype == torch.float32


def test_check_relevance_reads_any_numpy_number_type():
    rel = np.array([[1.0, 0.0]], dtype=np.longdouble)               # a dtype torch cannot read: read as float64
    out = v.check_relevance(rel, (1, 2), torch.zeros(1, 2, dtype=torch.float64))
    assert out.tolist() == [[1.0, 0.0]]


def test_check_relevance_guards_by_message():
    like = torch.zeros(2, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"^relevance has shape \(3, 2\) but scores have shape \(2, 3\)$"):
        v.check_relevance(np.zeros((3, 2)), (2, 3), like)
    with pytest.raises(ValueError, match=r"^relevance has shape \(6,\) but scores have shape \(2, 3\)$"):
        v.check_relevance(np.zeros(6), [2, 3], like)
    for bad in (float("nan"), float("inf")):
        r = np.zeros((2, 3))
        r[0, 1] = bad
        with pytest.raises(ValueError, match=r"^relevance contains NaN or Inf$"):
            v.check_relevance(r, (2, 3), like)
    r = np.zeros((2, 3))
    r[1, 0] = -1e-12
    with pytest.raises(ValueError, match=r"^relevance must be non-negative$"):
        v.check_relevance(r, (2, 3), like)
    r[1, 0] = 0.0                                                    # zero is allowed
    assert v.check_relevance(r, (2, 3), like).tolist() == [[0.0] * 3] * 2
    r[1, 0] = 0.5                                                    # a fraction below 1 too
    assert v.check_relevance(r, (2, 3), like)[1, 0].item() == 0.5


def test_unit_rows_is_exported_here():
    from hubnorm import _validation

    assert v.unit_rows is _validation.unit_rows
    assert set(v.__all__) == {"unit_rows", "index_array", "check_tau", "check_scores", "check_relevance"}
