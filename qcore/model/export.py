"""The plan as a QDQ ONNX model (docs/semantics.md, Definitions).

Each planned weight W becomes, in the graph where it lives (the main graph, an If / Loop / Scan
body, or in place of its Constant node), three initializers — ``W.codes`` (the target type; 2-
and 4-bit types packed by :func:`qcore.packing.pack`, two or four per byte, low bits first, as
ONNX stores them; 6-bit floats packed by onnx's own ``numpy_helper``), ``W.scale`` (float32 or
float8e8m0) and, where the recipe stores one, ``W.zero_point`` — and a ``DequantizeLinear``
node (its axis the one the weight's role chose, :func:`qcore.recipes.weight_layout`)
whose final output is named W, so every consumer of the weight is unchanged. A Conv kernel
quantized as its [O, I·k] view is followed by a ``Reshape`` to its shape; a float16 / bfloat16
weight by a ``Cast`` to its type (DequantizeLinear computes float32; the Cast rounds to nearest
even, as the fake-quant run does), so the export keeps the model's float type. A name the model
already uses gets a suffix (``W.scale_1``), so export names never collide. The model's opset import is raised to
the newest version any planned recipe needs (int8 per-axis: 13, float8: 19, int4 and blocked:
21, float4: 23, float8e8m0 scales: 24, int2: 25, float6: 28); ``onnx.checker`` checks the result.

:func:`unsupported_nodes` asks onnxruntime about each DequantizeLinear configuration on its own
(a one-node model, :func:`qcore.onnx_models.node_model`), so the tool names the nodes it cannot
run while the model stays valid ONNX.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import require
from .fidelity import FLOAT, Quantized, qdq
from .graph import (
    ModelError,
    fresh_name,
    graph_names,
    model_opset,
    set_opset,
    splice_at_weight,
    tensor_proto,
)
from .plan import Plan

__all__ = ["export_plan", "tensor_proto", "unsupported_nodes"]

_E8M0_OUTPUT_OPSET = 23  # DequantizeLinear's output_dtype attribute


def _dq_nodes(name: str, q: Quantized, opset: int, dtype: str, shape: tuple[int, ...],
              taken: set[str] | None = None) -> tuple[list[Any], list[Any]]:
    """The nodes computing weight ``name`` from its codes (DequantizeLinear, then a Reshape for
    a kernel quantized as its 2-D view, then a Cast to float16 / bfloat16 for a weight of that
    type) and their initializers; every new name is fresh in ``taken``."""
    helper = require("onnx.helper")
    onnx = require("onnx")
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
    if np.dtype(q.scale.dtype) != np.float32 and opset >= _E8M0_OUTPUT_OPSET:
        attrs["output_dtype"] = 1  # FLOAT: float32, cast below where the weight is narrower
    steps = (["reshape"] if q.view else []) + (["cast"] if dtype != "float32" else [])
    outs = [fresh_name(f"{name}.{step}_in", taken) for step in steps] + [name]
    nodes = [helper.make_node("DequantizeLinear", inputs, [outs[0]],
                              name=fresh_name(name + ".dequantize", taken), **attrs)]
    for k, step in enumerate(steps):
        if step == "reshape":
            from onnx import numpy_helper

            shape_name = fresh_name(name + ".shape", taken)
            inits.append(numpy_helper.from_array(np.asarray(shape, np.int64), shape_name))
            nodes.append(helper.make_node("Reshape", [outs[k], shape_name], [outs[k + 1]],
                                          name=fresh_name(name + ".reshape", taken)))
        else:
            to = onnx.TensorProto.FLOAT16 if dtype == "float16" else onnx.TensorProto.BFLOAT16
            nodes.append(helper.make_node("Cast", [outs[k]], [outs[k + 1]], to=to,
                                          name=fresh_name(name + ".cast", taken)))
    return nodes, inits


def export_plan(model: Any, plan: Plan, weights: dict[str, np.ndarray] | None = None,
                quantized: dict[str, Quantized] | None = None) -> Any:
    """A QDQ copy of ``model`` for ``plan`` (module doc); ``weights``: the float weights by key
    (default read from the model); ``quantized``: round trips already made, by key.

    Each weight is replaced where it lives: an initializer of the main graph or of a subgraph
    by codes initializers and DequantizeLinear nodes at the top of that graph (and no longer
    listed as a graph input); a Constant node by the same nodes in its place. A model before
    IR version 4 lists no initializer as an input in its export (IR 4 or later). Nodes are
    topologically sorted first."""
    onnx = require("onnx")

    from ..io.onnx import (
        MAIN,
        find_weights,
        iter_graphs,
        topologically_sorted,
        unlist_initializer_inputs,
    )
    from .graph import initializer_arrays

    planned = {t: r for t, r in plan.recipes.items() if r != FLOAT}
    records = {r.key: r for r in find_weights(model)}
    for t in planned:
        if t not in records:
            raise ModelError(f"plan names tensor {t!r}, which is not a float weight of the model")
    weights = weights if weights is not None else initializer_arrays(model, list(planned))
    quantized = dict(quantized or {})
    for t, r in planned.items():
        if t not in quantized or quantized[t].recipe != r:
            quantized[t] = qdq(weights[t], r, records[t].role)
    old = model_opset(model)
    opset = max([old] + [q.opset for q in quantized.values()])
    out = topologically_sorted(model)
    dropped: dict[str, set[str]] = {}  # graph path -> initializers the DQ nodes replace
    # a replaced weight listed as a graph input is listed no more (a node now makes it); before
    # IR 4 every initializer is listed, a rule of the file format, not an invitation to feed
    # them: none stays listed (onnxruntime folds and prepacks only unlisted ones)
    replaced = {records[t].name for t in planned
                if records[t].graph == MAIN and records[t].kind == "initializer"}
    unlist_initializer_inputs(out, None if model.ir_version < 4 else replaced)
    taken = graph_names(out.graph)
    for t in planned:
        rec = records[t]
        # looked up afresh: rewriting a graph's node list copies the subgraphs below it
        g = dict(iter_graphs(out.graph))[rec.graph]
        nodes, inits = _dq_nodes(rec.name, quantized[t], opset, rec.dtype, rec.shape, taken)
        g.initializer.extend(inits)
        if rec.kind == "initializer":
            dropped.setdefault(rec.graph, set()).add(rec.name)
        splice_at_weight(g, rec.name, rec.kind, nodes)
    graphs = dict(iter_graphs(out.graph))
    for path, names in dropped.items():  # one pass per graph: a rewrite copies the field
        g = graphs[path]
        keep = [i for i in g.initializer if i.name not in names]
        del g.initializer[:]
        g.initializer.extend(keep)
    _weights_into_model(out)
    set_opset(out, opset)
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


def _weights_into_model(model: Any) -> None:
    """Weights a model keeps on disk (:func:`qcore.model.graph.load_model` with
    ``weights_on_disk``) copied in, in their stored type: the export is a model of its own."""
    import os

    from ..io.onnx import _all_tensors, read_on_disk

    for t in _all_tensors(model):
        if t.data_location != 1:
            continue
        where = next((e.value for e in t.external_data if e.key == "location"), "")
        if not os.path.isabs(where):
            continue
        a = read_on_disk(t, t.name)
        t.raw_data = np.ascontiguousarray(a, a.dtype.newbyteorder("<")).tobytes()
        t.data_location = 0
        del t.external_data[:]


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

    opset = model_opset(export)
    from ..io.onnx import iter_graphs

    graphs = [g for _, g in iter_graphs(export.graph)]
    inits = {t.name: t for g in graphs for t in g.initializer}
    bad, seen = [], {}
    for n in (n for g in graphs for n in g.node):
        if n.op_type != "DequantizeLinear" or not all(i in inits for i in n.input):
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
