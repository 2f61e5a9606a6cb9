"""The rows kernels' batched walk: several rows' loads in flight per thread, scales by adds.

:func:`qcore.kernels.cuda_device.rows_walk` (the ``"rows"`` walk) steps each thread through
its rows one at a time, with the next row's load issued before the current row converts: two
loads in flight per thread, and a blocked layout's scale read after its row's x arrived. This
module's walk (``"batch"``) gives each block along y one contiguous chunk of rows; each thread
keeps four columns and takes its rows ``BATCH`` at a time, issuing all their x loads and scale
loads before it converts the first, so ``BATCH`` vectors and their scales are in flight per
thread. A row's scale offset follows from the previous row's by adds (no multiplication or
division per row), and consecutive rows of a thread are ``L`` elements apart.

It serves the two layouts the rows family spends its time in (:func:`batch_mode`):

- ``"col"``: a scale per column, the same for every row (per-axis along the last axis); the
  four scales and zero points of a thread's columns are read once, into registers.
- ``"vec"``: one scale per four-element vector of a row, the row's own (blocked along the last
  axis by a multiple of four; per-axis along an outer axis, one scale per row).

Other rows layouts (blocked along an outer axis, blocks of a size not a multiple of four, rows
whose length is not a multiple of four or data not 16-byte aligned) take the ``"rows"`` walk.
"""

from __future__ import annotations

import numpy as np

from .cuda_device import VEC, div_exact
from .cuda_kernels import _IMPORT_ERROR, device_function

if _IMPORT_ERROR is None:
    from numba import int64
else:  # pragma: no cover - numba without its CUDA target: nothing here runs
    int64 = np.int64

#: Rows a thread converts per step, all their loads issued first.
BATCH = 4

#: The walks a rows layout can take: the one-row walk and the batched walk of this module.
WALKS = ("rows", "batch")


def batch_mode(rp: tuple) -> str | None:
    """``"col"``, ``"vec"`` or None (the one-row walk only) for the rows view rp of
    :func:`qcore.kernels.cuda.row_params`."""
    rows, length, d1, _, b, _, _, _, pmul, bc, _, _, vec = rp
    if vec != 1 or length % VEC:
        return None
    if bc == 1:
        return "col" if d1 == 1 and pmul == 0 else None
    if b == 1 and (bc % VEC == 0 or bc >= length):
        return "vec"
    return None


def batch_walk(blank, load, reload4, put4):
    """The batched walk, given how one operator reads, converts and writes (the parts of
    :func:`qcore.kernels.cuda_device.rows_walk`): ``(walk_col, walk_vec)``, each called as
    ``walk(x, y, s, z, k, rp, t, tx, by, gdy)`` for a thread of index t along x (tx threads
    along x) in block by of gdy along y. Block by takes rows [by * chunk, (by + 1) * chunk),
    chunk = ceil(rows / gdy); a row r = p * D1 + d has its first scale pb + d * SP with
    pb = p * pmul * SB * SP, both stepped by adds."""

    @device_function
    def walk_col(x, y, s, z, k, rp, t, tx, by, gdy):
        rows, L, d1, inv_d1, bb, inv_b, sb, sp, pmul, bc, inv_bc, zstep, vec = rp
        chunk = (rows + gdy - 1) // gdy  # once per thread, before any loop
        r0 = by * chunk
        r1 = r0 + chunk
        if r1 > rows:
            r1 = rows
        c = t * VEC
        while c < L:
            z0 = z1 = z2 = z3 = z[0]
            s0, s1, s2, s3, z0, z1, z2, z3 = reload4(s, z, c, zstep, z0, z1, z2, z3)
            r = r0
            j = (r * L + c) >> 2
            jl = L >> 2  # one row, in vectors
            while r < r1:
                left = r1 - r
                x0 = load(x, j)
                x1 = x2 = x3 = blank()
                if left > 1:
                    x1 = load(x, j + jl)
                if left > 2:
                    x2 = load(x, j + 2 * jl)
                if left > 3:
                    x3 = load(x, j + 3 * jl)
                put4(y, j, x0, s0, s1, s2, s3, z0, z1, z2, z3, k)
                if left > 1:
                    put4(y, j + jl, x1, s0, s1, s2, s3, z0, z1, z2, z3, k)
                if left > 2:
                    put4(y, j + 2 * jl, x2, s0, s1, s2, s3, z0, z1, z2, z3, k)
                if left > 3:
                    put4(y, j + 3 * jl, x3, s0, s1, s2, s3, z0, z1, z2, z3, k)
                r += BATCH
                j += BATCH * jl
            c += tx * VEC

    @device_function
    def walk_vec(x, y, s, z, k, rp, t, tx, by, gdy):
        rows, L, d1, inv_d1, bb, inv_b, sb, sp, pmul, bc, inv_bc, zstep, vec = rp
        chunk = (rows + gdy - 1) // gdy  # once per thread, before any loop
        r0 = by * chunk
        r1 = r0 + chunk
        if r1 > rows:
            r1 = rows
        pstep = pmul * sb * sp
        p0, d0 = div_exact(r0, d1, inv_d1)
        zv = z[0]
        c = t * VEC
        while c < L:
            cb, _ = div_exact(c, bc, inv_bc)
            r = r0
            d = d0
            pb = p0 * pstep + cb  # the row's first scale, this column's block added
            j = (r * L + c) >> 2
            jl = L >> 2
            while r < r1:
                left = r1 - r
                x0 = load(x, j)
                x1 = x2 = x3 = blank()
                if left > 1:
                    x1 = load(x, j + jl)
                if left > 2:
                    x2 = load(x, j + 2 * jl)
                if left > 3:
                    x3 = load(x, j + 3 * jl)
                # the four rows' scale offsets, by adds: (p, d) steps to (p, d + 1) or (p + 1, 0)
                i0 = pb + d * sp
                d += 1
                if d == d1:
                    d = int64(0)
                    pb += pstep
                i1 = pb + d * sp
                d += 1
                if d == d1:
                    d = int64(0)
                    pb += pstep
                i2 = pb + d * sp
                d += 1
                if d == d1:
                    d = int64(0)
                    pb += pstep
                i3 = pb + d * sp
                d += 1
                if d == d1:
                    d = int64(0)
                    pb += pstep
                s0 = s[i0]
                s1 = s2 = s3 = s0
                z0 = z1 = z2 = z3 = zv
                if zstep == 1:
                    z0 = z[i0]
                if left > 1:
                    s1 = s[i1]
                    if zstep == 1:
                        z1 = z[i1]
                if left > 2:
                    s2 = s[i2]
                    if zstep == 1:
                        z2 = z[i2]
                if left > 3:
                    s3 = s[i3]
                    if zstep == 1:
                        z3 = z[i3]
                put4(y, j, x0, s0, s0, s0, s0, z0, z0, z0, z0, k)
                if left > 1:
                    put4(y, j + jl, x1, s1, s1, s1, s1, z1, z1, z1, z1, k)
                if left > 2:
                    put4(y, j + 2 * jl, x2, s2, s2, s2, s2, z2, z2, z2, z2, k)
                if left > 3:
                    put4(y, j + 3 * jl, x3, s3, s3, s3, s3, z3, z3, z3, z3, k)
                r += BATCH
                j += BATCH * jl
            c += tx * VEC

    return walk_col, walk_vec
