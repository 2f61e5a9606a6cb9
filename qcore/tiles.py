"""Plot-sized views of a round trip: RMSE per tile, max-pooling of a per-group grid, the
elements worth walking through. Pure NumPy, no UI."""

from __future__ import annotations

import warnings

import numpy as np

__all__ = ["HEAT_CELLS", "pool_max", "sample_indices", "tile_rmse"]

HEAT_CELLS = 96  # a heat map is at most HEAT_CELLS x HEAT_CELLS cells


def tile_size(n: int, cells: int = HEAT_CELLS) -> int:
    """Elements per tile along an axis of `n` elements, for at most `cells` tiles: the smallest
    size from ceil(n / cells) up whose last tile is at least half full (up to twice that size,
    so still a fine grid). A last tile of one row among tiles of eleven reads as a strip of
    another colour: its RMSE is over far fewer elements."""
    first = max(1, -(-n // cells))
    for size in range(first, 2 * first + 1):
        if n % size == 0 or 2 * (n % size) >= size:
            return size
    return first


def tile_rmse(x: np.ndarray, x_hat: np.ndarray,
              cells: int = HEAT_CELLS) -> tuple[np.ndarray, int, int]:
    """RMSE of x̂ − x over a grid of at most cells × cells tiles of x viewed as 2-D (rows =
    first axis); NaN/Inf pairs are left out. Returns (grid, rows per tile, columns per tile).
"""
    a = np.asarray(x, np.float32)
    b = np.asarray(x_hat, np.float32)
    a2 = a.reshape(a.shape[0], -1) if a.ndim > 1 else a.reshape(1, -1)
    b2 = b.reshape(a2.shape)
    rows, cols = a2.shape
    tr, tc = tile_size(rows, cells), tile_size(cols, cells)
    nr, nc = -(-rows // tr), -(-cols // tc)
    with np.errstate(all="ignore"):
        e = (b2 - a2).astype(np.float32)
        ok = np.isfinite(e)
        e2 = np.where(ok, e * e, 0).astype(np.float64)
    pad = ((0, nr * tr - rows), (0, nc * tc - cols))
    sse = np.pad(e2, pad).reshape(nr, tr, nc, tc).sum(axis=(1, 3))
    cnt = np.pad(ok, pad).reshape(nr, tr, nc, tc).sum(axis=(1, 3))
    with np.errstate(all="ignore"):
        return np.where(cnt > 0, np.sqrt(sse / np.maximum(cnt, 1)), np.nan), tr, tc


def pool_max(grid: np.ndarray, cells: int = HEAT_CELLS) -> tuple[np.ndarray, int, int]:
    """A 2-D grid reduced to at most cells × cells by taking the max of each tile; returns
    (pooled grid, rows per tile, columns per tile)."""
    g = np.asarray(grid, np.float64)
    g = g.reshape(g.shape[0], -1) if g.ndim > 1 else g.reshape(1, -1)
    rows, cols = g.shape
    tr, tc = max(1, -(-rows // cells)), max(1, -(-cols // cells))
    nr, nc = -(-rows // tr), -(-cols // tc)
    padded = np.full((nr * tr, nc * tc), np.nan)
    padded[:rows, :cols] = g
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmax(padded.reshape(nr, tr, nc, tc), axis=(1, 3)), tr, tc


def sample_indices(x: np.ndarray, x_hat: np.ndarray, k: int = 10) -> np.ndarray:
    """Elements worth walking through: the extremes, the largest error, NaN/Inf, random ones."""
    a = np.asarray(x, np.float32).reshape(-1)
    b = np.asarray(x_hat, np.float32).reshape(-1)
    picks: list[int] = []
    finite = np.isfinite(a)
    if finite.any():
        fa = np.where(finite, a, 0)
        picks += [int(np.argmin(np.where(finite, a, np.inf))),
                  int(np.argmax(np.where(finite, a, -np.inf))),
                  int(np.argmin(np.abs(np.where(finite, fa, np.inf))))]
        with np.errstate(all="ignore"):
            err = np.where(finite & np.isfinite(b), np.abs(b - a), -1)
        picks.append(int(np.argmax(err)))
    bad = np.flatnonzero(~finite)
    picks += [int(i) for i in bad[:2]]
    rng = np.random.default_rng(0)
    picks += [int(i) for i in rng.choice(a.size, size=min(a.size, k), replace=False)]
    out: list[int] = []
    for i in picks:
        if i not in out:
            out.append(i)
    return np.array(out[:k], np.int64)
