"""Moving between pages keeps what the user chose (AppTest).

One session walks every ordered pair of the app's pages (an Eulerian circuit of the complete
directed graph: 56 moves) with a non-default tensor and non-default settings on every page,
then again through an upload and a real tensor. On every arrival:

- every setting widget holds the chosen value, and the browser is told that value (a widget
  that reappears carries it explicitly, ``set_value``, or its default already is that value —
  otherwise the browser would show the default while the server computes with the store);
- the URL holds exactly those values;
- the numbers shown are qcore's for that tensor and those settings.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import euler_circuit
from streamlit.testing.v1 import AppTest
from test_app import APP, _npy, assert_lab_matches, check, shown_metrics

import qcore
from app import state
from qcore import analysis, datasets, synthetic

PAGES = ["home", "quantize_lab", "format_compare", "round_trip_sweeps", "dynamic_quantization",
         "number_formats", "operator_versions", "conformance"]
TENSOR = {"src": "synthetic", "dist": "laplace", "rows": 12, "cols": 20, "seed": 5,
          "xtype": "float"}
#: Non-default settings of each page (prefix per page as in the app).
SETTINGS = {
    "quantize_lab": {"opset": 23, "target": "int4", "gran": qcore.BLOCKED, "axis": 1,
                     "block": 4, "method": "absmax", "sat": True},
    "format_compare": {"c_gran": qcore.PER_AXIS, "c_axis": 0, "c_method": "absmax",
                       "c_formats": ["int4", "int8", "float8e4m3fn"]},
    "round_trip_sweeps": {"s_target": "uint8", "s_opset": 21, "s_gran": qcore.BLOCKED,
                          "s_block": 5},
    "dynamic_quantization": {"d_logy": True},
    "number_formats": {"nf_format": "float6e3m2"},
}
EXPECTED = {**TENSOR, **{k: v for page in SETTINGS.values() for k, v in page.items()}}
WIDGET_TYPES = ("selectbox", "number_input", "toggle", "slider", "button_group", "multiselect",
                "text_input", "select_slider", "radio")


def widgets(at: AppTest) -> dict[str, object]:
    found = {}
    for kind in WIDGET_TYPES:
        for w in at.get(kind):
            if getattr(w, "key", None):
                found[w.key] = w
    return found


def browser_default(w) -> object:
    """What the browser shows for a widget that (re)appears without an explicit value."""
    p = w.proto
    kind = type(w).__name__
    if kind == "Selectbox":
        return w.options[p.default] if p.HasField("default") else None
    if kind == "ButtonGroup":
        return [w.options[i].content for i in p.default]
    return p.default


_LAST: dict[int, tuple[str, set[str]]] = {}  # id(AppTest) -> (page, widget keys) of its last run


def assert_settings_agree(at: AppTest, where: str) -> None:
    """Every setting widget on screen: chosen value, told to the browser, in the URL. (A
    widget the browser had on screen in the previous run of the same page keeps the browser's
    own state; any other one shows its default unless the server sends the value.)"""
    shown = widgets(at)
    page = where.split("→")[-1].strip()
    last_page, last_keys = _LAST.get(id(at), (None, set()))
    _LAST[id(at)] = (page, set(shown))
    params = dict(at.query_params)
    for key, w in shown.items():
        if key not in EXPECTED:
            continue
        want = EXPECTED[key]
        got = w.value
        if isinstance(got, (list, tuple)) and not isinstance(want, list):
            got = got[0] if len(got) == 1 else got
        assert got == want, f"{where}: {key} is {got!r}, chosen {want!r}"
        if not w.proto.set_value and not (last_page == page and key in last_keys):
            default = browser_default(w)
            if isinstance(default, list) and not isinstance(want, list):
                default = default[0] if len(default) == 1 else default
            fmt = getattr(w, "format_func", None)
            assert default in (want, fmt(want) if fmt else want, str(want)), \
                f"{where}: the browser would show {key}={default!r}, the server uses {want!r}"
        assert key in params, f"{where}: {key} missing from the URL {params}"
        assert params[key] == state.encode(want), f"{where}: URL {key}={params[key]!r}"


def x_of(tensor: dict) -> np.ndarray:
    return synthetic.generate(tensor["dist"], (tensor["rows"], tensor["cols"]),
                              seed=tensor["seed"])


def assert_numbers_agree(at: AppTest, page: str, x: np.ndarray, label: str) -> None:
    """The tensor named in the page's caption and the page's numbers are qcore's."""
    if page not in ("quantize_lab", "format_compare", "round_trip_sweeps",
                    "dynamic_quantization"):
        return
    caption = " ".join(c.value for c in at.caption)
    assert f"Tensor **{label}** · shape {' × '.join(map(str, x.shape))}" in caption, caption
    if page == "quantize_lab":
        s = SETTINGS[page]
        assert_lab_matches(at, x, target=s["target"], opset=s["opset"], granularity=s["gran"],
                           axis=s["axis"], block_size=s["block"], method=s["method"])
    elif page == "format_compare":
        s = SETTINGS[page]
        direct = analysis.compare_formats(x, s["c_formats"], granularity=s["c_gran"],
                                          axis=s["c_axis"], block_size=32, method=s["c_method"])
        table = at.dataframe[0].value
        np.testing.assert_array_equal(table["sqnr_db"].to_numpy(), direct["sqnr_db"].to_numpy())
    elif page == "round_trip_sweeps":
        s = SETTINGS[page]
        clip = analysis.clipping_sweep(x, s["s_target"], n=40, granularity=s["s_gran"], axis=1,
                                       block_size=s["s_block"], opset=s["s_opset"])
        best = clip.iloc[clip.attrs["optimum"]]
        assert shown_metrics(at)["Best SQNR"] == f"{best['sqnr_db']:.2f} dB"
    else:
        y, scale, zp = qcore.dynamic_quantize_linear(np.asarray(x, np.float32))
        assert shown_metrics(at)["5 · zero point"] == str(int(zp))


