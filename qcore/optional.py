"""The optional dependencies (onnx, onnxruntime, tokenizers, safetensors), imported when first
needed, so that the engine imports with numpy, ml_dtypes and numba alone.

:func:`require` is the one import of them: a missing one raises an error that says who needs it
and the pip line (qcore's ``model`` extra, or the package alone), never a bare
ModuleNotFoundError from deep inside a call.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["require"]


def require(module: str, who: str, error: type[Exception] = ImportError) -> Any:
    """``module`` imported, or ``error`` (ImportError unless the caller's refusals are another
    type): "WHO needs PACKAGE: pip install 'qcore[model]' (or pip install PACKAGE)"."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        name = module.split(".")[0]
        raise error(f"{who} needs {name}: pip install 'qcore[model]' (or pip install "
                    f"{name})") from exc
