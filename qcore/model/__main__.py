"""python -m qcore.model MODEL [--inputs FILE.npz] [--recipes R1,R2,...] [--budget BITS]
[--out TABLE.csv] [--plan PLAN.json] [--export QDQ.onnx] [--activations MODE]
[--calibrate FILE.npz] [--float-activations K] [--smooth ALPHA]
[--runtime onnxruntime|reference] [--nbits-form matmulnbits-node|dq-matmul]

Sensitivity of every weight × every recipe (alone) and of every recipe on all weights; with
--budget, the exactly optimal plan, run and measured; with --export, the plan as a QDQ model.
MODEL is a .onnx path, ``minilm`` (Gemm form) or ``minilm-matmul`` (MatMul form). With
--runtime onnxruntime (the default with --export) the plan takes only configurations the
installed onnxruntime runs, the export is written in the forms it fuses into integer kernels and
its latency is measured beside the float model's (int4/uint4 weights blocked along K as
com.microsoft MatMulNBits nodes; ``--nbits-form dq-matmul`` keeps the standard-ONNX
DequantizeLinear → MatMul form). Progress goes to stderr, the summary to stdout; errors are
one ``error:`` line and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import NoReturn, TextIO

from ..errors import QuantizationError
from ..report.recipes import DEFAULT_RECIPES

__all__ = ["main"]


class Bar:
    """``bar(done, total, label)``: one redrawn line on a terminal, a line every few seconds
    otherwise."""

    def __init__(self, title: str, stream: TextIO | None = None, every: float = 5.0) -> None:
        self.title, self.stream, self.every = title, stream or sys.stderr, every
        self.t0 = time.perf_counter()
        self.last = -math.inf
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def __call__(self, done: int, total: int, label: str = "") -> None:
        now = time.perf_counter()
        final = done >= total
        if not final and now - self.last < (0.1 if self.tty else self.every):
            return
        self.last = now
        el = now - self.t0
        eta = el / done * (total - done) if done else math.nan
        filled = int(30 * done / total) if total else 30
        eta_s = f"{eta:5.0f}s" if math.isfinite(eta) else "    ?"
        line = (f"{self.title} [{'#' * filled}{' ' * (30 - filled)}] {done}/{total} "
                f"{el:5.0f}s eta {eta_s}  {label[:60]}")
        if self.tty:
            self.stream.write("\r" + line.ljust(140) + ("\n" if final else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, like every other refusal
        self.exit(2, f"error: {message} (see --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m qcore.model", description=__doc__.split("\n\n")[1])
    p.add_argument("model", help="a .onnx path, 'minilm' or 'minilm-matmul' (its linear layers as "
                   "MatMul on [in, out] weights)")
    p.add_argument("--inputs", help=".npz whose arrays are the graph inputs (else generated)")
    p.add_argument("--recipes", default=",".join(DEFAULT_RECIPES),
                   help="comma-separated report recipes (default: the report's eight)")
    p.add_argument("--budget", type=float, help="bits per weight element for the plan")
    p.add_argument("--out", help="write the table (CSV)")
    p.add_argument("--plan", help="write the plan (JSON)")
    p.add_argument("--export", help="write the plan as a QDQ ONNX model")
    p.add_argument("--budgets", help="comma-separated budgets: plan, run and print each "
                   "(a bits-vs-fidelity curve; --plan and --export take --budget)")
    p.add_argument("--tensors", help="comma-separated weight names (default: every float "
                   "initializer of rank >= 2)")
    p.add_argument("--sentences", type=int, default=32,
                   help="MiniLM: how many shipped sentences to run (0: all; default 32)")
    p.add_argument("--seed", type=int, default=0, help="seed of generated inputs")
    p.add_argument("--int-range", default="0,100", help="LO,HI of generated integer inputs")
    p.add_argument("--dim", type=int, default=1, help="size of symbolic dims of generated inputs")
    p.add_argument("--logits", action="store_true", help="outputs are logits (KL, top-1)")
    p.add_argument("--outputs", help="comma-separated output names the model's SQNR averages "
                                     "over (default: all); each output's own SQNR and max |Δ| "
                                     "are in the table and the plan either way")
    p.add_argument("--no-float", action="store_true",
                   help="the plan may not leave a weight in float32")
    p.add_argument("--threads", type=int, default=0, help="onnxruntime intra-op threads")
    p.add_argument("--refine", type=int, metavar="N",
                   help="improve the plan by up to N measured runs of local search (without it, "
                   "a plan whose measurement misses its prediction by more than 1 dB is "
                   "refined by up to 20 runs)")
    p.add_argument("--feedback", metavar="OUT=IN[,...]",
                   help="run over a sequence: the --inputs arrays hold a leading step axis, each "
                   "step's output OUT is fed to the next step's input IN (states left out of "
                   "the file start from zeros); fidelity over all steps and per step")
    p.add_argument("--workers", type=int, default=0, metavar="N",
                   help="run the sensitivity runs on a Dask LocalCluster of N worker processes "
                   "(the same rows as in this process)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="run the sensitivity runs on a running Dask cluster (its workers read "
                   "the model and inputs at the same paths)")
    p.add_argument("--activations", default="none",
                   help="none | dynamic | static[:TYPE][@METHOD]: quantize the activation sites "
                   "(the data inputs of MatMul/Gemm/Conv); TYPE int8 (default), uint8, int16, "
                   "uint16, float8e4m3fn, float8e5m2, …; METHOD minmax (default), percentile, "
                   "mse, entropy")
    p.add_argument("--calibrate", help=".npz of graph inputs the static activation scales "
                   "are calibrated on (default: the inputs)")
    p.add_argument("--float-activations", type=int, default=0, metavar="K",
                   help="the plan keeps the K most sensitive activation sites in float")
    p.add_argument("--smooth", type=float, metavar="ALPHA",
                   help="SmoothQuant: migrate activation outliers into the weights with "
                   "strength ALPHA in [0, 1] (e.g. 0.5)")
    p.add_argument("--runtime", help="plan for this runtime: onnxruntime (only what the "
                   "installed onnxruntime runs; the default with --export) or reference "
                   "(every ONNX type)")
    p.add_argument("--nbits-form", metavar="FORM",
                   help="how an --export for onnxruntime writes int4/uint4 weights blocked "
                   "along K: matmulnbits-node (the default: com.microsoft MatMulNBits) or "
                   "dq-matmul (standard ONNX DequantizeLinear -> MatMul)")
    p.add_argument("--latency-repeats", type=int, metavar="N",
                   help="timed passes per model for the export's latency, 1 to 1000 "
                   "(default 10)")
    return p


def _extra(kind: str, m: dict) -> str:
    if kind == "embedding":
        return f"  cosine {m['cosine_mean']:.6f} spearman {m['spearman']:.6f}"
    if kind == "logits":
        return f"  KL {m['kl']:.3g} top-1 {m['top1']:.4f}"
    return ""


def _floats(text: str | None) -> list[float]:
    from .checks import parse_budgets

    return parse_budgets(text)


def check_args(args: argparse.Namespace
               ) -> tuple[list[str] | None, list[str] | None, tuple[int, int]]:
    """Every argument the model is not needed for, checked before anything is loaded
    (:mod:`qcore.model.checks`): (the --tensors names, the --outputs names, the --int-range)."""
    from . import checks

    if (args.plan or args.export) and args.budget is None:
        raise QuantizationError("--plan and --export need --budget BITS (bits per weight)")
    if args.budget is not None:
        checks.check_budget(args.budget)
    checks.parse_budgets(args.budgets)
    checks.check_threads(args.threads)
    checks.check_dim(args.dim)
    checks.check_seed(args.seed)
    checks.check_workers(args.workers)
    _check_runtime_args(args)
    if (args.workers or args.scheduler) and args.smooth is not None:
        raise QuantizationError("--smooth changes the model the sensitivity runs on; run it "
                                "without --workers / --scheduler")
    if args.refine is not None and args.refine < 0:
        raise QuantizationError(f"--refine {args.refine}: give a number of runs >= 0")
    checks.check_sentences(args.sentences, None)
    if args.out:
        checks.check_output_path("--out", args.out, checks.TABLE_SUFFIXES)
    if args.plan:
        checks.check_output_path("--plan", args.plan)
    if args.export:
        checks.check_output_path("--export", args.export)
    sources = {"MODEL": args.model, "--inputs": args.inputs}
    checks.check_outputs_distinct({"--out": args.out, "--plan": args.plan,
                                   "--export": args.export},
                                  {k: v for k, v in sources.items()
                                   if v and "\x00" not in v and os.path.isfile(v)})
    for flag, path in (("--inputs", args.inputs), ("--calibrate", args.calibrate)):
        if path and args.model.lower() != "minilm":
            checks.check_input_file(flag, path)
    outputs = checks.parse_tensors(args.outputs, "--outputs", "output")
    _check_activation_args(args)
    return (checks.parse_tensors(args.tensors), outputs,
            checks.parse_int_range(args.int_range))


def _check_runtime_args(args: argparse.Namespace) -> None:
    """--runtime a runtime; --latency-repeats in range and only where an export is timed
    (--export for onnxruntime)."""
    from .checks import check_latency_repeats
    from .runtime import check_runtime

    if args.runtime is not None:
        check_runtime(args.runtime)
    if args.nbits_form is not None:
        from .fused import NBITS_FORMS

        if args.nbits_form not in NBITS_FORMS:
            raise QuantizationError(f"--nbits-form {args.nbits_form!r}: valid are "
                                    f"{', '.join(NBITS_FORMS)}")
        if not args.export or check_runtime(args.runtime or "onnxruntime") != "onnxruntime":
            raise QuantizationError(f"--nbits-form {args.nbits_form}: only an --export for "
                                    "--runtime onnxruntime has a choice of forms")
    if args.latency_repeats is None:
        return
    check_latency_repeats(args.latency_repeats)
    runtime = check_runtime(args.runtime or "onnxruntime")
    if not args.export or runtime != "onnxruntime":
        raise QuantizationError(f"--latency-repeats {args.latency_repeats}: only an --export "
                                f"for --runtime onnxruntime is timed")


def _check_activation_args(args: argparse.Namespace) -> None:
    """--activations parsed; --float-activations, --calibrate and --smooth consistent with it."""
    from .activations import parse_activations

    mode = parse_activations(args.activations)
    if mode.mode == "none" and (args.float_activations or args.calibrate):
        raise QuantizationError("--float-activations and --calibrate need --activations "
                                "dynamic or static[:TYPE][@METHOD]")
    if args.float_activations < 0:
        raise QuantizationError(f"--float-activations {args.float_activations}: give a count "
                                f">= 0")
    if args.smooth is not None and not 0 <= args.smooth <= 1:
        raise QuantizationError(f"--smooth {args.smooth}: alpha must be in [0, 1]")


def _fmt(v: float, nd: int = 2) -> str:
    return f"{v:.{nd}f}" if isinstance(v, float) and math.isfinite(v) else str(v)


def run(args: argparse.Namespace, out: TextIO) -> int:
    from .cases import load_case
    from .checks import check_case
    from .plan import make_plan, run_plan
    from .sensitivity import correlation, measure, uniform, write_table

    tensors, outputs, (lo, hi) = check_args(args)
    from ..report.recipes import parse_recipes

    recipes = [r.name for r in parse_recipes(args.recipes)]
    from . import activations as act
    from .runtime import check_runtime

    mode = act.parse_activations(args.activations)
    runtime = check_runtime(args.runtime or ("onnxruntime" if args.export else "reference"))
    t0 = time.perf_counter()
    if args.feedback:
        from .feedback import load_fed_back_case

        case = load_fed_back_case(args.model, args.inputs, args.feedback, dim=args.dim,
                                  kind="logits" if args.logits else None, threads=args.threads,
                                  outputs=outputs)
    else:
        case = load_case(args.model, args.inputs, sentences=args.sentences, seed=args.seed,
                         int_range=(lo, hi), dim=args.dim,
                         kind="logits" if args.logits else None, threads=args.threads,
                         outputs=outputs)
    if tensors:
        missing = [t for t in tensors if t not in case.arrays]
        if missing:
            raise QuantizationError(f"--tensors {missing} are not weights of the model; "
                                    f"its weights: {', '.join(case.weights)}")
    check_case(case, tensors or case.weights)
    for b in ([args.budget] if args.budget is not None else []) + _floats(args.budgets):
        _check_budget(case, tensors or case.weights, recipes, b, not args.no_float)
    print(f"{case.name}: {len(tensors or case.weights)} weight tensors, "
          f"{len(recipes)} recipes ({time.perf_counter() - t0:.1f} s to load)", file=out)
    float_model = case.model  # latency is measured against the model as given
    case, specs, act_rows, smoothing = _activations(case, mode, args, out)
    t1 = time.perf_counter()
    if args.workers or args.scheduler:
        sens = _measure_on_dask(args, recipes, tensors, (lo, hi))
    else:
        sens = measure(case, recipes, tensors, Bar("sensitivity"))
    t_sens = time.perf_counter() - t1
    if runtime != "reference":
        sens = _for_runtime(case, sens, runtime, out)
    rows = sens.rows + act_rows + uniform(case, recipes, tensors, Bar("uniform    "))
    corr = correlation(sens.rows)
    print(f"sensitivity: {len(sens.rows)} runs in {t_sens:.1f} s; tensor SQNR vs output SQNR: "
          f"Pearson {_fmt(corr['pearson'], 3)}, Spearman {_fmt(corr['spearman'], 3)} "
          f"({corr['n']} rows)", file=out)
    print(f"{'recipe':28s} {'bits/w':>7s} {'output SQNR dB':>15s} {'max|d|':>10s}", file=out)
    for r in rows:
        if r["tensor"] == "*":
            extra = _extra(case.kind, r)
            print(f"{r['recipe']:28s} {r['bits_per_element']:7.3f} "
                  f"{_fmt(r['output_sqnr_db']):>15s} {r['max_abs']:10.3g}{extra}", file=out)
            if specs:
                _print_with_activations(case, r["recipe"], tensors, specs, mode.name, out)
    if args.out:
        write_table(rows, args.out)
    for b in _floats(args.budgets):
        p = make_plan(sens, b, allow_float=not args.no_float)
        _attach(p, specs, act_rows, args.float_activations, mode.name,
                smoothing)
        m = run_plan(case, p)
        extra = _extra(case.kind, m)
        print(f"{'plan @ ' + str(b):28s} {p.bits_per_element:7.3f} "
              f"{_fmt(m['output_sqnr_db']):>15s} {m['max_abs']:10.3g}{extra}  "
              f"(predicted {_fmt(p.output_sqnr_db_predicted)} dB)", file=out)
    if args.budget is None:
        return 0
    t2 = time.perf_counter()
    plan = make_plan(sens, args.budget, allow_float=not args.no_float)
    plan.runtime = runtime
    t_plan = time.perf_counter() - t2
    _attach(plan, specs, act_rows, args.float_activations, mode.name,
            smoothing)
    run_plan(case, plan)
    print(f"plan at {args.budget} bits/weight ({t_plan * 1000:.0f} ms): "
          f"{plan.bits_per_element:.4f} bits/weight, output SQNR predicted "
          f"{_fmt(plan.output_sqnr_db_predicted)} dB, measured "
          f"{_fmt(plan.measured['output_sqnr_db'])} dB", file=out)
    _print_steps(plan.measured, out)
    refined = _refine(args, case, sens, plan, out)
    if refined is not None:
        plan = refined.plan
        plan.runtime = runtime
        _print_steps(plan.measured, out)
    if args.export:  # before the JSON: the export's latency and forms go into it
        write_export(case, plan, args.export, out, runtime,
                     10 if args.latency_repeats is None else args.latency_repeats, float_model,
                     args.nbits_form or "matmulnbits-node")
    plan_json = plan.to_json()
    if refined is not None:
        plan_json["refine"] = refined.to_json()
    if args.plan:
        with open(args.plan, "w", encoding="utf-8") as f:
            json.dump(plan_json, f, indent=1)
    return 0


def _print_steps(measured: dict, out: TextIO) -> None:
    """With --feedback: the plan's SQNR per step, summarised."""
    from .feedback import per_step_rows

    rows = per_step_rows(measured)
    if not rows:
        return
    sq = [r["sqnr_db"] for r in rows]
    worst = min(range(len(sq)), key=lambda i: sq[i])
    print(f"  over {len(sq)} steps (state fed back): first {_fmt(sq[0])} dB, last "
          f"{_fmt(sq[-1])} dB, worst {_fmt(sq[worst])} dB at step {worst}", file=out)


