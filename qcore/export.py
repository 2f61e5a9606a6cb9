"""Quantized tensors as files other tools read without ml_dtypes or pickle.

- :func:`as_numpy`: integer formats as their values in the smallest NumPy integer type that
  holds them (int4 → int8 −8…7, uint2 → uint8 0…3); float formats as their stored codes.
- :func:`npz_bytes`: one ``.npz`` with y, the scale, the zero point and the attributes, enough
  to rebuild the QuantizeLinear node's initializers or to dequantize elsewhere.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from .formats import get_format

__all__ = ["as_numpy", "npz_bytes"]


def as_numpy(a: Any) -> np.ndarray:
    """`a` in a plain NumPy dtype: integers by value, small floats by their stored codes."""
    arr = np.asarray(a)
    fmt = get_format(arr.dtype)
    if fmt.is_integer:
        if arr.dtype.kind in "iu" and arr.dtype.itemsize * 8 == fmt.bits:
            return arr
        target = np.int8 if fmt.min < 0 else np.uint8
        if fmt.bits > 8:
            target = np.int16 if fmt.min < 0 else np.uint16
        return arr.astype(target)
    if arr.dtype in (np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.float64)):
        return arr
    return arr.view(fmt.storage_dtype)


def _values(a: Any) -> np.ndarray:
    """Scales / zero points as numbers in float32 (which widens bfloat16 and e8m0 exactly)."""
    arr = np.asarray(a)
    fmt = get_format(arr.dtype)
    return as_numpy(arr) if fmt.is_integer else arr.astype(np.float32)


def npz_bytes(y: Any, scale: Any, zero_point: Any = None, **attributes: Any) -> bytes:
    """An ``.npz`` with ``y`` (see :func:`as_numpy`), ``y_type`` (the ONNX type name),
    ``scale`` in its own type (float32 / float16 as such; bfloat16 and float8e8m0, which NumPy
    files cannot name, as their stored codes, with ``scale_values`` in float32 beside them),
    ``scale_type``, ``zero_point`` / ``zero_point_type`` (when there is one) and every
    attribute given (axis, block_size, saturate, opset, x_type, …) as 0-d arrays."""
    y = np.asarray(y)
    scale = np.asarray(scale)
    arrays: dict[str, np.ndarray] = {
        "y": as_numpy(y), "y_type": np.array(get_format(y.dtype).name),
        "scale": as_numpy(scale), "scale_type": np.array(get_format(scale.dtype).name),
    }
    if arrays["scale"].dtype != scale.dtype:  # codes: the values too, for readers without ml_dtypes
        arrays["scale_values"] = _values(scale)
    if zero_point is not None:
        arrays["zero_point"] = _values(zero_point)
        arrays["zero_point_type"] = np.array(get_format(np.asarray(zero_point).dtype).name)
    for name, value in attributes.items():
        if value is not None:
            arrays[name] = np.array(value)
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=False, **arrays)
    return buf.getvalue()
