"""Every copy of an element rule against its one home in qcore.kernels.scalar, on every code.

The rules (qcore.kernels.scalar) and the copies written for speed that their docstrings name:

- QuantizeLinear's integer code ``int_code(rint(q), zp, lo, hi, 2**bits)``: ``int_code_masked``
  (the CPU integer kernels' scalar loops) and the vector steps ``bits.int_codes_32``, ``_64``,
  ``_128`` and ``int_codes_step``; every target of 8 bits or fewer on every zero point and
  every quotient that reaches each code (ties and their neighbours), 16-bit targets on a
  sample of zero points; the rule itself against NumPy's saturate(rint(q) + zp).
- The small-float encode ``encode_with`` (``encode_f32_bits``): ``bits.FLOAT_CODES`` for each
  (no -0, zero point added) case, every format on the float32s around each of its codes and
  rounding midpoints, the specials and every 4099th float32.
- DequantizeLinear's ``dequantize_value``: every CPU dequantize kernel family (numeric, table,
  generic, and generic's 256-entry lookup) calls it; each runs here on every code and every
  zero point of the 8-bit-and-smaller types and every 16-bit code, against the rule run
  element by element and against NumPy's (x - zp) * scale.

The CUDA kernels' copies, run under numba's CUDA simulator (the Python a GPU compiles):
``cuda_quantize.q_int`` and the generic ``cuda_kernels.quantize_kernel`` (integer code, every
target of 8 bits or fewer), ``cuda_quantize.q_float`` and the generic kernel (small-float encode,
every format's codes and midpoints), ``cuda_quantize.q_fp4`` (float4e2m1), ``cuda_quantize._hw_or_encoder`` (the GPU's float8
conversion, modelled by ml_dtypes' cast), ``cuda_dequantize.dq_element`` and the generic
``cuda_kernels.dequantize_kernel`` (every code and zero point as above). The kernels around
them are checked against the CPU backend in tests/test_cuda_sim.py.
"""

from __future__ import annotations

import ml_dtypes
import numba
import numpy as np
import pytest
from conftest import run_pytest
from numba import njit

import qcore
from qcore import ops
from qcore.formats import get_format
from qcore.kernels import bits, scalar
from qcore.kernels.params import DequantizeParams, LayoutParams, NanStyle

INT_TARGETS = ("int2", "uint2", "int4", "uint4", "int8", "uint8", "int16", "uint16")
FLOAT_TARGETS = ("float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz",
                 "float4e2m1", "float6e2m3", "float6e3m2")
SPECIALS = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e10, -1e10, 3e38, -3e38,
                     16777217.0, -16777217.0, 1e-45, -1e-45, 1e-40], np.float32)


# --- integer codes -------------------------------------------------------------------------


@njit(cache=True)
def _int_rule(q, z, lo, hi, wrap, out):
    for j in range(q.size):
        out[j] = scalar.int_code(np.rint(q[j]), z, lo, hi, wrap)


@njit(cache=True)
def _int_masked(q, z, lo, hi, mask, out):
    for j in range(q.size):
        out[j] = scalar.int_code_masked(q[j], z, lo, hi, mask)


def _vector_copy(step, width):
    @njit
    def run(q, ys, a, b, zi, mask):
        for j in range(0, q.size, width):
            step(q, j, ys, np.float32(1.0), a, b, zi, mask)
    return run


INT_VECTOR_COPIES = {"int_codes_32": _vector_copy(bits.int_codes_32, 32),
                     "int_codes_64": _vector_copy(bits.int_codes_64, 64),
                     "int_codes_128": _vector_copy(bits.int_codes_128, 128),
                     "int_codes_step": _vector_copy(bits.int_codes_step, bits.INT_STEP),
                     # the other store form (bits.int_store_split) than the one this target
                     # compiles: both hold to the rule on every host
                     "int_codes_step, other stores": _vector_copy(
                         bits._int_codes_intrinsic(bits.INT_STEP, 0 if bits.INT_SPLIT else 16),
                         bits.INT_STEP)}