def _refine(args: argparse.Namespace, case, sens, plan, out: TextIO):
    """With --refine N, or where measured and predicted differ by more than 1 dB: the plan
    improved by local search on measured runs (:mod:`qcore.model.refine`); else None."""
    from .refine import DEFAULT_RUNS, GAP_DB, refine

    measured = plan.measured["output_sqnr_db"]
    predicted = plan.output_sqnr_db_predicted
    gap = abs(measured - predicted) if math.isfinite(measured) and math.isfinite(predicted) \
        else (0.0 if measured == predicted else math.inf)
    if args.refine is None and gap <= GAP_DB:
        return None
    runs = DEFAULT_RUNS if args.refine is None else args.refine
    r = refine(case, sens, plan, runs=runs, allow_float=not args.no_float,
               progress=Bar("refine     "))
    uni = ("no uniform recipe fits" if r.uniform is None else
           f"best uniform {r.to_json()['uniform']['recipe']} "
           f"{_fmt(r.uniform.measured['output_sqnr_db'])} dB")
    print(f"refined: output SQNR {_fmt(r.figure)} dB at {r.plan.bits_per_element:.4f} "
          f"bits/weight (predicted {_fmt(plan.output_sqnr_db_predicted)}, measured "
          f"{_fmt(measured)}; {uni}; start {r.start}, {r.runs} runs, "
          f"{len(r.moves)} moves kept)", file=out)
    return r


