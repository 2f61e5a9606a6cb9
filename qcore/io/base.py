"""What every tensor-file reader shares: the error type, one tensor's index entry, message
helpers, and JSON parsed with its nesting bounded and duplicate names refused.

:func:`loads_json` measures a document's nesting before ``json.loads`` sees it, so a header or
index nested thousands deep is refused with a :class:`TensorFileError` instead of raising
``RecursionError`` from inside the parser.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import QuantizationError

__all__ = ["MAX_JSON_DEPTH", "MAX_TENSORS", "TensorFileError", "json_depth", "loads_json"]

MAX_TENSORS = 100_000  # tensors per file (.npz members, .safetensors entries, initializers)
#: Deepest JSON nesting a header or index may have (real ones are 3 deep).
MAX_JSON_DEPTH = 64

_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)


class TensorFileError(QuantizationError):
    """A tensor file that cannot be read: the message names the file, the fault and the fix."""


@dataclass(frozen=True)
class _Entry:
    """One tensor in a file: its name, shape, dtype and how to read it."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    read: Callable[[], np.ndarray]


class _DuplicateName(ValueError):
    pass


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateName(key)
        out[key] = value
    return out


def json_depth(raw: bytes) -> int:
    """The deepest bracket nesting of a JSON text, brackets inside strings not counted
    (computed in vectorised passes, never recursively)."""
    bare = _JSON_STRING.sub(b'""', raw)
    if bare.count(b"[") + bare.count(b"{") <= 1:
        return bare.count(b"[") + bare.count(b"{")
    codes = np.frombuffer(bare, np.uint8)
    step = (np.isin(codes, (0x5B, 0x7B)).astype(np.int32)
            - np.isin(codes, (0x5D, 0x7D)).astype(np.int32))
    return int(np.cumsum(step).max(initial=0))


def loads_json(label: str, raw: bytes | str, what: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``raw`` parsed as JSON; a document nested deeper than ``max_depth``, one naming a key
    twice in an object, or one that is not UTF-8 JSON raises :class:`TensorFileError` saying
    which ``what`` (e.g. "the .safetensors header") of ``label`` is at fault."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else bytes(raw)
    depth = json_depth(data)
    if depth > max_depth:
        raise TensorFileError(
            f"{label}: {what} is nested {depth} deep, more than the {max_depth} levels any "
            "real one has; the file is corrupt or hostile.")
    try:
        return json.loads(data.decode("utf-8"), object_pairs_hook=_unique_pairs)
    except _DuplicateName as exc:
        raise TensorFileError(
            f"{label}: {what} names {exc.args[0]!r} twice; every name must be unique.") from None
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError, integers > 4300 digits
        raise TensorFileError(f"{label}: {what} is corrupt: not valid JSON ({_short(exc)}).") from None
    except RecursionError:  # a depth the scan allowed but this interpreter's stack does not
        raise TensorFileError(f"{label}: {what} is nested too deeply.") from None


def _native(arr: np.ndarray) -> np.ndarray:
    """A writable, C-contiguous, native-byte-order copy."""
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return np.array(arr, order="C", copy=True)


def _stem(label: str) -> str:
    stem = Path(label).stem
    return stem if stem and label not in ("uploaded data", "uploaded file") else "tensor"


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
