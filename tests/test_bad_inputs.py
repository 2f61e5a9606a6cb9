"""A corpus of bad and edge inputs against the three operators, plan_* and every loader.

Each case either raises QuantizationError / TensorFileError whose message names the argument
at fault, or returns a result equal bit for bit to the onnx reference evaluator (or to the
the decision documented in docs/semantics.md, computed here from the spec, not from qcore). Nothing else: no
other exception type, no silent result.
"""

from __future__ import annotations

import io
import json
import os
import struct
import zipfile
import zlib
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from conftest import assert_bits_equal, reference

import qcore
from qcore.io import TensorFile, TensorFileError, list_tensors, load_all, load_tensor

X = np.array([[0.5, -1.25, 3.0, 100.0], [-0.0, 2.5, -7.5, 1e-3]], np.float32)
F32 = np.float32
E4 = ml_dtypes.float8_e4m3fn
Q = qcore.quantize_linear
DQ = qcore.dequantize_linear


class Err:
    """Expect a QuantizationError (TensorFileError for files) naming these words."""

    def __init__(self, *words: str, file: bool = False):
        self.words, self.file = words, file


class Ref:
    """Expect the onnx reference's output for (op, opset, inputs, attributes)."""

    def __init__(self, op, opset, *inputs, **attrs):
        self.op, self.opset, self.inputs, self.attrs = op, opset, inputs, attrs


class Value:
    """Expect this exact array (a decision in docs/semantics.md, or a value from the spec)."""

    def __init__(self, value):
        self.value = np.asarray(value)


def _q(*a, **k):
    return lambda: Q(*a, **k)


def _dq(*a, **k):
    return lambda: DQ(*a, **k)


def _dyn(*a, **k):
    return lambda: qcore.dynamic_quantize_linear(*a, **k)


def _pq(*a, **k):
    return lambda: qcore.plan_quantize(*a, **k)


def _pdq(*a, **k):
    return lambda: qcore.plan_dequantize(*a, **k)


