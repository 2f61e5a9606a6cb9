"""torch on the same GPU, for ``python -m qcore.bench.cuda``: the same cases' rates, timed as
qcore's kernels are (:func:`qcore.bench.cuda._event_rounds`)."""

from __future__ import annotations

import time

from qcore.bench.cuda import LAUNCHES, _event_rounds


def torch_rates(shape: tuple[int, int], *, repeat: int = 10,
                names: set | None = None) -> dict[str, float]:
    """torch on the same GPU, elements/s of the same cases, timed as qcore's kernels are
    (:func:`qcore.bench.cuda._time_events`: a spin, then events around back-to-back calls of eager torch):
    divide-round-clamp-cast for the integer cases (per block through a view), ``(x /
    s).to(torch.float8_e4m3fn)``, ``(codes.float() - zp) * s``, ``torch.aminmax``. Empty
    without torch or its GPU."""
    try:
        import torch
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    rows, cols = shape
    n = rows * cols
    x = torch.randn(rows, cols, device="cuda")
    codes = torch.randint(-128, 128, (rows, cols), device="cuda", dtype=torch.int8)

    def blocked(b, lo, hi, zp, dtype):
        if cols % b:
            return None
        s = torch.full((rows, cols // b, 1), 0.05, device="cuda")
        xb = x.view(rows, cols // b, b)
        return lambda: (xb / s).round().add(zp).clamp(lo, hi).to(dtype)

    def blocked_cast(b, dtype, value):
        if cols % b or dtype is None:
            return None
        s = torch.full((rows, cols // b, 1), value, device="cuda")
        xb = x.view(rows, cols // b, b)
        return lambda: (xb / s).to(dtype)

    def dq_blocked(b):
        if cols % b:
            return None
        s = torch.full((rows, cols // b, 1), 0.05, device="cuda")
        zp = torch.zeros((rows, cols // b, 1), device="cuda", dtype=torch.int8)
        cb = codes.view(rows, cols // b, b)
        return lambda: (cb.float() - zp) * s

    s_last = torch.full((cols,), 0.05, device="cuda")
    s_first = torch.full((rows, 1), 0.05, device="cuda")
    f8 = getattr(torch, "float8_e4m3fn", None)

    fns = {
        "Q int8 per-tensor": lambda: (x / 0.05).round().clamp(-128, 127).to(torch.int8),
        "Q uint8 per-tensor": lambda: (x / 0.05).round().add(128).clamp(0, 255).to(
            torch.uint8),
        "Q int8 per-axis (last axis)": lambda: (x / s_last).round().clamp(-128, 127).to(
            torch.int8),
        "Q int8 per-axis (first axis)": lambda: (x / s_first).round().clamp(-128, 127).to(
            torch.int8),
        "Q int4 blocked 32": blocked(32, -8, 7, 0, torch.int8),
        "Q int4 blocked 128": blocked(128, -8, 7, 0, torch.int8),
        "Q float8e4m3fn blocked 32": blocked_cast(32, f8, 0.05),
        "Q MXFP8 (float8e4m3fn, e8m0 scales) blocked 32": blocked_cast(32, f8, 2.0 ** -4),
        "DQ int8 blocked 32": dq_blocked(32),
        "Q int8 blocked 32": blocked(32, -128, 127, 0, torch.int8),
        "Q uint8 blocked 32": blocked(32, 0, 255, 128, torch.uint8),
        "Q int8 blocked 128": blocked(128, -128, 127, 0, torch.int8),
        "Q uint8 blocked 128": blocked(128, 0, 255, 128, torch.uint8),
        "DQ int8 per-tensor": lambda: (codes.float() - 0) * 0.05,
        "DynamicQuantizeLinear min/max pass": lambda: torch.aminmax(x),
    }
    if hasattr(torch, "float8_e4m3fn"):
        fns["Q float8e4m3fn per-tensor"] = lambda: (x / 0.05).to(torch.float8_e4m3fn)
    if hasattr(torch, "float8_e5m2"):
        fns["Q float8e5m2 per-tensor"] = lambda: (x / 0.05).to(torch.float8_e5m2)
    sleep = getattr(torch.cuda, "_sleep", None)  # a spin of N GPU clock cycles
    rates = {}
    for name, fn in fns.items():
        if fn is None or (names is not None and name not in names):
            continue
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        host = time.perf_counter() - t0
        torch.cuda.synchronize()
        cycles = int(max(1e-3, 2 * LAUNCHES * host) * 2e9)
        spin = (lambda c=cycles: sleep(c)) if sleep is not None else (lambda: None)
        rates[name] = n / _event_rounds(fn, repeat, LAUNCHES,
                                        lambda: torch.cuda.Event(enable_timing=True), spin)
    fns.clear()
    torch.cuda.empty_cache()
    return rates
