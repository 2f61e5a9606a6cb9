"""What quantization did to a tensor: error metrics, histograms, per-group errors, walkthroughs.

The heavy paths are numba kernels that stream x and x_hat once (parallel over chunks, float64
accumulators per chunk) so 16 Mi elements take tens of milliseconds, not many NumPy temporaries.

Conventions: error = x_hat - x. Errors are taken over the elements where both x and x_hat are
finite (``n_compared``); NaN/Inf on either side are counted separately (``nan_in`` ...). An
element is *clipped* (saturated) when it is finite and lies outside its group's representable
range [value of the min code, value of the max code] by more than half the spacing of the
outermost codes -- i.e. rounding alone would have needed a code beyond the last one
(:meth:`QuantParams.saturation_bounds`). Without that half step, minmax calibration would report
its own extremes as "clipped" whenever the rounded zero point shifts the range a little.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from numba import njit, prange

from .calibration import (
    QuantParams,
    as_float32,
    as_input,
    target_format,
)
from .concurrency import guarded
from .errors import QuantizationError
from .formats import INT, SCALE, Format, get_format
from .kernels import renamed
from .layout import PER_AXIS, PER_TENSOR, Layout
from .versions import LATEST_OPSET

CHUNK = 1 << 14
PARALLEL_THRESHOLD = 1 << 16
TINY = float(np.finfo(np.float32).tiny)

# error-statistics slots
(S_SSE, S_SX2, S_SAE, S_MAXAE, S_SREL, S_NREL, S_NCMP, S_NANIN, S_INFIN, S_NANOUT, S_INFOUT,
 S_NCLIP, S_NFIN, S_SSECLIP) = range(14)
N_STATS = 14


# ---------------------------------------------------------------------------------------------
# kernels


def _finite_minmax_impl(x):
    n = x.size
    nch = (n + CHUNK - 1) // CHUNK
    out = np.empty((nch, 3), np.float64)
    for c in prange(nch):
        i0 = c * CHUNK
        i1 = min(n, i0 + CHUNK)
        lo = np.inf
        hi = -np.inf
        cnt = 0
        for i in range(i0, i1):
            v = np.float64(x[i])
            if math.isfinite(v):
                lo = min(lo, v)
                hi = max(hi, v)
                cnt += 1
        out[c, 0] = lo
        out[c, 1] = hi
        out[c, 2] = cnt
    return out


def _histogram_impl(x, first, last, denom, edges, nbins, nb):
    """np.histogram's uniform-bin rule, in x's precision: bin i is [e_i, e_i+1), the last closed."""
    n = x.size
    nch = min(max(1, n // CHUNK), 256)
    per = (n + nch - 1) // nch
    counts = np.zeros((nch, nbins), np.int64)
    for c in prange(nch):
        i0 = c * per
        i1 = min(n, i0 + per)
        for i in range(i0, i1):
            v = x[i]
            if v >= first and v <= last:
                k = np.int64(((v - first) / denom) * nb)
                if k == nbins:
                    k -= 1
                if v < edges[k]:
                    k -= 1
                elif k != nbins - 1 and v >= edges[k + 1]:
                    k += 1
                counts[c, k] += 1
    return counts.sum(axis=0)


@njit(cache=True, nogil=True)
def _fill_bounds(i0, n, lp, glo, ghi, blo, bhi):
    """Gather each element's group bounds for elements i0..i0+n through the layout's index map."""
    dim, post, block = lp[1], lp[2], lp[3]
    sblocks, spost = lp[5], lp[6]
    spre_step = 1 if lp[4] > 1 else 0
    plane = dim * post
    p = i0 // plane
    r = i0 - p * plane
    d = r // post
    q = r - d * post
    j = 0
    if post == 1 and block == 1:
        while j < n:
            run = min(dim - d, n - j)
            base = p * spre_step * sblocks + d
            blo[j:j + run] = glo[base:base + run]
            bhi[j:j + run] = ghi[base:base + run]
            j += run
            d += run
            if d == dim:
                d = 0
                p += 1
    elif post == 1:
        while j < n:
            run = min(dim - d, n - j)
            base = p * spre_step * sblocks
            k = 0
            while k < run:
                blk = (d + k) // block
                end = min(run, (blk + 1) * block - d)
                blo[j + k:j + end] = glo[base + blk]
                bhi[j + k:j + end] = ghi[base + blk]
                k = end
            j += run
            d += run
            if d == dim:
                d = 0
                p += 1
    else:
        while j < n:
            run = min(post - q, n - j)
            sbase = (p * spre_step * sblocks + d // block) * spost
            if spost > 1:
                blo[j:j + run] = glo[sbase + q:sbase + q + run]
                bhi[j:j + run] = ghi[sbase + q:sbase + q + run]
            else:
                blo[j:j + run] = glo[sbase]
                bhi[j:j + run] = ghi[sbase]
            j += run
            q += run
            if q == post:
                q = 0
                d += 1
                if d == dim:
                    d = 0
                    p += 1


@njit(cache=True, nogil=True, fastmath={"nnan", "ninf", "nsz", "reassoc"})
def _max_nonneg(a, m):
    """Largest of a[:m] (non-negative, finite values: the fast-math flags let it vectorize)."""
    r = 0.0
    for j in range(m):
        r = max(r, a[j])
    return r


def _error_impl(x, xh, glo, ghi, lp, has_range, tiny):
    """One pass: every error statistic, per chunk (the caller sums the rows, maxes S_MAXAE).

    Branch-free body (selects, not jumps) so LLVM vectorizes it; float64 accumulators.
    """
    n = x.size
    nch = (n + CHUNK - 1) // CHUNK
    out = np.zeros((nch, N_STATS), np.float64)
    grouped = has_range and (lp[4] * lp[5] * lp[6] > 1)
    for c in prange(nch):
        i0 = c * CHUNK
        m = min(CHUNK, n - i0)
        blo = np.empty(CHUNK, np.float64)
        bhi = np.empty(CHUNK, np.float64)
        abuf = np.empty(CHUNK, np.float64)
        if grouped:
            _fill_bounds(i0, m, lp, glo, ghi, blo, bhi)
        else:
            blo[:] = glo[0] if has_range else -np.inf
            bhi[:] = ghi[0] if has_range else np.inf
        sse = 0.0
        sx2 = 0.0
        sae = 0.0
        srel = 0.0
        sseclip = 0.0
        nrel = 0
        ncmp = 0
        nanin = 0
        infin = 0
        nanout = 0
        infout = 0
        nclip = 0
        for j in range(m):
            xv = np.float64(x[i0 + j])
            hv = np.float64(xh[i0 + j])
            e = hv - xv
            ok = abs(e) < np.inf  # both finite (False for NaN and Inf)
            e0 = e if ok else 0.0
            e2 = e0 * e0
            ae = abs(e0)
            ax = abs(xv)
            abuf[j] = ae
            sse += e2
            sx2 += xv * xv if ok else 0.0
            sae += ae
            rel = ok & (ax > tiny)
            srel += ae / (ax if rel else 1.0) if rel else 0.0
            nrel += np.int64(rel)
            ncmp += np.int64(ok)
            nanin += np.int64(xv != xv)
            infin += np.int64(ax == np.inf)
            nanout += np.int64(hv != hv)
            infout += np.int64(abs(hv) == np.inf)
            clip = (ax < np.inf) & ((xv < blo[j]) | (xv > bhi[j]))
            nclip += np.int64(clip)
            sseclip += e2 if clip else 0.0
        maxae = _max_nonneg(abuf, m)
        out[c, S_SSE] = sse
        out[c, S_SX2] = sx2
        out[c, S_SAE] = sae
        out[c, S_MAXAE] = maxae
        out[c, S_SREL] = srel
        out[c, S_NREL] = nrel
        out[c, S_NCMP] = ncmp
        out[c, S_NANIN] = nanin
        out[c, S_INFIN] = infin
        out[c, S_NANOUT] = nanout
        out[c, S_INFOUT] = infout
        out[c, S_NCLIP] = nclip
        out[c, S_NFIN] = m - nanin - infin
        out[c, S_SSECLIP] = sseclip
    return out


def _group_sse_impl(x, xh, lp):
    """Sum of squared errors and count of finite pairs per group (scale order)."""
    pre, dim, post, block, spre, sblocks, spost = lp[0], lp[1], lp[2], lp[3], lp[4], lp[5], lp[6]
    ng = spre * sblocks * spost
    n = x.size
    sse = np.zeros(ng, np.float64)
    cnt = np.zeros(ng, np.float64)
    if ng == 1:
        nch = (n + CHUNK - 1) // CHUNK
        part = np.zeros((nch, 2), np.float64)
        for c in prange(nch):
            acc = 0.0
            k = 0.0
            for i in range(c * CHUNK, min(n, (c + 1) * CHUNK)):
                e = np.float64(xh[i]) - np.float64(x[i])
                ok = abs(e) < np.inf
                acc += e * e if ok else 0.0
                k += 1.0 if ok else 0.0
            part[c, 0] = acc
            part[c, 1] = k
        sse[0] = part[:, 0].sum()
        cnt[0] = part[:, 1].sum()
        return sse, cnt
    nchp = min(pre, 32)
    if spre == 1 and pre > 1 and nchp * ng <= (1 << 22):
        # groups shared by every pre index: chunks of pre with private accumulators
        per = (pre + nchp - 1) // nchp
        psse = np.zeros((nchp, ng), np.float64)
        pcnt = np.zeros((nchp, ng), np.float64)
        for c in prange(nchp):
            for p in range(c * per, min(pre, (c + 1) * per)):
                if post == 1 and block == 1:  # per-axis on the last axis: one group per column
                    row = p * dim
                    for d in range(dim):
                        e = np.float64(xh[row + d]) - np.float64(x[row + d])
                        ok = abs(e) < np.inf
                        psse[c, d] += e * e if ok else 0.0
                        pcnt[c, d] += 1.0 if ok else 0.0
                    continue
                for d in range(dim):
                    b = d if block == 1 else d // block
                    base = (p * dim + d) * post
                    if spost > 1:
                        for q in range(post):
                            e = np.float64(xh[base + q]) - np.float64(x[base + q])
                            ok = abs(e) < np.inf
                            psse[c, b * spost + q] += e * e if ok else 0.0
                            pcnt[c, b * spost + q] += 1.0 if ok else 0.0
                    else:
                        acc = 0.0
                        k = 0.0
                        for q in range(post):
                            e = np.float64(xh[base + q]) - np.float64(x[base + q])
                            ok = abs(e) < np.inf
                            acc += e * e if ok else 0.0
                            k += 1.0 if ok else 0.0
                        psse[c, b] += acc
                        pcnt[c, b] += k
        for c in range(nchp):
            for g in range(ng):
                sse[g] += psse[c, g]
                cnt[g] += pcnt[c, g]
        return sse, cnt
    # each unit owns a range of blocks (and one pre index when the scale has it)
    if spre > 1:
        bch = sblocks if spre >= 64 else max(1, (sblocks * spre + 63) // 64)
    else:
        bch = max(1, (sblocks + 63) // 64)
    nbr = (sblocks + bch - 1) // bch
    for u in prange(spre * nbr):
        ps = u // nbr
        b0 = (u - ps * nbr) * bch
        b1 = min(sblocks, b0 + bch)
        p0 = ps if spre > 1 else 0
        p1 = ps + 1 if spre > 1 else pre
        for p in range(p0, p1):
            for b in range(b0, b1):
                gb = (ps * sblocks + b) * spost
                d0 = b * block
                d1 = min(dim, d0 + block)
                if spost > 1:
                    for d in range(d0, d1):
                        base = (p * dim + d) * post
                        for q in range(post):
                            e = np.float64(xh[base + q]) - np.float64(x[base + q])
                            ok = abs(e) < np.inf
                            sse[gb + q] += e * e if ok else 0.0
                            cnt[gb + q] += 1.0 if ok else 0.0
                else:  # the block's elements are contiguous
                    acc = 0.0
                    k = 0.0
                    for i in range((p * dim + d0) * post, (p * dim + d1) * post):
                        e = np.float64(xh[i]) - np.float64(x[i])
                        ok = abs(e) < np.inf
                        acc += e * e if ok else 0.0
                        k += 1.0 if ok else 0.0
                    sse[gb] += acc
                    cnt[gb] += k
    return sse, cnt


#: Reductions may be reassociated (so loops vectorize); NaN/Inf semantics are kept.
_FASTMATH = {"reassoc", "contract", "nsz"}
_finite_minmax_par = njit(parallel=True, cache=True)(renamed(_finite_minmax_impl, "_par"))
_finite_minmax_ser = njit(cache=True)(renamed(_finite_minmax_impl, "_ser"))
_histogram_par = njit(parallel=True, cache=True, error_model="numpy")(
    renamed(_histogram_impl, "_par"))
_histogram_ser = njit(cache=True, error_model="numpy")(renamed(_histogram_impl, "_ser"))
_error_par = njit(parallel=True, cache=True, fastmath=_FASTMATH, error_model="numpy")(
    renamed(_error_impl, "_par"))
_error_ser = njit(cache=True, fastmath=_FASTMATH, error_model="numpy")(
    renamed(_error_impl, "_ser"))
_group_sse_par = njit(parallel=True, cache=True, fastmath=_FASTMATH,
                      error_model="numpy")(renamed(_group_sse_impl, "_par"))
_group_sse_ser = njit(cache=True, fastmath=_FASTMATH, error_model="numpy")(
    renamed(_group_sse_impl, "_ser"))


def _pick(par, ser, n: int):
    return guarded(par) if n >= PARALLEL_THRESHOLD else ser


def _lp(layout: Layout) -> np.ndarray:
    return np.array([layout.pre, layout.dim, layout.post, max(layout.block, 1), layout.scale_pre,
                     layout.scale_blocks, layout.scale_post], np.int64)


# ---------------------------------------------------------------------------------------------
# histograms


def finite_range(x: Any) -> tuple[float, float, int]:
    """(min, max, count) of the finite values of x; (nan, nan, 0) when there are none."""
    a = as_float32(x)
    if a.size == 0:
        return math.nan, math.nan, 0
    out = _pick(_finite_minmax_par, _finite_minmax_ser, a.size)(a)
    cnt = int(out[:, 2].sum())
    if cnt == 0:
        return math.nan, math.nan, 0
    return float(out[:, 0].min()), float(out[:, 1].max()), cnt


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
    counts = _pick(_histogram_par, _histogram_ser, a.size)(a, first, last, denom, edges, bins,
                                                          dt(bins))
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


def _as_params_layout(params: QuantParams, x_shape: tuple[int, ...]) -> Layout:
    return params.layout(tuple(x_shape))


def error_metrics(x: Any, x_hat: Any, *, y: Any = None, target: Any = None,
                  params: QuantParams | None = None) -> dict[str, float]:
    """Error statistics of a round trip x -> x_hat (one numba pass).

    Keys: mse, rmse, sqnr_db, max_abs_error, mean_abs_error, mean_rel_error, clipped_fraction,
    nan_in, inf_in, nan_out, inf_out, bits_per_element, n, plus n_compared, n_clipped and
    clipping_mse / rounding_mse (the mse split between clipped and in-range elements).
    ``clipped_fraction`` and the split need ``params``; ``bits_per_element`` needs the target
    (from ``target``, ``params`` or ``y``'s dtype). Missing ones are NaN.
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
    if params is not None and n:
        layout = _as_params_layout(params, xs)
        glo, ghi = params.saturation_bounds()
        glo, ghi = np.ascontiguousarray(glo.reshape(-1)), np.ascontiguousarray(ghi.reshape(-1))
        has_range = True
    else:
        layout = Layout(PER_TENSOR, None, max(n, 1), 1, max(n, 1), 1, 1, 1, 1)
        glo = ghi = np.zeros(1, np.float64)
        has_range = False
    if n:
        rows = _pick(_error_par, _error_ser, n)(xa, ha, glo, ghi, _lp(layout), has_range, TINY)
        st = rows.sum(axis=0)
        st[S_MAXAE] = rows[:, S_MAXAE].max()
    else:
        st = np.zeros(N_STATS)
    ncmp = st[S_NCMP]
    mse = st[S_SSE] / ncmp if ncmp else math.nan
    if st[S_SSE] == 0:
        sqnr = math.inf if ncmp else math.nan
    elif st[S_SX2] == 0:
        sqnr = -math.inf
    else:
        sqnr = 10.0 * math.log10(st[S_SX2] / st[S_SSE])
    if fmt is None:
        bpe = math.nan
    elif params is not None:
        bpe = params.bits_per_element(n)
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
        "n_compared": int(ncmp),
        "n_clipped": int(st[S_NCLIP]) if has_range else 0,
        "clipping_mse": st[S_SSECLIP] / ncmp if (ncmp and has_range) else nan,
        "rounding_mse": (st[S_SSE] - st[S_SSECLIP]) / ncmp if (ncmp and has_range) else nan,
    }


