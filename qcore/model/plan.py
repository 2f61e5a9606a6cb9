"""The plan: one recipe per weight tensor, the least predicted output drift under a bits budget.

**The additive model.** Quantizing tensor t with recipe r alone moves the outputs by a noise of
power N(t, r) = Σ (y − ŷ)², measured (:mod:`qcore.model.sensitivity`). The plan predicts that
the errors of different tensors add as independent noises: the mixed model's noise power is
Σ_t N(t, r_t), i.e. its predicted output SQNR is −10·log10(Σ_t 10^(−SQNR(t, r_t)/10)) with
SQNR(t, r) the single-tensor output SQNRs. The model is first-order: it ignores correlations
between the tensors' effects, which is why every plan is run and measured beside its prediction.

**The budget** is bits per weight element (docs/semantics.md, Definitions): Σ_t bits(t, r_t) ≤ budget × Σ_t n_t,
where bits counts codes, scales and stored zero points exactly (integers), and a tensor left in
float32 counts 32 bits per element (its noise is 0).

**Exact optimality.** Minimising Σ_t N(t, r_t) subject to Σ_t bits(t, r_t) ≤ B is a
multiple-choice knapsack. :func:`make_plan` solves it by dynamic programming over Pareto sets
(Nemhauser–Ullmann): after the first k tensors it keeps every partial choice (cost, noise) not
dominated by another (one with cost ≤ and noise ≤, one strictly). Any optimal plan's first k
choices can be swapped for a partial choice that dominates them without raising the total
cost or noise, so some optimal plan survives every stage; the answer is the least-noise state
at the end with cost ≤ B. Costs are exact integers (no rounding of the budget), and states
whose cost plus the cheapest completion exceeds B are dropped (they cannot be completed).
Ties in noise keep the cheaper plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .checks import ModelError, check_budget
from .fidelity import FLOAT
from .sensitivity import Sensitivity

__all__ = ["Plan", "make_plan", "options"]


@dataclass
class Plan:
    """A recipe per tensor, its bits and its predicted output fidelity."""

    budget: float
    recipes: dict[str, str]
    bits: int
    elements: int
    noise_predicted: float
    signal_power: float
    measured: dict[str, Any] = field(default_factory=dict)
    #: The runtime the plan is made for (:mod:`qcore.model.runtime`).
    runtime: str = "reference"
    #: What the export measured in that runtime: ``latency_ms`` and ``float_latency_ms``
    #: (by thread count, :mod:`qcore.model.latency`) and ``forms`` (:mod:`qcore.model.deployable`).
    deploy: dict[str, Any] = field(default_factory=dict)
    #: Activation sites quantized with the weights (qcore.model.activations.ActivationSpec),
    #: the sites kept in float, and the --activations mode's name.
    activations: list[Any] = field(default_factory=list)
    float_activations: list[str] = field(default_factory=list)
    activation_mode: str = "none"
    #: SmoothQuant applied before planning (--smooth): alpha and, per site, how the division
    #: was made (layernorm, upstream, mul); empty without smoothing.
    smoothing: dict[str, Any] = field(default_factory=dict)

    @property
    def bits_per_element(self) -> float:
        return self.bits / self.elements

    @property
    def output_sqnr_db_predicted(self) -> float:
        if self.noise_predicted <= 0:
            return math.inf
        return 10 * math.log10(self.signal_power / self.noise_predicted)

    def to_json(self) -> dict[str, Any]:
        """The plan's JSON (budget, bits_per_element, predicted and measured SQNR, recipes)."""
        def num(v: Any) -> Any:
            if isinstance(v, dict):
                return {k: num(x) for k, x in v.items()}
            if isinstance(v, float) and not math.isfinite(v):
                return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
            return v
        return {"budget": self.budget, "runtime": self.runtime,
                "bits_per_element": self.bits_per_element,
                "bits": self.bits, "elements": self.elements,
                "output_sqnr_db_predicted": num(self.output_sqnr_db_predicted),
                "output_sqnr_db": num(self.measured.get("output_sqnr_db", math.nan)),
                "outputs": num(self.measured.get("outputs", {})),
                "measured": {k: num(v) for k, v in self.measured.items()},
                "additive_model": "predicted output noise power = sum over tensors (and "
                                  "quantized activation sites) of the noise power measured "
                                  "with that tensor (site) alone quantized",
                "recipes": dict(self.recipes),
                "activation_mode": self.activation_mode,
                "activations": [a.to_json() for a in self.activations],
                "float_activations": list(self.float_activations),
                "smoothing": dict(self.smoothing), **self.deploy}


def _cap(budget: float, elements: int) -> int:
    """The most bits a plan may use: budget × elements, rounded down, with the float noise of
    the product (a budget computed as bits / elements) rounded away first."""
    return math.floor(round(float(budget) * elements, 6))


def options(sens: Sensitivity, allow_float: bool = True
            ) -> dict[str, list[tuple[str, int, float]]]:
    """Per tensor: (recipe, bits, noise power) choices; float32 (noise 0) when allowed."""
    out: dict[str, list[tuple[str, int, float]]] = {t: [] for t in sens.tensors}
    for r in sens.rows:
        if r["tensor"] in out and r.get("kind", "weight") == "weight":
            noise = float(r["noise_power"])
            out[r["tensor"]].append((r["recipe"], int(r["bits"]), noise))
    if allow_float:
        for t in sens.tensors:
            out[t].append((FLOAT, sens.float_bits[t], 0.0))
    return out


