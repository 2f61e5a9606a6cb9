"""What quantization did to a tensor: error statistics, histograms and per-group errors.

The heavy lifting is in :mod:`qcore.reductions` (numba kernels that stream x and x_hat once);
the step-by-step table is :mod:`qcore.walkthrough` (re-exported here as :func:`walkthrough`).

Conventions: error = x_hat - x. Errors are taken over the elements where both x and x_hat are
finite (``n_compared``); NaN/Inf on either side are counted separately (``nan_in`` ...). An
element is *clipped* (saturated) when it is finite and lies outside its group's representable
range [value of the min code, value of the max code] by more than half the spacing of the
outermost codes -- i.e. rounding alone would have needed a code beyond the last one
(:meth:`QuantParams.saturation_bounds`). Without that half step, minmax calibration would report
its own extremes as "clipped" whenever the rounded zero point shifts the range a little.
``clipped_fraction`` = clipped elements / finite elements of x: saturated to the outermost code,
or, for float8 with saturate off, turned into NaN/Inf (those also leave the error statistics).

One definition of each figure the app, the report and the CLI show:

- **Bits per element** (:func:`bits_per_element`): (codes × the target's bits + scales × the
  scale type's bits + stored zero points × the target's bits) / elements, where a zero point
  is stored (:func:`stores_zero_point`) when it is not all zero (an absent zero point means 0),
  or when the operator version predates ``output_dtype`` so only a zero point names the type.
- **SQNR** = 10·log10(Σx² / Σ(x̂ − x)²) over the elements whose x and x̂ are both finite;
  ``sqnr_coverage`` is their share of the tensor (1.0 when every element counts).
- **Clipped**: as above.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .errors import QuantizationError
from .formats import INT, get_format
from .layout import PER_TENSOR, Layout
from .quant_params import QuantParams
from .reductions import (
    CHUNK,
    N_STATS,
    PARALLEL_THRESHOLD,
    S_INFIN,
    S_INFOUT,
    S_MAXAE,
    S_NANIN,
    S_NANOUT,
    S_NCLIP,
    S_NCMP,
    S_NFIN,
    S_NREL,
    S_SAE,
    S_SREL,
    S_SSE,
    S_SSECLIP,
    S_SX2,
    as_float32,
    error_stats,
    finite_range,
    group_sse,
    histogram_counts,
)
from .versions import LATEST_OPSET, QUANTIZE, resolve
from .walkthrough import walkthrough

# ---------------------------------------------------------------------------------------------
# storage


def zero_point_stored(nonzero: bool, opset: int = LATEST_OPSET) -> bool:
    """Whether a zero point is stored at ``opset``: an absent zero point means 0, so an all-zero
    one (symmetric signed integers, float targets) is left out -- except before QuantizeLinear
    had ``output_dtype``, when only a zero point's type names a target other than uint8."""
    return "output_dtype" not in resolve(QUANTIZE, opset).attributes or bool(nonzero)


def stores_zero_point(params: QuantParams, opset: int = LATEST_OPSET) -> bool:
    """Whether the ONNX graph for these parameters at ``opset`` carries a zero point
    (:func:`zero_point_stored` of whether it has a non-zero value)."""
    zp = params.zero_point
    return zero_point_stored(zp is not None and bool(np.any(np.asarray(zp).astype(np.float64) != 0)),
                             opset)


def stored_bits(n: int, code_bits: int, n_scales: int, scale_bits: int,
                zero_point_stored: bool) -> int:
    """Bits of ``n`` codes, ``n_scales`` scales and, when stored, as many zero points (sub-byte
    packing not rounded up to bytes): the sum every bits figure divides (docs/semantics.md)."""
    return int(n) * code_bits + int(n_scales) * (scale_bits + (code_bits if zero_point_stored
                                                               else 0))


def storage_bits(params: QuantParams, n: int, opset: int = LATEST_OPSET) -> int:
    """Bits a tensor of ``n`` elements takes quantized with ``params`` at ``opset``: codes,
    scales and the zero points :func:`stores_zero_point` keeps."""
    return stored_bits(n, params.format.bits, int(np.asarray(params.scale).size),
                       params.scale_format.bits, stores_zero_point(params, opset))


def bits_per_element(params: QuantParams, n: int, opset: int = LATEST_OPSET) -> float:
    """:func:`storage_bits` / ``n`` -- the one bits-per-element figure every page, the report
    and the CLI show (NaN for an empty tensor)."""
    if int(n) <= 0:
        return math.nan
    return storage_bits(params, n, opset) / int(n)


