"""The app's words: one definition per term (the Glossary page lists them, every page links
to them), and the *why* behind each rule, written once and shown where the rule is met.

Pure data and string helpers (no Streamlit calls), so texts and tests share them.
"""

from __future__ import annotations

import re

#: slug → (term, definition). Slugs are the Glossary page's anchors.
TERMS: dict[str, tuple[str, str]] = {
    "scale": ("scale", "The step between neighbouring codes: x ≈ (y − zero point) × scale. A "
              "large scale covers a wide range coarsely, a small one a narrow range finely."),
    "zero-point": ("zero point", "The code that stands for the real value 0, so that 0 is "
                   "represented exactly (padding, ReLU zeros). Signed symmetric schemes use 0."),
    "code": ("code", "One stored value of the target type (an int8 code is one of −128…127); "
             "y in QuantizeLinear's output."),
    "half-to-even": ("round half to even", "A value exactly halfway between two integers "
                     "goes to the even one: 0.5 → 0, 1.5 → 2, 2.5 → 2. Also called banker's "
                     "rounding; ONNX uses it everywhere."),
    "saturate": ("saturate", "Clip a value that does not fit to the largest (or smallest) "
                 "code instead of wrapping around or overflowing. For float8 the `saturate` "
                 "attribute chooses ±max (1) or NaN/Inf (0)."),
    "granularity": ("granularity", "How many elements share one scale: the whole tensor "
                    "(per-tensor), one slice along an axis (per-axis) or a block of "
                    "consecutive elements (blocked)."),
    "per-axis": ("per-axis", "One scale (and zero point) per index of one axis: for a weight "
                 "of shape (out, in), axis 0 gives each output channel its own scale."),
    "output-channel": ("output channel", "One row of a (out, in) weight matrix — axis 0 — "
                       "the weights that produce one output feature. Per-channel quantization "
                       "of weights means per-axis along this axis."),
    "block": ("block", "A run of consecutive elements along one axis that share a scale "
              "(blocked quantization, QuantizeLinear-21+); MX uses blocks of 32."),
    "mx": ("MX (microscaling)", "The OCP Microscaling formats: blocks of 32 elements share one "
           "power-of-two scale stored as float8e8m0. MXFP4 = float4e2m1 elements, MXFP8 = "
           "float8 elements."),
    "ocp": ("OCP", "The Open Compute Project, an industry group whose specifications define "
            "the float8 formats (e4m3, e5m2) and the MX formats."),
    "e8m0": ("float8e8m0", "A scale-only format: 8 exponent bits, no sign, no mantissa — every "
             "value is a power of two 2^(e−127); 0xFF is NaN."),
    "binade": ("binade", "The values of a float format between two consecutive powers of two "
               "[2^k, 2^(k+1)); all codes in one binade are evenly spaced."),
    "mantissa": ("mantissa", "The fraction bits of a float: where a value lies inside its "
                 "binade. More mantissa bits = finer steps (precision)."),
    "exponent": ("exponent", "The bits of a float that pick the power of two. More exponent "
                 "bits = more binades (range)."),
    "subnormal": ("subnormal", "Float values below the smallest normal one, evenly spaced down "
                  "to 0; they fill the gap around zero."),
    "fnuz": ("fnuz", "Suffix of float8 formats with no negative zero and no infinities: fn = "
             "finite (no Inf), uz = unsigned zero; the code for −0 is the only NaN."),
    "e4m3-e5m2": ("e4m3 / e5m2", "The two OCP float8 formats: 4 exponent + 3 mantissa bits "
                  "(more precision, max 448) or 5 + 2 (more range, max 57344)."),
    "sqnr": ("SQNR", "Signal-to-quantization-noise ratio, 10·log10(Σx² / Σ(x̂ − x)²) in dB: "
             "how far the error lies below the signal. About 6 dB per bit for integers."),
    "pareto": ("Pareto front", "The choices that no other choice beats on both counts: here "
               "no other format costs at most as many bits per element and has a higher "
               "SQNR."),
    "bits-per-element": ("bits per element", "The target type's bits plus the storage of the "
                         "scales and zero points, spread over the elements they serve."),
    "calibration": ("calibration", "Choosing the scale and zero point from data (min–max, "
                    "abs-max, percentile, MSE search, MX). Not part of ONNX."),
    "clipping": ("clipping", "Saturation of values outside the range the codes cover; a "
                 "narrower range clips more but rounds more finely."),
    "kurtosis": ("excess kurtosis", "How heavy a distribution's tails are compared with a "
                 "normal (which has 0). Large values mean rare, large outliers — hard for one "
                 "integer scale."),
    "opset": ("opset vs version", "A model declares an opset number; each operator then runs "
              "its newest version not newer than that opset (opset 22 → QuantizeLinear-21). "
              "Operator versions are the opsets where the operator changed."),
    "dynamic": ("dynamic quantization", "Scale and zero point computed from the tensor at run "
                "time (DynamicQuantizeLinear, uint8), not chosen ahead of time."),
}

