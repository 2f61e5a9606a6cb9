"""Validation without data: a call's dtypes, shapes and attributes checked against the
operator version table (:mod:`qcore.versions`) and resolved into a plan, the decisions the
kernels run by (:mod:`qcore.ops` runs them). A plan is a pure function of its arguments, so
plans are remembered (:func:`remembered`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from .errors import QuantizationError
from .formats import SCALE, Format, get_format
from .kernels.params import P_KINDS
from .layout import Layout, resolve_layout
from .versions import (
    ATTRIBUTE_DEFAULTS,
    DEQUANTIZE,
    LATEST_OPSET,
    QUANTIZE,
    OpVersion,
    check_attribute,
    check_type,
    resolve,
)


def format_of(ov: OpVersion, spec: Any, argument: str) -> Format:
    """get_format, with the operator version in the message of an unknown type."""
    try:
        return get_format(spec, argument)
    except QuantizationError as exc:
        raise QuantizationError(f"{ov.label}: {exc}") from None


def _is_default(value: Any, default: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, (str, bytes, np.ndarray)) or not np.isscalar(value):
        return False
    try:
        return bool(value == default)
    except (TypeError, ValueError):
        return False


def _check_attributes(ov: OpVersion, **given: Any) -> None:
    """Refuse attributes set away from their default at a version that lacks them."""
    for name, value in given.items():
        if name == "saturate":
            is_default = _check_saturate(ov, value)
        else:
            is_default = _is_default(value, ATTRIBUTE_DEFAULTS[name])
        if not is_default:
            check_attribute(ov, name)


def _check_saturate(ov: OpVersion, saturate: Any) -> bool:
    """saturate as a bool: only True/False, 0/1 and NumPy bools (ONNX's attribute is an int
    that is 0 or 1; `bool("false")` is True, so strings and other values are refused)."""
    if isinstance(saturate, (bool, np.bool_)):
        return bool(saturate)
    if isinstance(saturate, (int, np.integer)) and saturate in (0, 1):
        return bool(saturate)
    raise QuantizationError(
        f"{ov.label}: saturate={saturate!r} is not valid; valid: True or False (or 1 / 0)"
    )


_INT64_MAX = 2**63 - 1


def _check_shape(ov: OpVersion, shape: Any, argument: str) -> tuple[int, ...]:
    """A shape as a tuple of non-negative ints whose product an int64 index can address."""
    try:
        dims = tuple(shape)
    except TypeError:
        raise QuantizationError(
            f"{ov.label}: the shape of {argument} must be a tuple of integers, got {shape!r}"
        ) from None
    for d in dims:
        if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)) or d < 0:
            raise QuantizationError(
                f"{ov.label}: the shape of {argument} {dims!r} has dimension {d!r}; every "
                f"dimension must be a non-negative integer"
            )
    dims = tuple(int(d) for d in dims)
    if math.prod(dims) > _INT64_MAX:
        raise QuantizationError(
            f"{ov.label}: {argument} of shape {dims} has {math.prod(dims):.3e} elements, more "
            f"than an int64 index can address (at most 2**63 - 1)"
        )
    return dims


def _check_block_size(ov: OpVersion, block_size: Any) -> None:
    """block_size beyond int64 is no ONNX attribute value (the kernels index with int64)."""
    if isinstance(block_size, (int, np.integer)) and not isinstance(block_size, bool) \
            and block_size > _INT64_MAX:
        raise QuantizationError(
            f"{ov.label}: block_size={block_size} is larger than an int64 attribute can hold "
            f"(at most 2**63 - 1); valid block sizes are in [1, x.shape[axis]] for one block"
        )


def check_zero_point_shape(ov: OpVersion, zero_point_shape, scale_shape, zp_name: str,
                            scale_name: str) -> None:
    """The zero point must have the scale's shape (any two 1-element shapes agree)."""
    if zero_point_shape is None or tuple(zero_point_shape) == tuple(scale_shape):
        return
    if int(np.prod(zero_point_shape)) == 1 and int(np.prod(scale_shape)) == 1:
        return
    raise QuantizationError(
        f"{ov.label}: {zp_name} has shape {tuple(zero_point_shape)} but {scale_name} has shape "
        f"{tuple(scale_shape)}; they must have the same shape"
    )


def _given(value: Any) -> bool:
    """Whether an optional type attribute (output_dtype, precision) is set: None and ONNX's
    0 (UNDEFINED) both mean unset."""
    return value is not None and not (isinstance(value, (int, np.integer)) and value == 0)


class _Inputs(NamedTuple):
    """The checks both operators make first, in this order: x, scale and zero-point shapes,
    then x's and the scale's types."""

    x_shape: tuple[int, ...]
    scale_shape: tuple[int, ...]
    zero_point_shape: tuple[int, ...] | None
    x: Format
    scale: Format


def _check_inputs(ov: OpVersion, names: tuple[str, str, str], x_role: str, x_dtype, x_shape,
                  scale_dtype, scale_shape, zero_point_shape, block_size: Any) -> _Inputs:
    """The checks both operators share; `names` the (x, scale, zero point) argument names,
    `x_role` x's row in the version table."""
    x_name, scale_name, zp_name = names
    _check_block_size(ov, block_size)
    x_shape = _check_shape(ov, x_shape, x_name)
    scale_shape = _check_shape(ov, scale_shape, scale_name)
    if zero_point_shape is not None:
        zero_point_shape = _check_shape(ov, zero_point_shape, zp_name)
    xf = format_of(ov, x_dtype, x_name)
    check_type(ov, x_role, x_name, xf.name)
    sf = format_of(ov, scale_dtype, scale_name)
    check_type(ov, "scale", scale_name, sf.name)
    return _Inputs(x_shape, scale_shape, zero_point_shape, xf, sf)


