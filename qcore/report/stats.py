"""Per-tensor statistics for the report: absmax, standard deviation, excess kurtosis.

One numba pass over fixed chunks (per-chunk mean and central moments, merged in order with
Chan et al.'s pairwise formulas), so the figures do not depend on the thread count and the
report's rows are identical in every process.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ..concurrency import adaptive
from ..kernels import renamed

__all__ = ["CHUNK", "chunk_rows", "stats_of_rows", "tensor_stats"]

CHUNK = 1 << 16


def _chunk_moments_impl(x):
    n = x.size
    nch = (n + CHUNK - 1) // CHUNK
    out = np.zeros((nch, 9), np.float64)  # count, mean, M2, M3, M4, absmax, non-finite, min, max
    for c in prange(nch):
        i0 = c * CHUNK
        i1 = min(n, i0 + CHUNK)
        cnt = 0
        bad = 0
        s = 0.0
        lo = np.inf
        hi = -np.inf
        for i in range(i0, i1):
            v = np.float64(x[i])
            if math.isfinite(v):
                cnt += 1
                s += v
                lo = min(lo, v)
                hi = max(hi, v)
            else:
                bad += 1
        mean = s / cnt if cnt else 0.0
        m2 = 0.0
        m3 = 0.0
        m4 = 0.0
        for i in range(i0, i1):
            v = np.float64(x[i])
            if math.isfinite(v):
                d = v - mean
                d2 = d * d
                m2 += d2
                m3 += d2 * d
                m4 += d2 * d2
        out[c, 0] = cnt
        out[c, 1] = mean
        out[c, 2] = m2
        out[c, 3] = m3
        out[c, 4] = m4
        out[c, 5] = max(abs(lo), abs(hi)) if cnt else 0.0  # the largest |v|: |min| or |max|
        out[c, 6] = bad
        out[c, 7] = lo
        out[c, 8] = hi
    return out


# two names: a parallel and a serial compilation of one function would share a cache entry
_moments_par = njit(cache=True, parallel=True, nogil=True)(renamed(_chunk_moments_impl, "_par"))
_moments_ser = njit(cache=True, nogil=True)(renamed(_chunk_moments_impl, "_ser"))
PARALLEL_THRESHOLD = 1 << 21  # below this, waking a second thread costs more than it saves


def _merge(rows: np.ndarray) -> tuple[float, float, float, float, float]:
    """(n, mean, M2, M3, M4) of all chunks, merged left to right."""
    n, mean, m2, m3, m4 = 0.0, 0.0, 0.0, 0.0, 0.0
    for nb, mb, m2b, m3b, m4b in rows[:, :5]:
        if nb == 0:
            continue
        if n == 0:
            n, mean, m2, m3, m4 = nb, mb, m2b, m3b, m4b
            continue
        nt = n + nb
        d = mb - mean
        d_n = d / nt
        m4 = (m4 + m4b + d * d_n ** 3 * n * nb * (n * n - n * nb + nb * nb)
              + 6 * d_n * d_n * (n * n * m2b + nb * nb * m2) + 4 * d_n * (n * m3b - nb * m3))
        m3 = m3 + m3b + d * d_n * d_n * n * nb * (n - nb) + 3 * d_n * (n * m2b - nb * m2)
        m2 = m2 + m2b + d * d_n * n * nb
        mean = mean + d_n * nb
        n = nt
    return n, mean, m2, m3, m4


def chunk_rows(flat: np.ndarray) -> np.ndarray:
    """Per-chunk moments of a flat float32 piece (a whole number of CHUNKs, but for the
    tensor's last piece), one row per chunk. A large piece runs the parallel kernel through
    :func:`qcore.concurrency.adaptive`: on the cores other processes leave free, and under the
    lock on a threading layer that is not thread-safe (the report runs tensors on threads)."""
    kernel = adaptive(_moments_par) if flat.size >= PARALLEL_THRESHOLD else _moments_ser
    return kernel(np.ascontiguousarray(flat).reshape(-1))


def stats_of_rows(rows: np.ndarray) -> dict[str, float]:
    """absmax, mean, std (population), excess kurtosis, finite min and max and the non-finite
    count from the chunk rows of a whole tensor (NaN where undefined)."""
    if rows.shape[0] == 0:
        return {"absmax": math.nan, "mean": math.nan, "std": math.nan,
                "excess_kurtosis": math.nan, "nonfinite_in": 0, "min": math.nan,
                "max": math.nan}
    n, mean, m2, _, m4 = _merge(rows)
    var = m2 / n if n else math.nan
    kurt = (n * m4 / (m2 * m2) - 3.0) if n and m2 > 0 else math.nan
    return {
        "absmax": float(rows[:, 5].max()) if n else math.nan,
        "mean": float(mean) if n else math.nan,
        "std": math.sqrt(var) if n else math.nan,
        "excess_kurtosis": float(kurt),
        "nonfinite_in": int(rows[:, 6].sum()),
        "min": float(rows[:, 7].min()) if n else math.nan,
        "max": float(rows[:, 8].max()) if n else math.nan,
    }


def tensor_stats(x: np.ndarray) -> dict[str, float]:
    """absmax, mean, std (population), excess kurtosis, finite min / max and the non-finite
    count of x's finite values (NaN where undefined)."""
    flat = np.ascontiguousarray(x).reshape(-1)
    return stats_of_rows(chunk_rows(flat) if flat.size else np.zeros((0, 9)))
