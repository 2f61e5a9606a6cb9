"""Granularity as data: every granularity is one index map.

x is viewed as (pre, dim, post) around the quantization axis and the scale as
(scale_pre, scale_blocks, scale_post). Per-tensor is one block covering everything, per-axis is
block 1 along the axis, blocked is block `block_size` with the scale carrying the other dims.
Element (p, d, q) uses scale index
``((p if scale_pre > 1 else 0) * scale_blocks + d // block) * scale_post + (q if scale_post > 1 else 0)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .errors import QuantizationError
from .versions import OpVersion, check_attribute, check_granularity

PER_TENSOR = "per-tensor"
PER_AXIS = "per-axis"
BLOCKED = "blocked"
GRANULARITIES = (PER_TENSOR, PER_AXIS, BLOCKED)


@dataclass(frozen=True)
class Layout:
    """Where each element finds its scale."""

    granularity: str
    axis: int | None
    block: int
    pre: int
    dim: int
    post: int
    scale_pre: int
    scale_blocks: int
    scale_post: int

    @property
    def uniform(self) -> bool:
        return self.granularity == PER_TENSOR

    def as_ints(self) -> tuple[int, int, int, int, int, int, int]:
        """(pre, dim, post, block, scale_pre, scale_blocks, scale_post) for the kernels."""
        return (self.pre, self.dim, self.post, self.block, self.scale_pre, self.scale_blocks,
                self.scale_post)

    def expand(self, values: np.ndarray) -> np.ndarray:
        """Broadcast per-scale values to every element (for tests and reports, not the kernels)."""
        v = np.asarray(values).reshape(-1)
        if self.uniform:
            return np.broadcast_to(v[0], (self.pre * self.dim * self.post,))
        v3 = v.reshape(self.scale_pre, self.scale_blocks, self.scale_post)
        v3 = np.repeat(v3, self.block, axis=1)[:, : self.dim, :]
        return np.broadcast_to(v3, (self.pre, self.dim, self.post)).reshape(-1)


def block_size_range(dim: int, scale_dim: int) -> tuple[int, int | None]:
    """The block sizes the spec accepts for an axis of length dim and scale_dim scales.

    `[ceil(Di/Si), ceil(Di/(Si-1)) - 1]`; None as the upper end means unbounded (Si == 1).
    """
    lo = max(1, math.ceil(dim / scale_dim)) if scale_dim else 1
    hi = None if scale_dim <= 1 else math.ceil(dim / (scale_dim - 1)) - 1
    return lo, hi


def normalize_axis(ov: OpVersion, axis: int, ndim: int) -> int:
    if ndim == 0:
        raise QuantizationError(
            f"{ov.label}: x is 0-d (a scalar), so only a per-tensor scale (one element) is "
            f"valid; per-axis and blocked scales need x of rank >= 1"
        )
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise QuantizationError(f"{ov.label}: axis={axis!r} must be an integer")
    if not -ndim <= axis < ndim:
        raise QuantizationError(
            f"{ov.label}: axis={axis} is out of range for x of rank {ndim}; "
            f"valid: {-ndim}..{ndim - 1}"
        )
    return int(axis) % ndim


def resolve_layout(ov: OpVersion, x_shape: tuple[int, ...], scale_shape: tuple[int, ...],
                   axis: int, block_size: int, scale_name: str) -> Layout:
    """Decide the granularity from the shapes (as the spec does) and validate it."""
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)):
        raise QuantizationError(f"{ov.label}: block_size={block_size!r} must be an integer")
    if block_size < 0:
        raise QuantizationError(
            f"{ov.label}: block_size={block_size} must be >= 0 (0 means not blocked)"
        )
    n = int(np.prod(x_shape, dtype=np.int64))
    scale_size = int(np.prod(scale_shape, dtype=np.int64))
    if scale_size == 1 and (block_size == 0 or len(scale_shape) <= 1):
        return Layout(PER_TENSOR, None, max(n, 1), 1, n, 1, 1, 1, 1)
    if scale_size == 0 and n > 0:  # an empty x along the axis has no scales: that is valid
        raise QuantizationError(f"{ov.label}: {scale_name} is empty; it needs at least one value")
    if block_size == 0:
        if len(scale_shape) != 1:
            raise QuantizationError(
                f"{ov.label}: {scale_name} has shape {scale_shape}, which fits no granularity "
                f"without block_size: per-tensor needs one value, per-axis a 1-D scale of "
                f"length x.shape[axis]; a scale of rank {len(scale_shape)} needs block_size > 0"
            )
        check_granularity(ov, PER_AXIS, f"a 1-D {scale_name} of length {scale_size}")
        ax = normalize_axis(ov, axis, len(x_shape))
        if x_shape[ax] != scale_size:
            raise QuantizationError(
                f"{ov.label}: per-axis {scale_name} has length {scale_size} but x.shape[{ax}] is "
                f"{x_shape[ax]} (x shape {tuple(x_shape)}, axis={axis}); they must be equal"
            )
        pre = int(np.prod(x_shape[:ax], dtype=np.int64))
        post = int(np.prod(x_shape[ax + 1:], dtype=np.int64))
        return Layout(PER_AXIS, ax, 1, pre, x_shape[ax], post, 1, scale_size, 1)
    check_attribute(ov, "block_size")
    check_granularity(ov, BLOCKED, f"block_size={block_size}")
    ax = normalize_axis(ov, axis, len(x_shape))
    if len(scale_shape) != len(x_shape) or any(
        s != d for i, (s, d) in enumerate(zip(scale_shape, x_shape)) if i != ax
    ):
        expected = list(x_shape)
        expected[ax] = math.ceil(x_shape[ax] / block_size) if block_size else 0
        raise QuantizationError(
            f"{ov.label}: blocked {scale_name} has shape {tuple(scale_shape)} but x has shape "
            f"{tuple(x_shape)}; with axis={axis} and block_size={block_size} it must be "
            f"{tuple(expected)} (x's shape with dimension {ax} divided into blocks)"
        )
    lo, hi = block_size_range(x_shape[ax], scale_shape[ax])
    if hi is not None and hi < lo:  # e.g. 9 split into 4 blocks: no block size does it
        expected = list(scale_shape)
        expected[ax] = math.ceil(x_shape[ax] / block_size) if block_size else 0
        raise QuantizationError(
            f"{ov.label}: {scale_name} has {scale_shape[ax]} blocks along axis {ax}, but no "
            f"block size splits x.shape[{ax}]={x_shape[ax]} into {scale_shape[ax]} blocks; "
            f"with block_size={block_size} {scale_name} must have shape {tuple(expected)}"
        )
    if block_size < lo or (hi is not None and block_size > hi):
        valid = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise QuantizationError(
            f"{ov.label}: block_size={block_size} does not fit x.shape[{ax}]={x_shape[ax]} with "
            f"{scale_shape[ax]} blocks; valid block sizes: {valid} "
            f"(the spec's [ceil(Di/Si), ceil(Di/(Si-1))-1])"
        )
    pre = int(np.prod(x_shape[:ax], dtype=np.int64))
    post = int(np.prod(x_shape[ax + 1:], dtype=np.int64))
    return Layout(BLOCKED, ax, int(block_size), pre, x_shape[ax], post, pre, scale_shape[ax], post)
