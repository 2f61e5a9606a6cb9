"""The CUDA backend for ``backend="cuda"``: availability, launches, host and device-array API.

The device code is :mod:`qcore.kernels.cuda_kernels`; this module decides grids, moves data and
checks device arrays. What :mod:`qcore.ops` calls: :func:`quantize`, :func:`dequantize`,
:func:`minmax` on NumPy arrays (copy in, run, copy out); :func:`quantize_device` /
:func:`dequantize_device` on device arrays (numba device arrays or anything with
``__cuda_array_interface__``), whose results stay on the device. :func:`pack_device` /
:func:`unpack_device` pack sub-byte codes on the device; :func:`to_device` copies any host array,
ml_dtypes' types included. :func:`launch_quantize`,
:func:`launch_dequantize` and :func:`launch_copy` launch on device arrays already in place (what
``python -m qcore.bench --backend cuda`` times, :mod:`qcore.bench.cuda`), all through
:func:`launch` (the compiled overload kept per argument types, the grid capped at one wave).
"""

from __future__ import annotations

import math
import sys
from functools import lru_cache

import numpy as np

from ..errors import QuantizationError
from . import cuda_dequantize, cuda_device, cuda_minmax, cuda_quantize, cuda_rows
from .cuda_kernels import (
    _IMPORT_ERROR,
    _SIM_MAX_BLOCKS,
    REDUCE_THREADS,
    SIMULATOR,
    THREADS,
    copy_kernel,
    cuda,
    dequantize_kernel,
    pack_kernel,
    quantize_kernel,
    unpack_kernel,
)
from .cuda_rows import row_params  # noqa: F401 - the rows view, part of this API
from .params import DXKind, NanStyle, PKind, TKind, XKind

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