OPERATOR_CASES = [
    # opset
    ("opset-inf", _q(X, 0.1, opset=float("inf")), Err("opset")),
    ("opset-nan", _q(X, 0.1, opset=float("nan")), Err("opset")),
    ("opset-float", _q(X, 0.1, opset=19.0), Err("opset")),
    ("opset-half", _q(X, 0.1, opset=19.5), Err("opset")),
    ("opset-bool", _q(X, 0.1, opset=True), Err("opset")),
    ("opset-str", _q(X, 0.1, opset="19"), Err("opset")),
    ("opset-none", _q(X, 0.1, opset=None), Err("opset")),
    ("opset-huge", _q(X, 0.1, opset=10**30), Err("opset")),
    ("opset-negative", _q(X, 0.1, opset=-1), Err("opset")),
    ("opset-9", _dq(np.int8([1]), F32(1), opset=9), Err("opset")),
    ("opset-np-int", _q(X, F32(0.5), np.uint8(3), opset=np.int64(13)),
     Ref("QuantizeLinear", 13, X, F32(0.5), np.uint8(3))),
    ("dyn-opset-str", _dyn(X, opset="x"), Err("opset")),
    # saturate
    ("saturate-str-false", _q(X, F32(1), np.array(0, E4), saturate="false"), Err("saturate")),
    ("saturate-none", _q(X, F32(1), np.array(0, E4), saturate=None), Err("saturate")),
    ("saturate-2", _q(X, F32(1), np.array(0, E4), saturate=2), Err("saturate")),
    ("saturate-float", _q(X, F32(1), np.array(0, E4), saturate=0.5), Err("saturate")),
    ("saturate-list", _q(X, F32(1), np.array(0, E4), saturate=[1]), Err("saturate")),
    ("saturate-array", _q(X, F32(1), np.array(0, E4), saturate=np.array([True])),
     Err("saturate")),
    ("saturate-0", _q(X * 100, F32(1), np.array(0, E4), saturate=0),
     Ref("QuantizeLinear", 21, X * 100, F32(1), np.array(0, E4), saturate=0)),
    ("saturate-np-false", _q(X * 100, F32(1), np.array(0, E4), saturate=np.False_),
     Ref("QuantizeLinear", 21, X * 100, F32(1), np.array(0, E4), saturate=0)),
    ("saturate-np-int1", _q(X * 100, F32(1), np.array(0, E4), saturate=np.int64(1)),
     Ref("QuantizeLinear", 21, X * 100, F32(1), np.array(0, E4), saturate=1)),
    ("saturate-at-13", _q(X, F32(1), np.uint8(0), saturate=False, opset=13),
     Err("saturate", "QuantizeLinear-13")),
    # block_size and axis
    ("block-1e30", _q(X, np.ones((2, 1), F32), block_size=10**30), Err("block_size")),
    ("dq-block-1e30", _dq(np.int8(X), np.ones((2, 1), F32), block_size=10**30),
     Err("block_size")),
    ("block-negative", _q(X, np.ones((2, 1), F32), block_size=-4), Err("block_size")),
    ("block-float", _q(X, np.ones((2, 1), F32), block_size=4.0), Err("block_size")),
    ("block-str", _q(X, np.ones((2, 1), F32), block_size="4"), Err("block_size")),
    ("block-too-small", _q(X, np.ones((2, 1), F32), block_size=2), Err("block_size")),
    ("block-at-19", _q(X, np.ones((2, 2), F32), block_size=2, opset=19), Err("block_size")),
    ("block-4-one-block", _q(X, np.full((2, 1), 0.5, F32), np.zeros((2, 1), np.int8),
                             block_size=4),
     Ref("QuantizeLinear", 21, X, np.full((2, 1), 0.5, F32), np.zeros((2, 1), np.int8),
         block_size=4)),
    ("axis-huge", _q(X, np.ones(4, F32), axis=10**30), Err("axis")),
    ("axis-float", _q(X, np.ones(4, F32), axis=1.0), Err("axis")),
    ("axis-none", _q(X, np.ones(4, F32), axis=None), Err("axis")),
    ("axis-out-of-range", _q(X, np.ones(4, F32), axis=2), Err("axis")),
    ("axis-negative-ok", _q(X, np.full(4, 0.5, F32), np.zeros(4, np.int8), axis=-1),
     Ref("QuantizeLinear", 21, X, np.full(4, 0.5, F32), np.zeros(4, np.int8), axis=-1)),
    ("axis-at-10", _q(X, F32(1), np.uint8(0), axis=0, opset=10), Err("axis", "QuantizeLinear-10")),
    # scales
    ("scale-zero", _q(X, F32(0)), Err("y_scale")),
    ("scale-negative", _q(X, F32(-1)), Err("y_scale")),
    ("scale-nan", _q(X, F32(np.nan)), Err("y_scale")),
    ("scale-inf", _q(X, F32(np.inf)), Err("y_scale")),
    ("scale-f16-underflow", _q(X, F32(1e-9), precision="float16"), Err("y_scale")),
    ("scale-empty", _q(X, np.ones(0, F32)), Err("y_scale")),
    ("scale-none", _q(X, None), Err("y_scale")),  # no remembered-call key: refused as given
    ("scale-string", _q(X, "0.1"), Err("y_scale")),
    ("scale-object", _q(X, object()), Err("y_scale")),
    ("scale-ragged", _q(X, [[1.0], [1.0, 2.0]]), Err("y_scale")),
    ("scale-float64", _q(X, np.float64(0.5)), Err("y_scale", "float64")),
    ("scale-wrong-length", _q(X, np.ones(3, F32)), Err("y_scale")),
    ("scale-rank3", _q(X, np.ones((1, 2, 4), F32)), Err("y_scale")),
    ("dq-scale-zero", _dq(np.int8([1, 2]), F32(0)), Err("x_scale")),
    ("dq-scale-nan", _dq(np.int8([1, 2]), F32(np.nan)), Err("x_scale")),
    # x
    ("x-string", _q("abc", F32(1)), Err("x")),
    ("x-object", _q(np.array([object()]), F32(1)), Err("x")),
    ("x-float64", _q(np.float64([1.0]), F32(1)), Err("x", "float64")),
    ("x-complex", _q(np.complex64([1j]), F32(1)), Err("x")),
    ("x-bool", _q(np.array([True]), F32(1)), Err("x")),
    ("x-ragged", _q([[1.0], [1.0, 2.0]], F32(1)), Err("x")),
    ("x-structured", _q(np.zeros(2, [("a", "f4")]), F32(1)), Err("x")),
    ("x-int8-at-q", _q(np.int8([1]), F32(1)), Err("x")),
    ("x-bigendian", _q(X.astype(">f4"), F32(0.5), np.int8(0)),
     Ref("QuantizeLinear", 21, X, F32(0.5), np.int8(0))),
    ("x-empty", _q(np.zeros((0, 3), F32), F32(1), np.int8(0)), Value(np.zeros((0, 3), np.int8))),
    ("x-scalar", _q(np.float32(2.5), F32(1), np.int8(0)), Value(np.int8(2))),
    ("x-noncontiguous", _q(X[:, ::2], F32(0.5), np.int8(0)),
     Ref("QuantizeLinear", 21, np.ascontiguousarray(X[:, ::2]), F32(0.5), np.int8(0))),
    ("dq-x-float", _dq(np.float32([1]), F32(1)), Err("x")),
    ("dq-x-string", _dq("1", F32(1)), Err("x")),
    # zero points
    ("zp-shape", _q(X, np.ones(4, F32), np.zeros(3, np.int8)), Err("y_zero_point")),
    ("zp-type-vs-output", _q(X, F32(1), np.int8(0), output_dtype="uint8"),
     Err("output_dtype", "y_zero_point")),
    ("zp-python-out-of-range", _q(X, 0.5, 300), Err("y_zero_point")),
    ("zp-python-negative-uint8", _q(X, 0.5, -1), Err("y_zero_point")),
    ("zp-float-type", _q(X, F32(1), np.float32(0)), Err("y_zero_point")),
    ("zp-float64", _q(X, F32(1), np.float64(0)), Err("y_zero_point")),
    ("dq-zp-type", _dq(np.int8([1]), F32(1), np.uint8(0)), Err("x_zero_point")),
    ("dq-zp-shape", _dq(np.int8([[1, 2]]), np.ones(2, F32), np.zeros(3, np.int8)),
     Err("x_zero_point")),
    ("f8-zp-one-ignored", _q(np.float32([-0.0, 0.0, 1.0]), F32(1), np.array(1.0, E4)),
     Ref("QuantizeLinear", 21, np.float32([-0.0, 0.0, 1.0]), F32(1), np.array(1.0, E4))),
    ("f8-zp-zero-keeps-minus-zero", _q(np.float32([-0.0, 0.0]), F32(1), np.array(0.0, E4)),
     Ref("QuantizeLinear", 21, np.float32([-0.0, 0.0]), F32(1), np.array(0.0, E4))),
    ("f8-zp-nan-ignored", _q(np.float32([1.0]), F32(1), np.array(np.nan, E4)),
     Ref("QuantizeLinear", 21, np.float32([1.0]), F32(1), np.array(np.nan, E4))),
    ("dq-f8-zp-nonzero", _dq(np.array([1.0, 2.0], E4), F32(1), np.array(1.0, E4)),
     Err("x_zero_point", "zero")),
    ("dq-f8-zp-half", _dq(np.array([1.0], E4), F32(1), np.array(0.5, E4)),
     Err("x_zero_point")),
    ("dq-f8-zp-zero", _dq(np.array([1.0, -0.0], E4), F32(1), np.array(0.0, E4)),
     Ref("DequantizeLinear", 21, np.array([1.0, -0.0], E4), F32(1), np.array(0.0, E4))),
    # types and attributes by version
    ("output-dtype-unknown", _q(X, F32(1), output_dtype="int3"), Err("output_dtype")),
    ("output-dtype-array", _q(X, F32(1), output_dtype=np.array([1, 2])), Err("output_dtype")),
    ("output-dtype-float", _q(X, F32(1), output_dtype="float"), Err("output")),
    ("output-dtype-at-19", _q(X, F32(1), output_dtype="int8", opset=19), Err("output_dtype")),
    ("precision-int8", _q(X, F32(1), precision="int8", opset=23), Err("precision")),
    ("precision-at-21", _q(X, F32(1), precision="float16", opset=21), Err("precision")),
    ("int4-at-19", _q(X, F32(1), np.zeros((), ml_dtypes.int4), opset=19), Err("int4")),
    ("float4-at-21", _q(X, F32(1), output_dtype="float4e2m1", opset=21), Err("float4e2m1")),
    ("backend-bad", _q(X, F32(1), backend="tpu"), Err("backend")),
    ("dq-output-int8", _dq(np.int8([1]), F32(1), output_dtype="int8"), Err("output_dtype")),
    # documented decisions (docs/semantics.md), computed from the spec
    ("int-overflow-saturates", _q(np.float32([1e10, -np.inf]), F32(1), np.int8(0)),
     Value(np.int8([127, -128]))),
    ("nan-int8-negative-zp-minimum", _q(np.float32([np.nan]), F32(1), np.int8(-1)),
     Value(np.int8([-128]))),
    # dynamic
    ("dyn-nan", _dyn(np.float32([np.nan, 1.0])), Err("x", "NaN")),
    ("dyn-inf", _dyn(np.float32([np.inf, 1.0])), Err("x", "NaN/Inf")),
    ("dyn-range-overflow", _dyn(np.float32([-3e38, 3e38, 0])), Err("x's range", "overflows")),
    ("dyn-range-underflow", _dyn(np.float32([0, 1e-45])), Err("x's range", "underflows")),
    ("dyn-float16", _dyn(np.float16([1.0])), Err("x", "float16")),
    ("dyn-float64", _dyn(np.float64([1.0])), Err("x", "float64")),
    ("dyn-string", _dyn("1,2"), Err("x")),
    ("dyn-ok", _dyn(np.float32([-1.0, 0.0, 2.0])),
     Ref("DynamicQuantizeLinear", 11, np.float32([-1.0, 0.0, 2.0]))),
]

