"""What a layer costs in each form, measured on this CPU in the installed onnxruntime.

:func:`layer_costs` times, per layer of a prepared model (:mod:`qcore.model.forms.layers`),
a one-layer model in every form the layer can take — the layer's node at the user's input
shape (the shape its input has on the user's inputs) with its weight and bias, in float, and
in each integer form with the Q/DQ pairs or the DynamicQuantizeLinear that form writes around
it — at the user's thread count, the models taking turns (the sessions of
:func:`qcore.model.latency.deploy_session`: default optimizations, spinning off), and keeps
the fastest pass (on a shared host the pass that got the core: the layer's own cost, where
the median carries the neighbours' load). Results are cached for the process per (op, attributes, weight shape,
input shape, form, threads, onnxruntime version): the same layer shape is timed once.

:func:`timed` is the whole-model measurement every stated latency comes from: the models take
turns pass by pass, and each gets its median, 10th and 90th percentile milliseconds; the load
average at the start and the end is recorded beside them (the host is shared).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from . import require
from .latency import deploy_session

__all__ = ["in_chain_costs", "layer_costs", "layer_model", "load_average", "owner", "profile_ms",
           "timed"]

_CACHE: dict[tuple, float] = {}


def load_average() -> float | None:
    """The 1-minute load average (None where the platform has none)."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return None


def timed(models: Mapping[str, Any], batches: Sequence[Mapping[str, np.ndarray]],
          threads: int = 1, repeats: int = 15, warmup: int = 2,
          per_model_batches: bool = False) -> dict[str, Any]:
    """Per model key: ``ms`` (median pass over ``batches``), ``p10``, ``p90``, ``min``; and
    ``load`` [before, after] (module doc). ``per_model_batches``: ``batches[i]`` is the one
    feed of the i-th model."""
    load0 = load_average()
    sessions = {k: deploy_session(m, threads) for k, m in models.items()}
    times: dict[str, list[float]] = {k: [] for k in sessions}
    feeds = {k: ([batches[i]] if per_model_batches else batches)
             for i, k in enumerate(sessions)}
    for k, s in sessions.items():
        for _ in range(warmup):
            for b in feeds[k]:
                s.run(None, dict(b))
    for _ in range(max(1, int(repeats))):
        for k, s in sessions.items():
            t0 = time.perf_counter()
            for b in feeds[k]:
                s.run(None, dict(b))
            times[k].append((time.perf_counter() - t0) * 1000.0)
    out: dict[str, Any] = {}
    for k, v in times.items():
        q = np.percentile(v, [10, 90])
        out[k] = {"ms": float(statistics.median(v)), "p10": float(q[0]), "p90": float(q[1]),
                  "min": float(min(v)), "passes": len(v), "runs": list(v)}
    out["load"] = [load0, load_average()]
    return out


