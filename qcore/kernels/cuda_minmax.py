"""DynamicQuantizeLinear's min/max/NaN-count as one numba.cuda pass.

Each thread folds its grid-stride share (float32 four at a time through
:func:`qcore.kernels.cuda_device.load4`), warps fold by shuffles, the block's warps through
one shared-memory step, then one atomic per block and quantity (floats as order-preserving
int32 keys, :func:`order_key`; the host reads them back with :func:`key_values`).

Under the CUDA simulator the shuffles go through shared memory; they live in this module
because the simulator swaps in its ``cuda`` only in the globals of the kernel's own module.
"""

from __future__ import annotations

import math

import numpy as np

from .cuda_device import load4
from .cuda_kernels import _IMPORT_ERROR, SIMULATOR, cuda, device_function, f32_to_bits, load_x
from .params import PKind, XKind

if _IMPORT_ERROR is None:
    from numba import float32, int32, int64
else:  # pragma: no cover - numba without its CUDA target: nothing here runs
    float32 = int32 = int64 = np.float32

#: Warps per block of the one-pass min/max (a block has at most 32 warps).
_MAX_WARPS = 32

if SIMULATOR:

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

    @cuda.jit(device=True, inline=True)
    def shfl_down_f32(v, off):
        return cuda.shfl_down_sync(0xFFFFFFFF, v, off)

    @cuda.jit(device=True, inline=True)
    def shfl_down_i64(v, off):
        return cuda.shfl_down_sync(0xFFFFFFFF, v, off)


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