def session() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=300)
    for k, v in EXPECTED.items():
        at.session_state[k] = v
    return at


def go(at: AppTest, page: str) -> AppTest:
    at.switch_page(f"pages/{page}.py")
    return check(at.run())


def test_every_pair_of_pages_keeps_tensor_settings_and_url():
    tour = euler_circuit(PAGES)
    assert len(tour) == len(PAGES) * (len(PAGES) - 1) + 1
    at = session()
    x = x_of(TENSOR)
    label = f"Laplace {TENSOR['rows']}×{TENSOR['cols']}"
    previous = None
    for page in tour:
        go(at, page)
        where = f"{previous} → {page}"
        assert_settings_agree(at, where)
        assert_numbers_agree(at, page, x, label)
        previous = page


@pytest.mark.parametrize("start", ["quantize_lab", "round_trip_sweeps"])
def test_an_upload_is_kept_on_every_page(start):
    """Upload on one page, then visit every other page with a tensor picker and come back:
    the uploaded tensor is used everywhere, the settings panel shows the chosen settings."""
    x = synthetic.generate("student_t", (9, 14), seed=3).astype(np.float64)
    at = session()
    at.session_state["src"] = "upload"
    go(at, start)
    assert not at.metric  # nothing uploaded yet: the page waits for a file
    assert_settings_agree_with(at, {**EXPECTED, "src": "upload"}, f"→ {start}")
    at.file_uploader(key="upload_file").upload("weights64.npy", _npy(x))
    check(at.run())
    expected = {**EXPECTED, "src": "upload"}
    assert_settings_agree_with(at, expected, f"upload → {start}")
    x32 = x.astype(np.float32)
    tour = [start, "format_compare", "dynamic_quantization", "home", "quantize_lab",
            "round_trip_sweeps", "quantize_lab", start]
    for page in tour:
        go(at, page)
        assert_settings_agree_with(at, expected, f"→ {page}")
        assert_numbers_agree(at, page, x32, "weights64")
        captions = " ".join(c.value for c in at.caption)
        if page != "home":
            assert "float64" in captions, f"{page}: no note about the float64 conversion"


