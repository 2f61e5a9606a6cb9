"""Deployable graph forms: the export written the way onnxruntime turns it into integer kernels.

The plain QDQ export (:mod:`qcore.model.export`) puts a ``DequantizeLinear`` before every
planned weight; onnxruntime then dequantizes on every inference and runs the float kernel.
:func:`deployable_export` writes, per weight-consuming node (MatMul, Gemm with ``transA=0``,
``alpha=beta=1``, or Conv), the form onnxruntime 1.2x/1.3x fuses (docs/model.md, "Export
forms"): each form is a module of :mod:`qcore.model.forms`, chosen by
:func:`qcore.model.forms.form_of` from its registry.

Weights are quantized along their role: a MatMul weight is [K, N] (per-axis on axis 1, blocks
along axis 0), a Gemm weight is (N, K) with ``transB=1`` (per-axis on axis 0, blocks along 1) —
the layout the kernels expect. :data:`~qcore.model.forms.FUSED_OPS` names the kernels each form
should become; :func:`fused_op_counts` reads them from the model onnxruntime optimizes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..recipes import parse_recipe
from . import require
from .fidelity import FLOAT, Quantized, qdq
from .forms import BY_NAME, FUSED_OPS, form_of
from .forms.base import Export, Job, Writer, bias_length, qdq_along
from .forms.uses import conv_uses, node_id, weight_uses
from .graph import (
    ModelError,
    graph_names,
    initializer_arrays,
    model_opset,
    set_opset,
)
from .sites import ActivationSpec

__all__ = ["Deployable", "deployable_export", "fused_op_counts", "optimized_model"]


@dataclass
class Deployable:
    """The exported model, the form of each planned weight and the activation sites written."""

    model: Any
    forms: dict[str, str]
    quantized: dict[str, Quantized] = field(default_factory=dict)
    sites: list[str] = field(default_factory=list)

    @property
    def expected_ops(self) -> dict[str, int]:
        """How many weights each fusing form holds (``{form: count}``, forms that fuse only)."""
        out: dict[str, int] = {}
        for f in self.forms.values():
            if FUSED_OPS[f]:
                out[f] = out.get(f, 0) + 1
        return out



def deployable_export(model: Any, recipes: Mapping[str, str],
                      weights: Mapping[str, np.ndarray] | None = None,
                      activations: Mapping[str, ActivationSpec] | None = None,
                      nbits_form: str = "matmulnbits-node") -> Deployable:
    """A copy of ``model`` with each weight of ``recipes`` (name → recipe; ``float32`` left
    as is) and each activation site of ``activations`` (site → spec) written in the form
    onnxruntime fuses (module doc); ``nbits_form`` (:data:`~qcore.model.forms.NBITS_FORMS`) picks how int4/uint4
    weights blocked along K are written. Weights in the ``dq`` form — and weights not read as a
    float32 MatMul / Gemm B of the main graph (subgraphs, Constant nodes, half types, Conv,
    Gather, …) — take the plain export (:func:`qcore.model.export.export_plan`), which puts
    each where it lives."""
    onnx = require("onnx")
    from onnx import helper

    planned = {t: r for t, r in recipes.items() if r != FLOAT}
    acts = dict(activations or {})
    uses = weight_uses(model)
    convs = conv_uses(model)
    forms: dict[str, str] = {}
    rest = {}
    for t, r in planned.items():
        use = uses.get(t) or convs.get(t)
        spec = None
        if use is not None:
            node = next(n for k, n in enumerate(model.graph.node) if node_id(n, k) == use.node)
            spec = acts.get(node.input[0])
        form = form_of(r, spec, nbits_form) if use is not None else "dq"
        if use is not None and not _takes(BY_NAME[form], model, node, acts):
            form = "dq"  # e.g. a Conv fuses only in the static form, followed by a quantizer
        if form == "dq":  # the plain export puts it where it lives (qcore.model.export)
            rest[t], forms[t] = r, "dq"
    plain: dict[str, Quantized] = {}
    if rest:
        from ..io.onnx import find_weights
        from .export import export_plan
        from .plan import Plan

        records = {rec.key: rec for rec in find_weights(model)}
        given = weights if weights is not None else initializer_arrays(model, list(rest))
        for t, r in rest.items():
            if t not in records or t not in given:
                raise ModelError(f"plan names tensor {t!r}, which is not a float weight of "
                                 "the model")
            plain[t] = qdq(given[t], r, records[t].role)
        model = export_plan(model, Plan(0.0, rest, 0, 1, 0.0, 0.0), given, plain)
        planned = {t: r for t, r in planned.items() if t not in rest}
        uses = weight_uses(model)  # the plain export reordered the nodes
        convs = conv_uses(model)
    uses = {**uses, **{t: u for t, u in convs.items() if t in planned}}
    if weights is None:
        weights = initializer_arrays(model, list(planned)) if planned else {}
    weights = dict(weights)
    for t in planned:
        if t not in weights:
            raise ModelError(f"plan names tensor {t!r}, which is not a float weight of the model")
    g0 = model.graph
    nodes = list(g0.node)
    ids = [node_id(n, k) for k, n in enumerate(nodes)]
    ex = Export(model, nodes, ids, acts, Writer(helper, graph_names(model.graph)), set(planned))
    ex.opset_needs.append(model_opset(model))
    by_id = ex.by_id
    quantized: dict[str, Quantized] = dict(plain)
    for t, recipe in planned.items():
        r = parse_recipe(recipe)
        use = uses[t]
        x = np.asarray(weights[t], np.float32)
        node = by_id[use.node]
        site = node.input[0]
        spec = acts.get(site)
        form = BY_NAME[form_of(r, spec, nbits_form)]
        n_bias = bias_length(model, use.bias)
        if form.demote is not None and (other := form.demote(r, use, x, n_bias)) is not None:
            form = BY_NAME[other]
        forms[t] = form.name
        transpose = form.kn and not use.kn
        xk = np.ascontiguousarray(x.T) if transpose else x
        kn = use.kn or transpose
        q = qdq_along(xk, r, 1 if kn else 0, 0 if kn else 1)
        quantized[t] = q
        if transpose:  # the Gemm reads the [K, N] weight: transB=0
            ex.attr_changes.setdefault(use.node, {})["transB"] = 0
        form.write(ex, Job(t, xk, q, use, node, site, spec, n_bias))

    # activation sites of nodes whose weight stays float (or is not planned): plain QDQ
    done_sites = {by_id[uses[t].node].input[0] for t in planned if t in uses}
    for k, n in enumerate(nodes):
        if n.op_type not in ("MatMul", "Gemm", "Conv") or not n.input:
            continue
        site = n.input[0]
        if site in acts and site not in done_sites and node_id(n, k) not in ex.input_changes:
            ex.input_changes.setdefault(node_id(n, k), {})[0] = ex.activation_qdq(
                site, acts[site], node_id(n, k))

    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    keep = [t for t in g.initializer if t.name not in ex.drop_inits]
    del g.initializer[:]
    g.initializer.extend(keep + ex.w.inits)
    new_nodes = []
    for nid, n in zip(ids, nodes):
        new_nodes.extend(ex.w.nodes_before.get(nid, []))
        if nid in ex.replaced:
            new_nodes.extend(ex.replaced[nid])
            continue
        n2 = type(n)()
        n2.CopyFrom(n)
        for idx, name in ex.input_changes.get(nid, {}).items():
            n2.input[idx] = name
        for a in n2.attribute:
            if a.name in ex.attr_changes.get(nid, {}):
                a.i = ex.attr_changes[nid][a.name]
        for name, v in ex.attr_changes.get(nid, {}).items():
            if not any(a.name == name for a in n2.attribute):
                n2.attribute.append(helper.make_attribute(name, v))
        new_nodes.append(n2)
    del g.node[:]
    g.node.extend(_toposort(new_nodes, {i.name for i in g.input} | {t.name for t in
                                                                      g.initializer}))
    opset = max(ex.opset_needs)
    set_opset(out, opset)
    # an IR < 4 model lists its initializers as graph inputs (the rule then); the export's IR
    # has no such rule: none is an input, and a ex.replaced weight is no tensor at all
    listed = ex.drop_inits | ({t.name for t in g.initializer}
                           if model.ir_version < 4 <= out.ir_version else set())
    inputs = [i for i in g.input if i.name not in listed]
    del g.input[:]
    g.input.extend(inputs)
    if ex.uses_ms and not any(o.domain == "com.microsoft" for o in out.opset_import):
        out.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    try:
        onnx.checker.check_model(out)
    except Exception as exc:  # noqa: BLE001
        raise ModelError(f"the deployable export fails onnx.checker at opset {opset}: "
                         f"{str(exc).splitlines()[0]}") from None
    return Deployable(out, forms, quantized, sorted({s for s in acts if s in done_sites}
                                                    | {s for s, _ in ex.static_sites}
                                                    | set(ex.dynamic_sites)))


def _toposort(nodes: list[Any], available: set[str]) -> list[Any]:
    """The nodes in an order where each input is produced before it is read (stable)."""
    have = set(available) | {""}
    pending = list(nodes)
    out: list[Any] = []
    while pending:
        rest = []
        for n in pending:
            if all(i in have for i in n.input):
                out.append(n)
                have.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):  # inputs from outside (subgraph captures): keep order
            out.extend(rest)
            break
        pending = rest
    return out


# ---------------------------------------------------------------------------------------------
# what onnxruntime makes of it


def optimized_model(model: Any, level: str = "all") -> Any:
    """The model as onnxruntime optimizes it for the CPU (``level``: ``extended`` or ``all``),
    read back from ``SessionOptions.optimized_model_filepath``."""
    import os
    import tempfile

    onnx = require("onnx")
    ort = require("onnxruntime")
    so = ort.SessionOptions()
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if level == "all"
                                   else ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED)
    so.log_severity_level = 3
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "optimized.onnx")
        so.optimized_model_filepath = path
        ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return onnx.load(path)


def fused_op_counts(model: Any, level: str = "all") -> dict[str, int]:
    """Node counts by op type of onnxruntime's optimized model."""
    counts: dict[str, int] = {}
    for n in optimized_model(model, level).graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return counts


def _takes(form: Any, model: Any, node: Any, acts: Mapping[str, ActivationSpec]) -> bool:
    """Whether ``form`` writes ``node`` (one of its ops, and its further test, if any)."""
    return node.op_type in form.ops and (form.where is None or form.where(model, node, acts))
