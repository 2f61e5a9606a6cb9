"""qcore.report on an ONNX model lays each weight out by its role, as python -m qcore.model does:
the same layout (axis, view), tensor SQNR and bits as the model tool for every weight × recipe;
slabs that never cut a scale group; rows equal in-process and on Dask; old journals refused
(ONNX) or still used (checkpoints without a graph)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from qcore.errors import QuantizationError  # noqa: E402
from qcore.io import onnx as qonnx  # noqa: E402
from qcore.model.cases import load_case  # noqa: E402
from qcore.recipes import parse_recipe, weight_layout  # noqa: E402
from qcore.report import read_rows, run_report, sliced  # noqa: E402
from qcore.report.core import journal_path  # noqa: E402
from qcore.report.identity import IDENTITY_PREFIX  # noqa: E402
from qcore.report.sliced import ArrayReader, run_recipe  # noqa: E402

RNG = np.random.default_rng(36)
RECIPES = ["int8:per-axis", "uint8:per-tensor", "int4:blocked32", "int4:blocked16", "mxfp4",
           "float8e4m3fn:per-axis@mse", "int4:blocked16/0", "int8:per-axis/1"]


def _w(*shape, scale=0.1):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def roles_model():
    """x [1, 40, 6, 6] -> Conv w_conv (8, 40, 3, 3) -> depthwise Conv w_dw (8, 1, 3, 3), group 8
    -> Reshape [1, 128] -> MatMul w_mm [128, 96] (B [K, N]) -> Gemm w_gemm [24, 96] transB=1."""
    rng = np.random.default_rng(36)  # the same weights on every call
    inits = {k: (rng.standard_normal(s) * 0.1).astype(np.float32) for k, s in (
        ("w_conv", (8, 40, 3, 3)), ("w_dw", (8, 1, 3, 3)), ("w_mm", (128, 96)),
        ("w_gemm", (24, 96)))}
    nodes = [
        helper.make_node("Conv", ["x", "w_conv"], ["c1"]),
        helper.make_node("Conv", ["c1", "w_dw"], ["c2"], group=8, pads=[1, 1, 1, 1]),
        helper.make_node("Reshape", ["c2", "flat"], ["f"]),
        helper.make_node("MatMul", ["f", "w_mm"], ["m"]),
        helper.make_node("Gemm", ["m", "w_gemm"], ["y"], transB=1),
    ]
    tensors = [numpy_helper.from_array(v, k) for k, v in inits.items()]
    tensors.append(numpy_helper.from_array(np.array([1, 128], np.int64), "flat"))
    g = helper.make_graph(nodes, "roles", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 40, 6, 6])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 24])], initializer=tensors)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m, inits


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    m, _ = roles_model()
    path = tmp_path_factory.mktemp("roles") / "roles.onnx"
    onnx.save(m, path)
    return path


@pytest.fixture(scope="module")
def report_rows(model_path):
    return run_report(model_path, RECIPES).rows


def test_layouts_follow_the_roles(report_rows):
    """The axes the report records are the role table's (docs/semantics.md, a weight's role)."""
    r = report_rows.set_index(["tensor", "recipe"])
    # MatMul B [K, N]: one scale per output column (axis 1), blocks along K (axis 0)
    assert (r.loc[("w_mm", "int8:per-axis"), "axis"], r.loc[("w_mm", "int8:per-axis"),
                                                              "scales"]) == (1, 96)
    assert r.loc[("w_mm", "int4:blocked32"), "axis"] == 0
    assert r.loc[("w_mm", "int4:blocked32"), "scales"] == (128 // 32) * 96
    assert r.loc[("w_mm", "mxfp4"), "axis"] == 0
    # Gemm transB=1: B^T [N, K]: per-axis on axis 0, blocks along axis 1
    assert r.loc[("w_gemm", "int8:per-axis"), "axis"] == 0
    assert r.loc[("w_gemm", "int4:blocked32"), "axis"] == 1
    # Conv (8, 40, 3, 3) at blocks of 32: the [O, I·k] view has the fewest scales
    conv = r.loc[("w_conv", "int4:blocked32")]
    assert (conv["view"], conv["axis"], conv["scales"]) == ("8x360", 1, 8 * math.ceil(360 / 32))
    # depthwise (8, 1, 3, 3): a row of 9 is shorter than two blocks: one scale per channel
    dw = r.loc[("w_dw", "int4:blocked32")]
    assert (dw["granularity"], dw["axis"], dw["scales"], dw["view"]) == ("per-axis", 0, 8, "")
    # an explicit axis overrides the role
    assert r.loc[("w_mm", "int4:blocked16/0"), "axis"] == 0
    assert r.loc[("w_gemm", "int4:blocked16/0"), "axis"] == 0
    assert r.loc[("w_mm", "int8:per-axis/1"), "scales"] == 96
    assert (report_rows["error"] == "").all()


def test_rows_equal_the_model_tools_tensor_numbers(model_path, report_rows):
    """Every weight × recipe: the model tool's tensor SQNR and bits (qcore.model's own
    ModelCase.quantize), its axis and view, are the report's."""
    case = load_case(model_path)
    assert set(case.weights) == {"w_conv", "w_dw", "w_mm", "w_gemm"}
    rows = report_rows.set_index(["tensor", "recipe"])
    for t in case.weights:
        for recipe in RECIPES:
            q = case.quantize(t, recipe)
            row = rows.loc[(t, parse_recipe(recipe).name)]
            assert row["bits_per_element"] == pytest.approx(q.bits_per_element, rel=1e-12), \
                (t, recipe)
            assert row["sqnr_db"] == pytest.approx(q.tensor_sqnr_db, rel=1e-9), (t, recipe)
            assert row["opset"] == q.opset and row["granularity"] == q.granularity
            if q.granularity != "per-tensor":
                assert row["axis"] == q.axis, (t, recipe)
            assert row["view"] == ("x".join(map(str, q.view)) if q.view else "")
            assert row["scales"] == q.scale.size


