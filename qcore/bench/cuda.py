"""GPU timing for ``python -m qcore.bench --backend cuda``: kernels alone, launches, transfers.

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

from .. import ops
from ..kernels import cuda as ck
from ..kernels.cuda import cuda


@dataclass
class Timing:
    """One timed operation: medians in seconds over `repeat` runs.

    ``kernel_s`` is the kernel alone (CUDA events around the launch, data already on the
    device); ``h2d_s`` / ``d2h_s`` the host->device copy of x and device->host copy of y;
    ``launch_s`` the host-side cost of one asynchronous launch (Python + driver, not waited for).
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


def _time_events(fn, repeat: int, warmup: int = 1) -> float:
    """Median seconds of fn() measured with CUDA events (wall clock under the simulator)."""
    for _ in range(warmup):
        fn()
    cuda.synchronize()
    times = []
    for _ in range(max(1, repeat)):
        if ck.SIMULATOR:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
            continue
        start, end = cuda.event(timing=True), cuda.event(timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def _time_wall(fn, repeat: int) -> float:
    times = []
    for _ in range(max(1, repeat)):
        cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _time_launch(fn, repeat: int) -> float:
    """Host time to issue one launch (asynchronous), synchronising outside the clock."""
    times = []
    for _ in range(max(1, repeat)):
        cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    cuda.synchronize()
    return statistics.median(times)


def bench_quantize(x: np.ndarray, y_scale, y_zero_point=None, *, repeat: int = 10,
                   name: str | None = None, **attributes) -> Timing:
    """Time QuantizeLinear on the GPU for host array x: the kernel alone (x already on the
    device), the x upload and the y download separately. `attributes` are quantize_linear's
    (axis, block_size, saturate, output_dtype, precision, opset)."""
    call = ops.prepare_quantize(np.asarray(x), y_scale, y_zero_point, backend="cuda",
                                **attributes)
    plan, qp = call.plan, call.params()
    flat = call.flat_x()  # float32, int32, or 16-bit floats as uint16: as the kernel reads it
    storage = ck.code_storage(plan.target)
    d_x = cuda.to_device(flat)
    d_y = cuda.device_array(flat.size, storage)
    args = (d_x, cuda.to_device(call.scale), cuda.to_device(call.zero_point), d_y,
            call.layout_params(), qp)
    kernel_s = _time_events(lambda: ck.launch_quantize(*args), repeat)
    h_y = np.empty(flat.size, storage)
    return Timing(
        name or f"QuantizeLinear {plan.x.name}->{plan.target.name} {plan.layout.granularity}",
        int(flat.size), int(flat.nbytes + h_y.nbytes), kernel_s,
        h2d_s=_time_wall(lambda: cuda.to_device(flat), repeat),
        d2h_s=_time_wall(lambda: d_y.copy_to_host(h_y), repeat),
        launch_s=_time_launch(lambda: ck.launch_quantize(*args), repeat),
        device=ck.device_name(),
    )


def bench_dequantize(x: np.ndarray, x_scale, x_zero_point=None, *, repeat: int = 10,
                     name: str | None = None, **attributes) -> Timing:
    """Time DequantizeLinear on the GPU like :func:`bench_quantize` (axis, block_size,
    output_dtype, opset)."""
    call = ops.prepare_dequantize(np.asarray(x), x_scale, x_zero_point, backend="cuda",
                                  **attributes)
    plan = call.plan
    dp, table = call.params()
    flat = call.flat_x()
    out_dtype = np.float32 if plan.output.name == "float" else np.uint16
    d_y = cuda.device_array(flat.size, out_dtype)
    args = (cuda.to_device(flat), cuda.to_device(call.scale), cuda.to_device(call.zero_point),
            d_y, call.layout_params(), dp, ck.device_table(table))
    kernel_s = _time_events(lambda: ck.launch_dequantize(*args), repeat)
    h_y = np.empty(flat.size, out_dtype)
    return Timing(
        name or f"DequantizeLinear {plan.x.name}->{plan.output.name} {plan.layout.granularity}",
        int(flat.size), int(flat.nbytes + h_y.nbytes), kernel_s,
        h2d_s=_time_wall(lambda: cuda.to_device(flat), repeat),
        d2h_s=_time_wall(lambda: d_y.copy_to_host(h_y), repeat),
        launch_s=_time_launch(lambda: ck.launch_dequantize(*args), repeat),
        device=ck.device_name(),
    )


def bench_minmax(x: np.ndarray, *, repeat: int = 10,
                 name: str = "DynamicQuantizeLinear min/max pass") -> Timing:
    """Time the two-pass min/max/NaN-count reduction DynamicQuantizeLinear runs before its
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
               device=ck.device_name())
    t.extra["memcpy_bandwidth"] = 2 * n * 4 / memcpy_s if memcpy_s > 0 else math.inf
    return t


def bench_cases(n: int = 1 << 26, *, repeat: int = 10, seed: int = 0) -> list[Timing]:
    """The GPU benchmark set: copy roofline, int8 per-tensor / per-axis / blocked, float8 e4m3fn,
    int4 blocked, float4e2m1, and DequantizeLinear int8 (a (n/1024, 1024) float32 matrix)."""
    rows = max(1, n // 1024)
    cols = 1024 if n >= 1024 else n
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    blocks = np.full((rows, cols // 32 if cols >= 32 else 1), 0.05, np.float32)
    bs = 32 if cols >= 32 else cols
    out = [bench_copy(x.nbytes, repeat=repeat)]
    out.append(bench_quantize(x, np.float32(0.05), np.int8(0), repeat=repeat,
                              name="Q int8 per-tensor"))
    out.append(bench_quantize(x, np.full(cols, 0.05, np.float32), np.zeros(cols, np.int8),
                              axis=1, repeat=repeat, name="Q int8 per-axis (last axis)"))
    out.append(bench_quantize(x, blocks, np.zeros(blocks.shape, np.int8), axis=1,
                              block_size=bs, repeat=repeat, name="Q int8 blocked 32"))
    out.append(bench_quantize(x, np.float32(1.0), output_dtype="float8e4m3fn", repeat=repeat,
                              name="Q float8e4m3fn per-tensor"))
    out.append(bench_quantize(x, blocks, output_dtype="int4", axis=1, block_size=bs,
                              repeat=repeat, name="Q int4 blocked 32"))
    out.append(bench_quantize(x, np.float32(0.5), output_dtype="float4e2m1", repeat=repeat,
                              name="Q float4e2m1 per-tensor"))
    codes = rng.integers(-128, 128, (rows, cols), dtype=np.int8)
    out.append(bench_dequantize(codes, np.float32(0.05), np.int8(0), repeat=repeat,
                                name="DQ int8 per-tensor"))
    out.append(bench_dequantize(codes.view(np.uint8) >> 1, np.float32(0.05), repeat=repeat,
                                output_dtype="float16", name="DQ uint8 -> float16 per-tensor"))
    out.append(bench_minmax(x, repeat=repeat))
    return out


#: GPU speed targets (issue: on a real GPU): minimum fraction of the copy roofline, and whether
#: torch on the same GPU must be matched where it has the case.
CUDA_TARGETS = {
    "Q int8 per-tensor": (0.7, True),
    "Q int8 blocked 32": (0.7, True),
    "Q float8e4m3fn per-tensor": (0.7, True),
    "DQ int8 per-tensor": (0.7, True),
    "DynamicQuantizeLinear min/max pass": (0.5, False),
}


def cuda_verdict(t: Timing, copy: Timing, torch_rate: float | None) -> str:
    """"≥0.7× roofline: met; ≥ torch: NOT met" for a timed case ("—" without a target)."""
    target = CUDA_TARGETS.get(t.name)
    if target is None:
        return "—"
    fraction, vs_torch = target
    out = [f"≥{fraction:g}× roofline: "
           f"{'met' if t.bandwidth >= fraction * copy.bandwidth else 'NOT met'}"]
    if vs_torch and torch_rate:
        out.append(f"≥ torch: {'met' if t.elements_per_s >= torch_rate else 'NOT met'}")
    return "; ".join(out)
