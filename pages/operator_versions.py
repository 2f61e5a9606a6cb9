"""Operator Versions: what each version supports, and where a configuration is valid."""

import streamlit as st

import qcore
from app import charts, controls, errors, explain, frame, reference, widgets

frame.enter()

OPS = (qcore.QUANTIZE, qcore.DEQUANTIZE, qcore.DYNAMIC)

st.title("Operator Versions")
explain.intro(explain.VERSIONS_INTRO)

tabs = st.tabs(list(OPS))
for op, tab in zip(OPS, tabs):
    with tab:
        table = reference.version_table(op)
        if op == qcore.DYNAMIC:
            table = table.drop(columns=["output types", "per-axis", "blocked"])
        else:
            for col in ("per-axis", "blocked"):
                table[col] = table[col].map({True: "✓", False: "—"})
        if op == qcore.QUANTIZE:
            table = table.drop(columns=["output types"])
        st.table(table.set_index("version"))
        if op != qcore.DYNAMIC:
            c1, c2 = st.columns([3, 2])
            with c1:
                matrix = reference.support_matrix(op, "quantized_types", qcore.QUANTIZED_TYPES)
                charts.show(charts.support_heatmap(
                    matrix, f"Quantized types {op} accepts, by version", op), key=f"m_{op}")
            with c2:
                matrix = reference.support_matrix(op, "scale_types",
                                                ("float", "float16", "bfloat16", "int32",
                                                 "float8e8m0"))
                charts.show(charts.support_heatmap(matrix, "Scale types, by version", op),
                            key=f"s_{op}")

st.subheader("Where is a configuration valid?", divider="gray")
st.markdown("Describe one node; `qcore.plan_quantize` / `qcore.plan_dequantize` validate it "
            "from types and shapes alone at every version.")
box = st.container(border=True)
a1, a2, a3, a4 = box.columns(4)
op = widgets.select("Operator", [qcore.QUANTIZE, qcore.DEQUANTIZE], "v_op", qcore.QUANTIZE,
                    where=a1)
quantized = widgets.select("Quantized type", list(qcore.QUANTIZED_TYPES) + ["int32"],
                           "v_qtype", "int4", where=a2,
                           help="QuantizeLinear's output y / DequantizeLinear's input x.")
scale_type = widgets.select("Scale type", ["float", "float16", "bfloat16", "float8e8m0",
                                           "int32"], "v_stype", "float", where=a3)
if op == qcore.QUANTIZE:
    x_type = widgets.select("x type", ["float", "float16", "bfloat16", "int32"], "v_xtype",
                            "float", where=a4)
else:
    out_type = widgets.select("output_dtype", ["", "float", "float16", "bfloat16"], "v_out", "",
                              where=a4, format_func=lambda t: t or "not set (scale's type)")
b = box.columns([0.9, 0.9, 1.5, 0.6, 0.8])
rows = widgets.number("x rows", "v_rows", 64, min_value=1, max_value=1 << 20, where=b[0])
cols = widgets.number("x columns", "v_cols", 256, min_value=1, max_value=1 << 20, where=b[1])
gran, axis, block = controls.granularity_panel((rows, cols), prefix="v_", columns=b[2:])
shape = (int(rows), int(cols))
sshape = qcore.Layout.from_granularity(shape, gran, axis, block).scale_shape()
if op == qcore.QUANTIZE:
    d1, d2, d3 = box.columns(3)
    named_by = widgets.select("Target type named by", ["zero point", "output_dtype"], "v_named",
                              "zero point", where=d1, kind="segmented",
                              help="y_zero_point's type (every version) or the output_dtype "
                                   "attribute (QuantizeLinear-21+).")
    precision = widgets.select("precision", list(controls.PRECISIONS), "v_prec", "", where=d2,
                               format_func=controls.PRECISION_LABELS.get)
    with d3:
        st.write("")
        saturate = widgets.toggle("saturate", "v_sat", True)
    config = dict(x_dtype=x_type, x_shape=shape, scale_dtype=scale_type, scale_shape=sshape,
                  zero_point_dtype=quantized if named_by == "zero point" else None,
                  zero_point_shape=sshape if named_by == "zero point" else None,
                  axis=axis if gran != qcore.PER_TENSOR else 1,
                  block_size=block if gran == qcore.BLOCKED else 0, saturate=saturate,
                  output_dtype=quantized if named_by == "output_dtype" else None,
                  precision=precision or None)
else:
    config = dict(x_dtype=quantized, x_shape=shape, scale_dtype=scale_type, scale_shape=sshape,
                  zero_point_dtype=quantized, zero_point_shape=sshape,
                  axis=axis if gran != qcore.PER_TENSOR else 1,
                  block_size=block if gran == qcore.BLOCKED else 0,
                  output_dtype=out_type or None)
box.caption(f"x {shape[0]}×{shape[1]} · scale shape {sshape or '() — one value'}")

result = errors.require(reference.check_everywhere, op, config, what="Validation")
valid = result[result["valid"]]["version"].tolist()
if valid:
    first = int(result[result["valid"]]["first_opset"].iloc[0])
    st.success(f"Valid at **{', '.join(valid)}** — from opset {first}.",
               icon=":material/check_circle:")
else:
    st.error("Valid at no version.", icon=":material/block:")


for rec in result.to_dict("records"):
    c1, c2 = st.columns([1.3, 5], vertical_alignment="center")
    mark = ":green[**✓ valid**]" if rec["valid"] else ":red[**✗ invalid**]"
    c1.markdown(f"**{rec['version']}**  \n{mark} · {rec['opsets']}")
    if rec["valid"]:
        c2.success(rec["what qcore says"], icon=":material/check:")
    else:
        c2.error(rec["what qcore says"], icon=":material/close:")
