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

from .scalar import encode_f32_bits, round_int_to_float, saturate_int

CHUNK = 4096
#: Below this many elements the serial kernel is used (thread start-up costs more than it saves).
PARALLEL_THRESHOLD = 1 << 16

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


@njit(cache=True, nogil=True)
def _fill_params(i0, n, lp, s, z, sc, zc):
    """Gather the scale and zero point of elements i0..i0+n through the index map."""
    dim = lp[L_DIM]
    post = lp[L_POST]
    block = lp[L_BLOCK]
    sblocks = lp[L_SBLOCKS]
    spost = lp[L_SPOST]
    spre_step = 1 if lp[L_SPRE] > 1 else 0
    plane = dim * post
    p = i0 // plane
    r = i0 - p * plane
    d = r // post
    q = r - d * post
    j = 0
    if post == 1:
        while j < n:
            run = min(dim - d, n - j)
            base = p * spre_step * sblocks
            if block == 1:
                for k in range(run):
                    sc[j + k] = s[base + d + k]
                    zc[j + k] = z[base + d + k]
            else:
                k = 0
                while k < run:
                    blk = (d + k) // block
                    end = min(run, (blk + 1) * block - d)
                    sv = s[base + blk]
                    zv = z[base + blk]
                    for t in range(k, end):
                        sc[j + t] = sv
                        zc[j + t] = zv
                    k = end
            j += run
            d += run
            if d == dim:
                d = 0
                p += 1
    else:
        while j < n:
            run = min(post - q, n - j)
            sbase = (p * spre_step * sblocks + d // block) * spost
            if spost > 1:
                for k in range(run):
                    sc[j + k] = s[sbase + q + k]
                    zc[j + k] = z[sbase + q + k]
            else:
                sv = s[sbase]
                zv = z[sbase]
                for k in range(run):
                    sc[j + k] = sv
                    zc[j + k] = zv
            j += run
            q += run
            if q == post:
                q = 0
                d += 1
                if d == dim:
                    d = 0
                    p += 1


@njit(cache=True, nogil=True)
def _round_to_precision(xb, ub, n, pkind, tab16):
    """Round float32 values in place to float16 or bfloat16 (half to even; NaN kept)."""
    if pkind == P_BF16:
        for j in range(n):
            b = ub[j]
            if (b & 0x7FFFFFFF) > 0x7F800000:
                ub[j] = (b | 0x400000) & 0xFFFF0000
            else:
                ub[j] = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    elif pkind == P_F16:
        for j in range(n):
            xb[j] = tab16[encode_f32_bits(ub[j], 5, 10, 15, F16_MAX_CODE, True, 2, False)]


@njit(cache=True, nogil=True)
def _quantize_chunk(c, x, s, z, y, lp, qp, tab16):
    n_total = x.size
    i0 = c * CHUNK
    n = min(CHUNK, n_total - i0)
    xkind = qp[Q_XKIND]
    pkind = qp[Q_PKIND]
    xb = np.empty(CHUNK, np.float32)
    ub = xb.view(np.uint32)
    # load x as float32, rounded to the precision type
    if xkind == X_F32:
        for j in range(n):
            xb[j] = x[i0 + j]
    elif xkind == X_F16:
        for j in range(n):
            xb[j] = tab16[np.int64(x[i0 + j])]
    elif xkind == X_BF16:
        for j in range(n):
            ub[j] = np.uint32(x[i0 + j]) << 16
    else:  # int32
        if pkind == P_F32:
            for j in range(n):
                xb[j] = np.float32(np.int32(x[i0 + j]))
        else:
            mb = 10 if pkind == P_F16 else 7
            mx = 65504.0 if pkind == P_F16 else 3.3895313892515355e38
            for j in range(n):
                xb[j] = _round_int(np.int64(x[i0 + j]), mb, mx)
    if pkind != P_F32 and pkind != xkind and xkind != X_I32:
        _round_to_precision(xb, ub, n, pkind, tab16)
    # divide
    if lp[L_UNIFORM] == 1:
        s0 = s[0]
        for j in range(n):
            xb[j] = xb[j] / s0
        zb = np.empty(1, np.float64)
        zb[0] = z[0]
        zstride = 0
    else:
        sc = np.empty(CHUNK, np.float32)
        zb = np.empty(CHUNK, np.float64)
        _fill_params(i0, n, lp, s, z, sc, zb)
        for j in range(n):
            xb[j] = xb[j] / sc[j]
        zstride = 1
    if pkind != P_F32:
        _round_to_precision(xb, ub, n, pkind, tab16)
    # round, add the zero point, saturate, store
    if qp[Q_TKIND] == 0:
        lo = qp[Q_LO]
        hi = qp[Q_HI]
        mask = qp[Q_MASK]
        for j in range(n):
            t = saturate_int(np.rint(xb[j]), np.int64(zb[j * zstride]), lo, hi)
            y[i0 + j] = t & mask
    else:
        if qp[Q_HASZP] == 1:
            for j in range(n):
                xb[j] = np.float32(xb[j] + zb[j * zstride])
            if pkind != P_F32:
                _round_to_precision(xb, ub, n, pkind, tab16)
        eb = qp[Q_EBITS]
        mb = qp[Q_MBITS]
        bias = qp[Q_BIAS]
        mc = qp[Q_MAXCODE]
        has_inf = qp[Q_HASINF] == 1
        ns = qp[Q_NANSTYLE]
        sat = qp[Q_SATURATE] == 1
        for j in range(n):
            y[i0 + j] = encode_f32_bits(ub[j], eb, mb, bias, mc, has_inf, ns, sat)


@njit(cache=True, nogil=True)
def _round_int(i, mbits, max_value):
    return np.float32(round_int_to_float(i, mbits, max_value))


def _quantize_driver(x, s, z, y, lp, qp, tab16):
    nchunks = (x.size + CHUNK - 1) // CHUNK
    for c in prange(nchunks):
        _quantize_chunk(c, x, s, z, y, lp, qp, tab16)


@njit(cache=True, nogil=True)
def _dequantize_chunk(c, x, s, z, y, lp, dp, tab):
    n_total = x.size
    i0 = c * CHUNK
    n = min(CHUNK, n_total - i0)
    xkind = dp[D_XKIND]
    okind = dp[D_OKIND]
    xb = np.empty(CHUNK, np.float32)
    ub = xb.view(np.uint32)
    if lp[L_UNIFORM] == 1:
        sc = np.empty(1, np.float32)
        sc[0] = s[0]
        zb = np.empty(1, np.float64)
        zb[0] = z[0]
        st = 0
    else:
        sc = np.empty(CHUNK, np.float32)
        zb = np.empty(CHUNK, np.float64)
        _fill_params(i0, n, lp, s, z, sc, zb)
        st = 1
    # (x - zero_point), exact for <= 16-bit types, one rounding to float32 for int32
    if xkind == DX_NUMERIC:
        for j in range(n):
            xb[j] = np.float32(np.float64(x[i0 + j]) - zb[j * st])
    elif xkind == DX_TABLE:
        for j in range(n):
            xb[j] = np.float32(tab[np.int64(x[i0 + j])] - zb[j * st])
    else:
        for j in range(n):
            xb[j] = np.float32(np.float64(np.int64(x[i0 + j])) - zb[j * st])
    # multiply in float32, round once to the output type
    for j in range(n):
        xb[j] = xb[j] * sc[j * st]
    if okind == P_F32:
        for j in range(n):
            y[i0 + j] = xb[j]
    elif okind == P_BF16:
        for j in range(n):
            b = ub[j]
            if (b & 0x7FFFFFFF) > 0x7F800000:
                y[i0 + j] = ((b | 0x400000) >> 16) & 0xFFFF
            else:
                y[i0 + j] = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF
    else:
        for j in range(n):
            y[i0 + j] = encode_f32_bits(ub[j], 5, 10, 15, F16_MAX_CODE, True, 2, False)


def _dequantize_driver(x, s, z, y, lp, dp, tab):
    nchunks = (x.size + CHUNK - 1) // CHUNK
    for c in prange(nchunks):
        _dequantize_chunk(c, x, s, z, y, lp, dp, tab)


def _minmax_driver(x, xkind, tab16, out):
    """Per-chunk min and max of x (float32 / float16 bits / bfloat16 bits); out[c] = (min, max, bad)."""
    nchunks = (x.size + CHUNK - 1) // CHUNK
    for c in prange(nchunks):
        i0 = c * CHUNK
        n = min(CHUNK, x.size - i0)
        lo = np.float32(np.inf)
        hi = np.float32(-np.inf)
        bad = 0
        for j in range(n):
            if xkind == X_F32:
                v = np.float32(x[i0 + j])
            else:
                v = tab16[np.int64(x[i0 + j])]
            if v != v or v == np.inf or v == -np.inf:
                bad += 1
            lo = min(lo, v)
            hi = max(hi, v)
        out[c, 0] = lo
        out[c, 1] = hi
        out[c, 2] = bad


quantize_parallel = njit(parallel=True, cache=True, nogil=True)(_quantize_driver)
quantize_serial = njit(cache=True, nogil=True)(_quantize_driver)
dequantize_parallel = njit(parallel=True, cache=True, nogil=True)(_dequantize_driver)
dequantize_serial = njit(cache=True, nogil=True)(_dequantize_driver)
minmax_parallel = njit(parallel=True, cache=True, nogil=True)(_minmax_driver)
minmax_serial = njit(cache=True, nogil=True)(_minmax_driver)


def quantize(x, s, z, y, lp, qp, tab16) -> None:
    """Run the quantize kernel: x flat input, s float32 scales, z float64 zero points, y codes."""
    kernel = quantize_parallel if x.size >= PARALLEL_THRESHOLD else quantize_serial
    kernel(x, s, z, y, lp, qp, tab16)


def dequantize(x, s, z, y, lp, dp, tab) -> None:
    kernel = dequantize_parallel if x.size >= PARALLEL_THRESHOLD else dequantize_serial
    kernel(x, s, z, y, lp, dp, tab)


def minmax(x, xkind, tab16) -> tuple[float, float, int]:
    """(min, max, count of NaN/Inf) of a flat float32 (or 16-bit-as-table) array."""
    nchunks = (x.size + CHUNK - 1) // CHUNK
    out = np.empty((nchunks, 3), np.float32)
    kernel = minmax_parallel if x.size >= PARALLEL_THRESHOLD else minmax_serial
    kernel(x, xkind, tab16, out)
    return float(out[:, 0].min()), float(out[:, 1].max()), int(out[:, 2].sum())
