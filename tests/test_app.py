"""Every page of the Quantization Explorer under ``streamlit.testing.v1.AppTest``.

Defaults and sweeps (every format, granularity, block-size edge, saturate, opset) run without
an exception, errors appear as messages, and the metrics shown equal qcore's own numbers for
the same tensor. Tensors are tiny so the suite stays fast.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

import qcore
from app import errors
from app.metrics_view import METRICS, fmt_metric
from qcore import analysis, calibration, metrics, synthetic

APP = str(Path(__file__).resolve().parent.parent / "streamlit_app.py")
ROWS, COLS = 24, 40
SMALL = {"rows": ROWS, "cols": COLS}
OPSETS = range(10, qcore.LATEST_OPSET + 1)


def check(at: AppTest) -> AppTest:
    """No exception element, no 'unexpected error' message."""
    assert not at.exception, [e.message for e in at.exception]
    bad = [e.value for e in at.error if errors.UNEXPECTED in e.value]
    assert not bad, bad
    return at


def open_page(page: str, state: dict | None = None, query: dict | None = None) -> AppTest:
    """A fresh session that lands on `page` (settings preset in session state or the URL)."""
    at = AppTest.from_file(APP, default_timeout=300)
    for k, v in ({**SMALL, **(state or {})} if query is None else (state or {})).items():
        at.session_state[k] = v
    if query:
        at.query_params.update(query)
    at.switch_page(f"pages/{page}.py")
    return check(at.run())


def rerun(at: AppTest) -> AppTest:
    return check(at.run())


def shown_metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def expected_metrics(m: dict) -> dict[str, str]:
    return {label: fmt_metric(key, m[key]) for key, label, _ in METRICS}


def tensor(rows: int = ROWS, cols: int = COLS, dist: str = "normal", seed: int = 0):
    return synthetic.generate(dist, (rows, cols), seed=seed)


def lab_direct(x, *, target="int8", opset=qcore.LATEST_OPSET, granularity=qcore.PER_TENSOR,
               axis=1, block_size=32, method="minmax", saturate=True, precision=None,
               scale_dtype="float", manual_scale=None, manual_zero_point=None,
               percentile=99.9) -> dict:
    """What the Quantize Lab should show, computed with qcore directly."""
    p = calibration.choose_params(x, target, method=method, granularity=granularity, axis=axis,
                                  block_size=block_size, percentile=percentile,
                                  scale_dtype=scale_dtype, manual_scale=manual_scale,
                                  manual_zero_point=manual_zero_point)
    y = p.quantize(x, saturate=saturate, precision=precision, opset=opset)
    x_hat = p.dequantize(y, opset=opset)
    return metrics.error_metrics(x, x_hat, y=y, params=p, opset=opset)


def assert_lab_matches(at: AppTest, x, **cfg) -> None:
    shown = shown_metrics(at)
    expected = expected_metrics(lab_direct(x, **cfg))
    assert {k: shown.get(k) for k in expected} == expected, cfg


# --------------------------------------------------------------------------- every page


PAGES = ["home", "quantize_lab", "format_compare", "round_trip_sweeps", "dynamic_quantization",
         "number_formats", "operator_versions", "conformance", "learn", "glossary"]


@pytest.mark.parametrize("page", PAGES)
def test_page_defaults(page):
    at = open_page(page)
    assert at.title, f"{page} has no title"
    assert at.query_params or page == "conformance" or page == "operator_versions" \
        or page == "number_formats" or page == "home" or page == "glossary", \
        "settings are not in the URL"


def test_navigation_between_pages_keeps_the_tensor():
    at = open_page("home")
    for page in PAGES[1:]:
        at.switch_page(f"pages/{page}.py")
        rerun(at)
    at.switch_page("pages/quantize_lab.py")
    rerun(at)
    assert at.number_input(key="rows").value == ROWS
    assert at.number_input(key="cols").value == COLS


# --------------------------------------------------------------------------- home


def test_home_live_example_every_target_and_scale_extremes():
    at = open_page("home")
    for target in at.selectbox(key="h_target").options:
        at.selectbox(key="h_target").select(target)
        for scale in (0.01, 1.0):
            at.number_input(key="h_scale").set_value(scale)
            rerun(at)
            df = at.dataframe[0].value
            x = df["x"].to_numpy(np.float32)
            y = df["y (stored)"].to_numpy()
            assert len(df) == 8
            assert np.isfinite(y).all() or "float" in target, target
            assert x.size == 8


# --------------------------------------------------------------------------- quantize lab


def test_lab_defaults_match_qcore():
    at = open_page("quantize_lab")
    assert_lab_matches(at, tensor())
    assert at.query_params["target"] == "int8"


@pytest.mark.parametrize("target", qcore.QUANTIZED_TYPES)
def test_lab_every_format(target):
    at = open_page("quantize_lab", {"target": target})
    assert_lab_matches(at, tensor(), target=target)
    assert "stored bits" in at.dataframe[0].value.columns


@pytest.mark.parametrize("granularity", qcore.GRANULARITIES)
@pytest.mark.parametrize("target", ["int8", "uint4", "float8e4m3fn", "float4e2m1", "int2"])
def test_lab_every_granularity(granularity, target):
    at = open_page("quantize_lab", {"target": target, "gran": granularity, "axis": 1,
                                    "block": 8})
    assert_lab_matches(at, tensor(), target=target, granularity=granularity, axis=1,
                       block_size=8 if granularity == qcore.BLOCKED else 32)


def test_lab_block_size_edges():
    """Block sizes 1, 2, a short last block, the whole axis; both axes."""
    at = open_page("quantize_lab", {"target": "int4", "gran": qcore.BLOCKED})
    x = tensor()
    for axis, dim in ((1, COLS), (0, ROWS)):
        at.selectbox(key="axis").select(axis)
        for block in (1, 2, dim - 1, dim // 3, dim):
            at.number_input(key="block").set_value(block)
            rerun(at)
            assert_lab_matches(at, x, target="int4", granularity=qcore.BLOCKED, axis=axis,
                               block_size=block)
            caption = " ".join(c.value for c in at.caption)
            assert f"{-(-dim // block):,} block(s) of {block}" in caption


def test_lab_block_size_is_clamped_to_the_axis():
    at = open_page("quantize_lab", {"gran": qcore.BLOCKED, "block": 10_000})
    assert at.number_input(key="block").value == COLS


@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("target", ["float8e4m3fn", "float8e5m2", "float8e4m3fnuz", "int8",
                                    "float4e2m1"])
def test_lab_saturate_on_off(target, saturate):
    """A manual scale far too small: overflow saturates, or becomes NaN/Inf for float8."""
    state = {"target": target, "sat": saturate, "method": "manual", "mscale": 1e-5,
             "mzp": 0.0}
    at = open_page("quantize_lab", state)
    x = tensor()
    assert_lab_matches(at, x, target=target, saturate=saturate, method="manual",
                       manual_scale=1e-5, manual_zero_point=0.0)
    specials = int(shown_metrics(at)["NaN produced"].replace(",", "")) + \
        int(shown_metrics(at)["Inf produced"].replace(",", ""))
    overflows_to_special = not saturate and target.startswith("float8")
    assert (specials > 0) == overflows_to_special


def test_lab_every_opset():
    """int8 works at every opset; int4 is refused before 21 with qcore's message."""
    at = open_page("quantize_lab")
    x = tensor()
    for opset in OPSETS:
        at.selectbox(key="opset").select(opset)
        at.selectbox(key="target").select("int8")
        rerun(at)
        assert_lab_matches(at, x, opset=opset)
        at.selectbox(key="target").select("int4")
        rerun(at)
        if opset < 21:
            assert any("accepted from QuantizeLinear-21" in e.value for e in at.error), opset
            assert not at.metric
        else:
            assert_lab_matches(at, x, target="int4", opset=opset)


