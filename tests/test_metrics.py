"""Metrics: histograms vs NumPy, error statistics vs direct formulas, clipping on constructed
data, per-group errors vs loops, and the walkthrough vs qcore on the whole tensor."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import qcore
from qcore import metrics
from qcore.calibration import choose_params
from qcore.metrics import (
    downsample_xy,
    error_metrics,
    group_errors,
    histogram,
    log_histogram,
    representable_values,
    walkthrough,
)

BIG = 1 << 17  # above the parallel threshold


def rng(seed=0):
    return np.random.default_rng(seed)


# --- histogram ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 1000, BIG + 17])
@pytest.mark.parametrize("bins", [1, 7, 128])
def test_histogram_matches_numpy(dtype, n, bins):
    x = (rng(n).standard_normal(n) * 3).astype(dtype)
    counts, edges = histogram(x, bins=bins)
    ref_c, ref_e = np.histogram(x, bins=bins)
    assert counts.dtype == np.int64 and edges.dtype == np.float64
    assert np.array_equal(counts, ref_c)
    assert np.array_equal(edges, ref_e.astype(np.float64))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_histogram_with_range_and_edges(dtype):
    x = np.concatenate([rng(1).uniform(-2, 2, 5000), np.arange(-1, 1.01, 0.25)]).astype(dtype)
    x = np.concatenate([x, np.linspace(-0.1, 0.1, 1001).astype(dtype),
                        np.array([-0.1, 0.1, 1 / 3, -1 / 3, 2 / 3], dtype)])
    for r in ((-1.0, 1.0), (-0.5, 0.75), (0.0, 0.0), (-0.1, 0.1), (-1 / 3, 2 / 3), (0.1, 0.1)):
        for bins in (3, 8, 100):
            counts, edges = histogram(x, bins=bins, range=r)
            ref_c, ref_e = np.histogram(x, bins=bins, range=r)
            assert np.array_equal(counts, ref_c), (r, bins)
            assert np.array_equal(edges, ref_e.astype(np.float64)), (r, bins)


def test_histogram_skips_nan_and_inf():
    x = rng(2).standard_normal(BIG).astype(np.float32)
    y = x.copy()
    y[::7] = np.nan
    y[1::11] = np.inf
    y[2::13] = -np.inf
    counts, edges = histogram(y, bins=50)
    finite = y[np.isfinite(y)]
    ref_c, ref_e = np.histogram(finite, bins=50)
    assert np.array_equal(counts, ref_c) and counts.sum() == finite.size
    assert np.array_equal(edges, ref_e)


def test_histogram_constant_and_empty():
    c, e = histogram(np.full(10, 3.0, np.float32), bins=4)
    rc, re = np.histogram(np.full(10, 3.0, np.float32), bins=4)
    assert np.array_equal(c, rc) and np.allclose(e, re)
    c, e = histogram(np.array([np.nan], np.float32), bins=4)
    assert c.sum() == 0 and e.size == 5


def test_histogram_float16_input():
    x = rng(3).standard_normal(1000).astype(np.float16)
    c, _ = histogram(x, bins=16)
    assert c.sum() == 1000


def test_log_histogram():
    x = np.array([0, 0, 1e-3, -1e-3, 1, 10, -100, np.nan], np.float32)
    counts, edges, zeros = log_histogram(x, bins=5)
    assert zeros == 2 and counts.sum() == 5
    assert edges[0] == pytest.approx(1e-3, rel=1e-5) and edges[-1] == pytest.approx(100, rel=1e-5)


# --- error metrics --------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1000, BIG + 3])
def test_sqnr_of_known_noise(n):
    x = rng(4).standard_normal(n)
    noise = rng(5).standard_normal(n) * 0.01
    xh = x + noise
    m = error_metrics(x, xh)
    e = xh - x
    assert m["sqnr_db"] == pytest.approx(10 * math.log10(np.sum(x * x) / np.sum(e * e)), rel=1e-9)
    assert m["sqnr_db"] == pytest.approx(40.0, abs=0.2)  # unit signal, noise power 1e-4
    assert m["mse"] == pytest.approx(np.mean(e * e), rel=1e-9)
    assert m["rmse"] == pytest.approx(np.sqrt(np.mean(e * e)), rel=1e-9)
    assert m["max_abs_error"] == np.max(np.abs(e))
    assert m["mean_abs_error"] == pytest.approx(np.mean(np.abs(e)), rel=1e-9)
    assert m["mean_rel_error"] == pytest.approx(np.mean(np.abs(e) / np.abs(x)), rel=1e-9)
    assert m["n"] == m["n_compared"] == n
    assert m["nan_in"] == m["inf_in"] == m["nan_out"] == m["inf_out"] == 0
    assert math.isnan(m["clipped_fraction"]) and math.isnan(m["bits_per_element"])


def test_exact_round_trip_has_infinite_sqnr():
    x = np.arange(-5, 6, dtype=np.float32)
    m = error_metrics(x, x.copy())
    assert m["sqnr_db"] == math.inf and m["mse"] == 0 and m["max_abs_error"] == 0


def test_keys():
    m = error_metrics(np.ones(3, np.float32), np.ones(3, np.float32), target="int8")
    for k in ("mse", "rmse", "sqnr_db", "max_abs_error", "mean_abs_error", "mean_rel_error",
              "clipped_fraction", "nan_in", "inf_in", "nan_out", "inf_out", "bits_per_element",
              "n"):
        assert k in m
    assert m["bits_per_element"] == 8


def test_nan_inf_counts_and_relative_error_skips_zeros():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, 2.0, 1.0], np.float32)
    xh = np.array([-1.0, 1.0, np.nan, 0.5, np.inf, 1.5], np.float32)
    m = error_metrics(x, xh)
    assert (m["nan_in"], m["inf_in"], m["nan_out"], m["inf_out"]) == (1, 2, 1, 1)
    assert m["n_compared"] == 2  # (0, 0.5) and (1, 1.5)
    assert m["mse"] == pytest.approx(0.25) and m["max_abs_error"] == 0.5
    assert m["mean_rel_error"] == pytest.approx(0.5)  # only x = 1 counts


def test_clipped_fraction_on_constructed_data():
    # int8, scale 1, zero point 0: codes -128..127, saturation beyond half a step past them
    x = np.array([-200, -128.6, -128.4, 0, 127.4, 127.6, 300, np.nan], np.float32)
    p = choose_params(x, "int8", method="manual", manual_scale=1.0)
    xh = p.round_trip(x)
    m = error_metrics(x, xh, params=p)
    assert m["n_clipped"] == 4 and m["clipped_fraction"] == pytest.approx(4 / 7)
    assert m["clipping_mse"] + m["rounding_mse"] == pytest.approx(m["mse"])
    assert m["clipping_mse"] == pytest.approx((72 ** 2 + 0.6 ** 2 + 0.6 ** 2 + 173 ** 2) / 7,
                                              rel=1e-5)


def test_clipped_fraction_per_channel_and_float_target():
    # two channels with scales 1 and 10 (per-axis over axis 1); float4e2m1: max 6, next 4
    x = np.array([[6.9, 69.0], [7.1, 71.0], [-7.5, -50.0]], np.float32)
    p = choose_params(x, "float4e2m1", method="manual", granularity="per-axis", axis=1,
                      manual_scale=[1.0, 10.0])
    m = error_metrics(x, p.round_trip(x), params=p)
    # bounds: +-(6 + 1) and +-(60 + 10): clipped are 7.1, 71.0, -7.5
    assert m["n_clipped"] == 3 and m["clipped_fraction"] == pytest.approx(0.5)


def test_minmax_and_absmax_do_not_clip():
    x = rng(6).standard_t(3, (64, 96)).astype(np.float32)
    for t in ("int8", "uint8", "int4", "float8e4m3fn", "float4e2m1"):
        for g in ("per-tensor", "per-axis", "blocked"):
            for method in ("minmax", "absmax"):
                p = choose_params(x, t, method=method, granularity=g, axis=1)
                m = error_metrics(x, p.round_trip(x), params=p)
                assert m["clipped_fraction"] == 0, (t, g, method)


@pytest.mark.parametrize("granularity", ["per-tensor", "per-axis", "blocked"])
def test_clipped_fraction_matches_direct_count(granularity):
    x = rng(7).standard_t(2, (40, 70)).astype(np.float32)
    p = choose_params(x, "int4", method="percentile", percentile=95, granularity=granularity,
                      axis=1, block_size=16)
    y = p.quantize(x).astype(np.int64)
    zp = p.layout(x.shape).expand(p.zero_point.astype(np.int64)).reshape(x.shape)
    s = p.layout(x.shape).expand(p.scale.astype(np.float32)).reshape(x.shape)
    unclamped = np.rint(x / s) + zp
    expected = np.mean((unclamped > 7) | (unclamped < -8))
    m = error_metrics(x, p.round_trip(x), params=p)
    assert m["clipped_fraction"] == pytest.approx(expected, abs=2 / x.size)
    assert ((y == 7) | (y == -8))[(unclamped > 7) | (unclamped < -8)].all()


def test_bits_per_element():
    x = rng(8).standard_normal((16, 64)).astype(np.float32)
    p = choose_params(x, "int4", granularity="blocked", axis=1, block_size=32)
    m = error_metrics(x, p.round_trip(x), params=p)
    assert m["bits_per_element"] == pytest.approx(4 + (32 + 4) / 32)
    q = choose_params(x, "float4e2m1", method="mx", granularity="blocked", axis=1)
    assert error_metrics(x, q.round_trip(x), params=q)["bits_per_element"] == 4.25
    r = choose_params(x, "float8e4m3fn", granularity="per-axis", axis=0)
    assert error_metrics(x, r.round_trip(x), params=r)["bits_per_element"] == 8 + 32 * 16 / x.size
    y = r.quantize(x)
    assert error_metrics(x, r.round_trip(x), y=y)["bits_per_element"] == 8


@pytest.mark.parametrize("granularity, axis", [("per-tensor", 0), ("per-axis", 0),
                                               ("per-axis", 1), ("blocked", 1), ("blocked", 0)])
def test_large_tensor_parallel_path_matches_numpy(granularity, axis):
    x = rng(9).standard_normal((512, 300)).astype(np.float32)
    x[3, 4] = np.nan
    p = choose_params(x, "int8", method="percentile", percentile=99, granularity=granularity,
                      axis=axis, block_size=32)
    xh = p.round_trip(x)
    m = error_metrics(x, xh, params=p)
    ok = np.isfinite(x)
    e = xh[ok].astype(np.float64) - x[ok]
    assert m["mse"] == pytest.approx(np.mean(e * e), rel=1e-9)
    assert m["max_abs_error"] == np.max(np.abs(e))
    assert m["nan_in"] == 1 and m["n_compared"] == x.size - 1
    sat_lo, sat_hi = p.saturation_bounds()
    lay = p.layout(x.shape)
    lo = lay.expand(sat_lo).reshape(x.shape)
    hi = lay.expand(sat_hi).reshape(x.shape)
    assert m["n_clipped"] == int(((x < lo) | (x > hi))[ok].sum())


def test_float16_and_bfloat16_x_hat():
    x = rng(10).standard_normal(100).astype(np.float32)
    for dt in (np.float16, ml_dtypes.bfloat16):
        xh = x.astype(dt)
        m = error_metrics(x, xh)
        e = xh.astype(np.float64) - x
        assert m["mse"] == pytest.approx(np.mean(e * e), rel=1e-9)


def test_size_mismatch_raises():
    with pytest.raises(qcore.QuantizationError):
        error_metrics(np.ones(3), np.ones(4))


# --- group errors ---------------------------------------------------------------------------------


def _loop_group_rmse(x, xh, p):
    """Independent: RMSE of each group by explicit loops over the scale's index map."""
    lay = p.layout(x.shape)
    idx = lay.expand(np.arange(p.scale.size)).reshape(-1)
    e = (xh.astype(np.float64) - x).reshape(-1)
    out = np.full(p.scale.size, np.nan)
    for g in range(p.scale.size):
        sel = e[(idx == g) & np.isfinite(e)]
        if sel.size:
            out[g] = np.sqrt(np.mean(sel * sel))
    return out.reshape(p.scale.shape)


