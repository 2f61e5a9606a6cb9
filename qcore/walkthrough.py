"""QuantizeLinear step by step for chosen elements, computed by the kernels' own element rules.

Each step (the quotient in the division type, the rounding, the zero point, the saturation and
the stored code) is the value the scalar rules of :mod:`qcore.kernels` give for that element:
the same functions the CPU and CUDA kernels call, compiled once more for a few elements. Nothing
is restated in NumPy; the code is checked against what qcore stored for the whole tensor.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit

from .errors import QuantizationError
from .formats import INT, Format
from .kernels import bound
from .kernels.bits import f32_as_u32
from .kernels.jit import INLINE, JIT
from .kernels.scalar import encode_f32_bits, saturate_int
from .quant_params import QuantParams, as_input, target_format
from .versions import LATEST_OPSET

# ---------------------------------------------------------------------------------------------
# the element rules and the kernels' parameter encoding (the only coupling to the kernels'
# internals: repoint these lines when the rules move)
# isort: split
from .kernels.params import QuantizeParams
from .kernels.scalar import load_x, round_to_precision


def _kinds(plan: Any, has_zero_point: bool) -> tuple[int, int]:
    """(x kind, precision kind) of a QuantizePlan as the kernels number them."""
    qp = QuantizeParams.from_plan(plan, has_zero_point)
    return int(qp.xkind), int(qp.pkind)


# ---------------------------------------------------------------------------------------------
# the kernel


@njit(**JIT)
def _on_grid(q, ebits, mbits, bias, max_code, has_inf, nan_style):
    """(code, k): q rounded to the format's significand grid with the exponent unbounded above
    is value(code) * 2**k. Above the subnormal range the grid is the same in every binade, so
    q is scaled by 2**-k into the lowest normal binade, where nothing overflows."""
    k = 0
    if math.isfinite(q):
        _, e = math.frexp(q)  # |q| = m * 2**e, 0.5 <= m < 1
        k = max(0, (e - 1) - (1 - bias))
    qs = np.float32(math.ldexp(np.float64(q), -k))
    return encode_f32_bits(f32_as_u32(qs), ebits, mbits, bias, max_code, has_inf, nan_style,
                           True), k


@njit(**INLINE)
def _quotient(x, s, xkind, pkind):
    """x / scale in the division type, both rounded to it first."""
    return round_to_precision(load_x(x, xkind, pkind) / round_to_precision(np.float32(s), pkind),
                              pkind)


# One kernel per kind of target and per input and precision type (bound as constants, see
# _steps_kernel): a view compiles only its own decoding and rounding, and an integer target no
# float encoder. All of it in one kernel behind flags took 4 s to compile, for a few elements.

_XKIND = 0  # bound per kernel: the input's kind (XKind)
_PKIND = 0  # bound per kernel: the division type's kind (PKind)


def _int_steps(xs, s, z, lo, hi, out):
    """Per element: out = (x/scale, rounded, + zero point, saturated = the stored code)."""
    for j in range(xs.size):
        q = _quotient(xs[j], s[j], _XKIND, _PKIND)
        r = np.rint(q)
        out[j, 0] = q
        out[j, 1] = r
        out[j, 2] = np.float64(r) + z[j]
        out[j, 3] = saturate_int(r, np.int64(z[j]), lo, hi)


def _float_steps(xs, s, z, has_zp, ebits, mbits, bias, max_code, has_inf, nan_style, saturate,
                 out, codes):
    """Per element: out[:, 0] = x/scale and out[:, 2] the quotient plus the zero point; the
    stored code in ``codes[:, 0]``, rounded / + zero point as (code, k) pairs in
    ``codes[:, 1:5]`` (the caller decodes them)."""
    for j in range(xs.size):
        q = _quotient(xs[j], s[j], _XKIND, _PKIND)
        qz = round_to_precision(q + np.float32(z[j]), _PKIND) if has_zp else q
        out[j, 0] = q
        out[j, 2] = qz
        codes[j, 0] = encode_f32_bits(f32_as_u32(qz), ebits, mbits, bias, max_code, has_inf,
                                      nan_style, saturate)
        codes[j, 1], codes[j, 2] = _on_grid(q, ebits, mbits, bias, max_code, has_inf, nan_style)
        codes[j, 3], codes[j, 4] = _on_grid(qz, ebits, mbits, bias, max_code, has_inf,
                                            nan_style)


_STEPS: dict = {}  # (template name, x kind, precision kind) -> kernel


def _steps_kernel(template, xkind: int, pkind: int):
    """`template` compiled for one input kind and division type (made on first use)."""
    key = (template.__name__, xkind, pkind)
    if key not in _STEPS:
        _STEPS[key] = bound(template, f"{template.__name__}_x{xkind}_p{pkind}",
                            JIT, _XKIND=xkind, _PKIND=pkind)
    return _STEPS[key]


def _float_values(fmt: Format, code: np.ndarray, k: np.ndarray, q: np.ndarray) -> np.ndarray:
    """value(code) * 2**k through the format's own decoding (NaN and +-Inf pass through)."""
    v = fmt.all_values()[code] * np.ldexp(1.0, k)
    return np.where(np.isfinite(q), v, q)