@pytest.mark.parametrize("method", calibration.METHODS)
def test_lab_every_calibration_method(method):
    at = open_page("quantize_lab", {"method": method, "target": "int8"})
    # MX means one power-of-two scale per block of 32: the Lab's default granularity for it
    gran = qcore.BLOCKED if method == "mx" else qcore.PER_TENSOR
    assert_lab_matches(at, tensor(), method=method, granularity=gran, block_size=32,
                       manual_scale=0.01 if method == "manual" else None,
                       manual_zero_point=0.0 if method == "manual" else None)


@pytest.mark.parametrize("x_type,scale_type,precision,opset", [
    ("float16", "float16", "", 19), ("bfloat16", "bfloat16", "", 21),
    ("float16", "float", "float16", 23), ("float", "float8e8m0", "", 24),
    ("float", "bfloat16", "bfloat16", 28)])
def test_lab_input_scale_and_precision_types(x_type, scale_type, precision, opset):
    at = open_page("quantize_lab", {"xtype": x_type, "stype": scale_type, "prec": precision,
                                    "opset": opset, "target": "int8"})
    x = tensor().astype(qcore.get_format(x_type).dtype)
    assert_lab_matches(at, x, opset=opset, scale_dtype=scale_type, precision=precision or None)


def test_lab_invalid_combination_shows_the_error_not_a_traceback():
    # float16 x with a float32 scale before QuantizeLinear-23
    at = open_page("quantize_lab", {"xtype": "float16", "stype": "float", "opset": 21})
    assert any("y_scale must have x's type" in e.value for e in at.error), \
        [e.value for e in at.error]
    # per-axis at QuantizeLinear-10
    at = open_page("quantize_lab", {"gran": qcore.PER_AXIS, "opset": 10})
    assert any("QuantizeLinear-10" in e.value for e in at.error)


