"""numba CPU kernels: one streaming pass over x in chunks, parallel over chunks.

A chunk is cut into runs by the layout's walk (:mod:`qcore.kernels.walk`); each run is converted
by a *segment* function with plain loops (one scale per block, or one per element) that LLVM
vectorises on AVX2 and AVX-512 alike. Every element rule lives in :mod:`qcore.kernels.scalar`;
this module only moves data.

Kernels come in small families, each compiled only when a call needs it (a cold start compiles
one family, not every path):

- quantize, float32 x divided in float32, to an integer target: per tensor
  (``_seg_int_tensor``: one scale, one loop) and with a scale per block, row or element
  (``_seg_int``)
- quantize, float32 x divided in float32, to a small float target (``_seg_float``: encoded
  arithmetically, branch-free)
- quantize, anything else (16-bit or int32 x, another precision): ``_seg_generic``: 16-bit x to
  an integer target in one loop per block (decode, divide, round to the precision, encode);
  otherwise x decoded into a chunk buffer, then one fused loop per block
- dequantize, 8/16-bit integers to float32 (``_dseg_numeric``), and everything else
  (``_dseg_generic``: decode tables, int32, 16-bit outputs)

Each family has a parallel and a serial driver around its segment function. A per-tensor call
below the parallel threshold is the segment's work alone (chunks add nothing to one serial
stream), so it calls the segment directly, in one run, and compiles no driver (about 3 s less of
Home's and again of the Quantize Lab's cold start on a znver3 host). Parameters are
the NamedTuples of :mod:`qcore.kernels.params` (int64 fields), so one compiled kernel per
(family, input dtype, output dtype) serves every format and granularity. Array arguments are
passed read-only (a view, no copy) so that the app's read-only arrays and writable ones share
one compilation.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, NamedTuple

import numpy as np
from numba import njit, prange

from .. import config
from ..concurrency import numba_threads, parallel_call, parallel_workers
from ..config import CHUNK, PARALLEL_THRESHOLD
from . import bound, renamed
from .bits import (
    EXPLICIT_VECTORS,
    FLOAT_CODES,
    HAS_F16C,
    INT_STEP,
    f16_bits_as_f32,
    f32_as_u32,
    fetch_add,
    int_codes_32,
    int_codes_64,
    int_codes_128,
    int_codes_step,
    rint_to_int32,
    u32_as_f32,
    wide_vectors,
)
from .params import DXKind, NanStyle, PKind, QuantizeParams, TKind, XKind
from .scalar import (
    bf16_to_f32,
    encode_consts,
    encode_f32_bits,
    encode_with,
    f16_to_f32,
    half_bits,
    int_code,
    load_x,
    round_to_precision,
)
from .walk import locate, next_segment, per_element_scales

__all__ = ["CHUNK", "PARALLEL_THRESHOLD", "quantize", "dequantize", "minmax"]

_JIT = {"cache": True, "nogil": True, "error_model": "numpy"}
_INLINE = {"inline": "always", **_JIT}


@njit(**_INLINE)
def _int_code(q, zf, lo, hi, wrap):
    """Stored integer code of a float32 quotient: round half to even, add the zero point,
    saturate, two's complement in the target's bits."""
    return int_code(np.rint(q), zf, lo, hi, wrap)


@njit(**_INLINE)
def _int_code_masked(q, zf, lo, hi, mask):
    """_int_code with the two's complement taken as the int32's low bits (`mask` = 2**bits - 1):
    one AND per vector where adding 2**bits to negatives costs a compare and a blend.

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


# ---------------------------------------------------------------------------------------------
# Quantize segments: xs -> ys with scales sv and zero points zv; each returns how many unusable
# scales it found (0 where it does not check). block == 0: element j has
# sv[j], zv[j]; block > 0: element j has sv[(first + j) // block]. Unsigned loop indices: numba
# then emits no negative-index wraparound, and LLVM vectorises.
# ---------------------------------------------------------------------------------------------


@njit(**_INLINE)
def _int_run(xs, ys, j0, j1, s0, zf, lo, hi, mask, vectors):
    """ys[j] for j0 <= j < j1, all with scale s0 and zero point zf (see _int_code_masked).
    Where EXPLICIT_VECTORS, INT_STEP at a time as written-out vector code, then 64 at a time:
    LLVM's own vectorisation of the scalar loop reached 0.88x onnxruntime's whole call on a
    2-core Xeon (AVX-512), the same operations written as vectors 0.94-1.01x (kernel alone, 64
    per step) and 1.09-1.10x (256 per step). The rest one at a time. (`vectors`: the caller's
    EXPLICIT_VECTORS, so that a kernel compiled with it bound off has no vector step.)"""
    j = j0
    if vectors:
        a = lo - zf
        b = hi - zf
        zi = np.int32(zf)
        while j + INT_STEP <= j1:
            int_codes_step(xs, j, ys, s0, a, b, zi, mask)
            j += INT_STEP
        while j + 64 <= j1:
            int_codes_64(xs, j, ys, s0, a, b, zi, mask)
            j += 64
    for k in range(np.uint64(j), np.uint64(j1)):
        ys[k] = _int_code_masked(xs[k] / s0, zf, lo, hi, mask)


@njit(**_INLINE)
def _int_whole_32s(xs, ys, j0, j1, s0, zf, lo, hi, mask, vectors):
    """_int_run for a short block made of whole 32s (block 32, 64, 128...): fixed steps, no
    remainder loop or alias checks (see _int_vector_block; `vectors` as in _int_run)."""
    if vectors:
        _int_vector_block(xs, ys, j0, j1, s0, lo - zf, hi - zf, np.int32(zf), mask)
        return
    j = j0
    while j < j1:
        xb = xs[j:j + 32]
        yb = ys[j:j + 32]
        for k in range(32):
            yb[k] = _int_code_masked(xb[k] / s0, zf, lo, hi, mask)
        j += 32


