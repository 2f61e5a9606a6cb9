"""Plans that measure speed: ``--min-sqnr DB`` and ``--max-latency R`` (docs/model.md,
"Objectives").

A plan gives every layer of the prepared model (:mod:`qcore.model.forms.layers`) a form. The
planner works on measurements only:

1. **Costs** (:func:`qcore.model.chain_start.planner_costs`): a conv net's static-capable layers are costed in the chain
   they run in — one onnxruntime profile of the float model and one of the export with all of
   them in ``qlinear`` (what onnxruntime's ``quantize_static`` writes), each layer's nodes
   summed, a float layer paying the DequantizeLinear / QuantizeLinear at its edges; other
   layers (and every layer of a model without a Conv) are timed alone in each form
   (:func:`qcore.model.costs.layer_costs`). A layer whose integer forms all cost no less than
   its float form stays float (``why``: the measured ratio) — it does not pay here.
2. **Start**: two candidates, measured whole: every other layer in its fastest form, and every
   other layer in its fastest form that reads no static activation chain (``dynamic``,
   ``conv-integer``, ``weight-only``); the candidate whose measured SQNR less its latency's
   price (:data:`START_RATE`) is highest wins (:func:`_pick_start`: a transformer starts
   dynamic, a conv net static, from the measurements). A conv net's fastest start is timed
   whole beside the all-static chain and its static-capable layers in float, and the fastest
   is taken (:func:`qcore.model.chain_start.chain_or_start`). The chain tensors' scales come from the calibration method (minmax, percentile,
   mse) whose start measures the highest SQNR; where the uint8 × int8 kernels saturate (7-bit
   weights), 8-bit weights are kept when they measure higher; Conv bias correction
   (:mod:`qcore.model.forms.bias`) is kept when it measures higher; SmoothQuant (alpha 0.5;
   folded into the LayerNormalization before a site where only the weights read it, else a
   Mul) is kept when it raises the start's measured SQNR. These moves cost no latency. SQNR
   here is always the export as onnxruntime runs it with default optimizations (the deployed
   figure).
3. **Moves**: a layer to a more faithful form — float, or another integer form that runs
   faster than float (a MatMul from ``qlinear`` to ``dynamic``). In each round (at most
   :data:`ROUNDS`) every quantized layer's gain is measured for each such form (the current
   plan with that layer alone changed) and its cost is that form's time minus the current
   one's; moves are taken in the order of dB gained per millisecond added (gains at no added
   time first), each one measured and kept only when the measured SQNR rises. Later rounds
   measure again only :data:`RECHECK` layers not moved: the best-ranked first, then those
   that gained nothing (a neighbour's move may change that). ``--min-sqnr`` stops at the first plan at or above DB (the fastest
   reached); ``--max-latency`` takes moves while the predicted latency (the start's, measured,
   plus the costs) stays at or under R × float, then measures the whole export and undoes the
   last moves until the measurement holds. With ``--budget`` no move may take the weights over
   the bits budget (8 bits per quantized weight, 32 per float one).
4. **The figure stated** is the whole export timed beside the float model (the median of
   interleaved passes, with its spread and the load) — never the sum of the costs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import QuantizationError
from . import require
from .chain_start import chain_or_start, latency_free_moves, planner_costs
from .costs import timed
from .form_choice import LOOKUPS, fastest_form, nbits_verdict
from .forms.bias import bias_corrected
from .forms.layered import LAYER_REGISTRY, export_forms, layers_of
from .forms.layers import Layer, prepare
from .forms.nbits_layers import NBITS_LAYER_FORMS
from .forms.qlinear import chain_nodes, chain_specs, chain_tensors, tensor_types, weight_qmax
from .latency import deploy_session

__all__ = ["METHODS", "SpeedCase", "SpeedPlan", "check_objectives", "nbits_verdict",
           "plan_for_speed"]

#: Calibration methods the start tries for the chain tensors.
METHODS = ("minmax", "percentile", "mse")
#: Rounds of moves (each measures every quantized layer's gain from the current plan).
ROUNDS = 3
#: After the first round, only this many layers (those whose moves gained but were not kept,
#: best-ranked first) are measured again.
RECHECK = 12
SMOOTH_ALPHA = 0.5
#: A move must gain more than this many dB (smaller gains cost time no user sees).
MIN_GAIN = 0.02
#: The price of a dB when starts are compared: a start is worth its measured SQNR less
#: (its latency / the fastest start's − 1) / START_RATE dB, so a start 3% slower must
#: measure 1 dB more (about what a move to float pays per dB on MiniLM; step 2 of the module
#: doc). A conv net's chain-free start (near float speed) loses by tens of dB.
START_RATE = 0.03
_CHAIN = {f.name: f.chain for f in LAYER_REGISTRY}
#: Bits per weight of a form (8 where not named).
_BITS = {"float": 32, "weight-only-int4": 4, **{f: 4 for f in NBITS_LAYER_FORMS}}


def check_objectives(min_sqnr: float | None, max_latency: float | None) -> None:
    """``--min-sqnr`` finite, ``--max-latency`` finite and > 0; QuantizationError otherwise."""
    if min_sqnr is not None and not math.isfinite(float(min_sqnr)):
        raise QuantizationError(f"--min-sqnr {min_sqnr}: give a finite number of dB")
    if max_latency is not None and not (math.isfinite(float(max_latency))
                                        and float(max_latency) > 0):
        raise QuantizationError(f"--max-latency {max_latency}: give a finite ratio to the "
                                "float model's latency, > 0 (e.g. 0.8)")


def _sqnr(ref: Sequence[np.ndarray], out: Sequence[np.ndarray]) -> float:
    """−10·log10(mean over outputs of Σ(y − ŷ)² / Σ y²) (docs/semantics.md)."""
    r = []
    for y, yh in zip(ref, out):
        y64, d = y.astype(np.float64), y.astype(np.float64) - yh.astype(np.float64)
        s = float(np.sum(y64 * y64))
        r.append(float(np.sum(d * d)) / s if s else (0.0 if not np.any(d) else math.inf))
    m = float(np.mean(r))
    return math.inf if m == 0 else -10 * math.log10(m)


@dataclass
class SpeedCase:
    """A model, the batches it is measured on (``batches``) and calibrated on
    (``calibration``), at ``threads``; the float reference is the model as given, run as
    deployed."""

    model: Any
    batches: list[dict[str, np.ndarray]]
    calibration: list[dict[str, np.ndarray]]
    threads: int = 1
    outputs: list[str] | None = None
    prepared: Any = field(init=False)
    reference: list[np.ndarray] = field(init=False)
    output_index: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self.prepared = prepare(self.model)
        s = deploy_session(self.model, self.threads)
        names = [o.name for o in s.get_outputs()]
        runs = [s.run(None, dict(b)) for b in self.batches]
        floats = [i for i, o in enumerate(s.get_outputs()) if o.type == "tensor(float)"]
        want = self.outputs or names
        self.output_index = [i for i in floats if names[i] in want]
        if not self.output_index:
            raise QuantizationError("the model has no float output to measure SQNR on")
        self.reference = [np.concatenate([r[i].reshape(-1) for r in runs])
                          for i in self.output_index]

    def deployed_sqnr(self, model: Any) -> float:
        """The output SQNR of ``model`` as onnxruntime runs it by default."""
        s = deploy_session(model, self.threads)
        runs = [s.run(None, dict(b)) for b in self.batches]
        out = [np.concatenate([r[i].reshape(-1) for r in runs]) for i in self.output_index]
        return _sqnr(self.reference, out)


def _values(model: Any, names: Sequence[str], batches: Sequence[Mapping[str, np.ndarray]]
            ) -> dict[str, list[np.ndarray]]:
    """Each named tensor's values on ``batches`` (an unoptimized session with them as outputs)."""
    onnx = require("onnx")
    ort = require("onnxruntime")
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for t in names:
        if t not in have:
            m.graph.output.append(onnx.ValueInfoProto(name=t))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    out_names = [o.name for o in s.get_outputs()]
    got: dict[str, list[np.ndarray]] = {t: [] for t in names}
    for b in batches:
        for k, v in zip(out_names, s.run(None, dict(b))):
            if k in got:
                got[k].append(v)
    return got


