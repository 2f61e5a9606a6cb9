"""Bad input gives a QuantizationError that says what is wrong and what would be valid;
odd-but-valid input (empty, 0-d, strided, Fortran-ordered, Python scalars and lists) works and
matches the onnx reference evaluator.

Every refusal is checked for key words: the operator version ("QuantizeLinear-21"), the
argument at fault, and what is valid.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import oracle
import pytest
from conftest import assert_bits_equal, reference

import qcore

Q21, Q23, DQ21 = "QuantizeLinear-21", "QuantizeLinear-23", "DequantizeLinear-21"
X = np.linspace(-4, 4, 36, dtype=np.float32).reshape(4, 9)
Q8 = np.arange(-18, 18, dtype=np.int8).reshape(4, 9)


def refused(call, *words):
    with pytest.raises(qcore.QuantizationError) as info:
        call()
    message = str(info.value)
    missing = [w for w in words if w.lower() not in message.lower()]
    assert not missing, f"{missing} not in: {message}"
    return message


def q21(*args, **kw):
    return qcore.quantize_linear(*args, opset=21, **kw)


def dq21(*args, **kw):
    return qcore.dequantize_linear(*args, opset=21, **kw)


# ----------------------------------------------------------------------------------------------
# Scales

BAD_SCALES = [0.0, -0.0, -1.0, np.nan, np.inf, -np.inf]


@pytest.mark.parametrize("value", BAD_SCALES, ids=str)
def test_bad_per_tensor_scale(value):
    refused(lambda: q21(X, np.float32(value)), Q21, "y_scale", "positive and finite")
    refused(lambda: dq21(Q8, np.float32(value)), DQ21, "x_scale", "positive and finite")


@pytest.mark.parametrize("value", BAD_SCALES, ids=str)
def test_one_bad_element_of_a_per_axis_or_blocked_scale(value):
    scale = np.full(9, 0.5, np.float32)
    scale[7] = value
    msg = refused(lambda: q21(X, scale, axis=1), Q21, "y_scale", "positive and finite")
    assert "element 7" in msg
    blocked = np.full((4, 3), 0.5, np.float32)
    blocked[2, 1] = value
    refused(lambda: dq21(Q8, blocked, axis=1, block_size=3), DQ21, "x_scale", "element 7")


@pytest.mark.parametrize("value", BAD_SCALES, ids=str)
@pytest.mark.parametrize("rows", [6, 40_000])  # the serial and the parallel kernel
@pytest.mark.parametrize("target", [np.int8, ml_dtypes.uint4, np.int16])
@pytest.mark.parametrize("axis", [1, 0])
def test_bad_blocked_scale_found_by_the_integer_kernel(value, rows, target, axis):
    """The integer kernels check blocked scales on the last axis as they read them, with no
    pass of their own before the call (on an earlier axis they are checked before it): one bad
    scale anywhere (the first, one in the second worker's share, the last) is refused like any
    other, naming its element, and every call is checked again."""
    x = np.ones((rows, 64), np.float32)
    sshape = (rows, 2) if axis == 1 else (-(-rows // 32), 64)
    scale = np.full(sshape, 0.5, np.float32)
    zero_point = np.zeros(sshape, target)
    good = q21(x, scale, zero_point, axis=axis, block_size=32)
    np.testing.assert_array_equal(good.astype(np.int64), 2)
    for i in (0, scale.size // 2 + 3, scale.size - 1):
        bad = scale.copy()
        bad.reshape(-1)[i] = value
        for _ in range(2):
            msg = refused(lambda bad=bad: q21(x, bad, zero_point, axis=axis, block_size=32),
                          Q21, "y_scale", "positive and finite")
            assert f"element {i} " in msg
        np.testing.assert_array_equal(q21(x, scale, zero_point, axis=axis, block_size=32), good)


def test_bad_scale_of_an_empty_x_is_still_refused():
    """No element, so no kernel to find it: the scale is checked before the call."""
    refused(lambda: q21(np.ones((0, 9), np.float32), np.zeros(9, np.float32), axis=1), Q21,
            "y_scale", "positive and finite")


@pytest.mark.parametrize("scale_type", ["float16", "bfloat16"])
def test_bad_16_bit_scale(scale_type):
    dt = oracle.DTYPES[scale_type]
    refused(lambda: q21(X.astype(dt), np.array(0, dt)), Q21, "y_scale", "positive")
    refused(lambda: dq21(Q8, np.array(-2, dt)), DQ21, "x_scale", "positive")


@pytest.mark.parametrize("scale,precision", [(1e-10, "float16"), (1e6, "float16"),
                                             (1e-45, "bfloat16")])
def test_scale_that_vanishes_in_the_division_type(scale, precision):
    # finite and positive as float32, but zero or infinite once rounded to `precision`
    refused(lambda: qcore.quantize_linear(X, np.float32(scale), precision=precision, opset=23),
            Q23, "y_scale", precision, "division type", "positive and finite")


def test_e8m0_nan_scale():
    nan = np.array(0xFF, np.uint8).view(ml_dtypes.float8_e8m0fnu)
    refused(lambda: qcore.quantize_linear(X, nan, opset=24), "QuantizeLinear-24", "y_scale",
            "positive and finite")


@pytest.mark.parametrize("shape,words", [
    ((2, 3), ["fits no granularity", "block_size"]),  # rank 2 without block_size
    ((5,), ["per-axis", "length 5", "x.shape[1] is 9"]),  # per-axis, wrong length
    ((4, 4), ["4 blocks", "no block size", "(4, 3)"]),  # 9 cannot be split into 4 blocks
    ((4, 3, 1), ["blocked", "(4, 3)"]),  # blocked: wrong rank
    ((0,), ["empty"]),  # x is not empty: an empty scale fits nothing
])
def test_scale_shape_fitting_no_granularity(shape, words):
    scale = np.full(shape, 0.5, np.float32)
    kw = {"axis": 1, "block_size": 3} if len(shape) > 1 and "fits no" not in words[0] else {}
    refused(lambda: q21(X, scale, **kw), Q21, "y_scale", *words)
    refused(lambda: dq21(Q8, scale, **kw), DQ21, "x_scale", *words)


def test_blocked_scale_at_a_version_without_blocks():
    refused(lambda: qcore.quantize_linear(X, np.full((4, 3), 0.5, np.float32), axis=1,
                                          opset=19),
            "QuantizeLinear-19", "y_scale", "per-axis")


# ----------------------------------------------------------------------------------------------
# Zero points


@pytest.mark.parametrize("zp,words", [
    (np.float32(0), ["y_zero_point", "float", "int8", "uint8"]),  # not a quantized type
    (np.int32(0), ["y_zero_point", "int32", "int8"]),
    (np.array(0, ml_dtypes.float4_e2m1fn), ["float4e2m1", "QuantizeLinear-23"]),  # too new
])
def test_quantize_zero_point_of_a_wrong_type(zp, words):
    refused(lambda: q21(X, np.float32(0.5), zp), Q21, *words)


def test_dequantize_zero_point_of_another_type_than_x():
    refused(lambda: dq21(Q8, np.float32(0.5), np.uint8(0)), DQ21, "x_zero_point", "uint8",
            "int8", "same type")


@pytest.mark.parametrize("scale_shape,zp_shape", [((), (3,)), ((9,), (4,)), ((9,), ()),
                                                  ((4, 3), (4, 2)), ((4, 3), (3, 4))])
def test_zero_point_of_a_wrong_shape(scale_shape, zp_shape):
    scale = np.full(scale_shape, 0.5, np.float32)
    kw = {"axis": 1, "block_size": 3 if len(scale_shape) == 2 else 0}
    refused(lambda: q21(X, scale, np.zeros(zp_shape, np.int8), **kw), Q21, "y_zero_point",
            str(zp_shape), "same shape")
    refused(lambda: dq21(Q8, scale, np.zeros(zp_shape, np.int8), **kw), DQ21, "x_zero_point",
            "same shape")


def test_one_element_zero_point_of_another_rank_is_per_tensor():
    # (1,) and () both hold one value: per-tensor, accepted (as the reference does)
    got = q21(X, np.full((1,), 0.5, np.float32), np.zeros((), np.int8))
    assert_bits_equal(got, reference("QuantizeLinear", 21, X, np.full((1,), 0.5, np.float32),
                                     np.zeros((), np.int8)))


def test_nan_float8_zero_point():
    # QuantizeLinear ignores a float8 zero point, NaN included, as the onnx reference and
    # onnxruntime do; DequantizeLinear refuses any non-zero one (README, Semantics)
    zp = np.array(np.nan, np.float32).astype(ml_dtypes.float8_e4m3fn)
    assert_bits_equal(q21(X, np.float32(0.5), zp),
                      reference("QuantizeLinear", 21, X, np.float32(0.5), zp))
    codes = np.array([1.0, -2.0], ml_dtypes.float8_e4m3fn)
    refused(lambda: dq21(codes, np.float32(0.5), zp), DQ21, "x_zero_point", "zero")


@pytest.mark.parametrize("value", [-1, 256, 10**12])
def test_python_zero_point_out_of_the_type_range(value):
    refused(lambda: q21(X, 0.5, value), Q21, "y_zero_point", "uint8", "[0, 255]")


def test_output_dtype_contradicting_the_zero_point():
    refused(lambda: q21(X, np.float32(0.5), np.int8(0), output_dtype="uint8"), Q21,
            "output_dtype", "uint8", "int8", "same type")
    refused(lambda: q21(X, np.float32(0.5), np.zeros((), ml_dtypes.float8_e4m3fn),
                        output_dtype=19), Q21, "output_dtype", "float8e5m2", "float8e4m3fn")
    # agreeing with it is fine
    q21(X, np.float32(0.5), np.int8(0), output_dtype="int8")


# ----------------------------------------------------------------------------------------------
# Axis and block size


@pytest.mark.parametrize("axis", [2, -3, 100])
def test_axis_out_of_range(axis):
    scale = np.full(9, 0.5, np.float32)
    refused(lambda: q21(X, scale, axis=axis), Q21, f"axis={axis}", "out of range", "-2..1")
    refused(lambda: dq21(Q8, scale, axis=axis), DQ21, f"axis={axis}", "-2..1")


@pytest.mark.parametrize("axis", [1.0, "1", True, None])
def test_axis_must_be_an_integer(axis):
    refused(lambda: q21(X, np.full(9, 0.5, np.float32), axis=axis), Q21, "axis", "integer")


# (D, S): the spec accepts block sizes in [ceil(D/S), ceil(D/(S-1)) - 1]
BLOCK_RANGES = [(9, 3, 3, 4), (8, 3, 3, 3), (9, 2, 5, 8), (7, 7, 1, 1), (9, 9, 1, 1),
                (10, 4, 3, 3)]


@pytest.mark.parametrize("dim,blocks,lo,hi", BLOCK_RANGES,
                         ids=[f"D{d}-S{s}" for d, s, _, _ in BLOCK_RANGES])
def test_block_size_range_edges(dim, blocks, lo, hi):
    import math

    assert lo == math.ceil(dim / blocks) and hi == math.ceil(dim / (blocks - 1)) - 1
    x = np.linspace(-3, 3, 2 * dim, dtype=np.float32).reshape(2, dim)
    scale = np.linspace(0.1, 0.9, 2 * blocks, dtype=np.float32).reshape(2, blocks)
    for block in (lo, hi):  # both edges are accepted, and agree with the reference
        got = q21(x, scale, axis=1, block_size=block)
        assert_bits_equal(got, reference("QuantizeLinear", 21, x, scale, axis=1,
                                         block_size=block), context=f"block {block}")
        got = dq21(got, scale, axis=1, block_size=block)
        assert_bits_equal(got, reference("DequantizeLinear", 21, q21(x, scale, axis=1,
                                                                     block_size=block),
                                         scale, axis=1, block_size=block))
    for block in (lo - 1, hi + 1):
        if block < 1:
            continue
        refused(lambda block=block: q21(x, scale, axis=1, block_size=block), Q21,
                f"block_size={block}", f"[{lo}, {hi}]")
        refused(lambda block=block: dq21(Q8[:2, :dim] if dim <= 9 else
                                         np.zeros((2, dim), np.int8), scale, axis=1,
                                         block_size=block), DQ21, f"block_size={block}",
                f"[{lo}, {hi}]")


@pytest.mark.parametrize("block", [-1, 2.0, "3"])
def test_block_size_must_be_a_non_negative_integer(block):
    refused(lambda: q21(X, np.full((4, 3), 0.5, np.float32), axis=1, block_size=block), Q21,
            "block_size")


def test_rank_0_x_with_a_per_axis_scale():
    refused(lambda: q21(np.float32(1.5), np.full(3, 0.5, np.float32), axis=0), Q21, "0-d",
            "per-tensor")
    refused(lambda: dq21(np.int8(3), np.full(3, 0.5, np.float32), axis=0), DQ21, "0-d")


# ----------------------------------------------------------------------------------------------
# Types


@pytest.mark.parametrize("where", ["x", "y_scale"])
def test_float64_refused_with_a_hint(where):
    x = X.astype(np.float64) if where == "x" else X
    scale = np.float64(0.5) if where == "y_scale" else np.float32(0.5)
    refused(lambda: q21(x, scale), Q21, where, "float64", "astype(np.float32)", "valid")


def test_float64_refused_by_dequantize_and_dynamic():
    refused(lambda: dq21(Q8, np.float64(0.5)), DQ21, "x_scale", "float64")
    refused(lambda: qcore.dynamic_quantize_linear(X.astype(np.float64)),
            "DynamicQuantizeLinear-11", "x", "float64")


@pytest.mark.parametrize("x", [np.array([1.0, "a"], dtype=object), np.array(["1", "2"]),
                               np.array([b"1"]), np.zeros(3, [("a", np.float32)])],
                         ids=["object", "str", "bytes", "structured"])
def test_non_numeric_arrays(x):
    refused(lambda: q21(x, np.float32(0.5)), Q21, "x", "numeric")


@pytest.mark.parametrize("dtype", [np.int64, np.bool_, np.complex64, np.uint32])
def test_unsupported_numeric_dtypes(dtype):
    refused(lambda: q21(X.astype(dtype), np.float32(0.5)), Q21, "x", np.dtype(dtype).name,
            "valid", "float16")


@pytest.mark.parametrize("argument,value", [("output_dtype", "int7"), ("output_dtype", 999),
                                            ("output_dtype", "float64"),
                                            ("precision", "fp8"), ("precision", "int8"),
                                            ("output_dtype", True)])
def test_unknown_or_invalid_dtype_names(argument, value):
    msg = refused(lambda: qcore.quantize_linear(X, np.float32(0.5), opset=23, **{argument: value}),
                  Q23, argument)
    assert "valid" in msg.lower() or "not a data type" in msg


def test_dequantize_output_dtype_must_be_a_float():
    refused(lambda: qcore.dequantize_linear(Q8, np.float32(0.5), output_dtype="int8", opset=23),
            "DequantizeLinear-23", "output_dtype", "int8", "float16")


def test_dynamic_quantize_refuses_nan_and_inf():
    for bad in (np.nan, np.inf, -np.inf):
        x = X.copy()
        x[1, 2] = bad
        refused(lambda x=x: qcore.dynamic_quantize_linear(x), "DynamicQuantizeLinear-11",
                "NaN/Inf")


def test_bad_backend():
    refused(lambda: q21(X, np.float32(0.5), backend="tpu"), Q21, "backend", "cpu", "cuda")
    refused(lambda: dq21(Q8, np.float32(0.5), backend=None), DQ21, "backend", "cpu")


def test_cuda_backend_works_or_says_why():
    try:
        got = q21(X, np.float32(0.5), backend="cuda")
    except qcore.QuantizationError as exc:
        assert "cuda" in str(exc).lower() and Q21 in str(exc)
    else:
        assert_bits_equal(np.asarray(got), q21(X, np.float32(0.5)))


def test_unknown_operator_and_version_objects():
    refused(lambda: qcore.resolve("QuantizeLinearX", 21), "unknown operator", "QuantizeLinear")


# ----------------------------------------------------------------------------------------------
# Odd but valid input: works and matches the reference


def _both(op, x, scale, zp=None, **kw):
    """qcore's opset-21 `op` on the inputs, checked bit for bit against the reference."""
    call = qcore.quantize_linear if op == "QuantizeLinear" else qcore.dequantize_linear
    got = call(x, scale, zp, opset=21, **kw)
    ref = reference(op, 21, np.asarray(x), np.asarray(scale),
                    None if zp is None else np.asarray(zp), **kw)
    assert_bits_equal(got, ref)
    return got


def _q_both(x, scale, zp=None, **kw):
    return _both("QuantizeLinear", x, scale, zp, **kw)


def _dq_both(x, scale, zp=None, **kw):
    return _both("DequantizeLinear", x, scale, zp, **kw)


@pytest.mark.parametrize("shape,scale_shape,kw", [
    ((0,), (), {}), ((0, 5), (), {}), ((3, 0), (3,), {"axis": 0}), ((0, 5), (5,), {"axis": 1}),
    ((3, 0), (0,), {"axis": 1}), ((4, 0), (4, 0), {"axis": 1, "block_size": 2}),
    ((0, 6), (0, 3), {"axis": 1, "block_size": 2}),
], ids=["1d", "2d", "per-axis-empty-rows", "per-axis-no-rows", "per-axis-along-empty-axis",
        "blocked-along-empty-axis", "blocked-no-rows"])
def test_empty_tensors(shape, scale_shape, kw):
    # an empty axis has no scales (ceil(0 / B) blocks): an empty scale is then valid
    x = np.zeros(shape, np.float32)
    scale = np.full(scale_shape, 0.5, np.float32)
    zp = np.full(scale_shape, 3, np.uint8)
    y = _q_both(x, scale, zp, **kw)
    assert y.shape == shape and y.dtype == np.uint8
    out = _dq_both(y, scale, zp, **kw)
    assert out.shape == shape and out.dtype == np.float32
    got = qcore.quantize_linear(x, scale, output_dtype="float4e2m1", opset=23, **kw)
    assert got.shape == shape and got.dtype == ml_dtypes.float4_e2m1fn


@pytest.mark.parametrize("x_type", ["float", "float16", "bfloat16", "int32"])
def test_zero_d_tensors(x_type):
    x = np.array(-7.5, np.float32).astype(oracle.DTYPES[x_type])
    scale = np.array(2, np.float32).astype(oracle.DTYPES[x_type])
    zp = np.array(-3, np.int8)
    if x_type == "int32":  # at 21 an int32 x takes an int32 scale: rint(-7 / 2) - 3 = -7
        got = _q_both(x, np.array(2, np.int32), zp)
        assert got.shape == () and got == np.int8(-7)
    else:
        got = _q_both(x, scale, zp)
        assert got.shape == ()
    out = _dq_both(np.array(5, np.int8), np.array(0.25, np.float32), np.array(-3, np.int8))
    assert out.shape == () and out == np.float32(2.0)


def test_non_contiguous_and_fortran_inputs():
    rng = np.random.default_rng(5)
    base = (rng.standard_normal((12, 20)) * 40).astype(np.float32)
    views = {"strided": base[::2, 1::3], "transposed": base.T, "reversed": base[::-1, ::-2],
             "fortran": np.asfortranarray(base)}
    for name, x in views.items():
        contiguous = np.ascontiguousarray(x)
        for kw, scale, zp in [
            ({}, np.float32(0.3), np.int8(4)),
            ({"axis": 1}, rng.uniform(0.1, 1, x.shape[1]).astype(np.float32)[::-1],
             np.zeros(x.shape[1], np.int8)),
            ({"axis": 0, "block_size": 4},
             np.asfortranarray(rng.uniform(0.1, 1, (-(-x.shape[0] // 4), x.shape[1]))
                               .astype(np.float32)), None),
        ]:
            y = _q_both(x, scale, zp, **kw)
            assert_bits_equal(y, qcore.quantize_linear(contiguous, np.ascontiguousarray(scale),
                                                       zp, opset=21, **kw), context=name)
            y_view = np.asfortranarray(y)[::1] if name == "fortran" else y.T.T
            _dq_both(y_view, scale, zp, **kw)


def test_python_scalars_and_lists():
    # Python floats become float32; Python ints take the zero point's / output's type
    x = [1.0, 2.5, -3.25, 1e3]
    got = _q_both(np.array(x, np.float32), np.float32(0.5), np.uint8(3))
    assert_bits_equal(qcore.quantize_linear(x, 0.5, 3, opset=21), got)
    got_i8 = _q_both(np.array(x, np.float32), np.float32(0.5), np.int8(-3), output_dtype=3)
    assert_bits_equal(qcore.quantize_linear(x, 0.5, -3, output_dtype="int8", opset=21), got_i8)
    assert_bits_equal(qcore.quantize_linear(2.5, 0.5, opset=21),
                      reference("QuantizeLinear", 21, np.array(2.5, np.float32),
                                np.array(0.5, np.float32)))
    ints = [[-5, 0, 7], [100, -128, 127]]
    got = _dq_both(np.array(ints, np.int8), np.float32(0.5), np.int8(1))
    assert_bits_equal(qcore.dequantize_linear(np.array(ints, np.int8), 0.5, 1, opset=21), got)
    # a Python list of ints as x is int32 (the one integer type DequantizeLinear takes that
    # holds any Python int that fits)
    assert_bits_equal(qcore.dequantize_linear(ints, 0.5, opset=21),
                      reference("DequantizeLinear", 21, np.array(ints, np.int32),
                                np.array(0.5, np.float32)))
    # per-axis scales as lists
    assert_bits_equal(qcore.quantize_linear([[1.0, 2.0], [3.0, 4.0]], [0.5, 0.25], [1, 2],
                                            axis=1, opset=21),
                      reference("QuantizeLinear", 21, np.array([[1, 2], [3, 4]], np.float32),
                                np.array([0.5, 0.25], np.float32), np.array([1, 2], np.uint8),
                                axis=1))


def test_byte_swapped_arrays():
    # big-endian float32/int16 (e.g. from a file written elsewhere) are the same values
    x = np.array([1.0, 2.5, -3.25, 1e3], np.float32)
    scale, zp = np.float32(0.5), np.int16(-3)
    expected = _q_both(x, scale, zp)
    got = qcore.quantize_linear(x.astype(">f4"), np.array(scale, ">f4"),
                                np.array(zp, ">i2"), opset=21)
    assert_bits_equal(got, expected)
    q = np.array([-7, 0, 300, -32768], np.int16)
    expected = _dq_both(q, np.float32(0.25), np.int16(5))
    got = qcore.dequantize_linear(q.astype(">i2"), np.array(0.25, ">f4"), np.array(5, ">i2"),
                                  opset=21)
    assert_bits_equal(got, expected)
    ints = np.array([2**24 + 1, -5], np.int32)
    assert_bits_equal(qcore.dequantize_linear(ints.astype(">i4"), 0.5, opset=21),
                      _dq_both(ints, np.float32(0.5)))
