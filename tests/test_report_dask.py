"""qcore.report on a real Dask LocalCluster: the same rows, bit for bit, as in-process."""

from __future__ import annotations

import pandas as pd
import pytest

from qcore.report import read_rows, run_report
from qcore.report.synthetic import write_checkpoint

pytest.importorskip("distributed")


def test_local_cluster_rows_equal_in_process_rows(tmp_path):
    index = write_checkpoint(tmp_path / "ckpt", 300_000, hidden=32, shards=2)
    cut = sorted((tmp_path / "ckpt").glob("*.safetensors"))[-1]
    cut.write_bytes(cut.read_bytes()[:-64])  # the last tensor of the last shard is truncated
    recipes = ["int8:per-axis", "uint8:per-tensor", "int4:blocked32", "mxfp4"]
    local = run_report(index, recipes)
    seen = []
    dist = run_report(index, recipes, workers=2, out=tmp_path / "d.csv",
                      progress=lambda d, t, e, et: seen.append(d))
    pd.testing.assert_frame_equal(dist.rows, local.rows, check_exact=True)
    pd.testing.assert_frame_equal(read_rows(tmp_path / "d.csv"), local.rows, check_exact=True)
    errors = dist.rows[dist.rows["error"] != ""]
    assert errors["tensor"].nunique() == 1 and "truncated" in errors["error"].iloc[0]
    assert seen[-1] == local.rows["tensor"].nunique()
