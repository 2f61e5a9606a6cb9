"""The public operators: a call's values read and checked against its plan
(:mod:`qcore.plans`), then one kernel call."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import ml_dtypes
import numpy as np

from .errors import QuantizationError
from .formats import FLOAT, INT, Format, get_format
from .kernels import cpu
from .kernels.params import DequantizeParams, DXKind, LayoutParams, QuantizeParams, XKind
from .layout import Layout
from .plans import (
    KEPT,
    DequantizePlan,
    QuantizePlan,
    check_zero_point_shape,
    format_of,
    plan_dequantize,
    plan_quantize,
    remembered,
)
from .versions import DEQUANTIZE, DYNAMIC, LATEST_OPSET, QUANTIZE, OpVersion, check_type, resolve

BACKENDS = ("cpu", "cuda")
_NO_DECODE_TABLE = np.zeros(1, np.float64)


@cache
def decode_table(name: str) -> np.ndarray:
    """float64 value of every byte for a <= 8-bit format, indexed by the stored byte."""
    fmt = get_format(name)
    return np.arange(256, dtype=np.uint8).view(fmt.dtype).astype(np.float64)


def _is_device(value: Any) -> bool:
    """A CUDA device array: numba's (real or simulated) or any __cuda_array_interface__ object."""
    return not isinstance(value, np.ndarray) and (
        hasattr(value, "__cuda_array_interface__") or bool(getattr(value, "__cuda_ndarray__", False))
    )


def _require_device_backend(kernels, ov: OpVersion) -> None:
    if not hasattr(kernels, "quantize_device"):
        raise QuantizationError(
            f"{ov.label}: x is a CUDA device array; pass backend='cuda' (the result stays on "
            f"the device) or copy x to the host first"
        )


def _native(arr):
    """A byte-swapped (e.g. big-endian '>f4') array as the same values in native byte order."""
    if isinstance(arr, np.ndarray) and not arr.dtype.isnative:
        return arr.astype(arr.dtype.newbyteorder("="))
    return arr


def _as_array(value: Any, argument: str, ov: OpVersion, integer_dtype=None) -> np.ndarray:
    """NumPy array from an array, list or scalar; Python floats become float32.

    A CUDA device array x stays on the device (as a numba device array); device scales and zero
    points are small and are read to the host."""
    if _is_device(value):
        from .kernels import cuda as cuda_kernels

        value = cuda_kernels.as_device_array(value, ov.label)
        if argument == "x":
            return value
        value = value.copy_to_host()
    if isinstance(value, (np.ndarray, np.generic)):
        arr = np.asarray(value)
    else:
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError) as exc:
            raise QuantizationError(f"{ov.label}: {argument} is not an array: {exc}") from None
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        elif arr.dtype.kind in "iub" and integer_dtype is not None:
            arr = _cast_integers(arr, integer_dtype, argument, ov)
        elif arr.dtype.kind in "iu":
            arr = arr.astype(np.int32)
    arr = _native(arr)
    if arr.dtype == np.float64:
        raise QuantizationError(
            f"{ov.label}: {argument} is float64, which ONNX quantization operators do not accept; "
            f"convert it with .astype(np.float32) (valid: float32, float16, bfloat16, int32)"
        )
    if arr.dtype.kind in "OUS" or (arr.dtype.kind == "V" and arr.dtype.names is not None):
        raise QuantizationError(f"{ov.label}: {argument} has dtype {arr.dtype}; it must be numeric")
    return arr


def _cast_integers(arr: np.ndarray, dtype: np.dtype, argument: str, ov: OpVersion) -> np.ndarray:
    fmt = get_format(dtype)
    if fmt.kind == INT and arr.size and (arr.min() < fmt.min or arr.max() > fmt.max):
        raise QuantizationError(
            f"{ov.label}: {argument} values {arr.min()}..{arr.max()} do not fit {fmt.name} "
            f"[{int(fmt.min)}, {int(fmt.max)}]"
        )
    return arr.astype(fmt.dtype)


def _is_float8(fmt: Format) -> bool:
    return fmt.kind == FLOAT and fmt.bits == 8


def _check_backend(backend: str, ov: OpVersion):
    if backend == "cpu":
        return cpu
    if backend == "cuda":
        from .kernels import cuda as cuda_kernels

        return cuda_kernels.backend_or_raise(ov.label)
    raise QuantizationError(f"{ov.label}: backend={backend!r} is not valid; valid: "
                            + ", ".join(BACKENDS))


