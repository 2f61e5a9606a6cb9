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
``--markdown [FILE]`` gives the table as Markdown headed by the host, the versions, the date and
the exact command line (docs/performance.md pastes it; with FILE it is written there).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import ml_dtypes
import numpy as np
from numba import njit, prange

import qcore
from qcore.bench import busy, cold, host
from qcore.formats import get_format


@dataclass
class Case:
    """One benchmark row."""

    name: str
    op: str  # "quantize", "dequantize", "dynamic"
    target: str  # quantized type
    granularity: str = "per-tensor"
    axis: int = 1
    block_size: int = 0
    saturate: bool = True
    x_dtype: str = "float32"
    scale_dtype: str = ""  # "": the same type as x
    precision: str = ""  # "": the operator's default (the scale's type)
    packed: bool = False
    results: dict = field(default_factory=dict)  # implementation -> elements/s
    roofline: float = 0.0  # elements/s the copy bandwidth allows
    extra_memory_ratio: float | None = None  # peak extra bytes / output bytes


def default_cases(quick: bool = False) -> list[Case]:
    """The benchmark matrix (a representative subset with --quick)."""
    cases = [
        Case("Q int8 per-tensor", "quantize", "int8"),
        Case("Q uint8 per-tensor", "quantize", "uint8"),
        Case("Q int8 per-axis (axis 0)", "quantize", "int8", "per-axis", 0),
        Case("Q int8 per-axis (last axis)", "quantize", "int8", "per-axis", 1),
        Case("Q int8 blocked 32 (last axis)", "quantize", "int8", "blocked", 1, 32),
        Case("Q int8 blocked 128 (last axis)", "quantize", "int8", "blocked", 1, 128),
        Case("Q int8 blocked 32 (first axis)", "quantize", "int8", "blocked", 0, 32),
        Case("Q int8 blocked 128 (first axis)", "quantize", "int8", "blocked", 0, 128),
    ]
    for t in ("float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz"):
        cases.append(Case(f"Q {t} saturate", "quantize", t))
        cases.append(Case(f"Q {t} no saturate", "quantize", t, saturate=False))
    for t in ("int4", "uint4", "int2", "uint2", "float4e2m1", "float6e2m3", "float6e3m2"):
        cases.append(Case(f"Q {t} per-tensor", "quantize", t))
    cases += [
        Case("Q int4 blocked 32 + pack", "quantize", "int4", "blocked", 1, 32, packed=True),
        Case("Q float4e2m1 blocked 32 + pack", "quantize", "float4e2m1", "blocked", 1, 32,
             packed=True),
        Case("Q int8 per-tensor, float16 x", "quantize", "int8", x_dtype="float16"),
        Case("Q int8 per-tensor, bfloat16 x", "quantize", "int8", x_dtype="bfloat16"),
        Case("Q float8e4m3fn, float16 x", "quantize", "float8e4m3fn", x_dtype="float16"),
        Case("Q int8 per-tensor, float16 x, float32 scale", "quantize", "int8",
             x_dtype="float16", scale_dtype="float32"),
        Case("Q int8 per-tensor, bfloat16 x, float32 scale", "quantize", "int8",
             x_dtype="bfloat16", scale_dtype="float32"),
        Case("Q int8 per-tensor, bfloat16 x, precision float16", "quantize", "int8",
             x_dtype="bfloat16", precision="float16"),
        Case("DQ int8 per-tensor", "dequantize", "int8"),
        Case("DQ uint8 per-tensor", "dequantize", "uint8"),
        Case("DQ int8 per-axis (last axis)", "dequantize", "int8", "per-axis", 1),
        Case("DQ int8 blocked 32 (last axis)", "dequantize", "int8", "blocked", 1, 32),
        Case("DQ int4 blocked 32", "dequantize", "int4", "blocked", 1, 32),
        Case("DQ float8e4m3fn per-tensor", "dequantize", "float8e4m3fn"),
        Case("DynamicQuantizeLinear", "dynamic", "uint8"),
    ]
    if quick:
        keep = {"Q int8 per-tensor", "Q int8 per-axis (last axis)", "Q int8 blocked 32 (last axis)",
                "Q float8e4m3fn saturate", "Q int4 per-tensor", "Q float4e2m1 per-tensor",
                "DQ int8 per-tensor", "DQ float8e4m3fn per-tensor", "DynamicQuantizeLinear",
                "Q int8 per-tensor, float16 x"}
        cases = [c for c in cases if c.name in keep]
    return cases


# ---------------------------------------------------------------- speed targets