def _measure_on_dask(args: argparse.Namespace, recipes: list[str], tensors: list[str] | None,
                     int_range: tuple[int, int]):
    """The sensitivity rows from Dask workers (:mod:`qcore.model.distributed`)."""
    from ..report.progress import ProgressBar
    from .distributed import CaseSpec, measure_on_dask

    spec = CaseSpec(args.model, args.inputs, args.sentences, args.seed, int_range, args.dim,
                    "logits" if args.logits else None, args.threads,
                    getattr(args, "feedback", None), getattr(args, "outputs", None))
    return measure_on_dask(spec, recipes, tensors, workers=args.workers,
                           scheduler=args.scheduler, progress=ProgressBar(label="sensitivity "))


def _for_runtime(case, sens, runtime: str, out: TextIO):
    """The sensitivity rows ``runtime`` can run (each configuration probed once)."""
    from .runtime import filter_case_sensitivity

    kept = filter_case_sensitivity(case, sens, runtime)
    dropped = sorted({r["recipe"] for r in sens.rows} - {r["recipe"] for r in kept.rows})
    if dropped:
        print(f"runtime {runtime}: the plan leaves out {', '.join(dropped)} (the installed "
              f"onnxruntime does not run them)", file=out)
    return kept


def _activations(case, mode, args: argparse.Namespace, out: TextIO):
    """(case, specs, rows, smoothing as the plan records it): smoothing applied (--smooth), the sites' specs calibrated, each
    site's sensitivity measured alone (:func:`qcore.model.activations.study`)."""
    from . import activations as act

    if mode.mode == "none" and args.smooth is None:
        return case, [], [], {}
    calib = act.calibration_case(case, args.calibrate) if args.calibrate else None
    if mode.mode != "none" and args.float_activations:
        n = len(act.runner_for(case).names)
        if args.float_activations > n:
            raise QuantizationError(f"--float-activations {args.float_activations}: the model "
                                    f"has {n} activation sites")
    t = time.perf_counter()
    s = act.study(case, mode, alpha=args.smooth, calibration=calib,
                  progress=Bar("activations"))
    if s.smoothing is not None:
        how = list(s.smoothing.folded.values())
        print(f"smoothing (alpha {args.smooth}): {len(s.smoothing.factors)} sites, "
              f"{how.count('layernorm')} folded into LayerNorm, {how.count('upstream')} into "
              f"constants or weights upstream, {how.count('mul')} by a Mul", file=out)
    smoothing = ({"alpha": s.smoothing.alpha, "sites": dict(s.smoothing.folded)}
                 if s.smoothing is not None else {})
    if mode.mode == "none":
        return s.case, [], [], smoothing
    print(f"activations {mode.name}: {len(s.specs)} sites ({time.perf_counter() - t:.1f} s); "
          f"all quantized, weights float: output SQNR "
          f"{_fmt(s.activations_only['output_sqnr_db'])} dB; most sensitive alone:", file=out)
    for r in sorted(s.rows, key=lambda r: r["output_sqnr_db"])[:5]:
        print(f"  {_fmt(r['output_sqnr_db']):>8s} dB  {r['label']}  ({r['tensor']})", file=out)
    return s.case, s.specs, s.rows, smoothing