def grid(n: int, threads: int = THREADS) -> int:
    """Blocks for n elements: one element per thread, capped (the kernels grid-stride)."""
    return max(1, min((n + threads - 1) // threads, _max_blocks()))


_DEVICE_TABLES: dict[tuple[int, int], tuple[np.ndarray, object]] = {}


def device_table(table: np.ndarray):
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


def to_device(a):
    """A host array copied to the device, ml_dtypes' types (bfloat16, float8, int4...) included.

    numba's ``cuda.to_device`` reads the host array through the buffer protocol, which NumPy
    cannot offer for a type it does not know ("cannot include dtype 'E' in a buffer" on a real
    GPU; the simulator copies without it). Those arrays are copied as unsigned integers of
    their width and viewed as their own type on the device, as :func:`quantize_device` returns
    its codes."""
    backend_or_raise("to_device")
    a = np.ascontiguousarray(a)
    if a.dtype.isbuiltin == 2:  # a type registered by another package (ml_dtypes)
        return cuda.to_device(a.view(f"u{a.dtype.itemsize}")).view(a.dtype)
    return cuda.to_device(a)


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


def code_storage(fmt) -> np.dtype:
    """Unsigned memory of the target's width for the codes (viewed as the target's dtype)."""
    return np.dtype(np.uint8 if fmt.itemsize == 1 else np.uint16)


@lru_cache(maxsize=1)
def fp8_conversion() -> bool:
    """Whether the GPU converts float32 to float8 itself (compute capability >= 8.9)."""
    if SIMULATOR:
        return False
    try:
        return tuple(cuda.get_current_device().compute_capability) >= (8, 9)
    except Exception:  # pragma: no cover - no device
        return False


def _aligned(d, nbytes: int) -> bool:
    """Whether a device array's data starts on an nbytes boundary (the vector accesses)."""
    if SIMULATOR:
        return True
    try:
        return d.device_ctypes_pointer.value % nbytes == 0
    except Exception:  # pragma: no cover - an array numba cannot address
        return False


def _fp8_cvt_target(qp) -> bool:
    """float8 e4m3fn or e5m2, which the GPU's cvt instruction produces (not the fnuz types)."""
    e4m3fn = (4, 3, 7, 0x7E, 0, int(NanStyle.ALL_ONES))
    e5m2 = (5, 2, 15, 0x7B, 1, int(NanStyle.IEEE))
    return (qp.ebits, qp.mbits, qp.bias, qp.max_code, qp.has_inf, qp.nan_style) in (e4m3fn,
                                                                                    e5m2)


def _fp4_target(qp) -> bool:
    """float4 e2m1 (:func:`qcore.kernels.scalar.e2m1_code`; it always saturates, so the
    saturate flag does not matter)."""
    return (qp.ebits, qp.mbits, qp.bias, qp.max_code, qp.has_inf, qp.nan_style) == (
        2, 1, 1, 7, 0, int(NanStyle.NONE))


@lru_cache(maxsize=256)
def quantize_family(lp, qp) -> tuple[str, str, int] | None:
    """The specialised QuantizeLinear kernel for these parameters, as (layout family, target
    family, code bytes), or None for the generic kernel (16-bit or int32 x, a float16/bfloat16
    precision)."""
    if qp.xkind != XKind.F32 or qp.pkind != PKind.F32:
        return None
    if qp.tkind == TKind.INT:
        target, width = "int", (1 if qp.mask <= 0xFF else 2)
    else:
        target, width = ("fp8-cvt" if fp8_conversion() and _fp8_cvt_target(qp) else
                         "fp4" if _fp4_target(qp) else "float"), 1
    return ("per-tensor" if lp.uniform == 1 else "rows"), target, width


#: The rows walk the rows layouts take by default (:mod:`qcore.kernels.cuda_rows`): "flat"
#: where a layout's scale index is i // q, the batched walk where it serves the layout, the
#: one-row walk elsewhere ("rows", "batch", "stride", "pipe" pick one walk instead, for the
#: benchmark; on an H200 the flat and batched walks measured fastest, docs/cuda.md).
ROWS_WALK = "flat"


def rows_kernel(lp, z_size: int, walk: str | None = None):
    """(kernel layout, grid, threads, params) of a rows layout for `walk` (default
    :data:`ROWS_WALK`): :func:`qcore.kernels.cuda_rows.rows_kernel` on this device."""
    return cuda_rows.rows_kernel(lp, z_size, ROWS_WALK if walk is None else walk,
                                 _max_blocks())


_OVERLOADS: dict = {}


def _arg_key(a) -> object:
    """What fixes an argument's numba type here: an array's dtype and strides (the launchers
    pass 1-D C-contiguous device arrays only), a tuple's element classes, a scalar's class."""
    if isinstance(a, tuple):
        return type(a), tuple(map(type, a))
    strides = getattr(a, "strides", None)
    if strides is not None:
        return a.dtype, strides
    return type(a)


def launch(kernel, griddim, blockdim, *args) -> None:
    """Launch `kernel` (asynchronously, on the default stream).

    On a GPU the dispatcher's per-call work — typing every argument, resolving the overload,
    building a launch configuration — runs once per kernel and argument types: the compiled
    overload is kept and launched directly (numba's own argument marshalling, so the launch is
    the dispatcher's, minus the typing). The grid is capped at the blocks the GPU holds at
    once (every kernel launched here loops over its share), so no partial last wave of blocks
    leaves SMs idle. Under the simulator the dispatcher runs as written."""
    if SIMULATOR:
        kernel[griddim, blockdim](*args)
        return
    key = (kernel, tuple(map(_arg_key, args)))
    overload = _OVERLOADS.get(key)
    if overload is None:
        if any(getattr(a, "ndim", 1) != 1 for a in args):
            kernel[griddim, blockdim](*args)  # not a launcher's flat array: the dispatcher
            return
        overload = kernel.compile(tuple(kernel.typeof_pyval(a) for a in args))
        _OVERLOADS[key] = overload
    gx, gy = (griddim, 1) if isinstance(griddim, int) else griddim
    resident = _resident_blocks(overload, blockdim)
    if gx * gy > resident:  # every kernel here grid-strides: one wave of resident blocks
        gx = min(gx, resident)
        gy = max(1, resident // gx)
    if _DIRECT[0]:
        try:
            overload.launch(args, (gx, gy, 1), (blockdim, 1, 1), _launch_stream(), 0)
            return
        except TypeError:
            # this numba-cuda's compiled kernels take another stream object: launch through
            # the dispatcher from now on (its typing per call, the same kernel and grid)
            _DIRECT[0] = False
    kernel[(gx, gy), blockdim](*args)


#: Whether compiled overloads are launched directly (cleared if this numba-cuda refuses it).
_DIRECT = [True]


def _launch_stream() -> object:
    """The stream a direct launch names: the default stream, as the dispatcher's launch uses."""
    return cuda.default_stream()


_RESIDENT: dict = {}


def _resident_blocks(overload, threads: int) -> int:
    """How many blocks of `threads` the whole GPU holds at once for this compiled kernel (the
    driver's occupancy figure times the SM count; the device's block budget if unknown)."""
    key = (overload, threads)
    hit = _RESIDENT.get(key)
    if hit is None:
        try:
            hit = int(overload.max_cooperative_grid_blocks(threads))
        except Exception:  # pragma: no cover - a driver without the occupancy query
            hit = 0
        hit = hit if hit > 0 else _max_blocks()
        _RESIDENT[key] = hit
    return hit


def quantize_kernel_name(lp, qp, z_size: int, walk: str | None = None) -> str:
    """The kernel :func:`launch_quantize` runs for these parameters (an aligned x), as the
    benchmark names it: "per-tensor int 1", "batch-vec fp8-cvt 1", "rows int 2", "generic"."""
    family = quantize_family(lp, qp)
    if family is None:
        return "generic"
    if family[0] == "rows":
        family = (rows_kernel(lp, z_size, walk)[0],) + family[1:]
    return " ".join(map(str, family))


def launch_quantize(d_x, d_s, d_z, d_y, lp, qp, walk: str | None = None) -> None:
    """Launch QuantizeLinear on device arrays (asynchronous; the params go by value): the
    specialised kernel of :func:`quantize_family` where there is one, else the generic one.
    `walk` picks the rows walk of a rows layout (:func:`rows_kernel`; default
    :data:`ROWS_WALK`)."""
    n = d_x.size
    if not n:
        return
    family = quantize_family(lp, qp)
    if family is None or not _aligned(d_x, 16):
        launch(quantize_kernel, grid(n), THREADS, d_x, d_s, d_z, d_y, lp, qp)
        return
    if family[0] == "per-tensor":
        kernel = cuda_quantize.QUANTIZE_KERNELS[family]
        launch(kernel, grid(n, 4 * THREADS), THREADS, d_x, d_y, d_s, d_z, qp)
    else:
        layout, grid2, threads, rp = rows_kernel(lp, d_z.size, walk)
        kernel = cuda_quantize.QUANTIZE_KERNELS[(layout,) + family[1:]]
        launch(kernel, grid2, threads, d_x, d_y, d_s, d_z, qp, rp)


@lru_cache(maxsize=256)
def dequantize_family(lp, dp, x_itemsize: int) -> tuple[str, str] | None:
    """The specialised DequantizeLinear kernel, as (layout family, output family), for 8-bit
    codes (integers by value, the other 8-bit and sub-byte types by their decode table); None
    for the generic kernel (16- and 32-bit codes)."""
    if x_itemsize != 1 or dp.xkind == DXKind.I32:
        return None
    return ("per-tensor" if lp.uniform == 1 else "rows"), ("f32" if dp.okind == PKind.F32
                                                          else "half")


def dequantize_kernel_name(lp, dp, x_itemsize: int, z_size: int,
                           walk: str | None = None) -> str:
    """The kernel :func:`launch_dequantize` runs (an aligned x), as the benchmark names it."""
    family = dequantize_family(lp, dp, x_itemsize)
    if family is None:
        return "generic"
    if family[0] == "rows":
        family = (rows_kernel(lp, z_size, walk)[0], family[1])
    return " ".join(family)


def launch_dequantize(d_x, d_s, d_z, d_y, lp, dp, d_tab, walk: str | None = None) -> None:
    """Launch DequantizeLinear on device arrays (asynchronous; the params go by value): 8-bit
    codes through the specialised kernels (four per 32-bit load), the rest the generic one.
    `walk` picks the rows walk of a rows layout (:func:`rows_kernel`)."""
    n = d_x.size
    if not n:
        return
    family = dequantize_family(lp, dp, d_x.dtype.itemsize)
    if family is None or not _aligned(d_x, 4):
        launch(dequantize_kernel, grid(n), THREADS, d_x, d_s, d_z, d_y, lp, dp, d_tab)
        return
    signed = int(d_x.dtype == np.int8)
    if family[0] == "per-tensor":
        kernel = cuda_dequantize.DEQUANTIZE_KERNELS[family]
        launch(kernel, grid(n, 4 * THREADS), THREADS, d_x, d_y, d_s, d_z, dp, signed, d_tab)
    else:
        layout, grid2, threads, rp = rows_kernel(lp, d_z.size, walk)
        kernel = cuda_dequantize.DEQUANTIZE_KERNELS[(layout, family[1])]
        launch(kernel, grid2, threads, d_x, d_y, d_s, d_z, dp, signed, d_tab, rp)


def launch_copy(d_src, d_dst) -> None:
    """Launch the plain copy kernel (the bandwidth roofline; asynchronous)."""
    n = d_src.size
    if n:
        launch(copy_kernel, grid(n), THREADS, d_src, d_dst)


def launch_spin(seconds: float) -> None:
    """Keep the GPU busy for about `seconds` (asynchronous; see cuda_device.spin_kernel)."""
    launch(cuda_device.spin_kernel, 1, 1, int(seconds * 1e9))


def minmax_buffers(n: int):
    """Device accumulators of the one-pass reduction: (min, max) as order keys, NaN/Inf count."""
    return cuda.device_array(2, np.int32), cuda.device_array(1, np.int64)


def launch_minmax(d_x, xkind: int, keys, bad) -> None:
    """Launch the one-pass min/max/NaN-count reduction (buffers: :func:`minmax_buffers`): the
    accumulators are reset, then every block folds its share and adds it with one atomic per
    quantity."""
    launch(cuda_minmax.minmax_init_kernel, 1, 1, keys, bad)
    per_thread = 4 if xkind == XKind.F32 else 1
    launch(cuda_minmax.minmax_kernel, grid(d_x.size, per_thread * REDUCE_THREADS), REDUCE_THREADS,
           d_x, int(xkind), keys, bad)


def quantize_input_view(flat, xkind: int):
    """x's flat device array as the kernel reads it (16-bit floats as uint16 bits)."""
    if xkind in (XKind.F16, XKind.BF16):
        return _storage_view(flat, np.uint16)
    return _storage_view(flat, np.int32 if xkind == XKind.I32 else np.float32)


# ---------------------------------------------------------------------------------------------
# Host API, same semantics as qcore.kernels.cpu: copy in, run, copy out into y
# ---------------------------------------------------------------------------------------------


def quantize(x, s, z, y, lp, qp) -> None:
    """QuantizeLinear of a flat host array x (float32 / 16-bit bits / int32) into host codes y."""
    d_y = cuda.device_array(y.size, y.dtype)
    launch_quantize(cuda.to_device(np.ascontiguousarray(x)), cuda.to_device(s),
                    cuda.to_device(z), d_y, lp, qp)
    d_y.copy_to_host(y)


def dequantize(x, s, z, y, lp, dp, tab) -> None:
    """DequantizeLinear of flat host codes x into host y (float32, or float16/bfloat16 bits)."""
    d_y = cuda.device_array(y.size, y.dtype)
    launch_dequantize(cuda.to_device(np.ascontiguousarray(x)), cuda.to_device(s),
                      cuda.to_device(z), d_y, lp, dp, device_table(tab))
    d_y.copy_to_host(y)


def minmax(x, xkind) -> tuple[float, float, int]:
    """(min, max, count of NaN/Inf) of x (host or device; float32, or float16/bfloat16 bits).

    NaNs are counted and left out of min and max; +-Inf are counted and included. One pass:
    warp shuffles, then one atomic per block (:func:`qcore.kernels.cuda_minmax.minmax_kernel`).
    """
    if is_device_array(x):
        d_x = _flat_device(as_device_array(x, "DynamicQuantizeLinear"), "DynamicQuantizeLinear")
        if x.dtype in (np.float16,) or str(x.dtype) == "bfloat16":
            xkind = XKind.F16 if x.dtype == np.float16 else XKind.BF16
        d_x = quantize_input_view(d_x, xkind)
    else:
        d_x = cuda.to_device(np.ascontiguousarray(x).reshape(-1))
    if d_x.size == 0:
        return math.inf, -math.inf, 0
    keys, bad = minmax_buffers(d_x.size)
    if xkind == XKind.F32 and not _aligned(d_x, 16):
        d_x = cuda.to_device(d_x.copy_to_host())  # the vector loads need an aligned start
    launch_minmax(d_x, xkind, keys, bad)
    lo, hi = cuda_minmax.key_values(keys.copy_to_host())
    return float(lo), float(hi), int(bad.copy_to_host()[0])


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
    flat = quantize_input_view(_flat_device(d, label), qp.xkind)
    target = plan.target
    d_y = cuda.device_array(flat.size, code_storage(target))
    launch_quantize(flat, cuda.to_device(s), cuda.to_device(z), d_y, lp, qp)
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
    launch_dequantize(flat, cuda.to_device(s), cuda.to_device(z), d_y, lp, dp,
                      device_table(table))
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
        pack_kernel[grid(out.size), THREADS](flat, fmt.bits, out)
    return out


def unpack_device(packed, dtype, shape):
    """Inverse of :func:`pack_device`: a device array of `dtype` (one element per byte)."""
    from ..packing import _subbyte_format, unpacked_shape

    fmt = _subbyte_format(dtype)
    d = _storage_view(_flat_device(as_device_array(packed, "unpack_device"), "unpack_device"),
                      np.uint8)
    shape, n = unpacked_shape(d.size, fmt, shape, "unpack_device")
    out = cuda.device_array(n, np.uint8)
    if n:
        unpack_kernel[grid(n), THREADS](d, fmt.bits, out)
    return out.reshape(shape).view(fmt.dtype)


def device_name() -> str:
    """The GPU's name ("CUDA simulator" under the simulator)."""
    if SIMULATOR:
        return "CUDA simulator"
    backend_or_raise("device_name")
    name = cuda.get_current_device().name
    return name.decode() if isinstance(name, bytes) else str(name)
