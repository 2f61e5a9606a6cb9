"""``python -m qcore.bench.report``: the report's measures (a benchmark, not a test).

- ``minilm``: the whole all-MiniLM-L6-v2 checkpoint × the 8 default recipes in this process:
  wall time and element-recipes/s, against the baseline of running the same recipes
  (calibration + ``quantize_linear`` + ``dequantize_linear`` + ``error_metrics``) on ONE tensor
  of the same total size (every float tensor of the model concatenated, rows of 384).
- ``synthetic``: a synthetic sharded bfloat16 checkpoint of ``--gb`` GB (written under
  ``--tmp``, deleted afterwards): peak RSS of an in-process run (a child process) and of each
  Dask worker, and Dask ``LocalCluster(n_workers=2)`` throughput against in-process, with the
  rows compared.

Each timing is the best of ``--repeat`` runs after a warm-up (numba compiles excluded).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ..models import find_model
from ..recipes import DEFAULT_RECIPES, parse_recipe
from ..report.core import run_report
from ..report.sliced import run_recipe
from ..report.sources import list_tensors, read_tensor
from ..report.synthetic import write_checkpoint


def host_cpu() -> str:
    try:
        import llvmlite.binding as b

        return b.get_host_cpu_name()
    except Exception:  # noqa: BLE001
        return "unknown"


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def bench_minilm(recipes: list[str], repeat: int) -> dict:
    model = find_model("minilm")
    refs = [r for r in list_tensors(model) if r.supported]
    flat = np.concatenate([read_tensor(r).reshape(-1) for r in refs])
    n = flat.size - flat.size % 384
    big = flat[:n].reshape(-1, 384)
    del flat
    parsed = [parse_recipe(r) for r in recipes]
    for r in parsed:  # warm-up: compile every kernel specialisation
        run_recipe(big[:4096], r)
    run_report(model, recipes, include=["*LayerNorm*", "*query*"])

    def baseline():
        for r in parsed:
            run_recipe(big, r)

    def report():
        run_report(model, recipes)

    t_base, t_rep = float("inf"), float("inf")
    for _ in range(repeat):  # interleaved: a busy machine hits both alike
        t_base = min(t_base, _best(baseline, 1))
        t_rep = min(t_rep, _best(report, 1))
    total = sum(r.elements for r in refs)
    return {"tensors": len(refs), "elements": total, "recipes": len(recipes),
            "report_s": t_rep, "report_elem_per_s": total * len(recipes) / t_rep,
            "baseline_elements": int(n), "baseline_s": t_base,
            "baseline_elem_per_s": n * len(recipes) / t_base,
            "ratio": (total / t_rep) / (n / t_base)}


_RSS_CHILD = """
import sys, time
from qcore.report import run_report
t = time.perf_counter()
r = run_report(sys.argv[1], sys.argv[2].split(","), out=sys.argv[3])
with open("/proc/self/status") as fh:
    hwm = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
print(time.perf_counter() - t, r.elements, hwm * 1024, flush=True)
"""


def _worker_peak() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def bench_synthetic(gb: float, recipes: list[str], tmp: str, workers: int, hidden: int,
                    vocab: int) -> dict:
    if tmp:
        Path(tmp).mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="qcore-report-bench-", dir=tmp))
    try:
        t = time.perf_counter()
        index = write_checkpoint(folder / "ckpt", int(gb * 1e9), hidden=hidden, vocab=vocab)
        written = sum(f.stat().st_size for f in (folder / "ckpt").glob("*.safetensors"))
        gen_s = time.perf_counter() - t
        # warm the numba cache on a tiny checkpoint of the same kind
        tiny = write_checkpoint(folder / "tiny", 300_000, hidden=32, shards=2)
        run_report(tiny, recipes)
        # in-process, in a child so its peak RSS is its own: the child's VmHWM (RUSAGE_CHILDREN's
        # ru_maxrss keeps this process's peak across the child's spawn and exec)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        out = subprocess.run([sys.executable, "-c", _RSS_CHILD, str(index), ",".join(recipes),
                              str(folder / "local.csv")], env=env, check=True,
                             capture_output=True, text=True).stdout.split()
        local_s, elements, rss_local = float(out[0]), int(out[1]), int(out[2])
        peaks: dict = {}

        def ask(client):
            peaks.update(client.run(_worker_peak))

        t = time.perf_counter()
        run_report(index, recipes, workers=workers, out=folder / "dask.csv", on_client=ask)
        dask_s = time.perf_counter() - t
        from ..report.core import read_rows

        a, b = read_rows(folder / "local.csv"), read_rows(folder / "dask.csv")
        same = a.equals(b)
        differ = {}
        if not same and a.shape == b.shape:
            for c in a.columns:
                ne = ~((a[c] == b[c]) | (a[c].isna() & b[c].isna()))
                if ne.any():
                    differ[c] = [int(ne.sum()), str(a[c][ne].iloc[0]), str(b[c][ne].iloc[0]),
                                 str(a["tensor"][ne].iloc[0]), str(a["recipe"][ne].iloc[0])]
        return {"bytes": written, "elements": elements, "recipes": len(recipes),
                "generate_s": gen_s, "local_s": local_s,
                "local_elem_per_s": elements * len(recipes) / local_s,
                "local_peak_rss": rss_local, "local_peak_rss_before": before * 1024,
                "dask_workers": workers, "dask_s": dask_s,
                "dask_elem_per_s": elements * len(recipes) / dask_s,
                "dask_worker_peak_rss": sorted(peaks.values()),
                "dask_vs_local": local_s / dask_s, "rows_identical": bool(same),
                "rows_shape": [list(a.shape), list(b.shape)], "differ": differ}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m qcore.bench.report")
    p.add_argument("what", choices=["minilm", "synthetic"])
    p.add_argument("--recipes", default=",".join(DEFAULT_RECIPES))
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--gb", type=float, default=2.1)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=8192,
                   help="embedding rows (the largest tensor sets the peak memory)")
    p.add_argument("--tmp", default=tempfile.gettempdir())
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    recipes = [r.strip() for r in a.recipes.split(",") if r.strip()]
    if a.what == "minilm":
        res = bench_minilm(recipes, a.repeat)
    else:
        res = bench_synthetic(a.gb, recipes, a.tmp, a.workers, a.hidden, a.vocab)
    res = {"host_cpu": host_cpu(), "cpus": os.cpu_count(), "what": a.what,
           "recipe_names": recipes, **res}
    text = json.dumps(res, indent=1, default=float)
    print(text)
    if a.json:
        Path(a.json).write_text(text)
    print(pd.Series({k: v for k, v in res.items() if not isinstance(v, list)}).to_string(),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
