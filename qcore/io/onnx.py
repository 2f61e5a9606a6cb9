"""ONNX models: the tensor-file entries of :mod:`qcore.io` and the one reader of a model's weights.

onnx is optional: it is imported when a model is read, and its absence raises a
:class:`~qcore.io.base.TensorFileError` (file entries) or ImportError (the weight reader).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import MAX_TENSORS, TensorFileError, _Entry, _native, _short

__all__ = ["onnx_entries"]


def onnx_entries(label: str, data: bytes) -> list[_Entry]:
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError:
        raise TensorFileError(
            f"{label}: reading .onnx files needs the optional 'onnx' package, which is not "
            "installed; pip install onnx (or qcore[onnx]), or export the tensor as .npy."
        ) from None
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise TensorFileError(
            f"{label}: not a valid ONNX model ({_short(exc)}); the file is corrupt or truncated."
        ) from None
    if not model.HasField("graph"):
        raise TensorFileError(f"{label}: not a valid ONNX model (it has no graph).")
    if len(model.graph.initializer) > MAX_TENSORS:
        raise TensorFileError(
            f"{label}: holds {len(model.graph.initializer):,} initializers, more than the "
            f"{MAX_TENSORS:,} a file may hold here; split the model."
        )
    return [_onnx_entry(label, t, onnx, numpy_helper) for t in model.graph.initializer]


def _onnx_entry(label: str, tensor: Any, onnx: Any, numpy_helper: Any) -> _Entry:
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type))
    except Exception:  # unknown / undefined element type
        dtype = np.dtype(object)
    external = tensor.data_location == onnx.TensorProto.EXTERNAL
    dims = tuple(int(d) for d in tensor.dims)
    if any(d < 0 for d in dims):
        raise TensorFileError(
            f"{label}: initializer {tensor.name!r} has dims {list(dims)} with a negative "
            "dimension; every dimension must be >= 0. The model is corrupt."
        )

    def read() -> np.ndarray:
        if external:
            raise TensorFileError(
                f"{label}: initializer {tensor.name!r} is stored in external data, which is "
                "not loaded; save the model with its weights inside the .onnx file."
            )
        return _native(np.asarray(numpy_helper.to_array(tensor)))

    return _Entry(tensor.name, dims, dtype, read)
