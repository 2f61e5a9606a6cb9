"""Activation Q/DQ as ONNX nodes: :func:`insert_qdq` writes each site's ``QuantizeLinear →
DequantizeLinear`` (static) or ``DynamicQuantizeLinear → DequantizeLinear`` (dynamic) pair into
a copy of the model, the graph the staged runner (:mod:`qcore.model.staged`) reproduces bit for
bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import QuantizationError
from . import require
from .sites import ActivationSpec, find_sites, qdq_name, rewire

__all__ = ["insert_qdq"]


def insert_qdq(model: Any, specs: Sequence[ActivationSpec]) -> Any:
    """A copy of ``model`` with each spec's site quantized as ONNX nodes: ``QuantizeLinear →
    DequantizeLinear`` (static; scale and zero point as initializers ``SITE.scale``,
    ``SITE.zero_point``) or ``DynamicQuantizeLinear → DequantizeLinear`` (dynamic), whose
    output ``SITE.qdq`` the site's weight consumers read (a name the model already uses gets
    a suffix, ``SITE.scale_1``). Nodes are topologically sorted first. The opset import is
    raised to the newest the pairs need (float8: 19, 16-bit: 21)."""
    require("onnx")  # ImportError naming the extra
    from onnx import helper, numpy_helper

    from ..io.onnx import topologically_sorted
    from .graph import fresh_name, graph_names, model_opset, set_opset

    out = topologically_sorted(model)
    g = out.graph
    sites = {s.name: s for s in find_sites(out)}
    unknown = [sp.site for sp in specs if sp.site not in sites]
    if unknown:
        raise QuantizationError(f"activation sites {unknown} are not sites of the model; its "
                                f"sites: {', '.join(sites)}")
    taken = graph_names(g)
    qnames = {sp.site: fresh_name(qdq_name(sp.site), taken) for sp in specs}
    rewire(g, [sites[sp.site] for sp in specs], qnames)
    producer = {o: i for i, n in enumerate(g.node) for o in n.output}
    inserts: dict[int, list[Any]] = {}
    for sp in specs:
        s = sp.site
        codes, scale, zp = (fresh_name(s + suffix, taken)
                            for suffix in (".codes", ".scale", ".zero_point"))
        quantize, dequantize = (fresh_name(s + suffix, taken)
                                for suffix in (".quantize", ".dequantize"))
        if sp.mode == "dynamic":
            nodes = [helper.make_node("DynamicQuantizeLinear", [s], [codes, scale, zp],
                                      name=quantize),
                     helper.make_node("DequantizeLinear", [codes, scale, zp], [qnames[s]],
                                      name=dequantize)]
        else:
            g.initializer.append(numpy_helper.from_array(
                np.asarray(sp.scale, np.float32).reshape(()), scale))
            g.initializer.append(_zero_point_proto(sp, zp))
            nodes = [helper.make_node("QuantizeLinear", [s, scale, zp], [codes], name=quantize),
                     helper.make_node("DequantizeLinear", [codes, scale, zp], [qnames[s]],
                                      name=dequantize)]
        inserts.setdefault(producer.get(s, -1), []).extend(nodes)
    ordered = list(inserts.get(-1, []))
    for i, n in enumerate(g.node):
        ordered.append(n)
        ordered.extend(inserts.get(i, []))
    del g.node[:]
    g.node.extend(ordered)
    set_opset(out, max([model_opset(out)] + [sp.opset for sp in specs]))
    return out


def _zero_point_proto(sp: ActivationSpec, name: str) -> Any:
    from .graph import tensor_proto

    return tensor_proto(sp.zero_point_codes(), name)
