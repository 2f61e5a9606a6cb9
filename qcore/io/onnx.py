"""ONNX models: the tensor-file entries of :mod:`qcore.io` and the one reader of a model's weights.

:func:`find_weights` is the one reader the report, the model tool and the model pages share
(docs/semantics.md, Definitions: a weight). A weight is a float32 / float16 / bfloat16 tensor
of rank >= 2 held as a parameter wherever the exporter put it: an initializer of the main graph
or of any subgraph (If / Loop / Scan bodies, any depth), or a ``Constant`` node's ``value``. A
weight several nodes read is one record with several consumers; a weight that is also a graph
output is still a weight. A main-graph initializer that is also listed as a graph input is a
weight whose value is the initializer (onnxruntime's rule): before IR version 4 every
initializer had to be listed so (older PyTorch, Caffe2 and keras2onnx exports); from IR 4 the
listing makes it a default a caller may override, which its record says (``overridable``). A
subgraph initializer that a Loop / Scan body input shadows is no weight (the node always binds
the input). Each record names
its graph path (``main``, ``main/If_0.then_branch``), kind, name, dtype, shape and consumers
(op type, input index, integer attributes); its :class:`Role` (the role table :data:`ROLES`)
gives the output axis (per-axis scales) and the reduction axis (blocks). A model with no weight
raises :class:`NoWeightsError` saying what was looked at. :func:`topologically_sorted` orders
every graph's nodes (onnxruntime accepts any order; graph walks need producers first).

onnx is optional: it is imported when a model is read, and its absence raises a
:class:`~qcore.io.base.TensorFileError` (file entries) or ImportError (the weight reader).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..errors import QuantizationError
from ..optional import require
from .base import MAX_TENSORS, TensorFileError, _Entry, _native, _short

__all__ = ["DEFAULT_ROLE", "MAIN", "ROLES", "WEIGHT_TYPES", "Consumer", "ModelError",
           "NoWeightsError", "Role", "WeightRecord", "as_float32", "check_external_data",
           "describe_search",
           "find_weights", "iter_graphs", "onnx_entries", "role_in_graph", "role_of",
           "topologically_sorted", "unlist_initializer_inputs",
           "weight_array", "weight_proto"]


def onnx_entries(label: str, data: bytes) -> list[_Entry]:
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError:
        raise TensorFileError(
            f"{label}: reading .onnx files needs the optional 'onnx' package, which is not "
            "installed; pip install onnx (or qcore[onnx]), or export the tensor as .npy."
        ) from None
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise TensorFileError(
            f"{label}: not a valid ONNX model ({_short(exc)}); the file is corrupt or truncated."
        ) from None
    if not model.HasField("graph"):
        raise TensorFileError(f"{label}: not a valid ONNX model (it has no graph).")
    if len(model.graph.initializer) > MAX_TENSORS:
        raise TensorFileError(
            f"{label}: holds {len(model.graph.initializer):,} initializers, more than the "
            f"{MAX_TENSORS:,} a file may hold here; split the model."
        )
    return [_onnx_entry(label, t, onnx, numpy_helper) for t in model.graph.initializer]


def _onnx_entry(label: str, tensor: Any, onnx: Any, numpy_helper: Any) -> _Entry:
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type))
    except Exception:  # unknown / undefined element type
        dtype = np.dtype(object)
    external = tensor.data_location == onnx.TensorProto.EXTERNAL
    dims = tuple(int(d) for d in tensor.dims)
    if any(d < 0 for d in dims):
        raise TensorFileError(
            f"{label}: initializer {tensor.name!r} has dims {list(dims)} with a negative "
            "dimension; every dimension must be >= 0. The model is corrupt."
        )

    def read() -> np.ndarray:
        if external:
            raise TensorFileError(
                f"{label}: initializer {tensor.name!r} is stored in external data, which is "
                "not loaded; save the model with its weights inside the .onnx file."
            )
        return _native(np.asarray(numpy_helper.to_array(tensor)))

    return _Entry(tensor.name, dims, dtype, read)


# ---------------------------------------------------------------------------------------------
# the one reader of an ONNX model's weights (docs/semantics.md, Definitions: a weight)

#: TensorProto element types a weight may have -> their name.
WEIGHT_TYPES = {1: "float32", 10: "float16", 16: "bfloat16"}
_GRAPH, _GRAPHS = 5, 10  # AttributeProto.GRAPH, AttributeProto.GRAPHS
MAIN = "main"


class ModelError(QuantizationError):
    """A model, its inputs or a plan the tool cannot use (a ValueError)."""


class NoWeightsError(ModelError):
    """The model holds no float tensor of rank >= 2 anywhere qcore looks."""


@dataclass(frozen=True)
class Role:
    """What a weight is to the node that consumes it: its output axis (one scale per output
    channel) and its reduction axis (blocks run along it); negative axes count from the end."""

    name: str
    output_axis: int
    reduction_axis: int
    kernel: bool = False  # a Conv kernel (O, I/g, k...): its reduction also runs over k

    def axes(self, ndim: int) -> tuple[int, int]:
        """(output axis, reduction axis) for a weight of ``ndim`` dimensions, non-negative."""
        return self.output_axis % ndim, self.reduction_axis % ndim


#: A checkpoint without a graph, or a weight no known node consumes: (out, in) rows.
DEFAULT_ROLE = Role("rows (out, in)", 0, -1)

#: The role table: (op_type, input index) -> Role. Gemm's depend on transA / transB
#: (:func:`role_of`); Conv's reduction runs over I/g and the kernel (blocks along I, or the
#: flattened I·k, :mod:`qcore.model.fidelity`).
ROLES: dict[tuple[str, int], Role] = {
    ("MatMul", 1): Role("MatMul B [K, N]", -1, -2),
    ("MatMul", 0): Role("MatMul A [M, K]", -2, -1),
    ("Gemm", 1): Role("Gemm B [K, N]", 1, 0),
    ("Gemm", 0): Role("Gemm A [M, K]", 0, 1),
    ("Conv", 1): Role("Conv W (O, I/g, k...)", 0, 1, kernel=True),
    ("ConvTranspose", 1): Role("ConvTranspose W (I, O/g, k...)", 1, 0),
    ("Gather", 0): Role("Gather data (rows)", 0, -1),
    ("LSTM", 1): Role("LSTM W [dirs, 4H, in]", 1, 2),
    ("LSTM", 2): Role("LSTM R [dirs, 4H, H]", 1, 2),
    ("GRU", 1): Role("GRU W [dirs, 3H, in]", 1, 2),
    ("GRU", 2): Role("GRU R [dirs, 3H, H]", 1, 2),
    ("RNN", 1): Role("RNN W [dirs, H, in]", 1, 2),
    ("RNN", 2): Role("RNN R [dirs, H, H]", 1, 2),
}
_GEMM_TRANSPOSED = {1: Role("Gemm B^T [N, K] (transB=1)", 0, 1),
                    0: Role("Gemm A^T [K, M] (transA=1)", 1, 0)}


@dataclass(frozen=True)
class Consumer:
    """One use of a weight: the node (its graph path, name or op_index label, op type), the
    input index, and its integer attributes (transB, group, ...)."""

    graph: str
    node: str
    op_type: str
    index: int
    attrs: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class WeightRecord:
    """One float weight of rank >= 2 and where it lives.

    ``key``: its name across the model (the graph name where unique, else ``graph:name``);
    ``graph``: ``"main"`` or a subgraph path such as ``"main/If_0.then_branch"``; ``kind``:
    ``"initializer"`` or ``"constant"`` (a Constant node's ``value``; ``node`` names it);
    ``is_output``: the value is also an output of its graph; ``is_input``: a main-graph
    initializer also listed as a graph input; ``overridable``: so listed in a model of IR
    version >= 4, where a caller may feed another value (qcore uses the initializer's; before
    IR 4 every initializer is listed so and none is overridable).
    """

    key: str
    name: str
    graph: str
    kind: str
    dtype: str
    shape: tuple[int, ...]
    consumers: tuple[Consumer, ...]
    is_output: bool = False
    node: str = ""
    external: bool = False
    is_input: bool = False
    overridable: bool = False

    @property
    def role(self) -> Role:
        """The role of the first consumer the role table knows (:data:`ROLES`); else rows."""
        return role_of(self.consumers)


def role_of(consumers: tuple[Consumer, ...] | list[Consumer]) -> Role:
    """The weight's role from its consumers (module table :data:`ROLES`)."""
    for c in consumers:
        attrs = dict(c.attrs)
        if c.op_type == "Gemm" and c.index in (0, 1):
            flag = attrs.get("transB" if c.index == 1 else "transA", 0)
            if flag:
                return _GEMM_TRANSPOSED[c.index]
        role = ROLES.get((c.op_type, c.index))
        if role is not None:
            return role
    return DEFAULT_ROLE


def role_in_graph(graph: Any, name: str, path: str = MAIN) -> Role:
    """The role of the value ``name`` from its consumers in ``graph`` and the subgraphs below
    (any value, a weight or not: the role its consuming node gives it)."""
    return role_of(_consumers(graph, path, name))


def _onnx() -> Any:
    return require("onnx", "reading ONNX models")


def _label(node: Any, index: int) -> str:
    return node.name or f"{node.op_type}_{index}"


def _subgraphs(attr: Any) -> list[Any]:
    """The graphs an attribute holds: its one graph (GRAPH), its graphs (GRAPHS), or none."""
    if attr.type == _GRAPH:
        return [attr.g]
    return list(attr.graphs) if attr.type == _GRAPHS else []


def _sub_path(path: str, label: str, attr: Any, index: int) -> str:
    """A subgraph's path: ``parent/node.attr``, with ``[index]`` for one of a GRAPHS list."""
    return f"{path}/{label}.{attr.name}" + ("" if attr.type == _GRAPH else f"[{index}]")


def iter_graphs(graph: Any, path: str = MAIN):
    """(path, graph) of ``graph`` and every subgraph below it (If / Loop / Scan bodies, any
    depth), parents first."""
    yield path, graph
    for i, node in enumerate(graph.node):
        for a in node.attribute:
            for k, g in enumerate(_subgraphs(a)):
                yield from iter_graphs(g, _sub_path(path, _label(node, i), a, k))


#: Nodes that pass a weight on with its layout unchanged: the weight's role is its readers'
#: (a float16 weight stored with a Cast to float32 after it is a Conv kernel, not rows).
PASS_THROUGH = ("Cast", "Identity")


def _consumers(graph: Any, path: str, name: str) -> list[Consumer]:
    """Uses of ``name`` in ``graph`` and, where a subgraph does not define it again, in the
    subgraphs below (which read outer-scope names); a :data:`PASS_THROUGH` node's own
    readers follow it."""
    out = []
    for i, node in enumerate(graph.node):
        label = _label(node, i)
        for k, inp in enumerate(node.input):
            if inp == name:
                attrs = tuple((a.name, int(a.i)) for a in node.attribute if a.type == 2)
                out.append(Consumer(path, label, node.op_type, k, attrs))
                if node.op_type in PASS_THROUGH and node.output and node.output[0]:
                    out.extend(_consumers(graph, path, node.output[0]))
        for a in node.attribute:
            for j, g in enumerate(_subgraphs(a)):
                if name not in _defined(g):
                    out.extend(_consumers(g, _sub_path(path, label, a, j), name))
    return out


def _defined(graph: Any) -> set[str]:
    names = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    return names | {o for n in graph.node for o in n.output}


#: (op_type, input index) of the bias inputs: a tensor read only there stays float however
#: many dimensions it has (a recurrent bias is [dirs, 8·hidden]; Gemm's C may be [M, N]), as
#: biases do everywhere else.
BIAS_INPUTS = frozenset({("LSTM", 3), ("GRU", 3), ("RNN", 3), ("DynamicQuantizeLSTM", 3),
                         ("Gemm", 2), ("Conv", 2), ("ConvTranspose", 2)})


def _only_a_bias(consumers: Sequence[Consumer]) -> bool:
    return bool(consumers) and all((c.op_type, c.index) in BIAS_INPUTS for c in consumers)


def find_weights(model: Any, min_rank: int = 2) -> list[WeightRecord]:
    """Every float32 / float16 / bfloat16 tensor of rank >= ``min_rank`` the model holds as a
    parameter: initializers of the main graph (those also listed as graph inputs included,
    module doc) and of every subgraph (not those a body input shadows), and ``Constant``
    nodes' ``value`` tensors; in graph order, each once however many nodes read it. Raises
    :class:`NoWeightsError` saying what was looked at when there are none."""
    _onnx()
    found: list[WeightRecord] = []
    overridable = getattr(model, "ir_version", 0) >= 4
    for path, graph in iter_graphs(model.graph):
        inputs = {i.name for i in graph.input}
        outputs = {o.name for o in graph.output}
        for t in graph.initializer:
            listed = t.name in inputs
            if (t.data_type in WEIGHT_TYPES and len(t.dims) >= min_rank
                    and (path == MAIN or not listed)):
                consumers = tuple(_consumers(graph, path, t.name))
                if _only_a_bias(consumers):
                    continue
                found.append(WeightRecord(
                    t.name, t.name, path, "initializer", WEIGHT_TYPES[t.data_type],
                    tuple(int(d) for d in t.dims), consumers,
                    t.name in outputs, external=t.data_location == 1, is_input=listed,
                    overridable=listed and overridable))
        for i, node in enumerate(graph.node):
            if node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
                continue
            t = next((a.t for a in node.attribute if a.name == "value" and a.type == 4), None)
            if t is None or t.data_type not in WEIGHT_TYPES or len(t.dims) < min_rank:
                continue
            name = node.output[0]
            consumers = tuple(_consumers(graph, path, name))
            if _only_a_bias(consumers):
                continue
            found.append(WeightRecord(
                name, name, path, "constant", WEIGHT_TYPES[t.data_type],
                tuple(int(d) for d in t.dims), consumers,
                name in outputs, node=_label(node, i), external=t.data_location == 1))
    if not found:
        raise NoWeightsError(describe_search(model, min_rank))
    counts: dict[str, int] = {}
    for w in found:
        counts[w.name] = counts.get(w.name, 0) + 1
    return [w if counts[w.name] == 1 or w.graph == MAIN
            else replace(w, key=f"{w.graph}:{w.name}") for w in found]


def unlist_initializer_inputs(model: Any, names: set[str] | None = None) -> None:
    """Drop, in place, the main-graph input entries that name initializers (``names``: only
    those; default all), raising the IR version to 4, the first where an initializer need not
    be listed. The initializers keep their values; a caller can no longer override them."""
    graph = model.graph
    inits = {t.name for t in graph.initializer}
    drop = inits if names is None else inits & set(names)
    keep = [i for i in graph.input if i.name not in drop]
    if len(keep) == len(graph.input):
        return
    del graph.input[:]
    graph.input.extend(keep)
    model.ir_version = max(model.ir_version, 4)


def describe_search(model: Any, min_rank: int = 2) -> str:
    """What :func:`find_weights` looked at, in words (the message of :class:`NoWeightsError`)."""
    onnx = _onnx()
    inits: dict[str, int] = {}
    constants = subgraphs = 0
    for path, graph in iter_graphs(model.graph):
        subgraphs += path != MAIN
        for t in graph.initializer:
            try:
                kind = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).name
            except Exception:  # noqa: BLE001 - an unknown type number
                kind = f"type {t.data_type}"
            kind = WEIGHT_TYPES.get(t.data_type, kind)
            key = f"{kind} rank {len(t.dims)}"
            inits[key] = inits.get(key, 0) + 1
        constants += sum(n.op_type == "Constant" for n in graph.node)
    listed = ", ".join(f"{n} {k}" for k, n in sorted(inits.items())) or "none"
    return (f"the model holds no float32/float16/bfloat16 weight of rank >= {min_rank} to "
            f"quantize: looked at {sum(inits.values())} initializers ({listed}), {constants} "
            f"Constant nodes and {subgraphs} subgraphs (If/Loop/Scan bodies); inputs of a Loop / "
            f"Scan body count as inputs, not weights")