def assert_settings_agree_with(at: AppTest, expected: dict, where: str) -> None:
    saved = dict(EXPECTED)
    EXPECTED.update(expected)
    try:
        assert_settings_agree(at, where)
    finally:
        EXPECTED.clear()
        EXPECTED.update(saved)


def test_a_real_tensor_is_kept_on_every_page():
    name = "layer5.ffn.residual"
    at = session()
    at.session_state["src"] = "dataset"
    at.session_state["ds"] = name
    at.session_state["xtype"] = "bfloat16"
    x = datasets.load(name).astype(qcore.get_format("bfloat16").dtype)
    for page in ["quantize_lab", "format_compare", "dynamic_quantization",
                 "round_trip_sweeps", "quantize_lab"]:
        go(at, page)
        assert at.selectbox(key="ds").value == name
        assert at.query_params["ds"] == name and at.query_params["src"] == "dataset"
        caption = " ".join(c.value for c in at.caption)
        assert f"Tensor **{name}**" in caption, (page, caption)
        if page == "quantize_lab":
            s = SETTINGS[page]
            assert_lab_matches(at, x, target=s["target"], opset=s["opset"],
                               granularity=s["gran"], axis=s["axis"], block_size=s["block"],
                               method=s["method"])


def test_a_removed_upload_is_forgotten():
    at = session()
    at.session_state["src"] = "upload"
    go(at, "quantize_lab")
    at.file_uploader(key="upload_file").upload("a.npy", _npy(np.ones((3, 4), np.float32)))
    check(at.run())
    assert at.metric
    at.file_uploader(key="upload_file").clear()
    check(at.run())
    assert not at.metric


def test_invalid_url_values_are_reported():
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params.update({"rows": "banana", "cols": "16", "target": "int99"})
    at.switch_page("pages/quantize_lab.py")
    check(at.run())
    notes = " ".join(w.value for w in at.sidebar.get("alert") if hasattr(w, "value")) or \
        " ".join(w.value for w in at.warning)
    assert "rows='banana'" in notes and "target='int99'" in notes, notes


# --------------------------------------------------------------------------- honest numbers


def _all_text(at: AppTest) -> str:
    parts = [m.value for m in at.metric] + [str(m.proto.delta) for m in at.metric]
    parts += [e.value for kind in ("markdown", "caption", "info", "warning", "error")
              for e in at.get(kind)]
    return " ".join(parts)


def test_exact_round_trip_shows_infinite_sqnr_explained():
    """A 1×1 tensor comes back exactly: SQNR ∞ dB everywhere, no 'nan dB', no empty chart."""
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["rows"], at.session_state["cols"] = 1, 1
    go(at, "round_trip_sweeps")
    shown = shown_metrics(at)
    assert shown["Best SQNR"] == "∞ dB" and shown["SQNR without clipping"] == "∞ dB", shown
    delta = [m.proto.delta for m in at.metric if m.label == "SQNR without clipping"][0]
    assert delta == "exact either way", delta
    if at.get("plotly_chart"):  # ranges below max|x| clip; the exact ones are not drawn
        captions = " ".join(c.value for c in at.caption)
        assert "zero error are not drawn" in captions, captions
    else:
        assert any("reproduces this tensor exactly" in i.value for i in at.info)
    go(at, "quantize_lab")
    assert shown_metrics(at)["SQNR"] == "∞ dB"
    for page in ("format_compare", "dynamic_quantization"):
        go(at, page)
        text = _all_text(at)
        assert "nan dB" not in text.lower() and "inf dB" not in text, (page, text)


