"""Load tensors from users' files: .npy, .npz, .safetensors, .onnx and .csv.

``load_tensor`` returns one NumPy array; ``list_tensors`` says what a file holds. A source is a
path (``str`` / ``Path``), the bytes of an upload (``bytes``, ``bytearray``, ``memoryview``), or
a binary file-like object with ``read()`` (e.g. Streamlit's ``UploadedFile``; its ``name`` is
used as the file name). For bytes, ``filename`` gives the extension; without one, .npy and .npz
are recognised by their magic bytes.

Policy:

- Nothing is ever unpickled: ``allow_pickle`` is never set and object arrays are refused.
- A file larger than ``max_bytes`` (default 256 MiB) is refused before it is read; so is an
  .npz whose members would decompress to more than that. An .npz member is inflated only as
  far as its .npy header promises, so a member that inflates further costs nothing.
- ``max_elements`` (default: none) refuses a tensor with more elements before its data is
  decompressed or converted; a .csv is counted (rows x columns) before it is parsed.
- :class:`TensorFile` reads and indexes a source once (a .csv is parsed once): ``list()`` and
  ``load(name)`` share that work; ``load_tensor`` / ``list_tensors`` are one-call wrappers.
- With ``name=None``, a file holding exactly one tensor gives that tensor; a file holding
  several raises :class:`TensorFileError` listing their names (use ``list_tensors`` and pass
  ``name=``). Single-tensor formats (.npy, .csv) call their tensor by the file's stem.
- .csv is numeric text, comma / semicolon / tab / whitespace separated, with or without one
  header row, ``#`` comments allowed; parsed as float32 (the operators' input type) by pandas'
  C parser in chunks into one preallocated array (rows wider than 4096 cells piece by piece), so
  memory is the output plus a bounded chunk. One column or one row gives a 1-D array,
  otherwise 2-D (rows, columns).
- .onnx needs the optional ``onnx`` package; initializers are read by name from the main graph
  and external data is never loaded.
- .safetensors headers are read by :mod:`qcore.io.safetensors`, the one strict reader the
  report uses too: exact shapes, unique names, offsets inside the file and not overlapping,
  JSON nesting bounded (:func:`qcore.io.base.loads_json`).
- Every problem (missing, empty, truncated, corrupt, oversized, pickled, non-numeric, zero
  elements) raises :class:`TensorFileError` naming the file, what is wrong and what is valid.

Modules, one per format: this one (sources, selection), :mod:`qcore.io.base` (the error type,
JSON, helpers), :mod:`qcore.io.npy` (.npy / .npz), :mod:`qcore.io.safetensors`,
:mod:`qcore.io.csv`, :mod:`qcore.io.onnx` (initializer entries, and the one reader of an ONNX
model's weights that the report, the model tool and the pages share).
"""

from __future__ import annotations

import errno
import math
import os
from pathlib import Path
from typing import BinaryIO

import ml_dtypes
import numpy as np

from .base import MAX_TENSORS, TensorFileError, _Entry, _short, _size, _stem
from .csv import csv_entry
from .npy import NPY_MAGIC, VALID_NUMERIC, ZIP_MAGIC, npy_entry, npz_entries
from .onnx import onnx_entries
from .safetensors import safetensors_entries

__all__ = [
    "DEFAULT_MAX_BYTES",
    "SUPPORTED_EXTENSIONS",
    "TensorFile",
    "TensorFileError",
    "list_tensors",
    "load_all",
    "MAX_TENSORS",
    "load_tensor",
]

DEFAULT_MAX_BYTES = 256 * 2**20
SUPPORTED_EXTENSIONS = (".npy", ".npz", ".safetensors", ".onnx", ".csv")

Source = str | os.PathLike | bytes | bytearray | memoryview | BinaryIO

_ML_DTYPE_NAMES = (
    "bfloat16",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e4m3b11fnuz",
    "float8_e3m4",
    "float8_e4m3",
    "float8_e8m0fnu",
    "float6_e2m3fn",
    "float6_e3m2fn",
    "float4_e2m1fn",
    "int4",
    "uint4",
    "int2",
    "uint2",
)
_ML_DTYPES = frozenset(
    np.dtype(getattr(ml_dtypes, n)) for n in _ML_DTYPE_NAMES if hasattr(ml_dtypes, n)
)


# --------------------------------------------------------------------------- public API


