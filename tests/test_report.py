"""qcore.report: lazy sources, recipes against the onnx reference, rows, resume, the command."""

from __future__ import annotations

import io
import json
import math
import struct
from contextlib import redirect_stdout
from pathlib import Path

import ml_dtypes
import numpy as np
import pandas as pd
import pytest
from conftest import interrupt_report

from qcore.io import TensorFileError
from qcore.report import (
    DEFAULT_RECIPES,
    list_tensors,
    parse_recipe,
    read_rows,
    read_tensor,
    run_report,
    summarize,
)
from qcore.report.__main__ import main
from qcore.report.sliced import run_recipe
from qcore.report.stats import tensor_stats
from qcore.report.synthetic import write_checkpoint

RNG = np.random.default_rng(7)


def st_write(path: Path, tensors: dict[str, tuple[str, tuple, bytes]]) -> None:
    """A safetensors file written by hand from {name: (dtype tag, shape, raw bytes)}."""
    header, off, body = {}, 0, b""
    for name, (tag, shape, raw) in tensors.items():
        header[name] = {"dtype": tag, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        body += raw
    hb = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(hb)) + hb + body)


def weights(shape, scale=0.05) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


@pytest.fixture
def single(tmp_path) -> tuple[Path, dict[str, np.ndarray]]:
    """One .safetensors with float32, float16, bfloat16 and an int64 tensor."""
    w32 = weights((48, 64))
    w16 = weights((32, 40)).astype(np.float16)
    wbf = weights((24, 64)).astype(ml_dtypes.bfloat16)
    ids = np.arange(6, dtype=np.int64)
    p = tmp_path / "model.safetensors"
    st_write(p, {"a.weight": ("F32", w32.shape, w32.tobytes()),
                 "b.weight": ("F16", w16.shape, w16.tobytes()),
                 "c.weight": ("BF16", wbf.shape, wbf.view(np.uint16).tobytes()),
                 "ids": ("I64", ids.shape, ids.tobytes())})
    return p, {"a.weight": w32, "b.weight": w16.astype(np.float32),
               "c.weight": wbf.astype(np.float32)}


# ---------------------------------------------------------------------------------------------
# sources


def test_safetensors_lists_headers_and_reads_each_dtype_exactly(single):
    path, expected = single
    refs = {r.name: r for r in list_tensors(path)}
    assert set(refs) == {"a.weight", "b.weight", "c.weight", "ids"}
    assert refs["c.weight"].dtype == "bfloat16" and refs["c.weight"].shape == (24, 64)
    assert not refs["ids"].supported
    for name, want in expected.items():
        got = read_tensor(refs[name])
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_sharded_checkpoint_by_index_and_by_folder(tmp_path):
    index = write_checkpoint(tmp_path / "ckpt", 400_000, hidden=32, shards=3)
    shards = sorted((tmp_path / "ckpt").glob("*.safetensors"))
    assert len(shards) == 3
    by_index = [(Path(r.file).name, r.name) for r in list_tensors(index)]
    by_folder = [(Path(r.file).name, r.name) for r in list_tensors(index.parent)]
    assert by_index == by_folder and len(by_index) > 10
    weight_map = json.loads(index.read_text())["weight_map"]
    assert {n: f for f, n in by_index} == weight_map
    ref = next(r for r in list_tensors(index) if r.name.endswith("q_proj.weight"))
    raw = Path(ref.file).read_bytes()
    hlen = struct.unpack("<Q", raw[:8])[0]
    spec = json.loads(raw[8:8 + hlen])[ref.name]
    a, b = spec["data_offsets"]
    want = np.frombuffer(raw[8 + hlen + a:8 + hlen + b], np.uint16).astype(np.uint32) << 16
    np.testing.assert_array_equal(read_tensor(ref).view(np.uint32).reshape(-1), want)


