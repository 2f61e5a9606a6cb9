"""The kernel interface: named parameters and the kinds they carry.

Every kernel (CPU and CUDA) takes its configuration as one of three NamedTuples of int64
(numba types them as ``NamedUniTuple(int64 x n)``: one compiled kernel serves every format and
granularity, and numba.cuda passes them to a kernel by value). Each is built by one
``from_plan()`` from the plan :mod:`qcore.plans` made; the kinds are IntEnums, compared as
integers inside the kernels.

This module imports nothing from qcore: the plans and formats are read by attribute.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, NamedTuple


class XKind(IntEnum):
    """What QuantizeLinear's x holds (16-bit floats travel as their uint16 bits)."""

    F32 = 0
    F16 = 1
    BF16 = 2
    I32 = 3


class PKind(IntEnum):
    """The precision type of the division, and DequantizeLinear's output type."""

    F32 = 0
    F16 = 1
    BF16 = 2


class TKind(IntEnum):
    """QuantizeLinear's target family."""

    INT = 0  # saturating integers, any width
    FLOAT = 1  # small floats (float8/6/4), encoded bit by bit


class NanStyle(IntEnum):
    """How a small float format encodes NaN (the values of ``qcore.formats.NAN_*``)."""

    NONE = 0  # no NaN (float4, float6): NaN becomes +0
    ALL_ONES = 1  # S.1111.111 (e4m3fn), sign kept
    IEEE = 2  # exponent all ones, mantissa != 0 (e5m2, float16)
    NEG_ZERO = 3  # 0x80 is the only NaN, no -0 (the fnuz formats)


class DXKind(IntEnum):
    """How DequantizeLinear reads x."""

    NUMERIC = 0  # 8/16-bit integers: the value itself
    TABLE = 1  # sub-byte integers and small floats: a 256-entry decode table by byte
    I32 = 2  # int32: the difference is formed in int64, then rounded once


#: Format name -> kind (the IEEE inputs and precision types qcore accepts).
X_KINDS = {"float": XKind.F32, "float16": XKind.F16, "bfloat16": XKind.BF16, "int32": XKind.I32}
P_KINDS = {"float": PKind.F32, "float16": PKind.F16, "bfloat16": PKind.BF16}


class LayoutParams(NamedTuple):
    """The index map (see :mod:`qcore.layout`): x as (pre, dim, post), scales as
    (scale_pre, scale_blocks, scale_post), `block` elements of the axis per scale."""

    pre: int
    dim: int
    post: int
    block: int
    scale_pre: int
    scale_blocks: int
    scale_post: int
    uniform: int  # 1: per-tensor, one scale for everything

    @classmethod
    def from_layout(cls, layout: Any) -> LayoutParams:
        return cls(int(layout.pre), int(layout.dim), int(layout.post), int(layout.block),
                   int(layout.scale_pre), int(layout.scale_blocks), int(layout.scale_post),
                   int(layout.uniform))

    @classmethod
    def from_plan(cls, plan: Any) -> LayoutParams:
        return cls.from_layout(plan.layout)


class QuantizeParams(NamedTuple):
    """QuantizeLinear's element rule: input and precision kinds, then the target's
    integer range (INT) or small-float layout (FLOAT)."""

    xkind: int
    pkind: int
    tkind: int
    lo: int
    hi: int
    mask: int  # integer codes go to unsigned storage (then a view): keep `bits` low bits
    ebits: int
    mbits: int
    bias: int
    max_code: int
    has_inf: int
    nan_style: int
    saturate: int
    has_zp: int  # a zero point was given (added even when 0: -0 + 0 is +0)

    @classmethod
    def from_plan(cls, plan: Any, has_zero_point: bool) -> QuantizeParams:
        t = plan.target
        common = {"xkind": int(X_KINDS[plan.x.name]), "pkind": int(P_KINDS[plan.precision.name]),
                  "saturate": int(bool(plan.saturate)), "has_zp": int(bool(has_zero_point))}
        if t.is_integer:
            return cls(tkind=int(TKind.INT), lo=int(t.min), hi=int(t.max),
                       mask=(1 << t.bits) - 1, ebits=0, mbits=0, bias=0, max_code=0, has_inf=0,
                       nan_style=0, **common)
        return cls(tkind=int(TKind.FLOAT), lo=0, hi=0, mask=(1 << t.bits) - 1, ebits=t.ebits,
                   mbits=t.mbits, bias=t.bias, max_code=t.max_code, has_inf=int(t.has_inf),
                   nan_style=int(NanStyle(t.nan_style)), **common)

    def encoding(self) -> tuple[int, int, int, int, int, int, int]:
        """The small-float encoding alone (what an encode table depends on)."""
        return (self.ebits, self.mbits, self.bias, self.max_code, self.has_inf,
                self.nan_style, self.saturate)


class DequantizeParams(NamedTuple):
    """DequantizeLinear's element rule: how x is read and the output type."""

    xkind: int
    okind: int

    @classmethod
    def from_plan(cls, plan: Any) -> DequantizeParams:
        xf = plan.x
        if xf.name == "int32":
            xkind = DXKind.I32
        elif xf.is_integer and xf.bits >= 8:
            xkind = DXKind.NUMERIC
        else:
            xkind = DXKind.TABLE
        return cls(int(xkind), int(P_KINDS[plan.output.name]))