def weight_proto(model: Any, record: WeightRecord) -> Any:
    """The TensorProto holding ``record``'s values (an initializer or a Constant's value)."""
    for path, graph in iter_graphs(model.graph):
        if path != record.graph:
            continue
        if record.kind == "initializer":
            for t in graph.initializer:
                if t.name == record.name:
                    return t
        else:
            for node in graph.node:
                if node.op_type == "Constant" and node.output[0] == record.name:
                    return next(a.t for a in node.attribute if a.name == "value")
    raise ModelError(f"weight {record.key!r} is not in the model (it changed?)")


def weight_array(model: Any, record: WeightRecord) -> np.ndarray:
    """``record``'s values in their own type (float32, float16 or ml_dtypes.bfloat16); the
    model must hold its data (external data loaded, :func:`qcore.model.graph.load_model`)."""
    from onnx import numpy_helper

    t = weight_proto(model, record)
    if t.data_location == 1:
        a = read_on_disk(t, record.key)
    else:
        a = numpy_helper.to_array(t)
    if record.dtype == "bfloat16":
        import ml_dtypes

        a = np.asarray(a)
        a = a.view(ml_dtypes.bfloat16) if a.dtype.itemsize == 2 else a.astype(ml_dtypes.bfloat16)
    return np.ascontiguousarray(a)


