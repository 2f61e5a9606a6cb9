"""One registry of every element type qcore knows.

Each :class:`Format` is defined once here (bits, range, special values, ONNX id and name,
ml_dtypes/NumPy dtype, and for the small floats the bit layout the kernels encode with).
Everything else -- the version table, validation, the kernels' parameters, the app's menus --
derives from this table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from .errors import QuantizationError

# Kinds of element type.
INT = "int"  # saturating integer targets (int2 ... uint16) and int32
FLOAT = "float"  # small float targets (float8/6/4) and the IEEE inputs
SCALE = "scale"  # float8e8m0: power-of-two scales only

# NaN conventions of the small float formats (how the kernels encode NaN).
NAN_NONE = 0  # no NaN encoding (float4, float6)
NAN_ALL_ONES = 1  # S.1111.111 is NaN (e4m3fn): sign kept
NAN_IEEE = 2  # exponent all ones, mantissa != 0 (e5m2, float16, bfloat16, float32)
NAN_NEG_ZERO = 3  # 0x80 is the only NaN, there is no -0 (the "fnuz" formats)


@dataclass(frozen=True)
class Format:
    """An element type: what it is, how it is stored, what it can hold."""

    name: str  # ONNX name, e.g. "float8e4m3fn"
    onnx_id: int  # TensorProto.DataType
    dtype: np.dtype  # NumPy / ml_dtypes dtype (one element per byte for sub-byte types)
    bits: int
    kind: str  # INT, FLOAT or SCALE
    signed: bool
    min: float  # most negative finite value
    max: float  # largest finite value
    description: str
    # Small-float layout (kind FLOAT); unused for integers.
    ebits: int = 0
    mbits: int = 0
    bias: int = 0
    has_inf: bool = False
    nan_style: int = NAN_NONE

    @property
    def is_float(self) -> bool:
        return self.kind == FLOAT

    @property
    def is_integer(self) -> bool:
        return self.kind == INT

    @property
    def is_subbyte(self) -> bool:
        return self.bits < 8

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def storage_dtype(self) -> np.dtype:
        """The plain NumPy integer dtype the kernels write codes into."""
        if self.kind == INT and self.bits >= 8:
            return self.dtype
        return np.dtype({1: np.uint8, 2: np.uint16, 4: np.uint32}[self.dtype.itemsize])

    @property
    def max_code(self) -> int:
        """Largest finite magnitude as a code without the sign bit (small floats)."""
        return int(np.array(self.max, np.float32).astype(self.dtype).view(self.storage_dtype))

    @property
    def min_positive(self) -> float:
        """Smallest positive value (subnormal for floats, 1 for integers)."""
        if self.kind == INT:
            return 1.0
        if self.kind == SCALE:
            return self.min
        return float(2.0 ** (1 - self.bias - self.mbits))

    @property
    def min_normal(self) -> float:
        """Smallest positive normal value (1 for integers; every float8e8m0 value is normal)."""
        if self.kind == INT:
            return 1.0
        if self.kind == SCALE:
            return self.min
        return float(2.0 ** (1 - self.bias))

    @property
    def levels(self) -> int:
        """Number of distinct finite values (zero counted once)."""
        if self.kind == INT:
            return int(self.max - self.min + 1)
        values = self.all_values()
        return int(np.unique(values[np.isfinite(values)]).size)

    def all_codes(self) -> np.ndarray:
        """Every bit pattern of the type as an array of this dtype (types of <= 16 bits)."""
        if self.bits > 16:
            raise QuantizationError(f"{self.name} has too many codes to list")
        n = 1 << self.bits
        if self.kind == INT and self.bits >= 8:
            lo = int(self.min)
            return np.arange(lo, lo + n, dtype=np.int64).astype(self.dtype)
        codes = np.arange(n, dtype=np.uint32)
        if self.kind == INT and self.signed:  # sub-byte ints are stored as their low bits
            return ((codes.astype(np.int64) ^ (n >> 1)) - (n >> 1)).astype(self.dtype)
        return codes.astype(self.storage_dtype).view(self.dtype)

    def all_values(self) -> np.ndarray:
        """The value of every code, in :meth:`all_codes` order, as float64."""
        with np.errstate(invalid="ignore"):
            return self.all_codes().astype(np.float64)


def _int(name, onnx_id, dtype, bits, signed, description):
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    return Format(name, onnx_id, np.dtype(dtype), bits, INT, signed, lo, hi, description)


def _float(name, onnx_id, dtype, ebits, mbits, bias, has_inf, nan_style, description, kind=FLOAT):
    dt = np.dtype(dtype)
    fi = ml_dtypes.finfo(dt)
    bits = ebits + mbits + (kind != SCALE)  # e8m0 is unsigned
    return Format(name, onnx_id, dt, bits, kind, True, float(fi.min), float(fi.max),
                  description, ebits, mbits, bias, has_inf, nan_style)


_FORMATS: tuple[Format, ...] = (
    _int("int2", 26, ml_dtypes.int2, 2, True, "2-bit signed integer, [-2, 1]"),
    _int("uint2", 25, ml_dtypes.uint2, 2, False, "2-bit unsigned integer, [0, 3]"),
    _int("int4", 22, ml_dtypes.int4, 4, True, "4-bit signed integer, [-8, 7]"),
    _int("uint4", 21, ml_dtypes.uint4, 4, False, "4-bit unsigned integer, [0, 15]"),
    _int("int8", 3, np.int8, 8, True, "8-bit signed integer, [-128, 127]"),
    _int("uint8", 2, np.uint8, 8, False, "8-bit unsigned integer, [0, 255]"),
    _int("int16", 5, np.int16, 16, True, "16-bit signed integer"),
    _int("uint16", 4, np.uint16, 16, False, "16-bit unsigned integer"),
    _int("int32", 6, np.int32, 32, True, "32-bit signed integer (inputs, accumulators)"),
    _float("float8e4m3fn", 17, ml_dtypes.float8_e4m3fn, 4, 3, 7, False, NAN_ALL_ONES,
           "float8 E4M3, finite + NaN (OCP FP8), max 448"),
    _float("float8e4m3fnuz", 18, ml_dtypes.float8_e4m3fnuz, 4, 3, 8, False, NAN_NEG_ZERO,
           "float8 E4M3, finite, NaN = 0x80, no -0 (Graphcore), max 240"),
    _float("float8e5m2", 19, ml_dtypes.float8_e5m2, 5, 2, 15, True, NAN_IEEE,
           "float8 E5M2, IEEE-like with Inf (OCP FP8), max 57344"),
    _float("float8e5m2fnuz", 20, ml_dtypes.float8_e5m2fnuz, 5, 2, 16, False, NAN_NEG_ZERO,
           "float8 E5M2, finite, NaN = 0x80, no -0 (Graphcore), max 57344"),
    _float("float6e2m3", 27, ml_dtypes.float6_e2m3fn, 2, 3, 1, False, NAN_NONE,
           "float6 E2M3 (OCP MX FP6), finite only, max 7.5"),
    _float("float6e3m2", 28, ml_dtypes.float6_e3m2fn, 3, 2, 3, False, NAN_NONE,
           "float6 E3M2 (OCP MX FP6), finite only, max 28"),
    _float("float4e2m1", 23, ml_dtypes.float4_e2m1fn, 2, 1, 1, False, NAN_NONE,
           "float4 E2M1 (OCP MX FP4), finite only, max 6"),
    _float("float8e8m0", 24, ml_dtypes.float8_e8m0fnu, 8, 0, 127, False, NAN_ALL_ONES,
           "8-bit power of two 2^(e-127), NaN = 0xFF (MX block scales)", kind=SCALE),
    _float("float16", 10, np.float16, 5, 10, 15, True, NAN_IEEE, "IEEE half precision"),
    _float("bfloat16", 16, ml_dtypes.bfloat16, 8, 7, 127, True, NAN_IEEE, "brain float 16"),
    _float("float", 1, np.float32, 8, 23, 127, True, NAN_IEEE, "IEEE single precision"),
)

FORMATS: dict[str, Format] = {f.name: f for f in _FORMATS}
_BY_ID = {f.onnx_id: f for f in _FORMATS}
_BY_DTYPE = {f.dtype: f for f in _FORMATS}
_ALIASES = {
    "float32": "float", "fp32": "float", "fp16": "float16", "half": "float16", "bf16": "bfloat16",
    "float8_e4m3fn": "float8e4m3fn", "float8_e4m3fnuz": "float8e4m3fnuz",
    "float8_e5m2": "float8e5m2", "float8_e5m2fnuz": "float8e5m2fnuz",
    "float8_e8m0fnu": "float8e8m0", "float8e8m0fnu": "float8e8m0",
    "float6_e2m3fn": "float6e2m3", "float6_e3m2fn": "float6e3m2", "float4_e2m1fn": "float4e2m1",
    "e4m3fn": "float8e4m3fn", "e4m3fnuz": "float8e4m3fnuz", "e5m2": "float8e5m2",
    "e5m2fnuz": "float8e5m2fnuz", "e2m1": "float4e2m1", "e2m3": "float6e2m3", "e3m2": "float6e3m2",
    "e8m0": "float8e8m0",
}

#: The types QuantizeLinear can produce, in the order menus show them.
QUANTIZED_TYPES: tuple[str, ...] = (
    "int2", "uint2", "int4", "uint4", "int8", "uint8", "int16", "uint16",
    "float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz",
    "float6e2m3", "float6e3m2", "float4e2m1",
)
#: High-precision types (inputs of QuantizeLinear, outputs of DequantizeLinear).
HIGH_PRECISION_TYPES: tuple[str, ...] = ("float", "float16", "bfloat16")


def get_format(spec: Any, argument: str = "dtype") -> Format:
    """Resolve an ONNX data-type number, a NumPy/ml_dtypes dtype or a name to its Format."""
    if isinstance(spec, Format):
        return spec
    if isinstance(spec, (bool, np.bool_)):
        raise QuantizationError(f"{argument}={spec!r} is not a data type")
    if isinstance(spec, (int, np.integer)):
        if int(spec) in _BY_ID:
            return _BY_ID[int(spec)]
        raise QuantizationError(
            f"{argument}={spec} is not an ONNX data-type number qcore knows; valid: "
            + ", ".join(f"{f.onnx_id} ({f.name})" for f in _FORMATS)
        )
    if isinstance(spec, str):
        key = spec.strip().lower()
        key = _ALIASES.get(key, key)
        if key.startswith("tensor(") and key.endswith(")"):  # one level, never recursive
            key = key[7:-1].strip()
            key = _ALIASES.get(key, key)
        if key in FORMATS:
            return FORMATS[key]
        raise QuantizationError(
            f"{argument}={spec!r} is not a type name qcore knows; valid: {', '.join(FORMATS)}"
        )
    try:
        dt = np.dtype(spec)
    except TypeError:
        raise QuantizationError(f"{argument}={spec!r} is not a data type") from None
    if dt in _BY_DTYPE:
        return _BY_DTYPE[dt]
    raise QuantizationError(
        f"{argument} has dtype {dt}, which no ONNX quantization operator accepts; valid: "
        + ", ".join(f.name for f in _FORMATS)
    )
