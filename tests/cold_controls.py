"""First use of each Explorer control on a cold numba cache: ``python tests/cold_controls.py``.

One process primes an empty cache folder with what a first visit compiles: Home's example, the
Quantize Lab's default view and the kernels the Lab's settings share (app.warm.warm_lab, the
server's first warm-up step, which starts a second after the first page). Then, for each control, a fresh
process gets a copy of that primed folder, runs the default view again (loading it from the
cache, untimed) and times the first computation with the control changed: what a user waits
for on the first click of that control when the background warm-up has not reached it yet.
Prints one JSON line per case (seconds of wall time, and of this process's CPU time: a compile
runs on one core, so on a busy machine the CPU time is what the same click takes on a quiet
one) and the host's CPU and load. Not a test (no assert):
the figures depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: case -> the Python expression computed (app.compute with a changed control).
CASES = {
    "float8e4m3fn blocked": "compute.lab.__wrapped__(SPEC, QuantConfig(target='float8e4m3fn', "
                            "granularity='blocked'))",
    "float16 scale": "compute.lab.__wrapped__(SPEC, QuantConfig(scale_dtype='float16'))",
    "int8 blocked, float16 scale": "compute.lab.__wrapped__(SPEC, QuantConfig("
                                   "granularity='blocked', scale_dtype='float16'))",
    "block-size tab": "compute.block_sweep.__wrapped__(SPEC, QuantConfig())",
    "uint16 per-axis": "compute.lab.__wrapped__(SPEC, QuantConfig(target='uint16', "
                       "granularity='per-axis'))",
    "int8 per-axis": "compute.lab.__wrapped__(SPEC, QuantConfig(granularity='per-axis'))",
    "int4 target": "compute.lab.__wrapped__(SPEC, QuantConfig(target='int4'))",
    "uint8 absmax": "compute.lab.__wrapped__(SPEC, QuantConfig(target='uint8', method='absmax'))",
    "float4 target": "compute.lab.__wrapped__(SPEC, QuantConfig(target='float4e2m1'))",
    "float8e5m2fnuz, saturate off": "compute.lab.__wrapped__(SPEC, QuantConfig("
                                    "target='float8e5m2fnuz', saturate=False))",
    "bfloat16 scale": "compute.lab.__wrapped__(SPEC, QuantConfig(scale_dtype='bfloat16'))",
    "percentile": "compute.lab.__wrapped__(SPEC, QuantConfig(method='percentile'))",
    "mse": "compute.lab.__wrapped__(SPEC, QuantConfig(method='mse'))",
    "mx": "compute.lab.__wrapped__(SPEC, QuantConfig(method='mx', granularity='blocked', "
          "target='float8e4m3fn'))",
    "opset 10": "compute.lab.__wrapped__(SPEC, QuantConfig(opset=10, target='uint8'))",
    "Format Compare": "compute.compare.__wrapped__(SPEC, ('int8', 'int4', 'float8e4m3fn'), "
                      "QuantConfig())",
    "clipping sweep": "compute.clipping.__wrapped__(SPEC, QuantConfig())",
    "Dynamic page": "compute.dynamic.__wrapped__(SPEC)",
}

PRELUDE = """
import time, json
t0 = time.perf_counter()
from app import compute, warm
from app.controls import QuantConfig
from app.tensors import TensorSpec
SPEC = TensorSpec()
warm.warm_lab()
compute.lab.__wrapped__(SPEC, QuantConfig())
primed = time.perf_counter() - t0
"""


def _run(code: str, cache: Path) -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT),
           "QCORE_APP_WARMUP": "0"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=1800)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    import llvmlite.binding as llvm

    print(json.dumps({"cpu": llvm.get_host_cpu_name(), "cores": len(os.sched_getaffinity(0)),
                      "load": os.getloadavg()}), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        primed = Path(tmp) / "primed"
        t0 = time.perf_counter()
        _run(PRELUDE + "print(json.dumps({'s': primed}))", primed)
        print(json.dumps({"case": "prime (Home + Lab default, empty cache)",
                          "s": round(time.perf_counter() - t0, 1)}), flush=True)
        for name, expr in CASES.items():
            cache = Path(tmp) / name.replace(" ", "_").replace(",", "")
            shutil.copytree(primed, cache)
            code = PRELUDE + (f"t1 = time.perf_counter()\nc1 = time.process_time()\n{expr}\n"
                              "print(json.dumps({'s': time.perf_counter() - t1, "
                              "'cpu': time.process_time() - c1, 'default': primed}))")
            r = _run(code, cache)
            print(json.dumps({"case": name, "first_use_s": round(r["s"], 2),
                              "first_use_cpu_s": round(r["cpu"], 2),
                              "default_view_from_cache_s": round(r["default"], 2),
                              "load": os.getloadavg()}), flush=True)


if __name__ == "__main__":
    main()