_DISK_DTYPES = {1: "<f4", 10: "<f2", 16: "<u2"}  # float32, float16, bfloat16 (as raw bits)


def read_on_disk(t: Any, key: str) -> np.ndarray:
    """A weight left in external data at an absolute location
    (:func:`qcore.model.graph.load_model` with ``weights_on_disk``), read from its file in its
    stored type (bfloat16 as uint16 bits); ``key`` names it in errors."""
    import os

    info = {e.key: e.value for e in t.external_data}
    where = info.get("location", "")
    if not os.path.isabs(where) or t.data_type not in _DISK_DTYPES:
        raise ModelError(f"weight {key!r} is stored in external data that is not "
                         f"loaded; load the model with its external data")
    dtype = np.dtype(_DISK_DTYPES[t.data_type])
    count = int(np.prod([int(d) for d in t.dims], dtype=np.int64))
    offset = int(info.get("offset", 0))
    if offset < 0 or offset + count * dtype.itemsize > os.path.getsize(where):
        raise ModelError(f"weight {key!r}: its external data runs past the end of "
                         f"{os.path.basename(where)!r}")
    a = np.fromfile(where, dtype=dtype, count=count, offset=offset)
    return a.reshape(tuple(int(d) for d in t.dims)).astype(dtype.newbyteorder("="), copy=False)


