"""GPU timing for ``python -m qcore.bench --backend cuda``: kernels alone, launches, transfers.

``python -m qcore.bench_cuda`` (the module itself) runs the full GPU benchmark at several sizes:
every case against the measured copy bandwidth and against torch on the same GPU, transfers
reported separately, as a Markdown table and JSON.

Each operator call is validated and prepared by :func:`qcore.ops.prepare_quantize` /
:func:`qcore.ops.prepare_dequantize` (what the operators run), its inputs are put on the device
once, and the launch of :mod:`qcore.kernels.cuda` is timed with CUDA events; the host->device
and device->host copies and the host-side cost of a launch are timed separately. Under the CUDA
simulator the same code runs with wall-clock times (a smoke test, not a measurement).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field

import numpy as np

from qcore import ops
from qcore.kernels import cuda as ck
from qcore.kernels.cuda import cuda


@dataclass
class Timing:
    """One timed operation: medians in seconds over `repeat` runs.

    ``kernel_s`` is the kernel alone (the GPU's time per launch, data already on the device:
    see :func:`_time_events`); ``h2d_s`` / ``d2h_s`` the host->device copy of x and
    device->host copy of y; ``launch_s`` the host-side cost of one asynchronous launch
    (Python + driver, not waited for), which a caller pays on top of ``kernel_s`` whenever
    the GPU waits for the host.
    ``bytes_moved`` counts bytes read plus written by the kernel, for the roofline.
    """

    name: str
    elements: int
    bytes_moved: int
    kernel_s: float
    h2d_s: float = 0.0
    d2h_s: float = 0.0
    launch_s: float = 0.0
    device: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def elements_per_s(self) -> float:
        return self.elements / self.kernel_s if self.kernel_s > 0 else math.inf

    @property
    def bandwidth(self) -> float:
        """Bytes read + written per second by the kernel."""
        return self.bytes_moved / self.kernel_s if self.kernel_s > 0 else math.inf

    @property
    def end_to_end_s(self) -> float:
        return self.h2d_s + self.kernel_s + self.d2h_s


#: Launches timed back to back between one pair of CUDA events.
LAUNCHES = 20


def _time_events(fn, repeat: int, warmup: int = 1, launches: int = LAUNCHES) -> float:
    """Median seconds of one fn() on the GPU: CUDA events around `launches` back-to-back
    calls, divided by `launches`, over `repeat` rounds (wall clock under the simulator).

    Each round first enqueues a spin kernel that keeps the GPU busy for longer than the host
    needs to issue the calls (twice their measured host time, at least 1 ms), so all of them
    are queued before the start event fires: the events bracket the GPU's work alone, never
    the GPU idling while the host prepares a launch (:func:`_time_launch` measures that)."""
    for _ in range(warmup):
        fn()
    cuda.synchronize()
    if ck.SIMULATOR:
        times = []
        for _ in range(max(1, repeat)):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)
    spin = max(1e-3, 2 * launches * _time_launch(fn, 3))
    return _event_rounds(fn, repeat, launches, lambda: cuda.event(timing=True),
                         lambda: ck.launch_spin(spin))


def _event_rounds(fn, repeat: int, launches: int, event, spin) -> float:
    """Median seconds of one fn() over `repeat` rounds of `launches` back-to-back calls
    between two CUDA events (``event()`` makes one: numba's or torch's, whose elapsed_time is
    in ms), each round after ``spin()`` has queued work that keeps the GPU busy."""
    times = []
    for _ in range(max(1, repeat)):
        start, end = event(), event()
        spin()
        start.record()
        for _ in range(launches):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / launches)
    return statistics.median(times)


def _time_wall(fn, repeat: int) -> float:
    """Median wall-clock seconds of fn() between synchronisations (at most 3 runs: transfers
    of a large tensor take long and vary little)."""
    times = []
    for _ in range(max(1, min(repeat, 3))):
        cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _time_launch(fn, repeat: int) -> float:
    """Median host time to issue one launch (asynchronous), synchronising outside the clock."""
    times = []
    for _ in range(max(1, repeat)):
        cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    cuda.synchronize()
    return statistics.median(times)


def _timed_operator(name: str, flat: np.ndarray, d_y, launch, repeat: int,
                    kernel: str, transfers: bool = True) -> Timing:
    """The Timing of one operator's launch from flat (on the device) into d_y: the kernel by
    events, the copies (unless `transfers` is false: another kernel of the same case timed
    them) and the launch by wall time (bytes: x read, y written once)."""
    kernel_s = _time_events(launch, repeat)
    h_y = np.empty(d_y.size, d_y.dtype)
    t = Timing(name, int(flat.size), int(flat.nbytes + h_y.nbytes), kernel_s,
               launch_s=_time_launch(launch, repeat), device=ck.device_name())
    if transfers:
        t.h2d_s = _time_wall(lambda: cuda.to_device(flat), repeat)
        t.d2h_s = _time_wall(lambda: d_y.copy_to_host(h_y), repeat)
    t.extra["kernel"] = kernel
    return t


def _walks(walks: tuple, name: str, flat: np.ndarray, d_y, repeat: int, launcher,
           kernel_name) -> list[Timing]:
    """One Timing per rows walk (``launcher(walk)`` gives the launch); with several walks,
    each after the first starts from a poisoned y and its output is compared with the first
    walk's (``extra["agrees"]``), so a walk that writes wrong or no codes shows."""
    out, first = [], None
    for k, w in enumerate(walks):
        if k and not ck.SIMULATOR:
            from numba.cuda.cudadrv.driver import device_memset

            device_memset(d_y, 0xA5, d_y.nbytes)
        try:
            t = _timed_operator(name, flat, d_y, launcher(w), repeat, kernel_name(w),
                                transfers=k == 0)
        except Exception as exc:  # a walk that fails (to compile, say) leaves the others timed
            if k == 0 or len(walks) == 1:
                raise
            print(f"error: {name}, walk {w}: {type(exc).__name__}: {exc}", flush=True)
            continue
        if len(walks) > 1:
            got = d_y.copy_to_host()
            if first is None:
                first = got
            else:
                t.extra["agrees"] = bool(np.array_equal(got, first))
        out.append(t)
    return out