def test_nan_producing_settings_say_what_the_metrics_cover():
    """float8e4m3fn, saturate off, a tiny manual scale: most of x̂ is NaN. The page says how
    many became NaN and that SQNR & co. cover only the finite rest (share checked against
    qcore); the step table spells NaN out."""
    from qcore import calibration, metrics

    x = synthetic.generate("normal", (24, 40), seed=0)
    at = AppTest.from_file(APP, default_timeout=300)
    for k, v in {"rows": 24, "cols": 40, "target": "float8e4m3fn", "sat": False,
                 "method": "manual", "mscale": 0.001, "mzp": 0.0}.items():
        at.session_state[k] = v
    go(at, "quantize_lab")
    p = calibration.choose_params(x, "float8e4m3fn", method="manual", manual_scale=0.001,
                                  manual_zero_point=0.0)
    y = p.quantize(x, saturate=False)
    x_hat = p.dequantize(y)
    nan_count = int(np.isnan(x_hat.astype(np.float32)).sum())
    finite = int(np.isfinite(x_hat.astype(np.float32)).sum())
    assert nan_count > 0
    m = metrics.error_metrics(x, x_hat, y=y, params=p)
    assert m["n_compared"] == finite
    warning = " ".join(w.value for w in at.warning)
    assert f"{nan_count:,} element(s)" in warning and "saturate is off" in warning, warning
    share = f"{100 * finite / x.size:.3g} %"
    sqnr = [mm for mm in at.metric if mm.label == "SQNR"][0]
    assert share in sqnr.proto.delta, (share, sqnr.proto.delta)
    walk = at.dataframe[0].value
    assert not walk.isna().any().any()
    assert "None" not in walk.to_string()


def test_pareto_front_is_the_stated_one():
    """int8 and float8e4m3fn both cost 8 bits per element (to 0.1 bit): the one with the
    lower SQNR is not on the front, in the table, the caption's list and the chart."""
    at = AppTest.from_file(APP, default_timeout=300)
    for k, v in {"rows": 24, "cols": 40, "c_formats": ["int4", "int8", "float8e4m3fn"]}.items():
        at.session_state[k] = v
    go(at, "format_compare")
    table = at.dataframe[0].value.set_index("format")
    assert table.loc["int8", "sqnr_db"] > table.loc["float8e4m3fn", "sqnr_db"]
    assert round(table.loc["int8", "bits_per_element"], 1) == \
        round(table.loc["float8e4m3fn", "bits_per_element"], 1)
    assert not table.loc["float8e4m3fn", "pareto"] and table.loc["int8", "pareto"]
    front = [m.value for m in at.markdown if m.value.startswith("**Pareto front:**")][0]
    assert "float8e4m3fn" not in front and "int8" in front, front


def test_block_size_forced_down_by_a_short_axis_comes_back():
    at = AppTest.from_file(APP, default_timeout=300)
    for k, v in {"rows": 24, "cols": 40, "gran": qcore.BLOCKED, "block": 32, "axis": 1,
                 "src": "dataset", "ds": "layer0.attn.probs"}.items():
        at.session_state[k] = v
    go(at, "quantize_lab")
    dim = datasets.load("layer0.attn.probs").shape[1]
    assert dim < 32
    assert at.number_input(key="block").value == dim
    assert at.query_params["block"] == str(dim)
    assert any(f"Block size 32 is longer than axis 1 ({dim} elements)" in c.value
               for c in at.caption), [c.value for c in at.caption]
    at.session_state["src"] = "synthetic"
    check(at.run())
    assert at.number_input(key="block").value == 32
    assert at.query_params["block"] == "32"
    assert_lab_matches(at, synthetic.generate("normal", (24, 40), seed=0),
                       granularity=qcore.BLOCKED, axis=1, block_size=32)


