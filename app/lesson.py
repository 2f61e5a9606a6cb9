"""The guided path: eleven steps from scale and zero point to a deployed model.

Each :class:`Step` asks before it tells. Shown before the prediction: the idea (what the
learner needs to work the question, never its answer), the formula unless it states the rule
(``formula_after``), and the question, whose answer qcore computes when asked (never a stored
number). Shown only after it: the rule the question tests, the reason behind it, and the
"Try this": the page and settings (URL names, described in words by
:func:`describe_settings`) that show the step on a real tensor. The reference pages the step
leans on are linked throughout. Pure data and qcore calls; ``pages/learn.py`` draws it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import qcore
from qcore import calibration, datasets, metrics, packing, synthetic

from . import glossary, presets


@dataclass(frozen=True)
class Answer:
    """The correct option (its index) and the explanation, with qcore's numbers in it."""

    correct: int
    explanation: str


@dataclass(frozen=True)
class Step:
    title: str
    idea: str  # three sentences
    formula: str  # LaTeX
    why: str
    question: str
    options: tuple[str, ...]
    answer: Callable[[], Answer]
    try_page: str  # script of the page "Try this" opens
    try_settings: dict[str, Any] = field(default_factory=dict)
    try_text: str = ""  # what to look at there
    terms: tuple[str, ...] = ()  # glossary slugs
    preset: str = ""  # the Lab preset (app.presets.LAB) whose settings and note it uses
    refs: tuple[str, ...] = ()  # scripts of the reference pages the step leans on
    rule: str = ""  # the rule the question tests: shown only after the prediction
    formula_after: bool = False  # the formula states the rule: shown after the prediction


#: Setting URL names in words (the "Try this" card says what it sets).
SETTING_WORDS: dict[str, str] = {
    "h_x": "values", "h_target": "target type", "h_scale": "scale", "h_zp": "zero point",
    "lo_x": "your own numbers", "lo_s": "scale", "lo_zp": "zero point",
    "d_x": "your own numbers", "src": "tensor", "dist": "distribution", "ds": "real tensor",
    "seed": "seed", "xtype": "input type", "target": "target type", "method": "calibration",
    "gran": "granularity", "axis": "axis", "block": "block size", "opset": "opset",
    "stype": "scale type", "c_gran": "granularity", "c_method": "calibration",
    "c_formats": "formats", "c_axis": "axis", "mr_source": "model", "mr_recipes": "recipes",
}
_SOURCE_WORDS = {"synthetic": "synthetic", "dataset": "a real tensor", "upload": "an upload",
                 "datasets": "the shipped MiniLM tensors"}


def describe_settings(settings: dict[str, Any]) -> str:
    """The settings a "Try this" sets, in words: 'target type int8, scale 1, …' (a shape
    from rows and cols; a list joined with commas)."""
    parts: list[str] = []
    if "rows" in settings and "cols" in settings:
        parts.append(f"shape {settings['rows']} × {settings['cols']}")
    for name, value in settings.items():
        if name in ("rows", "cols"):
            continue
        if isinstance(value, (list, tuple)):
            shown = ", ".join(str(v) for v in value)
        elif name in ("src", "mr_source"):
            shown = _SOURCE_WORDS.get(str(value), str(value))
        elif name in ("xtype", "stype") and value == "float":
            shown = "float32"
        elif isinstance(value, float) and value.is_integer():
            shown = f"{value:g}"
        else:
            shown = str(value).replace("_", " ")
        parts.append(f"{SETTING_WORDS.get(name, name.replace('_', ' '))} {shown}")
    return "; ".join(parts)


def _q(x: float, scale: float, zero_point: Any = None, target: str | None = None,
       **kw: Any) -> np.ndarray:
    """QuantizeLinear of one value (a zero point's type names the target)."""
    xs = np.array([x], np.float32)
    if zero_point is None:
        return qcore.quantize_linear(xs, np.float32(scale), output_dtype=target, **kw)
    return qcore.quantize_linear(xs, np.float32(scale), zero_point, **kw)


def _code(x: float, scale: float, zero_point: Any) -> int:
    """The integer code QuantizeLinear gives one value (the zero point's type names the
    target)."""
    return int(_q(x, scale, zero_point)[0])


