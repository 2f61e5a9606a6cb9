"""Forms per layer (qcore.model.forms): each form's fused kernel proven in the model onnxruntime
itself optimizes; the saturation probe; the one-layer cost models; the speed planner's rules
and refusals. No timed assertions (speed targets live in the bench)."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from qcore.errors import QuantizationError  # noqa: E402
from qcore.model.costs import layer_costs, layer_model  # noqa: E402
from qcore.model.forms.layered import LAYER_FORMS, export_forms, layers_of  # noqa: E402
from qcore.model.forms.layers import int8_per_axis, prepare  # noqa: E402
from qcore.model.forms.qlinear import (  # noqa: E402
    chain_nodes,
    chain_specs,
    chain_tensors,
    u8s8_saturates,
    weight_qmax,
)
from qcore.model.objectives import SpeedCase, check_objectives, plan_for_speed  # noqa: E402


def _conv_net(act: str = "silu", size: int = 24, seed: int = 0):
    """x [1, 3, size, size] → Conv(3→8, s2)+act → Conv(8→8)+act (+ residual Add) → Conv 1×1
    head (a graph output: stays float)."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def conv(x, cin, cout, k, s, i, activation=True):
        w = rng.standard_normal((cout, cin, k, k)) * np.sqrt(2 / (cin * k * k))
        inits.extend([numpy_helper.from_array(w.astype(np.float32), f"w{i}"),
                      numpy_helper.from_array((0.1 * rng.standard_normal(cout))
                                              .astype(np.float32), f"b{i}")])
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}",
                                      kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4))
        if not activation:
            return f"c{i}"
        if act == "silu":
            nodes.append(helper.make_node("Sigmoid", [f"c{i}"], [f"s{i}"], name=f"sig{i}"))
            nodes.append(helper.make_node("Mul", [f"c{i}", f"s{i}"], [f"a{i}"], name=f"mul{i}"))
        else:
            nodes.append(helper.make_node("Relu", [f"c{i}"], [f"a{i}"], name=f"relu{i}"))
        return f"a{i}"

    a = conv("x", 3, 8, 3, 2, 0)
    b = conv(a, 8, 8, 3, 1, 1)
    nodes.append(helper.make_node("Add", [a, b], ["r"], name="res"))
    y = conv("r", 8, 5, 1, 1, 2, activation=False)
    g = helper.make_graph(nodes, "net", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _mlp(op: str = "MatMul", seed: int = 0):
    rng = np.random.default_rng(seed)
    w0 = rng.standard_normal((32, 48)).astype(np.float32) / 6
    w1 = rng.standard_normal((48, 16)).astype(np.float32) / 7
    inits = [numpy_helper.from_array(w0 if op == "MatMul" else w0.T.copy(), "w0"),
             numpy_helper.from_array(rng.standard_normal(48).astype(np.float32), "b0"),
             numpy_helper.from_array(w1, "w1"),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b1")]
    if op == "MatMul":
        first = [helper.make_node("MatMul", ["x", "w0"], ["m0"], name="mm0"),
                 helper.make_node("Add", ["m0", "b0"], ["h"], name="add0")]
    else:
        first = [helper.make_node("Gemm", ["x", "w0", "b0"], ["h"], name="mm0", transB=1)]
    nodes = first + [helper.make_node("Relu", ["h"], ["r"], name="relu"),
                     helper.make_node("Gemm", ["r", "w1", "b1"], ["y"], name="mm1")]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                       [8, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _feeds(model, n=3, seed=1):
    rng = np.random.default_rng(seed)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return [{"x": rng.uniform(-1, 1, shape).astype(np.float32)} for _ in range(n)]


def _optimized_ops(model) -> Counter:
    import os
    import tempfile

    so = ort.SessionOptions()
    so.log_severity_level = 3
    with tempfile.TemporaryDirectory() as d:
        so.optimized_model_filepath = os.path.join(d, "o.onnx")
        ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return Counter(n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node)


def _static_export(model, names=None, method="minmax", qmax=None):
    p = prepare(model)
    layers = [x for x in layers_of(p) if "qlinear" in x.forms]
    static = [x.name for x in layers] if names is None else names
    inside = chain_nodes(p, static)
    tensors = chain_tensors(p, inside)
    from qcore.model.objectives import _values

    values = _values(p, tensors, _feeds(model))
    specs = chain_specs(p, inside, values, method)
    return p, export_forms(p, {k: "qlinear" for k in static}, specs, qmax=qmax)


def _sqnr(a, b):
    a, b = np.float64(a), np.float64(b)
    return 10 * math.log10(np.sum(a * a) / np.sum((a - b) ** 2))


def _run(model, feeds, optimized=True):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if not optimized:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)[0]


def _export_sqnr(model, export) -> float:
    """The export's output SQNR against the float model, both run (optimized) by onnxruntime
    on one seeded feed."""
    f = _feeds(model, 1, 9)[0]
    return _sqnr(_run(model, f), _run(export, f))


def test_layers_and_their_forms():
    p = prepare(_conv_net())
    layers = layers_of(p)
    assert [x.op for x in layers] == ["Conv"] * 3
    assert layers[-1].is_output and "qlinear" not in layers[-1].forms  # no Q on a graph output
    assert layers[0].forms == ("float", "qlinear", "conv-integer")
    assert set(LAYER_FORMS) >= {f for x in layers for f in x.forms}


def test_qlinear_fuses_through_silu_and_the_residual_add():
    """uint8 × int8 chains: QLinearConv, QLinearSigmoid, QLinearMul, QLinearAdd, as
    quantize_static's placement makes them; no float Conv/Sigmoid left in the chain."""
    m = _conv_net("silu")
    _, e = _static_export(m)
    ops = _optimized_ops(e)
    assert ops["QLinearConv"] == 2, ops
    assert ops["QLinearSigmoid"] == 2 and ops["QLinearMul"] == 2 and ops["QLinearAdd"] == 1, ops
    assert ops["Sigmoid"] == 0 and ops["QuickGelu"] == 0, ops
    assert ops["Conv"] <= 1  # the float head only
    assert _export_sqnr(m, e) > 20


def test_qlinear_folds_relu_into_the_quantizer():
    """Conv → Relu → Conv: the Relu's input takes its zero-point-0 pair, so onnxruntime drops
    the Relu and both Convs fuse; the outputs equal the Relu kept (clamping at 0 is what a
    zero-point-0 quantizer does)."""
    m = _conv_net("relu")
    _, e = _static_export(m)
    ops = _optimized_ops(e)
    assert ops["QLinearConv"] == 2 and ops["Relu"] == 0, ops


def test_u8s8_saturation_is_what_the_weights_avoid():
    """Where the runtime's uint8 × int8 kernel saturates pairs of products (AVX2 without
    VNNI), full-range int8 weights make the fused model differ from the graph; the planner's
    weights (weight_qmax) keep the two equal to rounding."""
    m = _conv_net("silu", size=32)
    f = _feeds(m, 1, 9)[0]
    _, e = _static_export(m)
    a, b = _run(e, f, False), _run(e, f, True)
    assert np.array_equal(a, b) or _sqnr(a, b) > 35
    assert weight_qmax() == (63 if u8s8_saturates() else 127)
    if u8s8_saturates():
        _, full = _static_export(m, qmax=127)
        assert _sqnr(_run(full, f, False), _run(full, f, True)) < 35


def test_conv_integer_form_fuses_and_is_close():
    m = _conv_net("silu")
    p = prepare(m)
    e = export_forms(p, {x.name: "conv-integer" for x in layers_of(p)})
    ops = _optimized_ops(e)
    assert ops["ConvInteger"] == 3 and ops["Conv"] == 0, ops
    assert _export_sqnr(m, e) > 25


@pytest.mark.parametrize("op", ["MatMul", "Gemm"])
def test_dynamic_matmul_form_fuses(op):
    m = _mlp(op)
    p = prepare(m)
    e = export_forms(p, {x.name: "dynamic" for x in layers_of(p)})
    ops = _optimized_ops(e)
    fused = ops["DynamicQuantizeMatMul"] + ops["MatMulIntegerToFloat"]
    assert fused == 2 and ops["MatMulInteger"] == 0, ops
    assert _export_sqnr(m, e) > 30


@pytest.mark.parametrize("op", ["MatMul", "Gemm"])
def test_qlinear_matmul_fuses(op):
    m = _mlp(op)
    p = prepare(m)
    first = layers_of(p)[0]
    assert "qlinear" in first.forms and "qlinear" not in layers_of(p)[-1].forms
    _, e = _static_export(m, [first.name])
    ops = _optimized_ops(e)
    assert ops["QLinearMatMul"] + ops["QGemm"] == 1, ops


def gather_model(table: np.ndarray):
    """A model of one Gather node "g" looking up 4 int64 ids in the table "emb"."""
    g = helper.make_graph([helper.make_node("Gather", ["emb", "ids"], ["y"], name="g")], "e",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(table, "emb")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_weight_only_gather_dequantizes_the_rows_looked_up():
    rng = np.random.default_rng(0)
    table = rng.standard_normal((50, 6)).astype(np.float32)
    p = prepare(gather_model(table))
    e = export_forms(p, {"g": "weight-only"})
    ids = np.array([3, 0, 49, 3], np.int64)
    codes, scale = int8_per_axis(table, 0)
    want = codes[ids].astype(np.float32) * scale[ids][:, None]
    np.testing.assert_array_equal(_run(e, {"ids": ids}), want)


def test_form_refused_where_the_layer_cannot_take_it():
    p = prepare(_conv_net())
    head = layers_of(p)[-1].name
    with pytest.raises(QuantizationError, match="cannot take form"):
        export_forms(p, {head: "qlinear"}, {})
    with pytest.raises(QuantizationError, match="cannot take form"):
        export_forms(p, {head: "dynamic"}, {})


def test_one_layer_cost_models_run_in_every_form():
    p = prepare(_conv_net())
    layer = layers_of(p)[1]
    for form in layer.forms:
        m = layer_model(p, layer, (1, 8, 12, 12), form)
        s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        name = s.get_inputs()[0].name
        x = (np.zeros((1, 8, 12, 12), np.uint8) if form == "qlinear"
             else np.zeros((1, 8, 12, 12), np.float32))
        s.run(None, {name: x})
    costs = layer_costs(p, [layer], {layer.data: (1, 8, 12, 12)}, threads=1, repeats=2)
    assert set(costs[layer.name]) == set(layer.forms)
    assert all(v > 0 for v in costs[layer.name].values())


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_min_sqnr_must_be_finite(bad):
    with pytest.raises(QuantizationError, match="--min-sqnr"):
        check_objectives(bad, None)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_max_latency_must_be_a_positive_ratio(bad):
    with pytest.raises(QuantizationError, match="--max-latency"):
        check_objectives(None, bad)


def _paying_costs(case):
    """Costs under which qlinear pays on every layer that can take it (the planner's rules,
    not this host's timings, are under test)."""
    out = {}
    for x in layers_of(case.prepared):
        out[x.name] = {f: {"float": 1.0, "qlinear": 0.5}.get(f, 2.0) for f in x.forms}
    return out


def test_planner_starts_fast_and_moves_layers_to_float_until_the_floor_holds():
    m = _conv_net("silu", size=32)
    case = SpeedCase(m, _feeds(m, 2, 7), _feeds(m, 3, 1), threads=1)
    costs = _paying_costs(case)
    low = plan_for_speed(case, min_sqnr=-100.0, repeats=2, costs=costs)
    assert low.met and not low.moves
    assert [low.forms[x.name] for x in low.layers] == ["qlinear", "qlinear", "float"]
    assert low.output_sqnr_db == pytest.approx(case.deployed_sqnr(low.export), abs=1e-9)
    assert all(r["why"] for r in low.table())
    high = plan_for_speed(case, min_sqnr=500.0, repeats=2, costs=costs)
    assert high.met and set(high.forms.values()) == {"float"}  # float is always reachable
    assert [mv["layer"] for mv in high.moves] and high.output_sqnr_db > low.output_sqnr_db
    js = high.to_json()
    assert js["deploy"]["output_sqnr_db"] == high.output_sqnr_db
    assert {r["layer"] for r in js["layers"]} == {x.name for x in high.layers}


def test_no_form_pays_keeps_the_layer_float_and_says_why():
    m = _conv_net("silu", size=32)
    case = SpeedCase(m, _feeds(m, 2, 7), _feeds(m, 3, 1), threads=1)
    costs = {x.name: {f: 1.0 if f == "float" else 1.5 for f in x.forms}
             for x in layers_of(case.prepared)}
    p = plan_for_speed(case, min_sqnr=0.0, repeats=2, costs=costs)
    assert set(p.forms.values()) == {"float"}
    assert all("no form pays" in p.why[x.name] for x in p.layers[:2])


def test_max_latency_out_of_reach_is_reported_not_met():
    m = _conv_net("silu", size=32)
    case = SpeedCase(m, _feeds(m, 2, 7), _feeds(m, 3, 1), threads=1)
    p = plan_for_speed(case, max_latency=1e-6, repeats=2, costs=_paying_costs(case))
    assert not p.met and not p.moves
    assert p.latency["ratio"] > 1e-6 and p.latency["float_ms"] > 0


def _cli(argv, capsys):
    from qcore.model.__main__ import main

    code = main(argv)
    got = capsys.readouterr()
    return code, got.out, got.err


@pytest.mark.parametrize("argv, words", [
    (["--min-sqnr", "nan"], "--min-sqnr"),
    (["--min-sqnr", "inf"], "--min-sqnr"),
    (["--max-latency", "0"], "--max-latency"),
    (["--max-latency", "-2"], "--max-latency"),
    (["--min-sqnr", "20", "--max-latency", "0.9"], "one objective"),
    (["--min-sqnr", "20", "--budgets", "4,5"], "--budgets"),
    (["--min-sqnr", "20", "--activations", "dynamic"], "--activations"),
    (["--min-sqnr", "20", "--runtime", "reference"], "--runtime"),
])
def test_cli_refuses_bad_objectives_in_one_line(tmp_path, capsys, argv, words):
    path = tmp_path / "m.onnx"
    onnx.save(_conv_net(), str(path))
    code, out, err = _cli([str(path)] + argv, capsys)
    assert code == 2 and err.startswith("error: ") and words in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_cli_min_sqnr_writes_the_plan_the_table_and_the_export(tmp_path, capsys):
    import json

    path = tmp_path / "m.onnx"
    onnx.save(_conv_net(size=32), str(path))
    plan, export = tmp_path / "plan.json", tmp_path / "q.onnx"
    code, out, err = _cli([str(path), "--min-sqnr", "10", "--threads", "1", "--plan", str(plan),
                           "--export", str(export), "--latency-repeats", "3"], capsys)
    assert code == 0, err
    assert "layer" in out and "conv0" in out and "output SQNR as deployed" in out
    js = json.loads(plan.read_text())
    assert js["objective"] == {"min_sqnr_db": 10.0}
    assert [r["layer"] for r in js["layers"]] == ["conv0", "conv1", "conv2"]
    assert js["host"]["onnxruntime"] == ort.__version__
    for k in ("ms", "float_ms", "ratio", "p10", "p90", "load"):
        assert k in js["latency"]
    m = onnx.load(str(export))
    f = _feeds(m, 1, 7)[0]
    case = SpeedCase(_conv_net(size=32), [f], [f], threads=1)
    assert js["met"] == (case.deployed_sqnr(m) >= 10.0)


def test_optimized_node_names_map_to_the_nodes_they_come_from():
    from qcore.model.costs import owner

    names = {"/conv_1", "/conv_12", "/mul_3", "x.Q"}
    assert owner("/conv_1/out_nchwc", names) == "/conv_1"
    assert owner("/conv_12_token_29", names) == "/conv_12"
    assert owner("/mul_3/QuickGeluFusion/", names) == "/mul_3"
    assert owner("x.Q", names) == "x.Q"
    assert owner("ReorderInput_token_3", names) is None


def test_profiled_costs_cover_every_fused_kernel_of_the_chain():
    """onnxruntime's profile of the all-static export, its nodes mapped back: every
    QLinearConv / QLinearSigmoid / QLinearMul the runtime ran is counted for a node of the
    export (so each layer's in-chain cost is the kernels it fused into), and both forms of
    each chain layer get a time."""
    from qcore.model.costs import in_chain_costs, owner, profile_ms
    from qcore.model.objectives import _values

    m = _conv_net("silu", size=32)
    p, e = _static_export(m)
    prof = profile_ms(e, _feeds(m, 1, 3), threads=1, passes=2)
    names = {n.name for n in p.graph.node} | {n.name for n in e.graph.node}
    owners = {owner(k, names) for k in prof}
    assert {"conv0", "conv1", "sig0", "sig1", "mul0", "mul1", "res"} <= owners, prof
    assert _optimized_ops(e)["QLinearConv"] == 2
    chain = [x for x in layers_of(p) if "qlinear" in x.forms]
    owned = {x.name: chain_nodes(p, [x.name]) for x in chain}
    assert owned["conv0"] == {"conv0", "sig0", "mul0"}
    vals = _values(p, [x.data for x in chain] + [x.output for x in chain], _feeds(m, 1))
    c = in_chain_costs(p, e, chain, owned, {t: v[0].size for t, v in vals.items()},
                       _feeds(m, 1, 3), passes=2)
    assert set(c) == {"conv0", "conv1"}
    assert all(v["float"] > 0 and v["qlinear"] > 0 for v in c.values()), c


def test_bias_correction_restores_each_channels_mean():
    """7-bit weights shift each output channel's mean by Σ(W_q − W)·E[x]; the corrected bias
    takes it back: the quantized Conv's per-channel output means (onnxruntime, weights only
    quantized) land closer to the float ones."""
    from qcore.model.forms.bias import bias_corrected
    from qcore.model.objectives import _values

    rng = np.random.default_rng(3)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="c",
                                            pads=[1, 1, 1, 1])], "c",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    x = (rng.standard_normal((1, 8, 16, 16)) + 2.0).astype(np.float32)  # a mean to shift
    p = prepare(m)
    layer = layers_of(p)[0]
    fixed = bias_corrected(p, [layer], _values(p, ["x"], [{"x": x}]), qmax=15)
    ref = _run(m, {"x": x})[0, :, 1:-1, 1:-1].mean(axis=(1, 2))

    def quantized(model):
        qm = onnx.ModelProto()  # the weights rounded as the static form rounds them
        qm.CopyFrom(model)
        codes, scale = int8_per_axis(w, 0, 15)
        for t in qm.graph.initializer:
            if t.name == "w":
                t.CopyFrom(numpy_helper.from_array(
                    (codes * scale.reshape(-1, 1, 1, 1)).astype(np.float32), "w"))
        return _run(qm, {"x": x})[0, :, 1:-1, 1:-1].mean(axis=(1, 2))

    before = np.abs(quantized(p) - ref).mean()
    after = np.abs(quantized(fixed) - ref).mean()
    assert after < 0.1 * before, (before, after)


def test_profiled_plan_of_a_conv_net_fuses_what_it_plans():
    """The planner's own costs (profiled, no costs given): every layer it plans as qlinear runs
    as a QLinearConv in the model onnxruntime optimizes from the export it writes."""
    m = _conv_net("silu", size=32)
    case = SpeedCase(m, _feeds(m, 2, 7), _feeds(m, 3, 1), threads=1)
    plan = plan_for_speed(case, min_sqnr=-100.0, repeats=2)
    n = sum(1 for f in plan.forms.values() if f == "qlinear")
    assert _optimized_ops(plan.export)["QLinearConv"] == n
    assert set(plan.costs["conv0"]) == {"float", "qlinear"}
    assert plan.start["bias_correction"] in (True, False)
