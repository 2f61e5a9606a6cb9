"""The app's background warm-up waits while a page script runs, and pages wait for their share of
the compile process (threads and fake processes only, no kernels)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from app import compile_process, warm


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


_FAKE_PROCESS = """
import sys, time
print("[qcore.app] compiled: home", flush=True)
time.sleep(float(sys.argv[1]))
print("[qcore.app] compiled: lab", flush=True)
time.sleep(float(sys.argv[1]))
sys.exit(int(sys.argv[2]))
"""


def _fake_compile_process(monkeypatch, pause: float, exit_status: int = 0) -> None:
    import sys

    monkeypatch.setenv(compile_process.SWITCH, "1")
    monkeypatch.setattr(compile_process, "COMMAND",
                        [sys.executable, "-c", _FAKE_PROCESS, str(pause), str(exit_status)])
    monkeypatch.setattr(compile_process, "_compiled", set())
    monkeypatch.setattr(compile_process, "_started", False)
    compile_process.start()


def test_pages_wait_for_their_share_of_the_compile_process(monkeypatch):
    _fake_compile_process(monkeypatch, 1.0)
    t0 = time.monotonic()
    compile_process.wait_compiled("home")
    home = time.monotonic() - t0
    compile_process.wait_compiled("lab")
    lab = time.monotonic() - t0
    assert home < 0.9 <= lab < 10
    compile_process.wait_compiled("lab")  # already compiled: at once
    assert time.monotonic() - t0 - lab < 0.5
    compile_process.wait_end()
    t1 = time.monotonic()
    compile_process.wait_compiled("never reported")  # the process has ended: nothing to wait for
    assert time.monotonic() - t1 < 0.5


def test_a_failed_compile_process_releases_the_pages(monkeypatch):
    _fake_compile_process(monkeypatch, 0.2, exit_status=3)
    t0 = time.monotonic()
    compile_process.wait_compiled("kernels")  # never reported: released when the process ends
    assert time.monotonic() - t0 < 10
    assert not compile_process._running


def test_a_stuck_compile_process_releases_the_pages_after_the_timeout(monkeypatch):
    _fake_compile_process(monkeypatch, 30.0)
    try:
        t0 = time.monotonic()
        compile_process.wait_compiled("kernels", timeout=0.5)
        assert 0.4 < time.monotonic() - t0 < 5
    finally:
        compile_process._process.kill()
        compile_process.wait_end()


def test_without_the_compile_process_nothing_waits(monkeypatch):
    monkeypatch.setenv(compile_process.SWITCH, "0")
    monkeypatch.setattr(compile_process, "_running", False)
    monkeypatch.setattr(compile_process, "_started", False)
    compile_process.start()
    t0 = time.monotonic()
    compile_process.wait_compiled("home")
    assert time.monotonic() - t0 < 0.5


def test_the_compile_process_ends_with_the_server_that_started_it():
    # a "server" that starts a process watching it as the compile process does, then exits
    import subprocess
    import sys

    child = ("from app import compile_process as c; c._end_with_parent(); import time; "
             "print('started', flush=True); time.sleep(120)")
    server = ("import os, subprocess, sys; "
              "env = {**os.environ, 'QCORE_APP_SERVER_PID': str(os.getpid())}; "
              f"p = subprocess.Popen([sys.executable, '-c', {child!r}], env=env, "
              "stdout=subprocess.PIPE, text=True); "
              "assert p.stdout.readline().strip() == 'started'; print(p.pid, flush=True)")
    run = subprocess.run([sys.executable, "-c", server], cwd=Path(__file__).parent.parent,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    pid = int(run.stdout)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    if _alive(pid):
        os.kill(pid, 9)
        raise AssertionError("the compile process outlived its server")


def _alive(pid: int) -> bool:
    """Whether process `pid` still runs (an ended one its new parent has not reaped yet is a
    zombie: state Z)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
