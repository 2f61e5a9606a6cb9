"""Which configurations a runtime runs: plans made for the runtime that will load the export.

``onnxruntime`` (the default when exporting): a (recipe, weight shape, role) configuration is
allowed when the installed onnxruntime runs the DequantizeLinear the export writes for it — a
one-node model (:func:`qcore.onnx_models.node_model`) of that node at its opset, with codes of
a small stand-in of the weight's shape (each axis cut to at most two blocks or 64 elements,
keeping a short last block) — probed once per configuration and onnxruntime version and
cached for the process. ``reference``: every ONNX type is allowed (the onnx reference
evaluator and qcore run them all).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from ..layout import BLOCKED
from ..recipes import parse_recipe
from . import require

__all__ = ["RUNTIMES", "allowed", "check_runtime", "filter_case_sensitivity", "filter_sensitivity", "runs_in_onnxruntime",
           "stand_in_shape"]

#: Runtimes a plan can be made for.
RUNTIMES = ("onnxruntime", "reference")


def check_runtime(runtime: str) -> str:
    """The runtime's name, or QuantizationError naming the valid ones."""
    from ..errors import QuantizationError

    name = str(runtime).strip().lower()
    if name not in RUNTIMES:
        raise QuantizationError(f"--runtime {runtime!r} is not a runtime; valid: "
                                + ", ".join(RUNTIMES))
    return name


def stand_in_shape(shape: tuple[int, ...], block: int, block_axis: int) -> tuple[int, ...]:
    """A small shape with the same rank and, along ``block_axis``, the same remainder of
    ``block`` (a short last block stays short)."""
    out = []
    for a, d in enumerate(shape):
        if block and a == block_axis:
            out.append(min(d, 2 * block + d % block) if d > 2 * block else d)
        else:
            out.append(min(d, 64))
    return tuple(out)


@functools.lru_cache(maxsize=1024)
def _probe(version: str, recipe: str, shape: tuple[int, ...], output_axis: int,
           reduction_axis: int) -> bool:
    ort = require("onnxruntime")
    from ..onnx_models import node_model
    from .forms.base import qdq_along

    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    try:
        q = qdq_along(x, recipe, output_axis, reduction_axis)
    except ValueError:
        return False
    inputs = [q.y, q.scale] + ([q.zero_point] if q.zero_point is not None else [])
    attrs: dict[str, int] = {}
    if q.granularity != "per-tensor":
        attrs["axis"] = q.axis
    if q.block_size:
        attrs["block_size"] = q.block_size
    opset = q.opset
    if str(q.scale.dtype) != "float32":
        attrs["output_dtype"] = 1
        opset = max(opset, 23)
    try:
        m = node_model("DequantizeLinear", opset, inputs, attrs, initializers=True,
                       output_types=[np.float32])
        from .export import tensor_proto

        for i, t in enumerate(m.graph.initializer):  # sub-byte codes as ONNX stores them
            m.graph.initializer[i].CopyFrom(tensor_proto(inputs[i], t.name))
        so = ort.SessionOptions()
        so.log_severity_level = 4
        sess = ort.InferenceSession(m.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        sess.run(None, {})
        return True
    except Exception:  # noqa: BLE001 - any failure means onnxruntime cannot run it
        return False


def runs_in_onnxruntime(recipe: str, shape: tuple[int, ...], output_axis: int = 0,
                        reduction_axis: int = -1) -> bool:
    """Whether the installed onnxruntime runs this recipe's DequantizeLinear on a weight of
    ``shape`` with this role (module doc; cached)."""
    ort = require("onnxruntime")
    r = parse_recipe(recipe)
    shape = tuple(int(d) for d in shape)
    red = reduction_axis % len(shape) if shape else 0
    small = stand_in_shape(shape, r.block_size if r.granularity == BLOCKED else 0, red)
    return _probe(ort.__version__, r.name, small, output_axis, red)


def allowed(runtime: str) -> Callable[[str, tuple[int, ...], int, int], bool]:
    """``ok(recipe, shape, output_axis, reduction_axis)`` for ``runtime``."""
    if check_runtime(runtime) == "reference":
        return lambda recipe, shape, output_axis=0, reduction_axis=-1: True
    return runs_in_onnxruntime


def filter_sensitivity(sens, shapes: dict[str, tuple[int, ...]], runtime: str,
                       roles: dict[str, tuple[int, int]] | None = None):
    """``sens`` without the rows whose (recipe, tensor) configuration ``runtime`` cannot run
    (``roles``: tensor → (output axis, reduction axis); default (0, last))."""
    from dataclasses import replace

    ok = allowed(runtime)
    roles = roles or {}
    keep = []
    for row in sens.rows:
        shape = shapes[row["tensor"]]
        oa, ra = roles.get(row["tensor"], (0, len(shape) - 1))
        if ok(row["recipe"], shape, oa, ra):
            keep.append(row)
    return replace(sens, rows=keep, runtime=check_runtime(runtime))


def filter_case_sensitivity(case, sens, runtime: str):
    """:func:`filter_sensitivity` with each tensor's shape and role axes taken from ``case``
    (the model tool and the Model Fidelity page filter the same way)."""
    shapes = {t: tuple(case.arrays[t].shape) for t in sens.tensors}
    roles = {t: r.axes(len(shapes[t])) for t, r in case.roles.items() if t in shapes}
    return filter_sensitivity(sens, shapes, runtime, roles)