def test_report_numbers_against_the_role_axis_computed_by_numpy(report_rows):
    """Outside check: int8 per-axis on MatMul B [K, N] is absmax per column / 127, rounded half
    to even and saturated; the report's SQNR is that round trip's (numpy, float64)."""
    _, w = roles_model()
    x = w["w_mm"].astype(np.float64)
    s = (np.abs(w["w_mm"]).max(axis=0) / np.float32(127)).astype(np.float32)
    xh = np.clip(np.rint(w["w_mm"] / s), -128, 127) * s
    want = 10 * math.log10(float(np.sum(x * x)) / float(np.sum((x - xh) ** 2)))
    got = report_rows.set_index(["tensor", "recipe"]).loc[("w_mm", "int8:per-axis"), "sqnr_db"]
    assert got == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_read_slab_is_numpy_slicing(axis):
    x = np.arange(5 * 7 * 3, dtype=np.float32).reshape(5, 7, 3)
    got = sliced.read_slab(ArrayReader(x), x.shape, axis, 1, 3)
    np.testing.assert_array_equal(got, np.take(x, range(1, 3), axis=axis))


def test_slab_axis_never_cuts_a_scale_group():
    role_mm = qonnx.ROLES[("MatMul", 1)]
    lay = weight_layout
    assert sliced.slice_axis((64, 48), lay(parse_recipe("int8:per-axis"), (64, 48), role_mm)) == 1
    assert sliced.slice_axis((64, 48), lay(parse_recipe("int4:blocked32"), (64, 48),
                                           role_mm)) == 1
    assert sliced.slice_axis((64, 48), lay(parse_recipe("int4:blocked32"), (64, 48))) == 0
    assert sliced.slice_axis((64, 48), lay(parse_recipe("int8:per-axis"), (64, 48))) == 0


