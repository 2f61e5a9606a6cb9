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

from functools import lru_cache

import numpy as np

from .cuda_device import VEC, div_exact
from .cuda_kernels import _IMPORT_ERROR, SIMULATOR, THREADS, device_function

if _IMPORT_ERROR is None:
    from numba import int64
else:  # pragma: no cover - numba without its CUDA target: nothing here runs
    int64 = np.int64

#: Rows a thread converts per step, all their loads issued first.
BATCH = 4

#: The walks a rows layout can take: the one-row walk, this module's batched walks
#: (:func:`batch_walk`: a chunk of rows per block; rows gdy apart; a chunk, pipelined), and
#: the flat walk (:func:`flat_walk`, where :func:`flat_params` allows; "batch" elsewhere).
WALKS = ("rows", "batch", "stride", "pipe", "flat")
BATCHED = ("batch", "stride", "pipe")


def row_params(lp, z_size: int, aligned: bool = True) -> tuple:
    """The rows view of a layout (LayoutParams lp) for the rows kernels: x as rows of
    contiguous elements, where each row's scales start at one index and step every Bc columns:
    (rows, L, D1, 1/D1, B, 1/B, SB, SP, pmul, Bc, 1/Bc, zstep, vec); see
    :func:`qcore.kernels.cuda_device.rows_walk`."""
    if lp.post == 1:  # along the last axis: a row per `pre`, blocks of `block` columns
        rows, length, d1, b, bc = lp.pre, lp.dim, 1, 1, lp.block
    else:  # an outer axis: a row per (pre, dim); one scale per row or one per column
        rows, length, d1, b = lp.pre * lp.dim, lp.post, lp.dim, lp.block
        bc = 1 if lp.scale_post > 1 else length
    vec = int(aligned and (length % 4 == 0 or rows == 1)
              and (bc == 1 or bc % 4 == 0 or bc >= length))
    return (int(rows), int(length), int(d1), 1.0 / d1, int(b), 1.0 / b, int(lp.scale_blocks),
            int(lp.scale_post), int(lp.scale_pre > 1), int(bc), 1.0 / bc, int(z_size > 1), vec)


