"""numba.cuda kernels specialised by layout family and target family.

:mod:`qcore.kernels.cuda_kernels` holds one generic kernel per operator (any layout, any type,
one element per thread). This module holds the kernels the common cases run, each compiled for
one layout family and one target family, with the element rules of
:mod:`qcore.kernels.scalar` called as device functions (no rule is written here):

- layout families: **per-tensor** (the scale and zero point read once into registers), and
  **rows** (the index map of :mod:`qcore.layout` as rows of contiguous elements: per-axis and
  blocked along the last axis, and per-axis / blocked along an outer axis, where a row shares a
  scale or steps through consecutive ones). On a 2-D grid each thread keeps four columns and
  steps through the rows: a column's scale block comes from a float64 reciprocal with one
  correction step (:func:`div_exact`) once per thread, a row's first scale by adds, and scales
  are reloaded only when their index changes: no integer division instruction anywhere in
  these kernels.
- target families: saturating integers of 8 or 16 bits, small floats by the arithmetic encoder
  (:func:`qcore.kernels.scalar.encode_with`), and float8 e4m3fn / e5m2 by the GPU's own
  conversion (``cvt.rn.satfinite.{e4m3,e5m2}x2.f32``, compute capability >= 8.9) for the values
  it rounds exactly as the encoder does; the values past the format's overflow bound (where the
  hardware only saturates) and NaN go through the encoder, so both saturate modes, the NaN sign
  and -0 stay the CPU's.
- each thread handles four elements: one 16-byte load of x (``ld.global.v4``), four codes
  packed into one 32-bit store (64-bit for 16-bit codes) by :func:`store_word` on the code
  array itself; DequantizeLinear reads four 8-bit codes in one 32-bit load
  (:func:`load_word`) and writes four float32 in one 16-byte store.

Grid-stride loops over a grid sized to the device (:func:`qcore.kernels.cuda.grid`,
:func:`qcore.kernels.cuda.row_launch`).
DynamicQuantizeLinear's min/max/NaN-count is one pass: per-thread folds, warp shuffles, one
shared-memory step across the block's warps and one atomic per block and quantity (floats as
order-preserving int32 keys).

Under the CUDA simulator the 16-byte loads and stores, the shuffles and the conversion are
plain Python stand-ins (the float8 conversion is never selected there).
"""

from __future__ import annotations

import math
import time

import numpy as np

from .cuda_kernels import (
    _IMPORT_ERROR,
    SIMULATOR,
    bits_to_f32,
    cuda,
    device_function,
    f32_to_bits,
    load_x,
    nan_f64_to_f32,
    rint_f32,
)
from .params import DXKind, NanStyle, PKind, XKind
from .scalar import encode_consts, encode_with, half_bits, saturate_int

if _IMPORT_ERROR is None:
    from numba import float32, float64, int32, int64, uint32, uint64
else:  # pragma: no cover - numba without its CUDA target: nothing here runs
    float32 = float64 = int32 = int64 = uint32 = uint64 = np.float32

#: Elements per thread and per vector access.
VEC = 4
#: Warps per block of the one-pass min/max (a block has at most 32 warps).
_MAX_WARPS = 32

# ---------------------------------------------------------------------------------------------
# Wide loads and stores, the float8 conversion, warp shuffles: intrinsics on a GPU
# ---------------------------------------------------------------------------------------------

