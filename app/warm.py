"""Kernel warm-up in the background, once per server (no page waits for it)."""

from __future__ import annotations

import logging
import os
import threading
import time

import numpy as np
import streamlit as st

import qcore


@st.cache_resource(show_spinner=False)
def warm() -> threading.Thread:
    """Compile (or load) the numba kernels in a background thread, once per server.

    No page waits for it: a kernel a click needs compiles on that call (seconds, once per
    machine thanks to numba's cache); this thread only makes the later clicks instant. It runs
    at low priority and pauses between kernels so that pages keep rendering meanwhile.
    """
    thread = threading.Thread(target=_warm_in_background, name="qcore-warmup", daemon=True)
    thread.start()
    return thread


def _warm_in_background() -> None:
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)  # this thread only
    except (AttributeError, OSError):
        pass  # not Linux: keep the normal priority
    try:
        qcore.warmup(progress=lambda *_: time.sleep(0.05))
        _warm_analysis()
    except Exception:  # noqa: BLE001 - a kernel that fails here fails later with a message
        logging.getLogger("qcore.app").exception("warming up the kernels failed")


def _warm_analysis() -> None:
    """Compile the metrics kernels the pages use (serial and parallel variants)."""
    from qcore import calibration, metrics

    for n in (64, 2 * metrics.PARALLEL_THRESHOLD):
        x = np.linspace(-1, 1, n, dtype=np.float32).reshape(2, -1)
        for gran in (qcore.PER_TENSOR, qcore.BLOCKED):
            p = calibration.choose_params(x, "int8", granularity=gran, axis=1, block_size=16)
            x_hat = p.dequantize(p.quantize(x))
            metrics.error_metrics(x, x_hat, params=p)
            metrics.group_errors(x, x_hat, p)
            metrics.histogram(x, bins=8)
