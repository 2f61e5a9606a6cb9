"""A report run's identity, so that ``--resume`` never mixes rows of different runs.

The identity is what decides a run's rows: the model (its resolved path and every file's
path, size and modification time), the options that choose tensors (include, exclude,
min_elements), the recipes, qcore's version and, for a model with ``.onnx`` files, the rule
that lays out their weights (``axes``: :data:`ONNX_AXES`, each weight by its role). It is the journal's first line
(``# qcore-report-run {json}``) and, once the run finishes, ``OUT.run.json`` beside each
output. Resuming compares it with the saved one:

- another model, other tensor-choosing options, another qcore version or another ``axes``
  rule (a journal of an ONNX model written when the report read every tensor as (out, in)
  rows has none): refused, naming what
  differs (``fresh=True`` / ``--fresh`` discards the saved rows instead);
- a file whose size or modification time changed (or that is gone): its saved rows are dropped,
  so its tensors are computed again;
- recipes: each row is one recipe's, so saved rows of recipes not asked now are left out and
  asked recipes without rows are computed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import QuantizationError
from ..io import TensorFileError
from .sources import resolve_files
from .tasks import relative_file

__all__ = ["IDENTITY_PREFIX", "ONNX_AXES", "compare", "identity_path", "read_identity", "run_identity",
           "usable_rows"]

IDENTITY_PREFIX = "# qcore-report-run "
#: How an ONNX model's weights are laid out (recorded in the identity of runs on .onnx files).
ONNX_AXES = "by role: per-axis on the output axis, blocks along the reduction axis"
_REFUSING = ("model", "options", "qcore", "axes")  # differences that make saved rows unusable


def run_identity(model: str | os.PathLike, root: str, recipes: list[str],
                 include: list[str], exclude: list[str], min_elements: int) -> dict[str, Any]:
    """The identity of a run (see the module docstring)."""
    from .. import __version__

    files = {}
    paths = resolve_files(model)
    for f in paths:
        st = f.stat()
        files[relative_file(str(f), root)] = [st.st_size, st.st_mtime_ns]
    ident = {"qcore": __version__, "model": str(Path(model).expanduser().resolve()),
             "files": files, "recipes": list(recipes),
             "options": {"include": list(include), "exclude": list(exclude),
                         "min_elements": int(min_elements)}}
    if any(f.suffix.lower() == ".onnx" for f in paths):
        ident["axes"] = ONNX_AXES
    return ident


def identity_path(out: Path) -> Path:
    return out.with_name(out.name + ".run.json")


def read_identity(journal: Path, out: Path) -> dict[str, Any] | None:
    """The saved identity: the journal's first line, else the finished output's sidecar;
    None when neither holds one."""
    try:
        if journal.exists():
            with open(journal, encoding="utf-8") as fh:
                first = fh.readline(1 << 24)
            if first.startswith(IDENTITY_PREFIX):
                return _checked(json.loads(first[len(IDENTITY_PREFIX):]))
            return None
        side = identity_path(out)
        if side.exists():
            return _checked(json.loads(side.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise TensorFileError(f"{journal if journal.exists() else identity_path(out)}: the "
                              f"saved run's identity cannot be read ({exc}); rerun with "
                              f"--resume --fresh to start afresh") from None
    return None


def _checked(saved: Any) -> dict[str, Any]:
    """A saved identity of the right shape: a mapping whose ``files`` is a mapping of
    [size, mtime] pairs (ValueError otherwise)."""
    if not isinstance(saved, dict):
        raise ValueError(f"a JSON {type(saved).__name__}, not an object")
    files = saved.get("files", {})
    if not isinstance(files, dict):
        raise ValueError(f"'files' is a JSON {type(files).__name__}, not an object")
    return saved


def compare(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What makes the saved run another run than this one (empty: the same run)."""
    out = []
    for key in _REFUSING:
        if saved.get(key) != now.get(key):
            out.append(f"{key}: saved {saved.get(key)!r}, now {now.get(key)!r}")
    return out


def refuse_or_accept(saved: dict[str, Any] | None, now: dict[str, Any], where: Path,
                     has_rows: bool, fresh: bool) -> bool:
    """True when the saved rows may be used; raises QuantizationError saying what differs
    (unless ``fresh``, which gives False: start afresh)."""
    if not has_rows:
        return False
    if saved is None:
        if fresh:
            return False
        raise QuantizationError(f"--resume: {where} records no run identity, so its rows "
                                f"cannot be matched to this run; rerun with --resume --fresh "
                                f"(or without --resume) to start afresh")
    diff = compare(saved, now)
    if diff and not fresh:
        raise QuantizationError(f"--resume: {where} holds another run ({'; '.join(diff)}); "
                                f"rerun with --resume --fresh (or without --resume) to start "
                                f"afresh")
    return not diff


def usable_rows(previous: pd.DataFrame, saved: dict[str, Any], now: dict[str, Any],
                recipes: list[str]) -> pd.DataFrame:
    """Saved rows still valid now: asked recipes only, of files unchanged since."""
    same = {f for f, stat in now["files"].items() if saved.get("files", {}).get(f) == stat}
    keep = previous["recipe"].isin(list(recipes)) & previous["file"].isin(sorted(same))
    return previous[keep].reset_index(drop=True)
