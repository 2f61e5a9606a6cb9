"""Plotly chart builders. Every figure uses the ``qcore`` template (:mod:`app.theme`), has a
title and labelled axes, and receives already-reduced data (histograms, downsampled points)
so no chart sends millions of points to the browser."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from . import theme

_CONFIG = {"displaylogo": False, "responsive": True,
           "modeBarButtonsToRemove": ["lasso2d", "select2d", "autoScale2d"],
           "toImageButtonOptions": {"format": "png", "scale": 2}}


def figure(title: str, x_title: str, y_title: str, *, height: int = 340,
           log_x: bool = False, log_y: bool = False) -> go.Figure:
    """An empty figure with the app's look, a title and axis labels."""
    fig = go.Figure()
    # the title 12 px below the top whatever the height (a fraction of a tall figure's
    # height would put it over the first row of the plot)
    fig.update_layout(template=theme.TEMPLATE, title=dict(text=title, y=1 - 12 / height),
                      height=height, xaxis_title=x_title, yaxis_title=y_title)
    if log_x:
        fig.update_xaxes(type="log", dtick=1)
    if log_y:
        fig.update_yaxes(type="log", dtick=1)
    return fig


def log_ticks(fig: go.Figure, values: Any, axis: str = "x", most: int = 12) -> None:
    """Readable ticks on a log axis: at the powers of two when it spans under three decades
    (decade ticks would leave one or none: float4's 0.5…6), else every n-th decade so that at
    most `most` labels show (float8e8m0 spans 10^-38…10^38 and its labels would overlap)."""
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v) & (v > 0)]
    if v.size < 2:
        return
    upd = fig.update_xaxes if axis == "x" else fig.update_yaxes
    if v.max() / v.min() < 1000:
        ks = range(int(np.floor(np.log2(v.min()))), int(np.ceil(np.log2(v.max()))) + 1)
        vals = [2.0 ** k for k in ks]
        upd(tickmode="array", tickvals=vals, ticktext=[f"{t:g}" for t in vals])
        return
    decades = np.log10(v.max()) - np.log10(v.min())
    upd(dtick=max(1, int(np.ceil(decades / most))), exponentformat="power")


def show(fig: go.Figure, *, key: str | None = None) -> None:
    """Draw a figure with the app's template (not Streamlit's)."""
    st.plotly_chart(fig, theme=None, config=_CONFIG, key=key)


def _bars(fig: go.Figure, counts: np.ndarray, edges: np.ndarray, *, name: str, color: str,
          opacity: float = 0.85, row: int | None = None, col: int | None = None,
          showlegend: bool = True) -> None:
    counts = np.asarray(counts, dtype=np.float64)
    edges = np.asarray(edges, dtype=np.float64)
    centers = (edges[:-1] + edges[1:]) / 2
    widths = np.diff(edges)
    kw = {} if row is None else dict(row=row, col=col)
    fig.add_trace(go.Bar(x=centers, y=counts, width=widths, name=name, marker_color=color,
                         marker_line_width=0, opacity=opacity, showlegend=showlegend,
                         hovertemplate="%{x:.4g}: %{y:,.0f}<extra>" + name + "</extra>"), **kw)


# --------------------------------------------------------------------------- home


def home_number_line(df: pd.DataFrame | None, levels: np.ndarray) -> go.Figure:
    """The 8 example values, the grid of representable values, and where each value lands
    (df None: the grid alone)."""
    x = np.empty(0) if df is None else df["x"].to_numpy()
    x_hat = np.empty(0) if df is None else df["x̂ = (y − zp)·scale"].to_numpy()
    fig = figure("Each x snaps to the nearest representable value", "value", "", height=260)
    for lv in levels:
        fig.add_shape(type="line", x0=lv, x1=lv, y0=-0.35, y1=0.35, line=dict(
            color=theme.LEVEL, width=1), opacity=0.55, layer="below")
    for xi, hi in zip(x, x_hat):
        if np.isfinite(hi):
            fig.add_annotation(x=hi, y=-0.5, ax=xi, ay=0.5, xref="x", yref="y", axref="x",
                               ayref="y", showarrow=True, arrowhead=2, arrowsize=1,
                               arrowwidth=1.2, arrowcolor="#ADB5BD", text="")
    fig.add_trace(go.Scatter(x=x, y=np.full(x.shape, 0.5), mode="markers", name="x",
                             marker=dict(size=11, color=theme.INPUT),
                             hovertemplate="x = %{x:.4g}<extra></extra>"))
    fig.add_trace(go.Scatter(x=x_hat, y=np.full(x.shape, -0.5), mode="markers",
                             name="x̂ (dequantized)",
                             marker=dict(size=11, color=theme.OUTPUT, symbol="diamond"),
                             hovertemplate="x̂ = %{x:.4g}<extra></extra>"))
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name="representable values",
                             line=dict(color=theme.LEVEL, width=1)))
    fig.update_yaxes(visible=False, range=[-0.9, 0.9])
    return fig


