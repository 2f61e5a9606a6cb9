"""Issue 45: the model tool keeps its word on what users run.

Every export the tool writes here is run again in the session users run — onnxruntime with its
default graph optimizations — by this file alone (:func:`deployed_sqnr`), and its figure is
compared with the plan's stated one and with ``deploy.output_sqnr_db``. Integer outputs are
decisions (agreement, never SQNR); already-quantized models are named; every bad input is one
``error:`` line (exit 2) before the long part, or answered correctly; the bench, the report and
``--scheduler`` refuse what they cannot do before they start."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from model_cli import cli, refused  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TOL_DB = 0.05  # DESIGN.md §10: the deployed and the stated figure agree to 0.05 dB


# ------------------------------------------------------------------------- the outside world


def ort_run(model, feeds: dict, optimized: bool) -> list[np.ndarray]:
    """``model`` (a path or a proto) in onnxruntime: default optimizations (what users run) or
    none (the float reference), one thread, spinning off."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if not optimized:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    src = str(model) if isinstance(model, (str, Path)) else model.SerializeToString()
    s = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def sqnr_db(ref: list[np.ndarray], out: list[np.ndarray]) -> float:
    """−10·log10 of the mean over the float outputs of Σ (y − ŷ)² / Σ y² (DESIGN.md §9)."""
    ratios = []
    for y, yh in zip(ref, out):
        if np.asarray(y).dtype.kind != "f":
            continue
        y64, yh64 = np.asarray(y, np.float64), np.asarray(yh, np.float64)
        ratios.append(float(np.sum((y64 - yh64) ** 2)) / float(np.sum(y64 * y64)))
    m = float(np.mean(ratios))
    return np.inf if m == 0 else -10 * np.log10(m)


def deployed_sqnr(float_model, export, feeds: dict) -> float:
    """The export's figure as deployed: default-optimized onnxruntime against the float model."""
    return sqnr_db(ort_run(float_model, feeds, False), ort_run(export, feeds, True))


def _save(model, path: Path, **kw) -> Path:
    model.ir_version = 8
    onnx.save(model, path, **kw)
    return path


# ------------------------------------------------------------------------- models