def test_onnx_initializers_internal_and_external_data(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = weights((16, 32))
    bf = weights((8, 32)).astype(ml_dtypes.bfloat16)
    small = weights((5,))
    t_bf = helper.make_tensor("bf", TensorProto.BFLOAT16, bf.shape,
                              bf.view(np.uint16).tobytes(), raw=True)
    inits = [numpy_helper.from_array(w, "w"), t_bf, numpy_helper.from_array(small, "small")]
    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=inits)
    model = helper.make_model(graph)
    path = tmp_path / "m.onnx"
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.data", size_threshold=100)
    loaded = onnx.load(path, load_external_data=False)
    assert {t.name for t in loaded.graph.initializer if t.data_location == 1} == {"w", "bf"}
    refs = {r.name: r for r in list_tensors(path)}
    np.testing.assert_array_equal(read_tensor(refs["w"]), w)
    np.testing.assert_array_equal(read_tensor(refs["bf"]), bf.astype(np.float32))
    np.testing.assert_array_equal(read_tensor(refs["small"]), small)


@pytest.mark.parametrize("compressed", [False, True])
def test_npz_stored_and_compressed_and_npy(tmp_path, compressed):
    a, b = weights((8, 16)), weights((30,)).astype(np.float16)
    p = tmp_path / "t.npz"
    (np.savez_compressed if compressed else np.savez)(p, a=a, b=b)
    np.save(tmp_path / "c.npy", np.ascontiguousarray(a.T).astype(">f4"))  # big-endian
    refs = {r.name: r for r in list_tensors(tmp_path)}
    np.testing.assert_array_equal(read_tensor(refs["a"]), a)
    np.testing.assert_array_equal(read_tensor(refs["b"]), b.astype(np.float32))
    np.testing.assert_array_equal(read_tensor(refs["c"]), a.T)


def test_truncated_and_corrupt_files_give_error_rows_naming_file_and_tensor(tmp_path):
    good, bad, broken = weights((16, 32)), weights((16, 32)), weights((8, 8))
    folder = tmp_path / "m"
    folder.mkdir()
    st_write(folder / "a.safetensors", {"good": ("F32", good.shape, good.tobytes()),
                                        "cut": ("F32", bad.shape, bad.tobytes())})
    raw = (folder / "a.safetensors").read_bytes()
    (folder / "a.safetensors").write_bytes(raw[:-100])  # the last tensor loses 100 bytes
    (folder / "b.safetensors").write_bytes(struct.pack("<Q", 40) + b"{not json" + b" " * 31)
    np.savez(folder / "c.npz", ok=broken)
    (folder / "d.npz").write_bytes(b"PK\x03\x04 garbage")
    report = run_report(folder, ["int8:per-axis", "mxfp4"])
    rows = report.rows
    ok = rows[rows["error"] == ""]
    assert set(ok["tensor"]) == {"good", "c"} and len(ok) == 4  # one-array .npz: its stem
    err = rows[rows["error"] != ""]
    cut = err[err["tensor"] == "cut"]["error"].iloc[0]
    assert "a.safetensors" in cut and "'cut'" in cut and "truncated" in cut
    files = " ".join(err["error"])
    assert "b.safetensors" in files and "not valid JSON" in files
    assert "d.npz" in files
    with pytest.raises(TensorFileError, match="cut"):
        read_tensor(next(r for r in list_tensors(folder) if r.name == "cut"))


def test_missing_model_and_bad_recipe_are_clear(tmp_path):
    with pytest.raises(TensorFileError, match="no such file"):
        run_report(tmp_path / "nope.safetensors")
    with pytest.raises(ValueError, match="valid: TARGET:per-tensor"):
        parse_recipe("int9:per-axis")
    with pytest.raises(ValueError, match="granularity"):
        parse_recipe("int8:per-row")


# ---------------------------------------------------------------------------------------------
# recipes against the onnx reference evaluator


def _sqnr(x, xh) -> float:
    x, xh = x.astype(np.float64), np.asarray(xh, np.float64)
    return 10 * math.log10((x ** 2).sum() / ((x - xh) ** 2).sum())


