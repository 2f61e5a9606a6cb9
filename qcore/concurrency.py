"""Safe concurrent calls into numba's parallel kernels, whatever threading layer numba picks.

numba runs ``parallel=True`` kernels on one of three threading layers: ``tbb`` and ``omp`` are
thread-safe; ``workqueue`` -- what numba falls back to when neither TBB nor OpenMP (libgomp)
loads, as in slim containers -- is not: two threads entering a parallel kernel at once abort the
whole process ("Terminating: Concurrent access has been detected"). :func:`parallel_guard`
serialises parallel kernel calls with one process-wide lock exactly when the layer in use is
not thread-safe (or not yet known: numba chooses it at the first parallel call), and costs
nothing otherwise. Wrap each call site of a parallel kernel in it::

    with parallel_guard(x.size):
        kernel(x, ...)
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from . import config

THREAD_SAFE_LAYERS = frozenset({"tbb", "omp"})

_lock = threading.RLock()
_safe: bool | None = None  # None: numba has not chosen its layer yet


def _parallel_threshold() -> int:
    return config.PARALLEL_THRESHOLD


def layer_is_thread_safe() -> bool | None:
    """Whether numba's threading layer in use is thread-safe; None before it is chosen."""
    global _safe
    if _safe is None:
        import numba

        try:
            layer = numba.threading_layer()
        except ValueError:  # "Threading layer is not initialized": no parallel call yet
            return None
        _safe = layer in THREAD_SAFE_LAYERS
    return _safe


@contextlib.contextmanager
def parallel_guard(size: int | None = None) -> Iterator[None]:
    """Hold the lock around a parallel kernel call when the threading layer needs it.

    `size` is the number of elements the call processes: below the CPU kernels' parallel
    threshold they run serially and need no lock. None means "parallel whatever the size"."""
    if (size is not None and size < _parallel_threshold()) or layer_is_thread_safe():
        yield
        return
    with _lock:
        yield


def guarded(kernel):
    """`kernel` wrapped in :func:`parallel_guard` (for call sites that pick a kernel object)."""

    def call(*args, **kwargs):
        with parallel_guard():
            return kernel(*args, **kwargs)

    return call
