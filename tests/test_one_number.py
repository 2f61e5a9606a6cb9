"""One number everywhere: the Quantize Lab, Format Compare, Round Trip & Sweeps, the Model Report
and ``qcore.report`` (and its CLI) show the same bits per element, SQNR, share of elements the
SQNR covers, clipped share and NaN/Inf counts for the same tensor and settings.

Bits per element are also checked against the rule of docs/semantics.md, Definitions computed here from the
parameters' shapes alone: target bits + scales × scale bits / n (+ zero points × target bits / n
when one is stored: an asymmetric recipe, or an opset before output_dtype)."""

from __future__ import annotations

import io
import math

import ml_dtypes
import numpy as np
import pytest

from app import compute, tensors
from app.controls import QuantConfig
from qcore import LATEST_OPSET, analysis, calibration, get_format
from qcore.report import core
from qcore.report.__main__ import print_summary

SPEC = tensors.TensorSpec(source="synthetic", distribution="outliers", rows=24, cols=80, seed=3)
#: One of each family: signed/unsigned integers of each width class, every float family.
TARGETS = ("int8", "uint8", "int16", "int4", "uint4", "int2", "float8e4m3fn", "float8e5m2",
           "float6e2m3", "float4e2m1")
METHODS = ("minmax", "absmax", "percentile", "mse", "mx")
GRANULARITIES = ("per-tensor", "per-axis", "blocked")
BLOCK = 32


def _cfg(target: str, gran: str, method: str, **kw) -> QuantConfig:
    return QuantConfig(target=target, granularity=gran, axis=0 if gran == "per-axis" else 1,
                       block_size=BLOCK, method=method, **kw)


def _recipe(target: str, gran: str, method: str) -> str:
    g = {"per-tensor": "per-tensor", "per-axis": "per-axis", "blocked": f"blocked{BLOCK}"}[gran]
    return f"{target}:{g}@{method}"