# ---------------------------------------------------------------------------------------------
# histograms


def histogram(x: Any, bins: int = 128,
              range: tuple[float, float] | None = None) -> tuple[np.ndarray, np.ndarray]:  # noqa: A002
    """Counts (int64) and edges (float64) like ``np.histogram`` of x's finite values.

    NaN and +-Inf are skipped; the binning follows NumPy's rule in x's precision (float32 data
    is binned in float32, as np.histogram does), so counts match it exactly.
    """
    a = as_float32(x)
    bins = int(bins)
    if bins < 1:
        raise QuantizationError(f"bins={bins} must be >= 1")
    if range is None:
        lo, hi, cnt = finite_range(a)
        if cnt == 0:
            lo, hi = 0.0, 1.0
    else:
        lo, hi = float(range[0]), float(range[1])
        if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
            raise QuantizationError(f"range={range!r} must be finite with min <= max")
    dt = a.dtype.type
    if range is None:  # NumPy's edges are scalars of x's type: everything in that type
        first, last = dt(lo), dt(hi)
        if first == last:
            first, last = first - dt(0.5), last + dt(0.5)
        denom = last - first
        edges = np.linspace(first, last, bins + 1, endpoint=True, dtype=a.dtype)
    else:  # Python floats: edges computed in float64, the span subtracted in float64
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5
        edges = np.linspace(lo, hi, bins + 1, endpoint=True, dtype=a.dtype)
        first, last, denom = dt(lo), dt(hi), dt(hi - lo)
    if a.size == 0:
        return np.zeros(bins, np.int64), edges.astype(np.float64)
    counts = histogram_counts(a, first, last, denom, edges, bins)
    return counts, edges.astype(np.float64)


def log_histogram(x: Any, bins: int = 128,
                  range: tuple[float, float] | None = None  # noqa: A002
                  ) -> tuple[np.ndarray, np.ndarray, int]:
    """Histogram of |x| on log-spaced bins: (counts, edges in |x| units, number of zeros).

    ``range`` is in |x| units (positive). Zeros and non-finite values are left out of the bins.
    """
    a = np.abs(as_float32(x))
    nz = int(np.count_nonzero(a == 0))
    with np.errstate(divide="ignore"):
        la = np.log10(np.where(a > 0, a, np.nan)).astype(np.float64)
    lr = None if range is None else (math.log10(range[0]), math.log10(range[1]))
    counts, ledges = histogram(la, bins=bins, range=lr)
    return counts, 10.0 ** ledges, nz


def representable_values(target: Any) -> np.ndarray:
    """Sorted distinct finite values of a format (for drawing levels over histograms)."""
    fmt = get_format(target, "target")
    if fmt.kind == INT:
        if fmt.bits > 16:
            raise QuantizationError(f"{fmt.name} has too many values to list")
        return np.arange(int(fmt.min), int(fmt.max) + 1, dtype=np.float64)
    v = fmt.all_values()
    return np.unique(v[np.isfinite(v)])  # -0 and +0 are one value


# ---------------------------------------------------------------------------------------------
# error metrics


def sqnr_of_stats(st: np.ndarray) -> float:
    """SQNR in dB from error statistics (:func:`qcore.reductions.error_stats`'s layout): signal
    and noise power over the elements whose x and x̂ are both finite; +inf for no error, NaN
    when no element compares, -inf for a zero signal with some error. The one SQNR definition
    of the pages, the report and the CLI."""
    ncmp, sse, sx2 = st[S_NCMP], st[S_SSE], st[S_SX2]
    if sse == 0:
        return math.inf if ncmp else math.nan
    if sx2 == 0:
        return -math.inf
    return 10.0 * math.log10(sx2 / sse)


