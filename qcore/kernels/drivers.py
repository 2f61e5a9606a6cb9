"""Drivers: x streamed once in chunks, parallel over chunks (or serially), each chunk cut into
runs by the layout's walk (:mod:`qcore.kernels.walk`) and each run converted by a segment.

Scheduling: each worker starts on its own contiguous share of the chunks (one sequential stream
per thread, which the hardware prefetchers follow), then helps with the others' shares, so a
thread whose core is busy does fewer chunks instead of holding everyone up.

One driver template, compiled per family: :func:`family` binds the template's `_SEGMENT`,
`_BUFFER` and `_WORK` to the family's segment, its scratch size and what the segment's third
argument is (the scratch buffer or the decode table), through :func:`qcore.kernels.bound`, the
one mechanism of compiled copies. Every segment has the signature ``segment(run, params, work)``
(:class:`~qcore.kernels.walk.Run`) and returns how many unusable scales it found.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numba import njit, prange

from ..config import CHUNK
from . import bound, renamed
from .bits import f32_as_u32, fetch_add, u32_as_f32, wide_vectors
from .jit import INLINE, JIT
from .walk import Run, locate, next_segment

_LINE = 8  # int64s per cache line: each share's counter on its own line


@njit(**INLINE)
def _claim(counters, share, nchunks, workers):
    """The next chunk of `share` (the share-th of `workers` contiguous runs of chunks), or -1
    once every chunk of it is taken."""
    lo = share * nchunks // workers
    hi = (share + 1) * nchunks // workers
    c = lo + fetch_add(counters[share * _LINE:share * _LINE + 1], 1)
    return c if c < hi else -1


@njit(**INLINE)
def _next_chunk(counters, w, k, nchunks, workers):
    """(chunk, k) for worker w: from the share k steps after its own (k = 0 first), the next
    unclaimed chunk, moving on to the following shares as each runs out; chunk -1 once all
    have (see _claim)."""
    while k < workers:
        c = _claim(counters, (w + k) % workers, nchunks, workers)
        if c >= 0:
            return c, k
        k += 1
    return -1, k


@njit(**INLINE)
def scratch(table, buf):
    """A quantize family's `_WORK`: its segments take the worker's scratch buffer."""
    return buf


@njit(**INLINE)
def decode_table(table, buf):
    """A dequantize family's `_WORK`: its segments take the decode table."""
    return table


# Bound per family by family() (see the module's docstring); never called as they are here.
_SEGMENT = None
_BUFFER = 0
_WORK = scratch


def _driver(x, s, z, y, lp, params, table, tally):
    """Chunks shared out among the workers, tally.shape[0] of them (see _claim). Worker w leaves
    the number of chunks it did in tally[w, 0], and in tally[w, 1] how many unusable scales its
    segments found (only the integer quantize segments check: they read the scales anyway,
    where a check before the call would be a pass of its own). Returns the total of those."""
    nchunks = (x.size + CHUNK - 1) // CHUNK
    workers = tally.shape[0]
    counters = np.zeros(workers * _LINE, np.int64)
    for w in prange(workers):
        wide_vectors()
        work = _WORK(table, np.empty(_BUFFER, np.float32))
        done = 0
        bad = 0
        c, k = _next_chunk(counters, w, 0, nchunks, workers)
        while c >= 0:
            done += 1
            i0 = c * CHUNK
            n = min(CHUNK, x.size - i0)
            if lp.uniform == 1:
                bad += _SEGMENT(Run(x[i0:i0 + n], y[i0:i0 + n], s, z, n, np.int64(0)), params,
                                work)
            else:
                p, d, q = locate(i0, lp)
                j = 0
                while j < n:
                    run, k2, m, block, first, p, d, q = next_segment(p, d, q, n - j, lp)
                    bad += _SEGMENT(Run(x[i0 + j:i0 + j + run], y[i0 + j:i0 + j + run],
                                        s[k2:k2 + m], z[k2:k2 + m], block, first), params, work)
                    j += run
            c, k = _next_chunk(counters, w, k, nchunks, workers)
        tally[w, 0] = done
        tally[w, 1] = bad
    total = 0
    for w in range(workers):
        total += tally[w, 1]
    return total