@dataclass
class SpeedPlan:
    """A form per layer and what was measured (module doc)."""

    objective: dict[str, Any]
    forms: dict[str, str]
    why: dict[str, str]
    layers: list[Layer]
    method: str
    smooth: float | None
    output_sqnr_db: float
    costs: dict[str, dict[str, float]]
    moves: list[dict[str, Any]] = field(default_factory=list)
    start: dict[str, Any] = field(default_factory=dict)
    latency: dict[str, Any] = field(default_factory=dict)
    size: dict[str, int] = field(default_factory=dict)
    met: bool = True
    export: Any = None
    qmax: int = 127

    def table(self) -> list[dict[str, Any]]:
        """One row per layer: layer, op, weight shape, form, why."""
        return [{"layer": x.name, "op": x.op, "shape": list(x.shape),
                 "form": self.forms.get(x.name, "float"), "why": self.why.get(x.name, ""),
                 "ms": {f: round(v, 4) for f, v in self.costs.get(x.name, {}).items()}}
                for x in self.layers]

    def to_json(self) -> dict[str, Any]:
        return {"objective": self.objective, "met": self.met, "method": self.method,
                "smooth": self.smooth, "output_sqnr_db": self.output_sqnr_db,
                "deploy": {"output_sqnr_db": self.output_sqnr_db},
                "latency": self.latency, "size": self.size, "start": self.start,
                "moves": self.moves, "weight_qmax": self.qmax, "layers": self.table()}


