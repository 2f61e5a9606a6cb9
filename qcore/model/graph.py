"""Any ONNX model: load it, find its float weights, feed it, run it with chosen weights.

The weights a tool may quantize are the model's float32 initializers of rank >= 2 (matrices,
embedding tables, convolution kernels); biases and norms (rank 1) stay float, as every
quantization tool leaves them. :class:`Runner` turns those initializers into graph inputs so
one onnxruntime session runs the model with any replacement weights; its sessions turn
intra-op spinning off (onnxruntime's spinning threads would take the cores qcore's next call needs), disable graph
optimisations and weight prepacking, so that a float weight fed as an input and the same weight
computed by a DequantizeLinear node go through the same kernels (bit-for-bit comparisons).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from . import checks, require
from .checks import ModelError

__all__ = ["ModelError", "PrefixCache", "Runner", "generate_inputs", "graph_inputs", "load_model",
           "read_inputs", "session_options", "weight_names"]


def load_model(path: str | os.PathLike) -> Any:
    """The ``onnx.ModelProto`` at ``path``, external data loaded from beside it."""
    onnx = require("onnx")
    if "\x00" in str(path):
        raise ModelError(f"model {str(path)!r}: the path holds a null byte")
    p = Path(path).expanduser()
    if not p.is_file():
        raise ModelError(f"model {str(path)!r}: no such file (give a .onnx path or 'minilm')")
    try:
        model = onnx.load(str(p), load_external_data=True)
    except Exception as exc:  # noqa: BLE001 - onnx raises many types for a bad file
        raise ModelError(f"model {str(path)!r} is not an ONNX model onnx can load: "
                         f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                         ) from None
    checks.check_initializers(model, f"model {str(path)!r}")
    return model


def weight_names(model: Any, min_rank: int = 2) -> list[str]:
    """Names of the float32 initializers of rank >= ``min_rank`` that are not graph inputs."""
    onnx = require("onnx")
    inputs = {i.name for i in model.graph.input}
    return [t.name for t in model.graph.initializer
            if t.data_type == onnx.TensorProto.FLOAT and len(t.dims) >= min_rank
            and t.name not in inputs]


def initializer_arrays(model: Any, names: list[str]) -> dict[str, np.ndarray]:
    """The initializers ``names`` as NumPy arrays (float32, C order)."""
    numpy_helper = require("onnx.numpy_helper")
    wanted = set(names)
    return {t.name: np.ascontiguousarray(numpy_helper.to_array(t), np.float32)
            for t in model.graph.initializer if t.name in wanted}


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


def read_inputs(path: str | os.PathLike, model: Any) -> dict[str, np.ndarray]:
    """Inputs from an ``.npz`` whose array names are the graph's input names, checked from
    the zip directory and the ``.npy`` headers before any array is read
    (:func:`qcore.model.checks.read_npz`)."""
    return checks.read_npz(path, graph_inputs(model))


def session_options(threads: int = 0) -> Any:
    """onnxruntime options: spinning off, no graph optimisations, no prepacking (module doc)."""
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


class Runner:
    """One model, its float weights, one session; :meth:`run` with any weights replaced.

    ``weights``: the initializers to expose (default :func:`weight_names`); they become graph
    inputs of the session's copy of the model, fed from :attr:`weights` unless replaced.
    """

    def __init__(self, model: Any, weights: list[str] | None = None, threads: int = 0) -> None:
        onnx = require("onnx")
        helper = require("onnx.helper")
        self.model = model
        self.names = list(weight_names(model) if weights is None else weights)
        self.weights = initializer_arrays(model, self.names)
        if not self.names:
            raise ModelError("the model has no float32 initializers of rank >= 2 to quantize "
                             "(weights that are graph inputs or float16/bfloat16 are not used)")
        unknown = [n for n in self.names if n not in self.weights]
        if unknown:
            raise ModelError(f"weights {unknown} are not float initializers of the model")
        exposed = onnx.ModelProto()
        exposed.CopyFrom(model)
        keep = [t for t in exposed.graph.initializer if t.name not in self.weights]
        del exposed.graph.initializer[:]
        exposed.graph.initializer.extend(keep)
        for name in self.names:
            exposed.graph.input.append(helper.make_tensor_value_info(
                name, onnx.TensorProto.FLOAT, list(self.weights[name].shape)))
        self.exposed = exposed
        self.threads = threads
        self.session = make_session(exposed, threads)
        self.output_names = [o.name for o in self.session.get_outputs()]

    def run(self, feeds: Mapping[str, np.ndarray],
            replace: Mapping[str, np.ndarray] | None = None) -> list[np.ndarray]:
        """The model's outputs with ``replace``'s weights in place of the float ones."""
        all_feeds = dict(feeds)
        all_feeds.update(self.weights)
        if replace:
            all_feeds.update({k: np.ascontiguousarray(v, np.float32) for k, v in replace.items()})
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


def topological_nodes(graph: Any) -> list[Any]:
    """The graph's nodes with every producer before its consumers (ONNX lists them so, but
    onnxruntime runs graphs listed in any order); the listed order where it already is."""
    made_by = {o: k for k, n in enumerate(graph.node) for o in n.output if o}
    done: set[int] = set()
    seen: set[int] = set()  # entered: a cycle back to one of these is not followed
    order: list[Any] = []
    for start in range(len(graph.node)):
        stack = [(start, False)]
        while stack:
            k, expanded = stack.pop()
            if expanded:
                done.add(k)
                order.append(graph.node[k])
                continue
            if k in seen:
                continue
            seen.add(k)
            stack.append((k, True))
            for i in reversed(graph.node[k].input):
                j = made_by.get(i)
                if j is not None and j not in seen:
                    stack.append((j, False))
    return order


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
        self.plans: dict[str, tuple[Any, list[str], list[str], list[str]]] = {}
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
        nodes = topological_nodes(g)
        for w in runner.names:
            if w in outputs:
                continue  # the weight itself is an output: the whole model runs
            tainted, marked = {w}, []
            for n in nodes:
                if any(i in tainted for i in n.input if i):
                    marked.append(n)
                    tainted.update(o for o in n.output if o)
            made = {o for n in marked for o in n.output}
            frontier = sorted({i for n in marked for i in n.input
                               if i and i not in made and i not in graph_inputs
                               and i not in inits})
            feeds = sorted({i for n in marked for i in n.input if i in graph_inputs})
            if any(not types.get(f) for f in frontier) or len(marked) == len(g.node):
                continue  # untyped values, or nothing to save: the whole model runs
            sub = self._submodel(runner.exposed, marked, frontier, feeds, types,
                                 [o for o in outputs if o in made])
            self.plans[w] = (sub, frontier, feeds, [o for o in outputs if o in made])
            cuts[w] = frontier
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
            feeds_b.update(runner.weights)
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
        sub, frontier, feeds, outs = self.plans[weight]
        if weight not in self.sessions:
            self.sessions.clear()  # one sub-model session at a time: each keeps its own arena
            self.sessions[weight] = make_session(sub, self.runner.threads)
        session = self.sessions[weight]
        value = np.ascontiguousarray(value, np.float32)
        result = []
        for i, cached in enumerate(self.values):
            f = {name: cached[name] for name in frontier}
            for name in feeds:
                f[name] = value if name == weight else (
                    self.runner.weights[name] if name in self.runner.weights
                    else self._batch_input(i, name))
            got = dict(zip(outs, session.run(outs, f))) if outs else {}
            result.append([got.get(o, cached[o]) for o in self.runner.output_names])
        return result

    def _batch_input(self, i: int, name: str) -> np.ndarray:
        return self.batch_inputs[i][name]
