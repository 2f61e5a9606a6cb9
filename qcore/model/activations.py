"""Activation quantization: the sites, their specs, calibration and the fake-quant evaluation.

An *activation site* is a float tensor that a weight-consuming node (MatMul, Gemm, Conv, …)
reads as its data input (docs/semantics.md, Definitions). A site is quantized in one of two
ways, described by an :class:`ActivationSpec`:

- ``dynamic``: ``DynamicQuantizeLinear`` at run time (uint8, per tensor; no stored scale);
- ``static``: a ``QuantizeLinear`` → ``DequantizeLinear`` pair with a scale (and zero point)
  calibrated once on a calibration set.

**Sites** (:func:`find_sites`): input A of MatMul and Gemm, input X of Conv and ConvTranspose,
where the node's weight input (MatMul/Gemm B, Conv/ConvTranspose W) is a weight (a float
initializer, a ``Constant`` or a ``DequantizeLinear`` output) and A/X is not. A MatMul whose two
inputs are both activations (attention's Q·Kᵀ and probabilities·V) consumes no weight: it is
not a site. A tensor read by several weight consumers (the Q, K and V projections share their
input) is one site; only the weight consumers read its quantized value (a residual Add that
reads the same tensor keeps the float one, as onnxruntime's quantizers do).

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

**Calibration** (:func:`calibrate`, static): ``minmax`` maps the observed range (widened to 0)
onto the codes (integers: asymmetric with a zero point; floats: amax → the format's max);
``percentile`` clips |x| at a percentile (both tails for unsigned integers); ``mse`` searches
the clip ratio of least round-trip squared error (:func:`qcore.calibration.choose_params`);
``entropy`` picks the threshold T whose clipped, 128-level histogram has the least KL
divergence from the observed one (:func:`entropy_threshold`, onnxruntime's algorithm on a
2048-bin histogram over [−amax, amax], as TensorRT's calibrator uses) and maps [−T, T] (clipped
to the data's range) onto the codes.

**Smoothing** (:func:`smooth_model`, SmoothQuant): per input channel j of a site,
s_j = max|x_j|^α / max|W_j|^(1−α) over the site's weight consumers; the site is divided by s
(folded into the producing LayerNormalization's gamma and beta where only the weight consumers
read it, else a ``Mul`` by 1/s) and each weight's row j is multiplied by s_j, so the float
product is unchanged while activation outliers move into the weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..calibration import choose_params, params_from_range, symmetric
from ..errors import QuantizationError
from ..formats import FLOAT, get_format
from ..ops import dequantize_linear, dynamic_quantize_linear, quantize_linear
from . import require
from .fidelity import _sqnr as sqnr_db

__all__ = ["ACTIVATION_TYPES", "METHODS", "ActivationConfig", "ActivationRunner",
           "ActivationSpec", "Site", "activation_rows", "attach_activations", "calibrate",
           "entropy_threshold", "calibration_case", "evaluate", "fake_quant", "find_sites", "insert_qdq", "keep_float",
           "parse_activations", "runner_for", "site_label", "smooth_model", "smoothed_case",
           "specs_for", "Study", "study"]

#: node type -> (data input index, weight input index)
WEIGHT_CONSUMERS = {"MatMul": (0, 1), "Gemm": (0, 1), "Conv": (0, 1), "ConvTranspose": (0, 1)}
#: Static code types (each a QuantizeLinear/DequantizeLinear output onnxruntime's CPU provider runs).
ACTIVATION_TYPES = ("int8", "uint8", "int16", "uint16", "float8e4m3fn", "float8e4m3fnuz",
                    "float8e5m2", "float8e5m2fnuz")
METHODS = ("minmax", "percentile", "mse", "entropy")
#: Percentile of |x| the ``percentile`` method clips at.
PERCENTILE = 99.99
#: Histogram bins and quantized bins of the ``entropy`` method.
ENTROPY_BINS, ENTROPY_QUANTIZED_BINS = 2048, 128
_QDQ_SUFFIX = ".qdq"


@dataclass(frozen=True)
class ActivationSpec:
    """How one activation site is quantized.

    ``site`` is the tensor's name in the graph; ``mode`` is ``"dynamic"`` or ``"static"``;
    ``dtype`` is the ONNX type name of the codes (``"uint8"`` for dynamic; ``"int8"``,
    ``"uint8"``, ``"float8e4m3fn"``, ``"float8e5m2"``, … for static); ``scale`` and
    ``zero_point`` are the static pair's parameters (``None`` for dynamic; a float8 zero point
    is ``None``); ``method`` names the calibration that chose the scale.
    """

    site: str
    mode: str
    dtype: str = "uint8"
    scale: np.float32 | None = None
    zero_point: np.ndarray | None = None
    method: str | None = None

    @property
    def opset(self) -> int:
        """The oldest opset whose QuantizeLinear/DequantizeLinear express the pair."""
        if self.mode == "dynamic":
            return 11
        if self.dtype.startswith("float8"):
            return 19
        return 21 if self.dtype in ("int16", "uint16") else 13

    def zero_point_codes(self) -> np.ndarray:
        """The zero point as a scalar of the code type (0 for float8: it names the type)."""
        fmt = get_format(self.dtype)
        if self.zero_point is None:
            return np.zeros((), fmt.dtype)
        return np.asarray(self.zero_point, fmt.dtype).reshape(())

    def to_json(self) -> dict[str, Any]:
        """site, mode, dtype, scale, zero_point, method (numbers as JSON numbers)."""
        return {"site": self.site, "mode": self.mode, "dtype": self.dtype,
                "scale": None if self.scale is None else float(self.scale),
                "zero_point": None if self.zero_point is None
                else float(np.asarray(self.zero_point).astype(np.float64)),
                "method": self.method}


@dataclass(frozen=True)
class ActivationConfig:
    """What ``--activations`` asks for: mode ``none``, ``dynamic`` or ``static`` with a code
    type and a calibration method."""

    mode: str
    dtype: str | None = None
    method: str | None = None

    @property
    def name(self) -> str:
        if self.mode != "static":
            return self.mode
        return f"static:{self.dtype}@{self.method}"

    @property
    def bits(self) -> int:
        return get_format(self.dtype or "uint8").bits


def parse_activations(text: str) -> ActivationConfig:
    """``none``, ``dynamic`` or ``static[:TYPE][@METHOD]`` (TYPE default int8, METHOD default
    minmax) → an :class:`ActivationConfig`; anything else raises QuantizationError naming
    what is valid."""
    t = (text or "").strip().lower()
    valid = (f"give none, dynamic or static[:TYPE][@METHOD] with TYPE one of "
             f"{', '.join(ACTIVATION_TYPES)} and METHOD one of {', '.join(METHODS)}")
    if t in ("none", "dynamic"):
        return ActivationConfig(t, "uint8" if t == "dynamic" else None)
    head, _, method = t.partition("@")
    mode, _, dtype = head.partition(":")
    if mode != "static":
        raise QuantizationError(f"--activations {text!r}: unknown mode {mode!r}; {valid}")
    if "@" in t and not method:
        raise QuantizationError(f"--activations {text!r}: '@' needs a method; {valid}")
    if ":" in head and not dtype:
        raise QuantizationError(f"--activations {text!r}: ':' needs a type; {valid}")
    dtype = dtype or "int8"
    method = method or "minmax"
    if dtype not in ACTIVATION_TYPES:
        raise QuantizationError(f"--activations {text!r}: type {dtype!r} is not an activation "
                                f"type; {valid}")
    if method not in METHODS:
        raise QuantizationError(f"--activations {text!r}: method {method!r} is not a "
                                f"calibration method for activations; {valid}")
    return ActivationConfig("static", dtype, method)


# ---------------------------------------------------------------------------------- sites


@dataclass(frozen=True)
class Site:
    """A site tensor and the weight consumers that read it: (node's first output, input
    index, node type, weight name) each."""

    name: str
    consumers: tuple[tuple[str, int, str, str], ...]


def _weight_names(graph: Any) -> set[str]:
    onnx = require("onnx")
    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
              onnx.TensorProto.DOUBLE}
    names = {t.name for t in graph.initializer if t.data_type in floats}
    for n in graph.node:
        if n.op_type in ("Constant", "DequantizeLinear") and n.output:
            names.add(n.output[0])
    return names


def find_sites(model: Any, weights: set[str] | None = None) -> list[Site]:
    """The activation sites of ``model``'s main graph, in graph order (module doc).
    ``weights``: the names that count as weights (default: float initializers, Constant and
    DequantizeLinear outputs)."""
    g = model.graph
    w = set(weights) if weights is not None else _weight_names(g)
    found: dict[str, list[tuple[str, int, str, str]]] = {}
    for n in g.node:
        if n.domain not in ("", "ai.onnx") or n.op_type not in WEIGHT_CONSUMERS:
            continue
        data, weight = WEIGHT_CONSUMERS[n.op_type]
        if len(n.input) <= weight or not n.input[data]:
            continue
        a, b = n.input[data], n.input[weight]
        if b in w and a not in w:
            found.setdefault(a, []).append((n.output[0], data, n.op_type, b))
    return [Site(s, tuple(c)) for s, c in found.items()]


def site_label(weights: Sequence[str]) -> str:
    """What a site is, for people: ``"input of "`` and the weights that read it, in order,
    each once. Several weights sharing dotted leading and trailing parts are written once with
    the differing middle part joined by ``/`` (``a.self.query.weight``, ``a.self.key.weight`` →
    ``input of a.self.query/key.weight``), because a tensor name such as ``mul_54`` says
    nothing about where the tensor sits; other names (nothing in common, or middles of more
    than one part, where ``/`` would be ambiguous) are joined by ``, ``."""
    names = list(dict.fromkeys(weights))
    if not names:
        raise QuantizationError("site_label: weights must name at least one weight")
    if len(names) == 1:
        return f"input of {names[0]}"
    parts = [n.split(".") for n in names]
    shortest = min(len(p) for p in parts)
    lead = 0
    while lead < shortest - 1 and len({p[lead] for p in parts}) == 1:
        lead += 1
    trail = 0
    while trail < shortest - 1 - lead and len({p[-1 - trail] for p in parts}) == 1:
        trail += 1
    middles = [p[lead:len(p) - trail] for p in parts]
    if (lead == 0 and trail == 0) or any(len(m) != 1 or "/" in m[0] for m in middles):
        return "input of " + ", ".join(names)  # "/" would not say which parts differ
    joined = "/".join(m[0] for m in middles)
    return "input of " + ".".join(parts[0][:lead] + [joined] + parts[0][len(parts[0]) - trail:])


def qdq_name(site: str) -> str:
    """The name of the quantized value the weight consumers of ``site`` read."""
    return site + _QDQ_SUFFIX


def _rewire(graph: Any, sites: Sequence[Site], names: Mapping[str, str]) -> None:
    """Point each site's weight consumers at ``names[site]`` (in place)."""
    where = {(c[0], c[1]): s.name for s in sites if s.name in names for c in s.consumers}
    for n in graph.node:
        if not n.output:
            continue
        for i in range(len(n.input)):
            s = where.get((n.output[0], i))
            if s is not None and n.input[i] == s:
                n.input[i] = names[s]


