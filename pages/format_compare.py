"""Format Compare: one tensor, every chosen format side by side."""

import streamlit as st

from app import (
    charts,
    compute,
    controls,
    errors,
    explain,
    frame,
    metrics_view,
    recipe_view,
    tensors,
    text,
    widgets,
)
from qcore import analysis

spec, x = tensors.open_page("Format Compare", explain.COMPARE_INTRO, explain.COMPARE_EXACT)

MODES = {"formats": "Formats, one calibration", "recipes": "Recipes, each its own"}
mode = widgets.select("Compare", list(MODES), "c_mode", "formats", kind="segmented",
                      format_func=MODES.get,
                      help="Formats: every chosen element type with the same granularity, "
                           "calibration and scale type (the panel below). Recipes: each row "
                           "its own element type, granularity, block size, calibration and "
                           "scale type — int4 blocked 32 with float32 scales beside MXFP4.")
if mode == "recipes":
    chosen = recipe_view.editor("c_recipes")
    saturate = widgets.toggle("Saturate", "c_sat", True,
                              help="float8 only: overflow becomes ±max (on) or NaN/Inf (off).")
    if not chosen:
        st.info("Pick or type at least one recipe.", icon=":material/touch_app:")
        frame.stop_page()
    df = errors.require(recipe_view.compare, spec, tuple(chosen), bool(saturate),
                        what="Comparing recipes")
    st.caption("Each recipe lays itself on the tensor as the Model Report does (per-axis: one "
               "scale per row, axis 0; blocked: blocks along the last axis; or the axis the "
               "recipe names, as in int4:blocked32/0) and runs at the "
               "oldest opset whose operators express it, so its figures equal the report's. "
               "A label shows that opset where the bits depend on it: before opset 21 a zero "
               "point is stored even when it is zero.")
else:
    targets = widgets.multi("Formats", list(compute.TARGETS), "c_formats",
                            list(compute.COMPARE_DEFAULT), kind="pills",
                            format_func=lambda t: t)
    cfg = controls.panel(controls.shape_of(x), show_opset=False, show_target=False,
                         show_precision=False, prefix="c_")
    if not targets:
        st.info("Pick at least one format.", icon=":material/touch_app:")
        frame.stop_page()
    saturate = cfg.saturate
    df = errors.require(compute.compare, spec, tuple(targets), cfg, what="Comparing formats")

left, right = st.columns([5, 4], gap="medium")
with left:
    charts.show(charts.pareto(df))
with right:
    best = df[df["error"] == ""]
    pick = analysis.front_pick(best["bits_per_element"], best["sqnr_db"]) if len(best) else None
    if pick is not None:
        top = best.iloc[pick]
        row = metrics_view.cards()
        metrics_view.card(row, "Best SQNR", text.db(top["sqnr_db"]),
                          help="Among the chosen formats.")
        metrics_view.card(row, "…with", str(top["format"]),
                          f"{top['bits_per_element']:.3f} bits/element", delta_color="off")
        front = ", ".join(best[best["pareto"]].sort_values("bits_per_element")["format"])
        st.markdown(f"**Pareto front:** {front}")
    for _, row in df[df["error"] != ""].iterrows():
        st.error(f"**{row['format']}**: {row['error']}", icon=":material/block:")
    st.caption(compute.PARETO_RULE.format(noun="format" if mode == "formats" else "recipe"))

table = df.drop(columns=["error", "nan_out", "inf_out", "recipe", "opset_sets_bits"],
               errors="ignore").copy()
if "recipe" in df:  # the recipe's own name: its opset has a column of its own here
    table["format"] = df["recipe"]
partial = bool((table["sqnr_coverage"] < 1).any())
if not partial:
    table = table.drop(columns=["sqnr_coverage"])
for col in ("axis", "block_size"):  # only where the recipe has one (text: never "None")
    if col in table:
        table[col] = table[col].astype("string").fillna("")
for col in ("clipped_fraction", "mean_rel_error", "sqnr_coverage"):
    if col in table:
        table[col] = 100 * table[col]
