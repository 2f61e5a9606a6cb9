"""Codes of a number format as data: bit patterns, field strings, value classes, the inputs
that show a format's edges, and the values x̂ can take. Pure NumPy, no UI (the Explorer's
Number Formats and Home pages show these)."""

from __future__ import annotations

import math

import numpy as np

from .formats import Format, get_format

__all__ = ["bit_string", "code_bits", "code_classes", "code_fields", "grid_levels",
           "positive_values", "special_inputs", "zero_point_array"]


def zero_point_array(value: float, target: str, shape: tuple[int, ...] = ()) -> np.ndarray:
    """A zero point of the target's type (integers rounded and clipped into range)."""
    fmt = get_format(target)
    if fmt.is_integer:
        v = int(np.clip(round(value), fmt.min, fmt.max))
        return np.full(shape, v, dtype=np.int64).astype(fmt.dtype)
    return np.full(shape, value, dtype=np.float32).astype(fmt.dtype)


def code_bits(fmt: Format, codes: np.ndarray) -> np.ndarray:
    """The stored bit pattern of each element as an unsigned integer (for display)."""
    a = np.asarray(codes)
    if fmt.is_integer:
        return a.astype(np.int64) & ((1 << fmt.bits) - 1)
    return a.view(fmt.storage_dtype).astype(np.int64) & ((1 << fmt.bits) - 1)


def bit_string(pattern: int, fmt: Format) -> str:
    """'0 1011 010': the bits of a code with its sign/exponent/mantissa fields separated."""
    s = format(int(pattern), f"0{fmt.bits}b")
    if fmt.is_integer or fmt.kind == "scale":
        return s
    return f"{s[0]} {s[1:1 + fmt.ebits]} {s[1 + fmt.ebits:]}".rstrip()


def code_fields(fmt: Format, patterns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sign, exponent, mantissa) fields of a float format's bit patterns."""
    p = np.asarray(patterns, np.int64)
    return ((p >> (fmt.ebits + fmt.mbits)) & 1, (p >> fmt.mbits) & ((1 << fmt.ebits) - 1),
            p & ((1 << fmt.mbits) - 1))


def positive_values(fmt: Format) -> np.ndarray:
    """The distinct positive finite values of a <= 16-bit format, ascending (empty for wider
    ones)."""
    if fmt.bits > 16:
        return np.zeros(0)
    v = np.unique(fmt.all_values())
    return v[np.isfinite(v) & (v > 0)]


def grid_levels(scale: float, zero_point: float, target: str, lo: float,
                hi: float) -> np.ndarray:
    """The values x̂ can take, (code − zp)·scale, inside [lo, hi] (at most ~600 of them)."""
    fmt = get_format(target)
    values = np.unique(fmt.all_values())
    values = values[np.isfinite(values)]
    levels = (values - zero_point) * scale
    return levels[(levels >= lo) & (levels <= hi)][:600]


def code_classes(fmt: Format) -> np.ndarray:
    """For each code of a <= 16-bit format: zero, subnormal, normal, NaN, Inf or integer."""
    values = fmt.all_values()
    out = np.full(values.shape, "normal", dtype=object)
    if fmt.is_integer:
        out[:] = "integer"
        out[values == 0] = "zero"
        return out
    exponent = code_fields(fmt, np.arange(values.size))[1]
    out[(exponent == 0) & (values != 0)] = "subnormal"
    out[values == 0] = "zero"
    out[np.isnan(values)] = "NaN"
    out[np.isinf(values)] = "Inf"
    if fmt.kind == "scale":
        out[np.isfinite(values)] = "power of two"
    return out


def special_inputs(fmt: Format) -> list[tuple[str, float]]:
    """Inputs that show a format's edge behaviour (with scale 1)."""
    if fmt.is_integer:
        return [("0", 0.0), ("−0", -0.0), ("0.5 (tie → even)", 0.5), ("1.5 (tie → even)", 1.5),
                ("2.5 (tie → even)", 2.5), ("−2.5 (tie → even)", -2.5), ("max", fmt.max),
                ("max + 1", fmt.max + 1), ("min − 1", fmt.min - 1), ("1e10", 1e10),
                ("+Inf", math.inf), ("−Inf", -math.inf), ("NaN", math.nan)]
    top_gap = _top_gap(fmt)
    tiny = fmt.min_positive
    return [("0", 0.0), ("−0", -0.0), ("smallest subnormal", tiny),
            ("half the smallest (tie → 0)", tiny / 2), ("0.75 × smallest", tiny * 0.75),
            ("max", fmt.max), ("max + ½ step (tie)", fmt.max + top_gap / 2),
            ("max + 1 step", fmt.max + top_gap), ("2 × max", 2 * fmt.max),
            ("−2 × max", -2 * fmt.max), ("+Inf", math.inf), ("−Inf", -math.inf),
            ("NaN", math.nan)]


def _top_gap(fmt: Format) -> float:
    """The gap between a float format's two largest finite values (0 when it has no two)."""
    v = positive_values(fmt)
    return float(v[-1] - v[-2]) if v.size >= 2 else 0.0
