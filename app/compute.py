"""Cached computations behind the pages. Every number comes from qcore.

Functions here are pure (same arguments, same result) and take small hashable arguments
(a :class:`app.tensors.TensorSpec`, names, numbers), so ``st.cache_data`` keys are cheap.
The few helpers qcore lacks are small pure functions written here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

import qcore
from qcore.codes import (
    bit_string,
    code_bits,
    zero_point_array,
)
from qcore.tiles import pool_max, sample_indices, tile_rmse

from .text import fmt_value, short_num  # noqa: F401 - app/conformance imports fmt_value here

#: Every opset qcore implements, oldest first.
OPSETS: tuple[int, ...] = tuple(range(10, qcore.LATEST_OPSET + 1))
#: Target types QuantizeLinear can produce (menus).
TARGETS: tuple[str, ...] = qcore.QUANTIZED_TYPES


# --------------------------------------------------------------------------- small helpers


def cuda_ok() -> bool:
    """Whether qcore's CUDA backend can run here (offered in the settings only then)."""
    try:
        return bool(qcore.cuda_available())
    except Exception:  # noqa: BLE001 - a broken CUDA setup is simply no CUDA
        return False


def opset_span(opsets: list[int]) -> str:
    """'opset 23' for one opset, 'opsets 19–20' for a run of them."""
    if opsets[0] == opsets[-1]:
        return f"opset {opsets[0]}"
    return f"opsets {opsets[0]}–{opsets[-1]}"


def version_label(op: str, opset: int) -> str:
    """'QuantizeLinear-21' for the version in force at `opset`."""
    return qcore.resolve(op, opset).label


# --------------------------------------------------------------------------- home


HOME_VALUES = np.array([-1.3, -0.62, -0.05, 0.0, 0.24, 0.5, 0.91, 1.7], np.float32)


@st.cache_data(max_entries=64, show_spinner="Quantizing your numbers…")
def home_example(scale: float, zero_point: float, target: str,
                 values: tuple[float, ...] = tuple(HOME_VALUES.tolist())) -> pd.DataFrame:
    """The home page's example values, through QuantizeLinear and DequantizeLinear."""
    x = np.array(values, np.float32)
    s = np.array(scale, np.float32)
    zp = zero_point_array(zero_point, target)
    y = qcore.quantize_linear(x, s, zp)
    x_hat = qcore.dequantize_linear(y, s, zp, output_dtype="float")
    with np.errstate(all="ignore"):
        ratio = x / s
    fmt = qcore.get_format(target)
    return pd.DataFrame({
        "x": x.astype(np.float64),
        "x / scale": ratio.astype(np.float64),
        "y (stored)": y.astype(np.float64),
        "bits": [bit_string(b, fmt) for b in code_bits(fmt, y)],
        "x̂ = (y − zp)·scale": x_hat.astype(np.float64),
        "error x̂ − x": (x_hat.astype(np.float64) - x.astype(np.float64)),
    })


# --------------------------------------------------------------------------- quantize lab

HIST_BINS = 121
TRANSFER_POINTS = 2000


def _quantize(spec, cfg) -> tuple[np.ndarray, Any, np.ndarray, np.ndarray]:
    """(x, params, y, x̂) for a tensor spec and a configuration, all from qcore."""
    from qcore import calibration

    from . import tensors

    x = tensors.load(spec)
    params = calibration.choose_params(x, cfg.target, **cfg.calibration_kwargs())
    y = params.quantize(x, saturate=cfg.saturate, precision=cfg.precision_arg, opset=cfg.opset,
                        backend=cfg.backend)
    x_hat = params.dequantize(y, opset=cfg.opset, backend=cfg.backend)
    return x, params, y, x_hat


@st.cache_data(max_entries=8, show_spinner=False)
def method_sqnr(spec, cfg) -> float:
    """SQNR (dB) of the configuration as calibrated (the Lab's figure), without the Lab's
    histograms and maps: the clipping sweep shows it beside its own best range."""
    from qcore import metrics

    x, params, y, x_hat = _quantize(spec, cfg)
    return float(metrics.error_metrics(x, x_hat, y=y, params=params,
                                       opset=cfg.opset)["sqnr_db"])