def test_settings_from_a_link_survive_page_moves():
    """A link's values (not preset in the session) hold after leaving the page and coming
    back (the block size among them: no remembered wish overrides the link's value)."""
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params.update({"rows": "24", "cols": "160", "gran": "blocked", "block": "16",
                            "target": "int4", "opset": "23"})
    at.switch_page("pages/quantize_lab.py")
    check(at.run())
    for page in ("operator_versions", "format_compare", "quantize_lab"):
        go(at, page)
    assert at.number_input(key="block").value == 16 and at.query_params["block"] == "16"
    assert at.selectbox(key="target").value == "int4" and at.query_params["opset"] == "23"
    assert_lab_matches(at, synthetic.generate("normal", (24, 160), seed=0), target="int4",
                       opset=23, granularity=qcore.BLOCKED, axis=1, block_size=16)


RECIPE_LINK = {"src": "dataset", "ds": "layer0.ffn.out.weight", "c_mode": "recipes",
               "c_recipes": "int4:blocked32@absmax,mxfp4,int8:per-axis,float8e4m3fn:per-tensor"}


def test_format_compare_compares_recipes_each_with_its_own_settings():
    """int4 blocked 32 with float32 abs-max scales and MXFP4 (float8e8m0 scales) in one table
    and one Pareto chart, each row's figures those of the report's own sliced computation
    (qcore.report.sliced.run_recipe); labels name the opset where it sets the bits."""
    from conftest import open_app_page

    from qcore.recipes import parse_recipe
    from qcore.report.sliced import run_recipe

    at = open_app_page("pages/format_compare.py", RECIPE_LINK)
    table = at.dataframe[0].value.set_index("format")
    assert list(table.index) == ["int4:blocked32@absmax", "mxfp4", "int8:per-axis · opset 13",
                                 "float8e4m3fn:per-tensor · opset 19"]
    assert table.loc["int4:blocked32@absmax", "scale_type"] == "float32"
    assert table.loc["int4:blocked32@absmax", "method"] == "absmax"
    assert table.loc["mxfp4", "scale_type"] == "float8e8m0"
    assert table.loc["mxfp4", "block_size"] == "32" and table.loc["mxfp4", "target"] == "float4e2m1"
    assert table.loc["int8:per-axis · opset 13", "block_size"] == ""  # no block, no "None"
    x = datasets.load("layer0.ffn.out.weight")
    for label, recipe in zip(table.index, ["int4:blocked32@absmax", "mxfp4", "int8:per-axis",
                                           "float8e4m3fn:per-tensor"]):
        report = run_recipe(x, parse_recipe(recipe))
        assert table.loc[label, "sqnr_db"] == pytest.approx(report["sqnr_db"], abs=1e-9), label
        assert table.loc[label, "bits_per_element"] == report["bits_per_element"], label
        assert table.loc[label, "opset"] == report["opset"], label
    chart = at.get("plotly_chart")[0].proto.spec
    assert "mxfp4" in chart and "int4:blocked32@absmax" in chart
    assert at.query_params["c_recipes"] == \
        "int4:blocked32@absmax,mxfp4,int8:per-axis,float8e4m3fn:per-tensor"  # canonical
    assert at.query_params["c_mode"] == "recipes"


def test_recipe_editor_builds_types_and_refuses():
    from conftest import open_app_page

    at = open_app_page("pages/format_compare.py",
                       {**RECIPE_LINK, "c_recipes": "int4:blocked32,no-such-recipe"})
    assert any("c_recipes" in w.value and "replaced" in w.value for w in at.sidebar.warning)
    assert at.query_params["c_recipes"] == "int4:blocked32"
    # the builder: int4, blocked 64, MSE search → int4:blocked64@mse
    at.selectbox(key="_rb_g").set_value("blocked")
    at.number_input(key="_rb_b").set_value(64)
    at.selectbox(key="_rb_c").set_value("MSE search · float32 scales").run()
    at.button(key="_rb_add").click().run()
    assert not at.exception
    assert at.query_params["c_recipes"] == "int4:blocked32,int4:blocked64@mse"
    assert "int4:blocked64@mse" in list(at.dataframe[0].value["format"])
    # a typed recipe in the grammar joins the table; a typed non-recipe says why
    at.multiselect(key="c_recipes").set_value(["int4:blocked32", "uint8:per-tensor@percentile",
                                                "int5:blocked8"]).run()
    assert any("int5:blocked8" in e.value and "not a recipe" in e.value for e in at.error)
    assert list(at.dataframe[0].value["format"]) == ["int4:blocked32",
                                                      "uint8:per-tensor@percentile"]


