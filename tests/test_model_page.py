"""The Model Fidelity page under streamlit.testing.v1.AppTest."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from conftest import open_app_page  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from qcore.model import cases, plan, sensitivity  # noqa: E402
from qcore.report.models import installed_models  # noqa: E402
from tests.test_model import tiny_model  # noqa: E402


def open_page(query: dict) -> AppTest:
    return open_app_page("pages/model_fidelity.py", query)


def metrics(at: AppTest) -> dict:
    return {m.label: m.value for m in at.metric}


@pytest.fixture(autouse=True)
def _tmp_path_is_allowed(tmp_path, monkeypatch):
    """The page reads server paths only under the allowed folders: here, the test's own."""
    monkeypatch.setenv("QCORE_REPORT_ROOTS", str(tmp_path))


def test_path_model_runs_plans_and_exports(tmp_path):
    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(), model)
    at = open_page({"mf_source": "path", "mf_path": str(model), "mf_budget": "6",
                    "mf_recipes": "int8:per-axis,int4:blocked32,mxfp4"})
    assert len(at.get("plotly_chart")) == 3  # heat map, scatter, bits vs fidelity
    case = cases.load_case(str(model), seed=0)
    sens = sensitivity.measure(case, "int8:per-axis,int4:blocked32,mxfp4")
    p = plan.make_plan(sens, 6.0, allow_float=False)
    plan.run_plan(case, p)
    shown = metrics(at)
    assert shown["Bits per weight"] == f"{p.bits_per_element:.4f}"
    assert shown["Output SQNR predicted"] == f"{p.output_sqnr_db_predicted:.2f} dB"
    assert shown["Output SQNR measured"] == f"{p.measured['output_sqnr_db']:.2f} dB"
    assert at.query_params["mf_budget"] == "6.0"
    at.button[1].click().run()  # Build the QDQ model
    assert not at.exception
    assert len(at.get("download_button")) == 2
    assert len(at.warning) + len(at.success) >= 1


def test_bad_path_is_a_message(tmp_path):
    at = open_page({"mf_source": "path", "mf_path": str(tmp_path / "none.onnx")})
    assert any("no such file" in e.value for e in at.error)


def test_paths_outside_the_allowed_folders_are_refused(tmp_path):
    onnx.save(tiny_model(), tmp_path / "tiny.onnx")
    for query in ({"mf_source": "path", "mf_path": "/etc/passwd"},
                  {"mf_source": "path", "mf_path": str(tmp_path / ".." / "x.onnx")},
                  {"mf_source": "path", "mf_path": str(tmp_path / "tiny.onnx"),
                   "mf_npz": "/etc/passwd"}):
        at = open_page(query)
        assert any("allowed folders" in e.value for e in at.error), query
        assert not at.get("plotly_chart") and not at.metric


@pytest.mark.skipif("minilm" not in installed_models(), reason="MiniLM weights not installed")
def test_minilm_subset():
    at = open_page({"mf_source": "minilm", "mf_sentences": "6",
                    "mf_filter": "layer.5.attention.self",
                    "mf_recipes": "int8:per-axis,int4:blocked32", "mf_budget": "6"})
    assert len(at.get("plotly_chart")) == 3
    shown = metrics(at)
    assert "Spearman of pairwise similarities" in shown
    assert float(shown["Bits per weight"]) <= 6.0
    assert np.isfinite(float(shown["Output SQNR measured"].split()[0]))


def test_the_warm_up_process_skips_the_model_load(monkeypatch, tmp_path):
    from app import warm

    onnx.save(tiny_model(), tmp_path / "tiny.onnx")
    monkeypatch.setenv(warm.SERVER_PID, "1")
    at = open_page({"mf_source": "path", "mf_path": str(tmp_path / "tiny.onnx")})
    assert not at.get("plotly_chart") and not at.metric
