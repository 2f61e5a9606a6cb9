"""Every ONNX backend node test case of the three operators, run through qcore, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402

import qcore  # noqa: E402


def _collect():
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {c.name: c for c in collect_testcases() if "quantizelinear" in c.name}


def _array(value):
    """Test data holds TensorProtos for the types NumPy lacks; decode them with onnx."""
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    return np.asarray(value)


CASES = _collect()


def _attributes(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _run(model, opset, inputs):
    graph = model.graph
    op_types = [n.op_type for n in graph.node]
    if "DynamicQuantizeLinear" in op_types or len(graph.node) > 1:
        # the *_expanded cases are DynamicQuantizeLinear written as a function body
        return list(qcore.dynamic_quantize_linear(inputs[0]))
    node = graph.node[0]
    attrs = _attributes(node)
    kw = {k: attrs[k] for k in ("axis", "block_size", "output_dtype", "saturate", "precision")
          if k in attrs}
    if "saturate" in kw:
        kw["saturate"] = bool(kw["saturate"])
    if node.op_type == "QuantizeLinear":
        return [qcore.quantize_linear(*inputs, **kw, opset=opset)]
    kw.pop("saturate", None)
    kw.pop("precision", None)
    return [qcore.dequantize_linear(*inputs, **kw, opset=opset)]


def test_cases_found():
    # 33 cases in onnx 1.23 (30 single-node + 3 expanded DynamicQuantizeLinear)
    assert len(CASES) >= 33, CASES


def bits(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    return np.ascontiguousarray(a).view(np.uint8 if a.dtype.itemsize == 1 else
                                        {2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


@pytest.mark.parametrize("case", sorted(CASES))
def test_backend_node_case(case):
    model = CASES[case].model
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    for inputs, expected in CASES[case].data_sets:
        inputs = [_array(i) for i in inputs]
        expected = [_array(e) for e in expected]
        got = _run(model, opset, inputs)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            g = np.asarray(g)
            assert g.dtype == e.dtype, (case, g.dtype, e.dtype)
            assert g.shape == e.shape, (case, g.shape, e.shape)
            np.testing.assert_array_equal(bits(g), bits(e), err_msg=case)
