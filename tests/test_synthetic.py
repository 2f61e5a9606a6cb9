"""qcore.synthetic: determinism, shapes, dtypes and each distribution's defining property."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from qcore.errors import QuantizationError
from qcore.synthetic import DEFAULTS, DISTRIBUTIONS, defaults, describe, generate

N = 1_000_000


def test_the_nine_distributions():
    assert DISTRIBUTIONS == ("normal", "laplace", "uniform", "student_t", "lognormal",
                             "bimodal", "outliers", "sparse", "outlier_channel")
    assert set(DEFAULTS) == set(DISTRIBUTIONS)
    assert defaults("student_t") == {"df": 3.0, "scale": 1.0}
    assert defaults("outliers") == {"fraction": 0.001, "magnitude": 50.0, "std": 1.0}
    assert defaults("sparse")["density"] == 0.1


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_deterministic_by_seed(distribution):
    a = generate(distribution, (64, 33), seed=5)
    b = generate(distribution, (64, 33), seed=5)
    c = generate(distribution, (64, 33), seed=6)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_seed_defaults_to_zero_and_is_pcg64():
    expected = np.random.Generator(np.random.PCG64(0)).standard_normal(10, dtype=np.float32)
    np.testing.assert_array_equal(generate("normal", 10), expected)


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
@pytest.mark.parametrize("shape, expected", [(7, (7,)), ((2, 3, 4), (2, 3, 4)), ((0, 5), (0, 5))])
def test_shapes(distribution, shape, expected):
    x = generate(distribution, shape)
    assert x.shape == expected and x.dtype == np.float32


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, "bfloat16", np.float64])
def test_dtypes(distribution, dtype):
    x = generate(distribution, 1000, dtype=dtype)
    assert x.dtype == np.dtype(dtype)
    assert np.isfinite(x.astype(np.float64)).all()


def test_float64_is_drawn_in_float64():
    x = generate("normal", 1000, dtype=np.float64)
    assert not np.array_equal(x, x.astype(np.float32).astype(np.float64))


def test_normal():
    x = generate("normal", N, mean=3.0, std=2.0).astype(np.float64)
    assert abs(x.mean() - 3.0) < 0.01 and abs(x.std() - 2.0) < 0.01


def test_laplace():
    x = generate("laplace", N, loc=1.0, scale=0.5).astype(np.float64)
    assert abs(np.median(x) - 1.0) < 0.01
    assert abs(x.std() - math.sqrt(2) * 0.5) < 0.01
    assert abs(np.mean(np.abs(x - 1.0)) - 0.5) < 0.005  # mean absolute deviation = scale


def test_uniform_stays_in_range():
    x = generate("uniform", N, low=-3.0, high=5.0)
    assert x.min() >= -3.0 and x.max() <= 5.0
    assert abs(float(x.mean()) - 1.0) < 0.02
    counts, _ = np.histogram(x, bins=8, range=(-3, 5))
    assert counts.min() > 0.97 * N / 8


def test_student_t_heavy_tails():
    x = generate("student_t", N).astype(np.float64)
    # Quantiles of t(3): 0.99 -> 4.5407, 0.999 -> 10.2145.
    assert abs(np.quantile(x, 0.99) - 4.5407) < 0.1
    assert abs(np.quantile(x, 0.999) - 10.2145) < 0.6
    normal = generate("normal", N).astype(np.float64)
    assert np.abs(x).max() > 5 * np.abs(normal).max()
    y = generate("student_t", N, df=30.0, scale=2.0).astype(np.float64)
    assert abs(y.std() - 2.0 * math.sqrt(30 / 28)) < 0.02


def test_lognormal_is_positive():
    x = generate("lognormal", N, sigma=0.5).astype(np.float64)
    assert (x > 0).all()
    assert abs(np.median(x) - 1.0) < 0.01
    assert abs(np.log(x).std() - 0.5) < 0.005


def test_bimodal_has_two_separated_modes():
    x = generate("bimodal", N, separation=8.0, std=1.0).astype(np.float64)
    assert abs(np.mean(x > 0) - 0.5) < 0.005
    assert abs(np.abs(x).mean() - 4.0) < 0.01
    assert np.mean(np.abs(x) < 1.0) < 0.01  # the middle is (almost) empty
    hist, _ = np.histogram(x, bins=9, range=(-9, 9))
    assert hist[4] < hist[2] / 20 and hist[4] < hist[6] / 20


@pytest.mark.parametrize("fraction, magnitude", [(0.001, 50.0), (0.01, 20.0), (0.0, 50.0)])
def test_outliers_count_and_size(fraction, magnitude):
    x = generate("outliers", N, fraction=fraction, magnitude=magnitude, std=2.0)
    big = np.abs(x) == np.float32(magnitude * 2.0)
    assert big.sum() == round(fraction * N)
    assert np.abs(x[~big]).max() < 7 * 2.0
    if big.any():
        assert 0.4 < np.mean(x[big] > 0) < 0.6


def test_outliers_default_is_one_in_a_thousand():
    x = generate("outliers", 4096 * 16)
    assert (np.abs(x) == 50).sum() == round(0.001 * 4096 * 16)


@pytest.mark.parametrize("density", [0.1, 0.5, 0.0, 1.0])
def test_sparse_zero_fraction(density):
    x = generate("sparse", N, density=density)
    assert abs(np.mean(x == 0) - (1 - density)) < 0.003
    nonzero = x[x != 0].astype(np.float64)
    if density:
        assert abs(nonzero.std() - 1.0) < 0.02


def test_default_sparse_is_ninety_percent_zeros():
    assert abs(np.mean(generate("sparse", N) == 0) - 0.9) < 0.003


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_describe(distribution):
    text = describe(distribution)
    assert isinstance(text, str) and 30 < len(text) < 200 and text.endswith(".")


@pytest.mark.parametrize(
    "call, word",
    [
        (lambda: generate("cauchy", 3), "unknown distribution 'cauchy'; valid are normal"),
        (lambda: describe("cauchy"), "valid are"),
        (lambda: generate("normal", 3, df=3), "normal takes no parameter df; it takes mean"),
        (lambda: generate("normal", 3, std=0.0), "std=0.0 must be > 0"),
        (lambda: generate("normal", 3, std=float("nan")), "must be finite"),
        (lambda: generate("normal", 3, mean="1"), "must be a number"),
        (lambda: generate("student_t", 3, df=-1.0), "df=-1.0 must be > 0"),
        (lambda: generate("sparse", 3, density=1.5), r"density=1.5 must be in \[0, 1\]"),
        (lambda: generate("outliers", 3, fraction=-0.1), r"fraction=-0.1 must be in \[0, 1\]"),
        (lambda: generate("uniform", 3, low=1.0, high=1.0), "low=1.0 must be less than high"),
        (lambda: generate("normal", (2, -1)), "not valid; give an int or a tuple"),
        (lambda: generate("normal", 2.5), "not valid"),
        (lambda: generate("normal", 3, seed=-1), "seed -1 is not valid"),
        (lambda: generate("normal", 3, dtype=np.int8), "dtype"),
        (lambda: generate("normal", 3, dtype="nonsense"), "dtype"),
    ],
)
def test_invalid_arguments(call, word):
    with pytest.raises(QuantizationError, match=word):
        call()


@pytest.mark.slow
def test_16_mi_elements():
    # sizes the app offers; timings (0.05-0.7 s each on the 2-core development machine) are a
    # figure, not an assertion
    for distribution in DISTRIBUTIONS:
        x = generate(distribution, (4096, 4096))
        assert x.shape == (4096, 4096) and x.dtype == np.float32
        assert np.isfinite(x).all(), distribution


def test_outlier_channel_is_one_whole_row_along_axis_0():
    x = generate("outlier_channel", (16, 64), seed=3, magnitude=20.0)
    base = generate("normal", (16, 64), seed=3)  # the same normal draws, before the scaling
    ratio = np.abs(x).max(axis=1) / np.abs(x).mean()
    big = np.flatnonzero(ratio > 5)
    assert big.size == 1  # exactly one output channel is large
    r = int(big[0])
    np.testing.assert_array_equal(x[r], base[r] * np.float32(20.0))
    np.testing.assert_array_equal(np.delete(x, r, axis=0), np.delete(base, r, axis=0))
