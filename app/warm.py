"""Kernel warm-up in the background, once per server.

The first page compiles what it needs itself (seconds, on a cold numba cache). Once it has run
and no page has run for :data:`QUIET_S` seconds, a low-priority thread compiles the Quantize
Lab's default view (where most users go next) in the server itself; then the server starts
``python -m app.warm_process``, also at a lower priority: it runs every page's default view,
then compiles every other kernel specialisation, and numba's on-disk cache hands each kernel to
the server. The process is stopped (SIGSTOP) while a page script runs and continued once none
has for :data:`PROCESS_QUIET_S` seconds, so it takes no core from a page or from the browser
drawing it. Its CPU is bounded: one core at most (it pins itself to one, and numba runs one
thread there), at nice :data:`PROCESS_NICE`, and none while a page runs or for
:data:`PROCESS_QUIET_S` seconds after. After each page run the server leaves the page and its
settings in a hint file (:data:`HINT`); between kernels the process compiles first what that
page can ask next (each control of its panel moved one step, :mod:`app.warm_process`). A page
that still meets an uncompiled kernel says so while it waits (:class:`CompileWatch`). In the server, a long warm-up held the server's GIL and numba's process-wide
compile lock for minutes: a page that needed a kernel waited behind a background compile of
another (a warm restart had pages at 3.5-3.8 s on a znver3 host). Markers beside the cache
(:func:`qcore.kernels.mark`) say what an earlier warm-up finished for these kernel sources: a
warm restart starts no process, or one for the rest.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import streamlit as st

#: Seconds without a page script running before the warm-up thread compiles the Lab's view.
QUIET_S = 1.0
#: ... before the warm-up process starts, or continues: a browser goes on drawing a page for
#: seconds after its script has run (plotly loads lazily).
PROCESS_QUIET_S = 5.0
#: Set to "0" for no warm-up (the warm-up process's own page runs, and the tests).
SWITCH = "QCORE_APP_WARMUP"
#: The process: app/warm_process.py run as a module, from the repository's root.
COMMAND = [sys.executable, "-m", "app.warm_process"]
ROOT = Path(__file__).resolve().parent.parent
#: Names the server a warm-up process watches (it ends when the server has).
SERVER_PID = "QCORE_APP_SERVER_PID"
#: Names the file where the server leaves the page on screen and its settings (JSON), which
#: the warm-up process reads between kernels to compile first what that page can ask next.
HINT = "QCORE_APP_WARM_HINT"
#: The one core (the last one) and the niceness the warm-up process runs at: it takes at most
#: one core, yields it to anything else, and is stopped while a page runs (see page_running).
PROCESS_NICE = 19

_cond = threading.Condition()
_running = 0
_last_end = 0.0
_starts = 0  # page runs started so far
_process: subprocess.Popen | None = None  # the warm-up process, while it runs


@st.cache_resource(show_spinner=False)
def warm() -> threading.Thread | None:
    """Start the warm-up, once per server: a thread that waits until no page runs, compiles
    the Lab's default view, then starts the warm-up process (unless the markers say an earlier
    one finished everything) and relays its lines to the server's log when QCORE_APP_TIMING is
    set. None where SWITCH is "0". No page waits for it."""
    global _last_end
    if os.environ.get(SWITCH, "1") == "0":
        return None
    with _cond:  # the first page's script has not entered page_running() yet: wait for it
        _last_end = time.monotonic()
    thread = threading.Thread(target=_warm_in_background, name="qcore-warmup", daemon=True)
    thread.start()
    return thread


@contextlib.contextmanager
def page_running(what: str = "") -> Iterator[None]:
    """Around a page script (`what`: the page's title): the warm-up process does not start
    meanwhile, and is stopped while it runs; a kernel the page compiles, and a run that takes
    longer than :data:`SLOW_RUN_S`, are announced (:class:`CompileWatch`)."""
    global _running, _last_end, _starts
    with _cond:
        _running += 1
        _starts += 1
        _signal(signal.SIGSTOP if hasattr(signal, "SIGSTOP") else None)
        _cond.notify_all()
    try:
        watch = CompileWatch.start(what)
        try:
            yield
        finally:
            watch.stop()  # may raise st.stop()'s or a rerun's exception (a toast after them)
    finally:  # whatever way the page ended: the count returns, the warm-up can resume
        _write_hint()
        with _cond:
            _running -= 1
            _last_end = time.monotonic()
            _cond.notify_all()


# --------------------------------------------------------------------------- no silent wait

#: Seconds a compilation runs before the page says so.
NOTICE_AFTER_S = 0.3
#: Seconds between updates of the notice (elapsed time: the progress indication).
NOTICE_EVERY_S = 1.0
#: Seconds a page run may take before it says it is still working (a busy machine, a large
#: tensor, a first compile): within a second of a click, the page shows what it is doing.
SLOW_RUN_S = 0.5


class CompileWatch:
    """The numba compilations (cache misses: a kernel this machine has not compiled yet) one
    page run makes, announced as they happen.

    numba's ``numba:compile`` event fires in the compiling thread for a real compilation only,
    never for a kernel loaded from the on-disk cache, so the watch knows exactly when a click
    waits for a compiler. A helper thread attached to the page's run shows a toast "Compiling
    … for this CPU, once" with the kernels compiled so far and the seconds elapsed, updated
    every :data:`NOTICE_EVERY_S`; it posts from its own thread, so nothing is recorded into
    ``st.cache_data``'s replay of the cached function that compiles. A run that takes longer
    than :data:`SLOW_RUN_S` without compiling says "Working on … (N s)" the same way, and
    "… ready in N s" when it ends."""

    _by_thread: dict[int, CompileWatch] = {}
    _lock = threading.Lock()
    _listening = False

    def __init__(self, thread: int, what: str = "") -> None:
        self.thread = thread
        self.what = what
        self.began = time.monotonic()
        self.working_shown = False  # the slow-run notice is on screen
        self._toast = None  # the notice, updated in place
        self.depth = 0  # nested compilations (a kernel compiles the functions it calls)
        self.count = 0  # outermost compilations started
        self.name = ""
        self.t0: float | None = None  # the first compilation's start
        self.busy_since: float | None = None
        self.shown = False
        self._done = threading.Event()
        self._notifier: threading.Thread | None = None
        self._ctx = None

    # -- lifecycle (the page's script thread)

    @classmethod
    def start(cls, what: str = "") -> CompileWatch:
        cls._listen()
        watch = cls(threading.get_ident(), what)
        with contextlib.suppress(Exception):  # outside a Streamlit run: no notice, counts only
            from streamlit.runtime.scriptrunner import get_script_run_ctx

            watch._ctx = get_script_run_ctx(suppress_warning=True)
        with cls._lock:
            cls._by_thread[watch.thread] = watch
        if what:
            watch._start_notifier()  # a slow run says so even when it compiles nothing
        return watch

    def _start_notifier(self) -> None:
        if self._notifier is not None or self._ctx is None:
            return
        self._notifier = threading.Thread(target=self._notify, daemon=True,
                                          name="qcore-compile-notice")
        with contextlib.suppress(Exception):
            from streamlit.runtime.scriptrunner import add_script_run_ctx

            add_script_run_ctx(self._notifier, self._ctx)
        self._notifier.start()

    def stop(self) -> None:
        with self._lock:
            self._by_thread.pop(self.thread, None)
        self._done.set()
        if self._notifier is not None:
            self._notifier.join(timeout=2)
        if self.shown and self.t0 is not None:
            with contextlib.suppress(Exception):
                st.toast(f"Compiled {self.count} kernel(s) for this CPU in "
                         f"{time.monotonic() - self.t0:.0f} s; numba keeps them on disk, so "
                         "this happens once.", icon=":material/check_circle:")
        elif self.working_shown and self._toast is not None:
            with contextlib.suppress(Exception):
                self._toast.toast(f"{self.what}: ready in {time.monotonic() - self.began:.0f} s.",
                                  icon=":material/check_circle:")

    # -- numba's events (the compiling thread)

    @classmethod
    def _listen(cls) -> None:
        with cls._lock:
            if cls._listening:
                return
            from numba.core import event

            event.register("numba:compile", _Listener())
            cls._listening = True

    def on_start(self, name: str) -> None:
        if self.depth == 0:
            now = time.monotonic()
            self.count += 1
            self.name = name
            self.busy_since = now
            if self.t0 is None:
                self.t0 = now
            self._start_notifier()
        self.depth += 1

    def on_end(self) -> None:
        self.depth = max(0, self.depth - 1)
        if self.depth == 0:
            self.busy_since = None

    def text(self) -> str:
        """What the notice says now."""
        elapsed = 0.0 if self.t0 is None else time.monotonic() - self.t0
        return (f"Compiling {self.name or 'a kernel'} for this CPU, once (kernel "
                f"{self.count}, {elapsed:.0f} s so far); numba keeps it on disk for next time.")

    def working_text(self) -> str:
        """What the slow-run notice says now."""
        return (f"Working on {self.what}… ({time.monotonic() - self.began:.0f} s so far; "
                "every number is computed by qcore as you asked)")

    def _notify(self) -> None:
        while not self._done.wait(NOTICE_EVERY_S if (self.shown or self.working_shown)
                                  else NOTICE_AFTER_S / 3):
            now = time.monotonic()
            since = self.busy_since
            compiling = since is not None and now - since >= NOTICE_AFTER_S
            slow = bool(self.what) and now - self.began >= SLOW_RUN_S
            if not compiling and not slow:
                continue
            text = self.text() if compiling else self.working_text()
            with contextlib.suppress(Exception):
                if self._toast is None:
                    self._toast = st.toast(text, icon=":material/hourglass_top:",
                                           duration="long")
                else:
                    self._toast.toast(text, icon=":material/hourglass_top:")
                if compiling:
                    self.shown = True
                else:
                    self.working_shown = True


def _kernel_name(dispatcher: object) -> str:
    """A readable name for the kernel a numba dispatcher compiles ('quantize float8 blocks')."""
    fn = getattr(dispatcher, "py_func", None)
    name = getattr(fn, "__name__", "") or "a kernel"
    return name.strip("_").replace("_", " ")


try:
    from numba.core.event import Listener as _Base
except ImportError:  # pragma: no cover - numba is a dependency
    _Base = object  # type: ignore[assignment,misc]


class _Listener(_Base):  # type: ignore[misc,valid-type]
    """Hands numba's compile events to the watch of the thread that compiles, if any."""

    def on_start(self, event) -> None:
        watch = CompileWatch._by_thread.get(threading.get_ident())
        if watch is not None:
            watch.on_start(_kernel_name((event.data or {}).get("dispatcher")))

    def on_end(self, event) -> None:
        watch = CompileWatch._by_thread.get(threading.get_ident())
        if watch is not None:
            watch.on_end()


def wait_quiet(quiet_s: float | None = None) -> None:
    """Return once no page script runs and none has ended in the last `quiet_s` seconds."""
    quiet_s = QUIET_S if quiet_s is None else quiet_s
    with _cond:
        while True:
            if _running:
                _cond.wait()
                continue
            left = _last_end + quiet_s - time.monotonic()
            if left <= 0:
                return
            _cond.wait(left)


class _QuietWarmup(logging.Filter):
    """Drops Streamlit's "missing ScriptRunContext" warnings of the warm-up thread (it runs the
    Lab's pipeline, whose cached tensors are Streamlit resources, outside any page run)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.threadName != "qcore-warmup"


def _warm_in_background() -> None:
    logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context").addFilter(
        _QuietWarmup())
    with contextlib.suppress(AttributeError, OSError):  # not Linux: the normal priority
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)  # this thread only
    wait_quiet()
    t0 = time.perf_counter()
    try:
        warm_lab()
    except Exception:  # noqa: BLE001 - a kernel that fails here fails later with a message
        logging.getLogger("qcore.app").exception("warming up the Lab's kernels failed")
    if os.environ.get("QCORE_APP_TIMING"):
        print(f"[qcore.app] warm-up: the Lab's view in the server {time.perf_counter() - t0:.1f}"
              " s", flush=True)
    _start_when_quiet()


def warm_lab() -> None:
    """Home's example and the Quantize Lab's default view on a small tensor (the kernel
    specialisations of the default 1024x1024 view), then the kernels every other setting of the
    Lab shares, whatever its target: the kernels of blocked and per-axis integer codes of 8 bits
    or fewer (int8's), the per-group error statistics of any granularity but per-tensor, the
    step table's kernels at each scale type and for small float targets, the element rules of
    the 16-bit scale types (:func:`qcore.warmup.shared_rules`), and int8's parallel dequantize
    (the block-size sweep's clipping bounds dequantize a code per scale, millions of them at a
    block size of 1)."""
    import numpy as np

    import qcore
    from qcore import calibration, metrics
    from qcore.config import PARALLEL_THRESHOLD
    from qcore.warmup import shared_rules

    from . import compute, controls, tensors

    compute.home_example.__wrapped__(0.25, 0.0, "int4")  # not st.cache_data's wrappers
    small = tensors.TensorSpec(rows=64, cols=64)
    compute.lab.__wrapped__(small, controls.QuantConfig())
    x = tensors.load(small)
    wide = tensors.load(tensors.TensorSpec(rows=64, cols=1024))  # more blocks than a direct
    for gran in (qcore.BLOCKED, qcore.PER_AXIS):  # call takes: the driver, as 1024 x 1024 runs
        p = calibration.choose_params(wide, "int8", granularity=gran, axis=1, block_size=32)
        p.round_trip(wide)  # codes of 8 bits or fewer: one kernel for them all
    metrics.group_errors(wide, wide, p, wide.shape)
    metrics.error_metrics(wide, wide, params=p)
    for target, scale_dtype in (("int8", "float16"), ("int8", "bfloat16"),
                                ("float8e4m3fn", "float")):
        p = calibration.choose_params(x, target, scale_dtype=scale_dtype)
        y = np.zeros(x.shape, qcore.get_format(target).dtype)
        metrics.walkthrough(x, p, target, [0], y=y, x_hat=x)
    shared_rules()
    qcore.dequantize_linear(np.zeros(PARALLEL_THRESHOLD, np.int8), np.ones(2, np.float32),
                            axis=0, block_size=PARALLEL_THRESHOLD // 2)


def _start_when_quiet() -> None:
    from qcore import kernels

    wait_quiet(PROCESS_QUIET_S)
    timing = bool(os.environ.get("QCORE_APP_TIMING"))
    if kernels.is_marked("everything"):
        if timing:
            print("[qcore.app] warm-up: an earlier one compiled everything", flush=True)
        return
    env = {**os.environ, SWITCH: "0", SERVER_PID: str(os.getpid()), HINT: str(hint_file()),
           "NUMBA_NUM_THREADS": "1",  # one core: its parallel kernels compile, run serially
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    global _process
    try:
        proc = subprocess.Popen(COMMAND, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    except OSError:
        logging.getLogger("qcore.app").exception("the warm-up process did not start")
        return
    with _cond:
        _process = proc
        if _running:  # a page started while the process did
            _signal(signal.SIGSTOP if hasattr(signal, "SIGSTOP") else None)
    threading.Thread(target=_continue_when_quiet, args=(proc,), name="qcore-warmup-pacer",
                     daemon=True).start()
    for line in proc.stdout:
        if timing:
            print(line, end="", flush=True)
    if proc.wait():
        logging.getLogger("qcore.app").warning(
            "the warm-up process ended with exit status %s; pages compile what they need "
            "on their first run", proc.returncode)
    with _cond:
        _process = None
        _cond.notify_all()


def hint_file() -> Path:
    """The file this server's hints go to (named in the process's environment)."""
    import tempfile

    return Path(tempfile.gettempdir()) / f"qcore-warm-hint-{os.getpid()}.json"


def _write_hint() -> None:
    """Leave the page just run and its settings for the warm-up process (warm-up on only)."""
    if os.environ.get(SWITCH, "1") == "0":
        return
    with contextlib.suppress(Exception):
        import json

        from . import state

        page, settings = state.snapshot()
        simple = {k: v for k, v in settings.items()
                  if isinstance(v, (bool, int, float, str)) and not k.startswith("_")}
        tmp = hint_file().with_suffix(".tmp")
        tmp.write_text(json.dumps({"page": page, "settings": simple}))
        tmp.replace(hint_file())


def _signal(sig) -> None:
    """Send `sig` to the warm-up process, if one runs (call with _cond held)."""
    if _process is not None and sig is not None and _process.poll() is None:
        with contextlib.suppress(OSError):
            _process.send_signal(sig)


def _continue_when_quiet(proc: subprocess.Popen) -> None:
    """While the process runs: continue it whenever no page has run for PROCESS_QUIET_S
    seconds (a page's start stops it, see page_running)."""
    if not hasattr(signal, "SIGCONT"):
        return
    while proc.poll() is None:
        wait_quiet(PROCESS_QUIET_S)
        with _cond:
            if _running:
                continue
            _signal(signal.SIGCONT)
            starts = _starts
            while _starts == starts and _process is proc:
                _cond.wait()
