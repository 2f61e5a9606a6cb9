""".npy and .npz readers: headers parsed without unpickling, .npz members inflated only as far
as their .npy header promises (a member that inflates further costs nothing)."""

from __future__ import annotations

import io
import math
import zipfile

import numpy as np

from .base import MAX_TENSORS, TensorFileError, _Entry, _native, _short, _size

__all__ = ["NPY_MAGIC", "ZIP_MAGIC", "npy_entry", "npz_entries"]

NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGIC = b"PK\x03\x04"
VALID_NUMERIC = "integer or floating point (incl. bfloat16 / float8 / int4 from ml_dtypes)"


def _npy_header(label: str, head: bytes) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """Parse a .npy header: ``(shape, fortran_order, dtype, data offset)``."""
    if not head.startswith(NPY_MAGIC):
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
            f"valid arrays are {VALID_NUMERIC}."
        )
    if any(int(d) < 0 for d in shape):
        raise TensorFileError(
            f"{label}: the .npy header has shape {tuple(shape)} with a negative dimension; "
            "every dimension must be >= 0. The file is corrupt."
        )
    return tuple(int(d) for d in shape), bool(fortran), dtype, fp.tell()


def npy_entry(label: str, name: str, data: bytes) -> _Entry:
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


def npz_entries(label: str, data: bytes, max_bytes: int,
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
        return npy_entry(f"{label}[{member}]", member, raw).read()

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