def test_int8_per_axis_matches_reference_and_runs_at_opset_13(ref):
    x = weights((48, 64))
    row = run_recipe(x, parse_recipe("int8:per-axis"))
    scale = (np.abs(x).max(axis=1) / np.float32(127)).astype(np.float32)
    zp = np.zeros(48, np.int8)
    y = ref("QuantizeLinear", 19, x, scale, zp, axis=0)  # same rules as 13
    xh = ref("DequantizeLinear", 19, y, scale, zp, axis=0)
    assert row["opset"] == 13 and row["granularity"] == "per-axis"
    assert row["sqnr_db"] == pytest.approx(_sqnr(x, xh), rel=1e-9)
    assert row["max_abs_error"] == pytest.approx(float(np.abs(xh - x).max()), rel=1e-6)
    assert row["bits_per_element"] == 8 + (32 + 8) / 64  # zero point needed before opset 21
    assert row["bytes"] == 48 * 64 + 48 * 4 + 48


def test_uint8_per_tensor_matches_reference_and_runs_at_opset_10(ref):
    x = weights((20, 30)) + 0.01
    row = run_recipe(x, parse_recipe("uint8:per-tensor"))
    lo, hi = min(0.0, float(x.min())), max(0.0, float(x.max()))
    scale = np.float32((np.float32(hi) - np.float32(lo)) / np.float32(255))
    zp = np.uint8(np.rint(np.clip(np.float32(0) - np.float32(lo) / scale, 0, 255)))
    y = ref("QuantizeLinear", 19, x, scale, zp)  # same rules as 10
    xh = ref("DequantizeLinear", 19, y, scale, zp)
    assert row["opset"] == 10
    assert row["sqnr_db"] == pytest.approx(_sqnr(x, xh), rel=1e-9)


def test_int4_blocked32_fullrange_is_the_default_and_matches_reference(ref):
    """int4 without @METHOD maps each block's value of largest magnitude v to the code -8
    (scale v / -8, negative where v > 0): the onnx reference evaluator on those scales."""
    x = weights((8, 100))  # 100 = 3 full blocks and a short one
    row = run_recipe(x, parse_recipe("int4:blocked32"))
    assert parse_recipe("int4:blocked32") == parse_recipe("int4:blocked32@fullrange")
    xp = np.pad(x, ((0, 0), (0, 28))).reshape(8, 4, 32)
    v = np.take_along_axis(xp, np.abs(xp).argmax(axis=2)[..., None], 2)[..., 0]
    scale = (v / np.float32(-8)).astype(np.float32)
    assert (scale < 0).any() and (scale > 0).any()
    y = ref("QuantizeLinear", 21, x, scale, axis=1, block_size=32, output_dtype=22)
    xh = ref("DequantizeLinear", 21, y, scale, axis=1, block_size=32)
    assert np.asarray(y).astype(np.int8).min() == -8
    assert row["opset"] == 21 and row["block_size"] == 32
    assert row["sqnr_db"] == pytest.approx(_sqnr(x, xh), rel=1e-9)
    assert row["bits_per_element"] == 4 + 32 * 32 / 800


def test_int4_blocked32_absmax_has_no_zero_point_at_opset_21(ref):
    x = weights((8, 100))  # 100 = 3 full blocks and a short one
    row = run_recipe(x, parse_recipe("int4:blocked32@absmax"))
    xb = np.pad(np.abs(x), ((0, 0), (0, 28))).reshape(8, 4, 32).max(axis=2)
    scale = (xb / np.float32(7)).astype(np.float32)
    y = ref("QuantizeLinear", 21, x, scale, axis=1, block_size=32, output_dtype=22)
    xh = ref("DequantizeLinear", 21, y, scale, axis=1, block_size=32)
    assert row["opset"] == 21 and row["block_size"] == 32
    assert row["sqnr_db"] == pytest.approx(_sqnr(x, xh), rel=1e-9)
    assert row["bits_per_element"] == 4 + 32 * 32 / 800
    assert row["bytes"] == 400 + 32 * 4