def test_lab_dataset_tensor_matches_qcore():
    name = "layer0.attn.probs"
    at = open_page("quantize_lab", {"src": "dataset", "ds": name, "target": "uint8"})
    from qcore import datasets

    assert_lab_matches(at, datasets.load(name), target="uint8")


def test_lab_every_distribution():
    at = open_page("quantize_lab")
    for dist in synthetic.DISTRIBUTIONS:
        at.selectbox(key="dist").select(dist)
        rerun(at)
        assert_lab_matches(at, tensor(dist=dist))


def test_lab_too_many_elements_is_refused():
    at = open_page("quantize_lab", {"rows": 8192, "cols": 4096})
    assert any("16 Mi" in e.value for e in at.error)
    assert not at.metric


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=a.dtype == object)
    return buf.getvalue()


def test_lab_upload_with_nan_and_inf_is_reported():
    x = tensor(8, 16)
    x[0, 0], x[1, 1], x[2, 2] = np.nan, np.inf, -np.inf
    at = open_page("quantize_lab", {"src": "upload"})
    at.file_uploader(key="upload_file").upload("weights.npy", _npy(x))
    rerun(at)
    assert any("1 NaN and 2 ±Inf" in w.value for w in at.warning), [w.value for w in at.warning]
    assert_lab_matches(at, x)


def test_lab_upload_corrupt_or_pickled_file_gives_a_message():
    at = open_page("quantize_lab", {"src": "upload"})
    at.file_uploader(key="upload_file").upload("broken.npy", b"\x93NUMPY garbage")
    rerun(at)
    assert at.error and not at.metric
    at = open_page("quantize_lab", {"src": "upload"})
    at.file_uploader(key="upload_file").upload("objects.npy", _npy(np.array([1, "a"], object)))
    rerun(at)
    assert at.error and not at.metric


def test_lab_upload_npz_picks_a_tensor_by_name():
    buf = io.BytesIO()
    a, b = tensor(4, 8, seed=1), tensor(6, 10, seed=2)
    np.savez(buf, first=a, second=b)
    at = open_page("quantize_lab", {"src": "upload"})
    at.file_uploader(key="upload_file").upload("two.npz", buf.getvalue())
    rerun(at)
    at.selectbox(key="upload_tensor").select("second")
    rerun(at)
    assert_lab_matches(at, b)


# --------------------------------------------------------------------------- URL


def test_settings_come_from_the_url_and_go_back_to_it():
    query = {"rows": "16", "cols": "32", "target": "float8e5m2", "gran": "blocked",
             "block": "8", "sat": "0", "opset": "23", "seed": "7"}
    at = open_page("quantize_lab", query=query)
    assert at.selectbox(key="target").value == "float8e5m2"
    assert at.number_input(key="block").value == 8
    for k, v in query.items():
        assert at.query_params[k] == v, k
    assert_lab_matches(at, tensor(16, 32, seed=7), target="float8e5m2",
                       granularity=qcore.BLOCKED, axis=1, block_size=8, saturate=False,
                       opset=23)
    at.selectbox(key="target").select("int4")
    rerun(at)
    assert at.query_params["target"] == "int4"


def test_invalid_url_values_fall_back_to_defaults():
    at = open_page("quantize_lab", query={"rows": "16", "cols": "16", "target": "int99",
                                          "block": "banana", "opset": "3", "sat": "maybe"})
    assert at.selectbox(key="target").value == "int8"
    assert at.selectbox(key="opset").value == qcore.LATEST_OPSET
    assert at.query_params["target"] == "int8"


# --------------------------------------------------------------------------- format compare


