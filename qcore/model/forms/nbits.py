"""The ``matmulnbits-node`` form: a weight-only int4/uint4 recipe blocked along K by a power of
two ≥ 16 that divides K becomes one ``com.microsoft`` ``MatMulNBits`` node (the MatMul with the
bias Add after it, or the Gemm with its C), written as
``onnxruntime.quantization.matmul_nbits_quantizer`` writes it (:func:`pack_nbits`).

``accuracy_level`` is left unset (0), as onnxruntime's quantizer leaves it: onnxruntime's QDQ
fusion sets 4 (``session.qdq_matmulnbits_accuracy_level``), which on this host runs slower than
float, while the unset level runs the float-compute kernel. A ragged last block (MatMulNBits
would pad) or a Gemm C of another length than N takes ``dq-matmul`` instead.
"""

from __future__ import annotations

import numpy as np

from ...errors import QuantizationError
from ...layout import BLOCKED, PER_AXIS
from ...recipes import Recipe
from ..fidelity import Quantized
from .base import Export, Form, Job, no_site
from .uses import WeightUse

__all__ = ["MATMULNBITS_NODE", "NBITS_FORMS", "NBITS_TYPES", "nbits8_block", "pack_nbits",
           "pack_nbits8", "write_nbits8"]

#: How an int4/uint4 weight blocked along K is written (``deployable_export``'s ``nbits_form``).
NBITS_FORMS = ("matmulnbits-node", "dq-matmul")
#: Integer code types MatMulNBits takes from a blocked DequantizeLinear.
NBITS_TYPES = ("int4", "uint4", "int8", "uint8")


def nbits(r: Recipe) -> bool:
    """Integer codes of 4 or 8 bits, per output channel or blocked along K by a power of two
    ≥ 16: what onnxruntime's DQ → MatMul fusion into MatMulNBits takes."""
    if r.mx or r.target not in NBITS_TYPES:
        return False
    b = r.block_size
    return r.granularity == PER_AXIS or (r.granularity == BLOCKED and b >= 16
                                         and b & (b - 1) == 0)


def nbits_node(r: Recipe) -> bool:
    """int4/uint4 blocked along K by a power of two ≥ 16: what one MatMulNBits node holds."""
    return nbits(r) and r.granularity == BLOCKED and r.target in ("int4", "uint4")


def pack_nbits(q: Quantized) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(B, scales, zero_points) of a ``MatMulNBits`` node for 4-bit codes ``q`` blocked along
    axis 0 of a [K, N] weight, in the layout ``onnxruntime.quantization.matmul_nbits_quantizer``
    writes: B [N, K/block, block/2] uint8 with element 2i in the low nibble and 2i+1 in the
    high one; scales [N, K/block] float32; zero points as uint4 codes packed two a byte per
    column, [N, ⌈(K/block)/2⌉], or None where every one is the implicit 8. int4 codes are
    stored as code + 8 (MatMulNBits reads unsigned codes), their zero point 0 as 8."""
    codes = np.asarray(q.y).astype(np.int16)
    k, n = codes.shape
    block = int(q.block_size)
    if q.axis != 0 or not block or k % block:
        raise QuantizationError(f"MatMulNBits packing needs codes blocked along axis 0 by a "
                                f"block dividing K={k}; got axis {q.axis}, block {block}")
    signed = np.dtype(q.y.dtype).name == "int4"
    shift = 8 if signed else 0
    u = (codes + shift).astype(np.uint8).T.reshape(n, k // block, block // 2, 2)
    packed = (u[..., 0] | (u[..., 1] << 4)).astype(np.uint8)
    scales = np.ascontiguousarray(np.asarray(q.scale, np.float32).T)
    if q.zero_point is None:
        zp = np.full(scales.shape, shift, np.uint8)
    else:
        zp = (np.asarray(q.zero_point).astype(np.int16) + shift).astype(np.uint8).T
    if np.all(zp == 8):
        return packed, scales, None
    nb = zp.shape[1]
    if nb % 2:
        zp = np.concatenate([zp, np.zeros((n, 1), np.uint8)], axis=1)
    zpp = (zp[:, 0::2] | (zp[:, 1::2] << 4)).astype(np.uint8)
    return packed, scales, np.ascontiguousarray(zpp[:, : (nb + 1) // 2])


def nbits8_block(q: Quantized, k: int) -> int:
    """The MatMulNBits block size for 8-bit codes ``q`` of a [K, N] weight (0: none): the
    recipe's block along K (a power of two >= 16 dividing K); for per-axis codes K itself when
    it is a power of two >= 16, else the largest power of two >= 16 dividing K (each column's
    scale then repeats once a block)."""
    if q.granularity == BLOCKED and q.axis == 0:
        b = int(q.block_size)
        return b if b >= 16 and not b & (b - 1) and k % b == 0 else 0
    if q.granularity != PER_AXIS or q.axis != 1:
        return 0
    b = k & -k  # the largest power of two dividing K
    return b if b >= 16 else 0


def pack_nbits8(q: Quantized, block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(B, scales, zero_points) of a ``MatMulNBits`` node with ``bits=8`` for 8-bit codes ``q``
    of a [K, N] weight: B [N, K/block, block] uint8 (int8 codes stored as code + 128: the kernel
    reads unsigned codes), scales [N, K/block] float32 (a per-axis scale repeated along K),
    zero points [N, K/block] uint8, or None where each is the implicit 128."""
    codes = np.asarray(q.y).astype(np.int16)
    k, n = codes.shape
    shift = 128 if np.dtype(q.y.dtype) == np.int8 else 0
    nb = k // block
    packed = np.ascontiguousarray((codes + shift).astype(np.uint8).T.reshape(n, nb, block))

    def per_block(a: np.ndarray) -> np.ndarray:
        a = np.asarray(a)
        return np.broadcast_to(a.reshape(-1, 1), (n, nb)) if a.ndim <= 1 else a.T

    scales = np.ascontiguousarray(per_block(np.asarray(q.scale, np.float32)), np.float32)
    zp = (np.full((n, nb), shift, np.int16) if q.zero_point is None
          else per_block(np.asarray(q.zero_point).astype(np.int16) + shift))
    zp = np.ascontiguousarray(zp, np.uint8)
    return packed, scales, None if np.all(zp == 128) else zp


