"""Lazy tensor sources for the whole-model report: list a checkpoint's tensors, read one at a time.

A model is a ``.safetensors`` file, a sharded checkpoint (a folder or its
``model.safetensors.index.json``), an ``.onnx`` model (the main graph's initializers and every
weight :func:`qcore.io.onnx.find_weights` finds elsewhere — subgraph initializers, Constant
nodes — by its key; external data included; a model with no weight at all raises
:class:`qcore.io.onnx.NoWeightsError`), an ``.npz`` / ``.npy`` file, or a folder of these. :func:`list_tensors` reads only
headers; :func:`read_tensor` maps one tensor's bytes (``np.memmap``) and returns it as float32,
so only the tensor being worked on is in memory.

- bfloat16 is read as raw uint16 and widened (``u16 << 16`` viewed as float32, exact); float16
  and float64 are converted to float32 (float16 exactly). Other dtypes (integers, bool, float8)
  are listed with ``supported=False`` and skipped by the report.
- A file whose header cannot be read gives one :class:`TensorRef` with ``error`` set (and the
  name ``"*"``) so the rest of the model is still reported; a tensor whose bytes lie beyond the
  end of its file, or cannot be decoded, raises :class:`qcore.io.TensorFileError` from
  :func:`read_tensor` naming the file and the tensor.
- Tensors are identified by (file, name): the report's tasks carry these, never arrays. A file
  holding one array (an ``.npy``, an ``.npz`` of one member) names it by the file's stem
  (``layer0.ffn.out.weight.npz`` -> ``layer0.ffn.out.weight``).
"""

from __future__ import annotations

import functools
import math
import os
import struct
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..io import DEFAULT_MAX_BYTES, TensorFileError
from ..io.base import loads_json
from ..io.onnx import (
    MAIN,
    NoWeightsError,
    Role,
    WeightRecord,
    find_weights,
    role_in_graph,
    weight_proto,
)
from ..io.safetensors import header_length, parse_header
from ..quantized_models import quantized_inputs, quantized_nodes

__all__ = ["MODEL_EXTENSIONS", "TensorReader", "TensorRef", "list_tensors", "read_tensor",
           "resolve_files"]

MODEL_EXTENSIONS = (".safetensors", ".onnx", ".npz", ".npy")
INDEX_SUFFIX = ".safetensors.index.json"
_MAX_INDEX = 64 * 2**20

#: safetensors dtype codes read -> (numpy dtype of the stored bytes, reported dtype name)
_ST_DTYPES = {
    "F32": ("<f4", "float32"),
    "F16": ("<f2", "float16"),
    "BF16": ("<u2", "bfloat16"),
    "F64": ("<f8", "float64"),
}
_SUPPORTED = ("float32", "float16", "bfloat16", "float64")
# ONNX TensorProto data types we read
_ONNX_FLOAT, _ONNX_FLOAT16, _ONNX_DOUBLE, _ONNX_BFLOAT16 = 1, 10, 11, 16
_ONNX_NAMES = {_ONNX_FLOAT: "float32", _ONNX_FLOAT16: "float16", _ONNX_DOUBLE: "float64",
               _ONNX_BFLOAT16: "bfloat16"}
_ONNX_RAW = {_ONNX_FLOAT: "<f4", _ONNX_FLOAT16: "<f2", _ONNX_DOUBLE: "<f8", _ONNX_BFLOAT16: "<u2"}


@dataclass(frozen=True)
class TensorRef:
    """Where one tensor lives: enough to read it again in another process."""

    file: str  # absolute path of the file holding the tensor (header / proto)
    name: str
    shape: tuple[int, ...]
    dtype: str  # float32, float16, bfloat16, float64, or the file's own name for others
    error: str = ""  # why it cannot be read (name "*": the file's header as a whole)
    role: Role | None = None  # an ONNX weight's role (qcore.io.onnx); None: (out, in) rows
    quantized: str = ""  # the quantized operator that reads it (an already-quantized model)

    @property
    def elements(self) -> int:
        return math.prod(self.shape)  # exact: a Python int never wraps

    @property
    def supported(self) -> bool:
        return not self.error and self.dtype in _SUPPORTED


# ---------------------------------------------------------------------------------------------
# which files make up a model


