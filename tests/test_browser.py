"""The served app in a real headless Chromium: every page renders, no exception, every chart.

The app is started with the README's command (``streamlit run streamlit_app.py``) and driven
with Playwright's Python package on Debian's ``/usr/bin/chromium``. Screenshots of every page
go to a temporary folder (printed), or to ``docs/screenshots/<page>.png`` when
``QCORE_SCREENSHOTS=docs`` is set (regenerating the README's pictures is a deliberate act, never
a side effect of the tests). Skipped only when Chromium is absent.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from app import bench_browser as bench_app
from app.bench_browser import ARGS, CHROMIUM

ROOT = Path(__file__).resolve().parent.parent
DOC_SHOTS = ROOT / "docs" / "screenshots"
#: (screenshot name, URL path and query) of every page, in the app's order. The queries pick
#: views worth a screenshot (real tensors from datasets/); AppTest covers every default.
PAGES = [
    ("learn", "learn?step=2"),
    ("home", ""),
    ("quantize_lab", "quantize_lab?src=dataset&ds=layer5.ffn.residual&target=int4&gran=blocked"
                     "&axis=1&block=32&logy=1"),
    ("format_compare", "format_compare?src=dataset&ds=layer0.ffn.out.weight&c_gran=per-axis"
                       "&c_axis=0"),
    ("round_trip_sweeps", "round_trip_sweeps?dist=laplace&s_target=int4"),
    ("model_report", "model_report?mr_source=datasets"),
    ("model_fidelity", "model_fidelity"),
    ("dynamic_quantization", "dynamic_quantization?src=dataset&ds=layer0.ffn.act&d_logy=1"),
    ("number_formats", "number_formats"),
    ("operator_versions", "operator_versions"),
    ("conformance", "conformance"),
    ("glossary", "glossary"),
]

#: Every page's title by its name (the URL path; Home's is "home"), from the benchmark's list.
_TITLE_OF = {path or "home": title for title, path in bench_app.PAGES}


def draws_charts(name: str) -> bool:
    """Whether the page's default view draws plotly charts."""
    return _TITLE_OF[name] not in bench_app.CHARTLESS


#: The marks of every test that drives the served app in Chromium (this file's and the model
#: pages' browser tests): one server and one browser, on one test worker.
BROWSER_MARKS = [
    pytest.mark.browser,
    pytest.mark.xdist_group("browser"),
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is not installed"),
]
pytestmark = BROWSER_MARKS


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[str]:
    """`streamlit run streamlit_app.py` on a free port (numba's default cache); yields its base
    URL. The app prints each script run's duration to the log (QCORE_APP_TIMING=1)."""
    log_path = tmp_path_factory.mktemp("streamlit") / "server.log"
    with bench_app.server(None, log_path) as (base, _, _):
        SERVER_LOGS[base] = log_path
        yield base


SERVER_LOGS: dict[str, Path] = {}


def script_times(base: str, page_title: str) -> list[float]:
    """Durations of the server's script runs for one page, from its log."""
    pattern = re.compile(rf"\[qcore\.app\] {re.escape(page_title)}: script ran ([0-9.]+) s")
    return [float(m.group(1)) for m in pattern.finditer(SERVER_LOGS[base].read_text())]


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


_FIRST_RUN = [True]


def wait_idle(page, *, charts: bool = True, timeout: float = 180) -> None:
    """Wait until the script run is over and every plotly chart has drawn its svg. The
    server's first run compiles the numba kernels (minutes on a fresh machine): wait longer."""
    if _FIRST_RUN[0]:
        timeout, _FIRST_RUN[0] = max(timeout, 900), False
    bench_app.wait_rendered(page, timeout, charts=charts, settle=0.8)


