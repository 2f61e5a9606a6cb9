"""How error metrics, parameters, error maps and downloads are shown (Quantize Lab and
others). :func:`fmt_metric` is the one place a metric becomes text (tests use it too)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import streamlit as st

import qcore

from . import charts, compute, text
from .tensors import input_non_finite

#: (key of qcore.metrics.error_metrics, label, help) in display order.
METRICS: tuple[tuple[str, str, str], ...] = (
    ("sqnr_db", "SQNR", "Signal-to-quantization-noise ratio: 10·log10(Σx² / Σ(x̂−x)²). "
                        "Higher is better; about 6 dB per bit for integers."),
    ("rmse", "RMSE", "Root mean squared error of x̂ − x."),
    ("mse", "MSE", "Mean squared error of x̂ − x."),
    ("max_abs_error", "Max |error|", "The largest |x̂ − x| over the tensor."),
    ("mean_abs_error", "Mean |error|", "The average |x̂ − x|."),
    ("mean_rel_error", "Mean relative error", "The average |x̂ − x| / |x| over non-zero x."),
    ("clipped_fraction", "Clipped", "What it counts: the finite elements of x that lie "
                                    "beyond the outermost code by more than half a step, as a "
                                    "share of the finite elements of x. Saturate on: they "
                                    "became ±max. Saturate off (float8): they became NaN/Inf, "
                                    "so they are also the NaN/Inf produced."),
    ("nan_made", "NaN produced", "Finite elements of x that became NaN in x̂ (float8 "
                                 "overflow with saturate off). NaN already in x is not "
                                 "counted."),
    ("inf_made", "Inf produced", "Finite elements of x that became ±Inf in x̂ (float8e5m2 "
                                 "overflow with saturate off). ±Inf already in x is not "
                                 "counted."),
    ("bits_per_element", "Bits / element", "Stored bits per element at the chosen opset: the "
                                           "target's bits, plus the scales' and any stored "
                                           "zero points' bits spread over the elements. A zero "
                                           "point is stored when it is not all 0, or before "
                                           "opset 21 (only its type names the target)."),
)


def fmt_metric(key: str, value: Any) -> str:
    """A metric as the text the app shows."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if key == "sqnr_db":
        return text.db(value)
    if key == "clipped_fraction":
        return text.percent(value)
    if key in ("nan_out", "inf_out", "nan_in", "inf_in", "n", "nan_made", "inf_made",
               "nonfinite_made"):
        return f"{int(value):,}"
    if key == "bits_per_element":
        return f"{value:.3f}"
    if key == "mean_rel_error":
        return text.percent(value)
    return text.short_num(value)


#: Metrics computed over the elements whose x and x̂ are both finite.
ERROR_KEYS = ("sqnr_db", "rmse", "mse", "max_abs_error", "mean_abs_error", "mean_rel_error")


def coverage(m: dict[str, Any]) -> str:
    """'' when the error metrics cover every element, else which share they cover."""
    n, ncmp = int(m.get("n", 0)), int(m.get("n_compared", m.get("n", 0)))
    if n == 0 or ncmp == n:
        return ""
    if ncmp == 0:
        return "no element has a finite x and x̂"
    return f"over the {share_text(ncmp / n)} ({ncmp:,} of {n:,}) with finite x and x̂"


def share_text(share: float) -> str:
    """A share as a percentage that never reads 100 % unless it is all (more digits instead)."""
    out, digits = text.percent(share), 3
    while share < 1 and out.startswith("100") and digits < 12:
        digits += 1
        out = text.percent(share, digits)
    return out


def cards(where: Any = st) -> Any:
    """A row of metric cards that wraps onto further rows where they do not fit. Draw each
    card with :func:`card`: as wide as its label and value, so nothing is cut (in a fixed
    column Streamlit cuts a card's label and value with "…")."""
    return where.container(horizontal=True, gap="small")


def card(where: Any, label: str, value: Any, delta: Any = None, **kwargs: Any) -> None:
    """One metric card, as wide as its content (call inside :func:`cards`)."""
    kwargs.setdefault("border", True)
    where.metric(label, value, delta, width="content", **kwargs)


