"""Reductions over a tensor and over each scale's group: the numba kernels behind
:mod:`qcore.metrics` and :mod:`qcore.calibration` (a leaf: neither of those is imported here).

The kernels stream x (and x_hat) once, parallel over chunks with float64 accumulators per chunk,
so 16 Mi elements take tens of milliseconds rather than many NumPy temporaries. Grouped
statistics find each element's group through the layout's index map: on the NumPy side
:class:`qcore.layout.Layout`'s group views, inside the kernels the CPU kernels' own walker.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import njit, prange

from . import config
from .concurrency import adaptive
from .kernels import renamed
from .kernels.pool import readonly
from .layout import Layout

# ---------------------------------------------------------------------------------------------
# the index-map walker of the CPU kernels and its parameters (the only coupling to their
# internals: repoint these lines when the walker moves)
# isort: split
from .kernels.params import LayoutParams
from .kernels.walk import block_count, block_span
from .kernels.walk import locate as walk_locate
from .kernels.walk import next_segment as walk_next_segment

walker_params = LayoutParams.from_layout

# ---------------------------------------------------------------------------------------------
# tunables of these kernels (one place; to join the kernels' tunables in one config module)

CHUNK = config.METRICS_CHUNK
PARALLEL_THRESHOLD = config.METRICS_PARALLEL_THRESHOLD
GROUP_RUNS_PER_THREAD = config.GROUP_RUNS_PER_THREAD
SHORT_BLOCK = config.SHORT_BLOCK

TINY = float(np.finfo(np.float32).tiny)

#: Reductions may be reassociated (so loops vectorize); NaN/Inf semantics are kept.
_FASTMATH = {"reassoc", "contract", "nsz"}

# error-statistics slots of error_stats()
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
    total = np.zeros(nbins, np.int64)  # a loop, not counts.sum(axis=0): no axis-check code
    for c in range(nch):
        for k in range(nbins):
            total[k] += counts[c, k]
    return total


@njit(cache=True, nogil=True)
def _fill_bounds(i0, n, lp, glo, ghi, blo, bhi):
    """Each element's group bounds for elements i0..i0+n, gathered segment by segment by the
    kernels' index-map walker."""
    p, d, q = walk_locate(i0, lp)
    j = 0
    while j < n:
        run, k, m, blk, first, p, d, q = walk_next_segment(p, d, q, n - j, lp)
        # element loops, not slice assignments: those compile a shape check whose error
        # message formatting alone took seconds of a cold start
        if blk == 0:  # one group per element
            for t in range(run):
                blo[j + t] = glo[k + t]
                bhi[j + t] = ghi[k + t]
        else:  # element t of the run is in group k + (first + t) // blk
            for b in range(block_count(run, blk, first)):
                t0, t1 = block_span(b, run, blk, first)
                lo_b = glo[k + b]
                hi_b = ghi[k + b]
                for u in range(t0, t1):
                    blo[j + u] = lo_b
                    bhi[j + u] = hi_b
        j += run


@njit(cache=True, nogil=True, fastmath={"nnan", "ninf", "nsz", "reassoc"})
def _max_nonneg(a, m):
    """Largest of a[:m] (non-negative, finite values: the fast-math flags let it vectorize)."""
    r = 0.0
    for j in range(m):
        r = max(r, a[j])
    return r


def _error_impl(x, xh, glo, ghi, lp, grouped, has_range, tiny):
    """Every error statistic, one row per chunk (the caller sums the rows, maxes S_MAXAE).

    Branch-free bodies (selects, not jumps) so LLVM vectorizes them; float64 accumulators. The
    summing loop stores nothing: a loop that stores gets a runtime alias check from LLVM, whose
    outcome (heap addresses) picks the vectorized or the scalar copy, two summation orders. So
    the |errors| for the max are written by a loop of their own, whose result no order changes.
    """
    n = x.size
    nch = (n + CHUNK - 1) // CHUNK
    out = np.zeros((nch, N_STATS), np.float64)
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
        for j in range(m):
            e = np.float64(xh[i0 + j]) - np.float64(x[i0 + j])
            abuf[j] = abs(e) if abs(e) < np.inf else 0.0
        maxae = _max_nonneg(abuf, m)
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


@njit(cache=True, nogil=True)
def _group_spans(n, per, lp):
    """For each run of ``per`` elements: the first group it touches and one past the last
    (found by the kernels' index-map walker, segment by segment)."""
    nch = (n + per - 1) // per
    spans = np.empty((nch, 2), np.int64)
    for c in range(nch):
        i0 = c * per
        m = min(per, n - i0)
        p, d, q = walk_locate(i0, lp)
        lo = np.int64(1) << 62
        hi = np.int64(0)
        j = 0
        while j < m:
            run, k, cnt, blk, first, p, d, q = walk_next_segment(p, d, q, m - j, lp)
            lo = min(lo, k)
            hi = max(hi, k + cnt)
            j += run
        spans[c, 0] = lo
        spans[c, 1] = hi
    return spans


