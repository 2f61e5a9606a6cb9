"""The integer QuantizeLinear segments: float32 x divided in float32 to an integer target.

A segment converts one run of a chunk (:class:`~qcore.kernels.walk.Run`) and returns how many
unusable scales it found. Scales and zero points are read block by block through the one block
walk (:func:`~qcore.kernels.walk.block_span`); each block is a plain loop of
:func:`~qcore.kernels.scalar.int_code_masked`, or, where :data:`EXPLICIT_VECTORS`, the same rule
written out as vector code (:mod:`qcore.kernels.bits`), which is faster than what LLVM makes of
the scalar loop. `EXPLICIT_VECTORS` is a module constant so that a compiled copy can bind it off
(:func:`qcore.kernels.bound`; the tests compare both). Loop indices are unsigned: numba then
emits no negative-index wraparound, and LLVM vectorises.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..config import CHUNK
from .bits import (
    EXPLICIT_VECTORS,
    INT_STEP,
    int_codes_32,
    int_codes_64,
    int_codes_128,
    int_codes_step,
    wide_vectors,
)
from .jit import INLINE, JIT
from .scalar import int_code_masked
from .walk import block_count, block_span

#: Zero points decoded at a time for a run with one per element (a fixed 4 KiB of scratch per
#: worker rather than a chunk's worth).
RUN_STEP = 1024
#: float32s of scratch seg_int takes: a zero point per block of 32 or more of a chunk, or per
#: element of RUN_STEP consecutive ones.
SCRATCH = max(CHUNK // 32 + 2, RUN_STEP)


@njit(**INLINE)
def _int_run(xs, ys, j0, j1, s0, zf, lo, hi, mask, vectors):
    """ys[j] for j0 <= j < j1, all with scale s0 and zero point zf: where `vectors` (the
    caller's EXPLICIT_VECTORS), INT_STEP at a time as written-out vector code, then 64 at a
    time (wide steps keep more loads and divisions in flight than LLVM's own vectorisation of
    the scalar loop); the rest one at a time."""
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
        ys[k] = int_code_masked(xs[k] / s0, zf, lo, hi, mask)


@njit(**INLINE)
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
            yb[k] = int_code_masked(xb[k] / s0, zf, lo, hi, mask)
        j += 32


@njit(**INLINE)
def _int_vector_block(xs, ys, j0, j1, s0, a, b, zi, mask):
    """A block of whole 32s by the written-out vector steps, its clamp bounds `a`, `b` and zero
    point `zi` made (see int_code_masked), in the widest steps that divide it (INT_STEP, 128,
    64 or 32 lanes: one wide step beats several narrow ones). (While loops: a stepped range
    costs a division per block, and blocks are short.)"""
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


@njit(**INLINE)
def int_zero_point(zv, k, wrap, top):
    """Zero point k as float32 (exact). zv holds the target's own codes viewed as int8 or int16
    (no conversion per call: blocked zero points are 1/32 of x); ml_dtypes keeps a sub-byte
    code in the low bits unextended. The view's value, plus the view's 2**8 or 2**16 where
    negative, is the code; less the target's `wrap` (2**bits) above its largest value `top`,
    the value. Float32 zero points (see cpu.reads_codes) are read as they are."""
    if zv.itemsize == 4:  # a constant of the compiled type: one branch is left
        return np.float32(zv[k])
    z = np.float32(zv[k])
    z = z + np.float32(1 << (8 * zv.itemsize)) if z < np.float32(0) else z
    return z - wrap if z > top else z


@njit(**INLINE)
def unusable(s):
    """1 when scale s is not positive and finite (NaN included), else 0."""
    return np.int64(0) if s > np.float32(0) and s < np.float32(np.inf) else np.int64(1)


@njit(**JIT)
def seg_int(run, qp, buf):
    """A scale per block, row or element; zero points as the target's codes (see
    int_zero_point; float32 on some layouts, see cpu.reads_codes). Returns how many of its
    blocks' scales were not usable; a scale per element is not checked here: a run reads a
    whole row of them, which other runs read again (cpu.checks_values).

    With blocks of 32 or more (where `buf`, SCRATCH float32s, holds a zero point per block),
    the blocks' scales are checked and their zero points decoded first, in one loop over the
    blocks, which keeps that scalar work out of the vector steps. A zero point per element is
    decoded into `buf` RUN_STEP at a time before those elements are converted, which keeps
    the conversion loop free of the decode without a float32 copy of the zero points."""
    wide_vectors()
    xs, ys, sv, zv, block, first = run
    n = xs.size
    lo = np.float32(qp.lo)
    hi = np.float32(qp.hi)
    mask = np.int32(qp.mask)
    wrap = np.float32(qp.mask + 1)
    if block == 0:  # scales checked before the call (see cpu.checks_values)
        if zv.itemsize == 4:  # float32 zero points (a constant of the compiled type)
            for j in range(n):
                ys[j] = int_code_masked(xs[j] / sv[j], int_zero_point(zv, j, wrap, hi), lo,
                                        hi, mask)
            return 0
        for j0 in range(0, n, RUN_STEP):
            j1 = min(n, j0 + RUN_STEP)
            xr, yr, sr, zr = xs[j0:j1], ys[j0:j1], sv[j0:j1], zv[j0:j1]
            for j in range(np.uint64(0), np.uint64(j1 - j0)):
                buf[j] = int_zero_point(zr, j, wrap, hi)
            for j in range(np.uint64(0), np.uint64(j1 - j0)):
                yr[j] = int_code_masked(xr[j] / sr[j], buf[j], lo, hi, mask)
        return 0
    bad = 0
    m = block_count(n, block, first)
    made = m <= buf.size  # every block's zero point made before the loop (blocks under 32 not)
    if made:
        for k in range(m):
            bad += unusable(sv[k])
            buf[k] = int_zero_point(zv, k, wrap, hi)
    whole = made and block <= 1024 and block % 32 == 0
    b = 0
    while b < m:
        j0, j1 = block_span(b, n, block, first)
        if whole and j1 - j0 == block:
            # whole blocks from here on: a loop whose block length LLVM knows is the same
            # every time, so the choice of vector step leaves the loop
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
            bad += unusable(s0)
            zf = int_zero_point(zv, b, wrap, hi)
        _int_run(xs, ys, j0, j1, s0, zf, lo, hi, mask, EXPLICIT_VECTORS)
        b += 1
    return bad


@njit(**JIT)
def seg_int_tensor(run, qp, buf):
    """seg_int for a per-tensor layout: one scale and one zero point for the whole run, so one
    _int_run and none of the block loops (a first call compiles in a fraction of seg_int's
    time). Takes no scratch (`buf` is empty). Returns 1 when the scale is not usable."""
    wide_vectors()
    xs, ys, sv, zv, _, _ = run
    hi = np.float32(qp.hi)
    zf = int_zero_point(zv, 0, np.float32(qp.mask + 1), hi)
    _int_run(xs, ys, 0, xs.size, sv[0], zf, np.float32(qp.lo), hi, np.int32(qp.mask),
             EXPLICIT_VECTORS)
    return unusable(sv[0])
