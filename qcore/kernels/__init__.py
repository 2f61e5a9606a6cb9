"""numba kernels, and the guard that keeps numba's on-disk cache of them current.

numba's on-disk cache is keyed by the timestamp of the file that *defines* a kernel, not of the
files it calls, so an edit to ``scalar.py`` alone would leave ``cpu.py``'s cached kernels
running the old rules. The guard hashes every kernel source and clears qcore's cache files when
it changes, wherever numba keeps them (next to the sources, or under ``NUMBA_CACHE_DIR``). It
runs once per process, just before numba first looks up or compiles a qcore kernel (see
:func:`ensure_fresh_cache`): importing qcore changes no file.
"""

from __future__ import annotations

import hashlib
import pathlib
import threading
import types

_HERE = pathlib.Path(__file__).resolve().parent
_QCORE = _HERE.parent
#: Folders whose modules define cached kernels (their cache entries are dropped together).
_KERNEL_FOLDERS = (_HERE, _QCORE, _QCORE / "report")
#: Everything a cached kernel can compile in: the kernel modules and the qcore modules with
#: cached kernels or constants they read.
_SOURCES = (*sorted(_HERE.glob("*.py")),
            *(_QCORE / n for n in ("config.py", "packing.py", "formats.py", "reductions.py",
                                   "metrics.py", "report/stats.py")))


def _cache_dirs() -> list[pathlib.Path]:
    """The folder numba keeps each kernel module's cache in, found as numba finds it: under
    ``NUMBA_CACHE_DIR`` when it is set, else next to the source, else (a read-only install) in
    the user-wide cache."""
    from numba.core import caching

    dirs = []
    for folder in _KERNEL_FOLDERS:
        probe = str(folder / "__init__.py")
        for name in ("UserProvidedCacheLocator", "InTreeCacheLocator", "UserWideCacheLocator"):
            # public names since numba 0.59, underscored before
            locator = getattr(caching, name, None) or getattr(caching, "_" + name)
            try:
                found = locator.from_function(ensure_fresh_cache, probe)
            except Exception:  # noqa: BLE001 - a locator numba cannot use here
                found = None
            if found is not None:  # the first that works is the one numba uses
                dirs.append(pathlib.Path(found.get_cache_path()))
                break
    return list(dict.fromkeys(dirs))


#: The hash of every kernel source (see sources_stamp): names the build cache entries are of.
SOURCES_STAMP = ""
_FRESH_LOCK = threading.Lock()
_fresh = False  # ensure_fresh_cache has run in this process


def sources_stamp() -> str:
    """The hash of every kernel source as they are now (computed once per process)."""
    global SOURCES_STAMP
    if not SOURCES_STAMP:
        digest = hashlib.sha256()
        for path in _SOURCES:
            if path.exists():
                digest.update(path.read_bytes())
        SOURCES_STAMP = digest.hexdigest()
    return SOURCES_STAMP


def ensure_fresh_cache() -> None:
    """Drop qcore's cache entries compiled from other sources, once per process: each cache
    folder holds a marker with the sources' hash, and a folder whose marker differs loses its
    entries. numba runs this before its first lookup of a qcore kernel (see
    _guard_cache_lookups)."""
    global _fresh
    with _FRESH_LOCK:
        if _fresh:
            return
        _fresh = True
        stamp = sources_stamp()
        for cache_dir in _cache_dirs():
            marker = cache_dir / "qcore-kernels.sha256"
            try:
                if marker.exists() and marker.read_text() == stamp:
                    continue
                cache_dir.mkdir(parents=True, exist_ok=True)
                for entry in cache_dir.iterdir():
                    if entry.suffix in (".nbi", ".nbc"):
                        entry.unlink(missing_ok=True)
                marker.write_text(stamp)
            except OSError:
                pass  # a cache folder we cannot write: numba cannot write it either


def _guard_cache_lookups() -> None:
    """Make numba run ensure_fresh_cache before it first looks up a qcore kernel in its cache.
    Every compilation starts with that lookup (``Cache.load_overload``), so no stale entry is
    ever loaded, and nothing on disk changes until a kernel is needed. The wrapper checks a
    flag and the function's module, then calls numba's own method."""
    from numba.core import caching

    lookup = caching.FunctionCache.load_overload

    def load_overload(self, sig, target_context):
        if not _fresh and getattr(self._py_func, "__module__", "").startswith("qcore"):
            ensure_fresh_cache()
        return lookup(self, sig, target_context)

    caching.FunctionCache.load_overload = load_overload


def cache_marker(name: str) -> pathlib.Path | None:
    """A file beside qcore's cached kernels, holding SOURCES_STAMP once a warm-up has compiled
    `name` for these sources (see :func:`is_marked`); None where numba has no cache folder."""
    dirs = _cache_dirs()
    return dirs[0] / f"qcore-warm-{name}.sha256" if dirs else None


def is_marked(name: str) -> bool:
    """Whether the marker `name` was written for the kernel sources as they are now."""
    marker = cache_marker(name)
    try:
        return marker is not None and marker.read_text() == sources_stamp()
    except OSError:
        return False


def mark(name: str) -> None:
    """Write the marker `name` for the kernel sources as they are now (where it can be)."""
    marker = cache_marker(name)
    if marker is not None:
        try:
            marker.write_text(sources_stamp())
        except OSError:
            pass


def _copy(fn, name: str, qualname: str, globals_: dict):
    """fn's code as a new function object under another name, reading `globals_`."""
    copy = types.FunctionType(fn.__code__, globals_, name, fn.__defaults__, fn.__closure__)
    copy.__qualname__ = qualname
    return copy


def bound(template, name: str, flags: dict, **constants):
    """A kernel compiled (njit with `flags`) from `template` with some of its module globals
    bound to `constants`, under its own name: numba folds the constants, so each binding
    holds only its own branches; and numba's cache keys a kernel by name and line, so two
    bindings of one function must not share one."""
    from numba import njit

    return njit(**flags)(_copy(template, name, name, dict(template.__globals__, **constants)))


def renamed(fn, suffix: str):
    """A copy of fn under another name, for compiling one function two ways.

    numba's on-disk cache is keyed by the function's name and line, not by its flags: a
    parallel and a serial compilation of one function would load each other's machine code.
    """
    return _copy(fn, fn.__name__ + suffix, fn.__qualname__ + suffix, fn.__globals__)


_guard_cache_lookups()
