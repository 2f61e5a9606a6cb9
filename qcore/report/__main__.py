"""``python -m qcore.report MODEL ...``: the whole-model format report on the command line.

MODEL is a .safetensors / .onnx / .npz / .npy file, a sharded checkpoint (its folder or its
model.safetensors.index.json), a folder of these, or a known model's name (``minilm``).
Examples::

    python -m qcore.report minilm --out minilm.parquet
    python -m qcore.report ckpt/ --recipes int8:per-axis,mxfp4 --include 'model.layers.*' \\
        --out r.csv --workers 2
    python -m qcore.report ckpt/ --out r.csv --resume      # after an interruption
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence

import pandas as pd

from ..cli_args import Parser
from ..errors import QuantizationError
from ..formats import QUANTIZED_TYPES
from ..models import resolve_model
from ..progress import ProgressBar
from ..recipes import (
    CALIBRATION_METHODS,
    DEFAULT_RECIPES,
    MX_RECIPES,
    describe,
    parse_recipes,
    recipe_names,
)
from .core import run_report, summarize
from .sources import list_tensors

RECIPE_HELP = """\
recipes:
  A recipe is TARGET:GRANULARITY[@METHOD], or an OCP Microscaling name.
    TARGET       a QuantizeLinear output type: {targets}
    GRANULARITY  per-tensor   one scale for the whole tensor
                 per-axis     one scale per output channel; rank <= 1 tensors fall back
                              to per-tensor
                 blockedN     one scale per N elements along the reduction axis
                 /AXIS        names the axis instead (int8:per-axis/1, int4:blocked32/0)
    Axes of an ONNX model's weights come from the node that consumes each one, as in python
    -m qcore.model: MatMul B [K, N] scales along N (axis 1) and blocks along K (axis 0);
    Gemm B by transB; Conv W (O, I/g, k...): per-axis on O, and blocked along I, per output
    channel or over the [O, I*k] view, whichever stores the fewest scales; ConvTranspose,
    Gather, LSTM/GRU/RNN by their roles. A tensor without a graph (safetensors, npz, npy) or that no
    known node consumes is (out, in) rows: per-axis on axis 0, blocks along the last axis.
    Rows record the axis used ('axis') and the 2-D view quantized, if any ('view').
    METHOD       calibration: {methods} (default: minmax for unsigned
                 integer targets, absmax otherwise)
    MX names     {mx}: blocks of 32 along the reduction axis
                 with float8e8m0 power-of-two scales (OCP rule)
  e.g. --recipes int8:per-axis,uint8:per-tensor,int4:blocked32,float8e4m3fn:per-tensor@mse,mxfp4
  --list-recipes prints the named catalogue with one line each.

tensor names:
  Names come from the file: safetensors / ONNX names, .npz member names; a file holding one
  array (an .npy, or an .npz with one member) is named by its file stem, so
  datasets/layer0.ffn.out.weight.npz is 'layer0.ffn.out.weight' in --list, --include and the
  rows.

