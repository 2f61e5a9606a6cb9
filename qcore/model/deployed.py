"""The deployed figure (DESIGN.md §10): an export as users run it.

:func:`deployed_session` is the session users get — onnxruntime with its default graph
optimizations (the fused kernels round differently from the unfused graph, and the optimizer
rewrites some patterns), the thread count asked, intra-op spinning off (qcore's kernels and
onnxruntime take turns here). :func:`run_deployed` runs an exported model there on the
case's inputs and measures its outputs against the float model's by fidelity's definitions
(:func:`qcore.model.fidelity.compare`: per-output SQNR and max |Δ| for float outputs,
agreement for integer and boolean ones, the model figure over the chosen float outputs).
:func:`check_deployed` compares that figure with the one the plan states (the fake-quant
evaluation) and names the gap when it exceeds :data:`DEPLOY_TOL_DB`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import require

__all__ = ["DEPLOY_TOL_DB", "Deployed", "check_deployed", "deploy_case", "deploy_gap",
           "deployed_session", "guard_float8_relu", "run_deployed", "written_bits"]

#: The most the deployed figure and the stated one may differ, in dB (DESIGN.md §10).
DEPLOY_TOL_DB = 0.05


@dataclass
class Deployed:
    """An export's outputs as deployed and their measures against the float outputs."""

    values: list[np.ndarray]  # the outputs, in the order of ``names``
    names: list[str]
    measured: dict[str, Any]  # fidelity.compare's result

    @property
    def output_sqnr_db(self) -> float:
        """The model figure (the mean noise ratio over the chosen float outputs, in dB)."""
        return float(self.measured["output_sqnr_db"])

    @property
    def outputs(self) -> dict[str, dict[str, float]]:
        """Per output: ``sqnr_db`` and ``max_abs`` (float) or ``agreement`` (integer, bool)."""
        return self.measured["outputs"]


def deployed_session(model: Any, threads: int = 0) -> Any:
    """An onnxruntime session of ``model`` (a proto or a path) as users run it: default graph
    optimizations, ``threads`` intra-op threads (0: onnxruntime's default), spinning off."""
    ort = require("onnxruntime")
    so = ort.SessionOptions()
    so.intra_op_num_threads = int(threads)
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.log_severity_level = 3
    src = model if isinstance(model, (str, bytes)) else model.SerializeToString()
    return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])


def run_deployed(model: Any, feeds: Mapping[str, np.ndarray] | Sequence[Mapping[str, Any]],
                 reference: Sequence[np.ndarray], *, names: Sequence[str] | None = None,
                 outputs: Sequence[str] | None = None, threads: int = 0,
                 order: np.ndarray | None = None, kind: str = "generic",
                 views: Any = None) -> Deployed:
    """Run ``model`` in :func:`deployed_session` on ``feeds`` (one feed dict, or batches whose
    outputs are concatenated along axis 0 and put back in input order by ``order``) and
    measure its outputs ``names`` (default all, in the session's order) against
    ``reference`` (the float model's, same order) by :func:`qcore.model.fidelity.compare`;
    ``outputs``: the outputs the model figure averages over (default every float one);
    ``views``: the ``--slice`` outputs and ``--metric`` (:mod:`qcore.model.views`)."""
    from .fidelity import compare

    session = deployed_session(model, threads)
    names = list(names) if names is not None else [o.name for o in session.get_outputs()]
    batches = [feeds] if isinstance(feeds, Mapping) else list(feeds)
    per = [session.run(names, dict(b)) for b in batches]
    values = per[0] if len(per) == 1 else [np.concatenate([p[k] for p in per])
                                           for k in range(len(names))]
    if order is not None:
        restored = []
        for v in values:
            r = np.empty_like(v)
            r[order] = v
            restored.append(r)
        values = restored
    measured = compare(list(reference), values, kind, names,
                       list(outputs) if outputs else None, views)
    return Deployed(values, names, measured)


def deploy_case(case: Any, model: Any) -> dict[str, Any]:
    """``model`` (an export of ``case``'s model) run as deployed on the case's inputs — over
    its steps, feeding its own state, for a fed-back case — and measured against the case's
    float outputs (:func:`qcore.model.fidelity.compare`): the plan JSON's ``deploy``."""
    from .fidelity import compare

    if hasattr(case, "run_model"):
        values = case.run_model(model, deployed=True)
        measured = compare(case.reference, values, case.kind, case.runner.output_names,
                           case.outputs, getattr(case, "views", None))
    else:
        measured = run_deployed(model, case.batches, case.reference,
                                names=case.runner.output_names, outputs=case.outputs,
                                threads=case.threads, order=case.order,
                                kind=case.kind, views=getattr(case, "views", None)).measured
    out = {"output_sqnr_db": measured["output_sqnr_db"], "max_abs": measured["max_abs"],
           "outputs": measured["outputs"], "threads": case.threads,
           "session": "onnxruntime, default graph optimizations, spinning off"}
    for k in ("agreement", "metric"):
        if k in measured:
            out[k] = measured[k]
    return out


