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

from typing import Any

import ml_dtypes
import numpy as np

from .errors import QuantizationError
from .formats import FLOAT, INT, Format
from .layout import BLOCKED, PER_AXIS, PER_TENSOR, Layout
from .ops import dequantize_linear, quantize_linear
from .quant_params import SCALE_DTYPES, QuantParams, as_input, scale_format, target_format
from .reductions import as_float32, group_minmax, group_quantile, group_sse

METHODS = ("minmax", "absmax", "percentile", "mse", "manual", "mx")
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


# ---------------------------------------------------------------------------------------------
# helpers


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


def symmetric(method: str, fmt: Format) -> bool:
    """Whether ``method`` calibrates ``fmt`` symmetrically (zero point at the midpoint)."""
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
    sfmt = scale_format("float8e8m0" if method == "mx" else scale_dtype)
    xa = as_input(x)
    if xa.size == 0:
        raise QuantizationError("x is empty; there is nothing to calibrate on")
    layout = Layout.from_granularity(xa.shape, granularity, axis, block_size)
    sshape = layout.scale_shape()
    ax = layout.axis if layout.axis is not None else (int(axis) % xa.ndim if xa.ndim else int(axis))
    bs = layout.block if granularity == BLOCKED else 0
    if not (0 < float(clip_ratio) <= 1 or method == "manual"):
        raise QuantizationError(f"clip_ratio={clip_ratio!r} must be in (0, 1]")

    def done(scale, zp, ratio=1.0):
        scale = np.asarray(scale).reshape(sshape)
        zp = None if zp is None else np.asarray(zp).reshape(sshape)
        return QuantParams(scale, zp, ax, bs, granularity, method, fmt.name, float(ratio))

    if method == "manual":
        return done(*_manual(fmt, sfmt, sshape, manual_scale, manual_zero_point))
    sym = symmetric(method, fmt)
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
    "params_from_range", "positive_range", "symmetric", "target_format",
]