def _n_scales(shape: tuple[int, ...], gran: str) -> int:
    rows, cols = shape
    return {"per-tensor": 1, "per-axis": rows, "blocked": rows * -(-cols // BLOCK)}[gran]


def _expected_bits(x, target, gran, method, opset) -> float:
    """docs/semantics.md, Definitions from the shapes: codes, scales, and a zero point per scale where one is
    stored -- before opset 21 always (only it names the type), from 21 on where it is not 0
    (an absent zero point means 0)."""
    fmt = get_format(target)
    n = x.size
    ns = _n_scales(x.shape, gran)
    scale_bits = 8 if method == "mx" else 32
    cfg = _cfg(target, gran, method)
    zp = calibration.choose_params(x, target, **cfg.calibration_kwargs()).zero_point
    zp_stored = opset < 21 or (zp is not None and bool(np.any(zp.astype(np.float64) != 0)))
    return fmt.bits + (ns * scale_bits + (ns * fmt.bits if zp_stored else 0)) / n


def _figures(m) -> tuple:
    return (m["bits_per_element"], m["sqnr_db"], m["clipped_fraction"], m["nan_out"],
            m["inf_out"])


def _same(a, b) -> bool:
    return all((isinstance(u, float) and isinstance(v, float) and math.isnan(u) and math.isnan(v))
               or u == v for u, v in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def x() -> np.ndarray:
    return tensors.load(SPEC)


@pytest.fixture(scope="module")
def report_rows(x, tmp_path_factory):
    """qcore.report on the same tensor, every recipe of the matrix, in one run."""
    folder = tmp_path_factory.mktemp("model")
    np.save(folder / "x.npy", x)
    recipes = [_recipe(t, g, m) for t in TARGETS for g in GRANULARITIES for m in METHODS]
    rows = core.run_report(folder / "x.npy", recipes).rows
    assert (rows["error"] == "").all(), rows[rows["error"] != ""]["error"].tolist()[:3]
    return rows


@pytest.mark.parametrize("target", TARGETS)
def test_every_page_and_the_report_show_one_number(target, x, report_rows):
    summary = core.summarize(report_rows)["recipes"].set_index("recipe")
    out = io.StringIO()
    print_summary(report_rows, file=out)
    cli = out.getvalue()
    for gran in GRANULARITIES:
        for method in METHODS:
            cfg = _cfg(target, gran, method)
            lab = compute.lab(SPEC, cfg).metrics
            want = _figures(lab)
            assert lab["bits_per_element"] == pytest.approx(
                _expected_bits(x, target, gran, method, LATEST_OPSET), abs=1e-12)
            # Format Compare
            row = compute.compare(SPEC, (target,), cfg).iloc[0]
            assert _same(_figures(row), want), (gran, method, "compare")
            # Round Trip & Sweeps: the first round trip, the block sweep at this block size,
            # and the clipping sweep's unclipped end for the methods it reproduces exactly
            trip = compute.round_trips(SPEC, cfg).iloc[0]
            assert _same((trip["sqnr_db"],), (lab["sqnr_db"],)), (gran, method, "trips")
            if gran == "blocked":
                b = compute.block_sweep(SPEC, cfg).set_index("block_size").loc[BLOCK]
                assert _same((b["bits_per_element"], b["sqnr_db"], b["clipped_fraction"]),
                             want[:3]), (method, "block sweep")
            if method in ("minmax", "absmax", "mx"):
                c = compute.clipping(SPEC, cfg).iloc[-1]
                assert c["clip_ratio"] == 1.0
                assert _same((c["bits_per_element"], c["sqnr_db"], c["clipped_fraction"]),
                             want[:3]), (gran, method, "clipping sweep")
            # qcore.report at the opset the recipe needs; the Lab at that same opset
            name = core.parse_recipes([_recipe(target, gran, method)])[0].name
            rep = report_rows[report_rows["recipe"] == name].iloc[0]
            lab_then = compute.lab(SPEC, _cfg(target, gran, method, opset=int(rep["opset"])))
            assert _same(_figures(rep), _figures(lab_then.metrics)), (gran, method, "report")
            assert rep["bits_per_element"] == pytest.approx(
                _expected_bits(x, target, gran, method, int(rep["opset"])), abs=1e-12)
            # the Model Report page and the CLI show summarize's per-recipe figures
            assert summary.loc[name, "bits_per_element"] == pytest.approx(
                rep["bits_per_element"], rel=1e-15)
            assert f"{rep['bits_per_element']:.3f}" in cli


@pytest.mark.parametrize("gran", GRANULARITIES)
@pytest.mark.parametrize("target", ["float8e4m3fn", "float8e5m2"])
def test_nan_produced_is_counted_once_and_the_coverage_is_stated(target, gran, x):
    """Saturate off with a small manual scale: overflow becomes NaN (e4m3fn) or Inf (e5m2).
    Every page counts the same elements and computes SQNR over the same (stated) share."""
    amax = float(np.abs(x).max())
    scale = amax / get_format(target).max / 4  # the largest elements overflow
    counts = {}
    for saturate in (True, False):
        cfg = _cfg(target, gran, "manual", manual_scale=scale, saturate=saturate)
        lab = compute.lab(SPEC, cfg).metrics
        row = compute.compare(SPEC, (target,), cfg).iloc[0]
        assert _same(_figures(row), _figures(lab))
        trip = compute.round_trips(SPEC, cfg).iloc[0]
        assert _same((trip["sqnr_db"],), (lab["sqnr_db"],))
        if gran == "blocked":
            b = compute.block_sweep(SPEC, cfg).set_index("block_size").loc[BLOCK]
            assert _same((b["sqnr_db"], b["clipped_fraction"]), _figures(lab)[1:3])
        lost = lab["nan_out"] + lab["inf_out"]
        counts[saturate] = lost
        assert lab["sqnr_coverage"] == (x.size - lost) / x.size
        # "Clipped" counts the elements that rounding alone would put beyond the largest
        # code (max + half the gap below it): saturated, or lost when saturate is off
        fi = ml_dtypes.finfo(get_format(target).dtype)
        edge = float(fi.max) + 2.0 ** (math.floor(math.log2(float(fi.max))) - fi.nmant) / 2
        beyond = int((np.abs(x.astype(np.float64)) / np.float32(scale) > edge).sum())
        assert round(lab["clipped_fraction"] * x.size) == beyond > 0
        assert lost == (0 if saturate else beyond)
    assert counts[True] == 0 and counts[False] > 0


def test_int4_abs_max_blocked_32_is_five_bits_everywhere():
    """The issue's case: 4 bits + one float32 scale per 32 elements = 5.000, no zero point."""
    spec = tensors.TensorSpec(source="dataset", dataset="layer0.ffn.out.weight")
    x = tensors.load(spec)
    rows, cols = x.shape
    want = 4 + 32 * rows * -(-cols // 32) / x.size
    assert want == 5.0
    cfg = QuantConfig(target="int4", granularity="blocked", axis=1, block_size=32,
                      method="absmax")
    assert compute.lab(spec, cfg).metrics["bits_per_element"] == want
    assert compute.compare(spec, ("int4",), cfg).iloc[0]["bits_per_element"] == want
    sweep = compute.block_sweep(spec, cfg).set_index("block_size")
    assert sweep.loc[32, "bits_per_element"] == want
    from qcore.recipes import parse_recipe
    from qcore.report.sliced import run_recipe
    assert run_recipe(x, parse_recipe("int4:blocked32")).get("bits_per_element") == want


def test_picks_come_from_the_pareto_front():
    """A dominated candidate (same bits to 0.1 bit, lower SQNR: uint8 against float8e4m3fn
    per-tensor) is never the pick, even when it is nominally the cheapest."""
    bits = [8.000144, 8.000004, 4.0002, 32.0]
    sqnr = [30.27, 31.65, 19.0, 90.0]
    assert list(analysis.bits_sqnr_front(bits, sqnr)) == [False, True, True, True]
    assert analysis.front_pick(bits, sqnr, min_sqnr_db=30) == 1
    assert analysis.front_pick(bits, sqnr, min_sqnr_db=95) is None
    assert analysis.front_pick(bits, sqnr) == 3
    # highest SQNR shared: the cheaper one
    assert analysis.front_pick([8.0, 4.0], [20.0, 20.0]) == 1


def test_model_report_fewest_bits_pick_is_never_dominated(tmp_path, monkeypatch):
    """The issue's tie: uint8:per-tensor and float8e4m3fn:per-tensor store the same bits (at
    opsets 10 and 19 both keep a zero point), uint8 listed first with the lower SQNR. The page's
    "Fewest bits with ≥ 30 dB" and "Best recipe" are front points."""
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    from qcore import datasets

    np.save(tmp_path / "w.npy", datasets.load("layer0.ffn.out.weight"))
    out = tmp_path / "r.csv"
    rows = core.run_report(tmp_path / "w.npy", ["uint8:per-tensor", "float8e4m3fn:per-tensor",
                                                 "int4:blocked32"], out=out).rows
    bits = rows.set_index("recipe")["bits_per_element"]
    assert bits["uint8:per-tensor"] == bits["float8e4m3fn:per-tensor"]
    # the figures of the model: both reach 30 dB, uint8 lower
    rows.loc[rows["recipe"] == "uint8:per-tensor", "sqnr_db"] = 30.27
    rows.loc[rows["recipe"] == "float8e4m3fn:per-tensor", "sqnr_db"] = 31.65
    core.write_rows(rows, out)
    per = core.summarize(rows)["recipes"].set_index("recipe")
    assert not per.loc["uint8:per-tensor", "pareto"]
    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "streamlit_app.py"),
                           default_timeout=300)
    at.session_state["mr_source"] = "report"
    at.session_state["mr_report_path"] = str(out)
    monkeypatch.setenv("QCORE_REPORT_ROOTS", str(tmp_path))  # the page reads allowed roots only
    at.switch_page("pages/model_report.py")
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    shown = {m.label: m.value for m in at.metric}
    assert shown["Fewest bits with ≥ 30 dB"] == "float8e4m3fn:per-tensor"
    assert shown["Best recipe (element-weighted SQNR)"] == "float8e4m3fn:per-tensor"


# ---------------------------------------------------------------------------------------------
# what the pages say about the figures


def _page(page: str, state: dict):
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "streamlit_app.py"),
                           default_timeout=300)
    for k, v in state.items():
        at.session_state[k] = v
    at.switch_page(f"pages/{page}.py")
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


