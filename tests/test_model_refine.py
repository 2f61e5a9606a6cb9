"""Plans that hold (qcore.model.refine): local search on measured runs, never below the additive
plan's measurement nor the best uniform recipe within the budget. Checked on a real recurrent
model (silero-vad); the final plan's figure is measured again through the QDQ export in
onnxruntime."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

import real_models  # noqa: E402

from qcore.model.__main__ import main  # noqa: E402
from qcore.model.cases import load_case  # noqa: E402
from qcore.model.fidelity import compare  # noqa: E402
from qcore.model.plan import _cap, make_plan, run_plan  # noqa: E402
from qcore.model.refine import refine, uniform_plans  # noqa: E402
from qcore.model.sensitivity import measure  # noqa: E402

RECIPES = ["int8:per-axis", "int4:per-axis", "int4:blocked32"]


@pytest.fixture(scope="module")
def silero():
    path = real_models.require("silero-vad")
    case = load_case(str(path), real_models.inputs("silero-vad"))
    return case, measure(case, RECIPES)


def _check(case, sens, r, budget):
    additive = r.additive
    assert r.plan.bits <= _cap(budget, r.plan.elements)
    assert r.figure >= additive.measured["output_sqnr_db"]
    for u in uniform_plans(sens, budget):
        run_plan(case, u)
        assert r.figure >= u.measured["output_sqnr_db"]
    figures = [additive.measured["output_sqnr_db"]] + [m["output_sqnr_db"] for m in r.moves]
    assert all(b > a for a, b in zip(figures[1:], figures[2:]))  # each kept move improves
    assert r.runs <= 6


def test_refined_plan_is_never_worse_than_additive_or_uniform(silero):
    case, sens = silero
    budget = 6.0
    plan = make_plan(sens, budget)
    run_plan(case, plan)
    r = refine(case, sens, plan, runs=6)
    _check(case, sens, r, budget)
    # the figure of the final plan, measured again outside the search: its QDQ export in
    # onnxruntime, against the float model in onnxruntime
    from qcore.model.export import export_plan
    from qcore.model.graph import make_session

    feeds = case.batches[0]
    float_out = make_session(case.model).run(None, feeds)
    qdq_out = make_session(export_plan(case.model, r.plan, case.arrays)).run(None, feeds)
    assert compare(float_out, qdq_out)["output_sqnr_db"] == pytest.approx(r.figure, abs=0.05)


def test_a_misled_additive_plan_starts_from_the_better_uniform_plan(silero):
    """The sensitivity rows are falsified so the additive plan picks int4 where it hurts most:
    the search must still end at or above the best uniform recipe's measurement."""
    case, sens = silero
    bad = copy.deepcopy(sens)
    for row in bad.rows:
        row["noise_power"] = 1e-9 if row["recipe"] == "int4:per-axis" else 1.0
    budget = 8.3
    plan = make_plan(bad, budget)
    run_plan(case, plan)
    r = refine(case, bad, plan, runs=4)
    assert r.uniform is not None
    best_uniform = r.uniform.measured["output_sqnr_db"]
    assert r.figure >= best_uniform and r.figure >= plan.measured["output_sqnr_db"]
    assert best_uniform > plan.measured["output_sqnr_db"]  # the trap worked
    assert r.start.startswith("uniform:")


def test_cli_refine_reports_predicted_measured_refined(tmp_path, capsys):
    path = real_models.require("silero-vad")
    feeds = tmp_path / "in.npz"
    np.savez(feeds, **real_models.inputs("silero-vad"))
    out = tmp_path / "plan.json"
    assert main([str(path), "--inputs", str(feeds), "--recipes", ",".join(RECIPES),
                 "--budget", "6", "--refine", "3", "--plan", str(out)]) == 0
    text = capsys.readouterr().out
    assert "refined: output SQNR" in text and "predicted" in text and "measured" in text
    d = json.loads(out.read_text())
    ref = d["refine"]
    assert ref["runs"] <= 3 and d["bits_per_element"] <= 6
    assert d["output_sqnr_db"] == ref["output_sqnr_db"]
    assert ref["output_sqnr_db"] >= ref["additive"]["output_sqnr_db"]
    assert math.isfinite(ref["additive"]["output_sqnr_db_predicted"])
    assert main([str(path), "--inputs", str(feeds), "--budget", "6", "--refine", "-1"]) == 2


def test_cli_refines_unasked_where_measured_misses_predicted(tmp_path, capsys):
    path = real_models.require("silero-vad")
    feeds = tmp_path / "in.npz"
    np.savez(feeds, **real_models.inputs("silero-vad"))
    assert main([str(path), "--inputs", str(feeds), "--recipes", ",".join(RECIPES),
                 "--budget", "5"]) == 0
    text = capsys.readouterr().out
    line = next(t for t in text.splitlines() if t.startswith("plan at"))
    predicted = float(line.split("predicted ")[1].split(" dB")[0])
    measured = float(line.split("measured ")[1].split(" dB")[0])
    assert ("refined: output SQNR" in text) == (abs(measured - predicted) > 1.0)
