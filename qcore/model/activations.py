"""The activation study: one activation mode on a case, from its parts.

:func:`study` ties the parts together: SmoothQuant (:mod:`qcore.model.smooth`), the sites and
their specs (:mod:`qcore.model.sites`), calibration (:mod:`qcore.model.calibrate`), the staged
runner that measures each site alone and all together (:mod:`qcore.model.staged`). The Q/DQ
model a plan exports is written by :mod:`qcore.model.qdq`. Here also: the per-site sensitivity
rows (:func:`activation_rows`) and how a plan keeps the most sensitive sites in float
(:func:`keep_float`, :func:`attach_activations`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import QuantizationError
from ..formats import get_format
from .calibrate import specs_for
from .fidelity import _sqnr as sqnr_db
from .sites import ActivationConfig, ActivationSpec, parse_activations, site_label
from .smooth import Smoothing, smoothed_case
from .staged import evaluate, fake_quant, runner_for

__all__ = ["Study", "activation_rows", "attach_activations", "calibration_case", "keep_float",
           "study"]


def keep_float(rows: Sequence[Mapping[str, Any]], k: int) -> list[str]:
    """The ``k`` activation sites whose rows have the lowest output SQNR (most sensitive)."""
    if k < 0:
        raise QuantizationError(f"--float-activations {k}: give a count >= 0")
    act = [r for r in rows if r.get("kind") == "activation"]
    act.sort(key=lambda r: r["output_sqnr_db"])
    return [r["tensor"] for r in act[:k]]


def attach_activations(plan: Any, specs: Sequence[ActivationSpec],
                       rows: Sequence[Mapping[str, Any]], k: int, mode: str) -> None:
    """Put the activation ``specs`` on ``plan``, the ``k`` most sensitive sites
    (:func:`keep_float`) left in float; the quantized sites' noise powers (each measured alone,
    ``rows``) join the plan's additive prediction. No specs: the plan is left as it is."""
    if not specs:
        return
    keep = keep_float(rows, k)
    plan.activations = [s for s in specs if s.site not in keep]
    plan.float_activations = keep
    plan.activation_mode = mode
    plan.noise_predicted += sum(float(r["noise_power"]) for r in rows
                                if r["tensor"] not in keep)


def _sqnr(x: list[np.ndarray], xh: list[np.ndarray]) -> float:
    sig = sum(float(np.sum(np.asarray(a, np.float64) ** 2)) for a in x)
    err = sum(float(np.sum((np.asarray(a, np.float64) - b) ** 2)) for a, b in zip(x, xh))
    return sqnr_db(sig, err)


def activation_rows(case: Any, specs: Sequence[ActivationSpec],
                    progress: Callable[[int, int, str], None] | None = None,
                    recipe: str | None = None) -> list[dict]:
    """One sensitivity row per spec: that site alone quantized (weights float); ``kind``
    ``"activation"``, ``tensor`` the site, ``recipe`` the activation mode's name,
    ``consumers`` the weights of the nodes that read it and ``label`` those as
    :func:`site_label` writes them (neither a CSV column)."""
    run = runner_for(case)
    rows = []
    for i, sp in enumerate(specs):
        if progress:
            progress(i, len(specs), sp.site)
        from .fidelity import compare

        fid = compare(case.reference, run.run([sp]), case.kind, case.runner.output_names,
                      getattr(case, "outputs", None), getattr(case, "views", None))
        x = run.site_values(sp.site)
        xh = [fake_quant(v, sp) for v in x]
        n = int(sum(v.size for v in x))
        bits = get_format(sp.dtype).bits
        name = recipe or (sp.mode if sp.mode == "dynamic" else f"static:{sp.dtype}@{sp.method}")
        weights = [c[3] for c in run.site(sp.site).consumers]
        rows.append({"kind": "activation", "tensor": sp.site, "recipe": name,
                     "consumers": ", ".join(weights), "label": site_label(weights),
                     "bits_per_element": float(bits), "tensor_sqnr_db": _sqnr(x, xh),
                     "output_sqnr_db": fid["output_sqnr_db"], "max_abs": fid["max_abs"],
                     "bits": bits * n, "elements": n, "noise_power": fid["noise_power"],
                     "opset": sp.opset, "cosine_mean": fid.get("cosine_mean", math.nan),
                     "spearman": fid.get("spearman", math.nan), "kl": fid.get("kl", math.nan),
                     "top1": fid.get("top1", math.nan)})
    if progress:
        progress(len(specs), len(specs), "done")
    return rows


def calibration_case(case: Any, path: Any) -> Any:
    """A :class:`~qcore.model.fidelity.ModelCase` of ``case``'s model on the inputs of the
    ``.npz`` at ``path`` (``--calibrate``): the static scales' calibration set."""
    from .fidelity import ModelCase
    from .graph import check_inputs, read_inputs

    feeds = check_inputs(case.model, path) if isinstance(path, Mapping) else \
        read_inputs(path, case.model, "--calibrate")
    return ModelCase(case.name + ".calibration", case.model, [feeds], case.kind, None,
                     case.weights, case.threads, case.outputs, getattr(case, "views", None))


@dataclass
class Study:
    """What a page or the command line shows for one activation mode (:func:`study`):
    the case measured (the smoothed one with ``alpha``), the specs, one sensitivity row per
    site, the fidelity with every site quantized and weights float, and with ``recipe`` on
    every weight too (None without a recipe)."""

    config: ActivationConfig
    case: Any
    specs: list[ActivationSpec]
    rows: list[dict]
    activations_only: dict[str, Any]
    with_weights: dict[str, Any] | None
    smoothing: Smoothing | None = None


def study(case: Any, activations: str | ActivationConfig, *, recipe: str | None = None,
          alpha: float | None = None, calibration: Any = None,
          progress: Callable[[int, int, str], None] | None = None) -> Study:
    """One activation mode on a case: smoothing (``alpha``), calibration (``calibration``: a
    case of the same model on other inputs, :func:`calibration_case`; default the case),
    per-site sensitivity, and the fidelity of all sites quantized (with ``recipe`` on every
    weight too, where given)."""
    config = parse_activations(activations) if isinstance(activations, str) else activations
    smoothing = None
    if alpha is not None:
        case, smoothing = smoothed_case(case, alpha, calibration)
        if calibration is not None:
            calibration = calibration_case(case, calibration.batches[0])
    if config.mode == "none":
        return Study(config, case, [], [], {}, None, smoothing)
    specs = specs_for(case, config, calibration=calibration)
    rows = activation_rows(case, specs, progress, config.name)
    alone = evaluate(case, specs)
    both = None
    if recipe is not None:
        from .fidelity import recipe_weights

        both = evaluate(case, specs, recipe_weights(case, recipe, case.weights))
    return Study(config, case, specs, rows, alone, both, smoothing)
