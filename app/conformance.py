"""One ONNX node run by qcore, the onnx reference evaluator and onnxruntime, compared bit by bit.

onnx and onnxruntime are optional: they are imported lazily and a missing one is reported, not
raised. The node's inputs are initializers (constants) so the types NumPy lacks (int4, float8,
bfloat16) need no feeding; onnxruntime runs with graph optimizations off so its kernel, not a
constant folder, computes the result.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

import qcore
from qcore.codes import code_bits

from .compute import fmt_value

ENGINES = ("qcore", "onnx reference", "onnxruntime")
#: A package installed while the app runs is seen only by a new server process.
RESTART = "then restart the Streamlit server: a running server does not see new packages"


@dataclass(frozen=True)
class Node:
    """A node to run: operator, opset, inputs as text lists, attributes."""

    op: str = qcore.QUANTIZE
    opset: int = 21
    x: str = "1e10, -1e10, inf, -inf, 127.5, -128.5, 2.5"
    x_type: str = "float"
    scale: str = "1"
    scale_type: str = "float"
    zero_point: str = "0"
    target: str = "int8"  # QuantizeLinear's output type / DequantizeLinear's input type
    axis: int = 0
    block_size: int = 0
    saturate: bool = True
    precision: str = ""
    output_dtype: str = ""  # DequantizeLinear only


@dataclass
class Outcome:
    """What one engine produced: outputs, or why it could not run."""

    outputs: list[np.ndarray] = field(default_factory=list)
    error: str = ""
    missing: bool = False  # the package is not installed


def parse_values(text: str, argument: str) -> np.ndarray:
    """'1, -inf, nan, 2.5e3' as float64 values."""
    items = [t.strip() for t in text.replace(";", ",").replace("\n", ",").split(",")]
    items = [t for t in items if t]
    out = []
    for t in items:
        low = t.lower().replace("−", "-")
        try:
            out.append(float(low))
        except ValueError:
            raise qcore.QuantizationError(
                f"{argument}: {t!r} is not a number; write numbers separated by commas, "
                f"e.g. 1.5, -2, 1e10, inf, -inf, nan") from None
    return np.array(out, np.float64)


def _cast(values: np.ndarray, type_name: str) -> np.ndarray:
    fmt = qcore.get_format(type_name)
    with np.errstate(all="ignore"):
        if fmt.is_integer:
            if not np.isfinite(values).all() or (values != np.rint(values)).any() \
                    or values.min(initial=0) < fmt.min or values.max(initial=0) > fmt.max:
                raise qcore.QuantizationError(
                    f"values for {fmt.name} must be integers in [{int(fmt.min)}, "
                    f"{int(fmt.max)}]; got {', '.join(fmt_value(v) for v in values)}")
            return values.astype(np.int64).astype(fmt.dtype)
        return values.astype(np.float32).astype(fmt.dtype)


class Inputs(NamedTuple):
    """The node's input arrays, in ONNX order (None where the node has no such input)."""

    x: np.ndarray
    scale: np.ndarray | None
    zero_point: np.ndarray | None


def inputs(node: Node) -> Inputs:
    """The node's input arrays from its text fields."""
    if node.op == qcore.DEQUANTIZE:
        x = _cast(parse_values(node.x, "x"), node.target)
    else:
        x = _cast(parse_values(node.x, "x"), node.x_type)
    if node.op == qcore.DYNAMIC:
        return Inputs(x, None, None)
    s = _cast(parse_values(node.scale, "scale"), node.scale_type)
    zp = None
    if node.zero_point.strip():
        zp = _cast(parse_values(node.zero_point, "zero point"), node.target)
        if zp.size != s.size:
            raise qcore.QuantizationError(
                f"the zero point has {zp.size} value(s) but the scale has {s.size}; give "
                f"one per scale (or leave the zero point empty)")
    if s.size == 1:
        s = s.reshape(())
        zp = None if zp is None else zp.reshape(())
    return Inputs(x, s, zp)


def attributes(node: Node, zero_point: np.ndarray | None) -> dict[str, Any]:
    """Attributes as qcore's keyword arguments (only the ones away from their defaults)."""
    kw: dict[str, Any] = {}
    if node.op == qcore.DYNAMIC:
        return kw
    if node.axis != 1:
        kw["axis"] = node.axis
    if node.block_size:
        kw["block_size"] = node.block_size
    if node.op == qcore.QUANTIZE:
        if not node.saturate:
            kw["saturate"] = False
        if node.precision:
            kw["precision"] = node.precision
        if zero_point is None:
            kw["output_dtype"] = node.target
    elif node.output_dtype:
        kw["output_dtype"] = node.output_dtype
    return kw


