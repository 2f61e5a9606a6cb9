"""The other QuantizeLinear segments: float32 x to a small float target (:func:`seg_float`),
and any x kind, precision and target (:func:`seg_generic`).

Segments convert one run of a chunk (:class:`~qcore.kernels.walk.Run`) block by block through
the one block walk (:func:`~qcore.kernels.walk.block_span`), and return how many unusable scales
they found (these check none: their scales are checked before the call). Both are templates
compiled once per case (:func:`qcore.kernels.bound`), so each loop holds one combination of
kinds and a first call compiles only its own.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import renamed
from .bits import EXPLICIT_VECTORS, FLOAT_CODES, HAS_F16C, f16_bits_as_f32, f32_as_u32, wide_vectors
from .jit import INLINE, JIT
from .params import NanStyle, PKind, XKind
from .scalar import (
    bf16_to_f32,
    encode_consts,
    encode_with,
    f16_to_f32,
    int_code,
    int_code_masked,
    load_x,
    quantize_value,
    round_to_precision,
)
from .walk import block_count, block_span

#: round_to_precision as a call, for the generic loops: compiled once, and inlined by LLVM
#: with the loop's precision folded in. numba's own inlining copies a function's IR into every
#: call site and types each copy, which makes a loop that calls it often slow to compile.
_round = njit(**JIT)(renamed(round_to_precision.py_func, "_called"))


@njit(**INLINE)
def float_consts(qp):
    """The encode constants (:class:`~qcore.kernels.scalar.EncodeConsts`) of qp's target."""
    return encode_consts(qp.ebits, qp.mbits, qp.bias, qp.max_code, qp.has_inf, qp.nan_style,
                         qp.saturate)


# Bound per compiled copy (see cpu.FLOAT_CASES and qcore.kernels.bound): whether the target has
# no -0 (NanStyle.NEG_ZERO), whether a zero point is added, and the vector step of that case.
_FNUZ = False
_ADD = False
_FLOAT_CODES = FLOAT_CODES[False, False]


def seg_float(run, qp, buf):
    """float32 x divided in float32 to a small float target, encoded arithmetically
    (:func:`~qcore.kernels.scalar.encode_with`; 32 at a time by its vector copy where
    EXPLICIT_VECTORS). A given zero point is added even when 0 (-0 + 0 is +0); without one
    nothing is added. A template: `_FNUZ`, `_ADD` and `_FLOAT_CODES` are bound per case, so
    each compiled copy holds only the loops of its case. Takes no scratch."""
    wide_vectors()
    xs, ys, sv, zv, block, first = run
    n = xs.size
    c = float_consts(qp)
    if block == 0:
        for j in range(n):
            q = xs[j] / sv[j]
            q = q + np.float32(zv[j]) if _ADD else q
            ys[j] = encode_with(f32_as_u32(q), c, _FNUZ)
        return 0
    for b in range(block_count(n, block, first)):
        j0, j1 = block_span(b, n, block, first)
        s0 = sv[b]
        za = np.float32(zv[b])
        if EXPLICIT_VECTORS:
            while j0 + 32 <= j1:
                _FLOAT_CODES(xs, j0, ys, s0, za, c)
                j0 += 32
        for j in range(np.uint64(j0), np.uint64(j1)):
            q = xs[j] / s0
            q = q + za if _ADD else q
            ys[j] = encode_with(f32_as_u32(q), c, _FNUZ)
    return 0


@njit(**INLINE)
def _load_as(args, pkind):
    """v[j] = x[j] as float32, rounded to `pkind` (PKind.F32: not rounded), for
    args = (xs, v, n, xkind); both kinds constants: one plain loop, decoding and rounding in
    one pass."""
    xs, v, n, xkind = args
    for j in range(np.uint64(0), np.uint64(n)):
        if xkind == XKind.F16:
            w = f16_to_f32(xs[j])
        elif xkind == XKind.BF16:
            w = bf16_to_f32(xs[j])
        else:
            w = np.float32(xs[j])
        v[j] = w if pkind == PKind.F32 else _round(w, pkind)


@njit(**INLINE)
def _int_block(args, pkind):
    """ys[j] = integer code of v[j] / s0 rounded to the precision `pkind`, for
    args = (v, ys, j0, j1, s0, z0, lo, hi, wrap)."""
    v, ys, j0, j1, s0, z0, lo, hi, wrap = args
    for j in range(np.uint64(j0), np.uint64(j1)):
        ys[j] = int_code(np.rint(_round(v[j] / s0, pkind)), z0, lo, hi, wrap)


@njit(**INLINE)
def _float_block(args, pkind):
    """ys[j] = small float code of v[j] / s0 rounded to the precision (then + za, rounded
    again, when `add`), for args = (v, ys, j0, j1, s0, za, add, c, fnuz)."""
    v, ys, j0, j1, s0, za, add, c, fnuz = args
    if add:
        for j in range(np.uint64(j0), np.uint64(j1)):
            q = _round(v[j] / s0, pkind)
            q = _round(q + za, pkind)
            ys[j] = encode_with(f32_as_u32(q), c, fnuz)
    else:
        for j in range(np.uint64(j0), np.uint64(j1)):
            ys[j] = encode_with(f32_as_u32(_round(v[j] / s0, pkind)), c, fnuz)