SMALL = {"rows": 24, "cols": 80, "dist": "outliers", "seed": 3}


def test_mx_shows_the_scale_type_in_use():
    at = _page("quantize_lab", {**SMALL, "method": "mx", "target": "float4e2m1",
                                "gran": "blocked", "stype": "float16"})
    box = [s for s in at.selectbox if s.label == "Scale type"]
    assert len(box) == 1 and box[0].disabled and box[0].value == "float8e8m0"
    assert any("(float8e8m0)" in c.value for c in at.caption)
    # the choice for the other methods is kept
    at.session_state["method"] = "absmax"
    at.run()
    box = [s for s in at.selectbox if s.label == "Scale type"]
    assert box[0].value == "float16" and not box[0].disabled


def test_one_lost_element_is_not_called_all():
    """Saturate off, a manual scale that loses only the largest elements to NaN (a share that
    rounds to 100 % at 3 digits): the SQNR card says which share it covers without calling it
    100 %, and the NaN is counted once, the same on the card and in the warning."""
    state = {"rows": 64, "cols": 128, "dist": "normal", "seed": 3}
    x = tensors.load(tensors.TensorSpec(source="synthetic", distribution="normal", rows=64,
                                        cols=128, seed=3))
    order = np.sort(np.abs(x.reshape(-1)).astype(np.float64))
    scale = (order[-1] + order[-2]) / 2 / 464  # e4m3fn: beyond 448 + 16 becomes NaN
    want = int((np.abs(x.astype(np.float64)) / np.float32(scale) > 464).sum())
    assert 0 < want and f"{100 * (x.size - want) / x.size:.3g}" == "100"
    at = _page("quantize_lab", {**state, "target": "float8e4m3fn", "method": "manual",
                                "mscale": scale, "sat": False})
    shown = {m.label: m for m in at.metric}
    assert int(shown["NaN produced"].value.replace(",", "")) == want
    assert shown["Inf produced"].value == "0"
    delta = shown["SQNR"].proto.delta
    assert "100 %" not in delta and "finite" in delta, delta
    assert "what it counts" in shown["Clipped"].proto.help.lower()
    warning = " ".join(w.value for w in at.warning)
    assert f"{want} element(s)" in warning and f"{x.size - want:,} of {x.size:,}" in warning