def _scale_values(ov: OpVersion, scale: np.ndarray, fmt: Format, argument: str,
                  precision: Format | None, check: bool = True) -> np.ndarray:
    """Scale values as float32, rounded to the precision type; zero/negative/non-finite refused
    (`check` False: by the kernel, see cpu.checks_values)."""
    with np.errstate(all="ignore"):
        values = scale.astype(np.float32, copy=False)  # read, never written
        if precision is not None and precision.name != "float":
            values = values.astype(precision.dtype).astype(np.float32)
    flat = values.reshape(-1)
    # two reductions and no temporaries (a NaN makes min NaN, which fails the comparison)
    if check and flat.size and not (flat.min() > 0 and flat.max() < np.inf):
        i = int(np.argmax(~np.isfinite(flat) | (flat <= 0)))
        where = f" (as {precision.name}, the division type)" if precision is not None else ""
        raise QuantizationError(
            f"{ov.label}: {argument} must be positive and finite, but element {i} is "
            f"{scale.reshape(-1)[i]!r}{where}; a zero, negative or non-finite scale has no "
            f"meaningful quantization"
        )
    return np.ascontiguousarray(flat)


def _zero_point_values(ov: OpVersion, zp: np.ndarray | None, scale: np.ndarray, fmt: Format,
                       argument: str, scale_name: str, dtype=np.float64) -> np.ndarray:
    """Zero points as the kernels read them: flat, `dtype` (float32 for QuantizeLinear, whose
    targets' zero points are all exact in float32 and whose kernels add them in float32: half
    the bytes to write per call and to read per element; float64 for DequantizeLinear, whose
    int32 zero points need it)."""
    # converted into a pooled buffer (cpu.new_output): blocked zero points are 1/32 of x
    if zp is None:
        return _zeros_per_scale(scale, dtype)
    check_zero_point_shape(ov, zp.shape, scale.shape, argument, scale_name)
    values = cpu.new_output(zp.size, dtype)
    with np.errstate(all="ignore"):
        np.copyto(values, zp.reshape(-1), casting="unsafe")
    if fmt.kind == FLOAT and not np.isfinite(values).all():
        raise QuantizationError(f"{ov.label}: {argument} must be finite, got {zp.reshape(-1)!r}")
    return values


def _zero_point_codes(ov: OpVersion, zp: np.ndarray | None, scale: np.ndarray,
                      target: Format) -> np.ndarray:
    """An integer target's zero points as the CPU integer kernels read them (see
    cpu.zero_point_view): its own codes, flat, no conversion; zeros when none was given."""
    if zp is None:
        return _zeros_per_scale(scale, np.int8 if target.itemsize == 1 else np.int16)
    check_zero_point_shape(ov, zp.shape, scale.shape, "y_zero_point", "y_scale")
    return cpu.zero_point_view(zp)


def _zeros_per_scale(scale: np.ndarray, dtype) -> np.ndarray:
    """One zero per scale (at least one) in a pooled buffer, for a call without a zero point:
    the kernels index zero points like scales."""
    zeros = cpu.new_output(max(scale.size, 1), dtype)
    zeros.fill(0)
    return zeros


def quantize_linear(x: Any, y_scale: Any, y_zero_point: Any = None, *, axis: int = 1,
                    block_size: int = 0, saturate: bool = True, output_dtype: Any = None,
                    precision: Any = None, opset: int = LATEST_OPSET,
                    backend: str = "cpu") -> np.ndarray:
    """ONNX QuantizeLinear at `opset`: ``y = saturate(round(x / y_scale) + y_zero_point)``.

    Rounding is half to even; the division happens in `precision`, else in y_scale's type. The
    result has the zero point's type, else `output_dtype`, else uint8 (an ml_dtypes dtype for
    the sub-byte and float8/6/4 types, one element per byte).
    """
    options = {"axis": axis, "block_size": block_size, "saturate": saturate,
               "output_dtype": output_dtype, "precision": precision, "opset": opset,
               "backend": backend}
    key, whole = _call_key(x, y_scale, y_zero_point, options)
    known = _CALLS.get(key) if key is not None else None
    if known is not None:
        if whole:
            scale, zero_point, plan, has_zero_point, params = known
        else:  # the plan is known; the scale and zero point values are read anew
            plan, params = known
            scale, zero_point, has_zero_point = _quantize_values(
                plan, y_scale, y_zero_point, _kernel_reading(cpu, params, x.size))
        return _run_quantize(cpu, x, scale, zero_point, plan, has_zero_point, params, y_scale)
    call = prepare_quantize(x, y_scale, y_zero_point, **options)
    params = None
    if key is not None:
        params = (layout_params(call.plan.layout), quantize_params(call.plan,
                                                                   call.has_zero_point))
    y = _run_quantize(call.kernels, call.x, call.scale, call.zero_point, call.plan,
                      call.has_zero_point, params, y_scale)
    if key is not None:  # remembered once it has run: a refused call never is
        if len(_CALLS) >= KEPT:
            _CALLS.clear()
        if whole:
            # copies (the scale may be a view of the caller's array, which they may change),
            # read only (shared by every call with this key); not the call, which holds x
            scale, zero_point = (np.array(v) for v in (call.scale, call.zero_point))
            scale.flags.writeable = zero_point.flags.writeable = False
            _CALLS[key] = (scale, zero_point, call.plan, call.has_zero_point, params)
        else:
            _CALLS[key] = (call.plan, params)
    return y


