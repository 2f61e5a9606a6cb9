"""Side-by-side benchmark: ``python -m qcore.bench [--quick] [--size 4096x4096] [--json F]``.

Runs every operator x format x granularity for qcore and each installed peer (onnxruntime,
torch, ml_dtypes ``astype``, the NumPy one-liner) on the same data in one process, and prints
elements/s, the ratio of qcore to each peer, the fraction of the memory roofline (the
machine's measured copy bandwidth divided by the bytes each element moves) and whether each
case meets its speed target. The header names the host CPU, its vector ISA, the target qcore was
compiled for, numba's threading layer and thread count.

``--cpu NAME`` adds a column for qcore compiled for another LLVM CPU target (a subprocess with
NUMBA_CPU_NAME=NAME, NUMBA_CPU_FEATURES="" so that the code has that CPU's features and not the
host's, and its own numba cache; e.g. ``haswell`` for AVX2 on an AVX-512 host).
``--cold`` times the first calls from an empty numba cache (:mod:`qcore.bench.cold`).
``--cold-app`` times the app's first pages after a fresh ``streamlit run`` with an empty numba
cache, and every page after a warm restart, in headless Chromium: it runs
``python -m app.bench_browser`` from a checkout (the app is not part of the engine).
``--busy`` compares the parallel kernels' throughput with one core kept busy by another process
against the machine as it is (:mod:`qcore.bench.busy`).
``--backend cuda`` times the GPU kernels (:mod:`qcore.bench.cuda`).
``--models`` is the model table (:mod:`qcore.bench.model`) and the latency-objective rows
(:mod:`qcore.bench.objectives`: every real model of the tests and a YOLO-style net against
onnxruntime's own quantizers); ``--nets KEYS`` picks those rows (alone, without ``--models``).
``--markdown [FILE]`` gives the table as Markdown headed by the host, the versions, the date and
the exact command line (docs/performance.md pastes it; with FILE it is written there).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import ml_dtypes
import numpy as np

import qcore
from qcore.bench import busy, cold, host, timing
from qcore.bench.cases import default_cases, make_inputs, qcore_impl, run, target_verdicts
from qcore.bench.table import command_line, format_table, markdown_report


def _parse_size(text: str) -> tuple[int, int]:
    if "x" in text:
        a, b = text.lower().split("x")
        return int(a), int(b)
    n = int(text)
    return (max(1, n // 4096), min(n, 4096))


def _progress(i: int, total: int, label: str) -> None:
    width = 30
    done = int(width * i / max(total, 1))
    sys.stderr.write(f"\r[{'#' * done}{'.' * (width - done)}] {i}/{total} {label[:40]:<40}")
    if i == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m qcore.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a representative subset")
    parser.add_argument("--size", default=None,
                        help="ROWSxCOLS or an element count (default 4096x4096; 1024x1024 "
                             "with --cold)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--backend", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--no-peers", action="store_true", help="qcore only")
    parser.add_argument("--sweep", action="store_true",
                        help="also report int8 per-tensor elements/s from 2^10 to 2^26 elements")
    parser.add_argument("--only", default=None, help="run only cases whose name contains this (several: A|B)")
    parser.add_argument("--cpu", metavar="NAME", action="append", default=[],
                        help="also run the qcore side compiled for this LLVM CPU target "
                             "(NUMBA_CPU_NAME, with that CPU's own features) in a subprocess "
                             "with its own numba cache; repeatable")
    parser.add_argument("--cpu-time", action="store_true", help="one thread each (qcore and "
                        "onnxruntime), timed by the thread's CPU time: per-element cost on a "
                        "machine too loaded for wall-clock figures")
    parser.add_argument("--cold", action="store_true",
                        help="time first calls from an empty numba cache, then primed")
    parser.add_argument("--cold-cases", default=None,
                        help="with --cold: comma-separated subset of " + ", ".join(
                            cold.COLD_CASES))
    parser.add_argument("--cold-app", action="store_true",
                        help="the app's cold start (empty numba cache) and warm restart in "
                             "headless Chromium (needs playwright and /usr/bin/chromium)")
    parser.add_argument("--cold-app-wait", type=float, default=600, metavar="S",
                        help="with --cold-app: seconds to wait for the background warm-up to "
                             "run every page's default view before the warm restart (default "
                             "600)")
    parser.add_argument("--busy", action="store_true",
                        help="throughput with one core kept busy by a spinning process, against "
                             "idle (the spinner is started and killed by the benchmark)")
    parser.add_argument("--busy-rounds", type=int, default=2,
                        help="with --busy: alternating idle/busy rounds (default 2)")
    parser.add_argument("--busy-pin", type=int, default=None, metavar="CPU",
                        help="with --busy: pin the spinner to this CPU")
    parser.add_argument("--ort-threads", type=int, default=None, metavar="N",
                        help="onnxruntime's intra-op threads (default: its own, one per core); "
                             "set it to numba's thread count where the OS does not confine "
                             "onnxruntime to the CPUs the benchmark is pinned to")
    parser.add_argument("--no-warmup", action="store_true",
                        help="skip qcore.warmup() (each case still runs once before timing)")
    parser.add_argument("--markdown", nargs="?", const="-", default=None, metavar="FILE",
                        help="print the table as Markdown headed by the host, versions, date "
                             "and this command line; with FILE, write it there and print the "
                             "usual report")
    parser.add_argument("--models", action="store_true",
                        help="the model table: MiniLM (MatMul form) float, onnxruntime's "
                             "quantizers and qcore's deployable exports in onnxruntime — "
                             "latency, output SQNR, file size, bits per weight, targets")
    parser.add_argument("--nets", default=None, metavar="KEYS",
                        help="the latency-objective rows for these models (comma-separated "
                             "keys of qcore.bench.objectives: the real models of the tests and "
                             "yolo-style-320; 'none' skips them); with --models the default is "
                             "all of them, without it only these rows are run")
    parser.add_argument("--sentences", type=int, default=32,
                        help="with --models: MiniLM sentences per pass (default 32)")
    parser.add_argument("--repeats", type=int, default=10,
                        help="with --models: timed passes per model and thread count")
    parser.add_argument("--cold-child", default=None, help=argparse.SUPPRESS)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    problem = _check_args(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2

    if args.cold_child is not None:  # the timed process of --cold: one JSON line on stdout
        shape = _parse_size(args.size or "1024x1024")
        print(json.dumps(cold.child(args.cold_child.split(","), shape)))
        return 0
    if args.cold:
        return _main_cold(args)
    if args.busy:
        return _main_busy(args)
    if args.cold_app:
        return _main_cold_app(args)
    if args.models or args.nets is not None:
        return _main_models(args, argv)
    shape = _parse_size(args.size or "4096x4096")
    if args.backend == "cuda":
        return _main_cuda(shape, args)
    for name in args.cpu:
        problem = host.target_problem(name)
        if problem:
            print(problem, file=sys.stderr)
            return 2
    if args.cpu_time:
        timing.use_thread_cpu_time()
    if args.ort_threads is not None:
        timing.ORT_THREADS = args.ort_threads
    t0 = time.perf_counter()
    warm = {} if args.no_warmup else qcore.warmup()
    warm_s = time.perf_counter() - t0
    cases = default_cases(args.quick)
    if args.only:
        wanted = [w.strip().lower() for w in args.only.split("|")]
        cases = [c for c in cases if any(w in c.name.lower() for w in wanted)]
    cases, bandwidth = run(cases, shape, args.backend, not args.no_peers, _progress)
    info = host.host_info()
    targets_run = []
    for name in args.cpu:
        try:
            other = _run_other_target(name, args, shape)
        except RuntimeError as exc:
            print(str(exc), file=sys.stderr)
            return 2
        targets_run.append(other)
        for case in cases:
            rate = other["rates"].get(case.name)
            if rate:
                case.results[f"qcore[{name}]"] = rate
    notes = [f"x shape {shape[0]}x{shape[1]} ({shape[0] * shape[1]} elements), float32 "
             "unless the case says otherwise",
             "timing: " + ("CPU time of one thread (qcore and onnxruntime each on one thread)"
                           if args.cpu_time else "wall clock") +
             f", the fastest repetition of {timing.ROUNDS} interleaved rounds, each "
             "implementation's block started once the process's other threads had stopped "
             "running (timing.settle); load average "
             f"{os.getloadavg()[0]:.1f} at the end; onnxruntime intra-op threads: "
             f"{timing.ORT_THREADS or 'its default'}"]
    for other in targets_run:
        notes.append(f"qcore[{other['cpu']}]: the same cases compiled for {other['cpu']} "
                     f"({other['info']['threading_layer']}, {other['info']['threads']} threads, "
                     f"numba cache {other['cache_dir']})")
    if not args.no_warmup:
        notes.append(f"warmup (numba cache load or compile): {warm_s:.2f} s "
                     + ", ".join(f"{k} {v:.2f} s" for k, v in warm.items()))
    mem = [c.extra_memory_ratio for c in cases if c.extra_memory_ratio is not None]
    if mem:
        notes.append(f"peak extra memory beyond the output: max {100 * max(mem):.1f}% of the "
                     "output")
    table = format_table(cases, bandwidth)
    if args.markdown is not None:
        text = markdown_report(table, info, notes, command_line(argv))
        if args.markdown == "-":
            print(text)
        else:
            with open(args.markdown, "w") as f:
                f.write(text)
    if args.markdown != "-":
        print(f"qcore {qcore.__version__}, numpy {np.__version__}, ml_dtypes "
              f"{ml_dtypes.__version__}")
        print(host.describe(info))
        print("\n".join(notes))
        print(table)
    sweep = timing.size_sweep(backend=args.backend) if args.sweep else []
    for row in sweep:
        print(f"  {row['elements']:>10} elements: {row['qcore_elem_per_s'] / 1e9:.2f} Gelem/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shape": shape, "bandwidth": bandwidth, "warmup_s": warm_s,
                       "host": info, "other_targets": targets_run,
                       "cases": [asdict(c) | {"targets": target_verdicts(c, cases)}
                                 for c in cases], "sweep": sweep}, f, indent=1)
    return 0


def _check_args(args) -> str | None:
    """What is wrong with the arguments, checked before anything is loaded or timed (one
    ``error:`` line, exit 2), else None: --repeats and --sentences in range (--models), and
    every file the run will write (--json, --markdown FILE) writable now, not after the whole
    benchmark has run."""
    from qcore.cli_args import check_repeats
    from qcore.errors import QuantizationError
    from qcore.model.checks import check_sentences
    from qcore.paths import check_writable_file

    if args.models:
        try:
            check_repeats("--repeats", args.repeats, " (the latency is their median)")
            check_sentences(args.sentences, _shipped_sentences())
        except QuantizationError as exc:
            return str(exc)
    for flag, path in (("--json", args.json), ("--markdown", args.markdown)):
        if path is None or path == "-":
            continue
        if not path or "\x00" in path:
            return f"{flag} {path!r}: give a file name"
        try:
            check_writable_file(Path(path).expanduser(), f"{flag} {path}")
        except QuantizationError as exc:
            return str(exc)
    return None


def _shipped_sentences() -> int:
    """How many sentences ``datasets/sentences.txt`` ships (read from the text file: no model
    is loaded)."""
    from qcore.model.minilm import load_sentences

    return len(load_sentences())


def _main_models(args, argv: list[str]) -> int:
    """``--models``: the model table (:mod:`qcore.bench.model`), printed or as Markdown."""
    from qcore.bench import objectives
    from qcore.bench.model import TARGETS, format_model_table, model_rows

    keys = _net_keys(args.nets)
    obj = objectives.objective_rows(keys, args.repeats,
                                    progress=lambda k: print(f"latency-objective rows: {k}",
                                                             file=sys.stderr, flush=True))
    rows = model_rows(args.sentences, args.repeats) if args.models else []
    info = host.host_info()
    notes, table = [], ""
    if rows:
        notes = [f"MiniLM (qcore.model.minilm, MatMul form), {args.sentences} sentences in "
                 f"batches of 16; latency: median of {args.repeats} passes, models taking turns, "
                 "one process, onnxruntime sessions with default optimizations, spinning off; "
                 f"load average {os.getloadavg()[0]:.1f} at the end"]
        notes += [f"target {k}: {v}" for k, v in TARGETS.items()]
        table = format_model_table(rows)
    if obj:
        notes += objectives.notes(args.repeats, 1)
        table += ("\n" if table else "") + objectives.format_objective_table(obj)
    if args.markdown is not None:
        text = markdown_report(table, info, notes, command_line(argv))
        if args.markdown == "-":
            print(text)
            return 0
        with open(args.markdown, "w") as f:
            f.write(text)
    print(host.describe(info))
    print("\n".join(notes))
    print(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"host": info, "rows": rows, "objective_rows": obj}, f, indent=1,
                      default=str)
    return 0


def _net_keys(text: str | None) -> list[str]:
    """--nets: the keys asked for (checked), all by default, none for 'none'."""
    from qcore.bench import objectives

    known = [r.key for r in objectives.REAL] + [objectives.YOLO_KEY]
    if text is None:
        return known
    if text.strip().lower() == "none":
        return []
    keys = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in keys if k not in known]
    if bad:
        print(f"error: --nets {','.join(bad)}: valid are {', '.join(known)}, none",
              file=sys.stderr)
        raise SystemExit(2)
    return keys


def _run_other_target(name: str, args, shape: tuple[int, int]) -> dict:
    """The qcore column for another CPU target, from a subprocess (see :mod:`qcore.bench.host`)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="qcore-bench-") as tmp:
        out = os.path.join(tmp, "other.json")
        child = ["--no-peers", "--no-warmup", "--size", f"{shape[0]}x{shape[1]}", "--json", out]
        if args.quick:
            child.append("--quick")
        if args.cpu_time:
            child.append("--cpu-time")
        if args.only:
            child += ["--only", args.only]
        host.run_for_target(name, child)
        with open(out) as f:
            data = json.load(f)
    return {"cpu": name, "info": data["host"],
            "cache_dir": str(host.target_cache_dir(name)),
            "rates": {c["name"]: c["results"].get("qcore") for c in data["cases"]}}