def error_metrics(x: Any, x_hat: Any, *, y: Any = None, target: Any = None,
                  params: QuantParams | None = None,
                  opset: int = LATEST_OPSET) -> dict[str, float]:
    """Error statistics of a round trip x -> x_hat (one numba pass).

    Keys: mse, rmse, sqnr_db, max_abs_error, mean_abs_error, mean_rel_error, clipped_fraction,
    nan_in, inf_in, nan_out, inf_out, bits_per_element, n, plus nan_made / inf_made /
    nonfinite_made (finite x turned into NaN / +-Inf / either by quantizing: the NaN and Inf
    the quantization *produced*, input NaN/Inf left out), n_compared, sqnr_coverage
    (n_compared / n: the share the error figures cover), n_clipped and clipping_mse /
    rounding_mse (the mse split between clipped and in-range elements).
    ``clipped_fraction`` and the split need ``params``; ``bits_per_element`` needs the target
    (from ``target``, ``params`` or ``y``'s dtype) and is :func:`bits_per_element` at ``opset``
    when ``params`` are given. Missing ones are NaN.
    """
    xs = np.shape(x)
    xa = as_float32(x)
    ha = as_float32(x_hat)
    if xa.size != ha.size:
        raise QuantizationError(f"x has {xa.size} elements but x_hat has {ha.size}")
    fmt = None
    if target is not None:
        fmt = get_format(target, "target")
    elif params is not None:
        fmt = params.format
    elif y is not None:
        fmt = get_format(np.asarray(y).dtype, "y")
    n = xa.size
    has_range = params is not None and n > 0
    if has_range:
        glo, ghi = params.saturation_bounds()
        st = error_stats(xa, ha, params.layout(tuple(xs)), glo, ghi)
    else:
        st = error_stats(xa, ha)
    ncmp = st[S_NCMP]
    mse = st[S_SSE] / ncmp if ncmp else math.nan
    sqnr = sqnr_of_stats(st)
    made = int(st[S_NFIN] - ncmp)  # finite x whose x̂ is NaN or +-Inf: made by quantizing
    nan_made = int(np.count_nonzero(np.isnan(ha) & np.isfinite(xa))) if made else 0
    if fmt is None:
        bpe = math.nan
    elif params is not None:
        bpe = bits_per_element(params, n, opset)
    else:
        bpe = float(fmt.bits)
    nan = math.nan
    return {
        "mse": mse,
        "rmse": math.sqrt(mse) if ncmp else nan,
        "sqnr_db": sqnr,
        "max_abs_error": float(st[S_MAXAE]) if ncmp else nan,
        "mean_abs_error": st[S_SAE] / ncmp if ncmp else nan,
        "mean_rel_error": st[S_SREL] / st[S_NREL] if st[S_NREL] else nan,
        "clipped_fraction": (st[S_NCLIP] / st[S_NFIN] if st[S_NFIN] else 0.0) if has_range
        else nan,
        "nan_in": int(st[S_NANIN]),
        "inf_in": int(st[S_INFIN]),
        "nan_out": int(st[S_NANOUT]),
        "inf_out": int(st[S_INFOUT]),
        "bits_per_element": bpe,
        "n": int(n),
        "nan_made": nan_made,
        "inf_made": made - nan_made,
        "nonfinite_made": made,
        "n_compared": int(ncmp),
        "sqnr_coverage": ncmp / n if n else nan,
        "n_clipped": int(st[S_NCLIP]) if has_range else 0,
        "clipping_mse": st[S_SSECLIP] / ncmp if (ncmp and has_range) else nan,
        "rounding_mse": (st[S_SSE] - st[S_SSECLIP]) / ncmp if (ncmp and has_range) else nan,
    }


# ---------------------------------------------------------------------------------------------
# per-group errors


def group_errors(x: Any, x_hat: Any, layout_or_params: Layout | QuantParams,
                 x_shape: tuple[int, ...] | None = None) -> np.ndarray:
    """RMSE per channel (per-axis) or per block (blocked, shaped like the scale); 0-d for
    per-tensor. NaN for a group without a finite pair."""
    if x_shape is None:
        x_shape = np.shape(x)
    x_shape = tuple(x_shape)
    if isinstance(layout_or_params, QuantParams):
        layout = layout_or_params.layout(x_shape)
        sshape = np.shape(layout_or_params.scale)
    else:
        layout = layout_or_params
        sshape = layout.scale_shape()
    sse, cnt = group_sse(x, x_hat, layout)
    with np.errstate(invalid="ignore", divide="ignore"):
        rmse = np.where(cnt > 0, np.sqrt(sse / np.maximum(cnt, 1)), np.nan)
    if layout.granularity == PER_TENSOR:
        return np.asarray(rmse.reshape(-1)[0])
    return rmse.reshape(sshape)


# ---------------------------------------------------------------------------------------------
# plots


