"""The warm-up process (``python -m app.warm_process``), started by the server (see
:mod:`app.warm`): every page's default view, then every kernel specialisation, into numba's
on-disk cache.

The pages run as Streamlit's AppTest runs them, with their default widget values: exactly the
kernels a first visit to each page needs, with no list of them to keep in step with the pages.
It ends when the server that started it has ended.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import numpy as np

from .warm import ROOT, SERVER_PID

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


def warm_pages() -> None:
    """Every page's default view, as a first visit runs it."""
    from streamlit.testing.v1 import AppTest

    from . import nav

    at = AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=1800)
    for page in nav.PAGES:
        t0 = time.perf_counter()
        at.switch_page(page.script)
        at.run()
        problem = f" (it raised: {at.exception[0].value[:200]})" if at.exception else ""
        _say(f"[qcore.app] warm-up: {page.title} {time.perf_counter() - t0:.1f} s{problem}")


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


def main() -> None:
    _end_with_parent()
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, 0, 10)
    t0 = time.perf_counter()
    import qcore
    from qcore import kernels

    if not kernels.is_marked("pages"):
        warm_pages()
        kernels.mark("pages")
    _say(PAGES_READY.format(time.perf_counter() - t0))
    warm_lab_granularities()
    qcore.warmup()
    warm_parallel_analysis()
    kernels.mark("everything")
    _say(DONE.format(time.perf_counter() - t0))


if __name__ == "__main__":
    main()