@pytest.mark.parametrize("recipe", ["int8:per-axis", "int4:blocked32", "mxfp4", "int4:blocked48",
                                    "uint8:per-tensor", "int4:per-axis@mse"])
@pytest.mark.parametrize("op", [("MatMul", 1), ("Conv", 1), ("ConvTranspose", 1),
                                ("LSTM", 1), None])
def test_many_slabs_equal_one(monkeypatch, recipe, op):
    """With slabs of 4 Ki elements (SLICE patched) a tensor is cut into many slabs along the
    layout's slicing axis; every row equals the model tool's whole-array round trip."""
    shape = {("Conv", 1): (40, 48, 3, 3), ("ConvTranspose", 1): (48, 40, 3, 3),
             ("LSTM", 1): (2, 96, 80), ("MatMul", 1): (192, 160), None: (160, 192)}[op]
    role = qonnx.ROLES[op] if op else None
    x = _w(*shape)
    from qcore.model.fidelity import qdq

    monkeypatch.setattr(sliced, "SLICE", 1 << 12)
    r = parse_recipe(recipe)
    lay = weight_layout(r, shape, role)
    assert len(sliced.axis_slices(shape, sliced.slice_axis(shape, lay))) >= 2
    row = run_recipe(x, r, role)
    q = qdq(x, r, role)
    assert row["sqnr_db"] == pytest.approx(q.tensor_sqnr_db, rel=1e-9)
    assert row["bits_per_element"] == pytest.approx(q.bits_per_element, rel=1e-12)
    assert (row["scales"], row["opset"]) == (q.scale.size, q.opset)
    assert row["max_abs_error"] == pytest.approx(float(np.max(np.abs(q.x_hat - x))), rel=1e-6)


def test_dask_rows_equal_in_process_rows(model_path, report_rows, tmp_path):
    pytest.importorskip("distributed")
    dist = run_report(model_path, RECIPES, workers=1, out=tmp_path / "d.parquet")
    pd.testing.assert_frame_equal(dist.rows, report_rows, check_exact=True)
    pd.testing.assert_frame_equal(read_rows(tmp_path / "d.parquet"), report_rows,
                                  check_exact=True)


def test_csv_and_parquet_keep_axis_and_view(model_path, report_rows, tmp_path):
    pytest.importorskip("pyarrow")
    out = run_report(model_path, ["int4:blocked32"], out=[tmp_path / "r.csv",
                                                           tmp_path / "r.parquet"]).rows
    for f in ("r.csv", "r.parquet"):
        back = read_rows(tmp_path / f)
        pd.testing.assert_frame_equal(back, out, check_exact=True)
        assert "8x360" in set(back["view"])
    # a report written before the view column existed still reads (view empty)
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pandas(out.drop(columns=["view"]), preserve_index=False),
                   tmp_path / "old.parquet")
    old = read_rows(tmp_path / "old.parquet")
    assert list(old.columns) == list(out.columns) and (old["view"] == "").all()


def _old_journal(rows: pd.DataFrame, ident: dict, path):
    """A journal as the report wrote it when it read every tensor as (out, in) rows: no
    ``view`` column, no ``axes`` in its identity."""
    ident = {k: v for k, v in ident.items() if k != "axes"}
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(IDENTITY_PREFIX + json.dumps(ident, separators=(",", ":")) + "\n")
        rows.drop(columns=["view"]).to_csv(fh, index=False)


def test_an_old_onnx_journal_is_refused(model_path, tmp_path):
    out = tmp_path / "r.csv"
    run_report(model_path, ["int8:per-axis"], out=out)
    ident = json.loads((tmp_path / "r.csv.run.json").read_text())
    assert "axes" in ident
    _old_journal(read_rows(out), ident, journal_path(out))
    with pytest.raises(QuantizationError, match="axes"):
        run_report(model_path, ["int8:per-axis"], out=out, resume=True)
    again = run_report(model_path, ["int8:per-axis"], out=out, resume=True, fresh=True)
    assert again.resumed == 0 and (again.rows["axis"][again.rows["tensor"] == "w_mm"] == 1).all()


