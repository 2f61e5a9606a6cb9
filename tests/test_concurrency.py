"""Concurrent calls on numba's `workqueue` threading layer, which is not thread-safe.

numba falls back to `workqueue` when neither TBB nor OpenMP loads (slim containers); there, two
threads entering a parallel kernel at once abort the process ("Concurrent access has been
detected"). qcore.concurrency.parallel_guard serialises parallel kernel calls on such a layer.
Each run is a subprocess: an abort must not take the test session with it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import sys, threading
    import numpy as np
    import qcore
    from qcore import concurrency, config, metrics
    from qcore.kernels import cpu
    from qcore.report import stats

    if sys.argv[1] == "unguarded":  # the control: what happens without the guard
        concurrency.layer_is_thread_safe = lambda: True
    config.ADAPTIVE_WORKERS = False  # the parallel kernels even while the 4 threads compete
    n = max(cpu.PARALLEL_THRESHOLD, metrics.PARALLEL_THRESHOLD) + 4096  # the parallel paths
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    # compile / load every kernel once, on one thread
    y = qcore.quantize_linear(x, np.float32(0.02), np.int8(0))
    qcore.dequantize_linear(y, np.float32(0.02), np.int8(0))
    qcore.dynamic_quantize_linear(x)
    metrics.histogram(x)
    stats.tensor_stats(x)
    import numba
    print("layer", numba.threading_layer(), flush=True)
    errors = []
    barrier = threading.Barrier(4)

    def work(k):
        try:
            barrier.wait()
            for _ in range(12):
                q = qcore.quantize_linear(x, np.float32(0.02 + k * 0.001), np.int8(0))
                xh = qcore.dequantize_linear(q, np.float32(0.02), np.int8(0))
                qcore.dynamic_quantize_linear(x)
                metrics.histogram(x)
                metrics.error_metrics(x, xh)
                stats.tensor_stats(x)
                assert np.array_equal(q, qcore.quantize_linear(
                    x, np.float32(0.02 + k * 0.001), np.int8(0)))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("errors", errors, flush=True)
    sys.exit(1 if errors else 0)
""")


def _run(mode: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, NUMBA_THREADING_LAYER="workqueue", NUMBA_NUM_THREADS="2",
               PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", SCRIPT, mode], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=900)


def test_four_threads_on_workqueue_layer():
    done = _run("guarded")
    assert "layer workqueue" in done.stdout, done.stdout + done.stderr[-2000:]
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-2000:])
    assert "errors []" in done.stdout


def test_without_the_guard_the_workqueue_layer_aborts():
    """The control: the same load without the guard kills the process, so the test above
    can fail. (A race: when the threads happen not to collide, there is nothing to show.)"""
    done = _run("unguarded")
    assert "layer workqueue" in done.stdout, done.stdout + done.stderr[-2000:]
    if done.returncode == 0:
        pytest.skip("the unguarded threads did not collide this time")
    assert done.returncode != 0
    assert "Concurrent access" in done.stderr or done.returncode in (-6, 134), done.stderr[-2000:]
