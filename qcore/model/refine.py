"""Plans that hold: local search on *measured* runs from the better of two measured starts.

The additive plan (:func:`qcore.model.plan.make_plan`) is optimal for its model of the noise,
but tensors interact (errors that cancel or compound), so its measured figure can miss the
prediction by several dB — either way. :func:`refine` improves a plan using only measured
model runs:

1. **Start** from the better (higher measured output SQNR) of the additive plan and the best
   uniform plan within the budget (one recipe on every weight it expresses, the rest float;
   with ``allow_float=False`` only recipes that express every weight).
2. **Moves**: change one tensor's recipe. A move whose bits fit the budget's slack is tried as
   it is; one that does not is paid for by the cheapest (by predicted noise) downgrade of one
   other tensor that frees enough bits. Moves are tried in the order of their predicted noise
   change (the single-tensor noise powers of the sensitivity rows), most promising first.
3. **Accept** a move only when the measured figure rises; after an accepted move the moves are
   ranked again from the new plan. The search stops after ``runs`` measured runs or when no
   move is left.

With a floor on the user's metric (``--min-metric X``, :mod:`qcore.model.views`) a plan that
keeps it beats every plan that does not; among those that do not, the higher metric wins, and
among those that do, the higher figure (the start and every move are judged so).

So the final plan's measured SQNR is at least that of the additive plan and of the best uniform
recipe within the budget: by construction, not by chance. The figure is the ``output_sqnr_db``
of :func:`qcore.model.plan.run_plan` (docs/semantics.md, Definitions); every plan tried carries
the additive plan's activation sites and smoothing, so all are measured alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .fidelity import FLOAT
from .plan import Plan, _cap, options
from .sensitivity import Sensitivity

__all__ = ["DEFAULT_RUNS", "GAP_DB", "Refined", "refine", "uniform_plans"]

#: Measured and predicted further apart than this (dB) start a refinement without --refine.
GAP_DB = 1.0
#: Measured runs of the local search when --refine does not say.
DEFAULT_RUNS = 20

Progress = Callable[[int, int, str], None]


@dataclass
class Refined:
    """The outcome of :func:`refine`: the final plan and how it was reached."""

    plan: Plan  # the final plan, measured
    additive: Plan  # the additive plan, measured
    uniform: Plan | None  # the best uniform plan within the budget, measured (None: none fits)
    start: str  # "additive" or "uniform:<recipe>"
    runs: int  # measured runs the local search made
    moves: list[dict[str, Any]] = field(default_factory=list)  # the accepted moves, in order

    @property
    def figure(self) -> float:
        return _figure(self.plan)

    def to_json(self) -> dict[str, Any]:
        """The refinement as the plan JSON's ``refine`` entry."""
        def num(v: float) -> Any:
            return v if math.isfinite(v) else (None if math.isnan(v) else
                                               ("inf" if v > 0 else "-inf"))
        return {"start": self.start, "runs": self.runs,
                "additive": {"bits_per_element": self.additive.bits_per_element,
                             "output_sqnr_db_predicted": num(
                                 self.additive.output_sqnr_db_predicted),
                             "output_sqnr_db": num(_figure(self.additive)),
                             "recipes": dict(self.additive.recipes)},
                "uniform": None if self.uniform is None else {
                    "recipe": _uniform_recipe(self.uniform),
                    "bits_per_element": self.uniform.bits_per_element,
                    "output_sqnr_db": num(_figure(self.uniform))},
                "output_sqnr_db": num(self.figure),
                "moves": self.moves}


def _figure(plan: Plan) -> float:
    return float(plan.measured.get("output_sqnr_db", -math.inf))


def _score(plan: Plan, floor: float | None) -> tuple[int, float]:
    """What the search maximises: the figure, or with a metric floor (keeps it, then the
    figure where it does and the metric where it does not)."""
    if floor is None:
        return (1, _figure(plan))
    m = float(plan.measured.get("metric", -math.inf))
    return (1, _figure(plan)) if m >= floor else (0, m)


def _uniform_recipe(plan: Plan) -> str:
    names = sorted({r for r in plan.recipes.values() if r != FLOAT})
    return names[0] if len(names) == 1 else ",".join(names)


def _plan(sens: Sensitivity, opts: dict, budget: float, recipes: dict[str, str]) -> Plan:
    """A :class:`Plan` of ``recipes`` with its bits and additive prediction."""
    bits = noise = 0
    for t, r in recipes.items():
        o = next(o for o in opts[t] if o[0] == r)
        bits += o[1]
        noise += o[2]
    elements = sum(sens.elements[t] for t in recipes)
    return Plan(float(budget), dict(recipes), int(bits), elements, float(noise),
                sens.signal_power)


