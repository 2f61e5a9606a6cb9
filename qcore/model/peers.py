"""onnxruntime's own quantizers beside qcore's exports, measured in one process.

The peers a user would try first (docs/model.md, "The peers"):

- ``ort-static``: ``onnxruntime.quantization.quantize_static`` in the QDQ format with **uint8
  activations** (``QuantType.QUInt8``: the activation type onnxruntime's fast x86 integer
  kernels take), int8 per-channel weights, MinMax calibration on the same batches qcore
  calibrates on;
- ``ort-dynamic``: ``quantize_dynamic`` with uint8 per-channel weights (``ConvInteger`` /
  ``MatMulInteger`` behind ``DynamicQuantizeLinear``).

Each is written to a temporary folder by onnxruntime's own code, as a user runs it, and read
back. A model the quantizer refuses (an exception, or a result onnxruntime cannot load) gives a
:class:`Peer` with ``error`` set to one line saying why, never a traceback.

:func:`measure` times any set of models the way :mod:`qcore.model.latency` does (sessions with
onnxruntime's default optimizations, spinning off, the models taking turns pass by pass) and
adds the spread (quartiles, the fastest pass), the output SQNR against the float model by the
model tool's definition (:func:`qcore.model.fidelity.compare`) and the file size.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import numpy as np

from . import require

__all__ = ["PEERS", "Peer", "measure", "peer_models", "peer_points", "print_peers",
           "quantize_dynamic_peer", "quantize_static_peer"]

#: The peers' keys and what each is (the Pareto table's and the bench's row names).
PEERS = {
    "ort-static": "onnxruntime quantize_static: QDQ, uint8 activations, int8 per-channel "
                  "weights, MinMax",
    "ort-dynamic": "onnxruntime quantize_dynamic: uint8 per-channel weights",
}


@dataclass
class Peer:
    """One peer's model (None when the quantizer refused: ``error`` says why, one line)."""

    key: str
    model: Any = None
    file_bytes: int = 0
    error: str | None = None
    seconds: float = 0.0  # how long onnxruntime's quantizer took
    note: str | None = None  # what was done first, e.g. the opset raised to 13

    @property
    def ok(self) -> bool:
        return self.model is not None


class _Reader:
    """onnxruntime's CalibrationDataReader over a list of feeds (duck-typed: get_next)."""

    def __init__(self, batches: Sequence[Mapping[str, np.ndarray]]) -> None:
        self.batches = [dict(b) for b in batches]
        self.i = 0

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self.i >= len(self.batches):
            return None
        self.i += 1
        return self.batches[self.i - 1]

    def rewind(self) -> None:
        self.i = 0


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first[:300]}" if first else type(exc).__name__


def _run_quantizer(key: str, model: Any, quantize) -> Peer:
    """Save ``model``, call ``quantize(src, dst)`` (onnxruntime's code), read the result back;
    any failure becomes ``Peer.error``."""
    onnx = require("onnx")
    require("onnxruntime")
    quiet = logging.getLogger()
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # onnxruntime.quantization's advice lines
    t0 = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="qcore-peer-") as d:
            src, dst = os.path.join(d, "float.onnx"), os.path.join(d, key + ".onnx")
            onnx.save(model, src)
            quantize(src, dst)
            size = os.path.getsize(dst)
            data = os.path.join(d, key + ".onnx.data")
            if os.path.exists(data):
                size += os.path.getsize(data)
            q = onnx.load(dst)
        from .latency import deploy_session

        deploy_session(q, 1)  # onnxruntime can load what its quantizer wrote
    except Exception as exc:  # noqa: BLE001 - a refusal is a result, stated in one line
        return Peer(key, error=_one_line(exc), seconds=time.perf_counter() - t0)
    finally:
        quiet.setLevel(level)
    return Peer(key, q, size, seconds=time.perf_counter() - t0)


#: The opset per-channel QDQ needs (DequantizeLinear's ``axis``); onnxruntime's quantizer
#: writes it into older models and fails, so such a model is converted first (as onnxruntime's
#: own advice line says) and the row says so.
PER_CHANNEL_OPSET = 13