class TensorFile:
    """A file read and indexed once: :meth:`list` says what it holds, :meth:`load` reads one.

    The source is read (and a .csv parsed) when the object is made, so listing and then
    loading costs one parse. ``max_elements`` refuses any tensor with more elements before its
    data is decompressed or converted (a .csv: before its array is built).
    """

    def __init__(self, source: Source, *, filename: str | None = None,
                 max_bytes: int = DEFAULT_MAX_BYTES, max_elements: int | None = None) -> None:
        self.label, ext, data = _read_source(source, filename, max_bytes)
        self.max_elements = max_elements
        self.entries = _index(self.label, ext, data, max_bytes, max_elements)

    def list(self) -> list[tuple[str, tuple[int, ...], str]]:
        """``(name, shape, dtype name)`` of every tensor, in file order."""
        return [(e.name, e.shape, e.dtype.name) for e in self.entries]

    def load(self, name: str | None = None) -> np.ndarray:
        """One numeric tensor (see :func:`load_tensor`)."""
        entry = _pick(self.label, self.entries, name)
        _require_numeric(self.label, entry)
        _check_elements(self.label, entry, self.max_elements)
        array = _read_entry(self.label, entry, "; the file is probably corrupt or truncated.")
        if array.size == 0:
            raise TensorFileError(
                f"{self.label}: tensor {entry.name!r} has shape {tuple(array.shape)} and no "
                "elements; a tensor to quantize needs at least one value."
            )
        return array


def load_tensor(
    source: Source,
    name: str | None = None,
    *,
    filename: str | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_elements: int | None = None,
) -> np.ndarray:
    """Read one numeric tensor from a file or an upload (see the module docstring)."""
    return TensorFile(source, filename=filename, max_bytes=max_bytes,
                      max_elements=max_elements).load(name)


def list_tensors(
    source: Source, *, filename: str | None = None, max_bytes: int = DEFAULT_MAX_BYTES,
    max_elements: int | None = None,
) -> list[tuple[str, tuple[int, ...], str]]:
    """List ``(name, shape, dtype name)`` of every tensor in a file, in file order."""
    return TensorFile(source, filename=filename, max_bytes=max_bytes,
                      max_elements=max_elements).list()


def load_all(
    source: Source, *, filename: str | None = None, max_bytes: int = DEFAULT_MAX_BYTES
) -> dict[str, np.ndarray]:
    """Read every tensor of a file into a ``{name: array}`` dict (numeric or not, any size)."""
    f = TensorFile(source, filename=filename, max_bytes=max_bytes)
    return {e.name: _read_entry(f.label, e, ".") for e in f.entries}


def _read_entry(label: str, entry: _Entry, hint: str) -> np.ndarray:
    try:
        return entry.read()
    except TensorFileError:
        raise
    except Exception as exc:  # every reader fault becomes a TensorFileError
        raise TensorFileError(
            f"{label}: tensor {entry.name!r} could not be decoded ({_short(exc)}){hint}"
        ) from None


def _check_elements(label: str, entry: _Entry, max_elements: int | None) -> None:
    count = math.prod(entry.shape)
    if max_elements is not None and count > max_elements:
        raise TensorFileError(
            f"{label}: tensor {entry.name!r} has shape {entry.shape} = {count:,} elements, over "
            f"the limit of {max_elements:,} (max_elements); slice it before loading."
        )


# --------------------------------------------------------------------------- sources


