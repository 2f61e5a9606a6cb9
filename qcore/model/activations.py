"""Activation quantization: the sites, their specs, calibration and the fake-quant evaluation.

An *activation site* is a float tensor that a weight-consuming node (MatMul, Gemm, Conv, …)
reads as its data input (docs/semantics.md, Definitions). A site is quantized in one of two
ways, described by an :class:`ActivationSpec`:

- ``dynamic``: ``DynamicQuantizeLinear`` at run time (uint8, per tensor; no stored scale);
- ``static``: a ``QuantizeLinear`` → ``DequantizeLinear`` pair with a scale (and zero point)
  calibrated once on a calibration set.

The export (:mod:`qcore.model.export`) writes these specs as graph nodes; the evaluation here
runs the same operators through qcore.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ActivationSpec"]


@dataclass(frozen=True)
class ActivationSpec:
    """How one activation site is quantized.

    ``site`` is the tensor's name in the graph; ``mode`` is ``"dynamic"`` or ``"static"``;
    ``dtype`` is the ONNX type name of the codes (``"uint8"`` for dynamic; ``"int8"``,
    ``"uint8"``, ``"float8e4m3fn"``, ``"float8e5m2"``, … for static); ``scale`` and
    ``zero_point`` are the static pair's parameters (``None`` for dynamic; a float8 zero point
    is ``None``); ``method`` names the calibration that chose the scale.
    """

    site: str
    mode: str
    dtype: str = "uint8"
    scale: np.float32 | None = None
    zero_point: np.ndarray | None = None
    method: str | None = None