def downsample_xy(x: Any, y: Any, max_points: int = 5000,
                  seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_points`` finite (x, y) pairs for a scatter/transfer plot, sorted by x.

    Always keeps the smallest and largest x and the pairs with the largest |y - x|
    (a twentieth of the budget); the rest is a uniform random sample.
    """
    xa = as_float32(x)
    ya = as_float32(y)
    if xa.size != ya.size:
        raise QuantizationError(f"x has {xa.size} elements but y has {ya.size}")
    max_points = max(int(max_points), 2)
    with np.errstate(all="ignore"):
        err = np.abs(ya.astype(np.float64) - xa) if xa.size <= max_points * 20 \
            else np.abs(ya - xa)
    if not np.isfinite(err).all():
        keep_idx = np.flatnonzero(np.isfinite(xa) & np.isfinite(ya))
        xa, ya, err = xa[keep_idx], ya[keep_idx], err[keep_idx]
        err = np.where(np.isfinite(err), err, np.finfo(err.dtype).max)  # float32 overflow
    n = xa.size
    if n <= max_points:
        order = np.argsort(xa, kind="stable")
        return xa[order].astype(np.float64), ya[order].astype(np.float64)
    rng = np.random.default_rng(seed)
    must = [np.array([np.argmin(xa), np.argmax(xa)])]
    k = max(1, max_points // 20)
    must.append(_top_k(err, k, rng))
    must_idx = np.unique(np.concatenate(must))
    rest = rng.choice(n, size=max_points, replace=False)
    rest = np.setdiff1d(rest, must_idx)[: max(0, max_points - must_idx.size)]
    idx = np.union1d(must_idx, rest)
    order = idx[np.argsort(xa[idx], kind="stable")]
    return xa[order].astype(np.float64), ya[order].astype(np.float64)


def _top_k(v: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of the k largest values (ties broken arbitrarily), without sorting all of v."""
    n = v.size
    if n <= 1 << 16:
        return np.argpartition(v, n - k)[n - k:]
    sample = v[rng.integers(0, n, 1 << 16)]
    frac = min(1.0, 8.0 * k / n)
    t = np.quantile(sample, 1.0 - frac)
    cand = np.flatnonzero(v >= t)
    if cand.size < k:
        return np.argpartition(v, n - k)[n - k:]
    return cand[np.argpartition(v[cand], cand.size - k)[cand.size - k:]]


def error_histograms(x: np.ndarray, names: Iterable[str], round_trip: Callable[[str], np.ndarray],
                     bins: int = 81) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """:func:`histogram` of the error x̂ − x (in float32) for each of ``names``, where
    ``round_trip(name)`` gives x̂; a name it refuses with :class:`QuantizationError` (a format
    or recipe that cannot be used on this tensor) is left out rather than failing the rest."""
    xf = x.astype(np.float32, copy=False)
    out = {}
    for name in names:
        try:
            x_hat = round_trip(name)
        except QuantizationError:
            continue
        with np.errstate(all="ignore"):
            out[name] = histogram(x_hat.astype(np.float32) - xf, bins=bins)
    return out


def pareto_front(cost: Any, quality: Any) -> np.ndarray:
    """True for the points no other point beats: lower-or-equal cost and higher-or-equal
    quality, strictly better in one. NaN points are never on the front."""
    c = np.asarray(cost, np.float64)
    q = np.asarray(quality, np.float64)
    ok = ~(np.isnan(c) | np.isnan(q))
    front = np.zeros(c.shape, bool)
    for i in np.flatnonzero(ok):
        other = ok.copy()
        other[i] = False
        dominated = other & (c <= c[i]) & (q >= q[i]) & ((c < c[i]) | (q > q[i]))
        front[i] = not dominated.any()
    return front


#: Bits per element are compared to this many decimals: a zero point's storage (a few bits per
#: thousand elements) does not make a format cheaper.
PARETO_BITS_DECIMALS = 1


def bits_sqnr_front(bits: Any, sqnr: Any) -> np.ndarray:
    """The Pareto front of (bits per element, SQNR dB), bits compared to
    :data:`PARETO_BITS_DECIMALS` decimals: the one rule the app and the report state."""
    return pareto_front(np.round(np.asarray(bits, np.float64), PARETO_BITS_DECIMALS), sqnr)


__all__ = [
    "CHUNK", "N_STATS", "PARALLEL_THRESHOLD", "PARETO_BITS_DECIMALS", "bits_per_element",
    "bits_sqnr_front", "downsample_xy", "pareto_front",
    "error_histograms", "error_metrics", "finite_range", "storage_bits", "stores_zero_point",
    "group_errors", "group_sse", "histogram", "log_histogram", "representable_values",
    "walkthrough",
]
