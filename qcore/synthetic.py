"""Synthetic tensors with the shapes of distribution that matter for quantization.

``generate(distribution, shape, seed=0, dtype=np.float32, **params)`` is deterministic for a
given seed (NumPy ``Generator(PCG64(seed))``), draws in float32 (float64 when that is the
requested dtype) and is fast enough for 16 Mi elements (well under a second on one core).

Parameters and their defaults (``DEFAULTS``):

- ``normal``: ``mean=0, std=1``
- ``laplace``: ``loc=0, scale=1`` (density ∝ exp(-|x - loc| / scale); std = √2·scale)
- ``uniform``: ``low=-1, high=1``
- ``student_t``: ``df=3, scale=1``
- ``lognormal``: ``mean=0, sigma=1`` (of the underlying normal: x = exp(mean + sigma·z))
- ``bimodal``: ``separation=4, std=1`` (equal mixture of N(±separation/2, std²))
- ``outliers``: ``fraction=0.001, magnitude=50, std=1`` (N(0, std²) with exactly
  ``round(fraction·size)`` elements, at random places, replaced by ±magnitude·std)
- ``sparse``: ``density=0.1, std=1`` (each element is N(0, std²) with probability ``density``,
  else exactly 0)
- ``outlier_channel``: ``magnitude=20, std=1`` (N(0, std²) with one whole slice along axis 0,
  chosen by the seed, multiplied by ``magnitude``: for a weight of shape (out, in) that is one
  output channel, the case where one scale per output channel pays off)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

from .errors import QuantizationError

__all__ = ["DEFAULTS", "DISTRIBUTIONS", "defaults", "describe", "generate"]

DISTRIBUTIONS = (
    "normal",
    "laplace",
    "uniform",
    "student_t",
    "lognormal",
    "bimodal",
    "outliers",
    "sparse",
    "outlier_channel",
)

DEFAULTS: dict[str, dict[str, float]] = {
    "normal": {"mean": 0.0, "std": 1.0},
    "laplace": {"loc": 0.0, "scale": 1.0},
    "uniform": {"low": -1.0, "high": 1.0},
    "student_t": {"df": 3.0, "scale": 1.0},
    "lognormal": {"mean": 0.0, "sigma": 1.0},
    "bimodal": {"separation": 4.0, "std": 1.0},
    "outliers": {"fraction": 0.001, "magnitude": 50.0, "std": 1.0},
    "sparse": {"density": 0.1, "std": 1.0},
    "outlier_channel": {"magnitude": 20.0, "std": 1.0},
}

_DESCRIPTIONS = {
    "normal": "Bell-shaped values around the mean: most within ±2 standard deviations and "
    "almost none beyond ±4, the textbook case.",
    "laplace": "Sharply peaked at the centre with heavier tails than a normal, much like the "
    "values of trained weight matrices.",
    "uniform": "Every value between low and high equally likely and nothing outside, the "
    "easiest case for an evenly spaced quantization grid.",
    "student_t": "Normal-looking in the middle but with heavy tails (3 degrees of freedom by "
    "default) that throw occasional very large values, like activations and gradients.",
    "lognormal": "Only positive values, bunched near zero with a long tail to the right, like "
    "magnitudes, variances or attention scores.",
    "bimodal": "Two bell-shaped clusters at ±separation/2 with few values between them, so "
    "grid points in the empty middle are wasted.",
    "outliers": "Normal values plus a tiny fraction (0.1% by default) of single elements at "
    "±50 standard deviations, scattered at random places (not whole channels).",
    "sparse": "Mostly exact zeros (90% by default) with normal values in between, like pruned "
    "weights or the output of a ReLU.",
    "outlier_channel": "Normal values with one whole row (axis 0: an output channel of an "
    "(out, in) weight) 20× larger, the case per-axis scales along axis 0 fix.",
}


def describe(distribution: str) -> str:
    """One plain-words sentence about a distribution, for the UI."""
    return _DESCRIPTIONS[_check_distribution(distribution)]


def defaults(distribution: str) -> dict[str, float]:
    """The parameters a distribution takes, with their default values."""
    return dict(DEFAULTS[_check_distribution(distribution)])


def generate(
    distribution: str,
    shape: int | tuple[int, ...],
    seed: int = 0,
    *,
    dtype: Any = np.float32,
    **params: float,
) -> np.ndarray:
    """Draw a tensor of ``shape`` from ``distribution``; same seed, same values."""
    distribution = _check_distribution(distribution)
    shape = _check_shape(shape)
    out_dtype = _check_dtype(dtype)
    values = _check_params(distribution, params)
    work = np.float64 if out_dtype == np.float64 else np.float32
    rng = np.random.Generator(np.random.PCG64(_check_seed(seed)))
    size = math.prod(shape)
    if distribution in _BY_SHAPE:
        return _BY_SHAPE[distribution](rng, shape, work, **values).astype(out_dtype, copy=False)
    flat = _SAMPLERS[distribution](rng, size, work, **values)
    return flat.reshape(shape).astype(out_dtype, copy=False)


# --------------------------------------------------------------------------- samplers


def _normal(rng: np.random.Generator, n: int, dt: type, mean: float, std: float) -> np.ndarray:
    x = rng.standard_normal(n, dtype=dt)
    x *= dt(std)
    x += dt(mean)
    return x


def _signs(rng: np.random.Generator, n: int, dt: type) -> np.ndarray:
    """Random ±1 of dtype ``dt``."""
    return (rng.integers(0, 2, n, dtype=np.int8) * 2 - 1).astype(dt)


def _laplace(rng: np.random.Generator, n: int, dt: type, loc: float, scale: float) -> np.ndarray:
    x = rng.standard_exponential(n, dtype=dt)
    x *= _signs(rng, n, dt)
    x *= dt(scale)
    x += dt(loc)
    return x


def _uniform(rng: np.random.Generator, n: int, dt: type, low: float, high: float) -> np.ndarray:
    x = rng.random(n, dtype=dt)
    x *= dt(high - low)
    x += dt(low)
    return np.clip(x, dt(low), dt(high), out=x)


def _student_t(rng: np.random.Generator, n: int, dt: type, df: float, scale: float) -> np.ndarray:
    # t = z / sqrt(chi2(df) / df) with chi2(df) = 2 * Gamma(df / 2): all in ``dt``, fast.
    x = rng.standard_normal(n, dtype=dt)
    chi = rng.standard_gamma(df / 2, n, dtype=dt)
    chi *= dt(2 / df)
    np.sqrt(chi, out=chi)
    with np.errstate(divide="ignore", invalid="ignore"):
        x /= chi
    x *= dt(scale)
    return x


def _lognormal(rng: np.random.Generator, n: int, dt: type, mean: float, sigma: float) -> np.ndarray:
    x = _normal(rng, n, dt, mean, sigma)
    with np.errstate(over="ignore"):
        return np.exp(x, out=x)


def _bimodal(
    rng: np.random.Generator, n: int, dt: type, separation: float, std: float
) -> np.ndarray:
    x = _normal(rng, n, dt, 0.0, std)
    x += _signs(rng, n, dt) * dt(separation / 2)
    return x


def _outliers(
    rng: np.random.Generator, n: int, dt: type, fraction: float, magnitude: float, std: float
) -> np.ndarray:
    x = _normal(rng, n, dt, 0.0, std)
    k = min(n, round(fraction * n))
    where = rng.choice(n, size=k, replace=False)
    x[where] = _signs(rng, k, dt) * dt(magnitude * std)
    return x


def _sparse(rng: np.random.Generator, n: int, dt: type, density: float, std: float) -> np.ndarray:
    x = _normal(rng, n, dt, 0.0, std)
    x[rng.random(n, dtype=np.float32 if dt is np.float32 else np.float64) >= density] = 0
    return x


def _outlier_channel(
    rng: np.random.Generator, shape: tuple[int, ...], dt: type, magnitude: float, std: float
) -> np.ndarray:
    x = _normal(rng, math.prod(shape), dt, 0.0, std).reshape(shape)
    if x.size:
        x[int(rng.integers(shape[0]))] *= dt(magnitude)
    return x


#: Samplers that need the shape (they act on a slice along axis 0), not a flat count.
_BY_SHAPE: dict[str, Callable[..., np.ndarray]] = {"outlier_channel": _outlier_channel}

_SAMPLERS: dict[str, Callable[..., np.ndarray]] = {
    "normal": _normal,
    "laplace": _laplace,
    "uniform": _uniform,
    "student_t": _student_t,
    "lognormal": _lognormal,
    "bimodal": _bimodal,
    "outliers": _outliers,
    "sparse": _sparse,
}


# --------------------------------------------------------------------------- validation


def _check_distribution(distribution: str) -> str:
    if distribution not in DISTRIBUTIONS:
        raise QuantizationError(
            f"unknown distribution {distribution!r}; valid are {', '.join(DISTRIBUTIONS)}."
        )
    return distribution


def _check_shape(shape: Any) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, (int, np.integer)) else shape
    try:
        dims = tuple(dims)
    except TypeError:
        dims = None
    if dims is None or not all(
        isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in dims
    ):
        raise QuantizationError(
            f"shape {shape!r} is not valid; give an int or a tuple of non-negative ints."
        )
    return tuple(int(d) for d in dims)


def _check_seed(seed: Any) -> int:
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise QuantizationError(f"seed {seed!r} is not valid; give a non-negative int.")
    return int(seed)


def _check_dtype(dtype: Any) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or not (dt.kind == "f" or dt == np.dtype(ml_dtypes.bfloat16)):
        raise QuantizationError(
            f"dtype {dtype!r} is not valid for synthetic tensors; give float16, bfloat16, "
            "float32 or float64."
        )
    return dt


_RULES: dict[str, tuple[Callable[[float], bool], str]] = {
    "std": (lambda v: v > 0, "> 0"),
    "scale": (lambda v: v > 0, "> 0"),
    "sigma": (lambda v: v > 0, "> 0"),
    "df": (lambda v: v > 0, "> 0"),
    "separation": (lambda v: v >= 0, ">= 0"),
    "magnitude": (lambda v: v >= 0, ">= 0"),
    "fraction": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "density": (lambda v: 0 <= v <= 1, "in [0, 1]"),
}


def _check_params(distribution: str, params: dict[str, Any]) -> dict[str, float]:
    allowed = DEFAULTS[distribution]
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise QuantizationError(
            f"{distribution} takes no parameter {', '.join(unknown)}; it takes "
            f"{', '.join(f'{k} (default {v:g})' for k, v in allowed.items())}."
        )
    values = {**allowed, **params}
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
            raise QuantizationError(f"{distribution}: {key}={value!r} must be a number.")
        if not math.isfinite(value):
            raise QuantizationError(f"{distribution}: {key}={value!r} must be finite.")
        rule, text = _RULES.get(key, (lambda v: True, ""))
        if not rule(value):
            raise QuantizationError(f"{distribution}: {key}={value!r} must be {text}.")
    if distribution == "uniform" and not values["low"] < values["high"]:
        raise QuantizationError(
            f"uniform: low={values['low']!r} must be less than high={values['high']!r}."
        )
    return {k: float(v) for k, v in values.items()}
