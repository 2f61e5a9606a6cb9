"""Whole-model format report: every tensor of a checkpoint × every recipe, streamed.

``python -m qcore.report MODEL [--recipes ...] [--out report.parquet] [--workers N]``; see
:mod:`qcore.report.__main__`. Library entry points: :func:`run_report` (rows as a DataFrame,
written as you go), :func:`summarize`, :func:`list_tensors` / :func:`read_tensor` (lazy,
memory-mapped sources), :func:`parse_recipe` and :data:`DEFAULT_RECIPES`. Dask
(``--workers`` / ``--scheduler``) and Parquet need the optional ``report`` extra; nothing else
does. The names are imported from their submodules on first use, so a submodule that needs no
pandas (``recipes``, ``models``, ``roots``) imports without it.
"""

import importlib
from typing import Any

#: Each public name and the submodule it lives in: imported on first use, so that
#: ``qcore.report.recipes`` (which the model tool uses) needs no pandas; the rows need it.
_WHERE = {
    "Report": "core", "read_rows": "core", "run_report": "core", "summarize": "core",
    "write_rows": "core", "find_model": "models", "installed_models": "models",
    "DEFAULT_RECIPES": "recipes", "MX_RECIPES": "recipes", "Recipe": "recipes",
    "describe": "recipes", "parse_recipe": "recipes", "parse_recipes": "recipes",
    "TensorRef": "sources", "list_tensors": "sources", "read_tensor": "sources",
    "COLUMNS": "tasks", "Task": "tasks", "run_task": "tasks",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "COLUMNS", "DEFAULT_RECIPES", "MX_RECIPES", "Recipe", "Report", "Task", "TensorRef",
    "describe", "find_model", "installed_models", "list_tensors", "parse_recipe",
    "parse_recipes", "read_rows", "read_tensor", "run_report", "run_task", "summarize",
    "write_rows",
]
