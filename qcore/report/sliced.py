"""A tensor × its recipes in slices: memory bounded whatever the tensor's size, rows the same
bit for bit in every mode.

Two passes over the tensor, each reading one slice at a time (:class:`~qcore.report.sources.
TensorReader`):

1. statistics: flat slices of :data:`SLICE` elements (a whole number of the statistics kernel's
   chunks), per-chunk moments merged in order — absmax, std, kurtosis, the non-finite count and
   the finite min / max that per-tensor recipes calibrate on;
2. recipes: slices of whole rows along axis 0 (about :data:`SLICE` elements each). Per-axis
   (axis 0), blocked and MX recipes calibrate each slice alone — their groups never cross a
   row, so the scales are the tensor's own; per-tensor ``minmax`` / ``absmax`` recipes take
   their one scale from the first pass's range. Each recipe's error sums are computed per slice
   by :func:`qcore.reductions.error_stats` (one row of sums per fixed chunk of its CHUNK
   elements, whichever thread runs the chunk, added in chunk order) and added in slice order in
   float64.

The slicing depends only on the tensor's shape, so a tensor gives the same rows on one thread
or many, in this process or on Dask, in one run or resumed. Tensors of rank <= 1 are one slice,
and so is a per-tensor recipe calibrated by ``percentile`` or ``mse`` (they need every value at
once).
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import metrics
from ..calibration import choose_params
from ..concurrency import numba_threads, parallel_workers
from ..errors import QuantizationError
from ..layout import BLOCKED, PER_AXIS, PER_TENSOR
from ..ops import dequantize_linear, plan_dequantize, plan_quantize, quantize_linear
from ..quant_params import QuantParams
from ..reductions import (
    N_STATS,
    S_INFOUT,
    S_MAXAE,
    S_NANOUT,
    S_NCLIP,
    S_NCMP,
    S_NFIN,
    S_SSE,
    error_stats,
)
from ..versions import LATEST_OPSET, QUANTIZE, versions
from .sources import TensorReader
from .stats import CHUNK, chunk_rows, stats_of_rows

__all__ = ["SLICE", "ArrayReader", "asks_zero_point", "granularity_for", "recipe_rows",
           "required_opset", "row_slices", "stores_zero_point", "tensor_statistics"]

#: Elements per slice (a multiple of the statistics CHUNK): 16 MiB of float32.
SLICE = 1 << 22
_RANGE_METHODS = ("minmax", "absmax")  # per-tensor methods that need only the value range

assert SLICE % CHUNK == 0


# ---------------------------------------------------------------------------------------------
# what a recipe is on a tensor of a given shape


def granularity_for(recipe: Any, shape: tuple[int, ...], role: Any = None
                    ) -> tuple[str, int, int]:
    """(granularity, axis, block_size) the recipe uses on a tensor of this shape.

    The axis: the recipe's explicit one (``int8:per-axis/1``) if it names one; else, given the
    weight's ``role`` (:class:`qcore.io.onnx.Role`), its output axis for per-axis and its
    reduction axis for blocks; else the (out, in) convention of a checkpoint without a graph:
    per-axis along axis 0, blocks along the last axis."""
    ndim = len(shape)
    if ndim == 0 or recipe.granularity == PER_TENSOR:
        return PER_TENSOR, 0, 0
    if recipe.granularity == PER_AXIS and ndim == 1:
        return PER_TENSOR, 0, 0
    explicit = getattr(recipe, "axis", None)
    if explicit is not None:
        if explicit >= ndim:
            raise QuantizationError(f"recipe {recipe.name!r} names axis {explicit}, but the "
                                    f"tensor has shape {tuple(shape)} ({ndim} axes)")
        axis = explicit
    elif role is not None:
        out_axis, red_axis = role.axes(ndim)
        axis = out_axis if recipe.granularity == PER_AXIS else red_axis
    else:
        axis = 0 if recipe.granularity == PER_AXIS else ndim - 1
    if recipe.granularity == PER_AXIS:
        return PER_AXIS, axis, 0
    return BLOCKED, axis, recipe.block_size


def stores_zero_point(params: QuantParams, opset: int) -> bool:
    """Whether the ONNX graph for these parameters carries a zero point: the one rule,
    :func:`qcore.metrics.stores_zero_point`."""
    return metrics.stores_zero_point(params, opset)


def asks_zero_point(params: QuantParams) -> bool:
    """Whether the operators must be given these parameters' zero point to express them (the
    ``zero_point`` of :func:`required_opset`): any but a signed target's all-zero one, which
    the absent zero point of opset >= 21 already means."""
    zp = params.zero_point
    return zp is not None and not (params.format.signed
                                   and not np.any(np.asarray(zp).astype(np.int64)))


@functools.lru_cache(maxsize=512)
def required_opset(target: str, scale_dtype: str, x_shape: tuple[int, ...],
                   scale_shape: tuple[int, ...], zero_point: bool, axis: int,
                   block_size: int) -> int:
    """The oldest opset at which QuantizeLinear and DequantizeLinear both accept this
    configuration (float32 x, float32 output); ``zero_point``: an asymmetric zero point."""
    for opset in versions(QUANTIZE):
        zp = target if (zero_point or opset < 21) else None
        out = None if opset < 21 else target
        try:
            plan_quantize("float", x_shape, scale_dtype, scale_shape, zp,
                          scale_shape if zp else None, axis=axis, block_size=block_size,
                          output_dtype=out, opset=opset)
            plan_dequantize(target, x_shape, scale_dtype, scale_shape, zp,
                            scale_shape if zp else None, axis=axis, block_size=block_size,
                            opset=opset)
        except QuantizationError:
            continue
        return opset
    raise QuantizationError(f"no opset expresses {target} with {scale_dtype} scales of shape "
                            f"{scale_shape} for x of shape {x_shape}")


def _nbytes(count: int, bits: int) -> int:
    return (int(count) * int(bits) + 7) // 8


# ---------------------------------------------------------------------------------------------
# the two passes


@contextlib.contextmanager
def _free_cores() -> Iterator[None]:
    """numba's threads for one slice's kernels: those of the calling thread less the cores
    other processes keep busy (:func:`qcore.concurrency.parallel_workers`). A slice makes a few
    dozen parallel calls, and on a busy machine each one's join waits a time slice for a worker
    whose core another process holds. No row depends on the thread count."""
    threads = numba_threads()
    workers = parallel_workers(threads)
    if workers >= threads:
        yield
        return
    import numba

    numba.set_num_threads(workers)
    try:
        yield
    finally:
        numba.set_num_threads(threads)


def tensor_statistics(reader: TensorReader | ArrayReader, n: int) -> dict[str, float]:
    """The first pass: statistics of all n elements, read SLICE at a time."""
    rows = [chunk_rows(reader.read(i, min(SLICE, n - i))) for i in range(0, n, SLICE)]
    return stats_of_rows(np.concatenate(rows) if rows else np.zeros((0, 9)))


def row_slices(shape: tuple[int, ...]) -> list[tuple[int, int]]:
    """(first row, end row) along axis 0 of about SLICE elements each (rank <= 1: one)."""
    if len(shape) < 2:
        return [(0, 1)]
    row = math.prod(shape[1:])
    per = max(1, SLICE // max(row, 1))
    return [(i, min(i + per, shape[0])) for i in range(0, shape[0], per)]


@dataclass
class _Sums:
    """One recipe's running totals over the slices."""

    recipe: Any  # qcore.report.recipes.Recipe
    stats: np.ndarray = field(default_factory=lambda: np.zeros(N_STATS))
    scales: int = 0
    asymmetric: bool = False  # a zero point the oldest opsets must express (required_opset)
    nonzero_zero_point: bool = False  # some slice's zero point is not all zero (storage)
    scale_shape: tuple[int, ...] = ()
    params: Any = None  # the last slice's parameters (format, scale format, kwargs)
    error: str = ""


