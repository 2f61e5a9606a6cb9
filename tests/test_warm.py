"""The app's background warm-up waits while a page script runs (threads only, no kernels)."""

from __future__ import annotations

import threading
import time

from app import warm


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