def insert_qdq(model: Any, specs: Sequence[ActivationSpec]) -> Any:
    """A copy of ``model`` with each spec's site quantized as ONNX nodes: ``QuantizeLinear →
    DequantizeLinear`` (static; scale and zero point as initializers ``SITE.scale``,
    ``SITE.zero_point``) or ``DynamicQuantizeLinear → DequantizeLinear`` (dynamic), whose
    output ``SITE.qdq`` the site's weight consumers read (a name the model already uses gets
    a suffix, ``SITE.scale_1``). Nodes are topologically sorted first. The opset import is
    raised to the newest the pairs need (float8: 19, 16-bit: 21)."""
    require("onnx")  # ImportError naming the extra
    from onnx import helper, numpy_helper

    from ..io.onnx import topologically_sorted
    from .graph import fresh_name, graph_names, model_opset, set_opset

    out = topologically_sorted(model)
    g = out.graph
    sites = {s.name: s for s in find_sites(out)}
    unknown = [sp.site for sp in specs if sp.site not in sites]
    if unknown:
        raise QuantizationError(f"activation sites {unknown} are not sites of the model; its "
                                f"sites: {', '.join(sites)}")
    taken = graph_names(g)
    qnames = {sp.site: fresh_name(qdq_name(sp.site), taken) for sp in specs}
    _rewire(g, [sites[sp.site] for sp in specs], qnames)
    producer = {o: i for i, n in enumerate(g.node) for o in n.output}
    inserts: dict[int, list[Any]] = {}
    for sp in specs:
        s = sp.site
        codes, scale, zp = (fresh_name(s + suffix, taken)
                            for suffix in (".codes", ".scale", ".zero_point"))
        quantize, dequantize = (fresh_name(s + suffix, taken)
                                for suffix in (".quantize", ".dequantize"))
        if sp.mode == "dynamic":
            nodes = [helper.make_node("DynamicQuantizeLinear", [s], [codes, scale, zp],
                                      name=quantize),
                     helper.make_node("DequantizeLinear", [codes, scale, zp], [qnames[s]],
                                      name=dequantize)]
        else:
            g.initializer.append(numpy_helper.from_array(
                np.asarray(sp.scale, np.float32).reshape(()), scale))
            g.initializer.append(_zero_point_proto(sp, zp))
            nodes = [helper.make_node("QuantizeLinear", [s, scale, zp], [codes], name=quantize),
                     helper.make_node("DequantizeLinear", [codes, scale, zp], [qnames[s]],
                                      name=dequantize)]
        inserts.setdefault(producer.get(s, -1), []).extend(nodes)
    ordered = list(inserts.get(-1, []))
    for i, n in enumerate(g.node):
        ordered.append(n)
        ordered.extend(inserts.get(i, []))
    del g.node[:]
    g.node.extend(ordered)
    set_opset(out, max([model_opset(out)] + [sp.opset for sp in specs]))
    return out