def layer_model(prepared: Any, layer: Any, input_shape: Sequence[int], form: str,
                specs: Mapping[str, Any] | None = None) -> Any:
    """A model of ``layer`` alone in ``form``: input ``layer.data`` of ``input_shape``, output
    ``layer.output``. A ``qlinear`` layer reads and writes uint8 codes as it does inside a
    chain (input ``DATA.codes_in``, output ``OUTPUT.q``; its pairs from ``specs``, scale 1/64
    where a spec is missing), so the one-layer model times the fused kernel, not the
    quantizers at the chain's ends."""
    onnx = require("onnx")
    from .forms.layered import export_forms
    from .sites import ActivationSpec

    g = prepared.graph
    node = next(n for n in g.node if n.name == layer.name)
    keep = {layer.weight} | ({layer.bias} if layer.bias else set())
    inits = [t for t in g.initializer if t.name in keep]
    for t in node.input:  # other constant inputs (a Gather's indices are data)
        if t not in keep:
            inits += [x for x in g.initializer if x.name == t]
    x = onnx.helper.make_tensor_value_info(layer.data, onnx.TensorProto.FLOAT
                                           if layer.op != "Gather" else onnx.TensorProto.INT64,
                                           list(input_shape))
    y = onnx.helper.make_tensor_value_info(layer.output, onnx.TensorProto.FLOAT, None)
    graph = onnx.helper.make_graph([node], layer.name, [x], [y], inits)
    m = onnx.helper.make_model(graph, opset_imports=list(prepared.opset_import))
    m.ir_version = prepared.ir_version
    if form == "float":
        return m
    if form != "qlinear":
        return export_forms(m, {layer.name: form}, {})
    # in a chain the layer reads and writes uint8 codes: the one-layer model does too
    sp = dict(specs or {})
    for t in (layer.data, layer.output):
        if t not in sp:
            sp[t] = ActivationSpec(t, "static", "uint8", np.float32(1 / 64),
                                   np.array(128, np.uint8), "minmax")
    m.graph.output[0].name = layer.output + ".out"
    m.graph.node.append(onnx.helper.make_node("Identity", [layer.output],
                                              [layer.output + ".out"]))
    e = export_forms(m, {layer.name: form}, {t: sp[t] for t in (layer.data, layer.output)})
    g2 = e.graph
    nodes = [n for n in g2.node if n.name not in (layer.data + ".Q", layer.output + ".DQ")
             and n.op_type != "Identity"]
    for n in nodes:
        if n.name == layer.data + ".DQ":
            n.input[0] = layer.data + ".codes_in"
    del g2.node[:]
    g2.node.extend(nodes)
    del g2.input[:]
    g2.input.append(onnx.helper.make_tensor_value_info(layer.data + ".codes_in",
                                                       onnx.TensorProto.UINT8,
                                                       list(input_shape)))
    del g2.output[:]
    g2.output.append(onnx.helper.make_tensor_value_info(layer.output + ".q",
                                                        onnx.TensorProto.UINT8, None))
    return e


def _key(layer: Any, node: Any, input_shape: Sequence[int], form: str, threads: int) -> tuple:
    ort = require("onnxruntime")
    attrs = tuple(sorted((a.name, str(a)) for a in node.attribute))
    return (layer.op, attrs, tuple(layer.shape), tuple(input_shape), bool(layer.bias), form,
            int(threads), ort.__version__)


def layer_costs(prepared: Any, layers: Sequence[Any], shapes: Mapping[str, Sequence[int]],
                threads: int = 1, specs: Mapping[str, Any] | None = None, repeats: int = 15
                ) -> dict[str, dict[str, float]]:
    """``{layer: {form: ms}}`` for every form of every layer (module doc); ``shapes``: each
    layer input's shape on the user's inputs."""
    nodes = {n.name: n for n in prepared.graph.node}
    out: dict[str, dict[str, float]] = {}
    todo: dict[tuple, Any] = {}
    feeds: dict[tuple, dict[str, np.ndarray]] = {}
    keys: dict[tuple[str, str], tuple] = {}
    rng = np.random.default_rng(0)
    for layer in layers:
        shape = tuple(int(d) for d in shapes[layer.data])
        for form in layer.forms:
            k = _key(layer, nodes[layer.name], shape, form, threads)
            keys[(layer.name, form)] = k
            if k in _CACHE or k in todo:
                continue
            todo[k] = layer_model(prepared, layer, shape, form, specs)
            if layer.op == "Gather":
                feeds[k] = {layer.data: rng.integers(0, layer.shape[0], shape).astype(np.int64)}
            elif form == "qlinear":
                feeds[k] = {layer.data + ".codes_in": rng.integers(0, 256, shape).astype(np.uint8)}
            else:
                feeds[k] = {layer.data: rng.standard_normal(shape).astype(np.float32)}
    by_layer: dict[tuple, list[tuple]] = {}
    for k in todo:  # time the forms of one layer shape together, taking turns
        by_layer.setdefault(k[:5] + k[6:], []).append(k)
    for group in by_layer.values():
        res = timed({i: todo[k] for i, k in enumerate(group)}, [feeds[k] for k in group],
                    threads, repeats, per_model_batches=True)
        for i, k in enumerate(group):
            _CACHE[k] = res[i]["min"]
    for (name, form), k in keys.items():
        out.setdefault(name, {})[form] = _CACHE[k]
    return out