def _answer(options: tuple[str, ...], value: str, explanation: str) -> Answer:
    """The answer whose correct option is qcore's ``value`` (the options are meant to hold the
    true answer: one that does not is an error, not a silently wrong lesson)."""
    if value not in options:
        raise qcore.QuantizationError(f"the lesson's options {options} lack qcore's {value!r}")
    return Answer(options.index(value), explanation)


def _higher_or_tie(first: float, second: float, within: float) -> int:
    """The answer to "which of two recipes gives the higher SQNR, or about the same?": 0 or 1
    for the higher, 2 when they differ by less than ``within`` dB."""
    return 2 if abs(first - second) < within else (0 if first > second else 1)


# --------------------------------------------------------------------------- 1 scale, zero point

_S1 = ("4", "14", "10")


def _a1() -> Answer:
    y = _code(1.0, 0.25, np.uint8(10))
    back = float(qcore.dequantize_linear(np.array([y], np.uint8), np.float32(0.25),
                                         np.uint8(10))[0])
    return _answer(_S1, str(y),
                   f"1.0 / 0.25 = 4 steps above zero, and zero sits at code 10, so y = 4 + 10 = "
                   f"**{y}**. Back: ({y} − 10) × 0.25 = **{back:g}**.")


# --------------------------------------------------------------------------- 2 rounding

_S2 = ("1", "2", "3")


def _a2() -> Answer:
    y = _code(2.5, 1.0, np.int8(0))
    y35 = _code(3.5, 1.0, np.int8(0))
    return _answer(_S2, str(y),
                   f"2.5 lies exactly halfway between 2 and 3; ONNX rounds half to **even**, so "
                   f"y = **{y}** (and 3.5 → {y35}), not 3: ties do not all go up.")


# --------------------------------------------------------------------------- 3 saturation

_S3 = ("127", "128", "−128")


def _a3() -> Answer:
    y = _code(127.5, 1.0, np.int8(0))
    big = _code(1e10, 1.0, np.int8(0))
    text = str(y).replace("-", "−")
    return _answer(_S3, text,
                   f"127.5 rounds (half to even) to 128, one past int8's largest code, and "
                   f"saturates to **{y}**; even 1e10 gives {big}. Saturating bounds the "
                   f"error; wrapping around would have turned 128 into −128.")


# --------------------------------------------------------------------------- 4 granularity

_W = np.array([[0.02, -0.05, 0.1], [12.7, -6.0, 3.0]], np.float32)  # (out=2, in=3)
_S4 = ("0.02", "0", "0.1")


def _roundtrip(w: np.ndarray, target: str, granularity: str, axis: int = 0,
               method: str = "absmax", block_size: int = 32) -> tuple[np.ndarray, Any]:
    p = calibration.choose_params(w, target, method=method, granularity=granularity,
                                  axis=axis, block_size=block_size)
    return p.dequantize(p.quantize(w)), p


def _a4() -> Answer:
    tensor_hat, pt = _roundtrip(_W, "int8", qcore.PER_TENSOR)
    axis_hat, pa = _roundtrip(_W, "int8", qcore.PER_AXIS, axis=0)
    got = float(tensor_hat[0, 0])
    shown = f"{got:g}" if got != 0 else "0"
    return _answer(_S4, shown,
                   f"One scale for the whole weight is max|W| / 127 = **{float(pt.scale):.4g}**, "
                   f"so 0.02 / {float(pt.scale):.4g} = {0.02 / float(pt.scale):.2f} rounds to "
                   f"code 0 and comes back as **{shown}** — row 0 is wiped out. Per-axis along "
                   f"axis 0 (the output channel) gives row 0 its own scale "
                   f"{float(np.asarray(pa.scale)[0]):.4g}, and 0.02 comes back as "
                   f"{float(axis_hat[0, 0]):.4g}.")


# --------------------------------------------------------------------------- 5 float8 / MX

_S5 = ("300", "288", "320")


def _a5() -> Answer:
    e4 = float(_q(300.0, 1.0, target="float8e4m3fn")[0].astype(np.float32))
    e5 = float(_q(300.0, 1.0, target="float8e5m2")[0].astype(np.float32))
    return _answer(_S5, f"{e4:g}",
                   f"Between 256 and 512 (one binade) e4m3's 3 mantissa bits give 8 values, 32 "
                   f"apart: 256, 288, 320… 300 is nearer 288, so x̂ = **{e4:g}**. e5m2 has 2 "
                   f"mantissa bits (steps of 64) and gives {e5:g}.")


