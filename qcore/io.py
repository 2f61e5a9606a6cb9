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
- Every problem (missing, empty, truncated, corrupt, oversized, pickled, non-numeric, zero
  elements) raises :class:`TensorFileError` naming the file, what is wrong and what is valid.
"""

from __future__ import annotations

import codecs
import errno
import io
import json
import math
import os
import re
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
    "TensorFile",
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
# The safetensors format allows a 100 MB header; parsing that much JSON of tiny objects takes
# ~20x its size in memory, so headers are limited to 8 MiB here (~80k tensors).
_MAX_SAFETENSORS_HEADER = 8 * 2**20
MAX_TENSORS = 100_000  # tensors per file (.npz members, .safetensors entries, initializers)

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
    if data.startswith(_NPY_MAGIC):
        return ".npy"
    if data.startswith(_ZIP_MAGIC):
        return ".npz"
    return ""


def _stem(label: str) -> str:
    stem = Path(label).stem
    return stem if stem and label not in ("uploaded data", "uploaded file") else "tensor"


# --------------------------------------------------------------------------- selection


def _index(label: str, ext: str, data: bytes, max_bytes: int,
           max_elements: int | None = None) -> list[_Entry]:
    readers = {
        ".npy": lambda: [_npy_entry(label, _stem(label), data)],
        ".npz": lambda: _npz_entries(label, data, max_bytes, max_elements),
        ".safetensors": lambda: _safetensors_entries(label, data),
        ".onnx": lambda: _onnx_entries(label, data),
        ".csv": lambda: [_csv_entry(label, data, max_elements)],
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
    if any(int(d) < 0 for d in shape):
        raise TensorFileError(
            f"{label}: the .npy header has shape {tuple(shape)} with a negative dimension; "
            "every dimension must be >= 0. The file is corrupt."
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


def _npz_entries(label: str, data: bytes, max_bytes: int,
                 max_elements: int | None = None) -> list[_Entry]:
    if data.count(b"PK\x01\x02") > MAX_TENSORS:  # central directory records, before parsing
        raise TensorFileError(
            f"{label}: the archive has more than {MAX_TENSORS:,} members; split the file."
        )
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
            f"{label}: its arrays would decompress to {_size(total)}, over the limit of "
            f"{_size(max_bytes)} (max_bytes)."
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
        shape, _, dtype, offset = _npy_header(f"{label}[{member}]", head)
        need = offset + math.prod(shape) * dtype.itemsize
        entries.append(_Entry(member, shape, dtype,
                              _npz_reader(label, zf, info, member, need, max_bytes)))
    return entries


def _npz_reader(label: str, zf: zipfile.ZipFile, info: zipfile.ZipInfo, member: str,
                need: int, max_bytes: int):
    """Read a member's header and data only: decompression stops after the bytes its header
    promises (a member that inflates further -- a zip bomb -- is never decompressed whole)."""
    def read() -> np.ndarray:
        if need > max_bytes:
            raise TensorFileError(
                f"{label}: member {info.filename!r} holds {_size(need)} of data, over the limit "
                f"of {_size(max_bytes)} (max_bytes)."
            )
        raw = _zip_read(label, zf, info, limit=need)
        return _npy_entry(f"{label}[{member}]", member, raw).read()

    return read


def _zip_read(label: str, zf: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> bytes:
    """At most `limit` decompressed bytes of a member (zipfile inflates only what is read)."""
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
    if n > len(data) - 8:
        raise TensorFileError(
            f"{label}: the header claims {n} bytes but the file has only {len(data) - 8} after "
            "the length field; the file is truncated or not a .safetensors file."
        )
    if n > _MAX_SAFETENSORS_HEADER:
        raise TensorFileError(
            f"{label}: the .safetensors header is {_size(n)}, over the {_size(_MAX_SAFETENSORS_HEADER)}"
            " this reader accepts (~80k tensors); split the file."
        )
    try:
        header = json.loads(data[8 : 8 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError, integers > 4300 digits
        raise TensorFileError(
            f"{label}: the .safetensors JSON header is corrupt ({_short(exc)})."
        ) from None
    except RecursionError:
        raise TensorFileError(
            f"{label}: the .safetensors JSON header is nested too deeply to be a header "
            "(a header is one object of {name: {dtype, shape, data_offsets}})."
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
    if len(model.graph.initializer) > MAX_TENSORS:
        raise TensorFileError(
            f"{label}: holds {len(model.graph.initializer):,} initializers, more than the "
            f"{MAX_TENSORS:,} a file may hold here; split the model."
        )
    return [_onnx_entry(label, t, onnx, numpy_helper) for t in model.graph.initializer]


def _onnx_entry(label: str, tensor: Any, onnx: Any, numpy_helper: Any) -> _Entry:
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type))
    except Exception:  # unknown / undefined element type
        dtype = np.dtype(object)
    external = tensor.data_location == onnx.TensorProto.EXTERNAL
    dims = tuple(int(d) for d in tensor.dims)
    if any(d < 0 for d in dims):
        raise TensorFileError(
            f"{label}: initializer {tensor.name!r} has dims {list(dims)} with a negative "
            "dimension; every dimension must be >= 0. The model is corrupt."
        )

    def read() -> np.ndarray:
        if external:
            raise TensorFileError(
                f"{label}: initializer {tensor.name!r} is stored in external data, which is "
                "not loaded; save the model with its weights inside the .onnx file."
            )
        return _native(np.asarray(numpy_helper.to_array(tensor)))

    return _Entry(tensor.name, dims, dtype, read)


# --------------------------------------------------------------------------- .csv


_CSV_WIDE = 4096  # columns: wider rows are parsed piece by piece, one column at a time
_CSV_PIECE = 4 * 2**20  # bytes of one wide-row piece
_CSV_ROWS = 1 << 16  # rows per chunk of a narrow table
_CSV_NA = ["nan", "NaN", "NAN", "-nan", "-NaN", "+nan", "+NaN"]
_BOM = b"\xef\xbb\xbf"


def _lines(data: bytes, start: int = 0):
    """(line number, start, end) of every line of data, without copying it (end excludes the
    line break)."""
    number, pos, n = 0, start, len(data)
    while pos < n:
        end = data.find(b"\n", pos)
        end = n if end < 0 else end
        number += 1
        stop = end - 1 if end > pos and data[end - 1:end] == b"\r" else end
        yield number, pos, stop
        pos = end + 1


def _data_lines(data: bytes, start: int = 0):
    """_lines without blank and '#'-comment lines."""
    for number, a, b in _lines(data, start):
        head = data[a:min(b, a + 256)].lstrip()
        if head and not head.startswith(b"#") and data[a:b].strip():
            yield number, a, b


def _check_utf8(label: str, data: bytes) -> None:
    if data.isascii():
        return
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        for i in range(0, len(data), 2**20):
            decoder.decode(data[i:i + 2**20])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise TensorFileError(
            f"{label}: not a UTF-8 text file; a .csv must hold numbers as text."
        ) from None


def _csv_entry(label: str, data: bytes, max_elements: int | None = None) -> _Entry:
    """Parse a .csv once into float32, refusing it before any array is built when its rows x
    columns exceed max_elements. Memory: the output plus a bounded chunk."""
    _check_utf8(label, data)
    if b"\n" not in data and b"\r" in data:  # old Mac line ends: CR only
        data = data.replace(b"\r", b"\n")
    start = len(_BOM) if data.startswith(_BOM) else 0
    lines = _data_lines(data, start)
    first = next(lines, None)
    if first is None:
        raise TensorFileError(f"{label}: the .csv holds no numbers.")
    head = data[first[1]:min(first[2], first[1] + 65536)].decode("utf-8", "replace")
    delimiter = _csv_delimiter(head)
    has_header = any(f and not _is_number(f) for f in _split(head, delimiter))
    top = next(lines, None) if has_header else first
    if top is None:
        raise TensorFileError(f"{label}: the .csv has a header row but no numbers.")
    cols = _count_fields(data, top[1], top[2], delimiter)
    # rows: an upper bound counted without parsing (blank and comment lines at the start of a
    # line are not rows; indented ones are counted, which only overestimates)
    rows = (data.count(b"\n", top[1]) + (not data.endswith(b"\n"))
            - data.count(b"\n\n", top[1]) - data.count(b"\n#", top[1]))
    rows = max(rows, 1)
    if max_elements is not None and rows * cols > max_elements:
        exact = "" if rows == 1 else "up to "
        raise TensorFileError(
            f"{label}: the .csv holds {exact}{rows:,} rows x {cols:,} columns = {rows * cols:,} "
            f"values, over the limit of {max_elements:,} elements (max_elements); slice it "
            "before loading."
        )
    if cols > _CSV_WIDE:
        array = _parse_wide(label, data, top, cols, delimiter, has_header, start)
    else:
        array = _parse_narrow(label, data, top, rows, cols, delimiter, has_header, start)
    if array.shape[0] == 1 or array.shape[1] == 1:
        array = array.reshape(-1)
    holder = [array]

    def read() -> np.ndarray:  # the parsed array itself the first time, a copy after that
        return holder.pop() if holder else array.copy()

    return _Entry(_stem(label), array.shape, array.dtype, read)


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


def _count_fields(data: bytes, a: int, b: int, delimiter: str | None) -> int:
    if delimiter is None:
        return len(data[a:b].split())
    return data.count(delimiter.encode(), a, b) + 1


def _read_csv(buffer, delimiter: str | None, **kw):
    import pandas as pd

    return pd.read_csv(
        buffer, header=None, sep=delimiter if delimiter else r"\s+", engine="c",
        dtype=np.float32, comment="#", keep_default_na=False, na_values=_CSV_NA,
        skip_blank_lines=True, quotechar='"', **kw)


def _parse_narrow(label, data, top, rows, cols, delimiter, has_header, start) -> np.ndarray:
    """pandas' C parser in chunks of rows, each copied into one preallocated array."""
    out = np.empty((rows, cols), np.float32)
    buffer = io.BytesIO(data)  # shares data's buffer, no copy
    buffer.seek(top[1])
    filled = 0
    try:
        with np.errstate(all="ignore"):
            for chunk in _read_csv(buffer, delimiter, chunksize=_CSV_ROWS):
                values = chunk.to_numpy(np.float32)
                if values.shape[1] != cols or filled + len(values) > rows:
                    raise ValueError("shape")
                out[filled:filled + len(values)] = values
                filled += len(values)
    except (ValueError, IndexError, OverflowError, MemoryError):
        raise TensorFileError(f"{label}: {_csv_fault(data, delimiter, has_header, start)}") from None
    return out if filled == rows else out[:filled].copy()


