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

from .bits import f32_as_u32, u32_as_f32
from .params import NanStyle, PKind, XKind

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
    if nan_style == NanStyle.NEG_ZERO:
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
    if nan_style == NanStyle.ALL_ONES:
        return (sign << sbit) | ((1 << sbit) - 1)
    if nan_style == NanStyle.IEEE:  # canonical quiet NaN, sign kept
        return (sign << sbit) | (((1 << ebits) - 1) << mbits) | (1 << (mbits - 1))
    if nan_style == NanStyle.NEG_ZERO:
        return 1 << sbit
    return 0  # no NaN in the format: +0


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
def saturate_float(r, zero_point, lo, hi):
    """saturate(r + zero_point) for an already rounded float32 r, as an integral float32; NaN
    gives lo.

    Computed in float32, where every value involved is exact: zero_point, lo and hi are
    integers of at most 16 bits, and r + zero_point is exact while |r| < 2**24 (past that it
    saturates either way). Clamping before any integer conversion makes +-Inf and |r| >= 2**31
    saturate instead of wrapping (the onnx reference's bug); the comparisons send NaN to lo.
    Branch-free and without float -> int64 conversion (which AVX2 lacks), so loops vectorise.
    """
    lo_f = np.float32(lo)
    hi_f = np.float32(hi)
    t = r + np.float32(zero_point)
    t = t if t > lo_f else lo_f
    return t if t < hi_f else hi_f


@njit(inline="always", **_JIT)
def saturate_int(r, zero_point, lo, hi):
    """saturate(r + zero_point) as int32 (see :func:`saturate_float`)."""
    return np.int32(saturate_float(r, zero_point, lo, hi))


@njit(inline="always", **_JIT)
def int_code(r, zero_point, lo, hi, wrap):
    """The stored code of saturate(r + zero_point): the value in two's complement in `bits`
    bits (wrap = 2**bits), as a non-negative int32, computed in float32 (no 64-bit lanes)."""
    t = saturate_float(r, zero_point, lo, hi)
    t = t + np.float32(wrap) if t < np.float32(0.0) else t
    return np.int32(t)


_INLINE = {"inline": "always", **_JIT}


@njit(**_INLINE)
def round_to_precision(v, pkind):
    """Round a float32 to float16 or bfloat16 (half to even; NaN kept), as float32."""
    if pkind == PKind.F32:
        return v
    b = f32_as_u32(v)
    a = b & np.uint32(0x7FFFFFFF)
    sign = b & np.uint32(0x80000000)
    if pkind == PKind.BF16:
        r = (a + np.uint32(0x7FFF) + ((a >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000)
        r = (a | np.uint32(0x400000)) & np.uint32(0xFFFF0000) if a > 0x7F800000 else r
        return u32_as_f32(r | sign)
    # float16: 10 mantissa bits for normals; below 2^-14 a multiple of 2^-24 (adding 0.5 in
    # float32 rounds there, half to even); past 65504 the result is Inf
    normal = (a + np.uint32(0xFFF) + ((a >> 13) & np.uint32(1))) & np.uint32(0xFFFFE000)
    tiny = f32_as_u32((u32_as_f32(a) + np.float32(0.5)) - np.float32(0.5))
    r = tiny if a < 0x38800000 else normal
    r = np.uint32(0x7F800000) if r > 0x477FE000 else r
    r = np.uint32(0x7FC00000) if a > 0x7F800000 else r
    return u32_as_f32(r | sign)


@njit(**_INLINE)
def f16_to_f32(h):
    """float16 bits to float32, exactly, without branches or tables."""
    h = np.uint32(h)
    sign = (h & np.uint32(0x8000)) << np.uint32(16)
    e = (h >> np.uint32(10)) & np.uint32(0x1F)
    m = h & np.uint32(0x3FF)
    normal = ((e + np.uint32(112)) << np.uint32(23)) | (m << np.uint32(13))
    special = np.uint32(0x7F800000) | (m << np.uint32(13))
    sub = f32_as_u32(np.float32(m) * np.float32(5.960464477539063e-08))  # m * 2^-24
    bits = sub if e == 0 else (special if e == 31 else normal)
    return u32_as_f32(bits | sign)


@njit(**_INLINE)
def bf16_to_f32(h):
    """bfloat16 bits to float32 (the top half of the float32's bits)."""
    return u32_as_f32(np.uint32(h) << np.uint32(16))


@njit(**_JIT)
def load_x(xv, xkind, pkind):
    """One input element as float32, rounded to the precision type."""
    if xkind == XKind.F32:
        v = np.float32(xv)
    elif xkind == XKind.F16:
        v = f16_to_f32(xv)
    elif xkind == XKind.BF16:
        v = bf16_to_f32(xv)
    elif pkind == PKind.F32:
        return np.float32(np.int32(xv))
    else:
        mb = 10 if pkind == PKind.F16 else 7
        mx = 65504.0 if pkind == PKind.F16 else 3.3895313892515355e38
        return np.float32(round_int_to_float(np.int64(xv), mb, mx))
    if pkind != xkind:
        v = round_to_precision(v, pkind)
    return v


#: float16's largest finite code (0x7BFF = 65504), for half_bits
F16_MAX_CODE = 0x7BFF


@njit(**_JIT)
def half_bits(v, okind):
    """A float32 rounded once (half to even) to float16 or bfloat16, as its uint16 bits."""
    b = f32_as_u32(v)
    if okind == PKind.BF16:
        if (b & 0x7FFFFFFF) > 0x7F800000:
            return ((b | np.uint32(0x400000)) >> 16) & np.uint32(0xFFFF)
        return ((b + np.uint32(0x7FFF) + ((b >> 16) & np.uint32(1))) >> 16) & np.uint32(0xFFFF)
    return np.uint32(encode_f32_bits(b, 5, 10, 15, F16_MAX_CODE, True, NanStyle.IEEE, False))