def deploy_gap(stated: Mapping[str, Any], deployed: Mapping[str, Any],
               forms: Mapping[str, int] | None = None) -> str | None:
    """Why the deployed figures (:func:`deploy_case`) are not the ``stated`` ones (a plan's
    ``measured``), or None: the model figure to :data:`DEPLOY_TOL_DB` dB, the decisions'
    agreement exactly."""
    s, d = float(stated.get("output_sqnr_db", math.nan)), float(deployed["output_sqnr_db"])
    why = None if math.isnan(s) and math.isnan(d) else check_deployed(s, d)
    if why is None and stated.get("agreement") != deployed.get("agreement"):
        why = (f"as deployed the decisions agree {deployed.get('agreement')}, not the "
               f"{stated.get('agreement')} the plan states")
    if why is not None and forms:
        why += "; forms: " + ", ".join(f"{n} {c}" for n, c in sorted(forms.items()))
    if why is not None and forms and (forms.get("static") or forms.get("dynamic")):
        why += (" (its W8A8 layers run in onnxruntime's integer kernels, which on x86 without "
                "VNNI sum u8 x s8 products in pairs in int16: full-range 8-bit weights "
                "saturate there; keep the activations float, or run on a CPU with VNNI)")
    return why


def written_bits(model: Any, weight: str) -> int:
    """The bits an export stores for ``weight``: its initializers named ``WEIGHT.*`` (codes,
    scales, zero points, MatMulNBits blobs; a Reshape's int64 shape is no part of it), each
    element at its type's width (the format registry's)."""
    import math as _math

    from ..formats import get_format

    total = 0
    for t in model.graph.initializer:
        if not t.name.startswith(weight + ".") or t.data_type == 7:  # 7: int64 shapes
            continue
        total += _math.prod(t.dims) * get_format(t.data_type).bits
    return total


def check_deployed(stated: float, deployed: float, tol: float = DEPLOY_TOL_DB) -> str | None:
    """None when the deployed figure equals the stated one to ``tol`` dB (both infinite and
    equal counts as equal), else why not, in words."""
    if stated == deployed:
        return None
    if math.isfinite(stated) and math.isfinite(deployed) and abs(stated - deployed) <= tol:
        return None
    return (f"as deployed (onnxruntime, default optimizations) the output SQNR is "
            f"{deployed:.2f} dB, not the {stated:.2f} dB the plan states")


# ---------------------------------------------------------------------------------------------
# forms the optimizer cannot change

#: ONNX element types of the float8 formats (their zero point is 0.0, no lowest code).
_FLOAT8_TYPES = frozenset({17, 18, 19, 20})


def guard_float8_relu(model: Any) -> Any:
    """``model`` (in place, and returned) with every float8 ``QuantizeLinear`` that reads a
    ``Relu``'s output moved in front of it: the quantizer reads the Relu's input and each of
    its ``DequantizeLinear`` readers is followed by a new Relu. onnxruntime's optimizer drops a
    Relu directly before a QuantizeLinear (exact for integer codes whose zero point is the
    lowest code: the quantizer clamps there), which for float8 — codes on both sides of 0 —
    lets negative values through. Relu commutes with a float8 quantizer of zero point 0
    (rounding is monotone and odd, Q(0) = 0), so the outputs are unchanged."""
    from ..io.onnx import iter_graphs
    from .graph import fresh_name, graph_names

    helper = require("onnx.helper")
    taken = graph_names(model.graph)
    for _, g in iter_graphs(model.graph):
        inits = {t.name: t for t in g.initializer}
        producer = {o: n for n in g.node for o in n.output}
        nodes = list(g.node)
        readers: dict[str, list[Any]] = {}
        for n in nodes:
            for i in n.input:
                readers.setdefault(i, []).append(n)
        outputs = {o.name for o in g.output}
        changed = False
        new_nodes: list[Any] = []
        for n in nodes:
            new_nodes.append(n)
            if n.op_type != "QuantizeLinear" or len(n.input) < 3:
                continue
            zp = inits.get(n.input[2])
            relu = producer.get(n.input[0])
            if zp is None or zp.data_type not in _FLOAT8_TYPES or relu is None \
                    or relu.op_type != "Relu":
                continue
            dqs = readers.get(n.output[0], [])
            if n.output[0] in outputs or not dqs or any(r.op_type != "DequantizeLinear"
                                                        for r in dqs):
                continue
            n.input[0] = relu.input[0]
            for dq in dqs:
                before = fresh_name(dq.output[0] + ".before_relu", taken)
                after = dq.output[0]
                dq.output[0] = before
                relu_after = helper.make_node("Relu", [before], [after],
                                              name=fresh_name(after + ".relu", taken))
                _insert_after(nodes, new_nodes, dq, relu_after)
            changed = True
        if changed:
            del g.node[:]
            g.node.extend(new_nodes)
    return model


def _insert_after(nodes: list[Any], new_nodes: list[Any], dq: Any, relu: Any) -> None:
    """Queue ``relu`` right after ``dq`` (already placed, or placed when reached)."""
    for k, n in enumerate(new_nodes):
        if n is dq:
            new_nodes.insert(k + 1, relu)
            return
    k = next(k for k, n in enumerate(nodes) if n is dq)
    nodes.insert(k + 1, relu)
