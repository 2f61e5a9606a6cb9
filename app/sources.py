"""Where a model page's model comes from: the sidebar's choice, uploads and server paths.

Both model pages (Model Report, Model Fidelity) read files the same way, because anyone who can
reach the app can upload a file or type a path:

- an upload is size-bounded (``qcore.io.DEFAULT_MAX_BYTES``), its name bounded, and written
  once, into a folder named by its content's hash inside the process's private upload folder
  (``mkdtemp``, mode 0700), so a rerun reuses the file (and every cache keyed by its path)
  instead of writing another copy, and nothing planted in the shared temp folder is read;
- a typed path is read only under the allowed folders of :mod:`qcore.report.roots`, resolved
  first, so a symbolic link out of them is refused.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

import streamlit as st

from qcore.errors import QuantizationError
from qcore.io import DEFAULT_MAX_BYTES
from qcore.report import roots

from . import errors, widgets

_LIMIT_MIB = DEFAULT_MAX_BYTES >> 20
UPLOAD_LIMIT = f"at most {_LIMIT_MIB} MiB"  # what an upload may be


def choose(sources: dict[str, str], name: str, default: str, *, help: str | None = None) -> str:
    """The sidebar's choice of source (``sources`` maps each to its label)."""
    return widgets.select("Model", list(sources), name, default, where=st.sidebar,
                          format_func=sources.get, help=help)


#: Longest base name an upload keeps (bytes of UTF-8; file systems allow 255): longer names
#: keep their suffix, which the reader dispatches on.
MAX_NAME_BYTES = 120
_UPLOAD_ROOT: Path | None = None


def upload_root() -> Path:
    """This process's private upload folder: made by ``tempfile.mkdtemp`` (mode 0700, a name
    no one can guess or make first), removed at exit. Nothing another user plants under the
    shared temp folder is ever taken for an upload."""
    global _UPLOAD_ROOT
    root = _UPLOAD_ROOT
    if root is None or not (root.is_dir() and not root.is_symlink()
                            and root.stat().st_uid == os.getuid()):
        root = Path(tempfile.mkdtemp(prefix="qcore-uploads-"))
        atexit.register(shutil.rmtree, root, True)
        _UPLOAD_ROOT = root
    return root


def upload_name(name: str) -> str:
    """The base name an upload is saved under: no folders, no null bytes, never ``..``, at
    most :data:`MAX_NAME_BYTES` bytes (the stem is cut, the suffix kept)."""
    base = Path(str(name).replace("\x00", "").replace("\\", "/")).name
    if base in ("", ".", ".."):
        return "upload"
    if len(base.encode()) <= MAX_NAME_BYTES:
        return base
    suffix = Path(base).suffix
    suffix = suffix if len(suffix.encode()) <= 16 else ""
    stem = base[: len(base) - len(suffix)] if suffix else base
    while len((stem + suffix).encode()) > MAX_NAME_BYTES:
        stem = stem[:-1]
    return (stem or "upload") + suffix


def saved_upload(name: str, data: bytes) -> str:
    """An uploaded file's path on the server: its base name (:func:`upload_name`; the reader
    dispatches on the suffix) in a folder named by the content's hash inside this process's
    private folder (:func:`upload_root`); refused over the upload limit. An existing entry is
    used only when it is a regular file (not a symbolic link) holding exactly ``data``."""
    if len(data) > DEFAULT_MAX_BYTES:
        raise QuantizationError(f"{upload_name(name)}: {len(data) / 2**20:,.0f} MiB, over the "
                                f"{_LIMIT_MIB} MiB an upload may be; give a smaller file")
    folder = upload_root() / f"qcore-upload-{hashlib.sha256(data).hexdigest()[:24]}"
    path = folder / upload_name(name)
    if _holds(path, data):
        return str(path)
    folder.mkdir(mode=0o700, exist_ok=True)
    if folder.is_symlink() or not folder.is_dir():
        raise QuantizationError(f"{name}: the upload folder {folder} is not a folder of this "
                                "app's")
    # a partial file of this writer's own (two sessions may upload the same file at once),
    # renamed when whole: never a half-written file under the final name; removed on failure
    fd, partial = tempfile.mkstemp(dir=folder, suffix=".partial")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(partial, path)  # replaces a symbolic link itself, never its target
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise QuantizationError(f"{upload_name(name)}: cannot be saved "
                                f"({exc.strerror or exc})") from None
    return str(path)


def _holds(path: Path, data: bytes) -> bool:
    """Whether ``path`` is a regular file (a link is not) holding exactly ``data``."""
    try:
        st = path.lstat()
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_size != len(data):
        return False
    try:
        return path.read_bytes() == data
    except OSError:
        return False


def upload(label: str, types: list[str], name: str, *, help: str = "") -> str | None:
    """A sidebar uploader; the saved file's path, or None before a file is given."""
    up = st.sidebar.file_uploader(label, type=types, key=name,
                                  help=f"At most {_LIMIT_MIB} MiB. {help}".strip())
    if up is None:
        return None
    return errors.require(saved_upload, up.name, up.getvalue(), what="Uploading")


def allowed(path: str) -> str:
    """``path`` resolved when it lies under an allowed folder; else QuantizationError."""
    return str(roots.check_allowed(path))


def server_path(label: str, name: str, *, placeholder: str = "", help: str | None = None,
                what: str = "Reading the model", list_folders: bool = True) -> str | None:
    """A server path typed in the sidebar, checked against the allowed folders (which a
    caption lists, unless ``list_folders`` is off); None while the field is empty."""
    path = widgets.text(label, name, "", where=st.sidebar, placeholder=placeholder, help=help)
    if list_folders:
        folders = roots.allowed_roots()
        st.caption("This app reads server paths only under: "
                   + ", ".join(f"`{f}`" for f in folders) + f". The server's "
                   f"`{roots.ENV_VAR}` lists more; any other file comes as an upload.")
    if not path:
        return None
    return errors.require(allowed, path, what=what)
