"""How many workers a parallel kernel call uses when other processes keep cores busy
(qcore.concurrency.parallel_workers; config.ADAPTIVE_WORKERS)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

import qcore
from qcore import concurrency, config
from qcore.kernels import cpu


@pytest.mark.parametrize("threads, cpus, others, expected", [
    (2, 2, 0, 2),   # idle machine: every thread
    (2, 2, 1, 1),   # one core taken: the serial kernel on the free one
    (2, 2, 5, 1),   # never fewer than one
    (8, 16, 4, 8),  # enough free cores: numba's count
    (16, 16, 3, 13),
])
def test_workers_for(threads, cpus, others, expected):
    assert concurrency.workers_for(threads, cpus, others) == expected


def test_others_runnable_leaves_out_the_caller_and_its_spinning_workers():
    assert concurrency.others_runnable(1, 0) == 0
    assert concurrency.others_runnable(2, 1) == 0  # our worker spinning after a call
    assert concurrency.others_runnable(3, 1) == 1  # ... and one other process
    assert concurrency.others_runnable(2, 0) == 1
    assert concurrency.others_runnable(1, 3) == 0


@pytest.fixture
def readings(monkeypatch):
    """Feed parallel_workers run-queue readings; the machine has 2 CPUs, no call ran before."""
    queue: list[int | None] = []
    monkeypatch.setattr(concurrency, "runnable_threads", lambda: queue.pop(0))
    monkeypatch.setattr(concurrency, "_CPUS", 2)
    monkeypatch.setattr(concurrency, "_others_before", 0)
    monkeypatch.setattr(concurrency, "_decided", (float("-inf"), 0, 1))
    monkeypatch.setattr(config, "RUN_QUEUE_EVERY", 0.0)  # a reading for every call
    monkeypatch.setattr(concurrency, "_last_parallel", (float("-inf"), 1))
    monkeypatch.setattr(config, "ADAPTIVE_WORKERS", True)
    return queue


def test_a_busy_core_seen_twice_in_a_row_takes_a_worker_away(readings):
    readings += [2, 2, 2, 1, 2]
    seen = [concurrency.parallel_workers(2) for _ in range(5)]
    # one busy reading alone is a passing thread; the second in a row counts; one idle
    # reading gives the worker back at once
    assert seen == [2, 1, 1, 2, 2]


def test_a_reading_stands_for_the_calls_right_after_it(readings, monkeypatch):
    monkeypatch.setattr(config, "RUN_QUEUE_EVERY", 60.0)
    readings += [2, 2]
    assert [concurrency.parallel_workers(2) for _ in range(5)] == [2] * 5
    assert readings == [2]  # one reading taken for the five calls
    # another thread count: a new reading, the second in a row to show another process
    assert concurrency.parallel_workers(4) == 1
    assert readings == []


def test_our_own_spinning_workers_are_not_taken_for_another_process(readings):
    concurrency._last_parallel = (time.monotonic(), 2)  # a parallel call just ended
    readings += [2, 2]
    assert [concurrency.parallel_workers(2) for _ in range(2)] == [2, 2]
    concurrency._last_parallel = (time.monotonic() - 10 * config.OWN_SPIN_SECONDS, 2)
    readings += [2, 2]
    assert [concurrency.parallel_workers(2) for _ in range(2)] == [2, 1]


def test_unreadable_run_queue_or_switched_off_uses_every_thread(readings, monkeypatch):
    readings += [None, None]
    assert [concurrency.parallel_workers(2) for _ in range(2)] == [2, 2]
    monkeypatch.setattr(config, "ADAPTIVE_WORKERS", False)
    assert concurrency.parallel_workers(2) == 2  # no reading taken
    assert concurrency.parallel_workers(1) == 1


def test_runnable_threads_reads_this_machine():
    n = concurrency.runnable_threads()
    if not os.path.exists("/proc/loadavg"):
        assert n is None
    else:
        assert isinstance(n, int) and n >= 1  # at least this thread


def _four_operators(x):
    return (qcore.quantize_linear(x, np.float32(0.01), np.int8(3)),
            qcore.quantize_linear(x, np.float32(0.05), np.zeros((), "float8_e4m3fn")),
            qcore.dequantize_linear(np.arange(x.size, dtype=np.int32).astype(np.int8),
                                    np.float32(0.5), np.int8(1)),
            *qcore.dynamic_quantize_linear(np.nan_to_num(x)))


@pytest.mark.parametrize("busy", [False, True])
def test_busy_cores_move_bandwidth_bound_kernels_to_the_free_ones(busy, monkeypatch):
    # the worker count is a performance choice: the serial kernel, chosen when cores are taken,
    # gives the parallel kernel's bits; only the bandwidth-bound families give workers up
    import numba

    monkeypatch.setattr(cpu, "PARALLEL_THRESHOLD", 1 << 16)
    monkeypatch.setattr(cpu, "parallel_workers", lambda threads: 1 if busy else threads)
    launched = []
    real = concurrency.parallel_call
    monkeypatch.setattr(cpu, "parallel_call",
                        lambda w, threads: launched.append(w) or real(w, threads))
    x = np.random.default_rng(3).standard_normal((512, 300)).astype(np.float32)
    x[7, 9] = np.nan
    got = _four_operators(x)
    monkeypatch.setattr(cpu, "PARALLEL_THRESHOLD", 1 << 62)  # the serial kernels throughout
    want = _four_operators(x)
    for a, b in zip(got, want):
        assert np.array_equal(np.atleast_1d(a).view(np.uint8), np.atleast_1d(b).view(np.uint8))
    threads = numba.get_num_threads()
    # idle: all five kernels (int8, float8, dequantize, min/max and int8 of DQL) in parallel;
    # busy: only float8's, which is not in BANDWIDTH_BOUND
    expected = [threads] * (1 if busy else 5) if threads > 1 else []
    assert launched == expected
    assert "quantize float" not in cpu.BANDWIDTH_BOUND
    assert {"quantize int", "dequantize numeric", "minmax"} <= cpu.BANDWIDTH_BOUND


@pytest.mark.skipif(not os.path.exists("/proc/loadavg") or (os.cpu_count() or 1) > 8,
                    reason="needs Linux's run queue and few enough cores to fill")
def test_other_processes_on_every_core_but_one_leave_one_worker():
    # the real thing: spinning processes on all cores but one (other tests running beside this
    # one only add to the queue), two readings in a row -> one worker, the serial kernel
    cpus = os.cpu_count() or 1
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(cpus - 1)]
    try:
        time.sleep(0.5)
        concurrency._last_parallel = (float("-inf"), 1)
        seen = []
        for _ in range(3):
            concurrency._decided = (float("-inf"), 0, 1)  # a fresh reading each time
            seen.append(concurrency.parallel_workers(cpus))
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    assert seen[1:] == [1, 1], seen


def test_every_chunk_is_done_once_by_the_workers_that_drew_it(monkeypatch):
    # the drivers' dynamic scheduling: workers draw chunks from one counter until none is left
    import numba

    monkeypatch.setattr(cpu, "PARALLEL_THRESHOLD", 0)
    monkeypatch.setattr(config, "ADAPTIVE_WORKERS", False)
    n = 40 * cpu.CHUNK + 123
    x = np.linspace(-3, 3, n, dtype=np.float32)
    out = np.empty((-(-n // cpu.CHUNK), 3), np.float32)
    _, tally = cpu._launch(cpu.FAMILIES["minmax"], (cpu._readonly(x), out), n, True)
    assert tally.shape[0] == numba.get_num_threads()
    assert tally[:, 0].sum() == out.shape[0]
    assert out[:, 0].min() == -3 and out[:, 1].max() == 3 and out[:, 2].sum() == 0