def output_type(node: Node) -> str:
    """The type of the node's (first) output, as ONNX infers it."""
    if node.op == qcore.QUANTIZE:
        return node.target
    if node.op == qcore.DYNAMIC:
        return "uint8"
    if node.output_dtype:
        return node.output_dtype
    return "float" if node.scale_type == "float8e8m0" else node.scale_type


def run_qcore(node: Node) -> Outcome:
    try:
        x, s, zp = inputs(node)
        kw = attributes(node, zp)
        if node.op == qcore.DYNAMIC:
            return Outcome(list(qcore.dynamic_quantize_linear(x, opset=node.opset)))
        if node.op == qcore.QUANTIZE:
            return Outcome([qcore.quantize_linear(x, s, zp, opset=node.opset, **kw)])
        return Outcome([qcore.dequantize_linear(x, s, zp, opset=node.opset, **kw)])
    except qcore.QuantizationError as exc:
        return Outcome(error=str(exc))


def _model(node: Node, widen: bool = False):
    """The ONNX model of the node (inputs as initializers), or raise ImportError.

    ``widen`` casts the output exactly to int32 (integers) or float32 (floats), for a runtime
    that cannot hand the narrow type back to NumPy."""
    from qcore.onnx_models import node_model

    x, s, zp = inputs(node)
    if node.op == qcore.DYNAMIC:
        out_types, shapes = ["uint8", "float32", "uint8"], [x.shape, (), ()]
    else:
        out_types, shapes = [output_type(node)], [x.shape]
    cast = None
    if widen:
        cast = "int32" if qcore.get_format(output_type(node)).is_integer else "float32"
    ins = [x] if node.op == qcore.DYNAMIC else [x, s, zp]  # DynamicQuantizeLinear takes x only
    return node_model(node.op, node.opset, ins, attributes(node, zp), initializers=True,
                      output_types=out_types, output_shapes=shapes, cast_output_to=cast)


def _expected_dtype(node: Node, qc: Outcome) -> list[np.dtype | None]:
    if qc.outputs:
        return [o.dtype for o in qc.outputs]
    return [None]


def _coerce(arr: Any, dtype: np.dtype | None) -> np.ndarray:
    """An engine's output as qcore's dtype when it returned the same bits in another dtype."""
    a = np.asarray(arr)
    if dtype is None or a.dtype == dtype:
        return a
    if a.dtype.itemsize == np.dtype(dtype).itemsize and a.dtype.kind in "uiV":
        return a.view(dtype)
    with np.errstate(all="ignore"):
        return a.astype(dtype)


def run_reference(node: Node, expected: list[np.dtype | None]) -> Outcome:
    try:
        import onnx  # noqa: F401
        from onnx.reference import ReferenceEvaluator
    except ImportError:
        return Outcome(error=f"onnx is not installed (pip install onnx, {RESTART})",
                       missing=True)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            outs = ReferenceEvaluator(_model(node)).run(None, {})
        return Outcome([_coerce(o, d) for o, d in zip(outs, expected + [None] * 3)])
    except qcore.QuantizationError as exc:
        return Outcome(error=str(exc))
    except Exception as exc:  # noqa: BLE001 - the reference's own complaint, shown as it is
        return Outcome(error=f"{type(exc).__name__}: {_short(exc)}")


def run_onnxruntime(node: Node, expected: list[np.dtype | None]) -> Outcome:
    try:
        import onnxruntime as ort
    except ImportError:
        return Outcome(error=f"onnxruntime is not installed (pip install onnxruntime, "
                             f"{RESTART})", missing=True)
    try:
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        opts.log_severity_level = 4
        model = _model(node)
        try:
            outs = ort.InferenceSession(model.SerializeToString(), opts,
                                        providers=["CPUExecutionProvider"]).run(None, {})
        except RuntimeError as exc:
            if "No corresponding Numpy type" not in str(exc):
                raise
            # onnxruntime cannot hand int4 / float8e5m2 to NumPy: add an exact Cast to a wider
            # type and convert back (values compared, not NaN payloads)
            outs = ort.InferenceSession(_model(node, widen=True).SerializeToString(), opts,
                                        providers=["CPUExecutionProvider"]).run(None, {})
        return Outcome([_coerce(o, d) for o, d in zip(outs, expected + [None] * 3)])
    except qcore.QuantizationError as exc:
        return Outcome(error=str(exc))
    except Exception as exc:  # noqa: BLE001
        return Outcome(error=f"{type(exc).__name__}: {_short(exc)}")