_CALLS: dict = {}  # _call_key -> what a validated call with that key runs (see there)


def _call_key(x: Any, y_scale: Any, y_zero_point: Any, options: dict) -> tuple:
    """(key, whole): a key under which a QuantizeLinear call's validation can be remembered, or
    (None, False).

    Only for the common call: x a host ndarray in native byte order (its data is never
    validated), the scale and the zero point NumPy values in native byte order, CPU backend.
    With one-element scale and zero point their bytes are in the key and the call is
    remembered whole (`whole`: its scale, zero point, plan and kernel parameters); otherwise
    the key holds their types and shapes and the plan and parameters are remembered, the values
    read and checked on every call (by the kernel where cpu.checks_values). Values are keyed
    with their types, as in plans.remembered. The key is one flat tuple: it is hashed on every
    call, and right after a kernel has streamed a large tensor through the caches Python runs
    several times slower than in a microbenchmark."""
    if (type(x) is not np.ndarray or not x.dtype.isnative or options["backend"] != "cpu"
            or y_scale is None):
        return None, False
    for value in (y_scale, y_zero_point):
        if value is not None and not (isinstance(value, (np.ndarray, np.generic))
                                      and value.dtype.isnative and not value.dtype.hasobject):
            return None, False
    whole = y_scale.size == 1 and (y_zero_point is None or y_zero_point.size == 1)
    # one flat tuple: the key is hashed on every call
    key = (x.dtype, x.shape, whole, type(y_scale), y_scale.dtype, y_scale.shape,
           y_scale.tobytes() if whole else None, type(y_zero_point),
           *((y_zero_point.dtype, y_zero_point.shape,
              y_zero_point.tobytes() if whole else None) if y_zero_point is not None else ()),
           *[(type(v), v) for v in options.values()])
    try:
        hash(key)
    except TypeError:  # an unhashable option
        return None, False
    return key, whole


@dataclass(frozen=True)
class PreparedCall:
    """A validated operator call, ready for a kernel (:func:`prepare_quantize`,
    :func:`prepare_dequantize`): what the operators run, and what the CUDA benchmark times.

    ``x`` keeps its shape (a device array stays on the device); ``scale`` is float32 (rounded to
    the precision type for QuantizeLinear), ``zero_point`` float32 for QuantizeLinear (the
    target's codes as int8/int16 for the CPU integer kernels: see _kernel_reading) and float64
    for DequantizeLinear, both flat, one zero per scale when none was given; ``kernels`` the
    backend module.
    """

    plan: Any  # QuantizePlan or DequantizePlan
    x: Any
    scale: np.ndarray
    zero_point: np.ndarray
    has_zero_point: bool
    kernels: Any

    def flat_x(self) -> np.ndarray:
        """x as the kernels read it: flat, C-contiguous, 16-bit floats and sub-byte/float8
        codes as their unsigned bits (a device array is returned as it is)."""
        if isinstance(self.plan, DequantizePlan):
            return _flat_codes(self.x, self.plan)
        return _flat_input(self.x)

    def params(self):
        """The kernels' parameters: QuantizeLinear's vector, or DequantizeLinear's
        (vector, decode table)."""
        if isinstance(self.plan, DequantizePlan):
            return dequantize_params(self.plan)
        return quantize_params(self.plan, self.has_zero_point)

    def layout_params(self) -> np.ndarray:
        return layout_params(self.plan.layout)