def metric_grid(m: dict[str, Any]) -> None:
    """The error metrics as a row of st.metric cards, wrapping where the page is narrow (the
    cards size to their content). When NaN/Inf in x or x̂ leave elements out, the error cards
    say over which share they were computed."""
    part = coverage(m)
    row = cards()
    for key, label, help_ in METRICS:
        value = fmt_metric(key, m.get(key))
        if key == "sqnr_db" and value == "∞ dB":
            help_ += " ∞: x̂ equals x everywhere (no error at all)."
        if part and key in ERROR_KEYS:  # short on the card
            short = f"over the finite {share_text(m['n_compared'] / m['n'])}"
            card(row, label, value, short, delta_color="off", delta_arrow="off",
                 help=help_ + f" Computed {part}: elements whose x or x̂ is NaN or ±Inf "
                              "have no finite error.")
        else:
            card(row, label, value, help=help_)


def partial_note(x: np.ndarray, *, produced: bool, saturate: bool) -> str:
    """Why the SQNR covers only part of the elements, naming the cause: the input's own NaN/Inf
    (counted), and/or finite elements turned NaN/Inf by quantizing with saturate off."""
    nan_in, inf_in = input_non_finite(x)
    causes = []
    if nan_in or inf_in:
        causes.append(f"x itself holds {nan_in:,} NaN and {inf_in:,} ±Inf")
    if produced and not saturate:
        causes.append(("and " if causes else "") + "with saturate off some settings turn "
                      "finite elements into NaN/Inf (“clipped” counts those too)")
    if not causes:
        causes.append("some elements have no finite x̂")
    return "; ".join(causes) + ": SQNR and the errors cover only the elements whose x and x̂ " \
        "are both finite."


def warn_non_finite(m: dict[str, Any]) -> None:
    """Report NaN/Inf in the input (they are quantized, not crashed on) and NaN/Inf produced
    by the quantization (float8 overflow with saturate off), with the share the error
    statistics still cover."""
    if m.get("nan_in") or m.get("inf_in"):
        st.warning(f"x contains {m['nan_in']:,} NaN and {m['inf_in']:,} ±Inf value(s). They "
                   "are quantized as qcore decides (NaN → the type's minimum for integers, "
                   "±Inf saturate) and left out of the error statistics.",
                   icon=":material/warning:")
    made = int(m.get("nonfinite_made", 0))
    if made > 0:
        n = max(int(m.get("n", 1)), 1)
        st.warning(f"{made:,} element(s) ({text.percent(made / n)}) became NaN or ±Inf in "
                   "x̂: they overflowed the format's range and saturate is off, so "
                   "QuantizeLinear gave NaN/Inf instead of ±max (“Clipped” counts them too). "
                   "SQNR, RMSE and the other error figures are computed "
                   f"{coverage(m) or 'over the rest'}; they say nothing about the elements "
                   "that were lost, so they can be higher than with saturate on. Turn saturate "
                   "on, or choose a "
                   "larger scale.", icon=":material/warning:")


def params_line(res: compute.LabResult) -> None:
    """One line about the chosen scale / zero point and the operator versions."""
    n = res.n_scales
    shape = "×".join(map(str, res.scale_shape)) or "scalar"
    if n == 1:
        s = f"scale **{res.scale_min:.6g}**"
    else:
        s = f"{n:,} scales ({shape}) from **{res.scale_min:.4g}** to **{res.scale_max:.4g}**"
    if res.zp_min is None:
        z = "no zero point"
    elif res.zp_min == res.zp_max:
        z = f"zero point **{text.fmt_value(res.zp_min)}**"
    else:
        z = f"zero points {text.fmt_value(res.zp_min)}…{text.fmt_value(res.zp_max)}"
    st.caption(f"{s} ({res.scale_type}) · {z} · y is **{res.y_dtype}** · "
               f"x̂ is {res.out_dtype} · ran **{res.version}** and **{res.dq_version}**")