#: Speed targets (issue: fast on every CPU): (peer, minimum qcore/peer ratio) per case, checked
#: against the peers measured in the same run; "float32" means the same case with float32 x.
def targets(case: Case) -> list[tuple[str, float]]:
    """The speed targets of a case: [(peer, minimum ratio of qcore to it)]."""
    fmt = get_format(case.target)
    if case.x_dtype != "float32":
        return [("float32", 0.5)]
    if case.op == "dynamic":
        return [("onnxruntime", 0.9)]
    if case.op == "dequantize":
        return [("onnxruntime", 0.9)] if case.name == "DQ int8 per-tensor" else []
    if case.packed:
        return []
    if fmt.name in ("int8", "uint8"):
        if case.granularity == "per-axis" and case.axis == 1:
            return [("onnxruntime", 20.0)]
        return [("onnxruntime", 0.9)]
    if fmt.name.startswith("float8"):
        return [("onnxruntime", 10.0), ("ml_dtypes", 20.0)]
    if fmt.name.startswith(("float4", "float6")):
        return [("ml_dtypes", 20.0)]
    return []


def _float32_twin(case: Case, cases: list[Case]) -> Case | None:
    """The same case with float32 x (the reference of the 16-bit-x targets)."""
    for other in cases:
        if (other.x_dtype == "float32" and other.op == case.op and other.target == case.target
                and other.granularity == case.granularity and other.axis == case.axis
                and other.block_size == case.block_size and other.saturate == case.saturate
                and other.packed == case.packed):
            return other
    return None


def target_verdicts(case: Case, cases: list[Case]) -> list[str]:
    """"≥0.9× onnxruntime: met" etc. for each target whose reference was measured."""
    q = case.results.get("qcore")
    out = []
    for peer, ratio in targets(case):
        if peer == "float32":
            twin = _float32_twin(case, cases)
            ref = twin.results.get("qcore") if twin else None
            label = "the float32 case"
        else:
            ref = case.results.get(peer)
            label = peer
        if not q or not ref:
            out.append(f"≥{ratio:g}× {label}: not measured")
        else:
            out.append(f"≥{ratio:g}× {label}: {'met' if q / ref >= ratio else 'NOT met'}")
    return out


# ---------------------------------------------------------------- data and parameters

def make_inputs(case: Case, shape: tuple[int, int], seed: int = 0) -> dict:
    """x, scale and zero point for a case (the same arrays go to every implementation)."""
    rng = np.random.default_rng(seed)
    fmt = get_format(case.target)
    x = rng.standard_normal(shape, dtype=np.float32)
    x_dtype = get_format(case.x_dtype).dtype
    scale_value = 3.0 / fmt.max
    scale = np.full(qcore.Layout.from_granularity(shape, case.granularity, case.axis,
                                                 case.block_size).scale_shape(),
                    scale_value, np.float32)
    if case.x_dtype != "float32":
        x = x.astype(x_dtype)
        scale = scale.astype(get_format(case.scale_dtype or case.x_dtype).dtype)
    zero_point = np.zeros(scale.shape, fmt.dtype)
    inputs = {"x": x, "scale": scale, "zero_point": zero_point}
    if case.op == "dequantize":
        inputs["q"] = qcore.quantize_linear(x, scale, zero_point, **_kwargs(case))
    return inputs


def _kwargs(case: Case) -> dict:
    kw: dict = {"saturate": case.saturate}
    if case.precision:
        kw["precision"] = case.precision
    if case.granularity != "per-tensor":
        kw["axis"] = case.axis
    if case.granularity == "blocked":
        kw["block_size"] = case.block_size
    return kw


def bytes_per_element(case: Case) -> float:
    """Bytes of memory traffic per element: read input, write output."""
    x_bytes = get_format(case.x_dtype).itemsize
    q_bytes = 0.5 if case.packed and get_format(case.target).bits == 4 else 1
    q_bytes = get_format(case.target).itemsize if not case.packed else q_bytes
    if case.op == "dequantize":
        return q_bytes + 4
    if case.op == "dynamic":
        return 4 + 4 + 1  # min/max pass reads x, quantize pass reads x and writes y
    return x_bytes + q_bytes


# ---------------------------------------------------------------- implementations

def qcore_impl(case: Case, inputs: dict, backend: str = "cpu") -> Callable[[], object] | None:
    kw = _kwargs(case)
    if case.op == "dynamic":
        return lambda: qcore.dynamic_quantize_linear(inputs["x"], backend=backend)
    if case.op == "dequantize":
        kw.pop("saturate")
        return lambda: qcore.dequantize_linear(inputs["q"], inputs["scale"],
                                               inputs["zero_point"], backend=backend, **kw)
    if case.packed:
        return lambda: qcore.packing.pack(qcore.quantize_linear(
            inputs["x"], inputs["scale"], inputs["zero_point"], backend=backend, **kw))
    return lambda: qcore.quantize_linear(inputs["x"], inputs["scale"], inputs["zero_point"],
                                         backend=backend, **kw)


