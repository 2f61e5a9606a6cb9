"""A prepared model written with a form per layer: the speed plan's export, and the registry
of layer forms.

:data:`LAYER_REGISTRY` holds every :class:`~qcore.model.forms.layers.LayerForm`: ``float``,
``qlinear`` (:mod:`.qlinear`: uint8 × int8 chains), ``conv-integer`` and ``dynamic``
(:mod:`.integer`: DynamicQuantizeLinear → ConvInteger / MatMulInteger), ``weight-only``
(:mod:`.lookup`: a Gather table). Adding a form: a module with its ``LayerForm`` and one line
here (and a test that the kernels it ``fuses`` into appear in the model onnxruntime optimizes).

``export_forms(prepared, forms, specs)``: ``forms`` maps layer node names to form names
(missing: float); ``specs`` are the chain tensors' uint8 pairs (:func:`.qlinear.chain_specs`)
of the ``qlinear`` layers: one ``QuantizeLinear`` → ``DequantizeLinear`` after each chain
tensor's producer (or at the start for a graph input), read by every reader of that tensor.
Every weight the export no longer reads is dropped; the opset is raised to 13 where lower
(per-axis DequantizeLinear; :func:`.layers.prepare` already converted the graph).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...errors import QuantizationError
from .. import require
from ..sites import ActivationSpec
from . import integer, lookup, lookup4, nbits_layers, qlinear
from .layers import LAYER_OPS, Layer, LayerForm, Out, _attr

__all__ = ["LAYER_FORMS", "LAYER_REGISTRY", "export_forms", "layers_of"]

FLOAT = LayerForm("float", ("Conv", "MatMul", "Gemm", "Gather"), frozenset(), None)

#: Every layer form, in the order a layer's forms are listed.
LAYER_REGISTRY: tuple[LayerForm, ...] = (
    FLOAT,
    qlinear.QLINEAR,
    integer.CONV_INTEGER,
    integer.DYNAMIC,
    lookup.WEIGHT_ONLY,
    nbits_layers.INT4_ACC0, nbits_layers.INT4_ACC1, nbits_layers.INT4_ACC4,
    lookup4.WEIGHT_ONLY_INT4,
)
_BY_NAME = {f.name: f for f in LAYER_REGISTRY}
#: Form name → the onnxruntime kernels it fuses into (empty: nothing fuses).
LAYER_FORMS: dict[str, frozenset[str]] = {f.name: f.fuses for f in LAYER_REGISTRY}


def layers_of(model: Any) -> list[Layer]:
    """The layers of a prepared model's main graph, in graph order, each with the forms of
    :data:`LAYER_REGISTRY` it can take (:mod:`.layers`)."""
    onnx = require("onnx")
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    outputs = {o.name for o in g.output}
    out: list[Layer] = []
    for n in g.node:
        if n.domain not in ("", "ai.onnx") or n.op_type not in LAYER_OPS:
            continue
        wi, di = LAYER_OPS[n.op_type]
        if len(n.input) <= max(wi, di) or n.input[wi] not in inits or n.input[di] in inits:
            continue
        w = inits[n.input[wi]]
        if w.data_type != onnx.TensorProto.FLOAT or len(w.dims) < 2:
            continue
        if n.op_type == "Gemm" and (_attr(n, "transA") or _attr(n, "alpha", 1.0) != 1.0
                                    or _attr(n, "beta", 1.0) != 1.0):
            continue
        if n.op_type == "Gather" and _attr(n, "axis") != 0:
            continue
        bias = n.input[2] if n.op_type in ("Conv", "Gemm") and len(n.input) > 2 else None
        if bias is not None and bias not in inits:
            continue  # a computed bias: the integer forms need a constant one
        at_output = n.output[0] in outputs
        forms = tuple(f.name for f in LAYER_REGISTRY
                      if n.op_type in f.ops and (f.at_output or not at_output))
        out.append(Layer(n.name, n.op_type, n.input[wi], tuple(int(d) for d in w.dims),
                         bias or None, n.input[di], n.output[0], at_output, forms))
    return out


def _pair(out: Out, t: str, spec: ActivationSpec) -> list[Any]:
    s = out.const(np.asarray(spec.scale, np.float32), t + ".act_scale")
    z = out.const(spec.zero_point_codes(), t + ".act_zero_point")
    h = out.helper
    return [h.make_node("QuantizeLinear", [t, s, z], [t + ".q"], name=t + ".Q"),
            h.make_node("DequantizeLinear", [t + ".q", s, z], [t + ".dq"], name=t + ".DQ")]


def _check(layers: Mapping[str, Any], forms: Mapping[str, str],
           specs: Mapping[str, ActivationSpec]) -> None:
    for name, form in forms.items():
        if form == "float":
            continue
        if name not in layers or form not in layers[name].forms:
            raise QuantizationError(f"layer {name!r} cannot take form {form!r}")
        if _BY_NAME[form].chain and layers[name].data not in specs:
            raise QuantizationError(f"layer {name!r}: form {form} needs a spec of its input "
                                    f"{layers[name].data!r}")


def export_forms(prepared: Any, forms: Mapping[str, str],
                 specs: Mapping[str, ActivationSpec] | None = None, qmax: int | None = None
                 ) -> Any:
    """``prepared`` with each layer in its form (module doc); ``qmax``: the largest int8 weight
    code of the chain forms (default :func:`.qlinear.weight_qmax`). Raises QuantizationError
    for a form a layer cannot take or a chain layer whose input has no spec."""
    onnx = require("onnx")
    specs = dict(specs or {})
    qmax = qlinear.weight_qmax() if qmax is None else int(qmax)
    layers = {x.name: x for x in layers_of(prepared)}
    _check(layers, forms, specs)
    model = onnx.ModelProto()
    model.CopyFrom(prepared)
    g = model.graph
    arrays = {t.name: onnx.numpy_helper.to_array(t) for t in g.initializer}
    out = Out(onnx)
    pairs = {t: _pair(out, t, sp) for t, sp in specs.items()}
    consts: list[Any] = []
    body: list[Any] = []
    for n in g.node:
        node = onnx.NodeProto()
        node.CopyFrom(n)
        for i, t in enumerate(node.input):
            if t in pairs:
                node.input[i] = t + ".dq"
        form = _BY_NAME[forms.get(n.name, "float")]
        new = None
        if form.write is not None:
            new = form.write(out, layers[n.name], node, arrays, qmax, specs)
        consts.extend(out.nodes)  # constant DequantizeLinear nodes go first
        del out.nodes[:]
        body.extend(new if new is not None else [node])
    order = list(consts)
    for i in g.input:
        order.extend(pairs.get(i.name, []))
    for node in body:
        order.append(node)
        for o in node.output:
            order.extend(pairs.get(o, []))
    del g.node[:]
    g.node.extend(order)
    used = {t for node in g.node for t in node.input}
    kept = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(kept + [t for t in out.inits if t.name in used])
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx") and o.version < 13:
            o.version = 13
    if any(n.domain == "com.microsoft" for n in g.node) and not any(
            o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
    return model
