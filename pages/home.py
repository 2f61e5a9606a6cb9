"""Home: what linear quantization is, a live 8-element example, and a map of the pages."""

import numpy as np
import streamlit as st

from app import charts, compute, errors, explain, frame, glossary, nav, own_numbers, widgets
from qcore import codes

frame.enter()

st.title("Quantization Explorer")
st.caption("See what ONNX linear quantization does to real tensors — every number computed "
           "by `qcore`, bit-exact with the ONNX operators.")
with st.container(border=True):
    g1, g2 = st.columns([3, 1], vertical_alignment="center")
    g1.markdown("**New to quantization?** Eleven short steps — scale and zero point, rounding, "
                "saturation, granularity, float8/float4 and MX, storage, formats at the same "
                "bits, dynamic quantization, choosing a format, from tensor to model, from model "
                "to deployment — each with a question to answer before you see the result.")
    if g2.button("Start the guided path", key="h_learn", type="primary",
                 icon=":material/school:", width="stretch"):
        st.switch_page("pages/learn.py")

left, right = st.columns([5, 6], gap="medium")
with left:
    st.subheader("What is linear quantization?")
    explain.intro(explain.HOME_INTRO)
    st.latex(explain.FORMULA_Q)
    st.latex(explain.FORMULA_DQ)
with right:
    st.subheader("Try it on your numbers")
    typed = widgets.text("Your numbers (comma-separated)", "h_x",
                         ", ".join(f"{v:g}" for v in compute.HOME_VALUES.tolist()),
                         help="Up to 64 values: numbers, inf, -inf, nan.")
    c1, c2, c3 = st.columns(3)
    target = widgets.select("Target type", ["int8", "uint8", "int4", "float8e4m3fn",
                                            "float4e2m1"], "h_target", "int4", where=c1)
    scale = widgets.number("Scale (exact)", "h_scale", 0.25, min_value=1e-6, max_value=1e6,
                           step=0.01, fmt="%.6g", where=c2,
                           help="The step between neighbouring codes, typed exactly.")
    zp = widgets.number("Zero point", "h_zp", 0, min_value=-8, max_value=255, where=c3,
                        help="The code that stands for 0 (clipped into the type's range).")
    values = errors.require(own_numbers.parse, typed)
    finite = values[np.isfinite(values)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (-2.2, 2.2)
    pad = max(0.1 * (hi - lo), 2 * float(scale), 1e-3)
    levels = codes.grid_levels(scale, float(zp), target, lo - pad, hi + pad)
    chart = st.empty()
    if not st.session_state.get("h_chart_sent"):
        # a new tab: send the grid alone first, so the browser loads the charting library
        # while the example runs (on a cold start, while its kernels compile), not after
        st.session_state["h_chart_sent"] = True
        with chart:
            charts.show(charts.home_number_line(None, levels))
    df = errors.require(compute.home_example, scale, float(zp), target,
                        tuple(float(v) for v in values))
    with chart:
        charts.show(charts.home_number_line(df, levels))
    st.dataframe(df, hide_index=True, column_config={
        c: st.column_config.NumberColumn(format="%.4g") for c in df.columns if c != "bits"})
    st.caption("Change the scale: a large scale means coarse steps (big rounding error); a "
               "small one means the outer values no longer fit and are clipped to the largest "
               f"code ({glossary.link('saturate', 'saturation')}). A question to try: at "
               "scale 1, 2.5 lies exactly halfway between the codes 2 and 3 — which one does "
               "it get, and does 3.5 go the same way? Type them and see; step 2 of the guided "
               "path asks it and says why.")

explain.intro("", explain.HOME_EXACT)

st.subheader("Where to go next")
others = [p for p in nav.PAGES if p.script != "pages/home.py"]
for start in range(0, len(others), 3):  # a row of columns per three cards: even heights,
    for col, page in zip(st.columns(3), others[start:start + 3]):  # whole titles
        with col.container(border=True, height="stretch"):
            st.page_link(page.script, label=f"**{page.title}**", icon=page.icon)
            st.caption(page.blurb)
