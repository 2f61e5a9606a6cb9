"""The plan as a QDQ ONNX model (docs/semantics.md, Definitions).

Each planned weight W becomes three initializers — ``W.codes`` (the target type; 2- and 4-bit
types packed by :func:`qcore.packing.pack`, two or four per byte, low bits first, as ONNX stores
them; 6-bit floats packed by onnx's own ``numpy_helper``), ``W.scale`` (float32 or float8e8m0)
and, where the recipe stores one, ``W.zero_point`` — and a ``DequantizeLinear`` node whose output
is named W, so every consumer of the weight is unchanged. A name the model already uses gets a
suffix (``W.scale_1``), so export names never collide. The model's opset import is raised to
the newest version any planned recipe needs (int8 per-axis: 13, float8: 19, int4 and blocked:
21, float4: 23, float8e8m0 scales: 24, int2: 25, float6: 28); ``onnx.checker`` checks the result.

:func:`unsupported_nodes` asks onnxruntime about each DequantizeLinear configuration on its own
(a one-node model, :func:`qcore.onnx_models.node_model`), so the tool names the nodes it cannot
run while the model stays valid ONNX.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..formats import get_format
from ..packing import pack
from . import require
from .fidelity import FLOAT, Quantized, qdq
from .graph import ModelError
from .plan import Plan

__all__ = ["export_plan", "tensor_proto", "unsupported_nodes"]

_E8M0_OUTPUT_OPSET = 23  # DequantizeLinear's output_dtype attribute


def tensor_proto(a: np.ndarray, name: str) -> Any:
    """An initializer of ``a`` in ONNX's storage (2- and 4-bit types packed by qcore)."""
    onnx = require("onnx")
    from onnx import numpy_helper

    a = np.asarray(a)
    fmt = get_format(a.dtype)
    if fmt.bits in (2, 4):
        t = onnx.TensorProto()
        t.name = name
        t.data_type = fmt.onnx_id
        t.dims.extend(a.shape)
        t.raw_data = pack(a).tobytes()
        return t
    if fmt.name == "float32":
        return numpy_helper.from_array(np.ascontiguousarray(a, "<f4"), name)
    return numpy_helper.from_array(np.ascontiguousarray(a), name)


def graph_names(graph: Any) -> set[str]:
    """Every name a graph uses: initializers, inputs, outputs, value infos, node inputs,
    outputs and node names."""
    names = {t.name for t in graph.initializer}
    names.update(v.name for v in list(graph.input) + list(graph.output) + list(graph.value_info))
    for n in graph.node:
        names.update(n.input)
        names.update(n.output)
        names.add(n.name)
    names.discard("")
    return names


def fresh_name(base: str, taken: set[str]) -> str:
    """``base``, or ``base_1``, ``base_2``, ... : the first not in ``taken`` (then taken), so an
    export name never collides with a name the model already uses."""
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


def _dq_node(name: str, q: Quantized, opset: int, taken: set[str] | None = None
             ) -> tuple[Any, list[Any]]:
    helper = require("onnx.helper")
    taken = set() if taken is None else taken
    inputs = [fresh_name(name + ".codes", taken), fresh_name(name + ".scale", taken)]
    inits = [tensor_proto(q.y, inputs[0]), tensor_proto(q.scale, inputs[1])]
    if q.zero_point is not None:
        inputs.append(fresh_name(name + ".zero_point", taken))
        inits.append(tensor_proto(q.zero_point, inputs[2]))
    attrs: dict[str, int] = {}
    if q.granularity != "per-tensor":
        attrs["axis"] = q.axis
    if q.block_size:
        attrs["block_size"] = q.block_size
    if get_format(q.scale.dtype).name != "float32" and opset >= _E8M0_OUTPUT_OPSET:
        attrs["output_dtype"] = 1  # FLOAT: the weight stays float32 for its consumers
    node = helper.make_node("DequantizeLinear", inputs, [name],
                            name=fresh_name(name + ".dequantize", taken), **attrs)
    return node, inits