@pytest.mark.parametrize("name,element,emax,opset,onnx_type", [
    ("mxfp4", ml_dtypes.float4_e2m1fn, 2, 24, 23),
    ("mxfp8", ml_dtypes.float8_e4m3fn, 8, 24, 17),
    ("mxfp6", ml_dtypes.float6_e2m3fn, 2, 28, 25),
])
def test_mx_recipes_use_the_ocp_scale_rule(ref, name, element, emax, opset, onnx_type):
    x = weights((6, 64))
    x[2, 5] = 3.0  # a block whose amax is an exact power of two... times 1.5
    x[4, 40] = 2.0
    row = run_recipe(x, parse_recipe(name))
    amax = np.abs(x).reshape(6, 2, 32).max(axis=2).astype(np.float64)
    scale = np.exp2(np.floor(np.log2(amax)) - emax).astype(ml_dtypes.float8_e8m0fnu)
    if opset < 28:
        y = ref("QuantizeLinear", opset, x, scale, axis=1, block_size=32, output_dtype=onnx_type)
        xh = ref("DequantizeLinear", opset, y, scale, axis=1, block_size=32, output_dtype=1)
        expected = _sqnr(x, xh)
    else:  # the installed onnx may predate opset 28: the spec's formula with ml_dtypes
        s = np.repeat(scale.astype(np.float32), 32, axis=1)
        fmax = float(ml_dtypes.finfo(element).max)
        q = np.clip(x / s, -fmax, fmax).astype(element)
        expected = _sqnr(x, q.astype(np.float32) * s)
    assert row["opset"] == opset and row["scales"] == 12
    assert row["bits_per_element"] == np.dtype(element).itemsize * 0 + {
        "mxfp4": 4, "mxfp8": 8, "mxfp6": 6}[name] + 8 / 32
    assert row["sqnr_db"] == pytest.approx(expected, rel=1e-9)


def test_tensor_stats_match_numpy():
    x = (RNG.standard_t(4, 300_001) * 0.1).astype(np.float32)
    x[7] = np.nan
    s = tensor_stats(x)
    f = x[np.isfinite(x)].astype(np.float64)
    m = f.mean()
    kurt = ((f - m) ** 4).mean() / ((f - m) ** 2).mean() ** 2 - 3
    assert s["absmax"] == np.abs(f).max()
    assert s["std"] == pytest.approx(f.std(), rel=1e-12)
    assert s["excess_kurtosis"] == pytest.approx(kurt, rel=1e-9)
    assert s["nonfinite_in"] == 1


@pytest.mark.parametrize("values", [[-0.0, 0.0], [-0.0], [np.nan, np.inf], [-3.0, 2.0, np.nan]])
def test_tensor_absmax_edges(values):
    x = np.repeat(np.array(values, np.float32), 70_000)  # over one chunk of the scan
    finite = x[np.isfinite(x)]
    got = tensor_stats(x)["absmax"]
    if not finite.size:  # undefined without a finite value
        assert np.isnan(got)
    else:
        assert got == np.abs(finite).max() and not np.signbit(got)


# ---------------------------------------------------------------------------------------------
# the run: rows, outputs, resume, summary, command line


def test_rows_cover_every_tensor_and_recipe_in_model_order(single):
    path, expected = single
    report = run_report(path, DEFAULT_RECIPES)
    rows = report.rows
    assert len(rows) == 3 * len(DEFAULT_RECIPES)
    assert list(rows["tensor"].unique()) == ["a.weight", "b.weight", "c.weight"]
    assert list(rows["recipe"][:8]) == list(DEFAULT_RECIPES)
    assert (rows["error"] == "").all()
    assert report.skipped == [("model.safetensors", "ids", "dtype I64 is not floating point")]
    c = rows[rows["tensor"] == "c.weight"].iloc[0]
    assert c["dtype"] == "bfloat16" and c["shape"] == "24x64" and c["elements"] == 1536
    assert c["absmax"] == np.abs(expected["c.weight"]).max()
    direct = run_recipe(expected["c.weight"], parse_recipe(c["recipe"]))
    assert c["sqnr_db"] == direct["sqnr_db"]


def test_threads_give_the_rows_of_one_thread_in_model_order(tmp_path):
    index = write_checkpoint(tmp_path / "ckpt", 400_000, hidden=32, shards=2)
    one = run_report(index, DEFAULT_RECIPES)
    seen = []
    four = run_report(index, DEFAULT_RECIPES, threads=4,
                      progress=lambda done, n, el, total: seen.append((done, n, el, total)))
    assert len(one.rows) > 8
    pd.testing.assert_frame_equal(four.rows, one.rows, check_exact=True)
    assert seen[0][0] == 0 and seen[-1][0] == seen[-1][1] and seen[-1][2] == seen[-1][3]
    assert [d for d, *_ in seen] == list(range(len(seen)))  # one call per tensor, in order