def quantized_codes(spec, cfg) -> np.ndarray:
    """y for the download buttons (recomputed on demand, not kept in the cache)."""
    return _quantize(spec, cfg)[2]


def level_values(params, target: str, group: int = 0, limit: int = 4096) -> np.ndarray:
    """The values x̂ can take in one scale group: every code dequantized by qcore."""
    fmt = qcore.get_format(target)
    if fmt.bits > 12:
        return np.zeros(0)
    codes = np.unique(fmt.all_codes())
    s = np.asarray(params.scale).reshape(-1)[group]
    zp = None if params.zero_point is None else np.asarray(params.zero_point).reshape(-1)[group]
    with np.errstate(all="ignore"):
        v = qcore.dequantize_linear(codes, s, zp, output_dtype="float").astype(np.float64)
    v = np.unique(v[np.isfinite(v)])
    return v[:limit]


@dataclass(frozen=True)
class LabResult:
    """Everything the Quantize Lab shows, reduced to plot-sized arrays."""

    metrics: dict[str, Any]  # qcore.metrics.error_metrics
    shape: tuple[int, ...]
    x_dtype: str
    y_dtype: str
    out_dtype: str
    hist: tuple[np.ndarray, np.ndarray]  # counts, edges of x
    err_hist: tuple[np.ndarray, np.ndarray]  # counts, edges of x̂ − x
    transfer: tuple[np.ndarray, np.ndarray]  # downsampled (x, x̂)
    heat: np.ndarray
    heat_kind: str  # tiles, channels or blocks
    heat_tiles: tuple[int, int]
    walk: pd.DataFrame
    levels: np.ndarray
    n_scales: int
    scale_shape: tuple[int, ...]
    scale_type: str
    scale_min: float
    scale_max: float
    zp_min: float | None
    zp_max: float | None
    clip_ratio: float
    version: str
    dq_version: str


@st.cache_data(max_entries=12, show_spinner="Quantizing…")
def lab(spec, cfg) -> LabResult:
    """Everything the Quantize Lab shows, reduced to plot-sized arrays."""
    from qcore import metrics

    x, params, y, x_hat = _quantize(spec, cfg)
    m = metrics.error_metrics(x, x_hat, y=y, params=params, opset=cfg.opset)
    xf = x.astype(np.float32, copy=False)
    counts, edges = metrics.histogram(xf, bins=HIST_BINS)
    with np.errstate(all="ignore"):
        err = x_hat.astype(np.float32) - xf
    e_counts, e_edges = metrics.histogram(err, bins=HIST_BINS)
    tx, ty = metrics.downsample_xy(xf, x_hat, TRANSFER_POINTS)
    gran = params.granularity
    if gran == qcore.PER_TENSOR:
        heat, tr, tc = tile_rmse(xf, x_hat)
        heat_kind = "tiles"
        tiles = (tr, tc)
    else:
        g = np.asarray(metrics.group_errors(xf, x_hat, params, x.shape))
        heat_kind = "channels" if gran == qcore.PER_AXIS else "blocks"
        if g.ndim <= 1:
            heat, tiles = g.reshape(-1), (1, 1)
        else:
            ax = params.axis
            g2 = np.moveaxis(g, ax, -1)  # blocks along the columns
            g2 = g2.reshape(-1, g2.shape[-1])
            heat, tr, tc = pool_max(g2)
            tiles = (tr, tc)
    idx = sample_indices(x, x_hat)
    walk = metrics.walkthrough(x, params, cfg.target, idx, saturate=cfg.saturate,
                               precision=cfg.precision_arg, opset=cfg.opset, y=y, x_hat=x_hat)
    scale = np.asarray(params.scale)
    s64 = scale.astype(np.float64).reshape(-1)
    zp = params.zero_point
    z64 = None if zp is None else np.asarray(zp).astype(np.float64).reshape(-1)
    lo_level = level_values(params, cfg.target, int(np.argmax(s64)) if s64.size else 0)
    return LabResult(
        metrics=m,
        shape=tuple(x.shape),
        x_dtype=str(x.dtype),
        y_dtype=qcore.get_format(y.dtype).name,
        out_dtype=qcore.get_format(x_hat.dtype).name,
        hist=(counts, edges),
        err_hist=(e_counts, e_edges),
        transfer=(tx, ty),
        heat=heat,
        heat_kind=heat_kind,
        heat_tiles=tiles,
        walk=walk,
        levels=lo_level,
        n_scales=int(scale.size),
        scale_shape=tuple(scale.shape),
        scale_type=qcore.get_format(scale.dtype).name,
        scale_min=float(s64.min()),
        scale_max=float(s64.max()),
        zp_min=None if z64 is None else float(z64.min()),
        zp_max=None if z64 is None else float(z64.max()),
        clip_ratio=float(params.clip_ratio),
        version=qcore.resolve(qcore.QUANTIZE, cfg.opset).label,
        dq_version=qcore.resolve(qcore.DEQUANTIZE, cfg.opset).label,
    )


