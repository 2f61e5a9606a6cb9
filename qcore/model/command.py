"""The model tool's work, once its arguments are checked (:mod:`qcore.model.cli`): sensitivity,
the plan, activations, refinement, the export and its latency, the summary on stdout."""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from typing import TextIO

from ..errors import QuantizationError
from .cli import Bar, _floats, check_args
from .graph import save

__all__ = ["run", "save", "write_export"]


def _extra(kind: str, m: dict) -> str:
    """The kind's own measures, the decisions' agreement (integer or boolean outputs) and the
    user's --metric."""
    a = m.get("agreement", math.nan)
    agree = f"  agreement {a:.4f}" if isinstance(a, float) and math.isfinite(a) else ""
    if "metric" in m:
        agree += f"  metric {m['metric']:.6g}"
    if kind == "embedding":
        return f"  cosine {m['cosine_mean']:.6f} spearman {m['spearman']:.6f}" + agree
    if kind == "logits":
        return f"  KL {m['kl']:.3g} top-1 {m['top1']:.4f}" + agree
    return agree


def _fmt(v: float, nd: int = 2) -> str:
    return f"{v:.{nd}f}" if isinstance(v, float) and math.isfinite(v) else str(v)


def run(args: argparse.Namespace, out: TextIO) -> int:
    from .cases import load_case
    from .checks import check_case
    from .plan import make_plan, run_plan
    from .quantized import quantized_nodes
    from .sensitivity import correlation, measure, uniform, write_table

    tensors, outputs, (lo, hi) = check_args(args)
    from .speed_cli import run_speed, wants_speed
    from .views import views_from_args

    views = views_from_args(args)

    if wants_speed(args):
        return run_speed(args, out, outputs, (lo, hi))
    from ..recipes import parse_recipes

    recipes = [r.name for r in parse_recipes(args.recipes)]
    from .runtime import check_runtime
    from .sites import parse_activations

    mode = parse_activations(args.activations)
    runtime = check_runtime(args.runtime or ("onnxruntime" if args.export else "reference"))
    t0 = time.perf_counter()
    if args.feedback:
        from .feedback import load_fed_back_case

        case = load_fed_back_case(args.model, args.inputs, args.feedback, dim=args.dim,
                                  kind="logits" if args.logits else None, threads=args.threads,
                                  outputs=outputs)
    else:
        case = load_case(args.model, args.inputs, sentences=args.sentences, seed=args.seed,
                         force=args.force, int_range=(lo, hi), dim=args.dim,
                         kind="logits" if args.logits else None, threads=args.threads,
                         outputs=outputs, views=views)
    if tensors:
        missing = [t for t in tensors if t not in case.arrays]
        if missing:
            raise QuantizationError(f"--tensors {missing} are not weights of the model; "
                                    f"its weights: {', '.join(case.weights)}")
    check_case(case, tensors or case.weights)
    for b in ([args.budget] if args.budget is not None else []) + _floats(args.budgets):
        _check_budget(case, tensors or case.weights, recipes, b, not args.no_float)
    quantized = quantized_nodes(case.model)
    if quantized:
        print(f"{case.name} is already quantized ({sum(quantized.values())} quantized nodes: "
              + ", ".join(f"{n} {op}" for op, n in quantized.items())
              + "); --force: only its float remainder is measured and planned", file=out)
    print(f"{case.name}: {len(tensors or case.weights)} weight tensors, "
          f"{len(recipes)} recipes ({time.perf_counter() - t0:.1f} s to load)", file=out)
    float_model = case.model  # latency is measured against the model as given
    case, specs, act_rows, smoothing = _activations(case, mode, args, out)
    t1 = time.perf_counter()
    if args.workers or args.scheduler:
        sens = _measure_on_dask(args, recipes, tensors, (lo, hi))
    else:
        sens = measure(case, recipes, tensors, Bar("sensitivity"),
                       None if runtime == "reference" else _runs_in(case, runtime))
    t_sens = time.perf_counter() - t1
    if runtime != "reference":
        sens = _for_runtime(case, sens, runtime, out)
    rows = sens.rows + act_rows + uniform(case, _uniform_recipes(case, recipes, tensors, runtime),
                                         tensors, Bar("uniform    "))
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
          f"{_fmt(plan.measured['output_sqnr_db'])} dB{_extra(case.kind, plan.measured)}", file=out)
    _print_steps(plan.measured, out)
    refined = _refine(args, case, sens, plan, out)
    if refined is not None:
        plan = refined.plan
        plan.runtime = runtime
        _print_steps(plan.measured, out)
    _print_views(views, plan.measured, out)
    floor = _floor(args, plan.measured, out)
    if args.export and floor is not None and not floor["met"]:
        print(f"export: not written (the plan does not keep --min-metric {args.min_metric})",
              file=out)
    elif args.export:  # before the JSON: the export's latency and forms go into it
        write_export(case, plan, args.export, out, runtime,
                     10 if args.latency_repeats is None else args.latency_repeats, float_model,
                     args.nbits_form or "matmulnbits-node")
        if floor is not None:
            floor["deployed_metric"] = plan.deploy["deploy"]["metric"]
            if floor["deployed_metric"] < args.min_metric:
                os.remove(args.export)
                raise QuantizationError(
                    f"--export {args.export}: refused: as deployed (onnxruntime, default "
                    f"optimizations) --metric {args.metric} is {floor['deployed_metric']:.6g}, "
                    f"below --min-metric {args.min_metric} (stated {floor['metric']:.6g})")
    plan_json = plan.to_json()
    if refined is not None:
        plan_json["refine"] = refined.to_json()
        if "deploy" in plan.deploy:  # the final plan's figure as users run it (0.05 dB)
            plan_json["refine"]["output_sqnr_db_deployed"] = plan_json["deploy"][
                "output_sqnr_db"]
    if floor is not None:
        plan_json["min_metric"] = floor
    if getattr(args, "peers", False):
        plan_json["pareto"] = peers_table(args, case, plan.deploy.get("forms", {}), out)
    if args.plan:
        with open(args.plan, "w", encoding="utf-8") as f:
            json.dump(plan_json, f, indent=1)
    return 0 if floor is None or floor["met"] else 1


