"""The static integer form as onnxruntime's x86 kernels take it: uint8 activations × int8 weights.

onnxruntime fuses a QDQ group ``DequantizeLinear`` inputs → op → ``QuantizeLinear`` into one
integer kernel: Conv → ``QLinearConv``, MatMul → ``QLinearMatMul``, Gemm → ``QGemm``, and the
activation functions between them → ``QLinearSigmoid``, ``QLinearMul``, ``QLinearAdd``,
``QLinearConcat``, ``QLinearAveragePool``, ``QLinearGlobalAveragePool``, ``QLinearLeakyRelu``;
``MaxPool``, ``Reshape``, ``Transpose``, ``Resize``, … run on the uint8 codes once the pair
around them is dropped, and a ``Relu`` / ``Clip`` disappears into a QuantizeLinear whose zero
point is 0. So a Conv followed by SiLU (``Sigmoid`` · ``Mul``) runs integer from end to end
only when the Conv's output, the Sigmoid's and the Mul's are each quantized — what
``onnxruntime.quantization.quantize_static`` writes, and what this module writes:

- :func:`chain_nodes`: the static layers, then every chain op (:data:`CHAIN_OPS`) whose data
  inputs all come from nodes already in, repeated until nothing changes (graph outputs stay
  float). The chain grows downstream only: a float layer's activation (its SiLU) stays float,
  so a layer moved to float is a float island with one DequantizeLinear before it and the next
  chain's QuantizeLinear after it;
- :func:`chain_tensors`: the float activation tensors those nodes read and write — each gets one
  ``QuantizeLinear`` → ``DequantizeLinear`` (uint8, per tensor) that all its readers read;
- :func:`chain_specs`: each tensor's scale and zero point calibrated (qcore's calibration
  methods), then made consistent with the kernels: a pass-through op's output takes its
  input's pair (:data:`PASS_OPS`), and a Relu / Clip that is the only reader of its input
  gives that input its own pair when its zero point is 0, so the clamp folds away.

uint8 × int8 on AVX2 without VNNI multiplies byte pairs into a saturating int16
(``vpmaddubsw``); :func:`u8s8_saturates` asks the installed runtime once (a one-node
``MatMulInteger`` of 255 × 127) and, where it saturates, the weights take 7 bits (±63, as
``quantize_static``'s ``reduce_range`` does), so the fused kernel computes what the graph says.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .. import require
from ..calibrate import calibrate
from ..sites import ActivationConfig, ActivationSpec

__all__ = ["CHAIN_OPS", "CLAMP_OPS", "PASS_OPS", "QLINEAR", "chain_nodes", "chain_specs",
           "chain_tensors", "tensor_types", "u8s8_saturates", "weight_qmax", "write"]

#: Ops onnxruntime runs on uint8 codes when a Q/DQ pair surrounds them.
CHAIN_OPS = frozenset({"Sigmoid", "Mul", "Add", "Relu", "Clip", "Concat", "MaxPool",
                       "AveragePool", "GlobalAveragePool", "Resize", "LeakyRelu", "Reshape",
                       "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Split", "Slice"})
#: Ops that move codes without changing them: the output shares the input's pair.
PASS_OPS = frozenset({"MaxPool", "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze",
                      "Resize", "Split", "Slice"})
#: Clamps at 0 that fold into a QuantizeLinear whose zero point is 0.
CLAMP_OPS = frozenset({"Relu", "Clip"})
#: Ops whose every float input is data (the others read data at input 0 only).
_ALL_INPUTS = frozenset({"Add", "Mul", "Concat"})
_WEIGHT_OPS = frozenset({"Conv", "MatMul", "Gemm"})


def tensor_types(model: Any) -> dict[str, int]:
    """Each value's ONNX element type, from shape inference (graph inputs and outputs too)."""
    onnx = require("onnx")
    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    out = {t.name: t.data_type for t in g.initializer}
    for v in list(g.value_info) + list(g.input) + list(g.output):
        out[v.name] = v.type.tensor_type.elem_type
    return out