def _quotients(span: int) -> np.ndarray:
    """Every integer k in [-span, span] and the float32s at and around k +- 0.5 (the ties and
    their neighbours), then the specials, padded to a multiple of the widest vector step."""
    k = np.arange(-span, span + 1, dtype=np.float32)
    half = np.float32(0.5)
    near = [np.nextafter(half, np.float32(0)), half, np.nextafter(half, np.float32(1))]
    q = np.concatenate([k, *(k + d for d in near), *(k - d for d in near), SPECIALS])
    width = max(256, bits.INT_STEP)
    return np.resize(q, -(-q.size // width) * width).astype(np.float32)


@pytest.mark.parametrize("name", INT_TARGETS)
def test_integer_code_copies_equal_the_rule(name):
    f = get_format(name)
    lo, hi, mask = np.float32(f.min), np.float32(f.max), np.int32((1 << f.bits) - 1)
    q = _quotients(int(f.max - f.min) + 2)
    storage = np.uint8 if f.bits <= 8 else np.uint16
    zero_points = np.arange(f.min, f.max + 1) if f.bits <= 8 else np.array(
        [f.min, f.min + 1, -1, 0, 1, 12345 % (f.max + 1), f.max - 1, f.max])
    rule = np.empty(q.size, np.int32)
    other = np.empty(q.size, np.int32)
    for zp in zero_points:
        zf = np.float32(zp)
        _int_rule(q, zf, lo, hi, np.float32(1 << f.bits), rule)
        with np.errstate(invalid="ignore"):
            numpy_rule = np.clip(np.rint(q.astype(np.float64)) + zp, f.min, f.max)
        numpy_rule[np.isnan(q)] = f.min  # NaN into an integer type: the minimum
        np.testing.assert_array_equal(rule, numpy_rule.astype(np.int64) & int(mask),
                                      err_msg=f"{name} rule, zero point {zp}")
        _int_masked(q, zf, lo, hi, mask, other)
        np.testing.assert_array_equal(other, rule, err_msg=f"{name} int_code_masked, zp {zp}")
        for copy, run in INT_VECTOR_COPIES.items():
            ys = np.empty(q.size, storage)
            run(q, ys, lo - zf, hi - zf, np.int32(zp), mask)
            np.testing.assert_array_equal(ys, rule.astype(storage),
                                          err_msg=f"{name} {copy}, zero point {zp}")


# --- small-float encode ----------------------------------------------------------------------


@njit(cache=True)
def _encode_rule(q, za, add, c, fnuz, out):
    for j in range(q.size):
        v = q[j] + za if add else q[j]
        out[j] = scalar.encode_with(bits.f32_as_u32(v), c, fnuz)


def _float_copy(fnuz, add):
    step = bits.FLOAT_CODES[fnuz, add]

    @njit
    def run(q, ys, za, c):
        for j in range(0, q.size, 32):
            step(q, j, ys, np.float32(1.0), za, c)
    return run


FLOAT_COPIES = {(fnuz, add): _float_copy(fnuz, add) for fnuz in (False, True)
                for add in (False, True)}


def _float_inputs(dtype, strided: bool = True) -> np.ndarray:
    """float32s within 8 ulps of every value of the format and every midpoint between
    neighbours (and above the largest), both signs, the specials and (`strided`) every 4099th
    float32."""
    codes = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float64)
    v = np.unique(np.abs(codes[np.isfinite(codes)]))
    step = v[-1] - v[-2]
    centres = np.concatenate([v, (v[:-1] + v[1:]) / 2, [v[-1] + step / 2, v[-1] + step]])
    b = centres.astype(np.float32).view(np.uint32).astype(np.int64)
    near = ((b[:, None] + np.arange(-8, 9)).ravel() & 0x7FFFFFFF).astype(np.uint32)
    every = np.arange(0, 1 << 32 if strided else 0, 4099, dtype=np.uint64).astype(np.uint32)
    q = np.concatenate([near, near | np.uint32(0x80000000), every]).view(np.float32)
    q = np.concatenate([q, SPECIALS])
    return np.resize(q, -(-q.size // 32) * 32)


@pytest.mark.parametrize("name", FLOAT_TARGETS)
def test_float_encode_copies_equal_the_rule(name):
    f = get_format(name)
    q = _float_inputs(f.dtype)
    fnuz = f.nan_style == NanStyle.NEG_ZERO
    rule = np.empty(q.size, np.int32)
    zero_points = [np.float32(0.0), np.float32(-0.0), np.float32(1.5), np.float32(-3.0)]
    for saturate in (0, 1):
        c = scalar.encode_consts(np.int64(f.ebits), np.int64(f.mbits), np.int64(f.bias),
                                 np.int64(f.max_code), np.int64(f.has_inf),
                                 np.int64(f.nan_style), np.int64(saturate))
        assert isinstance(c, scalar.EncodeConsts)
        c = scalar.EncodeConsts(*(np.int32(v) for v in c))  # int32 inside the kernels
        for add in (False, True):
            for za in zero_points if add else zero_points[:1]:
                _encode_rule(q, za, add, c, fnuz, rule)
                ys = np.empty(q.size, np.uint8)
                FLOAT_COPIES[fnuz, add](q, ys, za, c)
                np.testing.assert_array_equal(
                    ys, rule.astype(np.uint8),
                    err_msg=f"{name} FLOAT_CODES, saturate {saturate}, add {add}, zp {za}")


@njit(cache=True)
def _e2m1_copy(q, za, add, out):
    for j in range(q.size):
        v = q[j] + za if add else q[j]
        out[j] = scalar.e2m1_code(bits.f32_as_u32(v))


def test_e2m1_code_equals_the_rule():
    """scalar.e2m1_code (the CUDA "fp4" family's encode) against encode_with for float4e2m1 on
    the float32s around every code and midpoint, the specials, every 4099th float32 and each
    zero point, under both saturate flags (float4 always saturates: one table)."""
    f = get_format("float4e2m1")
    q = _float_inputs(f.dtype)
    rule = np.empty(q.size, np.int32)
    got = np.empty(q.size, np.int32)
    for saturate in (0, 1):
        c = scalar.EncodeConsts(*(np.int32(v) for v in scalar.encode_consts(
            np.int64(f.ebits), np.int64(f.mbits), np.int64(f.bias), np.int64(f.max_code),
            np.int64(f.has_inf), np.int64(f.nan_style), np.int64(saturate))))
        for za in (None, np.float32(0.0), np.float32(-0.0), np.float32(1.5), np.float32(-3.0)):
            add = za is not None
            zf = za if add else np.float32(0)
            _encode_rule(q, zf, add, c, False, rule)
            _e2m1_copy(q, zf, add, got)
            np.testing.assert_array_equal(got, rule,
                                          err_msg=f"saturate {saturate}, zero point {za}")
    with np.errstate(invalid="ignore"):  # and the codes ml_dtypes' cast gives
        want = q.astype(f.dtype).view(np.uint8).astype(np.int32)
    nan = np.isnan(q)
    want[nan] = 0  # NaN into float4 (no NaN): +0, the ONNX Cast table; ml_dtypes differs
    _e2m1_copy(q, np.float32(0), False, got)
    np.testing.assert_array_equal(got, want)


# --- dequantize ------------------------------------------------------------------------------


@njit(cache=True)
def _dequantize_rule(x, z, s, xkind, okind, tab, out):
    for j in range(x.size):
        out[j] = scalar.dequantize_value(x[j], z[j], s[j], xkind, okind, tab)


DQ_TYPES = ("int2", "uint2", "int4", "uint4", "int8", "uint8", "int16", "uint16", "int32",
            "float8e4m3fn", "float8e5m2fnuz", "float4e2m1", "float6e3m2")


def _codes_and_zero_points(f):
    """(every code, every zero point) for 8-bit-and-smaller types; every code and a few zero
    points for 16-bit ones, a sample of int32; float8 zero points are 0 only."""
    if f.name == "int32":
        codes = np.concatenate([np.arange(-70000, 70000, 7), [2**31 - 1, -2**31, 2**24 + 1]])
        return codes.astype(np.int32), np.array([-2**31, -5, 0, 3, 2**31 - 1], np.int32)
    if f.bits <= 8:
        codes = np.arange(256, dtype=np.uint8)[:1 << f.bits]
        values = codes.view(f.dtype)
        if f.is_float and f.bits == 8:
            return values, np.zeros(1, f.dtype)
        return values, values[np.isfinite(values.astype(np.float64))]
    values = np.arange(1 << 16, dtype=np.uint16).view(f.dtype)
    return values, np.unique(np.array([f.min, f.min + 1, 0, 1, f.max // 2, f.max])).astype(f.dtype)


@pytest.mark.parametrize("name", DQ_TYPES)
@pytest.mark.parametrize("output", ["float", "float16", "bfloat16"])
def test_every_dequantize_kernel_is_the_rule(name, output):
    f = get_format(name)
    codes, zero_points = _codes_and_zero_points(f)
    nz = zero_points.size
    scale = np.float32(0.37)
    # per-axis on the first axis: a scale and zero point per row (the per-block loops); on the
    # last axis: per element (block 0); per tensor (the segment alone, or 256-entry lookups)
    x = np.broadcast_to(codes, (nz, codes.size))
    s = np.full(nz, scale, np.float32)
    calls = [(np.ascontiguousarray(x), s, zero_points, 0),
             (np.ascontiguousarray(x.T), s, zero_points, 1)]
    calls += [(np.tile(codes, 8), scale, zero_points[i], 1) for i in (0, nz // 2, nz - 1)]
    plan = qcore.plan_dequantize(f.dtype, (1,), np.float32, (), output_dtype=output)
    dp, table = ops.dequantize_params(plan)
    assert dp == DequantizeParams.from_plan(plan)
    for xa, sa, za, axis in calls:
        got = qcore.dequantize_linear(xa, sa, za, axis=axis, output_dtype=output)
        out = np.empty(xa.size, np.float32 if output == "float" else np.uint16)
        zfull = np.broadcast_to(np.expand_dims(np.asarray(za, np.float64), 1 - axis)
                                if np.ndim(za) else np.float64(za), xa.shape).ravel()
        sfull = np.full(xa.size, scale, np.float32)
        flat = np.ascontiguousarray(xa).reshape(-1)
        if f.bits < 8 or f.is_float:
            flat = flat.view(np.uint8)
        _dequantize_rule(flat, np.ascontiguousarray(zfull), sfull, dp.xkind, dp.okind, table,
                         out)
        got_bits = got.reshape(-1).view(out.dtype)
        np.testing.assert_array_equal(got_bits, out, err_msg=f"{name} -> {output}, axis {axis}")
        # the rule against NumPy: the difference exact (int32: in int64, rounded once), the
        # product in float32, rounded once to the output type
        with np.errstate(all="ignore"):
            if f.name == "int32":
                d = (flat.astype(np.int64) - zfull.astype(np.int64)).astype(np.float32)
            else:
                d = (xa.reshape(-1).astype(np.float64) - zfull).astype(np.float32)
            want = d * scale
        out_dtype = {"float": np.float32, "float16": np.float16,
                     "bfloat16": ml_dtypes.bfloat16}[output]
        np.testing.assert_array_equal(got.reshape(-1).astype(np.float64),
                                      want.astype(out_dtype).astype(np.float64),
                                      err_msg=f"{name} -> {output}, NumPy")


# --- the CUDA kernels' copies, under numba's CUDA simulator ----------------------------------
#
# The simulator runs a kernel's and a device function's Python as written (the code a GPU
# compiles), so each copy is checked here on the same inputs as the CPU copies above. This
# process starts the simulator's run (test_cuda_copies_under_the_simulator); the tests marked
# `simulated` run there.

SIMULATED = bool(numba.config.ENABLE_CUDASIM)
simulated = pytest.mark.skipif(not SIMULATED, reason="runs in the CUDA simulator's process "
                               "(test_cuda_copies_under_the_simulator starts it)")
#: Blocks x threads of a generic kernel's grid-stride loop in the simulator (Python threads).
SIM_GRID = (2, 8)


def test_cuda_copies_under_the_simulator():
    if SIMULATED:
        pytest.skip("this process is the simulator's run")
    run_pytest("tests/test_element_rules.py", "-k", "cuda and not under_the_simulator",
               simulator=True)


def _sample(values: np.ndarray, most: int = 9) -> np.ndarray:
    """All of `values` when there are at most `most`, else both ends, the middle and zero."""
    if values.size <= most:
        return values
    picks = [0, 1, 2, values.size // 2 - 1, values.size // 2, values.size // 2 + 1, -3, -2, -1]
    return np.unique(values[picks])


def _per_tensor(n: int):
    from qcore.layout import PER_TENSOR, Layout

    return LayoutParams.from_layout(Layout.from_granularity((n,), PER_TENSOR))


@simulated
@pytest.mark.parametrize("name", [t for t in INT_TARGETS if get_format(t).bits <= 8])
def test_cuda_integer_code_copies_equal_the_rule(name):
    """cuda_quantize.q_int (the specialised kernels' integer family) element by element, and
    the generic cuda_kernels.quantize_kernel, against int_code on every code of the 8-bit and
    smaller targets (the same code serves 16-bit ones): every zero point of the 4-bit and
    smaller targets, a sample of the 8-bit ones'."""
    from qcore.kernels import cuda_kernels, cuda_quantize

    f = get_format(name)
    lo, hi, mask = np.float32(f.min), np.float32(f.max), np.int32((1 << f.bits) - 1)
    q = _quotients(int(f.max - f.min) + 2)
    storage = np.uint8 if f.bits <= 8 else np.uint16
    plan = qcore.plan_quantize(np.float32, q.shape, np.float32, (), f.dtype)
    qp, lp = ops.quantize_params(plan, True), _per_tensor(q.size)
    one = np.ones(1, np.float32)
    rule = np.empty(q.size, np.int32)
    for zp in _sample(np.arange(f.min, f.max + 1), 16 if f.bits <= 4 else 9):
        zf = np.float32(zp)
        _int_rule(q, zf, lo, hi, np.float32(1 << f.bits), rule)
        got = [cuda_quantize.q_int(v, one[0], zf, f.min, f.max, mask) for v in q]
        np.testing.assert_array_equal(got, rule, err_msg=f"{name} q_int, zero point {zp}")
        y = np.empty(q.size, storage)
        cuda_kernels.quantize_kernel[SIM_GRID](q, one, np.full(1, zf), y, lp, qp)
        np.testing.assert_array_equal(y, rule.astype(storage),
                                      err_msg=f"{name} quantize_kernel, zero point {zp}")


@simulated
@pytest.mark.parametrize("name", FLOAT_TARGETS)
def test_cuda_float_encode_copies_equal_the_rule(name):
    """cuda_quantize.q_float (x / scale, + zp, NaN keeping its bits, then encode_with) element
    by element, and the generic cuda_kernels.quantize_kernel, against encode_with on every
    format's codes, their midpoints and the specials (strided float32s left to the CPU test)."""
    from qcore.kernels import cuda_kernels, cuda_quantize

    f = get_format(name)
    q = _float_inputs(f.dtype, strided=False)
    fnuz = f.nan_style == NanStyle.NEG_ZERO
    one = np.ones(1, np.float32)
    lp = _per_tensor(q.size)
    rule = np.empty(q.size, np.int32)
    for saturate in (0, 1):
        c = scalar.EncodeConsts(*(np.int32(v) for v in scalar.encode_consts(
            np.int64(f.ebits), np.int64(f.mbits), np.int64(f.bias), np.int64(f.max_code),
            np.int64(f.has_inf), np.int64(f.nan_style), np.int64(saturate))))
        for za in (None, np.float32(0.0), np.float32(-3.0)):
            add = za is not None
            _encode_rule(q, za if add else np.float32(0), add, c, fnuz, rule)
            zf = za if add else np.float32(0)
            got = [cuda_quantize.q_float(v, one[0], zf, add, c, fnuz) for v in q]
            where = f"{name}, saturate {saturate}, zero point {za}"
            np.testing.assert_array_equal(got, rule, err_msg=f"q_float {where}")
            plan = qcore.plan_quantize(np.float32, q.shape, np.float32, (), f.dtype,
                                       saturate=bool(saturate))
            y = np.empty(q.size, np.uint8)
            cuda_kernels.quantize_kernel[SIM_GRID](q, one, np.full(1, zf), y, lp,
                                                   ops.quantize_params(plan, add))
            np.testing.assert_array_equal(y, rule.astype(np.uint8),
                                          err_msg=f"quantize_kernel {where}")


@simulated
def test_cuda_fp4_copy_equals_the_rule():
    """cuda_quantize.q_fp4 (x / scale, + zp, NaN keeping its bits, then e2m1_code) element by
    element against encode_with for float4e2m1, on its codes, midpoints and the specials."""
    from qcore.kernels import cuda_quantize

    f = get_format("float4e2m1")
    q = _float_inputs(f.dtype, strided=False)
    one = np.ones(1, np.float32)
    rule = np.empty(q.size, np.int32)
    c = scalar.EncodeConsts(*(np.int32(v) for v in scalar.encode_consts(
        np.int64(f.ebits), np.int64(f.mbits), np.int64(f.bias), np.int64(f.max_code),
        np.int64(f.has_inf), np.int64(f.nan_style), np.int64(1))))
    for za in (None, np.float32(0.0), np.float32(-3.0)):
        add = za is not None
        zf = za if add else np.float32(0)
        _encode_rule(q, zf, add, c, False, rule)
        got = [cuda_quantize.q_fp4(v, one[0], zf, add) for v in q]
        np.testing.assert_array_equal(got, rule, err_msg=f"q_fp4, zero point {za}")


@simulated
@pytest.mark.parametrize("name", ["float8e4m3fn", "float8e5m2"])
def test_cuda_float8_conversion_choice_equals_the_rule(name):
    """cuda_quantize._hw_or_encoder: the GPU's cvt.rn.satfinite code where it rounds as the
    encoder does (below the overflow bound), the encoder's elsewhere. The instruction runs only
    on a GPU; here it is modelled by ml_dtypes' float32 -> float8 cast (round half to even)."""
    from qcore.kernels import cuda_quantize

    f = get_format(name)
    q = _float_inputs(f.dtype, strided=False)
    b = q.view(np.uint32)
    with np.errstate(all="ignore"):
        hw = q.astype(f.dtype).view(np.uint8)
    rule = np.empty(q.size, np.int32)
    for saturate in (0, 1):
        c = scalar.EncodeConsts(*(np.int32(v) for v in scalar.encode_consts(
            np.int64(f.ebits), np.int64(f.mbits), np.int64(f.bias), np.int64(f.max_code),
            np.int64(f.has_inf), np.int64(f.nan_style), np.int64(saturate))))
        _encode_rule(q, np.float32(0), False, c, False, rule)
        got = [cuda_quantize._hw_or_encoder(bj, hj, c) for bj, hj in zip(b, hw)]
        np.testing.assert_array_equal(got, rule, err_msg=f"{name}, saturate {saturate}")


@simulated
@pytest.mark.parametrize("name", DQ_TYPES)
def test_cuda_dequantize_copies_equal_the_rule(name):
    """cuda_dequantize.dq_element (the specialised kernels' 8-bit rule) element by element, and
    the generic cuda_kernels.dequantize_kernel, against dequantize_value on every code and
    every zero point of the 8-bit-and-smaller types (16-bit: every code, a few zero points;
    int32: a sample), float32 bits compared (NaN codes keep the CPU's NaN)."""
    from qcore.kernels import cuda_dequantize, cuda_kernels
    from qcore.layout import PER_AXIS, Layout

    f = get_format(name)
    codes, zero_points = _codes_and_zero_points(f)
    if f.bits > 8:
        zero_points = zero_points[:2]
    scale = np.float32(0.37)
    x = np.array(np.broadcast_to(codes, (zero_points.size, codes.size)))  # writable
    flat = x.reshape(-1)
    if f.bits < 8 or f.is_float:
        flat = flat.view(np.uint8)
    zfull = np.repeat(zero_points.astype(np.float64), codes.size)
    sfull = np.full(flat.size, scale, np.float32)
    lp = LayoutParams.from_layout(Layout.from_granularity(x.shape, PER_AXIS, 0))
    s = np.full(zero_points.size, scale, np.float32)
    z = zero_points.astype(np.float64)
    for output in ("float", "float16", "bfloat16") if f.bits <= 8 else ("float",):
        plan = qcore.plan_dequantize(f.dtype, (1,), np.float32, (), output_dtype=output)
        dp, table = ops.dequantize_params(plan)
        rule = np.empty(flat.size, np.float32 if output == "float" else np.uint16)
        _dequantize_rule(flat, zfull, sfull, dp.xkind, dp.okind, table, rule)
        y = np.empty(flat.size, rule.dtype)
        cuda_kernels.dequantize_kernel[SIM_GRID](flat, s, z, y, lp, dp, table)
        bits = np.uint32 if output == "float" else np.uint16
        np.testing.assert_array_equal(y.view(bits), rule.view(bits),
                                      err_msg=f"{name} -> {output}, dequantize_kernel")
        if f.bits == 8 and output == "float":
            signed = int(flat.dtype == np.int8)
            got = np.array([cuda_dequantize.dq_element(int(v) & 0xFF, scale, zj, dp.xkind,
                                                       signed, table)
                            for v, zj in zip(flat, zfull)], np.float32)
            np.testing.assert_array_equal(got.view(np.uint32), rule.view(np.uint32),
                                          err_msg=f"{name} dq_element")