@njit(**_INLINE)
def _int_vector_block(xs, ys, j0, j1, s0, a, b, zi, mask):
    """A block of whole 32s by the written-out vector steps, its clamp bounds `a`, `b` and zero
    point `zi` made (see _int_code_masked), in the widest steps that divide it (INT_STEP, 128,
    64 or 32 lanes: blocked 128 on AVX-512 0.85-0.88x onnxruntime in steps of 64, 0.98x in one
    of 128). (While loops: a stepped range costs a division per block, and blocks are short.)"""
    j = j0
    n = j1 - j0
    if n % INT_STEP == 0:
        while j < j1:
            int_codes_step(xs, j, ys, s0, a, b, zi, mask)
            j += INT_STEP
    elif n % 128 == 0:
        while j < j1:
            int_codes_128(xs, j, ys, s0, a, b, zi, mask)
            j += 128
    elif n % 64 == 0:
        while j < j1:
            int_codes_64(xs, j, ys, s0, a, b, zi, mask)
            j += 64
    else:
        while j < j1:
            int_codes_32(xs, j, ys, s0, a, b, zi, mask)
            j += 32


@njit(**_INLINE)
def _int_zero_point(zv, k, wrap, top):
    """Zero point k as float32 (exact). zv holds the target's own codes viewed as int8 or int16
    (no conversion per call: blocked zero points are 1/32 of x); ml_dtypes keeps a sub-byte
    code in the low bits unextended. The view's value, plus the view's 2**8 or 2**16 where
    negative, is the code; less the target's `wrap` (2**bits) above its largest value `top`,
    the value. Float32 zero points (see reads_codes) are read as they are."""
    if zv.itemsize == 4:  # a constant of the compiled type: one branch is left
        return np.float32(zv[k])
    z = np.float32(zv[k])
    z = z + np.float32(1 << (8 * zv.itemsize)) if z < np.float32(0) else z
    return z - wrap if z > top else z


@njit(**_INLINE)
def _unusable(s):
    """1 when scale s is not positive and finite (NaN included), else 0."""
    return np.int64(0) if s > np.float32(0) and s < np.float32(np.inf) else np.int64(1)