def uniform_plans(sens: Sensitivity, budget: float, allow_float: bool = True) -> list[Plan]:
    """Every uniform plan within ``budget``: one recipe on each weight it expresses (the rest
    float, when allowed), unmeasured."""
    opts = options(sens, allow_float=True)
    cap = _cap(budget, sum(sens.elements[t] for t in sens.tensors))
    out = []
    for r in sens.recipes:
        recipes = {}
        for t in sens.tensors:
            if any(o[0] == r for o in opts[t]):
                recipes[t] = r
            elif allow_float:
                recipes[t] = FLOAT
            else:
                break
        else:
            p = _plan(sens, opts, budget, recipes)
            if p.bits <= cap:
                out.append(p)
    return out


def _moves(sens: Sensitivity, opts: dict, current: dict[str, str], slack: int,
           tried: set) -> list[tuple[float, int, tuple[tuple[str, str], ...]]]:
    """Candidate moves from ``current``: (predicted noise change, bits change, changes),
    most promising first; moves already measured (``tried``) are left out."""
    now = {t: next(o for o in opts[t] if o[0] == current[t]) for t in current}
    # per tensor, the downgrades (bits freed, noise added), for paying for a costlier move
    downs = {t: [(now[t][1] - o[1], o[2] - now[t][2], o[0]) for o in opts[t]
                 if o[1] < now[t][1]] for t in current}
    out = []
    for t in current:
        for r, b, n in opts[t]:
            if r == current[t]:
                continue
            db, dn = b - now[t][1], n - now[t][2]
            if db <= slack:
                change = ((t, r),)
                if change not in tried:
                    out.append((dn, db, change))
                continue
            best = None  # the other tensor's downgrade that pays with the least noise added
            for u in current:
                if u == t:
                    continue
                for freed, added, ru in downs[u]:
                    if db - freed <= slack and (best is None or added < best[0]
                                                or (added == best[0] and freed > best[1])):
                        best = (added, freed, u, ru)
            if best is not None:
                change = tuple(sorted(((t, r), (best[2], best[3]))))
                if change not in tried:
                    out.append((dn + best[0], db - best[1], change))
    out.sort(key=lambda m: (m[0], m[1], m[2]))
    return out


def refine(case: Any, sens: Sensitivity, additive: Plan, *, runs: int = DEFAULT_RUNS,
           allow_float: bool = True, uniform: Sequence[Plan] | None = None,
           progress: Progress | None = None, floor: float | None = None) -> Refined:
    """Local search on measured runs from the better of ``additive`` and the best uniform plan
    (module doc). ``additive`` and the ``uniform`` plans are run here unless already measured
    (``uniform`` None: :func:`uniform_plans` of ``sens``); ``floor``: the least metric a plan
    keeps (``--min-metric``; the measures' ``metric``)."""
    from .plan import run_plan

    opts = options(sens, allow_float)
    budget = additive.budget
    cap = _cap(budget, additive.elements)
    if not additive.measured:
        run_plan(case, additive)
    # activation sites (--activations) and smoothing stay as the additive plan has them: every
    # plan tried is measured the same way, by run_plan, with their noise in its prediction
    act_noise = additive.noise_predicted - _plan(sens, options(sens, True), budget,
                                                 additive.recipes).noise_predicted

    def like_additive(p: Plan) -> Plan:
        p.activations = list(additive.activations)
        p.float_activations = list(additive.float_activations)
        p.activation_mode = additive.activation_mode
        p.smoothing = dict(additive.smoothing)
        p.noise_predicted += act_noise
        return p

    ups = [like_additive(p) for p in
           (uniform_plans(sens, budget, allow_float) if uniform is None else uniform)]
    for p in ups:
        if not p.measured:
            run_plan(case, p)
    best_uniform = max(ups, key=lambda p: _score(p, floor), default=None)
    if best_uniform is not None and _score(best_uniform, floor) > _score(additive, floor):
        current, start = best_uniform, "uniform:" + _uniform_recipe(best_uniform)
    else:
        current, start = additive, "additive"
    result = Refined(current, additive, best_uniform, start, 0)
    tried: set = set()
    runs = max(0, int(runs))
    while result.runs < runs:
        moves = _moves(sens, opts, current.recipes, cap - current.bits, tried)
        accepted = False
        for _dn, _db, change in moves:
            if result.runs >= runs:
                break
            recipes = dict(current.recipes)
            recipes.update(dict(change))
            trial = like_additive(_plan(sens, opts, budget, recipes))
            if trial.bits > cap:
                continue
            tried.add(change)
            if progress:
                progress(result.runs, runs, " ".join(f"{t}→{r}" for t, r in change))
            run_plan(case, trial)
            result.runs += 1
            if _score(trial, floor) > _score(current, floor):
                result.moves.append({"changes": {t: r for t, r in change},
                                     "output_sqnr_db": _figure(trial),
                                     **({"metric": trial.measured["metric"]}
                                        if "metric" in trial.measured else {}),
                                     "bits_per_element": trial.bits_per_element})
                current = trial
                tried.clear()  # from a new plan every move is new
                accepted = True
                break
        if not accepted:
            break
    if progress:
        progress(runs, runs, "done")
    result.plan = current
    return result
