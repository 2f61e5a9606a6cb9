"""The small-float encoding rule (scalar.encode_f32_bits, shared by the CPU and CUDA kernels)
against ml_dtypes' correctly rounded casts with the Cast operator's saturation, on a dense sample
of float32 bit patterns: every 4099th of all 2**32, and every pattern near each target value, each
rounding midpoint (ties included), the subnormal/normal and overflow edges and the specials.

Where ml_dtypes departs from the spec (README semantics table), the spec's answer is used: NaN into
float4/float6 is +0. NaN codes are compared as NaN of the same sign (the payload is not specified).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from numba import njit

import qcore
from qcore.formats import get_format
from qcore.kernels.params import NanStyle
from qcore.kernels.scalar import F16_MAX_CODE, encode_f32_bits

FLOAT8 = ("float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz")
NO_SPECIALS = ("float4e2m1", "float6e2m3", "float6e3m2")
STRIDE = 4099  # prime: the sample meets every residue of the low bits


@njit(cache=True)
def _encode_all(bits, out, ebits, mbits, bias, max_code, has_inf, nan_style, saturate):
    for j in range(bits.size):
        out[j] = encode_f32_bits(bits[j], ebits, mbits, bias, max_code, has_inf, nan_style,
                                 saturate)


def _strided() -> np.ndarray:
    return (np.arange(0, 1 << 32, STRIDE, dtype=np.uint64)).astype(np.uint32)


def _specials() -> np.ndarray:
    edges = [0, 0x7F800000, 0x7F800001, 0x7FC00000, 0x7FFFFFFF, 0x00800000, 0x007FFFFF]
    near = np.concatenate([np.arange(e - 64, e + 64, dtype=np.int64) for e in edges])
    low = np.arange(0, 1 << 16, dtype=np.int64)  # float32 subnormals
    return np.concatenate([near, low]) & 0x7FFFFFFF


def _edges(dtype) -> np.ndarray:
    """float32 bits within 16 ulps of every positive value of the format and every midpoint
    between neighbours (and above the largest finite value)."""
    codes = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float64)
    v = np.unique(codes[np.isfinite(codes) & (codes >= 0)])
    step = v[-1] - v[-2]
    mids = np.concatenate([(v[:-1] + v[1:]) / 2, [v[-1] + step / 2, v[-1] + step]])
    centres = np.concatenate([v, mids]).astype(np.float32).view(np.uint32).astype(np.int64)
    return (centres[:, None] + np.arange(-16, 17)).ravel()


def _sample(dtype) -> np.ndarray:
    pos = np.concatenate([_edges(dtype), _specials()]).astype(np.uint32)
    return np.concatenate([_strided(), pos, pos | np.uint32(0x80000000)])


def _reference(bits: np.ndarray, dtype, name: str, saturate: bool) -> np.ndarray:
    x = bits.view(np.float32)
    m = float(ml_dtypes.finfo(dtype).max)
    with np.errstate(all="ignore"):
        if name in NO_SPECIALS:
            x = np.where(np.isnan(x), np.float32(0), np.clip(x, -m, m))
        elif saturate:
            x = np.clip(x, -m, m)
        return x.astype(dtype)


def _compare(ours_codes: np.ndarray, ref: np.ndarray, bits: np.ndarray, label: str) -> None:
    ours = ours_codes.astype(ref.dtype.itemsize == 1 and np.uint8 or np.uint16).view(ref.dtype)
    ref_nan = np.isnan(ref.astype(np.float32))
    ours_nan = np.isnan(ours.astype(np.float32))
    same = ours.view(np.uint8 if ref.dtype.itemsize == 1 else np.uint16) == ref.view(
        np.uint8 if ref.dtype.itemsize == 1 else np.uint16)
    signs = np.signbit(ours.astype(np.float32)) == np.signbit(ref.astype(np.float32))
    ok = np.where(ref_nan, ours_nan & signs, same)
    bad = np.nonzero(~ok)[0]
    assert bad.size == 0, (
        f"{label}: {bad.size} mismatches, first x bits {int(bits[bad[0]]):#010x}: ours "
        f"{int(ours_codes[bad[0]]):#x}, reference {int(ref.view(np.uint8 if ref.dtype.itemsize == 1 else np.uint16)[bad[0]]):#x}")


def _params(name: str):
    f = get_format(name)
    return f, (f.ebits, f.mbits, f.bias, f.max_code, bool(f.has_inf), int(f.nan_style))


@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("name", FLOAT8 + NO_SPECIALS)
def test_rule_matches_the_cast_tables(name, saturate):
    f, p = _params(name)
    bits = _sample(f.dtype)
    out = np.empty(bits.size, np.int32)
    _encode_all(bits, out, *p, saturate)
    _compare(out, _reference(bits, f.dtype, name, saturate), bits, f"{name} saturate={saturate}")


def test_rule_as_float16_matches_numpy():
    """half_bits rounds to float16 with the same rule (unsaturated, IEEE NaN)."""
    bits = _sample(np.float16)
    out = np.empty(bits.size, np.int32)
    _encode_all(bits, out, 5, 10, 15, F16_MAX_CODE, True, int(NanStyle.IEEE), False)
    with np.errstate(all="ignore"):
        ref = bits.view(np.float32).astype(np.float16)
    _compare(out, ref, bits, "float16")


@pytest.mark.parametrize("name", FLOAT8 + NO_SPECIALS)
def test_kernel_matches_the_cast_tables(name):
    """The vector loops of the kernels (both saturate modes, with and without a zero point for
    the formats that add one) on the strided sample and the edges."""
    f, _ = _params(name)
    bits = np.concatenate([_strided()[::4], _edges(f.dtype).astype(np.uint32)])
    x = bits.view(np.float32)
    for saturate in (True, False):
        y = qcore.quantize_linear(x, np.float32(1.0), output_dtype=name, saturate=saturate)
        ref = _reference(bits, f.dtype, name, saturate)
        _compare(y.view(np.uint8).astype(np.int32), ref, bits, f"kernel {name} {saturate}")
    if name in NO_SPECIALS:
        z = np.zeros((), f.dtype)
        y = qcore.quantize_linear(x, np.float32(1.0), z)
        with np.errstate(all="ignore"):
            ref = _reference((x + np.float32(0)).view(np.uint32), f.dtype, name, True)
        _compare(y.view(np.uint8).astype(np.int32), ref, bits, f"kernel {name} + zero point")