@njit(**INLINE)
def _half_to_f32(h, xkind):
    """A float16 or bfloat16 element (its uint16 bits) as float32, exactly (float16 by one
    vcvtph2ps where the target has F16C; it quiets a signalling NaN, which no integer code
    can tell apart: every NaN saturates alike)."""
    if xkind == XKind.BF16:
        return bf16_to_f32(h)
    if HAS_F16C:  # (the cast: kernels that compile this for other x types never run it)
        return f16_bits_as_f32(np.uint16(h))
    return f16_to_f32(h)


@njit(**INLINE)
def _int_blocks_half(args, pkind):
    """Every block of a run of 16-bit x to an integer target, decoding fused into one loop per
    block (no chunk buffer), for args = (run, lo, hi, mask, xkind). x is exact in float32 and
    in its own type, so it is rounded to the precision only when that is the other 16-bit
    type."""
    run, lo, hi, mask, xkind = args
    xs, ys, sv, zv, block, first = run
    n = xs.size
    for b in range(block_count(n, block, first)):
        j0, j1 = block_span(b, n, block, first)
        s0 = sv[b]
        z0 = np.float32(zv[b])
        for j in range(np.uint64(j0), np.uint64(j1)):
            w = _half_to_f32(xs[j], xkind)
            if pkind != PKind.F32 and pkind != xkind:
                w = _round(w, pkind)
            ys[j] = int_code_masked(_round(w / s0, pkind), z0, lo, hi, mask)


# Bound per compiled copy of seg_generic (see cpu.GENERIC): x's kind, the precision,
# the precision x is loaded at (float32 where x is a 16-bit type and the precision its own:
# such an x is exact in it), and the target family and x's class as plain bools, which numba
# prunes branches on before typing (it does not fold comparisons of enum members).
_XKIND = XKind.F16
_PKIND = PKind.F32
_LOAD_PKIND = PKind.F32
_INT_TARGET = True
_HALF_X = True  # x is float16 or bfloat16
_INT32_X = False


def seg_generic(run, qp, buf):
    """Any x kind, precision and target: 16-bit x to an integer target in one fused loop per
    block; otherwise, piece by piece of `buf`'s length (a chunk), x decoded and rounded to the
    precision into `buf`, then per block one fused loop (divide, round to the precision,
    encode). A template: the kinds are bound per compiled copy (see above), so numba drops the
    other combinations' branches before compiling and a first call compiles the loops of one
    combination only."""
    wide_vectors()
    xs, ys, sv, zv, block, first = run
    n = xs.size
    lo = np.float32(qp.lo)
    hi = np.float32(qp.hi)
    wrap = np.float32(qp.mask + 1)
    if block == 0:
        if _INT_TARGET:
            for j in range(n):
                q = _round(load_x(xs[j], _XKIND, _PKIND) / sv[j], _PKIND)
                ys[j] = int_code(np.rint(q), zv[j], lo, hi, wrap)
        else:
            for j in range(n):
                q = _round(load_x(xs[j], _XKIND, _PKIND) / sv[j], _PKIND)
                ys[j] = quantize_value(q, zv[j], qp)
        return 0
    if _INT_TARGET and _HALF_X:
        _int_blocks_half((run, lo, hi, np.int32(qp.mask), _XKIND), _PKIND)
        return 0
    v = buf
    if not _INT_TARGET:
        add = qp.has_zp == 1
        c = float_consts(qp)
        fnuz = qp.nan_style == NanStyle.NEG_ZERO
    for c0 in range(0, n, v.size):  # pieces of the scratch's length (a direct call's run is x)
        m = min(v.size, n - c0)
        xp = xs[c0:c0 + m]
        yp = ys[c0:c0 + m]
        at = first + c0  # the piece's first element, counted from the first scale's block
        k0 = at // block
        f0 = at - k0 * block
        if _INT32_X:
            for j in range(np.uint64(0), np.uint64(m)):
                v[j] = load_x(xp[j], _XKIND, _PKIND)
        else:
            _load_as((xp, v, m, _XKIND), _LOAD_PKIND)
        if _INT_TARGET:
            for b in range(block_count(m, block, f0)):
                j0, j1 = block_span(b, m, block, f0)
                _int_block((v, yp, j0, j1, sv[k0 + b], np.float32(zv[k0 + b]), lo, hi, wrap),
                           _PKIND)
        else:
            for b in range(block_count(m, block, f0)):
                j0, j1 = block_span(b, m, block, f0)
                _float_block((v, yp, j0, j1, sv[k0 + b], np.float32(zv[k0 + b]), add, c, fnuz),
                             _PKIND)
    return 0
