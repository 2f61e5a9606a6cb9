"""Scalar conversion rules, written once: the home of every element rule.

- QuantizeLinear's integer code: :func:`int_code` (and :func:`int_code_masked`, the same rule
  in the form the CPU integer kernels vectorise);
- the small-float encode: :func:`encode_f32_bits` (:func:`encode_consts` + :func:`encode_with`);
- one quotient to its code, either family: :func:`quantize_value`;
- DequantizeLinear's rule: :func:`dequantize_value`;
- rounding to the precision type and 16-bit conversions (:func:`round_to_precision`,
  :func:`half_bits`, :func:`f16_to_f32`, :func:`load_x`).

These functions hold all of qcore's element semantics (round-half-to-even, the Cast operator's
saturation tables, NaN/Inf/-0 conventions). They use only integer and float scalar arithmetic,
so the same definitions serve the numba CPU kernels and the numba.cuda kernels. Where a kernel
needs a hand-written vector version for speed, the rule's docstring names it, and
tests/test_element_rules.py checks every such copy against the rule on every code.

Float values cross into these functions as IEEE float32 *bit patterns* (uint32); the drivers do the
reinterpretation (CPU: a chunk buffer viewed as uint32; CUDA: a device-side bit cast).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit

from .bits import HAS_F16C, f32_as_u32, f32_via_f16, rint_to_int32, u32_as_f32
from .jit import INLINE, JIT
from .params import DXKind, NanStyle, PKind, TKind, XKind

_I32 = np.int32
_U32 = np.uint32


class EncodeConsts(NamedTuple):
    """The loop-invariant constants of :func:`encode_with` for one small float format (each an
    int32 inside the kernels)."""

    shift: int  # float32 mantissa bits dropped: 23 - mbits
    min_normal: int  # float32 bits of the target's smallest normal
    offset: int  # subtracted from the rounded bits to leave the code
    over: int  # the smallest float32 bits that round past the largest finite code
    cap: int  # the code overflow becomes (max_code, or the one past it: Inf / NaN)
    nan_code: int
    nan_sign: int  # the sign bit a NaN code keeps (0: NaN codes have no sign)
    neg_zero: int  # the -0 code of an fnuz format (-1: the format has -0)
    sign_bit: int
    nan_bound: int  # float32 bits above which the result is NaN


@njit(**INLINE)
def encode_consts(ebits, mbits, bias, max_code, has_inf, nan_style, saturate):
    """The loop-invariant constants of :func:`encode_with` for one small float format."""
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
    return EncodeConsts(_I32(s), _I32(min_normal), _I32(offset), _I32(over), _I32(cap),
                        _I32(nan_code), _I32(nan_sign), _I32(neg_zero), _I32(1 << sbit),
                        _I32(nan_bound))


@njit(**INLINE)
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

    Vector copy: :data:`qcore.kernels.bits.FLOAT_CODES` (the same steps as LLVM vector
    operations, for the CPU small-float kernels). The CUDA kernels call this function itself;
    what they add around it is checked with it (tests/test_element_rules.py): the quotient's
    bits (:func:`qcore.kernels.cuda_quantize.q_small_float_bits`, the generic
    :func:`qcore.kernels.cuda_kernels.quantize_kernel`) and the choice of the GPU's float8
    conversion below the overflow bound (:func:`qcore.kernels.cuda_quantize._hw_or_encoder`).
    Shorter copy for float4e2m1, the CUDA kernels' "fp4" family: :func:`e2m1_code`.
    """
    s = c.shift & _I32(31)  # keeps the shift in 32-bit lanes
    a = _I32(b & _U32(0x7FFFFFFF))
    smask = _I32(_I32(b) >> _I32(31))  # all ones for a negative x
    ac = a if a < c.over else c.over
    e = _I32(ac & _I32(0x7F800000))
    e = e if e > c.min_normal else c.min_normal
    m = _I32(e + _I32(s << _I32(23)))
    k = _I32(f32_as_u32(u32_as_f32(ac) + u32_as_f32(m)))
    code = _I32(_I32(_I32(k - e) + _I32(e >> s)) - c.offset)
    code = code if code < c.cap else c.cap
    r = _I32(code | _I32(c.sign_bit & smask))
    if fnuz:
        r = _I32(0) if r == c.neg_zero else r
    nan = _I32(c.nan_code | _I32(c.nan_sign & r))
    return nan if a > c.nan_bound else r


