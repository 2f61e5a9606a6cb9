"""The guided path under AppTest: every step answers its question with qcore's number, and
every "Try this" lands on the page and the settings it promises."""

from __future__ import annotations

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest
from test_app import APP, check, rerun

import qcore
from app import lesson, state

STEPS = lesson.STEPS


def open_learn(step: int | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=300)
    if step is not None:
        at.query_params["step"] = str(step)
    at.switch_page("pages/learn.py")
    return check(at.run())


def independent_answers() -> list[str]:
    """Each question's answer, computed here from qcore and the formulas (not from the
    lesson's own code)."""
    y1 = qcore.quantize_linear(np.float32([1.0]), np.float32(0.25), np.uint8(10))[0]
    y2 = qcore.quantize_linear(np.float32([2.5]), np.float32(1), np.int8(0))[0]
    y3 = qcore.quantize_linear(np.float32([127.5]), np.float32(1), np.int8(0))[0]
    w = np.array([[0.02, -0.05, 0.1], [12.7, -6.0, 3.0]], np.float32)
    s4 = np.float32(np.abs(w).max() / np.float32(127))
    x4 = qcore.dequantize_linear(qcore.quantize_linear(w, s4, np.int8(0)), s4, np.int8(0))
    y5 = qcore.quantize_linear(np.float32([300.0]), np.float32(1), output_dtype="float8e4m3fn")
    _, _, z6 = qcore.dynamic_quantize_linear(np.float32([-1.0, 0.0, 3.0]))
    assert int(y2) == 2 and int(y3) == 127 and int(z6) == 64  # round half to even; saturation
    # ONNX's own packing of int4 (onnx.helper.make_tensor stores one packed byte per int32)
    from onnx import TensorProto, helper

    packed = list(helper.make_tensor("t", TensorProto.INT4, [len(lesson.STORAGE_CODES)],
                                     list(lesson.STORAGE_CODES)).int32_data)
    store = f"{len(packed)} bytes, first 0x{packed[0]:02X}"
    return [str(int(y1)), str(int(y2)), str(int(y3)), f"{float(x4[0, 0]):g}",
            f"{float(y5.astype(np.float32)[0]):g}", store, None, str(int(z6)), None, None, None]


def test_the_path_has_the_seven_steps_in_order():
    titles = [s.title.split(":")[0].split(",")[0] for s in STEPS]
    assert titles == ["Scale and zero point", "Rounding", "Saturation", "Granularity",
                      "float8", "Storage", "Formats at the same bits", "DynamicQuantizeLinear",
                      "Choosing a format for a model", "From tensor to model",
                      "From model to deployment"]
    for s in STEPS:
        assert s.idea.count(". ") + s.idea.count(": ") >= 2 and s.formula and s.why
        assert len(s.options) >= 2 and s.try_settings
        assert not [c for c in s.formula if ord(c) < 32], s.title  # LaTeX written raw


def test_walk_the_path_answering_every_question():
    expected = independent_answers()
    at = open_learn()
    assert at.title[0].value == "Learn: guided path"
    for n, step in enumerate(STEPS, 1):
        assert at.segmented_control(key="step").value == n
        assert at.query_params["step"] == [str(n)] or at.query_params["step"] == str(n)
        radio = at.radio(key=f"learn_q{n}")
        assert radio.value is None  # the question comes before the answer
        assert not [s for s in at.success if "Right" in s.value] and not at.error
        correct = expected[n - 1] or step.options[step.answer().correct]
        wrong = next(o for o in step.options if o != correct)
        radio.set_value(wrong)
        rerun(at)
        assert any(f"it is {correct}" in e.value for e in at.error), (n, correct)
        at.radio(key=f"learn_q{n}").set_value(correct)
        rerun(at)
        assert any(f"Right: {correct}" in s.value for s in at.success), (n, correct)
        if n < len(STEPS):
            at.button(key="learn_next").click()
            rerun(at)
    assert at.button(key="learn_next").disabled


def test_choosing_a_format_answer_is_measured():
    from qcore import calibration, metrics, synthetic

    x = synthetic.generate("outlier_channel", lesson.CHOICE_SHAPE, seed=0)
    sq = {}
    for t in ("int8", "float8e4m3fn"):
        p = calibration.choose_params(x, t, method="absmax")
        sq[t] = metrics.error_metrics(x, p.dequantize(p.quantize(x)))["sqnr_db"]
    choosing = next(s for s in STEPS if s.title.startswith("Choosing"))
    a = choosing.answer()
    assert choosing.options[a.correct] == max(sq, key=sq.get)
    assert f"{sq['int8']:.1f} dB" in a.explanation