@pytest.mark.parametrize("granularity", qcore.GRANULARITIES)
def test_format_compare_every_format_matches_qcore(granularity):
    state = {"c_formats": list(qcore.QUANTIZED_TYPES), "c_gran": granularity, "c_block": 8}
    at = open_page("format_compare", state)
    table = at.dataframe[0].value
    direct = analysis.compare_formats(tensor(), list(qcore.QUANTIZED_TYPES),
                                      granularity=granularity, axis=1, block_size=8)
    assert list(table["format"]) == list(direct["format"])
    np.testing.assert_array_equal(table["sqnr_db"].to_numpy(), direct["sqnr_db"].to_numpy())
    # the front the page states: bits per element compared to 0.1 bit
    front = analysis.pareto_front(direct["bits_per_element"].round(1),
                                  direct["sqnr_db"].where(direct["error"] == ""))
    np.testing.assert_array_equal(table["pareto"].to_numpy(), front)
    best = direct[direct["error"] == ""].sort_values("sqnr_db", ascending=False).iloc[0]
    assert shown_metrics(at)["Best SQNR"] == f"{best['sqnr_db']:.2f} dB"


def test_format_compare_saturate_off_and_no_formats():
    at = open_page("format_compare", {"c_sat": False, "c_formats": ["float8e4m3fn", "int8"]})
    assert len(at.dataframe[0].value) == 2
    at = open_page("format_compare", {"c_formats": []})
    assert any("Pick at least one format" in i.value for i in at.info)


# --------------------------------------------------------------------------- sweeps


@pytest.mark.parametrize("target,granularity", [("int8", qcore.PER_TENSOR),
                                                ("int4", qcore.PER_AXIS),
                                                ("float8e4m3fn", qcore.BLOCKED),
                                                ("uint8", qcore.PER_TENSOR),
                                                ("float4e2m1", qcore.BLOCKED)])
def test_sweeps_match_qcore(target, granularity):
    at = open_page("round_trip_sweeps", {"s_target": target, "s_gran": granularity,
                                         "s_block": 8})
    x = tensor()
    clip = analysis.clipping_sweep(x, target, n=40, granularity=granularity, axis=1,
                                   block_size=8, method="minmax")  # the page's default
    best = clip.iloc[clip.attrs["optimum"]]
    shown = shown_metrics(at)
    assert shown["Best clipping range"] == f"{best['clip_ratio']:.2f} × max|x|"
    assert shown["Best SQNR"] == f"{best['sqnr_db']:.2f} dB"
    at.session_state["s_tab"] = "Repeated round trips"
    rerun(at)
    assert shown_metrics(at)["Changed by the later ones"] == "0"
    assert at.query_params["s_tab"] == "Repeated round trips"
    at.session_state["s_tab"] = "Block size"
    rerun(at)
    blocks = at.dataframe[0].value
    direct = analysis.block_size_sweep(x, target, list(blocks["block_size"]), 1)
    np.testing.assert_array_equal(blocks["sqnr_db"].to_numpy(), direct["sqnr_db"].to_numpy())


def test_sweeps_every_opset_and_custom_chain():
    at = open_page("round_trip_sweeps", {"s_chain": "custom", "s_tab": "Chains of formats",
                                         "s_chain_custom": "float8e5m2, int4, uint2"})
    chain = at.dataframe[-1].value
    assert list(chain["format"]) == ["float8e5m2", "int4", "uint2"]
    direct = analysis.chain(tensor(), ["float8e5m2", "int4", "uint2"], axis=1)
    np.testing.assert_array_equal(chain["sqnr_db"].to_numpy(),
                                  [d["sqnr_db"] for d in direct])
    for opset in (10, 13, 19, 21, 25):
        at.selectbox(key="s_opset").select(opset)
        rerun(at)
    at.text_input(key="s_chain_custom").input("float8e4m3fn, int99")
    rerun(at)
    assert any("int99" in e.value for e in at.error)


# --------------------------------------------------------------------------- dynamic


def test_dynamic_matches_qcore():
    at = open_page("dynamic_quantization")
    x = tensor()
    y, scale, zp = qcore.dynamic_quantize_linear(x)
    shown = shown_metrics(at)
    assert shown["5 · zero point"] == str(int(zp))
    x_hat = qcore.dequantize_linear(y, scale, zp)
    m = metrics.error_metrics(x, x_hat, y=y)
    assert shown["SQNR"] == fmt_metric("sqnr_db", m["sqnr_db"])
    assert shown["Max |error|"] == fmt_metric("max_abs_error", m["max_abs_error"])


def test_dynamic_every_distribution_and_refusals():
    at = open_page("dynamic_quantization")
    for dist in synthetic.DISTRIBUTIONS:
        at.selectbox(key="dist").select(dist)
        rerun(at)
    # float16 input: DynamicQuantizeLinear-11 takes float32 only -> qcore's message
    at = open_page("dynamic_quantization", {"xtype": "float16"})
    assert any("DynamicQuantizeLinear-11" in e.value for e in at.error)


