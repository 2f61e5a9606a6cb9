"""Texts of the app: plain words for a student first, the exact ONNX semantics for the
implementer one expander away."""

from __future__ import annotations

import streamlit as st

import qcore

from . import glossary

#: Two lines, so that it fits Home's column on a laptop-wide window (one line was cut).
FORMULA_Q = (r"\begin{aligned}y &= \operatorname{saturate}\big(\operatorname{round}(x \,/\, "
             r"\text{scale}) \\ &\qquad + \text{zero\_point}\big)\end{aligned}")
FORMULA_DQ = r"\hat{x} = (y - \text{zero\_point}) \times \text{scale}"

HOME_INTRO = """
**Quantization** stores numbers with fewer bits. A tensor of 32-bit floats becomes a tensor of
8-, 6-, 4- or even 2-bit codes, plus a **scale** (and sometimes a **zero point**) that says how
codes map back to real values. The model gets smaller and faster; the price is a small error
in every number.

*Linear* quantization divides each value by the scale, rounds it to the nearest code the target
type can hold, and clips whatever does not fit (**saturation**). Going back multiplies by the
scale again. The difference between the original `x` and the round trip `x̂` is the
**quantization error** — that is what this app lets you see.
"""

HOME_EXACT = """
ONNX defines three operators (the app follows `qcore`, which implements them bit-exactly):

- **QuantizeLinear** — versions 10, 13, 19, 21, 23, 24, 25, 28.
  `y = saturate(round(x / y_scale) + y_zero_point)`; rounding is half to even; the division happens in the `precision` type
  (from 23), else in `y_scale`'s type. Integer targets saturate to their range; float8 targets
  follow the Cast operator's saturation tables (`saturate` attribute, from 19); float4/float6
  always saturate. The output type is the zero point's type, else `output_dtype` (from 21),
  else uint8.
- **DequantizeLinear** — `x̂ = (y − x_zero_point) · x_scale`, computed in float32 and rounded
  once to the output type (`x_scale`'s type, or `output_dtype` from 23).
- **DynamicQuantizeLinear-11** — uint8 only; the scale and zero point come from `x`'s range
  widened to include 0.

Granularity is decided by the scale's shape: one value = per-tensor; a 1-D scale of length
`x.shape[axis]` = per-axis (from 13); a scale of x's rank with `block_size` > 0 = blocked
(from 21), valid block sizes `[ceil(Dᵢ/Sᵢ), ceil(Dᵢ/(Sᵢ−1))−1]`, the last block may be short.
"""

LAB_INTRO = """
Pick a tensor in the sidebar and a target type above. The scale (and zero point) are chosen by
a **calibration method** — how much of the tensor's range the codes should cover. A wide range
wastes precision; a narrow one rounds finely but clips the outliers. Min–max covers the
whole range, yet its rounded zero point can leave an extreme element just past the last code
— x / scale + zero point = 127.5 rounds half to even to 128 and saturates to 127 in int8 — an
error no larger than rounding's, so **Clipped** counts only elements more than half a step
outside. The
metrics and charts below show the trade-off: the **transfer plot** (x against x̂) is a staircase
whose flat ends are clipping; the **error histogram** is narrow when rounding is fine.
"""

LAB_EXACT = """
- Calibration is not part of ONNX: it decides `y_scale`/`y_zero_point`, then `qcore` runs the
  exact operator at the chosen opset (`opset=N` = the version in force at opset N, e.g.
  22 → QuantizeLinear-21).
- `x / y_scale` is computed in `precision` (QuantizeLinear-23+), else in `y_scale`'s type:
  a float16/bfloat16 quotient is rounded to that type before rounding to the target.
- Rounding: half to even, for integers and for every float format's mantissa (rounding
  ties up would bias every tie upward; to even, half go each way).
- Saturation: integers clip to their range (±Inf too); NaN into an integer gives the type's
  minimum (counted as "NaN in"); float8 follows Cast's tables (`saturate=0`: overflow → NaN, or
  Inf for e5m2); float4/float6 always saturate.
- A given zero point is always added, for float targets too (`x/scale + zp`, one rounding).
- Effective bits per element counts the scales' and zero points' storage spread over the
  elements they serve.
"""

COMPARE_INTRO = """
The same tensor quantized to several formats at the same granularity. **SQNR** (signal to
quantization-noise ratio, in dB) says how far the error is below the signal: every extra bit is
worth about 6 dB for integers. A format is on the **Pareto front** when no other format
costs at most as many bits per element (to 0.1 bit) and has a higher SQNR. Integers spread their codes evenly; float
formats put more codes near zero and fewer far away, which suits bell-shaped and heavy-tailed
tensors.
"""

COMPARE_EXACT = """
Each format is quantized with the same calibration method and granularity, at the latest opset
(`QuantizeLinear-28`), then dequantized to float32; bits per element include the scales
(float32, or float8e8m0 for power-of-two scales) and zero points.
"""