def choose(page, label: str, value: str, param: str) -> float:
    """Pick `value` in the selectbox labelled `label`; wait until the URL says param=value.
    Returns the page clock (ms) at the click. Retries when the click did not land."""
    for attempt in range(3):
        page.locator('[data-testid="stSelectbox"]', has_text=label).click()
        option = page.get_by_role("option", name=re.compile(rf"^{re.escape(value)}\b")).first
        option.wait_for()
        t0 = page.evaluate("performance.now()")
        option.click()
        try:
            page.wait_for_function(f"() => location.href.includes('{param}={value}')",
                                   timeout=30_000)
            return t0
        except Exception:  # noqa: BLE001 - the dropdown closed under the click: try again
            if attempt == 2:
                raise
            page.keyboard.press("Escape")
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    """Where screenshots go: docs/screenshots only when asked (QCORE_SCREENSHOTS=docs)."""
    if os.environ.get("QCORE_SCREENSHOTS") == "docs":
        return DOC_SHOTS
    folder = tmp_path_factory.mktemp("screenshots")
    print(f"\nscreenshots in {folder}")
    return folder


def screenshot(page, name: str, folder: Path) -> None:
    """Full-length screenshot (the main area scrolls inside the window, so grow the window)."""
    height = page.evaluate(
        "() => { const m = document.querySelector('[data-testid=\"stMain\"]');"
        " return m ? m.scrollHeight : document.body.scrollHeight; }")
    page.set_viewport_size({"width": 1440, "height": int(min(max(height, 900), 7000))})
    page.wait_for_timeout(800)
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)
    page.set_viewport_size({"width": 1440, "height": 900})


@pytest.mark.parametrize("name,path", PAGES, ids=[p[0] for p in PAGES])
def test_page_renders(server, browser, shots, name, path):
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    try:
        page.goto(f"{server}/{path}", timeout=120_000)
        wait_idle(page, charts=draws_charts(name))
        assert page.locator('[data-testid="stException"]').count() == 0, \
            page.locator('[data-testid="stException"]').all_inner_texts()
        alerts = page.locator('[data-testid="stAlertContentError"]').all_inner_texts()
        assert not [a for a in alerts if "Something went wrong" in a], alerts
        charts = page.locator('[data-testid="stPlotlyChart"]')
        if draws_charts(name):
            assert charts.count() > 0, f"{name} shows no chart"
        for i in range(charts.count()):
            chart = charts.nth(i)
            assert chart.locator(".js-plotly-plot").count() == 1, f"chart {i} of {name}"
            assert chart.locator(".js-plotly-plot svg.main-svg").count() >= 1, \
                f"chart {i} of {name} drew no svg"
        screenshot(page, name, shots)
    finally:
        page.close()


#: Metric cards whose label, value or delta is cut ("…": an element inside the card whose
#: content is wider than its box, and which hides the rest).
CUT_METRICS_JS = """() => { const out = [];
  for (const m of document.querySelectorAll('[data-testid="stMetric"]')) {
    for (const e of [m, ...m.querySelectorAll('*')]) {
      if (e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflow !== 'visible') {
        out.push(m.innerText.replace(/\\n+/g, ' | ')); break; } } }
  return out; }"""

#: Every page with metric cards, at views with the longest values (recipe names, float8
#: extremes). Model Fidelity is left out while its page is reworked (issue 39, item 3): it cuts
#: "Model runs".
CUT_VIEWS = ["quantize_lab", "format_compare", "round_trip_sweeps", "dynamic_quantization",
             "conformance", "number_formats", "number_formats?nf_format=float8e5m2fnuz",
             "model_report?mr_source=datasets&mr_recipes=float8e4m3fn:per-tensor,int8:per-axis"]


def test_no_metric_value_is_cut(server, browser):
    """Every metric card shows its whole label, value and delta on a narrow laptop window
    (1024 px, the sidebar open; the cards wrap onto further rows rather than shrink)."""
    page = browser.new_page(viewport={"width": 1024, "height": 900})
    cut = {}
    try:
        for path in CUT_VIEWS:
            page.goto(f"{server}/{path}", timeout=120_000)
            wait_idle(page, charts=False)
            assert page.locator('[data-testid="stMetric"]').count() > 0, path
            found = page.evaluate(CUT_METRICS_JS)
            if found:
                cut[path] = found
    finally:
        page.close()
    assert not cut, cut