def resolve_files(model: str | os.PathLike) -> list[Path]:
    """The tensor files of a model path, in a stable order (shards in index order)."""
    if "\x00" in os.fspath(model):
        raise TensorFileError(f"{os.fspath(model)!r}: the path holds a null byte, which no "
                              f"file name can")
    path = Path(model).expanduser()
    if not path.exists():
        raise TensorFileError(f"{path}: no such file or folder; give a .safetensors, .onnx, "
                              f".npz or .npy file, a sharded checkpoint's folder or its "
                              f"*{INDEX_SUFFIX}, or a folder of these")
    if path.is_file():
        if path.name.endswith(INDEX_SUFFIX):
            return _index_files(path)
        if path.suffix.lower() not in MODEL_EXTENSIONS:
            raise TensorFileError(f"{path}: unsupported file type {path.suffix!r}; valid: "
                                  + ", ".join(MODEL_EXTENSIONS) + f", *{INDEX_SUFFIX}")
        return [path.resolve()]
    files: list[Path] = []
    seen: set[Path] = set()
    for index in sorted(path.rglob(f"*{INDEX_SUFFIX}")):
        for f in _index_files(index):
            if f not in seen:
                seen.add(f)
                files.append(f)
    for f in sorted(p for p in path.rglob("*") if p.is_file()
                    and p.suffix.lower() in MODEL_EXTENSIONS):
        r = f.resolve()
        if r not in seen:
            seen.add(r)
            files.append(r)
    if not files:
        raise TensorFileError(f"{path}: the folder holds no tensor files ("
                              + ", ".join(MODEL_EXTENSIONS) + ")")
    return files


def _index_files(index: Path) -> list[Path]:
    try:
        if index.stat().st_size > _MAX_INDEX:
            raise TensorFileError(f"{index}: the index is over {_MAX_INDEX >> 20} MiB; a "
                                  f"sharded-checkpoint index lists names and shard files only")
        weight_map = loads_json(str(index), index.read_bytes(), "the index")["weight_map"]
        if not all(isinstance(v, str) for v in weight_map.values()):
            raise TypeError("weight_map values must be shard file names")
        shards = list(dict.fromkeys(weight_map.values()))
    except TensorFileError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise TensorFileError(f"{index}: not a readable sharded-checkpoint index "
                              f"(a JSON object with a 'weight_map'): {exc}") from None
    out = []
    for shard in shards:
        f = (index.parent / Path(shard).name).resolve()  # stay in the index's folder
        if not f.is_file():
            raise TensorFileError(f"{index}: shard {shard!r} named by the index is missing")
        out.append(f)
    return out


# ---------------------------------------------------------------------------------------------
# listing


def list_tensors(model: str | os.PathLike) -> list[TensorRef]:
    """Every tensor of the model (headers only), file by file in order."""
    refs: list[TensorRef] = []
    for f in resolve_files(model):
        try:
            refs.extend(_list_file(str(f)))
        except NoWeightsError as exc:  # an ONNX model with nothing to quantize: the model's fault
            raise NoWeightsError(f"{f}: {exc}") from None
        except TensorFileError as exc:
            refs.append(TensorRef(str(f), "*", (), "", error=str(exc)))
        except (OSError, ValueError, EOFError, OverflowError, MemoryError, RecursionError,
                NotImplementedError, RuntimeError, struct.error, zipfile.BadZipFile) as exc:
            refs.append(TensorRef(str(f), "*", (), "", error=f"{f}: cannot be read "
                                                           f"({type(exc).__name__}: {exc})"))
    return refs


def onnx_quantized_nodes(file: str) -> dict[str, int]:
    """An ``.onnx`` file's quantized nodes by operator (:mod:`qcore.quantized_models`)."""
    return quantized_nodes(_onnx_model(file, *_stat(file)))