def as_float32(a: np.ndarray) -> np.ndarray:
    """A weight widened to float32: exact for float16 and bfloat16 (every value is a float32)."""
    return np.ascontiguousarray(np.asarray(a).astype(np.float32, copy=False))


# ---------------------------------------------------------------------------------------------
# node order


def _free_names(graph: Any) -> set[str]:
    """Names a graph reads that it does not define (its outer-scope reads), subgraphs included."""
    defined = _defined(graph)
    used = set()
    for node in graph.node:
        used.update(i for i in node.input if i)
        for a in node.attribute:
            for g in _subgraphs(a):
                used |= _free_names(g)
    return used - defined


def _sort_graph(graph: Any, outer: set[str], path: str) -> None:
    known = set(outer) | {i.name for i in graph.input} | {t.name for t in graph.initializer}
    nodes = list(graph.node)
    needs = []
    for node in nodes:
        need = {i for i in node.input if i}
        for a in node.attribute:
            for g in _subgraphs(a):
                need |= _free_names(g)
        needs.append(need)
    produced = {o for n in nodes for o in n.output if o}
    order, done, avail = [], [False] * len(nodes), set(known)
    progress = True
    while progress and len(order) < len(nodes):
        progress = False
        for k, node in enumerate(nodes):  # stable: the first ready node in file order
            if not done[k] and all(n in avail or n not in produced for n in needs[k]):
                done[k] = progress = True
                order.append(node)
                avail.update(o for o in node.output if o)
    if len(order) < len(nodes):
        stuck = [_label(n, k) for k, n in enumerate(nodes) if not done[k]][:5]
        raise ModelError(f"graph {path!r} has a cycle: nodes {stuck} wait on each other")
    del graph.node[:]
    graph.node.extend(order)
    for k, node in enumerate(graph.node):
        for a in node.attribute:
            for g in _subgraphs(a):
                _sort_graph(g, avail, f"{path}/{_label(node, k)}.{a.name}")