#: The reason behind each rule, one or two sentences, shown beside the rule.
WHY: dict[str, str] = {
    "half_even": "Rounding ties always up would push the average error upward by half a step "
                 "on every tie; half to even sends half the ties down and half up, so the "
                 "errors cancel on average.",
    "zero_exact": "A zero point makes 0 a code, so zeros (padding, ReLU, pruned weights) come "
                  "back exactly 0.",
    "saturate": "A value too large for the codes is clipped to the largest one (127.5 with "
                "scale 1 rounds to 128, one past int8's 127, and saturates to 127): a bounded "
                "error instead of a wrap-around to −128.",
    "per_axis": "Per-axis gives each output channel its own step: one large row no longer "
                "forces a coarse step on every other row.",
    "power_of_two": "A power-of-two scale is an exponent shift — no rounding error of its own, "
                    "and cheap in hardware — and its 8 exponent bits cover 2^-127…2^127, a "
                    "huge range in one byte.",
    "e4m3": "e4m3 trades range for precision against e5m2: one more mantissa bit halves the "
            "step inside each binade, one fewer exponent bit shrinks the largest value from "
            "57344 to 448 — so e4m3 suits weights and activations, e5m2 gradients.",
    "blocks": "Smaller blocks follow the data more closely (less error) but store more scales "
              "(more bits per element); 32 is the OCP MX choice.",
    "dynamic_range": "Widening the range to include 0 costs a little resolution but keeps 0 "
                     "exact.",
}

WHY_TITLES: dict[str, str] = {
    "half_even": "Round half to even", "zero_exact": "A zero point", "saturate": "Saturation",
    "per_axis": "Per-axis scales", "power_of_two": "Power-of-two (MX) scales",
    "e4m3": "e4m3 against e5m2", "blocks": "Block size", "dynamic_range": "Range widened to 0",
}

_LINK = "/glossary#{slug}"


def link(slug: str, text: str | None = None) -> str:
    """A Markdown link to a term on the Glossary page."""
    term, _ = TERMS[slug]
    return f"[{text or term}]({_LINK.format(slug=slug)})"


def tip(slug: str) -> str:
    """A term's definition, for a widget's hover help."""
    term, definition = TERMS[slug]
    return f"**{term}**: {definition}"


def _pattern(term: str) -> re.Pattern[str]:
    return re.compile(r"(?<![\w/#-])" + re.escape(term) + r"(?![\w-])", re.IGNORECASE)


def found_in(text: str) -> list[str]:
    """Slugs of the glossary terms that a text uses (by the term's words), in glossary order."""
    words = {"mx": "MX", "e8m0": "e8m0", "e4m3-e5m2": "e4m3", "kurtosis": "kurtosis",
             "opset": "opset", "half-to-even": "half to even", "pareto": "Pareto",
             "bits-per-element": "bits per element", "zero-point": "zero point",
             "dynamic": "DynamicQuantizeLinear", "output-channel": "output channel",
             "saturate": "saturat"}
    out = []
    for slug, (term, _) in TERMS.items():
        word = words.get(slug, term)
        if slug == "saturate":
            if re.search(r"saturat", text, re.IGNORECASE):
                out.append(slug)
        elif _pattern(word).search(text):
            out.append(slug)
    return out


def terms_line(text: str) -> str:
    """'Terms: [binade](…) · [SQNR](…)' for the glossary terms a text uses ('' when none)."""
    slugs = found_in(text)
    if not slugs:
        return ""
    return "Words used here: " + " · ".join(link(s) for s in slugs)
