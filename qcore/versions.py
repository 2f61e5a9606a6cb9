"""One table of operator versions: what each version of each operator accepts.

`OPERATORS[op][version]` is an :class:`OpVersion`. Gating (`check_type`, `check_attribute`),
opset resolution (`resolve`) and every "accepted from version N" message derive from it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import QuantizationError

QUANTIZE = "QuantizeLinear"
DEQUANTIZE = "DequantizeLinear"
DYNAMIC = "DynamicQuantizeLinear"

LATEST_OPSET = 28

_F8 = ("float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz")
_HP = ("float", "float16", "bfloat16")


@dataclass(frozen=True)
class OpVersion:
    """What one version of one operator accepts."""

    op: str
    version: int
    x_types: tuple[str, ...]  # QuantizeLinear: high precision in; DequantizeLinear: quantized in
    scale_types: tuple[str, ...]
    quantized_types: tuple[str, ...]  # y of QuantizeLinear / x of DequantizeLinear
    output_types: tuple[str, ...]  # high-precision outputs of DequantizeLinear
    attributes: tuple[str, ...]
    scale_follows_x: bool = False  # QuantizeLinear 19-21: y_scale has x's type
    per_axis: bool = False
    blocked: bool = False

    @property
    def label(self) -> str:
        return f"{self.op}-{self.version}"


def _q(version, quantized, scale_types, attributes, x=("float", "int32"), **kw):
    return OpVersion(QUANTIZE, version, x, scale_types, quantized, (), attributes, **kw)


def _dq(version, quantized, scale_types, attributes, outputs=_HP, **kw):
    return OpVersion(DEQUANTIZE, version, quantized, scale_types, quantized, outputs, attributes,
                     **kw)


_Q10 = ("int8", "uint8")
_Q19 = _Q10 + _F8
_Q21 = ("int8", "uint8", "int16", "uint16") + _F8 + ("uint4", "int4")
_Q23 = _Q21 + ("float4e2m1",)
_Q25 = _Q23 + ("uint2", "int2")
_Q28 = _Q25 + ("float6e2m3", "float6e3m2")
_X19 = _HP + ("int32",)
_S23 = _HP + ("int32",)
_S24 = _S23 + ("float8e8m0",)
_QA19 = ("axis", "saturate")
_QA21 = _QA19 + ("block_size", "output_dtype")
_QA23 = _QA21 + ("precision",)

_DQ10 = ("int8", "uint8", "int32")
_DQ19 = _DQ10 + _F8
_DQ21 = ("int8", "uint8", "int16", "uint16", "int32") + _F8 + ("uint4", "int4")
_DQ23 = _DQ21 + ("float4e2m1",)
_DQ25 = _DQ23 + ("uint2", "int2")
_DQ28 = _DQ25 + ("float6e2m3", "float6e3m2")

OPERATORS: dict[str, dict[int, OpVersion]] = {
    QUANTIZE: {
        v.version: v
        for v in (
            _q(10, _Q10, ("float",), ()),
            _q(13, _Q10, ("float",), ("axis",), per_axis=True),
            _q(19, _Q19, _X19, _QA19, x=_X19, scale_follows_x=True, per_axis=True),
            _q(21, _Q21, _X19, _QA21, x=_X19, scale_follows_x=True, per_axis=True, blocked=True),
            _q(23, _Q23, _S23, _QA23, x=_X19, per_axis=True, blocked=True),
            _q(24, _Q23, _S24, _QA23, x=_X19, per_axis=True, blocked=True),
            _q(25, _Q25, _S24, _QA23, x=_X19, per_axis=True, blocked=True),
            _q(28, _Q28, _S24, _QA23, x=_X19, per_axis=True, blocked=True),
        )
    },
    DEQUANTIZE: {
        v.version: v
        for v in (
            _dq(10, _DQ10, ("float",), (), outputs=("float",)),
            _dq(13, _DQ10, ("float",), ("axis",), outputs=("float",), per_axis=True),
            _dq(19, _DQ19, _HP, ("axis",), per_axis=True),
            _dq(21, _DQ21, _HP, ("axis", "block_size"), per_axis=True, blocked=True),
            _dq(23, _DQ23, _HP, ("axis", "block_size", "output_dtype"), per_axis=True,
                blocked=True),
            _dq(24, _DQ23, _HP + ("float8e8m0",), ("axis", "block_size", "output_dtype"),
                per_axis=True, blocked=True),
            _dq(25, _DQ25, _HP + ("float8e8m0",), ("axis", "block_size", "output_dtype"),
                per_axis=True, blocked=True),
            _dq(28, _DQ28, _HP + ("float8e8m0",), ("axis", "block_size", "output_dtype"),
                per_axis=True, blocked=True),
        )
    },
    DYNAMIC: {11: OpVersion(DYNAMIC, 11, ("float",), ("float",), ("uint8",), (), ())},
}

#: Attribute defaults as the ONNX schemas state them.
ATTRIBUTE_DEFAULTS = {"axis": 1, "saturate": 1, "block_size": 0, "output_dtype": 0, "precision": 0}


def versions(op: str) -> tuple[int, ...]:
    """The versions of an operator, oldest first."""
    return tuple(sorted(OPERATORS[op]))


def check_opset(opset) -> int:
    """`opset` as an int: a Python or NumPy integer (not a bool, float or string)."""
    if isinstance(opset, (bool, np.bool_)) or not isinstance(opset, (int, np.integer)):
        first = min(min(by_version) for by_version in OPERATORS.values())
        raise QuantizationError(
            f"opset={opset!r} must be an integer (a Python or NumPy int, not "
            f"{type(opset).__name__}); valid opsets: {first}..{LATEST_OPSET}"
        )
    return int(opset)


def resolve(op: str, opset: int) -> OpVersion:
    """The version of `op` in force at `opset`, as ONNX resolves it (opset 22 -> version 21)."""
    if op not in OPERATORS:
        raise QuantizationError(f"unknown operator {op!r}; valid: {', '.join(OPERATORS)}")
    opset = check_opset(opset)
    first = versions(op)[0]
    if opset < first:
        raise QuantizationError(
            f"{op} does not exist at opset {opset}; it was introduced at opset {first} "
            f"(valid opsets: {first}..{LATEST_OPSET})"
        )
    if opset > LATEST_OPSET:
        raise QuantizationError(
            f"opset={opset} is newer than the latest opset qcore implements ({LATEST_OPSET})"
        )
    return OPERATORS[op][max(v for v in versions(op) if v <= opset)]


def first_version_with(op: str, predicate) -> int | None:
    """The oldest version of `op` for which predicate(OpVersion) holds, or None."""
    for v in versions(op):
        if predicate(OPERATORS[op][v]):
            return v
    return None


def _since(op: str, predicate) -> str:
    v = first_version_with(op, predicate)
    return f"it is accepted from {op}-{v}" if v else f"no version of {op} accepts it"


def check_type(ov: OpVersion, role: str, argument: str, type_name: str) -> None:
    """Raise unless `type_name` is valid for `role` ("x", "scale", "quantized", "output")."""
    field = {"x": "x_types", "scale": "scale_types", "quantized": "quantized_types",
             "output": "output_types"}[role]
    allowed = getattr(ov, field)
    if type_name in allowed:
        return
    raise QuantizationError(
        f"{ov.label}: {argument} has type {type_name}, which this version does not accept; "
        f"{_since(ov.op, lambda o: type_name in getattr(o, field))}. "
        f"Valid at {ov.label}: {', '.join(allowed)}"
    )


def check_attribute(ov: OpVersion, name: str) -> None:
    """Raise unless version `ov` has attribute `name`."""
    if name in ov.attributes:
        return
    raise QuantizationError(
        f"{ov.label} has no attribute {name!r}; "
        f"{_since(ov.op, lambda o: name in o.attributes)}. "
        f"Attributes of {ov.label}: {', '.join(ov.attributes) or 'none'}"
    )


def check_granularity(ov: OpVersion, granularity: str, argument: str) -> None:
    """Raise unless `ov` supports "per-axis" or "blocked" quantization."""
    field = {"per-axis": "per_axis", "blocked": "blocked"}.get(granularity)
    if field is None or getattr(ov, field):
        return
    raise QuantizationError(
        f"{ov.label} supports only {'per-tensor' if not ov.per_axis else 'per-tensor and per-axis'}"
        f" quantization, but {argument} asks for {granularity}; "
        f"{_since(ov.op, lambda o: getattr(o, field))}"
    )