# --------------------------------------------------------------------------- number formats


_CLASS_COLORS = {"normal": theme.INPUT, "subnormal": theme.OUTPUT, "zero": theme.GOOD,
                 "integer": theme.INPUT, "power of two": theme.INPUT}


def number_line(values: np.ndarray, classes: np.ndarray, name: str, *, log: bool) -> go.Figure:
    """Every finite value of a format on a number line (positive magnitudes when log)."""
    v = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(v)
    fig = figure(f"The values of {name} on a number line" + (" (|value|, log scale)" if log
                                                              else ""),
                 "|value|" if log else "value", "", height=250, log_x=log)
    for cls, color in _CLASS_COLORS.items():
        m = finite & (classes == cls)
        if log:
            m &= v > 0
        if not m.any():
            continue
        pts = np.unique(v[m])
        fig.add_trace(go.Scatter(x=pts, y=np.zeros(pts.size), mode="markers", name=cls,
                                 marker=dict(symbol="line-ns-open", size=26, color=color,
                                             line=dict(width=1.6)),
                                 hovertemplate="%{x:.6g}<extra>" + cls + "</extra>"))
    fig.update_yaxes(visible=False, range=[-1, 1])
    if log:
        log_ticks(fig, v)
    return fig


def spacing(df: pd.DataFrame, name: str) -> go.Figure:
    """Gap to the next representable value against magnitude (log-log)."""
    fig = figure("Gap to the next value", "value (log scale)",
                 "gap to next value (log scale)", height=320, log_x=True, log_y=True)
    fig.add_trace(go.Scatter(x=df["value"], y=df["gap"], mode="lines+markers",
                             line=dict(shape="hv", color=theme.INPUT), marker=dict(size=4),
                             name="gap", customdata=df["relative gap"],
                             hovertemplate="value %{x:.4g}<br>gap %{y:.4g}<br>relative "
                                           "%{customdata:.2%}<extra></extra>"))
    log_ticks(fig, df["value"], "x")
    log_ticks(fig, df["gap"], "y")
    return fig


# --------------------------------------------------------------------------- operator versions


def support_heatmap(matrix: pd.DataFrame, title: str, op: str) -> go.Figure:
    """Types × versions, filled where the version accepts the type."""
    z = matrix.to_numpy()
    fig = figure(title, "", "", height=max(220, 26 * len(matrix) + 110))
    fig.add_trace(go.Heatmap(
        z=z, x=[str(c) for c in matrix.columns], y=list(matrix.index), xgap=3, ygap=3,
        colorscale=[[0, "#F1F3F5"], [1, theme.INPUT]], zmin=0, zmax=1, showscale=False,
        text=np.where(z > 0, "✓", ""), texttemplate="%{text}",
        textfont=dict(color="white", size=13),
        hovertemplate="%{y} at version %{x}: %{customdata}<extra></extra>",
        customdata=np.where(z > 0, "accepted", "not accepted")))
    fig.update_xaxes(type="category", showgrid=False, side="top", title=dict(
        text=f"{op} version", standoff=4), ticks="")
    fig.update_yaxes(autorange="reversed", showgrid=False, ticks="")
    fig.update_layout(margin=dict(t=100))
    return fig


# --------------------------------------------------------------------------- generic


def histogram(counts: np.ndarray, edges: np.ndarray, *, title: str, x_title: str,
              name: str, color: str = theme.INPUT, log_y: bool = False,
              levels: Sequence[float] | None = None, height: int = 340,
              y_title: str = "count") -> go.Figure:
    """A histogram from precomputed counts, optionally with vertical lines at `levels`."""
    fig = figure(title, x_title, y_title + (" (log scale)" if log_y else ""), height=height,
                 log_y=log_y)
    _bars(fig, counts, edges, name=name, color=color)
    if levels is not None and len(levels):
        add_levels(fig, levels)
    return fig


