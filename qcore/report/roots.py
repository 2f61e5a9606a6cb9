"""Which server folders a shared app may read a model or report from.

Anyone who can reach the Streamlit app can type a path, so the model pages (Model Report, Model
Fidelity) read server paths only under allowed roots: the shipped tensors
(:func:`qcore.datasets.datasets_dir`), the installed model packages
(:func:`qcore.models.installed_models`), and the folders listed in the environment
variable ``QCORE_REPORT_ROOTS`` (separated by ``os.pathsep``, ``:`` on Linux). Paths are
resolved first (symbolic links and ``..`` followed), so no path leads out of a root. Any other
model comes as an upload. The command line reads any path its user can.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import QuantizationError

__all__ = ["ENV_VAR", "allowed_roots", "check_allowed"]

ENV_VAR = "QCORE_REPORT_ROOTS"


def allowed_roots(extra: str | None = None) -> list[Path]:
    """Resolved allowed roots: shipped tensors, installed model packages, ``$QCORE_REPORT_ROOTS``
    (``extra``: a value to use instead of the environment's)."""
    from .. import datasets
    from ..models import installed_models

    roots = [datasets.datasets_dir()]
    for path in installed_models().values():
        roots.append(Path(path).parent)
    listed = os.environ.get(ENV_VAR, "") if extra is None else extra
    roots += [Path(p).expanduser() for p in listed.split(os.pathsep) if p.strip()]
    out: list[Path] = []
    for r in roots:
        try:
            r = r.resolve()
        except (OSError, ValueError):
            continue
        if r not in out:
            out.append(r)
    return out


def check_allowed(path: str | os.PathLike, roots: list[Path] | None = None) -> Path:
    """``path`` resolved, when it lies under an allowed root; else QuantizationError saying
    which roots are allowed and how to add one."""
    text = os.fspath(path)
    if "\x00" in text:
        raise QuantizationError(f"{text!r}: the path holds a null byte")
    roots = allowed_roots() if roots is None else roots
    try:
        resolved = Path(text).expanduser().resolve()
    except (OSError, RuntimeError, ValueError) as exc:
        raise QuantizationError(f"{text}: cannot be resolved ({exc})") from None
    if any(resolved == r or r in resolved.parents for r in roots):
        return resolved
    raise QuantizationError(
        f"{text}: this app reads server paths only under its allowed folders "
        f"({', '.join(str(r) for r in roots)}); upload the file instead, or start the app with "
        f"{ENV_VAR} listing more folders")