class _Planner:
    """The state of one planning run (module doc)."""

    def __init__(self, case: SpeedCase, log: Callable[[str], None]) -> None:
        self.case, self.log = case, log
        self.model = case.prepared
        self.smooth: float | None = None
        self.qmax = weight_qmax()
        self.bias_correct = False
        self._setup()

    def _setup(self) -> None:
        self.layers = layers_of(self.model)
        self.types = tensor_types(self.model)
        static = [x.name for x in self.layers if "qlinear" in x.forms]
        inside = chain_nodes(self.model, static, self.types)
        names = chain_tensors(self.model, inside) + [x.data for x in self.layers]
        self.values = _values(self.model, list(dict.fromkeys(names)), self.case.calibration)
        self.shapes = {x.data: self.values[x.data][0].shape for x in self.layers}
        self.specs_by: dict[str, dict] = {}

    def specs(self, forms: Mapping[str, str], method: str) -> dict:
        static = [k for k, f in forms.items() if f == "qlinear"]
        inside = chain_nodes(self.model, static, self.types)
        tensors = chain_tensors(self.model, inside)
        if method not in self.specs_by:
            allin = chain_nodes(self.model, [x.name for x in self.layers if "qlinear" in x.forms],
                                self.types)
            self.specs_by[method] = chain_specs(self.model, allin,
                                                {t: self.values[t] for t in
                                                 chain_tensors(self.model, allin)}, method)
        base = self.specs_by[method]
        return {t: base[t] for t in tensors if t in base}

    def export(self, forms: Mapping[str, str], method: str) -> Any:
        model = self.model
        if self.bias_correct:
            model = bias_corrected(model, [x for x in self.layers
                                           if forms.get(x.name) == "qlinear"],
                                   self.values, self.qmax)
        return export_forms(model, forms, self.specs(forms, method), self.qmax)

    def sqnr(self, forms: Mapping[str, str], method: str) -> float:
        return self.case.deployed_sqnr(self.export(forms, method))


def _start_candidates(p: _Planner, costs: Mapping[str, Mapping[str, float]], total: float,
                      four: bool = True) -> dict[str, tuple[dict[str, str], dict[str, str]]]:
    """The starts a plan chooses from, each ``(forms, why)``: ``fastest`` (every layer in its
    fastest paying form) and ``chain-free`` (the fastest paying form that reads no static
    activation chain: ``dynamic``, ``conv-integer``, ``weight-only``), where they differ and
    quantize some layer other than a lookup.
    ``four`` False (4 bits do not pay here, :func:`nbits_verdict`): no 4-bit form."""
    out: dict[str, tuple[dict[str, str], dict[str, str]]] = {}
    for name, chain in (("fastest", True), ("chain-free", False)):
        forms: dict[str, str] = {}
        why: dict[str, str] = {}
        for x in p.layers:
            ok = [f for f in x.forms if (chain or not _CHAIN[f])
                  and (four or f not in NBITS_LAYER_FORMS)]
            forms[x.name], why[x.name] = fastest_form(costs[x.name], ok, total)
        quantizes = any(forms[x.name] != "float" for x in p.layers if x.op != "Gather")
        if quantizes and not any(f == forms for f, _ in out.values()):
            out[name] = (forms, why)
    if not out:  # nothing pays anywhere: the all-float start
        out["fastest"] = (forms, why)
    return out