def _short(exc: BaseException, limit: int = 400) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[:limit] + "…"


def bits(a: np.ndarray) -> np.ndarray:
    """Each element's stored bit pattern as int64 (sub-byte types masked to their width)."""
    a = np.ascontiguousarray(a)
    try:
        return code_bits(qcore.get_format(a.dtype), a)
    except qcore.QuantizationError:  # a type qcore does not know: its raw bits
        return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[
            a.dtype.itemsize]).astype(np.int64)


def same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element-wise: the same type and the same bits."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return np.zeros(a.shape, bool)
    if a.dtype != b.dtype:
        with np.errstate(all="ignore"):
            fa, fb = a.astype(np.float64), b.astype(np.float64)
        return (fa == fb) | (np.isnan(fa) & np.isnan(fb))
    return bits(a) == bits(b)


def describe(v: np.ndarray) -> list[str]:
    """'448 · 0x7E' for each element."""
    a = np.asarray(v).reshape(-1)
    with np.errstate(all="ignore"):
        values = a.astype(np.float64)
    try:
        fmt = qcore.get_format(a.dtype)
        width = max(1, (fmt.bits + 3) // 4)
    except qcore.QuantizationError:
        width = 2 * a.dtype.itemsize
    return [f"{fmt_value(val)} · 0x{int(b):0{width}X}" for val, b in zip(values, bits(a))]


def run_all(node: Node) -> dict[str, Outcome]:
    """The node through every engine."""
    qc = run_qcore(node)
    expected = _expected_dtype(node, qc)
    return {"qcore": qc, "onnx reference": run_reference(node, expected),
            "onnxruntime": run_onnxruntime(node, expected)}


def table(node: Node, outcomes: dict[str, Outcome], output: int = 0) -> tuple[pd.DataFrame,
                                                                               pd.DataFrame]:
    """(text table, agreement mask) for one output: one row per element, one column per engine
    that produced it; the mask is True where an engine agrees with qcore bit for bit."""
    x = inputs(node).x.reshape(-1)
    cols: dict[str, list[str]] = {"x": [fmt_value(float(v)) for v in x.astype(np.float64)]}
    ok: dict[str, list[bool]] = {"x": [True] * x.size}
    ref = outcomes["qcore"].outputs[output] if outcomes["qcore"].outputs else None
    for name in ENGINES:
        out = outcomes[name]
        if not out.outputs or len(out.outputs) <= output:
            continue
        arr = np.asarray(out.outputs[output])
        flat = arr.reshape(-1)
        if flat.size != x.size:  # scalar outputs (DynamicQuantizeLinear's scale / zp)
            continue
        cols[name] = describe(flat)
        ok[name] = (same(flat, ref.reshape(-1)).tolist() if ref is not None
                    else [True] * flat.size)
    return pd.DataFrame(cols), pd.DataFrame(ok)


def disagreements(outcomes: dict[str, Outcome]) -> dict[str, int]:
    """Elements (over all outputs) where each other engine differs from qcore."""
    ref = outcomes["qcore"].outputs
    out = {}
    for name in ENGINES[1:]:
        o = outcomes[name]
        if not ref or not o.outputs:
            continue
        n = 0
        for a, b in zip(ref, o.outputs):
            n += int((~same(np.asarray(a).reshape(-1), np.asarray(b).reshape(-1))).sum()) \
                if np.size(a) == np.size(b) else int(np.size(a))
        out[name] = n
    return out


def scalar_text(a: np.ndarray) -> str:
    a = np.asarray(a)
    return ", ".join(describe(a.reshape(-1))) if a.size else "—"


def _node(x: str, *, op: str = qcore.QUANTIZE, opset: int = 21, x_type: str = "float",
          scale: str = "1", scale_type: str = "float", zero_point: str = "",
          target: str = "int8", axis: int = 1, block_size: int = 0, saturate: bool = True,
          precision: str = "") -> dict[str, Any]:
    """A preset's node: what the case sets, every other field at its plain value."""
    return dict(op=op, opset=opset, x=x, x_type=x_type, scale=scale, scale_type=scale_type,
                zero_point=zero_point, target=target, axis=axis, block_size=block_size,
                saturate=saturate, precision=precision)


#: The known cases (docs/semantics.md), one click away.
PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "overflow": ("1e10 → int8", _node(
        "1e10, -1e10, inf, -inf, 3e9, 127.5, -128.5, 2.5", zero_point="0")),
    "nan_int": ("NaN → int8", _node("nan, -nan, 0, 1, -1", zero_point="-5")),
    "e4m3_480": ("e4m3fn, saturate=0, 480", _node(
        "448, 464, 470, 479, 480, 490, 495.9, 496, 500, inf", target="float8e4m3fn",
        saturate=False)),
    "e5m2_61440": ("e5m2, saturate=0, 61440", _node(
        "57344, 60000, 61439, 61440, 65000, 65535, 65536, inf", target="float8e5m2",
        saturate=False)),
    "f16_div": ("float16 division", _node(
        "0.5, 0.9, 1.1, 1.3, 1.7, 2.1, 2.5, 2.7, 3.7, 4.5", x_type="float16", scale="0.2",
        scale_type="float16", zero_point="0")),
    "dql_zeros": ("Dynamic on zeros", _node("0, 0, 0, 0", op=qcore.DYNAMIC, opset=11,
                                            target="uint8")),
    "f8_zp": ("float8 + zero point", _node("-0, 0, 1, 2, -1, 448, 500", zero_point="1",
                                           target="float8e4m3fn")),
    "f8_zp_dq": ("float8 zero point, Dequantize", _node(
        "1, 2, -0", op=qcore.DEQUANTIZE, zero_point="1", target="float8e4m3fn")),
    "f16_inf": ("±Inf, float16 blocked", _node(
        "inf, -inf, 1, 3e4, -inf, inf, -3e4, 2", x_type="float16", scale="1, 1",
        scale_type="float16", zero_point="1, -1", axis=0, block_size=4)),
}