def test_dynamic_nan_tensor_is_refused_with_a_message():
    x = tensor(4, 4)
    x[0, 0] = np.nan
    at = open_page("dynamic_quantization", {"src": "upload"})
    at.file_uploader(key="upload_file").upload("nan.npy", _npy(x))
    rerun(at)
    assert any("NaN/Inf" in e.value for e in at.error)


# --------------------------------------------------------------------------- number formats


def test_number_formats_every_format():
    at = open_page("number_formats")
    for name in list(qcore.QUANTIZED_TYPES) + ["float8e8m0"]:
        at.selectbox(key="nf_format").select(name)
        rerun(at)
        fmt = qcore.get_format(name)
        assert shown_metrics(at)["Bits"] == str(fmt.bits)
        assert shown_metrics(at)["Distinct values"] == f"{fmt.levels:,}"
        if fmt.bits <= 8:
            codes = at.dataframe[0].value
            assert len(codes) == 1 << fmt.bits
        if name in qcore.QUANTIZED_TYPES:
            specials = at.dataframe[-1].value
            x = np.float32(2 * fmt.max)
            y_off = qcore.quantize_linear(np.array([x]), np.float32(1), output_dtype=name,
                                          saturate=False)
            row = specials[specials["input"] == "2 × max"] if fmt.is_float else \
                specials[specials["input"] == "1e10"]
            assert len(row) == 1
            if fmt.is_float:
                v = float(y_off.astype(np.float64)[0])
                text = row["saturate=0 value"].iloc[0]
                assert text == ("NaN" if math.isnan(v) else "+Inf" if math.isinf(v)
                                else text)


# --------------------------------------------------------------------------- operator versions


@pytest.mark.parametrize("op", [qcore.QUANTIZE, qcore.DEQUANTIZE])
@pytest.mark.parametrize("granularity", qcore.GRANULARITIES)
@pytest.mark.parametrize("qtype", ["int8", "int4", "float8e5m2", "float4e2m1", "uint2",
                                   "float6e3m2"])
def test_operator_versions_match_plan(op, granularity, qtype):
    state = {"v_op": op, "v_gran": granularity, "v_qtype": qtype, "v_block": 32,
             "v_rows": 8, "v_cols": 64}
    at = open_page("operator_versions", state)
    shape = (8, 64)
    sshape = {qcore.PER_TENSOR: (), qcore.PER_AXIS: (64,), qcore.BLOCKED: (8, 2)}[granularity]
    kw = dict(axis=1, block_size=32 if granularity == qcore.BLOCKED else 0)
    expected_errors = []
    for v in qcore.versions.versions(op):
        try:
            if op == qcore.QUANTIZE:
                qcore.plan_quantize("float", shape, "float", sshape, qtype, sshape, opset=v, **kw)
            else:
                qcore.plan_dequantize(qtype, shape, "float", sshape, qtype, sshape, opset=v,
                                      **kw)
        except qcore.QuantizationError as exc:
            expected_errors.append(str(exc))
    shown_errors = [e.value for e in at.error]
    assert shown_errors == expected_errors
    n_versions = len(qcore.versions.versions(op))
    assert len(at.success) - (1 if len(expected_errors) < n_versions else 0) \
        == n_versions - len(expected_errors)


# --------------------------------------------------------------------------- conformance


def test_conformance_every_preset():
    at = open_page("conformance")
    from app import conformance

    for key in conformance.PRESETS:
        at.button(key=f"preset_{key}").click()
        rerun(at)
        expected = "refused / failed" if key in conformance.REFUSALS else "ran"
        assert shown_metrics(at)["qcore"] == expected, key
        assert any(conformance.NOTES[key][:30] in i.value for i in at.info), key
        if key == "overflow":
            pytest.importorskip("onnx")
            assert "differ" in shown_metrics(at)["onnx reference"]


def test_conformance_every_operator_and_bad_input():
    at = open_page("conformance")
    at.segmented_control(key="k_op").set_value(qcore.DEQUANTIZE)
    at.text_input(key="k_x").input("-8, -1, 0, 7")
    at.selectbox(key="k_target").select("int4")
    rerun(at)
    assert shown_metrics(at)["qcore"] == "ran"
    at.segmented_control(key="k_op").set_value(qcore.DYNAMIC)
    at.text_input(key="k_x").input("0, 1.5, -2, 3")
    rerun(at)
    assert shown_metrics(at)["qcore"] == "ran"
    at.text_input(key="k_x").input("1, two, 3")
    rerun(at)
    assert any("'two' is not a number" in e.value for e in at.error)
    for opset in OPSETS:
        at.segmented_control(key="k_op").set_value(qcore.QUANTIZE)
        at.text_input(key="k_x").input("1, 2, 3")
        at.selectbox(key="k_opset").select(opset)
        rerun(at)


