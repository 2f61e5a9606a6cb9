"""python -m qcore.model MODEL [--inputs FILE.npz] [--recipes R1,R2,...] [--budget BITS]
[--out TABLE.csv] [--plan PLAN.json] [--export QDQ.onnx] [--activations MODE]
[--calibrate FILE.npz] [--float-activations K] [--smooth ALPHA]
[--runtime onnxruntime|reference] [--nbits-form matmulnbits-node|dq-matmul]
[--min-sqnr DB | --max-latency R]

Sensitivity of every weight × every recipe (alone) and of every recipe on all weights; with
--budget, the exactly optimal plan, run and measured; with --export, the plan as a QDQ model.
MODEL is a .onnx path, ``minilm`` (Gemm form) or ``minilm-matmul`` (MatMul form). With
--runtime onnxruntime (the default with --export) the plan takes only configurations the
installed onnxruntime runs, the export is written in the forms it fuses into integer kernels and
its latency is measured beside the float model's (int4/uint4 weights blocked along K as
com.microsoft MatMulNBits nodes; ``--nbits-form dq-matmul`` keeps the standard-ONNX
DequantizeLinear → MatMul form). Progress goes to stderr, the summary to stdout; errors are
one ``error:`` line and exit status 2.

This module holds the parser (its flags in argument groups) and the checks made before
anything is loaded; :mod:`qcore.model.command` does the work.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import TextIO

from ..cli_args import Parser
from ..errors import QuantizationError
from ..recipes import DEFAULT_RECIPES

__all__ = ["Bar", "check_args", "parser"]


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


def parser() -> argparse.ArgumentParser:
    """The command line's parser, its flags in groups: inputs, recipes and budget, activations,
    objectives, runtime and export, distribution (``--help`` in that order)."""
    p = Parser(prog="python -m qcore.model", description=__doc__.split("\n\n")[1])
    g = p.add_argument_group("inputs", "the model and its inputs")
    g.add_argument("model", help="a .onnx path, 'minilm' or 'minilm-matmul' (its linear layers as "
                   "MatMul on [in, out] weights)")
    g.add_argument("--inputs", help=".npz whose arrays are the graph inputs (else generated)")
    g.add_argument("--tensors", help="comma-separated weight names (default: every float "
                   "initializer of rank >= 2)")
    g.add_argument("--sentences", type=int, default=32,
                   help="MiniLM: how many shipped sentences to run (0: all; default 32)")
    g.add_argument("--seed", type=int, default=0, help="seed of generated inputs")
    g.add_argument("--int-range", default="0,100", help="LO,HI of generated integer inputs")
    g.add_argument("--dim", type=int, default=1, help="size of symbolic dims of generated inputs")
    g = p.add_argument_group("recipes and budget", "what a weight may become; the bits")
    g.add_argument("--recipes", default=",".join(DEFAULT_RECIPES),
                   help="comma-separated report recipes (default: the report's eight)")
    g.add_argument("--budget", type=float, help="bits per weight element for the plan")
    g.add_argument("--budgets", help="comma-separated budgets: plan, run and print each "
                   "(a bits-vs-fidelity curve; --plan and --export take --budget)")
    g.add_argument("--force", action="store_true",
                   help="an already-quantized model: measure and plan only its float "
                   "remainder (without it such a model is refused, naming its quantized nodes)")
    g.add_argument("--no-float", action="store_true",
                   help="the plan may not leave a weight in float32")
    g.add_argument("--refine", type=int, metavar="N",
                   help="improve the plan by up to N measured runs of local search (without it, "
                   "a plan whose measurement misses its prediction by more than 1 dB is "
                   "refined by up to 20 runs)")
    g = p.add_argument_group("activations", "the activation sites")
    g.add_argument("--activations", default="none",
                   help="none | dynamic | static[:TYPE][@METHOD]: quantize the activation sites "
                   "(the data inputs of MatMul/Gemm/Conv); TYPE int8 (default), uint8, int16, "
                   "uint16, float8e4m3fn, float8e5m2, …; METHOD minmax (default), percentile, "
                   "mse, entropy")
    g.add_argument("--calibrate", help=".npz of graph inputs the static activation scales "
                   "are calibrated on (default: the inputs)")
    g.add_argument("--float-activations", type=int, default=0, metavar="K",
                   help="the plan keeps the K most sensitive activation sites in float")
    g.add_argument("--smooth", type=float, metavar="ALPHA",
                   help="SmoothQuant: migrate activation outliers into the weights with "
                   "strength ALPHA in [0, 1] (e.g. 0.5)")
    g = p.add_argument_group("objectives", "what fidelity is measured on; speed plans")
    g.add_argument("--outputs", help="comma-separated output names the model's SQNR averages "
                                     "over (default: all); each output's own SQNR and max |Δ| "
                                     "are in the table and the plan either way")
    g.add_argument("--logits", action="store_true", help="outputs are logits (KL, top-1)")
    from .speed_cli import add_arguments
    from .views import add_arguments as add_view_arguments

    add_arguments(g)
    add_view_arguments(g)
    g.add_argument("--feedback", metavar="OUT=IN[,...]",
                   help="run over a sequence: the --inputs arrays hold a leading step axis, each "
                   "step's output OUT is fed to the next step's input IN (states left out of "
                   "the file start from zeros); fidelity over all steps and per step")
    g = p.add_argument_group("runtime and export", "what is written, for which runtime")
    g.add_argument("--out", help="write the table (CSV)")
    g.add_argument("--plan", help="write the plan (JSON)")
    g.add_argument("--export", help="write the plan as a QDQ ONNX model")
    g.add_argument("--runtime", help="plan for this runtime: onnxruntime (only what the "
                   "installed onnxruntime runs; the default with --export) or reference "
                   "(every ONNX type)")
    g.add_argument("--nbits-form", metavar="FORM", help="how an --export for onnxruntime writes "
                   "int4/uint4 weights blocked along K: matmulnbits-node (the default: "
                   "com.microsoft MatMulNBits) or dq-matmul (standard ONNX DequantizeLinear -> "
                   "MatMul)")
    g.add_argument("--latency-repeats", type=int, metavar="N",
                   help="timed passes per model for the export's latency, 1 to 1000 "
                   "(default 10)")
    g.add_argument("--threads", type=int, default=0, help="onnxruntime intra-op threads")
    g.add_argument("--peers", action="store_true",
                   help="with --export: also quantize with onnxruntime's quantize_static (uint8 "
                   "activations, int8 per-channel weights, MinMax on the same calibration "
                   "inputs) and quantize_dynamic (uint8 per-channel weights), measure them with "
                   "the float model and the export in one process (one thread unless "
                   "--threads) and print the Pareto table of latency x SQNR x file size (the "
                   "plan JSON's 'pareto')")
    g = p.add_argument_group("distribution", "the sensitivity runs on Dask")
    g.add_argument("--workers", type=int, default=0, metavar="N",
                   help="run the sensitivity runs on a Dask LocalCluster of N worker processes "
                   "(the same rows as in this process)")
    g.add_argument("--scheduler", metavar="ADDRESS",
                   help="run the sensitivity runs on a running Dask cluster (its workers read "
                   "the model and inputs at the same paths)")
    return p


def _floats(text: str | None) -> list[float]:
    from .checks import parse_budgets

    return parse_budgets(text)


def check_args(args: argparse.Namespace
               ) -> tuple[list[str] | None, list[str] | None, tuple[int, int]]:
    """Every argument the model is not needed for, checked before anything is loaded
    (:mod:`qcore.model.checks`): (the --tensors names, the --outputs names, the --int-range)."""
    from . import checks
    from .speed_cli import check_arguments, wants_speed

    speed = wants_speed(args)
    if speed:
        check_arguments(args)
    elif (args.plan or args.export) and args.budget is None:
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
    sources = {"MODEL": args.model, "--inputs": args.inputs, "--calibrate": args.calibrate}
    checks.check_outputs_distinct({"--out": args.out, "--plan": args.plan,
                                   "--export": args.export},
                                  {k: v for k, v in sources.items()
                                   if v and "\x00" not in v and os.path.isfile(v)})
    for flag, path in (("--inputs", args.inputs), ("--calibrate", args.calibrate)):
        if path and args.model.lower() != "minilm":
            checks.check_input_file(flag, path)
    outputs = checks.parse_tensors(args.outputs, "--outputs", "output")
    _check_activation_args(args)
    for flag, given, plans in (("--refine", args.refine is not None, args.budget is not None),
                               ("--float-activations", bool(args.float_activations),
                                args.budget is not None or bool(args.budgets))):
        if given and not plans:
            raise QuantizationError(f"{flag} acts on a plan: give --budget BITS (bits per "
                                    f"weight) or leave {flag} out")
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
        from .forms import NBITS_FORMS

        if args.nbits_form not in NBITS_FORMS:
            raise QuantizationError(f"--nbits-form {args.nbits_form!r}: valid are "
                                    f"{', '.join(NBITS_FORMS)}")
        if not args.export or check_runtime(args.runtime or "onnxruntime") != "onnxruntime":
            raise QuantizationError(f"--nbits-form {args.nbits_form}: only an --export for "
                                    "--runtime onnxruntime has a choice of forms")
    if getattr(args, "peers", False):
        _check_peers_args(args)
    if args.latency_repeats is None:
        return
    check_latency_repeats(args.latency_repeats)
    runtime = check_runtime(args.runtime or "onnxruntime")
    from .speed_cli import wants_speed

    if not wants_speed(args) and (not args.export or runtime != "onnxruntime"):
        raise QuantizationError(f"--latency-repeats {args.latency_repeats}: only an --export "
                                f"for --runtime onnxruntime is timed")


def _check_peers_args(args: argparse.Namespace) -> None:
    """--peers: an --export for onnxruntime, no --feedback, onnxruntime.quantization there."""
    from .runtime import check_runtime

    if not args.export or check_runtime(args.runtime or "onnxruntime") != "onnxruntime":
        raise QuantizationError("--peers: give --export (for --runtime onnxruntime): the "
                                "table puts the export beside onnxruntime's own quantizers")
    if args.feedback:
        raise QuantizationError("--peers: a model run over steps (--feedback) is not measured "
                                "against onnxruntime's quantizers; leave one of them out")
    try:
        import onnxruntime.quantization  # noqa: F401
    except ImportError as exc:
        raise QuantizationError(f"--peers needs onnxruntime.quantization, which does not "
                                f"import here ({type(exc).__name__}: {exc})") from None


def _check_activation_args(args: argparse.Namespace) -> None:
    """--activations parsed; --float-activations, --calibrate and --smooth consistent with it."""
    from .sites import parse_activations
    from .speed_cli import wants_speed

    mode = parse_activations(args.activations)
    calibrate = args.calibrate and not wants_speed(args)  # speed plans calibrate their chains
    if mode.mode == "none" and (args.float_activations or calibrate):
        raise QuantizationError("--float-activations and --calibrate need --activations "
                                "dynamic or static[:TYPE][@METHOD]")
    if args.float_activations < 0:
        raise QuantizationError(f"--float-activations {args.float_activations}: give a count "
                                f">= 0")
    if args.smooth is not None and not 0 <= args.smooth <= 1:
        raise QuantizationError(f"--smooth {args.smooth}: alpha must be in [0, 1]")
