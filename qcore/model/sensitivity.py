"""Sensitivity: each weight tensor × each recipe quantized alone, and each recipe on every weight.

A row says what one recipe does to one tensor (its bits and its own SQNR) and what the model
feels (the output SQNR with that tensor alone replaced by its round trip). Rows with
``tensor == "*"`` are one recipe on every weight at once. :func:`correlation` answers "does a
tensor's own SQNR predict the model's drift?" over the single-tensor rows.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..recipes import parse_recipes
from .fidelity import ModelCase, compare, float_bits, spearman

__all__ = ["COLUMNS", "Sensitivity", "correlation", "measure", "sensitivity_of", "tensor_rows",
           "uniform", "write_csv", "write_table"]

#: The table's columns (the CLI's contract is the first five). ``kind`` is ``weight`` for a
#: weight's row (and the ``*`` rows) and ``activation`` for an activation site's row
#: (:func:`qcore.model.activations.activation_rows`).
COLUMNS = ("tensor", "recipe", "bits_per_element", "tensor_sqnr_db", "output_sqnr_db",
           "max_abs", "bits", "elements", "noise_power", "opset", "cosine_mean", "spearman",
           "kl", "top1", "agreement", "axis", "view", "kind")

Progress = Callable[[int, int, str], None]


@dataclass
class Sensitivity:
    """The single-tensor rows of a model and what the plan needs from them."""

    tensors: list[str]
    recipes: list[str]
    elements: dict[str, int]
    float_bits: dict[str, int]
    rows: list[dict]
    signal_power: float
    #: The runtime the rows are filtered for (:func:`qcore.model.runtime.filter_sensitivity`).
    runtime: str = "reference"

    def row(self, tensor: str, recipe: str) -> dict | None:
        for r in self.rows:
            if r["tensor"] == tensor and r["recipe"] == recipe:
                return r
        return None


def _row(tensor: str, q, fid: dict) -> dict:
    return {"kind": "weight", "tensor": tensor, "recipe": q.recipe, "bits_per_element": q.bits_per_element,
            "tensor_sqnr_db": q.tensor_sqnr_db, "output_sqnr_db": fid["output_sqnr_db"],
            "max_abs": fid["max_abs"], "bits": q.bits, "elements": q.elements,
            "noise_power": fid["noise_power"], "opset": q.opset,
            "cosine_mean": fid.get("cosine_mean", math.nan),
            "spearman": fid.get("spearman", math.nan), "kl": fid.get("kl", math.nan),
            "top1": fid.get("top1", math.nan), "agreement": fid.get("agreement", math.nan),
            "axis": q.axis if q.granularity != "per-tensor" else -1,
            "view": "x".join(map(str, q.view)) if q.view else "", **_per_output(fid)}


def _per_output(fid: dict) -> dict:
    """``sqnr_db[NAME]`` and ``max_abs[NAME]`` of each float output, ``agreement[NAME]`` of
    each integer or boolean one (a decision: docs/model.md); ``metric``: the user's
    ``--metric`` (:mod:`qcore.model.views`)."""
    out = {"metric": fid["metric"]} if "metric" in fid else {}
    for name, m in fid.get("outputs", {}).items():
        if "agreement" in m:
            out[f"agreement[{name}]"] = m["agreement"]
            continue
        out[f"sqnr_db[{name}]"] = m["sqnr_db"]
        out[f"max_abs[{name}]"] = m["max_abs"]
    return out


def measure(case: ModelCase, recipes: Sequence[str] | str, tensors: Sequence[str] | None = None,
            progress: Progress | None = None,
            allowed: Callable[[str, str], bool] | None = None) -> Sensitivity:
    """Every tensor × every recipe alone: one model run each (a recipe that cannot express a
    tensor is left out for it). ``allowed(tensor, recipe)``: only those pairs are measured
    (what the export's runtime runs); the progress counts the pairs measured."""
    names = [r.name for r in parse_recipes(recipes)]
    chosen = list(case.weights if tensors is None else tensors)
    unknown = [t for t in chosen if t not in case.arrays]
    if unknown:
        from .graph import ModelError
        raise ModelError(f"tensors {unknown} are not weights of the model; its weights: "
                         + ", ".join(case.weights))
    rows = []
    pairs = [(t, r) for t in chosen for r in names if allowed is None or allowed(t, r)]
    total, done = len(pairs), 0
    for t, r in pairs:
        if progress:
            progress(done, total, f"{t} × {r}")
        rows.extend(tensor_rows(case, t, [r]))
        done += 1
    if progress:
        progress(total, total, "done")
    return sensitivity_of(case, chosen, names, rows)


def tensor_rows(case: ModelCase, tensor: str, recipes: Sequence[str]) -> list[dict]:
    """The rows of one tensor × ``recipes`` (one model run each; a recipe that cannot express
    the tensor gives no row). The in-process run and the Dask workers
    (:mod:`qcore.model.distributed`) call this very function, so their rows are the same."""
    rows = []
    for r in recipes:
        try:
            q = case.quantize(tensor, r)
        except ValueError:
            continue
        rows.append(_row(tensor, q, case.fidelity({tensor: q.x_hat})))
    return rows


def sensitivity_of(case: ModelCase, tensors: list[str], recipes: list[str],
                   rows: list[dict]) -> Sensitivity:
    """:class:`Sensitivity` of measured ``rows`` (the plan's inputs: elements, float bits and
    the power of the outputs the figure averages)."""
    # Σ y² over the outputs the figure averages: noise_power is mean_o r_o times this
    signal = compare(case.reference, case.reference, names=case.runner.output_names,
                     outputs=case.outputs, views=getattr(case, "views", None))["signal_power"]
    return Sensitivity(tensors, recipes, {t: int(case.arrays[t].size) for t in tensors},
                       {t: float_bits(case.arrays[t]) for t in tensors}, rows, signal)


def uniform(case: ModelCase, recipes: Sequence[str] | str,
            tensors: Sequence[str] | None = None,
            progress: Progress | None = None) -> list[dict]:
    """One row per recipe with ``tensor == "*"``: that recipe on every weight (those it cannot
    express stay float and count 32 bits)."""
    names = [r.name for r in parse_recipes(recipes)]
    chosen = list(case.weights if tensors is None else tensors)
    out = []
    for i, r in enumerate(names):
        if progress:
            progress(i, len(names), f"* × {r}")
        replace, bits, n, noise_t = {}, 0, 0, []
        for t in chosen:
            x = case.arrays[t]
            n += x.size
            try:
                q = case.quantize(t, r)
            except ValueError:
                bits += float_bits(x)
                continue
            replace[t] = q.x_hat
            bits += q.bits
            sig = float(np.sum(x.astype(np.float64) ** 2))
            noise_t.append(sig * 10 ** (-q.tensor_sqnr_db / 10) if math.isfinite(
                q.tensor_sqnr_db) else 0.0)
        fid = case.fidelity(replace)
        tensor_sqnr = (10 * math.log10(sum(float(np.sum(case.arrays[t].astype(np.float64) ** 2))
                                           for t in chosen) / sum(noise_t))
                       if sum(noise_t) > 0 else math.inf)
        out.append({"kind": "weight", "tensor": "*", "recipe": r, "bits_per_element": bits / n,
                    "tensor_sqnr_db": tensor_sqnr, "output_sqnr_db": fid["output_sqnr_db"],
                    "max_abs": fid["max_abs"], "bits": bits, "elements": n,
                    "noise_power": fid["noise_power"], "opset": "",
                    "cosine_mean": fid.get("cosine_mean", math.nan),
                    "spearman": fid.get("spearman", math.nan), "kl": fid.get("kl", math.nan),
                    "top1": fid.get("top1", math.nan),
                    "agreement": fid.get("agreement", math.nan), "axis": "", "view": "",
                    **_per_output(fid)})
    if progress:
        progress(len(names), len(names), "done")
    return out


def correlation(rows: Sequence[dict]) -> dict[str, float]:
    """Pearson and Spearman correlation of tensor SQNR with output SQNR over the single-tensor
    rows whose both values are finite, and how many rows that is."""
    pairs = np.array([(r["tensor_sqnr_db"], r["output_sqnr_db"]) for r in rows
                      if r["tensor"] != "*" and r.get("kind", "weight") == "weight"
                      and math.isfinite(r["tensor_sqnr_db"])
                      and math.isfinite(r["output_sqnr_db"])], np.float64).reshape(-1, 2)
    if len(pairs) < 3:
        return {"pearson": math.nan, "spearman": math.nan, "n": len(pairs)}
    return {"pearson": float(np.corrcoef(pairs[:, 0], pairs[:, 1])[0, 1]),
            "spearman": spearman(pairs[:, 0], pairs[:, 1]), "n": len(pairs)}


def write_table(rows: Sequence[dict], path: str | os.PathLike) -> None:
    """The rows as ``.parquet`` (pyarrow; NaN as null, opset null on ``*`` rows) or, for any
    other name, CSV (:func:`write_csv`)."""
    if str(path).lower().endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        types = {"tensor": pa.string(), "recipe": pa.string(), "kind": pa.string(),
                 "bits": pa.int64(),
                 "elements": pa.int64(), "opset": pa.int64()}
        schema = pa.schema([(c, types.get(c, pa.float64())) for c in COLUMNS])

        def cell(c: str, v):
            if v is None or v == "" or (isinstance(v, float) and math.isnan(v)):
                return None
            return str(v) if c in ("tensor", "recipe", "kind") else (
                int(v) if c in ("bits", "elements", "opset") else float(v))
        table = pa.Table.from_pylist([{c: cell(c, r.get(c)) for c in COLUMNS} for r in rows],
                                     schema=schema)
        pq.write_table(table, path)
        return
    write_csv(rows, path)


def write_csv(rows: Sequence[dict], path: str | os.PathLike) -> None:
    """The rows as CSV with :data:`COLUMNS`, then each output's ``sqnr_db[NAME]`` and
    ``max_abs[NAME]`` (numbers as Python writes them; inf as ``inf``)."""
    extra = list(dict.fromkeys(k for r in rows for k in r
                               if k == "metric" or k.startswith(("sqnr_db[", "max_abs["))))
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(COLUMNS) + extra, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if isinstance(v, float) and math.isnan(v) else v)
                        for k, v in r.items()})