def _list_file(file: str) -> list[TensorRef]:
    suffix = Path(file).suffix.lower()
    if suffix == ".safetensors":
        header, _ = _safetensors_header(file, *_stat(file))
        return [TensorRef(file, t.name, t.shape, _ST_DTYPES.get(t.code, (None, t.code))[1],
                          f"{file}: tensor {t.name!r}: {t.error}" if t.error else "")
                for t in header]
    if suffix == ".onnx":
        model = _onnx_model(file, *_stat(file))  # without onnx: TensorFileError, saying so
        weights = _onnx_weights(file, *_stat(file))
        roles = {w.name: w.role for w in weights if w.graph == MAIN}
        for t in model.graph.initializer:  # main initializers that are no weight (not
            if t.name not in roles and len(t.dims) >= 2:  # float) still have a role
                roles[t.name] = role_in_graph(model.graph, t.name)
        refs = [_onnx_ref(file, t, role=roles.get(t.name)) for t in model.graph.initializer]
        main = {t.name for t in model.graph.initializer}
        refs += [_onnx_ref(file, weight_proto(model, w), w.key, w.role) for w in weights
                 if not (w.graph == MAIN and w.name in main)]
        read = quantized_inputs(model)  # scales, zero points, codes: no float remainder
        keys = {w.key: w.name for w in weights}
        return [replace(r, quantized=read.get(keys.get(r.name, r.name), "")) for r in refs]
    if suffix == ".npz":
        index = _npz_index(file, *_stat(file))
        if len(index) == 1:  # one array: named by its file, as an .npy is
            (shape, dtype, _, _), = index.values()
            return [TensorRef(file, Path(file).stem, shape, dtype)]
        return [TensorRef(file, m, shape, dtype) for m, (shape, dtype, _, _) in index.items()]
    if suffix == ".npy":
        shape, dtype, _ = _npy_header(file)
        return [TensorRef(file, Path(file).stem, shape, dtype)]
    raise TensorFileError(f"{file}: unsupported file type")


def _onnx_ref(file: str, t: Any, name: str | None = None, role: Role | None = None
              ) -> TensorRef:
    """A TensorRef of an ONNX tensor; ``role``: its role in the graph (what decides its axes)."""
    name = t.name if name is None else name
    dims = tuple(int(d) for d in t.dims)
    dtype = _ONNX_NAMES.get(t.data_type, f"onnx type {t.data_type}")
    if any(d < 0 for d in dims):
        return TensorRef(file, name, (), dtype, f"{file}: initializer {name!r} has dims "
                                                f"{list(dims)}; every dimension must be >= 0")
    return TensorRef(file, name, dims, dtype, role=role)


def _stat(file: str) -> tuple[int, int]:
    try:
        st = os.stat(file)
    except OSError as exc:
        raise TensorFileError(f"{file}: cannot be read ({exc.strerror})") from None
    return st.st_mtime_ns, st.st_size


# ---------------------------------------------------------------------------------------------
# reading one tensor


def _locate(ref: TensorRef) -> _Span | np.ndarray:
    """Where the tensor's stored values are: a checked byte span of a file, or (ONNX values
    inside the proto, compressed .npz members) an array already in memory."""
    if ref.error:
        raise TensorFileError(ref.error)
    if ref.dtype not in _SUPPORTED:
        raise TensorFileError(f"{ref.file}: tensor {ref.name!r} has dtype {ref.dtype}; the "
                              f"report reads float32, float16, bfloat16 and float64")
    suffix = Path(ref.file).suffix.lower()
    try:
        if suffix == ".safetensors":
            return _read_safetensors(ref)
        if suffix == ".onnx":
            return _read_onnx(ref)
        if suffix == ".npz":
            return _read_npz(ref)
        return _read_npy(ref)
    except TensorFileError:
        raise
    except _READ_FAULTS as exc:
        raise TensorFileError(f"{ref.file}: tensor {ref.name!r} cannot be read: {exc}") from None


_READ_FAULTS = (OSError, ValueError, EOFError, OverflowError, MemoryError, zipfile.BadZipFile,
                struct.error)


def read_tensor(ref: TensorRef) -> np.ndarray:
    """The tensor as a float32 array of its shape: a fresh array widened straight from the file
    mapping, which is closed when this returns."""
    loc = _locate(ref)
    try:
        raw = loc.mapped() if isinstance(loc, _Span) else loc
        return _widen(raw, ref.dtype).reshape(ref.shape)
    except _READ_FAULTS as exc:
        raise TensorFileError(f"{ref.file}: tensor {ref.name!r} cannot be read: {exc}") from None


