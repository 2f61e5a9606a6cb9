"""The Pareto table (qcore.model.pareto): the front is exactly the set no other row dominates
(checked against a brute-force definition on random points, ties included), ratios are to the
float model, refused peers are listed last with no figures, and the measured points of a tiny
conv net (float, qcore's fused export, onnxruntime's two quantizers) make a table."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qcore.model.pareto import format_pareto, pareto_rows


def _brute_front(points):
    front = set()
    for a in points:
        beaten = False
        for b in points:
            if b is a:
                continue
            no_worse = (b["latency_ms"] <= a["latency_ms"] and b["output_sqnr_db"]
                        >= a["output_sqnr_db"] and b["file_bytes"] <= a["file_bytes"])
            better = (b["latency_ms"], -b["output_sqnr_db"], b["file_bytes"]) != (
                a["latency_ms"], -a["output_sqnr_db"], a["file_bytes"])
            beaten |= no_worse and better
        if not beaten:
            front.add(a["name"])
    return front


@pytest.mark.parametrize("seed", range(20))
def test_the_front_is_every_row_no_other_dominates(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 12))
    # few distinct values: ties in every coordinate happen
    pts = [{"name": f"m{i}", "latency_ms": float(rng.integers(1, 5)),
            "output_sqnr_db": float(rng.integers(10, 14)), "file_bytes": int(rng.integers(1, 4))}
           for i in range(n)]
    pts[0]["name"] = "float"
    rows = pareto_rows(pts)
    assert {r["name"] for r in rows if r["pareto"]} == _brute_front(pts)
    by = {r["name"]: r for r in rows}
    for r in rows:
        if not r["pareto"]:
            d = by[r["dominated_by"]]
            assert d["latency_ms"] <= r["latency_ms"] and d["file_bytes"] <= r["file_bytes"]
            assert d["output_sqnr_db"] >= r["output_sqnr_db"]
    assert [r["latency_ms"] for r in rows] == sorted(r["latency_ms"] for r in rows)


def test_ratios_kinds_and_refusals():
    pts = [{"name": "float", "latency_ms": 10.0, "output_sqnr_db": math.inf, "file_bytes": 400},
           {"name": "qcore-int8", "latency_ms": 12.0, "output_sqnr_db": 40.0, "file_bytes": 100,
            "forms": {"static": 3}},
           {"name": "ort-static", "kind": "peer", "latency_ms": 5.0, "output_sqnr_db": 30.0,
            "file_bytes": 110},
           {"name": "ort-dynamic", "kind": "peer", "error": "InvalidGraph: no"}]
    rows = pareto_rows(pts)
    assert [r["name"] for r in rows] == ["ort-static", "float", "qcore-int8", "ort-dynamic"]
    by = {r["name"]: r for r in rows}
    assert by["float"]["kind"] == "float" and by["qcore-int8"]["kind"] == "qcore"
    assert by["ort-static"]["x_float"] == 0.5 and by["qcore-int8"]["x_size"] == 0.25
    # each is best in one coordinate: all on the front
    assert all(by[k]["pareto"] for k in ("float", "qcore-int8", "ort-static"))
    assert by["ort-dynamic"]["pareto"] is False and math.isnan(by["ort-dynamic"]["x_float"])
    text = format_pareto(rows, "znver3")
    assert "refused: InvalidGraph: no" in text and "znver3" in text
    assert text.count("\n* ") == 3


def test_measured_points_of_a_tiny_net_make_a_table():
    pytest.importorskip("onnxruntime.quantization")
    from test_model_peers import batches, tiny_conv_net

    from qcore.model.deployable import deployable_export
    from qcore.model.graph import initializer_arrays
    from qcore.model.peers import peer_points

    m = tiny_conv_net()
    names = ["w1", "w2", "w3"]
    export = deployable_export(m, {t: "int8:per-axis" for t in names},
                               initializer_arrays(m, names))
    pts = peer_points(m, batches(), {"qcore-int8": export.model}, repeats=3, warmup=1,
                      forms={"qcore-int8": {"x": 1}})
    rows = pareto_rows(pts)
    assert {r["name"] for r in rows} == {"float", "qcore-int8", "ort-static", "ort-dynamic"}
    by = {r["name"]: r for r in rows}
    assert by["float"]["x_float"] == 1.0 and by["float"]["output_sqnr_db"] == math.inf
    assert by["ort-static"]["kind"] == "peer" and by["qcore-int8"]["forms"] == {"x": 1}
    # int8 weights: smaller files (on so tiny a net the graph's own bytes weigh in)
    assert by["qcore-int8"]["x_size"] < 0.5 and by["ort-dynamic"]["x_size"] < 1.0
    assert any(r["pareto"] for r in rows)
