"""Your own numbers: a few typed values, an exact scale and zero point, and every step of
QuantizeLinear (or DynamicQuantizeLinear) on each of them.

The values, scale and zero point are settings (URL too), so a lesson's "Try this" can set them.
Every number comes from qcore: :func:`qcore.metrics.walkthrough` for QuantizeLinear,
:func:`qcore.dynamic_quantize_linear` for the dynamic operator.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

import qcore
from qcore import calibration, metrics

from . import conformance, errors, metrics_view, text, widgets

#: At most this many typed values (a table to read, not a tensor).
MAX_VALUES = 64


def parse(values: str) -> np.ndarray:
    """'1, 2.5, -inf' as float32 values (a QuantizationError names the bad item)."""
    x = conformance.parse_values(values, "your numbers")
    if x.size == 0:
        raise qcore.QuantizationError("your numbers: type at least one value, e.g. 0.5, 1.5, 2.5")
    if x.size > MAX_VALUES:
        raise qcore.QuantizationError(f"your numbers: {x.size} values; at most {MAX_VALUES} "
                                      "(use the sidebar's tensor for more)")
    return x.astype(np.float32)


def quantize_table(values: str, target: str, scale: float, zero_point: int | None, *,
                   saturate: bool = True, opset: int = qcore.LATEST_OPSET) -> pd.DataFrame:
    """Each value through QuantizeLinear and DequantizeLinear, step by step (zero point None:
    none given, as for float targets)."""
    x = parse(values)
    params = calibration.choose_params(x, target, method="manual", manual_scale=float(scale),
                                       manual_zero_point=zero_point)
    return metrics.walkthrough(x, params, target, np.arange(x.size), saturate=saturate,
                               opset=opset)


def dynamic_table(values: str) -> tuple[pd.DataFrame, float, int]:
    """Each value through DynamicQuantizeLinear-11: (table, scale, zero point). The table's
    y is qcore's; the middle columns are the same float32 steps of the operator's function
    body (x / scale, round half to even, + zero point, clip to 0…255)."""
    x = parse(values)
    y, s, zp = qcore.dynamic_quantize_linear(x)
    s32, z = np.float32(s), int(zp)
    with np.errstate(all="ignore"):
        ratio = x / s32
    rounded = np.rint(ratio)
    x_hat = qcore.dequantize_linear(y, s, zp)
    table = pd.DataFrame({
        "x": x.astype(np.float64), "x / scale": ratio.astype(np.float64),
        "rounded": rounded.astype(np.float64), "+ zero point": rounded.astype(np.float64) + z,
        "y (uint8)": y.astype(np.int64), "x̂": x_hat.astype(np.float64),
        "x̂ − x": x_hat.astype(np.float64) - x.astype(np.float64)})
    return table, float(s), z


def _zero_point_input(prefix: str, target: str, default: int, where) -> int | None:
    fmt = qcore.get_format(target)
    if not fmt.is_integer:
        where.number_input("Zero point", value=0, disabled=True, key=f"_{prefix}zp_off",
                           help=f"{target} is a float format: no zero point (qcore gives none).")
        return None
    return int(widgets.number("Zero point", prefix + "zp", default, min_value=int(fmt.min),
                              max_value=int(fmt.max), where=where,
                              help="The code that stands for 0: an integer of the target "
                                   f"type ({int(fmt.min)}…{int(fmt.max)})."))


def quantize_panel(prefix: str, *, target: str | None = None, saturate: bool = True,
                   opset: int = qcore.LATEST_OPSET,
                   values: str = "0.5, 1.5, 2.5, -2.5, 127.5, 300",
                   scale: float = 1.0, zero_point: int = 0) -> pd.DataFrame | None:
    """Values field, exact scale and zero point (and the target when not given), then the
    step-by-step table of those values; returns the table (None when the input is refused)."""
    c = st.columns([3, 1.2, 1, 1] if target is None else [3, 1.2, 1])
    typed = widgets.text("Your numbers (comma-separated)", prefix + "x", values, where=c[0],
                         help="Numbers, inf, -inf, nan; up to 64.")
    if target is None:
        target = widgets.select("Target type", list(qcore.QUANTIZED_TYPES), prefix + "t",
                                "int8", where=c[3])
    s = widgets.number("Scale (exact)", prefix + "s", float(scale), min_value=1e-30,
                       max_value=1e30, fmt="%.8g", where=c[1],
                       help="The step between neighbouring codes, typed exactly (stored as "
                            "float32).")
    zp = _zero_point_input(prefix, target, zero_point, c[2])
    try:
        table = quantize_table(typed, target, s, zp, saturate=saturate, opset=opset)
    except qcore.QuantizationError as exc:
        errors.show(exc)
        return None
    st.dataframe(metrics_view.walk_table(table, target).drop(columns=["position"]),
                 hide_index=True,
                 column_config=metrics_view.WALK_COLUMNS)
    note = beyond_range_note(table, target)
    if note:
        st.caption(note)
    return table


def beyond_range_note(table: pd.DataFrame, target: str) -> str:
    """A sentence for the codes of the "+ zero point" column that the target cannot hold
    (the column before saturation): '' when every one fits."""
    fmt = qcore.get_format(target)
    if not fmt.is_integer or "+zero point" not in table:
        return ""
    codes = pd.to_numeric(table["+zero point"], errors="coerce").to_numpy(np.float64)
    out = codes[np.isfinite(codes) & ((codes < fmt.min) | (codes > fmt.max))]
    if not out.size:
        return ""
    shown = ", ".join(f"{v:g}".replace("-", "−") for v in out[:4]) + ("…" if out.size > 4 else "")
    lo = f"{int(fmt.min)}".replace("-", "−")
    return (f"{shown}: beyond {target}'s codes {lo}…{int(fmt.max)}. These columns are "
            "the steps before saturation; the next one, “saturated = y”, clips them to the "
            "nearest end.")


def dynamic_panel(prefix: str, *, values: str = "-1, 0, 0.5, 2, 3") -> pd.DataFrame | None:
    """Values field and DynamicQuantizeLinear's y for each value; returns the table."""
    typed = widgets.text("Your numbers (comma-separated)", prefix + "x", values,
                         help="Numbers (finite); up to 64. DynamicQuantizeLinear picks the "
                              "scale and zero point from them.")
    try:
        table, s, zp = dynamic_table(typed)
    except qcore.QuantizationError as exc:
        errors.show(exc)
        return None
    st.markdown(f"scale = (max(0, max x) − min(0, min x)) / 255 = **{s:.8g}** · zero point = "
                f"**{zp}** · y per element:")
    st.dataframe(text.values_table(table, ("x", "x / scale", "rounded", "+ zero point", "x̂",
                                           "x̂ − x"), exact=("x / scale",),
                                   codes=("rounded", "+ zero point")), hide_index=True)
    return table
