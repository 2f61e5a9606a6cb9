"""The Pareto table: latency × output SQNR × file size of the float model, qcore's exports and
onnxruntime's own quantizers, measured in one process (:func:`qcore.model.peers.measure`).

:func:`pareto_rows` is pure (dicts in, dicts out; no onnx, no onnxruntime): the CLI prints its
rows (:func:`format_pareto`), the plan JSON holds them (``pareto``) and the Model Fidelity page
draws them. A row is **Pareto-optimal** when no other measured row is at least as fast, at
least as faithful and at most as large, and strictly better in one of the three: those are the
exports worth choosing among; every other row names one that dominates it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["KINDS", "format_pareto", "pareto_rows"]

#: What a row is: the float model, one of qcore's exports, or a peer (onnxruntime's quantizers).
KINDS = ("float", "qcore", "peer")


def _num(p: Mapping[str, Any], key: str) -> float:
    v = p.get(key)
    return float(v) if isinstance(v, (int, float)) else math.nan


def _dominates(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """a is at least as fast, faithful and small as b, and strictly better in one."""
    ge = (a["latency_ms"] <= b["latency_ms"] and a["output_sqnr_db"] >= b["output_sqnr_db"]
          and a["file_bytes"] <= b["file_bytes"])
    gt = (a["latency_ms"] < b["latency_ms"] or a["output_sqnr_db"] > b["output_sqnr_db"]
          or a["file_bytes"] < b["file_bytes"])
    return ge and gt


def pareto_rows(points: Sequence[Mapping[str, Any]], reference: str = "float"
                ) -> list[dict[str, Any]]:
    """The Pareto table's rows, fastest first.

    ``points``: one mapping per model with ``name``, ``latency_ms`` (the median pass),
    ``output_sqnr_db`` (against the float model; inf for the float model itself) and
    ``file_bytes``; optional ``kind`` (:data:`KINDS`; default ``float`` for ``reference``, else
    ``qcore``), ``q1_ms`` / ``q3_ms`` (the spread), ``forms`` (``{form: count}``), ``note`` and
    ``error`` (a model that could not be made or run: kept as a row with no figures, never on
    the front). ``reference``: the name of the float model, the base of the ratios.

    Each row: the point's fields plus ``x_float`` (latency / the reference's), ``x_size``
    (file size / the reference's), ``pareto`` (bool) and ``dominated_by`` (the name of a
    measured row that dominates it — the fastest such — or None). Rows with an ``error`` sort
    last."""
    rows = [dict(p) for p in points]
    ref = next((r for r in rows if r.get("name") == reference), None)
    base_ms = _num(ref, "latency_ms") if ref else math.nan
    base_b = _num(ref, "file_bytes") if ref else math.nan
    for r in rows:
        r.setdefault("kind", "float" if r.get("name") == reference else "qcore")
        for k in ("latency_ms", "output_sqnr_db", "file_bytes"):
            r[k] = _num(r, k)
        r["x_float"] = r["latency_ms"] / base_ms if base_ms > 0 else math.nan
        r["x_size"] = r["file_bytes"] / base_b if base_b > 0 else math.nan
    measured = [r for r in rows if not r.get("error")
                and not any(math.isnan(r[k]) for k in ("latency_ms", "output_sqnr_db",
                                                       "file_bytes"))]
    by_speed = sorted(measured, key=lambda r: (r["latency_ms"], -r["output_sqnr_db"]))
    for r in rows:
        if r not in measured:
            r["pareto"], r["dominated_by"] = False, None
            continue
        dom = next((o for o in by_speed if o is not r and _dominates(o, r)), None)
        r["pareto"] = dom is None
        r["dominated_by"] = None if dom is None else dom["name"]
    return by_speed + [r for r in rows if r not in measured]


def _db(v: float) -> str:
    if math.isnan(v):
        return "—"
    return "∞" if v == math.inf else f"{v:.1f}"


def _ms(v: float) -> str:
    return f"{v:.3f}" if v < 10 else f"{v:.1f}"


def format_pareto(rows: Sequence[Mapping[str, Any]], host: str = "") -> str:
    """The rows as a plain-text table (the CLI's): ``*`` marks the Pareto-optimal rows."""
    head = f"{'':1s} {'model':30s} {'ms':>9s} {'IQR ms':>13s} {'x float':>8s} {'SQNR dB':>8s} " \
           f"{'MB':>7s} {'x size':>7s}  forms / note"
    lines = [f"Pareto table (latency x output SQNR x file size{'; ' + host if host else ''}; "
             "* = no other row is as fast, as faithful and as small):", head]
    for r in rows:
        if r.get("error"):
            lines.append(f"  {r['name']:30s} {'refused: ' + str(r['error'])}")
            continue
        q = (f"{_ms(r['q1_ms'])}-{_ms(r['q3_ms'])}" if "q1_ms" in r and "q3_ms" in r else "")
        forms = ", ".join(f"{k} {v}" for k, v in sorted((r.get("forms") or {}).items()))
        extra = "; ".join(x for x in (forms, r.get("note") or "") if x)
        lines.append(f"{'*' if r['pareto'] else ' '} {r['name']:30s} {_ms(r['latency_ms']):>9s} "
                     f"{q:>13s} {r['x_float']:8.2f} {_db(r['output_sqnr_db']):>8s} "
                     f"{r['file_bytes'] / 1e6:7.3f} {r['x_size']:7.2f}  {extra}")
    return "\n".join(lines)