def _params(x: np.ndarray, recipe: Any, shape: tuple[int, ...], lo: float, hi: float,
            whole: np.ndarray | None) -> Any:
    gran, axis, block = granularity_for(recipe, shape)
    if gran != PER_TENSOR and axis != (0 if gran == PER_AXIS else len(shape) - 1):
        raise QuantizationError(f"recipe {recipe.name!r}: the report quantizes a tensor as "
                                f"(out, in) rows (per-axis on axis 0, blocks along the last "
                                f"axis); axis {axis} is for python -m qcore.model")
    if gran == PER_TENSOR:
        if recipe.method in _RANGE_METHODS:  # the scale of the whole tensor from its range
            x = np.array([lo, hi], np.float32)
        elif whole is not None:
            x = whole
    return choose_params(x, recipe.target, method=recipe.method, granularity=gran, axis=axis,
                         block_size=block or 32)


def _add(s: _Sums, x: np.ndarray, recipe: Any, shape: tuple[int, ...], lo: float, hi: float,
         whole: np.ndarray | None, first_slice: bool) -> None:
    params = _params(x, recipe, shape, lo, hi, whole)
    fmt = params.format
    zp = params.zero_point
    # values do not depend on the opset: run at the latest, report the oldest that expresses
    # it; a zero point of zeros changes no value, and the kernels run faster without one
    run_zp = None if zp is None or not np.any(np.asarray(zp).astype(np.float64)) else zp
    y = quantize_linear(x, params.scale, run_zp, output_dtype=fmt.name, opset=LATEST_OPSET,
                        **params.kwargs)
    xh = dequantize_linear(y, params.scale, run_zp, opset=LATEST_OPSET, **params.kwargs)
    st = error_stats(x, xh, params.layout(tuple(x.shape)), *params.saturation_bounds())
    maxae = max(s.stats[S_MAXAE], st[S_MAXAE])
    s.stats += st
    s.stats[S_MAXAE] = maxae
    sshape = tuple(np.shape(params.scale))
    per_tensor = params.granularity == PER_TENSOR
    if per_tensor:
        s.scales, s.scale_shape = int(np.asarray(params.scale).size), sshape
    else:
        s.scales += int(np.asarray(params.scale).size)
        s.scale_shape = (shape[0],) + sshape[1:] if len(shape) >= 2 else sshape
    if zp is not None:  # as recipes.run_recipe and recipes.stores_zero_point judge one array
        s.asymmetric |= asks_zero_point(params)
        s.nonzero_zero_point |= bool(np.any(np.asarray(zp).astype(np.float64) != 0))
    if first_slice or s.params is None:
        s.params = params