#: Any value cut on screen: a text element (label, chip, button, metric, caption) whose content
#: is wider than its box and which hides the rest or ends it with "…"; a field (a selectbox
#: shows its choice in an <input>) whose text is wider than the field; a table whose columns
#: run past its frame (Streamlit's tables draw on a canvas: a hidden column is one that scrolls).
#: Formulas may overflow their box by a pixel or two of KaTeX's margins.
CUT_VALUES_JS = """() => { const out = []; const seen = new Set();
  const roots = [...document.querySelectorAll('[data-testid="stSidebar"], [data-testid="stMain"]')];
  for (const r of roots) for (const e of r.querySelectorAll('*')) {
    if (e.closest('.js-plotly-plot, [data-testid="stDataFrame"], [data-testid="stCode"], pre, '
                  + '.katex-mathml')) continue;  // KaTeX's MathML copy is hidden by design
    if (!e.innerText || !e.innerText.trim() || e.getClientRects().length === 0) continue;
    const cs = getComputedStyle(e);
    const hides = cs.overflowX !== 'visible' || cs.textOverflow === 'ellipsis';
    const slack = e.closest('.katex-display') ? 3 : 1;
    if (hides && e.scrollWidth > e.clientWidth + slack) {
      const t = e.innerText.trim().replace(/\\s+/g, ' ').slice(0, 80);
      if (!seen.has(t)) { seen.add(t); out.push('text: ' + t); } } }
  for (const r of roots) for (const e of r.querySelectorAll('input')) {
    if (['file', 'hidden', 'checkbox', 'radio', 'range'].includes(e.type)) continue;
    if (e.getClientRects().length && e.scrollWidth > e.clientWidth + 1)
      out.push('field: ' + e.value.slice(0, 80)); }
  for (const d of document.querySelectorAll('[data-testid="stDataFrame"]')) {
    const s = d.querySelector('.dvn-scroller');
    if (s && s.scrollWidth > s.clientWidth + 1) {
      const head = [...d.querySelectorAll('[role="columnheader"]')].map(h => h.innerText);
      out.push('table: ' + s.scrollWidth + ' px of columns in ' + s.clientWidth + ' px ' +
               head.join(', ').slice(0, 80)); } }
  return out; }"""

#: The views the issue found cut (sidebar labels and chips, Format Compare's recipes, Model
#: Report's recipe table), and every page's default view.
WHOLE_VIEWS = [
    "", "learn?step=6", "quantize_lab?src=dataset&ds=layer5.ffn.residual&target=int4"
    "&gran=blocked&axis=1&block=32", "format_compare",
    "format_compare?c_mode=recipes&src=dataset&ds=layer0.ffn.out.weight",
    "round_trip_sweeps", "dynamic_quantization",
    "model_report?mr_source=datasets&mr_recipes=int8:per-axis,uint8:per-tensor,int4:blocked32,"
    "int4:blocked128,float8e4m3fn:per-tensor,float8e4m3fn:per-axis,mxfp8,mxfp4",
    "model_fidelity?mf_act=dynamic", "number_formats", "operator_versions", "conformance",
]


WIDTHS = (1280, 1600)


def test_no_value_is_cut(server, browser, shots):
    """At 1280 px and wider (the sidebar open) no label, chip, field, metric or table column is
    cut: each shows its whole text (the full text on hover is not enough for a number). Each
    view is loaded once and laid out at every width (a resize reflows without a script run)."""
    page = browser.new_page(viewport={"width": WIDTHS[0], "height": 900})
    cut = {}
    try:
        for path in WHOLE_VIEWS:
            page.set_viewport_size({"width": WIDTHS[0], "height": 900})
            page.goto(f"{server}/{path}", timeout=120_000)
            wait_idle(page, charts=False)
            for width in WIDTHS:
                page.set_viewport_size({"width": width, "height": 900})
                page.wait_for_timeout(1500)  # tables and charts lay out after the run/resize
                found = page.evaluate(CUT_VALUES_JS)
                if found:
                    cut[f"{width} px {path}"] = found
                    screenshot(page, f"cut_{width}_{path.split('?')[0] or 'home'}", shots)
                    page.set_viewport_size({"width": width, "height": 900})
    finally:
        page.close()
    assert not cut, cut