class TensorReader:
    """Reads a tensor piece by piece as flat float32 (:meth:`read`), so that memory holds one
    piece, never the tensor: file-backed values are read into a fresh array (no mapping whose
    pages would stay resident), in-memory ones sliced."""

    def __init__(self, ref: TensorRef) -> None:
        self.ref = ref
        self._loc = _locate(ref)
        self._fh = open(self._loc.file, "rb") if isinstance(self._loc, _Span) else None
        self._last: tuple[int, int, np.ndarray] | None = None

    def read(self, start: int, count: int) -> np.ndarray:
        """Elements ``start .. start + count`` (flat, C order) as float32; asked twice in a row
        for the same piece (a tensor of one slice: statistics, then recipes), the same array,
        which callers only read."""
        if self._last is not None and self._last[:2] == (start, count):
            return self._last[2]
        out = self._read(start, count)
        self._last = (start, count, out)
        return out

    def _read(self, start: int, count: int) -> np.ndarray:
        loc = self._loc
        try:
            if isinstance(loc, _Span):
                # read straight into an array: float32 values are then the result, no copy
                raw = np.empty(count, loc.dtype)
                self._fh.seek(loc.offset + start * loc.dtype.itemsize)
                if self._fh.readinto(memoryview(raw).cast("B")) != raw.nbytes:
                    raise TensorFileError(f"{self.ref.file}: tensor {self.ref.name!r}: the file "
                                          f"ended early (it changed while being read?)")
                if raw.dtype == np.float32:
                    return raw
            else:
                raw = loc.reshape(-1)[start:start + count]
            return _widen(raw, self.ref.dtype)
        except TensorFileError:
            raise
        except _READ_FAULTS as exc:
            raise TensorFileError(f"{self.ref.file}: tensor {self.ref.name!r} cannot be read: "
                                  f"{exc}") from None

    def close(self) -> None:
        self._last = None
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> TensorReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _widen(raw: np.ndarray, dtype: str) -> np.ndarray:
    """float32 copy of raw stored values (bfloat16 given as uint16 bit patterns)."""
    if dtype == "bfloat16":
        out = np.left_shift(raw, 16, dtype=np.uint32)
        return out.view(np.float32)
    out = np.empty(raw.shape, np.float32)
    if raw.dtype == np.float64:
        with np.errstate(over="ignore"):
            out[...] = raw
    else:
        out[...] = raw
    return out


@dataclass(frozen=True)
class _Span:
    """n values of ``dtype`` at byte ``offset`` of ``file`` (checked against its size)."""

    file: str
    offset: int
    dtype: np.dtype
    n: int

    def mapped(self) -> np.ndarray:
        if self.n == 0:
            return np.empty(0, self.dtype)
        return np.memmap(self.file, dtype=self.dtype, mode="r", offset=self.offset,
                         shape=(self.n,))


def _mapped(ref: TensorRef, offset: int, nbytes: int, stored: str, size: int) -> _Span:
    """The span of ``nbytes`` at ``offset`` of the file, checked against its size."""
    dt = np.dtype(stored)
    n = ref.elements
    if offset < 0 or nbytes < 0:
        raise TensorFileError(f"{ref.file}: tensor {ref.name!r} has data at offset {offset}, "
                              f"length {nbytes}; both must be >= 0; the file is corrupt")
    if nbytes != n * dt.itemsize:
        raise TensorFileError(f"{ref.file}: tensor {ref.name!r} has {nbytes} bytes of data but "
                              f"its shape {ref.shape} and dtype {ref.dtype} need "
                              f"{n * dt.itemsize}; the file is corrupt")
    if offset + nbytes > size:
        raise TensorFileError(f"{ref.file}: tensor {ref.name!r} needs bytes {offset}.."
                              f"{offset + nbytes} but the file has {size}; it is truncated")
    return _Span(ref.file, offset, dt, n)


# safetensors ---------------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _safetensors_header(file: str, mtime_ns: int, size: int) -> tuple[list[Any], int]:
    """Header entries (:func:`qcore.io.safetensors.parse_header`, the one strict reader) and the
    data section's start."""
    del mtime_ns  # part of the cache key only
    try:
        with open(file, "rb") as fh:
            hlen = header_length(file, fh.read(8), size)
            header = fh.read(hlen)
    except OSError as exc:
        raise TensorFileError(f"{file}: cannot be read ({exc.strerror})") from None
    return parse_header(file, header, size - 8 - hlen), 8 + hlen


def _read_safetensors(ref: TensorRef) -> _Span:
    mtime, size = _stat(ref.file)
    header, base = _safetensors_header(ref.file, mtime, size)
    spec = next((t for t in header if t.name == ref.name), None)
    if spec is None:
        raise TensorFileError(f"{ref.file}: no tensor named {ref.name!r} (the file changed?)")
    if spec.error:
        raise TensorFileError(f"{ref.file}: tensor {ref.name!r}: {spec.error}")
    return _mapped(ref, base + spec.begin, spec.end - spec.begin, _ST_DTYPES[spec.code][0], size)


