"""The format registry against ml_dtypes (each format's own definition) and onnx's type table."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import qcore
from qcore.formats import (
    FLOAT,
    FORMATS,
    HIGH_PRECISION_TYPES,
    INT,
    NAN_ALL_ONES,
    NAN_IEEE,
    NAN_NEG_ZERO,
    NAN_NONE,
    QUANTIZED_TYPES,
    SCALE,
    get_format,
)
from qcore.versions import OPERATORS, QUANTIZE

SMALL = [f for f in FORMATS.values() if f.bits <= 16]
FLOATS = [f for f in FORMATS.values() if f.kind in (FLOAT, SCALE)]


@pytest.mark.parametrize("fmt", FORMATS.values(), ids=lambda f: f.name)
def test_range_and_bits_match_ml_dtypes(fmt):
    if fmt.kind == INT:
        info = ml_dtypes.iinfo(fmt.dtype)
        assert (fmt.min, fmt.max, fmt.bits) == (info.min, info.max, info.bits)
        assert fmt.signed == (info.min < 0)
    else:
        info = ml_dtypes.finfo(fmt.dtype)
        assert (fmt.min, fmt.max) == (float(info.min), float(info.max))
        assert fmt.bits == info.bits
        assert fmt.mbits == info.nmant and fmt.ebits == info.nexp
        assert fmt.min_normal == float(info.smallest_normal)
        if fmt.kind == FLOAT:
            assert fmt.bias == 1 - info.minexp
            assert fmt.min_positive == float(info.smallest_subnormal)
    assert fmt.storage_dtype.itemsize == fmt.itemsize
    assert fmt.is_subbyte == (fmt.bits < 8)


@pytest.mark.parametrize("fmt", SMALL, ids=lambda f: f.name)
def test_codes_and_values(fmt):
    codes = fmt.all_codes()
    assert codes.dtype == fmt.dtype and codes.size == 1 << fmt.bits
    raw = codes.view(np.uint8 if fmt.itemsize == 1 else np.uint16).astype(np.int64)
    assert np.unique(raw & ((1 << fmt.bits) - 1)).size == codes.size  # every pattern once
    values = fmt.all_values()
    finite = values[np.isfinite(values)]
    assert finite.min() == fmt.min and finite.max() == fmt.max
    assert fmt.levels == np.unique(finite).size
    if fmt.kind == INT:
        assert fmt.levels == 1 << fmt.bits


@pytest.mark.parametrize("fmt", [f for f in FLOATS if f.bits <= 16], ids=lambda f: f.name)
def test_special_values_follow_the_nan_style(fmt):
    values = fmt.all_values()
    codes = np.arange(values.size)
    nan = codes[np.isnan(values)]
    sbit = fmt.ebits + fmt.mbits
    if fmt.nan_style == NAN_NONE:
        assert nan.size == 0
    elif fmt.nan_style == NAN_ALL_ONES:
        mag = (1 << sbit) - 1
        assert set(nan) == ({mag, mag | (1 << sbit)} if fmt.kind == FLOAT else {mag})
    elif fmt.nan_style == NAN_NEG_ZERO:
        assert nan.tolist() == [1 << sbit]
        assert not np.signbit(values[values == 0]).any()  # no -0
    else:
        assert fmt.nan_style == NAN_IEEE
        exp = (codes >> fmt.mbits) & ((1 << fmt.ebits) - 1)
        frac = codes & ((1 << fmt.mbits) - 1)
        assert np.array_equal(np.isnan(values), (exp == (1 << fmt.ebits) - 1) & (frac != 0))
    assert fmt.has_inf == bool(np.isinf(values).any())
    if fmt.kind == FLOAT:
        assert values[fmt.max_code] == fmt.max


@pytest.mark.parametrize("fmt", FORMATS.values(), ids=lambda f: f.name)
def test_onnx_ids_and_names(fmt):
    onnx = pytest.importorskip("onnx")
    assert np.dtype(onnx.helper.tensor_dtype_to_np_dtype(fmt.onnx_id)) == fmt.dtype
    onnx_name = onnx.TensorProto.DataType.Name(fmt.onnx_id).lower().replace("_", "")
    assert onnx_name == fmt.name


@pytest.mark.parametrize("spec", ["float8e4m3fn", "FLOAT8E4M3FN", "e4m3fn", "float8_e4m3fn",
                                  "tensor(float8e4m3fn)", 17, ml_dtypes.float8_e4m3fn,
                                  np.dtype(ml_dtypes.float8_e4m3fn)])
def test_get_format_resolves_every_spelling(spec):
    fmt = get_format(spec)
    assert fmt is FORMATS["float8e4m3fn"]
    assert get_format(fmt) is fmt


def test_get_format_other_types():
    assert get_format(np.float32).name == "float" and get_format("fp16").name == "float16"
    assert get_format(1).name == "float" and get_format(np.int32(3)).name == "int8"


@pytest.mark.parametrize("spec, words", [
    (True, ["flag=True", "not a data type"]),
    (99, ["flag=99", "ONNX data-type number"]),
    ("float7", ["flag='float7'", "float8e4m3fn"]),
    (np.float64, ["flag has dtype float64", "valid"]),
    (object(), ["flag=", "not a data type"]),
])
def test_get_format_errors_name_the_argument(spec, words):
    with pytest.raises(qcore.QuantizationError) as exc:
        get_format(spec, "flag")
    for w in words:
        assert w in str(exc.value)


def test_type_lists_agree_with_the_version_table():
    produced = set()
    for ov in OPERATORS[QUANTIZE].values():
        produced |= set(ov.quantized_types)
        assert set(ov.x_types) - {"int32"} <= set(HIGH_PRECISION_TYPES)
    assert produced == set(QUANTIZED_TYPES)
    assert len(QUANTIZED_TYPES) == len(set(QUANTIZED_TYPES))
    assert all(FORMATS[t].kind in (INT, FLOAT) for t in QUANTIZED_TYPES)
    assert FORMATS["float8e8m0"].kind == SCALE
