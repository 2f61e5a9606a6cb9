"""Load tensors from users' files: .npy, .npz, .safetensors, .onnx and .csv.

``load_tensor`` returns one NumPy array; ``list_tensors`` says what a file holds. A source is a
path (``str`` / ``Path``), the bytes of an upload (``bytes``, ``bytearray``, ``memoryview``), or
a binary file-like object with ``read()`` (e.g. Streamlit's ``UploadedFile``; its ``name`` is
used as the file name). For bytes, ``filename`` gives the extension; without one, .npy and .npz
are recognised by their magic bytes.

Policy:

- Nothing is ever unpickled: ``allow_pickle`` is never set and object arrays are refused.
- A file larger than ``max_bytes`` (default 256 MiB) is refused before it is read; so is an
  .npz whose members would decompress to more than that.
- With ``name=None``, a file holding exactly one tensor gives that tensor; a file holding
  several raises :class:`TensorFileError` listing their names (use ``list_tensors`` and pass
  ``name=``). Single-tensor formats (.npy, .csv) call their tensor by the file's stem.
- .csv is numeric text, comma / semicolon / tab / whitespace separated, with or without one
  header row, ``#`` comments allowed; parsed as float32 (the operators' input type). One column
  or one row gives a 1-D array, otherwise 2-D (rows, columns).
- .onnx needs the optional ``onnx`` package; initializers are read by name from the main graph
  and external data is never loaded.
- Every problem (missing, empty, truncated, corrupt, oversized, pickled, non-numeric, zero
  elements) raises :class:`TensorFileError` naming the file, what is wrong and what is valid.
"""

from __future__ import annotations

import io
import json
import math
import os
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import ml_dtypes
import numpy as np

from .errors import QuantizationError

__all__ = [
    "DEFAULT_MAX_BYTES",
    "SUPPORTED_EXTENSIONS",
    "TensorFileError",
    "list_tensors",
    "load_all",
    "load_tensor",
]

DEFAULT_MAX_BYTES = 256 * 2**20
SUPPORTED_EXTENSIONS = (".npy", ".npz", ".safetensors", ".onnx", ".csv")

Source = str | os.PathLike | bytes | bytearray | memoryview | BinaryIO

_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = b"PK\x03\x04"
_MAX_SAFETENSORS_HEADER = 100 * 2**20  # the limit the safetensors format itself sets

_SAFETENSORS_DTYPES: dict[str, np.dtype] = {
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
}

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

_VALID_NUMERIC = "integer or floating point (incl. bfloat16 / float8 / int4 from ml_dtypes)"


class TensorFileError(QuantizationError):
    """A tensor file that cannot be read: the message names the file, the fault and the fix."""