def report_csv(spec, cfg, result: LabResult) -> bytes:
    """Settings and metrics as a two-column CSV."""
    rows = [("tensor", spec.label), ("shape", "×".join(map(str, result.shape))),
            ("x type", result.x_dtype), ("operator", result.version),
            ("dequantize operator", result.dq_version)]
    rows += [(k, v) for k, v in vars(cfg).items()]
    rows += [("scale shape", result.scale_shape), ("scale type", result.scale_type),
             ("scale min", result.scale_min), ("scale max", result.scale_max),
             ("zero point min", result.zp_min), ("zero point max", result.zp_max)]
    rows += list(result.metrics.items())
    df = pd.DataFrame(rows, columns=["quantity", "value"])
    text = df.to_csv(index=False)
    text += "\n" + result.walk.to_csv(index=False)
    return text.encode()


def npy_bytes(y: np.ndarray) -> bytes:
    """y as a .npy file: integer types by value in the smallest NumPy integer type (int4 →
    int8), float formats as their stored codes (uint8) since .npy cannot name them."""
    import io as _io

    from qcore import export

    buf = _io.BytesIO()
    np.save(buf, np.ascontiguousarray(export.as_numpy(y)), allow_pickle=False)
    return buf.getvalue()


def npz_bytes(spec, cfg) -> bytes:
    """y, the scale, the zero point and the attributes in one .npz (qcore.export)."""
    from qcore import export

    x, params, y, _ = _quantize(spec, cfg)
    return export.npz_bytes(
        y, params.scale, params.zero_point, **params.kwargs, saturate=int(cfg.saturate),
        opset=cfg.opset, operator=qcore.resolve(qcore.QUANTIZE, cfg.opset).label,
        precision=cfg.precision or None, x_type=qcore.get_format(x.dtype).name)


def packed_bytes(y: np.ndarray) -> bytes:
    """ONNX storage layout of a sub-byte tensor (qcore.packing.pack)."""
    from qcore import packing

    return packing.pack(y).tobytes()


# --------------------------------------------------------------------------- format compare

COMPARE_DEFAULT = ("int8", "uint8", "int4", "float8e4m3fn", "float8e5m2", "float6e2m3",
                   "float4e2m1")
HEADLINE_FORMATS = ("int8", "float8e4m3fn", "float8e5m2", "int4", "float4e2m1")
#: One real tensor per kind for the headline comparison (outliers included on purpose).
HEADLINE_TENSORS = (("weights", "layer0.ffn.out.weight"),
                    ("activations", "layer5.ffn.residual"),
                    ("gradients", "grad.layer5.ffn.act"))


