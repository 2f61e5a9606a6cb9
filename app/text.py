"""Numbers as the app's text: one place for how a value, a dB figure or a share reads.

Pure functions (no Streamlit). Infinity is always "∞", NaN "—" or "NaN" where a value of a
format is meant, so every page says the same thing for the same number.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, (float, np.floating)) and math.isnan(v))


def short_num(v: float | None, digits: int = 3) -> str:
    """A compact number for metric cards: 0.0183, 1.12e-4, 3.2e+6."""
    if _missing(v):
        return "—"
    if math.isinf(v):
        return "∞" if v > 0 else "−∞"
    if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e6):
        mant, exp = f"{v:.{digits - 1}e}".split("e")
        return f"{mant}e{int(exp)}"
    return f"{v:.{digits}g}"


def fmt_value(v: float, digits: int = 6) -> str:
    """A float as text that keeps -0, NaN and Inf visible (`digits` significant digits; 9
    tell every float32 apart, so a quotient just below a tie does not read as the tie)."""
    if _missing(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "−Inf"
    if v == 0:
        return "−0" if math.copysign(1.0, v) < 0 else "0"
    if float(v).is_integer() and abs(v) < 1e7:
        return f"{v:,.0f}".replace(",", "")
    return f"{v:.{digits}g}"


def db(v: float | None) -> str:
    """An SQNR: '31.62 dB', '∞ dB' (exact: no error at all), '—' (undefined)."""
    if _missing(v):
        return "—"
    if math.isinf(v):
        return "∞ dB" if v > 0 else "−∞ dB"
    return f"{v:.2f} dB"


def db_gain(better: float, base: float) -> str:
    """How much `better` gains over `base`, defined for exact results too."""
    if _missing(better) or _missing(base):
        return "—"
    if math.isinf(better) and math.isinf(base) and better == base:
        return "exact either way"
    if math.isinf(better) or math.isinf(base):
        return "exact" if better > base else "loses exactness"
    return f"{better - base:+.2f} dB"


def percent(share: float | None, digits: int = 3) -> str:
    """A share in [0, 1] as '64.3 %'."""
    if _missing(share):
        return "—"
    return f"{100 * share:.{digits}g} %"


def values_table(df: pd.DataFrame, columns: tuple[str, ...], *,
                 exact: tuple[str, ...] = (), codes: tuple[str, ...] = (),
                 short: tuple[str, ...] = ()) -> pd.DataFrame:
    """`df` with the given numeric columns as text (NaN, ±Inf and −0 spelled out, never
    'None' or an empty cell). Columns in `exact` get 9 significant digits (a float32 quotient
    such as 127.49999 must not read 127.5), columns in `short` 3 (an error's size, so the
    table keeps every column in view), the others 6; columns in `codes` hold integer codes,
    which have no −0 (a −0.0 there is the code 0)."""
    out = df.copy()
    for c in columns:
        if c in out.columns:
            digits = 9 if c in exact else 3 if c in short else 6
            out[c] = [("NaN" if _missing(v) else
                       fmt_value(float(v) + 0.0 if c in codes else float(v), digits))
                      for v in out[c]]
    return out
