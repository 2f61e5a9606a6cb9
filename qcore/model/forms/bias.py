"""Bias correction for the static form's Convs: a move that costs no latency.

Rounding a Conv's weights to int8 per output channel shifts each output channel's mean by
``Σ (W_q − W) · E[x]`` (the rounding error times the mean input of each input channel, over
the kernel window). :func:`bias_corrected` subtracts that shift from the Conv's bias (adding a
bias where the Conv had none), so the quantized layer's outputs keep the float layer's means
on the calibration inputs; the planner keeps the result only when the export's measured
output SQNR rises (zero-padded borders see 0, not the mean: the correction is the interior
one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .. import require
from .layers import _attr, int8_per_axis

__all__ = ["bias_corrected"]


def _shift(w: np.ndarray, mean: np.ndarray, group: int, qmax: int) -> np.ndarray:
    codes, scale = int8_per_axis(w, 0, qmax)
    wq = codes.astype(np.float64) * scale.astype(np.float64).reshape((-1,) + (1,) * (w.ndim - 1))
    err = (wq - w.astype(np.float64)).reshape(w.shape[0], w.shape[1], -1).sum(axis=2)
    per_group = w.shape[0] // group
    m = mean.reshape(group, w.shape[1])
    return np.einsum("oc,oc->o", err, m[np.arange(w.shape[0]) // per_group])


def bias_corrected(prepared: Any, layers: Sequence[Any],
                   values: Mapping[str, Sequence[np.ndarray]], qmax: int) -> Any:
    """A copy of ``prepared`` whose Conv layers of ``layers`` (those with calibration
    ``values`` of their input, [N, C, ...]) have biases corrected for int8 weights of at most
    ``qmax`` (module doc)."""
    onnx = require("onnx")
    m = onnx.ModelProto()
    m.CopyFrom(prepared)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    nodes = {n.name: n for n in g.node}
    for x in layers:
        if x.op != "Conv" or x.data not in values or x.weight not in inits:
            continue
        node = nodes[x.name]
        w = onnx.numpy_helper.to_array(inits[x.weight]).astype(np.float32)
        v = values[x.data]
        mean = np.mean([a.astype(np.float64).mean(axis=(0,) + tuple(range(2, a.ndim)))
                        for a in v], axis=0)
        group = int(_attr(node, "group", 1))
        if mean.shape[0] != w.shape[1] * group:
            continue
        shift = _shift(w, mean, group, qmax)
        if x.bias:
            b = onnx.numpy_helper.to_array(inits[x.bias]).astype(np.float64)
            name = x.bias
        else:
            b, name = np.zeros(w.shape[0]), x.weight + ".bias"
            while len(node.input) < 3:
                node.input.append("")
            node.input[2] = name
        new = onnx.numpy_helper.from_array((b - shift).astype(np.float32), name)
        if name in inits:
            inits[name].CopyFrom(new)
        else:
            g.initializer.append(new)
            inits[name] = g.initializer[-1]
    return m
