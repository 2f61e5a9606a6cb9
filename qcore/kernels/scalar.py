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

from .bits import HAS_F16C, f32_as_u32, f32_via_f16, u32_as_f32
from .params import NanStyle, PKind, XKind

_JIT = {"cache": True, "nogil": True}


_I32 = np.int32
_U32 = np.uint32


@njit(inline="always", **_JIT)
def encode_consts(ebits, mbits, bias, max_code, has_inf, nan_style, saturate):
    """The loop-invariant constants of :func:`encode_with` for one small float format, as a
    tuple of int32: (shift, min_normal, offset, overflow bound, cap, nan code, nan sign bit,
    -0 code, sign bit, nan bound)."""
    sbit = ebits + mbits
    s = 23 - mbits  # float32 mantissa bits dropped
    min_normal = (128 - bias) << 23  # float32 bits of the target's smallest normal, 2**(1-bias)
    offset = (s << 23) + (min_normal >> s)
    # the smallest float32 bits that round past max_code: the midpoint above the largest finite
    # value, itself included when the tie goes up (to an even code, i.e. max_code odd)
    mid = ((max_code + ((127 - bias) << mbits)) << s) + (1 << (s - 1))
    over = mid if (max_code & 1) == 1 else mid + 1
    clamps = saturate == 1 or (has_inf == 0 and nan_style == NanStyle.NONE)
    # saturate: overflow is max_code; otherwise the code past it (Inf for e5m2; for the formats
    # without Inf, overflow is NaN and handled with NaN below)
    cap = max_code if clamps else max_code + 1
    if nan_style == NanStyle.ALL_ONES:
        nan_code = (1 << sbit) - 1
    elif nan_style == NanStyle.IEEE:  # canonical quiet NaN
        nan_code = (((1 << ebits) - 1) << mbits) | (1 << (mbits - 1))
    elif nan_style == NanStyle.NEG_ZERO:
        nan_code = 1 << sbit
    else:
        nan_code = 0  # no NaN in the format: +0
    nan_sign = 1 << sbit if nan_style == NanStyle.ALL_ONES or nan_style == NanStyle.IEEE else 0
    neg_zero = 1 << sbit if nan_style == NanStyle.NEG_ZERO else -1
    nan_bound = over - 1 if not clamps and has_inf == 0 else 0x7F800000
    return (_I32(s), _I32(min_normal), _I32(offset), _I32(over), _I32(cap), _I32(nan_code),
            _I32(nan_sign), _I32(neg_zero), _I32(1 << sbit), _I32(nan_bound))


@njit(inline="always", **_JIT)
def encode_with(b, c, fnuz):
    """The small float code (int32) of the float32 with bits `b`; `c` from :func:`encode_consts`,
    `fnuz`: the format has no -0 (nan_style NEG_ZERO; a separate flag so callers can hoist it).

    Branch-free 32-bit integer and float32 arithmetic only (selects, no table, no 64-bit lanes),
    so that loops over it vectorise on AVX2 and AVX-512. The float32 is rounded half to even to
    the target's grid by one float32 addition: M = 2**(e + 23 - mbits), with e the exponent of
    |x| (at least the target's minimum normal exponent), has an ulp of exactly the grid's step
    in the binade of x, so ``|x| + M`` rounds where the target rounds, and the result's bits
    less M's bits count grid steps above 2**e (the significand, implicit bit included; a
    subnormal's plain count below). Inputs past the overflow bound are clamped to it (they
    round to max_code + 1), then capped (saturate) or replaced (NaN) per the Cast tables.
    """
    s, min_normal, offset, over, cap, nan_code, nan_sign, neg_zero, sbit, nan_bound = c
    s = s & _I32(31)  # keeps the shift in 32-bit lanes
    a = _I32(b & _U32(0x7FFFFFFF))
    smask = _I32(_I32(b) >> _I32(31))  # all ones for a negative x
    ac = a if a < over else over
    e = _I32(ac & _I32(0x7F800000))
    e = e if e > min_normal else min_normal
    m = _I32(e + _I32(s << _I32(23)))
    k = _I32(f32_as_u32(u32_as_f32(ac) + u32_as_f32(m)))
    code = _I32(_I32(_I32(k - e) + _I32(e >> s)) - offset)
    code = code if code < cap else cap
    r = _I32(code | _I32(sbit & smask))
    if fnuz:
        r = _I32(0) if r == neg_zero else r
    nan = _I32(nan_code | _I32(nan_sign & r))
    return nan if a > nan_bound else r


