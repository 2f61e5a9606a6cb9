"""How error metrics, parameters, error maps and downloads are shown (Quantize Lab and
others). :func:`fmt_metric` is the one place a metric becomes text (tests use it too)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import streamlit as st

import qcore

from . import charts, compute

#: (key of qcore.metrics.error_metrics, label, help) in display order.
METRICS: tuple[tuple[str, str, str], ...] = (
    ("sqnr_db", "SQNR", "Signal-to-quantization-noise ratio: 10·log10(Σx² / Σ(x̂−x)²). "
                        "Higher is better; about 6 dB per bit for integers."),
    ("rmse", "RMSE", "Root mean squared error of x̂ − x."),
    ("mse", "MSE", "Mean squared error of x̂ − x."),
    ("max_abs_error", "Max |error|", "The largest |x̂ − x| over the tensor."),
    ("mean_abs_error", "Mean |error|", "The average |x̂ − x|."),
    ("mean_rel_error", "Mean relative error", "The average |x̂ − x| / |x| over non-zero x."),
    ("clipped_fraction", "Clipped", "Share of finite elements outside the range the codes "
                                    "cover: they were saturated to the largest code."),
    ("nan_out", "NaN produced", "NaN values in x̂ (e.g. float8 overflow with saturate=0)."),
    ("inf_out", "Inf produced", "Infinite values in x̂ (float8e5m2 overflow with saturate=0)."),
    ("bits_per_element", "Bits / element", "The target's bits plus the scales' and zero "
                                           "points' storage spread over the elements."),
)


def fmt_metric(key: str, value: Any) -> str:
    """A metric as the text the app shows."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if key == "sqnr_db":
        return "∞ dB" if value == math.inf else f"{value:.2f} dB"
    if key == "clipped_fraction":
        return f"{100 * value:.3g} %"
    if key in ("nan_out", "inf_out", "nan_in", "inf_in", "n"):
        return f"{int(value):,}"
    if key == "bits_per_element":
        return f"{value:.3f}"
    if key == "mean_rel_error":
        return f"{100 * value:.3g} %"
    return compute.short_num(value)


def metric_grid(m: dict[str, Any], *, per_row: int = 5) -> None:
    """The error metrics as a grid of st.metric cards."""
    for start in range(0, len(METRICS), per_row):
        cols = st.columns(per_row)
        for col, (key, label, help_) in zip(cols, METRICS[start:start + per_row]):
            col.metric(label, fmt_metric(key, m.get(key)), help=help_, border=True)


def warn_non_finite(m: dict[str, Any]) -> None:
    """Report NaN/Inf in the input (they are quantized, not crashed on)."""
    if m.get("nan_in") or m.get("inf_in"):
        st.warning(f"x contains {m['nan_in']:,} NaN and {m['inf_in']:,} ±Inf value(s). They "
                   "are quantized as qcore decides (NaN → the type's minimum for integers, "
                   "±Inf saturate) and left out of the error statistics.",
                   icon=":material/warning:")


def params_line(res: dict[str, Any]) -> None:
    """One line about the chosen scale / zero point and the operator versions."""
    n = res["n_scales"]
    shape = "×".join(map(str, res["scale_shape"])) or "scalar"
    if n == 1:
        s = f"scale **{res['scale_min']:.6g}**"
    else:
        s = f"{n:,} scales ({shape}) from **{res['scale_min']:.4g}** to **{res['scale_max']:.4g}**"
    if res["zp_min"] is None:
        z = "no zero point"
    elif res["zp_min"] == res["zp_max"]:
        z = f"zero point **{compute.fmt_value(res['zp_min'])}**"
    else:
        z = f"zero points {compute.fmt_value(res['zp_min'])}…{compute.fmt_value(res['zp_max'])}"
    st.caption(f"{s} ({res['scale_type']}) · {z} · y is **{res['y_dtype']}** · "
               f"x̂ is {res['out_dtype']} · ran **{res['version']}** and **{res['dq_version']}**")


def error_map(res: dict[str, Any]) -> None:
    """The error heat map: tiles (per-tensor), channels (per-axis) or blocks (blocked)."""
    heat, kind = res["heat"], res["heat_kind"]
    tr, tc = res["heat_tiles"]
    if kind == "channels":
        charts.show(charts.channel_bars(heat, title="RMSE per channel", x_title="channel",
                                        y_title="RMSE"))
        return
    if np.asarray(heat).ndim == 1:
        heat = np.asarray(heat).reshape(1, -1)
    if kind == "blocks":
        title = "RMSE per block" + (f" (max over {tr}×{tc} blocks per cell)"
                                    if tr * tc > 1 else "")
        fig = charts.heatmap(heat, title=title, x_title="block", y_title="row", dx=tc, dy=tr)
    else:
        title = f"RMSE per tile of {tr}×{tc} elements"
        fig = charts.heatmap(heat, title=title, x_title="column", y_title="row", dx=tc, dy=tr)
    charts.show(fig)


WALK_COLUMNS = {
    "index": None,
    "position": st.column_config.TextColumn("position"),
    "x": st.column_config.NumberColumn("x", format="%.6g"),
    "scale": st.column_config.NumberColumn("scale", format="%.6g"),
    "x/scale": st.column_config.NumberColumn("x / scale", format="%.6g"),
    "rounded": st.column_config.NumberColumn("rounded", format="%.6g"),
    "+zero point": st.column_config.NumberColumn("+ zero point", format="%.6g"),
    "saturated": st.column_config.NumberColumn("saturated = y", format="%.6g"),
    "stored bits": st.column_config.TextColumn("stored bits"),
    "x̂": st.column_config.NumberColumn("x̂", format="%.6g"),
    "error": st.column_config.NumberColumn("x̂ − x", format="%.3g"),
}


def downloads(spec, cfg, res: dict[str, Any]) -> None:
    """Download buttons: y (.npy), packed bytes for sub-byte types, the report (.csv)."""
    name = f"{spec.label.split()[0]}_{cfg.target}".replace("/", "_").replace(" ", "_")
    fmt = qcore.get_format(cfg.target)
    cols = st.columns(3 if fmt.is_subbyte else 2)
    cols[0].download_button(
        "Quantized tensor (.npy)", lambda: compute.npy_bytes(compute.quantized_codes(spec, cfg)),
        file_name=f"{name}.npy", mime="application/octet-stream", icon=":material/download:",
        help="NumPy integer types as they are; the other types as their stored codes (uint8)."
    )
    if fmt.is_subbyte:
        cols[1].download_button(
            "Packed bytes (ONNX layout)",
            lambda: compute.packed_bytes(compute.quantized_codes(spec, cfg)),
            file_name=f"{name}.bin", mime="application/octet-stream",
            icon=":material/download:",
            help="4-bit types two per byte (low nibble first), 2-bit types four per byte.")
    cols[-1].download_button("Report (.csv)", compute.report_csv(spec, cfg, res),
                             file_name=f"{name}_report.csv", mime="text/csv",
                             icon=":material/description:")
