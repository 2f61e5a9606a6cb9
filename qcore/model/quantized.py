"""Already-quantized models: which quantized operators a graph holds, and the refusal that
names them (docs/model.md, "Checked as deployed").

A model that holds codes, scales and integer kernels already (onnxruntime's quantizers write
QuantizeLinear / DequantizeLinear pairs, DynamicQuantizeLinear with ConvInteger or
MatMulInteger, MatMulNBits, ...) has no float weights left to plan but its remainder: the tools
say so, and do nothing unless told (``--force``).
"""

from __future__ import annotations

from typing import Any

from ..io.onnx import ModelError

__all__ = ["QUANTIZED_OPS", "check_not_quantized", "quantized_nodes"]
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
    every graph: non-empty means the model is already quantized."""
    from ..io.onnx import iter_graphs

    counts: dict[str, int] = {}
    for _, g in iter_graphs(model.graph):
        for n in g.node:
            if n.op_type in QUANTIZED_OPS:
                counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def check_not_quantized(model: Any, force: bool) -> dict[str, int]:
    """An already-quantized model is named and refused unless ``force`` (then only its float
    remainder is measured and planned); returns the quantized nodes by operator."""
    counts = quantized_nodes(model)
    if counts and not force:
        listed = ", ".join(f"{n} {op}" for op, n in counts.items())
        raise ModelError(f"the model is already quantized ({sum(counts.values())} quantized "
                         f"nodes: {listed}); the tool does nothing to it unless --force, which "
                         f"measures and plans only its float remainder (the weights still in "
                         f"float); or give the float model")
    return counts
