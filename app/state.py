"""Page settings: kept in ``st.session_state`` and mirrored into the URL (``st.query_params``).

Every setting widget is created through :mod:`app.widgets`, which calls :func:`setting` first:

- on a fresh session the value comes from the URL (a shared link reopens the same view), else
  from the default; an unreadable or invalid URL value falls back to the default with a note;
- the value is validated (options that no longer exist, numbers out of range) before the
  widget is drawn, so a widget never sees an impossible state;
- the setting is recorded as used by this run, and :func:`sync_url` (called by
  ``streamlit_app.py`` after the page) writes exactly the used settings into the URL.

Values are also kept in a plain session-state dict (the *store*). Streamlit keys a widget by
its page, and forgets (or, after ``st.stop()``, keeps only on the server) the state of a widget
that a run did not draw; the browser then shows the widget's *default* while the server still
holds the old value. So a widget that was not on screen in the previous run of the same page
gets its value from the store, written into session state before it is drawn: the browser is
sent that value, and the tensor and settings chosen on one page are those of the next.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st

_USED = "_qx_used"  # settings drawn in this run, in order
_NOTES = "_qx_url_notes"  # URL values that could not be used
_STORE = "_qx_store"  # the last value of every setting, across pages
_PAGE = "_qx_page"  # the page of this run
_PREV = "_qx_prev"  # (page, settings drawn) of the previous run


def begin_run(page: str = "") -> None:
    """Start a run of `page` (call once, before the page draws any setting). On the browser's
    Back or Forward the URL wins: each setting it names is read from it again, so Back undoes
    a settings change."""
    if _history_navigation():
        store = st.session_state.get(_STORE, {})
        for name in st.query_params.to_dict():
            store.pop(name, None)
            if name in st.session_state:
                del st.session_state[name]
    st.session_state[_PREV] = (st.session_state.get(_PAGE), st.session_state.get(_USED, {}))
    st.session_state[_PAGE] = page
    st.session_state[_USED] = {}


def _history_navigation() -> bool:
    """Whether this run comes from the browser's Back or Forward button."""
    try:
        from streamlit.runtime.scriptrunner import get_script_run_ctx

        ctx = get_script_run_ctx(suppress_warning=True)
    except ImportError:  # pragma: no cover - streamlit is a dependency of the app
        return False
    return bool(getattr(ctx, "is_history_navigation", False))


def on_screen_before(name: str) -> bool:
    """Whether the previous run drew setting `name` on this same page (then the browser holds
    its current value; otherwise the store does)."""
    page, used = st.session_state.get(_PREV, (None, {}))
    return page == st.session_state.get(_PAGE) and name in used


def _parse(raw: str, default: Any) -> Any:
    """A URL string as a value of the default's type (ValueError when it is not one)."""
    if isinstance(default, bool):
        low = raw.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ValueError(raw)
    if isinstance(default, int):
        return int(raw)
    if isinstance(default, float):
        return float(raw)
    if isinstance(default, (list, tuple)):
        return [item for item in raw.split(",") if item]
    return raw


def encode(value: Any) -> str:
    """A setting as it appears in the URL."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def setting(name: str, default: Any, fix: Callable[[Any], Any] | None = None) -> str:
    """Prepare the session-state value of setting `name`; returns the widget key.

    `fix(value)` returns the nearest valid value (or raises ValueError/TypeError, which resets
    the setting to `default`).
    """
    store = st.session_state.setdefault(_STORE, {})
    if name in store and (name not in st.session_state or not on_screen_before(name)):
        st.session_state[name] = store[name]
    if name not in st.session_state:
        value = default
        raw = st.query_params.get(name)
        if raw is not None:
            try:
                value = _parse(raw, default)
                if fix is not None:
                    fixed = fix(value)
                    if encode(fixed) != encode(value):
                        st.session_state.setdefault(_NOTES, []).append(
                            f"{name}={raw!r} → {encode(fixed)!r}")
                        value = fixed
            except (TypeError, ValueError):
                st.session_state.setdefault(_NOTES, []).append(
                    f"{name}={raw!r} → {encode(default)!r}")
                value = default
        st.session_state[name] = value
    if fix is not None:
        current = st.session_state[name]
        try:
            fixed = fix(current)
        except (TypeError, ValueError):
            fixed = default
        if fixed != current or type(fixed) is not type(current):
            st.session_state[name] = fixed
    st.session_state.setdefault(_USED, {})[name] = None
    return name


def mark_drawn(name: str) -> None:
    """Record that a widget outside the settings (no URL) was drawn in this run."""
    st.session_state.setdefault(_USED, {})[name] = None


def remember(name: str, value: Any) -> Any:
    """Record a widget's value in the store (and return it)."""
    st.session_state.setdefault(_STORE, {})[name] = value
    return value


def value(name: str, default: Any = None) -> Any:
    """The current value of a setting (default when it was never drawn)."""
    return st.session_state.get(_STORE, {}).get(name, st.session_state.get(name, default))


def set_values(**values: Any) -> None:
    """Change settings programmatically (preset buttons); takes effect on the next run."""
    for name, v in values.items():
        st.session_state[name] = v
        st.session_state.setdefault(_STORE, {})[name] = v


def url_notes() -> list[str]:
    """URL values that were ignored because they were invalid (and forget them)."""
    return st.session_state.pop(_NOTES, [])


def show_url_notes(where: Any = None) -> None:
    """Say which URL values were ignored (invalid), once, in the sidebar."""
    notes = url_notes()
    if notes:
        (where if where is not None else st.sidebar).warning(
            "Not valid here, so replaced (link value → value used): " + ", ".join(notes),
            icon="⚠️")


def current_url_params() -> dict[str, str]:
    """The query parameters this run's settings map to."""
    used = st.session_state.get(_USED, {})
    store = st.session_state.get(_STORE, {})
    return {name: encode(store[name]) for name in used if name in store}


def sync_url() -> None:
    """Write this run's settings into the URL (only when something changed)."""
    target = current_url_params()
    if st.query_params.to_dict() != target:
        st.query_params.from_dict(target)


def snapshot() -> tuple[str, dict[str, Any]]:
    """(this run's page, the last value of every setting): what the warm-up compiles next."""
    return (str(st.session_state.get(_PAGE) or ""),
            dict(st.session_state.get(_STORE, {})))