def _parse_wide(label, data, top, cols, delimiter, has_header, start) -> np.ndarray:
    """Rows too wide for a column per field: each row in pieces of ~4 MiB, a piece's fields
    turned into one column (delimiter -> newline) and parsed by pandas' C parser."""
    rows = []
    sep = delimiter.encode() if delimiter else None
    for number, a, b in _data_lines(data, top[1]):
        row = np.empty(cols, np.float32)
        filled = 0
        pos = a
        while pos < b:
            end = min(b, pos + _CSV_PIECE)
            if end < b:  # cut at a field boundary
                cut = data.rfind(sep, pos, end) if sep else max(data.rfind(b" ", pos, end),
                                                                data.rfind(b"\t", pos, end))
                end = cut if cut > pos else b
            piece = data[pos:end]
            piece = piece.replace(sep, b"\n") if sep else re.sub(rb"[ \t]+", b"\n", piece.strip())
            try:
                with np.errstate(all="ignore"):
                    values = (_read_csv(io.BytesIO(piece), None).to_numpy(np.float32).reshape(-1)
                              if piece.strip() else np.empty(0, np.float32))
            except (ValueError, IndexError, OverflowError):
                raise TensorFileError(
                    f"{label}: {_csv_fault(data, delimiter, has_header, start)}") from None
            if sep and piece.count(b"\n") + 1 != values.size:  # an empty cell
                raise TensorFileError(f"{label}: {_csv_fault(data, delimiter, has_header, start)}")
            if filled + values.size > cols:
                raise TensorFileError(
                    f"{label}: line {number} has more than {cols:,} cells but the first row has "
                    f"{cols:,}; a .csv must have the same number of cells on every row.")
            row[filled:filled + values.size] = values
            filled += values.size
            pos = end + (1 if sep and end < b else 0)
        if filled != cols:
            raise TensorFileError(
                f"{label}: line {number} has {filled:,} cells but the first row has {cols:,}; a "
                ".csv must have the same number of cells on every row.")
        rows.append(row)
    return np.stack(rows) if len(rows) > 1 else rows[0].reshape(1, -1)


