"""Deployable graph forms: the export written the way onnxruntime turns it into integer kernels.

The plain QDQ export (:mod:`qcore.model.export`) puts a ``DequantizeLinear`` before every
planned weight; onnxruntime then dequantizes on every inference and runs the float kernel.
:func:`deployable_export` writes, per weight-consuming node (MatMul, or Gemm with ``transA=0``,
``alpha=beta=1``), the form onnxruntime 1.2x/1.3x fuses (docs/model.md, "Export forms"):

- ``matmulnbits-node`` — a weight-only int4/uint4 recipe blocked along K by a power of two
  ≥ 16 that divides K (the default ``nbits_form``): the MatMul (with the bias Add after it)
  or Gemm (with its C) becomes one ``com.microsoft`` ``MatMulNBits`` node, written as
  ``onnxruntime.quantization.matmul_nbits_quantizer`` writes it — B packed [N, K/block,
  block/2] uint8 (two codes a byte, the lower k in the low nibble), scales [N, K/block], and
  packed uint4 zero points [N, ⌈(K/block)/2⌉] when not the implicit 8 (int4 codes are stored
  as code + 8), a bias of N values as input 5 (another bias shape keeps its Add; a Gemm with
  one takes ``dq-matmul``). ``accuracy_level`` is left unset (0), as onnxruntime's quantizer
  leaves it: onnxruntime's QDQ fusion sets 4 (``session.qdq_matmulnbits_accuracy_level``),
  which on this host runs slower than float, while the unset level runs the float-compute
  kernel.
- ``dq-matmul`` — a weight-only recipe with integer codes of 4 or 8 bits (int4, uint4, int8,
  uint8), per output channel or blocked along K with a power-of-two block ≥ 16 (int4/uint4
  blocked ones only with ``nbits_form="dq-matmul"``): the standard-ONNX form, the codes stored
  [K, N] and ``DequantizeLinear(axis=1)`` or ``DequantizeLinear(axis=0, block_size)`` feeding
  MatMul (or Gemm with ``transB=0``). A Gemm with ``transB=1`` gets the transposed codes
  and ``transB=0``: onnxruntime fuses DQ → Gemm only without the transpose. Fused into
  ``MatMulNBits`` (at the session's QDQ accuracy level).
- ``dynamic`` — the activation site is dynamic (``ActivationSpec(site, "dynamic", "uint8")``)
  and the weight int8/uint8 per-tensor or per output channel: ``DynamicQuantizeLinear`` →
  ``MatMulInteger`` (uint8 activations × [K, N] codes, weight zero point where not zero) →
  ``Cast`` → ``Mul`` by ``Mul(a_scale, w_scale)`` (→ ``Add`` of a Gemm's bias): the form
  ``onnxruntime.quantization.quantize_dynamic`` writes. Fused into ``DynamicQuantizeMatMul`` /
  ``MatMulIntegerToFloat``.
- ``static`` — the activation site is static int8/uint8 and the weight int8/uint8 per-tensor or
  per output channel: ``QuantizeLinear`` → ``DequantizeLinear`` on the activation, the weight's
  ``DequantizeLinear``, and the bias (Gemm's C, or the Add after a MatMul) as int32 codes at
  scale a_scale × w_scale through a ``DequantizeLinear`` — what ``quantize_static`` writes. With a
  float bias onnxruntime first folds MatMul + Add into a float Gemm and nothing fuses; with the
  int32 bias the group fuses into ``QGemm`` (``MatMulIntegerToFloat`` / ``QLinearMatMul``
  without a bias).
- ``static`` on a Conv — the same form for a Conv weight (O, I/g, k…) read as input W of a
  Conv whose output is quantized next: activation ``QuantizeLinear`` → ``DequantizeLinear`` on
  X, the weight's int8/uint8 codes per output channel (``DequantizeLinear(axis=0)``), the bias
  as int32 codes round(b / (x_scale · w_scale)) through ``DequantizeLinear(axis=0)`` — what
  ``quantize_static`` writes for a QDQ Conv. onnxruntime fuses a Conv into ``QLinearConv`` only
  when a ``QuantizeLinear`` reads its output, so the form is taken where the Conv's output is
  read only by static 8-bit activation sites (a following Conv, MatMul or Gemm), directly or
  through one ``Relu``: there the export puts the next site's QuantizeLinear → DequantizeLinear
  before the Relu as well (Relu commutes with a quantizer whose codes keep 0 exact, so the
  outputs are unchanged bit for bit). A Conv whose output goes anywhere else (BatchNormalization,
  Add, a graph output) gets the plain export: nothing would fuse.
- ``qdq`` — any other activation spec (float8 static, or a weight the integer kernels do not
  take): the activation's QuantizeLinear → DequantizeLinear (static) or DynamicQuantizeLinear →
  DequantizeLinear (dynamic) and the weight's DequantizeLinear; it runs, nothing fuses.
- ``dq`` — any other weight-only recipe: the plain DequantizeLinear (nothing fuses).

Weights are quantized along their role: a MatMul weight is [K, N] (per-axis on axis 1, blocks
along axis 0), a Gemm weight is (N, K) with ``transB=1`` (per-axis on axis 0, blocks along 1) —
the layout the kernels expect. :data:`FUSED_OPS` names the kernels each form should become;
:func:`fused_op_counts` reads them from the model onnxruntime optimizes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import QuantizationError
from ..formats import get_format
from ..layout import BLOCKED, PER_AXIS, PER_TENSOR
from ..report.recipes import (
    Recipe,
    parse_recipe,
)
from . import require
from .activations import ActivationSpec
from .fidelity import FLOAT, Quantized, qdq
from .graph import (
    ModelError,
    fresh_name,
    graph_names,
    initializer_arrays,
    model_opset,
    readers_of,
    set_opset,
    tensor_proto,
)

__all__ = ["FORMS", "FUSED_OPS", "NBITS_FORMS", "Deployable", "WeightUse", "conv_uses",
           "deployable_export", "form_of", "fused_op_counts", "optimized_model", "pack_nbits",
           "qdq_along", "weight_uses"]

#: The export forms (module doc).
FORMS = ("matmulnbits-node", "dq-matmul", "dynamic", "static", "qdq", "dq")
#: How an int4/uint4 weight blocked along K is written (``deployable_export``'s ``nbits_form``).
NBITS_FORMS = ("matmulnbits-node", "dq-matmul")
#: The onnxruntime kernels each form fuses into (empty: nothing fuses).
FUSED_OPS: dict[str, frozenset[str]] = {
    "matmulnbits-node": frozenset({"MatMulNBits"}),
    "dq-matmul": frozenset({"MatMulNBits"}),
    "dynamic": frozenset({"DynamicQuantizeMatMul", "MatMulIntegerToFloat"}),
    "static": frozenset({"QGemm", "QLinearMatMul", "MatMulIntegerToFloat", "QLinearConv"}),
    "qdq": frozenset(),
    "dq": frozenset(),
}
#: Integer code types MatMulNBits takes from a blocked DequantizeLinear.
NBITS_TYPES = ("int4", "uint4", "int8", "uint8")
_EIGHT_BIT = ("int8", "uint8")


@dataclass(frozen=True)
class WeightUse:
    """A weight read as input B of one MatMul or Gemm: ``kn`` when stored [K, N] (MatMul, Gemm
    with transB=0), else (N, K); ``bias``: Gemm's C, or the constant added right after a
    MatMul (by the Add node ``add``)."""

    node: str
    op: str
    kn: bool
    bias: str | None = None
    add: str | None = None

    @property
    def output_axis(self) -> int:
        return 1 if self.kn else 0

    @property
    def reduction_axis(self) -> int:
        return 0 if self.kn else 1


def _node_id(n: Any, i: int) -> str:
    return n.name or f"#{i}:{n.output[0]}"


def weight_uses(model: Any) -> dict[str, WeightUse]:
    """The 2-D initializers read once, as input B of a MatMul or of a Gemm with transA=0 and
    alpha = beta = 1 (the nodes whose forms this module rewrites)."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    consumers = readers_of(g)
    out: dict[str, WeightUse] = {}
    for k, n in enumerate(g.node):
        if n.op_type not in ("MatMul", "Gemm") or len(n.input) < 2:
            continue
        w = n.input[1]
        t = inits.get(w)
        if t is None or len(t.dims) != 2 or len(consumers.get(w, [])) != 1 \
                or t.data_type != 1:
            continue
        if n.op_type == "Gemm":
            a = {x.name: (x.i if x.type == 2 else x.f) for x in n.attribute}
            if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
                continue
            bias = n.input[2] if len(n.input) > 2 and n.input[2] in inits else None
            out[w] = WeightUse(_node_id(n, k), "Gemm", not a.get("transB", 0), bias)
            continue
        bias = add = None
        after = consumers.get(n.output[0], [])
        if len(after) == 1 and after[0].op_type == "Add":
            other = [i for i in after[0].input if i != n.output[0]]
            if len(other) == 1 and other[0] in inits and len(inits[other[0]].dims) == 1:
                bias, add = other[0], _node_id(after[0], list(g.node).index(after[0]))
        out[w] = WeightUse(_node_id(n, k), "MatMul", True, bias, add)
    return out