def bench_quantize(x: np.ndarray, y_scale, y_zero_point=None, *, repeat: int = 10,
                   name: str | None = None, walks: tuple = (None,),
                   **attributes) -> Timing | list[Timing]:
    """Time QuantizeLinear on the GPU for host array x: the kernel alone (x already on the
    device), the x upload and the y download separately. `attributes` are quantize_linear's
    (axis, block_size, saturate, output_dtype, precision, opset). With several `walks` (the
    rows walks of :func:`qcore.kernels.cuda.rows_kernel`), one Timing per walk, in a list,
    the transfers timed with the first."""
    call = ops.prepare_quantize(np.asarray(x), y_scale, y_zero_point, backend="cuda",
                                **attributes)
    plan, qp = call.plan, call.params()
    flat = call.flat_x()  # float32, int32, or 16-bit floats as uint16: as the kernel reads it
    storage = ck.code_storage(plan.target)
    d_x = cuda.to_device(flat)
    d_y = cuda.device_array(flat.size, storage)
    args = (d_x, cuda.to_device(call.scale), cuda.to_device(call.zero_point), d_y,
            call.layout_params(), qp)
    name = name or f"QuantizeLinear {plan.x.name}->{plan.target.name} {plan.layout.granularity}"
    out = _walks(walks, name, flat, d_y, repeat,
                 lambda w: lambda: ck.launch_quantize(*args, walk=w),
                 lambda w: ck.quantize_kernel_name(args[4], qp, args[2].size, w))
    return out if len(walks) > 1 else out[0]


def bench_dequantize(x: np.ndarray, x_scale, x_zero_point=None, *, repeat: int = 10,
                     name: str | None = None, walks: tuple = (None,),
                     **attributes) -> Timing | list[Timing]:
    """Time DequantizeLinear on the GPU like :func:`bench_quantize` (axis, block_size,
    output_dtype, opset; `walks`)."""
    call = ops.prepare_dequantize(np.asarray(x), x_scale, x_zero_point, backend="cuda",
                                  **attributes)
    plan = call.plan
    dp, table = call.params()
    flat = call.flat_x()
    out_dtype = np.float32 if plan.output.name == "float" else np.uint16
    d_y = cuda.device_array(flat.size, out_dtype)
    args = (cuda.to_device(flat), cuda.to_device(call.scale), cuda.to_device(call.zero_point),
            d_y, call.layout_params(), dp, ck.device_table(table))
    name = name or f"DequantizeLinear {plan.x.name}->{plan.output.name} {plan.layout.granularity}"
    out = _walks(walks, name, flat, d_y, repeat,
                 lambda w: lambda: ck.launch_dequantize(*args, walk=w),
                 lambda w: ck.dequantize_kernel_name(args[4], dp, flat.dtype.itemsize,
                                                     args[2].size, w))
    return out if len(walks) > 1 else out[0]


