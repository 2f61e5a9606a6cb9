"""Granularity as data: every granularity is one index map.

x is viewed as (pre, dim, post) around the quantization axis and the scale as
(scale_pre, scale_blocks, scale_post). Per-tensor is one block covering everything, per-axis is
block 1 along the axis, blocked is block `block_size` with the scale carrying the other dims.
Element (p, d, q) uses scale index
``((p if scale_pre > 1 else 0) * scale_blocks + d // block) * scale_post + (q if scale_post > 1 else 0)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from .errors import QuantizationError
from .versions import OpVersion, check_attribute, check_granularity

PER_TENSOR = "per-tensor"
PER_AXIS = "per-axis"
BLOCKED = "blocked"
GRANULARITIES = (PER_TENSOR, PER_AXIS, BLOCKED)


@dataclass(frozen=True)
class Layout:
    """Where each element finds its scale: the one index map, and its NumPy-side views.

    The kernels walk this map with :mod:`qcore.kernels`; everything on the NumPy side (scale
    shapes, gathering an element's scale, reducing x over each scale's group) goes through the
    methods here.
    """

    granularity: str
    axis: int | None
    block: int
    pre: int
    dim: int
    post: int
    scale_pre: int
    scale_blocks: int
    scale_post: int
    x_shape: tuple[int, ...] | None = None  # None when only the (pre, dim, post) view is known

    @classmethod
    def from_granularity(cls, x_shape: tuple[int, ...], granularity: str, axis: int = 0,
                         block_size: int = 0) -> Layout:
        """The layout of a granularity for x of ``x_shape`` (no operator version involved).

        Per-tensor ignores ``axis`` and ``block_size``; per-axis ignores ``block_size``;
        blocked splits ``x_shape[axis]`` into ceil(dim / block_size) blocks (the last one short).
        """
        x_shape = tuple(int(d) for d in x_shape)
        if granularity not in GRANULARITIES:
            raise QuantizationError(f"granularity={granularity!r} is not valid; valid: "
                                    + ", ".join(GRANULARITIES))
        n = int(np.prod(x_shape, dtype=np.int64))
        if granularity == PER_TENSOR:
            return cls(PER_TENSOR, None, max(n, 1), 1, n, 1, 1, 1, 1, x_shape)
        ndim = len(x_shape)
        if ndim == 0:
            raise QuantizationError(f"{granularity} quantization needs x of rank >= 1; x is 0-d")
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) \
                or not -ndim <= axis < ndim:
            raise QuantizationError(f"axis={axis!r} is out of range for x of rank {ndim}; "
                                    f"valid: {-ndim}..{ndim - 1}")
        ax = int(axis) % ndim
        pre = int(np.prod(x_shape[:ax], dtype=np.int64))
        dim = x_shape[ax]
        post = int(np.prod(x_shape[ax + 1:], dtype=np.int64))
        if granularity == PER_AXIS:
            return cls(PER_AXIS, ax, 1, pre, dim, post, 1, dim, 1, x_shape)
        if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)) \
                or block_size < 1:
            raise QuantizationError(f"block_size={block_size!r} must be a positive integer for "
                                    f"blocked quantization")
        bs = int(block_size)
        return cls(BLOCKED, ax, bs, pre, dim, post, pre, -(-dim // bs), post, x_shape)

    @property
    def uniform(self) -> bool:
        return self.granularity == PER_TENSOR

    @property
    def size(self) -> int:
        """Number of elements of x."""
        return self.pre * self.dim * self.post

    @property
    def n_scales(self) -> int:
        """Number of scales (groups)."""
        return self.scale_pre * self.scale_blocks * self.scale_post

    def as_ints(self) -> tuple[int, int, int, int, int, int, int]:
        """(pre, dim, post, block, scale_pre, scale_blocks, scale_post) for the kernels."""
        return (self.pre, self.dim, self.post, self.block, self.scale_pre, self.scale_blocks,
                self.scale_post)

    def scale_shape(self) -> tuple[int, ...]:
        """The scale's shape as ONNX lays it out: () per-tensor, (dim,) per-axis, x's shape
        with the axis divided into blocks when blocked."""
        if self.granularity == PER_TENSOR:
            return ()
        if self.granularity == PER_AXIS:
            return (self.dim,)
        if self.x_shape is None:
            return (self.scale_pre, self.scale_blocks, self.scale_post)
        shape = list(self.x_shape)
        shape[self.axis] = self.scale_blocks
        return tuple(shape)

    # -- the index map --------------------------------------------------------------------------

    def coordinates(self, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(p, d, q) of flat (C-order) element indices in the (pre, dim, post) view."""
        flat = np.asarray(flat, np.int64)
        p, r = np.divmod(flat, max(self.dim * self.post, 1))
        d, q = np.divmod(r, max(self.post, 1))
        return p, d, q

    def scale_of(self, p: np.ndarray, d: np.ndarray, q: np.ndarray) -> np.ndarray:
        """The flat scale index of element (p, d, q) (arrays broadcast): the index map."""
        sp = p if self.scale_pre > 1 else 0
        sq = q if self.scale_post > 1 else 0
        return (sp * self.scale_blocks + np.asarray(d) // self.block) * self.scale_post + sq

    def scale_index(self, flat: np.ndarray) -> np.ndarray:
        """The flat scale index of each flat element index."""
        flat = np.asarray(flat, np.int64)
        return np.broadcast_to(np.asarray(self.scale_of(*self.coordinates(flat)), np.int64),
                               flat.shape)

    def expand(self, values: np.ndarray) -> np.ndarray:
        """Per-scale values broadcast to every element, flat (for tests and reports, not the
        kernels)."""
        v = np.asarray(values).reshape(-1)
        if self.uniform:
            return np.broadcast_to(v[0], (self.size,))
        p, d, q = np.ogrid[:self.pre, :self.dim, :self.post]
        index = np.broadcast_to(self.scale_of(p, d, q), (self.pre, self.dim, self.post))
        return v[index].reshape(-1)

    # -- group views ----------------------------------------------------------------------------

    def view3(self, x: np.ndarray) -> np.ndarray:
        """x as (pre, dim, post)."""
        return np.asarray(x).reshape(self.pre, self.dim, self.post)

    def reduce_groups(self, x: np.ndarray, ufunc: np.ufunc) -> np.ndarray:
        """``ufunc``-reduce x over each scale's group: one value per scale, in scale order."""
        x3 = self.view3(x)
        if self.block >= self.dim:
            r = ufunc.reduce(x3, axis=1, keepdims=True)
        elif self.block == 1:
            r = x3
        else:
            r = ufunc.reduceat(x3, np.arange(0, self.dim, self.block), axis=1)
        if self.scale_pre == 1 and r.shape[0] != 1:
            r = ufunc.reduce(r, axis=0, keepdims=True)
        if self.scale_post == 1 and r.shape[2] != 1:
            r = ufunc.reduce(r, axis=2, keepdims=True)
        return np.ascontiguousarray(r).reshape(-1)

    def group_matrix(self, x: np.ndarray, fill: float = np.nan) -> np.ndarray:
        """x as (groups, elements of a group) in scale order; a short last block is padded
        with ``fill``."""
        a = np.asarray(x)
        if self.granularity == PER_TENSOR:
            return a.reshape(1, -1)
        x3 = self.view3(a)
        if self.granularity == PER_AXIS:
            return x3.transpose(1, 0, 2).reshape(self.dim, self.pre * self.post)
        nb, block = self.scale_blocks, self.block
        if nb * block != self.dim:
            padded = np.full((self.pre, nb * block, self.post), fill, a.dtype)
            padded[:, :self.dim, :] = x3
            x3 = padded
        return x3.reshape(self.pre, nb, block, self.post).transpose(0, 1, 3, 2).reshape(
            self.pre * nb * self.post, block)


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
        return Layout.from_granularity(x_shape, PER_TENSOR)
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
        return Layout.from_granularity(x_shape, PER_AXIS, ax)
    check_attribute(ov, "block_size")
    check_granularity(ov, BLOCKED, f"block_size={block_size}")
    ax = normalize_axis(ov, axis, len(x_shape))
    layout = Layout.from_granularity(x_shape, BLOCKED, ax, block_size)
    expected = layout.scale_shape()
    if len(scale_shape) != len(x_shape) or any(
        s != d for i, (s, d) in enumerate(zip(scale_shape, x_shape)) if i != ax
    ):
        raise QuantizationError(
            f"{ov.label}: blocked {scale_name} has shape {tuple(scale_shape)} but x has shape "
            f"{tuple(x_shape)}; with axis={axis} and block_size={block_size} it must be "
            f"{tuple(expected)} (x's shape with dimension {ax} divided into blocks)"
        )
    lo, hi = block_size_range(x_shape[ax], scale_shape[ax])
    if hi is not None and hi < lo:  # e.g. 9 split into 4 blocks: no block size does it
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
    if layout.scale_blocks != scale_shape[ax]:  # only along an empty axis: keep the scale's
        layout = replace(layout, scale_blocks=int(scale_shape[ax]))
    return layout  # else a block size in the spec's range makes exactly scale_shape[ax] blocks
