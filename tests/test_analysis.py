"""Analyses: format comparison and its Pareto front, sweeps, repeated round trips, chains."""

from __future__ import annotations

import math

import numpy as np
import pytest

import qcore
from qcore.analysis import (
    bits_sqnr_front,
    block_size_sweep,
    chain,
    clipping_sweep,
    compare_formats,
    compare_recipes,
    pareto_front,
    repeated_round_trips,
)
from qcore.calibration import choose_params
from qcore.metrics import error_metrics


def heavy(shape, seed=0):
    return np.random.default_rng(seed).standard_t(3, shape).astype(np.float32)


def test_pareto_front_on_constructed_points():
    bits = [4, 4, 8, 8, 6, 16, np.nan]
    sqnr = [10, 12, 30, 30, 11, 90, 100]
    front = pareto_front(bits, sqnr)
    # (4, 10) is beaten by (4, 12); (6, 11) by (4, 12); the two (8, 30) tie and both stay
    assert front.tolist() == [False, True, True, True, False, True, False]
    assert pareto_front([1.0], [math.inf]).tolist() == [True]
    assert pareto_front([2, 1], [math.inf, math.inf]).tolist() == [False, True]


def test_bits_are_compared_to_a_tenth_of_a_bit():
    # 8.0 and 8.04 bits cost the same (a zero point's storage), so the lower SQNR loses;
    # 8.0 against 8.25 (an MX scale per 32) is a real cost difference and both stay
    assert bits_sqnr_front([8.0, 8.04, 4.25], [30, 31, 18]).tolist() == [False, True, True]
    assert bits_sqnr_front([8.0, 8.25], [30, 31]).tolist() == [True, True]
    assert pareto_front([8.0, 8.04], [30, 31]).tolist() == [True, True]


def test_compare_formats_rows_and_pareto():
    x = heavy((64, 128))
    targets = ["int4", "int8", "int16", "float8e4m3fn", "float4e2m1", "float8e5m2"]
    df = compare_formats(x, targets, granularity="per-axis", axis=0, block_size=32,
                         method="minmax")
    assert list(df.columns[:8]) == ["format", "bits", "bits_per_element", "sqnr_db", "rmse",
                                    "max_abs_error", "clipped_fraction", "pareto"]
    assert df["format"].tolist() == targets
    assert df["pareto"].dtype == bool
    assert np.array_equal(df["pareto"].to_numpy(),
                          bits_sqnr_front(df["bits_per_element"], df["sqnr_db"]))
    s = dict(zip(df["format"], df["sqnr_db"]))
    assert s["int16"] > s["int8"] > s["int4"]
    assert s["float8e4m3fn"] > s["float8e5m2"]  # more mantissa at equal bits
    assert df.set_index("format").loc["int16", "pareto"]
    assert not df.set_index("format").loc["float8e5m2", "pareto"]  # int8/e4m3 beat it
    # each row is what choose_params + a round trip + error_metrics give
    p = choose_params(x, "int8", granularity="per-axis", axis=0)
    m = error_metrics(x, p.round_trip(x), params=p)
    row = df.set_index("format").loc["int8"]
    assert row["sqnr_db"] == m["sqnr_db"] and row["bits_per_element"] == m["bits_per_element"]
    assert (df["error"] == "").all()


def test_compare_formats_reports_formats_the_opset_lacks():
    x = heavy(100)
    df = compare_formats(x, ["int8", "float6e2m3", "int2"], opset=21)
    rows = df.set_index("format")
    assert rows.loc["int8", "error"] == ""
    assert "QuantizeLinear-21" in rows.loc["float6e2m3", "error"]
    assert math.isnan(rows.loc["int2", "sqnr_db"]) and not rows.loc["int2", "pareto"]
    assert rows.loc["int8", "pareto"]


def test_compare_formats_all_and_blocked_mx():
    x = heavy((16, 64))
    df = compare_formats(x, None, granularity="blocked", axis=1, block_size=32, method="mx")
    assert len(df) == len(qcore.QUANTIZED_TYPES) and (df["error"] == "").all()
    # MX is symmetric: only unsigned integers store a zero point (their midpoint); signed ones
    # and floats have zero point 0, which opset >= 21 leaves out (docs/semantics.md, Definitions)
    is_uint = df["format"].str.startswith("uint")
    expected = df["bits"] + 8 / 32 + np.where(is_uint, df["bits"] / 32, 0)
    assert np.allclose(df["bits_per_element"], expected)


def test_clipping_sweep():
    x = heavy(20_000, seed=1)
    df = clipping_sweep(x, "int4", n=40)
    assert list(df.columns[:5]) == ["clip_ratio", "threshold", "mse", "rounding_mse",
                                    "clipping_mse"]
    assert len(df) == 40 and df["clip_ratio"].iloc[-1] == 1.0
    assert np.allclose(df["rounding_mse"] + df["clipping_mse"], df["mse"], rtol=1e-9)
    best = df.attrs["optimum"]
    assert best == int(df["mse"].idxmin()) and df["optimum"].sum() == 1 and df["optimum"][best]
    assert df["clip_ratio"][best] < 0.8  # heavy tails: clipping pays at 4 bits
    assert df["clipping_mse"].iloc[-1] == 0  # amax: nothing saturates
    assert df["threshold"].iloc[-1] == pytest.approx(np.abs(x).max(), rel=1e-6)
    # clipping error falls and rounding error grows as the threshold grows
    assert df["clipping_mse"].iloc[0] > df["clipping_mse"].iloc[-1]
    assert df["rounding_mse"].iloc[0] < df["rounding_mse"].iloc[-1]


