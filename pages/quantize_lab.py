"""Quantize Lab: one tensor, one configuration, every error, histogram and step."""

import streamlit as st

from app import (
    charts,
    compute,
    controls,
    errors,
    explain,
    glossary,
    metrics_view,
    own_numbers,
    presets,
    tensors,
    theme,
    widgets,
)

spec, x = tensors.open_page("Quantize Lab", explain.LAB_INTRO, explain.LAB_EXACT, show_type=True)

st.caption("Presets that teach — one click sets the tensor and the settings:")
presets.buttons(presets.LAB)
cfg = controls.panel(controls.shape_of(x))
presets.note(presets.LAB)
res = errors.require(compute.lab, spec, cfg, what="Quantizing")
m = res.metrics

metrics_view.warn_non_finite(m)
metrics_view.metric_grid(m)
if note := explain.bits_note(int(m["n"]), m.get("bits_per_element"), cfg.target):
    st.caption(note)
metrics_view.params_line(res)

log_y = widgets.toggle("Logarithmic counts", "logy", False,
                       help="Show rare values (tails, outliers) in the histograms.")
c1, c2 = st.columns(2)
with c1:
    counts, edges = res.hist
    fig = charts.histogram(counts, edges, title="Input x, with the values x̂ can take",
                           x_title="x", name="x", log_y=log_y, levels=res.levels)
    charts.show(fig)
    if res.n_scales > 1:
        st.caption("Grid lines: the representable values of the group with the largest scale.")
with c2:
    counts, edges = res.err_hist
    charts.show(charts.histogram(counts, edges, title="Error x̂ − x", x_title="x̂ − x",
                                 name="error", color=theme.ERROR, log_y=log_y))
c3, c4 = st.columns(2)
with c3:
    tx, ty = res.transfer
    charts.show(charts.transfer(tx, ty))
    st.caption(f"{len(tx):,} of {m['n']:,} elements drawn (extremes and largest errors kept).")
with c4:
    metrics_view.error_map(res)

st.subheader("Step by step", divider="gray")
st.caption("Sample elements through every step of QuantizeLinear and back — the same numbers "
           "qcore computes on the whole tensor. Ties round half to even: "
           + glossary.WHY["half_even"])
st.dataframe(metrics_view.walk_table(res.walk, cfg.target), hide_index=True,
             column_config=metrics_view.WALK_COLUMNS)

st.subheader("Step by step on your own numbers", divider="gray")
st.caption(f"Type a few values and an exact scale and zero point: each goes through "
           f"{res.version} to **{cfg.target}** (the target above) and back.")
own_numbers.quantize_panel("lo_", target=cfg.target, saturate=cfg.saturate, opset=cfg.opset)

metrics_view.downloads(spec, cfg, res)
