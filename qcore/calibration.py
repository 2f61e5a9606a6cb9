"""Choosing scale and zero point (calibration) for every target format qcore quantizes to.

:func:`choose_params` turns a tensor, a target format, a method and a granularity into a
:class:`QuantParams` whose arrays go straight into :func:`qcore.quantize_linear` and
:func:`qcore.dequantize_linear` (``params.kwargs`` carries ``axis`` and ``block_size``).

Decisions (the app shows them):

- Statistics ignore NaN and +-Inf; a group with no finite non-zero value gets the "safe" scale
  of amax = 1 (``1 / qmax``, ``1 / fmt.max``; minmax: span 1 as DynamicQuantizeLinear does).
- Integer targets: ``minmax`` is asymmetric (range widened to include 0, scale =
  (hi - lo) / (qmax - qmin) and zero point = round_half_even(clip(qmin - lo / scale)) computed in
  float32 with the *stored* scale, exactly like DynamicQuantizeLinear for uint8); ``absmax`` and
  ``mx`` are symmetric (zero point 0 for signed types, the rounded midpoint for unsigned ones,
  scale = amax / (qmax - zero point)); ``percentile`` and ``mse`` are symmetric for signed and
  asymmetric for unsigned targets.
- Float targets (float8/6/4): every method maps amax to the format's max (scale = amax / max);
  there is no zero point.
- Scales are rounded to ``scale_dtype``; a scale that would round to 0 or overflow is clamped to
  the smallest normal / largest finite value of that type. With ``scale_dtype="float8e8m0"`` a
  non-MX scale is rounded *up* to a power of two (the clipping range never shrinks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from .errors import QuantizationError
from .formats import FLOAT, INT, QUANTIZED_TYPES, Format, get_format
from .layout import BLOCKED, GRANULARITIES, PER_AXIS, PER_TENSOR, Layout, resolve_layout
from .ops import dequantize_linear, quantize_linear
from .versions import LATEST_OPSET, QUANTIZE, resolve

METHODS = ("minmax", "absmax", "percentile", "mse", "manual", "mx")
#: Types a scale may be stored in.
SCALE_DTYPES = ("float", "float16", "bfloat16", "float8e8m0")
#: Clip ratios (of amax) the ``mse`` method tries.
MSE_RANGE = (0.3, 1.0)

_DESCRIPTIONS = {
    "minmax": "Maps the observed minimum and maximum (widened to include 0) onto the full code "
              "range with a zero point for integers, and amax onto the format's max for floats.",
    "absmax": "Symmetric: maps the largest absolute value onto the largest code, zero point 0 "
              "(the midpoint for unsigned integers).",
    "percentile": "Clips outliers: maps a percentile of |x| (both tails for unsigned integers) "
                  "onto the largest code instead of the maximum.",
    "mse": "Searches the clipping threshold between 0.3 and 1.0 of amax that minimises the "
           "round-trip mean squared error, separately for each channel or block.",
    "manual": "Uses the scale and zero point you enter.",
    "mx": "OCP Microscaling: a power-of-two scale 2^(floor(log2 amax) - floor(log2 max)) stored "
          "as float8e8m0, so amax lands in the format's top binade (values above max saturate).",
}


def describe(method: str) -> str:
    """One plain sentence saying what a calibration method does."""
    _check_method(method)
    return _DESCRIPTIONS[method]


def _check_method(method: str) -> None:
    if method not in METHODS:
        raise QuantizationError(f"method={method!r} is not a calibration method; valid: "
                                + ", ".join(METHODS))


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

    def storage_bits(self) -> int:
        """Bits spent on scales and zero points."""
        zp_bits = 0 if self.zero_point is None else self.format.bits * self.zero_point.size
        return self.scale_format.bits * self.n_scales + zp_bits

    def bits_per_element(self, n: int) -> float:
        """Target bits plus scale and zero-point storage amortised over ``n`` elements."""
        return self.format.bits + self.storage_bits() / max(int(n), 1)

    def layout(self, x_shape: tuple[int, ...], opset: int = LATEST_OPSET) -> Layout:
        """qcore's index map for x of ``x_shape`` with these parameters."""
        return resolve_layout(resolve(QUANTIZE, opset), tuple(x_shape), np.shape(self.scale),
                              self.kwargs["axis"], self.kwargs["block_size"], "y_scale")

    def quantize(self, x: Any, *, saturate: bool = True, precision: Any = None,
                 opset: int = LATEST_OPSET, backend: str = "cpu") -> np.ndarray:
        """qcore.quantize_linear with these parameters (names the float target as needed)."""
        fmt = self.format
        zp, out = self.zero_point, None
        if zp is None:
            if opset >= 21:
                out = fmt.name
            else:  # before output_dtype existed, a zero point names the type
                zp = np.zeros(np.shape(self.scale), fmt.dtype)
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


