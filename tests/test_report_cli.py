"""The report's command line refuses what it cannot use before computing (one 'error:' line,
exit 2), and --resume never mixes rows of different runs."""

from __future__ import annotations

import io
import json
import os
import struct
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from qcore.errors import QuantizationError
from qcore.report import read_rows, run_report
from qcore.report.__main__ import build_parser, main

RECIPES = "int8:per-axis,uint8:per-tensor"


def st(path: Path, tensors: dict[str, np.ndarray]) -> Path:
    header, off, body = {}, 0, b""
    for name, a in tensors.items():
        raw = np.ascontiguousarray(a, np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        body += raw
    hb = json.dumps(header).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", len(hb)) + hb + body)
    return path


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def model(tmp_path) -> Path:
    return st(tmp_path / "a" / "model.safetensors", {"w": np.full((4, 8), 1.0)})


def refused(argv, word: str) -> None:
    code, out, err = run(*argv)
    assert code == 2, (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert word in lines[0], lines[0]
    assert out == ""  # nothing computed, no summary


def test_out_is_checked_before_computing(model, tmp_path):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "folder.csv").mkdir()
    refused([model, "--out", tmp_path / "missing" / "r.csv"], "does not exist")
    refused([model, "--out", tmp_path / "afile" / "r.csv"], "does not exist")
    refused([model, "--out", tmp_path / "folder.csv"], "is a folder")
    refused([model, "--out", tmp_path / "r.txt"], ".csv or .parquet")
    refused([model, "--out", "/proc/r.csv"], "cannot write")
    refused([model, "--out", str(tmp_path / "r\x00.csv")], "null byte")
    assert not list((tmp_path / "a").glob("*.partial.csv"))


def test_numbers_scheduler_and_paths_are_checked(model):
    cores = os.cpu_count() or 1
    refused([model, "--workers", "1000"], f"0 (no Dask) to {cores}")
    refused([model, "--workers", "-1"], "--workers")
    refused([model, "--threads", "0"], "--threads")
    refused([model, "--min-elements", "-1"], ">= 0")
    refused([model, "--top", "-2"], "--top")
    refused([model, "--workers", "two"], "invalid int")
    refused([str(model) + "\x00x"], "null byte")
    t0 = time.perf_counter()
    refused([model, "--scheduler", "tcp://127.0.0.1:9"], "no Dask scheduler")
    refused([model, "--scheduler", "tcp://nowhere"], "not an address")
    assert time.perf_counter() - t0 < 25


def test_library_checks_the_same(model, tmp_path):
    with pytest.raises(QuantizationError, match="--workers"):
        run_report(model, RECIPES, workers=10_000)
    with pytest.raises(QuantizationError, match="does not exist"):
        run_report(model, RECIPES, out=tmp_path / "no" / "r.csv")


def test_help_explains_every_flag_and_the_recipe_grammar():
    parser = build_parser()
    for action in parser._actions:
        assert action.help, action.option_strings
    text = parser.format_help()
    for word in ("TARGET:GRANULARITY[@METHOD]", "blockedN", "per-axis", "mxfp4", "--min-elements",
                 "--no-progress", "file stem", "absmax"):
        assert word in text, word


def test_non_utf8_journal_and_report_are_clear(model, tmp_path):
    out = tmp_path / "r.csv"
    (tmp_path / "r.csv.partial.csv").write_bytes(b"\xff\xfe\x00garbage\n")
    refused([model, "--out", out, "--resume", "--no-progress"], "not UTF-8")
    out.write_bytes(b"\xff\xfe bad")
    with pytest.raises(QuantizationError, match="not UTF-8"):
        read_rows(out)


# ---------------------------------------------------------------------------------------------
# run identity


def test_resume_refuses_another_model_and_fresh_starts_afresh(tmp_path):
    a = st(tmp_path / "a" / "model.safetensors", {"w": np.full((4, 8), 1.0)})
    b = st(tmp_path / "b" / "model.safetensors", {"w": np.full((4, 8), 9.0)})
    out = tmp_path / "r.csv"
    assert run(a, "--recipes", RECIPES, "--out", out, "--no-progress")[0] == 0
    refused([b, "--recipes", RECIPES, "--out", out, "--resume", "--no-progress"], "model")
    assert (read_rows(out)["absmax"] == 1.0).all()  # untouched
    code, _, _ = run(b, "--recipes", RECIPES, "--out", out, "--resume", "--fresh",
                     "--no-progress")
    assert code == 0 and (read_rows(out)["absmax"] == 9.0).all()


def test_resume_refuses_other_options(model, tmp_path):
    out = tmp_path / "r.csv"
    run_report(model, RECIPES, out=out)
    with pytest.raises(QuantizationError, match="options"):
        run_report(model, RECIPES, out=out, resume=True, min_elements=3)


def test_a_rewritten_file_is_computed_again(tmp_path):
    path = st(tmp_path / "m" / "model.safetensors", {"w": np.full((4, 8), 1.0),
                                                     "v": np.full((2, 8), 2.0)})
    out = tmp_path / "r.csv"
    run_report(path, RECIPES, out=out)
    st(path, {"w": np.full((4, 8), 5.0), "v": np.full((2, 8), 2.0)})
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    again = run_report(path, RECIPES, out=out, resume=True)
    assert again.resumed == 0
    rows = again.rows.set_index("tensor")
    assert (rows.loc["w", "absmax"] == 5.0).all() and (rows.loc["v", "absmax"] == 2.0).all()


def test_resume_writes_only_the_recipes_asked(model, tmp_path):
    out = tmp_path / "r.csv"
    run_report(model, RECIPES, out=out)
    sub = run_report(model, "uint8:per-tensor", out=out, resume=True)
    assert sub.resumed == 1
    assert list(sub.rows["recipe"]) == ["uint8:per-tensor"]
    assert list(read_rows(out)["recipe"]) == ["uint8:per-tensor"]


def test_resume_of_an_unchanged_run_reuses_every_row(model, tmp_path):
    out = tmp_path / "r.csv"
    full = run_report(model, RECIPES, out=out).rows
    again = run_report(model, RECIPES, out=out, resume=True)
    assert again.resumed == 1
    pd.testing.assert_frame_equal(again.rows, full, check_exact=True)


def test_a_report_without_identity_is_not_resumed_blindly(model, tmp_path):
    out = tmp_path / "r.csv"
    run_report(model, RECIPES, out=out)
    (tmp_path / "r.csv.run.json").unlink()
    with pytest.raises(QuantizationError, match="no run identity"):
        run_report(model, RECIPES, out=out, resume=True)
    assert len(run_report(model, RECIPES, out=out, resume=True, fresh=True).rows) == 2


def test_one_array_files_are_named_by_their_file_everywhere(tmp_path):
    folder = tmp_path / "tensors"
    folder.mkdir()
    np.savez(folder / "layer0.ffn.out.weight.npz", x=np.full((4, 8), 2.0, np.float32))
    np.savez(folder / "layer1.attn.q.weight.npz", x=np.full((4, 8), 3.0, np.float32))
    np.save(folder / "emb.npy", np.ones((2, 8), np.float32))
    code, out, _ = run(folder, "--list")
    names = [line.split()[0] for line in out.splitlines()]
    assert code == 0 and sorted(names) == ["emb", "layer0.ffn.out.weight", "layer1.attn.q.weight"]
    code, out, _ = run(folder, "--include", "layer0.ffn.out*", "--recipes", "int8:per-axis",
                       "--no-progress", "--out", tmp_path / "r.csv")
    rows = read_rows(tmp_path / "r.csv")
    assert code == 0 and list(rows["tensor"]) == ["layer0.ffn.out.weight"]
    assert rows["absmax"].iloc[0] == 2.0
    assert "layer0.ffn.out.weight" in out  # the summary's worst-tensor table