def _default_opset(model: Any) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _with_upgrade(key: str, model: Any, quantize) -> Peer:
    """:func:`_run_quantizer`; where it fails on a model older than :data:`PER_CHANNEL_OPSET`,
    again on the model converted by ``onnx.version_converter`` (``note`` says so)."""
    peer = _run_quantizer(key, model, quantize)
    old = _default_opset(model)
    if peer.ok or not 0 < old < PER_CHANNEL_OPSET:
        return peer
    require("onnx")
    try:
        from onnx import version_converter

        newer = version_converter.convert_version(model, PER_CHANNEL_OPSET)
    except Exception as exc:  # noqa: BLE001 - the first refusal stands, with this one added
        peer.error = f"{peer.error}; converting opset {old} to {PER_CHANNEL_OPSET}: {_one_line(exc)}"
        return peer
    again = _run_quantizer(key, newer, quantize)
    if not again.ok:
        again.error = f"{peer.error}; after converting opset {old} to {PER_CHANNEL_OPSET}: {again.error}"
        return again
    again.note = f"opset {old} converted to {PER_CHANNEL_OPSET} first ({peer.error})"
    return again


def quantize_static_peer(model: Any, calibration: Sequence[Mapping[str, np.ndarray]]) -> Peer:
    """``quantize_static``: QDQ, QUInt8 activations, QInt8 per-channel weights, MinMax over
    ``calibration`` (a list of feeds)."""
    if not calibration:
        return Peer("ort-static", error="no calibration batches")

    def q(src: str, dst: str) -> None:
        from onnxruntime.quantization import (
            CalibrationMethod,
            QuantFormat,
            QuantType,
            quantize_static,
        )

        quantize_static(src, dst, _Reader(calibration), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        per_channel=True, calibrate_method=CalibrationMethod.MinMax)

    return _with_upgrade("ort-static", model, q)


def quantize_dynamic_peer(model: Any) -> Peer:
    """``quantize_dynamic``: QUInt8 per-channel weights."""

    def q(src: str, dst: str) -> None:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(src, dst, per_channel=True, weight_type=QuantType.QUInt8)

    return _with_upgrade("ort-dynamic", model, q)


def peer_models(model: Any, calibration: Sequence[Mapping[str, np.ndarray]]
                ) -> dict[str, Peer]:
    """Both peers of ``model`` (:data:`PEERS`), the static one calibrated on ``calibration``."""
    return {"ort-static": quantize_static_peer(model, calibration),
            "ort-dynamic": quantize_dynamic_peer(model)}


def _outputs(session: Any, batches: Sequence[Mapping[str, np.ndarray]]) -> list[np.ndarray]:
    per = [session.run(None, dict(b)) for b in batches]
    if len(per) == 1:
        return per[0]
    return [np.concatenate([p[k] for p in per]) for k in range(len(per[0]))]


def measure(models: Mapping[str, Any], batches: Sequence[Mapping[str, np.ndarray]],
            reference: str = "float", threads: int = 1, repeats: int = 10, warmup: int = 2,
            configs: Mapping[str, Mapping[str, str]] | None = None,
            file_bytes: Mapping[str, int] | None = None) -> dict[str, dict[str, Any]]:
    """Latency, spread, output SQNR and size of each model, all in one process.

    ``models``: key → ``onnx.ModelProto`` (one of them ``reference``, the float model). Each
    gets a session as a user makes it (:func:`qcore.model.latency.deploy_session`: default
    optimizations, ``threads`` intra-op threads, spinning off); after ``warmup`` passes each,
    the sessions take turns pass by pass, ``repeats`` passes each (one pass runs every batch).
    Returns per key: ``latency_ms`` (the median pass), ``q1_ms`` / ``q3_ms`` (quartiles),
    ``min_ms``, ``x_float`` (median over the reference's median), ``output_sqnr_db`` and
    ``outputs`` (:func:`qcore.model.fidelity.compare` of the optimized session's float outputs
    with the reference's; nan when the model has none), ``agreement`` (integer and boolean
    outputs: the share of equal elements, never an SQNR), ``file_bytes`` (the serialized
    model, or ``file_bytes[key]``: the file onnxruntime's quantizer wrote)."""
    from .fidelity import compare
    from .latency import deploy_session, interleaved_runs_ms

    if reference not in models:
        raise KeyError(f"the reference {reference!r} is not among the models")
    configs = configs or {}
    sessions = {k: deploy_session(m, threads, configs.get(k)) for k, m in models.items()}
    names = [o.name for o in sessions[reference].get_outputs()]
    outs = {k: _outputs(s, batches) for k, s in sessions.items()}
    # decisions (integer / boolean outputs) are compared by agreement, never by SQNR
    floats = [i for i, y in enumerate(outs[reference]) if np.issubdtype(y.dtype, np.floating)]
    # the output run above was the first warm-up
    times = interleaved_runs_ms(sessions, batches, repeats, max(0, warmup - 1))
    base = statistics.median(times[reference])
    res: dict[str, dict[str, Any]] = {}
    for k, m in models.items():
        t = sorted(times[k])
        q = statistics.quantiles(t, n=4) if len(t) >= 2 else [t[0]] * 3
        if floats:
            fid = compare([outs[reference][i] for i in floats], [outs[k][i] for i in floats],
                          names=[names[i] for i in floats])
        else:
            fid = {"output_sqnr_db": math.nan, "outputs": {}}
        size = (file_bytes or {}).get(k) or len(m.SerializeToString())
        res[k] = {"latency_ms": statistics.median(t), "q1_ms": q[0], "q3_ms": q[2],
                  "min_ms": t[0], "x_float": statistics.median(t) / base if base else math.nan,
                  "output_sqnr_db": fid["output_sqnr_db"], "outputs": fid["outputs"],
                  "file_bytes": int(size), "threads": threads, "repeats": len(t)}
        agree = {names[i]: float(np.mean(outs[reference][i] == outs[k][i]))
                 for i in range(len(names)) if i not in floats}
        if agree:
            res[k]["agreement"] = agree
    return res


