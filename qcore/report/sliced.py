"""A tensor × its recipes in slices: memory bounded whatever the tensor's size, rows the same
bit for bit in every mode.

Two passes over the tensor, each reading one slice at a time (:class:`~qcore.report.sources.
TensorReader`):

1. statistics: flat slices of :data:`SLICE` elements (a whole number of the statistics kernel's
   chunks), per-chunk moments merged in order — absmax, std, kurtosis, the non-finite count and
   the finite min / max that per-tensor recipes calibrate on;
2. recipes: slabs of about :data:`SLICE` elements along an axis that cuts no group of
   elements sharing a scale (:func:`slice_axis`): whole rows along axis 0 for per-tensor
   recipes, blocks along any axis but 0 and a Conv kernel's [O, I·k] view; whole channels along
   the scale axis for per-axis recipes (MatMul B [K, N]: columns); slabs along axis 1 for blocks
   along axis 0 (MatMul B's blocks along K). A slab along an axis other than 0 is read as one
   piece per index of the axes before it. Per-axis, blocked and MX recipes calibrate each slab
   alone — their groups never cross a cut, so the scales are the tensor's own; per-tensor
   ``minmax`` / ``absmax`` recipes take their one scale from the first pass's range. Each
   recipe's error sums are computed per slab by :func:`qcore.reductions.error_stats` (one row
   of sums per fixed chunk of its CHUNK elements, whichever thread runs the chunk, added in
   chunk order) and added in slab order in float64.

The layout of a recipe on a tensor (:func:`weight_layout`: granularity, axis, block, view) is
the model tool's rule: an ONNX weight's role (:class:`qcore.io.onnx.Role`) picks the axes and a
Conv kernel's blocked layout; a tensor without a role is (out, in) rows.

The slicing depends only on the tensor's shape and the recipe's layout, so a tensor gives the
same rows on one thread or many, in this process or on Dask, in one run or resumed, whatever
other recipes run beside it. Tensors of rank <= 1 are one slice, and a per-tensor recipe
calibrated by ``percentile`` or ``mse`` reads every value at once.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import metrics
from ..calibration import choose_params
from ..concurrency import numba_threads, parallel_workers
from ..errors import QuantizationError
from ..fullrange import (
    FULLRANGE,
    FULLRANGE_METHODS,
    FULLRANGE_MSE,
    fullrange_params,
    positive_view,
)
from ..layout import BLOCKED, PER_AXIS, PER_TENSOR
from ..ops import dequantize_linear, quantize_linear
from ..recipes import (
    Recipe,
    asks_zero_point,
    required_opset,
    weight_layout,
)
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
from ..versions import LATEST_OPSET
from .sources import TensorReader
from .stats import CHUNK, chunk_rows, stats_of_rows

__all__ = ["SLICE", "ArrayReader", "axis_slices", "read_slab", "recipe_rows", "row_slices",
           "run_recipe", "slice_axis", "tensor_statistics"]

#: Elements per slice (a multiple of the statistics CHUNK): 16 MiB of float32.
SLICE = 1 << 22
#: Per-tensor methods that need only the value range (no read of every value at once).
_RANGE_METHODS = ("minmax", "absmax", FULLRANGE)

assert SLICE % CHUNK == 0


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


def slice_axis(shape: tuple[int, ...], layout: tuple[str, int, int, Any]) -> int:
    """The axis the recipe pass slices a tensor along for one layout (:func:`weight_layout`):
    one whose cuts never split a group of elements sharing a scale. Per-axis on axis a: along
    a (each slice holds whole channels); blocks along axis 0: along axis 1 (a block never
    crosses it); anything else (per-tensor, blocks along another axis, the [O, I·k] view of a
    Conv kernel): along axis 0, as whole rows. Rank <= 1: axis 0 (one slice)."""
    gran, axis, _, view = layout
    if len(shape) < 2 or view is not None:
        return 0
    if gran == PER_AXIS:
        return axis
    if gran == BLOCKED and axis == 0:
        return 1
    return 0


def axis_slices(shape: tuple[int, ...], axis: int = 0) -> list[tuple[int, int]]:
    """(first, end) index ranges along ``axis`` of about SLICE elements each (rank <= 1: one)."""
    if len(shape) < 2:
        return [(0, 1)]
    length = shape[axis]
    per_index = math.prod(shape) // length if length else 0
    per = max(1, SLICE // max(per_index, 1))
    return [(i, min(i + per, length)) for i in range(0, length, per)]


def row_slices(shape: tuple[int, ...]) -> list[tuple[int, int]]:
    """(first row, end row) along axis 0 of about SLICE elements each (rank <= 1: one)."""
    return axis_slices(shape, 0)


def read_slab(reader: TensorReader | ArrayReader, shape: tuple[int, ...], axis: int, a: int,
              b: int) -> np.ndarray:
    """The elements whose index along ``axis`` lies in [a, b), as an array of ``shape`` with
    that axis cut to b - a: one read when every axis before ``axis`` has length 1 (axis 0
    above all) or the range is the whole axis, else one read per index of the axes before it
    (a strided slab of a C-order tensor)."""
    n = math.prod(shape)
    if len(shape) < 2:
        return reader.read(0, n).reshape(shape)
    outer = math.prod(shape[:axis])
    length = shape[axis]
    inner = math.prod(shape[axis + 1:])
    cut = tuple(shape[:axis]) + (b - a,) + tuple(shape[axis + 1:])
    if outer == 1 or (a, b) == (0, length):
        start = a * inner if outer == 1 else 0
        return reader.read(start, math.prod(cut)).reshape(cut)
    out = np.empty((outer, (b - a) * inner), np.float32)
    for o in range(outer):
        out[o] = reader.read((o * length + a) * inner, (b - a) * inner)
    return out.reshape(cut)


@dataclass
class _Sums:
    """One recipe's running totals over the slices."""

    recipe: Any  # qcore.recipes.Recipe
    layout: tuple[str, int, int, Any] = (PER_TENSOR, 0, 0, None)  # weight_layout's answer
    stats: np.ndarray = field(default_factory=lambda: np.zeros(N_STATS))
    scales: int = 0
    asymmetric: bool = False  # a zero point the oldest opsets must express (required_opset)
    nonzero_zero_point: bool = False  # some slice's zero point is not all zero (storage)
    tensor_scale_shape: tuple[int, ...] = ()  # a per-tensor recipe's scale shape
    params: Any = None  # the last slice's parameters (format, scale format, kwargs)
    error: str = ""


