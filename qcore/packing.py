"""Sub-byte storage: ONNX packs 4-bit types two per byte (low nibble first) and 2-bit types four
per byte (lowest bits first). In memory qcore keeps one element per byte (ml_dtypes' dtypes);
these functions convert between the two layouts, over the flattened tensor (row-major).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .concurrency import parallel_guard
from .errors import QuantizationError
from .formats import Format, get_format


@njit(parallel=True, cache=True, nogil=True)
def _pack(codes, bits, out):
    per = 8 // bits
    mask = (1 << bits) - 1
    for i in prange(out.size):
        v = 0
        for k in range(per):
            j = i * per + k
            if j < codes.size:
                v |= (codes[j] & mask) << (k * bits)
        out[i] = v


@njit(parallel=True, cache=True, nogil=True)
def _unpack(packed, bits, n, out):
    per = 8 // bits
    mask = (1 << bits) - 1
    for i in prange(packed.size):
        b = packed[i]
        for k in range(per):
            j = i * per + k
            if j < n:
                out[j] = (b >> (k * bits)) & mask


#: Element counts below this pack and unpack in NumPy: no kernel to compile (a parallel numba
#: kernel takes seconds to compile on first use, far longer than NumPy takes on a small array).
NUMPY_BELOW = 1 << 16


def _pack_numpy(codes: np.ndarray, bits: int, out: np.ndarray) -> None:
    per = 8 // bits
    padded = np.zeros(out.size * per, np.uint8)
    padded[:codes.size] = codes & ((1 << bits) - 1)
    shifts = np.arange(per, dtype=np.uint8) * bits
    out[:] = np.bitwise_or.reduce(padded.reshape(-1, per) << shifts, axis=1)


def _unpack_numpy(packed: np.ndarray, bits: int, n: int, out: np.ndarray) -> None:
    per = 8 // bits
    shifts = np.arange(per, dtype=np.uint8) * bits
    out[:] = ((packed[:, None] >> shifts) & ((1 << bits) - 1)).reshape(-1)[:n]


def _subbyte_format(dtype) -> Format:
    fmt = get_format(dtype, "dtype")
    if fmt.bits not in (2, 4):
        raise QuantizationError(
            f"packing is for the 2- and 4-bit types (int2, uint2, int4, uint4, float4e2m1); "
            f"{fmt.name} is {fmt.bits}-bit and already one element per byte or wider"
        )
    return fmt


def packed_size(n: int, dtype) -> int:
    """Bytes that `n` elements of a 2- or 4-bit type occupy packed."""
    fmt = _subbyte_format(dtype)
    per = 8 // fmt.bits
    return (n + per - 1) // per


def pack(array: np.ndarray) -> np.ndarray:
    """Pack a 2- or 4-bit array (one element per byte) into ONNX's storage layout (uint8).

    The last byte is zero-padded when the element count is not a multiple of 2 (or 4).
    """
    array = np.asarray(array)
    fmt = _subbyte_format(array.dtype)
    codes = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    out = np.empty(packed_size(codes.size, fmt), np.uint8)
    if 0 < codes.size < NUMPY_BELOW:
        _pack_numpy(codes, fmt.bits, out)
    elif codes.size:
        with parallel_guard():
            _pack(codes, fmt.bits, out)
    return out


def unpacked_shape(n_bytes: int, fmt: Format, shape, who: str) -> tuple[tuple[int, ...], int]:
    """(shape as a tuple, element count) of `n_bytes` packed codes of `fmt` unpacked to
    `shape`; refused (naming `who`) unless the bytes hold exactly that many codes."""
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(shape)
    n = int(np.prod(shape, dtype=np.int64))
    if n_bytes != packed_size(n, fmt):
        raise QuantizationError(
            f"{who}: {n_bytes} bytes cannot hold shape {shape} of {fmt.name}; "
            f"expected {packed_size(n, fmt)} bytes"
        )
    return shape, n


def unpack(packed: np.ndarray | bytes, dtype, shape) -> np.ndarray:
    """Inverse of :func:`pack`: bytes (a uint8 array or a bytes object) in ONNX layout to an
    array of `dtype` and `shape`."""
    fmt = _subbyte_format(dtype)
    if isinstance(packed, (bytes, bytearray, memoryview)):
        packed = np.frombuffer(packed, np.uint8)
    packed = np.ascontiguousarray(np.asarray(packed, dtype=np.uint8)).reshape(-1)
    shape, n = unpacked_shape(packed.size, fmt, shape, "unpack")
    out = np.empty(n, np.uint8)
    if 0 < n < NUMPY_BELOW:
        _unpack_numpy(packed, fmt.bits, n, out)
    elif n:
        with parallel_guard():
            _unpack(packed, fmt.bits, n, out)
    return out.view(fmt.dtype).reshape(shape)
