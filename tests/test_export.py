"""qcore.export: the files the Explorer offers hold what DequantizeLinear needs, checked with
the onnx reference evaluator on the arrays read back."""

from __future__ import annotations

import io

import ml_dtypes
import numpy as np
import pytest

import qcore
from qcore import export


@pytest.mark.parametrize("target", ["int4", "uint4", "int2", "int8", "uint16", "float8e4m3fn",
                                    "float4e2m1"])
def test_npz_rebuilds_dequantize_linear(target, ref):
    pytest.importorskip("onnx")
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    fmt = qcore.get_format(target)
    scale = np.full((4, 2), 0.05, np.float32)
    zp = np.zeros((4, 2), fmt.dtype)
    y = qcore.quantize_linear(x, scale, zp, axis=1, block_size=32)
    data = np.load(io.BytesIO(export.npz_bytes(y, scale, zp, axis=1, block_size=32, opset=25)),
                   allow_pickle=False)
    assert str(data["y_type"]) == target and int(data["block_size"]) == 32
    if fmt.is_integer:  # by value: int4 codes are -8..7, not 0..15
        np.testing.assert_array_equal(data["y"], y.astype(np.int64))
        back = data["y"].astype(fmt.dtype)
    else:
        back = data["y"].view(fmt.dtype)
    zp_back = data["zero_point"].astype(fmt.dtype) if fmt.is_integer else \
        data["zero_point"].astype(fmt.dtype)
    expected = ref("DequantizeLinear", 25, y, scale, zp, axis=1, block_size=32)
    got = ref("DequantizeLinear", 25, back, data["scale"], zp_back, axis=1, block_size=32)
    np.testing.assert_array_equal(got, expected)


def test_as_numpy_keeps_plain_types_and_uses_codes_for_small_floats():
    a = np.arange(-3, 4, dtype=np.int8)
    assert export.as_numpy(a) is a
    f8 = np.array([1.0, -0.5], ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(export.as_numpy(f8), f8.view(np.uint8))
    assert export.as_numpy(np.array([-8, 7], ml_dtypes.int4)).dtype == np.int8