def bench_minmax(x: np.ndarray, *, repeat: int = 10,
                 name: str = "DynamicQuantizeLinear min/max pass") -> Timing:
    """Time the one-pass min/max/NaN-count reduction DynamicQuantizeLinear runs before its
    quantize pass (float32 x already on the device; reads x once)."""
    ck.backend_or_raise("bench_minmax")
    flat = np.ascontiguousarray(x, np.float32).reshape(-1)
    d_x = cuda.to_device(flat)
    buffers = ck.minmax_buffers(flat.size)
    kernel_s = _time_events(lambda: ck.launch_minmax(d_x, 0, *buffers), repeat)
    return Timing(name, int(flat.size), int(flat.nbytes), kernel_s,
                  h2d_s=_time_wall(lambda: cuda.to_device(flat), repeat),
                  launch_s=_time_launch(lambda: ck.launch_minmax(d_x, 0, *buffers), repeat),
                  device=ck.device_name())


def bench_dynamic(x: np.ndarray, *, repeat: int = 10,
                  name: str = "DynamicQuantizeLinear") -> Timing:
    """Time DynamicQuantizeLinear's two kernels on the device (the min/max pass, then the uint8
    quantize pass with the scale and zero point they give; bytes: x read twice, y written once),
    with the whole operator call on a device array (``extra["operator_s"]``: both kernels, the
    scale and zero point read back in between, the host's validation) beside it."""
    ck.backend_or_raise("bench_dynamic")
    flat = np.ascontiguousarray(x, np.float32).reshape(-1)
    d_x = cuda.to_device(flat)
    _, scale, zp = ops.dynamic_quantize_linear(flat[: min(flat.size, 1 << 20)])
    call = ops.prepare_quantize(flat, scale, zp, backend="cuda")
    d_y = cuda.device_array(flat.size, np.uint8)
    args = (d_x, cuda.to_device(call.scale), cuda.to_device(call.zero_point), d_y,
            call.layout_params(), call.params())
    buffers = ck.minmax_buffers(flat.size)

    def kernels():
        ck.launch_minmax(d_x, 0, *buffers)
        ck.launch_quantize(*args)

    kernel_s = _time_events(kernels, repeat)
    t = Timing(name, int(flat.size), int(2 * flat.nbytes + flat.size), kernel_s,
               h2d_s=_time_wall(lambda: cuda.to_device(flat), repeat),
               d2h_s=_time_wall(lambda: d_y.copy_to_host(), repeat),
               launch_s=_time_launch(kernels, repeat),
               device=ck.device_name())
    t.extra["operator_s"] = _time_wall(
        lambda: ops.dynamic_quantize_linear(d_x, backend="cuda"), repeat)
    t.extra["kernel"] = "minmax + " + " ".join(map(str, ck.quantize_family(args[4], args[5])))
    return t


