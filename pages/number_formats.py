"""Number Formats: every code of a format, its bit fields, value, spacing and specials."""

import math

import streamlit as st

import qcore
from app import charts, errors, explain, frame, metrics_view, reference, text, widgets

frame.enter()

FORMATS = list(qcore.QUANTIZED_TYPES) + ["float8e8m0"]

st.title("Number Formats")
explain.intro(explain.FORMATS_INTRO)

left, right = st.columns([1, 2], vertical_alignment="bottom")
name = widgets.select("Format", FORMATS, "nf_format", "float8e4m3fn", where=left,
                      format_func=lambda n: f"{n} ({qcore.get_format(n).bits} bit)")
fmt = qcore.get_format(name)
right.markdown(f"**{name}** — {fmt.description}")

c = metrics_view.cards()
card = metrics_view.card
card(c, "Bits", fmt.bits)
card(c, "Distinct values", f"{fmt.levels:,}", help="Finite values, zero counted once.")
card(c, "Largest", text.short_num(fmt.max, 4))
card(c, "Smallest", text.short_num(fmt.min, 4))
if fmt.is_integer:
    card(c, "Step", "1", help="Integers are evenly spaced.")
    card(c, "Zero", "exact")
else:
    card(c, "Min normal", text.short_num(fmt.min_normal),
         help=f"Smallest positive normal value: {fmt.min_normal!r} = "
              f"2^{int(math.log2(fmt.min_normal))}.")
    card(c, "Min subnormal" if fmt.mbits else "Min positive", text.short_num(fmt.min_positive),
         help=f"{fmt.min_positive!r} = 2^{int(math.log2(fmt.min_positive))}. Dynamic "
              f"range: {math.log2(fmt.max / fmt.min_positive):.1f} binades.")

def text_width(values, header: str) -> int:
    """Pixels a table column needs for its longest text (the grid cuts what does not fit)."""
    longest = max([len(str(v)) for v in values] + [len(header)])
    return 7 * longest + 28


if fmt.bits <= 8:
    codes = errors.require(reference.format_codes, name)
    log = widgets.toggle("Logarithmic number line", "nf_log", not fmt.is_integer)
    charts.show(charts.number_line(codes["numeric"].to_numpy(), codes["class"].to_numpy(), name,
                                   log=log))
    st.markdown(f"#### All {len(codes)} codes")
    table = codes.drop(columns=["numeric"])
    labels = {name: "bits (s e m)" if name == "bits" and fmt.is_float else name
              for name in table.columns}
    # every column as wide as its longest text, and the table beside nothing: the grid cuts
    # what does not fit its width ("subno…" in the class column)
    st.dataframe(table, hide_index=True, height=420, width="content", column_config={
        name: st.column_config.Column(
            label, width=text_width(table[name], label),
            help="sign, exponent and mantissa bits" if name == "bits" else None)
        for name, label in labels.items()})
    spacing = reference.format_spacing(name)
    if len(spacing) > 1:
        charts.show(charts.spacing(spacing, name))
    else:
        st.info("A single positive value: no spacing to draw.")
else:
    st.info(f"{name} has {1 << fmt.bits:,} codes — evenly spaced integers from "
            f"{int(fmt.min):,} to {int(fmt.max):,}; too many to list.", icon=":material/info:")

st.subheader("Special values and overflow", divider="gray")
if fmt.kind == "scale":
    st.markdown("float8e8m0 is a **scale type** (MX block scales): QuantizeLinear does not "
                "produce it. It stores only powers of two 2^(e−127), no sign, no zero; 0xFF is "
                "NaN.")
else:
    st.markdown("What `qcore.quantize_linear(x, scale=1, output_dtype=…)` returns for the "
                "edge cases, with `saturate` on and off (computed live).")
    specials = errors.require(reference.format_specials, name)
    diff = specials["saturate=1 value"] != specials["saturate=0 value"]

    def _mark(row):  # highlight rows where saturate matters
        return ["background-color: #FFF4E6" if diff.iloc[row.name] else "" for _ in row]

    st.dataframe(specials.style.apply(_mark, axis=1), hide_index=True, height="content")
    if not diff.any():
        st.caption("`saturate` makes no difference here: integers always saturate, and "
                   "float4/float6 have no Inf or NaN to overflow to.")
    doc = reference.onnx_doc("Cast", 25)
    with st.expander("Exact ONNX semantics (Cast's saturation tables)",
                     icon=":material/menu_book:"):
        st.markdown("QuantizeLinear converts to float8 the way Cast does; the tables for "
                    "`saturate=1` and `saturate=0` are the Cast operator's.")
        if doc:
            st.markdown(reference.cast_tables(doc))
        else:
            st.info("Install `onnx` to read the operator documentation here.")
