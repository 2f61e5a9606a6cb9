"""The app's cold and warm start: ``python -m app.bench_browser`` (``qcore.bench --cold-app``).

Starts ``streamlit run streamlit_app.py`` on a free port with an empty numba cache folder,
opens Home and then Quantize Lab's default view in headless Chromium (Playwright, Debian's
``/usr/bin/chromium``) and prints the seconds from the server's start until each page's run
was over and its charts were drawn; then waits until the background warm-up process has run
every page's default view, restarts the server on the cache it left (a warm restart; the
warm-up process goes on with what it had not compiled yet), opens Home in a new tab and moves
to every page through the sidebar, as a user does; last, a bare Streamlit page in a new tab
says what Streamlit's frontend alone costs on this machine. The servers are always killed. Targets
(issue 9): Home <= 10 s and Quantize Lab <= 25 s cold; every page <= 3 s warm.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from app import nav

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
COLD_TARGETS_S = {"Home": 10.0, "Quantize Lab": 25.0}
WARM_TARGET_S = 3.0
#: (title, URL path) of every page, in the app's order (default views)
PAGES = [(p.title, "" if p.script == nav.DEFAULT else nav.url_path(p))
         for p in sorted(nav.PAGES, key=lambda p: p.script != nav.DEFAULT)]
#: Pages whose default view draws no plotly chart (every other page is rendered only once its
#: first chart has drawn: charts load lazily, after the script run, so a page can look "done"
#: with none in the DOM yet)
CHARTLESS = {"Conformance", "Learn: guided path", "Model Fidelity", "Glossary"}
_WARM_DONE = re.compile(r"\[qcore\.app\] warm-up done in ([0-9.]+) s")
_PAGES_READY = re.compile(r"\[qcore\.app\] warm-up: every page's default view ready in "
                          r"([0-9.]+) s")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def server(cache_dir: Path | None, log_path: Path, timeout: float = 120,
           script: str = "streamlit_app.py") -> Iterator[tuple[str, float, int]]:
    """A fresh ``streamlit run streamlit_app.py`` (or another `script`; with
    NUMBA_CACHE_DIR=cache_dir unless None: numba's default cache); yields (base URL,
    perf_counter at its start, process id). Killed on exit."""
    exe = Path(sys.executable).parent / "streamlit"
    cmd = [str(exe) if exe.exists() else "streamlit", "run", script,
           "--server.headless", "true", "--server.port", str(port := _free_port()),
           "--browser.gatherUsageStats", "false"]
    env = {**os.environ, "QCORE_APP_TIMING": "1",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    if cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = str(cache_dir)
    log = open(log_path, "w")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + timeout
        while True:
            try:
                with urllib.request.urlopen(base + "/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"streamlit did not start: {log_path.read_text()[-1500:]}")
        yield base, t0, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def wait_rendered(page, timeout: float = 300, *, charts: bool = False,
                  settle: float = 0.3) -> float:
    """Wait until the script run is over, nothing is stale and every plotly chart has drawn
    (plotly loads lazily, so charts appear after the run: their number must stay the same for
    `settle` seconds). `charts`: the page has at least one chart, wait for the first to draw.
    Returns the time.perf_counter() at which the page first looked so (the settle time, spent
    making sure, is not the page's)."""
    done = '[data-testid="stApp"][data-test-script-state="notRunning"]'
    deadline = time.time() + timeout
    page.wait_for_selector(done, timeout=timeout * 1000)
    if charts:
        page.wait_for_selector('[data-testid="stPlotlyChart"] svg.main-svg',
                               timeout=timeout * 1000)
    last, since, rendered_at = -1, time.time(), None
    while time.time() < deadline:
        n = page.locator('[data-testid="stPlotlyChart"]').count()
        drawn = page.locator('[data-testid="stPlotlyChart"] .js-plotly-plot svg.main-svg').count()
        if n != last:
            last, since = n, time.time()
        ready = (page.locator(done).count() and not page.locator('[data-stale="true"]').count()
                 and page.locator('[data-testid="stMainBlockContainer"]').count()
                 and drawn >= n)
        if not ready:
            rendered_at = None
        elif rendered_at is None:
            rendered_at = time.perf_counter()
        if ready and time.time() - since > settle:
            return rendered_at
        page.wait_for_timeout(50)
    raise TimeoutError("the page did not finish rendering in time")


def _open(browser, url: str, charts: bool = True) -> float:
    """Seconds from navigating a new browser tab to url until the page is rendered (charts
    drawn): Streamlit's frontend loads first, then the page runs."""
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    try:
        return _timed(page, lambda: page.goto(url, timeout=300_000), url, charts)
    finally:
        page.close()


def _timed(page, action, what: str, charts: bool) -> float:
    """Seconds from `action` until the page is rendered (with its first chart drawn when
    `charts`); an exception on the page is an error."""
    t0 = time.perf_counter()
    action()
    rendered_at = wait_rendered(page, charts=charts)
    if page.locator('[data-testid="stException"]').count():
        raise RuntimeError(f"{what}: " + "; ".join(
            page.locator('[data-testid="stException"]').all_inner_texts())[:500])
    return rendered_at - t0


def _navigate(page, title: str, path: str) -> float:
    """Seconds from clicking the page's link in the sidebar (as a user moves between pages)
    until it is rendered."""
    def click():
        page.locator('[data-testid="stSidebarNav"] a', has_text=title).first.click()
        page.wait_for_function(f"() => location.pathname.endsWith('/{path}')", timeout=60_000)
    return _timed(page, click, title, title not in CHARTLESS)


#: A page with nothing of the app's: how long Streamlit's own frontend takes in a new tab here.
_BARE_SCRIPT = "import streamlit as st\n\nst.title('bare Streamlit page')\n"


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc; NaN elsewhere): on a loaded
    machine the wall clock says little, the server's own CPU time says what the pages cost."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def _wait_log(log_path: Path, pattern: re.Pattern, timeout: float) -> float | None:
    """The number in the server log's first line matching `pattern`, once there (None if not
    within `timeout` seconds)."""
    deadline = time.time() + timeout
    while True:
        m = pattern.search(log_path.read_text())
        if m:
            return float(m.group(1))
        if time.time() >= deadline:
            return None
        time.sleep(1)


