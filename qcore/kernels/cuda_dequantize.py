"""DequantizeLinear as numba.cuda kernels specialised by layout family and output type.

8-bit codes in, float32 or a 16-bit float out, on the layout families of
:mod:`qcore.kernels.cuda_quantize` (per-tensor, rows; same grid and row stepping). Each thread
reads four codes in one 32-bit load (:func:`qcore.kernels.cuda_device.load_word`) and writes
four float32 in one 16-byte store (four 16-bit floats in one 64-bit store); the element rule
is :mod:`qcore.kernels.scalar`'s, decode-table types through their value.
"""

from __future__ import annotations

import numpy as np

from . import cuda_rows
from .cuda_device import load_word, pack16, rows_walk, store4, store_word
from .cuda_kernels import _IMPORT_ERROR, cuda, device_function, nan_f64_to_f32
from .cuda_rows import batch_walk, flat_walk
from .params import DXKind
from .scalar import half_bits

if _IMPORT_ERROR is None:
    from numba import float32, int64, uint32
else:  # pragma: no cover - numba without its CUDA target: nothing here runs
    float32 = int64 = uint32 = np.float32



@device_function
def dq_element(code, s, z, xkind, signed, tab):
    """One 8-bit code (as 0..255) to float32: (x - zp) * scale in float32; decode-table
    types through their value, NaN codes to the CPU's NaN bits without GPU arithmetic: the
    rule of :func:`qcore.kernels.scalar.dequantize_f32` (tests/test_element_rules.py)."""
    if xkind == DXKind.TABLE:
        w = tab[code]
        if w != w:
            return nan_f64_to_f32(w)
        return float32(float32(w) - float32(z)) * s
    v = code - 256 if signed and code >= 128 else code
    return float32(float32(v) - float32(z)) * s


@device_function
def _dq_four(word, s0, s1, s2, s3, z0, z1, z2, z3, xkind, signed, tab):
    return (dq_element(int64(word & 0xFF), s0, z0, xkind, signed, tab),
            dq_element(int64((word >> 8) & 0xFF), s1, z1, xkind, signed, tab),
            dq_element(int64((word >> 16) & 0xFF), s2, z2, xkind, signed, tab),
            dq_element(int64((word >> 24) & 0xFF), s3, z3, xkind, signed, tab))


@device_function
def _out_f32(y, j, v0, v1, v2, v3, okind):
    store4(y, j, v0, v1, v2, v3)


@device_function
def _out_half(y, j, v0, v1, v2, v3, okind):
    store_word(y, j, pack16(int64(half_bits(v0, okind)), int64(half_bits(v1, okind)),
                            int64(half_bits(v2, okind)), int64(half_bits(v3, okind))))


@device_function
def _one_f32(v, okind):
    return v


@device_function
def _one_half(v, okind):
    return half_bits(v, okind)


def _dequantize_per_tensor(out4, out1):
    @cuda.jit
    def kernel(x, y, s, z, dp, signed, tab):
        sv = s[0]
        zv = z[0]
        xkind = dp.xkind
        okind = dp.okind
        n = x.size
        nv = n >> 2
        stride = int64(cuda.gridsize(1))
        j = int64(cuda.grid(1))
        word = uint32(0)
        if j < nv:
            word = load_word(x, j)
        while j < nv:
            following = word  # the next step's codes, loaded before these convert
            if j + stride < nv:
                following = load_word(x, j + stride)
            v0, v1, v2, v3 = _dq_four(word, sv, sv, sv, sv, zv, zv, zv, zv, xkind, signed, tab)
            out4(y, j, v0, v1, v2, v3, okind)
            word = following
            j += stride
        i = (nv << 2) + int64(cuda.grid(1))
        if i < n:
            y[i] = out1(dq_element(int64(x[i]), sv, zv, xkind, signed, tab), okind)

    return kernel


@device_function
def _blank_word():
    return uint32(0)


@device_function
def _reload4(s, z, si, zstep, z0, z1, z2, z3):
    """Scales si .. si+3 and their zero points (z one, or one per scale: zstep 0 or 1)."""
    zi = si * zstep
    return (s[si], s[si + 1], s[si + 2], s[si + 3],
            z[zi], z[zi + zstep], z[zi + 2 * zstep], z[zi + 3 * zstep])


