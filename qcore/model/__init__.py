"""From tensors to the model: output fidelity, sensitivity, an optimal plan and the QDQ export.

- :mod:`qcore.model.graph`: load any ``.onnx`` model (external data included), its weights
  wherever they live (:mod:`qcore.io.onnx`, the one reader), read or generate its inputs, run it
  in onnxruntime with chosen weights.
- :mod:`qcore.model.minilm`: the all-MiniLM-L6-v2 sentence encoder as an ONNX graph (Gemm or
  MatMul form) built from the installed checkpoint, and its tokenizer.
- :mod:`qcore.model.fidelity`: a recipe on all weights or on one, laid out by each weight's
  role → output SQNR (per output, and their mean noise ratio), max |Δ|, cosine, Spearman of
  pairwise similarities, KL and top-1 for logits.
- :mod:`qcore.model.sensitivity`: every weight × every recipe alone.
- :mod:`qcore.model.plan`: one recipe per tensor under a bits budget, exactly optimal.
- :mod:`qcore.model.export`: the plan as a QDQ ONNX model.
- :mod:`qcore.model.sites`: activation specs and sites; :mod:`qcore.model.staged`: the staged
  fake-quant evaluation; :mod:`qcore.model.qdq`: the QDQ insertion;
  :mod:`qcore.model.calibrate`: activation calibration (minmax, percentile, mse, entropy);
  :mod:`qcore.model.smooth`: SmoothQuant; :mod:`qcore.model.activations`: per-site sensitivity
  and the study that ties them.
- :mod:`qcore.model.forms`: the export forms onnxruntime fuses into integer kernels, one module
  per form and their registry; :mod:`qcore.model.deployable`: the deployable export that writes
  them (MatMulNBits, DynamicQuantizeLinear + MatMulInteger, static Q/DQ into QGemm).
- :mod:`qcore.model.runtime`: which configurations a runtime runs (onnxruntime probed, cached).
- :mod:`qcore.model.latency`: an export's latency beside its float model's, in one process.
- :mod:`qcore.model.peers`: onnxruntime's own ``quantize_static`` / ``quantize_dynamic`` as
  peers, measured with the float model and the exports; :mod:`qcore.model.pareto`: the Pareto
  table of latency × SQNR × file size (pure rows).

``python -m qcore.model MODEL ...`` is the command line (:mod:`qcore.model.cli`, the work in
:mod:`qcore.model.command`). onnx, onnxruntime and tokenizers are
the ``model`` extra; they are imported when first needed, so ``import qcore.model`` works
without them and a missing one raises ImportError naming the extra.
"""

from __future__ import annotations

from typing import Any

from ..optional import require as _require

__all__ = ["require"]


def require(module: str) -> Any:
    """Import an optional dependency of the model tool, or raise ImportError naming the extra
    (:func:`qcore.optional.require`)."""
    return _require(module, "qcore.model")