def _params(x: np.ndarray, s: _Sums, lo: float, hi: float, whole: np.ndarray | None) -> Any:
    recipe = s.recipe
    gran, axis, block, _ = s.layout
    if recipe.method in FULLRANGE_METHODS:  # signed scales (qcore.fullrange)
        search = recipe.method == FULLRANGE_MSE
        if gran == PER_TENSOR:
            x = whole if search and whole is not None else np.array([lo, hi], np.float32)
        return fullrange_params(x, recipe.target, gran, axis, block or 32, search)
    if gran == PER_TENSOR:
        if recipe.method in _RANGE_METHODS:  # the scale of the whole tensor from its range
            x = np.array([lo, hi], np.float32)
        elif whole is not None:
            x = whole
    return choose_params(x, recipe.target, method=recipe.method, granularity=gran, axis=axis,
                         block_size=block or 32)


def _add(s: _Sums, x: np.ndarray, lo: float, hi: float, whole: np.ndarray | None,
         first_slice: bool) -> None:
    params = _params(x, s, lo, hi, whole)
    x, params, _ = positive_view(x, params, LATEST_OPSET)  # @fullrange: signed scales
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
    if params.granularity == PER_TENSOR:
        s.scales = int(np.asarray(params.scale).size)
        s.tensor_scale_shape = tuple(np.shape(params.scale))
    else:
        s.scales += int(np.asarray(params.scale).size)
    if zp is not None:  # as run_recipe and stores_zero_point judge one array
        s.asymmetric |= asks_zero_point(params)
        s.nonzero_zero_point |= bool(np.any(np.asarray(zp).astype(np.float64) != 0))
    if first_slice or s.params is None:
        s.params = params