def _print_with_activations(case, recipe: str, tensors, specs, name: str, out: TextIO) -> None:
    """One recipe on every weight with every activation site quantized, printed as a row."""
    from .activations import evaluate
    from .fidelity import recipe_weights

    m = evaluate(case, specs, recipe_weights(case, recipe, tensors or case.weights))
    print(f"{'  + ' + name:28s} {'':7s} {_fmt(m['output_sqnr_db']):>15s} "
          f"{m['max_abs']:10.3g}{_extra(case.kind, m)}", file=out)


def _attach(plan, specs, rows, k: int, name: str, smoothing: dict | None = None) -> None:
    """The SmoothQuant factors on a plan, then its activation specs
    (:func:`~qcore.model.activations.attach_activations`, the rule the Model page follows)."""
    from .activations import attach_activations

    plan.smoothing = dict(smoothing or {})
    attach_activations(plan, specs, rows, k, name)


def _check_budget(case, tensors: list[str], recipes: list[str], budget: float,
                  allow_float: bool) -> None:
    """Refuse a budget below the cheapest plan before the long part (bits depend on the shape
    and the recipe, so one tensor of each shape is quantized)."""
    by_shape: dict[tuple, float] = {}
    total = n = 0
    roles = case.roles
    for t in tensors:
        x = case.arrays[t]
        key = (x.shape, roles[t])
        if key not in by_shape:
            cands = [32.0] if allow_float else []
            for r in recipes:
                try:
                    cands.append(case.quantize(t, r).bits_per_element)
                except ValueError:
                    pass
            by_shape[key] = min(cands) if cands else math.inf
        total += by_shape[key] * x.size
        n += x.size
    if total > budget * n * (1 + 1e-12):
        raise QuantizationError(f"--budget {budget} bits per weight is below the cheapest plan "
                                f"of these recipes ({total / n:.4f} bits per weight)")


