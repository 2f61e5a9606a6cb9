"""What the whole-model report page reads from the report (:mod:`qcore.report`): the page
draws, the report computes; the page reaches the report only through here."""

from __future__ import annotations

from qcore.report import list_tensors
from qcore.report.core import (
    read_rows,
    run_report,
    select,
    sqnr_matrix,
    summarize,
    tensor_labels,
)
from qcore.report.synthetic import write_checkpoint

__all__ = ["list_tensors", "read_rows", "run_report", "select", "sqnr_matrix", "summarize",
           "tensor_labels", "write_checkpoint"]


def write_sites(folder: str, model: str = "minilm", sentences: int = 16) -> dict[str, str]:
    """Every activation site of ``model`` (``"minilm"`` or an .onnx path), run on the shipped
    sentences, written into ``folder`` as one ``NAME.npz`` per site — NAME the site's name on
    every model page (:func:`qcore.names.site_name`: ``layer0.ffn.act``), the values its real
    tokens' (:func:`app.activation_view.site_values`), so the report names and reads the
    same tensors Model Fidelity quantizes. Returns {name: graph tensor}; written once (a
    ``sites.json`` in the folder says it is complete)."""
    import json
    from pathlib import Path

    import numpy as np

    from qcore.model import cases
    from qcore.model.staged import runner_for
    from qcore.names import site_name

    from .activation_view import site_values

    done = Path(folder) / "sites.json"
    if done.exists():
        return json.loads(done.read_text(encoding="utf-8"))
    Path(folder).mkdir(parents=True, exist_ok=True)
    case = cases.load_case(model, sentences=sentences)
    run = runner_for(case)
    names = {}
    for tensor in run.names:
        name = site_name(tensor, [c[3] for c in run.site(tensor).consumers])
        names[name if name not in names else tensor] = tensor
    for name, tensor in names.items():
        np.savez(Path(folder) / f"{name}.npz", **{name: site_values(case, tensor)})
    done.write_text(json.dumps(names), encoding="utf-8")
    return names
