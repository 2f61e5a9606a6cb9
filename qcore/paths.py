"""Output paths: the one check that a run can write the file it names, made before anything is
computed (the report's ``--out`` and the model tool's output flags share it)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import QuantizationError

__all__ = ["check_writable_file"]


def check_writable_file(p: Path, label: str,
                        error: type[QuantizationError] = QuantizationError) -> Path:
    """``p`` when it can be written: not a folder, not some other non-regular file, in an
    existing folder this process may write (tried with a real temporary file: permissions alone
    do not tell, for root, read-only mounts or /proc), and writable itself when it exists.
    Otherwise raises ``error`` with ``label`` (the flag and the path as the user gave it)."""
    folder = p.parent if str(p.parent) else Path(".")
    if not folder.is_dir():
        raise error(f"{label}: the folder {folder} does not exist (or is not a folder); "
                    f"create it first")
    if p.is_dir():
        raise error(f"{label}: is a folder; give a file name in it")
    if p.exists() and not p.is_file():
        raise error(f"{label}: exists and is not a regular file")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".qcore-", suffix=".tmp"):
            pass
    except OSError as exc:
        raise error(f"{label}: cannot write in {folder} ({exc.strerror or exc})") from None
    if p.exists() and not os.access(p, os.W_OK):
        raise error(f"{label}: the file is not writable")
    return p
