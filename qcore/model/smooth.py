"""SmoothQuant: moving activation outliers into the weights before the sites are quantized.

**Smoothing** (:func:`smooth_model`, SmoothQuant): per input channel j of a site,
s_j = max|x_j|^α / max|W_j|^(1−α) over the site's weight consumers; the site is divided by s
(folded into the producing LayerNormalization's gamma and beta where only the weight consumers
read it, else a ``Mul`` by 1/s) and each weight's row j is multiplied by s_j, so the float
product is unchanged while activation outliers move into the weights.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import QuantizationError
from . import require
from .graph import fresh_name, graph_names
from .sites import find_sites, rewire, weight_names
from .staged import runner_for

__all__ = ["Smoothing", "smooth_model", "smoothed_case"]


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
    from .graph import readers_of

    out = topologically_sorted(model)
    g = out.graph
    taken = graph_names(g)
    inits = {t.name: t for t in g.initializer}
    readers = readers_of(g)
    producer = {o: n for n in g.node for o in n.output}
    outputs = {o.name for o in g.output}
    info = Smoothing(float(alpha))
    weights = weight_names(g)
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
            rewire(g, [site], {site.name: new})
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
                        case.threads, case.outputs, getattr(case, "views", None))
        wrong = [s for s in upstream if not _divided(runner_for(case).site_values(s),
                                                     runner_for(new).site_values(s),
                                                     info.factors[s])]
    except QuantizationError:  # a fold that broke the graph's shapes: fold none upstream
        wrong = upstream
    if wrong:  # a layout op permuted the channels: those sites take a Mul
        model, info = smooth_model(case.model, values, alpha, no_fold=wrong)
        new = ModelCase(case.name, model, case.batches, case.kind, case.order, case.weights,
                        case.threads, case.outputs, getattr(case, "views", None))
    new.reference = case.reference
    return new, info


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