def test_backend_choice_only_with_cuda(monkeypatch):
    at = open_page("quantize_lab")
    assert not [s for s in at.segmented_control if s.key == "backend"]
    monkeypatch.setattr(qcore, "cuda_available", lambda: True)
    at = open_page("quantize_lab", {"backend": "cuda"})
    assert at.segmented_control(key="backend").value == "cuda"
    from qcore.kernels import cuda as cuda_kernels

    if cuda_kernels.unavailable_reason() is not None:  # no GPU here: qcore says why
        assert any("backend='cuda' is not available" in e.value for e in at.error)
    else:
        assert_lab_matches(at, tensor())


def _frame(at: AppTest, i: int = 0):
    return at.dataframe[i].value


def test_conformance_dynamic_preset_runs_all_three_engines():
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    at = open_page("conformance")
    at.button(key="preset_dql_zeros").click()
    rerun(at)
    shown = shown_metrics(at)
    assert shown["qcore"] == "ran"
    # the reference's scale 1/255 equals qcore's; onnxruntime's 1.0 differs in one output
    assert shown["onnx reference"] == "agrees bit for bit"
    assert shown["onnxruntime"] == "1 element(s) differ"
    y = _frame(at, 0)
    assert list(y.columns) == ["x", "qcore", "onnx reference", "onnxruntime"]
    assert all(v.startswith("0 · ") for c in y.columns[1:] for v in y[c]), y
    params = _frame(at, 1)
    assert list(params["engine"]) == ["qcore", "onnx reference", "onnxruntime"]
    assert params["y_scale"].iloc[2].startswith("1 · ")


def test_conformance_nan_preset_states_what_the_engines_give():
    onnx = pytest.importorskip("onnx")
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    from app import conformance

    values = conformance.PRESETS["nan_int"][1]
    x = conformance.parse_values(values["x"], "x").astype(np.float32)
    zp = np.int8(int(values["zero_point"]))
    node = helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["y"])
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info(
        "y", onnx.TensorProto.INT8, None)], initializer=[
        onnx.numpy_helper.from_array(x, "x"), onnx.numpy_helper.from_array(np.float32(1), "s"),
        onnx.numpy_helper.from_array(np.array(zp), "zp")])
    ref = ReferenceEvaluator(helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 21)])).run(None, {})[0]
    ours = qcore.quantize_linear(x, np.float32(1), zp)
    n_diff = int((ref != ours).sum())
    assert n_diff == 2 and ref[0] == 127 and ours[0] == -128  # what the note says
    at = open_page("conformance")
    at.button(key="preset_nan_int").click()
    rerun(at)
    assert shown_metrics(at)["onnx reference"] == f"{n_diff} element(s) differ"
    note = [i.value for i in at.info if "NaN into an integer" in i.value][0]
    assert "**maximum** (127)" in note and "(−5)" in note


def test_conformance_missing_package_says_to_restart_the_server(monkeypatch):
    import sys

    from app import conformance

    monkeypatch.setitem(sys.modules, "onnx", None)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    node = conformance.Node()
    ref = conformance.run_reference(node, [None])
    ort = conformance.run_onnxruntime(node, [None])
    assert ref.missing and ort.missing
    assert "restart the Streamlit server" in ref.error
    assert "restart the Streamlit server" in ort.error


def _list_marker_continuations(text: str) -> list[str]:
    """Lines inside a paragraph or list item that CommonMark would start a (nested) list with:
    a continuation line whose text begins with '+ ', '- ' or '* '."""
    bad = []
    lines = text.splitlines()
    for prev, line in zip(lines, lines[1:]):
        if prev.strip() and line.startswith(" ") and line.strip()[:2] in ("+ ", "- ", "* "):
            bad.append(line)
    return bad


def test_explain_texts_render_as_written():
    from app import explain

    texts = {k: v for k, v in vars(explain).items() if k.isupper() and isinstance(v, str)}
    assert "HOME_EXACT" in texts
    for name, text in texts.items():
        assert not _list_marker_continuations(text), name
    # the formula of QuantizeLinear is one code span, on one line
    assert "`y = saturate(round(x / y_scale) + y_zero_point)`" in explain.HOME_EXACT


def test_lab_intro_tells_the_truth_about_min_max_clipping():
    from app import explain

    assert "never clips" not in explain.LAB_INTRO
    assert "127.5" in explain.LAB_INTRO
    # 127.5 rounds half to even to 128, which int8 saturates to 127
    y = qcore.quantize_linear(np.array([127.5], np.float32), np.float32(1), np.int8(0))
    assert np.rint(127.5) == 128 and int(y[0]) == 127


