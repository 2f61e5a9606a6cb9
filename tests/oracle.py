"""A spec oracle for the ONNX linear-quantization operators, independent of qcore.

Written from the operator text (``onnx.defs.get_schema(...).doc``, the Cast operator's
saturation tables) and docs/semantics.md, with NumPy and ml_dtypes only: it imports
nothing from qcore. The differential tests use it where the onnx reference evaluator is known
to be wrong or where qcore documents a different decision; everywhere else they compare qcore
with the reference directly (and this oracle with both, so the oracle is itself checked).

Arithmetic facts the oracle relies on (each one rounding, to nearest even):

* NumPy's float32 ``/ + *`` are IEEE operations. NumPy's float16 and ml_dtypes' bfloat16
  operations are computed in float32 and rounded to 16 bits; because float32 has at least
  2p+2 significant bits (p = 11 or 8), that double rounding equals one correct rounding.
* ``float32 -> float16`` (NumPy) and ``float32/float16/bfloat16 -> float8/6/4`` (ml_dtypes) are
  correctly rounded single conversions. ``int32 -> bfloat16`` in ml_dtypes is *not* (it rounds
  to float32 first), so integers are rounded by :func:`round_float64` here.
"""

from __future__ import annotations

from functools import cache

import ml_dtypes
import numpy as np

F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)
E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)

#: ONNX type name -> NumPy / ml_dtypes dtype (one element per byte for sub-byte types).
DTYPES: dict[str, np.dtype] = {
    "float": F32,
    "float16": F16,
    "bfloat16": BF16,
    "int32": np.dtype(np.int32),
    "int2": np.dtype(ml_dtypes.int2),
    "uint2": np.dtype(ml_dtypes.uint2),
    "int4": np.dtype(ml_dtypes.int4),
    "uint4": np.dtype(ml_dtypes.uint4),
    "int8": np.dtype(np.int8),
    "uint8": np.dtype(np.uint8),
    "int16": np.dtype(np.int16),
    "uint16": np.dtype(np.uint16),
    "float8e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8e4m3fnuz": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "float8e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "float8e5m2fnuz": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "float6e2m3": np.dtype(ml_dtypes.float6_e2m3fn),
    "float6e3m2": np.dtype(ml_dtypes.float6_e3m2fn),
    "float4e2m1": np.dtype(ml_dtypes.float4_e2m1fn),
    "float8e8m0": E8M0,
}
NAMES = {dt: name for name, dt in DTYPES.items()}

#: Saturation ranges of the integer targets (the QuantizeLinear-25/28 text).
INT_RANGES = {
    "int2": (-2, 1), "uint2": (0, 3), "int4": (-8, 7), "uint4": (0, 15),
    "int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "uint16": (0, 65535),
}
FLOAT8 = ("float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz")
#: Small floats with neither Inf nor NaN: they always saturate (QuantizeLinear-28 text).
NO_SPECIALS = ("float4e2m1", "float6e2m3", "float6e3m2")
#: (mantissa bits, minimum normal exponent, largest finite value) of the division types.
FLOAT_LAYOUT = {
    "float": (23, -126, float(np.finfo(np.float32).max)),
    "float16": (10, -14, 65504.0),
    "bfloat16": (7, -126, float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)),
}


def name_of(dtype) -> str:
    return NAMES[np.dtype(dtype)]


@cache
def finfo_max(name: str) -> float:
    return float(ml_dtypes.finfo(DTYPES[name]).max)


def round_float64(v: np.ndarray, name: str) -> np.ndarray:
    """Round float64 values once (half to even) to the float type `name`; overflow gives ±Inf."""
    mbits, emin, max_finite = FLOAT_LAYOUT[name]
    v = np.asarray(v, np.float64)
    with np.errstate(all="ignore"):
        _, e = np.frexp(v)  # v = m * 2**e with 0.5 <= |m| < 1
        unit = np.maximum(e - 1 - mbits, emin - mbits)  # weight of the last kept bit
        r = np.ldexp(np.rint(np.ldexp(v, -unit)), unit)
        r = np.where(np.abs(r) > max_finite, np.copysign(np.inf, v), r)
    return r.astype(DTYPES[name])


def to_float(x: np.ndarray, name: str) -> np.ndarray:
    """x converted to the float type `name` with one rounding (integers included)."""
    x = np.asarray(x)
    if x.dtype == DTYPES[name]:
        return x
    if x.dtype.kind in "iu":
        return round_float64(x.astype(np.float64), name)  # int32 -> float64 is exact
    with np.errstate(all="ignore"):
        return x.astype(np.float32).astype(DTYPES[name])  # widening, then one rounding


def expand(param: np.ndarray, shape: tuple[int, ...], axis: int, block_size: int) -> np.ndarray:
    """A scale or zero point broadcast to x's shape, element by element (the spec's index map).

    One element: per-tensor. Else a 1-D parameter without block_size: per-axis. Else blocked:
    scale[..., i // block_size, ...] along `axis`, so a short last block is allowed.
    """
    param = np.asarray(param)
    if param.size == 1:
        return np.broadcast_to(param.reshape(()), shape)
    axis = axis % len(shape)
    if not block_size:
        dims = [1] * len(shape)
        dims[axis] = param.size
        return np.broadcast_to(param.reshape(dims), shape)
    index = np.arange(shape[axis]) // block_size
    return np.take(param, index, axis=axis)