def numpy_impl(case: Case, inputs: dict) -> Callable[[], object] | None:
    """The NumPy one-liner (integer targets, per-tensor)."""
    fmt = get_format(case.target)
    if case.op != "quantize" or fmt.kind != "int" or case.granularity != "per-tensor":
        return None
    if case.x_dtype != "float32":
        return None
    x, s = inputs["x"], inputs["scale"]
    lo, hi, dt = fmt.min, fmt.max, fmt.dtype
    return lambda: np.clip(np.rint(x / s), lo, hi).astype(dt)


def ml_dtypes_impl(case: Case, inputs: dict) -> Callable[[], object] | None:
    """ml_dtypes ``astype`` (float targets, per-tensor; what the onnx reference does)."""
    fmt = get_format(case.target)
    if case.op != "quantize" or fmt.kind != "float" or case.granularity != "per-tensor":
        return None
    if case.scale_dtype or case.precision:
        return None  # mixed types: astype is not the operator
    x, s, dt = inputs["x"], inputs["scale"], fmt.dtype
    if case.saturate and fmt.name.startswith("float8"):
        lo, hi = fmt.min, fmt.max
        return lambda: np.clip(x / s, lo, hi).astype(dt)
    return lambda: (x / s).astype(dt)


def onnxruntime_impl(case: Case, inputs: dict) -> Callable[[], object] | None:
    try:
        import onnxruntime as ort

        from qcore.onnx_models import INPUT_NAMES, feeds, node_model
    except ImportError:
        return None
    fmt = get_format(case.target)
    x_fmt = get_format(case.x_dtype)
    if x_fmt.name == "bfloat16" or fmt.bits < 4 or fmt.name.startswith("float6") or (
            fmt.name == "float4e2m1") or case.packed or case.scale_dtype or case.precision:
        return None  # no onnxruntime CPU kernel (docs/semantics.md) or nothing comparable
    attrs = {} if case.granularity == "per-tensor" else {"axis": case.axis}
    if case.block_size:
        attrs["block_size"] = case.block_size
    if case.op == "dynamic":
        model = node_model(qcore.DYNAMIC, 11, [inputs["x"]],
                           output_types=["uint8", "float32", "uint8"])
        feed = feeds(qcore.DYNAMIC, inputs["x"])
    else:
        op = qcore.QUANTIZE if case.op == "quantize" else qcore.DEQUANTIZE
        x, scale = inputs["x" if op == qcore.QUANTIZE else "q"], inputs["scale"]
        if op == qcore.QUANTIZE and fmt.kind == "float":
            attrs["saturate"] = case.saturate
        out = fmt.dtype if op == qcore.QUANTIZE else scale.dtype
        model = node_model(op, 21, [x, scale, inputs["zero_point"]], attrs,
                           initializers=[INPUT_NAMES[op][2]], output_types=[out])
        feed = feeds(op, x, scale)
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.intra_op_num_threads = ORT_THREADS
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        session.run(None, feed)
    except Exception:  # noqa: BLE001 - a peer without this kernel is simply not compared
        return None
    return lambda: session.run(None, feed)


def torch_impl(case: Case, inputs: dict) -> Callable[[], object] | None:
    try:
        import torch
    except ImportError:
        return None
    fmt = get_format(case.target)
    if case.op != "quantize" or case.x_dtype != "float32" or case.granularity != "per-tensor":
        return None
    x = torch.from_numpy(inputs["x"])
    s = float(inputs["scale"])
    if fmt.name in ("int8", "uint8"):
        tdt = torch.int8 if fmt.name == "int8" else torch.uint8
        lo, hi = fmt.min, fmt.max
        return lambda: (x / s).round().clamp(lo, hi).to(tdt)
    tdt = {"float8e4m3fn": "float8_e4m3fn", "float8e5m2": "float8_e5m2",
           "float8e4m3fnuz": "float8_e4m3fnuz", "float8e5m2fnuz": "float8_e5m2fnuz"}.get(fmt.name)
    if tdt is None or not hasattr(torch, tdt):
        return None
    tdt = getattr(torch, tdt)
    return lambda: (x / s).to(tdt)