@pytest.mark.parametrize("shape", [(6, 37), (3, 5, 11), (300, 700)])
@pytest.mark.parametrize("granularity", ["per-tensor", "per-axis", "blocked"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_group_errors_match_loops(shape, granularity, axis):
    x = rng(11).standard_normal(shape).astype(np.float32)
    x.reshape(-1)[5] = np.nan
    p = choose_params(x, "int4", granularity=granularity, axis=axis, block_size=8)
    xh = p.round_trip(x)
    g = group_errors(x, xh, p, x.shape)
    assert g.shape == p.scale.shape
    expected = _loop_group_rmse(x, xh, p)
    assert np.allclose(g, expected, rtol=1e-9, equal_nan=True)
    g2 = group_errors(x, xh, p.layout(x.shape), x.shape)
    assert np.allclose(g2, g, equal_nan=True) and g2.shape == g.shape


def test_group_errors_many_channels_last_axis():
    x = rng(12).standard_normal((64, 5000)).astype(np.float32)
    p = choose_params(x, "int8", granularity="per-axis", axis=1)
    xh = p.round_trip(x)
    g = group_errors(x, xh, p, x.shape)
    e = xh.astype(np.float64) - x
    assert np.allclose(g, np.sqrt(np.mean(e * e, axis=0)), rtol=1e-9)


@pytest.mark.parametrize("shape,granularity,axis,block", [
    ((7,), "per-tensor", 0, 0), ((5, 7), "per-axis", 1, 0), ((5, 7), "per-axis", 0, 0),
    ((3, 10, 4), "blocked", 1, 3), ((3, 10, 4), "blocked", 2, 3), ((3, 10, 4), "blocked", 0, 2),
    ((2, 3, 9, 2), "per-axis", 2, 0), ((200, 1), "per-axis", 1, 0), ((1, 8), "per-axis", 0, 0),
    ((517, 300), "blocked", 0, 32), ((300, 517), "blocked", 1, 32),  # parallel from here on
    ((40000, 3), "per-axis", 1, 0), ((3, 40000), "blocked", 1, 4), ((4, 70001), "blocked", 1, 5),
    ((8, 1 << 15), "per-axis", 1, 0),  # every run touches every group: longer runs
])
def test_group_sse_against_the_spec_index_map(shape, granularity, axis, block):
    import oracle

    from qcore.layout import Layout
    from qcore.reductions import group_sse

    lay = Layout.from_granularity(shape, granularity, axis, block)
    x = rng(21).standard_normal(shape).astype(np.float32)
    xh = x + rng(22).standard_normal(shape).astype(np.float32) * 0.1
    xh.reshape(-1)[::7] = np.nan
    x.reshape(-1)[::11] = np.inf
    group = oracle.expand(np.arange(lay.n_scales).reshape(lay.scale_shape()), shape, axis,
                          block).reshape(-1)
    e = (xh.astype(np.float64) - x).reshape(-1)
    ok = np.isfinite(e)
    sse, cnt = group_sse(x, xh, lay)
    assert np.array_equal(cnt, np.bincount(group, ok, lay.n_scales))
    assert np.allclose(sse, np.bincount(group, np.where(ok, e * e, 0), lay.n_scales),
                       rtol=1e-12)


# --- downsample -----------------------------------------------------------------------------------


def test_downsample_keeps_extremes_and_largest_errors():
    n = BIG * 2
    x = rng(13).standard_normal(n).astype(np.float32)
    y = x + rng(14).standard_normal(n).astype(np.float32) * 0.01
    worst = rng(15).choice(n, 10, replace=False)
    y[worst] += 5
    x[7] = np.nan
    xs, ys = downsample_xy(x, y, max_points=1000)
    assert xs.size == ys.size <= 1000 and xs.size >= 900
    assert np.all(np.diff(xs) >= 0)
    assert xs[0] == np.nanmin(x) and xs[-1] == np.nanmax(x)
    kept = set(zip(xs.tolist(), ys.tolist()))
    for i in worst:
        assert (float(x[i]), float(y[i])) in kept
    assert np.isfinite(xs).all() and np.isfinite(ys).all()


def test_downsample_small_input_returns_all_sorted():
    x = np.array([3, 1, 2], np.float32)
    xs, ys = downsample_xy(x, x * 2)
    assert xs.tolist() == [1, 2, 3] and ys.tolist() == [2, 4, 6]


# --- representable values -------------------------------------------------------------------------


def test_representable_values():
    assert representable_values("int4").tolist() == list(range(-8, 8))
    assert representable_values("uint2").tolist() == [0, 1, 2, 3]
    f4 = [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert representable_values("float4e2m1").tolist() == sorted({-v for v in f4} | set(f4))
    e4 = representable_values("float8e4m3fn")
    assert e4[-1] == 448 and e4[0] == -448 and e4.size == 253 and np.all(np.diff(e4) > 0)
    assert representable_values("float8e5m2")[-1] == 57344
    assert representable_values("float6e3m2")[-1] == 28
    with pytest.raises(qcore.QuantizationError):
        representable_values("int32")


# --- walkthrough ----------------------------------------------------------------------------------


CASES = [
    ("int8", "minmax", "per-tensor", None),
    ("uint4", "minmax", "per-axis", None),
    ("int4", "percentile", "blocked", None),
    ("uint8", "absmax", "per-tensor", "float16"),
    ("float8e4m3fn", "percentile", "per-axis", None),
    ("float8e5m2", "percentile", "per-tensor", None),
    ("float4e2m1", "mx", "blocked", None),
    ("float6e3m2", "percentile", "blocked", "bfloat16"),
    ("int2", "minmax", "blocked", None),
]


@pytest.mark.parametrize("target, method, granularity, precision", CASES)
@pytest.mark.parametrize("saturate", [True, False])
def test_walkthrough_agrees_with_qcore(target, method, granularity, precision, saturate):
    x = (rng(16).standard_t(3, (8, 40)) * 2).astype(np.float32)
    x[0, 0] = np.nan
    x[0, 1] = 1e4  # saturates every format
    x[0, 2] = -0.0
    p = choose_params(x, target, method=method, granularity=granularity, axis=1, block_size=16,
                      percentile=90)
    y = p.quantize(x, saturate=saturate, precision=precision)
    xh = p.dequantize(y)
    fmt = qcore.get_format(target)
    indices = list(range(x.size))
    df = walkthrough(x, p, target, indices, saturate=saturate, precision=precision)
    assert list(df.columns[:2]) == ["index", "position"]
    for col in ("x", "scale", "x/scale", "rounded", "+zero point", "saturated", "stored bits",
                "x̂", "error"):
        assert col in df.columns
    assert len(df) == x.size
    flat = x.reshape(-1)
    assert np.array_equal(df["x"].to_numpy(), flat.astype(np.float64), equal_nan=True)
    sfull = p.layout(x.shape).expand(p.scale.astype(np.float64))
    assert np.array_equal(df["scale"].to_numpy(), sfull)
    codes = y.reshape(-1)
    # saturated == the code qcore stored; x̂ == qcore's dequantized value; error == x̂ - x
    assert np.array_equal(df["saturated"].to_numpy(), codes.astype(np.float64), equal_nan=True)
    assert np.array_equal(df["x̂"].to_numpy(), xh.reshape(-1).astype(np.float64),
                          equal_nan=True)
    err = xh.reshape(-1).astype(np.float64) - flat
    assert np.array_equal(df["error"].to_numpy(), err, equal_nan=True)
    # stored bits are the code's bit pattern
    raw = codes.view(fmt.storage_dtype).astype(np.int64) & ((1 << fmt.bits) - 1) \
        if fmt.kind != "int" else codes.astype(np.int64) & ((1 << fmt.bits) - 1)
    assert [int(b, 2) for b in df["stored bits"]] == raw.tolist()
    assert all(len(b) == fmt.bits for b in df["stored bits"])
    # the chain of steps is consistent: saturate(+zero point) == stored code
    pz = df["+zero point"].to_numpy()
    fin = np.isfinite(pz)
    if fmt.kind == "int":
        assert np.array_equal(df["rounded"].to_numpy()[fin] % 1, np.zeros(fin.sum()))
        clipped = np.clip(pz[fin], fmt.min, fmt.max)
        assert np.array_equal(clipped, codes.astype(np.float64)[fin])
        assert (codes[~fin].astype(np.int64) == fmt.min).all()  # NaN -> the minimum
    else:
        inside = fin & (np.abs(pz) <= fmt.max)
        assert np.array_equal(pz[inside], codes.astype(np.float64)[inside])
        out = fin & (np.abs(pz) > fmt.max)
        assert out.any()
        stored = codes.astype(np.float64)[out]
        if saturate or not (fmt.has_inf or fmt.nan_style):
            assert np.array_equal(np.abs(stored), np.full(out.sum(), fmt.max))
        else:
            assert not np.isfinite(stored).any()


def test_walkthrough_by_tuple_indices_and_given_outputs():
    x = rng(17).standard_normal((4, 6)).astype(np.float32)
    p = choose_params(x, "int8", granularity="per-axis", axis=0)
    y = p.quantize(x)
    df = walkthrough(x, p, "int8", [(1, 2), (3, 5)], y=y, x_hat=p.dequantize(y))
    assert df["index"].tolist() == [8, 23]
    assert df["position"].tolist() == [(1, 2), (3, 5)]
    assert df["x"].tolist() == [float(x[1, 2]), float(x[3, 5])]
    assert df["scale"].tolist() == [float(p.scale[1]), float(p.scale[3])]


def test_walkthrough_hand_example():
    x = np.array([-1.0, 0.5, 3.0], np.float32)
    p = choose_params(x, "uint8")  # scale 4/255, zp 64
    df = walkthrough(x, p, "uint8", [1])
    row = df.iloc[0]
    assert row["x/scale"] == pytest.approx(0.5 / (4 / 255), rel=1e-6)  # 31.875
    assert row["rounded"] == 32 and row["+zero point"] == 96 and row["saturated"] == 96
    assert row["stored bits"] == "01100000"
    assert row["x̂"] == pytest.approx(32 * 4 / 255, rel=1e-6)


def test_module_exports():
    for name in ("histogram", "error_metrics", "downsample_xy", "group_errors", "walkthrough",
                 "representable_values"):
        assert callable(getattr(metrics, name))


@pytest.mark.parametrize("target, q, rounded, saturated, unsaturated", [
    ("float8e4m3fn", 1000.0, 1024.0, 448.0, math.nan),  # 1.953 * 2^9 -> 2.0 * 2^9, then clamp
    ("float8e4m3fn", 500.0, 512.0, 448.0, math.nan),
    ("float8e4m3fn", 0.3, 0.3125, 0.3125, 0.3125),  # in range: rounded is the stored value
    ("float8e4m3fn", 3 * 2.0 ** -10, 2.0 ** -8, 2.0 ** -8, 2.0 ** -8),  # subnormal: tie to even
    ("float8e5m2", 70000.0, 65536.0, 57344.0, math.inf),
    ("float4e2m1", 9.0, 8.0, 6.0, 6.0),  # no Inf/NaN: always saturates
    ("float4e2m1", -0.25, -0.0, -0.0, -0.0),
])
def test_walkthrough_float_rounding_before_overflow(target, q, rounded, saturated, unsaturated):
    x = np.array([q, 1.0], np.float32)
    p = qcore.calibration.QuantParams(np.float32(1.0), None, 1, 0, "per-tensor", "manual", target)
    for sat, want in ((True, saturated), (False, unsaturated)):
        row = walkthrough(x, p, target, [0], saturate=sat).iloc[0]
        assert row["x/scale"] == np.float32(q)
        assert row["rounded"] == rounded and row["+zero point"] == rounded
        assert np.signbit(row["rounded"]) == np.signbit(rounded)
        assert row["saturated"] == want or (math.isnan(want) and math.isnan(row["saturated"]))
        assert row["saturated"] == float(p.quantize(x, saturate=sat)[0]) or math.isnan(want)


@pytest.mark.parametrize("granularity, axis", [("per-axis", 1), ("blocked", 1), ("blocked", 2),
                                               ("blocked", 0)])
def test_clipping_bounds_follow_the_index_map_in_3d(granularity, axis):
    # groups with pre, dim and post all > 1; chunks end inside rows and blocks
    x = rng(11).standard_t(2, (6, 50, 230)).astype(np.float32)
    p = choose_params(x, "int8", method="percentile", percentile=90, granularity=granularity,
                      axis=axis, block_size=7)
    m = error_metrics(x, p.round_trip(x), params=p)
    sat_lo, sat_hi = p.saturation_bounds()
    lay = p.layout(x.shape)
    lo = lay.expand(sat_lo).reshape(x.shape)
    hi = lay.expand(sat_hi).reshape(x.shape)
    assert m["n_clipped"] == int(((x < lo) | (x > hi)).sum()) > 0


def test_the_engine_imports_without_pandas_streamlit_or_plotly():
    """qcore's numerics load without the app's libraries: pandas is imported by the functions
    that return a DataFrame, when they are called."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, qcore, qcore.metrics, qcore.analysis, qcore.calibration, qcore.io\n"
            "bad = [m for m in ('pandas', 'streamlit', 'plotly') if m in sys.modules]\n"
            "assert not bad, bad\n")
    root = str(Path(__file__).resolve().parents[1])
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root, timeout=120)


def test_error_histograms_are_numpys_histogram_of_the_float32_errors():
    """Each name's histogram is np.histogram of x̂ − x (both float32) over the finite errors
    (NaN and ±Inf errors skipped, as documented for :func:`histogram`); a name the round trip
    refuses with QuantizationError is left out and the others keep their order."""
    x = (rng(5).standard_normal((48, 33)) * 3).astype(np.float64)
    x[0, 0] = np.nan  # a NaN input gives a NaN error
    f16 = x.astype(np.float16).astype(np.float64)
    f16[1, :4] = np.inf  # x̂ = +Inf: an Inf error
    f16[2, :3] = -np.inf
    x32 = x.astype(np.float32)
    trips = {"float16": f16, "int8": choose_params(x32, "int8").round_trip(x32),
             "scaled": x * 1.01}

    def round_trip(name):
        if name == "refused":
            raise qcore.QuantizationError("not on this tensor")
        return trips[name]

    names = ["int8", "refused", "float16", "scaled"]
    got = metrics.error_histograms(x, names, round_trip, bins=17)
    assert list(got) == ["int8", "float16", "scaled"]
    for name, (counts, edges) in got.items():
        with np.errstate(invalid="ignore"):
            err = np.asarray(trips[name], np.float32) - x.astype(np.float32)
        finite = err[np.isfinite(err)]
        ref_c, ref_e = np.histogram(finite, bins=17)
        assert np.array_equal(counts, ref_c), name
        assert np.array_equal(edges, ref_e.astype(np.float64)), name
        assert counts.sum() == finite.size < err.size, name
    # the float16 errors: 1 NaN input + 4 +Inf + 3 -Inf left out
    assert got["float16"][0].sum() == x.size - 8


def test_error_histograms_of_an_exact_round_trip_and_of_nothing():
    """An exact round trip: every error 0, one NumPy bin around it; no names: an empty dict."""
    x = rng(6).standard_normal(100).astype(np.float32)
    (counts, edges), = metrics.error_histograms(x, ["same"], lambda _: x.copy(), bins=5).values()
    ref_c, ref_e = np.histogram(np.zeros(100, np.float32), bins=5)
    assert np.array_equal(counts, ref_c) and np.array_equal(edges, ref_e)
    assert metrics.error_histograms(x, [], lambda _: x) == {}