def test_outliers_hint_describes_scattered_elements():
    assert "scattered" in synthetic.describe("outliers")
    assert "outlier channels" not in synthetic.describe("outliers")
    x = synthetic.generate("outliers", (256, 256), seed=0)
    rows = np.unique(np.nonzero(np.abs(x) > 10)[0])
    assert rows.size > 20  # the ~66 outliers are scattered over many rows, not one channel
    assert "axis 0" in synthetic.describe("outlier_channel")


def test_lab_mx_defaults_to_blocks_of_32():
    at = open_page("quantize_lab", {"target": "float4e2m1"})
    at.selectbox(key="method").select("mx")
    rerun(at)
    assert at.segmented_control(key="gran").value == qcore.BLOCKED
    assert at.number_input(key="block").value == 32
    assert_lab_matches(at, tensor(), target="float4e2m1", method="mx",
                       granularity=qcore.BLOCKED, block_size=32, axis=1)


def test_e8m0_log_axis_ticks_do_not_crowd():
    from app import charts, reference

    codes = reference.format_codes("float8e8m0")
    fig = charts.number_line(codes["numeric"].to_numpy(), codes["class"].to_numpy(),
                             "float8e8m0", log=True)
    v = codes["numeric"].to_numpy()
    v = v[np.isfinite(v) & (v > 0)]
    decades = np.log10(v.max()) - np.log10(v.min())
    assert decades / fig.layout.xaxis.dtick <= 12
    sp = charts.spacing(reference.format_spacing("float8e8m0"), "float8e8m0")
    assert sp.layout.xaxis.dtick > 1 and sp.layout.yaxis.dtick > 1


def test_tiny_tensor_figures_are_explained():
    at = open_page("quantize_lab", {"rows": 1, "cols": 3})
    bits = shown_metrics(at)["Bits / element"]
    assert float(bits) > 8
    assert any("shared by only 3 element(s)" in c.value for c in at.caption)
    charts_json = " ".join(str(c.proto) for c in at.get("plotly_chart"))
    assert "|error| per element" in charts_json
    assert "tile of 1×1" not in charts_json


# --------------------------------------------------------------------------- your own numbers


def _col(df, name):
    return [float(v) for v in df[name]]


def test_home_takes_your_numbers_and_an_exact_scale():
    at = open_page("home")
    at.text_input(key="h_x").input("2.5, -3.5, 100, 0.3")
    at.selectbox(key="h_target").select("int8")
    at.number_input(key="h_scale").set_value(0.5)
    at.number_input(key="h_zp").set_value(3)
    rerun(at)
    x = np.float32([2.5, -3.5, 100, 0.3])
    y = qcore.quantize_linear(x, np.float32(0.5), np.int8(3))
    df = at.dataframe[0].value
    assert _col(df, "y (stored)") == y.astype(float).tolist()
    assert at.query_params["h_x"] == ["2.5, -3.5, 100, 0.3"] or \
        at.query_params["h_x"] == "2.5, -3.5, 100, 0.3"


def test_lab_your_numbers_table_is_quantize_linear():
    at = open_page("quantize_lab", {"target": "int8", "lo_x": "0.5, 1.5, 2.5, 127.5, 300, -70",
                                    "lo_s": 0.5, "lo_zp": 10})
    x = np.float32([0.5, 1.5, 2.5, 127.5, 300, -70])
    y = qcore.quantize_linear(x, np.float32(0.5), np.int8(10))
    table = at.dataframe[-1].value
    assert [float(v) for v in table["saturated"]] == y.astype(float).tolist()
    # the rounded column is round half to even of x / scale
    assert [float(v) for v in table["rounded"]] == np.rint(x / np.float32(0.5)).tolist()


def test_lab_your_numbers_say_saturation_comes_after_the_rounded_column():
    at = open_page("quantize_lab", {"target": "int4", "lo_x": "0.5, 1024, 98304, 3",
                                    "lo_s": 1.0, "lo_zp": 0})
    table = at.dataframe[-1].value
    assert [float(v) for v in table["rounded"]][1:3] == [1024, 98304]  # before saturation
    assert [float(v) for v in table["saturated"]] == [0, 7, 7, 3]
    note = [c.value for c in at.caption if "beyond int4" in c.value]
    assert note and "1024, 98304" in note[0] and "saturated = y" in note[0], note