def _upload_session(x: np.ndarray, page: str, **settings) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["src"] = "upload"
    for k, v in settings.items():
        at.session_state[k] = v
    at.switch_page(f"pages/{page}.py")
    check(at.run())
    at.file_uploader(key="upload_file").upload("bad.npy", _npy(x))
    return check(at.run())


def test_input_nan_and_inf_are_named_with_saturate_on():
    """A tensor holding NaN and Inf, saturate on: Format Compare and the sweeps name the
    input's own NaN/Inf count, not 'formats turned finite elements into NaN/Inf'."""
    x = synthetic.generate("normal", (24, 40), seed=0)
    x[0, :3] = np.nan
    x[1, 0] = np.inf
    for page in ("format_compare", "round_trip_sweeps"):
        at = _upload_session(x, page)
        text = _all_text(at)
        assert "x itself holds 3 NaN and 1 ±Inf" in text, (page, text)
        assert "turn finite elements into NaN" not in text, (page, text)


def test_an_all_nan_tensor_gives_messages_not_errors():
    x = np.full((8, 16), np.nan, np.float32)
    tabs = ["Clipping range", "Block size", "Repeated round trips", "Chains of formats"]
    views = [("format_compare", {}), ("quantize_lab", {}), ("dynamic_quantization", {})]
    views += [("round_trip_sweeps", {"s_tab": tab}) for tab in tabs]
    for page, settings in views:
        at = _upload_session(x, page, **settings)
        for df in at.dataframe:
            assert "None" not in df.value.astype(str).to_string(), (page, df.value)
        text = _all_text(at)
        assert "has no finite element" in text, (page, text)
        assert "Encountered all NA" not in text, (page, text)


def test_headline_table_holds_each_tensors_values_and_leaves_out_what_cannot_load(monkeypatch):
    """The Compare and Recipes pages' headline table: one column per headline tensor
    (``kind\\nname``, in order) holding the series the given function returns for that tensor,
    computed here from the tensor itself; a tensor that cannot be loaded is left out."""
    from app.compute import HEADLINE_TENSORS, headline_table

    def f16_sqnr(x):  # SQNR (dB) of a float16 round trip, and the tensor's size
        x = x.astype(np.float64)
        noise = np.sum((x - x.astype(np.float16).astype(np.float64)) ** 2)
        return {"float16": 10 * np.log10(np.sum(x * x) / noise), "elements": float(x.size)}

    table = headline_table(lambda x: pd.Series(f16_sqnr(x)))
    assert list(table.columns) == [f"{k}\n{n}" for k, n in HEADLINE_TENSORS]
    assert list(table.index) == ["float16", "elements"]
    for kind, name in HEADLINE_TENSORS:
        expected = f16_sqnr(datasets.load(name))
        assert table[f"{kind}\n{name}"].to_dict() == pytest.approx(expected, rel=1e-12)

    missing = HEADLINE_TENSORS[1][1]
    load = datasets.load

    def load_but_one(name, *a, **k):
        if name == missing:
            raise qcore.QuantizationError(f"no tensor {name!r}")
        return load(name, *a, **k)

    monkeypatch.setattr(datasets, "load", load_but_one)
    table = headline_table(lambda x: pd.Series(f16_sqnr(x)))
    assert list(table.columns) == [f"{k}\n{n}" for k, n in HEADLINE_TENSORS if n != missing]
