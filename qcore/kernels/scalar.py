"""Scalar conversion rules, written once: bit-level small-float encode/decode and integer saturation.

These functions hold all of qcore's element semantics (round-half-to-even, the Cast operator's
saturation tables, NaN/Inf/-0 conventions). They use only integer and float scalar arithmetic,
so the same definitions serve the numba CPU kernels and the numba.cuda kernels.

Float values cross into these functions as IEEE float32 *bit patterns* (uint32); the drivers do the
reinterpretation (CPU: a chunk buffer viewed as uint32; CUDA: a device-side bit cast).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..formats import NAN_ALL_ONES, NAN_IEEE, NAN_NEG_ZERO

_JIT = {"cache": True, "nogil": True}


@njit(inline="always", **_JIT)
def encode_f32_bits(b, ebits, mbits, bias, max_code, has_inf, nan_style, saturate):
    """Round the float32 with bits `b` to a small float format; return its code.

    Round-half-to-even on the mantissa; overflow, Inf and NaN follow the ONNX Cast tables
    (saturate=True: +-max; False: Inf or NaN as the format has them). Formats without NaN
    (float4/float6) map NaN to +0 and always saturate. Written without data-dependent
    branches (every case is computed and selected) so that random data runs at full speed.
    """
    b = np.int64(b) & 0xFFFFFFFF
    sign = b >> 31
    a = b & 0x7FFFFFFF
    exp_field = a >> 23
    frac = a & 0x7FFFFF
    sbit = ebits + mbits
    # value = sig * 2^(e - 23), f32 subnormals have e = -126 and no implicit bit
    e = (exp_field if exp_field > 1 else 1) - 127
    sig = frac | (np.int64(exp_field != 0) << 23)
    emin = 1 - bias
    below = e < emin  # the result is subnormal in the target
    extra = emin - e if emin > e else 0
    shift = (23 - mbits) + extra
    shift = shift if shift < 31 else 31
    base = 0 if below else (e + bias - 1) << mbits
    kept = sig >> shift
    rem = sig & ((np.int64(1) << shift) - 1)
    half = np.int64(1) << (shift - 1)
    up = np.int64((rem > half) | ((rem == half) & ((kept & 1) == 1)))
    code = base + kept + up
    # what overflow (and Inf) become: loop-invariant
    clamps = saturate or (not has_inf and nan_style == 0)
    inf_code = ((1 << ebits) - 1) << mbits
    nan_pos = _nan_code(0, ebits, mbits, nan_style)
    nan_neg = _nan_code(1, ebits, mbits, nan_style)
    over_pos = max_code if clamps else (inf_code if has_inf else nan_pos)
    over_neg = ((1 << sbit) | max_code) if clamps else (
        ((1 << sbit) | inf_code) if has_inf else nan_neg)
    signed_code = (sign << sbit) | code
    if nan_style == NAN_NEG_ZERO:
        signed_code = 0 if code == 0 else signed_code  # the fnuz formats have no -0
    over = (code > max_code) | (exp_field == 255)
    over_code = over_neg if sign == 1 else over_pos
    result = over_code if over else signed_code
    is_nan = a > 0x7F800000
    nan_code = nan_neg if sign == 1 else nan_pos
    return nan_code if is_nan else result


@njit(**_JIT)
def _nan_code(sign, ebits, mbits, nan_style):
    sbit = ebits + mbits
    if nan_style == NAN_ALL_ONES:
        return (sign << sbit) | ((1 << sbit) - 1)
    if nan_style == NAN_IEEE:  # canonical quiet NaN, sign kept
        return (sign << sbit) | (((1 << ebits) - 1) << mbits) | (1 << (mbits - 1))
    if nan_style == NAN_NEG_ZERO:
        return 1 << sbit
    return 0  # no NaN in the format: +0


@njit(**_JIT)
def decode_code(code, ebits, mbits, bias, has_inf, nan_style, signed):
    """The value of a small-float code as float64 (exact)."""
    sbit = ebits + mbits
    sign = (code >> sbit) & 1 if signed else 0
    mag = code & ((1 << sbit) - 1)
    exp_field = mag >> mbits
    frac = mag & ((1 << mbits) - 1)
    top = (1 << ebits) - 1
    if nan_style == NAN_ALL_ONES and mag == (1 << sbit) - 1:
        return math.nan
    if nan_style == NAN_NEG_ZERO and sign == 1 and mag == 0:
        return math.nan
    if mbits == 0:  # float8e8m0: 2^(e - bias), no zero, no sign
        return math.ldexp(1.0, exp_field - bias)
    if nan_style == NAN_IEEE and exp_field == top:
        if frac != 0:
            return math.nan
        return -math.inf if sign else math.inf
    if exp_field == 0:
        value = math.ldexp(float(frac), 1 - bias - mbits)
    else:
        value = math.ldexp(float(frac + (1 << mbits)), exp_field - bias - mbits)
    return -value if sign else value


@njit(**_JIT)
def round_int_to_float(i, mbits, max_value):
    """Round an integer to `mbits`+1 significant bits (half to even) as float64; inf past max."""
    neg = i < 0
    n = -i if neg else i
    if n >= (1 << (mbits + 1)):
        p = 0
        t = n
        while t > 1:
            t >>= 1
            p += 1
        shift = p - mbits
        kept = n >> shift
        rem = n & ((1 << shift) - 1)
        half = 1 << (shift - 1)
        if rem > half or (rem == half and (kept & 1) == 1):
            kept += 1
        n = kept << shift
    v = float(n)
    if v > max_value:
        v = math.inf
    return -v if neg else v


@njit(inline="always", **_JIT)
def saturate_int(r, zero_point, lo, hi):
    """y = saturate(r + zero_point) for an already rounded float r; NaN gives lo.

    r is clamped before the integer conversion so that |r| >= 2**31 and +-Inf saturate instead
    of wrapping (the onnx reference's bug). Branch-free so the loops vectorise.
    """
    is_nan = r != r
    r = r if r > -1.0e6 else -1.0e6
    r = r if r < 1.0e6 else 1.0e6
    t = np.int64(0.0 if is_nan else r) + zero_point
    t = t if t > lo else lo
    t = t if t < hi else hi
    return lo if is_nan else t
