"""Model Fidelity in headless Chromium: settings changed in the sidebar and on the page survive
leaving by the sidebar and coming back; the speed plan's per-layer table and the Pareto table
show every value whole at 1280 px (the sidebar open) — screenshots of each."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlencode

import pytest

from app import bench_browser as bench_app
from app.bench_browser import ARGS, CHROMIUM

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("playwright")

from qcore.models import installed_models  # noqa: E402
from tests.test_browser import BROWSER_MARKS, CUT_VALUES_JS, screenshot  # noqa: E402
from tests.test_model import tiny_model  # noqa: E402

pytestmark = BROWSER_MARKS


def _field(page, testid: str, label: str):
    return page.locator(f'[data-testid="{testid}"]', has_text=label).locator("input").first


def _shown(page) -> dict[str, object]:
    """What the learner sees in the settings this test changes."""
    return {
        "activations": _field(page, "stSelectbox", "Activations").input_value(),
        "calibration": _field(page, "stSelectbox", "Activation calibration").input_value(),
        "seed": _field(page, "stNumberInput", "Seed of generated inputs").input_value(),
        "filter": _field(page, "stTextInput", "Tensors containing").input_value(),
        "float": page.locator('[data-testid="stCheckbox"]', has_text="A tensor may stay float32")
        .locator("input").first.is_checked(),
        "objective: a latency": page.get_by_text("Latency at most (× float)").count() > 0,
    }


def test_settings_kept_and_speed_tables_whole(tmp_path, monkeypatch):
    from playwright.sync_api import sync_playwright

    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(), model)
    monkeypatch.setenv("QCORE_REPORT_ROOTS", str(tmp_path))
    log_path = tmp_path / "server.log"
    query = urlencode({"mf_source": "path", "mf_path": str(model),
                       "mf_recipes": "int8:per-axis", "mf_act": "static:float8e4m3fn"})
    shots = Path(os.environ.get("QCORE_SHOT_DIR", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    with bench_app.server(None, log_path) as (base, _, _), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(f"{base}/model_fidelity?{query}")
        bench_app.wait_rendered(page, 900, charts=True)

        # settings, changed as a learner changes them
        page.locator('[data-testid="stSelectbox"]', has_text="Activation calibration").click()
        page.get_by_role("option", name=re.compile(r"^mse")).first.click()
        bench_app.wait_rendered(page, 300, charts=True)
        seed = _field(page, "stNumberInput", "Seed of generated inputs")
        seed.fill("7")
        seed.press("Enter")
        bench_app.wait_rendered(page, 300, charts=True)
        text = _field(page, "stTextInput", "Tensors containing")
        text.fill("w")
        text.press("Enter")
        bench_app.wait_rendered(page, 300, charts=True)
        page.get_by_text("A tensor may stay float32").click()
        bench_app.wait_rendered(page, 300, charts=True)
        page.get_by_text("most faithful at a speed", exact=True).click()
        bench_app.wait_rendered(page, 300, charts=True)
        before = _shown(page)
        assert before["calibration"].startswith("mse") and before["seed"] == "7", before
        assert before["filter"] == "w" and before["float"], before
        assert before["objective: a latency"], before

        # the sidebar to another page, and back
        page.get_by_role("link", name="Home").first.click()
        bench_app.wait_rendered(page, 300)
        page.get_by_role("link", name="Model Fidelity").first.click()
        bench_app.wait_rendered(page, 300, charts=True)
        after = _shown(page)
        assert after == before, (before, after)

        # the speed plan, the float8 note and the Pareto table
        page.get_by_role("button", name=re.compile("Build the QDQ model")).click()
        bench_app.wait_rendered(page, 300, charts=True)
        assert page.get_by_text(re.compile(r"no fast float8 kernel in this runtime: "
                                           r"\d+\.\d\dx float")).count()
        page.get_by_role("button", name=re.compile("Plan for speed")).click()
        bench_app.wait_rendered(page, 600, charts=True)
        page.get_by_role("button", name=re.compile("Measure the Pareto table")).click()
        bench_app.wait_rendered(page, 600, charts=True)
        tables = page.locator('[data-testid="stTable"]')
        assert tables.count() == 4  # the sites, their weights, the forms, the Pareto table
        assert "ort-dynamic" in tables.nth(3).inner_text()
        page.wait_for_timeout(1000)
        # the test's own temporary path is longer than the field: not the page's doing
        cut = [c for c in page.evaluate(CUT_VALUES_JS) if not c.startswith("field: /tmp/")]
        tables.nth(0).scroll_into_view_if_needed()
        page.screenshot(path=str(shots / "model_fidelity_sites_1280.png"))
        tables.nth(2).scroll_into_view_if_needed()
        page.screenshot(path=str(shots / "model_fidelity_speed_forms_1280.png"))
        tables.nth(3).scroll_into_view_if_needed()
        page.screenshot(path=str(shots / "model_fidelity_pareto_1280.png"))
        # a table wider than the main column scrolls: some value would be out of sight
        wide = page.evaluate("""() => [...document.querySelectorAll('[data-testid="stTable"]')]
            .filter(t => t.scrollWidth > t.clientWidth + 1)
            .map(t => t.scrollWidth + ' px in ' + t.clientWidth)""")
        if "minilm" in installed_models():  # the same site names on Model Report
            page.goto(f"{base}/model_report?mr_source=sites")
            bench_app.wait_rendered(page, 900, charts=True)
            page.wait_for_timeout(1000)
            report_cut = page.evaluate(CUT_VALUES_JS)
            screenshot(page, "model_report_sites", shots)  # full length, 1440 px
            assert page.get_by_text("layer0.ffn.act").count(), "no layer0.ffn.act on the report"
            assert not report_cut, report_cut
        browser.close()
    assert not cut, cut
    assert not wide, wide
    log = log_path.read_text()
    assert "Traceback" not in log, log[-3000:]
