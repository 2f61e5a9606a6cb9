"""The staged runner: a model cut at its activation sites, each site fake-quantized by qcore's
operators between the stages.

**Evaluation** (:class:`ActivationRunner`): the graph is cut at the sites. Every weight consumer
of site s reads a new value ``s.qdq``; a value's *level* is the largest level of what its node
reads (graph inputs and weights: 0), and ``s.qdq`` is one level above s. The nodes of each level
form one sub-model (an onnxruntime session, made once); the stages run in level order, and
after each stage the sites it made pass through qcore's operators (``DequantizeLinear(
QuantizeLinear(s))`` or ``DequantizeLinear(DynamicQuantizeLinear(s))``) into ``s.qdq``. Every
node runs once per evaluation, on the values the QDQ model (:func:`insert_qdq`) computes, in the
same session options (no graph optimisation), so the two agree bit for bit. The float run keeps
every stage's outputs; an evaluation that changes only sites starts at the first stage that
reads a changed value. The float run's site values are the calibration data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import QuantizationError
from ..ops import dequantize_linear, dynamic_quantize_linear, quantize_linear
from . import require
from .fidelity import _sqnr as sqnr_db
from .sites import ActivationSpec, Site, find_sites, qdq_name, rewire

__all__ = ["ActivationRunner", "evaluate", "fake_quant", "runner_for"]


def fake_quant(x: np.ndarray, spec: ActivationSpec) -> np.ndarray:
    """``DequantizeLinear(QuantizeLinear(x))`` (static) or ``DequantizeLinear(
    DynamicQuantizeLinear(x))`` (dynamic) by qcore's operators, float32."""
    x = np.ascontiguousarray(x, np.float32)
    if spec.mode == "dynamic":
        y, s, zp = dynamic_quantize_linear(x)
        return dequantize_linear(y, s, zp, opset=19)
    s = np.asarray(spec.scale, np.float32).reshape(())
    zp = spec.zero_point_codes()
    y = quantize_linear(x, s, zp, opset=max(spec.opset, 19))
    return dequantize_linear(y, s, zp, opset=max(spec.opset, 19))


def _sqnr(x: list[np.ndarray], xh: list[np.ndarray]) -> float:
    sig = sum(float(np.sum(np.asarray(a, np.float64) ** 2)) for a in x)
    err = sum(float(np.sum((np.asarray(a, np.float64) - b) ** 2)) for a, b in zip(x, xh))
    return sqnr_db(sig, err)