class Family(NamedTuple):
    """A kernel family: its parallel and serial drivers, the segment function they call on each
    run of a chunk, how many float32s of scratch the segment takes, whether it holds a zero
    point per block there (the integer blocks segment, fastest when every block of its run has
    one: a direct call, cpu.DIRECT, takes it only for runs of that many blocks at most), and
    whether its segments' work argument is the decode table (else the scratch buffer). minmax
    has no segment."""

    parallel: Any
    serial: Any
    segment: Any = None
    buffer: int = 0
    per_block: bool = False
    reads_table: bool = False


def family(segment, name: str, buffer: int = 0, per_block: bool = False,
           reads_table: bool = False) -> Family:
    """The drivers bound to one segment function: each its own small kernel, compiled (or
    cache-loaded) only when first called."""
    work = decode_table if reads_table else scratch
    parallel, serial = (bound(_driver, name + suffix, flags, _SEGMENT=segment, _BUFFER=buffer,
                              _WORK=work)
                        for suffix, flags in (("_parallel", {"parallel": True, **JIT}),
                                              ("_serial", JIT)))
    return Family(parallel, serial, segment, buffer, per_block, reads_table)


# ---------------------------------------------------------------------------------------------
# min/max of float32 x (DynamicQuantizeLinear), scheduled as the drivers


@njit(**INLINE)
def _order_key(b):
    """float32 bits (as int32) -> an int32 in the same order as the floats (NaN aside), and
    back (the map is its own inverse)."""
    return np.int32(b ^ (np.int32(b >> np.int32(31)) & np.int32(0x7FFFFFFF)))


_KEY_POS_INF = np.int32(0x7F800000)  # order key of +Inf (its bits); +NaN keys are above it
_KEY_NEG_INF = np.int32(-0x7F800001)  # order key of -Inf (bits 0xFF800000); -NaN keys are below


@njit(**JIT)
def _minmax_fast(xs):
    """(min, max, any NaN/Inf) of xs; min and max are only meaningful when there is none.

    Two int32 min/max reductions of order keys, which LLVM vectorises (float min/max reductions
    only under fast-math, which would also drop the NaN checks). NaN and Inf need no third
    reduction: their keys lie at or beyond the keys of +-Inf. Every value is kept int32 (numba
    widens integer arithmetic to int64, which halves the vector width)."""
    wide_vectors()
    lo = np.int32(0x7FFFFFFF)
    hi = np.int32(-0x80000000)
    for j in range(np.uint64(0), np.uint64(xs.size)):
        k = _order_key(np.int32(f32_as_u32(xs[j])))
        lo = k if k < lo else lo
        hi = k if k > hi else hi
    bad = (hi >= _KEY_POS_INF) | (lo <= _KEY_NEG_INF)
    return u32_as_f32(_order_key(lo)), u32_as_f32(_order_key(hi)), bad


@njit(**JIT)
def _minmax_exact(xs):
    """min and max of xs with NaNs left out and +-Inf included, and the count of NaN/Inf."""
    wide_vectors()
    lo = np.float32(np.inf)
    hi = np.float32(-np.inf)
    bad = 0
    for j in range(xs.size):
        v = xs[j]
        bad += (v - v) != 0
        lo = v if v < lo else lo
        hi = v if v > hi else hi
    return lo, hi, bad


def _minmax_driver(x, out, tally):
    """Per-chunk min, max and NaN/Inf count of float32 x: out[c] = (min, max, bad); chunks
    shared out as in _driver."""
    nchunks = (x.size + CHUNK - 1) // CHUNK
    workers = tally.shape[0]
    counters = np.zeros(workers * _LINE, np.int64)
    for w in prange(workers):
        wide_vectors()
        done = 0
        c, k = _next_chunk(counters, w, 0, nchunks, workers)
        while c >= 0:
            done += 1
            i0 = c * CHUNK
            xs = x[i0:min(x.size, i0 + CHUNK)]
            lo, hi, flag = _minmax_fast(xs)
            bad = 0
            if flag:
                lo, hi, bad = _minmax_exact(xs)
            out[c, 0] = lo
            out[c, 1] = hi
            out[c, 2] = bad
            c, k = _next_chunk(counters, w, k, nchunks, workers)
        tally[w, 0] = done


MINMAX = Family(njit(parallel=True, **JIT)(renamed(_minmax_driver, "_parallel")),
                njit(**JIT)(renamed(_minmax_driver, "_serial")))
