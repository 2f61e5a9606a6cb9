"""Kernel warm-up in the background, once per server, out of the pages' way.

numba compiles under the GIL and behind one process-wide lock, so a background compile slows a
page's own Python code and makes a page that needs another kernel wait for it. The warm-up
therefore compiles only while no page script runs (and has not for :data:`QUIET_S` seconds),
one specialisation at a time, and starts with what the pages' default views use (the Quantize
Lab's pipeline on a small tensor), then the rest of :func:`qcore.warmup`, then the analysis
kernels' parallel variants.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator

import numpy as np
import streamlit as st

import qcore

#: Seconds without a page script running before the warm-up compiles its next kernel.
QUIET_S = 1.0

_cond = threading.Condition()
_running = 0
_last_end = 0.0


@st.cache_resource(show_spinner=False)
def warm() -> threading.Thread:
    """Compile (or load) the numba kernels in a background thread, once per server.

    No page waits for it: a kernel a click needs compiles on that call (seconds, once per
    machine thanks to numba's cache); this thread only makes the later clicks instant.
    """
    global _last_end
    with _cond:  # the first page's script has not entered page_running() yet: wait for it
        _last_end = time.monotonic()
    thread = threading.Thread(target=_warm_in_background, name="qcore-warmup", daemon=True)
    thread.start()
    return thread


@contextlib.contextmanager
def page_running() -> Iterator[None]:
    """Around a page script: the warm-up compiles nothing meanwhile."""
    global _running, _last_end
    with _cond:
        _running += 1
    try:
        yield
    finally:
        with _cond:
            _running -= 1
            _last_end = time.monotonic()
            _cond.notify_all()


def wait_quiet(quiet_s: float | None = None) -> None:
    """Return once no page script runs and none has ended in the last `quiet_s` seconds."""
    quiet_s = QUIET_S if quiet_s is None else quiet_s
    with _cond:
        while True:
            if _running:
                _cond.wait()
                continue
            left = _last_end + quiet_s - time.monotonic()
            if left <= 0:
                return
            _cond.wait(left)


class _QuietWarmup(logging.Filter):
    """Drops Streamlit's "missing ScriptRunContext" warnings of the warm-up thread (it runs the
    Lab's pipeline, whose cached tensors are Streamlit resources, outside any page run)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.threadName != "qcore-warmup"


def _warm_in_background() -> None:
    logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context").addFilter(
        _QuietWarmup())
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)  # this thread only
    except (AttributeError, OSError):
        pass  # not Linux: keep the normal priority
    t0 = time.perf_counter()
    timing = bool(os.environ.get("QCORE_APP_TIMING"))
    try:
        for job in (_warm_lab, lambda: qcore.warmup(progress=lambda *_: wait_quiet()),
                    _warm_parallel_analysis):
            wait_quiet()
            t1 = time.perf_counter()
            job()
            if timing:
                print(f"[qcore.app] warm-up: {job.__name__} took {time.perf_counter() - t1:.1f}"
                      f" s", flush=True)
        if timing:
            print(f"[qcore.app] warm-up done in {time.perf_counter() - t0:.1f} s", flush=True)
    except Exception:  # noqa: BLE001 - a kernel that fails here fails later with a message
        logging.getLogger("qcore.app").exception("warming up the kernels failed")


def _warm_lab() -> None:
    """The Quantize Lab's default view (and Home's example) on a small tensor: the same
    kernel specialisations as the default 1024x1024 view, compiled first. (Two chunks: a
    per-tensor call of one chunk runs its segment alone, the default view the serial driver.)"""
    from . import compute, controls, tensors

    lab = compute.lab.__wrapped__  # not st.cache_data's wrapper: no page's cache entry
    compute.home_example.__wrapped__(0.25, 0.0, "int4")
    for granularity in (qcore.PER_TENSOR, qcore.PER_AXIS, qcore.BLOCKED):
        wait_quiet()
        lab(tensors.TensorSpec(rows=64, cols=2 * qcore.config.CHUNK // 64),
            controls.QuantConfig(granularity=granularity))


def _warm_parallel_analysis() -> None:
    """The metrics kernels' parallel variants (tensors past their parallel threshold)."""
    from qcore import calibration, metrics

    x = np.linspace(-1, 1, 2 * metrics.PARALLEL_THRESHOLD, dtype=np.float32).reshape(2, -1)
    for gran in (qcore.PER_TENSOR, qcore.BLOCKED):
        wait_quiet()
        p = calibration.choose_params(x, "int8", granularity=gran, axis=1, block_size=16)
        x_hat = p.dequantize(p.quantize(x))
        metrics.error_metrics(x, x_hat, params=p)
        metrics.group_errors(x, x_hat, p)
        metrics.histogram(x, bins=8)