def _zero_point_proto(sp: ActivationSpec, name: str) -> Any:
    from .graph import tensor_proto

    return tensor_proto(sp.zero_point_codes(), name)


# ---------------------------------------------------------------------------- fake quant


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
        _rewire(g, all_sites, self.qnames)
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
                   case.runner.output_names, getattr(case, "outputs", None))


# ---------------------------------------------------------------------------- calibration


def entropy_threshold(hist: np.ndarray, edges: np.ndarray,
                      quantized_bins: int = ENTROPY_QUANTIZED_BINS) -> tuple[float, float]:
    """(lo, hi): the clipping range of least KL divergence for a histogram symmetric about 0.

    onnxruntime's ``HistogramCollector.get_entropy_threshold``: for i from quantized_bins/2 to
    the half width, the reference p is the centre 2i+1 bins with the outer counts added to its
    end bins; q merges the centre bins into ``quantized_bins`` groups and spreads each group's
    count (integer division) over the group's non-empty bins; both are smoothed (zeros → 1e-4)
    and KL(p‖q) (float32) is taken; the edges of the least one are returned."""
    hist = np.asarray(hist, np.int64)
    edges = np.asarray(edges)
    nb = hist.size
    zero = nb // 2
    half = quantized_bins // 2
    best, best_kl = (edges[0], edges[-1]), np.inf
    cum = np.concatenate([[0], np.cumsum(hist)])
    for i in range(half, zero + 1):
        start, end = zero - i, min(zero + i + 1, nb)
        sliced = hist[start:end]
        p = sliced.copy()
        p[0] += cum[start]
        p[-1] += cum[-1] - cum[end]
        nonzero = (p != 0).astype(np.int64)
        merged = sliced.size // quantized_bins
        qb = np.add.reduceat(sliced[:quantized_bins * merged], np.arange(0, quantized_bins
                                                                          * merged, merged))
        qb[-1] += sliced[quantized_bins * merged:].sum()
        norm = np.add.reduceat(nonzero[:quantized_bins * merged],
                               np.arange(0, quantized_bins * merged, merged))
        with np.errstate(divide="ignore", invalid="ignore"):
            per = np.where(norm != 0, qb / np.where(norm != 0, norm, 1), 0)
        q = np.zeros(p.size, np.int64)
        q[:quantized_bins * merged] = np.repeat(per, merged).astype(np.int64)
        ps, qs = _smooth(p), _smooth(q)
        kl = np.inf if ps is None or qs is None else _kl(ps, qs)
        if kl < best_kl:
            best_kl, best = kl, (edges[start], edges[end])
    return float(best[0]), float(best[1])


