"""The latency-objective rows of the bench (qcore.bench.objectives): they cover every real model
the tests install (the two lists cannot drift apart), the target's verdict follows its
definition, and one small real model gives rows with the float model, both peers and qcore's
exports. No timing is asserted (speed targets live in the bench)."""

from __future__ import annotations

import math

import pytest
import real_models

from qcore.bench import objectives


def test_the_bench_finds_every_real_model_of_the_tests():
    assert {r.key for r in objectives.REAL} == set(real_models.MODELS)
    for r in objectives.REAL:
        m = real_models.MODELS[r.key]
        assert (r.package, r.relpath) == (m.package, m.relpath)
        if real_models.model_path(r.key) is not None:
            assert r.path() == real_models.model_path(r.key)


def _table(static_x, static_db, dyn_x, dyn_db, q_x, q_db, q_size, dyn_error=None):
    rows = [{"name": "float", "kind": "float", "latency_ms": 10.0, "x_float": 1.0,
             "output_sqnr_db": math.inf, "file_bytes": 1000, "x_size": 1.0, "pareto": True},
            {"name": "ort-static", "kind": "peer", "x_float": static_x,
             "output_sqnr_db": static_db, "x_size": 0.3, "pareto": True},
            {"name": "qcore-x", "kind": "qcore", "x_float": q_x, "output_sqnr_db": q_db,
             "x_size": q_size, "file_bytes": 1000 * q_size, "pareto": True, "forms": {"s": 2}}]
    rows.append({"name": "ort-dynamic", "kind": "peer", "error": dyn_error} if dyn_error else
                {"name": "ort-dynamic", "kind": "peer", "x_float": dyn_x,
                 "output_sqnr_db": dyn_db, "x_size": 0.3, "pareto": False})
    return rows


def test_the_target_is_the_faster_peer_plus_3_db_at_its_speed_and_half_the_file():
    (r,) = objectives._rows("m", _table(0.6, 30.0, 0.9, 35.0, 0.62, 33.0, 0.3), None)
    assert r["faster_peer"] == "ort-static" and r["target_db"] == 33.0
    assert r["x_peer"] == pytest.approx(0.62 / 0.6) and r["met"]
    (r,) = objectives._rows("m", _table(0.6, 30.0, 0.9, 35.0, 0.64, 33.0, 0.3), None)
    assert not r["met"] and r["checks"] == {"sqnr": True, "x_float": True, "x_peer": False,
                                            "size": True}
    (r,) = objectives._rows("m", _table(0.6, 30.0, 0.5, 20.0, 0.5, 22.9, 0.6), None)
    assert r["faster_peer"] == "ort-dynamic" and r["target_db"] == 23.0
    assert r["checks"]["sqnr"] is False and r["checks"]["size"] is False
    # a refused peer is not the one to beat
    (r,) = objectives._rows("m", _table(0.6, 30.0, 0, 0, 0.6, 33.0, 0.3, "InvalidGraph"), None)
    assert r["faster_peer"] == "ort-static" and r["ort-dynamic"]["error"] == "InvalidGraph"
    text = objectives.format_objective_table([r, {"model": "gone", "missing": True}])
    assert "refused" in text and "not installed" in text and "| m | 10.0 |" in text


def test_rows_of_a_real_model():
    pytest.importorskip("onnxruntime.quantization")
    if real_models.model_path("ppocr-cls") is None:
        pytest.skip(real_models.PIP_LINE)
    rows = objectives.objective_rows(["ppocr-cls"], repeats=2, speed=False)
    assert {r["qcore"] for r in rows} == {"qcore-w8a8-static-u8", "qcore-w8a8-dynamic"}
    for r in rows:
        assert r["float_ms"] > 0 and r["faster_peer"] in ("ort-static", "ort-dynamic")
        for p in ("ort-static", "ort-dynamic"):
            assert r[p]["error"] is None and 0 < r[p]["sqnr_db"] < 80
        assert 0 < r["x_size"] < 0.5 and r["forms"]


def test_the_min_sqnr_row_states_what_its_plan_said():
    """On a tiny conv net: qcore's --min-sqnr export at the faster peer + 3 dB is the first row,
    with the plan's stated ratio and deployed dB beside the separate measurement."""
    pytest.importorskip("onnxruntime.quantization")
    if objectives.plan_for_speed is None:
        pytest.skip("the speed plans are not in this tree")
    import numpy as np
    from test_model_peers import tiny_conv_net

    def make(seed):
        rng = np.random.default_rng(seed)
        return {"x": rng.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32)}

    rows = objectives.rows_for("tiny", tiny_conv_net(), make, repeats=2)
    first = rows[0]
    assert first["qcore"] == objectives.MIN_SQNR, first.get("error")
    st = first["stated"]
    assert st["dx"] == pytest.approx(st["x_float"] - first["x_float"])
    if st["sqnr_db"] == first["sqnr_db"]:  # an all-float plan is exact: inf dB on both sides
        assert st["ddb"] == 0.0
    else:
        assert st["ddb"] == pytest.approx(st["sqnr_db"] - first["sqnr_db"])
    # the deployed SQNR the plan states is the one measured here (same inputs, same runtime)
    if math.isfinite(first["sqnr_db"]):
        assert abs(st["ddb"]) <= 0.05
    assert first["target_db"] == pytest.approx(
        first[first["faster_peer"]]["sqnr_db"] + 3)
