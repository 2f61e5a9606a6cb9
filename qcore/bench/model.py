"""The model table: MiniLM (MatMul form) in onnxruntime — float, onnxruntime's own quantizers and
qcore's deployable exports, timed in one process (``python -m qcore.bench --models``).

Rows: the float model; ``onnxruntime.quantization.quantize_dynamic`` (per-channel int8
weights, DynamicQuantizeLinear activations); onnxruntime's MatMulNBits quantizer (4 bits, block
32, symmetric; needs ``onnx-ir``, left out when it is missing); qcore's exports
(:mod:`qcore.model.deployable`): ``int8:per-axis`` weight-only, ``int4:blocked32`` weight-only as
the ``matmulnbits-node`` form (the default) and as the standard-ONNX ``dq-matmul`` form (timed
with a default session, which fuses it at accuracy level 4, and with
``session.qdq_matmulnbits_accuracy_level=1``, the float-compute kernel);
``int4:blocked32@mse`` and ``@fullrange-mse``, the node form with searched clip thresholds),
and W8A8 dynamic (``int8:per-axis`` weights, ``ActivationSpec(site, "dynamic", "uint8")`` on
every MatMul input), also on the SmoothQuant model (alpha 0.8, :mod:`qcore.model.activations`). Columns: median latency of one pass over the sentences (1 thread and all
threads, :mod:`qcore.model.latency`), its ratio to float, output SQNR against the float model
(the optimized session's outputs), file size, bits per weight over the 36 projection weights
(codes, scales and zero points as stored), and the targets of issue 40 with pass/fail.
"""

from __future__ import annotations

import io
import math
import os
from typing import Any

import numpy as np

from ..errors import QuantizationError
from ..formats import get_format
from ..model import require

__all__ = ["TARGETS", "format_model_table", "model_rows"]

_INT4_TARGET = "≤ 1.0× float (1 thread), SQNR ≥ MatMulNBits' at ≤ its bits/weight"
#: The speed and fidelity targets each row is judged by (row key -> description).
TARGETS = {
    "qcore-w8a8-dynamic": "≤ 0.8× float and ≤ 1.05× quantize_dynamic (1 thread), SQNR ≥ its + 3 dB",
    "qcore-w8a8-dynamic-smooth": "the same (SmoothQuant alpha 0.8 before quantizing)",
    **{k: _INT4_TARGET for k in ("qcore-int4-b32", "qcore-int4-b32-dq", "qcore-int4-b32-dq-l1",
                                 "qcore-int4-b32-mse", "qcore-int4-b32-fullrange-mse")},
}
_ACCURACY_1 = {"session.qdq_matmulnbits_accuracy_level": "1"}
#: SmoothQuant strength of the smoothed W8A8 row (docs/model.md measures alphas on MiniLM).
SMOOTH_ALPHA = 0.8


def _bits(model: Any, names: list[str]) -> int:
    """Stored bits of the tensors derived from ``names`` (initializers named W, W.* or W_*)."""
    from onnx import helper

    total = 0
    for t in model.graph.initializer:
        base = next((n for n in names if t.name == n or t.name.startswith((n + ".", n + "_"))),
                    None)
        if base is None:
            continue
        try:  # qcore's format registry knows the element types quantized weights use
            bits = get_format(t.data_type).bits
        except QuantizationError:  # e.g. int64 shapes: one element per itemsize
            bits = 8 * np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
        total += math.prod(t.dims) * bits
    return total


def _peers(float_model: Any) -> dict[str, Any]:
    """onnxruntime's quantize_dynamic and (when its dependencies are installed) MatMulNBits."""
    import tempfile

    onnx = require("onnx")
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out = {}
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "f.onnx"), os.path.join(d, "q.onnx")
        onnx.save(float_model, src)
        quantize_dynamic(src, dst, per_channel=True, weight_type=QuantType.QInt8)
        out["ort-quantize-dynamic"] = onnx.load(dst)
    try:
        from onnxruntime.quantization.matmul_nbits_quantizer import (
            DefaultWeightOnlyQuantConfig,
            MatMulNBitsQuantizer,
        )
    except ImportError:  # onnx-ir missing
        return out
    copy = onnx.ModelProto()
    copy.CopyFrom(float_model)
    cfg = DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=True)
    q = MatMulNBitsQuantizer(copy, algo_config=cfg)
    q.process()
    out["ort-matmulnbits-b32"] = q.model.model
    return out


