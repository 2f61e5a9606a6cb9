"""A conv net's start for the speed planner (:mod:`qcore.model.objectives`, steps 1-2): its
static layers costed in the chain from two profiled runs (:func:`planner_costs`), the
all-static chain taken where it times faster whole than the fastest start
(:func:`chain_or_start`), and the moves that cost no latency (:func:`latency_free_moves`).
``p`` is the planner's state (``objectives._Planner``: the prepared model, its layers, the
calibration values, ``export(forms, method)`` and ``sqnr(forms, method)``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from .costs import in_chain_costs, layer_costs, timed
from .forms.qlinear import chain_nodes

__all__ = ["chain_or_start", "latency_free_moves", "planner_costs"]


def planner_costs(p: Any, repeats: int, log: Callable[[str], None]
                  ) -> dict[str, dict[str, float]]:
    """Each layer's cost per form. A conv net's static layers are costed in the chain, from
    one profiled run of the float model and one of the export with every static-capable layer
    in ``qlinear`` (:func:`qcore.model.costs.in_chain_costs`: onnxruntime's static quantizer
    writes that export too, so the start fuses as well as it does); other layers are timed
    alone in each form (:func:`qcore.model.costs.layer_costs`)."""
    chain = [x for x in p.layers if "qlinear" in x.forms]
    alone = p.layers
    out: dict[str, dict[str, float]] = {}
    if any(x.op == "Conv" for x in chain):
        log(f"{len(p.layers)} layers; profiling the float model and the all-static export")
        forms = {x.name: "qlinear" for x in chain}
        owned = {x.name: chain_nodes(p.model, [x.name], p.types) for x in chain}
        elements = {t: int(v[0].size) for t, v in p.values.items()}
        out = in_chain_costs(p.model, p.export(forms, "minmax"), chain, owned, elements,
                             p.case.batches, p.case.threads)
        alone = [x for x in p.layers if x.name not in out]
    if alone:
        log(f"timing each form of {len(alone)} layers alone at the input shapes")
        out.update(layer_costs(p.model, alone, p.shapes, p.case.threads, repeats=repeats))
    return out


def chain_or_start(p: Any, forms: dict[str, str], why: dict[str, str],
                   costs: Mapping[str, Mapping[str, float]], repeats: int,
                   log: Callable[[str], None]) -> tuple[dict[str, str], dict[str, str]]:
    """The fastest of three, timed whole side by side: the start, the all-static chain (every
    profiled layer in ``qlinear``, as onnxruntime's static quantizer writes it) and the
    profiled layers all float. So the start never runs slower than the chain nor than the
    float layers (where no static layer pays as a whole, the plan says so per layer)."""
    chain = {k: "qlinear" for k, c in costs.items() if set(c) == {"float", "qlinear"}}
    if not chain:
        return forms, why
    cands = {"start": forms, "chain": dict(forms, **chain),
             "float": dict(forms, **{k: "float" for k in chain})}
    if cands["chain"] == forms:
        del cands["chain"]
    t = timed({k: p.export(f, "minmax") for k, f in cands.items()}, p.case.batches,
              p.case.threads, repeats)
    ms = {k: t[k]["ms"] for k in cands}
    log(", ".join(f"{k} {v:.1f} ms" for k, v in ms.items()))
    pick = min(ms, key=ms.get)
    if pick == "start":
        return forms, why
    why = dict(why)
    for k in chain:
        if forms.get(k) != cands[pick][k]:
            why[k] = (f"{cands[pick][k]}: the {'all-static chain' if pick == 'chain' else 'float layers'}"
                      f" measured {ms[pick]:.1f} ms whole against the start's {ms['start']:.1f}")
    return cands[pick], why


def latency_free_moves(p: Any, forms: Mapping[str, str], best: tuple[str, float],
                       log: Callable[[str], None]) -> tuple[str, float]:
    """(method, SQNR) after the start's moves that cost no latency, each kept when the
    measured SQNR rises: 8-bit weights where the uint8 × int8 kernels saturate (``p.qmax``),
    and Conv bias correction (``p.bias_correct``, :mod:`qcore.model.forms.bias`)."""
    if best[1] < math.inf and p.qmax < 127 and any(f == "qlinear" for f in forms.values()):
        # 8-bit weights where the kernels may saturate: the measured (deployed) figure says
        # whether saturation costs more than the 7th bit gains on these inputs
        best = _kept_if_higher(p, "qmax", 127, forms, best, log,
                               "8-bit weights (the u8s8 kernels saturate here)")
    if best[1] < math.inf and any(forms.get(x.name) == "qlinear" and x.op == "Conv"
                                  for x in p.layers):
        best = _kept_if_higher(p, "bias_correct", True, forms, best, log, "bias correction")
    return best


def _kept_if_higher(p: Any, setting: str, value: Any, forms: Mapping[str, str],
                    best: tuple[str, float], log: Callable[[str], None], label: str
                    ) -> tuple[str, float]:
    """The planner's ``setting`` set to ``value`` and kept where the start's measured SQNR
    rises above ``best``; put back otherwise."""
    before = getattr(p, setting)
    setattr(p, setting, value)
    s = p.sqnr(forms, best[0])
    log(f"start, {label}: {s:.2f} dB")
    if s > best[1]:
        return (best[0], s)
    setattr(p, setting, before)
    return best
