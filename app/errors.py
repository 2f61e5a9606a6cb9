"""Errors as messages, never tracebacks.

A :class:`qcore.QuantizationError` is the engine telling the user what is invalid and what would
be valid: it is shown as it is. Anything else is a bug; it is shown briefly (no traceback) and
logged on the server.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import streamlit as st

import qcore

from . import frame

T = TypeVar("T")
_log = logging.getLogger("qcore.app")

#: The prefix of the message shown for an unexpected exception (tests look for it).
UNEXPECTED = "Something went wrong inside the app"


def show(exc: BaseException, *, what: str = "") -> None:
    """Display an exception as a message box (no traceback)."""
    prefix = f"**{what}** — " if what else ""
    if isinstance(exc, qcore.QuantizationError):
        st.error(f"{prefix}{exc}", icon=":material/block:")
    else:
        _log.exception("unexpected error in the app", exc_info=exc)
        st.error(f"{UNEXPECTED} ({type(exc).__name__}: {exc}). {prefix}The settings may be "
                 f"unusual; try other values.", icon=":material/error:")


def attempt(fn: Callable[..., T], *args: Any, what: str = "", **kwargs: Any) -> T | None:
    """``fn(*args, **kwargs)``, or None after showing why it failed."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - every failure becomes a message
        show(exc, what=what)
        return None


def require(fn: Callable[..., T], *args: Any, what: str = "", **kwargs: Any) -> T:
    """Like :func:`attempt`, but stops the page (after the message) when it fails."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001
        show(exc, what=what)
        frame.stop_page()
        raise  # unreachable: stop_page() raises
