"""qcore.onnx_models: the one-node models every caller runs through other engines."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import qcore
from qcore.onnx_models import attributes, feeds, node_model, onnx_type

onnx = pytest.importorskip("onnx")
from onnx.reference import ReferenceEvaluator  # noqa: E402


def test_types_and_attributes():
    assert onnx_type(np.zeros(2, np.float32)) == onnx.TensorProto.FLOAT
    assert onnx_type(ml_dtypes.int4) == onnx.TensorProto.INT4
    assert onnx_type("float8e4m3fn") == onnx.TensorProto.FLOAT8E4M3FN
    assert onnx_type(np.float64) == onnx.TensorProto.DOUBLE  # qcore refuses it; onnx has it
    assert attributes("QuantizeLinear", axis=0, saturate=False, block_size=None,
                      output_dtype="int4", precision=0) == {
        "axis": 0, "saturate": 0, "output_dtype": onnx.TensorProto.INT4, "precision": 0}


def test_graph_inputs_and_initializers_give_the_same_answer():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    s = np.full((4, 2), 0.05, np.float32)
    z = np.zeros((4, 2), ml_dtypes.int4)
    want = qcore.quantize_linear(x, s, z, axis=1, block_size=3)
    fed = node_model("QuantizeLinear", 21, [x, s, z], {"axis": 1, "block_size": 3})
    got = ReferenceEvaluator(fed).run(None, feeds("QuantizeLinear", x, s, z))[0]
    assert np.array_equal(got.astype(np.int8), want.astype(np.int8))
    embedded = node_model("QuantizeLinear", 21, [x, s, z], {"axis": 1, "block_size": 3},
                          initializers=True)
    assert not embedded.graph.input
    got = ReferenceEvaluator(embedded).run(None, {})[0]
    assert np.array_equal(got.astype(np.int8), want.astype(np.int8))
    widened = node_model("QuantizeLinear", 21, [x, s, z], {"axis": 1, "block_size": 3},
                         initializers=True, cast_output_to="int32")
    got = ReferenceEvaluator(widened).run(None, {})[0]
    assert got.dtype == np.int32 and np.array_equal(got, want.astype(np.int32))


def test_dynamic_and_dequantize_models():
    x = np.array([-1.0, 0.0, 2.5], np.float32)
    outs = ReferenceEvaluator(node_model("DynamicQuantizeLinear", 11, [x])).run(
        None, feeds("DynamicQuantizeLinear", x))
    y, scale, zp = qcore.dynamic_quantize_linear(x)
    assert np.array_equal(outs[0], y) and outs[1] == scale and outs[2] == zp
    deq = node_model("DequantizeLinear", 21, [np.uint8, np.float32, None])
    assert [i.name for i in deq.graph.input] == ["x", "x_scale"]
    got = ReferenceEvaluator(deq).run(None, feeds("DequantizeLinear", y, scale, None))[0]
    assert np.array_equal(got, qcore.dequantize_linear(y, scale))


def test_onnxruntime_runs_a_model_with_output_types():
    ort = pytest.importorskip("onnxruntime")
    x = np.linspace(-3, 3, 16, dtype=np.float32)
    s = np.float32(0.05)
    z = np.int8(3)
    model = node_model("QuantizeLinear", 21, [x, s, np.asarray(z)], initializers=["y_zero_point"],
                       output_types=[np.int8])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": x, "y_scale": np.asarray(s)})[0]
    assert np.array_equal(got, qcore.quantize_linear(x, s, z))


@pytest.mark.parametrize("name", ["Q int8 per-tensor", "Q int8 per-axis (last axis)",
                                  "Q int8 blocked 32 (last axis)", "Q float8e4m3fn saturate",
                                  "DQ int8 per-axis (last axis)", "DynamicQuantizeLinear"])
def test_the_benchmark_peer_builds_its_model_here_and_agrees_with_qcore(name, monkeypatch):
    pytest.importorskip("onnxruntime")
    from qcore import onnx_models
    from qcore.bench import cases as bench

    built = []
    monkeypatch.setattr(onnx_models, "node_model",
                        lambda *a, **k: built.append(a[0]) or node_model(*a, **k))
    case = next(c for c in bench.default_cases() if c.name == name)
    inputs = bench.make_inputs(case, (8, 64))
    run = bench.onnxruntime_impl(case, inputs)
    assert run is not None and built
    got = run()
    want = bench.qcore_impl(case, inputs)()
    want = list(want) if isinstance(want, tuple) else [want]
    for g, w in zip(got, want):
        assert np.array_equal(np.atleast_1d(g).view(np.uint8), np.atleast_1d(w).view(np.uint8))
