"""Dynamic integer forms: the activation quantized at run time, the weight stored as codes.

``DynamicQuantizeLinear`` (uint8, per tensor, each inference) → the integer op → ``Cast`` →
``Mul`` by x_scale × w_scale (→ ``Add`` of the bias):

- ``conv-integer`` (Conv): ``ConvInteger`` with uint8 weight codes, one zero point 128 for the
  whole weight (onnxruntime's ConvInteger takes a per-tensor weight zero point only) and a
  scale per output channel (max|w| / 127, so codes are 128 ± 127), applied after the integer
  convolution as a [1, O, 1, …] factor. uint8 weights: with int8 ones onnxruntime 1.32 runs
  ConvInteger on a slow path (5.7× float on a YOLO-style net, znver3) — measured, docs/model.md.
- ``dynamic`` (MatMul, Gemm): ``MatMulInteger`` on [K, N] codes (a ``transB=1`` Gemm's weight
  transposed), fused by onnxruntime into ``DynamicQuantizeMatMul``. Where uint8 × int8
  saturates (:func:`.qlinear.u8s8_saturates`) the codes are uint8 with a zero point per output
  column (asymmetric minmax, as ``quantize_dynamic`` writes uint8 weights); elsewhere int8,
  symmetric.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...ops import quantize_linear
from .layers import Layer, LayerForm, int8_per_axis
from .qlinear import u8s8_saturates

__all__ = ["CONV_INTEGER", "DYNAMIC", "dynamic_nodes", "uint8_per_axis"]


def uint8_per_axis(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Asymmetric uint8 codes of ``w`` per index of ``axis`` over [min(w, 0), max(w, 0)]:
    (codes, scales, zero points)."""
    w = np.asarray(w, np.float32)
    red = tuple(a for a in range(w.ndim) if a != axis)
    lo = np.minimum(np.min(w, axis=red), 0).astype(np.float32)
    hi = np.maximum(np.max(w, axis=red), 0).astype(np.float32)
    scale = ((hi - lo) / np.float32(255)).astype(np.float32)
    scale[scale == 0] = 1
    zp = np.clip(np.rint(-lo / scale), 0, 255).astype(np.uint8)
    return np.asarray(quantize_linear(w, scale, zp, axis=axis), np.uint8), scale, zp


def dynamic_nodes(out: Any, layer: Layer, node: Any, arrays: Any, qmax: int,
                  specs: Any = None) -> list[Any]:
    """The nodes of ``layer`` in its dynamic form (module doc); constants go to ``out``."""
    w = arrays[layer.weight]
    bias = arrays[layer.bias] if layer.bias else None
    h = out.onnx.helper
    p, wn, x = layer.name, layer.weight, node.input[0]
    y = node.output[0]
    nodes = [h.make_node("DynamicQuantizeLinear", [x], [p + ".x_q", p + ".x_scale",
                                                        p + ".x_zero_point"], name=p + ".DQL")]
    if layer.op == "Conv":
        codes, scale = int8_per_axis(w, 0, 127)
        out.const((codes.astype(np.int16) + 128).astype(np.uint8), wn + ".codes")
        out.const(np.array(128, np.uint8), wn + ".zero_point")
        out.const(scale.reshape(1, -1, *([1] * (w.ndim - 2))), wn + ".scale")
        attrs = {a.name: h.get_attribute_value(a) for a in node.attribute}
        nodes.append(h.make_node("ConvInteger", [p + ".x_q", wn + ".codes", p + ".x_zero_point",
                                                 wn + ".zero_point"], [p + ".acc"],
                                 name=p + ".ConvInteger", **attrs))
        b = None if bias is None else bias.reshape(1, -1, *([1] * (w.ndim - 2)))
    else:
        trans = layer.op == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute)
        wk = np.ascontiguousarray(w.T if trans else w)
        if u8s8_saturates():
            codes, scale, zp = uint8_per_axis(wk, 1)
            out.const(zp, wn + ".zero_point")
        else:
            codes, scale = int8_per_axis(wk, 1, 127)
            zp = None
        out.const(codes, wn + ".codes")
        out.const(scale, wn + ".scale")
        ins = [p + ".x_q", wn + ".codes", p + ".x_zero_point"]
        ins += [wn + ".zero_point"] if zp is not None else []
        nodes.append(h.make_node("MatMulInteger", ins, [p + ".acc"], name=p + ".MatMulInteger"))
        b = bias
    nodes.append(h.make_node("Cast", [p + ".acc"], [p + ".acc_float"], name=p + ".cast",
                             to=out.onnx.TensorProto.FLOAT))
    nodes.append(h.make_node("Mul", [p + ".x_scale", wn + ".scale"], [p + ".scale"],
                             name=p + ".scales"))
    scaled = y if b is None else p + ".scaled"
    nodes.append(h.make_node("Mul", [p + ".acc_float", p + ".scale"], [scaled], name=p + ".mul"))
    if b is not None:
        out.const(np.asarray(b, np.float32), layer.bias + ".float")
        nodes.append(h.make_node("Add", [scaled, layer.bias + ".float"], [y], name=p + ".bias"))
    return nodes


#: The registry's entries (:mod:`.layered`).
CONV_INTEGER = LayerForm("conv-integer", ("Conv",), frozenset({"ConvInteger"}), dynamic_nodes)
DYNAMIC = LayerForm("dynamic", ("MatMul", "Gemm"),
                    frozenset({"DynamicQuantizeMatMul", "MatMulIntegerToFloat"}), dynamic_nodes)