def model_rows(sentences: int = 32, repeats: int = 10, threads: tuple[int, ...] = (1, 0)
               ) -> list[dict[str, Any]]:
    """One row per model (module doc)."""
    import logging

    from ..model import minilm
    from ..model.deployable import deployable_export
    from ..model.fidelity import compare
    from ..model.forms.uses import weight_uses
    from ..model.graph import initializer_arrays
    from ..model.latency import deploy_session, latency_ms, thread_label
    from ..model.sites import ActivationSpec

    logging.getLogger().setLevel(logging.ERROR)  # onnxruntime.quantization's advice lines
    m = minilm.minilm_model(matmul=True)
    uses = weight_uses(m)
    names = list(uses)
    weights = initializer_arrays(m, names)
    sites = {n.input[0] for n in m.graph.node if n.op_type == "MatMul" and n.input[1] in uses}
    dynamic = {s: ActivationSpec(s, "dynamic", "uint8") for s in sites}
    models: dict[str, Any] = {"float": m}
    models.update(_peers(m))
    models["qcore-int8-per-axis"] = deployable_export(m, {t: "int8:per-axis" for t in names},
                                                      weights).model
    int4 = {t: "int4:blocked32" for t in names}
    models["qcore-int4-b32"] = deployable_export(m, int4, weights).model
    dq = deployable_export(m, int4, weights, nbits_form="dq-matmul").model
    models["qcore-int4-b32-dq"] = dq
    models["qcore-int4-b32-dq-l1"] = dq
    models["qcore-int4-b32-mse"] = deployable_export(
        m, {t: "int4:blocked32@mse" for t in names}, weights).model
    models["qcore-int4-b32-fullrange-mse"] = deployable_export(
        m, {t: "int4:blocked32@fullrange-mse" for t in names}, weights).model
    models["qcore-w8a8-dynamic"] = deployable_export(
        m, {t: "int8:per-axis" for t in names}, weights, dynamic).model
    models["qcore-w8a8-dynamic-smooth"] = _smoothed_w8a8(sentences, names)
    configs = {"qcore-int4-b32-dq-l1": _ACCURACY_1}
    batches, _ = minilm.encode_batches(minilm.load_sentences(sentences), 16)
    outs = {}
    for k, model in models.items():
        s = deploy_session(model, 1, configs.get(k))
        outs[k] = [np.concatenate([s.run(None, b)[0] for b in batches])]
    lat = {t: latency_ms(models, batches, t, repeats, configs=configs) for t in threads}
    elements = sum(weights[t].size for t in names)
    rows = []
    for k, model in models.items():
        data = model.SerializeToString()
        row = {"model": k, "output_sqnr_db": compare(outs["float"], outs[k])["output_sqnr_db"],
               "file_mb": len(data) / 2**20,
               "bits_per_weight": _bits(model, names) / elements}
        for t in threads:
            row[f"latency_ms_{thread_label(t)}"] = lat[t][k]
            row[f"x_float_{thread_label(t)}"] = lat[t][k] / lat[t]["float"]
        row["session"] = "accuracy level 1" if k in configs else "default"
        rows.append(row)
    _judge(rows)
    return rows


def _smoothed_w8a8(sentences: int, names: list[str]) -> Any:
    """W8A8 dynamic on the SmoothQuant model (alpha :data:`SMOOTH_ALPHA`, channel maxima from
    the same sentences; :func:`qcore.model.activations.smoothed_case`), exported fused."""
    from ..model.cases import load_case
    from ..model.deployable import deployable_export
    from ..model.graph import initializer_arrays
    from ..model.sites import ActivationSpec, find_sites
    from ..model.smooth import smoothed_case

    smoothed, _ = smoothed_case(load_case("minilm-matmul", sentences=sentences), SMOOTH_ALPHA)
    sm = smoothed.model
    specs = {s.name: ActivationSpec(s.name, "dynamic", "uint8") for s in find_sites(sm)}
    return deployable_export(sm, {t: "int8:per-axis" for t in names},
                             initializer_arrays(sm, names), specs).model


def _judge(rows: list[dict[str, Any]]) -> None:
    """Each qcore row's targets (TARGETS) as pass/fail text in ``row["target"]``."""
    by = {r["model"]: r for r in rows}
    qd, nb = by.get("ort-quantize-dynamic"), by.get("ort-matmulnbits-b32")
    for r in rows:
        k = r["model"]
        verdicts = []
        if k.startswith("qcore-w8a8-dynamic") and qd:
            verdicts.append(_v(f"{r['x_float_1']:.2f}× float", r["x_float_1"] <= 0.8))
            ratio = r["latency_ms_1"] / qd["latency_ms_1"]
            verdicts.append(_v(f"{ratio:.2f}× quantize_dynamic", ratio <= 1.05))
            gain = r["output_sqnr_db"] - qd["output_sqnr_db"]
            verdicts.append(_v(f"{gain:+.1f} dB vs quantize_dynamic", gain >= 3))
        elif k.startswith("qcore-int4-b32"):
            verdicts.append(_v(f"{r['x_float_1']:.2f}× float", r["x_float_1"] <= 1.0))
            if nb:
                ok = (r["output_sqnr_db"] >= nb["output_sqnr_db"]
                      and r["bits_per_weight"] <= nb["bits_per_weight"] + 1e-9)
                verdicts.append(_v(f"{r['output_sqnr_db'] - nb['output_sqnr_db']:+.2f} dB vs "
                                   "MatMulNBits at "
                                   f"{r['bits_per_weight'] - nb['bits_per_weight']:+.2f} "
                                   "bits/w", ok))
        r["target"] = "; ".join(verdicts) if verdicts else "—"


def _v(text: str, ok: bool) -> str:
    return f"{text} {'pass' if ok else 'FAIL'}"


def format_model_table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table."""
    keys = [k for k in rows[0] if k.startswith("latency_ms_")]
    head = (["model", "session"] + [f"ms ({k[11:]} thr)" for k in keys]
            + [f"× float ({k[11:]} thr)" for k in keys]
            + ["output SQNR dB", "file MB", "bits/weight", "targets"])
    buf = io.StringIO()
    buf.write("| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n")
    for r in rows:
        cells = [r["model"], r["session"]]
        cells += [f"{r[k]:.1f}" for k in keys]
        cells += [f"{r['x_float_' + k[11:]]:.2f}" for k in keys]
        sq = r["output_sqnr_db"]
        cells += ["∞" if math.isinf(sq) else f"{sq:.1f}", f"{r['file_mb']:.1f}",
                  f"{r['bits_per_weight']:.2f}", r["target"]]
        buf.write("| " + " | ".join(cells) + " |\n")
    return buf.getvalue()
