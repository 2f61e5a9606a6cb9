"""What a deployed quantized layer costs, measured live in onnxruntime on one-node models.

Two questions a learner asks of a deployed model, answered on this machine in well under a
few seconds (small shapes, short repeats, medians):

- :func:`dynamic_cost`: DynamicQuantizeLinear's own cost (the operator alone on an activation)
  beside the integer MatMul it feeds (MatMulInteger, uint8 × int8) and the float MatMul it
  replaces.
- :func:`four_bit_cost`: a 4-bit weight (onnxruntime's MatMulNBits, blocks of 32) against the
  float MatMul at a small and a large batch: reading an eighth of the weight bytes pays when
  the kernel waits on memory (one row), less when it computes (many rows); and the
  naive QDQ form (DequantizeLinear of the int8 weight, then the float MatMul) at one row.

The figures are timings on a shared machine: medians of short repeats, each model's runs
interleaved with the others'. onnxruntime is optional: without it these raise
:class:`~qcore.QuantizationError` naming the install.
"""

from __future__ import annotations

import statistics
import time
from functools import lru_cache
from typing import Any

import numpy as np

from .errors import QuantizationError
from .optional import require

__all__ = ["dynamic_cost", "four_bit_cost"]


def _ort() -> Any:
    return require("onnxruntime", "the deployment figures (measured in it)", QuantizationError)


def _model(nodes: list, inputs: list, outputs: list, inits: list, ms: bool = False) -> bytes:
    from onnx import helper

    opsets = [helper.make_opsetid("", 21)] + ([helper.make_opsetid("com.microsoft", 1)]
                                             if ms else [])
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, inits),
                          opset_imports=opsets)
    m.ir_version = 10
    return m.SerializeToString()


def _time_us(models: dict[str, bytes], feeds: dict[str, dict[str, np.ndarray]],
             repeats: int) -> dict[str, float]:
    """Median microseconds of one run per model, one thread, the models taking turns."""
    ort = _ort()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    sessions = {k: ort.InferenceSession(m, so, providers=["CPUExecutionProvider"])
                for k, m in models.items()}
    for k, s in sessions.items():
        s.run(None, feeds[k])
    times: dict[str, list[float]] = {k: [] for k in sessions}
    for _ in range(repeats):
        for k, s in sessions.items():
            t0 = time.perf_counter()
            s.run(None, feeds[k])
            times[k].append((time.perf_counter() - t0) * 1e6)
    return {k: float(statistics.median(v)) for k, v in times.items()}


@lru_cache(maxsize=4)
def dynamic_cost(rows: int = 64, k: int = 384, n: int = 1536, repeats: int = 15
                 ) -> dict[str, float]:
    """Median µs of DynamicQuantizeLinear alone on a (rows, k) activation, of MatMulInteger
    (uint8 × int8) on its output with a (k, n) weight, and of the float MatMul, with the
    operator's share of the integer pair. Measured once per process (the lesson's answer
    and its test read the same figures)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    wq = rng.integers(-127, 128, (k, n)).astype(np.int8)
    vi = helper.make_tensor_value_info
    dql = _model([helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])],
                 [vi("x", TensorProto.FLOAT, [rows, k])],
                 [vi("y", TensorProto.UINT8, None), vi("s", TensorProto.FLOAT, None),
                  vi("z", TensorProto.UINT8, None)], [])
    mmi = _model([helper.make_node("MatMulInteger", ["y", "w"], ["o"])],
                 [vi("y", TensorProto.UINT8, [rows, k])], [vi("o", TensorProto.INT32, None)],
                 [numpy_helper.from_array(wq, "w")])
    mmf = _model([helper.make_node("MatMul", ["x", "w"], ["o"])],
                 [vi("x", TensorProto.FLOAT, [rows, k])], [vi("o", TensorProto.FLOAT, None)],
                 [numpy_helper.from_array(w, "w")])
    y = rng.integers(0, 256, (rows, k)).astype(np.uint8)
    t = _time_us({"dql": dql, "matmulinteger": mmi, "matmul": mmf},
                 {"dql": {"x": x}, "matmulinteger": {"y": y}, "matmul": {"x": x}}, repeats)
    return {**t, "share": t["dql"] / (t["dql"] + t["matmulinteger"])}


@lru_cache(maxsize=4)
def four_bit_cost(k: int = 1024, n: int = 1024, small: int = 1, large: int = 64,
                  repeats: int = 10) -> dict[str, float]:
    """Median µs of MatMulNBits (4-bit weight, blocks of 32) and of the float MatMul at a
    ``small`` and a ``large`` batch of rows, and of the naive QDQ form (DequantizeLinear of an
    int8 weight, then the float MatMul) at the small batch. Measured once per process."""
    from onnx import TensorProto, helper, numpy_helper

    if k % 32:
        raise QuantizationError(f"k = {k}: give a multiple of the block size 32")
    rng = np.random.default_rng(0)
    blocks = k // 32
    packed = rng.integers(0, 256, (n, blocks, 16)).astype(np.uint8)  # two codes a byte
    scales = (rng.random(n * blocks).astype(np.float32) + 0.5) / 64
    w = rng.standard_normal((k, n)).astype(np.float32)
    wq = rng.integers(-127, 128, (k, n)).astype(np.int8)
    vi = helper.make_tensor_value_info
    models, feeds = {}, {}
    for rows in (small, large):
        x = rng.standard_normal((rows, k)).astype(np.float32)
        models[f"nbits{rows}"] = _model(
            [helper.make_node("MatMulNBits", ["x", "b", "s"], ["o"], domain="com.microsoft",
                              K=k, N=n, bits=4, block_size=32)],
            [vi("x", TensorProto.FLOAT, [rows, k])], [vi("o", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(packed, "b"), numpy_helper.from_array(scales, "s")],
            ms=True)
        models[f"float{rows}"] = _model(
            [helper.make_node("MatMul", ["x", "w"], ["o"])],
            [vi("x", TensorProto.FLOAT, [rows, k])], [vi("o", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(w, "w")])
        feeds[f"nbits{rows}"] = feeds[f"float{rows}"] = {"x": x}
    models["qdq"] = _model(
        [helper.make_node("DequantizeLinear", ["wq", "ws"], ["wd"]),
         helper.make_node("MatMul", ["x", "wd"], ["o"])],
        [vi("x", TensorProto.FLOAT, [small, k])], [vi("o", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(np.float32(0.01), "ws")])
    feeds["qdq"] = feeds[f"float{small}"]
    return _time_us(models, feeds, repeats)