def conv_uses(model: Any) -> dict[str, WeightUse]:
    """The float32 initializers of rank ≥ 3 read once, as input W of a Conv of the main graph
    (output axis 0), with the Conv's bias when it is an initializer."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    consumers = readers_of(g)
    out: dict[str, WeightUse] = {}
    for k, n in enumerate(g.node):
        if n.op_type != "Conv" or len(n.input) < 2:
            continue
        t = inits.get(n.input[1])
        if (t is None or len(t.dims) < 3 or len(consumers.get(n.input[1], [])) != 1
                or t.data_type != 1):
            continue
        bias = n.input[2] if len(n.input) > 2 and n.input[2] in inits else None
        out[n.input[1]] = WeightUse(_node_id(n, k), "Conv", False, bias)
    return out


def _static_8bit(spec: ActivationSpec | None) -> bool:
    return spec is not None and spec.mode == "static" and spec.dtype in _EIGHT_BIT


def _requantized_output(model: Any, node: Any,
                        acts: Mapping[str, ActivationSpec]) -> tuple[str, str | None] | None:
    """(the site that quantizes ``node``'s output, the id of the Relu between them or None) when
    the
    output is read only as the data input of MatMul/Gemm/Conv nodes at a static 8-bit site —
    directly or through one Relu — and is no graph output; else None (no QuantizeLinear would
    follow the node, so onnxruntime could not fuse it)."""
    g = model.graph
    outputs = {o.name for o in g.output}
    consumers = readers_of(g)

    def quantized_site(v: str) -> bool:
        readers = consumers.get(v, [])
        return (v not in outputs and _static_8bit(acts.get(v)) and bool(readers)
                and all(r.op_type in ("MatMul", "Gemm", "Conv") and r.input[0] == v
                        and list(r.input).count(v) == 1 for r in readers))

    y = node.output[0]
    if quantized_site(y):
        return y, None
    readers = consumers.get(y, [])
    if (y not in outputs and len(readers) == 1 and readers[0].op_type == "Relu"
            and quantized_site(readers[0].output[0])):
        k = next(k for k, n in enumerate(g.node) if n.output[0] == readers[0].output[0])
        return readers[0].output[0], _node_id(readers[0], k)
    return None


def qdq_along(x: np.ndarray, recipe: Recipe | str, output_axis: int, reduction_axis: int
              ) -> Quantized:
    """:func:`qcore.model.fidelity.qdq` with the weight's role given as axes: per-axis scales
    along ``output_axis``, blocks along ``reduction_axis``."""
    from ..io.onnx import Role

    return qdq(x, recipe, Role("export", output_axis, reduction_axis))


def _nbits(r: Recipe) -> bool:
    """Integer codes of 4 or 8 bits, per output channel or blocked along K by a power of two
    ≥ 16: what onnxruntime's DQ → MatMul fusion into MatMulNBits takes."""
    if r.mx or r.target not in NBITS_TYPES:
        return False
    b = r.block_size
    return r.granularity == PER_AXIS or (r.granularity == BLOCKED and b >= 16
                                         and b & (b - 1) == 0)


def _integer_weight(r: Recipe) -> bool:
    return r.target in _EIGHT_BIT and r.granularity in (PER_TENSOR, PER_AXIS) and not r.mx


def _nbits_node(r: Recipe) -> bool:
    """int4/uint4 blocked along K by a power of two ≥ 16: what one MatMulNBits node holds."""
    return _nbits(r) and r.granularity == BLOCKED and r.target in ("int4", "uint4")


def form_of(recipe: Recipe | str, spec: ActivationSpec | None,
            nbits_form: str = "matmulnbits-node") -> str:
    """The form (:data:`FORMS`) a weight of this recipe, read by a node whose activation site
    has ``spec``, is exported in; ``nbits_form`` (:data:`NBITS_FORMS`) for int4/uint4 blocked
    along K."""
    if nbits_form not in NBITS_FORMS:
        raise QuantizationError(f"nbits_form {nbits_form!r}: valid are {', '.join(NBITS_FORMS)}")
    r = parse_recipe(recipe) if isinstance(recipe, str) else recipe
    if spec is not None:
        if spec.mode == "dynamic" and _integer_weight(r):
            return "dynamic"
        if _static_8bit(spec) and _integer_weight(r):
            return "static"
        return "qdq"
    if _nbits_node(r) and nbits_form == "matmulnbits-node":
        return "matmulnbits-node"
    return "dq-matmul" if _nbits(r) else "dq"


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


class _Writer:
    """Collects the new nodes and initializers of one export; every new name is fresh (never
    one the model already uses, :func:`qcore.model.graph.fresh_name`), the same logical name
    giving the same fresh one."""

    def __init__(self, helper: Any, taken: set[str]) -> None:
        self.helper = helper
        self.nodes_before: dict[str, list[Any]] = {}  # inserted before the node of that id
        self.inits: list[Any] = []
        self.taken = taken
        self.alias: dict[str, str] = {}

    def name(self, base: str) -> str:
        if base not in self.alias:
            self.alias[base] = fresh_name(base, self.taken)
        return self.alias[base]

    def init(self, name: str, a: np.ndarray) -> str:
        if name not in self.alias:
            self.inits.append(tensor_proto(a, self.name(name)))
        return self.alias[name]

    def node(self, before: str, op: str, inputs: list[str], outputs: list[str],
             name: str, **attrs: Any) -> None:
        self.nodes_before.setdefault(before, []).append(
            self.helper.make_node(op, inputs, outputs, name=self.name(name), **attrs))


def _static_params(spec: ActivationSpec) -> tuple[np.ndarray, np.ndarray | None]:
    if spec.scale is None:
        raise QuantizationError(f"activation site {spec.site!r}: a static spec needs a scale "
                                "(calibrate it first)")
    scale = np.asarray(spec.scale, np.float32)
    fmt = get_format(spec.dtype)
    zp = spec.zero_point
    if zp is None:  # a zero point of the target type names QuantizeLinear's output type
        zp = np.zeros(scale.shape, fmt.dtype)
    return scale, np.asarray(zp, fmt.dtype)


def _bias_length(model: Any, name: str | None) -> int | None:
    """The number of values of the 1-D initializer ``name`` (None for none or another rank)."""
    t = next((t for t in model.graph.initializer if t.name == name), None)
    return int(t.dims[0]) if t is not None and len(t.dims) == 1 else None


def pack_nbits(q: Quantized) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(B, scales, zero_points) of a ``MatMulNBits`` node for 4-bit codes ``q`` blocked along
    axis 0 of a [K, N] weight, in the layout ``onnxruntime.quantization.matmul_nbits_quantizer``
    writes: B [N, K/block, block/2] uint8 with element 2i in the low nibble and 2i+1 in the
    high one; scales [N, K/block] float32; zero points as uint4 codes packed two a byte per
    column, [N, ⌈(K/block)/2⌉], or None where every one is the implicit 8. int4 codes are
    stored as code + 8 (MatMulNBits reads unsigned codes), their zero point 0 as 8."""
    codes = np.asarray(q.y).astype(np.int16)
    k, n = codes.shape
    block = int(q.block_size)
    if q.axis != 0 or not block or k % block:
        raise QuantizationError(f"MatMulNBits packing needs codes blocked along axis 0 by a "
                                f"block dividing K={k}; got axis {q.axis}, block {block}")
    signed = np.dtype(q.y.dtype).name == "int4"
    shift = 8 if signed else 0
    u = (codes + shift).astype(np.uint8).T.reshape(n, k // block, block // 2, 2)
    packed = (u[..., 0] | (u[..., 1] << 4)).astype(np.uint8)
    scales = np.ascontiguousarray(np.asarray(q.scale, np.float32).T)
    if q.zero_point is None:
        zp = np.full(scales.shape, shift, np.uint8)
    else:
        zp = (np.asarray(q.zero_point).astype(np.int16) + shift).astype(np.uint8).T
    if np.all(zp == 8):
        return packed, scales, None
    nb = zp.shape[1]
    if nb % 2:
        zp = np.concatenate([zp, np.zeros((n, 1), np.uint8)], axis=1)
    zpp = (zp[:, 0::2] | (zp[:, 1::2] << 4)).astype(np.uint8)
    return packed, scales, np.ascontiguousarray(zpp[:, : (nb + 1) // 2])


def deployable_export(model: Any, recipes: Mapping[str, str],
                      weights: Mapping[str, np.ndarray] | None = None,
                      activations: Mapping[str, ActivationSpec] | None = None,
                      nbits_form: str = "matmulnbits-node") -> Deployable:
    """A copy of ``model`` with each weight of ``recipes`` (name → recipe; ``float32`` left
    as is) and each activation site of ``activations`` (site → spec) written in the form
    onnxruntime fuses (module doc); ``nbits_form`` (:data:`NBITS_FORMS`) picks how int4/uint4
    weights blocked along K are written. Weights in the ``dq`` form — and weights not read as a
    float32 MatMul / Gemm B of the main graph (subgraphs, Constant nodes, half types, Conv,
    Gather, …) — take the plain export (:func:`qcore.model.export.export_plan`), which puts
    each where it lives."""
    onnx = require("onnx")
    from onnx import TensorProto, helper, numpy_helper

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
            node = next(n for k, n in enumerate(model.graph.node) if _node_id(n, k) == use.node)
            spec = acts.get(node.input[0])
        form = form_of(r, spec, nbits_form) if use is not None else "dq"
        if use is not None and use.op == "Conv" and (
                form != "static" or _requantized_output(model, node, acts) is None):
            form = "dq"  # a Conv fuses only in the static form, followed by a quantizer
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
    ids = [_node_id(n, k) for k, n in enumerate(nodes)]
    by_id = dict(zip(ids, nodes))
    w = _Writer(helper, graph_names(model.graph))
    quantized: dict[str, Quantized] = dict(plain)
    drop_inits: set[str] = set(planned)
    replaced: dict[str, list[Any]] = {}  # node id -> the nodes standing for it
    attr_changes: dict[str, dict[str, int]] = {}
    input_changes: dict[str, dict[int, str]] = {}
    static_sites: dict[tuple[str, str], str] = {}
    dynamic_sites: dict[str, tuple[str, str, str]] = {}
    uses_ms = False
    opset_needs = [model_opset(model)]

    def dequantize(name: str, q: Quantized, out: str, before: str) -> None:
        ins = [w.init(name + ".codes", q.y), w.init(name + ".scale", q.scale)]
        if q.zero_point is not None:
            ins.append(w.init(name + ".zero_point", q.zero_point))
        attrs: dict[str, int] = {}
        if q.granularity != PER_TENSOR:
            attrs["axis"] = q.axis
        if q.block_size:
            attrs["block_size"] = q.block_size
        if np.dtype(q.scale.dtype) != np.float32:  # float8e8m0 scales name the output type
            attrs["output_dtype"] = TensorProto.FLOAT
            opset_needs.append(23)
        w.node(before, "DequantizeLinear", ins, [out], name + ".dequantize", **attrs)
        opset_needs.append(q.opset)

    def activation_qdq(site: str, spec: ActivationSpec, before: str) -> str:
        """The site's quantize → dequantize (one per consumer: QDQ groups want their own)."""
        out = w.name(f"{site}.qdq.{before}")
        if spec.mode == "dynamic":
            q, s, z = dynamic_quantize(site, before)
            w.node(before, "DequantizeLinear", [q, s, z], [out], out + ".dequantize")
            return out
        scale, zp = _static_params(spec)
        key = (site, spec.dtype)
        ins = [w.init(site + ".scale", scale), w.init(site + ".zero_point", zp)]
        opset_needs.append(spec.opset)
        if key not in static_sites:
            static_sites[key] = w.name(site + ".quantized")
            w.node(before, "QuantizeLinear", [site] + ins, [static_sites[key]],
                   site + ".quantize")
        w.node(before, "DequantizeLinear", [static_sites[key]] + ins, [out],
               out + ".dequantize")
        return out

    def dynamic_quantize(site: str, before: str) -> tuple[str, str, str]:
        if site not in dynamic_sites:
            outs = (w.name(site + ".quantized"), w.name(site + ".dynamic_scale"),
                    w.name(site + ".dynamic_zero_point"))
            w.node(before, "DynamicQuantizeLinear", [site], list(outs), site + ".dynamic")
            dynamic_sites[site] = outs
        return dynamic_sites[site]

    for t, recipe in planned.items():
        r = parse_recipe(recipe)
        use = uses[t]
        x = np.asarray(weights[t], np.float32)
        node = by_id[use.node]
        site = node.input[0]
        spec = acts.get(site)
        form = form_of(r, spec, nbits_form)
        n_bias = _bias_length(model, use.bias)
        if form == "matmulnbits-node" and (
                x.shape[0 if use.kn else 1] % r.block_size
                or use.op == "Gemm" and use.bias is not None
                and n_bias != x.shape[1 if use.kn else 0]):
            form = "dq-matmul"  # a ragged last block (MatMulNBits would pad), a broadcast C
        forms[t] = form
        transpose = form in ("matmulnbits-node", "dq-matmul", "dynamic") and not use.kn
        xk = np.ascontiguousarray(x.T) if transpose else x
        kn = use.kn or transpose
        q = qdq_along(xk, r, 1 if kn else 0, 0 if kn else 1)
        quantized[t] = q
        if transpose:  # the Gemm reads the [K, N] weight: transB=0
            attr_changes.setdefault(use.node, {})["transB"] = 0
        if form == "matmulnbits-node":
            packed, scales, zps = pack_nbits(q)
            k, n_out = xk.shape
            ins = [site, w.init(t + ".nbits", packed), w.init(t + ".nbits_scales", scales)]
            ins.append(w.init(t + ".nbits_zero_points", zps) if zps is not None else "")
            y = node.output[0]
            if use.bias is not None and n_bias == xk.shape[1]:  # input 4 (g_idx) absent
                ins += ["", use.bias]
                if use.add is not None:  # the Add after a MatMul goes into the node
                    y = by_id[use.add].output[0]
                    replaced[use.add] = []
            while ins[-1] == "":
                ins.pop()
            replaced[use.node] = [helper.make_node(
                "MatMulNBits", ins, [y], name=w.name(t + ".matmulnbits"),
                domain="com.microsoft", K=k, N=n_out, bits=4, block_size=int(q.block_size))]
            uses_ms = True
            continue
        if form == "dq-matmul":
            dequantize(t, q, t, use.node)
            continue
        if form == "qdq":
            dequantize(t, q, t, use.node)
            input_changes.setdefault(use.node, {})[0] = activation_qdq(site, spec, use.node)
            continue
        if form == "static" and use.op == "Conv":  # requantized before its Relu, if any
            after, relu = _requantized_output(model, node, acts)
            if relu is not None and relu not in input_changes:
                rq = w.name(f"{after}.before_relu")
                rsc, rzp = _static_params(acts[after])
                ins = [w.init(after + ".scale", rsc), w.init(after + ".zero_point", rzp)]
                w.node(relu, "QuantizeLinear", [by_id[relu].input[0]] + ins,
                       [w.name(rq + ".codes")], rq + ".quantize")
                w.node(relu, "DequantizeLinear", [w.name(rq + ".codes")] + ins, [rq],
                       rq + ".dequantize")
                input_changes.setdefault(relu, {})[0] = rq
        if form == "static":
            dequantize(t, q, t, use.node)
            a_scale, _ = _static_params(spec)
            input_changes.setdefault(use.node, {})[0] = activation_qdq(site, spec, use.node)
            if use.bias is not None:  # int32 bias at a_scale × w_scale (what QGemm reads)
                b = np.asarray(numpy_helper.to_array(next(
                    i for i in model.graph.initializer if i.name == use.bias)), np.float64)
                bscale = (np.float32(a_scale) * np.asarray(q.scale, np.float32)).astype(
                    np.float32)
                bscale = np.broadcast_to(bscale.reshape(-1), b.shape).astype(np.float32)
                bq = np.clip(np.rint(b / bscale), -2**31, 2**31 - 1).astype(np.int32)
                bname = w.name(f"{use.bias}.int32")
                ins = [w.init(bname + ".codes", bq), w.init(bname + ".scale", bscale)]
                target = use.add if use.add is not None else use.node
                w.node(target, "DequantizeLinear", ins, [bname], bname + ".dequantize",
                       axis=0)
                idx = 2 if use.add is None else list(by_id[use.add].input).index(use.bias)
                input_changes.setdefault(target, {})[idx] = bname
                if sum(1 for n in nodes for i in n.input if i == use.bias) == 1:
                    drop_inits.add(use.bias)
            continue
        # dynamic: DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul (-> Add bias)
        xq, xs, xz = dynamic_quantize(site, use.node)
        ins = [xq, w.init(t + ".codes", q.y), xz]
        if q.zero_point is not None and np.any(np.asarray(q.zero_point).astype(np.int64)):
            ins.append(w.init(t + ".zero_point", np.asarray(q.zero_point).reshape(-1)
                              if q.granularity == PER_AXIS else q.zero_point))
        wscale = np.asarray(q.scale, np.float32)
        wscale = wscale.reshape(-1) if q.granularity == PER_AXIS else wscale
        sname = w.init(t + ".scale", wscale)
        out = node.output[0]
        n = {k: w.name(f"{t}.integer{k}") for k in ("", ".int32", ".float", ".scales",
                                                      ".product", ".cast", ".rescale", ".bias",
                                                      ".scales_mul")}
        new = [helper.make_node("MatMulInteger", ins, [n[".int32"]], name=n[""]),
               helper.make_node("Cast", [n[".int32"]], [n[".float"]], name=n[".cast"],
                                to=TensorProto.FLOAT),
               helper.make_node("Mul", [xs, sname], [n[".scales"]], name=n[".scales_mul"]),
               helper.make_node("Mul", [n[".float"], n[".scales"]],
                                [out if use.op == "MatMul" or use.bias is None
                                 else n[".product"]], name=n[".rescale"])]
        if use.op == "Gemm" and use.bias is not None:
            new.append(helper.make_node("Add", [n[".product"], use.bias], [out],
                                        name=n[".bias"]))
        replaced[use.node] = new

    # activation sites of nodes whose weight stays float (or is not planned): plain QDQ
    done_sites = {by_id[uses[t].node].input[0] for t in planned if t in uses}
    for k, n in enumerate(nodes):
        if n.op_type not in ("MatMul", "Gemm", "Conv") or not n.input:
            continue
        site = n.input[0]
        if site in acts and site not in done_sites and _node_id(n, k) not in input_changes:
            input_changes.setdefault(_node_id(n, k), {})[0] = activation_qdq(
                site, acts[site], _node_id(n, k))

    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    keep = [t for t in g.initializer if t.name not in drop_inits]
    del g.initializer[:]
    g.initializer.extend(keep + w.inits)
    new_nodes = []
    for nid, n in zip(ids, nodes):
        new_nodes.extend(w.nodes_before.get(nid, []))
        if nid in replaced:
            new_nodes.extend(replaced[nid])
            continue
        n2 = type(n)()
        n2.CopyFrom(n)
        for idx, name in input_changes.get(nid, {}).items():
            n2.input[idx] = name
        for a in n2.attribute:
            if a.name in attr_changes.get(nid, {}):
                a.i = attr_changes[nid][a.name]
        for name, v in attr_changes.get(nid, {}).items():
            if not any(a.name == name for a in n2.attribute):
                n2.attribute.append(helper.make_attribute(name, v))
        new_nodes.append(n2)
    del g.node[:]
    g.node.extend(_toposort(new_nodes, {i.name for i in g.input} | {t.name for t in
                                                                      g.initializer}))
    opset = max(opset_needs)
    set_opset(out, opset)
    # an IR < 4 model lists its initializers as graph inputs (the rule then); the export's IR
    # has no such rule: none is an input, and a replaced weight is no tensor at all
    listed = drop_inits | ({t.name for t in g.initializer}
                           if model.ir_version < 4 <= out.ir_version else set())
    inputs = [i for i in g.input if i.name not in listed]
    del g.input[:]
    g.input.extend(inputs)
    if uses_ms and not any(o.domain == "com.microsoft" for o in out.opset_import):
        out.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    try:
        onnx.checker.check_model(out)
    except Exception as exc:  # noqa: BLE001
        raise ModelError(f"the deployable export fails onnx.checker at opset {opset}: "
                         f"{str(exc).splitlines()[0]}") from None
    return Deployable(out, forms, quantized, sorted({s for s in acts if s in done_sites}
                                                    | {s for s, _ in static_sites}
                                                    | set(dynamic_sites)))


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
