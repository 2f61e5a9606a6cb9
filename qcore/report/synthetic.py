"""Write synthetic sharded checkpoints: transformer-shaped safetensors shards plus
``model.safetensors.index.json``, any size, for tests (a few MB) and benchmarks (GBs).

Each layer has q/k/v/o projections (hidden × hidden), gate/up (ffn × hidden), down
(hidden × ffn) and two norm gains (hidden); an embedding table comes first. Values are normal times a
per-row scale (log-normal across rows), with a few outlier input columns (×20) in every
matrix, so formats differ the way they do on real weights. Tensors are written in row chunks:
memory stays at one chunk however large the checkpoint. Deterministic for a seed.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import ml_dtypes
import numpy as np

__all__ = ["checkpoint_shapes", "write_checkpoint"]

_ST = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}
_ITEM = {"bfloat16": 2, "float16": 2, "float32": 4}
CHUNK_ELEMENTS = 1 << 22


def checkpoint_shapes(total_bytes: int, hidden: int = 256, dtype: str = "bfloat16",
                      vocab: int | None = None) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every tensor: enough layers to reach ``total_bytes`` (at least 1)."""
    h = int(hidden)
    f = int(round(h * 8 / 3 / 64)) * 64 or 64
    v = int(vocab) if vocab else 8 * h
    layer = [("self_attn.q_proj.weight", (h, h)), ("self_attn.k_proj.weight", (h, h)),
             ("self_attn.v_proj.weight", (h, h)), ("self_attn.o_proj.weight", (h, h)),
             ("mlp.gate_proj.weight", (f, h)), ("mlp.up_proj.weight", (f, h)),
             ("mlp.down_proj.weight", (h, f)), ("input_layernorm.weight", (h,)),
             ("post_attention_layernorm.weight", (h,))]
    per_layer = sum(int(np.prod(s)) for _, s in layer) * _ITEM[dtype]
    emb = v * h * _ITEM[dtype]
    n_layers = max(1, -(-(int(total_bytes) - emb) // per_layer))  # at least total_bytes
    shapes = [("model.embed_tokens.weight", (v, h))]
    for i in range(n_layers):
        shapes += [(f"model.layers.{i}.{n}", s) for n, s in layer]
    shapes.append(("model.norm.weight", (h,)))
    return shapes


def _values(rng: np.random.Generator, shape: tuple[int, ...], row0: int, rows: int,
            row_scale: np.ndarray, outliers: np.ndarray) -> np.ndarray:
    if len(shape) == 1:
        return (1.0 + 0.1 * rng.standard_normal(shape[0])).astype(np.float32)
    cols = shape[1]
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    x *= row_scale[row0:row0 + rows, None]
    x[:, outliers] *= np.float32(20.0)
    return x


def _encode(x: np.ndarray, dtype: str) -> bytes:
    if dtype == "bfloat16":
        return x.astype(ml_dtypes.bfloat16).view(np.uint16).astype("<u2").tobytes()
    return x.astype("<f2" if dtype == "float16" else "<f4").tobytes()


def write_checkpoint(folder: str | os.PathLike, total_bytes: int = 4 << 20, *,
                     hidden: int = 256, shards: int = 0, dtype: str = "bfloat16",
                     seed: int = 0, vocab: int | None = None) -> Path:
    """Write the checkpoint into ``folder``; returns its index.json path.

    ``shards``: how many files (default: about 500 MB each, at least 2).
    """
    if dtype not in _ST:
        raise ValueError(f"dtype={dtype!r}; valid: " + ", ".join(_ST))
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    shapes = checkpoint_shapes(total_bytes, hidden, dtype, vocab)
    sizes = [int(np.prod(s)) * _ITEM[dtype] for _, s in shapes]
    total = sum(sizes)
    n_shards = int(shards) or max(2, -(-total // (500 << 20)))
    n_shards = min(n_shards, len(shapes))
    # split the tensors in order into shards of about equal bytes
    target = total / n_shards
    groups: list[list[int]] = [[]]
    acc = 0
    for i, size in enumerate(sizes):
        if groups[-1] and acc >= target * len(groups) and len(groups) < n_shards:
            groups.append([])
        groups[-1].append(i)
        acc += size
    weight_map = {}
    names = [f"model-{k + 1:05d}-of-{len(groups):05d}.safetensors" for k in range(len(groups))]
    for k, idx in enumerate(groups):
        header, off = {}, 0
        for i in idx:
            name, shape = shapes[i]
            header[name] = {"dtype": _ST[dtype], "shape": list(shape),
                            "data_offsets": [off, off + sizes[i]]}
            off += sizes[i]
            weight_map[name] = names[k]
        hb = json.dumps(header, separators=(",", ":")).encode()
        hb += b" " * (-len(hb) % 8)
        with open(out / names[k], "wb") as fh:
            fh.write(struct.pack("<Q", len(hb)) + hb)
            for i in idx:
                name, shape = shapes[i]
                rng = np.random.default_rng([seed, i])
                if len(shape) == 1:
                    fh.write(_encode(_values(rng, shape, 0, 0, np.ones(1), np.zeros(0, int)),
                                     dtype))
                    continue
                rows, cols = shape
                row_scale = (0.02 * np.exp(0.3 * rng.standard_normal(rows))).astype(np.float32)
                outliers = rng.choice(cols, size=max(1, cols // 256), replace=False)
                step = max(1, CHUNK_ELEMENTS // cols)
                for r0 in range(0, rows, step):
                    n = min(step, rows - r0)
                    fh.write(_encode(_values(rng, shape, r0, n, row_scale, outliers), dtype))
    index = out / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map},
                                indent=1), encoding="utf-8")
    return index
