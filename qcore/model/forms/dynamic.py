"""The ``dynamic`` form: the activation site is dynamic (``ActivationSpec(site, "dynamic",
"uint8")``) and the weight int8/uint8 per-tensor or per output channel:
``DynamicQuantizeLinear`` → ``MatMulInteger`` (uint8 activations × [K, N] codes, weight zero
point where not zero) → ``Cast`` → ``Mul`` by ``Mul(a_scale, w_scale)`` (→ ``Add`` of a Gemm's
bias): the form ``onnxruntime.quantization.quantize_dynamic`` writes. Fused into
``DynamicQuantizeMatMul`` / ``MatMulIntegerToFloat``."""

from __future__ import annotations

import numpy as np

from ...layout import PER_AXIS
from ..sites import ActivationSpec
from .base import Export, Form, Job
from .static import integer_weight

__all__ = ["DYNAMIC"]


def _dynamic_site(spec: ActivationSpec | None) -> bool:
    return spec is not None and spec.mode == "dynamic"


def write(ex: Export, job: Job) -> None:
    """DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul (-> Add bias)."""
    w, t, q, use, helper = ex.w, job.tensor, job.q, job.use, ex.helper
    xq, xs, xz = ex.dynamic_quantize(job.site, use.node)
    ins = [xq, w.init(t + ".codes", q.y), xz]
    if q.zero_point is not None and np.any(np.asarray(q.zero_point).astype(np.int64)):
        ins.append(w.init(t + ".zero_point", np.asarray(q.zero_point).reshape(-1)
                          if q.granularity == PER_AXIS else q.zero_point))
    wscale = np.asarray(q.scale, np.float32)
    wscale = wscale.reshape(-1) if q.granularity == PER_AXIS else wscale
    sname = w.init(t + ".scale", wscale)
    out = job.node.output[0]
    n = {k: w.name(f"{t}.integer{k}") for k in ("", ".int32", ".float", ".scales",
                                                  ".product", ".cast", ".rescale", ".bias",
                                                  ".scales_mul")}
    new = [helper.make_node("MatMulInteger", ins, [n[".int32"]], name=n[""]),
           helper.make_node("Cast", [n[".int32"]], [n[".float"]], name=n[".cast"],
                            to=ex.TensorProto.FLOAT),
           helper.make_node("Mul", [xs, sname], [n[".scales"]], name=n[".scales_mul"]),
           helper.make_node("Mul", [n[".float"], n[".scales"]],
                            [out if use.op == "MatMul" or use.bias is None
                             else n[".product"]], name=n[".rescale"])]
    if use.op == "Gemm" and use.bias is not None:
        new.append(helper.make_node("Add", [n[".product"], use.bias], [out],
                                    name=n[".bias"]))
    ex.replaced[use.node] = new


DYNAMIC = Form("dynamic", ("MatMul", "Gemm"), _dynamic_site,
               lambda r, nbits_form: integer_weight(r),
               frozenset({"DynamicQuantizeMatMul", "MatMulIntegerToFloat"}), write, kn=True)
