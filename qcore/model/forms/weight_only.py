"""Weight-only forms: the activation stays float, the weight is dequantized.

- ``dq-matmul`` — a weight-only recipe with integer codes of 4 or 8 bits (int4, uint4, int8,
  uint8), per output channel or blocked along K with a power-of-two block ≥ 16 (int4/uint4
  blocked ones only with ``nbits_form="dq-matmul"``): the standard-ONNX form, the codes stored
  [K, N] and ``DequantizeLinear(axis=1)`` or ``DequantizeLinear(axis=0, block_size)`` feeding
  MatMul (or Gemm with ``transB=0``). A Gemm with ``transB=1`` gets the transposed codes
  and ``transB=0``: onnxruntime fuses DQ → Gemm only without the transpose. Fused into
  ``MatMulNBits`` (at the session's QDQ accuracy level).
- ``dq`` — any other weight-only recipe: the plain DequantizeLinear, written by the plain export
  (:func:`qcore.model.export.export_plan`) where the weight lives; nothing fuses.
"""

from __future__ import annotations

from .base import Export, Form, Job, any_weight, no_site
from .nbits import nbits

__all__ = ["DQ", "DQ_MATMUL"]


def _weights(r, nbits_form: str) -> bool:
    return nbits(r)


def write(ex: Export, job: Job) -> None:
    """The [K, N] codes' DequantizeLinear feeding the node."""
    ex.dequantize(job.tensor, job.q, job.tensor, job.use.node)


DQ_MATMUL = Form("dq-matmul", ("MatMul", "Gemm"), no_site, _weights,
                 frozenset({"MatMulNBits"}), write, kn=True)
DQ = Form("dq", ("MatMul", "Gemm", "Conv"), no_site, any_weight, frozenset(), None)
