"""Scale and zero point as data: :class:`QuantParams` and the checks on what may be quantized.

A leaf below :mod:`qcore.calibration` (which chooses parameters) and :mod:`qcore.metrics` (which
measures what they did): both use it, neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from .errors import QuantizationError
from .formats import INT, QUANTIZED_TYPES, Format, get_format
from .layout import PER_TENSOR, Layout, resolve_layout
from .ops import QuantizePlan, dequantize_linear, plan_quantize, quantize_linear
from .versions import LATEST_OPSET, QUANTIZE, resolve

#: Types a scale may be stored in.
SCALE_DTYPES = ("float", "float16", "bfloat16", "float8e8m0")


@dataclass(frozen=True)
class QuantParams:
    """Scale and zero point for one tensor, shaped for qcore's operators."""

    scale: np.ndarray
    zero_point: np.ndarray | None
    axis: int
    block_size: int  # 0 unless blocked
    granularity: str
    method: str
    target: str = ""  # format name; "" when unknown (then the zero point's type names it)
    clip_ratio: float = 1.0  # per-tensor threshold / amax (informational; NaN per group)

    @property
    def kwargs(self) -> dict[str, int]:
        """``axis`` and ``block_size`` for quantize_linear / dequantize_linear.

        Per-tensor uses the ONNX default axis 1 (valid at every opset, even QuantizeLinear-10).
        """
        if self.granularity == PER_TENSOR:
            return {"axis": 1, "block_size": 0}
        return {"axis": self.axis, "block_size": self.block_size}

    @property
    def format(self) -> Format:
        """The target format."""
        if self.target:
            return get_format(self.target)
        if self.zero_point is not None:
            return get_format(self.zero_point.dtype)
        raise QuantizationError("QuantParams has neither a target nor a zero point")

    @property
    def n_scales(self) -> int:
        return int(np.asarray(self.scale).size)

    @property
    def scale_format(self) -> Format:
        return get_format(np.asarray(self.scale).dtype)

    def layout(self, x_shape: tuple[int, ...], opset: int = LATEST_OPSET) -> Layout:
        """qcore's index map for x of ``x_shape`` with these parameters."""
        return resolve_layout(resolve(QUANTIZE, opset), tuple(x_shape), np.shape(self.scale),
                              self.kwargs["axis"], self.kwargs["block_size"], "y_scale")

    def _output_arguments(self, opset: int) -> tuple[np.ndarray | None, str | None]:
        """(zero point, output_dtype) that name the target at ``opset``."""
        fmt = self.format
        if self.zero_point is not None:
            return self.zero_point, None
        if opset >= 21:
            return None, fmt.name
        # before output_dtype existed, a zero point names the type
        return np.zeros(np.shape(self.scale), fmt.dtype), None

    def plan(self, x: Any, *, saturate: bool = True, precision: Any = None,
             opset: int = LATEST_OPSET) -> QuantizePlan:
        """What :meth:`quantize` would run for ``x``: qcore.plan_quantize with these parameters."""
        zp, out = self._output_arguments(opset)
        x = np.asarray(x)
        return plan_quantize(x.dtype, x.shape, np.asarray(self.scale).dtype, np.shape(self.scale),
                             None if zp is None else zp.dtype,
                             None if zp is None else np.shape(zp), saturate=saturate,
                             output_dtype=out, precision=precision, opset=opset, **self.kwargs)

    def quantize(self, x: Any, *, saturate: bool = True, precision: Any = None,
                 opset: int = LATEST_OPSET, backend: str = "cpu") -> np.ndarray:
        """qcore.quantize_linear with these parameters (names the float target as needed)."""
        zp, out = self._output_arguments(opset)
        return quantize_linear(x, self.scale, zp, saturate=saturate, output_dtype=out,
                               precision=precision, opset=opset, backend=backend, **self.kwargs)

    def dequantize(self, y: Any, *, output_dtype: Any = None, opset: int = LATEST_OPSET,
                   backend: str = "cpu") -> np.ndarray:
        """qcore.dequantize_linear with these parameters."""
        return dequantize_linear(y, self.scale, self.zero_point, output_dtype=output_dtype,
                                 opset=opset, backend=backend, **self.kwargs)

    def round_trip(self, x: Any, *, saturate: bool = True, precision: Any = None,
                   output_dtype: Any = None, opset: int = LATEST_OPSET) -> np.ndarray:
        """dequantize(quantize(x))."""
        y = self.quantize(x, saturate=saturate, precision=precision, opset=opset)
        return self.dequantize(y, output_dtype=output_dtype, opset=opset)

    def _code_values(self, codes: tuple[float, ...]) -> list[np.ndarray]:
        """Each code value dequantized with every scale (shaped like the scale), as qcore does
        (one DequantizeLinear call over a (len(codes), n_scales) array)."""
        fmt = self.format
        shape = np.shape(self.scale)
        s = np.asarray(self.scale).reshape(-1)
        z = None if self.zero_point is None else np.asarray(self.zero_point).reshape(-1)
        out = "float" if self.scale_format.name in ("float16", "bfloat16") else None
        c = np.repeat(np.asarray(codes, np.float64)[:, None], s.size, axis=1).astype(fmt.dtype)
        v = dequantize_linear(c, s, z, axis=1, output_dtype=out).astype(np.float64)
        return [row.reshape(shape) for row in v]

    def value_range(self) -> tuple[np.ndarray, np.ndarray]:
        """(value of the min code, value of the max code) per scale, as qcore dequantizes them."""
        lo, hi = self._code_values((self.format.min, self.format.max))
        return lo, hi

    def saturation_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Per scale, the x beyond which quantization saturates: the value range widened by
        half the spacing of the two outermost codes (x inside rounds to a code, not a clamp)."""
        fmt = self.format
        if fmt.kind == INT:
            inner = (fmt.min + 1, fmt.max - 1)
        else:
            v = fmt.all_values()
            v = np.unique(v[np.isfinite(v)])
            inner = (float(v[1]), float(v[-2]))
        lo, lo1, hi1, hi = self._code_values((fmt.min, inner[0], inner[1], fmt.max))
        return lo - (lo1 - lo) / 2, hi + (hi - hi1) / 2


def target_format(target: Any) -> Format:
    """The Format of a quantization target, refusing types QuantizeLinear cannot produce."""
    fmt = get_format(target, "target")
    if fmt.name not in QUANTIZED_TYPES:
        raise QuantizationError(f"target={fmt.name} is not a type QuantizeLinear produces; "
                                f"valid: {', '.join(QUANTIZED_TYPES)}")
    return fmt


def scale_format(scale_dtype: Any) -> Format:
    """The Format of a scale type, refusing types that cannot hold a scale."""
    fmt = get_format(scale_dtype, "scale_dtype")
    if fmt.name not in SCALE_DTYPES:
        raise QuantizationError(f"scale_dtype={fmt.name} cannot hold a scale; valid: "
                                + ", ".join(SCALE_DTYPES))
    return fmt


def as_input(x: Any) -> np.ndarray:
    """x as an array QuantizeLinear accepts (float64 and integers become float32)."""
    arr = np.asarray(x)
    if arr.dtype in (np.float32, np.float16, ml_dtypes.bfloat16):
        return arr
    if arr.dtype.kind in "fiub":
        return arr.astype(np.float32)
    raise QuantizationError(f"x has dtype {arr.dtype}; it must be numeric")


__all__ = ["SCALE_DTYPES", "QuantParams", "as_input", "scale_format", "target_format"]