def row_launch(rp: tuple, budget: int, per_block: int = 1) -> tuple[tuple[int, int], int]:
    """(grid, threads) of a 2-D rows kernel over the rows view rp: threads across a row's
    four-element vectors in whole warps (at most THREADS), enough blocks along x to cover a
    row, then blocks along y over the rows (at least `per_block` rows each), `budget` blocks
    at most."""
    rows, length = rp[0], rp[1]
    warp = 1 if SIMULATOR else 32
    vectors = (length + 3) // 4
    threads = max(min(THREADS, (vectors + warp - 1) // warp * warp), 1)
    gx = max(1, min((vectors + threads - 1) // threads, budget))
    gy = max(1, min(-(-rows // per_block), budget // gx, 65535))
    return (gx, gy), threads


@lru_cache(maxsize=512)
def rows_kernel(lp, z_size: int, walk: str, budget: int):
    """(kernel layout, grid, threads, params) of a rows layout under `walk`: "flat-vec" where
    `walk` is "flat" and :func:`flat_params` allows (params: (q, 1/q, zstep); a 1-D grid),
    "WALK-col" / "WALK-vec" where `walk` is a batched walk ("flat" falling back to "batch")
    and :func:`batch_mode` allows, else "rows" (the one-row walk); params otherwise the rows
    view. Grids of at most `budget` blocks."""
    if walk not in WALKS:
        raise ValueError(f"walk must be one of {WALKS}, not {walk!r}")
    rp = row_params(lp, z_size)
    if walk == "flat":
        fp = flat_params(rp)
        if fp is not None:
            vectors = (rp[0] * rp[1] + 3) // 4
            return "flat-vec", max(1, min(-(-vectors // THREADS), budget)), THREADS, fp
        walk = "batch"
    mode = batch_mode(rp) if walk != "rows" else None
    if mode is None:
        return ("rows",) + row_launch(rp, budget) + (rp,)
    return (f"{walk}-{mode}",) + row_launch(rp, budget, BATCH) + (rp,)


def batch_mode(rp: tuple) -> str | None:
    """``"col"``, ``"vec"`` or None (the one-row walk only) for the rows view rp of
    :func:`row_params`."""
    rows, length, d1, _, b, _, _, _, pmul, bc, _, _, vec = rp
    if vec != 1 or length % VEC:
        return None
    if bc == 1:
        return "col" if d1 == 1 and pmul == 0 else None
    if b == 1 and (bc % VEC == 0 or bc >= length):
        return "vec"
    return None


def batch_walk(blank, load, reload4, put4, walk: str = "batch"):
    """The batched walk, given how one operator reads, converts and writes (the parts of
    :func:`qcore.kernels.cuda_device.rows_walk`): ``(walk_col, walk_vec)``, each called as
    ``walk(x, y, s, z, k, rp, t, tx, by, gdy)`` for a thread of index t along x (tx threads
    along x) in block by of gdy along y.

    `walk` "batch": block by takes the rows [by * chunk, (by + 1) * chunk), chunk =
    ceil(rows / gdy), a thread BATCH consecutive rows at a time; "stride": block by takes the
    rows by, by + gdy, ..., BATCH of them at a time (the blocks at one moment read neighbouring
    rows); "pipe": as "batch", with the next batch's loads (x, scales, zero points) issued before
    the current batch converts. A row r = p * D1 + d has its first scale pb + d * SP with
    pb = p * pmul * SB * SP; the row step (gq, gr) = divmod(step, D1) moves both by adds."""
    pipelined = walk == "pipe"
    interleaved = walk == "stride"

    @device_function
    def span(rows, by, gdy):
        """(first row, end, step) of block by's rows."""
        if interleaved:
            return by, rows, gdy
        chunk = (rows + gdy - 1) // gdy  # once per thread, before any loop
        r0 = by * chunk
        r1 = r0 + chunk
        if r1 > rows:
            r1 = rows
        return r0, r1, int64(1)

    @device_function
    def count(r, r1, rs):
        """How many of rows r, r + rs, ..., r + (BATCH - 1) rs lie before r1."""
        n = int64(0)
        if r < r1:
            n += 1
        if r + rs < r1:
            n += 1
        if r + 2 * rs < r1:
            n += 1
        if r + 3 * rs < r1:
            n += 1
        return n

    @device_function
    def fetch_col(x, j, jl, left):
        """The x vectors j, j + jl, ... of the batch's rows that exist (left of them)."""
        x0 = x1 = x2 = x3 = blank()
        if left > 0:
            x0 = load(x, j)
        if left > 1:
            x1 = load(x, j + jl)
        if left > 2:
            x2 = load(x, j + 2 * jl)
        if left > 3:
            x3 = load(x, j + 3 * jl)
        return x0, x1, x2, x3

    @device_function
    def put_col(y, j, jl, left, xs, s0, s1, s2, s3, z0, z1, z2, z3, k):
        x0, x1, x2, x3 = xs
        put4(y, j, x0, s0, s1, s2, s3, z0, z1, z2, z3, k)
        if left > 1:
            put4(y, j + jl, x1, s0, s1, s2, s3, z0, z1, z2, z3, k)
        if left > 2:
            put4(y, j + 2 * jl, x2, s0, s1, s2, s3, z0, z1, z2, z3, k)
        if left > 3:
            put4(y, j + 3 * jl, x3, s0, s1, s2, s3, z0, z1, z2, z3, k)

    @device_function
    def walk_col(x, y, s, z, k, rp, t, tx, by, gdy):
        rows, L, d1, inv_d1, bb, inv_b, sb, sp, pmul, bc, inv_bc, zstep, vec = rp
        r0, r1, rs = span(rows, by, gdy)
        jl = (L >> 2) * rs  # from one of a thread's rows to its next, in vectors
        c = t * VEC
        while c < L:
            z0 = z1 = z2 = z3 = z[0]
            s0, s1, s2, s3, z0, z1, z2, z3 = reload4(s, z, c, zstep, z0, z1, z2, z3)
            r = r0
            j = (r * L + c) >> 2
            if pipelined:
                xs = fetch_col(x, j, jl, count(r, r1, rs))
                while r < r1:
                    left = count(r, r1, rs)
                    following = fetch_col(x, j + BATCH * jl, jl,
                                          count(r + BATCH * rs, r1, rs))
                    put_col(y, j, jl, left, xs, s0, s1, s2, s3, z0, z1, z2, z3, k)
                    xs = following
                    r += BATCH * rs
                    j += BATCH * jl
            else:
                while r < r1:
                    left = count(r, r1, rs)
                    xs = fetch_col(x, j, jl, left)
                    put_col(y, j, jl, left, xs, s0, s1, s2, s3, z0, z1, z2, z3, k)
                    r += BATCH * rs
                    j += BATCH * jl
            c += tx * VEC

    @device_function
    def step(pb, d, d1, gqp, gr, pstep):
        """(pb, d) of the row step rows further: d + gr, pb + gq * pstep, one carry."""
        d += gr
        pb += gqp
        if d >= d1:
            d -= d1
            pb += pstep
        return pb, d

    @device_function
    def fetch_vec(x, s, z, j, jl, left, pb, d, d1, sp, gqp, gr, pstep, zstep, zv, sv):
        """fetch_col's vectors, with their rows' scales and zero points (one per row), and
        (pb, d) stepped past the batch's rows."""
        xs = fetch_col(x, j, jl, left)
        i0 = pb + d * sp
        pb, d = step(pb, d, d1, gqp, gr, pstep)
        i1 = pb + d * sp
        pb, d = step(pb, d, d1, gqp, gr, pstep)
        i2 = pb + d * sp
        pb, d = step(pb, d, d1, gqp, gr, pstep)
        i3 = pb + d * sp
        pb, d = step(pb, d, d1, gqp, gr, pstep)
        s0 = s1 = s2 = s3 = sv
        z0 = z1 = z2 = z3 = zv
        if left > 0:
            s0 = s[i0]
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
        return xs, (s0, s1, s2, s3), (z0, z1, z2, z3), pb, d

    @device_function
    def put_vec(y, j, jl, left, xs, ss, zs, k):
        x0, x1, x2, x3 = xs
        s0, s1, s2, s3 = ss
        z0, z1, z2, z3 = zs
        put4(y, j, x0, s0, s0, s0, s0, z0, z0, z0, z0, k)
        if left > 1:
            put4(y, j + jl, x1, s1, s1, s1, s1, z1, z1, z1, z1, k)
        if left > 2:
            put4(y, j + 2 * jl, x2, s2, s2, s2, s2, z2, z2, z2, z2, k)
        if left > 3:
            put4(y, j + 3 * jl, x3, s3, s3, s3, s3, z3, z3, z3, z3, k)

    @device_function
    def walk_vec(x, y, s, z, k, rp, t, tx, by, gdy):
        rows, L, d1, inv_d1, bb, inv_b, sb, sp, pmul, bc, inv_bc, zstep, vec = rp
        r0, r1, rs = span(rows, by, gdy)
        pstep = pmul * sb * sp
        p0, d0 = div_exact(r0, d1, inv_d1)
        gq, gr = div_exact(rs, d1, inv_d1)  # the row step as (outer, axis) steps
        gqp = gq * pstep
        zv = z[0]
        sv = s[0]
        jl = (L >> 2) * rs
        c = t * VEC
        while c < L:
            cb, _ = div_exact(c, bc, inv_bc)
            r = r0
            j = (r * L + c) >> 2
            pb = p0 * pstep + cb  # a row's scales start at pb + d * SP (the column's added)
            d = d0
            if pipelined:
                xs, ss, zs, pb, d = fetch_vec(x, s, z, j, jl, count(r, r1, rs), pb, d, d1, sp,
                                              gqp, gr, pstep, zstep, zv, sv)
                while r < r1:
                    left = count(r, r1, rs)
                    nxs, nss, nzs, pb, d = fetch_vec(x, s, z, j + BATCH * jl, jl,
                                                     count(r + BATCH * rs, r1, rs), pb, d, d1,
                                                     sp, gqp, gr, pstep, zstep, zv, sv)
                    put_vec(y, j, jl, left, xs, ss, zs, k)
                    xs, ss, zs = nxs, nss, nzs
                    r += BATCH * rs
                    j += BATCH * jl
            else:
                while r < r1:
                    left = count(r, r1, rs)
                    xs, ss, zs, pb, d = fetch_vec(x, s, z, j, jl, left, pb, d, d1, sp, gqp, gr,
                                                  pstep, zstep, zv, sv)
                    put_vec(y, j, jl, left, xs, ss, zs, k)
                    r += BATCH * rs
                    j += BATCH * jl
            c += tx * VEC

    return walk_col, walk_vec


def flat_params(rp: tuple) -> tuple | None:
    """(q, 1/q, zstep) where every element i of the rows view rp has the scale i // q and four
    elements from a multiple of four share it — blocked along the last axis by a multiple of
    four that divides the rows (q = the block), per-axis along the first of two axes (q = the
    row) — else None. Such layouts run as one flat sequence of four-element vectors
    (:func:`flat_walk`)."""
    rows, length, d1, _, b, _, sb, sp, pmul, bc, _, zstep, vec = rp
    if vec != 1 or length % VEC or sp != 1:
        return None
    if d1 == 1 and pmul == 1 and bc % VEC == 0 and sb * bc == length:
        q = bc
    elif d1 == rows and pmul == 0 and b == 1 and bc >= length:
        q = length
    else:
        return None
    return int(q), 1.0 / q, int(zstep)


def flat_walk(blank, load, put4):
    """The flat walk: ``walk(x, y, s, z, k, fp, j, stride, nv)`` for a thread starting at
    vector j of nv, stepping by stride, as the per-tensor kernels do, with each vector's scale
    and zero point (index 4j // q, fp = :func:`flat_params`) loaded with it and the next step's
    vector, scale and zero point loaded before the current ones convert. The scale index
    follows by adds: (sq, sr) = divmod(4 stride, q), one carry per step."""

    @device_function
    def walk(x, y, s, z, k, fp, j, stride, nv):
        q, inv_q, zstep = fp
        si, rem = div_exact(j * VEC, q, inv_q)
        sq, sr = div_exact(stride * VEC, q, inv_q)
        v = blank()
        sv = s[0]
        zv = z[0]
        if j < nv:
            v = load(x, j)
            sv = s[si]
            zv = z[si * zstep]
        while j < nv:
            j2 = j + stride
            si += sq
            rem += sr
            if rem >= q:
                rem -= q
                si += 1
            w = v  # the next step's vector, scale and zero point, loaded before these convert
            sw = sv
            zw = zv
            if j2 < nv:
                w = load(x, j2)
                sw = s[si]
                zw = z[si * zstep]
            put4(y, j, v, sv, sv, sv, sv, zv, zv, zv, zv, k)
            v = w
            sv = sw
            zv = zw
            j = j2

    return walk
