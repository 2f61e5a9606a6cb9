"""One-node ONNX models of the quantization operators, built one way for every caller.

The tests (the onnx reference evaluator), the benchmark (onnxruntime) and the conformance page
(both) run qcore's configurations through other engines; they all build their models here.
onnx is optional: it is imported when a model is built, and its absence raises ImportError.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .formats import get_format
from .versions import DEQUANTIZE, DYNAMIC, QUANTIZE

#: The input names of each operator's model, in ONNX order.
INPUT_NAMES = {
    QUANTIZE: ("x", "y_scale", "y_zero_point"),
    DEQUANTIZE: ("x", "x_scale", "x_zero_point"),
    DYNAMIC: ("x",),
}
#: The output names of each operator's model.
OUTPUT_NAMES = {QUANTIZE: ("y",), DEQUANTIZE: ("y",), DYNAMIC: ("y", "y_scale", "y_zero_point")}

_TYPE_ATTRIBUTES = ("output_dtype", "precision")


def onnx_type(spec: Any) -> int:
    """The TensorProto data-type number of an array, a dtype, a type name or a number."""
    if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        return int(spec)
    if hasattr(spec, "dtype") and not isinstance(spec, np.dtype) and not isinstance(spec, type):
        spec = spec.dtype
    try:
        return get_format(spec).onnx_id
    except ValueError:  # a type qcore refuses (float64, ...): onnx still has a number for it
        from onnx.helper import np_dtype_to_tensor_dtype

        return int(np_dtype_to_tensor_dtype(np.dtype(spec)))


def attributes(op: str, **given: Any) -> dict[str, int]:
    """ONNX attributes: None values left out (the schema's defaults apply), type attributes as
    TensorProto numbers, booleans as 0/1."""
    out = {}
    for name, value in given.items():
        if value is None:
            continue
        if name in _TYPE_ATTRIBUTES:
            out[name] = onnx_type(value) if value != 0 else 0
        else:
            out[name] = int(value)
    return out


def feeds(op: str, *inputs: Any) -> dict[str, np.ndarray]:
    """The feed dictionary for a model whose inputs are graph inputs (``None`` ones left out)."""
    return {name: np.asarray(a) for name, a in zip(INPUT_NAMES[op], inputs) if a is not None}


def node_model(op: str, opset: int, inputs: Sequence[Any], attrs: Mapping[str, Any] | None = None,
               *, initializers: bool | Sequence[str] = False,
               output_types: Sequence[Any] | None = None,
               output_shapes: Sequence[Sequence[int] | None] | None = None,
               cast_output_to: Any = None) -> Any:
    """A one-node model of ``op`` (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear) at
    ``opset``.

    ``inputs`` are in ONNX order (x, scale, zero point); each is an array, a type (anything
    :func:`onnx_type` takes) or None (left out; trailing ones dropped). Arrays become graph
    inputs fed by :func:`feeds` — or initializers, so the model runs without feeds, when
    ``initializers`` is True or names them. ``attrs`` go through :func:`attributes`.
    Output types default to UNDEFINED (the reference evaluator infers them; onnxruntime wants
    them given). ``cast_output_to`` appends a Cast of the first output to that type (e.g. int32
    or float32, for runtimes that cannot hand back the narrow type).
    """
    import onnx
    from onnx import helper, numpy_helper

    names = INPUT_NAMES[op]
    specs = list(inputs)
    if len(specs) > len(names):
        raise ValueError(f"{op} has {len(names)} inputs, got {len(specs)}")
    while specs and specs[-1] is None:
        specs.pop()
    embed = set(names) if initializers is True else set(initializers or ())
    graph_inputs, inits, node_inputs = [], [], []
    for name, spec in zip(names, specs):
        if spec is None:
            node_inputs.append("")  # an absent optional input in the middle
            continue
        node_inputs.append(name)
        if name in embed:
            inits.append(numpy_helper.from_array(np.asarray(spec), name))
        else:
            graph_inputs.append(helper.make_tensor_value_info(name, onnx_type(spec), None))
    outs = list(OUTPUT_NAMES[op])
    types = list(output_types) if output_types is not None else [onnx.TensorProto.UNDEFINED] * len(
        outs)
    shapes = list(output_shapes) if output_shapes is not None else [None] * len(outs)
    types = [t if t == onnx.TensorProto.UNDEFINED else onnx_type(t) for t in types]
    node_outputs = list(outs)
    nodes = []
    if cast_output_to is not None:
        node_outputs[0] = outs[0] + "_narrow"
        types[0] = onnx_type(cast_output_to)
    nodes.append(helper.make_node(op, node_inputs, node_outputs,
                                  **attributes(op, **dict(attrs or {}))))
    if cast_output_to is not None:
        nodes.append(helper.make_node("Cast", [node_outputs[0]], [outs[0]], to=types[0]))
    graph = helper.make_graph(
        nodes, f"{op}_{opset}", graph_inputs,
        [helper.make_tensor_value_info(o, t, s) for o, t, s in zip(outs, types, shapes)],
        initializer=inits)
    opsets = [helper.make_opsetid("", int(opset))]
    model = helper.make_model(graph, opset_imports=opsets)
    try:  # the oldest IR version that has this opset: what older runtimes accept
        model.ir_version = helper.find_min_ir_version_for(opsets, ignore_unknown=True)
    except Exception:  # noqa: BLE001 - keep onnx's default
        pass
    return model


__all__ = ["INPUT_NAMES", "OUTPUT_NAMES", "attributes", "feeds", "node_model", "onnx_type"]