@pytest.mark.parametrize("target", ["uint8", "float8e4m3fn"])
def test_clipping_sweep_grouped(target):
    x = heavy((32, 64), seed=2)
    df = clipping_sweep(x, target, n=10, granularity="blocked", axis=1, block_size=16)
    assert len(df) == 10 and df["mse"].notna().all()


def test_block_size_sweep():
    x = heavy((32, 256), seed=3)
    df = block_size_sweep(x, "int4", [0, -4, 8, 16, 32, 2.5, 64, 256, 1000], axis=1)
    assert df["block_size"].tolist() == [8, 16, 32, 64, 256]
    assert df["n_blocks"].tolist() == [32, 16, 8, 4, 1]
    assert np.allclose(df["bits_per_element"], 4 + 36 / df["block_size"])
    assert df["sqnr_db"].iloc[0] > df["sqnr_db"].iloc[-1]
    short = block_size_sweep(x, "float4e2m1", [24], axis=-1, method="mx")
    assert short["n_blocks"].tolist() == [11]  # 256 = 10 * 24 + 16: the last block is short


@pytest.mark.parametrize("target, method", [("int8", "minmax"), ("uint4", "percentile"),
                                            ("float8e4m3fn", "absmax"), ("float4e2m1", "mx")])
def test_repeated_round_trips_are_stable(target, method):
    x = heavy((16, 64), seed=4)
    p = choose_params(x, target, method=method, granularity="blocked", axis=1, block_size=16)
    df = repeated_round_trips(x, target, p, n=4)
    assert df["round_trip"].tolist() == [1, 2, 3, 4]
    assert df["changed"].iloc[0] > 0
    assert (df["changed"].iloc[1:] == 0).all() and (df["max_change"].iloc[1:] == 0).all()
    assert (df["mse"] == df["mse"].iloc[0]).all()


def test_repeated_round_trips_checks_target():
    x = heavy(10)
    p = choose_params(x, "int8")
    with pytest.raises(qcore.QuantizationError):
        repeated_round_trips(x, "int4", p)


def test_chain():
    x = heavy((32, 32), seed=5)
    steps = chain(x, ["float8e4m3fn", "int8"])
    assert [s["step"] for s in steps] == [1, 2]
    assert [s["format"] for s in steps] == ["float8e4m3fn", "int8"]
    p1 = choose_params(x, "float8e4m3fn")
    x1 = p1.round_trip(x)
    p2 = choose_params(x1, "int8")
    x2 = p2.round_trip(x1)
    assert np.array_equal(steps[0]["x_hat"], x1) and np.array_equal(steps[1]["x_hat"], x2)
    e = x2.astype(np.float64) - x
    assert steps[1]["mse"] == pytest.approx(np.mean(e * e), rel=1e-12)
    assert steps[1]["sqnr_db"] <= steps[0]["sqnr_db"] + 0.5
    e_step = x2.astype(np.float64) - x1
    assert steps[1]["step_mse"] == pytest.approx(np.mean(e_step * e_step), rel=1e-12)
    for s in steps:
        for k in ("sqnr_db", "rmse", "clipped_fraction", "bits_per_element", "params"):
            assert k in s


def test_chain_with_step_options():
    x = heavy(1000, seed=6)
    steps = chain(x, [{"target": "int4", "method": "mse"}, "float8e5m2"])
    assert steps[0]["params"].method == "mse" and steps[1]["params"].method == "minmax"


def test_compare_recipes_equals_the_reports_own_computation():
    """Each recipe row (its own target, granularity, block, calibration, scale type) has the
    figures of qcore.report's sliced computation; the label names the opset only where a zero
    point is stored because of it; a forced opset changes exactly that."""
    from qcore.recipes import parse_recipe
    from qcore.report.sliced import run_recipe

    x = np.random.default_rng(7).standard_t(4, (6, 40, 48)).astype(np.float32)
    names = ["int4:blocked32", "int4:blocked32@absmax", "mxfp4", "int8:per-axis",
             "uint8:per-tensor@percentile", "float8e4m3fn:blocked16@mse", "int4:blocked32@mx",
             "int4:per-axis@fullrange-mse"]
    df = compare_recipes(x, names)
    assert list(df["recipe"]) == [parse_recipe(n).name for n in names]
    for _, row in df.iterrows():
        report = run_recipe(x, parse_recipe(row["recipe"]))
        assert row["error"] == ""
        assert row["sqnr_db"] == pytest.approx(report["sqnr_db"], abs=1e-9), row["recipe"]
        assert row["bits_per_element"] == report["bits_per_element"], row["recipe"]
        assert row["opset"] == report["opset"]
        assert row["format"].endswith(f" · opset {row['opset']}") == row["opset_sets_bits"]
    assert df.set_index("recipe").loc["int4:blocked32@mx", "scale_type"] == "float8e8m0"
    assert df.set_index("recipe").loc["int8:per-axis", "opset_sets_bits"]  # opset 13: zp stored
    latest = compare_recipes(x, ["int8:per-axis"], opset=qcore.LATEST_OPSET)
    assert latest["bits_per_element"][0] < df.set_index("recipe").loc["int8:per-axis",
                                                                     "bits_per_element"]
    assert not latest["opset_sets_bits"][0] and latest["format"][0] == "int8:per-axis"