def add_levels(fig: go.Figure, levels: Sequence[float], *, full: int = 48,
               limit: int = 400) -> None:
    """Mark the representable values: full-height lines when there are few of them, else a
    comb of short ticks along the bottom (thinned out beyond `limit`)."""
    lv = np.asarray(levels, dtype=np.float64)
    lv = lv[np.isfinite(lv)]
    if lv.size > limit:
        lv = lv[np.linspace(0, lv.size - 1, limit).round().astype(int)]
    top = 1.0 if lv.size <= full else 0.045
    xs: list[Any] = []
    for v in lv:
        xs += [v, v, None]
    ys = [0, top, None] * lv.size
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", yaxis="y2",
                             name=f"representable values ({len(levels):,})",
                             line=dict(color=theme.LEVEL, width=0.8),
                             opacity=0.55 if top == 1.0 else 0.7,
                             hoverinfo="skip"))
    fig.update_layout(yaxis2=dict(overlaying="y", range=[0, 1], visible=False))


# --------------------------------------------------------------------------- quantize lab


def transfer(x: np.ndarray, x_hat: np.ndarray, *, title: str = "Transfer: x against x̂",
             height: int = 360) -> go.Figure:
    """Dequantized x̂ against x (a staircase; flat ends are clipping), with the line x̂ = x."""
    fig = figure(title, "x (original)", "x̂ (after the round trip)", height=height)
    if len(x):
        lo, hi = float(np.min(x)), float(np.max(x))
        fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="x̂ = x",
                                 line=dict(color=theme.LEVEL, dash="dot", width=1.2)))
    fig.add_trace(go.Scatter(x=x, y=x_hat, mode="markers", name="elements (sample)",
                               marker=dict(size=3.5, color=theme.OUTPUT, opacity=0.7),
                               hovertemplate="x %{x:.5g}<br>x̂ %{y:.5g}<extra></extra>"))
    return fig


def heatmap(grid: np.ndarray, *, title: str, x_title: str, y_title: str,
            colorbar: str = "RMSE", height: int = 360, dx: int = 1, dy: int = 1) -> go.Figure:
    """A heat map of a 2-D grid of errors (light = small, dark = large)."""
    g = np.asarray(grid, dtype=np.float64)
    fig = figure(title, x_title, y_title, height=height)
    fig.add_trace(go.Heatmap(
        z=g, x0=0, dx=dx, y0=0, dy=dy, colorscale=theme.HEAT, colorbar=dict(
            title=dict(text=colorbar, side="right"), thickness=12, outlinewidth=0),
        hovertemplate=f"{y_title} %{{y}}<br>{x_title} %{{x}}<br>{colorbar} %{{z:.4g}}"
                      "<extra></extra>"))
    fig.update_yaxes(autorange="reversed", showgrid=False)
    fig.update_xaxes(showgrid=False)
    return fig