@njit(cache=True, nogil=True, fastmath=_FASTMATH, error_model="numpy")
def _segment_sse(xs, hs, blk, first, vs, vc):
    """Add one walker segment's squared errors and finite counts to its groups ``vs``/``vc``:
    element t of the segment is in group t (blk == 0) or (first + t) // blk. The per-element
    loop has unsigned indices, as in the CPU kernels: no negative-index wraparound, so LLVM
    vectorises it (the short per-block loops are faster left as they are)."""
    run = xs.size
    if blk == 0:
        for t in range(np.uint64(run)):
            e = np.float64(hs[t]) - np.float64(xs[t])
            ok = abs(e) < np.inf
            vs[t] += e * e if ok else 0.0
            vc[t] += 1.0 if ok else 0.0
        return
    if blk < SHORT_BLOCK:  # short blocks: one pass, a group ends every blk elements
        g = 0
        left = blk - first
        acc = 0.0
        kk = 0.0
        for t in range(run):
            e = np.float64(hs[t]) - np.float64(xs[t])
            ok = abs(e) < np.inf
            acc += e * e if ok else 0.0
            kk += 1.0 if ok else 0.0
            left -= 1
            if left == 0:
                vs[g] += acc
                vc[g] += kk
                g += 1
                left = blk
                acc = 0.0
                kk = 0.0
        if left != blk:
            vs[g] += acc
            vc[g] += kk
        return
    for g in range(vs.size):
        a, b = block_span(g, run, blk, first)
        acc = 0.0
        kk = 0.0
        for i in range(a, b):
            e = np.float64(hs[i]) - np.float64(xs[i])
            ok = abs(e) < np.inf
            acc += e * e if ok else 0.0
            kk += 1.0 if ok else 0.0
        vs[g] += acc
        vc[g] += kk


@njit(cache=True, nogil=True, fastmath=_FASTMATH, error_model="numpy")
def _run_sse(x, xh, i0, m, lp, vs, vc, g0):
    """Elements i0..i0+m into their groups' slots of ``vs``/``vc`` (group g at g - g0), segment
    by segment as the walker cuts them. A function of its own, so that the parallel loop's
    body stays a call and this compiles as plain (vectorised) code."""
    p, d, q = walk_locate(i0, lp)
    j = 0
    while j < m:
        run, k, cnt, blk, first, p, d, q = walk_next_segment(p, d, q, m - j, lp)
        s0 = i0 + j
        _segment_sse(x[s0:s0 + run], xh[s0:s0 + run], blk, first, vs[k - g0:k - g0 + cnt],
                     vc[k - g0:k - g0 + cnt])
        j += run


def _group_sse_impl(x, xh, lp, per, spans, offsets, ng):
    """Sum of squared errors and count of finite pairs per group (scale order).

    Each run of ``per`` elements accumulates into its own slice of a buffer covering only the
    groups it touches (``spans``, at ``offsets``), found through the walker; the slices are
    added up at the end.
    """
    n = x.size
    nch = spans.shape[0]
    bsse = np.zeros(offsets[nch], np.float64)
    bcnt = np.zeros(offsets[nch], np.float64)
    for c in prange(nch):
        i0 = c * per
        _run_sse(x, xh, i0, min(per, n - i0), lp, bsse[offsets[c]:offsets[c + 1]],
                 bcnt[offsets[c]:offsets[c + 1]], spans[c, 0])
    sse = np.zeros(ng, np.float64)
    count = np.zeros(ng, np.float64)
    for c in range(nch):
        o = offsets[c] - spans[c, 0]
        for g in range(spans[c, 0], spans[c, 1]):
            sse[g] += bsse[o + g]
            count[g] += bcnt[o + g]
    return sse, count


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
    """The serial kernel below the threshold, else the parallel one on the cores other
    processes leave free (a worker on a taken core makes the join wait a time slice): no
    result here depends on how many workers run the call."""
    return adaptive(par) if n >= PARALLEL_THRESHOLD else ser


# ---------------------------------------------------------------------------------------------
# entry points


def as_float32(x: np.ndarray) -> np.ndarray:
    """A flat, contiguous float32 or float64 view/copy for the numba kernels, read-only: numba
    compiles read-only and writable arrays apart, and the app's cached tensors are read-only
    (one compilation for both: less to compile on a cold start)."""
    arr = np.asarray(x)
    if arr.dtype not in (np.float32, np.float64):
        arr = arr.astype(np.float32)
    return readonly(np.ascontiguousarray(arr).reshape(-1))


