"""Model Fidelity's speed plan (a form per layer) and Pareto table under AppTest, the peers'
figures checked against onnxruntime's own quantizer run here."""

from __future__ import annotations

import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from conftest import open_app_page  # noqa: E402

from tests.test_model import tiny_model  # noqa: E402


def button(at, label):
    return next(b for b in at.button if b.label == label)


@pytest.fixture
def page(tmp_path, monkeypatch):
    monkeypatch.setenv("QCORE_REPORT_ROOTS", str(tmp_path))
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(), path)
    at = open_app_page("pages/model_fidelity.py", {
        "mf_source": "path", "mf_path": str(path), "mf_recipes": "int8:per-axis",
        "mf_act": "static:float8e4m3fn", "mf_speed_db": "20"})
    return at, path


def test_speed_plan_table_pareto_table_and_float8_note(page):
    at, path = page
    assert any("press **Plan for speed**" in i.value for i in at.info)
    button(at, "Build the QDQ model").click().run()
    notes = [w.value for w in at.warning if "no fast float8 kernel" in w.value]
    assert notes and all(re.search(r"in this runtime: \d+\.\d\dx float", n) for n in notes)
    button(at, "Plan for speed").click().run()
    assert not at.exception and not at.error
    forms = at.table[-1].value
    assert len(forms) == sum(n.op_type == "MatMul" for n in tiny_model().graph.node)
    for _, r in forms.iterrows():  # each layer's chosen form was timed, and is one it can take
        assert np.isfinite(r[f"{r['form']} ms"]), r.to_dict()
        assert r["why"]
    assert any(m.label == "Output SQNR as deployed" for m in at.metric)
    assert any("Output SQNR ≥ 20 dB" in s.value for s in [*at.success, *at.warning])

    button(at, "Measure the Pareto table").click().run()
    assert not at.exception and not at.error
    table = at.table[-1].value.set_index("model")
    assert {"float", "qcore-speed", "qcore-bits", "ort-static", "ort-dynamic"} <= set(table.index)
    assert table["Pareto"].any() and table.loc["float", "× float"] == pytest.approx(1.0)
    # outside: onnxruntime's quantize_dynamic run here on the same inputs gives the same
    # output SQNR and file size as the table's ort-dynamic row
    from onnxruntime.quantization import QuantType, quantize_dynamic

    dst = path.parent / "dyn.onnx"
    quantize_dynamic(str(path), str(dst), per_channel=True, weight_type=QuantType.QUInt8)
    from qcore.model import cases

    case = cases.load_case(str(path), seed=0)
    sess = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    y = np.concatenate([ref.run(None, b)[0] for b in case.batches]).astype(np.float64)
    q = np.concatenate([sess.run(None, b)[0] for b in case.batches]).astype(np.float64)
    sqnr = 10 * np.log10(np.sum(y * y) / np.sum((y - q) ** 2))
    assert table.loc["ort-dynamic", "output SQNR (dB)"] == pytest.approx(sqnr, abs=0.01)
    assert table.loc["ort-dynamic", "MB"] == pytest.approx(dst.stat().st_size / 1e6, abs=1e-6)
    # another page and back: both tables come from the store, no button pressed
    at.switch_page("pages/home.py").run()
    at.switch_page("pages/model_fidelity.py").run()
    assert "ort-dynamic" in set(at.table[-1].value["model"])
    assert at.table[-2].value["layer"].tolist() == forms["layer"].tolist()
