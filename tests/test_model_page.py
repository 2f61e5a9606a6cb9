"""The Model Fidelity page under streamlit.testing.v1.AppTest."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from conftest import open_app_page  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from qcore.model import cases, plan, sensitivity  # noqa: E402
from qcore.models import installed_models  # noqa: E402
from tests.test_model import tiny_model  # noqa: E402


def open_page(query: dict) -> AppTest:
    return open_app_page("pages/model_fidelity.py", query)


def site_rows(at: AppTest):
    """The activation sites' table joined with the weights each site's nodes read."""
    return at.table[0].value.merge(at.table[1].value, on="site", how="left")


def metrics(at: AppTest) -> dict:
    return {m.label: m.value for m in at.metric}


@pytest.fixture(autouse=True)
def _tmp_path_is_allowed(tmp_path, monkeypatch):
    """The page reads server paths only under the allowed folders: here, the test's own."""
    monkeypatch.setenv("QCORE_REPORT_ROOTS", str(tmp_path))


def test_path_model_runs_plans_and_exports(tmp_path):
    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(), model)
    at = open_page({"mf_source": "path", "mf_path": str(model), "mf_budget": "6",
                    "mf_runtime": "reference",
                    "mf_recipes": "int8:per-axis,int4:blocked32,mxfp4"})
    assert len(at.get("plotly_chart")) == 3  # heat map, scatter, bits vs fidelity
    case = cases.load_case(str(model), seed=0)
    sens = sensitivity.measure(case, "int8:per-axis,int4:blocked32,mxfp4")
    p = plan.make_plan(sens, 6.0, allow_float=False)
    plan.run_plan(case, p)
    shown = metrics(at)
    assert shown["Bits per weight"] == f"{p.bits_per_element:.4f}"
    assert shown["Output SQNR predicted"] == f"{p.output_sqnr_db_predicted:.2f} dB"
    assert shown["Output SQNR measured"] == f"{p.measured['output_sqnr_db']:.2f} dB"
    assert at.query_params["mf_budget"] == "6.0"
    at.button[1].click().run()  # Build the QDQ model
    assert not at.exception
    assert len(at.get("download_button")) == 2
    assert len(at.warning) + len(at.success) >= 1


def test_bad_path_is_a_message(tmp_path):
    at = open_page({"mf_source": "path", "mf_path": str(tmp_path / "none.onnx")})
    assert any("no such file" in e.value for e in at.error)


def test_paths_outside_the_allowed_folders_are_refused(tmp_path):
    onnx.save(tiny_model(), tmp_path / "tiny.onnx")
    for query in ({"mf_source": "path", "mf_path": "/etc/passwd"},
                  {"mf_source": "path", "mf_path": str(tmp_path / ".." / "x.onnx")},
                  {"mf_source": "path", "mf_path": str(tmp_path / "tiny.onnx"),
                   "mf_npz": "/etc/passwd"}):
        at = open_page(query)
        assert any("allowed folders" in e.value for e in at.error), query
        assert not at.get("plotly_chart") and not at.metric


@pytest.mark.skipif("minilm" not in installed_models(), reason="MiniLM weights not installed")
def test_minilm_subset():
    at = open_page({"mf_source": "minilm", "mf_sentences": "6",
                    "mf_filter": "layer.5.attention.self",
                    "mf_recipes": "int8:per-axis,int4:blocked32", "mf_budget": "6"})
    assert len(at.get("plotly_chart")) == 3
    shown = metrics(at)
    assert "Similarity ranks kept" in shown
    assert float(shown["Bits per weight"]) <= 6.0
    assert np.isfinite(float(shown["Output SQNR measured"].split()[0]))


def test_the_warm_up_process_skips_the_model_load(monkeypatch, tmp_path):
    from app import warm

    onnx.save(tiny_model(), tmp_path / "tiny.onnx")
    monkeypatch.setenv(warm.SERVER_PID, "1")
    at = open_page({"mf_source": "path", "mf_path": str(tmp_path / "tiny.onnx")})
    assert not at.get("plotly_chart") and not at.metric