def _smooth(p: np.ndarray, eps: float = 0.0001) -> np.ndarray | None:
    zeros = (p == 0).astype(np.float32)
    n_zeros = float(zeros.sum())
    n_nonzeros = p.size - n_zeros
    if not n_nonzeros:
        return None
    eps1 = eps * n_zeros / n_nonzeros
    return p.astype(np.float32) + eps * zeros + (-eps1) * (1 - zeros)


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    p = p.astype(np.float32)
    p = p / np.sum(p)
    q = q.astype(np.float32)
    q = q / np.sum(q)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.where(p > 0, p * np.log(p / q), 0).astype(np.float32)
    return float(np.sum(v, dtype=np.float32))


def calibrate(values: Sequence[np.ndarray], site: str, config: ActivationConfig,
              percentile: float = PERCENTILE) -> ActivationSpec:
    """The :class:`ActivationSpec` of ``site`` from its calibration values (module doc)."""
    if config.mode == "dynamic":
        return ActivationSpec(site, "dynamic", "uint8")
    if config.mode != "static":
        raise QuantizationError(f"activations {config.mode!r} have no spec to calibrate")
    fmt = get_format(config.dtype)
    flat = np.concatenate([np.ascontiguousarray(v, np.float32).reshape(-1) for v in values])
    finite = flat[np.isfinite(flat)]
    if finite.size == 0:
        raise QuantizationError(f"activation site {site!r} has no finite calibration values")
    lo, hi = np.float32(finite.min()), np.float32(finite.max())
    sfmt = get_format("float")
    method = config.method
    if method == "minmax":
        s, zp = params_from_range(fmt, np.array(lo), np.array(hi), symmetric("minmax", fmt), sfmt)
    elif method in ("percentile", "mse"):
        p = choose_params(finite, fmt.name, method=method, percentile=percentile)
        s, zp = p.scale, p.zero_point
    elif method == "entropy":
        amax = np.float32(max(abs(lo), abs(hi)))
        hist, edges = np.histogram(finite, ENTROPY_BINS, range=(-amax, amax))
        tlo, thi = entropy_threshold(hist, edges)
        tlo, thi = max(tlo, float(lo)), min(thi, float(hi))
        s, zp = params_from_range(fmt, np.array(tlo), np.array(thi),
                                  symmetric("percentile", fmt), sfmt)
    else:
        raise QuantizationError(f"method {method!r}: give one of {', '.join(METHODS)}")
    zp = None if fmt.kind == FLOAT or zp is None else np.asarray(zp, fmt.dtype).reshape(())
    return ActivationSpec(site, "static", fmt.name, np.float32(np.asarray(s).reshape(())), zp,
                          method)