def _print_views(views, measured: dict, out: TextIO) -> None:
    """Each --slice's own figure in the plan (SQNR and max |Δ|, or agreement)."""
    if views is None:
        return
    for s in views.slices:
        m = measured.get("outputs", {}).get(s.name, {})
        fig = (f"agreement {m['agreement']:.4f}" if "agreement" in m else
               f"output SQNR {_fmt(m.get('sqnr_db', math.nan))} dB, max|d| "
               f"{m.get('max_abs', math.nan):.3g}")
        print(f"  slice {s.name} ({s.output}[{s.start}:{s.stop}] along axis {s.axis}): {fig}",
              file=out)


def _floor(args: argparse.Namespace, measured: dict, out: TextIO) -> dict | None:
    """With --min-metric: whether the plan keeps it (the plan JSON's ``min_metric``), said."""
    floor = getattr(args, "min_metric", None)
    if floor is None:
        return None
    m = float(measured["metric"])
    met = m >= floor
    print(f"--metric {args.metric}: {m:.6g} " + (f"(keeps --min-metric {floor})" if met else
          f"not met: below --min-metric {floor}; no plan found within the budget keeps it"),
          file=out)
    return {"metric": m, "min": floor, "met": met, "name": args.metric}


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
    """With --refine N, where measured and predicted differ by more than 1 dB, or where the
    plan's metric is below --min-metric: the plan improved by local search on measured runs
    (:mod:`qcore.model.refine`, keeping the floor); else None."""
    from .refine import DEFAULT_RUNS, GAP_DB, refine

    measured = plan.measured["output_sqnr_db"]
    predicted = plan.output_sqnr_db_predicted
    gap = abs(measured - predicted) if math.isfinite(measured) and math.isfinite(predicted) \
        else (0.0 if measured == predicted else math.inf)
    floor = getattr(args, "min_metric", None)
    below = floor is not None and plan.measured.get("metric", -math.inf) < floor
    if args.refine is None and gap <= GAP_DB and not below:
        return None
    runs = DEFAULT_RUNS if args.refine is None else args.refine
    r = refine(case, sens, plan, runs=runs, allow_float=not args.no_float,
               progress=Bar("refine     "), floor=floor)
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
    from ..progress import ProgressBar
    from .distributed import CaseSpec, measure_on_dask

    spec = CaseSpec(args.model, args.inputs, args.sentences, args.seed, int_range, args.dim,
                    "logits" if args.logits else None, args.threads,
                    getattr(args, "feedback", None), getattr(args, "outputs", None))
    return measure_on_dask(spec, recipes, tensors, workers=args.workers,
                           scheduler=args.scheduler, progress=ProgressBar(label="sensitivity "))


