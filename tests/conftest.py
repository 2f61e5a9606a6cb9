"""Shared helpers: the onnx reference evaluator on cached one-node models, bit comparison."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest


@lru_cache(maxsize=4096)
def _evaluator(op: str, opset: int, input_types: tuple[int, ...], attributes: tuple):
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    names = ["x", "scale", "zero_point"][: len(input_types)]
    inputs = [helper.make_tensor_value_info(n, t, None) for n, t in zip(names, input_types)]
    outputs = [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)]
    if op == "DynamicQuantizeLinear":
        outputs = [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None)
                   for n in ("y", "y_scale", "y_zero_point")]
    node = helper.make_node(op, names, [o.name for o in outputs], **dict(attributes))
    graph = helper.make_graph([node], f"{op}_{opset}", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model)


def reference(op: str, opset: int, *inputs, **attributes):
    """Run the onnx reference evaluator on a one-node `op` model at `opset`.

    `inputs` are arrays (a trailing None is dropped); attributes set to None are left out, so
    the schema's defaults apply. Returns the single output, or the tuple of outputs for
    DynamicQuantizeLinear.
    """
    from onnx.helper import np_dtype_to_tensor_dtype

    arrays = [np.asarray(a) for a in inputs if a is not None]
    types = tuple(int(np_dtype_to_tensor_dtype(a.dtype)) for a in arrays)
    attrs = tuple(sorted((k, int(v)) for k, v in attributes.items() if v is not None))
    ev = _evaluator(op, opset, types, attrs)
    feeds = dict(zip(["x", "scale", "zero_point"], arrays))
    out = ev.run(None, feeds)
    return tuple(out) if op == "DynamicQuantizeLinear" else out[0]


def bits(a) -> np.ndarray:
    """The stored bits of an array as unsigned integers (sub-byte types: one byte each)."""
    a = np.ascontiguousarray(np.asarray(a))
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def assert_bits_equal(got, expected, *, where=None, context=""):
    """Bit-for-bit equality of dtype, shape and every element (or those selected by `where`).

    NaNs are compared by their bits too (sign and payload): qcore matches the reference there.
    """
    got = np.asarray(got)
    expected = np.asarray(expected)
    assert got.dtype == expected.dtype, f"{context}: dtype {got.dtype} != {expected.dtype}"
    assert got.shape == expected.shape, f"{context}: shape {got.shape} != {expected.shape}"
    gb, eb = bits(got).reshape(-1), bits(expected).reshape(-1)
    diff = gb != eb
    if where is not None:
        diff &= np.broadcast_to(where, got.shape).reshape(-1)
    if diff.any():
        idx = np.flatnonzero(diff)
        rows = [
            f"  [{np.unravel_index(i, got.shape) if got.ndim else ()}] "
            f"got {got.reshape(-1)[i]!r} (0x{int(gb[i]):x}) "
            f"expected {expected.reshape(-1)[i]!r} (0x{int(eb[i]):x})"
            for i in idx[:8]
        ]
        raise AssertionError(f"{context}: {idx.size} of {diff.size} elements differ\n"
                             + "\n".join(rows))


@pytest.fixture
def ref():
    return reference