# --------------------------------------------------------------------------- 6 dynamic

_S6 = ("0", "64", "128")


def _a6() -> Answer:
    y, s, zp = qcore.dynamic_quantize_linear(np.array([-1.0, 0.0, 3.0], np.float32))
    return _answer(_S6, str(int(zp)),
                   f"The range [−1, 3] already contains 0; scale = 4 / 255 = {float(s):.6g}, and "
                   f"zero sits at 1 / scale = {1 / float(s):.2f} steps above −1, which rounds to "
                   f"the zero point **{int(zp)}**; y = {', '.join(str(int(v)) for v in y)}.")



# --------------------------------------------------------------------------- 6 storage

STORAGE_CODES = (1, -2, 3, 7, -8)
_S_STORE = ("5 bytes, first 0x01", "3 bytes, first 0x1E", "3 bytes, first 0xE1")


def _a_storage() -> Answer:
    codes = np.array(STORAGE_CODES, qcore.get_format("int4").dtype)
    packed = packing.pack(codes)
    shown = f"{packed.size} bytes, first 0x{int(packed[0]):02X}"
    nibbles = " ".join(f"{int(b):08b}" for b in packed)
    return _answer(_S_STORE, shown,
                   f"ONNX stores two 4-bit codes per byte: {len(STORAGE_CODES)} codes take "
                   f"⌈{len(STORAGE_CODES)} / 2⌉ = **{packed.size} bytes**, the last high nibble "
                   f"padded with 0. The first code goes in the **low** nibble: 1 = 0001 there, "
                   f"−2 = 1110 (two's complement) above it, so the first byte is "
                   f"**0x{int(packed[0]):02X}**. The bytes: {nibbles} "
                   f"(qcore.packing.pack). In memory qcore keeps one code per byte; packed, the "
                   f"file and what a kernel reads are half as large.")


# --------------------------------------------------------------------------- 7 same bits

SAME_BITS_TENSOR = "layer0.ffn.in.weight"
_S_BITS = ("int4 blocked 32, float32 scales", "MXFP4", "about the same (within 0.5 dB)")


def same_bits_table() -> list[tuple[str, float, float]]:
    """(recipe, SQNR dB, bits per element) of int4 blocked-32 abs-max with float32 scales,
    MXFP4 and float8e4m3fn per-tensor on a real MiniLM weight."""
    w = datasets.load(SAME_BITS_TENSOR)
    rows = []
    for label, target, gran, method in (
            ("int4 blocked 32, float32 scales", "int4", qcore.BLOCKED, "absmax"),
            ("MXFP4", "float4e2m1", qcore.BLOCKED, "mx"),
            ("float8e4m3fn per-tensor", "float8e4m3fn", qcore.PER_TENSOR, "absmax")):
        w_hat, p = _roundtrip(w, target, gran, axis=1, method=method)
        m = metrics.error_metrics(w, w_hat, params=p, target=target)
        rows.append((label, float(m["sqnr_db"]), float(m["bits_per_element"])))
    return rows


def full_range_int4() -> float:
    """SQNR (dB) of the recipe ``int4:blocked32`` as Format Compare and the model pages run it:
    full-range codes (the block's largest magnitude → −8, :mod:`qcore.fullrange`)."""
    from qcore import analysis

    df = analysis.compare_recipes(datasets.load(SAME_BITS_TENSOR), ["int4:blocked32"])
    return float(df["sqnr_db"].iloc[0])


def _a_same_bits() -> Answer:
    (a, sa, ba), (b, sb, bb), (c, sc, bc) = same_bits_table()
    full = full_range_int4()
    return Answer(_higher_or_tie(sa, sb, 0.5),
                  f"On MiniLM's `{SAME_BITS_TENSOR}` (1536 × 384): {a} (abs-max: the block's "
                  f"largest |x| → code 7, so −8 goes unused) **{sa:.2f} dB** at "
                  f"**{ba:.3g} bits** per element (4 + 32 / 32 for the scales); {b} "
                  f"**{sb:.2f} dB** at **{bb:.3g} bits** (4 + 8 / 32: a power-of-two scale, "
                  f"the block's largest value lands anywhere in its binade, so the codes' top "
                  f"is partly unused); {c} {sc:.2f} dB at {bc:.3g} bits. A bit more per element "
                  f"buys about 6 dB: compare SQNR per bit, not SQNR alone. The recipe `int4:blocked32` "
                  f"of Format Compare and the model pages is **full range** (the largest "
                  f"magnitude → code −8, all 16 codes used, as onnxruntime's MatMulNBits "
                  f"quantizer does): {full:.2f} dB at the same bits, {full - sa:+.2f} dB.")