def error_map(res: compute.LabResult) -> None:
    """The error heat map: tiles (per-tensor), channels (per-axis) or blocks (blocked)."""
    heat, kind = res.heat, res.heat_kind
    tr, tc = res.heat_tiles
    if kind == "channels":
        charts.show(charts.channel_bars(heat, title="RMSE per channel", x_title="channel",
                                        y_title="RMSE"))
        return
    if kind == "tiles" and tr * tc == 1 and (np.ndim(heat) == 1 or np.shape(heat)[0] == 1):
        # one row of single elements: a bar per element reads better than a 1-row heat map
        charts.show(charts.channel_bars(np.asarray(heat).reshape(-1), title="|error| per element",
                                        x_title="element", y_title="|x̂ − x|"))
        return
    if np.asarray(heat).ndim == 1:
        heat = np.asarray(heat).reshape(1, -1)
    if kind == "blocks":
        title = "RMSE per block" + (f" (max over {tr}×{tc} blocks per cell)"
                                    if tr * tc > 1 else "")
        fig = charts.heatmap(heat, title=title, x_title="block", y_title="row", dx=tc, dy=tr)
    else:
        title = (f"RMSE per tile of {tr}×{tc} elements" if tr * tc > 1
                 else "|error| per element")
        fig = charts.heatmap(heat, title=title, x_title="column", y_title="row", dx=tc, dy=tr)
    charts.show(fig)


#: The step table's numeric columns, shown as text so NaN, ±Inf and −0 read as such.
WALK_VALUES = ("x", "scale", "x/scale", "rounded", "+zero point", "saturated", "x̂", "error")
WALK_COLUMNS = {
    "index": None,
    "position": st.column_config.TextColumn("position"),
    "x": st.column_config.TextColumn("x"),
    "scale": st.column_config.TextColumn("scale"),
    "x/scale": st.column_config.TextColumn("x / scale"),
    "rounded": st.column_config.TextColumn("rounded"),
    "+zero point": st.column_config.TextColumn("+ zero point"),
    "saturated": st.column_config.TextColumn("saturated = y"),
    "stored bits": st.column_config.TextColumn("stored bits"),
    "x̂": st.column_config.TextColumn("x̂"),
    "error": st.column_config.TextColumn("x̂ − x"),
}


def walk_table(walk, target: str | None = None) -> Any:
    """The step-by-step table as shown (values as text: NaN stays 'NaN', not 'None'; x/scale
    with every float32 digit; an integer target's codes never read −0)."""
    integer = target is not None and qcore.get_format(target).is_integer
    return text.values_table(walk, WALK_VALUES, exact=("x/scale",),
                             codes=("rounded", "+zero point", "saturated") if integer else ())


def downloads(spec, cfg, res: compute.LabResult) -> None:
    """Download buttons: y (.npy), packed bytes for sub-byte types, the report (.csv)."""
    name = f"{spec.label.split()[0]}_{cfg.target}".replace("/", "_").replace(" ", "_")
    fmt = qcore.get_format(cfg.target)
    cols = st.columns(4 if fmt.is_subbyte else 3)
    cols[0].download_button(
        "Quantized tensor (.npy)", lambda: compute.npy_bytes(compute.quantized_codes(spec, cfg)),
        file_name=f"{name}.npy", mime="application/octet-stream", icon=":material/download:",
        help="Integer types by value in the smallest NumPy integer type (int4 → int8, "
             "−8…7); float8/6/4 as their stored codes (uint8)."
    )
    cols[1].download_button(
        "y + scale + zero point (.npz)", lambda: compute.npz_bytes(spec, cfg),
        file_name=f"{name}_quantized.npz", mime="application/octet-stream",
        icon=":material/download:",
        help="y, y_type, scale, scale_type, zero_point, zero_point_type and the attributes "
             "(axis, block_size, saturate, opset, operator): everything needed to dequantize "
             "or to write the node's initializers.")
    if fmt.is_subbyte:
        cols[2].download_button(
            "Packed bytes (ONNX layout)",
            lambda: compute.packed_bytes(compute.quantized_codes(spec, cfg)),
            file_name=f"{name}.bin", mime="application/octet-stream",
            icon=":material/download:",
            help="4-bit types two per byte (low nibble first), 2-bit types four per byte.")
    cols[-1].download_button("Report (.csv)", compute.report_csv(spec, cfg, res),
                             file_name=f"{name}_report.csv", mime="text/csv",
                             icon=":material/description:")
