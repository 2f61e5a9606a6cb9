"""State fed back: a model run over a sequence, each step's state output fed to the next step.

``--feedback OUT=IN[,OUT2=IN2...]`` names output → input pairs (a recurrent model's ``stateN`` →
``state``). The inputs file holds a leading *step* axis on every per-step input: an array whose
rank is the graph input's rank + 1 gives one value per step (all such arrays have the same
number of steps); an array of the input's own rank is fed unchanged at every step. A state
input IN starts from its array (its first step where it has a step axis) or, absent from the
file, from zeros of the input's shape (symbolic dimensions take ``dim``).

The float model and the quantized model each feed **their own** state: quantization error that
the state carries from step to step is measured, as a deployed model would feel it. The
fidelity (:meth:`FedBackCase.fidelity`) is measured over all steps at once (each output
stacked over steps, then :func:`qcore.model.fidelity.compare`), and per step:
``sqnr_db_per_step`` and ``max_abs_per_step`` list the same measures for each step's outputs
alone. :func:`per_step_rows` turns a measurement into rows for a table or a chart (the Model
Fidelity page's SQNR per step).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import require
from .cases import MINILM_NAMES
from .checks import MAX_INPUT_BYTES, check_feed, generated_bytes, read_npz
from .fidelity import ModelCase, compare
from .graph import ModelError, graph_inputs, load_model

__all__ = ["FedBackCase", "load_fed_back_case", "parse_feedback", "per_step_rows",
           "split_steps"]


def parse_feedback(text: str, model: Any) -> list[tuple[str, str]]:
    """``OUT=IN[,...]`` as (output, input) pairs, each name checked against the graph."""
    outputs = [o.name for o in model.graph.output]
    inputs = [n for n, _, _ in graph_inputs(model)]
    pairs = []
    for part in str(text).split(","):
        if not part.strip():
            continue
        out, sep, inp = part.partition("=")
        out, inp = out.strip(), inp.strip()
        if not sep or not out or not inp:
            raise ModelError(f"--feedback {text!r}: give OUT=IN pairs separated by commas, "
                             f"e.g. {outputs[-1] if outputs else 'stateN'}="
                             f"{inputs[-1] if inputs else 'state'}")
        if out not in outputs:
            raise ModelError(f"--feedback {out}={inp}: {out!r} is not an output of the model; "
                             f"its outputs: {', '.join(outputs)}")
        if inp not in inputs:
            raise ModelError(f"--feedback {out}={inp}: {inp!r} is not an input of the model; "
                             f"its inputs: {', '.join(inputs)}")
        pairs.append((out, inp))
    if not pairs:
        raise ModelError(f"--feedback {text!r}: name at least one OUT=IN pair")
    _check_state_types(model, pairs)
    fed = [i for _, i in pairs]
    if len(set(fed)) != len(fed):
        raise ModelError(f"--feedback {text!r}: an input is fed twice")
    return pairs


def _check_state_types(model: Any, pairs: list[tuple[str, str]]) -> None:
    """Each fed-back output has its input's element type: a cast would wrap an int8 state
    (300 -> 44) or truncate a float one."""
    types = {o.name: o.type.tensor_type.elem_type for o in model.graph.output}
    ins = {i.name: i.type.tensor_type.elem_type for i in model.graph.input}
    helper = require("onnx.helper")
    for out, inp in pairs:
        if types.get(out) and ins.get(inp) and types[out] != ins[inp]:
            name = [np.dtype(helper.tensor_dtype_to_np_dtype(types[out])).name,
                    np.dtype(helper.tensor_dtype_to_np_dtype(ins[inp])).name]
            raise ModelError(f"--feedback {out}={inp}: output {out!r} is {name[0]}, input "
                             f"{inp!r} is {name[1]}; a state keeps its type (a cast would "
                             f"wrap or truncate it): feed an output of the input's type")


def split_steps(model: Any, feeds: Mapping[str, np.ndarray], pairs: list[tuple[str, str]],
                dim: int = 1) -> tuple[list[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """(per-step feeds without the states, the states' first values) from ``feeds`` laid out
    as the module doc says; dtypes cast to the graph's."""
    expected = {n: (dt, dims) for n, dt, dims in graph_inputs(model)}
    states = {i for _, i in pairs}
    missing = [n for n in expected if n not in feeds and n not in states]
    extra = [n for n in feeds if n not in expected]
    if missing or extra:
        raise ModelError(f"inputs do not match the model: missing {missing}, unknown {extra}; "
                         f"the model's inputs are {list(expected)} (states may be left out)")
    per_step: dict[str, np.ndarray] = {}
    fixed: dict[str, np.ndarray] = {}
    initial: dict[str, np.ndarray] = {}
    left_out = [(n, dt, dims) for n, (dt, dims) in expected.items() if n not in feeds]
    size, worst = generated_bytes(left_out, dim)
    if size > MAX_INPUT_BYTES:
        raise ModelError(f"--dim {dim}: the states left out of the inputs would take "
                         f"{size / 2**30:.3g} GiB (state {worst!r}); the most is "
                         f"{MAX_INPUT_BYTES / 2**30:.3g} GiB: give a smaller --dim or the "
                         f"state in the inputs")
    for name, (dtype, dims) in expected.items():
        if name not in feeds:
            shape = tuple(d if isinstance(d, int) and d > 0 else dim for d in dims)
            initial[name] = np.zeros(shape, dtype)
            continue
        raw = np.asarray(feeds[name])
        a = check_feed(name, raw, dtype, [0, *dims] if raw.ndim == len(dims) + 1 else dims)
        if a.ndim == len(dims) + 1:
            (initial if name in states else per_step)[name] = a[0] if name in states else a
        elif a.ndim == len(dims):
            (initial if name in states else fixed)[name] = a
        else:
            raise ModelError(f"input {name!r} has shape {a.shape}; the model wants rank "
                             f"{len(dims)} (fed every step) or {len(dims) + 1} (a leading step "
                             f"axis)")
    if not per_step:
        raise ModelError("--feedback needs inputs with a leading step axis (an array of rank "
                         "one more than its graph input); none of the inputs has one")
    counts = {n: a.shape[0] for n, a in per_step.items()}
    if len(set(counts.values())) != 1:
        raise ModelError(f"the per-step inputs disagree on the number of steps: {counts}")
    steps = next(iter(counts.values()))
    if steps < 1:
        raise ModelError("the inputs hold 0 steps")
    out = []
    for s in range(steps):
        f = {n: np.ascontiguousarray(a) for n, a in fixed.items()}
        f.update({n: np.ascontiguousarray(a[s]) for n, a in per_step.items()})
        out.append(f)
    return out, {n: np.ascontiguousarray(a) for n, a in initial.items()}


def _stack(per_step: list[list[np.ndarray]]) -> list[np.ndarray]:
    """Each output over the steps: stacked on a new leading axis where every step has the same
    shape, else each step's values flattened and joined."""
    out = []
    for k in range(len(per_step[0])):
        arrays = [np.asarray(p[k]) for p in per_step]
        if all(a.shape == arrays[0].shape for a in arrays):
            out.append(np.stack(arrays))
        else:
            out.append(np.concatenate([a.ravel() for a in arrays]))
    return out


@dataclass
class FedBackCase(ModelCase):
    """A :class:`ModelCase` run over steps with ``pairs`` (output, input) fed back.

    ``steps``: per step, the feeds other than the states; ``initial``: the states' first
    values. :meth:`run` returns each output stacked over the steps (module doc)."""

    steps: list[dict[str, np.ndarray]] = field(default_factory=list)
    initial: dict[str, np.ndarray] = field(default_factory=dict)
    pairs: list[tuple[str, str]] = field(default_factory=list)
    per_step_reference: list[list[np.ndarray]] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()  # its float run (run() below) keeps the per-step reference
        if not self.per_step_reference:
            self.per_step_reference = self._steps_of(self.runner.run, None)

    def _steps_of(self, run, replace) -> list[list[np.ndarray]]:
        names = self.runner.output_names
        index = {o: names.index(o) for o, _ in self.pairs}
        types = {n: dt for n, dt, _ in graph_inputs(self.model)}
        state = dict(self.initial)
        per = []
        for s, feeds in enumerate(self.steps):
            f = dict(feeds)
            f.update(state)
            outs = run(f, replace)
            per.append(outs)
            for o, i in self.pairs:
                v = np.asarray(outs[index[o]])
                if s + 1 < len(self.steps) and v.shape != np.shape(state[i]):
                    raise ModelError(f"--feedback {o}={i}: step {s}'s {o} has shape {v.shape}; "
                                     f"{i} has shape {np.shape(state[i])}")
                state[i] = np.ascontiguousarray(v.astype(types[i], copy=False))
        return per

    def run_steps(self, replace: Mapping[str, np.ndarray] | None = None
                  ) -> list[list[np.ndarray]]:
        """Per step, the outputs with ``replace``'s weights, each model feeding its own state."""
        return self._steps_of(self.runner.run, replace)

    def run(self, replace: Mapping[str, np.ndarray] | None = None) -> list[np.ndarray]:
        per = self.run_steps(replace)
        if replace is None and not self.per_step_reference:
            self.per_step_reference = per
        return _stack(per)

    def run_alone(self, tensor: str, value: np.ndarray) -> list[np.ndarray]:
        return self.run({tensor: value})

    def run_model(self, model: Any, deployed: bool = False) -> list[np.ndarray]:
        """Another model with the same inputs and outputs (an export) run over the steps,
        feeding its own state; outputs in :attr:`runner`'s output order. ``deployed``: in the
        session users run (:func:`qcore.model.deployed.deployed_session`), else in the
        unoptimized one the measurements use."""
        if deployed:
            from .deployed import deployed_session

            session = deployed_session(model, self.threads)
        else:
            from .graph import make_session

            session = make_session(model, self.threads)
        names = self.runner.output_names
        return _stack(self._steps_of(lambda f, _r: session.run(names, f), None))

    def fidelity(self, replace: Mapping[str, np.ndarray] | None = None) -> dict[str, Any]:
        """:func:`compare` over all steps, with ``sqnr_db_per_step`` and ``max_abs_per_step``."""
        per = self.run_steps(replace)
        names = self.runner.output_names
        res: dict[str, Any] = compare(self.reference, _stack(per), self.kind, names,
                                      self.outputs)
        steps = [compare(ref, out, names=names, outputs=self.outputs)
                 for ref, out in zip(self.per_step_reference, per)]
        res["steps"] = len(per)
        res["sqnr_db_per_step"] = [float(s["output_sqnr_db"]) for s in steps]
        res["max_abs_per_step"] = [float(s["max_abs"]) for s in steps]
        return res


def load_fed_back_case(model: str | os.PathLike | Any, inputs: str | os.PathLike | Mapping,
                       feedback: str, *, kind: str | None = None, dim: int = 1,
                       tensors: list[str] | None = None, threads: int = 0,
                       outputs: list[str] | None = None) -> FedBackCase:
    """A :class:`FedBackCase` of a model path (or ``onnx.ModelProto``), an ``.npz`` path (or a
    dict) laid out with a step axis, and ``OUT=IN[,...]``; ``outputs``: the outputs the figure
    averages over (default all)."""
    if isinstance(model, (str, os.PathLike)):
        if str(model).lower() in MINILM_NAMES:
            raise ModelError("--feedback is for a model given by path (MiniLM has no state)")
        name, proto = os.path.basename(str(model)), load_model(model, weights_on_disk=True)
    else:
        name, proto = "model", model
    if inputs is None:
        raise ModelError("--feedback needs --inputs: an .npz whose per-step inputs have a "
                         "leading step axis")
    pairs = parse_feedback(feedback, proto)
    if isinstance(inputs, Mapping):
        feeds = dict(inputs)
    else:  # the header checks of --inputs (nothing inflates before it is known to fit)
        feeds = read_npz(inputs, graph_inputs(proto), steps=True,
                         optional=[i for _, i in pairs])
    steps, initial = split_steps(proto, feeds, pairs, dim)
    first = dict(steps[0])
    first.update(initial)
    return FedBackCase(name, proto, [first], kind or "generic", None, tensors, threads,
                       outputs, steps=steps, initial=initial, pairs=pairs)


def per_step_rows(measured: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``[{"step": i, "sqnr_db": ..., "max_abs": ...}, ...]`` of a fed-back measurement
    (:meth:`FedBackCase.fidelity`, or a plan JSON's ``measured``); empty when the measurement
    was not over steps. Non-finite SQNR (a step with no error) is kept as ``inf``."""
    sq = measured.get("sqnr_db_per_step") or []
    mx = measured.get("max_abs_per_step") or [math.nan] * len(sq)
    return [{"step": i, "sqnr_db": float(s) if s is not None else math.nan,
             "max_abs": float(m)} for i, (s, m) in enumerate(zip(sq, mx))]
