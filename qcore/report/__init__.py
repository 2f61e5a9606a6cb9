"""Whole-model format report: every tensor of a checkpoint × every recipe, streamed.

``python -m qcore.report MODEL [--recipes ...] [--out report.parquet] [--workers N]``; see
:mod:`qcore.report.__main__`. Library entry points: :func:`run_report` (rows as a DataFrame,
written as you go), :func:`summarize`, :func:`list_tensors` / :func:`read_tensor` (lazy,
memory-mapped sources), :func:`parse_recipe` and :data:`DEFAULT_RECIPES`. Dask
(``--workers`` / ``--scheduler``) and Parquet need the optional ``report`` extra; nothing else
does.
"""

from .core import Report, read_rows, run_report, summarize, write_rows
from .models import find_model, installed_models
from .recipes import DEFAULT_RECIPES, MX_RECIPES, Recipe, describe, parse_recipe, parse_recipes
from .sources import TensorRef, list_tensors, read_tensor
from .tasks import COLUMNS, Task, run_task

__all__ = [
    "COLUMNS", "DEFAULT_RECIPES", "MX_RECIPES", "Recipe", "Report", "Task", "TensorRef",
    "describe", "find_model", "installed_models", "list_tensors", "parse_recipe",
    "parse_recipes", "read_rows", "read_tensor", "run_report", "run_task", "summarize",
    "write_rows",
]
