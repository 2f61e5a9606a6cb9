"""A Dask client for the report and the model tool (optional: ``pip install 'qcore[report]'``).

The report (:mod:`qcore.report.distributed`) and the model tool's sensitivity runs
(:mod:`qcore.model.distributed`) both open their cluster here.

``workers=N`` starts a ``LocalCluster`` of N single-threaded worker *processes* (numba's threads
in each set to cores / N so the workers do not oversubscribe the machine); ``scheduler=ADDRESS``
uses an existing cluster as it is.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .errors import QuantizationError

__all__ = ["check_scheduler", "dask_client"]


def _import_distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise QuantizationError("--workers / --scheduler need Dask: pip install "
                                "'qcore[report]' (dask[distributed]); without them the report "
                                "runs in this process") from None
    return distributed


SCHEDULER_TIMEOUT = 10.0  # seconds to reach a scheduler before the run is refused


def check_scheduler(address: str, timeout: float = SCHEDULER_TIMEOUT) -> None:
    """Refuse a scheduler address that does not answer a TCP connection within ``timeout``
    seconds (checked before anything is computed)."""
    import socket
    from urllib.parse import urlsplit

    text = str(address)
    try:
        parts = urlsplit(text if "://" in text else f"tcp://{text}")
        host, port = parts.hostname, parts.port
    except ValueError:
        host = port = None
    if not host or port is None or "\x00" in text:
        raise QuantizationError(f"--scheduler {text!r}: not an address; give tcp://HOST:PORT")
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        raise QuantizationError(f"--scheduler {text}: no Dask scheduler answers there within "
                                f"{timeout:g} s ({exc.strerror or exc})") from None


@contextmanager
def dask_client(workers: int = 0, scheduler: str | None = None,
                cluster_kwargs: dict | None = None) -> Iterator[tuple[Any, int]]:
    """``(client, numba_threads)`` for a run on Dask, closed (cluster too) when the block ends.

    ``scheduler``: a client of that cluster, numba's threads left as the workers have them (0).
    Otherwise a ``LocalCluster`` of ``workers`` single-threaded worker processes, each with
    cores / ``workers`` numba threads so the workers do not oversubscribe the machine."""
    distributed = _import_distributed()
    cluster = None
    if scheduler:
        client = distributed.Client(scheduler, timeout=SCHEDULER_TIMEOUT)
        threads = 0
    else:
        if int(workers) < 1:
            raise QuantizationError(f"workers={workers} must be >= 1")
        kw = {"n_workers": int(workers), "threads_per_worker": 1, "processes": True,
              "dashboard_address": None, **(cluster_kwargs or {})}
        cluster = distributed.LocalCluster(**kw)
        client = distributed.Client(cluster)
        threads = max(1, (os.cpu_count() or 1) // int(workers))
    try:
        yield client, threads
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
