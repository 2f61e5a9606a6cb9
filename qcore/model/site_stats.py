"""Range statistics of one activation site, and a sentence that reads them.

Why a site hurts under one format and not another is a question about the shape of its values:
int8 (and every integer format) spaces its codes evenly over [−max|x|, max|x|], so a few
channels far larger than the rest take the range and leave the bulk few codes; float8's steps
grow with the magnitude, so the bulk keeps its relative precision. :func:`range_stats` gives
the numbers that say which case a site is (pure numpy, no model), :func:`reading` the sentence.

Definitions (docs/semantics.md style): channels are the last axis (a transformer's hidden
features); a channel is an *outlier* when its own max|x| exceeds :data:`OUTLIER_RATIO` times the
median of the channels' max|x|; the *outliers' share of the range* is the part of
[0, max|x|] that only outlier channels reach: 1 − (largest non-outlier max|x|) / max|x|.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["OUTLIER_RATIO", "range_stats", "reading", "token_rows"]

#: A channel whose max|x| exceeds this many times the median channel's is an outlier channel.
OUTLIER_RATIO = 6.0


def token_rows(values: Sequence[np.ndarray], batches: Sequence[dict[str, np.ndarray]],
               order: Sequence[int] | None = None) -> np.ndarray:
    """A site's values as one (rows, channels) array: its real tokens, in input order.

    ``values``: the site's float values, one array per batch (a Gemm reads them flattened to
    (batch × sequence, channels)); ``batches``: the feeds; ``order``: row j of the concatenated
    batches is input ``order[j]`` (None: inputs in order). Where a batch has an
    ``attention_mask`` of matching size, its padded positions are left out and the rows are
    put back in input order — the layout of the shipped activations (``datasets/``: every
    sentence's tokens, concatenated), so the same site has the same values on both pages."""
    per_input: list[np.ndarray] = []
    masked = True
    for v, b in zip(values, batches):
        v = np.asarray(v)
        channels = v.shape[-1] if v.ndim else 1
        mask = b.get("attention_mask")
        if mask is None or v.ndim < 1 or v.size != np.size(mask) * channels:
            masked = False
            per_input.append(v.reshape(-1, channels))
            continue
        m = np.asarray(mask).astype(bool)
        rows = v.reshape(m.shape + (channels,))
        per_input.extend(rows[i][m[i]] for i in range(m.shape[0]))
    if masked and order is not None and len(order) == len(per_input):
        back = np.argsort(np.asarray(order))
        per_input = [per_input[j] for j in back]
    return np.concatenate(per_input) if per_input else np.zeros((0, 1), np.float32)


def range_stats(values: Sequence[np.ndarray] | np.ndarray) -> dict[str, Any]:
    """max|x|, std, max|x| / std, excess kurtosis, the outlier channels (last axis; indices,
    largest first) and their share of the range, of a site's values (one array per batch, or
    one array). Non-finite values are left out; an empty or all-zero site gives zeros."""
    arrays = [np.asarray(values, np.float64)] if isinstance(values, np.ndarray) else \
        [np.asarray(v, np.float64) for v in values]
    channels = arrays[0].shape[-1] if arrays and arrays[0].ndim else 1
    flat = np.concatenate([a.reshape(-1, channels) for a in arrays]) if arrays else \
        np.zeros((0, 1))
    finite = np.where(np.isfinite(flat), flat, np.nan)
    x = finite[np.isfinite(finite)]
    empty = {"max_abs": 0.0, "std": 0.0, "max_over_std": 0.0, "excess_kurtosis": 0.0,
             "channels": int(channels), "outlier_channels": [], "outlier_share": 0.0,
             "outlier_ratio": 0.0}
    if x.size == 0:
        return empty
    max_abs = float(np.abs(x).max())
    std = float(x.std())
    if max_abs == 0 or std == 0:
        return {**empty, "max_abs": max_abs, "std": std}
    centred = x - x.mean()
    kurt = float(np.mean(centred ** 4) / np.mean(centred ** 2) ** 2 - 3.0)
    with warnings.catch_warnings():  # a channel with no finite value: NaN, then 0
        warnings.simplefilter("ignore", RuntimeWarning)
        per_channel = np.nanmax(np.abs(finite), axis=0)
    per_channel = np.nan_to_num(per_channel, nan=0.0)
    median = float(np.median(per_channel))
    outliers = np.flatnonzero(per_channel > OUTLIER_RATIO * median) if median > 0 else \
        np.flatnonzero(per_channel > 0)
    rest = np.delete(per_channel, outliers)
    rest_max = float(rest.max()) if rest.size else 0.0
    order = outliers[np.argsort(-per_channel[outliers])]
    return {"max_abs": max_abs, "std": std, "max_over_std": max_abs / std,
            "excess_kurtosis": kurt, "channels": int(channels),
            "outlier_channels": [int(i) for i in order],
            "outlier_share": (1.0 - rest_max / max_abs) if order.size else 0.0,
            "outlier_ratio": (max_abs / rest_max) if order.size and rest_max > 0 else 0.0}


def reading(stats: dict[str, Any]) -> str:
    """One sentence that reads :func:`range_stats` for a learner: what the shape of the values
    does to int8's evenly spaced codes and to float8's."""
    n = len(stats["outlier_channels"])
    if stats["max_abs"] == 0:
        return "Every value is 0: any format holds it exactly."
    if n:
        which = ", ".join(str(i) for i in stats["outlier_channels"][:4]) + \
            ("…" if n > 4 else "")
        return (f"{n} of {stats['channels']} channels ({which}) reach "
                f"{stats['outlier_ratio']:.0f}× the rest's largest value and take "
                f"{100 * stats['outlier_share']:.0f} % of the range: int8's evenly spaced "
                f"codes spend that share on them and leave the other channels "
                f"{100 * (1 - stats['outlier_share']):.0f} % of the codes; float8's steps grow "
                f"with magnitude, so the small channels keep their relative precision.")
    if stats["max_over_std"] > 20 or stats["excess_kurtosis"] > 10:
        return (f"No single channel stands out, but the tail is heavy (max|x| is "
                f"{stats['max_over_std']:.0f} standard deviations out, excess kurtosis "
                f"{stats['excess_kurtosis']:.0f}): int8's even steps are sized for the rare "
                f"large values; float8's grow with magnitude.")
    return (f"The values are evenly spread (max|x| {stats['max_over_std']:.1f} standard "
            f"deviations out, excess kurtosis {stats['excess_kurtosis']:.1f}): int8's even "
            f"steps suit them, and float8 gains little.")
