"""qcore.codes and qcore.tiles: the format knowledge and plot reductions the Explorer shows,
checked against ml_dtypes / NumPy written out."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import qcore
from qcore import codes, tiles


@pytest.mark.parametrize("name", ["int4", "uint8", "float8e4m3fn", "float8e5m2", "float4e2m1",
                                  "float6e3m2"])
def test_code_bits_and_fields(name):
    fmt = qcore.get_format(name)
    all_codes = fmt.all_codes()
    pats = codes.code_bits(fmt, all_codes)
    assert sorted(pats.tolist()) == list(range(1 << fmt.bits))
    s = codes.bit_string(pats[-1], fmt)
    assert s.replace(" ", "") == format(int(pats[-1]), f"0{fmt.bits}b")
    if fmt.is_float:
        assert len(s.split(" ")[1]) == fmt.ebits


def test_code_classes_of_e4m3fn_match_ml_dtypes():
    fmt = qcore.get_format("float8e4m3fn")
    classes = codes.code_classes(fmt)
    values = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    order = np.argsort(codes.code_bits(fmt, fmt.all_codes()))
    got = classes[order]
    assert (got[np.isnan(values)] == "NaN").all() and (np.isnan(values).sum() == 2)
    sub = (np.abs(values) < 2.0 ** -6) & (values != 0)
    assert (got[sub] == "subnormal").all() and sub.sum() == 14


def test_tile_rmse_is_the_rmse_of_each_tile():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((10, 7)).astype(np.float32)
    x_hat = x + rng.standard_normal((10, 7)).astype(np.float32) * 0.1
    x_hat[0, 0] = np.nan  # left out
    grid, tr, tc = tiles.tile_rmse(x, x_hat, cells=3)
    # 10 rows: tiles of 4 (the last holds 2, half full); 7 columns: 3 would leave a last tile
    # of 1, so tiles of 4 (the last holds 3)
    assert (tr, tc) == (4, 4) and grid.shape == (3, 2)
    e = (x_hat - x).astype(np.float64)
    tile = e[0:4, 0:4].reshape(-1)[1:]
    assert grid[0, 0] == pytest.approx(np.sqrt(np.mean(tile ** 2)), rel=1e-6)
    assert grid[2, 1] == pytest.approx(np.sqrt(np.mean(e[8:10, 4:7] ** 2)), rel=1e-6)


def test_the_last_tile_is_at_least_half_full():
    for n in range(1, 5000, 7):
        size = tiles.tile_size(n)
        assert -(-n // size) <= tiles.HEAT_CELLS
        first = -(-n // tiles.HEAT_CELLS)
        assert n % size == 0 or 2 * (n % size) >= size or size == first  # none fits: the first


def test_code_fields_rebuild_ml_dtypes_values():
    fmt = qcore.get_format("float8e4m3fn")
    pats = np.arange(256)
    sign, exponent, mantissa = codes.code_fields(fmt, pats)
    values = pats.astype(np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    ok = ~np.isnan(values)
    frac = np.where(exponent == 0, mantissa / 8, 1 + mantissa / 8)
    rebuilt = (-1.0) ** sign * frac * 2.0 ** (np.maximum(exponent, 1) - 7)
    assert np.array_equal(rebuilt[ok], values[ok])


def test_positive_values_are_ml_dtypes_positive_finite_values():
    fmt = qcore.get_format("float8e5m2")
    values = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e5m2).astype(np.float64)
    want = np.unique(values[np.isfinite(values) & (values > 0)])
    assert np.array_equal(codes.positive_values(fmt), want)
    assert codes.positive_values(qcore.get_format("float")).size == 0  # too wide to list