def topologically_sorted(model: Any) -> Any:
    """A copy of ``model`` whose graphs (subgraphs included) list each node after the nodes
    that make its inputs, keeping file order where it is already valid; onnxruntime runs a
    model in any order, onnx's checker and qcore's graph walks want this one."""
    onnx = _onnx()
    out = onnx.ModelProto()
    out.CopyFrom(model)
    _sort_graph(out.graph, set(), MAIN)
    return out


# ---------------------------------------------------------------------------------------------
# external data


def _all_tensors(model: Any):
    """Every TensorProto of the model: initializers of every graph and Constant values."""
    for _, graph in iter_graphs(model.graph):
        yield from graph.initializer
        for node in graph.node:
            for a in node.attribute:
                if a.type == 4:
                    yield a.t


def check_external_data(model: Any, folder: str | Any) -> None:
    """Refuse external data that names a file outside the model's ``folder`` (or a link out of
    it), a missing file, or an offset / length that is not a non-negative decimal inside the
    file — before anything is read (the report's rule, :mod:`qcore.report.sources`)."""
    from pathlib import Path

    base = Path(folder).resolve()
    for t in _all_tensors(model):
        if t.data_location != 1:
            continue
        info = {e.key: e.value for e in t.external_data}
        location = info.get("location", "")
        target = (base / location).resolve()
        if not location or base not in target.parents:
            raise ModelError(f"tensor {t.name!r} names external data {location!r} outside the "
                             f"model's folder")
        if not target.is_file():
            raise ModelError(f"tensor {t.name!r}: its external data file {location!r} is "
                             f"missing")
        size = target.stat().st_size
        fields = {}
        for key in ("offset", "length"):
            text = info.get(key, "0" if key == "offset" else str(size))
            if not (text.isascii() and text.isdigit() and len(text) <= 20):
                raise ModelError(f"tensor {t.name!r} has external-data {key} {text!r}; it must "
                                 f"be a non-negative decimal integer")
            fields[key] = int(text)
        if fields["offset"] + (fields["length"] if "length" in info else 0) > size:
            raise ModelError(f"tensor {t.name!r} needs bytes {fields['offset']}.."
                             f"{fields['offset'] + fields['length']} of {location!r}, which "
                             f"has {size}; it is truncated")
