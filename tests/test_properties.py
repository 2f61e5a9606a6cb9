"""Property tests (hypothesis): what must hold for every input, whatever the reference says.

* in-range round trip: |dequantize(quantize(x)) - x| <= scale/2 (integer types, per-tensor,
  per-axis, blocked),
* monotonicity: x <= x' implies value(quantize(x)) <= value(quantize(x')) (integers, float8,
  float6, float4),
* idempotence: quantize(dequantize(quantize(x))) == quantize(x),
* pack/unpack round trips for the 2- and 4-bit types (odd lengths), against an independent
  NumPy packer,
* the serial and the parallel CPU kernel paths give the same bits.
"""

from __future__ import annotations

import numpy as np
import oracle
import pytest
from conftest import assert_bits_equal, bits
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import qcore
import qcore.packing
from qcore import config
from qcore.kernels import cpu

SETTINGS = settings(max_examples=100, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])

INT_TYPES = ("int2", "uint2", "int4", "uint4", "int8", "uint8", "int16", "uint16")
FLOAT_TYPES = ("float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "float6e2m3",
               "float6e3m2", "float4e2m1")
SUBBYTE = ("int2", "uint2", "int4", "uint4", "float4e2m1")

scales = st.floats(min_value=2.0**-12, max_value=2.0**12, allow_nan=False, allow_infinity=False,
                   width=32)


@st.composite
def layouts(draw):
    """(x shape, scale shape, axis, block_size): per-tensor, per-axis or blocked."""
    kind = draw(st.sampled_from(["per-tensor", "per-axis", "blocked"]))
    rank = draw(st.integers(1 if kind != "blocked" else 2, 3))
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=rank, max_size=rank)))
    axis = draw(st.integers(-rank, rank - 1))
    if kind == "per-tensor":
        return shape, (), 1, 0
    d = shape[axis]
    if kind == "per-axis":
        if rank == 1 and d == 1:
            return shape, (1,), axis, 0  # 1-element scale: per-tensor whatever axis says
        return shape, (d,), axis, 0
    block = draw(st.integers(1, d + 1))
    s_shape = list(shape)
    s_shape[axis] = -(-d // block)
    return shape, tuple(s_shape), axis, block


def _zero_point(draw, name, shape):
    lo, hi = oracle.INT_RANGES[name]
    n = int(np.prod(shape, dtype=int))
    values = draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n))
    return np.array(values, np.int64).reshape(shape).astype(oracle.DTYPES[name])


@SETTINGS
@given(data=st.data(), name=st.sampled_from(INT_TYPES), layout=layouts())
def test_round_trip_error_within_half_a_scale(data, name, layout):
    x_shape, s_shape, axis, block = layout
    n_s = int(np.prod(s_shape, dtype=int))
    scale = np.array(data.draw(st.lists(scales, min_size=n_s, max_size=n_s)),
                     np.float32).reshape(s_shape)
    zp = _zero_point(data.draw, name, s_shape)
    lo, hi = oracle.INT_RANGES[name]
    s_e = oracle.expand(scale, x_shape, axis, block).astype(np.float64)
    z_e = oracle.expand(zp, x_shape, axis, block).astype(np.float64)
    n = int(np.prod(x_shape, dtype=int))
    u = np.array(data.draw(st.lists(st.floats(0, 1), min_size=n, max_size=n))).reshape(x_shape)
    # x / scale + zp inside [lo, hi]: no saturation
    x = ((lo - z_e + u * (hi - lo)) * s_e).astype(np.float32)
    kw = {"axis": axis, "block_size": block}
    y = qcore.quantize_linear(x, scale, zp, **kw)
    x_hat = qcore.dequantize_linear(y, scale, zp, **kw)
    err = np.abs(x_hat.astype(np.float64) - x.astype(np.float64))
    # scale/2 from rounding, plus the float32 roundings of x/scale and of the product
    bound = s_e / 2 + 2.0**-22 * (np.abs(x.astype(np.float64)) + s_e)
    assert (err <= bound).all(), (err - bound).max()