def measure(warm_timeout: float = 900, progress=None) -> dict:
    """Cold: seconds from the server's start until Home, then Quantize Lab, is rendered (an
    empty numba cache). Warm: every page after a restart on the primed cache."""
    from playwright.sync_api import sync_playwright

    say = progress or (lambda _m: None)
    root = Path(tempfile.mkdtemp(prefix="qcore-cold-app-"))
    cache = root / "numba-cache"
    out: dict = {"cold": {}, "warm": {}}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                say("cold server (empty numba cache)")
                with server(cache, root / "cold.log") as (base, t0, pid):
                    out["cold"]["server_up_s"] = time.perf_counter() - t0
                    out["load_average_start"] = os.getloadavg()[0]
                    for title, path in PAGES[:2]:
                        say(f"cold: {title}")
                        opened = time.perf_counter()
                        page_s = _open(browser, f"{base}/{path}", title not in CHARTLESS)
                        out["cold"][title] = {"page_s": page_s,
                                              "since_start_s": opened + page_s - t0,
                                              "server_cpu_s": cpu_seconds(pid)}
                    say("waiting for the background warm-up to run every page's default view")
                    out["cold"]["pages_ready_s"] = _wait_log(root / "cold.log", _PAGES_READY,
                                                             warm_timeout)
                    out["cold"]["warm_up_s"] = _wait_log(root / "cold.log", _WARM_DONE, 0)
                say("warm server (primed cache)")
                with server(cache, root / "warm.log") as (base, t0, pid):
                    out["warm"]["server_up_s"] = time.perf_counter() - t0
                    tab = browser.new_page(viewport={"width": 1440, "height": 900})
                    try:
                        say("warm: Home in a new tab")
                        out["warm"]["new_tab_s"] = _timed(
                            tab, lambda: tab.goto(base, timeout=300_000), base, True)
                        for title, path in (*PAGES[1:], PAGES[0]):
                            say(f"warm: {title}")
                            out["warm"][title] = _navigate(tab, title, path)
                    finally:
                        tab.close()
                say("a bare Streamlit page in a new tab (the frontend's own load)")
                bare = root / "bare_streamlit_page.py"
                bare.write_text(_BARE_SCRIPT)
                with server(None, root / "bare.log", script=str(bare)) as (base, _, _):
                    _open(browser, base, False)  # the first load also warms Chromium's caches
                    out["warm"]["bare_new_tab_s"] = _open(browser, base, False)
                out["load_average_end"] = os.getloadavg()[0]
            finally:
                browser.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