# --------------------------------------------------------------------------- 10 tensor to model

MODEL_TENSORS = ("layer0.attn.query.weight", "layer0.ffn.out.weight", "layer5.ffn.residual")


def model_tensor_table() -> list[tuple[str, float, float]]:
    """(tensor, int8 per-tensor abs-max SQNR in dB, abs-max / std) of three MiniLM tensors."""
    rows = []
    for name in MODEL_TENSORS:
        x = datasets.load(name)
        x_hat, _ = _roundtrip(x, "int8", qcore.PER_TENSOR)
        m = metrics.error_metrics(x, x_hat)
        crest = float(np.abs(x).max() / x.std())
        rows.append((name, float(m["sqnr_db"]), crest))
    return rows


def _a_model() -> Answer:
    rows = model_tensor_table()
    worst = min(rows, key=lambda r: r[1])
    listing = "; ".join(f"`{n}` {sq:.1f} dB (largest / std = {c:.0f})" for n, sq, c in rows)
    return Answer(MODEL_TENSORS.index(worst[0]),
                  f"int8 per-tensor abs-max: {listing}. The lowest is **{worst[0]}**: its "
                  f"largest value is {worst[2]:.0f} standard deviations out, and one scale "
                  f"sized for it leaves the bulk of the values few codes. Such a tensor needs "
                  f"more bits or finer granularity. What that noise does to the model's output "
                  f"is another question: Model Fidelity measures each tensor's sensitivity "
                  f"(the model's output with only that tensor quantized) and picks the mix of "
                  f"formats a bits budget allows.")

# --------------------------------------------------------------------------- 7 choosing

_S7 = ("int8", "float8e4m3fn", "about the same (within 1 dB)")
CHOICE_SHAPE = (256, 256)


def sqnr(distribution: str, target: str, granularity: str, axis: int = 0,
         method: str = "absmax") -> float:
    """SQNR (dB) of one recipe on the lesson's synthetic tensor (seed 0)."""
    x = synthetic.generate(distribution, CHOICE_SHAPE, seed=0)
    x_hat, _ = _roundtrip(x, target, granularity, axis=axis, method=method)
    return float(metrics.error_metrics(x, x_hat)["sqnr_db"])


def _a7() -> Answer:
    i8 = sqnr("outlier_channel", "int8", qcore.PER_TENSOR)
    f8 = sqnr("outlier_channel", "float8e4m3fn", qcore.PER_TENSOR)
    i8_axis = sqnr("outlier_channel", "int8", qcore.PER_AXIS, axis=0)
    return Answer(_higher_or_tie(i8, f8, 1),
                  f"Per-tensor on a 256×256 weight with one outlier row: int8 **{i8:.1f} dB**, "
                  f"float8e4m3fn **{f8:.1f} dB**. int8's even steps are sized for the big row, "
                  f"so the small rows get only a few codes; float8 keeps its relative precision "
                  f"at every magnitude. Give int8 per-axis scales along axis 0 and it reaches "
                  f"{i8_axis:.1f} dB — the format and the granularity are chosen together. "
                  "Measure, don't guess: Format Compare puts every format on one chart.")


# --------------------------------------------------------------------------- 11 deployed

_S_DEPLOY = ("4-bit faster at 1 row, not at 64 rows", "4-bit faster at both",
             "4-bit faster at 64 rows only", "float faster at both")


