"""numba.cuda kernels: the CUDA twin of :mod:`qcore.kernels.cpu`, for ``backend="cuda"``.

One thread per element in a grid-stride loop. Each element finds its scale and zero point
through the layout's index map (:mod:`qcore.layout`: x as ``(pre, dim, post)``, the scale as
``(scale_pre, scale_blocks, scale_post)``) and is converted by the *same* scalar functions the CPU
kernels use (:mod:`qcore.kernels.scalar`; numba compiles those ``@njit`` functions for the
device when a kernel calls them). This module only moves data and reinterprets bits; it holds
no element rule of its own beyond the bfloat16 round-to-nearest-even bit trick that
:mod:`qcore.kernels.cpu` also applies.

Parameters are the CPU path's: the NamedTuples of :mod:`qcore.kernels.params` ``lp`` (layout),
``qp`` (quantize) and ``dp`` (dequantize), passed by value, float32 scales, float64 zero points,
and the decode tables.

Host API (what :mod:`qcore.ops` calls): :func:`quantize`, :func:`dequantize`, :func:`minmax`
on NumPy arrays (copy in, run, copy out); :func:`quantize_device` / :func:`dequantize_device` on
device arrays (numba device arrays or anything with ``__cuda_array_interface__``), whose results
stay on the device. :func:`pack_device` / :func:`unpack_device` pack sub-byte codes on the device.
:func:`bench_quantize`, :func:`bench_dequantize`, :func:`bench_copy` and :func:`bench_cases` time
kernels alone (CUDA events) and transfers separately, for ``python -m qcore.bench``.

Under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) the same kernels run as Python threads; the
bit-cast and rint helpers then use NumPy scalars instead of libdevice, and launches are small.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ..errors import QuantizationError
from .params import DXKind, PKind, XKind
from .scalar import encode_f32_bits, half_bits, saturate_int
from .scalar import load_x as _cpu_load_x
from .scalar import round_to_precision as _cpu_round_to_precision

try:  # numba builds without the CUDA target (or a broken install) must not break `import qcore`
    from numba import config as _numba_config
    from numba import cuda, float32, float64, int32, int64, uint32

    _IMPORT_ERROR: Exception | None = None
    SIMULATOR = bool(_numba_config.ENABLE_CUDASIM)
except Exception as _exc:  # pragma: no cover - depends on the installation
    _IMPORT_ERROR = _exc
    SIMULATOR = False

    class _NoCuda:
        """Stands in for numba.cuda so this module still imports; nothing here ever runs."""

        @staticmethod
        def jit(*args, **kwargs):
            if args and callable(args[0]):
                return args[0]
            return lambda fn: fn

    cuda = _NoCuda()
    float32 = float64 = int32 = int64 = uint32 = np.float32

#: Threads per block of the element kernels and of the min/max reduction (a power of two).
THREADS = 8 if SIMULATOR else 256
REDUCE_THREADS = 8 if SIMULATOR else 256
#: The simulator runs every thread as a Python thread: few blocks, so each thread loops.
_SIM_MAX_BLOCKS = 2

# ---------------------------------------------------------------------------------------------
# Device helpers: float bit reinterpretation and round-half-even, on a GPU and in the simulator
# ---------------------------------------------------------------------------------------------


def device_function(fn):
    """``cuda.jit(device=True)`` on a GPU. Under the simulator the plain Python function: the
    simulator's device-function wrapper rescans the module's globals on every call, which costs
    far more than the work, and these helpers use nothing of ``cuda``."""
    return fn if SIMULATOR else cuda.jit(device=True)(fn)


if SIMULATOR:

    @device_function
    def f32_to_bits(x):
        """IEEE bits of a float32 as uint32."""
        return np.float32(x).view(np.uint32)

    @device_function
    def bits_to_f32(b):
        """float32 whose IEEE bits are the low 32 bits of the integer b."""
        return np.uint32(int(b) & 0xFFFFFFFF).view(np.float32)

    @device_function
    def f64_to_bits(x):
        """IEEE bits of a float64 as int64."""
        return np.float64(x).view(np.int64)

    @device_function
    def rint_f32(v):
        """Round a float32 to an integral float32, half to even (NaN/Inf kept)."""
        return np.rint(np.float32(v))

    @device_function
    def load_x(xv, xkind, pkind):
        return _cpu_load_x(xv, xkind, pkind)

    @device_function
    def round_to_precision(v, pkind):
        return _cpu_round_to_precision(v, pkind)

elif _IMPORT_ERROR is None:
    from numba.cuda import libdevice

    @cuda.jit(device=True, inline=True)
    def f32_to_bits(x):
        """IEEE bits of a float32 as uint32."""
        return uint32(libdevice.float_as_int(float32(x)))

    @cuda.jit(device=True, inline=True)
    def bits_to_f32(b):
        """float32 whose IEEE bits are the low 32 bits of the integer b."""
        return libdevice.int_as_float(int32(b))

    @cuda.jit(device=True, inline=True)
    def f64_to_bits(x):
        """IEEE bits of a float64 as int64."""
        return libdevice.double_as_longlong(float64(x))

    @cuda.jit(device=True, inline=True)
    def rint_f32(v):
        """Round a float32 to an integral float32, half to even (NaN/Inf kept)."""
        return libdevice.rintf(float32(v))

    # The CPU kernels' element functions, compiled for the device as they are
    load_x = _cpu_load_x
    round_to_precision = _cpu_round_to_precision


@device_function
def scale_index(i, lp):
    """Index of element i's scale and zero point: the layout's index map (qcore.layout)."""
    if lp.uniform == 1:
        return int64(0)
    dim = lp.dim
    post = lp.post
    plane = dim * post
    p = i // plane
    r = i - p * plane
    d = r // post
    q = r - d * post
    if lp.scale_pre <= 1:
        p = 0
    if lp.scale_post <= 1:
        q = 0
    return (p * lp.scale_blocks + d // lp.block) * lp.scale_post + q


@device_function
def nan_f64_to_f32(w):
    """The float32 NaN a CPU makes of the float64 NaN w (sign and top payload kept, quieted).

    GPU arithmetic returns a canonical positive NaN instead, so NaNs never go through device
    arithmetic here: the kernels branch around it and build the CPU's bits directly.
    """
    b = f64_to_bits(w)
    sign = (b >> 63) & 1
    return bits_to_f32((sign << 31) | 0x7FC00000 | ((b >> 29) & 0x3FFFFF))


# ---------------------------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------------------------


@cuda.jit
def _quantize_kernel(x, s, z, y, lp, qp):
    n = x.size
    xkind = qp.xkind
    pkind = qp.pkind
    tkind = qp.tkind
    lo = qp.lo
    hi = qp.hi
    mask = qp.mask
    eb = qp.ebits
    mb = qp.mbits
    bias = qp.bias
    mc = qp.max_code
    has_inf = qp.has_inf == 1
    ns = qp.nan_style
    sat = qp.saturate == 1
    has_zp = qp.has_zp == 1
    zstep = 1 if z.size > 1 else 0  # one zero point may stand for all (none was given)
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        si = scale_index(i, lp)
        zi = si * zstep
        # x as float32 rounded to the precision type; a true division (never a reciprocal
        # multiply), rounded to the precision type
        v = load_x(x[i], xkind, pkind)
        q = round_to_precision(float32(v / s[si]), pkind)
        if tkind == 0:
            y[i] = int64(saturate_int(rint_f32(q), int64(z[zi]), lo, hi) & mask)
        else:
            if v != v:
                # NaN: a CPU's NaN / scale + zp is that NaN, and the float targets' NaN codes
                # keep its sign; GPU arithmetic would return a canonical positive NaN instead
                q = v
            elif has_zp:
                q = round_to_precision(float32(q + float32(z[zi])), pkind)
            y[i] = encode_f32_bits(f32_to_bits(q), eb, mb, bias, mc, has_inf, ns, sat)


@cuda.jit
def _dequantize_kernel(x, s, z, y, lp, dp, tab):
    n = x.size
    xkind = dp.xkind
    okind = dp.okind
    zstep = 1 if z.size > 1 else 0  # one zero point may stand for all (none was given)
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        si = scale_index(i, lp)
        zi = si * zstep
        # (x - zero_point) in float32 (exact for <= 16-bit types; int32: one rounding), times
        # the scale in float32, then rounded once to the output type
        if xkind == DXKind.NUMERIC:
            v = float32(float32(x[i]) - float32(z[zi])) * s[si]
        elif xkind == DXKind.TABLE:
            w = tab[int64(x[i])]
            if w != w:  # a NaN code: the CPU's NaN bits, without GPU arithmetic
                v = nan_f64_to_f32(w)
            else:
                v = float32(float32(w) - float32(z[zi])) * s[si]
        else:
            v = float32(int64(x[i]) - int64(z[zi])) * s[si]
        if okind == PKind.F32:
            y[i] = v
        else:
            y[i] = half_bits(v, okind)


@cuda.jit
def _minmax_partial_kernel(x, xkind, part_f, part_bad):
    """Per-block (min, max, count of NaN/Inf): grid-stride scan, then a shared-memory tree."""
    lo_s = cuda.shared.array(REDUCE_THREADS, float32)
    hi_s = cuda.shared.array(REDUCE_THREADS, float32)
    bad_s = cuda.shared.array(REDUCE_THREADS, int64)
    tid = cuda.threadIdx.x
    lo = float32(math.inf)
    hi = float32(-math.inf)
    bad = int64(0)
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        v = load_x(x[i], xkind, PKind.F32)
        if v != v:
            bad += 1
        else:
            if v == math.inf or v == -math.inf:
                bad += 1
            if v < lo:
                lo = v
            if v > hi:
                hi = v
    lo_s[tid] = lo
    hi_s[tid] = hi
    bad_s[tid] = bad
    cuda.syncthreads()
    step = REDUCE_THREADS // 2
    while step > 0:
        if tid < step:
            if lo_s[tid + step] < lo_s[tid]:
                lo_s[tid] = lo_s[tid + step]
            if hi_s[tid + step] > hi_s[tid]:
                hi_s[tid] = hi_s[tid + step]
            bad_s[tid] = bad_s[tid] + bad_s[tid + step]
        cuda.syncthreads()
        step //= 2
    if tid == 0:
        b = cuda.blockIdx.x
        part_f[b, 0] = lo_s[0]
        part_f[b, 1] = hi_s[0]
        part_bad[b] = bad_s[0]


@cuda.jit
def _minmax_final_kernel(part_f, part_bad, out_f, out_bad):
    """One block folds the per-block partials (second pass, same tree)."""
    lo_s = cuda.shared.array(REDUCE_THREADS, float32)
    hi_s = cuda.shared.array(REDUCE_THREADS, float32)
    bad_s = cuda.shared.array(REDUCE_THREADS, int64)
    tid = cuda.threadIdx.x
    lo = float32(math.inf)
    hi = float32(-math.inf)
    bad = int64(0)
    for b in range(tid, part_bad.size, REDUCE_THREADS):
        if part_f[b, 0] < lo:
            lo = part_f[b, 0]
        if part_f[b, 1] > hi:
            hi = part_f[b, 1]
        bad += part_bad[b]
    lo_s[tid] = lo
    hi_s[tid] = hi
    bad_s[tid] = bad
    cuda.syncthreads()
    step = REDUCE_THREADS // 2
    while step > 0:
        if tid < step:
            if lo_s[tid + step] < lo_s[tid]:
                lo_s[tid] = lo_s[tid + step]
            if hi_s[tid + step] > hi_s[tid]:
                hi_s[tid] = hi_s[tid + step]
            bad_s[tid] = bad_s[tid] + bad_s[tid + step]
        cuda.syncthreads()
        step //= 2
    if tid == 0:
        out_f[0] = lo_s[0]
        out_f[1] = hi_s[0]
        out_bad[0] = bad_s[0]


@cuda.jit
def _pack_kernel(codes, bits, out):
    """Byte i of ONNX's sub-byte layout: elements i*per .. i*per+per-1, lowest bits first."""
    per = 8 // bits
    mask = (1 << bits) - 1
    n = codes.size
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        v = 0
        for k in range(per):
            j = i * per + k
            if j < n:
                v |= (int64(codes[j]) & mask) << (k * bits)
        out[i] = v


