"""The layout's index map as a numba walk: the flat elements of x, run by run, with their scales.

x is viewed as (pre, dim, post) around the axis and the scales as (scale_pre, scale_blocks,
scale_post) (see :mod:`qcore.layout` and :class:`qcore.kernels.params.LayoutParams`). Instead of
computing a scale index per element, a walker cuts a range of elements into runs whose scales
are read simply (one scale, consecutive scales, or one scale per `block` elements), so the inner
loops are plain and vectorise. The CPU kernels and the metrics reductions use this one walk, and
within a run the one block walk (:func:`block_count`, :func:`block_span`). The walk is the index
map of :func:`qcore.layout.Layout.scale_index`, cut into runs; tests/test_layout.py checks the two
agree on every element.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from numba import njit

from .jit import INLINE, JIT


class Run(NamedTuple):
    """One run of a chunk as a segment function converts it: x and y of the run, its scales
    and zero points (from the run's first), and how elements map to them: element j has
    sv[(first + j) // block], or sv[j] when block == 0 (see :func:`next_segment`)."""

    xs: Any
    ys: Any
    sv: Any
    zv: Any
    block: int
    first: int


@njit(**INLINE)
def block_count(n, block, first):
    """How many blocks of `block` elements n elements touch, the first `first` elements into
    its block."""
    return (first + n + block - 1) // block


@njit(**INLINE)
def block_span(b, n, block, first):
    """(j0, j1): the elements of block b among n elements that start `first` elements into
    block 0 (every block of a run is whole but its first and last)."""
    j0 = b * block - first
    j1 = j0 + block
    return (j0 if j0 > 0 else 0), (j1 if j1 < n else n)


@njit(**JIT)
def locate(i0, lp):
    """(p, d, q) coordinates of flat element i0 in the (pre, dim, post) view."""
    plane = lp.dim * lp.post
    p = i0 // plane
    r = i0 - p * plane
    d = r // lp.post
    return p, d, r - d * lp.post


@njit(**JIT)
def next_segment(p, d, q, remaining, lp):
    """The next run of elements, starting at (p, d, q), whose scales are read simply.

    Returns (run, start, count, block, first, p, d, q): the run's elements use the `count`
    scales from `start`; element t has scale start + (first + t) // block, or start + t when
    block == 0 (per-axis along the last axis). (p, d, q) is advanced past the run.
    """
    dim = lp.dim
    post = lp.post
    block = lp.block
    sblocks = lp.scale_blocks
    spost = lp.scale_post
    spre_step = 1 if lp.scale_pre > 1 else 0
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


def single_run_block(lp, n: int) -> int:
    """B > 0 where element j of x (n elements) has scale j // B on layout `lp`, so that x is
    one run of blocks of B elements; else 0. Per tensor: B = n. Otherwise the scales must not
    vary along the axes after the axis (scale_post 1), and the axes before it must either be
    absent (pre 1) or have a scale each with whole blocks along the axis: then B is a block
    times the elements after the axis (blocked on the last axis with its length a multiple of
    the block; per-axis or blocked on the first axis)."""
    if lp.uniform == 1:
        return n
    if lp.scale_post != 1:
        return 0
    if lp.pre == 1 or (lp.scale_pre > 1 and lp.dim % lp.block == 0):
        return lp.block * lp.post
    return 0


def per_element_scales(lp) -> bool:
    """Whether next_segment gives runs with a scale per element (block 0) on layout `lp`:
    per-axis on the last axis, or scales that vary along the rows of a later axis (blocked
    or per-axis on an earlier axis than the last, with axes after it)."""
    if lp.uniform == 1:
        return False
    if lp.post == 1:
        return lp.block == 1
    return lp.scale_post != 1
