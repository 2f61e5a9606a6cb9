"""Compile (or load from numba's on-disk cache) every CPU kernel specialisation up front.

The app calls :func:`warmup` once at start so that no click waits on compilation.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from .concurrency import parallel_guard
from .kernels import cpu
from .kernels.params import DequantizeParams, LayoutParams, QuantizeParams, TKind, XKind

QUANTIZE_INPUTS = (np.float32, np.uint16, np.int32)  # float32, float16/bfloat16 bits, int32
QUANTIZE_OUTPUTS = (np.uint8, np.uint16)  # integer codes are written unsigned, then viewed
DEQUANTIZE_INPUTS = (np.int8, np.uint8, np.int16, np.uint16, np.int32)
DEQUANTIZE_OUTPUTS = (np.float32, np.uint16)


def _jobs() -> list[tuple[str, Callable[[], None]]]:
    n = 8
    lp = LayoutParams(pre=1, dim=n, post=1, block=n, scale_pre=1, scale_blocks=1, scale_post=1,
                      uniform=1)
    s = np.ones(1, np.float32)
    z = np.zeros(1, np.float64)
    qp = QuantizeParams(xkind=0, pkind=0, tkind=0, lo=-128, hi=127, mask=255,
                        ebits=0, mbits=0, bias=0, max_code=0, has_inf=0, nan_style=0, saturate=1,
                        has_zp=1)
    dp = DequantizeParams(xkind=0, okind=0)
    table = np.zeros(256, np.float64)
    jobs = []
    for kernel, label in ((cpu.quantize_parallel, "parallel"), (cpu.quantize_serial, "serial")):
        for xt in QUANTIZE_INPUTS:
            for yt in QUANTIZE_OUTPUTS:
                def job(kernel=kernel, xt=xt, yt=yt):
                    kernel(np.zeros(n, xt), s, z, np.empty(n, yt), lp, qp,
                           cpu.encode_table(qp))
                jobs.append((f"quantize {label} {np.dtype(xt).name}->{np.dtype(yt).name}", job))
    for kernel, label in ((cpu.dequantize_parallel, "parallel"),
                          (cpu.dequantize_serial, "serial")):
        for xt in DEQUANTIZE_INPUTS:
            for yt in DEQUANTIZE_OUTPUTS:
                def job(kernel=kernel, xt=xt, yt=yt):
                    kernel(np.zeros(n, xt), s, z, np.empty(n, yt), lp, dp, table)
                jobs.append((f"dequantize {label} {np.dtype(xt).name}->{np.dtype(yt).name}", job))
    for kernel, label in ((cpu.minmax_parallel, "parallel"), (cpu.minmax_serial, "serial")):
        def job(kernel=kernel):
            kernel(np.zeros(n, np.float32), int(XKind.F32), np.empty((1, 3), np.float32))
        jobs.append((f"minmax {label}", job))

    def packing_job():
        import ml_dtypes

        from .packing import pack, unpack

        unpack(pack(np.zeros(3, ml_dtypes.int4)), ml_dtypes.int4, 3)
    jobs.append(("packing", packing_job))
    from .formats import get_format

    e4m3 = get_format("float8e4m3fn")
    float_qp = qp._replace(tkind=int(TKind.FLOAT), ebits=e4m3.ebits, mbits=e4m3.mbits,
                           bias=e4m3.bias, max_code=e4m3.max_code, nan_style=e4m3.nan_style)
    jobs.append(("encode tables", lambda: cpu.encode_table(float_qp)))
    return jobs


def warmup(progress: Callable[[int, int, str], None] | None = None) -> dict[str, float]:
    """Compile or cache-load every kernel; returns seconds per kernel family.

    `progress(done, total, label)` is called after each specialisation (for a progress bar).
    """
    jobs = _jobs()
    timings: dict[str, float] = {}
    for i, (label, job) in enumerate(jobs):
        t0 = time.perf_counter()
        with parallel_guard():
            job()
        family = label.split(" ")[0]
        timings[family] = timings.get(family, 0.0) + time.perf_counter() - t0
        if progress is not None:
            progress(i + 1, len(jobs), label)
    return timings
