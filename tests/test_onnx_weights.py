"""The one reader of an ONNX model's weights (qcore.io.onnx): every place an exporter puts a
weight, its role and axes, the fake-quant run against the export run in onnxruntime bit for
bit, and the nothing-found error in the model tool and the report's command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from qcore.io import onnx as qonnx  # noqa: E402
from qcore.model import fidelity, graph  # noqa: E402
from qcore.model.export import export_plan  # noqa: E402
from qcore.model.plan import Plan, planned_weights  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RNG = np.random.default_rng(7)


def arr(*shape, dtype=np.float32, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(dtype)


def vi(name, elem=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def model_of(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def everywhere_model():
    """x [2, 16] ->
    MatMul with w_mm [16, 24] (an initializer, also read by a second MatMul: one weight),
    Gemm with w_gemm [24, 8] transB=1 (its output feeds the If),
    a Constant c_w [24, 24] read by MatMul,
    an If whose then/else branches each hold their own [24, 8] initializer,
    w_mm also a graph output; nodes listed consumers first."""
    w_mm, w_gemm, c_w = arr(16, 24), arr(24, 8), arr(24, 24, scale=0.2)
    then_w, else_w = arr(24, 8), arr(24, 8)
    then_g = helper.make_graph([helper.make_node("MatMul", ["h3", "tw"], ["t_out"])], "then",
                               [], [vi("t_out", shape=[2, 8])], [numpy_helper.from_array(then_w, "tw")])
    else_g = helper.make_graph([helper.make_node("MatMul", ["h3", "ew"], ["e_out"])], "else",
                               [], [vi("e_out", shape=[2, 8])], [numpy_helper.from_array(else_w, "ew")])
    nodes = [  # consumers before producers: a valid model onnxruntime runs
        helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g,
                         name="If_0"),
        helper.make_node("MatMul", ["h2", "c_w"], ["h3"]),
        helper.make_node("Constant", [], ["c_w"], value=numpy_helper.from_array(c_w, "c_w")),
        helper.make_node("Add", ["h1", "h1b"], ["h2"]),
        helper.make_node("Gemm", ["x8", "w_gemm"], ["h1b"], transB=1),
        helper.make_node("MatMul", ["x", "w_mm"], ["h1"]),
        helper.make_node("Slice", ["x", "s0", "s1", "s_ax"], ["x8"]),
    ]
    inits = [numpy_helper.from_array(w_mm, "w_mm"), numpy_helper.from_array(w_gemm, "w_gemm"),
             numpy_helper.from_array(np.array([0], np.int64), "s0"),
             numpy_helper.from_array(np.array([8], np.int64), "s1"),
             numpy_helper.from_array(np.array([1], np.int64), "s_ax")]
    nodes.append(helper.make_node("MatMul", ["x", "w_mm"], ["side"]))
    m = model_of(nodes, [vi("x", shape=[2, 16]), vi("cond", TensorProto.BOOL, [])],
                 [vi("y", shape=[2, 8]), vi("side", shape=[2, 24]), vi("w_mm", shape=[16, 24])], inits)
    return m


def test_reader_finds_weights_wherever_they_live():
    recs = {r.key: r for r in qonnx.find_weights(everywhere_model())}
    assert set(recs) == {"w_mm", "w_gemm", "c_w", "tw", "ew"}
    assert recs["w_mm"].graph == "main" and recs["w_mm"].kind == "initializer"
    assert recs["w_mm"].is_output and len(recs["w_mm"].consumers) == 2  # one weight, two uses
    assert recs["c_w"].kind == "constant" and recs["c_w"].shape == (24, 24)
    assert recs["tw"].graph == "main/If_0.then_branch"
    assert recs["ew"].graph == "main/If_0.else_branch"
    assert recs["w_gemm"].role.axes(2) == (0, 1)  # transB=1: [N, K]
    assert recs["w_mm"].role.axes(2) == (1, 0)  # MatMul B [K, N]
    assert {c.op_type for c in recs["tw"].consumers} == {"MatMul"}
    # the small int64 initializers are not weights
    assert "s0" not in recs


def test_topological_sort_orders_producers_first():
    m = qonnx.topologically_sorted(everywhere_model())
    seen = {i.name for i in m.graph.input} | {t.name for t in m.graph.initializer}
    for n in m.graph.node:
        assert all(i in seen for i in n.input if i), n
        seen.update(n.output)
    onnx.checker.check_model(m)


def _cases(m, feeds):
    case = fidelity.ModelCase("m", m, [feeds], "generic")
    return case


@pytest.mark.parametrize("recipe", ["int8:per-axis", "int4:blocked32", "uint8:per-tensor"])
def test_fake_quant_equals_the_export_everywhere(recipe):
    m = everywhere_model()
    feeds = {"x": arr(2, 16), "cond": np.array(True)}
    case = _cases(m, feeds)
    # the float run equals onnxruntime on the untouched model
    want = graph.make_session(m).run(None, feeds)
    for a, b in zip(case.reference, want):
        np.testing.assert_array_equal(a, b)
    plan = Plan(8.0, {k: recipe for k in case.weights}, 0, 1, 0.0, 1.0)
    ex = export_plan(m, plan, case.arrays)
    for cond in (True, False):
        f = dict(feeds, cond=np.array(cond))
        got = graph.make_session(ex).run(None, f)
        fq = case.runner.run(f, planned_weights(case, plan))
        for a, b in zip(fq, got):
            np.testing.assert_array_equal(a, b)
    # the Constant is gone, replaced where it was; the branch weights stay in their branches
    assert not any(n.op_type == "Constant" for n in ex.graph.node)
    branch = next(n for n in ex.graph.node if n.op_type == "If").attribute
    inits = {t.name for a in branch for t in a.g.initializer}
    assert {"tw.codes", "ew.codes"} <= inits


@pytest.mark.parametrize("elem,np_type", [(TensorProto.FLOAT16, np.float16),
                                          (TensorProto.BFLOAT16, ml_dtypes.bfloat16)])
def test_half_weights_keep_their_type_and_match_the_export(elem, np_type):
    w = arr(16, 32).astype(np_type)
    t = helper.make_tensor("w", elem, w.shape, w.view(np.uint16).tobytes(), raw=True)
    if elem == TensorProto.FLOAT16:
        nodes = [helper.make_node("Cast", ["x"], ["xh"], to=elem),
                 helper.make_node("MatMul", ["xh", "w"], ["y"])]
    else:  # onnxruntime has no bfloat16 MatMul on CPU: the weight is widened, then used
        nodes = [helper.make_node("Cast", ["w"], ["wf"], to=TensorProto.FLOAT),
                 helper.make_node("MatMul", ["x", "wf"], ["y"])]
    out = elem if elem == TensorProto.FLOAT16 else TensorProto.FLOAT
    m = model_of(nodes, [vi("x", shape=[3, 16])], [vi("y", out, [3, 32])], [t], opset=21)
    (rec,) = qonnx.find_weights(m)
    assert rec.dtype == ("float16" if elem == TensorProto.FLOAT16 else "bfloat16")
    feeds = {"x": arr(3, 16)}
    try:
        case = _cases(m, feeds)
    except graph.ModelError as exc:  # onnxruntime without a bfloat16 MatMul kernel
        pytest.skip(str(exc))
    np.testing.assert_array_equal(case.arrays["w"], w.astype(np.float32))
    plan = Plan(8.0, {"w": "int4:blocked32"}, 0, 1, 0.0, 1.0)
    ex = export_plan(m, plan, case.arrays)
    assert any(n.op_type == "Cast" and n.attribute[0].i == elem for n in ex.graph.node)
    got = graph.make_session(ex).run(None, feeds)[0]
    fq = case.runner.run(feeds, planned_weights(case, plan))[0]
    np.testing.assert_array_equal(fq, got)


def test_matmul_kn_per_axis_uses_axis_1_and_blocks_run_along_k():
    w = arr(64, 16)  # [K, N]
    m = model_of([helper.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", shape=[2, 64])],
                 [vi("y", shape=[2, 16])], [numpy_helper.from_array(w, "w")])
    (rec,) = qonnx.find_weights(m)
    q = fidelity.qdq(w, "int8:per-axis", rec.role)
    assert q.axis == 1 and q.scale.shape == (16,)
    np.testing.assert_array_equal(q.scale, np.abs(w).max(axis=0) / 127)
    b = fidelity.qdq(w, "int4:blocked32@absmax", rec.role)  # ±7 codes (the default: -8)
    assert b.axis == 0 and b.scale.shape == (2, 16)
    np.testing.assert_array_equal(b.scale[0], np.abs(w[:32]).max(axis=0) / 7)
    # an explicit axis overrides the role
    assert fidelity.qdq(w, "int8:per-axis/0", rec.role).scale.shape == (64,)


def conv_net():
    """A small conv net: a 3x3 stem (3 -> 32), 3x3 (32 -> 48), depthwise 3x3 (48), 1x1
    (48 -> 64), 3x3 (64 -> 40), 3x3 (40 -> 24), then a Gemm transB head."""
    shapes = [((32, 3, 3, 3), 1), ((48, 32, 3, 3), 1), ((48, 1, 3, 3), 48), ((64, 48, 1, 1), 1),
              ((40, 64, 3, 3), 1), ((24, 40, 3, 3), 1)]
    nodes, inits, prev = [], [], "x"
    for i, (s, group) in enumerate(shapes):
        inits.append(numpy_helper.from_array(arr(*s, scale=0.1), f"conv{i}.w"))
        nodes.append(helper.make_node("Conv", [prev, f"conv{i}.w"], [f"c{i}"], group=group,
                                      pads=[s[2] // 2] * 4))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        prev = f"r{i}"
    nodes.append(helper.make_node("GlobalAveragePool", [prev], ["p"]))
    nodes.append(helper.make_node("Flatten", ["p"], ["f"]))
    inits.append(numpy_helper.from_array(arr(10, 24, scale=0.1), "fc.w"))
    nodes.append(helper.make_node("Gemm", ["f", "fc.w"], ["y"], transB=1))
    return model_of(nodes, [vi("x", shape=[1, 3, 12, 12])], [vi("y", shape=[1, 10])], inits)


def test_conv_blocks_cost_at_most_5_25_bits_where_input_channels_reach_32():
    m = conv_net()
    case = _cases(m, {"x": arr(1, 3, 12, 12)})
    for key, rec in case.runner.records.items():
        q = case.quantize(key, "int4:blocked32")
        if rec.role.kernel and rec.shape[1] >= 32:
            assert q.bits_per_element <= 5.25, (key, q.bits_per_element)
        if rec.role.kernel:
            assert q.bits_per_element < 9  # never one scale per kernel tap
    q = case.quantize("conv1.w", "int4:blocked32")  # I = 32: blocks along I, exact
    assert q.view is None and q.scale.shape == (48, 1, 3, 3)
    q = case.quantize("conv4.w", "int4:blocked32")  # I = 64
    assert q.view is None and q.scale.shape == (40, 2, 3, 3)
    q = case.quantize("conv5.w", "int4:blocked32")  # I = 40, 3x3: the [O, 360] view
    assert q.view == (24, 360) and q.scale.shape == (24, 12)
    dw = case.quantize("conv2.w", "int4:blocked32")  # depthwise: rows of 9, one scale each
    assert dw.view is None and dw.granularity == "per-axis" and dw.scale.shape == (48,)
    one = case.quantize("conv3.w", "int4:blocked32")  # 1x1, I = 48 < 64: per output channel
    assert one.granularity == "per-axis" and one.bits_per_element == 4 + 32 / 48
    stem = case.quantize("conv0.w", "int4:blocked32")  # I·k = 27 < 32
    assert stem.granularity == "per-axis"
    plan = Plan(5.0, {k: "int4:blocked32" for k in case.weights}, 0, 1, 0.0, 1.0)
    ex = export_plan(m, plan, case.arrays)
    got = graph.make_session(ex).run(None, case.batches[0])[0]
    fq = case.runner.run(case.batches[0], planned_weights(case, plan))[0]
    np.testing.assert_array_equal(fq, got)


def test_a_model_without_weights_is_an_error_saying_what_was_looked_at(tmp_path):
    b = numpy_helper.from_array(np.ones(4, np.float32), "b")
    shape = numpy_helper.from_array(np.array([2, 2], np.int64), "shape")
    m = model_of([helper.make_node("Add", ["x", "b"], ["y"]),
                  helper.make_node("Constant", [], ["k"], value_float=2.0),
                  helper.make_node("Reshape", ["y", "shape"], ["z"])],
                 [vi("x", shape=[4])], [vi("z", shape=[2, 2]), vi("k", shape=[])], [b, shape])
    with pytest.raises(graph.ModelError, match=r"2 initializers .*1 Constant nodes and 0 "
                                               r"subgraphs"):
        fidelity.ModelCase("m", m, [{"x": arr(4)}])
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    proc = subprocess.run([sys.executable, "-m", "qcore.report", str(path), "--no-progress"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "2 initializers" in proc.stderr and "Constant" in proc.stderr


def test_external_data_is_read_where_it_lives_and_never_outside_the_folder(tmp_path):
    m = everywhere_model()
    want = {r.key: qonnx.weight_array(m, r) for r in qonnx.find_weights(m)}
    path = tmp_path / "m.onnx"
    onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.data", size_threshold=64)
    assert any(r.external for r in qonnx.find_weights(onnx.load(path, load_external_data=False)))
    loaded = graph.load_model(path)
    got = {r.key: qonnx.weight_array(loaded, r) for r in qonnx.find_weights(loaded)}
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    bad = onnx.load(path, load_external_data=False)
    for t in bad.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "../m.data"
    (tmp_path / "sub").mkdir()
    onnx.save_model(bad, tmp_path / "sub" / "bad.onnx")
    with pytest.raises(graph.ModelError, match="outside the model's folder"):
        graph.load_model(tmp_path / "sub" / "bad.onnx")


def _role(op, index, **attrs):
    return qonnx.role_of([qonnx.Consumer("main", "n", op, index,
                                         tuple((k, int(v)) for k, v in attrs.items()))])


@pytest.mark.parametrize("op,index,attrs,ndim,axes", [
    ("MatMul", 1, {}, 2, (1, 0)),  # B [K, N]
    ("MatMul", 1, {}, 3, (2, 1)),  # batched B [.., K, N]
    ("MatMul", 0, {}, 2, (0, 1)),  # a constant A [M, K]
    ("Gemm", 1, {"transB": 0}, 2, (1, 0)),
    ("Gemm", 1, {"transB": 1}, 2, (0, 1)),
    ("Conv", 1, {}, 4, (0, 1)),
    ("ConvTranspose", 1, {}, 4, (1, 0)),  # (I, O/g, k...)
    ("Gather", 0, {}, 2, (0, 1)),  # embedding rows
    ("LSTM", 1, {}, 3, (1, 2)), ("GRU", 2, {}, 3, (1, 2)), ("RNN", 1, {}, 3, (1, 2)),
    ("Einsum", 1, {}, 2, (0, 1)),  # unknown: the (out, in) convention
])
def test_role_table(op, index, attrs, ndim, axes):
    assert _role(op, index, **attrs).axes(ndim) == axes


def test_recipe_axis_grammar_and_the_report_keeps_rows(tmp_path):
    from qcore.errors import QuantizationError
    from qcore.recipes import parse_recipe
    from qcore.report import run_report

    r = parse_recipe("int8:per-axis/1")
    assert (r.granularity, r.axis, r.name) == ("per-axis", 1, "int8:per-axis/1")
    assert parse_recipe("int4:blocked32/0").axis == 0
    assert parse_recipe("int4:blocked32").axis is None
    with pytest.raises(QuantizationError, match="per-tensor has no axis"):
        parse_recipe("int8:per-tensor/0")
    w = arr(8, 64)
    assert fidelity.qdq(w, "int8:per-axis/1").scale.shape == (64,)
    with pytest.raises(QuantizationError, match="axis 2"):
        fidelity.qdq(w, "int8:per-axis/2")
    np.savez(tmp_path / "w.npz", w=w)
    rows = run_report(tmp_path / "w.npz", ["int8:per-axis/0", "int8:per-axis/1"]).rows
    assert (rows["error"] == "").all()
    by = rows.set_index("recipe")
    assert (by.loc["int8:per-axis/0", "axis"], by.loc["int8:per-axis/0", "scales"]) == (0, 8)
    assert (by.loc["int8:per-axis/1", "axis"], by.loc["int8:per-axis/1", "scales"]) == (1, 64)
    assert by.loc["int8:per-axis/1", "sqnr_db"] == pytest.approx(
        fidelity.qdq(w, "int8:per-axis/1").tensor_sqnr_db, rel=1e-9)


# ------------------------------------------------------ initializers listed as graph inputs


def listed_model(ir: int, opset: int):
    """x [1, 3, 8, 8] -> Conv (conv.w, conv.b) -> Relu -> Flatten -> MatMul mm.w [288, 32] ->
    Gemm fc.w [10, 32] transB=1 (+ fc.b); every initializer also listed as a graph input, as
    exporters before IR version 4 had to write them."""
    inits = {"conv.w": arr(8, 3, 3, 3, scale=0.3), "conv.b": arr(8), "mm.w": arr(288, 32, scale=0.1),
             "fc.w": arr(10, 32, scale=0.3), "fc.b": arr(10)}
    nodes = [helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("MatMul", ["f", "mm.w"], ["h"]),
             helper.make_node("Gemm", ["h", "fc.w", "fc.b"], ["y"], transB=1)]
    inputs = [vi("x", shape=[1, 3, 8, 8])] + [vi(k, shape=list(v.shape)) for k, v in inits.items()]
    g = helper.make_graph(nodes, "listed", inputs, [vi("y", shape=[1, 10])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir
    onnx.checker.check_model(m)
    return m


@pytest.mark.parametrize("ir,opset", [(3, 9), (3, 11), (8, 13)])
def test_initializers_listed_as_inputs_are_weights_the_tool_plans_and_exports(ir, opset):
    from qcore.model import calibrate as act_cal
    from qcore.model import qdq as act_qdq
    from qcore.model import sites as act_sites
    from qcore.model import staged as act_staged

    m = listed_model(ir, opset)
    recs = {r.key: r for r in qonnx.find_weights(m)}
    assert list(recs) == ["conv.w", "mm.w", "fc.w"]  # the rank-1 biases stay float
    assert all(r.is_input and r.overridable == (ir >= 4) for r in recs.values())
    assert recs["mm.w"].role.axes(2) == (1, 0) and recs["fc.w"].role.axes(2) == (0, 1)
    # the user feeds x alone; the initializers are the weights' values, as in onnxruntime
    feeds = graph.generate_inputs(m)
    assert list(feeds) == ["x"]
    with pytest.raises(graph.ModelError, match="unknown"):
        graph.check_inputs(m, dict(feeds, **{"mm.w": arr(288, 32)}))
    case = _cases(m, feeds)
    for a, b in zip(case.reference, graph.make_session(m).run(None, feeds)):
        np.testing.assert_array_equal(a, b)
    assert [i.name for i in case.runner.exposed.graph.input] == ["x", "conv.w", "mm.w", "fc.w"]
    for recipe in ("int8:per-axis", "int4:blocked32"):
        plan = Plan(8.0, {k: recipe for k in case.weights}, 0, 1, 0.0, 1.0)
        ex = export_plan(m, plan, case.arrays)
        onnx.checker.check_model(ex)
        # a replaced weight is listed no more; before IR 4 no initializer stays listed
        assert [i.name for i in ex.graph.input] == (["x"] if ir < 4 else ["x", "conv.b", "fc.b"])
        weights = planned_weights(case, plan)
        for a, b in zip(case.runner.run(feeds, weights), graph.make_session(ex).run(None, feeds)):
            np.testing.assert_array_equal(a, b)
    # one weight replaced through the prefix cache = the whole model run
    cache = graph.PrefixCache(case.runner, case.batches)
    assert cache.supports("mm.w") and cache.supports("fc.w")
    for key in ("mm.w", "fc.w"):
        w = case.arrays[key] * 1.5
        for a, b in zip(cache.run(key, w)[0], case.runner.run(feeds, {key: w})):
            np.testing.assert_array_equal(a, b)
    # the data inputs of the three weight consumers are activation sites, evaluated as
    # onnxruntime runs the QDQ export with the quantized sites
    sites = {s.name: s.consumers[0][3] for s in act_sites.find_sites(m)}
    assert sites == {"x": "conv.w", "f": "mm.w", "h": "fc.w"}
    specs = act_cal.specs_for(case, act_sites.parse_activations("dynamic"))
    fake = act_staged.runner_for(case).run(specs, weights)
    real = graph.make_session(act_qdq.insert_qdq(ex, specs)).run(None, feeds)
    for a, b in zip(fake, real):
        np.testing.assert_array_equal(a, b)


def test_the_report_and_the_model_tool_take_a_listed_model(tmp_path, capsys):
    from qcore.model.__main__ import main
    from qcore.report import run_report

    path = tmp_path / "old.onnx"
    onnx.save(listed_model(3, 9), path)
    rows = run_report(path, ["int8:per-axis"]).rows.set_index("tensor")
    assert (rows.loc[["conv.w", "mm.w", "fc.w"], "error"] == "").all()
    assert (rows.loc["mm.w", "axis"], rows.loc["fc.w", "axis"]) == (1, 0)
    for runtime, says in (("reference", "equal the fake-quant evaluation bit for bit"),
                          ("onnxruntime", "onnxruntime runs it")):  # fused: float rounding
        assert main([str(path), "--recipes", "int8:per-axis", "--budget", "9", "--runtime",
                     runtime, "--export", str(tmp_path / "q.onnx")]) == 0
        assert says in capsys.readouterr().out
    assert [i.name for i in onnx.load(tmp_path / "q.onnx").graph.input] == ["x"]


def _pytorch_0_3_model(name: str) -> Path:
    """One of the PyTorch 0.3 exports (IR version 3, opset 6) the onnx package ships."""
    import importlib.util

    root = Path(list(importlib.util.find_spec("onnx").submodule_search_locations)[0])
    path = root / "backend" / "test" / "data" / "pytorch-converted" / name
    if not (path / "model.onnx").is_file():
        pytest.skip(f"this onnx wheel ships no {name}")
    return path


@pytest.mark.parametrize("name", ["test_Conv2d_groups", "test_ConvTranspose2d", "test_Embedding"])
def test_a_real_ir3_export_is_planned_and_exported(name):
    d = _pytorch_0_3_model(name)
    m = graph.load_model(d / "model.onnx")
    assert m.ir_version == 3
    (rec,) = qonnx.find_weights(m)
    assert rec.is_input and not rec.overridable
    x = numpy_helper.to_array(onnx.load_tensor(str(d / "test_data_set_0" / "input_0.pb")))
    y = numpy_helper.to_array(onnx.load_tensor(str(d / "test_data_set_0" / "output_0.pb")))
    case = _cases(m, {"0": x})
    np.testing.assert_allclose(case.reference[0], y, rtol=1e-5, atol=1e-5)  # PyTorch's own output
    plan = Plan(8.0, {rec.key: "int8:per-axis"}, 0, 1, 0.0, 1.0)
    ex = export_plan(m, plan, case.arrays)
    assert [i.name for i in ex.graph.input] == ["0"]
    got = graph.make_session(ex).run(None, {"0": x})
    for a, b in zip(case.runner.run({"0": x}, planned_weights(case, plan)), got):
        np.testing.assert_array_equal(a, b)


def test_a_body_input_shadowing_a_body_initializer_is_no_weight():
    """A Loop body's inputs are always bound by the Loop: an initializer of the same name is
    never the value read, so it is not a weight; the main graph's listed initializers are."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"]),
         helper.make_node("MatMul", ["acc", "acc"], ["acc_out"])], "body",
        [vi("i", TensorProto.INT64, []), vi("cond", TensorProto.BOOL, []), vi("acc", shape=[4, 4])],
        [vi("cond_out", TensorProto.BOOL, []), vi("acc_out", shape=[4, 4])],
        [numpy_helper.from_array(arr(4, 4), "acc")])
    m = model_of([helper.make_node("MatMul", ["x", "w"], ["x2"]),
                  helper.make_node("Loop", ["n", "c", "x2"], ["y"], body=body)],
                 [vi("x", shape=[4, 4]), vi("n", TensorProto.INT64, []),
                  vi("c", TensorProto.BOOL, []), vi("w", shape=[4, 4])],
                 [vi("y", shape=[4, 4])], [numpy_helper.from_array(arr(4, 4), "w")])
    assert [(r.key, r.is_input, r.overridable) for r in qonnx.find_weights(m)] == [("w", True, True)]