def _a_deploy() -> Answer:
    from qcore import deploy_costs

    with np.errstate(all="ignore"):
        d = deploy_costs.dynamic_cost()
        f = deploy_costs.four_bit_cost()
    small, large = f["nbits1"] < f["float1"], f["nbits64"] < f["float64"]
    pick = {(True, False): 0, (True, True): 1, (False, True): 2, (False, False): 3}
    return Answer(pick[(small, large)],
                  f"Timed now in onnxruntime, one thread (medians of short repeats on a shared "
                  f"machine: a difference of a few % is noise). A 1024 × 1024 weight at 1 row: "
                  f"MatMulNBits **{f['nbits1']:.0f} µs**, float MatMul **{f['float1']:.0f} µs** "
                  f"({f['nbits1'] / f['float1']:.2f}×); at 64 rows: **{f['nbits64']:.0f} µs** "
                  f"against **{f['float64']:.0f} µs** ({f['nbits64'] / f['float64']:.2f}×). "
                  f"One row reads the whole weight for little arithmetic, so the kernel waits on "
                  f"memory and reading an eighth of the bytes pays; many rows reuse each weight, "
                  f"the arithmetic dominates and unpacking the codes costs its share. The naive "
                  f"QDQ form (DequantizeLinear of an int8 weight, then the float MatMul) at 1 "
                  f"row: {f['qdq']:.0f} µs beside float's {f['float1']:.0f} µs — its codes become "
                  f"float before the MatMul, so at best it runs as fast as float (a smaller "
                  f"file, not a faster run). "
                  f"Dynamic activations pay DynamicQuantizeLinear on every run: **{d['dql']:.0f} "
                  f"µs** on a 64 × 384 activation, {100 * d['share']:.0f} % of the pair with the "
                  f"MatMulInteger it feeds ({d['matmulinteger']:.0f} µs; float MatMul "
                  f"{d['matmul']:.0f} µs).")


NUMBER_FORMATS = "pages/number_formats.py"
OPERATOR_VERSIONS = "pages/operator_versions.py"
GLOSSARY = "pages/glossary.py"
FORMAT_COMPARE = "pages/format_compare.py"
MODEL_REPORT = "pages/model_report.py"
MODEL_FIDELITY = "pages/model_fidelity.py"

