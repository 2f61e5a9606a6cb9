"""Full-range symmetric integer codes (``@fullrange``): the largest magnitude maps to the most
negative code, so all 2^b codes are used.

Symmetric abs-max (``@absmax``) divides by the largest positive code: 4-bit codes run −7…7 and
the code −8 is never used. onnxruntime's own 4-bit quantizers (MatMulNBits, ``quantize_matmul_4bits``)
take the group's value of largest magnitude v (with its sign) and the scale v / −8: v becomes the
code −8 exactly, values of the other sign reach +7 (a value of that sign with |x| > 7.5·|v|/8 is
clipped), and the sixteenth code earns its keep (about +1 dB on MiniLM's projections).

When v is positive the scale is negative. ONNX's DequantizeLinear computes (q − zp) · scale for
any sign, and onnxruntime runs it; qcore's own operators refuse non-positive scales, so
:func:`positive_view` gives them σ·x with the scale |s| (σ = the sign of s, per scale) and
multiplies the result by σ: the codes are round(σx / |s|) = round(x / s), the values σ·|s|·q =
s·q, the same numbers bit for bit (a multiplication by ±1 is exact).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from .errors import QuantizationError
from .formats import INT
from .layout import Layout
from .quant_params import QuantParams, as_input, target_format
from .reductions import group_minmax

__all__ = ["FULLRANGE", "FULLRANGE_METHODS", "FULLRANGE_MSE", "MSE_RATIOS", "fullrange_params",
           "positive_view"]

#: The recipe methods' names: the largest magnitude itself, or the clip searched (MSE).
FULLRANGE = "fullrange"
FULLRANGE_MSE = "fullrange-mse"
FULLRANGE_METHODS = (FULLRANGE, FULLRANGE_MSE)
#: Clip ratios ``fullrange-mse`` tries per group (1.0 first: ties keep the unclipped scale).
MSE_RATIOS = tuple(float(r) for r in np.linspace(1.0, 0.5, 26))


def fullrange_params(x: Any, target: Any, granularity: str, axis: int = 0,
                     block_size: int = 32, search: bool = False) -> QuantParams:
    """Scales v / min_code per group (v: the group's value of largest magnitude, with its sign;
    min_code: −8 for int4, −128 for int8, …; a group without a non-zero finite value gets 1)
    and a zero zero point, for a signed integer ``target``. ``search`` (``fullrange-mse``):
    each group's scale is r·v / min_code with r of :data:`MSE_RATIOS` giving the least squared
    error of the round trip over the group (the same codes, a searched clip; no zero point)."""
    fmt = target_format(target)
    if fmt.kind != INT or not fmt.signed:
        raise QuantizationError(f"@{FULLRANGE} is for signed integer targets (int2, int4, int8, "
                                f"int16, …), not {fmt.name}")
    xa = as_input(x)
    if xa.size == 0:
        raise QuantizationError("x is empty; there is nothing to calibrate on")
    layout = Layout.from_granularity(xa.shape, granularity, axis, block_size)
    sshape = layout.scale_shape()
    lo, hi = group_minmax(xa, layout)
    lo, hi = np.nan_to_num(lo, nan=0.0), np.nan_to_num(hi, nan=0.0)
    v = np.where(np.abs(hi) > np.abs(lo), hi, lo).astype(np.float32)
    if search:
        v = v * _best_ratios(xa, layout, v, fmt)
    scale = (v / np.float32(fmt.min)).astype(np.float32)
    scale = np.where((scale != 0) & np.isfinite(scale), scale, np.float32(1)).reshape(sshape)
    ax = layout.axis if layout.axis is not None else (int(axis) % xa.ndim if xa.ndim else 0)
    bs = layout.block if block_size and layout.block else 0
    zp = np.zeros(sshape, fmt.dtype)
    return QuantParams(scale, zp, ax, bs if granularity == "blocked" else 0, granularity,
                       FULLRANGE, fmt.name)


def _best_ratios(x: np.ndarray, layout: Layout, v: np.ndarray, fmt: Any) -> np.ndarray:
    """Per group, the ratio of :data:`MSE_RATIOS` whose scale r·v / min_code round-trips the
    group with the least squared error (non-finite elements left out)."""
    xf = np.nan_to_num(np.asarray(x, np.float32).reshape(-1), nan=0.0, posinf=0.0, neginf=0.0)
    lo, hi = np.float32(fmt.min), np.float32(fmt.max)
    best = np.full(v.shape, np.inf)
    ratio = np.ones(v.shape, np.float32)
    for r in MSE_RATIOS:
        s = (v * np.float32(r) / lo).astype(np.float32)
        s = np.where(s != 0, s, np.float32(1))
        se = layout.expand(s).astype(np.float32)
        q = np.clip(np.rint(xf / se), lo, hi)
        err = layout.reduce_groups(((q * se - xf) ** 2).astype(np.float64).reshape(x.shape),
                                   np.add).reshape(v.shape)
        better = err < best
        best = np.where(better, err, best)
        ratio = np.where(better, np.float32(r), ratio)
    return ratio


def positive_view(x: np.ndarray, params: QuantParams, opset: int
                  ) -> tuple[np.ndarray, QuantParams, np.ndarray | None]:
    """(σ·x, the parameters with |scale|, σ broadcast to x's shape) — or (x, params, None)
    when no scale is negative. Quantizing σ·x by |scale| with qcore's operators gives the codes
    of x by the signed scale; multiplying its dequantized values by σ gives theirs (module
    doc); error statistics of (σ·x, σ·x̂) equal those of (x, x̂)."""
    scale = np.asarray(params.scale)
    if not np.any(scale < 0):
        return x, params, None
    x = np.asarray(x, np.float32)
    sign = params.layout(tuple(x.shape), opset).expand(np.sign(scale).astype(np.float32))
    sign = np.ascontiguousarray(sign.reshape(x.shape))
    return x * sign, replace(params, scale=np.abs(scale).astype(scale.dtype)), sign
