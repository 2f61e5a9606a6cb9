"""numba CPU kernels: one streaming pass over x in chunks, parallel over chunks.

Each chunk runs in small phases over cache-resident buffers: gather the chunk's scales and zero
points through the layout's index map, load x as float32 (decoding float16/bfloat16/int32),
divide (or multiply), round to the precision type, then round/saturate/encode into the output.
Every rule lives in :mod:`qcore.kernels.scalar`; this module only moves data.

Parameters are passed as small int64 arrays (see :func:`qcore.ops`) so one compiled kernel per
(input dtype, output dtype) pair serves every format and granularity.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import renamed
from .bits import f32_as_u32, u32_as_f32
from .scalar import encode_f32_bits, round_int_to_float, saturate_int

CHUNK = 32768
#: Below this many elements the serial kernel is used: waking the second thread costs more than
#: it saves, and milliseconds when the other core is busy (see `python -m qcore.bench --sweep`).
PARALLEL_THRESHOLD = 1 << 21

# Layout parameter slots (lp array)
L_PRE, L_DIM, L_POST, L_BLOCK, L_SPRE, L_SBLOCKS, L_SPOST, L_UNIFORM = range(8)
# Quantize parameter slots (qp array)
(Q_XKIND, Q_PKIND, Q_TKIND, Q_LO, Q_HI, Q_MASK, Q_EBITS, Q_MBITS, Q_BIAS, Q_MAXCODE, Q_HASINF,
 Q_NANSTYLE, Q_SATURATE, Q_HASZP) = range(14)
# x kinds of QuantizeLinear
X_F32, X_F16, X_BF16, X_I32 = 0, 1, 2, 3
# precision kinds (also DequantizeLinear output kinds)
P_F32, P_F16, P_BF16 = 0, 1, 2
# DequantizeLinear parameter slots and x kinds
D_XKIND, D_OKIND = 0, 1
DX_NUMERIC, DX_TABLE, DX_I32 = 0, 1, 2

F16_MAX_CODE = 0x7BFF


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


@njit(cache=True, nogil=True, error_model="numpy")
def _locate(i0, lp):
    """(p, d, q) coordinates of flat element i0 in the (pre, dim, post) view."""
    plane = lp[L_DIM] * lp[L_POST]
    p = i0 // plane
    r = i0 - p * plane
    d = r // lp[L_POST]
    return p, d, r - d * lp[L_POST]


@njit(cache=True, nogil=True, error_model="numpy")
def _next_segment(p, d, q, remaining, lp):
    """The next run of elements, starting at (p, d, q), whose scales are read simply.

    Returns (run, start, count, block, first, p, d, q): the run's elements use the `count`
    scales from `start`; element t has scale start + (first + t) // block, or start + t when
    block == 0 (per-axis along the last axis). (p, d, q) is advanced past the run. This walk is
    the layout's index map, run by run.
    """
    dim = lp[L_DIM]
    post = lp[L_POST]
    block = lp[L_BLOCK]
    sblocks = lp[L_SBLOCKS]
    spost = lp[L_SPOST]
    spre_step = 1 if lp[L_SPRE] > 1 else 0
    if post == 1:  # the axis is the last one: scales change along d
        run = min(dim - d, remaining)
        base = p * spre_step * sblocks
        if block == 1:  # per-axis: one scale per element
            start, count, blk, first = base + d, run, 0, 0
        else:  # blocks, processed block by block
            first = d % block
            start, count, blk = base + d // block, (first + run + block - 1) // block, block
        d += run
        if d == dim:
            d = 0
            p += 1
    else:  # a row of `post` contiguous elements shares d
        run = min(post - q, remaining)
        start = (p * spre_step * sblocks + d // block) * spost
        if spost == 1:  # one scale for the row
            count, blk, first = 1, run, 0
        else:  # blocked on an earlier axis: the row's scales are contiguous
            start, count, blk, first = start + q, run, 0, 0
        q += run
        if q == post:
            q = 0
            d += 1
            if d == dim:
                d = 0
                p += 1
    return run, start, count, blk, first, p, d, q


_JIT = {"cache": True, "nogil": True, "error_model": "numpy"}


_INLINE = {"inline": "always", **_JIT}


@njit(**_INLINE)
def round_to_precision(v, pkind):
    """Round a float32 to float16 or bfloat16 (half to even; NaN kept), as float32."""
    if pkind == P_F32:
        return v
    b = f32_as_u32(v)
    a = b & np.uint32(0x7FFFFFFF)
    sign = b & np.uint32(0x80000000)
    if pkind == P_BF16:
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


@njit(**_JIT)
def load_x(xv, xkind, pkind):
    """One input element as float32, rounded to the precision type."""
    if xkind == X_F32:
        v = np.float32(xv)
    elif xkind == X_F16:
        v = f16_to_f32(xv)
    elif xkind == X_BF16:
        v = u32_as_f32(np.uint32(xv) << np.uint32(16))
    elif pkind == P_F32:
        return np.float32(np.int32(xv))
    else:
        mb = 10 if pkind == P_F16 else 7
        mx = 65504.0 if pkind == P_F16 else 3.3895313892515355e38
        return np.float32(round_int_to_float(np.int64(xv), mb, mx))
    if pkind != xkind:
        v = round_to_precision(v, pkind)
    return v


@njit(**_JIT)
def quantize_value(q, z, qp):
    """Code of one quotient q = x / scale (already rounded to the precision type)."""
    if qp[Q_TKIND] == 0:
        return saturate_int(np.rint(q), np.int64(z), qp[Q_LO], qp[Q_HI]) & qp[Q_MASK]
    if qp[Q_HASZP] == 1:
        q = q + np.float32(z)
        q = round_to_precision(q, qp[Q_PKIND])
    return encode_f32_bits(f32_as_u32(q), qp[Q_EBITS], qp[Q_MBITS], qp[Q_BIAS],
                           qp[Q_MAXCODE], qp[Q_HASINF] == 1, qp[Q_NANSTYLE],
                           qp[Q_SATURATE] == 1)


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
    xkind = qp[Q_XKIND]
    pkind = qp[Q_PKIND]
    tkind = qp[Q_TKIND]
    lo = qp[Q_LO]
    hi = qp[Q_HI]
    mask = qp[Q_MASK]
    has_zp = qp[Q_HASZP] == 1
    neg_zero = np.float32(-0.0)  # adding -0.0 is the identity, -0 included
    fast_int = tkind == 0 and pkind == P_F32 and xkind == X_F32
    fast_float = tkind == 1 and pkind == P_F32 and xkind == X_F32 and enc.size > 1
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
        elif tkind == 0 and pkind == P_F16 and xkind == X_F16:
            for j in range(np.uint64(j0), np.uint64(j1)):
                q = round_to_precision(f16_to_f32(xs[j]) / s0, P_F16)
                ys[j] = _int_code(q, z0, lo, hi, mask)
        elif tkind == 0 and pkind == P_BF16 and xkind == X_BF16:
            for j in range(np.uint64(j0), np.uint64(j1)):
                v = u32_as_f32(np.uint32(xs[j]) << np.uint32(16))
                ys[j] = _int_code(round_to_precision(v / s0, P_BF16), z0, lo, hi, mask)
        elif tkind == 1 and pkind == xkind and (xkind == X_F16 or xkind == X_BF16) and (
                enc.size > 1):
            za = round_to_precision(np.float32(zv[b]), pkind) if has_zp else neg_zero
            if xkind == X_F16:
                for j in range(np.uint64(j0), np.uint64(j1)):
                    q = round_to_precision(f16_to_f32(xs[j]) / s0, P_F16)
                    ys[j] = _table_encode(round_to_precision(q + za, P_F16), enc)
            else:
                for j in range(np.uint64(j0), np.uint64(j1)):
                    v = u32_as_f32(np.uint32(xs[j]) << np.uint32(16))
                    q = round_to_precision(v / s0, P_BF16)
                    ys[j] = _table_encode(round_to_precision(q + za, P_BF16), enc)
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
    if lp[L_UNIFORM] == 1:
        _quantize_segment(x[i0:i0 + n], y[i0:i0 + n], s, z, n, 0, qp, enc)
        return
    p, d, q = _locate(i0, lp)
    j = 0
    while j < n:
        run, k, m, block, first, p, d, q = _next_segment(p, d, q, n - j, lp)
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
    if xkind == DX_NUMERIC:
        d = np.float32(xv) - np.float32(z)
    elif xkind == DX_TABLE:
        d = np.float32(tab[np.int64(xv)]) - np.float32(z)
    else:
        d = np.float32(np.int64(xv) - np.int64(z))
    v = d * s
    if okind == P_F32:
        return v
    return np.float32(_half_bits(v, okind))


@njit(**_JIT)
def _half_bits(v, okind):
    b = f32_as_u32(v)
    if okind == P_BF16:
        if (b & 0x7FFFFFFF) > 0x7F800000:
            return ((b | np.uint32(0x400000)) >> 16) & np.uint32(0xFFFF)
        return ((b + np.uint32(0x7FFF) + ((b >> 16) & np.uint32(1))) >> 16) & np.uint32(0xFFFF)
    return np.uint32(encode_f32_bits(b, 5, 10, 15, F16_MAX_CODE, True, 2, False))


@njit(**_JIT)
def _dequantize_segment(xs, ys, sv, zv, block, first, dp, tab):
    """Dequantize xs into ys; scales and zero points as in :func:`_quantize_segment`."""
    xkind = dp[D_XKIND]
    okind = dp[D_OKIND]
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
    if lp[L_UNIFORM] == 1:
        _dequantize_segment(x[i0:i0 + n], y[i0:i0 + n], s, z, n, 0, dp, tab)
        return
    p, d, q = _locate(i0, lp)
    j = 0
    while j < n:
        run, k, m, block, first, p, d, q = _next_segment(p, d, q, n - j, lp)
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


def encode_table(qp: np.ndarray) -> np.ndarray:
    """The float target's 128 Ki-entry code table (see _build_encode_table), built once."""
    if qp[Q_TKIND] != 1:
        return _NO_TABLE
    key = tuple(int(v) for v in qp[Q_EBITS:Q_SATURATE + 1])
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
    kernel(x, xkind, out)
    return float(out[:, 0].min()), float(out[:, 1].max()), int(out[:, 2].sum())