#: _seg_int's scratch: a zero point per block of 32 or more of a chunk, or per element of
#: _RUN_STEP consecutive ones (a fixed 4 KiB per worker: a chunk's worth was 13% of a 1 Mi int8
#: output).
_RUN_STEP = 1024
_SCRATCH = max(CHUNK // 32 + 2, _RUN_STEP)


@njit(**_JIT)
def _seg_int(xs, ys, sv, zv, block, first, qp, enc, buf):
    """float32 x, float32 division, integer target; zero points as the target's codes (see
    _int_zero_point; float32 on some layouts, see reads_codes). Returns how many of its blocks'
    scales were not usable (_unusable); a scale per element is not checked here: a run reads a
    whole row of them, which other runs read again (checks_values).

    With blocks of 32 or more (where `buf`, _SCRATCH float32s, holds a zero point per block),
    the blocks' scales are checked and their zero points decoded first, in one loop over the
    blocks: done block by block between the vector steps, that scalar work kept the blocked-32
    kernel at 0.87-0.90x onnxruntime's whole call, against 0.96-1.01x this way (in one process,
    AVX-512 and AVX2 code; blocked 128 the same within 2%). A zero point per element is decoded
    into `buf` _RUN_STEP at a time before those elements are converted: decoded inside the
    conversion loop, they kept it at 2.5-3.3 Gelem/s on AVX2, against 4.2-4.7 with float32
    zero points, which cost a float32 copy of them per call (an eighth of an int8 output,
    blocked 32 on the first axis)."""
    wide_vectors()
    n = xs.size
    lo = np.float32(qp.lo)
    hi = np.float32(qp.hi)
    mask = np.int32(qp.mask)
    wrap = np.float32(qp.mask + 1)
    if block == 0:  # scales checked before the call (see checks_values)
        if zv.itemsize == 4:  # float32 zero points (a constant of the compiled type)
            for j in range(n):
                ys[j] = _int_code_masked(xs[j] / sv[j], _int_zero_point(zv, j, wrap, hi), lo,
                                         hi, mask)
            return 0
        for j0 in range(0, n, _RUN_STEP):
            j1 = min(n, j0 + _RUN_STEP)
            xr, yr, sr, zr = xs[j0:j1], ys[j0:j1], sv[j0:j1], zv[j0:j1]
            for j in range(np.uint64(0), np.uint64(j1 - j0)):
                buf[j] = _int_zero_point(zr, j, wrap, hi)
            for j in range(np.uint64(0), np.uint64(j1 - j0)):
                yr[j] = _int_code_masked(xr[j] / sr[j], buf[j], lo, hi, mask)
        return 0
    bad = 0
    m = (first + n + block - 1) // block
    made = m <= buf.size  # every block's zero point made before the loop (blocks under 32 not)
    if made:
        for k in range(m):
            bad += _unusable(sv[k])
            buf[k] = _int_zero_point(zv, k, wrap, hi)
    whole = made and block <= 1024 and block % 32 == 0
    b = 0
    j0 = 0
    while j0 < n:
        j1 = min(n, (b + 1) * block - first)
        if whole and j1 - j0 == block:
            # whole blocks from here on: a loop whose block length LLVM knows is the same
            # every time, so the choice of vector step leaves the loop (blocked 128 on the
            # last axis: 0.93-1.11x onnxruntime against 0.81-0.95x block by block)
            count = (n - j0) // block
            for k in range(b, b + count):
                _int_whole_32s(xs, ys, j0, j0 + block, sv[k], buf[k], lo, hi, mask,
                               EXPLICIT_VECTORS)
                j0 += block
            b += count
            continue
        s0 = sv[b]
        if made:
            zf = buf[b]
        else:
            bad += _unusable(s0)
            zf = _int_zero_point(zv, b, wrap, hi)
        _int_run(xs, ys, j0, j1, s0, zf, lo, hi, mask, EXPLICIT_VECTORS)
        j0 = j1
        b += 1
    return bad


@njit(**_JIT)
def _seg_int_tensor(xs, ys, sv, zv, block, first, qp, enc, buf):
    """_seg_int for a per-tensor layout: one scale and one zero point for the whole run, so one
    _int_run and none of the block loops. A first call compiles in about a third of _seg_int's
    time (an 8-element int4 call on a znver3 host, 3 runs each: 0.5-0.7 s against 1.8-2.2 s).
    Returns 1 when the scale is not usable."""
    wide_vectors()
    hi = np.float32(qp.hi)
    zf = _int_zero_point(zv, 0, np.float32(qp.mask + 1), hi)
    _int_run(xs, ys, 0, xs.size, sv[0], zf, np.float32(qp.lo), hi, np.int32(qp.mask),
             EXPLICIT_VECTORS)
    return _unusable(sv[0])


@njit(**_INLINE)
def _float_consts(qp):
    return encode_consts(qp.ebits, qp.mbits, qp.bias, qp.max_code, qp.has_inf, qp.nan_style,
                         qp.saturate)


_FNUZ = False  # bound per kernel (_Q_FLOATS): the target has no -0 (NanStyle.NEG_ZERO)
_ADD = False  # bound per kernel (_Q_FLOATS): a zero point is added
_FLOAT_CODES = FLOAT_CODES[False, False]  # bound per kernel: the vector step of its case


def _seg_float(xs, ys, sv, zv, block, first, qp, enc, buf):
    """float32 x, float32 division, small float target, encoded arithmetically
    (:func:`~qcore.kernels.scalar.encode_with`). A given zero point is added even when 0
    (-0 + 0 is +0); without one nothing is added. A template: `_FNUZ` and `_ADD` are constants
    bound per case (see ``_Q_FLOATS``), so each compiled kernel holds only the loops of its case."""
    wide_vectors()
    n = xs.size
    c = _float_consts(qp)
    if block == 0:
        for j in range(n):
            q = xs[j] / sv[j]
            q = q + np.float32(zv[j]) if _ADD else q
            ys[j] = encode_with(f32_as_u32(q), c, _FNUZ)
        return 0
    b = 0
    j0 = 0
    while j0 < n:
        j1 = min(n, (b + 1) * block - first)
        s0 = sv[b]
        za = np.float32(zv[b])
        if EXPLICIT_VECTORS:  # 32 at a time as written-out vector code (see _int_run)
            while j0 + 32 <= j1:
                _FLOAT_CODES(xs, j0, ys, s0, za, c)
                j0 += 32
        for j in range(np.uint64(j0), np.uint64(j1)):
            q = xs[j] / s0
            q = q + za if _ADD else q
            ys[j] = encode_with(f32_as_u32(q), c, _FNUZ)
        j0 = j1
        b += 1
    return 0


def _float_case(fnuz: bool, add: bool) -> str:
    """The small-float quantize case: "float", then " fnuz" for a target without -0 and " zp"
    when a zero point is added (FAMILIES has "quantize " + case; kernel names use "_")."""
    return "float" + (" fnuz" if fnuz else "") + (" zp" if add else "")


@njit(**_JIT)
def quantize_value(q, z, qp):
    """Code of one quotient q = x / scale (already rounded to the precision type)."""
    if qp.tkind == TKind.INT:
        return int_code(np.rint(q), z, qp.lo, qp.hi, qp.mask + 1)
    if qp.has_zp == 1:
        q = round_to_precision(q + np.float32(z), qp.pkind)
    return encode_f32_bits(f32_as_u32(q), qp.ebits, qp.mbits, qp.bias, qp.max_code,
                           qp.has_inf == 1, qp.nan_style, qp.saturate == 1)


@njit(**_INLINE)
def _load_as(xs, v, j0, j1, xkind, pkind):
    """v[j] = x[j] as float32, rounded to `pkind` (PKind.F32: not rounded). Both kinds are
    constants at each call: one plain loop, decoding and rounding in one pass."""
    for j in range(np.uint64(j0), np.uint64(j1)):
        if xkind == XKind.F16:
            w = f16_to_f32(xs[j])
        elif xkind == XKind.BF16:
            w = bf16_to_f32(xs[j])
        else:
            w = np.float32(xs[j])
        v[j] = w if pkind == PKind.F32 else round_to_precision(w, pkind)


@njit(**_INLINE)
def _load_block(xs, v, j0, j1, xkind, pkind):
    """v[j] = x[j] as float32, rounded to the precision type. One loop per pair of kinds."""
    if xkind == XKind.F32:
        if pkind == PKind.F16:
            _load_as(xs, v, j0, j1, XKind.F32, PKind.F16)
        elif pkind == PKind.BF16:
            _load_as(xs, v, j0, j1, XKind.F32, PKind.BF16)
        else:
            _load_as(xs, v, j0, j1, XKind.F32, PKind.F32)
    elif xkind == XKind.F16:  # float16 is exact in float32, and in float16
        if pkind == PKind.BF16:
            _load_as(xs, v, j0, j1, XKind.F16, PKind.BF16)
        else:
            _load_as(xs, v, j0, j1, XKind.F16, PKind.F32)
    elif xkind == XKind.BF16:
        if pkind == PKind.F16:
            _load_as(xs, v, j0, j1, XKind.BF16, PKind.F16)
        else:
            _load_as(xs, v, j0, j1, XKind.BF16, PKind.F32)
    else:  # int32: rounded to the precision type directly (one rounding)
        for j in range(np.uint64(j0), np.uint64(j1)):
            v[j] = load_x(xs[j], xkind, pkind)


@njit(**_INLINE)
def _int_block(v, ys, j0, j1, s0, z0, lo, hi, wrap, pkind):
    """ys[j] = integer code of v[j] / s0 rounded to the precision `pkind` (a constant at each
    call, so each loop holds only its own rounding)."""
    for j in range(np.uint64(j0), np.uint64(j1)):
        ys[j] = _int_code(round_to_precision(v[j] / s0, pkind), z0, lo, hi, wrap)


@njit(**_INLINE)
def _half_to_f32(h, xkind):
    """A float16 or bfloat16 element (its uint16 bits) as float32, exactly (float16 by one
    vcvtph2ps where the target has F16C; it quiets a signalling NaN, which no integer code
    can tell apart: every NaN saturates alike)."""
    if xkind == XKind.BF16:
        return bf16_to_f32(h)
    if HAS_F16C:  # (the cast: kernels that compile this for other x types never run it)
        return f16_bits_as_f32(np.uint16(h))
    return f16_to_f32(h)


@njit(**_INLINE)
def _int_block_half(xs, ys, j0, j1, s0, z0, lo, hi, mask, xkind, pkind):
    """_int_block fused with the decode of 16-bit x (both kinds constants at each call): one
    pass over x, no chunk buffer. x is exact in float32 and in its own type, so it is rounded
    to the precision only when that is the other 16-bit type."""
    for j in range(np.uint64(j0), np.uint64(j1)):
        w = _half_to_f32(xs[j], xkind)
        if pkind != PKind.F32 and pkind != xkind:
            w = round_to_precision(w, pkind)
        ys[j] = _int_code_masked(round_to_precision(w / s0, pkind), z0, lo, hi, mask)


@njit(**_INLINE)
def _int_blocks_half(xs, ys, sv, zv, block, first, n, lo, hi, mask, xkind, pkind):
    """Every block of a run of 16-bit x to an integer target, one fused loop per block."""
    b = 0
    j0 = 0
    while j0 < n:
        j1 = min(n, (b + 1) * block - first)
        _int_block_half(xs, ys, j0, j1, sv[b], np.float32(zv[b]), lo, hi, mask, xkind, pkind)
        j0 = j1
        b += 1


@njit(**_INLINE)
def _int_blocks_half_as(xs, ys, sv, zv, block, first, n, lo, hi, qp, xkind):
    """_int_blocks_half for a constant `xkind`, with the precision made a constant too: one
    loop per precision."""
    mask = np.int32(qp.mask)
    if qp.pkind == PKind.F16:
        _int_blocks_half(xs, ys, sv, zv, block, first, n, lo, hi, mask, xkind, PKind.F16)
    elif qp.pkind == PKind.BF16:
        _int_blocks_half(xs, ys, sv, zv, block, first, n, lo, hi, mask, xkind, PKind.BF16)
    else:
        _int_blocks_half(xs, ys, sv, zv, block, first, n, lo, hi, mask, xkind, PKind.F32)


@njit(**_INLINE)
def _float_block(v, ys, j0, j1, s0, za, add, c, fnuz, pkind):
    """ys[j] = small float code of v[j] / s0 rounded to the precision (then + za, rounded
    again, when `add`)."""
    if add:
        for j in range(np.uint64(j0), np.uint64(j1)):
            q = round_to_precision(v[j] / s0, pkind)
            q = round_to_precision(q + za, pkind)
            ys[j] = encode_with(f32_as_u32(q), c, fnuz)
    else:
        for j in range(np.uint64(j0), np.uint64(j1)):
            ys[j] = encode_with(f32_as_u32(round_to_precision(v[j] / s0, pkind)), c, fnuz)


@njit(**_JIT)
def _seg_generic(xs, ys, sv, zv, block, first, qp, enc, buf):
    """Any x kind, precision and target: x decoded and rounded to the precision into the buffer
    `buf` (one loop per kind), then per block one fused loop (divide, round to the precision,
    encode), chosen by precision and target family outside the loop."""
    wide_vectors()
    n = xs.size
    xkind = qp.xkind
    pkind = qp.pkind
    if block == 0:
        for j in range(n):
            q = round_to_precision(load_x(xs[j], xkind, pkind) / sv[j], pkind)
            ys[j] = quantize_value(q, zv[j], qp)
        return 0
    is_int = qp.tkind == TKind.INT
    lo = np.float32(qp.lo)
    hi = np.float32(qp.hi)
    if is_int and xkind == XKind.F16:
        _int_blocks_half_as(xs, ys, sv, zv, block, first, n, lo, hi, qp, XKind.F16)
        return 0
    if is_int and xkind == XKind.BF16:
        _int_blocks_half_as(xs, ys, sv, zv, block, first, n, lo, hi, qp, XKind.BF16)
        return 0
    v = buf
    _load_block(xs, v, 0, n, xkind, pkind)
    wrap = np.float32(qp.mask + 1)
    add = qp.has_zp == 1
    c = _float_consts(qp)
    fnuz = qp.nan_style == NanStyle.NEG_ZERO
    b = 0
    j0 = 0
    while j0 < n:
        j1 = min(n, (b + 1) * block - first)
        s0 = sv[b]
        z0 = np.float32(zv[b])
        if is_int:
            if pkind == PKind.F16:
                _int_block(v, ys, j0, j1, s0, z0, lo, hi, wrap, PKind.F16)
            elif pkind == PKind.BF16:
                _int_block(v, ys, j0, j1, s0, z0, lo, hi, wrap, PKind.BF16)
            else:
                _int_block(v, ys, j0, j1, s0, z0, lo, hi, wrap, PKind.F32)
        elif pkind == PKind.F16:
            _float_block(v, ys, j0, j1, s0, z0, add, c, fnuz, PKind.F16)
        elif pkind == PKind.BF16:
            _float_block(v, ys, j0, j1, s0, z0, add, c, fnuz, PKind.BF16)
        else:
            _float_block(v, ys, j0, j1, s0, z0, add, c, fnuz, PKind.F32)
        j0 = j1
        b += 1
    return 0


# ---------------------------------------------------------------------------------------------
# Dequantize segments: (x - zero_point) * scale in float32, rounded once to the output type
# ---------------------------------------------------------------------------------------------


@njit(**_JIT)
def _dseg_numeric(xs, ys, sv, zv, block, first, dp, tab, buf):
    """8/16-bit integers to float32: the difference is exact in float32."""
    wide_vectors()
    n = xs.size
    if block == 0:
        for j in range(n):
            ys[j] = (np.float32(xs[j]) - np.float32(zv[j])) * sv[j]
        return 0
    b = 0
    j0 = 0
    while j0 < n:
        j1 = min(n, (b + 1) * block - first)
        s0 = sv[b]
        z0 = np.float32(zv[b])
        for j in range(np.uint64(j0), np.uint64(j1)):
            ys[j] = (np.float32(xs[j]) - z0) * s0
        j0 = j1
        b += 1
    return 0


@njit(**_JIT)
def _dseg_table(xs, ys, sv, zv, block, first, dp, tab, buf):
    """Sub-byte integers and small floats (their uint8 codes) to float32 through the decode
    table: the arithmetic of dequantize_value for DXKind.TABLE, in a family of its own so that
    a first call compiles none of the 16-bit output or int32 paths."""
    wide_vectors()
    n = xs.size
    if block == 0:
        for j in range(n):
            ys[j] = (np.float32(tab[np.int64(xs[j])]) - np.float32(zv[j])) * sv[j]
        return 0
    b = 0
    j0 = 0
    while j0 < n:
        j1 = min(n, (b + 1) * block - first)
        s0 = sv[b]
        z0 = np.float32(zv[b])
        for j in range(np.uint64(j0), np.uint64(j1)):
            ys[j] = (np.float32(tab[np.int64(xs[j])]) - z0) * s0
        j0 = j1
        b += 1
    return 0


@njit(**_INLINE)
def dequantize_value(xv, z, s, xkind, okind, tab):
    """(x - zero_point) * scale in float32, as the output type's bits (float32 or uint16)."""
    if xkind == DXKind.NUMERIC:
        d = np.float32(xv) - np.float32(z)
    elif xkind == DXKind.TABLE:
        d = np.float32(tab[np.int64(xv)]) - np.float32(z)
    else:
        d = np.float32(np.int64(xv) - np.int64(z))
    v = d * s
    if okind == PKind.F32:
        return v
    return np.float32(half_bits(v, okind))


@njit(**_JIT)
def _dseg_generic(xs, ys, sv, zv, block, first, dp, tab, buf):
    """Decode tables (sub-byte integers, small floats), int32 and 16-bit outputs."""
    wide_vectors()
    xkind = dp.xkind
    okind = dp.okind
    n = xs.size
    if block == 0:
        for j in range(n):
            ys[j] = dequantize_value(xs[j], zv[j], sv[j], xkind, okind, tab)
        return 0
    if block >= first + n and xs.itemsize == 1 and n >= 1024:
        # one scale and one zero point: every byte has one result, look it up
        out = np.empty(256, ys.dtype)
        every = np.arange(256).astype(np.uint8).view(xs.dtype)  # each byte as x's type
        for code in range(256):
            out[code] = dequantize_value(every[code], zv[0], sv[0], xkind, okind, tab)
        codes = xs.view(np.uint8)
        for j in range(n):
            ys[j] = out[codes[j]]
        return 0
    b = 0
    j0 = 0
    while j0 < n:
        j1 = min(n, (b + 1) * block - first)
        s0 = sv[b]
        z0 = zv[b]
        for j in range(np.uint64(j0), np.uint64(j1)):
            ys[j] = dequantize_value(xs[j], z0, s0, xkind, okind, tab)
        j0 = j1
        b += 1
    return 0


# ---------------------------------------------------------------------------------------------
# Drivers: chunks in parallel (or serially), each chunk cut into runs by the layout's walk.
# `_SEGMENT` and `_BUFFER` are bound per family (see _family below).
# ---------------------------------------------------------------------------------------------

_SEGMENT = _seg_generic
_BUFFER = CHUNK
_LINE = 8  # int64s per cache line: each share's counter on its own line


@njit(**_INLINE)
def _claim(counters, share, nchunks, workers):
    """The next chunk of `share` (the share-th of `workers` contiguous runs of chunks), or -1
    once every chunk of it is taken. Each worker starts on its own share: one sequential
    stream per thread, which the hardware prefetchers follow better than chunks dealt out
    alternately (int8 QuantizeLinear on a 2-core Xeon: 1.77 against 1.84 ms)."""
    lo = share * nchunks // workers
    hi = (share + 1) * nchunks // workers
    c = lo + fetch_add(counters[share * _LINE:share * _LINE + 1], 1)
    return c if c < hi else -1


@njit(**_INLINE)
def _next_chunk(counters, w, k, nchunks, workers):
    """(chunk, k) for worker w: from the share k steps after its own (k = 0 first), the next
    unclaimed chunk, moving on to the following shares as each runs out; chunk -1 once all
    have (see _claim)."""
    while k < workers:
        c = _claim(counters, (w + k) % workers, nchunks, workers)
        if c >= 0:
            return c, k
        k += 1
    return -1, k


def _driver(x, s, z, y, lp, params, table, tally):
    """Chunks shared out among the workers, tally.shape[0] of them (see _claim): each walks its
    own contiguous share, then helps with the others' (a thread whose core is busy does fewer
    chunks instead of holding everyone up). Worker w leaves the number of chunks it did in
    tally[w, 0], and in tally[w, 1] how many unusable scales its segments found (each segment
    returns that count; only the integer quantize segment checks, see checks_values: it reads
    the scales anyway, while a check before the call was a pass over them of its own, 4% of a
    blocked-32 call)."""
    nchunks = (x.size + CHUNK - 1) // CHUNK
    workers = tally.shape[0]
    counters = np.zeros(workers * _LINE, np.int64)
    for w in prange(workers):
        wide_vectors()
        buf = np.empty(_BUFFER, np.float32)
        done = 0
        bad = 0
        c, k = _next_chunk(counters, w, 0, nchunks, workers)
        while c >= 0:
            done += 1
            i0 = c * CHUNK
            n = min(CHUNK, x.size - i0)
            if lp.uniform == 1:
                bad += _SEGMENT(x[i0:i0 + n], y[i0:i0 + n], s, z, n, np.int64(0), params,
                                table, buf)
            else:
                p, d, q = locate(i0, lp)
                j = 0
                while j < n:
                    run, k2, m, block, first, p, d, q = next_segment(p, d, q, n - j, lp)
                    bad += _SEGMENT(x[i0 + j:i0 + j + run], y[i0 + j:i0 + j + run],
                                    s[k2:k2 + m], z[k2:k2 + m], block, first, params, table,
                                    buf)
                    j += run
            c, k = _next_chunk(counters, w, k, nchunks, workers)
        tally[w, 0] = done
        tally[w, 1] = bad
    total = 0
    for w in range(workers):
        total += tally[w, 1]
    return total


@njit(**_INLINE)
def _order_key(b):
    """float32 bits (as int32) -> an int32 in the same order as the floats (NaN aside), and
    back (the map is its own inverse)."""
    return np.int32(b ^ (np.int32(b >> np.int32(31)) & np.int32(0x7FFFFFFF)))


_KEY_POS_INF = np.int32(0x7F800000)  # order key of +Inf (its bits); +NaN keys are above it
_KEY_NEG_INF = np.int32(-0x7F800001)  # order key of -Inf (bits 0xFF800000); -NaN keys are below


@njit(**_JIT)
def _minmax_fast(xs):
    """(min, max, any NaN/Inf) of xs; min and max are only meaningful when there is none.

    Two int32 min/max reductions of order keys, which LLVM vectorises 8 wide on AVX2 (float
    min/max reductions only under fast-math, which would also drop the NaN checks). NaN and Inf
    need no third reduction: their keys lie at or beyond the keys of +-Inf. Every value is kept
    int32 (numba widens integer arithmetic to int64, which halves the vector width)."""
    wide_vectors()
    lo = np.int32(0x7FFFFFFF)
    hi = np.int32(-0x80000000)
    for j in range(np.uint64(0), np.uint64(xs.size)):
        k = _order_key(np.int32(f32_as_u32(xs[j])))
        lo = k if k < lo else lo
        hi = k if k > hi else hi
    bad = (hi >= _KEY_POS_INF) | (lo <= _KEY_NEG_INF)
    return u32_as_f32(_order_key(lo)), u32_as_f32(_order_key(hi)), bad


@njit(**_JIT)
def _minmax_exact(xs):
    """min and max of xs with NaNs left out and +-Inf included, and the count of NaN/Inf."""
    wide_vectors()
    lo = np.float32(np.inf)
    hi = np.float32(-np.inf)
    bad = 0
    for j in range(xs.size):
        v = xs[j]
        bad += (v - v) != 0
        lo = v if v < lo else lo
        hi = v if v > hi else hi
    return lo, hi, bad


def _minmax_driver(x, out, tally):
    """Per-chunk min, max and NaN/Inf count of float32 x: out[c] = (min, max, bad); chunks
    shared out as in _driver."""
    nchunks = (x.size + CHUNK - 1) // CHUNK
    workers = tally.shape[0]
    counters = np.zeros(workers * _LINE, np.int64)
    for w in prange(workers):
        wide_vectors()
        done = 0
        c, k = _next_chunk(counters, w, 0, nchunks, workers)
        while c >= 0:
            done += 1
            i0 = c * CHUNK
            xs = x[i0:min(x.size, i0 + CHUNK)]
            lo, hi, flag = _minmax_fast(xs)
            bad = 0
            if flag:
                lo, hi, bad = _minmax_exact(xs)
            out[c, 0] = lo
            out[c, 1] = hi
            out[c, 2] = bad
            c, k = _next_chunk(counters, w, k, nchunks, workers)
        tally[w, 0] = done


class Family(NamedTuple):
    """A kernel family: its parallel and serial drivers, the segment function they call on each
    run of a chunk, how many float32s of scratch the segment takes, and the longest run it
    converts in one call (0: any length; the generic family's scratch holds a float32 per
    element of its run, so one chunk) (minmax has no segment)."""

    parallel: Any
    serial: Any
    segment: Any = None
    buffer: int = 0
    max_run: int = 0


def _family(segment, name: str, buffer: int, max_run: int = 0) -> Family:
    """The drivers bound to one segment function: each its own small kernel, compiled (or
    cache-loaded) only when first called."""
    parallel, serial = (bound(_driver, name + suffix, flags, _SEGMENT=segment, _BUFFER=buffer)
                        for suffix, flags in (("_parallel", {"parallel": True, **_JIT}),
                                              ("_serial", _JIT)))
    return Family(parallel, serial, segment, buffer, max_run)


_Q_INT = _family(_seg_int_tensor, "quantize_int", 0)
_Q_INT_BLOCKS = _family(_seg_int, "quantize_int_blocks", _SCRATCH)


def _float_family(fnuz: bool, add: bool) -> Family:
    """The drivers of one small-float case, over _seg_float compiled with its flags."""
    name = _float_case(fnuz, add).replace(" ", "_")
    segment = bound(_seg_float, "_seg_" + name, _JIT, _FNUZ=fnuz, _ADD=add,
                    _FLOAT_CODES=FLOAT_CODES[fnuz, add])
    return _family(segment, "quantize_" + name, 0)


#: small-float case (see _float_case) -> family
_Q_FLOATS = {_float_case(fnuz, add): _float_family(fnuz, add)
             for fnuz in (False, True) for add in (False, True)}
_Q_GENERIC = _family(_seg_generic, "quantize_generic", CHUNK, CHUNK)
_DQ_NUMERIC = _family(_dseg_numeric, "dequantize_numeric", 0)
_DQ_TABLE = _family(_dseg_table, "dequantize_table", 0)
_DQ_GENERIC = _family(_dseg_generic, "dequantize_generic", 0)
minmax_parallel = njit(parallel=True, **_JIT)(renamed(_minmax_driver, "_parallel"))
minmax_serial = njit(**_JIT)(renamed(_minmax_driver, "_serial"))

#: Every kernel as (parallel, serial), by family (for warm-up and tests).
FAMILIES = {"quantize int": _Q_INT, "quantize int blocks": _Q_INT_BLOCKS,
            **{"quantize " + case: family for case, family in _Q_FLOATS.items()},
            "quantize generic": _Q_GENERIC,
            "dequantize numeric": _DQ_NUMERIC, "dequantize table": _DQ_TABLE,
            "dequantize generic": _DQ_GENERIC,
            "minmax": Family(minmax_parallel, minmax_serial)}


# ---------------------------------------------------------------------------------------------
# Host API
# ---------------------------------------------------------------------------------------------

#: The quantize kernels' table argument (the drivers are shared with dequantize, whose decode
#: tables it carries): small floats are encoded arithmetically, so quantize has no table.
_NO_TABLE = np.zeros(1, np.uint8)
_NO_TABLE.flags.writeable = False


_POOL: list[np.ndarray] = []  # reusable output buffers (uint8), least recently used first
_POOL_LOCK = threading.Lock()


def new_output(size: int, dtype) -> np.ndarray:
    """An uninitialised 1-D array for a kernel to fill (every element gets written).

    Large outputs reuse a pooled buffer once nothing references an array handed out from it
    any more (numpy views keep their base alive, so the base's reference count tells): a fresh
    allocation of that size would cost a page fault and the OS zeroing each page on first
    touch, as much memory traffic as a dequantize's own writes. onnxruntime's arena does the
    same. ``config.OUTPUT_POOL_BYTES`` bounds what the pool keeps; 0 turns it off."""
    dtype = np.dtype(dtype)
    nbytes = size * dtype.itemsize
    budget = config.OUTPUT_POOL_BYTES
    if nbytes < config.OUTPUT_POOL_MIN_BYTES or nbytes > budget:
        return np.empty(size, dtype)
    with _POOL_LOCK:
        for i in range(len(_POOL)):
            # 2 references: the pool's and getrefcount's argument; a handed-out view adds one
            if _POOL[i].nbytes == nbytes and sys.getrefcount(_POOL[i]) == 2:
                buf = _POOL.pop(i)
                _POOL.append(buf)
                return buf.view(dtype)
        buf = np.empty(nbytes, np.uint8)
        _POOL.append(buf)
        total = sum(b.nbytes for b in _POOL)
        while total > budget:  # forget the least recently used (an array in use stays valid)
            total -= _POOL.pop(0).nbytes
        return buf.view(dtype)


def release_outputs() -> None:
    """Forget the pooled output buffers (their memory goes back once no array uses it)."""
    with _POOL_LOCK:
        _POOL.clear()


def _readonly(a: np.ndarray) -> np.ndarray:
    """a as a read-only view (no copy): numba compiles read-only and writable arrays apart."""
    if a.flags.writeable:
        a = a.view()
        a.flags.writeable = False
    return a


#: Families whose speed is the memory's rather than the core's, on a per-tensor layout. When other
#: processes keep cores busy these calls run on the free cores alone: one worker reaches about
#: 0.6x of two here, while a second worker on a taken core makes the join wait a time slice
#: (0.5x). Everything else keeps every thread: small-float encoding, table decoding, 16-bit
#: conversions and the per-block walk scale with cores, and the taken core's share is worth
#: more than the wait (blocked 32: 0.64-0.77x with both threads, 0.56-0.66x with one; float8
#: and int4 dequantize: 0.7-0.8x against 0.5-0.7x). Measured with ``python -m qcore.bench --busy``.
BANDWIDTH_BOUND = frozenset({"quantize int", "dequantize numeric", "minmax"})


#: Whether a per-tensor call below the parallel threshold runs its family's segment alone, in
#: one run (up to the family's max_run): chunks add nothing to one serial stream, and a cold
#: start then compiles no driver (the Quantize Lab's default view about 3.5 s less on a znver3
#: host). False: the drivers always (the tests compare the two).
DIRECT = True


def _launch(family: str, args: tuple, n: int, bandwidth_bound: bool,
            uniform: bool = False) -> tuple:
    """Run the kernel of `family` for n elements: serial below the parallel threshold, else
    parallel on numba's threads (when `bandwidth_bound`: on the cores other processes leave
    free; one means the serial kernel); a per-tensor call (`uniform`) below the threshold by
    the segment alone, in one run (see DIRECT): the serial driver's work without the chunks.
    Returns the kernel's result (the quantize and dequantize drivers: how
    many unusable scales they read) and each worker's (chunks done, unusable scales read) (see
    _driver; a direct run counts as one chunk)."""
    parallel, serial, segment, buffer, max_run = FAMILIES[family]
    if (uniform and DIRECT and segment is not None and n < PARALLEL_THRESHOLD
            and (not max_run or n <= max_run)):
        x, s, z, y, _, params, table = args
        bad = segment(x, y, s, z, n, 0, params, table, np.empty(buffer, np.float32)) if n else 0
        return bad, np.array([[1 if n else 0, bad]], np.int64)
    workers = threads = 1
    if n >= PARALLEL_THRESHOLD:
        threads = numba_threads()
        workers = parallel_workers(threads) if bandwidth_bound else threads
    tally = np.zeros((workers, 2), np.int64)
    if workers == 1:
        return serial(*args, tally), tally
    with parallel_call(workers, threads):
        return parallel(*args, tally), tally


def _bandwidth_bound(family: str, lp) -> bool:
    return family in BANDWIDTH_BOUND and lp.uniform == 1


def quantize_family(qp: QuantizeParams, lp) -> str:
    """Which kernel family converts with these parameters on layout `lp` (a key of FAMILIES):
    "quantize int" (per-tensor) or "quantize int blocks" (a scale per block, row or element),
    "quantize float" (with " fnuz" for a target without -0, " zp" when a zero point is added)
    or "quantize generic"."""
    if qp.xkind == XKind.F32 and qp.pkind == PKind.F32:
        if qp.tkind == TKind.INT:
            return "quantize int" if lp.uniform == 1 else "quantize int blocks"
        return "quantize " + _float_case(qp.nan_style == NanStyle.NEG_ZERO, qp.has_zp == 1)
    return "quantize generic"


def dequantize_family(dp, okind_is_f32: bool) -> str:
    """Which kernel family dequantizes: "numeric" (8/16-bit integers to float32), "table"
    (sub-byte and small-float codes to float32) or "generic" (int32, 16-bit outputs)."""
    if okind_is_f32 and dp.xkind in (DXKind.NUMERIC, DXKind.TABLE):
        return "numeric" if dp.xkind == DXKind.NUMERIC else "table"
    return "generic"


def checks_values(qp: QuantizeParams, lp) -> bool:
    """Whether the quantize kernel for `qp` on layout `lp` checks its scales itself
    (:func:`quantize` returns how many were not positive and finite): the integer family on
    layouts with a scale per block or per row, where a check before the call was one more pass
    over blocked scales. Layouts with a scale per element of a run (per-axis on the last axis,
    blocked on an earlier axis), whose runs read each scale many times, and other families take
    scales checked before the call."""
    return reads_codes(qp, lp) and not per_element_scales(lp)


def reads_codes(qp: QuantizeParams, lp) -> bool:
    """Whether the quantize kernel for `qp` on layout `lp` reads its zero points as the target's
    codes, viewed as int8 or int16 (see :func:`zero_point_view`), rather than as float32: the
    integer families, except on layouts with a scale per element of a run whose zero points as
    float32 take at most 1/16 of the output (per-axis on the last axis: one row of them;
    blocked on an earlier axis with blocks of 64 or more for an 8-bit target). Such runs decode
    their zero points in steps of _RUN_STEP before converting: 3.2-4.0 Gelem/s against 4.4-4.7
    reading float32 ones (int8, blocked 32 on the first axis, znver3, paired runs), but without
    a float32 copy of them per call, which was 1/8 of the output there."""
    if not quantize_family(qp, lp).startswith("quantize int"):
        return False
    if not per_element_scales(lp):
        return True
    output_bytes = lp.pre * lp.dim * lp.post * (1 if qp.mask < 256 else 2)
    return 4 * lp.scale_pre * lp.scale_blocks * lp.scale_post * 16 > output_bytes


def zero_point_view(codes: np.ndarray) -> np.ndarray:
    """Integer zero points (a target's codes, any shape) flat, as the int8 or int16 the integer
    family reads (no copy where they are contiguous)."""
    return codes.reshape(-1).view(np.int8 if codes.dtype.itemsize == 1 else np.int16)


def quantize(x, s, z, y, lp, qp) -> int:
    """Run the quantize kernel: x flat input, s float32 scales, z zero points (float32, or the
    target's codes where :func:`reads_codes`), y codes. Returns how many scales the kernel
    found not positive and finite (always 0 where it does not check them)."""
    family = quantize_family(qp, lp)
    bad, _ = _launch(family, (_readonly(x), _readonly(s), _readonly(z), y, lp, qp, _NO_TABLE),
                     x.size, _bandwidth_bound(family, lp), lp.uniform == 1)
    return bad


def dequantize(x, s, z, y, lp, dp, tab) -> None:
    """Run the dequantize kernel: x flat codes, y float32 or 16-bit float bits."""
    family = "dequantize " + dequantize_family(dp, dp.okind == PKind.F32)
    _launch(family, (_readonly(x), _readonly(s), _readonly(z), y, lp, dp, _readonly(tab)),
            x.size, _bandwidth_bound(family, lp), lp.uniform == 1)


def minmax(x, xkind) -> tuple[float, float, int]:
    """(min, max, count of NaN/Inf) of a flat float32 array (DynamicQuantizeLinear-11 takes only
    float32; `xkind` keeps the signature of the CUDA backend, which also reads 16-bit floats)."""
    nchunks = (x.size + CHUNK - 1) // CHUNK
    out = np.empty((nchunks, 3), np.float32)
    _launch("minmax", (_readonly(x), out), x.size, True)
    return float(out[:, 0].min()), float(out[:, 1].max()), int(out[:, 2].sum())
