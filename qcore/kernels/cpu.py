"""numba CPU kernels: one streaming pass over x in chunks, parallel over chunks.

Each chunk runs in small phases over cache-resident buffers: gather the chunk's scales and zero
points through the layout's index map, load x as float32 (decoding float16/bfloat16/int32),
divide (or multiply), round to the precision type, then round/saturate/encode into the output.
Every rule lives in :mod:`qcore.kernels.scalar`; this module only moves data.

Parameters are the NamedTuples of :mod:`qcore.kernels.params` (int64 fields), so one compiled
kernel per (input dtype, output dtype) pair serves every format and granularity.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..config import CHUNK, PARALLEL_THRESHOLD
from . import renamed
from .bits import f32_as_u32, u32_as_f32
from .params import DXKind, PKind, QuantizeParams, TKind, XKind
from .scalar import (
    encode_f32_bits,
    f16_to_f32,
    half_bits,
    load_x,
    round_to_precision,
    saturate_int,
)
from .walk import locate, next_segment

__all__ = ["CHUNK", "PARALLEL_THRESHOLD", "quantize", "dequantize", "minmax", "encode_table"]


@njit(cache=True, nogil=True, error_model="numpy")
def _build_encode_table(ebits, mbits, bias, max_code, has_inf, nan_style, saturate, out):
    """out[2*h + sticky] = code of the float32 whose top 16 bits are h and whose low 16 bits are
    zero (sticky=0) or not (sticky=1).

    For formats of <= 8 bits the round bit is bit 19 or higher, so the low 16 bits only decide
    ties: this table *is* encode_f32_bits, evaluated once per class of inputs.
    """
    for h in range(65536):
        b = np.uint32(h) << np.uint32(16)
        out[2 * h] = encode_f32_bits(b, ebits, mbits, bias, max_code, has_inf, nan_style,
                                     saturate)
        out[2 * h + 1] = encode_f32_bits(b | np.uint32(1), ebits, mbits, bias, max_code,
                                         has_inf, nan_style, saturate)


@njit(**{"inline": "always", "cache": True, "nogil": True, "error_model": "numpy"})
def _table_encode(q, enc):
    b = f32_as_u32(q)
    return enc[((b >> np.uint32(15)) & np.uint32(0x1FFFE)) | np.uint32((b & np.uint32(0xFFFF)) != 0)]


_JIT = {"cache": True, "nogil": True, "error_model": "numpy"}


_INLINE = {"inline": "always", **_JIT}


@njit(**_JIT)
def quantize_value(q, z, qp):
    """Code of one quotient q = x / scale (already rounded to the precision type)."""
    if qp.tkind == TKind.INT:
        return saturate_int(np.rint(q), np.int64(z), qp.lo, qp.hi) & qp.mask
    if qp.has_zp == 1:
        q = q + np.float32(z)
        q = round_to_precision(q, qp.pkind)
    return encode_f32_bits(f32_as_u32(q), qp.ebits, qp.mbits, qp.bias,
                           qp.max_code, qp.has_inf == 1, qp.nan_style,
                           qp.saturate == 1)


@njit(**_INLINE)
def _int_code(q, z, lo, hi, mask):
    return saturate_int(np.rint(q), z, lo, hi) & mask


@njit(**_JIT)
def _quantize_segment(xs, ys, sv, zv, block, first, qp, enc):
    """Quantize xs into ys. block == 0: element j has scale sv[j] and zero point zv[j];
    block > 0: element j has sv[(first + j) // block] (one scale for the whole segment when
    block >= first + n).

    The common configurations get their own loops, constant-scale loops over each block, so that
    LLVM vectorises them; the rest share a generic loop. Every loop computes the same thing
    through the same inlined helpers.
    """
    n = xs.size
    xkind = qp.xkind
    pkind = qp.pkind
    tkind = qp.tkind
    lo = qp.lo
    hi = qp.hi
    mask = qp.mask
    has_zp = qp.has_zp == 1
    neg_zero = np.float32(-0.0)  # adding -0.0 is the identity, -0 included
    fast_int = tkind == TKind.INT and pkind == PKind.F32 and xkind == XKind.F32
    fast_float = tkind == TKind.FLOAT and pkind == PKind.F32 and xkind == XKind.F32 and enc.size > 1
    if block == 0:
        if fast_int:
            for j in range(n):
                ys[j] = _int_code(np.float32(xs[j]) / sv[j], np.int64(zv[j]), lo, hi, mask)
        elif fast_float:
            for j in range(n):
                za = np.float32(zv[j]) if has_zp else neg_zero
                ys[j] = _table_encode(np.float32(xs[j]) / sv[j] + za, enc)
        else:
            for j in range(n):
                q = round_to_precision(load_x(xs[j], xkind, pkind) / sv[j], pkind)
                ys[j] = quantize_value(q, zv[j], qp)
        return
    # unsigned loop indices: numba then emits no negative-index wraparound, and LLVM vectorises
    b = 0
    j0 = 0
    while j0 < n:
        j1 = min(n, (b + 1) * block - first)
        s0 = sv[b]
        z0 = np.int64(zv[b])
        if fast_int:
            for j in range(np.uint64(j0), np.uint64(j1)):
                ys[j] = _int_code(np.float32(xs[j]) / s0, z0, lo, hi, mask)
        elif fast_float:
            za = np.float32(zv[b]) if has_zp else neg_zero
            for j in range(np.uint64(j0), np.uint64(j1)):
                ys[j] = _table_encode(np.float32(xs[j]) / s0 + za, enc)
        elif tkind == TKind.INT and pkind == PKind.F16 and xkind == XKind.F16:
            for j in range(np.uint64(j0), np.uint64(j1)):
                q = round_to_precision(f16_to_f32(xs[j]) / s0, PKind.F16)
                ys[j] = _int_code(q, z0, lo, hi, mask)
        elif tkind == TKind.INT and pkind == PKind.BF16 and xkind == XKind.BF16:
            for j in range(np.uint64(j0), np.uint64(j1)):
                v = u32_as_f32(np.uint32(xs[j]) << np.uint32(16))
                ys[j] = _int_code(round_to_precision(v / s0, PKind.BF16), z0, lo, hi, mask)
        elif tkind == TKind.FLOAT and pkind == xkind and (xkind == XKind.F16 or xkind == XKind.BF16) and (
                enc.size > 1):
            za = round_to_precision(np.float32(zv[b]), pkind) if has_zp else neg_zero
            if xkind == XKind.F16:
                for j in range(np.uint64(j0), np.uint64(j1)):
                    q = round_to_precision(f16_to_f32(xs[j]) / s0, PKind.F16)
                    ys[j] = _table_encode(round_to_precision(q + za, PKind.F16), enc)
            else:
                for j in range(np.uint64(j0), np.uint64(j1)):
                    v = u32_as_f32(np.uint32(xs[j]) << np.uint32(16))
                    q = round_to_precision(v / s0, PKind.BF16)
                    ys[j] = _table_encode(round_to_precision(q + za, PKind.BF16), enc)
        else:
            for j in range(np.uint64(j0), np.uint64(j1)):
                q = round_to_precision(load_x(xs[j], xkind, pkind) / s0, pkind)
                ys[j] = quantize_value(q, zv[b], qp)
        j0 = j1
        b += 1


@njit(**_JIT)
def _quantize_chunk(c, x, s, z, y, lp, qp, enc):
    i0 = c * CHUNK
    n = min(CHUNK, x.size - i0)
    if lp.uniform == 1:
        _quantize_segment(x[i0:i0 + n], y[i0:i0 + n], s, z, n, 0, qp, enc)
        return
    p, d, q = locate(i0, lp)
    j = 0
    while j < n:
        run, k, m, block, first, p, d, q = next_segment(p, d, q, n - j, lp)
        _quantize_segment(x[i0 + j:i0 + j + run], y[i0 + j:i0 + j + run], s[k:k + m],
                          z[k:k + m], block, first, qp, enc)
        j += run


def _quantize_driver(x, s, z, y, lp, qp, enc):
    nchunks = (x.size + CHUNK - 1) // CHUNK
    for c in prange(nchunks):
        _quantize_chunk(c, x, s, z, y, lp, qp, enc)


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
def _dequantize_segment(xs, ys, sv, zv, block, first, dp, tab):
    """Dequantize xs into ys; scales and zero points as in :func:`_quantize_segment`."""
    xkind = dp.xkind
    okind = dp.okind
    n = xs.size
    if block == 0:
        for j in range(n):
            ys[j] = dequantize_value(xs[j], zv[j], sv[j], xkind, okind, tab)
        return
    if block >= first + n and xs.itemsize == 1 and n >= 1024:
        # one scale and one zero point: every byte has one result, look it up
        out = np.empty(256, ys.dtype)
        every = np.arange(256).astype(np.uint8).view(xs.dtype)  # each byte as x's type
        for code in range(256):
            out[code] = dequantize_value(every[code], zv[0], sv[0], xkind, okind, tab)
        codes = xs.view(np.uint8)
        for j in range(n):
            ys[j] = out[codes[j]]
        return
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


@njit(**_JIT)
def _dequantize_chunk(c, x, s, z, y, lp, dp, tab):
    i0 = c * CHUNK
    n = min(CHUNK, x.size - i0)
    if lp.uniform == 1:
        _dequantize_segment(x[i0:i0 + n], y[i0:i0 + n], s, z, n, 0, dp, tab)
        return
    p, d, q = locate(i0, lp)
    j = 0
    while j < n:
        run, k, m, block, first, p, d, q = next_segment(p, d, q, n - j, lp)
        _dequantize_segment(x[i0 + j:i0 + j + run], y[i0 + j:i0 + j + run], s[k:k + m],
                          z[k:k + m], block, first, dp, tab)
        j += run


def _dequantize_driver(x, s, z, y, lp, dp, tab):
    nchunks = (x.size + CHUNK - 1) // CHUNK
    for c in prange(nchunks):
        _dequantize_chunk(c, x, s, z, y, lp, dp, tab)


def _minmax_driver(x, xkind, out):
    """Per-chunk min, max and NaN/Inf count of float32 x: out[c] = (min, max, bad)."""
    nchunks = (x.size + CHUNK - 1) // CHUNK
    for c in prange(nchunks):
        i0 = c * CHUNK
        n = min(CHUNK, x.size - i0)
        xs = x[i0:i0 + n]
        lo = np.float32(np.inf)
        hi = np.float32(-np.inf)
        bad = 0
        for j in range(n):
            v = np.float32(xs[j])
            bad += (v - v) != 0  # NaN or +-Inf
            lo = v if v < lo else lo
            hi = v if v > hi else hi
        out[c, 0] = lo
        out[c, 1] = hi
        out[c, 2] = bad


_PAR = {"parallel": True, **_JIT}
quantize_parallel = njit(**_PAR)(renamed(_quantize_driver, "_parallel"))
quantize_serial = njit(**_JIT)(renamed(_quantize_driver, "_serial"))
dequantize_parallel = njit(**_PAR)(renamed(_dequantize_driver, "_parallel"))
dequantize_serial = njit(**_JIT)(renamed(_dequantize_driver, "_serial"))
minmax_parallel = njit(**_PAR)(renamed(_minmax_driver, "_parallel"))
minmax_serial = njit(**_JIT)(renamed(_minmax_driver, "_serial"))


_ENCODE_TABLES: dict[tuple[int, ...], np.ndarray] = {}
_NO_TABLE = np.zeros(1, np.uint8)


def encode_table(qp: QuantizeParams) -> np.ndarray:
    """The float target's 128 Ki-entry code table (see _build_encode_table), built once."""
    if qp.tkind != TKind.FLOAT:
        return _NO_TABLE
    key = qp.encoding()
    table = _ENCODE_TABLES.get(key)
    if table is None:
        table = np.empty(1 << 17, np.uint8)
        eb, mb, bias, mc, has_inf, ns, sat = key
        _build_encode_table(eb, mb, bias, mc, has_inf == 1, ns, sat == 1, table)
        _ENCODE_TABLES[key] = table
    return table


def quantize(x, s, z, y, lp, qp) -> None:
    """Run the quantize kernel: x flat input, s float32 scales, z float64 zero points, y codes."""
    kernel = quantize_parallel if x.size >= PARALLEL_THRESHOLD else quantize_serial
    kernel(x, s, z, y, lp, qp, encode_table(qp))


def dequantize(x, s, z, y, lp, dp, tab) -> None:
    kernel = dequantize_parallel if x.size >= PARALLEL_THRESHOLD else dequantize_serial
    kernel(x, s, z, y, lp, dp, tab)


def minmax(x, xkind) -> tuple[float, float, int]:
    """(min, max, count of NaN/Inf) of a flat float32 array (DynamicQuantizeLinear-11 takes only
    float32; `xkind` keeps the signature of the CUDA backend, which also reads 16-bit floats)."""
    nchunks = (x.size + CHUNK - 1) // CHUNK
    out = np.empty((nchunks, 3), np.float32)
    kernel = minmax_parallel if x.size >= PARALLEL_THRESHOLD else minmax_serial
    kernel(x, int(xkind), out)
    return float(out[:, 0].min()), float(out[:, 1].max()), int(out[:, 2].sum())