def finite_range(x: np.ndarray) -> tuple[float, float, int]:
    """(min, max, count) of the finite values of x; (nan, nan, 0) when there are none."""
    a = as_float32(x)
    if a.size == 0:
        return math.nan, math.nan, 0
    out = _pick(_finite_minmax_par, _finite_minmax_ser, a.size)(a)
    cnt = int(out[:, 2].sum())
    if cnt == 0:
        return math.nan, math.nan, 0
    return float(out[:, 0].min()), float(out[:, 1].max()), cnt


def histogram_counts(a: np.ndarray, first, last, denom, edges: np.ndarray,
                     bins: int) -> np.ndarray:
    """np.histogram's uniform-bin counts of flat ``a`` (first/last/denom of a's type)."""
    dt = a.dtype.type
    return _pick(_histogram_par, _histogram_ser, a.size)(a, first, last, denom, edges, bins,
                                                        dt(bins))


def error_stats(x: np.ndarray, x_hat: np.ndarray, layout: Layout | None = None,
                lo: np.ndarray | None = None, hi: np.ndarray | None = None) -> np.ndarray:
    """Every error statistic of x -> x_hat in one pass (the S_* slots, summed; S_MAXAE the max).

    With ``layout`` and per-group saturation bounds ``lo``/``hi`` (flat, scale order) an
    element is counted as clipped when it lies outside its group's bounds.

    The sums are the same bit for bit whatever the thread count, in the parallel kernel and the
    serial one: each fixed chunk of CHUNK elements gets its own row of sums, whichever thread
    runs it, and the rows are added in chunk order (tests/test_report_modes.py checks it).
    """
    xa, ha = as_float32(x), as_float32(x_hat)
    n = xa.size
    if n == 0:
        return np.zeros(N_STATS)
    has_range = layout is not None
    if has_range:
        glo = np.ascontiguousarray(np.asarray(lo, np.float64).reshape(-1))
        ghi = np.ascontiguousarray(np.asarray(hi, np.float64).reshape(-1))
        grouped = layout.n_scales > 1
        lp = walker_params(layout)
    else:
        glo = ghi = np.zeros(1, np.float64)
        grouped = False
        lp = walker_params(Layout.from_granularity((n,), "per-tensor"))
    rows = _pick(_error_par, _error_ser, n)(xa, ha, glo, ghi, lp, grouped, has_range, TINY)
    st = rows.sum(axis=0)
    st[S_MAXAE] = rows[:, S_MAXAE].max()
    return st


def group_sse(x: np.ndarray, x_hat: np.ndarray, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """(sum of squared errors, count of finite pairs) per scale group, in scale order (flat)."""
    xa = as_float32(x)
    ha = as_float32(x_hat)
    n = xa.size
    lp = walker_params(layout)
    if n == 0:
        return np.zeros(layout.n_scales), np.zeros(layout.n_scales)
    # a few runs per thread; fewer, longer runs while the per-run buffers would pass n / 4
    per = max(CHUNK, -(-n // (GROUP_RUNS_PER_THREAD * numba.get_num_threads())))
    while True:
        spans = _group_spans(n, per, lp)
        total = int((spans[:, 1] - spans[:, 0]).sum())
        if per >= n or total <= max(n // 4, 1 << 16):
            break
        per *= 4
    offsets = np.zeros(spans.shape[0] + 1, np.int64)
    np.cumsum(spans[:, 1] - spans[:, 0], out=offsets[1:])
    kernel = _pick(_group_sse_par, _group_sse_ser, n)
    return kernel(xa, ha, lp, per, spans, offsets, layout.n_scales)


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
        lo = layout.reduce_groups(a, np.fmin).astype(np.float64)
        hi = layout.reduce_groups(a, np.fmax).astype(np.float64)
    return lo, hi


def group_quantile(x: np.ndarray, layout: Layout, q: np.ndarray | list[float],
                   absolute: bool) -> np.ndarray:
    """Quantiles (fractions in [0, 1], linear interpolation) of each group's finite values.

    Returns shape (len(q), groups); NaN for a group without finite values.
    """
    a = _finite_copy(x)
    if absolute:
        a = np.abs(a)
    m = layout.group_matrix(a)
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


__all__ = [
    "CHUNK", "PARALLEL_THRESHOLD", "as_float32", "error_stats", "finite_range", "group_minmax",
    "group_quantile", "group_sse", "histogram_counts",
]
