"""Conv nets nobody here tuned: a YOLO-style detector built with ``onnx.helper``.

:func:`yolo_model` writes what an exporter writes for a YOLOv8-like detector: every Conv
followed by SiLU as ``Sigmoid`` · ``Mul`` (how torch.onnx writes ``nn.SiLU`` below opset 22),
stride-2 stages, C2f blocks (a 1×1 Conv, ``Split``, bottlenecks of two 3×3 Convs with a
residual ``Add``, ``Concat``, a 1×1 Conv), SPPF (three 5×5 ``MaxPool``), an FPN/PAN neck
(``Resize`` nearest ×2, ``Concat``) and a decoupled detect head per level (box: 4 × 16 DFL
logits; classes), decoded as exporters do (``Softmax`` over the 16 bins and a 1×1 Conv with
weights 0..15, anchor points, × stride; ``Sigmoid`` on the classes) into **one output**
``output0`` [N, 4 + classes, anchors] that concatenates box coordinates and class scores.

Weights are seeded, with BatchNorm folded in the way a trained net's are: each Conv's output
channel c is fitted on calibration images to mean β_c (mostly negative: sparse SiLU outputs)
and a spread γ_c (log-normal, a few outlier channels ×4–10: the per-channel range spread that
makes per-tensor activation scales hard) times the channel's share of the layer's signal; the
class logits sit near −6 (rare positives), the box logits spread as DFL logits do. The net is
still more sensitive to noise than a trained one (random weights do not read only where their
inputs vary), so its SQNR figures run lower than a trained YOLO's; its latency is a YOLOv8n's
(the same Conv shapes).
:func:`yolo_images` makes smooth image-like inputs in [0, 1] (blobs, edges, gradients).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["YOLO_INPUT", "yolo_images", "yolo_model"]

#: The input name of :func:`yolo_model` (as ultralytics names it).
YOLO_INPUT = "images"
_REG = 16  # DFL bins per box side
_OPSET = 17


class _Builder:
    """Nodes and weights in order; :meth:`conv` returns the SiLU output of a Conv."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.nodes: list[Any] = []
        self.weights: dict[str, np.ndarray] = {}
        self.targets: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # conv out -> (beta, gamma)
        self.n = 0

    def name(self, kind: str) -> str:
        self.n += 1
        return f"/{kind}_{self.n}"

    def node(self, op: str, inputs: list[str], n_out: int = 1, **attrs: Any) -> list[str]:
        from onnx import helper

        base = self.name(op.lower())
        outs = [f"{base}/out{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=base, **attrs))
        return outs

    def conv(self, x: str, cin: int, cout: int, k: int = 3, s: int = 1, act: bool = True,
             beta: np.ndarray | None = None, gamma: np.ndarray | None = None) -> str:
        """Conv (BatchNorm folded) and, with ``act``, SiLU as Sigmoid · Mul."""
        base = self.name("conv")
        w = self.rng.standard_normal((cout, cin, k, k)).astype(np.float32)
        w *= np.sqrt(2.0 / (cin * k * k))
        self.weights[base + ".weight"] = w
        self.weights[base + ".bias"] = np.zeros(cout, np.float32)
        from onnx import helper

        y = base + "/out"
        self.nodes.append(helper.make_node(
            "Conv", [x, base + ".weight", base + ".bias"], [y], name=base,
            kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4))
        if beta is None:  # a folded BatchNorm: mostly negative means, log-normal spread
            beta = (self.rng.normal(-0.4, 0.6, cout)).astype(np.float32)
        if gamma is None:
            gamma = np.exp(self.rng.normal(0.0, 0.5, cout)).astype(np.float32)
            hot = self.rng.random(cout) < 0.04  # a few outlier channels
            gamma[hot] *= self.rng.uniform(4, 10, int(hot.sum())).astype(np.float32)
        self.targets[base] = (beta, gamma)
        if not act:
            return y
        (sig,) = self.node("Sigmoid", [y])
        (out,) = self.node("Mul", [y, sig])
        return out

    def const(self, value: np.ndarray, kind: str = "const") -> str:
        name = self.name(kind)
        self.weights[name] = value
        return name

    def c2f(self, x: str, cin: int, cout: int, n: int, shortcut: bool = True) -> str:
        """C2f: 1×1 Conv, split in two, n bottlenecks on the second half, concat all, 1×1."""
        h = cout // 2
        y = self.conv(x, cin, 2 * h, 1)
        parts = self.node("Split", [y, self.const(np.array([h, h], np.int64), "split")], 2,
                          axis=1)
        outs = list(parts)
        cur = parts[1]
        for _ in range(n):
            b = self.conv(self.conv(cur, h, h, 3), h, h, 3)
            cur = self.node("Add", [cur, b])[0] if shortcut else b
            outs.append(cur)
        (cat,) = self.node("Concat", outs, axis=1)
        return self.conv(cat, (2 + n) * h, cout, 1)

    def sppf(self, x: str, c: int) -> str:
        h = c // 2
        y = self.conv(x, c, h, 1)
        pools = [y]
        for _ in range(3):
            pools.append(self.node("MaxPool", [pools[-1]], kernel_shape=[5, 5], pads=[2] * 4,
                                   strides=[1, 1])[0])
        (cat,) = self.node("Concat", pools, axis=1)
        return self.conv(cat, 4 * h, c, 1)

    def up(self, x: str) -> str:
        scales = self.const(np.array([1, 1, 2, 2], np.float32), "scales")
        return self.node("Resize", [x, "", scales], mode="nearest")[0]


def _anchors(size: int, strides: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Anchor points (cell centres, in cells) [2, A] and each anchor's stride [1, A]."""
    pts, st = [], []
    for s in strides:
        n = size // s
        yy, xx = np.meshgrid(np.arange(n) + 0.5, np.arange(n) + 0.5, indexing="ij")
        pts.append(np.stack([xx.ravel(), yy.ravel()]))
        st.append(np.full(n * n, s))
    return (np.concatenate(pts, 1).astype(np.float32),
            np.concatenate(st)[None].astype(np.float32))


def _graph(size: int, width: float, depth: float, classes: int, rng: np.random.Generator
           ) -> tuple[_Builder, str]:
    b = _Builder(rng)
    c = [max(8, int(round(v * width / 8)) * 8) for v in (64, 128, 256, 512, 1024)]
    n = [max(1, round(v * depth)) for v in (3, 6, 6, 3)]
    x = b.conv(YOLO_INPUT, 3, c[0], 3, 2)  # P1/2
    x = b.conv(x, c[0], c[1], 3, 2)  # P2/4
    x = b.c2f(x, c[1], c[1], n[0])
    x = b.conv(x, c[1], c[2], 3, 2)  # P3/8
    p3 = b.c2f(x, c[2], c[2], n[1])
    x = b.conv(p3, c[2], c[3], 3, 2)  # P4/16
    p4 = b.c2f(x, c[3], c[3], n[2])
    x = b.conv(p4, c[3], c[4], 3, 2)  # P5/32
    x = b.c2f(x, c[4], c[4], n[3])
    p5 = b.sppf(x, c[4])
    # neck (FPN top-down, PAN bottom-up)
    t4 = b.c2f(b.node("Concat", [b.up(p5), p4], axis=1)[0], c[4] + c[3], c[3], n[0], False)
    o3 = b.c2f(b.node("Concat", [b.up(t4), p3], axis=1)[0], c[3] + c[2], c[2], n[0], False)
    d = b.conv(o3, c[2], c[2], 3, 2)
    o4 = b.c2f(b.node("Concat", [d, t4], axis=1)[0], c[2] + c[3], c[3], n[0], False)
    d = b.conv(o4, c[3], c[3], 3, 2)
    o5 = b.c2f(b.node("Concat", [d, p5], axis=1)[0], c[3] + c[4], c[4], n[0], False)
    # detect head
    c2, c3 = max(16, c[2] // 4, 4 * _REG), max(c[2], min(classes, 100))
    boxes, scores = [], []
    for feat, ch in ((o3, c[2]), (o4, c[3]), (o5, c[4])):
        bx = b.conv(b.conv(b.conv(feat, ch, c2), c2, c2), c2, 4 * _REG, 1, act=False,
                    beta=rng.normal(0, 1.0, 4 * _REG).astype(np.float32),
                    gamma=np.full(4 * _REG, 2.5, np.float32))
        cl = b.conv(b.conv(b.conv(feat, ch, c3), c3, c3), c3, classes, 1, act=False,
                    beta=rng.normal(-6, 1.0, classes).astype(np.float32),
                    gamma=np.full(classes, 1.5, np.float32))
        shape = b.const(np.array([0, 4 * _REG, -1], np.int64), "shape")
        boxes.append(b.node("Reshape", [bx, shape])[0])
        shape = b.const(np.array([0, classes, -1], np.int64), "shape")
        scores.append(b.node("Reshape", [cl, shape])[0])
    (box,) = b.node("Concat", boxes, axis=2)  # [N, 64, A]
    (cls,) = b.node("Concat", scores, axis=2)  # [N, C, A]
    # DFL: softmax over the 16 bins, expectation by a 1x1 Conv with weights 0..15
    (r,) = b.node("Reshape", [box, b.const(np.array([0, 4, _REG, -1], np.int64), "shape")])
    (t,) = b.node("Transpose", [r], perm=[0, 2, 1, 3])  # [N, 16, 4, A]
    (sm,) = b.node("Softmax", [t], axis=1)
    dfl = b.const(np.arange(_REG, dtype=np.float32).reshape(1, _REG, 1, 1), "dfl.weight")
    (e,) = b.node("Conv", [sm, dfl], kernel_shape=[1, 1])  # [N, 1, 4, A]
    (dist,) = b.node("Reshape", [e, b.const(np.array([0, 4, -1], np.int64), "shape")])
    lt, rb = b.node("Split", [dist, b.const(np.array([2, 2], np.int64), "split")], 2, axis=1)
    pts, strides = _anchors(size, (8, 16, 32))
    anchor = b.const(pts[None], "anchors")
    (x1y1,) = b.node("Sub", [anchor, lt])
    (x2y2,) = b.node("Add", [anchor, rb])
    (cxy,) = b.node("Div", [b.node("Add", [x1y1, x2y2])[0], b.const(np.float32(2.0), "two")])
    (wh,) = b.node("Sub", [x2y2, x1y1])
    (xywh,) = b.node("Concat", [cxy, wh], axis=1)
    (boxes_px,) = b.node("Mul", [xywh, b.const(strides, "strides")])
    (prob,) = b.node("Sigmoid", [cls])
    (out,) = b.node("Concat", [boxes_px, prob], axis=1)
    return b, out


def yolo_images(n: int = 2, size: int = 320, seed: int = 0) -> np.ndarray:
    """``n`` smooth image-like inputs [n, 3, size, size] in [0, 1], float32: low-frequency
    colour fields, a gradient and a few filled rectangles and discs (edges, flat regions)."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, 3, size, size), np.float32)
    yy, xx = np.mgrid[0:size, 0:size] / size
    for i in range(n):
        coarse = rng.random((3, 5, 5))
        reps = -(-size // 4)
        field = np.kron(coarse, np.ones((reps, reps)))[:, :size, :size]
        img = 0.5 * field + 0.3 * (xx * rng.random() + yy * rng.random())[None]
        for _ in range(rng.integers(3, 8)):
            col = rng.random(3)[:, None, None]
            cx, cy, r = rng.random(), rng.random(), rng.uniform(0.05, 0.25)
            mask = ((xx - cx) ** 2 + (yy - cy) ** 2 < r * r) if rng.random() < 0.5 else (
                (np.abs(xx - cx) < r) & (np.abs(yy - cy) < r / 2))
            img = np.where(mask[None], col, img)
        img += rng.normal(0, 0.02, img.shape)
        out[i] = np.clip(img, 0, 1)
    return out


def yolo_model(size: int = 320, width: float = 0.25, depth: float = 0.34, classes: int = 80,
               seed: int = 0, calibration: int = 2) -> Any:
    """A YOLO-style detector as an ``onnx.ModelProto`` (module doc): input ``images``
    [N, 3, size, size] (``size`` a multiple of 32), output ``output0`` [N, 4 + classes, A] with
    A = Σ (size / s)² over strides 8, 16, 32. ``width`` / ``depth`` scale channels and blocks
    as YOLOv8's n/s/m variants do (0.25 / 0.34: "n"). Weights are seeded by ``seed`` and
    folded so that each Conv's pre-activations follow their β, γ on ``calibration`` images of
    :func:`yolo_images` at up to 256 × 256 (the statistics of a conv net hardly depend on the
    resolution; needs onnxruntime)."""
    from onnx import TensorProto, helper, numpy_helper

    if size % 32 or size < 32:
        raise ValueError(f"size {size}: give a multiple of 32")
    rng = np.random.default_rng(seed)
    b, out = _graph(size, width, depth, classes, rng)
    _fold(b, yolo_images(calibration, min(size, 256), seed + 1000))
    anchors = sum((size // s) ** 2 for s in (8, 16, 32))
    graph = helper.make_graph(
        b.nodes, "yolo_style",
        [helper.make_tensor_value_info(YOLO_INPUT, TensorProto.FLOAT, ["batch", 3, size, size])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["batch", 4 + classes, anchors])],
        [numpy_helper.from_array(v, k) for k, v in b.weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)],
                              producer_name="qcore.bench.nets")
    model.ir_version = 8
    _rename_output(model, out, "output0")
    return model


def _rename_output(model: Any, old: str, new: str) -> None:
    for node in model.graph.node:
        for i, o in enumerate(node.output):
            if o == old:
                node.output[i] = new
    model.graph.output[0].name = new


def _fold(b: _Builder, images: np.ndarray) -> None:
    """Set each Conv's weight and bias so that on ``images`` its output channel c has mean β_c
    and standard deviation γ_c · s_c / s, s_c the channel's own and s the layer's RMS one (a
    normalisation fitted, then folded). Per-channel division (a BatchNorm in training form)
    would lift channels that carry little of the signal to the level of the others, noise
    and all: a random net so normalised amplifies any perturbation by 30 dB and more (12-bit
    weights gave 28 dB at the output), which a trained net, whose weights read where its
    inputs vary, does not. One onnxruntime run of the graph with each Conv so normalised
    gives every Conv's statistics with its inputs already normalised."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    convs = list(b.targets)
    nodes, outs, extra = [], [], {}
    for n in _ancestors(b.nodes, {c + "/out" for c in convs}):
        if n.name not in b.targets:
            nodes.append(n)
            continue
        c = n.name
        raw = c + "/raw"
        conv = helper.make_node("Conv", list(n.input), [raw], name=c)
        conv.attribute.extend(n.attribute)
        beta, gamma = b.targets[c]
        extra[c + "/beta"] = beta.reshape(1, -1, 1, 1)
        extra[c + "/gamma"] = gamma.reshape(1, -1, 1, 1)
        nodes += [conv,
                  helper.make_node("ReduceMean", [raw], [c + "/mean"], axes=[0, 2, 3]),
                  helper.make_node("Sub", [raw, c + "/mean"], [c + "/d"]),
                  helper.make_node("Mul", [c + "/d", c + "/d"], [c + "/d2"]),
                  helper.make_node("ReduceMean", [c + "/d2"], [c + "/var"], axes=[0, 1, 2, 3]),
                  helper.make_node("Sqrt", [c + "/var"], [c + "/std"]),
                  helper.make_node("Div", [c + "/d", c + "/std"], [c + "/z"]),
                  helper.make_node("Mul", [c + "/z", c + "/gamma"], [c + "/zg"]),
                  helper.make_node("Add", [c + "/zg", c + "/beta"], [c + "/out"])]
        outs += [c + "/mean", c + "/std"]
    inits = [numpy_helper.from_array(v, k) for k, v in {**b.weights, **extra}.items()]
    g = helper.make_graph(
        nodes, "fold",
        [helper.make_tensor_value_info(YOLO_INPUT, TensorProto.FLOAT, list(images.shape))],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", _OPSET)])
    m.ir_version = 8
    so = ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    got = dict(zip(outs, s.run(outs, {YOLO_INPUT: images})))
    for c in convs:
        mean = got[c + "/mean"].ravel().astype(np.float64)
        std = float(got[c + "/std"].ravel()[0]) + 1e-6
        beta, gamma = b.targets[c]
        k = gamma / std
        w, bias = b.weights[c + ".weight"], b.weights[c + ".bias"]
        b.weights[c + ".weight"] = (w * k[:, None, None, None]).astype(np.float32)
        b.weights[c + ".bias"] = ((bias - mean) * k + beta).astype(np.float32)


def _ancestors(nodes: list[Any], wanted: set[str]) -> list[Any]:
    """The nodes ``wanted`` tensors depend on, in their order (the decode needs the size)."""
    need, keep = set(wanted), []
    for n in reversed(nodes):
        if any(o in need for o in n.output):
            keep.append(n)
            need.update(n.input)
    return keep[::-1]
