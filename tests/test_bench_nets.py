"""The YOLO-style conv net of qcore.bench.nets: the graph an exporter writes (SiLU as
Sigmoid · Mul after every Conv but the head's last ones, one concatenated output), onnx's full
checker and onnxruntime accept it, and its folded weights give the first Conv's pre-activations
the statistics the builder aimed for — checked by a NumPy convolution, not by onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import numpy_helper  # noqa: E402

from qcore.bench import nets  # noqa: E402

SIZE = 64


@pytest.fixture(scope="module")
def small():
    return nets.yolo_model(size=SIZE, width=0.125, depth=0.34, classes=8, seed=3)


def _run(model, x):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, {nets.YOLO_INPUT: x})


def test_the_graph_is_valid_and_has_one_output_of_boxes_and_scores(small):
    onnx.checker.check_model(small, full_check=True)
    assert [i.name for i in small.graph.input] == [nets.YOLO_INPUT]
    assert [o.name for o in small.graph.output] == ["output0"]
    x = nets.yolo_images(2, SIZE, seed=7)
    (y,) = _run(small, x)
    anchors = sum((SIZE // s) ** 2 for s in (8, 16, 32))
    assert y.shape == (2, 4 + 8, anchors)
    scores = y[:, 4:]
    assert scores.min() >= 0 and scores.max() <= 1
    assert np.isfinite(y).all()
    # boxes are in pixels: centres near the image, widths positive (the DFL expectation >= 0)
    assert np.all(y[:, 2:4] >= 0)
    assert -SIZE < y[:, 0:2].mean() < 2 * SIZE


def test_silu_follows_every_conv_as_sigmoid_times_mul(small):
    nodes = list(small.graph.node)
    consumers: dict[str, list] = {}
    for n in nodes:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    convs = [n for n in nodes if n.op_type == "Conv"]
    activated = 0
    for c in convs:
        after = consumers.get(c.output[0], [])
        ops = sorted(n.op_type for n in after)
        if ops == ["Mul", "Sigmoid"]:
            sig = next(n for n in after if n.op_type == "Sigmoid")
            mul = next(n for n in after if n.op_type == "Mul")
            assert set(mul.input) == {c.output[0], sig.output[0]}
            activated += 1
    # all but the 6 head outputs (box and class per level) and the DFL expectation
    assert activated == len(convs) - 7


def test_folded_first_conv_has_the_aimed_statistics():
    """The builder fits each Conv's output on its calibration images: channel c has mean β_c
    and standard deviation γ_c · s_c / s (s the layer's RMS standard deviation). The first
    Conv reads the image itself, so NumPy can recompute its pre-activations exactly."""
    size = 64
    model = nets.yolo_model(size=size, width=0.125, classes=8, seed=5)
    rng = np.random.default_rng(5)  # the builder's first draws: the first Conv's targets
    first = next(n for n in model.graph.node if n.op_type == "Conv")
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    w, b = inits[first.input[1]], inits[first.input[2]]
    x = nets.yolo_images(2, size, 5 + 1000)  # the calibration images
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((2, w.shape[0], size // 2, size // 2))
    for i in range(3):
        for j in range(3):
            patch = xp[:, :, i:i + size:2, j:j + size:2]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j].astype(np.float64))
    out += b.reshape(1, -1, 1, 1)
    mean, std = out.mean(axis=(0, 2, 3)), out.std(axis=(0, 2, 3))
    raw = rng.standard_normal(w.shape) * np.sqrt(2.0 / (3 * 9))  # the unfolded weights
    beta = rng.normal(-0.4, 0.6, w.shape[0])
    gamma = np.exp(rng.normal(0.0, 0.5, w.shape[0]))
    hot = rng.random(w.shape[0]) < 0.04
    gamma[hot] *= rng.uniform(4, 10, int(hot.sum()))
    np.testing.assert_allclose(mean, beta, atol=1e-3)
    # each channel's share of the signal: the raw Conv's own standard deviations
    raw_out = np.zeros_like(out)
    for i in range(3):
        for j in range(3):
            patch = xp[:, :, i:i + size:2, j:j + size:2]
            raw_out += np.einsum("nchw,oc->nohw", patch, raw[:, :, i, j])
    s_c = raw_out.std(axis=(0, 2, 3))
    np.testing.assert_allclose(std, gamma * s_c / np.sqrt(np.mean(s_c ** 2)), rtol=1e-3)


def test_a_size_that_is_not_a_multiple_of_32_is_refused():
    with pytest.raises(ValueError, match="multiple of 32"):
        nets.yolo_model(size=100)


def test_images_are_smooth_and_in_range():
    x = nets.yolo_images(3, 96, seed=1)
    assert x.shape == (3, 3, 96, 96) and x.dtype == np.float32
    assert x.min() >= 0 and x.max() <= 1
    # neighbouring pixels are close (image-like, unlike uniform noise)
    d = np.abs(np.diff(x, axis=3)).mean()
    assert d < 0.05