PLAN_CASES = [
    ("plan-product-overflow", _pq(np.float32, (2**32, 2**32), np.float32, ()), Err("x")),
    ("plan-product-overflow-axis", _pq(np.float32, (2**32, 2**32), np.float32, (2**32,),
                                       axis=0), Err("x")),
    ("plan-scale-overflow", _pq(np.float32, (4,), np.float32, (2**40, 2**40)), Err("y_scale")),
    ("plan-negative-dim", _pq(np.float32, (-1, 4), np.float32, ()), Err("x")),
    ("plan-float-dim", _pq(np.float32, (2.5,), np.float32, ()), Err("x")),
    ("plan-bool-dim", _pq(np.float32, (True,), np.float32, ()), Err("x")),
    ("plan-shape-int", _pq(np.float32, 4, np.float32, ()), Err("x")),
    ("plan-zp-shape-negative", _pq(np.float32, (4,), np.float32, (), np.int8, (-1,)),
     Err("y_zero_point")),
    ("plan-block-1e30", _pq(np.float32, (2, 4), np.float32, (2, 1), block_size=10**30),
     Err("block_size")),
    ("plan-saturate-str", _pq(np.float32, (4,), np.float32, (), saturate="no"), Err("saturate")),
    ("plan-opset-inf", _pq(np.float32, (4,), np.float32, (), opset=float("inf")), Err("opset")),
    ("plan-dtype-unknown", _pq("complex", (4,), np.float32, ()), Err("x")),
    ("plan-dq-product-overflow", _pdq(np.int8, (2**62, 4), np.float32, ()), Err("x")),
    ("plan-dq-negative", _pdq(np.int8, (4, -2), np.float32, ()), Err("x")),
    ("plan-dq-block-1e30", _pdq(np.int8, (2, 4), np.float32, (2, 1), block_size=10**30),
     Err("block_size")),
    ("plan-dq-scale-float-dim", _pdq(np.int8, (4,), np.float32, (1.5,)), Err("x_scale")),
    ("plan-big-ok", lambda: qcore.plan_quantize(np.float32, (2**31, 2**31), np.float32, ()
                                                ).layout.dim,
     Value(np.int64(2**62))),
]


