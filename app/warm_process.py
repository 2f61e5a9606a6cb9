"""The warm-up process (``python -m app.warm_process``), started by the server (see
:mod:`app.warm`): every page's default view, then every kernel specialisation, into numba's
on-disk cache -- and before each of those steps, what the page on screen can ask next.

The pages run as Streamlit's AppTest runs them, with their default widget values: exactly the
kernels a first visit to each page needs, with no list of them to keep in step with the pages.
Between steps the process reads the server's hint (the page just run and its settings) and
first runs that page's panel with each control moved to each of its other values (target,
granularity, calibration, scale type, saturate, precision, operator version) on a small
tensor: the next click's kernels. It runs on one core at nice 19 and ends when the server that
started it has ended.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import numpy as np

from .warm import HINT, PROCESS_NICE, ROOT, SERVER_PID

#: The lines the server's log gets (``python -m qcore.bench --cold-app`` waits for them).
PAGES_READY = "[qcore.app] warm-up: every page's default view ready in {:.1f} s"
DONE = "[qcore.app] warm-up done in {:.1f} s"


def _end_with_parent() -> None:
    """End this process when the server that started it has ended (its parent is no longer
    the server named by SERVER_PID, or the one it had at its start): a stopped or killed
    server leaves no warm-up running. On Linux the kernel kills it with its parent, even while
    the server has it stopped (see app.warm); elsewhere a thread watches the parent."""
    parent = int(os.environ.get(SERVER_PID) or os.getppid())
    with contextlib.suppress(Exception):  # not Linux: the watch alone
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it ended before that took effect
        os._exit(0)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _say(line: str) -> None:
    print(line, flush=True)


def warm_pages(between=None) -> None:
    """Every page's default view, as a first visit runs it; ``between()`` before each."""
    from streamlit.testing.v1 import AppTest

    from . import nav

    at = AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=1800)
    for page in nav.PAGES:
        if between is not None:
            between()
        t0 = time.perf_counter()
        at.switch_page(page.script)
        at.run()
        problem = f" (it raised: {at.exception[0].value[:200]})" if at.exception else ""
        if page.script == "pages/learn.py":  # the path's answers: the kernels its clicks need
            problem += warm_lesson_answers()
        _say(f"[qcore.app] warm-up: {page.title} {time.perf_counter() - t0:.1f} s{problem}")


def warm_lesson_answers() -> str:
    """Compute every Learn step's answer once (each compiles the kernels its question needs:
    packing, float8, DynamicQuantizeLinear…); '' or what failed."""
    from . import lesson

    failed = []
    for step in lesson.STEPS:
        try:
            step.answer()
        except Exception as exc:  # noqa: BLE001 - the page shows the same failure as a message
            failed.append(f"{step.title}: {exc}")
    return f" (answers failed: {'; '.join(failed)[:200]})" if failed else " (and every answer)"


def warm_lab_granularities() -> None:
    """The Quantize Lab's view per axis and blocked (its default, per tensor, the server's
    warm-up thread compiles: app.warm.warm_lab)."""
    import qcore

    from . import compute, controls, tensors

    for granularity in (qcore.PER_AXIS, qcore.BLOCKED):
        compute.lab.__wrapped__(tensors.TensorSpec(rows=64, cols=64),
                                controls.QuantConfig(granularity=granularity))


def warm_parallel_analysis() -> None:
    """The metrics kernels' parallel variants (tensors past their parallel threshold)."""
    import qcore
    from qcore import calibration, metrics

    x = np.linspace(-1, 1, 2 * metrics.PARALLEL_THRESHOLD, dtype=np.float32).reshape(2, -1)
    for gran in (qcore.PER_TENSOR, qcore.BLOCKED):
        p = calibration.choose_params(x, "int8", granularity=gran, axis=1, block_size=16)
        x_hat = p.dequantize(p.quantize(x))
        metrics.error_metrics(x, x_hat, params=p)
        metrics.group_errors(x, x_hat, p)
        metrics.histogram(x, bins=8)


# --------------------------------------------------------------------------- the next click

#: The settings prefix of each page's panel (app.controls.panel); other pages: the Lab's.
PANEL_PREFIX = {"quantize_lab": "", "format_compare": "c_", "round_trip_sweeps": "s_"}