MANY = "int8:per-axis,uint8:per-tensor,int4:blocked32,float8e4m3fn:per-tensor,int8:per-tensor," \
       "int4:per-axis,uint4:blocked32"  # 2 tensors × 7 recipes: more than runs on opening


def test_results_stay_for_the_session_and_the_url_keeps_the_settings(tmp_path):
    """Run once; a page change and a new session on the same link show the results without
    Run; the settings are in the URL before and after Run."""
    model = tmp_path / "keep.onnx"
    onnx.save(tiny_model(), model)
    query = {"mf_source": "path", "mf_path": str(model), "mf_recipes": MANY,
             "mf_filter": "w", "mf_seed": "3"}
    at = open_page(query)
    assert any("press **Run**" in i.value for i in at.info)
    assert not at.get("plotly_chart")
    for k, v in query.items():
        assert at.query_params[k] == v, k  # written even though the page stopped early
    at.button[0].click().run()  # Run
    assert len(at.get("plotly_chart")) == 3
    shown = metrics(at)
    at.switch_page("pages/home.py").run()
    at.switch_page("pages/model_fidelity.py").run()
    assert not at.exception
    assert len(at.get("plotly_chart")) == 3 and metrics(at) == shown
    again = open_page(query)  # another session on the same link: the server kept the results
    assert len(again.get("plotly_chart")) == 3 and metrics(again) == shown
    assert again.query_params["mf_budget"] and again.query_params["mf_runtime"] == "onnxruntime"


def test_onnxruntime_runtime_offers_only_what_it_runs(tmp_path):
    """The default runtime leaves out recipes onnxruntime cannot run (the page says which,
    before any download) and a link naming one notes the replacement; the exported model then
    loads in onnxruntime and matches the fake-quantized evaluation."""
    import onnxruntime as ort

    from qcore.model.export import unsupported_nodes

    model = tmp_path / "rt.onnx"
    onnx.save(tiny_model(), model)
    at = open_page({"mf_source": "path", "mf_path": str(model),
                    "mf_recipes": "int8:per-axis,mxfp4", "mf_budget": "9"})
    sidebar = " ".join(c.value for c in at.sidebar.caption)
    assert "Not offered" in sidebar and "mxfp4" in sidebar
    assert any("mf_recipes" in w.value and "replaced" in w.value for w in at.sidebar.warning)
    assert at.query_params["mf_recipes"] == "int8:per-axis"
    at.button[1].click().run()  # Build the QDQ model
    assert any("runs every DequantizeLinear" in s.value for s in at.success)
    built = at.session_state["_mf_qdq"][1]
    data = built["data"]
    exported = onnx.load_from_string(data)
    shown = metrics(at)  # latency beside bits and SQNR, the float model timed alongside
    assert set(built["latency_ms"]) == {"1", "all"}
    for k, label in (("1", "Latency, 1 thread"), ("all", "Latency, all threads")):
        assert shown[label] == f"{built['latency_ms'][k]:.1f} ms"
    assert unsupported_nodes(exported) == []
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    assert sess.run(None, {"x": x})[0].shape == (3, 5)


def test_rows_table_is_typed_and_omits_absent_measures(tmp_path):
    """The "All rows" table converts to Arrow (the server's dataframe path): the opset is an
    integer column, uniform rows leave it empty, kl/top1 (no logits here) are not columns."""
    import pyarrow as pa

    from app import model_view

    case = cases.load_case(tiny_model(), seed=0)
    sens = sensitivity.measure(case, "int8:per-axis,int4:blocked32")
    rows = sens.rows + sensitivity.uniform(case, "int8:per-axis,int4:blocked32")
    df = model_view.rows_table(rows)
    pa.Table.from_pandas(df)  # raised ArrowInvalid on the '' opset of the uniform rows
    assert str(df["opset"].dtype) == "Int64"
    assert df["opset"].isna().sum() == 2 and "all weights" in set(df["tensor"])
    assert not {"kl", "top1", "spearman", "cosine_mean"} & set(df.columns)