def channel_bars(values: np.ndarray, *, title: str, x_title: str, y_title: str,
                 height: int = 360) -> go.Figure:
    """One bar per channel (per-axis errors)."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    fig = figure(title, x_title, y_title, height=height)
    if v.size > 2000:  # keep the browser light: the max of each run of channels
        step = -(-v.size // 2000)
        pad = np.full(step * (-(-v.size // step)), np.nan)
        pad[: v.size] = v
        with np.errstate(all="ignore"):
            v = np.nanmax(pad.reshape(-1, step), axis=1)
        x = np.arange(v.size) * step
    else:
        x = np.arange(v.size)
    fig.add_trace(go.Bar(x=x, y=v, marker_color=theme.OUTPUT, marker_line_width=0,
                         name=y_title, hovertemplate="%{x}: %{y:.4g}<extra></extra>"))
    fig.update_layout(bargap=0.0)
    return fig


# --------------------------------------------------------------------------- format compare


def pareto(df: pd.DataFrame) -> go.Figure:
    """SQNR against bits per element, one point per format, the Pareto front joined."""
    ok = df[df["error"] == ""].dropna(subset=["sqnr_db", "bits_per_element"])
    ok = ok[np.isfinite(ok["sqnr_db"])]
    fig = figure("Quality against cost: SQNR vs bits per element", "bits per element",
                 "SQNR (dB, higher is better)", height=400)
    ok = ok.assign(label=ok["format"])
    key = ok["bits_per_element"].round(6).astype(str) + "|" + ok["sqnr_db"].round(6).astype(str)
    ok["label"] = ok.groupby(key)["format"].transform(" / ".join)
    ok = ok.drop_duplicates(subset=["label"])
    front = ok[ok["pareto"]].sort_values("bits_per_element")
    fig.add_trace(go.Scatter(x=front["bits_per_element"], y=front["sqnr_db"], mode="lines",
                             line=dict(color=theme.GOOD, width=2, dash="dash"),
                             name="Pareto front", hoverinfo="skip"))
    for on_front, color, name, where in ((True, theme.GOOD, "on the front", "top center"),
                                         (False, theme.INPUT, "dominated", "bottom center")):
        part = ok[ok["pareto"] == on_front]
        fig.add_trace(go.Scatter(
            x=part["bits_per_element"], y=part["sqnr_db"], mode="markers+text",
            text=part["label"], textposition=where, name=name, cliponaxis=False,
            textfont=dict(size=11), marker=dict(size=11, color=color,
                                                line=dict(color="white", width=1.5)),
            hovertemplate="%{text}<br>%{x:.3f} bits/element<br>SQNR %{y:.2f} dB"
                          "<extra></extra>"))
    top = float(ok["bits_per_element"].max()) if len(ok) else 8.0
    fig.update_xaxes(range=[0, top * 1.12 + 0.5])
    if len(ok):
        lo, hi = float(ok["sqnr_db"].min()), float(ok["sqnr_db"].max())
        pad = max(2.0, 0.08 * (hi - lo))
        fig.update_yaxes(range=[lo - pad, hi + pad])
    return fig


def small_multiples(hists: dict[str, tuple[np.ndarray, np.ndarray]], *, cols: int = 4,
                    title: str = "Error x̂ − x of each format") -> go.Figure:
    """One small error histogram per format, each on its own x axis."""
    from plotly.subplots import make_subplots

    names = list(hists)
    rows = max(1, -(-len(names) // cols))
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=names, horizontal_spacing=0.06,
                        vertical_spacing=0.16 if rows > 1 else 0.1)
    for i, name in enumerate(names):
        counts, edges = hists[name]
        _bars(fig, counts, edges, name=name, color=theme.PALETTE[i % len(theme.PALETTE)],
              row=i // cols + 1, col=i % cols + 1, showlegend=False)
    fig.update_layout(template=theme.TEMPLATE, title=dict(text=title), height=210 * rows + 70,
                      showlegend=False, margin=dict(t=80))
    fig.update_xaxes(tickfont=dict(size=10), nticks=5)
    fig.update_yaxes(tickfont=dict(size=10), nticks=4)
    fig.update_annotations(font=dict(size=12))
    return fig


def sqnr_table(df: pd.DataFrame, *, title: str) -> go.Figure:
    """A formats × tensors heat table of SQNR values (dB)."""
    z = df.to_numpy(dtype=np.float64)
    text = np.where(np.isfinite(z), np.char.mod("%.1f dB", np.nan_to_num(z)), "—")
    fig = figure(title, "", "", height=70 + 44 * len(df))
    fig.add_trace(go.Heatmap(
        z=z, x=[c.replace("\n", "<br>") for c in df.columns], y=list(df.index), text=text,
        texttemplate="%{text}", textfont=dict(size=13), xgap=3, ygap=3,
        colorscale=[[0, "#FFF4E6"], [0.5, "#A5D8FF"], [1, "#1C7ED6"]],
        colorbar=dict(title=dict(text="SQNR dB", side="right"), thickness=12, outlinewidth=0),
        hovertemplate="%{y} on %{x}: %{text}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", showgrid=False)
    fig.update_xaxes(side="top", showgrid=False)
    fig.update_layout(margin=dict(t=110))
    return fig


# --------------------------------------------------------------------------- sweeps


def clipping(df: pd.DataFrame, *, log_y: bool = True) -> go.Figure:
    """MSE against the clipping range, split into rounding and clipping error."""
    fig = figure("Error against clipping range", "clipping range (fraction of max |x|)",
                 "mean squared error" + (" (log scale)" if log_y else ""), height=400,
                 log_y=log_y)
    r = df["clip_ratio"]
    fig.add_trace(go.Scatter(x=r, y=df["rounding_mse"], name="rounding error",
                             line=dict(color=theme.INPUT, width=2)))
    fig.add_trace(go.Scatter(x=r, y=df["clipping_mse"], name="clipping error",
                             line=dict(color=theme.ERROR, width=2)))
    fig.add_trace(go.Scatter(x=r, y=df["mse"], name="total", line=dict(color="#1F2433",
                                                                        width=3)))
    best = df[df["optimum"]]
    if len(best):
        fig.add_trace(go.Scatter(
            x=best["clip_ratio"], y=best["mse"], mode="markers+text", name="optimum",
            text=[f"best: {v:.2f}" for v in best["clip_ratio"]], textposition="top center",
            marker=dict(size=14, color=theme.GOOD, symbol="star",
                        line=dict(color="white", width=1))))
    return fig


def nice_step(raw: float) -> float:
    """The tick step of 1, 2, 2.5 or 5 times a power of ten nearest above `raw` (axis ticks
    at round numbers: 0, 4, 8… rather than 2.1, 9, 15.9)."""
    if not np.isfinite(raw) or raw <= 0:
        return 1.0
    power = 10.0 ** np.floor(np.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if m * power >= raw:
            return float(m * power)
    return float(10 * power)


def block_sizes(df: pd.DataFrame) -> go.Figure:
    """SQNR and bits per element against block size (log scale)."""
    fig = figure("Error against block size", "block size (elements per scale, log scale)",
                 "SQNR (dB)", height=400, log_x=True)
    fig.add_trace(go.Scatter(x=df["block_size"], y=df["sqnr_db"], name="SQNR",
                             mode="lines+markers", line=dict(color=theme.INPUT, width=2.5)))
    fig.add_trace(go.Scatter(x=df["block_size"], y=df["bits_per_element"], yaxis="y2",
                             name="bits per element", mode="lines+markers",
                             line=dict(color=theme.OUTPUT, width=2, dash="dot")))
    top = float(np.nanmax(df["bits_per_element"])) if len(df) else 1.0
    step = nice_step(top / 5)
    fig.update_layout(yaxis2=dict(title=dict(text="bits per element"), overlaying="y",
                                  side="right", showgrid=False, tick0=0, dtick=step,
                                  range=[0, (np.floor(top / step) + 1) * step]))
    fig.update_xaxes(type="log", tickmode="array", tickvals=list(df["block_size"]),
                     ticktext=[str(v) for v in df["block_size"]])
    return fig


def round_trips(df: pd.DataFrame) -> go.Figure:
    """Elements changed by each repeated round trip, and the SQNR against the original."""
    fig = figure("Repeated round trips", "round trip", "elements changed", height=360)
    fig.add_trace(go.Bar(x=df["round_trip"], y=df["changed"], name="elements changed",
                         marker_color=theme.OUTPUT))
    fig.add_trace(go.Scatter(x=df["round_trip"], y=df["sqnr_db"], yaxis="y2",
                             name="SQNR vs original x", mode="lines+markers",
                             line=dict(color=theme.INPUT, width=2)))
    fig.update_layout(yaxis2=dict(title=dict(text="SQNR (dB)"), overlaying="y", side="right",
                                  showgrid=False), bargap=0.4)
    fig.update_xaxes(dtick=1)
    return fig


def chain(df: pd.DataFrame) -> go.Figure:
    """SQNR after each step of a chain of formats."""
    labels = [f"{s}. {f}" for s, f in zip(df["step"], df["format"])]
    fig = figure("A chain of formats: SQNR after each step", "step", "SQNR (dB)", height=360)
    fig.add_trace(go.Bar(x=labels, y=df["sqnr_db"], name="vs the original x",
                         marker_color=theme.INPUT))
    fig.add_trace(go.Bar(x=labels, y=df["step_sqnr_db"], name="vs the step's input",
                         marker_color=theme.OUTPUT))
    fig.update_layout(barmode="group", bargap=0.35)
    return fig


# --------------------------------------------------------------------------- dynamic


def codes(counts: np.ndarray, zero_point: int) -> go.Figure:
    """How often each uint8 code is used, the zero point marked."""
    fig = figure("How often each uint8 code is used", "code y (0…255)", "count", height=340)
    fig.add_trace(go.Bar(x=np.arange(counts.size), y=counts, marker_color=theme.OUTPUT,
                         marker_line_width=0, name="count",
                         hovertemplate="code %{x}: %{y:,}<extra></extra>"))
    fig.add_vline(x=zero_point, line=dict(color=theme.GOOD, width=2, dash="dash"),
                  annotation_text=f"zero point {zero_point}", annotation_position="top")
    fig.update_layout(bargap=0)
    return fig