def test_settings_travel_in_the_url(server, browser):
    """Change a setting: the URL records it; opening that URL restores it."""
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    try:
        page.goto(f"{server}/quantize_lab?rows=256&cols=512", timeout=120_000)
        wait_idle(page)
        choose(page, "Target type", "float8e4m3fn", "target")
        wait_idle(page)
        assert "target=float8e4m3fn" in page.url, page.url
        assert "rows=256" in page.url and "cols=512" in page.url, page.url
        shared = page.url
    finally:
        page.close()
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    try:
        page.goto(shared, timeout=120_000)
        wait_idle(page)
        box = page.locator('[data-testid="stSelectbox"]', has_text="Target type")
        assert box.locator("input").input_value().startswith("float8e4m3fn")
        caption = page.locator('[data-testid="stMain"] [data-testid="stCaptionContainer"]').first.inner_text()
        assert "256" in caption and "512" in caption, caption
    finally:
        page.close()


_WATCH = """() => {
    window.__qxLast = performance.now();
    const main = document.querySelector('[data-testid="stMainBlockContainer"]');
    new MutationObserver(() => { window.__qxLast = performance.now(); })
        .observe(main, {subtree: true, childList: true, attributes: true, characterData: true});
}"""


def test_rerender_time_on_1mi_elements(server, browser):
    """A widget change on a 1 Mi-element tensor: time from the click to the last change of the
    page (every chart redrawn), measured in the browser."""
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    try:
        page.goto(f"{server}/quantize_lab?rows=1024&cols=1024", timeout=120_000)
        wait_idle(page)
        page.evaluate(_WATCH)
        times = []
        for target in ("int4", "float8e4m3fn", "uint8", "int8", "float4e2m1", "int16"):
            t0 = choose(page, "Target type", target, "target")
            wait_idle(page)
            times.append((page.evaluate("window.__qxLast") - t0) / 1000)
        runs = script_times(server, "Quantize Lab")[-len(times):]
        times.sort()
        median = times[len(times) // 2]
        print(f"\nre-render after a widget change, 1 Mi elements: in Chromium (click to last "
              f"change of the page) {', '.join(f'{t:.2f}' for t in times)} s, median "
              f"{median:.2f} s; script runs on the server {', '.join(f'{t:.3f}' for t in runs)} s")
        # every click re-rendered the page; the < 1 s target is a figure to report, not a timed
        # assertion (the machines are shared and noisy)
        assert len(times) == 6 and all(t > 0 for t in times), times
    finally:
        page.close()


# --------------------------------------------------------------------------- across pages

#: The pages of the tour, by name (Model Report reads checkpoints, not the chosen tensor).
TITLES = {name: title for name, title in _TITLE_OF.items() if name != "model_report"}
PICKER_PAGES = ("quantize_lab", "format_compare", "round_trip_sweeps", "dynamic_quantization")
#: The tensor and the Quantize Lab settings chosen at the start (all non-default).
CHOSEN = {"dist": "laplace", "rows": "96", "cols": "160", "seed": "5", "target": "int4",
          "opset": "23", "gran": "blocked", "block": "16"}


def go_to(page, name: str) -> None:
    """Click the page's link in the sidebar navigation; wait for its run to finish."""
    page.locator('[data-testid="stSidebarNav"] a', has_text=TITLES[name]).first.click()
    page.wait_for_function(f"() => location.pathname.endsWith('/{'' if name == 'home' else name}')"
                           f" || {'true' if name == 'home' else 'false'}", timeout=60_000)
    page.wait_for_timeout(300)
    wait_idle(page, charts=draws_charts(name))


def field(page, testid: str, label: str) -> str:
    """The text a labelled number input or selectbox shows."""
    box = page.locator(f'[data-testid="{testid}"]', has_text=label).first
    return box.locator("input").first.input_value()


def selected(page, label: str) -> str:
    """The selectbox's shown option (its visible text)."""
    box = page.locator('[data-testid="stSelectbox"]', has_text=label).first
    return box.locator("input").first.input_value().strip()


def active_segment(page, label: str) -> str:
    group = page.locator('[data-testid="stButtonGroup"]', has_text=label).first
    return group.locator('button[aria-checked="true"]').first.inner_text().strip()


def main_text(page) -> str:
    return page.locator('[data-testid="stMain"]').inner_text()


def assert_page_agrees(page, name: str, where: str, *, upload: str = "") -> None:
    """The sidebar, the panel, the results and the URL agree with what was chosen."""
    assert page.locator('[data-testid="stException"]').count() == 0, where
    url = page.url
    if name not in PICKER_PAGES:
        return
    text = main_text(page)
    if upload:
        assert active_segment(page, "Source") == "Upload", where
        assert f"Tensor {upload}" in text, (where, text[:300])
    else:
        assert active_segment(page, "Source") == "Synthetic", where
        assert field(page, "stNumberInput", "Rows") == CHOSEN["rows"], where
        assert field(page, "stNumberInput", "Columns") == CHOSEN["cols"], where
        assert field(page, "stNumberInput", "Seed") == CHOSEN["seed"], where
        assert selected(page, "Distribution").lower().startswith(CHOSEN["dist"]), where
        assert f"Tensor Laplace {CHOSEN['rows']}×{CHOSEN['cols']}" in text, (where, text[:300])
        for key in ("rows", "cols", "seed", "dist"):
            assert f"{key}={CHOSEN[key]}" in url, (where, url)
    if name == "quantize_lab":
        assert selected(page, "Target type").startswith(CHOSEN["target"]), where
        assert selected(page, "Opset").startswith(CHOSEN["opset"]), where
        assert active_segment(page, "Granularity") == "blocked", where
        assert field(page, "stNumberInput", "Block size") == CHOSEN["block"], where
        assert f"y is {CHOSEN['target']}" in text and "ran QuantizeLinear-23" in text, where
        for key in ("target", "opset", "gran", "block"):
            assert f"{key}={CHOSEN[key]}" in url, (where, url)


def test_choices_hold_across_every_pair_of_pages_and_an_upload(server, browser, shots,
                                                               tmp_path):
    """Click through the pages in the sidebar navigation, forward and back, then upload a file
    and visit the pages again: every control shows what was chosen, the results and the URL
    agree with it."""
    import numpy as np

    page = browser.new_page(viewport={"width": 1440, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    try:
        query = "&".join(f"{k}={v}" for k, v in CHOSEN.items())
        page.goto(f"{server}/quantize_lab?{query}", timeout=120_000)
        wait_idle(page)
        assert_page_agrees(page, "quantize_lab", "start")
        # every page entered from two different pages: the sidebar's order forward, then
        # backward (AppTest's test_every_pair_of_pages_keeps_tensor_settings_and_url walks
        # every ordered pair; a browser tour of all 132 costs minutes of CI for no new path)
        names = list(TITLES)
        i = names.index("quantize_lab")
        ring = names[i:] + names[:i]
        tour = ring + ["quantize_lab"] + ring[:0:-1] + ["quantize_lab"]
        for a, b in zip(tour, tour[1:]):
            go_to(page, b)
            assert_page_agrees(page, b, f"{a} → {b}")
        # through an upload: float64 values, noted as converted
        path = tmp_path / "upload64.npy"
        np.save(path, np.random.default_rng(1).standard_normal((40, 72)))
        page.locator('[data-testid="stButtonGroup"]', has_text="Source").first \
            .get_by_role("radio", name="Upload").click()
        wait_idle(page, charts=False)
        page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(str(path))
        page.wait_for_function("() => document.body.innerText.includes('Tensor upload64')",
                               timeout=120_000)
        wait_idle(page)
        assert_page_agrees(page, "quantize_lab", "upload", upload="upload64")
        assert "float64" in main_text(page)
        screenshot(page, "quantize_lab_upload", shots)
        for a, b in zip(["quantize_lab", *PICKER_PAGES[1:], "home"],
                        [*PICKER_PAGES[1:], "home", "quantize_lab"]):
            go_to(page, b)
            assert_page_agrees(page, b, f"{a} → {b} (upload)", upload="upload64")
        offline = [e for e in errors if "fonts.g" in e or "ERR_NAME" in e or "ERR_INTERNET" in e]
        assert not offline, offline
    finally:
        page.close()


def test_guided_path_in_the_browser(server, browser, shots):
    """Home leads to the guided path; a prediction reveals qcore's answer only once chosen;
    "Try this" opens the Lab with the step's settings in the URL."""
    from app import lesson

    page = browser.new_page(viewport={"width": 1440, "height": 1100})
    try:
        page.goto(server, timeout=120_000)
        wait_idle(page)
        page.get_by_role("button", name=re.compile("Start the guided path")).click()
        page.wait_for_function("() => location.pathname.endsWith('/learn')", timeout=60_000)
        wait_idle(page, charts=False)
        assert "step=1" in page.url, page.url
        page.get_by_role("button", name=re.compile("Next step")).click()
        page.wait_for_function("() => location.href.includes('step=2')", timeout=60_000)
        wait_idle(page, charts=False)
        main = page.locator('[data-testid="stMain"]')
        assert "Not quite" not in main.inner_text() and "Right:" not in main.inner_text()
        page.locator('[data-testid="stRadio"] label').filter(has_text="3").first.click()
        page.wait_for_function("() => document.body.innerText.includes('Not quite')",
                               timeout=60_000)
        screenshot(page, "learn", shots)
        page.get_by_role("button", name=re.compile("^Try this")).click()
        page.wait_for_function("() => location.pathname.endsWith('/quantize_lab')",
                               timeout=60_000)
        wait_idle(page)
        from urllib.parse import parse_qs, urlparse

        from app import state

        query = parse_qs(urlparse(page.url).query, keep_blank_values=True)
        for key, value in lesson.STEPS[1].try_settings.items():
            assert query.get(key) == [state.encode(value)], (key, page.url)
        assert "Step by step on your own numbers" in main.inner_text()
    finally:
        page.close()


def test_one_history_entry_per_move_and_back_undoes_a_setting(server, browser):
    """Each sidebar move adds one browser-history entry (not one for the path and another for
    the settings the page then writes), a settings change adds one, and Back undoes it."""
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    try:
        page.goto(f"{server}/quantize_lab", timeout=120_000)
        wait_idle(page)
        start = page.evaluate("history.length")
        go_to(page, "format_compare")
        page.wait_for_timeout(1000)  # the settings' URL write comes after the run's start
        assert page.evaluate("history.length") == start + 1
        go_to(page, "number_formats")
        page.wait_for_timeout(1000)
        assert page.evaluate("history.length") == start + 2
        assert "nf_format=float8e4m3fn" in page.url
        choose(page, "Format", "float4e2m1", "nf_format")
        wait_idle(page)
        assert page.evaluate("history.length") == start + 3
        page.go_back()
        page.wait_for_function("() => location.href.includes('nf_format=float8e4m3fn')",
                               timeout=60_000)
        wait_idle(page)
        assert selected(page, "Format").startswith("float8e4m3fn"), selected(page, "Format")
        page.go_back()
        page.wait_for_function("() => location.pathname.endsWith('/format_compare')",
                               timeout=60_000)
    finally:
        page.close()