def _main_cold(args) -> int:
    names = (args.cold_cases.split(",") if args.cold_cases else list(cold.COLD_CASES))
    unknown = [n for n in names if n not in cold.COLD_CASES]
    if unknown:
        print(f"--cold-cases: unknown {unknown}; valid: {', '.join(cold.COLD_CASES)}",
              file=sys.stderr)
        return 2
    shape = _parse_size(args.size or "1024x1024")
    print(host.describe(host.host_info()))
    result = cold.measure(names, shape, progress=_say_step)
    return _report(cold.format_report(result), result, args.json)


def _say_step(label: str) -> None:
    print(f"  {label} ...", file=sys.stderr, flush=True)


def _report(text: str, result: dict, json_path: str | None) -> int:
    """Print a mode's report and write its result as JSON when asked."""
    print(text)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1)
    return 0


def _main_cold_app(args) -> int:
    """Run the app's browser timing, which lives with the app (``app/bench_browser.py``)."""
    import subprocess

    if not os.path.exists(os.path.join("app", "bench_browser.py")):
        print("--cold-app runs from a checkout's root (it starts streamlit_app.py): "
              "app/bench_browser.py not found here", file=sys.stderr)
        return 2
    cmd = [sys.executable, "-m", "app.bench_browser", "--wait", str(args.cold_app_wait)]
    if args.json:
        cmd += ["--json", args.json]
    return subprocess.call(cmd)


