"""The model tool's sensitivity runs on a real Dask LocalCluster (2 workers): the same rows,
bit for bit, as in one process, on a real recurrent model (silero-vad, PyTorch export)."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("distributed")
pytest.importorskip("onnxruntime")

import real_models  # noqa: E402

from qcore.errors import QuantizationError  # noqa: E402
from qcore.model.cases import load_case  # noqa: E402
from qcore.model.distributed import CaseSpec, measure_on_dask  # noqa: E402
from qcore.model.graph import ModelError, load_model  # noqa: E402
from qcore.model.sensitivity import measure  # noqa: E402

RECIPES = ["int8:per-axis", "int4:blocked32"]


def _peak_rss() -> int:
    """This process's peak resident memory in bytes (run on each worker): VmHWM, which starts
    afresh with the worker's own address space (ru_maxrss would keep the peak of the process
    it was forked from, across exec)."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _same(a: dict, b: dict) -> bool:
    """Rows equal value for value (NaN equal to NaN, floats bit for bit)."""
    if a.keys() != b.keys():
        return False
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
            continue
        if x != y or type(x) is not type(y):
            return False
    return True


def test_local_cluster_rows_equal_in_process_rows(tmp_path):
    path = real_models.require("silero-vad")
    feeds = tmp_path / "in.npz"
    np.savez(feeds, **real_models.inputs("silero-vad"))
    spec = CaseSpec(str(path), str(feeds))
    local = measure(load_case(str(path), str(feeds)), RECIPES)
    seen, peaks = [], {}
    dist = measure_on_dask(spec, RECIPES, workers=2,
                           progress=lambda d, t, e, et: seen.append((d, t, e, et)),
                           on_client=lambda c: peaks.update(c.run(_peak_rss)))
    assert len(peaks) == 2 and max(peaks.values()) <= path.stat().st_size + 2**30
    assert dist.tensors == local.tensors and dist.recipes == local.recipes
    assert dist.elements == local.elements and dist.float_bits == local.float_bits
    assert dist.signal_power == local.signal_power
    assert len(dist.rows) == len(local.rows) == len(local.tensors) * len(RECIPES)
    assert all(_same(a, b) for a, b in zip(dist.rows, local.rows))
    total_el = sum(local.elements.values()) * len(RECIPES)
    assert seen[0] == (0, len(local.tensors), 0, total_el)
    assert seen[-1] == (len(local.tensors), len(local.tensors), total_el, total_el)


def test_workers_and_scheduler_are_checked_before_anything_runs():
    spec = CaseSpec("nowhere.onnx")
    with pytest.raises(QuantizationError, match="--workers 0"):
        measure_on_dask(spec, RECIPES, workers=0)
    with pytest.raises(QuantizationError, match="--scheduler"):
        measure_on_dask(spec, RECIPES, scheduler="tcp://127.0.0.1:1")


def test_fed_back_case_on_dask_gives_the_same_rows(tmp_path):
    path = real_models.require("silero-vad")
    seq = tmp_path / "seq.npz"
    np.savez(seq, **real_models.audio_steps("silero-vad", 6))
    spec = CaseSpec(str(path), str(seq), feedback="stateN=state")
    local = measure(spec.load(), RECIPES[:1])
    dist = measure_on_dask(spec, RECIPES[:1], workers=2)
    assert len(dist.rows) == len(local.tensors)
    assert all(_same(a, b) for a, b in zip(dist.rows, local.rows))
    assert dist.signal_power == local.signal_power


def test_weights_read_from_external_data_on_disk_equal_loaded_ones(tmp_path):
    """A worker keeps external weights on disk (load_model weights_on_disk): the same arrays
    and rows as the model loaded whole; a location outside the model's folder is refused."""
    import onnx

    model = onnx.load(str(real_models.require("silero-vad")))
    path = tmp_path / "m" / "silero.onnx"
    path.parent.mkdir()
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location="silero.data", size_threshold=0)
    feeds = real_models.inputs("silero-vad")
    whole = load_case(str(path), feeds)
    lean = load_case(load_model(path, weights_on_disk=True), feeds)
    assert lean.weights == whole.weights
    for t in whole.weights:
        assert np.array_equal(lean.arrays[t], whole.arrays[t])
    sens = measure(lean, RECIPES[:1])
    assert all(_same(a, b) for a, b in zip(sens.rows, measure(whole, RECIPES[:1]).rows))
    # the export of a model whose weights stay on disk is a model of its own: the float
    # weights it keeps are copied in, and it equals the export of the model loaded whole
    from qcore.model.export import export_plan
    from qcore.model.plan import Plan

    plan = Plan(8.0, {whole.weights[0]: "int8:per-axis"}, 0, 1, 0.0, 1.0)
    a, b = export_plan(lean.model, plan, lean.arrays), export_plan(whole.model, plan, whole.arrays)
    assert all(t.data_location == 0 for t in a.graph.initializer)
    assert a.SerializeToString() == b.SerializeToString()
    escaped = onnx.load(str(path), load_external_data=False)
    t = next(t for t in escaped.graph.initializer if t.data_location == 1)
    next(e for e in t.external_data if e.key == "location").value = "../outside.data"
    (tmp_path / "outside.data").write_bytes(b"\0" * 4096)
    onnx.save(escaped, str(path))
    with pytest.raises(ModelError, match="outside the model.s folder"):
        load_model(path, weights_on_disk=True)


def test_cli_workers_prints_the_same_table(tmp_path, capsys):
    from qcore.model.__main__ import main

    path = real_models.require("silero-vad")
    feeds = tmp_path / "in.npz"
    np.savez(feeds, **real_models.inputs("silero-vad"))
    args = [str(path), "--inputs", str(feeds), "--recipes", RECIPES[0]]
    assert main(args + ["--out", str(tmp_path / "a.csv")]) == 0
    assert main(args + ["--out", str(tmp_path / "b.csv"), "--workers", "2"]) == 0
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    assert main(args + ["--workers", "2", "--smooth", "0.5"]) == 2
    assert "--smooth changes the model" in capsys.readouterr().err