def _calibration(cfg) -> dict[str, Any]:
    kw = cfg.calibration_kwargs()
    kw.pop("method")
    kw.pop("granularity")
    kw.pop("axis")
    kw.pop("block_size")
    if cfg.method != "manual":
        kw.pop("manual_scale")
        kw.pop("manual_zero_point")
    return kw


@st.cache_data(max_entries=8, show_spinner="Comparing formats…")
def compare(spec, targets: tuple[str, ...], cfg) -> pd.DataFrame:
    """qcore.analysis.compare_formats on the spec's tensor."""
    from qcore import analysis

    from . import tensors

    x = tensors.load(spec)
    df = analysis.compare_formats(x, list(targets), granularity=cfg.granularity,
                                  axis=cfg.axis, block_size=cfg.block_size, method=cfg.method,
                                  opset=cfg.opset, saturate=cfg.saturate, **_calibration(cfg))
    return df


#: The one definition of the Pareto front the pages state and the charts draw
#: (qcore.analysis.bits_sqnr_front computes it; failed formats have no SQNR and are never on it).
PARETO_RULE = ("A {noun} is on the Pareto front when no other {noun} costs at most as many "
               "bits per element (to 0.1 bit, scales and zero points included: a zero point's "
               "storage does not make a format cheaper) and has a higher SQNR.")



