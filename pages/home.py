"""Home: what linear quantization is, a live 8-element example, and a map of the pages."""

import streamlit as st

from app import charts, compute, errors, explain, frame, nav, widgets
from qcore import codes

frame.enter()

st.title("Quantization Explorer")
st.caption("See what ONNX linear quantization does to real tensors — every number computed "
           "by `qcore`, bit-exact with the ONNX operators.")

left, right = st.columns([5, 6], gap="large")
with left:
    st.subheader("What is linear quantization?")
    explain.intro(explain.HOME_INTRO)
    st.latex(explain.FORMULA_Q)
    st.latex(explain.FORMULA_DQ)
with right:
    st.subheader("Try it on 8 numbers")
    c1, c2, c3 = st.columns(3)
    target = widgets.select("Target type", ["int8", "uint8", "int4", "float8e4m3fn",
                                            "float4e2m1"], "h_target", "int4", where=c1)
    zp = widgets.number("Zero point", "h_zp", 0, min_value=-8, max_value=255, where=c3,
                        help="The code that stands for 0 (clipped into the type's range).")
    scale = widgets.slider("Scale", "h_scale", 0.25, min_value=0.01, max_value=1.0, step=0.01,
                           where=c2, help="The step between neighbouring codes.")
    levels = codes.grid_levels(scale, float(zp), target, -2.2, 2.2)
    chart = st.empty()
    if not st.session_state.get("h_chart_sent"):
        # a new tab: send the grid alone first, so the browser loads the charting library
        # while the example runs (on a cold start, while its kernels compile), not after
        st.session_state["h_chart_sent"] = True
        with chart:
            charts.show(charts.home_number_line(None, levels))
    df = errors.require(compute.home_example, scale, float(zp), target)
    with chart:
        charts.show(charts.home_number_line(df, levels))
    st.dataframe(df, hide_index=True, column_config={
        c: st.column_config.NumberColumn(format="%.4g") for c in df.columns if c != "bits"})
    st.caption("Move the scale: a large scale means coarse steps (big rounding error); a small "
               "one means the outer values no longer fit and are clipped to the largest code.")

explain.intro("", explain.HOME_EXACT)

st.subheader("Where to go next")
cols = st.columns(4)
for i, page in enumerate(nav.PAGES[1:]):
    with cols[i % 4].container(border=True, height="stretch"):
        st.page_link(page.script, label=f"**{page.title}**", icon=page.icon)
        st.caption(page.blurb)