def _read_source(source: Source, filename: str | None, max_bytes: int) -> tuple[str, str, bytes]:
    """Return ``(label for messages, lower-case extension, raw bytes)`` of a source."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        label = str(path)
        data = _read_path(path, max_bytes)
        ext = _extension(filename or path.name)
    elif isinstance(source, (bytes, bytearray, memoryview)):
        label = filename or "uploaded data"
        data = bytes(source)
        _check_size(label, len(data), max_bytes)
        ext = _extension(filename) if filename else ""
    elif hasattr(source, "read"):
        filename = filename or getattr(source, "name", None)
        label = str(filename or "uploaded file")
        # getvalue() (BytesIO, Streamlit's UploadedFile) does not depend on the read position.
        try:
            data = source.getvalue() if hasattr(source, "getvalue") else source.read(max_bytes + 1)
        except (OSError, ValueError) as exc:  # text-mode decoding errors, closed files
            raise TensorFileError(
                f"{label}: cannot be read ({_short(exc)}); open the file in binary mode ('rb')."
            ) from None
        if not isinstance(data, (bytes, bytearray)):
            raise TensorFileError(f"{label}: the file object must be opened in binary mode.")
        _check_size(label, len(data), max_bytes, at_least=len(data) == max_bytes + 1)
        data = bytes(data)
        ext = _extension(str(filename)) if filename else ""
    else:
        raise TensorFileError(
            f"cannot read a tensor from a {type(source).__name__}; pass a path (str or Path), "
            "the file's bytes, or a binary file object."
        )
    if not data:
        raise TensorFileError(f"{label}: the file is empty (0 bytes).")
    if not ext:
        ext = _sniff(data)
        if not ext:
            raise TensorFileError(
                f"{label}: cannot tell the format; pass filename= with one of the extensions "
                f"{', '.join(SUPPORTED_EXTENSIONS)}."
            )
    if ext not in SUPPORTED_EXTENSIONS:
        raise TensorFileError(
            f"{label}: unsupported file type {ext!r}; supported are "
            f"{', '.join(SUPPORTED_EXTENSIONS)}."
        )
    return label, ext, data


def _read_path(path: Path, max_bytes: int) -> bytes:
    """Read a file after checking it exists, is a file and is within ``max_bytes``."""
    if "\x00" in str(path):
        raise TensorFileError(
            f"{str(path)!r}: the path contains a null byte (\\x00), which no file name can hold."
        )
    try:
        stat = path.stat()
    except OSError as exc:
        raise TensorFileError(f"{path}: {_os_fault(exc)}") from None
    if not path.is_file():
        raise TensorFileError(f"{path}: not a regular file.")
    _check_size(str(path), stat.st_size, max_bytes)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TensorFileError(f"{path}: cannot be read ({_os_fault(exc)})") from None


def _os_fault(exc: OSError) -> str:
    """What an OSError from stat/open says, in words."""
    if exc.errno == errno.ENOENT:
        return "no such file."
    if exc.errno == errno.ELOOP:
        return "a loop of symbolic links (a link points back to itself); fix or remove the link."
    if exc.errno == errno.ENAMETOOLONG:
        return ("the file name is too long for the file system (at most 255 bytes per name); "
                "rename the file.")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied."
    if exc.errno == errno.ENOTDIR:
        return "a part of the path is not a directory."
    return f"{exc.strerror or type(exc).__name__}."


def _check_size(label: str, size: int, max_bytes: int, *, at_least: bool = False) -> None:
    if size > max_bytes:
        more = "more than " if at_least else ""
        raise TensorFileError(
            f"{label}: the file is {more}{_size(size)}, over the limit of {_size(max_bytes)} "
            "(max_bytes); slice the tensor or raise max_bytes."
        )


def _extension(filename: str) -> str:
    return Path(filename).suffix.lower()


def _sniff(data: bytes) -> str:
    if data.startswith(NPY_MAGIC):
        return ".npy"
    if data.startswith(ZIP_MAGIC):
        return ".npz"
    return ""


# --------------------------------------------------------------------------- selection


def _index(label: str, ext: str, data: bytes, max_bytes: int,
           max_elements: int | None = None) -> list[_Entry]:
    readers = {
        ".npy": lambda: [npy_entry(label, _stem(label), data)],
        ".npz": lambda: npz_entries(label, data, max_bytes, max_elements),
        ".safetensors": lambda: safetensors_entries(label, data),
        ".onnx": lambda: onnx_entries(label, data),
        ".csv": lambda: [csv_entry(label, data, max_elements)],
    }
    entries = readers[ext]()
    if not entries:
        raise TensorFileError(f"{label}: the file holds no tensors.")
    if len(entries) > MAX_TENSORS:
        raise TensorFileError(
            f"{label}: holds {len(entries):,} tensors, more than the {MAX_TENSORS:,} a file may "
            "hold here; split the file."
        )
    return entries


def _pick(label: str, entries: list[_Entry], name: str | None) -> _Entry:
    if name is None:
        if len(entries) == 1:
            return entries[0]
        raise TensorFileError(
            f"{label}: holds {len(entries)} tensors, pass name= one of {_names(entries)} "
            "(list_tensors() lists them with shapes)."
        )
    for entry in entries:
        if entry.name == name:
            return entry
    raise TensorFileError(f"{label}: no tensor named {name!r}; valid names: {_names(entries)}.")


def _names(entries: list[_Entry], limit: int = 20) -> str:
    shown = ", ".join(repr(e.name) for e in entries[:limit])
    more = f" and {len(entries) - limit} more" if len(entries) > limit else ""
    return f"{shown}{more}"


def _is_numeric(dtype: np.dtype) -> bool:
    return dtype.kind in "iuf" or dtype in _ML_DTYPES


def _require_numeric(label: str, entry: _Entry) -> None:
    if not _is_numeric(entry.dtype):
        hint = ""
        if entry.dtype.kind == "V" and not entry.dtype.names:
            hint = (
                " (.npy cannot record ml_dtypes types such as bfloat16 or float8: an array "
                "saved from one reads back as raw bytes; save it as float32, or as .safetensors)"
            )
        raise TensorFileError(
            f"{label}: tensor {entry.name!r} has dtype {entry.dtype.name!r}, which is not "
            f"numeric{hint}; valid tensors are {VALID_NUMERIC}."
        )
