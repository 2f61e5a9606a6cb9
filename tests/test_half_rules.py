"""The 16-bit float rules of scalar.py (float16 widening, rounding to float16/bfloat16 as float32
and as bits) against NumPy's float16 and ml_dtypes' bfloat16 casts: every float16 pattern, and
every 257th float32 pattern plus the ranges around float16's subnormals, overflow and specials.
Both float16 rounding rules are checked: the F16C one (where the host has it) and the portable
one. NaN results are compared as NaN of the same sign."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from numba import njit

from qcore.kernels.params import PKind
from qcore.kernels.scalar import f16_to_f32, half_bits, round_f16_portable, round_to_precision


@njit(cache=True)
def _each(fn, v, out, *extra):
    """out[j] = fn(v[j], *extra): a scalar rule of the kernels over an array, compiled."""
    for j in range(v.size):
        out[j] = fn(v[j], *extra)


def _sample() -> np.ndarray:
    strided = np.arange(0, 1 << 32, 257, dtype=np.uint64).astype(np.uint32)
    ranges = [(0, 1 << 20), (0x33000000 - 4096, 0x38800000 + 4096),  # float16 subnormals
              (0x477FE000 - 4096, 0x47800000 + 4096),  # 65504 .. 65536
              (0x7F7F0000, 0x7F810000), (0x7FBFFF00, 0x7FC00100)]
    pos = np.concatenate([strided] + [np.arange(a, b, dtype=np.uint32) for a, b in ranges])
    return np.concatenate([pos, pos | np.uint32(0x80000000)])


def _same(ours: np.ndarray, ref: np.ndarray) -> None:
    ours32, ref32 = ours.astype(np.float32), ref.astype(np.float32)
    nan = np.isnan(ref32)
    ok = np.where(nan, np.isnan(ours32) & (np.signbit(ours32) == np.signbit(ref32)),
                  ours32.view(np.uint32) == ref32.view(np.uint32))
    bad = np.nonzero(~ok)[0]
    assert bad.size == 0, f"{bad.size} mismatches, first at index {bad[0]}"


def test_float16_widening_is_exact_for_every_pattern():
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    out = np.empty(h.size, np.float32)
    _each(f16_to_f32, h, out)
    ref = h.view(np.float16).astype(np.float32)
    assert (out.view(np.uint32) == ref.view(np.uint32)).all()  # NaN payloads included


@pytest.mark.parametrize("rule", ["round_to_precision", "portable"])
def test_rounding_to_float16(rule):
    v = _sample().view(np.float32)
    out = np.empty(v.size, np.float32)
    if rule == "portable":
        _each(round_f16_portable, v, out)
    else:
        _each(round_to_precision, v, out, int(PKind.F16))
    with np.errstate(all="ignore"):
        _same(out, v.astype(np.float16))


def test_rounding_to_bfloat16():
    v = _sample().view(np.float32)
    out = np.empty(v.size, np.float32)
    _each(round_to_precision, v, out, int(PKind.BF16))
    _same(out, v.astype(ml_dtypes.bfloat16))


@pytest.mark.parametrize("okind", [PKind.F16, PKind.BF16])
def test_half_bits(okind):
    v = _sample().view(np.float32)
    out = np.empty(v.size, np.uint32)
    _each(half_bits, v, out, int(okind))
    dtype = np.float16 if okind == PKind.F16 else ml_dtypes.bfloat16
    with np.errstate(all="ignore"):
        _same(out.astype(np.uint16).view(dtype), v.astype(dtype))