# ---------------------------------------------------------------------------------------------
# helpers


def target_format(target: Any) -> Format:
    """The Format of a quantization target, refusing types QuantizeLinear cannot produce."""
    fmt = get_format(target, "target")
    if fmt.name not in QUANTIZED_TYPES:
        raise QuantizationError(f"target={fmt.name} is not a type QuantizeLinear produces; "
                                f"valid: {', '.join(QUANTIZED_TYPES)}")
    return fmt


def as_input(x: Any) -> np.ndarray:
    """x as an array QuantizeLinear accepts (float64 and integers become float32)."""
    arr = np.asarray(x)
    if arr.dtype in (np.float32, np.float16, ml_dtypes.bfloat16):
        return arr
    if arr.dtype.kind in "fiub":
        return arr.astype(np.float32)
    raise QuantizationError(f"x has dtype {arr.dtype}; it must be numeric")


def as_float32(x: np.ndarray) -> np.ndarray:
    """A flat, contiguous float32 or float64 view/copy for the numba kernels."""
    arr = np.asarray(x)
    if arr.dtype not in (np.float32, np.float64):
        arr = arr.astype(np.float32)
    return np.ascontiguousarray(arr).reshape(-1)


def _scale_format(scale_dtype: Any) -> Format:
    fmt = get_format(scale_dtype, "scale_dtype")
    if fmt.name not in SCALE_DTYPES:
        raise QuantizationError(f"scale_dtype={fmt.name} cannot hold a scale; valid: "
                                + ", ".join(SCALE_DTYPES))
    return fmt