@njit(**INLINE)
def e2m1_code(b):
    """The float4 e2m1 code (int32) of the float32 with bits `b`: :func:`encode_with` for
    float4e2m1 (which always saturates and has no NaN: NaN is +0), in fewer steps.

    Below 1.0 the grid is the multiples of 0.5: ``|x| + 2**22`` (whose ulp is 0.5) rounds half
    to even onto it and its bits less 2**22's count the steps, the code itself (0, 1, 2). From
    1.0 up, |x| clamped to 6.0 (the largest value) is rounded half to even to one mantissa bit
    on its bits (add 2**21 - 1 and the kept bit, drop 22 bits), which leaves (exponent,
    mantissa bit) as one number, the code plus 252. The sign goes to bit 3. Integer and float32
    steps with constants, so a CUDA kernel compiled for this format alone runs a third of the
    generic encoder's instructions. tests/test_element_rules.py checks it against encode_with
    on every float32."""
    a = _I32(b & _U32(0x7FFFFFFF))
    low = _I32(_I32(f32_as_u32(u32_as_f32(a) + np.float32(4194304.0))) - _I32(0x4A800000))
    ac = a if a < _I32(0x40C00000) else _I32(0x40C00000)
    up = _I32(_I32(_I32(ac + _I32(0x1FFFFF)) + _I32(_I32(ac >> _I32(22)) & _I32(1))) >> _I32(22))
    code = low if a < _I32(0x3F800000) else _I32(up - _I32(252))
    r = _I32(code | _I32(_I32(b >> _U32(28)) & _I32(8)))
    return _I32(0) if a > _I32(0x7F800000) else r


@njit(**INLINE)
def encode_f32_bits(b, ebits, mbits, bias, max_code, has_inf, nan_style, saturate):
    """Round the float32 with bits `b` to a small float format; return its code.

    Round-half-to-even on the mantissa; overflow, Inf and NaN follow the ONNX Cast tables
    (saturate=True: +-max; False: Inf or NaN as the format has them). Formats without NaN
    (float4/float6) map NaN to +0 and always saturate; the fnuz formats have no -0.
    """
    c = encode_consts(ebits, mbits, bias, max_code, has_inf, nan_style, saturate)
    return encode_with(b, c, nan_style == NanStyle.NEG_ZERO)


@njit(**JIT)
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


@njit(**INLINE)
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


@njit(**INLINE)
def saturate_int(r, zero_point, lo, hi):
    """saturate(r + zero_point) as int32 (see :func:`saturate_float`)."""
    return np.int32(saturate_float(r, zero_point, lo, hi))


@njit(**INLINE)
def int_code(r, zero_point, lo, hi, wrap):
    """The stored code of saturate(r + zero_point), r = rint(x / scale): the value in two's
    complement in `bits` bits (wrap = 2**bits), as a non-negative int32, computed in float32
    (no 64-bit lanes). QuantizeLinear's integer rule.

    Copies for speed (tests/test_element_rules.py checks each against this rule on every
    code): :func:`int_code_masked` (the CPU integer kernels' scalar loops), the vector steps
    :data:`qcore.kernels.bits.int_codes_32` / ``_64`` / ``_128`` / ``int_codes_step``, and on
    CUDA :func:`qcore.kernels.cuda_quantize.q_int` (the specialised kernels) and the generic
    :func:`qcore.kernels.cuda_kernels.quantize_kernel`, which take the two's complement as
    the low bits (as int_code_masked does)."""
    t = saturate_float(r, zero_point, lo, hi)
    t = t + np.float32(wrap) if t < np.float32(0.0) else t
    return np.int32(t)


