"""The ``weight-only-int4`` form of a table lookup (Gather on an embedding): int4 codes blocked
by 32 along each row (symmetric, scale = max|w| / 7 per block), packed two a byte as uint8
with the implicit zero point 8, read by one ``com.microsoft`` ``GatherBlockQuantized`` node,
which dequantizes only the rows looked up. Half the int8 table's bytes (:mod:`.lookup`); a
row whose length has no power-of-two block of 16 or more dividing it stays as it is."""

from __future__ import annotations

from typing import Any

import numpy as np

from .layers import Layer, LayerForm
from .nbits_layers import block_for, int4_codes

__all__ = ["WEIGHT_ONLY_INT4", "write"]


def write(out: Any, layer: Layer, node: Any, arrays: Any, qmax: int, specs: Any = None
          ) -> list[Any] | None:
    """One GatherBlockQuantized node in place of the Gather (module doc)."""
    w = np.asarray(arrays[layer.weight], np.float32)
    if w.ndim != 2 or not block_for(w.shape[1]):
        return None
    block = block_for(w.shape[1])
    codes, scale = int4_codes(np.ascontiguousarray(w.T), block)  # blocked along each row
    u = (codes.T.astype(np.int16) + 8).astype(np.uint8).reshape(w.shape[0], -1, 2)
    wn = layer.weight
    ins = [out.const((u[..., 0] | (u[..., 1] << 4)).astype(np.uint8), wn + ".int4"),
           node.input[1], out.const(np.ascontiguousarray(scale.T), wn + ".int4_scales")]
    return [out.helper.make_node("GatherBlockQuantized", ins, [node.output[0]],
                                 name=layer.name + ".gather_int4", domain="com.microsoft",
                                 gather_axis=0, quantize_axis=1, block_size=block, bits=4)]


#: The registry's entry (:mod:`.layered`).
WEIGHT_ONLY_INT4 = LayerForm("weight-only-int4", ("Gather",), frozenset(), write)
