"""Latency in onnxruntime: an export beside its float model, timed in one process.

Deploy timing uses sessions as a user makes them: onnxruntime's default graph optimizations
(so the forms of :mod:`qcore.model.deployable` run as fused kernels), the CPU provider, intra-op
spinning off (threads do not burn the other cores while waiting). One *pass* runs every batch of
the inputs once; a session warms up with ``warmup`` passes, then the sessions of one call take
turns pass by pass (``repeats`` each), so a noisy neighbour slows them alike. The figure is the
median pass in milliseconds. ``threads``: 1 (one intra-op thread) and 0 (onnxruntime's default:
every core).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from . import require

__all__ = ["THREADS", "deploy_session", "interleaved_runs_ms", "latency_ms", "latency_runs_ms",
           "model_latency", "spread", "thread_label"]

#: The thread counts every latency figure is given for (0: onnxruntime's default, all cores).
THREADS = (1, 0)


def thread_label(threads: int) -> str:
    """The JSON key of a thread count: ``"1"``, ``"2"``, … or ``"all"`` for 0."""
    return "all" if threads == 0 else str(int(threads))


def deploy_session(model: Any, threads: int = 1, config: Mapping[str, str] | None = None
                   ) -> Any:
    """An onnxruntime CPU session with the default (all) optimizations, spinning off;
    ``config``: more session config entries (e.g. ``session.qdq_matmulnbits_accuracy_level``)."""
    ort = require("onnxruntime")
    so = ort.SessionOptions()
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    for k, v in (config or {}).items():
        so.add_session_config_entry(k, str(v))
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = int(threads)
    data = model if isinstance(model, (bytes, str)) else model.SerializeToString()
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def latency_ms(models: Mapping[str, Any], batches: Sequence[Mapping[str, np.ndarray]],
               threads: int = 1, repeats: int = 10, warmup: int = 2,
               configs: Mapping[str, Mapping[str, str]] | None = None) -> dict[str, float]:
    """Median milliseconds of one pass over ``batches`` per model (module doc), the models
    taking turns; ``configs``: session config entries by model key."""
    runs = latency_runs_ms(models, batches, threads, repeats, warmup, configs)
    return {k: float(statistics.median(v)) for k, v in runs.items()}


def spread(runs: Sequence[float]) -> list[float]:
    """[min, median, max] of a model's passes (ms): the repeats' spread says how much of a
    difference between two models is noise."""
    return [float(min(runs)), float(statistics.median(runs)), float(max(runs))]


def latency_runs_ms(models: Mapping[str, Any], batches: Sequence[Mapping[str, np.ndarray]],
                    threads: int = 1, repeats: int = 10, warmup: int = 2,
                    configs: Mapping[str, Mapping[str, str]] | None = None
                    ) -> dict[str, list[float]]:
    """Milliseconds of every timed pass per model, as :func:`latency_ms` times them."""
    configs = configs or {}
    sessions = {k: deploy_session(m, threads, configs.get(k)) for k, m in models.items()}
    return interleaved_runs_ms(sessions, batches, repeats, warmup)


def interleaved_runs_ms(sessions: Mapping[str, Any], batches: Sequence[Mapping[str, np.ndarray]],
                        repeats: int, warmup: int) -> dict[str, list[float]]:
    """Milliseconds of every timed pass per session: ``warmup`` untimed passes each, then the
    sessions take turns pass by pass (one pass runs every batch), so a change in the machine's
    load falls on all of them alike."""
    times: dict[str, list[float]] = {k: [] for k in sessions}
    for s in sessions.values():
        for _ in range(warmup):
            for b in batches:
                s.run(None, dict(b))
    for _ in range(max(1, int(repeats))):
        for k, s in sessions.items():
            t0 = time.perf_counter()
            for b in batches:
                s.run(None, dict(b))
            times[k].append((time.perf_counter() - t0) * 1000.0)
    return times


def model_latency(model: Any, float_model: Any, batches: Sequence[Mapping[str, np.ndarray]],
                  threads: Sequence[int] = THREADS, repeats: int = 10, warmup: int = 2
                  ) -> dict[str, dict[str, float]]:
    """``{"latency_ms": {threads: ms}, "float_latency_ms": {threads: ms}}`` of an export and
    its float model, timed together (module doc), with ``latency_spread_ms`` and
    ``float_latency_spread_ms``: [min, median, max] of the passes (:func:`spread`); the keys of
    the inner dicts are :func:`thread_label`\\ s. The page and the plan JSON use this."""
    out: dict[str, dict[str, Any]] = {"latency_ms": {}, "float_latency_ms": {},
                                      "latency_spread_ms": {}, "float_latency_spread_ms": {}}
    for t in threads:
        runs = latency_runs_ms({"export": model, "float": float_model}, batches, t, repeats,
                               warmup)
        key = thread_label(t)
        out["latency_spread_ms"][key] = spread(runs["export"])
        out["float_latency_spread_ms"][key] = spread(runs["float"])
        out["latency_ms"][key] = out["latency_spread_ms"][key][1]
        out["float_latency_ms"][key] = out["float_latency_spread_ms"][key][1]
    return out