@dataclass(frozen=True)
class _Entry:
    """One tensor in a file: its name, shape, dtype and how to read it."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    read: Callable[[], np.ndarray]


# --------------------------------------------------------------------------- public API


def load_tensor(
    source: Source,
    name: str | None = None,
    *,
    filename: str | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> np.ndarray:
    """Read one numeric tensor from a file or an upload (see the module docstring)."""
    label, ext, data = _read_source(source, filename, max_bytes)
    entries = _index(label, ext, data, max_bytes)
    entry = _pick(label, entries, name)
    _require_numeric(label, entry)
    try:
        array = entry.read()
    except TensorFileError:
        raise
    except Exception as exc:  # every reader fault becomes a TensorFileError
        raise TensorFileError(
            f"{label}: tensor {entry.name!r} could not be decoded ({_short(exc)}); "
            "the file is probably corrupt or truncated."
        ) from None
    if array.size == 0:
        raise TensorFileError(
            f"{label}: tensor {entry.name!r} has shape {tuple(array.shape)} and no elements; "
            "a tensor to quantize needs at least one value."
        )
    return array


def list_tensors(
    source: Source, *, filename: str | None = None, max_bytes: int = DEFAULT_MAX_BYTES
) -> list[tuple[str, tuple[int, ...], str]]:
    """List ``(name, shape, dtype name)`` of every tensor in a file, in file order."""
    label, ext, data = _read_source(source, filename, max_bytes)
    return [(e.name, e.shape, e.dtype.name) for e in _index(label, ext, data, max_bytes)]


def load_all(
    source: Source, *, filename: str | None = None, max_bytes: int = DEFAULT_MAX_BYTES
) -> dict[str, np.ndarray]:
    """Read every tensor of a file into a ``{name: array}`` dict (numeric or not, any size)."""
    label, ext, data = _read_source(source, filename, max_bytes)
    out = {}
    for entry in _index(label, ext, data, max_bytes):
        try:
            out[entry.name] = entry.read()
        except TensorFileError:
            raise
        except Exception as exc:
            raise TensorFileError(
                f"{label}: tensor {entry.name!r} could not be decoded ({_short(exc)})."
            ) from None
    return out


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
    try:
        stat = path.stat()
    except OSError:
        raise TensorFileError(f"{path}: no such file.") from None
    if not path.is_file():
        raise TensorFileError(f"{path}: not a regular file.")
    _check_size(str(path), stat.st_size, max_bytes)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TensorFileError(f"{path}: cannot be read ({_short(exc)}).") from None


def _check_size(label: str, size: int, max_bytes: int, *, at_least: bool = False) -> None:
    if size > max_bytes:
        more = "more than " if at_least else ""
        raise TensorFileError(
            f"{label}: the file is {more}{_mib(size)}, over the limit of {_mib(max_bytes)} "
            "(max_bytes); slice the tensor or raise max_bytes."
        )


def _extension(filename: str) -> str:
    return Path(filename).suffix.lower()


def _sniff(data: bytes) -> str:
    if data.startswith(_NPY_MAGIC):
        return ".npy"
    if data.startswith(_ZIP_MAGIC):
        return ".npz"
    return ""


def _stem(label: str) -> str:
    stem = Path(label).stem
    return stem if stem and label not in ("uploaded data", "uploaded file") else "tensor"


# --------------------------------------------------------------------------- selection


def _index(label: str, ext: str, data: bytes, max_bytes: int) -> list[_Entry]:
    readers = {
        ".npy": lambda: [_npy_entry(label, _stem(label), data)],
        ".npz": lambda: _npz_entries(label, data, max_bytes),
        ".safetensors": lambda: _safetensors_entries(label, data),
        ".onnx": lambda: _onnx_entries(label, data),
        ".csv": lambda: [_csv_entry(label, data)],
    }
    entries = readers[ext]()
    if not entries:
        raise TensorFileError(f"{label}: the file holds no tensors.")
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
            f"numeric{hint}; valid tensors are {_VALID_NUMERIC}."
        )


# --------------------------------------------------------------------------- .npy / .npz


def _npy_header(label: str, head: bytes) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """Parse a .npy header: ``(shape, fortran_order, dtype, data offset)``."""
    if not head.startswith(_NPY_MAGIC):
        if head[:1] == b"\x80" or head[:1] in (b"(", b"c", b"]", b"}"):
            raise TensorFileError(
                f"{label}: looks like a Python pickle, not a .npy array; pickles are never "
                "loaded (they can run code). Save the array with numpy.save."
            )
        raise TensorFileError(
            f"{label}: not a .npy file (it does not start with the \\x93NUMPY magic); "
            "save the array with numpy.save."
        )
    fp = io.BytesIO(head)
    try:
        version = np.lib.format.read_magic(fp)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fp)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fp)
        else:
            raise TensorFileError(
                f"{label}: .npy format version {version} is not supported (1.0 and 2.0 are)."
            )
    except TensorFileError:
        raise
    except Exception as exc:
        raise TensorFileError(
            f"{label}: the .npy header is corrupt or truncated ({_short(exc)})."
        ) from None
    if dtype.hasobject:
        raise TensorFileError(
            f"{label}: holds a Python object array (pickled data), which is never loaded; "
            f"valid arrays are {_VALID_NUMERIC}."
        )
    return tuple(int(d) for d in shape), bool(fortran), dtype, fp.tell()


def _npy_entry(label: str, name: str, data: bytes) -> _Entry:
    shape, fortran, dtype, offset = _npy_header(label, data)
    count = math.prod(shape)
    need = count * dtype.itemsize
    have = len(data) - offset
    if have < need:
        raise TensorFileError(
            f"{label}: truncated: the header promises {shape} {dtype.name} ({need} bytes) but "
            f"only {have} bytes of data follow."
        )

    def read() -> np.ndarray:
        flat = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
        arr = flat.reshape(shape[::-1]).T if fortran else flat.reshape(shape)
        return _native(arr)

    return _Entry(name, shape, dtype, read)


def _npz_entries(label: str, data: bytes, max_bytes: int) -> list[_Entry]:
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        infos = [i for i in zf.infolist() if not i.is_dir()]
    except Exception as exc:  # zipfile raises many types on corrupt input
        raise TensorFileError(
            f"{label}: not a valid .npz (zip) archive ({_short(exc)}); the file is corrupt or "
            "truncated. Save arrays with numpy.savez / savez_compressed."
        ) from None
    total = sum(i.file_size for i in infos)
    if total > max_bytes:
        raise TensorFileError(
            f"{label}: its arrays would decompress to {_mib(total)}, over the limit of "
            f"{_mib(max_bytes)} (max_bytes)."
        )
    entries = []
    for info in infos:
        if not info.filename.endswith(".npy"):
            raise TensorFileError(
                f"{label}: member {info.filename!r} is not a .npy array; a .npz holds only "
                ".npy members (numpy.savez)."
            )
        member = info.filename[: -len(".npy")]
        head = _zip_read(label, zf, info, limit=65536)
        shape, _, dtype, _ = _npy_header(f"{label}[{member}]", head)
        entries.append(_Entry(member, shape, dtype, _npz_reader(label, zf, info, member)))
    return entries


def _npz_reader(label: str, zf: zipfile.ZipFile, info: zipfile.ZipInfo, member: str):
    def read() -> np.ndarray:
        raw = _zip_read(label, zf, info)
        return _npy_entry(f"{label}[{member}]", member, raw).read()

    return read


def _zip_read(label: str, zf: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int = -1) -> bytes:
    try:
        with zf.open(info) as fh:
            return fh.read(limit)
    except Exception as exc:  # BadZipFile, zlib.error, NotImplementedError, RuntimeError, ...
        raise TensorFileError(
            f"{label}: member {info.filename!r} is corrupt or truncated ({_short(exc)})."
        ) from None


def _native(arr: np.ndarray) -> np.ndarray:
    """A writable, C-contiguous, native-byte-order copy."""
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return np.array(arr, order="C", copy=True)


# --------------------------------------------------------------------------- .safetensors


def _safetensors_entries(label: str, data: bytes) -> list[_Entry]:
    if len(data) < 8:
        raise TensorFileError(
            f"{label}: truncated .safetensors file ({len(data)} bytes; it must start with an "
            "8-byte header length)."
        )
    n = int.from_bytes(data[:8], "little")
    if n > _MAX_SAFETENSORS_HEADER or n > len(data) - 8:
        raise TensorFileError(
            f"{label}: the header claims {n} bytes but the file has only {len(data) - 8} after "
            "the length field; the file is truncated or not a .safetensors file."
        )
    try:
        header = json.loads(data[8 : 8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TensorFileError(
            f"{label}: the .safetensors JSON header is corrupt ({_short(exc)})."
        ) from None
    if not isinstance(header, dict):
        raise TensorFileError(f"{label}: the .safetensors header is not a JSON object.")
    body = memoryview(data)[8 + n :]
    return [
        _safetensors_entry(label, key, spec, body)
        for key, spec in header.items()
        if key != "__metadata__"
    ]


def _safetensors_entry(label: str, key: str, spec: Any, body: memoryview) -> _Entry:
    where = f"{label}: tensor {key!r}"
    if not isinstance(spec, dict) or not {"dtype", "shape", "data_offsets"} <= spec.keys():
        raise TensorFileError(f"{where}: header entry needs dtype, shape and data_offsets.")
    code, shape, offsets = spec["dtype"], spec["shape"], spec["data_offsets"]
    if code not in _SAFETENSORS_DTYPES:
        raise TensorFileError(
            f"{where}: dtype {code!r} is not supported; supported are "
            f"{', '.join(_SAFETENSORS_DTYPES)}."
        )
    if not _int_list(shape) or not _int_list(offsets) or len(offsets) != 2:
        raise TensorFileError(
            f"{where}: shape must be a list of non-negative ints and data_offsets [begin, end]."
        )
    dtype = _SAFETENSORS_DTYPES[code]
    begin, end = offsets
    count = math.prod(shape)
    need = count * dtype.itemsize
    if end < begin or end - begin != need:
        raise TensorFileError(
            f"{where}: data_offsets {offsets} span {end - begin} bytes but shape {shape} of "
            f"{code} needs {need}; the header is corrupt."
        )
    if end > len(body):
        raise TensorFileError(
            f"{where}: data ends at byte {end} but only {len(body)} bytes of data are present; "
            "the file is truncated."
        )

    def read() -> np.ndarray:
        flat = np.frombuffer(body[begin:end], dtype=dtype, count=count)
        return _native(flat.reshape(shape))

    return _Entry(key, tuple(shape), dtype, read)


def _int_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    )


# --------------------------------------------------------------------------- .onnx


def _onnx_entries(label: str, data: bytes) -> list[_Entry]:
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError:
        raise TensorFileError(
            f"{label}: reading .onnx files needs the optional 'onnx' package, which is not "
            "installed; pip install onnx (or qcore[onnx]), or export the tensor as .npy."
        ) from None
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise TensorFileError(
            f"{label}: not a valid ONNX model ({_short(exc)}); the file is corrupt or truncated."
        ) from None
    if not model.HasField("graph"):
        raise TensorFileError(f"{label}: not a valid ONNX model (it has no graph).")
    return [_onnx_entry(label, t, onnx, numpy_helper) for t in model.graph.initializer]


def _onnx_entry(label: str, tensor: Any, onnx: Any, numpy_helper: Any) -> _Entry:
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type))
    except Exception:  # unknown / undefined element type
        dtype = np.dtype(object)
    external = tensor.data_location == onnx.TensorProto.EXTERNAL

    def read() -> np.ndarray:
        if external:
            raise TensorFileError(
                f"{label}: initializer {tensor.name!r} is stored in external data, which is "
                "not loaded; save the model with its weights inside the .onnx file."
            )
        return _native(np.asarray(numpy_helper.to_array(tensor)))

    return _Entry(tensor.name, tuple(int(d) for d in tensor.dims), dtype, read)


# --------------------------------------------------------------------------- .csv


def _csv_entry(label: str, data: bytes) -> _Entry:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise TensorFileError(
            f"{label}: not a UTF-8 text file; a .csv must hold numbers as text."
        ) from None
    lines = [
        (number, line)
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if not lines:
        raise TensorFileError(f"{label}: the .csv holds no numbers.")
    delimiter = _csv_delimiter(lines[0][1])
    has_header = any(f and not _is_number(f) for f in _split(lines[0][1], delimiter))
    rows = lines[1:] if has_header else lines
    if not rows:
        raise TensorFileError(f"{label}: the .csv has a header row but no numbers.")
    array = _parse_csv_rows(label, rows, delimiter)
    return _Entry(_stem(label), array.shape, array.dtype, array.copy)


def _csv_delimiter(line: str) -> str | None:
    for delimiter in (",", ";", "\t"):
        if delimiter in line:
            return delimiter
    return None  # any run of whitespace


def _split(line: str, delimiter: str | None) -> list[str]:
    return [f.strip().strip('"').strip() for f in line.split(delimiter)]


def _is_number(field: str) -> bool:
    try:
        float(field)
    except ValueError:
        return False
    return True


def _parse_csv_rows(label: str, rows: list[tuple[int, str]], delimiter: str | None) -> np.ndarray:
    """Parse numbered text rows into a float32 array (1-D for one row or one column)."""
    try:
        array = np.loadtxt(
            [line for _, line in rows],
            delimiter=delimiter,
            dtype=np.float32,
            ndmin=2,
            comments=None,
            quotechar='"' if delimiter else None,
        )
    except ValueError:
        raise TensorFileError(f"{label}: {_csv_fault(rows, delimiter)}") from None
    if array.shape[0] == 1 or array.shape[1] == 1:
        array = array.reshape(-1)
    return np.ascontiguousarray(array)


def _csv_fault(rows: list[tuple[int, str]], delimiter: str | None) -> str:
    """Say which line of a table that failed to parse is at fault, and why."""
    valid = (
        "a .csv must hold one number per cell, the same number of cells on every row, and at "
        "most one header row."
    )
    width = len(_split(rows[0][1], delimiter))
    for number, line in rows:
        fields = _split(line, delimiter)
        if len(fields) != width:
            return f"line {number} has {len(fields)} cells but the first row has {width}; {valid}"
        for field in fields:
            if not field:
                return f"line {number} has an empty cell; {valid}"
            if not _is_number(field):
                return f"line {number}: {field[:40]!r} is not a number; {valid}"
    return f"not a numeric table; {valid}"


# --------------------------------------------------------------------------- helpers


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def _short(exc: BaseException) -> str:
    text = str(exc).strip().split("\n")[0] or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."