def specs_for(case: Any, config: ActivationConfig, sites: Sequence[str] | None = None,
              calibration: Any = None) -> list[ActivationSpec]:
    """One spec per site (default all) for ``config``, static ones calibrated on
    ``calibration`` (a :class:`~qcore.model.fidelity.ModelCase` of the same model on other
    inputs; default the case itself)."""
    if config.mode == "none":
        return []
    run = runner_for(case)
    names = list(run.names if sites is None else sites)
    source = runner_for(calibration) if calibration is not None else run
    return [calibrate(source.site_values(s), s, config) for s in names]


def keep_float(rows: Sequence[Mapping[str, Any]], k: int) -> list[str]:
    """The ``k`` activation sites whose rows have the lowest output SQNR (most sensitive)."""
    if k < 0:
        raise QuantizationError(f"--float-activations {k}: give a count >= 0")
    act = [r for r in rows if r.get("kind") == "activation"]
    act.sort(key=lambda r: r["output_sqnr_db"])
    return [r["tensor"] for r in act[:k]]


def attach_activations(plan: Any, specs: Sequence[ActivationSpec],
                       rows: Sequence[Mapping[str, Any]], k: int, mode: str) -> None:
    """Put the activation ``specs`` on ``plan``, the ``k`` most sensitive sites
    (:func:`keep_float`) left in float; the quantized sites' noise powers (each measured alone,
    ``rows``) join the plan's additive prediction. No specs: the plan is left as it is."""
    if not specs:
        return
    keep = keep_float(rows, k)
    plan.activations = [s for s in specs if s.site not in keep]
    plan.float_activations = keep
    plan.activation_mode = mode
    plan.noise_predicted += sum(float(r["noise_power"]) for r in rows
                                if r["tensor"] not in keep)


def activation_rows(case: Any, specs: Sequence[ActivationSpec],
                    progress: Callable[[int, int, str], None] | None = None,
                    recipe: str | None = None) -> list[dict]:
    """One sensitivity row per spec: that site alone quantized (weights float); ``kind``
    ``"activation"``, ``tensor`` the site, ``recipe`` the activation mode's name,
    ``consumers`` the weights of the nodes that read it and ``label`` those as
    :func:`site_label` writes them (neither a CSV column)."""
    run = runner_for(case)
    rows = []
    for i, sp in enumerate(specs):
        if progress:
            progress(i, len(specs), sp.site)
        from .fidelity import compare

        fid = compare(case.reference, run.run([sp]), case.kind, case.runner.output_names,
                      getattr(case, "outputs", None))
        x = run.site_values(sp.site)
        xh = [fake_quant(v, sp) for v in x]
        n = int(sum(v.size for v in x))
        bits = get_format(sp.dtype).bits
        name = recipe or (sp.mode if sp.mode == "dynamic" else f"static:{sp.dtype}@{sp.method}")
        weights = [c[3] for c in run.site(sp.site).consumers]
        rows.append({"kind": "activation", "tensor": sp.site, "recipe": name,
                     "consumers": ", ".join(weights), "label": site_label(weights),
                     "bits_per_element": float(bits), "tensor_sqnr_db": _sqnr(x, xh),
                     "output_sqnr_db": fid["output_sqnr_db"], "max_abs": fid["max_abs"],
                     "bits": bits * n, "elements": n, "noise_power": fid["noise_power"],
                     "opset": sp.opset, "cosine_mean": fid.get("cosine_mean", math.nan),
                     "spearman": fid.get("spearman", math.nan), "kl": fid.get("kl", math.nan),
                     "top1": fid.get("top1", math.nan)})
    if progress:
        progress(len(specs), len(specs), "done")
    return rows


