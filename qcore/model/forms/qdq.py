"""The ``qdq`` form: any activation spec the integer kernels do not take (float8 static, or a
weight they do not take): the activation's QuantizeLinear → DequantizeLinear (static) or
DynamicQuantizeLinear → DequantizeLinear (dynamic) and the weight's DequantizeLinear; it runs,
nothing fuses."""

from __future__ import annotations

from ..sites import ActivationSpec
from .base import Export, Form, Job, any_weight

__all__ = ["QDQ"]


def _any_site(spec: ActivationSpec | None) -> bool:
    return spec is not None


def write(ex: Export, job: Job) -> None:
    """The weight's DequantizeLinear and the site's quantize → dequantize before the node."""
    ex.dequantize(job.tensor, job.q, job.tensor, job.use.node)
    ex.input_changes.setdefault(job.use.node, {})[0] = ex.activation_qdq(job.site, job.spec,
                                                                          job.use.node)


QDQ = Form("qdq", ("MatMul", "Gemm"), _any_site, any_weight, frozenset(), write)