def peer_points(float_model: Any, batches: Sequence[Mapping[str, np.ndarray]],
                exports: Mapping[str, Any] | None = None,
                calibration: Sequence[Mapping[str, np.ndarray]] | None = None,
                threads: int = 1, repeats: int = 10, warmup: int = 2, peers: bool = True,
                forms: Mapping[str, Mapping[str, int]] | None = None,
                configs: Mapping[str, Mapping[str, str]] | None = None,
                made: Mapping[str, Peer] | None = None) -> list[dict[str, Any]]:
    """The points of the Pareto table (:func:`qcore.model.pareto.pareto_rows`): the float
    model (``float``), ``exports`` (qcore's, name → ModelProto; ``forms``: name → form counts)
    and, with ``peers``, onnxruntime's two quantizers calibrated on ``calibration`` (default
    ``batches``), all measured together by :func:`measure` on ``batches``. A peer the
    quantizer refused is a point with ``error``. ``made``: the peers already made
    (:func:`peer_models`), so that a second measurement does not quantize again."""
    exports = dict(exports or {})
    if made is None:
        made = peer_models(float_model, calibration or batches) if peers else {}
    models = {"float": float_model, **exports,
              **{k: p.model for k, p in made.items() if p.ok}}
    sizes = {k: p.file_bytes for k, p in made.items() if p.ok}
    res = measure(models, batches, "float", threads, repeats, warmup, configs, sizes)
    points = []
    for k, m in res.items():
        kind = "float" if k == "float" else ("peer" if k in made else "qcore")
        pt = {"name": k, "kind": kind, **{f: m[f] for f in (
            "latency_ms", "q1_ms", "q3_ms", "min_ms", "output_sqnr_db", "file_bytes",
            "threads", "repeats")}}
        if k in made:
            pt["what"] = PEERS[k]
            if made[k].note:
                pt["note"] = made[k].note
        if forms and k in forms:
            pt["forms"] = dict(forms[k])
        points.append(pt)
    for k, p in made.items():
        if not p.ok:
            points.append({"name": k, "kind": "peer", "what": PEERS[k], "error": p.error})
    return points


def print_peers(args: argparse.Namespace, float_model, batches: list, calibration: list,
                forms: dict, out: TextIO) -> list[dict]:
    """--peers: the float model, the export as saved at ``--export`` (its file size) and
    onnxruntime's two quantizers calibrated on ``calibration``, measured together on
    ``batches`` (:func:`qcore.model.peers.peer_points`; ``--threads`` or one thread,
    ``--latency-repeats`` or 10 passes), printed as the Pareto table
    (:func:`qcore.model.pareto.format_pareto`); returns its rows (the plan JSON's ``pareto``)."""
    import llvmlite.binding as llvm

    from . import require
    from .pareto import format_pareto, pareto_rows

    onnx = require("onnx")
    size = os.path.getsize(args.export)
    if os.path.exists(args.export + ".data"):
        size += os.path.getsize(args.export + ".data")
    name = "qcore-" + os.path.splitext(os.path.basename(args.export))[0]
    threads = args.threads or 1
    print(f"peers: onnxruntime quantize_static and quantize_dynamic on {len(calibration)} "
          f"calibration batch(es); measuring 4 models, {threads} thread(s)", file=out)
    points = peer_points(float_model, batches, {name: onnx.load(args.export)}, calibration,
                         threads, args.latency_repeats or 10, forms={name: forms})
    for p in points:
        if p["name"] == name:
            p["file_bytes"] = size
    rows = pareto_rows(points)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(format_pareto(rows, f"{llvm.get_host_cpu_name()}, {threads} thread(s), load "
                              f"{load:.1f}"), file=out)
    return rows