if partial:
    st.caption(metrics_view.partial_note(x, produced=bool((df["nonfinite_made"] > 0).any()),
                                         saturate=saturate) + " (the “SQNR covers” column)")
NAME = "format" if mode == "formats" else "recipe"
COLUMNS = {
    "format": st.column_config.TextColumn(NAME, pinned=True),
    "target": st.column_config.TextColumn("element type"),
    "axis": st.column_config.TextColumn("axis"),
    "block_size": st.column_config.TextColumn("block"),
    "method": st.column_config.TextColumn("calibration"),
    "scale_type": st.column_config.TextColumn("scale type"),
    "opset": st.column_config.NumberColumn("opset", help="The oldest opset whose "
                                           "QuantizeLinear and DequantizeLinear express it."),
    "bits": st.column_config.NumberColumn("bits"),
    "bits_per_element": st.column_config.NumberColumn("bits / element", format="%.3f"),
    "sqnr_coverage": st.column_config.NumberColumn("SQNR covers %", format="%.4g",
                                                   help="Share of elements with finite x "
                                                        "and x̂: the SQNR is over these."),
    "nonfinite_made": st.column_config.NumberColumn("NaN/Inf made",
                                                    help="Finite x that became NaN/±Inf."),
    "sqnr_db": st.column_config.NumberColumn(
        "SQNR (dB)", format="%.2f",
        help="Over the finite elements" if partial else "10·log10(Σx² / Σ(x̂ − x)²)"),
    "rmse": st.column_config.NumberColumn("RMSE", format="%.3g"),
    "max_abs_error": st.column_config.NumberColumn("max |error|", format="%.3g"),
    "clipped_fraction": st.column_config.NumberColumn(
        "clipped %", format="%.3g", help="Finite x beyond the outermost code (saturated, or "
                                         "NaN/Inf with saturate off), % of finite x."),
    "pareto": st.column_config.CheckboxColumn("Pareto"),
    "mse": st.column_config.NumberColumn("MSE", format="%.4g"),
    "mean_abs_error": st.column_config.NumberColumn("mean |error|", format="%.3g"),
    "mean_rel_error": st.column_config.NumberColumn("rel. error %", format="%.3g",
                                                    help="Mean relative error, %."),
}
#: Two tables, each narrow enough to show every column whole on a laptop window: the figures
#: first, then how each row is built and the remaining error measures.
FIGURES = ["format", "sqnr_db", "bits_per_element", "pareto", "rmse", "max_abs_error",
           "mean_abs_error", "clipped_fraction", "sqnr_coverage", "nonfinite_made"]
if not (table["nonfinite_made"] > 0).any():  # a column of zeros says nothing
    table = table.drop(columns=["nonfinite_made"])
table = table.drop(columns=["mse"])  # RMSE² (the CSV of the Quantize Lab has it)
st.dataframe(table[[c for c in FIGURES if c in table]], hide_index=True, column_config=COLUMNS)
BUILT = [c for c in table.columns if c not in FIGURES or c == "format"]
st.caption(f"How each {NAME} is built, and its mean relative error:")
st.dataframe(table[BUILT], hide_index=True, column_config=COLUMNS)

if mode == "recipes":
    hists = recipe_view.error_hists(spec, tuple(chosen), bool(saturate))
else:
    hists = compute.compare_error_hists(spec, tuple(targets), cfg)
if hists:
    charts.show(charts.small_multiples(hists))

st.subheader("Weights, activations and gradients", divider="gray")
st.markdown("The headline question: on real tensors of a transformer (all-MiniLM-L6-v2, "
            "shipped in `datasets/`), which " + ("format keeps the most signal? Same "
                                                 "calibration and granularity as above."
                                                 if mode == "formats" else
                                                 "recipe keeps the most signal?"))
if mode == "recipes":
    head = errors.attempt(recipe_view.headline, tuple(chosen), bool(saturate),
                          what="Headline comparison")
else:
    head = errors.attempt(compute.headline, cfg, what="Headline comparison")
if head is not None and not head.empty:
    charts.show(charts.sqnr_table(head, title="SQNR (dB) by " + mode[:-1] + " and tensor kind"))