@pytest.mark.parametrize("n", range(1, len(STEPS) + 1))
def test_try_this_lands_on_the_promised_state(n):
    step = STEPS[n - 1]
    at = open_learn(n)
    at.radio(key=f"learn_q{n}").set_value(step.options[0])  # "Try this" follows the prediction
    rerun(at)
    at.button(key=f"learn_try{n}").click()
    rerun(at)
    page = step.try_page.split("/")[-1].removesuffix(".py")
    assert at.session_state["_qx_page"] == ("" if page == "home" else page)  # Home is "/"
    assert at.title[0].value != "Learn: guided path"
    url = at.query_params
    for name, value in step.try_settings.items():
        assert at.session_state[name] == value, (name, at.session_state[name], value)
        got = url[name]
        got = got[0] if isinstance(got, list) else got
        assert got == state.encode(value), (name, got)


def test_try_this_overrides_what_the_page_showed_before():
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["rows"], at.session_state["cols"] = 16, 16
    at.switch_page("pages/quantize_lab.py")
    check(at.run())
    assert at.segmented_control(key="gran").value == qcore.PER_TENSOR
    at.switch_page("pages/learn.py")
    at.query_params["step"] = "4"
    rerun(at)
    at.radio(key="learn_q4").set_value(STEPS[3].options[0])
    rerun(at)
    at.button(key="learn_try4").click()
    rerun(at)
    assert at.segmented_control(key="gran").value == qcore.PER_AXIS
    assert at.selectbox(key="axis").value == 0
    assert at.selectbox(key="dist").value == "outlier_channel"
    assert any("axis 0" in i.value for i in at.info)  # the preset's note names the axis


def test_home_leads_to_the_guided_path():
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["rows"], at.session_state["cols"] = 16, 16
    check(at.run())  # a bare URL opens Home
    assert at.title[0].value == "Quantization Explorer"
    at.button(key="h_learn").click()
    rerun(at)
    assert at.title[0].value == "Learn: guided path"
    assert at.segmented_control(key="step").value == 1


def _numpy_sqnr(x, x_hat) -> float:
    x, x_hat = x.astype(np.float64), x_hat.astype(np.float64)
    return float(10 * np.log10((x ** 2).sum() / ((x_hat - x) ** 2).sum()))


def test_same_bits_answer_agrees_with_numpy_int4_blocks():
    """int4 blocked 32 abs-max with float32 scales, by hand in numpy (round half to even,
    clip to −8…7): the lesson's SQNR and bits per element (4 + 32/32; MXFP4 4 + 8/32)."""
    from qcore import datasets

    w = datasets.load(lesson.SAME_BITS_TENSOR)
    blocks = w.reshape(w.shape[0], -1, 32)
    scale = (np.abs(blocks).max(axis=2, keepdims=True) / np.float32(7)).astype(np.float32)
    codes = np.clip(np.rint(blocks / scale), -8, 7)
    expected = _numpy_sqnr(w, (codes * scale).reshape(w.shape))
    table = {label: (sq, bits) for label, sq, bits in lesson.same_bits_table()}
    sq, bits = table["int4 blocked 32, float32 scales"]
    assert abs(sq - expected) < 0.01 and bits == 5.0
    assert table["MXFP4"][1] == 4.25
    step = next(s for s in STEPS if s.title == "Formats at the same bits")
    a = step.answer()
    assert f"{sq:.2f} dB" in a.explanation


def test_tensor_to_model_answer_agrees_with_numpy_int8():
    from qcore import datasets

    sq = {}
    for name in lesson.MODEL_TENSORS:
        x = datasets.load(name)
        scale = np.float32(np.abs(x).max() / np.float32(127))
        sq[name] = _numpy_sqnr(x, np.clip(np.rint(x / scale), -127, 127) * scale)
    step = next(s for s in STEPS if s.title == "From tensor to model")
    assert step.options[step.answer().correct] == min(sq, key=sq.get)
    assert "model_fidelity" in " ".join(step.refs)


def test_try_this_states_its_settings_in_words():
    for step in STEPS:
        words = lesson.describe_settings(step.try_settings)
        assert words and not any(f"{k}=" in words for k in step.try_settings), words
        assert "h_x" not in words and "lo_s" not in words and "c_formats" not in words


def test_no_answer_before_the_prediction_and_answers_kept_on_the_move():
    at = open_learn(2)
    main = " ".join(m.value for m in at.markdown) + " ".join(lx.value for lx in at.latex)
    assert "round(2.5)" not in main.replace(r"\operatorname{round}", "round").replace(" ", "")
    assert not [i for i in at.info if "Why?" in i.value]  # the why comes with the answer
    at.radio(key="learn_q2").set_value("2")
    rerun(at)
    assert [i for i in at.info if "Why?" in i.value]
    at.button(key="learn_next").click()
    rerun(at)
    assert at.radio(key="learn_q3").value is None
    at.button(key="learn_prev").click()
    rerun(at)
    assert at.radio(key="learn_q2").value == "2"
    assert any("Right: 2" in s.value for s in at.success)


