"""The quantization settings several pages share: operator version, target type, granularity,
calibration method, saturate and precision. Drawn as a compact panel of columns; the values
live in the URL like every setting."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import streamlit as st

import qcore
from qcore import calibration

from . import compute, glossary, state, widgets

METHOD_LABELS = {"minmax": "min–max (asymmetric)", "absmax": "abs-max (symmetric)",
                 "percentile": "percentile clipping", "mse": "MSE-optimal search",
                 "manual": "manual values", "mx": "MX power-of-two (e8m0)"}
SCALE_LABELS = {"float": "float32", "float16": "float16", "bfloat16": "bfloat16",
                "float8e8m0": "float8e8m0 (powers of two)"}
PRECISIONS = ("", "float", "float16", "bfloat16")
PRECISION_LABELS = {"": "the scale's type", "float": "float32", "float16": "float16",
                    "bfloat16": "bfloat16"}
GRANULARITY_LABELS = {qcore.PER_TENSOR: "per-tensor", qcore.PER_AXIS: "per-axis",
                      qcore.BLOCKED: "blocked"}


@dataclass(frozen=True)
class QuantConfig:
    """Everything that decides a quantization, hashable (a cache key)."""

    opset: int = qcore.LATEST_OPSET
    target: str = "int8"
    granularity: str = qcore.PER_TENSOR
    axis: int = 1
    block_size: int = 32
    method: str = "minmax"
    percentile: float = 99.9
    scale_dtype: str = "float"
    manual_scale: float = 0.01
    manual_zero_point: float = 0.0
    saturate: bool = True
    precision: str = ""
    backend: str = "cpu"

    def calibration_kwargs(self) -> dict:
        """Keyword arguments for :func:`qcore.calibration.choose_params`."""
        manual = self.method == "manual"
        return dict(method=self.method, granularity=self.granularity, axis=self.axis,
                    block_size=self.block_size, percentile=self.percentile,
                    scale_dtype=self.scale_dtype,
                    manual_scale=self.manual_scale if manual else None,
                    manual_zero_point=self.manual_zero_point if manual else None)

    @property
    def precision_arg(self) -> str | None:
        return self.precision or None


def target_label(name: str) -> str:
    fmt = qcore.get_format(name)
    return f"{name}  ·  {fmt.bits} bit"


def opset_label(opset: int) -> str:
    return f"{opset}  →  {compute.version_label(qcore.QUANTIZE, opset)}"


def granularity_panel(shape: tuple[int, ...], where=None, *, prefix: str = "",
                      columns=None, default: str = qcore.PER_TENSOR) -> tuple[str, int, int]:
    """Granularity, axis and block size widgets (in three given columns, else new ones);
    returns (granularity, axis, block size)."""
    where = where if where is not None else st
    c1, c2, c3 = columns if columns is not None else where.columns([1.5, 0.7, 0.9])
    gran = widgets.select("Granularity", qcore.GRANULARITIES, prefix + "gran", default,
                          where=c1, kind="segmented", format_func=GRANULARITY_LABELS.get,
                          help="One scale for the whole tensor, one per slice along an axis, "
                               "or one per block of consecutive elements along an axis.\n\n"
                               + glossary.tip("per-axis") + "\n\n" + glossary.tip("block"))
    ndim = max(len(shape), 1)
    axis = widgets.select("Axis", list(range(ndim)), prefix + "axis", min(1, ndim - 1),
                          where=c2, disabled=gran == qcore.PER_TENSOR,
                          help="The dimension that gets its own scales (per-axis) or is cut "
                               "into blocks (blocked).")
    dim = int(shape[axis]) if shape else 1
    want = _wanted_block(prefix + "block", dim)
    block = widgets.number("Block size", prefix + "block", 32, min_value=1,
                           max_value=max(dim, 1), where=c3, disabled=gran != qcore.BLOCKED,
                           help=f"Consecutive elements along axis {axis} that share a scale "
                                f"(1…{dim}); the last block is short when {dim} is not a "
                                f"multiple.")
    want = want or int(block)
    _remember_block(prefix + "block", want, int(block))
    if want > block and gran == qcore.BLOCKED:
        where.caption(f"Block size {want} is longer than axis {axis} ({dim} elements): using "
                      f"{block}. {want} comes back on a tensor whose axis is long enough.")
    return gran, int(axis), int(block)


def _wanted_block(key: str, dim: int) -> int:
    """The block size the user asked for (kept when a short axis forces a smaller one; 0 when
    the widget has not been drawn yet), and the value to show now: set before the widget is
    drawn."""
    wished = st.session_state.get("_qx_want_" + key)
    shown = st.session_state.get("_qx_shown_" + key)
    current = st.session_state.get(key) if state.on_screen_before(key) else \
        state.value(key, None)
    if current is None:  # first drawing: the URL or the default decides, nothing is wished yet
        return 0
    if wished is None or current != shown:  # the user (or a link) changed it: the new wish
        wished = int(current)
    use = min(int(wished), max(dim, 1))
    if use != current:
        state.set_values(**{key: use})
    return int(wished)


def _remember_block(key: str, wished: int, used: int) -> None:
    st.session_state["_qx_want_" + key] = max(wished, used)
    st.session_state["_qx_shown_" + key] = used


def granularity_caption(shape: tuple[int, ...], gran: str, axis: int, block: int) -> str:
    """One line saying how many scales the granularity makes (and the valid block sizes)."""
    dim = int(shape[axis]) if shape else 1
    if gran == qcore.BLOCKED:
        nblocks = qcore.Layout.from_granularity((dim,), qcore.BLOCKED, 0, block).scale_blocks
        lo, hi = qcore.block_size_range(dim, nblocks)
        short = dim - (nblocks - 1) * block
        return (f"{nblocks:,} block(s) of {block} along axis {axis} (length {dim})"
                + (f", the last one {short} long" if short != block else "")
                + f". The scale holds {nblocks:,} values along this axis, and ONNX accepts "
                  f"every block size that cuts {dim} elements into {nblocks:,} blocks: "
                + (f"{lo} to {hi}." if hi is not None else f"{lo} or more."))
    if gran == qcore.PER_AXIS:
        return f"{dim:,} scales, one per index of axis {axis}."
    return "One scale for the whole tensor."


def panel(shape: tuple[int, ...], *, show_opset: bool = True, show_target: bool = True,
          show_precision: bool = True, prefix: str = "") -> QuantConfig:
    """The full settings panel (in a bordered container); returns the chosen configuration."""
    box = st.container(border=True)
    first = box.columns([1.4] * show_opset + [1.1] * show_target + [1.5, 1.0])
    opset, target = qcore.LATEST_OPSET, "int8"
    if show_opset:
        opset = widgets.select("Opset", list(compute.OPSETS), prefix + "opset",
                               qcore.LATEST_OPSET, where=first[0], format_func=opset_label,
                               help=glossary.tip("opset"))
    if show_target:
        target = widgets.select("Target type", list(compute.TARGETS), prefix + "target", "int8",
                                where=first[int(show_opset)], format_func=target_label,
                                help="The element type y is stored in.\n\n"
                                     + glossary.tip("e4m3-e5m2") + "\n\n" + glossary.tip("fnuz"))
    method = widgets.select("Scale and zero point", list(calibration.METHODS), prefix + "method",
                            "minmax", where=first[-2], format_func=METHOD_LABELS.get,
                            help="How the scale (and zero point) are chosen from the tensor."
                                 "\n\n" + glossary.tip("calibration") + "\n\n"
                                 + glossary.tip("mx"))
    if method == "mx":  # a disabled control shows the value in use; the user's choice stays
        scale_dtype = "float8e8m0"
        first[-1].selectbox("Scale type", [scale_dtype], format_func=SCALE_LABELS.get,
                            disabled=True, key=prefix + "stype_mx",
                            help="MX calibration stores its power-of-two scales as float8e8m0 "
                                 "(the OCP rule); the scale type chosen for the other methods "
                                 "comes back with them.")
    else:
        scale_dtype = widgets.select("Scale type", list(calibration.SCALE_DTYPES),
                                     prefix + "stype", "float", where=first[-1],
                                     format_func=SCALE_LABELS.get,
                                     help="The element type the scale is stored in; float8e8m0 "
                                          "holds powers of two only (MX). From opset 19 to 22 "
                                          "the scale must have x's type.")
    second = box.columns([1.9, 0.55, 0.75] + [1.35] * show_precision + [0.85],
                         vertical_alignment="bottom")
    mx_default = _mx_blocks(method, prefix)
    gran, axis, block = granularity_panel(shape, prefix=prefix, columns=second[:3],
                                          default=qcore.BLOCKED if mx_default else
                                          qcore.PER_TENSOR)
    precision = ""
    if show_precision:
        precision = widgets.select("Division precision", list(PRECISIONS), prefix + "prec", "",
                                   where=second[3], format_func=PRECISION_LABELS.get,
                                   help="The type x / scale is computed in (the `precision` "
                                        "attribute, QuantizeLinear-23+).")
    with second[-1]:
        saturate = widgets.toggle("Saturate", prefix + "sat", True,
                                  help="float8 only: overflow becomes ±max (on) or NaN/Inf "
                                       "(off). Integers always saturate; float4/6 too.\n\n"
                                       + glossary.tip("saturate"))
    percentile, mscale, mzp = 99.9, 0.01, 0.0
    if method == "percentile":
        percentile = widgets.slider("Percentile of |x| mapped to the largest code",
                                    prefix + "pct", 99.9, min_value=90.0, max_value=100.0,
                                    step=0.01, where=box, fmt="%.2f")
    elif method == "manual":
        m1, m2 = box.columns(2)
        mscale = widgets.number("Scale", prefix + "mscale", 0.01, min_value=1e-30,
                                max_value=1e30, where=m1, fmt="%.6g", step=None)
        mzp = widgets.number("Zero point", prefix + "mzp", 0.0, min_value=-1e6, max_value=1e6,
                             where=m2, fmt="%g", step=1.0)
    backend = "cpu"
    if compute.cuda_ok():
        backend = widgets.select("Backend", ["cpu", "cuda"], prefix + "backend", "cpu",
                                 where=box, kind="segmented",
                                 help="Run QuantizeLinear / DequantizeLinear with qcore's "
                                      "numba CPU kernels or its numba.cuda kernels.")
    box.caption(f"{calibration.describe(method)}  \n"
                f"{granularity_caption(shape, gran, axis, block)}"
                + "".join(f"  \n*Why:* {w}" for w in why_lines(method, target, gran)))
    return QuantConfig(int(opset), target, gran, axis, block, method, float(percentile),
                       scale_dtype, float(mscale), float(mzp), bool(saturate), precision,
                       backend)


def _mx_blocks(method: str, prefix: str) -> bool:
    """Whether MX is chosen; on switching to it, granularity becomes blocked (32 by default),
    as the OCP MX formats define one scale per block of 32, not one per tensor."""
    key = "_qx_method_" + prefix
    before = st.session_state.get(key)
    st.session_state[key] = method
    if method == "mx" and before is not None and before != "mx":
        state.set_values(**{prefix + "gran": qcore.BLOCKED})
    return method == "mx"


def why_lines(method: str, target: str, granularity: str) -> list[str]:
    """The reasons behind the rules the chosen settings meet (app.glossary.WHY)."""
    out = []
    if method == "mx" or target == "float8e8m0":
        out.append(glossary.WHY["power_of_two"])
    if granularity == qcore.PER_AXIS:
        out.append(glossary.WHY["per_axis"])
    elif granularity == qcore.BLOCKED:
        out.append(glossary.WHY["blocks"])
    if target.startswith(("float8e4m3", "float8e5m2")):
        out.append(glossary.WHY["e4m3"])
    return out


def shape_of(x: np.ndarray) -> tuple[int, ...]:
    return tuple(int(d) for d in x.shape)
