"""Each layer's form from its measured costs, and whether 4 bits pay on this CPU: the pure
choices the speed planner (:mod:`qcore.model.objectives`) starts from."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .forms.nbits_layers import NBITS_LAYER_FORMS

#: A form must measure at most this share of the float time to count as paying.
PAYS = 0.97
#: A weight-only lookup may add this share of the float layers' time (its gain is the file).
FREE = 0.01
#: The weight-only forms of a table lookup, fewest bits first.
LOOKUPS = ("weight-only-int4", "weight-only")


def fastest_form(costs: Mapping[str, float], forms: Sequence[str], total_ms: float
             ) -> tuple[str, str]:
    """(form, why) of a layer: its fastest integer form if it measures at most :data:`PAYS` of its float time, else float.
    A weight-only lookup (``weight-only-int4``, else ``weight-only``: only the file shrinks; a
    plan moves it only to the other one) is taken when it adds at most
    :data:`FREE` of the float layers' total time."""
    lookups = [f for f in LOOKUPS if f in forms and f in costs]  # fewest bits first
    if lookups:
        for f in lookups:
            added = costs[f] - costs.get("float", 0.0)
            if added <= FREE * total_ms:
                return f, f"{f} adds {added:.3f} ms (the file shrinks)"
        return "float", f"{lookups[-1]} would add {added:.3f} ms"
    quant = [f for f in forms if f != "float" and f in costs]
    if not quant:
        return "float", "no integer form for this op"
    best = min(quant, key=lambda f: costs[f])
    ratio = costs[best] / costs["float"] if costs.get("float") else math.inf
    if ratio > PAYS:
        return "float", f"no form pays on this CPU: {best} measured {ratio:.2f}x float"
    return best, f"{best} measured {ratio:.2f}x float"


def nbits_verdict(costs: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    """Whether 4 bits pay on this CPU, said before the export: over the layers that can take a
    4-bit form, the fastest such form's summed time against float and the fastest 8-bit
    integer form (``{}`` where no layer has a 4-bit form)."""
    rows = [c for c in costs.values() if any(f in c for f in NBITS_LAYER_FORMS)]
    if not rows:
        return {}
    fl = sum(c["float"] for c in rows)
    four = {f: sum(c[f] for c in rows) for f in NBITS_LAYER_FORMS if all(f in c for c in rows)}
    best = min(four, key=four.get)
    eight = [f for f in ("dynamic", "qlinear") if all(f in c for c in rows)]
    e8 = min((sum(c[f] for c in rows) for f in eight), default=math.inf)
    pays = four[best] <= PAYS * min(fl, e8)
    text = (f"4 bits {'pay' if pays else 'do not pay'} on this CPU: {best} measured "
            f"{four[best] / fl:.2f}x float" + (f", {four[best] / e8:.2f}x the 8-bit forms"
                                               if math.isfinite(e8) else "")
            + " over the layers that can take it"
            + "; ".join([""] + [f"{f} {v / fl:.2f}x" for f, v in sorted(four.items())]))
    return {"pays": pays, "form": best, "x_float": four[best] / fl,
            "x_8bit": four[best] / e8 if math.isfinite(e8) else None, "text": text}