exit status: 0 all rows computed; 1 some rows carry an error (listed at the end); 2 the
command line or the model cannot be used (one 'error:' line); 130 interrupted.
"""


def build_parser() -> argparse.ArgumentParser:
    cores = os.cpu_count() or 1
    p = Parser(prog="python -m qcore.report",
                description="Every tensor of a model x every quantization recipe: SQNR, "
                            "errors, bits and bytes.",
                epilog=RECIPE_HELP.format(targets=", ".join(QUANTIZED_TYPES),
                                          methods=", ".join(CALIBRATION_METHODS),
                                          mx=", ".join(MX_RECIPES)),
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?",
                   help="a .safetensors / .onnx / .npz / .npy file, a sharded checkpoint's folder "
                        "or its model.safetensors.index.json, a folder of these, or a known "
                        "model's name (minilm)")
    p.add_argument("--recipes", default=",".join(DEFAULT_RECIPES),
                   help="comma-separated recipes, grammar below (default: %(default)s)")
    p.add_argument("--out", action="append", default=[],
                   help="write rows to this .csv or .parquet in an existing, writable folder "
                        "(repeatable); rows are appended to OUT.partial.csv as tensors finish")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted run from OUT.partial.csv (or a finished OUT): "
                        "only tensors whose rows are missing are computed; refused when the "
                        "model's files, the recipes, the options or qcore's version differ")
    p.add_argument("--fresh", action="store_true",
                   help="with --resume: when the saved run differs, discard it and start afresh "
                        "instead of refusing")
    p.add_argument("--include", action="append", default=[], metavar="GLOB",
                   help="only tensors whose name matches this shell glob (repeatable)")
    p.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                   help="skip tensors whose name matches this shell glob (repeatable)")
    p.add_argument("--min-elements", type=int, default=0, metavar="N",
                   help="skip tensors with fewer than N elements (N >= 0; default 0)")
    p.add_argument("--workers", type=int, default=0, metavar="N",
                   help=f"run on a Dask LocalCluster of N worker processes, 1..{cores} (this "
                        f"machine's cores); 0 (default): no Dask")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="run on an existing Dask cluster (tcp://HOST:PORT; it must answer "
                        "within 10 s)")
    p.add_argument("--threads", type=int, default=1, metavar="N",
                   help="without Dask: run N tensors at a time in this process, 1..64 "
                        "(default 1)")
    p.add_argument("--top", type=int, default=10, metavar="N",
                   help="worst tensors shown per recipe in the summary (default 10)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar on stderr (for logs and pipes)")
    p.add_argument("--force", action="store_true",
                   help="an already-quantized ONNX model: report only its float remainder "
                        "(the tensors no quantized node reads); without it such a model is "
                        "refused, naming its quantized nodes")
    p.add_argument("--list", action="store_true",
                   help="list the model's tensors (name, dtype, shape) and exit")
    p.add_argument("--list-recipes", action="store_true",
                   help="list the named recipes with what each does, and exit")
    return p


def _mib(n: float) -> str:
    return f"{n / 2**20:,.2f} MiB"


def print_summary(rows: pd.DataFrame, top: int = 10, file=None) -> None:
    file = file if file is not None else sys.stdout
    s = summarize(rows, top)
    per = s["recipes"]
    if per.empty:
        print("no rows", file=file)
    else:
        print("\nper recipe (bits/elem from total bytes; SQNR weighted by elements, and total "
              "signal / total noise):", file=file)
        table = pd.DataFrame({
            "recipe": per["recipe"], "tensors": per["tensors"],
            "total bytes": [_mib(b) for b in per["bytes"]],
            "bits/elem": per["bits_per_element"].map(lambda v: f"{v:.3f}"),
            "SQNR dB (weighted)": per["sqnr_db_weighted"].map(lambda v: f"{v:.2f}"),
            "SQNR dB (model)": per["sqnr_db_model"].map(lambda v: f"{v:.2f}"),
            "worst dB": per["min_sqnr_db"].map(lambda v: f"{v:.2f}")})
        print(table.to_string(index=False), file=file)
        for recipe, worst in s["worst"].items():
            print(f"\n{top} worst tensors, {recipe}:", file=file)
            w = worst.copy()
            w["sqnr_db"] = w["sqnr_db"].map(lambda v: f"{v:.2f}")
            w["clipped_fraction"] = w["clipped_fraction"].map(
                lambda v: "" if math.isnan(v) else f"{100 * v:.3g}%")
            w["bits_per_element"] = w["bits_per_element"].map(lambda v: f"{v:.3f}")
            print(w.to_string(index=False), file=file)
    errs = s["errors"]
    if len(errs):
        print(f"\n{len(errs)} rows with errors:", file=file)
        for msg in dict.fromkeys(errs["error"]):
            print(f"  {msg}", file=file)


def _skipped(skipped: Sequence[tuple[str, str, str]]) -> str:
    """The summary's count of skipped tensors, those of a quantized part apart."""
    quantized = sum(1 for _, _, why in skipped if why.startswith("read by a"))
    rest = len(skipped) - quantized
    return ((f"; {rest} tensors skipped (not floating point or too small)" if rest else "")
            + (f"; {quantized} tensors of the quantized part skipped" if quantized else ""))


def _name_quantized(model: str, force: bool) -> None:
    """An already-quantized ONNX file is named: refused without ``force``; with it, said that
    only its float remainder is reported (the tensors its quantized nodes read are skipped)."""
    from ..quantized_models import describe_quantized
    from .core import quantized_files

    for f, counts in quantized_files(model).items():
        name = os.path.basename(f)
        if not force:
            raise QuantizationError(f"{name} is {describe_quantized(counts)}: its scales and "
                                    f"codes are no float tensors to report; --force reports "
                                    f"only its float remainder, or give the float model")
        print(f"{name} is {describe_quantized(counts)}; --force: only its float remainder is "
              f"reported (the tensors its quantized nodes read are skipped)")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list_recipes:
        for name in recipe_names():
            print(f"{name:26s} {describe(name)}")
        return 0
    if not args.model:
        build_parser().error("MODEL is required")
    if args.top < 0:
        build_parser().error(f"--top {args.top}: must be >= 0")
    if args.fresh and not args.resume:
        build_parser().error("--fresh goes with --resume")
    try:
        model = resolve_model(args.model)
        if args.list:
            for ref in list_tensors(model):
                info = ref.error or f"{ref.dtype:9s} {'x'.join(map(str, ref.shape))}" + (
                    f"  (read by a {ref.quantized} node)" if ref.quantized else "")
                print(f"{ref.name:60s} {info}")
            return 0
        recipes = [r.name for r in parse_recipes(args.recipes)]
        _name_quantized(model, args.force)
        bar = None if args.no_progress else ProgressBar()
        report = run_report(model, recipes, out=args.out, resume=args.resume, fresh=args.fresh,
                            include=args.include, exclude=args.exclude,
                            min_elements=args.min_elements, workers=args.workers,
                            scheduler=args.scheduler, progress=bar, threads=args.threads)
    except QuantizationError as exc:  # TensorFileError included
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: rows of finished tensors are kept; rerun with --resume",
              file=sys.stderr)
        return 130
    print_summary(report.rows, args.top)
    rate = report.elements * len(recipes) / report.seconds if report.seconds else 0.0
    print(f"\n{len(report.rows)} rows, {report.elements:,} elements x {len(recipes)} recipes in "
          f"{report.seconds:.2f} s ({rate / 1e6:.1f} M element-recipes/s)"
          + (f"; {report.resumed} tensors resumed" if report.resumed else "")
          + _skipped(report.skipped))
    for o in args.out:
        print(f"wrote {o}")
    return 1 if len(report.errors) else 0


if __name__ == "__main__":
    sys.exit(main())