def prepare_quantize(x: Any, y_scale: Any, y_zero_point: Any = None, *, axis: int = 1,
                     block_size: int = 0, saturate: bool = True, output_dtype: Any = None,
                     precision: Any = None, opset: int = LATEST_OPSET,
                     backend: str = "cpu") -> PreparedCall:
    """Validate a QuantizeLinear call as :func:`quantize_linear` does (same arguments, same
    errors) and return what its kernel needs, without running it."""
    ov = resolve(QUANTIZE, opset)
    x = _as_array(x, "x", ov)
    y_scale = _as_array(y_scale, "y_scale", ov)
    zp_dtype = None
    if y_zero_point is not None:
        if not isinstance(y_zero_point, (np.ndarray, np.generic)):
            target_hint = output_dtype if output_dtype not in (None, 0) else "uint8"
            y_zero_point = _as_array(y_zero_point, "y_zero_point", ov,
                                     integer_dtype=format_of(ov, target_hint, "output_dtype").dtype)
            if get_format(target_hint).kind == FLOAT:
                y_zero_point = y_zero_point.astype(get_format(target_hint).dtype)
        y_zero_point = _native(np.asarray(y_zero_point))
        zp_dtype = y_zero_point.dtype
    plan = remembered(plan_quantize, x.dtype, x.shape, y_scale.dtype, y_scale.shape, zp_dtype,
                       None if y_zero_point is None else y_zero_point.shape, axis=axis,
                       block_size=block_size, saturate=saturate, output_dtype=output_dtype,
                       precision=precision, opset=opset)
    kernels = _check_backend(backend, ov)
    params = (layout_params(plan.layout), quantize_params(plan, False))
    s, z, has_zero_point = _quantize_values(plan, y_scale, y_zero_point,
                                            _kernel_reading(kernels, params, x.size))
    return PreparedCall(plan, x, s, z, has_zero_point, kernels)


def _quantize_values(plan: QuantizePlan, y_scale: Any, y_zero_point: Any,
                     reading: tuple[bool, bool] = (False, False)) -> tuple:
    """(scale, zero point, whether one was given) as the kernels read them, checked against
    the plan (see _scale_values, _zero_point_values). `reading`: whether the kernel checks the
    scales, and whether it reads the zero points as the target's codes (see _kernel_reading)."""
    ov = plan.version
    kernel_checks, codes = reading
    s = _scale_values(ov, np.asarray(y_scale), plan.scale, "y_scale", plan.precision,
                      check=not kernel_checks)
    if _is_float8(plan.target):
        # Both the onnx reference and onnxruntime ignore a float8 zero point in QuantizeLinear
        # (-0 stays -0, a zero point of 1 changes nothing); the spec says it is "usually not
        # used". qcore agrees with them (docs/semantics.md): its type names the target only.
        y_zero_point = None
    zp = None if y_zero_point is None else np.asarray(y_zero_point)
    if codes:
        z = _zero_point_codes(ov, zp, np.asarray(y_scale), plan.target)
    else:
        z = _zero_point_values(ov, zp, np.asarray(y_scale), plan.target, "y_zero_point",
                               "y_scale", np.float32)
    return s, z, y_zero_point is not None


def _kernel_reading(kernels, params: tuple, x_size: int) -> tuple[bool, bool]:
    """(whether the kernel for `params` (layout, quantize) checks the scales itself
    (cpu.checks_values), whether it reads the zero points as the target's codes
    (cpu.reads_codes)), x having elements for it to read."""
    if kernels is not cpu or x_size == 0:
        return False, False
    lp, qp = params
    return cpu.checks_values(qp, lp), cpu.reads_codes(qp, lp)


def quantize_params(plan: QuantizePlan, has_zero_point: bool) -> QuantizeParams:
    """The kernels' parameters for a plan (see :mod:`qcore.kernels.params`)."""
    return QuantizeParams.from_plan(plan, has_zero_point)


def layout_params(layout: Layout) -> LayoutParams:
    return LayoutParams.from_layout(layout)


def _flat_input(x: np.ndarray) -> np.ndarray:
    """x as a flat C-contiguous array; float16/bfloat16 as their uint16 bits (device arrays are
    passed through: the CUDA kernels flatten them on the device)."""
    if _is_device(x):
        return x
    flat = np.ascontiguousarray(x).reshape(-1)
    if flat.dtype in _HALF_DTYPES:
        return flat.view(np.uint16)
    return flat


