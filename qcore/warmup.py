"""Compile (or load from numba's on-disk cache) every CPU kernel specialisation.

Nothing needs this: each kernel compiles on its first call (a few seconds, once per machine,
then loaded from numba's cache). Call :func:`warmup` to pay for all of them up front, e.g.
in a background thread of a server, or before timing.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from .concurrency import parallel_guard
from .kernels import cpu
from .kernels.params import (
    DequantizeParams,
    DXKind,
    LayoutParams,
    PKind,
    QuantizeParams,
    TKind,
    XKind,
)

#: What each family is called with: (x dtypes, y dtypes)
_QUANTIZE_INT_F32 = ((np.float32,), (np.uint8, np.uint16))
_DEQUANTIZE_NUMERIC = ((np.int8, np.uint8, np.int16, np.uint16), (np.float32,))
FAMILY_TYPES = {"quantize int": _QUANTIZE_INT_F32, "quantize int blocks": _QUANTIZE_INT_F32,
                **{family: ((np.float32,), (np.uint8,))
                   for family in cpu.FAMILIES if family.startswith("quantize float")},
                "dequantize numeric": _DEQUANTIZE_NUMERIC,
                "dequantize table": ((np.uint8,), (np.float32,))}
#: x as each kind travels to the kernels (16-bit floats as their bits)
_X_DTYPES = {XKind.F32: np.float32, XKind.F16: np.uint16, XKind.BF16: np.uint16,
             XKind.I32: np.int32}
_DX_DTYPES = {DXKind.NUMERIC: (np.int8, np.uint8, np.int16, np.uint16), DXKind.TABLE: (np.uint8,),
              DXKind.I32: (np.int32,)}


def _calls(qp: QuantizeParams, dp: DequantizeParams) -> list[tuple[str, cpu.Family, tuple,
                                                                    tuple, object]]:
    """(label, kernels, x dtypes, y dtypes, params) for every family and generic copy."""
    calls = []
    for name, (xts, yts) in FAMILY_TYPES.items():
        calls.append((name, cpu.FAMILIES[name], xts, yts,
                      qp if name.startswith("quantize") else dp))
    for key, kernels in cpu.GENERIC.items():
        name, *kinds = key
        label = f"{name} {'/'.join(k.name.lower() for k in kinds)}"
        if name == cpu.FamilyName.QUANTIZE_GENERIC:
            x, p, t = kinds
            yts = (np.uint8, np.uint16) if t == TKind.INT else (np.uint8,)
            calls.append((label, kernels, (_X_DTYPES[x],), yts,
                          qp._replace(xkind=int(x), pkind=int(p), tkind=int(t))))
        else:
            x, o = kinds
            yts = (np.float32,) if o == PKind.F32 else (np.uint16,)
            calls.append((label, kernels, _DX_DTYPES[x], yts,
                          dp._replace(xkind=int(x), okind=int(o))))
    return calls


def _jobs() -> list[tuple[str, Callable[[], None]]]:
    n = 8
    lp = LayoutParams(pre=1, dim=n, post=1, block=n, scale_pre=1, scale_blocks=1, scale_post=1,
                      uniform=1)
    s = cpu._readonly(np.ones(1, np.float32))
    zq = cpu._readonly(np.zeros(1, np.float32))  # QuantizeLinear's zero points (ops.py)
    zd = cpu._readonly(np.zeros(1, np.float64))  # DequantizeLinear's
    qp = QuantizeParams(xkind=0, pkind=int(PKind.F32), tkind=int(TKind.INT), lo=-128, hi=127,
                        mask=255, ebits=0, mbits=0, bias=0, max_code=0, has_inf=0, nan_style=0,
                        saturate=1, has_zp=1)
    dp = DequantizeParams(xkind=0, okind=0)
    table = cpu._readonly(np.zeros(256, np.float64))
    enc = cpu._readonly(np.zeros(1 << 17, np.uint8))
    jobs = []
    for family, kernels, xts, yts, params in _calls(qp, dp):
        quantize = family.startswith("quantize")
        tab, z = (enc, zq) if quantize else (table, zd)
        for kernel, label in zip(kernels, ("parallel", "serial")):
            for xt in xts:
                for yt in yts:
                    zs = [z]
                    if family.startswith("quantize int"):  # the target's codes (checks_values)
                        codes = cpu._readonly(cpu.zero_point_view(np.zeros(1, yt)))
                        zs = [codes] if family == "quantize int" else [z, codes]
                    for zt in zs:
                        def job(kernel=kernel, xt=xt, yt=yt, params=params, tab=tab, z=zt):
                            kernel(cpu._readonly(np.zeros(n, xt)), s, z, np.empty(n, yt), lp,
                                   params, tab, np.zeros((1, 2), np.int64))
                        jobs.append((f"{family} {label} {np.dtype(xt).name}->"
                                     f"{np.dtype(yt).name} (zero points {zt.dtype.name})", job))
    for kernel, label in zip(cpu.FAMILIES["minmax"], ("parallel", "serial")):
        def job(kernel=kernel):
            kernel(cpu._readonly(np.zeros(n, np.float32)), np.empty((1, 3), np.float32),
                   np.zeros((1, 2), np.int64))
        jobs.append((f"minmax {label}", job))

    def packing_job():
        import ml_dtypes

        from .packing import NUMPY_BELOW, pack, unpack

        n = NUMPY_BELOW  # the numba kernels' smallest size (smaller arrays pack in NumPy)
        unpack(pack(np.zeros(n, ml_dtypes.int4)), ml_dtypes.int4, n)
    jobs.append(("packing", packing_job))

    return jobs


def jobs() -> list[tuple[str, Callable[[], None]]]:
    """Every kernel specialisation :func:`warmup` compiles, as (label, job), in its order (for a
    caller that interleaves other work between kernels)."""
    return _jobs()


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


def shared_rules() -> None:
    """Compile the element rules every generic kernel copy calls (once per argument type,
    shared by every copy, so a server can pay for them before a first 16-bit scale or 16-bit
    x): loading x at a precision, rounding to it, and dequantizing to a 16-bit output from the
    8-bit and table codes."""
    from .kernels import scalar, segments_float

    # one call per argument type (the kinds are one numba type whatever their value)
    scalar.load_x(np.float32(0), XKind.F32, PKind.F16)
    scalar.load_x(np.uint16(0), XKind.F16, PKind.F16)
    segments_float._round(np.float32(0), PKind.F16)
    table = cpu._readonly(np.zeros(256, np.float64))
    scalar.dequantize_value(np.int8(0), np.float64(0), np.float32(1), DXKind.NUMERIC, PKind.F16,
                            table)
    scalar.dequantize_value(np.uint8(0), np.float64(0), np.float32(1), DXKind.TABLE, PKind.F16,
                            table)
