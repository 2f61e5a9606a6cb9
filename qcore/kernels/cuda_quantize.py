"""QuantizeLinear as numba.cuda kernels specialised by layout family and target family.

:mod:`qcore.kernels.cuda_kernels` holds one generic kernel per operator (any layout, any type,
one element per thread). This module holds the QuantizeLinear kernels the common cases run
(float32 x, float32 precision), each compiled for one layout family and one target family,
with the element rules of :mod:`qcore.kernels.scalar` called as device functions (no rule is
written here):

- layout families: **per-tensor** (the scale and zero point read once into registers), and
  **rows** (the index map of :mod:`qcore.layout` as rows of contiguous elements: per-axis and
  blocked along the last axis, and per-axis / blocked along an outer axis, where a row shares a
  scale or steps through consecutive ones). On a 2-D grid each thread keeps four columns and
  steps through the rows: a column's scale block comes from a float64 reciprocal with one
  correction step (:func:`qcore.kernels.cuda_device.div_exact`) once per thread, a row's first
  scale by adds, and scales are reloaded only when their index changes: no integer division
  instruction anywhere in these kernels.
- target families: saturating integers of 8 or 16 bits, small floats by the arithmetic encoder
  (:func:`qcore.kernels.scalar.encode_with`), float4 e2m1 by its shorter copy
  (:func:`qcore.kernels.scalar.e2m1_code`, the MXFP4 codes), and float8 e4m3fn / e5m2 by the GPU's own
  conversion (``cvt.rn.satfinite.{e4m3,e5m2}x2.f32``, compute capability >= 8.9) for the values
  it rounds exactly as the encoder does; the values past the format's overflow bound (where the
  hardware only saturates) and NaN go through the encoder, so both saturate modes, the NaN sign
  and -0 stay the CPU's.
- each thread handles four elements: one 16-byte load of x (``ld.global.v4``), four codes
  packed into one 32-bit store (64-bit for 16-bit codes) on the code array itself.

Grid-stride loops over a grid sized to the device (:func:`qcore.kernels.cuda.grid`,
:func:`qcore.kernels.cuda_rows.row_launch`).
"""

from __future__ import annotations

import numpy as np

from . import cuda_rows
from .cuda_device import (
    cvt_e4m3x2,
    cvt_e5m2x2,
    load4,
    pack8,
    pack16,
    rows_walk,
    store_word,
)
from .cuda_kernels import _IMPORT_ERROR, bits_to_f32, cuda, device_function, f32_to_bits, rint_f32
from .cuda_rows import batch_walk, flat_walk
from .params import NanStyle
from .scalar import e2m1_code, encode_consts, encode_with, saturate_int

if _IMPORT_ERROR is None:
    from numba import float32, int32, int64, uint32
else:  # pragma: no cover - numba without its CUDA target: nothing here runs
    float32 = int32 = int64 = uint32 = np.float32

# ---------------------------------------------------------------------------------------------
# Element rules of the target families (scalar.py's rules, called as device functions)
# ---------------------------------------------------------------------------------------------


@device_function
def q_int(v, s, z, lo, hi, mask):
    """saturate(round(x / scale) + zp) as its stored code (scale division in float32): the
    rule of :func:`qcore.kernels.scalar.int_code` (tests/test_element_rules.py)."""
    return int64(saturate_int(rint_f32(float32(v / s)), int64(z), lo, hi) & mask)


@device_function
def q_small_float_bits(v, s, z, has_zp):
    """x / scale (+ zp) in float32 as IEEE bits; a NaN x keeps its own bits (GPU arithmetic
    would return a canonical positive NaN; a CPU's NaN / scale + zp is that NaN). The quotient
    is computed for every x and the NaN's bits selected after, with no branch: a branch per
    element keeps the compiler from sharing one reciprocal of a scale among the divisions by
    it (the division's fast path is a reciprocal and three fused multiply-adds)."""
    q = float32(v / s)
    if has_zp:
        q = float32(q + float32(z))
    return f32_to_bits(v) if v != v else f32_to_bits(q)


@device_function
def q_float(v, s, z, has_zp, c, fnuz):
    """The small float code of x / scale (+ zp): scalar.encode_with."""
    return int64(encode_with(q_small_float_bits(v, s, z, has_zp), c, fnuz))


@device_function
def q_fp4(v, s, z, has_zp):
    """The float4 e2m1 code of x / scale (+ zp): scalar.e2m1_code (encode_with's float4e2m1
    codes)."""
    return int64(e2m1_code(q_small_float_bits(v, s, z, has_zp)))


@device_function
def _hw_or_encoder(b, hw, c):
    """The hardware's code where it rounds as the encoder does (|q| below the format's overflow
    bound c[3], NaN excluded), else the encoder's (overflow, Inf, NaN: saturate or not)."""
    if int32(b & uint32(0x7FFFFFFF)) < c[3]:
        return int64(hw)
    return int64(encode_with(b, c, False))