# ---------------------------------------------------------------------------------------------
# the table


def _bits_string(code: int, bits: int) -> str:
    return format(int(code) & ((1 << bits) - 1), f"0{bits}b")


def walkthrough(x: Any, params: QuantParams, target: Any, indices: Any, *, saturate: bool = True,
                precision: Any = None, opset: int = LATEST_OPSET, y: Any = None,
                x_hat: Any = None) -> Any:
    """Step by step for chosen elements: x, scale, x/scale, rounded, + zero point, saturated,
    the stored bits and x̂ — the same numbers qcore computes on the whole tensor.

    ``indices`` are flat indices or index tuples. ``y`` / ``x_hat`` may be given if already
    computed with the same settings. For float targets "rounded" is the quotient on the format's
    significand grid before any overflow handling; "saturated" is the stored code's value.
    """
    xa = as_input(x)
    fmt = target_format(target)
    if y is None:
        y = params.quantize(xa, saturate=saturate, precision=precision, opset=opset)
    if x_hat is None:
        x_hat = params.dequantize(y, opset=opset)
    y = np.asarray(y)
    x_hat = np.asarray(x_hat)
    flat = _flat_indices(indices, xa.shape)
    plan = params.plan(xa, saturate=saturate, precision=precision, opset=opset)
    sidx = plan.layout.scale_index(flat)
    s_val = np.asarray(params.scale).reshape(-1)[sidx]
    has_zp = params.zero_point is not None
    zp_val = (np.asarray(params.zero_point).reshape(-1)[sidx].astype(np.float64) if has_zp
              else np.zeros(flat.size))
    xv = np.ascontiguousarray(xa.reshape(-1)[flat])
    xkind, pkind = _kinds(plan, has_zp)
    n = flat.size
    out = np.full((n, 4), np.nan)
    codes = np.zeros((n, 5), np.int64)
    if n:
        with np.errstate(all="ignore"):
            s32 = np.ascontiguousarray(s_val.astype(np.float32))
        xin = xv.view(np.uint16) if xv.dtype.itemsize == 2 else xv
        z64 = np.ascontiguousarray(zp_val)
        if fmt.kind == INT:
            _steps_kernel(_int_steps, xkind, pkind)(xin, s32, z64, int(fmt.min), int(fmt.max),
                                                    out)
        else:
            _steps_kernel(_float_steps, xkind, pkind)(
                xin, s32, z64, has_zp, fmt.ebits, fmt.mbits, fmt.bias, fmt.max_code,
                fmt.has_inf, fmt.nan_style, bool(saturate), out, codes)
    quot = out[:, 0]
    ycodes = y.reshape(-1)[flat]
    if fmt.kind == INT:
        rounded, plus_zp, sat = out[:, 1], out[:, 2], out[:, 3]
        stored = [_bits_string(c, fmt.bits) for c in ycodes.astype(np.int64)]
    else:
        rounded = _float_values(fmt, codes[:, 1], codes[:, 2], quot)
        plus_zp = _float_values(fmt, codes[:, 3], codes[:, 4], out[:, 2])
        sat = fmt.all_values()[codes[:, 0]]
        stored = [_bits_string(c, fmt.bits)
                  for c in ycodes.view(fmt.storage_dtype).astype(np.int64)]
    xh = x_hat.reshape(-1)[flat].astype(np.float64)
    position = [tuple(int(v) for v in np.unravel_index(i, xa.shape)) if xa.ndim > 1 else int(i)
                for i in flat]
    with np.errstate(invalid="ignore"):
        err = xh - xv.astype(np.float64)
    import pandas as pd  # only here: importing qcore.metrics stays free of pandas

    return pd.DataFrame({
        "index": flat,
        "position": position,
        "x": xv.astype(np.float64),
        "scale": s_val.astype(np.float64),
        "x/scale": quot,
        "rounded": rounded,
        "+zero point": plus_zp,
        "saturated": np.asarray(sat, np.float64),
        "stored bits": stored,
        "x̂": xh,
        "error": err,
    })


def _flat_indices(indices: Any, shape: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    if isinstance(indices, (int, np.integer)):
        indices = [indices]
    items = list(indices)
    if items and isinstance(items[0], (tuple, list, np.ndarray)) and np.ndim(items[0]) == 1 \
            and len(shape) > 1:
        flat = np.ravel_multi_index(tuple(np.asarray(items).T), shape)
    else:
        flat = np.asarray(items, np.int64).reshape(-1)
    if flat.size and (flat.min() < -n or flat.max() >= n):
        raise QuantizationError(f"indices out of range for x with {n} elements")
    return np.asarray(flat, np.int64) % max(n, 1)


__all__ = ["walkthrough"]
