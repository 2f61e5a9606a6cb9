"""Write a prepared model with a form per layer (:mod:`.layers`): the speed plan's export.

``export_forms(prepared, forms, specs)``: ``forms`` maps layer node names to forms (missing:
float); ``specs`` are the chain tensors' uint8 pairs (:func:`.qlinear.chain_specs`) for the
``qlinear`` layers. Per form:

- ``qlinear``: the weight as int8 codes per output channel (Conv (O, I/g, k…) axis 0, MatMul
  [K, N] axis 1, Gemm by ``transB``), symmetric, at most ``qmax`` (:func:`.qlinear.weight_qmax`),
  through ``DequantizeLinear``; a bias as int32 codes at x_scale × w_scale (what fuses); and
  one ``QuantizeLinear`` → ``DequantizeLinear`` after each chain tensor's producer (or at the
  start for a graph input), read by every reader of that tensor;
- ``conv-integer`` / ``dynamic``: :func:`.integer.dynamic_nodes`;
- ``weight-only`` (Gather): int8 codes and a float scale per row; the lookup gathers codes
  and scales, then ``Cast`` · ``Mul`` — only the rows looked up are dequantized.

Every weight the export no longer reads is dropped; the opset is raised to 13 where lower
(per-axis DequantizeLinear).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...errors import QuantizationError
from ...ops import quantize_linear
from .. import require
from ..activations import ActivationSpec
from .integer import dynamic_nodes
from .layers import Layer, layers_of
from .qlinear import weight_qmax

__all__ = ["export_forms", "int8_per_axis"]


def int8_per_axis(w: np.ndarray, axis: int, qmax: int = 127) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 codes of ``w`` per index of ``axis`` (scale = max|w| / qmax; an all-zero
    channel gets scale 1) by qcore's QuantizeLinear, and the float32 scales."""
    w = np.asarray(w, np.float32)
    red = tuple(a for a in range(w.ndim) if a != axis)
    amax = np.max(np.abs(w), axis=red)
    scale = np.where(amax > 0, amax / np.float32(qmax), np.float32(1)).astype(np.float32)
    codes = quantize_linear(w, scale, np.zeros(scale.shape, np.int8), axis=axis)
    return np.asarray(codes, np.int8), scale


def _weight_axis(layer: Layer, node: Any) -> int:
    if layer.op == "Conv":
        return 0
    if layer.op == "MatMul":
        return 1
    trans = any(a.name == "transB" and a.i for a in node.attribute)
    return 0 if trans else 1


class _Out:
    """The nodes and initializers being written."""

    def __init__(self, onnx: Any) -> None:
        self.onnx = onnx
        self.inits: list[Any] = []
        self.nodes: list[Any] = []

    def const(self, array: np.ndarray, name: str) -> str:
        self.inits.append(self.onnx.numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op: str, inputs: list[str], outputs: list[str], name: str,
             **attrs: Any) -> Any:
        n = self.onnx.helper.make_node(op, inputs, outputs, name=name, **attrs)
        self.nodes.append(n)
        return n


def _qdq(out: _Out, t: str, spec: ActivationSpec) -> list[Any]:
    s = out.const(np.asarray(spec.scale, np.float32), t + ".act_scale")
    z = out.const(spec.zero_point_codes(), t + ".act_zero_point")
    h = out.onnx.helper
    return [h.make_node("QuantizeLinear", [t, s, z], [t + ".q"], name=t + ".Q"),
            h.make_node("DequantizeLinear", [t + ".q", s, z], [t + ".dq"], name=t + ".DQ")]


def _static_weight(out: _Out, layer: Layer, node: Any, w: np.ndarray,
                   bias: np.ndarray | None, x_spec: ActivationSpec, qmax: int) -> None:
    axis = _weight_axis(layer, node)
    codes, scale = int8_per_axis(w, axis, qmax)
    wn = layer.weight
    out.const(codes, wn + ".codes")
    out.const(scale, wn + ".scale")
    out.const(np.zeros(scale.shape, np.int8), wn + ".zero_point")
    out.node("DequantizeLinear", [wn + ".codes", wn + ".scale", wn + ".zero_point"],
             [wn + ".dq"], wn + ".DQ", axis=axis)
    node.input[1] = wn + ".dq"
    if bias is not None and layer.bias:
        bs = (np.float32(x_spec.scale) * scale).astype(np.float32)
        q = np.rint(bias.astype(np.float64) / bs.astype(np.float64))
        bq = np.clip(q, -2.0**31, 2.0**31 - 1).astype(np.int32)
        bn = layer.bias
        out.const(bq, bn + ".codes")
        out.const(bs, bn + ".scale")
        out.node("DequantizeLinear", [bn + ".codes", bn + ".scale"], [bn + ".dq"], bn + ".DQ",
                 axis=0)
        node.input[2] = bn + ".dq"