@device_function
def q_fp8_pair(v0, v1, s0, s1, z0, z1, has_zp, c, e5m2):
    """Codes of two elements through one cvt instruction (float8 e4m3fn or e5m2)."""
    b0 = q_small_float_bits(v0, s0, z0, has_zp)
    b1 = q_small_float_bits(v1, s1, z1, has_zp)
    f0 = bits_to_f32(b0)
    f1 = bits_to_f32(b1)
    hw = cvt_e5m2x2(f1, f0) if e5m2 else cvt_e4m3x2(f1, f0)
    return _hw_or_encoder(b0, hw & 0xFF, c), _hw_or_encoder(b1, (hw >> 8) & 0xFF, c)

# Target families. Each kernel below is compiled once per family (closures are constants to
# numba). A family: consts(qp) once per thread; one(v, s, z, k) for one element; four(...) for
# four elements.


def _four_of(one):
    """four(...) of a family that converts its elements one by one through one(v, s, z, k)."""

    @device_function
    def four(v0, v1, v2, v3, s0, s1, s2, s3, z0, z1, z2, z3, k):
        return one(v0, s0, z0, k), one(v1, s1, z1, k), one(v2, s2, z2, k), one(v3, s3, z3, k)

    return four


@device_function
def _int_consts(qp):
    return qp.lo, qp.hi, qp.mask


@device_function
def _int_one(v, s, z, k):
    return q_int(v, s, z, k[0], k[1], k[2])


@device_function
def _encoder_consts(qp):
    """The small-float encoder's constants of the target (scalar.encode_consts)."""
    return encode_consts(qp.ebits, qp.mbits, qp.bias, qp.max_code, qp.has_inf, qp.nan_style,
                         qp.saturate)


@device_function
def _float_consts(qp):
    return _encoder_consts(qp), qp.has_zp == 1, qp.nan_style == NanStyle.NEG_ZERO


@device_function
def _float_one(v, s, z, k):
    return q_float(v, s, z, k[1], k[0], k[2])


@device_function
def _fp4_consts(qp):
    return qp.has_zp == 1


@device_function
def _fp4_one(v, s, z, k):
    return q_fp4(v, s, z, k)


@device_function
def _fp8_consts(qp):
    return _encoder_consts(qp), qp.has_zp == 1, qp.ebits == 5


@device_function
def _fp8_one(v, s, z, k):
    c, has_zp, e5m2 = k
    return q_fp8_pair(v, v, s, s, z, z, has_zp, c, e5m2)[0]


@device_function
def _fp8_four(v0, v1, v2, v3, s0, s1, s2, s3, z0, z1, z2, z3, k):
    c, has_zp, e5m2 = k
    a0, a1 = q_fp8_pair(v0, v1, s0, s1, z0, z1, has_zp, c, e5m2)
    a2, a3 = q_fp8_pair(v2, v3, s2, s3, z2, z3, has_zp, c, e5m2)
    return a0, a1, a2, a3


TARGET_FAMILIES = {
    "int": (_int_consts, _int_one, _four_of(_int_one)),
    "float": (_float_consts, _float_one, _four_of(_float_one)),
    "fp8-cvt": (_fp8_consts, _fp8_one, _fp8_four),
    "fp4": (_fp4_consts, _fp4_one, _four_of(_fp4_one)),
}

# ---------------------------------------------------------------------------------------------
# QuantizeLinear kernels (float32 x, float32 precision)
# ---------------------------------------------------------------------------------------------


def _quantize_per_tensor(consts, one, four, pack):
    @cuda.jit
    def kernel(x, y, s, z, qp):
        """One scale and zero point for all: both in registers; four elements per step."""
        k = consts(qp)
        sv = s[0]
        zv = z[0]
        n = x.size
        nv = n >> 2
        stride = int64(cuda.gridsize(1))
        j = int64(cuda.grid(1))
        v0 = v1 = v2 = v3 = float32(0)
        if j < nv:
            v0, v1, v2, v3 = load4(x, j)
        while j < nv:
            w0, w1, w2, w3 = v0, v1, v2, v3  # the next step's, loaded before these convert
            if j + stride < nv:
                w0, w1, w2, w3 = load4(x, j + stride)
            c0, c1, c2, c3 = four(v0, v1, v2, v3, sv, sv, sv, sv, zv, zv, zv, zv, k)
            store_word(y, j, pack(c0, c1, c2, c3))
            v0, v1, v2, v3 = w0, w1, w2, w3
            j += stride
        i = (nv << 2) + int64(cuda.grid(1))
        if i < n:  # the last n % 4 elements
            y[i] = one(x[i], sv, zv, k)

    return kernel


