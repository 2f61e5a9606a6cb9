"""Throughput on a busy machine: ``python -m qcore.bench --busy``.

Times a few parallel kernels with the machine as it is ("idle"), then with one core kept busy
by a spinning child process (``while True: pass``, pinned to one CPU with ``--busy-pin``), in
alternating rounds, and prints busy/idle wall-clock throughput per case against the target
(issue 9: the parallel kernels keep >= 0.6x of their idle throughput when one core is taken).
The spinner is always killed, whatever happens. "Idle" is relative on a shared machine: run it
more than once.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import numpy as np

#: busy/idle wall-clock throughput the parallel kernels should keep
BUSY_TARGET = 0.6

BUSY_CASES = ("Q int8 per-tensor", "Q int8 blocked 32 (last axis)", "Q float8e4m3fn saturate",
              "DQ int8 per-tensor", "DynamicQuantizeLinear")


@contextlib.contextmanager
def spinner(cpu: int | None = None) -> Iterator[subprocess.Popen]:
    """A child process spinning on one core (pinned to `cpu` when given), killed on exit."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        if cpu is not None and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(proc.pid, {cpu})
        time.sleep(0.3)  # let it start spinning
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _rate(fn: Callable[[], object], n: int, min_time: float) -> float:
    """Median wall-clock elements/s (after one untimed call)."""
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < 5 or (time.perf_counter() - start < min_time and len(times) < 40):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return n / float(np.median(times))


def measure(names, shape: tuple[int, int], make_call: Callable[[str, tuple[int, int]], Callable],
            *, rounds: int = 2, pin: int | None = None, min_time: float = 0.5, busy=None,
            progress=None) -> dict:
    """{case: {"idle": [elements/s per round], "one_thread": [...], "busy": [...],
    "busy_every_thread": [...]}} plus the thread count.

    "one_thread" is the same call on one thread of the idle machine: what a free core alone
    moves, the ceiling of "busy" wherever the taken core's share is worth less than the wait
    it costs.

    "busy" is qcore as it runs (config.ADAPTIVE_WORKERS: the bandwidth-bound kernels move to
    the free cores), "busy_every_thread" the same calls with every thread regardless, timed in
    alternating order within each busy spell. `make_call(name, shape)` returns the timed call
    (python -m qcore.bench passes its qcore call for the case of that name); `busy(pin)` is the
    context that keeps a core busy (default: :func:`spinner`)."""
    import numba

    from .. import config

    busy = busy or spinner
    calls = {name: make_call(name, shape) for name in names}
    n = shape[0] * shape[1]
    out: dict = {"shape": list(shape), "threads": numba.get_num_threads(), "pin": pin,
                 "cases": {name: {"idle": [], "one_thread": [], "busy": [],
                                  "busy_every_thread": []}
                           for name in names}}
    adaptive = config.ADAPTIVE_WORKERS
    try:
        for r in range(rounds):
            for name, fn in calls.items():
                if progress:
                    progress(f"round {r + 1}/{rounds} idle: {name}")
                out["cases"][name]["idle"].append(_rate(fn, n, min_time))
                threads = numba.get_num_threads()
                numba.set_num_threads(1)
                try:
                    out["cases"][name]["one_thread"].append(_rate(fn, n, min_time))
                finally:
                    numba.set_num_threads(threads)
            with busy(pin):
                for name, fn in calls.items():
                    if progress:
                        progress(f"round {r + 1}/{rounds} busy: {name}")
                    order = (True, False) if r % 2 == 0 else (False, True)
                    for free_cores_only in order:
                        config.ADAPTIVE_WORKERS = free_cores_only and adaptive
                        key = "busy" if free_cores_only else "busy_every_thread"
                        out["cases"][name][key].append(_rate(fn, n, min_time))
    finally:
        config.ADAPTIVE_WORKERS = adaptive
    return out


def ratios(result: dict, key: str = "busy") -> dict[str, float]:
    """busy/idle throughput per case: the median busy rate (`key`: "busy", or
    "busy_every_thread") over the median idle rate."""
    return {name: float(np.median(v[key]) / np.median(v["idle"]))
            for name, v in result["cases"].items() if v.get(key)}


def format_report(result: dict) -> str:
    rows = ratios(result)
    every = ratios(result, "busy_every_thread")
    alone = ratios(result, "one_thread")
    pin = f"pinned to CPU {result['pin']}" if result["pin"] is not None else "not pinned"
    lines = [f"busy machine: one core kept busy by a spinning process ({pin}); qcore with "
             f"{result['threads']} threads, {result['shape'][0]}x{result['shape'][1]} float32, "
             f"wall clock, median of {len(next(iter(result['cases'].values()))['idle'])} rounds; "
             "'every thread': the same calls with every thread even when a core is taken; "
             "'one thread idle': the calls on one thread of the idle machine, what a free core "
             "alone moves",
             "| case | idle Gelem/s | busy Gelem/s | busy/idle | target | every thread: busy/idle "
             "| one thread idle/idle |",
             "|---|---|---|---|---|---|---|"]
    for name, v in result["cases"].items():
        r = rows[name]
        verdict = f"≥ {BUSY_TARGET:g}×: {'met' if r >= BUSY_TARGET else 'NOT met'}"
        other = f"{every[name]:.2f}×" if name in every else "—"
        one = f"{alone[name]:.2f}×" if name in alone else "—"
        lines.append(f"| {name} | {np.median(v['idle']) / 1e9:.2f} | "
                     f"{np.median(v['busy']) / 1e9:.2f} | {r:.2f}× | {verdict} | {other} "
                     f"| {one} |")
    return "\n".join(lines)