def division_type(scale_dtype, precision: str | None) -> str:
    """The type `x / y_scale` is computed in: `precision`, else y_scale's type.

    decision in docs/semantics.md: an int32 or float8e8m0 scale (no float arithmetic of their own) divides in
    float32.
    """
    if precision:
        return precision
    name = name_of(scale_dtype)
    return "float" if name in ("int32", "float8e8m0") else name


def quotient(x, scale, *, axis=1, block_size=0, precision=None) -> np.ndarray:
    """`x / y_scale` in the division type: both operands rounded to it, one rounded division."""
    div = division_type(np.asarray(scale).dtype, precision)
    xd = to_float(x, div)
    sd = to_float(expand(scale, np.shape(x), axis, block_size), div)
    with np.errstate(all="ignore"):
        return (xd / sd).astype(DTYPES[div])


def quantize(x, scale, zero_point=None, *, axis=1, block_size=0, saturate=True,
             output_dtype=None, precision=None) -> np.ndarray:
    """QuantizeLinear: ``y = saturate(round(x / y_scale) + y_zero_point)``.

    Integers: round half to even, add the zero point, saturate to the range in either
    direction (never wrap); NaN gives the type's minimum whatever the zero point (docs/semantics.md).
    float8: the zero point is ignored (decision in docs/semantics.md: the onnx reference and onnxruntime both
    ignore it, so -0 stays -0). float4/float6: ``x / y_scale + y_zero_point`` in the division
    type (a *given* zero point is added, so -0 + 0 = +0), then one conversion with the Cast
    operator's tables:
    saturate=1 clips to ±max (NaN stays NaN), saturate=0 gives Inf or NaN as the format has
    them; float4/float6 always saturate, and NaN becomes +0 (decision in docs/semantics.md).
    """
    x = np.asarray(x)
    if zero_point is not None:
        target = name_of(np.asarray(zero_point).dtype)
    else:
        target = output_dtype or "uint8"
    q = quotient(x, scale, axis=axis, block_size=block_size, precision=precision)
    div = name_of(q.dtype)
    zp = None if zero_point is None else expand(zero_point, x.shape, axis, block_size)
    if target in FLOAT8:
        zp = None
    if target in INT_RANGES:
        lo, hi = INT_RANGES[target]
        with np.errstate(all="ignore"):
            t = np.rint(q).astype(np.float64)
            if zp is not None:
                t = t + zp.astype(np.float64)
            y = np.where(np.isnan(t), lo, np.clip(t, lo, hi))
        return y.astype(np.int64).astype(DTYPES[target])
    with np.errstate(all="ignore"):
        if zp is not None:
            q = (q + zp.astype(np.float32).astype(DTYPES[div])).astype(DTYPES[div])
        m = finfo_max(target)
        if target in NO_SPECIALS:
            q = np.where(np.isnan(q), q.dtype.type(0), np.clip(q, -m, m))
        elif saturate:
            q = np.clip(q, -m, m)
        return q.astype(DTYPES[target])


def dequantize(x, scale, zero_point=None, *, axis=1, block_size=0, output_dtype=None):
    """DequantizeLinear: ``y = (x - x_zero_point) * x_scale``.

    decision in docs/semantics.md: the difference is taken exactly and rounded once to float32 (it is exact
    in float32 for every type but int32 and float8 extremes), the product is a float32
    multiplication, and the result is rounded once to the output type (`output_dtype`, else
    x_scale's type; float32 for a float8e8m0 scale). A given zero point is subtracted, float4
    and float6 included; a non-zero float8 zero point is refused (ValueError), as the onnx
    reference and onnxruntime both refuse it.
    """
    x = np.asarray(x)
    scale = np.asarray(scale)
    if zero_point is not None and name_of(x.dtype) in FLOAT8:
        with np.errstate(all="ignore"):
            if (np.asarray(zero_point).astype(np.float64) != 0).any():
                raise ValueError("a float8 zero point must be zero in DequantizeLinear")
    if output_dtype:
        out = DTYPES[output_dtype]
    else:
        out = F32 if scale.dtype == E8M0 else scale.dtype
    with np.errstate(all="ignore"):
        v = x.astype(np.float64)
        if zero_point is not None:
            v = v - expand(zero_point, x.shape, axis, block_size).astype(np.float64)
        dx = v.astype(np.float32)
        y = dx * expand(scale, x.shape, axis, block_size).astype(np.float32)
        return y.astype(out)


def dynamic_quantize(x) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """DynamicQuantizeLinear-11 : uint8, scale and zero point from x's range.

    scale = (max(0, max x) - min(0, min x)) / 255 in float32 (1/255 for an all-zero x, docs/semantics.md);
    zero point = round(clip(-min / scale, 0, 255)); y = saturate(round(x / scale) + zp).
    """
    x = np.asarray(x, np.float32)
    hi = np.float32(max(0.0, float(x.max()))) if x.size else np.float32(0)
    lo = np.float32(min(0.0, float(x.min()))) if x.size else np.float32(0)
    span = np.float32(1) if hi == lo else np.float32(hi - lo)
    scale = np.float32(span / np.float32(255))
    zp = np.rint(np.clip(np.float32(0) - lo / scale, np.float32(0), np.float32(255)))
    zp = np.array(zp, np.float32).astype(np.uint8)
    y = quantize(x, np.array(scale, np.float32), zp)
    return y, np.array(scale, np.float32), zp