def _pick_start(p: _Planner, costs: Mapping[str, Mapping[str, float]], total: float,
                repeats: int, measure: bool, log: Callable[[str], None], four: bool = True,
                min_sqnr: float | None = None, max_latency: float | None = None
                ) -> tuple[dict[str, str], dict[str, str], dict[str, Any]]:
    """(forms, why, what was measured) of the start: of the candidates
    (:func:`_start_candidates`): under ``min_sqnr``, the highest measured SQNR (dB above the
    floor count for nothing) less the price of its latency over the fastest one's
    (:data:`START_RATE`); under ``max_latency``, the highest SQNR at or under the bound, else
    the fastest. Latency is the whole export
    timed beside the float model (interleaved medians); with ``measure`` False (costs given,
    tests) it is the sum of the layer costs. Per model, from measurements: a transformer,
    where per-tensor static activations break the output, starts dynamic at the same speed;
    a conv net, where the static chain runs far faster, starts static."""
    cands = _start_candidates(p, costs, total, four)
    if len(cands) == 1:
        return (*cands["fastest"], {})
    sqnr = {k: _best_method(p, f, log) for k, (f, _) in cands.items()}
    if measure:
        t = timed({"float": p.case.model,
                   **{k: p.export(f, sqnr[k][0]) for k, (f, _) in cands.items()}},
                  p.case.batches, p.case.threads, repeats)
        ratio = {k: t[k]["ms"] / t["float"]["ms"] for k in cands}
    else:
        ratio = {k: sum(costs[x.name].get(f[x.name], costs[x.name].get("float", 0.0))
                        for x in p.layers) / (total or 1.0) for k, (f, _) in cands.items()}
    fastest = min(ratio.values())
    if max_latency is not None:  # the most faithful start under the bound, else the fastest
        worth = {k: sqnr[k][1] if ratio[k] <= max_latency else -math.inf for k in cands}
    else:  # dB above the floor are worth nothing
        worth = {k: min(sqnr[k][1], min_sqnr if min_sqnr is not None else math.inf)
                 - (ratio[k] / fastest - 1) / START_RATE for k in cands}
    pick = max(cands, key=lambda k: (worth[k], -ratio[k]))
    for k in cands:
        log(f"start {k}: {ratio[k]:.3f}x float, {_db(sqnr[k][1])} dB"
            + (" (taken)" if k == pick else ""))
    forms, why = cands[pick]
    return dict(forms), dict(why), {
        "chosen": pick, "method": sqnr[pick],
        "candidates": {k: {"x_float": ratio[k], "output_sqnr_db": sqnr[k][1],
                           "worth_db": worth[k],
                           "method": sqnr[k][0], "measured": measure} for k in cands}}


def _bits(layers: Sequence[Layer], forms: Mapping[str, str]) -> tuple[int, int]:
    n = sum(x.elements for x in layers)
    b = sum(x.elements * _BITS.get(forms.get(x.name, "float"), 8) for x in layers)
    return b, n


