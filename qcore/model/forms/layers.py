"""Layers and their forms: the units a speed plan assigns a form to, in the prepared graph.

A **layer** is one weight-consuming node of the prepared float model (:func:`prepare`): a
``Conv``, a ``MatMul`` or a ``Gemm`` (``transA=0``) whose weight is a float32 initializer of
rank ≥ 2, or a ``Gather`` whose table is one (an embedding). Its **forms** are the ways the
export can run it, each a :class:`LayerForm` in the registry
(:data:`qcore.model.forms.layered.LAYER_REGISTRY`; docs/model.md, "Forms per layer"):

- ``float`` — unchanged;
- ``qlinear`` — static integer: uint8 activations × int8 per-channel weights through
  QuantizeLinear/DequantizeLinear pairs placed so onnxruntime fuses ``QLinearConv`` /
  ``QLinearMatMul`` / ``QGemm`` and the activation chain around it (:mod:`.qlinear`);
- ``conv-integer`` — dynamic integer Conv: ``DynamicQuantizeLinear`` → ``ConvInteger``
  (:mod:`.integer`);
- ``dynamic`` — dynamic integer MatMul/Gemm: ``DynamicQuantizeLinear`` → ``MatMulInteger``
  → scales, fused into ``DynamicQuantizeMatMul`` (:mod:`.integer`);
- ``weight-only`` — int8 per-row codes through a ``DequantizeLinear`` (a Gather table: the
  file shrinks, the lookup stays a lookup).

The prepared model is what onnxruntime's *basic* graph level writes (every rewrite there is
standard ONNX: BatchNormalization folded into the Conv before it, constants folded, ``Constant``
nodes made initializers); its outputs equal the model's to float rounding, and the speed plan
measures against the model as given.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import require

__all__ = ["LAYER_OPS", "Layer", "LayerForm", "Out", "by_name", "int8_per_axis", "prepare"]

#: Layer op types and where their weight and data are (input indices).
LAYER_OPS = {"Conv": (1, 0), "MatMul": (1, 0), "Gemm": (1, 0), "Gather": (0, 1)}


@dataclass(frozen=True)
class LayerForm:
    """One way a layer runs (the registry, :data:`qcore.model.forms.layered.LAYER_REGISTRY`,
    holds them): its ``name``, the layer ``ops`` it takes, the onnxruntime kernels it ``fuses``
    into (each asserted by a test in the model onnxruntime optimizes), whether it reads the
    chain's uint8 pairs (``chain``), whether a layer writing a graph output may take it
    (``at_output``), and ``write(out, layer, node, arrays, qmax)``: adds its constants to
    ``out`` (:class:`Out`) and returns the nodes that replace ``node`` (None: ``node`` stays,
    rewired in place; ``write`` None: unchanged)."""

    name: str
    ops: tuple[str, ...]
    fuses: frozenset[str]
    write: Callable[..., list[Any] | None] | None
    chain: bool = False
    at_output: bool = True


class Out:
    """The constants and nodes an export adds (:mod:`.layered`)."""

    def __init__(self, onnx: Any) -> None:
        self.onnx = onnx
        self.helper = onnx.helper
        self.inits: list[Any] = []
        self.nodes: list[Any] = []

    def const(self, array: Any, name: str) -> str:
        """Add an initializer; returns its name."""
        self.inits.append(self.onnx.numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op: str, inputs: list[str], outputs: list[str], name: str,
             **attrs: Any) -> Any:
        """Add a node that computes a constant (a weight's DequantizeLinear)."""
        n = self.helper.make_node(op, inputs, outputs, name=name, **attrs)
        self.nodes.append(n)
        return n


def int8_per_axis(w: np.ndarray, axis: int, qmax: int = 127) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 codes of ``w`` per index of ``axis`` (scale = max|w| / qmax; an all-zero
    channel gets scale 1) by qcore's QuantizeLinear, and the float32 scales."""
    from ...ops import quantize_linear

    w = np.asarray(w, np.float32)
    red = tuple(a for a in range(w.ndim) if a != axis)
    amax = np.max(np.abs(w), axis=red)
    scale = np.where(amax > 0, amax / np.float32(qmax), np.float32(1)).astype(np.float32)
    codes = quantize_linear(w, scale, np.zeros(scale.shape, np.int8), axis=axis)
    return np.asarray(codes, np.int8), scale


@dataclass(frozen=True)
class Layer:
    """One weight-consuming node: its node ``name``, ``op``, ``weight`` (initializer name),
    ``shape`` (the weight's), ``bias`` (initializer name or None), ``output`` (its output
    tensor) and whether that output is a graph output (then no static form: the fused kernel
    needs a QuantizeLinear on it)."""

    name: str
    op: str
    weight: str
    shape: tuple[int, ...]
    bias: str | None
    data: str
    output: str
    is_output: bool
    forms: tuple[str, ...] = ()


    @property
    def elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= int(d)
        return n


def _attr(node: Any, name: str, default: Any = 0) -> Any:
    onnx = require("onnx")
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def prepare(model: Any) -> Any:
    """``model`` as onnxruntime's basic graph level rewrites it (module doc), at opset 13 or
    later (onnx's version converter raises an older one), each node named (``OP_i`` where it
    had no name)."""
    onnx = require("onnx")
    ort = require("onnxruntime")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.log_severity_level = 3
    if isinstance(model, bytes):
        model = onnx.load_from_string(model)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    if opset < 13:  # per-axis DequantizeLinear needs 13; onnx converts the other ops
        model = onnx.version_converter.convert_version(model, 13)
    with tempfile.TemporaryDirectory() as d:
        so.optimized_model_filepath = os.path.join(d, "prepared.onnx")
        ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        out = onnx.load(so.optimized_model_filepath)
    seen: set[str] = set()
    for i, n in enumerate(out.graph.node):
        if not n.name or n.name in seen:
            n.name = f"{n.op_type}_{i}"
        seen.add(n.name)
    return out


def by_name(layers: list[Layer]) -> Mapping[str, Layer]:
    """Layers keyed by node name."""
    return {x.name: x for x in layers}