def _replace_with_nbits(ex: Export, job: Job, packed: np.ndarray, scales: np.ndarray,
                        zps: np.ndarray | None, *, bits: int, block: int) -> None:
    """The job's MatMul (and its bias Add) or Gemm → one MatMulNBits node over the packed
    codes, scales and zero points (the same node for 4 and 8 bits)."""
    w, t, use = ex.w, job.tensor, job.use
    k, n_out = job.x.shape
    ins = [job.site, w.init(t + ".nbits", packed), w.init(t + ".nbits_scales", scales)]
    ins.append(w.init(t + ".nbits_zero_points", zps) if zps is not None else "")
    y = job.node.output[0]
    if use.bias is not None and job.n_bias == n_out:  # input 4 (g_idx) absent
        ins += ["", use.bias]
        if use.add is not None:  # the Add after a MatMul goes into the node
            y = ex.by_id[use.add].output[0]
            ex.replaced[use.add] = []
    while ins[-1] == "":
        ins.pop()
    ex.replaced[use.node] = [ex.helper.make_node(
        "MatMulNBits", ins, [y], name=w.name(t + ".matmulnbits"),
        domain="com.microsoft", K=k, N=n_out, bits=bits, block_size=block)]
    ex.uses_ms = True


def write_nbits8(ex: Export, job: Job, block: int) -> None:
    """8-bit codes as one ``MatMulNBits`` node (``bits=8``) at the unset accuracy level, which
    computes in float: equal to DequantizeLinear → MatMul. onnxruntime's own fusion of that
    pair sets level 4 (``session.qdq_matmulnbits_accuracy_level``), which quantizes the
    activations to int8 per block and changes the outputs (41.53 dB stated, 40.15 dB run, on a
    two-layer test model)."""
    _replace_with_nbits(ex, job, *pack_nbits8(job.q, block), bits=8, block=block)


def _weights(r: Recipe, nbits_form: str) -> bool:
    return nbits_node(r) and nbits_form == "matmulnbits-node"


def _demote(r: Recipe, use: WeightUse, x: np.ndarray, n_bias: int | None) -> str | None:
    """``dq-matmul`` for a ragged last block (MatMulNBits would pad) or a broadcast Gemm C."""
    if (x.shape[0 if use.kn else 1] % r.block_size
            or use.op == "Gemm" and use.bias is not None
            and n_bias != x.shape[1 if use.kn else 0]):
        return "dq-matmul"
    return None


def write(ex: Export, job: Job) -> None:
    """The MatMul (and its bias Add) or Gemm → one MatMulNBits node."""
    _replace_with_nbits(ex, job, *pack_nbits(job.q), bits=4, block=int(job.q.block_size))


MATMULNBITS_NODE = Form("matmulnbits-node", ("MatMul", "Gemm"), no_site, _weights,
                        frozenset({"MatMulNBits"}), write, kn=True, demote=_demote)