# ------------------------------------------------------------------------------ smoothing


@dataclass
class Smoothing:
    """What :func:`smooth_model` did: per site, the factors s and how the division was made
    (``"layernorm"`` or ``"mul"``); ``renamed``: site → the new site tensor (a Mul's output)."""

    alpha: float
    factors: dict[str, np.ndarray] = field(default_factory=dict)
    folded: dict[str, str] = field(default_factory=dict)
    renamed: dict[str, str] = field(default_factory=dict)


def _channel_amax(values: Sequence[np.ndarray]) -> np.ndarray:
    return np.max(np.stack([np.max(np.abs(v.reshape(-1, v.shape[-1])), axis=0) for v in values]),
                  axis=0)


def _upstream_fold(site: str, s: np.ndarray, producer: Mapping[str, Any],
                   readers: Mapping[str, list[Any]], inits: Mapping[str, Any],
                   outputs: set[str], weights: set[str]) -> list[tuple[str, np.ndarray]] | None:
    """Initializer changes that divide ``site``'s last axis by s without a new node, or None.

    Walks up from the site through values no other node reads: layout ops (Reshape,
    Transpose, Identity), a MatMul of two activations (P·V: V's columns are the output's), a
    Mul (either operand); it stops at a Mul by a constant (the constant becomes c / s), a Gemm
    or a MatMul + Add on weights (output columns and bias divided by s). The channel mapping
    through layout ops is not checked here: :func:`smoothed_case` checks it on the data."""
    from onnx import helper, numpy_helper

    c = s.size
    inv = (1.0 / s.astype(np.float64)).astype(np.float32)

    def own(name: str) -> bool:
        return name in inits and len(readers.get(name, [])) == 1

    def walk(t: str, depth: int) -> list[tuple[str, np.ndarray]] | None:
        n = producer.get(t)
        if n is None or depth > 12:
            return None
        op = n.op_type
        if op in ("Reshape", "Transpose", "Identity"):
            return step(n.input[0], depth)
        if op == "MatMul" and n.input[1] not in weights:
            return step(n.input[1], depth)
        if op == "Mul":
            for k in (0, 1):
                name = n.input[k]
                if own(name):
                    a = numpy_helper.to_array(inits[name]).astype(np.float32)
                    if a.size == 1 or a.shape == (c,):
                        return [(name, (a.reshape(-1) * inv).astype(np.float32))]
            for k in (0, 1):
                got = step(n.input[k], depth)
                if got is not None:
                    return got
            return None
        if op == "Gemm" and own(n.input[1]):
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            if attrs.get("transA", 0):
                return None
            w = numpy_helper.to_array(inits[n.input[1]]).astype(np.float32)
            if w.ndim != 2 or (w.shape[0] if attrs.get("transB", 0) else w.shape[1]) != c:
                return None
            w = w * (inv[:, None] if attrs.get("transB", 0) else inv[None, :])
            mods = [(n.input[1], w)]
            if len(n.input) > 2 and n.input[2]:
                if not own(n.input[2]):
                    return None
                b = numpy_helper.to_array(inits[n.input[2]]).astype(np.float32)
                if b.shape != (c,):
                    return None
                mods.append((n.input[2], b * inv))
            return mods
        if op == "Add":
            for k in (0, 1):
                bias, other = n.input[k], n.input[1 - k]
                m = producer.get(other)
                if (own(bias) and m is not None and m.op_type == "MatMul" and own(m.input[1])
                        and len(readers.get(other, [])) == 1 and other not in outputs):
                    b = numpy_helper.to_array(inits[bias]).astype(np.float32)
                    w = numpy_helper.to_array(inits[m.input[1]]).astype(np.float32)
                    if b.shape == (c,) and w.ndim == 2 and w.shape[1] == c:
                        return [(m.input[1], w * inv[None, :]), (bias, b * inv)]
        return None

    def step(t: str, depth: int) -> list[tuple[str, np.ndarray]] | None:
        if t in outputs or len(readers.get(t, [])) != 1:
            return None
        return walk(t, depth + 1)

    return walk(site, 0)


