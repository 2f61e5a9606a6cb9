"""Whole-model format report: every tensor of a checkpoint × every recipe, streamed.

``python -m qcore.report MODEL [--recipes ...] [--out report.parquet] [--workers N]``; see
:mod:`qcore.report.__main__`. Library entry points: :func:`run_report` (rows as a DataFrame,
written as you go), :func:`summarize`, :func:`list_tensors` / :func:`read_tensor` (lazy,
memory-mapped sources), :func:`parse_recipe` and :data:`DEFAULT_RECIPES`. Dask
(``--workers`` / ``--scheduler``) and Parquet need the optional ``report`` extra; nothing else
does. The names are imported from their submodules on first use, so a submodule that needs no
pandas (``roots``, and the recipes and models from ``qcore``) imports without it.
"""

import importlib
from typing import Any

#: Each public name and the module it lives in (recipes and the installed models live below
#: both tools, in :mod:`qcore.recipes` and :mod:`qcore.models`): imported on first use, so that
#: a name that needs no pandas imports without it; the rows need it.
_WHERE = {
    "Report": ".core", "read_rows": ".core", "run_report": ".core", "summarize": ".core",
    "write_rows": ".core", "find_model": "qcore.models", "installed_models": "qcore.models",
    "DEFAULT_RECIPES": "qcore.recipes", "MX_RECIPES": "qcore.recipes", "Recipe": "qcore.recipes",
    "describe": "qcore.recipes", "parse_recipe": "qcore.recipes", "parse_recipes": "qcore.recipes",
    "TensorRef": ".sources", "list_tensors": ".sources", "read_tensor": ".sources",
    "COLUMNS": ".tasks", "Task": ".tasks", "run_task": ".tasks",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "COLUMNS", "DEFAULT_RECIPES", "MX_RECIPES", "Recipe", "Report", "Task", "TensorRef",
    "describe", "find_model", "installed_models", "list_tensors", "parse_recipe",
    "parse_recipes", "read_rows", "read_tensor", "run_report", "run_task", "summarize",
    "write_rows",
]