def _gather(out: _Out, layer: Layer, node: Any, w: np.ndarray) -> list[Any]:
    codes, scale = int8_per_axis(w, 0, 127)
    wn = layer.weight
    out.const(codes, wn + ".codes")
    out.const(scale.reshape(-1, *([1] * (w.ndim - 1))), wn + ".row_scale")
    h = out.onnx.helper
    ids, y = node.input[1], node.output[0]
    p = layer.name
    return [h.make_node("Gather", [wn + ".codes", ids], [p + ".codes"], name=p + ".gather", axis=0),
            h.make_node("Gather", [wn + ".row_scale", ids], [p + ".scale"], name=p + ".scales",
                        axis=0),
            h.make_node("Cast", [p + ".codes"], [p + ".float"], name=p + ".cast",
                        to=out.onnx.TensorProto.FLOAT),
            h.make_node("Mul", [p + ".float", p + ".scale"], [y], name=p + ".dequantize")]


def export_forms(prepared: Any, forms: Mapping[str, str],
                 specs: Mapping[str, ActivationSpec] | None = None, qmax: int | None = None
                 ) -> Any:
    """``prepared`` with each layer in its form (module doc). Raises QuantizationError for a
    form a layer cannot take or a ``qlinear`` layer whose input has no spec."""
    onnx = require("onnx")
    specs = dict(specs or {})
    qmax = weight_qmax() if qmax is None else int(qmax)
    layers = {x.name: x for x in layers_of(prepared)}
    for name, form in forms.items():
        if form == "float":
            continue
        if name not in layers or form not in layers[name].forms:
            raise QuantizationError(f"layer {name!r} cannot take form {form!r}")
        if form == "qlinear" and layers[name].data not in specs:
            raise QuantizationError(f"layer {name!r}: form qlinear needs a spec of its input "
                                    f"{layers[name].data!r}")
    model = onnx.ModelProto()
    model.CopyFrom(prepared)
    g = model.graph
    arrays = {t.name: onnx.numpy_helper.to_array(t) for t in g.initializer}
    out = _Out(onnx)
    consts: list[Any] = []
    pairs: dict[str, list[Any]] = {t: _qdq(out, t, sp) for t, sp in specs.items()}
    body: list[Any] = []
    for n in g.node:
        node = onnx.NodeProto()
        node.CopyFrom(n)
        form = forms.get(n.name, "float")
        layer = layers.get(n.name)
        before = len(out.nodes)
        for i, t in enumerate(node.input):
            if t in pairs:
                node.input[i] = t + ".dq"
        if form in ("conv-integer", "dynamic"):
            body.extend(dynamic_nodes(out, layer, node, arrays[layer.weight],
                                      arrays.get(layer.bias) if layer.bias else None,
                                      qmax))
            consts.extend(out.nodes[before:])
            del out.nodes[before:]
            continue
        if form == "weight-only":
            body.extend(_gather(out, layer, node, arrays[layer.weight]))
            continue
        if form == "qlinear":
            _static_weight(out, layer, node, arrays[layer.weight],
                           arrays.get(layer.bias) if layer.bias else None,
                           specs[layer.data], qmax)
        consts.extend(out.nodes[before:])
        del out.nodes[before:]
        body.append(node)
    order = list(consts)
    for i in g.input:
        order.extend(pairs.get(i.name, []))
    for node in body:
        order.append(node)
        for o in node.output:
            order.extend(pairs.get(o, []))
    del g.node[:]
    g.node.extend(order)
    used = {t for node in g.node for t in node.input}
    kept = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(kept + [t for t in out.inits if t.name in used])
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx") and o.version < 13:
            o.version = 13
    return model
