"""The kernels compile in a process of their own, started with the first page of a server.

On a cold numba cache it compiles Home's kernels while the first page imports its modules,
then the Quantize Lab's default view while Home is read, then everything else, on the core the
page leaves free; numba's on-disk cache hands each kernel to the server. Home and the Lab wait
for their share (:func:`wait_compiled`) instead of compiling it a second time. On a 2-core
znver3 host, Home rendered 12.7 s after ``streamlit run`` with its kernels compiled by the
page, 10.7 s this way (its kernels were ready 3.0 s after the process started).

Only the standard library is imported here: the process starts before the app's own imports.
``python -m app.compile_process`` is the process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

#: Set to "0" to compile in the server alone (the tests' AppTest runs do).
SWITCH = "QCORE_APP_COMPILE_PROCESS"
#: How long a page waits for the process before compiling its kernels itself.
WAIT_S = 120.0
#: The process: this module run as a script.
COMMAND = [sys.executable, "-m", "app.compile_process"]
_READY = "[qcore.app] compiled:"
_SERVER_PID = "QCORE_APP_SERVER_PID"

_cond = threading.Condition()
_compiled: set[str] = set()  # jobs the process has reported done
_running = False
_process: subprocess.Popen | None = None
_started = False


def start() -> None:
    """Start the process, once per server (unless SWITCH is "0"), and a thread that notes
    each job it reports done."""
    global _running, _process, _started
    with _cond:
        if _started:
            return
        _started = True
    if os.environ.get(SWITCH, "1") == "0":
        return
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, _SERVER_PID: str(os.getpid()),
           "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    try:
        proc = subprocess.Popen(COMMAND, cwd=root, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
    except OSError:
        logging.getLogger("qcore.app").exception("the compile process did not start")
        return
    with _cond:
        _running = True
        _process = proc
    threading.Thread(target=_follow, args=(proc,), name="qcore-compile-process",
                     daemon=True).start()


def _follow(proc: subprocess.Popen) -> None:
    global _running
    try:
        for line in proc.stdout:
            if line.startswith(_READY):
                with _cond:
                    _compiled.add(line[len(_READY):].split()[0])
                    _cond.notify_all()
            if os.environ.get("QCORE_APP_TIMING"):
                print(line, end="", flush=True)
        code = proc.wait()
        if code:
            logging.getLogger("qcore.app").warning(
                "the compile process ended with exit status %s; the pages compile their "
                "kernels themselves", code)
    finally:
        with _cond:
            _running = False
            _cond.notify_all()


def wait_compiled(job: str, timeout: float | None = None) -> None:
    """Return once the process has compiled `job`'s kernels ("home", "lab"), has ended, or
    `timeout` seconds (WAIT_S) have passed; at once where there is none."""
    deadline = time.monotonic() + (WAIT_S if timeout is None else timeout)
    with _cond:
        while _running and job not in _compiled:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            _cond.wait(left)


def wait_end() -> None:
    """Return once the process has ended (at once where there is none)."""
    with _cond:
        while _running:
            _cond.wait()


def _home() -> None:
    """Home's example's kernels (its default int4 target), with qcore alone imported."""
    import ml_dtypes
    import numpy as np

    import qcore

    zero = np.zeros((), ml_dtypes.int4)
    y = qcore.quantize_linear(np.zeros(8, np.float32), np.float32(1), zero)
    qcore.dequantize_linear(y, np.float32(1), zero, output_dtype="float")


def _end_with_parent() -> None:
    """End this process when the server that started it has ended (its parent is no longer
    the server named by _SERVER_PID, or the one it had at its start): a server stopped or
    killed leaves no compile running."""
    parent = int(os.environ.get(_SERVER_PID) or os.getppid())

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main() -> None:
    """The process: each job, then its name on stdout; at a lower priority after the Lab's."""
    _end_with_parent()
    from_start = time.perf_counter()

    def later(name):
        def job():
            from . import warm

            getattr(warm, name)()
        return job

    for name, job in (("home", _home), ("lab", later("_warm_lab_default")),
                      ("granularities", later("_warm_lab")), ("kernels", later("_warm_all")),
                      ("analysis", later("_warm_parallel_analysis"))):
        job()
        print(_READY, name, f"({time.perf_counter() - from_start:.1f} s)", flush=True)
        if name == "lab":
            with contextlib.suppress(AttributeError, OSError):
                os.setpriority(os.PRIO_PROCESS, 0, 10)


if __name__ == "__main__":
    main()