def profile_ms(model: Any, batches: Sequence[Mapping[str, np.ndarray]], threads: int = 1,
               passes: int = 5) -> dict[str, float]:
    """Milliseconds per pass over ``batches`` (the fastest of ``passes``) of every node of the
    model onnxruntime runs (its optimized graph: fused nodes under their own names), from onnxruntime's profiler
    (the session of :func:`qcore.model.latency.deploy_session`, profiling on; one warm-up
    pass not counted)."""
    import json
    import tempfile

    ort = require("onnxruntime")
    so = ort.SessionOptions()
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = int(threads)
    with tempfile.TemporaryDirectory() as d:
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(d, "profile")
        s = ort.InferenceSession(model.SerializeToString(), so,
                                 providers=["CPUExecutionProvider"])
        for b in batches:  # the warm-up pass
            s.run(None, dict(b))
        for _ in range(max(1, passes)):
            for b in batches:
                s.run(None, dict(b))
        path = s.end_profiling()
        with open(path) as f:
            events = json.load(f)
    durs: dict[str, list[tuple[int, float]]] = {}
    for e in events:
        name = e.get("name", "")
        if e.get("cat") == "Node" and name.endswith("_kernel_time"):
            durs.setdefault(name[:-len("_kernel_time")], []).append((e["ts"], e["dur"]))
    out: dict[str, float] = {}
    n = max(1, passes) + 1
    for name, v in durs.items():
        v.sort()
        k = len(v) // n  # every pass runs a node as often; the first pass is the warm-up
        sums = [sum(d for _, d in v[i * k:(i + 1) * k]) for i in range(1, n)] if k else [0]
        out[name] = min(sums) / 1000.0  # the pass that got the core (a shared host)
    return out


def owner(name: str, names: set[str]) -> str | None:
    """The node of ``names`` an optimized node ``name`` comes from: the longest of ``names``
    that ``name`` is, or starts with followed by ``/`` or ``_`` (onnxruntime names a fused or
    re-laid-out node after the node it replaces: ``conv/out_nchwc``, ``conv_token_12``,
    ``mul/QuickGeluFusion/``)."""
    if name in names:
        return name
    for i in range(len(name) - 1, 0, -1):
        if name[i] in "/_" and name[:i] in names:
            return name[:i]
    return None


def in_chain_costs(prepared: Any, export: Any, layers: Sequence[Any],
                   owned: Mapping[str, set[str]], elements: Mapping[str, int],
                   batches: Sequence[Mapping[str, np.ndarray]], threads: int = 1,
                   passes: int = 5) -> dict[str, dict[str, float]]:
    """``{layer: {"float": ms, "qlinear": ms}}`` from two profiled runs (:func:`profile_ms`):
    the prepared float model and ``export`` (every layer of ``layers`` in the static chain).
    A layer's cost is the time of the nodes it ``owned`` (the layer and the activation ops
    only it feeds, e.g. its SiLU) in each run, each optimized node counted for the node it
    comes from (:func:`owner`); the float figure adds what the layer would cost as a float
    island in the chain: a DequantizeLinear of its input and a QuantizeLinear of its output,
    at the export's measured quantizer time per element (``elements``: each tensor's size)."""
    names = {n.name for n in prepared.graph.node} | {n.name for n in export.graph.node}

    def by_owner(prof: Mapping[str, float]) -> dict[str, float]:
        d: dict[str, float] = {}
        for k, v in prof.items():
            o = owner(k, names)
            if o is not None:
                d[o] = d.get(o, 0.0) + v
        return d

    fl = by_owner(profile_ms(prepared, batches, threads, passes))
    ql = by_owner(profile_ms(export, batches, threads, passes))
    q_ms = q_n = 0.0
    for n in export.graph.node:
        t = n.input[0] if n.input else ""
        if n.op_type == "QuantizeLinear" and n.name in ql and t in elements:
            q_ms, q_n = q_ms + ql[n.name], q_n + elements[t]
    rate = q_ms / q_n if q_n else 0.0
    out: dict[str, dict[str, float]] = {}
    for x in layers:
        own = owned[x.name]
        edge = rate * (elements.get(x.data, 0) + elements.get(x.output, 0))
        out[x.name] = {"float": sum(fl.get(n, 0.0) for n in own) + edge,
                       "qlinear": sum(ql.get(n, 0.0) for n in own)}
    return out
