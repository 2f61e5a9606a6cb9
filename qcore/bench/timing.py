"""The benchmark's clock and ceilings: elements/s of a call (:func:`time_call`), the machine's
copy bandwidth (the memory roofline), a call's peak extra memory and qcore's rate against size."""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable

import numpy as np
from numba import njit, prange

import qcore

#: The clock of time_call: wall clock, or this thread's CPU time with --cpu-time.
CLOCK = time.perf_counter
#: onnxruntime's intra-op threads (0: its default, one per core; 1 with --cpu-time).
ORT_THREADS = 0
#: Rounds in which every implementation of a case is timed in turn (see :func:`qcore.bench.cases.run`).
ROUNDS = 3


#: Longest wait of :func:`settle` for the other threads of this process to stop running.
SETTLE_MAX_S = 1.0


def own_runnable_threads() -> int | None:
    """Threads of this process other than the calling one that are running or runnable now
    (Linux: state R in /proc/self/task/*/stat); None where that cannot be read."""
    import os
    import threading

    me = threading.get_native_id()
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    count = 0
    for tid in tasks:
        if int(tid) == me:
            continue
        try:
            with open(f"/proc/self/task/{tid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # a thread that ended meanwhile
        count += state == b"R"
    return count


def settle(max_s: float | None = None) -> float:
    """Wait until no other thread of this process runs (at most `max_s`, SETTLE_MAX_S by
    default); the seconds waited. Run before each implementation's timed block: onnxruntime's
    intra-op threads spin for tens of milliseconds of CPU after each Run (numba's OpenMP workers
    for a few after a parallel call), and a block that starts meanwhile finds a core taken,
    which qcore's worker count reads as a busy core (qcore.config.ADAPTIVE_WORKERS)."""
    limit = SETTLE_MAX_S if max_s is None else max_s
    start = time.perf_counter()
    while time.perf_counter() - start < limit:
        busy = own_runnable_threads()
        if not busy:
            break
        time.sleep(0.002)
    return time.perf_counter() - start


def time_call(fn: Callable[[], object], n_elements: int, min_time: float = 0.3,
              max_reps: int = 15) -> float:
    """Elements/s of the fastest repetition (after one warm-up call), by :data:`CLOCK`.

    The fastest, not the median: on a shared machine noise (another process, a stolen core)
    only ever adds time, and it is measured the same way for qcore and every peer."""
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < 5 or (time.perf_counter() - start < min_time and len(times) < max_reps):
        t0 = CLOCK()
        fn()
        times.append(CLOCK() - t0)
    return n_elements / max(min(times), 1e-9)


@njit(parallel=True, cache=True)
def _parallel_copy(src, dst):
    for i in prange(src.size):
        dst[i] = src[i]


def copy_bandwidth(n_bytes: int = 256 << 20) -> float:
    """Bytes/s of a parallel copy (read + write counted), the streaming ceiling."""
    src = np.ones(n_bytes // 4, np.float32)
    dst = np.empty_like(src)
    best = 0.0
    for fn in (lambda: _parallel_copy(src, dst), lambda: np.copyto(dst, src)):
        fn()
        ts = []
        for _ in range(7):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        best = max(best, 2 * src.nbytes / float(np.median(ts)))
    return best


def extra_memory_ratio(fn: Callable[[], object]) -> float | None:
    """Peak bytes allocated during a call beyond its output, over the output's size (with the
    output pool emptied first, so that the output is allocated during the call)."""
    from qcore.kernels import cpu

    fn()
    cpu.release_outputs()
    tracemalloc.start()
    out = fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    arr = out[0] if isinstance(out, tuple) else out
    size = getattr(arr, "nbytes", 0)
    return (peak - size) / size if size else None


def size_sweep(exponents=range(10, 27, 2), backend: str = "cpu") -> list[dict]:
    """qcore int8 per-tensor elements/s against size (shows the serial/parallel threshold)."""
    rows = []
    for e in exponents:
        n = 1 << e
        x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
        s, z = np.float32(0.02), np.int8(0)
        rate = time_call(lambda x=x, s=s, z=z: qcore.quantize_linear(x, s, z, backend=backend),
                         n, min_time=0.2, max_reps=50)
        rows.append({"elements": n, "qcore_elem_per_s": rate})
    return rows


def use_thread_cpu_time() -> None:
    """One thread each for qcore and onnxruntime, timed by the thread's CPU time (--cpu-time):
    per-element cost on a machine too loaded for wall-clock figures."""
    global CLOCK, ORT_THREADS
    import numba

    numba.set_num_threads(1)
    CLOCK, ORT_THREADS = time.thread_time, 1
