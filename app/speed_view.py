"""Model Fidelity's speed plan and Pareto table: cached calls into :mod:`qcore.model` and the
tables the page draws.

- :func:`speed_plan` is ``python -m qcore.model --min-sqnr DB`` / ``--max-latency R``
  (:func:`qcore.model.objectives.plan_for_speed`): every layer's forms timed alone on this CPU,
  then a form per layer chosen on measured runs; :func:`forms_table` is its per-layer table
  (which form each layer got, every form's measured cost, why).
- :func:`pareto_table` is ``--peers``: the float model, qcore's exports and onnxruntime's own
  ``quantize_static`` / ``quantize_dynamic`` timed in turns in one process, with the output
  SQNR and file size of each (:func:`qcore.model.peers.peer_points`,
  :func:`qcore.model.pareto.pareto_rows`).
- :func:`float8_notes`: what the command line says of an export with float8 activations
  (:func:`qcore.model.speed_cli.float8_note`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd

from qcore.model import cases

#: The speed plan's objectives (the command line's flags), as the page names them.
OBJECTIVES = {"min_sqnr": "fastest at an output SQNR", "max_latency": "most faithful at a speed"}
#: Passes per timing: the command line's default is 15; the page takes fewer (a shared machine,
#: a learner waiting), and says so.
REPEATS = 7
#: Threads the speed plan and the Pareto table time with (the command line's ``--threads 1``).
THREADS = 1


def speed_plan(case: cases.ModelCase, objective: str, value: float,
               log: Callable[[str], None] | None = None, repeats: int = REPEATS) -> Any:
    """The speed plan of ``case`` for one objective (``min_sqnr``: the fastest export whose
    output SQNR as onnxruntime runs it is at least ``value`` dB; ``max_latency``: the most
    faithful export at or under ``value`` × the float model's latency), calibrated on the
    case's own batches, one thread; ``log`` gets each step's line (the command line prints
    them)."""
    from qcore.model.objectives import SpeedCase, plan_for_speed

    if objective not in OBJECTIVES:
        raise ValueError(f"objective {objective!r}: one of {', '.join(OBJECTIVES)}")
    sc = SpeedCase(case.model, case.batches, case.batches, THREADS, case.outputs)
    goal = {"min_sqnr": float(value)} if objective == "min_sqnr" else {"max_latency": float(value)}
    return plan_for_speed(sc, repeats=repeats, log=log or (lambda s: None), **goal)


def forms_table(sp: Any) -> pd.DataFrame:
    """One row per layer of a speed plan: the layer, its op and weight shape, the form it got,
    each form's measured time alone (ms; empty where the layer cannot take the form) and why
    (the planner's own words)."""
    rows = sp.table()
    forms = list(dict.fromkeys(f for r in rows for f in r["ms"]))
    out = []
    for r in rows:
        row = {"layer": r["layer"], "op": r["op"], "weight shape": " × ".join(map(str, r["shape"])),
               "form": r["form"]}
        for f in forms:
            row[f"{f} ms"] = r["ms"].get(f, math.nan)
        row["why"] = r["why"]
        out.append(row)
    return pd.DataFrame(out)


def form_counts(sp: Any) -> dict[str, int]:
    """How many layers run in each form."""
    out: dict[str, int] = {}
    for r in sp.table():
        out[r["form"]] = out.get(r["form"], 0) + 1
    return out


def speed_figures(sp: Any) -> list[tuple[str, str, str]]:
    """(label, value, note) of a speed plan's measured figures: the whole export beside the
    float model (medians of passes in turns, p10–p90), its output SQNR as deployed, its file."""
    lat, size = sp.latency, sp.size
    ratio = lat["ms"] / lat["float_ms"] if lat.get("float_ms") else math.nan
    db = sp.output_sqnr_db
    return [
        ("Latency, 1 thread", f"{lat['ms']:.3f} ms",
         f"{ratio:.2f}× float ({lat['float_ms']:.3f} ms) · p10–p90 {lat['p10']:.3f}–"
         f"{lat['p90']:.3f} vs {lat['float_p10']:.3f}–{lat['float_p90']:.3f}"
         + (" · within noise" if _overlap(lat) else "")),
        ("Output SQNR as deployed", f"{db:.2f} dB" if math.isfinite(db) else str(db),
         f"calibration {sp.method}" + (f", SmoothQuant {sp.smooth}" if sp.smooth else "")),
        ("File", f"{size['export_bytes'] / size['float_bytes']:.3f}× float",
         f"{size['export_bytes'] / 1e6:.3f} MB · {size['bits_per_weight']:.2f} bits per weight"),
    ]


def _overlap(lat: Mapping[str, float]) -> bool:
    """Whether each median lies inside the other's p10–p90: repeats could swap them."""
    return (lat["float_p10"] <= lat["ms"] <= lat["float_p90"]
            or lat["p10"] <= lat["float_ms"] <= lat["p90"])


def objective_met(sp: Any) -> str:
    """The plan's objective in words, and whether the measured plan meets it."""
    o = sp.objective
    goal = (f"output SQNR ≥ {o['min_sqnr_db']:g} dB" if "min_sqnr_db" in o
            else f"latency ≤ {o['max_latency']:g}× float")
    return f"{goal}: {'met' if sp.met else 'not met — the best plan found is shown'}"


def pareto_table(case: cases.ModelCase, exports: Mapping[str, Any],
                 forms: Mapping[str, Mapping[str, int]], repeats: int = REPEATS) -> pd.DataFrame:
    """The Pareto table: the float model, ``exports`` (qcore's, name → ModelProto or its
    serialized bytes; ``forms``: name → form counts) and onnxruntime's quantize_static and
    quantize_dynamic (calibrated on the case's batches) timed in turns on one thread, fastest
    first; ``pareto`` marks the rows no other row beats on latency, SQNR and file size at once.
    A quantizer that refuses the model is a row with its reason and no figures."""
    import onnx

    from qcore.model.pareto import pareto_rows
    from qcore.model.peers import peer_points

    models = {k: (onnx.load_from_string(m) if isinstance(m, bytes) else m)
              for k, m in exports.items()}
    points = peer_points(case.model, case.batches, models, case.batches, THREADS, repeats,
                         forms=forms)
    out = []
    for r in pareto_rows(points):
        forms_r = ", ".join(f"{n} × {f}" for f, n in sorted((r.get("forms") or {}).items()))
        out.append({"model": r["name"], "Pareto": bool(r.get("pareto")),
                    "ms (median)": r["latency_ms"],
                    "IQR ms": (f"{r['q1_ms']:.3f}–{r['q3_ms']:.3f}"
                               if "q1_ms" in r and not r.get("error") else ""),
                    "× float": r["x_float"], "output SQNR (dB)": r["output_sqnr_db"],
                    "MB": r["file_bytes"] / 1e6, "× size": r["x_size"],
                    "what": r.get("error") and f"refused: {r['error']}" or r.get("what")
                    or forms_r or ("the float model" if r["name"] == "float" else ""),
                    "dominated by": r.get("dominated_by") or ""})
    return pd.DataFrame(out)


def float8_notes(p: Any, built: Mapping[str, Any]) -> list[str]:
    """For a timed export whose plan quantizes activations to a float8 type: per thread count,
    what the command line says (onnxruntime's CPU provider has no float8 kernel, so its Q/DQ
    run as written; the ratio measured). Empty otherwise."""
    from qcore.model.speed_cli import float8_note

    if not any(str(a.dtype).startswith("float8") for a in getattr(p, "activations", ())):
        return []
    out = []
    for k, ms in (built.get("latency_ms") or {}).items():
        f = built["float_latency_ms"][k]
        threads = "1 thread" if k == "1" else f"{k} threads"
        out.append(f"{threads}: {float8_note(ms / f)}")
    return out


#: How the tables' numbers are written (columns not named: as they are).
_FORMATS = {"ms (median)": "{:.4f}", "× float": "{:.2f}", "output SQNR (dB)": "{:.2f}",
            "MB": "{:.3f}", "× size": "{:.2f}"}


def shown(df: pd.DataFrame) -> Any:
    """``df`` styled for ``st.table`` (every value whole, the cells wrap): the numbers written
    with the digits they carry (a form's ms to 0.1 µs), no index, an absent ms or figure as
    "—", a Pareto mark as ✓."""
    fmt = {c: "{:.4f}" for c in df.columns
           if c.endswith(" ms") and pd.api.types.is_numeric_dtype(df[c])}
    fmt.update({c: f for c, f in _FORMATS.items() if c in df.columns})
    fmt.update({"Pareto": lambda v: "✓" if v else ""} if "Pareto" in df.columns else {})
    return df.style.format(fmt, na_rep="—").hide(axis="index")
