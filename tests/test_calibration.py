"""Calibration: hand-checked scales and zero points, shapes valid for qcore, method properties."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import qcore
from qcore import metrics
from qcore.calibration import METHODS, QuantParams, choose_params, describe

FLOATS = ("float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "float6e2m3",
          "float6e3m2", "float4e2m1")
INTS = ("int2", "uint2", "int4", "uint4", "int8", "uint8", "int16", "uint16")


def heavy(shape, seed=0):
    return np.random.default_rng(seed).standard_t(2.5, shape).astype(np.float32)


def round_trip_mse(x, p):
    xh = p.round_trip(x).astype(np.float64)
    return float(np.mean((xh - x) ** 2))


# --- hand-checkable cases ---------------------------------------------------------------------


def test_minmax_uint8_by_the_spec_formula():
    p = choose_params(np.array([-1.0, 3.0], np.float32), "uint8")
    # scale = (max - min) / (qmax - qmin) = 4 / 255; zp = round(0 - (-1) / scale) = round(63.75)
    assert p.scale.dtype == np.float32 and p.scale.shape == ()
    assert p.scale == np.float32(4 / 255)
    assert p.zero_point.dtype == np.uint8 and int(p.zero_point) == 64
    assert p.granularity == "per-tensor" and p.method == "minmax" and p.target == "uint8"


def test_minmax_int8_zero_point():
    p = choose_params(np.array([-1.0, 3.0], np.float32), "int8")
    assert p.scale == np.float32(4 / 255)
    assert p.zero_point.dtype == np.int8 and int(p.zero_point) == -64  # round(-128 + 63.75)


def test_minmax_range_is_widened_to_include_zero():
    p = choose_params(np.array([2.0, 5.0], np.float32), "uint8")
    assert p.scale == np.float32(5 / 255) and int(p.zero_point) == 0
    p = choose_params(np.array([-5.0, -2.0], np.float32), "uint8")
    assert p.scale == np.float32(5 / 255) and int(p.zero_point) == 255


def test_minmax_zero_point_rounds_half_to_even():
    # lo = -0.5 * scale exactly: 0 - lo/scale = 0.5 -> 0 ; lo = -1.5 scale -> 2
    for lo, expected in ((-0.5, 0), (-1.5, 2), (-2.5, 2)):
        x = np.array([lo, 255 + lo], np.float32)  # span 255 -> scale 1
        p = choose_params(x, "uint8")
        assert p.scale == 1.0 and int(p.zero_point) == expected


@pytest.mark.parametrize("seed", range(5))
def test_minmax_uint8_matches_dynamic_quantize_linear(seed):
    x = np.random.default_rng(seed).standard_normal(1000).astype(np.float32) * (seed + 1) - seed
    _, scale, zp = qcore.dynamic_quantize_linear(x)
    p = choose_params(x, "uint8")
    assert p.scale == scale and p.zero_point == zp


def test_all_zero_tensor_gets_safe_scale():
    x = np.zeros(10, np.float32)
    p = choose_params(x, "uint8")
    _, scale, zp = qcore.dynamic_quantize_linear(x)
    assert p.scale == scale == np.float32(1 / 255) and p.zero_point == zp == 0
    for t in ("int8", "float8e4m3fn", "float4e2m1"):
        for m in ("minmax", "absmax", "percentile", "mse", "mx"):
            q = choose_params(x, t, method=m)
            s = q.scale.astype(np.float64)
            assert np.isfinite(s).all() and (s > 0).all(), (t, m)
            assert (q.round_trip(x) == 0).all()


@pytest.mark.parametrize("target, zp, qpos", [("int8", 0, 127), ("uint8", 128, 127),
                                               ("int4", 0, 7), ("uint4", 8, 7), ("int2", 0, 1),
                                               ("uint2", 2, 1), ("int16", 0, 32767)])
def test_absmax_symmetric(target, zp, qpos):
    x = np.array([-3.0, 0.5, 2.0], np.float32)
    p = choose_params(x, target, method="absmax")
    assert p.scale == np.float32(np.float32(3.0) / np.float32(qpos))
    assert int(p.zero_point) == zp
    assert p.zero_point.dtype == qcore.get_format(target).dtype


@pytest.mark.parametrize("target", FLOATS)
@pytest.mark.parametrize("method", ["minmax", "absmax"])
def test_float_targets_map_amax_to_max(target, method):
    x = np.array([-3.0, 0.5, 2.0], np.float32)
    p = choose_params(x, target, method=method)
    fmt = qcore.get_format(target)
    assert p.zero_point is None
    assert p.scale == np.float32(np.float32(3.0) / np.float32(fmt.max))
    y = p.quantize(x)
    assert y.dtype == fmt.dtype and abs(float(y[0])) == fmt.max


def test_percentile_symmetric_and_asymmetric():
    x = heavy(10_000)
    p = choose_params(x, "int8", method="percentile", percentile=99.0)
    t = np.float32(np.percentile(np.abs(x), 99.0))
    assert p.scale == np.float32(t / np.float32(127)) and int(p.zero_point) == 0
    q = choose_params(x, "uint8", method="percentile", percentile=99.0)
    lo, hi = np.percentile(x, [1.0, 99.0]).astype(np.float32)
    assert q.scale == (hi - lo) / np.float32(255)
    assert int(q.zero_point) == int(np.rint(np.clip(-lo / q.scale, 0, 255)))
    f = choose_params(x, "float8e4m3fn", method="percentile", percentile=99.0)
    assert f.scale == np.float32(t / np.float32(448))


def test_percentile_per_group_matches_numpy_with_short_block_and_nonfinite():
    x = heavy((6, 37), seed=3)
    x[1, 3] = np.nan
    x[2, 36] = np.inf
    x[4, :] = np.nan  # a row without finite values
    p = choose_params(x, "int8", method="percentile", percentile=90, granularity="blocked",
                      axis=1, block_size=8)
    assert p.scale.shape == (6, 5)
    for i in range(6):
        for b in range(5):
            blk = x[i, b * 8:(b + 1) * 8]
            blk = blk[np.isfinite(blk)]
            t = np.percentile(np.abs(blk), 90) if blk.size else 1.0
            expected = np.float32(np.float32(t) / np.float32(127))
            assert p.scale[i, b] == pytest.approx(expected, rel=1e-6), (i, b)
    pa = choose_params(x, "int8", method="percentile", percentile=90, granularity="per-axis",
                       axis=0)
    for i in (0, 1, 2):
        v = x[i][np.isfinite(x[i])]
        assert pa.scale[i] == pytest.approx(np.percentile(np.abs(v), 90) / 127, rel=1e-6)


def test_statistics_ignore_nan_and_inf():
    x = np.array([np.nan, -2.0, np.inf, 1.0, -np.inf], np.float32)
    p = choose_params(x, "int8", method="absmax")
    assert p.scale == np.float32(np.float32(2.0) / np.float32(127))


# --- the mse method -------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["int8", "uint8", "int4", "uint4", "float8e4m3fn",
                                    "float4e2m1"])
@pytest.mark.parametrize("granularity", ["per-tensor", "per-axis", "blocked"])
def test_mse_never_worse_than_minmax_on_heavy_tails(target, granularity):
    x = heavy((32, 96), seed=7)
    kw = {"granularity": granularity, "axis": 1, "block_size": 32}
    mse = round_trip_mse(x, choose_params(x, target, method="mse", **kw))
    mm = round_trip_mse(x, choose_params(x, target, method="minmax", **kw))
    assert mse <= mm * (1 + 1e-12)


def test_mse_clips_heavy_tails_for_4_bits():
    x = heavy(20_000, seed=1)
    p = choose_params(x, "int4", method="mse")
    a = choose_params(x, "int4", method="absmax")
    assert round_trip_mse(x, p) < 0.7 * round_trip_mse(x, a)
    assert 0.3 <= p.clip_ratio < 1.0
    assert p.scale < a.scale


def test_mse_search_is_per_group():
    rng = np.random.default_rng(0)
    x = np.stack([rng.standard_normal(4000), rng.uniform(-1, 1, 4000)]).astype(np.float32)
    x[0, :5] = 40  # outliers in channel 0 only
    p = choose_params(x, "int4", method="mse", granularity="per-axis", axis=0)
    a = choose_params(x, "int4", method="absmax", granularity="per-axis", axis=0)
    assert p.scale[0] < 0.6 * a.scale[0]  # channel 0 clips its outliers
    assert p.scale[1] >= 0.9 * a.scale[1]  # uniform channel keeps (almost) its range


def test_mse_exhaustive_agrees_closely():
    x = heavy(5000, seed=2)
    fast = choose_params(x, "int4", method="mse")
    full = choose_params(x, "int4", method="mse", mse_exhaustive=True)
    assert round_trip_mse(x, fast) <= round_trip_mse(x, full) * 1.02


# --- mx -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", FLOATS + ("int8", "int4", "uint8"))
def test_mx_scales_are_powers_of_two(target):
    x = heavy((8, 64), seed=4) * 100
    p = choose_params(x, target, method="mx", granularity="blocked", axis=1, block_size=32)
    fmt = qcore.get_format(target)
    assert p.scale.dtype == ml_dtypes.float8_e8m0fnu and p.scale.shape == (8, 2)
    s = p.scale.astype(np.float64)
    assert (np.exp2(np.round(np.log2(s))) == s).all()
    amax = np.abs(x).reshape(8, 2, 32).max(-1)
    qmax = fmt.max if fmt.kind != "int" else fmt.max - (0 if fmt.signed else 128)
    emax = math.floor(math.log2(qmax))
    expected = np.exp2(np.floor(np.log2(amax.astype(np.float64))) - emax)
    assert (s == expected).all()
    # amax lands in the top binade: 2^emax <= amax / scale < 2^(emax + 1)
    r = amax / s
    assert (r >= 2.0 ** emax).all() and (r < 2.0 ** (emax + 1)).all()
    y = p.quantize(x)
    assert y.shape == x.shape


def test_mx_fp4_block_matches_ocp_rule():
    x = np.array([0.0, 1.0, -5.0, 3.0], np.float32)
    p = choose_params(x, "float4e2m1", method="mx")
    # floor(log2 5) = 2, emax(e2m1) = 2 -> scale 2^0
    assert p.scale.astype(np.float32) == 1.0
    assert p.scale.dtype == ml_dtypes.float8_e8m0fnu


# --- shapes, dtypes, kwargs -------------------------------------------------------------------


@pytest.mark.parametrize("method", ["minmax", "absmax", "percentile", "mse", "mx"])
@pytest.mark.parametrize("target", ["int8", "uint4", "float8e5m2", "float6e2m3", "int2"])
@pytest.mark.parametrize("granularity, axis, expected", [
    ("per-tensor", 0, ()), ("per-axis", 0, (5,)), ("per-axis", -1, (40,)), ("per-axis", 1, (3,)),
    ("blocked", 2, (5, 3, 3)), ("blocked", 0, (1, 3, 40)), ("blocked", -2, (5, 1, 40)),
])
def test_shapes_valid_for_qcore(method, target, granularity, axis, expected):
    x = heavy((5, 3, 40), seed=5)
    p = choose_params(x, target, method=method, granularity=granularity, axis=axis,
                      block_size=16)
    assert p.scale.shape == expected
    assert p.zero_point is None or p.zero_point.shape == expected
    y = qcore.quantize_linear(x, p.scale, p.zero_point, **p.kwargs,
                              output_dtype=target if p.zero_point is None else None)
    xh = qcore.dequantize_linear(y, p.scale, p.zero_point, **p.kwargs)
    assert y.dtype == qcore.get_format(target).dtype and xh.shape == x.shape
    assert np.array_equal(p.round_trip(x), xh)


def test_per_tensor_kwargs_work_at_opset_10():
    x = np.array([-1.0, 2.0], np.float32)
    p = choose_params(x, "int8", method="absmax", axis=0)
    y = qcore.quantize_linear(x, p.scale, p.zero_point, **p.kwargs, opset=10)
    assert y.tolist() == [-64, 127]


@pytest.mark.parametrize("scale_dtype, dtype", [("float", np.float32), ("float32", np.float32),
                                                ("float16", np.float16),
                                                ("bfloat16", ml_dtypes.bfloat16),
                                                ("float8e8m0", ml_dtypes.float8_e8m0fnu)])
def test_scale_dtypes(scale_dtype, dtype):
    x = heavy((4, 64))
    p = choose_params(x, "int8", granularity="per-axis", scale_dtype=scale_dtype)
    assert p.scale.dtype == dtype
    f = choose_params(x, "int8", granularity="per-axis", method="absmax")
    if scale_dtype == "float8e8m0":  # rounded up to a power of two: the range never shrinks
        s = p.scale.astype(np.float64)
        assert (np.exp2(np.round(np.log2(s))) == s).all()
        g = choose_params(x, "int8", granularity="per-axis", method="absmax",
                          scale_dtype=scale_dtype)
        assert (g.scale.astype(np.float64) >= f.scale.astype(np.float64)).all()
    p.round_trip(x)


def test_tiny_and_huge_ranges_give_positive_finite_scales():
    for v in (1e-30, 1e-44, 3e38):
        x = np.array([-v, v], np.float32)
        for sd in ("float", "float16", "bfloat16", "float8e8m0"):
            for t in ("int8", "uint8", "float4e2m1", "int2"):
                p = choose_params(x, t, scale_dtype=sd)
                s = p.scale.astype(np.float64)
                assert np.isfinite(s).all() and (s > 0).all()
                p.round_trip(x)  # qcore accepts it


def test_manual():
    x = np.zeros((2, 3), np.float32)
    p = choose_params(x, "uint8", method="manual", manual_scale=0.5, manual_zero_point=7)
    assert p.scale == np.float32(0.5) and p.zero_point == 7 and p.zero_point.dtype == np.uint8
    q = choose_params(x, "int4", method="manual", granularity="per-axis", axis=1,
                      manual_scale=[1, 2, 4])
    assert q.scale.tolist() == [1, 2, 4] and q.zero_point.tolist() == [0, 0, 0]
    assert q.zero_point.dtype == ml_dtypes.int4
    f = choose_params(x, "float8e4m3fn", method="manual", manual_scale=2.0)
    assert f.zero_point is None
    with pytest.raises(qcore.QuantizationError):
        choose_params(x, "int8", method="manual")
    with pytest.raises(qcore.QuantizationError):
        choose_params(x, "int8", method="manual", manual_scale=-1.0)
    with pytest.raises(qcore.QuantizationError):
        choose_params(x, "int8", method="manual", manual_scale=1.0, manual_zero_point=200)
    with pytest.raises(qcore.QuantizationError):
        choose_params(x, "int8", method="manual", granularity="per-axis", axis=1,
                      manual_scale=[1, 2])


def test_invalid_arguments():
    x = np.ones((4, 4), np.float32)
    for kw in ({"method": "bogus"}, {"granularity": "per-row"}, {"scale_dtype": "int8"},
               {"granularity": "blocked", "block_size": 0}, {"granularity": "per-axis",
                                                             "axis": 2},
               {"method": "percentile", "percentile": 0}):
        with pytest.raises(qcore.QuantizationError):
            choose_params(x, "int8", **kw)
    with pytest.raises(qcore.QuantizationError):
        choose_params(x, "float16")
    with pytest.raises(qcore.QuantizationError):
        choose_params(np.zeros(0, np.float32), "int8")


def test_describe_and_methods():
    assert METHODS == ("minmax", "absmax", "percentile", "mse", "manual", "mx")
    for m in METHODS:
        d = describe(m)
        assert isinstance(d, str) and d.endswith(".") and len(d) > 20
    with pytest.raises(qcore.QuantizationError):
        describe("nope")


def test_quantparams_interface():
    x = heavy((4, 10))
    p = choose_params(x, "int4", granularity="blocked", axis=1, block_size=4)
    assert isinstance(p, QuantParams)
    assert p.kwargs == {"axis": 1, "block_size": 4}
    assert p.format.name == "int4" and p.n_scales == 12
    assert np.any(p.zero_point != 0)  # an asymmetric one: stored (docs/semantics.md, Definitions)
    assert metrics.bits_per_element(p, 40) == pytest.approx(4 + (12 * 32 + 12 * 4) / 40)
    lo, hi = p.value_range()
    assert lo.shape == hi.shape == (4, 3)
    expected_hi = (7 - p.zero_point.astype(np.float64)) * p.scale.astype(np.float64)
    assert np.allclose(hi, expected_hi, rtol=1e-6)
    assert p.layout(x.shape).granularity == "blocked"


def test_float16_and_bfloat16_inputs():
    for dt in (np.float16, ml_dtypes.bfloat16):
        x = heavy((4, 32)).astype(dt)
        for m in ("minmax", "percentile", "mse"):
            p = choose_params(x, "int8", method=m, granularity="per-axis")
            assert p.scale.shape == (4,)
            p.round_trip(x)


# --- property: minmax never saturates beyond rounding ------------------------------------------


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=3), seed=st.integers(0, 2**16),
       granularity=st.sampled_from(["per-tensor", "per-axis", "blocked"]),
       target=st.sampled_from(["int8", "uint8", "int4", "uint2", "float8e4m3fn", "float4e2m1"]),
       block=st.integers(1, 5), axis_seed=st.integers(0, 10))
def test_minmax_round_trip_error_bounded(shape, seed, granularity, target, block, axis_seed):
    x = (np.random.default_rng(seed).standard_normal(shape) * 3).astype(np.float32)
    axis = axis_seed % len(shape)
    p = choose_params(x, target, granularity=granularity, axis=axis, block_size=block)
    xh = p.round_trip(x).astype(np.float64)
    layout = p.layout(x.shape)
    s = layout.expand(p.scale.astype(np.float64)).reshape(x.shape)
    fmt = qcore.get_format(target)
    if fmt.kind == "int":
        bound = s * 0.5000001 + 1e-6 * np.abs(x)
        assert (np.abs(xh - x) <= bound + 1e-12).all()
    else:  # half a step of the float grid at |x|/scale, at most
        v = np.abs(x) / s
        step = np.exp2(np.floor(np.log2(np.maximum(v, fmt.min_normal))) - fmt.mbits)
        assert (np.abs(xh - x) <= s * step * 0.5000001 + 1e-6 * np.abs(x) + 1e-12).all()