@device_function
def _blank4():
    return float32(0), float32(0), float32(0), float32(0)


@device_function
def _reload4(s, z, si, zstep, z0, z1, z2, z3):
    """Scales si .. si+3 in one 16-byte load, and zero points so when there is one per scale."""
    s0, s1, s2, s3 = load4(s, si >> 2)
    if zstep == 1:
        z0, z1, z2, z3 = load4(z, si >> 2)
    return s0, s1, s2, s3, z0, z1, z2, z3


def _quantize_rows(consts, one, four, pack):
    @device_function
    def put4(y, j, xv, s0, s1, s2, s3, z0, z1, z2, z3, k):
        v0, v1, v2, v3 = xv
        c0, c1, c2, c3 = four(v0, v1, v2, v3, s0, s1, s2, s3, z0, z1, z2, z3, k)
        store_word(y, j, pack(c0, c1, c2, c3))

    @device_function
    def put1(x, y, i, sv, zv, k):
        y[i] = one(x[i], sv, zv, k)

    walk = rows_walk(_blank4, load4, _reload4, put4, put1)

    @cuda.jit
    def kernel(x, y, s, z, qp, rp):
        """x as rows on a 2-D grid (:func:`qcore.kernels.cuda_device.rows_walk`): blockIdx.x
        and the thread pick four columns, blockIdx.y the first row; four elements in one
        16-byte load, their codes in one packed store."""
        walk(x, y, s, z, consts(qp), rp, int64(cuda.grid(1)), int64(cuda.gridsize(1)),
             int64(cuda.blockIdx.y), int64(cuda.gridDim.y))

    return kernel


def _quantize_batch(consts, four, pack, walk):
    """The batched rows kernels (:mod:`qcore.kernels.cuda_rows`): (per-column scales, one
    scale per vector), of `walk` ("batch", "stride" or "pipe")."""

    @device_function
    def put4(y, j, xv, s0, s1, s2, s3, z0, z1, z2, z3, k):
        v0, v1, v2, v3 = xv
        c0, c1, c2, c3 = four(v0, v1, v2, v3, s0, s1, s2, s3, z0, z1, z2, z3, k)
        store_word(y, j, pack(c0, c1, c2, c3))

    walk_col, walk_vec = batch_walk(_blank4, load4, _reload4, put4, walk)

    @cuda.jit
    def kernel_col(x, y, s, z, qp, rp):
        """A scale per column, read once: each thread's rows BATCH at a time."""
        walk_col(x, y, s, z, consts(qp), rp, int64(cuda.grid(1)), int64(cuda.gridsize(1)),
                 int64(cuda.blockIdx.y), int64(cuda.gridDim.y))

    @cuda.jit
    def kernel_vec(x, y, s, z, qp, rp):
        """One scale per vector and row: each thread's rows BATCH at a time, scales with them."""
        walk_vec(x, y, s, z, consts(qp), rp, int64(cuda.grid(1)), int64(cuda.gridsize(1)),
                 int64(cuda.blockIdx.y), int64(cuda.gridDim.y))

    return kernel_col, kernel_vec


def _quantize_flat(consts, four, pack):
    """The flat kernel (:func:`qcore.kernels.cuda_rows.flat_walk`): a layout whose element i
    has the scale i // q, walked as the per-tensor kernel walks, a scale per vector."""

    @device_function
    def put4(y, j, xv, s0, s1, s2, s3, z0, z1, z2, z3, k):
        v0, v1, v2, v3 = xv
        c0, c1, c2, c3 = four(v0, v1, v2, v3, s0, s1, s2, s3, z0, z1, z2, z3, k)
        store_word(y, j, pack(c0, c1, c2, c3))

    walk = flat_walk(_blank4, load4, put4)

    @cuda.jit
    def kernel(x, y, s, z, qp, fp):
        """Four elements per step, their scale with them; the next step's loaded first."""
        walk(x, y, s, z, consts(qp), fp, int64(cuda.grid(1)), int64(cuda.gridsize(1)),
             int64(x.size >> 2))

    return kernel


def _build_quantize():
    kernels = {}
    for fam, (consts, one, four) in TARGET_FAMILIES.items():
        for width, pack in ((1, pack8), (2, pack16)):
            if width == 2 and fam != "int":
                continue
            kernels[("per-tensor", fam, width)] = _quantize_per_tensor(consts, one, four, pack)
            kernels[("rows", fam, width)] = _quantize_rows(consts, one, four, pack)
            kernels[("flat-vec", fam, width)] = _quantize_flat(consts, four, pack)
            for walk in cuda_rows.BATCHED:
                col, vec = _quantize_batch(consts, four, pack, walk)
                kernels[(f"{walk}-col", fam, width)] = col
                kernels[(f"{walk}-vec", fam, width)] = vec
    return kernels


QUANTIZE_KERNELS = _build_quantize()