def test_the_page_says_what_it_needs_in_its_own_words(tmp_path):
    """No pointer to a file the app cannot open."""
    model = tmp_path / "words.onnx"
    onnx.save(tiny_model(), model)
    at = open_page({"mf_source": "path", "mf_path": str(model)})
    text = " ".join(e.value for e in [*at.markdown, *at.caption, *at.info])
    assert "docs/" not in text and ".md" not in text


@pytest.mark.skipif("minilm" not in installed_models(), reason="MiniLM weights not installed")
def test_sentences_beyond_the_shipped_ones_are_replaced_with_a_note():
    from app import model_view

    most = model_view.sentence_count()
    at = open_page({"mf_source": "minilm", "mf_sentences": "5000", "mf_filter": "no such tensor"})
    assert at.query_params["mf_sentences"] == str(most)
    assert any(f"mf_sentences='5000' → '{most}'" in w.value for w in at.sidebar.warning)


def two_output_model():
    """tiny_model with its hidden layer as a second output ("r", far more power than logits)."""
    m = tiny_model()
    m.graph.output.append(onnx.helper.make_tensor_value_info("r", onnx.TensorProto.FLOAT,
                                                             ["batch", 64]))
    return m


def test_several_outputs_each_measured_and_chosen(tmp_path):
    """A model with two outputs: the plan's per-output table gives each output's SQNR as
    onnxruntime's own runs of the float and the planned model give it; the figure is
    −10·log10 of the mean ratio; choosing one output makes the figure that output's SQNR."""
    import onnxruntime as ort

    model = tmp_path / "two.onnx"
    onnx.save(two_output_model(), model)
    query = {"mf_source": "path", "mf_path": str(model), "mf_recipes": "int4:blocked32",
             "mf_budget": "9"}
    at = open_page(query)
    table = at.dataframe[0].value.set_index("output")
    assert list(table.index) == ["logits", "r"]
    # outside: the planned weights fed to onnxruntime, outputs compared in float64
    case = cases.load_case(str(model), seed=0)
    p = plan.make_plan(sensitivity.measure(case, "int4:blocked32"), 9.0, allow_float=False)
    weights = plan.planned_weights(case, p)
    feeds = case.batches[0]
    so = ort.SessionOptions()  # unfused kernels, as the page's runs use
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.read_bytes(), so, providers=["CPUExecutionProvider"])
    ref = dict(zip(["logits", "r"], sess.run(None, feeds)))
    m = onnx.load(str(model))
    for init in m.graph.initializer:
        if init.name in weights:
            init.CopyFrom(onnx.numpy_helper.from_array(weights[init.name], init.name))
    got = dict(zip(["logits", "r"], ort.InferenceSession(
        m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)))
    ratios = {}
    for k in ref:
        y, yh = ref[k].astype(np.float64), got[k].astype(np.float64)
        ratios[k] = np.sum((y - yh) ** 2) / np.sum(y * y)
        # weights as initializers here, as graph inputs in the page's session: float32 sums
        # may round differently, a few millionths of a dB
        assert table.loc[k, "SQNR (dB)"] == pytest.approx(-10 * np.log10(ratios[k]), abs=1e-4)
    both = -10 * np.log10(np.mean(list(ratios.values())))
    assert metrics(at)["Output SQNR measured"] == f"{both:.2f} dB"
    one = open_page({**query, "mf_outputs": "logits"})
    assert metrics(one)["Output SQNR measured"] == f"{-10 * np.log10(ratios['logits']):.2f} dB"
    assert one.query_params["mf_outputs"] == "logits"


def test_the_heat_map_shows_one_output_on_request(tmp_path):
    model = tmp_path / "two.onnx"
    onnx.save(two_output_model(), model)
    at = open_page({"mf_source": "path", "mf_path": str(model), "mf_recipes": "int8:per-axis",
                    "mf_heat": "r"})
    spec = at.get("plotly_chart")[0].proto.spec
    assert "SQNR of output r" in spec
    assert at.query_params["mf_heat"] == "r"