def _verdict(seconds: float, target: float) -> str:
    return f"≤ {target:g} s: {'met' if seconds <= target else 'NOT met'}"


def format_report(result: dict) -> str:
    cold, warm = result["cold"], result["warm"]
    nan = float("nan")
    lines = ["app start in headless Chromium (seconds; from `streamlit run` unless said); load "
             f"average {result.get('load_average_start', nan):.1f} at the start, "
             f"{result.get('load_average_end', nan):.1f} at the end",
             f"cold (empty numba cache): server up {cold['server_up_s']:.1f} s",
             "| page | rendered, s since start | page load s | server CPU s since start | "
             "target |", "|---|---|---|---|---|"]
    for title, target in COLD_TARGETS_S.items():
        row = cold[title]
        lines.append(f"| {title} | {row['since_start_s']:.1f} | {row['page_s']:.1f} | "
                     f"{row.get('server_cpu_s', nan):.1f} | "
                     f"{_verdict(row['since_start_s'], target)} |")
    pages, w = cold.get("pages_ready_s"), cold.get("warm_up_s")
    lines.append("background warm-up process: every page's default view ready " + (
        f"{pages:.0f} s after it started" if pages is not None else
        "— not within the wait: the warm restart below found the cache only partly primed"))
    if pages is not None:
        lines.append(f"it compiled everything else {w:.0f} s after it started" if w is not None
                     else "its compiling of every other specialisation was still going on: "
                     "the warm server's own warm-up process carried on with it, at a lower "
                     "priority, during the warm measurements")
    lines += [f"warm restart (primed cache): server up {warm['server_up_s']:.1f} s; Home in a "
              f"new browser tab {warm.get('new_tab_s', nan):.1f} s (a bare Streamlit page "
              f"in a new tab: {warm.get('bare_new_tab_s', nan):.1f} s, Streamlit's frontend "
              "alone); then each page reached through the sidebar, as a user moves",
              "| page | page load s | target |", "|---|---|---|"]
    for title, _ in PAGES:
        lines.append(f"| {title} | {warm[title]:.1f} | {_verdict(warm[title], WARM_TARGET_S)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from qcore.bench import host

    parser = argparse.ArgumentParser(prog="python -m app.bench_browser", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wait", type=float, default=600, metavar="S",
                        help="seconds to wait for the background warm-up to run every page's "
                             "default view before the warm restart (default 600)")
    parser.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    args = parser.parse_args(argv)
    if not os.path.exists(CHROMIUM):
        print(f"error: the browser timing needs Chromium at {CHROMIUM}", file=sys.stderr)
        return 2
    print(host.describe(host.host_info()))
    result = measure(warm_timeout=args.wait,
                     progress=lambda label: print(f"  {label} ...", file=sys.stderr, flush=True))
    print(format_report(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