def _busy_call(name: str, shape: tuple[int, int]) -> Callable[[], object]:
    """The qcore call of the benchmark case `name` (for --busy)."""
    case = next(c for c in default_cases() if c.name == name)
    return qcore_impl(case, make_inputs(case, shape))


def _main_busy(args) -> int:
    names = list(busy.BUSY_CASES)
    if args.only:
        names = [n for n in names if args.only.lower() in n.lower()]
    shape = _parse_size(args.size or "4096x4096")
    result = busy.measure(names, shape, _busy_call, rounds=max(1, args.busy_rounds),
                                pin=args.busy_pin, progress=_say_step)
    print(host.describe(host.host_info()))  # after the runs: names numba's layer
    return _report(busy.format_report(result),
                   result | {"ratios": busy.ratios(result)}, args.json)


def _torch_cuda_rates(n: int) -> dict[str, float]:
    """torch on the same GPU: int8 via (x / s).round().clamp().to(int8), and float8 e4m3fn."""
    try:
        import torch
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    x = torch.randn(n, device="cuda")
    fns = {"Q int8 per-tensor": lambda: (x / 0.05).round().clamp(-128, 127).to(torch.int8),
           "Q float8e4m3fn per-tensor": lambda: x.to(torch.float8_e4m3fn)}
    rates = {}
    for name, fn in fns.items():
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            fn()
        end.record()
        torch.cuda.synchronize()
        rates[name] = n / (start.elapsed_time(end) / 10 / 1e3)
    return rates