if SIMULATOR:

    def load4(a, j):
        """Elements 4j .. 4j+3 of a (one 16-byte load on a GPU)."""
        k = 4 * j
        return a[k], a[k + 1], a[k + 2], a[k + 3]

    def store4(a, j, v0, v1, v2, v3):
        """a[4j .. 4j+3] = v0 .. v3 (one 16-byte store on a GPU)."""
        k = 4 * j
        a[k] = v0
        a[k + 1] = v1
        a[k + 2] = v2
        a[k + 3] = v3

    def store_word(a, j, w):
        """a[4j .. 4j+3] = the four codes packed in w, the first in the low bits (one 32-bit
        store over 8-bit codes, one 64-bit store over 16-bit codes, on a GPU)."""
        bits = 8 * a.dtype.itemsize
        mask = (1 << bits) - 1
        w = int(w)
        k = 4 * j
        for e in range(4):
            a[k + e] = (w >> (bits * e)) & mask

    def load_word(a, j):
        """Bytes 4j .. 4j+3 of an 8-bit array as one little-endian uint32 (one 32-bit load)."""
        k = 4 * j
        return ((int(a[k]) & 0xFF) | ((int(a[k + 1]) & 0xFF) << 8)
                | ((int(a[k + 2]) & 0xFF) << 16) | ((int(a[k + 3]) & 0xFF) << 24))

    def globaltimer():
        """The GPU's nanosecond clock (``%globaltimer``); the host's under the simulator."""
        return time.perf_counter_ns()

    def cvt_e4m3x2(hi, lo):  # pragma: no cover - never selected under the simulator
        raise RuntimeError("the float8 conversion instruction runs only on a GPU")

    cvt_e5m2x2 = cvt_e4m3x2

    def shfl_down_f32(v, off):
        """A warp's shfl_down through shared memory (see :func:`_sim_shuffled`); a lane past
        the block gives v itself (min and max are idempotent)."""
        buf = cuda.shared.array(_MAX_WARPS * 32, np.float32)
        return _sim_shuffled(buf, v, off, v)

    def shfl_down_i64(v, off):
        """As shfl_down_f32 for the NaN/Inf count: a lane past the block gives 0."""
        buf = cuda.shared.array(_MAX_WARPS * 32, np.int64)  # its own line: its own array
        return _sim_shuffled(buf, v, off, 0)

    def _sim_shuffled(buf, v, off, absent):
        """Every thread of the block calls it. The simulator's blocks (8 threads) are smaller
        than a warp: lanes past the block give `absent`, the fold's identity (a GPU block is
        whole warps, where every lane the fold's lane 0 reads exists)."""
        tid = cuda.threadIdx.x
        buf[tid] = v
        cuda.syncthreads()
        src = tid + off
        r = v
        if (tid % 32) + off < 32:
            r = buf[src] if src < cuda.blockDim.x else absent
        cuda.syncthreads()
        return r

