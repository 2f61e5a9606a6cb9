"""The app's background warm-up: it starts once no page script runs, in a process of its own
that ends with its server, and not at all when markers say an earlier one finished (threads and
fake processes; kernels only in the first step's own test)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from app import warm
from qcore import kernels


def test_wait_quiet_blocks_while_a_page_runs_and_for_the_quiet_time_after():
    done = threading.Event()

    def waiter():
        warm.wait_quiet(0.2)
        done.set()

    with warm.page_running():
        with warm.page_running():  # nested (a page run through the entry point again)
            t = threading.Thread(target=waiter)
            t.start()
            assert not done.wait(0.3)
        assert not done.wait(0.1)  # one page still running
    ended = time.monotonic()
    assert done.wait(5)
    assert time.monotonic() - ended >= 0.15  # waited for the quiet time
    t.join()


def test_wait_quiet_returns_when_nothing_ran_lately():
    with warm.page_running():
        pass
    time.sleep(0.05)
    t0 = time.monotonic()
    warm.wait_quiet(0.01)
    assert time.monotonic() - t0 < 1


def test_a_page_that_raises_still_ends_its_run():
    try:
        with warm.page_running():
            raise RuntimeError("st.stop() or an error")
    except RuntimeError:
        pass
    warm.wait_quiet(0.0)  # would block forever if the run were still counted


def test_a_page_stopped_while_its_compile_notice_ends_still_ends_its_run(monkeypatch):
    class Stop(BaseException):  # as Streamlit's StopException: the toast after st.stop() raises
        pass

    def stop_raising(self):
        raise Stop

    monkeypatch.setattr(warm.CompileWatch, "stop", stop_raising)
    with pytest.raises(Stop), warm.page_running():
        raise Stop
    assert warm._running == 0
    warm.wait_quiet(0.0)


def test_a_page_that_stops_early_ends_its_run_and_writes_its_url():
    """/quantize_lab?src=upload with no file stops after the picker (frame.stop_page): the
    warm-up's count of running pages returns to zero and the URL still holds the settings."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(Path(warm.ROOT) / "streamlit_app.py"), default_timeout=300)
    at.query_params.update({"src": "upload", "target": "int4"})
    at.switch_page("pages/quantize_lab.py")
    at.run()
    assert not at.exception
    assert warm._running == 0
    url = {k: v[0] if isinstance(v, list) else v for k, v in at.query_params.items()}
    assert url.get("src") == "upload" and "xtype" in url  # the settings drawn before the stop
    warm.wait_quiet(0.0)


def test_the_process_starts_once_quiet_and_its_lines_reach_the_log(monkeypatch, tmp_path, capfd):
    started = tmp_path / "started"
    fake = ("import os, pathlib, sys; "
            f"pathlib.Path({str(started)!r}).write_text(os.environ['QCORE_APP_WARMUP']); "
            "print('[qcore.app] warm-up done in 0.0 s')")
    monkeypatch.setattr(warm, "COMMAND", [sys.executable, "-c", fake])
    monkeypatch.setattr(kernels, "is_marked", lambda name: False)
    monkeypatch.setenv("QCORE_APP_TIMING", "1")
    monkeypatch.setenv(warm.SWITCH, "1")  # the server's own setting
    monkeypatch.setattr(warm, "PROCESS_QUIET_S", 0.2)
    with warm.page_running():
        t = threading.Thread(target=warm._start_when_quiet)
        t.start()
        time.sleep(0.4)
        assert not started.exists()  # not while a page runs
    t.join(30)
    assert started.read_text() == "0"  # the process's own page runs start no warm-up
    assert "[qcore.app] warm-up done in 0.0 s" in capfd.readouterr().out


def test_no_process_when_an_earlier_warm_up_compiled_everything(monkeypatch, tmp_path):
    started = tmp_path / "started"
    monkeypatch.setattr(warm, "COMMAND", [
        sys.executable, "-c", f"import pathlib; pathlib.Path({str(started)!r}).touch()"])
    monkeypatch.setattr(kernels, "is_marked", lambda name: name == "everything")
    monkeypatch.setattr(warm, "PROCESS_QUIET_S", 0.0)
    warm._start_when_quiet()
    time.sleep(0.5)
    assert not started.exists()


