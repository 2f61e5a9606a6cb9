"""Every output measured (docs/semantics.md, Definitions): per-output SQNR and max |Δ|, the
model figure as the mean of each output's noise relative to its own power, ``outputs=``."""

from __future__ import annotations

import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402

from qcore.model import fidelity, graph  # noqa: E402
from qcore.model.sensitivity import measure  # noqa: E402


def two_outputs():
    """small = x @ w1 (power ~16); big = 1000 · (x @ w2) (power ~1.6e7)."""
    rng = np.random.default_rng(3)
    w1, w2 = rng.standard_normal((16, 8)).astype(np.float32), \
        rng.standard_normal((16, 8)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["small"]),
             helper.make_node("MatMul", ["x", "w2"], ["m2"]),
             helper.make_node("Mul", ["m2", "k"], ["big"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [4, 16])],
                          [helper.make_tensor_value_info("small", 1, [4, 8]),
                           helper.make_tensor_value_info("big", 1, [4, 8])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
                           numpy_helper.from_array(np.array(1000, np.float32), "k")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _ratio(y, yh):
    y, yh = np.asarray(y, np.float64), np.asarray(yh, np.float64)
    return float(np.sum((y - yh) ** 2) / np.sum(y ** 2))


def test_model_figure_is_the_mean_of_each_outputs_relative_noise():
    feeds = {"x": np.random.default_rng(4).standard_normal((4, 16)).astype(np.float32)}
    m = two_outputs()
    case = fidelity.ModelCase("two", m, [feeds])
    float_out = graph.make_session(m).run(None, feeds)  # onnxruntime on the untouched model
    replace = {t: case.quantize(t, "int4:per-axis").x_hat for t in case.weights}
    got = case.fidelity(replace)
    q = case.run(replace)
    r = [_ratio(a, b) for a, b in zip(float_out, q)]
    assert got["output_sqnr_db"] == pytest.approx(-10 * math.log10(np.mean(r)), rel=1e-12)
    for name, ri, a, b in zip(["small", "big"], r, float_out, q):
        assert got["outputs"][name]["sqnr_db"] == pytest.approx(-10 * math.log10(ri), rel=1e-12)
        assert got["outputs"][name]["max_abs"] == float(np.max(np.abs(
            a.astype(np.float64) - b)))
    # pooled by raw power, 'big' would decide alone; here both count
    pooled = 10 * math.log10(sum(np.sum(np.float64(a) ** 2) for a in float_out)
                             / sum(np.sum((np.float64(a) - b) ** 2)
                                   for a, b in zip(float_out, q)))
    assert abs(got["output_sqnr_db"] - pooled) > 0.1 or abs(r[0] - r[1]) < 1e-3 * r[0]
    only = fidelity.ModelCase("two", m, [feeds], outputs=["small"]).fidelity(replace)
    assert only["output_sqnr_db"] == pytest.approx(got["outputs"]["small"]["sqnr_db"])
    with pytest.raises(graph.ModelError, match="not outputs of the model"):
        fidelity.ModelCase("two", m, [feeds], outputs=["nope"])


def test_one_output_equals_the_pooled_definition_and_silent_outputs_are_left_out():
    rng = np.random.default_rng(5)
    y, yh = rng.standard_normal((6, 5)), rng.standard_normal((6, 5))
    one = fidelity.compare([y], [yh])
    assert one["output_sqnr_db"] == pytest.approx(
        10 * math.log10(np.sum(y ** 2) / np.sum((y - yh) ** 2)), rel=1e-12)
    z = np.zeros((3,))
    both = fidelity.compare([y, z], [yh, z + 1e-3], names=["a", "silent"])
    assert both["silent_outputs"] == ["silent"]
    assert both["output_sqnr_db"] == pytest.approx(one["output_sqnr_db"], rel=1e-12)
    assert both["outputs"]["silent"]["sqnr_db"] == -math.inf
    alone = fidelity.compare([z], [z + 1e-3], names=["silent"])
    assert alone["output_sqnr_db"] == -math.inf
    assert fidelity.compare([z], [z])["output_sqnr_db"] == math.inf


def test_sensitivity_rows_carry_each_outputs_columns():
    feeds = {"x": np.random.default_rng(6).standard_normal((4, 16)).astype(np.float32)}
    case = fidelity.ModelCase("two", two_outputs(), [feeds])
    sens = measure(case, ["int8:per-axis"])
    row = sens.rows[0]
    assert {"sqnr_db[small]", "sqnr_db[big]", "max_abs[small]", "max_abs[big]"} <= set(row)
    assert row["axis"] == 1  # MatMul B [K, N]: one scale per output column
