"""The benchmark runs end to end on tiny sizes (correct output shape; no timing assertions)."""

from __future__ import annotations

import json

import pytest

from qcore import bench


def test_quick_benchmark_runs_and_writes_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert bench.main(["--quick", "--size", "32x64", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| Q int8 per-tensor |" in printed
    assert "copy bandwidth" in printed
    data = json.loads(out.read_text())
    names = [c["name"] for c in data["cases"]]
    assert names == [c.name for c in bench.default_cases(quick=True)]
    for case in data["cases"]:
        assert case["results"]["qcore"] > 0
        assert case["roofline"] > 0


def test_every_case_runs_without_peers(capsys):
    assert bench.main(["--size", "8x64", "--no-peers"]) == 0
    printed = capsys.readouterr().out
    for case in bench.default_cases():
        assert f"| {case.name} |" in printed


def test_peers_are_optional(monkeypatch):
    # a missing peer package only removes its column
    monkeypatch.setitem(bench.PEERS, "onnxruntime", lambda case, inputs: None)
    cases, _ = bench.run(bench.default_cases(quick=True)[:2], (8, 64))
    assert all("onnxruntime" not in c.results for c in cases)
    assert all(c.results["qcore"] > 0 for c in cases)


def test_inputs_are_shared_and_valid():
    for case in bench.default_cases():
        inputs = bench.make_inputs(case, (8, 64))
        fn = bench.qcore_impl(case, inputs)
        fn()  # every case is a valid qcore call


def test_size_parsing():
    assert bench._parse_size("4096x4096") == (4096, 4096)
    assert bench._parse_size("8192") == (2, 4096)


def test_cuda_backend_without_gpu_says_why(capsys):
    from qcore.kernels import cuda

    if cuda.cuda_available():
        pytest.skip("a GPU is present")
    assert bench.main(["--backend", "cuda", "--size", "8x64"]) == 2
    assert "no usable GPU" in capsys.readouterr().err