def _row(s: _Sums, shape: tuple[int, ...], n: int) -> dict[str, Any]:
    params = s.params
    fmt = params.format
    kw = params.kwargs
    opset = required_opset(fmt.name, params.scale_format.name, tuple(shape), s.scale_shape,
                           s.asymmetric, kw["axis"], kw["block_size"])
    stored = metrics.zero_point_stored(s.nonzero_zero_point, opset)
    st = s.stats
    ncmp = st[S_NCMP]
    mse = st[S_SSE] / ncmp if ncmp else math.nan
    sqnr = metrics.sqnr_of_stats(st)
    n_scales = s.scales
    nbytes = _nbytes(n, fmt.bits) + _nbytes(n_scales, params.scale_format.bits) \
        + (_nbytes(n_scales, fmt.bits) if stored else 0)
    gran = params.granularity
    return {
        "granularity": gran,
        "axis": int(kw["axis"]) if gran != PER_TENSOR else -1,
        "block_size": int(kw["block_size"]),
        "opset": int(opset),
        "sqnr_db": float(sqnr),
        "rmse": math.sqrt(mse) if ncmp else math.nan,
        "max_abs_error": float(st[S_MAXAE]) if ncmp else math.nan,
        "clipped_fraction": float(st[S_NCLIP] / st[S_NFIN]) if st[S_NFIN] else 0.0,
        "nan_out": int(st[S_NANOUT]),
        "inf_out": int(st[S_INFOUT]),
        "bits_per_element": (metrics.stored_bits(n, fmt.bits, n_scales, params.scale_format.bits,
                                                 stored) / n) if n else math.nan,
        "bytes": int(nbytes),
        "scales": n_scales,
    }


def recipe_rows(reader: TensorReader | ArrayReader, shape: tuple[int, ...], recipes: list[Any],
                lo: float, hi: float) -> list[dict[str, Any] | QuantizationError]:
    """The second pass: each recipe's metrics (or the QuantizationError it raised) for the
    tensor behind ``reader``; ``lo`` / ``hi``: its finite range from the first pass."""
    n = math.prod(shape)
    sums = [_Sums(r) for r in recipes]
    whole = None
    if any(granularity_for(r, shape)[0] == PER_TENSOR and r.method not in _RANGE_METHODS
           for r in recipes):
        whole = reader.read(0, n).reshape(shape)  # percentile / mse: every value at once
    slices = row_slices(shape)
    row = math.prod(shape[1:]) if len(shape) >= 2 else n
    for k, (a, b) in enumerate(slices):
        if len(shape) >= 2:
            x = reader.read(a * row, (b - a) * row).reshape((b - a,) + tuple(shape[1:]))
        else:
            x = reader.read(0, n).reshape(shape)
        with _free_cores():
            for s in sums:
                if s.error:
                    continue
                try:
                    _add(s, x, s.recipe, shape, lo, hi, whole, k == 0)
                except QuantizationError as exc:
                    s.error = str(exc)
        del x
    out: list[dict[str, Any] | QuantizationError] = []
    for s in sums:
        try:
            out.append(QuantizationError(s.error) if s.error else _row(s, shape, n))
        except QuantizationError as exc:
            out.append(exc)
    return out


class ArrayReader:
    """:class:`~qcore.report.sources.TensorReader`'s interface over an array in memory."""

    def __init__(self, x: np.ndarray) -> None:
        self._flat = np.asarray(x).reshape(-1)

    def read(self, start: int, count: int) -> np.ndarray:
        return np.array(self._flat[start:start + count], np.float32)
