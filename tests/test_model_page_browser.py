"""Model Fidelity served by ``streamlit run`` and driven in headless Chromium: Run, then reruns
of several widgets, a page change and back — and the server's own log holds no exception
(every rerun after Run used to log ``ArrowInvalid`` for the "All rows" table)."""

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

from tests.test_browser import BROWSER_MARKS  # noqa: E402
from tests.test_model import tiny_model  # noqa: E402
from tests.test_model_page import MANY  # noqa: E402

pytestmark = BROWSER_MARKS

BAD = ("Traceback", "ArrowInvalid", "Exception")


def test_model_fidelity_reruns_log_no_exception(tmp_path, monkeypatch):
    from playwright.sync_api import sync_playwright

    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(), model)
    monkeypatch.setenv("QCORE_REPORT_ROOTS", str(tmp_path))  # the server inherits it
    log_path = tmp_path / "server.log"
    query = urlencode({"mf_source": "path", "mf_path": str(model), "mf_recipes": MANY,
                       "mf_runtime": "reference"})
    shots = Path(os.environ.get("QCORE_SHOT_DIR", tmp_path))
    with bench_app.server(None, log_path) as (base, _, _), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 1800})
        page.goto(f"{base}/model_fidelity?{query}")
        bench_app.wait_rendered(page, 900)
        assert page.get_by_text("press Run").count()
        page.get_by_role("button", name="Run", exact=True).click()
        bench_app.wait_rendered(page, 300, charts=True)
        assert page.locator('[data-testid="stPlotlyChart"]').count() == 3
        # reruns: the budget slider, the float toggle, the "All rows" table, the export
        slider = page.get_by_role("slider").first
        slider.focus()
        for _ in range(3):
            page.keyboard.press("ArrowRight")
        bench_app.wait_rendered(page, 300, charts=True)
        page.get_by_text("A tensor may stay float32").click()
        bench_app.wait_rendered(page, 300, charts=True)
        page.get_by_text("All rows").click()
        page.get_by_role("button", name=re.compile("Build the QDQ model")).click()
        bench_app.wait_rendered(page, 300, charts=True)
        assert page.get_by_text("Download the QDQ model").count()
        page.screenshot(path=str(shots / "model_fidelity_after_run.png"), full_page=True)
        # another page and back: the results are shown without Run
        page.get_by_role("link", name="Home").first.click()
        bench_app.wait_rendered(page, 300)
        page.get_by_role("link", name="Model Fidelity").first.click()
        bench_app.wait_rendered(page, 300, charts=True)
        assert page.locator('[data-testid="stPlotlyChart"]').count() == 3
        assert "mf_recipes=" in page.url and "mf_budget=" in page.url
        browser.close()
    log = log_path.read_text()
    found = [b for b in BAD if b in log]
    assert not found, f"the server logged {found}:\n{log[-3000:]}"
