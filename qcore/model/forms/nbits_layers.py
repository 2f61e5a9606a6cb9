"""The 4-bit layer forms of a speed plan: a MatMul / Gemm as one ``com.microsoft``
``MatMulNBits`` node (int4 codes blocked along K, symmetric, packed as
:func:`.nbits.pack_nbits` writes them; the bias inside the node) at each accuracy level the
CPU kernels have: ``int4-acc0`` (unset: the float-compute kernel), ``int4-acc1`` (float32
compute) and ``int4-acc4`` (the activations quantized to int8 per block, integer compute).
Which one runs fast depends on the CPU and the batch, so each is timed like every other form
(:mod:`qcore.model.costs`); where none measures faster than float the plan keeps 8 bits or
float and says so before it exports (:func:`qcore.model.objectives.plan_for_speed`).
A layer whose K has no power-of-two block of 16 or more dividing it stays as it is."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import ml_dtypes
import numpy as np

from .layers import Layer, LayerForm
from .nbits import pack_nbits

__all__ = ["INT4_ACC0", "INT4_ACC1", "INT4_ACC4", "NBITS_LAYER_FORMS", "block_for", "int4_codes"]

#: The block along K (the largest power of two ≤ this dividing K, at least 16).
BLOCK = 32


def block_for(k: int) -> int:
    """The block size along K for a [K, N] weight (0: none ≥ 16 divides K)."""
    b = BLOCK
    while b >= 16:
        if k % b == 0:
            return b
        b //= 2
    return 0


def int4_codes(wk: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int4 codes of a [K, N] weight blocked along K (scale = max|w| / 7 per block
    and column, 1 for an all-zero block; codes round half to even, clipped to [-8, 7]) and
    the [K/block, N] scales."""
    k, n = wk.shape
    blocks = wk.reshape(k // block, block, n)
    amax = np.max(np.abs(blocks), axis=1)
    scale = np.where(amax > 0, amax / np.float32(7), np.float32(1)).astype(np.float32)
    codes = np.clip(np.rint(blocks / scale[:, None, :]), -8, 7).astype(np.int8)
    return codes.reshape(k, n), scale


def _writer(level: int):
    def write(out: Any, layer: Layer, node: Any, arrays: Any, qmax: int, specs: Any = None
              ) -> list[Any] | None:
        """One MatMulNBits node in place of ``node`` (module doc)."""
        w = arrays[layer.weight]
        trans = layer.op == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute)
        wk = np.ascontiguousarray(w.T if trans else w, np.float32)
        k, n = wk.shape
        block = block_for(k)
        if not block:
            return None
        codes, scale = int4_codes(wk, block)
        q = SimpleNamespace(y=codes.astype(ml_dtypes.int4), block_size=block, axis=0, scale=scale, zero_point=None)
        packed, scales, _ = pack_nbits(q)  # symmetric: every zero point is the implicit 8
        p, wn = layer.name, layer.weight
        ins = [node.input[0], out.const(packed, f"{wn}.int4_acc{level}"),
               out.const(scales, f"{wn}.int4_acc{level}_scales")]
        if layer.bias:
            ins += ["", "", out.const(np.asarray(arrays[layer.bias], np.float32).reshape(-1),
                                      f"{layer.bias}.int4_acc{level}")]
        return [out.helper.make_node("MatMulNBits", ins, [node.output[0]],
                                     name=f"{p}.matmulnbits", domain="com.microsoft", K=k,
                                     N=n, bits=4, block_size=block, accuracy_level=level)]
    return write


INT4_ACC0, INT4_ACC1, INT4_ACC4 = (
    LayerForm(f"int4-acc{a}", ("MatMul", "Gemm"), frozenset({"MatMulNBits"}), _writer(a))
    for a in (0, 1, 4))
#: The 4-bit forms' names (a plan never moves a layer into one for fidelity).
NBITS_LAYER_FORMS = frozenset(f.name for f in (INT4_ACC0, INT4_ACC1, INT4_ACC4))