def _data_inputs(node: Any) -> list[str]:
    if node.op_type in _ALL_INPUTS:
        return [t for t in node.input if t]
    return [node.input[0]] if node.input and node.input[0] else []


def _data_outputs(node: Any) -> list[str]:
    return [t for t in node.output if t] if node.op_type == "Split" else list(node.output[:1])


def chain_nodes(model: Any, static: Sequence[str], types: Mapping[str, int] | None = None
                ) -> set[str]:
    """The names of the nodes that run on uint8: ``static`` (layer node names) and the chain
    ops fed only by them (module doc)."""
    onnx = require("onnx")
    g = model.graph
    inits = {t.name for t in g.initializer}
    outputs = {o.name for o in g.output}
    types = types if types is not None else tensor_types(model)
    producer = {o: n for n in g.node for o in n.output}
    inside = {n.name for n in g.node if n.name in set(static)}

    def joins(n: Any) -> bool:
        if n.op_type not in CHAIN_OPS or n.domain not in ("", "ai.onnx"):
            return False
        data = _data_inputs(n)
        if not data or any(t in inits for t in data):
            return False
        if n.op_type in CLAMP_OPS and n.op_type == "Clip" and not _clip_at_zero(n, g):
            return False
        values = data + _data_outputs(n)
        if any(types.get(t) != onnx.TensorProto.FLOAT for t in values):
            return False
        return not any(t in outputs for t in _data_outputs(n))

    changed = True
    while changed:
        changed = False
        for n in g.node:
            if n.name in inside or not joins(n):
                continue
            feeders = [producer.get(t) for t in _data_inputs(n)]
            if all(x is not None and x.name in inside for x in feeders):
                inside.add(n.name)
                changed = True
    return inside


def _clip_at_zero(node: Any, graph: Any) -> bool:
    """A Clip whose minimum is the constant 0 (so it folds into a zero-point-0 quantizer)."""
    onnx = require("onnx")
    if len(node.input) < 2 or not node.input[1]:
        for a in node.attribute:  # opset < 11
            if a.name == "min":
                return float(a.f) == 0.0
        return False
    for t in graph.initializer:
        if t.name == node.input[1]:
            return float(onnx.numpy_helper.to_array(t).reshape(-1)[0]) == 0.0
    return False


def chain_tensors(model: Any, inside: set[str]) -> list[str]:
    """The activation tensors the nodes ``inside`` read and write (weights, biases and graph
    outputs excluded), in graph order."""
    g = model.graph
    inits = {t.name for t in g.initializer}
    outputs = {o.name for o in g.output}
    seen: dict[str, None] = {}
    for n in g.node:
        if n.name not in inside:
            continue
        data = [n.input[0]] if n.op_type in _WEIGHT_OPS else _data_inputs(n)
        for t in data + _data_outputs(n):
            if t and t not in inits and t not in outputs:
                seen.setdefault(t, None)
    return list(seen)


def _shared(spec: ActivationSpec, site: str) -> ActivationSpec:
    return ActivationSpec(site, "static", spec.dtype, spec.scale, spec.zero_point, spec.method)


def chain_specs(model: Any, inside: set[str], values: Mapping[str, Sequence[np.ndarray]],
                method: str = "minmax") -> dict[str, ActivationSpec]:
    """uint8 specs of every chain tensor from its calibration ``values`` by ``method``
    (:func:`qcore.model.calibrate.calibrate`), then the kernels' constraints (module doc)."""
    config = ActivationConfig("static", "uint8", method)
    specs = {t: calibrate(_sample(v) if method == "mse" else v, t, config)
             for t, v in values.items()}
    g = model.graph
    readers: dict[str, int] = defaultdict(int)
    for n in g.node:
        for t in n.input:
            readers[t] += 1
    for n in g.node:  # clamps fold: the input takes the output's pair (zero point 0)
        if n.name not in inside or n.op_type not in CLAMP_OPS:
            continue
        i, o = n.input[0], n.output[0]
        if i in specs and o in specs and readers[i] == 1 and int(specs[o].zero_point) == 0:
            specs[i] = _shared(specs[o], i)
    for n in g.node:  # pass-through ops move codes: outputs share the input's pair
        if n.name in inside and n.op_type in PASS_OPS and n.input[0] in specs:
            for o in _data_outputs(n):
                if o in specs:
                    specs[o] = _shared(specs[n.input[0]], o)
    return specs