@pytest.mark.skipif("minilm" not in installed_models(), reason="MiniLM weights not installed")
def test_minilm_w8a8_int8_and_float8_are_one_choice_apart():
    """Static int8 activations with int8 weights (W8A8 int8), then static float8e4m3fn: the
    page's figure for each is the exported QDQ model's, run in onnxruntime; the sites' own
    sensitivity is drawn and listed."""
    from qcore.model import calibrate as act_cal
    from qcore.model import qdq as act_qdq
    from qcore.model import sites as act_sites
    from qcore.model.export import export_plan
    from qcore.model.graph import make_session

    tensor = "encoder.layer.5.attention.self.query.weight"
    at = open_page({"mf_source": "minilm", "mf_sentences": "4", "mf_filter": tensor,
                    "mf_recipes": "int8:per-axis,float8e4m3fn:per-axis",
                    "mf_act": "static:int8", "mf_budget": "8.1"})
    assert len(at.get("plotly_chart")) == 4  # heat map, scatter, sites, bits vs fidelity
    case = cases.load_case("minilm", sentences=4)
    for act_type, weights in (("int8", "int8:per-axis"),
                              ("float8e4m3fn", "float8e4m3fn:per-axis")):
        if act_type != "int8":
            at.selectbox(key="mf_act").set_value(f"static:{act_type}").run()
            assert not at.exception
        table = at.dataframe[0].value.set_index("weights")
        shown = table.loc[weights, "output SQNR (dB)"]
        assert table.loc[weights, "activations"] == f"static:{act_type}@minmax"
        # outside: the QDQ model in onnxruntime, against the float model's outputs
        specs = act_cal.specs_for(case, act_sites.parse_activations(f"static:{act_type}"))
        p = plan.Plan(0.0, {tensor: weights}, 0, 1, 0.0, 1.0)
        qdq_model = act_qdq.insert_qdq(export_plan(case.model, p, case.arrays), specs)
        sess = make_session(qdq_model)  # onnxruntime with the page's session options
        out = [np.concatenate([sess.run(None, b)[0] for b in case.batches])]
        restored = np.empty_like(out[0])
        restored[case.order] = out[0]
        y = case.reference[0].astype(np.float64)
        noise = np.sum((y - restored.astype(np.float64)) ** 2)
        assert shown == pytest.approx(10 * np.log10(np.sum(y * y) / noise), abs=1e-9)
    assert at.query_params["mf_act"] == "static:float8e4m3fn"
    sites = site_rows(at)
    assert len(sites) == len(specs) and sites["output SQNR alone (dB)"].is_monotonic_increasing
    assert "layer5.input" in set(sites["site"])  # the shipped tensors' name (qcore.names)
    assert "encoder.layer.5.attention.self.query/key/value.weight" in set(sites["weights"])
    assert set(sites["tensor"]) == {sp.site for sp in specs}
    assert any("Activations static:float8e4m3fn@minmax on" in c.value for c in at.caption)
    at.button[1].click().run()  # Build the QDQ model: weights and activation pairs
    assert any("onnxruntime loads this model" in s.value for s in at.success)


def test_activation_sites_are_named_by_the_weights_that_read_them(tmp_path):
    """The per-site table and bar chart name each site of a model that is no BERT encoder by
    its graph tensor (the name Model Report gives it), with the nodes that read it and their
    weights (as the ONNX graph says) in columns of their own."""
    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(), model)
    at = open_page({"mf_source": "path", "mf_path": str(model), "mf_runtime": "reference",
                    "mf_recipes": "int8:per-axis", "mf_act": "static:int8", "mf_budget": "8"})
    assert not at.exception
    g = tiny_model().graph
    weights = {t.name for t in g.initializer}
    readers = {n.input[0]: n.input[1] for n in g.node
               if n.op_type == "MatMul" and n.input[1] in weights}
    nodes = {n.input[0]: f"MatMul {n.output[0]}" for n in g.node
             if n.op_type == "MatMul" and n.input[1] in weights}
    sites = site_rows(at)
    assert dict(zip(sites["tensor"], sites["site"])) == {t: t for t in readers}
    assert dict(zip(sites["tensor"], sites["feeds"])) == nodes
    bars = at.get("plotly_chart")[2].proto.spec
    import json

    bar = json.loads(bars)["data"][0]  # each bar: the site, its weights on hover
    assert dict(zip(bar["y"], bar["customdata"])) == readers
    # beside each site's sensitivity, its range statistics, the weights it feeds, and a
    # sentence for the most sensitive one
    for col in ("max |x|", "std", "max / std", "excess kurtosis", "outlier channels",
                "their share of the range %", "feeds"):
        assert col in sites, col
    np.testing.assert_allclose(sites["max / std"], sites["max |x|"] / sites["std"], rtol=1e-9)
    assert dict(zip(sites["tensor"], sites["weights"])) == readers
    words = [m.value for m in at.markdown if m.value.startswith("**The plan in words:**")]
    assert words and "int8:per-axis" in words[0], words
    why = [m.value for m in at.markdown if m.value.startswith("**Why ")]
    assert why and sites["site"].iloc[0] in why[0] and "int8" in why[0], why


