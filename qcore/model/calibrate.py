"""Calibration of static activation sites: minmax, percentile, mse and entropy.

**Calibration** (:func:`calibrate`, static): ``minmax`` maps the observed range (widened to 0)
onto the codes (integers: asymmetric with a zero point; floats: amax → the format's max);
``percentile`` clips |x| at a percentile (both tails for unsigned integers); ``mse`` searches
the clip ratio of least round-trip squared error (:func:`qcore.calibration.choose_params`);
``entropy`` picks the threshold T whose clipped, 128-level histogram has the least KL
divergence from the observed one (:func:`entropy_threshold`, onnxruntime's algorithm on a
2048-bin histogram over [−amax, amax], as TensorRT's calibrator uses) and maps [−T, T] (clipped
to the data's range) onto the codes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..calibration import choose_params, params_from_range, symmetric
from ..errors import QuantizationError
from ..formats import FLOAT, get_format
from .sites import METHODS, ActivationConfig, ActivationSpec
from .staged import runner_for

__all__ = ["ENTROPY_BINS", "ENTROPY_QUANTIZED_BINS", "PERCENTILE", "calibrate", "entropy_threshold",
           "specs_for"]

#: Percentile of |x| the ``percentile`` method clips at.
PERCENTILE = 99.99
#: Histogram bins and quantized bins of the ``entropy`` method.
ENTROPY_BINS, ENTROPY_QUANTIZED_BINS = 2048, 128


def entropy_threshold(hist: np.ndarray, edges: np.ndarray,
                      quantized_bins: int = ENTROPY_QUANTIZED_BINS) -> tuple[float, float]:
    """(lo, hi): the clipping range of least KL divergence for a histogram symmetric about 0.

    onnxruntime's ``HistogramCollector.get_entropy_threshold``: for i from quantized_bins/2 to
    the half width, the reference p is the centre 2i+1 bins with the outer counts added to its
    end bins; q merges the centre bins into ``quantized_bins`` groups and spreads each group's
    count (integer division) over the group's non-empty bins; both are smoothed (zeros → 1e-4)
    and KL(p‖q) (float32) is taken; the edges of the least one are returned."""
    hist = np.asarray(hist, np.int64)
    edges = np.asarray(edges)
    nb = hist.size
    zero = nb // 2
    half = quantized_bins // 2
    best, best_kl = (edges[0], edges[-1]), np.inf
    cum = np.concatenate([[0], np.cumsum(hist)])
    for i in range(half, zero + 1):
        start, end = zero - i, min(zero + i + 1, nb)
        sliced = hist[start:end]
        p = sliced.copy()
        p[0] += cum[start]
        p[-1] += cum[-1] - cum[end]
        nonzero = (p != 0).astype(np.int64)
        merged = sliced.size // quantized_bins
        qb = np.add.reduceat(sliced[:quantized_bins * merged], np.arange(0, quantized_bins
                                                                          * merged, merged))
        qb[-1] += sliced[quantized_bins * merged:].sum()
        norm = np.add.reduceat(nonzero[:quantized_bins * merged],
                               np.arange(0, quantized_bins * merged, merged))
        with np.errstate(divide="ignore", invalid="ignore"):
            per = np.where(norm != 0, qb / np.where(norm != 0, norm, 1), 0)
        q = np.zeros(p.size, np.int64)
        q[:quantized_bins * merged] = np.repeat(per, merged).astype(np.int64)
        ps, qs = _smooth(p), _smooth(q)
        kl = np.inf if ps is None or qs is None else _kl(ps, qs)
        if kl < best_kl:
            best_kl, best = kl, (edges[start], edges[end])
    return float(best[0]), float(best[1])


def _smooth(p: np.ndarray, eps: float = 0.0001) -> np.ndarray | None:
    zeros = (p == 0).astype(np.float32)
    n_zeros = float(zeros.sum())
    n_nonzeros = p.size - n_zeros
    if not n_nonzeros:
        return None
    eps1 = eps * n_zeros / n_nonzeros
    return p.astype(np.float32) + eps * zeros + (-eps1) * (1 - zeros)


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    p = p.astype(np.float32)
    p = p / np.sum(p)
    q = q.astype(np.float32)
    q = q / np.sum(q)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.where(p > 0, p * np.log(p / q), 0).astype(np.float32)
    return float(np.sum(v, dtype=np.float32))


def calibrate(values: Sequence[np.ndarray], site: str, config: ActivationConfig,
              percentile: float = PERCENTILE) -> ActivationSpec:
    """The :class:`ActivationSpec` of ``site`` from its calibration values (module doc)."""
    if config.mode == "dynamic":
        return ActivationSpec(site, "dynamic", "uint8")
    if config.mode != "static":
        raise QuantizationError(f"activations {config.mode!r} have no spec to calibrate")
    fmt = get_format(config.dtype)
    flat = np.concatenate([np.ascontiguousarray(v, np.float32).reshape(-1) for v in values])
    finite = flat[np.isfinite(flat)]
    if finite.size == 0:
        raise QuantizationError(f"activation site {site!r} has no finite calibration values")
    lo, hi = np.float32(finite.min()), np.float32(finite.max())
    sfmt = get_format("float")
    method = config.method
    if method == "minmax":
        s, zp = params_from_range(fmt, np.array(lo), np.array(hi), symmetric("minmax", fmt), sfmt)
    elif method in ("percentile", "mse"):
        p = choose_params(finite, fmt.name, method=method, percentile=percentile)
        s, zp = p.scale, p.zero_point
    elif method == "entropy":
        amax = np.float32(max(abs(lo), abs(hi)))
        hist, edges = np.histogram(finite, ENTROPY_BINS, range=(-amax, amax))
        tlo, thi = entropy_threshold(hist, edges)
        tlo, thi = max(tlo, float(lo)), min(thi, float(hi))
        s, zp = params_from_range(fmt, np.array(tlo), np.array(thi),
                                  symmetric("percentile", fmt), sfmt)
    else:
        raise QuantizationError(f"method {method!r}: give one of {', '.join(METHODS)}")
    zp = None if fmt.kind == FLOAT or zp is None else np.asarray(zp, fmt.dtype).reshape(())
    return ActivationSpec(site, "static", fmt.name, np.float32(np.asarray(s).reshape(())), zp,
                          method)


def specs_for(case: Any, config: ActivationConfig, sites: Sequence[str] | None = None,
              calibration: Any = None) -> list[ActivationSpec]:
    """One spec per site (default all) for ``config``, static ones calibrated on
    ``calibration`` (a :class:`~qcore.model.fidelity.ModelCase` of the same model on other
    inputs; default the case itself)."""
    if config.mode == "none":
        return []
    run = runner_for(case)
    names = list(run.names if sites is None else sites)
    source = runner_for(calibration) if calibration is not None else run
    return [calibrate(source.site_values(s), s, config) for s in names]
