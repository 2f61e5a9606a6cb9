"""The benchmark's cases: the operator x format x granularity matrix, the speed target of each
row, the inputs every implementation shares, qcore's call and each peer's (onnxruntime, torch,
ml_dtypes ``astype``, the NumPy one-liner), and :func:`run`, which times them all."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import qcore
from qcore.bench import timing
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
        options.intra_op_num_threads = timing.ORT_THREADS
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


# ---------------------------------------------------------------- the run


def run(cases: list[Case], shape: tuple[int, int], backend: str = "cpu",
        peers: bool = True, progress=None) -> tuple[list[Case], float]:
    """Time qcore and each peer on every case in interleaved rounds; the cases (with their
    results, roofline and extra memory filled in) and the copy bandwidth."""
    bandwidth = timing.copy_bandwidth()
    n = shape[0] * shape[1]
    for i, case in enumerate(cases):
        if progress:
            progress(i, len(cases), case.name)
        inputs = make_inputs(case, shape)
        impls = {"qcore": qcore_impl(case, inputs, backend)}
        if peers:
            impls.update({name: make(case, inputs) for name, make in PEERS.items()})
        # interleaved rounds: a slow spell of the machine hits one round, not one implementation
        for _ in range(timing.ROUNDS):
            for name, fn in impls.items():
                if fn is not None:
                    timing.settle()  # the previous implementation's threads stop spinning first
                    case.results[name] = max(case.results.get(name, 0.0), timing.time_call(fn, n))
        case.roofline = bandwidth / bytes_per_element(case)
        if case.op == "quantize" and not case.packed:
            case.extra_memory_ratio = timing.extra_memory_ratio(impls["qcore"])
    if progress:
        progress(len(cases), len(cases), "done")
    return cases, bandwidth