def test_lab_your_numbers_float_target_has_no_zero_point():
    at = open_page("quantize_lab", {"target": "float8e4m3fn", "lo_x": "300, 0.1", "lo_s": 1.0})
    table = at.dataframe[-1].value
    y = qcore.quantize_linear(np.float32([300, 0.1]), np.float32(1), output_dtype="float8e4m3fn")
    from app.text import fmt_value

    assert list(table["saturated"]) == [fmt_value(v) for v in y.astype(np.float32).astype(float)]


def test_dynamic_lists_y_for_your_numbers():
    at = open_page("dynamic_quantization", {"d_x": "-1, 0, 3, 0.5"})
    x = np.float32([-1, 0, 3, 0.5])
    y, s, zp = qcore.dynamic_quantize_linear(x)
    table = at.dataframe[-1].value
    assert [int(v) for v in table["y (uint8)"]] == y.astype(int).tolist()
    assert any(f"**{int(zp)}**" in m.value for m in at.markdown)
    at.text_input(key="d_x").input("1, nan")
    rerun(at)
    assert any("NaN" in e.value for e in at.error)


def test_lab_presets_teach_mxfp4_and_the_outlier_channel():
    at = open_page("quantize_lab")
    at.button(key="preset_lab_mxfp4").click()
    rerun(at)
    assert at.selectbox(key="target").value == "float4e2m1"
    assert at.selectbox(key="method").value == "mx"
    assert at.segmented_control(key="gran").value == qcore.BLOCKED
    assert at.number_input(key="block").value == 32
    assert any("MXFP4" in i.value for i in at.info)
    assert_lab_matches(at, tensor(), target="float4e2m1", method="mx",
                       granularity=qcore.BLOCKED, block_size=32, axis=1)
    at.button(key="preset_lab_outlier_channel").click()
    rerun(at)
    assert at.segmented_control(key="gran").value == qcore.PER_AXIS
    assert at.selectbox(key="axis").value == 0
    x = synthetic.generate("outlier_channel", (256, 256), seed=0)
    assert_lab_matches(at, x, target="int8", method="absmax", granularity=qcore.PER_AXIS,
                       axis=0)
    assert any("axis 0" in i.value for i in at.info)


# --------------------------------------------------------------------------- glossary


def test_every_glossary_link_points_at_a_term_and_pages_link_their_jargon():
    import re

    from app import explain, glossary, lesson

    texts = [v for k, v in vars(explain).items() if k.isupper() and isinstance(v, str)]
    texts += [s.idea + s.why for s in lesson.STEPS]
    for text in texts:
        for slug in re.findall(r"/glossary#([\w-]+)", glossary.terms_line(text)):
            assert slug in glossary.TERMS
    # the jargon the issue names is defined
    for word in ("binade", "Pareto front", "OCP", "fnuz", "excess kurtosis", "opset vs version",
                 "SQNR", "MX", "block", "saturate"):
        assert any(word.lower() in term.lower() for term, _ in glossary.TERMS.values()), word
    assert "binade" in glossary.found_in(explain.FORMATS_INTRO)
    assert "pareto" in glossary.found_in(explain.COMPARE_INTRO)
    assert "opset" in glossary.found_in(explain.VERSIONS_INTRO)


@pytest.mark.parametrize("page", ["number_formats", "format_compare", "operator_versions",
                                  "quantize_lab"])
def test_pages_link_their_terms_to_the_glossary(page):
    at = open_page(page)
    assert any("/glossary#" in c.value for c in at.caption), page


def test_glossary_page_lists_every_term():
    from app import glossary

    at = open_page("glossary")
    shown = {h.value for h in at.subheader}
    assert {term for term, _ in glossary.TERMS.values()} <= shown


def test_clipping_sweep_with_percentile_says_what_it_sweeps_and_shows_the_lab_figure():
    """With percentile chosen the curve scales the min–max range; the page says so and shows
    the SQNR the Lab shows for the same settings (computed here with qcore directly)."""
    x = tensor()
    at = open_page("round_trip_sweeps", {"s_method": "percentile"})
    captions = " ".join(c.value for c in at.caption)
    assert "Swept: the observed min–max range times the ratio" in captions, captions
    shown = shown_metrics(at)
    expected = fmt_metric("sqnr_db", lab_direct(x, method="percentile")["sqnr_db"])
    assert shown["percentile clipping (the Lab)"] == expected, shown
    at = open_page("round_trip_sweeps", {"s_method": "absmax"})
    assert "Swept: the abs-max (symmetric) range times the ratio" in " ".join(
        c.value for c in at.caption)
    assert not [k for k in shown_metrics(at) if k.endswith("(the Lab)")]