def smooth_model(model: Any, site_values: Mapping[str, Sequence[np.ndarray]], alpha: float,
                 no_fold: Sequence[str] = ()) -> tuple[Any, Smoothing]:
    """A SmoothQuant copy of ``model`` (module doc) for the sites in ``site_values`` (their
    float calibration values). The division by s folds into the producing LayerNormalization,
    or into constants and weights upstream (:func:`_upstream_fold`), where only the weight
    consumers read the site (and the site is not in ``no_fold``); else a Mul is inserted. Sites
    read by a Gemm with transA, a Conv, or a weight that something else also reads are left as
    they are."""
    require("onnx")  # ImportError naming the extra
    from onnx import helper, numpy_helper

    if not 0 <= float(alpha) <= 1:
        raise QuantizationError(f"--smooth {alpha}: alpha must be in [0, 1]")
    from ..io.onnx import topologically_sorted
    from .graph import fresh_name, graph_names, readers_of

    out = topologically_sorted(model)
    g = out.graph
    taken = graph_names(g)
    inits = {t.name: t for t in g.initializer}
    readers = readers_of(g)
    producer = {o: n for n in g.node for o in n.output}
    outputs = {o.name for o in g.output}
    info = Smoothing(float(alpha))
    weights = _weight_names(g)
    new_nodes: dict[str, Any] = {}
    for site in find_sites(out):
        if site.name not in site_values:
            continue
        ok, wmax, layouts = True, None, []
        consumer_outs = {c[0] for c in site.consumers}
        for out_name, _, op, wname in site.consumers:
            node = producer[out_name]
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            if op not in ("MatMul", "Gemm") or attrs.get("transA", 0) or wname not in inits \
                    or any(r.output[0] not in consumer_outs for r in readers[wname]):
                ok = False
                break
            w = numpy_helper.to_array(inits[wname]).astype(np.float32)
            trans = bool(attrs.get("transB", 0))
            if w.ndim != 2:
                ok = False
                break
            m = np.max(np.abs(w), axis=0 if trans else 1)
            wmax = m if wmax is None else np.maximum(wmax, m)
            layouts.append((wname, trans))
        if not ok or wmax is None:
            continue
        xmax = _channel_amax(site_values[site.name]).astype(np.float64)
        if xmax.shape != wmax.shape:
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            s = xmax ** alpha / wmax.astype(np.float64) ** (1 - alpha)
        s = np.where(np.isfinite(s) & (s > 0), s, 1.0)
        s = np.clip(s, 1e-5, 1e5).astype(np.float32)
        for wname, trans in layouts:
            w = numpy_helper.to_array(inits[wname]).astype(np.float32)
            w = w * (s[None, :] if trans else s[:, None])
            inits[wname].CopyFrom(numpy_helper.from_array(w.astype(np.float32), wname))
        prod = producer.get(site.name)
        only_weights = all(r.output[0] in consumer_outs for r in readers[site.name])
        upstream = None
        if only_weights and site.name not in outputs and site.name not in no_fold:
            upstream = _upstream_fold(site.name, s, producer, readers, inits, outputs, weights)
        if upstream is not None and (prod is None or prod.op_type != "LayerNormalization"):
            for name, value in upstream:
                inits[name].CopyFrom(numpy_helper.from_array(np.asarray(value, np.float32)
                                                             .reshape(value.shape), name))
            info.folded[site.name] = "upstream"
        elif (prod is not None and prod.op_type == "LayerNormalization" and only_weights
                and site.name not in outputs and len(prod.input) >= 3
                and prod.input[1] in inits and prod.input[2] in inits
                and len(readers[prod.input[1]]) == 1 and len(readers[prod.input[2]]) == 1):
            for k in (1, 2):
                t = inits[prod.input[k]]
                v = numpy_helper.to_array(t).astype(np.float32) / s
                t.CopyFrom(numpy_helper.from_array(v.astype(np.float32), t.name))
            info.folded[site.name] = "layernorm"
        else:
            new = fresh_name(site.name + ".smooth", taken)
            factor = fresh_name(new + ".factor", taken)
            g.initializer.append(numpy_helper.from_array((1.0 / s).astype(np.float32), factor))
            new_nodes[site.name] = helper.make_node("Mul", [site.name, factor], [new],
                                                    name=fresh_name(new, taken))
            _rewire(g, [site], {site.name: new})
            info.folded[site.name] = "mul"
            info.renamed[site.name] = new
        info.factors[site.name] = s
    if new_nodes:
        ordered = [new_nodes[i.name] for i in g.input if i.name in new_nodes]
        for n in g.node:
            ordered.append(n)
            ordered.extend(new_nodes[o] for o in n.output if o in new_nodes)
        del g.node[:]
        g.node.extend(ordered)
    return out, info


