"""Run the report's tasks on Dask (optional: ``pip install 'qcore[report]'``).

Each task is a :class:`~qcore.report.tasks.Task` — a file path, a tensor name and recipe names —
so the client never holds an array: a worker maps its own tensor with
:func:`~qcore.report.sources.read_tensor`, runs :func:`~qcore.report.tasks.run_task` (the very
function the in-process run calls) and sends back only the rows. Workers need the files at the
same paths (one machine, or a shared filesystem) and ``qcore`` importable.

``workers=N`` starts a ``LocalCluster`` of N single-threaded worker *processes* (numba's threads
in each set to cores / N so the workers do not oversubscribe the machine); ``scheduler=ADDRESS``
uses an existing cluster as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..distributed import _import_distributed, dask_client
from .tasks import Task, run_task

__all__ = ["run_tasks"]


def run_tasks(tasks: Sequence[Task], on_rows: Callable[[Task, list[dict]], None], *,
              workers: int = 0, scheduler: str | None = None,
              cluster_kwargs: dict | None = None,
              on_client: Callable[[Any], None] | None = None) -> None:
    """Submit every task; call ``on_rows(task, rows)`` as each finishes (in completion order).

    ``on_client(client)`` runs after the last task, before the cluster closes (benchmarks ask
    the workers for their peak memory there)."""
    distributed = _import_distributed()
    with dask_client(workers, scheduler, cluster_kwargs) as (client, threads):
        futures = {}
        for i, task in enumerate(tasks):
            # largest tensors first: the last task to finish is a small one, so no worker sits
            # idle while another works through a big tensor alone (longest-processing-time order)
            fut = client.submit(run_task, task, threads, key=f"qcore-report-{i}-{task.name}",
                                pure=False, priority=int(task.elements) * len(task.recipes))
            futures[fut] = task
        for fut in distributed.as_completed(list(futures)):
            task = futures.pop(fut)
            on_rows(task, fut.result())
            fut.release()
        if on_client is not None:
            on_client(client)
