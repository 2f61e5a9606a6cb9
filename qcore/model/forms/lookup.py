"""The ``weight-only`` form of a table lookup (Gather on an embedding): int8 codes and a float
scale per row; the lookup gathers both, then ``Cast`` · ``Mul``, so only the rows looked up are
dequantized (a DequantizeLinear before the Gather would dequantize the whole table on every
run). The file shrinks; the lookup stays a lookup."""

from __future__ import annotations

from typing import Any

from .layers import Layer, LayerForm, int8_per_axis

__all__ = ["WEIGHT_ONLY", "write"]


def write(out: Any, layer: Layer, node: Any, arrays: Any, qmax: int, specs: Any = None
          ) -> list[Any]:
    """Gather codes, Gather row scales, Cast, Mul (module doc)."""
    w = arrays[layer.weight]
    codes, scale = int8_per_axis(w, 0, 127)
    wn = layer.weight
    out.const(codes, wn + ".codes")
    out.const(scale.reshape(-1, *([1] * (w.ndim - 1))), wn + ".row_scale")
    h = out.helper
    ids, y, p = node.input[1], node.output[0], layer.name
    return [h.make_node("Gather", [wn + ".codes", ids], [p + ".codes"], name=p + ".gather",
                        axis=0),
            h.make_node("Gather", [wn + ".row_scale", ids], [p + ".scale"], name=p + ".scales",
                        axis=0),
            h.make_node("Cast", [p + ".codes"], [p + ".float"], name=p + ".cast",
                        to=out.onnx.TensorProto.FLOAT),
            h.make_node("Mul", [p + ".float", p + ".scale"], [y], name=p + ".dequantize")]


#: The registry's entry (:mod:`.layered`).
WEIGHT_ONLY = LayerForm("weight-only", ("Gather",), frozenset(), write)
