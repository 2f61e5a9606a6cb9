"""What every export form writes with: the :class:`Form` descriptor the registry
(:mod:`qcore.model.forms`) holds, and :class:`Export`, one export's new nodes, initializers and
rewired inputs, with the pieces several forms share (a weight's ``DequantizeLinear``, an
activation's quantize → dequantize)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import QuantizationError
from ...formats import get_format
from ...layout import PER_TENSOR
from ...recipes import Recipe
from ..fidelity import Quantized, qdq
from ..graph import fresh_name, tensor_proto
from ..sites import ActivationSpec
from .uses import WeightUse

__all__ = ["Export", "Form", "Job", "Writer", "bias_length", "qdq_along", "static_params"]


@dataclass(frozen=True)
class Form:
    """One export form: its ``name`` (what ``Deployable.forms`` records), the node ``ops`` it
    rewrites, which activation site it takes (``activation``: a test of the site's spec, None
    when the weight-consuming node's input stays float) and which weights (``weights``: a test
    of the recipe and the ``nbits_form`` asked for), the onnxruntime kernels it ``fuses`` into,
    whether it reads the weight as [K, N] (``kn``: a Gemm with transB=1 is transposed), and
    ``write(export, job)`` (:class:`Job`), which writes it (None: the plain export,
    :func:`qcore.model.export.export_plan`, writes it). ``where(model, node, activations)``:
    a further test on the node (None: every node of ``ops``); ``demote(recipe, use, x, n_bias)``:
    the form to take instead for a weight this one cannot hold (None: it holds every one)."""

    name: str
    ops: tuple[str, ...]
    activation: Callable[[ActivationSpec | None], bool]
    weights: Callable[[Any, str], bool]
    fuses: frozenset[str]
    write: Callable[..., None] | None
    kn: bool = False
    where: Callable[[Any, Any, Any], bool] | None = None
    demote: Callable[[Any, WeightUse, np.ndarray, int | None], str | None] | None = None


@dataclass(frozen=True)
class Job:
    """One weight to write: its ``tensor`` name, ``x`` as the form reads it ([K, N] where the
    form says ``kn``), its codes ``q``, its ``use``, the consuming ``node``, the node's activation
    ``site`` and ``spec`` (None: float), and ``n_bias`` (the bias's length, None without one)."""

    tensor: str
    x: np.ndarray
    q: Quantized
    use: WeightUse
    node: Any
    site: str
    spec: ActivationSpec | None
    n_bias: int | None


def no_site(spec: ActivationSpec | None) -> bool:
    """The node's input stays float (a weight-only form)."""
    return spec is None


def any_weight(recipe: Any, nbits_form: str) -> bool:
    return True


def qdq_along(x: np.ndarray, recipe: Recipe | str, output_axis: int, reduction_axis: int
              ) -> Quantized:
    """:func:`qcore.model.fidelity.qdq` with the weight's role given as axes: per-axis scales
    along ``output_axis``, blocks along ``reduction_axis``."""
    from ...io.onnx import Role

    return qdq(x, recipe, Role("export", output_axis, reduction_axis))


class Writer:
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


def static_params(spec: ActivationSpec) -> tuple[np.ndarray, np.ndarray | None]:
    if spec.scale is None:
        raise QuantizationError(f"activation site {spec.site!r}: a static spec needs a scale "
                                "(calibrate it first)")
    scale = np.asarray(spec.scale, np.float32)
    fmt = get_format(spec.dtype)
    zp = spec.zero_point
    if zp is None:  # a zero point of the target type names QuantizeLinear's output type
        zp = np.zeros(scale.shape, fmt.dtype)
    return scale, np.asarray(zp, fmt.dtype)


def bias_length(model: Any, name: str | None) -> int | None:
    """The number of values of the 1-D initializer ``name`` (None for none or another rank)."""
    t = next((t for t in model.graph.initializer if t.name == name), None)
    return int(t.dims[0]) if t is not None and len(t.dims) == 1 else None


class Export:
    """One deployable export in progress: the model's nodes by id, the activation specs, and
    what the forms write — new nodes (``writer``), nodes replaced whole (``replaced``: node id →
    the nodes standing for it), inputs and attributes changed, initializers dropped, and the
    opsets and domains the result needs."""

    def __init__(self, model: Any, nodes: list[Any], ids: list[str],
                 acts: dict[str, ActivationSpec], writer: Writer, drop_inits: set[str]) -> None:
        from onnx import TensorProto, helper

        self.model = model
        self.nodes = nodes
        self.by_id = dict(zip(ids, nodes))
        self.acts = acts
        self.w = writer
        self.helper = helper
        self.TensorProto = TensorProto
        self.drop_inits = drop_inits
        self.replaced: dict[str, list[Any]] = {}  # node id -> the nodes standing for it
        self.attr_changes: dict[str, dict[str, int]] = {}
        self.input_changes: dict[str, dict[int, str]] = {}
        self.static_sites: dict[tuple[str, str], str] = {}
        self.dynamic_sites: dict[str, tuple[str, str, str]] = {}
        self.uses_ms = False
        self.opset_needs: list[int] = []

    def dequantize(self, name: str, q: Quantized, out: str, before: str) -> None:
        """The weight's codes, scale and zero point as initializers and its DequantizeLinear."""
        w = self.w
        ins = [w.init(name + ".codes", q.y), w.init(name + ".scale", q.scale)]
        if q.zero_point is not None:
            ins.append(w.init(name + ".zero_point", q.zero_point))
        attrs: dict[str, int] = {}
        if q.granularity != PER_TENSOR:
            attrs["axis"] = q.axis
        if q.block_size:
            attrs["block_size"] = q.block_size
        if np.dtype(q.scale.dtype) != np.float32:  # float8e8m0 scales name the output type
            attrs["output_dtype"] = self.TensorProto.FLOAT
            self.opset_needs.append(23)
        w.node(before, "DequantizeLinear", ins, [out], name + ".dequantize", **attrs)
        self.opset_needs.append(q.opset)

    def activation_qdq(self, site: str, spec: ActivationSpec, before: str) -> str:
        """The site's quantize → dequantize (one per consumer: QDQ groups want their own)."""
        w = self.w
        out = w.name(f"{site}.qdq.{before}")
        if spec.mode == "dynamic":
            q, s, z = self.dynamic_quantize(site, before)
            w.node(before, "DequantizeLinear", [q, s, z], [out], out + ".dequantize")
            return out
        scale, zp = static_params(spec)
        key = (site, spec.dtype)
        ins = [w.init(site + ".scale", scale), w.init(site + ".zero_point", zp)]
        self.opset_needs.append(spec.opset)
        if key not in self.static_sites:
            self.static_sites[key] = w.name(site + ".quantized")
            w.node(before, "QuantizeLinear", [site] + ins, [self.static_sites[key]],
                   site + ".quantize")
        w.node(before, "DequantizeLinear", [self.static_sites[key]] + ins, [out],
               out + ".dequantize")
        return out

    def dynamic_quantize(self, site: str, before: str) -> tuple[str, str, str]:
        """The site's one DynamicQuantizeLinear (codes, scale, zero point), made on first use."""
        w = self.w
        if site not in self.dynamic_sites:
            outs = (w.name(site + ".quantized"), w.name(site + ".dynamic_scale"),
                    w.name(site + ".dynamic_zero_point"))
            w.node(before, "DynamicQuantizeLinear", [site], list(outs), site + ".dynamic")
            self.dynamic_sites[site] = outs
        return self.dynamic_sites[site]