@njit(inline="always", **_JIT)
def encode_f32_bits(b, ebits, mbits, bias, max_code, has_inf, nan_style, saturate):
    """Round the float32 with bits `b` to a small float format; return its code.

    Round-half-to-even on the mantissa; overflow, Inf and NaN follow the ONNX Cast tables
    (saturate=True: +-max; False: Inf or NaN as the format has them). Formats without NaN
    (float4/float6) map NaN to +0 and always saturate; the fnuz formats have no -0.
    """
    c = encode_consts(ebits, mbits, bias, max_code, has_inf, nan_style, saturate)
    return encode_with(b, c, nan_style == NanStyle.NEG_ZERO)


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
    """Round a float32 to float16 or bfloat16 (half to even; NaN kept, canonical), as float32.

    No branches and no 64-bit arithmetic (32-bit lanes, selects), so loops over it vectorise;
    float16 by the F16C instructions where the target has them. Inputs whose sums wrap past
    int32 are NaNs, replaced last."""
    if pkind == PKind.F32:
        return v
    b = _I32(f32_as_u32(v))
    a = _I32(b & _I32(0x7FFFFFFF))
    sign = _I32(b & _I32(-0x80000000))
    if pkind == PKind.BF16:
        r = _I32(_I32(_I32(a + _I32(0x7FFF)) + _I32(_I32(a >> _I32(16)) & _I32(1)))
                 & _I32(-0x10000))
        r = _I32(_I32(a | _I32(0x400000)) & _I32(-0x10000)) if a > _I32(0x7F800000) else r
        return u32_as_f32(_I32(r | sign))
    if HAS_F16C:  # the conversion instructions round exactly so; the NaN made canonical
        r = f32_via_f16(v)
        return u32_as_f32(_I32(0x7FC00000) | sign) if v != v else r
    return round_f16_portable(v)


@njit(**_INLINE)
def round_f16_portable(v):
    """round_to_precision(v, PKind.F16) without F16C: |v| + M rounds to float16's grid when
    M = 2**(e + 13), e the exponent of |v| (at least -14, float16's smallest normal exponent:
    below it the grid is 2**-24); the subtraction is exact. Past 65504 the result is Inf; |v| is
    first clamped to 2**16, where M stays finite. Float compares (one instruction each)."""
    b = _I32(f32_as_u32(v))
    sign = _I32(b & _I32(-0x80000000))
    av = u32_as_f32(_I32(b & _I32(0x7FFFFFFF)))
    ac = av if av < np.float32(65536.0) else np.float32(65536.0)
    e = _I32(f32_as_u32(ac) & _U32(0x7F800000))
    e = e if e > _I32(0x38800000) else _I32(0x38800000)
    m = u32_as_f32(_I32(e + _I32(13 << 23)))
    r = (ac + m) - m
    r = np.float32(np.inf) if r > np.float32(65504.0) else r
    rb = _I32(0x7FC00000) if v != v else _I32(f32_as_u32(r))
    return u32_as_f32(_I32(rb | sign))


@njit(**_INLINE)
def f16_to_f32(h):
    """float16 bits to float32, exactly: 32-bit integer lanes and selects, no branches or
    tables. Subnormals are renormalised by one exact float32 subtraction."""
    h = _I32(h)
    o = _I32(_I32(h & _I32(0x7FFF)) << _I32(13))  # exponent and mantissa, in place
    e = _I32(o & _I32(0x0F800000))
    o = _I32(o + _I32(0x38000000))  # rebias the exponent: 127 - 15 = 112
    special = _I32(o + _I32(0x38000000))  # exponent 31 -> 255 (Inf, NaN with its payload)
    # subnormal: 2^-14 * (1 + m/1024) - 2^-14 = m * 2^-24, exactly
    sub = _I32(f32_as_u32(u32_as_f32(_I32(o + _I32(0x00800000))) - np.float32(6.103515625e-05)))
    o = special if e == _I32(0x0F800000) else o
    o = sub if e == _I32(0) else o
    return u32_as_f32(_I32(o | _I32(_I32(h & _I32(0x8000)) << _I32(16))))


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


@njit(**_INLINE)
def half_bits(v, okind):
    """A float32 rounded once (half to even) to float16 or bfloat16, as its uint16 bits."""
    b = f32_as_u32(v)
    if okind == PKind.BF16:
        a = _I32(b & _U32(0x7FFFFFFF))
        top = _I32(_I32(b) >> _I32(16)) & _I32(0xFFFF)
        r = _I32(_I32(_I32(a + _I32(0x7FFF)) + _I32(top & _I32(1))) >> _I32(16))
        r = _I32(r | _I32(top & _I32(0x8000)))
        r = _I32(top | _I32(0x40)) if a > _I32(0x7F800000) else r
        return _U32(r)
    return _U32(encode_f32_bits(b, 5, 10, 15, F16_MAX_CODE, True, NanStyle.IEEE, False))