def test_filters(single):
    path, _ = single
    r = run_report(path, ["int8:per-axis"], include=["*.weight"], exclude=["b.*"])
    assert list(r.rows["tensor"]) == ["a.weight", "c.weight"]
    r = run_report(path, ["int8:per-axis"], min_elements=1500)
    assert list(r.rows["tensor"]) == ["a.weight", "c.weight"]  # b has 1280


def test_outputs_csv_and_parquet_round_trip_exactly(single, tmp_path):
    pytest.importorskip("pyarrow")
    path, _ = single
    report = run_report(path, ["int4:blocked32", "mxfp4", "float8e4m3fn:per-tensor"],
                        out=[tmp_path / "r.csv", tmp_path / "r.parquet"])
    for f in ("r.csv", "r.parquet"):
        pd.testing.assert_frame_equal(read_rows(tmp_path / f), report.rows, check_exact=True)
    assert not (tmp_path / "r.csv.partial.csv").exists()


def test_interrupted_run_resumes_without_recomputing(tmp_path):
    index = write_checkpoint(tmp_path / "ckpt", 300_000, hidden=32, shards=2)
    recipes = ["int8:per-axis", "mxfp4"]
    full = run_report(index, recipes).rows
    out = tmp_path / "r.csv"

    interrupt_report(run_report, index, recipes, out=out, after=3)
    journal = tmp_path / "r.csv.partial.csv"
    assert journal.exists() and not out.exists()
    assert len(read_rows(journal)) == 3 * len(recipes)
    seen = []
    resumed = run_report(index, recipes, out=out, resume=True,
                         progress=lambda d, t, e, et: seen.append(t))
    assert resumed.resumed == 3 and seen[0] == full["tensor"].nunique() - 3
    pd.testing.assert_frame_equal(resumed.rows, full, check_exact=True)
    pd.testing.assert_frame_equal(read_rows(out), full, check_exact=True)
    # resuming a finished report with one more recipe runs only that recipe
    more = run_report(index, recipes + ["int4:blocked32"], out=out, resume=True)
    assert more.resumed == 0 and len(more.rows) == 3 * full["tensor"].nunique()
    pd.testing.assert_frame_equal(more.rows[more.rows["recipe"] != "int4:blocked32"]
                                  .reset_index(drop=True), full, check_exact=True)


def test_summary_per_recipe_and_worst_tensors(single):
    path, _ = single
    rows = run_report(path, ["int8:per-axis", "mxfp4"]).rows
    s = summarize(rows, top=2)
    per = s["recipes"].set_index("recipe")
    g = rows[rows["recipe"] == "mxfp4"]
    assert per.loc["mxfp4", "bytes"] == g["bytes"].sum()
    w = (g["sqnr_db"] * g["elements"]).sum() / g["elements"].sum()
    assert per.loc["mxfp4", "sqnr_db_weighted"] == pytest.approx(w)
    assert list(s["worst"]["mxfp4"]["tensor"]) == list(g.nsmallest(2, "sqnr_db")["tensor"])


def test_command_line(single, tmp_path):
    path, _ = single
    out = tmp_path / "r.csv"
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main([str(path), "--recipes", "int8:per-axis,mxfp4", "--out", str(out),
                   "--no-progress", "--top", "2"])
    text = buf.getvalue()
    assert rc == 0, text
    assert "per recipe" in text and "2 worst tensors, mxfp4" in text and "6 rows" in text
    assert len(read_rows(out)) == 6
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["--list-recipes"]) == 0
    assert "mxfp4" in buf.getvalue() and "float8e8m0" in buf.getvalue()


def test_progress_bar_line():
    from qcore.progress import ProgressBar

    stream = io.StringIO()
    bar = ProgressBar(stream=stream, every=0)
    bar(0, 4, 0, 1000)
    bar(4, 4, 1000, 1000)
    lines = stream.getvalue().splitlines()
    assert lines[-1].startswith("[" + "#" * 30 + "] 4/4 tensors") and "ETA 00:00" in lines[-1]