def _main_cuda(shape: tuple[int, int], args) -> int:
    from qcore.bench import cuda as bench_cuda
    from qcore.kernels import cuda as cuda_kernels

    reason = cuda_kernels.unavailable_reason()
    if reason:
        print(f"--backend cuda: no usable GPU ({reason})", file=sys.stderr)
        return 2
    n = shape[0] * shape[1]
    timings = bench_cuda.bench_cases(n)
    torch_rates = {} if args.no_peers else _torch_cuda_rates(n)
    copy = timings[0]
    print(host.describe(host.host_info()))
    print(f"GPU: {cuda_kernels.device_name()}; {n} elements; copy bandwidth "
          f"{copy.bandwidth / 1e9:.0f} GB/s (read + write)")
    print("| case | kernel Gelem/s | % copy roofline | torch Gelem/s | qcore/torch | "
          "launch µs | H2D ms | D2H ms | targets |")
    print("|---|---|---|---|---|---|---|---|---|")
    for t in timings[1:]:
        torch_rate = torch_rates.get(t.name)
        vs_torch = (f"{torch_rate / 1e9:.1f} | {t.elements_per_s / torch_rate:.2f}×"
                    if torch_rate else "— | —")
        print(f"| {t.name} | {t.elements_per_s / 1e9:.1f} | "
              f"{100 * t.bandwidth / copy.bandwidth:.0f}% | {vs_torch} | "
              f"{t.launch_s * 1e6:.0f} | {t.h2d_s * 1e3:.1f} | {t.d2h_s * 1e3:.1f} | "
              f"{bench_cuda.cuda_verdict(t, copy, torch_rate)} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": cuda_kernels.device_name(), "n": n,
                       "timings": [asdict(t) for t in timings], "torch": torch_rates}, f,
                      indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