@cuda.jit
def _unpack_kernel(packed, bits, out):
    per = 8 // bits
    mask = (1 << bits) - 1
    for j in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        out[j] = (int64(packed[j // per]) >> ((j % per) * bits)) & mask


@cuda.jit
def _copy_kernel(src, dst):
    """Plain element copy: the bandwidth roofline for the benchmark."""
    for i in range(cuda.grid(1), src.size, cuda.gridsize(1)):
        dst[i] = src[i]


# ---------------------------------------------------------------------------------------------
# Availability
# ---------------------------------------------------------------------------------------------


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


@lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """Why ``backend="cuda"`` cannot run here, or None when it can (cached per process)."""
    if _IMPORT_ERROR is not None:
        return f"numba.cuda cannot be imported ({_one_line(_IMPORT_ERROR)})"
    if SIMULATOR:
        return None
    try:
        from numba.cuda.cudadrv.driver import driver

        if not driver.is_available:
            return f"no usable CUDA driver ({_one_line(driver.initialization_error)})"
        count = driver.get_device_count()
    except Exception as exc:
        return f"the CUDA driver could not be initialised ({_one_line(exc)})"
    if count == 0:
        return "the CUDA driver found no GPU"
    try:
        if not cuda.is_available():
            return "no GPU with a compute capability this numba supports"
    except Exception as exc:
        return f"the GPU could not be used ({_one_line(exc)})"
    return None


def cuda_available() -> bool:
    """True when ``backend="cuda"`` can run (a usable GPU, or the CUDA simulator)."""
    return unavailable_reason() is None


def backend_or_raise(label: str):
    """This module, as the kernel backend, or a QuantizationError saying why CUDA is unusable."""
    reason = unavailable_reason()
    if reason is not None:
        raise QuantizationError(
            f"{label}: backend='cuda' is not available: {reason}. Use backend='cpu' "
            f"(qcore.cuda_available() tells whether CUDA can be used)"
        )
    return sys.modules[__name__]


# ---------------------------------------------------------------------------------------------
# Launch plumbing
# ---------------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _max_blocks() -> int:
    if SIMULATOR:
        return _SIM_MAX_BLOCKS
    try:
        return int(cuda.get_current_device().MULTIPROCESSOR_COUNT) * 32
    except Exception:  # pragma: no cover - attribute missing on an exotic driver
        return 4096


def _grid(n: int, threads: int = THREADS) -> int:
    return max(1, min((n + threads - 1) // threads, _max_blocks()))


_DEVICE_TABLES: dict[tuple[int, int], tuple[np.ndarray, object]] = {}


def _device_table(table: np.ndarray):
    """A read-only lookup table on the device, copied once per table (keyed by identity)."""
    key = (id(table), table.size)
    hit = _DEVICE_TABLES.get(key)
    if hit is None or hit[0] is not table:
        hit = (table, cuda.to_device(np.ascontiguousarray(table)))
        _DEVICE_TABLES[key] = hit
    return hit[1]


def is_device_array(obj) -> bool:
    """A numba device array (real or simulated) or anything with ``__cuda_array_interface__``."""
    if isinstance(obj, np.ndarray):
        return False
    return hasattr(obj, "__cuda_array_interface__") or bool(getattr(obj, "__cuda_ndarray__", False))


def as_device_array(obj, label: str = "CUDA"):
    """A numba device array viewing `obj` (zero copy): numba device arrays are returned as they
    are, other ``__cuda_array_interface__`` objects (CuPy, torch CUDA tensors) are wrapped."""
    backend_or_raise(label)
    if getattr(obj, "__cuda_ndarray__", False):
        return obj
    try:
        return cuda.as_cuda_array(obj)
    except Exception as exc:
        raise QuantizationError(
            f"{label}: x is a CUDA array numba cannot view ({_one_line(exc)}); pass a numba "
            f"device array or an object with a valid __cuda_array_interface__"
        ) from None


def _flat_device(d, label: str):
    """A device array as a flat C-contiguous view (no copy)."""
    if d.size == 0:
        return d
    contiguous = d.is_c_contiguous() if hasattr(d, "is_c_contiguous") else True
    if not contiguous:
        raise QuantizationError(
            f"{label}: the device array x is not C-contiguous (strides {tuple(d.strides)}); "
            f"make a contiguous copy on the device first"
        )
    return d.reshape(d.size)


def _storage_view(d, dtype):
    """View a device array as a plain integer/float dtype numba kernels can take."""
    dtype = np.dtype(dtype)
    return d if d.dtype == dtype else d.view(dtype)


def _code_storage(fmt) -> np.dtype:
    """Unsigned memory of the target's width for the codes (viewed as the target's dtype)."""
    return np.dtype(np.uint8 if fmt.itemsize == 1 else np.uint16)


def _launch_quantize(d_x, d_s, d_z, d_y, d_lp, d_qp) -> None:
    n = d_x.size
    if n:
        _quantize_kernel[_grid(n), THREADS](d_x, d_s, d_z, d_y, d_lp, d_qp)


def _launch_dequantize(d_x, d_s, d_z, d_y, d_lp, d_dp, d_tab) -> None:
    n = d_x.size
    if n:
        _dequantize_kernel[_grid(n), THREADS](d_x, d_s, d_z, d_y, d_lp, d_dp, d_tab)


def _quantize_input_view(flat, xkind: int):
    if xkind in (XKind.F16, XKind.BF16):
        return _storage_view(flat, np.uint16)
    return _storage_view(flat, np.int32 if xkind == XKind.I32 else np.float32)


# ---------------------------------------------------------------------------------------------
# Host API, same semantics as qcore.kernels.cpu: copy in, run, copy out into y
# ---------------------------------------------------------------------------------------------


def quantize(x, s, z, y, lp, qp) -> None:
    """QuantizeLinear of a flat host array x (float32 / 16-bit bits / int32) into host codes y."""
    d_y = cuda.device_array(y.size, y.dtype)
    _launch_quantize(cuda.to_device(np.ascontiguousarray(x)), cuda.to_device(s),
                     cuda.to_device(z), d_y, lp, qp)
    d_y.copy_to_host(y)


def dequantize(x, s, z, y, lp, dp, tab) -> None:
    """DequantizeLinear of flat host codes x into host y (float32, or float16/bfloat16 bits)."""
    d_y = cuda.device_array(y.size, y.dtype)
    _launch_dequantize(cuda.to_device(np.ascontiguousarray(x)), cuda.to_device(s),
                       cuda.to_device(z), d_y, lp, dp,
                       _device_table(tab))
    d_y.copy_to_host(y)


def minmax(x, xkind) -> tuple[float, float, int]:
    """(min, max, count of NaN/Inf) of x (host or device; float32, or float16/bfloat16 bits).

    NaNs are counted and left out of min and max; +-Inf are counted and included. A parallel
    reduction: per-block shared-memory trees, then one block folds the partials on the device.
    """
    if is_device_array(x):
        d_x = _flat_device(as_device_array(x, "DynamicQuantizeLinear"), "DynamicQuantizeLinear")
        if x.dtype in (np.float16,) or str(x.dtype) == "bfloat16":
            xkind = XKind.F16 if x.dtype == np.float16 else XKind.BF16
        d_x = _quantize_input_view(d_x, xkind)
    else:
        d_x = cuda.to_device(np.ascontiguousarray(x).reshape(-1))
    n = d_x.size
    if n == 0:
        return math.inf, -math.inf, 0
    blocks = _grid(n, REDUCE_THREADS)
    part_f = cuda.device_array((blocks, 2), np.float32)
    part_bad = cuda.device_array(blocks, np.int64)
    out_f = cuda.device_array(2, np.float32)
    out_bad = cuda.device_array(1, np.int64)
    _minmax_partial_kernel[blocks, REDUCE_THREADS](d_x, xkind, part_f,
                                                   part_bad)
    _minmax_final_kernel[1, REDUCE_THREADS](part_f, part_bad, out_f, out_bad)
    f = out_f.copy_to_host()
    return float(f[0]), float(f[1]), int(out_bad.copy_to_host()[0])


# ---------------------------------------------------------------------------------------------
# Device-array API: results stay on the device
# ---------------------------------------------------------------------------------------------


def quantize_device(x, s, z, plan, qp, lp):
    """QuantizeLinear of a device array x; returns a numba device array on the device.

    The result has x's shape and holds the codes in unsigned 8/16-bit memory, viewed as the
    target's dtype (int8 ... uint16 themselves; the ml_dtypes type, one element per byte,
    for float8/6/4 and the 2/4-bit integers), so ``y.copy_to_host()`` equals the CPU backend's
    array and ``dequantize_linear(y, ...)`` reads the right type. To hand the codes to another
    kernel or library, view them as the storage type: ``y.view(np.uint8)``.
    """
    label = plan.version.label
    d = as_device_array(x, label)
    flat = _quantize_input_view(_flat_device(d, label), qp.xkind)
    target = plan.target
    d_y = cuda.device_array(flat.size, _code_storage(target))
    _launch_quantize(flat, cuda.to_device(s), cuda.to_device(z), d_y, lp, qp)
    return _storage_view(d_y.reshape(tuple(d.shape)), target.dtype)


def dequantize_device(x, s, z, plan, dp, lp, table):
    """DequantizeLinear of a device array x; returns a numba device array of x's shape in the
    output type (float32, float16, or ml_dtypes bfloat16 over uint16 memory), on the device.

    x may hold an ml_dtypes type (as :func:`quantize_device` returns) or the plain integer types.
    """
    label = plan.version.label
    d = as_device_array(x, label)
    flat = _flat_device(d, label)
    xf = plan.x
    if xf.kind != "int" or xf.bits < 8:
        flat = _storage_view(flat, np.uint8)
    out = plan.output
    d_y = cuda.device_array(flat.size, np.float32 if out.name == "float" else np.uint16)
    _launch_dequantize(flat, cuda.to_device(s), cuda.to_device(z), d_y, lp, dp, _device_table(table))
    return _storage_view(d_y.reshape(tuple(d.shape)), out.dtype)


def pack_device(codes, dtype=None):
    """Pack 2/4-bit codes on the device into ONNX's layout (see :func:`qcore.packing.pack`).

    `codes` is a device array of a 2- or 4-bit type, one element per byte (as
    :func:`quantize_device` returns), or of uint8 codes with `dtype` naming the type. Returns a
    flat uint8 device array of ``qcore.packing.packed_size(n, dtype)`` bytes.
    """
    from ..packing import _subbyte_format, packed_size

    d = as_device_array(codes, "pack_device")
    fmt = _subbyte_format(dtype if dtype is not None else d.dtype)
    flat = _storage_view(_flat_device(d, "pack_device"), np.uint8)
    out = cuda.device_array(packed_size(flat.size, fmt), np.uint8)
    if out.size:
        _pack_kernel[_grid(out.size), THREADS](flat, fmt.bits, out)
    return out


def unpack_device(packed, dtype, shape):
    """Inverse of :func:`pack_device`: a device array of `dtype` (one element per byte)."""
    from ..packing import _subbyte_format, packed_size

    fmt = _subbyte_format(dtype)
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(shape)
    n = int(np.prod(shape, dtype=np.int64))
    d = _storage_view(_flat_device(as_device_array(packed, "unpack_device"), "unpack_device"),
                      np.uint8)
    if d.size != packed_size(n, fmt):
        raise QuantizationError(
            f"unpack_device: {d.size} bytes cannot hold shape {shape} of {fmt.name}; "
            f"expected {packed_size(n, fmt)} bytes"
        )
    out = cuda.device_array(n, np.uint8)
    if n:
        _unpack_kernel[_grid(n), THREADS](d, fmt.bits, out)
    return out.reshape(shape).view(fmt.dtype)


# ---------------------------------------------------------------------------------------------
# Timing helpers for `python -m qcore.bench --backend cuda`
# ---------------------------------------------------------------------------------------------


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


def device_name() -> str:
    """The GPU's name ("CUDA simulator" under the simulator)."""
    if SIMULATOR:
        return "CUDA simulator"
    backend_or_raise("device_name")
    name = cuda.get_current_device().name
    return name.decode() if isinstance(name, bytes) else str(name)


def _time_events(fn, repeat: int, warmup: int = 1) -> float:
    """Median seconds of fn() measured with CUDA events (wall clock under the simulator)."""
    for _ in range(warmup):
        fn()
    cuda.synchronize()
    times = []
    for _ in range(max(1, repeat)):
        if SIMULATOR:
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
    from .. import ops

    backend_or_raise("bench_quantize")
    x = np.asarray(x)
    y_scale = np.asarray(y_scale)
    zp = None if y_zero_point is None else np.asarray(y_zero_point)
    opset = attributes.pop("opset", ops.LATEST_OPSET)
    plan = ops.plan_quantize(x.dtype, x.shape, y_scale.dtype, y_scale.shape,
                             None if zp is None else zp.dtype, None if zp is None else zp.shape,
                             opset=opset, **attributes)
    ov = plan.version
    s = ops._scale_values(ov, y_scale, plan.scale, "y_scale", plan.precision)
    z = ops._zero_point_values(ov, zp, y_scale, plan.target, "y_zero_point", "y_scale")
    qp = ops.quantize_params(plan, zp is not None)
    flat = ops._flat_input(x)
    d_x = _quantize_input_view(cuda.to_device(flat), qp.xkind)
    d_y = cuda.device_array(flat.size, _code_storage(plan.target))
    args = (d_x, cuda.to_device(s), cuda.to_device(z), d_y,
            ops.layout_params(plan.layout), qp)
    kernel_s = _time_events(lambda: _launch_quantize(*args), repeat)
    h_y = np.empty(flat.size, _code_storage(plan.target))
    return Timing(
        name or f"QuantizeLinear {plan.x.name}->{plan.target.name} {plan.layout.granularity}",
        int(flat.size), int(flat.nbytes + h_y.nbytes), kernel_s,
        h2d_s=_time_wall(lambda: cuda.to_device(flat), repeat),
        d2h_s=_time_wall(lambda: d_y.copy_to_host(h_y), repeat),
        launch_s=_time_launch(lambda: _launch_quantize(*args), repeat),
        device=device_name(),
    )


def bench_dequantize(x: np.ndarray, x_scale, x_zero_point=None, *, repeat: int = 10,
                     name: str | None = None, **attributes) -> Timing:
    """Time DequantizeLinear on the GPU like :func:`bench_quantize` (axis, block_size,
    output_dtype, opset)."""
    from .. import ops

    backend_or_raise("bench_dequantize")
    x = np.asarray(x)
    x_scale = np.asarray(x_scale)
    zp = None if x_zero_point is None else np.asarray(x_zero_point)
    opset = attributes.pop("opset", ops.LATEST_OPSET)
    plan = ops.plan_dequantize(x.dtype, x.shape, x_scale.dtype, x_scale.shape,
                               None if zp is None else zp.dtype,
                               None if zp is None else zp.shape, opset=opset, **attributes)
    ov = plan.version
    s = ops._scale_values(ov, x_scale, plan.scale, "x_scale", None)
    z = ops._zero_point_values(ov, zp, x_scale, plan.x, "x_zero_point", "x_scale")
    dp, table = ops.dequantize_params(plan)
    flat = np.ascontiguousarray(x).reshape(-1)
    if plan.x.kind != "int" or plan.x.bits < 8:
        flat = flat.view(np.uint8)
    out_dtype = np.float32 if plan.output.name == "float" else np.uint16
    d_y = cuda.device_array(flat.size, out_dtype)
    args = (cuda.to_device(flat), cuda.to_device(s), cuda.to_device(z), d_y,
            ops.layout_params(plan.layout), dp,
            _device_table(table))
    kernel_s = _time_events(lambda: _launch_dequantize(*args), repeat)
    h_y = np.empty(flat.size, out_dtype)
    return Timing(
        name or f"DequantizeLinear {plan.x.name}->{plan.output.name} {plan.layout.granularity}",
        int(flat.size), int(flat.nbytes + h_y.nbytes), kernel_s,
        h2d_s=_time_wall(lambda: cuda.to_device(flat), repeat),
        d2h_s=_time_wall(lambda: d_y.copy_to_host(h_y), repeat),
        launch_s=_time_launch(lambda: _launch_dequantize(*args), repeat),
        device=device_name(),
    )


def bench_copy(n_bytes: int = 256 << 20, *, repeat: int = 10) -> Timing:
    """Device-to-device copy bandwidth (bytes read + written per second): the roofline.

    Measured with a grid-stride copy kernel of the same shape as the quantize kernel, and
    reported with ``extra["memcpy_bandwidth"]`` from the driver's device-to-device copy.
    """
    backend_or_raise("bench_copy")
    n = max(1, n_bytes // 4)
    src = cuda.to_device(np.ones(n, np.float32))
    dst = cuda.device_array(n, np.float32)
    kernel_s = _time_events(lambda: _copy_kernel[_grid(n), THREADS](src, dst), repeat)
    memcpy_s = _time_events(lambda: dst.copy_to_device(src), repeat)
    host = np.empty(n, np.float32)
    t = Timing("device copy", n, 2 * n * 4, kernel_s,
               h2d_s=_time_wall(lambda: cuda.to_device(host), repeat),
               d2h_s=_time_wall(lambda: src.copy_to_host(host), repeat),
               device=device_name())
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
    return out