def _scale_shape(s: _Sums, qshape: tuple[int, ...]) -> tuple[int, ...]:
    """The whole tensor's scale shape (what one array's parameters would have): per-axis one
    per index of the axis, blocks the shape with the block axis counted in blocks."""
    gran, axis, block, _ = s.layout
    if s.params.granularity == PER_TENSOR:
        return s.tensor_scale_shape
    if gran == PER_AXIS:
        return (qshape[axis],)
    return tuple(-(-d // block) if k == axis else d for k, d in enumerate(qshape))


def _row(s: _Sums, shape: tuple[int, ...], n: int) -> dict[str, Any]:
    params = s.params
    fmt = params.format
    kw = params.kwargs
    view = s.layout[3]
    qshape = tuple(view) if view is not None else tuple(shape)
    opset = required_opset(fmt.name, params.scale_format.name, qshape, _scale_shape(s, qshape),
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
        "view": "x".join(str(d) for d in view) if view is not None else "",
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
                lo: float, hi: float, role: Any = None
                ) -> list[dict[str, Any] | QuantizationError]:
    """The second pass: each recipe's metrics (or the QuantizationError it raised) for the
    tensor behind ``reader``; ``lo`` / ``hi``: its finite range from the first pass; ``role``:
    the weight's role in its ONNX graph (:class:`qcore.io.onnx.Role`; None: the (out, in)
    convention), which with the recipe decides the layout (:func:`weight_layout`).

    Recipes are grouped by the axis their layout is sliced along (:func:`slice_axis`); each
    group reads the tensor once, slab by slab. A recipe's slices depend only on the shape and
    its own layout, so its row does not depend on the other recipes of the task."""
    n = math.prod(shape)
    shape = tuple(shape)
    sums = [_Sums(r) for r in recipes]
    for s in sums:
        try:
            s.layout = weight_layout(s.recipe, shape, role)
        except QuantizationError as exc:
            s.error = str(exc)
    whole = None
    if any(not s.error and s.layout[0] == PER_TENSOR and s.recipe.method not in _RANGE_METHODS
           for s in sums):
        whole = reader.read(0, n).reshape(shape)  # percentile / mse: every value at once
    groups: dict[int, list[_Sums]] = {}
    for s in sums:
        if not s.error:
            groups.setdefault(slice_axis(shape, s.layout), []).append(s)
    for axis, group in groups.items():
        for k, (a, b) in enumerate(axis_slices(shape, axis)):
            x = read_slab(reader, shape, axis, a, b)
            with _free_cores():
                for s in group:
                    if s.error:
                        continue
                    view = s.layout[3]
                    xs = x.reshape((b - a, view[1])) if view is not None else x
                    try:
                        _add(s, xs, lo, hi, whole, k == 0)
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


# ---------------------------------------------------------------------------------------------
# running one recipe on one tensor


def run_recipe(x: np.ndarray, recipe: Recipe, role: Any = None) -> dict[str, Any]:
    """Quantize and dequantize float32 ``x`` by the recipe; the metrics of the round trip (the
    report's own sliced computation, :mod:`qcore.report.sliced`, on an array in memory), laid
    out by ``role`` (an ONNX weight's :class:`qcore.io.onnx.Role`; None: (out, in) rows).

    Keys: granularity, axis, view, block_size, opset, sqnr_db, rmse, max_abs_error,
    clipped_fraction, nan_out, inf_out, bits_per_element, bytes, scales.
    """
    x = np.asarray(x, np.float32)
    reader = ArrayReader(x)
    st = tensor_statistics(reader, x.size)
    (out,) = recipe_rows(reader, tuple(x.shape), [recipe], st["min"], st["max"], role)
    if isinstance(out, QuantizationError):
        raise out
    return out