def _uniform_recipes(case, recipes: list[str], tensors, runtime: str) -> list[str]:
    """The recipes whose uniform row can be exported: every weight in a configuration
    ``runtime`` runs (all of them for the reference runtime)."""
    if runtime == "reference":
        return recipes
    runs = _runs_in(case, runtime)
    return [r for r in recipes if all(runs(t, r) for t in tensors or case.weights)]


def _runs_in(case, runtime: str):
    """``ok(tensor, recipe)``: whether ``runtime`` runs that configuration (probed once each,
    :mod:`qcore.model.runtime`), so sensitivity measures only what can be exported."""
    from .runtime import allowed

    ok = allowed(runtime)

    def runs(tensor: str, recipe: str) -> bool:
        shape = tuple(case.arrays[tensor].shape)
        oa, ra = case.roles[tensor].axes(len(shape))
        return ok(recipe, shape, oa, ra) and (runtime != "onnxruntime"
                                              or not _ragged_4bit(recipe, shape, ra))
    return runs


def _ragged_4bit(recipe: str, shape: tuple[int, ...], reduction_axis: int) -> bool:
    """4-bit integer blocks with a short last block on a 2-D weight: no MatMulNBits node holds
    them, and written as DequantizeLinear → MatMul onnxruntime fuses them at accuracy level 4,
    which changes the outputs (20.65 dB stated, 20.50 run on a K = 64 weight in blocks of 128):
    an export for onnxruntime leaves them out."""
    from ..recipes import parse_recipe

    r = parse_recipe(recipe)
    return (len(shape) == 2 and r.target in ("int4", "uint4") and r.block_size > 0
            and shape[reduction_axis] % r.block_size != 0)


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
    from . import staged as act_staged

    if mode.mode == "none" and args.smooth is None:
        return case, [], [], {}
    calib = act.calibration_case(case, args.calibrate) if args.calibrate else None
    if mode.mode != "none" and args.float_activations:
        n = len(act_staged.runner_for(case).names)
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
    from .fidelity import recipe_weights
    from .staged import evaluate

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
    """Export the plan (for onnxruntime: in the forms it fuses, :mod:`qcore.model.deployable`),
    save it, run it in onnxruntime where it can, compare with the fake-quant evaluation, run it
    as deployed (:mod:`qcore.model.deployed`: default optimizations, the threads asked) into
    ``plan.deploy["deploy"]`` — refused (and removed) with the reason where its figure is not
    the plan's to 0.05 dB — and (for onnxruntime) time it beside the float model
    (``float_model``, default the case's; the unsmoothed one with --smooth) into
    ``plan.deploy``; ``nbits_form``: :func:`qcore.model.deployable.deployable_export`'s."""
    import numpy as np

    from .deployed import deploy_case, deploy_gap, guard_float8_relu, written_bits
    from .export import _weights_into_model, export_plan, unsupported_nodes
    from .graph import make_session
    from .plan import planned_weights

    if runtime == "onnxruntime":  # the forms onnxruntime fuses, activations included
        from .deployable import deployable_export

        deployable = deployable_export(case.model, plan.recipes, case.arrays,
                                       {a.site: a for a in plan.activations}, nbits_form)
        model = deployable.model
        # the plan's bits are the bits written (a form drops what its kernel does not read:
        # all-zero zero points, MatMulNBits' implicit ones)
        plan.bits += sum(written_bits(model, t) - q.bits for t, q in deployable.quantized.items()
                         if deployable.forms.get(t) != "dq")
        forms: dict[str, int] = {}
        for f in deployable.forms.values():
            forms[f] = forms.get(f, 0) + 1
        plan.deploy["forms"] = forms
    else:
        model = export_plan(case.model, plan, case.arrays)
    bad = unsupported_nodes(model)
    if plan.activations and runtime != "onnxruntime":
        from .qdq import insert_qdq

        model = insert_qdq(model, plan.activations)
    _weights_into_model(model)  # weights left on disk: the export is a model of its own
    guard_float8_relu(model)  # a Relu before a float8 quantizer: moved behind it
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
        from .staged import runner_for

        fake = runner_for(case).run(plan.activations, planned_weights(case, plan))
    else:
        fake = case.run(planned_weights(case, plan))
    if [np.shape(a) for a in outs] != [np.shape(b) for b in fake]:
        raise QuantizationError(f"the export's outputs {[np.shape(a) for a in outs]} and the "
                                f"fake-quant evaluation's {[np.shape(b) for b in fake]} differ "
                                f"in shape")
    same = all(np.array_equal(a, b) for a, b in zip(outs, fake))
    worst = max((float(np.max(np.abs(a.astype(np.float64) - b))) for a, b in zip(outs, fake)
                 if np.size(a)), default=0.0)
    from .fidelity import compare

    dep = plan.deploy["deploy"] = deploy_case(case, model)
    stated = compare(case.reference, fake, case.kind, case.runner.output_names, case.outputs,
                     getattr(case, "views", None))
    why = deploy_gap(stated, dep, plan.deploy.get("forms"))
    if why is not None and runtime == "onnxruntime":  # an export for onnxruntime must hold
        os.remove(path)
        raise QuantizationError(f"--export {path}: refused: {why}")
    print(f"export: {path}; onnxruntime runs it; outputs "
          + ("equal the fake-quant evaluation bit for bit" if same
             else f"differ from the fake-quant evaluation by up to {worst:.3g}")
          + f"; as deployed (default optimizations): output SQNR "
            f"{_fmt(dep['output_sqnr_db'])} dB"
          + (f" (an export for --runtime {runtime}: {why})" if why else ""), file=out)
    if runtime == "onnxruntime":
        from .latency import model_latency

        base = float_model if float_model is not None else case.model
        if any(t.data_location == 1 for t in base.graph.initializer):  # weights on disk
            base = type(base)()
            base.CopyFrom(float_model if float_model is not None else case.model)
            _weights_into_model(base)
        lat = model_latency(model, base, case.batches, repeats=repeats)
        plan.deploy.update(lat)
        float8 = any(a.dtype.startswith("float8") for a in plan.activations)
        for k, ms in lat["latency_ms"].items():
            f = lat["float_latency_ms"][k]
            print(f"latency ({k} thread{'' if k == '1' else 's'}): {ms:.1f} ms, float "
                  f"{f:.1f} ms ({ms / f:.2f}x float); forms: "
                  + ", ".join(f"{n} {c}" for n, c in sorted(plan.deploy["forms"].items())),
                  file=out)
            if float8:
                from .speed_cli import float8_note

                print(float8_note(ms / f), file=out)


def _restore(o, order):
    import numpy as np

    r = np.empty_like(o)
    r[order] = o
    return r


def peers_table(args: argparse.Namespace, case, forms: dict, out: TextIO) -> list[dict]:
    """--peers after a bits plan: :func:`print_peers` of the case's model and batches (the
    ``--calibrate`` batches for calibration) and the export as written."""
    from . import require

    float_model = case.model
    if str(args.model).lower().endswith(".onnx"):  # weights read in: sessions take bytes
        float_model = require("onnx").load(args.model)
    calibration = case.batches
    if args.calibrate:
        from .activations import calibration_case

        calibration = calibration_case(case, args.calibrate).batches
    from .peers import print_peers

    return print_peers(args, float_model, case.batches, calibration, forms, out)
