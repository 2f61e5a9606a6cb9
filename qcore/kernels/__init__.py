"""numba kernels. Importing this package first drops stale numba cache entries.

numba's on-disk cache is keyed by the timestamp of the file that *defines* a kernel, not of the
files it calls, so an edit to ``scalar.py`` alone would leave ``cpu.py``'s cached kernels
running the old rules. We hash every kernel source and clear qcore's cache files when it changes.
"""

from __future__ import annotations

import hashlib
import pathlib
import types

_HERE = pathlib.Path(__file__).resolve().parent
_SOURCES = ("scalar.py", "bits.py", "params.py", "walk.py", "cpu.py", "../config.py", "../packing.py",
            "../formats.py", "../metrics.py")


def _ensure_fresh_cache() -> None:
    digest = hashlib.sha256()
    for name in _SOURCES:
        path = _HERE / name
        if path.exists():
            digest.update(path.read_bytes())
    stamp = digest.hexdigest()
    for cache_dir in (_HERE / "__pycache__", _HERE.parent / "__pycache__"):
        marker = cache_dir / "qcore-kernels.sha256"
        try:
            if marker.exists() and marker.read_text() == stamp:
                continue
            cache_dir.mkdir(exist_ok=True)
            for entry in cache_dir.iterdir():
                if entry.suffix in (".nbi", ".nbc"):
                    entry.unlink(missing_ok=True)
            marker.write_text(stamp)
        except OSError:
            pass  # read-only install: numba then uses its own user-wide cache directory


def renamed(fn, suffix: str):
    """A copy of fn under another name, for compiling one function two ways.

    numba's on-disk cache is keyed by the function's name and line, not by its flags: a
    parallel and a serial compilation of one function would load each other's machine code.
    """
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + suffix,
                              fn.__defaults__, fn.__closure__)
    copy.__qualname__ = fn.__qualname__ + suffix
    return copy


_ensure_fresh_cache()