def scale_shape_for(x_shape: tuple[int, ...], granularity: str, axis: int,
                    block_size: int) -> tuple[tuple[int, ...], int, int]:
    """(scale shape, normalized axis, block_size kwarg) for a granularity."""
    if granularity not in GRANULARITIES:
        raise QuantizationError(f"granularity={granularity!r} is not valid; valid: "
                                + ", ".join(GRANULARITIES))
    ndim = len(x_shape)
    if granularity == PER_TENSOR:
        return (), (int(axis) % ndim if ndim else int(axis)), 0
    if ndim == 0:
        raise QuantizationError(f"{granularity} quantization needs x of rank >= 1; x is 0-d")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
        raise QuantizationError(f"axis={axis!r} is out of range for x of rank {ndim}; valid: "
                                f"{-ndim}..{ndim - 1}")
    ax = int(axis) % ndim
    if granularity == PER_AXIS:
        return (x_shape[ax],), ax, 0
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)) \
            or block_size < 1:
        raise QuantizationError(f"block_size={block_size!r} must be a positive integer for "
                                f"blocked quantization")
    shape = list(x_shape)
    shape[ax] = -(-x_shape[ax] // int(block_size))
    return tuple(shape), ax, int(block_size)


def layout_for(x_shape: tuple[int, ...], scale_shape: tuple[int, ...], axis: int,
               block_size: int) -> Layout:
    """qcore's Layout (index map) for these shapes at the latest opset."""
    return resolve_layout(resolve(QUANTIZE, LATEST_OPSET), tuple(x_shape), tuple(scale_shape),
                          axis, block_size, "y_scale")


def _reduce_groups(x: np.ndarray, layout: Layout, ufunc: np.ufunc) -> np.ndarray:
    """ufunc-reduce x over each scale's group: flat array of layout's scale count."""
    x3 = x.reshape(layout.pre, layout.dim, layout.post)
    if layout.block >= layout.dim:
        r = ufunc.reduce(x3, axis=1, keepdims=True)
    elif layout.block == 1:
        r = x3
    else:
        r = ufunc.reduceat(x3, np.arange(0, layout.dim, layout.block), axis=1)
    if layout.scale_pre == 1 and r.shape[0] != 1:
        r = ufunc.reduce(r, axis=0, keepdims=True)
    if layout.scale_post == 1 and r.shape[2] != 1:
        r = ufunc.reduce(r, axis=2, keepdims=True)
    return np.ascontiguousarray(r).reshape(-1)


def _finite_copy(x: np.ndarray) -> np.ndarray:
    """x as float32/float64 with NaN in place of every non-finite value (no copy if all finite)."""
    a = np.asarray(x)
    if a.dtype not in (np.float32, np.float64):
        a = a.astype(np.float32)
    if not np.isfinite(a).all():
        a = np.where(np.isfinite(a), a, np.nan)
    return a


def group_minmax(x: np.ndarray, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """Finite min and max of each group (NaN where a group has no finite value)."""
    a = _finite_copy(x)
    with np.errstate(invalid="ignore"):
        lo = _reduce_groups(a, layout, np.fmin).astype(np.float64)
        hi = _reduce_groups(a, layout, np.fmax).astype(np.float64)
    return lo, hi


def group_matrix(x: np.ndarray, layout: Layout) -> np.ndarray:
    """x as (groups, elements) in scale order, NaN-padded (short last block)."""
    a = np.asarray(x)
    pre, dim, post, block = layout.pre, layout.dim, layout.post, layout.block
    x3 = a.reshape(pre, dim, post)
    if layout.granularity == PER_TENSOR:
        return a.reshape(1, -1)
    if layout.granularity == PER_AXIS:
        return x3.transpose(1, 0, 2).reshape(dim, pre * post)
    nb = layout.scale_blocks
    if nb * block != dim:
        padded = np.full((pre, nb * block, post), np.nan, a.dtype)
        padded[:, :dim, :] = x3
        x3 = padded
    return x3.reshape(pre, nb, block, post).transpose(0, 1, 3, 2).reshape(pre * nb * post, block)


def group_quantile(x: np.ndarray, layout: Layout, q: np.ndarray | list[float],
                   absolute: bool) -> np.ndarray:
    """Quantiles (fractions in [0, 1], linear interpolation) of each group's finite values.

    Returns shape (len(q), groups); NaN for a group without finite values.
    """
    a = _finite_copy(x)
    if absolute:
        a = np.abs(a)
    m = group_matrix(a, layout)
    qs = np.asarray(q, np.float64)
    if not np.isnan(m).any():
        return np.quantile(m, qs, axis=1).astype(np.float64).reshape(len(qs), -1)
    s = np.sort(m, axis=1)  # NaN last
    cnt = (~np.isnan(s)).sum(axis=1)
    out = np.empty((len(qs), s.shape[0]), np.float64)
    for k, qk in enumerate(qs):
        pos = (np.maximum(cnt, 1) - 1) * qk
        i0 = np.floor(pos).astype(np.int64)
        i1 = np.minimum(i0 + 1, np.maximum(cnt - 1, 0))
        frac = pos - i0
        v0 = np.take_along_axis(s, i0[:, None], 1)[:, 0].astype(np.float64)
        v1 = np.take_along_axis(s, i1[:, None], 1)[:, 0].astype(np.float64)
        out[k] = np.where(cnt > 0, v0 + (v1 - v0) * frac, np.nan)
    return out


def _round_scale(scale: np.ndarray, sfmt: Format) -> np.ndarray:
    """Positive finite scale values rounded to the scale type (clamped, e8m0 rounded up)."""
    s = np.asarray(scale, np.float64)
    if sfmt.name == "float8e8m0":
        with np.errstate(all="ignore"):
            m, e = np.frexp(np.where(np.isfinite(s) & (s > 0), s, 1.0))
        e = np.where(m == 0.5, e - 1, e)  # exact powers of two stay
        e = np.where(np.isinf(s), 127, e)
        return np.ldexp(1.0, np.clip(e, -127, 127)).astype(sfmt.dtype)
    fi = ml_dtypes.finfo(sfmt.dtype)
    with np.errstate(all="ignore"):
        r = s.astype(np.float32).astype(sfmt.dtype)
    r64 = r.astype(np.float64)
    r = np.where(r64 > 0, r, np.asarray(fi.tiny, sfmt.dtype))
    return np.where(np.isfinite(r.astype(np.float64)), r, np.asarray(fi.max, sfmt.dtype)).astype(
        sfmt.dtype)


def _midpoint(fmt: Format) -> int:
    """The symmetric zero point: 0 for signed, round_half_even((qmin + qmax) / 2) for unsigned."""
    if fmt.signed:
        return 0
    return int(np.rint((fmt.min + fmt.max) / 2))


def positive_range(fmt: Format) -> float:
    """How many steps above the symmetric zero point the largest code lies (fmt.max for floats)."""
    if fmt.kind == INT:
        return float(fmt.max - _midpoint(fmt))
    return float(fmt.max)


def params_from_range(fmt: Format, lo: np.ndarray, hi: np.ndarray, symmetric: bool,
                      sfmt: Format) -> tuple[np.ndarray, np.ndarray | None]:
    """Scale (of the scale type) and zero point (of the target type, None for floats) per group
    from each group's clipping range [lo, hi] (NaN = no finite data)."""
    lo = np.nan_to_num(np.asarray(lo, np.float64), nan=0.0)
    hi = np.nan_to_num(np.asarray(hi, np.float64), nan=0.0)
    with np.errstate(all="ignore"):
        if fmt.kind == INT and not symmetric:
            lo32 = np.minimum(lo, 0).astype(np.float32)
            hi32 = np.maximum(hi, 0).astype(np.float32)
            span = hi32 - lo32
            span = np.where(span > 0, span, np.float32(1))
            scale = span / np.float32(fmt.max - fmt.min)
            s = _round_scale(scale, sfmt)
            s32 = s.astype(np.float32)
            zpf = np.float32(fmt.min) - lo32 / s32
            zp = np.rint(np.clip(zpf, np.float32(fmt.min), np.float32(fmt.max)))
            return s, zp.astype(np.int64).astype(fmt.dtype)
        amax = np.maximum(np.abs(lo), np.abs(hi)).astype(np.float32)
        amax = np.where(amax > 0, amax, np.float32(1))
        scale = amax / np.float32(positive_range(fmt))
        s = _round_scale(scale, sfmt)
    if fmt.kind == INT:
        return s, np.full(s.shape, _midpoint(fmt), np.int64).astype(fmt.dtype)
    return s, None


def mx_scale(fmt: Format, amax: np.ndarray) -> np.ndarray:
    """Power-of-two MX scales 2^(floor(log2 amax) - floor(log2 max)) as float8e8m0."""
    a = np.nan_to_num(np.asarray(amax, np.float64), nan=0.0)
    a = np.where((a > 0) & np.isfinite(a), a, 1.0)
    _, e = np.frexp(a)
    _, emax = np.frexp(positive_range(fmt))
    exp = np.clip((e - 1) - (int(emax) - 1), -127, 127)
    return np.ldexp(1.0, exp).astype(ml_dtypes.float8_e8m0fnu)


def _symmetric(method: str, fmt: Format) -> bool:
    if fmt.kind != INT:
        return True
    if method == "minmax":
        return False
    if method in ("percentile", "mse"):
        return fmt.signed
    return True


# ---------------------------------------------------------------------------------------------
# the entry point


def choose_params(x: Any, target: Any, *, method: str = "minmax",
                  granularity: str = PER_TENSOR, axis: int = 0, block_size: int = 32,
                  percentile: float = 99.9, scale_dtype: Any = "float",
                  manual_scale: Any = None, manual_zero_point: Any = None,
                  clip_ratio: float = 1.0, mse_candidates: int = 100,
                  mse_exhaustive: bool = False) -> QuantParams:
    """Choose scale and zero point for quantizing ``x`` to ``target``.

    ``clip_ratio`` (amax-based methods) shrinks the clipping range to that fraction of the
    observed one; ``mse_candidates`` is the number of thresholds on the ``mse`` method's grid
    (searched coarse-to-fine: about 30 round trips for 100; ``mse_exhaustive`` tries them all).
    """
    _check_method(method)
    fmt = target_format(target)
    sfmt = _scale_format("float8e8m0" if method == "mx" else scale_dtype)
    xa = as_input(x)
    if xa.size == 0:
        raise QuantizationError("x is empty; there is nothing to calibrate on")
    sshape, ax, bs = scale_shape_for(xa.shape, granularity, axis, block_size)
    layout = layout_for(xa.shape, sshape, ax, bs)
    if not (0 < float(clip_ratio) <= 1 or method == "manual"):
        raise QuantizationError(f"clip_ratio={clip_ratio!r} must be in (0, 1]")

    def done(scale, zp, ratio=1.0):
        scale = np.asarray(scale).reshape(sshape)
        zp = None if zp is None else np.asarray(zp).reshape(sshape)
        return QuantParams(scale, zp, ax, bs, granularity, method, fmt.name, float(ratio))

    if method == "manual":
        return done(*_manual(fmt, sfmt, sshape, manual_scale, manual_zero_point))
    sym = _symmetric(method, fmt)
    if method == "percentile":
        p = float(percentile)
        if not 0 < p <= 100:
            raise QuantizationError(f"percentile={percentile!r} must be in (0, 100]")
        if sym:
            hi = group_quantile(xa, layout, [p / 100], absolute=True)[0]
            lo = -hi
        else:
            lo, hi = group_quantile(xa, layout, [1 - p / 100, p / 100], absolute=False)
    else:
        lo, hi = group_minmax(xa, layout)
    lo, hi = lo * clip_ratio, hi * clip_ratio
    if method == "mx":
        amax = np.maximum(np.abs(np.nan_to_num(lo)), np.abs(np.nan_to_num(hi)))
        s = mx_scale(fmt, amax)
        zp = None if fmt.kind != INT else np.full(s.shape, _midpoint(fmt)).astype(fmt.dtype)
        return done(s, zp, clip_ratio)
    if method == "mse":
        s, zp, ratio = _mse_search(xa, fmt, sfmt, layout, sshape, ax, bs, lo, hi, sym,
                                   int(mse_candidates), bool(mse_exhaustive))
        return done(s, zp, ratio)
    s, zp = params_from_range(fmt, lo, hi, sym, sfmt)
    return done(s, zp, clip_ratio)


def _manual(fmt: Format, sfmt: Format, sshape: tuple[int, ...], manual_scale: Any,
            manual_zero_point: Any) -> tuple[np.ndarray, np.ndarray | None]:
    if manual_scale is None:
        raise QuantizationError("method='manual' needs manual_scale")
    try:
        s = np.broadcast_to(np.asarray(manual_scale, np.float64), sshape)
    except ValueError:
        raise QuantizationError(f"manual_scale of shape {np.shape(manual_scale)} does not fit "
                                f"the scale shape {sshape}") from None
    if not (np.isfinite(s) & (s > 0)).all():
        raise QuantizationError("manual_scale must be positive and finite")
    s = _round_scale(s, sfmt)
    if manual_zero_point is None:
        zp = np.zeros(sshape).astype(fmt.dtype) if fmt.kind == INT else None
        return s, zp
    try:
        z = np.broadcast_to(np.asarray(manual_zero_point, np.float64), sshape)
    except ValueError:
        raise QuantizationError(f"manual_zero_point of shape {np.shape(manual_zero_point)} "
                                f"does not fit the scale shape {sshape}") from None
    if fmt.kind == INT:
        if not (np.isfinite(z).all() and (z == np.rint(z)).all()
                and (z >= fmt.min).all() and (z <= fmt.max).all()):
            raise QuantizationError(f"manual_zero_point must be integers in "
                                    f"[{int(fmt.min)}, {int(fmt.max)}] for {fmt.name}")
        return s, z.astype(np.int64).astype(fmt.dtype)
    if not np.isfinite(z).all():
        raise QuantizationError("manual_zero_point must be finite")
    return s, np.array(z, np.float32).astype(fmt.dtype)


def _mse_search(xa: np.ndarray, fmt: Format, sfmt: Format, layout: Layout,
                sshape: tuple[int, ...], ax: int, bs: int, lo: np.ndarray, hi: np.ndarray,
                sym: bool, n: int, exhaustive: bool) -> tuple[np.ndarray, np.ndarray | None, float]:
    """Per-group threshold search over ``n`` clip ratios in MSE_RANGE: the candidate with the
    least round-trip squared error (qcore's own quantize/dequantize), chosen for every group at
    once. Not exhaustive: every 5th ratio (and 1.0), then the ratios around each group's best.
    For signed integers the asymmetric minmax parameters compete too, so the result is never
    worse than minmax."""
    from .metrics import group_sse

    if n < 1:
        raise QuantizationError(f"mse_candidates={n} must be >= 1")
    x32 = as_float32(xa)
    kw = {"axis": ax if layout.granularity != PER_TENSOR else 1, "block_size": bs}
    out_dtype = "float" if sfmt.name in ("float16", "bfloat16") else None
    ratios = np.linspace(MSE_RANGE[0], MSE_RANGE[1], n) if n > 1 else np.ones(1)
    ng = lo.size
    state: dict[str, Any] = {}

    def try_params(s, zp, idx):
        y = quantize_linear(xa, s.reshape(sshape), None if zp is None else zp.reshape(sshape),
                            output_dtype=fmt.name if zp is None else None, **kw)
        xh = dequantize_linear(y, s.reshape(sshape), None if zp is None else zp.reshape(sshape),
                               output_dtype=out_dtype, **kw)
        sse = group_sse(x32, xh.reshape(-1), layout)[0]
        if not state:
            state.update(sse=sse, s=s.copy(), zp=None if zp is None else zp.copy(),
                         idx=np.broadcast_to(idx, (ng,)).astype(np.int64))
            return
        better = sse < state["sse"]
        if better.any():
            state["sse"] = np.where(better, sse, state["sse"])
            state["s"] = np.where(better, s, state["s"])
            if zp is not None:
                state["zp"] = np.where(better, zp, state["zp"])
            state["idx"] = np.where(better, idx, state["idx"])

    def try_ratio_index(idx):
        idx = np.clip(idx, 0, len(ratios) - 1)
        r = ratios[idx]
        s, zp = params_from_range(fmt, lo * r, hi * r, sym, sfmt)
        try_params(s, zp, idx)

    if fmt.kind == INT and sym:  # never worse than minmax: it competes too
        try_params(*params_from_range(fmt, lo, hi, False, sfmt), -1)
    step = 1 if exhaustive or n <= 20 else 5
    coarse = sorted(set(range(n - 1, -1, -step)))
    for i in coarse:
        try_ratio_index(np.full(ng, i))
    if step > 1:
        centre = state["idx"].copy()
        centre = np.where(centre < 0, n - 1, centre)  # minmax won: refine near amax
        for off in range(-(step - 1), step):
            if off:
                try_ratio_index(centre + off)
    idx = state["idx"]
    ratio = float(ratios[idx[0]]) if idx.size == 1 and idx[0] >= 0 else float("nan")
    return state["s"], state["zp"], ratio


__all__ = [
    "BLOCKED", "FLOAT", "METHODS", "MSE_RANGE", "PER_AXIS", "PER_TENSOR", "SCALE_DTYPES",
    "QuantParams", "choose_params", "describe", "group_minmax", "group_quantile", "mx_scale",
    "params_from_range", "positive_range", "target_format",
]