#: Presets where every engine refuses the node (qcore with a QuantizationError).
REFUSALS = frozenset({"f8_zp_dq"})

#: What to look for in each preset (docs/semantics.md).
NOTES: dict[str, str] = {
    "overflow": "The spec says saturate. qcore and onnxruntime give 127 for 1e10 and +Inf; the "
                "onnx reference casts to int32 before clipping and wraps to **−128**.",
    "nan_int": "NaN into an integer type is undefined by the spec. qcore and onnxruntime give "
               "the type's minimum (−128) whatever the zero point. The onnx reference gives "
               "the minimum for a zero point ≥ 0, but with this negative zero point (−5) its "
               "int32 addition wraps and gives the **maximum** (127): the two NaN elements "
               "differ. The app counts NaNs in its reports.",
    "e4m3_480": "Cast's table for `saturate=0`: overflow gives NaN. onnxruntime gives ±448 for "
                "|x| in [480, 496) instead.",
    "e5m2_61440": "float8e5m2 with `saturate=0` overflows to Inf from 61440 on; onnxruntime "
                  "gives NaN in [61440, 65536). (onnxruntime cannot return float8e5m2 to "
                  "NumPy: its output is cast to float32 exactly and compared by value.)",
    "f16_div": "x and the scale are float16, so the spec divides in float16 (the quotient is "
               "rounded to float16 before rounding to int8). onnxruntime divides in float32: "
               "different codes right at the .5 boundaries.",
    "dql_zeros": "The spec's function body divides 0 by 0. qcore and the onnx reference return "
                 "scale 1/255; onnxruntime 1.0. y and the zero point are 0 either way.",
    "f8_zp": "The spec keeps x/scale + zero_point \"for consistency\" but says the zero point "
             "is \"usually not used\" for float8. The onnx reference and onnxruntime both ignore "
             "it in QuantizeLinear (−0 stays −0, a zero point of 1 changes nothing), so qcore "
             "does too: all three agree bit for bit.",
    "f8_zp_dq": "In DequantizeLinear the onnx reference and onnxruntime both refuse a non-zero "
                "float8 zero point, and so does qcore (set it to 0 to see all three agree).",
    "f16_inf": "±Inf must saturate to the type's range. On its float16 path onnxruntime "
               "follows the zero point's sign instead; the onnx reference wraps.",
}
