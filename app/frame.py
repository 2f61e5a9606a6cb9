"""Every page runs inside ``streamlit_app.py`` (navigation, kernel warm-up, URL sync).

Because this app has a ``pages/`` folder, Streamlit first runs its legacy multipage mode on a
fresh server (and on every ``AppTest`` run): a request for ``/quantize_lab`` then executes
``pages/quantize_lab.py`` directly, without the entry point around it. :func:`enter`, the first
line of every page, notices that and runs the entry point instead, which runs the page inside
its frame. (Page URL paths equal the script names, so the legacy mode finds the page rather
than showing "Page not found" to the first visitor of a shared link.)
"""

from __future__ import annotations

import runpy
import threading

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

# A plain thread-local flag, not session state: a run ended by st.stop() does not keep the
# session-state writes of its `finally` blocks, which left the flag set for the next run (so
# that run skipped the entry point: no navigation, no URL sync).
_FLAG = threading.local()


def inside() -> bool:
    """True while streamlit_app.py is running a page (in this script thread)."""
    return bool(getattr(_FLAG, "inside", False))


def set_inside(value: bool) -> None:
    _FLAG.inside = bool(value)


def enter() -> None:
    """Return when the page runs inside the app's frame; otherwise run the app and stop."""
    if inside():
        return
    ctx = get_script_run_ctx()
    main = ctx.pages_manager.main_script_path if ctx is not None else "streamlit_app.py"
    runpy.run_path(str(main), run_name="__main__")
    st.stop()


class PageEnd(BaseException):  # noqa: N818 - like Streamlit's StopException, not an error
    """Raised by :func:`stop_page`; the entry point catches it and finishes the run normally.

    A BaseException (as Streamlit's own StopException), so ``except Exception`` in a page does
    not take it for an error. Unlike ``st.stop()`` it leaves the run able to send messages:
    after ``st.stop()`` every later Streamlit call raises again, so the entry point's
    ``finally`` could neither write the settings to the URL nor show its notes."""


def stop_page() -> None:
    """End this page's run early, like ``st.stop()``, but through the entry point: the URL,
    the notes and the warm-up's count of running pages are brought up to date as after a whole
    run. Outside the frame (no entry point around the page) it is ``st.stop()``."""
    if inside():
        raise PageEnd
    from . import state

    state.show_url_notes()
    state.sync_url()
    st.stop()
