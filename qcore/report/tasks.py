"""One task of the whole-model report: a tensor (by file and name) × its recipes -> rows.

A task never carries an array: :func:`run_task` reads the tensor slice by slice
(:mod:`qcore.report.sliced`), computes its statistics and every recipe's round-trip metrics. The in-process run
(:mod:`qcore.report.core`) and the Dask workers (:mod:`qcore.report.distributed`) call this very
function, so their rows are identical bit for bit.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import QuantizationError
from ..io import TensorFileError
from ..recipes import Recipe, parse_recipes
from .sliced import recipe_rows, tensor_statistics
from .sources import TensorReader, TensorRef, list_tensors

__all__ = ["COLUMNS", "OPTIONAL_COLUMNS", "SERIAL_BELOW", "Task", "model_root", "relative_file", "run_task"]

#: Column -> type of every row, in order. ``axis``: the scale axis (per-axis) or block axis
#: (blocked), -1 per-tensor; ``view``: the 2-D shape quantized when it is not the tensor's own
#: (a Conv kernel blocked over I·k: ``OxIk``), else empty.
COLUMNS: dict[str, type] = {
    "file": str, "tensor": str, "shape": str, "dtype": str, "elements": int,
    "absmax": float, "std": float, "excess_kurtosis": float, "nonfinite_in": int,
    "recipe": str, "target": str, "method": str, "scale_dtype": str, "granularity": str,
    "axis": int, "view": str, "block_size": int, "opset": int,
    "sqnr_db": float, "rmse": float, "max_abs_error": float, "clipped_fraction": float,
    "nan_out": int, "inf_out": int, "bits_per_element": float, "bytes": int, "scales": int,
    "error": str,
}
#: Columns a report written before they existed may lack, with the value they then meant
#: (read_rows fills them in).
OPTIONAL_COLUMNS: dict[str, Any] = {"view": ""}
#: Tensors smaller than this run qcore's kernels on one thread (see :func:`run_task`).
SERIAL_BELOW = 1 << 21
_METRIC_DEFAULTS = {"granularity": "", "axis": -1, "view": "", "block_size": 0, "opset": 0,
                    "sqnr_db": math.nan, "rmse": math.nan, "max_abs_error": math.nan,
                    "clipped_fraction": math.nan, "nan_out": 0, "inf_out": 0,
                    "bits_per_element": math.nan, "bytes": 0, "scales": 0}


@dataclass(frozen=True)
class Task:
    """One unit of work: a tensor (by file and name) and the recipes to run on it."""

    file: str  # absolute path
    name: str
    recipes: tuple[str, ...]
    root: str  # the model's folder: rows name files relative to it
    elements: int = 0


# ---------------------------------------------------------------------------------------------
# one task


def model_root(model: str | os.PathLike) -> str:
    """The folder row file names are relative to."""
    p = Path(model).expanduser().resolve()
    return str(p if p.is_dir() else p.parent)


def relative_file(file: str, root: str) -> str:
    """``file`` relative to the model's folder (as rows name it)."""
    try:
        return os.path.relpath(file, root)
    except ValueError:
        return file


def _base_row(ref: TensorRef, root: str) -> dict[str, Any]:
    return {"file": relative_file(ref.file, root), "tensor": ref.name,
            "shape": "x".join(str(d) for d in ref.shape), "dtype": ref.dtype,
            "elements": ref.elements if not ref.error else 0, "absmax": math.nan,
            "std": math.nan, "excess_kurtosis": math.nan, "nonfinite_in": 0}


def _recipe_cols(r: Recipe) -> dict[str, Any]:
    return {"recipe": r.name, "target": r.target, "method": r.method,
            "scale_dtype": r.scale_dtype}


def _row(base: dict[str, Any], recipe: Recipe, metrics: dict[str, Any] | None,
         error: str = "") -> dict[str, Any]:
    row = {**base, **_recipe_cols(recipe), **_METRIC_DEFAULTS, **(metrics or {}), "error": error}
    return {k: row[k] for k in COLUMNS}


@functools.lru_cache(maxsize=16)
def _refs_of(file: str, mtime_ns: int, size: int) -> dict[str, TensorRef]:
    del mtime_ns, size  # cache key only
    return {ref.name: ref for ref in list_tensors(file)}  # "*": the whole file is unreadable


def _find_ref(file: str, name: str) -> TensorRef:
    try:
        st = os.stat(file)
    except OSError as exc:
        raise TensorFileError(f"{file}: cannot be read ({exc.strerror})") from None
    refs = _refs_of(file, st.st_mtime_ns, st.st_size)
    if name in refs:
        return refs[name]
    if "*" in refs:
        return refs["*"]
    raise TensorFileError(f"{file}: no tensor named {name!r}")


def run_task(task: Task, numba_threads: int = 0) -> list[dict[str, Any]]:
    """The rows of one tensor × its recipes (never raises for a bad file or recipe: the row's
    ``error`` says what went wrong).

    ``numba_threads``: threads for qcore's parallel kernels (0: one thread below
    :data:`SERIAL_BELOW` elements, where waking others costs more than it saves — 10x more on a
    loaded machine — else numba's setting). The kernels' chunking does not depend on the thread
    count, so neither do the rows.
    """
    import numba

    before = numba.get_num_threads()
    threads = numba_threads or (1 if task.elements < SERIAL_BELOW else before)
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    try:
        return _task_rows(task)
    finally:
        numba.set_num_threads(before)


def _task_rows(task: Task) -> list[dict[str, Any]]:
    recipes = parse_recipes(list(task.recipes))
    try:
        ref = _find_ref(task.file, task.name)
    except TensorFileError as exc:
        ref = TensorRef(task.file, task.name, (), "", error=str(exc))
    base = _base_row(ref, task.root)
    try:
        with TensorReader(ref) as reader:
            stats = tensor_statistics(reader, ref.elements)
            base.update({k: stats[k] for k in ("absmax", "std", "excess_kurtosis",
                                               "nonfinite_in")})
            if stats["nonfinite_in"] == ref.elements:
                why = (f"{ref.file}: tensor {ref.name!r} has no finite value (all "
                       f"{ref.elements:,} are NaN or infinite); there is nothing to quantize")
                return [_row(base, r, None, why) for r in recipes]
            results = recipe_rows(reader, tuple(ref.shape), recipes, stats["min"], stats["max"],
                                  ref.role)
    except TensorFileError as exc:
        return [_row(base, r, None, str(exc)) for r in recipes]
    except OSError as exc:
        why = f"{ref.file}: tensor {ref.name!r} cannot be read ({exc.strerror or exc})"
        return [_row(base, r, None, why) for r in recipes]
    rows = []
    for r, out in zip(recipes, results):
        if isinstance(out, QuantizationError):
            rows.append(_row(base, r, None, f"{ref.file}: tensor {ref.name!r}, recipe "
                                            f"{r.name}: {out}"))
        else:
            rows.append(_row(base, r, out))
    return rows