def _csv_fault(data: bytes, delimiter: str | None, has_header: bool, start: int) -> str:
    """Say which line of a table that failed to parse is at fault, and why (streaming)."""
    valid = (
        "a .csv must hold one number per cell, the same number of cells on every row, and at "
        "most one header row."
    )
    width = None
    for number, a, b in _data_lines(data, start):
        if b - a > 65536:  # a wide row: pandas' fault is as good as a line-by-line one
            return f"line {number} holds a cell that is not a number; {valid}"
        fields = _split(data[a:b].decode("utf-8", "replace"), delimiter)
        if width is None:
            width = len(fields)
            if has_header:
                continue
        if len(fields) != width:
            return f"line {number} has {len(fields)} cells but the first row has {width}; {valid}"
        for field in fields:
            if not field:
                return f"line {number} has an empty cell; {valid}"
            if not _is_number(field):
                return f"line {number}: {field[:40]!r} is not a number; {valid}"
    return f"not a numeric table; {valid}"


# --------------------------------------------------------------------------- helpers


def _size(n: int) -> str:
    """A byte count for messages: bytes below 1 KiB, then KiB, MiB, GiB."""
    if n < 1024:
        return f"{n} bytes"
    for unit, power in (("KiB", 10), ("MiB", 20), ("GiB", 30)):
        if n < 1024 << power or unit == "GiB":
            return f"{n / 2**power:.1f} {unit}"
    return f"{n} bytes"


def _short(exc: BaseException) -> str:
    text = str(exc).strip().split("\n")[0] or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."
