"""Conformance: one node through qcore, the onnx reference evaluator and onnxruntime."""

import streamlit as st

import qcore
from app import (
    compute,
    conformance,
    controls,
    errors,
    explain,
    frame,
    metrics_view,
    state,
    widgets,
)

frame.enter()

OPS = [qcore.QUANTIZE, qcore.DEQUANTIZE, qcore.DYNAMIC]
FIELDS = {"op": "k_op", "opset": "k_opset", "x": "k_x", "x_type": "k_xtype", "scale": "k_scale",
          "scale_type": "k_stype", "zero_point": "k_zp", "target": "k_target", "axis": "k_axis",
          "block_size": "k_block", "saturate": "k_sat", "precision": "k_prec"}


def load_preset(key: str) -> None:
    """Button callback: put a known case into the node editor."""
    _, values = conformance.PRESETS[key]
    state.set_values(**{FIELDS[name]: v for name, v in values.items()}, k_out="")
    st.session_state["k_preset"] = key


@st.cache_data(max_entries=32, show_spinner="Running the node three ways…")
def run(node: conformance.Node) -> dict[str, conformance.Outcome]:
    return conformance.run_all(node)


st.title("Conformance")
explain.intro(explain.CONFORMANCE_INTRO)

st.markdown("##### Known cases — one click")
cols = st.columns(4)
for i, (key, (label, _)) in enumerate(conformance.PRESETS.items()):
    cols[i % 4].button(label, key=f"preset_{key}", on_click=load_preset, args=(key,),
                       width="stretch", icon=":material/play_arrow:")

box = st.container(border=True)
a1, a2, a3 = box.columns([1.6, 1, 1])
d = conformance.Node()
op = widgets.select("Operator", OPS, "k_op", d.op, where=a1, kind="segmented",
                    format_func=lambda o: o.removesuffix("Linear").replace("Quantize", " Quantize")
                    .strip())
opset = widgets.select("Opset", list(compute.OPSETS), "k_opset", d.opset, where=a2,
                       format_func=lambda o: f"{o} → {compute.version_label(op, o)}"
                       if o >= (11 if op == qcore.DYNAMIC else 10) else str(o))
target = widgets.select("Quantized type", list(qcore.QUANTIZED_TYPES) + ["int32"], "k_target",
                        d.target, where=a3, disabled=op == qcore.DYNAMIC,
                        help="QuantizeLinear's output / DequantizeLinear's input (and the zero "
                             "point's type).")
b1, b2 = box.columns([3, 1])
x_text = widgets.text("x (values separated by commas)", "k_x", d.x, where=b1,
                      help="Numbers, inf, -inf, nan. DequantizeLinear: codes of the "
                           "quantized type.")
x_type = widgets.select("x type", ["float", "float16", "bfloat16", "int32"], "k_xtype",
                        d.x_type, where=b2, disabled=op == qcore.DEQUANTIZE)
if op != qcore.DYNAMIC:
    c1, c2, c3 = box.columns([1.5, 1, 1.5])
    scale_text = widgets.text("scale (one value, or one per channel / block)", "k_scale",
                              d.scale, where=c1)
    scale_type = widgets.select("scale type", ["float", "float16", "bfloat16", "float8e8m0",
                                               "int32"], "k_stype", d.scale_type, where=c2)
    zp_text = widgets.text("zero point (empty: none)", "k_zp", d.zero_point, where=c3,
                           help="Empty: QuantizeLinear names the type with output_dtype "
                                "(21+).")
    e1, e2, e3, e4 = box.columns(4)
    axis = widgets.number("axis", "k_axis", 1, min_value=-8, max_value=8, where=e1)
    block = widgets.number("block_size", "k_block", 0, min_value=0, max_value=1 << 20, where=e2)
    if op == qcore.QUANTIZE:
        precision = widgets.select("precision", list(controls.PRECISIONS), "k_prec", "",
                                   where=e3, format_func=controls.PRECISION_LABELS.get)
        with e4:
            st.write("")
            saturate = widgets.toggle("saturate", "k_sat", True)
        out_type = ""
    else:
        out_type = widgets.select("output_dtype", ["", "float", "float16", "bfloat16"], "k_out",
                                  "", where=e3, format_func=lambda t: t or "not set")
        precision, saturate = "", True
else:
    scale_text, scale_type, zp_text, axis, block = "1", "float", "", 1, 0
    precision, saturate, out_type = "", True, ""

node = conformance.Node(op, int(opset), x_text, x_type, scale_text, scale_type, zp_text,
                        target, int(axis), int(block), bool(saturate), precision, out_type)
preset = st.session_state.get("k_preset")
if preset in conformance.NOTES and all(
        getattr(node, k) == v for k, v in conformance.PRESETS[preset][1].items()):
    st.info(f"**{conformance.PRESETS[preset][0]}** — {conformance.NOTES[preset]}",
            icon=":material/lightbulb:")

outcomes = errors.require(run, node, what="Running the node")
diffs = conformance.disagreements(outcomes)
row = metrics_view.cards()
for name in conformance.ENGINES:
    out = outcomes[name]
    if out.missing:
        metrics_view.card(row, name, "not installed", help=out.error)
    elif out.error:
        metrics_view.card(row, name, "refused / failed")
    elif name == "qcore":
        metrics_view.card(row, name, "ran", f"{qcore.resolve(op, opset).label}"
                          if opset >= 10 else None, delta_color="off")
    else:
        n = diffs.get(name, 0)
        metrics_view.card(row, name, "agrees bit for bit" if n == 0
                          else f"{n} element(s) differ")

for name in conformance.ENGINES:
    out = outcomes[name]
    if out.error and not out.missing:
        (st.error if name == "qcore" else st.warning)(f"**{name}**: {out.error}",
                                                       icon=":material/block:")
    elif out.missing:
        st.caption(f"{name}: {out.error}")

if any(o.outputs for o in outcomes.values()):
    try:
        text, ok = conformance.table(node, outcomes, 0)
    except qcore.QuantizationError as exc:
        errors.show(exc)
    else:
        def _style(col):
            if col.name in ("x", "qcore"):
                return [""] * len(col)
            return ["" if ok[col.name].iloc[i] else "background-color: #FFE3E3; color: #C92A2A;"
                    " font-weight: 600" for i in range(len(col))]

        st.markdown("##### Output y, element by element (value · stored bits)")
        st.dataframe(text.style.apply(_style, axis=0), hide_index=False)
        st.caption("Red: differs from qcore bit for bit.")
    if op == qcore.DYNAMIC:
        rows = []
        for name in conformance.ENGINES:
            out = outcomes[name]
            if len(out.outputs) == 3:
                rows.append({"engine": name, "y_scale": conformance.scalar_text(out.outputs[1]),
                             "y_zero_point": conformance.scalar_text(out.outputs[2])})
        st.markdown("##### Scale and zero point")
        st.dataframe(rows, hide_index=True)
