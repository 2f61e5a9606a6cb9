"""``--min-sqnr DB`` / ``--max-latency R`` on the command line: a form per layer, measured.

:func:`add_arguments` adds the two flags, :func:`check_arguments` refuses what does not go
with them before anything is loaded, and :func:`run_speed` loads the case, plans
(:func:`qcore.model.objectives.plan_for_speed`), prints the per-layer form table and the
measured figures, and writes ``--plan`` / ``--export``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
from typing import Any, TextIO

from ..errors import QuantizationError
from .objectives import check_objectives

__all__ = ["add_arguments", "check_arguments", "float8_note", "run_speed", "wants_speed"]

#: Flags of the bits plan that a speed plan does not take.
_NOT_WITH = (("budgets", "--budgets"), ("refine", "--refine"), ("feedback", "--feedback"),
             ("workers", "--workers"), ("scheduler", "--scheduler"), ("smooth", "--smooth"),
             ("tensors", "--tensors"), ("out", "--out"), ("nbits_form", "--nbits-form"))


def add_arguments(group: Any) -> None:
    """``--min-sqnr`` and ``--max-latency`` on ``group`` (a parser or an argument group)."""
    group.add_argument("--min-sqnr", type=float, metavar="DB",
                       help="the fastest export whose output SQNR, as onnxruntime runs it, is "
                       "at least DB: a form per layer (float, static uint8×int8 chains, "
                       "dynamic integer), measured on this CPU")
    group.add_argument("--max-latency", type=float, metavar="R",
                       help="the most faithful export at or under R × the float model's "
                       "latency (with --budget: within the bits budget too)")


def wants_speed(args: argparse.Namespace) -> bool:
    """Whether ``args`` ask for a speed plan."""
    return (getattr(args, "min_sqnr", None) is not None
            or getattr(args, "max_latency", None) is not None)


def check_arguments(args: argparse.Namespace) -> None:
    """One objective, finite and in range; no flag of the bits plan it does not take; the
    runtime onnxruntime (speed is measured there). QuantizationError otherwise."""
    check_objectives(args.min_sqnr, args.max_latency)
    if args.min_sqnr is not None and args.max_latency is not None:
        raise QuantizationError("give one objective: --min-sqnr DB or --max-latency R")
    for attr, flag in _NOT_WITH:
        v = getattr(args, attr, None)
        if v not in (None, False, 0, ""):
            raise QuantizationError(f"{flag} is for the bits plan; --min-sqnr / --max-latency "
                                    f"plan forms per layer without it")
    if getattr(args, "activations", "none") not in ("none", None):
        raise QuantizationError("--activations: --min-sqnr / --max-latency choose each "
                                "layer's activation form themselves; leave it out")
    runtime = getattr(args, "runtime", None)
    if runtime is not None and runtime.strip().lower() != "onnxruntime":
        raise QuantizationError(f"--runtime {runtime}: --min-sqnr / --max-latency measure "
                                "speed in onnxruntime; give --runtime onnxruntime or leave it "
                                "out")


def _load(args: argparse.Namespace, outputs: list[str] | None, int_range: tuple[int, int]):
    """(float model, batches, calibration batches) of the command line's case."""
    from .cases import load_case

    case = load_case(args.model, args.inputs, sentences=args.sentences, seed=args.seed,
                     int_range=int_range, dim=args.dim, threads=args.threads, outputs=outputs)
    model = case.model
    if isinstance(args.model, str) and args.model.lower().endswith(".onnx"):
        from . import require

        model = require("onnx").load(args.model)  # external data read in: sessions take bytes
    calibration = case.batches
    if getattr(args, "calibrate", None):
        calibration = load_case(args.model, args.calibrate, threads=args.threads).batches
    return model, case.batches, calibration


def run_speed(args: argparse.Namespace, out: TextIO, outputs: list[str] | None = None,
              int_range: tuple[int, int] = (0, 100)) -> int:
    """Plan, print, write (module doc)."""
    import llvmlite.binding as llvm

    from . import require
    from .objectives import SpeedCase, plan_for_speed

    model, batches, calibration = _load(args, outputs, int_range)
    threads = int(args.threads or 0)
    case = SpeedCase(model, batches, calibration, threads, outputs)
    plan = plan_for_speed(case, min_sqnr=args.min_sqnr, max_latency=args.max_latency,
                          budget=args.budget,
                          repeats=args.latency_repeats or 15,
                          log=lambda s: print(f"  {s}", file=out, flush=True))
    print_table(plan, out)
    lat = plan.latency
    cpu = llvm.get_host_cpu_name()
    load = ", ".join(f"{x:.2f}" for x in lat["load"] if x is not None) or "n/a"
    print(f"export: {lat['ms']:.3f} ms (p10 {lat['p10']:.3f}, p90 {lat['p90']:.3f}) vs float "
          f"{lat['float_ms']:.3f} ms: {lat['ratio']:.3f}x (median of paired passes), threads "
          f"{threads or 'all'}, {cpu}, load {load}", file=out)
    size = plan.size
    print(f"output SQNR as deployed {_db(plan.output_sqnr_db)} dB; file "
          f"{size['export_bytes'] / size['float_bytes']:.3f}x float "
          f"({size['bits_per_weight']:.2f} bits per weight); calibration {plan.method}"
          f"{'; bias correction' if plan.start.get('bias_correction') else ''}"
          f"{'; SmoothQuant ' + str(plan.smooth) if plan.smooth else ''}", file=out)
    goal = (f"--min-sqnr {args.min_sqnr}" if args.min_sqnr is not None
            else f"--max-latency {args.max_latency}")
    if not plan.met:
        print(f"not met: {goal} — the best plan found is above", file=out)
    js = plan.to_json()
    js["host"] = {"cpu": cpu, "machine": platform.machine(),
                  "onnxruntime": require("onnxruntime").__version__}
    if args.export:
        from .graph import save

        save(plan.export, args.export)
    if getattr(args, "peers", False):  # the Pareto table, the export beside onnxruntime's own
        from .peers import print_peers

        forms: dict[str, int] = {}
        for r in plan.table():
            forms[r["form"]] = forms.get(r["form"], 0) + 1
        js["pareto"] = print_peers(args, model, batches, calibration, forms, out)
    if args.plan:
        with open(args.plan, "w", encoding="utf-8") as f:
            json.dump(js, f, indent=1)
    return 0


def _db(v: float) -> str:
    return f"{v:.2f}" if math.isfinite(v) else str(v)


def print_table(plan: Any, out: TextIO) -> None:
    """The per-layer form table: layer, op, form, the forms' measured ms, why."""
    rows = plan.table()
    w = max([len(r["layer"]) for r in rows] + [5])
    print(f"{'layer':{w}s} {'op':6s} {'form':12s} {'ms per form (alone)':32s} why", file=out)
    for r in rows:
        ms = " ".join(f"{k}={v:.3f}" for k, v in r["ms"].items())
        print(f"{r['layer']:{w}s} {r['op']:6s} {r['form']:12s} {ms:32s} {r['why']}", file=out)


def float8_note(ratio: float) -> str:
    """What the CLI says about a float8 export: onnxruntime's CPU provider has no float8
    kernel, so its Q/DQ run unfused (the ratio measured)."""
    return f"no fast float8 kernel in this runtime: {ratio:.2f}x float"