@st.cache_data(max_entries=8, show_spinner=False)
def compare_error_hists(spec, targets: tuple[str, ...], cfg,
                        bins: int = 81) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Error histogram (x̂ − x) of each format that can be used with these settings."""
    from qcore import calibration, metrics

    from . import tensors

    x = tensors.load(spec)

    def round_trip(t: str) -> np.ndarray:
        p = calibration.choose_params(x, t, **{**cfg.calibration_kwargs()})
        return p.round_trip(x, saturate=cfg.saturate, opset=cfg.opset)

    return metrics.error_histograms(x, targets, round_trip, bins)


@st.cache_data(max_entries=8, show_spinner="Comparing on real weights, activations and "
                                             "gradients…")
def headline(cfg) -> pd.DataFrame:
    """SQNR of the headline formats on one real tensor of each kind (rows: formats)."""
    from qcore import analysis

    def sqnr(x: np.ndarray) -> pd.Series:
        axis = min(cfg.axis, x.ndim - 1)
        df = analysis.compare_formats(x, list(HEADLINE_FORMATS), granularity=cfg.granularity,
                                      axis=axis, block_size=min(cfg.block_size, x.shape[axis]),
                                      method=cfg.method, opset=cfg.opset,
                                      saturate=cfg.saturate, **_calibration(cfg))
        return df.set_index("format")["sqnr_db"]

    return headline_table(sqnr)


def headline_table(sqnr: Callable[[np.ndarray], pd.Series]) -> pd.DataFrame:
    """One column per :data:`HEADLINE_TENSORS` entry (``kind\\nname``) holding ``sqnr(x)`` of
    that tensor; a tensor this install cannot load is left out rather than failing the table."""
    from qcore import datasets

    cols = {}
    for kind, name in HEADLINE_TENSORS:
        try:
            x = datasets.load(name)
        except qcore.QuantizationError:
            continue
        cols[f"{kind}\n{name}"] = sqnr(x)
    return pd.DataFrame(cols)


# --------------------------------------------------------------------------- sweeps


def block_sizes_for(dim: int) -> list[int]:
    """Powers of two up to dim, plus dim itself (one block)."""
    sizes = [1 << k for k in range(0, 20) if (1 << k) <= dim]
    if dim not in sizes:
        sizes.append(dim)
    return sizes


@st.cache_data(max_entries=8, show_spinner="Sweeping the clipping range…")
def clipping(spec, cfg, n: int = 40) -> pd.DataFrame:
    from qcore import analysis

    from . import tensors

    return analysis.clipping_sweep(tensors.load(spec), cfg.target, n=n,
                                   granularity=cfg.granularity, axis=cfg.axis,
                                   block_size=cfg.block_size, saturate=cfg.saturate,
                                   opset=cfg.opset, scale_dtype=cfg.scale_dtype,
                                   method=cfg.method)


@st.cache_data(max_entries=8, show_spinner="Sweeping block sizes…")
def block_sweep(spec, cfg) -> pd.DataFrame:
    from qcore import analysis

    from . import tensors

    x = tensors.load(spec)
    axis = cfg.axis % max(x.ndim, 1)
    return analysis.block_size_sweep(x, cfg.target, block_sizes_for(int(x.shape[axis])), axis,
                                     method=cfg.method, saturate=cfg.saturate, opset=cfg.opset,
                                     **_calibration(cfg))


@st.cache_data(max_entries=8, show_spinner="Repeating round trips…")
def round_trips(spec, cfg, n: int = 5) -> pd.DataFrame:
    from qcore import analysis, calibration

    from . import tensors

    x = tensors.load(spec)
    p = calibration.choose_params(x, cfg.target, **cfg.calibration_kwargs())
    return analysis.repeated_round_trips(x, cfg.target, p, n=n, saturate=cfg.saturate,
                                         opset=cfg.opset)


@st.cache_data(max_entries=8, show_spinner="Running the chain…")
def chain(spec, steps: tuple[str, ...], cfg) -> pd.DataFrame:
    """qcore.analysis.chain: one row per step (metrics against the original x)."""
    from qcore import analysis

    from . import tensors

    res = analysis.chain(tensors.load(spec), list(steps), method=cfg.method,
                         granularity=cfg.granularity, axis=cfg.axis,
                         block_size=cfg.block_size, saturate=cfg.saturate, opset=cfg.opset)
    keep = ("step", "format", "sqnr_db", "step_sqnr_db", "rmse", "max_abs_error",
            "clipped_fraction", "nan_out", "inf_out")
    return pd.DataFrame([{k: r[k] for k in keep} for r in res])


# --------------------------------------------------------------------------- dynamic


@dataclass(frozen=True)
class DynamicResult:
    """DynamicQuantizeLinear step by step: range, scale, zero point, result."""

    min: float  # smallest finite x
    max: float
    n: int
    scale: float
    zero_point: int
    wmin: float  # the range widened to include 0
    wmax: float
    metrics: dict[str, Any]
    codes: np.ndarray  # count of each code 0..255
    hist: tuple[np.ndarray, np.ndarray]
    err_hist: tuple[np.ndarray, np.ndarray]
    levels: np.ndarray
    x_dtype: str


@st.cache_data(max_entries=8, show_spinner="Running DynamicQuantizeLinear…")
def dynamic(spec) -> DynamicResult:
    """DynamicQuantizeLinear-11 on the spec's tensor, step by step."""
    from qcore import calibration, metrics

    from . import tensors

    x = tensors.load(spec)
    lo, hi, count = metrics.finite_range(x)
    y, scale, zp = qcore.dynamic_quantize_linear(x)
    x_hat = qcore.dequantize_linear(y, scale, zp)
    xf = x.astype(np.float32, copy=False)
    params = calibration.QuantParams(scale, zp, 1, 0, qcore.PER_TENSOR, "dynamic", "uint8")
    m = metrics.error_metrics(xf, x_hat, y=y, params=params, opset=11)  # zero point stored
    codes = np.bincount(y.reshape(-1), minlength=256)
    counts, edges = metrics.histogram(xf, bins=HIST_BINS)
    with np.errstate(all="ignore"):
        err = x_hat.astype(np.float32) - xf
    e_counts, e_edges = metrics.histogram(err, bins=HIST_BINS)
    levels = qcore.dequantize_linear(np.arange(256, dtype=np.uint8), scale, zp).astype(np.float64)
    return DynamicResult(min=lo, max=hi, n=int(x.size), scale=float(scale),
                         zero_point=int(zp), wmin=min(0.0, lo), wmax=max(0.0, hi), metrics=m,
                         codes=codes, hist=(counts, edges), err_hist=(e_counts, e_edges),
                         levels=levels, x_dtype=str(x.dtype))
