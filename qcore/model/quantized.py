"""Already-quantized models in the model tool: the refusal that names them (their quantized
operators: :mod:`qcore.quantized_models`, shared with the report; docs/model.md, "Checked as
deployed").

A model that holds codes, scales and integer kernels already (onnxruntime's quantizers write
QuantizeLinear / DequantizeLinear pairs, DynamicQuantizeLinear with ConvInteger or
MatMulInteger, MatMulNBits, ...) has no float weights left to plan but its remainder: the tools
say so, and do nothing unless told (``--force``).
"""

from __future__ import annotations

from typing import Any

from ..io.onnx import ModelError
from ..quantized_models import QUANTIZED_OPS, describe_quantized, quantized_nodes

__all__ = ["QUANTIZED_OPS", "check_not_quantized", "quantized_nodes"]


def check_not_quantized(model: Any, force: bool) -> dict[str, int]:
    """An already-quantized model is named and refused unless ``force`` (then only its float
    remainder is measured and planned); returns the quantized nodes by operator
    (:func:`qcore.quantized_models.quantized_nodes`)."""
    counts = quantized_nodes(model)
    if counts and not force:
        raise ModelError(f"the model is {describe_quantized(counts)}; the tool does nothing to "
                         f"it unless --force, which measures and plans only its float remainder "
                         f"(the weights still in float); or give the float model")
    return counts
