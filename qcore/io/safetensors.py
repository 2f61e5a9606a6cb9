"""The one strict reader of ``.safetensors`` headers (qcore.io and qcore.report both use it).

A file is an 8-byte little-endian header length, a JSON header ``{name: {dtype, shape,
data_offsets: [begin, end]}, "__metadata__": {...}}`` and the data section. Rules, so that no
header can make a reader misplace, wrap or overlap a tensor's bytes:

- the header is at most :data:`MAX_HEADER` bytes, within the file, nested at most
  :data:`~qcore.io.base.MAX_JSON_DEPTH` deep, and names every tensor once;
- ``shape`` is a list of non-negative Python ints (bool, float and str refused), its product
  computed exactly (no wrap-around);
- ``data_offsets`` are two non-negative ints with ``end - begin`` the shape's bytes, inside the
  data section, and no two tensors' byte ranges overlap.

:func:`parse_header` gives every entry, each with ``error`` set when that entry breaks a rule, so
a caller can still use the rest (the report does); :mod:`qcore.io` refuses the file instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from .base import MAX_TENSORS, TensorFileError, _Entry, _native, _size, loads_json

__all__ = ["DTYPES", "ITEMSIZE", "MAX_HEADER", "SafetensorsTensor", "header_length",
           "parse_header"]

# The format allows a 100 MB header; parsing that much JSON of tiny objects takes ~20x its size
# in memory, so headers are limited to 8 MiB here (~80k tensors).
MAX_HEADER = 8 * 2**20

#: safetensors dtype code -> NumPy dtype of the stored bytes
DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"),
    "U32": np.dtype("<u4"),
    "U16": np.dtype("<u2"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
ITEMSIZE = {code: dt.itemsize for code, dt in DTYPES.items()}


@dataclass(frozen=True)
class SafetensorsTensor:
    """One header entry: offsets are relative to the data section (after the header)."""

    name: str
    code: str  # dtype code, e.g. "BF16"
    shape: tuple[int, ...]
    begin: int
    end: int
    error: str = ""  # the rule this entry breaks ("" when it is sound)

    @property
    def elements(self) -> int:
        return math.prod(self.shape)


def header_length(label: str, first8: bytes, file_size: int) -> int:
    """The header's byte count from the file's first 8 bytes, checked against the file."""
    if len(first8) < 8:
        raise TensorFileError(
            f"{label}: truncated .safetensors file ({file_size} bytes; it must start with an "
            "8-byte header length).")
    n = int.from_bytes(first8[:8], "little")
    if n > file_size - 8:
        raise TensorFileError(
            f"{label}: the header claims {n} bytes but the file has only {file_size - 8} after "
            "the length field; the file is truncated or not a .safetensors file.")
    if n > MAX_HEADER:
        raise TensorFileError(
            f"{label}: the .safetensors header is {_size(n)}, over the {_size(MAX_HEADER)} this "
            "reader accepts (~80k tensors); split the file.")
    return n


def _int_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        type(v) is int and v >= 0 for v in value)  # bool is an int subclass: refused


def _entry(name: str, spec: Any, data_size: int) -> SafetensorsTensor:
    def bad(why: str, code: str = "", shape: tuple[int, ...] = ()) -> SafetensorsTensor:
        return SafetensorsTensor(name, code, shape, 0, 0, why)

    if not isinstance(spec, dict) or not {"dtype", "shape", "data_offsets"} <= spec.keys():
        return bad("its header entry needs dtype, shape and data_offsets.")
    code, shape, offsets = spec["dtype"], spec["shape"], spec["data_offsets"]
    if not isinstance(code, str) or code not in DTYPES:
        return bad(f"dtype {code!r} is not a safetensors dtype; valid: {', '.join(DTYPES)}.")
    if not _int_list(shape):
        return bad(f"shape {shape!r} is not a list of non-negative integers.", code)
    if not _int_list(offsets) or len(offsets) != 2:
        return bad(f"data_offsets {offsets!r} is not [begin, end] of non-negative integers.",
                   code, tuple(shape))
    begin, end = offsets
    need = math.prod(shape) * ITEMSIZE[code]
    if end < begin:
        return bad(f"data_offsets {offsets} end before they begin.", code, tuple(shape))
    if end - begin != need:
        return bad(f"data_offsets {offsets} span {end - begin} bytes but shape {shape} of {code} "
                   f"needs {need}; the header is corrupt.", code, tuple(shape))
    if end > data_size:
        return bad(f"its data ends at byte {end} but the data section holds {data_size}; the "
                   "file is truncated.", code, tuple(shape))
    return SafetensorsTensor(name, code, tuple(shape), begin, end)


def parse_header(label: str, header: bytes, data_size: int) -> list[SafetensorsTensor]:
    """Every tensor of a header in header order, each checked by the rules above (an entry that
    breaks one has ``error`` set); a header that is not such a JSON object raises
    :class:`TensorFileError`. ``data_size``: bytes after the header."""
    meta = loads_json(label, header, "the .safetensors header")
    if not isinstance(meta, dict):
        raise TensorFileError(f"{label}: the .safetensors header is not a JSON object.")
    if len(meta) > MAX_TENSORS + 1:
        raise TensorFileError(f"{label}: the header lists {len(meta):,} tensors, more than the "
                              f"{MAX_TENSORS:,} a file may hold here; split the file.")
    entries = [_entry(str(k), v, data_size) for k, v in meta.items() if k != "__metadata__"]
    sound = sorted((e for e in entries if not e.error and e.end > e.begin),
                   key=lambda e: (e.begin, e.end))
    overlap: dict[str, str] = {}
    reach: SafetensorsTensor | None = None  # the entry reaching furthest so far
    for cur in sound:
        if reach is not None and cur.begin < reach.end:
            overlap[cur.name] = (f"its bytes [{cur.begin}, {cur.end}) overlap tensor "
                                 f"{reach.name!r}'s [{reach.begin}, {reach.end}); the header "
                                 "is corrupt.")
        if reach is None or cur.end > reach.end:
            reach = cur
    if overlap:
        entries = [SafetensorsTensor(e.name, e.code, e.shape, 0, 0, overlap[e.name])
                   if e.name in overlap else e for e in entries]
    return entries


def safetensors_entries(label: str, data: bytes) -> list[_Entry]:
    """qcore.io's index of a whole .safetensors file in memory: any broken entry refuses it."""
    n = header_length(label, data[:8], len(data))
    body = memoryview(data)[8 + n:]
    out = []
    for t in parse_header(label, data[8:8 + n], len(body)):
        if t.error:
            raise TensorFileError(f"{label}: tensor {t.name!r}: {t.error}")
        out.append(_Entry(t.name, t.shape, DTYPES[t.code], _reader(body, t)))
    return out


def _reader(body: memoryview, t: SafetensorsTensor):
    def read() -> np.ndarray:
        flat = np.frombuffer(body[t.begin:t.end], dtype=DTYPES[t.code], count=t.elements)
        return _native(flat.reshape(t.shape))

    return read