_HALF_DTYPES = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def _run_quantize(kernels, x, s: np.ndarray, z: np.ndarray, plan: QuantizePlan,
                  has_zero_point: bool, params: tuple | None, y_scale: Any) -> np.ndarray:
    """Run the kernel (`params`: the plan's (layout, quantize) kernel parameters, when already
    made). A given zero point is added even when it is 0 (the formula's ``x / scale + zp``
    turns -0 into +0 for the float targets). A kernel that finds an unusable scale (see
    cpu.checks_values) has its call refused as _scale_values refuses it (`y_scale`: the scale
    as given, for the message)."""
    if _is_device(x):
        _require_device_backend(kernels, plan.version)
        return kernels.quantize_device(x, s, z, plan, quantize_params(plan, has_zero_point),
                                       layout_params(plan.layout))
    t = plan.target
    y = cpu.new_output(x.size, np.uint8 if t.itemsize == 1 else np.uint16)
    if x.size:
        if params is None:
            params = (layout_params(plan.layout), quantize_params(plan, has_zero_point))
        if kernels.quantize(_flat_input(x), s, z, y, *params):
            _scale_values(plan.version, np.asarray(y_scale), plan.scale, "y_scale",
                          plan.precision)
            raise AssertionError("the kernel found an unusable scale that _scale_values passed")
    return y.view(t.dtype).reshape(x.shape)


def dequantize_linear(x: Any, x_scale: Any, x_zero_point: Any = None, *, axis: int = 1,
                      block_size: int = 0, output_dtype: Any = None, opset: int = LATEST_OPSET,
                      backend: str = "cpu") -> np.ndarray:
    """ONNX DequantizeLinear at `opset`: ``y = (x - x_zero_point) * x_scale``.

    The difference is exact (int32: rounded once to float32), the product is computed in
    float32 and rounded once (half to even) to the output type: `output_dtype`, else x_scale's.
    """
    call = prepare_dequantize(x, x_scale, x_zero_point, axis=axis, block_size=block_size,
                              output_dtype=output_dtype, opset=opset, backend=backend)
    return _run_dequantize(call.kernels, call.x, call.scale, call.zero_point, call.plan)


def prepare_dequantize(x: Any, x_scale: Any, x_zero_point: Any = None, *, axis: int = 1,
                       block_size: int = 0, output_dtype: Any = None,
                       opset: int = LATEST_OPSET, backend: str = "cpu") -> PreparedCall:
    """Validate a DequantizeLinear call as :func:`dequantize_linear` does and return what its
    kernel needs, without running it."""
    ov = resolve(DEQUANTIZE, opset)
    x = _as_array(x, "x", ov)
    x_scale = _as_array(x_scale, "x_scale", ov)
    if x_zero_point is not None and not isinstance(x_zero_point, (np.ndarray, np.generic)):
        x_zero_point = _as_array(x_zero_point, "x_zero_point", ov, integer_dtype=x.dtype)
    elif x_zero_point is not None:
        x_zero_point = _native(np.asarray(x_zero_point))
    plan = remembered(plan_dequantize, x.dtype, x.shape, x_scale.dtype, x_scale.shape,
                       None if x_zero_point is None else x_zero_point.dtype,
                       None if x_zero_point is None else x_zero_point.shape, axis=axis,
                       block_size=block_size, output_dtype=output_dtype, opset=opset)
    kernels = _check_backend(backend, ov)
    s = _scale_values(ov, np.asarray(x_scale), plan.scale, "x_scale", None)
    if _is_float8(plan.x) and x_zero_point is not None:
        _refuse_float8_zero_point(plan, np.asarray(x_zero_point))
        x_zero_point = None
    z = _zero_point_values(ov, None if x_zero_point is None else np.asarray(x_zero_point),
                           np.asarray(x_scale), plan.x, "x_zero_point", "x_scale")
    return PreparedCall(plan, x, s, z, x_zero_point is not None, kernels)