# --------------------------------------------------------------------------- files


def _npy(array, *, shape_text=None) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    data = buf.getvalue()
    if shape_text is not None:
        old = repr(tuple(array.shape)).encode()
        head_len = struct.unpack("<H", data[8:10])[0]
        header = data[10:10 + head_len].replace(b"'shape': " + old, b"'shape': " + shape_text)
        header = header.rstrip(b"\n").rstrip(b" ")
        pad = (64 - (10 + len(header) + 1) % 64) % 64
        header = header + b" " * pad + b"\n"
        data = data[:8] + struct.pack("<H", len(header)) + header + data[10 + head_len:]
    return data


def _pickled_npy() -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.array([1, "a"], object), allow_pickle=True)
    return buf.getvalue()


def _npz(members: dict[str, bytes], compress=zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compress) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def _bomb_member(inflated: int) -> bytes:
    """A .npy header promising 4 float32 values, followed by `inflated` zero bytes."""
    return _npy(np.zeros(4, np.float32)) + bytes(inflated)


def _safetensors(header, body: bytes = b"") -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + body


def _onnx(dims, values) -> bytes:
    from onnx import TensorProto, helper

    t = TensorProto(name="w", data_type=TensorProto.FLOAT)
    t.dims.extend(dims)
    t.float_data.extend(values)
    graph = helper.make_graph([], "g", [], [], initializer=[t])
    return helper.make_model(graph).SerializeToString()


def _file(data: bytes, filename: str, **kw):
    return lambda: load_tensor(data, filename=filename, **kw)


def _list(data: bytes, filename: str, **kw):
    return lambda: list_tensors(data, filename=filename, **kw)