def make_plan(sens: Sensitivity, budget: float, allow_float: bool = True) -> Plan:
    """The exactly optimal plan at ``budget`` bits per weight element (module doc); a budget
    that is not a finite number in (0, 1024], or a measured noise that is NaN, is refused."""
    budget = check_budget(budget, "budget")
    opts = options(sens, allow_float)
    unmeasured = [(t, r) for t in opts for r, _, n in opts[t] if math.isnan(n)]
    if unmeasured:
        raise ModelError(f"the output noise of {unmeasured[:3]} (tensor, recipe) is NaN: the "
                         f"float outputs or the weights hold NaN or Inf, so no plan can be "
                         f"chosen")
    tensors = [t for t in sens.tensors if opts[t]]
    missing = [t for t in sens.tensors if not opts[t]]
    if missing:
        raise ModelError(f"no recipe expresses tensors {missing}; allow float or add recipes")
    elements = sum(sens.elements[t] for t in tensors)
    cap = _cap(budget, elements)
    cheapest = [min(c for _, c, _ in opts[t]) for t in tensors]
    if sum(cheapest) > cap:
        raise ModelError(f"budget {budget} bits per weight is below the cheapest plan "
                         f"({sum(cheapest) / elements:.4f} bits per weight with these recipes"
                         + ("" if sens.runtime == "reference" else
                            f" that {sens.runtime} runs; --runtime reference allows "
                            "every ONNX type") + ")")
    rest = np.concatenate([np.cumsum(cheapest[::-1])[::-1][1:], [0]]).astype(np.int64)
    cost = np.zeros(1, np.int64)
    noise = np.zeros(1, np.float64)
    back: list[tuple[np.ndarray, np.ndarray]] = []
    for k, t in enumerate(tensors):
        c = np.array([o[1] for o in opts[t]], np.int64)
        nz = np.array([o[2] for o in opts[t]], np.float64)
        cc = (cost[:, None] + c[None, :]).ravel()
        nn = (noise[:, None] + nz[None, :]).ravel()
        keep = np.flatnonzero(cc + rest[k] <= cap)
        cc, nn = cc[keep], nn[keep]
        order = np.lexsort((nn, cc))  # by cost, then noise
        cc, nn, keep = cc[order], nn[order], keep[order]
        prev_min = np.minimum.accumulate(np.concatenate([[np.inf], nn[:-1]]))
        front = nn < prev_min  # strictly less noise than every cheaper (or equal-cost) state
        cost, noise, idx = cc[front], nn[front], keep[front]
        back.append((idx // len(c), idx % len(c)))
    if not len(noise):  # every state ran over the cap (cannot happen with finite costs)
        raise ModelError(f"budget {budget} bits per weight: no plan of these recipes fits")
    best = int(np.argmin(noise))  # noise decreases with cost along the front: the last one
    choice: dict[str, str] = {}
    j = best
    for k in range(len(tensors) - 1, -1, -1):
        parent, pick = back[k]
        choice[tensors[k]] = opts[tensors[k]][int(pick[j])][0]
        j = int(parent[j])
    ordered = {t: choice[t] for t in tensors}
    return Plan(float(budget), ordered, int(cost[best]), elements, float(noise[best]),
                sens.signal_power)


def brute_force(sens: Sensitivity, budget: float, allow_float: bool = True) -> tuple[int, float]:
    """(bits, noise) of the optimum by enumerating every combination (tests, few tensors)."""
    import itertools

    opts = options(sens, allow_float)
    tensors = list(sens.tensors)
    elements = sum(sens.elements[t] for t in tensors)
    cap = _cap(budget, elements)
    best = (None, math.inf)
    for combo in itertools.product(*(opts[t] for t in tensors)):
        c = sum(o[1] for o in combo)
        n = sum(o[2] for o in combo)
        if c <= cap and (n < best[1] or (n == best[1] and c < best[0])):
            best = (c, n)
    return best


def planned_weights(case: Any, plan: Plan) -> dict[str, np.ndarray]:
    """The fake-quantized weights of a plan (tensors planned as float32 are left out)."""
    return {t: case.quantize(t, r).x_hat for t, r in plan.recipes.items() if r != FLOAT}


def run_plan(case: Any, plan: Plan) -> dict[str, Any]:
    """Run the planned mixed model (its activation sites fake-quantized too); its measured
    fidelity is stored in ``plan.measured``."""
    if plan.activations:
        from .staged import evaluate

        plan.measured = evaluate(case, plan.activations, planned_weights(case, plan))
        return plan.measured
    plan.measured = case.fidelity(planned_weights(case, plan))
    return plan.measured


def budget_range(sens: Sensitivity, allow_float: bool = False) -> tuple[float, float]:
    """(cheapest, costliest) bits per weight over the plans of these options."""
    opts = options(sens, allow_float)
    n = sum(sens.elements[t] for t in sens.tensors)
    lo = sum(min(o[1] for o in opts[t]) for t in sens.tensors if opts[t])
    hi = sum(max(o[1] for o in opts[t]) for t in sens.tensors if opts[t])
    return lo / n, hi / n


def plans_at(case: Any, sens: Sensitivity, budgets: list[float],
             allow_float: bool = True) -> list[Plan]:
    """The optimal plan at each budget, each run and measured (budgets below the cheapest
    plan are left out)."""
    out = []
    for b in budgets:
        try:
            p = make_plan(sens, b, allow_float)
        except ModelError:
            continue
        run_plan(case, p)
        out.append(p)
    return out