# onnx ----------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def _onnx_model(file: str, mtime_ns: int, size: int) -> Any:
    """The ONNX proto without external data (initializers' raw bytes stay where they are)."""
    del mtime_ns, size
    try:
        import onnx
    except ImportError:
        raise TensorFileError(f"{file}: reading .onnx needs the optional 'onnx' package "
                              f"(pip install 'qcore[onnx]')") from None
    try:
        return onnx.load(file, load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf raises its own DecodeError types
        raise TensorFileError(f"{file}: not a readable ONNX model ({type(exc).__name__}: "
                              f"{exc}); the file is corrupt or truncated") from None


@functools.lru_cache(maxsize=4)
def _onnx_weights(file: str, mtime_ns: int, size: int) -> tuple[WeightRecord, ...]:
    """:func:`qcore.io.onnx.find_weights` of :func:`_onnx_model`'s proto, found once per file
    version: listing the file and reading each of its subgraph weights share it."""
    return tuple(find_weights(_onnx_model(file, mtime_ns, size)))


def _read_onnx(ref: TensorRef) -> _Span | np.ndarray:
    mtime, size = _stat(ref.file)
    model = _onnx_model(ref.file, mtime, size)
    tensor = next((t for t in model.graph.initializer if t.name == ref.name), None)
    if tensor is None:  # a weight in a subgraph or a Constant node, by its key
        rec = next((w for w in _onnx_weights(ref.file, mtime, size) if w.key == ref.name),
                   None)
        tensor = weight_proto(model, rec) if rec is not None else None
    if tensor is None:
        raise TensorFileError(f"{ref.file}: no initializer named {ref.name!r}")
    stored = _ONNX_RAW[tensor.data_type]
    if tensor.data_location == 1:  # EXTERNAL
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        folder = Path(ref.file).parent.resolve()
        target = (folder / location).resolve()
        if not location or folder not in target.parents:
            raise TensorFileError(f"{ref.file}: initializer {ref.name!r} names external data "
                                  f"{location!r} outside the model's folder")
        offset = _decimal(ref, "offset", info.get("offset", "0"))
        length = _decimal(ref, "length", info.get("length",
                                                    str(ref.elements * np.dtype(stored).itemsize)))
        if not target.is_file():
            raise TensorFileError(f"{ref.file}: initializer {ref.name!r}: its external data "
                                  f"file {location!r} is missing")
        ext = TensorRef(str(target), ref.name, ref.shape, ref.dtype)
        return _mapped(ext, offset, length, stored, target.stat().st_size)
    if tensor.raw_data:
        raw = np.frombuffer(tensor.raw_data, dtype=stored)
        if raw.size != ref.elements:
            raise TensorFileError(f"{ref.file}: initializer {ref.name!r} holds {raw.size} "
                                  f"values but its shape {ref.shape} needs {ref.elements}")
        return raw
    from onnx import numpy_helper

    arr = numpy_helper.to_array(tensor)
    if ref.dtype == "bfloat16":
        return np.asarray(arr).view(np.uint16)
    return np.asarray(arr)


def _decimal(ref: TensorRef, key: str, text: str) -> int:
    """An external-data offset / length: a non-negative decimal integer."""
    if not (text.isascii() and text.isdigit() and len(text) <= 20):
        raise TensorFileError(f"{ref.file}: initializer {ref.name!r} has external-data {key} "
                              f"{text[:40]!r}; it must be a non-negative integer")
    return int(text)


# npz / npy -----------------------------------------------------------------------------------


def _parse_npy(fh: Any, label: str) -> tuple[tuple[int, ...], np.dtype, bool]:
    from numpy.lib import format as npformat

    try:
        version = npformat.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = npformat.read_array_header_1_0(fh)
        else:
            shape, fortran, dtype = npformat.read_array_header_2_0(fh)
    except (ValueError, OSError, EOFError, SyntaxError, RecursionError, MemoryError,
            TypeError) as exc:  # numpy parses the header with ast.literal_eval
        raise TensorFileError(f"{label}: not a readable .npy header ({exc})") from None
    if dtype.hasobject:
        raise TensorFileError(f"{label}: holds Python objects; it is never unpickled")
    if any(int(d) < 0 for d in shape):
        raise TensorFileError(f"{label}: the .npy header has shape {tuple(shape)}; every "
                              f"dimension must be >= 0")
    return tuple(int(d) for d in shape), dtype, bool(fortran)


def _dtype_name(dtype: np.dtype) -> str:
    if dtype.names is None and dtype.kind == "V" and dtype.itemsize == 2:
        return "bfloat16"
    name = dtype.name
    return "float32" if name == "float32" else name


def _npy_header(file: str) -> tuple[tuple[int, ...], str, int]:
    with open(file, "rb") as fh:
        shape, dtype, fortran = _parse_npy(fh, file)
        offset = fh.tell()
    if fortran and len(shape) > 1:
        raise TensorFileError(f"{file}: Fortran-ordered arrays are not supported")
    return shape, _dtype_name(dtype), offset


def _read_npy(ref: TensorRef) -> _Span:
    mtime, size = _stat(ref.file)
    with open(ref.file, "rb") as fh:
        _, dtype, _ = _parse_npy(fh, ref.file)
        offset = fh.tell()
    stored = "<u2" if ref.dtype == "bfloat16" else dtype  # big-endian is converted by _widen
    return _mapped(ref, offset, ref.elements * np.dtype(stored).itemsize, stored, size)


@functools.lru_cache(maxsize=16)
def _npz_index(file: str, mtime_ns: int, size: int) -> dict[str, tuple]:
    """{member: (shape, dtype name, stored dtype, data offset or -1 when compressed)}."""
    del mtime_ns, size
    out: dict[str, tuple] = {}
    try:
        with zipfile.ZipFile(file) as zf:
            for info in zf.infolist():
                if not info.filename.endswith(".npy"):
                    continue
                name = info.filename[:-4]
                with zf.open(info) as member:
                    shape, dtype, fortran = _parse_npy(member, f"{file}:{info.filename}")
                    header_len = member.tell() if info.compress_type == zipfile.ZIP_STORED else 0
                if fortran and len(shape) > 1:
                    raise TensorFileError(f"{file}: member {name!r} is Fortran-ordered")
                offset = -1
                if info.compress_type == zipfile.ZIP_STORED:
                    offset = _member_data_offset(file, info) + header_len
                out[name] = (shape, _dtype_name(dtype), dtype.str, offset)
    except zipfile.BadZipFile as exc:
        raise TensorFileError(f"{file}: not a readable .npz archive ({exc}); the file is corrupt "
                              f"or truncated") from None
    except OSError as exc:
        raise TensorFileError(f"{file}: cannot be read ({exc})") from None
    return out


def _member_data_offset(file: str, info: zipfile.ZipInfo) -> int:
    """Where a stored zip member's bytes start (after its local header)."""
    with open(file, "rb") as fh:
        fh.seek(info.header_offset)
        local = fh.read(30)
    if len(local) < 30 or local[:4] != b"PK\x03\x04":
        raise TensorFileError(f"{file}: member {info.filename!r} has a corrupt local header")
    name_len, extra_len = struct.unpack("<HH", local[26:30])
    return info.header_offset + 30 + name_len + extra_len


def _read_npz(ref: TensorRef) -> _Span | np.ndarray:
    mtime, size = _stat(ref.file)
    index = _npz_index(ref.file, mtime, size)
    member = ref.name if len(index) > 1 else next(iter(index), None)  # one: named by the file
    if member not in index:
        raise TensorFileError(f"{ref.file}: no member named {ref.name!r}")
    _, _, stored, offset = index[member]
    if ref.dtype == "bfloat16":
        stored = "<u2"
    dt = np.dtype(stored)
    if offset >= 0:
        return _mapped(ref, offset, ref.elements * dt.itemsize, stored, size)
    if ref.elements * dt.itemsize > DEFAULT_MAX_BYTES:
        raise TensorFileError(
            f"{ref.file}: member {ref.name!r} is compressed and holds {ref.elements * dt.itemsize:,}"
            f" bytes, over the {DEFAULT_MAX_BYTES:,} a compressed member may inflate to (as in "
            f"qcore.io); save it with numpy.savez (stored), which is read without inflating")
    with zipfile.ZipFile(ref.file) as zf, zf.open(member + ".npy") as fh:
        _parse_npy(fh, ref.file)
        data = fh.read(ref.elements * dt.itemsize + 1)
    if len(data) != ref.elements * dt.itemsize:
        raise TensorFileError(f"{ref.file}: member {ref.name!r} holds {len(data)} bytes of data; "
                              f"its shape needs {ref.elements * dt.itemsize}")
    return np.frombuffer(data, dtype=dt)