FORMATS_INTRO = """
A number format is a list of codes and the value of each. **Integers** are evenly spaced.
**Floats** split their bits into a **sign**, an **exponent** (which power of two) and a
**mantissa** (where inside that power of two): values are dense near zero and sparse far away,
so the *relative* spacing stays roughly constant: each **binade** (the values between two
consecutive powers of two) holds the same number of evenly spaced codes. **Subnormals** fill
the gap just above zero. Formats differ in what they do with the special cases: zero's sign,
NaN, infinity (the **fnuz** float8 formats have no −0 and no Inf), and values too large to
represent (overflow). The float8 and MX formats are **OCP** specifications.
"""

VERSIONS_INTRO = """
ONNX operators evolve by **versions**: a model declares an *opset* and gets the newest version
of each operator that is not newer than it (opset 22 → QuantizeLinear-21). New versions add
types (float8 at 19, int4 at 21, float4 at 23, int2 at 25, float6 at 28), granularities
(per-axis at 13, blocked at 21) and attributes. Pick a configuration below to see at which
versions it is valid — and exactly what `qcore` says at the others.
"""

DYNAMIC_INTRO = """
**DynamicQuantizeLinear** computes the scale and zero point from the tensor itself, at run
time, and always produces **uint8**. The range is widened to include 0 so that zero is
represented exactly (important for padding and ReLU outputs), spread over the 256 codes, and
the zero point is the code that stands for 0.
"""

DYNAMIC_EXACT = r"""
DynamicQuantizeLinear-11 (as its ONNX function body):

- `x_min = min(0, min(x))`, `x_max = max(0, max(x))`
- `y_scale = (x_max − x_min) / 255` (float32)
- `y_zero_point = cast_uint8(round(clip(0 − x_min / y_scale, 0, 255)))`, round half to even
- `y = saturate(round(x / y_scale) + y_zero_point)`

`qcore`'s decisions: an all-zero tensor gets scale 1/255 (as the onnx reference; onnxruntime
returns 1.0), zero point 0 and y = 0; a tensor with NaN or Inf is refused (the scale would be
meaningless).
"""

SWEEPS_INTRO = """
Where does the error come from? **Rounding error** is small and spread over every element;
**clipping error** is large and hits only the elements outside the range. Shrinking the
clipping range trades one for the other, and the total error has a minimum — the best range.
Smaller **blocks** give each group of elements its own scale (less error) at the cost of
storing more scales. A **round trip** (quantize, dequantize) repeated should change nothing
after the first time; a **chain** through several formats accumulates the errors of each.
"""

SWEEPS_EXACT = """
The clipping sweep shrinks the calibrated range by a ratio from 1 down to 0.05: for min–max,
abs-max and MX it is that method's own range times the ratio (ratio 1 is what the Lab shows);
percentile, MSE and manual pick their own range, so for them it is the observed min–max range
times the ratio (symmetric for signed and float targets, as the method is); the MSE is split into the part from elements inside the range (rounding)
and outside it (clipping). Block sizes are swept over the values the spec accepts for the
chosen axis, `[ceil(Dᵢ/Sᵢ), ceil(Dᵢ/(Sᵢ−1))−1]`. Every step is `qcore.quantize_linear` then
`qcore.dequantize_linear`.
"""

CONFORMANCE_INTRO = """
One ONNX node run three ways: by `qcore`, by the **onnx reference evaluator** (Python, the
spec's executable companion) and by **onnxruntime** (the production C++ runtime). Cells that
differ from `qcore` bit for bit are highlighted. The preset buttons load the known
disagreements — cases where the spec is thin or an implementation has a bug.
"""


def intro(text: str, exact: str | None = None, *, exact_title: str = "Exact ONNX semantics") -> None:
    """Plain-words paragraph, with the exact semantics one expander away, and links to the
    glossary for the terms they use."""
    st.markdown(text)
    if exact:
        with st.expander(exact_title, icon=":material/menu_book:"):
            st.markdown(exact)
    line = glossary.terms_line(text + "\n" + (exact or ""))
    if line:
        st.caption(line)


def terms(*slugs: str) -> None:
    """A caption linking the given glossary terms."""
    st.caption("Words used here: " + " · ".join(glossary.link(s) for s in slugs))


def bits_note(n: int, bits_per_element: float | None, target: str) -> str:
    """For a tensor so small that its scales dominate Bits / element, a sentence saying so
    ('' for a tensor where the figure means what it says)."""
    if bits_per_element is None or n <= 0:
        return ""
    bits = qcore.get_format(target).bits
    overhead = (bits_per_element - bits) * n
    if n >= 256 or bits_per_element < 1.1 * bits:
        return ""
    return (f"Bits / element here is mostly overhead: the {overhead:.0f} bits of scale and "
            f"zero point are shared by only {n:,} element(s). Each code is {bits} bits; on a "
            f"tensor of thousands of elements the figure approaches that.")