@njit(**INLINE)
def int_code_masked(q, zf, lo, hi, mask):
    """:func:`int_code` of rint(q), with the two's complement taken as the int32's low bits
    (`mask` = 2**bits - 1): one AND per vector where adding 2**bits to negatives costs a
    compare and a blend.

    q is clamped to [lo - zf, hi - zf] before it is rounded: the bounds are integers, so
    clamping and rounding to an integer commute, and the rounding and the conversion then are
    one instruction (:func:`~qcore.kernels.bits.rint_to_int32`); the zero point is added in
    int32. Every value is exact (integers below 2**17). NaN fails both comparisons' first
    test and becomes lo, as in saturate_float."""
    a = lo - zf
    b = hi - zf
    t = q if q > a else a
    t = t if t < b else b
    return np.int32(np.int32(rint_to_int32(t) + np.int32(zf)) & mask)


@njit(**INLINE)
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


@njit(**INLINE)
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


@njit(**INLINE)
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


@njit(**INLINE)
def bf16_to_f32(h):
    """bfloat16 bits to float32 (the top half of the float32's bits)."""
    return u32_as_f32(np.uint32(h) << np.uint32(16))


@njit(**JIT)
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


@njit(**INLINE)
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


@njit(**JIT)
def quantize_value(q, z, qp):
    """Code of one quotient q = x / scale (already rounded to the precision type) for the
    target of `qp` (:class:`~qcore.kernels.params.QuantizeParams`): :func:`int_code` for an
    integer target; for a small float, the zero point added (and rounded to the precision
    again) when one was given, then :func:`encode_f32_bits`."""
    if qp.tkind == TKind.INT:
        return int_code(np.rint(q), z, qp.lo, qp.hi, qp.mask + 1)
    if qp.has_zp == 1:
        q = round_to_precision(q + np.float32(z), qp.pkind)
    return encode_f32_bits(f32_as_u32(q), qp.ebits, qp.mbits, qp.bias, qp.max_code,
                           qp.has_inf == 1, qp.nan_style, qp.saturate == 1)


@njit(**INLINE)
def dequantize_f32(xv, z, s, xkind, tab):
    """DequantizeLinear's rule to a float32 output: (x - zero_point) * scale in float32.

    The difference is exact in float32 for 8/16-bit integers (DXKind.NUMERIC) and for the
    values of the decode table `tab` (DXKind.TABLE: sub-byte integers and small floats, by
    byte); int32's is formed in int64, then rounded once. The product is rounded once.

    CUDA copies (tests/test_element_rules.py checks each on every code):
    :func:`qcore.kernels.cuda_dequantize.dq_element` (8-bit codes, the specialised kernels)
    and the generic :func:`qcore.kernels.cuda_kernels.dequantize_kernel`, both returning a
    NaN code's table value with the CPU's bits rather than through GPU arithmetic."""
    if xkind == DXKind.NUMERIC:
        d = np.float32(xv) - np.float32(z)
    elif xkind == DXKind.TABLE:
        d = np.float32(tab[np.int64(xv)]) - np.float32(z)
    else:
        d = np.float32(np.int64(xv) - np.int64(z))
    return d * s


@njit(**JIT)
def dequantize_value(xv, z, s, xkind, okind, tab):
    """DequantizeLinear's rule: :func:`dequantize_f32`, then rounded once more (half to even)
    to a 16-bit output, as the output type's bits (float32, or float16/bfloat16 bits as a
    float32 holding the uint16). Every CPU dequantize kernel calls this rule, or
    dequantize_f32 where the output is float32 (tests/test_element_rules.py runs each family
    on every code)."""
    v = dequantize_f32(xv, z, s, xkind, tab)
    if okind == PKind.F32:
        return v
    return np.float32(half_bits(v, okind))
