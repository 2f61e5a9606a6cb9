"""python -m qcore.model MODEL [--inputs FILE.npz] [--recipes R1,R2,...] [--budget BITS]
[--out TABLE.csv] [--plan PLAN.json] [--export QDQ.onnx]

Sensitivity of every weight × every recipe (alone) and of every recipe on all weights; with
--budget, the exactly optimal plan, run and measured; with --export, the plan as a QDQ model.
MODEL is a .onnx path or ``minilm``. Progress goes to stderr, the summary to stdout; errors are
one ``error:`` line and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import TextIO

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


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m qcore.model", description=__doc__.split("\n\n")[1])
    p.add_argument("model", help="a .onnx path or 'minilm'")
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
    return p


def _extra(kind: str, m: dict) -> str:
    if kind == "embedding":
        return f"  cosine {m['cosine_mean']:.6f} spearman {m['spearman']:.6f}"
    if kind == "logits":
        return f"  KL {m['kl']:.3g} top-1 {m['top1']:.4f}"
    return ""


def _floats(text: str | None) -> list[float]:
    if not text:
        return []
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise QuantizationError(f"--budgets {text!r}: give numbers, e.g. 4.25,5,6") from None


def _fmt(v: float, nd: int = 2) -> str:
    return f"{v:.{nd}f}" if isinstance(v, float) and math.isfinite(v) else str(v)


def run(args: argparse.Namespace, out: TextIO) -> int:
    from .cases import load_case
    from .plan import make_plan, run_plan
    from .sensitivity import correlation, measure, uniform, write_csv

    if (args.plan or args.export) and args.budget is None:
        raise QuantizationError("--plan and --export need --budget BITS (bits per weight)")
    try:
        lo, hi = (int(v) for v in args.int_range.split(","))
    except ValueError:
        raise QuantizationError(f"--int-range {args.int_range!r}: give LO,HI, e.g. 0,100"
                                ) from None
    tensors = [t.strip() for t in args.tensors.split(",") if t.strip()] if args.tensors else None
    from ..report.recipes import parse_recipes

    recipes = [r.name for r in parse_recipes(args.recipes)]
    t0 = time.perf_counter()
    case = load_case(args.model, args.inputs, sentences=args.sentences, seed=args.seed,
                     int_range=(lo, hi), dim=args.dim, kind="logits" if args.logits else None,
                     threads=args.threads,
                     outputs=[o.strip() for o in args.outputs.split(",") if o.strip()]
                     if args.outputs else None)
    if tensors:
        missing = [t for t in tensors if t not in case.arrays]
        if missing:
            raise QuantizationError(f"--tensors {missing} are not weights of the model; "
                                    f"its weights: {', '.join(case.weights)}")
    for b in ([args.budget] if args.budget is not None else []) + _floats(args.budgets):
        _check_budget(case, tensors or case.weights, recipes, b, not args.no_float)
    print(f"{case.name}: {len(tensors or case.weights)} weight tensors, "
          f"{len(recipes)} recipes ({time.perf_counter() - t0:.1f} s to load)", file=out)
    t1 = time.perf_counter()
    sens = measure(case, recipes, tensors, Bar("sensitivity"))
    t_sens = time.perf_counter() - t1
    rows = sens.rows + uniform(case, recipes, tensors, Bar("uniform    "))
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
    if args.out:
        write_csv(rows, args.out)
    for b in _floats(args.budgets):
        p = make_plan(sens, b, allow_float=not args.no_float)
        m = run_plan(case, p)
        extra = _extra(case.kind, m)
        print(f"{'plan @ ' + str(b):28s} {p.bits_per_element:7.3f} "
              f"{_fmt(m['output_sqnr_db']):>15s} {m['max_abs']:10.3g}{extra}  "
              f"(predicted {_fmt(p.output_sqnr_db_predicted)} dB)", file=out)
    if args.budget is None:
        return 0
    t2 = time.perf_counter()
    plan = make_plan(sens, args.budget, allow_float=not args.no_float)
    t_plan = time.perf_counter() - t2
    run_plan(case, plan)
    print(f"plan at {args.budget} bits/weight ({t_plan * 1000:.0f} ms): "
          f"{plan.bits_per_element:.4f} bits/weight, output SQNR predicted "
          f"{_fmt(plan.output_sqnr_db_predicted)} dB, measured "
          f"{_fmt(plan.measured['output_sqnr_db'])} dB", file=out)
    if args.plan:
        with open(args.plan, "w", encoding="utf-8") as f:
            json.dump(plan.to_json(), f, indent=1)
    if args.export:
        write_export(case, plan, args.export, out)
    return 0


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


def write_export(case, plan, path: str, out: TextIO) -> None:
    """Export the plan, save it, run it in onnxruntime where it can and compare."""
    import numpy as np

    from .export import export_plan, unsupported_nodes
    from .graph import make_session
    from .plan import planned_weights

    model = export_plan(case.model, plan, case.arrays)
    save(model, path)
    bad = unsupported_nodes(model)
    if bad:
        print(f"export: {path} is valid ONNX; onnxruntime has no kernel for {len(bad)} "
              f"DequantizeLinear node(s): {', '.join(bad)}", file=out)
        return
    session = make_session(model, case.threads)
    names = [o.name for o in session.get_outputs()]
    per = [session.run(names, b) for b in case.batches]
    outs = per[0] if len(per) == 1 else [np.concatenate([p[k] for p in per])
                                         for k in range(len(names))]
    if case.order is not None:
        outs = [_restore(o, case.order) for o in outs]
    fake = case.run(planned_weights(case, plan))
    same = all(np.array_equal(a, b) for a, b in zip(outs, fake))
    worst = max(float(np.max(np.abs(a.astype(np.float64) - b))) for a, b in zip(outs, fake))
    print(f"export: {path}; onnxruntime runs it; outputs "
          + ("equal the fake-quant evaluation bit for bit" if same
             else f"differ from the fake-quant evaluation by up to {worst:.3g}"), file=out)


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


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return run(args, sys.stdout)
    except (QuantizationError, ImportError, OSError) as exc:
        print(f"error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
