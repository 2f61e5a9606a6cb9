"""Presets that teach: one click sets the tensor and the settings of a lesson (the same
settings a shared link would carry)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import streamlit as st

import qcore

from . import state


@dataclass(frozen=True)
class Preset:
    label: str
    settings: dict[str, Any] = field(default_factory=dict)
    note: str = ""


#: The Quantize Lab's presets (setting name → value, as in the URL).
LAB: dict[str, Preset] = {
    "outlier_channel": Preset(
        "One outlier channel",
        dict(src="synthetic", dist="outlier_channel", rows=256, cols=256, seed=0, xtype="float",
             target="int8", method="absmax", gran=qcore.PER_AXIS, axis=0, opset=qcore.LATEST_OPSET),
        "A (out, in) weight whose output channel — a row, **axis 0** — is 20× larger than the "
        "rest. Per-axis along axis 0 gives each output channel its own step, so the small rows "
        "keep theirs; switch Granularity to per-tensor and watch SQNR fall: one scale, sized "
        "for the big row, leaves the other rows only a few codes."),
    "mxfp4": Preset(
        "MXFP4 = float4e2m1 + float8e8m0 scale + blocks of 32",
        dict(target="float4e2m1", method="mx", gran=qcore.BLOCKED, block=32, axis=1,
             opset=qcore.LATEST_OPSET),
        "OCP MXFP4: float4e2m1 elements, one power-of-two scale (float8e8m0) per block of 32 "
        "consecutive elements along the last axis. A power-of-two scale is an exponent shift — "
        "no multiplication error — and 8 exponent bits cover 2^-127…2^127."),
}

_CHOSEN = "_qx_preset_note"


def apply(group: dict[str, Preset], key: str) -> None:
    """Set a preset's settings (they take effect on the next run) and show its note there."""
    state.set_values(**group[key].settings)
    st.session_state[_CHOSEN] = (id(group), key)


def buttons(group: dict[str, Preset], where: Any = st) -> None:
    """A button per preset."""
    cols = where.columns(len(group))
    for col, (key, p) in zip(cols, group.items()):
        col.button(p.label, key=f"preset_lab_{key}", on_click=apply, args=(group, key),
                   icon=":material/school:", width="stretch")


def note(group: dict[str, Preset], where: Any = st) -> None:
    """The note of the preset chosen last, while its settings still hold (call after the
    settings' widgets are drawn)."""
    chosen = st.session_state.get(_CHOSEN)
    if chosen and chosen[0] == id(group):
        p = group[chosen[1]]
        if all(state.value(k) == v for k, v in p.settings.items()):
            where.info(p.note, icon=":material/lightbulb:")