def _refuse_float8_zero_point(plan: DequantizePlan, zp: np.ndarray) -> None:
    """A non-zero float8 zero point: the onnx reference and onnxruntime both refuse it in
    DequantizeLinear, so qcore does too (docs/semantics.md). -0 and 0 are zero."""
    with np.errstate(all="ignore"):
        values = zp.astype(np.float64).reshape(-1)
    bad = values != 0
    if bad.any():
        i = int(np.argmax(bad))
        raise QuantizationError(
            f"{plan.version.label}: x_zero_point must be zero for a {plan.x.name} x, but element "
            f"{i} is {float(values[i])!r}; a float8 zero point is not used (the onnx reference and "
            f"onnxruntime refuse a non-zero one too). Leave it out, or subtract it after "
            f"dequantizing"
        )


def dequantize_params(plan: DequantizePlan) -> tuple[DequantizeParams, np.ndarray]:
    """(parameters, decode table) for the dequantize kernel."""
    dp = DequantizeParams.from_plan(plan)
    table = decode_table(plan.x.name) if dp.xkind == DXKind.TABLE else _NO_DECODE_TABLE
    return dp, table


def _run_dequantize(kernels, x, s, z, plan: DequantizePlan) -> np.ndarray:
    dp, table = dequantize_params(plan)
    if _is_device(x):
        _require_device_backend(kernels, plan.version)
        return kernels.dequantize_device(x, s, z, plan, dp, layout_params(plan.layout), table)
    out = plan.output
    y = cpu.new_output(x.size, np.float32 if out.name == "float" else np.uint16)
    if x.size:
        kernels.dequantize(_flat_codes(x, plan), s, z, y, layout_params(plan.layout), dp, table)
    return y.view(out.dtype).reshape(x.shape)


def _flat_codes(x, plan: DequantizePlan):
    """Host codes as a flat C-contiguous array; sub-byte and float codes as their uint8 bits."""
    if _is_device(x):
        return x
    flat = np.ascontiguousarray(x).reshape(-1)
    if plan.x.kind != INT or plan.x.bits < 8:
        flat = flat.view(np.uint8)
    return flat


def dynamic_quantize_linear(x: Any, *, backend: str = "cpu",
                            opset: int = LATEST_OPSET) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ONNX DynamicQuantizeLinear-11: uint8 with scale and zero point from x's range.

    scale = (max(0, max x) - min(0, min x)) / 255 (1/255 when x is all zeros, as the onnx
    reference does), zero point = round(clip(-min/scale, 0, 255)), y = saturate(round(x/scale)+zp).
    x must be finite: a NaN or Inf would make the scale meaningless.
    """
    ov = resolve(DYNAMIC, opset)
    x = _as_array(x, "x", ov)
    fmt = format_of(ov, x.dtype, "x")
    check_type(ov, "x", "x", fmt.name)
    kernels = _check_backend(backend, ov)
    if _is_device(x):
        _require_device_backend(kernels, ov)
    if x.size == 0:
        lo = hi = 0.0
    else:
        lo, hi, bad = kernels.minmax(_flat_input(x), int(XKind.F32))
        if bad:
            raise QuantizationError(
                f"{ov.label}: x contains {bad} NaN/Inf value(s); the scale computed from x's "
                f"range would be meaningless. Remove or clip them first"
            )
    maxx = np.float32(max(0.0, hi))
    minx = np.float32(min(0.0, lo))
    with np.errstate(all="ignore"):
        span = np.float32(1.0) if maxx == minx else np.float32(maxx - minx)
        scale = np.float32(span / np.float32(255))
        zp_float = np.float32(np.float32(0) - minx / scale)
    if not np.isfinite(span):
        raise QuantizationError(
            f"{ov.label}: x's range max(0, max x) - min(0, min x) = {float(maxx):.4g} - "
            f"({float(minx):.4g}) overflows float32 (largest {float(np.finfo(np.float32).max):.4g}),"
            f" so the scale (range / 255) cannot be represented. Scale x down first"
        )
    if scale == 0:
        tiny = float(np.finfo(np.float32).smallest_subnormal)
        raise QuantizationError(
            f"{ov.label}: x's range max(0, max x) - min(0, min x) = {float(span):.4g} is so small "
            f"that the scale (range / 255) underflows to 0 in float32; the range must be at "
            f"least {255 * tiny:.3g} (255 x the smallest float32). Scale x up first"
        )
    zp = np.uint8(np.rint(np.clip(zp_float, np.float32(0), np.float32(255))))
    y = quantize_linear(x, np.array(scale, np.float32), np.array(zp, np.uint8), opset=19,
                        backend=backend)
    return y, np.array(scale, np.float32), np.array(zp, np.uint8)
