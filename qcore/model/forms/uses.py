"""The weights a deployable form rewrites: each one read once, as input B of a MatMul or Gemm
(:func:`weight_uses`) or input W of a Conv (:func:`conv_uses`), and where a Conv's output is
quantized next (:func:`requantized_output`, what QLinearConv needs)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..graph import readers_of
from ..sites import ActivationSpec

__all__ = ["EIGHT_BIT", "WeightUse", "conv_uses", "node_id", "requantized_output", "static_8bit",
           "weight_uses"]

#: Integer code types of the integer kernels (MatMulInteger, QGemm, QLinearConv).
EIGHT_BIT = ("int8", "uint8")


@dataclass(frozen=True)
class WeightUse:
    """A weight read as input B of one MatMul or Gemm: ``kn`` when stored [K, N] (MatMul, Gemm
    with transB=0), else (N, K); ``bias``: Gemm's C, or the constant added right after a
    MatMul (by the Add node ``add``)."""

    node: str
    op: str
    kn: bool
    bias: str | None = None
    add: str | None = None

    @property
    def output_axis(self) -> int:
        return 1 if self.kn else 0

    @property
    def reduction_axis(self) -> int:
        return 0 if self.kn else 1


def node_id(n: Any, i: int) -> str:
    return n.name or f"#{i}:{n.output[0]}"


def weight_uses(model: Any) -> dict[str, WeightUse]:
    """The 2-D initializers read once, as input B of a MatMul or of a Gemm with transA=0 and
    alpha = beta = 1 (the nodes whose forms this module rewrites)."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    consumers = readers_of(g)
    out: dict[str, WeightUse] = {}
    for k, n in enumerate(g.node):
        if n.op_type not in ("MatMul", "Gemm") or len(n.input) < 2:
            continue
        w = n.input[1]
        t = inits.get(w)
        if t is None or len(t.dims) != 2 or len(consumers.get(w, [])) != 1 \
                or t.data_type != 1:
            continue
        if n.op_type == "Gemm":
            a = {x.name: (x.i if x.type == 2 else x.f) for x in n.attribute}
            if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
                continue
            bias = n.input[2] if len(n.input) > 2 and n.input[2] in inits else None
            out[w] = WeightUse(node_id(n, k), "Gemm", not a.get("transB", 0), bias)
            continue
        bias = add = None
        after = consumers.get(n.output[0], [])
        if len(after) == 1 and after[0].op_type == "Add":
            other = [i for i in after[0].input if i != n.output[0]]
            if len(other) == 1 and other[0] in inits and len(inits[other[0]].dims) == 1:
                bias, add = other[0], node_id(after[0], list(g.node).index(after[0]))
        out[w] = WeightUse(node_id(n, k), "MatMul", True, bias, add)
    return out


def conv_uses(model: Any) -> dict[str, WeightUse]:
    """The float32 initializers of rank ≥ 3 read once, as input W of a Conv of the main graph
    (output axis 0), with the Conv's bias when it is an initializer."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    consumers = readers_of(g)
    out: dict[str, WeightUse] = {}
    for k, n in enumerate(g.node):
        if n.op_type != "Conv" or len(n.input) < 2:
            continue
        t = inits.get(n.input[1])
        if (t is None or len(t.dims) < 3 or len(consumers.get(n.input[1], [])) != 1
                or t.data_type != 1):
            continue
        bias = n.input[2] if len(n.input) > 2 and n.input[2] in inits else None
        out[n.input[1]] = WeightUse(node_id(n, k), "Conv", False, bias)
    return out


def static_8bit(spec: ActivationSpec | None) -> bool:
    return spec is not None and spec.mode == "static" and spec.dtype in EIGHT_BIT


def requantized_output(model: Any, node: Any,
                        acts: Mapping[str, ActivationSpec]) -> tuple[str, str | None] | None:
    """(the site that quantizes ``node``'s output, the id of the Relu between them or None) when
    the
    output is read only as the data input of MatMul/Gemm/Conv nodes at a static 8-bit site —
    directly or through one Relu — and is no graph output; else None (no QuantizeLinear would
    follow the node, so onnxruntime could not fuse it)."""
    g = model.graph
    outputs = {o.name for o in g.output}
    consumers = readers_of(g)

    def quantized_site(v: str) -> bool:
        readers = consumers.get(v, [])
        return (v not in outputs and static_8bit(acts.get(v)) and bool(readers)
                and all(r.op_type in ("MatMul", "Gemm", "Conv") and r.input[0] == v
                        and list(r.input).count(v) == 1 for r in readers))

    y = node.output[0]
    if quantized_site(y):
        return y, None
    readers = consumers.get(y, [])
    if (y not in outputs and len(readers) == 1 and readers[0].op_type == "Relu"
            and quantized_site(readers[0].output[0])):
        k = next(k for k, n in enumerate(g.node) if n.output[0] == readers[0].output[0])
        return readers[0].output[0], node_id(readers[0], k)
    return None
