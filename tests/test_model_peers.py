"""onnxruntime's own quantizers as peers (qcore.model.peers): the models they give equal a
direct call to onnxruntime.quantization with the stated settings, their SQNR is the model tool's
figure computed here with NumPy, and a model onnxruntime refuses gives one line, no traceback."""

from __future__ import annotations

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from qcore.model import peers  # noqa: E402


def tiny_conv_net(seed: int = 0):
    """Conv → SiLU (Sigmoid · Mul) → Conv → SiLU → global pool → Gemm: a small detector-like
    stack with per-channel scale spread."""
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((8, 3, 3, 3)) * 0.3 * np.exp(rng.normal(0, 0.7, (8, 1, 1, 1))))
    w2 = rng.standard_normal((16, 8, 3, 3)) * 0.15
    w3 = rng.standard_normal((10, 16)) * 0.3
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for a, n in (
        (w1, "w1"), (rng.normal(0, 0.1, 8), "b1"), (w2, "w2"), (rng.normal(0, 0.1, 16), "b2"),
        (w3, "w3"), (rng.normal(0, 0.1, 10), "b3"))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4),
             helper.make_node("Sigmoid", ["c1"], ["s1"]),
             helper.make_node("Mul", ["c1", "s1"], ["a1"]),
             helper.make_node("Conv", ["a1", "w2", "b2"], ["c2"], pads=[1] * 4, strides=[2, 2]),
             helper.make_node("Sigmoid", ["c2"], ["s2"]),
             helper.make_node("Mul", ["c2", "s2"], ["a2"]),
             helper.make_node("GlobalAveragePool", ["a2"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "w3", "b3"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [None, 3, 16, 16])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [None, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def batches(n: int = 3, seed: int = 1):
    rng = np.random.default_rng(seed)
    return [{"x": rng.uniform(0, 1, (2, 3, 16, 16)).astype(np.float32)} for _ in range(n)]


class _Reader:
    def __init__(self, feeds):
        self.it = iter(feeds)

    def get_next(self):
        return next(self.it, None)


def _same_model(a, b) -> None:
    assert [n.op_type for n in a.graph.node] == [n.op_type for n in b.graph.node]
    ia = {t.name: numpy_helper.to_array(t) for t in a.graph.initializer}
    ib = {t.name: numpy_helper.to_array(t) for t in b.graph.initializer}
    assert ia.keys() == ib.keys()
    for k in ia:
        assert ia[k].dtype == ib[k].dtype and np.array_equal(ia[k], ib[k]), k


def test_static_peer_is_onnxruntimes_quantize_static_with_uint8_activations(tmp_path):
    m, cal = tiny_conv_net(), batches()
    p = peers.quantize_static_peer(m, cal)
    assert p.ok, p.error
    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx")
    onnx.save(m, src)
    quantization.quantize_static(
        src, dst, _Reader(cal), quant_format=quantization.QuantFormat.QDQ,
        activation_type=quantization.QuantType.QUInt8, weight_type=quantization.QuantType.QInt8,
        per_channel=True, calibrate_method=quantization.CalibrationMethod.MinMax)
    direct = onnx.load(dst)
    _same_model(p.model, direct)
    assert p.file_bytes == os.path.getsize(dst)
    # the settings as stated: uint8 activations, int8 per-channel weights
    types = {t.name: t.data_type for t in p.model.graph.initializer}
    q_act = [n for n in p.model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "x"]
    assert q_act and types[q_act[0].input[2]] == TensorProto.UINT8
    w1_zp = next(n for n in p.model.graph.node if n.op_type == "DequantizeLinear"
                 and "w1" in n.input[0])
    assert types[w1_zp.input[0]] == TensorProto.INT8
    assert numpy_helper.to_array(next(t for t in p.model.graph.initializer
                                      if t.name == w1_zp.input[1])).shape == (8,)


def test_dynamic_peer_is_onnxruntimes_quantize_dynamic_with_uint8_weights(tmp_path):
    m = tiny_conv_net()
    p = peers.quantize_dynamic_peer(m)
    assert p.ok, p.error
    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx")
    onnx.save(m, src)
    quantization.quantize_dynamic(src, dst, per_channel=True,
                                  weight_type=quantization.QuantType.QUInt8)
    _same_model(p.model, onnx.load(dst))
    assert p.file_bytes == os.path.getsize(dst)
    assert "ConvInteger" in {n.op_type for n in p.model.graph.node}


def _numpy_sqnr(y, yh) -> float:
    y, yh = np.asarray(y, np.float64), np.asarray(yh, np.float64)
    return float(10 * np.log10(np.sum(y * y) / np.sum((y - yh) ** 2)))


def test_measure_gives_the_model_tools_sqnr_and_times_every_model():
    m, cal = tiny_conv_net(), batches()
    ps = peers.peer_models(m, cal)
    models = {"float": m, **{k: p.model for k, p in ps.items()}}
    res = peers.measure(models, cal, repeats=3, warmup=1,
                        file_bytes={k: p.file_bytes for k, p in ps.items()})
    assert res["float"]["x_float"] == 1.0 and res["float"]["output_sqnr_db"] == np.inf
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    ref = np.concatenate([ort.InferenceSession(m.SerializeToString(), so).run(None, b)[0]
                          for b in cal])
    for k, p in ps.items():
        s = ort.InferenceSession(p.model.SerializeToString(), so)
        out = np.concatenate([s.run(None, b)[0] for b in cal])
        assert res[k]["output_sqnr_db"] == pytest.approx(_numpy_sqnr(ref, out), abs=1e-6)
        assert 5 < res[k]["output_sqnr_db"] < 60
        assert res[k]["file_bytes"] == p.file_bytes
        r = res[k]
        assert r["min_ms"] <= r["q1_ms"] <= r["latency_ms"] <= r["q3_ms"] and r["repeats"] == 3


def test_a_model_onnxruntime_cannot_run_is_refused_in_one_line():
    m = tiny_conv_net()
    bad = onnx.ModelProto()
    bad.CopyFrom(m)
    bad.graph.node[1].op_type = "NoSuchOp"
    bad.graph.node[1].domain = "qcore.test"
    bad.opset_import.append(helper.make_opsetid("qcore.test", 1))
    for p in (peers.quantize_static_peer(bad, batches()), peers.quantize_dynamic_peer(bad)):
        assert not p.ok and p.model is None
        assert p.error and "\n" not in p.error and "Traceback" not in p.error
    assert peers.quantize_static_peer(m, []).error == "no calibration batches"


def test_the_command_prints_the_pareto_table_and_writes_it_into_the_plan(tmp_path, capsys):
    import json

    from qcore.model.__main__ import main

    model, inputs, cal = tmp_path / "tiny.onnx", tmp_path / "in.npz", tmp_path / "cal.npz"
    onnx.save(tiny_conv_net(), str(model))
    np.savez(inputs, **batches(1)[0])
    np.savez(cal, **batches(1, seed=9)[0])
    export, plan = tmp_path / "q.onnx", tmp_path / "plan.json"
    rc = main([str(model), "--inputs", str(inputs), "--recipes", "int8:per-axis",
               "--budget", "9", "--activations", "static:uint8", "--calibrate", str(cal),
               "--export", str(export), "--plan", str(plan), "--peers",
               "--latency-repeats", "2"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "Pareto table" in text and "ort-static" in text and "ort-dynamic" in text
    rows = json.loads(plan.read_text())["pareto"]
    by = {r["name"]: r for r in rows}
    assert set(by) == {"float", "ort-static", "ort-dynamic", "qcore-q"}
    assert by["qcore-q"]["file_bytes"] == os.path.getsize(export)
    assert by["qcore-q"]["forms"] and any(r["pareto"] for r in rows)
    # the static peer was calibrated on --calibrate's batch: a direct call on it agrees
    direct = peers.quantize_static_peer(tiny_conv_net(), batches(1, seed=9))
    assert by["ort-static"]["file_bytes"] == direct.file_bytes


def test_peers_without_an_export_is_refused_in_one_line(tmp_path, capsys):
    from qcore.model.__main__ import main

    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_conv_net(), str(model))
    assert main([str(model), "--peers"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --peers") and err.count("\n") == 1


def test_an_integer_output_is_compared_by_agreement_not_sqnr():
    """A decision output (ArgMax, int64) stays out of the SQNR: the share of equal elements."""
    m = tiny_conv_net()
    m.graph.node.append(helper.make_node("ArgMax", ["y"], ["k"], axis=1, keepdims=0))
    m.graph.output.append(helper.make_tensor_value_info("k", TensorProto.INT64, [None]))
    cal = batches()
    p = peers.quantize_dynamic_peer(m)
    res = peers.measure({"float": m, "q": p.model}, cal, repeats=2, warmup=1)
    assert set(res["q"]["outputs"]) == {"y"} and 0 <= res["q"]["agreement"]["k"] <= 1
    alone = peers.measure({"float": tiny_conv_net(), "q": peers.quantize_dynamic_peer(
        tiny_conv_net()).model}, cal, repeats=2, warmup=1)
    assert res["q"]["output_sqnr_db"] == pytest.approx(alone["q"]["output_sqnr_db"])
