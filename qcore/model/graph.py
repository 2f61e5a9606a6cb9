"""Any ONNX model: load it, find its float weights, feed it, run it with chosen weights.

The weights a tool may quantize are those :func:`qcore.io.onnx.find_weights` finds (the one
reader): float32 / float16 / bfloat16 tensors of rank >= 2 in initializers of the main graph
and of every subgraph, and in ``Constant`` nodes; biases and norms (rank 1) stay float, as every
quantization tool leaves them. Each weight is known by its key (its name, or ``graph:name``
where a subgraph reuses a name). :class:`Runner` makes every weight an input of the main graph
so one onnxruntime session runs the model with any replacement weights: a main-graph
float32 initializer becomes the input of its own name (an initializer the model also lists as
a graph input is no other input: the session's inputs are the user's and the weights); any
other weight (a subgraph
initializer, a Constant node, a float16 / bfloat16 weight) is replaced, where it lives, by an
``Identity`` — a ``Cast`` to its type for float16 / bfloat16 — reading a new float32 input of
the main graph (subgraphs read outer-scope names). Weights are fed as float32; a half-precision
weight goes through the same Cast (round to nearest even) as in the export, so the consumers
see a computed weight in both and onnxruntime takes the same kernels.
Sessions turn intra-op spinning off (onnxruntime's spinning threads would take the cores qcore's
next call needs), disable graph optimisations and weight prepacking, so that a float weight fed
as an input and the same weight computed by a DequantizeLinear node go through the same kernels
(bit-for-bit comparisons).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..io.onnx import (
    ModelError,
    NoWeightsError,
    WeightRecord,
    as_float32,
    check_external_data,
    find_weights,
    iter_graphs,
    topologically_sorted,
    unlist_initializer_inputs,
    weight_array,
)
from . import checks, require

__all__ = ["ModelError", "PrefixCache", "Runner", "generate_inputs", "graph_inputs", "load_model", "save",
           "read_inputs", "session_options", "weight_names", "weight_records"]


def load_model(path: str | os.PathLike, weights_on_disk: bool = False) -> Any:
    """The ``onnx.ModelProto`` at ``path``, external data loaded from beside it (checked first:
    :func:`qcore.io.onnx.check_external_data`).

    ``weights_on_disk``: weights (float initializers of rank >= 2) kept in external data stay
    there, their location made absolute, and :func:`qcore.io.onnx.weight_array` reads each
    straight from the file — a process then holds each weight once (as the float32 array it
    quantizes), not also inside the protobuf (the model tool's cases and Dask workers load so;
    :func:`qcore.model.export.export_plan` copies the kept float weights back in)."""
    onnx = require("onnx")
    if "\x00" in str(path):
        raise ModelError(f"model {str(path)!r}: the path holds a null byte")
    p = Path(path).expanduser()
    if not p.is_file():
        raise ModelError(f"model {str(path)!r}: no such file (give a .onnx path or 'minilm')")
    try:
        model = onnx.load(str(p), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - onnx raises many types for a bad file
        raise ModelError(f"model {str(path)!r} is not an ONNX model onnx can load: "
                         f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                         ) from None
    try:
        check_external_data(model, p.parent)  # no path escape, inside its file, before reading
        if weights_on_disk:
            _weights_stay_on_disk(model, p.resolve().parent)
        else:
            from onnx.external_data_helper import load_external_data_for_model

            load_external_data_for_model(model, str(p.parent))
    except ModelError as exc:  # the tensor and what it needs; the model named once, first
        raise ModelError(f"model {str(path)!r}: {exc}") from None
    except Exception as exc:  # noqa: BLE001
        raise ModelError(f"model {str(path)!r}: its external data cannot be read: "
                         f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                         ) from None
    checks.check_initializers(model, f"model {str(path)!r}")
    return model


def _weights_stay_on_disk(model: Any, base: Path) -> None:
    """External weights keep an absolute location; every other external tensor is loaded
    (locations checked already)."""
    onnx = require("onnx")
    from onnx.external_data_helper import load_external_data_for_tensor

    from ..io.onnx import WEIGHT_TYPES, _all_tensors

    for t in _all_tensors(model):  # initializers of every graph and Constant values
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        if t.data_type in WEIGHT_TYPES and len(t.dims) >= 2:
            info = {e.key: e.value for e in t.external_data}
            target = (base / info["location"]).resolve()
            have = (int(info["length"]) if "length" in info
                    else target.stat().st_size - int(info.get("offset", 0)))
            need = math.prod(t.dims) * (4 if t.data_type == onnx.TensorProto.FLOAT else 2)
            if have != need:  # what check_initializers says of a loaded tensor
                raise ModelError(f"initializer {t.name!r} holds {have} bytes; its shape "
                                 f"{list(t.dims)} of "
                                 f"{onnx.TensorProto.DataType.Name(t.data_type)} needs {need}")
            for e in t.external_data:
                if e.key == "location":
                    e.value = str(target)
            continue
        load_external_data_for_tensor(t, str(base))
        t.data_location = onnx.TensorProto.DEFAULT
        del t.external_data[:]


def weight_records(model: Any, min_rank: int = 2) -> list[WeightRecord]:
    """The model's weights (:func:`qcore.io.onnx.find_weights`; NoWeightsError when none)."""
    return find_weights(model, min_rank)


