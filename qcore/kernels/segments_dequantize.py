"""The DequantizeLinear segments: every one runs the rule over a run
(:class:`~qcore.kernels.walk.Run`), block by block through the one block walk:
:func:`~qcore.kernels.scalar.dequantize_f32` to float32, else
:func:`~qcore.kernels.scalar.dequantize_value`.

Three families, so that a first call compiles only the loops it needs: 8/16-bit integers to
float32 (:func:`seg_numeric`), sub-byte integers and small floats to float32 through the decode
table (:func:`seg_table`), and everything else (:func:`seg_generic`: int32, 16-bit outputs).
The first two make the rule's x kind a constant, so each loop is the bare arithmetic (and a
first call compiles none of the 16-bit output rounding); they ignore dp, whose kinds chose
their family. Each returns 0 (the scales were checked before the
call).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .bits import wide_vectors
from .jit import INLINE, JIT
from .params import DXKind, PKind
from .scalar import dequantize_f32, dequantize_value
from .walk import block_count, block_span


@njit(**INLINE)
def _to_f32(xv, z, s, xkind, okind, tab):
    """dequantize_f32 in dequantize_value's signature (okind is PKind.F32)."""
    return dequantize_f32(xv, z, s, xkind, tab)


@njit(**INLINE)
def _dequantize_run(rule, run, xkind, okind, tab):
    """ys[j] = rule(xs[j], its zero point, its scale, xkind, okind, tab), per element
    (block 0) or per block; `rule` is dequantize_value or _to_f32."""
    xs, ys, sv, zv, block, first = run
    n = xs.size
    if block == 0:
        for j in range(n):
            ys[j] = rule(xs[j], zv[j], sv[j], xkind, okind, tab)
        return
    for b in range(block_count(n, block, first)):
        j0, j1 = block_span(b, n, block, first)
        s0 = sv[b]
        z0 = zv[b]
        for j in range(np.uint64(j0), np.uint64(j1)):
            ys[j] = rule(xs[j], z0, s0, xkind, okind, tab)


@njit(**JIT)
def seg_numeric(run, dp, tab):
    """8/16-bit integers to float32: the difference is exact in float32."""
    wide_vectors()
    _dequantize_run(_to_f32, run, DXKind.NUMERIC, PKind.F32, tab)
    return 0


@njit(**JIT)
def seg_table(run, dp, tab):
    """Sub-byte integers and small floats (their uint8 codes) to float32 through the decode
    table."""
    wide_vectors()
    _dequantize_run(_to_f32, run, DXKind.TABLE, PKind.F32, tab)
    return 0


# Bound per compiled copy of seg_generic (see cpu.GENERIC): how x is read and the
# output type.
_DXKIND = DXKind.I32
_OKIND = PKind.F32


def seg_generic(run, dp, tab):
    """Decode tables (sub-byte integers, small floats), int32 and 16-bit outputs. A long run of
    bytes with one scale and one zero point looks each byte's result up in a table of the
    256 made first. A template: the kinds are bound per compiled copy (`_DXKIND`, `_OKIND`),
    so a first call compiles one combination's loops."""
    wide_vectors()
    xs, ys, sv, zv, block, first = run
    n = xs.size
    if block >= first + n and xs.itemsize == 1 and n >= 1024:
        out = np.empty(256, ys.dtype)
        every = np.arange(256).astype(np.uint8).view(xs.dtype)  # each byte as x's type
        for code in range(256):
            out[code] = dequantize_value(every[code], zv[0], sv[0], _DXKIND, _OKIND, tab)
        codes = xs.view(np.uint8)
        for j in range(n):
            ys[j] = out[codes[j]]
        return 0
    _dequantize_run(dequantize_value, run, _DXKIND, _OKIND, tab)
    return 0
