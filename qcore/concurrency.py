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

:func:`parallel_workers` chooses how many workers a parallel kernel call uses: numba's thread
count, fewer when other processes keep cores busy (``config.ADAPTIVE_WORKERS``).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
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


def adaptive(kernel):
    """`kernel` (a parallel one) run on :func:`parallel_workers` of numba's threads, under
    :class:`parallel_call` (the lock where the layer needs it), for call sites that pick a
    kernel object. Only for kernels whose results do not depend on the worker count."""

    def call(*args, **kwargs):
        threads = numba_threads()
        with parallel_call(parallel_workers(threads), threads):
            return kernel(*args, **kwargs)

    return call


# ---------------------------------------------------------------------------------------------
# How many workers a parallel call uses
# ---------------------------------------------------------------------------------------------

_last_parallel = (float("-inf"), 1)  # (time.monotonic() at its end, workers) of our last one
_others_before = 0  # other processes' runnable threads at the previous reading
_decided = (float("-inf"), 0, 1)  # (time.monotonic(), threads, workers) of the last reading
_CPUS = os.cpu_count()


def runnable_threads() -> int | None:
    """Threads runnable on the whole machine right now, this one included (the kernel's run
    queue as /proc/loadavg reports it); None where that cannot be read."""
    try:
        with open("/proc/loadavg", "rb") as f:
            return int(f.read().split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return None


def others_runnable(runnable: int, own_spinning: int) -> int:
    """Runnable threads of other processes: `runnable` (machine-wide, the calling thread
    included) less ours (`own_spinning`: our parallel workers still spinning after a call)."""
    return max(0, runnable - 1 - own_spinning)


def workers_for(threads: int, cpus: int, others: int) -> int:
    """Workers for a parallel call: `threads` (numba's count), no more than the `cpus` that
    `others` (other processes' runnable threads) leave free, and at least 1."""
    return max(1, min(threads, cpus - others))


_thread_count_getter = None  # numba's C getter of the calling thread's count, once it exists


def numba_threads() -> int:
    """numba.get_num_threads(): the calling thread's count of numba threads. Once numba's
    threads are up, read through numba's own C getter: numba.get_num_threads takes two locks on
    every call first (~7 us right after a kernel has streamed its data through the caches,
    against 0.1 us for the getter)."""
    global _thread_count_getter
    if _thread_count_getter is None:
        import numba
        from numba.np.ufunc import parallel

        threads = numba.get_num_threads()  # launches the threads, which makes the getter
        _thread_count_getter = getattr(parallel, "_get_num_threads", None) or \
            numba.get_num_threads
        return threads
    return _thread_count_getter()


def parallel_workers(threads: int) -> int:
    """How many workers a parallel kernel call should use now (1: run the serial kernel):
    `threads` (numba's count) less the cores other processes keep busy (see
    :func:`workers_for`). Always `threads` with config.ADAPTIVE_WORKERS off or where the run
    queue cannot be read. Not exact under concurrency (two threads calling at once share this
    state): that only shifts a count."""
    global _others_before, _decided
    if not config.ADAPTIVE_WORKERS or threads <= 1:
        return threads
    now = time.monotonic()
    at, for_threads, workers = _decided
    if now - at < config.RUN_QUEUE_EVERY and for_threads == threads:
        return workers  # a reading costs ~25 us: 5% of a call at the parallel threshold
    runnable = runnable_threads()
    if runnable is None:
        return threads
    end, last_workers = _last_parallel
    spinning = last_workers - 1 if now - end < config.OWN_SPIN_SECONDS else 0
    others = others_runnable(runnable, spinning)
    # the lower of two readings in a row: a thread runnable for a moment (2-3% of readings on
    # an idle machine) does not cost a call its second worker; a process that keeps a core
    # busy is seen by the second reading on
    held = min(others, _others_before)
    _others_before = others
    workers = workers_for(threads, _CPUS or threads, held)
    _decided = (now, threads, workers)
    return workers


class parallel_call:  # noqa: N801 - used as a context manager, like contextlib's
    """Run a parallel kernel call on `workers` of numba's `threads` (numba's count for the
    calling thread while inside), under :func:`parallel_guard`'s lock where the layer needs it,
    and note when it ended (see :func:`parallel_workers`). A class, not a generator: it runs
    around every parallel call, right after a kernel has streamed its data through the caches,
    where every Python frame is slow."""

    __slots__ = ("workers", "threads", "locked")

    def __init__(self, workers: int, threads: int) -> None:
        self.workers = workers
        self.threads = threads
        self.locked = False

    def __enter__(self) -> None:
        if self.workers < self.threads:
            import numba

            numba.set_num_threads(self.workers)
        if not layer_is_thread_safe():
            _lock.acquire()
            self.locked = True

    def __exit__(self, *exc) -> None:
        global _last_parallel
        if self.locked:
            _lock.release()
        if self.workers < self.threads:
            import numba

            numba.set_num_threads(self.threads)
        _last_parallel = (time.monotonic(), self.workers)