#: Words that give each step's answer away, written here from the ONNX rules (not taken from the
#: lesson's text): none may be on screen before the prediction.
LEAKS = {
    2: ("to even", "even neighbour", "even code", "2.5 → 2"),
    3: ("saturat", "clipped", "clips", "passes 127", "stops there", r"\min", r"\max"),
    4: ("coarse step", "round to 0", "comes back as 0", r"\max_j"),
    6: ("low nibble", "high nibble", "lceil", "⌈", "two of them in each byte",
        "two codes a byte", "pads"),
    9: ("floats suit", "suit heavy tails", "steps grow with"),
    10: ("far from the bulk", r"\log_2", "max|x| / σ"),
}


def screen_text(at: AppTest) -> str:
    """Every piece of text the page shows (the radio's own question and options left out)."""
    parts = [e.value for kind in ("markdown", "caption", "latex", "info", "success", "error",
                                  "warning") for e in getattr(at, kind)]
    parts += [b.label for b in at.button]
    return "\n".join(str(p) for p in parts)


@pytest.mark.parametrize("n", range(1, len(STEPS) + 1))
def test_every_step_asks_before_it_tells(n):
    """Before a prediction: no rule, no why, no "Try this" hint or button, none of the words that
    give the answer away; after it, all of them."""
    step = STEPS[n - 1]
    at = open_learn(n)
    shown = screen_text(at)
    assert at.radio(key=f"learn_q{n}").value is None
    for leak in LEAKS.get(n, ()):
        assert leak not in shown, (n, leak)
    for hidden in (step.why, step.rule, step.try_text):
        assert not hidden or hidden not in shown, (n, hidden[:60])
    if step.formula_after:
        assert step.formula not in shown, n
    assert not [b for b in at.button if b.key == f"learn_try{n}"], n
    at.radio(key=f"learn_q{n}").set_value(step.options[-1])
    rerun(at)
    shown = screen_text(at)
    for revealed in (step.why, step.rule, step.try_text):
        assert revealed in shown, (n, revealed[:60])
    assert step.formula in shown
    assert at.button(key=f"learn_try{n}")


def test_home_asks_about_ties_before_it_tells():
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["rows"], at.session_state["cols"] = 16, 16
    check(at.run())
    example = [c.value for c in at.caption if "2.5" in c.value]  # the example's caption
    assert example and "which one" in example[0]
    assert "to even" not in example[0] and "even neighbour" not in example[0]


def test_same_bits_names_both_int4_methods_with_numpy_figures():
    """The step names the method behind each int4 figure: abs-max (the Lab's, the lesson's) and
    full range (Format Compare's and the model pages' int4:blocked32), each checked here in
    numpy: full range takes the block's value of largest magnitude v and the scale v / −8."""
    from qcore import datasets

    w = datasets.load(lesson.SAME_BITS_TENSOR).astype(np.float32)
    blocks = w.reshape(w.shape[0], -1, 32)
    idx = np.abs(blocks).argmax(axis=2)[..., None]
    v = np.take_along_axis(blocks, idx, axis=2)
    scale = (v / np.float32(-8)).astype(np.float32)
    scale[scale == 0] = 1
    codes = np.clip(np.rint(blocks / scale), -8, 7)
    full = _numpy_sqnr(w, (codes * scale).reshape(w.shape))
    step = next(s for s in STEPS if s.title == "Formats at the same bits")
    text = step.answer().explanation
    assert f"{full:.2f} dB" in text and "full range" in text and "abs-max" in text


def test_deployment_answer_is_the_live_measurement():
    """The deployment step's answer follows the figures qcore.deploy_costs measured (once per
    process: the page and this test read the same) and states them."""
    pytest.importorskip("onnxruntime")
    from qcore import deploy_costs

    step = next(s for s in STEPS if s.title == "From model to deployment")
    a = step.answer()
    f = deploy_costs.four_bit_cost()
    small, large = f["nbits1"] < f["float1"], f["nbits64"] < f["float64"]
    assert step.options[a.correct].startswith(
        {(True, False): "4-bit faster at 1 row", (True, True): "4-bit faster at both",
         (False, True): "4-bit faster at 64", (False, False): "float faster"}[(small, large)])
    assert f"{f['nbits1']:.0f} µs" in a.explanation
    assert f"{deploy_costs.dynamic_cost()['dql']:.0f} µs" in a.explanation