# ---------------------------------------------------------------------------------------------
# per-group errors


def group_sse(x: np.ndarray, x_hat: np.ndarray, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """(sum of squared errors, count of finite pairs) per scale group, in scale order (flat)."""
    xa = as_float32(x)
    ha = as_float32(x_hat)
    return _pick(_group_sse_par, _group_sse_ser, xa.size)(xa, ha, _lp(layout))


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
        if layout.granularity == PER_TENSOR:
            sshape = ()
        elif layout.granularity == PER_AXIS:
            sshape = (layout.dim,)
        else:
            s = list(x_shape)
            s[layout.axis] = layout.scale_blocks
            sshape = tuple(s)
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


# ---------------------------------------------------------------------------------------------
# walkthrough


def _bits_string(code: int, bits: int) -> str:
    return format(int(code) & ((1 << bits) - 1), f"0{bits}b")


def _round_to_format(q: np.ndarray, fmt: Format) -> np.ndarray:
    """Round float64 values (exact float32/16 quotients) to fmt's mantissa grid, half to even,
    with an unbounded exponent above (overflow is the next step's business)."""
    q = np.asarray(q, np.float64)
    out = np.full(q.shape, np.nan)
    fin = np.isfinite(q)
    out[~fin] = q[~fin]
    a = np.abs(q[fin])
    _, e = np.frexp(np.where(a > 0, a, 1.0))
    ulp = np.ldexp(1.0, np.maximum(e - 1, 1 - fmt.bias) - fmt.mbits)
    out[fin] = np.copysign(np.rint(a / ulp) * ulp, q[fin])
    return out


def walkthrough(x: Any, params: QuantParams, target: Any, indices: Any, *, saturate: bool = True,
                precision: Any = None, opset: int = LATEST_OPSET, y: Any = None,
                x_hat: Any = None) -> pd.DataFrame:
    """Step by step for chosen elements: x, scale, x/scale, rounded, + zero point, saturated,
    the stored bits and x̂ — the same numbers qcore computes on the whole tensor.

    ``indices`` are flat indices or index tuples. ``y`` / ``x_hat`` may be given if already
    computed with the same settings.
    """
    xa = as_input(x)
    fmt = target_format(target)
    if y is None:
        y = params.quantize(xa, saturate=saturate, precision=precision, opset=opset)
    if x_hat is None:
        x_hat = params.dequantize(y, opset=opset)
    y = np.asarray(y)
    x_hat = np.asarray(x_hat)
    flat = _flat_indices(indices, xa.shape)
    layout = params.layout(xa.shape, opset)
    sidx = _scale_indices(flat, layout)
    scale_flat = np.asarray(params.scale).reshape(-1)
    s_val = scale_flat[sidx].astype(np.float64)
    zp_val = (np.zeros(flat.size) if params.zero_point is None
              else np.asarray(params.zero_point).reshape(-1)[sidx].astype(np.float64))
    xv = xa.reshape(-1)[flat]
    # division in the precision type (else the scale's; float32 for e8m0 scales)
    pfmt = get_format(precision, "precision") if precision not in (None, 0) else \
        params.scale_format
    if pfmt.kind == SCALE or pfmt.name not in ("float", "float16", "bfloat16"):
        pfmt = get_format("float")
    pdt = pfmt.dtype
    with np.errstate(all="ignore"):
        xp = xv.astype(np.float32).astype(pdt).astype(np.float64)
        sp = s_val.astype(np.float32).astype(pdt).astype(np.float64)
        quot = (xp / sp).astype(pdt).astype(np.float64)
    ycodes = y.reshape(-1)[flat]
    yval = ycodes.astype(np.float64)
    if fmt.kind == INT:
        rounded = np.rint(quot)
        plus_zp = rounded + zp_val
        with np.errstate(invalid="ignore"):
            sat = np.where(np.isnan(plus_zp), fmt.min, np.clip(plus_zp, fmt.min, fmt.max))
        stored = [_bits_string(c, fmt.bits) for c in ycodes.astype(np.int64)]
    else:
        with np.errstate(all="ignore"):
            pre_round = (quot + zp_val).astype(pdt).astype(np.float64) \
                if params.zero_point is not None else quot
        rounded = _round_to_format(quot, fmt)
        plus_zp = _round_to_format(pre_round, fmt)
        sat = yval
        raw = ycodes.view(fmt.storage_dtype).astype(np.int64)
        stored = [_bits_string(c, fmt.bits) for c in raw]
    xh = x_hat.reshape(-1)[flat].astype(np.float64)
    position = [tuple(int(v) for v in np.unravel_index(i, xa.shape)) if xa.ndim > 1 else int(i)
                for i in flat]
    with np.errstate(invalid="ignore"):
        err = xh - xv.astype(np.float64)
    return pd.DataFrame({
        "index": flat,
        "position": position,
        "x": xv.astype(np.float64),
        "scale": s_val,
        "x/scale": quot,
        "rounded": rounded,
        "+zero point": plus_zp,
        "saturated": np.asarray(sat, np.float64),
        "stored bits": stored,
        "x̂": xh,
        "error": err,
    })


def _flat_indices(indices: Any, shape: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    if isinstance(indices, (int, np.integer)):
        indices = [indices]
    items = list(indices)
    if items and isinstance(items[0], (tuple, list, np.ndarray)) and np.ndim(items[0]) == 1 \
            and len(shape) > 1:
        flat = np.ravel_multi_index(tuple(np.asarray(items).T), shape)
    else:
        flat = np.asarray(items, np.int64).reshape(-1)
    if flat.size and (flat.min() < -n or flat.max() >= n):
        raise QuantizationError(f"indices out of range for x with {n} elements")
    return np.asarray(flat, np.int64) % max(n, 1)


def _scale_indices(flat: np.ndarray, layout: Layout) -> np.ndarray:
    if layout.granularity == PER_TENSOR:
        return np.zeros(flat.size, np.int64)
    p, r = np.divmod(flat, layout.dim * layout.post)
    d, q = np.divmod(r, layout.post)
    pp = p if layout.scale_pre > 1 else 0
    qq = q if layout.scale_post > 1 else 0
    return (pp * layout.scale_blocks + d // layout.block) * layout.scale_post + qq


__all__ = [
    "downsample_xy", "error_metrics", "finite_range", "group_errors", "group_sse", "histogram",
    "log_histogram", "representable_values", "walkthrough",
]