def test_markers_hold_for_the_kernel_sources_they_were_written_for(monkeypatch, tmp_path):
    monkeypatch.setattr(kernels, "cache_marker", lambda name: tmp_path / f"{name}.sha256")
    assert not kernels.is_marked("pages")
    kernels.mark("pages")
    assert kernels.is_marked("pages") and not kernels.is_marked("everything")
    monkeypatch.setattr(kernels, "SOURCES_STAMP", "another build")  # a kernel source edited
    assert not kernels.is_marked("pages")


@pytest.mark.parametrize("stopped", [False, True])
def test_the_process_ends_with_the_server_that_started_it(stopped):
    # a "server" that starts a process watching it as the warm-up process does, stops it as a
    # page run does or not, then exits
    child = ("from app import warm_process as w; w._end_with_parent(); import time; "
             "print('started', flush=True); time.sleep(120)")
    server = ("import os, signal, subprocess, sys; "
              "env = {**os.environ, 'QCORE_APP_SERVER_PID': str(os.getpid())}; "
              f"p = subprocess.Popen([sys.executable, '-c', {child!r}], env=env, "
              "stdout=subprocess.PIPE, text=True); "
              "assert p.stdout.readline().strip() == 'started'; "
              + ("p.send_signal(signal.SIGSTOP); " if stopped else "")
              + "print(p.pid, flush=True)")
    run = subprocess.run([sys.executable, "-c", server], cwd=Path(__file__).parent.parent,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    pid = int(run.stdout)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    if _alive(pid):
        os.kill(pid, 9)
        raise AssertionError("the warm-up process outlived its server")


def _alive(pid: int) -> bool:
    """Whether process `pid` still runs (an ended one its new parent has not reaped yet is a
    zombie: state Z)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_page_run_stops_the_process_and_quiet_continues_it(monkeypatch):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        monkeypatch.setattr(warm, "_process", proc)
        monkeypatch.setattr(warm, "PROCESS_QUIET_S", 0.2)
        pacer = threading.Thread(target=warm._continue_when_quiet, args=(proc,), daemon=True)
        pacer.start()
        for _ in range(2):  # stopped and continued again, page after page
            with warm.page_running():
                assert _state(proc.pid, "T"), "not stopped while a page runs"
            assert _state(proc.pid, "S"), "not continued once quiet"
    finally:
        proc.kill()
        proc.wait()
        monkeypatch.setattr(warm, "_process", None)
        with warm._cond:
            warm._cond.notify_all()


def _state(pid: int, want: str, timeout: float = 5) -> bool:
    """Whether process `pid` reaches state `want` (T stopped, S sleeping) within `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == want:
                return True
        time.sleep(0.02)
    return False


def _compile_page():
    """A page that compiles a kernel nobody has compiled (a fresh function, no disk cache);
    a listener stretches the compilation so the notice has time to show."""
    import time

    import numba
    import numpy as np
    import streamlit as st
    from numba.core import event

    from app import warm

    warm.NOTICE_AFTER_S = 0.1

    class Slow(event.Listener):
        def on_start(self, ev):
            time.sleep(2.2)

        def on_end(self, ev):
            pass

    @numba.njit(cache=False)
    def fresh_kernel(a):
        return a.sum()

    slow = Slow()
    event.register("numba:compile", slow)
    try:
        with warm.page_running():
            fresh_kernel(np.ones(3))
            fresh_kernel(np.ones(4))  # compiled already: no second notice
    finally:
        event.unregister("numba:compile", slow)
    st.write("done")


def _toasts(page, timeout: float) -> list[str]:
    """Run ``page`` in Streamlit's AppTest (it must raise nothing) and return its toasts."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(page, default_timeout=timeout)
    at.run()
    assert not at.exception
    return [t.value for t in at.toast]


def test_a_page_waiting_for_a_compiler_says_so_with_progress():
    said = _toasts(_compile_page, 120)
    assert any("Compiling fresh kernel for this CPU, once (kernel 1, " in s and "s so far" in s
               for s in said), said
    assert any(s.startswith("Compiled 1 kernel(s) for this CPU") for s in said), said


def _slow_page():
    import time

    import streamlit as st

    from app import warm

    warm.SLOW_RUN_S = 0.2
    with warm.page_running("The slow page"):
        time.sleep(1.6)
    st.write("done")


def test_a_slow_page_run_says_it_is_working_within_a_second():
    said = _toasts(_slow_page, 60)
    assert any(s.startswith("The slow page: ready in") for s in said), said


def test_the_watch_counts_only_its_own_thread():
    """A compilation in another thread (the server's warm-up) is not the page's."""
    import numba
    import numpy as np

    @numba.njit(cache=False)
    def other(a):
        return a.max()

    @numba.njit(cache=False)
    def mine(a):
        return a.min()

    watch = warm.CompileWatch.start()
    try:
        t = threading.Thread(target=other, args=(np.ones(2),))
        t.start()
        t.join()
        assert watch.count == 0
        mine(np.ones(2))
        assert watch.count == 1 and watch.name == "mine" and watch.depth == 0
    finally:
        watch.stop()
    mine(np.ones(2, np.float32))  # after the run: no watch
    assert watch.count == 1


def test_the_next_clicks_are_each_control_moved_once():
    from app import warm_process
    from app.controls import QuantConfig

    here = {"s_target": "float8e4m3fn", "s_gran": "blocked", "s_stype": "float", "s_sat": True}
    out = warm_process.neighbours("round_trip_sweeps", here)
    base = out[0]
    assert (base.target, base.granularity) == ("float8e4m3fn", "blocked")
    assert QuantConfig(target="float8e4m3fn", granularity="blocked", scale_dtype="float16") \
        in out  # the issue's slow clicks, one step from here
    assert QuantConfig(target="uint16", granularity="blocked") in out
    assert QuantConfig(target="float8e4m3fn", granularity="per-axis") in out
    assert len(out) == len(set(out))
    # a page without a panel: the Lab's settings
    assert warm_process.neighbours("home", {"target": "int4"})[0].target == "int4"


def test_the_process_runs_the_latest_hint_first(monkeypatch, tmp_path):
    import json

    from app import compute, warm_process

    ran = []

    class Stub:
        @staticmethod
        def __wrapped__(spec, cfg):
            ran.append(cfg)
            if len(ran) == 2:  # the user moves on: a newer hint replaces the rest
                hint.write_text(json.dumps({"page": "quantize_lab",
                                            "settings": {"target": "uint16"}}))
                os.utime(hint, (time.time() + 5, time.time() + 5))

    monkeypatch.setattr(compute, "lab", Stub())
    hint = tmp_path / "hint.json"
    hint.write_text(json.dumps({"page": "quantize_lab", "settings": {"target": "int4"}}))
    hints, done = warm_process.Hints(str(hint)), set()
    warm_process.warm_next_clicks(hints, done)
    assert ran[0].target == "int4" and ran[2].target == "uint16"
    n = len(ran)
    warm_process.warm_next_clicks(hints, done)  # nothing new
    assert len(ran) == n


def test_the_process_takes_one_core_at_the_lowest_priority():
    code = ("import os; from app.warm_process import _one_core; _one_core(); "
            "print(len(os.sched_getaffinity(0)), os.getpriority(os.PRIO_PROCESS, 0))")
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1],
                         capture_output=True, text=True, timeout=120, check=True)
    cores, nice = map(int, out.stdout.split())
    assert cores == 1 and nice == warm.PROCESS_NICE


def test_warm_lab_runs_every_step_without_error():
    """The server's first warm-up step catches and logs what fails (a page then compiles it
    itself), so a broken step would pass unseen: run it and see it finish."""
    warm.warm_lab()


def test_the_warm_up_computes_every_lesson_answer():
    from app import warm_process

    assert warm_process.warm_lesson_answers() == " (and every answer)"
