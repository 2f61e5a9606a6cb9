"""Already-quantized ONNX models, for both tools: which quantized operators a graph holds and
which of its tensors those operators read (docs/model.md, "Checked as deployed").

A model that holds codes, scales and integer kernels already (onnxruntime's quantizers write
QuantizeLinear / DequantizeLinear pairs, DynamicQuantizeLinear with ConvInteger or
MatMulInteger, MatMulNBits, ...) has only its float remainder left to measure: its scales are
no weights, and the tools name the model instead of reporting them as tensors.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PARAMETER_OPS", "QUANTIZED_OPS", "describe_quantized", "quantized_inputs", "quantized_nodes"]

#: Operators only a quantized model holds (the default domain and com.microsoft's): codes,
#: scales and integer kernels.
QUANTIZED_OPS = frozenset({
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv",
    "QLinearMatMul", "ConvInteger", "MatMulInteger", "MatMulNBits", "MatMulIntegerToFloat",
    "DynamicQuantizeMatMul", "DynamicQuantizeLSTM", "QGemm", "QAttention", "QLinearAdd",
    "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearAveragePool",
    "QLinearGlobalAveragePool", "QLinearConcat", "QLinearSoftmax", "QEmbedLayerNormalization",
    "QOrderedMatMul", "GatherBlockQuantized"})


def quantized_nodes(model: Any) -> dict[str, int]:
    """How many nodes of each quantized operator (:data:`QUANTIZED_OPS`) the model holds, in
    every graph, most frequent first: non-empty means the model is already quantized."""
    from .io.onnx import iter_graphs

    counts: dict[str, int] = {}
    for _, g in iter_graphs(model.graph):
        for n in g.node:
            if n.op_type in QUANTIZED_OPS:
                counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


#: Operators that carry a quantized node's parameters on (``x_scale * w_scale`` before the
#: dynamic form's output Mul): a node of these whose every computed input is a parameter
#: computes a parameter, and the constants it reads are parameters too.
PARAMETER_OPS = frozenset({"Mul", "Div", "Cast", "Reshape", "Unsqueeze", "Squeeze",
                           "Identity", "Expand"})


def quantized_inputs(model: Any) -> dict[str, str]:
    """Every tensor of the quantized part -> the operator that reads it: what a quantized node
    reads (codes, scales, zero points, biases), the scale and zero point DynamicQuantizeLinear
    computes, and what :data:`PARAMETER_OPS` compute from those and constants alone (the
    weight scale in ``x_scale * w_scale``). None of it is the model's float remainder."""
    from .io.onnx import iter_graphs

    out: dict[str, str] = {}
    graphs = [g for _, g in iter_graphs(model.graph)]
    consts: set[str] = set()
    for g in graphs:
        consts.update(t.name for t in g.initializer)
        consts.update(o for n in g.node if n.op_type == "Constant" for o in n.output)
    for g in graphs:
        for n in g.node:
            if n.op_type in QUANTIZED_OPS:
                for name in n.input:
                    if name:
                        out.setdefault(name, n.op_type)
                if n.op_type == "DynamicQuantizeLinear":
                    for name in n.output[1:]:
                        out.setdefault(name, n.op_type)
    changed = True
    while changed:  # to a fixed point: node order does not matter
        changed = False
        for g in graphs:
            for n in g.node:
                ins = [i for i in n.input if i]
                if (n.op_type not in PARAMETER_OPS or not any(i in out for i in ins)
                        or not all(i in out or i in consts for i in ins)):
                    continue
                via = next(out[i] for i in ins if i in out)
                for name in [*ins, *n.output]:
                    if name and name not in out:
                        out[name] = via
                        changed = True
    return out


def describe_quantized(counts: dict[str, int]) -> str:
    """``already quantized (N quantized nodes: a Op1, b Op2)`` for :func:`quantized_nodes`."""
    listed = ", ".join(f"{n} {op}" for op, n in counts.items())
    return f"already quantized ({sum(counts.values())} quantized nodes: {listed})"