class ActivationRunner:
    """A model cut at its activation sites, run stage by stage (module doc).

    ``case``: a :class:`qcore.model.fidelity.ModelCase` (its runner's weights-as-inputs model
    and its batches); ``sites``: the sites to cut at (default: all of :func:`find_sites`).
    """

    def __init__(self, case: Any, sites: Sequence[str] | None = None) -> None:
        onnx = require("onnx")
        helper = require("onnx.helper")
        self.case = case
        runner = case.runner
        all_sites = find_sites(case.model)
        if sites is not None:
            by = {s.name: s for s in all_sites}
            missing = [s for s in sites if s not in by]
            if missing:
                raise QuantizationError(f"activation sites {missing} are not sites of the model;"
                                        f" its sites: {', '.join(by)}")
            all_sites = [by[s] for s in sites]
        model = onnx.ModelProto()
        model.CopyFrom(runner.exposed)
        g = model.graph
        inferred = onnx.shape_inference.infer_shapes(model)
        types = {v.name: v.type.tensor_type.elem_type
                 for v in list(inferred.graph.value_info) + list(g.input) + list(g.output)}
        types.update({t.name: t.data_type for t in g.initializer})
        other = [s.name for s in all_sites if types.get(s.name) != onnx.TensorProto.FLOAT]
        if other and sites is not None:
            raise QuantizationError(f"activation sites {other} are not float32 (or of a type "
                                    f"shape inference cannot tell); float32 sites are quantized")
        all_sites = [s for s in all_sites if s.name not in other]  # float16 sites stay float
        self.sites = all_sites
        self.names = [s.name for s in all_sites]
        from .graph import fresh_name, graph_names

        taken = graph_names(g)
        self.qnames = {s: fresh_name(qdq_name(s), taken) for s in self.names}
        rewire(g, all_sites, self.qnames)
        inits = {t.name: t for t in g.initializer}
        level: dict[str, int] = {i.name: 0 for i in g.input}
        level.update({n: 0 for n in inits})
        qdq_of = {q: s for s, q in self.qnames.items()}
        node_level: list[int] = []
        reads: list[list[str]] = []
        for n in g.node:
            names = [i for i in n.input if i] + _implicit_inputs(n, level)
            lv = 0
            for i in names:
                if i in qdq_of:
                    lv = max(lv, level[qdq_of[i]] + 1)
                elif i in level:
                    lv = max(lv, level[i])
            for o in n.output:
                if o:
                    level[o] = lv
            node_level.append(lv)
            reads.append(names)
        self.site_level = {s: level[s] for s in self.names}
        top = max(node_level + [0])
        self.levels = list(range(top + 1))
        produced_at = {o: node_level[k] for k, n in enumerate(g.node) for o in n.output if o}
        later: set[str] = set()  # values read by a stage other than the one that makes them
        for k, names in enumerate(reads):
            for i in names:
                if i in produced_at and produced_at[i] != node_level[k]:
                    later.add(i)
        outputs = [o.name for o in g.output]
        self.output_names = outputs
        self.stages: dict[int, tuple[Any, list[str], list[str]]] = {}
        for lv in self.levels:
            nodes = [n for k, n in enumerate(g.node) if node_level[k] == lv]
            if not nodes:
                continue
            made = {o for n in nodes for o in n.output if o}
            needed = []
            for k, lv_k in enumerate(node_level):
                if lv_k == lv:
                    needed.extend(i for i in reads[k] if i not in made and i not in inits)
            ins = list(dict.fromkeys(needed))
            outs = [o for n in nodes for o in n.output
                    if o and (o in later or o in outputs or o in self.site_level)]
            outs = list(dict.fromkeys(outs))
            untyped = [v for v in ins + outs if not types.get(qdq_of.get(v, v))]
            if untyped:
                raise QuantizationError(f"activation evaluation needs the element types of "
                                        f"{untyped[:3]}, which shape inference cannot tell")
            used = {i for k, n in enumerate(g.node) if node_level[k] == lv for i in reads[k]}
            graph = helper.make_graph(
                nodes, f"{g.name}.stage{lv}",
                [helper.make_tensor_value_info(v, types[qdq_of.get(v, v)], None) for v in ins],
                [helper.make_tensor_value_info(v, types[v], None) for v in outs],
                initializer=[t for t in g.initializer if t.name in used])
            sub = helper.make_model(graph, opset_imports=list(model.opset_import))
            sub.ir_version = model.ir_version
            self.stages[lv] = (sub, ins, outs)
        self.sessions: dict[int, Any] = {}
        self.float_values = [self._run_all(b, None, {}, None) for b in case.batches]

    def _session(self, lv: int) -> Any:
        from .graph import make_session

        if lv not in self.sessions:
            self.sessions[lv] = make_session(self.stages[lv][0], self.case.threads)
        return self.sessions[lv]

    def _run_all(self, batch: Mapping[str, np.ndarray], replace: Mapping[str, np.ndarray] | None,
                 specs: Mapping[str, ActivationSpec], cached: dict | None) -> dict:
        values: dict[str, np.ndarray] = {}
        start = 0
        if cached is not None and not replace:
            quantized = [self.site_level[s] for s in specs]
            start = min(quantized) + 1 if quantized else len(self.levels)
            values.update(cached)
        else:
            values.update(batch)
            values.update(self.case.runner.weight_feeds(replace))
        by_level: dict[int, list[str]] = {}
        for s, lv in self.site_level.items():
            by_level.setdefault(lv, []).append(s)
        for lv in self.levels:
            if lv < start - 1:
                continue
            if lv >= start and lv in self.stages:
                _, ins, outs = self.stages[lv]
                try:
                    got = self._session(lv).run(outs, {v: values[v] for v in ins})
                except Exception as exc:  # noqa: BLE001 - onnxruntime's own exception types
                    msg = str(exc).strip().splitlines()
                    raise QuantizationError("onnxruntime cannot run a stage of the model: "
                                            + (msg[-1] if msg else type(exc).__name__)) from None
                values.update(zip(outs, got))
            for s in by_level.get(lv, []):
                values[self.qnames[s]] = fake_quant(values[s], specs[s]) if s in specs else values[s]
        return values

    def run(self, specs: Sequence[ActivationSpec] | Mapping[str, ActivationSpec] = (),
            replace: Mapping[str, np.ndarray] | None = None) -> list[np.ndarray]:
        """The model's outputs (all batches, in input order; with state fed back, every step,
        stacked as :meth:`qcore.model.feedback.FedBackCase.run` does) with ``specs``' sites and
        ``replace``'s weights fake-quantized."""
        specs = dict(specs) if isinstance(specs, Mapping) else {sp.site: sp for sp in specs}
        unknown = [s for s in specs if s not in self.site_level]
        if unknown:
            raise QuantizationError(f"activation sites {unknown} are not sites of this run; "
                                    f"its sites: {', '.join(self.names)}")
        names = self.case.runner.output_names
        if hasattr(self.case, "run_steps"):  # state fed back: every step, each its own state
            from .feedback import _stack

            return _stack(self.case._steps_of(
                lambda f, r: [self._run_all(f, r, specs, None)[o] for o in names], replace))
        per = []
        for b, cached in zip(self.case.batches, self.float_values):
            v = self._run_all(b, replace, specs, cached)
            per.append([v[o] for o in names])
        return self.case._combine(per)

    def site(self, name: str) -> Site:
        """The :class:`Site` called ``name``."""
        return self.sites[self.names.index(name)]

    def site_values(self, site: str) -> list[np.ndarray]:
        """The float values of ``site``, one array per batch."""
        return [v[site] for v in self.float_values]


def _implicit_inputs(node: Any, known: Mapping[str, int]) -> list[str]:
    """Outer-scope names a node's subgraphs (If/Loop/Scan bodies) read."""
    onnx = require("onnx")
    names: list[str] = []

    def walk_subgraphs(n: Any) -> None:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                walk(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sg in a.graphs:
                    walk(sg)

    def walk(graph: Any) -> None:
        for n in graph.node:
            names.extend(i for i in n.input if i in known)
            walk_subgraphs(n)

    walk_subgraphs(node)
    return list(dict.fromkeys(names))


def runner_for(case: Any) -> ActivationRunner:
    """The case's :class:`ActivationRunner` over all its sites (made once, kept on the case)."""
    r = getattr(case, "_activation_runner", None)
    if r is None:
        r = ActivationRunner(case)
        case._activation_runner = r
    return r


def evaluate(case: Any, specs: Sequence[ActivationSpec],
             replace: Mapping[str, np.ndarray] | None = None) -> dict[str, float]:
    """The case's fidelity (:func:`qcore.model.fidelity.compare`) with ``specs``' sites and
    ``replace``'s weights fake-quantized."""
    from .fidelity import compare

    return compare(case.reference, runner_for(case).run(specs, replace), case.kind,
                   case.runner.output_names, getattr(case, "outputs", None),
                   getattr(case, "views", None))
