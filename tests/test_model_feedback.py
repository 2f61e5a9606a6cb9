"""State fed back (qcore.model.feedback) on a real recurrent model, silero-vad (PyTorch export,
``stateN`` → ``state``): the float and the quantized model each feed their own state; checked
against loops written here over plain onnxruntime sessions (the float model, and the QDQ export
of a plan), with the SQNR per step computed by its formula."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")

import real_models  # noqa: E402

from qcore.model.__main__ import main  # noqa: E402
from qcore.model.export import export_plan  # noqa: E402
from qcore.model.feedback import load_fed_back_case, per_step_rows  # noqa: E402
from qcore.model.graph import ModelError  # noqa: E402
from qcore.model.plan import Plan, planned_weights  # noqa: E402

STEPS = 24


def _loop(model, seq, feed_state_from=None):
    """Run ``model`` over ``seq``'s steps in a plain onnxruntime session, feeding stateN to
    state (``feed_state_from``: per-step states to feed instead, teacher forcing)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # as the tool runs
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    state = seq["state"]
    outs = []
    for i in range(seq["input"].shape[0]):
        prob, state_n = s.run(["output", "stateN"], {"input": seq["input"][i], "state": state,
                                                      "sr": seq["sr"]})
        outs.append((prob, state_n))
        state = state_n if feed_state_from is None else feed_state_from[i][1]
    return outs


def _sqnr(ref, out):
    """The model figure by its definition (docs/semantics.md): −10·log10 of the mean over
    outputs of each output's noise-to-signal ratio."""
    ratios = [float(np.sum((np.asarray(r, np.float64) - np.asarray(o, np.float64)) ** 2))
              / float(np.sum(np.asarray(r, np.float64) ** 2)) for r, o in zip(ref, out)]
    return -10 * math.log10(sum(ratios) / len(ratios))


@pytest.fixture(scope="module")
def silero():
    import onnx

    path = real_models.require("silero-vad")
    seq = real_models.audio_steps("silero-vad", STEPS)
    case = load_fed_back_case(str(path), seq, "stateN=state")
    return onnx.load(str(path)), seq, case


def test_float_run_over_steps_equals_a_plain_loop(silero):
    model, seq, case = silero
    loop = _loop(model, seq)
    assert case.runner.output_names == ["output", "stateN"]
    assert case.reference[0].shape == (STEPS, 1, 1)
    for i, (prob, state_n) in enumerate(loop):
        np.testing.assert_allclose(case.reference[0][i], prob, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(case.reference[1][i], state_n, rtol=1e-5, atol=1e-5)


def test_quantized_model_feeds_its_own_state_measured_per_step(silero):
    model, seq, case = silero
    plan = Plan(5.0, {t: "int4:per-axis" for t in case.weights}, 0, 1, 0.0, 1.0)
    fid = case.fidelity(planned_weights(case, plan))
    export = export_plan(case.model, plan, case.arrays)
    own = _loop(export, seq)  # the QDQ model, fed its own state
    ref = _loop(model, seq)
    forced = _loop(export, seq, feed_state_from=ref)  # fed the float model's state instead
    per_own = [_sqnr(r, o) for r, o in zip(ref, own)]
    per_forced = [_sqnr(r, o) for r, o in zip(ref, forced)]
    assert fid["steps"] == STEPS and len(fid["sqnr_db_per_step"]) == STEPS
    np.testing.assert_allclose(fid["sqnr_db_per_step"], per_own, atol=0.05)
    assert not np.allclose(fid["sqnr_db_per_step"][1:], per_forced[1:], atol=0.05)
    all_ref = [np.stack([r[k] for r in ref]) for k in range(2)]
    all_own = [np.stack([o[k] for o in own]) for k in range(2)]
    assert fid["output_sqnr_db"] == pytest.approx(_sqnr(all_ref, all_own), abs=0.05)
    rows = per_step_rows(fid)
    assert [r["step"] for r in rows] == list(range(STEPS))
    assert rows[3]["sqnr_db"] == fid["sqnr_db_per_step"][3]


def test_feedback_arguments_are_checked(silero):
    model, seq, _ = silero
    with pytest.raises(ModelError, match="'stateX' is not an output"):
        load_fed_back_case(model, seq, "stateX=state")
    with pytest.raises(ModelError, match="'h' is not an input"):
        load_fed_back_case(model, seq, "stateN=h")
    with pytest.raises(ModelError, match="OUT=IN"):
        load_fed_back_case(model, seq, "stateN")
    flat = dict(seq, input=seq["input"][0])
    with pytest.raises(ModelError, match="leading step axis"):
        load_fed_back_case(model, flat, "stateN=state")
    with pytest.raises(ModelError, match="needs --inputs"):
        load_fed_back_case(model, None, "stateN=state")


def test_state_left_out_starts_from_zeros(silero):
    model, seq, case = silero
    no_state = {k: v for k, v in seq.items() if k != "state"}
    c = load_fed_back_case(model, no_state, "stateN=state")
    assert np.array_equal(c.reference[0], case.reference[0])


def test_cli_feedback_writes_sqnr_per_step(tmp_path, capsys):
    path = real_models.require("silero-vad")
    feeds = tmp_path / "seq.npz"
    np.savez(feeds, **real_models.audio_steps("silero-vad", 8))
    out = tmp_path / "plan.json"
    assert main([str(path), "--inputs", str(feeds), "--feedback", "stateN=state",
                 "--recipes", "int8:per-axis,int4:per-axis", "--budget", "6",
                 "--plan", str(out), "--refine", "0"]) == 0
    text = capsys.readouterr().out
    assert "over 8 steps (state fed back)" in text
    d = json.loads(out.read_text())
    assert len(d["measured"]["sqnr_db_per_step"]) == 8
    assert main([str(path), "--inputs", str(feeds), "--feedback", "nope=state"]) == 2


@pytest.mark.parametrize("activations", [False, True])
def test_export_runs_over_the_steps_and_equals_the_fake_quant_steps(silero, tmp_path,
                                                                    activations):
    """write_export with state fed back: the export runs once, over every step (checked against
    a plain onnxruntime loop over the saved file), and is compared with the fake-quant
    evaluation of the same steps — equal bit for bit."""
    import io

    import onnx

    from qcore.model.calibrate import specs_for
    from qcore.model.command import write_export
    from qcore.model.sites import parse_activations
    from qcore.model.staged import runner_for

    model, seq, case = silero
    plan = Plan(8.0, {t: "int8:per-axis" for t in case.weights}, 0, 1, 0.0, 1.0)
    if activations:  # static int8 Q/DQ on every float site, calibrated by minmax
        plan.activations = specs_for(case, parse_activations("static:int8@minmax"))
    path = tmp_path / "qdq.onnx"
    out = io.StringIO()
    write_export(case, plan, str(path), out, runtime="reference")
    assert "equal the fake-quant evaluation bit for bit" in out.getvalue(), out.getvalue()
    loop = _loop(onnx.load(str(path)), seq)
    fake = (runner_for(case).run(plan.activations, planned_weights(case, plan)) if activations
            else case.run(planned_weights(case, plan)))
    assert fake[0].shape == (STEPS, 1, 1)
    for k in range(2):
        np.testing.assert_array_equal(np.stack([o[k] for o in loop]), fake[k])
