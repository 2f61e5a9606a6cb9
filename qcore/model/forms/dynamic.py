"""The ``dynamic`` form: the activation site is dynamic (``ActivationSpec(site, "dynamic",
"uint8")``) and the weight int8/uint8 per-tensor or per output channel:
``DynamicQuantizeLinear`` → ``MatMulInteger`` (uint8 activations × [K, N] codes, weight zero
point where not zero; uint8 codes + 128 where the runtime's uint8 × int8 kernels saturate)
→ ``Cast`` → ``Mul`` by ``Mul(a_scale, w_scale)`` (→ ``Add`` of a Gemm's
bias): the form ``onnxruntime.quantization.quantize_dynamic`` writes. Fused into
``DynamicQuantizeMatMul`` / ``MatMulIntegerToFloat``."""

from __future__ import annotations

import numpy as np

from ...layout import PER_AXIS
from ..sites import ActivationSpec
from .base import Export, Form, Job
from .qlinear import u8s8_saturates
from .static import integer_weight

__all__ = ["DYNAMIC"]


def _dynamic_site(spec: ActivationSpec | None) -> bool:
    return spec is not None and spec.mode == "dynamic"


def _unsaturated(codes: np.ndarray, zero_point: np.ndarray | None
                 ) -> tuple[np.ndarray, np.ndarray | None]:
    """int8 codes as uint8 codes + 128 with the zero point + 128 where the runtime's uint8 x
    int8 kernels saturate (:func:`.qlinear.u8s8_saturates`): the same dequantized weights, run
    by the uint8 x uint8 kernels, which do not; anything else as it is."""
    codes = np.asarray(codes)
    if codes.dtype != np.int8 or not u8s8_saturates():
        return codes, zero_point
    zp = np.zeros((), np.int16) if zero_point is None else np.asarray(zero_point, np.int16)
    return ((codes.astype(np.int16) + 128).astype(np.uint8),
            (zp + 128).astype(np.uint8))


def write(ex: Export, job: Job) -> None:
    """DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul (-> Add bias)."""
    w, t, q, use, helper = ex.w, job.tensor, job.q, job.use, ex.helper
    xq, xs, xz = ex.dynamic_quantize(job.site, use.node)
    codes, zero_point = _unsaturated(q.y, q.zero_point)
    ins = [xq, w.init(t + ".codes", codes), xz]
    if zero_point is not None and np.any(np.asarray(zero_point).astype(np.int64)):
        ins.append(w.init(t + ".zero_point", np.asarray(zero_point).reshape(-1)
                          if q.granularity == PER_AXIS else zero_point))
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
