"""The latency spread Model Fidelity shows (min–median–max over the passes) and its rule for
"within noise", on one-node models timed in onnxruntime (no timed assertion)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from app.model_view import latency_figures, within_noise  # noqa: E402
from qcore.model.latency import model_latency, spread  # noqa: E402


def test_spread_is_min_median_max():
    assert spread([3.0, 1.0, 2.0, 10.0, 2.5]) == [1.0, 2.5, 10.0]


def test_within_noise_when_a_median_lies_in_the_other_range():
    assert within_noise([9.0, 10.0, 12.0], [9.5, 11.0, 14.0])
    assert not within_noise([4.0, 5.0, 5.5], [9.5, 11.0, 14.0])


def test_model_latency_gives_the_spread_of_the_passes():
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])
    w = helper.make_tensor("w", TensorProto.FLOAT, [64, 64],
                           np.random.default_rng(0).standard_normal(64 * 64).tolist())
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm", [x], [y], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    batches = [{"x": np.ones((4, 64), np.float32)}]
    out = model_latency(m, m, batches, threads=(1,), repeats=5, warmup=1)
    lo, mid, hi = out["latency_spread_ms"]["1"]
    assert 0 < lo <= mid <= hi and out["latency_ms"]["1"] == mid
    built = {**out}
    (label, value, note), = latency_figures(built)
    assert label == "Latency, 1 thread" and f"{lo:.1f}–{mid:.1f}–{hi:.1f} ms" in note
