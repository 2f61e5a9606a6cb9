"""numba.cuda device code: the CUDA twin of :mod:`qcore.kernels.cpu`'s kernels.

The generic kernels: any layout, any input, precision and target type; one thread per element
in a grid-stride loop (the common cases run the specialised kernels of
:mod:`qcore.kernels.cuda_quantize` and :mod:`qcore.kernels.cuda_dequantize`). Each element
finds its scale and zero point through the layout's index map (:mod:`qcore.layout`: x as
``(pre, dim, post)``, the scale as ``(scale_pre, scale_blocks, scale_post)``) and is converted
by the *same* scalar functions the CPU kernels use (:mod:`qcore.kernels.scalar`; numba compiles
those ``@njit`` functions for the device when a kernel calls them). This module only moves data
and reinterprets bits; it holds no element rule of its own.

Parameters are the CPU path's: the NamedTuples of :mod:`qcore.kernels.params` ``lp`` (layout),
``qp`` (quantize) and ``dp`` (dequantize), passed by value, float32 scales, zero points
(float32 for quantize, float64 for dequantize), and the decode tables. Launching, copying and
the host/device API are :mod:`qcore.kernels.cuda`'s.

Under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) the same kernels run as Python threads; the
bit-cast and rint helpers then use NumPy scalars instead of libdevice, launches are small, and
the simulator's shared-array allocation is made thread-safe (see
:func:`_install_shared_array_lock`). The kernels specialised by layout and target family are
:mod:`qcore.kernels.cuda_quantize`'s and :mod:`qcore.kernels.cuda_dequantize`'s, the one-pass
min/max :mod:`qcore.kernels.cuda_minmax`'s.
"""

from __future__ import annotations

import sys

import numpy as np

from .params import DXKind, PKind
from .scalar import encode_f32_bits, half_bits, saturate_int
from .scalar import load_x as _scalar_load_x
from .scalar import round_to_precision as _scalar_round_to_precision

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


if SIMULATOR:
    def _install_shared_array_lock() -> None:
        """Make the simulator's ``cuda.shared.array`` thread-safe.

        numba's simulator (``FakeCUDAShared.array``) keys each shared array by the calling
        line and allocates it on first use with an unlocked check-then-insert. Its simulated
        threads are Python threads, so two threads of one block can both miss and each get a
        fresh ``np.empty`` array; thread 0 then folds slots nobody wrote (a NaN/Inf count of
        0x0101010101010104 once). A GPU has one shared array per block and no such race.
        This is that same method with the lookup and insert under a lock.
        """
        import threading

        from numba.core import types as _types
        from numba.cuda.simulator import kernelapi
        from numba.np import numpy_support

        original = kernelapi.FakeCUDAShared.array
        if getattr(original, "_qcore_locked", False):
            return
        lock = threading.Lock()

        def array(self, shape, dtype):
            if shape == 0:  # dynamic shared memory: one buffer made up front, no race
                return original(self, shape, dtype)
            if isinstance(dtype, _types.Type):
                dtype = numpy_support.as_dtype(dtype)
            caller = sys._getframe(1)
            key = (caller.f_code.co_filename, caller.f_lineno)
            with lock:
                res = self._allocations.get(key)
                if res is None:
                    res = self._allocations[key] = np.empty(shape, dtype)
            return res

        array._qcore_locked = True
        kernelapi.FakeCUDAShared.array = array

    _install_shared_array_lock()

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
        return _scalar_load_x(xv, xkind, pkind)

    @device_function
    def round_to_precision(v, pkind):
        return _scalar_round_to_precision(v, pkind)

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

    # The element functions of scalar.py, compiled for the device as they are
    load_x = _scalar_load_x
    round_to_precision = _scalar_round_to_precision


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
def quantize_kernel(x, s, z, y, lp, qp):
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
def dequantize_kernel(x, s, z, y, lp, dp, tab):
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
def pack_kernel(codes, bits, out):
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
def unpack_kernel(packed, bits, out):
    per = 8 // bits
    mask = (1 << bits) - 1
    for j in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        out[j] = (int64(packed[j // per]) >> ((j % per) * bits)) & mask


@cuda.jit
def copy_kernel(src, dst):
    """Plain element copy: the bandwidth roofline for the benchmark."""
    for i in range(cuda.grid(1), src.size, cuda.gridsize(1)):
        dst[i] = src[i]
