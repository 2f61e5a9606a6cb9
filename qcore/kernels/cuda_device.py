"""Device helpers the specialised numba.cuda kernels share.

Wide accesses: one 16-byte load or store of four elements (``ld.global.v4`` /
``st.global.v4``, :func:`load4`, :func:`store4`), four codes packed into one 32-bit word
(64-bit for 16-bit codes) and stored on the code array itself (:func:`store_word`), four 8-bit
codes read in one 32-bit load (:func:`load_word`). The float8 conversion
``cvt.rn.satfinite.{e4m3,e5m2}x2.f32`` (compute capability >= 8.9), warp shuffles, the GPU's
nanosecond clock, and :func:`div_exact`: a quotient and remainder from a float64 reciprocal
with one correction step, so that no kernel loop holds an integer division instruction.
The rows kernels of both operators share one walk, :func:`rows_walk`.

Under the CUDA simulator the 16-byte loads and stores, the shuffles and the conversion are
plain Python stand-ins (the float8 conversion is never selected there).
"""

from __future__ import annotations

import time

import numpy as np

from .cuda_kernels import _IMPORT_ERROR, SIMULATOR, cuda, device_function

if _IMPORT_ERROR is None:
    from numba import float32, float64, int64, uint32, uint64
else:  # pragma: no cover - numba without its CUDA target: nothing here runs
    float32 = float64 = int64 = uint32 = uint64 = np.float32

#: Elements per thread and per vector access.
VEC = 4

# ---------------------------------------------------------------------------------------------
# Wide loads and stores, the float8 conversion, the clock: intrinsics on a GPU
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


@device_function
def row_first_scale(p, d, d1, bb, inv_b, sb, sp, pmul):
    """The first scale of row (p, d) of a rows layout: ((p * pmul) * SB + d // B) * SP
    (:func:`qcore.kernels.cuda_rows.row_params`)."""
    db = int64(0)
    if bb > 1:
        db, _ = div_exact(d, bb, inv_b)
    elif d1 > 1:
        db = d
    return (p * pmul * sb + db) * sp


@device_function
def next_row(r, p, d, gy, gq, gr, d1):
    """Row r + gy as (r, p, d) with (p, d) = divmod(r, D1), by adds: (gq, gr) = divmod(gy, D1)."""
    r += gy
    p += gq
    d += gr
    if d >= d1:
        d -= d1
        p += 1
    return r, p, d


def rows_walk(blank, load, reload4, put4, put1):
    """The walk of the rows kernels (QuantizeLinear's and DequantizeLinear's), given how one
    operator reads, converts and writes: ``walk(x, y, s, z, k, rp, t, tx, r0, gy)`` for a thread
    of index t along x (tx threads along x) and block r0 along y (gy blocks along y); k holds
    the operator's constants.

    x is rows of L contiguous elements (rp = :func:`qcore.kernels.cuda_rows.row_params` = (rows, L,
    D1, 1/D1, B, 1/B, SB, SP, pmul, Bc, 1/Bc, zstep, vec)): each thread keeps four columns and
    steps through the rows r0, r0 + gy, ...; row r is (p, d) = divmod(r, D1), its first scale
    ((p * pmul) * SB + d // B) * SP (:func:`row_first_scale`, then by adds), and column c adds
    c // Bc (Bc = 1: a scale per column; Bc >= L: one scale per row), found once per thread.
    The scales s0..s3 and zero points z0..z3 in registers are those of scale index ``last``,
    reloaded only when the index changes (a per-axis scale along the last axis: never).
    vec = 1: rows start 16-byte aligned and a block of scales never splits four elements, so
    they go four at a time, the next row's loaded before this row's are converted; else (a
    short last vector too) element by element.

    The operator's part: ``blank()`` / ``load(x, j)`` the empty and the j-th four-element read
    of x; ``reload4(s, z, si, zstep, z0, z1, z2, z3)`` the four scales and zero points of
    columns si .. si+3 (Bc = 1); ``put4(y, j, xv, s0, s1, s2, s3, z0, z1, z2, z3, k)`` converts
    a read and writes y's j-th four elements; ``put1(x, y, i, sv, zv, k)`` element i alone."""

    @device_function
    def walk(x, y, s, z, k, rp, t, tx, r0, gy):
        rows, L, d1, inv_d1, bb, inv_b, sb, sp, pmul, bc, inv_bc, zstep, vec = rp
        gq, gr = div_exact(gy, d1, inv_d1)  # the row step as (outer, axis) steps
        cstep = tx * VEC
        c = t * VEC
        while c < L:
            cb, _ = div_exact(c, bc, inv_bc)
            full = vec == 1 and c + VEC <= L
            r = r0
            p, d = div_exact(r, d1, inv_d1)
            last = int64(-1)
            s0 = s1 = s2 = s3 = float32(0)
            z0 = z1 = z2 = z3 = z[0]
            xv = blank()
            if full and r < rows:
                xv = load(x, (r * L + c) >> 2)
            while r < rows:
                base = row_first_scale(p, d, d1, bb, inv_b, sb, sp, pmul)
                i = r * L + c
                if full:
                    following = xv  # the next row's, loaded before this row's are converted
                    if r + gy < rows:
                        following = load(x, ((r + gy) * L + c) >> 2)
                    si = base + cb
                    if si != last:
                        last = si
                        if bc == 1:
                            s0, s1, s2, s3, z0, z1, z2, z3 = reload4(s, z, si, zstep,
                                                                     z0, z1, z2, z3)
                        else:
                            s0 = s1 = s2 = s3 = s[si]
                            z0 = z1 = z2 = z3 = z[si * zstep]
                    put4(y, i >> 2, xv, s0, s1, s2, s3, z0, z1, z2, z3, k)
                    xv = following
                else:
                    m = L - c
                    if m > VEC:
                        m = VEC
                    for e in range(m):
                        blk, _ = div_exact(c + e, bc, inv_bc)
                        si = base + blk
                        put1(x, y, i + e, s[si], z[si * zstep], k)
                r, p, d = next_row(r, p, d, gy, gq, gr, d1)
            c += cstep

    return walk


@device_function
def pack8(c0, c1, c2, c3):
    """Four 8-bit codes in one 32-bit word, the first in the low byte (little-endian memory)."""
    return uint32((c0 & 0xFF) | ((c1 & 0xFF) << 8) | ((c2 & 0xFF) << 16) | ((c3 & 0xFF) << 24))


@device_function
def pack16(c0, c1, c2, c3):
    """Four 16-bit codes in one 64-bit word."""
    return uint64((c0 & 0xFFFF) | ((c1 & 0xFFFF) << 16) | ((c2 & 0xFFFF) << 32)
                  | ((c3 & 0xFFFF) << 48))


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
