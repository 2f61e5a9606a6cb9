"""Activation sites and their specs: what ``--activations`` asks for and where it applies.

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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import QuantizationError
from ..formats import get_format
from . import require

__all__ = ["ACTIVATION_TYPES", "ActivationConfig", "ActivationSpec", "METHODS", "Site",
           "WEIGHT_CONSUMERS", "find_sites", "parse_activations", "qdq_name", "rewire",
           "site_label", "weight_names"]

#: node type -> (data input index, weight input index)
WEIGHT_CONSUMERS = {"MatMul": (0, 1), "Gemm": (0, 1), "Conv": (0, 1), "ConvTranspose": (0, 1)}
#: Static code types (each a QuantizeLinear/DequantizeLinear output onnxruntime's CPU provider runs).
ACTIVATION_TYPES = ("int8", "uint8", "int16", "uint16", "float8e4m3fn", "float8e4m3fnuz",
                    "float8e5m2", "float8e5m2fnuz")
METHODS = ("minmax", "percentile", "mse", "entropy")
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
    head, _, given_method = t.partition("@")
    mode, _, given_dtype = head.partition(":")
    dtype, method = given_dtype or "int8", given_method or "minmax"
    for bad, why in ((mode != "static", f"unknown mode {mode!r}"),
                     ("@" in t and not given_method, "'@' needs a method"),
                     (":" in head and not given_dtype, "':' needs a type"),
                     (dtype not in ACTIVATION_TYPES, f"type {dtype!r} is not an activation type"),
                     (method not in METHODS,
                      f"method {method!r} is not a calibration method for activations")):
        if bad:  # the first that applies
            raise QuantizationError(f"--activations {text!r}: {why}; {valid}")
    return ActivationConfig("static", dtype, method)


@dataclass(frozen=True)
class Site:
    """A site tensor and the weight consumers that read it: (node's first output, input
    index, node type, weight name) each."""

    name: str
    consumers: tuple[tuple[str, int, str, str], ...]


def weight_names(graph: Any) -> set[str]:
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
    w = set(weights) if weights is not None else weight_names(g)
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


def rewire(graph: Any, sites: Sequence[Site], names: Mapping[str, str]) -> None:
    """Point each site's weight consumers at ``names[site]`` (in place)."""
    where = {(c[0], c[1]): s.name for s in sites if s.name in names for c in s.consumers}
    for n in graph.node:
        if not n.output:
            continue
        for i in range(len(n.input)):
            s = where.get((n.output[0], i))
            if s is not None and n.input[i] == s:
                n.input[i] = names[s]