def mlp(seed: int = 3, k: int = 64, n: int = 64, bias: float | None = None,
        scale: float = 1.0) -> onnx.ModelProto:
    """x (b, K) -> MatMul w1 [-> Add b1] -> Relu -> MatMul w2 -> y (b, 16)."""
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((k, n)) * scale).astype(np.float32)
    w2 = (rng.standard_normal((n, 16)) * 0.3).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h0"])]
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")]
    h = "h0"
    if bias is not None:
        inits.append(numpy_helper.from_array(np.full(n, bias, np.float32), "b1"))
        nodes.append(helper.make_node("Add", ["h0", "b1"], ["h"]))
        h = "h"
    nodes += [helper.make_node("Relu", [h], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                       ["b", k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 16])],
                          initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def linear_bias(seed: int = 3) -> onnx.ModelProto:
    """x (b, 64) -> MatMul w1 (weights ~1e-4) -> Add b1 (ones) -> y (b, 16)."""
    w1 = (np.random.default_rng(seed).standard_normal((64, 16)) * 1e-4).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h0"]),
             helper.make_node("Add", ["h0", "b1"], ["y"])]
    g = helper.make_graph(nodes, "bias", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                        ["b", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 16])],
                          initializer=[numpy_helper.from_array(w1, "w1"),
                                       numpy_helper.from_array(np.ones(16, np.float32), "b1")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def classifier(seed: int = 4) -> onnx.ModelProto:
    """x (b, 32) -> MatMul w1 -> logits (b, 20) -> ArgMax -> label (b,) int64: both outputs."""
    w1 = np.random.default_rng(seed).standard_normal((32, 20)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["logits"]),
             helper.make_node("ArgMax", ["logits"], ["label"], axis=1, keepdims=0)]
    g = helper.make_graph(nodes, "clf", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                       ["b", 32])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["b", 20]),
                           helper.make_tensor_value_info("label", TensorProto.INT64, ["b"])],
                          initializer=[numpy_helper.from_array(w1, "w1")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def index_only(seed: int = 4) -> onnx.ModelProto:
    """The classifier whose one output is the ArgMax index."""
    m = classifier(seed)
    del m.graph.output[0]
    return m


def lstm_model(seed: int = 5, hidden: int = 8) -> onnx.ModelProto:
    """x (T, b, 4) -> LSTM (W, R, B) -> Y: B is [1, 8·hidden], rank 2 but a bias."""
    rng = np.random.default_rng(seed)
    W = (rng.standard_normal((1, 4 * hidden, 4)) * 0.3).astype(np.float32)
    R = (rng.standard_normal((1, 4 * hidden, hidden)) * 0.3).astype(np.float32)
    B = (rng.standard_normal((1, 8 * hidden)) * 0.3).astype(np.float32)
    n = helper.make_node("LSTM", ["x", "W", "R", "B"], ["Y"], hidden_size=hidden)
    g = helper.make_graph([n], "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      [3, 2, 4])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT,
                                                         [3, 1, 2, hidden])],
                          initializer=[numpy_helper.from_array(W, "W"),
                                       numpy_helper.from_array(R, "R"),
                                       numpy_helper.from_array(B, "B")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def stateful_int8() -> onnx.ModelProto:
    """x (1, 4) float and s (1, 4) int8 -> y = x @ w + Cast(s); s_next = s (int8) and
    f_next = y (float): a state fed back must keep its type and range."""
    w = np.random.default_rng(6).standard_normal((4, 4)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]),
             helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["xw", "sf"], ["y"]),
             helper.make_node("Identity", ["s"], ["s_next"])]
    g = helper.make_graph(nodes, "st", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      [1, 4]),
                                        helper.make_tensor_value_info("s", TensorProto.INT8,
                                                                      [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4]),
                           helper.make_tensor_value_info("s_next", TensorProto.INT8, [1, 4])],
                          initializer=[numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def dynamic_quantized(tmp: Path) -> Path:
    """mlp() through onnxruntime's quantize_dynamic: an already-quantized model."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src = _save(mlp(), tmp / "f.onnx")
    dst = tmp / "already.onnx"
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
    return dst


@pytest.fixture(scope="module")
def d(tmp_path_factory):
    d = tmp_path_factory.mktemp("deploy")
    rng = np.random.default_rng(0)
    np.savez(d / "x64.npz", x=rng.standard_normal((32, 64)).astype(np.float32))
    np.savez(d / "x32.npz", x=rng.standard_normal((32, 32)).astype(np.float32))
    np.savez(d / "tiny_x.npz", x=(rng.standard_normal((32, 64)) * 1e-4).astype(np.float32))
    _save(mlp(), d / "mlp.onnx")
    _save(linear_bias(), d / "bias.onnx")
    _save(classifier(), d / "clf.onnx")
    _save(index_only(), d / "index.onnx")
    return d


def _feeds(path: Path) -> dict:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def _plan(path: Path) -> dict:
    return json.loads(path.read_text())


#: The one refusal an export may meet on a CPU without VNNI: onnxruntime's u8 x s8 kernels
#: sum products in pairs in int16 and saturate on full-range 8-bit weights (measured here: a
#: static int8 export states 37.88 dB and runs at 23.48 dB; with 7-bit weight codes both agree).
SATURATES = "saturate"


def _export_holds(d: Path, tmp: Path, capsys, model: str, inputs: str, *extra,
                  may_refuse: str | None = None) -> dict | None:
    """Run the tool with --export and --plan; the export as deployed (checked here, in
    onnxruntime with default optimizations) equals the stated figure and deploy's figure to
    0.05 dB. Returns the plan; or, where ``may_refuse`` is given, None after a refusal naming
    it whose export is not left behind."""
    q, p = tmp / "q.onnx", tmp / "p.json"
    rc, out, err = cli([d / model, "--inputs", d / inputs, "--export", q, "--plan", p,
                        "--latency-repeats", "1", *extra], capsys)
    if may_refuse and rc == 2:
        last = err.strip().splitlines()[-1]
        assert last.startswith("error: ") and "refused" in last and may_refuse in last, err
        assert not q.exists() and not p.exists()
        return None
    assert rc == 0, err
    plan = _plan(p)
    here = deployed_sqnr(d / model, q, _feeds(d / inputs))
    stated = float(plan["output_sqnr_db"])
    assert float(plan["deploy"]["output_sqnr_db"]) == pytest.approx(here, abs=1e-6), \
        plan["deploy"]
    if np.isfinite(stated) or np.isfinite(here):
        assert abs(here - stated) <= TOL_DB, (here, stated, out)
    return plan


# ------------------------------------------------------------------------- checked as deployed


def test_int8_per_axis_weights_deploy_at_their_stated_figure(d, tmp_path, capsys):
    """Before: 41.53 dB stated, 40.15 dB as deployed (8-bit DQ -> MatMul fused into MatMulNBits
    at accuracy level 4)."""
    _export_holds(d, tmp_path, capsys, "mlp.onnx", "x64.npz", "--recipes", "int8:per-axis",
                  "--budget", "9", "--no-float")


@pytest.mark.parametrize("kind", ["float8e4m3fn", "float8e5m2fnuz"])
def test_float8_activations_after_a_relu_deploy_at_their_stated_figure(d, tmp_path, capsys,
                                                                        kind):
    """Before: 27.98 dB stated, 0.12 dB deployed (the optimizer drops the Relu in front of a
    float8 QuantizeLinear) while the CLI printed "equal ... bit for bit"."""
    _export_holds(d, tmp_path, capsys, "mlp.onnx", "x64.npz", "--recipes", "int8:per-axis",
                  "--budget", "33", "--activations", f"static:{kind}")


def test_a_bias_beyond_int32_keeps_the_layer_honest(d, tmp_path, capsys):
    """Scales ~1e-6 and a bias of 1: round(b / (s_a·s_w)) is far beyond 2^31 − 1, so the
    layer keeps its float bias (the qdq form). Before: an int32 bias clipped at 2^31 − 1,
    41.67 dB stated, -0.0 dB deployed (on the two-layer model)."""
    plan = _export_holds(d, tmp_path, capsys, "bias.onnx", "tiny_x.npz", "--recipes",
                         "int8:per-axis", "--budget", "9", "--no-float", "--activations",
                         "static:int8")
    assert plan["forms"] == {"qdq": 1}
    assert float(plan["output_sqnr_db"]) > 20
    q = onnx.load(tmp_path / "q.onnx")
    assert not [t for t in q.graph.initializer if t.data_type == TensorProto.INT32]


def test_external_data_weights_export_for_onnxruntime(d, tmp_path, capsys):
    """Before: refused at --export ("absolute path") though --runtime reference exports it."""
    m = tmp_path / "ext"
    m.mkdir()
    _save(mlp(), m / "ext.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
          location="ext.bin", size_threshold=0)
    (m / "x64.npz").write_bytes((d / "x64.npz").read_bytes())
    _export_holds(m, tmp_path, capsys, "ext.onnx", "x64.npz", "--recipes", "int8:per-axis",
                  "--budget", "9", "--no-float")


@pytest.mark.parametrize("extra", [
    ["--recipes", "int4:blocked32", "--budget", "5", "--no-float"],
    ["--recipes", "int8:per-axis", "--budget", "9", "--no-float", "--activations", "dynamic"],
    ["--recipes", "int8:per-axis", "--budget", "9", "--no-float", "--activations",
     "static:int8"],
    ["--recipes", "int8:per-axis,uint8:per-tensor,int4:blocked32", "--budget", "6"],
])
def test_every_export_deploys_at_its_stated_figure(d, tmp_path, capsys, extra):
    w8a8 = "--activations" in extra and "static:float8e4m3fn" not in extra
    _export_holds(d, tmp_path, capsys, "mlp.onnx", "x64.npz", *extra,
                  may_refuse=SATURATES if w8a8 else None)


def test_run_deployed_is_public_and_follows_fidelity(d):
    from qcore.model.deployed import run_deployed

    feeds = _feeds(d / "x32.npz")
    model = onnx.load(d / "clf.onnx")
    float_outs = ort_run(model, feeds, False)
    r = run_deployed(model, feeds, float_outs, names=["logits", "label"], threads=1)
    assert r.output_sqnr_db == np.inf and r.outputs["label"]["agreement"] == 1.0
    np.testing.assert_array_equal(r.values[1], float_outs[1])


# ------------------------------------------------------------------------- decisions


def test_an_argmax_output_is_scored_by_agreement_never_sqnr(d, tmp_path, capsys):
    p = tmp_path / "p.json"
    rc, out, err = cli([d / "clf.onnx", "--inputs", d / "x32.npz", "--recipes",
                        "int4:per-tensor", "--budget", "5", "--no-float", "--plan", p], capsys)
    assert rc == 0, err
    plan = _plan(p)
    measured = plan["measured"]
    label = measured["outputs"]["label"]
    assert "sqnr_db" not in label and 0 <= label["agreement"] <= 1
    # the model figure is the logits' alone, computed here from onnxruntime
    from qcore.model.fidelity import qdq

    w = numpy_helper.to_array(onnx.load(d / "clf.onnx").graph.initializer[0])
    q = qdq(w, "int4:per-tensor").x_hat
    m = classifier()
    m.graph.initializer[0].CopyFrom(numpy_helper.from_array(q, "w1"))
    feeds = _feeds(d / "x32.npz")
    ref, got = ort_run(classifier(), feeds, False), ort_run(m, feeds, False)
    assert measured["output_sqnr_db"] == pytest.approx(sqnr_db(ref[:1], got[:1]), abs=1e-6)
    assert label["agreement"] == pytest.approx(float(np.mean(ref[1] == got[1])))
    assert "agreement" in out


def test_an_index_only_model_is_planned_on_agreement_not_inf(d, tmp_path, capsys):
    p = tmp_path / "p.json"
    rc, out, err = cli([d / "index.onnx", "--inputs", d / "x32.npz", "--recipes",
                        "int4:per-tensor,int8:per-axis", "--budget", "6", "--plan", p], capsys)
    assert rc == 0, err
    plan = _plan(p)
    assert "agreement" in plan["measured"]["outputs"]["label"]
    assert "predicted inf" not in out


def test_logits_apply_only_to_float_outputs(d, tmp_path, capsys):
    refused([d / "index.onnx", "--inputs", d / "x32.npz", "--recipes", "int8:per-axis",
             "--logits"], capsys, "--logits")


def _planned(model: onnx.ModelProto, plan: dict) -> onnx.ModelProto:
    """``model`` with each weight the plan quantizes replaced by its fake-quant values (the
    recipe's QuantizeLinear -> DequantizeLinear laid out by the weight's role,
    :func:`qcore.model.fidelity.qdq`)."""
    from qcore.model.fidelity import qdq
    from qcore.model.graph import weight_records

    roles = {r.name: r.role for r in weight_records(model)}
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for t in m.graph.initializer:
        r = plan["recipes"].get(t.name)
        if r and r != "float32":
            x_hat = qdq(numpy_helper.to_array(t), r, roles[t.name]).x_hat
            t.CopyFrom(numpy_helper.from_array(x_hat, t.name))
    return m


def test_an_output_slice_has_its_own_figure(d, tmp_path, capsys):
    """Each slice's SQNR and max |Δ| equal those computed here from onnxruntime on the planned
    weights; the model figure stays the whole output's unless --outputs names a slice."""
    p = tmp_path / "p.json"
    rc, out, err = cli([d / "mlp.onnx", "--inputs", d / "x64.npz", "--recipes", "int4:per-axis",
                        "--budget", "5", "--no-float", "--plan", p,
                        "--slice", "first=y:1:0:4,rest=y:1:4:16"], capsys)
    assert rc == 0, err
    plan = _plan(p)
    outs = plan["measured"]["outputs"]
    assert set(outs) >= {"y", "first", "rest"}
    feeds = _feeds(d / "x64.npz")
    ref = ort_run(mlp(), feeds, False)[0]
    got = ort_run(_planned(mlp(), plan), feeds, False)[0]
    for name, cols in (("first", slice(0, 4)), ("rest", slice(4, 16)), ("y", slice(None))):
        assert outs[name]["sqnr_db"] == pytest.approx(sqnr_db([ref[:, cols]], [got[:, cols]]),
                                                      abs=1e-6), name
        assert outs[name]["max_abs"] == pytest.approx(
            float(np.max(np.abs(ref[:, cols].astype(np.float64) - got[:, cols]))), rel=1e-6)
    assert plan["measured"]["output_sqnr_db"] == pytest.approx(outs["y"]["sqnr_db"], abs=1e-9)
    assert "slice first (y[0:4] along axis 1)" in out
    # named in --outputs, a slice is the model figure
    rc, out, err = cli([d / "mlp.onnx", "--inputs", d / "x64.npz", "--recipes", "int4:per-axis",
                        "--budget", "5", "--no-float", "--plan", p, "--outputs", "first",
                        "--slice", "first=y:-1:0:4"], capsys)
    assert rc == 0, err
    plan = _plan(p)
    assert plan["measured"]["output_sqnr_db"] == pytest.approx(
        plan["measured"]["outputs"]["first"]["sqnr_db"], abs=1e-9)


def test_a_slice_of_a_decision_is_scored_by_agreement(d, tmp_path, capsys):
    p = tmp_path / "p.json"
    rc, out, err = cli([d / "clf.onnx", "--inputs", d / "x32.npz", "--recipes",
                        "int4:per-tensor", "--budget", "5", "--no-float", "--plan", p,
                        "--slice", "head=label:0:0:8"], capsys)
    assert rc == 0, err
    plan = _plan(p)
    feeds = _feeds(d / "x32.npz")
    ref = ort_run(classifier(), feeds, False)[1]
    got = ort_run(_planned(classifier(), plan), feeds, False)[1]
    head = plan["measured"]["outputs"]["head"]
    assert "sqnr_db" not in head
    assert head["agreement"] == pytest.approx(float(np.mean(ref[:8] == got[:8])))


@pytest.mark.parametrize("value, word", [
    ("first", "NAME=OUTPUT:AXIS:START:STOP"),
    ("first=y:1:0", "NAME=OUTPUT:AXIS:START:STOP"),
    ("first=y:a:0:4", "integers"),
    ("first=y:1:4:4", "START < STOP"),
    ("first=y:1:-1:4", "START < STOP"),
    ("1st=y:1:0:4", "name"),
    ("a=y:1:0:4,a=y:1:4:8", "twice"),
    (",", "NAME=OUTPUT"),
])
def test_a_bad_slice_is_refused_before_loading(d, capsys, value, word):
    line = refused([d / "mlp.onnx", "--inputs", d / "x64.npz", "--slice", value], capsys, word)
    assert "--slice" in line


@pytest.mark.parametrize("value, word", [
    ("first=nope:1:0:4", "not an output"),
    ("y=y:1:0:4", "already an output"),
    ("first=y:2:0:4", "AXIS must be in [-2, 1]"),
    ("first=y:1:0:17", "STOP must be <= 16"),
])
def test_a_slice_the_model_lacks_is_refused(d, capsys, value, word):
    line = refused([d / "mlp.onnx", "--inputs", d / "x64.npz", "--recipes", "int8:per-axis",
                    "--slice", value], capsys, word)
    assert "--slice" in line


def test_a_slice_named_in_outputs_is_known(d, capsys):
    refused([d / "mlp.onnx", "--inputs", d / "x64.npz", "--recipes", "int8:per-axis",
             "--outputs", "nope", "--slice", "first=y:1:0:4"], capsys, "first")


@pytest.fixture
def metric_module(tmp_path):
    """A module ``my_metric`` on sys.path: top1 (agreement of the first output's argmax), and
    functions that raise, return NaN, a string, an array."""
    mod = tmp_path / "my_metric_q45.py"
    mod.write_text("import numpy as np\n"
                   "def top1(ref, out):\n"
                   "    return float(np.mean(ref[0].argmax(-1) == out[0].argmax(-1)))\n"
                   "def boom(ref, out):\n"
                   "    raise ValueError('no labels here')\n"
                   "def nan(ref, out):\n"
                   "    return float('nan')\n"
                   "def text(ref, out):\n"
                   "    return 'good'\n"
                   "def many(ref, out):\n"
                   "    return np.ones(3)\n"
                   "def picky(ref, out):\n"
                   "    if not np.array_equal(ref[0], out[0]):\n"
                   "        raise RuntimeError('only exact outputs')\n"
                   "    return 1.0\n"
                   "NOT_A_FUNCTION = 3\n")
    sys.path.insert(0, str(tmp_path))
    yield "my_metric_q45"
    sys.path.remove(str(tmp_path))
    sys.modules.pop("my_metric_q45", None)


def test_a_user_metric_and_its_floor(d, tmp_path, capsys, metric_module):
    """The metric is the user's function of the float and the quantized outputs (checked here
    from onnxruntime on the planned weights) and the plan keeps the floor, as deployed too.
    (int8:per-axis on the 32 x 20 weight costs 9.25 bits per weight: its 20 float32 scales.)"""
    p, q = tmp_path / "p.json", tmp_path / "q.onnx"
    rc, out, err = cli([d / "clf.onnx", "--inputs", d / "x32.npz", "--recipes",
                        "int4:per-tensor,int8:per-axis", "--budget", "10", "--plan", p,
                        "--metric", f"{metric_module}:top1", "--min-metric", "0.99",
                        "--export", q, "--latency-repeats", "1"], capsys)
    assert rc == 0, err
    plan = _plan(p)
    assert plan["measured"]["metric"] >= 0.99
    feeds = _feeds(d / "x32.npz")
    ref = ort_run(classifier(), feeds, False)
    got = ort_run(_planned(classifier(), plan), feeds, False)
    assert plan["measured"]["metric"] == float(np.mean(ref[0].argmax(-1) == got[0].argmax(-1)))
    dep = ort_run(q, feeds, True)
    assert plan["deploy"]["metric"] == float(np.mean(ref[0].argmax(-1) == dep[0].argmax(-1)))
    assert plan["min_metric"]["met"] and plan["min_metric"]["min"] == 0.99
    assert "metric" in out and "keeps --min-metric 0.99" in out


def test_a_floor_no_plan_keeps_is_not_met(d, tmp_path, capsys, metric_module):
    """A floor above what any plan reaches: refined, then 'not met', exit 1, no export."""
    p, q = tmp_path / "p.json", tmp_path / "q.onnx"
    rc, out, err = cli([d / "clf.onnx", "--inputs", d / "x32.npz", "--recipes",
                        "int4:per-tensor", "--budget", "5", "--no-float", "--plan", p,
                        "--metric", f"{metric_module}:top1", "--min-metric", "1.5",
                        "--export", q], capsys)
    assert rc == 1, err
    plan = _plan(p)
    assert plan["min_metric"]["met"] is False and "refine" in plan
    assert "not met" in out and not q.exists()


def test_the_metric_is_in_every_table_row(d, tmp_path, capsys, metric_module):
    t = tmp_path / "t.csv"
    rc, out, err = cli([d / "clf.onnx", "--inputs", d / "x32.npz", "--recipes",
                        "int4:per-tensor", "--metric", f"{metric_module}:top1", "--out", t],
                       capsys)
    assert rc == 0, err
    import csv

    rows = list(csv.DictReader(t.open()))
    assert rows and all(0 <= float(r["metric"]) <= 1 for r in rows)


@pytest.mark.parametrize("args, word", [
    (["--metric", "no_such_module_qcore:f"], "does not import"),
    (["--metric", "nocolon"], "MODULE:FUNCTION"),
    (["--metric", ":f"], "MODULE:FUNCTION"),
    (["--metric", "{m}:absent"], "no function 'absent'"),
    (["--metric", "{m}:NOT_A_FUNCTION"], "no function"),
    (["--min-metric", "0.5"], "give --metric"),
    (["--metric", "{m}:top1", "--min-metric", "nan", "--budget", "9"], "finite"),
    (["--metric", "{m}:top1", "--min-metric", "0.5"], "--budget"),
    (["--metric", "{m}:top1", "--workers", "2"], "--workers"),
    (["--slice", "a=logits:1:0:4", "--feedback", "logits=x"], "--feedback"),
    (["--metric", "{m}:top1", "--min-sqnr", "20"], "--min-sqnr"),
])
def test_a_bad_metric_is_refused_before_loading(d, capsys, metric_module, args, word):
    args = [a.replace("{m}", metric_module) for a in args]
    line = refused([d / "clf.onnx", "--inputs", d / "x32.npz", *args], capsys, word)
    assert "--metric" in line or "--slice" in line or "--min-metric" in line


def test_a_metric_that_raises_on_a_quantized_run_is_one_line(d, capsys, metric_module):
    """Only a quantized run shows it (the float outputs pass): after the progress bar, one
    error line naming --metric and what it raised, exit 2, never a traceback."""
    rc, out, err = cli([d / "clf.onnx", "--inputs", d / "x32.npz", "--recipes",
                        "int4:per-tensor", "--metric", f"{metric_module}:picky"], capsys)
    errors = [x for x in err.splitlines() if x.startswith("error: ")]
    assert rc == 2 and len(errors) == 1 and err.strip().splitlines()[-1] == errors[0], err
    assert "Traceback" not in err and "unexpected" not in errors[0]
    line = errors[0]
    assert "--metric" in line and "raised RuntimeError on the quantized outputs" in line
    assert "only exact" in line


@pytest.mark.parametrize("fn, word", [("boom", "raised ValueError"), ("nan", "finite"),
                                      ("text", "finite"), ("many", "finite")])
def test_a_metric_that_fails_on_the_float_outputs_is_refused(d, capsys, metric_module, fn,
                                                             word):
    line = refused([d / "clf.onnx", "--inputs", d / "x32.npz", "--recipes", "int8:per-axis",
                    "--metric", f"{metric_module}:{fn}"], capsys, word)
    assert "--metric" in line


# ------------------------------------------------------------------------- already quantized


def test_an_already_quantized_model_is_named_and_left_alone(tmp_path, capsys):
    path = dynamic_quantized(tmp_path)
    line = refused([path, "--recipes", "int8:per-axis"], capsys, "already quantized")
    assert "--force" in line and "MatMulInteger" in line


def test_force_measures_only_the_float_remainder(tmp_path, capsys):
    path = dynamic_quantized(tmp_path)
    rc, out, err = cli([path, "--recipes", "int8:per-axis", "--force", "--out",
                        tmp_path / "t.csv"], capsys)
    assert rc == 0 or rc == 2, err
    assert "already quantized" in (out + err)


def test_a_refined_plan_states_its_deployed_figure(d, tmp_path, capsys):
    """--refine with --export: the refinement's final figure is the plan's, and the figure it
    states as deployed is the export's in a default-optimized session (computed here)."""
    plan = _export_holds(d, tmp_path, capsys, "mlp.onnx", "x64.npz", "--recipes",
                         "int4:per-axis,int8:per-axis", "--budget", "6", "--refine", "4")
    r = plan["refine"]
    assert r["output_sqnr_db"] == plan["output_sqnr_db"]
    feeds = _feeds(d / "x64.npz")
    got = deployed_sqnr(mlp(), tmp_path / "q.onnx", feeds)
    assert r["output_sqnr_db_deployed"] == pytest.approx(got, abs=1e-6)
    assert abs(r["output_sqnr_db_deployed"] - r["output_sqnr_db"]) <= TOL_DB


def test_a_slice_is_measured_as_deployed(d, tmp_path, capsys):
    plan = _export_holds(d, tmp_path, capsys, "mlp.onnx", "x64.npz", "--recipes",
                         "int8:per-axis", "--budget", "9", "--no-float", "--slice",
                         "first=y:1:0:4")
    feeds = _feeds(d / "x64.npz")
    ref = ort_run(mlp(), feeds, False)[0]
    got = ort_run(tmp_path / "q.onnx", feeds, True)[0]
    assert plan["deploy"]["outputs"]["first"]["sqnr_db"] == pytest.approx(
        sqnr_db([ref[:, :4]], [got[:, :4]]), abs=1e-6)


def half_quantized(tmp: Path) -> Path:
    """mlp() with its first MatMul through onnxruntime's quantize_dynamic: w1 quantized
    (MatMulInteger), w2 still float (the float remainder)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    m = mlp()
    for i, n in enumerate(m.graph.node):
        n.name = f"n{i}"
    src = _save(m, tmp / "f.onnx")
    dst = tmp / "half.onnx"
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, nodes_to_quantize=["n0"])
    return dst


def _report(argv, capsys) -> tuple[int, str, str]:
    from qcore.report.__main__ import main as report_main

    rc = report_main([str(a) for a in argv] + ["--no-progress"])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_the_report_names_an_already_quantized_model(tmp_path, capsys):
    """The report refuses it as the model tool does, naming the quantized nodes, instead of
    reporting its scales as tensors."""
    path = half_quantized(tmp_path)
    rc, out, err = _report([path, "--recipes", "int8:per-axis"], capsys)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert "already quantized" in lines[0] and "MatMulInteger" in lines[0]
    assert "--force" in lines[0] and not out


def test_the_report_with_force_reports_only_the_float_remainder(tmp_path, capsys):
    path = half_quantized(tmp_path)
    t = tmp_path / "r.csv"
    rc, out, err = _report([path, "--recipes", "int8:per-axis", "--force", "--out", t], capsys)
    assert rc == 0, err
    assert "already quantized" in out and "float remainder" in out
    import csv

    rows = list(csv.DictReader(t.open()))
    assert {r["tensor"] for r in rows} == {"w2"}
    rc, out, err = _report([path, "--list"], capsys)
    assert rc == 0 and "read by a" in out


# ------------------------------------------------------------------------- weights, bits, progress


def test_recurrent_biases_stay_float(tmp_path):
    from qcore.model.graph import weight_records

    keys = {r.name for r in weight_records(lstm_model())}
    assert keys == {"W", "R"}


@pytest.mark.parametrize("recipe", ["int8:per-axis", "int4:blocked32"])
def test_plan_bits_are_the_bits_written(d, tmp_path, capsys, recipe):
    """An export drops zero points its kernel does not read (all-zero int8 ones, MatMulNBits'
    implicit ones); the plan counted them (8.043 vs 8.038 bits per weight before)."""
    p, q = tmp_path / "p.json", tmp_path / "q.onnx"
    rc, out, err = cli([d / "mlp.onnx", "--inputs", d / "x64.npz", "--recipes", recipe,
                        "--budget", "9", "--no-float", "--plan", p, "--export", q,
                        "--latency-repeats", "1"], capsys)
    assert rc == 0, err
    plan = _plan(p)
    model = onnx.load(q)
    from qcore.formats import get_format

    written = 0
    for t in model.graph.initializer:
        if t.name.split(".")[0] in ("w1", "w2") and t.name not in ("w1", "w2"):
            written += int(np.prod(t.dims)) * get_format(t.data_type).bits
    assert plan["bits"] == written
    assert plan["bits_per_element"] == pytest.approx(written / (64 * 64 + 64 * 16))


def test_sensitivity_measures_only_what_can_be_exported(d, tmp_path, capsys):
    t = tmp_path / "t.csv"
    rc, out, err = cli([d / "mlp.onnx", "--inputs", d / "x64.npz", "--recipes",
                        "int8:per-axis,mxfp4", "--budget", "9", "--export", tmp_path / "q.onnx",
                        "--out", t, "--latency-repeats", "1"], capsys)
    assert rc == 0, err
    assert "mxfp4" not in t.read_text()
    bar = [ln for ln in err.splitlines() if ln.startswith("sensitivity")][-1]
    assert "2/2" in bar, bar


# ------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("extra,word", [
    (["--activations", "dynamic", "--float-activations", "1"], "--budget"),
    (["--refine", "3"], "--budget"),
])
def test_flags_that_need_a_budget(d, capsys, extra, word):
    refused([d / "mlp.onnx", "--inputs", d / "x64.npz", "--recipes", "int8:per-axis", *extra],
            capsys, word)


def test_the_plan_never_overwrites_the_calibration_file(d, tmp_path, capsys):
    cal = tmp_path / "cal.npz"
    cal.write_bytes((d / "x64.npz").read_bytes())
    refused([d / "mlp.onnx", "--inputs", d / "x64.npz", "--recipes", "int8:per-axis",
             "--budget", "9", "--activations", "static:int8", "--calibrate", cal, "--plan", cal],
            capsys, "same file")
    assert cal.read_bytes() == (d / "x64.npz").read_bytes()


@pytest.mark.parametrize("pair,state,word", [
    ("s_next=s", np.full((1, 4), 300, np.int64), "wrap"),
    ("s_next=s", np.full((1, 4), 1.5, np.float32), "int8"),
    ("y=s", np.zeros((1, 4), np.int8), "float32"),  # a float output fed to an int8 input
])
def test_a_fed_back_state_keeps_its_type(tmp_path, capsys, pair, state, word):
    from qcore.model.feedback import load_fed_back_case
    from qcore.model.graph import ModelError

    path = _save(stateful_int8(), tmp_path / "st.onnx")
    x = np.random.default_rng(1).standard_normal((3, 1, 4)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x, s=state)
    refused([path, "--inputs", tmp_path / "in.npz", "--feedback", pair, "--recipes",
             "int8:per-axis"], capsys, word)
    with pytest.raises(ModelError, match=word):
        load_fed_back_case(onnx.load(path), {"x": x, "s": state}, pair)


def test_a_feedback_inputs_file_gets_the_header_checks(tmp_path, capsys):
    path = _save(stateful_int8(), tmp_path / "st.onnx")
    import zipfile

    bomb = tmp_path / "bomb.npz"
    with zipfile.ZipFile(bomb, "w") as zf:
        import io

        hdr = io.BytesIO()
        np.lib.format.write_array_header_1_0(hdr, {"descr": "<f4", "fortran_order": False,
                                                  "shape": (2**28, 1, 4)})
        zf.writestr("x.npy", hdr.getvalue() + bytes(64))
    refused([path, "--inputs", bomb, "--feedback", "s_next=s", "--recipes", "int8:per-axis"],
            capsys, "GiB")


def test_a_feedback_state_of_a_huge_dim_is_refused(tmp_path, capsys):
    m = stateful_int8()
    for vi in list(m.graph.input) + list(m.graph.output):
        if vi.name in ("s", "s_next"):
            vi.type.tensor_type.shape.dim[0].dim_param = "h"
            vi.type.tensor_type.shape.dim[1].dim_param = "h"  # h x h int8: 1 PiB at 2^25
    path = _save(m, tmp_path / "st.onnx")
    np.savez(tmp_path / "in.npz", x=np.zeros((2, 1, 4), np.float32))
    refused([path, "--inputs", tmp_path / "in.npz", "--feedback", "s_next=s", "--dim",
             "33554432", "--recipes", "int8:per-axis"], capsys, "--dim")


def test_an_infinite_site_value_is_refused_in_calibration(d, tmp_path, capsys):
    x = _feeds(d / "x64.npz")["x"].copy()
    w1 = numpy_helper.to_array(mlp().graph.initializer[0])
    x[0] = 3e37 * np.sign(w1[:, 0])  # finite, but h[0, 0] = 3e37 * sum|w1[:, 0]| is +Inf
    np.savez(tmp_path / "cal.npz", x=x)
    refused([d / "mlp.onnx", "--inputs", d / "x64.npz", "--recipes", "int8:per-axis",
             "--activations", "static:int8", "--calibrate", tmp_path / "cal.npz"], capsys,
            "Inf")


@pytest.mark.parametrize("scale,mode", [(0.0, "static"), (np.nan, "static"), (0.1, "nope")])
def test_insert_qdq_refuses_a_spec_it_cannot_write(scale, mode):
    from qcore.errors import QuantizationError
    from qcore.model.qdq import insert_qdq
    from qcore.model.sites import ActivationSpec

    spec = ActivationSpec("x", mode, "int8", np.float32(scale), np.int8(0))
    with pytest.raises(QuantizationError):
        insert_qdq(mlp(), [spec])


def test_calibrate_with_no_batches_names_the_site():
    from qcore.errors import QuantizationError
    from qcore.model.calibrate import calibrate
    from qcore.model.sites import parse_activations

    with pytest.raises(QuantizationError, match="x"):
        calibrate([], "x", parse_activations("static:int8"))


def test_two_initializers_of_one_name_are_refused(tmp_path, capsys):
    m = mlp()
    dup = numpy_helper.from_array(np.ones((64, 64), np.float32), "w1")
    m.graph.initializer.append(dup)
    path = _save(m, tmp_path / "dup.onnx")
    refused([path, "--recipes", "int8:per-axis"], capsys, "'w1'")


# ------------------------------------------------------------------------- bench, report, dask


@pytest.mark.parametrize("argv,word", [
    (["--models", "--repeats", "0"], "--repeats 0"),
    (["--models", "--sentences", "-1"], "--sentences -1"),
    (["--models", "--sentences", "100000"], "--sentences 100000"),
    (["--models", "--json", "/nonexistent-qcore/x.json"], "--json"),
    (["--quick", "--markdown", "/nonexistent-qcore/m.md"], "--markdown"),
])
def test_the_bench_refuses_before_it_loads_or_times(argv, word):
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "qcore.bench", *argv], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert word in lines[0] and not r.stdout, (lines, r.stdout)
    assert time.perf_counter() - t0 < 60  # no MiniLM, no benchmark ran


def test_a_huge_block_size_is_one_error_line(tmp_path, capsys):
    from qcore.report.__main__ import main as report_main

    np.save(tmp_path / "w.npy", np.ones((4, 4), np.float32))
    rc = report_main([str(tmp_path / "w.npy"), "--recipes", "int4:blocked" + "9" * 400,
                      "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: "), err
    assert "block" in err[0]


def test_a_scheduler_that_never_answers_is_given_up_within_its_timeout():
    from qcore.distributed import check_scheduler
    from qcore.errors import QuantizationError

    pytest.importorskip("distributed")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held = []

    def accept():
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return
    threading.Thread(target=accept, daemon=True).start()
    try:
        t0 = time.monotonic()
        with pytest.raises(QuantizationError, match="no Dask scheduler answers"):
            check_scheduler(f"tcp://127.0.0.1:{server.getsockname()[1]}", 2.0)
        assert time.monotonic() - t0 < 2.0 + 1.0
    finally:
        server.close()
        for c in held:
            c.close()