def write_export(case, plan, path: str, out: TextIO, runtime: str = "reference",
                 repeats: int = 10, float_model=None,
                 nbits_form: str = "matmulnbits-node") -> None:
    """Export the plan (for onnxruntime: in the forms it fuses, :mod:`qcore.model.fused`),
    save it, run it in onnxruntime where it can, compare, and (for onnxruntime) time it beside
    the float model (``float_model``, default the case's; the unsmoothed one with --smooth)
    into ``plan.deploy``; ``nbits_form``: :func:`qcore.model.fused.deployable_export`'s."""
    import numpy as np

    from .export import export_plan, unsupported_nodes
    from .graph import make_session
    from .plan import planned_weights

    if runtime == "onnxruntime":  # the forms onnxruntime fuses, activations included
        from .fused import deployable_export

        deployable = deployable_export(case.model, plan.recipes, case.arrays,
                                       {a.site: a for a in plan.activations}, nbits_form)
        model = deployable.model
        forms: dict[str, int] = {}
        for f in deployable.forms.values():
            forms[f] = forms.get(f, 0) + 1
        plan.deploy["forms"] = forms
    else:
        model = export_plan(case.model, plan, case.arrays)
    bad = unsupported_nodes(model)
    if plan.activations and runtime != "onnxruntime":
        from .activations import insert_qdq

        model = insert_qdq(model, plan.activations)
    save(model, path)
    if bad:
        print(f"export: {path} is valid ONNX; onnxruntime has no kernel for {len(bad)} "
              f"DequantizeLinear node(s): {', '.join(bad)}", file=out)
        return
    if hasattr(case, "run_model"):  # a fed-back case runs the export over its steps
        outs = case.run_model(model)
    else:
        session = make_session(model, case.threads)
        names = [o.name for o in session.get_outputs()]
        per = [session.run(names, b) for b in case.batches]
        outs = per[0] if len(per) == 1 else [np.concatenate([p[k] for p in per])
                                             for k in range(len(names))]
        if case.order is not None:
            outs = [_restore(o, case.order) for o in outs]
    if plan.activations:  # the same steps (or batches), activations fake-quantized
        from .activations import runner_for

        fake = runner_for(case).run(plan.activations, planned_weights(case, plan))
    else:
        fake = case.run(planned_weights(case, plan))
    if [np.shape(a) for a in outs] != [np.shape(b) for b in fake]:
        raise QuantizationError(f"the export's outputs {[np.shape(a) for a in outs]} and the "
                                f"fake-quant evaluation's {[np.shape(b) for b in fake]} differ "
                                f"in shape")
    same = all(np.array_equal(a, b) for a, b in zip(outs, fake))
    worst = max(float(np.max(np.abs(a.astype(np.float64) - b))) for a, b in zip(outs, fake))
    print(f"export: {path}; onnxruntime runs it; outputs "
          + ("equal the fake-quant evaluation bit for bit" if same
             else f"differ from the fake-quant evaluation by up to {worst:.3g}"), file=out)
    if runtime == "onnxruntime":
        from .latency import model_latency

        lat = model_latency(model, float_model if float_model is not None else case.model,
                            case.batches, repeats=repeats)
        plan.deploy.update(lat)
        for k, ms in lat["latency_ms"].items():
            f = lat["float_latency_ms"][k]
            print(f"latency ({k} thread{'' if k == '1' else 's'}): {ms:.1f} ms, float "
                  f"{f:.1f} ms ({ms / f:.2f}x float); forms: "
                  + ", ".join(f"{n} {c}" for n, c in sorted(plan.deploy["forms"].items())),
                  file=out)


def _restore(o, order):
    import numpy as np

    r = np.empty_like(o)
    r[order] = o
    return r


def save(model, path: str) -> None:
    """Save a model; one over 2 GB keeps its initializers in ``PATH.data`` beside it."""
    import os

    from . import require

    onnx = require("onnx")
    if model.ByteSize() > 2**31 - 2**24:
        onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                  location=os.path.basename(path) + ".data")
    else:
        onnx.save(model, path)


def _line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    """The command line: exit 0 done; 2 a refusal (one ``error:`` line on stderr); 130
    interrupted. A failure no check names (onnx, onnxruntime, NumPy, a file) is one line too."""
    args = _parser().parse_args(argv)
    try:
        return run(args, sys.stdout)
    except (QuantizationError, ImportError) as exc:
        print(f"error: {_line(exc)}", file=sys.stderr)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"error: {exc.strerror or _line(exc)}{where}", file=sys.stderr)
    except MemoryError:
        print("error: out of memory; give fewer sentences, a smaller --dim or smaller inputs",
              file=sys.stderr)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the boundary: one line, never a traceback
        print(f"error: unexpected {type(exc).__name__}: {_line(exc)} (a case qcore.model does "
              f"not check yet; please report it)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
