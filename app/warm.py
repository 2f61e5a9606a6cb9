"""Kernel warm-up at server start (one cached resource per server)."""

from __future__ import annotations

import logging
import time

import numpy as np
import streamlit as st

import qcore


@st.cache_resource(show_spinner=False)
def warm() -> dict[str, float]:
    """Compile (or load) every numba kernel once per server, before the first click."""
    with st.spinner("Preparing the kernels (once per server start)…"):
        try:
            timings = qcore.warmup()
            t0 = time.perf_counter()
            _warm_analysis()
            timings["app"] = time.perf_counter() - t0
            return timings
        except Exception:  # noqa: BLE001 - a kernel that fails here fails later with a message
            logging.getLogger("qcore.app").exception("warming up the kernels failed")
            return {}


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
