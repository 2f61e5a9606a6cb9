"""Version gating: every feature is refused before the operator version that introduced it.

The expectations are written here from the ONNX operator documentation (the
schemas' type constraints and attributes), not read from qcore's version table; the table of
features is itself checked against ``onnx.defs`` so that it cannot drift from the spec.
A refusal must be a ``qcore.QuantizationError`` whose message names the version that refused
("QuantizeLinear-19"), the argument at fault and the first version that has the feature.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import qcore

onnx = pytest.importorskip("onnx")

Q, DQ, DYN = "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"
VERSIONS = (10, 13, 19, 21, 23, 24, 25, 28)

X = np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6)

_DT = {
    "float8e4m3fn": ml_dtypes.float8_e4m3fn, "float8e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
    "float8e5m2": ml_dtypes.float8_e5m2, "float8e5m2fnuz": ml_dtypes.float8_e5m2fnuz,
    "int4": ml_dtypes.int4, "uint4": ml_dtypes.uint4, "int16": np.int16, "uint16": np.uint16,
    "float4e2m1": ml_dtypes.float4_e2m1fn, "int2": ml_dtypes.int2, "uint2": ml_dtypes.uint2,
    "float6e2m3": ml_dtypes.float6_e2m3fn, "float6e3m2": ml_dtypes.float6_e3m2fn,
}

#: (type, first version) for the quantized types, from the operator documentation.
NEW_TYPES = [
    ("float8e4m3fn", 19), ("float8e4m3fnuz", 19), ("float8e5m2", 19), ("float8e5m2fnuz", 19),
    ("int4", 21), ("uint4", 21), ("int16", 21), ("uint16", 21),
    ("float4e2m1", 23),
    ("int2", 25), ("uint2", 25),
    ("float6e2m3", 28), ("float6e3m2", 28),
]


def _previous(version: int) -> int:
    return VERSIONS[VERSIONS.index(version) - 1]


def _zeros(type_name, shape=()):
    return np.zeros(shape, np.float32).astype(_DT[type_name])


def _schema_types(op, version, index):
    schema = onnx.defs.get_schema(op, version)
    ts = schema.inputs[index].type_str
    for tc in schema.type_constraints:
        if tc.type_param_str == ts:
            return {t[7:-1] for t in tc.allowed_type_strs}
    return {ts[7:-1]}


@pytest.mark.parametrize("op", [Q, DQ])
@pytest.mark.parametrize("type_name,first", NEW_TYPES)
def test_type_table_matches_the_spec(op, type_name, first):
    index = 2 if op == Q else 0  # the zero point / quantized input carries the type
    assert type_name in _schema_types(op, first, index)
    assert type_name not in _schema_types(op, _previous(first), index)


def assert_refused(call, *words):
    with pytest.raises(qcore.QuantizationError) as info:
        call()
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} not in message: {message}"
    return message


def _quantize_to(type_name, version):
    return lambda: qcore.quantize_linear(X, np.float32(0.1), _zeros(type_name), opset=version)


def _dequantize_from(type_name, version):
    return lambda: qcore.dequantize_linear(_zeros(type_name, (4, 6)), np.float32(0.1),
                                           opset=version)


@pytest.mark.parametrize("type_name,first", NEW_TYPES, ids=[t for t, _ in NEW_TYPES])
def test_quantized_type_gated(type_name, first):
    before = _previous(first)
    for version in (before, first - 1):  # the version before, and the opset just before
        label = f"{Q}-{before}"
        assert_refused(_quantize_to(type_name, version), label, "y_zero_point", type_name,
                       f"{Q}-{first}")
        assert_refused(_dequantize_from(type_name, version), f"{DQ}-{before}", "x", type_name,
                       f"{DQ}-{first}")
    _quantize_to(type_name, first)()  # accepted from the first version on
    _dequantize_from(type_name, first)()


# (description, call at a given opset, first version, words the refusal names)
def _features():
    f32 = np.float32(0.5)
    per_axis = np.full(6, 0.5, np.float32)
    blocked = np.full((4, 3), 0.5, np.float32)
    e8m0 = np.array(0.5, np.float32).astype(ml_dtypes.float8_e8m0fnu)
    x16 = X.astype(np.float16)
    q8 = np.arange(24, dtype=np.int8).reshape(4, 6)
    return [
        ("Q axis attribute", lambda v: qcore.quantize_linear(X, f32, axis=0, opset=v), Q, 13,
         ["axis"]),
        ("Q per-axis scale", lambda v: qcore.quantize_linear(X, per_axis, axis=1, opset=v), Q, 13,
         ["y_scale", "per-axis"]),
        ("DQ axis attribute", lambda v: qcore.dequantize_linear(q8, f32, axis=0, opset=v), DQ, 13,
         ["axis"]),
        ("DQ per-axis scale", lambda v: qcore.dequantize_linear(q8, per_axis, opset=v), DQ, 13,
         ["x_scale", "per-axis"]),
        ("saturate", lambda v: qcore.quantize_linear(X, f32, saturate=False, opset=v), Q, 19,
         ["saturate"]),
        ("float16 x", lambda v: qcore.quantize_linear(x16, np.float16(0.5), opset=v), Q, 19,
         ["x", "float16"]),
        ("bfloat16 x", lambda v: qcore.quantize_linear(
            X.astype(ml_dtypes.bfloat16), np.array(0.5, ml_dtypes.bfloat16), opset=v), Q, 19,
         ["x", "bfloat16"]),
        ("DQ float16 scale", lambda v: qcore.dequantize_linear(q8, np.float16(0.5), opset=v), DQ,
         19, ["x_scale", "float16"]),
        ("Q block_size", lambda v: qcore.quantize_linear(X, blocked, block_size=2, opset=v), Q,
         21, ["block_size"]),
        ("DQ block_size", lambda v: qcore.dequantize_linear(q8, blocked, block_size=2, opset=v),
         DQ, 21, ["block_size"]),
        ("Q output_dtype", lambda v: qcore.quantize_linear(X, f32, output_dtype="int8", opset=v),
         Q, 21, ["output_dtype"]),
        ("precision", lambda v: qcore.quantize_linear(X, f32, precision="float16", opset=v), Q,
         23, ["precision"]),
        ("mixed x/scale types", lambda v: qcore.quantize_linear(X, np.float16(0.5), opset=v), Q,
         23, ["y_scale", "float16"]),
        ("mixed x/scale types (float16 x)", lambda v: qcore.quantize_linear(x16, f32, opset=v),
         Q, 23, ["y_scale"]),
        ("DQ output_dtype", lambda v: qcore.dequantize_linear(q8, f32, output_dtype="float16",
                                                              opset=v), DQ, 23, ["output_dtype"]),
        ("Q float8e8m0 scale", lambda v: qcore.quantize_linear(X, e8m0, opset=v), Q, 24,
         ["y_scale", "float8e8m0"]),
        ("DQ float8e8m0 scale", lambda v: qcore.dequantize_linear(q8, e8m0, opset=v), DQ, 24,
         ["x_scale", "float8e8m0"]),
    ]


FEATURES = _features()


@pytest.mark.parametrize("feature", FEATURES, ids=[f[0] for f in FEATURES])
def test_feature_gated(feature):
    _, call, op, first, words = feature
    before = _previous(first)
    for opset in sorted({before, first - 1}):
        message = assert_refused(lambda opset=opset: call(opset), f"{op}-{before}", *words)
        assert f"{op}-{first}" in message, message  # where it becomes available
    call(first)  # accepted at the first version that has it
    call(28)


@pytest.mark.parametrize("feature", FEATURES, ids=[f[0] for f in FEATURES])
def test_feature_table_matches_the_spec(feature):
    name, _, op, first, _ = feature
    before = _previous(first)
    attrs = {"axis": 13, "saturate": 19, "block_size": 21, "output_dtype": 21 if op == Q else 23,
             "precision": 23}
    for attr, since in attrs.items():
        if attr in name:
            assert since == first
            assert attr in onnx.defs.get_schema(op, first).attributes
            assert attr not in onnx.defs.get_schema(op, before).attributes
    if "float8e8m0" in name:
        assert "float8e8m0" in _schema_types(op, first, 1)
        assert "float8e8m0" not in _schema_types(op, before, 1)
    if "mixed" in name:  # from 23 y_scale has its own type constraint (T2), not x's (T1)
        schema, older = onnx.defs.get_schema(op, first), onnx.defs.get_schema(op, before)
        assert schema.inputs[1].type_str != schema.inputs[0].type_str
        assert older.inputs[1].type_str == older.inputs[0].type_str


# ----------------------------------------------------------------------------------------------
# Opset resolution


@pytest.mark.parametrize("op", [Q, DQ, DYN])
@pytest.mark.parametrize("opset", range(10, 29))
def test_opset_resolves_like_onnx(op, opset):
    if op == DYN and opset < 11:
        assert_refused(lambda: qcore.resolve(op, opset), op, "opset 10", "11")
        return
    expected = onnx.defs.get_schema(op, opset).since_version
    assert qcore.resolve(op, opset).version == expected


def test_opset_22_is_version_21():
    plan = qcore.plan_quantize(np.float32, (4, 6), np.float32, (), opset=22)
    assert plan.version.label == f"{Q}-21"
    assert qcore.plan_dequantize(np.int8, (4, 6), np.float32, (), opset=22).version.label == \
        f"{DQ}-21"
    # behaviour follows: float4 (from 23) is refused at opset 22 as QuantizeLinear-21
    assert_refused(_quantize_to("float4e2m1", 22), f"{Q}-21", f"{Q}-23")
    _quantize_to("int4", 22)()  # and what 21 has is accepted


@pytest.mark.parametrize("op,call", [
    (Q, lambda opset: qcore.quantize_linear(X, np.float32(1), opset=opset)),
    (DQ, lambda opset: qcore.dequantize_linear(np.zeros(3, np.int8), np.float32(1), opset=opset)),
    (DYN, lambda opset: qcore.dynamic_quantize_linear(X, opset=opset)),
], ids=[Q, DQ, DYN])
def test_opsets_outside_the_range_are_refused(op, call):
    first = 11 if op == DYN else 10
    assert_refused(lambda: call(first - 1), op, f"opset {first - 1}", str(first))
    assert_refused(lambda: call(9), "9")
    msg = assert_refused(lambda: call(29), "29")
    assert "28" in msg  # names the newest opset that is valid
    call(first)
    call(28)


@pytest.mark.parametrize("opset", ["nineteen", 19.5, None])
def test_opset_must_be_an_integer(opset):
    assert_refused(lambda: qcore.quantize_linear(X, np.float32(1), opset=opset), "opset")