def _layout(ov: OpVersion, names: tuple[str, str, str], inputs: _Inputs, axis: Any,
            block_size: Any) -> Layout:
    """The index map of x and the scale, then the zero point's shape against the scale's (the
    last checks of both operators)."""
    layout = resolve_layout(ov, inputs.x_shape, inputs.scale_shape, axis, block_size, names[1])
    check_zero_point_shape(ov, inputs.zero_point_shape, inputs.scale_shape, names[2], names[1])
    return layout


@dataclass(frozen=True)
class QuantizePlan:
    """Everything validation decided for one QuantizeLinear call."""

    version: OpVersion
    x: Format
    scale: Format
    target: Format
    precision: Format
    layout: Layout
    saturate: bool


_Q_NAMES = ("x", "y_scale", "y_zero_point")
_DQ_NAMES = ("x", "x_scale", "x_zero_point")


def plan_quantize(x_dtype, x_shape, scale_dtype, scale_shape, zero_point_dtype=None,
                  zero_point_shape=None, *, axis: int = 1, block_size: int = 0,
                  saturate: bool = True, output_dtype=None, precision=None,
                  opset: int = LATEST_OPSET) -> QuantizePlan:
    """Validate a QuantizeLinear configuration without data (what the app's version page uses)."""
    ov = resolve(QUANTIZE, opset)
    _check_attributes(ov, axis=axis, saturate=saturate, block_size=block_size,
                      output_dtype=output_dtype, precision=precision)
    inputs = _check_inputs(ov, _Q_NAMES, "x", x_dtype, x_shape, scale_dtype, scale_shape,
                           zero_point_shape, block_size)
    xf, sf = inputs.x, inputs.scale
    if ov.scale_follows_x and sf.name != xf.name:
        raise QuantizationError(
            f"{ov.label}: y_scale has type {sf.name} but x has type {xf.name}; at this version "
            f"y_scale must have x's type (different types are accepted from QuantizeLinear-23)"
        )
    target = format_of(ov, output_dtype, "output_dtype") if _given(output_dtype) else None
    if zero_point_dtype is not None:
        zf = format_of(ov, zero_point_dtype, "y_zero_point")
        if target is not None and target.name != zf.name:
            raise QuantizationError(
                f"{ov.label}: output_dtype={target.name} contradicts y_zero_point's type "
                f"{zf.name}; when both are given they must be the same type"
            )
        target = zf
    target = target or get_format("uint8")
    check_type(ov, "quantized", "the output type (y_zero_point / output_dtype)", target.name)
    if _given(precision):
        pf = format_of(ov, precision, "precision")
        if pf.name not in P_KINDS:
            raise QuantizationError(
                f"{ov.label}: precision={pf.name} is not a valid division type; valid: "
                f"float, float16, bfloat16"
            )
    else:
        pf = sf if sf.name in P_KINDS else get_format("float")
    layout = _layout(ov, _Q_NAMES, inputs, axis, block_size)
    return QuantizePlan(ov, xf, sf, target, pf, layout, _check_saturate(ov, saturate))


@dataclass(frozen=True)
class DequantizePlan:
    """Everything validation decided for one DequantizeLinear call."""

    version: OpVersion
    x: Format
    scale: Format
    output: Format
    layout: Layout


def plan_dequantize(x_dtype, x_shape, scale_dtype, scale_shape, zero_point_dtype=None,
                    zero_point_shape=None, *, axis: int = 1, block_size: int = 0,
                    output_dtype=None, opset: int = LATEST_OPSET) -> DequantizePlan:
    """Validate a DequantizeLinear configuration without data."""
    ov = resolve(DEQUANTIZE, opset)
    _check_attributes(ov, axis=axis, block_size=block_size, output_dtype=output_dtype)
    inputs = _check_inputs(ov, _DQ_NAMES, "quantized", x_dtype, x_shape, scale_dtype,
                           scale_shape, zero_point_shape, block_size)
    xf, sf = inputs.x, inputs.scale
    if zero_point_dtype is not None:
        zf = format_of(ov, zero_point_dtype, "x_zero_point")
        if zf.name != xf.name:
            raise QuantizationError(
                f"{ov.label}: x_zero_point has type {zf.name} but x has type {xf.name}; "
                f"they must be the same type"
            )
    if _given(output_dtype):
        of = format_of(ov, output_dtype, "output_dtype")
        check_type(ov, "output", "output_dtype", of.name)
    elif sf.kind == SCALE:
        of = get_format("float")  # a float8e8m0 scale cannot be an output type
    else:
        of = sf
    check_type(ov, "output", "the output type (x_scale's type / output_dtype)", of.name)
    return DequantizePlan(ov, xf, sf, of, _layout(ov, _DQ_NAMES, inputs, axis, block_size))


_PLANS: dict = {}  # (planner, its arguments) -> plan; see remembered
#: How many plans (and, in qcore.ops, validated calls) are kept before they are forgotten.
KEPT = 512


def remembered(planner, *args, **kwargs):
    """planner(*args, **kwargs), remembered: a plan is a pure function of the dtypes, shapes
    and attributes it is given, and validating them again is a large share of the Python time
    of a call whose kernel is fast. Each value is keyed with its type, since True == 1 but
    axis=True is an error where axis=1 is not; arguments that cannot be hashed are planned
    every time, and errors are never remembered."""
    try:
        key = (planner, *((type(a), a) for a in args),
               *((k, type(v), v) for k, v in sorted(kwargs.items())))
        plan = _PLANS.get(key)
    except TypeError:  # an unhashable argument
        return planner(*args, **kwargs)
    if plan is None:
        plan = planner(*args, **kwargs)
        if len(_PLANS) >= KEPT:
            _PLANS.clear()
        _PLANS[key] = plan
    return plan