def neighbours(page: str, settings: dict) -> list:
    """The configurations one click away from the page's panel: each control moved to each of
    its other values (QuantConfig list, the current one first)."""
    from dataclasses import replace

    import qcore
    from qcore import calibration, versions

    from . import compute, controls

    p = PANEL_PREFIX.get(page, "")
    get = settings.get
    try:
        base = controls.QuantConfig(
            opset=int(get(p + "opset", get("opset", qcore.LATEST_OPSET))),
            target=str(get(p + "target", get("target", "int8"))),
            granularity=str(get(p + "gran", qcore.PER_TENSOR)), axis=1,
            block_size=max(1, min(int(get(p + "block", 32)), 64)),
            method=str(get(p + "method", "minmax")),
            scale_dtype=str(get(p + "stype", "float")), saturate=bool(get(p + "sat", True)),
            precision=str(get(p + "prec", "")))
    except (TypeError, ValueError):
        base = controls.QuantConfig()
    # the first opset of each QuantizeLinear version
    opsets = sorted({min(o for o in compute.OPSETS if qcore.resolve(qcore.QUANTIZE, o).version
                         == v) for v in versions.versions(qcore.QUANTIZE)})
    out = [base]
    out += [replace(base, target=t) for t in compute.TARGETS]
    out += [replace(base, granularity=g) for g in qcore.GRANULARITIES]
    out += [replace(base, method=m) for m in calibration.METHODS]
    out += [replace(base, scale_dtype=s) for s in calibration.SCALE_DTYPES]
    out += [replace(base, saturate=not base.saturate)]
    out += [replace(base, precision=pr) for pr in controls.PRECISIONS]
    out += [replace(base, opset=o) for o in opsets]
    return list(dict.fromkeys(out))


class Hints:
    """The server's hint file, read when it changes."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.seen = 0.0

    def new(self) -> dict | None:
        """The hint, when the file changed since the last call; else None."""
        import json

        if not self.path:
            return None
        try:
            mtime = os.stat(self.path).st_mtime
            if mtime == self.seen:
                return None
            self.seen = mtime
            with open(self.path, encoding="utf-8") as fh:
                return json.load(fh)
        except (OSError, ValueError):
            return None


def warm_next_clicks(hints: Hints, done: set) -> None:
    """Run, for the latest hint, every configuration one click away not run yet (a newer hint
    replaces the rest of the list)."""
    import qcore

    from . import compute, tensors

    spec = tensors.TensorSpec(rows=32, cols=64)
    hint = hints.new()
    while hint is not None:
        t0, n = time.perf_counter(), 0
        page = str(hint.get("page", ""))
        for cfg in neighbours(page, dict(hint.get("settings", {}))):
            if cfg in done:
                continue
            done.add(cfg)
            n += 1
            with contextlib.suppress(qcore.QuantizationError):
                compute.lab.__wrapped__(spec, cfg)
                if page == "round_trip_sweeps" and cfg.granularity == qcore.BLOCKED:
                    compute.block_sweep.__wrapped__(spec, cfg)
            newer = hints.new()
            if newer is not None:
                hint = newer
                break
        else:
            hint = None
        if n:
            _say(f"[qcore.app] warm-up: {n} configuration(s) one click from {page or 'home'} "
                 f"{time.perf_counter() - t0:.1f} s")


def _one_core() -> None:
    """Pin this process to one core (the last), at the lowest priority: the bound on what the
    warm-up takes from the machine."""
    with contextlib.suppress(AttributeError, OSError):
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[-1]})
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, 0, PROCESS_NICE)


def main() -> None:
    _end_with_parent()
    _one_core()
    t0 = time.perf_counter()
    from qcore import kernels
    from qcore.concurrency import parallel_guard
    from qcore.warmup import jobs

    hints, done = Hints(os.environ.get(HINT)), set()
    if not kernels.is_marked("pages"):
        warm_pages(lambda: warm_next_clicks(hints, done))
        kernels.mark("pages")
    _say(PAGES_READY.format(time.perf_counter() - t0))
    warm_next_clicks(hints, done)
    warm_lab_granularities()
    for _label, job in jobs():  # qcore.warmup, one kernel at a time, the next clicks first
        warm_next_clicks(hints, done)
        with parallel_guard():
            job()
    warm_next_clicks(hints, done)
    warm_parallel_analysis()
    kernels.mark("everything")
    _say(DONE.format(time.perf_counter() - t0))


if __name__ == "__main__":
    main()