def weight_names(model: Any, min_rank: int = 2) -> list[str]:
    """The keys of the model's weights (empty when it has none)."""
    try:
        return [r.key for r in find_weights(model, min_rank)]
    except NoWeightsError:
        return []


def initializer_arrays(model: Any, names: list[str]) -> dict[str, np.ndarray]:
    """The weights ``names`` (keys) as float32 arrays, C order (float16 / bfloat16 widened
    exactly)."""
    wanted = set(names)
    return {r.key: as_float32(weight_array(model, r)) for r in weight_records(model)
            if r.key in wanted}


def graph_inputs(model: Any) -> list[tuple[str, np.dtype, list[int | str | None]]]:
    """(name, NumPy dtype, shape with symbolic dims as names) of the inputs a user feeds."""
    helper = require("onnx.helper")
    inits = {t.name for t in model.graph.initializer}
    out = []
    for i in model.graph.input:
        if i.name in inits:
            continue
        tt = i.type.tensor_type
        try:
            if not i.type.HasField("tensor_type"):
                raise KeyError(i.type.WhichOneof("value"))
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        except (KeyError, TypeError, ValueError):
            raise ModelError(f"input {i.name!r} is not a tensor of a type NumPy holds (elem "
                             f"type {tt.elem_type}); the tool feeds tensor inputs only"
                             ) from None
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                for d in tt.shape.dim]
        out.append((i.name, dtype, dims))
    return out