def export_plan(model: Any, plan: Plan, weights: dict[str, np.ndarray] | None = None,
                quantized: dict[str, Quantized] | None = None) -> Any:
    """A QDQ copy of ``model`` for ``plan`` (module doc); ``weights``: the float initializers
    (default read from the model); ``quantized``: round trips already made, by tensor."""
    onnx = require("onnx")
    from onnx import helper

    from .graph import initializer_arrays

    planned = {t: r for t, r in plan.recipes.items() if r != FLOAT}
    weights = weights if weights is not None else initializer_arrays(model, list(planned))
    quantized = dict(quantized or {})
    for t, r in planned.items():
        if t not in weights:
            raise ModelError(f"plan names tensor {t!r}, which is not a float weight of the model")
        if t not in quantized or quantized[t].recipe != r:
            quantized[t] = qdq(weights[t], r)
    old = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    opset = max([old] + [q.opset for q in quantized.values()])
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    keep = [t for t in g.initializer if t.name not in planned]
    del g.initializer[:]
    g.initializer.extend(keep)
    nodes = []
    taken = graph_names(g)
    for t in planned:
        node, inits = _dq_node(t, quantized[t], opset, taken)
        nodes.append(node)
        g.initializer.extend(inits)
    existing = list(g.node)
    del g.node[:]
    g.node.extend(nodes + existing)
    for o in out.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = opset
    try:
        ir = helper.find_min_ir_version_for(list(out.opset_import), ignore_unknown=True)
        out.ir_version = max(out.ir_version, ir)
    except Exception:  # noqa: BLE001 - keep the model's IR version
        pass
    try:
        onnx.checker.check_model(out if out.ByteSize() < 2**31 - 2**20 else _header(out))
    except Exception as exc:  # noqa: BLE001
        if old < opset:  # the other operators may have changed: convert the model, then retry
            try:
                from onnx import version_converter

                converted = version_converter.convert_version(model, opset)
                return export_plan(converted, plan, weights, quantized)
            except Exception:  # noqa: BLE001 - report the checker's reason below
                pass
        raise ModelError(f"the QDQ model fails onnx.checker at opset {opset} (the model's other "
                         f"operators may not exist unchanged there): {str(exc).splitlines()[0]}"
                         ) from None
    return out


def _header(model: Any) -> Any:
    """A copy without initializer payloads (onnx.checker cannot take a proto over 2 GB)."""
    onnx = require("onnx")
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for t in m.graph.initializer:
        t.ClearField("raw_data")
    return m


def unsupported_nodes(export: Any) -> list[str]:
    """Names of the DequantizeLinear nodes onnxruntime cannot run (no kernel, or an opset it
    does not know), each tried alone at the export's opset."""
    ort = require("onnxruntime")
    from onnx import numpy_helper

    from ..onnx_models import node_model

    opset = next((o.version for o in export.opset_import if o.domain in ("", "ai.onnx")), 1)
    inits = {t.name: t for t in export.graph.initializer}
    bad, seen = [], {}
    for n in export.graph.node:
        if n.op_type != "DequantizeLinear":
            continue
        arrays = []
        for i in n.input:
            t = inits[i]
            small = type(t)()
            small.CopyFrom(t)
            arrays.append(small)
        attrs = {a.name: a.i for a in n.attribute}
        key = (tuple((t.data_type, tuple(t.dims)) for t in arrays), tuple(sorted(attrs.items())))
        if key not in seen:
            try:
                vals = [numpy_helper.to_array(t) for t in arrays]
                m = node_model("DequantizeLinear", opset, vals,
                               {k: v for k, v in attrs.items() if k != "output_dtype"},
                               initializers=True, output_types=[1])
                for a in n.attribute:
                    if a.name == "output_dtype":
                        m.graph.node[0].attribute.append(a)
                sess = ort.InferenceSession(m.SerializeToString(),
                                            providers=["CPUExecutionProvider"])
                sess.run(None, {})
                seen[key] = True
            except Exception:  # noqa: BLE001 - any failure means onnxruntime cannot run it
                seen[key] = False
        if not seen[key]:
            bad.append(n.name or n.output[0])
    return bad