def test_npz_download_records_x_type_and_keeps_the_scale_type():
    import io as _io

    import qcore

    spec = tensors.TensorSpec(source="synthetic", rows=8, cols=64, x_type="float16")
    for stype, stored in (("float16", np.float16), ("bfloat16", np.uint16),
                          ("float", np.float32)):
        cfg = QuantConfig(opset=25, target="int8", method="absmax", scale_dtype=stype)
        data = np.load(_io.BytesIO(compute.npz_bytes(spec, cfg)), allow_pickle=False)
        x = tensors.load(spec)
        assert str(data["x_type"]) == "float16" == qcore.get_format(x.dtype).name
        assert data["scale"].dtype == stored
        p = calibration.choose_params(x, "int8", method="absmax", scale_dtype=stype)
        assert str(data["scale_type"]) == qcore.get_format(np.asarray(p.scale).dtype).name
        np.testing.assert_array_equal(data["scale"], np.asarray(p.scale).view(stored))
        np.testing.assert_array_equal(data["y"], p.quantize(x, opset=25))


def test_upload_without_a_file_prompts_and_bfloat16_is_called_exact():
    at = _page("quantize_lab", {"src": "upload"})
    assert any("choose a file" in i.value.lower() for i in at.info)
    a = np.arange(6, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(2, 3)
    at.file_uploader(key="upload_file").upload("w.safetensors", _safetensors_bf16(a))
    at.run()
    note = " ".join(c.value for c in at.caption)
    assert "bfloat16" in note and "exact" in note and "rounded" not in note, note


def _safetensors_bf16(a: np.ndarray) -> bytes:
    import json

    text = json.dumps({"w": {"dtype": "BF16", "shape": list(a.shape),
                             "data_offsets": [0, a.nbytes]}}).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + a.tobytes()
