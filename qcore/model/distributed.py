"""The sensitivity runs (tensor × recipe) on Dask (optional: ``pip install 'qcore[report]'``).

A task is a :class:`CaseSpec` (what :func:`qcore.model.cases.load_case` needs: a model path or
``minilm``, an inputs path or the seed of generated ones, ...), one tensor name and recipe
names — never an array. A worker loads the case once (kept for the next task of the same
spec), runs :func:`qcore.model.sensitivity.tensor_rows` (the very function the in-process run
calls, on the same inputs, so the rows are the same bit for bit) and sends back the rows. The
client gathers them in tensor × recipe order; it does not load the model itself
(:func:`measure_on_dask` asks a worker for the weights' sizes and the outputs' power).

``workers=N`` starts a ``LocalCluster`` of N single-threaded worker processes, as the report
does (:mod:`qcore.distributed`); ``scheduler=ADDRESS`` uses a running cluster, whose
workers need the model and inputs files at the same paths and ``qcore`` importable.
Progress is the report's bar (:class:`qcore.progress.ProgressBar`): tensors done,
elements × recipes per second, ETA.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..recipes import parse_recipes
from .fidelity import ModelCase
from .sensitivity import Sensitivity

__all__ = ["CaseSpec", "measure_on_dask"]

#: (tensors done, tensors total, elements done, elements total), the report's progress call.
ProgressFn = Callable[[int, int, int, int], None]


@dataclass(frozen=True)
class CaseSpec:
    """Everything a worker needs to build the same :class:`ModelCase` as the client."""

    model: str  # a .onnx path or "minilm"
    inputs: str | None = None  # an .npz path (else generated from seed, int_range, dim)
    sentences: int | None = 32
    seed: int = 0
    int_range: tuple[int, int] = (0, 100)
    dim: int = 1
    kind: str | None = None
    threads: int = 0
    feedback: str | None = None  # OUT=IN[,...]: the case runs over steps (feedback.py)
    outputs: str | None = None  # output names the figure uses (None: all)

    def load(self) -> ModelCase:
        """The case, its weights read from external data without a copy in the protobuf
        (:func:`qcore.model.graph.load_model` ``weights_on_disk``)."""
        from .cases import MINILM_NAMES, load_case
        from .feedback import load_fed_back_case
        from .graph import load_model

        model: Any = self.model
        if str(model).lower() not in MINILM_NAMES:
            model = load_model(model, weights_on_disk=True)

        outputs = [o.strip() for o in self.outputs.split(",") if o.strip()] \
            if self.outputs else None
        if self.feedback:
            return load_fed_back_case(model, self.inputs, self.feedback, kind=self.kind,
                                      dim=self.dim, threads=self.threads, outputs=outputs)
        return load_case(model, self.inputs, sentences=self.sentences, seed=self.seed,
                         int_range=self.int_range, dim=self.dim, kind=self.kind,
                         threads=self.threads, outputs=outputs)


_CASES: dict[CaseSpec, ModelCase] = {}


def _case(spec: CaseSpec) -> ModelCase:
    """The worker's case of ``spec`` (one held at a time: a new spec drops the old one)."""
    if spec not in _CASES:
        _CASES.clear()
        _CASES[spec] = spec.load()
    return _CASES[spec]


def _meta(spec: CaseSpec, tensors: list[str] | None) -> dict[str, Any]:
    """What the client's :class:`Sensitivity` needs besides the rows (worker side)."""
    from .sensitivity import sensitivity_of

    case = _case(spec)
    chosen = list(case.weights if tensors is None else tensors)
    unknown = [t for t in chosen if t not in case.arrays]
    if unknown:
        from .graph import ModelError

        raise ModelError(f"tensors {unknown} are not weights of the model; its weights: "
                         + ", ".join(case.weights))
    s = sensitivity_of(case, chosen, [], [])
    return {"tensors": chosen, "elements": s.elements, "float_bits": s.float_bits,
            "signal_power": s.signal_power}


def _rows(spec: CaseSpec, tensor: str, recipes: tuple[str, ...], numba_threads: int
          ) -> list[dict]:
    """One task (worker side): ``tensor`` × ``recipes`` by :func:`tensor_rows`."""
    import numba

    from .sensitivity import tensor_rows

    before = numba.get_num_threads()
    if numba_threads:
        numba.set_num_threads(max(1, min(numba_threads, numba.config.NUMBA_NUM_THREADS)))
    try:
        return tensor_rows(_case(spec), tensor, list(recipes))
    finally:
        numba.set_num_threads(before)


def measure_on_dask(spec: CaseSpec, recipes: Sequence[str] | str,
                    tensors: Sequence[str] | None = None, *, workers: int = 0,
                    scheduler: str | None = None, progress: ProgressFn | None = None,
                    cluster_kwargs: dict | None = None,
                    on_client: Callable[[Any], None] | None = None) -> Sensitivity:
    """:func:`qcore.model.sensitivity.measure` with one task per tensor on Dask; the same
    :class:`Sensitivity`, rows in the same order, bit for bit.

    ``on_client(client)`` runs after the last task, before the cluster closes (a memory
    measurement asks the workers for their peak RSS there)."""
    from ..distributed import _import_distributed, check_scheduler, dask_client
    from ..errors import QuantizationError

    names = [r.name for r in parse_recipes(recipes)]
    if scheduler:
        check_scheduler(scheduler)
    elif isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise QuantizationError(f"--workers {workers}: give 1 or more worker processes, or "
                                f"--scheduler ADDRESS")
    distributed = _import_distributed()
    spec = replace(spec, model=_absolute(spec.model),
                   inputs=_absolute(spec.inputs) if spec.inputs else None)
    with dask_client(workers, scheduler, cluster_kwargs) as (client, numba_threads):
        meta = client.submit(_meta, spec, None if tensors is None else list(tensors),
                             pure=False).result()
        chosen = meta["tensors"]
        total_el = sum(meta["elements"][t] * len(names) for t in chosen)
        futures = {}
        for i, t in enumerate(chosen):
            fut = client.submit(_rows, spec, t, tuple(names), numba_threads,
                                key=f"qcore-model-{i}", pure=False,
                                priority=meta["elements"][t])
            futures[fut] = t
        got: dict[str, list[dict]] = {}
        el_done = 0
        if progress is not None:
            progress(0, len(chosen), 0, total_el)
        for fut in distributed.as_completed(list(futures)):
            t = futures.pop(fut)
            got[t] = fut.result()
            fut.release()
            el_done += meta["elements"][t] * len(names)
            if progress is not None:
                progress(len(got), len(chosen), el_done, total_el)
        if on_client is not None:
            on_client(client)
    rows = [r for t in chosen for r in got[t]]
    return Sensitivity(chosen, names, meta["elements"], meta["float_bits"], rows,
                       meta["signal_power"])


def _absolute(path: str) -> str:
    """A path workers can open from any working folder (``minilm`` stays a name)."""
    from .cases import MINILM_NAMES

    if str(path).lower() in MINILM_NAMES:
        return str(path)
    return os.path.abspath(os.path.expanduser(str(path)))