GOOD = np.arange(6, dtype=np.float32).reshape(2, 3)
ST_GOOD = {"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}}

FILE_CASES = [
    # .npy
    ("npy-negative-shape", _file(_npy(np.zeros(4, F32), shape_text=b"(-1,)"), "a.npy"),
     Err("negative", file=True)),
    ("npy-negative-shape-list", _list(_npy(np.zeros(4, F32), shape_text=b"(-1,)"), "a.npy"),
     Err("negative", file=True)),
    ("npy-negative-2d", _file(_npy(np.zeros((2, 2), F32), shape_text=b"(-2, -2)"), "a.npy"),
     Err("negative", file=True)),
    ("npy-huge-shape", _file(_npy(np.zeros(4, F32), shape_text=b"(10000000000000,)"), "a.npy"),
     Err("truncated", file=True)),
    ("npy-truncated", _file(_npy(GOOD)[:-5], "a.npy"), Err("truncated", file=True)),
    ("npy-pickle", _file(b"\x80\x04K\x01.", "a.npy"), Err("pickle", file=True)),
    ("npy-object", _file(_pickled_npy(), "a.npy"), Err("object", file=True)),
    ("npy-bad-header", _file(b"\x93NUMPY\x01\x00\x10\x00{'descr': 'zzz'}\n", "a.npy"),
     Err("header", file=True)),
    ("npy-version-9", _file(b"\x93NUMPY\x09\x00" + b"\x00" * 20, "a.npy"),
     Err("a.npy", file=True)),
    ("npy-empty", _file(_npy(np.zeros((0, 3), F32)), "a.npy"), Err("no elements", file=True)),
    ("npy-max-elements", _file(_npy(GOOD), "a.npy", max_elements=5),
     Err("max_elements", file=True)),
    ("npy-max-bytes-small", _file(_npy(GOOD), "a.npy", max_bytes=100),
     Err("bytes, over the limit of 100 bytes", file=True)),
    ("npy-max-bytes-kib", _file(_npy(np.zeros(1000, F32)), "a.npy", max_bytes=1024),
     Err("4.0 KiB, over the limit of 1.0 KiB", file=True)),
    ("npy-ok", _file(_npy(GOOD), "a.npy"), Value(GOOD)),
    ("npy-bigendian-ok", _file(_npy(GOOD.astype(">f4")), "a.npy"), Value(GOOD)),
    # .npz
    ("npz-bomb", _file(_npz({"a.npy": _bomb_member(64 * 2**20)}), "a.npz", max_bytes=2**20),
     Err("decompress", file=True)),
    ("npz-bomb-lying-size", lambda: _lying_npz_bomb(), Err("corrupt", file=True)),
    ("npz-bomb-honest-size", _file(_npz({"a.npy": _bomb_member(32 * 2**20)}), "a.npz"),
     Value(np.zeros(4, np.float32))),
    ("npz-not-npy-member", _file(_npz({"a.txt": b"hello"}), "a.npz"),
     Err("not a .npy", file=True)),
    ("npz-corrupt", _file(b"PK\x03\x04" + b"\x00" * 40, "a.npz"), Err("zip", file=True)),
    ("npz-member-negative", _file(_npz({"a.npy": _npy(np.zeros(4, F32),
                                                       shape_text=b"(-1,)")}), "a.npz"),
     Err("negative", file=True)),
    ("npz-two-no-name", _file(_npz({"a.npy": _npy(GOOD), "b.npy": _npy(GOOD)}), "a.npz"),
     Err("name=", file=True)),
    ("npz-wrong-name", lambda: load_tensor(_npz({"a.npy": _npy(GOOD)}), "zz",
                                           filename="a.npz"), Err("zz", file=True)),
    ("npz-max-elements", _file(_npz({"a.npy": _npy(np.zeros(100, F32))}), "a.npz",
                               max_elements=10), Err("max_elements", file=True)),
    ("npz-ok", _file(_npz({"a.npy": _npy(GOOD)}), "a.npz"), Value(GOOD)),
    # .safetensors
    ("st-deep-nesting", _file(_safetensors(b"[" * 100_000), "a.safetensors"),
     Err("header", file=True)),
    ("st-deep-nesting-dict", _file(_safetensors(b'{"a":' * 50_000), "a.safetensors"),
     Err("header", file=True)),
    ("st-huge-int", _file(_safetensors(b'{"w": {"dtype": "F32", "shape": [' + b"9" * 5000
                                       + b'], "data_offsets": [0, 4]}}'), "a.safetensors"),
     Err("header", file=True)),
    ("st-big-int-shape", _file(_safetensors({"w": {"dtype": "F32", "shape": [2**70],
                                                   "data_offsets": [0, 4]}}, b"\0" * 4),
                               "a.safetensors"), Err("data_offsets", file=True)),
    ("st-negative-shape", _file(_safetensors({"w": {"dtype": "F32", "shape": [-1],
                                                    "data_offsets": [0, 4]}}, b"\0" * 4),
                                "a.safetensors"), Err("shape", file=True)),
    ("st-float-shape", _file(_safetensors({"w": {"dtype": "F32", "shape": [1.5],
                                                 "data_offsets": [0, 4]}}, b"\0" * 4),
                             "a.safetensors"), Err("shape", file=True)),
    ("st-bool-shape", _file(_safetensors({"w": {"dtype": "F32", "shape": [True],
                                                "data_offsets": [0, 4]}}, b"\0" * 4),
                            "a.safetensors"), Err("shape", file=True)),
    ("st-header-too-long", _file(struct.pack("<Q", 2**40) + b"{}", "a.safetensors"),
     Err("header", file=True)),
    ("st-header-array", _file(_safetensors([1, 2]), "a.safetensors"),
     Err("JSON object", file=True)),
    ("st-bad-utf8", _file(_safetensors(b"\xff\xfe{}"), "a.safetensors"),
     Err("corrupt", file=True)),
    ("st-dtype-unknown", _file(_safetensors({"w": {"dtype": "C64", "shape": [1],
                                                   "data_offsets": [0, 8]}}, b"\0" * 8),
                               "a.safetensors"), Err("dtype", file=True)),
    ("st-offsets-past-end", _file(_safetensors(ST_GOOD, b"\0" * 8), "a.safetensors"),
     Err("truncated", file=True)),
    ("st-offsets-reversed", _file(_safetensors({"w": {"dtype": "F32", "shape": [1],
                                                      "data_offsets": [4, 0]}}, b"\0" * 4),
                                  "a.safetensors"), Err("data_offsets", file=True)),
    ("st-entry-not-dict", _file(_safetensors({"w": 5}), "a.safetensors"),
     Err("dtype, shape and data_offsets", file=True)),
    ("st-too-short", _file(b"\x01\x02", "a.safetensors"), Err("truncated", file=True)),
    ("st-ok", _file(_safetensors(ST_GOOD, GOOD.tobytes()), "a.safetensors"), Value(GOOD)),
    # .onnx
    ("onnx-negative-dims", _file(_onnx([-1], [1.0, 2.0, 3.0, 4.0]), "m.onnx"),
     Err("negative", file=True)),
    ("onnx-negative-dims-list", _list(_onnx([-1], [1.0, 2.0, 3.0, 4.0]), "m.onnx"),
     Err("negative", file=True)),
    ("onnx-dims-mismatch", _file(_onnx([3], [1.0, 2.0, 3.0, 4.0]), "m.onnx"),
     Err("decoded", file=True)),
    ("onnx-huge-dims", _file(_onnx([2**40], [1.0]), "m.onnx"), Err("m.onnx", file=True)),
    ("onnx-garbage", _file(b"\x08\x01\x12\xff\xff\xff", "m.onnx"), Err("ONNX", file=True)),
    ("onnx-no-graph", _file(b"\x08\x07", "m.onnx"), Err("graph", file=True)),
    ("onnx-ok", _file(_onnx([2, 3], GOOD.reshape(-1).tolist()), "m.onnx"), Value(GOOD)),
    # .csv
    ("csv-ragged-short", _file(b"1,2,3\n4,5\n", "a.csv"), Err("line 2", file=True)),
    ("csv-ragged-long", _file(b"1,2\n3,4,5\n", "a.csv"), Err("line 2", file=True)),
    ("csv-empty-cell", _file(b"1,,3\n", "a.csv"), Err("empty cell", file=True)),
    ("csv-text-cell", _file(b"a,b\n1,x\n", "a.csv"), Err("'x' is not a number", file=True)),
    ("csv-only-header", _file(b"a,b\n", "a.csv"), Err("header", file=True)),
    ("csv-only-comments", _file(b"# x\n\n", "a.csv"), Err("no numbers", file=True)),
    ("csv-binary", _file(bytes(range(128, 256)), "a.csv"), Err("UTF-8", file=True)),
    ("csv-null-bytes", _file(b"1,2\x00,3\n", "a.csv"), Err("a.csv", file=True)),
    ("csv-max-elements", _file(b"1,2,3\n" * 10, "a.csv", max_elements=29),
     Err("30 values", file=True)),
    ("csv-max-elements-wide", _file(b",".join([b"1"] * 5000), "a.csv", max_elements=4999),
     Err("max_elements", file=True)),
    ("csv-wide-ragged", _file(b",".join([b"1"] * 5000) + b"\n" + b",".join([b"1"] * 4999),
                              "a.csv"), Err("line 2", file=True)),
    ("csv-wide-bad-cell", _file(b",".join([b"1"] * 4999 + [b"x"]), "a.csv"),
     Err("a.csv", file=True)),
    ("csv-wide-empty-cell", _file(b",".join([b"1"] * 4999 + [b""]), "a.csv"),
     Err("a.csv", file=True)),
    ("csv-cr-only", _file(b"1,2\r3,4\r", "a.csv"), Value(np.float32([[1, 2], [3, 4]]))),
    ("csv-crlf", _file(b"1;2\r\n3;4\r\n", "a.csv"), Value(np.float32([[1, 2], [3, 4]]))),
    ("csv-specials", _file(b"nan,inf\n-inf,-0\n", "a.csv"),
     Value(np.float32([[np.nan, np.inf], [-np.inf, -0.0]]))),
    ("csv-wide-ok", _file(b",".join(str(i).encode() for i in range(5000)), "a.csv"),
     Value(np.arange(5000, dtype=np.float32))),
    ("csv-wide-2rows-ok", _file(b" ".join([b"1"] * 5000) + b"\n" + b" ".join([b"2"] * 5000),
                                "a.csv"),
     Value(np.stack([np.ones(5000, F32), np.full(5000, 2, F32)]))),
    # sources and paths
    ("path-null-byte", lambda: load_tensor("a\x00b.npy"), Err("null byte", file=True)),
    ("path-missing", lambda: load_tensor("/nonexistent/dir/x.npy"), Err("no such file",
                                                                        file=True)),
    ("path-long-name", lambda: load_tensor("/tmp/" + "n" * 300 + ".npy"),
     Err("too long", file=True)),
    ("path-dir", lambda: load_tensor("/tmp"), Err("not a regular file", file=True)),
    ("source-int", lambda: load_tensor(12345), Err("int", file=True)),
    ("source-none", lambda: load_tensor(None), Err("NoneType", file=True)),
    ("bytes-no-filename", lambda: load_tensor(b"1,2,3"), Err("filename=", file=True)),
    ("bytes-unknown-ext", _file(b"abc", "a.txt"), Err(".txt", file=True)),
    ("bytes-empty", _file(b"", "a.npy"), Err("empty", file=True)),
    ("text-file-object", lambda: load_tensor(io.StringIO("1,2,3")), Err("binary", file=True)),
    ("load-all-corrupt", lambda: load_all(_npy(GOOD)[:-5], filename="a.npy"),
     Err("truncated", file=True)),
    ("tensorfile-list-then-load", lambda: TensorFile(b"1,2\n3,4\n", filename="a.csv").load(),
     Value(np.float32([[1, 2], [3, 4]]))),
]


def _lying_npz_bomb():
    """A member whose zip header claims 100 bytes but which inflates to 256 MiB of zeros: zipfile
    never inflates past the declared size, so it ends after 100 bytes, fails its CRC and is
    refused as corrupt (without inflating the rest)."""
    payload = _bomb_member(256 * 2**20)
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    raw = comp.compress(payload) + comp.flush()
    del payload
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("a.npy", b"x" * 100)
    data = bytearray(buf.getvalue())
    # replace the member's compressed stream with the bomb, keeping the declared sizes
    name_len = struct.unpack("<H", data[26:28])[0]
    extra_len = struct.unpack("<H", data[28:30])[0]
    start = 30 + name_len + extra_len
    old_size = struct.unpack("<I", data[18:22])[0]
    central = bytes(data[start + old_size:])
    new = bytes(data[:start]) + raw
    new = bytearray(new)
    new[18:22] = struct.pack("<I", len(raw))
    cd_offset = len(new)
    central = bytearray(central)
    central[20:24] = struct.pack("<I", len(raw))  # compressed size in the central directory
    eocd = central.rfind(b"PK\x05\x06")
    central[eocd + 16:eocd + 20] = struct.pack("<I", cd_offset)
    return load_tensor(bytes(new) + bytes(central), filename="a.npz")


CASES = OPERATOR_CASES + PLAN_CASES + FILE_CASES


def test_corpus_size():
    assert len(CASES) >= 100
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case_id,call,expect", CASES, ids=[c[0] for c in CASES])
def test_bad_input(case_id, call, expect):
    if isinstance(expect, Err):
        with pytest.raises(qcore.QuantizationError) as info:
            call()
        if expect.file:
            assert isinstance(info.value, TensorFileError), info.value
        message = str(info.value)
        for word in expect.words:
            assert word in message, f"{word!r} not in {message!r}"
        return
    if isinstance(expect, Ref):
        pytest.importorskip("onnx")
        got = call()
        expected = reference(expect.op, expect.opset, *expect.inputs, **expect.attrs)
        if isinstance(got, tuple):
            for g, e in zip(got, expected):
                assert_bits_equal(g, e, context=case_id)
        else:
            assert_bits_equal(got, expected, context=case_id)
        return
    got = call()
    assert_bits_equal(np.asarray(got), expect.value, context=case_id)


def test_symlink_loop_has_its_own_message(tmp_path: Path):
    a, b = tmp_path / "a.npy", tmp_path / "b.npy"
    os.symlink(b, a)
    os.symlink(a, b)
    with pytest.raises(TensorFileError, match="loop of symbolic links"):
        load_tensor(a)


@pytest.mark.parametrize("good, bad, word", [
    ({"opset": 28}, {"opset": True}, "opset"),
    ({"axis": 1}, {"axis": True}, "axis"),
    ({"saturate": True}, {"saturate": 1.0}, "saturate"),
])
def test_remembered_plans_keep_their_errors(good, bad, word):
    """Plans are remembered by their arguments' values and types: after a valid call, one whose
    arguments are equal in Python (True == 1, 1.0 == True) but invalid still raises."""
    s = np.full(4, F32(0.1)) if "axis" in good else F32(0.1)
    Q(X, s, **good)
    Q(X, s, **good)  # the second call finds the plan remembered
    with pytest.raises(qcore.QuantizationError, match=word):
        Q(X, s, **bad)
    qcore.plans._PLANS.clear()  # and the same error without anything remembered
    with pytest.raises(qcore.QuantizationError, match=word):
        Q(X, s, **bad)


def test_remembered_calls_follow_the_callers_arrays():
    """A call remembered whole (one-element scale and zero point) must not keep a view of the
    caller's scale: changing it in place and calling again gives the new answer, and going back
    to the old value gives the old one."""
    x = np.linspace(-4, 4, 2001, dtype=np.float32)
    scale = np.array(0.5, np.float32)
    zp = np.array(3, np.int8)
    first = qcore.quantize_linear(x, scale, zp)
    scale[...] = 0.25
    zp[...] = -5
    second = qcore.quantize_linear(x, scale, zp)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(second, np.clip(np.rint(x / np.float32(0.25)) - 5, -128, 127))
    # the first call's values in new arrays, while the first arrays keep the new values
    again = qcore.quantize_linear(x, np.array(0.5, np.float32), np.array(3, np.int8))
    np.testing.assert_array_equal(again, first)
    np.testing.assert_array_equal(first, np.clip(np.rint(x / np.float32(0.5)) + 3, -128, 127))


def test_remembered_calls_still_refuse_bad_scales():
    """A refused call is never remembered, and a good one does not make a bad one pass."""
    x = np.ones(16, np.float32)
    qcore.quantize_linear(x, np.float32(1.0), np.uint8(0))
    for _ in range(2):
        with pytest.raises(qcore.QuantizationError, match="y_scale must be positive"):
            qcore.quantize_linear(x, np.float32(0.0), np.uint8(0))
    with pytest.raises(qcore.QuantizationError, match="opset"):
        qcore.quantize_linear(x, np.float32(1.0), np.uint8(0), opset=True)
    with pytest.raises(qcore.QuantizationError, match="saturate"):
        qcore.quantize_linear(x, np.float32(1.0), np.uint8(0), saturate=1.0)


def test_remembered_blocked_calls_check_their_values_every_time():
    """A call with many scales is remembered by shapes only: each call's scale and zero point
    values are still read (new values give new codes) and checked (a zero scale is refused)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 64)).astype(np.float32)
    scales = rng.uniform(0.01, 0.1, (8, 2)).astype(np.float32)
    zps = rng.integers(-3, 4, (8, 2)).astype(np.int8)

    def want(s, z):
        full_s = np.repeat(s, 32, axis=1)
        full_z = np.repeat(z.astype(np.float64), 32, axis=1)
        return np.clip(np.rint(x / full_s) + full_z, -128, 127)

    for _ in range(2):  # the second call finds the plan remembered
        np.testing.assert_array_equal(
            qcore.quantize_linear(x, scales, zps, axis=1, block_size=32), want(scales, zps))
    other_s, other_z = scales * 2, (zps + 1).astype(np.int8)
    np.testing.assert_array_equal(
        qcore.quantize_linear(x, other_s, other_z, axis=1, block_size=32), want(other_s, other_z))
    bad = scales.copy()
    bad[3, 1] = 0
    with pytest.raises(qcore.QuantizationError, match="y_scale must be positive"):
        qcore.quantize_linear(x, bad, zps, axis=1, block_size=32)
