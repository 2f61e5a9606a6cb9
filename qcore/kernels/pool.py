"""The kernels' output buffers: reused once nothing references them, and read-only views of
the kernels' inputs."""

from __future__ import annotations

import sys
import threading

import numpy as np

from .. import config

_POOL: list[np.ndarray] = []  # reusable output buffers (uint8), least recently used first
_POOL_LOCK = threading.Lock()


def new_output(size: int, dtype) -> np.ndarray:
    """An uninitialised 1-D array for a kernel to fill (every element gets written).

    Large outputs reuse a pooled buffer once nothing references an array handed out from it
    any more (numpy views keep their base alive, so the base's reference count tells): a fresh
    allocation of that size would cost a page fault and the OS zeroing each page on first
    touch, as much memory traffic as a dequantize's own writes. onnxruntime's arena does the
    same. ``config.OUTPUT_POOL_BYTES`` bounds what the pool keeps; 0 turns it off."""
    dtype = np.dtype(dtype)
    nbytes = size * dtype.itemsize
    budget = config.OUTPUT_POOL_BYTES
    if nbytes < config.OUTPUT_POOL_MIN_BYTES or nbytes > budget:
        return np.empty(size, dtype)
    with _POOL_LOCK:
        for i in range(len(_POOL)):
            # 2 references: the pool's and getrefcount's argument; a handed-out view adds one
            if _POOL[i].nbytes == nbytes and sys.getrefcount(_POOL[i]) == 2:
                buf = _POOL.pop(i)
                _POOL.append(buf)
                return buf.view(dtype)
        buf = np.empty(nbytes, np.uint8)
        _POOL.append(buf)
        total = sum(b.nbytes for b in _POOL)
        while total > budget:  # forget the least recently used (an array in use stays valid)
            total -= _POOL.pop(0).nbytes
        return buf.view(dtype)


def release_outputs() -> None:
    """Forget the pooled output buffers (their memory goes back once no array uses it)."""
    with _POOL_LOCK:
        _POOL.clear()


def readonly(a: np.ndarray) -> np.ndarray:
    """a as a read-only view (no copy): numba compiles read-only and writable arrays apart, so
    the kernels take every input read-only and the app's read-only arrays and writable ones
    share one compilation."""
    if a.flags.writeable:
        a = a.view()
        a.flags.writeable = False
    return a
