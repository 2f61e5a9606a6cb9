"""Setting widgets whose values live in the URL, and the shared pickers built from them.

Each wrapper takes the setting's URL name and default, validates the current value, draws the
Streamlit widget bound to it and returns its value. ``where`` is the container to draw in
(``st``, ``st.sidebar``, a column).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import streamlit as st

from . import state

Where = Any  # streamlit.delta_generator.DeltaGenerator or the st module


def _in(options: Sequence[Any], default: Any) -> Callable[[Any], Any]:
    opts = list(options)

    def fix(v: Any) -> Any:
        if v in opts:
            return v
        # URL values arrive as strings: match an option by its text
        for o in opts:
            if str(o) == str(v):
                return o
        if default in opts:
            return default
        return opts[0]

    return fix


def select(label: str, options: Sequence[Any], name: str, default: Any, *, where: Where = st,
           kind: str = "selectbox", format_func: Callable[[Any], str] = str,
           help: str | None = None, disabled: bool = False) -> Any:
    """One choice among `options` (kind: selectbox, radio, segmented, select_slider)."""
    fix = _in(options, default)
    key = state.setting(name, default, fix)
    common = dict(key=key, format_func=format_func, help=help, disabled=disabled)
    if kind == "radio":
        v = where.radio(label, options, horizontal=True, **common)
    elif kind == "segmented":
        v = where.segmented_control(label, options, required=True, **common)
    elif kind == "select_slider":
        v = where.select_slider(label, options, **common)
    else:
        v = where.selectbox(label, options, **common)
    return state.remember(name, fix(v))


def multi(label: str, options: Sequence[Any], name: str, default: Sequence[Any], *,
          where: Where = st, format_func: Callable[[Any], str] = str,
          help: str | None = None, kind: str = "multiselect") -> list[Any]:
    """Several choices among `options` (kind: multiselect or pills)."""
    opts = list(options)

    def fix(v: Any) -> list[Any]:
        chosen = [o for o in opts if o in v or str(o) in {str(x) for x in v}]
        return chosen

    key = state.setting(name, list(default), fix)
    if kind == "pills":
        v = where.pills(label, opts, selection_mode="multi", key=key, format_func=format_func,
                        help=help)
    else:
        v = where.multiselect(label, opts, key=key, format_func=format_func, help=help)
    return state.remember(name, list(v))


def number(label: str, name: str, default: float | int, *, min_value: float | int,
           max_value: float | int, step: float | int | None = None, where: Where = st,
           help: str | None = None, fmt: str | None = None, disabled: bool = False) -> Any:
    """A number in [min_value, max_value] (int when the default is an int)."""
    integer = isinstance(default, int) and not isinstance(default, bool)
    cast = int if integer else float

    def fix(v: Any) -> Any:
        return cast(min(max(cast(v), min_value), max_value))

    key = state.setting(name, default, fix)
    v = where.number_input(label, min_value=cast(min_value), max_value=cast(max_value),
                           step=step if step is not None else (1 if integer else None),
                           key=key, help=help, format=fmt, disabled=disabled)
    return state.remember(name, v)


def slider(label: str, name: str, default: float | int, *, min_value: float | int,
           max_value: float | int, step: float | int | None = None, where: Where = st,
           help: str | None = None, fmt: str | None = None) -> Any:
    """A slider over [min_value, max_value]."""
    integer = isinstance(default, int) and not isinstance(default, bool)
    cast = int if integer else float

    def fix(v: Any) -> Any:
        return cast(min(max(cast(v), min_value), max_value))

    key = state.setting(name, default, fix)
    v = where.slider(label, min_value=cast(min_value), max_value=cast(max_value), step=step,
                     key=key, help=help, format=fmt)
    return state.remember(name, v)


def toggle(label: str, name: str, default: bool, *, where: Where = st,
           help: str | None = None, disabled: bool = False) -> bool:
    """An on/off switch."""
    key = state.setting(name, default, lambda v: bool(v))
    return state.remember(name, where.toggle(label, key=key, help=help, disabled=disabled))


def text(label: str, name: str, default: str, *, where: Where = st, help: str | None = None,
         placeholder: str | None = None) -> str:
    """A line of text."""
    key = state.setting(name, default, lambda v: str(v))
    return state.remember(name, where.text_input(label, key=key, help=help,
                                                 placeholder=placeholder))


def tabs(labels: Sequence[str], name: str, *, where: Where = st) -> Sequence[Any]:
    """Tabs whose open tab is a setting (URL too); only the open tab's ``.open`` is True, so a
    page computes just what is shown."""
    labels = list(labels)
    key = state.setting(name, labels[0], _in(labels, labels[0]))
    result = where.tabs(labels, key=key, on_change="rerun")
    state.remember(name, st.session_state.get(key, labels[0]))
    return result