def test_an_old_checkpoint_journal_still_fits(tmp_path):
    np.savez(tmp_path / "w.npz", a=_w(16, 64), b=_w(8, 32))
    out = tmp_path / "r.csv"
    first = run_report(tmp_path / "w.npz", ["int8:per-axis", "int4:blocked32"], out=out).rows
    ident = json.loads((tmp_path / "r.csv.run.json").read_text())
    assert "axes" not in ident
    _old_journal(first, ident, journal_path(out))
    again = run_report(tmp_path / "w.npz", ["int8:per-axis", "int4:blocked32"], out=out,
                       resume=True)
    assert again.resumed == 2
    pd.testing.assert_frame_equal(again.rows, first, check_exact=True)


def test_an_initializer_that_is_also_a_graph_input_keeps_its_role(tmp_path):
    """Older exporters list every initializer among the graph inputs; the report still lays
    such a MatMul B out by its role."""
    m, _ = roles_model()
    m.graph.input.append(helper.make_tensor_value_info("w_mm", TensorProto.FLOAT, [128, 96]))
    onnx.save(m, tmp_path / "m.onnx")
    rows = run_report(tmp_path / "m.onnx", ["int8:per-axis", "int4:blocked32"]).rows
    g = rows[rows["tensor"] == "w_mm"].set_index("recipe")
    assert (g.loc["int8:per-axis", "axis"], g.loc["int4:blocked32", "axis"]) == (1, 0)


def _installed_model(package: str, relative: str):
    """A model file shipped inside an installed PyPI package (found without importing it)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{package} is not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / relative
    if not path.is_file():
        pytest.skip(f"{package} ships no {relative}")
    return path


def test_a_real_model_matches_the_model_tool():
    """PP-OCRv4's recogniser (a Paddle export: Conv kernels and MatMul [K, N] weights): each
    MatMul weight and a few Conv kernels × two recipes, the report's numbers are the model
    tool's."""
    from qcore.model.fidelity import qdq
    from qcore.model.graph import Runner, load_model

    path = _installed_model("rapidocr_onnxruntime", "models/ch_PP-OCRv4_rec_infer.onnx")
    runner = Runner(load_model(path))
    mm = [t for t, r in runner.records.items() if r.role.name.startswith("MatMul B")]
    conv = [t for t, r in runner.records.items() if r.role.kernel][:6]
    assert mm and conv
    recipes = ["int8:per-axis", "int4:blocked32"]
    rows = run_report(path, recipes, include=mm + conv).rows.set_index(["tensor", "recipe"])
    assert len(rows) == len(mm + conv) * len(recipes)
    for t in mm + conv:
        for recipe in recipes:
            q = qdq(runner.weights[t], recipe, runner.records[t].role)
            row = rows.loc[(t, recipe)]
            assert (row["axis"], row["view"]) == (q.axis, "x".join(map(str, q.view or ())))
            assert row["sqnr_db"] == pytest.approx(q.tensor_sqnr_db, rel=1e-9)
            assert row["bits_per_element"] == pytest.approx(q.bits_per_element, rel=1e-12)
    assert (rows.loc[(mm[0], "int8:per-axis"), "axis"], rows.loc[(mm[0], "int4:blocked32"),
                                                                  "axis"]) == (1, 0)


def test_an_axis_beyond_the_tensor_is_an_error_row_not_a_failure(model_path):
    rows = run_report(model_path, ["int8:per-axis/3"]).rows.set_index("tensor")
    assert rows.loc["w_conv", "error"] == "" and rows.loc["w_conv", "axis"] == 3
    assert "names axis 3" in rows.loc["w_mm", "error"] and "(128, 96)" in rows.loc["w_mm", "error"]