def smoothed_case(case: Any, alpha: float, calibration: Any = None) -> tuple[Any, Smoothing]:
    """A :class:`~qcore.model.fidelity.ModelCase` of the SmoothQuant model (channel maxima from
    ``calibration``, default the case) whose reference stays the original model's outputs."""
    from .fidelity import ModelCase

    source = runner_for(calibration if calibration is not None else case)
    values = {s: source.site_values(s) for s in source.names}
    model, info = smooth_model(case.model, values, alpha)
    upstream = [s for s, how in info.folded.items() if how == "upstream"]
    try:
        new = ModelCase(case.name, model, case.batches, case.kind, case.order, case.weights,
                        case.threads, case.outputs)
        wrong = [s for s in upstream if not _divided(runner_for(case).site_values(s),
                                                     runner_for(new).site_values(s),
                                                     info.factors[s])]
    except QuantizationError:  # a fold that broke the graph's shapes: fold none upstream
        wrong = upstream
    if wrong:  # a layout op permuted the channels: those sites take a Mul
        model, info = smooth_model(case.model, values, alpha, no_fold=wrong)
        new = ModelCase(case.name, model, case.batches, case.kind, case.order, case.weights,
                        case.threads, case.outputs)
    new.reference = case.reference
    return new, info


def calibration_case(case: Any, path: Any) -> Any:
    """A :class:`~qcore.model.fidelity.ModelCase` of ``case``'s model on the inputs of the
    ``.npz`` at ``path`` (``--calibrate``): the static scales' calibration set."""
    from .fidelity import ModelCase
    from .graph import check_inputs, read_inputs

    feeds = check_inputs(case.model, path) if isinstance(path, Mapping) else \
        read_inputs(path, case.model, "--calibrate")
    return ModelCase(case.name + ".calibration", case.model, [feeds], case.kind, None,
                     case.weights, case.threads, case.outputs)


@dataclass
class Study:
    """What a page or the command line shows for one activation mode (:func:`study`):
    the case measured (the smoothed one with ``alpha``), the specs, one sensitivity row per
    site, the fidelity with every site quantized and weights float, and with ``recipe`` on
    every weight too (None without a recipe)."""

    config: ActivationConfig
    case: Any
    specs: list[ActivationSpec]
    rows: list[dict]
    activations_only: dict[str, Any]
    with_weights: dict[str, Any] | None
    smoothing: Smoothing | None = None


def study(case: Any, activations: str | ActivationConfig, *, recipe: str | None = None,
          alpha: float | None = None, calibration: Any = None,
          progress: Callable[[int, int, str], None] | None = None) -> Study:
    """One activation mode on a case: smoothing (``alpha``), calibration (``calibration``: a
    case of the same model on other inputs, :func:`calibration_case`; default the case),
    per-site sensitivity, and the fidelity of all sites quantized (with ``recipe`` on every
    weight too, where given)."""
    config = parse_activations(activations) if isinstance(activations, str) else activations
    smoothing = None
    if alpha is not None:
        case, smoothing = smoothed_case(case, alpha, calibration)
        if calibration is not None:
            calibration = calibration_case(case, calibration.batches[0])
    if config.mode == "none":
        return Study(config, case, [], [], {}, None, smoothing)
    specs = specs_for(case, config, calibration=calibration)
    rows = activation_rows(case, specs, progress, config.name)
    alone = evaluate(case, specs)
    both = None
    if recipe is not None:
        from .fidelity import recipe_weights

        both = evaluate(case, specs, recipe_weights(case, recipe, case.weights))
    return Study(config, case, specs, rows, alone, both, smoothing)


def _divided(before: Sequence[np.ndarray], after: Sequence[np.ndarray], s: np.ndarray) -> bool:
    """Whether ``after`` is ``before`` / s along the last axis, to float rounding."""
    for b, a in zip(before, after):
        if a.shape != b.shape or a.shape[-1] != s.size:
            return False
        want = b.astype(np.float64) / s.astype(np.float64)
        tol = 1e-3 * float(np.max(np.abs(want))) if want.size else 0.0
        if not np.allclose(a, want, rtol=1e-3, atol=tol):
            return False
    return True
