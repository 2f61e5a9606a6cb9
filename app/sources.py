"""Where a model page's model comes from: the sidebar's choice, uploads and server paths.

Both model pages (Model Report, Model Fidelity) read files the same way, because anyone who can
reach the app can upload a file or type a path:

- an upload is size-bounded (``qcore.io.DEFAULT_MAX_BYTES``) and written once, into a temp
  folder named by its content's hash, so a rerun reuses the file (and every cache keyed by its
  path) instead of writing another copy;
- a typed path is read only under the allowed folders of :mod:`qcore.report.roots`.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import streamlit as st

from qcore.errors import QuantizationError
from qcore.io import DEFAULT_MAX_BYTES
from qcore.report import roots

from . import errors, widgets

_LIMIT_MIB = DEFAULT_MAX_BYTES >> 20
UPLOAD_LIMIT = f"at most {_LIMIT_MIB} MiB"  # what an upload may be


def choose(sources: dict[str, str], name: str, default: str) -> str:
    """The sidebar's choice of source (``sources`` maps each to its label)."""
    return widgets.select("Model", list(sources), name, default, where=st.sidebar,
                          format_func=sources.get)


def saved_upload(name: str, data: bytes) -> str:
    """An uploaded file's path on the server: its base name (the reader dispatches on the
    suffix) in a temp folder named by the content's hash; refused over the upload limit."""
    if len(data) > DEFAULT_MAX_BYTES:
        raise QuantizationError(f"{name}: {len(data) / 2**20:,.0f} MiB, over the {_LIMIT_MIB} MiB "
                                "an upload may be; give a smaller file")
    folder = Path(tempfile.gettempdir()) / f"qcore-upload-{hashlib.sha256(data).hexdigest()[:24]}"
    base = Path(name.replace("\x00", "")).name
    path = folder / (base if base not in ("", "..") else "upload")  # never the folder's parent
    if not path.exists():
        folder.mkdir(exist_ok=True)
        # a partial file of this writer's own (two sessions may upload the same file at once),
        # renamed when whole: never a half-written file under the final name
        fd, partial = tempfile.mkstemp(dir=folder, suffix=".partial")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(partial, path)
    return str(path)


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