def plan_for_speed(case: SpeedCase, *, min_sqnr: float | None = None,
                   max_latency: float | None = None, budget: float | None = None,
                   repeats: int = 15, log: Callable[[str], None] = lambda s: None,
                   costs: Mapping[str, Mapping[str, float]] | None = None) -> SpeedPlan:
    """The plan for one objective (module doc); exactly one of ``min_sqnr`` / ``max_latency``
    (``budget`` may join either). ``costs``: ``{layer: {form: ms}}`` to use instead of timing
    each layer (tests)."""
    check_objectives(min_sqnr, max_latency)
    measure = costs is None
    if (min_sqnr is None) == (max_latency is None):
        raise QuantizationError("give one objective: --min-sqnr DB or --max-latency R")
    p = _Planner(case, log)
    if costs is None:
        costs = planner_costs(p, repeats, log)
    costs = {k: dict(v) for k, v in costs.items()}
    total = sum(c.get("float", 0.0) for c in costs.values())
    nbits = nbits_verdict(costs)
    if nbits:
        log(nbits["text"])
    forms, why, picked = _pick_start(p, costs, total, repeats, measure, log,
                                     four=not nbits or nbits["pays"], min_sqnr=min_sqnr,
                                     max_latency=max_latency)
    if nbits:
        picked["nbits"] = nbits
    if measure and picked.get("chosen", "fastest") == "fastest":
        chained, why = chain_or_start(p, forms, why, costs, repeats, log)
        if chained != forms:
            forms = chained
            picked.pop("method", None)
            picked["chosen"] = ("all-static chain" if "qlinear" in forms.values()
                                else "float layers")
    if budget is not None:
        b, n = _bits(p.layers, forms)
        if b > budget * n:
            raise QuantizationError(f"--budget {budget}: the fastest forms already take "
                                    f"{b / n:.2f} bits per weight (8 per quantized weight, 32 "
                                    f"per float one)")
    method, s0 = _start(p, forms, log, picked.pop("method", None))
    moves: list[dict[str, Any]] = []
    start = {"forms": dict(forms), "output_sqnr_db": s0, "method": method, "smooth": p.smooth,
             "weight_qmax": p.qmax, "bias_correction": p.bias_correct, **picked}
    cur = s0
    predicted = float_ms = 0.0
    if max_latency is not None:
        whole = _measure(p, forms, method, repeats)
        predicted, float_ms = whole["ratio"], whole["float_ms"]
    candidates: set[str] | None = None  # the first round measures every layer
    for _ in range(ROUNDS):
        if min_sqnr is not None and cur >= min_sqnr:
            break
        state = _Round(p, forms, costs, cur, method, candidates)
        taken = 0
        moved: set[str] = set()
        for x, to, gain in state.order():
            if min_sqnr is not None and cur >= min_sqnr:
                break
            if x.name in moved:
                continue
            was = forms[x.name]
            added = costs[x.name][to] - costs[x.name][was]
            trial = dict(forms, **{x.name: to})
            if budget is not None:
                b, n = _bits(p.layers, trial)
                if b > budget * n:
                    continue
            if max_latency is not None and predicted + added / float_ms > max_latency:
                continue
            s = p.sqnr(trial, method)
            if s > cur + MIN_GAIN:  # in turn too: a move that no longer gains costs for nothing
                forms, cur = trial, s
                taken += 1
                moved.add(x.name)
                what = "kept float" if to == "float" else f"{to} rather than {was}"
                why[x.name] = f"{what} for fidelity: +{gain:.2f} dB alone for {added:+.3f} ms"
                moves.append({"layer": x.name, "from": was, "to": to, "output_sqnr_db": s,
                              "added_ms": added})
                if max_latency is not None:
                    predicted += added / float_ms
        log(f"round: {taken} moves kept, {_db(cur)} dB")
        if not taken:
            break
        ranked = [x.name for x, _, _ in state.order()] + state.rest
        candidates = set([n for n in dict.fromkeys(ranked) if n not in moved][:RECHECK])
        if not candidates:
            break
    result = _measure(p, forms, method, repeats)
    if max_latency is not None:
        while result["ratio"] > max_latency and moves:
            last = moves.pop()
            forms = dict(forms, **{last["layer"]: last["from"]})
            why[last["layer"]] = "moved back: the measured export ran over --max-latency"
            result = _measure(p, forms, method, repeats)
        cur = p.sqnr(forms, method)
    met = (cur >= min_sqnr) if min_sqnr is not None else result["ratio"] <= max_latency
    exported = p.export(forms, method)
    objective = ({"min_sqnr_db": min_sqnr} if min_sqnr is not None
                 else {"max_latency": max_latency})
    if budget is not None:
        objective["budget"] = budget
    b, n = _bits(p.layers, forms)
    size = {"float_bytes": case.model.ByteSize(), "export_bytes": exported.ByteSize(),
            "bits_per_weight": b / n if n else 0.0}
    return SpeedPlan(objective, forms, why, p.layers, method, p.smooth, cur, costs, moves,
                     start, result, size, met, exported, p.qmax)


class _Round:
    """One round of moves: every quantized layer's gain measured from the current plan for
    each other form it can take (float, or an integer form faster than float), ranked by dB
    gained per millisecond added (a gain at no added time first)."""

    def __init__(self, p: _Planner, forms: Mapping[str, str],
                 costs: Mapping[str, Mapping[str, float]], cur: float, method: str,
                 only: set[str] | None = None) -> None:
        self.items: list[tuple[float, Layer, str, float]] = []
        self.rest: list[str] = []  # layers measured without a gain, in graph order
        for x in p.layers:
            f = forms.get(x.name, "float")
            if f in ("float", "weight-only") or (only is not None and x.name not in only):
                continue
            c = costs[x.name]
            for to in x.forms:
                if (to == f or to not in c or to in NBITS_LAYER_FORMS
                        or (f in LOOKUPS) != (to in LOOKUPS)
                        or (to != "float" and c[to] >= c["float"] and to not in LOOKUPS)):
                    continue
                gain = p.sqnr(dict(forms, **{x.name: to}), method) - cur
                if gain > MIN_GAIN:
                    added = c[to] - c[f]
                    score = math.inf if added <= 0 else gain / max(added, 1e-4)
                    self.items.append((score, x, to, gain))
                elif x.name not in self.rest:
                    self.rest.append(x.name)
        self.items.sort(key=lambda t: (-t[0], -t[3]))

    def order(self) -> list[tuple[Layer, str, float]]:
        return [(x, to, g) for _, x, to, g in self.items]