def _values(y: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return y.astype(np.float64)


@SETTINGS
@given(name=st.sampled_from(INT_TYPES + FLOAT_TYPES),
       xs=st.lists(st.floats(-1e6, 1e6, width=32), min_size=2, max_size=200),
       scale=scales, saturate=st.booleans(), with_zp=st.booleans(), data=st.data())
def test_quantize_is_monotonic(name, xs, scale, saturate, with_zp, data):
    x = np.sort(np.array(xs, np.float32))
    if with_zp and name in INT_TYPES:
        zp = _zero_point(data.draw, name, ())
    elif with_zp:
        finite = _values(np.arange(256, dtype=np.uint8).view(oracle.DTYPES[name]))
        finite = finite[np.isfinite(finite)]
        zp = np.array(data.draw(st.sampled_from(sorted(set(finite.tolist())))),
                      np.float32).astype(oracle.DTYPES[name])
    else:
        zp = None
    y = qcore.quantize_linear(x, np.float32(scale), zp,
                              output_dtype=None if zp is not None else name, saturate=saturate)
    v = _values(y)
    if not saturate:
        v = v[~np.isnan(v)]  # saturate=0: overflow gives NaN (unordered) for e4m3fn and fnuz
    assert (np.diff(v) >= 0).all(), (x, v)


#: The high-precision type must hold (q - zp) * scale well enough for q to come back: float16
#: has 11 significant bits (not the 16-bit integers), bfloat16 8 (only the 2/4-bit integers).
FITS = {"float": INT_TYPES, "float16": INT_TYPES[:6], "bfloat16": INT_TYPES[:4]}


@SETTINGS
@given(name=st.sampled_from(INT_TYPES + FLOAT_TYPES), layout=layouts(), data=st.data(),
       saturate=st.booleans(), scale_type=st.sampled_from(["float", "float16", "bfloat16"]))
def test_second_round_trip_is_idempotent(name, layout, data, saturate, scale_type):
    assume(name in FLOAT_TYPES or name in FITS[scale_type])
    x_shape, s_shape, axis, block = layout
    n_s = int(np.prod(s_shape, dtype=int))
    # float16: scales <= 1 keep every float8 value times the scale finite in float16
    lo, hi = (2.0**-3, 1.0) if scale_type == "float16" else (2.0**-6, 2.0**6)
    scale = np.array(data.draw(st.lists(st.floats(lo, hi, width=32), min_size=n_s,
                                        max_size=n_s)), np.float32)
    scale = scale.reshape(s_shape).astype(oracle.DTYPES[scale_type])
    n = int(np.prod(x_shape, dtype=int))
    x = np.array(data.draw(st.lists(st.floats(-6e4, 6e4, width=32) | st.sampled_from(
        [0.0, -0.0, np.inf, -np.inf, np.nan]), min_size=n, max_size=n)), np.float32)
    x = x.reshape(x_shape).astype(oracle.DTYPES[scale_type])
    zp = _zero_point(data.draw, name, s_shape) if name in INT_TYPES else None
    kw = {"axis": axis, "block_size": block}
    q_kw = dict(kw, saturate=saturate, output_dtype=None if zp is not None else name)
    y1 = qcore.quantize_linear(x, scale, zp, **q_kw)
    x_hat = qcore.dequantize_linear(y1, scale, zp, **kw)
    y2 = qcore.quantize_linear(x_hat, scale, zp, **q_kw)
    assert_bits_equal(y2, y1, context=f"{name} {layout}")


def _numpy_pack(a: np.ndarray, nbits: int) -> np.ndarray:
    """ONNX layout written independently: element i goes to byte i // per, bit (i % per) * nbits."""
    codes = bits(a).reshape(-1).astype(np.uint16) & ((1 << nbits) - 1)
    per = 8 // nbits
    padded = np.zeros(-(-codes.size // per) * per, np.uint16)
    padded[: codes.size] = codes
    shifts = (np.arange(per) * nbits).astype(np.uint16)
    return (padded.reshape(-1, per) << shifts).sum(axis=1).astype(np.uint8)


@SETTINGS
@given(name=st.sampled_from(SUBBYTE),
       shape=st.lists(st.integers(0, 7), min_size=1, max_size=3),
       data=st.data())
def test_pack_unpack_round_trip(name, shape, data):
    dt = oracle.DTYPES[name]
    nbits = 2 if name.endswith("2") and "int" in name else 4
    n = int(np.prod(shape, dtype=int))
    codes = np.array(data.draw(st.lists(st.integers(0, (1 << nbits) - 1), min_size=n,
                                        max_size=n)), np.uint8)
    if name in ("int2", "int4"):
        a = _signed(codes, nbits).astype(dt).reshape(shape)
    else:
        a = codes.view(dt).reshape(shape)
    packed = qcore.packing.pack(a)
    assert packed.dtype == np.uint8
    assert packed.size == -(-n * nbits // 8)
    np.testing.assert_array_equal(packed, _numpy_pack(a, nbits))
    back = qcore.packing.unpack(packed, dt, tuple(shape))
    assert_bits_equal(back, a, context=name)
    # and the other way round: any bytes (with zero padding bits) survive unpack then pack
    raw = np.array(data.draw(st.lists(st.integers(0, 255), min_size=packed.size,
                                      max_size=packed.size)), np.uint8)
    tail = n * nbits % 8
    if tail:
        raw[-1] &= np.uint8((1 << tail) - 1)
    np.testing.assert_array_equal(qcore.packing.pack(qcore.packing.unpack(raw, dt, shape)), raw)


@pytest.mark.parametrize("name", SUBBYTE)
@pytest.mark.parametrize("n", [1, 3, 5, 7])
def test_pack_odd_lengths_known_bytes(name, n):
    # ONNX: the first element in the lowest bits of the first byte; the last byte zero-padded
    nbits = 2 if name in ("int2", "uint2") else 4
    codes = (np.arange(n) % (1 << nbits) + 1) % (1 << nbits)  # 1, 2, 3, ... wrapping
    dt = oracle.DTYPES[name]
    a = codes.astype(np.uint8).view(dt) if name == "float4e2m1" else \
        np.array(_signed(codes, nbits) if name.startswith("int") else codes).astype(dt)
    expected = bytearray(-(-n * nbits // 8))
    for i, c in enumerate(codes):
        expected[i * nbits // 8] |= int(c) << (i * nbits % 8)
    np.testing.assert_array_equal(qcore.packing.pack(a), np.frombuffer(bytes(expected), np.uint8))
    assert_bits_equal(qcore.packing.unpack(np.frombuffer(bytes(expected), np.uint8), dt, n), a)


def _signed(codes, nbits):
    half = 1 << (nbits - 1)
    return (np.asarray(codes, np.int64) ^ half) - half


@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(INT_TYPES + FLOAT_TYPES), data=st.data(),
       kind=st.sampled_from(["per-tensor", "per-axis", "blocked"]),
       x_type=st.sampled_from(["float", "float16", "bfloat16", "int32"]),
       precision=st.sampled_from([None, "float16", "bfloat16"]))
def test_serial_and_parallel_kernels_agree(name, data, kind, x_type, precision):
    rows = data.draw(st.integers(2, 40))
    cols = data.draw(st.integers(1000, 3000))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x = (rng.standard_normal((rows, cols)) * 10.0 ** rng.uniform(-2, 4)).astype(np.float32)
    x.reshape(-1)[rng.choice(x.size, 20)] = [np.nan, np.inf, -np.inf, -0.0, 1e10] * 4
    if x_type == "int32":
        x = np.nan_to_num(x, posinf=2**31 - 1, neginf=-(2**31)).clip(-2**31, 2**31 - 1)
    x = x.astype(oracle.DTYPES[x_type])
    if kind == "per-tensor":
        scale, axis, block = np.float32(rng.uniform(0.01, 3)), 1, 0
    elif kind == "per-axis":
        scale, axis, block = rng.uniform(0.01, 3, cols).astype(np.float32), 1, 0
    else:
        block = int(rng.integers(1, 64))
        scale = rng.uniform(0.01, 3, (-(-rows // block), cols)).astype(np.float32)
        axis = 0
    kw = {"axis": axis, "block_size": block, "output_dtype": name, "precision": precision}
    codes = qcore.quantize_linear(x, scale, **kw)
    results = {}
    for path, threshold in (("serial", 1 << 62), ("parallel", 0)):
        with pytest.MonkeyPatch.context() as mp:
            assert hasattr(cpu, "PARALLEL_THRESHOLD")
            mp.setattr(cpu, "PARALLEL_THRESHOLD", threshold)
            mp.setattr(config, "ADAPTIVE_WORKERS", False)  # the parallel kernel, load or not
            q = qcore.quantize_linear(x, scale, **kw)
            dq = qcore.dequantize_linear(codes, scale, axis=axis, block_size=block,
                                         output_dtype="bfloat16")
            results[path] = (q, dq)
    assert_bits_equal(results["serial"][0], results["parallel"][0], context="quantize")
    assert_bits_equal(results["serial"][1], results["parallel"][1], context="dequantize")
    assert_bits_equal(results["serial"][0], codes, context="default path")
