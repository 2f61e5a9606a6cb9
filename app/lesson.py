"""The guided path: seven steps from scale and zero point to choosing a format.

Each :class:`Step` holds the idea (three sentences), the formula, the reason behind the rule, a
prediction question whose answer qcore computes when asked (never a stored number), and a
"Try this": the page and settings (URL names) that show the step on a real tensor. Pure data
and qcore calls; ``pages/learn.py`` draws it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import qcore
from qcore import calibration, metrics, synthetic

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


def _q(x: float, scale: float, zero_point: Any = None, target: str | None = None,
       **kw: Any) -> np.ndarray:
    """QuantizeLinear of one value (a zero point's type names the target)."""
    xs = np.array([x], np.float32)
    if zero_point is None:
        return qcore.quantize_linear(xs, np.float32(scale), output_dtype=target, **kw)
    return qcore.quantize_linear(xs, np.float32(scale), zero_point, **kw)


def _index(options: tuple[str, ...], value: str) -> int:
    if value not in options:  # the options are meant to hold the true answer
        raise qcore.QuantizationError(f"the lesson's options {options} lack qcore's {value!r}")
    return options.index(value)


# --------------------------------------------------------------------------- 1 scale, zero point

_S1 = ("4", "14", "10")


def _a1() -> Answer:
    y = int(_q(1.0, 0.25, np.uint8(10))[0])
    back = float(qcore.dequantize_linear(np.array([y], np.uint8), np.float32(0.25),
                                         np.uint8(10))[0])
    return Answer(_index(_S1, str(y)),
                  f"1.0 / 0.25 = 4 steps above zero, and zero sits at code 10, so y = 4 + 10 = "
                  f"**{y}**. Back: ({y} − 10) × 0.25 = **{back:g}**.")


# --------------------------------------------------------------------------- 2 rounding

_S2 = ("1", "2", "3")


def _a2() -> Answer:
    y = int(_q(2.5, 1.0, np.int8(0))[0])
    y35 = int(_q(3.5, 1.0, np.int8(0))[0])
    return Answer(_index(_S2, str(y)),
                  f"2.5 lies exactly halfway between 2 and 3; ONNX rounds half to **even**, so "
                  f"y = **{y}** (and 3.5 → {y35}), not 3: ties do not all go up.")


# --------------------------------------------------------------------------- 3 saturation

_S3 = ("127", "128", "−128")


def _a3() -> Answer:
    y = int(_q(127.5, 1.0, np.int8(0))[0])
    big = int(_q(1e10, 1.0, np.int8(0))[0])
    text = str(y).replace("-", "−")
    return Answer(_index(_S3, text),
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
    return Answer(_index(_S4, shown),
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
    return Answer(_index(_S5, f"{e4:g}"),
                  f"Between 256 and 512 (one binade) e4m3's 3 mantissa bits give 8 values, 32 "
                  f"apart: 256, 288, 320… 300 is nearer 288, so x̂ = **{e4:g}**. e5m2 has 2 "
                  f"mantissa bits (steps of 64) and gives {e5:g}.")


# --------------------------------------------------------------------------- 6 dynamic

_S6 = ("0", "64", "128")


def _a6() -> Answer:
    y, s, zp = qcore.dynamic_quantize_linear(np.array([-1.0, 0.0, 3.0], np.float32))
    return Answer(_index(_S6, str(int(zp))),
                  f"The range [−1, 3] already contains 0; scale = 4 / 255 = {float(s):.6g}, and "
                  f"zero sits at 1 / scale = {1 / float(s):.2f} steps above −1, which rounds to "
                  f"the zero point **{int(zp)}**; y = {', '.join(str(int(v)) for v in y)}.")


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
    pick = 2 if abs(i8 - f8) < 1 else (0 if i8 > f8 else 1)
    return Answer(pick,
                  f"Per-tensor on a 256×256 weight with one outlier row: int8 **{i8:.1f} dB**, "
                  f"float8e4m3fn **{f8:.1f} dB**. int8's even steps are sized for the big row, "
                  f"so the small rows get only a few codes; float8 keeps its relative precision "
                  f"at every magnitude. Give int8 per-axis scales along axis 0 and it reaches "
                  f"{i8_axis:.1f} dB — the format and the granularity are chosen together. "
                  "Measure, don't guess: Format Compare puts every format on one chart.")


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
         ("scale", "zero-point", "code")),
    Step("Rounding",
         "x / scale is rarely a whole number, so it is rounded to the nearest code. The error "
         "of one element is at most half a step, scale / 2. A tie — exactly halfway — goes to "
         "the even neighbour.",
         r"\operatorname{round}(2.5) = 2,\quad \operatorname{round}(3.5) = 4,\quad "
         r"|\hat{x} - x| \le \text{scale} / 2",
         glossary.WHY["half_even"],
         "x = 2.5, scale 1, int8 → y = ?", _S2, _a2,
         "pages/quantize_lab.py",
         dict(target="int8", lo_x="0.5, 1.5, 2.5, 3.5, -2.5, 2.4, 2.6", lo_s=1.0, lo_zp=0),
         "The Lab's \"Step by step on your own numbers\" table: the rounded column shows every "
         "tie going to the even code.",
         ("half-to-even",)),
    Step("Saturation",
         "The target type has a smallest and a largest code. A value whose rounded code falls "
         "outside them is clipped to the nearest end: it saturates. Choosing the scale is a "
         "trade: a large one never clips but rounds coarsely, a small one rounds finely but "
         "clips the outliers.",
         r"y = \min\big(\max(\operatorname{round}(x / s) + z,\ q_{\min}),\ q_{\max}\big)",
         glossary.WHY["saturate"],
         "x = 127.5, scale 1, zero point 0, int8 → y = ?", _S3, _a3,
         "pages/quantize_lab.py",
         dict(target="int8", lo_x="126.4, 127.5, 128, 300, -128.5, -129, 1e10", lo_s=1.0,
              lo_zp=0),
         "The own-numbers table: \"rounded\" passes 127, \"saturated = y\" stops there.",
         ("saturate", "clipping")),
    Step("Granularity: per-axis and blocked",
         "One scale for a whole tensor must cover its largest value, so every other value "
         "shares that coarse step. Per-axis quantization gives each slice along one axis its "
         "own scale — for a weight of shape (out, in), axis 0 is the output channel. Blocked "
         "quantization goes further: every run of, say, 32 elements gets its own scale.",
         r"s_c = \max_j |W_{c,j}| / 127 \quad\text{(one scale per output channel } c)",
         glossary.WHY["per_axis"] + " " + glossary.WHY["blocks"],
         "W = [[0.02, −0.05, 0.1], [12.7, −6, 3]] (2 output channels), per-tensor int8 with "
         "scale max|W| / 127: what does the 0.02 come back as?", _S4, _a4,
         "pages/quantize_lab.py",
         presets.LAB["outlier_channel"].settings,
         "The Lab on a 256×256 weight with one outlier output channel, per-axis along axis 0. "
         "Switch Granularity to per-tensor and watch the SQNR drop.",
         ("granularity", "per-axis", "output-channel", "block"), "outlier_channel"),
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
         ("e4m3-e5m2", "binade", "mx", "e8m0", "ocp"), "mxfp4"),
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
         ("dynamic", "zero-point")),
    Step("Choosing a format for a model",
         "No format wins everywhere: the answer depends on the tensor's shape of distribution "
         "and on the granularity. Integers suit well-behaved, evenly spread values; floats "
         "suit heavy tails and outliers. Compare SQNR against bits per element and keep the "
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
         ("sqnr", "pareto", "bits-per-element")),
)