def _db(v: float) -> str:
    return f"{v:.2f}" if math.isfinite(v) else str(v)


def _best_method(p: _Planner, forms: Mapping[str, str], log: Callable[[str], None]
                 ) -> tuple[str, float]:
    """(method, SQNR): the calibration method of the chain tensors that measures highest
    (minmax where no layer reads a chain)."""
    best = ("minmax", -math.inf)
    if any(_CHAIN.get(f, False) for f in forms.values()):
        for m in METHODS:
            s = p.sqnr(forms, m)
            log(f"start, {m}: {s:.2f} dB")
            if s > best[1]:
                best = (m, s)
    else:
        best = ("minmax", p.sqnr(forms, "minmax"))
    return best


def _start(p: _Planner, forms: dict[str, str], log: Callable[[str], None],
           best: tuple[str, float] | None = None) -> tuple[str, float]:
    """The calibration method (and SmoothQuant) of the start, by measured SQNR; ``best``: the
    method and SQNR already measured."""
    best = best or _best_method(p, forms, log)
    best = latency_free_moves(p, forms, best, log)
    smoothed = _smoothed(p)
    if smoothed is not None:
        keep = (p.model, p.layers, p.types, p.values, p.shapes, p.specs_by)
        p.model = smoothed
        p._setup()
        takes = {x.name: x.forms for x in p.layers}
        # a site smoothed by a Mul before the weights may leave a layer without the form the
        # start gave it (the weight is computed now), and new nodes may rename the layers
        # (forms and costs are keyed by node name): then smoothing is not a start move
        ok = ([(x.name, x.op) for x in p.layers] == [(x.name, x.op) for x in keep[1]]
              and all(f == "float" or f in takes.get(k, ()) for k, f in forms.items()))
        s = p.sqnr(forms, best[0]) if ok else -math.inf
        log(f"start, SmoothQuant {SMOOTH_ALPHA}: "
            + (f"{s:.2f} dB" if ok else "renames a layer or leaves it without its form, "
               "not taken"))
        if s > best[1]:
            p.smooth = SMOOTH_ALPHA
            return best[0], s
        p.model, p.layers, p.types, p.values, p.shapes, p.specs_by = keep
    return best


def _smoothed(p: _Planner) -> Any:
    """The model as given with SmoothQuant on every MatMul/Gemm site: folded into the
    LayerNormalization before a site only the weights read, else a Mul by 1/s before the
    weights (upstream folds through layout ops are not taken: a permuted channel would go
    unnoticed here), prepared; None without a site. Smoothing comes before :func:`prepare`:
    onnxruntime's basic level writes a 3-D MatMul + Add as Reshape → Gemm → Reshape, which puts
    a Reshape between a LayerNormalization and its readers. The added Muls are paid for in the
    measured latency."""
    from .sites import find_sites
    from .smooth import smooth_model

    base = p.case.model
    sites = [s.name for s in find_sites(base)
             if all(c[2] in ("MatMul", "Gemm") for c in s.consumers)]
    if not sites:
        return None
    values = _values(base, sites, p.case.calibration)
    _, info = smooth_model(base, values, SMOOTH_ALPHA)
    upstream = [s for s, how in info.folded.items() if how == "upstream"]
    model, _ = smooth_model(base, values, SMOOTH_ALPHA, no_fold=upstream)
    return prepare(model)


def _measure(p: _Planner, forms: Mapping[str, str], method: str, repeats: int
             ) -> dict[str, Any]:
    """The whole export beside the float model (module doc); the ratio is the median of the
    passes' ratios (each export pass over the float pass beside it: on a shared host the
    load drifts, and a pair of neighbouring passes sees about the same load)."""
    t = timed({"export": p.export(forms, method), "float": p.case.model}, p.case.batches,
              p.case.threads, repeats)
    return {"ms": t["export"]["ms"], "p10": t["export"]["p10"], "p90": t["export"]["p90"],
            "float_ms": t["float"]["ms"], "float_p10": t["float"]["p10"],
            "float_p90": t["float"]["p90"],
            "ratio": statistics.median(e / f for e, f in zip(t["export"]["runs"],
                                                             t["float"]["runs"])),
            "load": t["load"], "threads": p.case.threads, "passes": repeats}