STEPS: tuple[Step, ...] = (
    Step("Scale and zero point",
         "Quantization stores each number as a small integer code plus one shared scale. The "
         "scale is the size of one step: the value x becomes about x / scale steps. The zero "
         "point is the code that stands for 0, so a range that is not centred on 0 can still "
         "use every code.",
         r"\begin{aligned}y &= \operatorname{round}(x / \text{scale}) + \text{zero\_point}"
         r" \\ \hat{x} &= (y - \text{zero\_point}) \times \text{scale}\end{aligned}",
         glossary.WHY["zero_exact"],
         "x = 1.0, scale 0.25, zero point 10, uint8 → y = ?", _S1, _a1,
         "pages/home.py",
         dict(h_x="1, -0.5, 0.3, 2.5", h_target="uint8", h_scale=0.25, h_zp=10),
         "Home's live example with your numbers: change the scale and the zero point and "
         "watch each x snap to a code.",
         ("scale", "zero-point", "code"), refs=("pages/home.py", GLOSSARY)),
    Step("Rounding",
         "x / scale is rarely a whole number, so it is rounded to the nearest code. The error "
         "of one element is at most half a step, scale / 2. Now and then x / scale lands "
         "exactly halfway between two codes: a tie, and some rule must pick one of them.",
         r"y = \operatorname{round}(x / \text{scale}),\quad "
         r"|\hat{x} - x| \le \text{scale} / 2",
         glossary.WHY["half_even"],
         "x = 2.5, scale 1, int8 → y = ?", _S2, _a2,
         "pages/quantize_lab.py",
         dict(target="int8", lo_x="0.5, 1.5, 2.5, 3.5, -2.5, 2.4, 2.6", lo_s=1.0, lo_zp=0),
         "The Lab's \"Step by step on your own numbers\" table: the rounded column shows every "
         "tie going to the even code.",
         ("half-to-even",), refs=(OPERATOR_VERSIONS, GLOSSARY),
         rule="A tie goes to the **even** neighbour (round half to even): 0.5 → 0, 1.5 → 2, "
              "2.5 → 2, 3.5 → 4."),
    Step("Saturation",
         "The target type has a smallest and a largest code: int8 holds −128 … 127. A value "
         "far enough out rounds to a code the type does not have. What the operator does "
         "then decides how large the error of such a value can get.",
         r"y = \min\big(\max(\operatorname{round}(x / s) + z,\ q_{\min}),\ q_{\max}\big)",
         glossary.WHY["saturate"],
         "x = 127.5, scale 1, zero point 0, int8 → y = ?", _S3, _a3,
         "pages/quantize_lab.py",
         dict(target="int8", lo_x="126.4, 127.5, 128, 300, -128.5, -129, 1e10", lo_s=1.0,
              lo_zp=0),
         "The own-numbers table: \"rounded\" passes 127, \"saturated = y\" stops there.",
         ("saturate", "clipping"), refs=(NUMBER_FORMATS, OPERATOR_VERSIONS, GLOSSARY),
         rule="A rounded code outside the type's codes is clipped to the nearest end: it "
              "**saturates**. Choosing the scale is a trade: a large one never clips but rounds "
              "coarsely, a small one rounds finely but clips the outliers.",
         formula_after=True),
    Step("Granularity: per-axis and blocked",
         "A tensor can share one scale (per-tensor), and with abs-max calibration that scale is "
         "sized so its largest value lands on the largest code. Per-axis quantization gives "
         "each slice along one axis its own scale — for a weight of shape (out, in), axis 0 is "
         "the output channel. Blocked quantization goes further: every run of, say, 32 "
         "elements gets its own scale.",
         r"s_c = \max_j |W_{c,j}| / 127 \quad\text{(one scale per output channel } c)",
         glossary.WHY["per_axis"] + " " + glossary.WHY["blocks"],
         "W = [[0.02, −0.05, 0.1], [12.7, −6, 3]] (2 output channels), per-tensor int8 with "
         "scale max|W| / 127: what does the 0.02 come back as?", _S4, _a4,
         "pages/quantize_lab.py",
         presets.LAB["outlier_channel"].settings,
         "The Lab on a 256×256 weight with one outlier output channel, per-axis along axis 0. "
         "Switch Granularity to per-tensor and watch the SQNR drop.",
         ("granularity", "per-axis", "output-channel", "block"), "outlier_channel",
         refs=(OPERATOR_VERSIONS, GLOSSARY),
         rule="One scale for a whole tensor must cover its largest value, so every other value "
              "shares that coarse step, and small values round to 0. A scale per output "
              "channel sizes each row's step to that row.",
         formula_after=True),
    Step("float8, float6, float4 and MX",
         "Float formats spend some bits on an exponent, so their codes are dense near zero and "
         "sparse far away: the relative error stays about the same at every magnitude. float8 "
         "comes as e4m3 (precision) and e5m2 (range); float6 and float4 go further with fewer "
         "bits. MX pairs such tiny formats with a power-of-two scale per block of 32 elements.",
         r"\begin{aligned}\text{MXFP4: } \hat{x} &= 2^{e - 127} \times v,\quad "
         r"v \in \text{float4e2m1} \\ e &\in \text{float8e8m0, one per 32 elements}"
         r"\end{aligned}",
         glossary.WHY["e4m3"] + " " + glossary.WHY["power_of_two"],
         "x = 300, scale 1, float8e4m3fn → x̂ = ?", _S5, _a5,
         "pages/quantize_lab.py",
         presets.LAB["mxfp4"].settings,
         "The Lab set to MXFP4: float4e2m1 elements, float8e8m0 scales, blocks of 32.",
         ("e4m3-e5m2", "binade", "mx", "e8m0", "ocp"), "mxfp4",
         refs=(NUMBER_FORMATS, OPERATOR_VERSIONS, GLOSSARY)),
    Step("Storage: packing sub-byte codes",
         "A 4-bit code needs only half a byte (a nibble), and a negative int4 code is stored in "
         "two's complement: −2 is 1110. In memory qcore keeps one code per byte; a file and "
         "the kernel that reads it want the codes packed. Which codes share a byte, and which "
         "nibble holds the first one, is fixed by ONNX.",
         r"\begin{aligned}\text{byte}_k &= (y_{2k} \mathbin{\&} 15) + 16 \times "
         r"(y_{2k+1} \mathbin{\&} 15) \\ \text{bytes} &= \lceil n / 2 \rceil\end{aligned}",
         "Low nibble first is how a little-endian machine stores a number's low part first: "
         "element 2k sits where a byte-wise read finds it with one mask, and an odd count "
         "pads only the last byte's high nibble. Packing halves the file and the memory "
         "traffic, which is the point of 4 bits.",
         "Five int4 codes [1, −2, 3, 7, −8], packed as ONNX stores them: how many bytes, and "
         "what is the first byte?", _S_STORE, _a_storage,
         "pages/quantize_lab.py",
         dict(target="int4", gran=qcore.BLOCKED, block=32, axis=1, method="absmax"),
         "The Lab with int4 codes: the downloads include the packed bytes (two codes a byte); "
         "Number Formats shows each int4 code's 4 bits.",
         ("code", "bits-per-element"), refs=(NUMBER_FORMATS, OPERATOR_VERSIONS, GLOSSARY),
         rule="ONNX packs two 4-bit codes in each byte (and four 2-bit codes), so n codes take "
              "⌈n / 2⌉ bytes. The first element goes in the **low** nibble, bits 0 to 3, the "
              "next in the high nibble; an odd count pads the last high nibble with 0.",
         formula_after=True),
    Step("Formats at the same bits",
         "At about 4 bits per element there are several recipes: int4 codes with a float32 "
         "scale per block of 32, MXFP4's float4 codes with a power-of-two scale per block, "
         "or int4/float4 per axis. Each scale costs bits too: 32 bits shared by 32 elements "
         "is one bit each, an 8-bit MX scale a quarter bit. So compare SQNR and bits per "
         "element together, on the same tensor.",
         r"\begin{aligned}\text{bits per element} &= b_{\text{code}} + "
         r"\frac{b_{\text{scale}}}{\text{block}} \\ \text{SQNR gain} &\approx 6.02\ "
         r"\text{dB per bit}\end{aligned}",
         glossary.WHY["power_of_two"] + " " + glossary.WHY["blocks"],
         "On a real MiniLM weight, int4 blocked 32 with float32 abs-max scales against MXFP4: "
         "which gives the higher SQNR?", _S_BITS, _a_same_bits,
         "pages/quantize_lab.py",
         dict(src="dataset", ds=SAME_BITS_TENSOR, target="int4", method="absmax",
              gran=qcore.BLOCKED, block=32, axis=1, stype="float"),
         "The Lab on that weight with int4 blocked 32; press the MXFP4 preset to see the other "
         "recipe, and compare SQNR and bits per element.",
         ("bits-per-element", "mx", "e8m0", "block", "sqnr"),
         refs=(NUMBER_FORMATS, FORMAT_COMPARE, GLOSSARY)),
    Step("DynamicQuantizeLinear",
         "Sometimes the scale cannot be chosen ahead of time: activations change with every "
         "input. DynamicQuantizeLinear computes it from the tensor at run time, always to "
         "uint8. It widens the range to include 0, spreads it over the 256 codes and rounds "
         "the position of 0 to the zero point.",
         r"\begin{aligned}s &= \frac{\max(0, \max x) - \min(0, \min x)}{255} \\ "
         r"z &= \operatorname{round}\Big(\operatorname{clip}\big(-\tfrac{\min(0, \min x)}{s},"
         r" 0, 255\big)\Big)\end{aligned}",
         glossary.WHY["dynamic_range"],
         "x = [−1, 0, 3]: which zero point does DynamicQuantizeLinear choose?", _S6, _a6,
         "pages/dynamic_quantization.py",
         dict(d_x="-1, 0, 3, 0.5, 2"),
         "The Dynamic page's \"Your own numbers\": the scale, the zero point and y for every "
         "element.",
         ("dynamic", "zero-point"), refs=(OPERATOR_VERSIONS, GLOSSARY)),
    Step("Choosing a format for a model",
         "No format wins everywhere: the answer depends on the tensor's shape of distribution "
         "and on the granularity. An integer format spaces its codes evenly; a float format "
         "spaces them by powers of two. Compare SQNR against bits per element and keep the "
         "choices on the Pareto front.",
         r"\text{SQNR} = 10 \log_{10} \frac{\sum x^2}{\sum (\hat{x} - x)^2}\ \text{dB}",
         "About 6 dB of SQNR per bit for integers: a format that needs one more bit per element "
         "must buy its keep in dB.",
         "A 256×256 weight with one outlier output channel, per-tensor abs-max: which gives the "
         "higher SQNR?", _S7, _a7,
         "pages/format_compare.py",
         dict(src="synthetic", dist="outlier_channel", rows=256, cols=256, seed=0,
              xtype="float", c_gran=qcore.PER_TENSOR, c_method="absmax",
              c_formats=[t for t in qcore.QUANTIZED_TYPES if t in
                         ("int8", "float8e4m3fn", "float8e5m2", "int4", "float4e2m1")]),
         "Format Compare on that weight: SQNR against bits per element, the Pareto front "
         "marked. Try per-axis along axis 0 too.",
         ("sqnr", "pareto", "bits-per-element"), refs=(MODEL_REPORT, NUMBER_FORMATS, GLOSSARY),
         rule="Integers suit well-behaved, evenly spread values; floats suit heavy tails and "
              "outliers, because their steps grow with the magnitude."),
    Step("From tensor to model",
         "A model is hundreds of tensors, and they do not all need the same bits. A tensor "
         "the output barely depends on can lose much and cost nothing. The tensor's SQNR says "
         "what quantization does to it; the model's output says what that costs.",
         r"\text{bits needed} \approx \log_2 \frac{\max |x|}{\sigma} + "
         r"\frac{\text{SQNR wanted}}{6.02\ \text{dB}}",
         "The Model Report ranks every tensor of a checkpoint by its SQNR under each recipe; "
         "Model Fidelity runs the model with one tensor quantized at a time (its sensitivity) "
         "and chooses the mix of formats a bits budget allows.",
         "Three MiniLM tensors, int8 per-tensor abs-max: which comes back with the lowest "
         "SQNR?", MODEL_TENSORS, _a_model,
         MODEL_REPORT,
         dict(mr_source="datasets", mr_recipes=["int8:per-axis", "int8:per-tensor"]),
         "The Model Report on MiniLM's shipped tensors: the SQNR of every tensor under int8 "
         "per-tensor and per-axis, the worst first. Then open Model Fidelity for what each "
         "tensor does to the sentence embeddings.",
         ("sqnr", "granularity", "bits-per-element"),
         refs=(MODEL_REPORT, MODEL_FIDELITY, GLOSSARY),
         rule="A tensor whose largest values sit far from the bulk (a large max|x| / σ) loses "
              "most to one scale: the scale is sized for the outlier and the bulk gets few "
              "codes.",
         formula_after=True),
    Step("From model to deployment",
         "A QDQ model stores the codes, but a DequantizeLinear in front of a float MatMul "
         "turns them back into float32 before the arithmetic. A runtime such as onnxruntime "
         "fuses known patterns into kernels that read the codes themselves: MatMulInteger "
         "after DynamicQuantizeLinear, QLinearMatMul, and MatMulNBits for 4-bit weights in "
         "blocks. Whether that is faster depends on what the kernel waits for: memory or "
         "arithmetic.",
         r"\text{time} \approx \max\Big(\frac{\text{bytes read}}{\text{bandwidth}},\ "
         r"\frac{2 \cdot \text{rows} \cdot k \cdot n}{\text{FLOP/s}}\Big)",
         "A runtime fuses because a DequantizeLinear that runs on every inference costs a full "
         "float copy of the weight in memory traffic; an integer or 4-bit kernel reads the "
         "codes directly, which pays exactly when reading bytes is the bottleneck.",
         "A 1024 × 1024 weight in 4 bits (onnxruntime's MatMulNBits) against the float "
         "MatMul, timed now on this machine: where is 4-bit faster?", _S_DEPLOY, _a_deploy,
         MODEL_FIDELITY,
         dict(mf_runtime="onnxruntime", mf_recipes=["int8:per-axis", "int4:blocked32"]),
         "Model Fidelity with the onnxruntime runtime: build the model and read the forms each "
         "layer runs in and the latency spread beside float.",
         ("dynamic", "block", "bits-per-element"), refs=(MODEL_FIDELITY, GLOSSARY),
         rule="4-bit weights pay when the kernel waits on memory (one row: every weight "
              "read once for little arithmetic), less when it computes (many rows reuse each "
              "weight); DynamicQuantizeLinear costs every run, so dynamic activations pay only "
              "when the integer MatMul saves more than the operator costs.",
         formula_after=True),
)
