"""Dynamic Quantization: DynamicQuantizeLinear-11 step by step on the chosen tensor."""

import numpy as np
import streamlit as st

from app import (
    charts,
    compute,
    errors,
    explain,
    metrics_view,
    own_numbers,
    tensors,
    text,
    theme,
    widgets,
)

spec, x = tensors.open_page("Dynamic Quantization", explain.DYNAMIC_INTRO, explain.DYNAMIC_EXACT)

res = errors.require(compute.dynamic, spec, what="DynamicQuantizeLinear")
st.subheader("Step by step", divider="gray")
c = metrics_view.cards()
card = metrics_view.card
card(c, "1 · min(x)", text.short_num(res.min, 4), help="The smallest finite value of x.")
card(c, "2 · max(x)", text.short_num(res.max, 4), help="The largest finite value of x.")
card(c, "3 · range with 0", text.short_num(res.wmax - res.wmin, 4),
     help="Width of [min(0, min x), max(0, max x)]: the range is widened so that zero is "
          "represented exactly.")
card(c, "4 · scale", text.short_num(res.scale, 4),
     help=f"(max − min) / 255 in float32 = {res.scale:.9g}.")
card(c, "5 · zero point", f"{res.zero_point}",
     help="round(clip(−min / scale, 0, 255)), half to even.")
with np.errstate(all="ignore"):
    zp_exact = float(np.float32(0) - np.float32(res.wmin) / np.float32(res.scale))
st.markdown(
    f"The range **[{res.wmin:.4g}, {res.wmax:.4g}]** is spread over the 256 codes "
    f"0…255, so one step is **{res.scale:.4g}**. Zero sits at −min / scale = "
    f"{zp_exact:.4f}, which rounds to the zero point **{res.zero_point}**. Every element "
    f"then becomes `round(x / {res.scale:.4g}) + {res.zero_point}`, clipped to 0…255.")

st.subheader("The result", divider="gray")
metrics_view.metric_grid(res.metrics)
if note := explain.bits_note(int(res.metrics["n"]), res.metrics.get("bits_per_element"),
                             "uint8"):
    st.caption(note)
log_y = widgets.toggle("Logarithmic counts", "d_logy", False)
c1, c2 = st.columns(2)
with c1:
    counts, edges = res.hist
    charts.show(charts.histogram(counts, edges, title="Input x, with the 256 values x̂ can take",
                                 x_title="x", name="x", log_y=log_y, levels=res.levels))
with c2:
    charts.show(charts.codes(res.codes, res.zero_point))
c3, c4 = st.columns(2)
with c3:
    counts, edges = res.err_hist
    charts.show(charts.histogram(counts, edges, title="Error x̂ − x", x_title="x̂ − x",
                                 name="error", color=theme.ERROR, log_y=log_y))
with c4:
    st.markdown("#### Why widen the range to 0?")
    st.markdown(
        "If x is all positive (say 2…10), a range of [2, 10] would spend every code on "
        "values that occur, but 0 — the value of padding, of a ReLU's negative half, of "
        "pruned weights — would fall *between* two codes and come back slightly wrong. "
        "Widening to [0, 10] costs a little resolution and makes 0 exact: it is the zero "
        f"point, here code **{res.zero_point}**.")
    st.caption(f"Codes used: {int((res.codes > 0).sum())} of 256. "
               f"x̂ computed with {compute.version_label('DequantizeLinear', 28)}.")

st.subheader("Your own numbers", divider="gray")
st.caption("DynamicQuantizeLinear on a few values you type: the scale and zero point come from "
           "them, and every element's y is listed.")
own_numbers.dynamic_panel("d_")