def _dequantize_rows(out4, out1):
    @device_function
    def put4(y, j, word, s0, s1, s2, s3, z0, z1, z2, z3, k):
        xkind, okind, signed, tab = k
        v0, v1, v2, v3 = _dq_four(word, s0, s1, s2, s3, z0, z1, z2, z3, xkind, signed, tab)
        out4(y, j, v0, v1, v2, v3, okind)

    @device_function
    def put1(x, y, i, sv, zv, k):
        xkind, okind, signed, tab = k
        y[i] = out1(dq_element(int64(x[i]), sv, zv, xkind, signed, tab), okind)

    walk = rows_walk(_blank_word, load_word, _reload4, put4, put1)

    @cuda.jit
    def kernel(x, y, s, z, dp, signed, tab, rp):
        """The rows walk of QuantizeLinear's rows kernels
        (:func:`qcore.kernels.cuda_device.rows_walk`), four codes per 32-bit load."""
        walk(x, y, s, z, (dp.xkind, dp.okind, signed, tab), rp, int64(cuda.grid(1)),
             int64(cuda.gridsize(1)), int64(cuda.blockIdx.y), int64(cuda.gridDim.y))

    return kernel


def _dequantize_batch(out4, walk):
    """The batched rows kernels (:mod:`qcore.kernels.cuda_rows`): (per-column scales, one
    scale per vector), of `walk` ("batch", "stride" or "pipe")."""

    @device_function
    def put4(y, j, word, s0, s1, s2, s3, z0, z1, z2, z3, k):
        xkind, okind, signed, tab = k
        v0, v1, v2, v3 = _dq_four(word, s0, s1, s2, s3, z0, z1, z2, z3, xkind, signed, tab)
        out4(y, j, v0, v1, v2, v3, okind)

    walk_col, walk_vec = batch_walk(_blank_word, load_word, _reload4, put4, walk)

    @cuda.jit
    def kernel_col(x, y, s, z, dp, signed, tab, rp):
        """A scale per column, read once: each thread's rows BATCH at a time."""
        walk_col(x, y, s, z, (dp.xkind, dp.okind, signed, tab), rp, int64(cuda.grid(1)),
                 int64(cuda.gridsize(1)), int64(cuda.blockIdx.y), int64(cuda.gridDim.y))

    @cuda.jit
    def kernel_vec(x, y, s, z, dp, signed, tab, rp):
        """One scale per vector and row: each thread's rows BATCH at a time, scales with them."""
        walk_vec(x, y, s, z, (dp.xkind, dp.okind, signed, tab), rp, int64(cuda.grid(1)),
                 int64(cuda.gridsize(1)), int64(cuda.blockIdx.y), int64(cuda.gridDim.y))

    return kernel_col, kernel_vec


def _dequantize_flat(out4):
    """The flat kernel (:func:`qcore.kernels.cuda_rows.flat_walk`): element i's scale is
    i // q; four codes per 32-bit load, a scale per word."""

    @device_function
    def put4(y, j, word, s0, s1, s2, s3, z0, z1, z2, z3, k):
        xkind, okind, signed, tab = k
        v0, v1, v2, v3 = _dq_four(word, s0, s1, s2, s3, z0, z1, z2, z3, xkind, signed, tab)
        out4(y, j, v0, v1, v2, v3, okind)

    walk = flat_walk(_blank_word, load_word, put4)

    @cuda.jit
    def kernel(x, y, s, z, dp, signed, tab, fp):
        """Four codes per step, their scale with them; the next step's loaded first."""
        walk(x, y, s, z, (dp.xkind, dp.okind, signed, tab), fp, int64(cuda.grid(1)),
             int64(cuda.gridsize(1)), int64(x.size >> 2))

    return kernel


def _build_dequantize():
    kernels = {}
    for okind, (out4, out1) in (("f32", (_out_f32, _one_f32)), ("half", (_out_half, _one_half))):
        kernels[("per-tensor", okind)] = _dequantize_per_tensor(out4, out1)
        kernels[("rows", okind)] = _dequantize_rows(out4, out1)
        kernels[("flat-vec", okind)] = _dequantize_flat(out4)
        for walk in cuda_rows.BATCHED:
            col, vec = _dequantize_batch(out4, walk)
            kernels[(f"{walk}-col", okind)], kernels[(f"{walk}-vec", okind)] = col, vec
    return kernels


DEQUANTIZE_KERNELS = _build_dequantize()