def bench_copy(n_bytes: int = 256 << 20, *, repeat: int = 10) -> Timing:
    """Device-to-device copy bandwidth (bytes read + written per second): the roofline.

    Measured with a grid-stride copy kernel of the same shape as the quantize kernel, and
    reported with ``extra["memcpy_bandwidth"]`` from the driver's device-to-device copy.
    """
    ck.backend_or_raise("bench_copy")
    n = max(1, n_bytes // 4)
    src = cuda.to_device(np.ones(n, np.float32))
    dst = cuda.device_array(n, np.float32)
    kernel_s = _time_events(lambda: ck.launch_copy(src, dst), repeat)
    memcpy_s = _time_events(lambda: dst.copy_to_device(src), repeat)
    host = np.empty(n, np.float32)
    t = Timing("device copy", n, 2 * n * 4, kernel_s,
               h2d_s=_time_wall(lambda: cuda.to_device(host), repeat),
               d2h_s=_time_wall(lambda: src.copy_to_host(host), repeat),
               launch_s=_time_launch(lambda: ck.launch_copy(src, dst), repeat),
               device=ck.device_name())
    t.extra["memcpy_bandwidth"] = 2 * n * 4 / memcpy_s if memcpy_s > 0 else math.inf
    return t


def bench_cases(n: int = 1 << 26, *, repeat: int = 10, seed: int = 0,
                shape: tuple[int, int] | None = None, walks: tuple = (None,),
                rows_only: bool = False) -> list[Timing]:
    """The GPU benchmark set on a float32 matrix (`shape`, else (n/1024, 1024)): the copy
    roofline; QuantizeLinear int8/uint8 per-tensor, float8 e4m3fn/e5m2 and float4e2m1
    per-tensor; the rows family: int8 per-axis along the last and the first axis, int8/uint8
    blocked 32/128 along the rows, int4 blocked 32/128, float8e4m3fn blocked 32, MXFP8 and
    MXFP4 (float8e8m0 scales, blocks of 32), DequantizeLinear int8 blocked 32; DequantizeLinear
    int8 per-tensor, uint8 -> float16, and DynamicQuantizeLinear (its min/max pass and whole).
    The rows family runs once per rows walk in `walks` (None: the default walk); `rows_only`
    keeps the copy and the rows family alone."""
    if shape is None:
        shape = (max(1, n // 1024), 1024 if n >= 1024 else n)
    rows, cols = shape
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    out = [bench_copy(x.nbytes, repeat=repeat)]

    def add(result):
        out.extend(result if isinstance(result, list) else [result])

    def blocks(b, value=0.05, dtype=np.float32):
        bs = b if cols >= b else cols
        return np.full((rows, -(-cols // bs)), value, np.float32).astype(dtype), bs

    def q_rows(s, zp=None, **kw):
        add(bench_quantize(x, s, zp, repeat=repeat, walks=walks, **kw))

    if not rows_only:
        add(bench_quantize(x, np.float32(0.05), np.int8(0), repeat=repeat,
                           name="Q int8 per-tensor"))
        add(bench_quantize(x, np.float32(0.05), np.uint8(128), repeat=repeat,
                           name="Q uint8 per-tensor"))
    q_rows(np.full(cols, 0.05, np.float32), np.zeros(cols, np.int8), axis=1,
           name="Q int8 per-axis (last axis)")
    q_rows(np.full(rows, 0.05, np.float32), np.zeros(rows, np.int8), axis=0,
           name="Q int8 per-axis (first axis)")
    for b in (32, 128):
        s, bs = blocks(b)
        q_rows(s, np.zeros(s.shape, np.int8), axis=1, block_size=bs, name=f"Q int8 blocked {b}")
        q_rows(s, np.full(s.shape, 128, np.uint8), axis=1, block_size=bs,
               name=f"Q uint8 blocked {b}")
    for b in (32, 128):
        s, bs = blocks(b)
        q_rows(s, output_dtype="int4", axis=1, block_size=bs, name=f"Q int4 blocked {b}")
    s, bs = blocks(32)
    q_rows(s, output_dtype="float8e4m3fn", axis=1, block_size=bs,
           name="Q float8e4m3fn blocked 32")
    e8m0 = _e8m0()
    if e8m0 is not None:
        s8, bs = blocks(32, 2.0 ** -4, e8m0)
        q_rows(s8, output_dtype="float8e4m3fn", axis=1, block_size=bs,
               name="Q MXFP8 (float8e4m3fn, e8m0 scales) blocked 32")
        q_rows(s8, output_dtype="float4e2m1", axis=1, block_size=bs,
               name="Q MXFP4 (float4e2m1, e8m0 scales) blocked 32")
    if not rows_only:
        add(bench_quantize(x, np.float32(0.05), output_dtype="float8e4m3fn", repeat=repeat,
                           name="Q float8e4m3fn per-tensor"))
        add(bench_quantize(x, np.float32(0.05), output_dtype="float8e5m2", repeat=repeat,
                           name="Q float8e5m2 per-tensor"))
        add(bench_quantize(x, np.float32(0.5), output_dtype="float4e2m1", repeat=repeat,
                           name="Q float4e2m1 per-tensor"))
    codes = rng.integers(-128, 128, (rows, cols), dtype=np.int8)
    if not rows_only:
        add(bench_dequantize(codes, np.float32(0.05), np.int8(0), repeat=repeat,
                             name="DQ int8 per-tensor"))
    add(bench_dequantize(codes, s, np.zeros(s.shape, np.int8), axis=1, block_size=bs,
                         repeat=repeat, walks=walks, name="DQ int8 blocked 32"))
    if not rows_only:
        add(bench_dequantize(codes.view(np.uint8) >> 1, np.float32(0.05), repeat=repeat,
                             output_dtype="float16", name="DQ uint8 -> float16 per-tensor"))
        add(bench_minmax(x, repeat=repeat))
        add(bench_dynamic(x, repeat=repeat))
    return out


def _e8m0():
    """ml_dtypes' float8e8m0 (the MX scale type), or None with an ml_dtypes without it."""
    import ml_dtypes

    return getattr(ml_dtypes, "float8_e8m0fnu", None)


#: GPU speed targets (issue 30, on a real GPU): per case, the minimum fraction of the copy
#: roofline (None: none) and the minimum ratio to torch on the same GPU (None: none).
CUDA_TARGETS = {
    "Q int8 per-tensor": (0.7, 1.0),
    "Q uint8 per-tensor": (0.7, 1.0),
    "Q int8 per-axis (last axis)": (0.7, 1.0),
    "Q int8 per-axis (first axis)": (0.7, 1.0),
    "Q int8 blocked 32": (0.7, 1.0),
    "Q uint8 blocked 32": (0.7, 1.0),
    "Q int8 blocked 128": (0.7, 1.0),
    "Q uint8 blocked 128": (0.7, 1.0),
    "Q int4 blocked 32": (0.7, 1.0),
    "Q int4 blocked 128": (0.7, 1.0),
    "Q float8e4m3fn blocked 32": (0.7, 1.0),
    "Q MXFP8 (float8e4m3fn, e8m0 scales) blocked 32": (0.7, 1.0),
    "Q MXFP4 (float4e2m1, e8m0 scales) blocked 32": (0.7, None),
    "Q float8e4m3fn per-tensor": (None, 0.9),
    "DQ int8 per-tensor": (0.7, None),
    "DQ int8 blocked 32": (0.7, None),
    "DynamicQuantizeLinear min/max pass": (0.5, None),
    "DynamicQuantizeLinear": (0.5, None),
}


def roofline(copy: Timing) -> float:
    """The memory roofline in bytes (read + written) per second: the faster of the copy kernel
    and the driver's device-to-device copy, since neither alone is known to reach the memory's
    speed (on an H200 the driver's copy is the faster at 16384x16384)."""
    return max(copy.bandwidth, copy.extra.get("memcpy_bandwidth", 0.0))


def cuda_verdict(t: Timing, copy: Timing, torch_rate: float | None) -> str:
    """"≥0.7× roofline: met; ≥1× torch: NOT met" for a timed case ("—" without a target)."""
    target = CUDA_TARGETS.get(t.name)
    if target is None:
        return "—"
    fraction, vs_torch = target
    out = []
    if fraction is not None:
        out.append(f"≥{fraction:g}× roofline: "
                   f"{'met' if t.bandwidth >= fraction * roofline(copy) else 'NOT met'}")
    if vs_torch is not None and torch_rate:
        out.append(f"≥{vs_torch:g}× torch: "
                   f"{'met' if t.elements_per_s >= vs_torch * torch_rate else 'NOT met'}")
    return "; ".join(out) or "—"


def gpu_description() -> dict:
    """The GPU, its compute capability and the CUDA driver version, as numba sees them."""
    ck.backend_or_raise("gpu_description")
    info = {"gpu": ck.device_name()}
    if ck.SIMULATOR:
        return info
    dev = cuda.get_current_device()
    info["compute_capability"] = ".".join(map(str, dev.compute_capability))
    info["sm_count"] = int(dev.MULTIPROCESSOR_COUNT)
    try:
        from numba.cuda.cudadrv.driver import driver

        info["cuda_driver"] = ".".join(map(str, driver.get_version()))
    except Exception:  # pragma: no cover - an old numba
        pass
    info["float8_conversion_instruction"] = ck.fp8_conversion()
    return info


def _operator_note(t: Timing) -> str:
    op = t.extra.get("operator_s")
    agrees = t.extra.get("agrees")
    same = "" if agrees is None else (", the first kernel's output" if agrees
                                      else ", OUTPUT DIFFERS from the first kernel's")
    return (f" (whole operator call {op * 1e6:.0f} µs)" if op else "") + same


def _ms(seconds: float) -> str:
    """A transfer time in ms, "—" where it was not timed (another kernel of the case timed it)."""
    return f"{seconds * 1e3:.1f}" if seconds else "—"


def markdown_table(timings: list[Timing], rates: dict[str, float]) -> str:
    """The timings as a Markdown table: kernel time (the GPU's, per launch) and rate, the host's
    time to issue one launch, share of the copy roofline, torch, the kernel family, transfers
    (host->device of x, device->host of y) separately."""
    copy = timings[0]
    memcpy = copy.extra.get("memcpy_bandwidth", 0.0)
    lines = [f"roofline {roofline(copy) / 1e9:.0f} GB/s, the faster of the copy kernel "
             f"({copy.bandwidth / 1e9:.0f} GB/s, read + write) and the driver's device-to-device "
             f"copy ({memcpy / 1e9:.0f} GB/s); H2D {copy.h2d_s * 1e3:.1f} ms"
             f", D2H {copy.d2h_s * 1e3:.1f} ms for {copy.bytes_moved // 2 / 1e6:.0f} MB",
             "",
             "| case | kernel µs | launch µs | Gelem/s | GB/s | % roofline | torch Gelem/s | "
             "qcore/torch | kernel | H2D ms | D2H ms | targets |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for t in timings[1:]:
        rate = rates.get(t.name)
        vs = f"{rate / 1e9:.1f} | {t.elements_per_s / rate:.2f}×" if rate else "— | —"
        lines.append(
            f"| {t.name} | {t.kernel_s * 1e6:.1f} | {t.launch_s * 1e6:.0f} | "
            f"{t.elements_per_s / 1e9:.1f} | "
            f"{t.bandwidth / 1e9:.0f} | {100 * t.bandwidth / roofline(copy):.0f}% | {vs} | "
            f"{t.extra.get('kernel', '—')}{_operator_note(t)} | {_ms(t.h2d_s)} | {_ms(t.d2h_s)} | "
            f"{cuda_verdict(t, copy, rate)} |")
    return "\n".join(lines)


def tables_from_json(path: str) -> str:
    """The Markdown tables of a run saved with ``--json``, rendered by :func:`markdown_table`."""
    import json

    with open(path) as f:
        results = json.load(f)
    out = [f"GPU: {results['device']}"]
    for size in results["sizes"]:
        rows, cols = size["shape"]
        timings = [Timing(**t) for t in size["timings"]]
        out.append(f"\n### {rows}x{cols} float32\n\n{markdown_table(timings, size['torch'])}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """``python -m qcore.bench_cuda [--size 4096x4096,16384x16384] [--json F] [--markdown F]``."""
    import argparse
    import json
    from dataclasses import asdict

    parser = argparse.ArgumentParser(prog="python -m qcore.bench_cuda",
                                     description=main.__doc__)
    parser.add_argument("--size", default="4096x4096,16384x16384",
                        help="comma-separated ROWSxCOLS float32 matrices")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--no-peers", action="store_true", help="qcore only (no torch)")
    parser.add_argument("--walks", default="",
                        help="comma-separated rows walks to time the rows family with, side by "
                             "side (rows, batch; default: the default walk alone)")
    parser.add_argument("--rows-only", action="store_true",
                        help="the copy roofline and the rows family alone")
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--markdown", metavar="FILE")
    parser.add_argument("--from-json", metavar="FILE",
                        help="print the tables of a saved --json run (no GPU needed)")
    args = parser.parse_args(argv)
    if args.from_json:
        print(tables_from_json(args.from_json))
        return 0
    reason = ck.unavailable_reason()
    if reason:
        print(f"error: no usable GPU ({reason})")
        return 2
    walks = tuple(w.strip() for w in args.walks.split(",") if w.strip()) or (None,)
    bad = [w for w in walks if w is not None and w not in ck.cuda_rows.WALKS]
    if bad:
        print(f"error: --walks: {bad[0]!r} is not a rows walk (valid: "
              f"{', '.join(ck.cuda_rows.WALKS)})")
        return 2
    from qcore.bench import cuda_torch

    info = gpu_description()
    report = [f"GPU: {info}"]
    results = {"device": info, "sizes": []}
    print(report[0], flush=True)
    for text in args.size.split(","):
        rows, cols = (int(v) for v in text.lower().split("x"))
        t0 = time.perf_counter()
        timings = bench_cases(shape=(rows, cols), repeat=args.repeat, walks=walks,
                              rows_only=args.rows_only)
        rates = {} if args.no_peers else cuda_torch.torch_rates(
            (rows, cols), repeat=args.repeat, names={t.name for t in timings})
        table = markdown_table(timings, rates)
        block = f"\n### {rows}x{cols} float32 ({time.perf_counter() - t0:.0f} s)\n\n{table}"
        print(block, flush=True)
        report.append(block)
        results["sizes"].append({"shape": [rows, cols], "timings": [asdict(t) for t in timings],
                                 "torch": rates})
        # written after every size: a run cut short keeps the sizes it finished
        if args.markdown:
            with open(args.markdown, "w") as f:
                f.write("\n".join(report) + "\n")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