elif _IMPORT_ERROR is None:
    from llvmlite import ir
    from numba import types as _types
    from numba.cuda.extending import intrinsic

    def _vector_pointer(context, builder, aryty, ary_value, j):
        """Address of the j-th 4-element vector of a C-contiguous array, in the global space."""
        ary = context.make_array(aryty)(context, builder, ary_value)
        vty = ir.VectorType(context.get_data_type(aryty.dtype), 4)
        base = builder.bitcast(ary.data, vty.as_pointer())
        ptr = builder.gep(base, [j])
        return vty, builder.addrspacecast(ptr, vty.as_pointer(1))

    @intrinsic
    def load4(typingctx, a, j):
        """Elements 4j .. 4j+3 of a in one 16-byte load (``ld.global.v4``); a's data must be
        16-byte aligned (the launcher checks)."""
        sig = _types.UniTuple(a.dtype, 4)(a, _types.int64)

        def codegen(context, builder, sig, args):
            vty, ptr = _vector_pointer(context, builder, sig.args[0], args[0], args[1])
            vec = builder.load(ptr, align=16)
            vals = [builder.extract_element(vec, ir.Constant(ir.IntType(32), k))
                    for k in range(4)]
            return context.make_tuple(builder, sig.return_type, vals)

        return sig, codegen

    @intrinsic
    def store4(typingctx, a, j, v0, v1, v2, v3):
        """a[4j .. 4j+3] = v0 .. v3 in one 16-byte store (``st.global.v4``)."""
        sig = _types.void(a, _types.int64, v0, v1, v2, v3)

        def codegen(context, builder, sig, args):
            aryty = sig.args[0]
            vty, ptr = _vector_pointer(context, builder, aryty, args[0], args[1])
            vec = ir.Constant(vty, ir.Undefined)
            for k in range(4):
                v = context.cast(builder, args[2 + k], sig.args[2 + k], aryty.dtype)
                vec = builder.insert_element(vec, v, ir.Constant(ir.IntType(32), k))
            builder.store(vec, ptr, align=16)
            return context.get_dummy_value()

        return sig, codegen

    def _word_pointer(context, builder, aryty, ary_value, wty, j):
        """Address of the j-th word of type wty over a C-contiguous array, in the global space."""
        ary = context.make_array(aryty)(context, builder, ary_value)
        base = builder.bitcast(ary.data, wty.as_pointer())
        return builder.addrspacecast(builder.gep(base, [j]), wty.as_pointer(1))

    @intrinsic
    def store_word(typingctx, a, j, w):
        """a viewed as words of w's width (four codes each): word j = w, one 32-bit store over
        8-bit codes, one 64-bit store over 16-bit codes; a's data must be aligned to a word."""
        sig = _types.void(a, _types.int64, w)

        def codegen(context, builder, sig, args):
            wty = context.get_data_type(sig.args[2])
            ptr = _word_pointer(context, builder, sig.args[0], args[0], wty, args[1])
            builder.store(args[2], ptr, align=wty.width // 8)
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def load_word(typingctx, a, j):
        """Bytes 4j .. 4j+3 of an 8-bit array in one 32-bit load (little-endian)."""
        sig = _types.uint32(a, _types.int64)

        def codegen(context, builder, sig, args):
            wty = ir.IntType(32)
            ptr = _word_pointer(context, builder, sig.args[0], args[0], wty, args[1])
            return builder.load(ptr, align=4)

        return sig, codegen

    def _cvt_f8x2(name):
        @intrinsic
        def cvt(typingctx, hi, lo):
            """Two float32 to float8 codes in one instruction (round to nearest even, finite
            saturation): the low byte is lo's code, the next byte hi's (PTX: ``d = {cvt(a),
            cvt(b)}``, a in the upper half)."""
            sig = _types.uint32(_types.float32, _types.float32)

            def codegen(context, builder, sig, args):
                fnty = ir.FunctionType(ir.IntType(16), [ir.FloatType(), ir.FloatType()])
                asm = ir.InlineAsm(fnty, f"cvt.rn.satfinite.{name}x2.f32 $0, $1, $2;",
                                   "=h,f,f")
                return builder.zext(builder.call(asm, args), ir.IntType(32))

            return sig, codegen

        return cvt

    @intrinsic
    def globaltimer(typingctx):
        """The GPU's nanosecond clock (``mov.u64 %globaltimer``), read anew at every call."""
        sig = _types.int64()

        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(ir.IntType(64), [])
            asm = ir.InlineAsm(fnty, "mov.u64 $0, %globaltimer;", "=l", side_effect=True)
            return builder.call(asm, [])

        return sig, codegen

    cvt_e4m3x2 = _cvt_f8x2("e4m3")
    cvt_e5m2x2 = _cvt_f8x2("e5m2")

    @cuda.jit(device=True, inline=True)
    def shfl_down_f32(v, off):
        return cuda.shfl_down_sync(0xFFFFFFFF, v, off)

    @cuda.jit(device=True, inline=True)
    def shfl_down_i64(v, off):
        return cuda.shfl_down_sync(0xFFFFFFFF, v, off)


@device_function
def div_exact(n, d, inv):
    """(n // d, n % d) for 0 <= n < 2**50 and d >= 1, without a division instruction: the float64
    product with inv = 1/d (rounded) is within one of the quotient, then one correction step."""
    q = int64(float64(n) * inv)
    r = n - q * d
    if r < 0:
        q -= 1
        r += d
    elif r >= d:
        q += 1
        r -= d
    return q, r


# ---------------------------------------------------------------------------------------------
# Element rules of the target families (scalar.py's rules, called as device functions)
# ---------------------------------------------------------------------------------------------


@device_function
def q_int(v, s, z, lo, hi, mask):
    """saturate(round(x / scale) + zp) as its stored code (scale division in float32)."""
    return int64(saturate_int(rint_f32(float32(v / s)), int64(z), lo, hi) & mask)


@device_function
def q_small_float_bits(v, s, z, has_zp):
    """x / scale (+ zp) in float32 as IEEE bits; a NaN x keeps its own bits (GPU arithmetic
    would return a canonical positive NaN; a CPU's NaN / scale + zp is that NaN)."""
    if v != v:
        return f32_to_bits(v)
    q = float32(v / s)
    if has_zp:
        q = float32(q + float32(z))
    return f32_to_bits(q)


@device_function
def q_float(v, s, z, has_zp, c, fnuz):
    """The small float code of x / scale (+ zp): scalar.encode_with."""
    return int64(encode_with(q_small_float_bits(v, s, z, has_zp), c, fnuz))


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

@device_function
def _int_consts(qp):
    return qp.lo, qp.hi, qp.mask


@device_function
def _int_one(v, s, z, k):
    return q_int(v, s, z, k[0], k[1], k[2])


@device_function
def _int_four(v0, v1, v2, v3, s0, s1, s2, s3, z0, z1, z2, z3, k):
    lo, hi, mask = k
    return (q_int(v0, s0, z0, lo, hi, mask), q_int(v1, s1, z1, lo, hi, mask),
            q_int(v2, s2, z2, lo, hi, mask), q_int(v3, s3, z3, lo, hi, mask))


@device_function
def _float_consts(qp):
    c = encode_consts(qp.ebits, qp.mbits, qp.bias, qp.max_code, qp.has_inf, qp.nan_style,
                      qp.saturate)
    return c, qp.has_zp == 1, qp.nan_style == NanStyle.NEG_ZERO


@device_function
def _float_one(v, s, z, k):
    return q_float(v, s, z, k[1], k[0], k[2])


@device_function
def _float_four(v0, v1, v2, v3, s0, s1, s2, s3, z0, z1, z2, z3, k):
    c, has_zp, fnuz = k
    return (q_float(v0, s0, z0, has_zp, c, fnuz), q_float(v1, s1, z1, has_zp, c, fnuz),
            q_float(v2, s2, z2, has_zp, c, fnuz), q_float(v3, s3, z3, has_zp, c, fnuz))


@device_function
def _fp8_consts(qp):
    c = encode_consts(qp.ebits, qp.mbits, qp.bias, qp.max_code, qp.has_inf, qp.nan_style,
                      qp.saturate)
    return c, qp.has_zp == 1, qp.ebits == 5


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


@device_function
def _pack8(c0, c1, c2, c3):
    """Four 8-bit codes in one 32-bit word, the first in the low byte (little-endian memory)."""
    return uint32((c0 & 0xFF) | ((c1 & 0xFF) << 8) | ((c2 & 0xFF) << 16) | ((c3 & 0xFF) << 24))


@device_function
def _pack16(c0, c1, c2, c3):
    """Four 16-bit codes in one 64-bit word."""
    return uint64((c0 & 0xFFFF) | ((c1 & 0xFFFF) << 16) | ((c2 & 0xFFFF) << 32)
                  | ((c3 & 0xFFFF) << 48))


TARGET_FAMILIES = {
    "int": (_int_consts, _int_one, _int_four),
    "float": (_float_consts, _float_one, _float_four),
    "fp8-cvt": (_fp8_consts, _fp8_one, _fp8_four),
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


def _quantize_rows(consts, one, four, pack):
    @cuda.jit
    def kernel(x, y, s, z, qp, rp):
        """x as rows of L contiguous elements on a 2-D grid: blockIdx.x and the thread pick four
        columns, blockIdx.y the first row; each thread keeps its columns and steps through
        the rows. The column's scale offset is found once per thread; a row's first scale by
        adds (the row's (outer, axis) index advances by a fixed step); scales are reloaded
        only when their index changes (a per-axis scale along the last axis: never).

        rp (:func:`qcore.kernels.cuda.row_params`) = (rows, L, D1, 1/D1, B, 1/B, SB, SP,
        pmul, Bc, 1/Bc, zstep, vec): row r is (p, d) = divmod(r, D1), its first scale
        ((p * pmul) * SB + d // B) * SP, and column c adds c // Bc (Bc = 1: a scale per
        column; Bc >= L: one scale per row). vec = 1: rows start 16-byte aligned and a block
        of scales never splits four elements, so they go four at a time."""
        k = consts(qp)
        rows, L, d1, inv_d1, bb, inv_b, sb, sp, pmul, bc, inv_bc, zstep, vec = rp
        gy = int64(cuda.gridDim.y)
        gq, gr = div_exact(gy, d1, inv_d1)  # the row step as (outer, axis) steps
        cstep = int64(cuda.gridDim.x) * int64(cuda.blockDim.x) * 4
        c = (int64(cuda.blockIdx.x) * int64(cuda.blockDim.x) + int64(cuda.threadIdx.x)) * 4
        while c < L:
            cb, _ = div_exact(c, bc, inv_bc)
            full = vec == 1 and c + 4 <= L
            r = int64(cuda.blockIdx.y)
            p, d = div_exact(r, d1, inv_d1)
            last = int64(-1)
            s0 = s1 = s2 = s3 = float32(0)
            z0 = z1 = z2 = z3 = z[0]
            v0 = v1 = v2 = v3 = float32(0)
            if full and r < rows:
                v0, v1, v2, v3 = load4(x, (r * L + c) >> 2)
            while r < rows:
                db = int64(0)
                if bb > 1:
                    db, _ = div_exact(d, bb, inv_b)
                elif d1 > 1:
                    db = d
                base = (p * pmul * sb + db) * sp
                i = r * L + c
                if full:
                    # the next row's four elements are loaded before this row's are converted:
                    # two 16-byte loads in flight per thread
                    w0, w1, w2, w3 = v0, v1, v2, v3
                    if r + gy < rows:
                        w0, w1, w2, w3 = load4(x, ((r + gy) * L + c) >> 2)
                    si = base + cb
                    if si != last:
                        last = si
                        if bc == 1:
                            s0, s1, s2, s3 = load4(s, si >> 2)
                            if zstep == 1:
                                z0, z1, z2, z3 = load4(z, si >> 2)
                        else:
                            s0 = s1 = s2 = s3 = s[si]
                            z0 = z1 = z2 = z3 = z[si * zstep]
                    c0, c1, c2, c3 = four(v0, v1, v2, v3, s0, s1, s2, s3, z0, z1, z2, z3, k)
                    store_word(y, i >> 2, pack(c0, c1, c2, c3))
                    v0, v1, v2, v3 = w0, w1, w2, w3
                else:  # element by element: rows not a multiple of 4 long, a short last vector
                    m = L - c
                    if m > 4:
                        m = 4
                    for e in range(m):
                        blk, _ = div_exact(c + e, bc, inv_bc)
                        si = base + blk
                        y[i + e] = one(x[i + e], s[si], z[si * zstep], k)
                r += gy
                p += gq
                d += gr
                if d >= d1:
                    d -= d1
                    p += 1
            c += cstep

    return kernel


def _build_quantize():
    kernels = {}
    for fam, (consts, one, four) in TARGET_FAMILIES.items():
        for width, pack in ((1, _pack8), (2, _pack16)):
            if width == 2 and fam != "int":
                continue
            kernels[("per-tensor", fam, width)] = _quantize_per_tensor(consts, one, four, pack)
            kernels[("rows", fam, width)] = _quantize_rows(consts, one, four, pack)
    return kernels


# ---------------------------------------------------------------------------------------------
# DequantizeLinear kernels (8-bit codes in, float32 / 16-bit float out)
# ---------------------------------------------------------------------------------------------


@device_function
def dq_element(code, s, z, xkind, signed, tab):
    """One 8-bit code (as 0..255) to float32: (x - zp) * scale in float32; decode-table
    types through their value, NaN codes to the CPU's NaN bits without GPU arithmetic."""
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
    store_word(y, j, _pack16(int64(half_bits(v0, okind)), int64(half_bits(v1, okind)),
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


def _dequantize_rows(out4, out1):
    @cuda.jit
    def kernel(x, y, s, z, dp, signed, tab, rp):
        """The rows and grid of :func:`_quantize_rows`' kernel, four codes per 32-bit load."""
        xkind = dp.xkind
        okind = dp.okind
        rows, L, d1, inv_d1, bb, inv_b, sb, sp, pmul, bc, inv_bc, zstep, vec = rp
        gy = int64(cuda.gridDim.y)
        gq, gr = div_exact(gy, d1, inv_d1)
        cstep = int64(cuda.gridDim.x) * int64(cuda.blockDim.x) * 4
        c = (int64(cuda.blockIdx.x) * int64(cuda.blockDim.x) + int64(cuda.threadIdx.x)) * 4
        while c < L:
            cb, _ = div_exact(c, bc, inv_bc)
            full = vec == 1 and c + 4 <= L
            r = int64(cuda.blockIdx.y)
            p, d = div_exact(r, d1, inv_d1)
            last = int64(-1)
            s0 = s1 = s2 = s3 = float32(0)
            z0 = z1 = z2 = z3 = z[0]
            word = uint32(0)
            if full and r < rows:
                word = load_word(x, (r * L + c) >> 2)
            while r < rows:
                db = int64(0)
                if bb > 1:
                    db, _ = div_exact(d, bb, inv_b)
                elif d1 > 1:
                    db = d
                base = (p * pmul * sb + db) * sp
                i = r * L + c
                if full:
                    following = word  # the next row's codes, loaded before these are converted
                    if r + gy < rows:
                        following = load_word(x, ((r + gy) * L + c) >> 2)
                    si = base + cb
                    if si != last:
                        last = si
                        if bc == 1:
                            s0, s1, s2, s3 = s[si], s[si + 1], s[si + 2], s[si + 3]
                            zi = si * zstep
                            z0, z1, z2, z3 = z[zi], z[zi + zstep], z[zi + 2 * zstep], \
                                z[zi + 3 * zstep]
                        else:
                            s0 = s1 = s2 = s3 = s[si]
                            z0 = z1 = z2 = z3 = z[si * zstep]
                    v0, v1, v2, v3 = _dq_four(word, s0, s1, s2, s3, z0, z1, z2, z3, xkind,
                                              signed, tab)
                    out4(y, i >> 2, v0, v1, v2, v3, okind)
                    word = following
                else:
                    m = L - c
                    if m > 4:
                        m = 4
                    for e in range(m):
                        blk, _ = div_exact(c + e, bc, inv_bc)
                        si = base + blk
                        y[i + e] = out1(dq_element(int64(x[i + e]), s[si], z[si * zstep],
                                                   xkind, signed, tab), okind)
                r += gy
                p += gq
                d += gr
                if d >= d1:
                    d -= d1
                    p += 1
            c += cstep

    return kernel


def _build_dequantize():
    kernels = {}
    for okind, (out4, out1) in (("f32", (_out_f32, _one_f32)), ("half", (_out_half, _one_half))):
        kernels[("per-tensor", okind)] = _dequantize_per_tensor(out4, out1)
        kernels[("rows", okind)] = _dequantize_rows(out4, out1)
    return kernels


# ---------------------------------------------------------------------------------------------
# DynamicQuantizeLinear's min/max: one pass, warp shuffles, one atomic per block
# ---------------------------------------------------------------------------------------------


@device_function
def order_key(v):
    """An int32 whose signed order is the float32 order of v (-0 just below +0); the host
    inverts it with :func:`key_values`."""
    b = int64(f32_to_bits(v))
    b = b - 0x100000000 if b >= 0x80000000 else b
    return int32(b ^ 0x7FFFFFFF if b < 0 else b)


def key_values(keys: np.ndarray) -> np.ndarray:
    """The float32 values of :func:`order_key` keys (the mapping is its own inverse)."""
    k = np.asarray(keys, np.int32)
    return np.where(k < 0, k ^ np.int32(0x7FFFFFFF), k).astype(np.int32).view(np.float32)


@device_function
def _fold(v, lo, hi, bad):
    """Fold one value: NaN counted and left out, +-Inf counted and kept."""
    if v != v:
        return lo, hi, bad + 1
    if v == math.inf or v == -math.inf:
        bad += 1
    if v < lo:
        lo = v
    if v > hi:
        hi = v
    return lo, hi, bad


@device_function
def _warp_fold(lo, hi, bad):
    off = 16
    while off > 0:
        o_lo = shfl_down_f32(lo, off)
        o_hi = shfl_down_f32(hi, off)
        o_bad = shfl_down_i64(bad, off)
        if o_lo < lo:
            lo = o_lo
        if o_hi > hi:
            hi = o_hi
        bad += o_bad
        off >>= 1
    return lo, hi, bad


@cuda.jit
def minmax_init_kernel(keys, bad):
    """The accumulators: min key of +Inf, max key of -Inf, no NaN/Inf."""
    if cuda.grid(1) == 0:
        keys[0] = order_key(float32(math.inf))
        keys[1] = order_key(float32(-math.inf))
        bad[0] = 0


@cuda.jit
def minmax_kernel(x, xkind, keys, bad_out):
    """(min, max, NaN/Inf count) of x in one pass: each thread folds its grid-stride share
    (float32 four at a time), warps fold by shuffles, the block's warps through shared memory,
    then thread 0 issues one atomic per quantity."""
    lo = float32(math.inf)
    hi = float32(-math.inf)
    bad = int64(0)
    n = x.size
    g = int64(cuda.grid(1))
    stride = int64(cuda.gridsize(1))
    if xkind == XKind.F32:
        nv = n >> 2
        j = g
        while j < nv:
            v0, v1, v2, v3 = load4(x, j)
            lo, hi, bad = _fold(float32(v0), lo, hi, bad)
            lo, hi, bad = _fold(float32(v1), lo, hi, bad)
            lo, hi, bad = _fold(float32(v2), lo, hi, bad)
            lo, hi, bad = _fold(float32(v3), lo, hi, bad)
            j += stride
        i = (nv << 2) + g
        if i < n:
            lo, hi, bad = _fold(load_x(x[i], xkind, PKind.F32), lo, hi, bad)
    else:
        i = g
        while i < n:
            lo, hi, bad = _fold(load_x(x[i], xkind, PKind.F32), lo, hi, bad)
            i += stride
    lo, hi, bad = _warp_fold(lo, hi, bad)
    s_lo = cuda.shared.array(_MAX_WARPS, float32)
    s_hi = cuda.shared.array(_MAX_WARPS, float32)
    s_bad = cuda.shared.array(_MAX_WARPS, int64)
    tid = cuda.threadIdx.x
    lane = tid & 31
    warp = tid >> 5
    if lane == 0:
        s_lo[warp] = lo
        s_hi[warp] = hi
        s_bad[warp] = bad
    cuda.syncthreads()
    if warp == 0:
        nwarps = (cuda.blockDim.x + 31) >> 5
        if lane < nwarps:
            lo = s_lo[lane]
            hi = s_hi[lane]
            bad = s_bad[lane]
        else:
            lo = float32(math.inf)
            hi = float32(-math.inf)
            bad = int64(0)
        lo, hi, bad = _warp_fold(lo, hi, bad)
        if tid == 0:
            if lo <= hi:  # the block saw a value that is not NaN
                cuda.atomic.min(keys, 0, order_key(lo))
                cuda.atomic.max(keys, 1, order_key(hi))
            if bad:
                cuda.atomic.add(bad_out, 0, bad)


@cuda.jit
def spin_kernel(ns):
    """Keep the GPU busy for ns nanoseconds (one thread): a benchmark enqueues it before its
    start event, so the launches it times are queued while the GPU is still busy and the
    events measure the GPU's work alone, not the host's time to issue it."""
    if cuda.grid(1) == 0:
        t0 = globaltimer()
        k = ns >> 2  # a bound, should the clock not advance: an iteration takes > 4 ns
        while globaltimer() - t0 < ns and k > 0:
            k -= 1


QUANTIZE_KERNELS = _build_quantize()
DEQUANTIZE_KERNELS = _build_dequantize()
