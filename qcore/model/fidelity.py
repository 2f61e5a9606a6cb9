"""Output fidelity: weights through QuantizeLinear → DequantizeLinear, the model run, compared.

:func:`qdq` applies a report recipe (:mod:`qcore.recipes`: its grammar, its choice of
scales, its opset and zero-point rules) to one weight and keeps everything the export needs.
:class:`ModelCase` is a model with its inputs and float outputs; :meth:`ModelCase.fidelity`
runs it with some weights replaced and measures (docs/semantics.md, Definitions), in float64:

- ``output_sqnr_db`` = −10·log10(mean_o r_o), r_o = Σ (y_o − ŷ_o)² / Σ y_o² per output o, over
  the chosen outputs (all by default; :func:`compare`); ``max_abs`` = max |y − ŷ|; ``outputs``:
  each output's ``sqnr_db`` and ``max_abs`` by name;
- embeddings (MiniLM): ``cosine_mean`` / ``cosine_min`` of each row with its float self, and
  ``spearman``: the rank correlation of all pairwise cosine similarities between rows (float
  vs quantized) — a task-free measure of whether the model still orders its inputs the same;
- logits (the last axis of each output): ``kl`` = mean KL(softmax(y) ‖ softmax(ŷ)) and
  ``top1`` = the fraction of rows whose argmax is unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import metrics
from ..calibration import choose_params
from ..formats import get_format
from ..fullrange import FULLRANGE_METHODS, FULLRANGE_MSE, fullrange_params, positive_view
from ..io.onnx import Role
from ..metrics import error_metrics
from ..ops import dequantize_linear, quantize_linear
from ..recipes import (
    Recipe,
    asks_zero_point,
    parse_recipe,
    required_opset,
    stores_zero_point,
    weight_layout,
)
from .graph import Runner

__all__ = ["FLOAT", "ModelCase", "Quantized", "agreement", "apply_recipe", "compare",
           "is_decision", "qdq", "recipe_weights",
           "spearman", "weight_layout"]

#: The plan's name for a weight left in float32.
FLOAT = "float32"


@dataclass
class Quantized:
    """One weight through one recipe: codes, scale, zero point, attributes and the round trip."""

    recipe: str
    y: np.ndarray  # codes, an ml_dtypes / numpy array of the target type
    scale: np.ndarray
    zero_point: np.ndarray | None  # stored in the graph (see recipes.stores_zero_point)
    axis: int
    block_size: int
    granularity: str
    opset: int  # the oldest opset whose Q and DQ express it
    x_hat: np.ndarray  # DequantizeLinear(QuantizeLinear(x)), float32
    tensor_sqnr_db: float
    bits: int  # codes + scales + stored zero points, in bits (docs/semantics.md, Definitions)
    elements: int
    view: tuple[int, ...] | None = None  # the 2-D shape quantized (a Conv kernel's [O, I·k])

    @property
    def bits_per_element(self) -> float:
        return self.bits / self.elements if self.elements else math.nan


def qdq(x: np.ndarray, recipe: Recipe | str, role: Role | None = None) -> Quantized:
    """Quantize and dequantize ``x`` by a report recipe (the same scales, opset and stored zero
    point as :func:`qcore.report.sliced.run_recipe`) laid out by the weight's ``role``
    (:func:`weight_layout`; None: the (out, in) convention). A float16 / bfloat16 weight is
    quantized as its exact float32 value; ``x_hat`` is float32 (the model's run casts it back
    to the weight's type, as the export's Cast after DequantizeLinear does)."""
    r = parse_recipe(recipe) if isinstance(recipe, str) else recipe
    x = np.ascontiguousarray(np.asarray(x).astype(np.float32))
    gran, axis, block, view = weight_layout(r, tuple(x.shape), role)
    shape = tuple(x.shape)
    if view is not None:
        x = x.reshape(view)
    if r.method in FULLRANGE_METHODS:  # signed scales (qcore.fullrange)
        params = fullrange_params(x, r.target, gran, axis, block or 32,
                                  r.method == FULLRANGE_MSE)
    else:
        params = choose_params(x, r.target, method=r.method, granularity=gran, axis=axis,
                               block_size=block or 32)
    fmt = params.format
    sshape = tuple(np.shape(params.scale))
    kw = params.kwargs
    opset = required_opset(fmt.name, params.scale_format.name, tuple(x.shape), sshape,
                           asks_zero_point(params), kw["axis"], kw["block_size"])
    stored = stores_zero_point(params, opset)
    zp = None
    if stored:
        zp = params.zero_point if params.zero_point is not None else np.zeros(sshape, fmt.dtype)
        zp = np.asarray(zp, fmt.dtype)
    xs, run, sign = positive_view(x, params, opset)  # @fullrange: signed scales
    y = quantize_linear(xs, run.scale, zp, output_dtype=None if opset < 21 else fmt.name,
                        opset=opset, **kw)
    x_hat = dequantize_linear(y, run.scale, zp, opset=opset, **kw)
    if sign is not None:
        x_hat = np.asarray(x_hat, np.float32) * sign
    m = error_metrics(x, x_hat)
    n_scales = int(np.asarray(params.scale).size)
    bits = metrics.stored_bits(x.size, fmt.bits, n_scales, params.scale_format.bits, stored)
    return Quantized(r.name, np.asarray(y), np.asarray(params.scale), zp, int(kw["axis"]),
                     int(kw["block_size"]), gran, int(opset),
                     np.ascontiguousarray(np.asarray(x_hat).reshape(shape), np.float32),
                     float(m["sqnr_db"]), int(bits), int(x.size), view)


def float_bits(x: np.ndarray) -> int:
    """Stored bits of a weight left in float (docs/semantics.md, Definitions: float32 counts 32 per element)."""
    return int(x.size) * get_format(np.asarray(x).dtype).bits


# ---------------------------------------------------------------------------------------------
# measures


def _rank(a: np.ndarray) -> np.ndarray:
    """Ranks with ties averaged (what Spearman's coefficient needs)."""
    order = np.argsort(a, kind="stable")
    s = a[order]
    ranks = np.empty(a.size, np.float64)
    ranks[order] = np.arange(a.size, dtype=np.float64)
    edges = np.flatnonzero(np.diff(s) != 0) + 1
    starts = np.concatenate([[0], edges])
    ends = np.concatenate([edges, [a.size]])
    avg = (starts + ends - 1) / 2.0
    ranks[order] = np.repeat(avg, ends - starts)
    return ranks


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation of two equal-length vectors (ties averaged)."""
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    if a.size < 2:
        return math.nan
    ra, rb = _rank(a) - (a.size - 1) / 2.0, _rank(b) - (b.size - 1) / 2.0
    den = math.sqrt(float(ra @ ra) * float(rb @ rb))
    return float(ra @ rb) / den if den else math.nan


def _sqnr(signal: float, noise: float) -> float:
    return math.inf if noise == 0 else (10 * math.log10(signal / noise) if signal else -math.inf)


def _cosines(e: np.ndarray) -> np.ndarray:
    n = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-300)
    return n @ n.T


def is_decision(y: Any) -> bool:
    """An integer or boolean output: a decision (a class index, a mask), compared by agreement,
    never by SQNR (DESIGN.md §10)."""
    return np.asarray(y).dtype.kind in "iub"


def agreement(y: Any, yh: Any) -> float:
    """The share of equal elements of two decision outputs (0 where the shapes differ; 1 for
    two empty ones)."""
    a, b = np.asarray(y), np.asarray(yh)
    if a.shape != b.shape:
        return 0.0
    return float(np.mean(a == b)) if a.size else 1.0


def compare(ref: list[np.ndarray], out: list[np.ndarray], kind: str = "generic",
            names: list[str] | None = None, outputs: list[str] | None = None,
            views: Any = None) -> dict[str, Any]:
    """Measures of ``out`` against ``ref`` (module doc); ``kind``: generic, embedding, logits;
    ``names``: the outputs' names (default ``output0``, ...); ``outputs``: the outputs the model
    figure averages over (default all).

    Per float output o: r_o = Σ (y_o − ŷ_o)² / Σ y_o², its SQNR −10·log10(r_o) and max |Δ|;
    per integer or boolean output (a decision): ``agreement``, the share of equal elements,
    never an SQNR and never in the model figure (``agreement`` at the top: the least over the
    chosen decisions; with decisions only, the figure is NaN and ``noise_power`` the share that
    changed, which plans minimise). The model
    figure ``output_sqnr_db`` = −10·log10(mean_o r_o) over the chosen float outputs, so no output
    dominates by its scale; with one output it is 10·log10(Σ y² / Σ (y − ŷ)²). An output with
    Σ y² = 0 has no ratio: it is left out of the mean (listed in ``silent_outputs``); when
    every chosen output is silent the figure is inf if nothing changed, else -inf.
    ``noise_power`` = mean_o r_o × ``signal_power`` (Σ y² over the chosen outputs): additive
    over tensors as r_o is, and equal to Σ (y − ŷ)² with one output.

    ``views`` (:class:`qcore.model.views.Views`): each ``--slice`` measured as an output of its
    own (in the figure only where ``outputs`` names it) and the user's ``metric`` of the
    model's own outputs."""
    names = list(names) if names is not None else [f"output{i}" for i in range(len(ref))]
    chosen = list(names) if not outputs else list(outputs)
    metric = None
    if views is not None:
        if views.metric is not None and len(ref):
            metric = views.score(ref, out)
        names, ref, out = views.extend(names, ref, out)
    unknown = [o for o in chosen if o not in names]
    if unknown:
        from .graph import ModelError

        raise ModelError(f"outputs {unknown} are not outputs of the model; its outputs: "
                         + ", ".join(names))
    per: dict[str, dict[str, float]] = {}
    sig = max_abs = 0.0
    ratios, silent, silent_noise = [], [], 0.0
    decisions: list[float] = []
    for name, y, yh in zip(names, ref, out):
        if is_decision(y):  # integer / boolean: a decision, compared by agreement
            per[name] = {"agreement": agreement(y, yh)}
            if name in chosen:
                decisions.append(per[name]["agreement"])
            continue
        y64, yh64 = np.asarray(y, np.float64), np.asarray(yh, np.float64)
        d = y64 - yh64
        s_o, e_o = float(np.sum(y64 * y64)), float(np.sum(d * d))
        m_o = float(np.max(np.abs(d))) if d.size else 0.0
        per[name] = {"sqnr_db": _sqnr(s_o, e_o), "max_abs": m_o}
        if name not in chosen:
            continue
        sig += s_o
        max_abs = max(max_abs, m_o)
        if s_o > 0:
            ratios.append(e_o / s_o)
        else:
            silent.append(name)
            silent_noise += e_o
    if ratios:
        mean_r = sum(ratios) / len(ratios)
        sqnr = math.inf if mean_r == 0 else -10 * math.log10(mean_r)
        err = mean_r * sig
    elif silent:
        sqnr = math.inf if silent_noise == 0 else -math.inf
        err = silent_noise
    elif decisions:  # decisions only: no SQNR; the plan minimises the share that changed
        sqnr, sig = math.nan, 1.0
        err = 1.0 - sum(decisions) / len(decisions)
    else:
        sqnr, err = math.inf, 0.0
    res: dict[str, Any] = {"output_sqnr_db": sqnr, "max_abs": max_abs, "noise_power": err,
                           "signal_power": sig, "outputs": per}
    if silent:
        res["silent_outputs"] = silent
    if decisions:
        res["agreement"] = min(decisions)
    if metric is not None:
        res["metric"] = metric
    if kind == "embedding":
        y = np.asarray(ref[0], np.float64).reshape(len(ref[0]), -1)
        yh = np.asarray(out[0], np.float64).reshape(len(out[0]), -1)
        cos = np.sum(y * yh, axis=1) / np.maximum(
            np.linalg.norm(y, axis=1) * np.linalg.norm(yh, axis=1), 1e-300)
        iu = np.triu_indices(len(y), 1)
        res.update(cosine_mean=float(cos.mean()), cosine_min=float(cos.min()),
                   spearman=spearman(_cosines(y)[iu], _cosines(yh)[iu]))
    elif kind == "logits":
        kls, agree, rows = 0.0, 0, 0
        for y, yh in ((y, yh) for y, yh in zip(ref, out) if not is_decision(y)):
            a = np.asarray(y, np.float64).reshape(-1, np.shape(y)[-1])
            b = np.asarray(yh, np.float64).reshape(-1, np.shape(yh)[-1])
            la = a - a.max(axis=1, keepdims=True)
            la -= np.log(np.exp(la).sum(axis=1, keepdims=True))
            lb = b - b.max(axis=1, keepdims=True)
            lb -= np.log(np.exp(lb).sum(axis=1, keepdims=True))
            kls += float(np.sum(np.exp(la) * (la - lb)))
            agree += int(np.sum(a.argmax(axis=1) == b.argmax(axis=1)))
            rows += a.shape[0]
        res.update(kl=kls / max(rows, 1), top1=agree / max(rows, 1))
    return res


# ---------------------------------------------------------------------------------------------
# a model with its inputs


@dataclass
class ModelCase:
    """A model, the batches it runs on and its float outputs.

    ``order``: row j of the concatenated outputs is input ``order[j]`` (batches sorted by
    length); None when the inputs are one batch. ``kind``: generic, embedding or logits.
    """

    name: str
    model: Any
    batches: list[dict[str, np.ndarray]]
    kind: str = "generic"
    order: np.ndarray | None = None
    weights: list[str] | None = None
    threads: int = 0
    outputs: list[str] | None = None  # the outputs the model figure averages over (None: all)
    views: Any = None  # --slice and --metric (qcore.model.views.Views), or None
    runner: Runner = field(init=False)
    reference: list[np.ndarray] = field(init=False)
    prefix: Any = field(init=False, default=None)  # a PrefixCache, made on first use

    def __post_init__(self) -> None:
        self.runner = Runner(self.model, self.weights, self.threads)
        self.weights = self.runner.names
        if self.outputs:  # names known (a --slice's name is an output's)
            compare([], [], names=self.runner.output_names
                    + (self.views.names if self.views is not None else []),
                    outputs=self.outputs)
        self.reference = self.run()
        if self.views is not None and not self.views.checked:
            self.views.check(self.runner.output_names, self.reference)

    @property
    def roles(self) -> dict[str, Role]:
        """Each weight's role in the graph (:mod:`qcore.io.onnx`), by key."""
        return {k: r.role for k, r in self.runner.records.items()}

    def quantize(self, tensor: str, recipe: Recipe | str) -> Quantized:
        """:func:`qdq` of one weight laid out by its role."""
        return qdq(self.arrays[tensor], recipe, self.runner.records[tensor].role)

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        """The float weights, by name."""
        return self.runner.weights

    def run(self, replace: Mapping[str, np.ndarray] | None = None) -> list[np.ndarray]:
        """The outputs over all batches (concatenated along axis 0, in input order)."""
        return self._combine([self.runner.run(b, replace) for b in self.batches])

    def run_alone(self, tensor: str, value: np.ndarray) -> list[np.ndarray]:
        """:meth:`run` with one weight replaced, recomputing only what depends on it where the
        graph allows (:class:`qcore.model.graph.PrefixCache`)."""
        if self.prefix is None:
            from .graph import PrefixCache

            self.prefix = PrefixCache(self.runner, self.batches)
        if self.prefix.supports(tensor):
            return self._combine(self.prefix.run(tensor, value))
        return self.run({tensor: value})

    def _combine(self, per: list[list[np.ndarray]]) -> list[np.ndarray]:
        if len(per) == 1:
            outs = per[0]
        else:
            outs = [np.concatenate([p[k] for p in per]) for k in range(len(per[0]))]
        if self.order is not None:
            restored = []
            for o in outs:
                r = np.empty_like(o)
                r[self.order] = o
                restored.append(r)
            outs = restored
        return outs

    def fidelity(self, replace: Mapping[str, np.ndarray] | None = None) -> dict[str, float]:
        """:func:`compare` of the outputs with ``replace``'s weights against the float ones."""
        if replace is not None and len(replace) == 1:
            ((tensor, value),) = replace.items()
            return compare(self.reference, self.run_alone(tensor, value), self.kind,
                           self.runner.output_names, self.outputs, self.views)
        return compare(self.reference, self.run(replace), self.kind, self.runner.output_names,
                       self.outputs, self.views)


def apply_recipe(case: ModelCase, recipe: Recipe | str, tensors: list[str] | str | None = None
                 ) -> dict[str, float]:
    """The fidelity of one recipe on all weights (``tensors`` None), on one tensor (a name) or
    on some (a list); weights the recipe cannot express stay float."""
    names = case.weights if tensors is None else ([tensors] if isinstance(tensors, str)
                                                  else list(tensors))
    return case.fidelity(recipe_weights(case, recipe, names))


def recipe_weights(case: ModelCase, recipe: Recipe | str,
                   tensors: Sequence[str]) -> dict[str, np.ndarray]:
    """x̂ of each of ``tensors`` under ``recipe`` (the replacements :meth:`ModelCase.fidelity`
    takes); a weight the recipe cannot express (ValueError) is left out, so it stays float."""
    replace = {}
    for t in tensors:
        try:
            replace[t] = case.quantize(t, recipe).x_hat
        except ValueError:
            continue
    return replace