def test_state_fed_back_shows_sqnr_per_step(tmp_path):
    """silero-vad (a real recurrent model) over 6 steps, stateN fed to state: the page's SQNR
    per step is that of plain onnxruntime loops over the float model and over the plan's QDQ
    export, each feeding its own state (tests/test_model_feedback's loop)."""
    import shutil

    import real_models
    from test_model_feedback import _loop, _sqnr

    from qcore.model.export import export_plan
    from qcore.model.feedback import load_fed_back_case

    model = tmp_path / "vad.onnx"
    shutil.copy(real_models.require("silero-vad"), model)
    seq = real_models.audio_steps("silero-vad", 6)
    np.savez(tmp_path / "seq.npz", **seq)
    at = open_page({"mf_source": "path", "mf_path": str(model),
                    "mf_npz": str(tmp_path / "seq.npz"), "mf_feedback": "stateN=state",
                    "mf_recipes": "int8:per-axis,int4:per-axis", "mf_budget": "6"})
    at.button[0].click().run()  # Run: 8 weights × 2 recipes
    charts = at.get("plotly_chart")
    per_step = [c for c in charts if "per step" in c.proto.spec]
    assert len(per_step) == 1
    assert at.query_params["mf_feedback"] == "stateN=state"
    case = load_fed_back_case(str(model), seq, "stateN=state")
    budget = float(at.query_params["mf_budget"])
    p = plan.make_plan(sensitivity.measure(case, "int8:per-axis,int4:per-axis"), budget,
                       allow_float=False)
    plan.run_plan(case, p)
    m = onnx.load(str(model))
    ref, got = _loop(m, seq), _loop(export_plan(m, p, case.arrays), seq)
    for i, (r, o) in enumerate(zip(ref, got)):
        assert p.measured["sqnr_db_per_step"][i] == pytest.approx(_sqnr(r, o), abs=1e-6)
    shown = metrics(at)["Output SQNR measured"]
    assert shown == f"{p.measured['output_sqnr_db']:.2f} dB"


def test_refined_plan_is_the_command_lines(tmp_path):
    """mf_refine=N: the page's refined figure and bits are those of python -m qcore.model
    --refine N on the same model, inputs and budget; the refined plan is the one exported."""
    import json

    from qcore.model.__main__ import main

    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(), model)
    recipes_ = "int8:per-axis,int4:blocked32,uint8:per-tensor"
    at = open_page({"mf_source": "path", "mf_path": str(model), "mf_recipes": recipes_,
                    "mf_budget": "7.5", "mf_refine": "6", "mf_runtime": "reference"})
    shown = metrics(at)
    out = tmp_path / "plan.json"
    assert main([str(model), "--recipes", recipes_, "--budget", "7.5", "--no-float",
                 "--refine", "6", "--plan", str(out)]) == 0
    cli = json.loads(out.read_text())
    assert shown["Output SQNR refined"] == f"{cli['refine']['output_sqnr_db']:.2f} dB"
    assert float(shown["Output SQNR refined"].split()[0]) >= \
        float(shown["Output SQNR measured"].split()[0])
    at.button[1].click().run()  # Build the QDQ model
    assert any("onnxruntime loads this model" in s.value for s in at.success)
