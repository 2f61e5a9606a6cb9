"""The ``static`` form (QGemm, QLinearMatMul, QLinearConv): the activation site is static
int8/uint8 and the weight int8/uint8 per-tensor or per output channel.

- On a MatMul or Gemm: ``QuantizeLinear`` → ``DequantizeLinear`` on the activation, the weight's
  ``DequantizeLinear``, and the bias (Gemm's C, or the Add after a MatMul) as int32 codes at
  scale a_scale × w_scale through a ``DequantizeLinear`` — what ``quantize_static`` writes. With a
  float bias onnxruntime first folds MatMul + Add into a float Gemm and nothing fuses; with the
  int32 bias the group fuses into ``QGemm`` (``MatMulIntegerToFloat`` / ``QLinearMatMul``
  without a bias).
- On a Conv — the same form for a Conv weight (O, I/g, k…) read as input W of a Conv whose
  output is quantized next: activation ``QuantizeLinear`` → ``DequantizeLinear`` on X, the
  weight's int8/uint8 codes per output channel (``DequantizeLinear(axis=0)``), the bias as int32
  codes round(b / (x_scale · w_scale)) through ``DequantizeLinear(axis=0)`` — what
  ``quantize_static`` writes for a QDQ Conv. onnxruntime fuses a Conv into ``QLinearConv`` only
  when a ``QuantizeLinear`` reads its output, so the form is taken where the Conv's output is
  read only by static 8-bit activation sites (a following Conv, MatMul or Gemm), directly or
  through one ``Relu`` (:func:`qcore.model.forms.uses.requantized_output`): there the export
  puts the next site's QuantizeLinear → DequantizeLinear before the Relu as well (Relu commutes
  with a quantizer whose codes keep 0 exact, so the outputs are unchanged bit for bit). A Conv
  whose output goes anywhere else (BatchNormalization, Add, a graph output) gets the plain
  export: nothing would fuse.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...layout import PER_AXIS, PER_TENSOR
from ...recipes import Recipe
from .base import Export, Form, Job, static_params
from .uses import EIGHT_BIT, requantized_output, static_8bit

__all__ = ["STATIC", "integer_weight"]


def integer_weight(r: Recipe) -> bool:
    """int8/uint8 codes per tensor or per output channel: what the integer kernels take."""
    return r.target in EIGHT_BIT and r.granularity in (PER_TENSOR, PER_AXIS) and not r.mx


def _requantized(model: Any, node: Any, acts: Any) -> bool:
    """A Conv fuses only followed by a quantizer; a MatMul or Gemm always."""
    return node.op_type != "Conv" or requantized_output(model, node, acts) is not None


def write(ex: Export, job: Job) -> None:
    """The activation's and the weight's QDQ, the int32 bias; a Conv's next quantizer before
    its Relu."""
    from onnx import numpy_helper

    w, t, q, use, node, site, spec = (ex.w, job.tensor, job.q, job.use, job.node, job.site,
                                      job.spec)
    input_changes, by_id = ex.input_changes, ex.by_id
    if use.op == "Conv":  # requantized before its Relu, if any
        after, relu = requantized_output(ex.model, node, ex.acts)
        if relu is not None and relu not in input_changes:
            rq = w.name(f"{after}.before_relu")
            rsc, rzp = static_params(ex.acts[after])
            ins = [w.init(after + ".scale", rsc), w.init(after + ".zero_point", rzp)]
            w.node(relu, "QuantizeLinear", [by_id[relu].input[0]] + ins,
                   [w.name(rq + ".codes")], rq + ".quantize")
            w.node(relu, "DequantizeLinear", [w.name(rq + ".codes")] + ins, [rq],
                   rq + ".dequantize")
            input_changes.setdefault(relu, {})[0] = rq
    ex.dequantize(t, q, t, use.node)
    a_scale, _ = static_params(spec)
    input_changes.setdefault(use.node, {})[0] = ex.activation_qdq(site, spec, use.node)
    if use.bias is not None:  # int32 bias at a_scale × w_scale (what QGemm reads)
        b = np.asarray(numpy_helper.to_array(next(
            i for i in ex.model.graph.initializer if i.name == use.bias)), np.float64)
        bscale = (np.float32(a_scale) * np.asarray(q.scale, np.float32)).astype(
            np.float32)
        bscale = np.broadcast_to(bscale.reshape(-1), b.shape).astype(np.float32)
        bq = np.clip(np.rint(b / bscale), -2**31, 2**31 - 1).astype(np.int32)
        bname = w.name(f"{use.bias}.int32")
        ins = [w.init(bname + ".codes", bq), w.init(bname + ".scale", bscale)]
        target = use.add if use.add is not None else use.node
        w.node(target, "DequantizeLinear", ins, [bname], bname + ".dequantize",
               axis=0)
        idx = 2 if use.add is None else list(by_id[use.add].input).index(use.bias)
        input_changes.setdefault(target, {})[idx] = bname
        if sum(1 for n in ex.nodes for i in n.input if i == use.bias) == 1:
            ex.drop_inits.add(use.bias)


STATIC = Form("static", ("MatMul", "Gemm", "Conv"), static_8bit,
              lambda r, nbits_form: integer_weight(r),
              frozenset({"QGemm", "QLinearMatMul", "MatMulIntegerToFloat", "QLinearConv"}),
              write, where=_requantized)
