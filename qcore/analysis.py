"""Analyses the Quantization Explorer shows: formats side by side, clipping and block-size sweeps,
repeated round trips and chains of formats. Pure numerics: NumPy, pandas and qcore only
(pandas is imported by the functions that return a DataFrame, so importing this module does
not load it). Every figure comes from :func:`qcore.metrics.error_metrics` at the opset the
round trip ran at: the same bits per element, SQNR and clipped share the Lab shows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .calibration import METHODS, choose_params, params_from_range, symmetric
from .errors import QuantizationError
from .formats import QUANTIZED_TYPES
from .layout import BLOCKED, PER_TENSOR, Layout
from .metrics import (  # noqa: F401 - the Pareto rule, re-exported here
    PARETO_BITS_DECIMALS,
    bits_sqnr_front,
    error_metrics,
    pareto_front,
    stores_zero_point,
)
from .quant_params import QuantParams, as_input, scale_format, target_format
from .reductions import group_minmax
from .versions import LATEST_OPSET

if TYPE_CHECKING:
    import pandas as pd

_METRIC_COLUMNS = ("bits_per_element", "sqnr_db", "rmse", "max_abs_error", "clipped_fraction",
                   "mse", "mean_abs_error", "mean_rel_error", "nan_out", "inf_out",
                   "sqnr_coverage", "nonfinite_made")


def front_pick(bits: Any, sqnr: Any, min_sqnr_db: float | None = None) -> int | None:
    """Position of the point the app picks for the user, always on :func:`bits_sqnr_front`.

    With ``min_sqnr_db``: the fewest bits (compared as the front compares them) among the
    points reaching it, the higher SQNR among equals; without: the highest SQNR, the fewer
    bits among equals. None when no point qualifies. A point the front marks as dominated is
    never picked: one that costs as much and gives more is always there.
    """
    b = np.round(np.asarray(bits, np.float64), PARETO_BITS_DECIMALS)
    q = np.asarray(sqnr, np.float64)
    cand = np.flatnonzero(bits_sqnr_front(bits, sqnr))
    if min_sqnr_db is not None:
        cand = cand[q[cand] >= float(min_sqnr_db)]
        if not cand.size:
            return None
        return int(min(cand, key=lambda i: (b[i], -q[i])))
    if not cand.size:
        return None
    return int(min(cand, key=lambda i: (-q[i], b[i])))


def compare_formats(x: Any, targets: Any, *, granularity: str = PER_TENSOR, axis: int = 0,
                    block_size: int = 32, method: str = "minmax", opset: int = LATEST_OPSET,
                    saturate: bool = True, **calibration: Any) -> pd.DataFrame:
    """One row per target format: bits, bits_per_element, sqnr_db, rmse, max_abs_error,
    clipped_fraction, pareto (on the SQNR-vs-bits-per-element front), more metrics, and
    ``error`` (why a format could not be used at this opset/granularity, else "").

    Extra keyword arguments go to :func:`qcore.calibration.choose_params`.
    """
    import pandas as pd

    xa = as_input(x)
    rows = []
    if targets is None:
        targets = QUANTIZED_TYPES
    for t in [targets] if isinstance(targets, str) else list(targets):
        fmt = target_format(t)
        row: dict[str, Any] = {"format": fmt.name, "bits": fmt.bits}
        try:
            p = choose_params(xa, fmt.name, method=method, granularity=granularity, axis=axis,
                              block_size=block_size, **calibration)
            xh = p.round_trip(xa, saturate=saturate, opset=opset)
            m = error_metrics(xa, xh, params=p, opset=opset)
            row.update({k: m[k] for k in _METRIC_COLUMNS})
            row["error"] = ""
        except QuantizationError as exc:
            row.update({k: np.nan for k in _METRIC_COLUMNS})
            row["error"] = str(exc)
        rows.append(row)
    df = pd.DataFrame(rows, columns=["format", "bits", *_METRIC_COLUMNS, "error"])
    df.insert(7, "pareto", bits_sqnr_front(df["bits_per_element"], df["sqnr_db"]))
    return df


#: The columns :func:`compare_recipes` adds to :func:`compare_formats`' ones: what each recipe is.
RECIPE_COLUMNS = ("recipe", "target", "granularity", "axis", "block_size", "method",
                  "scale_type", "opset", "opset_sets_bits")


def compare_recipes(x: Any, recipes: Any, *, saturate: bool = True,
                    opset: int | None = None) -> pd.DataFrame:
    """One row per recipe (:mod:`qcore.recipes`' grammar ``TARGET:GRANULARITY[@METHOD]``
    or an OCP MX name), each with its own target, granularity, block size, calibration and
    scale type — so ``int4:blocked32`` (float32 scales, abs-max) and ``mxfp4`` (float8e8m0
    scales) stand in one table with one Pareto front.

    A recipe lays itself on ``x`` as the report and the model tool do
    (:func:`qcore.recipes.granularity_for`: per-axis along axis 0, blocks along the last
    axis, unless the recipe names its axis, ``/AXIS``) and runs at ``opset``, or by default at the
    oldest opset whose operators express it (the report's rule, so the figures equal the
    report's). Columns: ``format`` (the label: the recipe, with `` · opset N`` when its bits
    depend on the opset), :data:`RECIPE_COLUMNS`, then :func:`compare_formats`' metric columns,
    ``pareto`` and ``error`` (why the recipe cannot be used on ``x``, else ""). ``opset_sets_bits``
    is True when a zero point is stored only because the opset predates ``output_dtype`` (21):
    at a newer opset the same recipe costs fewer bits.
    """
    import pandas as pd

    from .recipes import granularity_for, parse_recipes

    xa = as_input(x)
    shape = tuple(int(d) for d in xa.shape)
    rows = []
    for r in parse_recipes(recipes):
        row: dict[str, Any] = {"format": r.name, "recipe": r.name, "target": r.target,
                               "granularity": r.granularity, "axis": None, "block_size": None,
                               "method": r.method,
                               "scale_type": "float8e8m0" if r.mx else "float32",
                               "opset": None, "opset_sets_bits": False,
                               "bits": target_format(r.target).bits}
        try:
            gran, axis, block = granularity_for(r, shape)
            row.update(granularity=gran, axis=axis if gran != PER_TENSOR else None,
                       block_size=block or None)
            p, op, _, xs, xh = recipe_round_trip(xa, r, saturate=saturate, opset=opset)
            m = error_metrics(xs, xh, params=p, opset=op)
            row.update({k: m[k] for k in _METRIC_COLUMNS})
            row["opset"] = op
            row["opset_sets_bits"] = bool(stores_zero_point(p, op)
                                          != stores_zero_point(p, LATEST_OPSET))
            if row["opset_sets_bits"]:
                row["format"] = f"{r.name} · opset {op}"
            row["error"] = ""
        except QuantizationError as exc:
            row.update({k: np.nan for k in _METRIC_COLUMNS})
            row["error"] = str(exc)
        rows.append(row)
    df = pd.DataFrame(rows, columns=["format", *RECIPE_COLUMNS, "bits", *_METRIC_COLUMNS,
                                     "error"])
    df["opset"] = df["opset"].astype("Int64")
    df["axis"] = df["axis"].astype("Int64")
    df["block_size"] = df["block_size"].astype("Int64")
    df.insert(df.columns.get_loc("bits_per_element") + 6, "pareto",
              bits_sqnr_front(df["bits_per_element"], df["sqnr_db"]))
    return df


def recipe_round_trip(x: Any, recipe: Any, *, saturate: bool = True, opset: int | None = None
                      ) -> tuple[QuantParams, int, np.ndarray, np.ndarray, np.ndarray]:
    """One report recipe on ``x``: (the parameters its operators run with, the opset, x̂, and
    the pair (x', x̂') whose error statistics are the recipe's), laid on x's shape as the report
    lays it and run at ``opset`` or else the oldest opset that expresses it.

    A ``@fullrange`` recipe has signed scales (:mod:`qcore.fullrange`); qcore's operators run
    it on σ·x with |scale| (:func:`qcore.fullrange.positive_view`): the parameters returned are
    those, and (x', x̂') = (σ·x, σ·x̂), whose errors equal those of (x, x̂)."""
    from .fullrange import FULLRANGE_METHODS, FULLRANGE_MSE, fullrange_params, positive_view
    from .recipes import asks_zero_point, granularity_for, parse_recipe, required_opset

    r = parse_recipe(recipe) if isinstance(recipe, str) else recipe
    xa = as_input(x)
    shape = tuple(int(d) for d in xa.shape)
    gran, axis, block = granularity_for(r, shape)
    if r.method in FULLRANGE_METHODS:
        p = fullrange_params(xa, r.target, gran, axis, block or 32, r.method == FULLRANGE_MSE)
    else:
        p = choose_params(xa, r.target, method=r.method, granularity=gran, axis=axis,
                          block_size=block or 32)
    kw = p.kwargs
    op = int(opset) if opset is not None else required_opset(
        p.format.name, p.scale_format.name, shape, tuple(np.shape(p.scale)), asks_zero_point(p),
        kw["axis"], kw["block_size"])
    xs, run, sign = positive_view(xa, p, op)
    xh_run = run.round_trip(xs, saturate=saturate, opset=op)
    x_hat = xh_run if sign is None else np.asarray(xh_run, np.float32) * sign
    return run, op, x_hat, xs, xh_run


def clipping_sweep(x: Any, target: Any, *, n: int = 60, granularity: str = PER_TENSOR,
                   axis: int = 0, block_size: int = 32, lo: float = 0.05, hi: float = 1.0,
                   saturate: bool = True, opset: int = LATEST_OPSET,
                   scale_dtype: Any = "float", method: str = "mse") -> pd.DataFrame:
    """Round-trip error as the clipping range shrinks from ``hi`` to ``lo`` times the observed
    one, calibrated the way ``method`` calibrates.

    Each row is ``choose_params(x, target, method=..., clip_ratio=ratio)`` for ``minmax``,
    ``absmax`` and ``mx`` (so ratio 1 is exactly what the Lab shows for that method); for
    ``percentile``, ``mse`` and ``manual``, which pick their own range, the range is the
    observed min..max times the ratio, symmetric as the method is (signed and float targets
    symmetric, unsigned ones both tails). Columns: clip_ratio, threshold (ratio x amax; the
    mean over groups when grouped), mse, rounding_mse (elements inside the saturation bounds),
    clipping_mse (outside), sqnr_db, clipped_fraction, bits_per_element, sqnr_coverage (the
    share of elements the SQNR is over), optimum (True on the least-mse row). ``df.attrs["optimum"]`` is that row's index.
    """
    import pandas as pd

    xa = as_input(x)
    fmt = target_format(target)
    sfmt = scale_format(scale_dtype)
    if int(n) < 1 or not 0 < lo <= hi:
        raise QuantizationError(f"need n >= 1 and 0 < lo <= hi; got n={n}, lo={lo}, hi={hi}")
    layout = Layout.from_granularity(xa.shape, granularity, axis, block_size)
    sshape = layout.scale_shape()
    ax = layout.axis if layout.axis is not None else 0
    bs = layout.block if granularity == BLOCKED else 0
    if method not in METHODS:
        raise QuantizationError(f"method={method!r} is not one of {', '.join(METHODS)}")
    glo, ghi = group_minmax(xa, layout)
    sym = symmetric(method, fmt)
    amax = np.nan_to_num(np.maximum(np.abs(glo), np.abs(ghi)))
    rows = []
    for r in np.linspace(lo, hi, int(n)):
        if method in ("minmax", "absmax", "mx"):
            p = choose_params(xa, fmt.name, method=method, granularity=granularity, axis=axis,
                              block_size=block_size, scale_dtype=scale_dtype,
                              clip_ratio=float(r))
        else:
            s, zp = params_from_range(fmt, glo * r, ghi * r, sym, sfmt)
            p = QuantParams(s.reshape(sshape), None if zp is None else zp.reshape(sshape), ax,
                            bs, granularity, "clip", fmt.name, float(r))
        m = error_metrics(xa, p.round_trip(xa, saturate=saturate, opset=opset), params=p, opset=opset)
        rows.append({"clip_ratio": float(r), "threshold": float(np.mean(amax) * r),
                     "mse": m["mse"], "rounding_mse": m["rounding_mse"],
                     "clipping_mse": m["clipping_mse"], "sqnr_db": m["sqnr_db"],
                     "clipped_fraction": m["clipped_fraction"],
                     "bits_per_element": m["bits_per_element"],
                     "sqnr_coverage": m["sqnr_coverage"]})
    df = pd.DataFrame(rows)
    best = int(np.nanargmin(df["mse"].to_numpy())) if df["mse"].notna().any() else 0
    df["optimum"] = np.arange(len(df)) == best
    df.attrs["optimum"] = best
    return df


def block_size_sweep(x: Any, target: Any, block_sizes: Any, axis: int, *,
                     method: str = "minmax", saturate: bool = True, opset: int = LATEST_OPSET,
                     **calibration: Any) -> pd.DataFrame:
    """SQNR and bits per element for each block size along ``axis`` (blocked quantization).

    Sizes that are not integers in [1, x.shape[axis]] are skipped. Columns: block_size,
    n_blocks, sqnr_db, rmse, bits_per_element, clipped_fraction, sqnr_coverage.
    """
    import pandas as pd

    xa = as_input(x)
    fmt = target_format(target)
    if xa.ndim == 0:
        raise QuantizationError("blocked quantization needs x of rank >= 1")
    ax = Layout.from_granularity(xa.shape, BLOCKED, axis, 1).axis
    dim = xa.shape[ax]
    rows = []
    for b in block_sizes:
        if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or not 1 <= b <= dim:
            continue
        p = choose_params(xa, fmt.name, method=method, granularity=BLOCKED, axis=ax,
                          block_size=int(b), **calibration)
        m = error_metrics(xa, p.round_trip(xa, saturate=saturate, opset=opset), params=p, opset=opset)
        rows.append({"block_size": int(b), "n_blocks": -(-dim // int(b)), "sqnr_db": m["sqnr_db"],
                     "rmse": m["rmse"], "bits_per_element": m["bits_per_element"],
                     "clipped_fraction": m["clipped_fraction"],
                     "sqnr_coverage": m["sqnr_coverage"]})
    return pd.DataFrame(rows, columns=["block_size", "n_blocks", "sqnr_db", "rmse",
                                       "bits_per_element", "clipped_fraction", "sqnr_coverage"])


def repeated_round_trips(x: Any, target: Any, params: QuantParams, n: int = 5, *,
                         saturate: bool = True, opset: int = LATEST_OPSET) -> pd.DataFrame:
    """Quantize/dequantize x again and again with the same parameters.

    Columns: round_trip (1..n), mse, rmse, sqnr_db, max_abs_error (all vs the original x),
    changed (elements that differ from the previous round trip) and max_change. A correct
    implementation is idempotent: ``changed`` is 0 from round trip 2 on.
    """
    import pandas as pd

    xa = as_input(x)
    fmt = target_format(target)
    if params.target and params.target != fmt.name:
        raise QuantizationError(f"params are for {params.target}, not {fmt.name}")
    if not params.target:
        params = QuantParams(params.scale, params.zero_point, params.axis, params.block_size,
                             params.granularity, params.method, fmt.name, params.clip_ratio)
    rows = []
    cur = xa
    for k in range(1, int(n) + 1):
        nxt = params.round_trip(cur, saturate=saturate, opset=opset)
        m = error_metrics(xa, nxt, params=params, opset=opset)
        a = np.asarray(cur, np.float64)
        b = np.asarray(nxt, np.float64)
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        with np.errstate(invalid="ignore"):
            diff = np.abs(b - a)
        finite = np.isfinite(diff)
        rows.append({"round_trip": k, "mse": m["mse"], "rmse": m["rmse"], "sqnr_db": m["sqnr_db"],
                     "max_abs_error": m["max_abs_error"], "changed": int((~same).sum()),
                     "max_change": float(diff[finite].max()) if finite.any() else 0.0})
        cur = nxt
    return pd.DataFrame(rows)


def chain(x: Any, steps: Any, *, method: str = "minmax", granularity: str = PER_TENSOR,
          axis: int = 0, block_size: int = 32, saturate: bool = True,
          opset: int = LATEST_OPSET) -> list[dict[str, Any]]:
    """x -> quantize/dequantize through each format in turn (e.g. ["float8e4m3fn", "int8"]).

    Each step is calibrated on its own input (minmax; amax for floats) unless a step is a dict
    ``{"target": ..., **choose_params keywords}``. Returns one dict per step: step, format, the
    metrics of :func:`qcore.metrics.error_metrics` against the original x, ``step_sqnr_db``
    (against the step's input), ``params`` and ``x_hat`` (the last one is the final result).
    """
    xa = as_input(x)
    out = []
    cur = xa
    for i, st in enumerate(steps):
        kw: dict[str, Any] = {"method": method, "granularity": granularity, "axis": axis,
                              "block_size": block_size}
        if isinstance(st, dict):
            st = dict(st)
            target = st.pop("target")
            kw.update(st)
        else:
            target = st
        fmt = target_format(target)
        p = choose_params(cur, fmt.name, **kw)
        xh = p.round_trip(cur, saturate=saturate, opset=opset)
        m = error_metrics(xa, xh, params=p, opset=opset)
        step = error_metrics(cur, xh, params=p, opset=opset)
        out.append({"step": i + 1, "format": fmt.name, **m, "step_sqnr_db": step["sqnr_db"],
                    "step_mse": step["mse"], "params": p, "x_hat": xh})
        cur = xh
    return out


__all__ = ["PARETO_BITS_DECIMALS", "bits_sqnr_front", "block_size_sweep", "chain",
           "clipping_sweep", "compare_formats", "front_pick", "pareto_front",
           "repeated_round_trips"]