def generate_inputs(model: Any, seed: int = 0, int_range: tuple[int, int] = (0, 100),
                    dim: int = 1) -> dict[str, np.ndarray]:
    """Seeded inputs: floats standard normal, integers uniform in ``int_range`` (inclusive),
    booleans fair coins; a symbolic dimension takes ``dim``. Refused: ``dim`` < 1, inputs
    over :data:`~qcore.model.checks.MAX_INPUT_BYTES`, integers outside an input's type."""
    checks.check_dim(dim)
    rng = np.random.default_rng(checks.check_seed(seed))
    lo, hi = checks.parse_int_range(f"{int_range[0]},{int_range[1]}")
    expected = graph_inputs(model)
    total, worst = checks.generated_bytes(expected, dim)
    if total > checks.MAX_INPUT_BYTES:
        raise ModelError(f"--dim {dim}: the generated inputs would take {total / 2**30:.3g} GiB "
                         f"(largest: input {worst!r}), over the "
                         f"{checks.MAX_INPUT_BYTES / 2**30:.3g} GiB limit; give a smaller --dim")
    for name, dtype, _ in expected:
        if dtype.kind in "iu":
            checks.check_int_range_fits(name, dtype, lo, hi)
    out = {}
    for name, dtype, dims in expected:
        shape = tuple(d if isinstance(d, int) and d > 0 else dim for d in dims)
        if dtype.kind == "f":
            out[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            out[name] = rng.integers(lo, hi, size=shape, endpoint=True).astype(dtype)
        elif dtype.kind == "b":
            out[name] = rng.random(shape) < 0.5
        else:
            raise ModelError(f"input {name!r} has type {dtype}; give it in an --inputs .npz")
    return out


def check_inputs(model: Any, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``feeds`` checked against the graph's inputs (names, ranks, fixed dims, symbolic dims
    that agree across inputs, dtype kinds, integers within the input's type, finite floats);
    floats and integers cast to the input's type."""
    expected = graph_inputs(model)
    names = [n for n, _, _ in expected]
    missing = [n for n in names if n not in feeds]
    extra = [n for n in feeds if n not in names]
    if missing or extra:
        raise ModelError(f"inputs do not match the model: missing {missing}, unknown {extra}; "
                         f"the model's inputs are {names}")
    symbols: dict[str, tuple[str, int]] = {}
    return {name: checks.check_feed(name, feeds[name], dtype, dims, symbols)
            for name, dtype, dims in expected}


def read_inputs(path: str | os.PathLike, model: Any, flag: str = "--inputs"
                ) -> dict[str, np.ndarray]:
    """Inputs from an ``.npz`` whose array names are the graph's input names, checked from
    the zip directory and the ``.npy`` headers before any array is read
    (:func:`qcore.model.checks.read_npz`)."""
    return checks.read_npz(path, graph_inputs(model), flag=flag)


def session_options(threads: int = 0) -> Any:
    """onnxruntime options: spinning off, no graph optimisations, no prepacking (module doc);
    ``threads`` 0 (onnxruntime's default) or 1..4 × the cores (more crashes onnxruntime)."""
    threads = checks.check_threads(threads)
    ort = require("onnxruntime")
    so = ort.SessionOptions()
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.disable_prepacking", "1")
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4  # fatal only: a failed run raises with its reason, said once
    if threads:
        so.intra_op_num_threads = int(threads)
    return so


def make_session(model: Any, threads: int = 0) -> Any:
    """An onnxruntime CPU session of ``model`` (ModelError with onnxruntime's reason)."""
    ort = require("onnxruntime")
    try:
        return ort.InferenceSession(model.SerializeToString(), session_options(threads),
                                    providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
        msg = str(exc).strip().splitlines()
        raise ModelError("onnxruntime cannot load the model: "
                         + (msg[-1] if msg else type(exc).__name__)) from None


def tensor_proto(a: np.ndarray, name: str) -> Any:
    """An initializer of ``a`` in ONNX's storage (2- and 4-bit types packed by qcore)."""
    onnx = require("onnx")
    from onnx import numpy_helper

    from ..formats import get_format
    from ..packing import pack

    a = np.asarray(a)
    fmt = get_format(a.dtype)
    if fmt.bits in (2, 4):
        t = onnx.TensorProto()
        t.name = name
        t.data_type = fmt.onnx_id
        t.dims.extend(a.shape)
        t.raw_data = pack(a).tobytes()
        return t
    return numpy_helper.from_array(np.ascontiguousarray(a), name)  # get_format: native order


def model_opset(model: Any) -> int:
    """``model``'s default-domain opset version (1 where it imports none)."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def set_opset(model: Any, opset: int) -> None:
    """Set ``model``'s default-domain opset import to ``opset`` and raise its IR version to the
    least that opset needs (the model's own is kept when onnx cannot tell): what an export
    whose nodes need ``opset`` declares."""
    helper = require("onnx.helper")
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = opset
    try:
        ir = helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)
        model.ir_version = max(model.ir_version, ir)
    except Exception:  # noqa: BLE001 - keep the model's IR version
        pass


def graph_names(graph: Any) -> set[str]:
    """Every name a graph and its subgraphs use: initializers, inputs, outputs, value infos,
    node inputs, outputs and node names."""
    names: set[str] = set()
    for _, g in iter_graphs(graph):
        names.update(t.name for t in g.initializer)
        names.update(v.name for v in list(g.input) + list(g.output) + list(g.value_info))
        for n in g.node:
            names.update(n.input)
            names.update(n.output)
            names.add(n.name)
    names.discard("")
    return names


def readers_of(graph: Any) -> dict[str, list[Any]]:
    """The nodes of ``graph`` that read each name, once per input slot (so a name read once has
    one entry, and a node reading it twice counts twice)."""
    readers: dict[str, list[Any]] = {}
    for n in graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    return readers


def fresh_name(base: str, taken: set[str], sep: str = "_") -> str:
    """``base``, or ``base_1``, ``base_2``, ... (``sep`` between): the first not in ``taken``
    (then taken), so an export name never collides with a name the model already uses."""
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}{sep}{k}"
    taken.add(name)
    return name


def splice_at_weight(g: Any, name: str, kind: str, nodes: list[Any]) -> None:
    """Put ``nodes`` into graph ``g`` where weight ``name`` is defined: in place of its
    ``Constant`` node, or first when it is an initializer (``kind``; removing the initializer is
    the caller's, one pass per graph). The node list is rewritten once."""
    existing = list(g.node)
    if kind == "initializer":
        at = 0
    else:
        at = next(k for k, n in enumerate(existing)
                  if n.op_type == "Constant" and n.output[0] == name)
        existing.pop(at)
    del g.node[:]
    g.node.extend(existing[:at] + nodes + existing[at:])


def expose_weights(model: Any, records: list[WeightRecord]) -> tuple[Any, dict[str, str]]:
    """A copy of ``model`` (nodes topologically sorted) in which each weight is an input of the
    main graph (module doc), and the input name of each weight's key."""
    onnx = require("onnx")
    helper = require("onnx.helper")
    out = topologically_sorted(model)
    # initializers listed as graph inputs (every one before IR 4) stop being inputs: an exposed
    # weight becomes an input of its own, the others keep their values, so the session's
    # inputs are the user's and the exposed weights'
    unlist_initializer_inputs(out)
    taken = {i.name for i in out.graph.input}
    for _, g in iter_graphs(out.graph):
        taken |= {t.name for t in g.initializer} | {o for n in g.node for o in n.output}
        taken |= {i for n in g.node for i in n.input}
    feed: dict[str, str] = {}
    new_inputs = []
    direct_names = set()
    for r in records:
        direct = r.graph == "main" and r.kind == "initializer" and r.dtype == "float32"
        name = r.name if direct else fresh_name(f"qcore.weight.{r.key}", taken, sep=".")
        feed[r.key] = name
        new_inputs.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT,
                                                        list(r.shape)))
        if direct:
            direct_names.add(r.name)
            continue
        # looked up afresh: rewriting a graph's node list copies the subgraphs below it
        g = dict(iter_graphs(out.graph))[r.graph]
        if r.dtype == "float32":
            read = helper.make_node("Identity", [name], [r.name], name=f"{name}.read")
        else:  # a Cast, as in the export: the consumers see a computed half-precision weight
            to = onnx.TensorProto.FLOAT16 if r.dtype == "float16" else onnx.TensorProto.BFLOAT16
            read = helper.make_node("Cast", [name], [r.name], to=to, name=f"{name}.read")
        if r.kind == "initializer":
            keep = [t for t in g.initializer if t.name != r.name]
            del g.initializer[:]
            g.initializer.extend(keep)
        splice_at_weight(g, r.name, r.kind, [read])
    if direct_names:  # one pass: each rewrite of a repeated field copies it into the arena
        keep = [t for t in out.graph.initializer if t.name not in direct_names]
        del out.graph.initializer[:]
        out.graph.initializer.extend(keep)
    out.graph.input.extend(new_inputs)
    return out, feed


class Runner:
    """One model, its float weights, one session; :meth:`run` with any weights replaced.

    ``weights``: the keys of the weights to expose (default: all the reader finds); they
    become main-graph inputs of the session's copy of the model (:func:`expose_weights`), fed
    from :attr:`weights` (float32) in their own type unless replaced.
    """

    def __init__(self, model: Any, weights: list[str] | None = None, threads: int = 0) -> None:
        self.model = model
        records = find_weights(model)
        by_key = {r.key: r for r in records}
        self.names = list(by_key if weights is None else weights)
        if not self.names:
            raise ModelError("no weights chosen: name at least one of " + ", ".join(by_key))
        unknown = [n for n in self.names if n not in by_key]
        if unknown:
            raise ModelError(f"weights {unknown} are not float weights of the model; its "
                             f"weights are {list(by_key)[:20]}")
        self.records = {n: by_key[n] for n in self.names}
        self.dtypes = {n: by_key[n].dtype for n in self.names}
        self.weights = {n: as_float32(weight_array(model, by_key[n])) for n in self.names}
        self.exposed, self.feed_names = expose_weights(model, list(self.records.values()))
        self._float_feeds = {self.feed_names[n]: self.weights[n] for n in self.names}
        self.threads = threads
        self.session = make_session(self.exposed, threads)
        self.output_names = [o.name for o in self.session.get_outputs()]

    def weight_feeds(self, replace: Mapping[str, np.ndarray] | None = None
                     ) -> dict[str, np.ndarray]:
        """The session feeds of the weights (by input name, float32), ``replace``'s (by key) in
        place of the float ones."""
        out = dict(self._float_feeds)
        for k, v in (replace or {}).items():
            if k not in self.feed_names:
                raise ModelError(f"weight {k!r} is not one this runner exposes")
            out[self.feed_names[k]] = np.ascontiguousarray(v, np.float32)
        return out

    def run(self, feeds: Mapping[str, np.ndarray],
            replace: Mapping[str, np.ndarray] | None = None) -> list[np.ndarray]:
        """The model's outputs with ``replace``'s weights in place of the float ones."""
        all_feeds = dict(feeds)
        all_feeds.update(self.weight_feeds(replace))
        try:
            return self.session.run(self.output_names, all_feeds)
        except Exception as exc:  # noqa: BLE001
            msg = str(exc).strip().splitlines()
            given = ", ".join(f"{k} {np.asarray(v).dtype} {tuple(np.shape(v))}"
                              for k, v in feeds.items())
            wanted = ", ".join(f"{n} {d} [{', '.join(str(x) if x else '?' for x in s)}]"
                               for n, d, s in graph_inputs(self.model))
            raise ModelError(f"onnxruntime cannot run the model on these inputs ({given}; the "
                             f"model wants {wanted}): "
                             + (msg[-1] if msg else type(exc).__name__)) from None


class PrefixCache:
    """Runs with one weight replaced that recompute only what depends on that weight.

    The nodes downstream of weight W (those reading W, or reading what such a node made) are
    the only ones whose results change when W alone changes. For each W, a sub-model holds
    those nodes; its inputs are W, the graph inputs and other weights they read, and the
    values the rest of the graph made (the *frontier*), which one run of the float model per
    batch computes and keeps. A run of the sub-model gives the same outputs as a run of the
    whole model with W replaced (the same operators on the same values, in the same session
    options), at the cost of the downstream part alone: about half the model on average for a
    chain of layers. Graphs with control flow (If, Loop, Scan bodies read outer values
    implicitly) are not split: :meth:`supports` is False for every weight.
    """

    def __init__(self, runner: Runner, batches: list[Mapping[str, np.ndarray]]) -> None:
        onnx = require("onnx")
        self.runner = runner
        self.batch_inputs = [dict(b) for b in batches]
        self.sessions: dict[str, Any] = {}
        g = runner.exposed.graph
        self.plans: dict[str, tuple[np.ndarray, list[str], list[str], list[str]]] = {}
        self.types: dict[str, int] = {}
        self.values: list[dict[str, np.ndarray]] = []
        graph_attr = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
        if any(a.type in graph_attr for n in g.node for a in n.attribute):
            return
        inferred = onnx.shape_inference.infer_shapes(runner.exposed)
        types = {v.name: v.type.tensor_type.elem_type
                 for v in list(inferred.graph.value_info) + list(g.input) + list(g.output)}
        graph_inputs = {i.name for i in g.input}
        inits = {t.name for t in g.initializer}
        outputs = [o.name for o in g.output]
        cuts: dict[str, list[str]] = {}
        self.types = types
        for key in runner.names:
            w = runner.feed_names[key]
            if w in outputs:
                continue  # the weight itself is an output: the whole model runs
            tainted, marked, at = {w}, [], []
            for k, n in enumerate(g.node):
                if any(i in tainted for i in n.input if i):
                    marked.append(n)
                    at.append(k)
                    tainted.update(o for o in n.output if o)
            made = {o for n in marked for o in n.output}
            frontier = sorted({i for n in marked for i in n.input
                               if i and i not in made and i not in graph_inputs
                               and i not in inits})
            feeds = sorted({i for n in marked for i in n.input if i in graph_inputs})
            if any(not types.get(f) for f in frontier) or len(marked) == len(g.node):
                continue  # untyped values, or nothing to save: the whole model runs
            # the sub-model is built when first run: node indices only until then (a model of
            # 900 weights and 5000 nodes held 2 M node copies, 2.9 GB, in its sub-models)
            self.plans[key] = (np.asarray(at, np.int32), frontier, feeds,
                               [o for o in outputs if o in made])
            cuts[key] = frontier
        needed = sorted({f for fr in cuts.values() for f in fr})
        if not needed:
            return
        probe = onnx.ModelProto()
        probe.CopyFrom(runner.exposed)
        helper = require("onnx.helper")
        for name in needed:
            probe.graph.output.append(helper.make_tensor_value_info(name, types[name], None))
        session = make_session(probe, runner.threads)
        names = outputs + needed
        for b in batches:
            feeds_b = dict(b)
            feeds_b.update(runner.weight_feeds())
            self.values.append(dict(zip(names, session.run(names, feeds_b))))

    @staticmethod
    def _submodel(model: Any, marked: list, frontier: list[str], feeds: list[str],
                  types: dict[str, int], outs: list[str]) -> Any:
        helper = require("onnx.helper")
        g = model.graph
        used = {i for n in marked for i in n.input}
        inputs = [i for i in g.input if i.name in feeds]
        inputs += [helper.make_tensor_value_info(f, types[f], None) for f in frontier]
        graph = helper.make_graph(marked, g.name + ".downstream", inputs,
                                  [o for o in g.output if o.name in outs],
                                  initializer=[t for t in g.initializer if t.name in used])
        sub = helper.make_model(graph, opset_imports=list(model.opset_import))
        sub.ir_version = model.ir_version
        return sub

    def supports(self, weight: str) -> bool:
        """Whether runs with ``weight`` replaced can use the cache."""
        return weight in self.plans and bool(self.values)

    def run(self, weight: str, value: np.ndarray) -> list[list[np.ndarray]]:
        """Per batch, the model's outputs with ``weight`` replaced by ``value``."""
        at, frontier, feeds, outs = self.plans[weight]
        if weight not in self.sessions:
            self.sessions.clear()  # one sub-model session at a time: each keeps its own arena
            nodes = self.runner.exposed.graph.node
            sub = self._submodel(self.runner.exposed, [nodes[int(k)] for k in at], frontier,
                                 feeds, self.types, outs)
            self.sessions[weight] = make_session(sub, self.runner.threads)
        session = self.sessions[weight]
        weight_feeds = self.runner.weight_feeds({weight: value})
        result = []
        for i, cached in enumerate(self.values):
            f = {name: cached[name] for name in frontier}
            for name in feeds:
                f[name] = (weight_feeds[name] if name in weight_feeds
                           else self._batch_input(i, name))
            got = dict(zip(outs, session.run(outs, f))) if outs else {}
            result.append([got.get(o, cached[o]) for o in self.runner.output_names])
        return result

    def _batch_input(self, i: int, name: str) -> np.ndarray:
        return self.batch_inputs[i][name]


def save(model, path: str) -> None:
    """Save a model; one over 2 GB keeps its initializers in ``PATH.data`` beside it."""

    onnx = require("onnx")
    if model.ByteSize() > 2**31 - 2**24:
        onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                  location=os.path.basename(path) + ".data")
    else:
        onnx.save(model, path)
