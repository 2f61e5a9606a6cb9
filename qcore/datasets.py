"""The real tensors shipped in ``datasets/``: list them, load them by name.

The folder is the one named by the environment variable ``QCORE_DATASETS``; else
``qcore/_datasets/`` inside an installed package (a wheel ships the repository's ``datasets/``
there, see ``pyproject.toml``); else ``datasets/`` next to the ``qcore`` package (a source
checkout or an editable install). Its ``manifest.json`` describes every
tensor (name, kind, shape, dtype, source, license, how it was made, statistics); each tensor is
``<name>.npz`` holding one array ``x``. ``datasets/build.py`` makes them.
"""

from __future__ import annotations

import builtins
import copy
import functools
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from .errors import QuantizationError
from .io import TensorFileError, load_tensor

__all__ = ["ENV_VAR", "datasets_dir", "info", "list", "load", "names"]

ENV_VAR = "QCORE_DATASETS"
_PACKAGE = Path(__file__).resolve().parent
#: Where the tensors can be, in order: inside an installed package, then in a checkout.
_CANDIDATES = (_PACKAGE / "_datasets", _PACKAGE.parent / "datasets")


def datasets_dir() -> Path:
    """The folder the tensors are read from: ``$QCORE_DATASETS``, else the installed package's
    copy, else the checkout's ``datasets/`` (the first that has a manifest)."""
    override = os.environ.get(ENV_VAR)
    if override:
        return Path(override).expanduser().resolve()
    for candidate in _CANDIDATES:
        if (candidate / "manifest.json").is_file():
            return candidate
    return _CANDIDATES[-1]


def list() -> builtins.list[dict[str, Any]]:  # noqa: A001 - the public name asked for
    """Every manifest entry: name, kind, shape, dtype, source, license, how, statistics, ..."""
    return copy.deepcopy(_manifest(datasets_dir())["tensors"])


def names() -> builtins.list[str]:
    """The names of the shipped tensors, in manifest order."""
    return [entry["name"] for entry in _manifest(datasets_dir())["tensors"]]


def info(name: str) -> dict[str, Any]:
    """The manifest entry of one tensor."""
    return copy.deepcopy(_entry(datasets_dir(), name))


def load(name: str) -> np.ndarray:
    """Load a shipped tensor by name (a fresh, writable array)."""
    directory = datasets_dir()
    entry = _entry(directory, name)
    path = directory / Path(str(entry.get("file", f"{name}.npz"))).name  # stay in the folder
    try:
        return load_tensor(path, "x")
    except TensorFileError as exc:
        raise QuantizationError(
            f"dataset tensor {name!r} cannot be read: {exc} Rebuild it with "
            "`python datasets/build.py`."
        ) from None


def _entry(directory: Path, name: str) -> dict[str, Any]:
    for entry in _manifest(directory)["tensors"]:
        if entry["name"] == name:
            return entry
    valid = ", ".join(repr(e["name"]) for e in _manifest(directory)["tensors"])
    raise QuantizationError(f"no dataset tensor named {name!r}; valid names are: {valid}.")


def _manifest(directory: Path) -> dict[str, Any]:
    path = directory / "manifest.json"
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        raise QuantizationError(
            f"no dataset manifest at {path} (looked in "
            f"{', '.join(str(c) for c in _CANDIDATES)}); install qcore from the repository "
            f"(`pip install .` ships the tensors) or set {ENV_VAR} to a folder made by "
            "datasets/build.py."
        ) from None
    return _read_manifest(str(path), mtime)


@functools.lru_cache(maxsize=8)
def _read_manifest(path: str, mtime_ns: int) -> dict[str, Any]:
    """Parse and sanity-check a manifest (cached per path and modification time)."""
    try:
        manifest = json.loads(Path(path).read_text(encoding="utf-8"))
        tensors = manifest["tensors"]
        if not all(isinstance(t, dict) and isinstance(t.get("name"), str) for t in tensors):
            raise TypeError("every tensor entry needs a name")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise QuantizationError(
            f"dataset manifest {path} is unreadable ({exc}); rebuild it with datasets/build.py."
        ) from None
    return manifest