PEERS = {"onnxruntime": onnxruntime_impl, "torch": torch_impl, "ml_dtypes": ml_dtypes_impl,
         "numpy": numpy_impl}


# ---------------------------------------------------------------- timing

#: The clock of time_call: wall clock, or this thread's CPU time with --cpu-time.
CLOCK = time.perf_counter
#: onnxruntime's intra-op threads (0: its default, one per core; 1 with --cpu-time).
ORT_THREADS = 0


#: Rounds in which every implementation of a case is timed in turn (see :func:`run`).
ROUNDS = 3


def time_call(fn: Callable[[], object], n_elements: int, min_time: float = 0.3,
              max_reps: int = 15) -> float:
    """Elements/s of the fastest repetition (after one warm-up call), by :data:`CLOCK`.

    The fastest, not the median: on a shared machine noise (another process, a stolen core)
    only ever adds time, and it is measured the same way for qcore and every peer."""
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < 5 or (time.perf_counter() - start < min_time and len(times) < max_reps):
        t0 = CLOCK()
        fn()
        times.append(CLOCK() - t0)
    return n_elements / max(min(times), 1e-9)


@njit(parallel=True, cache=True)
def _parallel_copy(src, dst):
    for i in prange(src.size):
        dst[i] = src[i]


def copy_bandwidth(n_bytes: int = 256 << 20) -> float:
    """Bytes/s of a parallel copy (read + write counted), the streaming ceiling."""
    src = np.ones(n_bytes // 4, np.float32)
    dst = np.empty_like(src)
    best = 0.0
    for fn in (lambda: _parallel_copy(src, dst), lambda: np.copyto(dst, src)):
        fn()
        ts = []
        for _ in range(7):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        best = max(best, 2 * src.nbytes / float(np.median(ts)))
    return best


def extra_memory_ratio(fn: Callable[[], object]) -> float | None:
    """Peak bytes allocated during a call beyond its output, over the output's size (with the
    output pool emptied first, so that the output is allocated during the call)."""
    from qcore.kernels import cpu

    fn()
    cpu.release_outputs()
    tracemalloc.start()
    out = fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    arr = out[0] if isinstance(out, tuple) else out
    size = getattr(arr, "nbytes", 0)
    return (peak - size) / size if size else None


def size_sweep(exponents=range(10, 27, 2), backend: str = "cpu") -> list[dict]:
    """qcore int8 per-tensor elements/s against size (shows the serial/parallel threshold)."""
    rows = []
    for e in exponents:
        n = 1 << e
        x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
        s, z = np.float32(0.02), np.int8(0)
        rate = time_call(lambda x=x, s=s, z=z: qcore.quantize_linear(x, s, z, backend=backend),
                         n, min_time=0.2, max_reps=50)
        rows.append({"elements": n, "qcore_elem_per_s": rate})
    return rows


def run(cases: list[Case], shape: tuple[int, int], backend: str = "cpu",
        peers: bool = True, progress=None) -> tuple[list[Case], float]:
    bandwidth = copy_bandwidth()
    n = shape[0] * shape[1]
    for i, case in enumerate(cases):
        if progress:
            progress(i, len(cases), case.name)
        inputs = make_inputs(case, shape)
        impls = {"qcore": qcore_impl(case, inputs, backend)}
        if peers:
            impls.update({name: make(case, inputs) for name, make in PEERS.items()})
        # interleaved rounds: a slow spell of the machine hits one round, not one implementation
        for _ in range(ROUNDS):
            for name, fn in impls.items():
                if fn is not None:
                    case.results[name] = max(case.results.get(name, 0.0), time_call(fn, n))
        case.roofline = bandwidth / bytes_per_element(case)
        if case.op == "quantize" and not case.packed:
            case.extra_memory_ratio = extra_memory_ratio(impls["qcore"])
    if progress:
        progress(len(cases), len(cases), "done")
    return cases, bandwidth


def format_table(cases: list[Case], bandwidth: float) -> str:
    peers = [p for p in PEERS if any(p in c.results for c in cases)]
    others = sorted({k for c in cases for k in c.results if k.startswith("qcore[")})
    head = (["case", "qcore Gelem/s", "% roofline"] + [f"{k} Gelem/s" for k in others]
            + [f"{p} Gelem/s" for p in peers] + [f"qcore/{p}" for p in peers] + ["targets"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in cases:
        q = c.results.get("qcore", 0.0)
        row = [c.name, f"{q / 1e9:.2f}", f"{100 * q / c.roofline:.0f}%" if c.roofline else ""]
        row += [f"{c.results[k] / 1e9:.2f}" if k in c.results else "—" for k in others]
        row += [f"{c.results[p] / 1e9:.3f}" if p in c.results else "—" for p in peers]
        row += [f"{q / c.results[p]:.1f}×" if p in c.results else "—" for p in peers]
        row.append("; ".join(target_verdicts(c, cases)) or "—")
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    lines.append(f"copy bandwidth (read + write): {bandwidth / 1e9:.1f} GB/s; roofline = "
                 f"bandwidth / bytes moved per element (float32 → 8-bit: 5 B)")
    return "\n".join(lines)


#: Environment variables that change the code a run compiles or how it runs (named in the
#: Markdown's command line when set).
_ENV_SHOWN = ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", "NUMBA_CACHE_DIR", "NUMBA_NUM_THREADS",
              "NUMBA_THREADING_LAYER")


def command_line(argv: list[str], env: dict[str, str] | None = None) -> str:
    """The shell command that reproduces this run: the variables of _ENV_SHOWN that are set,
    then ``python -m qcore.bench`` and `argv` (a --markdown FILE argument included)."""
    env = os.environ if env is None else env
    prefix = [f"{k}={shlex.quote(env[k])}" if env[k] else f"{k}=" for k in _ENV_SHOWN
              if k in env]
    return " ".join(prefix + ["python -m qcore.bench"] + [shlex.quote(a) for a in argv])


def _version(module: str) -> str:
    try:
        return __import__(module).__version__
    except ImportError:
        return "not installed"


def markdown_report(table: str, info: dict, notes: list[str], command: str,
                    when: datetime.datetime | None = None) -> str:
    """The run as Markdown: a heading naming the host CPU (llvmlite's get_host_cpu_name()) and
    the code's vector ISA, then the date, the exact command, the host and versions, `notes`
    (the run's own header lines) and `table` (:func:`format_table`)."""
    when = when or datetime.datetime.now(datetime.timezone.utc)
    compiled = info["numba_cpu_name"] or "native"
    lines = [f"### {info['host_cpu']} host, {compiled} code ({info['target_isa']})", "",
             f"- date: {when:%Y-%m-%d %H:%M} UTC",
             f"- command: `{command}`",
             f"- host: llvmlite `get_host_cpu_name()` = `{info['host_cpu']}` "
             f"({info['host_isa']}), {info['cores']} cores; numba {info['numba']} "
             f"({info['threading_layer']}, {info['threads']} threads), onnxruntime "
             f"{_version('onnxruntime')}, numpy {np.__version__}, ml_dtypes "
             f"{ml_dtypes.__version__}, qcore {qcore.__version__}"]
    lines += [f"- {n}" for n in notes]
    body, _, footer = table.partition("\n\n")
    lines += ["", body, ""]
    if footer:
        lines += [footer, ""]
    return "\n".join(lines)


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
                             "(NUMBA_CPU_NAME, with that CPU's own features) in a "
                             "subprocess with its own numba cache; "
                             "repeatable")
    parser.add_argument("--cpu-time", action="store_true",
                        help="one thread each (qcore and onnxruntime), timed by the thread's "
                             "CPU time: per-element cost on a machine too loaded for wall-clock "
                             "figures")
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
    parser.add_argument("--cold-child", default=None, help=argparse.SUPPRESS)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)

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
    shape = _parse_size(args.size or "4096x4096")
    if args.backend == "cuda":
        return _main_cuda(shape, args)
    for name in args.cpu:
        problem = host.target_problem(name)
        if problem:
            print(problem, file=sys.stderr)
            return 2
    if args.cpu_time:
        _single_thread_cpu_time()
    if args.ort_threads is not None:
        global ORT_THREADS
        ORT_THREADS = args.ort_threads
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
             f", the fastest repetition of {ROUNDS} interleaved rounds; load average "
             f"{os.getloadavg()[0]:.1f} at the end; onnxruntime intra-op threads: "
             f"{ORT_THREADS or 'its default'}"]
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
    sweep = size_sweep(backend=args.backend) if args.sweep else []
    for row in sweep:
        print(f"  {row['elements']:>10} elements: {row['qcore_elem_per_s'] / 1e9:.2f} Gelem/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shape": shape, "bandwidth": bandwidth, "warmup_s": warm_s,
                       "host": info, "other_targets": targets_run,
                       "cases": [asdict(c) | {"targets": target_verdicts(c, cases)}
                                 for c in cases], "sweep": sweep}, f, indent=1)
    return 0


def _single_thread_cpu_time() -> None:
    global CLOCK, ORT_THREADS
    import numba

    numba.set_num_threads(1)
    CLOCK, ORT_THREADS = time.thread_time, 1


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