#: The mse search reads at most this many values of a tensor (its range search is over the
#: bulk of the values; a feature map of a detector holds tens of millions).
MSE_SAMPLE = 1 << 19


def _sample(values: Sequence[np.ndarray]) -> list[np.ndarray]:
    """At most :data:`MSE_SAMPLE` of ``values``, evenly strided, with the minimum and the
    maximum kept (the search range)."""
    flat = np.concatenate([np.asarray(v, np.float32).reshape(-1) for v in values])
    if flat.size <= MSE_SAMPLE:
        return [flat]
    step = -(-flat.size // MSE_SAMPLE)
    return [np.concatenate([flat[::step], [flat.min(), flat.max()]])]


@functools.lru_cache(maxsize=4)
def _saturates(version: str) -> bool:
    onnx = require("onnx")
    ort = require("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    k = 64
    b = np.full((k, 8), 127, np.int8)
    g = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "probe",
                          [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, k])],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
                          [numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = min(m.ir_version, onnx.IR_VERSION)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    y = s.run(None, {"a": np.full((1, k), 255, np.uint8)})[0]
    return int(y[0, 0]) != 255 * 127 * k


def u8s8_saturates() -> bool:
    """Whether the installed onnxruntime's uint8 × int8 kernels saturate on this CPU (module
    doc; asked once per onnxruntime version)."""
    return _saturates(require("onnxruntime").__version__)


def weight_qmax() -> int:
    """The largest int8 weight code the static form uses here: 63 where the kernels saturate,
    else 127."""
    return 63 if u8s8_saturates() else 127


def _weight_axis(layer: Any, node: Any) -> int:
    """The weight's output-channel axis: Conv 0, MatMul 1, Gemm 0 with transB else 1."""
    if layer.op == "Conv":
        return 0
    if layer.op == "MatMul":
        return 1
    return 0 if any(a.name == "transB" and a.i for a in node.attribute) else 1


def write(out: Any, layer: Any, node: Any, arrays: Mapping[str, np.ndarray], qmax: int,
          specs: Mapping[str, ActivationSpec]) -> None:
    """The weight as int8 codes per output channel through ``DequantizeLinear``, the bias as
    int32 codes at x_scale × w_scale (what fuses); the node stays, reading them."""
    from .layers import int8_per_axis

    axis = _weight_axis(layer, node)
    codes, scale = int8_per_axis(arrays[layer.weight], axis, qmax)
    wn = layer.weight
    out.const(codes, wn + ".codes")
    out.const(scale, wn + ".scale")
    out.const(np.zeros(scale.shape, np.int8), wn + ".zero_point")
    out.node("DequantizeLinear", [wn + ".codes", wn + ".scale", wn + ".zero_point"],
             [wn + ".dq"], wn + ".DQ", axis=axis)
    node.input[1] = wn + ".dq"
    if layer.bias:
        bs = (np.float32(specs[layer.data].scale) * scale).astype(np.float32)
        q = np.rint(arrays[layer.bias].astype(np.float64) / bs.astype(np.float64))
        bn = layer.bias
        out.const(np.clip(q, -2.0**31, 2.0**31 - 1).astype(np.int32), bn + ".codes")
        out.const(bs, bn + ".scale")
        out.node("DequantizeLinear", [bn + ".codes", bn + ".scale"], [bn + ".dq"], bn + ".DQ",
                 axis=0)
        node.input[2] = bn + ".dq"
    return None


def _form() -> Any:
    from .layers import LayerForm

    return LayerForm("qlinear", ("Conv", "MatMul", "Gemm"),
                     frozenset({"QLinearConv", "QLinearMatMul", "QGemm"}), write, chain=True,
                     at_output=False)


#: The registry's entry (:mod:`.layered`).
QLINEAR = _form()
